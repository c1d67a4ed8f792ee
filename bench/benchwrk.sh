# bench/benchwrk.sh, sourced by bench/wrk.sh and bench/ab.sh (with $repo set):
# copies ../shared/bench-wrk to $work (BENCH_WRK_SRC and BENCH_WRK_DIR to change
# where from and to), and puts wrk on PATH, unpacked from Debian's packages into
# .tmp/wrkdeb when missing (nothing is installed). The harness is copied, never
# changed.
src=${BENCH_WRK_SRC:-}
for d in "$repo/../shared/bench-wrk" "$repo/../../shared/bench-wrk"; do
	[[ -z $src && -x $d/run.sh ]] && src=$(cd "$d" && pwd)
done
[[ -n $src ]] || { echo "no bench-wrk: set BENCH_WRK_SRC" >&2; exit 1; }
work=${BENCH_WRK_DIR:-$repo/.tmp/bench-wrk}
mkdir -p "$work"
cp -r "$src/." "$work/" && chmod -R u+w "$work"
if ! command -v wrk >/dev/null; then
	w=$repo/.tmp/wrkdeb
	if [[ ! -x $w/root/usr/bin/wrk ]]; then
		mkdir -p "$w/dl"
		(cd "$w/dl" && apt-get download wrk libluajit2-5.1-2 libluajit2-5.1-common >&2)
		for f in "$w"/dl/*.deb; do dpkg -x "$f" "$w/root"; done
	fi
	export PATH=$w/root/usr/bin:$PATH LD_LIBRARY_PATH=$w/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
