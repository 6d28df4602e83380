/* Unit tests of the cuDNN facade without a session: a program linked
 * against the built libcudnn.so.9 (so every call goes through the
 * generated forwarder into libcudart.so.13) gets the versions, names, the
 * handle checks and the generated NOT_SUPPORTED stubs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <cudnn.h>

/* Written by gen_cudnn.py stubs (exported under RGPU_PRIVATE_1). */
extern const char *const rgpu_cudnn_stubbed_names[];
extern const int rgpu_cudnn_stubbed_count;

static void test_versions_and_names(void **state) {
  (void)state;
  int v = -1;
  assert_int_equal(cudnnGetProperty(MAJOR_VERSION, &v), CUDNN_STATUS_SUCCESS);
  assert_int_equal(v, CUDNN_MAJOR);
  assert_int_equal(cudnnGetProperty(PATCH_LEVEL, &v), CUDNN_STATUS_SUCCESS);
  assert_int_equal(v, CUDNN_PATCHLEVEL);
  assert_int_equal(cudnnGetProperty(MAJOR_VERSION, NULL), CUDNN_STATUS_BAD_PARAM);
  assert_int_equal((int)cudnnGetVersion(), CUDNN_VERSION);
  assert_int_equal((int)cudnnGetCudartVersion(), CUDART_VERSION);
  assert_int_equal(cudnnOpsVersionCheck(), CUDNN_STATUS_SUCCESS);
  assert_string_equal(cudnnGetErrorString(CUDNN_STATUS_NOT_SUPPORTED),
                      "CUDNN_STATUS_NOT_SUPPORTED");
  assert_string_equal(cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM), "CUDNN_STATUS_BAD_PARAM");
  assert_string_equal(cudnnGetErrorString((cudnnStatus_t)77), "CUDNN_STATUS_UNKNOWN");
  char msg[8] = "x";
  cudnnGetLastErrorString(msg, sizeof msg);
  assert_string_equal(msg, "");
}

/* Without a server (the unit tests run without one) cudnnCreate fails as
 * cuDNN does without a GPU; the handle calls check their handle. */
static void test_handles_and_stubs(void **state) {
  (void)state;
  cudnnHandle_t h = NULL;
  assert_int_equal(cudnnCreate(NULL), CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnCreate(&h), CUDNN_STATUS_NOT_INITIALIZED);
  assert_null(h);
  uint64_t junk[4] = {0};
  cudaStream_t s = (cudaStream_t)1;
  assert_int_equal(cudnnSetStream((cudnnHandle_t)junk, 0), CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnGetStream((cudnnHandle_t)junk, &s), CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnDestroy(NULL), CUDNN_STATUS_SUCCESS);
  /* A stub: NOT_SUPPORTED, never a silent success. */
  assert_int_equal(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, NULL),
                   CUDNN_STATUS_NOT_SUPPORTED);
  int saw_backend = 0;
  for (int i = 0; rgpu_cudnn_stubbed_names[i]; i++) {
    assert_string_not_equal(rgpu_cudnn_stubbed_names[i], "cudnnCreate");
    saw_backend |= !strcmp(rgpu_cudnn_stubbed_names[i], "cudnnBackendExecute");
  }
  assert_true(saw_backend);
  assert_true(rgpu_cudnn_stubbed_count > 100);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_versions_and_names),
      cmocka_unit_test(test_handles_and_stubs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
