/* The op-tensor descriptor (a client record, like the other legacy
 * descriptors), cudnnOpTensor, cudnnSetTensor and cudnnScaleTensor: each
 * compute call one request without a reply (CUDNN_OP_TENSOR,
 * CUDNN_SET_TENSOR). */
#include <stdlib.h>

#include "rgpu_calls.h"
#include "rgpu_cudart_op.h"
#include "rgpu_cudnn_wire.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"

#define RGPU_CUDNN_OPT_MAGIC 0x644f7054u /* "dOpT" */
struct cudnnOpTensorStruct {
  uint32_t magic;
  int set;
  int op;      /* cudnnOpTensorOp_t */
  int compute; /* cudnnDataType_t */
  int nan_prop;
};

static struct cudnnOpTensorStruct *op_desc(cudnnOpTensorDescriptor_t d) {
  return d && d->magic == RGPU_CUDNN_OPT_MAGIC ? d : NULL;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnCreateOpTensorDescriptor(cudnnOpTensorDescriptor_t *d) {
  rgpu_rt_count_call();
  if (!d) return CUDNN_STATUS_BAD_PARAM;
  struct cudnnOpTensorStruct *r = calloc(1, sizeof *r);
  if (!r) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
  r->magic = RGPU_CUDNN_OPT_MAGIC;
  *d = r;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnDestroyOpTensorDescriptor(cudnnOpTensorDescriptor_t d) {
  rgpu_rt_count_call();
  if (!d) return CUDNN_STATUS_SUCCESS; /* cuDNN ignores a NULL descriptor */
  if (!op_desc(d)) return CUDNN_STATUS_BAD_PARAM;
  d->magic = 0;
  free(d);
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnSetOpTensorDescriptor(cudnnOpTensorDescriptor_t d,
                                                               cudnnOpTensorOp_t opTensorOp,
                                                               cudnnDataType_t opTensorCompType,
                                                               cudnnNanPropagation_t opTensorNanOpt) {
  rgpu_rt_count_call();
  struct cudnnOpTensorStruct *r = op_desc(d);
  if (!r || (int)opTensorOp < CUDNN_OP_TENSOR_ADD || (int)opTensorOp > CUDNN_OP_TENSOR_NOT ||
      !rgpu_cudnn_type_size((int)opTensorCompType) || (int)opTensorNanOpt < 0 ||
      (int)opTensorNanOpt > CUDNN_PROPAGATE_NAN)
    return CUDNN_STATUS_BAD_PARAM;
  r->op = (int)opTensorOp;
  r->compute = (int)opTensorCompType;
  r->nan_prop = (int)opTensorNanOpt;
  r->set = 1;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetOpTensorDescriptor(const cudnnOpTensorDescriptor_t d,
                                                               cudnnOpTensorOp_t *opTensorOp,
                                                               cudnnDataType_t *opTensorCompType,
                                                               cudnnNanPropagation_t *opTensorNanOpt) {
  rgpu_rt_count_call();
  struct cudnnOpTensorStruct *r = op_desc(d);
  if (!r || !opTensorOp || !opTensorCompType || !opTensorNanOpt) return CUDNN_STATUS_BAD_PARAM;
  *opTensorOp = (cudnnOpTensorOp_t)r->op;
  *opTensorCompType = (cudnnDataType_t)r->compute;
  *opTensorNanOpt = (cudnnNanPropagation_t)r->nan_prop;
  return CUDNN_STATUS_SUCCESS;
}

/* t's dimensions are c's or 1 (broadcast), its rank and type c's. */
static int broadcasts(const struct cudnnTensorStruct *t, const struct cudnnTensorStruct *c) {
  if (!t || t->nb_dims != c->nb_dims || t->type != c->type) return 0;
  for (int i = 0; i < c->nb_dims; i++)
    if (t->dim[i] != c->dim[i] && t->dim[i] != 1) return 0;
  return 1;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnOpTensor(cudnnHandle_t handle,
                                                  const cudnnOpTensorDescriptor_t opTensorDesc,
                                                  const void *alpha1,
                                                  const cudnnTensorDescriptor_t aDesc,
                                                  const void *A, const void *alpha2,
                                                  const cudnnTensorDescriptor_t bDesc,
                                                  const void *B, const void *beta,
                                                  const cudnnTensorDescriptor_t cDesc, void *C) {
  struct cudnnContext *h = rgpu_cudnn_handle(handle);
  struct cudnnOpTensorStruct *op = op_desc(opTensorDesc);
  struct cudnnTensorStruct *at = rgpu_cudnn_set_tensor(aDesc), *bt = rgpu_cudnn_set_tensor(bDesc),
                           *ct = rgpu_cudnn_set_tensor(cDesc);
  /* SQRT and NOT read A only (cuDNN ignores B and alpha2). */
  int unary = op && (op->op == CUDNN_OP_TENSOR_SQRT || op->op == CUDNN_OP_TENSOR_NOT);
  if (!h || !op || !op->set || !ct || !alpha1 || !beta || !A || !C || !broadcasts(at, ct) ||
      (!unary && (!alpha2 || !B || !broadcasts(bt, ct))))
    return rgpu_cudnn_refused(CUDNN_STATUS_BAD_PARAM);
  cudnnStatus_t st;
  rgpu_client *c;
  uint64_t wire;
  int device;
  if ((st = rgpu_cudnn_enter_stream(h, &c, &wire, &device))) return st;
  rgpu_msg_cudnn_op_tensor_req q = {
      .handle = h->id, .stream = wire, .op = (uint32_t)op->op, .op_compute = (uint32_t)op->compute,
      .op_nan = (uint32_t)op->nan_prop, .alpha1 = rgpu_cudnn_scale_of(ct->type, alpha1),
      .alpha2 = unary ? 0 : rgpu_cudnn_scale_of(ct->type, alpha2),
      .beta = rgpu_cudnn_scale_of(ct->type, beta)};
  RGPU_CUDNN_TENSOR_FIELDS(q, a, at, A);
  if (!unary) RGPU_CUDNN_TENSOR_FIELDS(q, b, bt, B);
  RGPU_CUDNN_TENSOR_FIELDS(q, c, ct, C);
  return RGPU_CUDNN_SUBMIT(c, device, wire, CUDNN_OP_TENSOR, cudnn_op_tensor, &q);
}

/* cudnnSetTensor (op 0) and cudnnScaleTensor (op 1). */
static cudnnStatus_t set_or_scale(const char *api, int op, cudnnHandle_t handle,
                                  cudnnTensorDescriptor_t yDesc, void *y, const void *value) {
  struct cudnnContext *h = rgpu_cudnn_handle(handle);
  struct cudnnTensorStruct *yt = rgpu_cudnn_set_tensor(yDesc);
  if (!h || !yt || !y || !value) return rgpu_cudnn_refused(CUDNN_STATUS_BAD_PARAM);
  /* SetTensor's value has y's own type; rgpu widens float and double
   * (the types its server computes) and refuses the rest. */
  if (op == 0 && yt->type != CUDNN_DATA_FLOAT && yt->type != CUDNN_DATA_DOUBLE) {
    static int logged;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      RGPU_WARN("%s of data type %d is not supported by rgpu (float and double are); it "
                "returns CUDNN_STATUS_NOT_SUPPORTED", api, yt->type);
    return rgpu_cudnn_refused(CUDNN_STATUS_NOT_SUPPORTED);
  }
  cudnnStatus_t st;
  rgpu_client *c;
  uint64_t wire;
  int device;
  if ((st = rgpu_cudnn_enter_stream(h, &c, &wire, &device))) return st;
  rgpu_msg_cudnn_set_tensor_req q = {.handle = h->id, .stream = wire, .op = (uint32_t)op,
                                     .value = rgpu_cudnn_scale_of(yt->type, value)};
  RGPU_CUDNN_TENSOR_FIELDS(q, y, yt, y);
  return RGPU_CUDNN_SUBMIT(c, device, wire, CUDNN_SET_TENSOR, cudnn_set_tensor, &q);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnSetTensor(cudnnHandle_t handle,
                                                   const cudnnTensorDescriptor_t yDesc, void *y,
                                                   const void *valuePtr) {
  return set_or_scale("cudnnSetTensor", 0, handle, yDesc, y, valuePtr);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnScaleTensor(cudnnHandle_t handle,
                                                     const cudnnTensorDescriptor_t yDesc, void *y,
                                                     const void *alpha) {
  return set_or_scale("cudnnScaleTensor", 1, handle, yDesc, y, alpha);
}
