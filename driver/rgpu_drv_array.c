/* CUDA arrays, texture objects and surface objects of the driver API, on
 * the runtime's (cudart/rgpu_cudart_array.c): a CUarray is the runtime's
 * cudaArray_t, as in NVIDIA's libraries, and a CUtexObject / CUsurfObject
 * the same 64-bit handle.  The driver's descriptions are translated to the
 * runtime's and back; copies with an array on either side (cuMemcpy2D/3D)
 * become the runtime's cudaMemcpy3D, which counts array positions and
 * widths in elements where the driver counts bytes. */
#include <string.h>

#include "rgpu_drv_internal.h"

/* The runtime's channel description of a driver format with n channels;
 * 0 for a format rgpu does not carry. */
static int channel_desc(CUarray_format f, unsigned n, struct cudaChannelFormatDesc *d) {
  int bits;
  enum cudaChannelFormatKind k;
  switch (f) {
  case CU_AD_FORMAT_UNSIGNED_INT8: bits = 8, k = cudaChannelFormatKindUnsigned; break;
  case CU_AD_FORMAT_UNSIGNED_INT16: bits = 16, k = cudaChannelFormatKindUnsigned; break;
  case CU_AD_FORMAT_UNSIGNED_INT32: bits = 32, k = cudaChannelFormatKindUnsigned; break;
  case CU_AD_FORMAT_SIGNED_INT8: bits = 8, k = cudaChannelFormatKindSigned; break;
  case CU_AD_FORMAT_SIGNED_INT16: bits = 16, k = cudaChannelFormatKindSigned; break;
  case CU_AD_FORMAT_SIGNED_INT32: bits = 32, k = cudaChannelFormatKindSigned; break;
  case CU_AD_FORMAT_HALF: bits = 16, k = cudaChannelFormatKindFloat; break;
  case CU_AD_FORMAT_FLOAT: bits = 32, k = cudaChannelFormatKindFloat; break;
  default: return 0;
  }
  if (n != 1 && n != 2 && n != 4) return 0;
  *d = (struct cudaChannelFormatDesc){bits, n > 1 ? bits : 0, n > 2 ? bits : 0, n > 2 ? bits : 0,
                                      k};
  return 1;
}

/* The driver's format and channel count of a runtime channel description. */
static void driver_format(const struct cudaChannelFormatDesc *d, CUarray_format *f,
                          unsigned *n) {
  *n = d->w ? 4 : d->z ? 3 : d->y ? 2 : 1;
  int signed_ = d->f == cudaChannelFormatKindSigned, fl = d->f == cudaChannelFormatKindFloat;
  switch (d->x) {
  case 8: *f = signed_ ? CU_AD_FORMAT_SIGNED_INT8 : CU_AD_FORMAT_UNSIGNED_INT8; break;
  case 16:
    *f = fl ? CU_AD_FORMAT_HALF : signed_ ? CU_AD_FORMAT_SIGNED_INT16 : CU_AD_FORMAT_UNSIGNED_INT16;
    break;
  default: *f = fl ? CU_AD_FORMAT_FLOAT : signed_ ? CU_AD_FORMAT_SIGNED_INT32 : CU_AD_FORMAT_UNSIGNED_INT32;
  }
}

static CUresult array_create(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d) {
  RGPU_DRV_ENTER_CTX();
  struct cudaChannelFormatDesc cd;
  if (!out || !d) {
    rgpu_rt_count_call();
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!channel_desc(d->Format, d->NumChannels, &cd)) {
    rgpu_rt_count_call();
    return CUDA_ERROR_INVALID_VALUE;
  }
  cudaArray_t a = NULL;
  struct cudaExtent ext = {d->Width, d->Height, d->Depth};
  CUresult r = RGPU_DRV_RT(cudaMalloc3DArray(&a, &cd, ext, d->Flags));
  if (r == CUDA_SUCCESS) *out = (CUarray)a;
  return r;
}

RGPU_DRV CUresult rgpu_drv_cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *d) {
  if (!d) return array_create(pHandle, NULL);
  CUDA_ARRAY3D_DESCRIPTOR d3 = {.Width = d->Width, .Height = d->Height, .Depth = 0,
                                .Format = d->Format, .NumChannels = d->NumChannels};
  return array_create(pHandle, &d3);
}

RGPU_DRV CUresult rgpu_drv_cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d) {
  return array_create(pHandle, d);
}

RGPU_DRV CUresult rgpu_drv_cuArrayDestroy(CUarray hArray) {
  RGPU_DRV_ENTER_CTX();
  if (!hArray) {
    rgpu_rt_count_call();
    return CUDA_ERROR_INVALID_HANDLE;
  }
  return RGPU_DRV_RT(cudaFreeArray((cudaArray_t)hArray));
}

static CUresult array_desc(CUarray a, CUDA_ARRAY3D_DESCRIPTOR *out) {
  struct cudaChannelFormatDesc cd;
  struct cudaExtent ext;
  unsigned flags = 0;
  CUresult r = RGPU_DRV_RT(cudaArrayGetInfo(&cd, &ext, &flags, (cudaArray_t)a));
  if (r != CUDA_SUCCESS) return r;
  memset(out, 0, sizeof *out);
  driver_format(&cd, &out->Format, &out->NumChannels);
  out->Width = ext.width, out->Height = ext.height, out->Depth = ext.depth, out->Flags = flags;
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *p, CUarray hArray) {
  RGPU_DRV_ENTER_CTX();
  if (!p) {
    rgpu_rt_count_call();
    return CUDA_ERROR_INVALID_VALUE;
  }
  return array_desc(hArray, p);
}

RGPU_DRV CUresult rgpu_drv_cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *p, CUarray hArray) {
  RGPU_DRV_ENTER_CTX();
  if (!p) {
    rgpu_rt_count_call();
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUDA_ARRAY3D_DESCRIPTOR d;
  CUresult r = array_desc(hArray, &d);
  if (r != CUDA_SUCCESS) return r;
  *p = (CUDA_ARRAY_DESCRIPTOR){.Width = d.Width, .Height = d.Height, .Format = d.Format,
                               .NumChannels = d.NumChannels};
  return CUDA_SUCCESS;
}

/* ---- copies with an array ------------------------------------------------------- */

/* One side of a driver copy as the runtime's cudaMemcpy3D takes it.
 * es: the element size of the copy's array (positions and widths of array
 * sides are in its elements).  *dev: the side's direction, as
 * rgpu_drv_copy_side gives it (arrays are device memory). */
static CUresult rt_side(CUmemorytype t, const void *host, CUdeviceptr dptr, CUarray arr,
                        size_t x, size_t y, size_t z, size_t pitch, size_t height, size_t es,
                        cudaArray_t *rt_arr, struct cudaPitchedPtr *pp, struct cudaPos *pos,
                        int *dev) {
  if (t == CU_MEMORYTYPE_ARRAY) {
    if (!arr || x % es) return CUDA_ERROR_INVALID_VALUE;
    *rt_arr = (cudaArray_t)arr;
    *pos = (struct cudaPos){x / es, y, z};
    *dev = 1;
    return CUDA_SUCCESS;
  }
  const char *base;
  CUresult r = rgpu_drv_copy_side(t, host, dptr, &base, dev);
  if (r != CUDA_SUCCESS) return r;
  *pp = (struct cudaPitchedPtr){(void *)base, pitch, pitch, height};
  *pos = (struct cudaPos){x, y, z};
  return CUDA_SUCCESS;
}

/* Element size of the array a copy names (source first): its channels'
 * bits, as the runtime keeps its description. */
static CUresult copy_elem_size(CUmemorytype st, CUarray sa, CUarray da, size_t *es) {
  struct cudaChannelFormatDesc cd;
  CUresult r = RGPU_DRV_RT(
      cudaArrayGetInfo(&cd, NULL, NULL, (cudaArray_t)(st == CU_MEMORYTYPE_ARRAY ? sa : da)));
  if (r == CUDA_SUCCESS) *es = (size_t)(cd.x + cd.y + cd.z + cd.w) / 8;
  return r;
}

CUresult rgpu_drv_copy_3d_array(const CUDA_MEMCPY3D *p, CUstream s, int pt, int async) {
  size_t es = 1;
  CUresult r = copy_elem_size(p->srcMemoryType, p->srcArray, p->dstArray, &es);
  if (r != CUDA_SUCCESS) return r;
  if (p->WidthInBytes % es) return CUDA_ERROR_INVALID_VALUE;
  struct cudaMemcpy3DParms q;
  memset(&q, 0, sizeof q);
  int sdev = 0, ddev = 0;
  r = rt_side(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes, p->srcY,
              p->srcZ, p->srcPitch, p->srcHeight ? p->srcHeight : p->Height, es, &q.srcArray,
              &q.srcPtr, &q.srcPos, &sdev);
  if (r == CUDA_SUCCESS)
    r = rt_side(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes, p->dstY,
                p->dstZ, p->dstPitch, p->dstHeight ? p->dstHeight : p->Height, es, &q.dstArray,
                &q.dstPtr, &q.dstPos, &ddev);
  if (r != CUDA_SUCCESS) return r;
  q.extent = (struct cudaExtent){p->WidthInBytes / es, p->Height, p->Depth ? p->Depth : 1};
  q.kind = rgpu_drv_copy_kind(sdev, ddev);
  if (async) return pt ? RGPU_DRV_RT(cudaMemcpy3DAsync_ptsz(&q, s)) : RGPU_DRV_RT(cudaMemcpy3DAsync(&q, s));
  return pt ? RGPU_DRV_RT(cudaMemcpy3D_ptds(&q)) : RGPU_DRV_RT(cudaMemcpy3D(&q));
}

/* ---- texture and surface objects ------------------------------------------------ */

static CUresult rt_resource(const CUDA_RESOURCE_DESC *d, struct cudaResourceDesc *out) {
  memset(out, 0, sizeof *out);
  switch (d->resType) {
  case CU_RESOURCE_TYPE_ARRAY:
    out->resType = cudaResourceTypeArray;
    out->res.array.array = (cudaArray_t)d->res.array.hArray;
    return CUDA_SUCCESS;
  case CU_RESOURCE_TYPE_LINEAR:
    out->resType = cudaResourceTypeLinear;
    out->res.linear.devPtr = (void *)(uintptr_t)d->res.linear.devPtr;
    out->res.linear.sizeInBytes = d->res.linear.sizeInBytes;
    return channel_desc(d->res.linear.format, d->res.linear.numChannels, &out->res.linear.desc)
               ? CUDA_SUCCESS
               : CUDA_ERROR_INVALID_VALUE;
  case CU_RESOURCE_TYPE_PITCH2D:
    out->resType = cudaResourceTypePitch2D;
    out->res.pitch2D.devPtr = (void *)(uintptr_t)d->res.pitch2D.devPtr;
    out->res.pitch2D.width = d->res.pitch2D.width;
    out->res.pitch2D.height = d->res.pitch2D.height;
    out->res.pitch2D.pitchInBytes = d->res.pitch2D.pitchInBytes;
    return channel_desc(d->res.pitch2D.format, d->res.pitch2D.numChannels,
                        &out->res.pitch2D.desc)
               ? CUDA_SUCCESS
               : CUDA_ERROR_INVALID_VALUE;
  case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY: return CUDA_ERROR_NOT_SUPPORTED;
  default: return CUDA_ERROR_INVALID_VALUE;
  }
}

static void drv_resource(const struct cudaResourceDesc *d, CUDA_RESOURCE_DESC *out) {
  memset(out, 0, sizeof *out);
  switch (d->resType) {
  case cudaResourceTypeArray:
    out->resType = CU_RESOURCE_TYPE_ARRAY;
    out->res.array.hArray = (CUarray)d->res.array.array;
    break;
  case cudaResourceTypeLinear:
    out->resType = CU_RESOURCE_TYPE_LINEAR;
    out->res.linear.devPtr = (CUdeviceptr)(uintptr_t)d->res.linear.devPtr;
    out->res.linear.sizeInBytes = d->res.linear.sizeInBytes;
    driver_format(&d->res.linear.desc, &out->res.linear.format, &out->res.linear.numChannels);
    break;
  default:
    out->resType = CU_RESOURCE_TYPE_PITCH2D;
    out->res.pitch2D.devPtr = (CUdeviceptr)(uintptr_t)d->res.pitch2D.devPtr;
    out->res.pitch2D.width = d->res.pitch2D.width;
    out->res.pitch2D.height = d->res.pitch2D.height;
    out->res.pitch2D.pitchInBytes = d->res.pitch2D.pitchInBytes;
    driver_format(&d->res.pitch2D.desc, &out->res.pitch2D.format, &out->res.pitch2D.numChannels);
  }
}

RGPU_DRV CUresult rgpu_drv_cuTexObjectCreate(CUtexObject *pTexObject, const CUDA_RESOURCE_DESC *pResDesc,
                                             const CUDA_TEXTURE_DESC *pTexDesc,
                                             const CUDA_RESOURCE_VIEW_DESC *pResViewDesc) {
  RGPU_DRV_ENTER_CTX();
  if (!pTexObject || !pResDesc || !pTexDesc) {
    rgpu_rt_count_call();
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (pResViewDesc) {
    rgpu_rt_count_call();
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  struct cudaResourceDesc res;
  CUresult r = rt_resource(pResDesc, &res);
  if (r != CUDA_SUCCESS) {
    rgpu_rt_count_call();
    return r;
  }
  struct cudaTextureDesc t;
  memset(&t, 0, sizeof t);
  for (int i = 0; i < 3; i++) t.addressMode[i] = (enum cudaTextureAddressMode)pTexDesc->addressMode[i];
  t.filterMode = (enum cudaTextureFilterMode)pTexDesc->filterMode;
  unsigned f = pTexDesc->flags;
  t.readMode = (f & CU_TRSF_READ_AS_INTEGER) ? cudaReadModeElementType : cudaReadModeNormalizedFloat;
  t.normalizedCoords = (f & CU_TRSF_NORMALIZED_COORDINATES) != 0;
  t.sRGB = (f & CU_TRSF_SRGB) != 0;
  t.disableTrilinearOptimization = (f & CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION) != 0;
  t.seamlessCubemap = (f & CU_TRSF_SEAMLESS_CUBEMAP) != 0;
  t.maxAnisotropy = pTexDesc->maxAnisotropy;
  t.mipmapFilterMode = (enum cudaTextureFilterMode)pTexDesc->mipmapFilterMode;
  t.mipmapLevelBias = pTexDesc->mipmapLevelBias;
  t.minMipmapLevelClamp = pTexDesc->minMipmapLevelClamp;
  t.maxMipmapLevelClamp = pTexDesc->maxMipmapLevelClamp;
  memcpy(t.borderColor, pTexDesc->borderColor, sizeof t.borderColor);
  /* The runtime reads integer data of a float format as elements whatever
   * the mode says; the driver's flag is the runtime's element mode. */
  cudaTextureObject_t tex = 0;
  r = RGPU_DRV_RT(cudaCreateTextureObject(&tex, &res, &t, NULL));
  if (r == CUDA_SUCCESS) *pTexObject = (CUtexObject)tex;
  return r;
}

RGPU_DRV CUresult rgpu_drv_cuTexObjectDestroy(CUtexObject texObject) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaDestroyTextureObject((cudaTextureObject_t)texObject));
}

RGPU_DRV CUresult rgpu_drv_cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC *pResDesc,
                                                      CUtexObject texObject) {
  RGPU_DRV_ENTER_CTX();
  if (!pResDesc) {
    rgpu_rt_count_call();
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct cudaResourceDesc res;
  CUresult r = RGPU_DRV_RT(cudaGetTextureObjectResourceDesc(&res, (cudaTextureObject_t)texObject));
  if (r == CUDA_SUCCESS) drv_resource(&res, pResDesc);
  return r;
}

RGPU_DRV CUresult rgpu_drv_cuSurfObjectCreate(CUsurfObject *pSurfObject,
                                              const CUDA_RESOURCE_DESC *pResDesc) {
  RGPU_DRV_ENTER_CTX();
  if (!pSurfObject || !pResDesc) {
    rgpu_rt_count_call();
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct cudaResourceDesc res;
  CUresult r = rt_resource(pResDesc, &res);
  if (r != CUDA_SUCCESS) {
    rgpu_rt_count_call();
    return r;
  }
  cudaSurfaceObject_t surf = 0;
  r = RGPU_DRV_RT(cudaCreateSurfaceObject(&surf, &res));
  if (r == CUDA_SUCCESS) *pSurfObject = (CUsurfObject)surf;
  return r;
}

RGPU_DRV CUresult rgpu_drv_cuSurfObjectDestroy(CUsurfObject surfObject) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaDestroySurfaceObject((cudaSurfaceObject_t)surfObject));
}

RGPU_DRV CUresult rgpu_drv_cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC *pResDesc,
                                                       CUsurfObject surfObject) {
  RGPU_DRV_ENTER_CTX();
  if (!pResDesc) {
    rgpu_rt_count_call();
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct cudaResourceDesc res;
  CUresult r = RGPU_DRV_RT(cudaGetSurfaceObjectResourceDesc(&res, (cudaSurfaceObject_t)surfObject));
  if (r == CUDA_SUCCESS) drv_resource(&res, pResDesc);
  return r;
}
