/* LIB_CALL: one call of a generated library facade, routed by library.
 * Each library's runtime (rgpu_cublas_server.c for cuBLAS) finds the call
 * by its name hash and runs its generated decoder. */
#include "rgpu_cublas_server.h"
#include "rgpu_lib_args.h"
#include "rgpu_req.h"

CUresult rgpu_h_lib_call(rgpu_req *rq, const rgpu_msg_lib_call_req *q) {
  switch (q->lib) {
    case RGPU_LIB_CUBLAS:
      return rgpu_cublas_dispatch(rq, q);
    default:
      return rgpu_req_fail(rq, CUDA_ERROR_NOT_SUPPORTED,
                           "LIB_CALL: library %u is unknown to this server", q->lib);
  }
}
