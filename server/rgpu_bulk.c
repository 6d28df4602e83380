/* Bulk streams, the worker's side: see rgpu_bulk.h. */
#define _GNU_SOURCE
#include "rgpu_bulk.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rgpu_bulk_proto.h"
#include "rgpu_fifo.h"
#include "rgpu_frame.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"
#include "rgpu_thread_name.h"

/* ---- staged items (pure) ------------------------------------------------ */

rgpu_bulk_item *rgpu_bulk_items_add(rgpu_bulk_items *t, uint64_t id, uint32_t lane, size_t len) {
  rgpu_bulk_item *it = calloc(1, sizeof *it);
  if (!it) return NULL;
  rgpu_buf_init(&it->buf);
  /* At least one byte, so that a staged item always has a buffer. */
  if (rgpu_buf_reserve(&it->buf, len ? len : 1)) {
    free(it);
    return NULL;
  }
  it->id = id;
  it->lane = lane;
  it->len = len;
  it->next = t->head;
  t->head = it;
  t->staged_bytes += len;
  return it;
}

rgpu_bulk_item *rgpu_bulk_items_find(rgpu_bulk_items *t, uint64_t id) {
  for (rgpu_bulk_item *it = t->head; it; it = it->next)
    if (it->id == id) return it;
  return NULL;
}

void rgpu_bulk_items_unlink(rgpu_bulk_items *t, rgpu_bulk_item *it) {
  for (rgpu_bulk_item **pp = &t->head; *pp; pp = &(*pp)->next)
    if (*pp == it) {
      *pp = it->next;
      it->next = NULL;
      t->staged_bytes -= it->len;
      return;
    }
}

void rgpu_bulk_item_free(rgpu_bulk_item *it) {
  if (!it) return;
  rgpu_buf_free(&it->buf);
  free(it);
}

void rgpu_bulk_items_drop(rgpu_bulk_items *t, int lane, int only_incomplete) {
  rgpu_bulk_item **pp = &t->head;
  while (*pp) {
    rgpu_bulk_item *it = *pp;
    if ((lane < 0 || it->lane == (uint32_t)lane) && (!only_incomplete || !it->done)) {
      *pp = it->next;
      t->staged_bytes -= it->len;
      rgpu_bulk_item_free(it);
    } else {
      pp = &it->next;
    }
  }
}

/* ---- lanes ---------------------------------------------------------------- */

/* A device-to-host reply waiting for its copy (or an error to report). */
typedef struct rgpu_bulk_send {
  uint64_t seq;
  CUcontext ctx;
  CUevent ev;      /* marker after the copy; NULL for an error */
  void *buf;       /* staging buffer with the bytes */
  size_t len;
  uint32_t status; /* nonzero: report msg instead */
  char msg[256];
  struct rgpu_bulk_send *next;
} rgpu_bulk_send;

typedef struct rgpu_bulk_lane {
  rgpu_bulk *b;
  rgpu_conn *conn;
  uint32_t lane;      /* valid once live */
  int state;          /* 0: preamble not read yet, 1: live, 2: dead */
  int closing;        /* reset or shutdown: threads finish and exit */
  RGPU_FIFO(rgpu_bulk_send) sends; /* replies for the sender, through next */
  pthread_t reader, sender;
  int have_reader, have_sender;
  int refs;           /* threads still using conn */
  pthread_mutex_t wl; /* one writer at a time: the reader's receipts, the sender's replies */
  struct rgpu_bulk_lane *next_all;
} rgpu_bulk_lane;

struct rgpu_bulk {
  rgpu_worker *w;
  pthread_mutex_t lock;
  pthread_cond_t cv;
  int notify[2];
  rgpu_bulk_lane *slot[RGPU_BULK_MAX_LANES]; /* the live lane of each number */
  int slot_dead[RGPU_BULK_MAX_LANES];        /* lane k died since the last reset */
  rgpu_bulk_lane *all;                       /* every lane object, joined at shutdown */
  rgpu_bulk_items items;
  int pending_sends;
};

static void notify(rgpu_bulk *b) {
  char x = 1;
  (void)!write(b->notify[1], &x, 1);
}

rgpu_bulk *rgpu_bulk_get(rgpu_worker *w) {
  if (w->bulk) return w->bulk;
  rgpu_bulk *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  if (pipe2(b->notify, O_CLOEXEC | O_NONBLOCK)) {
    free(b);
    return NULL;
  }
  b->w = w;
  pthread_mutex_init(&b->lock, NULL);
  pthread_cond_init(&b->cv, NULL);
  w->bulk = b;
  return b;
}

int rgpu_bulk_notify_fd(rgpu_worker *w) { return w->bulk ? w->bulk->notify[0] : -1; }

void rgpu_bulk_notify_drain(rgpu_worker *w) {
  if (!w->bulk) return;
  char buf[64];
  while (read(w->bulk->notify[0], buf, sizeof buf) > 0) {
  }
}

/* Makes the lane's blocking reads and writes return (the conn itself is
 * closed by its last thread). */
static void lane_cut(rgpu_bulk_lane *l) { rgpu_conn_abort(l->conn); }

/* Called by each lane thread as it ends (lock held). */
static void lane_unref(rgpu_bulk_lane *l) {
  if (--l->refs == 0 && l->conn) {
    rgpu_conn_close(l->conn);
    l->conn = NULL;
  }
}

/* The lane stops being usable (lock held): later requests for it go inline. */
static void lane_mark_dead(rgpu_bulk_lane *l) {
  rgpu_bulk *b = l->b;
  if (l->state == 1 && b->slot[l->lane] == l) {
    b->slot[l->lane] = NULL;
    b->slot_dead[l->lane] = 1;
  }
  l->state = 2;
  l->closing = 1;
  pthread_cond_broadcast(&b->cv);
  notify(b);
}

static void *lane_reader(void *arg) {
  rgpu_thread_name("rgpu-lane-in");
  rgpu_bulk_lane *l = arg;
  rgpu_bulk *b = l->b;
  rgpu_worker *w = b->w;
  uint8_t pre[RGPU_BULK_PREAMBLE_SIZE];
  uint32_t lane = 0;
  int rc = rgpu_conn_read_exact(l->conn, pre, sizeof pre);
  if (rc == 0 && rgpu_bulk_preamble_decode(pre, &lane)) {
    RGPU_WARN("session=%llu bulk stream with a malformed preamble: closed",
              (unsigned long long)w->cfg.session_id);
    rc = -1;
  }
  pthread_mutex_lock(&b->lock);
  if (rc == 0 && !l->closing) {
    rgpu_bulk_lane *old = b->slot[lane];
    if (old && old != l) {
      /* The client opened the lane again: the old stream is finished. */
      old->state = 2;
      old->closing = 1;
      lane_cut(old);
    }
    l->lane = lane;
    l->state = 1;
    b->slot[lane] = l;
    b->slot_dead[lane] = 0;
    pthread_cond_broadcast(&b->cv);
    notify(b);
  } else {
    rc = -1;
  }
  pthread_mutex_unlock(&b->lock);
  while (rc == 0) {
    uint8_t ih[RGPU_BULK_ITEM_HDR_SIZE];
    uint64_t id, len;
    rc = rgpu_conn_read_exact(l->conn, ih, sizeof ih);
    if (rc) break;
    if (rgpu_bulk_item_decode(ih, w->cfg.max_payload, &id, &len)) {
      RGPU_WARN("session=%llu lane=%u malformed bulk item: lane closed",
                (unsigned long long)w->cfg.session_id, lane);
      rc = -1;
      break;
    }
    /* Bounded staging: past it, stop reading (QUIC flow control then
     * holds the client's writes) until the session thread caught up. */
    pthread_mutex_lock(&b->lock);
    while (!l->closing && b->items.staged_bytes > RGPU_BULK_STAGED_MAX)
      pthread_cond_wait(&b->cv, &b->lock);
    int closing = l->closing;
    pthread_mutex_unlock(&b->lock);
    if (closing) break;
    /* Filled outside the table: a reset can then never free it under us. */
    rgpu_bulk_items tmp = {0};
    rgpu_bulk_item *it = rgpu_bulk_items_add(&tmp, id, lane, (size_t)len);
    if (!it) {
      RGPU_WARN("session=%llu out of memory staging %llu bulk bytes: lane closed",
                (unsigned long long)w->cfg.session_id, (unsigned long long)len);
      rc = -1;
      break;
    }
    rc = rgpu_conn_read_exact(l->conn, it->buf.data, (size_t)len);
    if (rc) {
      rgpu_bulk_item_free(it);
      break;
    }
    it->done = 1;
    pthread_mutex_lock(&b->lock);
    if (l->closing || rgpu_bulk_items_find(&b->items, id)) {
      rgpu_bulk_item_free(it); /* stale (reset) or a duplicate id */
    } else {
      it->next = b->items.head;
      b->items.head = it;
      b->items.staged_bytes += it->len;
      notify(b);
    }
    pthread_mutex_unlock(&b->lock);
    /* The receipt: the client sends the request only now, so the session
     * thread finds the bytes there and never waits for a transfer. */
    uint8_t ack[RGPU_FRAME_HDR_SIZE];
    rgpu_frame_hdr ah = {RGPU_PROTO_VERSION, RGPU_KIND_REPLY, RGPU_OP_MEMCPY_HTOD_BULK, 0, 0, id};
    rgpu_frame_hdr_encode(ack, &ah);
    struct iovec av = {ack, sizeof ack};
    pthread_mutex_lock(&l->wl);
    rc = rgpu_conn_writev_all(l->conn, &av, 1);
    pthread_mutex_unlock(&l->wl);
  }
  pthread_mutex_lock(&b->lock);
  lane_mark_dead(l);
  lane_unref(l);
  pthread_mutex_unlock(&b->lock);
  return NULL;
}

static void put_hdr(uint8_t *out, uint32_t len, uint32_t status, uint64_t seq) {
  rgpu_frame_hdr h = {RGPU_PROTO_VERSION, RGPU_KIND_REPLY, RGPU_OP_MEMCPY_DTOH_BULK, len, status,
                      seq};
  rgpu_frame_hdr_encode(out, &h);
}

static void send_one(rgpu_bulk_lane *l, rgpu_bulk_send *s) {
  rgpu_bulk *b = l->b;
  rgpu_worker *w = b->w;
  uint32_t st = s->status;
  if (!st && s->ev) {
    w->drv.cuCtxSetCurrent(s->ctx);
    CUresult r = w->drv.cuEventSynchronize(s->ev);
    w->drv.cuEventDestroy(s->ev);
    if (r != CUDA_SUCCESS) {
      st = (uint32_t)r;
      snprintf(s->msg, sizeof s->msg, "cuMemcpyDtoHAsync failed: %s",
               rgpu_driver_error_name(&w->drv, r));
    }
  }
  const void *pay = st ? (const void *)s->msg : s->buf;
  size_t plen = st ? strlen(s->msg) : s->len;
  uint8_t hdr[RGPU_FRAME_HDR_SIZE];
  put_hdr(hdr, (uint32_t)plen, st, s->seq);
  struct iovec iov[2] = {{hdr, sizeof hdr}, {(void *)pay, plen}};
  pthread_mutex_lock(&b->lock);
  int live = l->state == 1 && !l->closing;
  pthread_mutex_unlock(&b->lock);
  int on_lane = 0;
  if (live) {
    pthread_mutex_lock(&l->wl);
    on_lane = rgpu_conn_writev_all(l->conn, iov, plen ? 2 : 1) == 0;
    pthread_mutex_unlock(&l->wl);
  }
  if (on_lane) {
    /* The confirmation on stream 0: counted, replayed after a resume. */
    uint8_t mk[RGPU_FRAME_HDR_SIZE];
    put_hdr(mk, 0, st, s->seq);
    struct iovec m = {mk, sizeof mk};
    rgpu_worker_send(w, &m, 1);
  } else {
    /* No lane: the whole reply goes the inline way. */
    if (live) {
      pthread_mutex_lock(&b->lock);
      lane_mark_dead(l);
      pthread_mutex_unlock(&b->lock);
    }
    rgpu_worker_send(w, iov, plen ? 2 : 1);
  }
  if (s->buf) rgpu_staging_release(w, s->buf, NULL);
}

static void *lane_sender(void *arg) {
  rgpu_thread_name("rgpu-lane-out");
  rgpu_bulk_lane *l = arg;
  rgpu_bulk *b = l->b;
  pthread_mutex_lock(&b->lock);
  for (;;) {
    while (rgpu_fifo_empty(&l->sends) && !l->closing) pthread_cond_wait(&b->cv, &b->lock);
    rgpu_bulk_send *s = rgpu_fifo_pop(&l->sends, next);
    if (!s) break; /* closing and drained */
    pthread_mutex_unlock(&b->lock);
    send_one(l, s);
    free(s);
    pthread_mutex_lock(&b->lock);
    b->pending_sends--;
    pthread_cond_broadcast(&b->cv);
  }
  lane_unref(l);
  pthread_mutex_unlock(&b->lock);
  return NULL;
}

void rgpu_bulk_adopt(rgpu_worker *w, rgpu_conn *c) {
  rgpu_bulk *b = (w->caps & RGPU_CAP_BULK_STREAMS) ? rgpu_bulk_get(w) : NULL;
  rgpu_bulk_lane *l = b ? calloc(1, sizeof *l) : NULL;
  if (!l) {
    rgpu_conn_close(c);
    return;
  }
  l->b = b;
  l->conn = c;
  pthread_mutex_init(&l->wl, NULL);
  pthread_mutex_lock(&b->lock);
  l->refs = 2;
  if (pthread_create(&l->reader, NULL, lane_reader, l) == 0) {
    l->have_reader = 1;
  } else {
    l->refs--;
  }
  if (l->have_reader && pthread_create(&l->sender, NULL, lane_sender, l) == 0) {
    l->have_sender = 1;
  } else {
    l->refs--;
    if (l->have_reader) {
      l->closing = 1;
      lane_cut(l);
    }
  }
  if (l->refs == 0) {
    rgpu_conn_close(c);
    l->conn = NULL;
  }
  l->next_all = b->all;
  b->all = l;
  pthread_mutex_unlock(&b->lock);
}

void rgpu_bulk_reset(rgpu_worker *w) {
  rgpu_bulk *b = w->bulk;
  if (!b) return;
  pthread_mutex_lock(&b->lock);
  for (rgpu_bulk_lane *l = b->all; l; l = l->next_all) {
    if (l->conn && !l->closing) lane_cut(l);
    l->state = 2;
    l->closing = 1;
  }
  for (int k = 0; k < RGPU_BULK_MAX_LANES; k++) {
    b->slot[k] = NULL;
    b->slot_dead[k] = 0;
  }
  rgpu_bulk_items_drop(&b->items, -1, 0);
  pthread_cond_broadcast(&b->cv);
  pthread_mutex_unlock(&b->lock);
}

void rgpu_bulk_barrier(rgpu_worker *w) {
  rgpu_bulk *b = w->bulk;
  if (!b) return;
  pthread_mutex_lock(&b->lock);
  while (b->pending_sends > 0) pthread_cond_wait(&b->cv, &b->lock);
  pthread_mutex_unlock(&b->lock);
}

void rgpu_bulk_shutdown(rgpu_worker *w) {
  rgpu_bulk *b = w->bulk;
  if (!b) return;
  rgpu_bulk_reset(w);
  rgpu_bulk_lane *l = b->all;
  while (l) {
    if (l->have_reader) pthread_join(l->reader, NULL);
    if (l->have_sender) pthread_join(l->sender, NULL);
    rgpu_bulk_lane *next = l->next_all;
    if (l->conn) rgpu_conn_close(l->conn);
    pthread_mutex_destroy(&l->wl);
    free(l);
    l = next;
  }
  rgpu_bulk_items_drop(&b->items, -1, 0);
  close(b->notify[0]);
  close(b->notify[1]);
  pthread_cond_destroy(&b->cv);
  pthread_mutex_destroy(&b->lock);
  free(b);
  w->bulk = NULL;
}

/* ---- the requests ------------------------------------------------------- */

typedef struct {
  uint64_t id;
  uint32_t lane;
  rgpu_bulk_item *it;
  rgpu_bulk_lane *l;
} wait_arg;

static int htod_ready(rgpu_worker *w, void *p) {
  wait_arg *a = p;
  rgpu_bulk *b = w->bulk;
  if (!b) return -1;
  pthread_mutex_lock(&b->lock);
  int r = 0;
  rgpu_bulk_item *it = rgpu_bulk_items_find(&b->items, a->id);
  if (it && it->done) {
    rgpu_bulk_items_unlink(&b->items, it);
    pthread_cond_broadcast(&b->cv); /* room for a waiting reader */
    a->it = it;
    r = 1;
  } else if (b->slot_dead[a->lane]) {
    r = -1;
  }
  pthread_mutex_unlock(&b->lock);
  return r;
}

static int lane_ready(rgpu_worker *w, void *p) {
  wait_arg *a = p;
  rgpu_bulk *b = w->bulk;
  if (!b) return -1;
  pthread_mutex_lock(&b->lock);
  int r = 0;
  if (b->slot[a->lane]) {
    a->l = b->slot[a->lane];
    r = 1;
  } else if (b->slot_dead[a->lane]) {
    r = -1;
  }
  pthread_mutex_unlock(&b->lock);
  return r;
}

CUresult rgpu_h_memcpy_htod_bulk(rgpu_req *rq, const rgpu_msg_memcpy_htod_bulk_req *q) {
  rgpu_worker *w = rq->w;
  if (!(w->caps & RGPU_CAP_BULK_STREAMS) || q->lane >= RGPU_BULK_MAX_LANES || q->len == 0 ||
      q->len > w->cfg.max_payload)
    return rgpu_worker_fail(w, CUDA_ERROR_INVALID_VALUE,
                            "malformed MEMCPY_HTOD_BULK (lane %u, %llu bytes)", q->lane,
                            (unsigned long long)q->len);
  if (!rgpu_bulk_get(w)) return rgpu_worker_fail(w, CUDA_ERROR_OUT_OF_MEMORY, "server out of memory");
  wait_arg a = {.id = q->bulk_id, .lane = q->lane};
  int wr = rgpu_worker_bulk_wait(rq, htod_ready, &a);
  if (wr == RGPU_BULK_WAIT_ABANDON) return CUDA_SUCCESS;
  if (wr != 0) {
    /* The bytes are gone with their stream.  A resumable session makes the
     * client re-send the request inline (its twin); otherwise it fails. */
    if (rgpu_worker_resumable(w)) {
      rgpu_req_abandon(rq, 1);
      return CUDA_SUCCESS;
    }
    return rgpu_worker_fail(w, CUDA_ERROR_UNKNOWN,
                            "the %llu bytes of host-to-device copy %llu were lost with their "
                            "bulk stream",
                            (unsigned long long)q->len, (unsigned long long)q->bulk_id);
  }
  rgpu_bulk_item *it = a.it;
  if (it->len != q->len) {
    rgpu_bulk_item_free(it);
    return rgpu_worker_fail(w, CUDA_ERROR_INVALID_VALUE,
                            "MEMCPY_HTOD_BULK: bulk %llu has %zu bytes, the request says %llu",
                            (unsigned long long)q->bulk_id, it->len, (unsigned long long)q->len);
  }
  /* Exactly an inline MEMCPY_HTOD {dst, stream, data}: the same handler,
   * which may take the buffer (as it takes a large frame's). */
  it->buf.len = it->len;
  rgpu_msg_memcpy_htod_req inl = {.dst = q->dst, .stream = q->stream,
                                  .data = {it->buf.data, it->len}};
  rgpu_buf *saved = rq->in;
  rq->in = &it->buf;
  CUresult r = rgpu_h_memcpy_htod(rq, &inl);
  rq->in = saved;
  rgpu_bulk_item_free(it);
  return r;
}

static CUcontext ctx_of_stream(rgpu_worker *w, uint64_t id) {
  const rgpu_handle_entry *e = id ? rgpu_handle_map_get(&w->streams, id) : NULL;
  int dev = e ? e->device : w->cur_dev;
  return dev >= 0 && dev < RGPU_MAX_DEVICES ? w->ctx[dev] : NULL;
}

static void queue_send(rgpu_bulk_lane *l, rgpu_bulk_send *s) {
  rgpu_bulk *b = l->b;
  pthread_mutex_lock(&b->lock);
  rgpu_fifo_push(&l->sends, s, next);
  b->pending_sends++;
  pthread_cond_broadcast(&b->cv);
  pthread_mutex_unlock(&b->lock);
}

CUresult rgpu_h_memcpy_dtoh_bulk(rgpu_req *rq, const rgpu_msg_memcpy_dtoh_bulk_req *q) {
  rgpu_worker *w = rq->w;
  if (!(w->caps & RGPU_CAP_BULK_STREAMS) || q->lane >= RGPU_BULK_MAX_LANES || !rq->need_reply)
    return rgpu_worker_fail(w, CUDA_ERROR_INVALID_VALUE, "malformed MEMCPY_DTOH_BULK (lane %u)",
                            q->lane);
  if (!rgpu_bulk_get(w)) return rgpu_worker_fail(w, CUDA_ERROR_OUT_OF_MEMORY, "server out of memory");
  wait_arg a = {.lane = q->lane};
  int wr = rgpu_worker_bulk_wait(rq, lane_ready, &a);
  if (wr == RGPU_BULK_WAIT_ABANDON) return CUDA_SUCCESS;
  if (wr != 0) {
    /* No lane: an ordinary MEMCPY_DTOH, its reply on stream 0 (the
     * client reads it there once its lane failed). */
    rgpu_msg_memcpy_dtoh_req inl = {.src = q->src, .size = q->size, .stream = q->stream};
    return rgpu_h_memcpy_dtoh(rq, &inl);
  }
  rgpu_bulk_send *s = calloc(1, sizeof *s);
  if (!s) return rgpu_worker_fail(w, CUDA_ERROR_OUT_OF_MEMORY, "server out of memory");
  s->seq = rq->seq;
  s->ctx = ctx_of_stream(w, q->stream);
  const rgpu_handle_entry *se = q->stream ? rgpu_handle_map_get(&w->streams, q->stream) : NULL;
  const rgpu_alloc *al = rgpu_alloc_table_lookup(&w->allocs, q->src, q->size);
  if (q->size == 0 || q->size > w->cfg.max_payload) {
    s->status = CUDA_ERROR_INVALID_VALUE;
    snprintf(s->msg, sizeof s->msg, "cuMemcpyDtoH: %llu bytes (at most %u per request)",
             (unsigned long long)q->size, w->cfg.max_payload);
  } else if (!al) {
    s->status = CUDA_ERROR_INVALID_VALUE;
    snprintf(s->msg, sizeof s->msg,
             "cuMemcpyDtoH: %llu bytes at 0x%llx are not inside a device allocation of this "
             "session",
             (unsigned long long)q->size, (unsigned long long)q->src);
  } else if (q->stream && !se) {
    s->status = CUDA_ERROR_INVALID_HANDLE;
    snprintf(s->msg, sizeof s->msg, "unknown stream id %llu", (unsigned long long)q->stream);
  } else {
    CUstream st = se ? (CUstream)se->ptr : NULL;
    int pooled_pin = 0;
    rgpu_chunk_pool *pool = rgpu_staging_chunk_pool(w);
    void *buf = pool && q->size <= RGPU_CHUNK_BYTES
                    ? rgpu_chunk_pool_get(pool, (size_t)q->size, &pooled_pin)
                    : NULL;
    if (!buf) buf = malloc((size_t)q->size);
    if (!buf) {
      s->status = CUDA_ERROR_OUT_OF_MEMORY;
      snprintf(s->msg, sizeof s->msg, "server out of memory");
    } else {
      CUresult cr = w->drv.cuMemcpyDtoHAsync(buf, (CUdeviceptr)q->src, (size_t)q->size, st);
      CUevent ev = NULL;
      if (cr == CUDA_SUCCESS) cr = rgpu_worker_marker(w, st, &ev);
      if (cr != CUDA_SUCCESS) {
        w->drv.cuStreamSynchronize(st);
        rgpu_staging_release(w, buf, NULL);
        s->status = (uint32_t)cr;
        snprintf(s->msg, sizeof s->msg, "cuMemcpyDtoHAsync failed: %s",
                 rgpu_driver_error_name(&w->drv, cr));
      } else {
        s->buf = buf;
        s->len = (size_t)q->size;
        s->ev = ev;
      }
    }
  }
  queue_send(a.l, s);
  rq->reply_taken = 1; /* the lane's sender replies */
  return CUDA_SUCCESS;
}
