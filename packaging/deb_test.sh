#!/usr/bin/env bash
# The Debian package installs, works and removes cleanly (issue 20):
#
#   deb_test.sh BUILD_DIR E2E_PROGRAM
#
# CPack builds the .deb into a scratch directory, `dpkg -i` installs it,
# the installed /usr/bin/rgpu-server serves softgpu from /usr/lib/rgpu, the
# installed `rgpu run` runs the e2e program against it (its output checked),
# `dpkg -r` removes the package and every file it had installed is gone.
# Needs root on Debian with dpkg; otherwise exits 77 (skip) with the reason.
# A machine that already has an rgpu package is left alone (skip).
set -u
build=$1 prog=${2:-}
skip() { echo "SKIP rgpu_deb: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (dpkg -i)"
[ -f /etc/debian_version ] || skip "not Debian"
for p in dpkg dpkg-deb cpack; do command -v $p >/dev/null || skip "$p not found"; done
[ -n "$prog" ] && [ -x "$prog" ] || skip "no e2e program given (RGPU_E2E off)"
if dpkg-query -W -f='${Status}' rgpu 2>/dev/null | grep -q "installed"; then
  skip "an rgpu package is already installed here; this test would remove it"
fi

work=$(mktemp -d)
chmod 755 "$work"
srv= installed=0
cleanup() {
  [ -n "$srv" ] && kill "$srv" 2>/dev/null && wait "$srv" 2>/dev/null
  [ $installed = 1 ] && dpkg -r rgpu >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL rgpu_deb: $*"; exit 1; }

(cd "$build" && cpack -G DEB -B "$work/pkg" >"$work/cpack.log" 2>&1) ||
  { cat "$work/cpack.log"; fail "cpack -G DEB"; }
deb=$(ls "$work"/pkg/rgpu_*.deb 2>/dev/null | head -n 1)
[ -n "$deb" ] || fail "cpack made no rgpu_*.deb: $(ls "$work/pkg")"
# The package's files (not its directories), as paths on this system.
dpkg-deb -c "$deb" | awk '$1 !~ /^d/ {sub(/^\./, "", $6); print $6}' >"$work/files"
[ -s "$work/files" ] || fail "dpkg-deb -c lists no files"

dpkg -i "$deb" >"$work/dpkg-i.log" 2>&1 || { cat "$work/dpkg-i.log"; installed=1; fail "dpkg -i $deb"; }
installed=1
dpkg-query -W -f='${Status}\n' rgpu | grep -qx "install ok installed" || fail "dpkg does not list rgpu as installed"
missing=$(while read -r f; do [ -e "$f" ] || echo "$f"; done <"$work/files")
[ -z "$missing" ] || fail "installed package lacks: $missing"
echo "installed: $(basename "$deb"), $(wc -l <"$work/files") files"

# Smoke run: the installed programs only (PATH and library paths do not
# point into the build tree).
/usr/bin/rgpu-server --listen "unix://$work/s.sock" --device softgpu --image-cache off \
  2>"$work/server.err" &
srv=$!
for _ in $(seq 100); do grep -q "listening on" "$work/server.err" && break; sleep 0.1; done
grep -q "listening on unix://$work/s.sock (device: softgpu)" "$work/server.err" ||
  { cat "$work/server.err"; fail "the installed rgpu-server did not start"; }
out=$(env -u RGPU_LIBDIR -u RGPU_SOFTGPU_LIB -u LD_LIBRARY_PATH \
  /usr/bin/rgpu run --server "unix://$work/s.sock" -- "$prog" 2>&1) ||
  { echo "$out"; fail "the installed rgpu run failed"; }
echo "$out" | grep -q "all correct" || { echo "$out"; fail "the program's output is not right"; }
grep -Eq "driver=/usr/(bin/\.\./)?lib/rgpu/libsoftgpu\.so" "$work/server.err" ||
  { cat "$work/server.err"; fail "the installed server did not load the installed softgpu"; }
echo "smoke run: $(echo "$out" | grep 'all correct')"
kill "$srv"
wait "$srv" 2>/dev/null
srv=

dpkg -r rgpu >"$work/dpkg-r.log" 2>&1 || { cat "$work/dpkg-r.log"; fail "dpkg -r rgpu"; }
installed=0
left=$(while read -r f; do [ -e "$f" ] || [ -L "$f" ] && echo "$f"; done <"$work/files")
[ -z "$left" ] || fail "left after dpkg -r: $left"
[ -e /usr/lib/rgpu ] && fail "/usr/lib/rgpu is left after dpkg -r: $(find /usr/lib/rgpu)"
status=$(dpkg-query -W -f='${Status}' rgpu 2>/dev/null)
case "$status" in *" installed") fail "dpkg still lists rgpu as installed: $status" ;; esac
echo "PASS rgpu_deb: dpkg -i, installed rgpu-server + rgpu run of $(basename "$prog"), dpkg -r left nothing"
