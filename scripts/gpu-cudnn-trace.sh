#!/usr/bin/env bash
# Diagnosis on a GPU machine: the cuDNN calls PyTorch makes for one small
# workload, natively (cuDNN's own API log) and through rgpu (rgpu's debug
# log of the client, and cuDNN's API log of the server, which shows what
# the server rebuilt and where cuDNN refused it).  Logs land gzipped in
# --out.  Uses .gpu-pack/ (scripts/gpu-pack.sh).
# Usage: scripts/gpu-cudnn-trace.sh [--out DIR] [conv|sdpa|bn|pose|all|torch_SCRIPT]
set -u
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/rgpu-cudnn-trace}
[ "${1:-}" = --out ] && { out=$2; shift 2; }
what=${1:-all}
mkdir -p "$out"
P=$PWD/.gpu-pack
export LD_LIBRARY_PATH=$P/syslib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
probe=$out/probe.py
cat >"$probe" <<'EOF'
import sys, torch
torch.backends.cudnn.deterministic = True
w = sys.argv[1]
torch.manual_seed(0)
if w == "conv":
    m = torch.nn.Conv2d(3, 8, 3, padding=1).cuda()
    x = torch.randn(2, 3, 8, 8, device="cuda", requires_grad=True)
    y = m(x); y.sum().backward()
    print("conv", y.sum().item(), x.grad.sum().item(), m.weight.grad.sum().item())
elif w == "bn":
    m = torch.nn.BatchNorm2d(8).cuda()
    x = torch.randn(2, 8, 8, 8, device="cuda", requires_grad=True)
    y = m(x); y.square().sum().backward()
    print("bn", y.sum().item(), x.grad.sum().item())
elif w == "pose":
    sys.path.insert(0, "tests/torch")
    from torch_cnn import pose_net
    net = pose_net(torch).cuda().eval()
    x = torch.rand(1, 3, 368, 368, device="cuda")
    with torch.no_grad():
        p, h = net(x)
    print("pose", p.double().sum().item(), h.double().sum().item())
elif w == "sdpa":
    q = torch.randn(2, 4, 64, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    y = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    y.float().sum().backward()
    print("sdpa", y.float().sum().item())
EOF
# A probe by name, or a whole script of tests/torch/ (torch_graphs, ...).
prog() { if [ -f "tests/torch/$1.py" ]; then echo "tests/torch/$1.py"; else echo "$probe $1"; fi; }
"$P/bin/rgpu-server" --listen tcp://127.0.0.1:0 --device cuda >"$out/server.out" 2>"$out/server.err" &
srv=$!
trap 'kill $srv 2>/dev/null; wait $srv 2>/dev/null' EXIT
for _ in $(seq 100); do
  uri=$(sed -n 's/^rgpu-server: listening on \([^ ]*\).*/\1/p' "$out/server.err" | head -n 1)
  [ -n "$uri" ] && break
  sleep 0.1
done
[ -n "$uri" ] || { echo "rgpu-server did not start"; exit 1; }
[ "$what" = all ] && what="conv bn sdpa"
for w in $what; do
  CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG="$out/$w.native.cudnn" timeout 120 python3 $(prog "$w") \
    >"$out/$w.native" 2>&1
  echo "== $w native rc $?: $(tail -n 1 "$out/$w.native")"
  RGPU_LOG=debug timeout 120 "$P/bin/rgpu" run --server "$uri" -- python3 $(prog "$w") \
    >"$out/$w.rgpu" 2>&1
  echo "== $w rgpu rc $?: $(tail -n 1 "$out/$w.rgpu")"
  # The facade's refusals (debug level), most frequent first, then the end.
  grep -a "cudnnBackend" "$out/$w.rgpu" | sed 's/^[^]]*] *//' | sort | uniq -c | sort -rn | head -n 25
  grep -a "Error" "$out/$w.rgpu" | tail -n 3
done
# The server's worker logs cuDNN's own API trace when asked: restart it so.
kill $srv; wait $srv 2>/dev/null
CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG="$out/server.cudnn" \
  "$P/bin/rgpu-server" --listen tcp://127.0.0.1:0 --device cuda >"$out/server.out" 2>"$out/server2.err" &
srv=$!
for _ in $(seq 100); do
  uri=$(sed -n 's/^rgpu-server: listening on \([^ ]*\).*/\1/p' "$out/server2.err" | head -n 1)
  [ -n "$uri" ] && break
  sleep 0.1
done
for w in $what; do
  : >"$out/server.cudnn"
  timeout 120 "$P/bin/rgpu" run --server "$uri" -- python3 $(prog "$w") >/dev/null 2>&1
  cp "$out/server.cudnn" "$out/$w.server.cudnn"
done
# The engine and knobs of every execute, natively and as the server ran it.
executes() {
  awk '/function cudnnBackendExecute\(\) called/ {on=1; line=""; next}
       on && /engine_id: type=int; val=/ {sub(/.*val=/, ""); sub(/;.*/, ""); line="engine " $0}
       on && /CUDNN_KNOB_TYPE_/ {k=$0; sub(/^[^C]*/, "", k); sub(/: type=int; val=/, "=", k); sub(/;.*/, "", k); line=line " " k}
       on && /^i! Time:/ {print line; on=0}' "$1"
}
for w in $what; do
  [ -f "$out/$w.server.cudnn" ] || continue
  echo "--- $w: executes natively (<) and on the server through rgpu (>)"
  diff <(executes "$out/$w.native.cudnn" | sort | uniq -c) <(executes "$out/$w.server.cudnn" | sort | uniq -c) | head -n 30
  echo "--- $w: cuDNN functions called natively (<) and by the server (>)"
  diff <(grep -ao 'function [A-Za-z_]*()' "$out/$w.native.cudnn" | sort | uniq -c) \
       <(grep -ao 'function [A-Za-z_]*()' "$out/$w.server.cudnn" | sort | uniq -c) | head -n 30
done
gzip -f "$out"/*.cudnn "$out"/*.rgpu 2>/dev/null
ls -la "$out"
