/* Virtual memory management: the driver API's cuMemAddressReserve,
 * cuMemCreate, cuMemMap, cuMemSetAccess and their inverses (message VMM,
 * proto/rgpu_vmm_proto.h; the client is driver/rgpu_drv_vmm.c).
 *
 * The contract is server/rgpu_req.h's: nothing the client sends is
 * trusted.  Physical allocations are named by the client's ids and looked
 * up in this session's table; an address range must lie in one of this
 * session's reservations before the driver maps it, and the session's
 * copies reach a mapping only once cuMemSetAccess made it accessible (then
 * it joins w->allocs as RGPU_ALLOC_VMM, which every copy's range check
 * consults; adjacent accessible mappings join as one entry, so a copy
 * across the boundary of two chunks of one reservation passes, as on the
 * driver).  Physical memory counts against the session's quota from
 * cuMemCreate until it is both released and unmapped, as the driver keeps
 * it that long.  A session that ends, or a device reset, unmaps, releases
 * and frees what is left (rgpu_worker_drop_vmm). */
#include <stdlib.h>
#include <string.h>

#include "rgpu_dispatch.h"
#include "rgpu_log.h"
#include "rgpu_vmm_proto.h"
#include "rgpu_worker_internal.h"

#define D (&w->drv)
#define FAIL(status, ...) rgpu_worker_fail(w, (status), __VA_ARGS__)
#define ENAME(r) rgpu_driver_error_name(D, (r))
#define ULL(v) ((unsigned long long)(v))

/* A physical allocation (cuMemCreate). */
typedef struct {
  CUmemGenericAllocationHandle h;
  uint64_t size;
  int device;
  unsigned refs; /* handles the client holds: cuMemCreate's and each cuMemRetainAllocationHandle's;
                    0: released, only its mappings keep it */
  unsigned maps; /* live mappings of it */
} vmm_phys;

/* The allocation of id, or NULL; released ones are not the client's to
 * name any more. */
static vmm_phys *phys_get(rgpu_worker *w, uint64_t id) {
  const rgpu_handle_entry *e = rgpu_handle_map_get(&w->vmm_handles, id);
  vmm_phys *p = e ? e->ptr : NULL;
  return p && p->refs ? p : NULL;
}

/* Drops the record once neither a handle nor a mapping keeps it. */
static void phys_maybe_forget(rgpu_worker *w, uint64_t id) {
  const rgpu_handle_entry *e = rgpu_handle_map_get(&w->vmm_handles, id);
  vmm_phys *p = e ? e->ptr : NULL;
  if (!p || p->refs || p->maps) return;
  w->vmm_bytes -= p->size;
  rgpu_handle_map_remove(&w->vmm_handles, id, NULL);
  free(p);
}

static CUresult driver_has_vmm(rgpu_worker *w) {
  if (D->cuMemAddressReserve && D->cuMemAddressFree && D->cuMemCreate && D->cuMemRelease &&
      D->cuMemMap && D->cuMemUnmap && D->cuMemSetAccess && D->cuMemGetAllocationGranularity)
    return CUDA_SUCCESS;
  return FAIL(CUDA_ERROR_NOT_SUPPORTED, "the server's CUDA driver has no virtual memory management");
}

static CUresult device_ok(rgpu_worker *w, int32_t dev) {
  if (dev < 0 || dev >= w->device_count || dev >= RGPU_MAX_DEVICES)
    return FAIL(CUDA_ERROR_INVALID_DEVICE, "VMM: device %d of %d", dev, w->device_count);
  return CUDA_SUCCESS;
}

static CUmemAllocationProp device_prop(rgpu_worker *w, int32_t dev, uint64_t packed) {
  CUmemAllocationProp p;
  memset(&p, 0, sizeof p);
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = rgpu_worker_ordinal(w, dev);
  p.allocFlags.compressionType = (unsigned char)RGPU_VMM_PROP_COMPRESSION(packed);
  p.allocFlags.gpuDirectRDMACapable = (unsigned char)RGPU_VMM_PROP_RDMA(packed);
  p.allocFlags.usage = (unsigned short)RGPU_VMM_PROP_USAGE(packed);
  return p;
}

/* Whether [ptr, ptr+size) lies in one reservation of this session. */
static int reserved(rgpu_worker *w, uint64_t ptr, uint64_t size) {
  return rgpu_alloc_table_lookup(&w->vmm_reserved, ptr, size) != NULL;
}

static int accessible(rgpu_worker *w, uint64_t mapping) {
  return rgpu_handle_map_get(&w->vmm_access, mapping) != NULL;
}

/* Makes w->allocs' RGPU_ALLOC_VMM entries the accessible mappings again,
 * adjacent ones of one device joined (vmm_mapped is sorted by address). */
static CUresult ranges_rebuild(rgpu_worker *w) {
  for (size_t i = 0; i < w->allocs.n;) {
    if (w->allocs.v[i].kind == RGPU_ALLOC_VMM)
      rgpu_alloc_table_remove(&w->allocs, w->allocs.v[i].dptr, NULL);
    else
      i++;
  }
  uint64_t start = 0, end = 0;
  int dev = -1, rc = 0;
  for (size_t i = 0; i <= w->vmm_mapped.n && rc == 0; i++) {
    const rgpu_alloc *m = i < w->vmm_mapped.n ? &w->vmm_mapped.v[i] : NULL;
    if (m && !accessible(w, m->dptr)) continue;
    if (m && end && m->dptr == end && m->device == dev) {
      end += m->size;
      continue;
    }
    if (end) rc = rgpu_alloc_table_add(&w->allocs, start, end - start, RGPU_ALLOC_VMM, dev, 0);
    start = end = 0;
    if (m) {
      start = m->dptr;
      end = m->dptr + m->size;
      dev = m->device;
    }
  }
  return rc ? FAIL(CUDA_ERROR_OUT_OF_MEMORY, "cannot track the session's mapped ranges")
            : CUDA_SUCCESS;
}

/* Unmaps one mapping (its entry in vmm_mapped, already removed) on the
 * driver and forgets its access; the caller rebuilds the ranges. */
static CUresult unmap_one(rgpu_worker *w, const rgpu_alloc *m, int destroy) {
  rgpu_worker_drop_views(w, NULL, m->dptr, m->size);
  rgpu_handle_map_remove(&w->vmm_access, m->dptr, NULL);
  CUresult r = destroy ? D->cuMemUnmap((CUdeviceptr)m->dptr, (size_t)m->size) : CUDA_SUCCESS;
  const rgpu_handle_entry *e = rgpu_handle_map_get(&w->vmm_handles, m->module_id);
  if (e) {
    vmm_phys *p = e->ptr;
    if (p->maps) p->maps--;
    phys_maybe_forget(w, m->module_id);
  }
  return r;
}

/* The mappings lying wholly in [ptr, ptr+size): 0 when every mapping that
 * touches the range lies in it (CUDA unmaps and sets access on whole
 * mappings), with their count; -1 when one only overlaps it. */
static int mappings_in(rgpu_worker *w, uint64_t ptr, uint64_t size, size_t *count) {
  *count = 0;
  for (size_t i = 0; i < w->vmm_mapped.n; i++) {
    const rgpu_alloc *m = &w->vmm_mapped.v[i];
    uint64_t end = m->dptr + m->size;
    if (end <= ptr || m->dptr >= ptr + size) continue;
    if (m->dptr < ptr || end > ptr + size) return -1;
    (*count)++;
  }
  return 0;
}

static CUresult op_granularity(rgpu_worker *w, const rgpu_msg_vmm_req *q, uint64_t *value) {
  CUresult r = device_ok(w, q->device);
  if (r) return r;
  if (q->arg > CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemGetAllocationGranularity: option %llu", ULL(q->arg));
  CUmemAllocationProp p = device_prop(w, q->device, q->flags);
  size_t g = 0;
  r = D->cuMemGetAllocationGranularity(&g, &p, (CUmemAllocationGranularity_flags)q->arg);
  if (r) return FAIL(r, "cuMemGetAllocationGranularity: %s", ENAME(r));
  *value = g;
  return CUDA_SUCCESS;
}

static CUresult op_reserve(rgpu_worker *w, const rgpu_msg_vmm_req *q, uint64_t *value) {
  if (q->size == 0 || q->size > SIZE_MAX)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemAddressReserve: size %llu", ULL(q->size));
  CUdeviceptr p = 0;
  CUresult r = D->cuMemAddressReserve(&p, (size_t)q->size, (size_t)q->arg, (CUdeviceptr)q->ptr, 0);
  if (r) return FAIL(r, "cuMemAddressReserve(%llu bytes): %s", ULL(q->size), ENAME(r));
  if (rgpu_alloc_table_add(&w->vmm_reserved, p, q->size, RGPU_ALLOC_MALLOC, w->cur_dev, 0)) {
    D->cuMemAddressFree(p, (size_t)q->size);
    return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "cannot track the reservation at 0x%llx", ULL(p));
  }
  *value = p;
  return CUDA_SUCCESS;
}

static CUresult op_address_free(rgpu_worker *w, const rgpu_msg_vmm_req *q) {
  const rgpu_alloc *a = rgpu_alloc_table_find(&w->vmm_reserved, q->ptr);
  if (!a || a->size != q->size)
    return FAIL(CUDA_ERROR_INVALID_VALUE,
                "cuMemAddressFree: [0x%llx, +%llu) is not a reservation of this session",
                ULL(q->ptr), ULL(q->size));
  size_t n = 0;
  mappings_in(w, q->ptr, q->size, &n);
  if (n)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemAddressFree: %zu mappings still in the range", n);
  CUresult r = D->cuMemAddressFree((CUdeviceptr)q->ptr, (size_t)q->size);
  if (r) return FAIL(r, "cuMemAddressFree: %s", ENAME(r));
  rgpu_alloc_table_remove(&w->vmm_reserved, q->ptr, NULL);
  return CUDA_SUCCESS;
}

static CUresult op_create(rgpu_worker *w, const rgpu_msg_vmm_req *q) {
  CUresult r = device_ok(w, q->device);
  if (r) return r;
  if (q->handle == 0 || rgpu_handle_map_get(&w->vmm_handles, q->handle))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemCreate: handle id %llu is 0 or in use",
                ULL(q->handle));
  if (q->size == 0 || q->size > SIZE_MAX)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemCreate: size %llu", ULL(q->size));
  uint64_t held = rgpu_worker_held_bytes(w);
  if (w->cfg.mem_quota && (q->size > w->cfg.mem_quota || held > w->cfg.mem_quota - q->size))
    return FAIL(CUDA_ERROR_OUT_OF_MEMORY,
                "session memory quota exceeded: %llu bytes in use, %llu requested, quota %llu",
                ULL(held), ULL(q->size), ULL(w->cfg.mem_quota));
  vmm_phys *p = calloc(1, sizeof *p);
  if (!p) return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory");
  CUmemAllocationProp prop = device_prop(w, q->device, q->flags);
  r = D->cuMemCreate(&p->h, (size_t)q->size, &prop, 0);
  if (r) {
    free(p);
    return FAIL(r, "cuMemCreate(%llu bytes): %s", ULL(q->size), ENAME(r));
  }
  p->size = q->size;
  p->device = q->device;
  p->refs = 1;
  if (rgpu_handle_map_put(&w->vmm_handles, q->handle, p, q->device)) {
    D->cuMemRelease(p->h);
    free(p);
    return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "cannot track the allocation");
  }
  w->vmm_bytes += p->size;
  return CUDA_SUCCESS;
}

static CUresult op_release(rgpu_worker *w, const rgpu_msg_vmm_req *q) {
  vmm_phys *p = phys_get(w, q->handle);
  if (!p) return FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemRelease: unknown handle %llu", ULL(q->handle));
  CUresult r = D->cuMemRelease(p->h);
  if (r) return FAIL(r, "cuMemRelease: %s", ENAME(r));
  p->refs--;
  phys_maybe_forget(w, q->handle);
  return CUDA_SUCCESS;
}

/* cuMemRetainAllocationHandle: the allocation mapped at ptr, one more
 * handle of it for the client (its id again, released as often as it was
 * retained), also after the client released the one it made. */
static CUresult op_retain(rgpu_worker *w, const rgpu_msg_vmm_req *q, uint64_t *id) {
  const rgpu_alloc *m = rgpu_alloc_table_lookup(&w->vmm_mapped, q->ptr, 1);
  const rgpu_handle_entry *e = m ? rgpu_handle_map_get(&w->vmm_handles, m->module_id) : NULL;
  if (!e)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemRetainAllocationHandle: 0x%llx is not mapped", ULL(q->ptr));
  vmm_phys *p = e->ptr;
  if (!D->cuMemRetainAllocationHandle)
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "the server's driver has no cuMemRetainAllocationHandle");
  CUmemGenericAllocationHandle h;
  CUresult r = D->cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)q->ptr);
  if (r) return FAIL(r, "cuMemRetainAllocationHandle: %s", ENAME(r));
  p->refs++;
  *id = m->module_id;
  return CUDA_SUCCESS;
}

static CUresult op_map(rgpu_worker *w, const rgpu_msg_vmm_req *q) {
  vmm_phys *p = phys_get(w, q->handle);
  if (!p) return FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemMap: unknown handle %llu", ULL(q->handle));
  if (q->size == 0 || q->arg > p->size || q->size > p->size - q->arg)
    return FAIL(CUDA_ERROR_INVALID_VALUE,
                "cuMemMap: %llu bytes at offset %llu of a %llu-byte allocation", ULL(q->size),
                ULL(q->arg), ULL(p->size));
  if (!reserved(w, q->ptr, q->size))
    return FAIL(CUDA_ERROR_INVALID_VALUE,
                "cuMemMap: [0x%llx, +%llu) is not inside a reservation of this session",
                ULL(q->ptr), ULL(q->size));
  CUresult r = D->cuMemMap((CUdeviceptr)q->ptr, (size_t)q->size, (size_t)q->arg, p->h, 0);
  if (r) return FAIL(r, "cuMemMap: %s", ENAME(r));
  /* The driver refuses a range that is mapped already, so this cannot
   * overlap; the handle's id rides in module_id. */
  if (rgpu_alloc_table_add(&w->vmm_mapped, q->ptr, q->size, RGPU_ALLOC_MALLOC, p->device,
                           q->handle)) {
    D->cuMemUnmap((CUdeviceptr)q->ptr, (size_t)q->size);
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemMap: cannot track the mapping at 0x%llx",
                ULL(q->ptr));
  }
  p->maps++;
  return CUDA_SUCCESS;
}

static CUresult op_unmap(rgpu_worker *w, const rgpu_msg_vmm_req *q) {
  size_t n = 0;
  if (q->size == 0 || mappings_in(w, q->ptr, q->size, &n) || n == 0)
    return FAIL(CUDA_ERROR_INVALID_VALUE,
                "cuMemUnmap: [0x%llx, +%llu) is not a whole set of this session's mappings",
                ULL(q->ptr), ULL(q->size));
  /* The driver unmaps the range in one call, as the program asked. */
  CUresult r = D->cuMemUnmap((CUdeviceptr)q->ptr, (size_t)q->size);
  if (r) return FAIL(r, "cuMemUnmap: %s", ENAME(r));
  for (size_t i = 0; i < w->vmm_mapped.n;) {
    rgpu_alloc m = w->vmm_mapped.v[i];
    if (m.dptr >= q->ptr && m.dptr + m.size <= q->ptr + q->size) {
      rgpu_alloc_table_remove(&w->vmm_mapped, m.dptr, NULL);
      unmap_one(w, &m, 0);
    } else {
      i++;
    }
  }
  return ranges_rebuild(w);
}

static CUresult op_set_access(rgpu_worker *w, const rgpu_msg_vmm_req *q) {
  CUresult r = device_ok(w, q->device);
  if (r) return r;
  size_t n = 0;
  if (q->size == 0 || mappings_in(w, q->ptr, q->size, &n) || n == 0)
    return FAIL(CUDA_ERROR_INVALID_VALUE,
                "cuMemSetAccess: [0x%llx, +%llu) is not a whole set of this session's mappings",
                ULL(q->ptr), ULL(q->size));
  if (q->arg != CU_MEM_ACCESS_FLAGS_PROT_NONE && q->arg != CU_MEM_ACCESS_FLAGS_PROT_READ &&
      q->arg != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemSetAccess: flags %llu", ULL(q->arg));
  CUmemAccessDesc d;
  memset(&d, 0, sizeof d);
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = rgpu_worker_ordinal(w, q->device);
  d.flags = (CUmemAccess_flags)q->arg;
  r = D->cuMemSetAccess((CUdeviceptr)q->ptr, (size_t)q->size, &d, 1);
  if (r) return FAIL(r, "cuMemSetAccess: %s", ENAME(r));
  /* Accessible mappings join the ranges the session's copies may name;
   * PROT_NONE takes them out again. */
  for (size_t i = 0; i < w->vmm_mapped.n; i++) {
    const rgpu_alloc *m = &w->vmm_mapped.v[i];
    if (m->dptr < q->ptr || m->dptr + m->size > q->ptr + q->size) continue;
    if (q->arg == CU_MEM_ACCESS_FLAGS_PROT_NONE) {
      if (accessible(w, m->dptr)) rgpu_worker_drop_views(w, NULL, m->dptr, m->size);
      rgpu_handle_map_remove(&w->vmm_access, m->dptr, NULL);
    } else if (!accessible(w, m->dptr) &&
               rgpu_handle_map_put(&w->vmm_access, m->dptr, NULL, m->device)) {
      return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "cannot track the mapping at 0x%llx", ULL(m->dptr));
    }
  }
  return ranges_rebuild(w);
}

CUresult rgpu_h_vmm(rgpu_req *rq, const rgpu_msg_vmm_req *q) {
  rgpu_worker *w = rq->w;
  CUresult r = driver_has_vmm(w);
  if (r) return r;
  uint64_t value = 0;
  switch (q->op) {
  case RGPU_VMM_GRANULARITY: r = op_granularity(w, q, &value); break;
  case RGPU_VMM_RESERVE: r = op_reserve(w, q, &value); break;
  case RGPU_VMM_ADDRESS_FREE: r = op_address_free(w, q); break;
  case RGPU_VMM_CREATE: r = op_create(w, q); break;
  case RGPU_VMM_RELEASE: r = op_release(w, q); break;
  case RGPU_VMM_MAP: r = op_map(w, q); break;
  case RGPU_VMM_UNMAP: r = op_unmap(w, q); break;
  case RGPU_VMM_SET_ACCESS: r = op_set_access(w, q); break;
  case RGPU_VMM_RETAIN: r = op_retain(w, q, &value); break;
  default: return FAIL(CUDA_ERROR_INVALID_VALUE, "VMM: unknown operation %u", q->op);
  }
  if (r) return r;
  rgpu_msg_vmm_rep rep = {.value = value};
  rgpu_msg_vmm_rep_encode(rq->rep, &rep);
  return CUDA_SUCCESS;
}

void rgpu_worker_drop_vmm(rgpu_worker *w, int dev, int destroy) {
  int can = destroy && D->cuMemUnmap && D->cuMemRelease && D->cuMemAddressFree;
  /* Mappings first (they keep physical memory), then the handles the
   * program did not release, then the reservations. */
  for (size_t i = 0; i < w->vmm_mapped.n;) {
    rgpu_alloc m = w->vmm_mapped.v[i];
    if (dev >= 0 && m.device != dev) {
      i++;
      continue;
    }
    rgpu_alloc_table_remove(&w->vmm_mapped, m.dptr, NULL);
    unmap_one(w, &m, can);
  }
  ranges_rebuild(w);
  for (size_t i = 0; i < w->vmm_handles.n;) {
    rgpu_handle_entry e = w->vmm_handles.v[i];
    vmm_phys *p = e.ptr;
    if (dev >= 0 && p->device != dev) {
      i++;
      continue;
    }
    for (unsigned k = 0; can && k < p->refs; k++) D->cuMemRelease(p->h);
    w->vmm_bytes -= p->size;
    rgpu_handle_map_remove(&w->vmm_handles, e.id, NULL);
    free(p);
  }
  for (size_t i = 0; i < w->vmm_reserved.n;) {
    rgpu_alloc a = w->vmm_reserved.v[i];
    if (dev >= 0 && a.device != dev) {
      i++;
      continue;
    }
    if (can) D->cuMemAddressFree((CUdeviceptr)a.dptr, (size_t)a.size);
    rgpu_alloc_table_remove(&w->vmm_reserved, a.dptr, NULL);
  }
}
