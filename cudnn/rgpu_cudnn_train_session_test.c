/* The training additions of the cuDNN facade in a live session (ctest runs
 * it under `rgpu run` on softgpu): rgpu's own behaviour, which the e2e
 * program (also run natively) cannot assert: the backward and batch-norm
 * calls' deferred errors and the session going on after them, softgpu's
 * answers to the backward algorithm and batch-norm size queries, and the
 * refusals of what rgpu does not carry (fused batch-norm ops, SetTensor of
 * other types) as NOT_SUPPORTED; dropout's sizes and deferred errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <cuda_runtime_api.h>
#include <cudnn.h>

static cudnnTensorDescriptor_t tensor4(cudnnDataType_t type, int n, int c, int h, int w) {
  cudnnTensorDescriptor_t t;
  assert_int_equal(cudnnCreateTensorDescriptor(&t), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, type, n, c, h, w),
                   CUDNN_STATUS_SUCCESS);
  return t;
}

typedef struct {
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t cv;
} conv_descs;

/* x 1x3x8x8, w 4x3x3x3, padding 1: y 1x4x8x8. */
static conv_descs conv_make(void) {
  conv_descs c = {tensor4(CUDNN_DATA_FLOAT, 1, 3, 8, 8), tensor4(CUDNN_DATA_FLOAT, 1, 4, 8, 8),
                  NULL, NULL};
  assert_int_equal(cudnnCreateFilterDescriptor(&c.w), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnSetFilter4dDescriptor(c.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, 3, 3, 3),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnCreateConvolutionDescriptor(&c.cv), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnSetConvolution2dDescriptor(c.cv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                                   CUDNN_DATA_FLOAT),
                   CUDNN_STATUS_SUCCESS);
  return c;
}

static void conv_free(conv_descs *c) {
  cudnnDestroyTensorDescriptor(c->x);
  cudnnDestroyTensorDescriptor(c->y);
  cudnnDestroyFilterDescriptor(c->w);
  cudnnDestroyConvolutionDescriptor(c->cv);
}

/* A backward call or batch-norm whose output is host memory is accepted
 * (no round trip checks it) and fails on the server: the next
 * synchronization reports it like a failed launch, not sticky; then valid
 * calls compute. */
static void test_deferred_errors(void **state) {
  (void)state;
  cudnnHandle_t h;
  assert_int_equal(cudnnCreate(&h), CUDNN_STATUS_SUCCESS);
  conv_descs c = conv_make();
  float *x, *dy, *dw, one = 1, zero = 0;
  float *host = calloc(4 * 3 * 3 * 3, sizeof *host);
  assert_int_equal(cudaMalloc((void **)&x, 192 * sizeof *x), cudaSuccess);
  assert_int_equal(cudaMalloc((void **)&dy, 256 * sizeof *dy), cudaSuccess);
  assert_int_equal(cudaMalloc((void **)&dw, 108 * sizeof *dw), cudaSuccess);
  assert_int_equal(cudaMemset(x, 0, 192 * sizeof *x), cudaSuccess);
  assert_int_equal(cudaMemset(dy, 0, 256 * sizeof *dy), cudaSuccess);
  assert_int_equal(cudnnConvolutionBackwardFilter(h, &one, c.x, x, c.y, dy, c.cv,
                                                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, NULL, 0,
                                                  &zero, c.w, host),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudaDeviceSynchronize(), cudaErrorInvalidValue);
  assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  /* Batch-norm backward with its dscale on the host, the same way. */
  cudnnTensorDescriptor_t bx = tensor4(CUDNN_DATA_FLOAT, 2, 3, 2, 2), p;
  assert_int_equal(cudnnCreateTensorDescriptor(&p), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnDeriveBNTensorDescriptor(p, bx, CUDNN_BATCHNORM_SPATIAL),
                   CUDNN_STATUS_SUCCESS);
  float *params;
  assert_int_equal(cudaMalloc((void **)&params, 16 * sizeof *params), cudaSuccess);
  assert_int_equal(cudaMemset(params, 0, 16 * sizeof *params), cudaSuccess);
  assert_int_equal(cudnnBatchNormalizationBackward(h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one,
                                                   &zero, bx, x, bx, dy, bx, dw, p, params, host,
                                                   params + 4, 1e-5, NULL, NULL),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudaDeviceSynchronize(), cudaErrorInvalidValue);
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  /* The session goes on: batch-norm training of known values computes. */
  float xv[24], yv[24], scale[3] = {2, 2, 2}, bias[3] = {1, 1, 1};
  for (int i = 0; i < 24; i++) xv[i] = (float)(i % 2); /* every channel: mean 0.5, var 0.25 */
  assert_int_equal(cudaMemcpy(x, xv, sizeof xv, cudaMemcpyHostToDevice), cudaSuccess);
  assert_int_equal(cudaMemcpy(params, scale, sizeof scale, cudaMemcpyHostToDevice), cudaSuccess);
  assert_int_equal(cudaMemcpy(params + 4, bias, sizeof bias, cudaMemcpyHostToDevice), cudaSuccess);
  assert_int_equal(cudnnBatchNormalizationForwardTraining(h, CUDNN_BATCHNORM_SPATIAL, &one, &zero,
                                                          bx, x, bx, dy, p, params, params + 4,
                                                          1.0, NULL, NULL, 0.0, NULL, NULL),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudaMemcpy(yv, dy, sizeof yv, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int i = 0; i < 24; i++) assert_float_equal(yv[i], (i % 2 ? 3.0 : -1.0), 1e-5);
  cudaFree(x);
  cudaFree(dy);
  cudaFree(dw);
  cudaFree(params);
  free(host);
  conv_free(&c);
  cudnnDestroyTensorDescriptor(bx);
  cudnnDestroyTensorDescriptor(p);
  assert_int_equal(cudnnDestroy(h), CUDNN_STATUS_SUCCESS);
}

/* softgpu's answers: one algorithm per direction (ALGO_1), no workspace,
 * whichever query asks; the repeats come from the client's cache. */
static void test_backward_algorithms(void **state) {
  (void)state;
  cudnnHandle_t h;
  assert_int_equal(cudnnCreate(&h), CUDNN_STATUS_SUCCESS);
  conv_descs c = conv_make();
  int max = 0, got = 0;
  assert_int_equal(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max), CUDNN_STATUS_SUCCESS);
  assert_int_equal(max, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
  assert_int_equal(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(max, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
  float *buf;
  assert_int_equal(cudaMalloc((void **)&buf, 1024 * sizeof *buf), cudaSuccess);
  for (int round = 0; round < 2; round++) {
    cudnnConvolutionBwdDataAlgoPerf_t pd[4];
    cudnnConvolutionBwdFilterAlgoPerf_t pf[4];
    assert_int_equal(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, c.w, c.y, c.cv, c.x, 4, &got, pd),
                     CUDNN_STATUS_SUCCESS);
    assert_int_equal(got, 1);
    assert_int_equal(pd[0].algo, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1);
    assert_int_equal(pd[0].memory, 0);
    assert_int_equal(cudnnFindConvolutionBackwardDataAlgorithmEx(h, c.w, buf, c.y, buf, c.cv, c.x,
                                                                 buf, 4, &got, pd, NULL, 0),
                     CUDNN_STATUS_SUCCESS);
    assert_int_equal(got, 1);
    assert_int_equal(cudnnFindConvolutionBackwardFilterAlgorithm(h, c.x, c.y, c.cv, c.w, 4, &got, pf),
                     CUDNN_STATUS_SUCCESS);
    assert_int_equal(got, 1);
    assert_int_equal(pf[0].algo, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
    assert_int_equal(pf[0].determinism, CUDNN_DETERMINISTIC);
  }
  size_t ws = 1;
  assert_int_equal(cudnnGetConvolutionBackwardFilterWorkspaceSize(
                       h, c.x, c.y, c.cv, c.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT, &ws),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(ws, 0);
  /* A dy that is not the convolution's output: the forward's status. */
  assert_int_equal(cudnnGetConvolutionBackwardDataWorkspaceSize(
                       h, c.w, c.x, c.cv, c.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, &ws),
                   CUDNN_STATUS_NOT_SUPPORTED);
  cudaFree(buf);
  conv_free(&c);
  assert_int_equal(cudnnDestroy(h), CUDNN_STATUS_SUCCESS);
}

/* What rgpu does not carry answers NOT_SUPPORTED at once: fused batch-norm
 * ops (the Ex forms and their sizes) and SetTensor of a half tensor; ops
 * BN's sizes are 0 on softgpu. */
static void test_refusals(void **state) {
  (void)state;
  cudnnHandle_t h;
  assert_int_equal(cudnnCreate(&h), CUDNN_STATUS_SUCCESS);
  cudnnTensorDescriptor_t x = tensor4(CUDNN_DATA_FLOAT, 2, 3, 2, 2), p;
  assert_int_equal(cudnnCreateTensorDescriptor(&p), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnDeriveBNTensorDescriptor(p, x, CUDNN_BATCHNORM_SPATIAL),
                   CUDNN_STATUS_SUCCESS);
  size_t size = 1;
  assert_int_equal(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
                       h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, x, NULL, x, p, NULL,
                       &size),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(size, 0);
  assert_int_equal(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
                       h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, NULL, x, &size),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(size, 0);
  assert_int_equal(cudnnGetBatchNormalizationBackwardExWorkspaceSize(
                       h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN_ACTIVATION, x, x, x,
                       NULL, x, p, NULL, &size),
                   CUDNN_STATUS_NOT_SUPPORTED);
  float *d, one = 1, zero = 0;
  assert_int_equal(cudaMalloc((void **)&d, 64 * sizeof *d), cudaSuccess);
  assert_int_equal(cudnnBatchNormalizationForwardTrainingEx(
                       h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION, &one,
                       &zero, x, d, x, d, x, d, p, d, d, 0.1, NULL, NULL, 1e-5, NULL, NULL, NULL,
                       NULL, 0, NULL, 0),
                   CUDNN_STATUS_NOT_SUPPORTED);
  cudnnTensorDescriptor_t half = tensor4(CUDNN_DATA_HALF, 1, 1, 2, 2);
  uint16_t v = 0x3c00;
  assert_int_equal(cudnnSetTensor(h, half, d, &v), CUDNN_STATUS_NOT_SUPPORTED);
  /* Nothing was sent: the session has no error to report. */
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(d);
  cudnnDestroyTensorDescriptor(x);
  cudnnDestroyTensorDescriptor(p);
  cudnnDestroyTensorDescriptor(half);
  assert_int_equal(cudnnDestroy(h), CUDNN_STATUS_SUCCESS);
}

/* Dropout's sizes are softgpu's (16 bytes of states, a byte per element
 * of reserve space; the reserve size, which has no handle, answered for
 * the current device); a reserve space too short is the server's
 * deferred error, not sticky; then a forward keeps or drops every element
 * whole. */
static void test_dropout(void **state) {
  (void)state;
  cudnnHandle_t h;
  assert_int_equal(cudnnCreate(&h), CUDNN_STATUS_SUCCESS);
  cudnnTensorDescriptor_t x = tensor4(CUDNN_DATA_FLOAT, 1, 1, 8, 8);
  size_t states_size = 0, reserve_size = 0;
  assert_int_equal(cudnnDropoutGetStatesSize(h, &states_size), CUDNN_STATUS_SUCCESS);
  assert_int_equal(states_size, 16);
  assert_int_equal(cudnnDropoutGetReserveSpaceSize(x, &reserve_size), CUDNN_STATUS_SUCCESS);
  assert_int_equal(reserve_size, 64);
  void *states, *reserve;
  float *d, v[64], out[64];
  assert_int_equal(cudaMalloc(&states, states_size), cudaSuccess);
  assert_int_equal(cudaMalloc(&reserve, reserve_size), cudaSuccess);
  assert_int_equal(cudaMalloc((void **)&d, sizeof v), cudaSuccess);
  for (int i = 0; i < 64; i++) v[i] = 1.0f + (float)i;
  assert_int_equal(cudaMemcpy(d, v, sizeof v, cudaMemcpyHostToDevice), cudaSuccess);
  cudnnDropoutDescriptor_t drop;
  assert_int_equal(cudnnCreateDropoutDescriptor(&drop), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnSetDropoutDescriptor(drop, h, 0.5f, states, states_size, 3),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnDropoutForward(h, drop, x, d, x, d, reserve, 8), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudaDeviceSynchronize(), cudaErrorInvalidValue);
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  assert_int_equal(cudnnDropoutForward(h, drop, x, d, x, d, reserve, reserve_size),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudaMemcpy(out, d, sizeof out, cudaMemcpyDeviceToHost), cudaSuccess);
  int dropped = 0;
  for (int i = 0; i < 64; i++) {
    assert_true(out[i] == 0 || out[i] == 2 * v[i]);
    dropped += out[i] == 0;
  }
  assert_true(dropped > 10 && dropped < 54);
  cudaFree(states);
  cudaFree(reserve);
  cudaFree(d);
  cudnnDestroyDropoutDescriptor(drop);
  cudnnDestroyTensorDescriptor(x);
  assert_int_equal(cudnnDestroy(h), CUDNN_STATUS_SUCCESS);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_deferred_errors),
      cmocka_unit_test(test_backward_algorithms),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_dropout),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
