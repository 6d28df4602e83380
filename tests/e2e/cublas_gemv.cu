// rgpu-nvcc-flags: -lcublas
// cublas[SD]gemv (and _64) through rgpu's libcublas.so.13 facade (issue
// 16): both operations, a padded leading dimension, strided x and y (the
// elements between left untouched), host and device scalars; checked
// against a host reference.  Values are multiples of 1/4, small enough that
// every result is exact.
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

static double val(int which, int i) { return (((i * 5 + which * 3) % 13) - 6) / 4.0; }

template <typename T> struct Gemv;
template <> struct Gemv<float> {
  static const char *name() { return "Sgemv"; }
  static cublasStatus_t run(cublasHandle_t h, bool w, cublasOperation_t t, int m, int n,
                            const float *al, const float *A, int lda, const float *x, int incx,
                            const float *be, float *y, int incy) {
    return w ? cublasSgemv_64(h, t, m, n, al, A, lda, x, incx, be, y, incy)
             : cublasSgemv(h, t, m, n, al, A, lda, x, incx, be, y, incy);
  }
};
template <> struct Gemv<double> {
  static const char *name() { return "Dgemv"; }
  static cublasStatus_t run(cublasHandle_t h, bool w, cublasOperation_t t, int m, int n,
                            const double *al, const double *A, int lda, const double *x, int incx,
                            const double *be, double *y, int incy) {
    return w ? cublasDgemv_64(h, t, m, n, al, A, lda, x, incx, be, y, incy)
             : cublasDgemv(h, t, m, n, al, A, lda, x, incx, be, y, incy);
  }
};

template <typename T>
static void check(cublasHandle_t h, cudaStream_t s, cublasOperation_t t, int m, int n, int incx,
                  int incy, bool wide, bool dev_scalars) {
  int lda = m + 3;
  int lx = t == CUBLAS_OP_N ? n : m, ly = t == CUBLAS_OP_N ? m : n;
  size_t na = (size_t)lda * n, nx = (size_t)(lx - 1) * incx + 1, ny = (size_t)(ly - 1) * incy + 1;
  std::vector<T> a(na), x(nx), y(ny), out(ny);
  for (size_t i = 0; i < na; i++) a[i] = (T)val(1, (int)i);
  for (size_t i = 0; i < nx; i++) x[i] = (T)val(2, (int)i);
  for (size_t i = 0; i < ny; i++) y[i] = (T)val(3, (int)i);
  T sc[2] = {(T)0.5, (T)-2};
  T *da, *dx, *dy, *ds;
  CHECK(cudaMalloc(&da, na * sizeof(T)));
  CHECK(cudaMalloc(&dx, nx * sizeof(T)));
  CHECK(cudaMalloc(&dy, ny * sizeof(T)));
  CHECK(cudaMalloc(&ds, sizeof sc));
  CHECK(cudaMemcpyAsync(da, a.data(), na * sizeof(T), cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(dx, x.data(), nx * sizeof(T), cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(dy, y.data(), ny * sizeof(T), cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(ds, sc, sizeof sc, cudaMemcpyHostToDevice, s));
  if (dev_scalars) CB(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
  CB(Gemv<T>::run(h, wide, t, m, n, dev_scalars ? ds : &sc[0], da, lda, dx, incx,
                  dev_scalars ? ds + 1 : &sc[1], dy, incy));
  CB(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
  CHECK(cudaMemcpyAsync(out.data(), dy, ny * sizeof(T), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (size_t i = 0; i < ny; i++) {
    if (i % incy) {
      EXPECT(out[i] == y[i]);
      continue;
    }
    int r = (int)(i / incy);
    double ref = 0;
    for (int p = 0; p < lx; p++) {
      double av = t == CUBLAS_OP_N ? a[(size_t)p * lda + r] : a[(size_t)r * lda + p];
      ref += av * (double)x[(size_t)p * incx];
    }
    ref = 0.5 * ref - 2 * (double)y[i];
    EXPECT(out[i] == (T)ref);
  }
  std::printf("%s%s %s %dx%d incx %d incy %d%s ok\n", Gemv<T>::name(), wide ? "_64" : "",
              t == CUBLAS_OP_N ? "N" : "T", m, n, incx, incy, dev_scalars ? " device scalars" : "");
  CHECK(cudaFree(da));
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dy));
  CHECK(cudaFree(ds));
}

int main() {
  cublasHandle_t h;
  CB(cublasCreate(&h));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CB(cublasSetStream(h, s));
  check<float>(h, s, CUBLAS_OP_N, 37, 21, 1, 1, false, false);
  check<float>(h, s, CUBLAS_OP_T, 37, 21, 2, 3, true, false);
  check<double>(h, s, CUBLAS_OP_N, 19, 44, 3, 2, false, true);
  check<double>(h, s, CUBLAS_OP_T, 50, 8, 1, 1, true, false);
  CB(cublasDestroy(h));
  CHECK(cudaStreamDestroy(s));
  pass("cublas_gemv");
  return 0;
}
