#!/usr/bin/env bash
# The kernel image cache end to end (issue 15): one rgpu-server with
# --image-cache, a CUDA program run against it again and again through
# `rgpu run --stats`, checking the program's output and the image counters
# of RGPU_STATS each time:
#   1. first run: the image is sent (images_sent >= 1, image_bytes_sent > 0);
#   2. second run: nothing sent, served from the cache (image_cache_hits >= 1);
#   3. the server restarted on the same directory: still a hit;
#   4. a byte of the cache entry flipped on disk: the run still computes
#      correctly, and the image is sent again (and stored again);
#   5. a server with a tiny --image-cache-max-mb: the directory stays under
#      the bound (older entries evicted), and the program's image is kept.
#
#   e2e_image_cache.sh BUILD/bin PROGRAM EXPECT_REGEX
set -u
bin=$1 prog=$2 expect=$3
work=$(mktemp -d)
server_pid=""
stop_server() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
    server_pid=""
  fi
}
trap 'stop_server; rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*" >&2
  echo "--- server log ---" >&2
  cat "$work"/server*.err >&2 2>/dev/null
  exit 1
}

uri=""
# start_server NAME [rgpu-server options...]
start_server() {
  local name=$1
  shift
  "$bin/rgpu-server" --listen tcp://127.0.0.1:0 --device softgpu "$@" \
    >"$work/$name.out" 2>"$work/$name.err" &
  server_pid=$!
  uri=""
  for _ in $(seq 1 100); do
    uri=$(sed -n 's/^rgpu-server: listening on \([^ ]*\).*/\1/p' "$work/$name.err" | head -n 1)
    [ -n "$uri" ] && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$uri" ] || fail "rgpu-server ($name) did not start listening"
}

field() { sed -n "s/.*\"$2\":\([0-9]*\).*/\1/p" "$1"; }

# run NAME: runs the program once; sets sent, bytes, hits from its stats.
run() {
  local name=$1
  "$bin/rgpu" run --server "$uri" --stats "$work/$name.json" -- "$prog" >"$work/$name.log" 2>&1 ||
    { cat "$work/$name.log"; fail "$name: the program failed"; }
  grep -qE -- "$expect" "$work/$name.log" || { cat "$work/$name.log"; fail "$name: output lacks /$expect/"; }
  sent=$(field "$work/$name.json" images_sent)
  bytes=$(field "$work/$name.json" image_bytes_sent)
  hits=$(field "$work/$name.json" image_cache_hits)
  [ -n "$sent" ] && [ -n "$bytes" ] && [ -n "$hits" ] || fail "$name: stats lack the image counters: $(cat "$work/$name.json")"
  echo "$name: images_sent=$sent image_bytes_sent=$bytes image_cache_hits=$hits (output correct)"
}

cache=$work/cache
start_server server1 --image-cache "$cache"

run first
[ "$sent" -ge 1 ] && [ "$bytes" -gt 0 ] || fail "first run sent no image"
first_bytes=$bytes
entries=$(ls "$cache" | grep -cE '^[0-9a-f]{64}$')
[ "$entries" -ge 1 ] || fail "nothing stored in $cache"
[ "$(stat -c %a "$cache")" = 700 ] || fail "cache directory mode $(stat -c %a "$cache"), expected 700"

run second
[ "$sent" -eq 0 ] && [ "$bytes" -eq 0 ] && [ "$hits" -ge 1 ] || fail "second run was not served from the cache"
grep -q "event=image-cache-hit" "$work/server1.err" || fail "no image-cache-hit line in the server log"

# 3. Restarted server, same directory.
stop_server
start_server server2 --image-cache "$cache"
run restarted
[ "$sent" -eq 0 ] && [ "$hits" -ge 1 ] || fail "the restarted server did not hit its cache"

# 4. Flip one byte of every entry: each is detected, removed and fetched again.
for f in "$cache"/*; do
  python3 - "$f" <<'EOF' || fail "cannot corrupt $f"
import sys
p = sys.argv[1]
b = bytearray(open(p, 'rb').read())
b[len(b) // 2] ^= 0x01
open(p, 'wb').write(b)
EOF
done
run corrupted
[ "$sent" -ge 1 ] && [ "$bytes" -eq "$first_bytes" ] || fail "a corrupted entry did not make the client send the image again"
grep -q "event=image-cache-corrupt" "$work/server2.err" || fail "no image-cache-corrupt line in the server log"
run after_corruption
[ "$sent" -eq 0 ] && [ "$hits" -ge 1 ] || fail "the image re-sent after the corruption was not stored again"
stop_server

# 5. A 1 MiB bound, a directory already holding 3 x 400 KiB of older images
#    (valid entries: named by their hash).
small=$work/small
mkdir -m 700 "$small"
start_server server3 --image-cache "$small" --image-cache-max-mb 1
python3 - "$small" <<'EOF' || fail "cannot fill $small"
import hashlib, os, sys, time
d = sys.argv[1]
for i in range(3):
    data = os.urandom(400 * 1024)
    p = os.path.join(d, hashlib.sha256(data).hexdigest())
    with open(p, 'wb') as f:
        f.write(data)
    os.chmod(p, 0o600)
    t = time.time() - 1000 + i
    os.utime(p, (t, t))
EOF
run bounded
[ "$sent" -ge 1 ] || fail "bounded: the image was not sent"
total=$(find "$small" -maxdepth 1 -type f -regextype posix-extended -regex '.*/[0-9a-f]{64}' -printf '%s\n' |
        awk '{s += $1} END {print s + 0}')
echo "bounded: cache holds $total bytes (bound 1048576)"
[ "$total" -le 1048576 ] || fail "the cache holds $total bytes, over its 1 MiB bound"
grep -q "event=image-cache-evict" "$work/server3.err" || fail "nothing was evicted"
run bounded_again
[ "$sent" -eq 0 ] && [ "$hits" -ge 1 ] || fail "bounded: the newest image was evicted instead of the oldest"
echo "PASS e2e_image_cache"
