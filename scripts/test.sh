#!/usr/bin/env bash
# Runs every test on a fresh machine: dependencies, build, the whole ctest
# suite (unit + end-to-end on softgpu), the unit tests again under
# ASan/UBSan, and a short libFuzzer run of each decoder.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
export PATH=/usr/local/cuda/bin:$PATH
jobs=$(nproc)

echo "== build"
scripts/build.sh
echo "== ctest (unit + end-to-end)"
ctest --test-dir build --output-on-failure -j"$jobs" --timeout 300

echo "== unit tests under ASan/UBSan"
cmake -S . -B build-asan -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=Debug -DRGPU_SANITIZE=ON -DRGPU_E2E=OFF >/dev/null
cmake --build build-asan -j"$jobs" >/dev/null
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs" -L unit --timeout 300

echo "== fuzzing (bounded)"
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=Debug -DRGPU_FUZZ=ON -DRGPU_E2E=OFF >/dev/null
cmake --build build-fuzz -j"$jobs" >/dev/null
secs=${RGPU_FUZZ_SECONDS:-20}
for f in build-fuzz/bin/*_fuzz; do
  [ -x "$f" ] || continue
  echo "-- $(basename "$f") for ${secs}s"
  corpus=build-fuzz/corpus/$(basename "$f")
  mkdir -p "$corpus"
  "$f" -max_total_time="$secs" -print_final_stats=1 "$corpus" 2>&1 | grep -E "stat::number_of_executed_units|ERROR|SUMMARY" || true
  # A crash leaves crash-* files: fail the run.
  if ls crash-* leak-* timeout-* >/dev/null 2>&1; then
    echo "fuzzer $(basename "$f") found a crash" >&2
    exit 1
  fi
done
echo "== all tests passed"
