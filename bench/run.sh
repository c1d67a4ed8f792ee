#!/usr/bin/env bash
# bench/run.sh [driver flags]: idemgate's end-to-end benchmark.
#
# Builds idemgate and the bench tools, installs Debian's nginx-light when
# nginx is missing, starts a standalone Redis alone (scripts/redis-test.sh
# start-standalone) for the Redis-store scenarios, and runs bench/driver,
# which prints the tables that BENCHMARKS.md records. Traffic stays on 127.0.0.1; every run is bounded.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=bench/.bin
mkdir -p "$bin"
go build -trimpath -o "$bin/idemgate" ./cmd/idemgate
go build -trimpath -o "$bin/" ./bench/upstream ./bench/bareproxy ./bench/loadgen ./bench/driver
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light >/dev/null
fi
nginx=$(command -v nginx || echo /usr/sbin/nginx)
redis_dir=$(mktemp -d)
export IDEMGATE_REDIS_TEST_PORT=${IDEMGATE_REDIS_TEST_PORT:-19379}
# Only the standalone server: the test set-up's idle cluster and sentinels
# would share the measured machine.
bash scripts/redis-test.sh start-standalone "$redis_dir" >/dev/null
trap 'bash scripts/redis-test.sh stop "$redis_dir" >/dev/null 2>&1 || true; rm -rf "$redis_dir"' EXIT
eval "$(bash scripts/redis-test.sh env "$redis_dir")"
"$bin/driver" -bin "$bin" -nginx "$nginx" -redis "$IDEMGATE_TEST_REDIS_ADDR" "$@"
