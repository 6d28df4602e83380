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
# One fuzzer per CPU at a time, each in its own directory so that the
# crash-*/leak-*/timeout-* files it leaves name it.
fuzz_one() {
  local f=$1 name dir
  name=$(basename "$f")
  dir=build-fuzz/run/$name
  mkdir -p "$dir" "build-fuzz/corpus/$name"
  (cd "$dir" && "../../bin/$name" -max_total_time="$secs" -print_final_stats=1 \
     "../../corpus/$name" > log 2>&1 || true)
  echo "-- $name for ${secs}s: $(grep -E "stat::number_of_executed_units|ERROR|SUMMARY" "$dir/log" | tr '\n' ' ')"
}
rm -rf build-fuzz/run
running=0
for f in build-fuzz/bin/*_fuzz; do
  [ -x "$f" ] || continue
  fuzz_one "$f" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
done
wait
# A crash leaves crash-*, leak-* or timeout-* files: fail the run.  (find,
# not ls: ls fails when any one of the three patterns matches nothing.)
for d in build-fuzz/run/*; do
  found=$(find "$d" -maxdepth 1 \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \) -printf '%f ')
  if [ -n "$found" ]; then
    echo "fuzzer $(basename "$d") found a crash: $found" >&2
    exit 1
  fi
done
echo "== all tests passed"
