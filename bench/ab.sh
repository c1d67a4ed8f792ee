#!/usr/bin/env bash
# bench/ab.sh A B: the CPU per request of two proxies loaded AT ONCE (issue 31).
#
# bench/ and ../shared/bench-wrk run one target after another. On the 2-core
# bench VM the CPU a request costs drifts by up to 2x over tens of seconds
# (the same bare proxy measured 74-150 µs per GET within one minute), so two
# targets measured one after the other differ by more than a change under
# test. Here both targets serve at the same time, on the same core, behind
# the same upstream, each driven by its own wrk (32 connections each, on the
# other core), and each process's CPU time is read from /proc: both see the
# same slow and fast phases, and the ratio of their CPU per request holds
# within a few percent from round to round where sequential runs spread by
# 0.6-1.3x. It tells whether a change made a request cheaper; the
# throughput targets themselves are measured by bench/both.sh. One binary
# against itself read 0.976 (0.964-0.990) in the B slot: run a comparison
# in both orders (A B, then B A) and take the two together.
#
# A and B are each one of:
#   bare                 ../shared/bench-wrk's bare proxy
#   design               bench/bareproxy -design: the bare proxy plus the work
#                        DESIGN.md asks of every request, written plainly
#   idemgate             this checkout's idemgate, memory store, bench-wrk's config
#   idemgate:VAR=value   the same with an environment variable (e.g. GOGC=100)
#   bin:PATH             another idemgate binary (e.g. built from another commit)
#   route:KEY=VALUE      this checkout's idemgate with a route setting added
#                        (e.g. route:late_answer_wait=0s)
#
#   ROUNDS=6 DURATION=4 SCRIPT=get|post_unique (bench-wrk's wrk scripts) WARM=2
#   (rounds first run and not counted: a fresh process is slow for a while)
#
# Prints each round's CPU µs per request of A and B and their ratio B/A, then
# the median ratio with its range. Traffic stays on 127.0.0.1; every process
# it starts is stopped by PID when it exits.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
[[ $# == 2 ]] || { sed -n '2,33p' "$0" >&2; exit 2; }
rounds=${ROUNDS:-6} duration=${DURATION:-4} script=${SCRIPT:-get} warm=${WARM:-2}
base=${BASE_PORT:-26300}

# bench-wrk's parts, copied (bench/benchwrk.sh) and built.
. "$repo/bench/benchwrk.sh"
mkdir -p "$work/.bin"
(cd "$work/upstream" && go build -o "$work/.bin/upstream" .)
(cd "$work/bareproxy" && go build -o "$work/.bin/bareproxy" .)
(cd "$repo" && go build -trimpath -o "$work/.bin/idemgate" ./cmd/idemgate)
wrkscript=$work/wrk/$script.lua
[[ -f $wrkscript ]] || { echo "no wrk script $wrkscript" >&2; exit 2; }

pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

up=127.0.0.1:$base
taskset -c 1 "$work/.bin/upstream" -addr "$up" >/dev/null 2>&1 &
pids+=($!)

# start TARGET PORT: starts it on core 1 and sets started to its PID.
start() {
	local t=$1 port=$2 cfg bin=$work/.bin/idemgate env=() extra=""
	case $t in
	bare)
		taskset -c 1 "$work/.bin/bareproxy" -addr "127.0.0.1:$port" -upstream "http://$up" >/dev/null 2>&1 &
		started=$!
		return
		;;
	design)
		(cd "$repo" && go build -trimpath -o "$work/.bin/design" ./bench/bareproxy)
		taskset -c 1 "$work/.bin/design" -design -listen "127.0.0.1:$port" -upstream "http://$up" >"$work/ab-$port.log" 2>&1 &
		started=$!
		return
		;;
	idemgate) ;;
	idemgate:*=*) env=("${t#idemgate:}") ;;
	bin:*) bin=${t#bin:} ;;
	route:*=*) extra=${t#route:} extra=", ${extra%%=*}: ${extra#*=}" ;;
	*) echo "unknown target $t" >&2; exit 2 ;;
	esac
	cfg=$(mktemp --suffix=.yaml)
	# bench-wrk's idemgate.sh config (access log on, to a file).
	cat >"$cfg" <<Y
listen: "127.0.0.1:$port"
admin_listen: "127.0.0.1:0"
upstream: { url: "http://$up" }
edge_limit: { rate: 0 }
store: { backend: memory }
routes:
  - { name: orders, method: POST, path: /orders, idempotent: true$extra }
Y
	env "${env[@]}" taskset -c 1 "$bin" --config "$cfg" >"$work/ab-$port.log" 2>&1 &
	started=$!
}
start "$1" $((base + 1))
pa=$started
pids+=("$pa")
start "$2" $((base + 2))
pb=$started
pids+=("$pb")
for port in $((base + 1)) $((base + 2)); do
	for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
done

cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
out=$(mktemp -d)
ratios=()
for r in $(seq $((warm + rounds))); do
	a0=$(cpu "$pa") b0=$(cpu "$pb")
	# Each round the other wrk starts first.
	load() { taskset -c 0 wrk -t1 -c32 -d"${duration}s" -s "$wrkscript" "http://127.0.0.1:$1/orders" >"$2" 2>&1; }
	if ((r % 2)); then
		load $((base + 1)) "$out/a" &
		wa=$!
		load $((base + 2)) "$out/b" &
		wb=$!
	else
		load $((base + 2)) "$out/b" &
		wb=$!
		load $((base + 1)) "$out/a" &
		wa=$!
	fi
	wait "$wa" "$wb"
	a1=$(cpu "$pa") b1=$(cpu "$pb")
	na=$(grep -o '"requests":[0-9]*' "$out/a" | cut -d: -f2) nb=$(grep -o '"requests":[0-9]*' "$out/b" | cut -d: -f2)
	line=$(awk -v a="$((a1 - a0))" -v b="$((b1 - b0))" -v na="$na" -v nb="$nb" -v hz="$(getconf CLK_TCK)" \
		'BEGIN { ca = a * 1e6 / hz / na; cb = b * 1e6 / hz / nb; printf "%.1f %d %.1f %d %.3f", ca, na, cb, nb, cb / ca }')
	read -r ca na cb nb ratio <<<"$line"
	if ((r <= warm)); then
		echo "warm-up $r: $1 $ca µs/req ($na), $2 $cb µs/req ($nb)"
		continue
	fi
	echo "round $((r - warm)): $1 $ca µs/req ($na req), $2 $cb µs/req ($nb req), ratio $ratio"
	ratios+=("$ratio")
done
printf '%s\n' "${ratios[@]}" | sort -n | awk -v a="$1" -v b="$2" -v s="$script" '
	{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
	printf "%s: CPU per request %s / %s: median %.3f (%.3f-%.3f, %d rounds)\n", s, b, a, m, v[1], v[NR], NR }'
rm -rf "$out"
