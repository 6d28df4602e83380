#!/usr/bin/env bash
# `rgpu smi` against a live softgpu server with a session using the GPU
# (issue 15): nvml_query --hold keeps its session (8 MiB allocated) open
# while `rgpu smi --server URI` runs; the table must show the device and
# that session (its pid, program name and memory), and the program itself
# must pass.
#
#   e2e_smi.sh BUILD/bin PROGRAM
set -u
bin=$1 prog=$2
work=$(mktemp -d)
server_pid="" prog_pid=""
cleanup() {
  [ -n "$prog_pid" ] && kill "$prog_pid" 2>/dev/null
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL e2e_smi: $*" >&2; for f in "$work"/*; do echo "--- $f"; cat "$f"; done >&2; exit 1; }

"$bin/rgpu-server" --listen tcp://127.0.0.1:0 --device softgpu >"$work/server.out" 2>"$work/server.err" &
server_pid=$!
uri=""
for _ in $(seq 1 100); do
  uri=$(sed -n 's/^rgpu-server: listening on \([^ ]*\).*/\1/p' "$work/server.err" | head -n 1)
  [ -n "$uri" ] && break
  sleep 0.1
done
[ -n "$uri" ] || fail "rgpu-server did not start"

# No session uses the GPU yet.
"$bin/rgpu" smi --server "$uri" >"$work/smi0.out" 2>&1 || fail "rgpu smi failed with no sessions"
grep -q "rgpu softgpu" "$work/smi0.out" || fail "no softgpu device in the table"
grep -q "No running processes found" "$work/smi0.out" || fail "sessions listed before any"

"$bin/rgpu" run --server "$uri" -- "$prog" --hold 6 >"$work/prog.out" 2>&1 &
prog_pid=$!
for _ in $(seq 1 200); do
  grep -q "holding the session" "$work/prog.out" && break
  kill -0 "$prog_pid" 2>/dev/null || fail "nvml_query ended early"
  sleep 0.1
done
grep -q "holding the session" "$work/prog.out" || fail "nvml_query did not reach --hold"
# rgpu run forks the program: its own pid is the one it printed.
pid=$(sed -n 's/^holding the session for [0-9]* s, pid \([0-9]*\)$/\1/p' "$work/prog.out")
[ -n "$pid" ] || fail "no pid in the hold line"
"$bin/rgpu" smi --server "$uri" >"$work/smi1.out" 2>&1 || fail "rgpu smi failed"
cat "$work/smi1.out"
line=$(grep -E "^\|   0 \| +$pid \| +[0-9]+ \| nvml_query +\| +[0-9]+MiB \|$" "$work/smi1.out") ||
  fail "the session of pid $pid (nvml_query) is not in the table"
mib=$(echo "$line" | sed -E 's/.*\| +([0-9]+)MiB \|$/\1/')
[ "$mib" -ge 8 ] || fail "the session shows $mib MiB, it allocated 8"
grep -qE "\| +[0-9]+MiB / [0-9]+MiB \|" "$work/smi1.out" || fail "no memory figures"
wait "$prog_pid" || fail "nvml_query failed"
prog_pid=""
grep -q "PASS nvml_query" "$work/prog.out" || fail "nvml_query did not pass"

# A server whose device has an NVML (the server's fake driver and fake
# libnvidia-ml.so.1, build/lib): the table shows NVML's figures.
kill "$server_pid" 2>/dev/null
wait "$server_pid" 2>/dev/null
RGPU_SERVER_NVML_LIB="$bin/../lib/librgpu_test_nvml.so" "$bin/rgpu-server" --listen tcp://127.0.0.1:0 \
  --device softgpu --softgpu-lib "$bin/../lib/librgpu_test_driver.so" >"$work/server2.out" 2>"$work/server2.err" &
server_pid=$!
uri=""
for _ in $(seq 1 100); do
  uri=$(sed -n 's/^rgpu-server: listening on \([^ ]*\).*/\1/p' "$work/server2.err" | head -n 1)
  [ -n "$uri" ] && break
  sleep 0.1
done
[ -n "$uri" ] || fail "the second rgpu-server did not start"
"$bin/rgpu" smi --server "$uri" >"$work/smi2.out" 2>&1 || fail "rgpu smi failed against the NVML server"
cat "$work/smi2.out"
for want in "Driver Version: 580.159.04    CUDA Version: 13.0" "| rgpu test driver " \
            "| 00000000:1B:00.0 |" "|  41C |" "123W / 700W" "1024MiB / 143771MiB" "|  55% |"; do
  grep -qF -- "$want" "$work/smi2.out" || fail "the NVML server's table lacks '$want'"
done
echo "PASS e2e_smi (session of pid $line)"
