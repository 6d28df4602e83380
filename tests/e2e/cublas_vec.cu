// rgpu-nvcc-flags: -lcublas
// cuBLAS level-1 routines without a result through rgpu's libcublas.so.13
// facade (issue 16): axpy and scal in S and D, their _64 forms, strided
// vectors (elements between them untouched), a device-mode alpha; checked
// against a host reference.  Values are multiples of 1/4 so every result is
// exact.
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

static double val(int which, int i) { return (((i * 7 + which * 3) % 17) - 8) / 4.0; }

template <typename T> struct L1;
template <> struct L1<float> {
  static const char *name() { return "S"; }
  static cublasStatus_t axpy(cublasHandle_t h, bool w, int n, const float *a, const float *x,
                             int incx, float *y, int incy) {
    return w ? cublasSaxpy_64(h, n, a, x, incx, y, incy) : cublasSaxpy(h, n, a, x, incx, y, incy);
  }
  static cublasStatus_t scal(cublasHandle_t h, bool w, int n, const float *a, float *x, int incx) {
    return w ? cublasSscal_64(h, n, a, x, incx) : cublasSscal(h, n, a, x, incx);
  }
};
template <> struct L1<double> {
  static const char *name() { return "D"; }
  static cublasStatus_t axpy(cublasHandle_t h, bool w, int n, const double *a, const double *x,
                             int incx, double *y, int incy) {
    return w ? cublasDaxpy_64(h, n, a, x, incx, y, incy) : cublasDaxpy(h, n, a, x, incx, y, incy);
  }
  static cublasStatus_t scal(cublasHandle_t h, bool w, int n, const double *a, double *x,
                             int incx) {
    return w ? cublasDscal_64(h, n, a, x, incx) : cublasDscal(h, n, a, x, incx);
  }
};

// y = alpha x + y, then x = beta x; x and y strided.
template <typename T>
static void check(cublasHandle_t h, cudaStream_t s, int n, int incx, int incy, bool wide,
                  bool dev_alpha) {
  size_t nx = (size_t)(n - 1) * incx + 1, ny = (size_t)(n - 1) * incy + 1;
  std::vector<T> x(nx), y(ny), ox(nx), oy(ny);
  for (size_t i = 0; i < nx; i++) x[i] = (T)val(1, (int)i);
  for (size_t i = 0; i < ny; i++) y[i] = (T)val(2, (int)i);
  T alpha = (T)1.25, beta = (T)-0.5;
  T *dx, *dy, *da;
  CHECK(cudaMalloc(&dx, nx * sizeof(T)));
  CHECK(cudaMalloc(&dy, ny * sizeof(T)));
  CHECK(cudaMalloc(&da, sizeof(T)));
  CHECK(cudaMemcpyAsync(dx, x.data(), nx * sizeof(T), cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(dy, y.data(), ny * sizeof(T), cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(da, &alpha, sizeof(T), cudaMemcpyHostToDevice, s));
  if (dev_alpha) CB(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
  CB(L1<T>::axpy(h, wide, n, dev_alpha ? da : &alpha, dx, incx, dy, incy));
  CB(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
  CB(L1<T>::scal(h, wide, n, &beta, dx, incx));
  CHECK(cudaMemcpyAsync(ox.data(), dx, nx * sizeof(T), cudaMemcpyDeviceToHost, s));
  CHECK(cudaMemcpyAsync(oy.data(), dy, ny * sizeof(T), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (size_t i = 0; i < ny; i++) {
    T want = i % incy ? y[i] : (T)(1.25 * (double)x[i / incy * incx] + (double)y[i]);
    EXPECT(oy[i] == want);
  }
  for (size_t i = 0; i < nx; i++) EXPECT(ox[i] == (i % incx ? x[i] : (T)(-0.5 * (double)x[i])));
  std::printf("%saxpy/%sscal%s n %d incx %d incy %d%s ok\n", L1<T>::name(), L1<T>::name(),
              wide ? "_64" : "", n, incx, incy, dev_alpha ? " device alpha" : "");
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dy));
  CHECK(cudaFree(da));
}

int main() {
  cublasHandle_t h;
  CB(cublasCreate(&h));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CB(cublasSetStream(h, s));
  check<float>(h, s, 1000, 1, 1, false, false);
  check<float>(h, s, 333, 2, 3, true, false);
  check<double>(h, s, 517, 3, 1, false, true);
  check<double>(h, s, 64, 1, 2, true, false);
  CB(cublasDestroy(h));
  CHECK(cudaStreamDestroy(s));
  pass("cublas_vec");
  return 0;
}
