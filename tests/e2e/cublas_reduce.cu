// rgpu-nvcc-flags: -lcublas
// cuBLAS level-1 routines with a result (dot, nrm2, asum, iamax, iamin), S
// and D, plain and _64: the result in a host variable (host pointer mode,
// valid when the call returns) and in device memory (device pointer mode,
// written in stream order: a kernel that changes x between two calls shows
// that each call read x where it stands in the stream).  Strided vectors,
// negative increments for dot (BLAS's rule: the vector is walked from its
// far end), n = 0 and n = 1.  Values are multiples of 1/4, so dot and asum
// are exact whatever the summation order; nrm2 is compared within a
// relative tolerance and its value not printed.
#include <cmath>
#include <cstdint>
#include <vector>

#include "rgpu_cublas_check.h"

static double val(int which, long i) { return (((i * 7 + which * 3) % 17) - 8) / 4.0; }

template <typename T> struct Red;
template <> struct Red<float> {
  static const char *name() { return "S"; }
  static double tol() { return 3e-5; }
  static cublasStatus_t dot(cublasHandle_t h, bool w, int64_t n, const float *x, int64_t ix,
                            const float *y, int64_t iy, float *r) {
    return w ? cublasSdot_64(h, n, x, ix, y, iy, r) : cublasSdot(h, (int)n, x, (int)ix, y, (int)iy, r);
  }
  static cublasStatus_t nrm2(cublasHandle_t h, bool w, int64_t n, const float *x, int64_t ix,
                             float *r) {
    return w ? cublasSnrm2_64(h, n, x, ix, r) : cublasSnrm2(h, (int)n, x, (int)ix, r);
  }
  static cublasStatus_t asum(cublasHandle_t h, bool w, int64_t n, const float *x, int64_t ix,
                             float *r) {
    return w ? cublasSasum_64(h, n, x, ix, r) : cublasSasum(h, (int)n, x, (int)ix, r);
  }
  static cublasStatus_t iamax(cublasHandle_t h, int64_t n, const float *x, int64_t ix, int *r) {
    return cublasIsamax(h, (int)n, x, (int)ix, r);
  }
  static cublasStatus_t iamax(cublasHandle_t h, int64_t n, const float *x, int64_t ix,
                              int64_t *r) {
    return cublasIsamax_64(h, n, x, ix, r);
  }
  static cublasStatus_t iamin(cublasHandle_t h, int64_t n, const float *x, int64_t ix, int *r) {
    return cublasIsamin(h, (int)n, x, (int)ix, r);
  }
  static cublasStatus_t iamin(cublasHandle_t h, int64_t n, const float *x, int64_t ix,
                              int64_t *r) {
    return cublasIsamin_64(h, n, x, ix, r);
  }
};
template <> struct Red<double> {
  static const char *name() { return "D"; }
  static double tol() { return 1e-12; }
  static cublasStatus_t dot(cublasHandle_t h, bool w, int64_t n, const double *x, int64_t ix,
                            const double *y, int64_t iy, double *r) {
    return w ? cublasDdot_64(h, n, x, ix, y, iy, r) : cublasDdot(h, (int)n, x, (int)ix, y, (int)iy, r);
  }
  static cublasStatus_t nrm2(cublasHandle_t h, bool w, int64_t n, const double *x, int64_t ix,
                             double *r) {
    return w ? cublasDnrm2_64(h, n, x, ix, r) : cublasDnrm2(h, (int)n, x, (int)ix, r);
  }
  static cublasStatus_t asum(cublasHandle_t h, bool w, int64_t n, const double *x, int64_t ix,
                             double *r) {
    return w ? cublasDasum_64(h, n, x, ix, r) : cublasDasum(h, (int)n, x, (int)ix, r);
  }
  static cublasStatus_t iamax(cublasHandle_t h, int64_t n, const double *x, int64_t ix, int *r) {
    return cublasIdamax(h, (int)n, x, (int)ix, r);
  }
  static cublasStatus_t iamax(cublasHandle_t h, int64_t n, const double *x, int64_t ix,
                              int64_t *r) {
    return cublasIdamax_64(h, n, x, ix, r);
  }
  static cublasStatus_t iamin(cublasHandle_t h, int64_t n, const double *x, int64_t ix, int *r) {
    return cublasIdamin(h, (int)n, x, (int)ix, r);
  }
  static cublasStatus_t iamin(cublasHandle_t h, int64_t n, const double *x, int64_t ix,
                              int64_t *r) {
    return cublasIdamin_64(h, n, x, ix, r);
  }
};

// x[i * inc] *= f for the n elements of a strided vector (inc > 0).
template <typename T> __global__ void scale_strided(T *x, int n, int inc, T f) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[(size_t)i * inc] *= f;
}

// Where element i of an n-vector with increment inc lies (BLAS: a negative
// increment starts at the far end).
static size_t at(long i, long n, long inc) {
  return inc >= 0 ? (size_t)(i * inc) : (size_t)((n - 1 - i) * -inc);
}
static size_t span(long n, long inc) { return n <= 0 ? 1 : (size_t)((n - 1) * std::labs(inc) + 1); }

// The host reference of one vector pair.
struct Ref {
  double dot, nrm2, asum;
  long iamax, iamin;  // 1-based, the smallest index among equals (cuBLAS's rule)
};
template <typename T>
static Ref reference(const std::vector<T> &x, long incx, const std::vector<T> &y, long incy,
                     long n) {
  Ref r = {0, 0, 0, 0, 0};
  double best = -1, least = 0;
  for (long i = 0; i < n; i++) {
    double xi = (double)x[at(i, n, incx)];
    r.dot += xi * (double)y[at(i, n, incy)];
    r.nrm2 += xi * xi;
    r.asum += std::fabs(xi);
    if (std::fabs(xi) > best) best = std::fabs(xi), r.iamax = i + 1;
    if (i == 0 || std::fabs(xi) < least) least = std::fabs(xi), r.iamin = i + 1;
  }
  r.nrm2 = std::sqrt(r.nrm2);
  return r;
}

// The values of x (span sx) and y: a unique largest magnitude at `peak`
// (0-based element, -1 for none: the pattern's own ties then decide).
template <typename T>
static void fill(std::vector<T> &x, std::vector<T> &y, long n, long incx, long peak) {
  for (size_t i = 0; i < x.size(); i++) x[i] = (T)val(1, (long)i);
  for (size_t i = 0; i < y.size(); i++) y[i] = (T)val(2, (long)i);
  if (peak >= 0 && peak < n) x[at(peak, n, incx)] = (T)-3.25;
}

// Every routine on one vector pair, results in host variables.
template <typename T, typename I>
static void check_host(cublasHandle_t h, cudaStream_t s, long n, long incx, long incy, bool wide,
                       long peak) {
  std::vector<T> x(span(n, incx)), y(span(n, incy));
  fill(x, y, n, incx, peak);
  T *dx, *dy;
  CHECK(cudaMalloc(&dx, x.size() * sizeof(T)));
  CHECK(cudaMalloc(&dy, y.size() * sizeof(T)));
  CHECK(cudaMemcpyAsync(dx, x.data(), x.size() * sizeof(T), cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(dy, y.data(), y.size() * sizeof(T), cudaMemcpyHostToDevice, s));
  Ref ref = reference(x, incx, y, incy, n);
  // Sentinels: each call must overwrite its result, with 0 where n is 0.
  T dot = (T)7, nrm2 = (T)7, asum = (T)7;
  I imax = 7, imin = 7;
  CB(Red<T>::dot(h, wide, n, dx, incx, dy, incy, &dot));
  EXPECT((double)dot == (double)(T)ref.dot);
  if (incx > 0) {
    CB(Red<T>::nrm2(h, wide, n, dx, incx, &nrm2));
    CB(Red<T>::asum(h, wide, n, dx, incx, &asum));
    CB(Red<T>::iamax(h, n, dx, incx, &imax));
    CB(Red<T>::iamin(h, n, dx, incx, &imin));
    if (rel_err((double)nrm2, ref.nrm2) > Red<T>::tol()) {
      std::fprintf(stderr, "FAIL %snrm2 n %ld incx %ld: %.17g, expected %.17g\n", Red<T>::name(),
                   n, incx, (double)nrm2, ref.nrm2);
      std::exit(1);
    }
    EXPECT((double)asum == (double)(T)ref.asum);
    EXPECT((long)imax == ref.iamax);
    EXPECT((long)imin == ref.iamin);
    std::printf("%s%s n %ld incx %ld incy %ld host: dot %.10g nrm2 ok asum %.10g iamax %ld "
                "iamin %ld ok\n",
                Red<T>::name(), wide ? " _64" : "", n, incx, incy, (double)dot, (double)asum,
                (long)imax, (long)imin);
  } else {
    std::printf("%s%s n %ld incx %ld incy %ld host: dot %.10g ok\n", Red<T>::name(),
                wide ? " _64" : "", n, incx, incy, (double)dot);
  }
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dy));
}

// Device pointer mode: every result in device memory, then x scaled by -2
// by a kernel on the same stream, then the routines again into other slots.
// Nothing is read back until the end: the first results must be those of the
// first x, the second of the scaled one.
template <typename T, typename I>
static void check_device(cublasHandle_t h, cudaStream_t s, long n, long incx, long incy,
                         bool wide) {
  std::vector<T> x(span(n, incx)), y(span(n, incy));
  fill(x, y, n, incx, n / 3);
  T *dx, *dy, *dres;
  I *dind;
  CHECK(cudaMalloc(&dx, x.size() * sizeof(T)));
  CHECK(cudaMalloc(&dy, y.size() * sizeof(T)));
  CHECK(cudaMalloc(&dres, 6 * sizeof(T)));
  CHECK(cudaMalloc(&dind, 4 * sizeof(I)));
  CHECK(cudaMemcpyAsync(dx, x.data(), x.size() * sizeof(T), cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(dy, y.data(), y.size() * sizeof(T), cudaMemcpyHostToDevice, s));
  CHECK(cudaMemsetAsync(dres, 0xff, 6 * sizeof(T), s));
  CHECK(cudaMemsetAsync(dind, 0xff, 4 * sizeof(I), s));
  Ref ref = reference(x, incx, y, incy, n);
  CB(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
  for (int round = 0; round < 2; round++) {
    if (round == 1) {
      scale_strided<T><<<(int)(n + 127) / 128, 128, 0, s>>>(dx, (int)n, (int)incx, (T)-2);
      CHECK(cudaGetLastError());
    }
    CB(Red<T>::dot(h, wide, n, dx, incx, dy, incy, dres + 3 * round));
    CB(Red<T>::nrm2(h, wide, n, dx, incx, dres + 3 * round + 1));
    CB(Red<T>::asum(h, wide, n, dx, incx, dres + 3 * round + 2));
    CB(Red<T>::iamax(h, n, dx, incx, dind + 2 * round));
    CB(Red<T>::iamin(h, n, dx, incx, dind + 2 * round + 1));
  }
  CB(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
  T res[6];
  I ind[4];
  CHECK(cudaMemcpyAsync(res, dres, sizeof res, cudaMemcpyDeviceToHost, s));
  CHECK(cudaMemcpyAsync(ind, dind, sizeof ind, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int round = 0; round < 2; round++) {
    double f = round ? -2.0 : 1.0;
    EXPECT((double)res[3 * round] == (double)(T)(f * ref.dot));
    if (rel_err((double)res[3 * round + 1], std::fabs(f) * ref.nrm2) > Red<T>::tol()) {
      std::fprintf(stderr, "FAIL %snrm2 device round %d: %.17g, expected %.17g\n", Red<T>::name(),
                   round, (double)res[3 * round + 1], std::fabs(f) * ref.nrm2);
      std::exit(1);
    }
    EXPECT((double)res[3 * round + 2] == (double)(T)(std::fabs(f) * ref.asum));
    EXPECT((long)ind[2 * round] == ref.iamax);
    EXPECT((long)ind[2 * round + 1] == ref.iamin);
  }
  std::printf("%s%s n %ld incx %ld incy %ld device: dot %.10g then %.10g, asum %.10g then %.10g, "
              "iamax %ld, iamin %ld ok\n",
              Red<T>::name(), wide ? " _64" : "", n, incx, incy, (double)res[0], (double)res[3],
              (double)res[2], (double)res[5], (long)ind[0], (long)ind[1]);
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dy));
  CHECK(cudaFree(dres));
  CHECK(cudaFree(dind));
}

template <typename T> static void suite(cublasHandle_t h, cudaStream_t s) {
  check_host<T, int>(h, s, 1000, 1, 1, false, 617);
  check_host<T, int64_t>(h, s, 333, 2, 3, true, 100);
  check_host<T, int>(h, s, 257, 3, 1, false, -1);  // ties: the first index wins
  check_host<T, int>(h, s, 1, 1, 1, false, -1);
  check_host<T, int64_t>(h, s, 1, 4, 2, true, 0);
  check_host<T, int>(h, s, 0, 1, 1, false, -1);
  check_host<T, int64_t>(h, s, 0, 1, 1, true, -1);
  // Negative increments (dot only: BLAS walks x or y from its far end).
  check_host<T, int>(h, s, 211, -2, 3, false, -1);
  check_host<T, int64_t>(h, s, 150, 1, -1, true, -1);
  check_host<T, int>(h, s, 99, -3, -2, false, -1);
  check_device<T, int>(h, s, 500, 1, 1, false);
  check_device<T, int64_t>(h, s, 171, 2, 5, true);
  check_device<T, int>(h, s, 1, 1, 1, false);
}

int main() {
  cublasHandle_t h;
  CB(cublasCreate(&h));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CB(cublasSetStream(h, s));
  suite<float>(h, s);
  suite<double>(h, s);
  // A negative n: printed (status and result), not asserted.
  float *dx, r = 7.0f;
  int ir = 7;
  CHECK(cudaMalloc(&dx, 4 * sizeof(float)));
  CHECK(cudaMemset(dx, 0, 4 * sizeof(float)));
  cublasStatus_t st = cublasSdot(h, -3, dx, 1, dx, 1, &r);
  std::printf("Sdot n -3 -> %s result %g\n", cublasGetStatusName(st), (double)r);
  r = 7.0f;
  st = cublasSnrm2(h, -3, dx, 1, &r);
  std::printf("Snrm2 n -3 -> %s result %g\n", cublasGetStatusName(st), (double)r);
  st = cublasIsamax(h, -3, dx, 1, &ir);
  std::printf("Isamax n -3 -> %s result %d\n", cublasGetStatusName(st), ir);
  CHECK(cudaFree(dx));
  CB(cublasDestroy(h));
  CHECK(cudaStreamDestroy(s));
  pass("cublas_reduce");
  return 0;
}
