#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: build rgpu (or use the carried
# .gpu-pack/ from scripts/gpu-pack.sh when this machine lacks the build
# dependencies), start rgpu-server on the real driver, run the end-to-end
# programs natively and through rgpu, and print a pass/fail table with
# times.  Usage: scripts/gpu-e2e.sh [--pack] [--no-rebuild] [--out DIR]
# --no-rebuild uses the pack's programs as compiled on the dev machine
# (same CUDA 13.0 toolkit) instead of recompiling them: saves device time.
# RGPU_E2E_ONLY="prog ..." runs only those programs; RGPU_E2E_TRANSPORT=0
# skips the loopback transport table; RGPU_E2E_TORCH=0 the PyTorch scripts.
set -u
cd "$(dirname "$0")/.."
use_pack=0 rebuild=1 out=${OUT:-/tmp/rgpu-gpu-e2e}
# A program that hangs must not eat the device call: each run gets this long.
base_limit=${RGPU_E2E_TIMEOUT_S:-60}
while [ $# -gt 0 ]; do
  case "$1" in
    --pack) use_pack=1; shift ;;
    --no-rebuild) rebuild=0; shift ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--pack] [--no-rebuild] [--out DIR]" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH

if [ $use_pack = 0 ] && pkg-config --exists cmocka libngtcp2 2>/dev/null && scripts/build.sh >"$out/build.log" 2>&1; then
  BIN=build/bin LIB=build/lib E2E=build/e2e
  echo "built rgpu on this machine"
else
  [ -d .gpu-pack ] || { echo "no build dependencies here and no .gpu-pack: run scripts/gpu-pack.sh first" >&2; exit 1; }
  BIN=.gpu-pack/bin LIB=.gpu-pack/lib E2E=.gpu-pack/e2e
  export LD_LIBRARY_PATH=$PWD/.gpu-pack/syslib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  echo "using the prebuilt pack (.gpu-pack)"
  # Rebuild the CUDA programs here with this machine's nvcc when it has one,
  # so the table does not depend on the dev machine's toolchain.
  if [ $rebuild = 1 ] && command -v nvcc >/dev/null; then
    mkdir -p "$out/e2e"
    # The modules the driver-API programs load from beside themselves (as
    # tests/CMakeLists.txt builds them).
    for src in .gpu-pack/e2e-src/drv_kernels/*.cu; do
      [ -f "$src" ] || continue
      n=$(basename "$src" .cu)
      nvcc -ptx -arch=compute_75 -o "$out/e2e/$n.ptx" "$src" 2>>"$out/nvcc.log" || true
      nvcc -fatbin -gencode arch=compute_75,code=compute_75 -o "$out/e2e/$n.fatbin" "$src" 2>>"$out/nvcc.log" || true
      nvcc -cubin -arch=sm_75 -o "$out/e2e/$n.cubin" "$src" 2>>"$out/nvcc.log" || true
    done
    for src in .gpu-pack/e2e-src/*.cu; do
      n=$(basename "$src" .cu)
      # Per-program flags from its "// rgpu-nvcc-flags: ..." line (the driver
      # API programs need -lcuda), as tests/CMakeLists.txt reads them.
      flags=$(sed -n 's|^// rgpu-nvcc-flags:[[:space:]]*||p' "$src" | head -n 1)
      # shellcheck disable=SC2086
      nvcc -cudart shared -O2 -o "$out/e2e/$n" "$src" $flags 2>>"$out/nvcc.log" || true
    done
    [ -n "$(ls "$out/e2e" 2>/dev/null)" ] && E2E=$out/e2e
  fi
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'

# RGPU_E2E_LISTEN=quic://127.0.0.1:0 (or tls://) runs the programs over that
# transport instead of tcp (a certificate is made for it).
listen=${RGPU_E2E_LISTEN:-tcp://127.0.0.1:0}
scheme=${listen%%://*}
sargs=()
if [ "$scheme" = quic ] || [ "$scheme" = tls ]; then
  mkdir -p "$out/cert"
  "$BIN/rgpu-server" --gen-cert "$out/cert" --cert-names 127.0.0.1 >/dev/null 2>&1
  sargs=(--cert "$out/cert/cert.pem" --key "$out/cert/key.pem")
  export RGPU_CA=$out/cert/cert.pem
fi
"$BIN/rgpu-server" --listen "$listen" --device cuda "${sargs[@]}" >"$out/server.out" 2>"$out/server.err" &
spid=$!
trap 'kill $spid 2>/dev/null' EXIT
uri=""
for _ in $(seq 1 100); do
  uri=$(sed -n 's/^rgpu-server: listening on \([^ ]*\).*/\1/p' "$out/server.err" | head -n 1)
  [ -n "$uri" ] && break
  sleep 0.1
done
[ -n "$uri" ] || { echo "rgpu-server did not start:"; cat "$out/server.err"; exit 1; }
echo "server: $(head -n 1 "$out/server.err")"
"$BIN/rgpu" info --server "$uri" 2>&1 | sed 's/^/  /'

# Every end-to-end program of the suite, except no_server (it checks the
# behaviour with no server at all).  Programs needing arguments are run bare.
progs=()
declare -A exe_of
for f in "$E2E"/*; do
  n=$(basename "$f")
  [ -x "$f" ] && [ -f "$f" ] && [ "$n" != no_server ] && progs+=("$n") && exe_of[$n]=$f
done
# The PyTorch scripts (tests/torch/: PyTorch's cuBLAS/cuBLASLt calls), run
# by python3 when this machine has PyTorch; each through a small wrapper.
# RGPU_E2E_TORCH=0 leaves them to scripts/gpu-torch.sh (which also runs them
# over quic and through rgpu-netem).  They get a longer limit: the first
# step through rgpu sends torch's kernel images.
declare -A limit_of
if [ "${RGPU_E2E_TORCH:-1}" != 0 ] && python3 -c 'import torch' 2>/dev/null; then
  mkdir -p "$out/torch-bin"
  for s in tests/torch/torch_*.py; do
    [ -f "$s" ] || continue
    n=torch_$(basename "$s" .py)
    # torch.compile's caches are fresh for every run: the second run would
    # otherwise load what the first compiled and print less (inductor warns
    # about TF32 only when it compiles).
    printf '#!/bin/sh\nd=$(mktemp -d)\nTORCHINDUCTOR_CACHE_DIR=$d/inductor TRITON_CACHE_DIR=$d/triton python3 %s "$@"\nrc=$?\nrm -rf "$d"\nexit $rc\n' "$PWD/$s" >"$out/torch-bin/$n"
    chmod +x "$out/torch-bin/$n"
    progs+=("$n") exe_of[$n]=$out/torch-bin/$n limit_of[$n]=${RGPU_E2E_TORCH_TIMEOUT_S:-300}
  done
fi
# What a program printed, natively and through rgpu, must be the same text
# (device printf included): rgpu's own lines (its log, and a program's
# "rgpu-stats:" measurements, which only exist through rgpu) and lines with
# timings are left out, and lines are compared sorted (blocks print in any
# order).
normalized_output() {
  grep -avE '^rgpu[-:[ ]|[0-9.]+ ?(ns|us|µs|ms|s|GB/s|MB/s|GFLOP/s)([^a-zA-Z]|$)' "$1" 2>/dev/null | sort
}
# RGPU_E2E_ONLY="a b c" runs just those programs (a short device session
# checking what changed; the PyTorch scripts are named torch_<script>).
if [ -n "${RGPU_E2E_ONLY:-}" ]; then
  kept=()
  for p in "${progs[@]}"; do
    case " $RGPU_E2E_ONLY " in *" $p "*) kept+=("$p") ;; esac
  done
  progs=("${kept[@]}")
fi
printf '\n| program | native | native s | rgpu (%s, real GPU) | rgpu s | round trips | output |\n|---|---|---|---|---|---|---|\n' "$scheme"
fails=0 differ=()
for p in "${progs[@]}"; do
  exe=${exe_of[$p]}
  limit=${limit_of[$p]:-$base_limit}
  [ -x "$exe" ] || { printf '| %s | missing | | missing | | |\n' "$p"; fails=$((fails+1)); continue; }
  t0=$(date +%s.%N)
  LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} timeout "$limit" "$exe" >"$out/$p.native" 2>&1; nrc=$?
  t1=$(date +%s.%N)
  RGPU_STATS=$out/$p.stats "$BIN/rgpu" run --server "$uri" -- "$exe" >"$out/$p.rgpu" 2>&1 &
  cpid=$! waited=0
  while kill -0 $cpid 2>/dev/null && [ $waited -lt $((limit * 10)) ]; do sleep 0.1; waited=$((waited + 1)); done
  if kill -0 $cpid 2>/dev/null; then
    # Hung: keep the client's and the server sessions' stacks, then stop it.
    if command -v gdb >/dev/null; then
      # The server's children are its fork server; theirs are the session workers.
      for hp in $cpid $(pgrep -P $cpid) $(pgrep -P "$(pgrep -d, -P $spid)"); do
        echo "=== pid $hp ($(cat /proc/$hp/comm 2>/dev/null))" >>"$out/$p.bt"
        gdb -batch -p "$hp" -ex "thread apply all bt" >>"$out/$p.bt" 2>&1
      done
    fi
    kill -9 $cpid $(pgrep -P $cpid) 2>/dev/null
    wait $cpid 2>/dev/null
    rrc=124
  else
    wait $cpid; rrc=$?
  fi
  t2=$(date +%s.%N)
  rt=$(sed -n 's/.*"round_trips":\([0-9]*\).*/\1/p' "$out/$p.stats" 2>/dev/null)
  n=$([ $nrc = 0 ] && echo pass || { [ $nrc = 124 ] && echo "TIMEOUT(${limit}s)" || echo "FAIL($nrc)"; })
  r=$([ $rrc = 0 ] && echo pass || { [ $rrc = 124 ] && echo "TIMEOUT(${limit}s)" || echo "FAIL($rrc)"; })
  [ $rrc = 0 ] || fails=$((fails+1))
  same=same
  if ! cmp -s <(normalized_output "$out/$p.native") <(normalized_output "$out/$p.rgpu"); then
    same=DIFFERS differ+=("$p")
    # A difference counts where the program passes natively.
    [ $nrc = 0 ] && [ $rrc = 0 ] && fails=$((fails+1))
  fi
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$p" "$n" "$(awk "BEGIN{printf \"%.2f\", $t1-$t0}")" "$r" "$(awk "BEGIN{printf \"%.2f\", $t2-$t1}")" "${rt:-?}" "$same"
done
echo
for p in "${progs[@]}"; do
  if ! grep -q "^PASS" "$out/$p.rgpu" 2>/dev/null; then
    echo "--- $p through rgpu:"; tail -n 5 "$out/$p.rgpu" 2>/dev/null
    [ -s "$out/$p.bt" ] && { echo "--- $p: client and server session stacks"; grep -E '^(===|Thread|#[0-9]+ )' "$out/$p.bt" | grep -vE ' in (__GI_|__futex|futex_)' | head -n 150; }
  fi
done
for p in "${differ[@]}"; do
  echo "--- $p: output natively (<) and through rgpu (>), normalized:"
  diff <(normalized_output "$out/$p.native") <(normalized_output "$out/$p.rgpu") | head -n 12
done
# The PyTorch scripts' step times natively and through rgpu (tcp), with
# rgpu's round trips per step (scripts/gpu-torch.sh gives quic and netem).
steps=0
for p in "${progs[@]}"; do
  case $p in torch_*) ;; *) continue ;; esac
  while IFS= read -r line; do
    what=${line#time }
    what=${what%%: *}
    nat=$(sed -n "s/^time $what: \([0-9.]*\) ms.*/\1/p" "$out/$p.native" 2>/dev/null | head -n 1)
    rg=$(sed -n "s/^time $what: \([0-9.]*\) ms.*/\1/p" "$out/$p.rgpu" 2>/dev/null | head -n 1)
    rt=$(sed -n "s/^rgpu-stats: $what: \([0-9.]*\) round trips per step against \([0-9]*\).*/\1 per \2 syncs/p" "$out/$p.rgpu" 2>/dev/null | head -n 1)
    if [ $steps = 0 ]; then
      printf '\n| PyTorch step | native ms | rgpu (tcp) ms | ratio | round trips |\n|---|---|---|---|---|\n'
      steps=1
    fi
    ratio=-
    [ -n "$nat" ] && [ -n "$rg" ] && ratio=$(awk "BEGIN{printf \"%.3f\", $rg/$nat}")
    printf '| %s | %s | %s | %s | %s |\n' "$what" "${nat:--}" "${rg:--}" "$ratio" "${rt:--}"
  done < <(grep -a '^time ' "$out/$p.native" 2>/dev/null)
done
# tcp against quic on loopback (issue 21): the raw transport's 64-byte
# ping and bulk copies, and bench_latency's synchronous call through rgpu
# on this GPU, in one run.  RGPU_E2E_TRANSPORT=0 skips it.
if [ "${RGPU_E2E_TRANSPORT:-1}" != 0 ] && [ -x "$BIN/rgpu-transport-perf" ]; then
  tdir=$out/transport
  mkdir -p "$tdir"
  if "$BIN/rgpu-server" --gen-cert "$tdir" --cert-names 127.0.0.1 >/dev/null 2>&1; then
    tc=(--cert "$tdir/cert.pem" --key "$tdir/key.pem")
    "$BIN/rgpu-transport-perf" --server tcp://127.0.0.1:7311 >"$tdir/perf-tcp.log" 2>&1 &
    p1=$!
    "$BIN/rgpu-transport-perf" --server quic://127.0.0.1:7312 "${tc[@]}" >"$tdir/perf-quic.log" 2>&1 &
    p2=$!
    "$BIN/rgpu-transport-perf" --server quic://127.0.0.1:7315 --direct "${tc[@]}" >"$tdir/perf-quic-direct.log" 2>&1 &
    p4=$!
    "$BIN/rgpu-server" --listen tcp://127.0.0.1:7313 --listen quic://127.0.0.1:7314 --device cuda \
      "${tc[@]}" >"$tdir/server.out" 2>"$tdir/server.err" &
    p3=$!
    sleep 2
    lat_exe=""
    for d in "$E2E/../bench" .gpu-pack/bench build/bench; do
      [ -x "$d/bench_latency" ] && { lat_exe=$d/bench_latency; break; }
    done
    printf '\n| loopback, this host | tcp | quic | quic, relayed | quic / tcp |\n|---|---|---|---|---|\n'
    row() { # name tcp quic quic-relayed (numbers; the ratio is quic / tcp)
      r=-
      [ -n "$2" ] && [ -n "$3" ] && r=$(awk "BEGIN{printf \"%.2f\", $3/$2}")
      printf '| %s | %s | %s | %s | %s |\n' "$1" "${2:--}" "${3:--}" "${4:--}" "$r"
    }
    perf() { # uri mode extra... -> the number
      timeout 60 "$BIN/rgpu-transport-perf" --client "$1" --ca "$tdir/cert.pem" --mode "$2" "${@:3}" 2>&1
    }
    # quic: terminated where the session's worker would (--direct, as on a
    # session's own port); relayed: through the listener's relay thread.
    for i in 1 2 3; do
      pt=$(perf tcp://127.0.0.1:7311 ping -n 5000 | sed -n 's/.*median *\([0-9.]*\) us.*/\1/p')
      pq=$(perf quic://127.0.0.1:7315 ping -n 5000 | sed -n 's/.*median *\([0-9.]*\) us.*/\1/p')
      pr=$(perf quic://127.0.0.1:7312 ping -n 5000 | sed -n 's/.*median *\([0-9.]*\) us.*/\1/p')
      row "raw 64-byte ping p50 (us), round $i" "$pt" "$pq" "$pr"
    done
    for m in bulk down; do
      bt=$(perf tcp://127.0.0.1:7311 $m --bytes 2000000000 | sed -n 's/.* \([0-9.]*\) Gbit\/s.*/\1/p')
      bq=$(perf quic://127.0.0.1:7315 $m --bytes 2000000000 | sed -n 's/.* \([0-9.]*\) Gbit\/s.*/\1/p')
      br=$(perf quic://127.0.0.1:7312 $m --bytes 2000000000 | sed -n 's/.* \([0-9.]*\) Gbit\/s.*/\1/p')
      row "raw bulk $m (Gbit/s)" "$bt" "$bq" "$br"
    done
    # Through rgpu: quic sessions move to their worker's own port unless
    # the client sets RGPU_QUIC_DIRECT=0 (the relayed column).
    viargpu() { # uri relayed exe args... -> output
      local u=$1 rel=$2
      shift 2
      if [ "$rel" = 1 ]; then
        RGPU_QUIC_DIRECT=0 RGPU_CA=$tdir/cert.pem timeout 60 "$BIN/rgpu" run --server "$u" -- "$@" 2>&1
      else
        RGPU_CA=$tdir/cert.pem timeout 60 "$BIN/rgpu" run --server "$u" -- "$@" 2>&1
      fi
    }
    if [ -n "$lat_exe" ]; then
      for i in 1 2 3; do
        lt=$(viargpu tcp://127.0.0.1:7313 0 "$lat_exe" --iters 3000 | sed -n 's/.*p50_us=\([0-9.]*\).*/\1/p' | head -n 1)
        lq=$(viargpu quic://127.0.0.1:7314 0 "$lat_exe" --iters 3000 | sed -n 's/.*p50_us=\([0-9.]*\).*/\1/p' | head -n 1)
        lr=$(viargpu quic://127.0.0.1:7314 1 "$lat_exe" --iters 3000 | sed -n 's/.*p50_us=\([0-9.]*\).*/\1/p' | head -n 1)
        row "rgpu bench_latency p50 (us), round $i" "$lt" "$lq" "$lr"
      done
      bw_exe=${lat_exe%/*}/bench_bandwidth
      if [ -x "$bw_exe" ]; then
        for i in 1 2; do
          for d in h2d d2h; do
            gb() { viargpu "$1" "$2" "$bw_exe" --sizes 256M --mem pinned --dir both --reps 3 |
              grep -a "variant=${d}_pinned " | grep -o 'gbps=[0-9.]*' | head -n 1 | cut -d= -f2; }
            row "rgpu pinned 256 MiB $d (GB/s), round $i" "$(gb tcp://127.0.0.1:7313 0)" \
              "$(gb quic://127.0.0.1:7314 0)" "$(gb quic://127.0.0.1:7314 1)"
          done
        done
      fi
    fi
    kill $p1 $p2 $p3 $p4 2>/dev/null
    wait $p1 $p2 $p3 $p4 2>/dev/null
  fi
fi
echo "--- server log tail:"; tail -n 5 "$out/server.err"
exit $fails
