/* cublas[SD]gemv_v2 (and _64): one CUBLAS_GEMV request without a reply,
 * like the gemms (rgpu_cublas_gemm.c): checked here as cuBLAS checks them,
 * ranges checked by the server, errors deferred. */
#include "rgpu_calls.h"
#include "rgpu_cublas_internal.h"
#include "rgpu_cudart_op.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"

static cublasStatus_t gemv_submit(cublasHandle_t handle, cudaDataType dtype,
                                  cublasOperation_t trans, int64_t m, int64_t n, const void *alpha,
                                  const void *A, int64_t lda, const void *x, int64_t incx,
                                  const void *beta, void *y, int64_t incy, const char *name) {
  struct cublasContext *h = rgpu_cublas_handle(handle);
  if (!h) {
    rgpu_rt_count_call();
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  /* The first bad argument, numbered as cuBLAS numbers them (no handle). */
  int bad = 0;
  if (trans != CUBLAS_OP_N && trans != CUBLAS_OP_T && trans != CUBLAS_OP_C) bad = 1;
  else if (m < 0) bad = 2;
  else if (n < 0) bad = 3;
  else if (lda < (m > 1 ? m : 1)) bad = 6;
  else if (incx == 0) bad = 8;
  else if (incy == 0) bad = 11;
  if (bad) {
    rgpu_cublas_report_illegal(name, bad);
    rgpu_rt_count_call();
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (m == 0 || n == 0) {
    rgpu_rt_count_call();
    return CUBLAS_STATUS_SUCCESS;
  }
  if (!alpha || !beta) {
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
  double al = 0, be = 0;
  if (!dev_scalars && dtype == CUDA_R_32F) {
    al = *(const float *)alpha;
    be = *(const float *)beta;
  } else if (!dev_scalars) {
    al = *(const double *)alpha;
    be = *(const double *)beta;
  }
  rgpu_rt_host_backpressure(c, stream, 0);
  rgpu_msg_cublas_gemv_req q = {.handle = h->id,
                                .stream = stream,
                                .dtype = (uint32_t)dtype,
                                .trans = (uint32_t)trans,
                                .m = m,
                                .n = n,
                                .a = (uint64_t)(uintptr_t)A,
                                .lda = lda,
                                .x = (uint64_t)(uintptr_t)x,
                                .incx = incx,
                                .y = (uint64_t)(uintptr_t)y,
                                .incy = incy,
                                .pointer_mode = (uint32_t)h->pointer_mode,
                                .alpha = al,
                                .beta = be,
                                .alpha_dev = dev_scalars ? (uint64_t)(uintptr_t)alpha : 0,
                                .beta_dev = dev_scalars ? (uint64_t)(uintptr_t)beta : 0};
  rgpu_status rc = rgpu_call_cublas_gemv(c, device, RGPU_CALL_ASYNC, &q, NULL, NULL);
  if (rc) {
    rgpu_rt_sync_ret(c, rc);
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasSgemv_v2(cublasHandle_t handle,
                                                      cublasOperation_t trans, int m, int n,
                                                      const float *alpha, const float *A, int lda,
                                                      const float *x, int incx, const float *beta,
                                                      float *y, int incy) {
  return gemv_submit(handle, CUDA_R_32F, trans, m, n, alpha, A, lda, x, incx, beta, y, incy,
                     "cublasSgemv_v2");
}
RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasDgemv_v2(cublasHandle_t handle,
                                                      cublasOperation_t trans, int m, int n,
                                                      const double *alpha, const double *A,
                                                      int lda, const double *x, int incx,
                                                      const double *beta, double *y, int incy) {
  return gemv_submit(handle, CUDA_R_64F, trans, m, n, alpha, A, lda, x, incx, beta, y, incy,
                     "cublasDgemv_v2");
}
RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasSgemv_v2_64(
    cublasHandle_t handle, cublasOperation_t trans, int64_t m, int64_t n, const float *alpha,
    const float *A, int64_t lda, const float *x, int64_t incx, const float *beta, float *y,
    int64_t incy) {
  return gemv_submit(handle, CUDA_R_32F, trans, m, n, alpha, A, lda, x, incx, beta, y, incy,
                     "cublasSgemv_v2_64");
}
RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasDgemv_v2_64(
    cublasHandle_t handle, cublasOperation_t trans, int64_t m, int64_t n, const double *alpha,
    const double *A, int64_t lda, const double *x, int64_t incx, const double *beta, double *y,
    int64_t incy) {
  return gemv_submit(handle, CUDA_R_64F, trans, m, n, alpha, A, lda, x, incx, beta, y, incy,
                     "cublasDgemv_v2_64");
}
