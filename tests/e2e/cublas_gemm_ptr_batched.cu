// rgpu-nvcc-flags: -lcublas
// cublasSgemmBatched and cublasDgemmBatched (and their _64 forms): the
// matrices are named by arrays of device pointers that themselves live in
// device memory.  Every matrix is its own allocation, the pointers are not in
// address order, one A serves two entries; the pointer arrays are rewritten
// on the stream between two calls (the second call must see the new
// pointers, the first the old ones: the arrays are read in stream order);
// device-mode scalars; batch 1, 3, 17 and 0; every transpose pair.  Checked
// against a host reference, padding rows left untouched.
#include <cmath>
#include <cstdint>
#include <vector>

#include "rgpu_cublas_check.h"

static double val(int which, long i) { return ((i * 31 + which * 13) % 59) / 29.5 - 1.0; }

template <typename T> struct Batched;
template <> struct Batched<float> {
  static const char *name() { return "S"; }
  static double tol() { return 1e-4; }
  static cublasStatus_t run(cublasHandle_t h, bool wide, cublasOperation_t ta,
                            cublasOperation_t tb, int m, int n, int k, const float *al,
                            const float *const *A, int lda, const float *const *B, int ldb,
                            const float *be, float *const *C, int ldc, int batch) {
    if (wide)
      return cublasSgemmBatched_64(h, ta, tb, m, n, k, al, A, lda, B, ldb, be, C, ldc, batch);
    return cublasSgemmBatched(h, ta, tb, m, n, k, al, A, lda, B, ldb, be, C, ldc, batch);
  }
};
template <> struct Batched<double> {
  static const char *name() { return "D"; }
  static double tol() { return 1e-12; }
  static cublasStatus_t run(cublasHandle_t h, bool wide, cublasOperation_t ta,
                            cublasOperation_t tb, int m, int n, int k, const double *al,
                            const double *const *A, int lda, const double *const *B, int ldb,
                            const double *be, double *const *C, int ldc, int batch) {
    if (wide)
      return cublasDgemmBatched_64(h, ta, tb, m, n, k, al, A, lda, B, ldb, be, C, ldc, batch);
    return cublasDgemmBatched(h, ta, tb, m, n, k, al, A, lda, B, ldb, be, C, ldc, batch);
  }
};

static const char *op(cublasOperation_t o) { return o == CUBLAS_OP_N ? "N" : "T"; }

// One batch's matrices on the host and on the device (each its own
// allocation).  Entry p uses A number a_of(p): entries 0 and 1 share one.
template <typename T> struct Problem {
  cublasOperation_t ta, tb;
  int m, n, k, lda, ldb, ldc, batch, nA;
  std::vector<std::vector<T>> a, b, c;
  std::vector<T *> da, db, dc;
  int a_of(int p) const { return p == 0 ? 0 : p - 1 < nA ? p - 1 : 0; }
};

template <typename T>
static Problem<T> make(cudaStream_t s, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                       int k, int batch, int seed) {
  Problem<T> P;
  P.ta = ta, P.tb = tb, P.m = m, P.n = n, P.k = k, P.batch = batch;
  int ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
  int br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
  P.lda = ar + 2, P.ldb = br + 1, P.ldc = m + 3;
  P.nA = batch > 1 ? batch - 1 : 1;  // entries 0 and 1 share A 0
  P.a.resize(P.nA), P.b.resize(batch), P.c.resize(batch);
  P.da.resize(P.nA), P.db.resize(batch), P.dc.resize(batch);
  for (int q = 0; q < P.nA; q++) {
    P.a[q].resize((size_t)P.lda * ac);
    for (size_t i = 0; i < P.a[q].size(); i++) P.a[q][i] = (T)val(1 + seed, (long)(i + 1000 * q));
  }
  for (int p = 0; p < batch; p++) {
    P.b[p].resize((size_t)P.ldb * bc);
    P.c[p].resize((size_t)P.ldc * n);
    for (size_t i = 0; i < P.b[p].size(); i++) P.b[p][i] = (T)val(2 + seed, (long)(i + 777 * p));
    for (size_t i = 0; i < P.c[p].size(); i++) P.c[p][i] = (T)val(3 + seed, (long)(i + 555 * p));
  }
  // Allocated from the last entry to the first, so the device pointers of
  // the arrays run downwards in memory.
  for (int q = P.nA - 1; q >= 0; q--) {
    CHECK(cudaMalloc(&P.da[q], P.a[q].size() * sizeof(T)));
    CHECK(cudaMemcpyAsync(P.da[q], P.a[q].data(), P.a[q].size() * sizeof(T),
                          cudaMemcpyHostToDevice, s));
  }
  for (int p = batch - 1; p >= 0; p--) {
    CHECK(cudaMalloc(&P.db[p], P.b[p].size() * sizeof(T)));
    CHECK(cudaMalloc(&P.dc[p], P.c[p].size() * sizeof(T)));
    CHECK(cudaMemcpyAsync(P.db[p], P.b[p].data(), P.b[p].size() * sizeof(T),
                          cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyAsync(P.dc[p], P.c[p].data(), P.c[p].size() * sizeof(T),
                          cudaMemcpyHostToDevice, s));
  }
  return P;
}

template <typename T> static void release(Problem<T> &P) {
  for (T *d : P.da) CHECK(cudaFree(d));
  for (T *d : P.db) CHECK(cudaFree(d));
  for (T *d : P.dc) CHECK(cudaFree(d));
}

// The device pointer arrays of P, written into dA/dB/dC on the stream from
// host staging that stays alive until the stream is synchronized.
template <typename T> struct PtrArrays {
  std::vector<const T *> a, b;
  std::vector<T *> c;
};
template <typename T>
static void write_arrays(cudaStream_t s, const Problem<T> &P, PtrArrays<T> &st, const T **dA,
                         const T **dB, T **dC) {
  st.a.resize(P.batch), st.b.resize(P.batch), st.c.resize(P.batch);
  for (int p = 0; p < P.batch; p++) {
    st.a[p] = P.da[P.a_of(p)];
    st.b[p] = P.db[p];
    st.c[p] = P.dc[p];
  }
  CHECK(cudaMemcpyAsync(dA, st.a.data(), P.batch * sizeof(T *), cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(dB, st.b.data(), P.batch * sizeof(T *), cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(dC, st.c.data(), P.batch * sizeof(T *), cudaMemcpyHostToDevice, s));
}

// Reads every C back and compares with alpha op(A) op(B) + beta C.
template <typename T>
static void verify(cudaStream_t s, const Problem<T> &P, double alpha, double beta,
                   const char *what) {
  double worst = 0;
  for (int p = 0; p < P.batch; p++) {
    std::vector<T> out(P.c[p].size());
    CHECK(cudaMemcpyAsync(out.data(), P.dc[p], out.size() * sizeof(T), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    const std::vector<T> &A = P.a[P.a_of(p)], &B = P.b[p], &C = P.c[p];
    for (int j = 0; j < P.n; j++)
      for (int i = 0; i < P.ldc; i++) {
        size_t at = (size_t)j * P.ldc + i;
        if (i >= P.m) {
          EXPECT(out[at] == C[at]);
          continue;
        }
        double ref = 0;
        for (int q = 0; q < P.k; q++) {
          double x = P.ta == CUBLAS_OP_N ? A[(size_t)q * P.lda + i] : A[(size_t)i * P.lda + q];
          double y = P.tb == CUBLAS_OP_N ? B[(size_t)j * P.ldb + q] : B[(size_t)q * P.ldb + j];
          ref += x * y;
        }
        ref = alpha * ref + beta * (double)C[at];
        double e = rel_err((double)out[at], ref);
        if (e > worst) worst = e;
      }
  }
  if (worst > Batched<T>::tol()) {
    std::fprintf(stderr, "FAIL %s %sgemmBatched %s%s %dx%dx%d batch %d: relative error %g\n", what,
                 Batched<T>::name(), op(P.ta), op(P.tb), P.m, P.n, P.k, P.batch, worst);
    std::exit(1);
  }
}

// One batched gemm with host scalars, or device scalars when dev_scalars.
template <typename T>
static void check(cublasHandle_t h, cudaStream_t s, cublasOperation_t ta, cublasOperation_t tb,
                  int m, int n, int k, int batch, bool wide, bool dev_scalars) {
  Problem<T> P = make<T>(s, ta, tb, m, n, k, batch, 0);
  const T **dA, **dB;
  T **dC;
  CHECK(cudaMalloc(&dA, batch * sizeof(T *)));
  CHECK(cudaMalloc(&dB, batch * sizeof(T *)));
  CHECK(cudaMalloc(&dC, batch * sizeof(T *)));
  PtrArrays<T> st;
  write_arrays(s, P, st, dA, dB, dC);
  T alpha = (T)0.75, beta = (T)-1.5;
  T *dsc = nullptr;
  if (dev_scalars) {
    T sc[2] = {alpha, beta};
    CHECK(cudaMalloc(&dsc, sizeof sc));
    CHECK(cudaMemcpy(dsc, sc, sizeof sc, cudaMemcpyHostToDevice));
    CB(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
    CB(Batched<T>::run(h, wide, ta, tb, m, n, k, dsc, dA, P.lda, dB, P.ldb, dsc + 1, dC, P.ldc,
                       batch));
    CB(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
  } else {
    CB(Batched<T>::run(h, wide, ta, tb, m, n, k, &alpha, dA, P.lda, dB, P.ldb, &beta, dC, P.ldc,
                       batch));
  }
  verify(s, P, 0.75, -1.5, "");
  std::printf("%sgemmBatched%s %s%s %dx%dx%d batch %d%s ok\n", Batched<T>::name(),
              wide ? "_64" : "", op(ta), op(tb), m, n, k, batch,
              dev_scalars ? " device scalars" : "");
  if (dsc) CHECK(cudaFree(dsc));
  CHECK(cudaFree(dA));
  CHECK(cudaFree(dB));
  CHECK(cudaFree(dC));
  release(P);
}

// Two problems of one shape through the same pointer arrays: call, rewrite
// the arrays on the stream, call again, then read both results.
template <typename T>
static void check_rewritten_arrays(cublasHandle_t h, cudaStream_t s, int batch) {
  Problem<T> P1 = make<T>(s, CUBLAS_OP_T, CUBLAS_OP_N, 12, 10, 9, batch, 0);
  Problem<T> P2 = make<T>(s, CUBLAS_OP_T, CUBLAS_OP_N, 12, 10, 9, batch, 5);
  const T **dA, **dB;
  T **dC;
  CHECK(cudaMalloc(&dA, batch * sizeof(T *)));
  CHECK(cudaMalloc(&dB, batch * sizeof(T *)));
  CHECK(cudaMalloc(&dC, batch * sizeof(T *)));
  PtrArrays<T> st1, st2;
  T alpha = (T)2, beta = (T)0.5;
  write_arrays(s, P1, st1, dA, dB, dC);
  CB(Batched<T>::run(h, false, P1.ta, P1.tb, P1.m, P1.n, P1.k, &alpha, dA, P1.lda, dB, P1.ldb,
                     &beta, dC, P1.ldc, batch));
  write_arrays(s, P2, st2, dA, dB, dC);
  CB(Batched<T>::run(h, false, P2.ta, P2.tb, P2.m, P2.n, P2.k, &alpha, dA, P2.lda, dB, P2.ldb,
                     &beta, dC, P2.ldc, batch));
  verify(s, P1, 2, 0.5, "first");
  verify(s, P2, 2, 0.5, "second");
  std::printf("%sgemmBatched pointer arrays rewritten between calls, batch %d ok\n",
              Batched<T>::name(), batch);
  CHECK(cudaFree(dA));
  CHECK(cudaFree(dB));
  CHECK(cudaFree(dC));
  release(P1);
  release(P2);
}

template <typename T> static void suite(cublasHandle_t h, cudaStream_t s) {
  const cublasOperation_t ops[] = {CUBLAS_OP_N, CUBLAS_OP_T};
  const int batches[] = {1, 3, 17};
  int i = 0;
  for (cublasOperation_t ta : ops)
    for (cublasOperation_t tb : ops)
      for (int b : batches) {
        // The shapes vary with the case so that no two line up by accident.
        check<T>(h, s, ta, tb, 13 + i % 5, 9 + i % 3, 7 + i % 4, b, false, false);
        i++;
      }
  check<T>(h, s, CUBLAS_OP_N, CUBLAS_OP_T, 21, 5, 16, 6, false, true);
  check<T>(h, s, CUBLAS_OP_T, CUBLAS_OP_T, 8, 11, 3, 4, true, false);
  check_rewritten_arrays<T>(h, s, 5);
}

int main() {
  cublasHandle_t h;
  CB(cublasCreate(&h));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CB(cublasSetStream(h, s));
  suite<float>(h, s);
  suite<double>(h, s);
  // batchCount 0 computes nothing and succeeds.
  float one = 1, **dz;
  CHECK(cudaMalloc(&dz, sizeof(float *)));
  CHECK(cudaMemset(dz, 0, sizeof(float *)));
  CB(cublasSgemmBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, dz, 4, dz, 4, &one, dz, 4, 0));
  std::printf("SgemmBatched batch 0 ok\n");
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaFree(dz));
  CHECK(cudaStreamSynchronize(s));
  CB(cublasDestroy(h));
  CHECK(cudaStreamDestroy(s));
  pass("cublas_gemm_ptr_batched");
  return 0;
}
