/* cuDNN legacy requests beyond the forward slice (issue 17): the backward
 * passes (CUDNN_CONV_BWD, CUDNN_CONV_BWD_BIAS, CUDNN_ACTIVATION_BWD,
 * CUDNN_POOLING_BWD, CUDNN_SOFTMAX_BWD), batch normalization
 * (CUDNN_BATCHNORM), op-tensor, set and scale (CUDNN_OP_TENSOR,
 * CUDNN_SET_TENSOR), none with a reply, and the queries
 * CUDNN_CONV_BWD_QUERY and CUDNN_BATCHNORM_QUERY.
 *
 * As in rgpu_handlers_cudnn.c (whose checks these share through
 * rgpu_handlers_cudnn.h): every tensor the client describes is decoded and
 * checked, and its extent, the filter's, every batch-norm parameter's and
 * the workspace's looked up in the session's allocations before anything
 * is touched.  On a GPU the real cuDNN (the library rgpu_handlers_cudnn.c
 * opened) runs with real descriptors built per request on the request's
 * stream; on softgpu a host function on the stream runs the CPU code that
 * rgpu_cudnn_cpu.h declares, float only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cudnn.h>

#include "rgpu_cudnn_cpu.h"
#include "rgpu_dispatch.h"
#include "rgpu_handlers_cudnn.h"
#include "rgpu_log.h"
#include "rgpu_worker_internal.h"

#define D (&w->drv)
#define FAIL(status, ...) rgpu_worker_fail(w, (status), __VA_ARGS__)
#define TENSOR(q, X, name, out) \
  rgpu_cudnn_srv_tensor(w, api, name, (q)->X##_type, &(q)->X##_dim, &(q)->X##_stride, (q)->X, out)
#define QUERY_MAX 16

static int same_dims(const dnn_tensor *a, const dnn_tensor *b) {
  return a->nb == b->nb && !memcmp(a->dim, b->dim, sizeof a->dim[0] * (size_t)a->nb);
}

/* Tensors of one shape and type (n of them), each inside the session. */
static CUresult all_alike_in_session(rgpu_worker *w, const char *api, const char *const *names,
                                     const dnn_tensor *const *t, int n) {
  for (int i = 1; i < n; i++)
    if (!same_dims(t[0], t[i]) || t[0]->type != t[i]->type)
      return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: %s and %s differ in shape or type", api, names[0],
                  names[i]);
  for (int i = 0; i < n; i++) {
    CUresult r = rgpu_cudnn_srv_in_session(w, api, names[i], t[i]);
    if (r) return r;
  }
  return CUDA_SUCCESS;
}

/* A byte range [p, p + bytes) inside one allocation (bytes 0: nothing). */
static CUresult range_in_session(rgpu_worker *w, const char *api, const char *name, uint64_t p,
                                 uint64_t bytes) {
  if (bytes && !rgpu_alloc_table_lookup(&w->allocs, p, bytes))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: %s (%llu bytes at 0x%llx) is not inside a device "
                "allocation of this session", api, name, (unsigned long long)bytes,
                (unsigned long long)p);
  return CUDA_SUCCESS;
}

static CUresult float_only(rgpu_worker *w, const char *api, const dnn_tensor *t) {
  if (t->type != CUDNN_DATA_FLOAT)
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s on softgpu: float tensors only (type %u)", api,
                t->type);
  return CUDA_SUCCESS;
}

/* ---- softgpu: host functions in stream order ------------------------------- */

enum { OP_BWD_DATA, OP_BWD_FILTER, OP_BIAS, OP_ACT, OP_POOL, OP_SOFTMAX, OP_BN_INFER,
       OP_BN_TRAIN, OP_BN_BWD, OP_OPTENSOR, OP_SET, OP_SCALE };

/* One operation waiting on its stream: its own copy of what it needs. */
typedef struct {
  int op;
  rgpu_cudnn_cpu_conv conv;
  float *dw;
  rgpu_cudnn_cpu_tensor t[4];
  int mode, algo;
  double coef, swish_beta, alpha, alpha2, beta;
  int window[2], pad[2], stride[2];
  rgpu_cudnn_cpu_batchnorm bn;
} bwd_job;

static void CUDA_CB run_cpu(void *arg) {
  bwd_job *j = arg;
  switch (j->op) {
    case OP_BWD_DATA: rgpu_cudnn_cpu_conv_bwd_data(&j->conv); break;
    case OP_BWD_FILTER: rgpu_cudnn_cpu_conv_bwd_filter(&j->conv, j->dw); break;
    case OP_BIAS: rgpu_cudnn_cpu_reduce_to(&j->t[0], &j->t[1], j->alpha, j->beta); break;
    case OP_ACT:
      rgpu_cudnn_cpu_activation_bwd(&j->t[0], &j->t[1], &j->t[2], &j->t[3], j->mode, j->coef,
                                    j->swish_beta, j->alpha, j->beta);
      break;
    case OP_POOL:
      rgpu_cudnn_cpu_pooling_bwd(&j->t[0], &j->t[1], &j->t[2], &j->t[3], j->mode, j->window,
                                 j->pad, j->stride, j->alpha, j->beta);
      break;
    case OP_SOFTMAX:
      rgpu_cudnn_cpu_softmax_bwd(&j->t[0], &j->t[1], &j->t[2], j->algo, j->mode, j->alpha,
                                 j->beta);
      break;
    case OP_BN_INFER: rgpu_cudnn_cpu_batchnorm_fwd_inference(&j->bn); break;
    case OP_BN_TRAIN: rgpu_cudnn_cpu_batchnorm_fwd_training(&j->bn); break;
    case OP_BN_BWD: rgpu_cudnn_cpu_batchnorm_bwd(&j->bn); break;
    case OP_OPTENSOR:
      rgpu_cudnn_cpu_op_tensor(&j->t[0], &j->t[1], &j->t[2], j->mode, j->alpha, j->alpha2,
                               j->beta);
      break;
    case OP_SET: rgpu_cudnn_cpu_set(&j->t[0], j->alpha); break;
    default: rgpu_cudnn_cpu_scale(&j->t[0], j->alpha); break;
  }
  free(j);
}

static CUresult softgpu_launch(rgpu_worker *w, const char *api, CUstream st, const bwd_job *tmpl) {
  return rgpu_cudnn_srv_host_launch(w, api, st, run_cpu, tmpl, sizeof *tmpl);
}

#define CPU(t) rgpu_cudnn_srv_cpu_tensor(t)

/* ---- a real GPU: NVIDIA's functions, resolved from the opened library ------ */

#define BWD_FUNCS(X)                                                                          \
  X(cudnnCreateTensorDescriptor) X(cudnnSetTensorNdDescriptor) X(cudnnDestroyTensorDescriptor) \
  X(cudnnCreateFilterDescriptor) X(cudnnSetFilterNdDescriptor) X(cudnnDestroyFilterDescriptor) \
  X(cudnnCreateConvolutionDescriptor) X(cudnnSetConvolutionNdDescriptor)                     \
  X(cudnnSetConvolutionMathType) X(cudnnSetConvolutionGroupCount)                            \
  X(cudnnDestroyConvolutionDescriptor) X(cudnnCreateActivationDescriptor)                    \
  X(cudnnSetActivationDescriptor) X(cudnnSetActivationDescriptorSwishBeta)                   \
  X(cudnnDestroyActivationDescriptor) X(cudnnCreatePoolingDescriptor)                        \
  X(cudnnSetPoolingNdDescriptor) X(cudnnDestroyPoolingDescriptor)                            \
  X(cudnnCreateOpTensorDescriptor) X(cudnnSetOpTensorDescriptor)                             \
  X(cudnnDestroyOpTensorDescriptor) X(cudnnConvolutionBackwardData)                          \
  X(cudnnConvolutionBackwardFilter) X(cudnnConvolutionBackwardBias) X(cudnnActivationBackward) \
  X(cudnnPoolingBackward) X(cudnnSoftmaxBackward)                                            \
  X(cudnnGetConvolutionBackwardDataWorkspaceSize)                                            \
  X(cudnnGetConvolutionBackwardDataAlgorithm_v7) X(cudnnFindConvolutionBackwardDataAlgorithm) \
  X(cudnnGetConvolutionBackwardFilterWorkspaceSize)                                          \
  X(cudnnGetConvolutionBackwardFilterAlgorithm_v7)                                           \
  X(cudnnFindConvolutionBackwardFilterAlgorithm) X(cudnnBatchNormalizationForwardInference)  \
  X(cudnnBatchNormalizationForwardTraining) X(cudnnBatchNormalizationBackward)               \
  X(cudnnBatchNormalizationForwardTrainingEx) X(cudnnBatchNormalizationBackwardEx)           \
  X(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize)                                \
  X(cudnnGetBatchNormalizationBackwardExWorkspaceSize)                                       \
  X(cudnnGetBatchNormalizationTrainingExReserveSpaceSize) X(cudnnOpTensor) X(cudnnSetTensor)  \
  X(cudnnScaleTensor)

static struct {
  int state; /* 0 not tried, 1 resolved, -1 a function is missing */
  char err[160];
#define BWD_FIELD(name) __typeof__(&name) name;
  BWD_FUNCS(BWD_FIELD)
#undef BWD_FIELD
} g_fn;

/* The current context's cuDNN handle on stream, with every function this
 * file calls resolved (a session is one process: no lock, as in
 * rgpu_handlers_cudnn.c). */
static CUresult gpu_handle(rgpu_worker *w, const char *api, CUstream st, cudnnHandle_t *h) {
  CUresult r = rgpu_cudnn_server_handle(w, api, st, h);
  if (r) return r;
  if (!g_fn.state) {
    g_fn.state = 1;
#define BWD_RESOLVE(name)                                                      \
    if (g_fn.state > 0 && !(*(void **)&g_fn.name = rgpu_cudnn_server_sym(#name))) { \
      snprintf(g_fn.err, sizeof g_fn.err, "libcudnn.so.9 has no %s", #name);   \
      g_fn.state = -1;                                                         \
    }
    BWD_FUNCS(BWD_RESOLVE)
#undef BWD_RESOLVE
  }
  if (g_fn.state < 0) return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s: %s", api, g_fn.err);
  return CUDA_SUCCESS;
}

/* NVIDIA's descriptors and scaling factors: rgpu_handlers_cudnn.h's. */
typedef rgpu_cudnn_real real_descs;
typedef rgpu_cudnn_scale dnn_scale;
#define real_free rgpu_cudnn_real_free
#define real_tensor rgpu_cudnn_real_tensor
#define real_conv rgpu_cudnn_real_conv
#define scale_for rgpu_cudnn_scale_for

static CUresult gpu_status(rgpu_worker *w, const char *api, cudnnStatus_t s) {
  return s ? FAIL(rgpu_cudnn_srv_status(s), "%s: status %d", api, (int)s) : CUDA_SUCCESS;
}

#define PTR(v) ((void *)(uintptr_t)(v))

/* ---- convolution: data and filter ------------------------------------------ */

#define CONV_FIELDS(q, c, xp, wp, yp)                                                         \
  rgpu_cudnn_srv_conv(w, api, (q)->x_type, &(q)->x_dim, &(q)->x_stride, xp, (q)->w_type,      \
                      (q)->w_format, &(q)->w_dim, wp, &(q)->conv_pad, &(q)->conv_stride,      \
                      &(q)->conv_dilation, (q)->conv_mode, (q)->conv_compute, (q)->conv_math, \
                      (q)->conv_groups, (q)->y_type, &(q)->y_dim, &(q)->y_stride, yp, c)

CUresult rgpu_h_cudnn_conv_bwd(rgpu_req *rq, const rgpu_msg_cudnn_conv_bwd_req *q) {
  rgpu_worker *w = rq->w;
  const char *api = q->direction == 1 ? "cudnnConvolutionBackwardFilter"
                                      : "cudnnConvolutionBackwardData";
  if (q->direction > 1)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cudnn backward convolution: direction %u",
                q->direction);
  uint32_t algo_count = q->direction ? CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT
                                     : CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  if (q->algo >= algo_count) return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: algorithm %u", api, q->algo);
  dnn_conv c;
  CUresult r = CONV_FIELDS(q, &c, q->x, q->w, q->y);
  if (r) return r;
  uint64_t wbytes = rgpu_cudnn_srv_type_size(c.w_type);
  for (int i = 0; i < c.x.nb; i++) wbytes *= (uint64_t)c.w_dim[i];
  if ((r = rgpu_cudnn_srv_in_session(w, api, q->direction ? "x" : "dx", &c.x)) ||
      (r = rgpu_cudnn_srv_in_session(w, api, "dy", &c.y)) ||
      (r = range_in_session(w, api, q->direction ? "dw" : "w", q->w, wbytes)) ||
      (r = range_in_session(w, api, "the workspace", q->workspace, q->workspace_size)))
    return r;
  CUstream st;
  if ((r = rgpu_cudnn_srv_stream(w, q->stream, &st))) return r;
  if (D->is_softgpu) {
    if ((r = float_only(w, api, &c.x)) || (r = float_only(w, api, &c.y))) return r;
    if (c.x.nb != 4 || c.w_format != CUDNN_TENSOR_NCHW)
      return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s on softgpu: 2-d convolutions with NCHW filters "
                  "only", api);
    bwd_job j = {.op = q->direction ? OP_BWD_FILTER : OP_BWD_DATA,
                 .conv = {.x = CPU(&c.x), .y = CPU(&c.y), .w = (const float *)PTR(q->w),
                          .w_dim = {c.w_dim[0], c.w_dim[1], c.w_dim[2], c.w_dim[3]},
                          .pad = {c.pad[0], c.pad[1]}, .stride = {c.stride[0], c.stride[1]},
                          .dilation = {c.dilation[0], c.dilation[1]}, .groups = c.groups,
                          .flip = c.mode == CUDNN_CONVOLUTION, .alpha = q->alpha,
                          .beta = q->beta},
                 .dw = (float *)PTR(q->w)};
    return softgpu_launch(w, api, st, &j);
  }
  cudnnHandle_t h;
  if ((r = gpu_handle(w, api, st, &h))) return r;
  real_descs real = {0};
  cudnnStatus_t s = real_conv(&c, &real);
  dnn_scale al = scale_for(q->direction ? c.w_type : c.x.type, q->alpha);
  dnn_scale be = scale_for(q->direction ? c.w_type : c.x.type, q->beta);
  if (!s && q->direction == 0)
    s = g_fn.cudnnConvolutionBackwardData(h, &al, real.f, PTR(q->w), real.t[1], PTR(q->y),
                                          real.cv, (cudnnConvolutionBwdDataAlgo_t)q->algo,
                                          PTR(q->workspace), q->workspace_size, &be, real.t[0],
                                          PTR(q->x));
  else if (!s)
    s = g_fn.cudnnConvolutionBackwardFilter(h, &al, real.t[0], PTR(q->x), real.t[1], PTR(q->y),
                                            real.cv, (cudnnConvolutionBwdFilterAlgo_t)q->algo,
                                            PTR(q->workspace), q->workspace_size, &be, real.f,
                                            PTR(q->w));
  real_free(&real);
  return gpu_status(w, api, s);
}

CUresult rgpu_h_cudnn_conv_bwd_query(rgpu_req *rq, const rgpu_msg_cudnn_conv_bwd_query_req *q) {
  rgpu_worker *w = rq->w;
  const char *api = "cudnn backward convolution algorithm query";
  if (q->direction > 1 || q->query > 2 || q->requested < 1 ||
      q->algo >= (q->direction ? CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT
                               : CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: direction %u, query %u for %u results, algorithm %u",
                api, q->direction, q->query, q->requested, q->algo);
  dnn_conv c;
  CUresult r = CONV_FIELDS(q, &c, 0, 0, 0);
  if (r) return r;
  uint32_t n = q->query == 0 ? 1 : q->requested < QUERY_MAX ? q->requested : QUERY_MAX;
  uint32_t algo[QUERY_MAX], status[QUERY_MAX], time[QUERY_MAX], det[QUERY_MAX], math[QUERY_MAX];
  uint64_t mem[QUERY_MAX];
  if (D->is_softgpu) {
    /* One algorithm, ALGO_1 of the direction (deterministic in cuDNN):
     * softgpu ignores the choice and needs no workspace for any. */
    float zero = 0;
    algo[0] = q->query == 0 ? q->algo
              : q->direction ? (uint32_t)CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1
                             : (uint32_t)CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
    status[0] = CUDNN_STATUS_SUCCESS;
    memcpy(&time[0], &zero, sizeof zero);
    mem[0] = 0;
    det[0] = CUDNN_DETERMINISTIC;
    math[0] = c.math;
    n = 1;
  } else {
    cudnnHandle_t h;
    if ((r = gpu_handle(w, api, NULL, &h))) return r;
    real_descs real = {0};
    cudnnStatus_t s = real_conv(&c, &real);
    int got = 0;
    /* Both directions' perf records have one layout but for the enum's
     * type: read each through its own type. */
    cudnnConvolutionBwdDataAlgoPerf_t pd[QUERY_MAX];
    cudnnConvolutionBwdFilterAlgoPerf_t pf[QUERY_MAX];
    memset(pd, 0, sizeof pd);
    memset(pf, 0, sizeof pf);
    if (!s && q->query == 0) {
      size_t bytes = 0;
      /* An algorithm that does not fit the shape is an answer, not a
       * failure of the query. */
      cudnnStatus_t ws =
          q->direction
              ? g_fn.cudnnGetConvolutionBackwardFilterWorkspaceSize(
                    h, real.t[0], real.t[1], real.cv, real.f,
                    (cudnnConvolutionBwdFilterAlgo_t)q->algo, &bytes)
              : g_fn.cudnnGetConvolutionBackwardDataWorkspaceSize(
                    h, real.f, real.t[1], real.cv, real.t[0],
                    (cudnnConvolutionBwdDataAlgo_t)q->algo, &bytes);
      pd[0].algo = (cudnnConvolutionBwdDataAlgo_t)q->algo;
      pd[0].status = ws;
      pd[0].memory = bytes;
      pf[0].algo = (cudnnConvolutionBwdFilterAlgo_t)q->algo;
      pf[0].status = ws;
      pf[0].memory = bytes;
      got = 1;
    } else if (!s && q->direction == 0) {
      s = q->query == 1 ? g_fn.cudnnGetConvolutionBackwardDataAlgorithm_v7(
                              h, real.f, real.t[1], real.cv, real.t[0], (int)n, &got, pd)
                        : g_fn.cudnnFindConvolutionBackwardDataAlgorithm(
                              h, real.f, real.t[1], real.cv, real.t[0], (int)n, &got, pd);
    } else if (!s) {
      s = q->query == 1 ? g_fn.cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                              h, real.t[0], real.t[1], real.cv, real.f, (int)n, &got, pf)
                        : g_fn.cudnnFindConvolutionBackwardFilterAlgorithm(
                              h, real.t[0], real.t[1], real.cv, real.f, (int)n, &got, pf);
    }
    real_free(&real);
    if (s) return gpu_status(w, api, s);
    n = got < 0 ? 0 : (uint32_t)got > n ? n : (uint32_t)got;
    for (uint32_t i = 0; i < n; i++) {
      if (q->direction) {
        algo[i] = (uint32_t)pf[i].algo;
        status[i] = (uint32_t)pf[i].status;
        memcpy(&time[i], &pf[i].time, sizeof time[i]);
        mem[i] = pf[i].memory;
        det[i] = (uint32_t)pf[i].determinism;
        math[i] = (uint32_t)pf[i].mathType;
      } else {
        algo[i] = (uint32_t)pd[i].algo;
        status[i] = (uint32_t)pd[i].status;
        memcpy(&time[i], &pd[i].time, sizeof time[i]);
        mem[i] = pd[i].memory;
        det[i] = (uint32_t)pd[i].determinism;
        math[i] = (uint32_t)pd[i].mathType;
      }
    }
  }
  rgpu_msg_cudnn_conv_bwd_query_rep rep = {.algo = {algo, n}, .status = {status, n},
                                           .time = {time, n}, .memory = {mem, n},
                                           .determinism = {det, n}, .math = {math, n}};
  rgpu_msg_cudnn_conv_bwd_query_rep_encode(rq->rep, &rep);
  return CUDA_SUCCESS;
}

/* ---- bias ---------------------------------------------------------------------- */

CUresult rgpu_h_cudnn_conv_bwd_bias(rgpu_req *rq, const rgpu_msg_cudnn_conv_bwd_bias_req *q) {
  rgpu_worker *w = rq->w;
  const char *api = "cudnnConvolutionBackwardBias";
  dnn_tensor dy, db;
  CUresult r = TENSOR(q, dy, "dy", &dy);
  if (!r) r = TENSOR(q, db, "db", &db);
  if (r) return r;
  if (dy.nb != db.nb || dy.type != db.type)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: dy and db differ in rank or type", api);
  for (int i = 0; i < db.nb; i++)
    if (db.dim[i] != dy.dim[i] && db.dim[i] != 1)
      return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: db's dimension %d is neither dy's nor 1", api, i);
  if ((r = rgpu_cudnn_srv_in_session(w, api, "dy", &dy)) ||
      (r = rgpu_cudnn_srv_in_session(w, api, "db", &db)))
    return r;
  CUstream st;
  if ((r = rgpu_cudnn_srv_stream(w, q->stream, &st))) return r;
  if (D->is_softgpu) {
    if ((r = float_only(w, api, &dy))) return r;
    bwd_job j = {.op = OP_BIAS, .t = {CPU(&dy), CPU(&db)}, .alpha = q->alpha, .beta = q->beta};
    return softgpu_launch(w, api, st, &j);
  }
  cudnnHandle_t h;
  if ((r = gpu_handle(w, api, st, &h))) return r;
  real_descs real = {0};
  cudnnStatus_t s = real_tensor(&dy, &real.t[0]);
  if (!s) s = real_tensor(&db, &real.t[1]);
  dnn_scale al = scale_for(db.type, q->alpha), be = scale_for(db.type, q->beta);
  if (!s)
    s = g_fn.cudnnConvolutionBackwardBias(h, &al, real.t[0], PTR(q->dy), &be, real.t[1],
                                          PTR(q->db));
  real_free(&real);
  return gpu_status(w, api, s);
}

/* ---- activation, pooling, softmax ---------------------------------------------- */

/* The four tensors of an activation or pooling backward, checked: y, dy
 * alike; x, dx alike; all of one type, all in the session. */
#define FOUR(q, y, dy, x, dx)                                                              \
  do {                                                                                     \
    CUresult r_ = TENSOR(q, y, "y", &y);                                                   \
    if (!r_) r_ = TENSOR(q, dy, "dy", &dy);                                                \
    if (!r_) r_ = TENSOR(q, x, "x", &x);                                                   \
    if (!r_) r_ = TENSOR(q, dx, "dx", &dx);                                                \
    static const char *const yn_[] = {"y", "dy"}, *const xn_[] = {"x", "dx"};              \
    const dnn_tensor *yt_[] = {&y, &dy}, *xt_[] = {&x, &dx};                               \
    if (!r_) r_ = all_alike_in_session(w, api, yn_, yt_, 2);                               \
    if (!r_) r_ = all_alike_in_session(w, api, xn_, xt_, 2);                               \
    if (!r_ && (x.type != y.type || x.nb != y.nb))                                         \
      r_ = FAIL(CUDA_ERROR_INVALID_VALUE, "%s: x and y differ in rank or type", api);      \
    if (r_) return r_;                                                                     \
  } while (0)

CUresult rgpu_h_cudnn_activation_bwd(rgpu_req *rq, const rgpu_msg_cudnn_activation_bwd_req *q) {
  rgpu_worker *w = rq->w;
  const char *api = "cudnnActivationBackward";
  dnn_tensor y, dy, x, dx;
  FOUR(q, y, dy, x, dx);
  if (!same_dims(&x, &y))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: x and y differ in shape", api);
  if (q->act_mode > CUDNN_ACTIVATION_SWISH || q->act_nan > CUDNN_PROPAGATE_NAN)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: activation mode %u", api, q->act_mode);
  CUresult r;
  CUstream st;
  if ((r = rgpu_cudnn_srv_stream(w, q->stream, &st))) return r;
  if (D->is_softgpu) {
    if ((r = float_only(w, api, &x))) return r;
    bwd_job j = {.op = OP_ACT, .t = {CPU(&y), CPU(&dy), CPU(&x), CPU(&dx)},
                 .mode = (int)q->act_mode, .coef = q->act_coef, .swish_beta = q->act_swish_beta,
                 .alpha = q->alpha, .beta = q->beta};
    return softgpu_launch(w, api, st, &j);
  }
  cudnnHandle_t h;
  if ((r = gpu_handle(w, api, st, &h))) return r;
  real_descs real = {0};
  cudnnStatus_t s = real_tensor(&y, &real.t[0]);
  if (!s) s = real_tensor(&dy, &real.t[1]);
  if (!s) s = real_tensor(&x, &real.t[2]);
  if (!s) s = real_tensor(&dx, &real.t[3]);
  if (!s) s = g_fn.cudnnCreateActivationDescriptor(&real.act);
  if (!s)
    s = g_fn.cudnnSetActivationDescriptor(real.act, (cudnnActivationMode_t)q->act_mode,
                                          (cudnnNanPropagation_t)q->act_nan, q->act_coef);
  if (!s && q->act_mode == CUDNN_ACTIVATION_SWISH)
    s = g_fn.cudnnSetActivationDescriptorSwishBeta(real.act, q->act_swish_beta);
  dnn_scale al = scale_for(dx.type, q->alpha), be = scale_for(dx.type, q->beta);
  if (!s)
    s = g_fn.cudnnActivationBackward(h, real.act, &al, real.t[0], PTR(q->y), real.t[1],
                                     PTR(q->dy), real.t[2], PTR(q->x), &be, real.t[3],
                                     PTR(q->dx));
  real_free(&real);
  return gpu_status(w, api, s);
}

CUresult rgpu_h_cudnn_pooling_bwd(rgpu_req *rq, const rgpu_msg_cudnn_pooling_bwd_req *q) {
  rgpu_worker *w = rq->w;
  const char *api = "cudnnPoolingBackward";
  dnn_tensor y, dy, x, dx;
  FOUR(q, y, dy, x, dx);
  int ns = x.nb - 2, win[6], pad[6], str[6];
  if (q->pool_window.count != (uint32_t)ns || q->pool_pad.count != (uint32_t)ns ||
      q->pool_stride.count != (uint32_t)ns || q->pool_mode > CUDNN_POOLING_MAX_DETERMINISTIC ||
      q->pool_nan > CUDNN_PROPAGATE_NAN || y.dim[0] != x.dim[0] || y.dim[1] != x.dim[1])
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: the pooling does not fit x and y", api);
  for (int i = 0; i < ns; i++) {
    win[i] = rgpu_array_i32(&q->pool_window, i);
    pad[i] = rgpu_array_i32(&q->pool_pad, i);
    str[i] = rgpu_array_i32(&q->pool_stride, i);
    int64_t room = (int64_t)x.dim[i + 2] + 2 * (int64_t)pad[i] - win[i];
    if (win[i] <= 0 || pad[i] < 0 || str[i] <= 0 || room < 0 || 1 + room / str[i] != y.dim[i + 2])
      return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: y's dimension %d is not the output's", api, i + 2);
  }
  CUresult r;
  CUstream st;
  if ((r = rgpu_cudnn_srv_stream(w, q->stream, &st))) return r;
  if (D->is_softgpu) {
    if ((r = float_only(w, api, &x))) return r;
    if (ns != 2) return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s on softgpu: 2-d pooling only", api);
    bwd_job j = {.op = OP_POOL, .t = {CPU(&y), CPU(&dy), CPU(&x), CPU(&dx)},
                 .mode = (int)q->pool_mode, .window = {win[0], win[1]}, .pad = {pad[0], pad[1]},
                 .stride = {str[0], str[1]}, .alpha = q->alpha, .beta = q->beta};
    return softgpu_launch(w, api, st, &j);
  }
  cudnnHandle_t h;
  if ((r = gpu_handle(w, api, st, &h))) return r;
  real_descs real = {0};
  cudnnStatus_t s = real_tensor(&y, &real.t[0]);
  if (!s) s = real_tensor(&dy, &real.t[1]);
  if (!s) s = real_tensor(&x, &real.t[2]);
  if (!s) s = real_tensor(&dx, &real.t[3]);
  if (!s) s = g_fn.cudnnCreatePoolingDescriptor(&real.pool);
  if (!s)
    s = g_fn.cudnnSetPoolingNdDescriptor(real.pool, (cudnnPoolingMode_t)q->pool_mode,
                                         (cudnnNanPropagation_t)q->pool_nan, ns, win, pad, str);
  dnn_scale al = scale_for(dx.type, q->alpha), be = scale_for(dx.type, q->beta);
  if (!s)
    s = g_fn.cudnnPoolingBackward(h, real.pool, &al, real.t[0], PTR(q->y), real.t[1], PTR(q->dy),
                                  real.t[2], PTR(q->x), &be, real.t[3], PTR(q->dx));
  real_free(&real);
  return gpu_status(w, api, s);
}

CUresult rgpu_h_cudnn_softmax_bwd(rgpu_req *rq, const rgpu_msg_cudnn_softmax_bwd_req *q) {
  rgpu_worker *w = rq->w;
  const char *api = "cudnnSoftmaxBackward";
  dnn_tensor y, dy, dx;
  CUresult r = TENSOR(q, y, "y", &y);
  if (!r) r = TENSOR(q, dy, "dy", &dy);
  if (!r) r = TENSOR(q, dx, "dx", &dx);
  static const char *const names[] = {"y", "dy", "dx"};
  const dnn_tensor *ts[] = {&y, &dy, &dx};
  if (!r) r = all_alike_in_session(w, api, names, ts, 3);
  if (r) return r;
  if (q->softmax_algo > CUDNN_SOFTMAX_LOG || q->softmax_mode > CUDNN_SOFTMAX_MODE_CHANNEL)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: algorithm %u, mode %u", api, q->softmax_algo,
                q->softmax_mode);
  CUstream st;
  if ((r = rgpu_cudnn_srv_stream(w, q->stream, &st))) return r;
  if (D->is_softgpu) {
    if ((r = float_only(w, api, &y))) return r;
    bwd_job j = {.op = OP_SOFTMAX, .t = {CPU(&y), CPU(&dy), CPU(&dx)},
                 .algo = (int)q->softmax_algo, .mode = (int)q->softmax_mode, .alpha = q->alpha,
                 .beta = q->beta};
    return softgpu_launch(w, api, st, &j);
  }
  cudnnHandle_t h;
  if ((r = gpu_handle(w, api, st, &h))) return r;
  real_descs real = {0};
  cudnnStatus_t s = real_tensor(&y, &real.t[0]);
  if (!s) s = real_tensor(&dy, &real.t[1]);
  if (!s) s = real_tensor(&dx, &real.t[2]);
  dnn_scale al = scale_for(dx.type, q->alpha), be = scale_for(dx.type, q->beta);
  if (!s)
    s = g_fn.cudnnSoftmaxBackward(h, (cudnnSoftmaxAlgorithm_t)q->softmax_algo,
                                  (cudnnSoftmaxMode_t)q->softmax_mode, &al, real.t[0], PTR(q->y),
                                  real.t[1], PTR(q->dy), &be, real.t[2], PTR(q->dx));
  real_free(&real);
  return gpu_status(w, api, s);
}

/* ---- batch normalization ---------------------------------------------------------- */

enum { PHASE_INFERENCE = 0, PHASE_TRAINING = 1, PHASE_BACKWARD = 2 };

/* p is the parameters' shape for x and mode: 1xCx1x1 (spatial) or
 * 1xCxHxW (per activation). */
static int bn_param_shape(const dnn_tensor *x, uint32_t mode, const dnn_tensor *p) {
  if (x->nb < 4 || x->nb > 5 || p->nb != x->nb) return 0;
  for (int i = 0; i < x->nb; i++) {
    int want = i == 0 ? 1 : i == 1 || mode == CUDNN_BATCHNORM_PER_ACTIVATION ? x->dim[i] : 1;
    if (p->dim[i] != want) return 0;
  }
  return 1;
}

/* p's strides are packed (softgpu reads the parameters as dense arrays). */
static int packed(const dnn_tensor *p) {
  int64_t s = 1;
  for (int i = p->nb - 1; i >= 0; i--) {
    if (p->dim[i] != 1 && p->stride[i] != s) return 0;
    s *= p->dim[i];
  }
  return 1;
}

CUresult rgpu_h_cudnn_batchnorm(rgpu_req *rq, const rgpu_msg_cudnn_batchnorm_req *q) {
  rgpu_worker *w = rq->w;
  static const char *const apis[2][3] = {
      {"cudnnBatchNormalizationForwardInference", "cudnnBatchNormalizationForwardTraining",
       "cudnnBatchNormalizationBackward"},
      {"cudnnBatchNormalizationForwardInference", "cudnnBatchNormalizationForwardTrainingEx",
       "cudnnBatchNormalizationBackwardEx"}};
  if (q->phase > PHASE_BACKWARD || q->ex > 1 || q->mode > CUDNN_BATCHNORM_SPATIAL_PERSISTENT ||
      !(q->epsilon >= CUDNN_BN_MIN_EPSILON))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cudnn batch normalization: phase %u, mode %u, "
                "epsilon %g", q->phase, q->mode, q->epsilon);
  const char *api = apis[q->ex][q->phase];
  int bwd = q->phase == PHASE_BACKWARD;
  dnn_tensor x, y, dx, p;
  memset(&dx, 0, sizeof dx);
  CUresult r = TENSOR(q, x, "x", &x);
  if (!r) r = TENSOR(q, y, bwd ? "dy" : "y", &y);
  if (!r && bwd) r = TENSOR(q, dx, "dx", &dx);
  if (!r) r = rgpu_cudnn_srv_tensor(w, api, "the parameters' descriptor", q->p_type, &q->p_dim,
                                    &q->p_stride, 0, &p);
  if (r) return r;
  static const char *const names[2][3] = {{"x", "y", "dx"}, {"x", "dy", "dx"}};
  const dnn_tensor *ts[] = {&x, &y, &dx};
  if ((r = all_alike_in_session(w, api, names[bwd], ts, bwd ? 3 : 2))) return r;
  if (!bn_param_shape(&x, q->mode, &p))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: the parameters' descriptor is not x's derived "
                "shape for mode %u", api, q->mode);
  /* Which parameter pointers the phase needs (1), may omit (2: both of a
   * pair or neither; 3: alone, as the backward Ex form's bias, which ops
   * BN does not read) or does not use (0).  Every pointer passed on is
   * checked. */
  const struct {
    const char *name;
    uint64_t ptr;
    int need[3];
  } params[] = {
      {"scale", q->scale, {1, 1, 1}},          {"bias", q->bias, {1, 1, 3}},
      {"mean", q->mean, {1, 2, 0}},            {"variance", q->variance, {1, 2, 0}},
      {"save_mean", q->save_mean, {0, 2, 2}},  {"save_inv_std", q->save_inv_std, {0, 2, 2}},
      {"dscale", q->dscale, {0, 0, 1}},        {"dbias", q->dbias, {0, 0, 1}}};
  uint64_t pbytes = rgpu_cudnn_srv_type_size(p.type);
  for (int i = 0; i < p.nb; i++) pbytes *= (uint64_t)p.dim[i];
  for (size_t i = 0; i < sizeof params / sizeof params[0]; i++) {
    int need = params[i].need[q->phase];
    if (need == 1 && !params[i].ptr)
      return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: %s is missing", api, params[i].name);
    if (need == 2 && !params[i].ptr != !params[i ^ 1].ptr)
      return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: %s and %s go together", api,
                  params[i & ~1u].name, params[i | 1].name);
    if (need && params[i].ptr && (r = range_in_session(w, api, params[i].name, params[i].ptr,
                                                       pbytes)))
      return r;
  }
  if ((r = range_in_session(w, api, "the workspace", q->workspace, q->workspace_size)) ||
      (r = range_in_session(w, api, "the reserve space", q->reserve, q->reserve_size)))
    return r;
  CUstream st;
  if ((r = rgpu_cudnn_srv_stream(w, q->stream, &st))) return r;
  if (D->is_softgpu) {
    if ((r = float_only(w, api, &x)) || (r = float_only(w, api, &p))) return r;
    if (!packed(&p))
      return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s on softgpu: packed parameter tensors only", api);
    bwd_job j = {.op = q->phase == PHASE_INFERENCE  ? OP_BN_INFER
                       : q->phase == PHASE_TRAINING ? OP_BN_TRAIN
                                                    : OP_BN_BWD,
                 .bn = {.x = CPU(&x), .y = CPU(&y), .mode = (int)q->mode,
                        .epsilon = q->epsilon, .alpha = q->alpha, .beta = q->beta,
                        .alpha_param = q->alpha_param, .beta_param = q->beta_param,
                        .scale = PTR(q->scale), .bias = PTR(q->bias), .dscale = PTR(q->dscale),
                        .dbias = PTR(q->dbias), .mean = PTR(q->mean),
                        .variance = PTR(q->variance), .factor = q->factor,
                        .save_mean = PTR(q->save_mean), .save_inv_std = PTR(q->save_inv_std)}};
    if (bwd) j.bn.dx = CPU(&dx);
    return softgpu_launch(w, api, st, &j);
  }
  cudnnHandle_t h;
  if ((r = gpu_handle(w, api, st, &h))) return r;
  real_descs real = {0};
  cudnnStatus_t s = real_tensor(&x, &real.t[0]);
  if (!s) s = real_tensor(&y, &real.t[1]);
  if (!s) s = real_tensor(&p, &real.t[2]);
  if (!s && bwd) s = real_tensor(&dx, &real.t[3]);
  dnn_scale al = scale_for(x.type, q->alpha), be = scale_for(x.type, q->beta);
  dnn_scale alp = scale_for(x.type, q->alpha_param), bep = scale_for(x.type, q->beta_param);
  cudnnBatchNormMode_t mode = (cudnnBatchNormMode_t)q->mode;
  if (s) {
  } else if (q->phase == PHASE_INFERENCE) {
    s = g_fn.cudnnBatchNormalizationForwardInference(
        h, mode, &al, &be, real.t[0], PTR(q->x), real.t[1], PTR(q->y), real.t[2], PTR(q->scale),
        PTR(q->bias), PTR(q->mean), PTR(q->variance), q->epsilon);
  } else if (q->phase == PHASE_TRAINING && !q->ex) {
    s = g_fn.cudnnBatchNormalizationForwardTraining(
        h, mode, &al, &be, real.t[0], PTR(q->x), real.t[1], PTR(q->y), real.t[2], PTR(q->scale),
        PTR(q->bias), q->factor, PTR(q->mean), PTR(q->variance), q->epsilon, PTR(q->save_mean),
        PTR(q->save_inv_std));
  } else if (q->phase == PHASE_TRAINING) {
    s = g_fn.cudnnBatchNormalizationForwardTrainingEx(
        h, mode, CUDNN_BATCHNORM_OPS_BN, &al, &be, real.t[0], PTR(q->x), NULL, NULL, real.t[1],
        PTR(q->y), real.t[2], PTR(q->scale), PTR(q->bias), q->factor, PTR(q->mean),
        PTR(q->variance), q->epsilon, PTR(q->save_mean), PTR(q->save_inv_std), NULL,
        PTR(q->workspace), q->workspace_size, PTR(q->reserve), q->reserve_size);
  } else if (!q->ex) {
    s = g_fn.cudnnBatchNormalizationBackward(
        h, mode, &al, &be, &alp, &bep, real.t[0], PTR(q->x), real.t[1], PTR(q->y), real.t[3],
        PTR(q->dx), real.t[2], PTR(q->scale), PTR(q->dscale), PTR(q->dbias), q->epsilon,
        PTR(q->save_mean), PTR(q->save_inv_std));
  } else {
    s = g_fn.cudnnBatchNormalizationBackwardEx(
        h, mode, CUDNN_BATCHNORM_OPS_BN, &al, &be, &alp, &bep, real.t[0], PTR(q->x), NULL, NULL,
        real.t[1], PTR(q->y), NULL, NULL, real.t[3], PTR(q->dx), real.t[2], PTR(q->scale),
        PTR(q->bias), PTR(q->dscale), PTR(q->dbias), q->epsilon, PTR(q->save_mean),
        PTR(q->save_inv_std), NULL, PTR(q->workspace), q->workspace_size, PTR(q->reserve),
        q->reserve_size);
  }
  real_free(&real);
  return gpu_status(w, api, s);
}

CUresult rgpu_h_cudnn_batchnorm_query(rgpu_req *rq, const rgpu_msg_cudnn_batchnorm_query_req *q) {
  rgpu_worker *w = rq->w;
  const char *api = "cudnn batch-norm size query";
  if (q->which > 2 || q->mode > CUDNN_BATCHNORM_SPATIAL_PERSISTENT)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: query %u, mode %u", api, q->which, q->mode);
  dnn_tensor x, p;
  CUresult r = rgpu_cudnn_srv_tensor(w, api, "x", q->x_type, &q->x_dim, &q->x_stride, 0, &x);
  if (r) return r;
  /* The reserve size has no parameter descriptor. */
  int has_p = q->which != 2;
  if (has_p) {
    if ((r = rgpu_cudnn_srv_tensor(w, api, "the parameters' descriptor", q->p_type, &q->p_dim,
                                   &q->p_stride, 0, &p)))
      return r;
    if (!bn_param_shape(&x, q->mode, &p))
      return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: the parameters' descriptor is not x's derived "
                  "shape", api);
  }
  uint64_t size = 0; /* softgpu needs neither workspace nor reserve */
  if (!D->is_softgpu) {
    cudnnHandle_t h;
    if ((r = gpu_handle(w, api, NULL, &h))) return r;
    real_descs real = {0};
    cudnnStatus_t s = real_tensor(&x, &real.t[0]);
    if (!s && has_p) s = real_tensor(&p, &real.t[1]);
    size_t bytes = 0;
    cudnnBatchNormMode_t mode = (cudnnBatchNormMode_t)q->mode;
    /* x also describes y, dy and dx (ops BN: no z, no activation). */
    if (s) {
    } else if (q->which == 0) {
      s = g_fn.cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
          h, mode, CUDNN_BATCHNORM_OPS_BN, real.t[0], NULL, real.t[0], real.t[1], NULL, &bytes);
    } else if (q->which == 1) {
      s = g_fn.cudnnGetBatchNormalizationBackwardExWorkspaceSize(
          h, mode, CUDNN_BATCHNORM_OPS_BN, real.t[0], real.t[0], real.t[0], NULL, real.t[0],
          real.t[1], NULL, &bytes);
    } else {
      s = g_fn.cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
          h, mode, CUDNN_BATCHNORM_OPS_BN, NULL, real.t[0], &bytes);
    }
    real_free(&real);
    if (s) return gpu_status(w, api, s);
    size = bytes;
  }
  rgpu_msg_cudnn_batchnorm_query_rep rep = {.size = size};
  rgpu_msg_cudnn_batchnorm_query_rep_encode(rq->rep, &rep);
  return CUDA_SUCCESS;
}

/* ---- op-tensor, set, scale ------------------------------------------------------------ */

CUresult rgpu_h_cudnn_op_tensor(rgpu_req *rq, const rgpu_msg_cudnn_op_tensor_req *q) {
  rgpu_worker *w = rq->w;
  const char *api = "cudnnOpTensor";
  if (q->op > CUDNN_OP_TENSOR_NOT || q->op_nan > CUDNN_PROPAGATE_NAN ||
      !rgpu_cudnn_srv_type_size(q->op_compute))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: op %u, compute type %u", api, q->op, q->op_compute);
  int unary = q->op == CUDNN_OP_TENSOR_SQRT || q->op == CUDNN_OP_TENSOR_NOT;
  dnn_tensor a, b, c;
  memset(&b, 0, sizeof b);
  CUresult r = TENSOR(q, a, "A", &a);
  if (!r && !unary) r = TENSOR(q, b, "B", &b);
  if (!r) r = TENSOR(q, c, "C", &c);
  if (r) return r;
  const dnn_tensor *in[2] = {&a, &b};
  for (int k = 0; k < 2 - unary; k++) {
    if (in[k]->nb != c.nb || in[k]->type != c.type)
      return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: %s and C differ in rank or type", api,
                  k ? "B" : "A");
    for (int i = 0; i < c.nb; i++)
      if (in[k]->dim[i] != c.dim[i] && in[k]->dim[i] != 1)
        return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: %s's dimension %d is neither C's nor 1", api,
                    k ? "B" : "A", i);
  }
  if ((r = rgpu_cudnn_srv_in_session(w, api, "A", &a)) ||
      (!unary && (r = rgpu_cudnn_srv_in_session(w, api, "B", &b))) ||
      (r = rgpu_cudnn_srv_in_session(w, api, "C", &c)))
    return r;
  CUstream st;
  if ((r = rgpu_cudnn_srv_stream(w, q->stream, &st))) return r;
  if (D->is_softgpu) {
    if ((r = float_only(w, api, &c))) return r;
    bwd_job j = {.op = OP_OPTENSOR, .t = {CPU(&a), CPU(unary ? &a : &b), CPU(&c)},
                 .mode = (int)q->op, .alpha = q->alpha1, .alpha2 = q->alpha2, .beta = q->beta};
    return softgpu_launch(w, api, st, &j);
  }
  cudnnHandle_t h;
  if ((r = gpu_handle(w, api, st, &h))) return r;
  real_descs real = {0};
  cudnnStatus_t s = real_tensor(&a, &real.t[0]);
  /* cuDNN ignores B for SQRT and NOT; A stands in for it. */
  if (!s) s = real_tensor(unary ? &a : &b, &real.t[1]);
  if (!s) s = real_tensor(&c, &real.t[2]);
  if (!s) s = g_fn.cudnnCreateOpTensorDescriptor(&real.op);
  if (!s)
    s = g_fn.cudnnSetOpTensorDescriptor(real.op, (cudnnOpTensorOp_t)q->op,
                                        (cudnnDataType_t)q->op_compute,
                                        (cudnnNanPropagation_t)q->op_nan);
  dnn_scale a1 = scale_for(c.type, q->alpha1), a2 = scale_for(c.type, q->alpha2),
            be = scale_for(c.type, q->beta);
  if (!s)
    s = g_fn.cudnnOpTensor(h, real.op, &a1, real.t[0], PTR(q->a), &a2, real.t[1],
                           PTR(unary ? q->a : q->b), &be, real.t[2], PTR(q->c));
  real_free(&real);
  return gpu_status(w, api, s);
}

CUresult rgpu_h_cudnn_set_tensor(rgpu_req *rq, const rgpu_msg_cudnn_set_tensor_req *q) {
  rgpu_worker *w = rq->w;
  const char *api = q->op == 1 ? "cudnnScaleTensor" : "cudnnSetTensor";
  if (q->op > 1) return FAIL(CUDA_ERROR_INVALID_VALUE, "cudnn set/scale tensor: op %u", q->op);
  dnn_tensor y;
  CUresult r = TENSOR(q, y, "y", &y);
  if (!r) r = rgpu_cudnn_srv_in_session(w, api, "y", &y);
  if (r) return r;
  if (q->op == 0 && y.type != CUDNN_DATA_FLOAT && y.type != CUDNN_DATA_DOUBLE)
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s: data type %u (float and double only)", api, y.type);
  CUstream st;
  if ((r = rgpu_cudnn_srv_stream(w, q->stream, &st))) return r;
  if (D->is_softgpu) {
    if ((r = float_only(w, api, &y))) return r;
    bwd_job j = {.op = q->op ? OP_SCALE : OP_SET, .t = {CPU(&y)}, .alpha = q->value};
    return softgpu_launch(w, api, st, &j);
  }
  cudnnHandle_t h;
  if ((r = gpu_handle(w, api, st, &h))) return r;
  real_descs real = {0};
  cudnnStatus_t s = real_tensor(&y, &real.t[0]);
  /* SetTensor's value has y's type; ScaleTensor's alpha cuDNN's rule
   * (double for double data, float otherwise): the same two widths here. */
  dnn_scale v = scale_for(y.type, q->value);
  if (!s)
    s = q->op ? g_fn.cudnnScaleTensor(h, real.t[0], PTR(q->y), &v)
              : g_fn.cudnnSetTensor(h, real.t[0], PTR(q->y), &v);
  real_free(&real);
  return gpu_status(w, api, s);
}
