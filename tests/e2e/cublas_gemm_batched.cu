// rgpu-nvcc-flags: -lcublas
// cuBLAS's _64 and strided-batched gemms through rgpu's libcublas.so.13
// facade (issue 16): cublas[SD]gemm_v2_64, cublas[SD]gemmStridedBatched and
// their _64 forms, with B shared by every batch (stride 0) and gaps between
// the C matrices (left untouched), checked against a host reference.
#include <cmath>
#include <cstdint>
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

enum Form { PLAIN64, STRIDED, STRIDED64 };
static const char *form_name(Form f) {
  return f == PLAIN64 ? "gemm_v2_64" : f == STRIDED ? "gemmStridedBatched" : "gemmStridedBatched_64";
}

static double val(int which, long i) { return ((i * 29 + which * 7) % 53) / 26.5 - 1.0; }

template <typename T> struct Ops;
template <> struct Ops<float> {
  static const char *name() { return "S"; }
  static double tol() { return 1e-4; }
  static cublasStatus_t run(Form f, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                            int m, int n, int k, const float *al, const float *A, int lda,
                            long long sa, const float *B, int ldb, long long sb, const float *be,
                            float *C, int ldc, long long sc, int batch) {
    if (f == PLAIN64) return cublasSgemm_64(h, ta, tb, m, n, k, al, A, lda, B, ldb, be, C, ldc);
    if (f == STRIDED)
      return cublasSgemmStridedBatched(h, ta, tb, m, n, k, al, A, lda, sa, B, ldb, sb, be, C, ldc,
                                       sc, batch);
    return cublasSgemmStridedBatched_64(h, ta, tb, m, n, k, al, A, lda, sa, B, ldb, sb, be, C,
                                        ldc, sc, batch);
  }
};
template <> struct Ops<double> {
  static const char *name() { return "D"; }
  static double tol() { return 1e-12; }
  static cublasStatus_t run(Form f, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                            int m, int n, int k, const double *al, const double *A, int lda,
                            long long sa, const double *B, int ldb, long long sb, const double *be,
                            double *C, int ldc, long long sc, int batch) {
    if (f == PLAIN64) return cublasDgemm_64(h, ta, tb, m, n, k, al, A, lda, B, ldb, be, C, ldc);
    if (f == STRIDED)
      return cublasDgemmStridedBatched(h, ta, tb, m, n, k, al, A, lda, sa, B, ldb, sb, be, C, ldc,
                                       sc, batch);
    return cublasDgemmStridedBatched_64(h, ta, tb, m, n, k, al, A, lda, sa, B, ldb, sb, be, C,
                                        ldc, sc, batch);
  }
};

template <typename T>
static void check(cublasHandle_t h, cudaStream_t s, Form f, cublasOperation_t ta,
                  cublasOperation_t tb, int m, int n, int k, int batch) {
  if (f == PLAIN64) batch = 1;
  int ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
  int br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
  int lda = ar + 1, ldb = br + 2, ldc = m + 1;
  long long sa = (long long)lda * ac, sb = 0, sc = (long long)ldc * n + 5;  // gaps after each C
  std::vector<T> a((size_t)sa * batch), b((size_t)ldb * bc), c((size_t)sc * batch), out(c.size());
  for (size_t i = 0; i < a.size(); i++) a[i] = (T)val(1, (long)i);
  for (size_t i = 0; i < b.size(); i++) b[i] = (T)val(2, (long)i);
  for (size_t i = 0; i < c.size(); i++) c[i] = (T)val(3, (long)i);
  T alpha = (T)0.75, beta = (T)2;
  T *da, *db, *dc;
  CHECK(cudaMalloc(&da, a.size() * sizeof(T)));
  CHECK(cudaMalloc(&db, b.size() * sizeof(T)));
  CHECK(cudaMalloc(&dc, c.size() * sizeof(T)));
  CHECK(cudaMemcpyAsync(da, a.data(), a.size() * sizeof(T), cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(db, b.data(), b.size() * sizeof(T), cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(dc, c.data(), c.size() * sizeof(T), cudaMemcpyHostToDevice, s));
  CB(Ops<T>::run(f, h, ta, tb, m, n, k, &alpha, da, lda, sa, db, ldb, sb, &beta, dc, ldc, sc,
                 batch));
  CHECK(cudaMemcpyAsync(out.data(), dc, out.size() * sizeof(T), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  double worst = 0;
  for (int p = 0; p < batch; p++) {
    const T *A = a.data() + (size_t)p * sa;
    for (long long at = 0; at < sc; at++) {
      size_t idx = (size_t)p * sc + at;
      int i = (int)(at % ldc), j = (int)(at / ldc);
      if (i >= m || j >= n) {  // padding and gaps: untouched
        EXPECT(out[idx] == c[idx]);
        continue;
      }
      double ref = 0;
      for (int q = 0; q < k; q++) {
        double x = ta == CUBLAS_OP_N ? A[(size_t)q * lda + i] : A[(size_t)i * lda + q];
        double y = tb == CUBLAS_OP_N ? b[(size_t)j * ldb + q] : b[(size_t)q * ldb + j];
        ref += x * y;
      }
      ref = 0.75 * ref + 2.0 * (double)c[idx];
      double err = std::fabs((double)out[idx] - ref) / (1.0 + std::fabs(ref));
      if (err > worst) worst = err;
    }
  }
  if (worst > Ops<T>::tol()) {
    std::fprintf(stderr, "FAIL %s%s: relative error %g\n", Ops<T>::name(), form_name(f), worst);
    std::exit(1);
  }
  std::printf("%s%s %s%s %dx%dx%d batch %d ok\n", Ops<T>::name(), form_name(f),
              ta == CUBLAS_OP_N ? "N" : "T", tb == CUBLAS_OP_N ? "N" : "T", m, n, k, batch);
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dc));
}

int main() {
  cublasHandle_t h;
  CB(cublasCreate(&h));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CB(cublasSetStream(h, s));
  const Form forms[] = {PLAIN64, STRIDED, STRIDED64};
  for (Form f : forms) {
    check<float>(h, s, f, CUBLAS_OP_N, CUBLAS_OP_T, 13, 9, 7, 4);
    check<double>(h, s, f, CUBLAS_OP_T, CUBLAS_OP_N, 11, 6, 10, 3);
  }
  CHECK(cudaStreamSynchronize(s));
  CB(cublasDestroy(h));
  CHECK(cudaStreamDestroy(s));
  pass("cublas_gemm_batched");
  return 0;
}
