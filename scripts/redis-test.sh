#!/usr/bin/env bash
# redis-test.sh start|start-standalone|stop|env DIR
#
# Runs the real Redis servers the key-store tests need, on 127.0.0.1 only,
# with every setting on the command line (no system config, no systemd):
#
#   standalone           BASE          (IDEMGATE_TEST_REDIS_ADDR)
#   cluster, 3 masters   BASE+21..23   (IDEMGATE_TEST_REDIS_CLUSTER_ADDRS; bus ports +10000)
#   sentinel set-up      master BASE+11, replica BASE+12,
#                        sentinels BASE+13..15 (IDEMGATE_TEST_REDIS_SENTINEL_ADDRS,
#                        IDEMGATE_TEST_REDIS_SENTINEL_MASTER)
#
# BASE is $IDEMGATE_REDIS_TEST_PORT (default 17379). `start` uses the
# redis-server, redis-sentinel and redis-cli on PATH; when they are missing it
# never installs Debian's packages (their postinst creates a redis user,
# systemd units and running services): it fetches the .debs with
# `apt-get download` and unpacks them with `dpkg -x` into a cache,
# $IDEMGATE_REDIS_DEBS (default .tmp/debs in the repository), and runs the
# binaries from there (with LD_LIBRARY_PATH for liblzf and jemalloc). Every
# server runs with its own settings. `start` starts whatever is not already
# running, waits (bounded) until every set-up is ready and writes the exports
# to DIR/env. It is idempotent. `start-standalone` starts the standalone
# server alone (bench/run.sh: no idle cluster or sentinels beside the
# measured one) and exports only its address. `stop` shuts every server down by port (never
# by process name). `env` prints DIR/env, e.g.
#   eval "$(scripts/redis-test.sh env .redis)".
set -euo pipefail

cmd=${1:-}
dir=${2:-}
if [[ -z $cmd || -z $dir ]]; then
	echo "usage: $0 start|start-standalone|stop|env DIR" >&2
	exit 2
fi

base=${IDEMGATE_REDIS_TEST_PORT:-17379}
standalone=$base
smaster=$((base + 11))
sreplica=$((base + 12))
sentinels=($((base + 13)) $((base + 14)) $((base + 15)))
cluster=($((base + 21)) $((base + 22)) $((base + 23)))
master_name=idemgate-test
host=127.0.0.1

die() {
	echo "redis-test: $*" >&2
	exit 1
}

# wait_for DESC CMD...: retry CMD every 0.1 s for at most 10 s.
wait_for() {
	local desc=$1
	shift
	local i
	for ((i = 0; i < 100; i++)); do
		if "$@" >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.1
	done
	die "timed out waiting for $desc (logs: $dir/*/*.log)"
}

cli() { redis-cli -h "$host" -p "$@"; }
up() { [[ $(cli "$1" ping 2>/dev/null) == PONG ]]; }
down() { ! up "$1"; }

debs=${IDEMGATE_REDIS_DEBS:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.tmp/debs}
# The packages unpacked into the cache: the binary (redis-tools), the
# redis-server and redis-sentinel names (symbolic links to it), and the
# libraries a machine without Redis may lack.
deb_packages=(redis-tools redis-server redis-sentinel liblzf1 libjemalloc2 libatomic1)

have_redis() {
	command -v redis-server >/dev/null && command -v redis-sentinel >/dev/null && command -v redis-cli >/dev/null
}

# use_cache: put the cache's binaries first on PATH, its libraries on
# LD_LIBRARY_PATH; fails when the cache has no redis-server.
use_cache() {
	[[ -x $debs/root/usr/bin/redis-server ]] || return 1
	PATH=$debs/root/usr/bin:$PATH
	local d libs=
	for d in "$debs"/root/usr/lib/*-linux-gnu "$debs"/root/lib/*-linux-gnu; do
		[[ -d $d ]] && libs=$libs${libs:+:}$d
	done
	export PATH LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}

# find_redis: the binaries on PATH, else those of the cache.
find_redis() { have_redis || { use_cache && have_redis; }; }

ensure_installed() {
	find_redis && return 0
	command -v apt-get >/dev/null && command -v dpkg >/dev/null ||
		die "redis-server is missing, and there is no apt-get to fetch it: put redis-server, redis-sentinel and redis-cli on PATH"
	echo "redis-test: fetching ${deb_packages[*]} into $debs (apt-get download; nothing is installed)" >&2
	mkdir -p "$debs/dl" "$debs/root"
	local dl=(apt-get download -qq)
	# As root, apt hands the download to its _apt user, who cannot write
	# into a root-owned cache: download as root instead, without the warning.
	[[ $(id -u) == 0 ]] && dl+=(-o APT::Sandbox::User=root)
	(cd "$debs/dl" && "${dl[@]}" "${deb_packages[@]}" >&2) || {
		# No package lists yet (a fresh container): read them once.
		[[ $(id -u) == 0 ]] || die "apt-get download failed, and 'apt-get update' needs root"
		apt-get update -qq >&2
		(cd "$debs/dl" && "${dl[@]}" "${deb_packages[@]}" >&2)
	} || die "apt-get download ${deb_packages[*]} failed"
	local f
	for f in "$debs"/dl/*.deb; do dpkg -x "$f" "$debs/root"; done
	use_cache && have_redis || die "no redis-server in the packages unpacked into $debs/root"
	redis-server --version >/dev/null || die "$debs/root/usr/bin/redis-server does not run (a missing library?): try 'LD_LIBRARY_PATH=$LD_LIBRARY_PATH ldd $debs/root/usr/bin/redis-server'"
}

# server PORT DIR [ARGS...]: start a redis-server unless PORT already answers.
server() {
	local port=$1 d=$2
	shift 2
	up "$port" && return 0
	mkdir -p "$d"
	redis-server --port "$port" --bind "$host" --daemonize yes --dir "$d" \
		--pidfile "$d/redis.pid" --logfile "$d/redis.log" \
		--save '' --appendonly no "$@"
}

stop_port() {
	local port=$1
	up "$port" || return 0
	cli "$port" shutdown nosave >/dev/null 2>&1 || true
	wait_for "port $port to close" down "$port"
}

cluster_ok() {
	local p
	for p in "${cluster[@]}"; do
		cli "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1
	done
}

start_cluster() {
	local p all=1
	for p in "${cluster[@]}"; do up "$p" || all=0; done
	if ((all)) && cluster_ok; then
		return 0
	fi
	# Partly up or never formed: start again from nothing (no data is kept).
	for p in "${cluster[@]}"; do
		stop_port "$p"
		rm -f "$dir/cluster-$p/nodes.conf"
		server "$p" "$dir/cluster-$p" --cluster-enabled yes \
			--cluster-config-file nodes.conf --cluster-node-timeout 2000
	done
	for p in "${cluster[@]}"; do wait_for "cluster node $p" up "$p"; done
	local addrs=()
	for p in "${cluster[@]}"; do addrs+=("$host:$p"); done
	redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >"$dir/cluster-create.log" 2>&1 ||
		die "redis-cli --cluster create failed: see $dir/cluster-create.log"
}

# sentinel_master: the port every sentinel names as master (either server:
# a test may have failed over); fails if they disagree or one has none.
sentinel_master() {
	local p addr first=
	for p in "${sentinels[@]}"; do
		addr=$(cli "$p" sentinel get-master-addr-by-name "$master_name" 2>/dev/null | tr '\n' ' ')
		[[ -n $addr ]] || return 1
		[[ -z $first || $addr == "$first" ]] || return 1
		first=$addr
	done
	first=${first#* }
	echo "${first%% *}"
}

# sentinel_ok: the sentinels agree on a master that has its replica online.
sentinel_ok() {
	local m
	m=$(sentinel_master) || return 1
	cli "$m" info replication 2>/dev/null | tr -d '\r' | grep -q '^slave0:.*state=online'
}

# sentinel_running: the sentinels agree on a master that answers as one.
# (Right after a failover the old master rejoins as a replica only after
# up to 10 s; it needs no restart for that.)
sentinel_running() {
	local m
	m=$(sentinel_master) || return 1
	cli "$m" info replication 2>/dev/null | tr -d '\r' | grep -q '^role:master'
}

start_sentinel() {
	local p all=1
	for p in "$smaster" "$sreplica" "${sentinels[@]}"; do up "$p" || all=0; done
	if ((all)); then
		# Running: give a failover in progress (a test's) time to settle.
		local i
		for ((i = 0; i < 50; i++)); do
			sentinel_running && return 0
			sleep 0.1
		done
	fi
	for p in "${sentinels[@]}" "$sreplica" "$smaster"; do stop_port "$p"; done
	# Either server may become master; no diskless-sync delay (default 5 s)
	# so that a replica is in sync at once.
	server "$smaster" "$dir/sentinel-master" --repl-diskless-sync-delay 0
	wait_for "sentinel master $smaster" up "$smaster"
	server "$sreplica" "$dir/sentinel-replica" --repl-diskless-sync-delay 0 --replicaof "$host" "$smaster"
	for p in "${sentinels[@]}"; do
		local d="$dir/sentinel-$p"
		mkdir -p "$d"
		# Sentinel rewrites its config file: write a fresh one each start.
		cat >"$d/sentinel.conf" <<CONF
port $p
bind $host
daemonize yes
dir $d
pidfile $d/sentinel.pid
logfile $d/sentinel.log
sentinel monitor $master_name $host $smaster 2
sentinel down-after-milliseconds $master_name 1000
sentinel failover-timeout $master_name 5000
CONF
		redis-sentinel "$d/sentinel.conf"
	done
	wait_for "sentinel replica in sync" sentinel_ok
}

write_env() {
	local c s p
	c=$(for p in "${cluster[@]}"; do printf '%s:%s,' "$host" "$p"; done)
	s=$(for p in "${sentinels[@]}"; do printf '%s:%s,' "$host" "$p"; done)
	cat >"$dir/env.tmp" <<ENV
export IDEMGATE_TEST_REDIS_ADDR=$host:$standalone
export IDEMGATE_TEST_REDIS_CLUSTER_ADDRS=${c%,}
export IDEMGATE_TEST_REDIS_SENTINEL_ADDRS=${s%,}
export IDEMGATE_TEST_REDIS_SENTINEL_MASTER=$master_name
ENV
	cache_env >>"$dir/env.tmp"
	mv "$dir/env.tmp" "$dir/env"
}

# cache_env: when the binaries come from the cache, the exports that put
# them on the tests' PATH too (tests start redis-servers of their own).
cache_env() {
	[[ $(command -v redis-server) == "$debs"/* ]] || return 0
	printf 'export PATH=%q\nexport LD_LIBRARY_PATH=%q\n' "$PATH" "$LD_LIBRARY_PATH"
}

case $cmd in
start)
	ensure_installed
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	server "$standalone" "$dir/standalone"
	start_sentinel
	start_cluster
	wait_for "standalone $standalone" up "$standalone"
	wait_for "cluster state ok" cluster_ok
	wait_for "sentinel set-up" sentinel_running
	write_env
	;;
start-standalone)
	ensure_installed
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	server "$standalone" "$dir/standalone"
	wait_for "standalone $standalone" up "$standalone"
	echo "export IDEMGATE_TEST_REDIS_ADDR=$host:$standalone" >"$dir/env.tmp"
	cache_env >>"$dir/env.tmp"
	mv "$dir/env.tmp" "$dir/env"
	;;
stop)
	find_redis || exit 0
	for p in "${sentinels[@]}" "$sreplica" "$smaster" "${cluster[@]}" "$standalone"; do
		stop_port "$p"
	done
	rm -f "$dir/env"
	;;
env)
	[[ -f $dir/env ]] || die "$dir/env not found: run '$0 start $dir' first"
	cat "$dir/env"
	;;
*)
	echo "usage: $0 start|start-standalone|stop|env DIR" >&2
	exit 2
	;;
esac
