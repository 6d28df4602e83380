/* cuBLASLt requests (issue 16): CUBLASLT_MATMUL and CUBLASLT_HEURISTIC.
 *
 * The client keeps cuBLASLt's handle and descriptors; each request carries
 * the matmul descriptor's attributes rgpu supports and the four layouts.
 * On a real GPU the worker dlopen()s NVIDIA's libcublasLt.so.13 (never
 * linked: a host without it still serves everything else), builds real
 * descriptors for the request and calls it on the request's stream.  On
 * softgpu, whose device addresses are host addresses of this process, the
 * matmul runs as a host function on the stream (cuLaunchHostFunc, so it is
 * ordered with kernels and copies): operands widened to double, one
 * OpenBLAS dgemm, the epilogue, D rounded once to its type; the heuristic
 * answers one synthetic algorithm that needs no workspace.
 *
 * Everything the client sends is checked again here (types, shapes,
 * orders, and every device pointer with its extent against the session's
 * allocations) before anything is touched. */
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>

#include "rgpu_cublaslt_shape.h"
#include "rgpu_dispatch.h"
#include "rgpu_half.h"
#include "rgpu_log.h"
#include "rgpu_worker_internal.h"

#define D (&w->drv)
#define FAIL(status, ...) rgpu_worker_fail(w, (status), __VA_ARGS__)

/* ---- the request's shape, from either message ------------------------------ */

typedef struct {
  uint32_t type, order;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch;
  int64_t stride;
} lt_layout;

typedef struct {
  uint32_t compute, scale, pointer_mode, transa, transb, epilogue;
  int32_t bias_type;
  uint64_t bias;
  int64_t bias_stride;
  lt_layout l[4]; /* A, B, C, D */
  uint64_t m, n, k;
} lt_shape;

#define LT_LAYOUT_OF(q, x) \
  ((lt_layout){(q)->x##_type, (q)->x##_order, (q)->x##_rows, (q)->x##_cols, (q)->x##_ld, \
               (q)->x##_batch, (q)->x##_stride})
#define LT_SHAPE_OF(q)                                                                        \
  ((lt_shape){.compute = (q)->compute, .scale = (q)->scale, .pointer_mode = (q)->pointer_mode, \
              .transa = (q)->transa, .transb = (q)->transb, .epilogue = (q)->epilogue,         \
              .bias_type = (q)->bias_type, .bias = (q)->bias, .bias_stride = (q)->bias_stride, \
              .l = {LT_LAYOUT_OF(q, a), LT_LAYOUT_OF(q, b), LT_LAYOUT_OF(q, c),                \
                    LT_LAYOUT_OF(q, d)}})

static const char k_names[4] = {'A', 'B', 'C', 'D'};

/* The client's checks again (rgpu_cublaslt_matmul.c), and m, n, k. */
static CUresult shape_check(rgpu_worker *w, const char *what, lt_shape *s) {
  for (int i = 0; i < 4; i++) {
    const lt_layout *l = &s->l[i];
    if (l->order != CUBLASLT_ORDER_COL && l->order != CUBLASLT_ORDER_ROW)
      return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s: %c's order %u (column- or row-major only)", what,
                  k_names[i], l->order);
    if (l->rows > INT32_MAX || l->cols > INT32_MAX || l->ld < 0 || l->ld > INT32_MAX ||
        (uint64_t)l->ld < rgpu_cublaslt_min_ld(l->order, l->rows, l->cols) || l->batch < 1 ||
        l->stride < 0)
      return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: %c's layout (%llu x %llu, ld %lld, batch %d, "
                  "stride %lld) is not valid or beyond 2^31-1", what, k_names[i],
                  (unsigned long long)l->rows, (unsigned long long)l->cols, (long long)l->ld,
                  (int)l->batch, (long long)l->stride);
  }
  if (s->transa > CUBLAS_OP_C || s->transb > CUBLAS_OP_C || s->pointer_mode > 1)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: bad operation or pointer mode", what);
  const lt_layout *A = &s->l[0], *B = &s->l[1], *C = &s->l[2], *Dl = &s->l[3];
  s->m = Dl->rows;
  s->n = Dl->cols;
  s->k = s->transa == CUBLAS_OP_N ? A->cols : A->rows;
  if ((s->transa == CUBLAS_OP_N ? A->rows : A->cols) != s->m ||
      (s->transb == CUBLAS_OP_N ? B->rows : B->cols) != s->k ||
      (s->transb == CUBLAS_OP_N ? B->cols : B->rows) != s->n || C->rows != s->m ||
      C->cols != s->n)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: the layouts' sizes do not make a matmul", what);
  if (A->batch != Dl->batch || B->batch != Dl->batch || C->batch != Dl->batch)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: the layouts' batch counts differ", what);
  int scale = A->type == B->type && C->type == Dl->type && s->compute
                  ? rgpu_cublas_gemm_scale_type(A->type, B->type, C->type, s->compute)
                  : -1;
  if (scale < 0 || (uint32_t)scale != s->scale)
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s: types A %u, B %u, C %u, D %u, compute %u, scale %u "
                "are not supported", what, A->type, B->type, C->type, Dl->type, s->compute,
                s->scale);
  if (!rgpu_cublaslt_epilogue_ok(s->epilogue))
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s: epilogue %u is not supported", what, s->epilogue);
  if (s->bias_type != -1 && (uint32_t)s->bias_type != Dl->type)
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s: bias type %d with D of type %u", what,
                (int)s->bias_type, Dl->type);
  return CUDA_SUCCESS;
}

/* `batch` matrices of layout l, `stride` elements apart, from ptr: all in
 * one allocation of the session. */
static CUresult check_matrix(rgpu_worker *w, int which, uint64_t ptr, const lt_layout *l) {
  uint64_t span, step, total;
  size_t elem = rgpu_cublas_type_size(l->type);
  if (rgpu_cublaslt_span(l->order, l->rows, l->cols, l->ld, &span) ||
      __builtin_mul_overflow((uint64_t)(l->batch - 1), (uint64_t)l->stride, &step) ||
      __builtin_add_overflow(step, span, &total) || __builtin_mul_overflow(total, elem, &total))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cublasLtMatmul: %c's size overflows", k_names[which]);
  if (span == 0) return CUDA_SUCCESS;
  if (!rgpu_alloc_table_lookup(&w->allocs, ptr, total))
    return FAIL(CUDA_ERROR_INVALID_VALUE,
                "cublasLtMatmul: %c (%llu bytes at 0x%llx) is not inside a device allocation of "
                "this session", k_names[which], (unsigned long long)total,
                (unsigned long long)ptr);
  return CUDA_SUCCESS;
}

static CUresult check_span(rgpu_worker *w, const char *name, uint64_t ptr, uint64_t bytes) {
  if (!rgpu_alloc_table_lookup(&w->allocs, ptr, bytes))
    return FAIL(CUDA_ERROR_INVALID_VALUE,
                "cublasLtMatmul: %s (%llu bytes at 0x%llx) is not inside a device allocation of "
                "this session", name, (unsigned long long)bytes, (unsigned long long)ptr);
  return CUDA_SUCCESS;
}

static uint32_t bias_type_of(const lt_shape *s) {
  return s->bias_type == -1 ? s->l[3].type : (uint32_t)s->bias_type;
}

/* Every pointer the matmul touches, with its extent. */
static CUresult check_pointers(rgpu_worker *w, const rgpu_msg_cublaslt_matmul_req *q,
                               const lt_shape *s) {
  int dev_scalars = s->pointer_mode == CUBLASLT_POINTER_MODE_DEVICE;
  CUresult r = CUDA_SUCCESS;
  if (s->k) r = check_matrix(w, 0, q->a, &s->l[0]);
  if (!r && s->k) r = check_matrix(w, 1, q->b, &s->l[1]);
  /* C is read only when beta may be nonzero (cuBLASLt does not read it
   * otherwise). */
  if (!r && (dev_scalars || q->beta != 0)) r = check_matrix(w, 2, q->c, &s->l[2]);
  if (!r) r = check_matrix(w, 3, q->d, &s->l[3]);
  if (r) return r;
  size_t se = rgpu_cublas_type_size(s->scale);
  if (dev_scalars && ((r = check_span(w, "alpha", q->alpha_dev, se)) ||
                      (r = check_span(w, "beta", q->beta_dev, se))))
    return r;
  if (rgpu_cublaslt_epilogue_has_bias(s->epilogue)) {
    uint64_t n, bytes;
    if (s->bias_stride < 0 ||
        __builtin_mul_overflow((uint64_t)(s->l[3].batch - 1), (uint64_t)s->bias_stride, &n) ||
        __builtin_add_overflow(n, s->m, &n) ||
        __builtin_mul_overflow(n, rgpu_cublas_type_size(bias_type_of(s)), &bytes))
      return FAIL(CUDA_ERROR_INVALID_VALUE, "cublasLtMatmul: the bias' size overflows");
    if ((r = check_span(w, "the bias", q->bias, bytes))) return r;
  }
  if (q->workspace_size && (r = check_span(w, "the workspace", q->workspace, q->workspace_size)))
    return r;
  return CUDA_SUCCESS;
}

static CUresult get_stream(rgpu_worker *w, uint64_t id, CUstream *out) {
  *out = NULL;
  if (id == 0) return CUDA_SUCCESS;
  const rgpu_handle_entry *e = rgpu_handle_map_get(&w->streams, id);
  if (!e) return FAIL(CUDA_ERROR_INVALID_HANDLE, "unknown stream id %llu", (unsigned long long)id);
  *out = (CUstream)e->ptr;
  return CUDA_SUCCESS;
}

/* ---- softgpu: OpenBLAS in stream order -------------------------------------- */

/* OpenBLAS is opened at run time (only softgpu needs it, and a GPU host
 * without it must still run the server); its CBLAS dgemm is declared here
 * by hand so the server needs no cblas.h.  The enum values are CBLAS's
 * (the reference C interface fixes them). */
enum { LT_CBLAS_COL_MAJOR = 102, LT_CBLAS_NO_TRANS = 111 };
typedef void (*lt_dgemm_fn)(int order, int transa, int transb, int m, int n, int k, double alpha,
                            const double *a, int lda, const double *b, int ldb, double beta,
                            double *c, int ldc);
static struct {
  int state; /* 0 not tried, 1 loaded, -1 failed */
  char err[512];
  lt_dgemm_fn dgemm;
} g_openblas;

static int openblas_load(void) {
  if (g_openblas.state) return g_openblas.state;
  void *lib = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(g_openblas.err, sizeof g_openblas.err,
             "cannot open libopenblas.so.0 (Debian libopenblas0): %s", dlerror());
    return g_openblas.state = -1;
  }
  *(void **)&g_openblas.dgemm = dlsym(lib, "cblas_dgemm");
  if (!g_openblas.dgemm) {
    snprintf(g_openblas.err, sizeof g_openblas.err, "libopenblas.so.0 has no cblas_dgemm");
    return g_openblas.state = -1;
  }
  return g_openblas.state = 1;
}

static double load_elem(uint32_t t, const void *base, uint64_t i) {
  switch (t) {
    case CUDA_R_16F: return rgpu_half_to_float(((const uint16_t *)base)[i]);
    case CUDA_R_16BF: return rgpu_bf16_to_float(((const uint16_t *)base)[i]);
    case CUDA_R_32F: return ((const float *)base)[i];
    default: return ((const double *)base)[i];
  }
}

static void store_elem(uint32_t t, void *base, uint64_t i, double v) {
  switch (t) {
    case CUDA_R_16F: ((uint16_t *)base)[i] = rgpu_float_to_half((float)v); break;
    case CUDA_R_16BF: ((uint16_t *)base)[i] = rgpu_float_to_bf16((float)v); break;
    case CUDA_R_32F: ((float *)base)[i] = (float)v; break;
    default: ((double *)base)[i] = v; break;
  }
}

/* Matrix `b` of the batch of layout l at base, element (r, c). */
static double mat_get(const lt_layout *l, uint64_t base, int64_t b, uint64_t r, uint64_t c) {
  size_t es = rgpu_cublas_type_size(l->type);
  const char *p = (const char *)(uintptr_t)base + (size_t)(b * l->stride) * es;
  return load_elem(l->type, p, rgpu_cublaslt_index(l->order, l->ld, r, c));
}

/* GELU as cuBLASLt's epilogue computes it: the tanh approximation. */
static double gelu(double x) {
  const double k = 0.7978845608028654; /* sqrt(2/pi) */
  return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
}

/* One matmul waiting on its stream (its own copy of the request; the algo
 * bytes, which softgpu ignores, are not kept). */
typedef struct {
  rgpu_msg_cublaslt_matmul_req q;
  lt_shape s;
} lt_job;

static void cpu_matmul_one(const lt_job *j, int64_t b, double alpha, double beta) {
  const lt_shape *s = &j->s;
  const rgpu_msg_cublaslt_matmul_req *q = &j->q;
  uint64_t m = s->m, n = s->n, k = s->k;
  double *a = malloc(sizeof(double) * (m * k + 1));
  double *bm = malloc(sizeof(double) * (k * n + 1));
  double *c = malloc(sizeof(double) * (m * n + 1));
  if (!a || !bm || !c) {
    /* A host function cannot fail its stream: the matmul is skipped, loudly. */
    RGPU_ERROR("cublasLtMatmul on softgpu: out of memory for a %llux%llux%llu matmul; D is "
               "unchanged", (unsigned long long)m, (unsigned long long)n, (unsigned long long)k);
    goto out;
  }
  /* op(A) (m x k) and op(B) (k x n) packed column-major: the transposes
   * and orders are resolved here, so one NoTrans dgemm follows. */
  for (uint64_t p = 0; p < k; p++)
    for (uint64_t i = 0; i < m; i++)
      a[p * m + i] = s->transa == CUBLAS_OP_N ? mat_get(&s->l[0], q->a, b, i, p)
                                              : mat_get(&s->l[0], q->a, b, p, i);
  for (uint64_t jn = 0; jn < n; jn++)
    for (uint64_t p = 0; p < k; p++)
      bm[jn * k + p] = s->transb == CUBLAS_OP_N ? mat_get(&s->l[1], q->b, b, p, jn)
                                                : mat_get(&s->l[1], q->b, b, jn, p);
  for (uint64_t jn = 0; jn < n; jn++)
    for (uint64_t i = 0; i < m; i++)
      c[jn * m + i] = beta != 0 ? mat_get(&s->l[2], q->c, b, i, jn) : 0;
  if (k)
    g_openblas.dgemm(LT_CBLAS_COL_MAJOR, LT_CBLAS_NO_TRANS, LT_CBLAS_NO_TRANS, (int)m, (int)n,
                     (int)k, alpha, a, (int)m, bm, (int)k, beta, c, (int)m);
  else
    for (uint64_t i = 0; i < m * n; i++) c[i] *= beta;
  /* The epilogue: bias (per row of D), then the activation; D rounded once. */
  uint32_t bt = bias_type_of(s);
  const char *bias = rgpu_cublaslt_epilogue_has_bias(s->epilogue)
                         ? (const char *)(uintptr_t)q->bias +
                               (size_t)(b * s->bias_stride) * rgpu_cublas_type_size(bt)
                         : NULL;
  uint32_t act = s->epilogue & (CUBLASLT_EPILOGUE_RELU | CUBLASLT_EPILOGUE_GELU);
  const lt_layout *Dl = &s->l[3];
  char *dbase = (char *)(uintptr_t)q->d + (size_t)(b * Dl->stride) * rgpu_cublas_type_size(Dl->type);
  for (uint64_t jn = 0; jn < n; jn++)
    for (uint64_t i = 0; i < m; i++) {
      double x = c[jn * m + i];
      if (bias) x += load_elem(bt, bias, i);
      if (act == CUBLASLT_EPILOGUE_RELU) x = x > 0 ? x : 0;
      else if (act == CUBLASLT_EPILOGUE_GELU) x = gelu(x);
      store_elem(Dl->type, dbase, rgpu_cublaslt_index(Dl->order, Dl->ld, i, jn), x);
    }
out:
  free(a);
  free(bm);
  free(c);
}

static void CUDA_CB run_cpu_matmul(void *arg) {
  lt_job *j = arg;
  /* softgpu's device addresses are this process's host addresses: device
   * scalars are read here, when the stream reaches the matmul. */
  int dev = j->s.pointer_mode == CUBLASLT_POINTER_MODE_DEVICE;
  double alpha = dev ? load_elem(j->s.scale, (void *)(uintptr_t)j->q.alpha_dev, 0) : j->q.alpha;
  double beta = dev ? load_elem(j->s.scale, (void *)(uintptr_t)j->q.beta_dev, 0) : j->q.beta;
  for (int64_t b = 0; b < j->s.l[3].batch; b++) cpu_matmul_one(j, b, alpha, beta);
  free(j);
}

static CUresult matmul_softgpu(rgpu_worker *w, const rgpu_msg_cublaslt_matmul_req *q,
                               const lt_shape *s, CUstream st) {
  if (openblas_load() < 0)
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "cublasLtMatmul on softgpu: %s", g_openblas.err);
  if (!D->cuLaunchHostFunc)
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "cublasLtMatmul: this softgpu has no cuLaunchHostFunc");
  /* The packed double copies the host function allocates (the pointer
   * checks already bound them by the operands' allocations; this keeps
   * their sizes from wrapping whatever those are). */
  uint64_t t;
  if (__builtin_mul_overflow(s->m, s->k, &t) || __builtin_mul_overflow(t, 8 * 2, &t) ||
      __builtin_mul_overflow(s->k, s->n, &t) || __builtin_mul_overflow(t, 8 * 2, &t) ||
      __builtin_mul_overflow(s->m, s->n, &t) || __builtin_mul_overflow(t, 8 * 2, &t))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cublasLtMatmul on softgpu: sizes too large");
  lt_job *j = malloc(sizeof *j);
  if (!j) return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory for a cublasLtMatmul");
  j->q = *q;
  j->q.algo = (rgpu_bytes){NULL, 0}; /* points into the frame; not needed */
  j->s = *s;
  CUresult r = D->cuLaunchHostFunc(st, run_cpu_matmul, j);
  if (r != CUDA_SUCCESS) {
    free(j);
    return FAIL(r, "cublasLtMatmul: cuLaunchHostFunc: %s", rgpu_driver_error_name(D, r));
  }
  return CUDA_SUCCESS;
}

/* ---- a real GPU: NVIDIA's libcublasLt, opened at run time ------------------- */

#define RGPU_CUBLASLT_FUNCS(X)                                                            \
  X(cublasLtCreate) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy)               \
  X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate)                          \
  X(cublasLtMatrixLayoutDestroy) X(cublasLtMatrixLayoutSetAttribute)                       \
  X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)                     \
  X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmul) X(cublasLtMatmulAlgoGetHeuristic)

static struct {
  int state; /* 0 not tried, 1 loaded, -1 failed */
  char err[512];
#define RGPU_CUBLASLT_FIELD(name) __typeof__(&name) name;
  RGPU_CUBLASLT_FUNCS(RGPU_CUBLASLT_FIELD)
#undef RGPU_CUBLASLT_FIELD
  /* One handle per context (cuBLASLt binds a handle to the context
   * current at its creation); a session is one process, so one handle
   * serves every client handle. */
  struct {
    CUcontext ctx;
    cublasLtHandle_t h;
  } ctxs[RGPU_MAX_DEVICES];
} g_lt;

/* Opens path, refusing rgpu's own facade (found first when the loader's
 * path names rgpu's build/lib: the server would be a client of itself). */
static void *lt_open(const char *path) {
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(g_lt.err, sizeof g_lt.err, "cannot open %s: %s", path, dlerror());
    return NULL;
  }
  if (dlsym(lib, "rgpu_cublaslt_cublasLtCreate")) {
    dlclose(lib);
    snprintf(g_lt.err, sizeof g_lt.err, "%s is rgpu's own facade, not NVIDIA's", path);
    return NULL;
  }
  return lib;
}

static int lt_load(void) {
  if (g_lt.state) return g_lt.state;
  /* The loader's path first; then the toolkit's own directory, where a
   * toolkit install leaves it without registering it with the loader. */
  void *lib = lt_open("libcublasLt.so.13");
  if (!lib) {
    char path[600];
    const char *home = getenv("CUDA_HOME");
    snprintf(path, sizeof path, "%s/lib64/libcublasLt.so.13", home && *home ? home : "/usr/local/cuda");
    if (!(lib = lt_open(path))) return g_lt.state = -1;
  }
#define RGPU_CUBLASLT_RESOLVE(name)                                             \
  if (!(*(void **)&g_lt.name = dlsym(lib, #name))) {                            \
    snprintf(g_lt.err, sizeof g_lt.err, "libcublasLt.so.13 has no %s", #name);  \
    return g_lt.state = -1;                                                     \
  }
  RGPU_CUBLASLT_FUNCS(RGPU_CUBLASLT_RESOLVE)
#undef RGPU_CUBLASLT_RESOLVE
  return g_lt.state = 1;
}

static CUresult lt_handle(rgpu_worker *w, cublasLtHandle_t *out) {
  if (lt_load() < 0) return FAIL(CUDA_ERROR_NOT_SUPPORTED, "cublasLt: %s", g_lt.err);
  int dev = w->cur_dev < 0 ? 0 : w->cur_dev;
  CUcontext ctx = w->ctx[dev];
  if (g_lt.ctxs[dev].ctx != ctx || !g_lt.ctxs[dev].h) {
    /* A context recreated after a device reset needs a new handle. */
    g_lt.ctxs[dev].h = NULL;
    cublasStatus_t st = g_lt.cublasLtCreate(&g_lt.ctxs[dev].h);
    if (st != CUBLAS_STATUS_SUCCESS)
      return FAIL(CUDA_ERROR_NOT_INITIALIZED, "cublasLtCreate: status %d", (int)st);
    g_lt.ctxs[dev].ctx = ctx;
  }
  *out = g_lt.ctxs[dev].h;
  return CUDA_SUCCESS;
}

/* NVIDIA's descriptors for the shape: the operation and the four layouts. */
typedef struct {
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t l[4];
} lt_real;

static void real_free(lt_real *r) {
  if (r->op) g_lt.cublasLtMatmulDescDestroy(r->op);
  for (int i = 0; i < 4; i++)
    if (r->l[i]) g_lt.cublasLtMatrixLayoutDestroy(r->l[i]);
  memset(r, 0, sizeof *r);
}

static cublasStatus_t real_make(const lt_shape *s, uint64_t bias, lt_real *r) {
  memset(r, 0, sizeof *r);
  cublasStatus_t st = g_lt.cublasLtMatmulDescCreate(&r->op, (cublasComputeType_t)s->compute,
                                                    (cudaDataType_t)s->scale);
  int32_t pm = (int32_t)s->pointer_mode, ta = (int32_t)s->transa, tb = (int32_t)s->transb;
  uint32_t ep = s->epilogue;
  const void *bp = (const void *)(uintptr_t)bias;
#define SET_OP(attr, v) \
  if (st == CUBLAS_STATUS_SUCCESS) st = g_lt.cublasLtMatmulDescSetAttribute(r->op, attr, &(v), sizeof(v))
  SET_OP(CUBLASLT_MATMUL_DESC_POINTER_MODE, pm);
  SET_OP(CUBLASLT_MATMUL_DESC_TRANSA, ta);
  SET_OP(CUBLASLT_MATMUL_DESC_TRANSB, tb);
  SET_OP(CUBLASLT_MATMUL_DESC_EPILOGUE, ep);
  if (rgpu_cublaslt_epilogue_has_bias(ep)) {
    SET_OP(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bp);
    SET_OP(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, s->bias_stride);
    if (s->bias_type != -1) SET_OP(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, s->bias_type);
  }
#undef SET_OP
  for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; i++) {
    const lt_layout *l = &s->l[i];
    st = g_lt.cublasLtMatrixLayoutCreate(&r->l[i], (cudaDataType)l->type, l->rows, l->cols, l->ld);
    int32_t order = (int32_t)l->order, batch = l->batch;
    if (st == CUBLAS_STATUS_SUCCESS)
      st = g_lt.cublasLtMatrixLayoutSetAttribute(r->l[i], CUBLASLT_MATRIX_LAYOUT_ORDER, &order,
                                                 sizeof order);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = g_lt.cublasLtMatrixLayoutSetAttribute(r->l[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                 &batch, sizeof batch);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = g_lt.cublasLtMatrixLayoutSetAttribute(
          r->l[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &l->stride, sizeof l->stride);
  }
  if (st != CUBLAS_STATUS_SUCCESS) real_free(r);
  return st;
}

/* A cuBLASLt status as the CUresult the client turns back into it. */
static CUresult status_cu(cublasStatus_t st) {
  return st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_ARCH_MISMATCH
             ? CUDA_ERROR_NOT_SUPPORTED
         : st == CUBLAS_STATUS_INVALID_VALUE ? CUDA_ERROR_INVALID_VALUE
                                             : CUDA_ERROR_LAUNCH_FAILED;
}

static CUresult matmul_gpu(rgpu_worker *w, const rgpu_msg_cublaslt_matmul_req *q,
                           const lt_shape *s, CUstream stream) {
  cublasLtHandle_t h;
  CUresult r = lt_handle(w, &h);
  if (r) return r;
  lt_real real;
  cublasStatus_t st = real_make(s, q->bias, &real);
  if (st != CUBLAS_STATUS_SUCCESS)
    return FAIL(status_cu(st), "cublasLtMatmul: building the descriptors: status %d", (int)st);
  /* Host scalars back to the scale type. */
  union {
    uint16_t h;
    float f;
    double d;
  } al, be;
  if (s->scale == CUDA_R_16F) {
    al.h = rgpu_float_to_half((float)q->alpha);
    be.h = rgpu_float_to_half((float)q->beta);
  } else if (s->scale == CUDA_R_32F) {
    al.f = (float)q->alpha;
    be.f = (float)q->beta;
  } else {
    al.d = q->alpha;
    be.d = q->beta;
  }
  int dev_scalars = s->pointer_mode == CUBLASLT_POINTER_MODE_DEVICE;
  cublasLtMatmulAlgo_t algo;
  if (q->algo.len == sizeof algo) memcpy(&algo, q->algo.data, sizeof algo);
  st = g_lt.cublasLtMatmul(h, real.op, dev_scalars ? (const void *)(uintptr_t)q->alpha_dev : &al,
                           (const void *)(uintptr_t)q->a, real.l[0],
                           (const void *)(uintptr_t)q->b, real.l[1],
                           dev_scalars ? (const void *)(uintptr_t)q->beta_dev : &be,
                           (const void *)(uintptr_t)q->c, real.l[2], (void *)(uintptr_t)q->d,
                           real.l[3], q->algo.len == sizeof algo ? &algo : NULL,
                           (void *)(uintptr_t)q->workspace, q->workspace_size,
                           (cudaStream_t)stream);
  real_free(&real);
  if (st != CUBLAS_STATUS_SUCCESS)
    return FAIL(status_cu(st), "cublasLtMatmul: status %d", (int)st);
  return CUDA_SUCCESS;
}

/* ---- the handlers ------------------------------------------------------------ */

CUresult rgpu_h_cublaslt_matmul(rgpu_req *rq, const rgpu_msg_cublaslt_matmul_req *q) {
  rgpu_worker *w = rq->w;
  lt_shape s = LT_SHAPE_OF(q);
  CUresult r = shape_check(w, "cublasLtMatmul", &s);
  if (r) return r;
  if (q->algo.len != 0 && q->algo.len != sizeof(cublasLtMatmulAlgo_t))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cublasLtMatmul: an algorithm of %zu bytes",
                q->algo.len);
  if (s.m == 0 || s.n == 0) return CUDA_SUCCESS;
  if ((r = check_pointers(w, q, &s))) return r;
  CUstream st;
  if ((r = get_stream(w, q->stream, &st))) return r;
  return D->is_softgpu ? matmul_softgpu(w, q, &s, st) : matmul_gpu(w, q, &s, st);
}

#define HEUR_MAX 64

CUresult rgpu_h_cublaslt_heuristic(rgpu_req *rq, const rgpu_msg_cublaslt_heuristic_req *q) {
  rgpu_worker *w = rq->w;
  lt_shape s = LT_SHAPE_OF(q);
  CUresult r = shape_check(w, "cublasLtMatmulAlgoGetHeuristic", &s);
  if (r) return r;
  if (q->requested < 1)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cublasLtMatmulAlgoGetHeuristic: no result asked for");
  uint32_t n = q->requested < HEUR_MAX ? q->requested : HEUR_MAX;
  uint64_t algo[8 * HEUR_MAX], ws[HEUR_MAX];
  uint32_t state[HEUR_MAX], waves[HEUR_MAX];
  if (D->is_softgpu) {
    /* One synthetic algorithm: softgpu's matmul ignores the algo and
     * needs no workspace. */
    float one = 1.0f;
    memset(algo, 0, sizeof(uint64_t) * 8);
    ws[0] = 0;
    state[0] = CUBLAS_STATUS_SUCCESS;
    memcpy(&waves[0], &one, sizeof one);
    n = 1;
  } else {
    cublasLtHandle_t h;
    if ((r = lt_handle(w, &h))) return r;
    lt_real real;
    cublasStatus_t st = real_make(&s, q->bias, &real);
    cublasLtMatmulPreference_t pref = NULL;
    if (st == CUBLAS_STATUS_SUCCESS) st = g_lt.cublasLtMatmulPreferenceCreate(&pref);
    float max_waves;
    memcpy(&max_waves, &q->pref_max_waves, sizeof max_waves);
#define SET_PREF(attr, v) \
  if (st == CUBLAS_STATUS_SUCCESS) st = g_lt.cublasLtMatmulPreferenceSetAttribute(pref, attr, &(v), sizeof(v))
    SET_PREF(CUBLASLT_MATMUL_PREF_SEARCH_MODE, q->pref_search_mode);
    SET_PREF(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, q->pref_max_workspace);
    SET_PREF(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, q->pref_reduction_mask);
    SET_PREF(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, q->pref_align_a);
    SET_PREF(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, q->pref_align_b);
    SET_PREF(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, q->pref_align_c);
    SET_PREF(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, q->pref_align_d);
    SET_PREF(CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT, max_waves);
    SET_PREF(CUBLASLT_MATMUL_PREF_IMPL_MASK, q->pref_impl_mask);
#undef SET_PREF
    cublasLtMatmulHeuristicResult_t res[HEUR_MAX];
    int got = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
      st = g_lt.cublasLtMatmulAlgoGetHeuristic(h, real.op, real.l[0], real.l[1], real.l[2],
                                               real.l[3], pref, (int)n, res, &got);
    if (pref) g_lt.cublasLtMatmulPreferenceDestroy(pref);
    real_free(&real);
    if (st != CUBLAS_STATUS_SUCCESS)
      return FAIL(status_cu(st), "cublasLtMatmulAlgoGetHeuristic: status %d", (int)st);
    n = got < 0 ? 0 : (uint32_t)got > n ? n : (uint32_t)got;
    for (uint32_t i = 0; i < n; i++) {
      memcpy(&algo[8 * i], res[i].algo.data, sizeof res[i].algo.data);
      ws[i] = res[i].workspaceSize;
      state[i] = (uint32_t)res[i].state;
      memcpy(&waves[i], &res[i].wavesCount, sizeof waves[i]);
    }
  }
  rgpu_msg_cublaslt_heuristic_rep rep = {.algo = {algo, 8 * n},
                                         .workspace = {ws, n},
                                         .state = {state, n},
                                         .waves = {waves, n}};
  rgpu_msg_cublaslt_heuristic_rep_encode(rq->rep, &rep);
  return CUDA_SUCCESS;
}
