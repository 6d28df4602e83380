#!/usr/bin/env bash
# Round-trip accounting end to end (issue 6): runs async_roundtrips through
# e2e_run.sh twice, with and without its 1100 queued calls between the same
# two synchronizations, and checks through RGPU_STATS that the work cost no
# round trip (and, with RGPU_SYNC_EVERY_CALL=1, that the counter does count
# every wait: at least one per queued call).
#
#   e2e_roundtrips.sh E2E_RUN PROGRAM [e2e_run.sh options...]
set -u
run=$1 prog=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

field() { sed -n "s/.*\"$2\":\([0-9]*\).*/\1/p" "$1"; }

"$run" "$@" --env "RGPU_STATS=$work/base.json" --expect "PASS async_roundtrips" -- "$prog" --ops 0 || exit 1
"$run" "$@" --env "RGPU_STATS=$work/full.json" --expect "PASS async_roundtrips" -- "$prog" || exit 1
"$run" "$@" --env "RGPU_STATS=$work/sync.json" --env RGPU_SYNC_EVERY_CALL=1 \
  --expect "PASS async_roundtrips" -- "$prog" || exit 1
base=$(field "$work/base.json" round_trips)
full=$(field "$work/full.json" round_trips)
sync=$(field "$work/sync.json" round_trips)
calls_base=$(field "$work/base.json" calls)
calls_full=$(field "$work/full.json" calls)
echo "round trips: without the work $base, with 1000 launches + 100 async copies $full, sync-every-call $sync"
echo "calls: $calls_base / $calls_full"
[ -n "$base" ] && [ -n "$full" ] && [ -n "$sync" ] || { echo "FAIL: stats files incomplete" >&2; cat "$work"/*.json >&2; exit 1; }
[ $((calls_full - calls_base)) -ge 1100 ] || { echo "FAIL: the work made fewer than 1100 calls" >&2; exit 1; }
[ "$full" -eq "$base" ] || { echo "FAIL: the queued work cost $((full - base)) round trips (expected 0)" >&2; exit 1; }
[ "$sync" -ge $((base + 1100)) ] || { echo "FAIL: sync-every-call counted only $sync round trips" >&2; exit 1; }
echo "PASS e2e_roundtrips"
