#!/usr/bin/env bash
# PyTorch through rgpu on a GPU machine (issue 16's calls): each script of
# tests/torch/ natively and through `rgpu run` against a local rgpu-server
# on the real GPU (tcp loopback), outputs compared line by line.  Uses
# .gpu-pack/ (scripts/gpu-pack.sh).  Usage: scripts/gpu-torch.sh [--out DIR]
set -u
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/rgpu-gpu-torch}
[ "${1:-}" = --out ] && out=$2
mkdir -p "$out"
P=.gpu-pack
export LD_LIBRARY_PATH=$PWD/$P/syslib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
"$P/bin/rgpu-server" --listen tcp://127.0.0.1:0 --device cuda >"$out/server.out" 2>"$out/server.err" &
srv=$!
trap 'kill $srv 2>/dev/null; wait $srv 2>/dev/null' EXIT
for _ in $(seq 50); do
  uri=$(sed -n 's/^rgpu-server: listening on \([^ ]*\).*/\1/p' "$out/server.err" | head -n 1)
  [ -n "$uri" ] && break
  sleep 0.1
done
[ -n "$uri" ] || { echo "rgpu-server did not start"; cat "$out/server.err"; exit 1; }
fails=0
echo "| script | native | rgpu | output |"
echo "|---|---|---|---|"
for s in tests/torch/*.py; do
  n=$(basename "$s" .py)
  timeout 300 python3 "$s" >"$out/$n.native" 2>"$out/$n.native.err"; rn=$?
  RGPU_STATS=$out/$n.stats timeout 300 "$P/bin/rgpu" run --server "$uri" -- python3 "$s" \
    >"$out/$n.rgpu" 2>"$out/$n.rgpu.err"; rr=$?
  same=same
  cmp -s "$out/$n.native" "$out/$n.rgpu" || { same=DIFFERS; fails=$((fails + 1)); }
  [ $rn = 0 ] && [ $rr = 0 ] || fails=$((fails + 1))
  echo "| $n | rc $rn | rc $rr | $same |"
done
for s in tests/torch/*.py; do
  n=$(basename "$s" .py)
  echo "--- $n natively:"; cat "$out/$n.native"
  cmp -s "$out/$n.native" "$out/$n.rgpu" || { echo "--- $n through rgpu:"; cat "$out/$n.rgpu"; tail -n 20 "$out/$n.rgpu.err"; }
  echo "--- $n rgpu stats: $(head -c 300 "$out/$n.stats" 2>/dev/null)"
done
exit $((fails > 0))
