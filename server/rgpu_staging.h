/* rgpu_staging: the session's page-locked staging buffers for copies.
 *
 * Background copies (MEMCPY_HTOD/DTOH through jobs, bulk lanes, D2H
 * replies the replay keeps by reference) need host memory that stays valid
 * past the request and that the driver can copy asynchronously.  Two pools
 * of chunk buffers (rgpu_chunk_pool.h) are pinned once per session: one of
 * RGPU_SMALL_STAGING buffers for small copies, one of frame-sized buffers
 * (a chunk plus its message header) for large copies and for reading large
 * H2D frames straight into pinned memory.  Beyond the pools a copy falls
 * back to memory pinned (or, without the driver's help, not pinned) per
 * copy.
 *
 * Threads: the session thread makes the pools (lazily) and drops them; job
 * and lane threads give buffers back (rgpu_staging_release) and read the
 * pool pointers atomically. */
#ifndef RGPU_STAGING_H
#define RGPU_STAGING_H

#include <stddef.h>

#include "rgpu_chunk_pool.h"
#include "rgpu_wire.h"

typedef struct rgpu_worker rgpu_worker;

/* Copies up to this size stage in the small pool. */
#define RGPU_SMALL_STAGING (16u << 10)

/* The pools of one session (a member of rgpu_worker); NULL until made. */
typedef struct {
  rgpu_chunk_pool *chunk; /* frame-sized buffers */
  rgpu_chunk_pool *small; /* buffers of RGPU_SMALL_STAGING bytes */
} rgpu_staging;

/* The frame-sized pool, made on first use (NULL when out of memory). */
rgpu_chunk_pool *rgpu_staging_chunk_pool(rgpu_worker *w);
/* Makes (and pins) both pools now, if not yet: before a session's first
 * host function, after which the pools no longer grow. */
void rgpu_staging_prepare(rgpu_worker *w);
/* Drops both pools (unpinning their buffers) once no background job uses
 * them any more, before a context reset or unloading the driver. */
void rgpu_staging_drop(rgpu_worker *w);

/* A staging buffer of n bytes for a background copy: pooled and pinned
 * when it fits a chunk, else page-aligned, malloc'd and pinned for this
 * copy (*pinned then says what to unregister; NULL if nothing).  NULL when
 * out of memory.  Give it back with rgpu_staging_release. */
void *rgpu_staging_get(rgpu_worker *w, size_t n, void **pinned);
/* Gives back a background copy's buffer (any thread): unregisters
 * `pinned` (may be NULL), returns a pooled buffer to its pool and frees
 * any other. */
void rgpu_staging_release(rgpu_worker *w, void *buf, void *pinned);
/* Page-locks [p, p+n) for one copy; returns p, or NULL when the driver
 * cannot (the copy then still works, synchronously). */
void *rgpu_staging_pin(rgpu_worker *w, void *p, size_t n);

/* The socket loop's buffer for one large frame: a pooled, pinned buffer
 * when len fits one (returns 1, in->data set, in->cap = len), else 0 and
 * the loop allocates.  A handler may take in->data (rgpu_buf_init(in)) and
 * give it back with rgpu_staging_release; _done gives back what no handler
 * took (call it before anything else uses `in`). */
int rgpu_staging_frame_buffer(rgpu_worker *w, rgpu_buf *in, size_t len);
void rgpu_staging_frame_buffer_done(rgpu_worker *w, rgpu_buf *in);

#endif
