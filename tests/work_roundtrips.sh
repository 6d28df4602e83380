#!/usr/bin/env bash
# A library's calls cost no round trip (issue 16): runs PROGRAM --work 0 and
# PROGRAM --work 200 through e2e_run.sh (each prints "PASS NAME_work N"
# after N rounds of its library calls between the same two
# synchronizations) and checks through RGPU_STATS that the 200 rounds added
# at least MIN_CALLS calls and no round trip.  Used by cublas/ and
# cublasLt/ (their session tests say what a round is).
#
#   work_roundtrips.sh NAME MIN_CALLS E2E_RUN PROGRAM [e2e_run.sh options...]
set -u
name=$1 min_calls=$2 run=$3 prog=$4
shift 4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

field() { sed -n "s/.*\"$2\":\([0-9]*\).*/\1/p" "$1"; }

"$run" "$@" --env "RGPU_STATS=$work/base.json" --expect "PASS ${name}_work 0" -- "$prog" --work 0 || exit 1
"$run" "$@" --env "RGPU_STATS=$work/full.json" --expect "PASS ${name}_work 200" -- "$prog" --work 200 || exit 1
base=$(field "$work/base.json" round_trips)
full=$(field "$work/full.json" round_trips)
calls_base=$(field "$work/base.json" calls)
calls_full=$(field "$work/full.json" calls)
echo "round trips: without the rounds $base, with 200 rounds $full; calls $calls_base / $calls_full"
[ -n "$base" ] && [ -n "$full" ] || { echo "FAIL: stats files incomplete" >&2; cat "$work"/*.json >&2; exit 1; }
[ $((calls_full - calls_base)) -ge "$min_calls" ] || { echo "FAIL: the rounds made fewer than $min_calls calls" >&2; exit 1; }
[ "$full" -eq "$base" ] || { echo "FAIL: the rounds cost $((full - base)) round trips (expected 0)" >&2; exit 1; }
echo "PASS ${name}_roundtrips"
