/* Memory: allocation, copies, memsets, address queries.
 *
 * A CUdeviceptr is the runtime's device pointer as a number, so memory
 * allocated by either API is used and freed by the other.  The copies and
 * memsets are the runtime's operations (queued, the same batching and
 * deferred errors); cuMemsetD16/D32 send the element size the server's
 * MEMSET already takes. */
#include <string.h>

#include "rgpu_cudart_op.h"
#include "rgpu_drv_internal.h"
#include "rgpu_log.h"

#define DPTR(p) ((void *)(uintptr_t)(p))

/* ---- allocation ------------------------------------------------------------- */

RGPU_DRV CUresult rgpu_drv_cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
  RGPU_DRV_ENTER_CTX();
  /* The driver refuses a 0-byte allocation (the runtime returns NULL). */
  if (!dptr || bytesize == 0) {
    rgpu_rt_count_call();
    return CUDA_ERROR_INVALID_VALUE;
  }
  void *p = NULL;
  CUresult r = RGPU_DRV_RT(cudaMalloc(&p, bytesize));
  if (r == CUDA_SUCCESS) *dptr = (CUdeviceptr)(uintptr_t)p;
  return r;
}

RGPU_DRV CUresult rgpu_drv_cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch,
                                              size_t WidthInBytes, size_t Height,
                                              unsigned int ElementSizeBytes) {
  RGPU_DRV_ENTER_CTX();
  if (!dptr || !pPitch || WidthInBytes == 0 || Height == 0 ||
      (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16)) {
    rgpu_rt_count_call();
    return CUDA_ERROR_INVALID_VALUE;
  }
  void *p = NULL;
  CUresult r = RGPU_DRV_RT(cudaMallocPitch(&p, pPitch, WidthInBytes, Height));
  if (r == CUDA_SUCCESS) *dptr = (CUdeviceptr)(uintptr_t)p;
  return r;
}

RGPU_DRV CUresult rgpu_drv_cuMemFree_v2(CUdeviceptr dptr) {
  RGPU_DRV_ENTER_CTX();
  /* Memory from cuMemAllocAsync may be freed here too (the runtime's
   * cudaFree tells them apart). */
  return RGPU_DRV_RT(cudaFree(DPTR(dptr)));
}

RGPU_DRV CUresult rgpu_drv_cuMemAllocHost_v2(void **pp, size_t bytesize) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaHostAlloc(pp, bytesize, cudaHostAllocDefault));
}

RGPU_DRV CUresult rgpu_drv_cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags) {
  RGPU_DRV_ENTER_CTX();
  /* CU_MEMHOSTALLOC_* are the cudaHostAlloc* values. */
  return RGPU_DRV_RT(cudaHostAlloc(pp, bytesize, Flags));
}

RGPU_DRV CUresult rgpu_drv_cuMemFreeHost(void *p) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaFreeHost(p));
}

RGPU_DRV CUresult rgpu_drv_cuMemHostGetFlags(unsigned int *pFlags, void *p) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaHostGetFlags(pFlags, p));
}

RGPU_DRV CUresult rgpu_drv_cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p,
                                                        unsigned int Flags) {
  RGPU_DRV_ENTER_CTX();
  if (!pdptr) {
    rgpu_rt_count_call();
    return CUDA_ERROR_INVALID_VALUE;
  }
  void *d = NULL;
  CUresult r = RGPU_DRV_RT(cudaHostGetDevicePointer(&d, p, Flags));
  if (r == CUDA_SUCCESS) *pdptr = (CUdeviceptr)(uintptr_t)d;
  return r;
}

RGPU_DRV CUresult rgpu_drv_cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaHostRegister(p, bytesize, Flags));
}

RGPU_DRV CUresult rgpu_drv_cuMemHostUnregister(void *p) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaHostUnregister(p));
}

RGPU_DRV CUresult rgpu_drv_cuMemGetInfo_v2(size_t *free, size_t *total) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaMemGetInfo(free, total));
}

/* ---- stream-ordered allocation ------------------------------------------------ */

static CUresult alloc_async(CUdeviceptr *dptr, size_t bytesize, CUstream hStream, int pt) {
  RGPU_DRV_ENTER_CTX();
  if (!dptr || bytesize == 0) {
    rgpu_rt_count_call();
    return CUDA_ERROR_INVALID_VALUE;
  }
  void *p = NULL;
  CUresult r = pt ? RGPU_DRV_RT(cudaMallocAsync_ptsz(&p, bytesize, (cudaStream_t)hStream))
                  : RGPU_DRV_RT(cudaMallocAsync(&p, bytesize, (cudaStream_t)hStream));
  if (r == CUDA_SUCCESS) *dptr = (CUdeviceptr)(uintptr_t)p;
  return r;
}

RGPU_DRV CUresult rgpu_drv_cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
  return alloc_async(dptr, bytesize, hStream, 0);
}
RGPU_DRV CUresult rgpu_drv_cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                                CUstream hStream) {
  return alloc_async(dptr, bytesize, hStream, 1);
}

static CUresult alloc_from_pool(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                CUstream hStream, int pt) {
  RGPU_DRV_ENTER_CTX();
  if (!dptr || bytesize == 0) {
    rgpu_rt_count_call();
    return CUDA_ERROR_INVALID_VALUE;
  }
  void *p = NULL;
  CUresult r = pt ? RGPU_DRV_RT(cudaMallocFromPoolAsync_ptsz(&p, bytesize, pool, hStream))
                  : RGPU_DRV_RT(cudaMallocFromPoolAsync(&p, bytesize, pool, hStream));
  if (r == CUDA_SUCCESS) *dptr = (CUdeviceptr)(uintptr_t)p;
  return r;
}

RGPU_DRV CUresult rgpu_drv_cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize,
                                                   CUmemoryPool pool, CUstream hStream) {
  return alloc_from_pool(dptr, bytesize, pool, hStream, 0);
}
RGPU_DRV CUresult rgpu_drv_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                                        CUmemoryPool pool, CUstream hStream) {
  return alloc_from_pool(dptr, bytesize, pool, hStream, 1);
}

RGPU_DRV CUresult rgpu_drv_cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaFreeAsync(DPTR(dptr), hStream));
}
RGPU_DRV CUresult rgpu_drv_cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaFreeAsync_ptsz(DPTR(dptr), hStream));
}

RGPU_DRV CUresult rgpu_drv_cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev) {
  if (!rgpu_drv_initialized()) {
    rgpu_rt_count_call();
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  /* A CUmemoryPool is a cudaMemPool_t. */
  return RGPU_DRV_RT(cudaDeviceGetDefaultMemPool(pool_out, dev));
}

RGPU_DRV CUresult rgpu_drv_cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev) {
  if (!rgpu_drv_initialized()) {
    rgpu_rt_count_call();
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return RGPU_DRV_RT(cudaDeviceGetMemPool(pool, dev));
}

/* ---- copies ------------------------------------------------------------------- */

/* One copy through the runtime: pt selects the per-thread default stream,
 * async the stream-ordered form. */
static CUresult copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                     CUstream s, int pt, int async) {
  RGPU_DRV_ENTER_CTX();
  if (async)
    return pt ? RGPU_DRV_RT(cudaMemcpyAsync_ptsz(dst, src, n, kind, s))
              : RGPU_DRV_RT(cudaMemcpyAsync(dst, src, n, kind, s));
  return pt ? RGPU_DRV_RT(cudaMemcpy_ptds(dst, src, n, kind))
            : RGPU_DRV_RT(cudaMemcpy(dst, src, n, kind));
}

#define H2D cudaMemcpyHostToDevice
#define D2H cudaMemcpyDeviceToHost
#define D2D cudaMemcpyDeviceToDevice
#define ANY cudaMemcpyDefault

RGPU_DRV CUresult rgpu_drv_cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost,
                                           size_t ByteCount) {
  return copy(DPTR(dstDevice), srcHost, ByteCount, H2D, NULL, 0, 0);
}
RGPU_DRV CUresult rgpu_drv_cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost,
                                                size_t ByteCount) {
  return copy(DPTR(dstDevice), srcHost, ByteCount, H2D, NULL, 1, 0);
}
RGPU_DRV CUresult rgpu_drv_cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  return copy(dstHost, DPTR(srcDevice), ByteCount, D2H, NULL, 0, 0);
}
RGPU_DRV CUresult rgpu_drv_cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice,
                                                size_t ByteCount) {
  return copy(dstHost, DPTR(srcDevice), ByteCount, D2H, NULL, 1, 0);
}
RGPU_DRV CUresult rgpu_drv_cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                           size_t ByteCount) {
  return copy(DPTR(dstDevice), DPTR(srcDevice), ByteCount, D2D, NULL, 0, 0);
}
RGPU_DRV CUresult rgpu_drv_cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                                size_t ByteCount) {
  return copy(DPTR(dstDevice), DPTR(srcDevice), ByteCount, D2D, NULL, 1, 0);
}
RGPU_DRV CUresult rgpu_drv_cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost,
                                                size_t ByteCount, CUstream hStream) {
  return copy(DPTR(dstDevice), srcHost, ByteCount, H2D, hStream, 0, 1);
}
RGPU_DRV CUresult rgpu_drv_cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost,
                                                     size_t ByteCount, CUstream hStream) {
  return copy(DPTR(dstDevice), srcHost, ByteCount, H2D, hStream, 1, 1);
}
RGPU_DRV CUresult rgpu_drv_cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice,
                                                size_t ByteCount, CUstream hStream) {
  return copy(dstHost, DPTR(srcDevice), ByteCount, D2H, hStream, 0, 1);
}
RGPU_DRV CUresult rgpu_drv_cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice,
                                                     size_t ByteCount, CUstream hStream) {
  return copy(dstHost, DPTR(srcDevice), ByteCount, D2H, hStream, 1, 1);
}
RGPU_DRV CUresult rgpu_drv_cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                                size_t ByteCount, CUstream hStream) {
  return copy(DPTR(dstDevice), DPTR(srcDevice), ByteCount, D2D, hStream, 0, 1);
}
RGPU_DRV CUresult rgpu_drv_cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                                     size_t ByteCount, CUstream hStream) {
  return copy(DPTR(dstDevice), DPTR(srcDevice), ByteCount, D2D, hStream, 1, 1);
}
/* Unified addressing: the direction comes from the pointers. */
RGPU_DRV CUresult rgpu_drv_cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  return copy(DPTR(dst), DPTR(src), ByteCount, ANY, NULL, 0, 0);
}
RGPU_DRV CUresult rgpu_drv_cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  return copy(DPTR(dst), DPTR(src), ByteCount, ANY, NULL, 1, 0);
}
RGPU_DRV CUresult rgpu_drv_cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                         CUstream hStream) {
  return copy(DPTR(dst), DPTR(src), ByteCount, ANY, hStream, 0, 1);
}
RGPU_DRV CUresult rgpu_drv_cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                              CUstream hStream) {
  return copy(DPTR(dst), DPTR(src), ByteCount, ANY, hStream, 1, 1);
}

/* ---- memsets ------------------------------------------------------------------ */

/* A width x height area of es-byte elements (es 1, 2, 4; rows pitch bytes
 * apart) set to value, on stream s (the legacy or per-thread default stream
 * for the synchronous forms).  A 1D memset is one row. */
static CUresult memset_2d(CUdeviceptr dst, size_t pitch, unsigned value, unsigned es,
                          size_t width, size_t height, CUstream s, int pt) {
  RGPU_DRV_ENTER_CTX();
  rgpu_client *c;
  CUresult r = rgpu_drv_enter(&c);
  if (r != CUDA_SUCCESS) return r;
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  if (dst % es || width > SIZE_MAX / es) return CUDA_ERROR_INVALID_VALUE;
  size_t row = width * es;
  if (height > 1 && (pitch < row || pitch % es || (height - 1) > (SIZE_MAX - row) / pitch))
    return CUDA_ERROR_INVALID_VALUE;
  uint64_t span = (uint64_t)pitch * (height - 1) + row;
  rgpu_range rg;
  if (rgpu_range_find(rgpu_rt_device_ranges(), dst, span, &rg)) return CUDA_ERROR_INVALID_VALUE;
  uint64_t wire;
  int sdev;
  cudaError_t e = rgpu_rt_stream_resolve(c, (cudaStream_t)s, pt, &wire, &sdev);
  if (e != cudaSuccess) return rgpu_drv_from_rt(e);
  e = rgpu_rt_foreign_stream(rg.device, sdev, &wire);
  if (e != cudaSuccess) return rgpu_drv_from_rt(e);
  rgpu_rt_op op = {.kind = RGPU_RT_OP_MEMSET, .stream = wire, .device = rg.device};
  op.fill = (struct cudaMemsetParams){.dst = DPTR(dst),
                                      .pitch = height > 1 ? pitch : row,
                                      .value = value,
                                      .elementSize = es,
                                      .width = width,
                                      .height = height};
  /* Submit goes to the stream's capture graph when it is capturing. */
  return RGPU_DRV_RT(rgpu_rt_submit(c, &op));
}

static CUresult memset_elems(CUdeviceptr dst, unsigned value, unsigned es, size_t n, CUstream s,
                             int pt) {
  return memset_2d(dst, 0, value, es, n, 1, s, pt);
}

#define RGPU_DRV_MEMSET(bits, T, es)                                                          \
  RGPU_DRV CUresult rgpu_drv_cuMemsetD##bits##_v2(CUdeviceptr dstDevice, T v, size_t N) {     \
    return memset_elems(dstDevice, v, es, N, NULL, 0);                                        \
  }                                                                                           \
  RGPU_DRV CUresult rgpu_drv_cuMemsetD##bits##_v2_ptds(CUdeviceptr dstDevice, T v, size_t N) {\
    return memset_elems(dstDevice, v, es, N, NULL, 1);                                        \
  }                                                                                           \
  RGPU_DRV CUresult rgpu_drv_cuMemsetD##bits##Async(CUdeviceptr dstDevice, T v, size_t N,     \
                                                    CUstream hStream) {                       \
    return memset_elems(dstDevice, v, es, N, hStream, 0);                                     \
  }                                                                                           \
  RGPU_DRV CUresult rgpu_drv_cuMemsetD##bits##Async_ptsz(CUdeviceptr dstDevice, T v, size_t N, \
                                                         CUstream hStream) {                  \
    return memset_elems(dstDevice, v, es, N, hStream, 1);                                     \
  }

RGPU_DRV_MEMSET(8, unsigned char, 1)
RGPU_DRV_MEMSET(16, unsigned short, 2)
RGPU_DRV_MEMSET(32, unsigned int, 4)

#define RGPU_DRV_MEMSET_2D(bits, T, es)                                                       \
  RGPU_DRV CUresult rgpu_drv_cuMemsetD2D##bits##_v2(CUdeviceptr d, size_t pitch, T v,         \
                                                    size_t w, size_t h) {                     \
    return memset_2d(d, pitch, v, es, w, h, NULL, 0);                                         \
  }                                                                                           \
  RGPU_DRV CUresult rgpu_drv_cuMemsetD2D##bits##_v2_ptds(CUdeviceptr d, size_t pitch, T v,    \
                                                         size_t w, size_t h) {                \
    return memset_2d(d, pitch, v, es, w, h, NULL, 1);                                         \
  }                                                                                           \
  RGPU_DRV CUresult rgpu_drv_cuMemsetD2D##bits##Async(CUdeviceptr d, size_t pitch, T v,       \
                                                      size_t w, size_t h, CUstream s) {       \
    return memset_2d(d, pitch, v, es, w, h, s, 0);                                            \
  }                                                                                           \
  RGPU_DRV CUresult rgpu_drv_cuMemsetD2D##bits##Async_ptsz(CUdeviceptr d, size_t pitch, T v,  \
                                                           size_t w, size_t h, CUstream s) {  \
    return memset_2d(d, pitch, v, es, w, h, s, 1);                                            \
  }

RGPU_DRV_MEMSET_2D(8, unsigned char, 1)
RGPU_DRV_MEMSET_2D(16, unsigned short, 2)
RGPU_DRV_MEMSET_2D(32, unsigned int, 4)

/* ---- 2D copies ------------------------------------------------------------------ */

/* One side of a CUDA_MEMCPY2D as a pointer to its first byte
 * (rgpu_drv_copy_side gives the base and the direction). */
static CUresult copy_side(CUmemorytype type, const void *host, CUdeviceptr device, size_t x,
                          size_t y, size_t pitch, const void **out, int *is_device) {
  const char *base;
  CUresult r = rgpu_drv_copy_side(type, host, device, &base, is_device);
  if (r != CUDA_SUCCESS) return r;
  *out = base + y * pitch + x;
  return CUDA_SUCCESS;
}

static CUresult copy_2d(const CUDA_MEMCPY2D *p, CUstream s, int pt, int async) {
  RGPU_DRV_ENTER_CTX();
  if (!p) {
    rgpu_rt_count_call();
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY) {
    CUDA_MEMCPY3D q = {
        .srcXInBytes = p->srcXInBytes, .srcY = p->srcY, .srcMemoryType = p->srcMemoryType,
        .srcHost = p->srcHost, .srcDevice = p->srcDevice, .srcArray = p->srcArray,
        .srcPitch = p->srcPitch, .srcHeight = p->Height,
        .dstXInBytes = p->dstXInBytes, .dstY = p->dstY, .dstMemoryType = p->dstMemoryType,
        .dstHost = p->dstHost, .dstDevice = p->dstDevice, .dstArray = p->dstArray,
        .dstPitch = p->dstPitch, .dstHeight = p->Height,
        .WidthInBytes = p->WidthInBytes, .Height = p->Height, .Depth = 1};
    return rgpu_drv_copy_3d_array(&q, s, pt, async);
  }
  const void *src, *dst;
  int sdev, ddev;
  CUresult r = copy_side(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY,
                         p->srcPitch, &src, &sdev);
  if (r == CUDA_SUCCESS)
    r = copy_side(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY,
                  p->dstPitch, &dst, &ddev);
  if (r != CUDA_SUCCESS) {
    rgpu_rt_count_call();
    return r;
  }
  enum cudaMemcpyKind kind = rgpu_drv_copy_kind(sdev, ddev);
  void *d = (void *)dst;
  size_t w = p->WidthInBytes, h = p->Height;
  if (async)
    return pt ? RGPU_DRV_RT(cudaMemcpy2DAsync_ptsz(d, p->dstPitch, src, p->srcPitch, w, h, kind, s))
              : RGPU_DRV_RT(cudaMemcpy2DAsync(d, p->dstPitch, src, p->srcPitch, w, h, kind, s));
  return pt ? RGPU_DRV_RT(cudaMemcpy2D_ptds(d, p->dstPitch, src, p->srcPitch, w, h, kind))
            : RGPU_DRV_RT(cudaMemcpy2D(d, p->dstPitch, src, p->srcPitch, w, h, kind));
}

RGPU_DRV CUresult rgpu_drv_cuMemcpy2D_v2(const CUDA_MEMCPY2D *pCopy) {
  return copy_2d(pCopy, NULL, 0, 0);
}
RGPU_DRV CUresult rgpu_drv_cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *pCopy) {
  return copy_2d(pCopy, NULL, 1, 0);
}
/* Unaligned pitches are the same copy here (no hardware alignment rule). */
RGPU_DRV CUresult rgpu_drv_cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *pCopy) {
  return copy_2d(pCopy, NULL, 0, 0);
}
RGPU_DRV CUresult rgpu_drv_cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *pCopy) {
  return copy_2d(pCopy, NULL, 1, 0);
}
RGPU_DRV CUresult rgpu_drv_cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream) {
  return copy_2d(pCopy, hStream, 0, 1);
}
RGPU_DRV CUresult rgpu_drv_cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *pCopy, CUstream hStream) {
  return copy_2d(pCopy, hStream, 1, 1);
}

/* ---- managed memory: the runtime's (cudart/rgpu_cudart_managed.c) ------------------ */

/* Launches and synchronizations of this facade go through the runtime's
 * submit and sync paths, which move managed memory. */
RGPU_DRV CUresult rgpu_drv_cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize,
                                             unsigned int flags) {
  RGPU_DRV_ENTER_CTX();
  if (!dptr) {
    rgpu_rt_count_call();
    return CUDA_ERROR_INVALID_VALUE;
  }
  void *p = NULL;
  CUresult r = RGPU_DRV_RT(cudaMallocManaged(&p, bytesize, flags));
  if (r == CUDA_SUCCESS) *dptr = (CUdeviceptr)(uintptr_t)p;
  return r;
}

/* ---- managed memory's advice, prefetches and range attributes ------------------ */

/* The driver's location types and range attributes number as the
 * runtime's, so these are cudart's calls.  The older entry points name a
 * device, CU_DEVICE_CPU for the host. */
static struct cudaMemLocation location_of_device(CUdevice dev) {
  struct cudaMemLocation l = {.type = dev == CU_DEVICE_CPU ? cudaMemLocationTypeHost
                                                           : cudaMemLocationTypeDevice,
                              .id = dev == CU_DEVICE_CPU ? 0 : dev};
  return l;
}
static struct cudaMemLocation location_of(CUmemLocation loc) {
  struct cudaMemLocation l = {.type = (enum cudaMemLocationType)loc.type, .id = loc.id};
  return l;
}

RGPU_DRV CUresult rgpu_drv_cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
                                          CUmemLocation location) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaMemAdvise(DPTR(devPtr), count, (enum cudaMemoryAdvise)advice,
                                   location_of(location)));
}
RGPU_DRV CUresult rgpu_drv_cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
                                       CUdevice device) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaMemAdvise(DPTR(devPtr), count, (enum cudaMemoryAdvise)advice,
                                   location_of_device(device)));
}
RGPU_DRV CUresult rgpu_drv_cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count,
                                                 CUmemLocation location, unsigned int flags,
                                                 CUstream hStream) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(
      cudaMemPrefetchAsync(DPTR(devPtr), count, location_of(location), flags, hStream));
}
RGPU_DRV CUresult rgpu_drv_cuMemPrefetchAsync_v2_ptsz(CUdeviceptr devPtr, size_t count,
                                                      CUmemLocation location, unsigned int flags,
                                                      CUstream hStream) {
  return rgpu_drv_cuMemPrefetchAsync_v2(devPtr, count, location, flags, hStream);
}
RGPU_DRV CUresult rgpu_drv_cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice,
                                              CUstream hStream) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(
      cudaMemPrefetchAsync(DPTR(devPtr), count, location_of_device(dstDevice), 0, hStream));
}
RGPU_DRV CUresult rgpu_drv_cuMemPrefetchAsync_ptsz(CUdeviceptr devPtr, size_t count,
                                                   CUdevice dstDevice, CUstream hStream) {
  return rgpu_drv_cuMemPrefetchAsync(devPtr, count, dstDevice, hStream);
}
RGPU_DRV CUresult rgpu_drv_cuMemRangeGetAttribute(void *data, size_t dataSize,
                                                  CUmem_range_attribute attribute,
                                                  CUdeviceptr devPtr, size_t count) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaMemRangeGetAttribute(
      data, dataSize, (enum cudaMemRangeAttribute)attribute, DPTR(devPtr), count));
}
RGPU_DRV CUresult rgpu_drv_cuMemRangeGetAttributes(void **data, size_t *dataSizes,
                                                   CUmem_range_attribute *attributes,
                                                   size_t numAttributes, CUdeviceptr devPtr,
                                                   size_t count) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaMemRangeGetAttributes(data, dataSizes,
                                               (enum cudaMemRangeAttribute *)attributes,
                                               numAttributes, DPTR(devPtr), count));
}

/* ---- address queries ------------------------------------------------------------ */

RGPU_DRV CUresult rgpu_drv_cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize,
                                                   CUdeviceptr dptr) {
  rgpu_rt_count_call();
  CUresult r = rgpu_drv_ctx_enter(NULL);
  if (r != CUDA_SUCCESS) return r;
  rgpu_range rg;
  if (rgpu_range_find(rgpu_rt_device_ranges(), dptr, 1, &rg)) return CUDA_ERROR_NOT_FOUND;
  if (pbase) *pbase = (CUdeviceptr)rg.base;
  if (psize) *psize = (size_t)rg.size;
  return CUDA_SUCCESS;
}

/* The context of an allocation: contexts of one device share its memory,
 * so the current context when it is of that device, else the primary. */
static CUcontext ctx_of_device(int dev) {
  CUcontext cur = rgpu_drv_ctx_current();
  return cur && cur->device == dev ? cur : rgpu_drv_primary_ctx(dev);
}

RGPU_DRV CUresult rgpu_drv_cuPointerGetAttribute(void *data, CUpointer_attribute attribute,
                                                 CUdeviceptr ptr) {
  rgpu_rt_count_call();
  if (!rgpu_drv_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  rgpu_range rg;
  int device_mem = rgpu_range_find(rgpu_rt_device_ranges(), ptr, 1, &rg) == 0;
  if (!device_mem && rgpu_range_find(rgpu_rt_host_ranges(), ptr, 1, &rg)) {
    /* Memory the driver does not know (CUDA answers the same). */
    return CUDA_ERROR_INVALID_VALUE;
  }
  switch (attribute) {
  case CU_POINTER_ATTRIBUTE_CONTEXT:
    *(CUcontext *)data = ctx_of_device(rg.device);
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
    *(unsigned *)data = device_mem ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    /* Host memory is not mapped into the remote GPU's address space. */
    if (!device_mem) return CUDA_ERROR_INVALID_VALUE;
    *(CUdeviceptr *)data = ptr;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_HOST_POINTER:
    if (device_mem) return CUDA_ERROR_INVALID_VALUE;
    *(void **)data = DPTR(ptr);
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    *(unsigned *)data = 0;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
    *(int *)data = rg.device;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    *(CUdeviceptr *)data = (CUdeviceptr)rg.base;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    *(size_t *)data = (size_t)rg.size;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_MAPPED:
    *(unsigned *)data = 1;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    /* Unique per allocation while it lives: its base address. */
    *(unsigned long long *)data = rg.base;
    return CUDA_SUCCESS;
  default: {
    static int logged;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      RGPU_WARN("cuPointerGetAttribute: attribute %d is not supported", (int)attribute);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  }
}

RGPU_DRV CUresult rgpu_drv_cuPointerGetAttributes(unsigned int numAttributes,
                                                  CUpointer_attribute *attributes, void **data,
                                                  CUdeviceptr ptr) {
  if (!attributes || !data) {
    rgpu_rt_count_call();
    return CUDA_ERROR_INVALID_VALUE;
  }
  /* Unlike the single query, an unknown pointer is not an error: CUDA
   * reports it through the values (memory type 0, context NULL, ordinal
   * -2); attributes rgpu does not offer are left alone. */
  rgpu_range rg;
  int known = rgpu_range_find(rgpu_rt_device_ranges(), ptr, 1, &rg) == 0 ||
              rgpu_range_find(rgpu_rt_host_ranges(), ptr, 1, &rg) == 0;
  for (unsigned i = 0; i < numAttributes; i++) {
    if (!data[i]) continue;
    if (!known) {
      switch (attributes[i]) {
      case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(unsigned *)data[i] = 0; break;
      case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data[i] = NULL; break;
      case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data[i] = -2; break;
      case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(unsigned *)data[i] = 0; break;
      default: break;
      }
      continue;
    }
    CUresult r = rgpu_drv_cuPointerGetAttribute(data[i], attributes[i], ptr);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_SUPPORTED && r != CUDA_ERROR_INVALID_VALUE)
      return r;
  }
  return CUDA_SUCCESS;
}

/* ---- memory pools: a CUmemoryPool is a cudaMemPool_t, and the driver's
 * pool property, access and attribute types are the runtime's field for
 * field -------------------------------------------------------------------------- */

RGPU_DRV CUresult rgpu_drv_cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  if (!rgpu_drv_initialized()) {
    rgpu_rt_count_call();
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return RGPU_DRV_RT(cudaDeviceSetMemPool(dev, pool));
}

RGPU_DRV CUresult rgpu_drv_cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaMemPoolCreate(pool, (const struct cudaMemPoolProps *)poolProps));
}

RGPU_DRV CUresult rgpu_drv_cuMemPoolDestroy(CUmemoryPool pool) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaMemPoolDestroy(pool));
}

RGPU_DRV CUresult rgpu_drv_cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                                 void *value) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaMemPoolSetAttribute(pool, (enum cudaMemPoolAttr)attr, value));
}

RGPU_DRV CUresult rgpu_drv_cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                                 void *value) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaMemPoolGetAttribute(pool, (enum cudaMemPoolAttr)attr, value));
}

RGPU_DRV CUresult rgpu_drv_cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaMemPoolTrimTo(pool, minBytesToKeep));
}

RGPU_DRV CUresult rgpu_drv_cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map,
                                              size_t count) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaMemPoolSetAccess(pool, (const struct cudaMemAccessDesc *)map, count));
}

RGPU_DRV CUresult rgpu_drv_cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool memPool,
                                              CUmemLocation *location) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaMemPoolGetAccess((enum cudaMemAccessFlags *)flags, memPool,
                                          (struct cudaMemLocation *)location));
}

/* ---- 3D copies: one 2D copy per slice ----------------------------------------- */

/* A linear 3D copy is Depth 2D copies, queued in order on the same
 * stream, so it keeps the copy's ordering; one with an array is the
 * runtime's cudaMemcpy3D (rgpu_drv_array.c). */
static CUresult copy_3d(const CUDA_MEMCPY3D *p, CUstream s, int pt, int async) {
  if (!p) {
    rgpu_rt_count_call();
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (p->srcLOD || p->dstLOD) {
    rgpu_rt_count_call();
    return CUDA_ERROR_NOT_SUPPORTED; /* mipmap levels */
  }
  if (p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY) {
    RGPU_DRV_ENTER_CTX();
    return rgpu_drv_copy_3d_array(p, s, pt, async);
  }
  size_t depth = p->Depth ? p->Depth : 1;
  size_t src_height = p->srcHeight ? p->srcHeight : p->Height;
  size_t dst_height = p->dstHeight ? p->dstHeight : p->Height;
  if (depth > 1 && (p->Height > src_height || p->Height > dst_height)) {
    rgpu_rt_count_call();
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUresult r = CUDA_SUCCESS;
  for (size_t z = 0; z < depth && r == CUDA_SUCCESS; z++) {
    CUDA_MEMCPY2D slice = {
        .srcXInBytes = p->srcXInBytes,
        .srcY = p->srcY + (p->srcZ + z) * src_height,
        .srcMemoryType = p->srcMemoryType,
        .srcHost = p->srcHost,
        .srcDevice = p->srcDevice,
        .srcPitch = p->srcPitch,
        .dstXInBytes = p->dstXInBytes,
        .dstY = p->dstY + (p->dstZ + z) * dst_height,
        .dstMemoryType = p->dstMemoryType,
        .dstHost = p->dstHost,
        .dstDevice = p->dstDevice,
        .dstPitch = p->dstPitch,
        .WidthInBytes = p->WidthInBytes,
        .Height = p->Height,
    };
    r = copy_2d(&slice, s, pt, async);
  }
  return r;
}

RGPU_DRV CUresult rgpu_drv_cuMemcpy3D_v2(const CUDA_MEMCPY3D *pCopy) {
  return copy_3d(pCopy, NULL, 0, 0);
}
RGPU_DRV CUresult rgpu_drv_cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *pCopy) {
  return copy_3d(pCopy, NULL, 1, 0);
}
RGPU_DRV CUresult rgpu_drv_cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *pCopy, CUstream hStream) {
  return copy_3d(pCopy, hStream, 0, 1);
}
RGPU_DRV CUresult rgpu_drv_cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *pCopy, CUstream hStream) {
  return copy_3d(pCopy, hStream, 1, 1);
}

/* The pool of a memory location (CUDA 13: CUmemLocation is cudaMemLocation,
 * CUmemAllocationType cudaMemAllocationType): the runtime's. */
RGPU_DRV CUresult rgpu_drv_cuMemGetMemPool(CUmemoryPool *pool, CUmemLocation *location, CUmemAllocationType type) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaMemGetMemPool(pool, (struct cudaMemLocation *)location, (enum cudaMemAllocationType)type));
}
RGPU_DRV CUresult rgpu_drv_cuMemSetMemPool(CUmemLocation *location, CUmemAllocationType type, CUmemoryPool pool) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaMemSetMemPool((struct cudaMemLocation *)location, (enum cudaMemAllocationType)type, pool));
}
RGPU_DRV CUresult rgpu_drv_cuMemGetDefaultMemPool(CUmemoryPool *pool_out, CUmemLocation *location,
                                                  CUmemAllocationType type) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(
      cudaMemGetDefaultMemPool(pool_out, (struct cudaMemLocation *)location, (enum cudaMemAllocationType)type));
}

/* Graph memory (the runtime's accounting, rgpu_cudart_graph_mem.c):
 * CUgraphMem_attribute is cudaGraphMemAttributeType. */
RGPU_DRV CUresult rgpu_drv_cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaDeviceGetGraphMemAttribute(device, (enum cudaGraphMemAttributeType)attr, value));
}
RGPU_DRV CUresult rgpu_drv_cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaDeviceSetGraphMemAttribute(device, (enum cudaGraphMemAttributeType)attr, value));
}
RGPU_DRV CUresult rgpu_drv_cuDeviceGraphMemTrim(CUdevice device) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaDeviceGraphMemTrim(device));
}

/* cuPointerSetAttribute: only CU_POINTER_ATTRIBUTE_SYNC_MEMOPS exists, and
 * every copy rgpu makes to or from device memory is already ordered as it
 * asks (a synchronous copy waits for the work before it), so setting it is
 * accepted for device memory of this session. */
RGPU_DRV CUresult rgpu_drv_cuPointerSetAttribute(const void *value, CUpointer_attribute attribute, CUdeviceptr ptr) {
  RGPU_DRV_ENTER_CTX();
  if (!value || attribute != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS) return CUDA_ERROR_INVALID_VALUE;
  struct cudaPointerAttributes a;
  cudaError_t e = cudaPointerGetAttributes(&a, (const void *)(uintptr_t)ptr);
  if (e != cudaSuccess || a.type != cudaMemoryTypeDevice) {
    cudaGetLastError();
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}
