#!/usr/bin/env bash
# bench/wrk.sh: runs the second, independent harness, ../shared/bench-wrk (wrk,
# 64 connections, its own upstream and bare proxy), against this checkout's
# idemgate, as its README says, so that its numbers can be repeated beside
# bench/'s (issue 31). The harness itself is copied, never changed: this is
# the glue around it.
#
#   bench/wrk.sh                  STORE=memory, 5 rounds of get and post
#   STORE=redis bench/wrk.sh      the Redis store (bench-wrk's Redis, pinned with the proxy)
#   STORE=floor bench/wrk.sh      the floor of a Redis keyed write in the idemgate slot:
#                                 bench/bareproxy -redis (the bare proxy + 2 Redis round trips)
#   STORE=storefloor ...          the same through idemgate's store (bareproxy -redis -store)
#   STORE=design bench/wrk.sh     the design floor in the idemgate slot: bench/bareproxy
#                                 -design (the bare proxy plus the work DESIGN.md asks of
#                                 every request, written plainly; access log to the file)
#   STORE=designredis ...         the design floor keeping its claims and answers in Redis
#                                 with the floor's two calls (bareproxy -design -redis)
#
# Knobs, each one of the differences between the two harnesses (BENCHMARKS.md):
#   IDENTITY=1   bench-wrk's idemgate.sh as is (require_identity: true, every request
#                sends Authorization: Bearer bench-client); 0: require_identity: false
#   REDIS_PIN=1  bench-wrk's Redis, pinned to the proxy's core; 0: a Redis of ours,
#                unpinned, as bench/ runs it
#   IDLE=0       1: bench/'s other servers (a bare proxy, two floors, both design floors, an
#                idemgate on each store) idle on the proxy's core during the run, as in bench/
#   ROUNDS=5 DURATION=5 WARMUP=1 SCENARIOS="get post" OUT=<dir> (default under the copy)
#   BASE_PORT=26100 (bench-wrk uses +0..+14; ours +30..+49)
#
# Results: $OUT/results.jsonl and summary.md (bench-wrk's), the idemgate log with its
# access log in $OUT/run/idemgate.out. `bench/wrk.sh table FILE...` prints the medians
# of bench-wrk's and bench/driver -jsonl's lines side by side.
#
# Needs wrk (fetched as a .deb and unpacked into .tmp/wrkdeb when missing: nothing is
# installed), jq, curl, taskset, and redis-server (the one scripts/redis-test.sh
# unpacked into $IDEMGATE_REDIS_DEBS when none is on PATH).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

if [[ ${1:-} == table ]]; then
	# Medians over rounds (min–max) per file and scenario, and the median of the
	# per-round ratios to the bare proxy of the same file (bench-wrk's bareproxy, or
	# bench/'s "bare GET|POST"): the nth run of a scenario pairs with the nth bare run.
	shift
	jq -rn -f "$repo/bench/wrk-table.jq" "$@"
	exit 0
fi

STORE=${STORE:-memory}
IDENTITY=${IDENTITY:-1}
REDIS_PIN=${REDIS_PIN:-1}
IDLE=${IDLE:-0}
export BASE_PORT=${BASE_PORT:-26100}

. "$repo/bench/benchwrk.sh"
bin=$work/.idemgate
mkdir -p "$bin"
(cd "$repo" && go build -trimpath -o "$bin/" ./cmd/idemgate ./bench/bareproxy)
if ! command -v redis-server >/dev/null; then
	debs=${IDEMGATE_REDIS_DEBS:-$repo/.tmp/debs}
	[[ -x $debs/root/usr/bin/redis-server ]] || { echo "no redis-server: run scripts/redis-test.sh start once (it unpacks one into $debs)" >&2; exit 1; }
	libs=$(printf '%s:' "$debs"/root/usr/lib/*-linux-gnu "$debs"/root/lib/*-linux-gnu)
	export PATH=$debs/root/usr/bin:$PATH LD_LIBRARY_PATH=${libs%:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

launcher=$work/idemgate.sh
if [[ $IDENTITY == 0 ]]; then
	launcher=$bin/idemgate-noidentity.sh
	sed 's|^routes:$|idempotency: { require_identity: false }\nroutes:|' "$work/idemgate.sh" >"$launcher"
	grep -q 'require_identity: false' "$launcher" || { echo "bench-wrk's idemgate.sh changed: cannot turn identity off" >&2; exit 1; }
	chmod +x "$launcher"
fi

pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
}
trap cleanup EXIT
trap 'exit 130' INT TERM # so that EXIT's cleanup runs when stopped

redis="{redis}"
ourredis=127.0.0.1:$((BASE_PORT + 30))
if [[ $REDIS_PIN == 0 || $IDLE == 1 ]]; then
	rdir=$(mktemp -d)
	redis-server --bind 127.0.0.1 --port "$((BASE_PORT + 30))" --save '' --appendonly no --daemonize no \
		--dir "$rdir" --logfile "$rdir/redis.log" &
	pids+=($!)
	for _ in $(seq 100); do redis-cli -p "$((BASE_PORT + 30))" ping >/dev/null 2>&1 && break; sleep 0.1; done
	[[ $REDIS_PIN == 0 ]] && redis=$ourredis
fi
if [[ $IDLE == 1 ]]; then
	# bench/'s other servers, idle on the servers' core while one is measured.
	p=$((BASE_PORT + 40))
	idle() { taskset -c 1 "$@" >/dev/null 2>&1 & pids+=($!); }
	idle "$bin/bareproxy" -listen 127.0.0.1:$p -upstream http://127.0.0.1:$((p + 9))
	idle "$bin/bareproxy" -listen 127.0.0.1:$((p + 1)) -upstream http://127.0.0.1:$((p + 9)) -redis "$ourredis"
	idle "$bin/bareproxy" -listen 127.0.0.1:$((p + 2)) -upstream http://127.0.0.1:$((p + 9)) -redis "$ourredis" -store
	idle bash "$launcher" "$bin/idemgate" $((p + 3)) http://127.0.0.1:$((p + 9)) "$ourredis" memory
	idle bash "$launcher" "$bin/idemgate" $((p + 4)) http://127.0.0.1:$((p + 9)) "$ourredis" redis
	idle "$bin/bareproxy" -listen 127.0.0.1:$((p + 5)) -upstream http://127.0.0.1:$((p + 9)) -design
	idle "$bin/bareproxy" -listen 127.0.0.1:$((p + 6)) -upstream http://127.0.0.1:$((p + 9)) -design -redis "$ourredis"
fi

label=idemgate-$STORE
case $STORE in
memory | redis) cmd="$launcher $bin/idemgate {port} {upstream} $redis $STORE" ;;
floor) cmd="$bin/bareproxy -listen 127.0.0.1:{port} -upstream {upstream} -redis $redis" label=floor ;;
storefloor) cmd="$bin/bareproxy -listen 127.0.0.1:{port} -upstream {upstream} -redis $redis -store" label=storefloor ;;
design) cmd="$bin/bareproxy -design -listen 127.0.0.1:{port} -upstream {upstream}" label=design ;;
designredis) cmd="$bin/bareproxy -design -redis $redis -listen 127.0.0.1:{port} -upstream {upstream}" label=designredis ;;
*) echo "STORE: memory, redis, floor, storefloor, design or designredis" >&2; exit 2 ;;
esac
[[ $IDENTITY == 0 ]] && label+=-noidentity
[[ $REDIS_PIN == 0 && $STORE != memory && $STORE != design ]] && label+=-redisunpinned
[[ $IDLE == 1 ]] && label+=-idle

cd "$work"
IDEMGATE_CMD=$cmd IDEMGATE_LABEL=$label TARGETS=${TARGETS:-"bareproxy idemgate"} SCENARIOS=${SCENARIOS:-"get post"} \
	ROUNDS=${ROUNDS:-5} DURATION=${DURATION:-5} WARMUP=${WARMUP:-1} CALIBRATE=${CALIBRATE:-0} REDIS_BENCH=${REDIS_BENCH:-0} \
	./run.sh &
# In the background, waited for: a signal to this script then stops run.sh (which stops
# what it started) at once, instead of after the run.
runner=$!
pids=("$runner" "${pids[@]}")
wait "$runner"
