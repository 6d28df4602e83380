/* softgpu's cuBLAS: the calls annotated `cpu` in cublas/libcublas.annotations,
 * computed with OpenBLAS (Debian libopenblas0, opened at run time: only
 * softgpu needs it, and a GPU host without it must still run the server).
 *
 * Each rgpu_cublas_cpu_<export> runs on the session thread after the
 * generated decoder checked the arguments and the operands' extents; it
 * turns the call's argument record into one of three jobs (gemm, gemv,
 * level 1) and queues it on the stream as a host function, so it runs in
 * stream order with the kernels and copies around it.  softgpu's device
 * addresses are this process's host addresses, so the job reads them
 * directly; scalars in device memory are read when the job runs, as the
 * GPU reads them when its kernel runs.
 *
 * A host function cannot fail its stream: what goes wrong when a job runs
 * (a pointer array naming memory outside the session) skips the call and
 * is logged as an error. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <library_types.h>

#ifdef RGPU_HAVE_OPENBLAS
#include <cblas.h>
#endif

#include "rgpu_cublas_args.h"
#include "rgpu_cublas_gemm_types.h"
#include "rgpu_cublas_server.h"
#include "rgpu_half.h"
#include "rgpu_lib_types.h"
#include "rgpu_log.h"
#include "rgpu_worker_internal.h"

/* ---- OpenBLAS ---------------------------------------------------------------- */

#ifdef RGPU_HAVE_OPENBLAS
#define RGPU_CBLAS_FUNCS(X)                                                             \
  X(cblas_sgemm) X(cblas_dgemm) X(cblas_cgemm) X(cblas_zgemm) X(cblas_sgemv) X(cblas_dgemv) X(cblas_saxpy) X(cblas_daxpy) \
  X(cblas_sscal) X(cblas_dscal) X(cblas_sdot) X(cblas_ddot) X(cblas_snrm2) X(cblas_dnrm2)   \
  X(cblas_sasum) X(cblas_dasum)

static struct {
  int state; /* 0 not tried, 1 loaded, -1 failed */
  char err[512];
#define RGPU_CBLAS_FIELD(name) __typeof__(&name) name;
  RGPU_CBLAS_FUNCS(RGPU_CBLAS_FIELD)
#undef RGPU_CBLAS_FIELD
} g_blas;

static int blas_load(void) {
  if (g_blas.state) return g_blas.state;
  void *lib = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(g_blas.err, sizeof g_blas.err,
             "cannot open libopenblas.so.0 (Debian libopenblas0): %s", dlerror());
    return g_blas.state = -1;
  }
#define RGPU_CBLAS_RESOLVE(name)                                                      \
  if (!(*(void **)&g_blas.name = dlsym(lib, #name))) {                                \
    snprintf(g_blas.err, sizeof g_blas.err, "libopenblas.so.0 has no %s", #name);     \
    return g_blas.state = -1;                                                         \
  }
  RGPU_CBLAS_FUNCS(RGPU_CBLAS_RESOLVE)
#undef RGPU_CBLAS_RESOLVE
  return g_blas.state = 1;
}
#endif

/* OpenBLAS is there (or the call fails with why), and its int sizes hold
 * every size of the call. */
static CUresult cpu_ready(rgpu_cublas_call *call, void *args, const int64_t *sizes, int n) {
#ifdef RGPU_HAVE_OPENBLAS
  if (blas_load() < 0) return rgpu_cublas_cpu_fail(call, args, CUDA_ERROR_NOT_SUPPORTED, g_blas.err);
  for (int i = 0; i < n; i++)
    if (sizes[i] > INT32_MAX || sizes[i] < -INT32_MAX)
      return rgpu_cublas_cpu_fail(call, args, CUDA_ERROR_NOT_SUPPORTED,
                                  "a size beyond 2^31-1 (OpenBLAS takes int)");
  return CUDA_SUCCESS;
#else
  (void)sizes;
  (void)n;
  return rgpu_cublas_cpu_fail(call, args, CUDA_ERROR_NOT_SUPPORTED,
                              "this rgpu-server was built without OpenBLAS's cblas.h");
#endif
}

/* ---- scalars ------------------------------------------------------------------ */

/* A scalar as the job keeps it: its value (host mode, copied now) or its
 * device address (read when the job runs). */
typedef struct {
  const void *dev;
  _Alignas(16) unsigned char v[16];
} cpu_scalar;

static void scalar_take(cpu_scalar *s, const rgpu_cublas_call *call, const void *p, size_t n) {
  if (call->device_mode) {
    s->dev = p;
  } else {
    s->dev = NULL;
    memcpy(s->v, p, n < sizeof s->v ? n : sizeof s->v);
  }
}
static const void *scalar_at(const cpu_scalar *s) { return s->dev ? s->dev : s->v; }

/* One element of type t (the real types softgpu computes) as a double. */
static double load_elem(int t, const void *base, size_t i) {
  switch (t) {
    case CUDA_R_16F: return rgpu_half_to_float(((const uint16_t *)base)[i]);
    case CUDA_R_16BF: return rgpu_bf16_to_float(((const uint16_t *)base)[i]);
    case CUDA_R_32F: return ((const float *)base)[i];
    default: return ((const double *)base)[i];
  }
}

static void store_elem(int t, void *base, size_t i, double v) {
  switch (t) {
    case CUDA_R_16F: ((uint16_t *)base)[i] = rgpu_float_to_half((float)v); break;
    case CUDA_R_16BF: ((uint16_t *)base)[i] = rgpu_float_to_bf16((float)v); break;
    case CUDA_R_32F: ((float *)base)[i] = (float)v; break;
    default: ((double *)base)[i] = v; break;
  }
}

/* ---- gemm ----------------------------------------------------------------------- */

/* Every gemm form as one job: plain, strided batched, batched through
 * pointer arrays, and GemmEx (types widened to double, C rounded once). */
typedef struct {
  int atype, btype, ctype, scale; /* cudaDataType; scale: the scalars' */
  int ex;                         /* GemmEx: compute in double */
  cublasOperation_t transa, transb;
  int64_t m, n, k, lda, ldb, ldc;
  cpu_scalar alpha, beta;
  const void *A, *B;
  void *C;
  int64_t batch, stride_a, stride_b, stride_c;
  /* Batched through arrays of device pointers (read and checked when the
   * job runs: a kernel may have written them just before). */
  const void *const *Aarray, *const *Barray;
  void *const *Carray;
  CUresult (*mem_check)(uint64_t, uint64_t, int);
  const char *name;
} cpu_gemm;

#ifdef RGPU_HAVE_OPENBLAS
static enum CBLAS_TRANSPOSE cblas_op(cublasOperation_t op) {
  /* Real matrices: the conjugate transpose is the transpose. */
  return op == CUBLAS_OP_N ? CblasNoTrans : CblasTrans;
}

/* Complex matrices keep the conjugate transpose. */
static enum CBLAS_TRANSPOSE cblas_op_complex(cublasOperation_t op) {
  return op == CUBLAS_OP_N ? CblasNoTrans : op == CUBLAS_OP_C ? CblasConjTrans : CblasTrans;
}

/* Copies rows x cols of a column-major matrix (leading dimension ld, type t)
 * at base into packed doubles, or back (to_matrix: only those elements are
 * written, so padding stays untouched). */
static void pack(int t, void *base, int64_t ld, int64_t rows, int64_t cols, double *d,
                 int to_matrix) {
  for (int64_t j = 0; j < cols; j++)
    for (int64_t r = 0; r < rows; r++) {
      size_t at = (size_t)(j * ld + r);
      if (to_matrix)
        store_elem(t, base, at, d[j * rows + r]);
      else
        d[j * rows + r] = load_elem(t, base, at);
    }
}

static void gemm_one(const cpu_gemm *g, const void *A, const void *B, void *C) {
  int na = g->transa == CUBLAS_OP_N, nb = g->transb == CUBLAS_OP_N;
  int64_t ar = na ? g->m : g->k, ac = na ? g->k : g->m;
  int64_t br = nb ? g->k : g->n, bc = nb ? g->n : g->k;
  if (g->atype == CUDA_C_32F || g->atype == CUDA_C_64F) {
    /* cgemm/zgemm take their scalars by address: the values as they are
     * now (device mode: read here, when the job runs). */
    __typeof__(&cblas_cgemm) f = g->atype == CUDA_C_32F ? g_blas.cblas_cgemm : g_blas.cblas_zgemm;
    f(CblasColMajor, cblas_op_complex(g->transa), cblas_op_complex(g->transb), (int)g->m,
      (int)g->n, (int)g->k, scalar_at(&g->alpha), A, (int)g->lda, B, (int)g->ldb,
      scalar_at(&g->beta), C, (int)g->ldc);
    return;
  }
  double alpha = load_elem(g->scale, scalar_at(&g->alpha), 0);
  double beta = load_elem(g->scale, scalar_at(&g->beta), 0);
  if (!g->ex && g->atype == CUDA_R_32F) {
    g_blas.cblas_sgemm(CblasColMajor, cblas_op(g->transa), cblas_op(g->transb), (int)g->m,
                       (int)g->n, (int)g->k, (float)alpha, A, (int)g->lda, B, (int)g->ldb,
                       (float)beta, C, (int)g->ldc);
    return;
  }
  if (!g->ex) {
    g_blas.cblas_dgemm(CblasColMajor, cblas_op(g->transa), cblas_op(g->transb), (int)g->m,
                       (int)g->n, (int)g->k, alpha, A, (int)g->lda, B, (int)g->ldb, beta, C,
                       (int)g->ldc);
    return;
  }
  double *a = malloc(sizeof(double) * (size_t)(ar * ac + 1));
  double *b = malloc(sizeof(double) * (size_t)(br * bc + 1));
  double *c = malloc(sizeof(double) * (size_t)(g->m * g->n + 1));
  if (!a || !b || !c) {
    RGPU_ERROR("%s on softgpu: out of memory for a %lldx%lldx%lld product; C is unchanged",
               g->name, (long long)g->m, (long long)g->n, (long long)g->k);
  } else {
    pack(g->atype, (void *)A, g->lda, ar, ac, a, 0);
    pack(g->btype, (void *)B, g->ldb, br, bc, b, 0);
    pack(g->ctype, C, g->ldc, g->m, g->n, c, 0);
    g_blas.cblas_dgemm(CblasColMajor, cblas_op(g->transa), cblas_op(g->transb), (int)g->m,
                       (int)g->n, (int)g->k, alpha, a, (int)(ar > 1 ? ar : 1), b,
                       (int)(br > 1 ? br : 1), beta, c, (int)(g->m > 1 ? g->m : 1));
    pack(g->ctype, C, g->ldc, g->m, g->n, c, 1);
  }
  free(a);
  free(b);
  free(c);
}

/* One operand behind a pointer array, checked against softgpu's live
 * allocations now that the job runs. */
static int array_operand_ok(const cpu_gemm *g, const void *p, int64_t rows, int64_t cols,
                            int64_t ld, int t, int write) {
  uint64_t bytes = rgpu_lib_mul(rgpu_lib_span_mat(rows, cols, ld), rgpu_cuda_type_size(t));
  if (bytes == 0) return 1;
  return bytes != UINT64_MAX && g->mem_check &&
         g->mem_check((uint64_t)(uintptr_t)p, bytes, write) == CUDA_SUCCESS;
}

static void CUDA_CB run_gemm(void *arg) {
  cpu_gemm *g = arg;
  size_t as = rgpu_cuda_type_size(g->atype), bs = rgpu_cuda_type_size(g->btype),
         cs = rgpu_cuda_type_size(g->ctype);
  int na = g->transa == CUBLAS_OP_N, nb = g->transb == CUBLAS_OP_N;
  for (int64_t i = 0; i < g->batch; i++) {
    if (g->Aarray) {
      const void *A = g->Aarray[i], *B = g->Barray[i];
      void *C = g->Carray[i];
      if (!array_operand_ok(g, A, na ? g->m : g->k, na ? g->k : g->m, g->lda, g->atype, 0) ||
          !array_operand_ok(g, B, nb ? g->k : g->n, nb ? g->n : g->k, g->ldb, g->btype, 0) ||
          !array_operand_ok(g, C, g->m, g->n, g->ldc, g->ctype, 1)) {
        RGPU_ERROR("%s on softgpu: matrix %lld of the batch is not inside a device allocation; "
                   "the rest of the batch is skipped", g->name, (long long)i);
        break;
      }
      gemm_one(g, A, B, C);
    } else {
      gemm_one(g, (const char *)g->A + (size_t)(i * g->stride_a) * as,
               (const char *)g->B + (size_t)(i * g->stride_b) * bs,
               (char *)g->C + (size_t)(i * g->stride_c) * cs);
    }
  }
  free(g);
}
#endif

static CUresult gemm_enqueue(rgpu_cublas_call *call, cpu_gemm *g, void *args) {
  int64_t sizes[] = {g->m, g->n, g->k, g->lda, g->ldb, g->ldc};
  CUresult r = cpu_ready(call, args, sizes, 6);
  if (r) {
    free(g);
    return r;
  }
  free(args);
#ifdef RGPU_HAVE_OPENBLAS
  g->mem_check = call->w->drv.sgMemCheck;
  g->name = call->name;
  return rgpu_cublas_cpu_enqueue(call, run_gemm, g);
#else
  free(g);
  return CUDA_ERROR_NOT_SUPPORTED; /* not reached: cpu_ready failed */
#endif
}

/* The fields every gemm form shares, from an argument record `a` whose
 * parameters carry cuBLAS's names. */
#define GEMM_COMMON(a, t, scalar_type)                                          \
  cpu_gemm *g = calloc(1, sizeof *g);                                           \
  if (!g) {                                                                     \
    free(a);                                                                    \
    return rgpu_cublas_oom(call);                                               \
  }                                                                             \
  g->atype = g->btype = g->ctype = g->scale = (t);                              \
  g->transa = (a)->transa;                                                      \
  g->transb = (a)->transb;                                                      \
  g->m = (a)->m;                                                                \
  g->n = (a)->n;                                                                \
  g->k = (a)->k;                                                                \
  g->lda = (a)->lda;                                                            \
  g->ldb = (a)->ldb;                                                            \
  g->ldc = (a)->ldc;                                                            \
  g->batch = 1;                                                                 \
  scalar_take(&g->alpha, call, (a)->alpha, rgpu_cuda_type_size(scalar_type));   \
  scalar_take(&g->beta, call, (a)->beta, rgpu_cuda_type_size(scalar_type))

#define GEMM_PLAIN(name, t)                                                     \
  CUresult rgpu_cublas_cpu_##name(rgpu_cublas_call *call, rgpu_cublas_args_##name *a) { \
    GEMM_COMMON(a, t, t);                                                       \
    g->A = a->A;                                                                \
    g->B = a->B;                                                                \
    g->C = a->C;                                                                \
    return gemm_enqueue(call, g, a);                                            \
  }
GEMM_PLAIN(cublasSgemm_v2, CUDA_R_32F)
GEMM_PLAIN(cublasDgemm_v2, CUDA_R_64F)
GEMM_PLAIN(cublasCgemm_v2, CUDA_C_32F)
GEMM_PLAIN(cublasZgemm_v2, CUDA_C_64F)
GEMM_PLAIN(cublasSgemm_v2_64, CUDA_R_32F)
GEMM_PLAIN(cublasDgemm_v2_64, CUDA_R_64F)
GEMM_PLAIN(cublasCgemm_v2_64, CUDA_C_32F)
GEMM_PLAIN(cublasZgemm_v2_64, CUDA_C_64F)

#define GEMM_STRIDED(name, t)                                                   \
  CUresult rgpu_cublas_cpu_##name(rgpu_cublas_call *call, rgpu_cublas_args_##name *a) { \
    GEMM_COMMON(a, t, t);                                                       \
    g->A = a->A;                                                                \
    g->B = a->B;                                                                \
    g->C = a->C;                                                                \
    g->batch = a->batchCount;                                                   \
    g->stride_a = a->strideA;                                                   \
    g->stride_b = a->strideB;                                                   \
    g->stride_c = a->strideC;                                                   \
    return gemm_enqueue(call, g, a);                                            \
  }
GEMM_STRIDED(cublasSgemmStridedBatched, CUDA_R_32F)
GEMM_STRIDED(cublasDgemmStridedBatched, CUDA_R_64F)
GEMM_STRIDED(cublasSgemmStridedBatched_64, CUDA_R_32F)
GEMM_STRIDED(cublasDgemmStridedBatched_64, CUDA_R_64F)
GEMM_STRIDED(cublasCgemmStridedBatched, CUDA_C_32F)
GEMM_STRIDED(cublasZgemmStridedBatched, CUDA_C_64F)
GEMM_STRIDED(cublasCgemmStridedBatched_64, CUDA_C_32F)
GEMM_STRIDED(cublasZgemmStridedBatched_64, CUDA_C_64F)

#define GEMM_ARRAYS(name, t)                                                    \
  CUresult rgpu_cublas_cpu_##name(rgpu_cublas_call *call, rgpu_cublas_args_##name *a) { \
    GEMM_COMMON(a, t, t);                                                       \
    g->Aarray = (const void *const *)a->Aarray;                                 \
    g->Barray = (const void *const *)a->Barray;                                 \
    g->Carray = (void *const *)a->Carray;                                       \
    g->batch = a->batchCount;                                                   \
    return gemm_enqueue(call, g, a);                                            \
  }
GEMM_ARRAYS(cublasSgemmBatched, CUDA_R_32F)
GEMM_ARRAYS(cublasDgemmBatched, CUDA_R_64F)
GEMM_ARRAYS(cublasSgemmBatched_64, CUDA_R_32F)
GEMM_ARRAYS(cublasDgemmBatched_64, CUDA_R_64F)

#define GEMM_EX(name)                                                           \
  CUresult rgpu_cublas_cpu_##name(rgpu_cublas_call *call, rgpu_cublas_args_##name *a) { \
    int scale = rgpu_cublas_gemm_scale_type((uint32_t)a->Atype, (uint32_t)a->Btype,    \
                                            (uint32_t)a->Ctype, (uint32_t)a->computeType); \
    if (scale < 0)                                                              \
      return rgpu_cublas_cpu_fail(call, a, CUDA_ERROR_NOT_SUPPORTED,            \
                                  "types beyond 16F, 16BF, 32F and 64F");       \
    GEMM_COMMON(a, a->Atype, scale);                                            \
    g->btype = a->Btype;                                                        \
    g->ctype = a->Ctype;                                                        \
    g->scale = scale;                                                           \
    g->ex = 1;                                                                  \
    g->A = a->A;                                                                \
    g->B = a->B;                                                                \
    g->C = a->C;                                                                \
    return gemm_enqueue(call, g, a);                                            \
  }
GEMM_EX(cublasGemmEx)
GEMM_EX(cublasGemmEx_64)

/* ---- gemv ------------------------------------------------------------------------ */

typedef struct {
  int t;
  cublasOperation_t trans;
  int64_t m, n, lda, incx, incy;
  cpu_scalar alpha, beta;
  const void *A, *x;
  void *y;
} cpu_gemv;

/* y = alpha op(A) x + beta y element by element: for increments of 0,
 * which BLAS refuses and cuBLAS 13 takes (one element, repeated). */
static void gemv_by_hand(const cpu_gemv *v) {
  int tr = v->trans != CUBLAS_OP_N;
  int64_t rows = tr ? v->n : v->m, cols = tr ? v->m : v->n;
  double alpha = load_elem(v->t, scalar_at(&v->alpha), 0), beta = load_elem(v->t, scalar_at(&v->beta), 0);
  int64_t ox = v->incx < 0 ? -(cols - 1) * v->incx : 0, oy = v->incy < 0 ? -(rows - 1) * v->incy : 0;
  for (int64_t i = 0; i < rows; i++) {
    double s = 0;
    for (int64_t j = 0; j < cols; j++) {
      size_t a = tr ? (size_t)(i * v->lda + j) : (size_t)(j * v->lda + i);
      s += load_elem(v->t, v->A, a) * load_elem(v->t, v->x, (size_t)(ox + j * v->incx));
    }
    size_t yi = (size_t)(oy + i * v->incy);
    double y = beta == 0 ? 0 : beta * load_elem(v->t, v->y, yi);
    store_elem(v->t, v->y, yi, alpha * s + y);
  }
}

static void CUDA_CB run_gemv(void *arg) {
  cpu_gemv *v = arg;
  if (v->incx == 0 || v->incy == 0) {
    gemv_by_hand(v);
    free(v);
    return;
  }
#ifdef RGPU_HAVE_OPENBLAS
  if (v->t == CUDA_R_32F)
    g_blas.cblas_sgemv(CblasColMajor, cblas_op(v->trans), (int)v->m, (int)v->n,
                       *(const float *)scalar_at(&v->alpha), v->A, (int)v->lda, v->x,
                       (int)v->incx, *(const float *)scalar_at(&v->beta), v->y, (int)v->incy);
  else
    g_blas.cblas_dgemv(CblasColMajor, cblas_op(v->trans), (int)v->m, (int)v->n,
                       *(const double *)scalar_at(&v->alpha), v->A, (int)v->lda, v->x,
                       (int)v->incx, *(const double *)scalar_at(&v->beta), v->y, (int)v->incy);
#endif
  free(v);
}

#define GEMV(name, type)                                                        \
  CUresult rgpu_cublas_cpu_##name(rgpu_cublas_call *call, rgpu_cublas_args_##name *a) { \
    int64_t sizes[] = {a->m, a->n, a->lda, a->incx, a->incy};                   \
    CUresult r = cpu_ready(call, a, sizes, 5);                                  \
    if (r) return r;                                                            \
    cpu_gemv *v = calloc(1, sizeof *v);                                         \
    if (!v) {                                                                   \
      free(a);                                                                  \
      return rgpu_cublas_oom(call);                                             \
    }                                                                           \
    *v = (cpu_gemv){.t = (type), .trans = a->trans, .m = a->m, .n = a->n,       \
                    .lda = a->lda, .incx = a->incx, .incy = a->incy,            \
                    .A = a->A, .x = a->x, .y = a->y};                           \
    scalar_take(&v->alpha, call, a->alpha, rgpu_cuda_type_size(type));          \
    scalar_take(&v->beta, call, a->beta, rgpu_cuda_type_size(type));            \
    free(a);                                                                    \
    return rgpu_cublas_cpu_enqueue(call, run_gemv, v);                               \
  }

/* ---- level 1 ----------------------------------------------------------------------- */

enum { L1_AXPY, L1_SCAL, L1_DOT, L1_NRM2, L1_ASUM, L1_IAMAX, L1_IAMIN };

typedef struct {
  int op, t;
  int64_t n, incx, incy;
  cpu_scalar alpha;
  const void *x;
  void *y;
  void *result; /* host-mode: the reply buffer; device mode: device memory */
  int wide_index; /* i?amax/i?amin _64: the index is an int64_t */
} cpu_l1;

/* The 1-based index of the element of largest (or smallest) magnitude,
 * the first among equals; 0 for an empty vector or a non-positive
 * increment (cuBLAS's rule). */
static int64_t index_of_extreme(const cpu_l1 *l, int largest) {
  if (l->n <= 0 || l->incx <= 0) return 0;
  int64_t best = 0;
  double bv = 0;
  for (int64_t i = 0; i < l->n; i++) {
    double v = load_elem(l->t, l->x, (size_t)(i * l->incx));
    v = v < 0 ? -v : v;
    if (i == 0 || (largest ? v > bv : v < bv)) {
      best = i;
      bv = v;
    }
  }
  return best + 1;
}

static void CUDA_CB run_l1(void *arg) {
  cpu_l1 *l = arg;
#ifdef RGPU_HAVE_OPENBLAS
  int s = l->t == CUDA_R_32F, n = (int)l->n, incx = (int)l->incx, incy = (int)l->incy;
  double r = 0;
  switch (l->op) {
    case L1_AXPY:
      if (s) g_blas.cblas_saxpy(n, *(const float *)scalar_at(&l->alpha), l->x, incx, l->y, incy);
      else g_blas.cblas_daxpy(n, *(const double *)scalar_at(&l->alpha), l->x, incx, l->y, incy);
      break;
    case L1_SCAL:
      if (s) g_blas.cblas_sscal(n, *(const float *)scalar_at(&l->alpha), l->y, incx);
      else g_blas.cblas_dscal(n, *(const double *)scalar_at(&l->alpha), l->y, incx);
      break;
    case L1_DOT:
      r = n <= 0 ? 0 : s ? g_blas.cblas_sdot(n, l->x, incx, l->y, incy)
                         : g_blas.cblas_ddot(n, l->x, incx, l->y, incy);
      break;
    case L1_NRM2:
      r = n <= 0 || incx <= 0 ? 0 : s ? g_blas.cblas_snrm2(n, l->x, incx) : g_blas.cblas_dnrm2(n, l->x, incx);
      break;
    case L1_ASUM:
      r = n <= 0 || incx <= 0 ? 0 : s ? g_blas.cblas_sasum(n, l->x, incx) : g_blas.cblas_dasum(n, l->x, incx);
      break;
    default:
      break;
  }
  if (l->op == L1_IAMAX || l->op == L1_IAMIN) {
    int64_t idx = index_of_extreme(l, l->op == L1_IAMAX);
    int narrow = (int)idx;
    /* The _64 forms return an int64_t index. */
    if (l->wide_index)
      memcpy(l->result, &idx, sizeof idx);
    else
      memcpy(l->result, &narrow, sizeof narrow);
  } else if (l->op >= L1_DOT) {
    store_elem(l->t, l->result, 0, r);
  }
#endif
  free(l);
}

GEMV(cublasSgemv_v2, CUDA_R_32F)
GEMV(cublasDgemv_v2, CUDA_R_64F)
GEMV(cublasSgemv_v2_64, CUDA_R_32F)
GEMV(cublasDgemv_v2_64, CUDA_R_64F)

/* A level-1 job from its parts; takes args (freed) and returns the status. */
static CUresult l1_enqueue(rgpu_cublas_call *call, void *args, cpu_l1 proto, const void *alpha) {
  int64_t sizes[] = {proto.n, proto.incx, proto.incy};
  CUresult r = cpu_ready(call, args, sizes, 3);
  if (r) return r;
  cpu_l1 *l = malloc(sizeof *l);
  if (!l) {
    free(args);
    return rgpu_cublas_oom(call);
  }
  *l = proto;
  if (alpha) scalar_take(&l->alpha, call, alpha, rgpu_cuda_type_size(proto.t));
  free(args);
  return rgpu_cublas_cpu_enqueue(call, run_l1, l);
}

#define AXPY(name, type)                                                        \
  CUresult rgpu_cublas_cpu_##name(rgpu_cublas_call *call, rgpu_cublas_args_##name *a) { \
    cpu_l1 l = {.op = L1_AXPY, .t = (type), .n = a->n, .incx = a->incx,         \
                .incy = a->incy, .x = a->x, .y = a->y};                         \
    return l1_enqueue(call, a, l, a->alpha);                                    \
  }
AXPY(cublasSaxpy_v2, CUDA_R_32F)
AXPY(cublasDaxpy_v2, CUDA_R_64F)
AXPY(cublasSaxpy_v2_64, CUDA_R_32F)
AXPY(cublasDaxpy_v2_64, CUDA_R_64F)

#define SCAL(name, type)                                                        \
  CUresult rgpu_cublas_cpu_##name(rgpu_cublas_call *call, rgpu_cublas_args_##name *a) { \
    cpu_l1 l = {.op = L1_SCAL, .t = (type), .n = a->n, .incx = a->incx, .y = a->x}; \
    return l1_enqueue(call, a, l, a->alpha);                                    \
  }
SCAL(cublasSscal_v2, CUDA_R_32F)
SCAL(cublasDscal_v2, CUDA_R_64F)
SCAL(cublasSscal_v2_64, CUDA_R_32F)
SCAL(cublasDscal_v2_64, CUDA_R_64F)

#define DOT(name, type)                                                         \
  CUresult rgpu_cublas_cpu_##name(rgpu_cublas_call *call, rgpu_cublas_args_##name *a) { \
    cpu_l1 l = {.op = L1_DOT, .t = (type), .n = a->n, .incx = a->incx,          \
                .incy = a->incy, .x = a->x, .y = (void *)a->y, .result = a->result}; \
    return l1_enqueue(call, a, l, NULL);                                        \
  }
DOT(cublasSdot_v2, CUDA_R_32F)
DOT(cublasDdot_v2, CUDA_R_64F)
DOT(cublasSdot_v2_64, CUDA_R_32F)
DOT(cublasDdot_v2_64, CUDA_R_64F)

/* nrm2, asum, iamax, iamin: one vector and a result. */
#define REDUCE(name, type, op_)                                                 \
  CUresult rgpu_cublas_cpu_##name(rgpu_cublas_call *call, rgpu_cublas_args_##name *a) { \
    cpu_l1 l = {.op = (op_), .t = (type), .n = a->n, .incx = a->incx, .x = a->x, \
                .result = a->result, .wide_index = sizeof *a->result == 8 &&    \
                (op_) >= L1_IAMAX};                                             \
    return l1_enqueue(call, a, l, NULL);                                        \
  }
REDUCE(cublasSnrm2_v2, CUDA_R_32F, L1_NRM2)
REDUCE(cublasDnrm2_v2, CUDA_R_64F, L1_NRM2)
REDUCE(cublasSnrm2_v2_64, CUDA_R_32F, L1_NRM2)
REDUCE(cublasDnrm2_v2_64, CUDA_R_64F, L1_NRM2)
REDUCE(cublasSasum_v2, CUDA_R_32F, L1_ASUM)
REDUCE(cublasDasum_v2, CUDA_R_64F, L1_ASUM)
REDUCE(cublasSasum_v2_64, CUDA_R_32F, L1_ASUM)
REDUCE(cublasDasum_v2_64, CUDA_R_64F, L1_ASUM)
REDUCE(cublasIsamax_v2, CUDA_R_32F, L1_IAMAX)
REDUCE(cublasIdamax_v2, CUDA_R_64F, L1_IAMAX)
REDUCE(cublasIsamin_v2, CUDA_R_32F, L1_IAMIN)
REDUCE(cublasIdamin_v2, CUDA_R_64F, L1_IAMIN)
REDUCE(cublasIsamax_v2_64, CUDA_R_32F, L1_IAMAX)
REDUCE(cublasIdamax_v2_64, CUDA_R_64F, L1_IAMAX)
REDUCE(cublasIsamin_v2_64, CUDA_R_32F, L1_IAMIN)
REDUCE(cublasIdamin_v2_64, CUDA_R_64F, L1_IAMIN)
