/* Batch normalization (legacy API): cudnnDeriveBNTensorDescriptor (local),
 * ForwardInference, ForwardTraining, Backward and the Ex forms of training
 * and backward with ops CUDNN_BATCHNORM_OPS_BN (what PyTorch calls; the
 * fused activation/add ops answer NOT_SUPPORTED, logged), each one
 * CUDNN_BATCHNORM request without a reply; the Ex forms' workspace and
 * reserve sizes are the server's answer, one CUDNN_BATCHNORM_QUERY round
 * trip per shape, cached here. */
#include <pthread.h>
#include <stdlib.h>

#include "rgpu_calls.h"
#include "rgpu_cudnn_cache.h"
#include "rgpu_cudart_op.h"
#include "rgpu_cudnn_wire.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"

enum { PHASE_INFERENCE = 0, PHASE_TRAINING = 1, PHASE_BACKWARD = 2 };

/* cuDNN's parameter shape for x and mode: 1xCx1x1 (spatial) or 1xCxHxW
 * (per activation), packed, float unless x is double.  BAD_PARAM for a
 * mode or x it does not take. */
static cudnnStatus_t derive(const struct cudnnTensorStruct *x, int mode,
                            struct cudnnTensorStruct *out) {
  if (!x || !x->set || x->nb_dims < 4 || x->nb_dims > 5 || mode < CUDNN_BATCHNORM_PER_ACTIVATION ||
      mode > CUDNN_BATCHNORM_SPATIAL_PERSISTENT)
    return CUDNN_STATUS_BAD_PARAM;
  int nb = x->nb_dims;
  out->type = x->type == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  out->nb_dims = nb;
  for (int i = 0; i < nb; i++)
    out->dim[i] = i == 0 ? 1 : i == 1 || mode == CUDNN_BATCHNORM_PER_ACTIVATION ? x->dim[i] : 1;
  int s = 1;
  for (int i = nb - 1; i >= 0; i--) {
    out->stride[i] = s;
    s *= out->dim[i];
  }
  out->set = 1;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnDeriveBNTensorDescriptor(
    cudnnTensorDescriptor_t derivedBnDesc, const cudnnTensorDescriptor_t xDesc,
    cudnnBatchNormMode_t mode) {
  rgpu_rt_count_call();
  struct cudnnTensorStruct *d = rgpu_cudnn_tensor(derivedBnDesc), shape;
  if (!d) return CUDNN_STATUS_BAD_PARAM;
  cudnnStatus_t st = derive(rgpu_cudnn_tensor(xDesc), (int)mode, &shape);
  if (st) return st;
  d->type = shape.type;
  d->nb_dims = shape.nb_dims;
  memcpy(d->dim, shape.dim, sizeof d->dim);
  memcpy(d->stride, shape.stride, sizeof d->stride);
  d->set = 1;
  return CUDNN_STATUS_SUCCESS;
}

/* The descriptor checks every form shares: x and y (dy) of one shape and
 * type, the parameters' descriptor of the derived dimensions. */
static cudnnStatus_t bn_check(struct cudnnContext *h, int mode, const struct cudnnTensorStruct *x,
                              const struct cudnnTensorStruct *y, const struct cudnnTensorStruct *p,
                              double epsilon) {
  struct cudnnTensorStruct want;
  if (!h || !x || !y || !p || !rgpu_cudnn_same_dims(x, y) || x->type != y->type ||
      derive(x, mode, &want) || !rgpu_cudnn_same_dims(p, &want) || !(epsilon >= CUDNN_BN_MIN_EPSILON))
    return CUDNN_STATUS_BAD_PARAM;
  return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t ops_supported(const char *api, cudnnBatchNormOps_t ops) {
  if (ops == CUDNN_BATCHNORM_OPS_BN) return CUDNN_STATUS_SUCCESS;
  if ((int)ops < 0 || (int)ops > CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION) return CUDNN_STATUS_BAD_PARAM;
  static int logged;
  if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
    RGPU_WARN("%s: batch-norm ops %d (fused activation/add) are not supported by rgpu; it "
              "returns CUDNN_STATUS_NOT_SUPPORTED", api, (int)ops);
  return CUDNN_STATUS_NOT_SUPPORTED;
}

/* Sends a checked request. */
static cudnnStatus_t bn_send(const char *api, struct cudnnContext *h, rgpu_msg_cudnn_batchnorm_req *q) {
  cudnnStatus_t st;
  rgpu_client *c;
  uint64_t wire;
  int device;
  if ((st = rgpu_cudnn_enter_stream(h, &c, &wire, &device))) return st;
  q->handle = h->id;
  q->stream = wire;
  return RGPU_CUDNN_SUBMIT(c, device, wire, CUDNN_BATCHNORM, cudnn_batchnorm, q);
}

#define P(ptr) ((uint64_t)(uintptr_t)(ptr))

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnBatchNormalizationForwardInference(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void *alpha, const void *beta,
    const cudnnTensorDescriptor_t xDesc, const void *x, const cudnnTensorDescriptor_t yDesc,
    void *y, const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc, const void *bnScale,
    const void *bnBias, const void *estimatedMean, const void *estimatedVariance, double epsilon) {
  struct cudnnContext *h = rgpu_cudnn_handle(handle);
  struct cudnnTensorStruct *xt = rgpu_cudnn_set_tensor(xDesc), *yt = rgpu_cudnn_set_tensor(yDesc),
                           *pt = rgpu_cudnn_set_tensor(bnScaleBiasMeanVarDesc);
  cudnnStatus_t st = bn_check(h, (int)mode, xt, yt, pt, epsilon);
  if (!st && (!alpha || !beta || !x || !y || !bnScale || !bnBias || !estimatedMean ||
              !estimatedVariance))
    st = CUDNN_STATUS_BAD_PARAM;
  if (st) return rgpu_cudnn_refused(st);
  rgpu_msg_cudnn_batchnorm_req q = {
      .phase = PHASE_INFERENCE, .mode = (uint32_t)mode, .epsilon = epsilon,
      .alpha = rgpu_cudnn_scale_of(yt->type, alpha), .beta = rgpu_cudnn_scale_of(yt->type, beta),
      .scale = P(bnScale), .bias = P(bnBias), .mean = P(estimatedMean),
      .variance = P(estimatedVariance)};
  RGPU_CUDNN_TENSOR_FIELDS(q, x, xt, x);
  RGPU_CUDNN_TENSOR_FIELDS(q, y, yt, y);
  RGPU_CUDNN_DESC_FIELDS(q, p, pt);
  return bn_send("cudnnBatchNormalizationForwardInference", h, &q);
}

/* ForwardTraining and its Ex form (ops BN): the running averages and the
 * saved statistics are optional (NULL: not kept), the saved pair both or
 * neither, as cuDNN requires. */
static cudnnStatus_t fwd_training(const char *api, int ex, cudnnHandle_t handle,
                                  cudnnBatchNormMode_t mode, const void *alpha, const void *beta,
                                  cudnnTensorDescriptor_t xDesc, const void *x,
                                  cudnnTensorDescriptor_t yDesc, void *y,
                                  cudnnTensorDescriptor_t pDesc, const void *scale,
                                  const void *bias, double factor, void *runMean, void *runVar,
                                  double epsilon, void *saveMean, void *saveInvVar,
                                  void *workspace, size_t workspace_size, void *reserve,
                                  size_t reserve_size) {
  struct cudnnContext *h = rgpu_cudnn_handle(handle);
  struct cudnnTensorStruct *xt = rgpu_cudnn_set_tensor(xDesc), *yt = rgpu_cudnn_set_tensor(yDesc),
                           *pt = rgpu_cudnn_set_tensor(pDesc);
  cudnnStatus_t st = bn_check(h, (int)mode, xt, yt, pt, epsilon);
  if (!st && (!alpha || !beta || !x || !y || !scale || !bias || (!saveMean != !saveInvVar) ||
              (!runMean != !runVar) || (workspace_size && !workspace) ||
              (reserve_size && !reserve)))
    st = CUDNN_STATUS_BAD_PARAM;
  if (st) return rgpu_cudnn_refused(st);
  rgpu_msg_cudnn_batchnorm_req q = {
      .phase = PHASE_TRAINING, .mode = (uint32_t)mode, .ex = (uint32_t)ex, .epsilon = epsilon,
      .factor = factor, .alpha = rgpu_cudnn_scale_of(yt->type, alpha),
      .beta = rgpu_cudnn_scale_of(yt->type, beta), .scale = P(scale), .bias = P(bias),
      .mean = P(runMean), .variance = P(runVar), .save_mean = P(saveMean),
      .save_inv_std = P(saveInvVar), .workspace = P(workspace),
      .workspace_size = workspace ? workspace_size : 0, .reserve = P(reserve),
      .reserve_size = reserve ? reserve_size : 0};
  RGPU_CUDNN_TENSOR_FIELDS(q, x, xt, x);
  RGPU_CUDNN_TENSOR_FIELDS(q, y, yt, y);
  RGPU_CUDNN_DESC_FIELDS(q, p, pt);
  return bn_send(api, h, &q);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnBatchNormalizationForwardTraining(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void *alpha, const void *beta,
    const cudnnTensorDescriptor_t xDesc, const void *x, const cudnnTensorDescriptor_t yDesc,
    void *y, const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc, const void *bnScale,
    const void *bnBias, double exponentialAverageFactor, void *resultRunningMean,
    void *resultRunningVariance, double epsilon, void *resultSaveMean,
    void *resultSaveInvVariance) {
  return fwd_training("cudnnBatchNormalizationForwardTraining", 0, handle, mode, alpha, beta,
                      xDesc, x, yDesc, y, bnScaleBiasMeanVarDesc, bnScale, bnBias,
                      exponentialAverageFactor, resultRunningMean, resultRunningVariance, epsilon,
                      resultSaveMean, resultSaveInvVariance, NULL, 0, NULL, 0);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnBatchNormalizationForwardTrainingEx(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t bnOps, const void *alpha,
    const void *beta, const cudnnTensorDescriptor_t xDesc, const void *xData,
    const cudnnTensorDescriptor_t zDesc, const void *zData, const cudnnTensorDescriptor_t yDesc,
    void *yData, const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc, const void *bnScale,
    const void *bnBias, double exponentialAverageFactor, void *resultRunningMean,
    void *resultRunningVariance, double epsilon, void *resultSaveMean,
    void *resultSaveInvVariance, cudnnActivationDescriptor_t activationDesc, void *workspace,
    size_t workSpaceSizeInBytes, void *reserveSpace, size_t reserveSpaceSizeInBytes) {
  const char *api = "cudnnBatchNormalizationForwardTrainingEx";
  /* ops BN: z and the activation are not used (cuDNN ignores them). */
  (void)zDesc, (void)zData, (void)activationDesc;
  cudnnStatus_t st = ops_supported(api, bnOps);
  if (st) return rgpu_cudnn_refused(st);
  return fwd_training(api, 1, handle, mode, alpha, beta, xDesc, xData, yDesc, yData,
                      bnScaleBiasMeanVarDesc, bnScale, bnBias, exponentialAverageFactor,
                      resultRunningMean, resultRunningVariance, epsilon, resultSaveMean,
                      resultSaveInvVariance, workspace, workSpaceSizeInBytes, reserveSpace,
                      reserveSpaceSizeInBytes);
}

/* Backward and its Ex form (ops BN): dx, dscale, dbias from x, dy, the
 * scale and the saved statistics (both or neither: recomputed). */
static cudnnStatus_t backward(const char *api, int ex, cudnnHandle_t handle,
                              cudnnBatchNormMode_t mode, const void *aD, const void *bD,
                              const void *aP, const void *bP, cudnnTensorDescriptor_t xDesc,
                              const void *x, cudnnTensorDescriptor_t dyDesc, const void *dy,
                              cudnnTensorDescriptor_t dxDesc, void *dx,
                              cudnnTensorDescriptor_t pDesc, const void *scale, const void *bias,
                              void *dScale, void *dBias, double epsilon, const void *savedMean,
                              const void *savedInvVar, void *workspace, size_t workspace_size,
                              void *reserve, size_t reserve_size) {
  struct cudnnContext *h = rgpu_cudnn_handle(handle);
  struct cudnnTensorStruct *xt = rgpu_cudnn_set_tensor(xDesc), *dyt = rgpu_cudnn_set_tensor(dyDesc),
                           *dxt = rgpu_cudnn_set_tensor(dxDesc), *pt = rgpu_cudnn_set_tensor(pDesc);
  cudnnStatus_t st = bn_check(h, (int)mode, xt, dyt, pt, epsilon);
  if (!st && (!dxt || !rgpu_cudnn_same_dims(xt, dxt) || dxt->type != xt->type || !aD || !bD ||
              !aP || !bP || !x || !dy || !dx || !scale || !dScale || !dBias ||
              (!savedMean != !savedInvVar) || (workspace_size && !workspace) ||
              (reserve_size && !reserve)))
    st = CUDNN_STATUS_BAD_PARAM;
  if (st) return rgpu_cudnn_refused(st);
  rgpu_msg_cudnn_batchnorm_req q = {
      .phase = PHASE_BACKWARD, .mode = (uint32_t)mode, .ex = (uint32_t)ex, .epsilon = epsilon,
      .alpha = rgpu_cudnn_scale_of(dxt->type, aD), .beta = rgpu_cudnn_scale_of(dxt->type, bD),
      .alpha_param = rgpu_cudnn_scale_of(dxt->type, aP),
      .beta_param = rgpu_cudnn_scale_of(dxt->type, bP), .scale = P(scale), .bias = P(bias),
      .save_mean = P(savedMean), .save_inv_std = P(savedInvVar), .dscale = P(dScale),
      .dbias = P(dBias), .workspace = P(workspace),
      .workspace_size = workspace ? workspace_size : 0, .reserve = P(reserve),
      .reserve_size = reserve ? reserve_size : 0};
  RGPU_CUDNN_TENSOR_FIELDS(q, x, xt, x);
  RGPU_CUDNN_TENSOR_FIELDS(q, y, dyt, dy);
  RGPU_CUDNN_TENSOR_FIELDS(q, dx, dxt, dx);
  RGPU_CUDNN_DESC_FIELDS(q, p, pt);
  return bn_send(api, h, &q);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnBatchNormalizationBackward(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void *alphaDataDiff,
    const void *betaDataDiff, const void *alphaParamDiff, const void *betaParamDiff,
    const cudnnTensorDescriptor_t xDesc, const void *x, const cudnnTensorDescriptor_t dyDesc,
    const void *dy, const cudnnTensorDescriptor_t dxDesc, void *dx,
    const cudnnTensorDescriptor_t dBnScaleBiasDesc, const void *bnScale, void *dBnScaleResult,
    void *dBnBiasResult, double epsilon, const void *savedMean, const void *savedInvVariance) {
  return backward("cudnnBatchNormalizationBackward", 0, handle, mode, alphaDataDiff, betaDataDiff,
                  alphaParamDiff, betaParamDiff, xDesc, x, dyDesc, dy, dxDesc, dx,
                  dBnScaleBiasDesc, bnScale, NULL, dBnScaleResult, dBnBiasResult, epsilon,
                  savedMean, savedInvVariance, NULL, 0, NULL, 0);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnBatchNormalizationBackwardEx(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t bnOps,
    const void *alphaDataDiff, const void *betaDataDiff, const void *alphaParamDiff,
    const void *betaParamDiff, const cudnnTensorDescriptor_t xDesc, const void *xData,
    const cudnnTensorDescriptor_t yDesc, const void *yData, const cudnnTensorDescriptor_t dyDesc,
    const void *dyData, const cudnnTensorDescriptor_t dzDesc, void *dzData,
    const cudnnTensorDescriptor_t dxDesc, void *dxData,
    const cudnnTensorDescriptor_t dBnScaleBiasDesc, const void *bnScaleData,
    const void *bnBiasData, void *dBnScaleData, void *dBnBiasData, double epsilon,
    const void *savedMean, const void *savedInvVariance, cudnnActivationDescriptor_t activationDesc,
    void *workSpace, size_t workSpaceSizeInBytes, void *reserveSpace,
    size_t reserveSpaceSizeInBytes) {
  const char *api = "cudnnBatchNormalizationBackwardEx";
  /* ops BN: y, dz and the activation are not used (cuDNN ignores them). */
  (void)yDesc, (void)yData, (void)dzDesc, (void)dzData, (void)activationDesc;
  cudnnStatus_t st = ops_supported(api, bnOps);
  if (st) return rgpu_cudnn_refused(st);
  return backward(api, 1, handle, mode, alphaDataDiff, betaDataDiff, alphaParamDiff,
                  betaParamDiff, xDesc, xData, dyDesc, dyData, dxDesc, dxData, dBnScaleBiasDesc,
                  bnScaleData, bnBiasData, dBnScaleData, dBnBiasData, epsilon, savedMean,
                  savedInvVariance, workSpace, workSpaceSizeInBytes, reserveSpace,
                  reserveSpaceSizeInBytes);
}

/* ---- the Ex forms' sizes: the server's answer, cached --------------------- */

enum { SIZE_FWD_WORKSPACE = 0, SIZE_BWD_WORKSPACE = 1, SIZE_RESERVE = 2 };

/* Built in zeroed memory, compared by memcmp. */
typedef struct {
  int device, which, mode;
  struct cudnnTensorStruct x, p;
} size_key;

/* Sizes answered by the server, by key. */
static rgpu_cudnn_cache g_sizes = RGPU_CUDNN_CACHE_INIT;

/* The reserve size has no parameter descriptor: p stays zero in its key
 * and is sent with no dimensions. */
static cudnnStatus_t size_query(const char *api, int which, cudnnHandle_t handle, int mode,
                                cudnnBatchNormOps_t ops, cudnnTensorDescriptor_t xDesc,
                                cudnnTensorDescriptor_t pDesc, size_t *out) {
  struct cudnnContext *h = rgpu_cudnn_handle(handle);
  struct cudnnTensorStruct *xt = rgpu_cudnn_set_tensor(xDesc), *pt = NULL, want;
  cudnnStatus_t st = !h || !out || derive(xt, mode, &want) ? CUDNN_STATUS_BAD_PARAM
                                                           : ops_supported(api, ops);
  if (!st && which != SIZE_RESERVE &&
      (!(pt = rgpu_cudnn_set_tensor(pDesc)) || !rgpu_cudnn_same_dims(pt, &want)))
    st = CUDNN_STATUS_BAD_PARAM;
  if (st) return rgpu_cudnn_refused(st);
  size_key key;
  memset(&key, 0, sizeof key);
  key.device = h->device;
  key.which = which;
  key.mode = mode;
  memcpy(&key.x, xt, sizeof key.x);
  if (pt) memcpy(&key.p, pt, sizeof key.p);
  if (rgpu_cudnn_cache_get(&g_sizes, &key, sizeof key, out, sizeof *out) == (long)sizeof *out)
    return rgpu_cudnn_refused(CUDNN_STATUS_SUCCESS);
  rgpu_client *c;
  if (rgpu_rt_enter(&c) != cudaSuccess) return CUDNN_STATUS_EXECUTION_FAILED;
  rgpu_msg_cudnn_batchnorm_query_req q = {.handle = h->id, .which = (uint32_t)which,
                                          .mode = (uint32_t)mode};
  RGPU_CUDNN_DESC_FIELDS(q, x, xt);
  if (pt) RGPU_CUDNN_DESC_FIELDS(q, p, pt);
  rgpu_buf pay;
  rgpu_buf_init(&pay);
  rgpu_client_reply rr = {.payload = &pay};
  rgpu_msg_cudnn_batchnorm_query_rep rep;
  rgpu_status rc = rgpu_call_cudnn_batchnorm_query(c, h->device, 0, &q, &rep, &rr);
  if (rc) {
    st = rgpu_cudnn_reply_status(c, rc, api, rr.msg);
  } else {
    *out = (size_t)rep.size;
    rgpu_cudnn_cache_put(&g_sizes, &key, sizeof key, out, sizeof *out);
  }
  rgpu_buf_free(&pay);
  return st;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t bnOps,
    const cudnnTensorDescriptor_t xDesc, const cudnnTensorDescriptor_t zDesc,
    const cudnnTensorDescriptor_t yDesc, const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc,
    const cudnnActivationDescriptor_t activationDesc, size_t *sizeInBytes) {
  (void)zDesc, (void)yDesc, (void)activationDesc; /* y is x's shape; ops BN has no z */
  return size_query("cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize",
                    SIZE_FWD_WORKSPACE, handle, (int)mode, bnOps, xDesc, bnScaleBiasMeanVarDesc,
                    sizeInBytes);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetBatchNormalizationBackwardExWorkspaceSize(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t bnOps,
    const cudnnTensorDescriptor_t xDesc, const cudnnTensorDescriptor_t yDesc,
    const cudnnTensorDescriptor_t dyDesc, const cudnnTensorDescriptor_t dzDesc,
    const cudnnTensorDescriptor_t dxDesc, const cudnnTensorDescriptor_t dBnScaleBiasDesc,
    const cudnnActivationDescriptor_t activationDesc, size_t *sizeInBytes) {
  (void)yDesc, (void)dyDesc, (void)dzDesc, (void)dxDesc, (void)activationDesc;
  return size_query("cudnnGetBatchNormalizationBackwardExWorkspaceSize", SIZE_BWD_WORKSPACE,
                    handle, (int)mode, bnOps, xDesc, dBnScaleBiasDesc, sizeInBytes);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t bnOps,
    const cudnnActivationDescriptor_t activationDesc, const cudnnTensorDescriptor_t xDesc,
    size_t *sizeInBytes) {
  (void)activationDesc;
  return size_query("cudnnGetBatchNormalizationTrainingExReserveSpaceSize", SIZE_RESERVE, handle,
                    (int)mode, bnOps, xDesc, NULL, sizeInBytes);
}
