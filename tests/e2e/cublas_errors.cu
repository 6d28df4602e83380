// rgpu-nvcc-flags: -lcublas
// The argument errors cuBLAS reports when the call is made (before anything
// runs), with the status names cublasGetStatusName gives them.  Asserted are
// only the statuses cuBLAS's documentation states for the routines used
// (invalid transpose, negative sizes, leading dimension too small, zero
// increment: CUBLAS_STATUS_INVALID_VALUE; empty sizes: success); for the
// rest (a NULL handle, unknown enum values, quiet no-ops) the program prints
// the status name and asserts nothing, so the native run and the run through
// rgpu can be compared line by line.  A bad call must leave the data alone.
#include <vector>

#include "rgpu_cublas_check.h"

// Prints what a call returned; asserts nothing.
#define SHOW(what, call)                                                          \
  do {                                                                            \
    cublasStatus_t st_ = (call);                                                  \
    std::printf("%s -> %s\n", what, cublasGetStatusName(st_));                    \
    std::fflush(stdout);                                                          \
  } while (0)

// Asserts the status and prints it.
#define WANT(what, call, want)                                                    \
  do {                                                                            \
    CB_EXPECT(call, want);                                                        \
    std::printf("%s -> %s\n", what, cublasGetStatusName(want));                   \
    std::fflush(stdout);                                                          \
  } while (0)

int main() {
  // Every status's name (cuBLAS's own enum names).
  const cublasStatus_t all[] = {
      CUBLAS_STATUS_SUCCESS,          CUBLAS_STATUS_NOT_INITIALIZED, CUBLAS_STATUS_ALLOC_FAILED,
      CUBLAS_STATUS_INVALID_VALUE,    CUBLAS_STATUS_ARCH_MISMATCH,   CUBLAS_STATUS_MAPPING_ERROR,
      CUBLAS_STATUS_EXECUTION_FAILED, CUBLAS_STATUS_INTERNAL_ERROR,  CUBLAS_STATUS_NOT_SUPPORTED,
      CUBLAS_STATUS_LICENSE_ERROR};
  for (cublasStatus_t st : all) {
    EXPECT(cublasGetStatusName(st) != nullptr && cublasGetStatusString(st) != nullptr);
    std::printf("status %d is %s\n", (int)st, cublasGetStatusName(st));
  }

  cublasHandle_t h;
  CB(cublasCreate(&h));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CB(cublasSetStream(h, s));

  const int n = 16;
  std::vector<float> init(n * n);
  for (int i = 0; i < n * n; i++) init[i] = (float)(i % 13) - 6.0f;
  float *dA, *dB, *dC, *dx, *dy;
  CHECK(cudaMalloc(&dA, sizeof(float) * n * n));
  CHECK(cudaMalloc(&dB, sizeof(float) * n * n));
  CHECK(cudaMalloc(&dC, sizeof(float) * n * n));
  CHECK(cudaMalloc(&dx, sizeof(float) * n * n));
  CHECK(cudaMalloc(&dy, sizeof(float) * n * n));
  for (float *d : {dA, dB, dC, dx, dy})
    CHECK(cudaMemcpy(d, init.data(), sizeof(float) * n * n, cudaMemcpyHostToDevice));
  float one = 1.0f, two = 2.0f;
  double done = 1.0, *dd;
  CHECK(cudaMalloc(&dd, sizeof(double) * n * n));
  CHECK(cudaMemset(dd, 0, sizeof(double) * n * n));
  const cublasOperation_t bad_op = (cublasOperation_t)7;

  // gemm: op, sizes, leading dimensions.
  WANT("sgemm transa invalid", cublasSgemm(h, bad_op, CUBLAS_OP_N, n, n, n, &one, dA, n, dB, n, &two, dC, n),
       CUBLAS_STATUS_INVALID_VALUE);
  WANT("sgemm transb invalid", cublasSgemm(h, CUBLAS_OP_N, bad_op, n, n, n, &one, dA, n, dB, n, &two, dC, n),
       CUBLAS_STATUS_INVALID_VALUE);
  WANT("sgemm m -1", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, n, n, &one, dA, n, dB, n, &two, dC, n),
       CUBLAS_STATUS_INVALID_VALUE);
  WANT("sgemm n -3", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, -3, n, &one, dA, n, dB, n, &two, dC, n),
       CUBLAS_STATUS_INVALID_VALUE);
  WANT("sgemm k -2", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, -2, &one, dA, n, dB, n, &two, dC, n),
       CUBLAS_STATUS_INVALID_VALUE);
  WANT("sgemm lda < m", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, dA, n - 1, dB, n, &two, dC, n),
       CUBLAS_STATUS_INVALID_VALUE);
  WANT("sgemm T lda < k", cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, 8, &one, dA, 7, dB, 8, &two, dC, n),
       CUBLAS_STATUS_INVALID_VALUE);
  WANT("sgemm ldc < m", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, dA, n, dB, n, &two, dC, 4),
       CUBLAS_STATUS_INVALID_VALUE);
  WANT("dgemm ldb < k", cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &done, dd, 4, dd, 3, &done, dd, 4),
       CUBLAS_STATUS_INVALID_VALUE);
  WANT("sgemm_64 lda < m", cublasSgemm_64(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, dA, 2, dB, n, &two, dC, n),
       CUBLAS_STATUS_INVALID_VALUE);
  WANT("sgemm m 0", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 0, n, n, &one, dA, n, dB, n, &two, dC, n),
       CUBLAS_STATUS_SUCCESS);
  WANT("sgemm n 0", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, 0, n, &one, dA, n, dB, n, &two, dC, n),
       CUBLAS_STATUS_SUCCESS);
  WANT("sgemmStridedBatched m -1",
       cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, 4, 4, &one, dA, 4, 16, dB, 4, 16,
                                 &two, dC, 4, 16, 2),
       CUBLAS_STATUS_INVALID_VALUE);
  SHOW("sgemmStridedBatched batch -1",
       cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, dA, 4, 16, dB, 4, 16,
                                 &two, dC, 4, 16, -1));
  WANT("sgemmStridedBatched batch 0",
       cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, dA, 4, 16, dB, 4, 16,
                                 &two, dC, 4, 16, 0),
       CUBLAS_STATUS_SUCCESS);
  WANT("gemmEx lda < m",
       cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, dA, CUDA_R_32F, 3, dB, CUDA_R_32F,
                    n, &two, dC, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
       CUBLAS_STATUS_INVALID_VALUE);

  // gemv refuses only lda < max(1, m) (measured on the H200, cuBLAS 13);
  // asserted here, the rest below.
  WANT("sgemv lda < m", cublasSgemv(h, CUBLAS_OP_N, n, n, &one, dA, n - 1, dx, 1, &two, dy, 1),
       CUBLAS_STATUS_INVALID_VALUE);

  // Level 1: BLAS's quiet returns (printed, not asserted).
  SHOW("saxpy n -1", cublasSaxpy(h, -1, &one, dx, 1, dy, 1));
  SHOW("saxpy n 0", cublasSaxpy(h, 0, &one, dx, 1, dy, 1));
  SHOW("sscal n -4", cublasSscal(h, -4, &two, dx, 1));

  // None of the refused or empty calls may have touched the data.
  CHECK(cudaStreamSynchronize(s));
  std::vector<float> back(n * n);
  for (float *d : {dA, dB, dC, dx, dy}) {
    CHECK(cudaMemcpy(back.data(), d, sizeof(float) * n * n, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n * n; i++) EXPECT(back[i] == init[i]);
  }
  std::vector<double> dback(n * n);
  CHECK(cudaMemcpy(dback.data(), dd, sizeof(double) * n * n, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n * n; i++) EXPECT(dback[i] == 0.0);
  std::printf("data untouched by the refused calls ok\n");

  // gemv with an invalid operation: cuBLAS 13 does not refuse it (measured
  // on the H200: CUBLAS_STATUS_SUCCESS, where gemm refuses its operations);
  // printed only, on a vector of its own, with the other cases it takes.
  {
    float *gy;
    CHECK(cudaMalloc(&gy, sizeof(float) * n));
    CHECK(cudaMemcpy(gy, init.data(), sizeof(float) * n, cudaMemcpyHostToDevice));
    SHOW("sgemv trans invalid", cublasSgemv(h, bad_op, n, n, &one, dA, n, dx, 1, &two, gy, 1));
    // Sizes below 1 and increments of 0: printed (cuBLAS 13 takes them).
    SHOW("sgemv m -1", cublasSgemv(h, CUBLAS_OP_N, -1, n, &one, dA, n, dx, 1, &two, gy, 1));
    SHOW("sgemv n -1", cublasSgemv(h, CUBLAS_OP_N, n, -1, &one, dA, n, dx, 1, &two, gy, 1));
    SHOW("sgemv incx 0", cublasSgemv(h, CUBLAS_OP_N, n, n, &one, dA, n, dx, 0, &two, gy, 1));
    // (An increment of 0 for y is left out: the GPU's threads would race on
    // y[0], so even native runs differ.)
    CHECK(cudaStreamSynchronize(s));
    // The vector after all of them, exactly (small integers).
    std::vector<float> gb(n);
    CHECK(cudaMemcpy(gb.data(), gy, sizeof(float) * n, cudaMemcpyDeviceToHost));
    std::printf("sgemv scratch vector after them:");
    for (int i = 0; i < n; i++) std::printf(" %g", gb[i]);
    std::printf("\n");
    CHECK(cudaFree(gy));
  }

  // scal with a negative increment: BLAS does nothing; printed, with
  // whether the vector changed, on a vector of its own.
  float *dz;
  CHECK(cudaMalloc(&dz, sizeof(float) * n));
  CHECK(cudaMemcpy(dz, init.data(), sizeof(float) * n, cudaMemcpyHostToDevice));
  SHOW("sscal incx -1", cublasSscal(h, n, &two, dz, -1));
  CHECK(cudaMemcpy(back.data(), dz, sizeof(float) * n, cudaMemcpyDeviceToHost));
  bool changed = false;
  for (int i = 0; i < n; i++) changed |= back[i] != init[i];
  std::printf("sscal incx -1 changed the vector: %s\n", changed ? "yes" : "no");
  CHECK(cudaFree(dz));

  // Handles and modes: printed only.
  SHOW("sgemm NULL handle", cublasSgemm(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, dA, n, dB, n, &two, dC, n));
  SHOW("saxpy NULL handle", cublasSaxpy(nullptr, n, &one, dx, 1, dy, 1));
  SHOW("setStream NULL handle", cublasSetStream(nullptr, s));
  SHOW("setPointerMode 5", cublasSetPointerMode(h, (cublasPointerMode_t)5));
  cublasPointerMode_t pm;
  CB(cublasGetPointerMode(h, &pm));
  std::printf("pointer mode after a bad set: %s\n", pm == CUBLAS_POINTER_MODE_HOST ? "host" : "other");
  SHOW("setMathMode 99", cublasSetMathMode(h, (cublasMath_t)99));
  // The emulation modes cuBLAS 13's header defines (values 4 and 8).
  SHOW("setMathMode FP32_EMULATED_BF16X9", cublasSetMathMode(h, CUBLAS_FP32_EMULATED_BF16X9_MATH));
  SHOW("setMathMode FP64_EMULATED_FIXEDPOINT",
       cublasSetMathMode(h, CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH));
  SHOW("setMathMode TF32 | DISALLOW_REDUCED_PRECISION_REDUCTION",
       cublasSetMathMode(h, (cublasMath_t)(CUBLAS_TF32_TENSOR_OP_MATH |
                                           CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  // Whatever the bad sets did, the handle goes back to its defaults.
  CB(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
  CB(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  SHOW("destroy NULL handle", cublasDestroy(nullptr));

  // The handle still works after all of it.
  CB(cublasSaxpy(h, n, &one, dx, 1, dy, 1));
  CHECK(cudaMemcpy(back.data(), dy, sizeof(float) * n, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++) EXPECT(back[i] == 2 * init[i]);
  std::printf("handle usable after the errors ok\n");

  for (float *d : {dA, dB, dC, dx, dy}) CHECK(cudaFree(d));
  CHECK(cudaFree(dd));
  CB(cublasDestroy(h));
  CHECK(cudaStreamDestroy(s));
  pass("cublas_errors");
  return 0;
}
