#!/bin/bash
# Load check (issue 9): N concurrent client programs on one softgpu server,
# each running tests/reliability/soak_client.cu for SECONDS (allocations,
# pageable and pinned copies, async copies on a stream, two kernels, every
# element verified, everything freed, over and over), ROUNDS times.
#
# Requires zero failed clients, every worker gone afterwards, and no growth
# of server memory: the listener's RSS after the last round must be within
# SOAK_RSS_SLACK_KB (default 1024) of its RSS after the first round; the
# workers' summed RSS at 3/4 of the last round must not exceed round 1's by
# more than SOAK_WORKER_GROWTH_PCT (default 20) percent, nor (for rounds of
# 30 s or more, past the workers' warm-up) its own value at 1/4 of the round.
#
# usage: soak.sh BUILDDIR [N=64] [SECONDS=60] [ROUNDS=2]
#   ctest runs "soak.sh BUILDDIR 16 10 2"; the full check is "soak.sh build 64 60 2".
# Per-client output of failed runs is kept in $SOAK_KEEP (default
# BUILDDIR/soak-logs) so a failure can be diagnosed after the fact.
set -u
B=$(cd "${1:-build}" && pwd); N=${2:-64}; S=${3:-60}; R=${4:-2}
D=$(cd "$(dirname "$0")" && pwd); T=$(mktemp -d); KEEP=${SOAK_KEEP:-$B/soak-logs}
SLACK=${SOAK_RSS_SLACK_KB:-1024}; GROW=${SOAK_WORKER_GROWTH_PCT:-20}
SP=""; SAMP=""
trap '[ -n "$SAMP" ] && kill $SAMP 2>/dev/null; [ -n "$SP" ] && kill $SP 2>/dev/null; rm -rf "$T"' EXIT
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
if [ -n "${RGPU_RELIABILITY_BIN:-}" ] && [ -x "$RGPU_RELIABILITY_BIN/soak_client" ]; then
  cp "$RGPU_RELIABILITY_BIN/soak_client" "$T/soak_client"   # built by ctest's build
else
  "$NVCC" -cudart shared -O2 -I"$D/../e2e" -o "$T/soak_client" "$D/soak_client.cu" || { echo "soak: nvcc failed"; exit 1; }
fi
P=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
MP=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
# 64 MiB per session bounds the whole run's device memory (64 x 64 MiB);
# a client needs about 2 MiB.
MOPT=(); "$B/bin/rgpu-server" --help | grep -q -- --metrics && MOPT=(--metrics tcp://127.0.0.1:$MP)
RGPU_LOG=${SOAK_LOG:-warn} "$B/bin/rgpu-server" --listen tcp://127.0.0.1:$P --device softgpu --mem-quota 64M \
  "${MOPT[@]}" 2> "$T/server.log" & SP=$!
export RGPU_LIBDIR=$B/lib
for _ in $(seq 50); do grep -q "listening on" "$T/server.log" 2>/dev/null && break; sleep 0.1; done
rss() { awk '/VmRSS/{print $2}' /proc/$1/status 2>/dev/null || echo 0; }
# The session workers: children of the fork server, the listener's child.
workers() { local fs; fs=$(pgrep -d, -P $SP) && pgrep -P "$fs"; }
# Every second: workers alive, listener RSS, workers' summed RSS (kB).
( while :; do
    ws=$(workers); n=0; sum=0
    for w in $ws; do r=$(rss $w); sum=$((sum + r)); n=$((n + 1)); done
    echo "$(date +%s) $n $(rss $SP) $sum"; sleep 1
  done > "$T/samples" ) & SAMP=$!
r0=$(rss $SP); fails=0; runs=0; t0=$(date +%s); iters=0; rss_round=()
for round in $(seq $R); do
  pids=(); rs=$(date +%s)
  for i in $(seq $N); do
    timeout $((S + 180)) "$B/bin/rgpu" run --server tcp://127.0.0.1:$P "$T/soak_client" "$S" $((round * 1000 + i)) \
      > "$T/out.$round.$i" 2>&1 & pids+=($!)
  done
  for k in "${!pids[@]}"; do
    i=$((k + 1))
    if wait "${pids[$k]}" && grep -q "^PASS soak_client" "$T/out.$round.$i"; then
      iters=$((iters + $(sed -n 's/.*iterations=\([0-9]*\).*/\1/p' "$T/out.$round.$i")))
    else
      fails=$((fails + 1)); mkdir -p "$KEEP"; cp "$T/out.$round.$i" "$KEEP/"
      echo "soak: client $round.$i failed:"; tail -3 "$T/out.$round.$i"
    fi
    runs=$((runs + 1))
  done
  # Workers' memory a quarter into the round vs three quarters (samples with
  # all N workers alive; exiting workers read 0): growth inside sessions.
  early=$(awk -v a=$((rs + S / 4 + 2)) -v n=$N '$1 >= a && $2 == n {print $4; exit}' "$T/samples")
  late=$(awk -v a=$((rs + 3 * S / 4)) -v n=$N '$1 >= a && $2 == n {print $4; exit}' "$T/samples")
  echo "soak: round $round: workers' RSS early ${early:-?} kB, late ${late:-?} kB"
  [ "$round" = 1 ] && late1=${late:-}
  # Inside a round only from 30 s on: a fresh worker's heap grows for its
  # first ~15 s (measured; docs/reliability.md), which is warm-up, not a leak.
  if [ "$S" -ge 30 ] && [ -n "$early" ] && [ -n "$late" ] && [ "$early" -gt 0 ] && [ "$late" -gt $((early + early * GROW / 100)) ]; then
    echo "soak: FAIL workers' memory grew by more than $GROW% during round $round"; fails=$((fails + 1))
  fi
  # Across rounds: sessions of the same age must not be bigger later on.
  if [ "$round" -gt 1 ] && [ -n "${late1:-}" ] && [ -n "$late" ] && [ "$late" -gt $((late1 + late1 * GROW / 100)) ]; then
    echo "soak: FAIL workers' memory in round $round ($late kB) exceeds round 1 ($late1 kB) by more than $GROW%"
    fails=$((fails + 1))
  fi
  for _ in $(seq 50); do [ -z "$(workers)" ] && break; sleep 0.2; done
  rss_round+=("$(rss $SP)")
done
kill $SAMP 2>/dev/null; SAMP=""
left=$(workers | wc -l); peak=$(awk '$2 > m {m = $2} END {print m + 0}' "$T/samples")
wpeak=$(awk '$4 > m {m = $4} END {print m + 0}' "$T/samples")
metrics=$(curl -s --max-time 5 "http://127.0.0.1:$MP/metrics" 2>/dev/null | grep -E '^rgpu_sessions_(total|active) |^rgpu_calls_total_all |^rgpu_errors_all ' | tr '\n' ' ')
r1=${rss_round[0]}; r2=${rss_round[$((R - 1))]}
echo "soak: $runs runs ($N concurrent x ${S}s x $R rounds) in $(( $(date +%s) - t0 )) s, failures=$fails," \
  "client iterations=$iters, peak workers=$peak, peak workers' RSS=${wpeak} kB," \
  "listener RSS start ${r0} kB, after round 1 ${r1} kB, after round $R ${r2} kB, workers left=$left"
[ -n "$metrics" ] && echo "soak: metrics: $metrics"
[ "$left" = 0 ] || { echo "soak: FAIL $left workers still alive"; fails=$((fails + 1)); }
[ "$r2" -le $((r1 + SLACK)) ] || { echo "soak: FAIL listener RSS grew from $r1 to $r2 kB"; fails=$((fails + 1)); }
grep -E "event=end status=(error|signal)|ERROR|error:" "$T/server.log" | head -5
[ $fails = 0 ] && echo "soak: PASS" || echo "soak: FAIL"
[ $fails = 0 ]
