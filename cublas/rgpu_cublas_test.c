/* Unit tests of the cuBLAS facade without a session: a program linked
 * against the built libcublas.so.13 (so every call goes through the
 * generated forwarder into libcudart.so.13) gets the locally answered
 * calls, cuBLAS's handle checks, and the generated NOT_SUPPORTED stubs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include <cublas.h> /* the legacy API: one of its stubs is checked too */
#undef cublasSgemm  /* (none of cublas_v2.h's macros are in effect here) */

#include "rgpu_cublas_tables.h"

/* The v2 API by its exported names (cublas_v2.h, which would map the plain
 * names to them, cannot be included beside cublas.h). */
static void test_versions_and_names(void **state) {
  (void)state;
  int v = -1;
  assert_int_equal(cublasGetProperty(MAJOR_VERSION, &v), CUBLAS_STATUS_SUCCESS);
  assert_int_equal(v, CUBLAS_VER_MAJOR);
  assert_int_equal(cublasGetProperty(MINOR_VERSION, &v), CUBLAS_STATUS_SUCCESS);
  assert_int_equal(v, CUBLAS_VER_MINOR);
  assert_int_equal(cublasGetProperty(PATCH_LEVEL, &v), CUBLAS_STATUS_SUCCESS);
  assert_int_equal(v, CUBLAS_VER_PATCH);
  assert_int_equal(cublasGetProperty((libraryPropertyType)7, &v), CUBLAS_STATUS_INVALID_VALUE);
  assert_int_equal(cublasGetProperty(MAJOR_VERSION, NULL), CUBLAS_STATUS_INVALID_VALUE);
  assert_int_equal(cublasGetVersion_v2(NULL, &v), CUBLAS_STATUS_SUCCESS);
  assert_int_equal(v, CUBLAS_VERSION);
  assert_int_equal((int)cublasGetCudartVersion(), CUDART_VERSION);
  assert_string_equal(cublasGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED),
                      "CUBLAS_STATUS_NOT_SUPPORTED");
  assert_string_equal(cublasGetStatusName(CUBLAS_STATUS_SUCCESS), "CUBLAS_STATUS_SUCCESS");
  assert_string_equal(cublasGetStatusName((cublasStatus_t)99), "CUBLAS_STATUS_UNKNOWN");
  assert_string_equal(cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE),
                      "CUBLAS_STATUS_INVALID_VALUE");
}

/* Every call that takes a handle refuses a NULL one as cuBLAS does. */
static void test_null_handle(void **state) {
  (void)state;
  cublasMath_t mm;
  cublasPointerMode_t pm;
  cudaStream_t s;
  float one = 1;
  assert_int_equal(cublasSetStream_v2(NULL, NULL), CUBLAS_STATUS_NOT_INITIALIZED);
  assert_int_equal(cublasGetStream_v2(NULL, &s), CUBLAS_STATUS_NOT_INITIALIZED);
  assert_int_equal(cublasGetMathMode(NULL, &mm), CUBLAS_STATUS_NOT_INITIALIZED);
  assert_int_equal(cublasSetPointerMode_v2(NULL, CUBLAS_POINTER_MODE_HOST),
                   CUBLAS_STATUS_NOT_INITIALIZED);
  assert_int_equal(cublasGetPointerMode_v2(NULL, &pm), CUBLAS_STATUS_NOT_INITIALIZED);
  assert_int_equal(cublasSetWorkspace_v2(NULL, NULL, 0), CUBLAS_STATUS_NOT_INITIALIZED);
  assert_int_equal(cublasDestroy_v2(NULL), CUBLAS_STATUS_NOT_INITIALIZED);
  assert_int_equal(cublasSgemm_v2(NULL, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, NULL, 1, NULL,
                                  1, &one, NULL, 1),
                   CUBLAS_STATUS_NOT_INITIALIZED);
  assert_int_equal(cublasCreate_v2(NULL), CUBLAS_STATUS_INVALID_VALUE);
}

/* Unimplemented exports: the generated stubs answer NOT_SUPPORTED (legacy
 * calls that return a value: zero), whatever the arguments.  Generated
 * calls (annotated or taken by `default gen`) check the handle first. */
static void test_stubs(void **state) {
  (void)state;
  float x = 2, one = 1;
  assert_int_equal(cublasSrotg_v2(NULL, &x, &x, &x, &x), CUBLAS_STATUS_NOT_SUPPORTED);
  assert_int_equal(cublasSswap_v2(NULL, 1, &x, 1, &x, 1), CUBLAS_STATUS_NOT_INITIALIZED);
  assert_int_equal(cublasSaxpy_v2(NULL, 1, &one, &x, 1, &x, 1), CUBLAS_STATUS_NOT_INITIALIZED);
  assert_int_equal(cublasSger_v2_64(NULL, 1, 1, &one, &x, 1, &x, 1, &x, 1),
                   CUBLAS_STATUS_NOT_INITIALIZED);
  assert_int_equal(cublasSgemv_v2_64(NULL, CUBLAS_OP_N, 1, 1, &one, &x, 1, &x, 1, &one, &x, 1),
                   CUBLAS_STATUS_NOT_INITIALIZED);
  assert_true(cublasSnrm2(1, &x, 1) == 0.0f);
  /* The table the generator wrote agrees: implemented calls are not in it. */
  int saw_srotg = 0;
  for (int i = 0; rgpu_cublas_stubbed_names[i]; i++) {
    assert_string_not_equal(rgpu_cublas_stubbed_names[i], "cublasSgemm_v2");
    assert_string_not_equal(rgpu_cublas_stubbed_names[i], "cublasCreate_v2");
    assert_string_not_equal(rgpu_cublas_stubbed_names[i], "cublasSswap_v2");
    saw_srotg |= !strcmp(rgpu_cublas_stubbed_names[i], "cublasSrotg_v2");
    assert_string_not_equal(rgpu_cublas_stubbed_names[i], "cublasSaxpy_v2");
  }
  assert_true(saw_srotg);
  /* 756 exports: the legacy API, cublasXt and the rot generators remain. */
  assert_true(rgpu_cublas_stubbed_count > 250 && rgpu_cublas_stubbed_count < 400);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_versions_and_names),
      cmocka_unit_test(test_null_handle),
      cmocka_unit_test(test_stubs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
