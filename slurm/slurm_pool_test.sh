#!/usr/bin/env bash
# The Slurm GPU pool end to end (issue 20), on one host:
#
#   slurm_pool_test.sh BUILD_DIR [PATH/rgpu_spank.so]
#
# munged, slurmctld and slurmd on localhost (a slurm.conf generated in a
# temporary directory, the node announcing its pool GPUs as the count-only
# GRES rgpu:2), two softgpu rgpu-servers (s1, s2; one GPU each) with
# --token-dir, and the SPANK plugin in plugstack.conf.  Jobs:
#
#   1. srun --rgpu=1 -t 5: vecadd through `rgpu run` (output checked), on s1;
#      its token expires at the job's end (time limit) plus a minute; after
#      the job its file is gone and the servers refuse the token; a token
#      file of the job that no step removed is swept by the job epilog;
#   2. srun --rgpu=2: RGPU_SERVERS names s1 and s2, vecadd on each;
#   3. placement: while a job holds one GPU, another --rgpu=1 job gets the
#      other server and a --rgpu=2 job is refused ("1 free");
#   4. a client killed with SIGKILL in the middle of its session: the step
#      ends, the token is revoked and the server ends the session (within
#      seconds, not after its 60 s grace period); scancel of a running job
#      does the same; both GPUs are free again;
#   5. sbatch --rgpu=1: the batch step holds the grant, an srun inside it
#      inherits it and takes nothing more;
#   6. a token whose expires= passes during its session: the server ends
#      the session and the client gets CUDA errors.
#
# Needs root and Debian's slurm-wlm/munge; otherwise exits 77 (skip) with
# the reason.  Everything it started is stopped on exit, failure included
# (RGPU_TEST_KEEP=1 keeps the temporary directory with the logs).
set -u
build=$1
plugin=${2:-}
bin=$build/bin
e2e=$build/e2e

skip() { echo "SKIP slurm_pool: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (slurmd runs job steps as their user)"
for p in munged slurmctld slurmd srun scontrol scancel; do
  command -v "$p" >/dev/null 2>&1 || skip "$p not installed (apt-get install slurm-wlm slurmctld slurmd munge)"
done
[ -n "$plugin" ] && [ -f "$plugin" ] || skip "the SPANK plugin was not built (slurm/spank.h missing: apt-get install libslurm-dev)"
[ -x "$e2e/vecadd" ] && [ -x "$e2e/no_server" ] && [ -x "$e2e/resume_loop" ] || skip "e2e programs not built"

T=$(mktemp -d /tmp/rgpu-slurm.XXXXXX)
chmod 755 "$T"
pids=()
# This instance's slurmstepd processes (daemonized, so not our children):
# they carry the SLURM_CONF that slurmd was started with.
our_stepds() {
  local p
  for p in $(pgrep -x slurmstepd 2>/dev/null); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "SLURM_CONF=$T/slurm.conf" && echo "$p"
  done
}
cleanup() {
  # Jobs first (their steps' exit hooks still run), then the daemons; the
  # pids are read once (a daemon removes its pid file as it stops).
  [ -f "$T/slurm.conf" ] && SLURM_CONF=$T/slurm.conf timeout 5 scancel --quiet --full -u root 2>/dev/null
  for _ in $(seq 20); do [ -z "$(our_stepds)" ] && break; sleep 0.1; done
  local daemons=() f p
  for f in "$T/slurmd.pid" "$T/slurmctld.pid" "$T/munge/pid"; do
    [ -s "$f" ] && daemons+=("$(cat "$f")")
  done
  for p in "${daemons[@]}" "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for _ in $(seq 30); do
    alive=0
    for p in "${daemons[@]}" "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for p in "${daemons[@]}" "${pids[@]}" $(our_stepds); do kill -9 "$p" 2>/dev/null; done
  if [ -n "${RGPU_TEST_KEEP:-}" ]; then echo "kept $T"; else rm -rf "$T"; fi
}
trap cleanup EXIT
fail() {
  echo "FAIL slurm_pool: $*"
  for f in "$T"/s1.log "$T"/s2.log "$T"/slurmd.log "$T"/slurmctld.log; do
    [ -f "$f" ] && { echo "--- $f (tail)"; tail -n 25 "$f"; }
  done
  exit 1
}
t_start=$(date +%s.%N)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# --- two rgpu-servers, one pool GPU each ---------------------------------
mkdir -p "$T/pool/s1" "$T/pool/s2"
for s in s1 s2; do
  "$bin/rgpu-server" --listen tcp://127.0.0.1:0 --device softgpu --image-cache off \
    --token-dir "$T/pool/$s" >"$T/$s.log" 2>&1 &
  pids+=($!)
done
for s in s1 s2; do
  for _ in $(seq 100); do grep -q "listening on" "$T/$s.log" && break; sleep 0.05; done
  grep -q "listening on" "$T/$s.log" || fail "rgpu-server $s did not start"
done
uri1=$(grep -o 'tcp://127.0.0.1:[0-9]*' "$T/s1.log" | head -1)
uri2=$(grep -o 'tcp://127.0.0.1:[0-9]*' "$T/s2.log" | head -1)
cat >"$T/pool.conf" <<EOF
token-dir $T/pool
server s1 $uri1 gpus=1
server s2 $uri2 gpus=1
EOF

# --- munge and a one-node Slurm ------------------------------------------
mkdir -p "$T/munge" "$T/state" "$T/spool"
chmod 700 "$T/munge"
head -c 128 /dev/urandom >"$T/munge/key"
chmod 600 "$T/munge/key"
munged -f --socket="$T/munge/sock" --key-file="$T/munge/key" --log-file="$T/munge/log" \
  --pid-file="$T/munge/pid" --seed-file="$T/munge/seed" || fail "munged did not start"
ctld_port=$(free_port)
d_port=$(free_port)
cat >"$T/slurm.conf" <<EOF
ClusterName=rgpupool
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
AuthType=auth/munge
AuthInfo=socket=$T/munge/sock
CredType=cred/munge
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/slurmctld.log
SlurmdLogFile=$T/slurmd.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
KillWait=2
PlugStackConfig=$T/plugstack.conf
GresTypes=rgpu
NodeName=rgpunode NodeHostname=$(hostname) NodeAddr=127.0.0.1 CPUs=8 Gres=rgpu:2 State=UNKNOWN
PartitionName=pool Nodes=rgpunode Default=YES MaxTime=INFINITE State=UP
EOF
# The pool's GPUs as a generic resource of the node that serves them:
# count only (no device files), visible in sinfo/scontrol.
echo "NodeName=rgpunode Name=rgpu Count=2 Flags=CountOnly" >"$T/gres.conf"
echo "required $plugin pool=$T/pool.conf" >"$T/plugstack.conf"
export SLURM_CONF=$T/slurm.conf
slurmctld -f "$SLURM_CONF" -i || fail "slurmctld did not start"
slurmd -f "$SLURM_CONF" -N rgpunode || fail "slurmd did not start"
for _ in $(seq 100); do
  sinfo -h -o %t 2>/dev/null | grep -qx idle && break
  sleep 0.1
done
sinfo -h -o %t | grep -qx idle || fail "the node did not come up: $(sinfo 2>&1)"
scontrol show node rgpunode | grep -q "Gres=rgpu:2" || fail "the node does not announce Gres=rgpu:2"
t_up=$(date +%s.%N)

# --- 1. one remote GPU ----------------------------------------------------
now=$(date +%s)
out=$(timeout 60 srun --rgpu=1 -t 5 bash -c '
  echo "SERVERS=$RGPU_SERVERS"; echo "SERVER=$RGPU_SERVER"; echo "TOKEN=$RGPU_TOKEN"
  echo "GRANT=$RGPU_POOL_GRANT"
  echo "EXPIRES=$(grep -h expires= '"$T"'/pool/*/"$RGPU_POOL_GRANT" | cut -d= -f2)"
  # What a step whose slurmstepd died would leave: the job epilog sweeps it.
  printf "orphan\nexpires=%d\n" $(($(date +%s) + 3600)) > '"$T"'/pool/s2/job-$SLURM_JOB_ID.99
  '"$bin"'/rgpu run -- '"$e2e"'/vecadd' 2>&1) || fail "job 1 failed: $out"
echo "$out" | grep -q 'vecadd of .* floats on .*: all correct' || fail "job 1: vecadd output: $out"
echo "$out" | grep -qx "SERVERS=$uri1" || fail "job 1: expected RGPU_SERVERS=$uri1: $out"
echo "$out" | grep -qx "SERVER=$uri1" || fail "job 1: expected RGPU_SERVER=$uri1: $out"
tok1=$(echo "$out" | sed -n 's/^TOKEN=//p')
grant1=$(echo "$out" | sed -n 's/^GRANT=//p')
exp1=$(echo "$out" | sed -n 's/^EXPIRES=//p')
[ ${#tok1} -eq 64 ] || fail "job 1: no token: $out"
# -t 5: five minutes from the job's start, plus the minute of slack.
left=$((exp1 - now))
[ $left -ge 350 ] && [ $left -le 370 ] || fail "job 1: token expires in ${left}s, want 360 (time limit 5 min + 60 s)"
grep -q "event=auth token=$grant1" "$T/s1.log" || fail "job 1: server s1 did not see the job's token"
ls "$T/pool/s1" "$T/pool/s2" | grep -q "$grant1" && fail "job 1: its token file outlived it"
job1=${grant1#job-}
job1=${job1%%.*}
for _ in $(seq 50); do [ -e "$T/pool/s2/job-$job1.99" ] || break; sleep 0.1; done
[ -e "$T/pool/s2/job-$job1.99" ] && fail "job 1: the epilog did not sweep a step's leftover token file"
after=$(RGPU_SERVER=$uri1 RGPU_TOKEN=$tok1 "$bin/rgpu" run -- "$e2e/no_server" 2>&1)
echo "$after" | grep -q "authentication failed" || fail "job 1's token still opens a session after the job: $after"

# --- 2. two remote GPUs ---------------------------------------------------
out=$(timeout 60 srun --rgpu=2 bash -c '
  echo "SERVERS=$RGPU_SERVERS"
  for s in ${RGPU_SERVERS//,/ }; do RGPU_SERVER=$s '"$bin"'/rgpu run -- '"$e2e"'/vecadd || exit 1; done
  echo "GRANT=$RGPU_POOL_GRANT"' 2>&1) || fail "job 2 failed: $out"
echo "$out" | grep -qx "SERVERS=$uri1,$uri2" || fail "job 2: expected RGPU_SERVERS=$uri1,$uri2: $out"
[ "$(echo "$out" | grep -c 'all correct')" -eq 2 ] || fail "job 2: vecadd did not pass on both: $out"
grant2=$(echo "$out" | sed -n 's/^GRANT=//p')
grep -q "event=auth token=$grant2" "$T/s1.log" && grep -q "event=auth token=$grant2" "$T/s2.log" ||
  fail "job 2: not both servers saw the job's token"

# --- 3. placement under contention ----------------------------------------
srun --rgpu=1 bash -c 'echo $SLURM_JOB_ID > '"$T"'/hold.job; echo "$RGPU_SERVERS" > '"$T"'/hold.servers; sleep 30' >"$T/hold.out" 2>&1 &
hold=$!
pids+=($hold)
for _ in $(seq 100); do [ -s "$T/hold.servers" ] && break; sleep 0.1; done
[ "$(cat "$T/hold.servers" 2>/dev/null)" = "$uri1" ] || fail "holding job: expected $uri1, got $(cat "$T/hold.servers" 2>/dev/null)"
out=$(timeout 30 srun --rgpu=1 bash -c 'echo "SERVERS=$RGPU_SERVERS"' 2>&1) || fail "job 3b failed: $out"
echo "$out" | grep -qx "SERVERS=$uri2" || fail "job 3b: expected the free server $uri2: $out"
# srun itself refuses, with the reason and a failing exit status, before
# anything is allocated.
if out=$(timeout 30 srun --rgpu=2 bash -c 'echo "RAN $RGPU_SERVERS"' 2>&1); then
  fail "job 3c: srun exited 0 while only 1 GPU was free: $out"
fi
echo "$out" | grep -q "^RAN" && fail "job 3c got 2 GPUs while only 1 was free: $out"
echo "$out" | grep -q "2 remote GPUs asked, 1 free of 2" ||
  fail "job 3c: refused without the reason: $out"
# More than the whole pool: refused by sbatch too, at submission.
if out=$(timeout 30 sbatch --rgpu=3 --wrap true 2>&1); then
  fail "sbatch --rgpu=3 was accepted by a pool of 2: $out"
fi
echo "$out" | grep -q "3 remote GPUs asked, the pool has 2" ||
  fail "sbatch --rgpu=3: refused without the reason: $out"
holdjob=$(cat "$T/hold.job")
# scancel of the running job: its token goes and its GPU returns.
scancel "$holdjob"
for _ in $(seq 100); do ls "$T/pool/s1" | grep -q . || break; sleep 0.1; done
ls "$T/pool/s1" | grep -q . && fail "scancel: the job's token file is still there"
wait "$hold" 2>/dev/null

# --- 4. a client killed with SIGKILL ------------------------------------------
srun --rgpu=1 bash -c ''"$bin"'/rgpu run -- sh -c "echo \$\$ > '"$T"'/client.pid; exec '"$e2e"'/resume_loop 100000 50 120"' \
  >"$T/kill.out" 2>&1 &
kjob=$!
pids+=($kjob)
grant4=""
for _ in $(seq 150); do
  [ -z "$grant4" ] && grant4=$(ls "$T/pool/s1" | head -1)
  [ -n "$grant4" ] && [ -s "$T/client.pid" ] && grep -q "event=auth token=$grant4" "$T/s1.log" && break
  sleep 0.1
done
[ -n "$grant4" ] || fail "the job to kill holds no token: $(cat "$T/kill.out")"
grep -q "event=auth token=$grant4" "$T/s1.log" || fail "the client to kill did not start: $(cat "$T/kill.out")"
sleep 0.5
t_kill=$(date +%s.%N)
kill -9 "$(cat "$T/client.pid")"
ended=""
for _ in $(seq 150); do
  if grep -q "event=token-revoked token=$grant4" "$T/s1.log" &&
     grep -Eq "event=end .*reason=(shutdown|drain|grace-expired)|event=shutdown" "$T/s1.log"; then
    ended=$(date +%s.%N)
    break
  fi
  sleep 0.1
done
[ -n "$ended" ] || fail "after kill -9 of the client the server did not end the job's session"
wait "$kjob" 2>/dev/null
left=$(find "$T/pool" -mindepth 2 -type f)
[ -z "$left" ] || fail "token files left after the killed job: $left"
out=$(timeout 30 srun --rgpu=2 bash -c 'echo "SERVERS=$RGPU_SERVERS"' 2>&1) || fail "both GPUs not free after the killed job: $out"
echo "$out" | grep -qx "SERVERS=$uri1,$uri2" || fail "after the killed job: $out"

# --- 5. sbatch --rgpu: the batch step holds the grant, its sruns inherit it --
timeout 60 sbatch --wait --rgpu=1 -o "$T/batch.out" --wrap '
  echo "SERVERS=$RGPU_SERVERS"; echo "GRANT=$RGPU_POOL_GRANT"
  srun bash -c "echo STEP_GRANT=\$RGPU_POOL_GRANT; echo STEP_SERVERS=\$RGPU_SERVERS"
  '"$bin"'/rgpu run -- '"$e2e"'/vecadd' >/dev/null 2>&1 || fail "sbatch --rgpu=1 failed: $(cat "$T/batch.out" 2>&1)"
out=$(cat "$T/batch.out")
echo "$out" | grep -qx "SERVERS=$uri1" || fail "batch job: expected RGPU_SERVERS=$uri1: $out"
bgrant=$(echo "$out" | sed -n 's/^GRANT=//p')
[ -n "$bgrant" ] || fail "batch job: no grant: $out"
echo "$out" | grep -qx "STEP_GRANT=$bgrant" || fail "batch job: its srun step did not inherit the grant: $out"
echo "$out" | grep -qx "STEP_SERVERS=$uri1" || fail "batch job: its srun step got other GPUs: $out"
echo "$out" | grep -q "all correct" || fail "batch job: vecadd: $out"
for _ in $(seq 50); do [ -z "$(find "$T/pool" -mindepth 2 -type f)" ] && break; sleep 0.1; done
left=$(find "$T/pool" -mindepth 2 -type f)
[ -z "$left" ] || fail "token files left after the batch job: $left"

# --- 6. expiry, enforced by the server: a token whose expires= passes ------
# while its session runs ends that session.
printf 'manual-token-0123456789\nexpires=%d\ngpus=1\n' $(($(date +%s) + 2)) >"$T/pool/s2/.manual.tmp"
mv "$T/pool/s2/.manual.tmp" "$T/pool/s2/manual"
RGPU_SERVER=$uri2 RGPU_TOKEN=manual-token-0123456789 RGPU_RECONNECT_S=0 \
  "$bin/rgpu" run -- "$e2e/resume_loop" 100000 50 60 >"$T/expiry.out" 2>&1 &
epid=$!
pids+=($epid)
for _ in $(seq 100); do kill -0 $epid 2>/dev/null || break; sleep 0.1; done
kill -0 $epid 2>/dev/null && fail "the session of an expired token goes on"
grep -q "event=token-revoked token=manual .*expired" "$T/s2.log" || fail "no expiry line in s2's log"
grep -q "FAIL resume_loop" "$T/expiry.out" || fail "the client of an expired token did not get CUDA errors: $(cat "$T/expiry.out")"

t_end=$(date +%s.%N)
python3 - "$t_start" "$t_up" "$t_kill" "$ended" "$t_end" <<'EOF'
import sys
t0, up, kill, ended, end = map(float, sys.argv[1:])
print("PASS slurm_pool: jobs with 1 and 2 remote GPUs ran vecadd, placement spread and "
      "refused beyond the pool, token expiry = time limit + 60 s and refused after the job, "
      "scancel and kill -9 freed the GPUs (session ended %.1f s after the kill), "
      "sbatch's grant inherited by its srun, an expired token ended its session; "
      "Slurm up in %.1f s, %.1f s in all" % (ended - kill, up - t0, end - t0))
EOF
