/* Peer access and peer copies of the driver facade (issue 19):
 * cuCtxEnablePeerAccess, cuCtxDisablePeerAccess, cuMemcpyPeer(Async).
 *
 * A context names its device (every context of a device shares the
 * device's one server context), so each call is the runtime's call on the
 * contexts' devices: the same PEER_ACCESS request and the same copies,
 * with the runtime's errors mapped to CUresult (PEER_ACCESS_ALREADY_ENABLED,
 * PEER_ACCESS_NOT_ENABLED, INVALID_DEVICE for a context's own device). */
#include "rgpu_drv_internal.h"

RGPU_DRV CUresult rgpu_drv_cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) {
  RGPU_DRV_ENTER_CTX(); /* the current context is the one that gains access */
  if (rgpu_drv_ctx_check(peerContext) != CUDA_SUCCESS) {
    rgpu_rt_count_call();
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  return RGPU_DRV_RT(cudaDeviceEnablePeerAccess(peerContext->device, Flags));
}

RGPU_DRV CUresult rgpu_drv_cuCtxDisablePeerAccess(CUcontext peerContext) {
  RGPU_DRV_ENTER_CTX();
  if (rgpu_drv_ctx_check(peerContext) != CUDA_SUCCESS) {
    rgpu_rt_count_call();
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  return RGPU_DRV_RT(cudaDeviceDisablePeerAccess(peerContext->device));
}

/* Both contexts live; their devices in *dd, *sd. */
static CUresult peer_ctxs(CUcontext dst, CUcontext src, int *dd, int *sd) {
  if (rgpu_drv_ctx_check(dst) != CUDA_SUCCESS || rgpu_drv_ctx_check(src) != CUDA_SUCCESS) {
    rgpu_rt_count_call();
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  *dd = dst->device;
  *sd = src->device;
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext,
                                        CUdeviceptr srcDevice, CUcontext srcContext,
                                        size_t ByteCount) {
  int dd, sd;
  CUresult r = peer_ctxs(dstContext, srcContext, &dd, &sd);
  if (r != CUDA_SUCCESS) return r;
  return RGPU_DRV_RT(cudaMemcpyPeer((void *)(uintptr_t)dstDevice, dd,
                                    (const void *)(uintptr_t)srcDevice, sd, ByteCount));
}

RGPU_DRV CUresult rgpu_drv_cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext,
                                             CUdeviceptr srcDevice, CUcontext srcContext,
                                             size_t ByteCount, CUstream hStream) {
  int dd, sd;
  CUresult r = peer_ctxs(dstContext, srcContext, &dd, &sd);
  if (r != CUDA_SUCCESS) return r;
  return RGPU_DRV_RT(cudaMemcpyPeerAsync((void *)(uintptr_t)dstDevice, dd,
                                         (const void *)(uintptr_t)srcDevice, sd, ByteCount,
                                         (cudaStream_t)hStream));
}

/* The per-thread default stream forms: stream 0 is the thread's stream. */
RGPU_DRV CUresult rgpu_drv_cuMemcpyPeerAsync_ptsz(CUdeviceptr dstDevice, CUcontext dstContext,
                                                  CUdeviceptr srcDevice, CUcontext srcContext,
                                                  size_t ByteCount, CUstream hStream) {
  return rgpu_drv_cuMemcpyPeerAsync(dstDevice, dstContext, srcDevice, srcContext, ByteCount,
                                    hStream ? hStream : (CUstream)cudaStreamPerThread);
}

RGPU_DRV CUresult rgpu_drv_cuMemcpyPeer_ptds(CUdeviceptr dstDevice, CUcontext dstContext,
                                             CUdeviceptr srcDevice, CUcontext srcContext,
                                             size_t ByteCount) {
  CUresult r = rgpu_drv_cuMemcpyPeerAsync(dstDevice, dstContext, srcDevice, srcContext, ByteCount,
                                          (CUstream)cudaStreamPerThread);
  if (r != CUDA_SUCCESS) return r;
  return RGPU_DRV_RT(cudaStreamSynchronize(cudaStreamPerThread));
}

/* CUdevice_P2PAttribute's values are cudaDeviceP2PAttr's. */
RGPU_DRV CUresult rgpu_drv_cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib, CUdevice srcDevice,
                                                   CUdevice dstDevice) {
  if (!rgpu_drv_initialized()) {
    rgpu_rt_count_call();
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return RGPU_DRV_RT(cudaDeviceGetP2PAttribute(value, (enum cudaDeviceP2PAttr)attrib, srcDevice, dstDevice));
}
