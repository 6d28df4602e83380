// rgpu-nvcc-flags: -lcublas
// CUBLAS_POINTER_MODE_DEVICE scalars are read where the call stands in its
// stream, not when it is made: gemm, axpy and gemv (S and D) take alpha and
// beta from device memory that a kernel rewrites between the calls, all
// queued before anything is read back; each call must have used the values
// the kernel before it wrote.  Host and device mode calls interleave on one
// handle, and cublasGetPointerMode reports what cublasSetPointerMode set.
#include <cmath>
#include <vector>

#include "rgpu_cublas_check.h"

static double val(int which, long i) { return ((i * 23 + which * 17) % 41) / 20.5 - 1.0; }

template <typename T> __global__ void set_scalars(T *p, T alpha, T beta) {
  p[0] = alpha;
  p[1] = beta;
}

template <typename T> struct Ops;
template <> struct Ops<float> {
  static const char *name() { return "S"; }
  static double tol() { return 1e-4; }
  static cublasStatus_t gemm(cublasHandle_t h, int m, int n, int k, const float *al,
                             const float *A, const float *B, const float *be, float *C) {
    return cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, al, A, m, B, n, be, C, m);
  }
  static cublasStatus_t axpy(cublasHandle_t h, int n, const float *al, const float *x, float *y) {
    return cublasSaxpy(h, n, al, x, 1, y, 1);
  }
  static cublasStatus_t gemv(cublasHandle_t h, int m, int n, const float *al, const float *A,
                             const float *x, const float *be, float *y) {
    return cublasSgemv(h, CUBLAS_OP_T, m, n, al, A, m, x, 1, be, y, 1);
  }
};
template <> struct Ops<double> {
  static const char *name() { return "D"; }
  static double tol() { return 1e-12; }
  static cublasStatus_t gemm(cublasHandle_t h, int m, int n, int k, const double *al,
                             const double *A, const double *B, const double *be, double *C) {
    return cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, al, A, m, B, n, be, C, m);
  }
  static cublasStatus_t axpy(cublasHandle_t h, int n, const double *al, const double *x,
                             double *y) {
    return cublasDaxpy(h, n, al, x, 1, y, 1);
  }
  static cublasStatus_t gemv(cublasHandle_t h, int m, int n, const double *al, const double *A,
                             const double *x, const double *be, double *y) {
    return cublasDgemv(h, CUBLAS_OP_T, m, n, al, A, m, x, 1, be, y, 1);
  }
};

template <typename T> static T *upload(cudaStream_t s, const std::vector<T> &v) {
  T *d;
  CHECK(cudaMalloc(&d, v.size() * sizeof(T)));
  CHECK(cudaMemcpyAsync(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, s));
  return d;
}
template <typename T> static std::vector<T> download(cudaStream_t s, const T *d, size_t n) {
  std::vector<T> v(n);
  CHECK(cudaMemcpyAsync(v.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  return v;
}
template <typename T> static std::vector<T> filled(int which, size_t n) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; i++) v[i] = (T)val(which, (long)i);
  return v;
}

template <typename T>
static void expect_close(const char *what, const std::vector<T> &got, const std::vector<double> &ref) {
  double worst = 0;
  for (size_t i = 0; i < ref.size(); i++) worst = std::fmax(worst, rel_err((double)got[i], ref[i]));
  if (worst > Ops<T>::tol()) {
    std::fprintf(stderr, "FAIL %s%s: relative error %g\n", Ops<T>::name(), what, worst);
    std::exit(1);
  }
}

// The scalar pairs each call must see, in stream order.
static const double kAlpha[] = {1.5, -0.25, 3.0, 0.5, -2.0, 1.25};
static const double kBeta[] = {-0.5, 2.0, 0.0, 1.0, 0.75, -1.0};

template <typename T> static void suite(cublasHandle_t h, cudaStream_t s) {
  const int m = 19, n = 14, k = 11, len = 301;
  std::vector<T> a = filled<T>(1, (size_t)m * k), b = filled<T>(2, (size_t)n * k);
  std::vector<T> c0 = filled<T>(3, (size_t)m * n);
  std::vector<T> x = filled<T>(4, len), y0 = filled<T>(5, len);
  std::vector<T> ga = filled<T>(6, (size_t)m * n), gx = filled<T>(7, m), gy0 = filled<T>(8, n);
  T *dA = upload(s, a), *dB = upload(s, b), *dC1 = upload(s, c0), *dC2 = upload(s, c0);
  T *dx = upload(s, x), *dy1 = upload(s, y0), *dy2 = upload(s, y0);
  T *dgA = upload(s, ga), *dgx = upload(s, gx), *dgy1 = upload(s, gy0), *dgy2 = upload(s, gy0);
  T *dsc;
  CHECK(cudaMalloc(&dsc, 2 * sizeof(T)));

  // Round r: a kernel writes pair r, then one call reads it.  Host-mode
  // calls in between use other values and must not disturb the device ones.
  T host_alpha = (T)-3, host_beta = (T)0.25;
  int r = 0;
  auto next = [&]() {
    set_scalars<T><<<1, 1, 0, s>>>(dsc, (T)kAlpha[r], (T)kBeta[r]);
    CHECK(cudaGetLastError());
    r++;
  };
  CB(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
  next();
  CB(Ops<T>::gemm(h, m, n, k, dsc, dA, dB, dsc + 1, dC1));  // pair 0
  next();
  CB(Ops<T>::gemm(h, m, n, k, dsc, dA, dB, dsc + 1, dC2));  // pair 1
  next();
  CB(Ops<T>::axpy(h, len, dsc, dx, dy1));  // pair 2 (axpy has no beta)
  CB(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
  CB(Ops<T>::axpy(h, len, &host_alpha, dx, dy2));
  CB(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
  next();
  CB(Ops<T>::gemv(h, m, n, dsc, dgA, dgx, dsc + 1, dgy1));  // pair 3
  CB(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
  CB(Ops<T>::gemv(h, m, n, &host_alpha, dgA, dgx, &host_beta, dgy2));
  CB(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
  next();
  // The last device-mode call again chains on C1: pair 4 over pair 0's result.
  CB(Ops<T>::gemm(h, m, n, k, dsc, dA, dB, dsc + 1, dC1));
  next();  // written after every call: must change nothing already queued
  CB(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
  // Host-mode scalars are read at the call: changing them afterwards is harmless.
  host_alpha = (T)100;
  host_beta = (T)100;

  std::vector<T> c1 = download(s, dC1, c0.size()), c2 = download(s, dC2, c0.size());
  std::vector<T> y1 = download(s, dy1, len), y2 = download(s, dy2, len);
  std::vector<T> gy1 = download(s, dgy1, n), gy2 = download(s, dgy2, n);
  std::vector<T> last = download(s, dsc, 2);
  EXPECT((double)last[0] == kAlpha[5] && (double)last[1] == kBeta[5]);

  // References: C = alpha A B^T + beta C, y = alpha x + y, y = alpha A^T x + beta y.
  std::vector<double> ab((size_t)m * n);
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double acc = 0;
      for (int q = 0; q < k; q++) acc += (double)a[(size_t)q * m + i] * (double)b[(size_t)q * n + j];
      ab[(size_t)j * m + i] = acc;
    }
  std::vector<double> rc1(ab.size()), rc2(ab.size());
  for (size_t i = 0; i < ab.size(); i++) {
    double first = kAlpha[0] * ab[i] + kBeta[0] * (double)c0[i];
    rc1[i] = kAlpha[4] * ab[i] + kBeta[4] * first;
    rc2[i] = kAlpha[1] * ab[i] + kBeta[1] * (double)c0[i];
  }
  std::vector<double> ry1(len), ry2(len);
  for (int i = 0; i < len; i++) {
    ry1[i] = kAlpha[2] * (double)x[i] + (double)y0[i];
    ry2[i] = -3.0 * (double)x[i] + (double)y0[i];
  }
  std::vector<double> rg1(n), rg2(n);
  for (int j = 0; j < n; j++) {
    double acc = 0;
    for (int i = 0; i < m; i++) acc += (double)ga[(size_t)j * m + i] * (double)gx[i];
    rg1[j] = kAlpha[3] * acc + kBeta[3] * (double)gy0[j];
    rg2[j] = -3.0 * acc + 0.25 * (double)gy0[j];
  }
  expect_close("gemm pair 0 then pair 4", c1, rc1);
  expect_close("gemm pair 1", c2, rc2);
  expect_close("axpy device alpha", y1, ry1);
  expect_close("axpy host alpha", y2, ry2);
  expect_close("gemv device scalars", gy1, rg1);
  expect_close("gemv host scalars", gy2, rg2);
  std::printf("%s gemm/axpy/gemv: device scalars rewritten by kernels between calls ok\n",
              Ops<T>::name());
  for (T *d : {dA, dB, dC1, dC2, dx, dy1, dy2, dgA, dgx, dgy1, dgy2, dsc}) CHECK(cudaFree(d));
}

int main() {
  cublasHandle_t h;
  CB(cublasCreate(&h));
  cublasPointerMode_t pm = CUBLAS_POINTER_MODE_DEVICE;
  CB(cublasGetPointerMode(h, &pm));
  EXPECT(pm == CUBLAS_POINTER_MODE_HOST);  // a new handle's mode
  CB(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
  CB(cublasGetPointerMode(h, &pm));
  EXPECT(pm == CUBLAS_POINTER_MODE_DEVICE);
  CB(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
  CB(cublasGetPointerMode(h, &pm));
  EXPECT(pm == CUBLAS_POINTER_MODE_HOST);
  // The mode belongs to the handle: a second handle keeps its own.
  cublasHandle_t h2;
  CB(cublasCreate(&h2));
  CB(cublasSetPointerMode(h2, CUBLAS_POINTER_MODE_DEVICE));
  CB(cublasGetPointerMode(h, &pm));
  EXPECT(pm == CUBLAS_POINTER_MODE_HOST);
  CB(cublasGetPointerMode(h2, &pm));
  EXPECT(pm == CUBLAS_POINTER_MODE_DEVICE);
  CB(cublasDestroy(h2));
  std::printf("pointer mode round trip ok\n");

  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CB(cublasSetStream(h, s));
  suite<float>(h, s);
  suite<double>(h, s);
  CB(cublasDestroy(h));
  CHECK(cudaStreamDestroy(s));
  pass("cublas_pointer_mode");
  return 0;
}
