#!/bin/bash
# Load check (issue 9): N concurrent client programs (copies + kernels with
# verification, tests/e2e/kernels_basic.cu and memcpy_roundtrip.cu) on one
# softgpu server, ROUNDS times; counts failures and samples the listener's
# RSS before and after. usage: soak.sh BUILDDIR [N=64] [ROUNDS=2]
set -u
B=$(cd "${1:-build}" && pwd); N=${2:-64}; R=${3:-2}; E=$(cd "$(dirname "$0")/../e2e" && pwd); T=$(mktemp -d)
trap 'kill $SP 2>/dev/null; rm -rf "$T"' EXIT
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
for p in kernels_basic memcpy_roundtrip; do "$NVCC" -cudart shared -o "$T/$p" "$E/$p.cu" || exit 1; done
P=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
RGPU_LOG=error "$B/bin/rgpu-server" --listen tcp://127.0.0.1:$P --device softgpu & SP=$!
export RGPU_LIBDIR=$B/lib; sleep 1
rss() { awk '/VmRSS/{print $2}' /proc/$SP/status; }
r0=$(rss); fails=0; runs=0; peak=0; t0=$(date +%s)
for round in $(seq $R); do
  pids=()
  for i in $(seq $N); do
    p=kernels_basic; [ $((i % 2)) = 0 ] && p=memcpy_roundtrip
    timeout 300 "$B/bin/rgpu" run --server tcp://127.0.0.1:$P "$T/$p" > "$T/out.$i" 2>&1 & pids+=($!)
  done
  sleep 2; w=$(pgrep -c -P $SP); [ "$w" -gt "$peak" ] && peak=$w
  for pid in "${pids[@]}"; do wait $pid || fails=$((fails + 1)); runs=$((runs + 1)); done
done
sleep 1; r1=$(rss)
echo "soak: $runs runs ($N concurrent x $R rounds) in $(( $(date +%s) - t0 )) s, failures=$fails, peak workers=$peak, listener RSS ${r0} kB -> ${r1} kB, workers left=$(pgrep -c -P $SP)"
[ $fails = 0 ]
