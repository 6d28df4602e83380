/* The client core: one session with an rgpu-server.
 *
 * Sending: request frames are encoded into one contiguous queue and written
 * with a single gathered write when a reply is needed, when the queue passes
 * batch_bytes, or once its oldest frame is batch_us old: checked by each
 * new frame and by the batch timer (a small background thread) for a
 * program that queued work and went quiet.
 * Large tails are written from the caller's buffer in the same gathered
 * write instead of being copied.
 *
 * Receiving happens only while someone waits for a reply (the server runs
 * frames in order, so every event that matters to a wait precedes its
 * reply), plus a non-blocking poll used by cudaGetLastError. */
#define _GNU_SOURCE
#include "rgpu_client.h"
#include "rgpu_client_internal.h"
#include "rgpu_client_resume.h"
#include "rgpu_copier.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rgpu_array.h"
#include "rgpu_bulk_proto.h"
#include "rgpu_calls.h"
#include "rgpu_clock.h"
#include "rgpu_frame.h"
#include "rgpu_frame_io.h"
#include "rgpu_log.h"
#include "rgpu_spin.h"
#include "rgpu_messages.h"
#include "rgpu_mutex.h"
#include "rgpu_transport.h"
#include "rgpu_thread_name.h"

/* A device-to-host copy whose reply is read whenever it arrives, straight
 * into the (pinned) destination: an async D2H costs no round trip. */
typedef struct {
  uint64_t seq;
  uint64_t stream;
  void *dst;
  size_t cap;
} rgpu_bg_reply;

struct rgpu_client {
  /* The client lock (rgpu_client_lock): frame order, the queue, reply
   * reading and everything below not said otherwise.  The order of the
   * client's locks and how they relate to cudart's: rgpu_client_internal.h. */
  rgpu_mutex lock;
  /* Threads inside rgpu_client_lock waiting for `lock` (see there). */
  _Atomic int lock_waiters;
  /* Held around every write on conn.  Taken alone (without `lock`) only by
   * rgpu_client_send_now, so that a host-callback thread can answer the
   * server while an application thread holds `lock` waiting for a stream
   * that waits for that very callback.  Order: lock, then wlock. */
  rgpu_mutex wlock;
  rgpu_conn *conn;
  char uri[1024];
  char transport[16];
  int dead;
  int sync_every_call;
  int batch_us;
  size_t batch_bytes;
  int idle_sends;      /* RGPU_BATCH_IDLE_SENDS */
  uint32_t next_req_aux; /* flags for the next request frame (rgpu_client_host_ordered_next_locked) */
  int idle_sends_left; /* requests still to send at once since the last near reply */
  size_t chunk_bytes;
  uint64_t next_seq;
  int bound_device; /* -1: none sent yet (a process-wide number) */
  /* Process-wide devices of this session (rgpu_client_set_device_range):
   * first_device .. first_device + device_count - 1. */
  int first_device;
  unsigned device_count;
  rgpu_client_route_fn route;

  rgpu_buf queue;   /* encoded frames not yet written */
  uint64_t queued_since_ns;
  rgpu_buf rx;      /* payload scratch for events and discarded replies */

  /* HELLO results */
  uint64_t session_id;
  uint32_t caps;
  char server_name[256];
  char device_kind[32];

  /* latched async error */
  int async_pending;
  uint32_t async_status;
  uint64_t async_seq;
  char async_msg[256];
  uint64_t async_dropped;

  rgpu_client_counters ctr;
  void (*wait_hook)(void);
  unsigned spin_us; /* polling before a reply's read blocks (rgpu_spin.h) */
  unsigned spin_near_us; /* the same near a GPU server (RGPU_CLIENT_SPIN_NEAR_US) */
  unsigned conn_poll_set; /* quic://: the budget its transport was last given */
  uint64_t rtt_floor_ns; /* the fastest wait for a reply so far; 0: none yet */
  int spin_off;      /* rgpu_client_set_spin(c, 0): the waiting thread sleeps */

  /* background D2H replies (under lock) */
  rgpu_bg_reply *bg;
  size_t nbg, capbg;
  size_t bg_bytes;

  /* HOST_CALL events go to this hook (called with lock held) */
  void (*host_call_hook)(void *ctx, uint64_t callback, uint64_t token);
  void *host_call_ctx;
  /* frames written by rgpu_client_send_now (under wlock only) */
  uint64_t now_frames, now_bytes;

  /* Resumable session (client_resume and friends below).  resend, broken
   * and conn swaps are under wlock; the rest under lock. */
  rgpu_resend_buf resend;
  rgpu_client_config *cfg;  /* copy, for reconnecting */
  uint8_t session_token[32];
  int have_token;
  int peer_spoke_tls; /* the answer to HELLO began like a TLS record */
  int reconnect_s;          /* budget of one outage; 0 = no resume */
  int broken;               /* a write failed: the next lock holder resumes */
  int closing;              /* in rgpu_client_close: HOST_CALLs are answered unrun (lock) */
  int no_resume;            /* closing, or the server said SHUTDOWN; written holding
                             * both locks, so a holder of either may read it */
  uint64_t ckpt_seq;        /* resend checkpoint PING in flight (0: none) */
  rgpu_copier *copier;      /* copies bulk data into resend while it is written */
  int copier_failed;
  int stable_tails;         /* rgpu_client_set_stable_tails_locked (client lock) */
  rgpu_buf rxpre;           /* replayed frames read during RESUME, or input a
                             * blocked write took in; consumed first */
  size_t rxpre_off;
  size_t rxpre_peak;        /* most bytes rxpre held (tests) */
  uint64_t async_digested;  /* async errors taken in by client_digest_async_errors */
  uint64_t rx_count;        /* session bytes consumed (frames of the stream) */
  uint64_t rx_frame_start;  /* rx_count where the frame being read began */
  uint64_t rx_acked;
  /* quic://: moves to the worker's own port (client_go_direct_locked);
   * direct_off once one failed or RGPU_QUIC_DIRECT=0. */
  uint64_t direct_moves;
  int direct_off;
  double hello_rtt_s;
  uint64_t resumes, resent_bytes, resent_frames, replayed_bytes;

  /* Bulk streams of host threads (rgpu_client_bulk.c); NULL until used. */
  struct rgpu_client_bulk *bulk;
  /* Which thread queued the last request, and when a request last came
   * from another thread than the one before it (0: one thread so far).
   * rgpu_client_bulk.c puts a host-to-device copy on its thread's lane
   * only while other threads are calling too (rgpu_client_mixed_ns_locked). */
  pthread_t last_req_thread;
  int have_req_thread;
  uint64_t mixed_ns;

  /* batch timer */
  pthread_t timer;
  int timer_started;
  int timer_stop;
  pthread_cond_t timer_cv;
};

/* Lock invariants, checked in debug builds (rgpu_mutex.h): a function
 * that reads or writes state under a lock starts by saying so. */
#define ASSERT_CLIENT_LOCK(c) assert(rgpu_mutex_held(&(c)->lock))
#define ASSERT_WRITE_LOCK(c) assert(rgpu_mutex_held(&(c)->wlock))
/* Before waiting for the server: the client lock is the only lock this
 * thread holds (rgpu_client_internal.h), except while connecting (HELLO
 * and the requests sent with it, inside cudart's pthread_once; the session
 * id is set once HELLO's reply is in). */
#define ASSERT_ONLY_CLIENT_LOCK(c) \
  assert(rgpu_mutex_held(&(c)->lock) && (rgpu_mutex_held_count() == 1 || !(c)->session_id))

/* rgpu_status.h lists every local code once, by value: the transport's and
 * the codecs' own definitions must agree with it. */
#define RGPU_CHECK_CODE(name, v) _Static_assert(name == (v), #name " differs from rgpu_status.h")
RGPU_CHECK_CODE(RGPU_T_EIO, -5);
RGPU_CHECK_CODE(RGPU_T_EAUTH, -13);
RGPU_CHECK_CODE(RGPU_T_EINVAL, -22);
RGPU_CHECK_CODE(RGPU_T_ECLOSED, -32);
RGPU_CHECK_CODE(RGPU_T_ENOTSUP, -95);
RGPU_CHECK_CODE(RGPU_T_ETIMEDOUT, -110);
RGPU_CHECK_CODE(RGPU_T_ECONNREFUSED, -111);
RGPU_CHECK_CODE(RGPU_PROTO_ETRUNC, -1001);
RGPU_CHECK_CODE(RGPU_PROTO_ETOOBIG, -1002);
RGPU_CHECK_CODE(RGPU_PROTO_ETRAILING, -1003);
RGPU_CHECK_CODE(RGPU_PROTO_EBADMAGIC, -1004);
RGPU_CHECK_CODE(RGPU_PROTO_EVERSION, -1005);
RGPU_CHECK_CODE(RGPU_PROTO_EKIND, -1006);
RGPU_CHECK_CODE(RGPU_PROTO_EOPCODE, -1007);
RGPU_CHECK_CODE(RGPU_PROTO_ENOMEM, -1008);
RGPU_CHECK_CODE(RGPU_PROTO_EINVAL, -1009);
#undef RGPU_CHECK_CODE

static const char *conn_err_text(int rc) {
  switch (rc) {
  case RGPU_T_ECLOSED: return "the server closed the connection";
  case RGPU_T_ETIMEDOUT: return "timed out";
  case RGPU_T_ECONNREFUSED: return "connection refused";
  case RGPU_T_EAUTH: return "authentication failed";
  case RGPU_T_ENOTSUP: return "transport not supported";
  case RGPU_T_EIO: return "I/O error";
  case RGPU_T_EINVAL: return "invalid argument";
  default: return rgpu_proto_strerror(rc);
  }
}

/* Resumable sessions (definitions at the end of this file). */
static void client_resume_init(rgpu_client *c, const rgpu_client_config *cfg);
static void client_resume_free(rgpu_client *c);
static void client_transport_opts(const rgpu_client_config *cfg, rgpu_transport_opts *o);
static int client_resume(rgpu_client *c, int rc, const char *what, uint64_t rx);
static void client_go_direct_locked(rgpu_client *c, uint16_t port);
static int client_can_resume(const rgpu_client *c);
/* reading: the caller holds the client lock (the read side), so input may
 * be taken in while the write waits (client_absorb_input). */
static int client_write(rgpu_client *c, const struct iovec *iov, int n, int reading);
static int client_write_reading(rgpu_client *c, rgpu_conn *conn, const struct iovec *iov, int n);
static int client_read_exact(rgpu_client *c, void *buf, size_t n);

/* Whether a reply's reader polls before it blocks (rgpu_spin.h): where this
 * thread reads the socket itself (tcp, unix, the TLS client).  Not quic://:
 * its read polls the UDP socket itself, with the same budget where there
 * are CPUs to spare (transport/rgpu_quic.c, "client"), and its poll fd
 * becomes readable only when some thread has read the datagram. */
static int transport_spins(const rgpu_client *c) { return strcmp(c->transport, "quic") != 0; }

/* Sets the spin budget of this client and of its conn (quic:// polls in
 * the transport), after a connect, a resume or rgpu_client_set_spin. */
static void client_apply_spin(rgpu_client *c) {
  unsigned us = c->spin_off ? 0 : rgpu_spin_budget_us(RGPU_CLIENT_SPIN_US);
  /* RGPU_SPIN_US, where set, is both budgets. */
  c->spin_us = us;
  c->spin_near_us = us && rgpu_spin_keeps_cpu() ? rgpu_spin_budget_us(RGPU_CLIENT_SPIN_NEAR_US) : us;
  c->conn_poll_set = us;
  rgpu_conn_set_poll_us(c->conn, us);
}

void rgpu_client_host_ordered_next_locked(rgpu_client *c) {
  ASSERT_CLIENT_LOCK(c);
  c->next_req_aux |= RGPU_REQ_HOST_ORDERED;
}

static int near_server_locked(const rgpu_client *c) {
  return c->rtt_floor_ns && c->rtt_floor_ns < RGPU_CLIENT_NEAR_RTT_US * RGPU_NS_PER_US;
}

uint64_t rgpu_client_rtt_floor_ns(rgpu_client *c) {
  rgpu_client_lock(c);
  uint64_t f = c->rtt_floor_ns;
  rgpu_client_unlock(c);
  return f;
}

/* The poll budget of a wait (rgpu_client.h): the long one near a GPU
 * server.  Not near softgpu: there the wait is CPU time on the very cores
 * a long poll would take from it (a laptop running both). */
static int long_poll_locked(const rgpu_client *c) {
  return near_server_locked(c) && strcmp(c->device_kind, "softgpu") != 0;
}

static unsigned wait_spin_us(rgpu_client *c) {
  unsigned us = long_poll_locked(c) ? c->spin_near_us : c->spin_us;
  if (transport_spins(c)) return us;
  /* quic:// polls inside the transport (client_progress), not here. */
  if (us != c->conn_poll_set) {
    rgpu_conn_set_poll_us(c->conn, us);
    c->conn_poll_set = us;
  }
  return 0;
}
static int client_read_hdr(rgpu_client *c, rgpu_frame_hdr *h);
static void client_frame_begin(rgpu_client *c);
static void client_frame_seen(rgpu_client *c, const rgpu_frame_hdr *h);
static void client_on_shutdown(rgpu_client *c);
static int resend_checkpoint(rgpu_client *c);

/* First failure of an established connection: one log line, then every
 * call fails fast.  A broken connection of a resumable session is resumed
 * instead (only ever from a read path, which holds the lock): 0 then means
 * "nothing was delivered, read on". */
static int client_fail(rgpu_client *c, int rc, const char *what) {
  ASSERT_CLIENT_LOCK(c);
  if (!c->dead && rc < 0 && rc > -1000 && client_can_resume(c))
    return client_resume(c, rc, what, c->rx_frame_start) == 0 ? 0 : RGPU_CLIENT_EDEAD;
  if (!c->dead) {
    c->dead = 1;
    /* Before HELLO completed the caller reports the failure itself. */
    if (c->session_id)
      RGPU_ERROR("connection to server %s lost (%s: %s); CUDA calls will fail from now on",
               c->uri, what, conn_err_text(rc));
  }
  return RGPU_CLIENT_EDEAD;
}

static void *timer_main(void *arg);

/* No lock assertion: an atomic load, which cudaFree uses without the lock
 * as "every frame from here on comes later" (rgpu_client.h). */
uint64_t rgpu_client_next_seq_locked(const rgpu_client *c) {
  return __atomic_load_n(&c->next_seq, __ATOMIC_RELAXED);
}

/* A thread that makes synchronous calls back to back holds the lock for
 * each call's whole round trip (the waiting thread reads the reply) and
 * takes it again microseconds after releasing it, before a thread that was
 * blocked on it has woken up: pthread mutexes are not fair.  Under loss that
 * starved a second thread, which needs the lock only to queue a request,
 * for seconds (issue 21, bench_threads under wifi-bad over quic://: the
 * copying thread got 0.5 MB/s of a 2.5 MB/s link beside another thread's
 * 64-byte calls).  So a thread that finds others waiting lets one of them
 * in first, for at most RGPU_CLIENT_HANDOFF_NS (never a deadlock: it then
 * competes as before).  One uncontended atomic load costs the single-threaded
 * program nothing measurable. */
#define RGPU_CLIENT_HANDOFF_NS 2000000ull
void rgpu_client_lock(rgpu_client *c) {
  int waiting = atomic_load_explicit(&c->lock_waiters, memory_order_relaxed);
  if (waiting) {
    uint64_t t0 = rgpu_clock_ns();
    while (atomic_load_explicit(&c->lock_waiters, memory_order_relaxed) >= waiting &&
           rgpu_clock_elapsed_ns(t0) < RGPU_CLIENT_HANDOFF_NS)
      sched_yield();
  }
  atomic_fetch_add_explicit(&c->lock_waiters, 1, memory_order_relaxed);
  rgpu_mutex_lock(&c->lock);
  atomic_fetch_sub_explicit(&c->lock_waiters, 1, memory_order_relaxed);
}
void rgpu_client_unlock(rgpu_client *c) { rgpu_mutex_unlock(&c->lock); }
int rgpu_client_lock_held(const rgpu_client *c) { return rgpu_mutex_held(&c->lock); }
int rgpu_client_lock_not_held(const rgpu_client *c) { return rgpu_mutex_not_held(&c->lock); }

rgpu_status rgpu_client_flush_locked(rgpu_client *c) {
  ASSERT_CLIENT_LOCK(c);
  if (c->dead) return RGPU_CLIENT_EDEAD;
  if (c->queue.len == 0) return 0;
  struct iovec iov = {.iov_base = c->queue.data, .iov_len = c->queue.len};
  rgpu_mutex_lock(&c->wlock);
  int rc = client_write(c, &iov, 1, 1);
  rgpu_mutex_unlock(&c->wlock);
  if (rc) return client_fail(c, rc, "send");
  if (c->broken && (rc = client_resume(c, RGPU_T_ECLOSED, "send", c->rx_count))) return rc;
  c->ctr.bytes_sent += c->queue.len;
  c->ctr.flushes++;
  rgpu_buf_reset(&c->queue);
  return 0;
}

/* flush_now: write the queue at once (the caller is about to wait). */
static int send_frame(rgpu_client *c, uint16_t op, int need_reply, int flush_now,
                      const void *fixed, size_t fixed_len, const void *tail, size_t tail_len,
                      uint64_t *seq_out);

rgpu_status rgpu_client_send_locked(rgpu_client *c, uint16_t op, int need_reply, const void *fixed,
                            size_t fixed_len, const void *tail, size_t tail_len,
                            uint64_t *seq_out) {
  return send_frame(c, op, need_reply, need_reply, fixed, fixed_len, tail, tail_len, seq_out);
}

/* Notes the thread of a request about to be queued (lock held). */
static void note_request_thread(rgpu_client *c) {
  pthread_t self = pthread_self();
  if (c->have_req_thread && pthread_equal(self, c->last_req_thread)) return;
  if (c->have_req_thread) c->mixed_ns = rgpu_clock_ns();
  c->last_req_thread = self;
  c->have_req_thread = 1;
}

static int send_frame(rgpu_client *c, uint16_t op, int need_reply, int flush_now,
                      const void *fixed, size_t fixed_len, const void *tail, size_t tail_len,
                      uint64_t *seq_out) {
  ASSERT_CLIENT_LOCK(c);
  if (c->dead) return RGPU_CLIENT_EDEAD;
  note_request_thread(c);
  if (fixed_len + tail_len > RGPU_FRAME_MAX_PAYLOAD) return RGPU_PROTO_ETOOBIG;
  if (tail_len > RGPU_CLIENT_INLINE_TAIL_BYTES) {
    int crc = resend_checkpoint(c);
    if (crc) return crc;
  }
  rgpu_frame_hdr h = {.version = RGPU_PROTO_VERSION,
                      .kind = RGPU_KIND_REQUEST,
                      .opcode = op,
                      .length = (uint32_t)(fixed_len + tail_len),
                      .aux = (need_reply ? RGPU_REQ_NEED_REPLY : 0) | c->next_req_aux,
                      .seq = __atomic_fetch_add(&c->next_seq, 1, __ATOMIC_RELAXED)};
  if (seq_out) *seq_out = h.seq;
  c->next_req_aux = 0;
  uint8_t hdr[RGPU_FRAME_HDR_SIZE];
  rgpu_frame_hdr_encode(hdr, &h);
  c->ctr.frames_sent++;
  int was_empty = c->queue.len == 0;

  if (tail_len > RGPU_CLIENT_INLINE_TAIL_BYTES) {
    /* Queue, this frame's header and fields, and the caller's data in one
     * gathered write: no copy of the bulk data. */
    struct iovec iov[4];
    int n = 0;
    if (c->queue.len) iov[n++] = (struct iovec){c->queue.data, c->queue.len};
    iov[n++] = (struct iovec){hdr, sizeof hdr};
    if (fixed_len) iov[n++] = (struct iovec){(void *)fixed, fixed_len};
    iov[n++] = (struct iovec){(void *)tail, tail_len};
    rgpu_mutex_lock(&c->wlock);
    int rc = client_write(c, iov, n, 1);
    rgpu_mutex_unlock(&c->wlock);
    if (rc) return client_fail(c, rc, "send");
    if (c->broken && (rc = client_resume(c, RGPU_T_ECLOSED, "send", c->rx_count))) return rc;
    c->ctr.bytes_sent += c->queue.len + sizeof hdr + fixed_len + tail_len;
    c->ctr.flushes++;
    rgpu_buf_reset(&c->queue);
    return 0;
  }

  rgpu_buf_put(&c->queue, hdr, sizeof hdr);
  if (fixed_len) rgpu_buf_put(&c->queue, fixed, fixed_len);
  if (tail_len) rgpu_buf_put(&c->queue, tail, tail_len);
  if (c->queue.err) {
    c->queue.err = 0;
    return client_fail(c, RGPU_PROTO_ENOMEM, "queue");
  }
  /* The age test here, not only in the timer: a program that keeps
   * queueing holds this lock nearly all the time, and the timer thread
   * then waited for it long past its deadline while the GPU sat idle
   * (the pose frame: all 300 requests went out at its synchronization). */
  if (c->idle_sends_left > 0) {
    c->idle_sends_left--;
    flush_now = 1;
  }
  if (flush_now || c->sync_every_call || c->queue.len >= c->batch_bytes || c->batch_us == 0 ||
      (!was_empty && rgpu_clock_ns() - c->queued_since_ns >= (uint64_t)c->batch_us * 1000ull))
    return rgpu_client_flush_locked(c);
  if (was_empty) {
    c->queued_since_ns = rgpu_clock_ns();
    if (!c->timer_started) {
      c->timer_stop = 0;
      if (pthread_create(&c->timer, NULL, timer_main, c) == 0)
        c->timer_started = 1;
      else
        return rgpu_client_flush_locked(c); /* no timer: never leave data queued */
    }
    pthread_cond_signal(&c->timer_cv);
  }
  return 0;
}

/* Sends queued frames after batch_us so that work the program queued and
 * then stopped talking about still reaches the GPU soon. */
static void *timer_main(void *arg) {
  rgpu_thread_name("rgpu-batch");
  rgpu_client *c = arg;
  rgpu_mutex_lock(&c->lock);
  while (!c->timer_stop) {
    if (c->queue.len == 0 || c->dead) {
      rgpu_mutex_cond_wait(&c->timer_cv, &c->lock);
      continue;
    }
    uint64_t due = c->queued_since_ns + (uint64_t)c->batch_us * 1000ull;
    uint64_t now = rgpu_clock_ns();
    if (now >= due) {
      rgpu_client_flush_locked(c);
      continue;
    }
    struct timespec ts = rgpu_clock_timespec_in(due - now);
    rgpu_mutex_cond_timedwait(&c->timer_cv, &c->lock, &ts);
  }
  rgpu_mutex_unlock(&c->lock);
  return NULL;
}

static rgpu_client_failure_tap_fn g_failure_tap;
void rgpu_client_set_failure_tap(rgpu_client_failure_tap_fn fn) {
  __atomic_store_n(&g_failure_tap, fn, __ATOMIC_RELEASE);
}
static void failure_tap(uint32_t status, const char *text) {
  rgpu_client_failure_tap_fn fn = __atomic_load_n(&g_failure_tap, __ATOMIC_ACQUIRE);
  if (fn && text && text[0]) fn(status, text);
}

/* Keeps the first async error until taken (see rgpu_client_take_async_error). */
static void latch_async(rgpu_client *c, uint32_t status, uint64_t seq, const char *text) {
  ASSERT_CLIENT_LOCK(c);
  failure_tap(status, text);
  if (!c->async_pending) {
    c->async_pending = 1;
    c->async_status = status;
    c->async_seq = seq;
    snprintf(c->async_msg, sizeof c->async_msg, "%s", text);
  } else {
    c->async_dropped++;
  }
  RGPU_DEBUG("async error %u for request %llu: %s", status, (unsigned long long)seq, text);
}

/* An ASYNC_ERROR event's message (empty when it does not decode). */
static void async_error_text(const uint8_t *payload, size_t len, char text[256]) {
  rgpu_msg_async_error_evt ev;
  text[0] = '\0';
  if (rgpu_msg_async_error_evt_decode(payload, len, &ev) == 0)
    rgpu_str_copy(text, 256, ev.message.data, ev.message.len < 255 ? ev.message.len : 255);
}

static void handle_event(rgpu_client *c, const rgpu_frame_hdr *h, uint64_t first_seq,
                         rgpu_client_reply *r) {
  ASSERT_CLIENT_LOCK(c);
  if (h->opcode == RGPU_EVT_HOST_CALL) {
    rgpu_msg_host_call_evt ev;
    if (rgpu_msg_host_call_evt_decode(c->rx.data, c->rx.len, &ev) != 0) {
      RGPU_WARN("malformed HOST_CALL event from the server; ignored");
      return;
    }
    if (c->host_call_hook && !c->closing) {
      c->host_call_hook(c->host_call_ctx, ev.callback, ev.token);
      return;
    }
    /* Nothing here can run it any more (the program is exiting, or no hook
     * was registered): answer at once, or the server's stream, and with it
     * GOODBYE, waits for it forever. */
    if (!c->closing)
      RGPU_WARN("server asked for host callback %llu, but none was registered",
                (unsigned long long)ev.callback);
    rgpu_msg_host_call_done_req m = {.token = ev.token};
    if (rgpu_send_host_call_done_now(c, &m) != 0)
      RGPU_DEBUG("could not answer host callback %llu (connection lost)",
                 (unsigned long long)ev.callback);
    return;
  }
  if (h->opcode == RGPU_EVT_SHUTDOWN) {
    client_on_shutdown(c);
    return;
  }
  if (h->opcode == RGPU_EVT_OUTPUT) {
    /* Device printf: the program's stdout, as soon as it arrives.  stdio's
     * buffer of the program may hold earlier host output; flush it first so
     * the order matches what the program would print on a local GPU. */
    fflush(stdout);
    size_t off = 0;
    while (off < c->rx.len) {
      ssize_t w = write(1, c->rx.data + off, c->rx.len - off);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) break;
      off += (size_t)w;
    }
    return;
  }
  if (h->opcode == RGPU_EVT_ASYNC_ERROR) {
    char text[256];
    async_error_text(c->rx.data, c->rx.len, text);
    if (r && first_seq && h->seq >= first_seq) {
      /* A frame of the operation being waited for failed: that is the
       * operation's own result, keep the first failure. */
      if (r->status == 0) {
        r->status = h->aux;
        snprintf(r->msg, sizeof r->msg, "%s", text);
      }
      return;
    }
    latch_async(c, h->aux, h->seq, text);
    return;
  }
  RGPU_DEBUG("ignoring unknown server event 0x%04x", h->opcode);
}

static long bg_find(const rgpu_client *c, uint64_t seq) {
  ASSERT_CLIENT_LOCK(c);
  for (size_t i = 0; i < c->nbg; i++)
    if (c->bg[i].seq == seq) return (long)i;
  return -1;
}

/* The reply of a background D2H (header read, payload not yet): into its
 * destination when it is what was asked, else latched as an async error,
 * which CUDA reports at the next synchronizing call. */
static int read_bg_reply(rgpu_client *c, const rgpu_frame_hdr *h, size_t i) {
  ASSERT_CLIENT_LOCK(c);
  rgpu_bg_reply e = c->bg[i];
  int rc;
  /* The entry goes only once its payload is in: after a resume the reply
   * arrives again and must still find it. */
  if (h->aux == 0 && h->length == e.cap && e.dst) {
    rc = h->length ? client_read_exact(c, e.dst, h->length) : 0;
    if (rc) return client_fail(c, rc, "receive");
    c->bg[i] = c->bg[--c->nbg];
    c->bg_bytes -= e.cap;
    return 0;
  }
  rgpu_buf_reset(&c->rx);
  if (h->length) {
    if (rgpu_buf_reserve(&c->rx, h->length)) return client_fail(c, RGPU_PROTO_ENOMEM, "receive");
    rc = client_read_exact(c, c->rx.data, h->length);
    if (rc) return client_fail(c, rc, "receive");
    c->rx.len = h->length;
  }
  c->bg[i] = c->bg[--c->nbg];
  c->bg_bytes -= e.cap;
  if (!e.dst) return 0; /* cancelled: the destination is gone */
  char text[256];
  if (h->aux) {
    size_t m = c->rx.len < sizeof text - 1 ? c->rx.len : sizeof text - 1;
    memcpy(text, c->rx.data, m);
    text[m] = '\0';
    for (size_t k = 0; k < m; k++)
      if ((unsigned char)text[k] < 0x20) text[k] = ' ';
    latch_async(c, h->aux, h->seq, text);
  } else {
    snprintf(text, sizeof text, "server sent %u bytes for a %zu-byte copy", h->length, e.cap);
    latch_async(c, 999 /* CUDA_ERROR_UNKNOWN */, h->seq, text);
  }
  return 0;
}

/* Reads one frame.  A reply to one of seqs[0..n) not yet done is delivered
 * into rs[k] (marked done) and k + 1 is returned; anything else returns 0;
 * <0 on failure.  Async errors of the operation (seq >= first_seq) go to
 * rs[0]. */
static int read_one(rgpu_client *c, const uint64_t *seqs, rgpu_client_reply *rs, size_t n,
                    uint64_t first_seq) {
  ASSERT_CLIENT_LOCK(c);
  rgpu_frame_hdr h;
  client_frame_begin(c);
  int rc = client_read_hdr(c, &h);
  if (rc) return client_fail(c, rc, "receive");
  client_frame_seen(c, &h);
  c->ctr.bytes_received += RGPU_FRAME_HDR_SIZE + h.length;
  rgpu_client_reply *r = NULL;
  size_t k = 0;
  if (h.kind == RGPU_KIND_REPLY) {
    for (k = 0; k < n; k++)
      if (seqs[k] == h.seq && !rs[k].done) {
        r = &rs[k];
        break;
      }
  }
  if (h.kind == RGPU_KIND_REPLY && !r && c->nbg) {
    long b = bg_find(c, h.seq);
    if (b >= 0) return read_bg_reply(c, &h, (size_t)b);
  }
  if (r && h.aux == 0 && r->dst) {
    if (h.length > r->dst_cap) {
      /* The server sent more than asked: keep the stream in sync, report. */
      rgpu_buf_reset(&c->rx);
      if (rgpu_buf_reserve(&c->rx, h.length)) return client_fail(c, RGPU_PROTO_ENOMEM, "receive");
      rc = client_read_exact(c, c->rx.data, h.length);
      if (rc) return client_fail(c, rc, "receive");
      r->done = 1;
      r->status = 999; /* CUDA_ERROR_UNKNOWN */
      snprintf(r->msg, sizeof r->msg, "server sent %u bytes for a %zu-byte copy", h.length,
               r->dst_cap);
      return (int)k + 1;
    }
    if (h.length) {
      rc = client_read_exact(c, r->dst, h.length);
      if (rc) return client_fail(c, rc, "receive");
    }
    r->done = 1;
    r->dst_len = h.length;
    return (int)k + 1;
  }
  rgpu_buf *into = (r && h.aux == 0 && r->payload) ? r->payload : &c->rx;
  rgpu_buf_reset(into);
  if (h.length) {
    if (rgpu_buf_reserve(into, h.length)) return client_fail(c, RGPU_PROTO_ENOMEM, "receive");
    rc = client_read_exact(c, into->data, h.length);
    if (rc) return client_fail(c, rc, "receive");
    into->len = h.length;
  }
  if (h.kind == RGPU_KIND_EVENT) {
    handle_event(c, &h, first_seq, n ? &rs[0] : NULL);
    return 0;
  }
  if (h.kind != RGPU_KIND_REPLY) return client_fail(c, RGPU_PROTO_EKIND, "receive");
  if (!r) {
    /* A bulk copy's confirmation whose thread is busy on its own stream. */
    if (c->bulk) rgpu_client_bulk_note_reply(c, h.seq, h.aux);
    RGPU_DEBUG("discarding reply to request %llu nobody waits for", (unsigned long long)h.seq);
    return 0;
  }
  r->done = 1;
  if (h.aux != 0 && r->status == 0) {
    r->status = h.aux;
    size_t m = into->len < sizeof r->msg - 1 ? into->len : sizeof r->msg - 1;
    memcpy(r->msg, into->data, m);
    r->msg[m] = '\0';
    /* The text is for humans only: no control characters in logs. */
    for (size_t i = 0; i < m; i++)
      if ((unsigned char)r->msg[i] < 0x20) r->msg[i] = ' ';
    failure_tap(h.aux, r->msg);
  }
  return (int)k + 1;
}

rgpu_status rgpu_client_wait_any_locked(rgpu_client *c, const uint64_t *seqs, rgpu_client_reply *rs,
                                size_t n, uint64_t first_seq, size_t *which) {
  ASSERT_ONLY_CLIENT_LOCK(c);
  int rc = rgpu_client_flush_locked(c);
  if (rc) return rc;
  int pending = 0;
  for (size_t k = 0; k < n; k++) pending |= !rs[k].done;
  if (!pending) return RGPU_PROTO_EINVAL;
  if (c->wait_hook) c->wait_hook();
  if (!rs[0].continued) c->ctr.round_trips++;
  uint64_t t0 = rgpu_clock_ns();
  unsigned spin_us = wait_spin_us(c);
  for (;;) {
    /* Awake for a while before a read blocks (rgpu_spin.h). */
    if (spin_us && c->rxpre_off >= c->rxpre.len && !c->broken && rgpu_conn_pending(c->conn) == 0)
      rgpu_spin_readable(rgpu_conn_poll_fd(c->conn), spin_us);
    rc = read_one(c, seqs, rs, n, first_seq);
    if (rc != 0) break;
  }
  uint64_t waited = rgpu_clock_elapsed_ns(t0);
  c->ctr.wait_ns += waited;
  if (rc > 0 && !rs[0].continued && (!c->rtt_floor_ns || waited < c->rtt_floor_ns))
    c->rtt_floor_ns = waited ? waited : 1;
  /* The server is idle now (RGPU_CLIENT_DEFAULT_IDLE_SENDS). */
  if (rc > 0) c->idle_sends_left = near_server_locked(c) ? c->idle_sends : 0;
  if (rc < 0) return rc;
  if (which) *which = (size_t)rc - 1;
  return 0;
}

rgpu_status rgpu_client_wait_locked(rgpu_client *c, uint64_t seq, uint64_t first_seq,
                            rgpu_client_reply *r) {
  ASSERT_CLIENT_LOCK(c);
  rgpu_client_reply scratch;
  if (!r) {
    memset(&scratch, 0, sizeof scratch);
    r = &scratch;
  }
  r->done = 0;
  return rgpu_client_wait_any_locked(c, &seq, r, 1, first_seq, NULL);
}

rgpu_status rgpu_client_poll_events(rgpu_client *c) {
  rgpu_client_lock(c);
  int rc = 0;
  while (!c->dead) {
    if (c->rxpre_off >= c->rxpre.len && rgpu_conn_pending(c->conn) == 0) {
      struct pollfd p = {.fd = rgpu_conn_poll_fd(c->conn), .events = POLLIN};
      if (poll(&p, 1, 0) <= 0) break;
    }
    rc = read_one(c, NULL, NULL, 0, 0);
    if (rc < 0) break;
  }
  rgpu_client_unlock(c);
  return rc < 0 ? rc : 0;
}

/* ---- background D2H replies ------------------------------------------- */

static int bg_pending(const rgpu_client *c, uint64_t stream, uint64_t before_seq) {
  ASSERT_CLIENT_LOCK(c);
  for (size_t i = 0; i < c->nbg; i++) {
    const rgpu_bg_reply *e = &c->bg[i];
    /* The legacy stream (0) orders with every blocking stream: count it in
     * for any stream (erring towards waiting, never towards missing data). */
    if (e->seq < before_seq && e->dst &&
        (stream == RGPU_CLIENT_ALL_STREAMS || e->stream == stream || e->stream == 0))
      return 1;
  }
  return 0;
}

rgpu_status rgpu_client_send_background_locked(rgpu_client *c, uint16_t op, const void *fixed,
                                       size_t fixed_len, uint64_t stream, void *dst, size_t cap,
                                       uint64_t *seq_out) {
  ASSERT_CLIENT_LOCK(c);
  if (c->dead) return RGPU_CLIENT_EDEAD;
  /* Bound the reply bytes the server may have to push at a client that is
   * not reading: beyond it, wait for the oldest (an honest round trip). */
  if (c->bg_bytes && c->bg_bytes + cap > RGPU_CLIENT_BG_MAX_BYTES) {
    ASSERT_ONLY_CLIENT_LOCK(c);
    int rc = rgpu_client_flush_locked(c);
    if (rc) return rc;
    if (c->wait_hook) c->wait_hook();
    c->ctr.flow_waits++; /* the server is pushing those replies: no idle round trip */
    uint64_t t0 = rgpu_clock_ns();
    while (rc >= 0 && c->bg_bytes && c->bg_bytes + cap > RGPU_CLIENT_BG_MAX_BYTES)
      rc = read_one(c, NULL, NULL, 0, 0);
    c->ctr.wait_ns += rgpu_clock_elapsed_ns(t0);
    if (rc < 0) return rc;
  }
  if (RGPU_ARRAY_RESERVE(c->bg, c->capbg, c->nbg + 1, 16))
    return client_fail(c, RGPU_PROTO_ENOMEM, "queue");
  uint64_t seq;
  int rc = send_frame(c, op, 1, 0, fixed, fixed_len, NULL, 0, &seq);
  if (rc) return rc;
  c->bg[c->nbg++] = (rgpu_bg_reply){.seq = seq, .stream = stream, .dst = dst, .cap = cap};
  c->bg_bytes += cap;
  if (seq_out) *seq_out = seq;
  return 0;
}

rgpu_status rgpu_client_drain_locked(rgpu_client *c, uint64_t stream, uint64_t before_seq) {
  ASSERT_CLIENT_LOCK(c);
  if (!bg_pending(c, stream, before_seq)) return 0;
  ASSERT_ONLY_CLIENT_LOCK(c);
  int rc = rgpu_client_flush_locked(c);
  uint64_t t0 = rgpu_clock_ns();
  while (rc == 0 && bg_pending(c, stream, before_seq)) {
    rc = read_one(c, NULL, NULL, 0, 0);
    if (rc > 0) rc = 0;
  }
  c->ctr.wait_ns += rgpu_clock_elapsed_ns(t0);
  return rc < 0 ? rc : 0;
}

rgpu_status rgpu_client_drain_dst_locked(rgpu_client *c, const void *p, size_t n) {
  ASSERT_CLIENT_LOCK(c);
  uintptr_t lo = (uintptr_t)p, hi = lo + n;
  int rc = 0;
  uint64_t t0 = rgpu_clock_ns();
  for (;;) {
    int busy = 0;
    for (size_t i = 0; i < c->nbg && !busy; i++) {
      uintptr_t d = (uintptr_t)c->bg[i].dst;
      busy = c->bg[i].dst && d < hi && d + c->bg[i].cap > lo;
    }
    if (!busy || rc) break;
    ASSERT_ONLY_CLIENT_LOCK(c);
    rc = rgpu_client_flush_locked(c);
    if (rc == 0) rc = read_one(c, NULL, NULL, 0, 0);
    if (rc > 0) rc = 0;
  }
  c->ctr.wait_ns += rgpu_clock_elapsed_ns(t0);
  rgpu_mutex_lock(&c->wlock);
  rgpu_resend_own(&c->resend, p, n);
  rgpu_mutex_unlock(&c->wlock);
  return rc;
}

void rgpu_client_set_stable_tails_locked(rgpu_client *c, int on) {
  ASSERT_CLIENT_LOCK(c);
  c->stable_tails = on;
}

size_t rgpu_client_background_count(rgpu_client *c) {
  rgpu_client_lock(c);
  size_t n = c->nbg;
  rgpu_client_unlock(c);
  return n;
}

/* ---- host callbacks ------------------------------------------------------ */

void rgpu_client_set_host_call_hook(rgpu_client *c,
                                    void (*hook)(void *ctx, uint64_t callback, uint64_t token),
                                    void *ctx) {
  rgpu_client_lock(c);
  c->host_call_hook = hook;
  c->host_call_ctx = ctx;
  rgpu_client_unlock(c);
}

rgpu_status rgpu_client_send_now(rgpu_client *c, uint16_t op, const void *fixed, size_t fixed_len) {
  if (__atomic_load_n(&c->dead, __ATOMIC_RELAXED)) return RGPU_CLIENT_EDEAD;
  if (fixed_len > RGPU_FRAME_MAX_PAYLOAD) return RGPU_PROTO_ETOOBIG;
  rgpu_frame_hdr h = {.version = RGPU_PROTO_VERSION,
                      .kind = RGPU_KIND_REQUEST,
                      .opcode = op,
                      .length = (uint32_t)fixed_len,
                      .aux = 0,
                      .seq = __atomic_fetch_add(&c->next_seq, 1, __ATOMIC_RELAXED)};
  uint8_t hdr[RGPU_FRAME_HDR_SIZE];
  rgpu_frame_hdr_encode(hdr, &h);
  struct iovec iov[2] = {{hdr, sizeof hdr}, {(void *)fixed, fixed_len}};
  rgpu_mutex_lock(&c->wlock);
  int rc = client_write(c, iov, fixed_len ? 2 : 1, 0); /* without the client lock */
  if (rc == 0) {
    c->now_frames++;
    c->now_bytes += sizeof hdr + fixed_len;
  }
  rgpu_mutex_unlock(&c->wlock);
  /* A failed write is seen (and logged) by the next call under the lock. */
  return rc ? RGPU_CLIENT_EDEAD : 0;
}

int rgpu_client_try_pump(rgpu_client *c) {
  if (rgpu_mutex_trylock(&c->lock) != 0) return 1;
  int rc = rgpu_client_flush_locked(c);
  while (rc == 0 && !c->dead) {
    if (c->rxpre_off >= c->rxpre.len && rgpu_conn_pending(c->conn) == 0) {
      struct pollfd p = {.fd = rgpu_conn_poll_fd(c->conn), .events = POLLIN};
      if (poll(&p, 1, 0) <= 0) break;
    }
    rc = read_one(c, NULL, NULL, 0, 0);
    if (rc > 0) rc = 0;
  }
  rgpu_client_unlock(c);
  return rc < 0 ? rc : 0;
}

int rgpu_client_poll_fd(rgpu_client *c) { return c->conn ? rgpu_conn_poll_fd(c->conn) : -1; }

void rgpu_client_set_device_range(rgpu_client *c, int first, int count,
                                  rgpu_client_route_fn route) {
  c->first_device = first;
  c->device_count = count < 0 ? 0 : (unsigned)count;
  c->route = route;
}

int rgpu_client_first_device(const rgpu_client *c) { return c->first_device; }

int rgpu_client_owns_device(const rgpu_client *c, int device) {
  return (unsigned)(device - c->first_device) < c->device_count;
}

rgpu_status rgpu_client_bind_device_locked(rgpu_client *c, int device) {
  ASSERT_CLIENT_LOCK(c);
  if (c->bound_device == device) return 0;
  if (!rgpu_client_owns_device(c, device)) {
    RGPU_ERROR("device %d is not one of server %s's (devices %d..%d): request refused", device,
               c->uri, c->first_device, c->first_device + (int)c->device_count - 1);
    return 101; /* CUDA_ERROR_INVALID_DEVICE */
  }
  rgpu_msg_ctx_set_device_req m = {.device = (uint32_t)(device - c->first_device)};
  rgpu_status rc = rgpu_send_ctx_set_device_locked(c, 0, &m, NULL);
  if (rc == 0) c->bound_device = device;
  return rc;
}

void rgpu_client_unbind_device_locked(rgpu_client *c) {
  ASSERT_CLIENT_LOCK(c);
  c->bound_device = -1;
}

rgpu_status rgpu_client_call(rgpu_client *c, int device, uint16_t op, int allow_async, const void *fixed,
                     size_t fixed_len, const void *tail, size_t tail_len, rgpu_client_reply *r) {
  rgpu_client_reply local;
  if (!r) {
    memset(&local, 0, sizeof local);
    r = &local;
  }
  if (device >= 0 && !rgpu_client_owns_device(c, device)) {
    /* Another server's device (issue 19): its own session carries it. */
    rgpu_client *owner = c->route ? c->route(device) : NULL;
    if (!owner || owner == c) return 101; /* CUDA_ERROR_INVALID_DEVICE */
    c = owner;
  }
  rgpu_client_lock(c);
  int rc = 0;
  if (device >= 0) rc = rgpu_client_bind_device_locked(c, device);
  if (rc == 0) {
    int wait = !allow_async || c->sync_every_call;
    uint64_t seq = 0;
    uint64_t first = c->next_seq;
    rc = rgpu_client_send_locked(c, op, wait, fixed, fixed_len, tail, tail_len, &seq);
    if (rc == 0 && wait) {
      rc = rgpu_client_wait_locked(c, seq, first, r);
      if (rc == 0) rc = (int)r->status;
    }
  }
  rgpu_client_unlock(c);
  return rc;
}

int rgpu_client_take_async_error(rgpu_client *c, uint32_t *status, uint64_t *seq, char *msg,
                                 size_t msglen) {
  rgpu_client_lock(c);
  int had = c->async_pending;
  if (had) {
    if (status) *status = c->async_status;
    if (seq) *seq = c->async_seq;
    if (msg && msglen) snprintf(msg, msglen, "%s", c->async_msg);
    c->async_pending = 0;
  }
  rgpu_client_unlock(c);
  return had;
}

int rgpu_client_async_error_pending(rgpu_client *c) {
  rgpu_client_lock(c);
  int had = c->async_pending;
  rgpu_client_unlock(c);
  return had;
}

/* How long the program's exit waits for GOODBYE's reply, in all. */
#define RGPU_CLIENT_GOODBYE_WAIT_S 10

/* Waits (bounded) for the first bytes of a reply so that a server that
 * accepts but never answers cannot hang the program in HELLO. */
static int wait_readable(rgpu_client *c, int timeout_ms) {
  ASSERT_CLIENT_LOCK(c);
  if (c->rxpre_off < c->rxpre.len || rgpu_conn_pending(c->conn)) return 1;
  struct pollfd p = {.fd = rgpu_conn_poll_fd(c->conn), .events = POLLIN};
  for (;;) {
    int r = poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    return r;
  }
}

rgpu_status rgpu_client_connect(const rgpu_client_config *cfg, rgpu_client **out, char *err,
                        size_t errlen) {
  return rgpu_client_connect_with(cfg, NULL, NULL, out, err, errlen);
}

rgpu_status rgpu_client_connect_with(const rgpu_client_config *cfg, rgpu_client_hello_fn with_hello,
                             void *ctx, rgpu_client **out, char *err, size_t errlen) {
  *out = NULL;
  if (!cfg->server[0]) {
    snprintf(err, errlen,
             "rgpu: no server configured (set RGPU_SERVER=tcp://HOST:PORT or use rgpu run)");
    return RGPU_T_EINVAL;
  }
  if (strchr(cfg->server, ',')) {
    snprintf(err, errlen,
             "rgpu: %.200s names several servers; this program talks to one at a time (name one)",
             cfg->server);
    return RGPU_T_EINVAL;
  }
  rgpu_client *c = calloc(1, sizeof *c);
  if (!c) {
    snprintf(err, errlen, "rgpu: out of memory");
    return RGPU_PROTO_ENOMEM;
  }
  rgpu_mutex_init(&c->lock);
  rgpu_mutex_init(&c->wlock);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&c->timer_cv, &ca);
  pthread_condattr_destroy(&ca);
  rgpu_buf_init(&c->queue);
  rgpu_buf_init(&c->rx);
  snprintf(c->uri, sizeof c->uri, "%s", cfg->server);
  c->sync_every_call = cfg->sync_every_call;
  c->batch_us = cfg->batch_us;
  c->idle_sends = cfg->idle_sends;
  c->batch_bytes = cfg->batch_bytes ? cfg->batch_bytes : RGPU_CLIENT_DEFAULT_BATCH_BYTES;
  c->chunk_bytes = RGPU_CHUNK_BYTES;
  c->next_seq = 1;
  c->bound_device = -1;
  c->device_count = UINT_MAX; /* one server: every device number is its own */
  client_resume_init(c, cfg);

  rgpu_transport_opts o;
  client_transport_opts(cfg, &o);
  /* Certificate failures name every GnuTLS reason: room for all of them. */
  char terr[768] = "";
  int rc = rgpu_conn_connect(cfg->server, &o, &c->conn, terr, sizeof terr);
  if (rc) {
    snprintf(err, errlen, "rgpu: cannot reach server %s: %s (set RGPU_SERVER or use rgpu run)",
             cfg->server, terr[0] ? terr : conn_err_text(rc));
    rgpu_client_close(c);
    return rc;
  }
  snprintf(c->transport, sizeof c->transport, "%s", rgpu_conn_transport_name(c->conn));
  client_apply_spin(c);
  /* A token over tcp:// to another machine can be read by anyone on the
   * path (issue 14); once per process, reconnections included. */
  static int clear_token_warned;
  if (cfg->token[0] && rgpu_uri_is_clear_text_network(cfg->server) &&
      !__atomic_exchange_n(&clear_token_warned, 1, __ATOMIC_RELAXED))
    RGPU_WARN("RGPU_TOKEN is sent in clear over %s: anyone on the network path can read it; "
              "use tls:// or quic://",
              cfg->server);

  rgpu_msg_hello_req hello = {
      .proto_version = RGPU_PROTO_VERSION,
      .caps = RGPU_CAP_ASYNC_ERRORS | RGPU_CAP_OUTPUT | (c->reconnect_s > 0 ? 0 : RGPU_CAP_NO_RESUME) |
              (rgpu_client_bulk_wanted(cfg->server) ? RGPU_CAP_BULK_STREAMS : 0) |
              RGPU_CAP_IMAGE_CACHE | /* cudart/rgpu_cudart_image.c names images by hash */
              (c->direct_off ? 0 : RGPU_CAP_QUIC_DIRECT),
      .client_pid = (uint32_t)getpid(),
      .token = {cfg->token, strlen(cfg->token)},
      .resume_token = {NULL, 0},
      .client_name = {cfg->client_name, strlen(cfg->client_name)},
  };
  uint64_t seq;
  rgpu_buf pay;
  rgpu_buf_init(&pay);
  rgpu_client_reply r = {.payload = &pay};
  rgpu_client_lock(c);
  double hello_t0 = rgpu_clock_s();
  rc = rgpu_send_hello_locked(c, 1, &hello, &seq);
  size_t npre = 0;
  uint64_t *pre_seqs = NULL;
  rgpu_client_reply *pre_rs = NULL;
  if (rc == 0 && with_hello) npre = with_hello(c, ctx, &pre_seqs, &pre_rs);
  if (rc == 0) {
    int to = cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : 5000;
    if (wait_readable(c, to) <= 0) {
      rc = RGPU_T_ETIMEDOUT;
    } else {
      c->ctr.round_trips++;
      for (;;) {
        rc = read_one(c, &seq, &r, 1, 0);
        if (rc != 0) break;
      }
      if (rc == 1) rc = 0;
      c->hello_rtt_s = rgpu_clock_s() - hello_t0;
      /* The requests sent with HELLO: same round trip.  A refused HELLO
       * ran none of them (the server closes). */
      for (size_t got = 0; rc == 0 && r.status == 0 && got < npre; got++) {
        pre_rs[0].continued = 1;
        rc = rgpu_client_wait_any_locked(c, pre_seqs, pre_rs, npre, pre_seqs[0], NULL);
      }
    }
  }
  rgpu_client_unlock(c);
  if (rc == 0 && r.status != 0) {
    snprintf(err, errlen, "rgpu: server %s refused the session: %s", cfg->server,
             r.msg[0] ? r.msg : "no reason given");
    rgpu_buf_free(&pay);
    rgpu_client_close(c);
    return RGPU_T_EAUTH;
  }
  if (rc && c->peer_spoke_tls) {
    /* The HELLO, token included, went out in clear to a TLS server. */
    snprintf(err, errlen,
             "rgpu: cannot reach server %s: it answered in TLS: this looks like a TLS port: use "
             "tls://%s%s",
             cfg->server, strstr(cfg->server, "://") ? strstr(cfg->server, "://") + 3 : cfg->server,
             cfg->token[0] ? " (the token was sent in clear: consider it seen)" : "");
  } else if (rc) {
    /* A peer that closes on our HELLO is most often a tls:// or quic://
     * port spoken to in plain tcp://, or not an rgpu server at all. */
    snprintf(err, errlen, "rgpu: cannot reach server %s: %s during handshake", cfg->server,
             rc == RGPU_T_ETIMEDOUT ? "no answer"
             : !strncmp(cfg->server, "tcp://", 6)
                 ? "connection closed by the peer (is it a tls:// port, or not an rgpu-server?)"
                 : "connection failed");
  }
  if (rc) {
    rgpu_buf_free(&pay);
    rgpu_client_close(c);
    return rc < 0 ? rc : RGPU_T_EIO;
  }
  rgpu_msg_hello_rep hr;
  rc = rgpu_msg_hello_rep_decode(pay.data, pay.len, &hr);
  if (rc) {
    snprintf(err, errlen, "rgpu: server %s sent a malformed HELLO reply (%s)", cfg->server,
             rgpu_proto_strerror(rc));
    rgpu_buf_free(&pay);
    rgpu_client_close(c);
    return rc;
  }
  if (hr.proto_version != RGPU_PROTO_VERSION) {
    snprintf(err, errlen, "rgpu: server %s speaks protocol %u, this client %u", cfg->server,
             hr.proto_version, RGPU_PROTO_VERSION);
    rgpu_buf_free(&pay);
    rgpu_client_close(c);
    return RGPU_PROTO_EVERSION;
  }
  c->session_id = hr.session_id;
  c->caps = hr.caps;
  if (hr.session_token.len == sizeof c->session_token) {
    memcpy(c->session_token, hr.session_token.data, sizeof c->session_token);
    c->have_token = 1;
  }
  rgpu_str_copy(c->server_name, sizeof c->server_name, hr.server_name.data,
                hr.server_name.len < sizeof c->server_name ? hr.server_name.len
                                                           : sizeof c->server_name - 1);
  rgpu_str_copy(c->device_kind, sizeof c->device_kind, hr.device_kind.data,
                hr.device_kind.len < sizeof c->device_kind ? hr.device_kind.len
                                                           : sizeof c->device_kind - 1);
  if (hr.max_payload > 0 && hr.max_payload < RGPU_CHUNK_BYTES + 4096u) {
    /* Leave room for the fixed fields in front of the bulk bytes. */
    c->chunk_bytes = hr.max_payload > 8192 ? hr.max_payload - 4096u : hr.max_payload / 2;
    if (c->chunk_bytes == 0) c->chunk_bytes = 1;
  }
  rgpu_buf_free(&pay);
  if (hr.quic_direct_port) {
    rgpu_client_lock(c);
    rgpu_mutex_lock(&c->wlock);
    client_go_direct_locked(c, hr.quic_direct_port);
    rgpu_mutex_unlock(&c->wlock);
    rgpu_client_unlock(c);
  }
  *out = c;
  return 0;
}

void rgpu_client_close(rgpu_client *c) {
  if (!c) return;
  rgpu_client_lock(c);
  if (c->timer_started) {
    c->timer_stop = 1;
    pthread_cond_signal(&c->timer_cv);
  }
  rgpu_client_unlock(c);
  if (c->timer_started) {
    pthread_join(c->timer, NULL);
    c->timer_started = 0;
  }
  rgpu_client_lock(c);
  /* The program is ending: a connection that breaks now is not worth a
   * reconnect loop (whatever it waited for has been waited for). */
  rgpu_mutex_lock(&c->wlock);
  c->no_resume = 1;
  rgpu_mutex_unlock(&c->wlock);
  /* Copies nobody synchronized with: their destinations may be gone. */
  for (size_t i = 0; i < c->nbg; i++) c->bg[i].dst = NULL;
  if (c->conn && !c->dead && c->session_id) {
    uint64_t seq;
    uint64_t first = c->next_seq;
    /* Host callbacks the server calls from now on are answered without
     * running (cudart's callback thread is gone at exit). */
    c->closing = 1;
    if (rgpu_send_goodbye_locked(c, 1, NULL, &seq) == 0 && rgpu_client_flush_locked(c) == 0) {
      /* Bounded as a whole, not only until the first byte: a wedged server
       * (or one that keeps sending events) must not keep the program from
       * exiting. */
      double deadline = rgpu_clock_s() + RGPU_CLIENT_GOODBYE_WAIT_S;
      rgpu_client_reply r = {0};
      for (;;) {
        int ms = (int)((deadline - rgpu_clock_s()) * 1000.0);
        if (ms <= 0 || wait_readable(c, ms) <= 0) {
          RGPU_WARN("the server did not answer GOODBYE within %d s; closing anyway",
                    RGPU_CLIENT_GOODBYE_WAIT_S);
          break;
        }
        if (read_one(c, &seq, &r, 1, first) != 0) break; /* answered, or the connection failed */
      }
    }
  }
  rgpu_client_bulk_free(c);
  if (c->conn) {
    rgpu_conn_shutdown(c->conn);
    rgpu_conn_close(c->conn);
    c->conn = NULL;
  }
  rgpu_buf_free(&c->queue);
  rgpu_buf_free(&c->rx);
  free(c->bg);
  client_resume_free(c);
  rgpu_client_unlock(c);
  pthread_cond_destroy(&c->timer_cv);
  rgpu_mutex_destroy(&c->wlock);
  rgpu_mutex_destroy(&c->lock);
  free(c);
}

const char *rgpu_client_server_name(const rgpu_client *c) { return c->server_name; }
const char *rgpu_client_device_kind(const rgpu_client *c) { return c->device_kind; }
const char *rgpu_client_transport(const rgpu_client *c) { return c->transport; }
const char *rgpu_client_uri(const rgpu_client *c) { return c->uri; }
uint64_t rgpu_client_session_id(const rgpu_client *c) { return c->session_id; }
uint32_t rgpu_client_caps(const rgpu_client *c) { return c->caps; }
size_t rgpu_client_chunk_bytes(const rgpu_client *c) { return c->chunk_bytes; }
int rgpu_client_sync_every_call(const rgpu_client *c) { return c->sync_every_call; }
int rgpu_client_is_dead(const rgpu_client *c) { return c->dead; }
void rgpu_client_set_wait_hook(rgpu_client *c, void (*hook)(void)) { c->wait_hook = hook; }

void rgpu_client_set_spin(rgpu_client *c, int spin) {
  rgpu_client_lock(c);
  c->spin_off = !spin;
  client_apply_spin(c);
  rgpu_client_unlock(c);
}

void rgpu_client_get_counters(rgpu_client *c, rgpu_client_counters *out) {
  rgpu_client_lock(c);
  *out = c->ctr;
  out->resumes = c->resumes;
  out->quic_direct_moves = c->direct_moves;
  rgpu_mutex_lock(&c->wlock);
  out->frames_sent += c->now_frames;
  out->bytes_sent += c->now_bytes;
  rgpu_mutex_unlock(&c->wlock);
  rgpu_client_unlock(c);
}

/* ---- for rgpu_client_bulk.c (rgpu_client_internal.h) --------------------- */

rgpu_conn *rgpu_client_conn_locked(rgpu_client *c) {
  ASSERT_CLIENT_LOCK(c);
  return c->dead || c->broken ? NULL : c->conn;
}
uint64_t rgpu_client_generation_locked(rgpu_client *c) {
  ASSERT_CLIENT_LOCK(c);
  return c->resumes + c->direct_moves; /* every change of connection */
}
struct rgpu_client_bulk **rgpu_client_bulk_slot(rgpu_client *c) {
  ASSERT_CLIENT_LOCK(c);
  return &c->bulk;
}

void rgpu_client_count_round_trip_locked(rgpu_client *c) {
  ASSERT_CLIENT_LOCK(c);
  if (c->wait_hook) c->wait_hook();
  c->ctr.round_trips++;
}

void rgpu_client_count_bulk_locked(rgpu_client *c, uint64_t sent, uint64_t received) {
  ASSERT_CLIENT_LOCK(c);
  c->ctr.bytes_sent += sent;
  c->ctr.bytes_received += received;
}

uint64_t rgpu_client_take_seq_locked(rgpu_client *c) {
  ASSERT_CLIENT_LOCK(c);
  note_request_thread(c);
  return __atomic_fetch_add(&c->next_seq, 1, __ATOMIC_RELAXED);
}

uint64_t rgpu_client_mixed_ns_locked(rgpu_client *c) {
  ASSERT_CLIENT_LOCK(c);
  return c->mixed_ns;
}

rgpu_status rgpu_client_send_twin_locked(rgpu_client *c, uint16_t op, int need_reply, uint64_t seq,
                                 const void *fixed, size_t fixed_len, const struct iovec *twin,
                                 int ntwin) {
  ASSERT_CLIENT_LOCK(c);
  if (c->dead) return RGPU_CLIENT_EDEAD;
  size_t twin_len = 0;
  for (int i = 0; i < ntwin; i++) twin_len += twin[i].iov_len;
  if (twin_len > RGPU_CLIENT_INLINE_TAIL_BYTES) {
    /* The twin is kept like an inline copy's data: the same bound. */
    int crc = resend_checkpoint(c);
    if (crc) return crc;
  }
  /* Earlier queued frames first, so the resend buffer keeps wire order. */
  int rc = rgpu_client_flush_locked(c);
  if (rc) return rc;
  rgpu_frame_hdr h = {.version = RGPU_PROTO_VERSION,
                      .kind = RGPU_KIND_REQUEST,
                      .opcode = op,
                      .length = (uint32_t)fixed_len,
                      .aux = need_reply ? RGPU_REQ_NEED_REPLY : 0,
                      .seq = seq};
  uint8_t hdr[RGPU_FRAME_HDR_SIZE];
  rgpu_frame_hdr_encode(hdr, &h);
  struct iovec iov[2] = {{hdr, sizeof hdr}, {(void *)fixed, fixed_len}};
  c->ctr.frames_sent++;
  rgpu_mutex_lock(&c->wlock);
  if (c->reconnect_s > 0 && !c->no_resume) rgpu_resend_append(&c->resend, twin, ntwin);
  rc = 0;
  if (!c->broken) {
    rc = client_write_reading(c, c->conn, iov, fixed_len ? 2 : 1);
    if (rc && client_can_resume(c)) {
      c->broken = 1;
      rc = 0;
    }
  }
  rgpu_mutex_unlock(&c->wlock);
  if (rc) return client_fail(c, rc, "send");
  if (c->broken && (rc = client_resume(c, RGPU_T_ECLOSED, "send", c->rx_count))) return rc;
  c->ctr.bytes_sent += sizeof hdr + fixed_len;
  c->ctr.flushes++;
  return 0;
}

/* ---- resumable sessions ---------------------------------------------------
 * See rgpu_client_resume.h for the scheme.  Writes go through client_write
 * (under wlock): every request byte is kept until confirmed, and a failed
 * write only marks the connection broken.  Reads go through
 * client_read_exact, which serves the frames replayed during RESUME first.
 * The lock holder that meets the break (a failed read, or `broken` after a
 * write) runs client_resume: reconnect with backoff, RESUME, read the
 * replay, re-send, carry on.  The program sees a delay. */

/* The server's bytes are acknowledged every this many, so that its replay
 * buffer (bounded by RGPU_REPLAY_DEFAULT_BYTES) holds little more than what
 * is in flight: 32 bytes per MiB received. */
#define RGPU_CLIENT_ACK_BYTES (1u << 20)

static void client_transport_opts(const rgpu_client_config *cfg, rgpu_transport_opts *o) {
  memset(o, 0, sizeof *o);
  o->connect_timeout_ms = cfg->connect_timeout_ms;
  o->ca_file = cfg->ca_file[0] ? cfg->ca_file : NULL;
  o->cert_file = cfg->cert_file[0] ? cfg->cert_file : NULL;
  o->key_file = cfg->key_file[0] ? cfg->key_file : NULL;
  /* TCP: a dead link is noticed (TCP_USER_TIMEOUT = 4 x 10 s) so that the
   * session is resumed, or without resume the failure reported, instead of
   * a wait that never ends; QUIC pings every 10 s.  A server busy with a
   * long kernel still answers the probes (its kernel does). */
  o->keepalive_ms = 10000;
  o->idle_timeout_ms = cfg->idle_timeout_ms;
  /* QUIC pings a third of the idle timeout apart keep an idle link alive. */
  if (cfg->idle_timeout_ms > 0 && cfg->idle_timeout_ms < 30000) o->keepalive_ms = 0;
}

static void client_resume_init(rgpu_client *c, const rgpu_client_config *cfg) {
  rgpu_resend_init(&c->resend);
  rgpu_buf_init(&c->rxpre);
  c->reconnect_s = cfg->reconnect_s;
  c->spin_us = rgpu_spin_budget_us(RGPU_CLIENT_SPIN_US);
  /* docs/architecture.md, "Direct QUIC sessions"; for comparisons. */
  const char *direct = getenv("RGPU_QUIC_DIRECT");
  c->direct_off = direct && !strcmp(direct, "0");
  c->cfg = malloc(sizeof *c->cfg);
  if (c->cfg)
    *c->cfg = *cfg;
  else
    c->reconnect_s = 0;
}

static void client_resume_free(rgpu_client *c) {
  rgpu_copier_free(c->copier);
  c->copier = NULL;
  rgpu_resend_free(&c->resend);
  rgpu_buf_free(&c->rxpre);
  free(c->cfg);
  c->cfg = NULL;
}

static int client_can_resume(const rgpu_client *c) {
  /* no_resume is written holding both locks: a reader needs one. */
  assert(rgpu_mutex_held(&c->lock) || rgpu_mutex_held(&c->wlock));
  return c->reconnect_s > 0 && c->have_token && !c->no_resume && !c->resend.oom && c->cfg;
}

/* Bulk data from this size on is copied into the resend buffer on the
 * copier's thread while this one writes it (rgpu_copier.h). */
#define RGPU_CLIENT_COPY_ASIDE_BYTES (1u << 20)

/* Called while a write of ours cannot go on and the server has bytes for
 * us: takes them into rxpre, which every read consumes first (in stream
 * order; rx_count counts them when consumed, so a resume discards and
 * replays them).  The server stops reading when its writes block, e.g.
 * one ASYNC_ERROR per queued request after a fault: without this, a
 * program queueing enough failing work between two synchronizations hung
 * with both sides writing (rgpu_client_integration_test, error flood). */
typedef struct {
  rgpu_client *c;
  rgpu_conn *conn; /* c->conn, or the new connection of a resume */
} client_absorb;

/* Past this many absorbed bytes not read yet, the async errors at their
 * front are taken in at once (client_digest_async_errors). */
#define RGPU_CLIENT_ABSORB_DIGEST_BYTES (1u << 20)

/* A program that keeps queueing work after a failure gets one ASYNC_ERROR
 * event per failed request (issue 14: 200,000 launches after a faulting
 * kernel), and nothing reads them before its next synchronization: kept as
 * bytes they grew without bound (about 70 bytes per request).  So the
 * async errors at the front of rxpre are taken in here, as a wait would
 * take them: the first is latched (the next synchronizing call reports
 * it), the others counted, their bytes consumed (rx_count, the resend
 * buffer's confirmation) and dropped.  It stops at the first frame of any
 * other kind, which a wait reads in order.  One difference from a wait: an
 * error of the request being waited for right now is latched rather than
 * made that call's result, so the call after it reports it; only a flood
 * of failures gets here.  Not on a resume's new connection. */
static void client_digest_async_errors(rgpu_client *c) {
  ASSERT_CLIENT_LOCK(c);
  ASSERT_WRITE_LOCK(c);
  for (;;) {
    size_t have = c->rxpre.len - c->rxpre_off;
    const uint8_t *p = c->rxpre.data + c->rxpre_off;
    rgpu_frame_hdr h;
    if (have < RGPU_FRAME_HDR_SIZE || rgpu_frame_hdr_decode(p, RGPU_FRAME_MAX_PAYLOAD, &h) != 0)
      break;
    if (h.kind != RGPU_KIND_EVENT || h.opcode != RGPU_EVT_ASYNC_ERROR) break;
    size_t flen = RGPU_FRAME_HDR_SIZE + (size_t)h.length;
    if (have < flen) break;
    char text[256];
    async_error_text(p + RGPU_FRAME_HDR_SIZE, h.length, text);
    latch_async(c, h.aux, h.seq, text);
    c->rxpre_off += flen;
    c->rx_count += flen;
    c->rx_frame_start = c->rx_count;
    c->ctr.bytes_received += flen;
    c->async_digested++;
    /* client_frame_seen's confirmation; the write lock is ours already. */
    if (h.seq && c->reconnect_s > 0) rgpu_resend_confirm(&c->resend, h.seq);
  }
  if (c->rxpre_off) {
    memmove(c->rxpre.data, c->rxpre.data + c->rxpre_off, c->rxpre.len - c->rxpre_off);
    c->rxpre.len -= c->rxpre_off;
    c->rxpre_off = 0;
  }
}

/* Reads what conn has, up to max bytes, onto the end of rxpre: what every
 * read consumes first.  Returns the bytes read, 0 at the end of the
 * stream, or a transport error. */
static ssize_t rxpre_fill(rgpu_client *c, rgpu_conn *conn, size_t max) {
  ASSERT_CLIENT_LOCK(c);
  if (rgpu_buf_reserve(&c->rxpre, max)) return RGPU_T_EIO;
  ssize_t r = rgpu_conn_read_some(conn, c->rxpre.data + c->rxpre.len, max);
  if (r <= 0) return r;
  c->rxpre.len += (size_t)r;
  if (c->rxpre.len > c->rxpre_peak) c->rxpre_peak = c->rxpre.len;
  return r;
}

static int client_absorb_input(void *ctx) {
  client_absorb *a = ctx;
  rgpu_client *c = a->c;
  ASSERT_CLIENT_LOCK(c);
  enum { ABSORB = 64u << 10 };
  if (c->rxpre_off == c->rxpre.len) {
    rgpu_buf_reset(&c->rxpre);
    c->rxpre_off = 0;
  }
  if (c->rxpre.len - c->rxpre_off >= RGPU_CLIENT_ABSORB_DIGEST_BYTES && a->conn == c->conn &&
      !c->broken)
    client_digest_async_errors(c);
  ssize_t r = rxpre_fill(c, a->conn, ABSORB);
  if (r == 0) return RGPU_T_ECLOSED;
  if (r < 0) return (int)r;
  return 0;
}

size_t rgpu_client_absorbed_peak_bytes(const rgpu_client *c) { return c->rxpre_peak; }
uint64_t rgpu_client_async_errors_digested(const rgpu_client *c) { return c->async_digested; }

/* rgpu_conn_writev_all on conn by a thread that holds the client lock:
 * input is taken in while the write waits. */
static int client_write_reading(rgpu_client *c, rgpu_conn *conn, const struct iovec *iov, int n) {
  ASSERT_CLIENT_LOCK(c);
  client_absorb a = {c, conn};
  return rgpu_conn_writev_all_reading(conn, iov, n, client_absorb_input, &a);
}

static int client_write(rgpu_client *c, const struct iovec *iov, int n, int reading) {
  ASSERT_WRITE_LOCK(c);
  if (reading) ASSERT_CLIENT_LOCK(c);
  int aside = 0;
  if (c->reconnect_s > 0 && !c->no_resume) {
    int big = n > 0 && iov[n - 1].iov_len >= RGPU_CLIENT_COPY_ASIDE_BYTES && !c->broken;
    /* stable_tails is the client lock's, which every big write holds. */
    int by_ref = big && reading && c->stable_tails;
    if (big && !by_ref && !c->copier && !c->copier_failed) {
      c->copier = rgpu_copier_new();
      c->copier_failed = c->copier == NULL;
    }
    if (by_ref) {
      rgpu_resend_append_ref(&c->resend, iov, n, n - 1);
    } else if (big && c->copier) {
      /* Where the payload goes in the resend ring (it may span chunks);
       * none out of memory (the buffer notes it). */
      struct iovec dst[RGPU_COPIER_MAX_SEGS];
      int ndst = 0;
      rgpu_resend_append_aside(&c->resend, iov, n, n - 1, dst, RGPU_COPIER_MAX_SEGS, &ndst);
      if (ndst) {
        rgpu_copier_start(c->copier, dst, ndst, iov[n - 1].iov_base);
        aside = 1;
      }
    } else {
      rgpu_resend_append(&c->resend, iov, n);
    }
  }
  if (c->broken) return 0; /* kept: it goes out after the resume */
  int rc = reading ? client_write_reading(c, c->conn, iov, n) : rgpu_conn_writev_all(c->conn, iov, n);
  /* The caller's buffer may be reused once this returns. */
  if (aside) rgpu_copier_wait(c->copier);
  if (rc && client_can_resume(c)) {
    c->broken = 1;
    return 0;
  }
  return rc;
}

static int client_read_exact(rgpu_client *c, void *buf, size_t n) {
  ASSERT_CLIENT_LOCK(c);
  uint8_t *p = buf;
  size_t have = c->rxpre.len - c->rxpre_off;
  if (have) {
    size_t k = have < n ? have : n;
    memcpy(p, c->rxpre.data + c->rxpre_off, k);
    c->rxpre_off += k;
    if (c->rxpre_off == c->rxpre.len) {
      rgpu_buf_reset(&c->rxpre);
      c->rxpre_off = 0;
    }
    p += k;
    n -= k;
    c->rx_count += k;
  }
  if (n == 0) return 0;
  if (c->broken) return RGPU_T_ECLOSED;
  int rc = rgpu_conn_read_exact(c->conn, p, n);
  if (rc == 0) c->rx_count += n;
  return rc;
}

static int client_read_hdr(rgpu_client *c, rgpu_frame_hdr *h) {
  uint8_t hdr[RGPU_FRAME_HDR_SIZE] = {0};
  int rc = client_read_exact(c, hdr, sizeof hdr);
  /* Before HELLO is answered: a TLS alert or ServerHello instead of a frame
   * is a tls:// port spoken to in tcp:// (a short alert ends in EOF, so the
   * bytes are looked at whether or not the header was complete). */
  if (!c->session_id && rgpu_bytes_look_like_tls(hdr, sizeof hdr)) c->peer_spoke_tls = 1;
  if (rc) return rc;
  return rgpu_frame_hdr_decode(hdr, RGPU_FRAME_MAX_PAYLOAD, h);
}

/* At a frame boundary: remember where, and acknowledge the server's bytes
 * now and then (written at once; it is outside the counted stream). */
static void client_frame_begin(rgpu_client *c) {
  ASSERT_CLIENT_LOCK(c);
  c->rx_frame_start = c->rx_count;
  if (!c->have_token || c->reconnect_s <= 0 || c->broken ||
      c->rx_count - c->rx_acked < RGPU_CLIENT_ACK_BYTES)
    return;
  /* Sequence 0: never answered, outside the session's numbering. */
  rgpu_call_frame f;
  rgpu_msg_ack_req ack = {.rx_bytes = c->rx_count};
  rgpu_frame_ack(&f, 0, 0, &ack);
  struct iovec iov[2];
  int niov = rgpu_call_frame_iov(&f, iov);
  rgpu_mutex_lock(&c->wlock);
  /* Reading while it waits, like every write under the client lock: the
   * server may be blocked writing to us (client_absorb_input). */
  if (!c->broken && client_write_reading(c, c->conn, iov, niov) == 0)
    c->rx_acked = c->rx_count;
  else if (client_can_resume(c))
    c->broken = 1;
  rgpu_mutex_unlock(&c->wlock);
}

/* A reply or async error for request S: S and everything written before it
 * ran on the server. */
static void client_frame_seen(rgpu_client *c, const rgpu_frame_hdr *h) {
  ASSERT_CLIENT_LOCK(c);
  if (!h->seq || c->reconnect_s <= 0) return;
  if (h->kind == RGPU_KIND_REPLY && h->seq == c->ckpt_seq) c->ckpt_seq = 0; /* read by any wait */
  if (h->kind != RGPU_KIND_REPLY && !(h->kind == RGPU_KIND_EVENT && h->opcode == RGPU_EVT_ASYNC_ERROR))
    return;
  rgpu_mutex_lock(&c->wlock);
  rgpu_resend_confirm(&c->resend, h->seq);
  rgpu_mutex_unlock(&c->wlock);
}

static void client_on_shutdown(rgpu_client *c) {
  ASSERT_CLIENT_LOCK(c);
  rgpu_msg_shutdown_evt ev;
  char text[256] = "the server is shutting down";
  if (rgpu_msg_shutdown_evt_decode(c->rx.data, c->rx.len, &ev) == 0 && ev.message.len)
    rgpu_str_copy(text, sizeof text,
                  ev.message.data, ev.message.len < sizeof text - 1 ? ev.message.len
                                                                    : sizeof text - 1);
  for (char *q = text; *q; q++)
    if ((unsigned char)*q < 0x20) *q = ' ';
  if (!c->dead)
    RGPU_ERROR("server %s ended session %llu: %s; CUDA calls will fail from now on", c->uri,
               (unsigned long long)c->session_id, text);
  rgpu_mutex_lock(&c->wlock); /* a host-callback thread may be writing */
  c->no_resume = 1;
  rgpu_mutex_unlock(&c->wlock);
  __atomic_store_n(&c->dead, 1, __ATOMIC_RELAXED);
}

/* The resend buffer must not grow without bound, so the server is asked to
 * confirm what it ran: past half of RGPU_RESEND_MAX_BYTES of unconfirmed
 * requests a PING goes out (its reply confirms everything before it), and
 * only past the whole bound does the client wait for that reply.  By then
 * the reply has normally arrived (half the bound later), so the pipe never
 * drains; waiting for it right away cost a round trip per 32 MiB of H2D
 * (35 round trips for four 256 MiB copies).  Half the bound is still in
 * flight meanwhile, so a wait here is flow control (flow_waits), not an
 * idle round trip. */
static int resend_checkpoint(rgpu_client *c) {
  ASSERT_CLIENT_LOCK(c);
  if (c->reconnect_s <= 0 || !c->have_token) return 0;
  rgpu_mutex_lock(&c->wlock);
  size_t held = rgpu_resend_held(&c->resend);
  rgpu_mutex_unlock(&c->wlock);
  if (held <= RGPU_RESEND_MAX_BYTES / 2) return 0;
  uint64_t first = rgpu_client_next_seq_locked(c);
  if (!c->ckpt_seq) return rgpu_send_ping_locked(c, 1, NULL, &c->ckpt_seq);
  if (held <= RGPU_RESEND_MAX_BYTES) return 0;
  uint64_t seq = c->ckpt_seq;
  c->ctr.flow_waits++;
  rgpu_client_reply r = {.continued = 1};
  int rc = rgpu_client_wait_any_locked(c, &seq, &r, 1, first, NULL);
  c->ckpt_seq = 0;
  return rc;
}


/* Reads exactly n bytes from conn within the deadline (rgpu_clock_s). */
static int read_deadline(rgpu_conn *conn, void *buf, size_t n, double deadline) {
  return rgpu_conn_read_exact_by(conn, buf, n, -1, deadline > 0 ? (uint64_t)(deadline * 1e9) : 0);
}

/* One RESUME on a fresh connection.  0: resumed (the caller then takes nc:
 * client_take_conn_locked); 1: the server refused (the session is gone; msg
 * says why); <0: this connection failed, try another.  *direct_port (NULL:
 * not wanted): the port of the worker's own the reply offers, or 0. */
static int resume_on(rgpu_client *c, rgpu_conn *nc, uint64_t rx, double deadline, char *msg,
                     size_t msglen, uint16_t *direct_port) {
  /* Swaps the connection and fills rxpre (client lock: the read side),
   * reads the resend buffer (write lock). */
  ASSERT_CLIENT_LOCK(c);
  ASSERT_WRITE_LOCK(c);
  /* Sequence 0, outside the counted stream (rgpu_messages.def, RESUME). */
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_resume_req q = {.session_token = {c->session_token, sizeof c->session_token},
                           .rx_bytes = rx};
  int rc = rgpu_frame_resume_buf(&b, 0, 0, &q);
  struct iovec iov = {b.data, b.len};
  if (rc == 0) rc = rgpu_conn_writev_all(nc, &iov, 1);
  rgpu_buf_free(&b);
  if (rc) return rc;
  rgpu_frame_hdr h;
  uint8_t hdr[RGPU_FRAME_HDR_SIZE];
  /* The server answers within a few hundred ms unless the link is down. */
  double d = rgpu_clock_s() + 10.0 < deadline ? rgpu_clock_s() + 10.0 : deadline;
  rc = read_deadline(nc, hdr, sizeof hdr, d);
  if (rc == 0) rc = rgpu_frame_hdr_decode(hdr, 65536, &h);
  if (rc) return rc < -1000 ? 1 : rc;
  uint8_t pay[1024];
  if (h.length > sizeof pay) return RGPU_T_EIO;
  rc = read_deadline(nc, pay, h.length, d);
  if (rc) return rc;
  if (h.kind != RGPU_KIND_REPLY || h.opcode != RGPU_OP_RESUME) {
    snprintf(msg, msglen, "unexpected answer to RESUME");
    return 1;
  }
  if (h.aux != 0) {
    size_t m = h.length < msglen - 1 ? h.length : msglen - 1;
    memcpy(msg, pay, m);
    msg[m] = 0;
    for (size_t i = 0; i < m; i++)
      if ((unsigned char)msg[i] < 0x20) msg[i] = ' ';
    return 1;
  }
  rgpu_msg_resume_rep rep;
  if (rgpu_msg_resume_rep_decode(pay, h.length, &rep) || rep.session_id != c->session_id ||
      rep.tx_bytes < rx) {
    snprintf(msg, msglen, "malformed RESUME reply");
    return 1;
  }
  if (direct_port) *direct_port = rep.quic_direct_port;
  /* Everything the server sent that we missed comes first; read it all
   * before re-sending, so neither side can block the other writing. */
  size_t missing = (size_t)(rep.tx_bytes - rx);
  rgpu_buf_reset(&c->rxpre);
  c->rxpre_off = 0;
  if (missing) {
    if (rgpu_buf_reserve(&c->rxpre, missing)) {
      snprintf(msg, msglen, "out of memory for %zu replayed bytes", missing);
      return 1;
    }
    rc = read_deadline(nc, c->rxpre.data, missing, deadline);
    if (rc) return rc;
    c->rxpre.len = missing;
  }
  size_t n, frames = 0;
  if (rgpu_resend_from(&c->resend, rep.rx_bytes, &n, &frames)) {
    snprintf(msg, msglen,
             "the server executed %llu request bytes, this client holds %llu..%llu",
             (unsigned long long)rep.rx_bytes, (unsigned long long)c->resend.base,
             (unsigned long long)c->resend.total);
    rgpu_buf_reset(&c->rxpre);
    return 1;
  }
  /* The held bytes lie in chunks: written a batch of them at a time. */
  for (size_t done = 0; done < n;) {
    struct iovec io[64];
    int k = rgpu_resend_iov(&c->resend, done, io, 64);
    /* The server runs what it gets and may answer at once: read meanwhile. */
    rc = client_write_reading(c, nc, io, k);
    if (rc) return rc;
    for (int i = 0; i < k; i++) done += io[i].iov_len;
  }
  c->resent_bytes += n;
  c->resent_frames += frames;
  c->replayed_bytes += missing;
  return 0;
}

/* The session goes on over nc, whose RESUME (resume_on) found the client
 * rx server bytes in.  Client and write locks held. */
static void client_take_conn_locked(rgpu_client *c, rgpu_conn *nc, uint64_t rx) {
  ASSERT_CLIENT_LOCK(c);
  ASSERT_WRITE_LOCK(c);
  c->conn = nc;
  /* The new path may be another network: how near the server is, is
   * measured again. */
  c->rtt_floor_ns = 0;
  client_apply_spin(c);
  c->broken = 0;
  c->rx_count = c->rx_frame_start = rx;
  c->rx_acked = rx;
}

/* Moves the session to the worker's own QUIC port (issue 21,
 * server/rgpu_quic_direct.h): RESUME on a new connection there, which the
 * worker takes as the session's connection; the relayed one then ends.
 * Nothing is lost whatever happens: a port that cannot be reached leaves
 * the session where it is (once per process: c->direct_off), and a
 * connection that fails after the worker took it ends in an ordinary
 * resume through the listener.  Client and write locks held. */
static void client_go_direct_locked(rgpu_client *c, uint16_t port) {
  ASSERT_CLIENT_LOCK(c);
  ASSERT_WRITE_LOCK(c);
  if (!port || c->direct_off || !client_can_resume(c) || strcmp(c->transport, "quic")) return;
  rgpu_uri u;
  char uerr[128];
  if (rgpu_uri_parse(c->cfg->server, &u, uerr, sizeof uerr)) return;
  char uri[300];
  snprintf(uri, sizeof uri, strchr(u.host, ':') ? "quic://[%s]:%u" : "quic://%s:%u", u.host,
           (unsigned)port);
  /* A port that UDP cannot reach (a firewall that drops it) costs this
   * once: ten round trips of HELLO's, at least 2 s (a lost handshake
   * packet is resent after about 1 s), at most the connect timeout. */
  int to = (int)(c->hello_rtt_s * 10000.0);
  if (to < 2000) to = 2000;
  int cto = c->cfg->connect_timeout_ms > 0 ? c->cfg->connect_timeout_ms : 5000;
  if (to > cto) to = cto;
  rgpu_transport_opts o;
  client_transport_opts(c->cfg, &o);
  o.connect_timeout_ms = to;
  double t0 = rgpu_clock_s();
  rgpu_conn *nc = NULL;
  char terr[512] = "", msg[512] = "";
  int rc = rgpu_conn_connect(uri, &o, &nc, terr, sizeof terr);
  if (rc == 0) {
    /* Between calls: every frame read is read whole. */
    uint64_t rx = c->rx_count;
    rc = resume_on(c, nc, rx, t0 + to / 1000.0, msg, sizeof msg, NULL);
    if (rc == 0) {
      rgpu_conn *old = c->conn;
      client_take_conn_locked(c, nc, rx);
      c->direct_moves++;
      /* The worker dropped it when it took nc: nothing on it is awaited. */
      rgpu_conn_abort(old);
      rgpu_conn_close(old);
      RGPU_DEBUG("session %llu moved to the worker's own QUIC port %u in %.1f ms",
                 (unsigned long long)c->session_id, (unsigned)port,
                 (rgpu_clock_s() - t0) * 1000.0);
      return;
    }
    rgpu_conn_close(nc);
  }
  c->direct_off = 1;
  RGPU_INFO("session %llu stays on the server's relay: its direct QUIC port %s:%u: %s "
            "(RGPU_QUIC_DIRECT=0 skips the attempt)",
            (unsigned long long)c->session_id, u.host, (unsigned)port,
            msg[0] ? msg : terr[0] ? terr : conn_err_text(rc));
}

/* A draining server says SHUTDOWN and closes; a write of ours that fails
 * on the closed connection then comes before any read has seen why (the
 * sends right after a reply, RGPU_BATCH_IDLE_SENDS, made it the rule:
 * reliability_drain's client tried to resume for 60 s).  So before a
 * resume, what the old connection still holds is taken into rxpre and
 * scanned for a SHUTDOWN.  Nothing is consumed (rx_count stays): a resume
 * discards rxpre and the server replays from rx_count.  Returns 1 when a
 * SHUTDOWN was there (the session is over, as client_on_shutdown says). */
static int client_last_words_shutdown(rgpu_client *c) {
  ASSERT_CLIENT_LOCK(c);
  enum { CHUNK = 64u << 10, MAX_READS = 64 };
  for (int i = 0; c->conn && i < MAX_READS; i++) {
    if (rgpu_conn_pending(c->conn) == 0) {
      struct pollfd p = {.fd = rgpu_conn_poll_fd(c->conn), .events = POLLIN};
      if (poll(&p, 1, 0) <= 0) break;
    }
    if (rxpre_fill(c, c->conn, CHUNK) <= 0) break;
  }
  size_t off = c->rxpre_off;
  rgpu_frame_hdr h;
  while (c->rxpre.len - off >= RGPU_FRAME_HDR_SIZE &&
         rgpu_frame_hdr_decode(c->rxpre.data + off, RGPU_FRAME_MAX_PAYLOAD, &h) == 0) {
    size_t flen = RGPU_FRAME_HDR_SIZE + (size_t)h.length;
    if (c->rxpre.len - off < flen) break;
    if (h.kind == RGPU_KIND_EVENT && h.opcode == RGPU_EVT_SHUTDOWN) {
      rgpu_buf_reset(&c->rx);
      if (rgpu_buf_reserve(&c->rx, h.length) == 0) {
        memcpy(c->rx.data, c->rxpre.data + off + RGPU_FRAME_HDR_SIZE, h.length);
        c->rx.len = h.length;
      }
      client_on_shutdown(c);
      return 1;
    }
    off += flen;
  }
  return 0;
}

/* rx: the server bytes consumed completely (a frame broken off half-way
 * comes again). */
static int client_resume(rgpu_client *c, int rc0, const char *what, uint64_t rx) {
  /* Only a lock holder resumes (a read path, or a write under the lock
   * that left `broken`); rgpu_client_send_now never does. */
  ASSERT_CLIENT_LOCK(c);
  if (client_last_words_shutdown(c)) return RGPU_CLIENT_EDEAD;
  double t0 = rgpu_clock_s();
  double deadline = t0 + c->reconnect_s;
  rgpu_mutex_lock(&c->wlock);
  c->broken = 1; /* nobody writes to the old connection any more */
  RGPU_WARN("connection to server %s lost (%s: %s); resuming session %llu (for up to %d s)",
            c->uri, what, conn_err_text(rc0), (unsigned long long)c->session_id, c->reconnect_s);
  if (c->conn) {
    rgpu_conn_close(c->conn);
    c->conn = NULL;
  }
  rgpu_transport_opts o;
  client_transport_opts(c->cfg, &o);
  char msg[512] = "";
  int attempt = 0, refused = 0;
  for (;; attempt++) {
    double left = deadline - rgpu_clock_s();
    if (left <= 0) break;
    int to = c->cfg->connect_timeout_ms > 0 ? c->cfg->connect_timeout_ms : 5000;
    if (to > left * 1000.0) to = (int)(left * 1000.0) + 1;
    o.connect_timeout_ms = to;
    rgpu_conn *nc = NULL;
    char terr[512] = "";
    int rc = rgpu_conn_connect(c->cfg->server, &o, &nc, terr, sizeof terr);
    if (rc == 0) {
      uint16_t direct_port = 0;
      rc = resume_on(c, nc, rx, deadline, msg, sizeof msg, &direct_port);
      if (rc == 0) {
        client_take_conn_locked(c, nc, rx);
        c->resumes++;
        RGPU_WARN("resumed session %llu after %.1f s (%d attempt%s; re-sent %llu bytes, %llu "
                  "bytes replayed by the server)",
                  (unsigned long long)c->session_id, rgpu_clock_s() - t0, attempt + 1,
                  attempt ? "s" : "", (unsigned long long)c->resent_bytes,
                  (unsigned long long)c->replayed_bytes);
        /* Through the relay again: back to the worker's own port.  The
         * server replays the same bytes there (nothing was consumed
         * since), so rxpre is filled again alike. */
        client_go_direct_locked(c, direct_port);
        rgpu_mutex_unlock(&c->wlock);
        return 0;
      }
      rgpu_conn_close(nc);
      if (rc == 1) {
        refused = 1;
        break;
      }
    }
    RGPU_DEBUG("reconnect attempt %d to %s: %s", attempt + 1, c->cfg->server,
               terr[0] ? terr : conn_err_text(rc));
    double nap = rgpu_resume_backoff_ms(attempt) / 1000.0;
    left = deadline - rgpu_clock_s();
    if (left <= 0) break;
    if (nap > left) nap = left;
    struct timespec ts = rgpu_ns_timespec((uint64_t)(nap * 1e9));
    nanosleep(&ts, NULL);
  }
  c->no_resume = 1;
  __atomic_store_n(&c->dead, 1, __ATOMIC_RELAXED);
  rgpu_mutex_unlock(&c->wlock);
  if (refused)
    RGPU_ERROR("server %s refused to resume session %llu: %s; CUDA calls will fail from now on",
               c->uri, (unsigned long long)c->session_id, msg[0] ? msg : "no reason given");
  else
    RGPU_ERROR("could not resume session %llu with %s within %d s; CUDA calls will fail from "
               "now on",
               (unsigned long long)c->session_id, c->uri, c->reconnect_s);
  return RGPU_CLIENT_EDEAD;
}
