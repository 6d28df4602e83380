/* Peer access between the server's devices (issue 19):
 * cudaDeviceCanAccessPeer, cudaDeviceEnablePeerAccess and
 * cudaDeviceDisablePeerAccess, each one PEER_ACCESS request that the
 * server answers with its driver's own calls, so the answers (and
 * PEER_ACCESS_ALREADY_ENABLED / NOT_ENABLED) are the GPU's.  The copies
 * (cudaMemcpyPeer) are in rgpu_cudart_memory.c. */
#include <string.h>

#include "rgpu_cudart.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"
#include "rgpu_cudart_unsupported.h"

enum { PEER_CAN_ACCESS = 0, PEER_ENABLE = 1, PEER_DISABLE = 2 };

/* cuDeviceCanAccessPeer's answer per pair, asked once: it is a property of
 * the hardware.  0 unknown, 1 no, 2 yes. */
static unsigned char g_can[RGPU_MAX_DEVICES][RGPU_MAX_DEVICES];

static cudaError_t check_devices(rgpu_client *c, int a, int b) {
  int n = 0;
  cudaError_t e = rgpu_rt_device_count(c, &n);
  if (e != cudaSuccess) return e;
  if (a < 0 || a >= n || b < 0 || b >= n) return cudaErrorInvalidDevice;
  return cudaSuccess;
}

/* Only between devices of one server (the caller checks): both numbers
 * are sent as that server's own. */
static rgpu_status peer_call(rgpu_client *c, int device, int peer, uint32_t op, int32_t *value) {
  c = rgpu_rt_route(c, device);
  rgpu_msg_peer_access_req req = {.device = rgpu_rt_local_device(c, device),
                                  .peer = rgpu_rt_local_device(c, peer), .op = op};
  rgpu_msg_peer_access_rep rep;
  memset(&rep, 0, sizeof rep);
  assert(rgpu_mutex_held_count() == 0); /* a round trip: no cudart lock held */
  rgpu_status rc = rgpu_call_peer_access(c, -1, 0, &req, &rep, NULL);
  if (rc == 0 && value) *value = rep.value;
  return rc;
}

RGPU_API cudaError_t cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!canAccessPeer) return rgpu_rt_ret(cudaErrorInvalidValue);
  e = check_devices(c, device, peerDevice);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  /* CUDA: a device is not its own peer. */
  if (device == peerDevice) {
    *canAccessPeer = 0;
    return cudaSuccess;
  }
  /* Devices of two servers (issue 19) share no memory: a kernel on one
   * cannot reach the other's.  Copies between them still work, through
   * this client (cudaMemcpyPeer). */
  if (rgpu_rt_devices_apart(device, peerDevice)) {
    *canAccessPeer = 0;
    return cudaSuccess;
  }
  unsigned char known = __atomic_load_n(&g_can[device][peerDevice], __ATOMIC_ACQUIRE);
  if (!known) {
    int32_t v = 0;
    rgpu_status rc = peer_call(c, device, peerDevice, PEER_CAN_ACCESS, &v);
    if (rc == CUDA_ERROR_NOT_SUPPORTED) {
      /* The server's driver (or an older server) cannot tell: an honest no. */
      static int logged;
      if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
        RGPU_WARN("cudaDeviceCanAccessPeer: the server cannot report peer access; answering 0");
      v = 0;
    } else if (rc) {
      return rgpu_rt_ret(rgpu_rt_from_call(rc));
    }
    known = v ? 2 : 1;
    __atomic_store_n(&g_can[device][peerDevice], known, __ATOMIC_RELEASE);
  }
  *canAccessPeer = known == 2;
  return cudaSuccess;
}

/* What can be said without guessing: a device is not its own peer
 * (cudaErrorInvalidDevice, as on the H200), access support is
 * cudaDeviceCanAccessPeer's answer, and a pair without access has no rank,
 * atomics or array access.  For a pair with access, the rank and the
 * atomics are the hardware's and the server is not asked: reported as
 * unsupported rather than guessed. */
RGPU_API cudaError_t cudaDeviceGetP2PAttribute(int *value, enum cudaDeviceP2PAttr attr,
                                               int srcDevice, int dstDevice) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!value) return rgpu_rt_ret(cudaErrorInvalidValue);
  e = check_devices(c, srcDevice, dstDevice);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  if (srcDevice == dstDevice) return rgpu_rt_ret(cudaErrorInvalidDevice);
  if (attr != cudaDevP2PAttrPerformanceRank && attr != cudaDevP2PAttrAccessSupported &&
      attr != cudaDevP2PAttrNativeAtomicSupported && attr != cudaDevP2PAttrCudaArrayAccessSupported)
    return rgpu_rt_ret(cudaErrorInvalidValue);
  int can = 0;
  e = cudaDeviceCanAccessPeer(&can, srcDevice, dstDevice);
  if (e != cudaSuccess) return e;
  if (attr == cudaDevP2PAttrAccessSupported || !can) {
    *value = attr == cudaDevP2PAttrAccessSupported ? can : 0;
    return cudaSuccess;
  }
  static int logged;
  return rgpu_cudart_report_unsupported("cudaDeviceGetP2PAttribute (rank, atomics or arrays of a "
                                        "pair with peer access)", &logged);
}

/* Enable or disable: the current device's access to peer's memory. */
static cudaError_t peer_change(int peer, uint32_t op, unsigned flags) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (flags != 0) return rgpu_rt_ret(cudaErrorInvalidValue); /* CUDA defines none */
  int dev = rgpu_rt_current_device();
  e = check_devices(c, dev, peer);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  if (dev == peer) return rgpu_rt_ret(cudaErrorInvalidDevice);
  /* What CUDA answers for a pair whose cudaDeviceCanAccessPeer is 0. */
  if (rgpu_rt_devices_apart(dev, peer))
    return rgpu_rt_ret(op == PEER_ENABLE ? cudaErrorPeerAccessUnsupported
                                         : cudaErrorPeerAccessNotEnabled);
  return rgpu_rt_ret(rgpu_rt_from_call(peer_call(c, dev, peer, op, NULL)));
}

RGPU_API cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags) {
  return peer_change(peerDevice, PEER_ENABLE, flags);
}

RGPU_API cudaError_t cudaDeviceDisablePeerAccess(int peerDevice) {
  return peer_change(peerDevice, PEER_DISABLE, 0);
}
