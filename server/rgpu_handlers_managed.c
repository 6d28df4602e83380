/* MANAGED_PULL (proto/rgpu_messages.def): the client's managed memory
 * (cudart/rgpu_cudart_managed.c) comes back after a synchronization as only
 * the chunks the device changed since the last pull.
 *
 * The server keeps, per pulled range, a copy of the bytes it last sent.
 * Chunks equal to that copy are left out of the reply: the client holds the
 * same bytes (what it received then, or what it wrote since and pushed, in
 * which case the device has them too).  Copies are bounded per session
 * (the memory quota, else RGPU_MANAGED_COPY_MAX_BYTES); a range beyond the
 * bound is sent whole every time, which is only slower.  A copy goes with
 * the allocation under it (rgpu_worker_drop_managed_copies from MEM_FREE)
 * and with its device's state. */
#include <stdlib.h>
#include <string.h>

#include "rgpu_dispatch.h"
#include "rgpu_log.h"
#include "rgpu_managed_proto.h"
#include "rgpu_staging.h"
#include "rgpu_worker_internal.h"

#define D (&w->drv)
#define FAIL(status, ...) rgpu_worker_fail(w, (status), __VA_ARGS__)

/* Without a quota, how many bytes of copies a session may keep. */
#define RGPU_MANAGED_COPY_MAX_BYTES (4ull << 30)

typedef struct {
  uint64_t size;
  uint8_t *bytes;
} managed_copy;

static void free_copy(void *ctx, const rgpu_handle_entry *e) {
  rgpu_worker *w = ctx;
  managed_copy *m = e->ptr;
  w->managed_copy_bytes -= m->size;
  free(m->bytes);
  free(m);
}

void rgpu_worker_drop_managed_copies(rgpu_worker *w, int dev, uint64_t dptr, uint64_t size) {
  if (size == 0) {
    rgpu_handle_map_remove_matching(&w->managed_copies, dev, free_copy, w);
    return;
  }
  for (size_t i = 0; i < w->managed_copies.n;) {
    rgpu_handle_entry e = w->managed_copies.v[i];
    if (e.id >= dptr && e.id - dptr < size) {
      rgpu_handle_map_remove(&w->managed_copies, e.id, NULL);
      free_copy(w, &e);
    } else {
      i++;
    }
  }
}

/* Reads [ptr, ptr + size) into buf on a stream of its own that does not
 * wait for the legacy stream: a host function pending there (whose
 * HOST_CALL_DONE only the session thread reads) cannot hold this up.  The
 * client synchronized the device before asking. */
static CUresult read_device(rgpu_worker *w, void *buf, uint64_t ptr, uint64_t size) {
  CUstream s = NULL;
  CUresult r = D->cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, 0);
  if (r == CUDA_SUCCESS) r = D->cuMemcpyDtoHAsync(buf, (CUdeviceptr)ptr, (size_t)size, s);
  if (r == CUDA_SUCCESS) r = D->cuStreamSynchronize(s);
  if (s) D->cuStreamDestroy(s);
  return r;
}

CUresult rgpu_h_managed_pull(rgpu_req *rq, const rgpu_msg_managed_pull_req *q) {
  rgpu_worker *w = rq->w;
  if (q->size == 0 || q->size > RGPU_MANAGED_PULL_MAX_BYTES)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "managed pull of %llu bytes (1 to %llu)",
                (unsigned long long)q->size, (unsigned long long)RGPU_MANAGED_PULL_MAX_BYTES);
  if (q->chunk < RGPU_MANAGED_CHUNK_MIN || q->chunk > RGPU_MANAGED_CHUNK_MAX ||
      (q->chunk & (q->chunk - 1)))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "managed pull chunk %u (a power of two, %u to %u)",
                q->chunk, RGPU_MANAGED_CHUNK_MIN, RGPU_MANAGED_CHUNK_MAX);
  CUresult r = rgpu_worker_range_check(w, q->ptr, q->size, "managed pull");
  if (r) return r;
  void *pinned = NULL;
  uint8_t *now = rgpu_staging_get(w, (size_t)q->size, &pinned);
  if (!now) return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory for a managed pull");
  if ((r = read_device(w, now, q->ptr, q->size)) != CUDA_SUCCESS) {
    rgpu_staging_release(w, now, pinned);
    return FAIL(r, "managed pull: %s", rgpu_driver_error_name(D, r));
  }
  const rgpu_handle_entry *e = rgpu_handle_map_get(&w->managed_copies, q->ptr);
  managed_copy *prev = e ? e->ptr : NULL;
  if (prev && prev->size != q->size) {
    rgpu_worker_drop_managed_copies(w, -1, q->ptr, 1);
    prev = NULL;
  }
  uint64_t n = (q->size + q->chunk - 1) / q->chunk;
  size_t base = rq->rep->len;
  static const uint8_t zeros[64];
  for (uint64_t left = (n + 7) / 8; left;) {
    size_t k = left < sizeof zeros ? (size_t)left : sizeof zeros;
    rgpu_buf_put(rq->rep, zeros, k);
    left -= k;
  }
  for (uint64_t i = 0; i < n; i++) {
    uint64_t off = i * q->chunk;
    size_t len = (size_t)(q->size - off < q->chunk ? q->size - off : q->chunk);
    if (prev && memcmp(prev->bytes + off, now + off, len) == 0) continue;
    rq->rep->data[base + i / 8] |= (uint8_t)(1u << (i % 8));
    rgpu_buf_put(rq->rep, now + off, len);
  }
  if (rq->rep->err) {
    rgpu_staging_release(w, now, pinned);
    return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory for a managed pull's reply");
  }
  uint64_t cap = w->cfg.mem_quota ? w->cfg.mem_quota : RGPU_MANAGED_COPY_MAX_BYTES;
  if (prev) {
    memcpy(prev->bytes, now, (size_t)q->size);
  } else if (w->managed_copy_bytes + q->size <= cap) {
    managed_copy *m = malloc(sizeof *m);
    uint8_t *bytes = malloc((size_t)q->size);
    if (m && bytes && rgpu_handle_map_put(&w->managed_copies, q->ptr, m, w->cur_dev) == 0) {
      memcpy(bytes, now, (size_t)q->size);
      *m = (managed_copy){.size = q->size, .bytes = bytes};
      w->managed_copy_bytes += q->size;
    } else {
      free(m);
      free(bytes);
    }
  }
  rgpu_staging_release(w, now, pinned);
  return CUDA_SUCCESS;
}
