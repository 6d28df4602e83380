/* CUDNN_REDUCE (no reply) and CUDNN_REDUCE_QUERY: cudnnReduceTensor and its
 * indices and workspace sizes.  The tensors are checked as every cuDNN
 * request's are (rgpu_handlers_cudnn.h), and the indices and workspace
 * against the session's allocations; on a GPU the real functions run with
 * real descriptors, on softgpu the plain C of rgpu_cudnn_cpu_reduce.c in a
 * host function on the stream. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cudnn.h>

#include "rgpu_cudnn_cpu_reduce.h"
#include "rgpu_dispatch.h"
#include "rgpu_handlers_cudnn.h"
#include "rgpu_log.h"
#include "rgpu_worker_internal.h"

#define D (&w->drv)
#define FAIL(status, ...) rgpu_worker_fail(w, (status), __VA_ARGS__)

#define RED_FUNCS(X)                                                                         \
  X(cudnnCreateTensorDescriptor) X(cudnnSetTensorNdDescriptor) X(cudnnDestroyTensorDescriptor) \
  X(cudnnCreateReduceTensorDescriptor) X(cudnnSetReduceTensorDescriptor)                     \
  X(cudnnDestroyReduceTensorDescriptor) X(cudnnReduceTensor) X(cudnnGetReductionIndicesSize)  \
  X(cudnnGetReductionWorkspaceSize)

static struct {
  int state; /* 0 not tried, 1 resolved, -1 a function is missing */
  char err[160];
#define RED_FIELD(name) __typeof__(&name) name;
  RED_FUNCS(RED_FIELD)
#undef RED_FIELD
} g_fn;

/* The descriptor's fields and a and c, checked: c's dimensions a's or 1. */
typedef struct {
  uint32_t op, compute, nan, indices, indices_type;
  dnn_tensor a, c;
} red_shape;

static CUresult shape_of(rgpu_worker *w, const char *api, uint32_t op, uint32_t compute,
                         uint32_t nan, uint32_t indices, uint32_t indices_type, uint32_t at,
                         const rgpu_array *ad, const rgpu_array *as, uint64_t a, uint32_t ct,
                         const rgpu_array *cd, const rgpu_array *cs, uint64_t c, red_shape *s) {
  if (op > CUDNN_REDUCE_TENSOR_MUL_NO_ZEROS || !rgpu_cudnn_srv_type_size(compute) ||
      nan > CUDNN_PROPAGATE_NAN || indices > CUDNN_REDUCE_TENSOR_FLATTENED_INDICES ||
      indices_type > CUDNN_8BIT_INDICES)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: the reduce-tensor descriptor (op %u, indices %u) "
                "is out of range", api, op, indices);
  *s = (red_shape){op, compute, nan, indices, indices_type};
  CUresult r = rgpu_cudnn_srv_tensor(w, api, "A", at, ad, as, a, &s->a);
  if (!r) r = rgpu_cudnn_srv_tensor(w, api, "C", ct, cd, cs, c, &s->c);
  if (r) return r;
  if (s->a.nb != s->c.nb || s->a.type != s->c.type)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: A and C differ in rank or type", api);
  for (int i = 0; i < s->a.nb; i++)
    if (s->c.dim[i] != s->a.dim[i] && s->c.dim[i] != 1)
      return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: C's dimension %d is neither A's nor 1", api, i);
  return CUDA_SUCCESS;
}

/* Whether the reduction writes indices (cuDNN ignores them but for the
 * extrema), and their bytes: a u32 per element of C. */
static int writes_indices(const red_shape *s) {
  return s->indices == CUDNN_REDUCE_TENSOR_FLATTENED_INDICES &&
         (s->op == CUDNN_REDUCE_TENSOR_MIN || s->op == CUDNN_REDUCE_TENSOR_MAX ||
          s->op == CUDNN_REDUCE_TENSOR_AMAX);
}
static uint64_t c_elements(const red_shape *s) {
  uint64_t n = 1;
  for (int i = 0; i < s->c.nb; i++) n *= (uint64_t)s->c.dim[i];
  return n;
}

/* NVIDIA's descriptors for a request (a, c, the reduction). */
typedef struct {
  cudnnTensorDescriptor_t a, c;
  cudnnReduceTensorDescriptor_t red;
} red_real;

static void real_free(red_real *r) {
  if (r->a) g_fn.cudnnDestroyTensorDescriptor(r->a);
  if (r->c) g_fn.cudnnDestroyTensorDescriptor(r->c);
  if (r->red) g_fn.cudnnDestroyReduceTensorDescriptor(r->red);
}

static CUresult gpu_setup(rgpu_worker *w, const char *api, CUstream st, const red_shape *s,
                          cudnnHandle_t *h, red_real *real, cudnnStatus_t *status) {
  CUresult r = rgpu_cudnn_server_handle(w, api, st, h);
  if (r) return r;
  if (!g_fn.state) {
    g_fn.state = 1;
#define RED_RESOLVE(name)                                                                    \
    if (g_fn.state > 0 && !(*(void **)&g_fn.name = rgpu_cudnn_server_sym(#name))) {         \
      snprintf(g_fn.err, sizeof g_fn.err, "libcudnn.so.9 has no %s", #name);                 \
      g_fn.state = -1;                                                                       \
    }
    RED_FUNCS(RED_RESOLVE)
#undef RED_RESOLVE
  }
  if (g_fn.state < 0) return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s: %s", api, g_fn.err);
  cudnnStatus_t x = g_fn.cudnnCreateTensorDescriptor(&real->a);
  if (!x)
    x = g_fn.cudnnSetTensorNdDescriptor(real->a, (cudnnDataType_t)s->a.type, s->a.nb, s->a.dim,
                                        s->a.stride);
  if (!x) x = g_fn.cudnnCreateTensorDescriptor(&real->c);
  if (!x)
    x = g_fn.cudnnSetTensorNdDescriptor(real->c, (cudnnDataType_t)s->c.type, s->c.nb, s->c.dim,
                                        s->c.stride);
  if (!x) x = g_fn.cudnnCreateReduceTensorDescriptor(&real->red);
  if (!x)
    x = g_fn.cudnnSetReduceTensorDescriptor(
        real->red, (cudnnReduceTensorOp_t)s->op, (cudnnDataType_t)s->compute,
        (cudnnNanPropagation_t)s->nan, (cudnnReduceTensorIndices_t)s->indices,
        (cudnnIndicesType_t)s->indices_type);
  *status = x;
  return CUDA_SUCCESS;
}

static void CUDA_CB run_cpu(void *arg) {
  struct {
    int op;
    rgpu_cudnn_cpu_tensor a, c;
    uint32_t *indices;
    double alpha, beta;
  } *j = arg;
  rgpu_cudnn_cpu_reduce(j->op, &j->a, &j->c, j->indices, j->alpha, j->beta);
  free(j);
}

CUresult rgpu_h_cudnn_reduce(rgpu_req *rq, const rgpu_msg_cudnn_reduce_req *q) {
  rgpu_worker *w = rq->w;
  const char *api = "cudnnReduceTensor";
  red_shape s;
  CUresult r = shape_of(w, api, q->red_op, q->red_compute, q->red_nan, q->red_indices,
                        q->red_indices_type, q->a_type, &q->a_dim, &q->a_stride, q->a, q->c_type,
                        &q->c_dim, &q->c_stride, q->c, &s);
  if (r) return r;
  if ((r = rgpu_cudnn_srv_in_session(w, api, "A", &s.a)) ||
      (r = rgpu_cudnn_srv_in_session(w, api, "C", &s.c)))
    return r;
  if (q->workspace_size && !rgpu_alloc_table_lookup(&w->allocs, q->workspace, q->workspace_size))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: the workspace (%llu bytes at 0x%llx) is not inside "
                "a device allocation of this session", api,
                (unsigned long long)q->workspace_size, (unsigned long long)q->workspace);
  /* The indices space as given (a GPU's cuDNN may use all of it), and at
   * least a u32 per element of C when the reduction writes indices. */
  int with_indices = writes_indices(&s);
  uint64_t ibytes = with_indices ? c_elements(&s) * 4 : 0;
  if (q->indices_size && !rgpu_alloc_table_lookup(&w->allocs, q->indices, q->indices_size))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: the indices (%llu bytes at 0x%llx) are not inside "
                "a device allocation of this session", api, (unsigned long long)q->indices_size,
                (unsigned long long)q->indices);
  if (q->indices_size < ibytes)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: the indices need %llu bytes, %llu given", api,
                (unsigned long long)ibytes, (unsigned long long)q->indices_size);
  CUstream st;
  if ((r = rgpu_cudnn_srv_stream(w, q->stream, &st))) return r;
  if (D->is_softgpu) {
    if (s.a.type != CUDNN_DATA_FLOAT)
      return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s on softgpu: float tensors only (type %u)", api,
                  s.a.type);
    if (with_indices && s.indices_type != CUDNN_32BIT_INDICES)
      return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s on softgpu: 32-bit indices only", api);
    if (!D->cuLaunchHostFunc)
      return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s: this softgpu has no cuLaunchHostFunc", api);
    struct {
      int op;
      rgpu_cudnn_cpu_tensor a, c;
      uint32_t *indices;
      double alpha, beta;
    } *j = malloc(sizeof *j);
    if (!j) return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory for a %s", api);
    j->op = (int)s.op;
    j->a = rgpu_cudnn_srv_cpu_tensor(&s.a);
    j->c = rgpu_cudnn_srv_cpu_tensor(&s.c);
    j->indices = with_indices ? (uint32_t *)(uintptr_t)q->indices : NULL;
    j->alpha = q->alpha;
    j->beta = q->beta;
    if ((r = D->cuLaunchHostFunc(st, run_cpu, j)) != CUDA_SUCCESS) {
      free(j);
      return FAIL(r, "%s: cuLaunchHostFunc: %s", api, rgpu_driver_error_name(D, r));
    }
    return CUDA_SUCCESS;
  }
  cudnnHandle_t h;
  red_real real = {0};
  cudnnStatus_t x = CUDNN_STATUS_SUCCESS;
  if ((r = gpu_setup(w, api, st, &s, &h, &real, &x))) return r;
  union {
    float f;
    double d;
  } al, be;
  if (s.c.type == CUDNN_DATA_DOUBLE) al.d = q->alpha, be.d = q->beta;
  else al.f = (float)q->alpha, be.f = (float)q->beta;
  if (!x)
    x = g_fn.cudnnReduceTensor(h, real.red, with_indices ? (void *)(uintptr_t)q->indices : NULL,
                               with_indices ? q->indices_size : 0,
                               (void *)(uintptr_t)q->workspace, q->workspace_size, &al, real.a,
                               (const void *)(uintptr_t)q->a, &be, real.c,
                               (void *)(uintptr_t)q->c);
  real_free(&real);
  return x ? FAIL(rgpu_cudnn_srv_status(x), "%s: status %d", api, (int)x) : CUDA_SUCCESS;
}

CUresult rgpu_h_cudnn_reduce_query(rgpu_req *rq, const rgpu_msg_cudnn_reduce_query_req *q) {
  rgpu_worker *w = rq->w;
  const char *api = "cudnn reduction size query";
  if (q->which > 1) return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: query %u", api, q->which);
  red_shape s;
  CUresult r = shape_of(w, api, q->red_op, q->red_compute, q->red_nan, q->red_indices,
                        q->red_indices_type, q->a_type, &q->a_dim, &q->a_stride, 0, q->c_type,
                        &q->c_dim, &q->c_stride, 0, &s);
  if (r) return r;
  uint64_t size = 0;
  if (D->is_softgpu) {
    /* A u32 per element of C when indices are asked for; no workspace. */
    size = q->which == 0 && s.indices == CUDNN_REDUCE_TENSOR_FLATTENED_INDICES ? c_elements(&s) * 4
                                                                               : 0;
  } else {
    cudnnHandle_t h;
    red_real real = {0};
    cudnnStatus_t x = CUDNN_STATUS_SUCCESS;
    if ((r = gpu_setup(w, api, NULL, &s, &h, &real, &x))) return r;
    size_t bytes = 0;
    if (!x)
      x = q->which == 0 ? g_fn.cudnnGetReductionIndicesSize(h, real.red, real.a, real.c, &bytes)
                        : g_fn.cudnnGetReductionWorkspaceSize(h, real.red, real.a, real.c, &bytes);
    real_free(&real);
    if (x) return FAIL(rgpu_cudnn_srv_status(x), "%s: status %d", api, (int)x);
    size = bytes;
  }
  rgpu_msg_cudnn_reduce_query_rep rep = {.size = size};
  rgpu_msg_cudnn_reduce_query_rep_encode(rq->rep, &rep);
  return CUDA_SUCCESS;
}
