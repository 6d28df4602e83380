/* rgpu_worker: one client session of rgpu-server.
 *
 * The listener forks a worker per accepted connection.  The worker reads
 * frames, authenticates the HELLO, loads the driver (real libcuda or
 * softgpu) and executes requests strictly in arrival order against that
 * session's own contexts, handles and allocations.
 *
 * Request handling does not need a socket: rgpu_worker_handle() takes one
 * decoded frame and appends the frames to send back to a buffer, so unit
 * tests and the fuzzer drive it directly. */
#ifndef RGPU_WORKER_H
#define RGPU_WORKER_H

#include <stddef.h>
#include <stdint.h>

#include "rgpu_auth.h"
#include "rgpu_frame.h"
#include "rgpu_transport.h"
#include "rgpu_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  RGPU_DEVICE_AUTO = 0, /* libcuda.so.1 if it has a device, else softgpu */
  RGPU_DEVICE_CUDA = 1,
  RGPU_DEVICE_SOFTGPU = 2
} rgpu_device_kind;

const char *rgpu_device_kind_name(rgpu_device_kind k);

/* What the listener hands to a worker at fork time. */
typedef struct {
  rgpu_device_kind device;
  char softgpu_lib[512];      /* resolved path of libsoftgpu.so */
  int token_required;         /* 0: no token file, no authentication */
  char token[RGPU_AUTH_TOKEN_MAX + 1];
  /* --token-dir (rgpu_job_token.h): per-job tokens, looked up at HELLO;
   * "" = none.  With it a HELLO needs a token even without token_required. */
  char token_dir[512];
  uint64_t mem_quota;         /* bytes per session; 0 = unlimited */
  uint32_t max_payload;       /* largest frame payload accepted and sent */
  uint32_t max_sessions;      /* for SERVER_STATUS */
  uint32_t sessions_active;   /* at fork time, this one included */
  uint64_t server_start;      /* CLOCK_REALTIME seconds when the listener started */
  uint64_t session_id;
  char peer[128];
  char transport[16];
  /* Resumable sessions and drain (rgpu_replay.h).  All zero = neither. */
  int grace_s;                /* keep a disconnected session this long; 0 = no resume */
  int ctl_fd;                 /* SOCK_SEQPACKET to the listener; <= 0 = none */
  size_t replay_bytes;        /* bound of the replay buffer; 0 = RGPU_REPLAY_DEFAULT_BYTES */
  char refuse_new[128];       /* non-empty: HELLO is refused with this text (full, draining) */
  int hello_timeout_s;        /* the whole first frame must arrive within it; 0 = 10 s */
  /* After the session ended (GOODBYE, EOF, grace period over), the device
   * must drain within this many seconds or the worker exits without its
   * orderly cleanup (an endless kernel); 0 = 10 s, < 0 = wait forever. */
  int session_end_timeout_s;
  int drain_s;                /* the listener's drain period: SIGTERM ends the worker after
                               * drain_s + session_end_timeout_s at the latest */
  /* The worker owns its process (forked per session): with a real driver,
   * fd 1 may become the pipe that carries device printf to the client
   * (rgpu_output.h).  0 in-process (tests), where fd 1 is not ours. */
  int own_process;
  /* Kernel image cache (rgpu_image_cache.h, issue 15): the directory the
   * workers share; "" = no cache.  The bound in bytes (0 = default). */
  char image_cache_dir[512];
  uint64_t image_cache_max_bytes;
  /* --devices (rgpu_device_list.h, issue 19): session device i is the
   * driver's device devices[i]; ndevices 0 = every device, in order. */
  int ndevices;
  int devices[64];
  /* quic:// sessions: what the worker's own QUIC endpoint is made with
   * (rgpu_quic_direct.h); on = 0 keeps the session on the relay.  The
   * listener fills it from its quic:// address and transport options. */
  struct {
    int on;
    char host[256];            /* bind address: the listener's */
    char cert_file[512], key_file[512], client_ca_file[512];
    char cc_algo[16];
    int idle_timeout_ms, keepalive_ms, max_pto_ms, max_streams;
    uint16_t port_lo, port_hi; /* --quic-direct LO-HI; 0, 0: any */
  } quic_direct;
} rgpu_worker_config;

/* Messages between the listener and a worker on cfg.ctl_fd (one datagram
 * each; RESUME_REQ and RESUME are followed by an rgpu_conn_send of the new
 * connection).  Worker -> listener: REGISTER (the session token, after
 * HELLO; with max_sessions set it waits for ADMIT), RESUME_REQ (a fresh
 * connection presented token; rx_bytes).  REGISTER's text names the
 * --token-dir file the HELLO's token came from ("" = --token-file or none),
 * so that the listener ends the session when that file goes or expires.
 * Listener -> worker: RESUME_ANS (ok: the connection went to its session),
 * RESUME (take this connection over), SHUTDOWN (end the session: text),
 * DRAIN (the server stops: end as soon as the client is gone). */
enum {
  RGPU_CTL_REGISTER = 1,
  RGPU_CTL_RESUME_REQ = 2,
  RGPU_CTL_RESUME_ANS = 3,
  RGPU_CTL_RESUME = 4,
  RGPU_CTL_SHUTDOWN = 5,
  RGPU_CTL_DRAIN = 6, /* the server drains: a disconnected session ends now */
  /* 7 is RGPU_CTL_STREAM (rgpu_bulk.h).  Listener -> worker, the answer to
   * REGISTER when the server has --max-sessions: ok = 1, the session counts
   * from now on; ok = 0, refused (text: why), as a HELLO to a full server. */
  RGPU_CTL_ADMIT = 8
};
typedef struct {
  uint32_t type;
  uint32_t ok;
  uint64_t session_id;
  uint64_t rx_bytes;
  uint8_t token[32];
  char text[160];
} rgpu_ctl_msg;

typedef struct rgpu_worker rgpu_worker;

/* A worker in a process of its own (cfg.own_process) ends in bounded time
 * whatever its device does: rgpu_worker_watchdog_start starts a thread that
 * exits the process (status 3, no cleanup: the last resort) when the
 * session ended (GOODBYE, EOF, grace period over) and the device has not
 * drained within cfg.session_end_timeout_s, when the listener is gone (its
 * control channel hung up) and the same time passed, or drain_s +
 * session_end_timeout_s after a SIGTERM (rgpu_worker_on_sigterm, the
 * handler to install: the listener's drain comes first). */
void rgpu_worker_watchdog_start(rgpu_worker *w);
void rgpu_worker_on_sigterm(int sig);

/* Allocates a session (no driver is loaded until an authenticated HELLO).
 * Returns NULL on out of memory.  Free with rgpu_worker_free. */
rgpu_worker *rgpu_worker_new(const rgpu_worker_config *cfg);
/* Releases everything the session holds on the device (streams, events,
 * modules, allocations, contexts), then the worker itself. */
void rgpu_worker_free(rgpu_worker *w);

enum { RGPU_WORKER_CONTINUE = 0, RGPU_WORKER_CLOSE = 1 };

/* Handles one frame (header already validated by rgpu_frame_hdr_decode,
 * payload of h->length bytes).  Appends the complete frames to send (OUTPUT
 * events, then the reply or an ASYNC_ERROR event) to out.  Returns
 * RGPU_WORKER_CLOSE when the session must end after sending them (GOODBYE,
 * failed HELLO). */
int rgpu_worker_handle(rgpu_worker *w, const rgpu_frame_hdr *h, const void *payload, size_t len,
                       rgpu_buf *out);

/* Serves a connection until EOF, GOODBYE, a broken frame or a fatal error.
 * Returns 0 for an orderly end, 1 otherwise (the listener logs it). Does not
 * close c. */
int rgpu_worker_serve(rgpu_worker *w, rgpu_conn *c);

uint64_t rgpu_worker_calls(const rgpu_worker *w);
/* 1 when the session's connection went to another worker (RESUME): the
 * caller must close its conn without shutting the socket down. */
int rgpu_worker_handed_off(const rgpu_worker *w);
/* A short reason for the end of the session ("eof", "goodbye", ...). */
const char *rgpu_worker_end_reason(const rgpu_worker *w);

#ifdef __cplusplus
}
#endif
#endif
