/* What the legacy calls added after the forward slice share when they put
 * a request on the wire (rgpu_cudnn_compute_bwd.c, rgpu_cudnn_bn.c,
 * rgpu_cudnn_optensor.c): alpha/beta's values, a tensor's fields, the
 * send of a request without a reply.  (rgpu_cudnn_compute.c keeps its own
 * copies of the same three.) */
#ifndef RGPU_CUDNN_WIRE_H
#define RGPU_CUDNN_WIRE_H

#include <string.h>

#include "rgpu_cudart.h"
#include "rgpu_cudnn_call.h"

/* A host scaling factor: double for double data, float otherwise (cuDNN's
 * rule for alpha and beta). */
static inline double rgpu_cudnn_scale_of(int type, const void *p) {
  return type == CUDNN_DATA_DOUBLE ? *(const double *)p : (double)*(const float *)p;
}

/* Sends an encoded async request's result: a transport failure is the
 * runtime's (sticky), answered EXECUTION_FAILED like a failed launch. */
static inline cudnnStatus_t rgpu_cudnn_sent(rgpu_client *c, rgpu_status rc) {
  if (rc) {
    rgpu_rt_sync_ret(c, rc);
    return CUDNN_STATUS_EXECUTION_FAILED;
  }
  return CUDNN_STATUS_SUCCESS;
}

static inline int rgpu_cudnn_same_dims(const struct cudnnTensorStruct *a,
                                       const struct cudnnTensorStruct *b) {
  return a->nb_dims == b->nb_dims &&
         !memcmp(a->dim, b->dim, sizeof a->dim[0] * (size_t)a->nb_dims);
}

/* A set tensor descriptor, or NULL. */
static inline struct cudnnTensorStruct *rgpu_cudnn_set_tensor(cudnnTensorDescriptor_t d) {
  struct cudnnTensorStruct *t = rgpu_cudnn_tensor(d);
  return t && t->set ? t : NULL;
}

/* The wire fields of tensor X of request q (X_type, X_dim, X_stride, X). */
#define RGPU_CUDNN_TENSOR_FIELDS(q, X, t, ptr)                             \
  do {                                                                     \
    (q).X##_type = (uint32_t)(t)->type;                                    \
    (q).X##_dim = (rgpu_array){(t)->dim, (uint32_t)(t)->nb_dims};           \
    (q).X##_stride = (rgpu_array){(t)->stride, (uint32_t)(t)->nb_dims};     \
    (q).X = (uint64_t)(uintptr_t)(ptr);                                    \
  } while (0)
/* The same without the pointer (a descriptor-only field group). */
#define RGPU_CUDNN_DESC_FIELDS(q, X, t)                                    \
  do {                                                                     \
    (q).X##_type = (uint32_t)(t)->type;                                    \
    (q).X##_dim = (rgpu_array){(t)->dim, (uint32_t)(t)->nb_dims};           \
    (q).X##_stride = (rgpu_array){(t)->stride, (uint32_t)(t)->nb_dims};     \
  } while (0)

/* A call refused by cuDNN's own checks: counted, answered at once. */
static inline cudnnStatus_t rgpu_cudnn_refused(cudnnStatus_t st) {
  rgpu_rt_count_call();
  return st;
}

#endif
