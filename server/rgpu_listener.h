/* rgpu_listener: the rgpu-server process that accepts sessions.
 *
 * It never touches CUDA: it polls every listening transport, enforces the
 * session limit and has one worker process started per accepted
 * connection, so a crash, a faulting kernel or a hostile client ends one
 * session only.  The listener runs threads (TLS/QUIC relays, metrics), so
 * it never forks a worker itself: the fork server (rgpu_forkserver.h),
 * started before any thread, forks them and reports their exits. */
#ifndef RGPU_LISTENER_H
#define RGPU_LISTENER_H

#include "rgpu_forkserver.h"
#include "rgpu_transport.h"
#include "rgpu_worker.h"

#define RGPU_SERVER_MAX_LISTEN 16

typedef struct {
  const char *listen[RGPU_SERVER_MAX_LISTEN];
  int nlisten;
  rgpu_transport_opts topts;    /* cert/key/client CA for tls:// and quic:// */
  rgpu_worker_config worker;    /* template for every session */
  uint32_t max_sessions;        /* 0 = unlimited; counts sessions after an authenticated HELLO */
  uint32_t max_pending_auth;    /* workers before HELLO at once; 0 = 16 */
  int shutdown_timeout_ms;      /* after SHUTDOWN, how long workers get before SIGKILL; 0 = 5000 */
  int grace_s;                  /* keep a disconnected session for resume; 0 = no resume */
  /* --quic-direct (rgpu_quic_direct.h): off, or the UDP ports a session's
   * own endpoint may take (0, 0: any the kernel picks). */
  int quic_direct_off;
  uint16_t quic_direct_lo, quic_direct_hi;
  int drain_s;                  /* SIGTERM/SIGINT: wait this long for sessions to end, then
                                 * tell the rest SHUTDOWN; < 0 = default 30 */
  const char *metrics;          /* tcp://HOST:PORT for GET /metrics (rgpu_metrics.h); NULL = off */
  const char *token_file;       /* --token-file, re-read on SIGHUP (worker.token holds it) */
  rgpu_forkserver *forkserver;  /* from rgpu_server_start_forkserver; NULL: rgpu_server_run
                                 * starts one first.  rgpu_server_run stops it. */
} rgpu_server_opts;

/* Starts the fork server that forks this server's workers (no-op if
 * o->forkserver is set).  Call it while the process has a single thread:
 * main() does, right after parsing the command line.  0, or -1 with a
 * sentence in err. */
int rgpu_server_start_forkserver(rgpu_server_opts *o, char *err, size_t errlen);

/* Opens the listeners, prints the "listening on" line(s) to stderr and
 * serves until SIGTERM/SIGINT.  Then it drains: new HELLOs are refused
 * ("shutting down") but RESUMEs of running sessions are still routed;
 * sessions that have not ended after drain_s get a SHUTDOWN event and
 * end; a second signal skips the wait.  If the fork server dies, the
 * listener logs it, closes its listeners and drains the same way.
 * SIGHUP re-reads --token-file and the TLS certificate, key and client CA:
 * new connections get them, sessions already open go on; a file that does
 * not load is logged and the current one kept.  Sessions admitted with a
 * --token-dir token end (SHUTDOWN) within about a second of its file being
 * removed or expiring (rgpu_job_token.h).  Returns
 * the process exit status (0 after an orderly shutdown, 1 if a listener
 * could not be opened or the fork server died). */
int rgpu_server_run(rgpu_server_opts *o);

#endif
