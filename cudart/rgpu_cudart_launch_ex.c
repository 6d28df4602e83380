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
 *   LAUNCH_EX, queued.  A capturing stream refuses it (a graph
 *   kernel node here has no cooperative flag): the capture is invalidated.
 * - cudaLaunchKernelEx's attributes: cooperative as above; a thread block
 *   cluster (cudaLaunchAttributeClusterDimension) where the device offers
 *   cluster launch (CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, else
 *   cudaErrorNotSupported; softgpu has none), sent as LAUNCH_EX for the
 *   server's cuLaunchKernelEx, whose driver checks the cluster's shape
 *   (its refusal is an asynchronous error); 1x1x1 clusters are plain
 *   launches.  Hints that change no result (priority, access policy window,
 *   synchronization policy, memory sync domains, programmatic stream
 *   serialization, which only allows overlap, preferred clusters, the
 *   carveout) are accepted and ignored; what rgpu lacks (programmatic or
 *   completion events, device-updatable nodes) is cudaErrorNotSupported,
 *   logged once. */
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

static cudaError_t check_cluster(rgpu_client *c, const rgpu_rt_op *op) {
  rgpu_rt_device *d;
  cudaError_t e = rgpu_rt_device_get(c, op->device, &d);
  if (e != cudaSuccess) return e;
  if (CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH >= d->nattrs || !d->attrs[CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH]) {
    static int logged;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      RGPU_WARN("thread block clusters: the server's device does not offer them "
                "(clusterLaunch is 0): cudaErrorNotSupported");
    return cudaErrorNotSupported;
  }
  return cudaSuccess;
}

static cudaError_t launch_ex(rgpu_rt_func *f, dim3 grid, dim3 block, void **args, size_t shmem,
                             cudaStream_t stream, int per_thread, int cooperative,
                             const unsigned cluster[3]) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  uint8_t stackbuf[4096];
  uint8_t *heap = NULL;
  rgpu_rt_op op;
  e = rgpu_rt_launch_prepare(c, f, grid, block, args, shmem, stream, per_thread, stackbuf,
                             sizeof stackbuf, &heap, &op);
  int has_cluster = cluster && (cluster[0] > 1 || cluster[1] > 1 || cluster[2] > 1);
  if (e == cudaSuccess && (cooperative || has_cluster)) {
    if (rgpu_rt_graph_is_capturing(op.stream)) {
      /* Invalidates the capture, as for any call it cannot take. */
      e = rgpu_rt_graph_check_sync(op.stream);
      if (e == cudaSuccess) e = cudaErrorStreamCaptureUnsupported;
    } else {
      if (has_cluster) e = check_cluster(c, &op);
      if (e == cudaSuccess && cooperative) e = check_cooperative(c, f, &op);
    }
    op.launch.cooperative = cooperative;
    if (has_cluster)
      for (int i = 0; i < 3; i++) op.launch.cluster[i] = cluster[i] ? cluster[i] : 1;
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
                                  int cooperative, const unsigned cluster[3]) {
  rgpu_rt_func *f = rgpu_rt_func_by_stub(func);
  if (!f && rgpu_rt_is_driver_function(func))
    return rgpu_rt_driver_launch(func, grid, block, args, shmem, stream, per_thread, cooperative,
                                 cluster);
  if (!f) {
    /* CUDA 13's answer for a pointer that is no registered kernel
     * (cudaLaunchKernel's, measured on an H200). */
    rgpu_rt_count_call();
    return rgpu_rt_ret(cudaErrorInvalidResourceHandle);
  }
  return launch_ex(f, grid, block, args, shmem, stream, per_thread, cooperative, cluster);
}

RGPU_API cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 gridDim, dim3 blockDim,
                                                 void **args, size_t sharedMem,
                                                 cudaStream_t stream) {
  return launch_by_stub(func, gridDim, blockDim, args, sharedMem, stream, 0, 1, NULL);
}
RGPU_API cudaError_t cudaLaunchCooperativeKernel_ptsz(const void *func, dim3 gridDim,
                                                      dim3 blockDim, void **args,
                                                      size_t sharedMem, cudaStream_t stream);
RGPU_API cudaError_t cudaLaunchCooperativeKernel_ptsz(const void *func, dim3 gridDim,
                                                      dim3 blockDim, void **args,
                                                      size_t sharedMem, cudaStream_t stream) {
  return launch_by_stub(func, gridDim, blockDim, args, sharedMem, stream, 1, 1, NULL);
}

int rgpu_rt_launch_attr_is_hint(cudaLaunchAttributeID id) {
  switch (id) {
  case cudaLaunchAttributeIgnore:
  case cudaLaunchAttributeAccessPolicyWindow:
  case cudaLaunchAttributeSynchronizationPolicy:
  case cudaLaunchAttributeProgrammaticStreamSerialization:
  case cudaLaunchAttributePriority:
  case cudaLaunchAttributeMemSyncDomainMap:
  case cudaLaunchAttributeMemSyncDomain:
  case cudaLaunchAttributePreferredSharedMemoryCarveout:
  case cudaLaunchAttributeClusterSchedulingPolicyPreference:
  case cudaLaunchAttributePreferredClusterDimension:
    return 1;
  default:
    return 0;
  }
}

/* The attributes of a cudaLaunchKernelEx: *cooperative and cluster (zeros:
 * none), or an error. */
static cudaError_t read_launch_attrs(const cudaLaunchConfig_t *config, int *cooperative,
                                     unsigned cluster[3]) {
  *cooperative = 0;
  cluster[0] = cluster[1] = cluster[2] = 0;
  if (config->numAttrs && !config->attrs) return cudaErrorInvalidValue;
  for (unsigned i = 0; i < config->numAttrs; i++) {
    const cudaLaunchAttribute *a = &config->attrs[i];
    if (rgpu_rt_launch_attr_is_hint(a->id)) continue;
    switch (a->id) {
    case cudaLaunchAttributeCooperative: *cooperative = a->val.cooperative != 0; break;
    case cudaLaunchAttributeClusterDimension:
      cluster[0] = a->val.clusterDim.x;
      cluster[1] = a->val.clusterDim.y;
      cluster[2] = a->val.clusterDim.z;
      break;
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
  unsigned cluster[3];
  cudaError_t e = read_launch_attrs(config, &cooperative, cluster);
  if (e != cudaSuccess) {
    rgpu_rt_count_call();
    return rgpu_rt_ret(e);
  }
  return launch_by_stub(func, config->gridDim, config->blockDim, args, config->dynamicSmemBytes,
                        config->stream, per_thread, cooperative, cluster);
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
