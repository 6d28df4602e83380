/* Tensor maps (TMA descriptors for Hopper and later GPUs):
 * cuTensorMapEncodeTiled, cuTensorMapEncodeIm2col, cuTensorMapEncodeIm2colWide
 * and cuTensorMapReplaceAddress, as CUTLASS 3, FlashAttention 3 and Triton's
 * TMA kernels call them (through cudaGetDriverEntryPoint when the program
 * uses the runtime).
 *
 * A map is 128 opaque bytes whose layout only the driver knows, so the
 * server's driver makes it (message TENSOR_MAP): one round trip.  The map is
 * a pure function of its arguments on a given device, and libraries such
 * as CUTLASS encode a map before every launch of a kernel with the same
 * arguments, so the answers are remembered (per device, the last
 * TMAP_CACHE_SLOTS distinct requests): a repeated encode costs no round
 * trip.  Errors are the driver's, with its message in CUDA's error log. */
#include <stdlib.h>
#include <string.h>

#include "rgpu_calls.h"
#include "rgpu_drv_module.h"
#include "rgpu_messages.h"
#include "rgpu_tensor_map_proto.h"

#define TMAP_CACHE_SLOTS 64

typedef struct {
  int device;
  uint8_t *key; /* the encoded request */
  size_t key_len;
  uint8_t map[RGPU_TMAP_BYTES];
} tmap_entry;

static rgpu_mutex g_tmap_lock = RGPU_MUTEX_INITIALIZER;
static tmap_entry g_tmap[TMAP_CACHE_SLOTS];
static unsigned g_tmap_next;

static int cache_get(int dev, const rgpu_buf *key, void *map) {
  int hit = 0;
  rgpu_mutex_lock(&g_tmap_lock);
  for (unsigned i = 0; i < TMAP_CACHE_SLOTS && !hit; i++) {
    const tmap_entry *e = &g_tmap[i];
    if (e->key && e->device == dev && e->key_len == key->len && !memcmp(e->key, key->data, key->len)) {
      memcpy(map, e->map, RGPU_TMAP_BYTES);
      hit = 1;
    }
  }
  rgpu_mutex_unlock(&g_tmap_lock);
  return hit;
}

static void cache_put(int dev, const rgpu_buf *key, const void *map) {
  uint8_t *k = malloc(key->len ? key->len : 1);
  if (!k) return; /* not remembered: the next encode asks again */
  memcpy(k, key->data, key->len);
  rgpu_mutex_lock(&g_tmap_lock);
  tmap_entry *e = &g_tmap[g_tmap_next++ % TMAP_CACHE_SLOTS];
  free(e->key);
  e->device = dev;
  e->key = k;
  e->key_len = key->len;
  memcpy(e->map, map, RGPU_TMAP_BYTES);
  rgpu_mutex_unlock(&g_tmap_lock);
}

/* The map for request q on the current context's device. */
static CUresult tensor_map_call(rgpu_msg_tensor_map_req *q, CUtensorMap *out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  RGPU_DRV_BEGIN();
  int dev = 0;
  CUresult r = rgpu_drv_ctx_enter(&dev);
  if (r != CUDA_SUCCESS) RGPU_DRV_RET(r);
  rgpu_buf key;
  rgpu_buf_init(&key);
  rgpu_msg_tensor_map_req_encode(&key, q);
  if (key.err) {
    rgpu_buf_free(&key);
    RGPU_DRV_RET(CUDA_ERROR_OUT_OF_MEMORY);
  }
  uint8_t map[RGPU_TMAP_BYTES];
  if (cache_get(dev, &key, map)) {
    memcpy(out, map, sizeof map);
    rgpu_buf_free(&key);
    RGPU_DRV_RET(CUDA_SUCCESS);
  }
  rgpu_buf payload;
  rgpu_buf_init(&payload);
  rgpu_client_reply reply;
  memset(&reply, 0, sizeof reply);
  reply.payload = &payload;
  rgpu_msg_tensor_map_rep rep;
  memset(&rep, 0, sizeof rep);
  rgpu_status rc = rgpu_call_tensor_map(c, dev, 0, q, &rep, &reply);
  r = rc ? rgpu_drv_reply_ret(c, rc) : CUDA_SUCCESS;
  if (r == CUDA_SUCCESS && rep.map.len != RGPU_TMAP_BYTES) r = CUDA_ERROR_UNKNOWN;
  if (r == CUDA_SUCCESS) {
    memcpy(out, rep.map.data, RGPU_TMAP_BYTES);
    cache_put(dev, &key, rep.map.data);
  }
  rgpu_buf_free(&payload);
  rgpu_buf_free(&key);
  RGPU_DRV_RET(r);
}

/* The arrays of an encode, as many entries as the rank reads (a rank the
 * driver refuses sends none: the server's driver gives the verdict). */
static int fill_common(rgpu_msg_tensor_map_req *q, CUtensorMapDataType type, cuuint32_t rank, void *addr,
                       const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *estr,
                       CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                       CUtensorMapFloatOOBfill oob) {
  if (rank >= 1 && rank <= RGPU_TMAP_MAX_RANK && (!dims || !estr || (rank > 1 && !strides))) return -1;
  uint32_t n = rank >= 1 && rank <= RGPU_TMAP_MAX_RANK ? rank : 0;
  q->data_type = (uint32_t)type;
  q->rank = rank;
  q->global_address = (uint64_t)(uintptr_t)addr;
  q->global_dim = (rgpu_array){dims, n};
  q->global_strides = (rgpu_array){strides, n ? n - 1 : 0};
  q->element_strides = (rgpu_array){estr, n};
  q->interleave = (uint32_t)interleave;
  q->swizzle = (uint32_t)swizzle;
  q->l2_promotion = (uint32_t)l2;
  q->oob_fill = (uint32_t)oob;
  return 0;
}

RGPU_DRV CUresult rgpu_drv_cuTensorMapEncodeTiled(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
                                                  cuuint32_t tensorRank, void *globalAddress,
                                                  const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
                                                  const cuuint32_t *boxDim, const cuuint32_t *elementStrides,
                                                  CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                                  CUtensorMapL2promotion l2Promotion,
                                                  CUtensorMapFloatOOBfill oobFill) {
  rgpu_msg_tensor_map_req q = {.kind = RGPU_TMAP_TILED};
  if (fill_common(&q, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, elementStrides,
                  interleave, swizzle, l2Promotion, oobFill) ||
      (q.global_dim.count && !boxDim))
    return CUDA_ERROR_INVALID_VALUE;
  q.box_dim = (rgpu_array){boxDim, q.global_dim.count};
  return tensor_map_call(&q, tensorMap);
}

RGPU_DRV CUresult rgpu_drv_cuTensorMapEncodeIm2col(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
                                                   cuuint32_t tensorRank, void *globalAddress,
                                                   const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
                                                   const int *pixelBoxLowerCorner, const int *pixelBoxUpperCorner,
                                                   cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,
                                                   const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
                                                   CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
                                                   CUtensorMapFloatOOBfill oobFill) {
  rgpu_msg_tensor_map_req q = {.kind = RGPU_TMAP_IM2COL};
  if (fill_common(&q, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, elementStrides,
                  interleave, swizzle, l2Promotion, oobFill))
    return CUDA_ERROR_INVALID_VALUE;
  uint32_t corners = q.global_dim.count >= 3 ? q.global_dim.count - 2 : 0;
  if (corners && (!pixelBoxLowerCorner || !pixelBoxUpperCorner)) return CUDA_ERROR_INVALID_VALUE;
  q.lower = (rgpu_array){pixelBoxLowerCorner, corners};
  q.upper = (rgpu_array){pixelBoxUpperCorner, corners};
  q.channels_per_pixel = channelsPerPixel;
  q.pixels_per_column = pixelsPerColumn;
  return tensor_map_call(&q, tensorMap);
}

RGPU_DRV CUresult rgpu_drv_cuTensorMapEncodeIm2colWide(
    CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank, void *globalAddress,
    const cuuint64_t *globalDim, const cuuint64_t *globalStrides, int pixelBoxLowerCornerWidth,
    int pixelBoxUpperCornerWidth, cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,
    const cuuint32_t *elementStrides, CUtensorMapInterleave interleave, CUtensorMapIm2ColWideMode mode,
    CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill) {
  rgpu_msg_tensor_map_req q = {.kind = RGPU_TMAP_IM2COL_WIDE};
  if (fill_common(&q, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, elementStrides,
                  interleave, swizzle, l2Promotion, oobFill))
    return CUDA_ERROR_INVALID_VALUE;
  q.lower_w = pixelBoxLowerCornerWidth;
  q.upper_w = pixelBoxUpperCornerWidth;
  q.channels_per_pixel = channelsPerPixel;
  q.pixels_per_column = pixelsPerColumn;
  q.wide_mode = (uint32_t)mode;
  return tensor_map_call(&q, tensorMap);
}

RGPU_DRV CUresult rgpu_drv_cuTensorMapReplaceAddress(CUtensorMap *tensorMap, void *globalAddress) {
  if (!tensorMap) return CUDA_ERROR_INVALID_VALUE;
  CUtensorMap in = *tensorMap;
  rgpu_msg_tensor_map_req q = {.kind = RGPU_TMAP_REPLACE,
                               .global_address = (uint64_t)(uintptr_t)globalAddress,
                               .map = {&in, sizeof in}};
  return tensor_map_call(&q, tensorMap);
}
