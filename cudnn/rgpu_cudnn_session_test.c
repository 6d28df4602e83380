/* The cuDNN facade in a live session (ctest runs it under `rgpu run` on
 * softgpu): behaviour that is rgpu's own and so has no place in the e2e
 * program, which must also pass natively: deferred errors of the
 * asynchronous forward calls, the session going on after them, the stream
 * a handle runs on, and the algorithm cache answering repeats without a
 * round trip (RGPU_STATS is not needed: the cache is observed through the
 * server staying out of the answer). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
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

/* cudnnTransformTensor: NCHW x into an NHWC y, y = 2 x + 0.5 y, every
 * element checked; dimensions that differ are refused at once. */
static void test_transform_tensor(void **state) {
  (void)state;
  cudnnHandle_t h;
  assert_int_equal(cudnnCreate(&h), CUDNN_STATUS_SUCCESS);
  enum { N = 2, C = 3, H = 4, W = 5, E = N * C * H * W };
  cudnnTensorDescriptor_t x = tensor4(N, C, H, W), y, bad = tensor4(N, C, W, H);
  assert_int_equal(cudnnCreateTensorDescriptor(&y), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, N, C, H, W),
                   CUDNN_STATUS_SUCCESS);
  float hx[E], hy[E], out[E], alpha = 2, beta = 0.5f, *dx, *dy;
  for (int i = 0; i < E; i++) hx[i] = (float)(i % 17) - 8, hy[i] = (float)(i % 5);
  assert_int_equal(cudaMalloc((void **)&dx, sizeof hx), cudaSuccess);
  assert_int_equal(cudaMalloc((void **)&dy, sizeof hy), cudaSuccess);
  assert_int_equal(cudaMemcpy(dx, hx, sizeof hx, cudaMemcpyHostToDevice), cudaSuccess);
  assert_int_equal(cudaMemcpy(dy, hy, sizeof hy, cudaMemcpyHostToDevice), cudaSuccess);
  assert_int_equal(cudnnTransformTensor(h, &alpha, x, dx, &beta, y, dy), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudaMemcpy(out, dy, sizeof out, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      for (int i = 0; i < H; i++)
        for (int j = 0; j < W; j++) {
          int xi = ((n * C + c) * H + i) * W + j, yi = ((n * H + i) * W + j) * C + c;
          assert_true(out[yi] == 2 * hx[xi] + 0.5f * hy[yi]);
        }
  assert_int_equal(cudnnTransformTensor(h, &alpha, x, dx, &beta, bad, dy), CUDNN_STATUS_BAD_PARAM);
  cudaFree(dx);
  cudaFree(dy);
  cudnnDestroyTensorDescriptor(x);
  cudnnDestroyTensorDescriptor(y);
  cudnnDestroyTensorDescriptor(bad);
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

/* ---- the backend API ------------------------------------------------------ */

static cudnnBackendDescriptor_t bmake(cudnnBackendDescriptorType_t t) {
  cudnnBackendDescriptor_t d;
  assert_int_equal(cudnnBackendCreateDescriptor(t, &d), CUDNN_STATUS_SUCCESS);
  return d;
}

static cudnnBackendDescriptor_t btensor(int64_t uid, const int64_t d[4], cudnnDataType_t type) {
  cudnnBackendDescriptor_t t = bmake(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  int64_t s[4] = {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1}, align = 16;
  assert_int_equal(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type), 0);
  assert_int_equal(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, d), 0);
  assert_int_equal(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, s), 0);
  assert_int_equal(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid), 0);
  assert_int_equal(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align), 0);
  assert_int_equal(cudnnBackendFinalize(t), 0);
  return t;
}

/* The operation graph of a 1x1 convolution of x 1x2x3x3 by w 2x2x1x1. */
static cudnnBackendDescriptor_t bgraph(cudnnHandle_t h, cudnnDataType_t type) {
  static const int64_t xd[4] = {1, 2, 3, 3}, wd[4] = {2, 2, 1, 1};
  cudnnBackendDescriptor_t x = btensor(1, xd, type), w = btensor(2, wd, type),
                           y = btensor(3, xd, type), cv = bmake(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  int64_t two = 2, zero[2] = {0, 0}, one[2] = {1, 1};
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  assert_int_equal(cudnnBackendSetAttribute(cv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type), 0);
  assert_int_equal(cudnnBackendSetAttribute(cv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode), 0);
  assert_int_equal(cudnnBackendSetAttribute(cv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &two), 0);
  assert_int_equal(cudnnBackendSetAttribute(cv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, zero), 0);
  assert_int_equal(cudnnBackendSetAttribute(cv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, zero), 0);
  assert_int_equal(cudnnBackendSetAttribute(cv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, one), 0);
  assert_int_equal(cudnnBackendSetAttribute(cv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, one), 0);
  assert_int_equal(cudnnBackendFinalize(cv), 0);
  cudnnBackendDescriptor_t op = bmake(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  assert_int_equal(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x), 0);
  assert_int_equal(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w), 0);
  assert_int_equal(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y), 0);
  assert_int_equal(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cv), 0);
  assert_int_equal(cudnnBackendFinalize(op), 0);
  cudnnBackendDescriptor_t g = bmake(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  assert_int_equal(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h), 0);
  assert_int_equal(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op), 0);
  assert_int_equal(cudnnBackendFinalize(g), 0);
  /* The graph holds what it references: the program's handles may go. */
  cudnnBackendDescriptor_t mine[] = {x, w, y, cv, op};
  for (int i = 0; i < 5; i++) assert_int_equal(cudnnBackendDestroyDescriptor(mine[i]), 0);
  return g;
}

/* softgpu's answers (one engine for a float convolution, NOT_SUPPORTED
 * otherwise) and execute's deferred errors: a pointer outside the
 * session's memory fails at the next synchronization, not sticky. */
static void test_backend(void **state) {
  (void)state;
  cudnnHandle_t h;
  assert_int_equal(cudnnCreate(&h), CUDNN_STATUS_SUCCESS);
  cudnnBackendHeurMode_t hm = CUDNN_HEUR_MODE_A;
  cudnnBackendDescriptor_t dg = bgraph(h, CUDNN_DATA_DOUBLE), dheur = bmake(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  assert_int_equal(cudnnBackendSetAttribute(dheur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &dg), 0);
  assert_int_equal(cudnnBackendSetAttribute(dheur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &hm), 0);
  assert_int_equal(cudnnBackendFinalize(dheur), CUDNN_STATUS_NOT_SUPPORTED);

  cudnnBackendDescriptor_t g = bgraph(h, CUDNN_DATA_FLOAT), heur = bmake(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  assert_int_equal(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g), 0);
  assert_int_equal(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &hm), 0);
  assert_int_equal(cudnnBackendFinalize(heur), 0);
  cudnnBackendDescriptor_t cfg = bmake(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR), eng = bmake(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  int64_t n = 0, index = -1;
  assert_int_equal(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &cfg), 0);
  assert_int_equal(n, 1);
  assert_int_equal(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng), 0);
  assert_int_equal(cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index), 0);
  assert_int_equal(index, 0);
  cudnnBackendDescriptor_t plan = bmake(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  assert_int_equal(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h), 0);
  assert_int_equal(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg), 0);
  assert_int_equal(cudnnBackendFinalize(plan), 0);
  int64_t ws = -1;
  assert_int_equal(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws), 0);
  assert_int_equal(ws, 0);

  float *d, host[18], x[18], wt[4] = {1, 2, -1, 0.5f}, y[18];
  for (int i = 0; i < 18; i++) x[i] = (float)(i % 7) - 3;
  assert_int_equal(cudaMalloc((void **)&d, 40 * sizeof *d), cudaSuccess);
  assert_int_equal(cudaMemcpy(d, x, sizeof x, cudaMemcpyHostToDevice), cudaSuccess);
  assert_int_equal(cudaMemcpy(d + 18, wt, sizeof wt, cudaMemcpyHostToDevice), cudaSuccess);
  int64_t uids[3] = {1, 2, 3};
  void *bad[3] = {d, d + 18, host}, *good[3] = {d, d + 18, d + 22}, *none = NULL;
  cudnnBackendDescriptor_t vbad = bmake(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR), vgood = bmake(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  cudnnBackendDescriptor_t packs[2] = {vbad, vgood};
  void **ptrs[2] = {bad, good};
  for (int i = 0; i < 2; i++) {
    assert_int_equal(cudnnBackendSetAttribute(packs[i], CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids), 0);
    assert_int_equal(cudnnBackendSetAttribute(packs[i], CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs[i]), 0);
    assert_int_equal(cudnnBackendSetAttribute(packs[i], CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &none), 0);
    assert_int_equal(cudnnBackendFinalize(packs[i]), 0);
  }
  assert_int_equal(cudnnBackendExecute(h, plan, vbad), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudaDeviceSynchronize(), cudaErrorInvalidValue);
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  assert_int_equal(cudnnBackendExecute(h, plan, vgood), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudaMemcpy(y, d + 22, sizeof y, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int k = 0; k < 2; k++)
    for (int p = 0; p < 9; p++)
      assert_true(y[k * 9 + p] == wt[k * 2] * x[p] + wt[k * 2 + 1] * x[9 + p]);
  /* Execute checks its arguments at once. */
  assert_int_equal(cudnnBackendExecute(h, vgood, plan), CUDNN_STATUS_BAD_PARAM);
  cudnnBackendDescriptor_t all[] = {vbad, vgood, plan, eng, cfg, heur, g, dheur, dg};
  for (int i = 0; i < 9; i++) assert_int_equal(cudnnBackendDestroyDescriptor(all[i]), 0);
  cudaFree(d);
  assert_int_equal(cudnnDestroy(h), CUDNN_STATUS_SUCCESS);
}

/* What cuDNN's frontend does when it makes engines itself: an engine by
 * global index (its notes asked of the server, none on softgpu), a config
 * of it (workspace and shared memory asked of the server), a heuristics
 * config's workspace read locally, and an execution plan without a handle
 * (the operation graph's is used), which then computes. */
static void test_backend_engine_by_index(void **state) {
  (void)state;
  cudnnHandle_t h;
  assert_int_equal(cudnnCreate(&h), CUDNN_STATUS_SUCCESS);
  cudnnBackendDescriptor_t g = bgraph(h, CUDNN_DATA_FLOAT);
  int64_t n = -1, index = 0, ws = -1;
  int32_t shm = -1;
  int notes[8];
  assert_int_equal(cudnnBackendGetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1, &n, &index), 0);
  assert_int_equal(index, 1);
  index = 0;
  cudnnBackendDescriptor_t eng = bmake(CUDNN_BACKEND_ENGINE_DESCRIPTOR), cfg = bmake(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  assert_int_equal(cudnnBackendSetAttribute(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g), 0);
  assert_int_equal(cudnnBackendSetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &index), 0);
  assert_int_equal(cudnnBackendFinalize(eng), 0);
  n = -1;
  assert_int_equal(cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, 8, &n, notes), 0);
  assert_int_equal(n, 0);
  n = -1;
  assert_int_equal(cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, 8, &n, notes), 0);
  assert_int_equal(n, 0);
  assert_int_equal(cudnnBackendSetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &eng), 0);
  assert_int_equal(cudnnBackendFinalize(cfg), 0);
  assert_int_equal(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws), 0);
  assert_int_equal(ws, 0);
  assert_int_equal(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_SHARED_MEMORY_USED, CUDNN_TYPE_INT32, 1, &n, &shm), 0);
  assert_int_equal(shm, 0);

  /* An engine softgpu does not have: the server's refusal, not a guess. */
  cudnnBackendDescriptor_t other = bmake(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  int64_t seven = 7;
  assert_int_equal(cudnnBackendSetAttribute(other, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g), 0);
  assert_int_equal(cudnnBackendSetAttribute(other, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &seven), 0);
  assert_int_equal(cudnnBackendFinalize(other), 0);
  assert_int_equal(cudnnBackendGetAttribute(other, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, 8, &n, notes), CUDNN_STATUS_NOT_SUPPORTED);

  /* A heuristics config carries its workspace: no round trip to read it. */
  cudnnBackendHeurMode_t hm = CUDNN_HEUR_MODE_INSTANT;
  cudnnBackendDescriptor_t heur = bmake(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR), hcfg = bmake(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  assert_int_equal(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g), 0);
  assert_int_equal(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &hm), 0);
  assert_int_equal(cudnnBackendFinalize(heur), 0);
  assert_int_equal(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &hcfg), 0);
  ws = -1;
  assert_int_equal(cudnnBackendGetAttribute(hcfg, CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws), 0);
  assert_int_equal(ws, 0);

  /* The plan names no handle: cuDNN 9 takes that, and so must rgpu. */
  cudnnBackendDescriptor_t plan = bmake(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  assert_int_equal(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg), 0);
  assert_int_equal(cudnnBackendFinalize(plan), 0);
  float *d, x[18], wt[4] = {0.5f, -2, 1, 3}, y[18];
  for (int i = 0; i < 18; i++) x[i] = (float)(i % 5) - 2;
  assert_int_equal(cudaMalloc((void **)&d, 40 * sizeof *d), cudaSuccess);
  assert_int_equal(cudaMemcpy(d, x, sizeof x, cudaMemcpyHostToDevice), cudaSuccess);
  assert_int_equal(cudaMemcpy(d + 18, wt, sizeof wt, cudaMemcpyHostToDevice), cudaSuccess);
  int64_t uids[3] = {1, 2, 3};
  void *ptrs[3] = {d, d + 18, d + 22}, *none = NULL;
  cudnnBackendDescriptor_t pack = bmake(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  assert_int_equal(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids), 0);
  assert_int_equal(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs), 0);
  assert_int_equal(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &none), 0);
  assert_int_equal(cudnnBackendFinalize(pack), 0);
  assert_int_equal(cudnnBackendExecute(h, plan, pack), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudaMemcpy(y, d + 22, sizeof y, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int k = 0; k < 2; k++)
    for (int p = 0; p < 9; p++)
      assert_true(y[k * 9 + p] == wt[k * 2] * x[p] + wt[k * 2 + 1] * x[9 + p]);
  cudnnBackendDescriptor_t all[] = {pack, plan, hcfg, heur, other, cfg, eng, g};
  for (int i = 0; i < 8; i++) assert_int_equal(cudnnBackendDestroyDescriptor(all[i]), 0);
  cudaFree(d);
  assert_int_equal(cudnnDestroy(h), CUDNN_STATUS_SUCCESS);
}

/* A by-value tensor (a scale, its pack entry a host pointer): the client
 * finds it at finalize and sends its value with each execute.  softgpu
 * then refuses by-value tensors by name (cudaErrorNotSupported at the next
 * synchronization); had the value not arrived the server would answer
 * cudaErrorInvalidValue ("missing from the request"). */
static void test_backend_by_value(void **state) {
  (void)state;
  cudnnHandle_t h;
  assert_int_equal(cudnnCreate(&h), CUDNN_STATUS_SUCCESS);
  static const int64_t xd[4] = {1, 2, 3, 3}, one[4] = {1, 1, 1, 1};
  cudnnBackendDescriptor_t x = btensor(1, xd, CUDNN_DATA_FLOAT), y = btensor(3, xd, CUDNN_DATA_FLOAT);
  cudnnBackendDescriptor_t sc = bmake(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  int64_t uid = 2, align = 16;
  cudnnDataType_t f = CUDNN_DATA_FLOAT;
  bool by_value = true;
  assert_int_equal(cudnnBackendSetAttribute(sc, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f), 0);
  assert_int_equal(cudnnBackendSetAttribute(sc, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, one), 0);
  assert_int_equal(cudnnBackendSetAttribute(sc, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, one), 0);
  assert_int_equal(cudnnBackendSetAttribute(sc, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid), 0);
  assert_int_equal(cudnnBackendSetAttribute(sc, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align), 0);
  assert_int_equal(cudnnBackendSetAttribute(sc, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value), 0);
  assert_int_equal(cudnnBackendFinalize(sc), 0);
  cudnnBackendDescriptor_t pw = bmake(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  cudnnPointwiseMode_t mode = CUDNN_POINTWISE_MUL;
  assert_int_equal(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode), 0);
  assert_int_equal(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &f), 0);
  assert_int_equal(cudnnBackendFinalize(pw), 0);
  cudnnBackendDescriptor_t op = bmake(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  assert_int_equal(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw), 0);
  assert_int_equal(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x), 0);
  assert_int_equal(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sc), 0);
  assert_int_equal(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y), 0);
  assert_int_equal(cudnnBackendFinalize(op), 0);
  cudnnBackendDescriptor_t g = bmake(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  assert_int_equal(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h), 0);
  assert_int_equal(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op), 0);
  assert_int_equal(cudnnBackendFinalize(g), 0);
  int64_t index = 0;
  cudnnBackendDescriptor_t eng = bmake(CUDNN_BACKEND_ENGINE_DESCRIPTOR), cfg = bmake(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR),
                           plan = bmake(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  assert_int_equal(cudnnBackendSetAttribute(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g), 0);
  assert_int_equal(cudnnBackendSetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &index), 0);
  assert_int_equal(cudnnBackendFinalize(eng), 0);
  assert_int_equal(cudnnBackendSetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &eng), 0);
  assert_int_equal(cudnnBackendFinalize(cfg), 0);
  assert_int_equal(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg), 0);
  assert_int_equal(cudnnBackendFinalize(plan), 0);
  float *d, scale = 3;
  assert_int_equal(cudaMalloc((void **)&d, 64 * sizeof *d), cudaSuccess);
  int64_t uids[3] = {1, 2, 3};
  void *ptrs[3] = {d, &scale, d + 32}, *none = NULL;
  cudnnBackendDescriptor_t pack = bmake(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  assert_int_equal(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids), 0);
  assert_int_equal(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs), 0);
  assert_int_equal(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &none), 0);
  assert_int_equal(cudnnBackendFinalize(pack), 0);
  assert_int_equal(cudnnBackendExecute(h, plan, pack), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudaDeviceSynchronize(), cudaErrorNotSupported);
  /* A by-value entry with no host pointer is refused at once. */
  ptrs[1] = NULL;
  cudnnBackendDescriptor_t nopack = bmake(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  assert_int_equal(cudnnBackendSetAttribute(nopack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids), 0);
  assert_int_equal(cudnnBackendSetAttribute(nopack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs), 0);
  assert_int_equal(cudnnBackendFinalize(nopack), 0);
  assert_int_equal(cudnnBackendExecute(h, plan, nopack), CUDNN_STATUS_BAD_PARAM);
  cudnnBackendDescriptor_t all[] = {nopack, pack, plan, cfg, eng, g, op, pw, sc, y, x};
  for (int i = 0; i < 11; i++) assert_int_equal(cudnnBackendDestroyDescriptor(all[i]), 0);
  cudaFree(d);
  assert_int_equal(cudnnDestroy(h), CUDNN_STATUS_SUCCESS);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_deferred_errors),
      cmocka_unit_test(test_stream),
      cmocka_unit_test(test_transform_tensor),
      cmocka_unit_test(test_algorithm_queries),
      cmocka_unit_test(test_backend),
      cmocka_unit_test(test_backend_engine_by_index),
      cmocka_unit_test(test_backend_by_value),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
