// rgpu-nvcc-flags: -lcublas
// cublasGemmEx through rgpu's libcublas.so.13 facade (issue 16): half and
// bfloat16 matrices with float computation (C in their type or in float),
// half computation, double, and the _64 form.  Small integer data make
// every result exact in every type, so the check is equality with a host
// reference, natively and through rgpu alike.
#include <cstdint>
#include <cstring>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
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

static size_t type_size(cudaDataType t) { return t == CUDA_R_64F ? 8 : t == CUDA_R_32F ? 4 : 2; }
static const char *type_name(cudaDataType t) {
  return t == CUDA_R_16F ? "16F" : t == CUDA_R_16BF ? "16BF" : t == CUDA_R_32F ? "32F" : "64F";
}

static void put(cudaDataType t, std::vector<unsigned char> &buf, size_t i, double v) {
  if (t == CUDA_R_16F) {
    __half h = __float2half((float)v);
    std::memcpy(&buf[i * 2], &h, 2);
  } else if (t == CUDA_R_16BF) {
    __nv_bfloat16 b = __float2bfloat16((float)v);
    std::memcpy(&buf[i * 2], &b, 2);
  } else if (t == CUDA_R_32F) {
    float f = (float)v;
    std::memcpy(&buf[i * 4], &f, 4);
  } else {
    std::memcpy(&buf[i * 8], &v, 8);
  }
}

static double get(cudaDataType t, const std::vector<unsigned char> &buf, size_t i) {
  if (t == CUDA_R_16F) {
    __half h;
    std::memcpy(&h, &buf[i * 2], 2);
    return __half2float(h);
  }
  if (t == CUDA_R_16BF) {
    __nv_bfloat16 b;
    std::memcpy(&b, &buf[i * 2], 2);
    return __bfloat162float(b);
  }
  if (t == CUDA_R_32F) {
    float f;
    std::memcpy(&f, &buf[i * 4], 4);
    return f;
  }
  double d;
  std::memcpy(&d, &buf[i * 8], 8);
  return d;
}

// Integers in [-2, 2]; C's start values are even in [-4, 4].
static int small(int which, int i) { return ((i * 13 + which * 5) % 5) - 2; }

static void check(cublasHandle_t h, cudaStream_t s, cudaDataType ab, cudaDataType ct,
                  cublasComputeType_t compute, const char *cname, cublasOperation_t ta,
                  cublasOperation_t tb, bool use64) {
  const int m = 9, n = 7, k = 12;
  int ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
  int br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
  int lda = ar + 2, ldb = br + 1, ldc = m + 3;
  size_t na = (size_t)lda * ac, nb = (size_t)ldb * bc, nc = (size_t)ldc * n;
  std::vector<unsigned char> a(na * type_size(ab)), b(nb * type_size(ab)), c(nc * type_size(ct)),
      out(c.size());
  for (size_t i = 0; i < na; i++) put(ab, a, i, small(1, (int)i));
  for (size_t i = 0; i < nb; i++) put(ab, b, i, small(2, (int)i));
  for (size_t i = 0; i < nc; i++) put(ct, c, i, 2 * small(3, (int)i));
  // The scalars have the compute type's scale type.
  double al = 1, be = 0.5;
  float alf = 1, bef = 0.5f;
  __half alh = __float2half(1.0f), beh = __float2half(0.5f);
  const void *pa = compute == CUBLAS_COMPUTE_64F ? (const void *)&al
                   : compute == CUBLAS_COMPUTE_16F ? (const void *)&alh : (const void *)&alf;
  const void *pb = compute == CUBLAS_COMPUTE_64F ? (const void *)&be
                   : compute == CUBLAS_COMPUTE_16F ? (const void *)&beh : (const void *)&bef;
  void *da, *db, *dc;
  CHECK(cudaMalloc(&da, a.size()));
  CHECK(cudaMalloc(&db, b.size()));
  CHECK(cudaMalloc(&dc, c.size()));
  CHECK(cudaMemcpyAsync(da, a.data(), a.size(), cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(db, b.data(), b.size(), cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(dc, c.data(), c.size(), cudaMemcpyHostToDevice, s));
  if (use64)
    CB(cublasGemmEx_64(h, ta, tb, m, n, k, pa, da, ab, lda, db, ab, ldb, pb, dc, ct, ldc, compute,
                       CUBLAS_GEMM_DEFAULT));
  else
    CB(cublasGemmEx(h, ta, tb, m, n, k, pa, da, ab, lda, db, ab, ldb, pb, dc, ct, ldc, compute,
                    CUBLAS_GEMM_DEFAULT));
  CHECK(cudaMemcpyAsync(out.data(), dc, out.size(), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int j = 0; j < n; j++)
    for (int i = 0; i < ldc; i++) {
      size_t at = (size_t)j * ldc + i;
      if (i >= m) {  // padding: untouched
        EXPECT(std::memcmp(&out[at * type_size(ct)], &c[at * type_size(ct)], type_size(ct)) == 0);
        continue;
      }
      double ref = 0;
      for (int p = 0; p < k; p++) {
        double x = get(ab, a, ta == CUBLAS_OP_N ? (size_t)p * lda + i : (size_t)i * lda + p);
        double y = get(ab, b, tb == CUBLAS_OP_N ? (size_t)j * ldb + p : (size_t)p * ldb + j);
        ref += x * y;
      }
      ref += 0.5 * get(ct, c, at);
      double got = get(ct, out, at);
      if (got != ref) {
        std::fprintf(stderr, "FAIL gemmEx A/B %s C %s %s: C(%d,%d) = %g, expected %g\n",
                     type_name(ab), type_name(ct), cname, i, j, got, ref);
        std::exit(1);
      }
    }
  std::printf("gemmEx%s A/B %s C %s %s %s%s ok\n", use64 ? "_64" : "", type_name(ab),
              type_name(ct), cname, ta == CUBLAS_OP_N ? "N" : "T", tb == CUBLAS_OP_N ? "N" : "T");
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
  check(h, s, CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F, "compute 32F", CUBLAS_OP_N, CUBLAS_OP_T, false);
  check(h, s, CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F, "compute 32F", CUBLAS_OP_T, CUBLAS_OP_N, false);
  check(h, s, CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, "compute 32F", CUBLAS_OP_T, CUBLAS_OP_T, false);
  check(h, s, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F, "compute 32F", CUBLAS_OP_N, CUBLAS_OP_N, true);
  check(h, s, CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_16F, "compute 16F", CUBLAS_OP_N, CUBLAS_OP_N, false);
  check(h, s, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, "compute 32F", CUBLAS_OP_T, CUBLAS_OP_N, false);
  check(h, s, CUDA_R_64F, CUDA_R_64F, CUBLAS_COMPUTE_64F, "compute 64F", CUBLAS_OP_N, CUBLAS_OP_T, true);
  CB(cublasDestroy(h));
  CHECK(cudaStreamDestroy(s));
  pass("cublas_gemm_ex");
  return 0;
}
