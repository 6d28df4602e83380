/* Local response normalization across the channels: the LRN descriptor (a
 * client record with cuDNN's defaults and limits),
 * cudnnLRNCrossChannelForward and cudnnLRNCrossChannelBackward, each one
 * CUDNN_LRN request without a reply.  (Divisive normalization stays a
 * generated stub.) */
#include <stdlib.h>

#include "rgpu_calls.h"
#include "rgpu_cudart_op.h"
#include "rgpu_cudnn_wire.h"
#include "rgpu_messages.h"

#define RGPU_CUDNN_LRN_MAGIC 0x644c524eu /* "dLRN" */
struct cudnnLRNStruct {
  uint32_t magic;
  unsigned n;
  double alpha, beta, k;
};

static struct cudnnLRNStruct *lrn_desc(cudnnLRNDescriptor_t d) {
  return d && d->magic == RGPU_CUDNN_LRN_MAGIC ? d : NULL;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnCreateLRNDescriptor(cudnnLRNDescriptor_t *normDesc) {
  rgpu_rt_count_call();
  if (!normDesc) return CUDNN_STATUS_BAD_PARAM;
  struct cudnnLRNStruct *r = calloc(1, sizeof *r);
  if (!r) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
  /* cuDNN's defaults (Krizhevsky et al.'s ImageNet network). */
  *r = (struct cudnnLRNStruct){RGPU_CUDNN_LRN_MAGIC, 5, 1e-4, 0.75, 2.0};
  *normDesc = r;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnDestroyLRNDescriptor(cudnnLRNDescriptor_t lrnDesc) {
  rgpu_rt_count_call();
  if (!lrnDesc) return CUDNN_STATUS_SUCCESS;
  if (!lrn_desc(lrnDesc)) return CUDNN_STATUS_BAD_PARAM;
  lrnDesc->magic = 0;
  free(lrnDesc);
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnSetLRNDescriptor(cudnnLRNDescriptor_t normDesc,
                                                          unsigned lrnN, double lrnAlpha,
                                                          double lrnBeta, double lrnK) {
  rgpu_rt_count_call();
  struct cudnnLRNStruct *r = lrn_desc(normDesc);
  if (!r || lrnN < CUDNN_LRN_MIN_N || lrnN > CUDNN_LRN_MAX_N || !(lrnK >= CUDNN_LRN_MIN_K) ||
      !(lrnBeta >= CUDNN_LRN_MIN_BETA) || lrnAlpha != lrnAlpha)
    return CUDNN_STATUS_BAD_PARAM;
  r->n = lrnN;
  r->alpha = lrnAlpha;
  r->beta = lrnBeta;
  r->k = lrnK;
  return CUDNN_STATUS_SUCCESS;
}

/* Any of the outputs may be NULL (cuDNN's rule). */
RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetLRNDescriptor(cudnnLRNDescriptor_t normDesc,
                                                          unsigned *lrnN, double *lrnAlpha,
                                                          double *lrnBeta, double *lrnK) {
  rgpu_rt_count_call();
  struct cudnnLRNStruct *r = lrn_desc(normDesc);
  if (!r) return CUDNN_STATUS_BAD_PARAM;
  if (lrnN) *lrnN = r->n;
  if (lrnAlpha) *lrnAlpha = r->alpha;
  if (lrnBeta) *lrnBeta = r->beta;
  if (lrnK) *lrnK = r->k;
  return CUDNN_STATUS_SUCCESS;
}

/* Both directions: x and y (and dy, dx backward) of one shape and type,
 * at least 3 dimensions (the channels are dimension 1). */
static cudnnStatus_t lrn_call(const char *api, int direction, cudnnHandle_t handle,
                              cudnnLRNDescriptor_t normDesc, cudnnLRNMode_t mode,
                              const void *alpha, const void *beta,
                              cudnnTensorDescriptor_t xDesc, const void *x,
                              cudnnTensorDescriptor_t yDesc, const void *y,
                              cudnnTensorDescriptor_t dyDesc, const void *dy,
                              cudnnTensorDescriptor_t dxDesc, void *dx) {
  struct cudnnContext *h = rgpu_cudnn_handle(handle);
  struct cudnnLRNStruct *r = lrn_desc(normDesc);
  struct cudnnTensorStruct *xt = rgpu_cudnn_set_tensor(xDesc), *yt = rgpu_cudnn_set_tensor(yDesc);
  struct cudnnTensorStruct *dyt = direction ? rgpu_cudnn_set_tensor(dyDesc) : NULL;
  struct cudnnTensorStruct *dxt = direction ? rgpu_cudnn_set_tensor(dxDesc) : NULL;
  if (!h || !r || mode != CUDNN_LRN_CROSS_CHANNEL_DIM1 || !alpha || !beta || !xt || !yt || !x ||
      !y || !rgpu_cudnn_same_dims(xt, yt) || xt->type != yt->type ||
      (direction && (!dyt || !dxt || !dy || !dx || !rgpu_cudnn_same_dims(xt, dyt) ||
                     !rgpu_cudnn_same_dims(xt, dxt) || dyt->type != xt->type ||
                     dxt->type != xt->type)))
    return rgpu_cudnn_refused(CUDNN_STATUS_BAD_PARAM);
  cudnnStatus_t st;
  rgpu_client *c;
  uint64_t wire;
  int device;
  if ((st = rgpu_cudnn_enter_stream(h, &c, &wire, &device))) return st;
  rgpu_msg_cudnn_lrn_req q = {.handle = h->id, .stream = wire, .direction = (uint32_t)direction,
                              .lrn_n = r->n, .lrn_alpha = r->alpha, .lrn_beta = r->beta,
                              .lrn_k = r->k, .alpha = rgpu_cudnn_scale_of(xt->type, alpha),
                              .beta = rgpu_cudnn_scale_of(xt->type, beta)};
  RGPU_CUDNN_TENSOR_FIELDS(q, x, xt, x);
  RGPU_CUDNN_TENSOR_FIELDS(q, y, yt, y);
  if (direction) {
    RGPU_CUDNN_TENSOR_FIELDS(q, dy, dyt, dy);
    RGPU_CUDNN_TENSOR_FIELDS(q, dx, dxt, dx);
  }
  return RGPU_CUDNN_SUBMIT(c, device, wire, CUDNN_LRN, cudnn_lrn, &q);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnLRNCrossChannelForward(
    cudnnHandle_t handle, cudnnLRNDescriptor_t normDesc, cudnnLRNMode_t lrnMode, const void *alpha,
    const cudnnTensorDescriptor_t xDesc, const void *x, const void *beta,
    const cudnnTensorDescriptor_t yDesc, void *y) {
  return lrn_call("cudnnLRNCrossChannelForward", 0, handle, normDesc, lrnMode, alpha, beta, xDesc,
                  x, yDesc, y, NULL, NULL, NULL, NULL);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnLRNCrossChannelBackward(
    cudnnHandle_t handle, cudnnLRNDescriptor_t normDesc, cudnnLRNMode_t lrnMode, const void *alpha,
    const cudnnTensorDescriptor_t yDesc, const void *y, const cudnnTensorDescriptor_t dyDesc,
    const void *dy, const cudnnTensorDescriptor_t xDesc, const void *x, const void *beta,
    const cudnnTensorDescriptor_t dxDesc, void *dx) {
  return lrn_call("cudnnLRNCrossChannelBackward", 1, handle, normDesc, lrnMode, alpha, beta, xDesc,
                  x, yDesc, y, dyDesc, dy, dxDesc, dx);
}
