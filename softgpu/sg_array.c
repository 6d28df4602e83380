/* CUDA arrays, the 2D/3D copy engine (cuMemcpy2D/3D and graph memcpy
 * nodes), texture objects and surface objects.
 *
 * An array is host memory owned by the array, elements row-major (x
 * fastest, then y, then z / layer), charged against the device's memory
 * limit like cuMemAlloc.  It is not in the allocation table: kernels reach
 * it only through texture and surface objects.
 *
 * Texture/surface objects live in a slot table; the 64-bit handle is
 * (generation << 32 | slot + 1), so a stale handle (its slot reused) or a
 * forged one is recognised without dereferencing anything.  The
 * interpreter resolves handles through sg_texobj_lookup_cb into an
 * sg_ptx_tex descriptor built when the object was created. */
#include <stdlib.h>
#include <string.h>

#include "sg_internal.h"

/* ---- arrays ------------------------------------------------------------- */

struct CUarray_st {
  sg_ctx *ctx;
  uint64_t id;               /* unique, never reused: lets queued work notice a destroyed array */
  CUDA_ARRAY3D_DESCRIPTOR desc; /* as created */
  unsigned elem_size;
  uint64_t width, height, depth; /* elements, 1 in unused dimensions (depth: layers if layered) */
  uint64_t pitch, slice, bytes;
  uint8_t *data;
  uint64_t footprint;        /* charged bytes */
  struct CUarray_st *next;   /* in the list of live arrays (arr_lock) */
};
typedef struct CUarray_st sg_array;

static pthread_mutex_t arr_lock = PTHREAD_MUTEX_INITIALIZER;
static sg_array *arrays;
static uint64_t next_array_id = 1;

static unsigned format_size(CUarray_format f) {
  switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: return 4;
    default: return 0; /* formats softgpu does not sample (block compressed, NV12, ...) */
  }
}

static int channels_ok(unsigned n) { return n == 1 || n == 2 || n == 4; }

/* The most elements a 1D linear texture (a LINEAR resource) may have, in
 * any format softgpu samples: what cuTexObjectCreate accepts, and so what
 * cuDeviceGetTexture1DLinearMaxWidth reports. */
#define SG_TEX1D_LINEAR_MAX_ELEMS ((size_t)1 << 27)

/* An array of the caller's: live, and (for queued work) still the same. */
static int array_ok(const sg_array *a) { return sg_handle_ok(a, SG_H_ARRAY); }

static CUresult array_create(sg_array **out, const CUDA_ARRAY3D_DESCRIPTOR *d) {
  sg_ctx *c;
  CUresult r = sg_current(&c);
  if (r) return r;
  if (!out || !d) return CUDA_ERROR_INVALID_VALUE;
  const unsigned known = CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST | CUDA_ARRAY3D_TEXTURE_GATHER;
  if (d->Flags & ~known) {
    static atomic_int once;
    if (!atomic_exchange(&once, 1)) RGPU_WARN("CUDA array flags 0x%x are not supported", d->Flags & ~known);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  unsigned fs = format_size(d->Format);
  if (!fs || !channels_ok(d->NumChannels)) return CUDA_ERROR_INVALID_VALUE;
  int layered = (d->Flags & CUDA_ARRAY3D_LAYERED) != 0;
  size_t W = d->Width, H = d->Height, D = d->Depth;
  if (!W) return CUDA_ERROR_INVALID_VALUE;
  if (layered) {
    /* 1D layered: Height 0; 2D layered: Height > 0; Depth = layers */
    if (!D || D > 2048 || W > 32768 || H > 32768) return CUDA_ERROR_INVALID_VALUE;
  } else {
    if (!H && D) return CUDA_ERROR_INVALID_VALUE;          /* no 1D array with a depth */
    if (D) {
      if (W > 16384 || H > 16384 || D > 16384) return CUDA_ERROR_INVALID_VALUE;
    } else if (H) {
      if (W > 131072 || H > 65536) return CUDA_ERROR_INVALID_VALUE;
    } else if (W > 131072) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  sg_array *a = calloc(1, sizeof *a);
  if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
  a->ctx = c;
  a->desc = *d;
  a->elem_size = fs * d->NumChannels;
  a->width = W;
  a->height = H ? H : 1;
  a->depth = D ? D : 1;
  a->pitch = a->width * a->elem_size;
  a->slice = a->pitch * a->height;
  a->bytes = a->slice * a->depth; /* limits above keep this far from overflow */
  a->footprint = (a->bytes + 511) / 512 * 512;
  r = sg_mem_charge(c->dev, a->footprint);
  if (r) {
    free(a);
    return r;
  }
  /* calloc: arrays start zeroed, and large ones come as lazy zero pages */
  a->data = calloc(1, (size_t)a->bytes);
  if (!a->data || sg_handle_add(a, SG_H_ARRAY) != 0) {
    sg_mem_uncharge(c->dev, a->footprint);
    free(a->data);
    free(a);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  pthread_mutex_lock(&arr_lock);
  a->id = next_array_id++;
  a->next = arrays;
  arrays = a;
  pthread_mutex_unlock(&arr_lock);
  *out = a;
  return CUDA_SUCCESS;
}

/* Unlinks a (arr_lock held by the caller).  Returns 0 if it was listed. */
static int array_unlink_locked(sg_array *a) {
  for (sg_array **pp = &arrays; *pp; pp = &(*pp)->next)
    if (*pp == a) {
      *pp = a->next;
      return 0;
    }
  return -1;
}

static void array_free(sg_array *a) {
  sg_device *d = a->ctx->dev;
  sg_mem_uncharge(d, a->footprint);
  free(a->data);
  free(a);
}

SG_EXPORT CUresult CUDAAPI cuArray3DCreate(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray) {
  sg_array *a;
  CUresult r = array_create(&a, pAllocateArray);
  if (r == CUDA_SUCCESS) *pHandle = a;
  return r;
}

SG_EXPORT CUresult CUDAAPI cuArrayCreate(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray) {
  if (!pAllocateArray) {
    sg_ctx *c;
    CUresult r = sg_current(&c);
    return r ? r : CUDA_ERROR_INVALID_VALUE;
  }
  CUDA_ARRAY3D_DESCRIPTOR d;
  memset(&d, 0, sizeof d);
  d.Width = pAllocateArray->Width;
  d.Height = pAllocateArray->Height;
  d.Format = pAllocateArray->Format;
  d.NumChannels = pAllocateArray->NumChannels;
  return cuArray3DCreate(pHandle, &d);
}

SG_EXPORT CUresult CUDAAPI cuArrayDestroy(CUarray hArray) {
  sg_ctx *c;
  CUresult r = sg_current(&c);
  if (r) return r;
  if (!array_ok(hArray)) return CUDA_ERROR_INVALID_HANDLE;
  /* Like cudaFreeArray: queued work on the array finishes first. */
  sg_ctx_drain(hArray->ctx);
  pthread_mutex_lock(&arr_lock);
  int listed = array_unlink_locked(hArray) == 0;
  if (listed) sg_handle_del(hArray);
  pthread_mutex_unlock(&arr_lock);
  if (!listed) return CUDA_ERROR_INVALID_HANDLE; /* destroyed by another thread meanwhile */
  sg_mem_quiesce(); /* a copy or kernel that saw the handle live has finished */
  array_free(hArray);
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuArray3DGetDescriptor(CUDA_ARRAY3D_DESCRIPTOR *pArrayDescriptor, CUarray hArray) {
  sg_ctx *c;
  CUresult r = sg_current(&c);
  if (r) return r;
  if (!array_ok(hArray)) return CUDA_ERROR_INVALID_HANDLE;
  if (!pArrayDescriptor) return CUDA_ERROR_INVALID_VALUE;
  *pArrayDescriptor = hArray->desc;
  return CUDA_SUCCESS;
}

/* The 3D descriptor's first two dimensions (the same checks, in the same
 * order). */
SG_EXPORT CUresult CUDAAPI cuArrayGetDescriptor(CUDA_ARRAY_DESCRIPTOR *pArrayDescriptor, CUarray hArray) {
  CUDA_ARRAY3D_DESCRIPTOR d;
  CUresult r = cuArray3DGetDescriptor(pArrayDescriptor ? &d : NULL, hArray);
  if (r) return r;
  *pArrayDescriptor = (CUDA_ARRAY_DESCRIPTOR){.Width = d.Width, .Height = d.Height,
                                              .Format = d.Format, .NumChannels = d.NumChannels};
  return CUDA_SUCCESS;
}

/* ---- the 2D/3D copy engine ---------------------------------------------- */

static int mul_add(uint64_t a, uint64_t b, uint64_t c, uint64_t *out) {
  uint64_t m;
  if (__builtin_mul_overflow(a, b, &m) || __builtin_add_overflow(m, c, out)) return -1;
  return 0;
}

/* Resolves one side of a copy of WidthInBytes x Height x Depth. */
static CUresult side_resolve(CUmemorytype t, const void *host, CUdeviceptr dev, CUarray arr, size_t x, size_t y,
                             size_t z, size_t lod, size_t pitch, size_t height, const CUDA_MEMCPY3D *p,
                             sg_copy_side *s) {
  memset(s, 0, sizeof *s);
  size_t w = p->WidthInBytes, h = p->Height, d = p->Depth;
  if (lod) return CUDA_ERROR_INVALID_VALUE;
  if (t == CU_MEMORYTYPE_ARRAY) {
    if (!array_ok(arr)) return CUDA_ERROR_INVALID_HANDLE;
    /* whole elements only, inside the array's extent */
    if (x % arr->elem_size || w % arr->elem_size) return CUDA_ERROR_INVALID_VALUE;
    if (x > arr->pitch || w > arr->pitch - x) return CUDA_ERROR_INVALID_VALUE;
    if (y > arr->height || h > arr->height - y) return CUDA_ERROR_INVALID_VALUE;
    if (z > arr->depth || d > arr->depth - z) return CUDA_ERROR_INVALID_VALUE;
    s->arr = arr;
    s->arr_id = arr->id;
    s->pitch = (size_t)arr->pitch;
    s->slice = (size_t)arr->slice;
    s->base = (uint64_t)(uintptr_t)arr->data + z * arr->slice + y * arr->pitch + x;
    s->span = (d - 1) * arr->slice + (h - 1) * arr->pitch + w;
    return CUDA_SUCCESS;
  }
  uint64_t addr;
  switch (t) {
    case CU_MEMORYTYPE_HOST: addr = (uint64_t)(uintptr_t)host; break;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED: addr = dev; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  if (!addr) return CUDA_ERROR_INVALID_VALUE;
  if ((h > 1 || d > 1) && pitch < w + x) return CUDA_ERROR_INVALID_VALUE;
  if (d > 1 && height < h + y) return CUDA_ERROR_INVALID_VALUE;
  uint64_t slice, off, span;
  if (__builtin_mul_overflow((uint64_t)pitch, (uint64_t)(d > 1 ? height : 0), &slice)) return CUDA_ERROR_INVALID_VALUE;
  if (mul_add(z, slice, 0, &off) || mul_add(y, pitch, off, &off) || __builtin_add_overflow(off, x, &off))
    return CUDA_ERROR_INVALID_VALUE;
  if (mul_add(d - 1, slice, 0, &span) || mul_add(h - 1, pitch, span, &span) || __builtin_add_overflow(span, w, &span))
    return CUDA_ERROR_INVALID_VALUE;
  if (__builtin_add_overflow(addr, off, &s->base)) return CUDA_ERROR_INVALID_VALUE;
  s->pitch = pitch;
  s->slice = (size_t)slice;
  s->span = span;
  sg_alloc a;
  if (t == CU_MEMORYTYPE_DEVICE) {
    if (sg_mem_check(s->base, span, 0, NULL) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
    s->dev = 1;
  } else if (sg_mem_find(s->base, &a) == 0) {
    /* Host memory softgpu knows (pinned, registered) and unified pointers
     * into device memory are checked like device memory; other host
     * memory is the caller's to keep valid. */
    if (sg_mem_check(s->base, span, 0, NULL) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
    s->dev = 1;
  } else if (t == CU_MEMORYTYPE_HOST || t == CU_MEMORYTYPE_UNIFIED) {
    s->pageable = 1;
  }
  return CUDA_SUCCESS;
}

CUresult sg_copy3d_resolve(const CUDA_MEMCPY3D *p, sg_copy3d *c) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  if (p->WidthInBytes == 0 || p->Height == 0 || p->Depth == 0) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = side_resolve(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes, p->srcY,
                            p->srcZ, p->srcLOD, p->srcPitch, p->srcHeight, p, &c->src);
  if (r) return r;
  r = side_resolve(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes, p->dstY, p->dstZ,
                   p->dstLOD, p->dstPitch, p->dstHeight, p, &c->dst);
  if (r) return r;
  if (c->dst.dev && sg_mem_check(c->dst.base, c->dst.span, 1, NULL) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
  c->width = p->WidthInBytes;
  c->height = p->Height;
  c->depth = p->Depth;
  c->p = *p;
  return CUDA_SUCCESS;
}

CUresult sg_memcpy3d_check(const CUDA_MEMCPY3D *p) {
  sg_copy3d c;
  return sg_copy3d_resolve(p, &c);
}

/* Still the memory the copy was checked against (it runs later). */
static int side_live(const sg_copy_side *s, int write) {
  if (s->arr) return array_ok(s->arr) && s->arr->id == s->arr_id;
  return !s->dev || sg_mem_check(s->base, s->span, write, NULL) == CUDA_SUCCESS;
}

void sg_copy3d_run(sg_ctx *ctx, void *arg) {
  sg_copy3d *c = arg;
  sg_mem_use_begin();
  /* Re-checked: the memory may have been freed since the call. */
  if (!side_live(&c->dst, 1) || !side_live(&c->src, 0)) {
    sg_mem_use_end();
    RGPU_WARN("2D/3D copy 0x%llx -> 0x%llx hit freed memory", (unsigned long long)c->src.base,
              (unsigned long long)c->dst.base);
    sg_ctx_set_sticky(ctx, CUDA_ERROR_ILLEGAL_ADDRESS);
    return;
  }
  for (size_t z = 0; z < c->depth; z++)
    for (size_t y = 0; y < c->height; y++) {
      char *d = (char *)(uintptr_t)(c->dst.base + z * c->dst.slice + y * c->dst.pitch);
      const char *s = (const char *)(uintptr_t)(c->src.base + z * c->src.slice + y * c->src.pitch);
      memmove(d, s, c->width);
    }
  sg_mem_use_end();
}

/* cuMemcpy2D/3D(Async): a copy op on the stream, synchronous unless async
 * and both sides are device, array or pinned memory (as CUDA does with
 * pageable host memory). */
static CUresult memcpy3d_submit(const CUDA_MEMCPY3D *p, CUstream hs, int async) {
  sg_stream *s;
  CUresult r = sg_stream_resolve(hs, &s);
  if (r) return r;
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  if (p->WidthInBytes == 0 || p->Height == 0 || p->Depth == 0) return CUDA_SUCCESS; /* nothing to copy */
  sg_copy3d *c = malloc(sizeof *c);
  if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
  r = sg_copy3d_resolve(p, c);
  if (r) {
    free(c);
    return r;
  }
  sg_op *op = sg_op_new(SG_OP_FUNC);
  if (!op) {
    free(c);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  op->u.func.run = sg_copy3d_run;
  op->u.func.free = free;
  op->u.func.arg = c;
  int wait = !async || c->src.pageable || c->dst.pageable;
  return sg_submit(s, op, wait);
}

static void copy2d_to_3d(const CUDA_MEMCPY2D *p, CUDA_MEMCPY3D *q) {
  memset(q, 0, sizeof *q);
  q->srcXInBytes = p->srcXInBytes;
  q->srcY = p->srcY;
  q->srcMemoryType = p->srcMemoryType;
  q->srcHost = p->srcHost;
  q->srcDevice = p->srcDevice;
  q->srcArray = p->srcArray;
  q->srcPitch = p->srcPitch;
  q->srcHeight = p->srcY + p->Height;
  q->dstXInBytes = p->dstXInBytes;
  q->dstY = p->dstY;
  q->dstMemoryType = p->dstMemoryType;
  q->dstHost = p->dstHost;
  q->dstDevice = p->dstDevice;
  q->dstArray = p->dstArray;
  q->dstPitch = p->dstPitch;
  q->dstHeight = p->dstY + p->Height;
  q->WidthInBytes = p->WidthInBytes;
  q->Height = p->Height;
  q->Depth = 1;
}

static CUresult memcpy2d_submit(const CUDA_MEMCPY2D *p, CUstream hs, int async) {
  if (!p) {
    sg_stream *s;
    CUresult r = sg_stream_resolve(hs, &s);
    return r ? r : CUDA_ERROR_INVALID_VALUE;
  }
  CUDA_MEMCPY3D q;
  copy2d_to_3d(p, &q);
  return memcpy3d_submit(&q, hs, async);
}

SG_EXPORT CUresult CUDAAPI cuMemcpy2D(const CUDA_MEMCPY2D *pCopy) { return memcpy2d_submit(pCopy, NULL, 0); }
SG_EXPORT CUresult CUDAAPI cuMemcpy2DUnaligned(const CUDA_MEMCPY2D *pCopy) { return memcpy2d_submit(pCopy, NULL, 0); }
SG_EXPORT CUresult CUDAAPI cuMemcpy2DAsync(const CUDA_MEMCPY2D *pCopy, CUstream hStream) {
  return memcpy2d_submit(pCopy, hStream, 1);
}
SG_EXPORT CUresult CUDAAPI cuMemcpy3D(const CUDA_MEMCPY3D *pCopy) { return memcpy3d_submit(pCopy, NULL, 0); }
SG_EXPORT CUresult CUDAAPI cuMemcpy3DAsync(const CUDA_MEMCPY3D *pCopy, CUstream hStream) {
  return memcpy3d_submit(pCopy, hStream, 1);
}

/* Per-thread-default-stream variants (what --default-stream per-thread
 * code calls). */
SG_EXPORT CUresult CUDAAPI cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *pCopy);
SG_EXPORT CUresult CUDAAPI cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *pCopy);
SG_EXPORT CUresult CUDAAPI cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *pCopy);
SG_EXPORT CUresult CUDAAPI cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *pCopy, CUstream hStream);
SG_EXPORT CUresult CUDAAPI cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *pCopy, CUstream hStream);
CUresult CUDAAPI cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *pCopy) {
  return memcpy2d_submit(pCopy, CU_STREAM_PER_THREAD, 0);
}
CUresult CUDAAPI cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *pCopy) {
  return memcpy2d_submit(pCopy, CU_STREAM_PER_THREAD, 0);
}
CUresult CUDAAPI cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *pCopy) {
  return memcpy3d_submit(pCopy, CU_STREAM_PER_THREAD, 0);
}
CUresult CUDAAPI cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *pCopy, CUstream hStream) {
  return memcpy2d_submit(pCopy, hStream ? hStream : CU_STREAM_PER_THREAD, 1);
}
CUresult CUDAAPI cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *pCopy, CUstream hStream) {
  return memcpy3d_submit(pCopy, hStream ? hStream : CU_STREAM_PER_THREAD, 1);
}

/* ---- texture and surface objects ---------------------------------------- */

/* The width limit above, for the formats and channel counts a texture
 * object may have here (others: CUDA_ERROR_INVALID_VALUE, as
 * cuTexObjectCreate answers them). */
SG_EXPORT CUresult CUDAAPI cuDeviceGetTexture1DLinearMaxWidth(size_t *maxWidthInElements,
                                                             CUarray_format format,
                                                             unsigned numChannels, CUdevice dev) {
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!sg_device_get(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (!maxWidthInElements || !format_size(format) || !channels_ok(numChannels))
    return CUDA_ERROR_INVALID_VALUE;
  *maxWidthInElements = SG_TEX1D_LINEAR_MAX_ELEMS;
  return CUDA_SUCCESS;
}

typedef struct {
  int live;
  uint32_t gen;             /* bumped on every reuse of the slot */
  int is_surface;
  sg_ctx *ctx;
  CUDA_RESOURCE_DESC res;
  CUDA_TEXTURE_DESC tex;
  sg_array *arr;            /* ARRAY resource: re-checked at every lookup */
  uint64_t arr_id;
  CUdeviceptr dptr;         /* LINEAR / PITCH2D resource: re-checked too */
  uint64_t dbytes;
#ifdef SG_HAVE_PTX
  sg_ptx_tex t;             /* what the interpreter gets (data filled at lookup) */
#endif
} texobj;

static pthread_rwlock_t tex_lock = PTHREAD_RWLOCK_INITIALIZER;
static texobj *texobjs;
static size_t ntexobjs, captexobjs;

static int addr_mode_ok(CUaddress_mode m) { return (unsigned)m <= CU_TR_ADDRESS_MODE_BORDER; }

/* Integer-returning textures (32-bit integer formats, or 8/16-bit ones read
 * as integers) cannot be filtered linearly. */
static int returns_int(CUarray_format f, unsigned flags) {
  if (f == CU_AD_FORMAT_FLOAT || f == CU_AD_FORMAT_HALF) return 0;
  if (f == CU_AD_FORMAT_UNSIGNED_INT32 || f == CU_AD_FORMAT_SIGNED_INT32) return 1;
  return (flags & CU_TRSF_READ_AS_INTEGER) != 0;
}

/* Validates a resource description and fills the object's resource part. */
static CUresult resource_resolve(const CUDA_RESOURCE_DESC *rd, texobj *o, int surface) {
  if (rd->flags) return CUDA_ERROR_INVALID_VALUE;
  switch (rd->resType) {
    case CU_RESOURCE_TYPE_ARRAY: {
      sg_array *a = rd->res.array.hArray;
      if (!array_ok(a)) return CUDA_ERROR_INVALID_HANDLE;
      if (surface && !(a->desc.Flags & CUDA_ARRAY3D_SURFACE_LDST)) return CUDA_ERROR_INVALID_VALUE;
      o->arr = a;
      o->arr_id = a->id;
      return CUDA_SUCCESS;
    }
    case CU_RESOURCE_TYPE_LINEAR: {
      if (surface) return CUDA_ERROR_INVALID_VALUE;
      unsigned fs = format_size(rd->res.linear.format);
      if (!fs || !channels_ok(rd->res.linear.numChannels)) return CUDA_ERROR_INVALID_VALUE;
      uint64_t es = (uint64_t)fs * rd->res.linear.numChannels;
      size_t n = rd->res.linear.sizeInBytes;
      CUdeviceptr p = rd->res.linear.devPtr;
      if (!p || n < es || p % es || n / es > SG_TEX1D_LINEAR_MAX_ELEMS)
        return CUDA_ERROR_INVALID_VALUE;
      if (sg_mem_check(p, n, 0, NULL) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
      o->dptr = p;
      o->dbytes = n;
      return CUDA_SUCCESS;
    }
    case CU_RESOURCE_TYPE_PITCH2D: {
      if (surface) return CUDA_ERROR_INVALID_VALUE;
      unsigned fs = format_size(rd->res.pitch2D.format);
      if (!fs || !channels_ok(rd->res.pitch2D.numChannels)) return CUDA_ERROR_INVALID_VALUE;
      uint64_t es = (uint64_t)fs * rd->res.pitch2D.numChannels;
      size_t w = rd->res.pitch2D.width, h = rd->res.pitch2D.height, pitch = rd->res.pitch2D.pitchInBytes;
      CUdeviceptr p = rd->res.pitch2D.devPtr;
      /* TEXTURE_PITCH_ALIGNMENT (32) as cuDeviceGetAttribute reports it */
      if (!p || !w || !h || w > 131072 || h > 65536 || p % es || pitch % 32 || pitch < w * es)
        return CUDA_ERROR_INVALID_VALUE;
      uint64_t bytes = (uint64_t)(h - 1) * pitch + w * es;
      if (sg_mem_check(p, bytes, 0, NULL) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
      o->dptr = p;
      o->dbytes = bytes;
      return CUDA_SUCCESS;
    }
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY: {
      static atomic_int once;
      if (!atomic_exchange(&once, 1)) RGPU_WARN("mipmapped-array texture resources are not implemented");
      return CUDA_ERROR_NOT_SUPPORTED;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

#ifdef SG_HAVE_PTX
/* The interpreter's view of an object (data is set at lookup). */
static void build_ptx_desc(texobj *o) {
  sg_ptx_tex *t = &o->t;
  memset(t, 0, sizeof *t);
  t->is_surface = o->is_surface;
  t->layers = 1;
  const CUDA_RESOURCE_DESC *rd = &o->res;
  if (rd->resType == CU_RESOURCE_TYPE_ARRAY) {
    const sg_array *a = o->arr;
    t->resource = SG_PTX_RES_ARRAY;
    t->format = a->desc.Format;
    t->channels = a->desc.NumChannels;
    t->elem_size = a->elem_size;
    t->bytes = a->bytes;
    t->width = a->width;
    t->height = a->height;
    t->depth = 1;
    t->pitch = a->pitch;
    t->slice = a->slice;
    if (a->desc.Flags & CUDA_ARRAY3D_LAYERED) {
      t->layered = 1;
      t->layers = a->depth;
      t->dims = a->desc.Height ? 2 : 1;
    } else {
      t->depth = a->depth;
      t->dims = a->desc.Depth ? 3 : a->desc.Height ? 2 : 1;
    }
  } else if (rd->resType == CU_RESOURCE_TYPE_LINEAR) {
    t->resource = SG_PTX_RES_LINEAR;
    t->format = rd->res.linear.format;
    t->channels = rd->res.linear.numChannels;
    t->elem_size = format_size(rd->res.linear.format) * t->channels;
    t->bytes = o->dbytes;
    t->width = o->dbytes / t->elem_size;
    t->height = t->depth = 1;
    t->pitch = t->slice = o->dbytes;
    t->dims = 1;
  } else {
    t->resource = SG_PTX_RES_PITCH2D;
    t->format = rd->res.pitch2D.format;
    t->channels = rd->res.pitch2D.numChannels;
    t->elem_size = format_size(rd->res.pitch2D.format) * t->channels;
    t->bytes = o->dbytes;
    t->width = rd->res.pitch2D.width;
    t->height = rd->res.pitch2D.height;
    t->depth = 1;
    t->pitch = rd->res.pitch2D.pitchInBytes;
    t->slice = o->dbytes;
    t->dims = 2;
  }
  if (!o->is_surface) {
    for (int i = 0; i < 3; i++) t->addr_mode[i] = o->tex.addressMode[i];
    t->filter = o->tex.filterMode;
    t->read_as_int = (o->tex.flags & CU_TRSF_READ_AS_INTEGER) != 0;
    t->normalized_coords = (o->tex.flags & CU_TRSF_NORMALIZED_COORDINATES) != 0;
    memcpy(t->border, o->tex.borderColor, sizeof t->border);
  }
}
#endif

/* Puts o in a free slot; returns the handle, 0 if out of memory. */
static uint64_t texobj_insert(const texobj *o) {
  pthread_rwlock_wrlock(&tex_lock);
  size_t i = 0;
  while (i < ntexobjs && texobjs[i].live) i++;
  if (i == ntexobjs) {
    if (ntexobjs == captexobjs) {
      size_t nc = captexobjs ? captexobjs * 2 : 64;
      texobj *nt = realloc(texobjs, nc * sizeof *nt);
      if (!nt || nc > 0xffffffffu) {
        if (nt) texobjs = nt;
        pthread_rwlock_unlock(&tex_lock);
        return 0;
      }
      texobjs = nt;
      captexobjs = nc;
    }
    memset(&texobjs[i], 0, sizeof texobjs[i]);
    ntexobjs++;
  }
  uint32_t gen = texobjs[i].gen + 1;
  if (!gen) gen = 1;
  texobjs[i] = *o;
  texobjs[i].gen = gen;
  texobjs[i].live = 1;
  pthread_rwlock_unlock(&tex_lock);
  return (uint64_t)gen << 32 | (uint64_t)(i + 1);
}

/* The live object of handle h (tex_lock held), or NULL. */
static texobj *texobj_find_locked(uint64_t h, int surface) {
  uint64_t slot = h & 0xffffffffu;
  uint32_t gen = (uint32_t)(h >> 32);
  if (!slot || slot > ntexobjs) return NULL;
  texobj *o = &texobjs[slot - 1];
  if (!o->live || o->gen != gen || o->is_surface != surface) return NULL;
  return o;
}

static CUresult object_create(uint64_t *out, const CUDA_RESOURCE_DESC *rd, const CUDA_TEXTURE_DESC *td,
                              const CUDA_RESOURCE_VIEW_DESC *vd, int surface) {
  sg_ctx *c;
  CUresult r = sg_current(&c);
  if (r) return r;
  if (!out || !rd || (!surface && !td)) return CUDA_ERROR_INVALID_VALUE;
  if (vd) {
    static atomic_int once;
    if (!atomic_exchange(&once, 1)) RGPU_WARN("texture resource views are not implemented");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  texobj o;
  memset(&o, 0, sizeof o);
  o.is_surface = surface;
  o.ctx = c;
  o.res = *rd;
  if (surface && rd->resType != CU_RESOURCE_TYPE_ARRAY) return CUDA_ERROR_INVALID_VALUE;
  r = resource_resolve(rd, &o, surface);
  if (r) return r;
  if (!surface) {
    o.tex = *td;
    for (int i = 0; i < 3; i++)
      if (!addr_mode_ok(td->addressMode[i])) return CUDA_ERROR_INVALID_VALUE;
    if ((unsigned)td->filterMode > CU_TR_FILTER_MODE_LINEAR) return CUDA_ERROR_INVALID_VALUE;
    const unsigned known = CU_TRSF_READ_AS_INTEGER | CU_TRSF_NORMALIZED_COORDINATES | CU_TRSF_SRGB |
                           CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION | CU_TRSF_SEAMLESS_CUBEMAP;
    if (td->flags & ~known) return CUDA_ERROR_INVALID_VALUE;
    if (td->flags & CU_TRSF_SRGB) {
      static atomic_int once;
      if (!atomic_exchange(&once, 1)) RGPU_WARN("sRGB texture reads are not implemented");
      return CUDA_ERROR_NOT_SUPPORTED;
    }
    CUarray_format f = rd->resType == CU_RESOURCE_TYPE_ARRAY    ? o.arr->desc.Format
                       : rd->resType == CU_RESOURCE_TYPE_LINEAR ? rd->res.linear.format
                                                                : rd->res.pitch2D.format;
    if (td->filterMode == CU_TR_FILTER_MODE_LINEAR && returns_int(f, td->flags)) return CUDA_ERROR_INVALID_VALUE;
  }
#ifdef SG_HAVE_PTX
  build_ptx_desc(&o);
#endif
  uint64_t h = texobj_insert(&o);
  if (!h) return CUDA_ERROR_OUT_OF_MEMORY;
  *out = h;
  return CUDA_SUCCESS;
}

static CUresult object_destroy(uint64_t h, int surface) {
  sg_ctx *c;
  CUresult r = sg_current(&c);
  if (r) return r;
  pthread_rwlock_wrlock(&tex_lock);
  texobj *o = texobj_find_locked(h, surface);
  if (o) o->live = 0;
  pthread_rwlock_unlock(&tex_lock);
  return o ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SG_EXPORT CUresult CUDAAPI cuTexObjectCreate(CUtexObject *pTexObject, const CUDA_RESOURCE_DESC *pResDesc,
                                             const CUDA_TEXTURE_DESC *pTexDesc,
                                             const CUDA_RESOURCE_VIEW_DESC *pResViewDesc) {
  uint64_t h = 0;
  CUresult r = object_create(&h, pResDesc, pTexDesc, pResViewDesc, 0);
  if (r == CUDA_SUCCESS) *pTexObject = h;
  return r;
}

SG_EXPORT CUresult CUDAAPI cuTexObjectDestroy(CUtexObject texObject) { return object_destroy(texObject, 0); }

SG_EXPORT CUresult CUDAAPI cuSurfObjectCreate(CUsurfObject *pSurfObject, const CUDA_RESOURCE_DESC *pResDesc) {
  if (!pSurfObject) {
    sg_ctx *c;
    CUresult r = sg_current(&c);
    return r ? r : CUDA_ERROR_INVALID_VALUE;
  }
  uint64_t h = 0;
  CUresult r = object_create(&h, pResDesc, NULL, NULL, 1);
  if (r == CUDA_SUCCESS) *pSurfObject = h;
  return r;
}

SG_EXPORT CUresult CUDAAPI cuSurfObjectDestroy(CUsurfObject surfObject) { return object_destroy(surfObject, 1); }

/* Copies one part of an object's description out. */
static CUresult object_get(uint64_t h, int surface, CUDA_RESOURCE_DESC *res, CUDA_TEXTURE_DESC *tex) {
  sg_ctx *c;
  CUresult r = sg_current(&c);
  if (r) return r;
  if (!res && !tex) return CUDA_ERROR_INVALID_VALUE;
  pthread_rwlock_rdlock(&tex_lock);
  texobj *o = texobj_find_locked(h, surface);
  if (o && res) *res = o->res;
  if (o && tex) *tex = o->tex;
  pthread_rwlock_unlock(&tex_lock);
  return o ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SG_EXPORT CUresult CUDAAPI cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC *pResDesc, CUtexObject texObject) {
  return object_get(texObject, 0, pResDesc, NULL);
}
SG_EXPORT CUresult CUDAAPI cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC *pTexDesc, CUtexObject texObject) {
  return object_get(texObject, 0, NULL, pTexDesc);
}
SG_EXPORT CUresult CUDAAPI cuTexObjectGetResourceViewDesc(CUDA_RESOURCE_VIEW_DESC *pResViewDesc,
                                                          CUtexObject texObject) {
  (void)pResViewDesc, (void)texObject;
  SG_UNSUPPORTED("cuTexObjectGetResourceViewDesc");
}
SG_EXPORT CUresult CUDAAPI cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC *pResDesc, CUsurfObject surfObject) {
  return object_get(surfObject, 1, pResDesc, NULL);
}

int sg_texobj_lookup_cb(void *ctx, uint64_t handle, void *out) {
  (void)ctx;
#ifdef SG_HAVE_PTX
  sg_ptx_tex *t = out;
  int ok = 0;
  pthread_rwlock_rdlock(&tex_lock);
  /* Either kind: the interpreter checks that it got the kind it wanted. */
  texobj *o = texobj_find_locked(handle, 0);
  if (!o) o = texobj_find_locked(handle, 1);
  if (o) {
    *t = o->t;
    if (o->arr) {
      /* Called from a running kernel (use lock held), so a destroy of the
       * array cannot complete under us: live here means live to the end. */
      if (array_ok(o->arr) && o->arr->id == o->arr_id) {
        t->data = o->arr->data;
        ok = 1;
      }
    } else {
      void *host;
      if (sg_mem_check(o->dptr, o->dbytes, 0, &host) == CUDA_SUCCESS) {
        t->data = host;
        ok = 1;
      }
    }
  }
  pthread_rwlock_unlock(&tex_lock);
  return ok ? 0 : -1;
#else
  (void)handle, (void)out;
  return -1;
#endif
}

void sg_array_release_ctx(sg_ctx *c) {
  pthread_rwlock_wrlock(&tex_lock);
  for (size_t i = 0; i < ntexobjs; i++)
    if (texobjs[i].live && texobjs[i].ctx == c) texobjs[i].live = 0;
  pthread_rwlock_unlock(&tex_lock);
  sg_array *mine = NULL;
  pthread_mutex_lock(&arr_lock);
  for (sg_array **pp = &arrays; *pp;) {
    sg_array *a = *pp;
    if (a->ctx == c) {
      *pp = a->next;
      sg_handle_del(a);
      a->next = mine;
      mine = a;
    } else {
      pp = &a->next;
    }
  }
  pthread_mutex_unlock(&arr_lock);
  if (!mine) return;
  sg_mem_quiesce();
  while (mine) {
    sg_array *n = mine->next;
    array_free(mine);
    mine = n;
  }
}
