/* rgpu_client: the client core every facade (cudart, later cuBLAS and the
 * driver API) talks through.
 *
 * One rgpu_client is one session with one rgpu-server: a transport conn, the
 * HELLO handshake, a send queue that batches requests which need no reply,
 * a receive path that matches replies by sequence number and handles server
 * events (latched async errors, device printf output), and traffic counters.
 *
 * Threading: every function that touches the connection takes the client's
 * lock itself, except the *_locked ones, which a caller uses between
 * rgpu_client_lock() and rgpu_client_unlock() to keep several frames
 * together (a chunked copy, a device switch followed by a request).
 * Debug builds assert that the lock is held in every *_locked function
 * (but rgpu_client_next_seq_locked, an atomic read; see there).
 *
 * Return values: functions that exchange frames return an rgpu_status
 * (common/rgpu_status.h): a negative code (RGPU_T_E* or RGPU_PROTO_E*) when
 * the connection failed, after which the client is dead and every later
 * call fails fast with RGPU_CLIENT_EDEAD, or a CUresult (>= 0) that the
 * server (or the client's own checks) produced.  No function returns a
 * sentinel in that space; "not taken"-style results are out-parameters.
 *
 * The typed calls generated from the message spec (rgpu_calls.h:
 * rgpu_call_<op>, rgpu_send_<op>_locked, ...) are the way to send a
 * request; the untyped rgpu_client_call / rgpu_client_send_locked below
 * are the layer they are built on. */
#ifndef RGPU_CLIENT_H
#define RGPU_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "rgpu_status.h"
#include "rgpu_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

/* RGPU_CLIENT_EDEAD (rgpu_status.h) is returned once the connection has
 * failed; the first failure was logged. */

/* Defaults of the tunables below. */
#define RGPU_CLIENT_DEFAULT_CONNECT_TIMEOUT_MS 5000
/* 200 us: a program that queues work for milliseconds before its
 * synchronization (an eager PyTorch step) keeps the GPU busy meanwhile.
 * With 2 ms the GPU started only when the step was queued: the small
 * CNN's eager training step took 1.47x native on the H200, 0.85x at 200 us
 * (docs/pytorch.md); 100 us cost more writes for no gain. */
#define RGPU_CLIENT_DEFAULT_BATCH_US 200
#define RGPU_CLIENT_DEFAULT_BATCH_BYTES (1u << 20)
/* After a reply from a server under 1 ms away, this many requests are
 * sent as they come before batching resumes: the reply says the server
 * has finished what it was waiting for, so the GPU is idle, and a request
 * held for the batch is time it stays idle.  A graphed PyTorch step (two
 * input copies, the replay, then .item()) started its GPU work only at
 * .item(): 1.07x native on an H100, where the copies' own Python time
 * ran before the GPU saw any of it (docs/pytorch.md).  4 covers such a
 * step's head; an eager step's hundreds of launches are batched after
 * it as before.  Far servers batch from the first request: there the
 * extra packets would buy microseconds against milliseconds of RTT. */
#define RGPU_CLIENT_DEFAULT_IDLE_SENDS 4
/* Tails up to this size are copied into the send queue; larger ones are
 * written from the caller's buffer before the call returns. */
#define RGPU_CLIENT_INLINE_TAIL_BYTES (64u << 10)

/* RGPU_SERVER may name several servers (issue 19), separated by commas. */
#define RGPU_CLIENT_MAX_SERVERS 8
#define RGPU_CLIENT_URI_MAX 1024

typedef struct {
  char server[1024];       /* RGPU_SERVER as given (one URI or a comma list); "" when unset */
  int nservers;            /* URIs in server (0 when unset) */
  char token[4096];        /* RGPU_TOKEN, or the first line of RGPU_TOKEN_FILE */
  char ca_file[1024];      /* RGPU_CA */
  char cert_file[1024];    /* RGPU_CERT */
  char key_file[1024];     /* RGPU_KEY */
  int connect_timeout_ms;  /* RGPU_CONNECT_TIMEOUT_MS */
  int sync_every_call;     /* RGPU_SYNC_EVERY_CALL=1: wait for a reply to every request */
  int idle_timeout_ms;     /* RGPU_IDLE_TIMEOUT_MS: QUIC idle timeout / TCP_USER_TIMEOUT (0 = transport default) */
  int reconnect_s;         /* RGPU_RECONNECT_S: how long to try resuming a broken session
                            * (default 60, the server's default grace; 0 = no resume) */
  int batch_us;            /* RGPU_BATCH_US: how long a queued request may wait to be sent */
  size_t batch_bytes;      /* RGPU_BATCH_BYTES: queue size that forces a send */
  int idle_sends;          /* RGPU_BATCH_IDLE_SENDS: requests sent at once after a near reply */
  char stats_path[1024];   /* RGPU_STATS */
  char client_name[256];   /* program name, for the server's logs */
} rgpu_client_config;

/* Where configuration values come from: getenv in production, a table in
 * tests.  Returns NULL for unset names. */
typedef const char *(*rgpu_client_getenv_fn)(const char *name, void *ctx);

/* Splits a comma-separated RGPU_SERVER value into its URIs (blanks
 * around each are dropped) into uris[0..max).  Returns how many, or -1
 * with a sentence in err: an empty entry, one without SCHEME://, a URI
 * named twice, more than max. */
int rgpu_client_server_list_parse(const char *list, char (*uris)[RGPU_CLIENT_URI_MAX], int max,
                                  char *err, size_t errlen);

/* Fills *cfg from the environment (getenv_fn NULL = getenv).  Returns 0, or
 * -1 with a sentence in err for a value that cannot be used (bad number,
 * unreadable token file).  An unset RGPU_SERVER is not an error here: the
 * caller decides what to say. */
int rgpu_client_config_load(rgpu_client_config *cfg, rgpu_client_getenv_fn getenv_fn, void *ctx,
                            char *err, size_t errlen);

typedef struct {
  uint64_t round_trips;    /* times the client waited for the server */
  uint64_t bytes_sent;     /* frame bytes, headers included */
  uint64_t bytes_received;
  uint64_t frames_sent;
  uint64_t flushes;        /* gathered writes of the send queue */
  /* Waits for flow control while the pipe stays full (resend checkpoint,
   * background reply bound): the link is busy, no round trip is idle, so
   * they are not counted in round_trips. */
  uint64_t flow_waits;
  uint64_t resumes;        /* sessions resumed on a new connection */
  /* quic://: moves to a UDP port of the worker's own (direct sessions:
   * docs/architecture.md), not counted as resumes. */
  uint64_t quic_direct_moves;
  /* Time the program's threads spent blocked for replies (round trips and
   * flow waits): with wall time it says whether a workload waits for the
   * server or the server for it. */
  uint64_t wait_ns;
} rgpu_client_counters;

typedef struct rgpu_client rgpu_client;

/* Connects to cfg->server (one URI: a list is refused, its caller
 * connects to each entry with its own copy of cfg) and performs HELLO.
 * On failure returns a negative code and a one-line reason in err
 * ("cannot reach server tcp://h:1: connection refused"); *out is NULL.  Allocates: release with
 * rgpu_client_close. */
rgpu_status rgpu_client_connect(const rgpu_client_config *cfg, rgpu_client **out, char *err,
                        size_t errlen);

/* Flushes queued requests, says GOODBYE (waiting at most a short while so
 * the server has run everything and its last output arrived) and closes. */
void rgpu_client_close(rgpu_client *c);

/* What HELLO told us. */
const char *rgpu_client_server_name(const rgpu_client *c);
const char *rgpu_client_device_kind(const rgpu_client *c);
const char *rgpu_client_transport(const rgpu_client *c);
const char *rgpu_client_uri(const rgpu_client *c);
uint64_t rgpu_client_session_id(const rgpu_client *c);
uint32_t rgpu_client_caps(const rgpu_client *c);
/* Largest bulk payload per frame (RGPU_CHUNK_BYTES or less if the server
 * said so). */
size_t rgpu_client_chunk_bytes(const rgpu_client *c);
int rgpu_client_sync_every_call(const rgpu_client *c);
int rgpu_client_is_dead(const rgpu_client *c);
void rgpu_client_get_counters(rgpu_client *c, rgpu_client_counters *out);

/* Called (with the lock held) whenever the client is about to wait for the
 * server; the cudart facade uses it to count calls that waited. */
void rgpu_client_set_wait_hook(rgpu_client *c, void (*hook)(void));

/* A thread waiting for a reply polls for it for a while before it blocks
 * (rgpu_spin.h): RGPU_CLIENT_SPIN_US microseconds, or RGPU_SPIN_US.  The
 * cudart facade turns it off for cudaDeviceScheduleBlockingSync, which asks
 * that the waiting thread sleep.
 *
 * Near a GPU server (the fastest round trip seen so far under
 * RGPU_CLIENT_NEAR_RTT_US; not softgpu, which computes on the CPUs a long
 * poll would take) on a host where polling keeps the CPU
 * (rgpu_spin_keeps_cpu), the wait polls (quic://: in its transport) up to
 * RGPU_CLIENT_SPIN_NEAR_US instead: there a wait is mostly the GPU's
 * time, which CUDA's default
 * policy spins through, and a thread that went to sleep wakes late on a
 * busy host.  PyTorch's pose frame on the H100 host (loopback, server on
 * CPUs of its own): its first copy waits for a 9 ms forward pass; with the
 * 2 ms poll the waiting thread slept and woke behind torch's spinning
 * OpenMP threads, 1.37x native; with those threads not spinning
 * (GOMP_SPINCOUNT=0) 0.91x.  Far from the server the short poll stays:
 * a long one would burn a CPU through every network round trip. */
#define RGPU_CLIENT_SPIN_US 2000
#define RGPU_CLIENT_SPIN_NEAR_US 20000
#define RGPU_CLIENT_NEAR_RTT_US 1000
/* The fastest wait for a reply so far, in ns (0: none yet); near the
 * server below RGPU_CLIENT_NEAR_RTT_US.  A resume starts it again. */
uint64_t rgpu_client_rtt_floor_ns(rgpu_client *c);
void rgpu_client_set_spin(rgpu_client *c, int spin);

/* A reply being waited for.  If `dst` is set, a successful reply's payload
 * (at most dst_cap bytes) is read straight into it and `dst_len` tells how
 * much came; otherwise the payload goes to `payload` (caller's buffer, may
 * be NULL to discard).  `status` receives the CUresult of the reply; on
 * failure `msg` holds the server's text (may be ""). */
typedef struct {
  void *dst;
  size_t dst_cap;
  size_t dst_len;
  rgpu_buf *payload;
  uint32_t status;
  char msg[256];
  /* Set for the later replies of a pipelined operation (chunked copy):
   * they arrive within the same wait and are not new round trips. */
  int continued;
  int done; /* set when the reply arrived */
} rgpu_client_reply;

/* Called by rgpu_client_connect_with, client lock held, right after HELLO
 * is written: requests sent here share HELLO's round trip (the server runs
 * them only once HELLO succeeded).  Returns how many it sent, with their
 * sequences and reply slots in *seqs / *rs (owned by the callee); connect
 * reads those replies into the slots before it returns. */
typedef size_t (*rgpu_client_hello_fn)(rgpu_client *c, void *ctx, uint64_t **seqs,
                                       rgpu_client_reply **rs);
rgpu_status rgpu_client_connect_with(const rgpu_client_config *cfg, rgpu_client_hello_fn with_hello,
                             void *ctx, rgpu_client **out, char *err, size_t errlen);

/* The client lock.  Not recursive; where it sits among cudart's locks:
 * rgpu_client_internal.h (client) and cudart/rgpu_cudart_locks.h. */
void rgpu_client_lock(rgpu_client *c);
void rgpu_client_unlock(rgpu_client *c);
/* For assertions only, e.g. assert(rgpu_client_lock_held(c)) in a hook the
 * client calls with its lock held.  Debug builds (no NDEBUG) track the
 * owner and answer for the calling thread; release builds cannot tell and
 * both answer 1, so never branch on them. */
int rgpu_client_lock_held(const rgpu_client *c);
int rgpu_client_lock_not_held(const rgpu_client *c);

/* Queues one request frame (or writes it at once when the tail is large or
 * the queue is full).  With need_reply the request asks for a reply and
 * *seq_out (optional) receives its sequence number; the caller must then
 * wait for it with rgpu_client_wait_locked.  Returns 0 or a negative code. */
rgpu_status rgpu_client_send_locked(rgpu_client *c, uint16_t op, int need_reply, const void *fixed,
                            size_t fixed_len, const void *tail, size_t tail_len,
                            uint64_t *seq_out);
/* Writes everything queued. */
rgpu_status rgpu_client_flush_locked(rgpu_client *c);
/* Flushes, then reads frames until the reply to `seq` arrived, handling
 * events on the way.  An ASYNC_ERROR for a request with sequence >=
 * first_seq (the first frame of the caller's operation; 0 = none) is taken
 * as this operation's own failure and put in r->status instead of being
 * latched.  Returns 0 (look at r->status) or a negative code. */
rgpu_status rgpu_client_wait_locked(rgpu_client *c, uint64_t seq, uint64_t first_seq,
                            rgpu_client_reply *r);
/* Waits for the first of several outstanding replies (the server may
 * answer stream operations out of order): reads frames until a reply to a
 * seqs[k] whose rs[k].done is clear arrives, delivers it into rs[k], sets
 * rs[k].done and *which = k.  Async errors of the operation go to rs[0]. */
rgpu_status rgpu_client_wait_any_locked(rgpu_client *c, const uint64_t *seqs, rgpu_client_reply *rs,
                                size_t n, uint64_t first_seq, size_t *which);
/* The sequence number the next request frame will get.  An atomic read:
 * without the lock it is a lower bound (every frame sent later gets this
 * number or a higher one), which is what cudaFree's arena needs. */
uint64_t rgpu_client_next_seq_locked(const rgpu_client *c);

/* ---- background replies (asynchronous device-to-host copies) ----------
 * A D2H request whose reply the caller does not wait for: it is queued like
 * a no-reply request, and whenever its reply arrives (during any later wait
 * or poll) the payload is read straight into dst (cap bytes, which must stay
 * valid until drained).  A failure is latched like an async error.  At most
 * RGPU_CLIENT_BG_MAX_BYTES are outstanding; beyond that the call first waits
 * for older ones (counted as a round trip). */
#define RGPU_CLIENT_BG_MAX_BYTES (64u << 20)
#define RGPU_CLIENT_ALL_STREAMS UINT64_MAX
rgpu_status rgpu_client_send_background_locked(rgpu_client *c, uint16_t op, const void *fixed,
                                       size_t fixed_len, uint64_t stream, void *dst, size_t cap,
                                       uint64_t *seq_out);
/* Reads until no background reply of `stream` (or of the legacy stream 0;
 * RGPU_CLIENT_ALL_STREAMS: any) with a sequence number below before_seq is
 * outstanding.  Used right after a synchronizing reply, so it is part of
 * that round trip and not counted again. */
rgpu_status rgpu_client_drain_locked(rgpu_client *c, uint64_t stream, uint64_t before_seq);
/* Host memory [p, p+n) is about to be released (cudaFreeHost,
 * cudaHostUnregister): reads until no background reply writes into it,
 * and copies what the resend buffer holds of it by reference
 * (rgpu_client_set_stable_tails_locked) into the buffer. */
rgpu_status rgpu_client_drain_dst_locked(rgpu_client *c, const void *p, size_t n);
/* While on, the large tails of the requests this thread sends are kept for
 * a resume by reference instead of copied: the caller guarantees that
 * their memory does not change before the server confirms the request
 * (an asynchronous copy from page-locked memory, which the program may
 * not touch before a synchronization, whose reply confirms it) or
 * rgpu_client_drain_dst_locked is called for it.  Client lock held. */
void rgpu_client_set_stable_tails_locked(rgpu_client *c, int on);
/* The next request frame carries RGPU_REQ_HOST_ORDERED (rgpu_frame.h): the
 * program saw it complete (a synchronous copy from the host that returns
 * without waiting for the server), so every stream must see it done. */
void rgpu_client_host_ordered_next_locked(rgpu_client *c);
size_t rgpu_client_background_count(rgpu_client *c);

/* ---- host callbacks -------------------------------------------------------
 * HOST_CALL events are handed to hook(ctx, callback, token), called with the
 * client lock held from whichever thread is reading: it must only queue the
 * call.  The callback's thread answers with rgpu_client_send_now, which
 * takes only the write lock (never the client lock), so it cannot deadlock
 * with an application thread that waits, holding the lock, for the stream
 * that waits for the callback. */
void rgpu_client_set_host_call_hook(rgpu_client *c,
                                    void (*hook)(void *ctx, uint64_t callback, uint64_t token),
                                    void *ctx);
/* Writes one no-reply request frame at once, under the write lock only. */
rgpu_status rgpu_client_send_now(rgpu_client *c, uint16_t op, const void *fixed, size_t fixed_len);
/* If the client lock is free: flushes the queue and handles every frame
 * already readable (so HOST_CALL events arrive while no thread waits).
 * Returns 1 when the lock was busy (whoever holds it reads), 0, or <0: an
 * int, not an rgpu_status, as the 1 is "busy" and never a CUresult. */
int rgpu_client_try_pump(rgpu_client *c);
/* The descriptor to poll(2) for incoming frames (-1 when closed). */
int rgpu_client_poll_fd(rgpu_client *c);

/* The session's current device on the server: sends CTX_SET_DEVICE (no
 * reply) when it differs from the last one sent. */
rgpu_status rgpu_client_bind_device_locked(rgpu_client *c, int device);
/* Several servers (issue 19): this session serves the process-wide
 * devices [first, first + count).  Device numbers given to the client
 * (bind, rgpu_client_call) are those; the client sends first's distance
 * (the server's own number).  A number outside the range sent to
 * rgpu_client_call goes to route(device), the session that owns it
 * (NULL: refused); one reaching bind is refused with
 * CUDA_ERROR_INVALID_DEVICE and logged, as it is a routing mistake.
 * Never called with one server: its range is everything, so the hot
 * path pays one compare. */
typedef rgpu_client *(*rgpu_client_route_fn)(int device);
void rgpu_client_set_device_range(rgpu_client *c, int first, int count, rgpu_client_route_fn route);
/* The first process-wide device of this session (0 with one server). */
int rgpu_client_first_device(const rgpu_client *c);
/* 1 when device is one of this session's. */
int rgpu_client_owns_device(const rgpu_client *c, int device);

/* Forget the bound device (after DEVICE_RESET). */
void rgpu_client_unbind_device_locked(rgpu_client *c);

/* One request, locked, start to finish.  In async mode (allow_async and
 * not sync_every_call) nothing is waited for and CUDA_SUCCESS comes back;
 * failures arrive later as latched async errors.  Otherwise waits; r may be
 * NULL when the reply has no fields of interest.  Returns a CUresult or a
 * negative code. */
rgpu_status rgpu_client_call(rgpu_client *c, int device, uint16_t op, int allow_async, const void *fixed,
                     size_t fixed_len, const void *tail, size_t tail_len, rgpu_client_reply *r);

/* Async errors reported by the server for requests that had no reply.
 * The first one is kept until taken; later ones while it is pending are
 * counted but only the first is reported, as CUDA reports one error.
 * Returns 1 and fills the outputs when one was pending (and clears it). */
/* Sees the server's reason of every failed request (a reply's status and
 * message, or an ASYNC_ERROR event's) as it arrives: the runtime's CUDA
 * error log (cudart/rgpu_cudart_logs.c).  Called with the client's lock
 * held, so it may only take leaf locks of its own and must not call back
 * into the client.  NULL: none (the default). */
typedef void (*rgpu_client_failure_tap_fn)(uint32_t status, const char *msg);
void rgpu_client_set_failure_tap(rgpu_client_failure_tap_fn fn);

int rgpu_client_take_async_error(rgpu_client *c, uint32_t *status, uint64_t *seq, char *msg,
                                 size_t msglen);
/* 1 while an async error is latched and not yet taken (nothing cleared). */
int rgpu_client_async_error_pending(rgpu_client *c);
/* Polls the connection without blocking for events that already arrived
 * (so cudaGetLastError sees async errors that came in the meantime). */
rgpu_status rgpu_client_poll_events(rgpu_client *c);

/* The stats JSON the client writes at exit (RGPU_STATS): one object on one
 * line.  Pure function for testing: returns bytes written (excluding NUL)
 * or -1 if cap was too small. */
typedef struct {
  uint64_t calls;
  uint64_t async_calls;
  uint64_t round_trips;
  uint64_t bytes_sent;
  uint64_t bytes_received;
  double wall_s;
  const char *transport; /* NULL = "none" */
  const char *server;    /* NULL = "" */
  int sync_every_call;
  uint64_t frames_sent;
  uint64_t flushes;
  uint64_t flow_waits;
  double wait_s; /* rgpu_client_counters.wait_ns */
  /* Sessions resumed on a new connection (issue 9); a QUIC connection that
   * migrated to a new address keeps its session and counts none. */
  uint64_t resumes;
  uint64_t quic_direct_moves; /* rgpu_client_counters */
  int connected;
  /* Kernel images (issue 15): sent whole, their bytes, and module loads
   * the server's image cache served without them. */
  uint64_t images_sent;
  uint64_t image_bytes_sent;
  uint64_t image_cache_hits;
} rgpu_client_stats;
int rgpu_client_stats_json(const rgpu_client_stats *s, char *out, size_t cap);
/* Writes the JSON to path (replacing it).  Returns 0 or -1 with errno. */
int rgpu_client_stats_write(const char *path, const rgpu_client_stats *s);

#ifdef __cplusplus
}
#endif
#endif
