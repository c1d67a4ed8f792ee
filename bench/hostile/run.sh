#!/usr/bin/env bash
# bench/hostile/run.sh [hostile flags]: issue 15's hostile-load benchmark.
#
# Builds idemgate (from this tree), bench/upstream and bench/hostile, starts
# the upstream and idemgate with the chart's budget (max_buffered_bytes
# 64 MiB) on 127.0.0.1, runs bench/hostile against them and prints its
# table, then stops both (by PID). GOMEMLIMIT is passed through from the
# environment: run it with and without (e.g. GOMEMLIMIT=460MiB, 90 % of the
# chart's 512 Mi) to compare. Ports: HOSTILE_PORT (default 18096) and the
# two after it.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=bench/.bin
mkdir -p "$bin"
go build -trimpath -o "$bin/idemgate" ./cmd/idemgate
go build -trimpath -o "$bin/" ./bench/upstream ./bench/hostile
port=${HOSTILE_PORT:-18096}
dir=$(mktemp -d)
cat >"$dir/hostile.yaml" <<YAML
listen: "127.0.0.1:$port"
admin_listen: "127.0.0.1:$((port + 1))"
max_buffered_bytes: 67108864
upstream:
  url: "http://127.0.0.1:$((port + 2))"
  timeout: 30s
edge_limit:
  rate: 0
idempotency:
  require_identity: false
routes:
  - name: create_cart
    method: POST
    path: /ucp/v1/carts
    idempotent: true
YAML
"$bin/upstream" -listen "127.0.0.1:$((port + 2))" &
up=$!
"$bin/idemgate" --config "$dir/hostile.yaml" >"$dir/idemgate.log" 2>&1 &
ig=$!
trap 'kill $ig $up 2>/dev/null || true; wait $ig $up 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 100); do
	curl -fsS "http://127.0.0.1:$((port + 1))/readyz" >/dev/null 2>&1 && break
	sleep 0.1
done
"$bin/hostile" -url "http://127.0.0.1:$port/ucp/v1/carts" -metrics "http://127.0.0.1:$((port + 1))/metrics" -pid "$ig" "$@"
