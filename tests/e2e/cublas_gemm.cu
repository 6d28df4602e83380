// rgpu-nvcc-flags: -lcublas
// cuBLAS through rgpu's libcublas.so.13 facade (issue 16): a handle with
// its stream, modes and workspace; cublasSgemm_v2 and cublasDgemm_v2 with
// every transpose pair, padded leading dimensions, host scalars and device
// scalars (read in stream order), checked
// against a host reference (padding left untouched); cuBLAS's argument
// errors.  Natively the same program runs NVIDIA's cuBLAS.
#include <cmath>
#include <cublas_v2.h>
#include <vector>

#include "rgpu_check.h"

#define CB(call)                                                                  \
  do {                                                                            \
    cublasStatus_t st_ = (call);                                                  \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                           \
      std::fprintf(stderr, "FAIL %s:%d: %s -> %d\n", __FILE__, __LINE__, #call, (int)st_); \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

#define CB_EXPECT(call, want)                                                     \
  do {                                                                            \
    cublasStatus_t st_ = (call);                                                  \
    if (st_ != (want)) {                                                          \
      std::fprintf(stderr, "FAIL %s:%d: %s -> %d, expected %d\n", __FILE__, __LINE__, \
                   #call, (int)st_, (int)(want));                                 \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

static const char *op_name(cublasOperation_t op) { return op == CUBLAS_OP_N ? "N" : "T"; }

// A deterministic value in [-1, 1) for element i of matrix `which`.
static double val(int which, int i) { return ((i * 37 + which * 11) % 61) / 30.5 - 1.0; }

template <typename T> struct Gemm;
template <> struct Gemm<float> {
  static const char *name() { return "sgemm"; }
  static double tol() { return 1e-4; }
  static cublasStatus_t run(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const float *al, const float *A, int lda,
                            const float *B, int ldb, const float *be, float *C, int ldc) {
    return cublasSgemm(h, ta, tb, m, n, k, al, A, lda, B, ldb, be, C, ldc);
  }
};
template <> struct Gemm<double> {
  static const char *name() { return "dgemm"; }
  static double tol() { return 1e-12; }
  static cublasStatus_t run(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const double *al, const double *A, int lda,
                            const double *B, int ldb, const double *be, double *C, int ldc) {
    return cublasDgemm(h, ta, tb, m, n, k, al, A, lda, B, ldb, be, C, ldc);
  }
};

// C (m x n, ld m + 2) = alpha op(A) op(B) + beta C, A and B padded too.
// dev_scalars: alpha and beta in device memory (CUBLAS_POINTER_MODE_DEVICE),
// overwritten on the stream right after the call: the gemm, earlier in
// stream order, must still see the first values.
template <typename T>
static void check_gemm(cublasHandle_t h, cudaStream_t s, cublasOperation_t ta,
                       cublasOperation_t tb, int m, int n, int k, bool dev_scalars = false) {
  int ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
  int br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
  int lda = ar + 3, ldb = br + 1, ldc = m + 2;
  std::vector<T> a((size_t)lda * ac), b((size_t)ldb * bc), c((size_t)ldc * n), out(c.size());
  for (size_t i = 0; i < a.size(); i++) a[i] = (T)val(1, (int)i);
  for (size_t i = 0; i < b.size(); i++) b[i] = (T)val(2, (int)i);
  for (size_t i = 0; i < c.size(); i++) c[i] = (T)val(3, (int)i);
  T alpha = (T)1.5, beta = (T)-0.5;
  T *da, *db, *dc;
  CHECK(cudaMalloc(&da, a.size() * sizeof(T)));
  CHECK(cudaMalloc(&db, b.size() * sizeof(T)));
  CHECK(cudaMalloc(&dc, c.size() * sizeof(T)));
  CHECK(cudaMemcpyAsync(da, a.data(), a.size() * sizeof(T), cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(db, b.data(), b.size() * sizeof(T), cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(dc, c.data(), c.size() * sizeof(T), cudaMemcpyHostToDevice, s));
  if (dev_scalars) {
    T *dsc, later[2] = {(T)100, (T)100};
    CHECK(cudaMalloc(&dsc, 2 * sizeof(T)));
    CHECK(cudaMemcpyAsync(dsc, &alpha, sizeof(T), cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyAsync(dsc + 1, &beta, sizeof(T), cudaMemcpyHostToDevice, s));
    CHECK(cudaStreamSynchronize(s));
    CB(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
    CB(Gemm<T>::run(h, ta, tb, m, n, k, dsc, da, lda, db, ldb, dsc + 1, dc, ldc));
    CB(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    CHECK(cudaMemcpyAsync(dsc, later, sizeof later, cudaMemcpyHostToDevice, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaFree(dsc));
  } else {
    CB(Gemm<T>::run(h, ta, tb, m, n, k, &alpha, da, lda, db, ldb, &beta, dc, ldc));
    // The scalars were read at the call: changing them now changes nothing.
    alpha = 100;
    beta = 100;
  }
  CHECK(cudaMemcpyAsync(out.data(), dc, out.size() * sizeof(T), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  double worst = 0;
  for (int j = 0; j < n; j++) {
    for (int i = 0; i < ldc; i++) {
      size_t at = (size_t)j * ldc + i;
      if (i >= m) {  // padding rows: untouched
        EXPECT(out[at] == c[at]);
        continue;
      }
      double ref = 0;
      for (int p = 0; p < k; p++) {
        double x = ta == CUBLAS_OP_N ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
        double y = tb == CUBLAS_OP_N ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
        ref += x * y;
      }
      ref = 1.5 * ref - 0.5 * (double)c[at];
      double err = std::fabs((double)out[at] - ref) / (1.0 + std::fabs(ref));
      if (err > worst) worst = err;
    }
  }
  if (worst > Gemm<T>::tol()) {
    std::fprintf(stderr, "FAIL %s %s%s %dx%dx%d: relative error %g\n", Gemm<T>::name(),
                 op_name(ta), op_name(tb), m, n, k, worst);
    std::exit(1);
  }
  std::printf("%s %s%s %dx%dx%d%s ok\n", Gemm<T>::name(), op_name(ta), op_name(tb), m, n, k,
              dev_scalars ? " device scalars" : "");
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dc));
}

int main() {
  cublasHandle_t h;
  CB(cublasCreate(&h));

  int version = 0, major = 0;
  CB(cublasGetVersion(h, &version));
  CB(cublasGetProperty(MAJOR_VERSION, &major));
  EXPECT(major >= 13 && version / 10000 == major);

  cublasMath_t mm;
  CB(cublasGetMathMode(h, &mm));
  EXPECT(mm == CUBLAS_DEFAULT_MATH);
  CB(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));
  CB(cublasGetMathMode(h, &mm));
  EXPECT(mm == CUBLAS_PEDANTIC_MATH);
  cublasPointerMode_t pm;
  CB(cublasGetPointerMode(h, &pm));
  EXPECT(pm == CUBLAS_POINTER_MODE_HOST);

  // Default stream first, then a created one with a workspace of our own.
  cudaStream_t s0 = nullptr;
  CB(cublasGetStream(h, &s0));
  EXPECT(s0 == nullptr);
  check_gemm<float>(h, nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 37, 29, 23);

  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CB(cublasSetStream(h, s));
  CB(cublasGetStream(h, &s0));
  EXPECT(s0 == s);
  void *ws;
  CHECK(cudaMalloc(&ws, 4 << 20));
  CB(cublasSetWorkspace(h, ws, 4 << 20));

  const cublasOperation_t ops[] = {CUBLAS_OP_N, CUBLAS_OP_T};
  for (cublasOperation_t ta : ops)
    for (cublasOperation_t tb : ops) {
      check_gemm<float>(h, s, ta, tb, 37, 29, 23);
      check_gemm<double>(h, s, ta, tb, 33, 41, 19);
    }
  // k = 0: C = beta C.
  check_gemm<double>(h, s, CUBLAS_OP_N, CUBLAS_OP_N, 8, 5, 0);
  // Scalars on the device, read in stream order.
  check_gemm<float>(h, s, CUBLAS_OP_T, CUBLAS_OP_N, 21, 17, 13, true);
  check_gemm<double>(h, s, CUBLAS_OP_N, CUBLAS_OP_T, 19, 23, 11, true);

  // cuBLAS's argument checks.
  float one = 1, *dm;
  CHECK(cudaMalloc(&dm, 64 * sizeof(float)));
  CB_EXPECT(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 8, &one, dm, 4, dm, 8, &one, dm, 8),
            CUBLAS_STATUS_INVALID_VALUE);
  CB_EXPECT(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, 8, 8, &one, dm, 8, dm, 8, &one, dm, 8),
            CUBLAS_STATUS_INVALID_VALUE);
  CB_EXPECT(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, 8, 8, 8, &one, dm, 8, dm, 7, &one, dm, 8),
            CUBLAS_STATUS_INVALID_VALUE);
  // An empty product is a successful no-op.
  CB(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 0, 8, 8, &one, dm, 8, dm, 8, &one, dm, 8));
  CHECK(cudaStreamSynchronize(s));

  CHECK(cudaFree(dm));
  CB(cublasDestroy(h));
  CHECK(cudaFree(ws));
  CHECK(cudaStreamDestroy(s));
  pass("cublas_gemm");
  return 0;
}
