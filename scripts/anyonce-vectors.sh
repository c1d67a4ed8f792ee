#!/usr/bin/env bash
# anyonce-vectors.sh — prints the directory of the public conformance vectors of
# draft-ietf-httpapi-idempotency-key-header-07 (github.com/sns45/anyonce,
# conformance/vectors, Apache-2.0), fetched, not copied into this repository:
#
#   1. $IDEMGATE_ANYONCE_VECTORS, when it is set (a checkout's conformance/vectors);
#   2. the Go module github.com/sns45/anyonce/go from the Go module proxy
#      (`go mod download`, into the module cache; ANYONCE_VERSION, default
#      latest), which carries the vectors under conformance/vectors;
#   3. else a shallow clone of the repository under .tmp/anyonce-src.
#
# The directory holds core/ and profile/, one JSON vector a file. `make test-ietf`
# runs internal/app's TestAnyonceVectors on it.
set -euo pipefail

have() { [[ -d "$1/core" && -d "$1/profile" ]] && compgen -G "$1/core/*.json" >/dev/null; }

if [[ -n "${IDEMGATE_ANYONCE_VECTORS:-}" ]]; then
	have "$IDEMGATE_ANYONCE_VECTORS" || { echo "anyonce-vectors: $IDEMGATE_ANYONCE_VECTORS has no core/ and profile/ vectors" >&2; exit 1; }
	echo "$IDEMGATE_ANYONCE_VECTORS"
	exit 0
fi

version=${ANYONCE_VERSION:-latest}
if dir=$(cd "$(mktemp -d)" && go mod download -json "github.com/sns45/anyonce/go@$version" 2>/dev/null |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p'); then
	for d in "$dir/conformance/vectors" "$dir/../conformance/vectors"; do
		if [[ -n "$dir" ]] && have "$d"; then
			echo "$d"
			exit 0
		fi
	done
fi
echo "anyonce-vectors: github.com/sns45/anyonce/go@$version from the Go module proxy carries no vectors; cloning" >&2

root=$(cd "$(dirname "$0")/.." && pwd)
src="$root/.tmp/anyonce-src"
if ! have "$src/conformance/vectors"; then
	rm -rf "$src"
	git clone --quiet --depth 1 https://github.com/sns45/anyonce "$src" >&2
fi
have "$src/conformance/vectors" || { echo "anyonce-vectors: $src has no conformance/vectors" >&2; exit 1; }
echo "$src/conformance/vectors"
