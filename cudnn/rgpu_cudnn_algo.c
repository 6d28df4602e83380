/* The forward convolution's algorithm queries: the workspace size, cuDNN's
 * heuristic ranking (cudnnGetConvolutionForwardAlgorithm_v7) and the
 * measured one (cudnnFindConvolutionForwardAlgorithm).  The answers live on
 * the server (they depend on its GPU and cuDNN): each is one
 * CUDNN_CONV_FWD_QUERY round trip, cached here by the descriptors' content
 * and the device, so a training or inference loop that asks every step
 * pays it once. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_cudart.h"
#include "rgpu_cudnn_cache.h"
#include "rgpu_cudnn_call.h"
#include "rgpu_log.h"

#define QUERY_MAX 16     /* results per query (the message's limit) */

enum { QUERY_WORKSPACE = 0, QUERY_HEURISTIC = 1, QUERY_FIND = 2 };

/* What an answer depends on: the device, the query, and the descriptors'
 * contents.  Built in zeroed memory and filled by memcpy, so memcmp
 * compares it. */
typedef struct {
  int device, query, algo, requested;
  struct cudnnTensorStruct x, y;
  struct cudnnFilterStruct w;
  struct cudnnConvolutionStruct cv;
} query_key;

/* Answers: an array of perf records (the count is the value's length). */
static rgpu_cudnn_cache g_cache = RGPU_CUDNN_CACHE_INIT;

/* The cached answer to k into out (at most QUERY_MAX): 1 and *count, or 0. */
static int cache_lookup(const query_key *k, cudnnConvolutionFwdAlgoPerf_t *out, int *count) {
  long n = rgpu_cudnn_cache_get(&g_cache, k, sizeof *k, out, sizeof out[0] * QUERY_MAX);
  if (n < 0) return 0;
  *count = (int)((size_t)n / sizeof out[0]);
  return 1;
}

static void cache_insert(const query_key *k, const cudnnConvolutionFwdAlgoPerf_t *perf, int count) {
  rgpu_cudnn_cache_put(&g_cache, k, sizeof *k, perf, sizeof perf[0] * (size_t)count);
}

/* Answers a query from the cache or with one round trip: up to
 * `requested` results into out. */
static cudnnStatus_t query(const char *api, cudnnHandle_t handle, cudnnTensorDescriptor_t xDesc,
                           cudnnFilterDescriptor_t wDesc, cudnnConvolutionDescriptor_t convDesc,
                           cudnnTensorDescriptor_t yDesc, int kind, int algo, int requested,
                           cudnnConvolutionFwdAlgoPerf_t *out, int *count) {
  struct cudnnContext *h = rgpu_cudnn_handle(handle);
  struct cudnnTensorStruct *xt = rgpu_cudnn_tensor(xDesc), *yt = rgpu_cudnn_tensor(yDesc);
  struct cudnnFilterStruct *wf = rgpu_cudnn_filter(wDesc);
  struct cudnnConvolutionStruct *cv = rgpu_cudnn_conv(convDesc);
  cudnnStatus_t st = !h ? CUDNN_STATUS_BAD_PARAM : rgpu_cudnn_conv_check(xt, wf, cv, yt);
  if (st) {
    rgpu_rt_count_call();
    return st;
  }
  if (requested > QUERY_MAX) requested = QUERY_MAX;
  query_key key;
  memset(&key, 0, sizeof key);
  key.device = h->device;
  key.query = kind;
  key.algo = algo;
  key.requested = requested;
  memcpy(&key.x, xt, sizeof key.x);
  memcpy(&key.y, yt, sizeof key.y);
  memcpy(&key.w, wf, sizeof key.w);
  memcpy(&key.cv, cv, sizeof key.cv);
  if (cache_lookup(&key, out, count)) {
    rgpu_rt_count_call();
    return CUDNN_STATUS_SUCCESS;
  }
  rgpu_client *c;
  if (rgpu_rt_enter(&c) != cudaSuccess) return CUDNN_STATUS_EXECUTION_FAILED;
  rgpu_msg_cudnn_conv_fwd_req shape;
  memset(&shape, 0, sizeof shape);
  rgpu_cudnn_conv_shape_fields(&shape, xt, wf, cv, yt);
  rgpu_msg_cudnn_conv_fwd_query_req q = {
      .handle = h->id, .query = (uint32_t)kind, .algo = (uint32_t)algo,
      .requested = (uint32_t)requested,
      .x_type = shape.x_type, .x_dim = shape.x_dim, .x_stride = shape.x_stride,
      .w_type = shape.w_type, .w_format = shape.w_format, .w_dim = shape.w_dim,
      .conv_pad = shape.conv_pad, .conv_stride = shape.conv_stride,
      .conv_dilation = shape.conv_dilation, .conv_mode = shape.conv_mode,
      .conv_compute = shape.conv_compute, .conv_math = shape.conv_math,
      .conv_groups = shape.conv_groups,
      .y_type = shape.y_type, .y_dim = shape.y_dim, .y_stride = shape.y_stride};
  rgpu_buf pay;
  rgpu_buf_init(&pay);
  rgpu_client_reply rr = {.payload = &pay};
  rgpu_msg_cudnn_conv_fwd_query_rep rep;
  rgpu_status rc = rgpu_call_cudnn_conv_fwd_query(c, h->device, 0, &q, &rep, &rr);
  if (rc) {
    st = rgpu_cudnn_reply_status(c, rc, api, rr.msg);
  } else {
    uint32_t n = rep.algo.count;
    if (rep.status.count != n || rep.time.count != n || rep.memory.count != n ||
        rep.determinism.count != n || rep.math.count != n || n > (uint32_t)requested) {
      RGPU_ERROR("%s: the server's reply is inconsistent", api);
      st = CUDNN_STATUS_INTERNAL_ERROR;
    } else {
      for (uint32_t i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].algo = (cudnnConvolutionFwdAlgo_t)rgpu_array_u32(&rep.algo, i);
        out[i].status = (cudnnStatus_t)rgpu_array_u32(&rep.status, i);
        uint32_t t = rgpu_array_u32(&rep.time, i);
        memcpy(&out[i].time, &t, sizeof t);
        out[i].memory = (size_t)rgpu_array_u64(&rep.memory, i);
        out[i].determinism = (cudnnDeterminism_t)rgpu_array_u32(&rep.determinism, i);
        out[i].mathType = (cudnnMathType_t)rgpu_array_u32(&rep.math, i);
      }
      *count = (int)n;
      cache_insert(&key, out, *count);
    }
  }
  rgpu_buf_free(&pay);
  return st;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetConvolutionForwardAlgorithmMaxCount(
    cudnnHandle_t handle, int *count) {
  rgpu_rt_count_call();
  if (!rgpu_cudnn_handle(handle) || !count) return CUDNN_STATUS_BAD_PARAM;
  *count = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetConvolutionForwardWorkspaceSize(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const cudnnFilterDescriptor_t wDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t yDesc,
    cudnnConvolutionFwdAlgo_t algo, size_t *sizeInBytes) {
  if (!sizeInBytes || (int)algo < 0 || (int)algo >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT) {
    rgpu_rt_count_call();
    return CUDNN_STATUS_BAD_PARAM;
  }
  cudnnConvolutionFwdAlgoPerf_t perf[QUERY_MAX];
  int n = 0;
  cudnnStatus_t st = query("cudnnGetConvolutionForwardWorkspaceSize", handle, xDesc, wDesc,
                           convDesc, yDesc, QUERY_WORKSPACE, (int)algo, 1, perf, &n);
  if (st) return st;
  if (n != 1) return CUDNN_STATUS_INTERNAL_ERROR;
  if (perf[0].status) return perf[0].status; /* the algorithm does not fit the shape */
  *sizeInBytes = perf[0].memory;
  return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t ranked(const char *api, int kind, cudnnHandle_t handle,
                            cudnnTensorDescriptor_t xDesc, cudnnFilterDescriptor_t wDesc,
                            cudnnConvolutionDescriptor_t convDesc, cudnnTensorDescriptor_t yDesc,
                            int requestedAlgoCount, int *returnedAlgoCount,
                            cudnnConvolutionFwdAlgoPerf_t *perfResults) {
  if (requestedAlgoCount <= 0 || !returnedAlgoCount || !perfResults) {
    rgpu_rt_count_call();
    return CUDNN_STATUS_BAD_PARAM;
  }
  cudnnConvolutionFwdAlgoPerf_t perf[QUERY_MAX];
  int n = 0;
  cudnnStatus_t st = query(api, handle, xDesc, wDesc, convDesc, yDesc, kind, 0,
                           requestedAlgoCount, perf, &n);
  if (st) return st;
  memcpy(perfResults, perf, sizeof perf[0] * (size_t)n);
  *returnedAlgoCount = n;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
    const cudnnFilterDescriptor_t filterDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t destDesc, const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionFwdAlgoPerf_t *perfResults) {
  return ranked("cudnnGetConvolutionForwardAlgorithm_v7", QUERY_HEURISTIC, handle, srcDesc,
                filterDesc, convDesc, destDesc, requestedAlgoCount, returnedAlgoCount, perfResults);
}

/* cuDNN measures on buffers it allocates itself; the server does the same
 * (the answer is cached like the heuristic's: a program that finds once
 * per shape, as frameworks do, sees no difference). */
RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnFindConvolutionForwardAlgorithm(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const cudnnFilterDescriptor_t wDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t yDesc,
    const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionFwdAlgoPerf_t *perfResults) {
  return ranked("cudnnFindConvolutionForwardAlgorithm", QUERY_FIND, handle, xDesc, wDesc,
                convDesc, yDesc, requestedAlgoCount, returnedAlgoCount, perfResults);
}
