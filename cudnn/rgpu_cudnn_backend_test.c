/* Unit tests of the backend API's client-side descriptors (no session):
 * cuDNN's requestedElementCount/elementCount protocol, the finalize rules
 * (required attributes, read-only once finalized, only finalized
 * descriptors set into others), descriptor-valued attributes answered by
 * filling the program's descriptors, and destroy's reference rules. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <cudnn.h>

static cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t t) {
  cudnnBackendDescriptor_t d = NULL;
  assert_int_equal(cudnnBackendCreateDescriptor(t, &d), CUDNN_STATUS_SUCCESS);
  assert_non_null(d);
  return d;
}

/* A 4-d float tensor, finalized. */
static cudnnBackendDescriptor_t tensor(int64_t uid, const int64_t dims[4]) {
  cudnnBackendDescriptor_t t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  int64_t strides[4] = {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
  cudnnDataType_t f = CUDNN_DATA_FLOAT;
  int64_t align = 4;
  assert_int_equal(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f), 0);
  assert_int_equal(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims), 0);
  assert_int_equal(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides), 0);
  assert_int_equal(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid), 0);
  assert_int_equal(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align), 0);
  assert_int_equal(cudnnBackendFinalize(t), CUDNN_STATUS_SUCCESS);
  return t;
}

static void test_create_destroy(void **state) {
  (void)state;
  cudnnBackendDescriptor_t d = NULL;
  for (int t = 0; t <= CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR; t++) {
    assert_int_equal(cudnnBackendCreateDescriptor((cudnnBackendDescriptorType_t)t, &d), 0);
    assert_int_equal(cudnnBackendDestroyDescriptor(d), CUDNN_STATUS_SUCCESS);
  }
  assert_int_equal(cudnnBackendCreateDescriptor((cudnnBackendDescriptorType_t)999, &d),
                   CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, NULL),
                   CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnBackendDestroyDescriptor(NULL), CUDNN_STATUS_SUCCESS);
  uint64_t junk[8] = {0};
  assert_int_equal(cudnnBackendDestroyDescriptor(junk), CUDNN_STATUS_BAD_PARAM);
}

/* elementCount is the stored count; at most requestedElementCount copied. */
static void test_set_get_protocol(void **state) {
  (void)state;
  cudnnBackendDescriptor_t t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  int64_t dims[4] = {2, 3, 5, 7}, got[4] = {-1, -1, -1, -1}, n = -1;
  assert_int_equal(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims), 0);
  assert_int_equal(cudnnBackendGetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 0, &n, NULL), 0);
  assert_int_equal(n, 4);
  assert_int_equal(cudnnBackendGetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 2, &n, got), 0);
  assert_int_equal(n, 4);
  assert_int_equal(got[0], 2);
  assert_int_equal(got[1], 3);
  assert_int_equal(got[2], -1); /* not asked for: untouched */
  assert_int_equal(cudnnBackendGetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 8, &n, got), 0);
  assert_int_equal(got[3], 7);
  /* Set again replaces. */
  int64_t dims2[2] = {9, 10};
  assert_int_equal(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 2, dims2), 0);
  assert_int_equal(cudnnBackendGetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, &n, got), 0);
  assert_int_equal(n, 2);
  assert_int_equal(got[0], 9);
  /* Other element types keep their sizes: a double, a bool, a fraction. */
  cudnnBackendDescriptor_t pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  double alpha = 0.5, a2 = 0;
  assert_int_equal(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_ELU_ALPHA, CUDNN_TYPE_DOUBLE, 1, &alpha), 0);
  assert_int_equal(cudnnBackendGetAttribute(pw, CUDNN_ATTR_POINTWISE_ELU_ALPHA, CUDNN_TYPE_DOUBLE, 1, &n, &a2), 0);
  assert_true(a2 == 0.5);
  assert_int_equal(cudnnBackendDestroyDescriptor(pw), 0);
  bool virt = true, v2 = false;
  assert_int_equal(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt), 0);
  assert_int_equal(cudnnBackendGetAttribute(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &n, &v2), 0);
  assert_true(v2);
  /* Never set, or asked as another type: BAD_PARAM. */
  assert_int_equal(cudnnBackendGetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, &n, got),
                   CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnBackendGetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT32, 4, &n, got),
                   CUDNN_STATUS_BAD_PARAM);
  /* Bad arguments. */
  assert_int_equal(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 2, NULL),
                   CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, (cudnnBackendAttributeType_t)77, 1, dims),
                   CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, -1, dims),
                   CUDNN_STATUS_BAD_PARAM);
  /* A NULL array with a count requested: the count only (cuDNN's frontend
   * asks for engine notes so). */
  n = -1;
  assert_int_equal(cudnnBackendGetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 2, &n, NULL), 0);
  assert_int_equal(n, 2);
  /* elementCount may be NULL (the frontend passes none for scalars). */
  got[0] = -1;
  assert_int_equal(cudnnBackendGetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 1, NULL, got), 0);
  assert_int_equal(got[0], 9);
  assert_int_equal(cudnnBackendDestroyDescriptor(t), 0);
}

/* Required attributes; read-only once finalized; shapes checked. */
static void test_finalize_rules(void **state) {
  (void)state;
  cudnnBackendDescriptor_t t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  int64_t dims[4] = {1, 2, 3, 4}, strides[3] = {24, 12, 4}, uid = 1, align = 4;
  cudnnDataType_t f = CUDNN_DATA_FLOAT;
  assert_int_equal(cudnnBackendFinalize(t), CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f), 0);
  assert_int_equal(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims), 0);
  assert_int_equal(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 3, strides), 0);
  assert_int_equal(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align), 0);
  assert_int_equal(cudnnBackendFinalize(t), CUDNN_STATUS_BAD_PARAM); /* no unique id */
  assert_int_equal(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid), 0);
  assert_int_equal(cudnnBackendFinalize(t), CUDNN_STATUS_BAD_PARAM); /* 3 strides for 4 dims */
  int64_t strides4[4] = {24, 12, 4, 1};
  assert_int_equal(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides4), 0);
  assert_int_equal(cudnnBackendFinalize(t), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid),
                   CUDNN_STATUS_NOT_INITIALIZED);
  assert_int_equal(cudnnBackendFinalize(t), CUDNN_STATUS_NOT_INITIALIZED);
  assert_int_equal(cudnnBackendDestroyDescriptor(t), 0);

  /* A convolution's per-dimension arrays have SPATIAL_DIMS elements. */
  cudnnBackendDescriptor_t c = make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  int64_t sd = 2, one[2] = {1, 1}, zero[2] = {0, 0}, three[3] = {0, 0, 0};
  cudnnDataType_t ct = CUDNN_DATA_FLOAT;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  assert_int_equal(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &ct), 0);
  assert_int_equal(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode), 0);
  assert_int_equal(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sd), 0);
  assert_int_equal(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, one), 0);
  assert_int_equal(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, one), 0);
  assert_int_equal(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, zero), 0);
  assert_int_equal(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 3, three), 0);
  assert_int_equal(cudnnBackendFinalize(c), CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, zero), 0);
  assert_int_equal(cudnnBackendFinalize(c), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnBackendDestroyDescriptor(c), 0);

  /* An operation graph needs its handle and at least one operation. */
  cudnnBackendDescriptor_t g = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  assert_int_equal(cudnnBackendFinalize(g), CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnBackendDestroyDescriptor(g), 0);
}

/* Descriptors set into others: only finalized ones; the program may
 * destroy its own after; reading one back fills the program's descriptor. */
static void test_descriptor_attributes(void **state) {
  (void)state;
  int64_t xd[4] = {1, 2, 5, 5};
  cudnnBackendDescriptor_t x = tensor(11, xd);
  cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  cudnnBackendDescriptor_t raw = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  assert_int_equal(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw),
                   CUDNN_STATUS_BAD_PARAM); /* not finalized */
  assert_int_equal(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnBackendFinalize(op), CUDNN_STATUS_BAD_PARAM); /* no w, y, conv */
  assert_int_equal(cudnnBackendDestroyDescriptor(x), 0);
  /* Read back into a tensor descriptor the program made. */
  int64_t n = 0, dims[4] = {0}, uid = 0;
  assert_int_equal(cudnnBackendGetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &raw),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(n, 1);
  assert_int_equal(cudnnBackendGetAttribute(raw, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, &n, dims), 0);
  assert_int_equal(dims[2], 5);
  assert_int_equal(cudnnBackendGetAttribute(raw, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &n, &uid), 0);
  assert_int_equal(uid, 11);
  /* Into a descriptor of another type: BAD_PARAM. */
  cudnnBackendDescriptor_t wrong = make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  assert_int_equal(cudnnBackendGetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &wrong),
                   CUDNN_STATUS_BAD_PARAM);
  /* A destroyed handle is refused. */
  assert_int_equal(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x),
                   CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnBackendDestroyDescriptor(wrong), 0);
  assert_int_equal(cudnnBackendDestroyDescriptor(raw), 0);
  assert_int_equal(cudnnBackendDestroyDescriptor(op), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_create_destroy),
      cmocka_unit_test(test_set_get_protocol),
      cmocka_unit_test(test_finalize_rules),
      cmocka_unit_test(test_descriptor_attributes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
