/* cuBLAS requests (issue 16): CUBLAS_GEMM (S/D, plain, _64, strided
 * batched; cublasGemmEx in the real types), CUBLAS_VEC (axpy, scal) and
 * CUBLAS_GEMV.
 *
 * On a real GPU the worker dlopen()s NVIDIA's libcublas.so.13 at run time
 * (the server never links it: a host without it still serves everything
 * else) and calls it on the request's stream.  On softgpu, whose device
 * addresses are host addresses of this process (softgpu/sg_mem.c), the
 * gemm runs in OpenBLAS as a host function on the stream (cuLaunchHostFunc),
 * so it is ordered with the kernels and copies around it.  Both libraries
 * are opened at run time, so the server needs neither to start.
 *
 * The server keeps no per-handle state: each request carries the client
 * handle's modes, stream and workspace; on a GPU one real cuBLAS handle per
 * context serves every client handle (a session is one process).  */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_api.h>
#include <library_types.h>

#ifdef RGPU_HAVE_OPENBLAS
#include <cblas.h>
#endif

#include "rgpu_cublas_gemm_types.h"
#include "rgpu_dispatch.h"
#include "rgpu_half.h"
#include "rgpu_log.h"
#include "rgpu_worker_internal.h"

#define D (&w->drv)
#define FAIL(status, ...) rgpu_worker_fail(w, (status), __VA_ARGS__)

/* ---- checks ------------------------------------------------------------- */

/* Bytes spanned by a column-major rows x cols matrix with leading dimension
 * ld (0 when empty); -1 on overflow. */
static int matrix_span(int64_t rows, int64_t cols, int64_t ld, size_t elem, uint64_t *out) {
  uint64_t n, t;
  if (rows == 0 || cols == 0) {
    *out = 0;
    return 0;
  }
  if (__builtin_mul_overflow((uint64_t)(cols - 1), (uint64_t)ld, &t) ||
      __builtin_add_overflow(t, (uint64_t)rows, &n) || __builtin_mul_overflow(n, elem, out))
    return -1;
  return 0;
}

/* A matrix operand: `batch` column-major rows x cols matrices with leading
 * dimension ld, `stride` elements apart, all inside one allocation. */
static CUresult check_matrix(rgpu_worker *w, const char *name, uint64_t ptr, int64_t rows,
                             int64_t cols, int64_t ld, int64_t batch, int64_t stride,
                             size_t elem) {
  uint64_t span, step, total;
  if (ld < (rows > 1 ? rows : 1))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cublas gemm: leading dimension %lld of %s is below %lld",
                (long long)ld, name, (long long)rows);
  if (stride < 0)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cublas gemm: negative stride %lld of %s",
                (long long)stride, name);
  if (matrix_span(rows, cols, ld, elem, &span) ||
      __builtin_mul_overflow((uint64_t)(batch - 1), (uint64_t)stride, &step) ||
      __builtin_mul_overflow(step, elem, &step) || __builtin_add_overflow(step, span, &total))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cublas gemm: %s's size overflows", name);
  if (span == 0) return CUDA_SUCCESS;
  if (!rgpu_alloc_table_lookup(&w->allocs, ptr, total))
    return FAIL(CUDA_ERROR_INVALID_VALUE,
                "cublas gemm: %s (%llu bytes at 0x%llx) is not inside a device allocation of "
                "this session", name, (unsigned long long)total, (unsigned long long)ptr);
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

/* One element of a matrix of type t (rgpu_cublas_gemm_types.h's types),
 * as a double: softgpu's GemmEx computes in double and rounds C once. */
static double load_elem(uint32_t t, const void *base, size_t i) {
  switch (t) {
    case CUDA_R_16F: return rgpu_half_to_float(((const uint16_t *)base)[i]);
    case CUDA_R_16BF: return rgpu_bf16_to_float(((const uint16_t *)base)[i]);
    case CUDA_R_32F: return ((const float *)base)[i];
    default: return ((const double *)base)[i];
  }
}

static void store_elem(uint32_t t, void *base, size_t i, double v) {
  switch (t) {
    case CUDA_R_16F: ((uint16_t *)base)[i] = rgpu_float_to_half((float)v); break;
    case CUDA_R_16BF: ((uint16_t *)base)[i] = rgpu_float_to_bf16((float)v); break;
    case CUDA_R_32F: ((float *)base)[i] = (float)v; break;
    default: ((double *)base)[i] = v; break;
  }
}

/* ---- softgpu: OpenBLAS in stream order ------------------------------------ */

#ifdef RGPU_HAVE_OPENBLAS
/* OpenBLAS is opened at run time too: only softgpu needs it, and a GPU
 * host without it must still run the server. */
static struct {
  int state; /* 0 not tried, 1 loaded, -1 failed */
  char err[512];
  __typeof__(&cblas_sgemm) sgemm;
  __typeof__(&cblas_dgemm) dgemm;
  __typeof__(&cblas_saxpy) saxpy;
  __typeof__(&cblas_daxpy) daxpy;
  __typeof__(&cblas_sscal) sscal;
  __typeof__(&cblas_dscal) dscal;
  __typeof__(&cblas_sgemv) sgemv;
  __typeof__(&cblas_dgemv) dgemv;
} g_blas;

static int blas_load(void) {
  if (g_blas.state) return g_blas.state;
  void *lib = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(g_blas.err, sizeof g_blas.err, "cannot open libopenblas.so.0 (Debian "
             "libopenblas0): %s", dlerror());
    return g_blas.state = -1;
  }
  *(void **)&g_blas.sgemm = dlsym(lib, "cblas_sgemm");
  *(void **)&g_blas.dgemm = dlsym(lib, "cblas_dgemm");
  *(void **)&g_blas.saxpy = dlsym(lib, "cblas_saxpy");
  *(void **)&g_blas.daxpy = dlsym(lib, "cblas_daxpy");
  *(void **)&g_blas.sscal = dlsym(lib, "cblas_sscal");
  *(void **)&g_blas.dscal = dlsym(lib, "cblas_dscal");
  *(void **)&g_blas.sgemv = dlsym(lib, "cblas_sgemv");
  *(void **)&g_blas.dgemv = dlsym(lib, "cblas_dgemv");
  if (!g_blas.sgemm || !g_blas.dgemm || !g_blas.saxpy || !g_blas.daxpy || !g_blas.sscal ||
      !g_blas.dscal || !g_blas.sgemv || !g_blas.dgemv) {
    snprintf(g_blas.err, sizeof g_blas.err, "libopenblas.so.0 lacks a cblas_ function rgpu uses");
    return g_blas.state = -1;
  }
  return g_blas.state = 1;
}

/* One gemm waiting on its stream; freed by the host function that runs it. */
typedef struct {
  rgpu_msg_cublas_gemm_req q;
} cpu_gemm;

static enum CBLAS_TRANSPOSE cblas_op(uint32_t op) {
  /* Real matrices: the conjugate transpose is the transpose. */
  return op == CUBLAS_OP_N ? CblasNoTrans : CblasTrans;
}

/* Copies rows x cols of a column-major matrix (leading dimension ld, type t)
 * at base into packed doubles, or back (to_matrix: only those elements are
 * written, so padding stays untouched). */
static void pack(uint32_t t, void *base, int64_t ld, int64_t rows, int64_t cols, double *d,
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

/* cublasGemmEx on the CPU: A, B, C widened to double, one dgemm, C rounded
 * back to its type. */
static void cpu_gemm_ex(const rgpu_msg_cublas_gemm_req *q, int scale, int64_t i) {
  int64_t ar = q->transa == CUBLAS_OP_N ? q->m : q->k, ac = q->transa == CUBLAS_OP_N ? q->k : q->m;
  int64_t br = q->transb == CUBLAS_OP_N ? q->k : q->n, bc = q->transb == CUBLAS_OP_N ? q->n : q->k;
  size_t as = rgpu_cublas_type_size(q->atype), bs = rgpu_cublas_type_size(q->btype),
         cs = rgpu_cublas_type_size(q->ctype);
  char *A = (char *)(uintptr_t)q->a + (size_t)(i * q->stride_a) * as;
  char *B = (char *)(uintptr_t)q->b + (size_t)(i * q->stride_b) * bs;
  char *C = (char *)(uintptr_t)q->c + (size_t)(i * q->stride_c) * cs;
  double *a = malloc(sizeof(double) * (size_t)(ar * ac + 1));
  double *b = malloc(sizeof(double) * (size_t)(br * bc + 1));
  double *c = malloc(sizeof(double) * (size_t)(q->m * q->n + 1));
  if (!a || !b || !c) {
    /* A host function cannot fail its stream: the gemm is skipped, loudly. */
    RGPU_ERROR("cublas gemm on softgpu: out of memory for a %lldx%lldx%lld GemmEx; C is unchanged",
               (long long)q->m, (long long)q->n, (long long)q->k);
  } else {
    int dev = q->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
    double alpha = dev ? load_elem((uint32_t)scale, (void *)(uintptr_t)q->alpha_dev, 0) : q->alpha;
    double beta = dev ? load_elem((uint32_t)scale, (void *)(uintptr_t)q->beta_dev, 0) : q->beta;
    pack(q->atype, A, q->lda, ar, ac, a, 0);
    pack(q->btype, B, q->ldb, br, bc, b, 0);
    pack(q->ctype, C, q->ldc, q->m, q->n, c, 0);
    g_blas.dgemm(CblasColMajor, cblas_op(q->transa), cblas_op(q->transb), (int)q->m, (int)q->n,
                 (int)q->k, alpha, a, (int)(ar > 1 ? ar : 1), b, (int)(br > 1 ? br : 1), beta, c,
                 (int)(q->m > 1 ? q->m : 1));
    pack(q->ctype, C, q->ldc, q->m, q->n, c, 1);
  }
  free(a);
  free(b);
  free(c);
}

static void CUDA_CB run_cpu_gemm(void *arg) {
  cpu_gemm *g = arg;
  const rgpu_msg_cublas_gemm_req *q = &g->q;
  if (q->compute) {
    int scale = rgpu_cublas_gemm_scale_type(q->atype, q->btype, q->ctype, q->compute);
    for (int64_t i = 0; i < q->batch; i++) cpu_gemm_ex(q, scale, i);
    free(g);
    return;
  }
  /* softgpu's device addresses are this process's host addresses: device
   * scalars are read here, when the stream reaches the gemm. */
  int dev = q->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  for (int64_t i = 0; i < q->batch; i++) {
    if (q->atype == CUDA_R_32F) {
      float alpha = dev ? *(const float *)(uintptr_t)q->alpha_dev : (float)q->alpha;
      float beta = dev ? *(const float *)(uintptr_t)q->beta_dev : (float)q->beta;
      g_blas.sgemm(CblasColMajor, cblas_op(q->transa), cblas_op(q->transb), (int)q->m,
                   (int)q->n, (int)q->k, alpha, (const float *)(uintptr_t)q->a + i * q->stride_a,
                   (int)q->lda, (const float *)(uintptr_t)q->b + i * q->stride_b, (int)q->ldb,
                   beta, (float *)(uintptr_t)q->c + i * q->stride_c, (int)q->ldc);
    } else {
      double alpha = dev ? *(const double *)(uintptr_t)q->alpha_dev : q->alpha;
      double beta = dev ? *(const double *)(uintptr_t)q->beta_dev : q->beta;
      g_blas.dgemm(CblasColMajor, cblas_op(q->transa), cblas_op(q->transb), (int)q->m,
                   (int)q->n, (int)q->k, alpha, (const double *)(uintptr_t)q->a + i * q->stride_a,
                   (int)q->lda, (const double *)(uintptr_t)q->b + i * q->stride_b, (int)q->ldb,
                   beta, (double *)(uintptr_t)q->c + i * q->stride_c, (int)q->ldc);
    }
  }
  free(g);
}
#endif

#ifdef RGPU_HAVE_OPENBLAS
/* Queues fn on stream s with its own copy of the request (len bytes at
 * req): softgpu's CPU BLAS runs as a host function, in stream order with
 * the kernels and copies around it; fn frees the copy.  what names the
 * call in errors. */
static CUresult cpu_call_enqueue(rgpu_worker *w, CUstream s, void (*fn)(void *), const void *req,
                                 size_t len, const char *what) {
  if (!D->cuLaunchHostFunc)
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "cublas %s: this softgpu has no cuLaunchHostFunc", what);
  void *copy = malloc(len);
  if (!copy) return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory for a cublas %s", what);
  memcpy(copy, req, len);
  CUresult r = D->cuLaunchHostFunc(s, fn, copy);
  if (r != CUDA_SUCCESS) {
    free(copy);
    return FAIL(r, "cublas %s: cuLaunchHostFunc: %s", what, rgpu_driver_error_name(D, r));
  }
  return CUDA_SUCCESS;
}
#endif

/* softgpu's server built without OpenBLAS: every CPU BLAS call says so. */
#define NO_OPENBLAS(what)                                                                  \
  FAIL(CUDA_ERROR_NOT_SUPPORTED,                                                           \
       "cublas " what ": this rgpu-server was built without OpenBLAS's cblas.h (softgpu's " \
       "CPU BLAS)")

static CUresult gemm_softgpu(rgpu_worker *w, const rgpu_msg_cublas_gemm_req *q, CUstream s) {
#ifdef RGPU_HAVE_OPENBLAS
  if (blas_load() < 0) return FAIL(CUDA_ERROR_NOT_SUPPORTED, "cublas gemm on softgpu: %s", g_blas.err);
  /* OpenBLAS's CBLAS takes int sizes. */
  if (q->m > INT32_MAX || q->n > INT32_MAX || q->k > INT32_MAX || q->lda > INT32_MAX ||
      q->ldb > INT32_MAX || q->ldc > INT32_MAX)
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "cublas gemm on softgpu: sizes beyond 2^31-1");
  cpu_gemm g = {.q = *q};
  return cpu_call_enqueue(w, s, run_cpu_gemm, &g, sizeof g, "gemm");
#else
  (void)q;
  (void)s;
  return NO_OPENBLAS("gemm");
#endif
}

/* ---- a real GPU: NVIDIA's libcublas, opened at run time --------------------- */

#define RGPU_CUBLAS_FUNCS(X)                                                          \
  X(cublasCreate_v2) X(cublasSetStream_v2) X(cublasSetMathMode) X(cublasSetWorkspace_v2) \
  X(cublasSetPointerMode_v2) X(cublasSgemm_v2) X(cublasDgemm_v2) X(cublasSgemm_v2_64)         \
  X(cublasDgemm_v2_64) X(cublasSgemmStridedBatched) X(cublasDgemmStridedBatched)              \
  X(cublasSgemmStridedBatched_64) X(cublasDgemmStridedBatched_64) X(cublasGemmEx)            \
  X(cublasGemmEx_64) X(cublasSaxpy_v2) X(cublasDaxpy_v2) X(cublasSaxpy_v2_64)                 \
  X(cublasDaxpy_v2_64) X(cublasSscal_v2) X(cublasDscal_v2) X(cublasSscal_v2_64)                \
  X(cublasDscal_v2_64) X(cublasSgemv_v2) X(cublasDgemv_v2) X(cublasSgemv_v2_64)               \
  X(cublasDgemv_v2_64)

static struct {
  int state; /* 0 not tried, 1 loaded, -1 failed */
  char err[512];
#define RGPU_CUBLAS_FIELD(name) __typeof__(&name) name;
  RGPU_CUBLAS_FUNCS(RGPU_CUBLAS_FIELD)
#undef RGPU_CUBLAS_FIELD
  /* One handle per context (a cuBLAS handle belongs to the context current
   * at its creation); the workspace it was last given. */
  struct {
    CUcontext ctx;
    cublasHandle_t h;
    uint64_t workspace, workspace_size;
  } ctxs[RGPU_MAX_DEVICES];
} g_lib;

static int lib_load(void) {
  if (g_lib.state) return g_lib.state;
  /* The loader's path first (ldconfig, LD_LIBRARY_PATH); then the
   * toolkit's own directory, where a toolkit install leaves it without
   * registering it with the loader. */
  void *lib = dlopen("libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
  if (lib && dlsym(lib, "rgpu_cublas_cublasCreate_v2")) {
    /* rgpu's own facade (found first when LD_LIBRARY_PATH names rgpu's
     * build/lib): the server would be a client of itself. */
    dlclose(lib);
    lib = NULL;
    snprintf(g_lib.err, sizeof g_lib.err,
             "libcublas.so.13 on the loader's path is rgpu's own facade, not NVIDIA's");
  } else if (!lib) {
    snprintf(g_lib.err, sizeof g_lib.err, "cannot open libcublas.so.13: %s", dlerror());
  }
  if (!lib) {
    char path[600];
    const char *home = getenv("CUDA_HOME");
    snprintf(path, sizeof path, "%s/lib64/libcublas.so.13", home && *home ? home : "/usr/local/cuda");
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib || dlsym(lib, "rgpu_cublas_cublasCreate_v2")) return g_lib.state = -1;
  }
#define RGPU_CUBLAS_RESOLVE(name)                                                   \
  if (!(*(void **)&g_lib.name = dlsym(lib, #name))) {                               \
    snprintf(g_lib.err, sizeof g_lib.err, "libcublas.so.13 has no %s", #name);      \
    return g_lib.state = -1;                                                        \
  }
  RGPU_CUBLAS_FUNCS(RGPU_CUBLAS_RESOLVE)
#undef RGPU_CUBLAS_RESOLVE
  return g_lib.state = 1;
}

/* The context's real handle, set up for one call: its stream, math mode and
 * pointer mode (the workspace is the gemm's business).  *slot_out: the
 * handle's record. */
typedef __typeof__(g_lib.ctxs[0]) gpu_slot;
static CUresult gpu_handle(rgpu_worker *w, CUstream s, uint32_t math_mode, uint32_t pointer_mode,
                           gpu_slot **slot_out) {
  if (lib_load() < 0) return FAIL(CUDA_ERROR_NOT_SUPPORTED, "cublas: %s", g_lib.err);
  int dev = w->cur_dev < 0 ? 0 : w->cur_dev;
  CUcontext ctx = w->ctx[dev];
  gpu_slot *slot = &g_lib.ctxs[dev];
  if (slot->ctx != ctx || !slot->h) {
    /* A context recreated after a device reset needs a new handle; the old
     * one died with its context. */
    memset(slot, 0, sizeof *slot);
    cublasStatus_t st = g_lib.cublasCreate_v2(&slot->h);
    if (st != CUBLAS_STATUS_SUCCESS)
      return FAIL(CUDA_ERROR_NOT_INITIALIZED, "cublasCreate_v2: status %d", (int)st);
    slot->ctx = ctx;
  }
  cublasHandle_t h = slot->h;
  cublasStatus_t st = g_lib.cublasSetStream_v2(h, (cudaStream_t)s);
  if (st == CUBLAS_STATUS_SUCCESS) st = g_lib.cublasSetMathMode(h, (cublasMath_t)math_mode);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = g_lib.cublasSetPointerMode_v2(h, pointer_mode == CUBLAS_POINTER_MODE_DEVICE
                                              ? CUBLAS_POINTER_MODE_DEVICE
                                              : CUBLAS_POINTER_MODE_HOST);
  if (st != CUBLAS_STATUS_SUCCESS)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cublas: setting up the handle: status %d", (int)st);
  *slot_out = slot;
  return CUDA_SUCCESS;
}

static CUresult gemm_gpu(rgpu_worker *w, const rgpu_msg_cublas_gemm_req *q, CUstream s) {
  gpu_slot *slot;
  CUresult r = gpu_handle(w, s, q->math_mode, q->pointer_mode, &slot);
  if (r) return r;
  cublasHandle_t h = slot->h;
  int dev_scalars = q->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  if (slot->workspace != q->workspace || slot->workspace_size != q->workspace_size) {
    st = g_lib.cublasSetWorkspace_v2(h, (void *)(uintptr_t)q->workspace, q->workspace_size);
    if (st != CUBLAS_STATUS_SUCCESS)
      return FAIL(CUDA_ERROR_INVALID_VALUE, "cublasSetWorkspace_v2: status %d", (int)st);
    slot->workspace = q->workspace;
    slot->workspace_size = q->workspace_size;
  }
  /* The call the client made, up to form: a plain gemm unless batched or
   * strided; the int forms unless a size needs the _64 ones. */
  int wide = q->m > INT32_MAX || q->n > INT32_MAX || q->k > INT32_MAX || q->lda > INT32_MAX ||
             q->ldb > INT32_MAX || q->ldc > INT32_MAX || q->batch > INT32_MAX;
  int batched = q->batch != 1 || q->stride_a || q->stride_b || q->stride_c;
  cublasOperation_t ta = (cublasOperation_t)q->transa, tb = (cublasOperation_t)q->transb;
  if (q->compute) {
    /* Host scalars back to the compute type's scale type. */
    int scale = rgpu_cublas_gemm_scale_type(q->atype, q->btype, q->ctype, q->compute);
    union {
      uint16_t h;
      float f;
      double d;
    } al, be;
    if (scale == CUDA_R_16F) {
      al.h = rgpu_float_to_half((float)q->alpha);
      be.h = rgpu_float_to_half((float)q->beta);
    } else if (scale == CUDA_R_32F) {
      al.f = (float)q->alpha;
      be.f = (float)q->beta;
    } else {
      al.d = q->alpha;
      be.d = q->beta;
    }
    const void *pa = dev_scalars ? (const void *)(uintptr_t)q->alpha_dev : &al;
    const void *pb = dev_scalars ? (const void *)(uintptr_t)q->beta_dev : &be;
    const void *A = (const void *)(uintptr_t)q->a, *B = (const void *)(uintptr_t)q->b;
    void *C = (void *)(uintptr_t)q->c;
    if (wide)
      st = g_lib.cublasGemmEx_64(h, ta, tb, q->m, q->n, q->k, pa, A, (cudaDataType)q->atype,
                                 q->lda, B, (cudaDataType)q->btype, q->ldb, pb, C,
                                 (cudaDataType)q->ctype, q->ldc, (cublasComputeType_t)q->compute,
                                 (cublasGemmAlgo_t)q->algo);
    else
      st = g_lib.cublasGemmEx(h, ta, tb, (int)q->m, (int)q->n, (int)q->k, pa, A,
                              (cudaDataType)q->atype, (int)q->lda, B, (cudaDataType)q->btype,
                              (int)q->ldb, pb, C, (cudaDataType)q->ctype, (int)q->ldc,
                              (cublasComputeType_t)q->compute, (cublasGemmAlgo_t)q->algo);
    if (st != CUBLAS_STATUS_SUCCESS)
      return FAIL(CUDA_ERROR_LAUNCH_FAILED, "cublasGemmEx%s: status %d", wide ? "_64" : "",
                  (int)st);
    return CUDA_SUCCESS;
  }
  if (q->atype == CUDA_R_32F) {
    float alpha = (float)q->alpha, beta = (float)q->beta;
    const float *pa = dev_scalars ? (const float *)(uintptr_t)q->alpha_dev : &alpha;
    const float *pb = dev_scalars ? (const float *)(uintptr_t)q->beta_dev : &beta;
    const float *A = (const float *)(uintptr_t)q->a, *B = (const float *)(uintptr_t)q->b;
    float *C = (float *)(uintptr_t)q->c;
    if (batched && wide)
      st = g_lib.cublasSgemmStridedBatched_64(h, ta, tb, q->m, q->n, q->k, pa, A, q->lda,
                                              q->stride_a, B, q->ldb, q->stride_b, pb, C, q->ldc,
                                              q->stride_c, q->batch);
    else if (batched)
      st = g_lib.cublasSgemmStridedBatched(h, ta, tb, (int)q->m, (int)q->n, (int)q->k, pa, A,
                                           (int)q->lda, q->stride_a, B, (int)q->ldb, q->stride_b,
                                           pb, C, (int)q->ldc, q->stride_c, (int)q->batch);
    else if (wide)
      st = g_lib.cublasSgemm_v2_64(h, ta, tb, q->m, q->n, q->k, pa, A, q->lda, B, q->ldb, pb, C,
                                   q->ldc);
    else
      st = g_lib.cublasSgemm_v2(h, ta, tb, (int)q->m, (int)q->n, (int)q->k, pa, A, (int)q->lda, B,
                                (int)q->ldb, pb, C, (int)q->ldc);
  } else {
    const double *pa = dev_scalars ? (const double *)(uintptr_t)q->alpha_dev : &q->alpha;
    const double *pb = dev_scalars ? (const double *)(uintptr_t)q->beta_dev : &q->beta;
    const double *A = (const double *)(uintptr_t)q->a, *B = (const double *)(uintptr_t)q->b;
    double *C = (double *)(uintptr_t)q->c;
    if (batched && wide)
      st = g_lib.cublasDgemmStridedBatched_64(h, ta, tb, q->m, q->n, q->k, pa, A, q->lda,
                                              q->stride_a, B, q->ldb, q->stride_b, pb, C, q->ldc,
                                              q->stride_c, q->batch);
    else if (batched)
      st = g_lib.cublasDgemmStridedBatched(h, ta, tb, (int)q->m, (int)q->n, (int)q->k, pa, A,
                                           (int)q->lda, q->stride_a, B, (int)q->ldb, q->stride_b,
                                           pb, C, (int)q->ldc, q->stride_c, (int)q->batch);
    else if (wide)
      st = g_lib.cublasDgemm_v2_64(h, ta, tb, q->m, q->n, q->k, pa, A, q->lda, B, q->ldb, pb, C,
                                   q->ldc);
    else
      st = g_lib.cublasDgemm_v2(h, ta, tb, (int)q->m, (int)q->n, (int)q->k, pa, A, (int)q->lda, B,
                                (int)q->ldb, pb, C, (int)q->ldc);
  }
  if (st != CUBLAS_STATUS_SUCCESS)
    return FAIL(CUDA_ERROR_LAUNCH_FAILED, "cublas%cgemm%s%s: status %d",
                q->atype == CUDA_R_32F ? 'S' : 'D', batched ? "StridedBatched" : "_v2",
                wide ? "_64" : "", (int)st);
  return CUDA_SUCCESS;
}

/* ---- the handler ---------------------------------------------------------- */

CUresult rgpu_h_cublas_gemm(rgpu_req *rq, const rgpu_msg_cublas_gemm_req *q) {
  rgpu_worker *w = rq->w;
  int scale = rgpu_cublas_gemm_scale_type(q->atype, q->btype, q->ctype, q->compute);
  if (scale < 0)
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "cublas gemm: types A %u, B %u, C %u with compute type "
                "%u", q->atype, q->btype, q->ctype, q->compute);
  if (q->compute && (q->batch != 1 || q->stride_a || q->stride_b || q->stride_c))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cublas gemm: a batched GemmEx is not carried");
  if (q->transa > CUBLAS_OP_C || q->transb > CUBLAS_OP_C)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cublas gemm: operation %u/%u", q->transa, q->transb);
  if (q->m < 0 || q->n < 0 || q->k < 0)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cublas gemm: negative dimensions");
  size_t as = rgpu_cublas_type_size(q->atype), bs = rgpu_cublas_type_size(q->btype),
         cs = rgpu_cublas_type_size(q->ctype), ss = rgpu_cublas_type_size((uint32_t)scale);
  int na = q->transa == CUBLAS_OP_N, nb = q->transb == CUBLAS_OP_N;
  CUresult r;
  if (q->batch < 0) return FAIL(CUDA_ERROR_INVALID_VALUE, "cublas gemm: negative batch count");
  if (q->m == 0 || q->n == 0 || q->batch == 0) return CUDA_SUCCESS;
  if ((r = check_matrix(w, "A", q->a, na ? q->m : q->k, na ? q->k : q->m, q->lda, q->batch,
                        q->stride_a, as)) ||
      (r = check_matrix(w, "B", q->b, nb ? q->k : q->n, nb ? q->n : q->k, q->ldb, q->batch,
                        q->stride_b, bs)) ||
      (r = check_matrix(w, "C", q->c, q->m, q->n, q->ldc, q->batch, q->stride_c, cs)))
    return r;
  if (q->pointer_mode > CUBLAS_POINTER_MODE_DEVICE)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cublas gemm: pointer mode %u", q->pointer_mode);
  if (q->pointer_mode == CUBLAS_POINTER_MODE_DEVICE &&
      (!rgpu_alloc_table_lookup(&w->allocs, q->alpha_dev, ss) ||
       !rgpu_alloc_table_lookup(&w->allocs, q->beta_dev, ss)))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cublas gemm: device-mode alpha (0x%llx) or beta "
                "(0x%llx) is not inside a device allocation of this session",
                (unsigned long long)q->alpha_dev, (unsigned long long)q->beta_dev);
  if (q->workspace && !rgpu_alloc_table_lookup(&w->allocs, q->workspace, q->workspace_size))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cublas gemm: the workspace is not a device allocation");
  CUstream s;
  if ((r = get_stream(w, q->stream, &s))) return r;
  return D->is_softgpu ? gemm_softgpu(w, q, s) : gemm_gpu(w, q, s);
}

/* ---- CUBLAS_VEC: axpy, scal ----------------------------------------------- */

enum { VEC_AXPY = 0, VEC_SCAL = 1 };

#ifdef RGPU_HAVE_OPENBLAS
static void CUDA_CB run_cpu_vec(void *arg) {
  rgpu_msg_cublas_vec_req *q = arg;
  int dev = q->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  int n = (int)q->n, incx = (int)q->incx, incy = (int)q->incy;
  if (q->dtype == CUDA_R_32F) {
    float alpha = dev ? *(const float *)(uintptr_t)q->alpha_dev : (float)q->alpha;
    if (q->op == VEC_AXPY)
      g_blas.saxpy(n, alpha, (const float *)(uintptr_t)q->x, incx, (float *)(uintptr_t)q->y, incy);
    else
      g_blas.sscal(n, alpha, (float *)(uintptr_t)q->x, incx);
  } else {
    double alpha = dev ? *(const double *)(uintptr_t)q->alpha_dev : q->alpha;
    if (q->op == VEC_AXPY)
      g_blas.daxpy(n, alpha, (const double *)(uintptr_t)q->x, incx, (double *)(uintptr_t)q->y,
                   incy);
    else
      g_blas.dscal(n, alpha, (double *)(uintptr_t)q->x, incx);
  }
  free(q);
}
#endif

static CUresult vec_softgpu(rgpu_worker *w, const rgpu_msg_cublas_vec_req *q, CUstream s) {
#ifdef RGPU_HAVE_OPENBLAS
  if (blas_load() < 0) return FAIL(CUDA_ERROR_NOT_SUPPORTED, "cublas on softgpu: %s", g_blas.err);
  if (q->n > INT32_MAX || q->incx > INT32_MAX || q->incx < -INT32_MAX || q->incy > INT32_MAX ||
      q->incy < -INT32_MAX)
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "cublas on softgpu: sizes beyond 2^31-1");
  return cpu_call_enqueue(w, s, run_cpu_vec, q, sizeof *q, "vec");
#else
  (void)q;
  (void)s;
  return NO_OPENBLAS("vec");
#endif
}

static CUresult vec_gpu(rgpu_worker *w, const rgpu_msg_cublas_vec_req *q, CUstream s) {
  gpu_slot *slot;
  CUresult r = gpu_handle(w, s, CUBLAS_DEFAULT_MATH, q->pointer_mode, &slot);
  if (r) return r;
  cublasHandle_t h = slot->h;
  int dev_scalars = q->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  int wide = q->n > INT32_MAX || q->incx > INT32_MAX || q->incx < INT32_MIN ||
             q->incy > INT32_MAX || q->incy < INT32_MIN;
  cublasStatus_t st;
  if (q->dtype == CUDA_R_32F) {
    float alpha = (float)q->alpha;
    const float *pa = dev_scalars ? (const float *)(uintptr_t)q->alpha_dev : &alpha;
    float *x = (float *)(uintptr_t)q->x, *y = (float *)(uintptr_t)q->y;
    if (q->op == VEC_AXPY)
      st = wide ? g_lib.cublasSaxpy_v2_64(h, q->n, pa, x, q->incx, y, q->incy)
                : g_lib.cublasSaxpy_v2(h, (int)q->n, pa, x, (int)q->incx, y, (int)q->incy);
    else
      st = wide ? g_lib.cublasSscal_v2_64(h, q->n, pa, x, q->incx)
                : g_lib.cublasSscal_v2(h, (int)q->n, pa, x, (int)q->incx);
  } else {
    const double *pa = dev_scalars ? (const double *)(uintptr_t)q->alpha_dev : &q->alpha;
    double *x = (double *)(uintptr_t)q->x, *y = (double *)(uintptr_t)q->y;
    if (q->op == VEC_AXPY)
      st = wide ? g_lib.cublasDaxpy_v2_64(h, q->n, pa, x, q->incx, y, q->incy)
                : g_lib.cublasDaxpy_v2(h, (int)q->n, pa, x, (int)q->incx, y, (int)q->incy);
    else
      st = wide ? g_lib.cublasDscal_v2_64(h, q->n, pa, x, q->incx)
                : g_lib.cublasDscal_v2(h, (int)q->n, pa, x, (int)q->incx);
  }
  if (st != CUBLAS_STATUS_SUCCESS)
    return FAIL(CUDA_ERROR_LAUNCH_FAILED, "cublas%c%s: status %d", q->dtype == CUDA_R_32F ? 'S' : 'D',
                q->op == VEC_AXPY ? "axpy" : "scal", (int)st);
  return CUDA_SUCCESS;
}

/* A vector of n elements `inc` apart (BLAS: a negative increment walks it
 * from the far end, so the same span), inside one allocation. */
static CUresult check_vector(rgpu_worker *w, const char *name, uint64_t ptr, int64_t n,
                             int64_t inc, size_t elem) {
  uint64_t step = inc < 0 ? (uint64_t)(-(inc + 1)) + 1 : (uint64_t)inc, span;
  if (__builtin_mul_overflow((uint64_t)(n - 1), step, &span) ||
      __builtin_add_overflow(span, 1, &span) || __builtin_mul_overflow(span, elem, &span))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cublas: %s's size overflows", name);
  if (!rgpu_alloc_table_lookup(&w->allocs, ptr, span))
    return FAIL(CUDA_ERROR_INVALID_VALUE,
                "cublas: %s (%llu bytes at 0x%llx) is not inside a device allocation of this "
                "session", name, (unsigned long long)span, (unsigned long long)ptr);
  return CUDA_SUCCESS;
}

CUresult rgpu_h_cublas_vec(rgpu_req *rq, const rgpu_msg_cublas_vec_req *q) {
  rgpu_worker *w = rq->w;
  if (q->dtype != CUDA_R_32F && q->dtype != CUDA_R_64F)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cublas: data type %u (must be CUDA_R_32F or CUDA_R_64F)",
                q->dtype);
  if (q->op != VEC_AXPY && q->op != VEC_SCAL)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cublas: level-1 operation %u", q->op);
  if (q->pointer_mode > CUBLAS_POINTER_MODE_DEVICE)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cublas: pointer mode %u", q->pointer_mode);
  /* What cuBLAS does nothing for (the client does not send it either). */
  if (q->n <= 0 || (q->op == VEC_SCAL && q->incx <= 0)) return CUDA_SUCCESS;
  size_t elem = q->dtype == CUDA_R_32F ? 4 : 8;
  CUresult r = check_vector(w, "x", q->x, q->n, q->incx, elem);
  if (!r && q->op == VEC_AXPY) r = check_vector(w, "y", q->y, q->n, q->incy, elem);
  if (r) return r;
  if (q->pointer_mode == CUBLAS_POINTER_MODE_DEVICE &&
      !rgpu_alloc_table_lookup(&w->allocs, q->alpha_dev, elem))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cublas: device-mode alpha (0x%llx) is not inside a "
                "device allocation of this session", (unsigned long long)q->alpha_dev);
  CUstream s;
  if ((r = get_stream(w, q->stream, &s))) return r;
  return D->is_softgpu ? vec_softgpu(w, q, s) : vec_gpu(w, q, s);
}

/* ---- CUBLAS_GEMV ----------------------------------------------------------- */

#ifdef RGPU_HAVE_OPENBLAS
static void CUDA_CB run_cpu_gemv(void *arg) {
  rgpu_msg_cublas_gemv_req *q = arg;
  int dev = q->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  if (q->dtype == CUDA_R_32F) {
    float alpha = dev ? *(const float *)(uintptr_t)q->alpha_dev : (float)q->alpha;
    float beta = dev ? *(const float *)(uintptr_t)q->beta_dev : (float)q->beta;
    g_blas.sgemv(CblasColMajor, cblas_op(q->trans), (int)q->m, (int)q->n, alpha,
                 (const float *)(uintptr_t)q->a, (int)q->lda, (const float *)(uintptr_t)q->x,
                 (int)q->incx, beta, (float *)(uintptr_t)q->y, (int)q->incy);
  } else {
    double alpha = dev ? *(const double *)(uintptr_t)q->alpha_dev : q->alpha;
    double beta = dev ? *(const double *)(uintptr_t)q->beta_dev : q->beta;
    g_blas.dgemv(CblasColMajor, cblas_op(q->trans), (int)q->m, (int)q->n, alpha,
                 (const double *)(uintptr_t)q->a, (int)q->lda, (const double *)(uintptr_t)q->x,
                 (int)q->incx, beta, (double *)(uintptr_t)q->y, (int)q->incy);
  }
  free(q);
}
#endif

static CUresult gemv_softgpu(rgpu_worker *w, const rgpu_msg_cublas_gemv_req *q, CUstream s) {
#ifdef RGPU_HAVE_OPENBLAS
  if (blas_load() < 0) return FAIL(CUDA_ERROR_NOT_SUPPORTED, "cublas on softgpu: %s", g_blas.err);
  if (q->m > INT32_MAX || q->n > INT32_MAX || q->lda > INT32_MAX || q->incx > INT32_MAX ||
      q->incx < -INT32_MAX || q->incy > INT32_MAX || q->incy < -INT32_MAX)
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "cublas on softgpu: sizes beyond 2^31-1");
  return cpu_call_enqueue(w, s, run_cpu_gemv, q, sizeof *q, "gemv");
#else
  (void)q;
  (void)s;
  return NO_OPENBLAS("gemv");
#endif
}

static CUresult gemv_gpu(rgpu_worker *w, const rgpu_msg_cublas_gemv_req *q, CUstream s) {
  gpu_slot *slot;
  CUresult r = gpu_handle(w, s, CUBLAS_DEFAULT_MATH, q->pointer_mode, &slot);
  if (r) return r;
  cublasHandle_t h = slot->h;
  int dev_scalars = q->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  int wide = q->m > INT32_MAX || q->n > INT32_MAX || q->lda > INT32_MAX || q->incx > INT32_MAX ||
             q->incx < INT32_MIN || q->incy > INT32_MAX || q->incy < INT32_MIN;
  cublasOperation_t t = (cublasOperation_t)q->trans;
  cublasStatus_t st;
  if (q->dtype == CUDA_R_32F) {
    float alpha = (float)q->alpha, beta = (float)q->beta;
    const float *pa = dev_scalars ? (const float *)(uintptr_t)q->alpha_dev : &alpha;
    const float *pb = dev_scalars ? (const float *)(uintptr_t)q->beta_dev : &beta;
    const float *A = (const float *)(uintptr_t)q->a, *x = (const float *)(uintptr_t)q->x;
    float *y = (float *)(uintptr_t)q->y;
    st = wide ? g_lib.cublasSgemv_v2_64(h, t, q->m, q->n, pa, A, q->lda, x, q->incx, pb, y,
                                        q->incy)
              : g_lib.cublasSgemv_v2(h, t, (int)q->m, (int)q->n, pa, A, (int)q->lda, x,
                                     (int)q->incx, pb, y, (int)q->incy);
  } else {
    const double *pa = dev_scalars ? (const double *)(uintptr_t)q->alpha_dev : &q->alpha;
    const double *pb = dev_scalars ? (const double *)(uintptr_t)q->beta_dev : &q->beta;
    const double *A = (const double *)(uintptr_t)q->a, *x = (const double *)(uintptr_t)q->x;
    double *y = (double *)(uintptr_t)q->y;
    st = wide ? g_lib.cublasDgemv_v2_64(h, t, q->m, q->n, pa, A, q->lda, x, q->incx, pb, y,
                                        q->incy)
              : g_lib.cublasDgemv_v2(h, t, (int)q->m, (int)q->n, pa, A, (int)q->lda, x,
                                     (int)q->incx, pb, y, (int)q->incy);
  }
  if (st != CUBLAS_STATUS_SUCCESS)
    return FAIL(CUDA_ERROR_LAUNCH_FAILED, "cublas%cgemv: status %d",
                q->dtype == CUDA_R_32F ? 'S' : 'D', (int)st);
  return CUDA_SUCCESS;
}

CUresult rgpu_h_cublas_gemv(rgpu_req *rq, const rgpu_msg_cublas_gemv_req *q) {
  rgpu_worker *w = rq->w;
  if (q->dtype != CUDA_R_32F && q->dtype != CUDA_R_64F)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cublas gemv: data type %u (must be CUDA_R_32F or "
                "CUDA_R_64F)", q->dtype);
  if (q->trans > CUBLAS_OP_C || q->pointer_mode > CUBLAS_POINTER_MODE_DEVICE || q->m < 0 ||
      q->n < 0 || q->incx == 0 || q->incy == 0)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cublas gemv: bad operation, pointer mode, size or "
                "increment");
  if (q->m == 0 || q->n == 0) return CUDA_SUCCESS;
  size_t elem = q->dtype == CUDA_R_32F ? 4 : 8;
  int nt = q->trans == CUBLAS_OP_N;
  CUresult r = check_matrix(w, "A", q->a, q->m, q->n, q->lda, 1, 0, elem);
  if (!r) r = check_vector(w, "x", q->x, nt ? q->n : q->m, q->incx, elem);
  if (!r) r = check_vector(w, "y", q->y, nt ? q->m : q->n, q->incy, elem);
  if (r) return r;
  if (q->pointer_mode == CUBLAS_POINTER_MODE_DEVICE &&
      (!rgpu_alloc_table_lookup(&w->allocs, q->alpha_dev, elem) ||
       !rgpu_alloc_table_lookup(&w->allocs, q->beta_dev, elem)))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cublas gemv: device-mode alpha or beta is not inside "
                "a device allocation of this session");
  CUstream s;
  if ((r = get_stream(w, q->stream, &s))) return r;
  return D->is_softgpu ? gemv_softgpu(w, q, s) : gemv_gpu(w, q, s);
}
