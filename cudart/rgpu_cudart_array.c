/* CUDA arrays, texture objects and surface objects (cudaMallocArray,
 * cudaMalloc3DArray, the ToArray and FromArray copies, cudaMemcpy3D with an
 * array, cudaCreateTextureObject, cudaCreateSurfaceObject).
 *
 * An array lives on the server (ARRAY_CREATE, named by the client like a
 * stream); the cudaArray_t the program holds is this file's record of it,
 * which is looked up in a registry before it is read, so a stale or forged
 * cudaArray_t is refused instead of dereferenced.  Copies that name an
 * array are ARRAY_COPY requests (cuMemcpy3DAsync on the server): host
 * memory travels packed, at most RGPU_ARRAY_COPY_MAX_HOST_BYTES a request.
 * Copies into host memory wait for their data, also when called as
 * *Async (CUDA allows an async copy to be synchronous).  Texture and
 * surface objects are the server driver's own handles, since a kernel
 * receives them as plain 64-bit parameters; their descriptions are kept
 * here for the Get*Desc queries.  A graph's memcpy node between device
 * memory and arrays (captured or added) is instantiated as a library node
 * carrying the ARRAY_COPY request (rgpu_rt_array_copy_node); host sides
 * with arrays in graphs, mipmapped, sparse and planar arrays, and resource
 * views other than the whole array as it is are reported unsupported by
 * name. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_array.h"
#include "rgpu_array_proto.h"
#include "rgpu_calls.h"
#include "rgpu_cudart.h"
#include "rgpu_cudart_graph.h"
#include "rgpu_cudart_op.h"
#include "rgpu_cudart_unsupported.h"
#include "rgpu_device_query.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"
#include "rgpu_mutex.h"

typedef struct rgpu_rt_array {
  uint64_t id;  /* the server's name for it */
  int dev;
  struct cudaChannelFormatDesc desc;
  struct cudaExtent extent; /* as the program asked (height/depth 0 kept) */
  unsigned flags;
  uint32_t elem_size;
} rgpu_rt_array;

/* A texture or surface object the server made. */
typedef struct {
  uint64_t handle;
  int surf;
  int dev;
  const void *arr; /* the cudaArray_t it reads, or NULL */
  struct cudaResourceDesc res;
  struct cudaTextureDesc tex;
  int has_view; /* created with a resource view (view) */
  struct cudaResourceViewDesc view;
} rgpu_rt_view;

static rgpu_mutex g_lock = RGPU_MUTEX_INITIALIZER;
static rgpu_rt_array **g_arrays;
static size_t g_narrays, g_arrays_cap;
static rgpu_rt_view *g_views;
static size_t g_nviews, g_views_cap;

/* A call's result as the program sees it: a call that waited for the
 * server reports like any synchronizing call (pending async errors, sticky
 * faults); one that was only queued like any failing call.  Both set the
 * thread's last error, as NVIDIA's runtime does for every failure. */
static cudaError_t call_result(rgpu_client *c, rgpu_status rc, int waited) {
  return waited ? rgpu_rt_sync_ret(c, rc) : rgpu_rt_ret(rgpu_rt_from_call(rc));
}

/* ---- registry -------------------------------------------------------------- */

static int array_index_locked(const void *a) {
  assert(rgpu_mutex_held(&g_lock));
  for (size_t i = 0; i < g_narrays; i++)
    if (g_arrays[i] == a) return (int)i;
  return -1;
}

/* A copy of the record of a live array, or cudaErrorInvalidResourceHandle
 * (NULL or not one of ours: what NVIDIA's runtime answers for a stale one). */
static cudaError_t array_get(const void *a, rgpu_rt_array *out) {
  if (!a) return cudaErrorInvalidResourceHandle;
  rgpu_mutex_lock(&g_lock);
  int i = array_index_locked(a);
  if (i >= 0) *out = *g_arrays[i];
  rgpu_mutex_unlock(&g_lock);
  return i >= 0 ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

static int array_add(rgpu_rt_array *a) {
  rgpu_mutex_lock(&g_lock);
  int rc = RGPU_ARRAY_RESERVE(g_arrays, g_arrays_cap, g_narrays + 1, 16);
  if (rc == 0) g_arrays[g_narrays++] = a;
  rgpu_mutex_unlock(&g_lock);
  return rc;
}

static int view_add(const rgpu_rt_view *v) {
  rgpu_mutex_lock(&g_lock);
  int rc = RGPU_ARRAY_RESERVE(g_views, g_views_cap, g_nviews + 1, 16);
  if (rc == 0) g_views[g_nviews++] = *v;
  rgpu_mutex_unlock(&g_lock);
  return rc;
}

static rgpu_rt_view *view_find_locked(uint64_t handle, int surf) {
  assert(rgpu_mutex_held(&g_lock));
  for (size_t i = 0; i < g_nviews; i++)
    if (g_views[i].handle == handle && g_views[i].surf == surf) return &g_views[i];
  return NULL;
}

/* A copy of the view with this handle (take: and out of the registry). */
static int view_lookup(uint64_t handle, int surf, int take, rgpu_rt_view *out) {
  rgpu_mutex_lock(&g_lock);
  rgpu_rt_view *v = view_find_locked(handle, surf);
  if (v) {
    *out = *v;
    if (take) *v = g_views[--g_nviews];
  }
  rgpu_mutex_unlock(&g_lock);
  return v != NULL;
}

/* Forgets the views that read array a, or with a NULL those of device dev. */
static void views_drop_locked(const void *a, int dev) {
  assert(rgpu_mutex_held(&g_lock));
  for (size_t v = 0; v < g_nviews;)
    if (a ? g_views[v].arr == a : g_views[v].dev == dev)
      g_views[v] = g_views[--g_nviews];
    else
      v++;
}

void rgpu_rt_arrays_forget_device(int dev) {
  rgpu_mutex_lock(&g_lock);
  views_drop_locked(NULL, dev);
  for (size_t i = 0; i < g_narrays;) {
    if (g_arrays[i]->dev != dev) {
      i++;
      continue;
    }
    free(g_arrays[i]);
    g_arrays[i] = g_arrays[--g_narrays];
  }
  rgpu_mutex_unlock(&g_lock);
}

/* ---- formats ----------------------------------------------------------------- */

/* The driver's format and channel count of a channel description:
 * channels are x, then y, then w-less z (1, 2 or 4 of equal size).  Three
 * channels and mismatched sizes are cudaErrorInvalidChannelDescriptor, as
 * NVIDIA's runtime answers; the block-compressed and video kinds are not
 * supported by rgpu. */
static cudaError_t channel_format(const struct cudaChannelFormatDesc *d, uint32_t *format,
                                  uint32_t *channels, uint32_t *elem) {
  int bits[4] = {d->x, d->y, d->z, d->w};
  int n = 0;
  while (n < 4 && bits[n] > 0) n++;
  for (int i = n; i < 4; i++)
    if (bits[i] != 0) return cudaErrorInvalidChannelDescriptor;
  if (n == 0 || n == 3) return cudaErrorInvalidChannelDescriptor;
  for (int i = 1; i < n; i++)
    if (bits[i] != bits[0]) return cudaErrorInvalidChannelDescriptor;
  int b = bits[0];
  uint32_t f;
  switch (d->f) {
  case cudaChannelFormatKindSigned:
    f = b == 8 ? CU_AD_FORMAT_SIGNED_INT8 : b == 16 ? CU_AD_FORMAT_SIGNED_INT16
        : b == 32 ? CU_AD_FORMAT_SIGNED_INT32 : 0;
    break;
  case cudaChannelFormatKindUnsigned:
    f = b == 8 ? CU_AD_FORMAT_UNSIGNED_INT8 : b == 16 ? CU_AD_FORMAT_UNSIGNED_INT16
        : b == 32 ? CU_AD_FORMAT_UNSIGNED_INT32 : 0;
    break;
  case cudaChannelFormatKindFloat:
    f = b == 16 ? CU_AD_FORMAT_HALF : b == 32 ? CU_AD_FORMAT_FLOAT : 0;
    break;
  case cudaChannelFormatKindNone: return cudaErrorInvalidChannelDescriptor;
  default: {
    static int logged;
    return (cudaError_t)rgpu_cudart_report_unsupported(
        "a CUDA array or texture of a normalized, block-compressed or video channel format",
        &logged);
  }
  }
  if (!f) return cudaErrorInvalidChannelDescriptor;
  *format = f;
  *channels = (uint32_t)n;
  *elem = (uint32_t)(b / 8 * n);
  return cudaSuccess;
}

/* The server driver's widest 1D linear texture of a format (DEVICE_QUERY).
 * CUDA documents only cudaErrorInvalidValue for a bad description, so a
 * description channel_format refuses is that. */
RGPU_API cudaError_t cudaDeviceGetTexture1DLinearMaxWidth(
    size_t *maxWidthInElements, const struct cudaChannelFormatDesc *fmtDesc, int device) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!maxWidthInElements || !fmtDesc) return rgpu_rt_ret(cudaErrorInvalidValue);
  int n = 0;
  if ((e = rgpu_rt_device_count(c, &n)) != cudaSuccess) return rgpu_rt_ret(e);
  if (device < 0 || device >= n) return rgpu_rt_ret(cudaErrorInvalidDevice);
  uint32_t format, channels, elem;
  if ((e = channel_format(fmtDesc, &format, &channels, &elem)) != cudaSuccess)
    return rgpu_rt_ret(e == cudaErrorInvalidChannelDescriptor ? cudaErrorInvalidValue : e);
  rgpu_client *owner = rgpu_rt_route(c, device);
  uint32_t args[2] = {format, channels};
  rgpu_msg_device_query_req q = {.what = RGPU_DQ_TEX1D_LINEAR_WIDTH,
                                 .device = rgpu_rt_local_device(owner, device),
                                 .args = {args, 2}};
  uint64_t width = 0;
  rgpu_status rc = rgpu_rt_device_query(owner, -1, &q, &width, 1);
  if (rc == 0) *maxWidthInElements = (size_t)width;
  return rc ? rgpu_rt_ret(rgpu_rt_from_call(rc)) : cudaSuccess;
}

/* ---- arrays ------------------------------------------------------------------ */

static cudaError_t array_create(cudaArray_t *out, const struct cudaChannelFormatDesc *desc,
                                struct cudaExtent ext, unsigned flags) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!out || !desc || ext.width == 0) return rgpu_rt_ret(cudaErrorInvalidValue);
  uint32_t format, channels, elem;
  if ((e = channel_format(desc, &format, &channels, &elem)) != cudaSuccess) return rgpu_rt_ret(e);
  /* Cubemaps go to the server's driver, which has them on a GPU (softgpu
   * answers NOT_SUPPORTED by name); sparse and deferred-mapping arrays need
   * the virtual memory calls rgpu does not carry. */
  if (flags & (cudaArraySparse | cudaArrayDeferredMapping)) {
    static int logged;
    return (cudaError_t)rgpu_cudart_report_unsupported(
        "cudaMalloc3DArray with sparse or deferred-mapping flags", &logged);
  }
  rgpu_rt_array *a = calloc(1, sizeof *a);
  if (!a) return rgpu_rt_ret(cudaErrorMemoryAllocation);
  int dev = rgpu_rt_current_device();
  *a = (rgpu_rt_array){.id = rgpu_rt_new_handle_id(), .dev = dev,
                       .desc = *desc, .extent = ext, .flags = flags, .elem_size = elem};
  rgpu_msg_array_create_req q = {.array = a->id, .format = format, .channels = channels,
                                 .width = ext.width, .height = ext.height, .depth = ext.depth,
                                 .flags = flags};
  rgpu_status rc = rgpu_call_array_create(c, dev, 0, &q, NULL, NULL);
  if (rc == 0 && array_add(a) != 0) {
    rgpu_msg_array_destroy_req d = {.array = a->id};
    rgpu_call_array_destroy(c, dev, RGPU_CALL_ASYNC, &d, NULL, NULL);
    rc = CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (rc) {
    free(a);
    return call_result(c, rc, 1);
  }
  *out = (cudaArray_t)a;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaMallocArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc,
                                     size_t width, size_t height, unsigned int flags) {
  struct cudaExtent ext = {width, height, 0};
  return array_create(array, desc, ext, flags);
}

RGPU_API cudaError_t cudaMalloc3DArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc,
                                       struct cudaExtent extent, unsigned int flags) {
  return array_create(array, desc, extent, flags);
}

RGPU_API cudaError_t cudaFreeArray(cudaArray_t array) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!array) return cudaSuccess;
  rgpu_mutex_lock(&g_lock);
  int i = array_index_locked(array);
  rgpu_rt_array *a = i >= 0 ? g_arrays[i] : NULL;
  if (a) {
    g_arrays[i] = g_arrays[--g_narrays];
    views_drop_locked(a, -1); /* the server destroys the objects that read it first */
  }
  rgpu_mutex_unlock(&g_lock);
  if (!a) return rgpu_rt_ret(cudaErrorInvalidResourceHandle);
  rgpu_msg_array_destroy_req q = {.array = a->id};
  rgpu_status rc = rgpu_call_array_destroy(c, a->dev, RGPU_CALL_ASYNC, &q, NULL, NULL);
  free(a);
  return call_result(c, rc, 0);
}

RGPU_API cudaError_t cudaArrayGetInfo(struct cudaChannelFormatDesc *desc, struct cudaExtent *extent,
                                      unsigned int *flags, cudaArray_t array) {
  rgpu_rt_count_call();
  rgpu_rt_array a;
  cudaError_t e = array_get(array, &a);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  if (desc) *desc = a.desc;
  if (extent) *extent = a.extent;
  if (flags) *flags = a.flags;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaGetChannelDesc(struct cudaChannelFormatDesc *desc, cudaArray_const_t array) {
  rgpu_rt_count_call();
  if (!desc) return rgpu_rt_ret(cudaErrorInvalidValue);
  rgpu_rt_array a;
  cudaError_t e = array_get(array, &a);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  *desc = a.desc;
  return cudaSuccess;
}

/* ---- copies ------------------------------------------------------------------ */

/* One side of a copy: an array (x in bytes), device memory or host memory
 * (ptr, pitch bytes, rows per slice; x in bytes, y, z). */
typedef struct {
  uint32_t kind; /* RGPU_COPY_SIDE_* */
  rgpu_rt_array arr;
  const void *handle; /* the cudaArray_t, for an array side */
  uint64_t ptr;
  size_t pitch, rows;
  size_t x, y, z;
} copy_side;

static void side_to_wire(const copy_side *s, size_t dz, size_t dy, uint32_t *kind,
                         uint64_t *array, uint64_t *ptr, uint64_t *pitch, uint64_t *rows,
                         uint64_t *x, uint64_t *y, uint64_t *z) {
  *kind = s->kind;
  *array = s->kind == RGPU_COPY_SIDE_ARRAY ? s->arr.id : 0;
  *ptr = s->kind == RGPU_COPY_SIDE_DEVICE ? s->ptr : 0;
  *pitch = s->pitch, *rows = s->rows;
  *x = s->x, *y = s->y + dy, *z = s->z + dz;
}

/* The host byte of row y, slice z of a host side. */
static uint8_t *host_at(const copy_side *s, size_t z, size_t y) {
  return (uint8_t *)(uintptr_t)s->ptr + ((s->z + z) * s->rows + s->y + y) * s->pitch + s->x;
}

/* Copies a box of width bytes x height rows x depth slices.  At most one
 * side is host memory; its rows travel packed, a slice (or part of one) a
 * request. */
static cudaError_t array_copy(rgpu_client *c, int dev, const copy_side *src, const copy_side *dst,
                              size_t width, size_t height, size_t depth, cudaStream_t stream,
                              int per_thread, int async) {
  if (width == 0 || height == 0 || depth == 0) return cudaSuccess;
  uint64_t wire;
  int sdev;
  cudaError_t e = rgpu_rt_stream_resolve(c, stream, per_thread, &wire, &sdev);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  int src_host = src->kind == RGPU_COPY_SIDE_HOST, dst_host = dst->kind == RGPU_COPY_SIDE_HOST;
  const copy_side *host = src_host ? src : dst_host ? dst : NULL;
  if (rgpu_rt_graph_is_capturing(wire)) {
    /* Between device memory and arrays the copy becomes the graph's memcpy
     * node, as natively (instantiated as a library node carrying the
     * ARRAY_COPY request: rgpu_rt_array_copy_node).  A host side would be
     * read once, at capture, where a graph's copy node reads it at every
     * launch: that stays unsupported. */
    if (host) {
      static int logged;
      return (cudaError_t)rgpu_cudart_report_unsupported(
          "a copy between host memory and a CUDA array in a stream capture", &logged);
    }
    const copy_side *arr = src->kind == RGPU_COPY_SIDE_ARRAY ? src : dst;
    size_t es = arr->arr.elem_size ? arr->arr.elem_size : 1;
    rgpu_rt_op op = {.kind = RGPU_RT_OP_COPY, .stream = wire, .device = dev};
    struct cudaMemcpy3DParms *cp = &op.copy.cp;
    op.copy.async = 1;
    cp->kind = cudaMemcpyDeviceToDevice;
    cp->extent = (struct cudaExtent){width / es, height, depth};
    const copy_side *sides[2] = {src, dst};
    for (int i = 0; i < 2; i++) {
      const copy_side *sd = sides[i];
      struct cudaPos pos = {sd->x, sd->y, sd->z};
      struct cudaPitchedPtr pp = {0};
      if (sd->kind == RGPU_COPY_SIDE_ARRAY)
        pos.x = sd->x / es;
      else
        pp = (struct cudaPitchedPtr){(void *)(uintptr_t)sd->ptr, sd->pitch, width, sd->rows};
      if (i == 0) {
        cp->srcArray = sd->kind == RGPU_COPY_SIDE_ARRAY ? (cudaArray_t)sd->handle : NULL;
        cp->srcPos = pos, cp->srcPtr = pp;
      } else {
        cp->dstArray = sd->kind == RGPU_COPY_SIDE_ARRAY ? (cudaArray_t)sd->handle : NULL;
        cp->dstPos = pos, cp->dstPtr = pp;
      }
    }
    return rgpu_rt_submit(c, &op);
  }
  /* Managed memory the host owns reaches the device first (a device side
   * may be managed). */
  if ((e = rgpu_rt_managed_to_device(c, wire)) != cudaSuccess) return rgpu_rt_ret(e);
  if (host && (host->x > host->pitch || width > host->pitch - host->x))
    return rgpu_rt_ret(cudaErrorInvalidPitchValue);
  if (host && width > RGPU_ARRAY_COPY_MAX_HOST_BYTES) return rgpu_rt_ret(cudaErrorInvalidValue);
  rgpu_msg_array_copy_req q;
  memset(&q, 0, sizeof q);
  q.stream = wire;
  q.width = width;
  if (!host) {
    q.height = height, q.depth = depth;
    side_to_wire(src, 0, 0, &q.src_kind, &q.src_array, &q.src_ptr, &q.src_pitch, &q.src_rows,
                 &q.src_x, &q.src_y, &q.src_z);
    side_to_wire(dst, 0, 0, &q.dst_kind, &q.dst_array, &q.dst_ptr, &q.dst_pitch, &q.dst_rows,
                 &q.dst_x, &q.dst_y, &q.dst_z);
    return call_result(c, rgpu_call_array_copy(c, dev, async ? RGPU_CALL_ASYNC : 0, &q, NULL, NULL),
                       !async);
  }
  size_t rows_per = RGPU_ARRAY_COPY_MAX_HOST_BYTES / width;
  if (rows_per > height) rows_per = height;
  uint8_t *buf = malloc(rows_per * width);
  if (!buf) return rgpu_rt_ret(cudaErrorMemoryAllocation);
  rgpu_status rc = 0;
  for (size_t z = 0; z < depth && rc == 0; z++) {
    for (size_t y = 0; y < height && rc == 0; y += rows_per) {
      size_t n = height - y < rows_per ? height - y : rows_per;
      q.height = n, q.depth = 1;
      side_to_wire(src, z, y, &q.src_kind, &q.src_array, &q.src_ptr, &q.src_pitch, &q.src_rows,
                   &q.src_x, &q.src_y, &q.src_z);
      side_to_wire(dst, z, y, &q.dst_kind, &q.dst_array, &q.dst_ptr, &q.dst_pitch, &q.dst_rows,
                   &q.dst_x, &q.dst_y, &q.dst_z);
      if (src_host) {
        for (size_t r = 0; r < n; r++) memcpy(buf + r * width, host_at(src, z, y + r), width);
        q.data = (rgpu_bytes){buf, n * width};
        rc = rgpu_call_array_copy(c, dev, async ? RGPU_CALL_ASYNC : 0, &q, NULL, NULL);
      } else {
        q.data = (rgpu_bytes){NULL, 0};
        rgpu_client_reply r;
        memset(&r, 0, sizeof r);
        r.dst = buf;
        r.dst_cap = n * width;
        rc = rgpu_call_array_copy(c, dev, 0, &q, NULL, &r);
        if (rc == 0 && r.dst_len != n * width) rc = CUDA_ERROR_UNKNOWN;
        if (rc == 0)
          for (size_t i = 0; i < n; i++) memcpy(host_at(dst, z, y + i), buf + i * width, width);
      }
    }
  }
  free(buf);
  return call_result(c, rc, !async || dst_host);
}

/* Which side of a copy is device memory and which host memory, from kind
 * (cudaMemcpyDefault: the pointer decides). */
static cudaError_t pointer_side(const void *p, int is_src, enum cudaMemcpyKind kind, copy_side *s) {
  uint64_t v = (uint64_t)(uintptr_t)p;
  rgpu_range r;
  int dev_mem = rgpu_range_find(rgpu_rt_device_ranges(), v, 0, &r) == 0;
  int want_dev;
  switch (kind) {
  case cudaMemcpyHostToHost: want_dev = 0; break;
  case cudaMemcpyHostToDevice: want_dev = !is_src; break;
  case cudaMemcpyDeviceToHost: want_dev = is_src; break;
  case cudaMemcpyDeviceToDevice: want_dev = 1; break;
  case cudaMemcpyDefault: want_dev = dev_mem; break;
  default: return cudaErrorInvalidMemcpyDirection;
  }
  if (want_dev && !dev_mem) return cudaErrorInvalidValue;
  s->kind = want_dev ? RGPU_COPY_SIDE_DEVICE : RGPU_COPY_SIDE_HOST;
  s->ptr = v;
  return cudaSuccess;
}

static cudaError_t array_side(const void *array, copy_side *s) {
  memset(s, 0, sizeof *s);
  s->kind = RGPU_COPY_SIDE_ARRAY;
  s->handle = array;
  return array_get(array, &s->arr);
}

/* Height and depth of an array counted as CUDA counts them (0 is 1). */
static size_t rows_of(const rgpu_rt_array *a) { return a->extent.height ? a->extent.height : 1; }

/* A copy between an array and memory at ptr (host or device, as kind
 * says; pitch bytes a row): into the array (into_array 1) or out of it. */
static cudaError_t pointer_array_copy(int into_array, cudaArray_const_t array, size_t w_off,
                                      size_t h_off, const void *ptr, size_t pitch, size_t width,
                                      size_t height, enum cudaMemcpyKind kind,
                                      cudaStream_t stream, int per_thread, int async) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  copy_side a, p;
  memset(&p, 0, sizeof p);
  if ((e = array_side(array, &a)) != cudaSuccess) return rgpu_rt_ret(e);
  if (!ptr) return rgpu_rt_ret(cudaErrorInvalidValue);
  if ((e = pointer_side(ptr, into_array, kind, &p)) != cudaSuccess) return rgpu_rt_ret(e);
  a.x = w_off, a.y = h_off;
  p.pitch = pitch, p.rows = height;
  if (height > 1 && width > pitch) return rgpu_rt_ret(cudaErrorInvalidPitchValue);
  if (height <= 1 && pitch < width) p.pitch = width;
  return into_array ? array_copy(c, a.arr.dev, &p, &a, width, height, 1, stream, per_thread, async)
                    : array_copy(c, a.arr.dev, &a, &p, width, height, 1, stream, per_thread, async);
}

static cudaError_t to_array(cudaArray_t dst, size_t w_off, size_t h_off, const void *src,
                            size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind,
                            cudaStream_t stream, int per_thread, int async) {
  return pointer_array_copy(1, dst, w_off, h_off, src, spitch, width, height, kind, stream,
                            per_thread, async);
}

static cudaError_t from_array(void *dst, size_t dpitch, cudaArray_const_t src, size_t w_off,
                              size_t h_off, size_t width, size_t height, enum cudaMemcpyKind kind,
                              cudaStream_t stream, int per_thread, int async) {
  return pointer_array_copy(0, src, w_off, h_off, dst, dpitch, width, height, kind, stream,
                            per_thread, async);
}

static cudaError_t array_to_array(cudaArray_t dst, size_t dx, size_t dy, cudaArray_const_t src,
                                  size_t sx, size_t sy, size_t width, size_t height,
                                  enum cudaMemcpyKind kind, int per_thread) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault)
    return rgpu_rt_ret(cudaErrorInvalidMemcpyDirection);
  copy_side d, s;
  if ((e = array_side(dst, &d)) != cudaSuccess || (e = array_side(src, &s)) != cudaSuccess)
    return rgpu_rt_ret(e);
  d.x = dx, d.y = dy, s.x = sx, s.y = sy;
  return array_copy(c, d.arr.dev, &s, &d, width, height, 1, NULL, per_thread, 0);
}

/* The deprecated 1D forms copy `count` bytes from (wOffset, hOffset) on,
 * row after row of the array: a partial first row, whole rows, a partial
 * last row; into the array (into_array 1) or out of it. */
static cudaError_t linear_array_copy(int into_array, cudaArray_const_t array, size_t w_off,
                                     size_t h_off, const void *ptr, size_t count,
                                     enum cudaMemcpyKind kind, cudaStream_t stream,
                                     int per_thread, int async) {
  rgpu_rt_array a;
  cudaError_t e = array_get(array, &a);
  if (e != cudaSuccess) {
    rgpu_rt_count_call();
    return rgpu_rt_ret(e);
  }
  size_t row = a.extent.width * a.elem_size;
  const uint8_t *p = ptr;
  while (count > 0 && e == cudaSuccess) {
    size_t n = row > w_off ? row - w_off : 0;
    if (n == 0 || h_off >= rows_of(&a)) {
      rgpu_rt_count_call();
      return rgpu_rt_ret(cudaErrorInvalidValue);
    }
    if (n > count) n = count;
    e = pointer_array_copy(into_array, array, w_off, h_off, p, n, n, 1, kind, stream, per_thread,
                           async);
    p += n, count -= n, w_off = 0, h_off++;
  }
  return e;
}

static cudaError_t linear_to_array(cudaArray_t dst, size_t w_off, size_t h_off, const void *src,
                                   size_t count, enum cudaMemcpyKind kind, cudaStream_t stream,
                                   int per_thread, int async) {
  return linear_array_copy(1, dst, w_off, h_off, src, count, kind, stream, per_thread, async);
}

static cudaError_t linear_from_array(void *dst, cudaArray_const_t src, size_t w_off, size_t h_off,
                                     size_t count, enum cudaMemcpyKind kind, cudaStream_t stream,
                                     int per_thread, int async) {
  return linear_array_copy(0, src, w_off, h_off, dst, count, kind, stream, per_thread, async);
}

RGPU_API cudaError_t cudaMemcpy2DToArray(cudaArray_t dst, size_t wOffset, size_t hOffset,
                                         const void *src, size_t spitch, size_t width,
                                         size_t height, enum cudaMemcpyKind kind) {
  return to_array(dst, wOffset, hOffset, src, spitch, width, height, kind, NULL, 0, 0);
}
RGPU_API_PTSZ(cudaError_t cudaMemcpy2DToArray_ptds(cudaArray_t dst, size_t wOffset, size_t hOffset,
                                                   const void *src, size_t spitch, size_t width,
                                                   size_t height, enum cudaMemcpyKind kind)) {
  return to_array(dst, wOffset, hOffset, src, spitch, width, height, kind, NULL, 1, 0);
}
RGPU_API cudaError_t cudaMemcpy2DToArrayAsync(cudaArray_t dst, size_t wOffset, size_t hOffset,
                                              const void *src, size_t spitch, size_t width,
                                              size_t height, enum cudaMemcpyKind kind,
                                              cudaStream_t stream) {
  return to_array(dst, wOffset, hOffset, src, spitch, width, height, kind, stream, 0, 1);
}
RGPU_API_PTSZ(cudaError_t cudaMemcpy2DToArrayAsync_ptsz(cudaArray_t dst, size_t wOffset,
                                                        size_t hOffset, const void *src,
                                                        size_t spitch, size_t width, size_t height,
                                                        enum cudaMemcpyKind kind,
                                                        cudaStream_t stream)) {
  return to_array(dst, wOffset, hOffset, src, spitch, width, height, kind, stream, 1, 1);
}

RGPU_API cudaError_t cudaMemcpy2DFromArray(void *dst, size_t dpitch, cudaArray_const_t src,
                                           size_t wOffset, size_t hOffset, size_t width,
                                           size_t height, enum cudaMemcpyKind kind) {
  return from_array(dst, dpitch, src, wOffset, hOffset, width, height, kind, NULL, 0, 0);
}
RGPU_API_PTSZ(cudaError_t cudaMemcpy2DFromArray_ptds(void *dst, size_t dpitch,
                                                     cudaArray_const_t src, size_t wOffset,
                                                     size_t hOffset, size_t width, size_t height,
                                                     enum cudaMemcpyKind kind)) {
  return from_array(dst, dpitch, src, wOffset, hOffset, width, height, kind, NULL, 1, 0);
}
RGPU_API cudaError_t cudaMemcpy2DFromArrayAsync(void *dst, size_t dpitch, cudaArray_const_t src,
                                                size_t wOffset, size_t hOffset, size_t width,
                                                size_t height, enum cudaMemcpyKind kind,
                                                cudaStream_t stream) {
  return from_array(dst, dpitch, src, wOffset, hOffset, width, height, kind, stream, 0, 1);
}
RGPU_API_PTSZ(cudaError_t cudaMemcpy2DFromArrayAsync_ptsz(void *dst, size_t dpitch,
                                                          cudaArray_const_t src, size_t wOffset,
                                                          size_t hOffset, size_t width,
                                                          size_t height, enum cudaMemcpyKind kind,
                                                          cudaStream_t stream)) {
  return from_array(dst, dpitch, src, wOffset, hOffset, width, height, kind, stream, 1, 1);
}

RGPU_API cudaError_t cudaMemcpy2DArrayToArray(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst,
                                              cudaArray_const_t src, size_t wOffsetSrc,
                                              size_t hOffsetSrc, size_t width, size_t height,
                                              enum cudaMemcpyKind kind) {
  return array_to_array(dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, width, height,
                        kind, 0);
}
RGPU_API_PTSZ(cudaError_t cudaMemcpy2DArrayToArray_ptds(cudaArray_t dst, size_t wOffsetDst,
                                                        size_t hOffsetDst, cudaArray_const_t src,
                                                        size_t wOffsetSrc, size_t hOffsetSrc,
                                                        size_t width, size_t height,
                                                        enum cudaMemcpyKind kind)) {
  return array_to_array(dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, width, height,
                        kind, 1);
}

/* The deprecated 1D array copies (still exported by CUDA 13's runtime). */
RGPU_API_PTSZ(cudaError_t cudaMemcpyToArray(cudaArray_t dst, size_t wOffset, size_t hOffset,
                                            const void *src, size_t count,
                                            enum cudaMemcpyKind kind)) {
  return linear_to_array(dst, wOffset, hOffset, src, count, kind, NULL, 0, 0);
}
RGPU_API_PTSZ(cudaError_t cudaMemcpyToArray_ptds(cudaArray_t dst, size_t wOffset, size_t hOffset,
                                                 const void *src, size_t count,
                                                 enum cudaMemcpyKind kind)) {
  return linear_to_array(dst, wOffset, hOffset, src, count, kind, NULL, 1, 0);
}
RGPU_API_PTSZ(cudaError_t cudaMemcpyToArrayAsync(cudaArray_t dst, size_t wOffset, size_t hOffset,
                                                 const void *src, size_t count,
                                                 enum cudaMemcpyKind kind, cudaStream_t stream)) {
  return linear_to_array(dst, wOffset, hOffset, src, count, kind, stream, 0, 1);
}
RGPU_API_PTSZ(cudaError_t cudaMemcpyToArrayAsync_ptsz(cudaArray_t dst, size_t wOffset,
                                                      size_t hOffset, const void *src, size_t count,
                                                      enum cudaMemcpyKind kind,
                                                      cudaStream_t stream)) {
  return linear_to_array(dst, wOffset, hOffset, src, count, kind, stream, 1, 1);
}
RGPU_API_PTSZ(cudaError_t cudaMemcpyFromArray(void *dst, cudaArray_const_t src, size_t wOffset,
                                              size_t hOffset, size_t count,
                                              enum cudaMemcpyKind kind)) {
  return linear_from_array(dst, src, wOffset, hOffset, count, kind, NULL, 0, 0);
}
RGPU_API_PTSZ(cudaError_t cudaMemcpyFromArray_ptds(void *dst, cudaArray_const_t src, size_t wOffset,
                                                   size_t hOffset, size_t count,
                                                   enum cudaMemcpyKind kind)) {
  return linear_from_array(dst, src, wOffset, hOffset, count, kind, NULL, 1, 0);
}
RGPU_API_PTSZ(cudaError_t cudaMemcpyFromArrayAsync(void *dst, cudaArray_const_t src, size_t wOffset,
                                                   size_t hOffset, size_t count,
                                                   enum cudaMemcpyKind kind, cudaStream_t stream)) {
  return linear_from_array(dst, src, wOffset, hOffset, count, kind, stream, 0, 1);
}
RGPU_API_PTSZ(cudaError_t cudaMemcpyFromArrayAsync_ptsz(void *dst, cudaArray_const_t src,
                                                        size_t wOffset, size_t hOffset,
                                                        size_t count, enum cudaMemcpyKind kind,
                                                        cudaStream_t stream)) {
  return linear_from_array(dst, src, wOffset, hOffset, count, kind, stream, 1, 1);
}
/* One row's worth at a time is what programs use cudaMemcpyArrayToArray
 * for; a span across rows would need the row walk on both sides at once. */
static cudaError_t array_to_array_1d(cudaArray_t dst, size_t dx, size_t dy, cudaArray_const_t src,
                                     size_t sx, size_t sy, size_t count, enum cudaMemcpyKind kind,
                                     int per_thread) {
  rgpu_rt_array d;
  if (array_get(dst, &d) == cudaSuccess && dx + count > d.extent.width * d.elem_size) {
    static int logged;
    return (cudaError_t)rgpu_cudart_report_unsupported("cudaMemcpyArrayToArray across rows",
                                                      &logged);
  }
  return array_to_array(dst, dx, dy, src, sx, sy, count, 1, kind, per_thread);
}
RGPU_API_PTSZ(cudaError_t cudaMemcpyArrayToArray(cudaArray_t dst, size_t wOffsetDst,
                                                 size_t hOffsetDst, cudaArray_const_t src,
                                                 size_t wOffsetSrc, size_t hOffsetSrc,
                                                 size_t count, enum cudaMemcpyKind kind)) {
  return array_to_array_1d(dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, count, kind,
                           0);
}
RGPU_API_PTSZ(cudaError_t cudaMemcpyArrayToArray_ptds(cudaArray_t dst, size_t wOffsetDst,
                                                      size_t hOffsetDst, cudaArray_const_t src,
                                                      size_t wOffsetSrc, size_t hOffsetSrc,
                                                      size_t count, enum cudaMemcpyKind kind)) {
  return array_to_array_1d(dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, count, kind,
                           1);
}

/* The two sides of a cudaMemcpy3DParms with an array on either side:
 * positions and extent count the array's elements, pointer sides count
 * bytes.  *es: bytes per element; *dev: the array's device.  Errors
 * returned, not recorded. */
static cudaError_t sides_3d(const struct cudaMemcpy3DParms *p, copy_side *s, copy_side *d,
                            size_t *es_out, int *dev) {
  cudaError_t e;
  memset(s, 0, sizeof *s);
  memset(d, 0, sizeof *d);
  const rgpu_rt_array *elem_from = NULL;
  if (p->srcArray) {
    if ((e = array_side(p->srcArray, s)) != cudaSuccess) return e;
    elem_from = &s->arr;
  }
  if (p->dstArray) {
    if ((e = array_side(p->dstArray, d)) != cudaSuccess) return e;
    if (!elem_from) elem_from = &d->arr;
  }
  if (!elem_from) return cudaErrorInvalidValue;
  size_t es = elem_from->elem_size;
  if (p->srcArray) {
    s->x = p->srcPos.x * es, s->y = p->srcPos.y, s->z = p->srcPos.z;
  } else {
    if (!p->srcPtr.ptr) return cudaErrorInvalidValue;
    if ((e = pointer_side(p->srcPtr.ptr, 1, p->kind, s)) != cudaSuccess) return e;
    s->pitch = p->srcPtr.pitch, s->rows = p->srcPtr.ysize;
    s->x = p->srcPos.x, s->y = p->srcPos.y, s->z = p->srcPos.z;
  }
  if (p->dstArray) {
    d->x = p->dstPos.x * es, d->y = p->dstPos.y, d->z = p->dstPos.z;
  } else {
    if (!p->dstPtr.ptr) return cudaErrorInvalidValue;
    if ((e = pointer_side(p->dstPtr.ptr, 0, p->kind, d)) != cudaSuccess) return e;
    d->pitch = p->dstPtr.pitch, d->rows = p->dstPtr.ysize;
    d->x = p->dstPos.x, d->y = p->dstPos.y, d->z = p->dstPos.z;
  }
  if ((s->kind == RGPU_COPY_SIDE_HOST && s->rows < p->extent.height && p->extent.depth > 1) ||
      (d->kind == RGPU_COPY_SIDE_HOST && d->rows < p->extent.height && p->extent.depth > 1))
    return cudaErrorInvalidValue;
  if (p->extent.width > SIZE_MAX / es) return cudaErrorInvalidValue;
  *es_out = es;
  *dev = elem_from->dev;
  return cudaSuccess;
}

/* cudaMemcpy3D with an array on either side (rgpu_cudart_memory.c hands
 * these over). */
cudaError_t rgpu_rt_memcpy3d_array(const struct cudaMemcpy3DParms *p, cudaStream_t stream,
                                   int per_thread, int async) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  copy_side s, d;
  size_t es = 1;
  int dev = 0;
  if ((e = sides_3d(p, &s, &d, &es, &dev)) != cudaSuccess) return rgpu_rt_ret(e);
  return array_copy(c, dev, &s, &d, p->extent.width * es, p->extent.height, p->extent.depth,
                    stream, per_thread, async);
}

cudaError_t rgpu_rt_array_copy_node(const struct cudaMemcpy3DParms *p, rgpu_buf *req) {
  copy_side s, d;
  size_t es = 1;
  int dev = 0;
  cudaError_t e = sides_3d(p, &s, &d, &es, &dev);
  if (e != cudaSuccess) return e;
  if (s.kind == RGPU_COPY_SIDE_HOST || d.kind == RGPU_COPY_SIDE_HOST) {
    static int logged;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      RGPU_WARN("a graph memcpy node between host memory and a CUDA array is not supported; it "
                "returns cudaErrorNotSupported");
    return cudaErrorNotSupported;
  }
  if (!p->extent.width || !p->extent.height || !p->extent.depth) return cudaErrorInvalidValue;
  if (!req) return cudaSuccess;
  rgpu_msg_array_copy_req q;
  memset(&q, 0, sizeof q); /* stream 0: the launch's, patched in by the server */
  q.width = p->extent.width * es, q.height = p->extent.height, q.depth = p->extent.depth;
  side_to_wire(&s, 0, 0, &q.src_kind, &q.src_array, &q.src_ptr, &q.src_pitch, &q.src_rows,
               &q.src_x, &q.src_y, &q.src_z);
  side_to_wire(&d, 0, 0, &q.dst_kind, &q.dst_array, &q.dst_ptr, &q.dst_pitch, &q.dst_rows,
               &q.dst_x, &q.dst_y, &q.dst_z);
  return rgpu_msg_array_copy_req_encode(req, &q) ? cudaErrorMemoryAllocation : cudaSuccess;
}

/* ---- texture and surface objects ----------------------------------------------- */

/* TEXOBJ_DESTROY or SURFOBJ_DESTROY of an object the server made, queued. */
static rgpu_status view_destroy_on_server(rgpu_client *c, int dev, uint64_t handle, int surf) {
  if (surf) {
    rgpu_msg_surfobj_destroy_req q = {.surfobj = handle};
    return rgpu_call_surfobj_destroy(c, dev, RGPU_CALL_ASYNC, &q, NULL, NULL);
  }
  rgpu_msg_texobj_destroy_req q = {.texobj = handle};
  return rgpu_call_texobj_destroy(c, dev, RGPU_CALL_ASYNC, &q, NULL, NULL);
}

/* Keeps the record of an object the server just made; out of memory, the
 * object goes again. */
static cudaError_t view_keep(rgpu_client *c, const rgpu_rt_view *v) {
  if (view_add(v) == 0) return cudaSuccess;
  view_destroy_on_server(c, v->dev, v->handle, v->surf);
  return rgpu_rt_ret(cudaErrorMemoryAllocation);
}

/* cudaDestroyTextureObject / cudaDestroySurfaceObject. */
static cudaError_t view_destroy(uint64_t handle, int surf) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!handle) return cudaSuccess;
  rgpu_rt_view v;
  if (!view_lookup(handle, surf, 1, &v)) return rgpu_rt_ret(cudaErrorInvalidValue);
  return call_result(c, view_destroy_on_server(c, v.dev, handle, surf), 0);
}

/* The Get*ObjectResourceDesc queries, answered from the record. */
static cudaError_t view_res_desc(struct cudaResourceDesc *out, uint64_t handle, int surf) {
  rgpu_rt_count_call();
  rgpu_rt_view v;
  if (!out || !view_lookup(handle, surf, 0, &v)) return rgpu_rt_ret(cudaErrorInvalidValue);
  *out = v.res;
  return cudaSuccess;
}

/* The resource view format of a channel description's format and count
 * (channel_format's answers), or cudaResViewFormatNone when it has none. */
static enum cudaResourceViewFormat view_format_of(uint32_t format, uint32_t channels) {
  /* Each family is three formats in a row: 1, 2 and 4 channels. */
  int first;
  switch (format) {
  case CU_AD_FORMAT_UNSIGNED_INT8: first = cudaResViewFormatUnsignedChar1; break;
  case CU_AD_FORMAT_SIGNED_INT8: first = cudaResViewFormatSignedChar1; break;
  case CU_AD_FORMAT_UNSIGNED_INT16: first = cudaResViewFormatUnsignedShort1; break;
  case CU_AD_FORMAT_SIGNED_INT16: first = cudaResViewFormatSignedShort1; break;
  case CU_AD_FORMAT_UNSIGNED_INT32: first = cudaResViewFormatUnsignedInt1; break;
  case CU_AD_FORMAT_SIGNED_INT32: first = cudaResViewFormatSignedInt1; break;
  case CU_AD_FORMAT_HALF: first = cudaResViewFormatHalf1; break;
  case CU_AD_FORMAT_FLOAT: first = cudaResViewFormatFloat1; break;
  default: return cudaResViewFormatNone;
  }
  int step = channels == 1 ? 0 : channels == 2 ? 1 : channels == 4 ? 2 : -1;
  return step < 0 ? cudaResViewFormatNone : (enum cudaResourceViewFormat)(first + step);
}

/* A resource view of array a that shows the whole array as it is: its own
 * format (or none), its extent, its one level and layer.  Sampling through
 * it is sampling the array, so such a texture is made without the view
 * (TEXOBJ_CREATE carries none) and the view is kept for
 * cudaGetTextureObjectResourceViewDesc.  1 for such a view, 0 for any other
 * (a reinterpreting or partial view, a layered or cubemap array), -1 for a
 * view whose reserved words are not zero (CUDA requires them zero). */
static int whole_array_view(const struct cudaResourceViewDesc *v, const rgpu_rt_array *a) {
  for (size_t i = 0; i < sizeof v->reserved / sizeof v->reserved[0]; i++)
    if (v->reserved[i]) return -1;
  if (a->flags & (cudaArrayLayered | cudaArrayCubemap)) return 0;
  uint32_t format, channels, elem;
  if (channel_format(&a->desc, &format, &channels, &elem) != cudaSuccess) return 0;
  if (v->format != cudaResViewFormatNone && v->format != view_format_of(format, channels)) return 0;
  return v->width == a->extent.width && v->height == a->extent.height &&
         v->depth == a->extent.depth && v->firstMipmapLevel == 0 && v->lastMipmapLevel == 0 &&
         v->firstLayer == 0 && v->lastLayer == 0;
}

/* The driver's flags for a runtime texture description. */
static uint32_t tex_flags(const struct cudaTextureDesc *t) {
  uint32_t f = 0;
  if (t->readMode == cudaReadModeElementType) f |= CU_TRSF_READ_AS_INTEGER;
  if (t->normalizedCoords) f |= CU_TRSF_NORMALIZED_COORDINATES;
  if (t->sRGB) f |= CU_TRSF_SRGB;
  if (t->disableTrilinearOptimization) f |= CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION;
  if (t->seamlessCubemap) f |= CU_TRSF_SEAMLESS_CUBEMAP;
  return f;
}

RGPU_API cudaError_t cudaCreateTextureObject(cudaTextureObject_t *pTexObject,
                                             const struct cudaResourceDesc *pResDesc,
                                             const struct cudaTextureDesc *pTexDesc,
                                             const struct cudaResourceViewDesc *pResViewDesc) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!pTexObject || !pResDesc || !pTexDesc) return rgpu_rt_ret(cudaErrorInvalidValue);
  /* A view describes an array (CUDA: only array resources take one). */
  if (pResViewDesc && pResDesc->resType != cudaResourceTypeArray &&
      pResDesc->resType != cudaResourceTypeMipmappedArray)
    return rgpu_rt_ret(cudaErrorInvalidValue);
  rgpu_msg_texobj_create_req q;
  memset(&q, 0, sizeof q);
  rgpu_rt_view v;
  memset(&v, 0, sizeof v);
  int dev = rgpu_rt_current_device();
  rgpu_rt_array a;
  const void *arr_ptr = NULL;
  switch (pResDesc->resType) {
  case cudaResourceTypeArray:
    if ((e = array_get(pResDesc->res.array.array, &a)) != cudaSuccess) return rgpu_rt_ret(e);
    if (pResViewDesc) {
      int whole = whole_array_view(pResViewDesc, &a);
      if (whole < 0) return rgpu_rt_ret(cudaErrorInvalidValue);
      if (!whole) {
        static int logged;
        return (cudaError_t)rgpu_cudart_report_unsupported(
            "cudaCreateTextureObject with a resource view other than the whole array", &logged);
      }
    }
    q.res_type = CU_RESOURCE_TYPE_ARRAY;
    q.array = a.id;
    dev = a.dev;
    arr_ptr = pResDesc->res.array.array;
    break;
  case cudaResourceTypeLinear:
  case cudaResourceTypePitch2D: {
    int linear = pResDesc->resType == cudaResourceTypeLinear;
    const struct cudaChannelFormatDesc *cd =
        linear ? &pResDesc->res.linear.desc : &pResDesc->res.pitch2D.desc;
    uint32_t elem;
    if ((e = channel_format(cd, &q.format, &q.channels, &elem)) != cudaSuccess)
      return rgpu_rt_ret(e);
    const void *ptr = linear ? pResDesc->res.linear.devPtr : pResDesc->res.pitch2D.devPtr;
    rgpu_range r;
    if (!ptr || rgpu_range_find(rgpu_rt_device_ranges(), (uint64_t)(uintptr_t)ptr, 0, &r) != 0)
      return rgpu_rt_ret(cudaErrorInvalidValue);
    q.res_type = linear ? CU_RESOURCE_TYPE_LINEAR : CU_RESOURCE_TYPE_PITCH2D;
    q.ptr = (uint64_t)(uintptr_t)ptr;
    dev = r.device;
    if (linear) {
      q.width = pResDesc->res.linear.sizeInBytes;
    } else {
      q.width = pResDesc->res.pitch2D.width;
      q.height = pResDesc->res.pitch2D.height;
      q.pitch = pResDesc->res.pitch2D.pitchInBytes;
    }
    break;
  }
  default: {
    static int logged;
    return (cudaError_t)rgpu_cudart_report_unsupported(
        "cudaCreateTextureObject on a mipmapped array", &logged);
  }
  }
  const struct cudaTextureDesc *t = pTexDesc;
  q.address_mode0 = t->addressMode[0];
  q.address_mode1 = t->addressMode[1];
  q.address_mode2 = t->addressMode[2];
  q.filter_mode = t->filterMode;
  q.flags = tex_flags(t);
  q.max_anisotropy = t->maxAnisotropy;
  q.mipmap_filter_mode = t->mipmapFilterMode;
  q.mipmap_level_bias = t->mipmapLevelBias;
  q.min_mipmap_level_clamp = t->minMipmapLevelClamp;
  q.max_mipmap_level_clamp = t->maxMipmapLevelClamp;
  q.border0 = t->borderColor[0], q.border1 = t->borderColor[1];
  q.border2 = t->borderColor[2], q.border3 = t->borderColor[3];
  rgpu_msg_texobj_create_rep rep;
  rgpu_status rc = rgpu_call_texobj_create(c, dev, 0, &q, &rep, NULL);
  if (rc) return call_result(c, rc, 1);
  v = (rgpu_rt_view){.handle = rep.texobj, .surf = 0, .dev = dev, .arr = arr_ptr,
                     .res = *pResDesc, .tex = *pTexDesc, .has_view = pResViewDesc != NULL};
  if (pResViewDesc) v.view = *pResViewDesc;
  if ((e = view_keep(c, &v)) != cudaSuccess) return e;
  *pTexObject = (cudaTextureObject_t)rep.texobj;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaDestroyTextureObject(cudaTextureObject_t texObject) {
  return view_destroy(texObject, 0);
}

RGPU_API cudaError_t cudaGetTextureObjectResourceDesc(struct cudaResourceDesc *pResDesc,
                                                      cudaTextureObject_t texObject) {
  return view_res_desc(pResDesc, texObject, 0);
}

RGPU_API cudaError_t cudaGetTextureObjectTextureDesc(struct cudaTextureDesc *pTexDesc,
                                                     cudaTextureObject_t texObject) {
  rgpu_rt_count_call();
  rgpu_rt_view v;
  if (!pTexDesc || !view_lookup(texObject, 0, 0, &v)) return rgpu_rt_ret(cudaErrorInvalidValue);
  *pTexDesc = v.tex;
  return cudaSuccess;
}

/* The view the object was created with; CUDA documents
 * cudaErrorInvalidValue for an object made without one. */
RGPU_API cudaError_t cudaGetTextureObjectResourceViewDesc(struct cudaResourceViewDesc *pResViewDesc,
                                                          cudaTextureObject_t texObject) {
  rgpu_rt_count_call();
  rgpu_rt_view v;
  if (!pResViewDesc || !view_lookup(texObject, 0, 0, &v) || !v.has_view)
    return rgpu_rt_ret(cudaErrorInvalidValue);
  *pResViewDesc = v.view;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaCreateSurfaceObject(cudaSurfaceObject_t *pSurfObject,
                                             const struct cudaResourceDesc *pResDesc) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!pSurfObject || !pResDesc) return rgpu_rt_ret(cudaErrorInvalidValue);
  if (pResDesc->resType != cudaResourceTypeArray) return rgpu_rt_ret(cudaErrorInvalidValue);
  rgpu_rt_array a;
  if ((e = array_get(pResDesc->res.array.array, &a)) != cudaSuccess) return rgpu_rt_ret(e);
  rgpu_msg_surfobj_create_req q = {.array = a.id};
  rgpu_msg_surfobj_create_rep rep;
  rgpu_status rc = rgpu_call_surfobj_create(c, a.dev, 0, &q, &rep, NULL);
  if (rc) return call_result(c, rc, 1);
  rgpu_rt_view v;
  memset(&v, 0, sizeof v);
  v.handle = rep.surfobj, v.surf = 1, v.dev = a.dev, v.arr = pResDesc->res.array.array;
  v.res = *pResDesc;
  if ((e = view_keep(c, &v)) != cudaSuccess) return e;
  *pSurfObject = (cudaSurfaceObject_t)rep.surfobj;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaDestroySurfaceObject(cudaSurfaceObject_t surfObject) {
  return view_destroy(surfObject, 1);
}

RGPU_API cudaError_t cudaGetSurfaceObjectResourceDesc(struct cudaResourceDesc *pResDesc,
                                                      cudaSurfaceObject_t surfObject) {
  return view_res_desc(pResDesc, surfObject, 1);
}
