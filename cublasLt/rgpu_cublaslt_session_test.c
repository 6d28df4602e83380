/* The cuBLASLt facade in a live session (ctest runs it under `rgpu run` on
 * softgpu): behaviour that is rgpu's own and so has no place in the e2e
 * program, which must also pass natively: deferred errors of an
 * asynchronous matmul and the refusals.
 *
 * With `--work N` it runs no tests but one heuristic query, then N rounds
 * of handle and descriptor calls, the same heuristic query and a matmul,
 * between two synchronizations, for tests/work_roundtrips.sh, which checks
 * through RGPU_STATS that the rounds cost no round trip. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

/* A 4x4 float matmul D = A B: its descriptor and layouts. */
typedef struct {
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t l;
} small_mm;

static int small_make(small_mm *s, uint32_t epilogue) {
  return cublasLtMatmulDescCreate(&s->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) ||
         cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                        sizeof epilogue) ||
         cublasLtMatrixLayoutCreate(&s->l, CUDA_R_32F, 4, 4, 4);
}

static void small_free(small_mm *s) {
  cublasLtMatmulDescDestroy(s->op);
  cublasLtMatrixLayoutDestroy(s->l);
}

/* A matmul whose D is not device memory of the session is accepted (no
 * round trip checks it) and fails on the server: the next synchronizing
 * call reports it, like a failed kernel launch, and it is not sticky. */
static void test_deferred_error(void **state) {
  (void)state;
  cublasLtHandle_t h;
  small_mm s;
  float *d, one = 1, zero = 0;
  float *host = calloc(16, sizeof *host);
  assert_int_equal(cublasLtCreate(&h), CUBLAS_STATUS_SUCCESS);
  assert_int_equal(small_make(&s, CUBLASLT_EPILOGUE_DEFAULT), 0);
  assert_int_equal(cudaMalloc((void **)&d, 16 * sizeof *d), cudaSuccess);
  assert_int_equal(cublasLtMatmul(h, s.op, &one, d, s.l, d, s.l, &zero, d, s.l, host, s.l, NULL,
                                  NULL, 0, 0),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cudaDeviceSynchronize(), cudaErrorInvalidValue);
  assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  /* A bias pointer outside the session's memory, the same way. */
  uint32_t ep = CUBLASLT_EPILOGUE_BIAS;
  const void *bias = host;
  assert_int_equal(cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep,
                                                  sizeof ep),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                  sizeof bias),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cublasLtMatmul(h, s.op, &one, d, s.l, d, s.l, &zero, d, s.l, d, s.l, NULL, NULL,
                                  0, 0),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cudaDeviceSynchronize(), cudaErrorInvalidValue);
  assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
  /* The session goes on. */
  bias = d;
  assert_int_equal(cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                  sizeof bias),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cublasLtMatmul(h, s.op, &one, d, s.l, d, s.l, &zero, d, s.l, d, s.l, NULL, NULL,
                                  0, 0),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  small_free(&s);
  assert_int_equal(cudaFree(d), cudaSuccess);
  assert_int_equal(cublasLtDestroy(h), CUBLAS_STATUS_SUCCESS);
  free(host);
}

/* What rgpu does not carry is refused at the call: other epilogues, tiled
 * orders, mixed types, a capturing stream. */
static void test_refusals(void **state) {
  (void)state;
  cublasLtHandle_t h;
  small_mm s;
  float *d, one = 1, zero = 0;
  assert_int_equal(cublasLtCreate(&h), CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cudaMalloc((void **)&d, 16 * sizeof *d), cudaSuccess);
  assert_int_equal(small_make(&s, CUBLASLT_EPILOGUE_BGRADA), 0);
  assert_int_equal(cublasLtMatmul(h, s.op, &one, d, s.l, d, s.l, &zero, d, s.l, d, s.l, NULL, NULL,
                                  0, 0),
                   CUBLAS_STATUS_NOT_SUPPORTED);
  small_free(&s);
  assert_int_equal(small_make(&s, CUBLASLT_EPILOGUE_DEFAULT), 0);
  int32_t order = CUBLASLT_ORDER_COL32;
  cublasLtMatrixLayout_t tiled;
  assert_int_equal(cublasLtMatrixLayoutCreate(&tiled, CUDA_R_32F, 4, 4, 128), CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cublasLtMatrixLayoutSetAttribute(tiled, CUBLASLT_MATRIX_LAYOUT_ORDER, &order,
                                                    sizeof order),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cublasLtMatmul(h, s.op, &one, d, tiled, d, s.l, &zero, d, s.l, d, s.l, NULL,
                                  NULL, 0, 0),
                   CUBLAS_STATUS_NOT_SUPPORTED);
  cublasLtMatrixLayoutDestroy(tiled);
  /* Sizes that do not make a matmul: cuBLASLt's INVALID_VALUE. */
  cublasLtMatrixLayout_t wide;
  assert_int_equal(cublasLtMatrixLayoutCreate(&wide, CUDA_R_32F, 4, 5, 4), CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cublasLtMatmul(h, s.op, &one, d, s.l, d, wide, &zero, d, s.l, d, s.l, NULL,
                                  NULL, 0, 0),
                   CUBLAS_STATUS_INVALID_VALUE);
  cublasLtMatrixLayoutDestroy(wide);
  small_free(&s);
  assert_int_equal(cudaFree(d), cudaSuccess);
  assert_int_equal(cublasLtDestroy(h), CUBLAS_STATUS_SUCCESS);
}

/* host[0..15]: A, the 4x4 identity; host[16..31]: a B whose product with
 * A is itself; host[32..47]: zero, for D. */
static void identity_and_b(float host[48]) {
  memset(host, 0, 48 * sizeof *host);
  for (int i = 0; i < 4; i++) host[i * 5] = 1;
  for (int i = 0; i < 16; i++) host[16 + i] = (float)(i * 3 - 7);
}

/* A cuBLAS handle cast to cublasLtHandle_t (NVIDIA documents it may stand
 * in for one) runs a matmul: D = I B is B. */
static void test_cublas_handle_cast(void **state) {
  (void)state;
  cublasHandle_t bh;
  small_mm s;
  float *d, one = 1, zero = 0, host[48] = {0}, out[16];
  identity_and_b(host);
  assert_int_equal(cublasCreate(&bh), CUBLAS_STATUS_SUCCESS);
  assert_int_equal(small_make(&s, CUBLASLT_EPILOGUE_DEFAULT), 0);
  assert_int_equal(cudaMalloc((void **)&d, sizeof host), cudaSuccess);
  assert_int_equal(cudaMemcpy(d, host, sizeof host, cudaMemcpyHostToDevice), cudaSuccess);
  assert_int_equal(cublasLtMatmul((cublasLtHandle_t)bh, s.op, &one, d, s.l, d + 16, s.l, &zero,
                                  d + 32, s.l, d + 32, s.l, NULL, NULL, 0, 0),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cudaMemcpy(out, d + 32, sizeof out, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int i = 0; i < 16; i++) assert_true(out[i] == host[16 + i]);
  small_free(&s);
  assert_int_equal(cudaFree(d), cudaSuccess);
  assert_int_equal(cublasDestroy(bh), CUBLAS_STATUS_SUCCESS);
}

/* A matmul captured from a stream is a node of the graph: nothing runs at
 * capture, each launch computes D = I B from B's bytes at that launch
 * (the server runs it as a library node of the graph). */
static void test_captured_matmul(void **state) {
  (void)state;
  cublasLtHandle_t h;
  small_mm s;
  float *d, one = 1, zero = 0, host[48] = {0}, out[16];
  identity_and_b(host);
  assert_int_equal(cublasLtCreate(&h), CUBLAS_STATUS_SUCCESS);
  assert_int_equal(small_make(&s, CUBLASLT_EPILOGUE_DEFAULT), 0);
  assert_int_equal(cudaMalloc((void **)&d, sizeof host), cudaSuccess);
  assert_int_equal(cudaMemcpy(d, host, sizeof host, cudaMemcpyHostToDevice), cudaSuccess);
  cudaStream_t st;
  cudaGraph_t g;
  cudaGraphExec_t x;
  assert_int_equal(cudaStreamCreate(&st), cudaSuccess);
  assert_int_equal(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal), cudaSuccess);
  assert_int_equal(cublasLtMatmul(h, s.op, &one, d, s.l, d + 16, s.l, &zero, d + 32, s.l, d + 32,
                                  s.l, NULL, NULL, 0, st),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cudaStreamEndCapture(st, &g), cudaSuccess);
  assert_int_equal(cudaMemcpy(out, d + 32, sizeof out, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int i = 0; i < 16; i++) assert_true(out[i] == 0); /* captured, not run */
  assert_int_equal(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
  for (int launch = 0; launch < 2; launch++) {
    for (int i = 0; i < 16; i++) host[16 + i] = (float)((i + 1) * (launch + 2));
    assert_int_equal(cudaMemcpy(d + 16, host + 16, 16 * sizeof(float), cudaMemcpyHostToDevice),
                     cudaSuccess);
    assert_int_equal(cudaGraphLaunch(x, st), cudaSuccess);
    assert_int_equal(cudaStreamSynchronize(st), cudaSuccess);
    assert_int_equal(cudaMemcpy(out, d + 32, sizeof out, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < 16; i++) assert_true(out[i] == host[16 + i]);
  }
  assert_int_equal(cudaGraphExecDestroy(x), cudaSuccess);
  assert_int_equal(cudaGraphDestroy(g), cudaSuccess);
  assert_int_equal(cudaStreamDestroy(st), cudaSuccess);
  small_free(&s);
  assert_int_equal(cudaFree(d), cudaSuccess);
  assert_int_equal(cublasLtDestroy(h), CUBLAS_STATUS_SUCCESS);
}

/* One heuristic query of the 8x8 shape (its round trip is in both runs),
 * then N rounds of: a handle, descriptors and a preference created,
 * configured and destroyed, the same query, and a matmul. */
static int heuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t l,
                     cublasLtMatmulAlgo_t *algo) {
  cublasLtMatmulPreference_t p;
  cublasLtMatmulHeuristicResult_t r;
  int n = 0;
  uint64_t ws = 0;
  if (cublasLtMatmulPreferenceCreate(&p) ||
      cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                           sizeof ws) ||
      cublasLtMatmulAlgoGetHeuristic(h, op, l, l, l, l, p, 1, &r, &n) || n != 1 ||
      cublasLtMatmulPreferenceDestroy(p))
    return 1;
  *algo = r.algo;
  return 0;
}

static int work(int rounds) {
  cublasLtHandle_t h;
  cudaStream_t s;
  float *d, one = 1, half = 0.5f;
  cublasLtMatmulAlgo_t algo;
  if (cublasLtCreate(&h) || cudaStreamCreate(&s) || cudaMalloc((void **)&d, 64 * sizeof *d) ||
      cudaMemset(d, 0, 64 * sizeof *d))
    return 1;
  {
    small_mm mm;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t l;
    if (cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) ||
        cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 8, 8, 8) || heuristic(h, op, l, &algo))
      return 1;
    cublasLtMatmulDescDestroy(op);
    cublasLtMatrixLayoutDestroy(l);
    (void)mm;
  }
  if (cudaStreamSynchronize(s)) return 1;
  for (int i = 0; i < rounds; i++) {
    cublasLtHandle_t t;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t l;
    int32_t trans = CUBLAS_OP_T;
    if (cublasLtCreate(&t) || cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) ||
        cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 8, 8, 8) || heuristic(t, op, l, &algo) ||
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof trans) ||
        cublasLtMatmul(t, op, &one, d, l, d, l, &half, d, l, d, l, &algo, NULL, 0, s) ||
        cublasLtMatmulDescDestroy(op) || cublasLtMatrixLayoutDestroy(l) || cublasLtDestroy(t))
      return 1;
  }
  /* Work queued in either case, so the final synchronization is a round
   * trip with or without the rounds (a stream known idle syncs for free). */
  if (cudaMemsetAsync(d, 0, sizeof *d, s)) return 1;
  if (cudaStreamSynchronize(s) || cublasLtDestroy(h) || cudaStreamDestroy(s) || cudaFree(d))
    return 1;
  printf("PASS cublaslt_work %d\n", rounds);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--work")) return work(atoi(argv[2]));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_deferred_error),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_cublas_handle_cast),
      cmocka_unit_test(test_captured_matmul),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
