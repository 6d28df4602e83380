#!/usr/bin/env bash
# Runs the full benchmark set (docs/benchmarks.md) on a machine with an
# NVIDIA GPU, device cuda, and leaves results.csv, results.md, the plots and
# the logs in --out (default $OUT, which the device runner brings back).
#
#   scripts/gpu-bench.sh [--pack | --bin DIR --lib DIR] [--progs DIR] [--out DIR]
#                        [--total-s S] [-- HARNESS OPTIONS...]
#
# rgpu itself: built here when this machine has the build dependencies, else
# taken from --bin/--lib or from the .gpu-pack/ made by scripts/gpu-pack.sh
# (the GPU image has no Debian dev packages).  The benchmark programs are
# compiled here with this machine's nvcc when it has one (so they match its
# toolkit), else taken from --progs, .gpu-pack/bench or build/bench.
# --total-s is the wall time the whole script may use (default 570: one
# 10-minute call with room to copy results back); the harness gets what is
# left after building.
set -u
cd "$(dirname "$0")/.."
start=$SECONDS
bin="" lib="" progs="" use_pack=0 total=570 out=${OUT:-/tmp/rgpu-gpu-bench}
while [ $# -gt 0 ]; do
  case "$1" in
    --pack) use_pack=1; shift ;;
    --bin) bin=$2; shift 2 ;;
    --lib) lib=$2; shift 2 ;;
    --progs) progs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --total-s) total=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "usage: $0 [--pack | --bin DIR --lib DIR] [--progs DIR] [--out DIR] [--total-s S] [-- HARNESS OPTIONS]" >&2
       exit 2 ;;
  esac
done
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH

if [ -z "$bin" ]; then
  if [ $use_pack = 0 ] && pkg-config --exists cmocka libngtcp2 2>/dev/null &&
     scripts/build.sh >"$out/build.log" 2>&1; then
    bin=build/bin lib=build/lib
    echo "built rgpu on this machine"
  elif [ -d .gpu-pack/bin ]; then
    bin=.gpu-pack/bin lib=.gpu-pack/lib
    echo "using the prebuilt pack (.gpu-pack)"
  else
    echo "no build dependencies here and no .gpu-pack: run scripts/gpu-pack.sh first, or give --bin/--lib" >&2
    exit 1
  fi
fi
[ -x "$bin/rgpu" ] && [ -x "$bin/rgpu-server" ] || { echo "no rgpu/rgpu-server in $bin" >&2; exit 1; }
bin=$(cd "$bin" && pwd)
# Shared libraries the GPU image lacks travel in the pack's syslib/.
for d in "$(dirname "$bin")/syslib" .gpu-pack/syslib; do
  [ -d "$d" ] && export LD_LIBRARY_PATH=$(cd "$d" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
done
# rgpu run finds libcudart.so.13 beside its binary (BIN/../lib); a --lib
# elsewhere is handed to the harness (which sets RGPU_LIBDIR for rgpu run).
libarg=()
if [ -n "$lib" ]; then
  [ -e "$lib/libcudart.so.13" ] || { echo "no libcudart.so.13 in $lib" >&2; exit 1; }
  libarg=(--lib "$(cd "$lib" && pwd)")
fi

if [ -z "$progs" ]; then
  if command -v nvcc >/dev/null; then
    progs=$out/bench-progs
    mkdir -p "$progs"
    for src in bench/workloads/*.cu; do
      n=$(basename "$src" .cu)
      # Per-program flags from its "// rgpu-nvcc-flags: ..." line (bench_cublas:
      # -lcublas), as bench/CMakeLists.txt reads them.
      flags=$(sed -n 's|^// rgpu-nvcc-flags:[[:space:]]*||p' "$src" | head -n 1)
      # shellcheck disable=SC2086
      nvcc -cudart shared -O2 -o "$progs/$n" "$src" $flags 2>>"$out/nvcc.log" || echo "nvcc $n failed (see nvcc.log)"
    done
    cp bench/workloads/torch_cnn.py "$progs/"
    echo "built the benchmark programs with $(nvcc --version | tail -n 1)"
  elif [ -d .gpu-pack/bench ]; then
    progs=.gpu-pack/bench
  else
    progs=build/bench
  fi
fi
progs=$(cd "$progs" && pwd)

# The rgpu commit for the table: what the workloads' build recorded, else
# git, unless the caller set RGPU_COMMIT.
if [ -z "${RGPU_COMMIT:-}" ]; then
  # The pack's record first: the device machine's copy of .git may be older
  # than the tree the pack was built from (a run there said 55280e3 for a
  # pack of 4e64165).
  RGPU_COMMIT=$(cat "$progs/COMMIT" .gpu-pack/bench/COMMIT 2>/dev/null | head -n 1)
  [ -n "$RGPU_COMMIT" ] || RGPU_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || cat build/bench/COMMIT 2>/dev/null | head -n 1)
  export RGPU_COMMIT
fi

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
left=$(( total - (SECONDS - start) - 20 ))
[ $left -gt 60 ] || { echo "only ${left}s left after building: not enough for the full set" >&2; exit 1; }
# The full set unless the harness options name another (--quick, --smoke).
set_opt=--full
for a in "$@"; do case "$a" in --quick|--smoke|--full) set_opt="" ;; esac; done
python3 bench/rgpu_bench.py $set_opt --device cuda --bin "$bin" "${libarg[@]}" --progs "$progs" \
  --out "$out" --budget-s "$left" "$@"
rc=$?
echo "results in $out: results.md results.csv $(cd "$out" && ls *.png 2>/dev/null | tr '\n' ' ')"
exit $rc
