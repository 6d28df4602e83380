/* cudnnReduceTensor and its descriptor: the reduce-tensor descriptor is a
 * client record; cudnnReduceTensor one CUDNN_REDUCE request without a
 * reply; the indices and workspace sizes are the server's answer
 * (CUDNN_REDUCE_QUERY), one round trip per shape, cached here. */
#include <pthread.h>
#include <stdlib.h>

#include "rgpu_calls.h"
#include "rgpu_cudnn_cache.h"
#include "rgpu_cudart_op.h"
#include "rgpu_cudnn_wire.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"

#define RGPU_CUDNN_RED_MAGIC 0x64526564u /* "dRed" */
struct cudnnReduceTensorStruct {
  uint32_t magic;
  int set;
  int op;       /* cudnnReduceTensorOp_t */
  int compute;  /* cudnnDataType_t */
  int nan_prop; /* cudnnNanPropagation_t */
  int indices;  /* cudnnReduceTensorIndices_t */
  int indices_type;
};

static struct cudnnReduceTensorStruct *red_desc(cudnnReduceTensorDescriptor_t d) {
  return d && d->magic == RGPU_CUDNN_RED_MAGIC ? d : NULL;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnCreateReduceTensorDescriptor(
    cudnnReduceTensorDescriptor_t *reduceTensorDesc) {
  rgpu_rt_count_call();
  if (!reduceTensorDesc) return CUDNN_STATUS_BAD_PARAM;
  struct cudnnReduceTensorStruct *r = calloc(1, sizeof *r);
  if (!r) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
  r->magic = RGPU_CUDNN_RED_MAGIC;
  *reduceTensorDesc = r;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnDestroyReduceTensorDescriptor(
    cudnnReduceTensorDescriptor_t reduceTensorDesc) {
  rgpu_rt_count_call();
  if (!reduceTensorDesc) return CUDNN_STATUS_SUCCESS;
  if (!red_desc(reduceTensorDesc)) return CUDNN_STATUS_BAD_PARAM;
  reduceTensorDesc->magic = 0;
  free(reduceTensorDesc);
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnSetReduceTensorDescriptor(
    cudnnReduceTensorDescriptor_t reduceTensorDesc, cudnnReduceTensorOp_t reduceTensorOp,
    cudnnDataType_t reduceTensorCompType, cudnnNanPropagation_t reduceTensorNanOpt,
    cudnnReduceTensorIndices_t reduceTensorIndices, cudnnIndicesType_t reduceTensorIndicesType) {
  rgpu_rt_count_call();
  struct cudnnReduceTensorStruct *r = red_desc(reduceTensorDesc);
  if (!r || (int)reduceTensorOp < CUDNN_REDUCE_TENSOR_ADD ||
      (int)reduceTensorOp > CUDNN_REDUCE_TENSOR_MUL_NO_ZEROS ||
      !rgpu_cudnn_type_size((int)reduceTensorCompType) || (int)reduceTensorNanOpt < 0 ||
      (int)reduceTensorNanOpt > CUDNN_PROPAGATE_NAN || (int)reduceTensorIndices < 0 ||
      (int)reduceTensorIndices > CUDNN_REDUCE_TENSOR_FLATTENED_INDICES ||
      (int)reduceTensorIndicesType < 0 || (int)reduceTensorIndicesType > CUDNN_8BIT_INDICES)
    return CUDNN_STATUS_BAD_PARAM;
  r->op = (int)reduceTensorOp;
  r->compute = (int)reduceTensorCompType;
  r->nan_prop = (int)reduceTensorNanOpt;
  r->indices = (int)reduceTensorIndices;
  r->indices_type = (int)reduceTensorIndicesType;
  r->set = 1;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetReduceTensorDescriptor(
    const cudnnReduceTensorDescriptor_t reduceTensorDesc, cudnnReduceTensorOp_t *reduceTensorOp,
    cudnnDataType_t *reduceTensorCompType, cudnnNanPropagation_t *reduceTensorNanOpt,
    cudnnReduceTensorIndices_t *reduceTensorIndices, cudnnIndicesType_t *reduceTensorIndicesType) {
  rgpu_rt_count_call();
  struct cudnnReduceTensorStruct *r = red_desc(reduceTensorDesc);
  if (!r || !reduceTensorOp || !reduceTensorCompType || !reduceTensorNanOpt ||
      !reduceTensorIndices || !reduceTensorIndicesType)
    return CUDNN_STATUS_BAD_PARAM;
  *reduceTensorOp = (cudnnReduceTensorOp_t)r->op;
  *reduceTensorCompType = (cudnnDataType_t)r->compute;
  *reduceTensorNanOpt = (cudnnNanPropagation_t)r->nan_prop;
  *reduceTensorIndices = (cudnnReduceTensorIndices_t)r->indices;
  *reduceTensorIndicesType = (cudnnIndicesType_t)r->indices_type;
  return CUDNN_STATUS_SUCCESS;
}

/* cuDNN's shape rule: a and c of one rank and type, each of c's
 * dimensions a's or 1. */
static cudnnStatus_t shapes(const struct cudnnTensorStruct *a, const struct cudnnTensorStruct *c) {
  if (!a || !c || a->nb_dims != c->nb_dims || a->type != c->type) return CUDNN_STATUS_BAD_PARAM;
  for (int i = 0; i < a->nb_dims; i++)
    if (c->dim[i] != a->dim[i] && c->dim[i] != 1) return CUDNN_STATUS_BAD_PARAM;
  return CUDNN_STATUS_SUCCESS;
}

#define DESC_FIELDS(q, r)                              \
  do {                                                 \
    (q).red_op = (uint32_t)(r)->op;                    \
    (q).red_compute = (uint32_t)(r)->compute;          \
    (q).red_nan = (uint32_t)(r)->nan_prop;             \
    (q).red_indices = (uint32_t)(r)->indices;          \
    (q).red_indices_type = (uint32_t)(r)->indices_type; \
  } while (0)

/* ---- the sizes: the server's answer, cached -------------------------------- */


/* Built in zeroed memory, compared by memcmp. */
typedef struct {
  int device, which;
  struct cudnnReduceTensorStruct desc;
  struct cudnnTensorStruct a, c;
} size_key;

/* Sizes answered by the server, by key. */
static rgpu_cudnn_cache g_sizes = RGPU_CUDNN_CACHE_INIT;

static cudnnStatus_t size_query(const char *api, int which, cudnnHandle_t handle,
                                cudnnReduceTensorDescriptor_t desc, cudnnTensorDescriptor_t aDesc,
                                cudnnTensorDescriptor_t cDesc, size_t *out) {
  struct cudnnContext *h = rgpu_cudnn_handle(handle);
  struct cudnnReduceTensorStruct *r = red_desc(desc);
  struct cudnnTensorStruct *at = rgpu_cudnn_set_tensor(aDesc), *ct = rgpu_cudnn_set_tensor(cDesc);
  if (!h || !r || !r->set || !out || shapes(at, ct))
    return rgpu_cudnn_refused(CUDNN_STATUS_BAD_PARAM);
  size_key key;
  memset(&key, 0, sizeof key);
  key.device = h->device;
  key.which = which;
  memcpy(&key.desc, r, sizeof key.desc);
  memcpy(&key.a, at, sizeof key.a);
  memcpy(&key.c, ct, sizeof key.c);
  if (rgpu_cudnn_cache_get(&g_sizes, &key, sizeof key, out, sizeof *out) == (long)sizeof *out)
    return rgpu_cudnn_refused(CUDNN_STATUS_SUCCESS);
  rgpu_client *c;
  if (rgpu_rt_enter(&c) != cudaSuccess) return CUDNN_STATUS_EXECUTION_FAILED;
  rgpu_msg_cudnn_reduce_query_req q = {.handle = h->id, .which = (uint32_t)which};
  DESC_FIELDS(q, r);
  RGPU_CUDNN_DESC_FIELDS(q, a, at);
  RGPU_CUDNN_DESC_FIELDS(q, c, ct);
  rgpu_buf pay;
  rgpu_buf_init(&pay);
  rgpu_client_reply rr = {.payload = &pay};
  rgpu_msg_cudnn_reduce_query_rep rep;
  rgpu_status rc = rgpu_call_cudnn_reduce_query(c, h->device, 0, &q, &rep, &rr);
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  if (rc) {
    st = rgpu_cudnn_reply_status(c, rc, api, rr.msg);
  } else {
    *out = (size_t)rep.size;
    rgpu_cudnn_cache_put(&g_sizes, &key, sizeof key, out, sizeof *out);
  }
  rgpu_buf_free(&pay);
  return st;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetReductionIndicesSize(
    cudnnHandle_t handle, const cudnnReduceTensorDescriptor_t reduceTensorDesc,
    const cudnnTensorDescriptor_t aDesc, const cudnnTensorDescriptor_t cDesc,
    size_t *sizeInBytes) {
  return size_query("cudnnGetReductionIndicesSize", 0, handle, reduceTensorDesc, aDesc, cDesc,
                    sizeInBytes);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetReductionWorkspaceSize(
    cudnnHandle_t handle, const cudnnReduceTensorDescriptor_t reduceTensorDesc,
    const cudnnTensorDescriptor_t aDesc, const cudnnTensorDescriptor_t cDesc,
    size_t *sizeInBytes) {
  return size_query("cudnnGetReductionWorkspaceSize", 1, handle, reduceTensorDesc, aDesc, cDesc,
                    sizeInBytes);
}

/* ---- the reduction ------------------------------------------------------------- */

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnReduceTensor(
    cudnnHandle_t handle, const cudnnReduceTensorDescriptor_t reduceTensorDesc, void *indices,
    size_t indicesSizeInBytes, void *workspace, size_t workspaceSizeInBytes, const void *alpha,
    const cudnnTensorDescriptor_t aDesc, const void *A, const void *beta,
    const cudnnTensorDescriptor_t cDesc, void *C) {
  struct cudnnContext *h = rgpu_cudnn_handle(handle);
  struct cudnnReduceTensorStruct *r = red_desc(reduceTensorDesc);
  struct cudnnTensorStruct *at = rgpu_cudnn_set_tensor(aDesc), *ct = rgpu_cudnn_set_tensor(cDesc);
  if (!h || !r || !r->set || !alpha || !beta || !A || !C || shapes(at, ct) ||
      (indicesSizeInBytes && !indices) || (workspaceSizeInBytes && !workspace))
    return rgpu_cudnn_refused(CUDNN_STATUS_BAD_PARAM);
  cudnnStatus_t st;
  rgpu_client *c;
  uint64_t wire;
  int device;
  if ((st = rgpu_cudnn_enter_stream(h, &c, &wire, &device))) return st;
  rgpu_msg_cudnn_reduce_req q = {.handle = h->id, .stream = wire,
                                 .alpha = rgpu_cudnn_scale_of(ct->type, alpha),
                                 .beta = rgpu_cudnn_scale_of(ct->type, beta),
                                 .indices = (uint64_t)(uintptr_t)indices,
                                 .indices_size = indices ? indicesSizeInBytes : 0,
                                 .workspace = (uint64_t)(uintptr_t)workspace,
                                 .workspace_size = workspace ? workspaceSizeInBytes : 0};
  DESC_FIELDS(q, r);
  RGPU_CUDNN_TENSOR_FIELDS(q, a, at, A);
  RGPU_CUDNN_TENSOR_FIELDS(q, c, ct, C);
  return RGPU_CUDNN_SUBMIT(c, device, wire, CUDNN_REDUCE, cudnn_reduce, &q);
}
