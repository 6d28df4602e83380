/* CUDNN_LRN (no reply): cudnnLRNCrossChannelForward and Backward.  The
 * tensors are checked as every cuDNN request's are (rgpu_handlers_cudnn.h),
 * the descriptor's values against cuDNN's limits; on a GPU the real
 * functions run with real descriptors on the request's stream, on softgpu
 * the plain C of rgpu_cudnn_cpu_lrn.c in a host function. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cudnn.h>

#include "rgpu_cudnn_cpu_lrn.h"
#include "rgpu_dispatch.h"
#include "rgpu_handlers_cudnn.h"
#include "rgpu_log.h"
#include "rgpu_worker_internal.h"

#define D (&w->drv)
#define FAIL(status, ...) rgpu_worker_fail(w, (status), __VA_ARGS__)

/* One operation waiting on its stream. */
typedef struct {
  int backward;
  rgpu_cudnn_cpu_lrn_params p;
  rgpu_cudnn_cpu_tensor x, y, dy, dx;
  double alpha, beta;
} lrn_job;

static void CUDA_CB run_cpu(void *arg) {
  lrn_job *j = arg;
  if (j->backward) rgpu_cudnn_cpu_lrn_bwd(&j->p, &j->x, &j->dy, &j->dx, j->alpha, j->beta);
  else rgpu_cudnn_cpu_lrn_fwd(&j->p, &j->x, &j->y, j->alpha, j->beta);
  free(j);
}

#define LRN_FUNCS(X)                                                                         \
  X(cudnnCreateTensorDescriptor) X(cudnnSetTensorNdDescriptor) X(cudnnDestroyTensorDescriptor) \
  X(cudnnCreateLRNDescriptor) X(cudnnSetLRNDescriptor) X(cudnnDestroyLRNDescriptor)          \
  X(cudnnLRNCrossChannelForward) X(cudnnLRNCrossChannelBackward)

static struct {
  int state; /* 0 not tried, 1 resolved, -1 a function is missing */
  char err[160];
#define LRN_FIELD(name) __typeof__(&name) name;
  LRN_FUNCS(LRN_FIELD)
#undef LRN_FIELD
} g_fn;

static CUresult gpu_lrn(rgpu_worker *w, const char *api, CUstream st, int backward,
                        const rgpu_msg_cudnn_lrn_req *q, const dnn_tensor *const t[4]) {
  cudnnHandle_t h;
  CUresult r = rgpu_cudnn_server_handle(w, api, st, &h);
  if (r) return r;
  if (!g_fn.state) {
    g_fn.state = 1;
#define LRN_RESOLVE(name)                                                                    \
    if (g_fn.state > 0 && !(*(void **)&g_fn.name = rgpu_cudnn_server_sym(#name))) {         \
      snprintf(g_fn.err, sizeof g_fn.err, "libcudnn.so.9 has no %s", #name);                 \
      g_fn.state = -1;                                                                       \
    }
    LRN_FUNCS(LRN_RESOLVE)
#undef LRN_RESOLVE
  }
  if (g_fn.state < 0) return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s: %s", api, g_fn.err);
  cudnnTensorDescriptor_t td[4] = {0};
  cudnnLRNDescriptor_t lrn = NULL;
  cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
  for (int i = 0; i < (backward ? 4 : 2) && !s; i++) {
    s = g_fn.cudnnCreateTensorDescriptor(&td[i]);
    if (!s)
      s = g_fn.cudnnSetTensorNdDescriptor(td[i], (cudnnDataType_t)t[i]->type, t[i]->nb, t[i]->dim,
                                          t[i]->stride);
  }
  if (!s) s = g_fn.cudnnCreateLRNDescriptor(&lrn);
  if (!s) s = g_fn.cudnnSetLRNDescriptor(lrn, q->lrn_n, q->lrn_alpha, q->lrn_beta, q->lrn_k);
  /* Host factors in the data's width (double for double data). */
  union {
    float f;
    double d;
  } al, be;
  if (t[0]->type == CUDNN_DATA_DOUBLE) al.d = q->alpha, be.d = q->beta;
  else al.f = (float)q->alpha, be.f = (float)q->beta;
  if (s) {
  } else if (!backward) {
    s = g_fn.cudnnLRNCrossChannelForward(h, lrn, CUDNN_LRN_CROSS_CHANNEL_DIM1, &al, td[0],
                                         (const void *)(uintptr_t)q->x, &be, td[1],
                                         (void *)(uintptr_t)q->y);
  } else {
    s = g_fn.cudnnLRNCrossChannelBackward(h, lrn, CUDNN_LRN_CROSS_CHANNEL_DIM1, &al, td[1],
                                          (const void *)(uintptr_t)q->y, td[2],
                                          (const void *)(uintptr_t)q->dy, td[0],
                                          (const void *)(uintptr_t)q->x, &be, td[3],
                                          (void *)(uintptr_t)q->dx);
  }
  for (int i = 0; i < 4; i++)
    if (td[i]) g_fn.cudnnDestroyTensorDescriptor(td[i]);
  if (lrn) g_fn.cudnnDestroyLRNDescriptor(lrn);
  return s ? FAIL(rgpu_cudnn_srv_status(s), "%s: status %d", api, (int)s) : CUDA_SUCCESS;
}

CUresult rgpu_h_cudnn_lrn(rgpu_req *rq, const rgpu_msg_cudnn_lrn_req *q) {
  rgpu_worker *w = rq->w;
  if (q->direction > 1)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cudnn LRN: direction %u", q->direction);
  int backward = q->direction == 1;
  const char *api = backward ? "cudnnLRNCrossChannelBackward" : "cudnnLRNCrossChannelForward";
  if (q->lrn_n < CUDNN_LRN_MIN_N || q->lrn_n > CUDNN_LRN_MAX_N || !(q->lrn_k >= CUDNN_LRN_MIN_K) ||
      !(q->lrn_beta >= CUDNN_LRN_MIN_BETA) || q->lrn_alpha != q->lrn_alpha)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: the LRN descriptor (n %u, k %g, beta %g) is out "
                "of cuDNN's range", api, q->lrn_n, q->lrn_k, q->lrn_beta);
  dnn_tensor x, y, dy, dx;
  static const char *const names[] = {"x", "y", "dy", "dx"};
  const dnn_tensor *const t[4] = {&x, &y, &dy, &dx};
  CUresult r = rgpu_cudnn_srv_tensor(w, api, "x", q->x_type, &q->x_dim, &q->x_stride, q->x, &x);
  if (!r) r = rgpu_cudnn_srv_tensor(w, api, "y", q->y_type, &q->y_dim, &q->y_stride, q->y, &y);
  if (!r && backward)
    r = rgpu_cudnn_srv_tensor(w, api, "dy", q->dy_type, &q->dy_dim, &q->dy_stride, q->dy, &dy);
  if (!r && backward)
    r = rgpu_cudnn_srv_tensor(w, api, "dx", q->dx_type, &q->dx_dim, &q->dx_stride, q->dx, &dx);
  if (r) return r;
  for (int i = 1; i < (backward ? 4 : 2); i++)
    if (t[i]->nb != x.nb || memcmp(t[i]->dim, x.dim, sizeof x.dim[0] * (size_t)x.nb) ||
        t[i]->type != x.type)
      return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: x and %s differ in shape or type", api, names[i]);
  for (int i = 0; i < (backward ? 4 : 2); i++)
    if ((r = rgpu_cudnn_srv_in_session(w, api, names[i], t[i]))) return r;
  CUstream st;
  if ((r = rgpu_cudnn_srv_stream(w, q->stream, &st))) return r;
  if (!D->is_softgpu) return gpu_lrn(w, api, st, backward, q, t);
  if (x.type != CUDNN_DATA_FLOAT)
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s on softgpu: float tensors only (type %u)", api,
                x.type);
  if (!D->cuLaunchHostFunc)
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s: this softgpu has no cuLaunchHostFunc", api);
  lrn_job *j = calloc(1, sizeof *j);
  if (!j) return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory for a %s", api);
  j->backward = backward;
  j->p = (rgpu_cudnn_cpu_lrn_params){q->lrn_n, q->lrn_alpha, q->lrn_beta, q->lrn_k};
  j->x = rgpu_cudnn_srv_cpu_tensor(&x);
  j->y = rgpu_cudnn_srv_cpu_tensor(&y);
  if (backward) {
    j->dy = rgpu_cudnn_srv_cpu_tensor(&dy);
    j->dx = rgpu_cudnn_srv_cpu_tensor(&dx);
  }
  j->alpha = q->alpha;
  j->beta = q->beta;
  if ((r = D->cuLaunchHostFunc(st, run_cpu, j)) != CUDA_SUCCESS) {
    free(j);
    return FAIL(r, "%s: cuLaunchHostFunc: %s", api, rgpu_driver_error_name(D, r));
  }
  return CUDA_SUCCESS;
}
