/* softgpu peer access: cuDeviceCanAccessPeer, cuCtxEnablePeerAccess,
 * cuCtxDisablePeerAccess.
 *
 * Every softgpu device lives in the one process's memory, so any device can
 * reach any other's allocations; what these calls keep is the bookkeeping
 * that gives CUDA's answers (a device is not its own peer, enabling twice is
 * PEER_ACCESS_ALREADY_ENABLED, disabling what was not enabled is
 * PEER_ACCESS_NOT_ENABLED).  Copies between devices (cuMemcpyPeer) are in
 * sg_mem.c with the other copies. */
#include "sg_internal.h"

SG_EXPORT CUresult CUDAAPI cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev) {
  if (!canAccessPeer) return CUDA_ERROR_INVALID_VALUE;
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!sg_device_get(dev) || !sg_device_get(peerDev)) return CUDA_ERROR_INVALID_DEVICE;
  *canAccessPeer = dev != peerDev;
  return CUDA_SUCCESS;
}

/* The current context and the peer context, both usable, of two devices. */
static CUresult peer_pair(CUcontext peer, sg_ctx **cur, int *bit) {
  CUresult r = sg_current(cur);
  if (r) return r;
  if (!peer || sg_ctx_usable(peer) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_CONTEXT;
  if (peer->dev == (*cur)->dev) return CUDA_ERROR_INVALID_DEVICE;
  if (peer->dev->ordinal < 0 || peer->dev->ordinal >= 64) return CUDA_ERROR_INVALID_DEVICE;
  *bit = peer->dev->ordinal;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) {
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  sg_ctx *cur;
  int bit;
  CUresult r = peer_pair(peerContext, &cur, &bit);
  if (r) return r;
  uint64_t was = atomic_fetch_or(&cur->peers, (uint64_t)1 << bit);
  return was & ((uint64_t)1 << bit) ? CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED : CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peerContext) {
  sg_ctx *cur;
  int bit;
  CUresult r = peer_pair(peerContext, &cur, &bit);
  if (r == CUDA_ERROR_INVALID_DEVICE) return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
  if (r) return r;
  uint64_t was = atomic_fetch_and(&cur->peers, ~((uint64_t)1 << bit));
  return was & ((uint64_t)1 << bit) ? CUDA_SUCCESS : CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
}
