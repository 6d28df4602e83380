/* Stream-ordered allocation and memory pools (cudaMallocAsync, cudaFreeAsync,
 * cudaMallocFromPoolAsync, cudaMemPool*, cudaDevice{Get,Set,GetDefault}MemPool and
 * CUDA 13's cudaMem{GetDefault,Get,Set}MemPool by location).
 *
 * Design: the allocation is served at once from the ordinary device path
 * (rgpu_cudart_alloc.h: the arena or MEM_ALLOC), so the pointer is valid
 * when the call returns, a failure is the server's exact answer, and the
 * cost is cudaMalloc's (usually no round trip).  The free is deferred in
 * stream order without a wait: an arena block is reused only after a
 * device-wide synchronization issued after the free completed, a large
 * allocation's MEM_FREE is queued and runs after the device's earlier
 * work.  That is stricter than the stream's own order (it waits for every
 * stream), never looser, so no kernel still queued before the free can see
 * its memory handed out again.
 *
 * Same-stream reuse, as CUDA's pools do: a block freed with cudaFreeAsync
 * on stream S stays in its pool, tagged with S, and a later
 * cudaMallocAsync on S from that pool takes it back without a server call:
 * everything issued on S before the free has run before anything issued
 * on S after the allocation, and work on other streams must (by CUDA's
 * rules) have been ordered before the free by the program.  So a pipeline
 * that allocates and frees its temporaries every step costs no round trip
 * after its first step (a large block is otherwise one MEM_ALLOC each).
 * A pool keeps at most max(release threshold, 32 MiB) of such blocks; the
 * rest go back at once.  Kept blocks are given back when an allocation
 * would fail without them (rgpu_rt_mempool_release_cached: exact
 * out-of-memory), by cudaMemPoolTrimTo and cudaMemPoolDestroy, and forgotten
 * at cudaDeviceReset (their memory went with the context).
 *
 * Pools are client objects: they carry the attributes a program sets and
 * reads (release threshold, reuse flags) and count the bytes allocated
 * from them (used, and reserved = used + kept, current and high).  Not supported (logged,
 * cudaErrorNotSupported): shareable handles (IPC export/import).
 * cudaMallocAsync/cudaFreeAsync inside a stream capture become graph
 * memory nodes (rgpu_cudart_graph_mem.c). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_cudart.h"
#include "rgpu_cudart_alloc.h"
#include "rgpu_cudart_graph.h"
#include "rgpu_log.h"

#define POOL_MAGIC 0x504f4f4cu /* "POOL" */

struct CUmemPool_st {
  uint32_t magic;
  int device;
  int is_default;
  int reuse_follow_events, reuse_opportunistic, reuse_internal;
  uint64_t release_threshold;
  uint64_t used, used_high, reserved_high;
  uint64_t live; /* allocations not freed yet */
  uint64_t kept; /* bytes of freed blocks kept for same-stream reuse */
  struct kept_block *kept_list;
  int destroyed; /* cudaMemPoolDestroy'd with live allocations: freed with the last */
};

/* g_pool_lock guards every pool's fields, the current-pool table and the
 * allocation map.  A leaf: no frame is sent while it is held. */
static rgpu_mutex g_pool_lock = RGPU_MUTEX_INITIALIZER;
static struct CUmemPool_st g_default_pool[RGPU_MAX_DEVICES];
static struct CUmemPool_st *g_current_pool[RGPU_MAX_DEVICES];

/* Pointer -> (pool, size) of every live stream-ordered allocation. */
typedef struct alloc_rec {
  uint64_t ptr;
  uint64_t size;
  struct CUmemPool_st *pool;
  struct alloc_rec *next;
} alloc_rec;
enum { ALLOC_BUCKETS = 1024 };
/* A freed block kept for reuse on the stream that freed it. */
typedef struct kept_block {
  uint64_t ptr, size;
  uint64_t stream; /* wire id */
  struct kept_block *next;
} kept_block;
#define KEEP_MIN_BYTES (32ull << 20)
static alloc_rec *g_allocs[ALLOC_BUCKETS];

static size_t bucket_of(uint64_t p) { return (size_t)((p >> 8) ^ (p >> 20)) % ALLOC_BUCKETS; }

static int register_pool_locked(struct CUmemPool_st *p);

static struct CUmemPool_st *default_pool_locked(int dev) {
  assert(rgpu_mutex_held(&g_pool_lock));
  struct CUmemPool_st *p = &g_default_pool[dev];
  if (p->magic != POOL_MAGIC) {
    /* CUDA's defaults: reuse allowed, release threshold 0. */
    *p = (struct CUmemPool_st){.magic = POOL_MAGIC, .device = dev, .is_default = 1,
                               .reuse_follow_events = 1, .reuse_opportunistic = 1,
                               .reuse_internal = 1};
    /* Without the registration its kept blocks are only never given back
     * on out-of-memory: still correct, so a failure here is ignored. */
    (void)register_pool_locked(p);
  }
  return p;
}

static struct CUmemPool_st *current_pool_locked(int dev) {
  return g_current_pool[dev] ? g_current_pool[dev] : default_pool_locked(dev);
}

static int valid_pool(const struct CUmemPool_st *p) { return p && p->magic == POOL_MAGIC && !p->destroyed; }

/* A device index the server has: cudaErrorInvalidDevice otherwise. */
static cudaError_t check_device(rgpu_client *c, int dev) {
  int n = 0;
  cudaError_t e = rgpu_rt_device_count(c, &n);
  if (e != cudaSuccess) return e;
  if (dev < 0 || dev >= n || dev >= RGPU_MAX_DEVICES) return cudaErrorInvalidDevice;
  return cudaSuccess;
}

static void note_unsupported(const char *what) {
  RGPU_WARN("%s is not supported by rgpu (a remote GPU): cudaErrorNotSupported", what);
}

static void record_alloc_locked(struct CUmemPool_st *pool, alloc_rec *rec) {
  assert(rgpu_mutex_held(&g_pool_lock));
  size_t b = bucket_of(rec->ptr);
  rec->next = g_allocs[b];
  g_allocs[b] = rec;
  pool->used += rec->size;
  pool->live++;
  if (pool->used > pool->used_high) pool->used_high = pool->used;
  if (pool->used + pool->kept > pool->reserved_high) pool->reserved_high = pool->used + pool->kept;
}

/* A kept block of pool freed on `stream` that fits size without wasting
 * more than a quarter of it: taken off the list, or NULL. */
static kept_block *take_kept_locked(struct CUmemPool_st *pool, uint64_t stream, uint64_t size) {
  assert(rgpu_mutex_held(&g_pool_lock));
  for (kept_block **link = &pool->kept_list; *link; link = &(*link)->next) {
    kept_block *k = *link;
    if (k->stream == stream && k->size >= size && k->size - size <= k->size / 4) {
      *link = k->next;
      pool->kept -= k->size;
      return k;
    }
  }
  return NULL;
}

/* Detaches pool's kept blocks beyond keep_bytes (all with 0): the caller
 * frees them with the lock dropped. */
static kept_block *detach_kept_locked(struct CUmemPool_st *pool, uint64_t keep_bytes) {
  assert(rgpu_mutex_held(&g_pool_lock));
  kept_block *out = NULL;
  while (pool->kept > keep_bytes && pool->kept_list) {
    kept_block *k = pool->kept_list;
    pool->kept_list = k->next;
    pool->kept -= k->size;
    k->next = out;
    out = k;
  }
  return out;
}

static void free_detached(rgpu_client *c, kept_block *list) {
  while (list) {
    kept_block *next = list->next;
    rgpu_rt_dev_free(c, (void *)(uintptr_t)list->ptr);
    free(list);
    list = next;
  }
}

/* Every pool this process made: the defaults and the created ones. */
static struct CUmemPool_st **g_pools;
static size_t g_npools, g_cap_pools;

/* Takes every block that dev's pools keep, as one list (each pool's blocks
 * pushed in turn onto its front, so the order is the reverse of the
 * pools' own). */
static kept_block *detach_device_kept_locked(int dev) {
  assert(rgpu_mutex_held(&g_pool_lock));
  kept_block *all = NULL;
  for (size_t i = 0; i < g_npools; i++) {
    if (g_pools[i]->device != dev) continue;
    kept_block *l = detach_kept_locked(g_pools[i], 0);
    while (l) {
      kept_block *n = l->next;
      l->next = all;
      all = l;
      l = n;
    }
  }
  return all;
}

int rgpu_rt_mempool_release_cached(rgpu_client *c, int dev) {
  rgpu_mutex_lock(&g_pool_lock);
  kept_block *all = detach_device_kept_locked(dev);
  rgpu_mutex_unlock(&g_pool_lock);
  int any = all != NULL;
  free_detached(c, all);
  return any;
}

void rgpu_rt_mempool_forget_device(int dev) {
  rgpu_mutex_lock(&g_pool_lock);
  kept_block *l = detach_device_kept_locked(dev);
  rgpu_mutex_unlock(&g_pool_lock);
  /* The memory went with the context: drop the records, free nothing. */
  while (l) {
    kept_block *n = l->next;
    free(l);
    l = n;
  }
}

/* Whether p is a block a pool keeps: freed already (a double free). */
static int is_kept_locked(uint64_t p) {
  assert(rgpu_mutex_held(&g_pool_lock));
  for (size_t i = 0; i < g_npools; i++)
    for (kept_block *k = g_pools[i]->kept_list; k; k = k->next)
      if (k->ptr == p) return 1;
  return 0;
}

int rgpu_rt_mempool_on_free(uint64_t p) {
  rgpu_mutex_lock(&g_pool_lock);
  if (is_kept_locked(p)) {
    rgpu_mutex_unlock(&g_pool_lock);
    return 1; /* freed already (cudaFreeAsync): the program's double free */
  }
  alloc_rec **link = &g_allocs[bucket_of(p)];
  while (*link && (*link)->ptr != p) link = &(*link)->next;
  alloc_rec *rec = *link;
  struct CUmemPool_st *dead = NULL;
  if (rec) {
    *link = rec->next;
    rec->pool->used -= rec->size;
    if (--rec->pool->live == 0 && rec->pool->destroyed) dead = rec->pool;
  }
  rgpu_mutex_unlock(&g_pool_lock);
  free(rec);
  free(dead);
  return 0;
}

static int register_pool_locked(struct CUmemPool_st *p) {
  assert(rgpu_mutex_held(&g_pool_lock));
  if (g_npools == g_cap_pools) {
    size_t cap = g_cap_pools ? g_cap_pools * 2 : 16;
    struct CUmemPool_st **np = realloc(g_pools, cap * sizeof *np);
    if (!np) return -1;
    g_pools = np;
    g_cap_pools = cap;
  }
  g_pools[g_npools++] = p;
  return 0;
}

static void unregister_pool_locked(struct CUmemPool_st *p) {
  assert(rgpu_mutex_held(&g_pool_lock));
  for (size_t i = 0; i < g_npools; i++)
    if (g_pools[i] == p) {
      g_pools[i] = g_pools[--g_npools];
      return;
    }
}

/* ---- allocation ---------------------------------------------------------- */

static cudaError_t malloc_async(void **ptr, size_t size, struct CUmemPool_st *pool,
                                cudaStream_t stream, int per_thread) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!ptr) return rgpu_rt_ret(cudaErrorInvalidValue);
  uint64_t wire;
  int sdev;
  if ((e = rgpu_rt_stream_resolve(c, stream, per_thread, &wire, &sdev)) != cudaSuccess)
    return rgpu_rt_ret(e);
  if (rgpu_rt_graph_is_capturing(wire)) {
    /* A graph memory node (rgpu_cudart_graph_mem.c): the block has its
     * address now, as CUDA gives it at capture. */
    if (size == 0) {
      *ptr = NULL;
      return cudaSuccess;
    }
    int dev = sdev;
    rgpu_mutex_lock(&g_pool_lock);
    if (pool && valid_pool(pool)) dev = pool->device;
    int bad = pool && !valid_pool(pool);
    rgpu_mutex_unlock(&g_pool_lock);
    if (bad) return rgpu_rt_ret(cudaErrorInvalidValue);
    void *p = NULL;
    if ((e = rgpu_rt_graphmem_capture_alloc(c, wire, dev, size, &p)) != cudaSuccess)
      return rgpu_rt_ret(e);
    *ptr = p;
    return cudaSuccess;
  }
  if (sdev < 0 || sdev >= RGPU_MAX_DEVICES) return rgpu_rt_ret(cudaErrorInvalidDevice);
  rgpu_mutex_lock(&g_pool_lock);
  if (pool && !valid_pool(pool)) {
    rgpu_mutex_unlock(&g_pool_lock);
    return rgpu_rt_ret(cudaErrorInvalidValue);
  }
  if (!pool) pool = current_pool_locked(sdev);
  int dev = pool->device;
  if (size == 0) {
    rgpu_mutex_unlock(&g_pool_lock);
    *ptr = NULL;
    return cudaSuccess;
  }
  alloc_rec *rec = malloc(sizeof *rec);
  if (!rec) {
    rgpu_mutex_unlock(&g_pool_lock);
    return rgpu_rt_ret(cudaErrorMemoryAllocation);
  }
  /* Same-stream reuse first: no server call at all. */
  kept_block *k = rgpu_client_sync_every_call(c) ? NULL : take_kept_locked(pool, wire, size);
  if (k) {
    *rec = (alloc_rec){.ptr = k->ptr, .size = k->size, .pool = pool};
    record_alloc_locked(pool, rec);
    rgpu_mutex_unlock(&g_pool_lock);
    *ptr = (void *)(uintptr_t)k->ptr;
    free(k);
    return cudaSuccess;
  }
  rgpu_mutex_unlock(&g_pool_lock);
  void *p = NULL;
  e = rgpu_rt_dev_alloc(c, dev, size, &p); /* records its own error */
  if (e != cudaSuccess) {
    free(rec);
    return e;
  }
  rgpu_mutex_lock(&g_pool_lock);
  *rec = (alloc_rec){.ptr = (uint64_t)(uintptr_t)p, .size = size, .pool = pool};
  record_alloc_locked(pool, rec);
  rgpu_mutex_unlock(&g_pool_lock);
  *ptr = p;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream) {
  return malloc_async(devPtr, size, NULL, hStream, 0);
}
RGPU_API cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream);
RGPU_API cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream) {
  return malloc_async(devPtr, size, NULL, hStream, 1);
}

/* A named pool is required here: NULL would mean the current pool to
 * malloc_async. */
static cudaError_t malloc_from_pool_async(void **ptr, size_t size, cudaMemPool_t memPool,
                                          cudaStream_t stream, int per_thread) {
  if (!memPool) {
    rgpu_rt_count_call();
    return rgpu_rt_ret(cudaErrorInvalidValue);
  }
  return malloc_async(ptr, size, (struct CUmemPool_st *)memPool, stream, per_thread);
}

RGPU_API cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool,
                                             cudaStream_t stream) {
  return malloc_from_pool_async(ptr, size, memPool, stream, 0);
}
RGPU_API cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t memPool,
                                                  cudaStream_t stream);
RGPU_API cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t memPool,
                                                  cudaStream_t stream) {
  return malloc_from_pool_async(ptr, size, memPool, stream, 1);
}

static cudaError_t free_async(void *devPtr, cudaStream_t stream, int per_thread) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  uint64_t wire;
  int sdev;
  if ((e = rgpu_rt_stream_resolve(c, stream, per_thread, &wire, &sdev)) != cudaSuccess)
    return rgpu_rt_ret(e);
  if (rgpu_rt_graph_is_capturing(wire)) {
    /* A free node, for memory a graph allocated; other memory cannot be
     * freed by a graph. */
    if (devPtr && rgpu_rt_graphmem_is((uint64_t)(uintptr_t)devPtr))
      return rgpu_rt_ret(rgpu_rt_graphmem_capture_free(wire, (uint64_t)(uintptr_t)devPtr));
    e = rgpu_rt_graph_check_sync(wire);
    return rgpu_rt_ret(e != cudaSuccess ? e : cudaErrorStreamCaptureUnsupported);
  }
  if (!devPtr) return cudaSuccess;
  uint64_t p = (uint64_t)(uintptr_t)devPtr;
  /* A block a graph launch left allocated: the program's hold goes. */
  if (rgpu_rt_graphmem_user_free(p)) return cudaSuccess;
  /* cudaMalloc'd memory may be freed here too: then there is no record. */
  rgpu_mutex_lock(&g_pool_lock);
  alloc_rec **link = &g_allocs[bucket_of(p)];
  while (*link && (*link)->ptr != p) link = &(*link)->next;
  alloc_rec *rec = *link;
  if (rec) *link = rec->next;
  if (!rec && is_kept_locked(p)) {
    /* Freed twice: handing it to the allocator now would let two owners
     * reuse one block. */
    rgpu_mutex_unlock(&g_pool_lock);
    return rgpu_rt_ret(cudaErrorInvalidValue);
  }
  if (rec && !rec->pool->destroyed && !rgpu_client_sync_every_call(c)) {
    struct CUmemPool_st *pool = rec->pool;
    uint64_t limit = pool->release_threshold > KEEP_MIN_BYTES ? pool->release_threshold : KEEP_MIN_BYTES;
    kept_block *k = pool->kept + rec->size <= limit ? malloc(sizeof *k) : NULL;
    if (k) {
      /* Kept for this stream: the memory stays allocated (and in the
       * client's range table) until it is reused or given back. */
      *k = (kept_block){.ptr = rec->ptr, .size = rec->size, .stream = wire, .next = pool->kept_list};
      pool->kept_list = k;
      pool->kept += rec->size;
      pool->used -= rec->size;
      pool->live--;
      rgpu_mutex_unlock(&g_pool_lock);
      free(rec);
      return cudaSuccess;
    }
  }
  rgpu_mutex_unlock(&g_pool_lock);
  e = rgpu_rt_dev_free(c, devPtr);
  if (rec) {
    rgpu_mutex_lock(&g_pool_lock);
    struct CUmemPool_st *pool = rec->pool;
    pool->used -= rec->size;
    int last = --pool->live == 0 && pool->destroyed;
    rgpu_mutex_unlock(&g_pool_lock);
    if (last) free(pool);
    free(rec);
  }
  return e;
}

RGPU_API cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream) {
  return free_async(devPtr, hStream, 0);
}
RGPU_API cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream);
RGPU_API cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream) {
  return free_async(devPtr, hStream, 1);
}

/* ---- pools --------------------------------------------------------------- */

/* cudaDeviceGetDefaultMemPool and cudaDeviceGetMemPool: the same checks,
 * then one of the device's pools, picked under g_pool_lock. */
static cudaError_t device_pool(cudaMemPool_t *memPool, int device,
                               struct CUmemPool_st *(*pick_locked)(int dev)) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!memPool) return rgpu_rt_ret(cudaErrorInvalidValue);
  if ((e = check_device(c, device)) != cudaSuccess) return rgpu_rt_ret(e);
  rgpu_mutex_lock(&g_pool_lock);
  *memPool = (cudaMemPool_t)pick_locked(device);
  rgpu_mutex_unlock(&g_pool_lock);
  return cudaSuccess;
}

RGPU_API cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device) {
  return device_pool(memPool, device, default_pool_locked);
}

RGPU_API cudaError_t cudaDeviceGetMemPool(cudaMemPool_t *memPool, int device) {
  return device_pool(memPool, device, current_pool_locked);
}

/* Makes p the current pool of an existing device; the pool must belong to
 * that device (CUDA: cudaErrorInvalidValue). */
static cudaError_t set_current_pool(int device, struct CUmemPool_st *p) {
  rgpu_mutex_lock(&g_pool_lock);
  int ok = valid_pool(p) && p->device == device;
  if (ok) g_current_pool[device] = p->is_default ? NULL : p;
  rgpu_mutex_unlock(&g_pool_lock);
  return ok ? cudaSuccess : cudaErrorInvalidValue;
}

RGPU_API cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t memPool) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if ((e = check_device(c, device)) != cudaSuccess) return rgpu_rt_ret(e);
  return rgpu_rt_ret(set_current_pool(device, (struct CUmemPool_st *)memPool));
}

/* ---- pools by location (CUDA 13: cudaMem{GetDefault,Get,Set}MemPool) -------------
 * A location and allocation type name a pool.  Device locations with pinned
 * allocations are the device pools above (CUDA: the equivalent of the
 * cudaDevice*MemPool calls).  The other combinations CUDA allows have no
 * pools in rgpu: a host or host-NUMA pool would be memory of the GPU's
 * machine, not of this process (cudaDevAttrHostMemoryPoolsSupported is 0
 * for the same reason), and managed memory is not served from pools here;
 * for those the getters answer cudaErrorNotSupported, which
 * cudaMemGetDefaultMemPool documents for a location without pools, and
 * which CUDA also answers for pinned memory at a location type it does not
 * know (measured on the H100).  An unknown allocation type, or another
 * location type for managed memory, is cudaErrorInvalidValue, and so is a
 * device index that does not exist: these calls document no
 * cudaErrorInvalidDevice. */

/* cudaSuccess for a device location with pinned allocations; otherwise
 * what the combination is (logged once for the unsupported ones). */
static cudaError_t location_kind(const struct cudaMemLocation *loc,
                                 enum cudaMemAllocationType type) {
  int host = loc->type == cudaMemLocationTypeHost || loc->type == cudaMemLocationTypeHostNuma;
  if (type == cudaMemAllocationTypePinned) {
    if (loc->type == cudaMemLocationTypeDevice) return cudaSuccess;
    if (!host) return cudaErrorNotSupported;
    static int logged;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      RGPU_WARN("host memory pools are not supported by rgpu (they would be memory of the GPU's "
                "machine, not of this process): cudaErrorNotSupported");
    return cudaErrorNotSupported;
  }
  if (type == cudaMemAllocationTypeManaged) {
    if (!host && loc->type != cudaMemLocationTypeDevice && loc->type != cudaMemLocationTypeNone)
      return cudaErrorInvalidValue;
    static int logged;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      RGPU_WARN("managed memory pools are not supported by rgpu (its managed memory is not "
                "allocated from pools): cudaErrorNotSupported");
    return cudaErrorNotSupported;
  }
  return cudaErrorInvalidValue;
}

/* cudaMemGetDefaultMemPool and cudaMemGetMemPool: the device pools of
 * cudaDeviceGetDefaultMemPool and cudaDeviceGetMemPool, picked under
 * g_pool_lock. */
static cudaError_t location_pool(cudaMemPool_t *memPool, const struct cudaMemLocation *location,
                                 enum cudaMemAllocationType type,
                                 struct CUmemPool_st *(*pick_locked)(int dev)) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!memPool || !location) return rgpu_rt_ret(cudaErrorInvalidValue);
  if ((e = location_kind(location, type)) != cudaSuccess) return rgpu_rt_ret(e);
  if (check_device(c, location->id) != cudaSuccess) return rgpu_rt_ret(cudaErrorInvalidValue);
  rgpu_mutex_lock(&g_pool_lock);
  *memPool = (cudaMemPool_t)pick_locked(location->id);
  rgpu_mutex_unlock(&g_pool_lock);
  return cudaSuccess;
}

RGPU_API cudaError_t cudaMemGetDefaultMemPool(cudaMemPool_t *memPool,
                                              struct cudaMemLocation *location,
                                              enum cudaMemAllocationType type) {
  return location_pool(memPool, location, type, default_pool_locked);
}

RGPU_API cudaError_t cudaMemGetMemPool(cudaMemPool_t *memPool, struct cudaMemLocation *location,
                                       enum cudaMemAllocationType type) {
  return location_pool(memPool, location, type, current_pool_locked);
}

/* cudaDeviceSetMemPool for a device location with pinned allocations.  The
 * pool must be of that location and type (CUDA: cudaErrorInvalidValue
 * otherwise); every pool rgpu makes is a device's pinned one, so any pool
 * given for another location or type mismatches it. */
RGPU_API cudaError_t cudaMemSetMemPool(struct cudaMemLocation *location,
                                       enum cudaMemAllocationType type, cudaMemPool_t memPool) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!location || location->type != cudaMemLocationTypeDevice ||
      type != cudaMemAllocationTypePinned || check_device(c, location->id) != cudaSuccess)
    return rgpu_rt_ret(cudaErrorInvalidValue);
  return rgpu_rt_ret(set_current_pool(location->id, (struct CUmemPool_st *)memPool));
}

RGPU_API cudaError_t cudaMemPoolCreate(cudaMemPool_t *memPool, const struct cudaMemPoolProps *props) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!memPool || !props) return rgpu_rt_ret(cudaErrorInvalidValue);
  if (props->allocType != cudaMemAllocationTypePinned ||
      props->location.type != cudaMemLocationTypeDevice)
    return rgpu_rt_ret(cudaErrorInvalidValue);
  if ((e = check_device(c, props->location.id)) != cudaSuccess)
    return rgpu_rt_ret(cudaErrorInvalidValue);
  if (props->handleTypes != cudaMemHandleTypeNone) {
    /* Shareable handles are file descriptors or fabric handles of the GPU
     * machine: nothing a client process could pass on. */
    note_unsupported("cudaMemPoolCreate with shareable handle types");
    return rgpu_rt_ret(cudaErrorNotSupported);
  }
  struct CUmemPool_st *p = calloc(1, sizeof *p);
  if (!p) return rgpu_rt_ret(cudaErrorMemoryAllocation);
  *p = (struct CUmemPool_st){.magic = POOL_MAGIC, .device = props->location.id,
                             .reuse_follow_events = 1, .reuse_opportunistic = 1,
                             .reuse_internal = 1};
  rgpu_mutex_lock(&g_pool_lock);
  int rc = register_pool_locked(p);
  rgpu_mutex_unlock(&g_pool_lock);
  if (rc) {
    free(p);
    return rgpu_rt_ret(cudaErrorMemoryAllocation);
  }
  *memPool = (cudaMemPool_t)p;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  struct CUmemPool_st *p = (struct CUmemPool_st *)memPool;
  rgpu_mutex_lock(&g_pool_lock);
  if (!valid_pool(p) || p->is_default) {
    rgpu_mutex_unlock(&g_pool_lock);
    return rgpu_rt_ret(cudaErrorInvalidValue);
  }
  /* A pool current to its device: the default one becomes current. */
  if (g_current_pool[p->device] == p) g_current_pool[p->device] = NULL;
  p->destroyed = 1;
  kept_block *kept = detach_kept_locked(p, 0);
  unregister_pool_locked(p);
  int free_now = p->live == 0;
  if (free_now) p->magic = 0;
  rgpu_mutex_unlock(&g_pool_lock);
  free_detached(c, kept);
  /* With allocations still live the record stays for their frees (CUDA
   * frees their memory when they are freed). */
  if (free_now) free(p);
  return cudaSuccess;
}

/* One attribute of a live pool, read or written under g_pool_lock. */
typedef cudaError_t (*pool_attr_access_fn)(struct CUmemPool_st *p, enum cudaMemPoolAttr attr, void *value);

/* Set and Get share their checks and locking: only the switch differs. */
static cudaError_t pool_attribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value,
                                  pool_attr_access_fn access_locked) {
  rgpu_rt_count_call();
  struct CUmemPool_st *p = (struct CUmemPool_st *)memPool;
  if (!value) return rgpu_rt_ret(cudaErrorInvalidValue);
  rgpu_mutex_lock(&g_pool_lock);
  cudaError_t e = valid_pool(p) ? access_locked(p, attr, value) : cudaErrorInvalidValue;
  rgpu_mutex_unlock(&g_pool_lock);
  return e != cudaSuccess ? rgpu_rt_ret(e) : cudaSuccess;
}

static cudaError_t set_pool_attr_locked(struct CUmemPool_st *p, enum cudaMemPoolAttr attr, void *value) {
  cudaError_t e = cudaSuccess;
  switch (attr) {
  case cudaMemPoolReuseFollowEventDependencies: p->reuse_follow_events = *(int *)value != 0; break;
  case cudaMemPoolReuseAllowOpportunistic: p->reuse_opportunistic = *(int *)value != 0; break;
  case cudaMemPoolReuseAllowInternalDependencies: p->reuse_internal = *(int *)value != 0; break;
  case cudaMemPoolAttrReleaseThreshold: p->release_threshold = *(uint64_t *)value; break;
  /* The high watermarks may only be reset (to 0); they restart at the
   * current value. */
  case cudaMemPoolAttrReservedMemHigh:
    if (*(uint64_t *)value != 0) e = cudaErrorInvalidValue;
    else p->reserved_high = p->used + p->kept;
    break;
  case cudaMemPoolAttrUsedMemHigh:
    if (*(uint64_t *)value != 0) e = cudaErrorInvalidValue;
    else p->used_high = p->used;
    break;
  default: e = cudaErrorInvalidValue; break; /* the current values are read-only */
  }
  return e;
}

static cudaError_t get_pool_attr_locked(struct CUmemPool_st *p, enum cudaMemPoolAttr attr, void *value) {
  cudaError_t e = cudaSuccess;
  switch (attr) {
  case cudaMemPoolReuseFollowEventDependencies: *(int *)value = p->reuse_follow_events; break;
  case cudaMemPoolReuseAllowOpportunistic: *(int *)value = p->reuse_opportunistic; break;
  case cudaMemPoolReuseAllowInternalDependencies: *(int *)value = p->reuse_internal; break;
  case cudaMemPoolAttrReleaseThreshold: *(uint64_t *)value = p->release_threshold; break;
  case cudaMemPoolAttrReservedMemCurrent: *(uint64_t *)value = p->used + p->kept; break;
  case cudaMemPoolAttrReservedMemHigh: *(uint64_t *)value = p->reserved_high; break;
  case cudaMemPoolAttrUsedMemCurrent: *(uint64_t *)value = p->used; break;
  case cudaMemPoolAttrUsedMemHigh: *(uint64_t *)value = p->used_high; break;
  default: e = cudaErrorInvalidValue; break;
  }
  return e;
}

RGPU_API cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
                                             void *value) {
  return pool_attribute(memPool, attr, value, set_pool_attr_locked);
}

RGPU_API cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
                                             void *value) {
  return pool_attribute(memPool, attr, value, get_pool_attr_locked);
}

RGPU_API cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  struct CUmemPool_st *p = (struct CUmemPool_st *)memPool;
  rgpu_mutex_lock(&g_pool_lock);
  int ok = valid_pool(p);
  kept_block *kept = ok ? detach_kept_locked(p, minBytesToKeep) : NULL;
  rgpu_mutex_unlock(&g_pool_lock);
  if (!ok) return rgpu_rt_ret(cudaErrorInvalidValue);
  free_detached(c, kept); /* queued frees, no round trip */
  return cudaSuccess;
}

/* 1 with the pool's device in *dev for a live pool, else 0 with *dev = -1.
 * The access calls check the pool and read its device under the lock, then
 * do the rest unlocked. */
static int pool_device(const struct CUmemPool_st *p, int *dev) {
  rgpu_mutex_lock(&g_pool_lock);
  int ok = valid_pool(p);
  *dev = ok ? p->device : -1;
  rgpu_mutex_unlock(&g_pool_lock);
  return ok;
}

RGPU_API cudaError_t cudaMemPoolSetAccess(cudaMemPool_t memPool, const struct cudaMemAccessDesc *descList,
                                          size_t count) {
  rgpu_rt_count_call();
  struct CUmemPool_st *p = (struct CUmemPool_st *)memPool;
  int dev;
  int ok = pool_device(p, &dev);
  if (!ok || (count && !descList)) return rgpu_rt_ret(cudaErrorInvalidValue);
  for (size_t i = 0; i < count; i++) {
    /* The owning device always has read-write access and it cannot be
     * revoked (the driver answers CUDA_ERROR_INVALID_DEVICE); peers would
     * need peer access, which rgpu does not offer. */
    if (descList[i].location.type != cudaMemLocationTypeDevice) return rgpu_rt_ret(cudaErrorInvalidValue);
    if (descList[i].location.id != dev) return rgpu_rt_ret(cudaErrorInvalidDevice);
    if (descList[i].flags != cudaMemAccessFlagsProtReadWrite) return rgpu_rt_ret(cudaErrorInvalidDevice);
  }
  return cudaSuccess;
}

RGPU_API cudaError_t cudaMemPoolGetAccess(enum cudaMemAccessFlags *flags, cudaMemPool_t memPool,
                                          struct cudaMemLocation *location) {
  rgpu_rt_count_call();
  struct CUmemPool_st *p = (struct CUmemPool_st *)memPool;
  if (!flags || !location || location->type != cudaMemLocationTypeDevice)
    return rgpu_rt_ret(cudaErrorInvalidValue);
  int dev;
  int ok = pool_device(p, &dev);
  if (!ok) return rgpu_rt_ret(cudaErrorInvalidValue);
  *flags = location->id == dev ? cudaMemAccessFlagsProtReadWrite : cudaMemAccessFlagsProtNone;
  return cudaSuccess;
}
