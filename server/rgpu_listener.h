/* rgpu_listener: the rgpu-server process that accepts sessions.
 *
 * It never touches CUDA: it polls every listening transport, enforces the
 * session limit and forks one worker process per accepted connection, so a
 * crash, a faulting kernel or a hostile client ends one session only. */
#ifndef RGPU_LISTENER_H
#define RGPU_LISTENER_H

#include "rgpu_transport.h"
#include "rgpu_worker.h"

#define RGPU_SERVER_MAX_LISTEN 16

typedef struct {
  const char *listen[RGPU_SERVER_MAX_LISTEN];
  int nlisten;
  rgpu_transport_opts topts;    /* cert/key/client CA for tls:// and quic:// */
  rgpu_worker_config worker;    /* template for every session */
  uint32_t max_sessions;        /* 0 = unlimited */
  int shutdown_timeout_ms;      /* after SHUTDOWN, how long workers get before SIGKILL; 0 = 5000 */
  int grace_s;                  /* keep a disconnected session for resume; 0 = no resume */
  int drain_s;                  /* SIGTERM/SIGINT: wait this long for sessions to end, then
                                 * tell the rest SHUTDOWN; < 0 = default 30 */
  const char *metrics;          /* tcp://HOST:PORT for GET /metrics (rgpu_metrics.h); NULL = off */
} rgpu_server_opts;

/* Opens the listeners, prints the "listening on" line(s) to stderr and
 * serves until SIGTERM/SIGINT.  Then it drains: new HELLOs are refused
 * ("shutting down") but RESUMEs of running sessions are still routed;
 * sessions that have not ended after drain_s get a SHUTDOWN event and
 * end; a second signal skips the wait.  Returns the process exit status (0
 * after an orderly shutdown, 1 if a listener could not be opened). */
int rgpu_server_run(rgpu_server_opts *o);

#endif
