#!/usr/bin/env bash
# Runs every libFuzzer target of rgpu for N minutes each (issue 9), one after
# the other, and prints one line of figures per target.
#
#   scripts/fuzz-long.sh [MINUTES=60] [BUILD_DIR=build-fuzz] [TARGET...]
#
# Builds BUILD_DIR with clang and -DRGPU_FUZZ=ON first if it has no fuzz
# targets.  Each target keeps a growing corpus in BUILD_DIR/corpus/<target>,
# seeded from the repository's seeds (server/fuzz_corpus) and, for the PTX
# and fatbin parsers, from nvcc output of the end-to-end programs.  A crash,
# leak or timeout leaves its input in BUILD_DIR/fuzz-artifacts/<target>/ and
# makes the script exit 1 after all targets ran.  Reproduce one with
#   BUILD_DIR/bin/<target> BUILD_DIR/fuzz-artifacts/<target>/crash-...
# Environment: FUZZ_JOBS (parallel processes per target, default 1),
# FUZZ_ARGS (extra libFuzzer flags).
set -uo pipefail
cd "$(dirname "$0")/.."
MIN=${1:-60}; B=${2:-build-fuzz}; shift 2 2>/dev/null || shift $#
TARGETS=("$@")
SECS=$(awk -v m="$MIN" 'BEGIN { printf "%d", m * 60 }')
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}

if ! ls "$B"/bin/*_fuzz >/dev/null 2>&1; then
  echo "== building $B (clang, RGPU_FUZZ=ON)"
  CC=clang CXX=clang++ cmake -S . -B "$B" -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=Debug -DRGPU_FUZZ=ON \
    -DRGPU_E2E=OFF >/dev/null || exit 1
  cmake --build "$B" -j"$(nproc)" >/dev/null || exit 1
fi
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=($(cd "$B/bin" && ls *_fuzz))

seed() { # target: fills an empty corpus with what we have
  local t=$1 c=$B/corpus/$1
  mkdir -p "$c"
  [ -n "$(ls -A "$c")" ] && return
  case $t in
    rgpu_server_fuzz) cp server/fuzz_corpus/* "$c"/ ;;
    rgpu_uri_fuzz)
      printf 'tcp://127.0.0.1:7000' > "$c/tcp"; printf 'quic://[::1]:9' > "$c/quic"
      printf 'unix:///tmp/rgpu.sock' > "$c/unix"; printf 'tls://gpu.example:7443' > "$c/tls" ;;
    sg_ptx_parse_fuzz|rgpu_fatbin_fuzz)
      [ -x "$NVCC" ] || return
      for f in softgpu/ptx/testdata/corpus.cu tests/e2e/kernels_basic.cu tests/e2e/reduce_hist_scan.cu; do
        local n; n=$(basename "$f" .cu)
        if [ $t = sg_ptx_parse_fuzz ]; then
          "$NVCC" -ptx -arch=compute_75 -O2 -Itests/e2e "$f" -o "$c/$n.ptx" 2>/dev/null
        else # first byte picks the parser: 0 fatbin, 2 PTX (see rgpu_fatbin_fuzz.c)
          "$NVCC" -fatbin -Itests/e2e "$f" -o "$c/$n.tmp" 2>/dev/null && { printf '\0'; cat "$c/$n.tmp"; } > "$c/$n.fatbin"
          rm -f "$c/$n.tmp"
        fi
      done ;;
  esac
}

status=0
for t in "${TARGETS[@]}"; do
  f=$B/bin/$t
  [ -x "$f" ] || { echo "$t: not built"; status=1; continue; }
  seed "$t"
  art=$B/fuzz-artifacts/$t; mkdir -p "$art"
  maxlen=""; case $t in sg_ptx_parse_fuzz|rgpu_fatbin_fuzz) maxlen=-max_len=65536 ;; esac
  log=$B/fuzz-$t.log
  echo "== $t for ${SECS}s"
  # -timeout: one input running over 25 s is a hang worth a file.
  par=""; [ "${FUZZ_JOBS:-1}" -gt 1 ] && par="-jobs=$FUZZ_JOBS -workers=$FUZZ_JOBS"
  "$f" -max_total_time="$SECS" -print_final_stats=1 -timeout=25 -rss_limit_mb=4096 $maxlen $par \
    -artifact_prefix="$art/" ${FUZZ_ARGS:-} \
    "$B/corpus/$t" > "$log" 2>&1
  rc=$?
  [ "${FUZZ_JOBS:-1}" -gt 1 ] && cat fuzz-*.log >> "$log" 2>/dev/null && rm -f fuzz-*.log
  execs=$(awk '/stat::number_of_executed_units/ {s += $NF} END {print s + 0}' "$log")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  found=$(ls "$art" 2>/dev/null | wc -l)
  echo "$t: executions=$execs ${cov:-cov: ?} corpus=$(ls "$B/corpus/$t" | wc -l) findings=$found rc=$rc (log $log)"
  if [ "$found" -gt 0 ] || [ $rc -ne 0 ]; then
    status=1
    grep -E "ERROR|SUMMARY" "$log" | head -5
  fi
done
exit $status
