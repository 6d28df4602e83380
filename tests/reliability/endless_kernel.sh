#!/usr/bin/env bash
# A session ends in bounded time whatever its GPU does (issue 14): with a
# kernel that never ends, the worker exits --session-end-timeout-s after
# the program's exit, after its listener died (never orphaned), and after a
# SIGTERM once the drain period and that timeout passed.
# Usage: endless_kernel.sh BUILD/bin PROGRAM
set -u
bin=$1 prog=$2
work=$(mktemp -d /tmp/rgpu_endless.XXXXXX)
spid=
cleanup() {
  [ -n "$spid" ] && kill -9 "$spid" 2>/dev/null
  [ -n "${cpid:-}" ] && kill -9 "$cpid" 2>/dev/null
  for p in ${workers:-}; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL endless_kernel: $*"; echo "--- server log"; cat "$work"/server*.err 2>/dev/null | tail -30; exit 1; }

start_server() { # $1: log name
  "$bin/rgpu-server" --listen tcp://127.0.0.1:0 --device softgpu --grace-s 0 --drain-s 1 \
    --session-end-timeout-s 2 2>"$work/$1.err" &
  spid=$!
  uri=
  for _ in $(seq 100); do
    uri=$(sed -n 's/.*listening on \(tcp:[^ ]*\).*/\1/p' "$work/$1.err" | head -1)
    [ -n "$uri" ] && return 0
    sleep 0.1
  done
  fail "server did not start"
}
# The session workers: children of the fork server, the listener's child.
worker_pids() {
  local fs
  fs=$(pgrep -P "$spid" | head -1)
  [ -n "$fs" ] && pgrep -P "$fs"
}
gone_within() { # $1: pid, $2: seconds
  for _ in $(seq $(($2 * 10))); do
    kill -0 "$1" 2>/dev/null || return 0
    sleep 0.1
  done
  return 1
}
await_worker() {
  for _ in $(seq 100); do
    workers=$(worker_pids)
    [ -n "$workers" ] && grep -q launched "$work/client.out" 2>/dev/null && return 0
    sleep 0.1
  done
  fail "no worker for the program"
}

# 1. The program exits with the kernel running.
start_server server1
timeout 30 "$bin/rgpu" run --server "$uri" -- "$prog" >"$work/client.out" 2>&1 ||
  fail "the program did not exit cleanly: $(cat "$work/client.out")"
t0=$(date +%s)
for _ in $(seq 120); do
  grep -q "event=end-timeout" "$work/server1.err" && break
  sleep 0.1
done
grep -q "event=end-timeout" "$work/server1.err" || fail "no end-timeout after the program's exit"
for _ in $(seq 30); do [ -z "$(worker_pids)" ] && break; sleep 0.1; done
[ -z "$(worker_pids)" ] || fail "a worker outlived its session: $(worker_pids)"
echo "ok: the worker ended $(( $(date +%s) - t0 )) s after the program's exit"
kill -TERM "$spid"; wait "$spid" 2>/dev/null; spid=

# 2. The listener dies while the program (and its endless kernel) run.
start_server server2
"$bin/rgpu" run --server "$uri" -- "$prog" stay >"$work/client.out" 2>&1 &
cpid=$!
await_worker
kill -9 "$spid"; wait "$spid" 2>/dev/null; spid=
for p in $workers; do gone_within "$p" 8 || fail "worker $p orphaned by the listener's death"; done
echo "ok: no orphaned worker after the listener's death"
kill -9 "$cpid" 2>/dev/null; wait "$cpid" 2>/dev/null; cpid=

# 3. SIGTERM to the worker: it exits after drain (1 s) + end timeout (2 s).
start_server server3
"$bin/rgpu" run --server "$uri" -- "$prog" stay >"$work/client.out" 2>&1 &
cpid=$!
await_worker
kill -TERM $workers
for p in $workers; do gone_within "$p" 10 || fail "worker $p ignored SIGTERM"; done
echo "ok: a SIGTERM'd worker ended"
kill -9 "$cpid" 2>/dev/null; wait "$cpid" 2>/dev/null; cpid=
echo "PASS endless_kernel"
