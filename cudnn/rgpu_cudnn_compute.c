/* The legacy forward calls: cudnnConvolutionForward, cudnnAddTensor,
 * cudnnActivationForward, cudnnPoolingForward, cudnnSoftmaxForward (each
 * one request without a reply, carrying its descriptors' content; errors
 * deferred like a kernel launch's).
 *
 * Each is queued on its stream like a kernel launch (rgpu_cudnn_submit):
 * on a capturing stream it becomes a graph node that sends the same request
 * at every launch of the graph.
 *
 * The checks here are cuDNN's (a bad call fails at once with its status:
 * descriptors not set, shapes that do not match, NULL pointers).  What
 * only the server can check (that every tensor and the workspace lie in
 * allocations of the session, that its backend computes the types) fails
 * there and comes back as a deferred error. */
#include <string.h>

#include "rgpu_calls.h"
#include "rgpu_cudart.h"
#include "rgpu_cudart_graph.h"
#include "rgpu_cudart_op.h"
#include "rgpu_cudnn_call.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"

cudnnStatus_t rgpu_cudnn_enter_stream(struct cudnnContext *h, rgpu_client **c, uint64_t *wire,
                                      int *device) {
  if (rgpu_rt_enter(c) != cudaSuccess) return CUDNN_STATUS_EXECUTION_FAILED;
  /* A stream destroyed after cudnnSetStream: cuDNN's launch fails. */
  if (rgpu_rt_stream_resolve(*c, h->stream, 0, wire, device) != cudaSuccess)
    return CUDNN_STATUS_EXECUTION_FAILED;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t rgpu_cudnn_submit(rgpu_client *c, int device, uint64_t wire, uint16_t opcode,
                                int encode_rc, rgpu_buf *req) {
  if (encode_rc || req->err) {
    rgpu_buf_free(req);
    return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
  }
  /* Every cuDNN compute request begins u64 handle, u64 stream. */
  cudaError_t e = rgpu_rt_submit_request(c, device, wire, opcode, 8, req);
  return e == cudaSuccess ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_EXECUTION_FAILED;
}

cudnnStatus_t rgpu_cudnn_reply_status(rgpu_client *c, rgpu_status rc, const char *api,
                                      const char *msg) {
  if (rc < 0) {
    /* The connection failed: the runtime's rules (a sticky error). */
    rgpu_rt_sync_ret(c, rc);
    return CUDNN_STATUS_EXECUTION_FAILED;
  }
  /* The server's answer (a cuDNN status turned CUresult, or its refusal):
   * a status of this call. */
  RGPU_WARN("%s: the server answered %d: %s", api, (int)rc, msg ? msg : "");
  return rc == CUDA_ERROR_NOT_SUPPORTED    ? CUDNN_STATUS_NOT_SUPPORTED
         : rc == CUDA_ERROR_INVALID_VALUE ? CUDNN_STATUS_BAD_PARAM
                                          : CUDNN_STATUS_EXECUTION_FAILED;
}

cudnnStatus_t rgpu_cudnn_enter(struct cudnnContext *h, const char *api, rgpu_client **c,
                               uint64_t *wire, int *device) {
  cudnnStatus_t st = rgpu_cudnn_enter_stream(h, c, wire, device);
  if (st) return st;
  if (rgpu_rt_graph_is_capturing(*wire)) {
    static int logged;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      RGPU_WARN("%s on a capturing stream is not supported by rgpu yet (a cuDNN call is no "
                "graph node kind); it returns CUDNN_STATUS_NOT_SUPPORTED", api);
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  return CUDNN_STATUS_SUCCESS;
}

/* A host scaling factor: double for double data, float otherwise (cuDNN's
 * rule for alpha and beta). */
static double scale_of(int type, const void *p) {
  return type == CUDNN_DATA_DOUBLE ? *(const double *)p : (double)*(const float *)p;
}

static int same_dims(const struct cudnnTensorStruct *a, const struct cudnnTensorStruct *b) {
  return a->nb_dims == b->nb_dims &&
         !memcmp(a->dim, b->dim, sizeof a->dim[0] * (size_t)a->nb_dims);
}

#define TENSOR_FIELDS(q, x, t, ptr)                                 \
  do {                                                              \
    (q).x##_type = (uint32_t)(t)->type;                             \
    (q).x##_dim = (rgpu_array){(t)->dim, (uint32_t)(t)->nb_dims};    \
    (q).x##_stride = (rgpu_array){(t)->stride, (uint32_t)(t)->nb_dims}; \
    (q).x = (uint64_t)(uintptr_t)(ptr);                             \
  } while (0)

/* ---- convolution --------------------------------------------------------- */

cudnnStatus_t rgpu_cudnn_conv_check(const struct cudnnTensorStruct *x,
                                    const struct cudnnFilterStruct *w,
                                    const struct cudnnConvolutionStruct *cv,
                                    const struct cudnnTensorStruct *y) {
  if (!x || !w || !cv || !y || !y->set) return CUDNN_STATUS_BAD_PARAM;
  int out[RGPU_CUDNN_DIM_MAX];
  cudnnStatus_t st = rgpu_cudnn_conv_output_dims(cv, x, w, x->nb_dims, out);
  if (st) return st;
  /* A y that is not the convolution's output: cuDNN 9 answers
   * NOT_SUPPORTED (measured on the H200 with cudnnConvolutionForward), as
   * no engine takes the shapes, not BAD_PARAM. */
  if (y->nb_dims != x->nb_dims || memcmp(out, y->dim, sizeof out[0] * (size_t)y->nb_dims))
    return CUDNN_STATUS_NOT_SUPPORTED;
  if (x->type != w->type) return CUDNN_STATUS_BAD_PARAM;
  return CUDNN_STATUS_SUCCESS;
}

void rgpu_cudnn_conv_shape_fields(rgpu_msg_cudnn_conv_fwd_req *q,
                                  const struct cudnnTensorStruct *x,
                                  const struct cudnnFilterStruct *w,
                                  const struct cudnnConvolutionStruct *cv,
                                  const struct cudnnTensorStruct *y) {
  TENSOR_FIELDS(*q, x, x, 0);
  TENSOR_FIELDS(*q, y, y, 0);
  q->w_type = (uint32_t)w->type;
  q->w_format = (uint32_t)w->format;
  q->w_dim = (rgpu_array){w->dim, (uint32_t)w->nb_dims};
  q->conv_pad = (rgpu_array){cv->pad, (uint32_t)cv->nb_spatial};
  q->conv_stride = (rgpu_array){cv->stride, (uint32_t)cv->nb_spatial};
  q->conv_dilation = (rgpu_array){cv->dilation, (uint32_t)cv->nb_spatial};
  q->conv_mode = (uint32_t)cv->mode;
  q->conv_compute = (uint32_t)cv->compute_type;
  q->conv_math = (uint32_t)cv->math_type;
  q->conv_groups = cv->group_count;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnConvolutionForward(
    cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc, const void *x,
    const cudnnFilterDescriptor_t wDesc, const void *w, const cudnnConvolutionDescriptor_t convDesc,
    cudnnConvolutionFwdAlgo_t algo, void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
    const cudnnTensorDescriptor_t yDesc, void *y) {
  struct cudnnContext *h = rgpu_cudnn_handle(handle);
  struct cudnnTensorStruct *xt = rgpu_cudnn_tensor(xDesc), *yt = rgpu_cudnn_tensor(yDesc);
  struct cudnnFilterStruct *wf = rgpu_cudnn_filter(wDesc);
  struct cudnnConvolutionStruct *cv = rgpu_cudnn_conv(convDesc);
  cudnnStatus_t st = !h ? CUDNN_STATUS_BAD_PARAM : rgpu_cudnn_conv_check(xt, wf, cv, yt);
  if (!st && (!alpha || !beta || !x || !w || !y || (workSpaceSizeInBytes && !workSpace) ||
              (int)algo < 0 || (int)algo >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT))
    st = CUDNN_STATUS_BAD_PARAM;
  if (st) {
    rgpu_rt_count_call();
    return st;
  }
  rgpu_client *c;
  uint64_t wire;
  int device;
  if ((st = rgpu_cudnn_enter_stream(h, &c, &wire, &device))) return st;
  rgpu_msg_cudnn_conv_fwd_req q = {.handle = h->id,
                                   .stream = wire,
                                   .alpha = scale_of(yt->type, alpha),
                                   .beta = scale_of(yt->type, beta),
                                   .algo = (uint32_t)algo,
                                   .workspace = (uint64_t)(uintptr_t)workSpace,
                                   .workspace_size = workSpace ? workSpaceSizeInBytes : 0};
  rgpu_cudnn_conv_shape_fields(&q, xt, wf, cv, yt);
  q.x = (uint64_t)(uintptr_t)x;
  q.w = (uint64_t)(uintptr_t)w;
  q.y = (uint64_t)(uintptr_t)y;
  return RGPU_CUDNN_SUBMIT(c, device, wire, CUDNN_CONV_FWD, cudnn_conv_fwd, &q);
}

/* ---- bias add, activation, pooling, softmax ------------------------------ */

/* cudnnAddTensor (transform 0: A broadcast into C) and cudnnTransformTensor
 * (1: x into y of the same dimensions, any strides): C = alpha A + beta C,
 * one message. */
static cudnnStatus_t add_or_transform(int transform, cudnnHandle_t handle, const void *alpha,
                                      const cudnnTensorDescriptor_t aDesc, const void *A,
                                      const void *beta, const cudnnTensorDescriptor_t cDesc,
                                      void *C) {
  struct cudnnContext *h = rgpu_cudnn_handle(handle);
  struct cudnnTensorStruct *a = rgpu_cudnn_tensor(aDesc), *ct = rgpu_cudnn_tensor(cDesc);
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  if (!h || !a || !a->set || !ct || !ct->set || !alpha || !beta || !A || !C ||
      a->nb_dims != ct->nb_dims || a->type != ct->type)
    st = CUDNN_STATUS_BAD_PARAM;
  /* Each of A's dimensions is C's or 1 (broadcast; a transform: C's). */
  for (int i = 0; !st && i < a->nb_dims; i++)
    if (a->dim[i] != ct->dim[i] && (transform || a->dim[i] != 1)) st = CUDNN_STATUS_BAD_PARAM;
  if (st) {
    rgpu_rt_count_call();
    return st;
  }
  rgpu_client *c;
  uint64_t wire;
  int device;
  if ((st = rgpu_cudnn_enter_stream(h, &c, &wire, &device))) return st;
  rgpu_msg_cudnn_add_tensor_req q = {.handle = h->id,
                                     .stream = wire,
                                     .alpha = scale_of(ct->type, alpha),
                                     .beta = scale_of(ct->type, beta),
                                     .transform = (uint32_t)transform};
  TENSOR_FIELDS(q, a, a, A);
  TENSOR_FIELDS(q, c, ct, C);
  return RGPU_CUDNN_SUBMIT(c, device, wire, CUDNN_ADD_TENSOR, cudnn_add_tensor, &q);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnAddTensor(cudnnHandle_t handle, const void *alpha,
                                                   const cudnnTensorDescriptor_t aDesc,
                                                   const void *A, const void *beta,
                                                   const cudnnTensorDescriptor_t cDesc, void *C) {
  return add_or_transform(0, handle, alpha, aDesc, A, beta, cDesc, C);
}

/* A layout change (NCHW <-> NHWC, packed <-> padded) of one data type;
 * cuDNN's conversions between types and to vectorized layouts are not
 * rgpu's (descriptors of those types are refused when they are set). */
RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnTransformTensor(cudnnHandle_t handle, const void *alpha,
                                                         const cudnnTensorDescriptor_t xDesc,
                                                         const void *x, const void *beta,
                                                         const cudnnTensorDescriptor_t yDesc,
                                                         void *y) {
  return add_or_transform(1, handle, alpha, xDesc, x, beta, yDesc, y);
}

/* The checks x -> y calls of one shape share. */
static cudnnStatus_t same_shape_check(struct cudnnContext *h, const struct cudnnTensorStruct *x,
                                      const struct cudnnTensorStruct *y, const void *alpha,
                                      const void *beta, const void *xp, const void *yp) {
  if (!h || !x || !x->set || !y || !y->set || !alpha || !beta || !xp || !yp ||
      !same_dims(x, y) || x->type != y->type)
    return CUDNN_STATUS_BAD_PARAM;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnActivationForward(
    cudnnHandle_t handle, cudnnActivationDescriptor_t activationDesc, const void *alpha,
    const cudnnTensorDescriptor_t xDesc, const void *x, const void *beta,
    const cudnnTensorDescriptor_t yDesc, void *y) {
  struct cudnnContext *h = rgpu_cudnn_handle(handle);
  struct cudnnActivationStruct *act = rgpu_cudnn_act(activationDesc);
  struct cudnnTensorStruct *xt = rgpu_cudnn_tensor(xDesc), *yt = rgpu_cudnn_tensor(yDesc);
  cudnnStatus_t st = !act ? CUDNN_STATUS_BAD_PARAM
                          : same_shape_check(h, xt, yt, alpha, beta, x, y);
  if (st) {
    rgpu_rt_count_call();
    return st;
  }
  rgpu_client *c;
  uint64_t wire;
  int device;
  if ((st = rgpu_cudnn_enter_stream(h, &c, &wire, &device))) return st;
  rgpu_msg_cudnn_activation_fwd_req q = {.handle = h->id,
                                         .stream = wire,
                                         .act_mode = (uint32_t)act->mode,
                                         .act_nan = (uint32_t)act->nan_prop,
                                         .act_coef = act->coef,
                                         .act_swish_beta = act->swish_beta,
                                         .alpha = scale_of(yt->type, alpha),
                                         .beta = scale_of(yt->type, beta)};
  TENSOR_FIELDS(q, x, xt, x);
  TENSOR_FIELDS(q, y, yt, y);
  return RGPU_CUDNN_SUBMIT(c, device, wire, CUDNN_ACTIVATION_FWD, cudnn_activation_fwd, &q);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnPoolingForward(
    cudnnHandle_t handle, const cudnnPoolingDescriptor_t poolingDesc, const void *alpha,
    const cudnnTensorDescriptor_t xDesc, const void *x, const void *beta,
    const cudnnTensorDescriptor_t yDesc, void *y) {
  struct cudnnContext *h = rgpu_cudnn_handle(handle);
  struct cudnnPoolingStruct *p = rgpu_cudnn_pool(poolingDesc);
  static int logged;
  if (p && rgpu_cudnn_pool_runnable(p, "cudnnPoolingForward", &logged)) {
    rgpu_rt_count_call();
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  struct cudnnTensorStruct *xt = rgpu_cudnn_tensor(xDesc), *yt = rgpu_cudnn_tensor(yDesc);
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  int n, ch, oh, ow;
  if (!h || !p || !p->set || !xt || !xt->set || !yt || !yt->set || !alpha || !beta || !x || !y ||
      xt->type != yt->type || yt->nb_dims != 4 ||
      rgpu_cudnn_cudnnGetPooling2dForwardOutputDim(poolingDesc, xDesc, &n, &ch, &oh, &ow) ||
      yt->dim[0] != n || yt->dim[1] != ch || yt->dim[2] != oh || yt->dim[3] != ow)
    st = CUDNN_STATUS_BAD_PARAM;
  if (st) {
    rgpu_rt_count_call();
    return st;
  }
  rgpu_client *c;
  uint64_t wire;
  int device;
  if ((st = rgpu_cudnn_enter_stream(h, &c, &wire, &device))) return st;
  rgpu_msg_cudnn_pooling_fwd_req q = {.handle = h->id,
                                      .stream = wire,
                                      .pool_mode = (uint32_t)p->mode,
                                      .pool_nan = (uint32_t)p->nan_prop,
                                      .pool_window = {p->window, (uint32_t)p->nb_spatial},
                                      .pool_pad = {p->pad, (uint32_t)p->nb_spatial},
                                      .pool_stride = {p->stride, (uint32_t)p->nb_spatial},
                                      .alpha = scale_of(yt->type, alpha),
                                      .beta = scale_of(yt->type, beta)};
  TENSOR_FIELDS(q, x, xt, x);
  TENSOR_FIELDS(q, y, yt, y);
  return RGPU_CUDNN_SUBMIT(c, device, wire, CUDNN_POOLING_FWD, cudnn_pooling_fwd, &q);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnSoftmaxForward(
    cudnnHandle_t handle, cudnnSoftmaxAlgorithm_t algo, cudnnSoftmaxMode_t mode, const void *alpha,
    const cudnnTensorDescriptor_t xDesc, const void *x, const void *beta,
    const cudnnTensorDescriptor_t yDesc, void *y) {
  struct cudnnContext *h = rgpu_cudnn_handle(handle);
  struct cudnnTensorStruct *xt = rgpu_cudnn_tensor(xDesc), *yt = rgpu_cudnn_tensor(yDesc);
  cudnnStatus_t st = same_shape_check(h, xt, yt, alpha, beta, x, y);
  if (!st && ((int)algo < CUDNN_SOFTMAX_FAST || (int)algo > CUDNN_SOFTMAX_LOG ||
              (mode != CUDNN_SOFTMAX_MODE_INSTANCE && mode != CUDNN_SOFTMAX_MODE_CHANNEL)))
    st = CUDNN_STATUS_BAD_PARAM;
  if (st) {
    rgpu_rt_count_call();
    return st;
  }
  rgpu_client *c;
  uint64_t wire;
  int device;
  if ((st = rgpu_cudnn_enter_stream(h, &c, &wire, &device))) return st;
  rgpu_msg_cudnn_softmax_fwd_req q = {.handle = h->id,
                                      .stream = wire,
                                      .softmax_algo = (uint32_t)algo,
                                      .softmax_mode = (uint32_t)mode,
                                      .alpha = scale_of(yt->type, alpha),
                                      .beta = scale_of(yt->type, beta)};
  TENSOR_FIELDS(q, x, xt, x);
  TENSOR_FIELDS(q, y, yt, y);
  return RGPU_CUDNN_SUBMIT(c, device, wire, CUDNN_SOFTMAX_FWD, cudnn_softmax_fwd, &q);
}
