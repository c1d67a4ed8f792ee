#!/usr/bin/env bash
# chromium.sh: prints the path of a headless-capable Chromium for the
# operator console's browser test (admin/console/browsertest), installing
# Debian's `chromium` package first when there is none.
#
#   1. $IDEMGATE_CHROMIUM, or chromium / chromium-browser on PATH: used as is.
#   2. Running as root with apt-get: `apt-get install -y --no-install-recommends
#      chromium` (a browser has no service, user or daemon to leave behind,
#      unlike redis-server; its many shared libraries are why it is installed
#      rather than unpacked).
#   3. Otherwise: `apt-get download chromium chromium-common` and `dpkg -x`
#      into $IDEMGATE_CHROMIUM_DEBS (default .tmp/chromium in the repository);
#      this works where the shared libraries it needs are already installed.
#
# Exits non-zero, with the reason on stderr, when none of these gives a
# Chromium that answers --version. Bounded: apt-get's own timeouts.
set -euo pipefail

die() {
	echo "chromium: $*" >&2
	exit 1
}

works() { "$1" --version >/dev/null 2>&1; }

if [[ -n ${IDEMGATE_CHROMIUM:-} ]]; then
	works "$IDEMGATE_CHROMIUM" || die "IDEMGATE_CHROMIUM=$IDEMGATE_CHROMIUM does not run"
	echo "$IDEMGATE_CHROMIUM"
	exit 0
fi
for c in chromium chromium-browser; do
	if p=$(command -v "$c") && works "$p"; then
		echo "$p"
		exit 0
	fi
done

root=$(cd "$(dirname "$0")/.." && pwd)
if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y --no-install-recommends chromium >&2; then
		apt-get update >&2 || true
		apt-get install -y --no-install-recommends chromium >&2 || die "apt-get install chromium failed"
	fi
	p=$(command -v chromium) || die "chromium is not on PATH after apt-get install"
	works "$p" || die "$p does not run"
	echo "$p"
	exit 0
fi

command -v apt-get >/dev/null || die "no chromium on PATH, and no apt-get to fetch Debian's"
debs=${IDEMGATE_CHROMIUM_DEBS:-$root/.tmp/chromium}
bin=$debs/root/usr/lib/chromium/chromium
if [[ ! -x $bin ]]; then
	mkdir -p "$debs/dl" "$debs/root"
	(cd "$debs/dl" && apt-get download chromium chromium-common >&2) || die "apt-get download chromium failed"
	for d in "$debs"/dl/*.deb; do dpkg -x "$d" "$debs/root"; done
fi
works "$bin" || die "$bin (unpacked from Debian's package) does not run: its shared libraries are missing; run as root to install it"
echo "$bin"
