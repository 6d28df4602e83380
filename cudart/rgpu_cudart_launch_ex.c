/* Cooperative launches and cudaLaunchKernelEx (cudaLaunchCooperativeKernel,
 * cudaLaunchKernelExC and their _ptsz twins).
 *
 * Both build the ordinary launch op (rgpu_rt_launch_prepare: the same
 * configuration checks and parameter packing) and differ only in what they
 * accept around it:
 * - cooperative: the device must offer it (the server's
 *   CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH; softgpu runs a grid's blocks one
 *   after another per worker thread, so it offers no grid-wide sync and
 *   reports 0: cudaErrorNotSupported here, before anything is sent), and
 *   the grid must be co-resident (the driver's occupancy, asked once per
 *   configuration and cached, x multiprocessors, else
 *   cudaErrorCooperativeLaunchTooLarge at the call, as on a local GPU).  The op goes out as
 *   LAUNCH_COOPERATIVE, queued.  A capturing stream refuses it (a graph
 *   kernel node here has no cooperative flag): the capture is invalidated.
 * - cudaLaunchKernelEx's attributes: cooperative as above; hints that change
 *   no result (priority, access policy window, synchronization policy,
 *   memory sync domains, programmatic stream serialization, which only
 *   allows overlap, and the carveout) are accepted and ignored; 1x1x1
 *   clusters are plain launches; anything that needs what rgpu lacks
 *   (larger clusters, programmatic or completion events, device-updatable
 *   nodes) is cudaErrorNotSupported, logged once. */
#include <stdint.h>
#include <stdlib.h>

#include "rgpu_cudart.h"
#include "rgpu_cudart_graph.h"
#include "rgpu_cudart_op.h"
#include "rgpu_log.h"

static cudaError_t check_cooperative(rgpu_client *c, rgpu_rt_func *f, const rgpu_rt_op *op) {
  rgpu_rt_device *d;
  cudaError_t e = rgpu_rt_device_get(c, op->device, &d);
  if (e != cudaSuccess) return e;
  if (CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH >= d->nattrs ||
      !d->attrs[CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH]) {
    static int logged;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      RGPU_WARN("cooperative launch: the server's device does not offer it "
                "(cooperativeLaunch is 0): cudaErrorNotSupported");
    return cudaErrorNotSupported;
  }
  uint64_t threads = (uint64_t)op->launch.block.x * op->launch.block.y * op->launch.block.z;
  uint64_t blocks = (uint64_t)op->launch.grid.x * op->launch.grid.y * op->launch.grid.z;
  int per_sm = 0;
  e = rgpu_rt_occupancy(c, f, op->device, (int)threads, op->launch.shmem, 0, &per_sm);
  if (e != cudaSuccess) return e;
  if (blocks > (uint64_t)per_sm * (uint64_t)d->prop.multiProcessorCount)
    return cudaErrorCooperativeLaunchTooLarge;
  return cudaSuccess;
}

static cudaError_t launch_ex(rgpu_rt_func *f, dim3 grid, dim3 block, void **args, size_t shmem,
                             cudaStream_t stream, int per_thread, int cooperative) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  uint8_t stackbuf[4096];
  uint8_t *heap = NULL;
  rgpu_rt_op op;
  e = rgpu_rt_launch_prepare(c, f, grid, block, args, shmem, stream, per_thread, stackbuf,
                             sizeof stackbuf, &heap, &op);
  if (e == cudaSuccess && cooperative) {
    if (rgpu_rt_graph_is_capturing(op.stream)) {
      /* Invalidates the capture, as for any call it cannot take. */
      e = rgpu_rt_graph_check_sync(op.stream);
      if (e == cudaSuccess) e = cudaErrorStreamCaptureUnsupported;
    } else {
      e = check_cooperative(c, f, &op);
    }
    op.launch.cooperative = 1;
  }
  if (e == cudaSuccess)
    e = rgpu_rt_submit(c, &op);
  else
    e = rgpu_rt_ret(e);
  free(heap);
  return e;
}

static cudaError_t launch_by_stub(const void *func, dim3 grid, dim3 block, void **args,
                                  size_t shmem, cudaStream_t stream, int per_thread,
                                  int cooperative) {
  rgpu_rt_func *f = rgpu_rt_func_by_stub(func);
  if (!f) {
    /* CUDA 13's answer for a pointer that is no registered kernel
     * (cudaLaunchKernel's, measured on an H200). */
    rgpu_rt_count_call();
    return rgpu_rt_ret(cudaErrorInvalidResourceHandle);
  }
  return launch_ex(f, grid, block, args, shmem, stream, per_thread, cooperative);
}

RGPU_API cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 gridDim, dim3 blockDim,
                                                 void **args, size_t sharedMem,
                                                 cudaStream_t stream) {
  return launch_by_stub(func, gridDim, blockDim, args, sharedMem, stream, 0, 1);
}
RGPU_API cudaError_t cudaLaunchCooperativeKernel_ptsz(const void *func, dim3 gridDim,
                                                      dim3 blockDim, void **args,
                                                      size_t sharedMem, cudaStream_t stream);
RGPU_API cudaError_t cudaLaunchCooperativeKernel_ptsz(const void *func, dim3 gridDim,
                                                      dim3 blockDim, void **args,
                                                      size_t sharedMem, cudaStream_t stream) {
  return launch_by_stub(func, gridDim, blockDim, args, sharedMem, stream, 1, 1);
}

/* The attributes of a cudaLaunchKernelEx: *cooperative, or an error. */
static cudaError_t read_launch_attrs(const cudaLaunchConfig_t *config, int *cooperative) {
  *cooperative = 0;
  if (config->numAttrs && !config->attrs) return cudaErrorInvalidValue;
  for (unsigned i = 0; i < config->numAttrs; i++) {
    const cudaLaunchAttribute *a = &config->attrs[i];
    switch (a->id) {
    case cudaLaunchAttributeIgnore:
    case cudaLaunchAttributeAccessPolicyWindow:
    case cudaLaunchAttributeSynchronizationPolicy:
    case cudaLaunchAttributeProgrammaticStreamSerialization:
    case cudaLaunchAttributePriority:
    case cudaLaunchAttributeMemSyncDomainMap:
    case cudaLaunchAttributeMemSyncDomain:
    case cudaLaunchAttributePreferredSharedMemoryCarveout:
    case cudaLaunchAttributeClusterSchedulingPolicyPreference:
      break;
    case cudaLaunchAttributeCooperative: *cooperative = a->val.cooperative != 0; break;
    case cudaLaunchAttributeClusterDimension:
      if (a->val.clusterDim.x <= 1 && a->val.clusterDim.y <= 1 && a->val.clusterDim.z <= 1) break;
      __attribute__((fallthrough)); /* real clusters */
    default: {
      static int logged;
      if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
        RGPU_WARN("cudaLaunchKernelEx: launch attribute %d is not supported by rgpu", (int)a->id);
      return cudaErrorNotSupported;
    }
    }
  }
  return cudaSuccess;
}

static cudaError_t launch_kernel_ex(const cudaLaunchConfig_t *config, const void *func,
                                    void **args, int per_thread) {
  if (!config) {
    rgpu_rt_count_call();
    return rgpu_rt_ret(cudaErrorInvalidValue);
  }
  int cooperative;
  cudaError_t e = read_launch_attrs(config, &cooperative);
  if (e != cudaSuccess) {
    rgpu_rt_count_call();
    return rgpu_rt_ret(e);
  }
  return launch_by_stub(func, config->gridDim, config->blockDim, args, config->dynamicSmemBytes,
                        config->stream, per_thread, cooperative);
}

RGPU_API cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func,
                                         void **args) {
  return launch_kernel_ex(config, func, args, 0);
}
RGPU_API cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func,
                                              void **args);
RGPU_API cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func,
                                              void **args) {
  return launch_kernel_ex(config, func, args, 1);
}
