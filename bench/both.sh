#!/usr/bin/env bash
# bench/both.sh OUT: issue 31's measurement, both harnesses side by side.
#
# 5 interleaved rounds (ROUNDS to change it), each running ../shared/bench-wrk
# through bench/wrk.sh (memory store: get, post; Redis store: post; the
# floor: post; the design floor, bench/bareproxy -design: get, post; the
# design floor with its claims in Redis, -design -redis: post) and then
# bench/'s nine lines, DURATION seconds each; then
# bench/'s sequential runs (one connection), 5 rounds of 3 s. Results and
# logs go to OUT; `bench/wrk.sh table OUT/wrk-*/*.jsonl OUT/bench.jsonl`
# prints the medians and per-round ratios, and `jq -rn -f bench/targets.jq
# OUT/wrk-*/results.jsonl OUT/bench.jsonl` issue 31's targets (Redis ÷ floor
# included); both print at the end. Run it on a machine with nothing
# else to do (BENCHMARKS.md, "Both harnesses again"). Traffic stays on
# 127.0.0.1; Redis is a standalone server of scripts/redis-test.sh.
set -uo pipefail
out=${1:?usage: bench/both.sh OUT}
cd "$(dirname "$0")/.."
mkdir -p "$out"
out=$(cd "$out" && pwd)
# Both harnesses append their result lines, and bench/targets.jq pairs the
# rounds by their order: one run per OUT.
if [[ -e $out/bench.jsonl ]] || compgen -G "$out/wrk-*" >/dev/null; then
	echo "bench/both.sh: $out already holds a run; give a new OUT" >&2
	exit 2
fi
rounds=${ROUNDS:-5} duration=${DURATION:-5}
export IDEMGATE_REDIS_TEST_PORT=${IDEMGATE_REDIS_TEST_PORT:-31379}
bin=bench/.bin
mkdir -p "$bin"
go build -trimpath -o "$bin/idemgate" ./cmd/idemgate &&
	go build -trimpath -o "$bin/" ./bench/upstream ./bench/bareproxy ./bench/loadgen ./bench/driver || exit 1
rd=$(mktemp -d)
bash scripts/redis-test.sh start-standalone "$rd" >/dev/null || exit 1
trap 'bash scripts/redis-test.sh stop "$rd" >/dev/null 2>&1; rm -rf "$rd"' EXIT
eval "$(bash scripts/redis-test.sh env "$rd")"
lines="bare GET,idemgate pass-through GET,design floor GET,bare POST,idemgate keyed first write (memory),design floor keyed write,idemgate keyed first write (Redis),floor keyed write (bare + 2 Redis round trips),design floor keyed write (Redis)"
for r in $(seq "$rounds"); do
	echo "round $r $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)" >>"$out/log"
	ROUNDS=1 DURATION=$duration OUT=$out/wrk-mem-$r bench/wrk.sh >>"$out/wrk.log" 2>&1
	STORE=redis SCENARIOS=post ROUNDS=1 DURATION=$duration OUT=$out/wrk-redis-$r bench/wrk.sh >>"$out/wrk.log" 2>&1
	STORE=floor SCENARIOS=post ROUNDS=1 DURATION=$duration OUT=$out/wrk-floor-$r bench/wrk.sh >>"$out/wrk.log" 2>&1
	STORE=design ROUNDS=1 DURATION=$duration OUT=$out/wrk-design-$r bench/wrk.sh >>"$out/wrk.log" 2>&1
	STORE=designredis SCENARIOS=post ROUNDS=1 DURATION=$duration OUT=$out/wrk-designredis-$r bench/wrk.sh >>"$out/wrk.log" 2>&1
	"$bin/driver" -nginx "" -redis "$IDEMGATE_TEST_REDIS_ADDR" -ports 31200 -prefill 0 -rate 0 -rounds 1 -d "${duration}s" \
		-jsonl "$out/bench.jsonl" -only "$lines" >>"$out/bench.log" 2>&1
done
echo "sequential $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)" >>"$out/log"
"$bin/driver" -nginx "" -redis "$IDEMGATE_TEST_REDIS_ADDR" -ports 31200 -sequential -rounds 5 -d 3s \
	-only "bare GET,idemgate pass-through GET,idemgate pass-through GET (Redis),bare POST,idemgate keyed first write (memory),idemgate keyed first write (Redis),floor keyed write (bare + 2 Redis round trips),design floor keyed write (Redis)" >"$out/seq.txt" 2>&1
echo "done $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)" >>"$out/log"
bench/wrk.sh table "$out"/wrk-*/*.jsonl "$out/bench.jsonl"
jq -rn -f bench/targets.jq "$out"/wrk-*/results.jsonl "$out/bench.jsonl"
