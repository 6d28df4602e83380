#!/usr/bin/env bash
# The installed tree works (issue 20): `cmake --install` into a scratch
# DESTDIR, then the layout is checked (programs, the facades in the private
# lib/rgpu, man pages, pkg-config, the unit), the installed rgpu-server
# starts on the installed softgpu from a --config file, and the installed
# `rgpu run` runs an e2e program against it; finally the .deb that CPack
# makes lists the same files.
#
#   install_test.sh BUILD_DIR [E2E_PROGRAM]
set -u
build=$1 prog=${2:-}
work=$(mktemp -d)
trap 'kill $srv 2>/dev/null; rm -rf "$work"' EXIT
srv=
fail() { echo "FAIL: $*" >&2; exit 1; }

DESTDIR=$work/root cmake --install "$build" --prefix /usr >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "cmake --install"; }
r=$work/root/usr
for f in bin/rgpu bin/rgpu-server bin/rgpu-netem lib/rgpu/libcudart.so.13 lib/rgpu/libcuda.so.1 \
         lib/rgpu/libsoftgpu.so lib/pkgconfig/rgpu.pc share/man/man1/rgpu.1 \
         share/man/man8/rgpu-server.8 lib/systemd/system/rgpu-server.service; do
  [ -e "$r/$f" ] || fail "$f is not installed"
done
# Nothing of ours lands where the system's CUDA libraries live.
ls "$r"/lib/*.so* >/dev/null 2>&1 && fail "a library was installed outside lib/rgpu: $(ls "$r"/lib/*.so*)"
grep -q "^libdir=\${prefix}/lib/rgpu" "$r/lib/pkgconfig/rgpu.pc" || fail "rgpu.pc names another libdir"
grep -q "ExecStart=/usr/bin/rgpu-server --config /etc/rgpu/server.conf" \
  "$r/lib/systemd/system/rgpu-server.service" || fail "the unit's ExecStart"
echo "layout ok: $(cd "$r" && find . -type f | wc -l) files"

# The installed server from a config file (the command line adds nothing
# but the config), on the installed softgpu.
printf 'listen = unix://%s/s.sock\ndevice = softgpu\nimage-cache = off\n' "$work" >"$work/server.conf"
"$r/bin/rgpu-server" --config "$work/server.conf" 2>"$work/server.err" &
srv=$!
for _ in $(seq 100); do grep -q "listening on" "$work/server.err" && break; sleep 0.1; done
grep -q "listening on unix://$work/s.sock (device: softgpu)" "$work/server.err" ||
  { cat "$work/server.err"; fail "the installed rgpu-server did not start from its config"; }
echo "server ok: $(grep 'listening on' "$work/server.err")"
if [ -n "$prog" ] && [ -x "$prog" ]; then
  out=$("$r/bin/rgpu" run --server "unix://$work/s.sock" -- "$prog" 2>&1) ||
    { echo "$out"; fail "rgpu run from the install"; }
  echo "$out" | grep -q "^PASS" || { echo "$out"; fail "the program did not pass"; }
  echo "client ok: $(echo "$out" | grep '^PASS')"
fi
kill $srv; wait $srv 2>/dev/null; srv=

# The package lists the same layout (dpkg-deb reads it; no root needed).
if command -v dpkg-deb >/dev/null; then
  (cd "$build" && cpack -G DEB >"$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; fail "cpack"; }
  deb=$(ls -t "$build"/rgpu_*.deb | head -n 1)
  dpkg-deb -c "$deb" >"$work/deb.txt" || fail "dpkg-deb -c $deb"
  for f in ./usr/bin/rgpu-server ./usr/lib/rgpu/libcudart.so.13 ./usr/lib/systemd/system/rgpu-server.service \
           ./usr/share/man/man8/rgpu-server.8; do
    grep -q " $f" "$work/deb.txt" || fail "$f is not in $deb"
  done
  echo "package ok: $(basename "$deb"), $(wc -l <"$work/deb.txt") entries"
fi
echo "PASS rgpu_install"
