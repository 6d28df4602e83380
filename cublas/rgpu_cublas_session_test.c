/* The cuBLAS facade in a live session (ctest runs it under `rgpu run` on
 * softgpu): behaviour that is rgpu's own and so has no place in the e2e
 * programs, which must also pass natively: deferred errors of an
 * asynchronous gemm, the refusals (stubs, a gemm on a capturing stream).
 *
 * With `--work N` it runs no tests but N rounds of handle calls and gemms
 * between two synchronizations, for tests/work_roundtrips.sh, which checks
 * through RGPU_STATS that they cost no round trip. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

/* A gemm whose C is not device memory of the session is accepted (no
 * round trip to check it) and fails on the server: the next synchronizing
 * call reports it, like a failed kernel launch, and it is not sticky. */
static void test_deferred_error(void **state) {
  (void)state;
  cublasHandle_t h;
  float *d, one = 1;
  float *host = calloc(16, sizeof *host);
  assert_int_equal(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cudaMalloc((void **)&d, 16 * sizeof *d), cudaSuccess);
  assert_int_equal(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, d, 4, d, 4, &one, host,
                               4),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cudaDeviceSynchronize(), cudaErrorInvalidValue);
  assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  /* A running out of device memory (its leading dimension spans 3 GiB) is
   * checked the same way.  (The check is against the server's allocations,
   * which hold the client's arena blocks: a small overrun inside a block
   * goes unnoticed, as it would natively.) */
  assert_int_equal(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, d, 1 << 28, d, 4, &one,
                               d, 4),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cudaDeviceSynchronize(), cudaErrorInvalidValue);
  assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
  /* The session goes on. */
  assert_int_equal(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, d, 4, d, 4, &one, d, 4),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  assert_int_equal(cudaFree(d), cudaSuccess);
  assert_int_equal(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
  free(host);
}

/* Refused: a call that waits for a host-mode result on a capturing stream
 * (it would synchronize inside the capture; the capture goes on unharmed),
 * and routines softgpu does not compute (they run on a
 * GPU server) answer NOT_SUPPORTED at the call, as do exports rgpu does not
 * carry at all. */
static void test_refusals(void **state) {
  (void)state;
  cublasHandle_t h;
  cudaStream_t s;
  cudaGraph_t g;
  float *d, one = 1;
  assert_int_equal(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cudaMalloc((void **)&d, 16 * sizeof *d), cudaSuccess);
  assert_int_equal(cudaStreamCreate(&s), cudaSuccess);
  assert_int_equal(cublasSetStream(h, s), CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  float r = 0;
  assert_int_equal(cublasSdot(h, 4, d, 1, d, 1, &r), CUBLAS_STATUS_NOT_SUPPORTED);
  assert_int_equal(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, d, 4, d, 4, &one, d, 4),
                   CUBLAS_STATUS_SUCCESS); /* captured */
  assert_int_equal(cudaStreamEndCapture(s, &g), cudaSuccess);
  size_t nodes = 0;
  assert_int_equal(cudaGraphGetNodes(g, NULL, &nodes), cudaSuccess);
  assert_int_equal(nodes, 1);
  assert_int_equal(cudaGraphDestroy(g), cudaSuccess);
  assert_int_equal(cublasSswap(h, 4, d, 1, d + 4, 1), CUBLAS_STATUS_NOT_SUPPORTED);
  assert_int_equal(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, d, CUDA_R_8I, 2, d,
                                CUDA_R_8I, 2, &one, d, CUDA_R_32I, 2, CUBLAS_COMPUTE_32I,
                                CUBLAS_GEMM_DEFAULT),
                   CUBLAS_STATUS_NOT_SUPPORTED);
  assert_int_equal(cublasSrotg(h, &one, &one, &one, &one), CUBLAS_STATUS_NOT_SUPPORTED);
  assert_int_equal(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cudaStreamDestroy(s), cudaSuccess);
  assert_int_equal(cudaFree(d), cudaSuccess);
}

/* Results: in host pointer mode the call waits for its result (one round
 * trip, as cuBLAS blocks for it); in device mode it is queued and the
 * result lands in device memory in stream order.  A result pointer outside
 * the session fails on the server, deferred. */
static void test_results(void **state) {
  (void)state;
  cublasHandle_t h;
  float x[5] = {1, -7, 3, 7, 2}, *d, r = 0;
  double dx[3] = {3, 4, 12}, *dd, dr = 0;
  int idx = -1;
  assert_int_equal(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cudaMalloc((void **)&d, 16 * sizeof *d), cudaSuccess);
  assert_int_equal(cudaMalloc((void **)&dd, 8 * sizeof *dd), cudaSuccess);
  assert_int_equal(cudaMemcpy(d, x, sizeof x, cudaMemcpyHostToDevice), cudaSuccess);
  assert_int_equal(cudaMemcpy(dd, dx, sizeof dx, cudaMemcpyHostToDevice), cudaSuccess);
  assert_int_equal(cublasSdot(h, 5, d, 1, d, 1, &r), CUBLAS_STATUS_SUCCESS);
  assert_true(r == 1 + 49 + 9 + 49 + 4);
  assert_int_equal(cublasSasum(h, 5, d, 1, &r), CUBLAS_STATUS_SUCCESS);
  assert_true(r == 20);
  assert_int_equal(cublasIsamax(h, 5, d, 1, &idx), CUBLAS_STATUS_SUCCESS);
  assert_int_equal(idx, 2); /* 1-based, the first of the two 7s */
  assert_int_equal(cublasIsamin(h, 5, d, 1, &idx), CUBLAS_STATUS_SUCCESS);
  assert_int_equal(idx, 1);
  assert_int_equal(cublasDnrm2(h, 3, dd, 1, &dr), CUBLAS_STATUS_SUCCESS);
  assert_true(dr > 12.999999 && dr < 13.000001);
  assert_int_equal(cublasSdot(h, 0, d, 1, d, 1, &r), CUBLAS_STATUS_SUCCESS);
  assert_true(r == 0);
  /* Device mode: into d[8], read back after the stream. */
  assert_int_equal(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE), CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cublasSdot(h, 2, d, 1, d, 1, d + 8), CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cudaMemcpy(&r, d + 8, sizeof r, cudaMemcpyDeviceToHost), cudaSuccess);
  assert_true(r == 50);
  assert_int_equal(cublasSdot(h, 2, d, 1, d, 1, &r), CUBLAS_STATUS_SUCCESS); /* host memory */
  assert_int_equal(cudaDeviceSynchronize(), cudaErrorInvalidValue);
  assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
  assert_int_equal(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cudaFree(d), cudaSuccess);
  assert_int_equal(cudaFree(dd), cudaSuccess);
}

/* N rounds of: a handle created, configured and destroyed, and two gemms
 * on a stream, between two synchronizations. */
static int work(int rounds) {
  cublasHandle_t h;
  cudaStream_t s;
  float *d, one = 1, half = 0.5f;
  if (cublasCreate(&h) || cudaStreamCreate(&s) || cudaMalloc((void **)&d, 64 * sizeof *d) ||
      cudaMemset(d, 0, 64 * sizeof *d) || cudaStreamSynchronize(s) || cublasSetStream(h, s))
    return 1;
  for (int i = 0; i < rounds; i++) {
    cublasHandle_t t;
    cublasMath_t mm;
    if (cublasCreate(&t) || cublasSetStream(t, s) || cublasSetMathMode(t, CUBLAS_TF32_TENSOR_OP_MATH) ||
        cublasGetMathMode(t, &mm) || cublasSetWorkspace(t, NULL, 0) || cublasDestroy(t))
      return 1;
    if (cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, 8, 8, 8, &one, d, 8, d, 8, &half, d, 8) ||
        cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, d, 4, 16, d, 4, 16,
                                  &half, d, 4, 16, 4))
      return 1;
  }
  /* Work queued in either case, so the final synchronization is a round
   * trip with or without the rounds (a stream known idle syncs for free). */
  if (cudaMemsetAsync(d, 0, sizeof *d, s)) return 1;
  if (cudaStreamSynchronize(s) || cublasDestroy(h) || cudaStreamDestroy(s) || cudaFree(d)) return 1;
  printf("PASS cublas_work %d\n", rounds);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--work")) return work(atoi(argv[2]));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_deferred_error),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_results),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
