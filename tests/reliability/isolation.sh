#!/bin/bash
# Isolation checks (issue 9) on a softgpu server: per-session quota seen by
# cudaMemGetInfo, another session's pointer refused by every call, and a
# kill -9 of one session's worker leaving the other session intact.
# usage: isolation.sh BUILDDIR   (needs nvcc; BUILDDIR/bin and BUILDDIR/lib)
set -u
B=$(cd "${1:-build}" && pwd); D=$(cd "$(dirname "$0")" && pwd); T=$(mktemp -d)
trap 'kill $SP 2>/dev/null; rm -rf "$T"' EXIT
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
# ctest builds the programs once (RGPU_RELIABILITY_BIN); by hand they are compiled here.
PB=${RGPU_RELIABILITY_BIN:-}
if [ -n "$PB" ] && [ -x "$PB/quota_info" ] && [ -x "$PB/isolation_poke" ]; then
  cp "$PB/quota_info" "$T/quota" && cp "$PB/isolation_poke" "$T/iso"
else
  "$NVCC" -cudart shared -o "$T/quota" "$D/quota_info.cu" && "$NVCC" -cudart shared -o "$T/iso" "$D/isolation_poke.cu" || { echo "isolation: nvcc failed"; exit 1; }
fi
P=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
RGPU_LOG=error "$B/bin/rgpu-server" --listen tcp://127.0.0.1:$P --device softgpu --mem-quota 64M & SP=$!
export RGPU_LIBDIR=$B/lib; S=tcp://127.0.0.1:$P; sleep 1; fail=0
run() { timeout 60 "$B/bin/rgpu" run --server $S "$@"; }
run "$T/quota" > "$T/q"; grep -q "total=67108864" "$T/q" && grep -q cudaErrorMemoryAllocation "$T/q" \
  && echo "quota: cudaMemGetInfo reports 64M, over-quota malloc refused" || { echo "quota: FAIL"; cat "$T/q"; fail=1; }
run "$T/iso" hold 4 > "$T/a" & A=$!; sleep 1.5
run "$T/iso" poke "$(head -1 "$T/a")" | tail -1 || fail=1
run "$T/iso" hold 5 > "$T/b" & BP=$!; sleep 1.5  # killed at 1.5 s; the program notices after its sleep
# Workers are children of the fork server, the listener's child (server/README.md).
W=$(pgrep -P "$(pgrep -d, -P $SP)" | sort -n | tail -1)  # newest worker = the victim session (A and the poke started earlier)
kill -9 "$W" && echo "killed newest worker $W"
wait $BP; echo "victim session exit code $? (nonzero expected)"
wait $A || fail=1; tail -1 "$T/a"
run "$T/quota" >/dev/null && echo "new session after the kill: served" || fail=1
kill -0 $SP || fail=1
[ $fail = 0 ] && echo "isolation: PASS" || echo "isolation: FAIL"; exit $fail
