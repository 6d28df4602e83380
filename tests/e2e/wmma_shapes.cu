// nvcuda::wmma's other half-precision shapes, m32n8k16 and m8n32k16: a GEMM
// with one warp per tile, f32 and half accumulators, A row-major and B row-
// or column-major, C loaded into the accumulator column-major, an
// element-wise pass over it; small integers, so every sum is exact (also in
// half).
#include "rgpu_check.h"
#include <cuda_fp16.h>
#include <mma.h>
#include <type_traits>
#include <vector>

using namespace nvcuda;

// C[MxN] = 2 * (A[MxK] * B[KxN] + C0), C0 stored column-major and C
// row-major in the accumulator's type, one warp per TM x TN tile.
template <int TM, int TN, typename BLayout, typename Acc>
__global__ void gemm(const half *a, const half *b, const Acc *c0, Acc *c, int M, int N, int K) {
  int tm = blockIdx.y, tn = blockIdx.x;
  wmma::fragment<wmma::matrix_a, TM, TN, 16, half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, TM, TN, 16, half, BLayout> fb;
  wmma::fragment<wmma::accumulator, TM, TN, 16, Acc> fc;
  wmma::load_matrix_sync(fc, c0 + tn * TN * M + tm * TM, M, wmma::mem_col_major);
  for (int k = 0; k < K; k += 16) {
    wmma::load_matrix_sync(fa, a + tm * TM * K + k, K);
    if (std::is_same<BLayout, wmma::row_major>::value) wmma::load_matrix_sync(fb, b + k * N + tn * TN, N);
    else wmma::load_matrix_sync(fb, b + tn * TN * K + k, K); // column-major: (k, n) at n*K + k
    wmma::mma_sync(fc, fa, fb, fc);
  }
  for (int i = 0; i < fc.num_elements; i++) fc.x[i] = fc.x[i] * Acc(2);
  wmma::store_matrix_sync(c + tm * TM * N + tn * TN, fc, N, wmma::mem_row_major);
}

static int val(int i, int salt) { return (i * 7 + salt) % 5 - 2; }

int main() {
  const int M = 64, N = 64, K = 48;
  std::vector<half> ha(M * K), hb_row(K * N), hb_col(K * N);
  std::vector<float> hc0(M * N), want(M * N);
  for (int i = 0; i < M * K; i++) ha[i] = __float2half((float)val(i, 1));
  for (int k = 0; k < K; k++)
    for (int n = 0; n < N; n++) {
      float v = (float)val(k * N + n, 3);
      hb_row[k * N + n] = __float2half(v);
      hb_col[n * K + k] = __float2half(v);
    }
  for (int i = 0; i < M * N; i++) hc0[i] = (float)(i % 11);
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      float s = 0;
      for (int k = 0; k < K; k++) s += (float)val(m * K + k, 1) * (float)val(k * N + n, 3);
      want[m * N + n] = 2.0f * (s + hc0[n * M + m]);
    }
  std::vector<half> hc0h(M * N);
  for (int i = 0; i < M * N; i++) hc0h[i] = __float2half(hc0[i]);
  half *da, *dbr, *dbc, *dc0h, *dch;
  float *dc0, *dc;
  CHECK(cudaMalloc(&da, M * K * sizeof(half)));
  CHECK(cudaMalloc(&dbr, K * N * sizeof(half)));
  CHECK(cudaMalloc(&dbc, K * N * sizeof(half)));
  CHECK(cudaMalloc(&dc0, M * N * sizeof(float)));
  CHECK(cudaMalloc(&dc, M * N * sizeof(float)));
  CHECK(cudaMalloc(&dc0h, M * N * sizeof(half)));
  CHECK(cudaMalloc(&dch, M * N * sizeof(half)));
  CHECK(cudaMemcpy(da, ha.data(), M * K * sizeof(half), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dbr, hb_row.data(), K * N * sizeof(half), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dbc, hb_col.data(), K * N * sizeof(half), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dc0, hc0.data(), M * N * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dc0h, hc0h.data(), M * N * sizeof(half), cudaMemcpyHostToDevice));
  std::vector<float> got(M * N);
  std::vector<half> goth(M * N);
  for (int variant = 0; variant < 4; variant++) {
    CHECK(cudaMemset(dc, 0, M * N * sizeof(float)));
    CHECK(cudaMemset(dch, 0, M * N * sizeof(half)));
    switch (variant) {
      case 0: gemm<32, 8, wmma::row_major, float><<<dim3(N / 8, M / 32), 32>>>(da, dbr, dc0, dc, M, N, K); break;
      case 1: gemm<32, 8, wmma::col_major, half><<<dim3(N / 8, M / 32), 32>>>(da, dbc, dc0h, dch, M, N, K); break;
      case 2: gemm<8, 32, wmma::col_major, float><<<dim3(N / 32, M / 8), 32>>>(da, dbc, dc0, dc, M, N, K); break;
      default: gemm<8, 32, wmma::row_major, half><<<dim3(N / 32, M / 8), 32>>>(da, dbr, dc0h, dch, M, N, K); break;
    }
    CHECK(cudaGetLastError());
    bool halves = variant & 1;
    if (halves) {
      CHECK(cudaMemcpy(goth.data(), dch, M * N * sizeof(half), cudaMemcpyDeviceToHost));
      for (int i = 0; i < M * N; i++) got[i] = __half2float(goth[i]);
    } else {
      CHECK(cudaMemcpy(got.data(), dc, M * N * sizeof(float), cudaMemcpyDeviceToHost));
    }
    for (int i = 0; i < M * N; i++)
      if (got[i] != want[i]) {
        std::fprintf(stderr, "FAIL variant %d element (%d,%d): %g, want %g\n", variant, i / N, i % N, got[i], want[i]);
        return 1;
      }
  }
  CHECK(cudaFree(da));
  CHECK(cudaFree(dbr));
  CHECK(cudaFree(dbc));
  CHECK(cudaFree(dc0));
  CHECK(cudaFree(dc));
  CHECK(cudaFree(dc0h));
  CHECK(cudaFree(dch));
  pass("wmma_shapes");
  return 0;
}
