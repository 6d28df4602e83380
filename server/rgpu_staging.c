/* Staging buffers of the copy data path: two pools of page-locked chunk
 * buffers per session (rgpu_chunk_pool.h), the large-frame read buffers
 * taken from them, and the per-copy pinning that is the fallback beyond
 * them.  rgpu_staging.h says who uses what. */
#include "rgpu_staging.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rgpu_clock.h"
#include "rgpu_metrics.h"
#include "rgpu_worker_internal.h"

#define D (&w->drv)

/* Page-locks [p, p+n) so that an async copy from/to it does not block the
 * session thread; returns p, or NULL when the driver cannot (the copy then
 * still works, synchronously). */
void *rgpu_staging_pin(rgpu_worker *w, void *p, size_t n) {
  if (!D->cuMemHostRegister || !D->cuMemHostUnregister || n == 0) return NULL;
  uint64_t t0 = rgpu_clock_ns();
  CUresult r = D->cuMemHostRegister(p, n, 0);
  rgpu_metrics_staging_pin(1, rgpu_clock_elapsed_ns(t0));
  return r == CUDA_SUCCESS ? p : NULL;
}

/* Pinning per copy (cuMemHostRegister + Unregister) cost more than a small
 * copy itself on the H200: a 64-byte synchronous D2H took 197 us against
 * 35 us before copies went through pinned staging.  The pool pins each
 * chunk buffer once per session. */
static int pool_pin(void *ctx, void *p, size_t n) {
  rgpu_worker *w = ctx;
  if (!D->cuMemHostRegister || !D->cuMemHostUnregister) return -1;
  return D->cuMemHostRegister(p, n, CU_MEMHOSTREGISTER_PORTABLE) == CUDA_SUCCESS ? 0 : -1;
}
static void pool_unpin(void *ctx, void *p) {
  rgpu_worker *w = ctx;
  D->cuMemHostUnregister(p);
}

/* Large frames carry a chunk plus their message header: the pool's buffers
 * hold both, so a whole H2D frame is read straight into pinned memory. */
#define RGPU_FRAME_STAGING (RGPU_CHUNK_BYTES + 4096u)

/* Sized for what is in flight at once, not for throughput: a stream
 * blocked behind a host callback keeps every later copy's buffer until the
 * client answers, and beyond the pool a copy falls back to pinning (or not
 * pinning) memory per copy, which on a real GPU may wait for that very
 * stream.  On a GPU, 256 x 16 KiB and 8 x 4 MiB are pinned when the pools
 * are made (before any host function), and the chunk pool grows to 32
 * buffers while no host callback exists; softgpu starts empty. */
/* Once a session has host callbacks, a stream may be blocked waiting for
 * this thread at any time: pinning more memory then could wait for that
 * stream (the CUDA guide lists page-locked allocation among the implicitly
 * synchronizing operations), so the pools stop growing; they were pinned
 * before the first host function (rgpu_staging_prepare). */
static int pool_may_grow(void *ctx) {
  rgpu_worker *w = ctx;
  return w->host_calls == NULL;
}

/* *slot, made on first use.  Job threads read the pointer (rgpu_jobs.c).
 * softgpu pins nothing for real and never waits in it: its pools start
 * empty and always grow, so a CI machine running many sessions does not
 * hold the up-front buffers of each. */
static rgpu_chunk_pool *pool_in(rgpu_worker *w, rgpu_chunk_pool **slot, size_t chunk,
                                unsigned max, unsigned prealloc) {
  if (!*slot) {
    int soft = w->drv.sgSetPrintHandler != NULL;
    rgpu_chunk_pool_config pc = {.chunk_bytes = chunk, .max_buffers = max, .pin = pool_pin,
                                 .unpin = pool_unpin, .ctx = w, .prealloc = soft ? 0 : prealloc,
                                 .may_grow = soft ? NULL : pool_may_grow};
    __atomic_store_n(slot, rgpu_chunk_pool_new(&pc), __ATOMIC_RELEASE);
  }
  return *slot;
}

rgpu_chunk_pool *rgpu_staging_chunk_pool(rgpu_worker *w) {
  return pool_in(w, &w->staging.chunk, RGPU_FRAME_STAGING, 32, 8);
}

static rgpu_chunk_pool *small_pool(rgpu_worker *w) {
  return pool_in(w, &w->staging.small, RGPU_SMALL_STAGING, 256, 256);
}

void rgpu_staging_prepare(rgpu_worker *w) {
  if (w->drv_state != 1) return;
  rgpu_staging_chunk_pool(w);
  small_pool(w);
}

void rgpu_staging_drop(rgpu_worker *w) {
  /* The pooled markers die with their context too. */
  rgpu_worker_markers_drop(w);
  /* Replies the replay keeps by reference live in these buffers. */
  pthread_mutex_lock(&w->write_lock);
  rgpu_replay_copy_refs(&w->replay);
  pthread_mutex_unlock(&w->write_lock);
  rgpu_chunk_pool *p = w->staging.chunk, *s = w->staging.small;
  __atomic_store_n(&w->staging.chunk, NULL, __ATOMIC_RELEASE);
  __atomic_store_n(&w->staging.small, NULL, __ATOMIC_RELEASE);
  rgpu_chunk_pool_free(p);
  rgpu_chunk_pool_free(s);
}

int rgpu_staging_frame_buffer(rgpu_worker *w, rgpu_buf *in, size_t len) {
  if (len > RGPU_FRAME_STAGING || w->drv_state != 1) return 0;
  rgpu_chunk_pool *pool = rgpu_staging_chunk_pool(w);
  if (!pool) return 0;
  rgpu_staging_frame_buffer_done(w, in); /* a pooled buffer no handler took */
  void *b = rgpu_chunk_pool_get(pool, len, NULL);
  if (b && !rgpu_chunk_pool_owns(pool, b, NULL)) {
    free(b); /* pool exhausted: its fallback is no better than the loop's */
    b = NULL;
  }
  if (!b) return 0;
  rgpu_buf_free(in);
  in->data = b;
  in->len = 0;
  in->cap = len;
  return 1;
}

void rgpu_staging_frame_buffer_done(rgpu_worker *w, rgpu_buf *in) {
  if (in->data && w->staging.chunk && rgpu_chunk_pool_owns(w->staging.chunk, in->data, NULL)) {
    rgpu_chunk_pool_put(w->staging.chunk, in->data);
    rgpu_buf_init(in);
  }
}

void *rgpu_staging_get(rgpu_worker *w, size_t n, void **pinned) {
  *pinned = NULL;
  rgpu_chunk_pool *pool = n <= RGPU_SMALL_STAGING ? small_pool(w) : rgpu_staging_chunk_pool(w);
  if (pool && n <= RGPU_FRAME_STAGING) {
    int pooled_pin = 0;
    void *b = rgpu_chunk_pool_get(pool, n, &pooled_pin);
    if (b && !pooled_pin) *pinned = rgpu_staging_pin(w, b, n); /* pool full: its fallback */
    return b;
  }
  long pg = sysconf(_SC_PAGESIZE);
  size_t align = pg > 0 ? (size_t)pg : 4096;
  size_t rounded = (n + align - 1) / align * align;
  void *b = NULL;
  if (posix_memalign(&b, align, rounded)) return NULL;
  *pinned = rgpu_staging_pin(w, b, rounded);
  return b;
}


void rgpu_staging_release(rgpu_worker *w, void *buf, void *pinned) {
  if (pinned && w->drv.cuMemHostUnregister) {
    uint64_t t0 = rgpu_clock_ns();
    w->drv.cuMemHostUnregister(pinned);
    rgpu_metrics_staging_pin(0, rgpu_clock_elapsed_ns(t0)); /* counted with its pin */
  }
  /* A pooled staging buffer goes back to the pool; any other is freed.
   * Job threads read the pointer the session thread creates lazily. */
  rgpu_chunk_pool *small = __atomic_load_n(&w->staging.small, __ATOMIC_ACQUIRE);
  rgpu_chunk_pool *pool = __atomic_load_n(&w->staging.chunk, __ATOMIC_ACQUIRE);
  if (small && rgpu_chunk_pool_owns(small, buf, NULL))
    rgpu_chunk_pool_put(small, buf);
  else if (pool)
    rgpu_chunk_pool_put(pool, buf); /* frees what it does not own */
  else
    free(buf);
}


/* ---- small host-to-device copies: see rgpu_worker_internal.h ------------ */

/* Copies in a batch start on this boundary (any DMA engine is happy). */
#define SMALL_H2D_ALIGN 16u

void rgpu_small_h2d_seal(rgpu_worker *w) {
  rgpu_small_h2d *b = &w->small_h2d;
  if (!b->buf) return;
  void *buf = b->buf, *pinned = b->pinned;
  CUstream s = b->stream;
  CUcontext ctx = b->ctx;
  b->buf = b->pinned = NULL;
  b->used = 0;
  b->copies = 0;
  b->sealed++;
  /* The marker is made in the current context, the copies' own: only
   * other handlers change it, and every one of them seals first. */
  CUevent ev = NULL;
  int own = 1;
  CUresult r = rgpu_worker_marker_pooled(w, ctx, s, &ev, &own);
  rgpu_job *j = r == CUDA_SUCCESS ? calloc(1, sizeof *j) : NULL;
  if (j) {
    *j = (rgpu_job){.kind = RGPU_JOB_RELEASE, .opcode = RGPU_OP_MEMCPY_HTOD, .ctx = ctx, .ev = ev,
                    .own_ev = own, .buf = buf, .pinned = pinned, .stream = s};
    if (rgpu_jobs_submit(w, j)) {
      free(j);
      j = NULL;
    }
  }
  if (!j) {
    /* No marker or no job: what a single copy did in that case, wait here
     * (a failed record means a broken context, which returns at once). */
    if (ev) {
      CUresult sr = D->cuEventSynchronize(ev);
      rgpu_worker_marker_release(w, ctx, ev, own, sr == CUDA_SUCCESS);
    } else {
      D->cuStreamSynchronize(s);
    }
    rgpu_staging_release(w, buf, pinned);
  }
}

void *rgpu_small_h2d_place(rgpu_worker *w, CUstream s, CUcontext ctx, size_t n) {
  rgpu_small_h2d *b = &w->small_h2d;
  if (n == 0 || n > RGPU_SMALL_H2D_MAX) return NULL;
  if (b->buf && (b->stream != s || b->ctx != ctx || b->used + n > RGPU_SMALL_STAGING))
    rgpu_small_h2d_seal(w);
  if (!b->buf) {
    void *pinned = NULL;
    void *buf = rgpu_staging_get(w, RGPU_SMALL_STAGING, &pinned);
    if (!buf) return NULL;
    *b = (rgpu_small_h2d){.buf = buf, .pinned = pinned, .stream = s, .ctx = ctx,
                          .sealed = b->sealed};
  }
  void *p = (char *)b->buf + b->used;
  b->used += (n + SMALL_H2D_ALIGN - 1) / SMALL_H2D_ALIGN * SMALL_H2D_ALIGN;
  b->copies++;
  return p;
}
