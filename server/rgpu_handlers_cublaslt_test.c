/* The cuBLASLt handlers (CUBLASLT_MATMUL, CUBLASLT_HEURISTIC;
 * server/rgpu_handlers_cublaslt.c) in-process on softgpu: frames in,
 * frames out, as in rgpu_handlers_module_test.c.  A well-formed matmul
 * computes what a host reference does; hostile requests (pointers outside
 * the session's memory, sizes that overflow, unknown orders, types and
 * epilogues, mismatched layouts) get a clear error and leave the worker
 * serving.  Skips when softgpu is not part of the build. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cublasLt.h>
#include <cuda.h>

#include "rgpu_dispatch.h"
#include "rgpu_handlers_test_harness.h"
#include "rgpu_messages.h"
#include "rgpu_worker.h"

static char softgpu_lib[400];

static harness *harness_new(void) {
  if (access(softgpu_lib, R_OK)) {
    print_message("SKIP: %s not built\n", softgpu_lib);
    return NULL;
  }
  return harness_open(softgpu_lib, 11, 0);
}

static int reply_says(harness *t, const char *needle) {
  char m[1024];
  size_t n = t->h.length < sizeof m - 1 ? t->h.length : sizeof m - 1;
  memcpy(m, t->p, n);
  m[n] = 0;
  if (strstr(m, needle)) return 1;
  print_message("reply '%s' lacks '%s'\n", m, needle);
  return 0;
}

/* A 4x3 = (A^T: A is 5x4 row-major)(B: 5x3 row-major) float matmul with
 * bias and ReLU, C and D row-major 4x3 apart, all inside `mem`. */
enum { M = 4, N = 3, K = 5 };
static rgpu_msg_cublaslt_matmul_req valid_matmul(uint64_t mem) {
  rgpu_msg_cublaslt_matmul_req q = {
      .compute = CUBLAS_COMPUTE_32F, .scale = CUDA_R_32F, .transa = CUBLAS_OP_T,
      .transb = CUBLAS_OP_N, .epilogue = CUBLASLT_EPILOGUE_RELU_BIAS, .bias_type = -1,
      .bias = mem + 512,
      .a_type = CUDA_R_32F, .a_order = CUBLASLT_ORDER_ROW, .a_rows = K, .a_cols = M, .a_ld = M,
      .a_batch = 1,
      .b_type = CUDA_R_32F, .b_order = CUBLASLT_ORDER_ROW, .b_rows = K, .b_cols = N, .b_ld = N,
      .b_batch = 1,
      .c_type = CUDA_R_32F, .c_order = CUBLASLT_ORDER_ROW, .c_rows = M, .c_cols = N, .c_ld = N,
      .c_batch = 1,
      .d_type = CUDA_R_32F, .d_order = CUBLASLT_ORDER_ROW, .d_rows = M, .d_cols = N, .d_ld = N,
      .d_batch = 1,
      .alpha = 1, .beta = 1,
      .a = mem, .b = mem + 128, .c = mem + 256, .d = mem + 384};
  return q;
}

static uint32_t matmul(harness *t, const rgpu_msg_cublaslt_matmul_req *q) {
  return HARNESS_SEND(t, RGPU_OP_CUBLASLT_MATMUL, cublaslt_matmul, q, NULL, 0);
}

static void test_matmul_computes(void **state) {
  (void)state;
  harness *t = harness_new();
  if (!t) skip();
  harness_hello(t);
  uint64_t mem = harness_mem_alloc(t, 1024);
  float a[K * M], b[K * N], c[M * N], bias[M], d[M * N];
  for (int i = 0; i < K * M; i++) a[i] = (float)((i * 7) % 5 - 2);
  for (int i = 0; i < K * N; i++) b[i] = (float)((i * 3) % 5 - 2);
  for (int i = 0; i < M * N; i++) c[i] = (float)(i % 3 - 1);
  for (int i = 0; i < M; i++) bias[i] = (float)(i - 2);
  harness_htod(t, mem, a, sizeof a);
  harness_htod(t, mem + 128, b, sizeof b);
  harness_htod(t, mem + 256, c, sizeof c);
  harness_htod(t, mem + 512, bias, sizeof bias);
  rgpu_msg_cublaslt_matmul_req q = valid_matmul(mem);
  assert_int_equal(matmul(t, &q), 0);
  harness_dtoh(t, mem + 384, d, sizeof d); /* the legacy stream: after the matmul */
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      float x = c[i * N + j] + bias[i];
      for (int p = 0; p < K; p++) x += a[p * M + i] * b[p * N + j];
      assert_true(d[i * N + j] == (x > 0 ? x : 0));
    }
  harness_free(t);
}

static void test_hostile_matmuls(void **state) {
  (void)state;
  harness *t = harness_new();
  if (!t) skip();
  harness_hello(t);
  uint64_t mem = harness_mem_alloc(t, 1024);
  rgpu_msg_cublaslt_matmul_req q;
#define BAD(mutation, status, needle) \
  q = valid_matmul(mem);              \
  mutation;                           \
  assert_int_equal(matmul(t, &q), status); \
  assert_true(reply_says(t, needle))
  BAD(q.d = mem + 1000, CUDA_ERROR_INVALID_VALUE, "D (48 bytes at");
  BAD(q.d = 0x1000, CUDA_ERROR_INVALID_VALUE, "not inside a device allocation");
  BAD(q.bias = mem + 1020, CUDA_ERROR_INVALID_VALUE, "the bias");
  BAD(q.a_ld = INT32_MAX, CUDA_ERROR_INVALID_VALUE, "A (");
  BAD(q.a_rows = 1ull << 40, CUDA_ERROR_INVALID_VALUE, "A's layout");
  BAD((q.b_batch = 2, q.a_batch = 2, q.c_batch = 2, q.d_batch = 2, q.d_stride = INT64_MAX),
      CUDA_ERROR_INVALID_VALUE, "D's size overflows");
  BAD(q.c_stride = -1, CUDA_ERROR_INVALID_VALUE, "C's layout");
  BAD(q.a_order = CUBLASLT_ORDER_COL32, CUDA_ERROR_NOT_SUPPORTED, "order");
  BAD(q.a_type = CUDA_R_8I, CUDA_ERROR_NOT_SUPPORTED, "types");
  BAD(q.epilogue = CUBLASLT_EPILOGUE_DGELU, CUDA_ERROR_NOT_SUPPORTED, "epilogue");
  BAD(q.bias_type = CUDA_R_64F, CUDA_ERROR_NOT_SUPPORTED, "bias type");
  BAD(q.b_cols = 2, CUDA_ERROR_INVALID_VALUE, "do not make a matmul");
  BAD(q.c_batch = 2, CUDA_ERROR_INVALID_VALUE, "batch counts");
  BAD(q.d_batch = 0, CUDA_ERROR_INVALID_VALUE, "D's layout");
  BAD(q.transa = 7, CUDA_ERROR_INVALID_VALUE, "bad operation");
  BAD((q.pointer_mode = 1, q.alpha_dev = mem + 1022, q.beta_dev = mem), CUDA_ERROR_INVALID_VALUE,
      "alpha");
  BAD((q.workspace = mem + 1000, q.workspace_size = 64), CUDA_ERROR_INVALID_VALUE, "workspace");
  BAD(q.algo = ((rgpu_bytes){"abc", 3}), CUDA_ERROR_INVALID_VALUE, "algorithm of 3 bytes");
  BAD(q.stream = 77, CUDA_ERROR_INVALID_HANDLE, "unknown stream");
#undef BAD
  /* The worker goes on serving. */
  q = valid_matmul(mem);
  assert_int_equal(matmul(t, &q), 0);
  harness_free(t);
}

static void test_heuristic(void **state) {
  (void)state;
  harness *t = harness_new();
  if (!t) skip();
  harness_hello(t);
  rgpu_msg_cublaslt_matmul_req m = valid_matmul(0);
  rgpu_msg_cublaslt_heuristic_req q = {
      .compute = m.compute, .scale = m.scale, .transa = m.transa, .transb = m.transb,
      .epilogue = m.epilogue, .bias_type = -1,
      .a_type = m.a_type, .a_order = m.a_order, .a_rows = m.a_rows, .a_cols = m.a_cols,
      .a_ld = m.a_ld, .a_batch = 1,
      .b_type = m.b_type, .b_order = m.b_order, .b_rows = m.b_rows, .b_cols = m.b_cols,
      .b_ld = m.b_ld, .b_batch = 1,
      .c_type = m.c_type, .c_order = m.c_order, .c_rows = m.c_rows, .c_cols = m.c_cols,
      .c_ld = m.c_ld, .c_batch = 1,
      .d_type = m.d_type, .d_order = m.d_order, .d_rows = m.d_rows, .d_cols = m.d_cols,
      .d_ld = m.d_ld, .d_batch = 1, .requested = 4};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUBLASLT_HEURISTIC, cublaslt_heuristic, &q, NULL, 0), 0);
  rgpu_msg_cublaslt_heuristic_rep r;
  assert_int_equal(rgpu_msg_cublaslt_heuristic_rep_decode(t->p, t->h.length, &r), 0);
  assert_int_equal(r.workspace.count, 1);
  assert_int_equal(r.algo.count, 8);
  assert_int_equal(rgpu_array_u64(&r.workspace, 0), 0);
  assert_int_equal(rgpu_array_u32(&r.state, 0), CUBLAS_STATUS_SUCCESS);
  q.requested = 0;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUBLASLT_HEURISTIC, cublaslt_heuristic, &q, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  q.requested = 1;
  q.d_order = 9;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUBLASLT_HEURISTIC, cublaslt_heuristic, &q, NULL, 0),
                   CUDA_ERROR_NOT_SUPPORTED);
  harness_free(t);
}

int main(void) {
  char self[360];
  harness_exe_dir(self, sizeof self);
  snprintf(softgpu_lib, sizeof softgpu_lib, "%s/../lib/libsoftgpu.so", self);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matmul_computes),
      cmocka_unit_test(test_hostile_matmuls),
      cmocka_unit_test(test_heuristic),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
