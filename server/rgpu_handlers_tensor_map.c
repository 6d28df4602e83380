/* TENSOR_MAP: TMA descriptors made by the server's driver
 * (proto/rgpu_messages.def, TENSOR_MAP; the client side is
 * driver/rgpu_drv_tensor_map.c).
 *
 * A tensor map is 128 opaque bytes the driver computes from its arguments
 * for the current device; a kernel reads it as a __grid_constant__
 * parameter.  The server only checks that each array holds the entries the
 * rank asks for and passes the rest to the driver, whose verdict (bad
 * rank, alignment, box, ...) is the call's result.  The global address is
 * not checked against the session's allocations: the driver does not ask
 * for memory behind it either, and a descriptor can only reach memory of
 * this worker's own context. */
#include <string.h>

#include "rgpu_tensor_map_proto.h"
#include "rgpu_worker_internal.h"

#define D (&w->drv)
#define FAIL(status, ...) rgpu_worker_fail(w, (status), __VA_ARGS__)

static CUresult need(rgpu_worker *w, uint32_t have, uint32_t want, const char *what) {
  if (have == want) return CUDA_SUCCESS;
  return FAIL(CUDA_ERROR_INVALID_VALUE, "tensor map: %u %s for the rank, %u given", want, what, have);
}

CUresult rgpu_h_tensor_map(rgpu_req *rq, const rgpu_msg_tensor_map_req *q) {
  rgpu_worker *w = rq->w;
  CUresult r = rgpu_worker_ensure_ctx(w);
  if (r) return r;
  CUtensorMap map;
  memset(&map, 0, sizeof map);
  uint32_t rank = q->rank;
  cuuint64_t dims[RGPU_TMAP_MAX_RANK] = {0}, strides[RGPU_TMAP_MAX_RANK] = {0};
  cuuint32_t box[RGPU_TMAP_MAX_RANK] = {0}, estr[RGPU_TMAP_MAX_RANK] = {0};
  int lower[RGPU_TMAP_MAX_RANK] = {0}, upper[RGPU_TMAP_MAX_RANK] = {0};
  if (q->kind != RGPU_TMAP_REPLACE) {
    if (rank < 1 || rank > RGPU_TMAP_MAX_RANK)
      return FAIL(CUDA_ERROR_INVALID_VALUE, "tensor map: rank %u", rank);
    if ((r = need(w, q->global_dim.count, rank, "dimensions")) ||
        (r = need(w, q->global_strides.count, rank - 1, "strides")) ||
        (r = need(w, q->element_strides.count, rank, "element strides")))
      return r;
    for (uint32_t i = 0; i < rank; i++) {
      dims[i] = rgpu_array_u64(&q->global_dim, i);
      estr[i] = rgpu_array_u32(&q->element_strides, i);
      if (i + 1 < rank) strides[i] = rgpu_array_u64(&q->global_strides, i);
    }
  }
  void *addr = (void *)(uintptr_t)q->global_address;
  const char *fn = "?";
  switch (q->kind) {
  case RGPU_TMAP_TILED:
    fn = "cuTensorMapEncodeTiled";
    if ((r = need(w, q->box_dim.count, rank, "box sizes"))) return r;
    if (!D->cuTensorMapEncodeTiled) break;
    for (uint32_t i = 0; i < rank; i++) box[i] = rgpu_array_u32(&q->box_dim, i);
    r = D->cuTensorMapEncodeTiled(&map, (CUtensorMapDataType)q->data_type, rank, addr, dims, strides, box, estr,
                                  (CUtensorMapInterleave)q->interleave, (CUtensorMapSwizzle)q->swizzle,
                                  (CUtensorMapL2promotion)q->l2_promotion, (CUtensorMapFloatOOBfill)q->oob_fill);
    break;
  case RGPU_TMAP_IM2COL:
    fn = "cuTensorMapEncodeIm2col";
    if (rank < 3) return FAIL(CUDA_ERROR_INVALID_VALUE, "tensor map: im2col rank %u", rank);
    if ((r = need(w, q->lower.count, rank - 2, "lower corners")) ||
        (r = need(w, q->upper.count, rank - 2, "upper corners")))
      return r;
    if (!D->cuTensorMapEncodeIm2col) break;
    for (uint32_t i = 0; i + 2 < rank; i++) {
      lower[i] = rgpu_array_i32(&q->lower, i);
      upper[i] = rgpu_array_i32(&q->upper, i);
    }
    r = D->cuTensorMapEncodeIm2col(&map, (CUtensorMapDataType)q->data_type, rank, addr, dims, strides, lower, upper,
                                   q->channels_per_pixel, q->pixels_per_column, estr,
                                   (CUtensorMapInterleave)q->interleave, (CUtensorMapSwizzle)q->swizzle,
                                   (CUtensorMapL2promotion)q->l2_promotion, (CUtensorMapFloatOOBfill)q->oob_fill);
    break;
  case RGPU_TMAP_IM2COL_WIDE:
    fn = "cuTensorMapEncodeIm2colWide";
    if (!D->cuTensorMapEncodeIm2colWide) break;
    r = D->cuTensorMapEncodeIm2colWide(&map, (CUtensorMapDataType)q->data_type, rank, addr, dims, strides,
                                       q->lower_w, q->upper_w, q->channels_per_pixel, q->pixels_per_column, estr,
                                       (CUtensorMapInterleave)q->interleave, (CUtensorMapIm2ColWideMode)q->wide_mode,
                                       (CUtensorMapSwizzle)q->swizzle, (CUtensorMapL2promotion)q->l2_promotion,
                                       (CUtensorMapFloatOOBfill)q->oob_fill);
    break;
  case RGPU_TMAP_REPLACE:
    fn = "cuTensorMapReplaceAddress";
    if (q->map.len != sizeof map) return FAIL(CUDA_ERROR_INVALID_VALUE, "tensor map: %zu bytes", q->map.len);
    if (!D->cuTensorMapReplaceAddress) break;
    memcpy(&map, q->map.data, sizeof map);
    r = D->cuTensorMapReplaceAddress(&map, addr);
    break;
  default: return FAIL(CUDA_ERROR_INVALID_VALUE, "tensor map: unknown kind %u", q->kind);
  }
  if ((q->kind == RGPU_TMAP_TILED && !D->cuTensorMapEncodeTiled) ||
      (q->kind == RGPU_TMAP_IM2COL && !D->cuTensorMapEncodeIm2col) ||
      (q->kind == RGPU_TMAP_IM2COL_WIDE && !D->cuTensorMapEncodeIm2colWide) ||
      (q->kind == RGPU_TMAP_REPLACE && !D->cuTensorMapReplaceAddress))
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "the server's driver has no %s (tensor maps need a GPU with TMA)", fn);
  if (r != CUDA_SUCCESS) return FAIL(r, "%s: %s", fn, rgpu_driver_error_name(D, r));
  rgpu_msg_tensor_map_rep rep = {.map = {&map, sizeof map}};
  rgpu_msg_tensor_map_rep_encode(rq->rep, &rep);
  return CUDA_SUCCESS;
}
