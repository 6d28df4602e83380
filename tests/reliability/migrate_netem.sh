#!/usr/bin/env bash
# Connection migration (issue 21) through rgpu-netem: 2 s into the run the
# client namespace's address changes (--client-readdress: 10.77.0.3 added,
# 10.77.0.1 removed) while resume_loop runs against a softgpu rgpu-server.
# Over quic:// the client's socket can no longer send from the old address,
# so the transport moves the connection to a fresh socket and the server
# follows by connection ID: the program must PASS with RGPU_STATS
# "resumes":0 and the client must log the migration.
# The same run over tcp:// must PASS too, through a session resume: a TCP
# connection is tied to its address, so it dies (keep-alive probes go
# unanswered for the 4 s RGPU_IDLE_TIMEOUT_MS) and the client reconnects
# from the new address.  It used to hang in 1 of 3-7 runs: a client waiting
# for a reply with nothing of its own unacknowledged had no keep-alive, so
# its read never failed (transport/rgpu_tcp.c).
#
#   migrate_netem.sh BUILD/bin PROGRAM        (root; exit 77 = skipped)
set -u
name=migrate_netem bin=$1 prog=$2
. "$(dirname "$0")/netem_prologue.sh"

# run TRANSPORT PORT: one rgpu-netem session, the address change at 2 s;
# resume_loop 40 iterations 100 ms apart (at least 4 s, so the change lands
# inside the run).
run() {
  local t=$1 port=$2 ready=$1
  [ "$t" = quic ] && ready=udp
  local start end
  start=$(date +%s.%N)
  # Bounded, so that a run that hangs is reported with its logs instead of
  # eating the test's whole timeout (CI saw the whole test time out twice
  # with no output, never reproduced alone: which run hung is unknown).
  timeout 45 "$bin/rgpu-netem" --rtt-ms 10 --client-readdress 2 --server-ready-wait "$ready:$port" \
    --stats "$work/$t.netem.json" -- \
    "$bin/rgpu-server" --listen "$t://10.77.0.2:$port" --device softgpu \
    --cert "$work/cert.pem" --key "$work/key.pem" ::: \
    env RGPU_LOG=info RGPU_IDLE_TIMEOUT_MS=4000 RGPU_RECONNECT_S=60 RGPU_CA="$work/cert.pem" \
    RGPU_STATS="$work/$t.stats.json" \
    "$bin/rgpu" run --server "$t://10.77.0.2:$port" -- "$prog" 40 100 4 \
    >"$work/$t.out" 2>"$work/$t.err"
  local rc=$?
  end=$(date +%s.%N)
  echo "$rc" >"$work/$t.rc"
  printf "%.2f" "$(echo "$end - $start" | bc)" >"$work/$t.wall"
}

run quic 5001
run tcp 5000

resumes() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["resumes"])' "$1" 2>/dev/null || echo "?"; }
fail=0
for t in quic tcp; do
  echo "--- $t client (exit $(cat "$work/$t.rc"), wall $(cat "$work/$t.wall") s) ---"
  cat "$work/$t.out"
  grep -v "^\s*$" "$work/$t.err" | tail -n 15
  echo "RGPU_STATS: $(cat "$work/$t.stats.json" 2>/dev/null)"
done
rq=$(resumes "$work/quic.stats.json") rt=$(resumes "$work/tcp.stats.json")
printf "migrate_netem: address change at 2 s: quic wall %s s, resumes %s, migrated %s; tcp wall %s s, resumes %s\n" \
  "$(cat "$work/quic.wall")" "$rq" "$(grep -c "migrated the connection" "$work/quic.err")" \
  "$(cat "$work/tcp.wall")" "$rt"
if [ "$(cat "$work/quic.rc")" != 0 ] || ! grep -q "PASS resume_loop" "$work/quic.out"; then
  echo "migrate_netem: the quic:// run did not PASS (exit $(cat "$work/quic.rc"); 124: hung 45 s)"; fail=1
fi
if [ "$(cat "$work/tcp.rc")" != 0 ] || ! grep -q "PASS resume_loop" "$work/tcp.out"; then
  echo "migrate_netem: the tcp:// run did not PASS (exit $(cat "$work/tcp.rc"); 124: hung 45 s)"; fail=1
fi
if [ "$rq" != 0 ]; then
  echo "migrate_netem: the quic:// session was resumed ($rq), not migrated"; fail=1
fi
if ! grep -q "migrated the connection" "$work/quic.err"; then
  echo "migrate_netem: the quic:// client never migrated (did the address change?)"; fail=1
fi
# The session moved to its worker's own port before the address changed:
# the connection that migrated is the one the worker terminates itself.
dq=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["quic_direct_moves"])' \
  "$work/quic.stats.json" 2>/dev/null || echo "?")
if [ "$dq" != 1 ]; then
  echo "migrate_netem: the quic:// session did not move to a direct port once ($dq)"; fail=1
fi
if [ $fail != 0 ]; then
  cat "$work/quic.netem.json"
  echo "migrate_netem: FAIL"; exit 1
fi
echo "migrate_netem: PASS"
