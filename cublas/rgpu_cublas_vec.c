/* Level-1 routines without a result (axpy, scal; S and D, and _64): one
 * CUBLAS_VEC request without a reply, like the gemms
 * (rgpu_cublas_gemm.c): checked here as cuBLAS checks them, ranges checked
 * by the server, errors deferred. */
#include "rgpu_calls.h"
#include "rgpu_cublas_internal.h"
#include "rgpu_cudart_op.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"

enum { VEC_AXPY = 0, VEC_SCAL = 1 };

static cublasStatus_t vec_submit(cublasHandle_t handle, uint32_t op, cudaDataType dtype, int64_t n,
                                 const void *alpha, const void *x, int64_t incx, void *y,
                                 int64_t incy, const char *name) {
  struct cublasContext *h = rgpu_cublas_handle(handle);
  if (!h) {
    rgpu_rt_count_call();
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  /* cuBLAS returns at once for an empty vector, and scal for incx <= 0
   * (BLAS's rule). */
  if (n <= 0 || (op == VEC_SCAL && incx <= 0)) {
    rgpu_rt_count_call();
    return CUBLAS_STATUS_SUCCESS;
  }
  if (!alpha) {
    rgpu_rt_count_call();
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  rgpu_client *c;
  uint64_t stream;
  int device;
  static int logged; /* the capture refusal, once for this call family */
  cublasStatus_t st = rgpu_cublas_enter(h, name, &logged, &c, &stream, &device);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  int dev_scalars = h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  double a = 0;
  if (!dev_scalars) a = dtype == CUDA_R_32F ? *(const float *)alpha : *(const double *)alpha;
  rgpu_rt_host_backpressure(c, stream, 0);
  rgpu_msg_cublas_vec_req m = {.handle = h->id,
                               .stream = stream,
                               .op = op,
                               .dtype = (uint32_t)dtype,
                               .n = n,
                               .x = (uint64_t)(uintptr_t)x,
                               .incx = incx,
                               .y = (uint64_t)(uintptr_t)y,
                               .incy = incy,
                               .pointer_mode = (uint32_t)h->pointer_mode,
                               .alpha = a,
                               .alpha_dev = dev_scalars ? (uint64_t)(uintptr_t)alpha : 0};
  rgpu_status rc = rgpu_call_cublas_vec(c, device, RGPU_CALL_ASYNC, &m, NULL, NULL);
  if (rc) {
    rgpu_rt_sync_ret(c, rc);
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasSaxpy_v2(cublasHandle_t handle, int n,
                                                      const float *alpha, const float *x, int incx,
                                                      float *y, int incy) {
  return vec_submit(handle, VEC_AXPY, CUDA_R_32F, n, alpha, x, incx, y, incy, "cublasSaxpy_v2");
}
RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasDaxpy_v2(cublasHandle_t handle, int n,
                                                      const double *alpha, const double *x,
                                                      int incx, double *y, int incy) {
  return vec_submit(handle, VEC_AXPY, CUDA_R_64F, n, alpha, x, incx, y, incy, "cublasDaxpy_v2");
}
RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasSaxpy_v2_64(cublasHandle_t handle, int64_t n,
                                                         const float *alpha, const float *x,
                                                         int64_t incx, float *y, int64_t incy) {
  return vec_submit(handle, VEC_AXPY, CUDA_R_32F, n, alpha, x, incx, y, incy,
                    "cublasSaxpy_v2_64");
}
RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasDaxpy_v2_64(cublasHandle_t handle, int64_t n,
                                                         const double *alpha, const double *x,
                                                         int64_t incx, double *y, int64_t incy) {
  return vec_submit(handle, VEC_AXPY, CUDA_R_64F, n, alpha, x, incx, y, incy,
                    "cublasDaxpy_v2_64");
}
RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasSscal_v2(cublasHandle_t handle, int n,
                                                      const float *alpha, float *x, int incx) {
  return vec_submit(handle, VEC_SCAL, CUDA_R_32F, n, alpha, x, incx, NULL, 0, "cublasSscal_v2");
}
RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasDscal_v2(cublasHandle_t handle, int n,
                                                      const double *alpha, double *x, int incx) {
  return vec_submit(handle, VEC_SCAL, CUDA_R_64F, n, alpha, x, incx, NULL, 0, "cublasDscal_v2");
}
RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasSscal_v2_64(cublasHandle_t handle, int64_t n,
                                                         const float *alpha, float *x,
                                                         int64_t incx) {
  return vec_submit(handle, VEC_SCAL, CUDA_R_32F, n, alpha, x, incx, NULL, 0,
                    "cublasSscal_v2_64");
}
RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasDscal_v2_64(cublasHandle_t handle, int64_t n,
                                                         const double *alpha, double *x,
                                                         int64_t incx) {
  return vec_submit(handle, VEC_SCAL, CUDA_R_64F, n, alpha, x, incx, NULL, 0,
                    "cublasDscal_v2_64");
}
