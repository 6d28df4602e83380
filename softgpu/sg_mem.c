/* softgpu memory: the allocation table, device/pinned allocations, copies,
 * memsets, pointer attributes and virtual memory management.
 *
 * Device addresses are the host addresses of the backing memory, so a
 * kernel's pointer arithmetic needs no translation; what makes it safe is
 * that every driver-level access is checked against the table first, like
 * a sanitizer: a copy that leaves its allocation returns
 * CUDA_ERROR_INVALID_VALUE instead of touching memory. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rgpu_interval.h"
#include "sg_internal.h"

#define SG_ALIGN 256u
#define SG_MMAP_MIN (64u << 10) /* smaller allocations come from the heap */
#define SG_VMM_GRANULARITY ((uint64_t)2 << 20)

/* ---- the table ---------------------------------------------------------- */

/* Sorted by base, non-overlapping: rgpu_interval.h's binary search, inlined
 * for sg_alloc (every checked access looks up here). */
typedef struct {
  sg_alloc *v;
  size_t n, cap;
} sg_alloc_table;
RGPU_INTERVAL_TABLE_DEFINE(sg_alloc_table, sg_alloc_table, sg_alloc, base, size, 64)

static pthread_rwlock_t tab_lock = PTHREAD_RWLOCK_INITIALIZER;
static sg_alloc_table tab;
static uint64_t next_id = 1;

static pthread_rwlock_t use_lock;
static pthread_once_t use_once = PTHREAD_ONCE_INIT;

static void use_init(void) {
  /* Writer preference: a free must not starve behind back-to-back kernels. */
  pthread_rwlockattr_t a;
  pthread_rwlockattr_init(&a);
  pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  pthread_rwlock_init(&use_lock, &a);
  pthread_rwlockattr_destroy(&a);
}

void sg_mem_use_begin(void) {
  pthread_once(&use_once, use_init);
  pthread_rwlock_rdlock(&use_lock);
}
void sg_mem_use_end(void) { pthread_rwlock_unlock(&use_lock); }
static void reclaim_begin(void) {
  pthread_once(&use_once, use_init);
  pthread_rwlock_wrlock(&use_lock);
}
static void reclaim_end(void) { pthread_rwlock_unlock(&use_lock); }

/* Caller holds tab_lock (any mode).  Entries never have size 0 (every
 * allocation path refuses it first). */
static sg_alloc *find_locked(uint64_t addr) { return sg_alloc_table_find(&tab, addr); }

/* Enters a and gives it (and the stored copy) the next buffer id. */
static int tab_insert(sg_alloc *a) {
  pthread_rwlock_wrlock(&tab_lock);
  sg_alloc *stored;
  int rc = sg_alloc_table_insert(&tab, a, &stored);
  if (rc == RGPU_INTERVAL_OK) a->id = stored->id = next_id++;
  pthread_rwlock_unlock(&tab_lock);
  /* The kernel never hands out overlapping mappings; an overlap means a
   * bookkeeping bug, and refusing is safer than corrupting the table. */
  if (rc == RGPU_INTERVAL_EOVERLAP)
    RGPU_ERROR("allocation table overlap at 0x%llx", (unsigned long long)a->base);
  return rc == RGPU_INTERVAL_OK ? 0 : -1;
}

/* Removes the entry starting exactly at base of one of `kinds` (bit mask of
 * 1<<kind).  Caller holds the use lock exclusively. */
static int tab_remove(uint64_t base, unsigned kinds, sg_alloc *out) {
  pthread_rwlock_wrlock(&tab_lock);
  sg_alloc *e = sg_alloc_table_find_start(&tab, base);
  if (!e || !(kinds & (1u << e->kind))) {
    pthread_rwlock_unlock(&tab_lock);
    return -1;
  }
  if (out) *out = *e;
  sg_alloc_table_remove_at(&tab, (size_t)(e - tab.v));
  pthread_rwlock_unlock(&tab_lock);
  return 0;
}

int sg_mem_find(uint64_t addr, sg_alloc *out) {
  pthread_rwlock_rdlock(&tab_lock);
  sg_alloc *a = find_locked(addr);
  if (a && out) *out = *a;
  pthread_rwlock_unlock(&tab_lock);
  return a ? 0 : -1;
}

CUresult sg_mem_check(uint64_t addr, uint64_t len, int write, void **host) {
  pthread_rwlock_rdlock(&tab_lock);
  sg_alloc *a = find_locked(addr);
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  if (a && !(write && a->readonly)) {
    uint64_t avail = a->size - (addr - a->base);
    /* VMM mappings side by side are one range of addresses, as on a GPU:
     * a copy may run from one chunk of a reservation into the next (their
     * pages are contiguous in this process too, so one memcpy does it). */
    for (const sg_alloc *cur = a; len > avail && cur->kind == SG_MEM_VMM;) {
      const sg_alloc *next = find_locked(cur->base + cur->size);
      if (!next || next->kind != SG_MEM_VMM || next->base != cur->base + cur->size ||
          (write && next->readonly))
        break;
      avail += next->size;
      cur = next;
    }
    if (len <= avail) {
      if (host) *host = (char *)a->host + (addr - a->base);
      r = CUDA_SUCCESS;
    }
  }
  pthread_rwlock_unlock(&tab_lock);
  return r;
}

int sg_is_pinned(uint64_t p, uint64_t len) {
  sg_alloc a;
  if (sg_mem_find(p, &a) != 0) return 0;
  return len <= a.size - (p - a.base);
}

int sg_mem_lookup_cb(void *ctx, uint64_t addr, void *range) {
  (void)ctx;
  pthread_rwlock_rdlock(&tab_lock);
  sg_alloc *a = find_locked(addr);
  /* Read-only VMM mappings are left out: the interpreter cannot tell loads
   * from stores here, and a store would hit an mprotect'ed page. */
  int ok = a && !a->readonly;
#ifdef SG_HAVE_PTX
  if (ok) {
    sg_ptx_range *r = range;
    r->base = a->base;
    r->size = a->size;
    r->host = a->host;
  }
#else
  (void)range;
#endif
  pthread_rwlock_unlock(&tab_lock);
  return ok ? 0 : -1;
}

/* ---- accounting --------------------------------------------------------- */

static CUresult charge(sg_device *d, uint64_t bytes) {
  pthread_mutex_lock(&d->mem_lock);
  CUresult r = CUDA_SUCCESS;
  if (bytes > sg_cfg.mem_limit - d->mem_used) r = CUDA_ERROR_OUT_OF_MEMORY;
  else d->mem_used += bytes;
  pthread_mutex_unlock(&d->mem_lock);
  return r;
}

static void uncharge(sg_device *d, uint64_t bytes) {
  pthread_mutex_lock(&d->mem_lock);
  d->mem_used = bytes > d->mem_used ? 0 : d->mem_used - bytes;
  pthread_mutex_unlock(&d->mem_lock);
}

CUresult sg_mem_charge(sg_device *d, uint64_t bytes) { return charge(d, bytes); }
void sg_mem_uncharge(sg_device *d, uint64_t bytes) { uncharge(d, bytes); }
void sg_mem_quiesce(void) {
  reclaim_begin();
  reclaim_end();
}

static uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/* ---- device and pinned allocations -------------------------------------- */

static void *backing_get(uint64_t bytes, int *mmapped) {
  if (bytes >= SG_MMAP_MIN) {
    /* NORESERVE + lazily faulted zero pages: a 4 GiB cuMemAlloc costs
     * nothing until it is written. */
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return NULL;
    *mmapped = 1;
    return p;
  }
  void *p = aligned_alloc(SG_ALIGN, bytes);
  if (p) memset(p, 0, bytes);
  *mmapped = 0;
  return p;
}

static void backing_put(void *p, uint64_t bytes, int mmapped) {
  if (mmapped) munmap(p, bytes);
  else free(p);
}

static CUresult alloc_common(sg_ctx *c, uint64_t size, sg_mem_kind kind, void **out) {
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (size > (1ull << 46)) return CUDA_ERROR_OUT_OF_MEMORY;
  uint64_t fp = round_up(size, SG_ALIGN);
  int charged = kind == SG_MEM_DEVICE || kind == SG_MEM_GLOBAL;
  if (charged) {
    CUresult r = charge(c->dev, fp);
    if (r) return r;
  }
  sg_alloc a = {0};
  void *p = backing_get(fp, &a.mmapped);
  if (!p) {
    if (charged) uncharge(c->dev, fp);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  a.base = (uint64_t)(uintptr_t)p;
  a.size = size;
  a.host = p;
  a.kind = kind;
  a.ctx = c;
  a.device = c->dev->ordinal;
  a.footprint = charged ? fp : 0;
  if (tab_insert(&a) != 0) {
    backing_put(p, fp, a.mmapped);
    if (charged) uncharge(c->dev, fp);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *out = p;
  return CUDA_SUCCESS;
}

static void release_entry(const sg_alloc *a) {
  if (a->kind == SG_MEM_REGISTERED) return; /* the caller's memory */
  backing_put(a->host, round_up(a->size, SG_ALIGN), a->mmapped);
  if (a->footprint) {
    sg_device *d = sg_device_get(a->device);
    if (d) uncharge(d, a->footprint);
  }
}

static CUresult free_common(uint64_t p, unsigned kinds) {
  sg_alloc a;
  reclaim_begin();
  int rc = tab_remove(p, kinds, &a);
  reclaim_end();
  if (rc != 0) return CUDA_ERROR_INVALID_VALUE;
  release_entry(&a);
  return CUDA_SUCCESS;
}

CUresult sg_mem_alloc_device(sg_ctx *c, uint64_t size, sg_mem_kind kind, uint64_t *dptr) {
  void *p;
  CUresult r = alloc_common(c, size, kind, &p);
  if (r == CUDA_SUCCESS) *dptr = (uint64_t)(uintptr_t)p;
  return r;
}

CUresult sg_mem_free_device(uint64_t dptr) {
  return free_common(dptr, 1u << SG_MEM_DEVICE | 1u << SG_MEM_GLOBAL);
}

/* Entries sg_mem_release_ctx frees: the context's own, except VMM
 * mappings (their address ranges are released with the reservation). */
static int owned_by(const sg_ctx *c, const sg_alloc *a) { return a->ctx == c && a->kind != SG_MEM_VMM; }

typedef struct {
  const sg_ctx *ctx;
  sg_alloc *v; /* room for every owned entry, or NULL */
  size_t n;
} release_list;

static int take_owned(void *ctx, const sg_alloc *a) {
  release_list *l = ctx;
  if (!owned_by(l->ctx, a)) return 0;
  /* Without memory for the list we leak rather than free under the lock. */
  if (l->v) l->v[l->n++] = *a;
  return 1;
}

void sg_mem_release_ctx(sg_ctx *c) {
  reclaim_begin();
  pthread_rwlock_wrlock(&tab_lock);
  release_list l = {c, NULL, 0};
  for (size_t i = 0; i < tab.n; i++)
    if (owned_by(c, &tab.v[i])) l.n++;
  if (l.n) l.v = malloc(l.n * sizeof *l.v);
  l.n = 0;
  sg_alloc_table_remove_if(&tab, take_owned, &l);
  size_t nrel = l.n;
  sg_alloc *rel = l.v;
  pthread_rwlock_unlock(&tab_lock);
  reclaim_end();
  for (size_t i = 0; i < nrel; i++) release_entry(&rel[i]);
  free(rel);
}

/* ---- the device heap ----------------------------------------------------- */

static pthread_mutex_t heap_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t *heap_pending; /* frees that wait for their launch to end */
static size_t heap_npending, heap_cap;

static uint64_t heap_limit(const sg_ctx *c) {
  size_t v = c->limits[CU_LIMIT_MALLOC_HEAP_SIZE];
  return v ? v : 8u << 20;
}

uint64_t sg_mem_heap_alloc(sg_ctx *c, uint64_t size) {
  if (size == 0) return 0;
  uint64_t fp = round_up(size, SG_ALIGN);
  uint64_t used = atomic_fetch_add(&c->heap_used, fp);
  if (used + fp > heap_limit(c) || used + fp < used) {
    atomic_fetch_sub(&c->heap_used, fp);
    return 0; /* what malloc returns on a GPU whose heap is full */
  }
  void *p;
  if (alloc_common(c, size, SG_MEM_HEAP, &p) != CUDA_SUCCESS) {
    atomic_fetch_sub(&c->heap_used, fp);
    return 0;
  }
  return (uint64_t)(uintptr_t)p;
}

void sg_mem_heap_free_later(sg_ctx *c, uint64_t addr) {
  sg_alloc a;
  /* Not a block of this context's heap: ignored (undefined on a GPU). */
  if (sg_mem_find(addr, &a) != 0 || a.base != addr || a.kind != SG_MEM_HEAP || a.ctx != c) return;
  pthread_mutex_lock(&heap_lock);
  if (heap_npending == heap_cap) {
    size_t cap = heap_cap ? heap_cap * 2 : 64;
    uint64_t *nv = realloc(heap_pending, cap * sizeof *nv);
    if (nv) {
      heap_pending = nv;
      heap_cap = cap;
    }
  }
  /* Without room the block stays allocated until its context goes. */
  if (heap_npending < heap_cap) heap_pending[heap_npending++] = addr;
  pthread_mutex_unlock(&heap_lock);
}

void sg_mem_heap_flush(void) {
  pthread_mutex_lock(&heap_lock);
  uint64_t *v = heap_pending;
  size_t n = heap_npending;
  heap_pending = NULL;
  heap_npending = heap_cap = 0;
  pthread_mutex_unlock(&heap_lock);
  for (size_t i = 0; i < n; i++) {
    sg_alloc a;
    /* Freed twice, or gone with its context meanwhile: nothing left. */
    if (sg_mem_find(v[i], &a) != 0 || a.base != v[i] || a.kind != SG_MEM_HEAP) continue;
    if (free_common(v[i], 1u << SG_MEM_HEAP) == CUDA_SUCCESS && a.ctx)
      atomic_fetch_sub(&a.ctx->heap_used, round_up(a.size, SG_ALIGN));
  }
  free(v);
}

SG_EXPORT CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize) {
  sg_ctx *c;
  CUresult r = sg_current(&c);
  if (r) return r;
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t p;
  r = sg_mem_alloc_device(c, bytesize, SG_MEM_DEVICE, &p);
  if (r == CUDA_SUCCESS) *dptr = (CUdeviceptr)p;
  return r;
}

SG_EXPORT CUresult CUDAAPI cuMemFree(CUdeviceptr dptr) {
  sg_ctx *c;
  CUresult r = sg_current(&c);
  if (r) return r;
  if (dptr == 0) return CUDA_SUCCESS;
  /* Like cudaFree, wait for queued work first: an async copy or kernel
   * issued before the free may still use the memory. */
  sg_ctx_drain(c);
  return free_common(dptr, 1u << SG_MEM_DEVICE);
}

SG_EXPORT CUresult CUDAAPI cuMemGetInfo(size_t *free_bytes, size_t *total) {
  sg_ctx *c;
  CUresult r = sg_current(&c);
  if (r) return r;
  if (!free_bytes || !total) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&c->dev->mem_lock);
  *free_bytes = (size_t)(sg_cfg.mem_limit - c->dev->mem_used);
  *total = (size_t)sg_cfg.mem_limit;
  pthread_mutex_unlock(&c->dev->mem_lock);
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuMemGetAddressRange(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr) {
  sg_ctx *c;
  CUresult r = sg_current(&c);
  if (r) return r;
  sg_alloc a;
  if (sg_mem_find(dptr, &a) != 0) return CUDA_ERROR_NOT_FOUND;
  if (pbase) *pbase = (CUdeviceptr)a.base;
  if (psize) *psize = (size_t)a.size;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags) {
  sg_ctx *c;
  CUresult r = sg_current(&c);
  if (r) return r;
  if (!pp) return CUDA_ERROR_INVALID_VALUE;
  if (Flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED))
    return CUDA_ERROR_INVALID_VALUE;
  if (bytesize == 0) {
    *pp = NULL; /* the driver accepts an empty pinned allocation (measured) */
    return CUDA_SUCCESS;
  }
  return alloc_common(c, bytesize, SG_MEM_HOST, pp);
}

SG_EXPORT CUresult CUDAAPI cuMemAllocHost(void **pp, size_t bytesize) { return cuMemHostAlloc(pp, bytesize, 0); }

SG_EXPORT CUresult CUDAAPI cuMemFreeHost(void *p) {
  sg_ctx *c;
  CUresult r = sg_current(&c);
  if (r) return r;
  if (!p) return CUDA_SUCCESS;
  sg_ctx_drain(c);
  return free_common((uint64_t)(uintptr_t)p, 1u << SG_MEM_HOST);
}

SG_EXPORT CUresult CUDAAPI cuMemHostGetDevicePointer(CUdeviceptr *pdptr, void *p, unsigned int Flags) {
  sg_ctx *c;
  CUresult r = sg_current(&c);
  if (r) return r;
  if (!pdptr || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  sg_alloc a;
  if (sg_mem_find((uint64_t)(uintptr_t)p, &a) != 0 || (a.kind != SG_MEM_HOST && a.kind != SG_MEM_REGISTERED))
    return CUDA_ERROR_INVALID_VALUE;
  *pdptr = (CUdeviceptr)(uintptr_t)p; /* unified addressing: same address */
  return CUDA_SUCCESS;
}

/* Page-locks nothing (host memory is already what the "device" uses) but
 * enters the range in the table, so copies from and to it may run
 * asynchronously and kernels may address it, as with real registration. */
SG_EXPORT CUresult CUDAAPI cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags) {
  sg_ctx *c;
  CUresult r = sg_current(&c);
  if (r) return r;
  if (!p || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  unsigned known = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_IOMEMORY |
                   CU_MEMHOSTREGISTER_READ_ONLY;
  if (Flags & ~known) return CUDA_ERROR_INVALID_VALUE;
  if (Flags & CU_MEMHOSTREGISTER_IOMEMORY) return CUDA_ERROR_NOT_SUPPORTED;
  sg_alloc a = {0};
  a.base = (uint64_t)(uintptr_t)p;
  a.size = bytesize;
  a.host = p;
  a.kind = SG_MEM_REGISTERED;
  a.ctx = c;
  a.device = c->dev->ordinal;
  a.readonly = (Flags & CU_MEMHOSTREGISTER_READ_ONLY) != 0;
  if (a.base + bytesize < a.base) return CUDA_ERROR_INVALID_VALUE;
  sg_alloc other;
  /* Overlap with anything already known (pinned, registered, device). */
  if (sg_mem_find(a.base, &other) == 0 || sg_mem_find(a.base + bytesize - 1, &other) == 0)
    return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  if (tab_insert(&a) != 0) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuMemHostUnregister(void *p) {
  sg_ctx *c;
  CUresult r = sg_current(&c);
  if (r) return r;
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  sg_ctx_drain(c); /* queued async copies may still use it */
  reclaim_begin();
  int rc = tab_remove((uint64_t)(uintptr_t)p, 1u << SG_MEM_REGISTERED, NULL);
  reclaim_end();
  return rc == 0 ? CUDA_SUCCESS : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

SG_EXPORT CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  sg_ctx *c;
  CUresult r = sg_current(&c);
  if (r) return r;
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  sg_alloc a;
  if (sg_mem_find(ptr, &a) != 0) return CUDA_ERROR_INVALID_VALUE;
  int is_host = a.kind == SG_MEM_HOST || a.kind == SG_MEM_REGISTERED;
  switch (attribute) {
  case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data = a.ctx; break;
  case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
    *(unsigned *)data = is_host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    break;
  case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data = ptr; break;
  case CU_POINTER_ATTRIBUTE_HOST_POINTER:
    if (!is_host) return CUDA_ERROR_INVALID_VALUE;
    *(void **)data = (void *)(uintptr_t)ptr;
    break;
  case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: *(int *)data = 1; break;
  case CU_POINTER_ATTRIBUTE_BUFFER_ID: *(unsigned long long *)data = a.id; break;
  case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(int *)data = 0; break;
  case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = a.device; break;
  case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: *(int *)data = 0; break;
  case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = (CUdeviceptr)a.base; break;
  case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = (size_t)a.size; break;
  case CU_POINTER_ATTRIBUTE_MAPPED: *(int *)data = 1; break;
  case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: *(unsigned long long *)data = 0; break;
  case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE: *(int *)data = 0; break;
  case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
    *(int *)data = a.readonly ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READ : CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
    break;
  case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: *(size_t *)data = (size_t)a.size; break;
  case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: *(void **)data = (void *)(uintptr_t)a.base; break;
  case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: *(unsigned long long *)data = a.id; break;
  default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

/* ---- copies and memsets ------------------------------------------------- */

void sg_exec_copy(sg_ctx *c, sg_op *op) {
  sg_mem_use_begin();
  void *d = (void *)(uintptr_t)op->u.copy.dst;
  const void *s = op->u.copy.staging ? op->u.copy.staging : (const void *)(uintptr_t)op->u.copy.src;
  uint64_t n = op->u.copy.len;
  /* Re-checked here because the memory may have been freed since the call
   * was queued: then this is the program's use-after-free, reported the
   * way a GPU reports it. */
  if ((op->u.copy.dst_dev && sg_mem_check(op->u.copy.dst, n, 1, &d) != CUDA_SUCCESS) ||
      (op->u.copy.src_dev && !op->u.copy.staging &&
       sg_mem_check(op->u.copy.src, n, 0, (void **)&s) != CUDA_SUCCESS)) {
    sg_mem_use_end();
    RGPU_WARN("queued copy of %llu bytes 0x%llx -> 0x%llx hit freed memory",
              (unsigned long long)n, (unsigned long long)op->u.copy.src, (unsigned long long)op->u.copy.dst);
    sg_ctx_set_sticky(c, CUDA_ERROR_ILLEGAL_ADDRESS);
    return;
  }
  memmove(d, s, (size_t)n);
  sg_mem_use_end();
}

void sg_exec_memset(sg_ctx *c, sg_op *op) {
  uint64_t bytes = op->u.memset.count * op->u.memset.elsize;
  void *d;
  sg_mem_use_begin();
  if (sg_mem_check(op->u.memset.dst, bytes, 1, &d) != CUDA_SUCCESS) {
    sg_mem_use_end();
    RGPU_WARN("queued memset of %llu bytes at 0x%llx hit freed memory", (unsigned long long)bytes,
              (unsigned long long)op->u.memset.dst);
    sg_ctx_set_sticky(c, CUDA_ERROR_ILLEGAL_ADDRESS);
    return;
  }
  uint32_t v = op->u.memset.value;
  uint64_t n = op->u.memset.count;
  if (op->u.memset.elsize == 1) {
    memset(d, (int)(v & 0xff), (size_t)n);
  } else if (op->u.memset.elsize == 2) {
    uint16_t *p = d;
    for (uint64_t i = 0; i < n; i++) p[i] = (uint16_t)v;
  } else {
    uint32_t *p = d;
    for (uint64_t i = 0; i < n; i++) p[i] = v;
  }
  sg_mem_use_end();
}

/* Where a pointer of a unified-addressing copy lives. */
typedef enum { LOC_DEVICE, LOC_PINNED, LOC_PAGEABLE } loc;

static loc classify(uint64_t p) {
  sg_alloc a;
  if (sg_mem_find(p, &a) != 0) return LOC_PAGEABLE;
  return a.kind == SG_MEM_HOST || a.kind == SG_MEM_REGISTERED ? LOC_PINNED : LOC_DEVICE;
}

/* One implementation for every copy entry point.  dloc/sloc: what the API
 * promises about each side (LOC_DEVICE must be in the table; LOC_PAGEABLE
 * means "classify": a host pointer that may or may not be pinned).
 * Synchronous copies, and async ones touching pageable host memory (CUDA
 * makes those synchronous too), wait for completion. */
static CUresult copy_common(uint64_t dst, loc dloc, uint64_t src, loc sloc, uint64_t n, CUstream hs,
                            int async) {
  sg_stream *s;
  CUresult r = sg_stream_resolve(hs, &s);
  if (r) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
  if (dloc == LOC_PAGEABLE) dloc = classify(dst);
  if (sloc == LOC_PAGEABLE) sloc = classify(src);
  if (dloc != LOC_PAGEABLE && sg_mem_check(dst, n, 1, NULL) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
  if (sloc != LOC_PAGEABLE && sg_mem_check(src, n, 0, NULL) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
  sg_op *op = sg_op_new(SG_OP_COPY);
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  op->u.copy.dst = dst;
  op->u.copy.src = src;
  op->u.copy.dst_dev = dloc != LOC_PAGEABLE;
  op->u.copy.src_dev = sloc != LOC_PAGEABLE;
  op->u.copy.len = n;
  int wait = !async || dloc == LOC_PAGEABLE || sloc == LOC_PAGEABLE;
  return sg_submit(s, op, wait);
}

#define U(p) ((uint64_t)(uintptr_t)(p))

SG_EXPORT CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  return copy_common(dst, LOC_PAGEABLE, src, LOC_PAGEABLE, ByteCount, NULL, 0);
}
SG_EXPORT CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
  return copy_common(dst, LOC_PAGEABLE, src, LOC_PAGEABLE, ByteCount, hStream, 1);
}
SG_EXPORT CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount) {
  return copy_common(dstDevice, LOC_DEVICE, U(srcHost), LOC_PAGEABLE, ByteCount, NULL, 0);
}
SG_EXPORT CUresult CUDAAPI cuMemcpyDtoH(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  return copy_common(U(dstHost), LOC_PAGEABLE, srcDevice, LOC_DEVICE, ByteCount, NULL, 0);
}
SG_EXPORT CUresult CUDAAPI cuMemcpyDtoD(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  return copy_common(dstDevice, LOC_DEVICE, srcDevice, LOC_DEVICE, ByteCount, NULL, 0);
}
SG_EXPORT CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                             CUstream hStream) {
  return copy_common(dstDevice, LOC_DEVICE, U(srcHost), LOC_PAGEABLE, ByteCount, hStream, 1);
}
SG_EXPORT CUresult CUDAAPI cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                             CUstream hStream) {
  return copy_common(U(dstHost), LOC_PAGEABLE, srcDevice, LOC_DEVICE, ByteCount, hStream, 1);
}
SG_EXPORT CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                             CUstream hStream) {
  return copy_common(dstDevice, LOC_DEVICE, srcDevice, LOC_DEVICE, ByteCount, hStream, 1);
}

/* Copies between two contexts' memory: one address space here, so the
 * contexts are only checked (CUDA refuses a bad one) and the copy is an
 * ordinary device-to-device one, ordered on hStream. */
static CUresult peer_ctxs_ok(CUcontext dstCtx, CUcontext srcCtx) {
  if (!dstCtx || !srcCtx) return CUDA_ERROR_INVALID_CONTEXT;
  CUresult r = sg_ctx_usable(dstCtx);
  return r ? r : sg_ctx_usable(srcCtx);
}
SG_EXPORT CUresult CUDAAPI cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                        CUcontext srcContext, size_t ByteCount) {
  CUresult r = peer_ctxs_ok(dstContext, srcContext);
  return r ? r : copy_common(dstDevice, LOC_DEVICE, srcDevice, LOC_DEVICE, ByteCount, NULL, 0);
}
SG_EXPORT CUresult CUDAAPI cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                             CUcontext srcContext, size_t ByteCount, CUstream hStream) {
  CUresult r = peer_ctxs_ok(dstContext, srcContext);
  return r ? r : copy_common(dstDevice, LOC_DEVICE, srcDevice, LOC_DEVICE, ByteCount, hStream, 1);
}

static CUresult memset_common(uint64_t dst, uint32_t value, unsigned elsize, uint64_t count, CUstream hs,
                              int async) {
  sg_stream *s;
  CUresult r = sg_stream_resolve(hs, &s);
  if (r) return r;
  if (dst % elsize) return CUDA_ERROR_INVALID_VALUE;
  if (count == 0) return CUDA_SUCCESS;
  if (count > UINT64_MAX / elsize || sg_mem_check(dst, count * elsize, 1, NULL) != CUDA_SUCCESS)
    return CUDA_ERROR_INVALID_VALUE;
  sg_op *op = sg_op_new(SG_OP_MEMSET);
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  op->u.memset.dst = dst;
  op->u.memset.value = value;
  op->u.memset.elsize = elsize;
  op->u.memset.count = count;
  return sg_submit(s, op, !async);
}

SG_EXPORT CUresult CUDAAPI cuMemsetD8(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  return memset_common(dstDevice, uc, 1, N, NULL, 0);
}
SG_EXPORT CUresult CUDAAPI cuMemsetD16(CUdeviceptr dstDevice, unsigned short us, size_t N) {
  return memset_common(dstDevice, us, 2, N, NULL, 0);
}
SG_EXPORT CUresult CUDAAPI cuMemsetD32(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  return memset_common(dstDevice, ui, 4, N, NULL, 0);
}
SG_EXPORT CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
  return memset_common(dstDevice, uc, 1, N, hStream, 1);
}
SG_EXPORT CUresult CUDAAPI cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream) {
  return memset_common(dstDevice, us, 2, N, hStream, 1);
}
SG_EXPORT CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
  return memset_common(dstDevice, ui, 4, N, hStream, 1);
}

/* ---- virtual memory management ------------------------------------------ */
/* A reservation is PROT_NONE address space; a physical allocation is a
 * memfd, so mapping it (MAP_SHARED|MAP_FIXED) into a reservation gives the
 * same aliasing semantics as the GPU's page tables.  Only mapped pieces
 * whose access was set appear in the allocation table. */

typedef struct sg_phys {
  struct sg_phys *next;
  int fd;
  uint64_t size;
  int device;
  int refs;        /* handles + mappings */
  int handles;     /* cuMemCreate's and each cuMemRetainAllocationHandle's, until released */
} sg_phys;

typedef struct sg_mapping {
  struct sg_mapping *next;
  uint64_t va, size;
  sg_phys *phys;
  int access;      /* CUmemAccess_flags */
} sg_mapping;

typedef struct sg_reservation {
  struct sg_reservation *next;
  uint64_t base, size;
  sg_mapping *maps;
} sg_reservation;

static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;
static sg_phys *physs;
static sg_reservation *reservations;

static sg_phys *phys_find(CUmemGenericAllocationHandle h) {
  for (sg_phys *p = physs; p; p = p->next)
    if ((CUmemGenericAllocationHandle)(uintptr_t)p == h) return p;
  return NULL;
}

static void phys_unref(sg_phys *p) {
  if (--p->refs > 0) return;
  sg_phys **pp = &physs;
  while (*pp != p) pp = &(*pp)->next;
  *pp = p->next;
  close(p->fd);
  sg_device *d = sg_device_get(p->device);
  if (d) uncharge(d, p->size);
  free(p);
}

static sg_reservation *resv_containing(uint64_t va, uint64_t size) {
  for (sg_reservation *r = reservations; r; r = r->next)
    if (va >= r->base && size <= r->size && va - r->base <= r->size - size) return r;
  return NULL;
}

static CUresult check_prop(const CUmemAllocationProp *prop) {
  if (!prop) return CUDA_ERROR_INVALID_VALUE;
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_NOT_SUPPORTED;
  if (!sg_device_get(prop->location.id)) return CUDA_ERROR_INVALID_DEVICE;
  if (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE) return CUDA_ERROR_NOT_SUPPORTED;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                                         CUmemAllocationGranularity_flags option) {
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!granularity) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r = check_prop(prop);
  if (r) return r;
  *granularity = (size_t)SG_VMM_GRANULARITY;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                               unsigned long long flags) {
  sg_ctx *c;
  CUresult r = sg_current(&c);
  if (r) return r;
  if (!ptr || size == 0 || size % SG_VMM_GRANULARITY || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (alignment & (alignment - 1)) return CUDA_ERROR_INVALID_VALUE;
  if (size > (1ull << 46)) return CUDA_ERROR_OUT_OF_MEMORY;
  uint64_t align = alignment > SG_VMM_GRANULARITY ? alignment : SG_VMM_GRANULARITY;
  void *p = MAP_FAILED;
  if (addr && addr % align == 0) {
    p = mmap((void *)(uintptr_t)addr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE,
             -1, 0);
    if (p != MAP_FAILED && (uint64_t)(uintptr_t)p != addr) {
      munmap(p, size); /* old kernels ignore the flag and treat addr as a hint */
      p = MAP_FAILED;
    }
  }
  if (p == MAP_FAILED) {
    /* Over-reserve and trim so the range meets the alignment. */
    uint64_t span = size + align;
    char *q = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (q == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t start = round_up((uint64_t)(uintptr_t)q, align);
    uint64_t head = start - (uint64_t)(uintptr_t)q;
    if (head) munmap(q, head);
    uint64_t tail = span - head - size;
    if (tail) munmap((char *)(uintptr_t)(start + size), tail);
    p = (void *)(uintptr_t)start;
  }
  sg_reservation *rv = calloc(1, sizeof *rv);
  if (!rv) {
    munmap(p, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  rv->base = (uint64_t)(uintptr_t)p;
  rv->size = size;
  pthread_mutex_lock(&vmm_lock);
  rv->next = reservations;
  reservations = rv;
  pthread_mutex_unlock(&vmm_lock);
  *ptr = (CUdeviceptr)rv->base;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  pthread_mutex_lock(&vmm_lock);
  sg_reservation **pp = &reservations;
  while (*pp && !((*pp)->base == ptr && (*pp)->size == size)) pp = &(*pp)->next;
  sg_reservation *rv = *pp;
  if (!rv || rv->maps) {
    /* Unknown range, or still mapped: the driver refuses both. */
    pthread_mutex_unlock(&vmm_lock);
    return CUDA_ERROR_INVALID_VALUE;
  }
  *pp = rv->next;
  pthread_mutex_unlock(&vmm_lock);
  munmap((void *)(uintptr_t)rv->base, rv->size);
  free(rv);
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                       const CUmemAllocationProp *prop, unsigned long long flags) {
  sg_ctx *c;
  CUresult r = sg_current(&c);
  if (r) return r;
  if (!handle || size == 0 || size % SG_VMM_GRANULARITY || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  r = check_prop(prop);
  if (r) return r;
  sg_device *d = sg_device_get(prop->location.id);
  r = charge(d, size);
  if (r) return r;
  sg_phys *p = calloc(1, sizeof *p);
  int fd = memfd_create("softgpu-vmm", MFD_CLOEXEC);
  if (!p || fd < 0 || ftruncate(fd, (off_t)size) != 0) {
    if (fd >= 0) close(fd);
    free(p);
    uncharge(d, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  p->fd = fd;
  p->size = size;
  p->device = d->ordinal;
  p->refs = 1;
  p->handles = 1;
  pthread_mutex_lock(&vmm_lock);
  p->next = physs;
  physs = p;
  pthread_mutex_unlock(&vmm_lock);
  *handle = (CUmemGenericAllocationHandle)(uintptr_t)p;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  pthread_mutex_lock(&vmm_lock);
  sg_phys *p = phys_find(handle);
  if (!p || !p->handles) {
    pthread_mutex_unlock(&vmm_lock);
    return CUDA_ERROR_INVALID_VALUE;
  }
  p->handles--;
  phys_unref(p); /* memory stays while mapped, as with the driver */
  pthread_mutex_unlock(&vmm_lock);
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                                    unsigned long long flags) {
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (flags != 0 || size == 0 || ptr % SG_VMM_GRANULARITY || size % SG_VMM_GRANULARITY) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&vmm_lock);
  CUresult r = CUDA_SUCCESS;
  sg_phys *p = phys_find(handle);
  sg_reservation *rv = resv_containing(ptr, size);
  if (!p || !p->handles || !rv) {
    r = CUDA_ERROR_INVALID_VALUE;
    goto out;
  }
  for (sg_mapping *m = rv->maps; m; m = m->next)
    if (ptr < m->va + m->size && m->va < ptr + size) {
      r = CUDA_ERROR_INVALID_VALUE; /* already mapped */
      goto out;
    }
  if (offset != 0 || size != p->size) {
    /* The 13.0 driver maps whole allocations only (measured: 801). */
    r = CUDA_ERROR_NOT_SUPPORTED;
    goto out;
  }
  sg_mapping *m = calloc(1, sizeof *m);
  if (!m) {
    r = CUDA_ERROR_OUT_OF_MEMORY;
    goto out;
  }
  if (mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, p->fd, 0) == MAP_FAILED) {
    free(m);
    r = CUDA_ERROR_OUT_OF_MEMORY;
    goto out;
  }
  m->va = ptr;
  m->size = size;
  m->phys = p;
  m->next = rv->maps;
  rv->maps = m;
  p->refs++;
out:
  pthread_mutex_unlock(&vmm_lock);
  return r;
}

/* Collects the mappings of rv that tile [va, va+size) exactly; -1 if the
 * range cuts a mapping or has holes. */
static int tile(sg_reservation *rv, uint64_t va, uint64_t size, sg_mapping **out, int max) {
  int n = 0;
  uint64_t covered = 0;
  for (sg_mapping *m = rv->maps; m; m = m->next) {
    if (m->va + m->size <= va || m->va >= va + size) continue;
    if (m->va < va || m->va + m->size > va + size) return -1;
    if (n == max) return -1;
    out[n++] = m;
    covered += m->size;
  }
  return covered == size ? n : -1;
}

#define SG_MAX_TILE 4096

SG_EXPORT CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!desc || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  int access = -1;
  for (size_t i = 0; i < count; i++) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || !sg_device_get(desc[i].location.id))
      return CUDA_ERROR_INVALID_DEVICE;
    int f = desc[i].flags;
    if (f != CU_MEM_ACCESS_FLAGS_PROT_NONE && f != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        f != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      return CUDA_ERROR_INVALID_VALUE;
    /* All softgpu devices share one address space: the widest grant wins. */
    if (f > access) access = f;
  }
  sg_ctx *cur = NULL;
  sg_current(&cur);
  pthread_mutex_lock(&vmm_lock);
  sg_reservation *rv = resv_containing(ptr, size);
  static sg_mapping *ms[SG_MAX_TILE];
  int n = rv ? tile(rv, ptr, size, ms, SG_MAX_TILE) : -1;
  if (n < 0) {
    pthread_mutex_unlock(&vmm_lock);
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUresult r = CUDA_SUCCESS;
  reclaim_begin(); /* no access may be in flight while pages change protection */
  for (int i = 0; i < n; i++) {
    sg_mapping *m = ms[i];
    if (m->access != CU_MEM_ACCESS_FLAGS_PROT_NONE) tab_remove(m->va, 1u << SG_MEM_VMM, NULL);
    int prot = access == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
               : access == CU_MEM_ACCESS_FLAGS_PROT_READ    ? PROT_READ
                                                            : PROT_NONE;
    mprotect((void *)(uintptr_t)m->va, m->size, prot);
    m->access = access;
    if (access != CU_MEM_ACCESS_FLAGS_PROT_NONE) {
      sg_alloc a = {0};
      a.base = m->va;
      a.size = m->size;
      a.host = (void *)(uintptr_t)m->va;
      a.kind = SG_MEM_VMM;
      a.ctx = cur;
      a.device = m->phys->device;
      a.readonly = access == CU_MEM_ACCESS_FLAGS_PROT_READ;
      if (tab_insert(&a) != 0) r = CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  reclaim_end();
  pthread_mutex_unlock(&vmm_lock);
  return r;
}

SG_EXPORT CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&vmm_lock);
  sg_reservation *rv = resv_containing(ptr, size);
  static sg_mapping *ms[SG_MAX_TILE];
  int n = rv ? tile(rv, ptr, size, ms, SG_MAX_TILE) : -1;
  if (n < 0) {
    pthread_mutex_unlock(&vmm_lock);
    return CUDA_ERROR_INVALID_VALUE;
  }
  reclaim_begin();
  for (int i = 0; i < n; i++)
    if (ms[i]->access != CU_MEM_ACCESS_FLAGS_PROT_NONE) tab_remove(ms[i]->va, 1u << SG_MEM_VMM, NULL);
  reclaim_end();
  for (int i = 0; i < n; i++) {
    sg_mapping *m = ms[i];
    /* Put the reservation back over the hole so the range stays ours. */
    mmap((void *)(uintptr_t)m->va, m->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    sg_mapping **pp = &rv->maps;
    while (*pp != m) pp = &(*pp)->next;
    *pp = m->next;
    phys_unref(m->phys);
    free(m);
  }
  pthread_mutex_unlock(&vmm_lock);
  return CUDA_SUCCESS;
}

/* The allocation mapped at addr: one more handle of it (the same value),
 * released as often as it was retained. */
SG_EXPORT CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr) {
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  uint64_t va = (uint64_t)(uintptr_t)addr;
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&vmm_lock);
  for (sg_reservation *rv = reservations; rv && r; rv = rv->next)
    for (sg_mapping *m = rv->maps; m; m = m->next)
      if (va >= m->va && va - m->va < m->size) {
        m->phys->handles++;
        m->phys->refs++;
        *handle = (CUmemGenericAllocationHandle)(uintptr_t)m->phys;
        r = CUDA_SUCCESS;
        break;
      }
  pthread_mutex_unlock(&vmm_lock);
  return r;
}

SG_EXPORT CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                                  CUmemGenericAllocationHandle handle) {
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!prop) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&vmm_lock);
  sg_phys *p = phys_find(handle);
  if (!p || !p->handles) {
    pthread_mutex_unlock(&vmm_lock);
    return CUDA_ERROR_INVALID_VALUE;
  }
  memset(prop, 0, sizeof *prop);
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop->location.id = p->device;
  pthread_mutex_unlock(&vmm_lock);
  return CUDA_SUCCESS;
}
