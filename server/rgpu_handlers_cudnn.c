/* cuDNN requests (issue 17): CUDNN_CONV_FWD, CUDNN_ADD_TENSOR,
 * CUDNN_ACTIVATION_FWD, CUDNN_POOLING_FWD, CUDNN_SOFTMAX_FWD (no reply) and
 * CUDNN_CONV_FWD_QUERY.
 *
 * The client keeps cuDNN's handle and legacy descriptors; each request
 * carries their content.  On a real GPU the worker dlopen()s NVIDIA's
 * libcudnn.so.9 (never linked: a host without it still serves everything
 * else; rgpu's own facade is refused), builds real descriptors for the
 * request and calls it on the request's stream.  On softgpu, whose device
 * addresses are host addresses of this process, the operation runs as a
 * host function on the stream (cuLaunchHostFunc, so it is ordered with
 * kernels and copies) with the CPU code of rgpu_cudnn_cpu.c, float only.
 *
 * Everything the client sends is checked again here (dimensions, strides,
 * the shapes' agreement, and every tensor's extent against the session's
 * allocations) before anything is touched. */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cudnn.h>

#include "rgpu_cudnn_cpu.h"
#include "rgpu_handlers_cudnn.h"
#include "rgpu_dispatch.h"
#include "rgpu_log.h"
#include "rgpu_worker_internal.h"

#define D (&w->drv)
#define FAIL(status, ...) rgpu_worker_fail(w, (status), __VA_ARGS__)

/* ---- tensors as the wire carries them ------------------------------------- */

/* dnn_tensor: rgpu_handlers_cudnn.h */

static size_t type_size(uint32_t t) {
  switch (t) {
    case CUDNN_DATA_DOUBLE: case CUDNN_DATA_INT64: return 8;
    case CUDNN_DATA_FLOAT: case CUDNN_DATA_INT32: case CUDNN_DATA_UINT32: return 4;
    case CUDNN_DATA_HALF: case CUDNN_DATA_BFLOAT16: return 2;
    case CUDNN_DATA_INT8: case CUDNN_DATA_UINT8: case CUDNN_DATA_BOOLEAN:
    case CUDNN_DATA_FP8_E4M3: case CUDNN_DATA_FP8_E5M2: case CUDNN_DATA_FP8_E8M0: return 1;
    default: return 0;
  }
}

/* Decodes and checks one tensor: a type rgpu sizes, 3 to 8 dimensions,
 * positive dimensions and strides, at most 2^31-1 elements. */
static CUresult tensor_of(rgpu_worker *w, const char *api, const char *name, uint32_t type,
                          const rgpu_array *dim, const rgpu_array *stride, uint64_t ptr,
                          dnn_tensor *t) {
  memset(t, 0, sizeof *t);
  if (!type_size(type) || dim->count < 3 || dim->count > 8 || stride->count != dim->count)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: %s: type %u with %u dimensions and %u strides",
                api, name, type, dim->count, stride->count);
  int64_t elems = 1;
  for (uint32_t i = 0; i < dim->count; i++) {
    t->dim[i] = rgpu_array_i32(dim, i);
    t->stride[i] = rgpu_array_i32(stride, i);
    if (t->dim[i] <= 0 || t->stride[i] <= 0)
      return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: %s: dimension %u is %d, stride %d", api, name,
                  i, t->dim[i], t->stride[i]);
    elems *= t->dim[i];
    if (elems > INT_MAX)
      return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: %s has more than 2^31-1 elements", api, name);
  }
  t->type = type;
  t->nb = (int)dim->count;
  t->ptr = ptr;
  return CUDA_SUCCESS;
}

/* The bytes the tensor spans lie inside one allocation of the session.
 * The element offset of the last element stays below 2^62 (the dimensions'
 * product is below 2^31, so their sum of (dim - 1) is too, and strides are
 * below 2^31); the bytes may not, hence the checked multiply. */
static CUresult tensor_in_session(rgpu_worker *w, const char *api, const char *name,
                                  const dnn_tensor *t) {
  uint64_t last = 0, bytes;
  for (int i = 0; i < t->nb; i++) last += (uint64_t)(t->dim[i] - 1) * (uint64_t)t->stride[i];
  if (__builtin_mul_overflow(last + 1, (uint64_t)type_size(t->type), &bytes))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: %s spans more than 2^64 bytes", api, name);
  if (!rgpu_alloc_table_lookup(&w->allocs, t->ptr, bytes))
    return FAIL(CUDA_ERROR_INVALID_VALUE,
                "%s: %s (%llu bytes at 0x%llx) is not inside a device allocation of this session",
                api, name, (unsigned long long)bytes, (unsigned long long)t->ptr);
  return CUDA_SUCCESS;
}

static int same_dims(const dnn_tensor *a, const dnn_tensor *b) {
  return a->nb == b->nb && !memcmp(a->dim, b->dim, sizeof a->dim[0] * (size_t)a->nb);
}

static CUresult get_stream(rgpu_worker *w, uint64_t id, CUstream *out) {
  *out = NULL;
  if (id == 0) return CUDA_SUCCESS;
  const rgpu_handle_entry *e = rgpu_handle_map_get(&w->streams, id);
  if (!e) return FAIL(CUDA_ERROR_INVALID_HANDLE, "unknown stream id %llu", (unsigned long long)id);
  *out = (CUstream)e->ptr;
  return CUDA_SUCCESS;
}

static rgpu_cudnn_cpu_tensor cpu_tensor(const dnn_tensor *t) {
  rgpu_cudnn_cpu_tensor c = {.nb = t->nb, .base = (float *)(uintptr_t)t->ptr};
  memcpy(c.dim, t->dim, sizeof c.dim);
  memcpy(c.stride, t->stride, sizeof c.stride);
  return c;
}

/* ---- the convolution's shape ------------------------------------------------ */

/* dnn_conv: rgpu_handlers_cudnn.h */

/* The fields CUDNN_CONV_FWD and CUDNN_CONV_FWD_QUERY share, checked: the
 * filter and convolution valid, y's dimensions the output's (cuDNN's
 * formula). */
#define CONV_OF(w, api, q, c, xp, wp, yp)                                                    \
  conv_of(w, api, (q)->x_type, &(q)->x_dim, &(q)->x_stride, xp, (q)->w_type, (q)->w_format, \
          &(q)->w_dim, wp, &(q)->conv_pad, &(q)->conv_stride, &(q)->conv_dilation,          \
          (q)->conv_mode, (q)->conv_compute, (q)->conv_math, (q)->conv_groups, (q)->y_type, \
          &(q)->y_dim, &(q)->y_stride, yp, c)
static CUresult conv_of(rgpu_worker *w, const char *api, uint32_t x_type, const rgpu_array *x_dim,
                        const rgpu_array *x_stride, uint64_t x, uint32_t w_type, uint32_t w_format,
                        const rgpu_array *w_dim, uint64_t wp, const rgpu_array *pad,
                        const rgpu_array *stride, const rgpu_array *dil, uint32_t mode,
                        uint32_t compute, uint32_t math, int32_t groups, uint32_t y_type,
                        const rgpu_array *y_dim, const rgpu_array *y_stride, uint64_t y,
                        dnn_conv *c) {
  memset(c, 0, sizeof *c);
  CUresult r = tensor_of(w, api, "x", x_type, x_dim, x_stride, x, &c->x);
  if (!r) r = tensor_of(w, api, "y", y_type, y_dim, y_stride, y, &c->y);
  if (r) return r;
  int nb = c->x.nb, ns = nb - 2;
  if (w_dim->count != (uint32_t)nb || pad->count != (uint32_t)ns || stride->count != (uint32_t)ns ||
      dil->count != (uint32_t)ns || c->y.nb != nb || w_type != x_type || groups <= 0 ||
      mode > CUDNN_CROSS_CORRELATION || (w_format != CUDNN_TENSOR_NCHW && w_format != CUDNN_TENSOR_NHWC))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: the filter or convolution does not fit x", api);
  int64_t welems = 1;
  for (int i = 0; i < nb; i++) {
    c->w_dim[i] = rgpu_array_i32(w_dim, i);
    if (c->w_dim[i] <= 0) return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: a filter dimension is %d", api, c->w_dim[i]);
    welems *= c->w_dim[i];
    if (welems > INT_MAX) return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: the filter is too large", api);
  }
  for (int i = 0; i < ns; i++) {
    c->pad[i] = rgpu_array_i32(pad, i);
    c->stride[i] = rgpu_array_i32(stride, i);
    c->dilation[i] = rgpu_array_i32(dil, i);
    if (c->pad[i] < 0 || c->stride[i] <= 0 || c->dilation[i] <= 0)
      return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: padding, stride or dilation out of range", api);
  }
  if ((int64_t)c->w_dim[1] * groups != c->x.dim[1] || c->w_dim[0] % groups ||
      c->y.dim[0] != c->x.dim[0] || c->y.dim[1] != c->w_dim[0])
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: the channels of x, w and y do not agree", api);
  for (int i = 0; i < ns; i++) {
    int64_t span = (int64_t)(c->w_dim[i + 2] - 1) * c->dilation[i] + 1;
    int64_t room = (int64_t)c->x.dim[i + 2] + 2 * (int64_t)c->pad[i] - span;
    if (room < 0 || 1 + room / c->stride[i] != c->y.dim[i + 2])
      return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: y's dimension %d is not the output's", api, i + 2);
  }
  c->w_type = w_type;
  c->w_format = w_format;
  c->w = wp;
  c->nb_spatial = ns;
  c->mode = mode;
  c->compute = compute;
  c->math = math;
  c->groups = groups;
  return CUDA_SUCCESS;
}

/* ---- softgpu: host functions in stream order -------------------------------- */

/* One operation waiting on its stream: its own copy of what it needs. */
typedef struct {
  int op;
  rgpu_cudnn_cpu_conv conv;
  rgpu_cudnn_cpu_tensor a, b;
  int mode, algo;
  double coef, swish_beta, alpha, beta;
  int window[2], pad[2], stride[2];
} dnn_job;

enum { OP_CONV, OP_ADD, OP_ACT, OP_POOL, OP_SOFTMAX };

static void CUDA_CB run_cpu(void *arg) {
  dnn_job *j = arg;
  switch (j->op) {
    case OP_CONV: rgpu_cudnn_cpu_conv_fwd(&j->conv); break;
    case OP_ADD: rgpu_cudnn_cpu_add(&j->a, &j->b, j->alpha, j->beta); break;
    case OP_ACT:
      rgpu_cudnn_cpu_activation(&j->a, &j->b, j->mode, j->coef, j->swish_beta, j->alpha, j->beta);
      break;
    case OP_POOL:
      rgpu_cudnn_cpu_pooling(&j->a, &j->b, j->mode, j->window, j->pad, j->stride, j->alpha,
                             j->beta);
      break;
    default: rgpu_cudnn_cpu_softmax(&j->a, &j->b, j->algo, j->mode, j->alpha, j->beta); break;
  }
  free(j);
}

CUresult rgpu_cudnn_srv_host_launch(rgpu_worker *w, const char *api, CUstream st,
                                    void(CUDA_CB *fn)(void *), const void *tmpl, size_t size) {
  if (!D->cuLaunchHostFunc)
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s: this softgpu has no cuLaunchHostFunc", api);
  void *j = malloc(size);
  if (!j) return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory for a %s", api);
  memcpy(j, tmpl, size);
  CUresult r = D->cuLaunchHostFunc(st, fn, j);
  if (r != CUDA_SUCCESS) {
    free(j);
    return FAIL(r, "%s: cuLaunchHostFunc: %s", api, rgpu_driver_error_name(D, r));
  }
  return CUDA_SUCCESS;
}

static CUresult softgpu_launch(rgpu_worker *w, const char *api, CUstream st, const dnn_job *tmpl) {
  return rgpu_cudnn_srv_host_launch(w, api, st, run_cpu, tmpl, sizeof *tmpl);
}

static CUresult softgpu_float_only(rgpu_worker *w, const char *api, const dnn_tensor *a,
                                   const dnn_tensor *b) {
  if (a->type != CUDNN_DATA_FLOAT || b->type != CUDNN_DATA_FLOAT)
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s on softgpu: float tensors only (types %u, %u)", api,
                a->type, b->type);
  return CUDA_SUCCESS;
}

/* ---- a real GPU: NVIDIA's libcudnn, opened at run time ---------------------- */

#define RGPU_CUDNN_FUNCS(X)                                                                  \
  X(cudnnCreate) X(cudnnSetStream) X(cudnnCreateTensorDescriptor)                            \
  X(cudnnSetTensorNdDescriptor) X(cudnnDestroyTensorDescriptor) X(cudnnCreateFilterDescriptor) \
  X(cudnnSetFilterNdDescriptor) X(cudnnDestroyFilterDescriptor) X(cudnnDestroyOpTensorDescriptor)                              \
  X(cudnnCreateConvolutionDescriptor) X(cudnnSetConvolutionNdDescriptor)                     \
  X(cudnnSetConvolutionMathType) X(cudnnSetConvolutionGroupCount)                            \
  X(cudnnDestroyConvolutionDescriptor) X(cudnnCreateActivationDescriptor)                    \
  X(cudnnSetActivationDescriptor) X(cudnnSetActivationDescriptorSwishBeta)                   \
  X(cudnnDestroyActivationDescriptor) X(cudnnCreatePoolingDescriptor)                        \
  X(cudnnSetPoolingNdDescriptor) X(cudnnDestroyPoolingDescriptor) X(cudnnConvolutionForward) \
  X(cudnnAddTensor) X(cudnnTransformTensor) X(cudnnActivationForward) X(cudnnPoolingForward) X(cudnnSoftmaxForward)  \
  X(cudnnGetConvolutionForwardWorkspaceSize) X(cudnnGetConvolutionForwardAlgorithm_v7)       \
  X(cudnnFindConvolutionForwardAlgorithm)

static struct {
  int state; /* 0 not tried, 1 loaded, -1 failed */
  char err[512];
  void *lib; /* the dlopen() handle, for rgpu_cudnn_server_sym */
#define RGPU_CUDNN_FIELD(name) __typeof__(&name) name;
  RGPU_CUDNN_FUNCS(RGPU_CUDNN_FIELD)
#undef RGPU_CUDNN_FIELD
  /* One handle per context (cuDNN binds a handle to the context current at
   * its creation); a session is one process, so one handle serves every
   * client handle, its stream set per call. */
  struct {
    CUcontext ctx;
    cudnnHandle_t h;
  } ctxs[RGPU_MAX_DEVICES];
} g_dnn;

/* Opens path, refusing rgpu's own facade (found first when the loader's
 * path names rgpu's build/lib: the server would be a client of itself). */
static void *dnn_open(const char *path) {
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(g_dnn.err, sizeof g_dnn.err, "cannot open %s: %s", path, dlerror());
    return NULL;
  }
  if (dlsym(lib, "rgpu_cudnn_cudnnCreate")) {
    dlclose(lib);
    snprintf(g_dnn.err, sizeof g_dnn.err, "%s is rgpu's own facade, not NVIDIA's", path);
    return NULL;
  }
  return lib;
}

static int dnn_load(void) {
  if (g_dnn.state) return g_dnn.state;
  void *lib = dnn_open("libcudnn.so.9");
  if (!lib) {
    char path[600];
    const char *home = getenv("CUDA_HOME");
    snprintf(path, sizeof path, "%s/lib64/libcudnn.so.9", home && *home ? home : "/usr/local/cuda");
    if (!(lib = dnn_open(path))) return g_dnn.state = -1;
  }
#define RGPU_CUDNN_RESOLVE(name)                                             \
  if (!(*(void **)&g_dnn.name = dlsym(lib, #name))) {                        \
    snprintf(g_dnn.err, sizeof g_dnn.err, "libcudnn.so.9 has no %s", #name); \
    return g_dnn.state = -1;                                                 \
  }
  RGPU_CUDNN_FUNCS(RGPU_CUDNN_RESOLVE)
#undef RGPU_CUDNN_RESOLVE
  g_dnn.lib = lib;
  return g_dnn.state = 1;
}

void *rgpu_cudnn_server_sym(const char *name) {
  return dnn_load() > 0 ? dlsym(g_dnn.lib, name) : NULL;
}

/* A cuDNN status as the CUresult the client turns back into it. */
static CUresult status_cu(cudnnStatus_t st) {
  return st >= CUDNN_STATUS_NOT_SUPPORTED && st < CUDNN_STATUS_INTERNAL_ERROR
             ? CUDA_ERROR_NOT_SUPPORTED
         : st >= CUDNN_STATUS_BAD_PARAM && st < CUDNN_STATUS_NOT_SUPPORTED
             ? CUDA_ERROR_INVALID_VALUE
             : CUDA_ERROR_LAUNCH_FAILED;
}

static CUresult dnn_handle(rgpu_worker *w, const char *api, CUstream stream, cudnnHandle_t *out);
CUresult rgpu_cudnn_server_handle(rgpu_worker *w, const char *api, CUstream stream,
                                  cudnnHandle_t *out) {
  return dnn_handle(w, api, stream, out);
}

static CUresult dnn_handle(rgpu_worker *w, const char *api, CUstream stream, cudnnHandle_t *out) {
  if (dnn_load() < 0) return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s: %s", api, g_dnn.err);
  int dev = w->cur_dev < 0 ? 0 : w->cur_dev;
  CUcontext ctx = w->ctx[dev];
  if (g_dnn.ctxs[dev].ctx != ctx || !g_dnn.ctxs[dev].h) {
    /* A context recreated after a device reset needs a new handle. */
    g_dnn.ctxs[dev].h = NULL;
    cudnnStatus_t st = g_dnn.cudnnCreate(&g_dnn.ctxs[dev].h);
    if (st != CUDNN_STATUS_SUCCESS)
      return FAIL(CUDA_ERROR_NOT_INITIALIZED, "cudnnCreate: status %d", (int)st);
    g_dnn.ctxs[dev].ctx = ctx;
  }
  cudnnStatus_t st = g_dnn.cudnnSetStream(g_dnn.ctxs[dev].h, (cudaStream_t)stream);
  if (st != CUDNN_STATUS_SUCCESS) return FAIL(status_cu(st), "cudnnSetStream: status %d", (int)st);
  *out = g_dnn.ctxs[dev].h;
  return CUDA_SUCCESS;
}

typedef rgpu_cudnn_real dnn_real;

void rgpu_cudnn_real_free(rgpu_cudnn_real *r) {
  for (int i = 0; i < 5; i++)
    if (r->t[i]) g_dnn.cudnnDestroyTensorDescriptor(r->t[i]);
  if (r->f) g_dnn.cudnnDestroyFilterDescriptor(r->f);
  if (r->cv) g_dnn.cudnnDestroyConvolutionDescriptor(r->cv);
  if (r->act) g_dnn.cudnnDestroyActivationDescriptor(r->act);
  if (r->pool) g_dnn.cudnnDestroyPoolingDescriptor(r->pool);
  if (r->op) g_dnn.cudnnDestroyOpTensorDescriptor(r->op);
  memset(r, 0, sizeof *r);
}
#define real_free rgpu_cudnn_real_free

cudnnStatus_t rgpu_cudnn_real_tensor(const dnn_tensor *t, cudnnTensorDescriptor_t *out) {
  cudnnStatus_t st = g_dnn.cudnnCreateTensorDescriptor(out);
  if (!st) st = g_dnn.cudnnSetTensorNdDescriptor(*out, (cudnnDataType_t)t->type, t->nb, t->dim, t->stride);
  return st;
}

cudnnStatus_t rgpu_cudnn_real_conv(const dnn_conv *c, rgpu_cudnn_real *r) {
  cudnnStatus_t st = rgpu_cudnn_real_tensor(&c->x, &r->t[0]);
  if (!st) st = rgpu_cudnn_real_tensor(&c->y, &r->t[1]);
  if (!st) st = g_dnn.cudnnCreateFilterDescriptor(&r->f);
  if (!st)
    st = g_dnn.cudnnSetFilterNdDescriptor(r->f, (cudnnDataType_t)c->w_type,
                                          (cudnnTensorFormat_t)c->w_format, c->x.nb, c->w_dim);
  if (!st) st = g_dnn.cudnnCreateConvolutionDescriptor(&r->cv);
  if (!st)
    st = g_dnn.cudnnSetConvolutionNdDescriptor(r->cv, c->nb_spatial, c->pad, c->stride,
                                               c->dilation, (cudnnConvolutionMode_t)c->mode,
                                               (cudnnDataType_t)c->compute);
  if (!st) st = g_dnn.cudnnSetConvolutionMathType(r->cv, (cudnnMathType_t)c->math);
  if (!st) st = g_dnn.cudnnSetConvolutionGroupCount(r->cv, c->groups);
  return st;
}

rgpu_cudnn_scale rgpu_cudnn_scale_for(uint32_t type, double v) {
  rgpu_cudnn_scale s;
  if (type == CUDNN_DATA_DOUBLE) s.d = v;
  else s.f = (float)v;
  return s;
}
#define scale_for rgpu_cudnn_scale_for
#define real_tensor rgpu_cudnn_real_tensor
#define real_conv rgpu_cudnn_real_conv
typedef rgpu_cudnn_scale dnn_scale;

/* ---- the handlers ------------------------------------------------------------ */

CUresult rgpu_h_cudnn_conv_fwd(rgpu_req *rq, const rgpu_msg_cudnn_conv_fwd_req *q) {
  rgpu_worker *w = rq->w;
  const char *api = "cudnnConvolutionForward";
  dnn_conv c;
  CUresult r = CONV_OF(w, api, q, &c, q->x, q->w, q->y);
  if (r) return r;
  uint64_t wbytes = type_size(c.w_type);
  for (int i = 0; i < c.x.nb; i++) wbytes *= (uint64_t)c.w_dim[i];
  if ((r = tensor_in_session(w, api, "x", &c.x)) || (r = tensor_in_session(w, api, "y", &c.y)))
    return r;
  if (!rgpu_alloc_table_lookup(&w->allocs, q->w, wbytes))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: w (%llu bytes at 0x%llx) is not inside a device "
                "allocation of this session", api, (unsigned long long)wbytes,
                (unsigned long long)q->w);
  if (q->workspace_size && !rgpu_alloc_table_lookup(&w->allocs, q->workspace, q->workspace_size))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: the workspace (%llu bytes at 0x%llx) is not inside "
                "a device allocation of this session", api,
                (unsigned long long)q->workspace_size, (unsigned long long)q->workspace);
  CUstream st;
  if ((r = get_stream(w, q->stream, &st))) return r;
  if (D->is_softgpu) {
    if ((r = softgpu_float_only(w, api, &c.x, &c.y))) return r;
    if (c.x.nb != 4 || c.w_format != CUDNN_TENSOR_NCHW)
      return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s on softgpu: 2-d convolutions with NCHW filters "
                  "only", api);
    dnn_job j = {.op = OP_CONV,
                 .conv = {.x = cpu_tensor(&c.x), .y = cpu_tensor(&c.y),
                          .w = (const float *)(uintptr_t)q->w,
                          .w_dim = {c.w_dim[0], c.w_dim[1], c.w_dim[2], c.w_dim[3]},
                          .pad = {c.pad[0], c.pad[1]}, .stride = {c.stride[0], c.stride[1]},
                          .dilation = {c.dilation[0], c.dilation[1]}, .groups = c.groups,
                          .flip = c.mode == CUDNN_CONVOLUTION, .alpha = q->alpha, .beta = q->beta}};
    return softgpu_launch(w, api, st, &j);
  }
  cudnnHandle_t h;
  if ((r = dnn_handle(w, api, st, &h))) return r;
  dnn_real real = {0};
  cudnnStatus_t s = real_conv(&c, &real);
  dnn_scale al = scale_for(c.y.type, q->alpha), be = scale_for(c.y.type, q->beta);
  if (!s)
    s = g_dnn.cudnnConvolutionForward(h, &al, real.t[0], (const void *)(uintptr_t)q->x, real.f,
                                      (const void *)(uintptr_t)q->w, real.cv,
                                      (cudnnConvolutionFwdAlgo_t)q->algo,
                                      (void *)(uintptr_t)q->workspace, q->workspace_size, &be,
                                      real.t[1], (void *)(uintptr_t)q->y);
  real_free(&real);
  return s ? FAIL(status_cu(s), "%s: status %d", api, (int)s) : CUDA_SUCCESS;
}

CUresult rgpu_h_cudnn_add_tensor(rgpu_req *rq, const rgpu_msg_cudnn_add_tensor_req *q) {
  rgpu_worker *w = rq->w;
  const char *api = q->transform ? "cudnnTransformTensor" : "cudnnAddTensor";
  dnn_tensor a, c;
  CUresult r = tensor_of(w, api, "A", q->a_type, &q->a_dim, &q->a_stride, q->a, &a);
  if (!r) r = tensor_of(w, api, "C", q->c_type, &q->c_dim, &q->c_stride, q->c, &c);
  if (r) return r;
  if (a.nb != c.nb || a.type != c.type)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: A and C differ in rank or type", api);
  for (int i = 0; i < a.nb; i++)
    if (a.dim[i] != c.dim[i] && (q->transform || a.dim[i] != 1))
      return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: A's dimension %d is not C's%s", api, i,
                  q->transform ? "" : " nor 1");
  if ((r = tensor_in_session(w, api, "A", &a)) || (r = tensor_in_session(w, api, "C", &c))) return r;
  CUstream st;
  if ((r = get_stream(w, q->stream, &st))) return r;
  if (D->is_softgpu) {
    if ((r = softgpu_float_only(w, api, &a, &c))) return r;
    dnn_job j = {.op = OP_ADD, .a = cpu_tensor(&a), .b = cpu_tensor(&c), .alpha = q->alpha,
                 .beta = q->beta};
    return softgpu_launch(w, api, st, &j);
  }
  cudnnHandle_t h;
  if ((r = dnn_handle(w, api, st, &h))) return r;
  dnn_real real = {0};
  cudnnStatus_t s = real_tensor(&a, &real.t[0]);
  if (!s) s = real_tensor(&c, &real.t[1]);
  dnn_scale al = scale_for(c.type, q->alpha), be = scale_for(c.type, q->beta);
  if (!s)
    s = q->transform ? g_dnn.cudnnTransformTensor(h, &al, real.t[0], (const void *)(uintptr_t)q->a,
                                                  &be, real.t[1], (void *)(uintptr_t)q->c)
                     : g_dnn.cudnnAddTensor(h, &al, real.t[0], (const void *)(uintptr_t)q->a, &be,
                                            real.t[1], (void *)(uintptr_t)q->c);
  real_free(&real);
  return s ? FAIL(status_cu(s), "%s: status %d", api, (int)s) : CUDA_SUCCESS;
}

/* x and y of one shape, both in the session. */
static CUresult xy_of(rgpu_worker *w, const char *api, uint32_t xt, const rgpu_array *xd,
                      const rgpu_array *xs, uint64_t x, uint32_t yt, const rgpu_array *yd,
                      const rgpu_array *ys, uint64_t y, int same, dnn_tensor *X, dnn_tensor *Y) {
  CUresult r = tensor_of(w, api, "x", xt, xd, xs, x, X);
  if (!r) r = tensor_of(w, api, "y", yt, yd, ys, y, Y);
  if (r) return r;
  if (X->type != Y->type || (same && !same_dims(X, Y)) || X->nb != Y->nb)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: x and y differ in shape or type", api);
  if ((r = tensor_in_session(w, api, "x", X)) || (r = tensor_in_session(w, api, "y", Y))) return r;
  return CUDA_SUCCESS;
}

CUresult rgpu_h_cudnn_activation_fwd(rgpu_req *rq, const rgpu_msg_cudnn_activation_fwd_req *q) {
  rgpu_worker *w = rq->w;
  const char *api = "cudnnActivationForward";
  dnn_tensor x, y;
  CUresult r = xy_of(w, api, q->x_type, &q->x_dim, &q->x_stride, q->x, q->y_type, &q->y_dim,
                     &q->y_stride, q->y, 1, &x, &y);
  if (r) return r;
  if (q->act_mode > CUDNN_ACTIVATION_SWISH || q->act_nan > CUDNN_PROPAGATE_NAN)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: activation mode %u", api, q->act_mode);
  CUstream st;
  if ((r = get_stream(w, q->stream, &st))) return r;
  if (D->is_softgpu) {
    if ((r = softgpu_float_only(w, api, &x, &y))) return r;
    dnn_job j = {.op = OP_ACT, .a = cpu_tensor(&x), .b = cpu_tensor(&y), .mode = (int)q->act_mode,
                 .coef = q->act_coef, .swish_beta = q->act_swish_beta, .alpha = q->alpha,
                 .beta = q->beta};
    return softgpu_launch(w, api, st, &j);
  }
  cudnnHandle_t h;
  if ((r = dnn_handle(w, api, st, &h))) return r;
  dnn_real real = {0};
  cudnnStatus_t s = real_tensor(&x, &real.t[0]);
  if (!s) s = real_tensor(&y, &real.t[1]);
  if (!s) s = g_dnn.cudnnCreateActivationDescriptor(&real.act);
  if (!s)
    s = g_dnn.cudnnSetActivationDescriptor(real.act, (cudnnActivationMode_t)q->act_mode,
                                           (cudnnNanPropagation_t)q->act_nan, q->act_coef);
  if (!s && q->act_mode == CUDNN_ACTIVATION_SWISH)
    s = g_dnn.cudnnSetActivationDescriptorSwishBeta(real.act, q->act_swish_beta);
  dnn_scale al = scale_for(y.type, q->alpha), be = scale_for(y.type, q->beta);
  if (!s)
    s = g_dnn.cudnnActivationForward(h, real.act, &al, real.t[0], (const void *)(uintptr_t)q->x,
                                     &be, real.t[1], (void *)(uintptr_t)q->y);
  real_free(&real);
  return s ? FAIL(status_cu(s), "%s: status %d", api, (int)s) : CUDA_SUCCESS;
}

CUresult rgpu_h_cudnn_pooling_fwd(rgpu_req *rq, const rgpu_msg_cudnn_pooling_fwd_req *q) {
  rgpu_worker *w = rq->w;
  const char *api = "cudnnPoolingForward";
  dnn_tensor x, y;
  CUresult r = xy_of(w, api, q->x_type, &q->x_dim, &q->x_stride, q->x, q->y_type, &q->y_dim,
                     &q->y_stride, q->y, 0, &x, &y);
  if (r) return r;
  int ns = x.nb - 2, win[6], pad[6], str[6];
  if (q->pool_window.count != (uint32_t)ns || q->pool_pad.count != (uint32_t)ns ||
      q->pool_stride.count != (uint32_t)ns || q->pool_mode > CUDNN_POOLING_MAX_DETERMINISTIC ||
      q->pool_nan > CUDNN_PROPAGATE_NAN || y.dim[0] != x.dim[0] || y.dim[1] != x.dim[1])
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: the pooling does not fit x and y", api);
  for (int i = 0; i < ns; i++) {
    win[i] = rgpu_array_i32(&q->pool_window, i);
    pad[i] = rgpu_array_i32(&q->pool_pad, i);
    str[i] = rgpu_array_i32(&q->pool_stride, i);
    int64_t room = (int64_t)x.dim[i + 2] + 2 * (int64_t)pad[i] - win[i];
    if (win[i] <= 0 || pad[i] < 0 || str[i] <= 0 || room < 0 || 1 + room / str[i] != y.dim[i + 2])
      return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: y's dimension %d is not the output's", api, i + 2);
  }
  CUstream st;
  if ((r = get_stream(w, q->stream, &st))) return r;
  if (D->is_softgpu) {
    if ((r = softgpu_float_only(w, api, &x, &y))) return r;
    if (ns != 2) return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s on softgpu: 2-d pooling only", api);
    dnn_job j = {.op = OP_POOL, .a = cpu_tensor(&x), .b = cpu_tensor(&y), .mode = (int)q->pool_mode,
                 .window = {win[0], win[1]}, .pad = {pad[0], pad[1]}, .stride = {str[0], str[1]},
                 .alpha = q->alpha, .beta = q->beta};
    return softgpu_launch(w, api, st, &j);
  }
  cudnnHandle_t h;
  if ((r = dnn_handle(w, api, st, &h))) return r;
  dnn_real real = {0};
  cudnnStatus_t s = real_tensor(&x, &real.t[0]);
  if (!s) s = real_tensor(&y, &real.t[1]);
  if (!s) s = g_dnn.cudnnCreatePoolingDescriptor(&real.pool);
  if (!s)
    s = g_dnn.cudnnSetPoolingNdDescriptor(real.pool, (cudnnPoolingMode_t)q->pool_mode,
                                          (cudnnNanPropagation_t)q->pool_nan, ns, win, pad, str);
  dnn_scale al = scale_for(y.type, q->alpha), be = scale_for(y.type, q->beta);
  if (!s)
    s = g_dnn.cudnnPoolingForward(h, real.pool, &al, real.t[0], (const void *)(uintptr_t)q->x,
                                  &be, real.t[1], (void *)(uintptr_t)q->y);
  real_free(&real);
  return s ? FAIL(status_cu(s), "%s: status %d", api, (int)s) : CUDA_SUCCESS;
}

CUresult rgpu_h_cudnn_softmax_fwd(rgpu_req *rq, const rgpu_msg_cudnn_softmax_fwd_req *q) {
  rgpu_worker *w = rq->w;
  const char *api = "cudnnSoftmaxForward";
  dnn_tensor x, y;
  CUresult r = xy_of(w, api, q->x_type, &q->x_dim, &q->x_stride, q->x, q->y_type, &q->y_dim,
                     &q->y_stride, q->y, 1, &x, &y);
  if (r) return r;
  if (q->softmax_algo > CUDNN_SOFTMAX_LOG || q->softmax_mode > CUDNN_SOFTMAX_MODE_CHANNEL)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: algorithm %u, mode %u", api, q->softmax_algo,
                q->softmax_mode);
  CUstream st;
  if ((r = get_stream(w, q->stream, &st))) return r;
  if (D->is_softgpu) {
    if ((r = softgpu_float_only(w, api, &x, &y))) return r;
    dnn_job j = {.op = OP_SOFTMAX, .a = cpu_tensor(&x), .b = cpu_tensor(&y),
                 .algo = (int)q->softmax_algo, .mode = (int)q->softmax_mode, .alpha = q->alpha,
                 .beta = q->beta};
    return softgpu_launch(w, api, st, &j);
  }
  cudnnHandle_t h;
  if ((r = dnn_handle(w, api, st, &h))) return r;
  dnn_real real = {0};
  cudnnStatus_t s = real_tensor(&x, &real.t[0]);
  if (!s) s = real_tensor(&y, &real.t[1]);
  dnn_scale al = scale_for(y.type, q->alpha), be = scale_for(y.type, q->beta);
  if (!s)
    s = g_dnn.cudnnSoftmaxForward(h, (cudnnSoftmaxAlgorithm_t)q->softmax_algo,
                                  (cudnnSoftmaxMode_t)q->softmax_mode, &al, real.t[0],
                                  (const void *)(uintptr_t)q->x, &be, real.t[1],
                                  (void *)(uintptr_t)q->y);
  real_free(&real);
  return s ? FAIL(status_cu(s), "%s: status %d", api, (int)s) : CUDA_SUCCESS;
}

#define QUERY_MAX 16

CUresult rgpu_h_cudnn_conv_fwd_query(rgpu_req *rq, const rgpu_msg_cudnn_conv_fwd_query_req *q) {
  rgpu_worker *w = rq->w;
  const char *api = "cudnn convolution algorithm query";
  dnn_conv c;
  CUresult r = CONV_OF(w, api, q, &c, 0, 0, 0);
  if (r) return r;
  if (q->query > 2 || q->requested < 1 || q->algo >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: query %u for %u results", api, q->query,
                q->requested);
  uint32_t n = q->query == 0 ? 1 : q->requested < QUERY_MAX ? q->requested : QUERY_MAX;
  uint32_t algo[QUERY_MAX], status[QUERY_MAX], time[QUERY_MAX], det[QUERY_MAX], math[QUERY_MAX];
  uint64_t mem[QUERY_MAX];
  if (D->is_softgpu) {
    /* One algorithm: softgpu's convolution ignores the choice and needs no
     * workspace; any algorithm asked about needs none either. */
    float zero = 0;
    algo[0] = q->query == 0 ? q->algo : CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
    status[0] = CUDNN_STATUS_SUCCESS;
    memcpy(&time[0], &zero, sizeof zero);
    mem[0] = 0;
    det[0] = CUDNN_DETERMINISTIC;
    math[0] = c.math;
    n = 1;
  } else {
    CUstream st = NULL;
    cudnnHandle_t h;
    if ((r = dnn_handle(w, api, st, &h))) return r;
    dnn_real real = {0};
    cudnnStatus_t s = real_conv(&c, &real);
    cudnnConvolutionFwdAlgoPerf_t perf[QUERY_MAX];
    int got = 0;
    if (!s && q->query == 0) {
      size_t bytes = 0;
      cudnnStatus_t ws = g_dnn.cudnnGetConvolutionForwardWorkspaceSize(
          h, real.t[0], real.f, real.cv, real.t[1], (cudnnConvolutionFwdAlgo_t)q->algo, &bytes);
      /* An algorithm that does not fit the shape is an answer, not a
       * failure of the query. */
      memset(&perf[0], 0, sizeof perf[0]);
      perf[0].algo = (cudnnConvolutionFwdAlgo_t)q->algo;
      perf[0].status = ws;
      perf[0].memory = bytes;
      got = 1;
    } else if (!s && q->query == 1) {
      s = g_dnn.cudnnGetConvolutionForwardAlgorithm_v7(h, real.t[0], real.f, real.cv, real.t[1],
                                                        (int)n, &got, perf);
    } else if (!s) {
      s = g_dnn.cudnnFindConvolutionForwardAlgorithm(h, real.t[0], real.f, real.cv, real.t[1],
                                                     (int)n, &got, perf);
    }
    real_free(&real);
    if (s) return FAIL(status_cu(s), "%s: status %d", api, (int)s);
    n = got < 0 ? 0 : (uint32_t)got > n ? n : (uint32_t)got;
    for (uint32_t i = 0; i < n; i++) {
      algo[i] = (uint32_t)perf[i].algo;
      status[i] = (uint32_t)perf[i].status;
      memcpy(&time[i], &perf[i].time, sizeof time[i]);
      mem[i] = perf[i].memory;
      det[i] = (uint32_t)perf[i].determinism;
      math[i] = (uint32_t)perf[i].mathType;
    }
  }
  rgpu_msg_cudnn_conv_fwd_query_rep rep = {.algo = {algo, n}, .status = {status, n},
                                           .time = {time, n}, .memory = {mem, n},
                                           .determinism = {det, n}, .math = {math, n}};
  rgpu_msg_cudnn_conv_fwd_query_rep_encode(rq->rep, &rep);
  return CUDA_SUCCESS;
}

/* ---- shared with the other legacy handlers (rgpu_handlers_cudnn_bwd.c,
 * _lrn.c, _reduce.c): the same checks, one definition ---------------------- */

size_t rgpu_cudnn_srv_type_size(uint32_t type) { return type_size(type); }

CUresult rgpu_cudnn_srv_tensor(rgpu_worker *w, const char *api, const char *name, uint32_t type,
                               const rgpu_array *dim, const rgpu_array *stride, uint64_t ptr,
                               dnn_tensor *t) {
  return tensor_of(w, api, name, type, dim, stride, ptr, t);
}

CUresult rgpu_cudnn_srv_in_session(rgpu_worker *w, const char *api, const char *name,
                                   const dnn_tensor *t) {
  return tensor_in_session(w, api, name, t);
}

CUresult rgpu_cudnn_srv_stream(rgpu_worker *w, uint64_t id, CUstream *out) {
  return get_stream(w, id, out);
}

CUresult rgpu_cudnn_srv_conv(rgpu_worker *w, const char *api, uint32_t x_type,
                             const rgpu_array *x_dim, const rgpu_array *x_stride, uint64_t x,
                             uint32_t w_type, uint32_t w_format, const rgpu_array *w_dim,
                             uint64_t wp, const rgpu_array *pad, const rgpu_array *stride,
                             const rgpu_array *dil, uint32_t mode, uint32_t compute, uint32_t math,
                             int32_t groups, uint32_t y_type, const rgpu_array *y_dim,
                             const rgpu_array *y_stride, uint64_t y, dnn_conv *c) {
  return conv_of(w, api, x_type, x_dim, x_stride, x, w_type, w_format, w_dim, wp, pad, stride,
                 dil, mode, compute, math, groups, y_type, y_dim, y_stride, y, c);
}

rgpu_cudnn_cpu_tensor rgpu_cudnn_srv_cpu_tensor(const dnn_tensor *t) { return cpu_tensor(t); }

CUresult rgpu_cudnn_srv_status(cudnnStatus_t st) { return status_cu(st); }
