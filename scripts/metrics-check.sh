#!/usr/bin/env bash
# metrics-check.sh BIN PROMTOOL_DIR — runs `BIN demo` on loopback ports,
# sends it a keyed write, its replay and a pass-through read, and pipes its
# /metrics into `promtool check metrics` (scripts/promtool.sh). Stops the
# demo it started (by PID) whatever happens.
set -euo pipefail

bin=${1:?usage: metrics-check.sh BIN PROMTOOL_DIR}
dir=${2:?usage: metrics-check.sh BIN PROMTOOL_DIR}
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp)
"$bin" demo --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 --log-level error >"$out" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -f "$out"' EXIT

for _ in $(seq 100); do
	grep -q '/healthz' "$out" && break
	sleep 0.1
done
admin=$(sed -n 's|^ *admin *\(http://[^ ]*\)/healthz.*|\1|p' "$out")
proxy=$(sed -n 's|^ *proxy *\(http://[^ ]*\) .*|\1|p' "$out")
[ -n "$admin" ] && [ -n "$proxy" ] || { echo "metrics-check: demo did not start:"; cat "$out"; exit 1; }

for _ in 1 2; do
	curl -fsS -o /dev/null -X POST -H 'Authorization: Bearer metrics-check' -H 'Idempotency-Key: metrics-check' -H 'Content-Type: application/json' \
		-d '{"items":[]}' "$proxy/ucp/v1/carts" || true
done
# Any answer will do (the demo has no cart 1: 404); it fills the GET series.
curl -sS -o /dev/null "$proxy/ucp/v1/carts/1" || true

curl -fsS "$admin/metrics" | bash "$here/promtool.sh" "$dir" check metrics
echo "metrics-check: promtool check metrics: clean"
