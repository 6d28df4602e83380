#!/usr/bin/env bash
# Outage test (issue 9) through rgpu-netem's schedule: the link between a
# softgpu rgpu-server and two clients (one over tcp://, one over quic://)
# goes down for 2 s and then for 10 s while both run resume_loop (copies and
# kernels, every result checked).  Both must finish with PASS.  The clients
# use a 4 s idle timeout (RGPU_IDLE_TIMEOUT_MS: QUIC idle timeout,
# TCP_USER_TIMEOUT), so the 10 s outage breaks their connections and the
# sessions are resumed rather than merely waited out; the counts of resumes
# are printed.
#
#   outage_netem.sh BUILD/bin PROGRAM        (root; exit 77 = skipped)
set -u
name=outage_netem bin=$1 prog=$2
. "$(dirname "$0")/netem_prologue.sh"

cat >"$work/clients.sh" <<EOS
#!/usr/bin/env bash
export RGPU_LOG=warn RGPU_IDLE_TIMEOUT_MS=4000 RGPU_RECONNECT_S=60
"$bin/rgpu" run --server tcp://10.77.0.2:5000 -- "$prog" 60 100 >"$work/tcp.out" 2>&1 &
t=\$!
RGPU_CA="$work/cert.pem" "$bin/rgpu" run --server quic://10.77.0.2:5001 -- "$prog" 60 100 >"$work/quic.out" 2>&1 &
q=\$!
wait \$t; rt=\$?
wait \$q; rq=\$?
echo "tcp exit \$rt, quic exit \$rq" >"$work/exits"
[ \$rt = 0 ] && [ \$rq = 0 ]
EOS
chmod +x "$work/clients.sh"

start=$(date +%s.%N)
"$bin/rgpu-netem" -q --rtt-ms 10 --outage 2:2 --outage 6:10 --server-ready-wait tcp:5000 \
  --stats "$work/netem.json" -- \
  "$bin/rgpu-server" --listen tcp://10.77.0.2:5000 --listen quic://10.77.0.2:5001 --device softgpu \
  --cert "$work/cert.pem" --key "$work/key.pem" ::: "$work/clients.sh" 2>"$work/server.err"
rc=$?
end=$(date +%s.%N)
for t in tcp quic; do
  echo "--- $t client ---"; cat "$work/$t.out"
done
cat "$work/exits" 2>/dev/null
res_tcp=$(grep -c "resumed session" "$work/tcp.out")
res_quic=$(grep -c "resumed session" "$work/quic.out")
res_srv=$(grep -c "event=resume " "$work/server.err")
printf "outage_netem: outages 2 s + 10 s, wall %.1f s, tcp resumes %s, quic resumes %s, server resume events %s, exit %s\n" \
  "$(echo "$end - $start" | bc)" "$res_tcp" "$res_quic" "$res_srv" "$rc"
if [ $rc != 0 ] || ! grep -q "PASS resume_loop" "$work/tcp.out" || ! grep -q "PASS resume_loop" "$work/quic.out"; then
  echo "--- server ---"; cat "$work/server.err"
  echo "outage_netem: FAIL"; exit 1
fi
echo "outage_netem: PASS"
