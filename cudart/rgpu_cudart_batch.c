/* The batch entry points of CUDA 12.8 and 13: cudaMemcpyBatchAsync,
 * cudaMemcpy3DBatchAsync, cudaMemPrefetchBatchAsync,
 * cudaMemDiscardBatchAsync and cudaMemDiscardAndPrefetchBatchAsync, each
 * also as _ptsz.
 *
 * Why they are here and not in one request each: a batch is a list of
 * operations the single calls already perform, and over the network a
 * batch message would save nothing (copies are queued without a round
 * trip as they are, and the server runs them in stream order, which is
 * one of the orders a batch allows).  So each entry point checks the whole
 * batch first, since CUDA answers cudaErrorInvalidValue for a bad batch
 * and enqueues none of it, and then hands every operation to the one
 * implementation of its single form:
 * - a 1D copy to cudaMemcpyAsync's with cudaMemcpyDefault
 *   (rgpu_rt_copy_check / rgpu_rt_copy_issue: capture, chunks, several
 *   servers);
 * - a 3D copy, translated to a struct cudaMemcpy3DParms, to
 *   cudaMemcpy3DAsync's (rgpu_rt_memcpy3d_async: linear memory as 2D
 *   copies, CUDA arrays as ARRAY_COPY);
 * - a prefetch to cudaMemPrefetchAsync's (rgpu_rt_prefetch).
 * A discard only makes the contents undefined, so keeping them is a
 * correct discard: its arguments are checked and nothing is sent.
 *
 * Source access orders: Stream and Any are both served in stream order
 * (a valid order for either).  DuringApiCall promises the program that
 * the source is read before the call returns (a stack buffer), so such a
 * copy's bytes are copied out during the call even from page-locked
 * memory (rgpu_cudart_op.h, src_transient).  A capturing stream refuses
 * every copy batch, as CUDA does (batch_capture_check).  Location hints only matter with concurrent managed
 * access, which rgpu does not report, so they are ignored as CUDA ignores
 * them there.  The prefetch batches go ahead although rgpu reports
 * concurrentManagedAccess 0, as cudaMemPrefetchAsync does here.
 *
 * An operation can still fail once the batch is under way (a lost
 * connection, memory freed by another thread meanwhile); the call then
 * returns that error with the operations before it already enqueued. */
#include <string.h>

#include "rgpu_cudart.h"
#include "rgpu_cudart_graph.h"
#include "rgpu_cudart_unsupported.h"

/* Whether an attribute index list is what the batch calls require: n
 * entries (1..count), the first 0, each greater than the one before and
 * the last below count. */
static int index_list_valid(const size_t *idxs, size_t n, size_t count) {
  if (!idxs || n == 0 || n > count || idxs[0] != 0) return 0;
  for (size_t k = 1; k < n; k++)
    if (idxs[k] <= idxs[k - 1] || idxs[k] >= count) return 0;
  return 1;
}

static int access_order_valid(enum cudaMemcpySrcAccessOrder o) {
  return o == cudaMemcpySrcAccessOrderStream || o == cudaMemcpySrcAccessOrderDuringApiCall ||
         o == cudaMemcpySrcAccessOrderAny;
}

static int copy_flags_valid(unsigned flags) {
  return (flags & ~(unsigned)cudaMemcpyFlagPreferOverlapWithCompute) == 0;
}

/* A capturing stream takes no copy batch: CUDA answers
 * cudaErrorStreamCaptureUnsupported and leaves the capture as it was (the
 * H100, driver 580, for cudaMemcpyBatchAsync: cudaStreamEndCapture then
 * succeeds and makes a graph without the batch; the 3D batch is taken to
 * be the same).  cudaSuccess when the stream does not capture. */
static cudaError_t batch_capture_check(uint64_t wire) {
  return rgpu_rt_graph_is_capturing(wire) ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

/* The copy batches take no legacy stream, and no NULL stream even in their
 * _ptsz forms, where NULL would name the per-thread stream: CUDA refuses
 * it there too (cudaErrorInvalidValue, measured on the H100); the handle
 * cudaStreamPerThread is accepted.  The prefetch and discard batches
 * refuse only the legacy stream: cudaMemPrefetchBatchAsync_ptsz with NULL
 * succeeds on the H100, cudaMemPrefetchBatchAsync with NULL fails. */
static int batch_stream_refused(cudaStream_t stream, int per_thread) {
  return !stream || rgpu_rt_is_legacy_stream(stream, per_thread);
}

/* ---- cudaMemcpyBatchAsync ------------------------------------------------ */

static cudaError_t memcpy_batch(void *const *dsts, const void *const *srcs, const size_t *sizes,
                                size_t count, const struct cudaMemcpyAttributes *attrs,
                                const size_t *attrs_idxs, size_t num_attrs, cudaStream_t stream,
                                int per_thread) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (count == 0 || !dsts || !srcs || !sizes || !attrs ||
      !index_list_valid(attrs_idxs, num_attrs, count) ||
      batch_stream_refused(stream, per_thread))
    return rgpu_rt_ret(cudaErrorInvalidValue);
  for (size_t k = 0; k < num_attrs; k++) {
    if (!access_order_valid(attrs[k].srcAccessOrder) || !copy_flags_valid(attrs[k].flags))
      return rgpu_rt_ret(cudaErrorInvalidValue);
  }
  uint64_t wire;
  int sdev;
  if ((e = rgpu_rt_stream_resolve(c, stream, per_thread, &wire, &sdev)) != cudaSuccess)
    return rgpu_rt_ret(e);
  /* Every copy's pointers, as cudaMemcpyAsync checks them, before any goes.
   * A copy of 0 bytes is nothing, as it is for cudaMemcpyAsync. */
  for (size_t i = 0; i < count; i++) {
    if (sizes[i] == 0) continue;
    enum cudaMemcpyKind kind = cudaMemcpyDefault;
    int dev;
    if ((e = rgpu_rt_copy_check(dsts[i], srcs[i], sizes[i], &kind, &dev)) != cudaSuccess)
      return rgpu_rt_ret(e);
  }
  if ((e = batch_capture_check(wire)) != cudaSuccess) return rgpu_rt_ret(e);
  size_t k = 0; /* attrs[k] applies to copy i */
  for (size_t i = 0; i < count; i++) {
    while (k + 1 < num_attrs && attrs_idxs[k + 1] <= i) k++;
    if (sizes[i] == 0) continue;
    enum cudaMemcpyKind kind = cudaMemcpyDefault;
    int dev;
    /* Checked above; checked again for the kind and device, which a
     * cudaFree on another thread meanwhile may have changed. */
    if ((e = rgpu_rt_copy_check(dsts[i], srcs[i], sizes[i], &kind, &dev)) != cudaSuccess)
      return rgpu_rt_ret(e);
    int transient = attrs[k].srcAccessOrder == cudaMemcpySrcAccessOrderDuringApiCall;
    e = rgpu_rt_copy_issue(c, dsts[i], srcs[i], sizes[i], kind, dev, wire, sdev, 1, transient);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

RGPU_API cudaError_t cudaMemcpyBatchAsync(void *const *dsts, const void *const *srcs,
                                          const size_t *sizes, size_t count,
                                          struct cudaMemcpyAttributes *attrs, size_t *attrsIdxs,
                                          size_t numAttrs, cudaStream_t stream) {
  return memcpy_batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, stream, 0);
}
RGPU_API_PTSZ(cudaError_t cudaMemcpyBatchAsync_ptsz(void *const *dsts, const void *const *srcs,
                                                    const size_t *sizes, size_t count,
                                                    struct cudaMemcpyAttributes *attrs,
                                                    size_t *attrsIdxs, size_t numAttrs,
                                                    cudaStream_t stream)) {
  return memcpy_batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, stream, 1);
}

/* ---- cudaMemcpy3DBatchAsync ---------------------------------------------- */

/* An array operand as the batch sees it: its element size in bytes and
 * its extent in elements (height and depth at least 1). */
typedef struct {
  size_t elem;
  size_t w, h, d;
} array_shape;

/* cudaErrorInvalidValue for anything that is not a live array (the batch
 * calls answer only that code). */
static cudaError_t array_shape_of(cudaArray_t a, array_shape *out) {
  struct cudaChannelFormatDesc desc;
  struct cudaExtent ext;
  unsigned flags;
  /* The registry's answer (rgpu_cudart_array.c): a stale or forged
   * handle is refused there, never read. */
  if (!a || cudaArrayGetInfo(&desc, &ext, &flags, a) != cudaSuccess) return cudaErrorInvalidValue;
  int bits = desc.x + desc.y + desc.z + desc.w;
  if (bits <= 0 || bits % 8) return cudaErrorInvalidValue;
  *out = (array_shape){(size_t)bits / 8, ext.width, ext.height ? ext.height : 1,
                       ext.depth ? ext.depth : 1};
  return cudaSuccess;
}

/* Whether a box of ext elements at off lies inside the array. */
static int box_in_array(const array_shape *s, struct cudaOffset3D off, struct cudaExtent ext) {
  return off.x <= s->w && ext.width <= s->w - off.x && off.y <= s->h &&
         ext.height <= s->h - off.y && off.z <= s->d && ext.depth <= s->d - off.z;
}

/* One side of a 3D copy into the cudaMemcpy3DParms fields of that side:
 * a CUDA array at an element offset, or a pointer whose rows are
 * rowLength elements (0: the copy's width) and whose layers layerHeight
 * rows (0: its height), elem bytes an element.  A pointer into device
 * memory must hold the whole box in one allocation. */
static cudaError_t operand_side(const struct cudaMemcpy3DOperand *o, struct cudaExtent ext,
                                size_t elem, cudaArray_t *array, struct cudaPos *pos,
                                struct cudaPitchedPtr *ptr) {
  if (o->type == cudaMemcpyOperandTypeArray) {
    *array = o->op.array.array;
    *pos = (struct cudaPos){o->op.array.offset.x, o->op.array.offset.y, o->op.array.offset.z};
    return cudaSuccess;
  }
  size_t row_len = o->op.ptr.rowLength ? o->op.ptr.rowLength : ext.width;
  size_t layer_h = o->op.ptr.layerHeight ? o->op.ptr.layerHeight : ext.height;
  /* The box's bytes up to its last one: full layers and rows before it,
   * then one row's width.  Each product is checked before the next can
   * leave 128 bits. */
  unsigned __int128 pitch = (unsigned __int128)row_len * elem;
  if (pitch > SIZE_MAX) return cudaErrorInvalidValue;
  unsigned __int128 layer = pitch * layer_h;
  if (layer > SIZE_MAX) return cudaErrorInvalidValue;
  unsigned __int128 layers = layer * (ext.depth - 1), rows = pitch * (ext.height - 1);
  unsigned __int128 row = (unsigned __int128)ext.width * elem;
  if (layers > SIZE_MAX || rows > SIZE_MAX || row > SIZE_MAX) return cudaErrorInvalidValue;
  unsigned __int128 span = layers + rows + row;
  if (span > SIZE_MAX) return cudaErrorInvalidValue;
  uint64_t p = (uint64_t)(uintptr_t)o->op.ptr.ptr;
  rgpu_range_table *dev = rgpu_rt_device_ranges();
  if (rgpu_range_find(dev, p, 1, NULL) == 0 && rgpu_range_find(dev, p, (uint64_t)span, NULL) != 0)
    return cudaErrorInvalidValue;
  *array = NULL;
  *pos = (struct cudaPos){0, 0, 0};
  *ptr = (struct cudaPitchedPtr){o->op.ptr.ptr, (size_t)pitch, ext.width * elem, layer_h};
  return cudaSuccess;
}

/* Checks one batch operation and translates it to the cudaMemcpy3DParms
 * cudaMemcpy3DAsync takes (kind cudaMemcpyDefault: the pointers decide). */
static cudaError_t op3d_params(const struct cudaMemcpy3DBatchOp *op, struct cudaMemcpy3DParms *p) {
  struct cudaExtent ext = op->extent;
  if (!access_order_valid(op->srcAccessOrder) || !copy_flags_valid(op->flags) ||
      ext.width == 0 || ext.height == 0 || ext.depth == 0)
    return cudaErrorInvalidValue;
  const struct cudaMemcpy3DOperand *sides[2] = {&op->src, &op->dst};
  array_shape shape[2];
  size_t elem = 0; /* the arrays' element size; 1 between two pointers */
  for (int s = 0; s < 2; s++) {
    const struct cudaMemcpy3DOperand *o = sides[s];
    if (o->type == cudaMemcpyOperandTypePointer) {
      if (!o->op.ptr.ptr || (o->op.ptr.rowLength && o->op.ptr.rowLength < ext.width) ||
          (o->op.ptr.layerHeight && o->op.ptr.layerHeight < ext.height))
        return cudaErrorInvalidValue;
    } else if (o->type == cudaMemcpyOperandTypeArray) {
      cudaError_t e = array_shape_of(o->op.array.array, &shape[s]);
      if (e != cudaSuccess) return e;
      /* Two arrays must agree on the element size (CUDA's rule). */
      if (elem && elem != shape[s].elem) return cudaErrorInvalidValue;
      elem = shape[s].elem;
      if (!box_in_array(&shape[s], o->op.array.offset, ext)) return cudaErrorInvalidValue;
    } else {
      return cudaErrorInvalidValue;
    }
  }
  int has_array = elem != 0;
  if (!elem) elem = 1;
  memset(p, 0, sizeof *p);
  p->extent = ext; /* elements with an array, bytes (elements of 1) without */
  p->kind = cudaMemcpyDefault;
  cudaError_t e = operand_side(&op->src, ext, elem, &p->srcArray, &p->srcPos, &p->srcPtr);
  if (e == cudaSuccess) e = operand_side(&op->dst, ext, elem, &p->dstArray, &p->dstPos, &p->dstPtr);
  if (e != cudaSuccess) return e;
  /* The pointers' kinds (which side is device memory) as a copy sees them. */
  if (!has_array) {
    enum cudaMemcpyKind kind = cudaMemcpyDefault;
    int dev;
    e = rgpu_rt_copy_check(p->dstPtr.ptr, p->srcPtr.ptr, 1, &kind, &dev);
  }
  return e;
}

static cudaError_t memcpy3d_batch(size_t num_ops, const struct cudaMemcpy3DBatchOp *ops,
                                  unsigned long long flags, cudaStream_t stream, int per_thread) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (num_ops == 0 || !ops || flags != 0 || batch_stream_refused(stream, per_thread))
    return rgpu_rt_ret(cudaErrorInvalidValue);
  uint64_t wire;
  int sdev;
  if ((e = rgpu_rt_stream_resolve(c, stream, per_thread, &wire, &sdev)) != cudaSuccess)
    return rgpu_rt_ret(e);
  for (size_t i = 0; i < num_ops; i++) {
    struct cudaMemcpy3DParms p;
    if ((e = op3d_params(&ops[i], &p)) != cudaSuccess) return rgpu_rt_ret(e);
  }
  if ((e = batch_capture_check(wire)) != cudaSuccess) return rgpu_rt_ret(e);
  for (size_t i = 0; i < num_ops; i++) {
    struct cudaMemcpy3DParms p;
    if ((e = op3d_params(&ops[i], &p)) != cudaSuccess) return rgpu_rt_ret(e);
    int transient = ops[i].srcAccessOrder == cudaMemcpySrcAccessOrderDuringApiCall;
    if ((e = rgpu_rt_memcpy3d_async(&p, stream, per_thread, transient)) != cudaSuccess) return e;
  }
  return cudaSuccess;
}

RGPU_API cudaError_t cudaMemcpy3DBatchAsync(size_t numOps, struct cudaMemcpy3DBatchOp *opList,
                                            unsigned long long flags, cudaStream_t stream) {
  return memcpy3d_batch(numOps, opList, flags, stream, 0);
}
RGPU_API_PTSZ(cudaError_t cudaMemcpy3DBatchAsync_ptsz(size_t numOps,
                                                      struct cudaMemcpy3DBatchOp *opList,
                                                      unsigned long long flags,
                                                      cudaStream_t stream)) {
  return memcpy3d_batch(numOps, opList, flags, stream, 1);
}

/* ---- prefetch and discard batches ---------------------------------------- */

/* The three managed-memory batches: discard (the ranges only), prefetch
 * (locs[k] from locs_idxs[k] on), or both.  Every range must lie in one
 * managed allocation: rgpu reports no pageable memory access, so
 * system-allocated memory is not a choice. */
static cudaError_t managed_batch(void **dptrs, const size_t *sizes, size_t count,
                                 const struct cudaMemLocation *locs, const size_t *locs_idxs,
                                 size_t num_locs, unsigned long long flags, cudaStream_t stream,
                                 int per_thread, int prefetch) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (count == 0 || !dptrs || !sizes || flags != 0 || rgpu_rt_is_legacy_stream(stream, per_thread))
    return rgpu_rt_ret(cudaErrorInvalidValue);
  if (prefetch && (!locs || !index_list_valid(locs_idxs, num_locs, count)))
    return rgpu_rt_ret(cudaErrorInvalidValue);
  uint64_t wire;
  int sdev;
  if ((e = rgpu_rt_stream_resolve(c, stream, per_thread, &wire, &sdev)) != cudaSuccess)
    return rgpu_rt_ret(e);
  size_t k = 0; /* locs[k] applies to range i */
  for (size_t i = 0; i < count; i++) {
    if (prefetch) {
      while (k + 1 < num_locs && locs_idxs[k + 1] <= i) k++;
      e = rgpu_rt_prefetch_check(c, dptrs[i], sizes[i], locs[k]);
    } else {
      e = rgpu_rt_managed_range_check(dptrs[i], sizes[i]);
    }
    if (e != cudaSuccess) return rgpu_rt_ret(e);
  }
  /* The discard: nothing to do (see the top). */
  if (!prefetch) return cudaSuccess;
  k = 0;
  for (size_t i = 0; i < count; i++) {
    while (k + 1 < num_locs && locs_idxs[k + 1] <= i) k++;
    if ((e = rgpu_rt_prefetch(c, dptrs[i], sizes[i], locs[k])) != cudaSuccess)
      return rgpu_rt_ret(e);
  }
  return cudaSuccess;
}

RGPU_API cudaError_t cudaMemPrefetchBatchAsync(void **dptrs, size_t *sizes, size_t count,
                                               struct cudaMemLocation *prefetchLocs,
                                               size_t *prefetchLocIdxs, size_t numPrefetchLocs,
                                               unsigned long long flags, cudaStream_t stream) {
  return managed_batch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags,
                       stream, 0, 1);
}
RGPU_API_PTSZ(cudaError_t cudaMemPrefetchBatchAsync_ptsz(
    void **dptrs, size_t *sizes, size_t count, struct cudaMemLocation *prefetchLocs,
    size_t *prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags,
    cudaStream_t stream)) {
  return managed_batch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags,
                       stream, 1, 1);
}

RGPU_API cudaError_t cudaMemDiscardBatchAsync(void **dptrs, size_t *sizes, size_t count,
                                              unsigned long long flags, cudaStream_t stream) {
  return managed_batch(dptrs, sizes, count, NULL, NULL, 0, flags, stream, 0, 0);
}
RGPU_API_PTSZ(cudaError_t cudaMemDiscardBatchAsync_ptsz(void **dptrs, size_t *sizes, size_t count,
                                                        unsigned long long flags,
                                                        cudaStream_t stream)) {
  return managed_batch(dptrs, sizes, count, NULL, NULL, 0, flags, stream, 1, 0);
}

/* A discard followed by a prefetch is the prefetch alone: the discarded
 * contents may be anything, the kept ones included. */
RGPU_API cudaError_t cudaMemDiscardAndPrefetchBatchAsync(void **dptrs, size_t *sizes, size_t count,
                                                         struct cudaMemLocation *prefetchLocs,
                                                         size_t *prefetchLocIdxs,
                                                         size_t numPrefetchLocs,
                                                         unsigned long long flags,
                                                         cudaStream_t stream) {
  return managed_batch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags,
                       stream, 0, 1);
}
RGPU_API_PTSZ(cudaError_t cudaMemDiscardAndPrefetchBatchAsync_ptsz(
    void **dptrs, size_t *sizes, size_t count, struct cudaMemLocation *prefetchLocs,
    size_t *prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags,
    cudaStream_t stream)) {
  return managed_batch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags,
                       stream, 1, 1);
}
