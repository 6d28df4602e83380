/* Dropout: the dropout descriptor is a client record;
 * cudnnSetDropoutDescriptor queues the initialization of its random-number
 * states (device memory of the session) without a reply
 * (CUDNN_DROPOUT_INIT); cudnnDropoutForward and Backward are one
 * CUDNN_DROPOUT message each, carrying the descriptor's content; the
 * states and reserve sizes are the server's answer (CUDNN_DROPOUT_QUERY),
 * one round trip per device or shape, cached here.  The reserve space's
 * size is checked by the server (a short one fails as a deferred error,
 * where cuDNN answers BAD_PARAM at once). */
#include <pthread.h>
#include <stdlib.h>

#include "rgpu_calls.h"
#include "rgpu_cudart_op.h"
#include "rgpu_cudnn_cache.h"
#include "rgpu_cudnn_wire.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"

#define RGPU_CUDNN_DROPOUT_MAGIC 0x64447270u /* "dDrp" */
struct cudnnDropoutStruct {
  uint32_t magic;
  int set;
  float dropout;
  void *states;
  size_t states_size;
  unsigned long long seed;
};

static struct cudnnDropoutStruct *drop_desc(cudnnDropoutDescriptor_t d) {
  return d && d->magic == RGPU_CUDNN_DROPOUT_MAGIC ? d : NULL;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnCreateDropoutDescriptor(
    cudnnDropoutDescriptor_t *dropoutDesc) {
  rgpu_rt_count_call();
  if (!dropoutDesc) return CUDNN_STATUS_BAD_PARAM;
  struct cudnnDropoutStruct *r = calloc(1, sizeof *r);
  if (!r) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
  r->magic = RGPU_CUDNN_DROPOUT_MAGIC;
  *dropoutDesc = r;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnDestroyDropoutDescriptor(
    cudnnDropoutDescriptor_t dropoutDesc) {
  rgpu_rt_count_call();
  if (!dropoutDesc) return CUDNN_STATUS_SUCCESS;
  if (!drop_desc(dropoutDesc)) return CUDNN_STATUS_BAD_PARAM;
  dropoutDesc->magic = 0;
  free(dropoutDesc);
  return CUDNN_STATUS_SUCCESS;
}

/* ---- the sizes: the server's answer, cached ---------------------------------- */


/* Built in zeroed memory, compared by memcmp (x zero for the states). */
typedef struct {
  int device, which;
  struct cudnnTensorStruct x;
} size_key;

/* Sizes answered by the server, by key. */
static rgpu_cudnn_cache g_sizes = RGPU_CUDNN_CACHE_INIT;

static cudnnStatus_t size_query(const char *api, int which, int device, uint64_t handle_id,
                                const struct cudnnTensorStruct *xt, size_t *out) {
  size_key key;
  memset(&key, 0, sizeof key);
  key.device = device;
  key.which = which;
  if (xt) memcpy(&key.x, xt, sizeof key.x);
  if (rgpu_cudnn_cache_get(&g_sizes, &key, sizeof key, out, sizeof *out) == (long)sizeof *out)
    return rgpu_cudnn_refused(CUDNN_STATUS_SUCCESS);
  rgpu_client *c;
  if (rgpu_rt_enter(&c) != cudaSuccess) return CUDNN_STATUS_EXECUTION_FAILED;
  rgpu_msg_cudnn_dropout_query_req q = {.handle = handle_id, .which = (uint32_t)which};
  if (xt) RGPU_CUDNN_DESC_FIELDS(q, x, xt);
  rgpu_buf pay;
  rgpu_buf_init(&pay);
  rgpu_client_reply rr = {.payload = &pay};
  rgpu_msg_cudnn_dropout_query_rep rep;
  rgpu_status rc = rgpu_call_cudnn_dropout_query(c, device, 0, &q, &rep, &rr);
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

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnDropoutGetStatesSize(cudnnHandle_t handle,
                                                              size_t *sizeInBytes) {
  struct cudnnContext *h = rgpu_cudnn_handle(handle);
  if (!h || !sizeInBytes) return rgpu_cudnn_refused(CUDNN_STATUS_BAD_PARAM);
  return size_query("cudnnDropoutGetStatesSize", 0, h->device, h->id, NULL, sizeInBytes);
}

/* No handle: the current device's answer. */
RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnDropoutGetReserveSpaceSize(cudnnTensorDescriptor_t xdesc,
                                                                    size_t *sizeInBytes) {
  struct cudnnTensorStruct *xt = rgpu_cudnn_set_tensor(xdesc);
  if (!xt || !sizeInBytes) return rgpu_cudnn_refused(CUDNN_STATUS_BAD_PARAM);
  rgpu_client *c;
  if (rgpu_rt_enter(&c) != cudaSuccess) return CUDNN_STATUS_NOT_INITIALIZED;
  return size_query("cudnnDropoutGetReserveSpaceSize", 1, rgpu_rt_current_device(), 0, xt,
                    sizeInBytes);
}

/* ---- the descriptor -------------------------------------------------------------- */

static cudnnStatus_t store(struct cudnnDropoutStruct *r, float dropout, void *states,
                           size_t size, unsigned long long seed) {
  r->dropout = dropout;
  r->states = states;
  r->states_size = states ? size : 0;
  r->seed = seed;
  r->set = 1;
  return CUDNN_STATUS_SUCCESS;
}

/* Stores the values and, when states are given, queues their
 * initialization from the seed (cuDNN runs a kernel here). */
RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnSetDropoutDescriptor(cudnnDropoutDescriptor_t dropoutDesc,
                                                              cudnnHandle_t handle, float dropout,
                                                              void *states,
                                                              size_t stateSizeInBytes,
                                                              unsigned long long seed) {
  struct cudnnContext *h = rgpu_cudnn_handle(handle);
  struct cudnnDropoutStruct *r = drop_desc(dropoutDesc);
  if (!h || !r || !(dropout >= 0.0f && dropout <= 1.0f) || (states && !stateSizeInBytes))
    return rgpu_cudnn_refused(CUDNN_STATUS_BAD_PARAM);
  if (!states) return rgpu_cudnn_refused(store(r, dropout, NULL, 0, seed));
  cudnnStatus_t st;
  rgpu_client *c;
  uint64_t wire;
  int device;
  if ((st = rgpu_cudnn_enter(h, "cudnnSetDropoutDescriptor", &c, &wire, &device))) return st;
  rgpu_rt_host_backpressure(c, wire, 0);
  rgpu_msg_cudnn_dropout_init_req q = {.handle = h->id, .stream = wire, .dropout = dropout,
                                       .states = (uint64_t)(uintptr_t)states,
                                       .states_size = stateSizeInBytes, .seed = seed};
  if ((st = rgpu_cudnn_sent(
           c, rgpu_call_cudnn_dropout_init(c, device, RGPU_CALL_ASYNC, &q, NULL, NULL))))
    return st;
  return store(r, dropout, states, stateSizeInBytes, seed);
}

/* The values of states initialized before (no initialization). */
RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnRestoreDropoutDescriptor(
    cudnnDropoutDescriptor_t dropoutDesc, cudnnHandle_t handle, float dropout, void *states,
    size_t stateSizeInBytes, unsigned long long seed) {
  rgpu_rt_count_call();
  struct cudnnDropoutStruct *r = drop_desc(dropoutDesc);
  if (!rgpu_cudnn_handle(handle) || !r || !(dropout >= 0.0f && dropout <= 1.0f) || !states ||
      !stateSizeInBytes)
    return CUDNN_STATUS_BAD_PARAM;
  return store(r, dropout, states, stateSizeInBytes, seed);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetDropoutDescriptor(cudnnDropoutDescriptor_t dropoutDesc,
                                                              cudnnHandle_t handle, float *dropout,
                                                              void **states,
                                                              unsigned long long *seed) {
  rgpu_rt_count_call();
  struct cudnnDropoutStruct *r = drop_desc(dropoutDesc);
  if (!rgpu_cudnn_handle(handle) || !r || !dropout || !states || !seed)
    return CUDNN_STATUS_BAD_PARAM;
  *dropout = r->dropout;
  *states = r->states;
  *seed = r->seed;
  return CUDNN_STATUS_SUCCESS;
}

/* ---- forward and backward --------------------------------------------------------- */

static cudnnStatus_t dropout_call(const char *api, int direction, cudnnHandle_t handle,
                                  cudnnDropoutDescriptor_t dropoutDesc,
                                  cudnnTensorDescriptor_t inDesc, const void *in,
                                  cudnnTensorDescriptor_t outDesc, void *out, void *reserve,
                                  size_t reserve_size) {
  struct cudnnContext *h = rgpu_cudnn_handle(handle);
  struct cudnnDropoutStruct *r = drop_desc(dropoutDesc);
  struct cudnnTensorStruct *it = rgpu_cudnn_set_tensor(inDesc), *ot = rgpu_cudnn_set_tensor(outDesc);
  if (!h || !r || !r->set || !r->states || !it || !ot || !in || !out || !reserve ||
      !reserve_size || !rgpu_cudnn_same_dims(it, ot) || it->type != ot->type)
    return rgpu_cudnn_refused(CUDNN_STATUS_BAD_PARAM);
  cudnnStatus_t st;
  rgpu_client *c;
  uint64_t wire;
  int device;
  if ((st = rgpu_cudnn_enter_stream(h, &c, &wire, &device))) return st;
  rgpu_msg_cudnn_dropout_req q = {.handle = h->id, .stream = wire, .direction = (uint32_t)direction,
                                  .dropout = r->dropout, .states = (uint64_t)(uintptr_t)r->states,
                                  .states_size = r->states_size, .seed = r->seed,
                                  .reserve = (uint64_t)(uintptr_t)reserve,
                                  .reserve_size = reserve_size};
  RGPU_CUDNN_TENSOR_FIELDS(q, x, it, in);
  RGPU_CUDNN_TENSOR_FIELDS(q, y, ot, out);
  return RGPU_CUDNN_SUBMIT(c, device, wire, CUDNN_DROPOUT, cudnn_dropout, &q);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnDropoutForward(
    cudnnHandle_t handle, const cudnnDropoutDescriptor_t dropoutDesc,
    const cudnnTensorDescriptor_t xdesc, const void *x, const cudnnTensorDescriptor_t ydesc,
    void *y, void *reserveSpace, size_t reserveSpaceSizeInBytes) {
  return dropout_call("cudnnDropoutForward", 0, handle, dropoutDesc, xdesc, x, ydesc, y,
                      reserveSpace, reserveSpaceSizeInBytes);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnDropoutBackward(
    cudnnHandle_t handle, const cudnnDropoutDescriptor_t dropoutDesc,
    const cudnnTensorDescriptor_t dydesc, const void *dy, const cudnnTensorDescriptor_t dxdesc,
    void *dx, void *reserveSpace, size_t reserveSpaceSizeInBytes) {
  return dropout_call("cudnnDropoutBackward", 1, handle, dropoutDesc, dydesc, dy, dxdesc, dx,
                      reserveSpace, reserveSpaceSizeInBytes);
}
