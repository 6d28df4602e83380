#!/usr/bin/env bash
# PyTorch through rgpu on a GPU machine (issue 18): each stage script of
# tests/torch/ natively and through `rgpu run` against an rgpu-server on the
# real GPU, over tcp and quic on loopback and, with --netem PROFILE, through
# rgpu-netem (needs root and /dev/net/tun).  Outputs are compared line by
# line with the timing and "rgpu-stats:" lines left out; a second table puts
# each timed step natively and through every transport side by side.
# Uses .gpu-pack/ (scripts/gpu-pack.sh).
# Usage: scripts/gpu-torch.sh [--out DIR] [--modes "tcp quic"] [--netem PROFILE]
#        [--scripts "torch_basics torch_cnn"] [--timeout S] [--trace] [--split-cpus N]
# --split-cpus N: the loopback server gets the host's last N CPUs and every
# run of the script (native and through rgpu) the others, as if the server
# were a machine of its own.  Without it the program shares every CPU with
# the server, and a CPU pool that spins (torch's OpenMP threads after CPU
# work) delays the server's threads, which a native run has none of.
# --trace: through rgpu, log every round trip's callers and the cuDNN
# facade's refusals (RGPU_TRACE_ROUND_TRIPS=1, RGPU_LOG=debug); natively,
# cuDNN's own errors and warnings; summaries at the end.
set -u
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/rgpu-gpu-torch}
modes="tcp quic" netem="" scripts="" limit=300 trace=0 split=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --netem) netem=$2; shift 2 ;;
    --scripts) scripts=$2; shift 2 ;;
    --timeout) limit=$2; shift 2 ;;
    --trace) trace=1; shift ;;
    --split-cpus) split=$2; shift 2 ;;
    *) echo "usage: $0 [--out DIR] [--modes LIST] [--netem PROFILE] [--scripts LIST] [--timeout S] [--split-cpus N]" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
P=$PWD/.gpu-pack
export LD_LIBRARY_PATH=$P/syslib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[ -n "$scripts" ] || scripts=$(for s in tests/torch/torch_*.py; do basename "$s" .py; done)

# CPU sets for --split-cpus: the program's and the server's.
prog_cpus=() srv_cpus=()
if [ "$split" -gt 0 ]; then
  ncpu=$(nproc)
  [ "$split" -lt "$ncpu" ] || { echo "--split-cpus $split: the host has only $ncpu CPUs" >&2; exit 2; }
  prog_cpus=(taskset -c "0-$((ncpu - split - 1))")
  srv_cpus=(taskset -c "$((ncpu - split))-$((ncpu - 1))")
  echo "program on CPUs 0-$((ncpu - split - 1)), server on $((ncpu - split))-$((ncpu - 1))"
fi

mkdir -p "$out/cert"
"$P/bin/rgpu-server" --gen-cert "$out/cert" --cert-names 10.77.0.2 2>"$out/gen-cert.err" || { cat "$out/gen-cert.err"; exit 1; }
tlsargs=(--cert "$out/cert/cert.pem" --key "$out/cert/key.pem")
"${srv_cpus[@]}" "$P/bin/rgpu-server" --listen tcp://127.0.0.1:0 --listen quic://127.0.0.1:0 --device cuda "${tlsargs[@]}" \
  --metrics tcp://127.0.0.1:0 \
  >"$out/server.out" 2>"$out/server.err" &
srv=$!
trap 'kill $srv 2>/dev/null; wait $srv 2>/dev/null' EXIT
declare -A uri
for _ in $(seq 100); do
  uri[tcp]=$(sed -n 's/^rgpu-server: listening on \(tcp:[^ ]*\).*/\1/p' "$out/server.err" | head -n 1)
  uri[quic]=$(sed -n 's/^rgpu-server: listening on \(quic:[^ ]*\).*/\1/p' "$out/server.err" | head -n 1)
  # The harness prints the server's busy time per step from it (tests/torch/_harness.py).
  metrics_url=$(sed -n 's/^rgpu-server: metrics on \(http:[^ ]*\).*/\1/p' "$out/server.err" | head -n 1)
  [ -n "${uri[tcp]}" ] && [ -n "${uri[quic]}" ] && [ -n "$metrics_url" ] && break
  sleep 0.1
done
[ -n "${uri[tcp]}" ] || { echo "rgpu-server did not start"; cat "$out/server.err"; exit 1; }

# The text both runs must agree on: without timings and rgpu's own lines.
normalized() { grep -avE '^rgpu[-:[ ]|^time |Warning|warnings.warn' "$1" 2>/dev/null; }

run_mode() {  # script mode -> $out/<script>.<mode>{,.err,.stats}; prints rc
  local s=$1 m=$2 f=$out/$1.$2
  rm -f "$f.stats"
  # torch.compile's caches are fresh for every run (the second run would
  # otherwise load what the first compiled, and print less).
  rm -rf "$f.cache"
  export TORCHINDUCTOR_CACHE_DIR=$f.cache/inductor TRITON_CACHE_DIR=$f.cache/triton
  if [ $trace = 1 ]; then
    export RGPU_TRACE_ROUND_TRIPS=1 RGPU_LOG=debug CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=$f.cudnn
  fi
  case $m in
    native)
      "${prog_cpus[@]}" timeout "$limit" python3 "tests/torch/$s.py" >"$f" 2>"$f.err" ;;
    tcp|quic)
      RGPU_CA=$out/cert/cert.pem RGPU_STATS=$f.stats RGPU_SERVER_METRICS=$metrics_url "${prog_cpus[@]}" timeout "$limit" \
        "$P/bin/rgpu" run --server "${uri[$m]}" -- python3 "tests/torch/$s.py" >"$f" 2>"$f.err" ;;
    netem-tcp|netem-quic)
      local t=${m#netem-} port=7400
      timeout "$limit" "$P/bin/rgpu-netem" -q --profile "$netem" --server-ready-timeout 30 \
        --server-ready-wait "$([ "$t" = tcp ] && echo tcp || echo udp):$port" -- \
        "$P/bin/rgpu-server" --listen "$t://10.77.0.2:$port" --device cuda "${tlsargs[@]}" ::: \
        env RGPU_CA="$out/cert/cert.pem" RGPU_STATS="$f.stats" \
        "$P/bin/rgpu" run --server "$t://10.77.0.2:$port" -- python3 "tests/torch/$s.py" >"$f" 2>"$f.err" ;;
  esac
  echo $?
}

all_modes="native $modes"
[ -n "$netem" ] && all_modes="$all_modes netem-tcp netem-quic"
fails=0
printf '| script |'; for m in $all_modes; do printf ' %s |' "$m"; done; printf ' output |\n'
printf '|---|'; for m in $all_modes; do printf -- '---|'; done; printf -- '---|\n'
for s in $scripts; do
  printf '| %s |' "$s"
  same=same
  for m in $all_modes; do
    rc=$(run_mode "$s" "$m")
    printf ' rc %s |' "$rc"
    [ "$rc" = 0 ] || [ "$rc" = 3 ] || fails=$((fails + 1))
    if [ "$m" != native ] && ! cmp -s <(normalized "$out/$s.native") <(normalized "$out/$s.$m"); then
      same="DIFFERS($m)"; fails=$((fails + 1))
    fi
  done
  printf ' %s |\n' "$same"
done

# Step times: every "time WHAT: X ms" line, natively and per mode, with
# rgpu's round trips per step (from the "rgpu-stats:" line of the same step).
echo
rt_modes=${all_modes#native}
printf '| step |'; for m in $all_modes; do printf ' %s ms |' "$m"; done; printf ' round trips/step (%s) |\n' "${rt_modes# }"
printf '|---|'; for m in $all_modes; do printf -- '---|'; done; printf -- '---|\n'
for s in $scripts; do
  grep -a '^time ' "$out/$s.native" 2>/dev/null | sed 's/^time \(.*\): [0-9.]* ms.*/\1/' | while read -r what; do
    printf '| %s |' "$what"
    base=$(grep -a "^time $what: " "$out/$s.native" | sed 's/.*: \([0-9.]*\) ms.*/\1/')
    for m in $all_modes; do
      v=$(grep -a "^time $what: " "$out/$s.$m" 2>/dev/null | sed 's/.*: \([0-9.]*\) ms.*/\1/')
      if [ -n "$v" ] && [ "$m" != native ]; then
        printf ' %s (%s×) |' "$v" "$(awk "BEGIN{printf \"%.3f\", $v/$base}")"
      else
        printf ' %s |' "${v:--}"
      fi
    done
    rts=""
    for m in $rt_modes; do
      r=$(grep -a "^rgpu-stats: $what: " "$out/$s.$m" 2>/dev/null | sed 's/.*: \([0-9.]*\) round trips per step against \([0-9]*\).*/\1 vs \2 syncs/')
      rts="$rts ${r:--};"
    done
    printf '%s |\n' "$rts"
  done
done
echo
for s in $scripts; do
  for m in $all_modes; do
    if ! grep -aq "^PASS" "$out/$s.$m" 2>/dev/null; then
      echo "--- $s ($m):"; tail -n 12 "$out/$s.$m" 2>/dev/null; tail -n 25 "$out/$s.$m.err" 2>/dev/null
    fi
    if [ "$m" != native ] && ! cmp -s <(normalized "$out/$s.native") <(normalized "$out/$s.$m"); then
      echo "--- $s: natively (<) and through rgpu $m (>):"
      diff <(normalized "$out/$s.native") <(normalized "$out/$s.$m") | head -n 16
    fi
  done
  for m in $rt_modes; do echo "--- $s $m stats: $(head -c 400 "$out/$s.$m.stats" 2>/dev/null)"; done
done
if [ $trace = 1 ]; then
  for s in $scripts; do
    for m in $modes; do
      echo "--- $s $m: round trips by caller (most first)"
      grep -a "round trip:" "$out/$s.$m.err" | sed 's/.*round trip: //' | sort | uniq -c | sort -rn | head -n 15
      echo "--- $s $m: cuDNN facade refusals"
      grep -a "debug: cudnnBackend" "$out/$s.$m.err" | sed 's/^[^]]*] *//' | sort | uniq -c | sort -rn | head -n 10
    done
    echo "--- $s native: cuDNN errors and warnings"
    grep -a "^E!\|^W!" "$out/$s.native.cudnn" 2>/dev/null | sort | uniq -c | sort -rn | head -n 8
  done
fi
echo "--- server log tail:"; tail -n 5 "$out/server.err"
exit $((fails > 0))
