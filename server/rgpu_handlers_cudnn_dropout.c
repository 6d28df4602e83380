/* Dropout requests: CUDNN_DROPOUT_INIT and CUDNN_DROPOUT (no reply),
 * CUDNN_DROPOUT_QUERY.  The states, the reserve space and the tensors are
 * checked against the session's allocations (rgpu_handlers_cudnn.h's
 * checks).  On a GPU the descriptor is rebuilt per request: initialized
 * with cudnnSetDropoutDescriptor (which runs cuDNN's kernel on the states),
 * restored without initialization (cudnnRestoreDropoutDescriptor) for the
 * forward and backward calls.  On softgpu the plain C of
 * rgpu_cudnn_cpu_dropout.c runs in a host function on the stream. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cudnn.h>

#include "rgpu_cudnn_cpu_dropout.h"
#include "rgpu_dispatch.h"
#include "rgpu_handlers_cudnn.h"
#include "rgpu_log.h"
#include "rgpu_worker_internal.h"

#define D (&w->drv)
#define FAIL(status, ...) rgpu_worker_fail(w, (status), __VA_ARGS__)

#define DROP_FUNCS(X)                                                                        \
  X(cudnnCreateTensorDescriptor) X(cudnnSetTensorNdDescriptor) X(cudnnDestroyTensorDescriptor) \
  X(cudnnCreateDropoutDescriptor) X(cudnnSetDropoutDescriptor)                               \
  X(cudnnRestoreDropoutDescriptor) X(cudnnDestroyDropoutDescriptor) X(cudnnDropoutForward)   \
  X(cudnnDropoutBackward) X(cudnnDropoutGetStatesSize) X(cudnnDropoutGetReserveSpaceSize)

static struct {
  int state; /* 0 not tried, 1 resolved, -1 a function is missing */
  char err[160];
#define DROP_FIELD(name) __typeof__(&name) name;
  DROP_FUNCS(DROP_FIELD)
#undef DROP_FIELD
} g_fn;

static CUresult gpu_handle(rgpu_worker *w, const char *api, CUstream st, cudnnHandle_t *h) {
  CUresult r = rgpu_cudnn_server_handle(w, api, st, h);
  if (r) return r;
  if (!g_fn.state) {
    g_fn.state = 1;
#define DROP_RESOLVE(name)                                                                   \
    if (g_fn.state > 0 && !(*(void **)&g_fn.name = rgpu_cudnn_server_sym(#name))) {         \
      snprintf(g_fn.err, sizeof g_fn.err, "libcudnn.so.9 has no %s", #name);                 \
      g_fn.state = -1;                                                                       \
    }
    DROP_FUNCS(DROP_RESOLVE)
#undef DROP_RESOLVE
  }
  if (g_fn.state < 0) return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s: %s", api, g_fn.err);
  return CUDA_SUCCESS;
}

static CUresult range_in_session(rgpu_worker *w, const char *api, const char *name, uint64_t p,
                                 uint64_t bytes) {
  if (!bytes || !rgpu_alloc_table_lookup(&w->allocs, p, bytes))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: %s (%llu bytes at 0x%llx) is not inside a device "
                "allocation of this session", api, name, (unsigned long long)bytes,
                (unsigned long long)p);
  return CUDA_SUCCESS;
}

static uint64_t elements(const dnn_tensor *t) {
  uint64_t n = 1;
  for (int i = 0; i < t->nb; i++) n *= (uint64_t)t->dim[i];
  return n;
}

static CUresult launch(rgpu_worker *w, const char *api, CUstream st, CUhostFn fn, void *job) {
  if (!D->cuLaunchHostFunc) {
    free(job);
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s: this softgpu has no cuLaunchHostFunc", api);
  }
  CUresult r = D->cuLaunchHostFunc(st, fn, job);
  if (r != CUDA_SUCCESS) {
    free(job);
    return FAIL(r, "%s: cuLaunchHostFunc: %s", api, rgpu_driver_error_name(D, r));
  }
  return CUDA_SUCCESS;
}

/* ---- initialization ------------------------------------------------------------ */

typedef struct {
  uint64_t *states, seed;
} init_job;

static void CUDA_CB run_init(void *arg) {
  init_job *j = arg;
  rgpu_cudnn_cpu_dropout_init(j->states, j->seed);
  free(j);
}

CUresult rgpu_h_cudnn_dropout_init(rgpu_req *rq, const rgpu_msg_cudnn_dropout_init_req *q) {
  rgpu_worker *w = rq->w;
  const char *api = "cudnnSetDropoutDescriptor";
  if (!(q->dropout >= 0.0f && q->dropout <= 1.0f))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: dropout %g is outside [0, 1]", api, q->dropout);
  CUresult r = range_in_session(w, api, "the states", q->states, q->states_size);
  if (r) return r;
  CUstream st;
  if ((r = rgpu_cudnn_srv_stream(w, q->stream, &st))) return r;
  if (D->is_softgpu) {
    if (q->states_size < RGPU_CUDNN_CPU_DROPOUT_STATES || q->states % 8)
      return FAIL(CUDA_ERROR_INVALID_VALUE, "%s on softgpu: the states need %d aligned bytes", api,
                  RGPU_CUDNN_CPU_DROPOUT_STATES);
    init_job *j = malloc(sizeof *j);
    if (!j) return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory for a %s", api);
    *j = (init_job){(uint64_t *)(uintptr_t)q->states, q->seed};
    return launch(w, api, st, run_init, j);
  }
  cudnnHandle_t h;
  if ((r = gpu_handle(w, api, st, &h))) return r;
  cudnnDropoutDescriptor_t d = NULL;
  cudnnStatus_t s = g_fn.cudnnCreateDropoutDescriptor(&d);
  if (!s)
    s = g_fn.cudnnSetDropoutDescriptor(d, h, q->dropout, (void *)(uintptr_t)q->states,
                                       q->states_size, q->seed);
  if (d) g_fn.cudnnDestroyDropoutDescriptor(d);
  return s ? FAIL(rgpu_cudnn_srv_status(s), "%s: status %d", api, (int)s) : CUDA_SUCCESS;
}

/* ---- forward and backward ------------------------------------------------------- */

typedef struct {
  int backward;
  float p;
  uint64_t *states;
  uint8_t *mask;
  rgpu_cudnn_cpu_tensor in, out;
} drop_job;

static void CUDA_CB run_dropout(void *arg) {
  drop_job *j = arg;
  if (j->backward) rgpu_cudnn_cpu_dropout_bwd(j->p, j->mask, &j->in, &j->out);
  else rgpu_cudnn_cpu_dropout_fwd(j->p, j->states, &j->in, &j->out, j->mask);
  free(j);
}

CUresult rgpu_h_cudnn_dropout(rgpu_req *rq, const rgpu_msg_cudnn_dropout_req *q) {
  rgpu_worker *w = rq->w;
  if (q->direction > 1)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cudnn dropout: direction %u", q->direction);
  int backward = q->direction == 1;
  const char *api = backward ? "cudnnDropoutBackward" : "cudnnDropoutForward";
  if (!(q->dropout >= 0.0f && q->dropout <= 1.0f))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: dropout %g is outside [0, 1]", api, q->dropout);
  dnn_tensor in, out;
  const char *in_name = backward ? "dy" : "x", *out_name = backward ? "dx" : "y";
  CUresult r =
      rgpu_cudnn_srv_tensor(w, api, in_name, q->x_type, &q->x_dim, &q->x_stride, q->x, &in);
  if (!r) r = rgpu_cudnn_srv_tensor(w, api, out_name, q->y_type, &q->y_dim, &q->y_stride, q->y, &out);
  if (r) return r;
  if (in.nb != out.nb || memcmp(in.dim, out.dim, sizeof in.dim[0] * (size_t)in.nb) ||
      in.type != out.type)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: %s and %s differ in shape or type", api, in_name,
                out_name);
  if ((r = rgpu_cudnn_srv_in_session(w, api, in_name, &in)) ||
      (r = rgpu_cudnn_srv_in_session(w, api, out_name, &out)) ||
      (r = range_in_session(w, api, "the states", q->states, q->states_size)) ||
      (r = range_in_session(w, api, "the reserve space", q->reserve, q->reserve_size)))
    return r;
  CUstream st;
  if ((r = rgpu_cudnn_srv_stream(w, q->stream, &st))) return r;
  if (D->is_softgpu) {
    if (in.type != CUDNN_DATA_FLOAT)
      return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s on softgpu: float tensors only (type %u)", api,
                  in.type);
    if (q->states_size < RGPU_CUDNN_CPU_DROPOUT_STATES || q->states % 8)
      return FAIL(CUDA_ERROR_INVALID_VALUE, "%s on softgpu: the states need %d aligned bytes", api,
                  RGPU_CUDNN_CPU_DROPOUT_STATES);
    if (q->reserve_size < elements(&in))
      return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: the reserve space needs %llu bytes, %llu given",
                  api, (unsigned long long)elements(&in), (unsigned long long)q->reserve_size);
    drop_job *j = malloc(sizeof *j);
    if (!j) return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory for a %s", api);
    *j = (drop_job){backward, q->dropout, (uint64_t *)(uintptr_t)q->states,
                    (uint8_t *)(uintptr_t)q->reserve, rgpu_cudnn_srv_cpu_tensor(&in),
                    rgpu_cudnn_srv_cpu_tensor(&out)};
    return launch(w, api, st, run_dropout, j);
  }
  cudnnHandle_t h;
  if ((r = gpu_handle(w, api, st, &h))) return r;
  cudnnTensorDescriptor_t ti = NULL, to = NULL;
  cudnnDropoutDescriptor_t d = NULL;
  cudnnStatus_t s = g_fn.cudnnCreateTensorDescriptor(&ti);
  if (!s) s = g_fn.cudnnSetTensorNdDescriptor(ti, (cudnnDataType_t)in.type, in.nb, in.dim, in.stride);
  if (!s) s = g_fn.cudnnCreateTensorDescriptor(&to);
  if (!s)
    s = g_fn.cudnnSetTensorNdDescriptor(to, (cudnnDataType_t)out.type, out.nb, out.dim, out.stride);
  if (!s) s = g_fn.cudnnCreateDropoutDescriptor(&d);
  /* The states the program initialized: restored, not initialized again. */
  if (!s)
    s = g_fn.cudnnRestoreDropoutDescriptor(d, h, q->dropout, (void *)(uintptr_t)q->states,
                                           q->states_size, q->seed);
  if (!s && !backward)
    s = g_fn.cudnnDropoutForward(h, d, ti, (const void *)(uintptr_t)q->x, to,
                                 (void *)(uintptr_t)q->y, (void *)(uintptr_t)q->reserve,
                                 q->reserve_size);
  else if (!s)
    s = g_fn.cudnnDropoutBackward(h, d, ti, (const void *)(uintptr_t)q->x, to,
                                  (void *)(uintptr_t)q->y, (void *)(uintptr_t)q->reserve,
                                  q->reserve_size);
  if (ti) g_fn.cudnnDestroyTensorDescriptor(ti);
  if (to) g_fn.cudnnDestroyTensorDescriptor(to);
  if (d) g_fn.cudnnDestroyDropoutDescriptor(d);
  return s ? FAIL(rgpu_cudnn_srv_status(s), "%s: status %d", api, (int)s) : CUDA_SUCCESS;
}

CUresult rgpu_h_cudnn_dropout_query(rgpu_req *rq, const rgpu_msg_cudnn_dropout_query_req *q) {
  rgpu_worker *w = rq->w;
  const char *api = "cudnn dropout size query";
  if (q->which > 1) return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: query %u", api, q->which);
  dnn_tensor x;
  memset(&x, 0, sizeof x);
  CUresult r;
  if (q->which == 1 &&
      (r = rgpu_cudnn_srv_tensor(w, api, "x", q->x_type, &q->x_dim, &q->x_stride, 0, &x)))
    return r;
  uint64_t size;
  if (D->is_softgpu) {
    size = q->which == 0 ? RGPU_CUDNN_CPU_DROPOUT_STATES : elements(&x);
  } else {
    cudnnHandle_t h;
    if ((r = gpu_handle(w, api, NULL, &h))) return r;
    size_t bytes = 0;
    cudnnStatus_t s;
    if (q->which == 0) {
      s = g_fn.cudnnDropoutGetStatesSize(h, &bytes);
    } else {
      cudnnTensorDescriptor_t t = NULL;
      s = g_fn.cudnnCreateTensorDescriptor(&t);
      if (!s) s = g_fn.cudnnSetTensorNdDescriptor(t, (cudnnDataType_t)x.type, x.nb, x.dim, x.stride);
      if (!s) s = g_fn.cudnnDropoutGetReserveSpaceSize(t, &bytes);
      if (t) g_fn.cudnnDestroyTensorDescriptor(t);
    }
    if (s) return FAIL(rgpu_cudnn_srv_status(s), "%s: status %d", api, (int)s);
    size = bytes;
  }
  rgpu_msg_cudnn_dropout_query_rep rep = {.size = size};
  rgpu_msg_cudnn_dropout_query_rep_encode(rq->rep, &rep);
  return CUDA_SUCCESS;
}
