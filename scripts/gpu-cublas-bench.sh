#!/usr/bin/env bash
# cuBLAS matrix arithmetic on a GPU machine, natively and through rgpu in
# the same run (tcp loopback, device cuda): bench_cublas for SGEMM, DGEMM,
# HGEMM and BF16 at each N, one-off (copies included) and resident (steady
# state), and a table of rgpu/native per point.  Uses .gpu-pack/
# (scripts/gpu-pack.sh).  Usage: scripts/gpu-cublas-bench.sh [--n LIST] [--out DIR]
set -u
cd "$(dirname "$0")/.."
n=256,1024,2048,4096,8192 out=${OUT:-/tmp/rgpu-cublas-bench}
while [ $# -gt 0 ]; do
  case "$1" in
    --n) n=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--n LIST] [--out DIR]" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
P=.gpu-pack
export LD_LIBRARY_PATH=$PWD/$P/syslib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
bench=$P/bench/bench_cublas
"$P/bin/rgpu-server" --listen tcp://127.0.0.1:0 --device cuda >"$out/server.out" 2>"$out/server.err" &
srv=$!
trap 'kill $srv 2>/dev/null; wait $srv 2>/dev/null' EXIT
for _ in $(seq 50); do
  uri=$(sed -n 's/^rgpu-server: listening on \([^ ]*\).*/\1/p' "$out/server.err" | head -n 1)
  [ -n "$uri" ] && break
  sleep 0.1
done
[ -n "$uri" ] || { echo "rgpu-server did not start"; cat "$out/server.err"; exit 1; }
"$bench" --n "$n" >"$out/native.txt" 2>&1 || echo "native run failed: $?"
RGPU_STATS=$out/rgpu.stats "$P/bin/rgpu" run --server "$uri" -- "$bench" --n "$n" >"$out/rgpu.txt" 2>&1 ||
  echo "rgpu run failed: $?"
python3 - "$out/native.txt" "$out/rgpu.txt" <<'PY'
import re, sys
def load(p):
    out = {}
    for line in open(p):
        if not line.startswith("RESULT "):
            continue
        kv = dict(x.split("=", 1) for x in line.split()[1:] if "=" in x)
        key = (kv.get("type", "?"), kv.get("timing", "?"), int(kv.get("n", 0)))
        out[key] = kv
    return out
nat, rg = load(sys.argv[1]), load(sys.argv[2])
print("| type | mode | N | native GFLOP/s | rgpu GFLOP/s | rgpu/native | check |")
print("|---|---|---|---|---|---|---|")
for k in sorted(nat, key=lambda k: (k[0], k[1], k[2])):
    a, b = nat[k], rg.get(k, {})
    ga, gb = float(a.get("gflops", 0) or 0), float(b.get("gflops", 0) or 0)
    ratio = f"{gb / ga:.3f}" if ga and gb else "-"
    print(f"| {k[0]} | {k[1]} | {k[2]} | {ga:.0f} | {gb:.0f} | {ratio} | {b.get('status', 'ok')} |")
PY
echo "rgpu stats: $(cat "$out/rgpu.stats" 2>/dev/null | head -c 400)"
