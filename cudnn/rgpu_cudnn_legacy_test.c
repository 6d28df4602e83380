/* Unit tests of the facade's training additions without a session (no
 * handle can be had, as natively without a GPU): cudnnDeriveBNTensor-
 * Descriptor's shapes, the op-tensor, LRN, reduce-tensor and dropout descriptors, and cuDNN's
 * argument
 * checks of the backward, batch-norm, op-tensor and set/scale calls, which
 * answer before anything would be sent. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <cudnn.h>

static cudnnTensorDescriptor_t tensor4(cudnnDataType_t type, int n, int c, int h, int w) {
  cudnnTensorDescriptor_t t;
  assert_int_equal(cudnnCreateTensorDescriptor(&t), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, type, n, c, h, w),
                   CUDNN_STATUS_SUCCESS);
  return t;
}

static void test_derive_bn(void **state) {
  (void)state;
  cudnnTensorDescriptor_t x = tensor4(CUDNN_DATA_HALF, 2, 3, 4, 5), d;
  assert_int_equal(cudnnCreateTensorDescriptor(&d), CUDNN_STATUS_SUCCESS);
  cudnnDataType_t type;
  int n, c, h, w, ns, cs, hs, ws;
  /* Spatial: 1xCx1x1; float parameters for half data. */
  assert_int_equal(cudnnDeriveBNTensorDescriptor(d, x, CUDNN_BATCHNORM_SPATIAL),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnGetTensor4dDescriptor(d, &type, &n, &c, &h, &w, &ns, &cs, &hs, &ws),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(type, CUDNN_DATA_FLOAT);
  assert_true(n == 1 && c == 3 && h == 1 && w == 1 && cs == 1);
  /* Per activation: 1xCxHxW, packed. */
  assert_int_equal(cudnnDeriveBNTensorDescriptor(d, x, CUDNN_BATCHNORM_PER_ACTIVATION),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnGetTensor4dDescriptor(d, &type, &n, &c, &h, &w, &ns, &cs, &hs, &ws),
                   CUDNN_STATUS_SUCCESS);
  assert_true(n == 1 && c == 3 && h == 4 && w == 5 && ns == 60 && cs == 20 && hs == 5 && ws == 1);
  /* Double data keeps double parameters. */
  cudnnTensorDescriptor_t xd = tensor4(CUDNN_DATA_DOUBLE, 2, 3, 4, 5);
  assert_int_equal(cudnnDeriveBNTensorDescriptor(d, xd, CUDNN_BATCHNORM_SPATIAL_PERSISTENT),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnGetTensor4dDescriptor(d, &type, &n, &c, &h, &w, &ns, &cs, &hs, &ws),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(type, CUDNN_DATA_DOUBLE);
  /* An unknown mode, an unset x, a NULL output. */
  assert_int_equal(cudnnDeriveBNTensorDescriptor(d, x, (cudnnBatchNormMode_t)7),
                   CUDNN_STATUS_BAD_PARAM);
  cudnnTensorDescriptor_t unset;
  assert_int_equal(cudnnCreateTensorDescriptor(&unset), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnDeriveBNTensorDescriptor(d, unset, CUDNN_BATCHNORM_SPATIAL),
                   CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnDeriveBNTensorDescriptor(NULL, x, CUDNN_BATCHNORM_SPATIAL),
                   CUDNN_STATUS_BAD_PARAM);
  cudnnDestroyTensorDescriptor(x);
  cudnnDestroyTensorDescriptor(xd);
  cudnnDestroyTensorDescriptor(d);
  cudnnDestroyTensorDescriptor(unset);
}

static void test_op_tensor_descriptor(void **state) {
  (void)state;
  cudnnOpTensorDescriptor_t op;
  assert_int_equal(cudnnCreateOpTensorDescriptor(NULL), CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnCreateOpTensorDescriptor(&op), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnSetOpTensorDescriptor(op, CUDNN_OP_TENSOR_MAX, CUDNN_DATA_DOUBLE,
                                              CUDNN_PROPAGATE_NAN),
                   CUDNN_STATUS_SUCCESS);
  cudnnOpTensorOp_t o;
  cudnnDataType_t t;
  cudnnNanPropagation_t nan;
  assert_int_equal(cudnnGetOpTensorDescriptor(op, &o, &t, &nan), CUDNN_STATUS_SUCCESS);
  assert_true(o == CUDNN_OP_TENSOR_MAX && t == CUDNN_DATA_DOUBLE && nan == CUDNN_PROPAGATE_NAN);
  assert_int_equal(cudnnSetOpTensorDescriptor(op, (cudnnOpTensorOp_t)42, CUDNN_DATA_FLOAT,
                                              CUDNN_PROPAGATE_NAN),
                   CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnGetOpTensorDescriptor(op, NULL, &t, &nan), CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnDestroyOpTensorDescriptor(op), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnDestroyOpTensorDescriptor(NULL), CUDNN_STATUS_SUCCESS);
}

/* The LRN descriptor: cuDNN's defaults, its limits, NULL outputs
 * skipped. */
static void test_lrn_descriptor(void **state) {
  (void)state;
  cudnnLRNDescriptor_t lrn;
  assert_int_equal(cudnnCreateLRNDescriptor(&lrn), CUDNN_STATUS_SUCCESS);
  unsigned n = 0;
  double alpha = 0, beta = 0, k = 0;
  assert_int_equal(cudnnGetLRNDescriptor(lrn, &n, &alpha, &beta, &k), CUDNN_STATUS_SUCCESS);
  assert_true(n == 5 && alpha == 1e-4 && beta == 0.75 && k == 2.0);
  assert_int_equal(cudnnSetLRNDescriptor(lrn, 3, 0.5, 0.5, 1.0), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnGetLRNDescriptor(lrn, &n, NULL, NULL, &k), CUDNN_STATUS_SUCCESS);
  assert_true(n == 3 && k == 1.0);
  assert_int_equal(cudnnSetLRNDescriptor(lrn, 17, 0.5, 0.5, 1.0), CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnSetLRNDescriptor(lrn, 0, 0.5, 0.5, 1.0), CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnSetLRNDescriptor(lrn, 3, 0.5, 0.001, 1.0), CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnSetLRNDescriptor(lrn, 3, 0.5, 0.5, 1e-6), CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnDestroyLRNDescriptor(lrn), CUDNN_STATUS_SUCCESS);
}

static void test_reduce_descriptor(void **state) {
  (void)state;
  cudnnReduceTensorDescriptor_t red;
  assert_int_equal(cudnnCreateReduceTensorDescriptor(&red), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnSetReduceTensorDescriptor(red, CUDNN_REDUCE_TENSOR_NORM2, CUDNN_DATA_FLOAT,
                                                  CUDNN_NOT_PROPAGATE_NAN,
                                                  CUDNN_REDUCE_TENSOR_FLATTENED_INDICES,
                                                  CUDNN_32BIT_INDICES),
                   CUDNN_STATUS_SUCCESS);
  cudnnReduceTensorOp_t op;
  cudnnDataType_t t;
  cudnnNanPropagation_t nan;
  cudnnReduceTensorIndices_t ind;
  cudnnIndicesType_t it;
  assert_int_equal(cudnnGetReduceTensorDescriptor(red, &op, &t, &nan, &ind, &it),
                   CUDNN_STATUS_SUCCESS);
  assert_true(op == CUDNN_REDUCE_TENSOR_NORM2 && t == CUDNN_DATA_FLOAT &&
              ind == CUDNN_REDUCE_TENSOR_FLATTENED_INDICES && it == CUDNN_32BIT_INDICES);
  assert_int_equal(cudnnSetReduceTensorDescriptor(red, (cudnnReduceTensorOp_t)9, CUDNN_DATA_FLOAT,
                                                  CUDNN_NOT_PROPAGATE_NAN,
                                                  CUDNN_REDUCE_TENSOR_NO_INDICES,
                                                  CUDNN_32BIT_INDICES),
                   CUDNN_STATUS_BAD_PARAM);
  size_t size;
  cudnnTensorDescriptor_t a = tensor4(CUDNN_DATA_FLOAT, 2, 3, 4, 4);
  assert_int_equal(cudnnGetReductionWorkspaceSize(NULL, red, a, a, &size), CUDNN_STATUS_BAD_PARAM);
  float one = 1, buf[4];
  assert_int_equal(cudnnReduceTensor(NULL, red, NULL, 0, NULL, 0, &one, a, buf, &one, a, buf),
                   CUDNN_STATUS_BAD_PARAM);
  cudnnDestroyTensorDescriptor(a);
  assert_int_equal(cudnnDestroyReduceTensorDescriptor(red), CUDNN_STATUS_SUCCESS);
}

/* The dropout descriptor without a handle: everything that needs one is
 * refused; the reserve size needs a session (NOT_INITIALIZED without a
 * server, as cuDNN calls without a GPU). */
static void test_dropout_descriptor(void **state) {
  (void)state;
  cudnnDropoutDescriptor_t d;
  assert_int_equal(cudnnCreateDropoutDescriptor(NULL), CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnCreateDropoutDescriptor(&d), CUDNN_STATUS_SUCCESS);
  float p;
  void *states;
  unsigned long long seed;
  char buf[16];
  assert_int_equal(cudnnSetDropoutDescriptor(d, NULL, 0.5f, buf, sizeof buf, 1),
                   CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnRestoreDropoutDescriptor(d, NULL, 0.5f, buf, sizeof buf, 1),
                   CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnGetDropoutDescriptor(d, NULL, &p, &states, &seed), CUDNN_STATUS_BAD_PARAM);
  size_t size;
  assert_int_equal(cudnnDropoutGetStatesSize(NULL, &size), CUDNN_STATUS_BAD_PARAM);
  cudnnTensorDescriptor_t x = tensor4(CUDNN_DATA_FLOAT, 1, 2, 3, 3);
  assert_int_equal(cudnnDropoutGetReserveSpaceSize(x, NULL), CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnDropoutGetReserveSpaceSize(x, &size), CUDNN_STATUS_NOT_INITIALIZED);
  cudnnDestroyTensorDescriptor(x);
  assert_int_equal(cudnnDestroyDropoutDescriptor(d), CUDNN_STATUS_SUCCESS);
}

/* Without a handle every compute call is refused at once (BAD_PARAM), and
 * the algorithm counts need one too. */
static void test_calls_check_their_arguments(void **state) {
  (void)state;
  cudnnTensorDescriptor_t x = tensor4(CUDNN_DATA_FLOAT, 2, 3, 4, 4);
  float one = 1, zero = 0, buf[4];
  int count = 0;
  assert_int_equal(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(NULL, &count),
                   CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(NULL, &count),
                   CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnConvolutionBackwardBias(NULL, &one, x, buf, &zero, x, buf),
                   CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnSoftmaxBackward(NULL, CUDNN_SOFTMAX_LOG, CUDNN_SOFTMAX_MODE_CHANNEL, &one,
                                        x, buf, x, buf, &zero, x, buf),
                   CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnSetTensor(NULL, x, buf, &one), CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnScaleTensor(NULL, x, buf, &one), CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnBatchNormalizationForwardInference(NULL, CUDNN_BATCHNORM_SPATIAL, &one,
                                                           &zero, x, buf, x, buf, x, buf, buf,
                                                           buf, buf, 1e-5),
                   CUDNN_STATUS_BAD_PARAM);
  size_t size = 0;
  assert_int_equal(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
                       NULL, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, NULL, x, &size),
                   CUDNN_STATUS_BAD_PARAM);
  cudnnDestroyTensorDescriptor(x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_derive_bn),
      cmocka_unit_test(test_op_tensor_descriptor),
      cmocka_unit_test(test_lrn_descriptor),
      cmocka_unit_test(test_reduce_descriptor),
      cmocka_unit_test(test_dropout_descriptor),
      cmocka_unit_test(test_calls_check_their_arguments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
