/* The legacy backward calls: cudnnConvolutionBackwardData,
 * cudnnConvolutionBackwardFilter, cudnnConvolutionBackwardBias,
 * cudnnActivationBackward, cudnnPoolingBackward, cudnnSoftmaxBackward.
 * Like the forward calls (rgpu_cudnn_compute.c): cuDNN's checks here, then
 * one request without a reply carrying the descriptors' content; what only
 * the server can check (the session's allocations, its backend's types)
 * comes back as a deferred error. */
#include "rgpu_calls.h"
#include "rgpu_cudart_op.h"
#include "rgpu_cudnn_wire.h"
#include "rgpu_messages.h"

/* The session and the handle's stream, or the status to return (the
 * request then goes through RGPU_CUDNN_SUBMIT: captured on a capturing
 * stream). */
#define ENTER()                                                         \
  rgpu_client *c;                                                       \
  uint64_t wire;                                                        \
  int device;                                                           \
  if ((st = rgpu_cudnn_enter_stream(h, &c, &wire, &device))) return st

/* ---- convolution: data and filter ---------------------------------------- */

/* Both directions: the descriptors are the forward convolution's (x, w,
 * y), one of x and w written.  direction 0: data, 1: filter. */
static cudnnStatus_t conv_bwd(const char *api, int direction, cudnnHandle_t handle,
                              const void *alpha, cudnnTensorDescriptor_t xDesc, const void *x,
                              cudnnFilterDescriptor_t wDesc, const void *w,
                              cudnnConvolutionDescriptor_t convDesc, int algo, int algo_count,
                              void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
                              cudnnTensorDescriptor_t dyDesc, const void *dy) {
  struct cudnnContext *h = rgpu_cudnn_handle(handle);
  struct cudnnTensorStruct *xt = rgpu_cudnn_tensor(xDesc), *yt = rgpu_cudnn_tensor(dyDesc);
  struct cudnnFilterStruct *wf = rgpu_cudnn_filter(wDesc);
  struct cudnnConvolutionStruct *cv = rgpu_cudnn_conv(convDesc);
  cudnnStatus_t st = !h || !xt || !xt->set || !wf || !wf->set
                         ? CUDNN_STATUS_BAD_PARAM
                         : rgpu_cudnn_conv_check(xt, wf, cv, yt);
  if (!st && (!alpha || !beta || !x || !w || !dy || (workSpaceSizeInBytes && !workSpace) ||
              algo < 0 || algo >= algo_count))
    st = CUDNN_STATUS_BAD_PARAM;
  if (st) return rgpu_cudnn_refused(st);
  ENTER();
  /* The output's type sets alpha/beta's width: dx (x) or dw (w). */
  int out_type = direction == 0 ? xt->type : wf->type;
  rgpu_msg_cudnn_conv_fwd_req shape;
  memset(&shape, 0, sizeof shape);
  rgpu_cudnn_conv_shape_fields(&shape, xt, wf, cv, yt);
  rgpu_msg_cudnn_conv_bwd_req q = {
      .handle = h->id, .stream = wire, .direction = (uint32_t)direction,
      .alpha = rgpu_cudnn_scale_of(out_type, alpha), .beta = rgpu_cudnn_scale_of(out_type, beta),
      .x_type = shape.x_type, .x_dim = shape.x_dim, .x_stride = shape.x_stride,
      .x = (uint64_t)(uintptr_t)x,
      .w_type = shape.w_type, .w_format = shape.w_format, .w_dim = shape.w_dim,
      .conv_pad = shape.conv_pad, .conv_stride = shape.conv_stride,
      .conv_dilation = shape.conv_dilation, .conv_mode = shape.conv_mode,
      .conv_compute = shape.conv_compute, .conv_math = shape.conv_math,
      .conv_groups = shape.conv_groups, .w = (uint64_t)(uintptr_t)w,
      .y_type = shape.y_type, .y_dim = shape.y_dim, .y_stride = shape.y_stride,
      .y = (uint64_t)(uintptr_t)dy,
      .algo = (uint32_t)algo, .workspace = (uint64_t)(uintptr_t)workSpace,
      .workspace_size = workSpace ? workSpaceSizeInBytes : 0};
  return RGPU_CUDNN_SUBMIT(c, device, wire, CUDNN_CONV_BWD, cudnn_conv_bwd, &q);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnConvolutionBackwardData(
    cudnnHandle_t handle, const void *alpha, const cudnnFilterDescriptor_t wDesc, const void *w,
    const cudnnTensorDescriptor_t dyDesc, const void *dy,
    const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdDataAlgo_t algo,
    void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
    const cudnnTensorDescriptor_t dxDesc, void *dx) {
  return conv_bwd("cudnnConvolutionBackwardData", 0, handle, alpha, dxDesc, dx, wDesc, w,
                  convDesc, (int)algo, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, workSpace,
                  workSpaceSizeInBytes, beta, dyDesc, dy);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnConvolutionBackwardFilter(
    cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc, const void *x,
    const cudnnTensorDescriptor_t dyDesc, const void *dy,
    const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdFilterAlgo_t algo,
    void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
    const cudnnFilterDescriptor_t dwDesc, void *dw) {
  return conv_bwd("cudnnConvolutionBackwardFilter", 1, handle, alpha, xDesc, x, dwDesc, dw,
                  convDesc, (int)algo, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, workSpace,
                  workSpaceSizeInBytes, beta, dyDesc, dy);
}

/* ---- bias ------------------------------------------------------------------ */

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnConvolutionBackwardBias(
    cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t dyDesc, const void *dy,
    const void *beta, const cudnnTensorDescriptor_t dbDesc, void *db) {
  struct cudnnContext *h = rgpu_cudnn_handle(handle);
  struct cudnnTensorStruct *yt = rgpu_cudnn_set_tensor(dyDesc), *bt = rgpu_cudnn_set_tensor(dbDesc);
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  if (!h || !yt || !bt || !alpha || !beta || !dy || !db || yt->nb_dims != bt->nb_dims ||
      yt->type != bt->type)
    st = CUDNN_STATUS_BAD_PARAM;
  /* db is 1xCx1x1 (its Nd form): C is dy's channels, the rest summed. */
  for (int i = 0; !st && i < bt->nb_dims; i++)
    if (bt->dim[i] != (i == 1 ? yt->dim[1] : 1)) st = CUDNN_STATUS_BAD_PARAM;
  if (st) return rgpu_cudnn_refused(st);
  ENTER();
  rgpu_msg_cudnn_conv_bwd_bias_req q = {.handle = h->id, .stream = wire,
                                        .alpha = rgpu_cudnn_scale_of(bt->type, alpha),
                                        .beta = rgpu_cudnn_scale_of(bt->type, beta)};
  RGPU_CUDNN_TENSOR_FIELDS(q, dy, yt, dy);
  RGPU_CUDNN_TENSOR_FIELDS(q, db, bt, db);
  return RGPU_CUDNN_SUBMIT(c, device, wire, CUDNN_CONV_BWD_BIAS, cudnn_conv_bwd_bias, &q);
}

/* ---- activation, pooling, softmax ----------------------------------------- */

/* y/dy of one shape and x/dx of one shape, all of one type, all present. */
static cudnnStatus_t pairs_check(struct cudnnContext *h, const struct cudnnTensorStruct *y,
                                 const struct cudnnTensorStruct *dy,
                                 const struct cudnnTensorStruct *x,
                                 const struct cudnnTensorStruct *dx, const void *alpha,
                                 const void *beta, const void *yp, const void *dyp,
                                 const void *xp, const void *dxp) {
  if (!h || !y || !dy || !x || !dx || !alpha || !beta || !yp || !dyp || !xp || !dxp ||
      !rgpu_cudnn_same_dims(y, dy) || !rgpu_cudnn_same_dims(x, dx) || y->type != dy->type ||
      x->type != dx->type || x->type != y->type)
    return CUDNN_STATUS_BAD_PARAM;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnActivationBackward(
    cudnnHandle_t handle, cudnnActivationDescriptor_t activationDesc, const void *alpha,
    const cudnnTensorDescriptor_t yDesc, const void *y, const cudnnTensorDescriptor_t dyDesc,
    const void *dy, const cudnnTensorDescriptor_t xDesc, const void *x, const void *beta,
    const cudnnTensorDescriptor_t dxDesc, void *dx) {
  struct cudnnContext *h = rgpu_cudnn_handle(handle);
  struct cudnnActivationStruct *act = rgpu_cudnn_act(activationDesc);
  struct cudnnTensorStruct *yt = rgpu_cudnn_set_tensor(yDesc), *dyt = rgpu_cudnn_set_tensor(dyDesc);
  struct cudnnTensorStruct *xt = rgpu_cudnn_set_tensor(xDesc), *dxt = rgpu_cudnn_set_tensor(dxDesc);
  cudnnStatus_t st = !act ? CUDNN_STATUS_BAD_PARAM
                          : pairs_check(h, yt, dyt, xt, dxt, alpha, beta, y, dy, x, dx);
  if (!st && !rgpu_cudnn_same_dims(xt, yt)) st = CUDNN_STATUS_BAD_PARAM;
  if (st) return rgpu_cudnn_refused(st);
  ENTER();
  rgpu_msg_cudnn_activation_bwd_req q = {.handle = h->id,
                                         .stream = wire,
                                         .act_mode = (uint32_t)act->mode,
                                         .act_nan = (uint32_t)act->nan_prop,
                                         .act_coef = act->coef,
                                         .act_swish_beta = act->swish_beta,
                                         .alpha = rgpu_cudnn_scale_of(dxt->type, alpha),
                                         .beta = rgpu_cudnn_scale_of(dxt->type, beta)};
  RGPU_CUDNN_TENSOR_FIELDS(q, y, yt, y);
  RGPU_CUDNN_TENSOR_FIELDS(q, dy, dyt, dy);
  RGPU_CUDNN_TENSOR_FIELDS(q, x, xt, x);
  RGPU_CUDNN_TENSOR_FIELDS(q, dx, dxt, dx);
  return RGPU_CUDNN_SUBMIT(c, device, wire, CUDNN_ACTIVATION_BWD, cudnn_activation_bwd, &q);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnPoolingBackward(
    cudnnHandle_t handle, const cudnnPoolingDescriptor_t poolingDesc, const void *alpha,
    const cudnnTensorDescriptor_t yDesc, const void *y, const cudnnTensorDescriptor_t dyDesc,
    const void *dy, const cudnnTensorDescriptor_t xDesc, const void *x, const void *beta,
    const cudnnTensorDescriptor_t dxDesc, void *dx) {
  struct cudnnContext *h = rgpu_cudnn_handle(handle);
  struct cudnnPoolingStruct *p = rgpu_cudnn_pool(poolingDesc);
  static int logged;
  if (p && rgpu_cudnn_pool_runnable(p, "cudnnPoolingBackward", &logged)) {
    rgpu_rt_count_call();
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  struct cudnnTensorStruct *yt = rgpu_cudnn_set_tensor(yDesc), *dyt = rgpu_cudnn_set_tensor(dyDesc);
  struct cudnnTensorStruct *xt = rgpu_cudnn_set_tensor(xDesc), *dxt = rgpu_cudnn_set_tensor(dxDesc);
  cudnnStatus_t st = !p || !p->set ? CUDNN_STATUS_BAD_PARAM
                                   : pairs_check(h, yt, dyt, xt, dxt, alpha, beta, y, dy, x, dx);
  int n, ch, oh, ow;
  /* y is the pooling's output of x. */
  if (!st && (yt->nb_dims != 4 ||
              rgpu_cudnn_cudnnGetPooling2dForwardOutputDim(poolingDesc, xDesc, &n, &ch, &oh, &ow) ||
              yt->dim[0] != n || yt->dim[1] != ch || yt->dim[2] != oh || yt->dim[3] != ow))
    st = CUDNN_STATUS_BAD_PARAM;
  if (st) return rgpu_cudnn_refused(st);
  ENTER();
  rgpu_msg_cudnn_pooling_bwd_req q = {.handle = h->id,
                                      .stream = wire,
                                      .pool_mode = (uint32_t)p->mode,
                                      .pool_nan = (uint32_t)p->nan_prop,
                                      .pool_window = {p->window, (uint32_t)p->nb_spatial},
                                      .pool_pad = {p->pad, (uint32_t)p->nb_spatial},
                                      .pool_stride = {p->stride, (uint32_t)p->nb_spatial},
                                      .alpha = rgpu_cudnn_scale_of(dxt->type, alpha),
                                      .beta = rgpu_cudnn_scale_of(dxt->type, beta)};
  RGPU_CUDNN_TENSOR_FIELDS(q, y, yt, y);
  RGPU_CUDNN_TENSOR_FIELDS(q, dy, dyt, dy);
  RGPU_CUDNN_TENSOR_FIELDS(q, x, xt, x);
  RGPU_CUDNN_TENSOR_FIELDS(q, dx, dxt, dx);
  return RGPU_CUDNN_SUBMIT(c, device, wire, CUDNN_POOLING_BWD, cudnn_pooling_bwd, &q);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnSoftmaxBackward(
    cudnnHandle_t handle, cudnnSoftmaxAlgorithm_t algo, cudnnSoftmaxMode_t mode, const void *alpha,
    const cudnnTensorDescriptor_t yDesc, const void *y, const cudnnTensorDescriptor_t dyDesc,
    const void *dy, const void *beta, const cudnnTensorDescriptor_t dxDesc, void *dx) {
  struct cudnnContext *h = rgpu_cudnn_handle(handle);
  struct cudnnTensorStruct *yt = rgpu_cudnn_set_tensor(yDesc), *dyt = rgpu_cudnn_set_tensor(dyDesc);
  struct cudnnTensorStruct *dxt = rgpu_cudnn_set_tensor(dxDesc);
  /* y stands in for x in the pair check: softmax has no x. */
  cudnnStatus_t st = pairs_check(h, yt, dyt, yt, dxt, alpha, beta, y, dy, y, dx);
  if (!st && (!rgpu_cudnn_same_dims(yt, dxt) || (int)algo < CUDNN_SOFTMAX_FAST ||
              (int)algo > CUDNN_SOFTMAX_LOG ||
              (mode != CUDNN_SOFTMAX_MODE_INSTANCE && mode != CUDNN_SOFTMAX_MODE_CHANNEL)))
    st = CUDNN_STATUS_BAD_PARAM;
  if (st) return rgpu_cudnn_refused(st);
  ENTER();
  rgpu_msg_cudnn_softmax_bwd_req q = {.handle = h->id,
                                      .stream = wire,
                                      .softmax_algo = (uint32_t)algo,
                                      .softmax_mode = (uint32_t)mode,
                                      .alpha = rgpu_cudnn_scale_of(dxt->type, alpha),
                                      .beta = rgpu_cudnn_scale_of(dxt->type, beta)};
  RGPU_CUDNN_TENSOR_FIELDS(q, y, yt, y);
  RGPU_CUDNN_TENSOR_FIELDS(q, dy, dyt, dy);
  RGPU_CUDNN_TENSOR_FIELDS(q, dx, dxt, dx);
  return RGPU_CUDNN_SUBMIT(c, device, wire, CUDNN_SOFTMAX_BWD, cudnn_softmax_bwd, &q);
}
