/* The session loop: frame in, frames out, strictly in arrival order. */
#include "rgpu_graph.h"
#include "rgpu_worker_internal.h"

#include <errno.h>
#include <malloc.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_frame_io.h"
#include "rgpu_log.h"

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
  rgpu_worker_drop_device_state(w, -1, 1);
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
  pthread_mutex_destroy(&w->out_lock);
  pthread_mutex_destroy(&w->write_lock);
  pthread_mutex_destroy(&w->jobs_lock);
  pthread_cond_destroy(&w->jobs_cond);
  free(w->param_buf);
  free(w);
}

uint64_t rgpu_worker_calls(const rgpu_worker *w) { return w->calls; }
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

/* Status of a query is an answer, not an error to latch. */
static int is_query(uint16_t op) { return op == RGPU_OP_STREAM_QUERY || op == RGPU_OP_EVENT_QUERY; }

static int handle_frame(rgpu_worker *w, const rgpu_frame_hdr *h, const void *payload, size_t len,
                        rgpu_buf *out, int defer_rep, int *deferred) {
  *deferred = 0;
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
  w->calls++;
  if (!w->hello_done && h->opcode != RGPU_OP_HELLO) {
    rgpu_worker_fail(w, CUDA_ERROR_NOT_INITIALIZED, "the first request of a session must be HELLO, got %s",
                     rgpu_op_name(h->opcode) ? rgpu_op_name(h->opcode) : "an unknown opcode");
    finish(w, h, CUDA_ERROR_NOT_INITIALIZED, out, 1, 0);
    w->end_reason = "no-hello";
    return RGPU_WORKER_CLOSE;
  }
  int needs_ctx = 0;
  rgpu_handler_fn fn = rgpu_handler_for(h->opcode, &needs_ctx);
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

/* Makes at least `need` bytes available at p+start; returns 0, or the
 * transport's error (RGPU_T_ECLOSED on EOF). */
static int rdbuf_fill(rgpu_conn *c, rdbuf *b, size_t need) {
  while (b->end - b->start < need) {
    if (b->start == b->end) b->start = b->end = 0;
    if (RGPU_RDBUF_CAP - b->end < need - (b->end - b->start)) {
      memmove(b->p, b->p + b->start, b->end - b->start);
      b->end -= b->start;
      b->start = 0;
    }
    ssize_t n = rgpu_conn_read_some(c, b->p + b->end, RGPU_RDBUF_CAP - b->end);
    if (n == 0) return RGPU_T_ECLOSED;
    if (n < 0) return (int)n;
    b->end += (size_t)n;
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
  for (;;) {
    rgpu_frame_hdr h;
    /* A connection that never says HELLO must not hold a worker forever. */
    if (!w->hello_done && rb.start == rb.end && rgpu_conn_pending(c) == 0) {
      struct pollfd pf = {rgpu_conn_poll_fd(c), POLLIN, 0};
      int pr;
      while ((pr = poll(&pf, 1, RGPU_HELLO_TIMEOUT_MS)) < 0 && errno == EINTR) {
      }
      if (pr == 0) {
        RGPU_WARN("session=%llu peer=%s closing: no HELLO within %d s",
                  (unsigned long long)w->cfg.session_id, w->cfg.peer, RGPU_HELLO_TIMEOUT_MS / 1000);
        w->end_reason = "hello-timeout";
        result = 1;
        break;
      }
    }
    int rc = rdbuf_fill(c, &rb, RGPU_FRAME_HDR_SIZE);
    if (rc == 0) {
      rc = rgpu_frame_hdr_decode(rb.p + rb.start, w->cfg.max_payload, &h);
      if (rc == 0) rb.start += RGPU_FRAME_HDR_SIZE;
    }
    const uint8_t *payload = NULL;
    w->cur_in = NULL;
    if (rc == 0 && h.length <= RGPU_RDBUF_CAP / 2) {
      rc = rdbuf_fill(c, &rb, h.length);
      payload = rb.p + rb.start;
      rb.start += h.length;
    } else if (rc == 0) {
      rgpu_buf_reset(&in);
      if (rgpu_buf_reserve(&in, h.length)) {
        rc = RGPU_PROTO_ENOMEM;
      } else {
        size_t have = rb.end - rb.start;
        if (have > h.length) have = h.length;
        memcpy(in.data, rb.p + rb.start, have);
        rb.start += have;
        rc = have < h.length ? rgpu_conn_read_exact(c, in.data + have, h.length - have) : 0;
        in.len = h.length;
        payload = in.data;
        w->cur_in = &in;
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
    rgpu_buf_reset(&out);
    int deferred = 0;
    int action = handle_frame(w, &h, payload, h.length, &out, 1, &deferred);
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
  }
  /* Host functions waiting for a client that is gone return now; jobs
   * write to c: none may outlive this call. */
  rgpu_host_calls_shutdown(w);
  rgpu_jobs_barrier(w, NULL);
  w->conn = NULL;
  w->cur_in = NULL;
  free(rb.p);
  rgpu_buf_free(&in);
  rgpu_buf_free(&out);
  return result;
}
