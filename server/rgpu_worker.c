/* The session loop and its connection: frames in, dispatch (rgpu_dispatch.h),
 * frames out, strictly in arrival order; resume, the listener's control
 * channel and bulk waits.  Driver and contexts: rgpu_device.c; staging
 * buffers: rgpu_staging.c; handlers: rgpu_handlers.c and the files of their
 * concern. */
#define _GNU_SOURCE /* POLLRDHUP */
#include "rgpu_bulk.h"
#include "rgpu_graph.h"
#include "rgpu_worker_internal.h"

#include <errno.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rgpu_bulk_proto.h"
#include "rgpu_clock.h"
#include "rgpu_frame_io.h"
#include "rgpu_image_cache.h"
#include "rgpu_log.h"
#include "rgpu_spin.h"
#include "rgpu_metrics.h"
#include "rgpu_quic_direct.h"
#include "rgpu_thread_name.h"

/* ---- bounded end (own process only; rgpu_worker.h) --------------------- */

static pthread_mutex_t wd_lock = PTHREAD_MUTEX_INITIALIZER;
static double wd_deadline;         /* rgpu_clock_s(); 0 = not armed (wd_lock) */
static const char *wd_why = "";    /* what armed it (wd_lock) */
static int wd_started;
static volatile sig_atomic_t wd_sigterm;
static rgpu_worker_config wd_cfg;  /* a copy: the worker may be freed while the thread runs */

static int end_timeout_s(const rgpu_worker_config *cfg) {
  return cfg->session_end_timeout_s > 0 ? cfg->session_end_timeout_s : 10;
}

/* Arms the deadline `after_s` from now (an earlier one stays). */
static void watchdog_arm(double after_s, const char *why) {
  pthread_mutex_lock(&wd_lock);
  double d = rgpu_clock_s() + after_s;
  if (wd_started && (wd_deadline == 0 || d < wd_deadline)) {
    wd_deadline = d;
    wd_why = why;
  }
  pthread_mutex_unlock(&wd_lock);
}

/* The session ended: from now on the device has session_end_timeout_s to drain. */
static void session_ended(rgpu_worker *w, const char *why) {
  if (w->cfg.own_process) watchdog_arm(end_timeout_s(&w->cfg), why);
}

void rgpu_worker_on_sigterm(int sig) {
  (void)sig;
  wd_sigterm = 1;
}

static void *watchdog_main(void *arg) {
  rgpu_thread_name("rgpu-watchdog");
  (void)arg;
  int listener_gone = 0, term_seen = 0;
  for (;;) {
    /* Polls the control channel for a hang-up only (the session thread
     * reads its messages): a listener that died leaves no one to stop us. */
    struct pollfd pf = {wd_cfg.ctl_fd > 0 && !listener_gone ? wd_cfg.ctl_fd : -1, POLLRDHUP, 0};
    int pr = poll(&pf, 1, 100);
    if (pr > 0 && (pf.revents & (POLLHUP | POLLRDHUP | POLLERR)) && !listener_gone) {
      listener_gone = 1;
      watchdog_arm(end_timeout_s(&wd_cfg), "listener-gone");
    }
    if (wd_sigterm && !term_seen) {
      term_seen = 1;
      int drain = wd_cfg.drain_s > 0 ? wd_cfg.drain_s : 0;
      watchdog_arm((double)drain + end_timeout_s(&wd_cfg), "sigterm");
    }
    pthread_mutex_lock(&wd_lock);
    double d = wd_deadline;
    const char *why = wd_why;
    pthread_mutex_unlock(&wd_lock);
    if (d > 0 && rgpu_clock_s() >= d) {
      RGPU_ERROR("session=%llu peer=%s event=end-timeout reason=%s: the session is over but its "
                 "device did not drain within %d s (a kernel that does not end?); exiting "
                 "without cleanup (--session-end-timeout-s)",
                 (unsigned long long)wd_cfg.session_id, wd_cfg.peer, why, end_timeout_s(&wd_cfg));
      _exit(3);
    }
  }
  return NULL;
}

void rgpu_worker_watchdog_start(rgpu_worker *w) {
  if (!w || !w->cfg.own_process || w->cfg.session_end_timeout_s < 0) return;
  pthread_mutex_lock(&wd_lock);
  if (!wd_started) {
    wd_cfg = w->cfg;
    pthread_t th;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&th, &a, watchdog_main, NULL);
    pthread_attr_destroy(&a);
    wd_started = rc == 0;
    if (rc)
      RGPU_WARN("session=%llu no watchdog thread (%s): the session's end is not bounded",
                (unsigned long long)w->cfg.session_id, strerror(rc));
  }
  pthread_mutex_unlock(&wd_lock);
}

/* handle_frame: the frame was left unexecuted (a bulk wait, rgpu_bulk.h). */
#define RGPU_WORKER_ABANDON 2

CUresult rgpu_worker_fail(rgpu_worker *w, CUresult status, const char *fmt, ...) {
  char scratch[1];
  va_list ap;
  va_start(ap, fmt);
  if (w->req)
    vsnprintf(w->req->msg, sizeof w->req->msg, fmt, ap);
  else
    vsnprintf(scratch, sizeof scratch, fmt, ap); /* no request to report it to */
  va_end(ap);
  return status;
}

CUresult rgpu_req_fail(rgpu_req *rq, CUresult status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rq->msg, sizeof rq->msg, fmt, ap);
  va_end(ap);
  return status;
}

CUresult rgpu_req_malformed(rgpu_req *rq, int e) {
  return rgpu_req_fail(rq, CUDA_ERROR_INVALID_VALUE, "malformed request: %s: %s",
                       rgpu_op_name(rq->op), rgpu_proto_strerror(e));
}

CUresult rgpu_req_ensure_ctx(rgpu_req *rq) { return rgpu_worker_ensure_ctx(rq->w); }

void rgpu_req_abandon(rgpu_req *rq, int break_conn) { rq->abandon = break_conn ? 2 : 1; }

rgpu_worker *rgpu_worker_new(const rgpu_worker_config *cfg) {
  /* Bulk copies malloc and free one RGPU_CHUNK_BYTES buffer per chunk (the
   * H2D frame kept until its stream consumed it, the D2H reply buffer).
   * With glibc's defaults the heap is trimmed (brk down) after such frees
   * and the next chunk faults its 1024 pages in again.  Keeping 4 MiB
   * buffers on the heap and not trimming it halved the worker's page
   * faults for 576 MiB of H2D (71k -> 37k) and cut its CPU time by a fifth
   * (softgpu, loopback tcp).  A pool of reused, pinned chunk buffers is the
   * complete fix (transport/README.md, "Bandwidth"). */
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  rgpu_worker *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  w->cfg = *cfg;
  if (w->cfg.max_payload == 0 || w->cfg.max_payload > RGPU_FRAME_MAX_PAYLOAD)
    w->cfg.max_payload = RGPU_FRAME_MAX_PAYLOAD;
  w->cur_dev = -1;
  w->events_ep = -1;
  w->spin_us = rgpu_spin_budget_us(200);
  rgpu_alloc_table_init(&w->allocs);
  rgpu_handle_map_init(&w->streams);
  rgpu_handle_map_init(&w->events);
  rgpu_handle_map_init(&w->modules);
  rgpu_handle_map_init(&w->arrays);
  rgpu_alloc_table_init(&w->vmm_reserved);
  rgpu_alloc_table_init(&w->vmm_mapped);
  rgpu_handle_map_init(&w->vmm_handles);
  rgpu_handle_map_init(&w->vmm_access);
  rgpu_handle_map_init(&w->texobjs);
  rgpu_handle_map_init(&w->surfobjs);
  rgpu_handle_map_init(&w->managed_copies);
  rgpu_buf_init(&w->rep_buf);
  rgpu_output_init(&w->output);
  pthread_mutex_init(&w->write_lock, NULL);
  pthread_mutex_init(&w->jobs.lock, NULL);
  pthread_cond_init(&w->jobs.cond, NULL);
  w->end_reason = "eof";
  rgpu_replay_init(&w->replay, w->cfg.grace_s > 0 && w->cfg.ctl_fd > 0, w->cfg.replay_bytes);
  return w;
}

void rgpu_worker_free(rgpu_worker *w) {
  if (!w) return;
  rgpu_jobs_barrier(w, NULL);
  rgpu_jobs_stop(w);
  rgpu_worker_drop_device_state(w, -1, 1);
  rgpu_staging_drop(w);
  if (w->drv_state == 1) {
    for (int i = 0; i < w->device_count; i++) {
      if (!w->ctx[i]) continue;
      CUdevice d;
      if (w->drv.cuDeviceGet(&d, rgpu_worker_ordinal(w, i)) == CUDA_SUCCESS)
        w->drv.cuDevicePrimaryCtxRelease(d);
    }
    if (w->drv.sgSetPrintHandler && (w->caps & RGPU_CAP_OUTPUT))
      w->drv.sgSetPrintHandler(NULL, NULL);
    rgpu_driver_unload(&w->drv);
  }
  rgpu_host_calls_free(w);
  rgpu_quic_direct_free(w);
  if (w->events_ep >= 0) close(w->events_ep);
  rgpu_output_free(&w->output);
  rgpu_alloc_table_free(&w->allocs);
  rgpu_handle_map_free(&w->streams);
  rgpu_handle_map_free(&w->events);
  rgpu_handle_map_free(&w->modules);
  rgpu_handle_map_free(&w->arrays);
  rgpu_alloc_table_free(&w->vmm_reserved);
  rgpu_alloc_table_free(&w->vmm_mapped);
  rgpu_handle_map_free(&w->vmm_handles);
  rgpu_handle_map_free(&w->vmm_access);
  rgpu_handle_map_free(&w->texobjs);
  rgpu_handle_map_free(&w->surfobjs);
  rgpu_handle_map_free(&w->managed_copies);
  rgpu_buf_free(&w->rep_buf);
  rgpu_replay_free(&w->replay);
  pthread_mutex_destroy(&w->write_lock);
  pthread_mutex_destroy(&w->jobs.lock);
  pthread_cond_destroy(&w->jobs.cond);
  free(w->param_buf);
  rgpu_image_cache_close(w->image_cache);
  free(w);
}

uint64_t rgpu_worker_calls(const rgpu_worker *w) { return w->calls; }
int rgpu_worker_handed_off(const rgpu_worker *w) { return w->resume.handed_off; }
const char *rgpu_worker_end_reason(const rgpu_worker *w) { return w->end_reason; }

/* ---- frame building ----------------------------------------------------- */

static void put_frame(rgpu_buf *out, uint8_t kind, uint16_t op, uint32_t aux, uint64_t seq,
                      const void *payload, size_t len) {
  rgpu_frame_hdr h = {RGPU_PROTO_VERSION, kind, op, (uint32_t)len, aux, seq};
  uint8_t hdr[RGPU_FRAME_HDR_SIZE];
  rgpu_frame_hdr_encode(hdr, &h);
  rgpu_buf_put(out, hdr, sizeof hdr);
  if (len) rgpu_buf_put(out, payload, len);
}

/* Moves device printf text into OUTPUT events, in max_payload pieces. */
void rgpu_worker_flush_output(rgpu_worker *w, rgpu_buf *out) {
  pthread_mutex_lock(&w->output.lock);
  rgpu_output_capture_drain(&w->output);
  size_t off = 0;
  while (off < w->output.pending.len) {
    size_t n = w->output.pending.len - off;
    if (n > w->cfg.max_payload) n = w->cfg.max_payload;
    put_frame(out, RGPU_KIND_EVENT, RGPU_EVT_OUTPUT, 0, 0, w->output.pending.data + off, n);
    off += n;
  }
  rgpu_buf_reset(&w->output.pending);
  if (w->output.dropped) {
    char note[128];
    int n = snprintf(note, sizeof note, "\n[rgpu: %llu bytes of device printf output dropped]\n",
                     (unsigned long long)w->output.dropped);
    put_frame(out, RGPU_KIND_EVENT, RGPU_EVT_OUTPUT, 0, 0, note, (size_t)n);
    w->output.dropped = 0;
  }
  pthread_mutex_unlock(&w->output.lock);
}

static void put_async_error(rgpu_buf *out, CUresult status, uint64_t seq, const char *msg) {
  rgpu_buf b;
  rgpu_buf_init(&b);
  size_t n = strlen(msg);
  if (n > 1024) n = 1024;
  rgpu_msg_async_error_evt ev = {.message = {msg, n}};
  rgpu_msg_async_error_evt_encode(&b, &ev);
  put_frame(out, RGPU_KIND_EVENT, RGPU_EVT_ASYNC_ERROR, (uint32_t)status, seq, b.data, b.len);
  rgpu_buf_free(&b);
}

/* Result of a request: reply if asked for, else an ASYNC_ERROR on failure. */
/* With defer_rep the reply's payload stays in rq->rep (the caller sends it
 * as a second iovec, so bulk DTOH data is never copied). Returns 1 then. */
static int finish(rgpu_req *rq, CUresult status, rgpu_buf *out, int need_reply, int defer_rep) {
  rgpu_worker *w = rq->w;
  const rgpu_frame_hdr *h = &rq->hdr;
  rgpu_worker_flush_output(w, out);
  if (need_reply) {
    if (status == CUDA_SUCCESS && defer_rep) {
      rgpu_frame_hdr rh = {RGPU_PROTO_VERSION, RGPU_KIND_REPLY, h->opcode, (uint32_t)rq->rep->len,
                           0, h->seq};
      uint8_t hdr[RGPU_FRAME_HDR_SIZE];
      rgpu_frame_hdr_encode(hdr, &rh);
      rgpu_buf_put(out, hdr, sizeof hdr);
      return 1;
    }
    if (status == CUDA_SUCCESS)
      put_frame(out, RGPU_KIND_REPLY, h->opcode, 0, h->seq, rq->rep->data, rq->rep->len);
    else
      put_frame(out, RGPU_KIND_REPLY, h->opcode, (uint32_t)status, h->seq, rq->msg,
                strlen(rq->msg));
  } else if (status != CUDA_SUCCESS) {
    if (!rq->msg[0])
      snprintf(rq->msg, sizeof rq->msg, "%s failed: %s", rgpu_op_name(h->opcode),
               w->drv_state == 1 ? rgpu_driver_error_name(&w->drv, status) : "error");
    put_async_error(out, status, h->seq, rq->msg);
  }
  return 0;
}

/* Runs one request frame into rq (which the caller provides, so that the
 * serve loop can see an abandoned frame): dispatch through the generated
 * table (rgpu_dispatch.h), then the reply or ASYNC_ERROR.  in: the buffer
 * holding the payload when a handler may take it (rgpu_req.h), else NULL. */
static int handle_frame(rgpu_worker *w, rgpu_req *rq, const rgpu_frame_hdr *h, const void *payload,
                        size_t len, rgpu_buf *in, rgpu_buf *out, int defer_rep, int *deferred) {
  *deferred = 0;
  uint64_t t0_ns = rgpu_metrics_now_ns();
  rgpu_buf_reset(&w->rep_buf);
  int need_reply = h->kind == RGPU_KIND_REQUEST && (h->aux & RGPU_REQ_NEED_REPLY);
  rq->w = w;
  rq->hdr = *h;
  rq->op = h->opcode;
  rq->seq = h->seq;
  rq->need_reply = need_reply;
  rq->rep = &w->rep_buf;
  rq->msg[0] = 0;
  rq->reply_taken = 0;
  rq->in = in;
  rq->abandon = 0;
  rq->graph_node = 0;
  if (h->kind != RGPU_KIND_REQUEST) {
    /* A client never sends replies or events: the stream is confused. */
    rgpu_req_fail(rq, CUDA_ERROR_INVALID_VALUE, "malformed request: frame kind %u from client",
                  (unsigned)h->kind);
    finish(rq, CUDA_ERROR_INVALID_VALUE, out, 0, 0);
    return RGPU_WORKER_CONTINUE;
  }
  if (h->opcode == RGPU_OP_ACK) {
    /* The client's progress: replay bytes below it can go.  Never
     * answered and not a call (the client sends it from its read path). */
    rgpu_msg_ack_req a;
    if (w->hello_done && rgpu_msg_ack_req_decode(payload, len, &a) == 0) {
      pthread_mutex_lock(&w->write_lock);
      rgpu_replay_ack(&w->replay, a.rx_bytes);
      pthread_mutex_unlock(&w->write_lock);
    }
    return RGPU_WORKER_CONTINUE;
  }
  w->calls++;
  if (!w->hello_done && h->opcode == RGPU_OP_HELLO && w->cfg.refuse_new[0]) {
    /* Server full or draining: a reply the client can show, then close. */
    rgpu_req_fail(rq, CUDA_ERROR_DEVICE_UNAVAILABLE, "%s", w->cfg.refuse_new);
    finish(rq, CUDA_ERROR_DEVICE_UNAVAILABLE, out, 1, 0);
    w->end_reason = "refused";
    return RGPU_WORKER_CLOSE;
  }
  if (!w->hello_done && h->opcode != RGPU_OP_HELLO) {
    rgpu_req_fail(rq, CUDA_ERROR_NOT_INITIALIZED,
                  "the first request of a session must be HELLO, got %s",
                  rgpu_op_name(h->opcode) ? rgpu_op_name(h->opcode) : "an unknown opcode");
    finish(rq, CUDA_ERROR_NOT_INITIALIZED, out, 1, 0);
    w->end_reason = "no-hello";
    return RGPU_WORKER_CLOSE;
  }
  /* Small H2D copies batch their staging until any other request comes:
   * it may wait for them, destroy their stream or drop the pools. */
  if (h->opcode != RGPU_OP_MEMCPY_HTOD) rgpu_small_h2d_seal(w);
  const rgpu_dispatch_entry *d = rgpu_dispatch_for(h->opcode);
  unsigned flags = d ? d->flags : 0;
  /* Like the jobs' barrier in those handlers: lane replies still being
   * sent use the memory, the context, the connection. */
  /* GOODBYE may wait for the device (its barrier): bounded from here. */
  if (flags & RGPU_DISPATCH_ENDS) session_ended(w, "goodbye");
  if (flags & RGPU_DISPATCH_BARRIER) rgpu_bulk_barrier(w);
  CUresult status;
  w->req = rq;
  if (!d)
    status = rgpu_req_fail(rq, CUDA_ERROR_NOT_SUPPORTED, "unknown request opcode 0x%04x",
                           (unsigned)h->opcode);
  else
    status = d->run(rq, payload, len);
  w->req = NULL;
  if (rq->abandon) {
    /* Not executed: no reply, not counted (the serve loop sees it). */
    rgpu_buf_reset(&w->rep_buf);
    w->calls--;
    return RGPU_WORKER_ABANDON;
  }
  if (status != CUDA_SUCCESS) rgpu_buf_reset(&w->rep_buf);
  if (w->rep_buf.err) {
    rgpu_buf_reset(&w->rep_buf);
    w->rep_buf.err = 0;
    status = rgpu_req_fail(rq, CUDA_ERROR_OUT_OF_MEMORY, "server out of memory building the reply");
  }
  /* The status of a query is an answer, not an error to latch. */
  if (status == CUDA_ERROR_NOT_READY && (flags & RGPU_DISPATCH_QUERY) && !need_reply)
    status = CUDA_SUCCESS;
  if (status == CUDA_SUCCESS && rq->reply_taken)
    rgpu_worker_flush_output(w, out); /* a background job replies */
  else
    *deferred = finish(rq, status, out, need_reply, defer_rep);
  if (t0_ns)
    rgpu_metrics_request(h->opcode, (uint32_t)status, rgpu_metrics_now_ns() - t0_ns,
                         RGPU_FRAME_HDR_SIZE + len, w->allocs.malloc_bytes);
  if (status) rgpu_metrics_note_status(w->cfg.session_id, h->opcode, (uint32_t)status);
  if ((flags & RGPU_DISPATCH_ENDS) && status == CUDA_SUCCESS) {
    w->end_reason = "goodbye";
    return RGPU_WORKER_CLOSE;
  }
  if (h->opcode == RGPU_OP_HELLO && !w->hello_done) {
    w->end_reason = "hello-refused";
    return RGPU_WORKER_CLOSE;
  }
  return RGPU_WORKER_CONTINUE;
}

int rgpu_worker_handle(rgpu_worker *w, const rgpu_frame_hdr *h, const void *payload, size_t len,
                       rgpu_buf *out) {
  int deferred;
  rgpu_req rq;
  return handle_frame(w, &rq, h, payload, len, NULL, out, 0, &deferred);
}

/* ---- the socket loop ---------------------------------------------------- */

#define RGPU_HELLO_TIMEOUT_MS 10000
/* Returned by the read helpers when the listener has a message for us. */
#define RGPU_WORKER_ECTL (-3001)

/* Frames arrive batched (many small requests in one client write), so the
 * loop reads what is available into one buffer and parses frames out of it:
 * one read call per batch, not two per frame.  A payload larger than half
 * the buffer goes into its own allocation instead, read straight from the
 * socket, which an async H2D copy can then keep without a copy. */
#define RGPU_RDBUF_CAP (256u << 10)

typedef struct {
  uint8_t *p;
  size_t start, end;
} rdbuf;

/* The bytes a frame counts for in the session stream (see serve). */
static uint64_t twin_bytes(const rgpu_frame_hdr *h, const void *payload) {
  if (h->kind == RGPU_KIND_REQUEST && h->opcode == RGPU_OP_MEMCPY_HTOD_BULK) {
    rgpu_msg_memcpy_htod_bulk_req q;
    if (rgpu_msg_memcpy_htod_bulk_req_decode(payload, h->length, &q) == 0)
      return RGPU_FRAME_HDR_SIZE + 16 + q.len;
  }
  if (h->kind == RGPU_KIND_REQUEST && h->opcode == RGPU_OP_MEMCPY_DTOH_BULK &&
      h->length == 28)
    return RGPU_FRAME_HDR_SIZE + 24;
  return RGPU_FRAME_HDR_SIZE + (uint64_t)h->length;
}

static int resumable(const rgpu_worker *w) {
  return w->hello_done && w->replay.enabled;
}

int rgpu_worker_send_locked(rgpu_worker *w, const struct iovec *iov, int n) {
  /* Recorded first: if the write breaks half-way, the client still gets
   * every byte after RESUME. */
  if (rgpu_replay_append(&w->replay, iov, n) && w->replay.enabled)
    RGPU_WARN("session=%llu out of memory in the replay buffer: a resume will fail",
              (unsigned long long)w->cfg.session_id);
  if (w->write_failed || !w->conn) return resumable(w) ? 0 : RGPU_T_ECLOSED;
  int rc = rgpu_conn_writev_all(w->conn, iov, n);
  if (rc) {
    w->write_failed = 1;
    if (resumable(w)) return 0;
  }
  return rc;
}

int rgpu_worker_send_locked_keep(rgpu_worker *w, const struct iovec *iov, int n, int keep,
                                 rgpu_replay_release_fn release, void *ctx, void *buf) {
  /* Written first, recorded after: the replay may release buf at once (no
   * resume, a group beyond its bound); under write_lock nobody can observe
   * the order. */
  int rc = 0;
  if (w->write_failed || !w->conn) {
    rc = resumable(w) ? 0 : RGPU_T_ECLOSED;
  } else if ((rc = rgpu_conn_writev_all(w->conn, iov, n)) != 0) {
    w->write_failed = 1;
    if (resumable(w)) rc = 0;
  }
  if (rgpu_replay_append_ref(&w->replay, iov, n, keep, release, ctx, buf) && w->replay.enabled)
    RGPU_WARN("session=%llu out of memory in the replay buffer: a resume will fail",
              (unsigned long long)w->cfg.session_id);
  return rc;
}

/* What a wait for the connection watches besides it: the control
 * channel, and once the session has a direct endpoint its notify fd too
 * (both in one epoll set: rgpu_conn_wait_input takes one descriptor).
 * -1: nothing. */
static int worker_events_fd(rgpu_worker *w) {
  int dfd = rgpu_quic_direct_notify_fd(w);
  if (dfd < 0) return w->cfg.ctl_fd > 0 ? w->cfg.ctl_fd : -1;
  if (w->events_ep < 0) {
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) return w->cfg.ctl_fd > 0 ? w->cfg.ctl_fd : -1;
    struct epoll_event ev = {.events = EPOLLIN};
    if (w->cfg.ctl_fd > 0) {
      ev.data.fd = w->cfg.ctl_fd;
      epoll_ctl(ep, EPOLL_CTL_ADD, w->cfg.ctl_fd, &ev);
    }
    ev.data.fd = dfd;
    epoll_ctl(ep, EPOLL_CTL_ADD, dfd, &ev);
    w->events_ep = ep;
  }
  return w->events_ep;
}

/* Waits until c has bytes to read (1) or the listener or the direct
 * endpoint has something (RGPU_WORKER_ECTL); 0 on timeout.  timeout_ms < 0:
 * no limit. */
static int wait_input(rgpu_worker *w, rgpu_conn *c, int timeout_ms) {
  int x = worker_events_fd(w);
  int r;
  if (c) {
    r = rgpu_conn_wait_input(c, x, timeout_ms);
  } else {
    if (x < 0) return 1;
    struct pollfd pf = {x, POLLIN, 0};
    int pr;
    while ((pr = poll(&pf, 1, timeout_ms)) < 0 && errno == EINTR) {
    }
    r = pr > 0 ? 2 : pr == 0 ? 0 : 1;
  }
  /* Session bytes first (rgpu_conn_wait_input): a RESUME never interrupts
   * a frame that can be completed. */
  return r == 2 ? RGPU_WORKER_ECTL : r;
}

/* Runs the HOST_CALL_DONE frames among the complete frames not yet
 * handled (rb->start on); the others wait for their turn.  -1 when the
 * frames cannot be parsed ahead (a bad header, a payload the loop would
 * read into a buffer of its own). */
static int scan_ahead(rgpu_worker *w, const rdbuf *rb) {
  size_t pos = rb->start;
  while (rb->end - pos >= RGPU_FRAME_HDR_SIZE) {
    rgpu_frame_hdr h;
    if (rgpu_frame_hdr_decode(rb->p + pos, w->cfg.max_payload, &h)) return -1;
    if (h.length > RGPU_RDBUF_CAP / 2) return -1;
    if (rb->end - pos - RGPU_FRAME_HDR_SIZE < h.length) break; /* not all there yet */
    if (h.kind == RGPU_KIND_REQUEST && h.opcode == RGPU_OP_HOST_CALL_DONE) {
      rgpu_msg_host_call_done_req q;
      if (rgpu_msg_host_call_done_req_decode(rb->p + pos + RGPU_FRAME_HDR_SIZE, h.length, &q) == 0)
        rgpu_host_call_done_early(w, q.token);
    }
    pos += RGPU_FRAME_HDR_SIZE + h.length;
  }
  return 0;
}

int rgpu_worker_read_ahead(rgpu_worker *w, int wake_fd) {
  rdbuf *rb = w->cur_rb;
  rgpu_conn *c = w->conn;
  if (!rb || !c || w->resume.lost) return -1;
  if (scan_ahead(w, rb)) return -1;
  if (rgpu_conn_pending(c) == 0) {
    int r = rgpu_conn_wait_input(c, wake_fd, 1000);
    if (r == 2) {
      uint64_t v;
      ssize_t rd = read(wake_fd, &v, sizeof v);
      (void)rd;
    }
    if (r != 1) return 0; /* a job ended, or a second passed */
  }
  /* Only the free tail: the frames before rb->end stay where they are. */
  if (rb->end >= RGPU_RDBUF_CAP) return -1;
  ssize_t n = rgpu_conn_read_some(c, rb->p + rb->end, RGPU_RDBUF_CAP - rb->end);
  if (n <= 0) return RGPU_T_ECLOSED; /* the loop sees the same when it gets there */
  rb->end += (size_t)n;
  return scan_ahead(w, rb);
}

/* What woke a read is taken here, in the middle of a frame if need be,
 * when it does not change the session's byte stream, so that the read goes
 * on where it was: a bulk stream (RGPU_CTL_STREAM from the listener, or a
 * lane of the session's direct QUIC connection), a DRAIN, or nothing (the
 * direct endpoint's notify fd is raised for lanes already taken).  Returns
 * 1 then; 0 when the serve loop must act (a RESUME, SHUTDOWN, the
 * listener's end, a direct conn to move to): the frame in progress is
 * dropped, which a new connection's client re-sends and an ending session
 * needs no more. */
static int ctl_take_stream(rgpu_worker *w) {
  rgpu_ctl_msg m;
  ssize_t r;
  if (w->direct) {
    rgpu_conn *lane = rgpu_quic_direct_take_lane(w);
    if (lane) {
      rgpu_bulk_adopt(w, lane);
      return 1;
    }
    if (rgpu_quic_direct_conn_waiting(w)) return 0;
  }
  if (w->cfg.ctl_fd <= 0) return 1;
  do {
    r = recv(w->cfg.ctl_fd, &m, sizeof m, MSG_PEEK | MSG_DONTWAIT);
  } while (r < 0 && errno == EINTR);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 1; /* nothing */
  if (r == (ssize_t)sizeof m && m.type == RGPU_CTL_DRAIN && !w->resume.lost) {
    /* Noted; a connected session goes on (handle_ctl does the same). */
    do {
      r = recv(w->cfg.ctl_fd, &m, sizeof m, 0);
    } while (r < 0 && errno == EINTR);
    w->resume.draining = 1;
    return 1;
  }
  if (r != (ssize_t)sizeof m || m.type != RGPU_CTL_STREAM) return 0;
  do {
    r = recv(w->cfg.ctl_fd, &m, sizeof m, 0);
  } while (r < 0 && errno == EINTR);
  rgpu_conn *nc = NULL;
  char err[256];
  if (rgpu_conn_recv(w->cfg.ctl_fd, &nc, err, sizeof err)) {
    RGPU_WARN("session=%llu bulk stream: %s", (unsigned long long)w->cfg.session_id, err);
    return 1;
  }
  rgpu_bulk_adopt(w, nc);
  return 1;
}

/* Whether the session thread polls before a read blocks: where it reads
 * the client's socket itself (tcp, unix).  tls:// and quic:// reach it
 * through the listener's relay, a thread that needs the CPU to bring the
 * bytes: only where there are CPUs to spare (rgpu_spin_spare_cpus; see
 * transport_spins in client/rgpu_client.c). */
static int worker_conn_spins(const rgpu_conn *c) {
  const char *t = rgpu_conn_transport_name(c);
  return !strcmp(t, "tcp") || !strcmp(t, "unix") || rgpu_spin_spare_cpus();
}

/* Awake for the next frame (rgpu_spin.h): spin_us after the last one, and
 * also while a reply that a job thread sends is pending or was sent less
 * than spin_us ago, up to RGPU_SPIN_ANSWER_US in all (the relays' bound for
 * the same wait).  Why: a
 * synchronization whose reply waits for the GPU (a graph replay and its
 * .item(): 0.72 ms) outlasted the plain window, so the client's next
 * request, which follows that reply, woke a sleeping thread: 0.12 ms per
 * step between request and reply beyond the GPU's time on the H200 host
 * (a 64-byte call's whole round trip costs 0.04 ms). */

/* Whether a job's reply is pending, or left less than window_ns ago: the
 * client's next request is due soon (await_frame_awake, direct_stay_awake). */
static int reply_keeps_awake(rgpu_worker *w, uint64_t now, uint64_t window_ns) {
  int pending = __atomic_load_n(&w->jobs.replies_pending, __ATOMIC_RELAXED) > 0;
  uint64_t last = __atomic_load_n(&w->jobs.last_reply_ns, __ATOMIC_RELAXED);
  return pending || last > now || now - last < window_ns; /* last > now: a reply just left */
}

static void await_frame_awake(rgpu_worker *w, rgpu_conn *c) {
  int fd = rgpu_conn_poll_fd(c);
  /* The longer wait only where CPUs are to spare: on softgpu with two
   * CPUs it would take one from the kernels the reply waits for. */
  if (!rgpu_spin_spare_cpus()) {
    rgpu_spin_readable(fd, w->spin_us);
    return;
  }
  uint64_t cap = rgpu_clock_ns() + (uint64_t)RGPU_SPIN_ANSWER_US * RGPU_NS_PER_US;
  uint64_t window = (uint64_t)w->spin_us * RGPU_NS_PER_US;
  for (;;) {
    if (rgpu_spin_readable(fd, w->spin_us)) return;
    uint64_t now = rgpu_clock_ns();
    if (now >= cap || !reply_keeps_awake(w, now, window)) return;
  }
}

/* A direct QUIC conn (rgpu_quic_direct.h): its waiting thread polls the
 * socket itself, for as long as the conn's poll budget says; the budget
 * follows await_frame_awake's rule (awake longer while a job's reply is
 * pending or just left).  Over quic on the H200 host a graphed training
 * step cost the same 0.91 ms through the direct conn as through the relay
 * while the budget stayed at the plain 200 us. */
static void direct_stay_awake(rgpu_worker *w, rgpu_conn *c) {
  unsigned us = w->spin_us_direct;
  if (us && rgpu_spin_spare_cpus() &&
      reply_keeps_awake(w, rgpu_clock_ns(), (uint64_t)us * RGPU_NS_PER_US))
    us = RGPU_SPIN_ANSWER_US;
  if (us != w->direct_poll_us) {
    rgpu_conn_set_poll_us(c, us);
    w->direct_poll_us = us;
  }
}

static ssize_t read_some_ctl(rgpu_worker *w, rgpu_conn *c, void *buf, size_t len) {
  /* A while awake first; not before HELLO, where a peer may be anybody. */
  if (w->spin_us && w->read_deadline <= 0 && !rgpu_conn_pending(c)) await_frame_awake(w, c);
  if (w->conn_direct && c == w->conn) direct_stay_awake(w, c);
  while (w->cfg.ctl_fd > 0 || w->read_deadline > 0) {
    int timeout_ms = -1;
    if (w->read_deadline > 0) {
      /* Before HELLO: a peer that sends part of a frame and then nothing
       * must not keep a worker (slowloris). */
      double left = w->read_deadline - rgpu_clock_s();
      if (left <= 0) return RGPU_T_ETIMEDOUT;
      timeout_ms = (int)(left * 1000.0) + 1;
    }
    int r = wait_input(w, c, timeout_ms);
    if (r == 0) return RGPU_T_ETIMEDOUT;
    if (r != RGPU_WORKER_ECTL) break;
    if (!ctl_take_stream(w)) return RGPU_WORKER_ECTL;
  }
  return rgpu_conn_read_some(c, buf, len);
}

/* Makes at least `need` bytes available at p+start; returns 0, the
 * transport's error (RGPU_T_ECLOSED on EOF) or RGPU_WORKER_ECTL. */
/* 1 if a whole frame (header and payload) waits in b: handling it needs
 * no read. */
static int frame_buffered(const rgpu_worker *w, const rdbuf *b) {
  size_t have = b->end - b->start;
  rgpu_frame_hdr h;
  if (have < RGPU_FRAME_HDR_SIZE) return 0;
  if (rgpu_frame_hdr_decode(b->p + b->start, w->cfg.max_payload, &h)) return 0;
  return have - RGPU_FRAME_HDR_SIZE >= h.length;
}

static int rdbuf_fill(rgpu_worker *w, rgpu_conn *c, rdbuf *b, size_t need) {
  while (b->end - b->start < need) {
    if (b->start == b->end) b->start = b->end = 0;
    if (RGPU_RDBUF_CAP - b->end < need - (b->end - b->start)) {
      memmove(b->p, b->p + b->start, b->end - b->start);
      b->end -= b->start;
      b->start = 0;
    }
    ssize_t n = read_some_ctl(w, c, b->p + b->end, RGPU_RDBUF_CAP - b->end);
    if (n == 0) return RGPU_T_ECLOSED;
    if (n < 0) return (int)n;
    b->end += (size_t)n;
  }
  return 0;
}

static int read_exact_ctl(rgpu_worker *w, rgpu_conn *c, uint8_t *p, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read_some_ctl(w, c, p + got, n - got);
    if (r == 0) return RGPU_T_ECLOSED;
    if (r < 0) return (int)r;
    got += (size_t)r;
  }
  return 0;
}

static int ctl_send(rgpu_worker *w, const rgpu_ctl_msg *m) {
  for (;;) {
    ssize_t r = send(w->cfg.ctl_fd, m, sizeof *m, MSG_NOSIGNAL);
    if (r == (ssize_t)sizeof *m) return 0;
    if (r < 0 && errno == EINTR) continue;
    return -1;
  }
}

/* 1 and *m, 0 when the listener is gone, -1 on a malformed message. */
static int ctl_recv(rgpu_worker *w, rgpu_ctl_msg *m) {
  for (;;) {
    ssize_t r = recv(w->cfg.ctl_fd, m, sizeof *m, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 || (r < 0 && errno != EAGAIN)) return 0;
    if (r != (ssize_t)sizeof *m) return -1;
    m->text[sizeof m->text - 1] = 0;
    return 1;
  }
}

int rgpu_worker_write_reply_oob(rgpu_conn *c, uint16_t op, uint32_t status, const void *p,
                                size_t n, const void *tail, size_t tail_len) {
  rgpu_frame_hdr h = {RGPU_PROTO_VERSION, RGPU_KIND_REPLY, op, (uint32_t)n, status, 0};
  uint8_t hdr[RGPU_FRAME_HDR_SIZE];
  rgpu_frame_hdr_encode(hdr, &h);
  struct iovec iov[3] = {{hdr, sizeof hdr}, {(void *)p, n}, {(void *)tail, tail_len}};
  return rgpu_conn_writev_all(c, iov, tail_len ? 3 : 2);
}

/* The connection broke while the session can be resumed: keep everything,
 * wait for the client (rgpu_worker_serve's loop calls await_resume). */
static void lose_conn(rgpu_worker *w, const char *why) {
  pthread_mutex_lock(&w->write_lock);
  w->write_failed = 1;
  pthread_mutex_unlock(&w->write_lock);
  w->resume.lost = 1;
  w->resume.lost_at = rgpu_clock_s();
  RGPU_INFO("session=%llu peer=%s event=disconnected reason=%s grace_s=%d tx_bytes=%llu "
            "rx_bytes=%llu",
            (unsigned long long)w->cfg.session_id, w->cfg.peer, why, w->cfg.grace_s,
            (unsigned long long)w->replay.total, (unsigned long long)w->replay.rx_consumed);
}

/* The SHUTDOWN event, in the session stream (a client that resumes later
 * still gets it). */
static void send_shutdown(rgpu_worker *w, const char *text) {
  rgpu_buf b, f;
  rgpu_buf_init(&b);
  rgpu_buf_init(&f);
  rgpu_msg_shutdown_evt ev = {.message = {text, strlen(text)}};
  rgpu_msg_shutdown_evt_encode(&b, &ev);
  put_frame(&f, RGPU_KIND_EVENT, RGPU_EVT_SHUTDOWN, 0, 0, b.data, b.len);
  struct iovec iov = {f.data, f.len};
  if (!f.err) rgpu_worker_send(w, &iov, 1);
  rgpu_buf_free(&b);
  rgpu_buf_free(&f);
}

/* Takes over connection nc from a client that has received rx bytes:
 * RESUME's reply, then everything it missed.  direct: nc came from the
 * session's own QUIC endpoint (rgpu_quic_direct.h), a move rather than a
 * resume after a failure.  Returns 0 (resumed, or lost again if the new
 * connection broke at once) or 1 when the session must end (the bytes it
 * needs are gone). */
static int adopt_conn(rgpu_worker *w, rgpu_conn *nc, uint64_t rx, rdbuf *rb, int direct) {
  /* The lanes belonged to the old QUIC connection: the client re-sends
   * what they carried inline, and opens new ones. */
  rgpu_bulk_reset(w);
  pthread_mutex_lock(&w->write_lock);
  const uint8_t *p = NULL;
  size_t n = 0;
  if (rgpu_replay_from(&w->replay, rx, &p, &n)) {
    char msg[256];
    int m = snprintf(msg, sizeof msg,
                     "cannot resume session %llu: the client has %llu bytes, the server keeps "
                     "%llu..%llu",
                     (unsigned long long)w->cfg.session_id, (unsigned long long)rx,
                     (unsigned long long)w->replay.base, (unsigned long long)w->replay.total);
    rgpu_worker_write_reply_oob(nc, RGPU_OP_RESUME, CUDA_ERROR_DEVICE_UNAVAILABLE, msg, (size_t)m, NULL, 0);
    pthread_mutex_unlock(&w->write_lock);
    RGPU_WARN("session=%llu event=resume-failed %s", (unsigned long long)w->cfg.session_id, msg);
    rgpu_conn_shutdown(nc);
    rgpu_conn_close(nc);
    w->end_reason = "replay-lost";
    return 1;
  }
  rgpu_conn *old = w->conn;
  w->conn = nc;
  w->write_failed = 0;
  w->conn_direct = direct;
  if (direct) {
    /* Its waiting thread reads the socket itself (rgpu_conn_wait_input,
     * direct_stay_awake): the poll fd would only say what another thread
     * has read. */
    w->spin_us = 0;
    w->spin_us_direct = rgpu_spin_budget_us(200);
    w->direct_poll_us = w->spin_us_direct;
    rgpu_conn_set_poll_us(nc, w->direct_poll_us);
    rgpu_quic_direct_watch(w, nc);
  } else {
    w->spin_us = w->spin_us_relay;
  }
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_resume_rep rep = {.session_id = w->cfg.session_id,
                             .rx_bytes = w->replay.rx_consumed,
                             .tx_bytes = w->replay.total,
                             .quic_direct_port =
                                 direct ? 0 : rgpu_quic_direct_offer(w, w->client_caps)};
  rgpu_msg_resume_rep_encode(&b, &rep);
  int rc = rgpu_worker_write_reply_oob(nc, RGPU_OP_RESUME, 0, b.data, b.len, p, n);
  rgpu_buf_free(&b);
  if (rc) w->write_failed = 1;
  if (!direct) w->replay.resumes++;
  w->replay.replayed_bytes += n;
  pthread_mutex_unlock(&w->write_lock);
  /* Whatever was half-read from the old connection is re-sent by the
   * client (it starts at rx_consumed, a frame boundary). */
  rb->start = rb->end = 0;
  /* serve()'s caller closes the original conn; any other is ours.  Ended
   * first either way: inert at once, and a QUIC conn then closes without
   * waiting for its unacknowledged bytes (the client has moved on). */
  if (old) rgpu_conn_abort(old);
  if (old && old != w->resume.orig_conn) rgpu_conn_close(old);
  /* The break may not have been noticed here (a dead link looks idle). */
  if (direct)
    RGPU_INFO("session=%llu peer=%s event=quic-direct replayed_bytes=%zu rx_bytes=%llu",
              (unsigned long long)w->cfg.session_id, rgpu_conn_peer(nc), n,
              (unsigned long long)w->replay.rx_consumed);
  else
    RGPU_INFO("session=%llu peer=%s event=resume outage_s=%.3f replayed_bytes=%zu rx_bytes=%llu "
              "resumes=%llu",
              (unsigned long long)w->cfg.session_id, rgpu_conn_peer(nc),
              w->resume.lost ? rgpu_clock_s() - w->resume.lost_at : 0.0, n,
              (unsigned long long)w->replay.rx_consumed, (unsigned long long)w->replay.resumes);
  w->resume.lost = rc != 0;
  if (w->resume.lost) w->resume.lost_at = rgpu_clock_s();
  return 0;
}

/* A message from the listener, or a conn from the session's own QUIC
 * endpoint: 0 to go on serving, 1 to end the session.  Called when one of
 * them polled readable (worker_events_fd); reads nothing that is not
 * there. */
static int handle_ctl(rgpu_worker *w, rdbuf *rb) {
  if (w->direct) {
    rgpu_conn *dc;
    uint64_t drx;
    int moved = rgpu_quic_direct_take(w, &dc, &drx);
    rgpu_conn *lane;
    while ((lane = rgpu_quic_direct_take_lane(w))) rgpu_bulk_adopt(w, lane);
    if (moved) return adopt_conn(w, dc, drx, rb, 1);
    struct pollfd pf = {w->cfg.ctl_fd, POLLIN, 0};
    if (w->cfg.ctl_fd <= 0 || poll(&pf, 1, 0) <= 0) return 0;
  }
  rgpu_ctl_msg m;
  int r = ctl_recv(w, &m);
  if (r == 0) {
    /* The listener died: nobody can route a resume to us any more. */
    w->end_reason = "listener-gone";
    return 1;
  }
  if (r < 0) return 0;
  if (m.type == RGPU_CTL_SHUTDOWN) {
    RGPU_INFO("session=%llu event=shutdown reason=\"%s\"", (unsigned long long)w->cfg.session_id,
              m.text);
    send_shutdown(w, m.text[0] ? m.text : "the server is shutting down");
    w->end_reason = "shutdown";
    return 1;
  }
  if (m.type == RGPU_CTL_DRAIN) {
    w->resume.draining = 1;
    if (w->resume.lost) {
      w->end_reason = "drain";
      return 1;
    }
    return 0;
  }
  if (m.type == RGPU_CTL_STREAM) {
    /* A bulk stream of this session's QUIC connection (rgpu_bulk.h). */
    rgpu_conn *nc = NULL;
    char err[256];
    if (rgpu_conn_recv(w->cfg.ctl_fd, &nc, err, sizeof err)) {
      RGPU_WARN("session=%llu bulk stream: %s", (unsigned long long)w->cfg.session_id, err);
      return 0;
    }
    rgpu_bulk_adopt(w, nc);
    return 0;
  }
  if (m.type == RGPU_CTL_RESUME) {
    rgpu_conn *nc = NULL;
    char err[256];
    if (rgpu_conn_recv(w->cfg.ctl_fd, &nc, err, sizeof err)) {
      RGPU_WARN("session=%llu resume: %s", (unsigned long long)w->cfg.session_id, err);
      return 0;
    }
    if (!resumable(w)) {
      rgpu_worker_write_reply_oob(nc, RGPU_OP_RESUME, CUDA_ERROR_DEVICE_UNAVAILABLE, "session not resumable",
                      21, NULL, 0);
      rgpu_conn_close(nc);
      return 0;
    }
    return adopt_conn(w, nc, m.rx_bytes, rb, 0);
  }
  return 0;
}

int rgpu_worker_resumable(const rgpu_worker *w) { return resumable(w); }

int rgpu_worker_bulk_wait(rgpu_req *rq, int (*ready)(rgpu_worker *w, void *arg), void *arg) {
  rgpu_worker *w = rq->w;
  double idle_since = rgpu_clock_s();
  for (;;) {
    int r = ready(w, arg);
    if (r > 0) return 0;
    if (r < 0) return RGPU_BULK_WAIT_GONE;
    if (rgpu_clock_s() - idle_since > RGPU_BULK_WAIT_IDLE_MS / 1000.0) {
      RGPU_WARN("session=%llu bulk data did not arrive within %d s",
                (unsigned long long)w->cfg.session_id, RGPU_BULK_WAIT_IDLE_MS / 1000);
      return RGPU_BULK_WAIT_GONE;
    }
    struct pollfd pf[3];
    int n = 0, ni = -1, ki = -1, ci = -1;
    int nfd = rgpu_bulk_notify_fd(w);
    if (nfd >= 0) {
      pf[n] = (struct pollfd){nfd, POLLIN, 0};
      ni = n++;
    }
    int xfd = worker_events_fd(w); /* the listener; the session's own QUIC endpoint */
    if (xfd >= 0) {
      pf[n] = (struct pollfd){xfd, POLLIN, 0};
      ki = n++;
    }
    if (w->conn && !w->resume.lost) {
      /* Only a hang-up: stream 0 may well hold later requests. */
      pf[n] = (struct pollfd){rgpu_conn_poll_fd(w->conn), POLLRDHUP, 0};
      ci = n++;
    }
    int pr = poll(pf, (nfds_t)n, 200);
    if (pr < 0 && errno != EINTR) return RGPU_BULK_WAIT_GONE;
    if (pr <= 0) continue;
    idle_since = rgpu_clock_s();
    if (ni >= 0 && pf[ni].revents) rgpu_bulk_notify_drain(w);
    if (ki >= 0 && pf[ki].revents) {
      rgpu_conn *before = w->conn;
      if (handle_ctl(w, (rdbuf *)w->cur_rb)) {
        w->bulk_end = 1;
        rgpu_req_abandon(rq, 0);
        return RGPU_BULK_WAIT_ABANDON;
      }
      if (w->conn != before) {
        /* Resumed on a new connection: the client re-sends this frame. */
        rgpu_req_abandon(rq, 0);
        return RGPU_BULK_WAIT_ABANDON;
      }
    }
    if (ci >= 0 && (pf[ci].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
      if (ready(w, arg) > 0) return 0;
      rgpu_req_abandon(rq, 0);
      return RGPU_BULK_WAIT_ABANDON;
    }
  }
}

/* Disconnected: waits for RESUME until the grace period is over. */
static int await_resume(rgpu_worker *w, rdbuf *rb) {
  for (;;) {
    if (w->resume.draining) {
      /* The server is stopping: nobody should wait for this client. */
      w->end_reason = "drain";
      return 1;
    }
    double left = w->resume.lost_at + (double)w->cfg.grace_s - rgpu_clock_s();
    if (left <= 0) {
      RGPU_INFO("session=%llu event=grace-expired grace_s=%d: freeing the session",
                (unsigned long long)w->cfg.session_id, w->cfg.grace_s);
      w->end_reason = "grace-expired";
      return 1;
    }
    int r = wait_input(w, NULL, (int)(left * 1000.0) + 1);
    if (r == RGPU_WORKER_ECTL) return handle_ctl(w, rb);
  }
}

/* A fresh connection whose first frame is RESUME: pass it to the worker
 * that owns the session (through the listener), or tell the client the
 * session is gone.  Returns serve()'s result. */
static int resume_handoff(rgpu_worker *w, rgpu_conn *c, const void *payload, size_t len) {
  rgpu_msg_resume_req q;
  const char *why = NULL;
  char whybuf[160];
  if (rgpu_msg_resume_req_decode(payload, len, &q) != 0 || q.session_token.len != 32)
    why = "malformed RESUME";
  else if (w->cfg.ctl_fd <= 0 || w->cfg.grace_s <= 0)
    why = "this server does not resume sessions (--grace-s 0)";
  if (!why) {
    rgpu_ctl_msg m = {.type = RGPU_CTL_RESUME_REQ, .rx_bytes = q.rx_bytes};
    memcpy(m.token, q.session_token.data, 32);
    char err[256];
    if (ctl_send(w, &m) || rgpu_conn_send(w->cfg.ctl_fd, c, err, sizeof err)) {
      why = "the server could not route the connection";
    } else {
      rgpu_ctl_msg a = {0};
      struct pollfd pf = {w->cfg.ctl_fd, POLLIN, 0};
      int pr, got = 0;
      /* Skip a DRAIN (or anything else) that overtook the answer. */
      for (int tries = 0; tries < 4 && !got; tries++) {
        while ((pr = poll(&pf, 1, 5000)) < 0 && errno == EINTR) {
        }
        if (pr <= 0 || ctl_recv(w, &a) != 1) break;
        got = a.type == RGPU_CTL_RESUME_ANS;
      }
      if (!got) {
        why = "the server did not answer the resume";
      } else if (!a.ok) {
        snprintf(whybuf, sizeof whybuf, "%s",
                 a.text[0] ? a.text
                           : "the session is gone (its grace period ended or the server "
                             "restarted)");
        why = whybuf;
      } else {
        w->resume.handed_off = 1;
        w->end_reason = "resume-handoff";
        RGPU_DEBUG("peer=%s event=resume-handoff session=%llu", w->cfg.peer,
                   (unsigned long long)a.session_id);
        return 0;
      }
    }
  }
  RGPU_INFO("peer=%s event=resume-refused reason=\"%s\"", w->cfg.peer, why);
  rgpu_worker_write_reply_oob(c, RGPU_OP_RESUME, CUDA_ERROR_DEVICE_UNAVAILABLE, why, strlen(why), NULL, 0);
  w->end_reason = "resume-refused";
  return 0;
}

/* After REGISTER: the listener's ADMIT (1), or a refusal with its text in
 * why (0).  A DRAIN that overtakes it is noted; no answer in time is a
 * refusal. */
static int await_admission(rgpu_worker *w, char *why, size_t cap) {
  snprintf(why, cap, "the server did not admit the session");
  for (int tries = 0; tries < 8; tries++) {
    struct pollfd pf = {w->cfg.ctl_fd, POLLIN, 0};
    int pr;
    while ((pr = poll(&pf, 1, 5000)) < 0 && errno == EINTR) {
    }
    rgpu_ctl_msg a;
    if (pr <= 0 || ctl_recv(w, &a) != 1) return 0;
    if (a.type == RGPU_CTL_DRAIN) {
      w->resume.draining = 1;
      continue;
    }
    if (a.type != RGPU_CTL_ADMIT) continue;
    if (a.ok) return 1;
    snprintf(why, cap, "%s", a.text[0] ? a.text : "server full; try again later");
    return 0;
  }
  return 0;
}

int rgpu_worker_serve(rgpu_worker *w, rgpu_conn *c) {
  rgpu_buf in, out;
  rgpu_buf_init(&in);
  rgpu_buf_init(&out);
  rdbuf rb = {malloc(RGPU_RDBUF_CAP), 0, 0};
  int result = 0;
  if (!rb.p) {
    w->end_reason = "oom";
    return 1;
  }
  w->conn = c;
  w->resume.orig_conn = c;
  if (!worker_conn_spins(c)) w->spin_us = 0;
  w->spin_us_relay = w->spin_us;
  w->cur_rb = &rb;
  int hello_s = w->cfg.hello_timeout_s > 0 ? w->cfg.hello_timeout_s : RGPU_HELLO_TIMEOUT_MS / 1000;
  double hello_deadline = rgpu_clock_s() + hello_s;
  for (;;) {
    /* Before the loop may block (reading, or waiting for a resume): the
     * small copies handled so far get their marker and release job now,
     * not whenever the client sends its next request. */
    if (!frame_buffered(w, &rb)) rgpu_small_h2d_seal(w);
    if (w->resume.lost) {
      if (await_resume(w, &rb)) break;
      continue;
    }
    rgpu_conn *cur = w->conn;
    rgpu_frame_hdr h;
    /* A connection that never says HELLO must not hold a worker forever:
     * the whole first frame (HELLO or RESUME), not only its first byte,
     * must arrive in time (read_some_ctl). */
    w->read_deadline = w->hello_done ? 0 : hello_deadline;
    int rc = rdbuf_fill(w, cur, &rb, RGPU_FRAME_HDR_SIZE);
    if (rc == 0) {
      rc = rgpu_frame_hdr_decode(rb.p + rb.start, w->cfg.max_payload, &h);
      if (rc == 0) rb.start += RGPU_FRAME_HDR_SIZE;
    }
    const uint8_t *payload = NULL;
    rgpu_buf *frame_in = NULL; /* set when the payload has a buffer of its own */
    rgpu_staging_frame_buffer_done(w, &in);
    if (rc == 0 && h.length <= RGPU_RDBUF_CAP / 2) {
      rc = rdbuf_fill(w, cur, &rb, h.length);
      payload = rb.p + rb.start;
      if (rc == 0) rb.start += h.length;
    } else if (rc == 0) {
      rgpu_buf_reset(&in);
      /* Pinned pool memory when it fits: an H2D handler keeps the buffer
       * as its copy's source without pinning it per copy. */
      if (!rgpu_staging_frame_buffer(w, &in, h.length) && rgpu_buf_reserve(&in, h.length)) {
        rc = RGPU_PROTO_ENOMEM;
      } else {
        size_t have = rb.end - rb.start;
        if (have > h.length) have = h.length;
        memcpy(in.data, rb.p + rb.start, have);
        rb.start += have;
        rc = have < h.length ? read_exact_ctl(w, cur, in.data + have, h.length - have) : 0;
        in.len = h.length;
        payload = in.data;
        frame_in = &in;
      }
    }
    if (rc == RGPU_WORKER_ECTL) {
      if (handle_ctl(w, &rb)) break;
      continue;
    }
    /* Transport errors (RGPU_T_E*, above the protocol's -1000s) are a
     * broken connection, which a resumable session outlives. */
    if (rc < 0 && rc > -1000) {
      if (resumable(w)) {
        lose_conn(w, rc == RGPU_T_ECLOSED ? "eof" : "read-error");
        continue;
      }
    }
    if (rc == RGPU_T_ECLOSED) {
      w->end_reason = "eof";
      break;
    }
    if (rc == RGPU_T_ETIMEDOUT && !w->hello_done) {
      RGPU_WARN("session=%llu peer=%s closing: no complete HELLO within %d s",
                (unsigned long long)w->cfg.session_id, w->cfg.peer, hello_s);
      w->end_reason = "hello-timeout";
      result = 1;
      break;
    }
    if (rc) {
      /* After a bad header nothing later in the stream can be trusted. */
      if (rc <= RGPU_PROTO_ETRUNC && rc >= RGPU_PROTO_EINVAL) {
        RGPU_WARN("session=%llu peer=%s closing: malformed frame header: %s",
                  (unsigned long long)w->cfg.session_id, w->cfg.peer, rgpu_proto_strerror(rc));
        w->end_reason = "bad-frame";
      } else {
        RGPU_INFO("session=%llu peer=%s read failed (%d)", (unsigned long long)w->cfg.session_id,
                  w->cfg.peer, rc);
        w->end_reason = "read-error";
      }
      result = 1;
      break;
    }
    if (!w->hello_done && h.kind == RGPU_KIND_REQUEST && h.opcode == RGPU_OP_RESUME) {
      result = resume_handoff(w, cur, payload, h.length);
      break;
    }
    rgpu_buf_reset(&out);
    int deferred = 0;
    int was_hello = w->hello_done;
    rgpu_req rq;
    int action = handle_frame(w, &rq, &h, payload, h.length, frame_in, &out, 1, &deferred);
    if (action == RGPU_WORKER_ABANDON) {
      /* A bulk request that could not run: not counted, so the client
       * re-sends it (as its inline twin) after a resume. */
      int brk = rq.abandon == 2;
      if (w->bulk_end) break;
      if (w->conn != cur) continue; /* resumed meanwhile: rb was reset */
      if (brk && w->conn) {
        /* The connection is fine but the bytes are gone: cut it so that
         * the client resumes and sends the copy inline. */
        rgpu_conn_abort(w->conn);
      }
      if (resumable(w)) {
        rb.start = rb.end = 0;
        lose_conn(w, brk ? "bulk-lost" : "eof");
        continue;
      }
      w->end_reason = "bulk-lost";
      result = 1;
      break;
    }
    /* Counted once executed, in wire order: RESUME re-sends from here.  A
     * bulk request counts as its inline twin, which is what the client
     * keeps for a re-send (rgpu_messages.def). */
    if (h.opcode != RGPU_OP_ACK) rgpu_replay_consumed(&w->replay, twin_bytes(&h, payload));
    if (!was_hello && w->hello_done && w->cfg.ctl_fd > 0) {
      /* Before the reply leaves: the listener must know the token by the
       * time the client could present it. */
      rgpu_ctl_msg m = {.type = RGPU_CTL_REGISTER, .session_id = w->cfg.session_id};
      memcpy(m.token, w->session_token, sizeof m.token);
      snprintf(m.text, sizeof m.text, "%s", w->job_token);
      ctl_send(w, &m);
      /* A session counts against --max-sessions only from here on (workers
       * before authentication have a bound of their own): the listener
       * admits it or not. */
      char why[sizeof m.text];
      if (w->cfg.max_sessions && !await_admission(w, why, sizeof why)) {
        RGPU_INFO("session=%llu peer=%s event=refused reason=\"%s\"",
                  (unsigned long long)w->cfg.session_id, w->cfg.peer, why);
        rgpu_buf_reset(&out);
        put_frame(&out, RGPU_KIND_REPLY, h.opcode, CUDA_ERROR_DEVICE_UNAVAILABLE, h.seq, why,
                  strlen(why));
        deferred = 0;
        action = RGPU_WORKER_CLOSE;
        w->hello_done = 0; /* the session never began */
        w->end_reason = "refused";
      }
    }
    if (out.err) {
      RGPU_ERROR("session=%llu out of memory building a reply", (unsigned long long)w->cfg.session_id);
      w->end_reason = "oom";
      result = 1;
      break;
    }
    if (out.len) {
      struct iovec iov[2] = {{out.data, out.len}, {w->rep_buf.data, w->rep_buf.len}};
      if (rgpu_worker_send(w, iov, deferred && w->rep_buf.len ? 2 : 1)) {
        w->end_reason = "write-error";
        result = 1;
        break;
      }
    }
    if (action == RGPU_WORKER_CLOSE) {
      if (!w->hello_done) result = 1;
      break;
    }
    if (w->write_failed && resumable(w)) lose_conn(w, "write-error");
  }
  /* What follows, and rgpu_worker_free, wait for the device: bounded. */
  session_ended(w, w->end_reason);
  /* Host functions waiting for a client that is gone return now; jobs
   * write to c: none may outlive this call. */
  rgpu_host_calls_shutdown(w);
  rgpu_jobs_barrier(w, NULL);
  rgpu_bulk_shutdown(w);
  w->cur_rb = NULL;
  if (w->conn && w->conn != c) {
    if (!w->write_failed) rgpu_conn_shutdown(w->conn);
    rgpu_conn_close(w->conn);
  }
  w->conn = NULL;
  /* After the direct conns are closed: their I/O threads call into it. */
  rgpu_quic_direct_free(w);
  if (w->events_ep >= 0) {
    close(w->events_ep);
    w->events_ep = -1;
  }
  free(rb.p);
  rgpu_staging_frame_buffer_done(w, &in);
  rgpu_buf_free(&in);
  rgpu_buf_free(&out);
  return result;
}
