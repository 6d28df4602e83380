#!/usr/bin/env bash
# Runs one end-to-end program through rgpu and checks its outcome.
#
#   e2e_run.sh --bin BUILD/bin [--listen URI] [--server-args "..."] [--env K=V]...
#              [--remote URI] [--expect REGEX]... [--expect-fail]
#              [--server-token T] [--untrusted-ca] [--client-scheme S] [--servers N]
#              -- PROGRAM ARGS...
#
# Without --listen the program runs under `rgpu run` with its private
# softgpu server (the quick-start path).  With --listen the script starts
# rgpu-server on that URI itself (port 0 = any free port, read back from the
# server's first line), so the same program is exercised over tcp://, tls://
# and quic://.  --remote URI points the program at a server the script does
# not start (used to test an unreachable one).  Every --expect regex must match the combined output.
# Refusal tests: --server-token T starts the server with --token-file
# holding T (the client's token comes from --env RGPU_TOKEN=...);
# --untrusted-ca pins a second, unrelated self-signed certificate on the
# client; --client-scheme tcp makes the client speak plain tcp:// to the
# server's tls:// port.
# --servers N (with --listen) starts N servers alike and gives the program
# all of them (RGPU_SERVER=URI1,URI2,...: several servers, issue 19), and
# --remote's URI after them when both are given; each
# runs in a process group of its own, whose ids the program finds in
# RGPU_TEST_SERVER_PGIDS (comma-separated, in RGPU_SERVER's order) to stop
# one mid-run.
set -u
bin="" listen="" remote="" server_args="" expect_fail=0
server_token="" untrusted_ca=0 client_scheme="" nservers=1
expects=() envs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin=$2; shift 2 ;;
    --listen) listen=$2; shift 2 ;;
    --remote) remote=$2; shift 2 ;;
    --server-args) server_args=$2; shift 2 ;;
    --expect) expects+=("$2"); shift 2 ;;
    --expect-fail) expect_fail=1; shift ;;
    --env) envs+=("$2"); shift 2 ;;
    --server-token) server_token=$2; shift 2 ;;
    --untrusted-ca) untrusted_ca=1; shift ;;
    --client-scheme) client_scheme=$2; shift 2 ;;
    --servers) nservers=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "e2e_run.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -n "$bin" ] && [ $# -gt 0 ] || { echo "usage: e2e_run.sh --bin DIR [...] -- PROGRAM" >&2; exit 2; }

work=$(mktemp -d)
server_pid=""
extra_pids=()
cleanup() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$server_pid" 2>/dev/null
  fi
  # --servers: each server and its workers form a process group.
  for p in "${extra_pids[@]}"; do
    kill -- "-$p" 2>/dev/null
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 -- "-$p" 2>/dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT

run_args=()
[ -n "$remote" ] && run_args=(--server "$remote")
# The URI a server started with stderr in $1 (pid $2, named $3 in the
# message) says it listens on, once it does; 1 (with its log) if it exits
# or says nothing within 10 s.
listening_uri() {
  local u=""
  for _ in $(seq 1 100); do
    u=$(sed -n 's/^rgpu-server: listening on \([^ ]*\).*/\1/p' "$1" | head -n 1)
    [ -n "$u" ] && { echo "$u"; return 0; }
    kill -0 "$2" 2>/dev/null || break
    sleep 0.1
  done
  echo "e2e_run.sh: $3 did not start listening on $listen" >&2
  cat "$1" >&2
  return 1
}

if [ -n "$listen" ]; then
  # tls:// and quic:// need a certificate: a fresh self-signed pair per run
  # (a few ms), pinned by the client through RGPU_CA, unless the caller
  # brought its own (--server-args "--cert ... --key ...", --env RGPU_CA=...).
  case "$listen" in
    tls://*|quic://*)
      case " $server_args " in
        *" --cert "*) ;;
        *)
          mkdir -p "$work/cert"
          "$bin/rgpu-server" --gen-cert "$work/cert" 2>"$work/gen-cert.err" ||
            { echo "e2e_run.sh: rgpu-server --gen-cert failed:" >&2; cat "$work/gen-cert.err" >&2; exit 1; }
          server_args="$server_args --cert $work/cert/cert.pem --key $work/cert/key.pem"
          envs=("RGPU_CA=$work/cert/cert.pem" "${envs[@]}")
          if [ "$untrusted_ca" = 1 ]; then
            mkdir -p "$work/other"
            "$bin/rgpu-server" --gen-cert "$work/other" 2>/dev/null ||
              { echo "e2e_run.sh: rgpu-server --gen-cert failed" >&2; exit 1; }
            envs+=("RGPU_CA=$work/other/cert.pem")
          fi
          ;;
      esac
      ;;
  esac
  if [ -n "$server_token" ]; then
    printf '%s\n' "$server_token" >"$work/token"
    server_args="$server_args --token-file $work/token"
  fi
  # Each run its own kernel image cache (issue 15), so that no test depends
  # on what an earlier one left in the default directory.
  own_cache=1
  case " $server_args " in
    *" --image-cache "*) own_cache=0 ;;
  esac
  if [ "$nservers" -gt 1 ] || [ -n "$remote" ]; then
    uris="" pgids=""
    for k in $(seq 1 "$nservers"); do
      # setsid: the server leads a process group (no job control here, so
      # it execs in place and $! is the server), its workers join it.
      cache=""
      [ "$own_cache" = 1 ] && cache="--image-cache $work/image-cache-$k"
      # shellcheck disable=SC2086
      setsid "$bin/rgpu-server" --listen "$listen" --device softgpu $server_args $cache >"$work/server$k.out" 2>"$work/server$k.err" &
      extra_pids+=($!)
      # The program may kill it (a lost server): no "Killed" line from bash.
      disown "$!" 2>/dev/null
      u=$(listening_uri "$work/server$k.err" "${extra_pids[-1]}" "rgpu-server $k") || exit 1
      uris="$uris${uris:+,}$u"
      pgids="$pgids${pgids:+,}${extra_pids[-1]}"
    done
    # --remote with --listen: one more server, not started here (after the
    # started ones in RGPU_SERVER).
    [ -n "$remote" ] && uris="$uris,$remote"
    envs+=("RGPU_TEST_SERVER_PGIDS=$pgids")
    run_args=(--server "$uris")
  else
    [ "$own_cache" = 1 ] && server_args="$server_args --image-cache $work/image-cache"
    # shellcheck disable=SC2086
    "$bin/rgpu-server" --listen "$listen" --device softgpu $server_args >"$work/server.out" 2>"$work/server.err" &
    server_pid=$!
    uri=$(listening_uri "$work/server.err" "$server_pid" rgpu-server) || exit 1
    [ -n "$client_scheme" ] && uri="$client_scheme://${uri#*://}"
    run_args=(--server "$uri")
  fi
fi

env "${envs[@]}" "$bin/rgpu" run "${run_args[@]}" -- "$@" >"$work/out" 2>&1
rc=$?
cat "$work/out"
if [ -n "$server_pid" ] && [ -s "$work/server.err" ] && grep -qiE "error|fault" "$work/server.err"; then
  echo "--- server log ---"; cat "$work/server.err"
fi
if [ "$expect_fail" = 1 ]; then
  [ $rc -ne 0 ] || { echo "e2e_run.sh: expected failure, got exit 0" >&2; exit 1; }
else
  [ $rc -eq 0 ] || { echo "e2e_run.sh: program exited with $rc" >&2; exit 1; }
fi
for re in "${expects[@]}"; do
  grep -qE -- "$re" "$work/out" || { echo "e2e_run.sh: output lacks /$re/" >&2; exit 1; }
done
exit 0
