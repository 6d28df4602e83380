// rgpu-nvcc-flags: -lcublas
// cuBLAS routines that rgpu carries through its generated call layer
// without a hand-written line (issue 16: `default gen` in
// cublas/libcublas.annotations): copy, swap, geam, dgmm, trsm, symm, ger,
// complex gemm and dot, a pointer-array batched gemm, GemmStridedBatchedEx.
// Each result is checked against a host reference on small integers, so it
// is exact.  softgpu does not compute these (they need a GPU server): there
// a routine answers CUBLAS_STATUS_NOT_SUPPORTED at the call, which this
// program reports as "SKIP <routine>" and passes on, as a program with a
// fallback would.
#include <cublas_v2.h>
#include <cuComplex.h>
#include <cmath>
#include <vector>

#include "rgpu_check.h"

static int skipped = 0;

// A routine's status: success goes on, NOT_SUPPORTED skips the check
// (returns false), anything else fails the program.
static bool ran(cublasStatus_t st, const char *what) {
  if (st == CUBLAS_STATUS_SUCCESS) return true;
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) {
    std::printf("SKIP %s\n", what);
    skipped++;
    return false;
  }
  std::fprintf(stderr, "FAIL %s -> %d\n", what, (int)st);
  std::exit(1);
}

static float v(int i) { return (float)((i * 5 + 3) % 7 - 3); }

template <typename T> static T *dev(const std::vector<T> &h) {
  T *d;
  CHECK(cudaMalloc((void **)&d, h.size() * sizeof(T) + 16));
  CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}
template <typename T> static std::vector<T> back(const T *d, size_t n) {
  std::vector<T> h(n);
  CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

int main() {
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "FAIL cublasCreate\n");
    return 1;
  }
  const int n = 6;
  std::vector<float> x(n), y(n), A(n * n), B(n * n);
  for (int i = 0; i < n; i++) x[i] = v(i), y[i] = v(i + 11);
  for (int i = 0; i < n * n; i++) A[i] = v(i + 2), B[i] = v(i + 5);
  float one = 1, two = 2, mone = -1;

  // copy and swap
  {
    float *dx = dev(x), *dy = dev(y);
    if (ran(cublasScopy(h, n, dx, 1, dy, 1), "cublasScopy")) {
      std::vector<float> r = back(dy, n);
      for (int i = 0; i < n; i++) EXPECT(r[i] == x[i]);
      CHECK(cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice));
      std::printf("copy ok\n");
    }
    if (ran(cublasSswap(h, n, dx, 1, dy, 1), "cublasSswap")) {
      std::vector<float> rx = back(dx, n), ry = back(dy, n);
      for (int i = 0; i < n; i++) EXPECT(rx[i] == y[i] && ry[i] == x[i]);
      std::printf("swap ok\n");
    }
    CHECK(cudaFree(dx));
    CHECK(cudaFree(dy));
  }

  // geam: C = 2 A + (-1) B^T
  {
    float *dA = dev(A), *dB = dev(B), *dC = dev(std::vector<float>(n * n, 0));
    if (ran(cublasSgeam(h, CUBLAS_OP_N, CUBLAS_OP_T, n, n, &two, dA, n, &mone, dB, n, dC, n),
            "cublasSgeam")) {
      std::vector<float> r = back(dC, n * n);
      for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++) EXPECT(r[j * n + i] == 2 * A[j * n + i] - B[i * n + j]);
      std::printf("geam ok\n");
    }
    // dgmm: C = A diag(x)
    float *dx = dev(x);
    if (ran(cublasSdgmm(h, CUBLAS_SIDE_RIGHT, n, n, dA, n, dx, 1, dC, n), "cublasSdgmm")) {
      std::vector<float> r = back(dC, n * n);
      for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++) EXPECT(r[j * n + i] == A[j * n + i] * x[j]);
      std::printf("dgmm ok\n");
    }
    // ger: A += x y^T
    float *dy = dev(y);
    if (ran(cublasSger(h, n, n, &one, dx, 1, dy, 1, dA, n), "cublasSger")) {
      std::vector<float> r = back(dA, n * n);
      for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++) EXPECT(r[j * n + i] == A[j * n + i] + x[i] * y[j]);
      std::printf("ger ok\n");
    }
    CHECK(cudaFree(dA));
    CHECK(cudaFree(dB));
    CHECK(cudaFree(dC));
    CHECK(cudaFree(dx));
    CHECK(cudaFree(dy));
  }

  // trsm: solve L X = 2 B with L lower triangular, unit diagonal (exact)
  {
    std::vector<float> L(n * n, 0);
    for (int j = 0; j < n; j++)
      for (int i = j + 1; i < n; i++) L[j * n + i] = (float)((i + j) % 3 - 1);
    float *dL = dev(L), *dX = dev(B);
    if (ran(cublasStrsm(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N,
                        CUBLAS_DIAG_UNIT, n, n, &two, dL, n, dX, n),
            "cublasStrsm")) {
      std::vector<float> X = back(dX, n * n);
      for (int c = 0; c < n; c++)
        for (int i = 0; i < n; i++) {
          double s = X[c * n + i];
          for (int k = 0; k < i; k++) s += L[k * n + i] * X[c * n + k];
          EXPECT(std::fabs(s - 2 * B[c * n + i]) < 1e-3);
        }
      std::printf("trsm ok\n");
    }
    CHECK(cudaFree(dL));
    CHECK(cudaFree(dX));
  }

  // Complex: Cgemm and Cdotc
  {
    std::vector<cuComplex> ca(n * n), cb(n * n), cc(n * n, make_cuComplex(0, 0));
    for (int i = 0; i < n * n; i++) {
      ca[i] = make_cuComplex(v(i), v(i + 1));
      cb[i] = make_cuComplex(v(i + 3), v(i + 4));
    }
    cuComplex *da = dev(ca), *db = dev(cb), *dc = dev(cc);
    cuComplex alpha = make_cuComplex(1, 1), beta = make_cuComplex(0, 0);
    if (ran(cublasCgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, da, n, db, n, &beta, dc, n),
            "cublasCgemm")) {
      std::vector<cuComplex> r = back(dc, n * n);
      for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++) {
          cuComplex s = make_cuComplex(0, 0);
          for (int k = 0; k < n; k++) s = cuCaddf(s, cuCmulf(ca[k * n + i], cb[j * n + k]));
          s = cuCmulf(alpha, s);
          EXPECT(r[j * n + i].x == s.x && r[j * n + i].y == s.y);
        }
      std::printf("cgemm ok\n");
    }
    // Zgemm with A conjugate-transposed and B transposed.
    std::vector<cuDoubleComplex> za(n * n), zb(n * n), zc(n * n, make_cuDoubleComplex(1, -1));
    for (int i = 0; i < n * n; i++) {
      za[i] = make_cuDoubleComplex(v(i + 5), v(i + 2));
      zb[i] = make_cuDoubleComplex(v(i + 7), v(i + 1));
    }
    cuDoubleComplex *dza = dev(za), *dzb = dev(zb), *dzc = dev(zc);
    cuDoubleComplex zal = make_cuDoubleComplex(2, -1), zbe = make_cuDoubleComplex(0, 1);
    if (ran(cublasZgemm(h, CUBLAS_OP_C, CUBLAS_OP_T, n, n, n, &zal, dza, n, dzb, n, &zbe, dzc, n),
            "cublasZgemm")) {
      std::vector<cuDoubleComplex> r = back(dzc, n * n);
      for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++) {
          cuDoubleComplex s = make_cuDoubleComplex(0, 0);
          for (int k = 0; k < n; k++) s = cuCadd(s, cuCmul(cuConj(za[i * n + k]), zb[k * n + j]));
          s = cuCadd(cuCmul(zal, s), cuCmul(zbe, zc[j * n + i]));
          EXPECT(r[j * n + i].x == s.x && r[j * n + i].y == s.y);
        }
      std::printf("zgemm C T ok\n");
    }
    CHECK(cudaFree(dza));
    CHECK(cudaFree(dzb));
    CHECK(cudaFree(dzc));
    cuComplex dot = make_cuComplex(0, 0);
    if (ran(cublasCdotc(h, n, da, 1, db, 1, &dot), "cublasCdotc")) {
      cuComplex s = make_cuComplex(0, 0);
      for (int i = 0; i < n; i++) s = cuCaddf(s, cuCmulf(cuConjf(ca[i]), cb[i]));
      EXPECT(dot.x == s.x && dot.y == s.y);
      std::printf("cdotc ok: (%g, %g)\n", dot.x, dot.y);
    }
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dc));
  }

  // GemmStridedBatchedEx in 32F, batch 3
  {
    const int batch = 3;
    std::vector<float> a(n * n * batch), b(n * n * batch), c(n * n * batch, 0);
    for (size_t i = 0; i < a.size(); i++) a[i] = v((int)i), b[i] = v((int)i + 9);
    float *da = dev(a), *db = dev(b), *dc = dev(c);
    float zero = 0;
    if (ran(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, da, CUDA_R_32F,
                                       n, n * n, db, CUDA_R_32F, n, n * n, &zero, dc, CUDA_R_32F,
                                       n, n * n, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            "cublasGemmStridedBatchedEx")) {
      std::vector<float> r = back(dc, c.size());
      for (int s = 0; s < batch; s++)
        for (int j = 0; j < n; j++)
          for (int i = 0; i < n; i++) {
            float want = 0;
            for (int k = 0; k < n; k++) want += a[s * n * n + k * n + i] * b[s * n * n + j * n + k];
            EXPECT(r[s * n * n + j * n + i] == want);
          }
      std::printf("gemm strided batched ex ok\n");
    }
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dc));
  }

  CHECK(cudaDeviceSynchronize());
  if (cublasDestroy(h) != CUBLAS_STATUS_SUCCESS) return 1;
  std::printf("skipped %d\n", skipped);
  pass("cublas_generated");
  return 0;
}
