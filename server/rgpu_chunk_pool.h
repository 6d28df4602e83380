/* rgpu_chunk_pool: reusable, pinned-once bulk buffers for the worker's copy
 * data path (issue 8: bandwidth >= 90% of the raw transport).
 *
 * Why: every H2D frame larger than the read buffer and every D2H reply of a
 * chunked copy needs an RGPU_CHUNK_BYTES buffer that outlives the request
 * (the stream consumes it later).  Allocating one per chunk costs page
 * faults (1024 per 4 MiB), and pinning one per chunk with
 * cuMemHostRegister/cuMemHostUnregister costs more on a real GPU than the
 * DMA it enables.  Pinned buffers are what make the driver's copy truly
 * asynchronous (DMA on a GPU; softgpu likewise runs copies touching
 * pageable memory synchronously), so the socket receive of chunk n+1
 * overlaps the device copy of chunk n and the worker pays one CPU copy per
 * byte, as the raw transport does.
 *
 * The pool owns at most `max_buffers` buffers of `chunk_bytes` each, pins
 * each one once (through the callbacks, normally the driver's
 * cuMemHostRegister with CU_MEMHOSTREGISTER_PORTABLE) and hands them out
 * again after they are put back.  Requests larger than a chunk, or beyond
 * max_buffers in use, get a plain malloc'd buffer, so callers never wait
 * for the pool; put() frees those.  All functions are thread-safe (the
 * worker's job threads put buffers back). */
#ifndef RGPU_CHUNK_POOL_H
#define RGPU_CHUNK_POOL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Pins [p, p+n) for DMA; returns 0 on success.  Called with the lock of the
 * pool not held, from the thread that called rgpu_chunk_pool_get. */
typedef int (*rgpu_chunk_pin_fn)(void *ctx, void *p, size_t n);
typedef void (*rgpu_chunk_unpin_fn)(void *ctx, void *p);

typedef struct {
  size_t chunk_bytes;   /* size of a pooled buffer; 0 = RGPU_CHUNK_BYTES */
  unsigned max_buffers; /* pooled buffers at most (handed out + cached); 0 = 32 */
  rgpu_chunk_pin_fn pin;     /* NULL: buffers stay pageable */
  rgpu_chunk_unpin_fn unpin; /* called once per pinned buffer by _free */
  void *ctx;
  /* Buffers made at creation, as one region pinned with one call.  Why: on
   * a real GPU pinning may wait for the device, and a device blocked by a
   * host callback waits for the very thread that would be pinning; so the
   * pins should happen before any work exists. */
  unsigned prealloc;
  /* Optional: 0 = do not make (pin) new buffers now; get() falls back to
   * plain memory instead.  NULL = always allowed. */
  int (*may_grow)(void *ctx);
} rgpu_chunk_pool_config;

typedef struct {
  unsigned buffers;   /* pooled buffers allocated so far */
  unsigned pinned;    /* of which pinned */
  unsigned cached;    /* free in the pool now */
  uint64_t gets;      /* buffers handed out */
  uint64_t reuses;    /* of which came from the cache */
  uint64_t fallbacks; /* plain malloc (too large, pool exhausted) */
} rgpu_chunk_pool_stats;

typedef struct rgpu_chunk_pool rgpu_chunk_pool;

/* Allocates: release with rgpu_chunk_pool_free.  NULL when out of memory. */
rgpu_chunk_pool *rgpu_chunk_pool_new(const rgpu_chunk_pool_config *cfg);
/* A buffer of at least len bytes (len > 0), or NULL when out of memory.
 * *pinned (optional) tells whether the driver knows it as pinned memory. */
void *rgpu_chunk_pool_get(rgpu_chunk_pool *p, size_t len, int *pinned);
/* 1 if buf is one of the pool's own buffers (handed out or cached);
 * *pinned (optional) then tells whether it is pinned. */
int rgpu_chunk_pool_owns(rgpu_chunk_pool *p, const void *buf, int *pinned);
/* Gives a buffer from rgpu_chunk_pool_get back (NULL is ignored). */
void rgpu_chunk_pool_put(rgpu_chunk_pool *p, void *buf);
void rgpu_chunk_pool_get_stats(rgpu_chunk_pool *p, rgpu_chunk_pool_stats *out);
/* Unpins and frees every pooled buffer.  Call it when no buffer is in use
 * any more (after the jobs barrier) and before the driver context that
 * pinned them is destroyed; buffers still handed out are freed too. */
void rgpu_chunk_pool_free(rgpu_chunk_pool *p);

#ifdef __cplusplus
}
#endif
#endif
