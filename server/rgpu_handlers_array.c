/* Handlers for CUDA arrays, texture objects and surface objects (ARRAY_*,
 * TEXOBJ_*, SURFOBJ_*; proto/rgpu_messages.def, "CUDA arrays").
 *
 * The contract is server/rgpu_req.h's: every array id, object and device
 * range is checked against the session's tables before the driver sees
 * it, so a forged handle is refused by name instead of reaching the driver
 * (softgpu dereferences what it is given).  Arrays count against the
 * session's memory quota like cuMemAlloc.  A texture or surface object that
 * reads an array or an allocation is destroyed before that memory is
 * (rgpu_worker_drop_views): CUDA leaves such a use undefined, and a kernel
 * that still names the object then gets an invalid handle, not freed
 * memory. */
#include <stdlib.h>
#include <string.h>

#include "rgpu_array_proto.h"
#include "rgpu_dispatch.h"
#include "rgpu_log.h"
#include "rgpu_staging.h"
#include "rgpu_worker_internal.h"

#define D (&w->drv)
#define FAIL(status, ...) rgpu_worker_fail(w, (status), __VA_ARGS__)
#define ENAME(r) rgpu_driver_error_name(D, (r))

typedef struct {
  CUarray arr;
  CUDA_ARRAY3D_DESCRIPTOR desc;
  uint64_t bytes;     /* what the quota counts */
  uint32_t elem_size; /* bytes per element, all channels */
} rgpu_array_rec;

/* What a texture or surface object reads: an array, or device memory. */
typedef struct {
  const rgpu_array_rec *arr;
  uint64_t dptr, size;
} rgpu_view_rec;

/* Bytes per channel of the formats rgpu passes on; 0 for the rest (block
 * compressed and video formats: a program that names one gets
 * NOT_SUPPORTED by name). */
static uint32_t format_bytes(uint32_t f) {
  switch (f) {
  case CU_AD_FORMAT_UNSIGNED_INT8:
  case CU_AD_FORMAT_SIGNED_INT8: return 1;
  case CU_AD_FORMAT_UNSIGNED_INT16:
  case CU_AD_FORMAT_SIGNED_INT16:
  case CU_AD_FORMAT_HALF: return 2;
  case CU_AD_FORMAT_UNSIGNED_INT32:
  case CU_AD_FORMAT_SIGNED_INT32:
  case CU_AD_FORMAT_FLOAT: return 4;
  default: return 0;
  }
}

static CUresult element_size(rgpu_worker *w, uint32_t format, uint32_t channels, uint32_t *out) {
  uint32_t b = format_bytes(format);
  if (!b) return FAIL(CUDA_ERROR_NOT_SUPPORTED, "array format 0x%x is not supported by rgpu", format);
  if (channels != 1 && channels != 2 && channels != 4)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%u channels: an array element has 1, 2 or 4", channels);
  *out = b * channels;
  return CUDA_SUCCESS;
}

static CUresult need(rgpu_worker *w, const void *fn, const char *name) {
  if (fn) return CUDA_SUCCESS;
  return FAIL(CUDA_ERROR_NOT_SUPPORTED, "the server's CUDA driver has no %s", name);
}

static CUresult get_array(rgpu_worker *w, uint64_t id, rgpu_array_rec **out) {
  const rgpu_handle_entry *e = rgpu_handle_map_get(&w->arrays, id);
  if (!e)
    return FAIL(CUDA_ERROR_INVALID_HANDLE, "unknown array id %llu", (unsigned long long)id);
  *out = e->ptr;
  return CUDA_SUCCESS;
}

/* ---- arrays --------------------------------------------------------------- */

CUresult rgpu_h_array_create(rgpu_req *rq, const rgpu_msg_array_create_req *q) {
  rgpu_worker *w = rq->w;
  CUresult r = need(w, (const void *)D->cuArray3DCreate, "cuArray3DCreate");
  if (r) return r;
  if (q->array == 0) return FAIL(CUDA_ERROR_INVALID_VALUE, "array id 0 is reserved");
  if (rgpu_handle_map_get(&w->arrays, q->array))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "array id %llu already exists", (unsigned long long)q->array);
  uint32_t es;
  if ((r = element_size(w, q->format, q->channels, &es))) return r;
  if (q->width == 0 || (q->height == 0 && q->depth != 0 && !(q->flags & CUDA_ARRAY3D_LAYERED)))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "array extent %llu x %llu x %llu",
                (unsigned long long)q->width, (unsigned long long)q->height,
                (unsigned long long)q->depth);
  unsigned __int128 bytes = (unsigned __int128)q->width * es * (q->height ? q->height : 1) *
                            (q->depth ? q->depth : 1);
  if (bytes > (unsigned __int128)(UINT64_MAX / 2))
    return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "array of %llu x %llu x %llu elements is too large",
                (unsigned long long)q->width, (unsigned long long)q->height,
                (unsigned long long)q->depth);
  uint64_t held = rgpu_worker_held_bytes(w);
  if (w->cfg.mem_quota && (bytes > w->cfg.mem_quota || held > w->cfg.mem_quota - (uint64_t)bytes))
    return FAIL(CUDA_ERROR_OUT_OF_MEMORY,
                "session memory quota exceeded: %llu bytes in use, an array of %llu requested, "
                "quota %llu",
                (unsigned long long)held, (unsigned long long)bytes,
                (unsigned long long)w->cfg.mem_quota);
  rgpu_array_rec *rec = calloc(1, sizeof *rec);
  if (!rec) return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory");
  rec->desc = (CUDA_ARRAY3D_DESCRIPTOR){.Width = q->width, .Height = q->height, .Depth = q->depth,
                                        .Format = (CUarray_format)q->format,
                                        .NumChannels = q->channels, .Flags = q->flags};
  rec->bytes = (uint64_t)bytes;
  rec->elem_size = es;
  r = D->cuArray3DCreate(&rec->arr, &rec->desc);
  if (r != CUDA_SUCCESS) {
    free(rec);
    return FAIL(r, "cuArray3DCreate: %s", ENAME(r));
  }
  if (rgpu_handle_map_put(&w->arrays, q->array, rec, w->cur_dev)) {
    D->cuArrayDestroy(rec->arr);
    free(rec);
    return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory");
  }
  w->array_bytes += rec->bytes;
  return CUDA_SUCCESS;
}

/* cuArrayDestroy waits for work that uses the array.  With host callbacks
 * about, that work may wait for a HOST_CALL_DONE only the session thread
 * can read, so the destroy then runs on a job (as MEM_FREE does). */
static void destroy_array(rgpu_worker *w, rgpu_array_rec *rec, int device, uint16_t op,
                          uint64_t seq) {
  if (w->host_calls && rgpu_jobs_enabled(w) && device >= 0 && device < RGPU_MAX_DEVICES) {
    rgpu_job *j = calloc(1, sizeof *j);
    if (j) {
      *j = (rgpu_job){.kind = RGPU_JOB_ARRAY_DESTROY, .opcode = op, .seq = seq,
                      .ctx = w->ctx[device], .dptr = (uint64_t)(uintptr_t)rec->arr};
      if (rgpu_jobs_submit(w, j) == 0) {
        free(rec);
        return;
      }
      free(j);
    }
  } else {
    rgpu_jobs_barrier(w, NULL);
  }
  CUresult r = D->cuArrayDestroy(rec->arr);
  if (r != CUDA_SUCCESS)
    RGPU_DEBUG("session=%llu cuArrayDestroy: %s", (unsigned long long)w->cfg.session_id, ENAME(r));
  free(rec);
}

CUresult rgpu_h_array_destroy(rgpu_req *rq, const rgpu_msg_array_destroy_req *q) {
  rgpu_worker *w = rq->w;
  rgpu_array_rec *rec = NULL;
  CUresult r = get_array(w, q->array, &rec);
  if (r) return r;
  rgpu_worker_drop_views(w, rec, 0, 0);
  rgpu_handle_entry e;
  rgpu_handle_map_remove(&w->arrays, q->array, &e);
  w->array_bytes -= rec->bytes;
  destroy_array(w, rec, e.device, rq->op, rq->seq);
  return CUDA_SUCCESS;
}

/* ---- copies --------------------------------------------------------------- */

typedef struct {
  uint32_t kind;
  uint64_t array, ptr, pitch, rows, x, y, z;
} copy_side;

/* Checks one side of a box of width bytes x height x depth and fills its
 * half of m.  Host sides are filled by the caller. */
static CUresult side_fill(rgpu_worker *w, const copy_side *s, uint64_t width, uint64_t height,
                          uint64_t depth, int is_dst, CUDA_MEMCPY3D *m) {
  const char *which = is_dst ? "destination" : "source";
  CUmemorytype mt;
  CUarray arr = NULL;
  CUdeviceptr dp = 0;
  size_t pitch = 0, rows = 0;
  if (s->kind == RGPU_COPY_SIDE_ARRAY) {
    rgpu_array_rec *rec = NULL;
    CUresult r = get_array(w, s->array, &rec);
    if (r) return r;
    uint64_t aw = rec->desc.Width * rec->elem_size;
    uint64_t ah = rec->desc.Height ? rec->desc.Height : 1;
    uint64_t ad = rec->desc.Depth ? rec->desc.Depth : 1;
    if (s->x > aw || width > aw - s->x || s->y > ah || height > ah - s->y || s->z > ad ||
        depth > ad - s->z)
      return FAIL(CUDA_ERROR_INVALID_VALUE,
                  "array copy: the %s box (%llu bytes x %llu x %llu at %llu,%llu,%llu) leaves "
                  "array %llu (%llu bytes x %llu x %llu)",
                  which, (unsigned long long)width, (unsigned long long)height,
                  (unsigned long long)depth, (unsigned long long)s->x, (unsigned long long)s->y,
                  (unsigned long long)s->z, (unsigned long long)s->array,
                  (unsigned long long)aw, (unsigned long long)ah, (unsigned long long)ad);
    mt = CU_MEMORYTYPE_ARRAY;
    arr = rec->arr;
  } else if (s->kind == RGPU_COPY_SIDE_DEVICE) {
    /* Every byte the box touches lies between its first and last byte,
     * and both must be in one allocation. */
    if (s->x > s->pitch || width > s->pitch - s->x || (depth > 1 && (s->y > s->rows || height > s->rows - s->y)))
      return FAIL(CUDA_ERROR_INVALID_VALUE, "array copy: the %s rows do not fit their pitch", which);
    unsigned __int128 first = ((unsigned __int128)s->z * s->rows + s->y) * s->pitch + s->x;
    unsigned __int128 last = (((unsigned __int128)(s->z + depth - 1)) * s->rows + s->y + height - 1) *
                                 s->pitch + s->x + width;
    if (last > UINT64_MAX || s->ptr > UINT64_MAX - (uint64_t)last)
      return FAIL(CUDA_ERROR_INVALID_VALUE, "array copy: the %s extent wraps around", which);
    CUresult r = rgpu_worker_range_check(w, s->ptr + (uint64_t)first, (uint64_t)(last - first),
                                         "array copy");
    if (r) return r;
    mt = CU_MEMORYTYPE_DEVICE;
    dp = (CUdeviceptr)s->ptr;
    pitch = (size_t)s->pitch;
    rows = (size_t)s->rows;
  } else {
    return FAIL(CUDA_ERROR_INVALID_VALUE, "array copy: %s kind %u", which, s->kind);
  }
  if (is_dst) {
    m->dstXInBytes = s->x, m->dstY = s->y, m->dstZ = s->z, m->dstMemoryType = mt;
    m->dstArray = arr, m->dstDevice = dp, m->dstPitch = pitch, m->dstHeight = rows;
  } else {
    m->srcXInBytes = s->x, m->srcY = s->y, m->srcZ = s->z, m->srcMemoryType = mt;
    m->srcArray = arr, m->srcDevice = dp, m->srcPitch = pitch, m->srcHeight = rows;
  }
  return CUDA_SUCCESS;
}

CUresult rgpu_h_array_copy(rgpu_req *rq, const rgpu_msg_array_copy_req *q) {
  rgpu_worker *w = rq->w;
  CUresult r = need(w, (const void *)D->cuMemcpy3DAsync, "cuMemcpy3DAsync");
  if (r) return r;
  if (q->width == 0 || q->height == 0 || q->depth == 0) return CUDA_SUCCESS;
  copy_side src = {q->src_kind, q->src_array, q->src_ptr, q->src_pitch, q->src_rows,
                   q->src_x, q->src_y, q->src_z};
  copy_side dst = {q->dst_kind, q->dst_array, q->dst_ptr, q->dst_pitch, q->dst_rows,
                   q->dst_x, q->dst_y, q->dst_z};
  int src_host = src.kind == RGPU_COPY_SIDE_HOST, dst_host = dst.kind == RGPU_COPY_SIDE_HOST;
  if (src_host && dst_host) return FAIL(CUDA_ERROR_INVALID_VALUE, "array copy: host to host");
  /* A graph's node has no reply to carry host bytes out, and its tail
   * would be bytes frozen at capture (the client never sends such a node). */
  if (rq->graph_node && (src_host || dst_host))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "array copy: a graph node with a host side");
  unsigned __int128 host_bytes = (unsigned __int128)q->width * q->height * q->depth;
  if ((src_host || dst_host) && host_bytes > RGPU_ARRAY_COPY_MAX_HOST_BYTES)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "array copy: %llu host bytes in one request (at most %llu)",
                (unsigned long long)host_bytes, (unsigned long long)RGPU_ARRAY_COPY_MAX_HOST_BYTES);
  if (src_host && q->data.len != (size_t)host_bytes)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "array copy: %zu bytes of data for a %llu-byte box",
                q->data.len, (unsigned long long)host_bytes);
  CUstream s = NULL;
  if ((r = rgpu_worker_stream_get(w, q->stream, &s))) return r;
  CUDA_MEMCPY3D m;
  memset(&m, 0, sizeof m);
  m.WidthInBytes = (size_t)q->width, m.Height = (size_t)q->height, m.Depth = (size_t)q->depth;
  if (!src_host && (r = side_fill(w, &src, q->width, q->height, q->depth, 0, &m))) return r;
  if (!dst_host && (r = side_fill(w, &dst, q->width, q->height, q->depth, 1, &m))) return r;
  void *pinned = NULL;
  void *buf = NULL;
  if (src_host || dst_host) {
    buf = rgpu_staging_get(w, (size_t)host_bytes, &pinned);
    if (!buf) return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory staging an array copy");
  }
  if (src_host) {
    memcpy(buf, q->data.data, (size_t)host_bytes);
    m.srcMemoryType = CU_MEMORYTYPE_HOST, m.srcHost = buf;
    m.srcPitch = (size_t)q->width, m.srcHeight = (size_t)q->height;
    r = D->cuMemcpy3DAsync(&m, s);
    return rgpu_req_release_after_stream(rq, q->stream, s, r, "cuMemcpy3DAsync", buf, pinned);
  }
  if (dst_host) {
    m.dstMemoryType = CU_MEMORYTYPE_HOST, m.dstHost = buf;
    m.dstPitch = (size_t)q->width, m.dstHeight = (size_t)q->height;
    r = D->cuMemcpy3DAsync(&m, s);
    if (r != CUDA_SUCCESS) {
      rgpu_staging_release(w, buf, pinned);
      return FAIL(r, "cuMemcpy3DAsync: %s", ENAME(r));
    }
    return rgpu_req_reply_after_stream(rq, q->stream, s, buf, (size_t)host_bytes, pinned);
  }
  r = D->cuMemcpy3DAsync(&m, s);
  if (r != CUDA_SUCCESS) return FAIL(r, "cuMemcpy3DAsync: %s", ENAME(r));
  return CUDA_SUCCESS;
}

/* ---- texture and surface objects ------------------------------------------ */

static CUresult view_put(rgpu_worker *w, rgpu_handle_map *map, uint64_t handle,
                         const rgpu_view_rec *v) {
  rgpu_view_rec *rec = malloc(sizeof *rec);
  if (!rec || rgpu_handle_map_put(map, handle, rec, w->cur_dev)) {
    free(rec);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *rec = *v;
  return CUDA_SUCCESS;
}

CUresult rgpu_h_texobj_create(rgpu_req *rq, const rgpu_msg_texobj_create_req *q) {
  rgpu_worker *w = rq->w;
  CUresult r = need(w, (const void *)D->cuTexObjectCreate, "cuTexObjectCreate");
  if (r) return r;
  CUDA_RESOURCE_DESC res;
  memset(&res, 0, sizeof res);
  rgpu_view_rec view = {0};
  if (q->res_type == CU_RESOURCE_TYPE_ARRAY) {
    rgpu_array_rec *rec = NULL;
    if ((r = get_array(w, q->array, &rec))) return r;
    res.resType = CU_RESOURCE_TYPE_ARRAY;
    res.res.array.hArray = rec->arr;
    view.arr = rec;
  } else if (q->res_type == CU_RESOURCE_TYPE_LINEAR || q->res_type == CU_RESOURCE_TYPE_PITCH2D) {
    uint32_t es;
    if ((r = element_size(w, q->format, q->channels, &es))) return r;
    uint64_t span;
    if (q->res_type == CU_RESOURCE_TYPE_LINEAR) {
      span = q->width;
    } else {
      unsigned __int128 s = q->height ? (unsigned __int128)q->pitch * (q->height - 1) +
                                            (unsigned __int128)q->width * es
                                      : 0;
      if (q->width == 0 || q->height == 0 || (unsigned __int128)q->width * es > q->pitch ||
          s > UINT64_MAX)
        return FAIL(CUDA_ERROR_INVALID_VALUE,
                    "texture on pitched memory: %llu x %llu elements of %u bytes, pitch %llu",
                    (unsigned long long)q->width, (unsigned long long)q->height, es,
                    (unsigned long long)q->pitch);
      span = (uint64_t)s;
    }
    if (span == 0) return FAIL(CUDA_ERROR_INVALID_VALUE, "texture on 0 bytes of memory");
    if ((r = rgpu_worker_range_check(w, q->ptr, span, "cuTexObjectCreate"))) return r;
    res.resType = (CUresourcetype)q->res_type;
    if (q->res_type == CU_RESOURCE_TYPE_LINEAR) {
      res.res.linear.devPtr = (CUdeviceptr)q->ptr;
      res.res.linear.format = (CUarray_format)q->format;
      res.res.linear.numChannels = q->channels;
      res.res.linear.sizeInBytes = (size_t)q->width;
    } else {
      res.res.pitch2D.devPtr = (CUdeviceptr)q->ptr;
      res.res.pitch2D.format = (CUarray_format)q->format;
      res.res.pitch2D.numChannels = q->channels;
      res.res.pitch2D.width = (size_t)q->width;
      res.res.pitch2D.height = (size_t)q->height;
      res.res.pitch2D.pitchInBytes = (size_t)q->pitch;
    }
    view.dptr = q->ptr;
    view.size = span;
  } else {
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "texture resource type %u is not supported by rgpu",
                q->res_type);
  }
  CUDA_TEXTURE_DESC td;
  memset(&td, 0, sizeof td);
  td.addressMode[0] = (CUaddress_mode)q->address_mode0;
  td.addressMode[1] = (CUaddress_mode)q->address_mode1;
  td.addressMode[2] = (CUaddress_mode)q->address_mode2;
  td.filterMode = (CUfilter_mode)q->filter_mode;
  td.flags = q->flags;
  td.maxAnisotropy = q->max_anisotropy;
  td.mipmapFilterMode = (CUfilter_mode)q->mipmap_filter_mode;
  td.mipmapLevelBias = q->mipmap_level_bias;
  td.minMipmapLevelClamp = q->min_mipmap_level_clamp;
  td.maxMipmapLevelClamp = q->max_mipmap_level_clamp;
  td.borderColor[0] = q->border0, td.borderColor[1] = q->border1;
  td.borderColor[2] = q->border2, td.borderColor[3] = q->border3;
  CUtexObject tex = 0;
  r = D->cuTexObjectCreate(&tex, &res, &td, NULL);
  if (r != CUDA_SUCCESS) return FAIL(r, "cuTexObjectCreate: %s", ENAME(r));
  if (tex == 0 || rgpu_handle_map_get(&w->texobjs, tex) ||
      view_put(w, &w->texobjs, tex, &view) != CUDA_SUCCESS) {
    D->cuTexObjectDestroy(tex);
    return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server cannot keep texture object %llu",
                (unsigned long long)tex);
  }
  rgpu_msg_texobj_create_rep rep = {.texobj = tex};
  rgpu_msg_texobj_create_rep_encode(rq->rep, &rep);
  return CUDA_SUCCESS;
}

/* TEXOBJ_DESTROY and SURFOBJ_DESTROY: only objects of this session. */
static CUresult view_destroy(rgpu_worker *w, uint64_t handle, int surf) {
  rgpu_handle_entry e;
  if (rgpu_handle_map_remove(surf ? &w->surfobjs : &w->texobjs, handle, &e))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%llu is not a %s object of this session",
                (unsigned long long)handle, surf ? "surface" : "texture");
  free(e.ptr);
  CUresult r = surf ? D->cuSurfObjectDestroy((CUsurfObject)handle)
                    : D->cuTexObjectDestroy((CUtexObject)handle);
  if (r != CUDA_SUCCESS)
    return FAIL(r, "%s: %s", surf ? "cuSurfObjectDestroy" : "cuTexObjectDestroy", ENAME(r));
  return CUDA_SUCCESS;
}

CUresult rgpu_h_texobj_destroy(rgpu_req *rq, const rgpu_msg_texobj_destroy_req *q) {
  return view_destroy(rq->w, q->texobj, 0);
}

CUresult rgpu_h_surfobj_create(rgpu_req *rq, const rgpu_msg_surfobj_create_req *q) {
  rgpu_worker *w = rq->w;
  CUresult r = need(w, (const void *)D->cuSurfObjectCreate, "cuSurfObjectCreate");
  if (r) return r;
  rgpu_array_rec *rec = NULL;
  if ((r = get_array(w, q->array, &rec))) return r;
  CUDA_RESOURCE_DESC res;
  memset(&res, 0, sizeof res);
  res.resType = CU_RESOURCE_TYPE_ARRAY;
  res.res.array.hArray = rec->arr;
  CUsurfObject surf = 0;
  r = D->cuSurfObjectCreate(&surf, &res);
  if (r != CUDA_SUCCESS) return FAIL(r, "cuSurfObjectCreate: %s", ENAME(r));
  rgpu_view_rec view = {.arr = rec};
  if (surf == 0 || rgpu_handle_map_get(&w->surfobjs, surf) ||
      view_put(w, &w->surfobjs, surf, &view) != CUDA_SUCCESS) {
    D->cuSurfObjectDestroy(surf);
    return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server cannot keep surface object %llu",
                (unsigned long long)surf);
  }
  rgpu_msg_surfobj_create_rep rep = {.surfobj = surf};
  rgpu_msg_surfobj_create_rep_encode(rq->rep, &rep);
  return CUDA_SUCCESS;
}

CUresult rgpu_h_surfobj_destroy(rgpu_req *rq, const rgpu_msg_surfobj_destroy_req *q) {
  return view_destroy(rq->w, q->surfobj, 1);
}

/* ---- teardown -------------------------------------------------------------- */

static int view_matches(const rgpu_view_rec *v, const void *array_rec, uint64_t dptr,
                        uint64_t size) {
  if (array_rec) return v->arr == array_rec;
  return !v->arr && v->dptr < dptr + size && dptr < v->dptr + v->size;
}

static void drop_views_in(rgpu_worker *w, rgpu_handle_map *map, int surf, const void *array_rec,
                          uint64_t dptr, uint64_t size) {
  for (size_t i = 0; i < map->n;) {
    const rgpu_handle_entry *e = &map->v[i];
    if (!view_matches(e->ptr, array_rec, dptr, size)) {
      i++;
      continue;
    }
    uint64_t h = e->id;
    free(e->ptr);
    rgpu_handle_map_remove(map, h, NULL);
    if (surf)
      D->cuSurfObjectDestroy((CUsurfObject)h);
    else
      D->cuTexObjectDestroy((CUtexObject)h);
  }
}

void rgpu_worker_drop_views(rgpu_worker *w, const void *array_rec, uint64_t dptr, uint64_t size) {
  drop_views_in(w, &w->texobjs, 0, array_rec, dptr, size);
  drop_views_in(w, &w->surfobjs, 1, array_rec, dptr, size);
}

typedef struct {
  rgpu_worker *w;
  int destroy, surf;
} drop_ctx;

static void drop_view(void *p, const rgpu_handle_entry *e) {
  drop_ctx *d = p;
  rgpu_worker *w = d->w;
  if (d->destroy && d->surf) D->cuSurfObjectDestroy((CUsurfObject)e->id);
  if (d->destroy && !d->surf) D->cuTexObjectDestroy((CUtexObject)e->id);
  free(e->ptr);
}

static void drop_array(void *p, const rgpu_handle_entry *e) {
  drop_ctx *d = p;
  rgpu_worker *w = d->w;
  rgpu_array_rec *rec = e->ptr;
  if (d->destroy) D->cuArrayDestroy(rec->arr);
  w->array_bytes -= rec->bytes;
  free(rec);
}

void rgpu_worker_drop_arrays(rgpu_worker *w, int dev, int destroy) {
  drop_ctx d = {w, destroy, 0};
  rgpu_handle_map_remove_matching(&w->texobjs, dev, drop_view, &d);
  d.surf = 1;
  rgpu_handle_map_remove_matching(&w->surfobjs, dev, drop_view, &d);
  rgpu_handle_map_remove_matching(&w->arrays, dev, drop_array, &d);
}
