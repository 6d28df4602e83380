#!/usr/bin/env bash
# cuBLASLt costs no round trip beyond the first heuristic query of a shape
# (issue 16): runs rgpu_cublaslt_session_test --work through e2e_run.sh
# with 0 and with 200 rounds (a handle, a matmul descriptor, a layout and a
# preference created, configured and destroyed, the heuristic query of the
# shape asked once before, and a matmul each) between the same two
# synchronizations, and checks through RGPU_STATS that the rounds added
# calls but no round trip.
#
#   cublaslt_roundtrips.sh E2E_RUN PROGRAM [e2e_run.sh options...]
set -u
run=$1 prog=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

field() { sed -n "s/.*\"$2\":\([0-9]*\).*/\1/p" "$1"; }

"$run" "$@" --env "RGPU_STATS=$work/base.json" --expect "PASS cublaslt_work 0" -- "$prog" --work 0 || exit 1
"$run" "$@" --env "RGPU_STATS=$work/full.json" --expect "PASS cublaslt_work 200" -- "$prog" --work 200 || exit 1
base=$(field "$work/base.json" round_trips)
full=$(field "$work/full.json" round_trips)
calls_base=$(field "$work/base.json" calls)
calls_full=$(field "$work/full.json" calls)
echo "round trips: without the rounds $base, with 200 rounds $full; calls $calls_base / $calls_full"
[ -n "$base" ] && [ -n "$full" ] || { echo "FAIL: stats files incomplete" >&2; cat "$work"/*.json >&2; exit 1; }
[ $((calls_full - calls_base)) -ge 2000 ] || { echo "FAIL: the rounds made fewer than 2000 calls" >&2; exit 1; }
[ "$full" -eq "$base" ] || { echo "FAIL: the rounds cost $((full - base)) round trips (expected 0)" >&2; exit 1; }
echo "PASS cublaslt_roundtrips"
