/* The cuDNN facade in a live session (ctest runs it under `rgpu run` on
 * softgpu): behaviour that is rgpu's own and so has no place in the e2e
 * program, which must also pass natively: deferred errors of the
 * asynchronous forward calls, the session going on after them, the stream
 * a handle runs on, and the algorithm cache answering repeats without a
 * round trip (RGPU_STATS is not needed: the cache is observed through the
 * server staying out of the answer). */
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

static cudnnTensorDescriptor_t tensor4(int n, int c, int h, int w) {
  cudnnTensorDescriptor_t t;
  assert_int_equal(cudnnCreateTensorDescriptor(&t), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w),
                   CUDNN_STATUS_SUCCESS);
  return t;
}

/* A forward call whose tensor is not device memory of the session is
 * accepted (no round trip checks it) and fails on the server: the next
 * synchronizing call reports it, like a failed kernel launch, and it is
 * not sticky. */
static void test_deferred_errors(void **state) {
  (void)state;
  cudnnHandle_t h;
  assert_int_equal(cudnnCreate(&h), CUDNN_STATUS_SUCCESS);
  cudnnTensorDescriptor_t t = tensor4(1, 2, 3, 3);
  cudnnActivationDescriptor_t relu;
  assert_int_equal(cudnnCreateActivationDescriptor(&relu), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnSetActivationDescriptor(relu, CUDNN_ACTIVATION_RELU,
                                                CUDNN_NOT_PROPAGATE_NAN, 0),
                   CUDNN_STATUS_SUCCESS);
  float *d, *host = calloc(18, sizeof *host), one = 1, zero = 0;
  assert_int_equal(cudaMalloc((void **)&d, 18 * sizeof *d), cudaSuccess);
  assert_int_equal(cudaMemset(d, 0, 18 * sizeof *d), cudaSuccess);
  assert_int_equal(cudnnActivationForward(h, relu, &one, t, d, &zero, t, host),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudaDeviceSynchronize(), cudaErrorInvalidValue);
  assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  /* A tensor running past the end of its allocation, the same way. */
  cudnnTensorDescriptor_t big = tensor4(1, 16, 4096, 4096); /* 1 GiB: past the arena cudart carves small allocations from */
  assert_int_equal(cudnnSoftmaxForward(h, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &one,
                                       big, d, &zero, big, d),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudaDeviceSynchronize(), cudaErrorInvalidValue);
  /* The session goes on: a valid call computes. */
  float x[18], y[18];
  for (int i = 0; i < 18; i++) x[i] = (float)(i % 5) - 2;
  assert_int_equal(cudaMemcpy(d, x, sizeof x, cudaMemcpyHostToDevice), cudaSuccess);
  assert_int_equal(cudnnActivationForward(h, relu, &one, t, d, &zero, t, d), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudaMemcpy(y, d, sizeof y, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int i = 0; i < 18; i++) assert_true(y[i] == (x[i] > 0 ? x[i] : 0));
  cudaFree(d);
  free(host);
  cudnnDestroyTensorDescriptor(t);
  cudnnDestroyTensorDescriptor(big);
  cudnnDestroyActivationDescriptor(relu);
  assert_int_equal(cudnnDestroy(h), CUDNN_STATUS_SUCCESS);
}

/* The handle's stream: work on it is ordered with the stream's copies, and
 * a stream destroyed after cudnnSetStream fails the next call (cuDNN's
 * launch fails), not cudnnSetStream. */
static void test_stream(void **state) {
  (void)state;
  cudnnHandle_t h;
  cudaStream_t s;
  assert_int_equal(cudnnCreate(&h), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudaStreamCreate(&s), cudaSuccess);
  assert_int_equal(cudnnSetStream(h, s), CUDNN_STATUS_SUCCESS);
  cudnnTensorDescriptor_t a = tensor4(1, 4, 1, 1), c = tensor4(2, 4, 2, 2);
  float *dc, *da, one = 1, bias[4] = {1, 2, 3, 4}, out[32];
  assert_int_equal(cudaMalloc((void **)&dc, sizeof out), cudaSuccess);
  assert_int_equal(cudaMalloc((void **)&da, sizeof bias), cudaSuccess);
  assert_int_equal(cudaMemsetAsync(dc, 0, sizeof out, s), cudaSuccess);
  assert_int_equal(cudaMemcpyAsync(da, bias, sizeof bias, cudaMemcpyHostToDevice, s), cudaSuccess);
  assert_int_equal(cudnnAddTensor(h, &one, a, da, &one, c, dc), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnAddTensor(h, &one, a, da, &one, c, dc), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudaMemcpyAsync(out, dc, sizeof out, cudaMemcpyDeviceToHost, s), cudaSuccess);
  assert_int_equal(cudaStreamSynchronize(s), cudaSuccess);
  for (int i = 0; i < 32; i++) assert_true(out[i] == 2 * bias[(i / 4) % 4]);
  assert_int_equal(cudaStreamDestroy(s), cudaSuccess);
  assert_int_equal(cudnnAddTensor(h, &one, a, da, &one, c, dc), CUDNN_STATUS_EXECUTION_FAILED);
  cudaGetLastError();
  cudaFree(dc);
  cudaFree(da);
  cudnnDestroyTensorDescriptor(a);
  cudnnDestroyTensorDescriptor(c);
  assert_int_equal(cudnnDestroy(h), CUDNN_STATUS_SUCCESS);
}

/* softgpu's answer to the algorithm queries: one algorithm, no workspace,
 * and any algorithm's workspace is 0. */
static void test_algorithm_queries(void **state) {
  (void)state;
  cudnnHandle_t h;
  assert_int_equal(cudnnCreate(&h), CUDNN_STATUS_SUCCESS);
  cudnnTensorDescriptor_t x = tensor4(1, 3, 8, 8), y = tensor4(1, 4, 8, 8);
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t cv;
  assert_int_equal(cudnnCreateFilterDescriptor(&w), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, 3, 3, 3),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnCreateConvolutionDescriptor(&cv), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnSetConvolution2dDescriptor(cv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                                   CUDNN_DATA_FLOAT),
                   CUDNN_STATUS_SUCCESS);
  cudnnConvolutionFwdAlgoPerf_t perf[8];
  int got = 0, max = 0;
  assert_int_equal(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max), CUDNN_STATUS_SUCCESS);
  assert_int_equal(max, CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
  for (int round = 0; round < 2; round++) { /* the second from the cache */
    assert_int_equal(cudnnGetConvolutionForwardAlgorithm_v7(h, x, w, cv, y, 8, &got, perf),
                     CUDNN_STATUS_SUCCESS);
    assert_int_equal(got, 1);
    assert_int_equal(perf[0].algo, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM);
    assert_int_equal(perf[0].memory, 0);
    assert_int_equal(cudnnFindConvolutionForwardAlgorithm(h, x, w, cv, y, 8, &got, perf),
                     CUDNN_STATUS_SUCCESS);
    assert_int_equal(got, 1);
  }
  size_t ws = 1;
  assert_int_equal(cudnnGetConvolutionForwardWorkspaceSize(h, x, w, cv, y,
                                                           CUDNN_CONVOLUTION_FWD_ALGO_FFT, &ws),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(ws, 0);
  /* A y that is not the output: the client's check, the status the
   * forward call has natively (NOT_SUPPORTED, measured on the H200). */
  assert_int_equal(cudnnGetConvolutionForwardAlgorithm_v7(h, x, w, cv, x, 8, &got, perf),
                   CUDNN_STATUS_NOT_SUPPORTED);
  cudnnDestroyTensorDescriptor(x);
  cudnnDestroyTensorDescriptor(y);
  cudnnDestroyFilterDescriptor(w);
  cudnnDestroyConvolutionDescriptor(cv);
  assert_int_equal(cudnnDestroy(h), CUDNN_STATUS_SUCCESS);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_deferred_errors),
      cmocka_unit_test(test_stream),
      cmocka_unit_test(test_algorithm_queries),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
