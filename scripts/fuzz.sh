#!/usr/bin/env bash
# fuzz.sh [FUZZTIME]: runs every fuzz target in the module for FUZZTIME
# (default 10s) each. The targets come from `go test -list`, so a new Fuzz
# function is fuzzed without anyone editing a list. Minimization is off: a
# failing input is kept whole under testdata/fuzz, and minimizing the slow
# parsers' inputs took longer than the run itself.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-10s}
go=${GO:-go}
n=0
# Only packages whose tests mention a Fuzz function are compiled for the list.
for dir in $(grep -rlE '^func Fuzz[A-Z0-9_]' --include='*_test.go' . | xargs -r -n1 dirname | sort -u); do
	pkg=$($go list "$dir")
	for target in $($go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		echo "== $pkg $target"
		$go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -fuzzminimizetime 0 "$pkg"
		n=$((n + 1))
	done
done
if ((n == 0)); then
	echo "fuzz.sh: no fuzz targets found" >&2
	exit 1
fi
echo "fuzz.sh: $n targets fuzzed for $fuzztime each"
