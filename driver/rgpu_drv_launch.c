/* Driver-API launches and occupancy (rgpu_drv_cuLaunchKernel[Ex],
 * cuLaunchCooperativeKernel, their _ptsz twins, cuOccupancy*).
 *
 * A launch is cudart's operation value (rgpu_rt_op, kind LAUNCH) built from
 * the CUfunction's server index and parameter layout (rgpu_drv_module.h)
 * and handed to rgpu_rt_submit, so a capturing stream records it as a
 * kernel node and graphs replay it like a runtime launch; otherwise it is
 * queued (LAUNCH, or LAUNCH_EX for a cooperative or clustered launch), no
 * round trip.  The local checks are cudart's: a configuration outside the
 * device's limits is CUDA_ERROR_INVALID_VALUE at the call, everything else
 * the server's driver reports (asynchronously, as a GPU does).
 *
 * Occupancy is computed on the client, as CUDA's calculator does, from the
 * function's attributes (registers, static shared memory, its thread
 * limit: FUNC_GET_ATTRS, once per function) and the device's limits, so
 * cuOccupancyMaxPotentialBlockSize's walk over block sizes costs no round
 * trip per size.  The co-residency check of a cooperative launch asks the
 * server's driver instead (OCCUPANCY: exact, where a wrong estimate would
 * refuse a grid that fits), and so do the cluster questions (DEVICE_QUERY:
 * the hardware's cluster limits are known to the driver alone). */
#include <stdlib.h>
#include <string.h>

#include "rgpu_calls.h"
#include "rgpu_cudart.h"
#include "rgpu_cudart_graph.h"
#include "rgpu_cudart_op.h"
#include "rgpu_device_query.h"
#include "rgpu_drv_module.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"

/* Ends a driver call: the runtime last error as it was before (cudart's
 * paths used here record errors there), and the call's result. */

/* ---- occupancy ---------------------------------------------------------- */

static int imin(int a, int b) { return a < b ? a : b; }

/* Blocks of `block` threads with `dyn` bytes of dynamic shared memory that
 * fit on one multiprocessor: the least of the warp, block-slot, register
 * and shared-memory limits.  Registers are allocated per warp in units of
 * 256; shared memory per block includes the driver's reserved share. */
static int occupancy_blocks(const struct cudaDeviceProp *p, const int32_t *fa, int block, size_t dyn) {
  int fmax = fa[CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK];
  int max_threads = fmax > 0 ? imin(fmax, p->maxThreadsPerBlock) : p->maxThreadsPerBlock;
  if (block <= 0 || block > max_threads) return 0;
  int warp = p->warpSize > 0 ? p->warpSize : 32;
  int wpb = (block + warp - 1) / warp;
  int n = (p->maxThreadsPerMultiProcessor / warp) / wpb;
  if (p->maxBlocksPerMultiProcessor > 0) n = imin(n, p->maxBlocksPerMultiProcessor);
  int regs = fa[CU_FUNC_ATTRIBUTE_NUM_REGS];
  if (regs > 0 && p->regsPerMultiprocessor > 0) {
    long per_warp = ((long)regs * warp + 255) / 256 * 256;
    long per_block = per_warp * wpb;
    if (p->regsPerBlock > 0 && per_block > p->regsPerBlock) return 0;
    n = imin(n, (int)(p->regsPerMultiprocessor / per_block));
  }
  size_t smem = (size_t)(uint32_t)fa[CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES] + dyn;
  if (smem > 0) {
    size_t optin = p->sharedMemPerBlockOptin ? p->sharedMemPerBlockOptin : p->sharedMemPerBlock;
    if (smem > optin) return 0;
    size_t per_block = smem + p->reservedSharedMemPerBlock;
    n = imin(n, (int)(p->sharedMemPerMultiprocessor / per_block));
  }
  return n < 0 ? 0 : n;
}

/* The function's attributes and its device's properties, for occupancy. */
static CUresult occupancy_inputs(rgpu_client *c, CUfunction func, struct CUfunc_st **f,
                                 const int32_t **fa, rgpu_rt_device **d) {
  CUresult r = rgpu_drv_resolve_func(c, func, -1, f);
  if (r != CUDA_SUCCESS) return r;
  if ((r = rgpu_drv_func_attrs(c, *f, fa)) != CUDA_SUCCESS) return r;
  cudaError_t e = rgpu_rt_device_get(c, (*f)->module->device, d);
  return e == cudaSuccess ? CUDA_SUCCESS : rgpu_drv_from_rt(e);
}

static CUresult max_active_blocks(int *numBlocks, CUfunction func, int blockSize, size_t dyn,
                                  unsigned flags) {
  if (flags & ~(unsigned)CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE) return CUDA_ERROR_INVALID_VALUE;
  RGPU_DRV_BEGIN();
  CUresult r;
  if (!numBlocks) RGPU_DRV_RET(CUDA_ERROR_INVALID_VALUE);
  struct CUfunc_st *f;
  const int32_t *fa;
  rgpu_rt_device *d;
  r = occupancy_inputs(c, func, &f, &fa, &d);
  if (r == CUDA_SUCCESS) *numBlocks = occupancy_blocks(&d->prop, fa, blockSize, dyn);
  RGPU_DRV_RET(r);
}

RGPU_DRV CUresult rgpu_drv_cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func,
                                                              int blockSize,
                                                              size_t dynamicSMemSize) {
  return max_active_blocks(numBlocks, func, blockSize, dynamicSMemSize, 0);
}

RGPU_DRV CUresult rgpu_drv_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks,
                                                                       CUfunction func,
                                                                       int blockSize,
                                                                       size_t dynamicSMemSize,
                                                                       unsigned int flags) {
  return max_active_blocks(numBlocks, func, blockSize, dynamicSMemSize, flags);
}

/* cuOccupancyMaxActiveClusters / cuOccupancyMaxPotentialClusterSize: the
 * server driver's answer for the function on the device of the config's
 * stream, else of the current context (CUDA's rule; a CUfunction of
 * another device's module is CUDA_ERROR_INVALID_HANDLE, as for a launch).
 * Of the launch attributes only the cluster dimension and scheduling
 * policy change the answer, so only they are sent; the stream itself is
 * not (the server uses that device's context). */
static CUresult cluster_occupancy(int *out, CUfunction func, const CUlaunchConfig *config,
                                  uint32_t what) {
  RGPU_DRV_BEGIN();
  CUresult r;
  if (!out || !config || (config->numAttrs && !config->attrs))
    RGPU_DRV_RET(CUDA_ERROR_INVALID_VALUE);
  int dev = -1;
  if (config->hStream) {
    uint64_t wire;
    cudaError_t e = rgpu_rt_stream_resolve(c, (cudaStream_t)config->hStream, 0, &wire, &dev);
    if (e != cudaSuccess) RGPU_DRV_RET(rgpu_drv_from_rt(e));
  }
  struct CUfunc_st *f;
  if ((r = rgpu_drv_resolve_func(c, func, dev, &f)) != CUDA_SUCCESS) RGPU_DRV_RET(r);
  if (dev >= 0 && f->module->device != dev) RGPU_DRV_RET(CUDA_ERROR_INVALID_HANDLE);
  dev = f->module->device;
  uint32_t args[RGPU_DQ_CFG_COUNT] = {
      [RGPU_DQ_CFG_GRID_X] = config->gridDimX,   [RGPU_DQ_CFG_GRID_Y] = config->gridDimY,
      [RGPU_DQ_CFG_GRID_Z] = config->gridDimZ,   [RGPU_DQ_CFG_BLOCK_X] = config->blockDimX,
      [RGPU_DQ_CFG_BLOCK_Y] = config->blockDimY, [RGPU_DQ_CFG_BLOCK_Z] = config->blockDimZ,
      [RGPU_DQ_CFG_SHARED_BYTES] = config->sharedMemBytes};
  for (unsigned i = 0; i < config->numAttrs; i++) {
    const CUlaunchAttribute *a = &config->attrs[i];
    if (a->id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      args[RGPU_DQ_CFG_CLUSTER_X] = a->value.clusterDim.x;
      args[RGPU_DQ_CFG_CLUSTER_Y] = a->value.clusterDim.y;
      args[RGPU_DQ_CFG_CLUSTER_Z] = a->value.clusterDim.z;
    } else if (a->id == CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE) {
      args[RGPU_DQ_CFG_POLICY] = (uint32_t)a->value.clusterSchedulingPolicyPreference;
    }
  }
  rgpu_msg_device_query_req q = {.what = what, .module_id = f->module->id, .func_index = f->index,
                                 .args = {args, RGPU_DQ_CFG_COUNT}};
  rgpu_buf pay;
  rgpu_buf_init(&pay);
  rgpu_client_reply rr = {.payload = &pay}; /* rep points into pay */
  rgpu_msg_device_query_rep rep;
  memset(&rep, 0, sizeof rep);
  rgpu_status rc = rgpu_call_device_query(c, dev, 0, &q, &rep, &rr);
  if (rc == 0 && rep.values.count != 1) rc = CUDA_ERROR_UNKNOWN; /* a malformed answer */
  if (rc == 0) {
    uint64_t v = rgpu_array_u64(&rep.values, 0);
    *out = v > INT32_MAX ? INT32_MAX : (int)v;
  }
  rgpu_buf_free(&pay);
  RGPU_DRV_RET(rc ? rgpu_drv_reply_ret(c, rc) : CUDA_SUCCESS);
}

RGPU_DRV CUresult rgpu_drv_cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func,
                                                        const CUlaunchConfig *config) {
  return cluster_occupancy(numClusters, func, config, RGPU_DQ_MAX_ACTIVE_CLUSTERS);
}

RGPU_DRV CUresult rgpu_drv_cuOccupancyMaxPotentialClusterSize(int *clusterSize, CUfunction func,
                                                              const CUlaunchConfig *config) {
  return cluster_occupancy(clusterSize, func, config, RGPU_DQ_MAX_CLUSTER_SIZE);
}

/* CUDA's search: every block size from the largest allowed down, in warp
 * steps, keeping the one with the most resident threads per
 * multiprocessor (the larger block on a tie); stops once nothing smaller
 * can do better. */
static CUresult max_potential_block(int *minGridSize, int *blockSize, CUfunction func,
                                    CUoccupancyB2DSize b2d, size_t dyn, int limit, unsigned flags) {
  if (flags & ~(unsigned)CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE) return CUDA_ERROR_INVALID_VALUE;
  RGPU_DRV_BEGIN();
  CUresult r;
  if (!minGridSize || !blockSize || limit < 0) RGPU_DRV_RET(CUDA_ERROR_INVALID_VALUE);
  struct CUfunc_st *f;
  const int32_t *fa;
  rgpu_rt_device *d;
  r = occupancy_inputs(c, func, &f, &fa, &d);
  if (r != CUDA_SUCCESS) RGPU_DRV_RET(r);
  const struct cudaDeviceProp *p = &d->prop;
  int warp = p->warpSize > 0 ? p->warpSize : 32;
  int max_block = p->maxThreadsPerBlock;
  if (fa[CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK] > 0)
    max_block = imin(max_block, fa[CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK]);
  if (limit > 0) max_block = imin(max_block, limit);
  int best_block = 0, best_blocks = 0;
  long best_threads = 0;
  int start = (max_block + warp - 1) / warp * warp;
  for (int b = start; b > 0; b -= warp) {
    int bs = imin(b, max_block);
    size_t smem = b2d ? b2d(bs) : dyn;
    int n = occupancy_blocks(p, fa, bs, smem);
    long threads = (long)n * bs;
    if (threads > best_threads) {
      best_threads = threads;
      best_block = bs;
      best_blocks = n;
    }
    /* The full multiprocessor is as good as it gets. */
    if (best_threads >= p->maxThreadsPerMultiProcessor) break;
  }
  *blockSize = best_block;
  *minGridSize = best_blocks * p->multiProcessorCount;
  RGPU_DRV_RET(CUDA_SUCCESS);
}

RGPU_DRV CUresult rgpu_drv_cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize,
                                                   CUfunction func,
                                                   CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                   size_t dynamicSMemSize, int blockSizeLimit) {
  return max_potential_block(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
                             dynamicSMemSize, blockSizeLimit, 0);
}

RGPU_DRV CUresult rgpu_drv_cuOccupancyMaxPotentialBlockSizeWithFlags(
    int *minGridSize, int *blockSize, CUfunction func, CUoccupancyB2DSize blockSizeToDynamicSMemSize,
    size_t dynamicSMemSize, int blockSizeLimit, unsigned int flags) {
  return max_potential_block(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
                             dynamicSMemSize, blockSizeLimit, flags);
}

/* ---- launch ------------------------------------------------------------- */

/* cudart's launch check (rgpu_cudart_register.c check_config): CUDA 13
 * answers CUDA_ERROR_INVALID_VALUE for every configuration error. */
static CUresult check_config(const struct cudaDeviceProp *p, const struct CUfunc_st *f, dim3 g,
                             dim3 b, size_t shmem) {
  if (g.x == 0 || g.y == 0 || g.z == 0 || b.x == 0 || b.y == 0 || b.z == 0)
    return CUDA_ERROR_INVALID_VALUE;
  uint64_t threads = (uint64_t)b.x * b.y * b.z;
  if (threads > (uint64_t)p->maxThreadsPerBlock || b.x > (unsigned)p->maxThreadsDim[0] ||
      b.y > (unsigned)p->maxThreadsDim[1] || b.z > (unsigned)p->maxThreadsDim[2])
    return CUDA_ERROR_INVALID_VALUE;
  if (g.x > (unsigned)p->maxGridSize[0] || g.y > (unsigned)p->maxGridSize[1] ||
      g.z > (unsigned)p->maxGridSize[2])
    return CUDA_ERROR_INVALID_VALUE;
  size_t limit = p->sharedMemPerBlock;
  int set = __atomic_load_n(&f->max_dyn_shmem, __ATOMIC_RELAXED);
  if (set >= 0 && (size_t)set > limit) limit = (size_t)set;
  if (p->sharedMemPerBlockOptin && limit > p->sharedMemPerBlockOptin) limit = p->sharedMemPerBlockOptin;
  if (shmem > limit) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

/* The parameters of a launch into buf (cap bytes): from kernelParams
 * through the layout, or the program's own packed buffer from `extra`
 * (CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE / _END).  Returns the bytes, or
 * -1 for CUDA_ERROR_INVALID_VALUE (both or neither given for a kernel with
 * parameters, an unknown key, a buffer shorter than the layout). */
static long pack_launch_params(const rgpu_param_layout *l, void **kernelParams, void **extra,
                               uint8_t *buf, size_t cap) {
  if (kernelParams && extra) return -1;
  if (extra) {
    const void *ptr = NULL;
    const size_t *size = NULL;
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
        ptr = extra[i + 1];
      else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
        size = extra[i + 1];
      else
        return -1;
    }
    if (l->total == 0) return 0;
    if (!ptr || !size || *size < l->total || l->total > cap) return -1;
    memcpy(buf, ptr, l->total);
    return (long)l->total;
  }
  if (!kernelParams) return l->nparams ? -1 : 0;
  return rgpu_cudart_pack_params(l, kernelParams, buf, cap);
}

static CUresult check_cooperative(rgpu_client *c, const struct CUfunc_st *f, const rgpu_rt_op *op,
                                  const rgpu_rt_device *d) {
  if (CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH >= d->nattrs ||
      !d->attrs[CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH]) {
    static int logged;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      RGPU_WARN("cuLaunchCooperativeKernel: the server's device does not offer cooperative "
                "launches: CUDA_ERROR_NOT_SUPPORTED");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  uint64_t threads = (uint64_t)op->launch.block.x * op->launch.block.y * op->launch.block.z;
  uint64_t blocks = (uint64_t)op->launch.grid.x * op->launch.grid.y * op->launch.grid.z;
  rgpu_msg_occupancy_req q = {.module_id = f->module->id, .func_index = f->index,
                              .block_size = (int32_t)threads, .dyn_smem = op->launch.shmem};
  rgpu_msg_occupancy_rep rep = {0};
  rgpu_status rc = rgpu_call_occupancy(c, op->device, 0, &q, &rep, NULL);
  int per_sm;
  if (rc == CUDA_ERROR_NOT_SUPPORTED) {
    const int32_t *fa;
    CUresult r = rgpu_drv_func_attrs(c, (struct CUfunc_st *)f, &fa);
    if (r != CUDA_SUCCESS) return r;
    per_sm = occupancy_blocks(&d->prop, fa, (int)threads, op->launch.shmem);
  } else if (rc) {
    return rgpu_drv_reply_ret(c, rc);
  } else {
    per_sm = rep.num_blocks < 0 ? 0 : rep.num_blocks;
  }
  if (blocks > (uint64_t)per_sm * (uint64_t)d->prop.multiProcessorCount)
    return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
  return CUDA_SUCCESS;
}

static CUresult check_cluster(const rgpu_rt_device *d) {
  if (CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH >= d->nattrs || !d->attrs[CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH]) {
    static int logged;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      RGPU_WARN("cuLaunchKernelEx: the server's device does not offer thread block clusters: "
                "CUDA_ERROR_NOT_SUPPORTED");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

typedef rgpu_drv_launch_cfg launch_cfg;

CUresult rgpu_drv_launch_prepare(rgpu_client *c, CUfunction func, const rgpu_drv_launch_cfg *cfg,
                                 void **kernelParams, void **extra, uint8_t *stackbuf,
                                 size_t stack_cap, uint8_t **heap, rgpu_rt_op *op) {
  *heap = NULL;
  struct CUfunc_st *f = NULL;
  CUresult r = rgpu_drv_resolve_func(c, func, -1, &f);
  if (r != CUDA_SUCCESS) return r;
  int dev = f->module->device;
  rgpu_rt_device *d;
  cudaError_t e = rgpu_rt_device_get(c, dev, &d);
  if (e != cudaSuccess) return rgpu_drv_from_rt(e);
  if ((r = check_config(&d->prop, f, cfg->grid, cfg->block, cfg->shmem)) != CUDA_SUCCESS) return r;
  uint64_t wire;
  int sdev;
  e = rgpu_rt_stream_resolve(c, (cudaStream_t)cfg->stream, cfg->per_thread, &wire, &sdev);
  if (e != cudaSuccess) return rgpu_drv_from_rt(e);
  /* A stream of another device's context than the function's module. */
  if (sdev != dev) return CUDA_ERROR_INVALID_HANDLE;

  uint8_t *buf = f->layout.total <= stack_cap ? stackbuf : malloc(f->layout.total);
  if (!buf) return CUDA_ERROR_OUT_OF_MEMORY;
  if (buf != stackbuf) *heap = buf;
  long packed = pack_launch_params(&f->layout, kernelParams, extra, buf,
                                   buf == stackbuf ? stack_cap : f->layout.total);
  if (packed < 0) return CUDA_ERROR_INVALID_VALUE;
  *op = (rgpu_rt_op){.kind = RGPU_RT_OP_LAUNCH, .stream = wire, .device = dev};
  op->launch.kernel = NULL; /* no host stub: graph nodes report a NULL func */
  op->launch.module_id = f->module->id;
  op->launch.func_index = f->index;
  op->launch.grid = cfg->grid;
  op->launch.block = cfg->block;
  op->launch.shmem = cfg->shmem;
  op->launch.params = buf;
  op->launch.plen = (size_t)packed;
  op->launch.layout = &f->layout;
  return CUDA_SUCCESS;
}

/* Every driver launch: prepares the op, checks what a cooperative or
 * clustered launch needs, and submits.  Runs inside enter/end. */
static CUresult launch_common(rgpu_client *c, CUfunction func, const launch_cfg *cfg,
                              void **kernelParams, void **extra) {
  uint8_t stackbuf[4096];
  uint8_t *heap = NULL;
  rgpu_rt_op op;
  CUresult r = rgpu_drv_launch_prepare(c, func, cfg, kernelParams, extra, stackbuf,
                                       sizeof stackbuf, &heap, &op);
  int has_cluster = cfg->cluster[0] > 1 || cfg->cluster[1] > 1 || cfg->cluster[2] > 1;
  if (r == CUDA_SUCCESS && (cfg->cooperative || has_cluster)) {
    struct CUfunc_st *f = NULL;
    rgpu_rt_device *d = NULL;
    cudaError_t e = rgpu_rt_device_get(c, op.device, &d);
    r = e == cudaSuccess ? rgpu_drv_resolve_func(c, func, -1, &f) : rgpu_drv_from_rt(e);
    if (r != CUDA_SUCCESS) {
      /* nothing more to check */
    } else if (rgpu_rt_graph_is_capturing(op.stream)) {
      /* A graph kernel node here has no cooperative or cluster field: the
       * capture is invalidated, as for any call it cannot take. */
      e = rgpu_rt_graph_check_sync(op.stream);
      r = e == cudaSuccess ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : rgpu_drv_from_rt(e);
    } else {
      if (has_cluster) r = check_cluster(d);
      if (r == CUDA_SUCCESS && cfg->cooperative) r = check_cooperative(c, f, &op, d);
    }
    op.launch.cooperative = cfg->cooperative;
    if (has_cluster)
      for (int i = 0; i < 3; i++) op.launch.cluster[i] = cfg->cluster[i] ? cfg->cluster[i] : 1;
  }
  if (r == CUDA_SUCCESS) {
    cudaError_t e = rgpu_rt_submit(c, &op);
    if (e != cudaSuccess) r = rgpu_drv_from_rt(e);
  }
  free(heap);
  return r;
}

static CUresult launch_entry(CUfunction f, const launch_cfg *cfg, void **kernelParams, void **extra) {
  RGPU_DRV_BEGIN();
  CUresult r;
  /* A launch runs in the current context: its device is the runtime's
   * current one, which the NULL stream names. */
  if ((r = rgpu_drv_ctx_enter(NULL)) != CUDA_SUCCESS) RGPU_DRV_RET(r);
  RGPU_DRV_RET(launch_common(c, f, cfg, kernelParams, extra));
}

static launch_cfg plain_cfg(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                            unsigned bz, unsigned shmem, CUstream s, int per_thread) {
  launch_cfg cfg = {.grid = {gx, gy, gz}, .block = {bx, by, bz}, .shmem = shmem, .stream = s,
                    .per_thread = per_thread};
  return cfg;
}

RGPU_DRV CUresult rgpu_drv_cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                 unsigned int gridDimZ, unsigned int blockDimX,
                                 unsigned int blockDimY, unsigned int blockDimZ,
                                 unsigned int sharedMemBytes, CUstream hStream,
                                 void **kernelParams, void **extra) {
  launch_cfg cfg = plain_cfg(gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                             sharedMemBytes, hStream, 0);
  return launch_entry(f, &cfg, kernelParams, extra);
}

RGPU_DRV CUresult rgpu_drv_cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                      unsigned int gridDimZ, unsigned int blockDimX,
                                      unsigned int blockDimY, unsigned int blockDimZ,
                                      unsigned int sharedMemBytes, CUstream hStream,
                                      void **kernelParams, void **extra);
RGPU_DRV CUresult rgpu_drv_cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                      unsigned int gridDimZ, unsigned int blockDimX,
                                      unsigned int blockDimY, unsigned int blockDimZ,
                                      unsigned int sharedMemBytes, CUstream hStream,
                                      void **kernelParams, void **extra) {
  launch_cfg cfg = plain_cfg(gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                             sharedMemBytes, hStream, 1);
  return launch_entry(f, &cfg, kernelParams, extra);
}

RGPU_DRV CUresult rgpu_drv_cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                                            unsigned int gridDimY, unsigned int gridDimZ,
                                            unsigned int blockDimX, unsigned int blockDimY,
                                            unsigned int blockDimZ, unsigned int sharedMemBytes,
                                            CUstream hStream, void **kernelParams) {
  launch_cfg cfg = plain_cfg(gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                             sharedMemBytes, hStream, 0);
  cfg.cooperative = 1;
  return launch_entry(f, &cfg, kernelParams, NULL);
}

RGPU_DRV CUresult rgpu_drv_cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                                 unsigned int gridDimY, unsigned int gridDimZ,
                                                 unsigned int blockDimX, unsigned int blockDimY,
                                                 unsigned int blockDimZ,
                                                 unsigned int sharedMemBytes, CUstream hStream,
                                                 void **kernelParams);
RGPU_DRV CUresult rgpu_drv_cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                                 unsigned int gridDimY, unsigned int gridDimZ,
                                                 unsigned int blockDimX, unsigned int blockDimY,
                                                 unsigned int blockDimZ,
                                                 unsigned int sharedMemBytes, CUstream hStream,
                                                 void **kernelParams) {
  launch_cfg cfg = plain_cfg(gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                             sharedMemBytes, hStream, 1);
  cfg.cooperative = 1;
  return launch_entry(f, &cfg, kernelParams, NULL);
}

/* cuLaunchKernelEx's attributes, as cudart's cudaLaunchKernelEx reads
 * them: cooperative and cluster dimension act; hints that change no
 * result are accepted and ignored; what rgpu lacks (programmatic and
 * completion events, device-updatable nodes) is CUDA_ERROR_NOT_SUPPORTED,
 * logged once. */
static CUresult read_launch_attrs(const CUlaunchConfig *config, launch_cfg *cfg) {
  if (config->numAttrs && !config->attrs) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < config->numAttrs; i++) {
    const CUlaunchAttribute *a = &config->attrs[i];
    switch (a->id) {
    case CU_LAUNCH_ATTRIBUTE_IGNORE:
    case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
    case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
    case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
    case CU_LAUNCH_ATTRIBUTE_PRIORITY:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
    case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
    case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
      break;
    case CU_LAUNCH_ATTRIBUTE_COOPERATIVE: cfg->cooperative = a->value.cooperative != 0; break;
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
      cfg->cluster[0] = a->value.clusterDim.x;
      cfg->cluster[1] = a->value.clusterDim.y;
      cfg->cluster[2] = a->value.clusterDim.z;
      break;
    default: {
      static int logged;
      if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
        RGPU_WARN("cuLaunchKernelEx: launch attribute %d is not supported by rgpu", (int)a->id);
      return CUDA_ERROR_NOT_SUPPORTED;
    }
    }
  }
  return CUDA_SUCCESS;
}

static CUresult launch_kernel_ex(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                 void **extra, int per_thread) {
  if (!config) return CUDA_ERROR_INVALID_VALUE;
  launch_cfg cfg = plain_cfg(config->gridDimX, config->gridDimY, config->gridDimZ,
                             config->blockDimX, config->blockDimY, config->blockDimZ,
                             config->sharedMemBytes, config->hStream, per_thread);
  CUresult r = read_launch_attrs(config, &cfg);
  if (r != CUDA_SUCCESS) return r;
  return launch_entry(f, &cfg, kernelParams, extra);
}

RGPU_DRV CUresult rgpu_drv_cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                   void **extra) {
  return launch_kernel_ex(config, f, kernelParams, extra, 0);
}

RGPU_DRV CUresult rgpu_drv_cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                        void **kernelParams, void **extra);
RGPU_DRV CUresult rgpu_drv_cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                        void **kernelParams, void **extra) {
  return launch_kernel_ex(config, f, kernelParams, extra, 1);
}
