/* Contexts: the primary context of each device and explicit contexts, and
 * the per-thread context stack.
 *
 * rgpu's server keeps one context per device and session, so every
 * context of a device here is a view of that one server context: a
 * context's allocations, streams and modules are the device's, not
 * separated between contexts of the same device.  Making a context current
 * makes its device the runtime's current device (cudaSetDevice), so the
 * runtime code the driver reuses runs on it; a runtime call on a thread
 * with no context binds its device's primary context, as CUDA does. */
#include <stdlib.h>

#include "rgpu_drv_internal.h"
#include "rgpu_log.h"

static struct CUctx_st g_primary[RGPU_MAX_DEVICES];
static int g_retain[RGPU_MAX_DEVICES]; /* cuDevicePrimaryCtxRetain count */
static unsigned long long g_next_ctx_id = RGPU_MAX_DEVICES + 1;
static __thread rgpu_ctx_stack tl_stack;

/* Every explicit context ever created (they are never freed), so that a
 * handle is checked by address before it is read: a wrong pointer is
 * CUDA_ERROR_INVALID_CONTEXT, not a crash. */
static rgpu_mutex g_ctx_lock = RGPU_MUTEX_INITIALIZER;
static struct CUctx_st **g_ctxs;
static size_t g_nctxs, g_cap_ctxs;

static int ctx_known(CUcontext ctx) {
  if (ctx >= &g_primary[0] && ctx < &g_primary[RGPU_MAX_DEVICES]) return 1;
  int found = 0;
  rgpu_mutex_lock(&g_ctx_lock);
  for (size_t i = 0; i < g_nctxs && !found; i++) found = g_ctxs[i] == ctx;
  rgpu_mutex_unlock(&g_ctx_lock);
  return found;
}

static int ctx_register(struct CUctx_st *ctx) {
  rgpu_mutex_lock(&g_ctx_lock);
  if (g_nctxs == g_cap_ctxs) {
    size_t cap = g_cap_ctxs ? 2 * g_cap_ctxs : 16;
    struct CUctx_st **v = realloc(g_ctxs, cap * sizeof *v);
    if (!v) {
      rgpu_mutex_unlock(&g_ctx_lock);
      return -1;
    }
    g_ctxs = v;
    g_cap_ctxs = cap;
  }
  g_ctxs[g_nctxs++] = ctx;
  rgpu_mutex_unlock(&g_ctx_lock);
  return 0;
}

__attribute__((constructor)) static void primary_init(void) {
  for (int i = 0; i < RGPU_MAX_DEVICES; i++)
    g_primary[i] = (struct CUctx_st){.magic = RGPU_CTX_MAGIC, .device = i, .primary = 1,
                                     .id = (unsigned long long)i + 1};
}

CUcontext rgpu_drv_primary_ctx(int dev) {
  return dev >= 0 && dev < RGPU_MAX_DEVICES ? &g_primary[dev] : NULL;
}

CUcontext rgpu_drv_ctx_current(void) {
  CUcontext top = rgpu_ctx_stack_top(&tl_stack);
  if (top) return top;
  return rgpu_rt_thread_bound() ? rgpu_drv_primary_ctx(rgpu_rt_current_device()) : NULL;
}

CUresult rgpu_drv_ctx_check(CUcontext ctx) {
  if (!ctx || !ctx_known(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  return __atomic_load_n(&ctx->magic, __ATOMIC_ACQUIRE) == RGPU_CTX_MAGIC
             ? CUDA_SUCCESS
             : CUDA_ERROR_INVALID_CONTEXT;
}

/* A context becomes current: the runtime follows it. */
static void follow(CUcontext ctx) {
  if (ctx) rgpu_rt_set_current_device(ctx->device);
}

CUresult rgpu_drv_ctx_enter(int *dev) {
  if (!rgpu_drv_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  CUcontext ctx = rgpu_drv_ctx_current();
  if (rgpu_drv_ctx_check(ctx) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_CONTEXT;
  follow(ctx);
  if (dev) *dev = ctx->device;
  return CUDA_SUCCESS;
}

/* An explicit context argument, or the current one when ctx is NULL. */
static CUresult ctx_or_current(CUcontext ctx, CUcontext *out) {
  if (!rgpu_drv_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ctx) ctx = rgpu_drv_ctx_current();
  if (rgpu_drv_ctx_check(ctx) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_CONTEXT;
  *out = ctx;
  return CUDA_SUCCESS;
}

/* Checks a device ordinal (connects; counts the call). */
static CUresult check_device(CUdevice dev) {
  rgpu_client *c;
  CUresult r = rgpu_drv_enter_device(dev, &c);
  if (r != CUDA_SUCCESS) return r;
  if (dev >= RGPU_MAX_DEVICES) return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS;
}

/* Runs cudaDeviceReset / cudaDeviceSynchronize on dev, whatever the
 * runtime's current device is. */
static CUresult on_device(int dev, cudaError_t (*fn)(void)) {
  int saved = rgpu_rt_current_device();
  rgpu_rt_set_current_device(dev);
  CUresult r = RGPU_DRV_RT(fn());
  rgpu_rt_set_current_device(saved);
  return r;
}

/* ---- primary contexts ------------------------------------------------------ */

/* The primary context's flags: the runtime's device flags once it has
 * them (cudaSetDeviceFlags), else what cuDevicePrimaryCtxSetFlags set. */
static unsigned primary_flags(int dev) {
  unsigned mine = __atomic_load_n(&g_primary[dev].flags, __ATOMIC_ACQUIRE);
  rgpu_rt_device *d;
  rgpu_client *c = rgpu_rt_client_peek();
  if (c && rgpu_rt_device_get(c, dev, &d) == cudaSuccess)
    return __atomic_load_n(&d->flags, __ATOMIC_ACQUIRE) |
           (mine & (CU_CTX_COREDUMP_ENABLE | CU_CTX_USER_COREDUMP_ENABLE));
  return mine;
}

RGPU_DRV CUresult rgpu_drv_cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  CUresult r = check_device(dev);
  if (r != CUDA_SUCCESS) return r;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  __atomic_add_fetch(&g_retain[dev], 1, __ATOMIC_ACQ_REL);
  *pctx = &g_primary[dev];
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  CUresult r = check_device(dev);
  if (r != CUDA_SUCCESS) return r;
  int n = __atomic_load_n(&g_retain[dev], __ATOMIC_ACQUIRE);
  do {
    if (n <= 0) return CUDA_ERROR_INVALID_CONTEXT;
  } while (!__atomic_compare_exchange_n(&g_retain[dev], &n, n - 1, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE));
  /* The last release does not free the device's allocations on the
   * server (CUDA would destroy the context): the runtime of the same
   * process may still hold them. */
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuDevicePrimaryCtxRelease(CUdevice dev) {
  return rgpu_drv_cuDevicePrimaryCtxRelease_v2(dev);
}

RGPU_DRV CUresult rgpu_drv_cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags,
                                                      int *active) {
  CUresult r = check_device(dev);
  if (r != CUDA_SUCCESS) return r;
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  *flags = primary_flags(dev);
  *active = __atomic_load_n(&g_retain[dev], __ATOMIC_ACQUIRE) > 0 || rgpu_rt_device_used(dev);
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  CUresult r = check_device(dev);
  if (r != CUDA_SUCCESS) return r;
  const unsigned known = CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX |
                         CU_CTX_COREDUMP_ENABLE | CU_CTX_USER_COREDUMP_ENABLE |
                         CU_CTX_SYNC_MEMOPS;
  if (flags & ~known) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & CU_CTX_SCHED_MASK) == (CU_CTX_SCHED_SPIN | CU_CTX_SCHED_YIELD))
    return CUDA_ERROR_INVALID_VALUE;
  __atomic_store_n(&g_primary[dev].flags, flags, __ATOMIC_RELEASE);
  /* The runtime's device flags are the primary context's (cudaSetDeviceFlags
   * and cudaGetDeviceFlags see the same value; CU_CTX_* and cudaDevice*
   * share their bits). */
  rgpu_rt_device *d;
  rgpu_client *c = rgpu_rt_client_peek();
  if (c && rgpu_rt_device_get(c, dev, &d) == cudaSuccess)
    __atomic_store_n(&d->flags, flags & ~(unsigned)(CU_CTX_COREDUMP_ENABLE |
                                                    CU_CTX_USER_COREDUMP_ENABLE),
                     __ATOMIC_RELEASE);
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  return rgpu_drv_cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

RGPU_DRV CUresult rgpu_drv_cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  CUresult r = check_device(dev);
  if (r != CUDA_SUCCESS) return r;
  /* The device's server context is reset (cudaDeviceReset): everything
   * allocated on it, by the driver or the runtime, is gone. */
  r = on_device(dev, cudaDeviceReset);
  __atomic_store_n(&g_retain[dev], 0, __ATOMIC_RELEASE);
  return r;
}

RGPU_DRV CUresult rgpu_drv_cuDevicePrimaryCtxReset(CUdevice dev) {
  return rgpu_drv_cuDevicePrimaryCtxReset_v2(dev);
}

/* ---- explicit contexts ------------------------------------------------------ */

RGPU_DRV CUresult rgpu_drv_cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                          unsigned int flags, CUdevice dev) {
  CUresult r = check_device(dev);
  if (r != CUDA_SUCCESS) return r;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (ctxCreateParams &&
      (ctxCreateParams->numExecAffinityParams > 0 || ctxCreateParams->cigParams)) {
    static int logged;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      RGPU_WARN("cuCtxCreate: execution affinity and CIG parameters are not supported "
                "(CUDA_ERROR_NOT_SUPPORTED)");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  struct CUctx_st *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return CUDA_ERROR_OUT_OF_MEMORY;
  *ctx = (struct CUctx_st){.magic = RGPU_CTX_MAGIC, .device = dev, .primary = 0,
                           .flags = flags,
                           .id = __atomic_fetch_add(&g_next_ctx_id, 1, __ATOMIC_RELAXED)};
  /* A new context is current to the calling thread. */
  if (tl_stack.n >= RGPU_CTX_STACK_MAX || ctx_register(ctx)) {
    free(ctx);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  rgpu_ctx_stack_push(&tl_stack, ctx);
  follow(ctx);
  *pctx = ctx;
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray,
                                          int numParams, unsigned int flags, CUdevice dev) {
  CUctxCreateParams p = {.execAffinityParams = paramsArray, .numExecAffinityParams = numParams};
  return rgpu_drv_cuCtxCreate_v4(pctx, numParams > 0 ? &p : NULL, flags, dev);
}

RGPU_DRV CUresult rgpu_drv_cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
  return rgpu_drv_cuCtxCreate_v4(pctx, NULL, flags, dev);
}

RGPU_DRV CUresult rgpu_drv_cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev) {
  return rgpu_drv_cuCtxCreate_v4(pctx, NULL, flags, dev);
}

RGPU_DRV CUresult rgpu_drv_cuCtxDestroy_v2(CUcontext ctx) {
  rgpu_rt_count_call();
  if (!rgpu_drv_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (rgpu_drv_ctx_check(ctx) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_CONTEXT;
  /* The primary context is released, not destroyed. */
  if (ctx->primary) return CUDA_ERROR_INVALID_CONTEXT;
  /* Its work finishes first (the device's, as the server context is
   * shared). */
  CUresult r = on_device(ctx->device, cudaDeviceSynchronize);
  rgpu_ctx_stack_remove(&tl_stack, ctx);
  /* Kept, marked dead: other threads may still name it. */
  __atomic_store_n(&ctx->magic, RGPU_CTX_DEAD, __ATOMIC_RELEASE);
  CUcontext now = rgpu_drv_ctx_current();
  follow(now);
  return r;
}

RGPU_DRV CUresult rgpu_drv_cuCtxDestroy(CUcontext ctx) { return rgpu_drv_cuCtxDestroy_v2(ctx); }

/* ---- the context stack ------------------------------------------------------- */

RGPU_DRV CUresult rgpu_drv_cuCtxPushCurrent_v2(CUcontext ctx) {
  rgpu_rt_count_call();
  if (!rgpu_drv_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (rgpu_drv_ctx_check(ctx) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_CONTEXT;
  if (rgpu_ctx_stack_push(&tl_stack, ctx)) return CUDA_ERROR_OUT_OF_MEMORY;
  follow(ctx);
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuCtxPushCurrent(CUcontext ctx) { return rgpu_drv_cuCtxPushCurrent_v2(ctx); }

RGPU_DRV CUresult rgpu_drv_cuCtxPopCurrent_v2(CUcontext *pctx) {
  rgpu_rt_count_call();
  if (!rgpu_drv_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  CUcontext popped = rgpu_ctx_stack_pop(&tl_stack);
  if (!popped && rgpu_rt_thread_bound()) {
    /* The primary context the runtime bound is the bottom of the stack. */
    popped = rgpu_drv_primary_ctx(rgpu_rt_current_device());
    rgpu_rt_thread_set_bound(0);
  }
  if (!popped) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx) *pctx = popped;
  follow(rgpu_drv_ctx_current());
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuCtxPopCurrent(CUcontext *pctx) { return rgpu_drv_cuCtxPopCurrent_v2(pctx); }

RGPU_DRV CUresult rgpu_drv_cuCtxSetCurrent(CUcontext ctx) {
  rgpu_rt_count_call();
  if (!rgpu_drv_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (ctx && rgpu_drv_ctx_check(ctx) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_CONTEXT;
  if (tl_stack.n == 0 && rgpu_rt_thread_bound()) {
    /* The runtime-bound primary context is the top being replaced. */
    rgpu_rt_thread_set_bound(0);
    if (ctx) rgpu_ctx_stack_push(&tl_stack, ctx);
  } else {
    rgpu_ctx_stack_set_top(&tl_stack, ctx);
  }
  follow(rgpu_drv_ctx_current());
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuCtxGetCurrent(CUcontext *pctx) {
  rgpu_rt_count_call();
  if (!rgpu_drv_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  *pctx = rgpu_drv_ctx_current();
  return CUDA_SUCCESS;
}

/* ---- queries and settings of the current context ------------------------------- */

RGPU_DRV CUresult rgpu_drv_cuCtxGetDevice(CUdevice *device) {
  rgpu_rt_count_call();
  int dev;
  CUresult r = rgpu_drv_ctx_enter(&dev);
  if (r != CUDA_SUCCESS) return r;
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  *device = dev;
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx) {
  rgpu_rt_count_call();
  CUresult r = ctx_or_current(ctx, &ctx);
  if (r != CUDA_SUCCESS) return r;
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  *device = ctx->device;
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuCtxSynchronize(void) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaDeviceSynchronize());
}

RGPU_DRV CUresult rgpu_drv_cuCtxSynchronize_v2(CUcontext ctx) {
  CUresult r = ctx_or_current(ctx, &ctx);
  if (r != CUDA_SUCCESS) {
    rgpu_rt_count_call();
    return r;
  }
  return on_device(ctx->device, cudaDeviceSynchronize);
}

RGPU_DRV CUresult rgpu_drv_cuCtxGetApiVersion(CUcontext ctx, unsigned int *version) {
  rgpu_rt_count_call();
  CUresult r = ctx_or_current(ctx, &ctx);
  if (r != CUDA_SUCCESS) return r;
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  /* Every context since CUDA 3.2 is of the 3.2 API (NVIDIA answers 3020). */
  *version = 3020;
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuCtxGetId(CUcontext ctx, unsigned long long *ctxId) {
  rgpu_rt_count_call();
  CUresult r = ctx_or_current(ctx, &ctx);
  if (r != CUDA_SUCCESS) return r;
  if (!ctxId) return CUDA_ERROR_INVALID_VALUE;
  *ctxId = ctx->id;
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuCtxGetFlags(unsigned int *flags) {
  rgpu_rt_count_call();
  CUcontext ctx;
  CUresult r = ctx_or_current(NULL, &ctx);
  if (r != CUDA_SUCCESS) return r;
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  *flags = __atomic_load_n(&ctx->flags, __ATOMIC_ACQUIRE);
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuCtxSetFlags(unsigned int flags) {
  rgpu_rt_count_call();
  CUcontext ctx;
  CUresult r = ctx_or_current(NULL, &ctx);
  if (r != CUDA_SUCCESS) return r;
  /* Only the scheduling and coredump flags may change after creation. */
  const unsigned known = CU_CTX_SCHED_MASK | CU_CTX_COREDUMP_ENABLE |
                         CU_CTX_USER_COREDUMP_ENABLE | CU_CTX_SYNC_MEMOPS;
  if (flags & ~known) return CUDA_ERROR_INVALID_VALUE;
  __atomic_store_n(&ctx->flags, flags, __ATOMIC_RELEASE);
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority) {
  RGPU_DRV_ENTER_CTX();
  int least = 0, greatest = 0;
  CUresult r = RGPU_DRV_RT(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  if (r == CUDA_SUCCESS) {
    if (leastPriority) *leastPriority = least;
    if (greatestPriority) *greatestPriority = greatest;
  }
  return r;
}

RGPU_DRV CUresult rgpu_drv_cuCtxGetLimit(size_t *pvalue, CUlimit limit) {
  RGPU_DRV_ENTER_CTX();
  /* CUlimit and cudaLimit share their values. */
  return RGPU_DRV_RT(cudaDeviceGetLimit(pvalue, (enum cudaLimit)limit));
}

RGPU_DRV CUresult rgpu_drv_cuCtxSetLimit(CUlimit limit, size_t value) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaDeviceSetLimit((enum cudaLimit)limit, value));
}

/* The runtime's round trip (DEVICE_QUERY, rgpu_cudart_device.c says why
 * it is not queued) on the current context's device. */
RGPU_DRV CUresult rgpu_drv_cuCtxResetPersistingL2Cache(void) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaCtxResetPersistingL2Cache());
}

RGPU_DRV CUresult rgpu_drv_cuCtxGetCacheConfig(CUfunc_cache *pconfig) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaDeviceGetCacheConfig((enum cudaFuncCache *)pconfig));
}

RGPU_DRV CUresult rgpu_drv_cuCtxSetCacheConfig(CUfunc_cache config) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaDeviceSetCacheConfig((enum cudaFuncCache)config));
}
