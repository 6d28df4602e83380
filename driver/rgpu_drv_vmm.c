/* Virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap,
 * cuMemSetAccess and their inverses): the server's driver does each one
 * (message VMM, proto/rgpu_vmm_proto.h; server/rgpu_handlers_vmm.c).
 *
 * Device pointers are the server's addresses, so a reservation's address is
 * the server driver's and kernels use it as they would locally.  A
 * physical allocation's CUmemGenericAllocationHandle is an id this client
 * names it by (like streams and events).  Every call is a round trip: each
 * one's result is the driver's verdict, which the program checks at the
 * call, and none is frequent.  What the client keeps: the properties of
 * its allocations (cuMemGetAllocationPropertiesFromHandle) and its
 * mappings with their access (cuMemGetAccess); a mapping made accessible
 * joins the runtime's device ranges, so runtime copies with
 * cudaMemcpyDefault and cudaPointerGetAttributes know it as device memory
 * (cudaFree does not: it was not cudaMalloc'ed).
 *
 * Refused, CUDA_ERROR_NOT_SUPPORTED: exporting and importing shareable
 * handles (they name memory of one machine's processes, as IPC handles do;
 * asking for a handle type at cuMemCreate is accepted), and allocations
 * other than pinned device memory (host or host-NUMA locations).
 * cuMemRetainAllocationHandle gives the mapped allocation's id again; the
 * client keeps an allocation's properties while a handle or a mapping of
 * it lives. */
#include <stdlib.h>
#include <string.h>

#include "rgpu_array.h"
#include "rgpu_calls.h"
#include "rgpu_drv_module.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"
#include "rgpu_vmm_proto.h"

typedef struct {
  uint64_t id;
  CUmemAllocationProp prop;
  uint64_t size;
  unsigned refs; /* handles the program holds (create, retains) */
} vmm_alloc;

typedef struct {
  uint64_t ptr, size, id;
  int device;
  unsigned long long flags; /* CUmemAccess_flags set on it (PROT_NONE: none yet) */
} vmm_map;

/* g_vmm_lock guards both lists: a leaf (no round trip under it). */
static rgpu_mutex g_vmm_lock = RGPU_MUTEX_INITIALIZER;
static vmm_alloc *g_allocs;
static size_t g_nallocs, g_capallocs;
static vmm_map *g_maps;
static size_t g_nmaps, g_capmaps;
/* The device ranges listed for the accessible mappings (their bases). */
static uint64_t *g_listed;
static size_t g_nlisted, g_caplisted;

/* Sends one VMM op on the current context's device and returns the
 * driver's result (the runtime's last error left as it was). */
static CUresult vmm_call(uint32_t op, int32_t device, uint64_t flags, uint64_t handle,
                         uint64_t ptr, uint64_t size, uint64_t arg, uint64_t *value) {
  RGPU_DRV_BEGIN();
  int dev = 0, n = 0;
  CUresult r = rgpu_drv_ctx_enter(&dev);
  /* An op that names a device goes to that device's server, with the
   * server's own number for it; the others to the current context's. */
  int names_device = op == RGPU_VMM_GRANULARITY || op == RGPU_VMM_CREATE ||
                     op == RGPU_VMM_SET_ACCESS;
  if (r == CUDA_SUCCESS && names_device) {
    cudaError_t e = rgpu_rt_device_count(c, &n);
    r = e != cudaSuccess ? rgpu_drv_from_rt(e)
        : device < 0 || device >= n ? CUDA_ERROR_INVALID_DEVICE
                                    : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS) {
      dev = device;
      device = (int32_t)rgpu_rt_local_device(rgpu_rt_route(c, device), device);
    }
  }
  if (r == CUDA_SUCCESS) {
    rgpu_msg_vmm_req q = {.op = op, .device = device, .flags = flags, .handle = handle,
                          .ptr = ptr, .size = size, .arg = arg};
    rgpu_msg_vmm_rep rep = {0};
    rgpu_status rc = rgpu_call_vmm(c, dev, 0, &q, &rep, NULL);
    r = rc ? rgpu_drv_reply_ret(c, rc) : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS && value) *value = rep.value;
  }
  RGPU_DRV_RET(r);
}

/* What travels of a CUmemAllocationProp: pinned device memory on a
 * device of the session, no shareable handle asked for beyond NONE. */
static CUresult prop_check(const CUmemAllocationProp *p, uint64_t *packed) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  if (p->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (p->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    static int logged;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      RGPU_WARN("cuMemCreate: only device locations are supported by rgpu (host memory of the "
                "server is not the program's); CUDA_ERROR_NOT_SUPPORTED");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  /* Shareable handle types are accepted and not passed on: programs ask
   * for them in case they share the memory later (PyTorch's expandable
   * segments ask for POSIX file descriptors), and only the export itself,
   * which would hand out a handle of the server machine, is refused
   * (cuMemExportToShareableHandle: CUDA_ERROR_NOT_SUPPORTED). */
  *packed = RGPU_VMM_PROP(p->allocFlags.compressionType, p->allocFlags.gpuDirectRDMACapable,
                          p->allocFlags.usage);
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuMemGetAllocationGranularity(size_t *granularity,
                                                         const CUmemAllocationProp *prop,
                                                         CUmemAllocationGranularity_flags option) {
  uint64_t packed = 0;
  if (!granularity) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = prop_check(prop, &packed);
  if (r != CUDA_SUCCESS) return r;
  uint64_t g = 0;
  r = vmm_call(RGPU_VMM_GRANULARITY, prop->location.id, packed, 0, 0, 0, (uint64_t)option, &g);
  if (r == CUDA_SUCCESS) *granularity = (size_t)g;
  return r;
}

RGPU_DRV CUresult rgpu_drv_cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                               CUdeviceptr addr, unsigned long long flags) {
  if (!ptr || size == 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  uint64_t p = 0;
  CUresult r = vmm_call(RGPU_VMM_RESERVE, 0, 0, 0, (uint64_t)addr, size, alignment, &p);
  if (r == CUDA_SUCCESS) *ptr = (CUdeviceptr)p;
  return r;
}

RGPU_DRV CUresult rgpu_drv_cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  return vmm_call(RGPU_VMM_ADDRESS_FREE, 0, 0, 0, (uint64_t)ptr, size, 0, NULL);
}

RGPU_DRV CUresult rgpu_drv_cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                       const CUmemAllocationProp *prop, unsigned long long flags) {
  uint64_t packed = 0;
  if (!handle || size == 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = prop_check(prop, &packed);
  if (r != CUDA_SUCCESS) return r;
  uint64_t id = rgpu_rt_new_handle_id();
  rgpu_mutex_lock(&g_vmm_lock);
  int room = RGPU_ARRAY_RESERVE(g_allocs, g_capallocs, g_nallocs + 1, 8) == 0;
  rgpu_mutex_unlock(&g_vmm_lock);
  if (!room) return CUDA_ERROR_OUT_OF_MEMORY;
  r = vmm_call(RGPU_VMM_CREATE, prop->location.id, packed, id, 0, size, 0, NULL);
  if (r != CUDA_SUCCESS) return r;
  rgpu_mutex_lock(&g_vmm_lock);
  g_allocs[g_nallocs++] = (vmm_alloc){.id = id, .prop = *prop, .size = size, .refs = 1};
  rgpu_mutex_unlock(&g_vmm_lock);
  *handle = (CUmemGenericAllocationHandle)id;
  return CUDA_SUCCESS;
}

/* Forgets the allocations no handle and no mapping names any more.
 * g_vmm_lock held. */
static void allocs_forget_locked(void) {
  for (size_t i = 0; i < g_nallocs;) {
    int mapped = 0;
    for (size_t k = 0; k < g_nmaps && !mapped; k++) mapped = g_maps[k].id == g_allocs[i].id;
    if (!g_allocs[i].refs && !mapped) g_allocs[i] = g_allocs[--g_nallocs];
    else i++;
  }
}

RGPU_DRV CUresult rgpu_drv_cuMemRelease(CUmemGenericAllocationHandle handle) {
  CUresult r = vmm_call(RGPU_VMM_RELEASE, 0, 0, (uint64_t)handle, 0, 0, 0, NULL);
  if (r != CUDA_SUCCESS) return r;
  rgpu_mutex_lock(&g_vmm_lock);
  for (size_t i = 0; i < g_nallocs; i++)
    if (g_allocs[i].id == (uint64_t)handle && g_allocs[i].refs) {
      g_allocs[i].refs--;
      break;
    }
  allocs_forget_locked();
  rgpu_mutex_unlock(&g_vmm_lock);
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr) {
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  uint64_t id = 0;
  CUresult r = vmm_call(RGPU_VMM_RETAIN, 0, 0, 0, (uint64_t)(uintptr_t)addr, 0, 0, &id);
  if (r != CUDA_SUCCESS) return r;
  rgpu_mutex_lock(&g_vmm_lock);
  for (size_t i = 0; i < g_nallocs; i++)
    if (g_allocs[i].id == id) g_allocs[i].refs++;
  rgpu_mutex_unlock(&g_vmm_lock);
  *handle = (CUmemGenericAllocationHandle)id;
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                                  CUmemGenericAllocationHandle handle) {
  if (!prop) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  rgpu_mutex_lock(&g_vmm_lock);
  for (size_t i = 0; i < g_nallocs; i++)
    if (g_allocs[i].id == (uint64_t)handle && g_allocs[i].refs) {
      *prop = g_allocs[i].prop;
      r = CUDA_SUCCESS;
    }
  rgpu_mutex_unlock(&g_vmm_lock);
  return r;
}

RGPU_DRV CUresult rgpu_drv_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                    CUmemGenericAllocationHandle handle, unsigned long long flags) {
  if (size == 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  int device = -1;
  rgpu_mutex_lock(&g_vmm_lock);
  for (size_t i = 0; i < g_nallocs; i++)
    if (g_allocs[i].id == (uint64_t)handle) device = g_allocs[i].prop.location.id;
  int room = RGPU_ARRAY_RESERVE(g_maps, g_capmaps, g_nmaps + 1, 8) == 0;
  rgpu_mutex_unlock(&g_vmm_lock);
  if (!room) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = vmm_call(RGPU_VMM_MAP, 0, 0, (uint64_t)handle, (uint64_t)ptr, size, offset, NULL);
  if (r != CUDA_SUCCESS) return r;
  rgpu_mutex_lock(&g_vmm_lock);
  g_maps[g_nmaps++] = (vmm_map){.ptr = ptr, .size = size, .id = (uint64_t)handle,
                                .device = device, .flags = CU_MEM_ACCESS_FLAGS_PROT_NONE};
  rgpu_mutex_unlock(&g_vmm_lock);
  return CUDA_SUCCESS;
}

static int map_by_address(const void *a, const void *b) {
  uint64_t x = ((const vmm_map *)a)->ptr, y = ((const vmm_map *)b)->ptr;
  return x < y ? -1 : x > y;
}

/* The runtime's device ranges for the accessible mappings, listed again:
 * adjacent ones of one device joined, as the server joins them, so a
 * copy across the chunks of one reservation is one range.  g_vmm_lock
 * held. */
static void ranges_rebuild_locked(void) {
  for (size_t i = 0; i < g_nlisted; i++) rgpu_range_remove(rgpu_rt_device_ranges(), g_listed[i], NULL);
  g_nlisted = 0;
  qsort(g_maps, g_nmaps, sizeof *g_maps, map_by_address);
  for (size_t i = 0; i < g_nmaps;) {
    if (g_maps[i].flags == CU_MEM_ACCESS_FLAGS_PROT_NONE) {
      i++;
      continue;
    }
    rgpu_range rg = {.base = g_maps[i].ptr, .size = g_maps[i].size, .device = g_maps[i].device,
                     .kind = RGPU_RANGE_VMM};
    size_t j = i + 1;
    for (; j < g_nmaps && g_maps[j].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
           g_maps[j].ptr == rg.base + rg.size && g_maps[j].device == rg.device;
         j++)
      rg.size += g_maps[j].size;
    if (RGPU_ARRAY_RESERVE(g_listed, g_caplisted, g_nlisted + 1, 8) == 0 &&
        rgpu_range_add(rgpu_rt_device_ranges(), &rg) == 0)
      g_listed[g_nlisted++] = rg.base;
    i = j;
  }
}

/* The mappings wholly inside [ptr, ptr + size) get `flags`; remove: they
 * go.  g_vmm_lock held. */
static void maps_update_locked(uint64_t ptr, uint64_t size, unsigned long long flags, int remove) {
  for (size_t i = 0; i < g_nmaps;) {
    vmm_map *m = &g_maps[i];
    if (m->ptr < ptr || m->ptr + m->size > ptr + size) {
      i++;
      continue;
    }
    if (remove) {
      g_maps[i] = g_maps[--g_nmaps];
    } else {
      m->flags = flags;
      i++;
    }
  }
  ranges_rebuild_locked();
}

RGPU_DRV CUresult rgpu_drv_cuMemUnmap(CUdeviceptr ptr, size_t size) {
  CUresult r = vmm_call(RGPU_VMM_UNMAP, 0, 0, 0, (uint64_t)ptr, size, 0, NULL);
  if (r != CUDA_SUCCESS) return r;
  rgpu_mutex_lock(&g_vmm_lock);
  maps_update_locked(ptr, size, 0, 1);
  allocs_forget_locked();
  rgpu_mutex_unlock(&g_vmm_lock);
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                          size_t count) {
  if (!desc || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  /* One descriptor per device: each is the server driver's call. */
  for (size_t i = 0; i < count; i++) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = vmm_call(RGPU_VMM_SET_ACCESS, desc[i].location.id, 0, 0, (uint64_t)ptr, size,
                          (uint64_t)desc[i].flags, NULL);
    if (r != CUDA_SUCCESS) return r;
    rgpu_mutex_lock(&g_vmm_lock);
    maps_update_locked(ptr, size, desc[i].flags, 0);
    rgpu_mutex_unlock(&g_vmm_lock);
  }
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location,
                                          CUdeviceptr ptr) {
  if (!flags || !location || location->type != CU_MEM_LOCATION_TYPE_DEVICE)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  rgpu_mutex_lock(&g_vmm_lock);
  for (size_t i = 0; i < g_nmaps; i++)
    if ((uint64_t)ptr >= g_maps[i].ptr && (uint64_t)ptr < g_maps[i].ptr + g_maps[i].size) {
      /* The flags set for the mapping, for the device they were set for;
       * rgpu keeps the last setting of each mapping. */
      *flags = g_maps[i].flags;
      r = CUDA_SUCCESS;
    }
  rgpu_mutex_unlock(&g_vmm_lock);
  return r;
}
