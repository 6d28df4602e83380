/* PEER_ACCESS (issue 19): cuDeviceCanAccessPeer, cuCtxEnablePeerAccess and
 * cuCtxDisablePeerAccess between two devices of the session.
 *
 * The message is noctx: it names both devices itself, retains the peer's
 * primary context if the session has not used that device yet, and leaves
 * the session's current device as it found it, because the client tracks
 * which device the server has current (CTX_SET_DEVICE) and must not be
 * surprised.  The driver's own answers (PEER_ACCESS_ALREADY_ENABLED,
 * PEER_ACCESS_NOT_ENABLED, PEER_ACCESS_UNSUPPORTED) go back as they are:
 * they are results the program checks, not failures of rgpu. */
#include "rgpu_dispatch.h"
#include "rgpu_log.h"
#include "rgpu_worker_internal.h"

#define D (&w->drv)
#define FAIL(status, ...) rgpu_worker_fail(w, (status), __VA_ARGS__)

enum { PEER_CAN_ACCESS = 0, PEER_ENABLE = 1, PEER_DISABLE = 2 };

CUresult rgpu_h_peer_access(rgpu_req *rq, const rgpu_msg_peer_access_req *q) {
  rgpu_worker *w = rq->w;
  CUresult r = rgpu_worker_ensure_driver(w);
  if (r) return r;
  if (q->device >= (uint32_t)w->device_count || q->peer >= (uint32_t)w->device_count)
    return FAIL(CUDA_ERROR_INVALID_DEVICE, "peer access: device %u or %u does not exist (%d device%s)",
                q->device, q->peer, w->device_count, w->device_count == 1 ? "" : "s");
  if (q->op > PEER_DISABLE) return FAIL(CUDA_ERROR_INVALID_VALUE, "peer access: unknown op %u", q->op);
  int dev = (int)q->device, peer = (int)q->peer;
  if (!D->cuDeviceCanAccessPeer || !D->cuCtxEnablePeerAccess || !D->cuCtxDisablePeerAccess) {
    static int logged;
    if (!logged++) RGPU_WARN("the driver %s has no peer-access functions", D->path);
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "the server's driver has no peer-access functions");
  }
  if (q->op == PEER_CAN_ACCESS) {
    int can = 0;
    if (dev != peer) {
      r = D->cuDeviceCanAccessPeer(&can, rgpu_worker_ordinal(w, dev), rgpu_worker_ordinal(w, peer));
      if (r) return FAIL(r, "cuDeviceCanAccessPeer: %s", rgpu_driver_error_name(D, r));
    }
    rgpu_msg_peer_access_rep rep = {.value = can};
    rgpu_msg_peer_access_rep_encode(rq->rep, &rep);
    return CUDA_SUCCESS;
  }
  /* CUDA: a device is never its own peer. */
  if (dev == peer) return CUDA_ERROR_INVALID_DEVICE;
  int before = w->cur_dev;
  /* Work queued on either device may read the mapping: it changes in order
   * with what the session already sent, so wait for the background jobs. */
  rgpu_jobs_barrier(w, NULL);
  r = rgpu_worker_set_device(w, peer);
  if (!r) r = rgpu_worker_set_device(w, dev);
  if (!r) {
    r = q->op == PEER_ENABLE ? D->cuCtxEnablePeerAccess(w->ctx[peer], 0)
                             : D->cuCtxDisablePeerAccess(w->ctx[peer]);
  }
  if (before >= 0 && before != w->cur_dev) {
    CUresult rb = rgpu_worker_set_device(w, before);
    if (!r) r = rb;
  }
  if (r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED || r == CUDA_ERROR_PEER_ACCESS_NOT_ENABLED) return r;
  if (r)
    return FAIL(r, "%s of device %d from device %d: %s",
                q->op == PEER_ENABLE ? "cuCtxEnablePeerAccess" : "cuCtxDisablePeerAccess", peer, dev,
                rgpu_driver_error_name(D, r));
  rgpu_msg_peer_access_rep rep = {.value = 1};
  rgpu_msg_peer_access_rep_encode(rq->rep, &rep);
  return CUDA_SUCCESS;
}
