/* cublas[SD]gemm_v2, their _64 forms, their strided-batched forms and
 * cublasGemmEx (and _64): one CUBLAS_GEMM request without a reply.
 *
 * The arguments are checked here as cuBLAS checks them (so a bad call
 * fails at once with cuBLAS's status); what only the server can check
 * (that A, B and C lie in allocations of the session) fails there and
 * comes back as a deferred error, like a bad kernel launch. */
#include "rgpu_calls.h"
#include "rgpu_cublas_gemm_types.h"
#include "rgpu_cublas_internal.h"
#include "rgpu_half.h"
#include "rgpu_cudart_op.h"
#include "rgpu_cublas_unsupported.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"

static int valid_op(cublasOperation_t op) {
  return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

static int64_t at_least_1(int64_t v) { return v < 1 ? 1 : v; }

/* A, B, C and the scalars of one gemm.  Typed calls (compute 0) name one
 * type, A's; cublasGemmEx names the three and its compute type. */
typedef struct {
  cublasHandle_t handle;
  cudaDataType atype;
  cublasOperation_t transa, transb;
  int64_t m, n, k, lda, ldb, ldc;
  const void *alpha, *beta, *A, *B;
  void *C;
  int64_t batch, stride_a, stride_b, stride_c; /* 1, 0, 0, 0: a plain gemm */
  cudaDataType btype, ctype;
  cublasComputeType_t compute; /* 0: a typed call */
  cublasGemmAlgo_t algo;
} gemm_args;

/* A host-mode scalar of type t, as f64 (exact for every type). */
static double scalar_value(int t, const void *p) {
  switch (t) {
    case CUDA_R_16F: return rgpu_half_to_float(*(const uint16_t *)p);
    case CUDA_R_32F: return *(const float *)p;
    default: return *(const double *)p;
  }
}

static cublasStatus_t gemm_submit(const gemm_args *g, const char *name) {
  struct cublasContext *h = rgpu_cublas_handle(g->handle);
  if (!h) {
    rgpu_rt_count_call();
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  /* The first bad argument, numbered as cuBLAS numbers them (without the
   * handle; cublasGemmEx has a type after each matrix). */
  int ex = g->compute != 0, bad = 0;
  if (!valid_op(g->transa)) bad = 1;
  else if (!valid_op(g->transb)) bad = 2;
  else if (g->m < 0) bad = 3;
  else if (g->n < 0) bad = 4;
  else if (g->k < 0) bad = 5;
  else if (g->lda < at_least_1(g->transa == CUBLAS_OP_N ? g->m : g->k)) bad = ex ? 9 : 8;
  else if (g->ldb < at_least_1(g->transb == CUBLAS_OP_N ? g->k : g->n)) bad = ex ? 12 : 10;
  else if (g->ldc < at_least_1(g->m)) bad = ex ? 16 : 13;
  if (bad || g->batch < 0) {
    if (bad) rgpu_cublas_report_illegal(name, bad);
    rgpu_rt_count_call();
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (g->m == 0 || g->n == 0 || g->batch == 0) {
    rgpu_rt_count_call();
    return CUBLAS_STATUS_SUCCESS;
  }
  if (!g->alpha || !g->beta) {
    rgpu_rt_count_call();
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  uint32_t bt = g->compute ? (uint32_t)g->btype : (uint32_t)g->atype;
  uint32_t ct = g->compute ? (uint32_t)g->ctype : (uint32_t)g->atype;
  int scale = rgpu_cublas_gemm_scale_type((uint32_t)g->atype, bt, ct, (uint32_t)g->compute);
  if (scale < 0) {
    static int logged;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      RGPU_WARN("%s: types A %d, B %u, C %u with compute type %d are not supported by rgpu; it "
                "returns CUBLAS_STATUS_NOT_SUPPORTED", name, (int)g->atype, bt, ct,
                (int)g->compute);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  rgpu_client *c;
  uint64_t stream;
  int device;
  static int logged; /* the capture refusal, once for this call family */
  cublasStatus_t st = rgpu_cublas_enter(h, name, &logged, &c, &stream, &device);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  /* Host mode: the values, read now (cuBLAS reads them at the call too).
   * Device mode: the addresses; the server reads them in stream order. */
  int dev_scalars = h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  double alpha = dev_scalars ? 0 : scalar_value(scale, g->alpha);
  double beta = dev_scalars ? 0 : scalar_value(scale, g->beta);
  rgpu_rt_host_backpressure(c, stream, 0);
  rgpu_msg_cublas_gemm_req m = {.handle = h->id,
                                .stream = stream,
                                .atype = (uint32_t)g->atype,
                                .btype = bt,
                                .ctype = ct,
                                .compute = (uint32_t)g->compute,
                                .algo = (int32_t)g->algo,
                                .transa = (uint32_t)g->transa,
                                .transb = (uint32_t)g->transb,
                                .math_mode = (uint32_t)h->math_mode,
                                .m = g->m,
                                .n = g->n,
                                .k = g->k,
                                .a = (uint64_t)(uintptr_t)g->A,
                                .lda = g->lda,
                                .b = (uint64_t)(uintptr_t)g->B,
                                .ldb = g->ldb,
                                .c = (uint64_t)(uintptr_t)g->C,
                                .ldc = g->ldc,
                                .batch = g->batch,
                                .stride_a = g->stride_a,
                                .stride_b = g->stride_b,
                                .stride_c = g->stride_c,
                                .pointer_mode = (uint32_t)h->pointer_mode,
                                .alpha = alpha,
                                .beta = beta,
                                .alpha_dev = dev_scalars ? (uint64_t)(uintptr_t)g->alpha : 0,
                                .beta_dev = dev_scalars ? (uint64_t)(uintptr_t)g->beta : 0,
                                .workspace = (uint64_t)(uintptr_t)h->workspace,
                                .workspace_size = h->workspace_size};
  rgpu_status rc = rgpu_call_cublas_gemm(c, device, RGPU_CALL_ASYNC, &m, NULL, NULL);
  if (rc) {
    rgpu_rt_sync_ret(c, rc);
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

/* Each entry point fills gemm_args in its own parameter order; the sizes
 * widen to int64_t (the _64 forms' type) on the way. */
#define GEMM_ARGS(dtype, A, B, C, batch, sa, sb, sc)                                      \
  gemm_args g = {handle, dtype, transa, transb, m,     n,     k,  lda, ldb, ldc, alpha, \
                 beta,   A,     B,      C,      batch, sa,    sb, sc}

RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasSgemm_v2(cublasHandle_t handle,
                                                      cublasOperation_t transa,
                                                      cublasOperation_t transb, int m, int n,
                                                      int k, const float *alpha, const float *A,
                                                      int lda, const float *B, int ldb,
                                                      const float *beta, float *C, int ldc) {
  GEMM_ARGS(CUDA_R_32F, A, B, C, 1, 0, 0, 0);
  return gemm_submit(&g, "cublasSgemm_v2");
}

RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasDgemm_v2(cublasHandle_t handle,
                                                      cublasOperation_t transa,
                                                      cublasOperation_t transb, int m, int n,
                                                      int k, const double *alpha, const double *A,
                                                      int lda, const double *B, int ldb,
                                                      const double *beta, double *C, int ldc) {
  GEMM_ARGS(CUDA_R_64F, A, B, C, 1, 0, 0, 0);
  return gemm_submit(&g, "cublasDgemm_v2");
}

RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasSgemm_v2_64(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int64_t m,
    int64_t n, int64_t k, const float *alpha, const float *A, int64_t lda, const float *B,
    int64_t ldb, const float *beta, float *C, int64_t ldc) {
  GEMM_ARGS(CUDA_R_32F, A, B, C, 1, 0, 0, 0);
  return gemm_submit(&g, "cublasSgemm_v2_64");
}

RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasDgemm_v2_64(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int64_t m,
    int64_t n, int64_t k, const double *alpha, const double *A, int64_t lda, const double *B,
    int64_t ldb, const double *beta, double *C, int64_t ldc) {
  GEMM_ARGS(CUDA_R_64F, A, B, C, 1, 0, 0, 0);
  return gemm_submit(&g, "cublasDgemm_v2_64");
}

RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasSgemmStridedBatched(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const float *alpha, const float *A, int lda, long long int strideA, const float *B, int ldb,
    long long int strideB, const float *beta, float *C, int ldc, long long int strideC,
    int batchCount) {
  GEMM_ARGS(CUDA_R_32F, A, B, C, batchCount, strideA, strideB, strideC);
  return gemm_submit(&g, "cublasSgemmStridedBatched");
}

RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasDgemmStridedBatched(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const double *alpha, const double *A, int lda, long long int strideA, const double *B, int ldb,
    long long int strideB, const double *beta, double *C, int ldc, long long int strideC,
    int batchCount) {
  GEMM_ARGS(CUDA_R_64F, A, B, C, batchCount, strideA, strideB, strideC);
  return gemm_submit(&g, "cublasDgemmStridedBatched");
}

RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasSgemmStridedBatched_64(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int64_t m,
    int64_t n, int64_t k, const float *alpha, const float *A, int64_t lda, long long int strideA,
    const float *B, int64_t ldb, long long int strideB, const float *beta, float *C, int64_t ldc,
    long long int strideC, int64_t batchCount) {
  GEMM_ARGS(CUDA_R_32F, A, B, C, batchCount, strideA, strideB, strideC);
  return gemm_submit(&g, "cublasSgemmStridedBatched_64");
}

RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasDgemmStridedBatched_64(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int64_t m,
    int64_t n, int64_t k, const double *alpha, const double *A, int64_t lda, long long int strideA,
    const double *B, int64_t ldb, long long int strideB, const double *beta, double *C,
    int64_t ldc, long long int strideC, int64_t batchCount) {
  GEMM_ARGS(CUDA_R_64F, A, B, C, batchCount, strideA, strideB, strideC);
  return gemm_submit(&g, "cublasDgemmStridedBatched_64");
}

RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasGemmEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B,
    cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  GEMM_ARGS(Atype, A, B, C, 1, 0, 0, 0);
  g.btype = Btype;
  g.ctype = Ctype;
  g.compute = computeType;
  g.algo = algo;
  return gemm_submit(&g, "cublasGemmEx");
}

RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasGemmEx_64(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int64_t m,
    int64_t n, int64_t k, const void *alpha, const void *A, cudaDataType Atype, int64_t lda,
    const void *B, cudaDataType Btype, int64_t ldb, const void *beta, void *C, cudaDataType Ctype,
    int64_t ldc, cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  GEMM_ARGS(Atype, A, B, C, 1, 0, 0, 0);
  g.btype = Btype;
  g.ctype = Ctype;
  g.compute = computeType;
  g.algo = algo;
  return gemm_submit(&g, "cublasGemmEx_64");
}
