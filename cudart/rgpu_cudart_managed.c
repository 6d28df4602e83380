/* Managed memory (cudaMallocManaged, cudaMemPrefetchAsync, cudaMemAdvise,
 * cudaStreamAttachMemAsync, cudaMemRangeGetAttribute) on a GPU in another
 * machine.
 *
 * A managed pointer must work in the program's own code and in kernels.  So
 * the allocation is device memory on the server (MEM_ALLOC), and the client
 * maps host memory at the same address in its own process
 * (MAP_FIXED_NOREPLACE; the server's address space and the client's are
 * different processes, so the range is almost always free here, and an
 * allocation whose range is taken is kept aside and another asked for).
 * Pointers stored inside managed memory therefore mean the same thing on
 * both sides.
 *
 * Coherence is the model CUDA gives devices without concurrent managed
 * access (rgpu reports concurrentManagedAccess 0): the host may touch
 * managed memory only while the GPU is not using it, that is after a
 * synchronization.  Each allocation is owned by the host or the device:
 * - before device work is sent (a launch, copy, memset, library call or
 *   graph launch: rgpu_rt_managed_to_device), every host-owned allocation
 *   is copied to the device and waited for, and becomes device-owned;
 * - after a synchronization returns (device, stream or event
 *   synchronize, or a query that found the work done:
 *   rgpu_rt_managed_to_host), the device is synchronized as a whole and
 *   every device-owned allocation is copied back, and becomes host-owned.
 * Attachment narrows both (CUDA's rule for such devices): an allocation
 * attached to a stream moves only with that stream's work and comes back
 * at that stream's synchronization, one attached to the host never moves.
 * So a loop of launches costs one copy each way per synchronization, not
 * per launch, and each copy carries only changed chunks (64 KiB): a push
 * the chunks that differ from what the device was last known to hold (a
 * copy kept here), a pull the chunks the device changed (MANAGED_PULL,
 * server/rgpu_handlers_managed.c).  Host accesses between a launch and its synchronization see
 * stale data, as CUDA leaves them undefined on such devices.  The
 * driver-API facade (libcuda.so.1) allocates here too (cuMemAllocManaged),
 * and its launches and synchronizations go through the same hooks. */
#define _GNU_SOURCE
#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rgpu_array.h"
#include "rgpu_calls.h"
#include "rgpu_cudart.h"
#include "rgpu_cudart_alloc.h"
#include "rgpu_log.h"
#include "rgpu_managed_proto.h"
#include "rgpu_messages.h"
#include "rgpu_mutex.h"

typedef struct {
  uint64_t base;  /* MEM_ALLOC's address (what MEM_FREE takes) */
  uint64_t ptr;   /* the program's pointer: page-aligned inside the allocation */
  size_t size;    /* the mapped bytes: the request rounded up to pages */
  int dev;
  int device_owns;
  /* Attachment (cudaMallocManaged's flags, cudaStreamAttachMemAsync):
   * ATTACH_GLOBAL moves with work on any stream and comes back after a
   * device-wide synchronization; ATTACH_SINGLE only with work on stream
   * `stream` and after that stream's synchronization; ATTACH_HOST stays
   * with the host (the device may not use it). */
  int attach;
  uint64_t stream;
  /* What the device holds as far as this process knows (the bytes of the
   * last push or pull), or NULL before the first: a push sends only the
   * chunks the program changed since. */
  uint8_t *shadow;
  /* cudaMemAdvise's and cudaMemPrefetchAsync's record, one entry per host
   * page, for cudaMemRangeGetAttribute(s); NULL until the first of them. */
  struct page_hint *hints;
} managed_rec;

/* What a page was told (hints): CUDA reports a range's attribute only
 * where every page of it agrees, so advice is kept per page, not per
 * allocation.  Types are cudaMemLocationType values (0: none). */
struct page_hint {
  uint64_t accessed_by; /* bit d: device d has SetAccessedBy */
  int32_t pref_id, prefetch_id;
  uint8_t read_mostly, pref_type, prefetch_type, accessed_by_host;
};

static rgpu_mutex g_mlock = RGPU_MUTEX_INITIALIZER;
static managed_rec *g_recs;
static size_t g_nrecs, g_caprecs;
/* How many allocations each side owns: the hooks return at once when the
 * side they move from owns none (every launch and sync asks). */
static int g_host_owned, g_device_owned;
enum { ATTACH_GLOBAL = 0, ATTACH_HOST = 1, ATTACH_SINGLE = 2 };

/* Set while this thread moves managed memory: its own copies and
 * synchronizations must not move it again. */
static __thread int tl_moving;

/* How many tries for an allocation whose address is free in this process. */
enum { MANAGED_PLACE_TRIES = 8 };

static size_t page_size(void) {
  long p = sysconf(_SC_PAGESIZE);
  return p > 0 ? (size_t)p : 4096;
}

/* The record holding p (p inside [ptr, ptr + size)), under g_mlock. */
static managed_rec *find_locked(uint64_t p) {
  assert(rgpu_mutex_held(&g_mlock));
  for (size_t i = 0; i < g_nrecs; i++)
    if (p >= g_recs[i].ptr && p - g_recs[i].ptr < g_recs[i].size) return &g_recs[i];
  return NULL;
}

int rgpu_rt_managed_find(uint64_t p, int *dev) {
  if (!__atomic_load_n(&g_nrecs, __ATOMIC_RELAXED)) return 0;
  rgpu_mutex_lock(&g_mlock);
  managed_rec *r = find_locked(p);
  if (r && dev) *dev = r->dev;
  rgpu_mutex_unlock(&g_mlock);
  return r != NULL;
}

static void count_owner(const managed_rec *r, int delta) {
  __atomic_add_fetch(r->device_owns ? &g_device_owned : &g_host_owned, delta, __ATOMIC_RELAXED);
}

RGPU_API cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!devPtr || (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost))
    return rgpu_rt_ret(cudaErrorInvalidValue);
  /* Nothing asked for: success and no allocation, as NVIDIA's runtime
   * answers on the H200 (CUDA 13.0), and as cudaMalloc does. */
  if (size == 0) {
    *devPtr = NULL;
    return cudaSuccess;
  }
  size_t pg = page_size();
  if (size > SIZE_MAX - 2 * pg) return rgpu_rt_ret(cudaErrorMemoryAllocation);
  size_t mapped = (size + pg - 1) / pg * pg;
  /* One page more than mapped, so that a page-aligned start lies inside the
   * allocation and no other allocation shares the mapped pages. */
  uint64_t want = (uint64_t)mapped + pg;
  int dev = rgpu_rt_current_device();
  c = rgpu_rt_route(c, dev);
  uint64_t spare[MANAGED_PLACE_TRIES];
  int nspare = 0;
  uint64_t base = 0, ptr = 0;
  rgpu_status rc = 0;
  for (int t = 0; t < MANAGED_PLACE_TRIES && !ptr; t++) {
    if ((rc = rgpu_rt_server_alloc(c, dev, want, &base)) != 0) break;
    uint64_t p = (base + pg - 1) / pg * pg;
    void *m = mmap((void *)(uintptr_t)p, mapped, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (m == (void *)(uintptr_t)p) {
      ptr = p;
    } else {
      /* Taken here (or a kernel that ignores NOREPLACE put it elsewhere):
       * keep this allocation until the end so that the next is another. */
      if (m != MAP_FAILED) munmap(m, mapped);
      spare[nspare++] = base;
    }
  }
  for (int i = 0; i < nspare; i++) rgpu_rt_server_free(c, dev, spare[i]);
  if (rc) return rgpu_rt_sync_ret(c, rc);
  if (!ptr) {
    RGPU_WARN("cudaMallocManaged: no address of %d server allocations was free in this "
              "process; cudaErrorMemoryAllocation",
              MANAGED_PLACE_TRIES);
    return rgpu_rt_ret(cudaErrorMemoryAllocation);
  }
  rgpu_range rg = {.base = base, .size = want, .device = dev, .kind = RGPU_RANGE_DEVICE};
  rgpu_mutex_lock(&g_mlock);
  int ok = RGPU_ARRAY_RESERVE(g_recs, g_caprecs, g_nrecs + 1, 16) == 0;
  if (ok && rgpu_range_add(rgpu_rt_device_ranges(), &rg) != 0) ok = 0;
  if (ok) {
    /* Host-owned: the program writes it first, and the first device work
     * takes it over. */
    managed_rec r = {.base = base, .ptr = ptr, .size = mapped, .dev = dev, .device_owns = 0,
                     .attach = flags == cudaMemAttachHost ? ATTACH_HOST : ATTACH_GLOBAL};
    g_recs[g_nrecs] = r;
    __atomic_store_n(&g_nrecs, g_nrecs + 1, __ATOMIC_RELAXED);
    count_owner(&r, 1);
  }
  rgpu_mutex_unlock(&g_mlock);
  if (!ok) {
    munmap((void *)(uintptr_t)ptr, mapped);
    rgpu_rt_server_free(c, dev, base);
    return rgpu_rt_ret(cudaErrorMemoryAllocation);
  }
  *devPtr = (void *)(uintptr_t)ptr;
  return cudaSuccess;
}

int rgpu_rt_managed_free(rgpu_client *c, void *p, cudaError_t *err) {
  uint64_t v = (uint64_t)(uintptr_t)p;
  if (!__atomic_load_n(&g_nrecs, __ATOMIC_RELAXED)) return 0;
  rgpu_mutex_lock(&g_mlock);
  managed_rec *r = find_locked(v);
  managed_rec gone;
  int mine = r && r->ptr == v;
  if (mine) {
    gone = *r;
    count_owner(r, -1);
    *r = g_recs[g_nrecs - 1];
    __atomic_store_n(&g_nrecs, g_nrecs - 1, __ATOMIC_RELAXED);
  }
  rgpu_mutex_unlock(&g_mlock);
  if (!r) return 0;
  if (!mine) {
    *err = rgpu_rt_ret(cudaErrorInvalidValue); /* inside a managed block, not its start */
    return 1;
  }
  munmap((void *)(uintptr_t)gone.ptr, gone.size);
  free(gone.shadow);
  free(gone.hints);
  *err = rgpu_rt_dev_free(c, (void *)(uintptr_t)gone.base);
  return 1;
}

void rgpu_rt_managed_forget_device(int dev) {
  rgpu_mutex_lock(&g_mlock);
  for (size_t i = 0; i < g_nrecs;) {
    if (g_recs[i].dev != dev) {
      i++;
      continue;
    }
    count_owner(&g_recs[i], -1);
    munmap((void *)(uintptr_t)g_recs[i].ptr, g_recs[i].size);
    free(g_recs[i].shadow);
    free(g_recs[i].hints);
    g_recs[i] = g_recs[g_nrecs - 1];
    __atomic_store_n(&g_nrecs, g_nrecs - 1, __ATOMIC_RELAXED);
  }
  rgpu_mutex_unlock(&g_mlock);
}

/* Which allocations a move concerns: work or a synchronization on stream
 * `stream` (any_stream: device-wide, every stream). */
static int concerns(const managed_rec *r, uint64_t stream, int any_stream) {
  if (r->attach == ATTACH_HOST) return 0;
  if (r->attach == ATTACH_SINGLE && !any_stream) return r->stream == stream;
  return 1;
}

/* The allocations one side owns that a move on `stream` concerns, handed
 * to the other side: copies of their records (the copies themselves run
 * without g_mlock).  *global_out: one of them is attached globally (a
 * device-wide synchronization must come first when it goes to the host). */
static size_t take_owned(int device_owns, uint64_t stream, int any_stream, managed_rec **out,
                         int *global_out, int *oom) {
  rgpu_mutex_lock(&g_mlock);
  size_t n = 0, want = 0;
  int global = 0;
  /* Most calls find nothing to move (host-attached allocations count as
   * host-owned): no list then. */
  for (size_t i = 0; i < g_nrecs; i++)
    want += g_recs[i].device_owns == device_owns && concerns(&g_recs[i], stream, any_stream);
  managed_rec *v = want ? malloc(want * sizeof *v) : NULL;
  if (v) {
    for (size_t i = 0; i < g_nrecs; i++)
      if (g_recs[i].device_owns == device_owns && concerns(&g_recs[i], stream, any_stream)) {
        global |= g_recs[i].attach == ATTACH_GLOBAL;
        count_owner(&g_recs[i], -1);
        g_recs[i].device_owns = !device_owns;
        count_owner(&g_recs[i], 1);
        v[n++] = g_recs[i];
      }
  }
  rgpu_mutex_unlock(&g_mlock);
  *out = v;
  if (global_out) *global_out = global;
  /* Out of memory for the list: nothing moved (ownership unchanged). */
  *oom = want && !v;
  return v ? n : 0;
}

/* Stores a shadow made for the allocation at ptr (if it still exists and has
 * none; else frees it). */
static void shadow_store(uint64_t ptr, uint8_t *shadow) {
  rgpu_mutex_lock(&g_mlock);
  managed_rec *r = find_locked(ptr);
  if (r && r->ptr == ptr && !r->shadow) {
    r->shadow = shadow;
    shadow = NULL;
  }
  rgpu_mutex_unlock(&g_mlock);
  free(shadow);
}

/* Sends the chunks of r the program changed since the device last had
 * them (all of it the first time), queued on the legacy stream.  *sent: 1
 * when anything went. */
static cudaError_t push_changed(rgpu_client *c, const managed_rec *r, int *sent) {
  if (!r->shadow) {
    cudaError_t e =
        rgpu_rt_memcpy(c, r->ptr, r->ptr, r->size, cudaMemcpyHostToDevice, 0, r->dev, 1);
    if (e != cudaSuccess) return e;
    *sent = 1;
    uint8_t *sh = malloc(r->size);
    if (sh) {
      memcpy(sh, (const void *)(uintptr_t)r->ptr, r->size);
      shadow_store(r->ptr, sh);
    }
    return cudaSuccess;
  }
  const uint8_t *host = (const uint8_t *)(uintptr_t)r->ptr;
  for (size_t off = 0; off < r->size;) {
    size_t len = r->size - off < RGPU_MANAGED_CHUNK ? r->size - off : RGPU_MANAGED_CHUNK;
    if (memcmp(host + off, r->shadow + off, len) == 0) {
      off += len;
      continue;
    }
    /* A run of changed chunks goes as one copy. */
    size_t end = off + len;
    while (end < r->size) {
      size_t l2 = r->size - end < RGPU_MANAGED_CHUNK ? r->size - end : RGPU_MANAGED_CHUNK;
      if (memcmp(host + end, r->shadow + end, l2) == 0) break;
      end += l2;
    }
    cudaError_t e = rgpu_rt_memcpy(c, r->ptr + off, r->ptr + off, end - off,
                                   cudaMemcpyHostToDevice, 0, r->dev, 1);
    if (e != cudaSuccess) return e;
    memcpy(r->shadow + off, host + off, end - off);
    *sent = 1;
    off = end;
  }
  return cudaSuccess;
}

/* One MANAGED_PULL: a piece of at most RGPU_MANAGED_PULL_MAX_BYTES of an
 * allocation, and the buffer its reply lands in (bitmap, then chunks). */
typedef struct {
  const managed_rec *r;
  size_t at, len, bm;
  uint8_t *buf;
  uint64_t seq;
} pull_piece;

/* Bytes of reply buffers in flight at once: the pulls of one
 * synchronization go out back to back (one round trip for many small
 * allocations), in windows of this size for large ones. */
#define MANAGED_PULL_WINDOW (64u << 20)

/* Applies a piece's reply: the changed chunks into the program's memory
 * and the shadow.  0, or CUDA_ERROR_UNKNOWN for a reply shorter than its
 * bitmap says. */
static rgpu_status pull_apply(const pull_piece *pc, size_t got) {
  size_t n = (pc->len + RGPU_MANAGED_CHUNK - 1) / RGPU_MANAGED_CHUNK;
  if (got < pc->bm) return CUDA_ERROR_UNKNOWN;
  uint8_t *host = (uint8_t *)(uintptr_t)pc->r->ptr + pc->at;
  uint8_t *shadow = pc->r->shadow ? pc->r->shadow + pc->at : NULL;
  size_t data = pc->bm;
  for (size_t i = 0; i < n; i++) {
    if (!(pc->buf[i / 8] & (1u << (i % 8)))) continue;
    size_t off = i * RGPU_MANAGED_CHUNK;
    size_t len = pc->len - off < RGPU_MANAGED_CHUNK ? pc->len - off : RGPU_MANAGED_CHUNK;
    if (data + len > got) return CUDA_ERROR_UNKNOWN;
    memcpy(host + off, pc->buf + data, len);
    if (shadow) memcpy(shadow + off, pc->buf + data, len);
    data += len;
  }
  return 0;
}

/* Sends the pieces [lo, hi) of device dev's session back to back, then
 * takes their replies in order. */
static rgpu_status pull_window(rgpu_client *c, int dev, pull_piece *pc, size_t lo, size_t hi) {
  rgpu_client *cc = rgpu_rt_route(c, dev);
  rgpu_client_lock(cc);
  uint64_t first = rgpu_client_next_seq_locked(cc);
  rgpu_status rc = rgpu_client_bind_device_locked(cc, dev);
  size_t sent = lo;
  for (; sent < hi && rc == 0; sent++) {
    rgpu_msg_managed_pull_req q = {.ptr = pc[sent].r->ptr + pc[sent].at, .size = pc[sent].len,
                                   .chunk = RGPU_MANAGED_CHUNK};
    rc = rgpu_send_managed_pull_locked(cc, 1, &q, &pc[sent].seq);
  }
  for (size_t i = lo; i < sent; i++) {
    rgpu_client_reply r;
    memset(&r, 0, sizeof r);
    r.dst = pc[i].buf;
    r.dst_cap = pc[i].bm + pc[i].len;
    rgpu_status w = rgpu_client_wait_locked(cc, pc[i].seq, first, &r);
    if (w == 0) w = (rgpu_status)r.status;
    if (w == 0) w = pull_apply(&pc[i], r.dst_len);
    if (rc == 0) rc = w;
    if (w < 0) break; /* the connection: the rest will not come */
  }
  rgpu_client_unlock(cc);
  return rc;
}

/* Brings back the chunks the device changed since the last pull of each of
 * the n allocations (MANAGED_PULL), into the program's memory and the
 * shadows. */
static cudaError_t pull_changed(rgpu_client *c, const managed_rec *v, size_t n) {
  size_t np = 0;
  for (size_t i = 0; i < n; i++)
    np += (v[i].size + RGPU_MANAGED_PULL_MAX_BYTES - 1) / RGPU_MANAGED_PULL_MAX_BYTES;
  pull_piece *pc = calloc(np ? np : 1, sizeof *pc);
  if (!pc) return cudaErrorMemoryAllocation;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    for (size_t at = 0; at < v[i].size; at += RGPU_MANAGED_PULL_MAX_BYTES) {
      size_t len = v[i].size - at < RGPU_MANAGED_PULL_MAX_BYTES ? v[i].size - at
                                                                : RGPU_MANAGED_PULL_MAX_BYTES;
      size_t chunks = (len + RGPU_MANAGED_CHUNK - 1) / RGPU_MANAGED_CHUNK;
      pc[k++] = (pull_piece){.r = &v[i], .at = at, .len = len, .bm = (chunks + 7) / 8};
    }
  rgpu_status rc = 0;
  /* Windows of pieces of one device at a time, each under its session's lock. */
  for (size_t lo = 0; lo < np && rc == 0;) {
    int dev = pc[lo].r->dev;
    size_t hi = lo, bytes = 0;
    while (hi < np && pc[hi].r->dev == dev && (hi == lo || bytes + pc[hi].bm + pc[hi].len <= MANAGED_PULL_WINDOW)) {
      bytes += pc[hi].bm + pc[hi].len;
      hi++;
    }
    for (size_t i = lo; i < hi && rc == 0; i++)
      if (!(pc[i].buf = malloc(pc[i].bm + pc[i].len))) rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == 0) rc = pull_window(c, dev, pc, lo, hi);
    for (size_t i = lo; i < hi; i++) {
      free(pc[i].buf);
      pc[i].buf = NULL;
    }
    lo = hi;
  }
  free(pc);
  return rgpu_rt_from_call(rc);
}

cudaError_t rgpu_rt_managed_to_device(rgpu_client *c, uint64_t stream) {
  if (tl_moving || !__atomic_load_n(&g_host_owned, __ATOMIC_RELAXED)) return cudaSuccess;
  tl_moving = 1;
  managed_rec *v;
  int oom;
  size_t n = take_owned(0, stream, 0, &v, NULL, &oom);
  cudaError_t e = oom ? cudaErrorMemoryAllocation : cudaSuccess;
  int synced[RGPU_MAX_DEVICES] = {0};
  for (size_t i = 0; i < n && e == cudaSuccess; i++) {
    int sent = 0;
    e = push_changed(c, &v[i], &sent);
    if (sent && v[i].dev >= 0 && v[i].dev < RGPU_MAX_DEVICES) synced[v[i].dev] = 1;
  }
  /* In place before any stream uses it, whatever stream the work is on. */
  for (int d = 0; d < RGPU_MAX_DEVICES && e == cudaSuccess; d++)
    if (synced[d]) e = rgpu_rt_from_call(rgpu_rt_sync_call(c, d, RGPU_RT_SYNC_STREAM, 0, 0));
  free(v);
  tl_moving = 0;
  return e;
}

cudaError_t rgpu_rt_managed_to_host(rgpu_client *c, uint64_t stream, int any_stream,
                                    int device_synced) {
  if (tl_moving || !__atomic_load_n(&g_device_owned, __ATOMIC_RELAXED)) return cudaSuccess;
  tl_moving = 1;
  managed_rec *v;
  int global = 0;
  int oom;
  size_t n = take_owned(1, stream, any_stream, &v, &global, &oom);
  cudaError_t e = oom ? cudaErrorMemoryAllocation : cudaSuccess;
  int synced[RGPU_MAX_DEVICES] = {0};
  /* Allocations attached to the synchronized stream alone are done with
   * once it is; any other may still be written by a kernel of another
   * stream: the whole device first. */
  for (size_t i = 0; i < n && e == cudaSuccess && (global || any_stream); i++) {
    int d = v[i].dev;
    if (d >= 0 && d < RGPU_MAX_DEVICES && !synced[d] && device_synced != d) {
      e = rgpu_rt_from_call(rgpu_rt_sync_call(c, d, RGPU_RT_SYNC_DEVICE, 0, 0));
      synced[d] = 1;
    }
  }
  if (e == cudaSuccess && n) e = pull_changed(c, v, n);
  free(v);
  tl_moving = 0;
  return e;
}

/* The record whose allocation holds all of [p, p + count), under g_mlock;
 * NULL if none does. */
static managed_rec *find_range_locked(uint64_t p, size_t count) {
  managed_rec *r = find_locked(p);
  return r && count <= r->size - (p - r->ptr) ? r : NULL;
}

/* The managed allocation holding [p, p + count), or cudaErrorInvalidValue. */
cudaError_t rgpu_rt_managed_range_check(const void *p, size_t count) {
  rgpu_mutex_lock(&g_mlock);
  int ok = find_range_locked((uint64_t)(uintptr_t)p, count) != NULL;
  rgpu_mutex_unlock(&g_mlock);
  return ok ? cudaSuccess : cudaErrorInvalidValue;
}

/* The host pages [*first, *last] that bytes [p, p + count) of r touch
 * (count 0: the page of p alone). */
static void range_pages(const managed_rec *r, uint64_t p, size_t count, size_t *first,
                        size_t *last) {
  size_t pg = page_size();
  *first = (p - r->ptr) / pg;
  *last = count ? (p - r->ptr + count - 1) / pg : *first;
}

/* hints_record's what: a cudaMemoryAdvise value, or a prefetch. */
enum { HINT_PREFETCH = 100 };

/* Whether advice `what` (or HINT_PREFETCH) can take location loc:
 * cudaSuccess with the location as recorded (*type, *id: the current host
 * NUMA node is node 0 here), cudaErrorInvalidValue for a location it
 * cannot take, cudaErrorInvalidDevice for a device that does not exist.
 * Advice without a location takes any. */
static cudaError_t hint_location(rgpu_client *c, int what, struct cudaMemLocation loc, int *type,
                                 int *id) {
  int ndev = 0;
  cudaError_t e;
  int wants_loc = what == cudaMemAdviseSetPreferredLocation ||
                  what == cudaMemAdviseSetAccessedBy || what == cudaMemAdviseUnsetAccessedBy ||
                  what == HINT_PREFETCH;
  if (wants_loc && loc.type == cudaMemLocationTypeDevice) {
    if ((e = rgpu_rt_device_count(c, &ndev)) != cudaSuccess) return e;
    if (loc.id < 0 || loc.id >= ndev || loc.id >= 64) return cudaErrorInvalidDevice;
  }
  /* Accessors are devices or the host; a preference or a prefetch may
   * also name a host NUMA node (the current one is node 0 here). */
  int t = loc.type == cudaMemLocationTypeHostNumaCurrent ? cudaMemLocationTypeHostNuma
                                                          : (int)loc.type;
  int i = loc.type == cudaMemLocationTypeHostNumaCurrent ? 0 : loc.id;
  if (wants_loc) {
    int ok = t == cudaMemLocationTypeDevice || t == cudaMemLocationTypeHost ||
             (t == cudaMemLocationTypeHostNuma && what != cudaMemAdviseSetAccessedBy &&
              what != cudaMemAdviseUnsetAccessedBy && i >= 0);
    if (!ok) return cudaErrorInvalidValue;
  }
  *type = t;
  *id = i;
  return cudaSuccess;
}

/* Records advice (a cudaMemoryAdvise value) or a prefetch (HINT_PREFETCH)
 * for the pages of [p, p + count), which must lie in one managed
 * allocation: cudaErrorInvalidValue otherwise; the location as
 * hint_location checks it; cudaErrorMemoryAllocation if the record cannot
 * be made. */
static cudaError_t hints_record(rgpu_client *c, const void *p, size_t count, int what,
                                struct cudaMemLocation loc) {
  int type, id;
  cudaError_t e = hint_location(c, what, loc, &type, &id);
  if (e != cudaSuccess) return e;
  uint64_t v = (uint64_t)(uintptr_t)p;
  rgpu_mutex_lock(&g_mlock);
  managed_rec *r = find_range_locked(v, count);
  if (!r) {
    rgpu_mutex_unlock(&g_mlock);
    return cudaErrorInvalidValue;
  }
  if (!r->hints) r->hints = calloc(r->size / page_size(), sizeof *r->hints);
  if (!r->hints) {
    rgpu_mutex_unlock(&g_mlock);
    return cudaErrorMemoryAllocation;
  }
  size_t first, last;
  range_pages(r, v, count, &first, &last);
  for (size_t i = first; i <= last && count; i++) {
    struct page_hint *h = &r->hints[i];
    switch (what) {
    case cudaMemAdviseSetReadMostly: h->read_mostly = 1; break;
    case cudaMemAdviseUnsetReadMostly: h->read_mostly = 0; break;
    case cudaMemAdviseSetPreferredLocation:
      h->pref_type = (uint8_t)type;
      h->pref_id = type == cudaMemLocationTypeHost ? 0 : id;
      break;
    case cudaMemAdviseUnsetPreferredLocation: h->pref_type = 0, h->pref_id = 0; break;
    case cudaMemAdviseSetAccessedBy:
    case cudaMemAdviseUnsetAccessedBy: {
      int set = what == cudaMemAdviseSetAccessedBy;
      if (type == cudaMemLocationTypeHost)
        h->accessed_by_host = (uint8_t)set;
      else if (set)
        h->accessed_by |= (uint64_t)1 << id;
      else
        h->accessed_by &= ~((uint64_t)1 << id);
      break;
    }
    case HINT_PREFETCH:
      h->prefetch_type = (uint8_t)type;
      h->prefetch_id = type == cudaMemLocationTypeHost ? 0 : id;
      break;
    }
  }
  rgpu_mutex_unlock(&g_mlock);
  return cudaSuccess;
}

cudaError_t rgpu_rt_prefetch_check(rgpu_client *c, const void *p, size_t count,
                                   struct cudaMemLocation loc) {
  int type, id;
  cudaError_t e = hint_location(c, HINT_PREFETCH, loc, &type, &id);
  return e != cudaSuccess ? e : rgpu_rt_managed_range_check(p, count);
}

cudaError_t rgpu_rt_prefetch(rgpu_client *c, const void *p, size_t count,
                             struct cudaMemLocation loc) {
  /* The range and location checks, and the record cudaMemRangeGetAttribute
   * reads. */
  cudaError_t e = hints_record(c, p, count, HINT_PREFETCH, loc);
  if (e != cudaSuccess) return e;
  /* Whole allocations move, as at a launch or a synchronization; done now,
   * which orders it after everything before it on any stream. */
  switch (loc.type) {
  case cudaMemLocationTypeDevice: return rgpu_rt_managed_to_device(c, 0);
  case cudaMemLocationTypeHost:
  case cudaMemLocationTypeHostNuma:
  case cudaMemLocationTypeHostNumaCurrent: return rgpu_rt_managed_to_host(c, 0, 1, -1);
  default: return cudaErrorInvalidValue;
  }
}

/* The stream only orders the move, which happens now (rgpu_rt_prefetch):
 * it is resolved so that a stale handle is refused as elsewhere. */
static cudaError_t prefetch_common(const void *devPtr, size_t count,
                                   struct cudaMemLocation location, unsigned int flags,
                                   cudaStream_t stream, int per_thread) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (flags != 0) return rgpu_rt_ret(cudaErrorInvalidValue);
  uint64_t wire;
  int sdev;
  if ((e = rgpu_rt_stream_resolve(c, stream, per_thread, &wire, &sdev)) != cudaSuccess)
    return rgpu_rt_ret(e);
  return rgpu_rt_ret(rgpu_rt_prefetch(c, devPtr, count, location));
}

RGPU_API cudaError_t cudaMemPrefetchAsync(const void *devPtr, size_t count,
                                          struct cudaMemLocation location, unsigned int flags,
                                          cudaStream_t stream) {
  return prefetch_common(devPtr, count, location, flags, stream, 0);
}
RGPU_API_PTSZ(cudaError_t cudaMemPrefetchAsync_ptsz(const void *devPtr, size_t count,
                                                    struct cudaMemLocation location,
                                                    unsigned int flags, cudaStream_t stream)) {
  return prefetch_common(devPtr, count, location, flags, stream, 1);
}

RGPU_API cudaError_t cudaMemAdvise(const void *devPtr, size_t count, enum cudaMemoryAdvise advice,
                                   struct cudaMemLocation location) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (advice < cudaMemAdviseSetReadMostly || advice > cudaMemAdviseUnsetAccessedBy)
    return rgpu_rt_ret(cudaErrorInvalidValue);
  /* Hints about placement: whole allocations move at launches and
   * synchronizations whatever they say, but the program can read them
   * back (cudaMemRangeGetAttribute). */
  return rgpu_rt_ret(hints_record(c, devPtr, count, (int)advice, location));
}

/* What every page of a range agrees on, as cudaMemRangeGetAttribute
 * defines it: a preference or prefetch only where all pages have the same
 * one (type cudaMemLocationTypeInvalid otherwise), the accessors all of
 * them have.  Pages never advised have no preference, no accessors and no
 * prefetch. */
typedef struct {
  int read_mostly, accessed_by_host;
  uint64_t accessed_by;
  int pref_type, prefetch_type;
  int32_t pref_id, prefetch_id;
} range_hints;

/* The range_hints of [p, p + count) of r, walking its pages once. */
static range_hints range_hints_locked(const managed_rec *r, uint64_t p, size_t count) {
  assert(rgpu_mutex_held(&g_mlock));
  size_t first, last;
  range_pages(r, p, count, &first, &last);
  static const struct page_hint none = {0};
  const struct page_hint *h0 = r->hints ? &r->hints[first] : &none;
  range_hints a = {.read_mostly = 1, .accessed_by_host = 1, .accessed_by = ~(uint64_t)0};
  int same_pref = 1, same_pf = 1;
  for (size_t i = first; i <= last; i++) {
    const struct page_hint *h = r->hints ? &r->hints[i] : &none;
    a.read_mostly &= h->read_mostly;
    a.accessed_by &= h->accessed_by;
    a.accessed_by_host &= h->accessed_by_host;
    same_pref &= h->pref_type == h0->pref_type && h->pref_id == h0->pref_id;
    same_pf &= h->prefetch_type == h0->prefetch_type && h->prefetch_id == h0->prefetch_id;
  }
  a.pref_type = same_pref ? h0->pref_type : cudaMemLocationTypeInvalid;
  a.prefetch_type = same_pf ? h0->prefetch_type : cudaMemLocationTypeInvalid;
  a.pref_id = h0->pref_id;
  a.prefetch_id = h0->prefetch_id;
  return a;
}

/* One attribute of a range (its range_hints) into data (size bytes). */
static cudaError_t range_attribute(const range_hints *a, enum cudaMemRangeAttribute attr,
                                   void *data, size_t size) {
  if (attr == cudaMemRangeAttributeAccessedBy) {
    if (size == 0 || size % sizeof(int32_t)) return cudaErrorInvalidValue;
    int32_t *out = data;
    size_t n = size / sizeof(int32_t), k = 0;
    for (int d = 0; d < 64 && k < n; d++)
      if (a->accessed_by >> d & 1) out[k++] = d;
    if (a->accessed_by_host && k < n) out[k++] = cudaCpuDeviceId;
    while (k < n) out[k++] = cudaInvalidDeviceId;
    return cudaSuccess;
  }
  if (size != sizeof(int32_t)) return cudaErrorInvalidValue;
  /* The older attributes name a location by device id (host: cudaCpuDeviceId). */
#define HINT_AS_DEVICE(type, id)                                                                \
  ((type) == cudaMemLocationTypeDevice ? (id)                                                   \
   : (type) == cudaMemLocationTypeHost || (type) == cudaMemLocationTypeHostNuma ? cudaCpuDeviceId \
                                                                                : cudaInvalidDeviceId)
  int32_t v = 0;
  switch (attr) {
  case cudaMemRangeAttributeReadMostly: v = a->read_mostly; break;
  case cudaMemRangeAttributePreferredLocation: v = HINT_AS_DEVICE(a->pref_type, a->pref_id); break;
  case cudaMemRangeAttributeLastPrefetchLocation:
    v = HINT_AS_DEVICE(a->prefetch_type, a->prefetch_id);
    break;
  case cudaMemRangeAttributePreferredLocationType: v = a->pref_type; break;
  case cudaMemRangeAttributePreferredLocationId:
    v = a->pref_type == cudaMemLocationTypeInvalid ? cudaInvalidDeviceId : a->pref_id;
    break;
  case cudaMemRangeAttributeLastPrefetchLocationType: v = a->prefetch_type; break;
  case cudaMemRangeAttributeLastPrefetchLocationId:
    v = a->prefetch_type == cudaMemLocationTypeInvalid ? cudaInvalidDeviceId : a->prefetch_id;
    break;
  default: return cudaErrorInvalidValue;
  }
#undef HINT_AS_DEVICE
  memcpy(data, &v, sizeof v);
  return cudaSuccess;
}

/* The attributes of a range inside one managed allocation (the range
 * must be managed memory: cudaErrorInvalidValue otherwise).  Answered
 * here: advice is this process's record. */
static cudaError_t range_attributes(void **data, const size_t *sizes,
                                    const enum cudaMemRangeAttribute *attrs, size_t n,
                                    const void *devPtr, size_t count) {
  if (!data || !sizes || !attrs || !n || !count) return cudaErrorInvalidValue;
  for (size_t i = 0; i < n; i++)
    if (!data[i]) return cudaErrorInvalidValue;
  uint64_t p = (uint64_t)(uintptr_t)devPtr;
  rgpu_mutex_lock(&g_mlock);
  managed_rec *r = find_range_locked(p, count);
  range_hints a = {0};
  if (r) a = range_hints_locked(r, p, count);
  rgpu_mutex_unlock(&g_mlock);
  if (!r) return cudaErrorInvalidValue;
  cudaError_t e = cudaSuccess;
  for (size_t i = 0; i < n && e == cudaSuccess; i++)
    e = range_attribute(&a, attrs[i], data[i], sizes[i]);
  return e;
}

RGPU_API cudaError_t cudaMemRangeGetAttribute(void *data, size_t dataSize,
                                              enum cudaMemRangeAttribute attribute,
                                              const void *devPtr, size_t count) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  return rgpu_rt_ret(range_attributes(&data, &dataSize, &attribute, 1, devPtr, count));
}

RGPU_API cudaError_t cudaMemRangeGetAttributes(void **data, size_t *dataSizes,
                                               enum cudaMemRangeAttribute *attributes,
                                               size_t numAttributes, const void *devPtr,
                                               size_t count) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  return rgpu_rt_ret(range_attributes(data, dataSizes, attributes, numAttributes, devPtr, count));
}

static cudaError_t attach_common(cudaStream_t stream, void *devPtr, size_t length,
                                 unsigned int flags, int per_thread) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost && flags != cudaMemAttachSingle)
    return rgpu_rt_ret(cudaErrorInvalidValue);
  if ((e = rgpu_rt_managed_range_check(devPtr, length)) != cudaSuccess) return rgpu_rt_ret(e);
  uint64_t wire = 0;
  int sdev;
  if ((e = rgpu_rt_stream_resolve(c, stream, per_thread, &wire, &sdev)) != cudaSuccess)
    return rgpu_rt_ret(e);
  /* Single attachment to the legacy stream is not allowed (CUDA's rule);
   * 0 from the _ptsz form is the per-thread stream, which may. */
  if (flags == cudaMemAttachSingle && rgpu_rt_is_legacy_stream(stream, per_thread))
    return rgpu_rt_ret(cudaErrorInvalidValue);
  uint64_t v = (uint64_t)(uintptr_t)devPtr;
  /* Going to the host: its bytes come back first, with the device idle (a
   * kernel may still write them). */
  rgpu_mutex_lock(&g_mlock);
  managed_rec *r = find_locked(v);
  int pull = r && flags == cudaMemAttachHost && r->device_owns;
  if (r && !pull) {
    r->attach = flags == cudaMemAttachHost ? ATTACH_HOST
                : flags == cudaMemAttachSingle ? ATTACH_SINGLE
                                               : ATTACH_GLOBAL;
    r->stream = wire;
  }
  uint64_t ptr = r ? r->ptr : 0;
  rgpu_mutex_unlock(&g_mlock);
  if (pull) {
    /* Pulled as an allocation of this stream alone, then attached. */
    rgpu_mutex_lock(&g_mlock);
    if ((r = find_locked(ptr))) r->attach = ATTACH_SINGLE, r->stream = ~(uint64_t)0;
    rgpu_mutex_unlock(&g_mlock);
    e = rgpu_rt_from_call(rgpu_rt_sync_call(c, sdev, RGPU_RT_SYNC_DEVICE, 0, 0));
    if (e == cudaSuccess) e = rgpu_rt_managed_to_host(c, ~(uint64_t)0, 0, sdev);
    rgpu_mutex_lock(&g_mlock);
    if ((r = find_locked(ptr))) r->attach = ATTACH_HOST, r->stream = wire;
    rgpu_mutex_unlock(&g_mlock);
  }
  return rgpu_rt_ret(e);
}

RGPU_API cudaError_t cudaStreamAttachMemAsync(cudaStream_t stream, void *devPtr, size_t length,
                                              unsigned int flags) {
  return attach_common(stream, devPtr, length, flags, 0);
}
RGPU_API_PTSZ(cudaError_t cudaStreamAttachMemAsync_ptsz(cudaStream_t stream, void *devPtr,
                                                        size_t length, unsigned int flags)) {
  return attach_common(stream, devPtr, length, flags, 1);
}
