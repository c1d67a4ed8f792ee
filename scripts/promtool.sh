#!/usr/bin/env bash
# promtool.sh DIR [ARGS...] — runs promtool from Debian's prometheus package,
# unpacked (not installed) under DIR: `apt-get download` fetches the .deb and
# `dpkg -x` extracts it, so no Prometheus service is installed or started.
# Idempotent: the unpacked binary is reused while it runs.
#
#   bash scripts/promtool.sh .tmp/promtool test rules deploy/monitoring/idemgate-rules.test.yaml
#   bash scripts/promtool.sh .tmp/promtool path   # prints the binary's path
set -euo pipefail

dir=${1:?usage: promtool.sh DIR [promtool args... | path]}
shift
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
bin="$dir/root/usr/bin/promtool"

if ! "$bin" --version >/dev/null 2>&1; then
	(
		cd "$dir"
		rm -f prometheus_*.deb
		if ! apt-get download prometheus >/dev/null 2>&1; then
			apt-get update >/dev/null
			apt-get download prometheus >/dev/null
		fi
		rm -rf root
		dpkg -x prometheus_*.deb root
	)
	"$bin" --version >/dev/null
fi

if [ "${1:-}" = path ]; then
	echo "$bin"
	exit 0
fi
exec "$bin" "$@"
