/* Memory: device allocations (server), pinned host buffers (local), copies,
 * memsets, symbol copies and pointer attributes.
 *
 * The copy and memset entry points check their arguments and submit one
 * operation (rgpu_cudart_op.h); the copy engine that sends it is in
 * rgpu_cudart_op.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rgpu_cudart.h"
#include "rgpu_cudart_alloc.h"
#include "rgpu_cudart_arena.h"
#include "rgpu_cudart_graph.h"
#include "rgpu_cudart_op.h"
#include "rgpu_cudart_unsupported.h"
#include "rgpu_client_bulk.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"

static rgpu_range_table g_dev_ranges = {RGPU_MUTEX_INITIALIZER, NULL, 0, 0};
static rgpu_range_table g_host_ranges = {RGPU_MUTEX_INITIALIZER, NULL, 0, 0};

rgpu_range_table *rgpu_rt_device_ranges(void) { return &g_dev_ranges; }
rgpu_range_table *rgpu_rt_host_ranges(void) { return &g_host_ranges; }

static int is_device_range(uint64_t p, uint64_t n, rgpu_range *out) {
  return rgpu_range_find(&g_dev_ranges, p, n, out) == 0;
}

/* ---- copies (the wire side is rgpu_cudart_op.c) ------------------------ */

/* One COPY op, submitted; src_transient as rgpu_rt_copy_issue's. */
static cudaError_t copy_submit(rgpu_client *c, uint64_t dst, uint64_t src, size_t n,
                               enum cudaMemcpyKind kind, uint64_t stream, int device, int async,
                               int src_transient) {
  if (n == 0) return cudaSuccess;
  rgpu_rt_op op = {.kind = RGPU_RT_OP_COPY, .stream = stream, .device = device};
  op.copy.cp = rgpu_rt_copy_1d((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n, kind);
  op.copy.async = async;
  op.copy.src_transient = src_transient;
  return rgpu_rt_submit(c, &op);
}

cudaError_t rgpu_rt_memcpy(rgpu_client *c, uint64_t dst, uint64_t src, size_t n,
                           enum cudaMemcpyKind kind, uint64_t stream, int device, int async) {
  return copy_submit(c, dst, src, n, kind, stream, device, async, 0);
}

/* Resolves cudaMemcpyDefault and checks device-side pointers against the
 * known allocations, so a wild pointer fails now with cudaErrorInvalidValue
 * (as on a local GPU) rather than later. */
cudaError_t rgpu_rt_copy_check(const void *dst, const void *src, size_t n,
                               enum cudaMemcpyKind *kind, int *device) {
  uint64_t d = (uint64_t)(uintptr_t)dst, s = (uint64_t)(uintptr_t)src;
  rgpu_range rd, rs;
  int d_dev = is_device_range(d, 1, &rd);
  int s_dev = is_device_range(s, 1, &rs);
  if ((int)*kind < 0 || (int)*kind > (int)cudaMemcpyDefault) return cudaErrorInvalidMemcpyDirection;
  if (*kind == cudaMemcpyDefault) {
    if (d_dev && s_dev)
      *kind = cudaMemcpyDeviceToDevice;
    else if (d_dev)
      *kind = cudaMemcpyHostToDevice;
    else if (s_dev)
      *kind = cudaMemcpyDeviceToHost;
    else
      *kind = cudaMemcpyHostToHost;
  }
  int need_d = *kind == cudaMemcpyHostToDevice || *kind == cudaMemcpyDeviceToDevice;
  int need_s = *kind == cudaMemcpyDeviceToHost || *kind == cudaMemcpyDeviceToDevice;
  if (need_d && (!d_dev || !is_device_range(d, n, NULL))) return cudaErrorInvalidValue;
  if (need_s && (!s_dev || !is_device_range(s, n, NULL))) return cudaErrorInvalidValue;
  if ((!need_d && !dst) || (!need_s && !src)) return cudaErrorInvalidValue;
  *device = need_d ? rd.device : need_s ? rs.device : rgpu_rt_current_device();
  return cudaSuccess;
}

/* A synchronous copy into device dst_dev from another device's memory
 * (issue 19) runs on dst_dev's legacy stream, which does not wait for the
 * source device's work; CUDA serializes it with both devices' work
 * (cudaMemcpyPeer says so), so the source device is synchronized first. */
static cudaError_t sync_other_source(rgpu_client *c, const void *src, int dst_dev) {
  rgpu_range rs;
  if (!is_device_range((uint64_t)(uintptr_t)src, 1, &rs) || rs.device == dst_dev)
    return cudaSuccess;
  rgpu_status rc =
      rgpu_rt_sync_call(c, rs.device, RGPU_RT_SYNC_DEVICE, 0, RGPU_CLIENT_ALL_STREAMS);
  return rc ? rgpu_rt_sync_ret(c, rc) : cudaSuccess;
}

cudaError_t rgpu_rt_foreign_stream(int mem_dev, int stream_dev, uint64_t *wire) {
  if (!rgpu_rt_devices_apart(mem_dev, stream_dev) || rgpu_rt_graph_is_capturing(*wire))
    return cudaSuccess;
  rgpu_client *cw = rgpu_rt_client_of_device(stream_dev);
  rgpu_status rc = rgpu_rt_sync_call(cw, stream_dev, RGPU_RT_SYNC_STREAM, *wire, *wire);
  if (rc) return rgpu_rt_sync_ret(cw, rc);
  *wire = 0;
  return cudaSuccess;
}

/* Bytes staged in client memory per piece of a copy between servers. */
#define RGPU_RT_CROSS_STAGE_BYTES (64u << 20)

/* A copy between devices of two servers (issue 19) goes through this
 * client: each piece is read from the source server (a synchronous D2H, one
 * round trip) into a buffer here and written to the destination server (an
 * H2D, queued like any other).  So the bytes cross the network twice and
 * the call returns once they left the source.  Ordering: the read runs on
 * the source side of the stream (the stream itself when it is the source
 * server's, else the source device's legacy stream, after the whole source
 * device for a synchronous copy, as cudaMemcpyPeer serializes with both
 * devices); the write runs on the stream when it is the destination
 * server's, else on the destination device's legacy stream, so later work
 * on that stream sees the bytes.  A stream of a third server is waited for
 * first. */
static cudaError_t copy_between_servers(rgpu_client *c, uint64_t dst, int dst_dev, uint64_t src,
                                        int src_dev, size_t n, uint64_t wire, int stream_dev,
                                        int async) {
  rgpu_client *cs = rgpu_rt_client_of_device(src_dev), *cd = rgpu_rt_client_of_device(dst_dev);
  int stream_srv = rgpu_rt_server_of_device(stream_dev);
  uint64_t src_stream = 0, dst_stream = 0;
  if (stream_srv == rgpu_rt_server_of_device(src_dev)) {
    src_stream = wire;
  } else if (stream_srv == rgpu_rt_server_of_device(dst_dev)) {
    dst_stream = wire;
  } else if (wire) {
    rgpu_client *cw = rgpu_rt_client_of_device(stream_dev);
    rgpu_status rc = rgpu_rt_sync_call(cw, stream_dev, RGPU_RT_SYNC_STREAM, wire, wire);
    if (rc) return rgpu_rt_sync_ret(cw, rc);
  }
  if (!async || !src_stream) {
    rgpu_status rc =
        rgpu_rt_sync_call(cs, src_dev, RGPU_RT_SYNC_DEVICE, 0, RGPU_CLIENT_ALL_STREAMS);
    if (rc) return rgpu_rt_sync_ret(cs, rc);
  }
  (void)c;
  size_t piece = n < RGPU_RT_CROSS_STAGE_BYTES ? n : RGPU_RT_CROSS_STAGE_BYTES;
  uint8_t *stage = malloc(piece);
  if (!stage) return rgpu_rt_ret(cudaErrorMemoryAllocation);
  cudaError_t e = cudaSuccess;
  for (size_t off = 0; e == cudaSuccess && off < n; off += piece) {
    size_t len = n - off < piece ? n - off : piece;
    e = rgpu_rt_memcpy(cs, (uint64_t)(uintptr_t)stage, src + off, len, cudaMemcpyDeviceToHost,
                       src_stream, src_dev, 0);
    if (e == cudaSuccess)
      e = rgpu_rt_memcpy(cd, dst + off, (uint64_t)(uintptr_t)stage, len, cudaMemcpyHostToDevice,
                         dst_stream, dst_dev, 0);
  }
  free(stage);
  return e;
}

/* With several servers: the device of src when a device-to-device copy to
 * dev leaves dev's server (-1 when it does not); *e is the refusal of such
 * a copy on a capturing stream (cudaSuccess otherwise). */
static int other_server_source(enum cudaMemcpyKind kind, const void *src, int dev, uint64_t wire,
                               cudaError_t *e) {
  *e = cudaSuccess;
  rgpu_range rs;
  if (kind != cudaMemcpyDeviceToDevice || !is_device_range((uint64_t)(uintptr_t)src, 1, &rs) ||
      !rgpu_rt_devices_apart(rs.device, dev))
    return -1;
  if (rgpu_rt_graph_is_capturing(wire)) {
    static int logged;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      RGPU_WARN("a captured copy between devices of two servers is not supported; it "
                "returns cudaErrorNotSupported");
    *e = cudaErrorNotSupported;
  }
  return rs.device;
}

cudaError_t rgpu_rt_copy_issue(rgpu_client *c, void *dst, const void *src, size_t count,
                               enum cudaMemcpyKind kind, int dev, uint64_t wire, int sdev,
                               int async, int src_transient) {
  cudaError_t e;
  if (rgpu_rt_several_servers) {
    int from = other_server_source(kind, src, dev, wire, &e);
    if (e != cudaSuccess) return rgpu_rt_ret(e);
    if (from >= 0)
      return copy_between_servers(c, (uint64_t)(uintptr_t)dst, dev, (uint64_t)(uintptr_t)src,
                                  from, count, wire, sdev, async);
    uint64_t asked = wire;
    e = rgpu_rt_foreign_stream(dev, sdev, &wire);
    if (e != cudaSuccess) return e;
    if (asked && !wire) async = 0; /* the stream's own ordering is gone: wait for it */
  }
  if (!async && kind == cudaMemcpyDeviceToDevice) {
    e = sync_other_source(c, src, dev);
    if (e != cudaSuccess) return e;
  }
  return copy_submit(c, (uint64_t)(uintptr_t)dst, (uint64_t)(uintptr_t)src, count, kind, wire,
                     dev, async, src_transient);
}

static cudaError_t memcpy_common(void *dst, const void *src, size_t count,
                                 enum cudaMemcpyKind kind, cudaStream_t stream, int per_thread,
                                 int async) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (count == 0) return cudaSuccess;
  int dev;
  e = rgpu_rt_copy_check(dst, src, count, &kind, &dev);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  uint64_t wire = 0;
  int sdev;
  e = rgpu_rt_stream_resolve(c, stream, per_thread, &wire, &sdev);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  return rgpu_rt_copy_issue(c, dst, src, count, kind, dev, wire, sdev, async, 0);
}

RGPU_API cudaError_t cudaMemcpy(void *dst, const void *src, size_t count,
                                enum cudaMemcpyKind kind) {
  return memcpy_common(dst, src, count, kind, NULL, 0, 0);
}
RGPU_API cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count,
                                     enum cudaMemcpyKind kind);
RGPU_API cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count,
                                     enum cudaMemcpyKind kind) {
  return memcpy_common(dst, src, count, kind, NULL, 1, 0);
}
RGPU_API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                                     enum cudaMemcpyKind kind, cudaStream_t stream) {
  return memcpy_common(dst, src, count, kind, stream, 0, 1);
}
RGPU_API_PTSZ(cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count,
                                               enum cudaMemcpyKind kind, cudaStream_t stream)) {
  return memcpy_common(dst, src, count, kind, stream, 1, 1);
}

/* cudaMemcpyPeer(Async): with one address space for the session's devices
 * this is a device-to-device copy, on the server the driver's peer copy
 * (MEMCPY_DTOD between two devices' allocations: cuMemcpyPeer(Async)).
 * The devices must exist; the pointers must be device memory. */
/* The start of a peer copy: both devices must exist.  cudaSuccess, or the
 * call's result (already through rgpu_rt_ret). */
static cudaError_t peer_devices_check(int dst_dev, int src_dev) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  int n = 0;
  e = rgpu_rt_device_count(c, &n);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  if (dst_dev < 0 || dst_dev >= n || src_dev < 0 || src_dev >= n)
    return rgpu_rt_ret(cudaErrorInvalidDevice);
  return cudaSuccess;
}

static cudaError_t memcpy_peer(void *dst, int dst_dev, const void *src, int src_dev, size_t count,
                               cudaStream_t stream, int per_thread, int async) {
  cudaError_t e = peer_devices_check(dst_dev, src_dev);
  if (e != cudaSuccess) return e;
  return memcpy_common(dst, src, count, cudaMemcpyDeviceToDevice, stream, per_thread, async);
}

RGPU_API cudaError_t cudaMemcpyPeer(void *dst, int dstDevice, const void *src, int srcDevice,
                                    size_t count) {
  return memcpy_peer(dst, dstDevice, src, srcDevice, count, NULL, 0, 0);
}
RGPU_API cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice,
                                         size_t count, cudaStream_t stream) {
  return memcpy_peer(dst, dstDevice, src, srcDevice, count, stream, 0, 1);
}

/* ---- memset ------------------------------------------------------------- */

static cudaError_t memset2d_common(void *devPtr, size_t pitch, int value, size_t width,
                                   size_t height, cudaStream_t stream, int per_thread);

/* A 1D memset is the one-row 2D memset (pitch = width = count): the same
 * checks, the same MEMSET op. */
static cudaError_t memset_common(void *devPtr, int value, size_t count, cudaStream_t stream,
                                 int per_thread) {
  return memset2d_common(devPtr, count, value, count, 1, stream, per_thread);
}

RGPU_API cudaError_t cudaMemset(void *devPtr, int value, size_t count) {
  return memset_common(devPtr, value, count, NULL, 0);
}
RGPU_API cudaError_t cudaMemset_ptds(void *devPtr, int value, size_t count);
RGPU_API cudaError_t cudaMemset_ptds(void *devPtr, int value, size_t count) {
  return memset_common(devPtr, value, count, NULL, 1);
}
RGPU_API cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream) {
  return memset_common(devPtr, value, count, stream, 0);
}
RGPU_API_PTSZ(cudaError_t cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count,
                                               cudaStream_t stream)) {
  return memset_common(devPtr, value, count, stream, 1);
}

/* ---- allocation --------------------------------------------------------- */

/* ---- the allocation arena (rgpu_cudart_arena.h) ------------------------- */

/* g_arena_lock guards g_arena, g_synced_seq, g_chunk_fetching and
 * g_arena_gen.  It is a leaf (cudart/rgpu_cudart_locks.h): no other lock is
 * taken and no frame is sent while it is held; the round trips of the
 * arena (CTX_SYNC, MEM_ALLOC of a chunk, MEM_FREE of an empty one) happen
 * with it dropped. */
static rgpu_mutex g_arena_lock = RGPU_MUTEX_INITIALIZER;
/* Signalled (under g_arena_lock) when a chunk fetch ends. */
static pthread_cond_t g_arena_fetch_done = PTHREAD_COND_INITIALIZER;
static rgpu_arena g_arena[RGPU_MAX_DEVICES];
/* Per device: the sequence number of the latest CTX_SYNC that completed. */
static uint64_t g_synced_seq[RGPU_MAX_DEVICES];
/* Per device: a thread is fetching a chunk (MEM_ALLOC in flight, lock
 * dropped).  Others that need a chunk wait for it instead of fetching one
 * each, so concurrent cudaMalloc calls cost the round trips (and take the
 * device memory) they did when the lock was held across the fetch. */
static int g_chunk_fetching[RGPU_MAX_DEVICES];
/* Per device: bumped by rgpu_rt_arena_forget_device, so that a chunk
 * fetched across a cudaDeviceReset is not added to the new arena. */
static uint32_t g_arena_gen[RGPU_MAX_DEVICES];

void rgpu_rt_arena_synced(int dev, uint64_t seq) {
  if (dev < 0 || dev >= RGPU_MAX_DEVICES) return;
  rgpu_mutex_lock(&g_arena_lock);
  if (seq > g_synced_seq[dev]) g_synced_seq[dev] = seq;
  rgpu_mutex_unlock(&g_arena_lock);
}

uint64_t rgpu_rt_arena_unused(int dev) {
  if (dev < 0 || dev >= RGPU_MAX_DEVICES) return 0;
  rgpu_mutex_lock(&g_arena_lock);
  uint64_t n = g_arena[dev].committed - g_arena[dev].in_use;
  rgpu_mutex_unlock(&g_arena_lock);
  return n;
}

void rgpu_rt_arena_forget_device(int dev) {
  if (dev < 0 || dev >= RGPU_MAX_DEVICES) return;
  rgpu_rt_mempool_forget_device(dev);
  rgpu_mutex_lock(&g_arena_lock);
  rgpu_arena_free_all(&g_arena[dev]);
  g_arena_gen[dev]++;
  rgpu_mutex_unlock(&g_arena_lock);
}

rgpu_status rgpu_rt_server_alloc(rgpu_client *c, int dev, uint64_t size, uint64_t *dptr) {
  assert(rgpu_mutex_held_count() == 0); /* a round trip: no cudart lock held */
  rgpu_msg_mem_alloc_req req = {.size = size};
  rgpu_msg_mem_alloc_rep rep;
  rgpu_status rc = rgpu_call_mem_alloc(c, dev, 0, &req, &rep, NULL);
  if (rc == 0 && rep.dptr == 0) rc = CUDA_ERROR_UNKNOWN; /* a malformed reply */
  if (rc == 0) *dptr = rep.dptr;
  return rc;
}

rgpu_status rgpu_rt_server_free(rgpu_client *c, int dev, uint64_t dptr) {
  assert(rgpu_mutex_held_count() == 0); /* sends a frame (a round trip in sync mode) */
  rgpu_msg_mem_free_req req = {.dptr = dptr};
  return rgpu_call_mem_free(c, dev, RGPU_CALL_ASYNC, &req, NULL, NULL);
}

/* Gives the server back the chunks nothing uses, so that a failing
 * allocation fails only where it would on a local GPU.  One chunk at a
 * time leaves the arena under the lock and is freed after it.  Returns how
 * many went back. */
static int release_empty_chunks(rgpu_client *c, int dev) {
  int n = 0;
  for (;;) {
    uint64_t base;
    rgpu_mutex_lock(&g_arena_lock);
    int got = rgpu_arena_take_empty_chunk(&g_arena[dev], &base) == 0;
    rgpu_mutex_unlock(&g_arena_lock);
    if (!got) return n;
    rgpu_rt_server_free(c, dev, base);
    n++;
  }
}

/* A block from dev's arena that is clean as of the last completed
 * synchronization: 1 and *p, or 0 (*dirty_fits as rgpu_arena_alloc). */
static int arena_take(int dev, uint64_t size, uint64_t *p, int *dirty_fits) {
  assert(rgpu_mutex_held(&g_arena_lock));
  return rgpu_arena_alloc(&g_arena[dev], size, g_synced_seq[dev], p, dirty_fits) == 0;
}

/* A small allocation from the arena, often without any round trip.
 * Returns 0 or a CUresult/<0 that the caller must report; on 0, *served
 * says whether *p is an arena block (1) or the arena cannot help and the
 * caller allocates on its own (0).  The status and the "served" answer are
 * apart because a CUresult may be any small integer. */
static rgpu_status arena_alloc(rgpu_client *c, int dev, uint64_t size, uint64_t *p,
                               int *served) {
  *served = 0;
  rgpu_mutex_lock(&g_arena_lock);
  int dirty = 0;
  if (arena_take(dev, size, p, &dirty)) goto served;
  if (dirty) {
    /* Only memory freed since the last device-wide synchronization fits:
     * work queued before the free may still use it, so synchronize (CUDA's
     * own cudaFree would have), which costs what a new chunk would. */
    rgpu_mutex_unlock(&g_arena_lock);
    rgpu_status src =
        rgpu_rt_sync_call(c, dev, RGPU_RT_SYNC_DEVICE, 0, RGPU_CLIENT_ALL_STREAMS);
    if (src) return src;
    rgpu_mutex_lock(&g_arena_lock);
  }
  /* Another thread's chunk may be on its way: wait for it and try again,
   * as the lock held across that fetch used to make us do. */
  for (;;) {
    if (arena_take(dev, size, p, NULL)) goto served;
    if (!g_chunk_fetching[dev]) break;
    rgpu_mutex_cond_wait(&g_arena_fetch_done, &g_arena_lock);
  }
  g_chunk_fetching[dev] = 1;
  uint32_t gen = g_arena_gen[dev];
  rgpu_mutex_unlock(&g_arena_lock);

  uint64_t base = 0;
  rgpu_status arc = rgpu_rt_server_alloc(c, dev, RGPU_ARENA_CHUNK, &base);

  rgpu_mutex_lock(&g_arena_lock);
  g_chunk_fetching[dev] = 0;
  pthread_cond_broadcast(&g_arena_fetch_done);
  rgpu_status rc = 0;
  int give_back = 0;
  if (arc == 0) {
    if (gen != g_arena_gen[dev]) {
      /* cudaDeviceReset meanwhile (a race the program owns: CUDA leaves a
       * reset concurrent with other calls undefined).  Whether the chunk
       * outlived the old context is unknown, so neither use nor free it;
       * the caller allocates on its own. */
      RGPU_DEBUG("arena chunk 0x%llx fetched across a device reset: dropped",
                 (unsigned long long)base);
    } else if (rgpu_arena_add_chunk(&g_arena[dev], base, RGPU_ARENA_CHUNK)) {
      give_back = 1;
      rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (arena_take(dev, size, p, NULL)) {
      *served = 1;
    }
  } else if (arc != CUDA_ERROR_OUT_OF_MEMORY) {
    rc = arc; /* a dead connection, a sticky error: report it */
  } /* out of memory for a whole chunk: maybe not for this request */
  rgpu_mutex_unlock(&g_arena_lock);
  if (give_back) rgpu_rt_server_free(c, dev, base);
  return rc;

served:
  *served = 1;
  rgpu_mutex_unlock(&g_arena_lock);
  return 0;
}

cudaError_t rgpu_rt_dev_alloc(rgpu_client *c, int dev, size_t size, void **devPtr) {
  c = rgpu_rt_route(c, dev); /* the device's session: its arena, its errors */
  uint64_t p = 0;
  rgpu_status rc = 0;
  int served = 0;
  /* Small requests come from the arena; sync-every-call is the baseline
   * that asks the server for everything. */
  if (size <= RGPU_ARENA_MAX_SUB && dev >= 0 && dev < RGPU_MAX_DEVICES &&
      !rgpu_client_sync_every_call(c))
    rc = arena_alloc(c, dev, size, &p, &served);
  if (rc == 0 && !served) {
    rc = rgpu_rt_server_alloc(c, dev, size, &p);
    /* Exact: out of memory only if it still is with no idle chunk held. */
    if (rc == CUDA_ERROR_OUT_OF_MEMORY && dev >= 0 && dev < RGPU_MAX_DEVICES &&
        release_empty_chunks(c, dev))
      rc = rgpu_rt_server_alloc(c, dev, size, &p);
    /* Blocks stream-ordered pools keep for reuse: given back, then once more
     * (their arena chunks may have emptied too). */
    if (rc == CUDA_ERROR_OUT_OF_MEMORY && dev >= 0 && dev < RGPU_MAX_DEVICES &&
        rgpu_rt_mempool_release_cached(c, dev)) {
      release_empty_chunks(c, dev);
      rc = rgpu_rt_server_alloc(c, dev, size, &p);
    }
  }
  if (rc) return rgpu_rt_sync_ret(c, rc);
  rgpu_range rg = {.base = p, .size = size, .device = dev, .kind = RGPU_RANGE_DEVICE};
  if (rgpu_range_add(&g_dev_ranges, &rg)) {
    rgpu_range other;
    if (rgpu_rt_several_servers && rgpu_range_find(&g_dev_ranges, p, 1, &other) == 0 &&
        rgpu_rt_devices_apart(other.device, dev)) {
      /* Two servers' address spaces are their own: a pointer that names
       * memory on both could not be routed.  Refused, not misrouted. */
      RGPU_ERROR("device %d's server returned memory at 0x%llx, where device %d (another "
                 "server) has memory already; cudaMalloc fails with "
                 "cudaErrorMemoryAllocation (the block stays allocated on its server)",
                 dev, (unsigned long long)p, other.device);
      return rgpu_rt_ret(cudaErrorMemoryAllocation);
    }
    RGPU_WARN("server returned an allocation overlapping a known one (0x%llx)",
              (unsigned long long)p);
  }
  *devPtr = (void *)(uintptr_t)p;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaMalloc(void **devPtr, size_t size) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if ((e = rgpu_rt_graph_unsafe_call()) != cudaSuccess) return rgpu_rt_ret(e);
  if (!devPtr) return rgpu_rt_ret(cudaErrorInvalidValue);
  if (size == 0) {
    *devPtr = NULL;
    return cudaSuccess;
  }
  return rgpu_rt_dev_alloc(c, rgpu_rt_current_device(), size, devPtr);
}

cudaError_t rgpu_rt_dev_free(rgpu_client *c, void *devPtr) {
  rgpu_range r;
  if (rgpu_range_find(&g_dev_ranges, (uint64_t)(uintptr_t)devPtr, 1, &r) ||
      r.base != (uint64_t)(uintptr_t)devPtr || r.kind != RGPU_RANGE_DEVICE)
    return rgpu_rt_ret(cudaErrorInvalidValue);
  rgpu_range_remove(&g_dev_ranges, r.base, NULL);
  c = rgpu_rt_route(c, r.device); /* the arena's sequence numbers are its server's */
  if (r.device >= 0 && r.device < RGPU_MAX_DEVICES) {
    /* Arena memory goes back to the arena: nothing to send.  It is handed
     * out again only after a device-wide synchronization issued after
     * this point completed, so work queued before the free (on any
     * stream) is done with it. */
    rgpu_mutex_lock(&g_arena_lock);
    int mine = rgpu_arena_release(&g_arena[r.device], r.base, rgpu_client_next_seq_locked(c)) == 0;
    rgpu_mutex_unlock(&g_arena_lock);
    if (mine) return cudaSuccess;
  }
  /* MEM_FREE is queued; the server frees after the device's earlier work. */
  int rc = rgpu_rt_server_free(c, r.device, r.base);
  return rc ? rgpu_rt_sync_ret(c, rc) : cudaSuccess;
}

RGPU_API cudaError_t cudaFree(void *devPtr) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!devPtr) return cudaSuccess;
  if (rgpu_rt_managed_free(c, devPtr, &e)) return e;
  /* A block a graph launch left allocated: the program's hold goes. */
  if (rgpu_rt_graphmem_user_free((uint64_t)(uintptr_t)devPtr)) return cudaSuccess;
  if (rgpu_rt_mempool_on_free((uint64_t)(uintptr_t)devPtr)) return rgpu_rt_ret(cudaErrorInvalidValue);
  return rgpu_rt_dev_free(c, devPtr);
}

/* Background copies into host memory about to be released land first (CUDA's
 * cudaFreeHost synchronizes too). */
static void drain_host_range(void *p, size_t n) {
  if (!rgpu_rt_client_peek()) return;
  assert(rgpu_mutex_held_count() == 0); /* waits for replies: no cudart lock held */
  /* Any server's copies may land there. */
  for (int i = 0; i < rgpu_rt_server_count(); i++) {
    rgpu_client *c = rgpu_rt_server_client(i);
    if (!c) continue;
    rgpu_client_lock(c);
    rgpu_client_drain_dst_locked(c, p, n);
    rgpu_client_unlock(c);
  }
}

RGPU_API cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags) {
  rgpu_rt_count_call();
  if (!pHost) return rgpu_rt_ret(cudaErrorInvalidValue);
  if (flags & ~(unsigned)(cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined))
    return rgpu_rt_ret(cudaErrorInvalidValue);
  if (size == 0) {
    *pHost = NULL;
    return cudaSuccess;
  }
  /* "Pinned" memory of a remote GPU is ordinary local memory: what matters
   * is that copies from it may be asynchronous, and that it is tracked for
   * cudaMemcpyDefault and cudaPointerGetAttributes. */
  long pg = sysconf(_SC_PAGESIZE);
  size_t align = pg > 0 ? (size_t)pg : 4096;
  size_t rounded = (size + align - 1) / align * align;
  void *p = NULL;
  if (rounded < size || posix_memalign(&p, align, rounded)) return rgpu_rt_ret(cudaErrorMemoryAllocation);
  rgpu_range r = {.base = (uint64_t)(uintptr_t)p,
                  .size = rounded,
                  .device = rgpu_rt_current_device(),
                  .kind = RGPU_RANGE_HOST,
                  .flags = flags};
  if (rgpu_range_add(&g_host_ranges, &r)) {
    free(p);
    return rgpu_rt_ret(cudaErrorMemoryAllocation);
  }
  *pHost = p;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaMallocHost(void **ptr, size_t size) {
  return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

RGPU_API cudaError_t cudaFreeHost(void *ptr) {
  rgpu_rt_count_call();
  if (!ptr) return cudaSuccess;
  rgpu_range r;
  uint64_t p = (uint64_t)(uintptr_t)ptr;
  /* Only what cudaHostAlloc made: registered memory belongs to the program. */
  if (rgpu_range_find(&g_host_ranges, p, 1, &r) || r.base != p || (r.flags & 0x80000000u))
    return rgpu_rt_ret(cudaErrorInvalidValue);
  drain_host_range(ptr, r.size);
  rgpu_range_remove(&g_host_ranges, p, NULL);
  free(ptr);
  return cudaSuccess;
}

RGPU_API cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes,
                                              const void *ptr) {
  rgpu_rt_count_call();
  if (!attributes) return rgpu_rt_ret(cudaErrorInvalidValue);
  memset(attributes, 0, sizeof *attributes);
  rgpu_range r;
  uint64_t p = (uint64_t)(uintptr_t)ptr;
  int mdev;
  if (rgpu_rt_managed_find(p, &mdev)) {
    /* The same address on the host and on the device. */
    attributes->type = cudaMemoryTypeManaged;
    attributes->device = mdev;
    attributes->devicePointer = (void *)ptr;
    attributes->hostPointer = (void *)ptr;
  } else if (is_device_range(p, 1, &r)) {
    attributes->type = cudaMemoryTypeDevice;
    attributes->device = r.device;
    attributes->devicePointer = (void *)ptr;
  } else if (rgpu_range_find(&g_host_ranges, p, 1, &r) == 0) {
    attributes->type = cudaMemoryTypeHost;
    attributes->device = r.device;
    attributes->hostPointer = (void *)ptr;
  } else {
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = cudaInvalidDeviceId;
  }
  return cudaSuccess;
}

/* ---- symbols ------------------------------------------------------------ */

static cudaError_t symbol_copy(int to_symbol, const void *symbol, void *host, size_t count,
                               size_t offset, enum cudaMemcpyKind kind, cudaStream_t stream,
                               int per_thread, int async) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (to_symbol) {
    if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToDevice &&
        kind != cudaMemcpyDefault)
      return rgpu_rt_ret(cudaErrorInvalidMemcpyDirection);
  } else if (kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyDeviceToDevice &&
             kind != cudaMemcpyDefault) {
    return rgpu_rt_ret(cudaErrorInvalidMemcpyDirection);
  }
  uint64_t dptr;
  size_t size;
  e = rgpu_rt_symbol(c, symbol, &dptr, &size);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  if (offset > size || count > size - offset) return rgpu_rt_ret(cudaErrorInvalidValue);
  if (count == 0) return cudaSuccess;
  uint64_t h = (uint64_t)(uintptr_t)host;
  if (kind == cudaMemcpyDefault)
    kind = is_device_range(h, 1, NULL) ? cudaMemcpyDeviceToDevice
                                       : (to_symbol ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
  if (kind == cudaMemcpyDeviceToDevice && !is_device_range(h, count, NULL))
    return rgpu_rt_ret(cudaErrorInvalidValue);
  if (!host) return rgpu_rt_ret(cudaErrorInvalidValue);
  uint64_t wire;
  int sdev;
  e = rgpu_rt_stream_resolve(c, stream, per_thread, &wire, &sdev);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  int dev = rgpu_rt_current_device();
  if (to_symbol) return rgpu_rt_memcpy(c, dptr + offset, h, count, kind, wire, dev, async);
  return rgpu_rt_memcpy(c, h, dptr + offset, count, kind, wire, dev, async);
}

RGPU_API cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t count,
                                        size_t offset, enum cudaMemcpyKind kind) {
  return symbol_copy(1, symbol, (void *)src, count, offset, kind, NULL, 0, 0);
}
RGPU_API cudaError_t cudaMemcpyToSymbol_ptds(const void *symbol, const void *src, size_t count,
                                             size_t offset, enum cudaMemcpyKind kind);
RGPU_API cudaError_t cudaMemcpyToSymbol_ptds(const void *symbol, const void *src, size_t count,
                                             size_t offset, enum cudaMemcpyKind kind) {
  return symbol_copy(1, symbol, (void *)src, count, offset, kind, NULL, 1, 0);
}
RGPU_API cudaError_t cudaMemcpyFromSymbol(void *dst, const void *symbol, size_t count,
                                          size_t offset, enum cudaMemcpyKind kind) {
  return symbol_copy(0, symbol, dst, count, offset, kind, NULL, 0, 0);
}
RGPU_API cudaError_t cudaMemcpyFromSymbol_ptds(void *dst, const void *symbol, size_t count,
                                               size_t offset, enum cudaMemcpyKind kind);
RGPU_API cudaError_t cudaMemcpyFromSymbol_ptds(void *dst, const void *symbol, size_t count,
                                               size_t offset, enum cudaMemcpyKind kind) {
  return symbol_copy(0, symbol, dst, count, offset, kind, NULL, 1, 0);
}
RGPU_API cudaError_t cudaMemcpyToSymbolAsync(const void *symbol, const void *src, size_t count,
                                             size_t offset, enum cudaMemcpyKind kind,
                                             cudaStream_t stream) {
  return symbol_copy(1, symbol, (void *)src, count, offset, kind, stream, 0, 1);
}
RGPU_API_PTSZ(cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void *symbol, const void *src,
                                                       size_t count, size_t offset,
                                                       enum cudaMemcpyKind kind, cudaStream_t stream)) {
  return symbol_copy(1, symbol, (void *)src, count, offset, kind, stream, 1, 1);
}
RGPU_API cudaError_t cudaMemcpyFromSymbolAsync(void *dst, const void *symbol, size_t count,
                                               size_t offset, enum cudaMemcpyKind kind,
                                               cudaStream_t stream) {
  return symbol_copy(0, symbol, dst, count, offset, kind, stream, 0, 1);
}
RGPU_API_PTSZ(cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void *dst, const void *symbol, size_t count,
                                                         size_t offset, enum cudaMemcpyKind kind,
                                                         cudaStream_t stream)) {
  return symbol_copy(0, symbol, dst, count, offset, kind, stream, 1, 1);
}

RGPU_API cudaError_t cudaGetSymbolAddress(void **devPtr, const void *symbol) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!devPtr) return rgpu_rt_ret(cudaErrorInvalidValue);
  uint64_t dptr;
  size_t size;
  e = rgpu_rt_symbol(c, symbol, &dptr, &size);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  *devPtr = (void *)(uintptr_t)dptr;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaGetSymbolSize(size_t *size, const void *symbol) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!size) return rgpu_rt_ret(cudaErrorInvalidValue);
  uint64_t dptr;
  size_t sz;
  e = rgpu_rt_symbol(c, symbol, &dptr, &sz);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  *size = sz;
  return cudaSuccess;
}

/* ---- pitched (2D) memory ------------------------------------------------ */

RGPU_API cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height) {
  if (!pitch) {
    rgpu_rt_count_call();
    return rgpu_rt_ret(cudaErrorInvalidValue);
  }
  /* 512 bytes: the pitch alignment NVIDIA's runtime uses on every GPU since
   * Kepler, and a multiple of any row access a kernel makes. */
  const size_t align = 512;
  size_t p = width ? (width + align - 1) / align * align : 0;
  if (p < width || (height && p > SIZE_MAX / height)) {
    rgpu_rt_count_call();
    return rgpu_rt_ret(cudaErrorInvalidValue);
  }
  cudaError_t e = cudaMalloc(devPtr, p * height);
  if (e == cudaSuccess) *pitch = p;
  return e;
}

/* Extent in bytes of a pitched region: the last row needs only `width`. */
static int span_2d(size_t pitch, size_t width, size_t height, uint64_t *out) {
  if (height == 0 || width == 0) {
    *out = 0;
    return 0;
  }
  if (width > pitch && height > 1) return -1;
  unsigned __int128 s = (unsigned __int128)pitch * (height - 1) + width;
  if (s > UINT64_MAX) return -1;
  *out = (uint64_t)s;
  return 0;
}

/* src_transient: as rgpu_rt_copy_issue's (a batch copy's DuringApiCall source). */
static cudaError_t memcpy2d_common(void *dst, size_t dpitch, const void *src, size_t spitch,
                                   size_t width, size_t height, enum cudaMemcpyKind kind,
                                   cudaStream_t stream, int per_thread, int async,
                                   int src_transient) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (width == 0 || height == 0) return cudaSuccess;
  if ((height > 1 && (width > dpitch || width > spitch))) return rgpu_rt_ret(cudaErrorInvalidPitchValue);
  uint64_t dspan, sspan;
  if (span_2d(dpitch, width, height, &dspan) || span_2d(spitch, width, height, &sspan))
    return rgpu_rt_ret(cudaErrorInvalidValue);
  int dev;
  /* Validate the whole extent of both sides with the 1D rules. */
  enum cudaMemcpyKind k2 = kind;
  e = rgpu_rt_copy_check(dst, src, 1, &k2, &dev);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  kind = k2;
  uint64_t d = (uint64_t)(uintptr_t)dst, s = (uint64_t)(uintptr_t)src;
  int d_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  int s_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if ((d_dev && !is_device_range(d, dspan, NULL)) || (s_dev && !is_device_range(s, sspan, NULL)))
    return rgpu_rt_ret(cudaErrorInvalidValue);
  uint64_t wire;
  int sdev;
  e = rgpu_rt_stream_resolve(c, stream, per_thread, &wire, &sdev);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  if (rgpu_rt_several_servers) {
    int from = other_server_source(kind, (const void *)(uintptr_t)s, dev, wire, &e);
    if (e != cudaSuccess) return rgpu_rt_ret(e);
    if (from >= 0) {
      /* Row by row through the client (a round trip each) unless the rows
       * are contiguous. */
      if (dpitch == width && spitch == width)
        return copy_between_servers(c, d, dev, s, from, width * height, wire, sdev, async);
      for (size_t r = 0; r < height; r++) {
        e = copy_between_servers(c, d + r * dpitch, dev, s + r * spitch, from, width, wire,
                                 sdev, async);
        if (e != cudaSuccess) return e;
      }
      return cudaSuccess;
    }
    uint64_t asked = wire;
    e = rgpu_rt_foreign_stream(dev, sdev, &wire);
    if (e != cudaSuccess) return e;
    if (asked && !wire) async = 0; /* the stream's own ordering is gone: wait for it */
  }
  if (!async && kind == cudaMemcpyDeviceToDevice) {
    e = sync_other_source(c, src, dev);
    if (e != cudaSuccess) return e;
  }
  if (dpitch == width && spitch == width) {
    size_t total = width * height;
    return copy_submit(c, d, s, total, kind, wire, dev, async, src_transient);
  }
  if (kind == cudaMemcpyDeviceToHost && sspan <= (uint64_t)width * height * 2 &&
      !rgpu_rt_graph_is_capturing(wire)) {
    /* One round trip for the whole source extent, then scatter locally:
     * cheaper than a request per row when the padding is modest. */
    uint8_t *tmp = malloc((size_t)sspan);
    if (tmp) {
      e = rgpu_rt_memcpy(c, (uint64_t)(uintptr_t)tmp, s, (size_t)sspan, kind, wire, dev, 0);
      if (e == cudaSuccess)
        for (size_t r = 0; r < height; r++)
          memcpy((uint8_t *)dst + r * dpitch, tmp + r * spitch, width);
      free(tmp);
      return e;
    }
  }
  for (size_t r = 0; r < height; r++) {
    e = copy_submit(c, d + r * dpitch, s + r * spitch, width, kind, wire, dev, async,
                    src_transient);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

RGPU_API cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch,
                                  size_t width, size_t height, enum cudaMemcpyKind kind) {
  return memcpy2d_common(dst, dpitch, src, spitch, width, height, kind, NULL, 0, 0, 0);
}
RGPU_API cudaError_t cudaMemcpy2D_ptds(void *dst, size_t dpitch, const void *src, size_t spitch,
                                       size_t width, size_t height, enum cudaMemcpyKind kind);
RGPU_API cudaError_t cudaMemcpy2D_ptds(void *dst, size_t dpitch, const void *src, size_t spitch,
                                       size_t width, size_t height, enum cudaMemcpyKind kind) {
  return memcpy2d_common(dst, dpitch, src, spitch, width, height, kind, NULL, 1, 0, 0);
}
RGPU_API cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                                       size_t width, size_t height, enum cudaMemcpyKind kind,
                                       cudaStream_t stream) {
  return memcpy2d_common(dst, dpitch, src, spitch, width, height, kind, stream, 0, 1, 0);
}
RGPU_API_PTSZ(cudaError_t cudaMemcpy2DAsync_ptsz(void *dst, size_t dpitch, const void *src,
                                                 size_t spitch, size_t width, size_t height,
                                                 enum cudaMemcpyKind kind, cudaStream_t stream)) {
  return memcpy2d_common(dst, dpitch, src, spitch, width, height, kind, stream, 1, 1, 0);
}

static cudaError_t memset2d_common(void *devPtr, size_t pitch, int value, size_t width,
                                   size_t height, cudaStream_t stream, int per_thread) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (width == 0 || height == 0) return cudaSuccess;
  if (height > 1 && width > pitch) return rgpu_rt_ret(cudaErrorInvalidPitchValue);
  uint64_t span;
  rgpu_range r;
  uint64_t d = (uint64_t)(uintptr_t)devPtr;
  if (span_2d(pitch, width, height, &span) || !is_device_range(d, span, &r))
    return rgpu_rt_ret(cudaErrorInvalidValue);
  uint64_t wire;
  int sdev;
  e = rgpu_rt_stream_resolve(c, stream, per_thread, &wire, &sdev);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  if ((e = rgpu_rt_foreign_stream(r.device, sdev, &wire)) != cudaSuccess) return e;
  rgpu_rt_op op = {.kind = RGPU_RT_OP_MEMSET, .stream = wire, .device = r.device};
  op.fill = (struct cudaMemsetParams){.dst = devPtr,
                                      .pitch = pitch,
                                      .value = (unsigned)(value & 0xff),
                                      .elementSize = 1,
                                      .width = width,
                                      .height = height};
  return rgpu_rt_submit(c, &op);
}

RGPU_API cudaError_t cudaMemset2D(void *devPtr, size_t pitch, int value, size_t width,
                                  size_t height) {
  return memset2d_common(devPtr, pitch, value, width, height, NULL, 0);
}
RGPU_API cudaError_t cudaMemset2D_ptds(void *devPtr, size_t pitch, int value, size_t width,
                                       size_t height);
RGPU_API cudaError_t cudaMemset2D_ptds(void *devPtr, size_t pitch, int value, size_t width,
                                       size_t height) {
  return memset2d_common(devPtr, pitch, value, width, height, NULL, 1);
}
RGPU_API cudaError_t cudaMemset2DAsync(void *devPtr, size_t pitch, int value, size_t width,
                                       size_t height, cudaStream_t stream) {
  return memset2d_common(devPtr, pitch, value, width, height, stream, 0);
}
RGPU_API_PTSZ(cudaError_t cudaMemset2DAsync_ptsz(void *devPtr, size_t pitch, int value, size_t width,
                                                 size_t height, cudaStream_t stream)) {
  return memset2d_common(devPtr, pitch, value, width, height, stream, 1);
}

/* ---- 3D (pitched) memory ------------------------------------------------ */

/* A 3D allocation is a pitched one of height x depth rows; the pitched
 * pointer remembers the slice height (ysize) that kernels and 3D copies
 * step by. */
RGPU_API cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pitchedDevPtr, struct cudaExtent extent) {
  if (!pitchedDevPtr || (extent.depth && extent.height > SIZE_MAX / extent.depth)) {
    rgpu_rt_count_call();
    return rgpu_rt_ret(cudaErrorInvalidValue);
  }
  void *p = NULL;
  size_t pitch = 0;
  cudaError_t e = cudaMallocPitch(&p, &pitch, extent.width, extent.height * extent.depth);
  if (e == cudaSuccess)
    *pitchedDevPtr = (struct cudaPitchedPtr){.ptr = p, .pitch = pitch, .xsize = extent.width,
                                             .ysize = extent.height};
  return e;
}

/* The first byte of slice z, row y, byte x of a pitched pointer. */
static char *pitched_at(struct cudaPitchedPtr pp, struct cudaPos pos) {
  return (char *)pp.ptr + (pos.z * pp.ysize + pos.y) * pp.pitch + pos.x;
}

/* Whether every slice of a 3D copy lies within its pitched pointer, so that
 * slice z + 1 starts where the copy expects (pitch * ysize further on):
 * cudaSuccess, cudaErrorInvalidPitchValue for rows wider than the pitch (as
 * NVIDIA's runtime answers on the H200), else cudaErrorInvalidValue. */
static cudaError_t pitched_fits(struct cudaPitchedPtr pp, struct cudaPos pos,
                                struct cudaExtent ext) {
  if (pos.x > pp.pitch || ext.width > pp.pitch - pos.x) return cudaErrorInvalidPitchValue;
  if (ext.depth > 1 && (pos.y > pp.ysize || ext.height > pp.ysize - pos.y))
    return cudaErrorInvalidValue;
  return cudaSuccess;
}

/* cudaMemcpy3D between linear (pitched) memory and host or device memory,
 * as 2D copies: one when the slices follow each other without a gap on
 * both sides, else one per slice.  A copy that names a CUDA array is an
 * ARRAY_COPY (rgpu_cudart_array.c), whose host bytes always travel copied
 * into the request, so src_transient (rgpu_rt_copy_issue's) changes
 * nothing there. */
static cudaError_t memcpy3d_common(const struct cudaMemcpy3DParms *p, cudaStream_t stream,
                                   int per_thread, int async, int src_transient) {
  if (!p) {
    rgpu_rt_count_call();
    return rgpu_rt_ret(cudaErrorInvalidValue);
  }
  if (p->srcArray || p->dstArray) return rgpu_rt_memcpy3d_array(p, stream, per_thread, async);
  struct cudaExtent ext = p->extent;
  if (ext.width == 0 || ext.height == 0 || ext.depth == 0) {
    rgpu_rt_count_call();
    return cudaSuccess;
  }
  cudaError_t fit = !p->srcPtr.ptr || !p->dstPtr.ptr ? cudaErrorInvalidValue
                                                      : pitched_fits(p->srcPtr, p->srcPos, ext);
  if (fit == cudaSuccess) fit = pitched_fits(p->dstPtr, p->dstPos, ext);
  if (fit != cudaSuccess) {
    rgpu_rt_count_call();
    return rgpu_rt_ret(fit);
  }
  const char *src = pitched_at(p->srcPtr, p->srcPos);
  char *dst = pitched_at(p->dstPtr, p->dstPos);
  size_t sp = p->srcPtr.pitch, dp = p->dstPtr.pitch;
  if (ext.depth == 1 || (p->srcPtr.ysize == ext.height && p->dstPtr.ysize == ext.height)) {
    if (ext.depth > SIZE_MAX / ext.height) {
      rgpu_rt_count_call();
      return rgpu_rt_ret(cudaErrorInvalidValue);
    }
    return memcpy2d_common(dst, dp, src, sp, ext.width, ext.height * ext.depth, p->kind, stream,
                           per_thread, async, src_transient);
  }
  size_t sslice = sp * p->srcPtr.ysize, dslice = dp * p->dstPtr.ysize;
  for (size_t z = 0; z < ext.depth; z++) {
    cudaError_t e = memcpy2d_common(dst + z * dslice, dp, src + z * sslice, sp, ext.width,
                                    ext.height, p->kind, stream, per_thread, async,
                                    src_transient);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t rgpu_rt_memcpy3d_async(const struct cudaMemcpy3DParms *p, cudaStream_t stream,
                                   int per_thread, int src_transient) {
  return memcpy3d_common(p, stream, per_thread, 1, src_transient);
}

RGPU_API cudaError_t cudaMemcpy3D(const struct cudaMemcpy3DParms *p) {
  return memcpy3d_common(p, NULL, 0, 0, 0);
}
RGPU_API cudaError_t cudaMemcpy3D_ptds(const struct cudaMemcpy3DParms *p);
RGPU_API cudaError_t cudaMemcpy3D_ptds(const struct cudaMemcpy3DParms *p) {
  return memcpy3d_common(p, NULL, 1, 0, 0);
}
RGPU_API cudaError_t cudaMemcpy3DAsync(const struct cudaMemcpy3DParms *p, cudaStream_t stream) {
  return memcpy3d_common(p, stream, 0, 1, 0);
}
RGPU_API_PTSZ(cudaError_t cudaMemcpy3DAsync_ptsz(const struct cudaMemcpy3DParms *p,
                                                 cudaStream_t stream)) {
  return memcpy3d_common(p, stream, 1, 1, 0);
}

/* cudaMemcpy3DPeer(Async): with one address space for the session's
 * devices (see cudaMemcpyPeer) this is cudaMemcpy3D as a device-to-device
 * copy; the devices must exist.  Array copies go where cudaMemcpy3D sends
 * them (the array knows its device). */
static cudaError_t memcpy3d_peer(const struct cudaMemcpy3DPeerParms *p, cudaStream_t stream,
                                 int per_thread, int async) {
  if (!p) {
    rgpu_rt_count_call();
    return rgpu_rt_ret(cudaErrorInvalidValue);
  }
  cudaError_t e = peer_devices_check(p->dstDevice, p->srcDevice);
  if (e != cudaSuccess) return e;
  struct cudaMemcpy3DParms q = {.srcArray = p->srcArray, .srcPos = p->srcPos,
                                .srcPtr = p->srcPtr, .dstArray = p->dstArray,
                                .dstPos = p->dstPos, .dstPtr = p->dstPtr,
                                .extent = p->extent, .kind = cudaMemcpyDeviceToDevice};
  return memcpy3d_common(&q, stream, per_thread, async, 0);
}

RGPU_API cudaError_t cudaMemcpy3DPeer(const struct cudaMemcpy3DPeerParms *p) {
  return memcpy3d_peer(p, NULL, 0, 0);
}
RGPU_API cudaError_t cudaMemcpy3DPeer_ptds(const struct cudaMemcpy3DPeerParms *p);
RGPU_API cudaError_t cudaMemcpy3DPeer_ptds(const struct cudaMemcpy3DPeerParms *p) {
  return memcpy3d_peer(p, NULL, 1, 0);
}
RGPU_API cudaError_t cudaMemcpy3DPeerAsync(const struct cudaMemcpy3DPeerParms *p,
                                           cudaStream_t stream) {
  return memcpy3d_peer(p, stream, 0, 1);
}
RGPU_API_PTSZ(cudaError_t cudaMemcpy3DPeerAsync_ptsz(const struct cudaMemcpy3DPeerParms *p,
                                                     cudaStream_t stream)) {
  return memcpy3d_peer(p, stream, 1, 1);
}

/* cudaMemset3D as 2D sets: one when the slices have no gap, else one per
 * slice. */
static cudaError_t memset3d_common(struct cudaPitchedPtr pp, int value, struct cudaExtent ext,
                                   cudaStream_t stream, int per_thread) {
  if (ext.width == 0 || ext.height == 0 || ext.depth == 0) {
    rgpu_rt_count_call();
    return cudaSuccess;
  }
  struct cudaPos origin = {0, 0, 0};
  cudaError_t fit = pp.ptr ? pitched_fits(pp, origin, ext) : cudaErrorInvalidValue;
  if (fit != cudaSuccess) {
    rgpu_rt_count_call();
    return rgpu_rt_ret(fit);
  }
  if (ext.depth == 1 || pp.ysize == ext.height) {
    if (ext.depth > SIZE_MAX / ext.height) {
      rgpu_rt_count_call();
      return rgpu_rt_ret(cudaErrorInvalidValue);
    }
    return memset2d_common(pp.ptr, pp.pitch, value, ext.width, ext.height * ext.depth, stream,
                           per_thread);
  }
  for (size_t z = 0; z < ext.depth; z++) {
    cudaError_t e = memset2d_common((char *)pp.ptr + z * pp.pitch * pp.ysize, pp.pitch, value,
                                    ext.width, ext.height, stream, per_thread);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

RGPU_API cudaError_t cudaMemset3D(struct cudaPitchedPtr pitchedDevPtr, int value,
                                  struct cudaExtent extent) {
  return memset3d_common(pitchedDevPtr, value, extent, NULL, 0);
}
RGPU_API cudaError_t cudaMemset3D_ptds(struct cudaPitchedPtr pitchedDevPtr, int value,
                                       struct cudaExtent extent);
RGPU_API cudaError_t cudaMemset3D_ptds(struct cudaPitchedPtr pitchedDevPtr, int value,
                                       struct cudaExtent extent) {
  return memset3d_common(pitchedDevPtr, value, extent, NULL, 1);
}
RGPU_API cudaError_t cudaMemset3DAsync(struct cudaPitchedPtr pitchedDevPtr, int value,
                                       struct cudaExtent extent, cudaStream_t stream) {
  return memset3d_common(pitchedDevPtr, value, extent, stream, 0);
}
RGPU_API_PTSZ(cudaError_t cudaMemset3DAsync_ptsz(struct cudaPitchedPtr pitchedDevPtr, int value,
                                                 struct cudaExtent extent, cudaStream_t stream)) {
  return memset3d_common(pitchedDevPtr, value, extent, stream, 1);
}

/* ---- registered host memory --------------------------------------------- */

/* Page-locking matters only for DMA on a local GPU; here registration just
 * records the range (so cudaMemcpyDefault, cudaPointerGetAttributes and
 * cudaHostUnregister see it).  Mapping it into device space cannot work
 * across a network, so cudaHostRegisterMapped/IoMemory are refused. */
RGPU_API cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags) {
  rgpu_rt_count_call();
  if (!ptr || size == 0) return rgpu_rt_ret(cudaErrorInvalidValue);
  if (flags & ~(unsigned)(cudaHostRegisterPortable | cudaHostRegisterMapped |
                          cudaHostRegisterIoMemory | cudaHostRegisterReadOnly))
    return rgpu_rt_ret(cudaErrorInvalidValue);
  if (flags & (cudaHostRegisterMapped | cudaHostRegisterIoMemory)) {
    static int logged;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      RGPU_WARN("cudaHostRegister with cudaHostRegisterMapped/IoMemory is not supported "
                "(host memory cannot be mapped into a remote GPU)");
    return rgpu_rt_ret(cudaErrorNotSupported);
  }
  rgpu_range r = {.base = (uint64_t)(uintptr_t)ptr,
                  .size = size,
                  .device = rgpu_rt_current_device(),
                  .kind = RGPU_RANGE_HOST,
                  .flags = flags | 0x80000000u /* registered, not allocated by us */};
  if (rgpu_range_add(&g_host_ranges, &r)) return rgpu_rt_ret(cudaErrorHostMemoryAlreadyRegistered);
  return cudaSuccess;
}

RGPU_API cudaError_t cudaHostUnregister(void *ptr) {
  rgpu_rt_count_call();
  rgpu_range r;
  uint64_t p = (uint64_t)(uintptr_t)ptr;
  if (rgpu_range_find(&g_host_ranges, p, 1, &r) || r.base != p || !(r.flags & 0x80000000u))
    return rgpu_rt_ret(cudaErrorHostMemoryNotRegistered);
  drain_host_range(ptr, r.size);
  rgpu_range_remove(&g_host_ranges, p, NULL);
  return cudaSuccess;
}

RGPU_API cudaError_t cudaHostGetFlags(unsigned int *pFlags, void *pHost) {
  rgpu_rt_count_call();
  if (!pFlags) return rgpu_rt_ret(cudaErrorInvalidValue);
  rgpu_range r;
  if (rgpu_range_find(&g_host_ranges, (uint64_t)(uintptr_t)pHost, 1, &r))
    return rgpu_rt_ret(cudaErrorInvalidValue);
  *pFlags = r.flags & 0x7fffffffu;
  return cudaSuccess;
}

/* Zero-copy: a remote GPU cannot reach the client's memory, so rgpu reports
 * canMapHostMemory = 0 and, like CUDA on such a device, gives no device
 * pointer for host memory.  cudaHostAlloc(..., cudaHostAllocMapped) still
 * returns page-locked memory (the flag takes effect only where mapping is
 * possible); asking for its device pointer is the unsupported capability,
 * anything else is not mapped host memory at all. */
RGPU_API cudaError_t cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags) {
  rgpu_rt_count_call();
  if (!pDevice || flags != 0) return rgpu_rt_ret(cudaErrorInvalidValue);
  rgpu_range r;
  if (rgpu_range_find(&g_host_ranges, (uint64_t)(uintptr_t)pHost, 1, &r))
    return rgpu_rt_ret(cudaErrorInvalidValue);
  static int logged;
  if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
    RGPU_WARN("cudaHostGetDevicePointer: host memory cannot be mapped into a remote GPU "
              "(canMapHostMemory is 0): cudaErrorNotSupported");
  return rgpu_rt_ret(cudaErrorNotSupported);
}
