/* Unit tests of the cuBLASLt facade without a session: a program linked
 * against the built libcublasLt.so.13 (so every call goes through the
 * generated forwarder into libcudart.so.13) gets the client-side
 * descriptors (every attribute mirrored with cuBLASLt's sizes, defaults
 * and size protocol), the handle checks and the generated NOT_SUPPORTED
 * stubs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <cublasLt.h>

/* Written by gen_cublaslt.py stubs (exported under RGPU_PRIVATE_1). */
extern const char *const rgpu_cublaslt_stubbed_names[];
extern const int rgpu_cublaslt_stubbed_count;

static void test_versions_and_names(void **state) {
  (void)state;
  int v = -1;
  assert_int_equal(cublasLtGetProperty(MAJOR_VERSION, &v), CUBLAS_STATUS_SUCCESS);
  assert_int_equal(v, CUBLAS_VER_MAJOR);
  assert_int_equal(cublasLtGetProperty(PATCH_LEVEL, &v), CUBLAS_STATUS_SUCCESS);
  assert_int_equal(v, CUBLAS_VER_PATCH);
  assert_int_equal(cublasLtGetProperty(MAJOR_VERSION, NULL), CUBLAS_STATUS_INVALID_VALUE);
  assert_int_equal((int)cublasLtGetVersion(), CUBLAS_VERSION);
  assert_int_equal((int)cublasLtGetCudartVersion(), CUDART_VERSION);
  assert_string_equal(cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED),
                      "CUBLAS_STATUS_NOT_SUPPORTED");
  assert_string_equal(cublasLtGetStatusName((cublasStatus_t)99), "CUBLAS_STATUS_UNKNOWN");
  assert_string_equal(cublasLtGetStatusString(CUBLAS_STATUS_INVALID_VALUE),
                      "CUBLAS_STATUS_INVALID_VALUE");
}

/* The matmul descriptor: defaults, set/get of several sizes, and the
 * sizeWritten protocol of GetAttribute. */
static void test_matmul_desc(void **state) {
  (void)state;
  cublasLtMatmulDesc_t d;
  int32_t i32 = -7;
  uint32_t u32 = 0;
  size_t written = 0;
  assert_int_equal(cublasLtMatmulDescCreate(NULL, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                   CUBLAS_STATUS_INVALID_VALUE);
  assert_int_equal(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_64F, CUDA_R_64F),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cublasLtMatmulDescGetAttribute(d, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &i32,
                                                  sizeof i32, &written),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(i32, CUBLAS_COMPUTE_64F);
  assert_int_equal(written, 4);
  assert_int_equal(cublasLtMatmulDescGetAttribute(d, CUBLASLT_MATMUL_DESC_SCALE_TYPE, &i32,
                                                  sizeof i32, NULL),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(i32, CUDA_R_64F);
  /* Documented defaults. */
  assert_int_equal(cublasLtMatmulDescGetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &i32, 4, NULL),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(i32, CUBLAS_OP_N);
  assert_int_equal(cublasLtMatmulDescGetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &u32, 4, NULL),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(u32, CUBLASLT_EPILOGUE_DEFAULT);
  assert_int_equal(cublasLtMatmulDescGetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &i32, 4,
                                                  NULL),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(i32, -1);
  assert_int_equal(cublasLtMatmulDescGetAttribute(d, CUBLASLT_MATMUL_DESC_FILL_MODE, &i32, 4,
                                                  NULL),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(i32, CUBLAS_FILL_MODE_FULL);
  /* Set and read back: a 4-byte enum, a pointer, a 1-byte flag. */
  int32_t t = CUBLAS_OP_T;
  assert_int_equal(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &t, sizeof t),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cublasLtMatmulDescGetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &i32, 4, NULL),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(i32, CUBLAS_OP_T);
  const void *bias = (const void *)(uintptr_t)0x7000100, *got = NULL;
  assert_int_equal(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                  sizeof bias),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cublasLtMatmulDescGetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &got,
                                                  sizeof got, &written),
                   CUBLAS_STATUS_SUCCESS);
  assert_ptr_equal(got, bias);
  assert_int_equal(written, sizeof(void *));
  int8_t fast = 1, fast_got = 0;
  assert_int_equal(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, 1),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cublasLtMatmulDescGetAttribute(d, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_got,
                                                  1, NULL),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(fast_got, 1);
  /* The size protocol: size 0 asks for the size (sizeWritten required). */
  written = 0;
  assert_int_equal(cublasLtMatmulDescGetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, NULL,
                                                  0, &written),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(written, 8);
  assert_int_equal(cublasLtMatmulDescGetAttribute(d, CUBLASLT_MATMUL_DESC_FAST_ACCUM, NULL, 0,
                                                  &written),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(written, 1);
  assert_int_equal(cublasLtMatmulDescGetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, NULL, 0, NULL),
                   CUBLAS_STATUS_INVALID_VALUE);
  /* Wrong sizes, NULL buffers, unknown attributes. */
  int64_t i64 = 0;
  assert_int_equal(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &i64, 8),
                   CUBLAS_STATUS_INVALID_VALUE);
  assert_int_equal(cublasLtMatmulDescGetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &i64, 8, NULL),
                   CUBLAS_STATUS_INVALID_VALUE);
  assert_int_equal(cublasLtMatmulDescGetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, NULL, 4, NULL),
                   CUBLAS_STATUS_INVALID_VALUE);
  assert_int_equal(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, NULL, 4),
                   CUBLAS_STATUS_INVALID_VALUE);
  assert_int_equal(cublasLtMatmulDescSetAttribute(d, (cublasLtMatmulDescAttributes_t)9, &i32, 4),
                   CUBLAS_STATUS_INVALID_VALUE);
  assert_int_equal(cublasLtMatmulDescSetAttribute(NULL, CUBLASLT_MATMUL_DESC_TRANSA, &t, 4),
                   CUBLAS_STATUS_INVALID_VALUE);
  assert_int_equal(cublasLtMatmulDescDestroy(d), CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cublasLtMatmulDescDestroy(NULL), CUBLAS_STATUS_SUCCESS);
}

static void test_layout(void **state) {
  (void)state;
  cublasLtMatrixLayout_t l;
  uint64_t u64 = 0;
  int64_t i64 = 0;
  int32_t i32 = 0;
  uint32_t u32 = 0;
  assert_int_equal(cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, 37, 29, 40), CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_TYPE, &u32, 4, NULL),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(u32, CUDA_R_16BF);
  assert_int_equal(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ROWS, &u64, 8, NULL),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(u64, 37);
  assert_int_equal(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_COLS, &u64, 8, NULL),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(u64, 29);
  assert_int_equal(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_LD, &i64, 8, NULL),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(i64, 40);
  assert_int_equal(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &i32, 4, NULL),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(i32, CUBLASLT_ORDER_COL);
  assert_int_equal(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &i32, 4,
                                                    NULL),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(i32, 1);
  int32_t row = CUBLASLT_ORDER_ROW, batch = 6;
  int64_t stride = 4096;
  assert_int_equal(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &row, 4),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                                    4),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                    &stride, 8),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &i32, 4, NULL),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(i32, CUBLASLT_ORDER_ROW);
  assert_int_equal(cublasLtMatrixLayoutGetAttribute(
                       l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &i64, 8, NULL),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(i64, 4096);
  /* The rows are a uint64_t: a 4-byte buffer is refused. */
  assert_int_equal(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ROWS, &i32, 4),
                   CUBLAS_STATUS_INVALID_VALUE);
  size_t written = 0;
  assert_int_equal(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ROWS, NULL, 0,
                                                    &written),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(written, 8);
  assert_int_equal(cublasLtMatrixLayoutDestroy(l), CUBLAS_STATUS_SUCCESS);
}

static void test_preference(void **state) {
  (void)state;
  cublasLtMatmulPreference_t p;
  uint64_t u64 = 0;
  uint32_t u32 = 0;
  float f = -1;
  assert_int_equal(cublasLtMatmulPreferenceCreate(&p), CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cublasLtMatmulPreferenceGetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                        &u64, 8, NULL),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(u64, 0);
  assert_int_equal(cublasLtMatmulPreferenceGetAttribute(
                       p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &u32, 4, NULL),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(u32, 256);
  assert_int_equal(cublasLtMatmulPreferenceGetAttribute(
                       p, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &u32, 4, NULL),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(u32, CUBLASLT_REDUCTION_SCHEME_MASK);
  assert_int_equal(cublasLtMatmulPreferenceGetAttribute(p, CUBLASLT_MATMUL_PREF_IMPL_MASK, &u64, 8,
                                                        NULL),
                   CUBLAS_STATUS_SUCCESS);
  assert_true(u64 == UINT64_MAX);
  assert_int_equal(cublasLtMatmulPreferenceGetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT, &f,
                                                        4, NULL),
                   CUBLAS_STATUS_SUCCESS);
  assert_true(f == 0.0f);
  uint64_t ws = 1u << 22;
  assert_int_equal(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                        &ws, sizeof ws),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(cublasLtMatmulPreferenceGetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                        &u64, 8, NULL),
                   CUBLAS_STATUS_SUCCESS);
  assert_int_equal(u64, 1u << 22);
  /* A 4-byte workspace size (a common mistake) is refused. */
  assert_int_equal(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                        &u32, 4),
                   CUBLAS_STATUS_INVALID_VALUE);
  assert_int_equal(cublasLtMatmulPreferenceDestroy(p), CUBLAS_STATUS_SUCCESS);
}

/* Calls with a NULL handle or descriptor, and the stubs. */
static void test_handles_and_stubs(void **state) {
  (void)state;
  float one = 1;
  cublasLtMatmulHeuristicResult_t r;
  int n = 0;
  assert_int_equal(cublasLtCreate(NULL), CUBLAS_STATUS_INVALID_VALUE);
  assert_int_equal(cublasLtDestroy(NULL), CUBLAS_STATUS_NOT_INITIALIZED);
  assert_int_equal(cublasLtMatmul(NULL, NULL, &one, NULL, NULL, NULL, NULL, &one, NULL, NULL, NULL,
                                  NULL, NULL, NULL, 0, NULL),
                   CUBLAS_STATUS_NOT_INITIALIZED);
  assert_int_equal(cublasLtMatmulAlgoGetHeuristic(NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1, &r,
                                                  &n),
                   CUBLAS_STATUS_NOT_INITIALIZED);
  assert_int_equal(cublasLtMatrixTransform(NULL, NULL, &one, NULL, NULL, &one, NULL, NULL, NULL,
                                           NULL, NULL),
                   CUBLAS_STATUS_NOT_SUPPORTED);
  cublasLtMatmulAlgo_t algo;
  assert_int_equal(cublasLtMatmulAlgoInit(NULL, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_32F,
                                          CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, 0, &algo),
                   CUBLAS_STATUS_NOT_SUPPORTED);
  int saw_transform = 0;
  for (int i = 0; rgpu_cublaslt_stubbed_names[i]; i++) {
    assert_string_not_equal(rgpu_cublaslt_stubbed_names[i], "cublasLtMatmul");
    assert_string_not_equal(rgpu_cublaslt_stubbed_names[i], "cublasLtMatmulDescSetAttribute");
    saw_transform |= !strcmp(rgpu_cublaslt_stubbed_names[i], "cublasLtMatrixTransform");
  }
  assert_true(saw_transform);
  assert_true(rgpu_cublaslt_stubbed_count > 150);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_versions_and_names), cmocka_unit_test(test_matmul_desc),
      cmocka_unit_test(test_layout),             cmocka_unit_test(test_preference),
      cmocka_unit_test(test_handles_and_stubs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
