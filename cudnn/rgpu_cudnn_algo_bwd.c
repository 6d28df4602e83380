/* The backward convolutions' algorithm queries (data and filter): workspace
 * size, cuDNN's heuristic ranking (Get*Algorithm_v7), the measured ranking
 * (Find*Algorithm, Find*AlgorithmEx) and the algorithm counts.  As for the
 * forward convolution (rgpu_cudnn_algo.c) the answer lives on the server:
 * one CUDNN_CONV_BWD_QUERY round trip, cached here by the device, the
 * direction, the query and the descriptors' whole content, so a training
 * loop that asks every step pays once per shape.  Also
 * cudnnFindConvolutionForwardAlgorithmEx, answered like the forward Find. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_calls.h"
#include "rgpu_cudnn_cache.h"
#include "rgpu_cudnn_wire.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"

#define QUERY_MAX 16    /* results per query (the message's limit) */

enum { QUERY_WORKSPACE = 0, QUERY_HEURISTIC = 1, QUERY_FIND = 2 };
enum { DIR_DATA = 0, DIR_FILTER = 1 };

/* cudnnConvolutionBwdDataAlgoPerf_t and cudnnConvolutionBwdFilterAlgoPerf_t
 * differ only in their algorithm's enum type: the cache keeps this neutral
 * form and each API copies it out field by field. */
typedef struct {
  int algo;
  cudnnStatus_t status;
  float time;
  size_t memory;
  cudnnDeterminism_t determinism;
  cudnnMathType_t math;
} perf_rec;

/* Built in zeroed memory and filled by memcpy, so memcmp compares it. */
typedef struct {
  int device, direction, query, algo, requested;
  struct cudnnTensorStruct x, y;
  struct cudnnFilterStruct w;
  struct cudnnConvolutionStruct cv;
} query_key;

/* Answers: an array of perf records (the count is the value's length). */
static rgpu_cudnn_cache g_cache = RGPU_CUDNN_CACHE_INIT;

/* The cached answer to k into out (at most QUERY_MAX): 1 and *count, or 0. */
static int cache_lookup(const query_key *k, perf_rec *out, int *count) {
  long n = rgpu_cudnn_cache_get(&g_cache, k, sizeof *k, out, sizeof out[0] * QUERY_MAX);
  if (n < 0) return 0;
  *count = (int)((size_t)n / sizeof out[0]);
  return 1;
}

static void cache_insert(const query_key *k, const perf_rec *perf, int count) {
  rgpu_cudnn_cache_put(&g_cache, k, sizeof *k, perf, sizeof perf[0] * (size_t)count);
}

/* Answers a query from the cache or with one round trip: up to
 * `requested` results into out.  x, w, y are the forward convolution's
 * (for data: dx, w, dy; for filter: x, dw, dy). */
static cudnnStatus_t query(const char *api, int direction, cudnnHandle_t handle,
                           cudnnTensorDescriptor_t xDesc, cudnnFilterDescriptor_t wDesc,
                           cudnnConvolutionDescriptor_t convDesc, cudnnTensorDescriptor_t yDesc,
                           int kind, int algo, int requested, perf_rec *out, int *count) {
  struct cudnnContext *h = rgpu_cudnn_handle(handle);
  struct cudnnTensorStruct *xt = rgpu_cudnn_tensor(xDesc), *yt = rgpu_cudnn_tensor(yDesc);
  struct cudnnFilterStruct *wf = rgpu_cudnn_filter(wDesc);
  struct cudnnConvolutionStruct *cv = rgpu_cudnn_conv(convDesc);
  cudnnStatus_t st = !h || !xt || !xt->set || !wf || !wf->set
                         ? CUDNN_STATUS_BAD_PARAM
                         : rgpu_cudnn_conv_check(xt, wf, cv, yt);
  if (st) return rgpu_cudnn_refused(st);
  if (requested > QUERY_MAX) requested = QUERY_MAX;
  query_key key;
  memset(&key, 0, sizeof key);
  key.device = h->device;
  key.direction = direction;
  key.query = kind;
  key.algo = algo;
  key.requested = requested;
  memcpy(&key.x, xt, sizeof key.x);
  memcpy(&key.y, yt, sizeof key.y);
  memcpy(&key.w, wf, sizeof key.w);
  memcpy(&key.cv, cv, sizeof key.cv);
  if (cache_lookup(&key, out, count)) return rgpu_cudnn_refused(CUDNN_STATUS_SUCCESS);
  rgpu_client *c;
  if (rgpu_rt_enter(&c) != cudaSuccess) return CUDNN_STATUS_EXECUTION_FAILED;
  rgpu_msg_cudnn_conv_fwd_req shape;
  memset(&shape, 0, sizeof shape);
  rgpu_cudnn_conv_shape_fields(&shape, xt, wf, cv, yt);
  rgpu_msg_cudnn_conv_bwd_query_req q = {
      .handle = h->id, .direction = (uint32_t)direction, .query = (uint32_t)kind,
      .algo = (uint32_t)algo, .requested = (uint32_t)requested,
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
  rgpu_msg_cudnn_conv_bwd_query_rep rep;
  rgpu_status rc = rgpu_call_cudnn_conv_bwd_query(c, h->device, 0, &q, &rep, &rr);
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
        out[i].algo = (int)rgpu_array_u32(&rep.algo, i);
        out[i].status = (cudnnStatus_t)rgpu_array_u32(&rep.status, i);
        uint32_t t = rgpu_array_u32(&rep.time, i);
        memcpy(&out[i].time, &t, sizeof t);
        out[i].memory = (size_t)rgpu_array_u64(&rep.memory, i);
        out[i].determinism = (cudnnDeterminism_t)rgpu_array_u32(&rep.determinism, i);
        out[i].math = (cudnnMathType_t)rgpu_array_u32(&rep.math, i);
      }
      *count = (int)n;
      cache_insert(&key, out, *count);
    }
  }
  rgpu_buf_free(&pay);
  return st;
}

/* The workspace size one algorithm needs. */
static cudnnStatus_t workspace(const char *api, int direction, cudnnHandle_t handle,
                               cudnnTensorDescriptor_t xDesc, cudnnFilterDescriptor_t wDesc,
                               cudnnConvolutionDescriptor_t convDesc,
                               cudnnTensorDescriptor_t yDesc, int algo, int algo_count,
                               size_t *sizeInBytes) {
  if (!sizeInBytes || algo < 0 || algo >= algo_count)
    return rgpu_cudnn_refused(CUDNN_STATUS_BAD_PARAM);
  perf_rec perf[QUERY_MAX];
  int n = 0;
  cudnnStatus_t st = query(api, direction, handle, xDesc, wDesc, convDesc, yDesc, QUERY_WORKSPACE,
                           algo, 1, perf, &n);
  if (st) return st;
  if (n != 1) return CUDNN_STATUS_INTERNAL_ERROR;
  if (perf[0].status) return perf[0].status; /* the algorithm does not fit the shape */
  *sizeInBytes = perf[0].memory;
  return CUDNN_STATUS_SUCCESS;
}

/* A ranked query into the API's own perf array type. */
#define RANKED(api, direction, kind, handle, x, w, cv, y, requested, returned, results)        \
  do {                                                                                         \
    if ((requested) <= 0 || !(returned) || !(results))                                         \
      return rgpu_cudnn_refused(CUDNN_STATUS_BAD_PARAM);                                       \
    perf_rec perf_[QUERY_MAX];                                                                 \
    int n_ = 0;                                                                                \
    cudnnStatus_t st_ = query(api, direction, handle, x, w, cv, y, kind, 0, requested, perf_,  \
                              &n_);                                                            \
    if (st_) return st_;                                                                       \
    for (int i_ = 0; i_ < n_; i_++) {                                                          \
      memset(&(results)[i_], 0, sizeof (results)[i_]);                                         \
      (results)[i_].algo = (__typeof__((results)[i_].algo))perf_[i_].algo;                     \
      (results)[i_].status = perf_[i_].status;                                                 \
      (results)[i_].time = perf_[i_].time;                                                     \
      (results)[i_].memory = perf_[i_].memory;                                                 \
      (results)[i_].determinism = perf_[i_].determinism;                                       \
      (results)[i_].mathType = perf_[i_].math;                                                 \
    }                                                                                          \
    *(returned) = n_;                                                                          \
    return CUDNN_STATUS_SUCCESS;                                                               \
  } while (0)

/* ---- backward data ---------------------------------------------------------- */

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetConvolutionBackwardDataAlgorithmMaxCount(
    cudnnHandle_t handle, int *count) {
  rgpu_rt_count_call();
  if (!rgpu_cudnn_handle(handle) || !count) return CUDNN_STATUS_BAD_PARAM;
  *count = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetConvolutionBackwardDataWorkspaceSize(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc, const cudnnTensorDescriptor_t dyDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc,
    cudnnConvolutionBwdDataAlgo_t algo, size_t *sizeInBytes) {
  return workspace("cudnnGetConvolutionBackwardDataWorkspaceSize", DIR_DATA, handle, dxDesc,
                   wDesc, convDesc, dyDesc, (int)algo, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                   sizeInBytes);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t filterDesc,
    const cudnnTensorDescriptor_t diffDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t gradDesc, const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionBwdDataAlgoPerf_t *perfResults) {
  RANKED("cudnnGetConvolutionBackwardDataAlgorithm_v7", DIR_DATA, QUERY_HEURISTIC, handle,
         gradDesc, filterDesc, convDesc, diffDesc, requestedAlgoCount, returnedAlgoCount,
         perfResults);
}

/* cuDNN measures on buffers it allocates itself; the server does the same
 * (cached like the heuristic's: frameworks find once per shape). */
RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnFindConvolutionBackwardDataAlgorithm(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc, const cudnnTensorDescriptor_t dyDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc,
    const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionBwdDataAlgoPerf_t *perfResults) {
  RANKED("cudnnFindConvolutionBackwardDataAlgorithm", DIR_DATA, QUERY_FIND, handle, dxDesc, wDesc,
         convDesc, dyDesc, requestedAlgoCount, returnedAlgoCount, perfResults);
}

/* The Ex form measures on the program's own buffers natively (it may
 * overwrite dx and uses the given workspace); rgpu measures on the
 * server's scratch buffers as Find does: the ranking is the same kind of
 * answer, and the program's buffers are left alone (the Ex form promises
 * nothing about their content). */
RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnFindConvolutionBackwardDataAlgorithmEx(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc, const void *w,
    const cudnnTensorDescriptor_t dyDesc, const void *dy,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc, void *dx,
    const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionBwdDataAlgoPerf_t *perfResults, void *workSpace, size_t workSpaceSizeInBytes) {
  if (!w || !dy || !dx || (workSpaceSizeInBytes && !workSpace))
    return rgpu_cudnn_refused(CUDNN_STATUS_BAD_PARAM);
  RANKED("cudnnFindConvolutionBackwardDataAlgorithmEx", DIR_DATA, QUERY_FIND, handle, dxDesc,
         wDesc, convDesc, dyDesc, requestedAlgoCount, returnedAlgoCount, perfResults);
}

/* ---- backward filter -------------------------------------------------------- */

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(
    cudnnHandle_t handle, int *count) {
  rgpu_rt_count_call();
  if (!rgpu_cudnn_handle(handle) || !count) return CUDNN_STATUS_BAD_PARAM;
  *count = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetConvolutionBackwardFilterWorkspaceSize(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const cudnnTensorDescriptor_t dyDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t gradDesc,
    cudnnConvolutionBwdFilterAlgo_t algo, size_t *sizeInBytes) {
  return workspace("cudnnGetConvolutionBackwardFilterWorkspaceSize", DIR_FILTER, handle, xDesc,
                   gradDesc, convDesc, dyDesc, (int)algo, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                   sizeInBytes);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
    const cudnnTensorDescriptor_t diffDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnFilterDescriptor_t gradDesc, const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionBwdFilterAlgoPerf_t *perfResults) {
  RANKED("cudnnGetConvolutionBackwardFilterAlgorithm_v7", DIR_FILTER, QUERY_HEURISTIC, handle,
         srcDesc, gradDesc, convDesc, diffDesc, requestedAlgoCount, returnedAlgoCount,
         perfResults);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnFindConvolutionBackwardFilterAlgorithm(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const cudnnTensorDescriptor_t dyDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t dwDesc,
    const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionBwdFilterAlgoPerf_t *perfResults) {
  RANKED("cudnnFindConvolutionBackwardFilterAlgorithm", DIR_FILTER, QUERY_FIND, handle, xDesc,
         dwDesc, convDesc, dyDesc, requestedAlgoCount, returnedAlgoCount, perfResults);
}

/* Measured on the server's scratch buffers, like the data Ex form. */
RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnFindConvolutionBackwardFilterAlgorithmEx(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const void *x,
    const cudnnTensorDescriptor_t dyDesc, const void *y,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t dwDesc, void *dw,
    const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionBwdFilterAlgoPerf_t *perfResults, void *workSpace, size_t workSpaceSizeInBytes) {
  if (!x || !y || !dw || (workSpaceSizeInBytes && !workSpace))
    return rgpu_cudnn_refused(CUDNN_STATUS_BAD_PARAM);
  RANKED("cudnnFindConvolutionBackwardFilterAlgorithmEx", DIR_FILTER, QUERY_FIND, handle, xDesc,
         dwDesc, convDesc, dyDesc, requestedAlgoCount, returnedAlgoCount, perfResults);
}

/* ---- the forward Ex form ------------------------------------------------------ */

/* Measured on the server's scratch buffers, as the forward Find is. */
RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnFindConvolutionForwardAlgorithmEx(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const void *x,
    const cudnnFilterDescriptor_t wDesc, const void *w, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t yDesc, void *y, const int requestedAlgoCount,
    int *returnedAlgoCount, cudnnConvolutionFwdAlgoPerf_t *perfResults, void *workSpace,
    size_t workSpaceSizeInBytes) {
  if (!x || !w || !y || (workSpaceSizeInBytes && !workSpace))
    return rgpu_cudnn_refused(CUDNN_STATUS_BAD_PARAM);
  return rgpu_cudnn_cudnnFindConvolutionForwardAlgorithm(handle, xDesc, wDesc, convDesc, yDesc,
                                                         requestedAlgoCount, returnedAlgoCount,
                                                         perfResults);
}
