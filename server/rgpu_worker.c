/* The session loop: frame in, frames out, strictly in arrival order. */
#define _GNU_SOURCE /* POLLRDHUP */
#include "rgpu_bulk.h"
#include "rgpu_graph.h"
#include "rgpu_worker_internal.h"

#include <errno.h>
#include <malloc.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "rgpu_bulk_proto.h"
#include "rgpu_clock.h"
#include "rgpu_frame_io.h"
#include "rgpu_log.h"
#include "rgpu_metrics.h"

/* handle_frame: the frame was left unexecuted (a bulk wait, rgpu_bulk.h). */
#define RGPU_WORKER_ABANDON 2

const char *rgpu_device_kind_name(rgpu_device_kind k) {
  switch (k) {
    case RGPU_DEVICE_CUDA: return "cuda";
    case RGPU_DEVICE_SOFTGPU: return "softgpu";
    default: return "auto";
  }
}

CUresult rgpu_worker_fail(rgpu_worker *w, CUresult status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->msg, sizeof w->msg, fmt, ap);
  va_end(ap);
  return status;
}

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
  rgpu_alloc_table_init(&w->allocs);
  rgpu_handle_map_init(&w->streams);
  rgpu_handle_map_init(&w->events);
  rgpu_handle_map_init(&w->modules);
  rgpu_buf_init(&w->rep);
  rgpu_buf_init(&w->pending_output);
  pthread_mutex_init(&w->out_lock, NULL);
  pthread_mutex_init(&w->write_lock, NULL);
  pthread_mutex_init(&w->jobs_lock, NULL);
  pthread_cond_init(&w->jobs_cond, NULL);
  w->end_reason = "eof";
  rgpu_replay_init(&w->replay, w->cfg.grace_s > 0 && w->cfg.ctl_fd > 0, w->cfg.replay_bytes);
  return w;
}

/* ---- driver and contexts ------------------------------------------------ */

static void print_handler(void *ctx, const char *text, size_t len) {
  rgpu_worker *w = ctx;
  pthread_mutex_lock(&w->out_lock);
  if (w->pending_output.len + len > RGPU_OUTPUT_MAX)
    w->output_dropped += len;
  else
    rgpu_buf_put(&w->pending_output, text, len);
  pthread_mutex_unlock(&w->out_lock);
}

static int try_load(rgpu_worker *w, const char *path, char *err, size_t errlen) {
  if (rgpu_driver_load(&w->drv, path, err, errlen)) return -1;
  CUresult r = w->drv.cuInit(0);
  if (r != CUDA_SUCCESS) {
    snprintf(err, errlen, "CUDA driver %s: cuInit failed: %s", path,
             rgpu_driver_error_name(&w->drv, r));
    return -1;
  }
  int n = 0;
  r = w->drv.cuDeviceGetCount(&n);
  if (r != CUDA_SUCCESS || n < 1) {
    snprintf(err, errlen, "CUDA driver %s: no device (%s)", path,
             r != CUDA_SUCCESS ? rgpu_driver_error_name(&w->drv, r) : "count 0");
    return -1;
  }
  w->device_count = n > RGPU_MAX_DEVICES ? RGPU_MAX_DEVICES : n;
  return 0;
}

CUresult rgpu_worker_ensure_driver(rgpu_worker *w) {
  if (w->drv_state == 1) return CUDA_SUCCESS;
  if (w->drv_state < 0)
    return rgpu_worker_fail(w, CUDA_ERROR_NO_DEVICE, "%s", w->drv_err);
  char err[512] = "";
  int ok = -1;
  if (w->cfg.device == RGPU_DEVICE_CUDA || w->cfg.device == RGPU_DEVICE_AUTO)
    ok = try_load(w, "libcuda.so.1", err, sizeof err);
  if (ok && w->cfg.device != RGPU_DEVICE_CUDA) {
    char err2[512] = "";
    ok = try_load(w, w->cfg.softgpu_lib, err2, sizeof err2);
    if (ok) {
      if (w->cfg.device == RGPU_DEVICE_AUTO)
        snprintf(w->drv_err, sizeof w->drv_err, "no usable driver: %s; %s", err, err2);
      else
        snprintf(w->drv_err, sizeof w->drv_err, "%s", err2);
    }
  } else if (ok) {
    snprintf(w->drv_err, sizeof w->drv_err, "%s", err);
  }
  if (ok) {
    w->drv_state = -1;
    RGPU_ERROR("session=%llu %s", (unsigned long long)w->cfg.session_id, w->drv_err);
    return rgpu_worker_fail(w, CUDA_ERROR_NO_DEVICE, "%s", w->drv_err);
  }
  w->drv_state = 1;
  if (w->drv.sgSetPrintHandler && (w->caps & RGPU_CAP_OUTPUT))
    w->drv.sgSetPrintHandler(print_handler, w);
  RGPU_INFO("session=%llu driver=%s devices=%d%s", (unsigned long long)w->cfg.session_id,
            w->drv.path, w->device_count, w->drv.is_softgpu ? " (softgpu)" : "");
  return CUDA_SUCCESS;
}

CUresult rgpu_worker_set_device(rgpu_worker *w, int dev) {
  CUresult r = rgpu_worker_ensure_driver(w);
  if (r) return r;
  if (dev < 0 || dev >= w->device_count)
    return rgpu_worker_fail(w, CUDA_ERROR_INVALID_DEVICE, "device %d does not exist (%d device%s)",
                            dev, w->device_count, w->device_count == 1 ? "" : "s");
  if (!w->ctx[dev]) {
    CUdevice d;
    r = w->drv.cuDeviceGet(&d, dev);
    if (r == CUDA_SUCCESS) r = w->drv.cuDevicePrimaryCtxRetain(&w->ctx[dev], d);
    if (r != CUDA_SUCCESS) {
      w->ctx[dev] = NULL;
      return rgpu_worker_fail(w, r, "cannot retain the primary context of device %d: %s", dev,
                              rgpu_driver_error_name(&w->drv, r));
    }
  }
  if (w->cur_dev != dev) {
    r = w->drv.cuCtxSetCurrent(w->ctx[dev]);
    if (r != CUDA_SUCCESS)
      return rgpu_worker_fail(w, r, "cannot make device %d current: %s", dev,
                              rgpu_driver_error_name(&w->drv, r));
    w->cur_dev = dev;
  }
  return CUDA_SUCCESS;
}

CUresult rgpu_worker_ensure_ctx(rgpu_worker *w) {
  if (w->drv_state == 1 && w->cur_dev >= 0) return CUDA_SUCCESS;
  return rgpu_worker_set_device(w, w->cur_dev >= 0 ? w->cur_dev : 0);
}

typedef struct {
  rgpu_worker *w;
  int destroy;
} drop_ctx;

static void drop_stream(void *p, const rgpu_handle_entry *e) {
  drop_ctx *d = p;
  if (d->destroy) d->w->drv.cuStreamDestroy((CUstream)e->ptr);
}
static void drop_event(void *p, const rgpu_handle_entry *e) {
  drop_ctx *d = p;
  if (d->destroy) d->w->drv.cuEventDestroy((CUevent)e->ptr);
}
static void drop_module(void *p, const rgpu_handle_entry *e) {
  drop_ctx *d = p;
  rgpu_module_rec *m = e->ptr;
  if (d->destroy && m->module) d->w->drv.cuModuleUnload((CUmodule)m->module);
  rgpu_module_rec_free(m);
}
static void drop_alloc(void *p, const rgpu_alloc *a) {
  drop_ctx *d = p;
  if (d->destroy && a->kind == RGPU_ALLOC_MALLOC) d->w->drv.cuMemFree((CUdeviceptr)a->dptr);
}

void rgpu_worker_drop_device_state(rgpu_worker *w, int dev, int destroy) {
  drop_ctx d = {w, destroy && w->drv_state == 1};
  /* Resources must be destroyed inside their own context. */
  if (d.destroy && dev >= 0 && dev < RGPU_MAX_DEVICES && w->ctx[dev])
    w->drv.cuCtxSetCurrent(w->ctx[dev]);
  if (d.destroy && dev < 0) {
    for (int i = 0; i < w->device_count; i++)
      if (w->ctx[i]) {
        w->drv.cuCtxSetCurrent(w->ctx[i]);
        rgpu_worker_drop_device_state(w, i, destroy);
      }
    d.destroy = 0; /* anything left has no context: forget it */
  }
  rgpu_graph_drop_device(w, dev, d.destroy); /* first: graphs use the rest */
  rgpu_handle_map_remove_matching(&w->streams, dev, drop_stream, &d);
  rgpu_handle_map_remove_matching(&w->events, dev, drop_event, &d);
  rgpu_handle_map_remove_matching(&w->modules, dev, drop_module, &d);
  rgpu_alloc_table_remove_matching(&w->allocs, dev, 0, drop_alloc, &d);
  if (d.destroy && w->cur_dev >= 0 && w->cur_dev < RGPU_MAX_DEVICES && w->ctx[w->cur_dev])
    w->drv.cuCtxSetCurrent(w->ctx[w->cur_dev]);
}

void rgpu_worker_free(rgpu_worker *w) {
  if (!w) return;
  rgpu_jobs_barrier(w, NULL);
  rgpu_jobs_stop(w);
  rgpu_worker_drop_device_state(w, -1, 1);
  rgpu_worker_drop_chunk_pool(w);
  if (w->drv_state == 1) {
    for (int i = 0; i < w->device_count; i++) {
      if (!w->ctx[i]) continue;
      CUdevice d;
      if (w->drv.cuDeviceGet(&d, i) == CUDA_SUCCESS) w->drv.cuDevicePrimaryCtxRelease(d);
    }
    if (w->drv.sgSetPrintHandler && (w->caps & RGPU_CAP_OUTPUT))
      w->drv.sgSetPrintHandler(NULL, NULL);
    rgpu_driver_unload(&w->drv);
  }
  rgpu_host_calls_free(w);
  rgpu_alloc_table_free(&w->allocs);
  rgpu_handle_map_free(&w->streams);
  rgpu_handle_map_free(&w->events);
  rgpu_handle_map_free(&w->modules);
  rgpu_buf_free(&w->rep);
  rgpu_buf_free(&w->pending_output);
  rgpu_replay_free(&w->replay);
  pthread_mutex_destroy(&w->out_lock);
  pthread_mutex_destroy(&w->write_lock);
  pthread_mutex_destroy(&w->jobs_lock);
  pthread_cond_destroy(&w->jobs_cond);
  free(w->param_buf);
  free(w);
}

uint64_t rgpu_worker_calls(const rgpu_worker *w) { return w->calls; }
int rgpu_worker_handed_off(const rgpu_worker *w) { return w->handed_off; }
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
  pthread_mutex_lock(&w->out_lock);
  size_t off = 0;
  while (off < w->pending_output.len) {
    size_t n = w->pending_output.len - off;
    if (n > w->cfg.max_payload) n = w->cfg.max_payload;
    put_frame(out, RGPU_KIND_EVENT, RGPU_EVT_OUTPUT, 0, 0, w->pending_output.data + off, n);
    off += n;
  }
  rgpu_buf_reset(&w->pending_output);
  if (w->output_dropped) {
    char note[128];
    int n = snprintf(note, sizeof note, "\n[rgpu: %llu bytes of device printf output dropped]\n",
                     (unsigned long long)w->output_dropped);
    put_frame(out, RGPU_KIND_EVENT, RGPU_EVT_OUTPUT, 0, 0, note, (size_t)n);
    w->output_dropped = 0;
  }
  pthread_mutex_unlock(&w->out_lock);
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
/* With defer_rep the reply's payload stays in w->rep (the caller sends it
 * as a second iovec, so bulk DTOH data is never copied). Returns 1 then. */
static int finish(rgpu_worker *w, const rgpu_frame_hdr *h, CUresult status, rgpu_buf *out,
                  int need_reply, int defer_rep) {
  rgpu_worker_flush_output(w, out);
  if (need_reply) {
    if (status == CUDA_SUCCESS && defer_rep) {
      rgpu_frame_hdr rh = {RGPU_PROTO_VERSION, RGPU_KIND_REPLY, h->opcode, (uint32_t)w->rep.len, 0,
                           h->seq};
      uint8_t hdr[RGPU_FRAME_HDR_SIZE];
      rgpu_frame_hdr_encode(hdr, &rh);
      rgpu_buf_put(out, hdr, sizeof hdr);
      return 1;
    }
    if (status == CUDA_SUCCESS)
      put_frame(out, RGPU_KIND_REPLY, h->opcode, 0, h->seq, w->rep.data, w->rep.len);
    else
      put_frame(out, RGPU_KIND_REPLY, h->opcode, (uint32_t)status, h->seq, w->msg,
                strlen(w->msg));
  } else if (status != CUDA_SUCCESS) {
    if (!w->msg[0])
      snprintf(w->msg, sizeof w->msg, "%s failed: %s", rgpu_op_name(h->opcode),
               w->drv_state == 1 ? rgpu_driver_error_name(&w->drv, status) : "error");
    put_async_error(out, status, h->seq, w->msg);
  }
  return 0;
}

/* Bulk streams are offered on quic:// sessions whose client asks for them
 * (and that have a control channel for the listener to route lanes
 * through).  HELLO's handler knows nothing of them, so the negotiated bit
 * is added to its reply here (caps is the reply's second u32). */
static void offer_bulk(rgpu_worker *w, const void *payload, size_t len) {
  rgpu_msg_hello_req q;
  if (rgpu_msg_hello_req_decode(payload, len, &q) != 0) return;
  if (!(q.caps & RGPU_CAP_BULK_STREAMS) || strcmp(w->cfg.transport, "quic") != 0 ||
      w->cfg.ctl_fd <= 0 || w->rep.len < 8)
    return;
  w->caps |= RGPU_CAP_BULK_STREAMS;
  uint32_t caps = rgpu_bulk_get_u32(w->rep.data + 4) | RGPU_CAP_BULK_STREAMS;
  rgpu_bulk_put_u32(w->rep.data + 4, caps);
}

/* Status of a query is an answer, not an error to latch. */
static int is_query(uint16_t op) { return op == RGPU_OP_STREAM_QUERY || op == RGPU_OP_EVENT_QUERY; }

static int handle_frame(rgpu_worker *w, const rgpu_frame_hdr *h, const void *payload, size_t len,
                        rgpu_buf *out, int defer_rep, int *deferred) {
  *deferred = 0;
  uint64_t t0_ns = rgpu_metrics_now_ns();
  rgpu_buf_reset(&w->rep);
  w->msg[0] = 0;
  int need_reply = h->kind == RGPU_KIND_REQUEST && (h->aux & RGPU_REQ_NEED_REPLY);
  w->cur_op = h->opcode;
  w->cur_seq = h->seq;
  w->cur_need_reply = need_reply;
  w->reply_taken = 0;
  if (h->kind != RGPU_KIND_REQUEST) {
    /* A client never sends replies or events: the stream is confused. */
    rgpu_worker_fail(w, CUDA_ERROR_INVALID_VALUE, "malformed request: frame kind %u from client",
                     (unsigned)h->kind);
    finish(w, h, CUDA_ERROR_INVALID_VALUE, out, 0, 0);
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
    rgpu_worker_fail(w, CUDA_ERROR_DEVICE_UNAVAILABLE, "%s", w->cfg.refuse_new);
    finish(w, h, CUDA_ERROR_DEVICE_UNAVAILABLE, out, 1, 0);
    w->end_reason = "refused";
    return RGPU_WORKER_CLOSE;
  }
  if (!w->hello_done && h->opcode != RGPU_OP_HELLO) {
    rgpu_worker_fail(w, CUDA_ERROR_NOT_INITIALIZED, "the first request of a session must be HELLO, got %s",
                     rgpu_op_name(h->opcode) ? rgpu_op_name(h->opcode) : "an unknown opcode");
    finish(w, h, CUDA_ERROR_NOT_INITIALIZED, out, 1, 0);
    w->end_reason = "no-hello";
    return RGPU_WORKER_CLOSE;
  }
  int needs_ctx = 0;
  rgpu_handler_fn fn = rgpu_handler_for(h->opcode, &needs_ctx);
  /* Bulk-stream copies (rgpu_bulk.h) run the inline copy handlers. */
  if (h->opcode == RGPU_OP_MEMCPY_HTOD_BULK) {
    fn = rgpu_bulk_h_htod;
    needs_ctx = 1;
  } else if (h->opcode == RGPU_OP_MEMCPY_DTOH_BULK) {
    fn = rgpu_bulk_h_dtoh;
    needs_ctx = 1;
  } else if (h->opcode == RGPU_OP_MEM_FREE || h->opcode == RGPU_OP_DEVICE_RESET ||
             h->opcode == RGPU_OP_GOODBYE) {
    /* Like the jobs' barrier in those handlers: lane replies still being
     * sent use the memory, the context, the connection. */
    rgpu_bulk_barrier(w);
  }
  w->bulk_abandon = 0;
  CUresult status;
  if (!fn) {
    status = rgpu_worker_fail(w, CUDA_ERROR_NOT_SUPPORTED, "unknown request opcode 0x%04x",
                              (unsigned)h->opcode);
  } else if (rgpu_msg_validate(h->opcode, 0, payload, len) != RGPU_PROTO_OK) {
    int e = rgpu_msg_validate(h->opcode, 0, payload, len);
    status = rgpu_worker_fail(w, CUDA_ERROR_INVALID_VALUE, "malformed request: %s: %s",
                              rgpu_op_name(h->opcode), rgpu_proto_strerror(e));
  } else {
    status = needs_ctx ? rgpu_worker_ensure_ctx(w) : CUDA_SUCCESS;
    if (status == CUDA_SUCCESS) status = fn(w, payload, len);
  }
  if (w->bulk_abandon) {
    /* Not executed: no reply, not counted (the serve loop sees it). */
    rgpu_buf_reset(&w->rep);
    w->calls--;
    return RGPU_WORKER_ABANDON;
  }
  if (h->opcode == RGPU_OP_HELLO && status == CUDA_SUCCESS && w->hello_done) offer_bulk(w, payload, len);
  if (status != CUDA_SUCCESS) rgpu_buf_reset(&w->rep);
  if (w->rep.err) {
    rgpu_buf_reset(&w->rep);
    w->rep.err = 0;
    status = rgpu_worker_fail(w, CUDA_ERROR_OUT_OF_MEMORY, "server out of memory building the reply");
  }
  if (status == CUDA_ERROR_NOT_READY && is_query(h->opcode) && !need_reply) status = CUDA_SUCCESS;
  if (status == CUDA_SUCCESS && w->reply_taken)
    rgpu_worker_flush_output(w, out); /* a background job replies */
  else
    *deferred = finish(w, h, status, out, need_reply, defer_rep);
  if (t0_ns)
    rgpu_metrics_request(h->opcode, (uint32_t)status, rgpu_metrics_now_ns() - t0_ns,
                         RGPU_FRAME_HDR_SIZE + len, w->allocs.malloc_bytes);
  if (status) rgpu_metrics_note_status(w->cfg.session_id, h->opcode, (uint32_t)status);
  if (h->opcode == RGPU_OP_GOODBYE && status == CUDA_SUCCESS) {
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
  return handle_frame(w, h, payload, len, out, 0, &deferred);
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

/* Waits until c has bytes to read (1) or the listener sent a message
 * (RGPU_WORKER_ECTL); 0 on timeout.  timeout_ms < 0: no limit. */
static int wait_input(rgpu_worker *w, rgpu_conn *c, int timeout_ms) {
  if (c && rgpu_conn_pending(c)) return 1;
  struct pollfd pf[2];
  int n = 0, ci = -1, ki = -1;
  if (c) {
    pf[n] = (struct pollfd){rgpu_conn_poll_fd(c), POLLIN, 0};
    ci = n++;
  }
  if (w->cfg.ctl_fd > 0) {
    pf[n] = (struct pollfd){w->cfg.ctl_fd, POLLIN, 0};
    ki = n++;
  }
  if (n == 0) return 1;
  for (;;) {
    int pr = poll(pf, (nfds_t)n, timeout_ms);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) return pr < 0 ? 1 : 0; /* a poll error: let the read report it */
    /* Session bytes first: a RESUME never interrupts a frame that can be
     * completed. */
    if (ci >= 0 && pf[ci].revents) return 1;
    if (ki >= 0 && pf[ki].revents) return RGPU_WORKER_ECTL;
    return 1;
  }
}

/* A bulk stream the listener routed to us (RGPU_CTL_STREAM) is taken here,
 * in the middle of a frame if need be: unlike a RESUME it does not change
 * the session's byte stream, so the read must go on where it was.
 * Returns 1 when one was taken. */
static int ctl_take_stream(rgpu_worker *w) {
  rgpu_ctl_msg m;
  ssize_t r;
  do {
    r = recv(w->cfg.ctl_fd, &m, sizeof m, MSG_PEEK | MSG_DONTWAIT);
  } while (r < 0 && errno == EINTR);
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

static ssize_t read_some_ctl(rgpu_worker *w, rgpu_conn *c, void *buf, size_t len) {
  while (w->cfg.ctl_fd > 0) {
    int r = wait_input(w, c, -1);
    if (r != RGPU_WORKER_ECTL) break;
    if (!ctl_take_stream(w)) return RGPU_WORKER_ECTL;
  }
  return rgpu_conn_read_some(c, buf, len);
}

/* Makes at least `need` bytes available at p+start; returns 0, the
 * transport's error (RGPU_T_ECLOSED on EOF) or RGPU_WORKER_ECTL. */
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

/* A reply frame written straight to c, outside the session's byte stream
 * (RESUME's reply is not counted by either side). */
static int write_reply_oob(rgpu_conn *c, uint16_t op, uint32_t status, const void *p, size_t n,
                           const void *tail, size_t tail_len) {
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
  w->lost = 1;
  w->lost_at = rgpu_clock_s();
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
 * RESUME's reply, then everything it missed.  Returns 0 (resumed, or lost
 * again if the new connection broke at once) or 1 when the session must
 * end (the bytes it needs are gone). */
static int adopt_conn(rgpu_worker *w, rgpu_conn *nc, uint64_t rx, rdbuf *rb) {
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
    write_reply_oob(nc, RGPU_OP_RESUME, CUDA_ERROR_DEVICE_UNAVAILABLE, msg, (size_t)m, NULL, 0);
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
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_resume_rep rep = {.session_id = w->cfg.session_id,
                             .rx_bytes = w->replay.rx_consumed,
                             .tx_bytes = w->replay.total};
  rgpu_msg_resume_rep_encode(&b, &rep);
  int rc = write_reply_oob(nc, RGPU_OP_RESUME, 0, b.data, b.len, p, n);
  rgpu_buf_free(&b);
  if (rc) w->write_failed = 1;
  w->replay.resumes++;
  w->replay.replayed_bytes += n;
  pthread_mutex_unlock(&w->write_lock);
  /* Whatever was half-read from the old connection is re-sent by the
   * client (it starts at rx_consumed, a frame boundary). */
  rb->start = rb->end = 0;
  if (old && old != w->orig_conn) {
    rgpu_conn_close(old);
  } else if (old) {
    /* serve()'s caller closes the original conn; make it inert now. */
    int fd = rgpu_conn_raw_fd(old);
    if (fd >= 0) shutdown(fd, SHUT_RDWR);
  }
  /* The break may not have been noticed here (a dead link looks idle). */
  RGPU_INFO("session=%llu peer=%s event=resume outage_s=%.3f replayed_bytes=%zu rx_bytes=%llu "
            "resumes=%llu",
            (unsigned long long)w->cfg.session_id, rgpu_conn_peer(nc),
            w->lost ? rgpu_clock_s() - w->lost_at : 0.0, n,
            (unsigned long long)w->replay.rx_consumed, (unsigned long long)w->replay.resumes);
  w->lost = rc != 0;
  if (w->lost) w->lost_at = rgpu_clock_s();
  return 0;
}

/* A message from the listener: 0 to go on serving, 1 to end the session. */
static int handle_ctl(rgpu_worker *w, rdbuf *rb) {
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
    w->draining = 1;
    if (w->lost) {
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
      write_reply_oob(nc, RGPU_OP_RESUME, CUDA_ERROR_DEVICE_UNAVAILABLE, "session not resumable",
                      21, NULL, 0);
      rgpu_conn_close(nc);
      return 0;
    }
    return adopt_conn(w, nc, m.rx_bytes, rb);
  }
  return 0;
}

int rgpu_worker_resumable(const rgpu_worker *w) { return resumable(w); }

void rgpu_worker_bulk_abandon(rgpu_worker *w, int break_conn) {
  w->bulk_abandon = break_conn ? 2 : 1;
}

int rgpu_worker_bulk_wait(rgpu_worker *w, int (*ready)(rgpu_worker *w, void *arg), void *arg) {
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
    if (w->cfg.ctl_fd > 0) {
      pf[n] = (struct pollfd){w->cfg.ctl_fd, POLLIN, 0};
      ki = n++;
    }
    if (w->conn && !w->lost) {
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
        rgpu_worker_bulk_abandon(w, 0);
        return RGPU_BULK_WAIT_ABANDON;
      }
      if (w->conn != before) {
        /* Resumed on a new connection: the client re-sends this frame. */
        rgpu_worker_bulk_abandon(w, 0);
        return RGPU_BULK_WAIT_ABANDON;
      }
    }
    if (ci >= 0 && (pf[ci].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
      if (ready(w, arg) > 0) return 0;
      rgpu_worker_bulk_abandon(w, 0);
      return RGPU_BULK_WAIT_ABANDON;
    }
  }
}

/* Disconnected: waits for RESUME until the grace period is over. */
static int await_resume(rgpu_worker *w, rdbuf *rb) {
  for (;;) {
    if (w->draining) {
      /* The server is stopping: nobody should wait for this client. */
      w->end_reason = "drain";
      return 1;
    }
    double left = w->lost_at + (double)w->cfg.grace_s - rgpu_clock_s();
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
        w->handed_off = 1;
        w->end_reason = "resume-handoff";
        RGPU_DEBUG("peer=%s event=resume-handoff session=%llu", w->cfg.peer,
                   (unsigned long long)a.session_id);
        return 0;
      }
    }
  }
  RGPU_INFO("peer=%s event=resume-refused reason=\"%s\"", w->cfg.peer, why);
  write_reply_oob(c, RGPU_OP_RESUME, CUDA_ERROR_DEVICE_UNAVAILABLE, why, strlen(why), NULL, 0);
  w->end_reason = "resume-refused";
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
  w->orig_conn = c;
  w->cur_rb = &rb;
  for (;;) {
    if (w->lost) {
      if (await_resume(w, &rb)) break;
      continue;
    }
    rgpu_conn *cur = w->conn;
    rgpu_frame_hdr h;
    /* A connection that never says HELLO must not hold a worker forever. */
    if (!w->hello_done && rb.start == rb.end && rgpu_conn_pending(cur) == 0) {
      int pr = wait_input(w, cur, RGPU_HELLO_TIMEOUT_MS);
      if (pr == 0) {
        RGPU_WARN("session=%llu peer=%s closing: no HELLO within %d s",
                  (unsigned long long)w->cfg.session_id, w->cfg.peer, RGPU_HELLO_TIMEOUT_MS / 1000);
        w->end_reason = "hello-timeout";
        result = 1;
        break;
      }
    }
    int rc = rdbuf_fill(w, cur, &rb, RGPU_FRAME_HDR_SIZE);
    if (rc == 0) {
      rc = rgpu_frame_hdr_decode(rb.p + rb.start, w->cfg.max_payload, &h);
      if (rc == 0) rb.start += RGPU_FRAME_HDR_SIZE;
    }
    const uint8_t *payload = NULL;
    w->cur_in = NULL;
    rgpu_worker_frame_buffer_done(w, &in);
    if (rc == 0 && h.length <= RGPU_RDBUF_CAP / 2) {
      rc = rdbuf_fill(w, cur, &rb, h.length);
      payload = rb.p + rb.start;
      if (rc == 0) rb.start += h.length;
    } else if (rc == 0) {
      rgpu_buf_reset(&in);
      /* Pinned pool memory when it fits: an H2D handler keeps the buffer
       * as its copy's source without pinning it per copy. */
      if (!rgpu_worker_frame_buffer(w, &in, h.length) && rgpu_buf_reserve(&in, h.length)) {
        rc = RGPU_PROTO_ENOMEM;
      } else {
        size_t have = rb.end - rb.start;
        if (have > h.length) have = h.length;
        memcpy(in.data, rb.p + rb.start, have);
        rb.start += have;
        rc = have < h.length ? read_exact_ctl(w, cur, in.data + have, h.length - have) : 0;
        in.len = h.length;
        payload = in.data;
        w->cur_in = &in;
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
    int action = handle_frame(w, &h, payload, h.length, &out, 1, &deferred);
    if (action == RGPU_WORKER_ABANDON) {
      /* A bulk request that could not run: not counted, so the client
       * re-sends it (as its inline twin) after a resume. */
      int brk = w->bulk_abandon == 2;
      w->bulk_abandon = 0;
      if (w->bulk_end) break;
      if (w->conn != cur) continue; /* resumed meanwhile: rb was reset */
      if (brk && w->conn) {
        /* The connection is fine but the bytes are gone: cut it so that
         * the client resumes and sends the copy inline. */
        int fd = rgpu_conn_raw_fd(w->conn);
        if (fd >= 0) shutdown(fd, SHUT_RDWR);
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
      ctl_send(w, &m);
    }
    if (out.err) {
      RGPU_ERROR("session=%llu out of memory building a reply", (unsigned long long)w->cfg.session_id);
      w->end_reason = "oom";
      result = 1;
      break;
    }
    if (out.len) {
      struct iovec iov[2] = {{out.data, out.len}, {w->rep.data, w->rep.len}};
      if (rgpu_worker_send(w, iov, deferred && w->rep.len ? 2 : 1)) {
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
  w->cur_in = NULL;
  free(rb.p);
  rgpu_worker_frame_buffer_done(w, &in);
  rgpu_buf_free(&in);
  rgpu_buf_free(&out);
  return result;
}
