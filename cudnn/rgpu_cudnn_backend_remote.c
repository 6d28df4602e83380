/* The backend descriptors whose finalize needs the GPU's answer (engine
 * heuristics, execution plan).  Not carried yet: NOT_SUPPORTED, logged. */
#include "rgpu_cudnn_backend.h"
#include "rgpu_log.h"

cudnnStatus_t rgpu_cudnn_backend_finalize_remote(struct rgpu_cudnn_bdesc *d) {
  static int logged;
  if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
    RGPU_WARN("cudnnBackendFinalize: backend descriptor type %d (engine heuristics, execution "
              "plan) is not supported by rgpu yet; it returns CUDNN_STATUS_NOT_SUPPORTED",
              d->type);
  return CUDNN_STATUS_NOT_SUPPORTED;
}
