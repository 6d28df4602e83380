// Tensor-core GEMM through nvcuda::wmma (m16n16k16, half inputs): f32 and
// half accumulators, row- and column-major operands, an element-wise pass
// over the accumulator fragment, and a C matrix loaded from memory; checked
// against a host product (small integers, so every sum is exact).  softgpu
// interprets wmma.load/mma/store with its own fragment layout.
#include "rgpu_check.h"
#include <cuda_fp16.h>
#include <mma.h>
#include <vector>

using namespace nvcuda;

// C[MxN] = alpha * A[MxK] (row-major) * B[KxN] (+ beta * C0), one warp per 16x16 tile.
template <typename BLayout, typename Acc>
__global__ void gemm(const half *a, const half *b, const float *c0, float *c, int M, int N, int K, float alpha,
                     bool load_c) {
  int tm = blockIdx.y, tn = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (tn * 16 >= N) return;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, half, BLayout> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, Acc> fc;
  wmma::fill_fragment(fc, Acc(0));
  for (int k = 0; k < K; k += 16) {
    wmma::load_matrix_sync(fa, a + tm * 16 * K + k, K);
    if (std::is_same<BLayout, wmma::row_major>::value) wmma::load_matrix_sync(fb, b + k * N + tn * 16, N);
    else wmma::load_matrix_sync(fb, b + tn * 16 * K + k, K);  // B stored column-major: element (k,n) at n*K+k
    wmma::mma_sync(fc, fa, fb, fc);
  }
  for (int i = 0; i < fc.num_elements; i++) fc.x[i] = fc.x[i] * Acc(alpha);
  if (load_c) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> f0;
    wmma::load_matrix_sync(f0, c0 + tm * 16 * N + tn * 16, N, wmma::mem_row_major);
    for (int i = 0; i < f0.num_elements; i++) f0.x[i] += float(fc.x[i]);
    wmma::store_matrix_sync(c + tm * 16 * N + tn * 16, f0, N, wmma::mem_row_major);
  } else {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fo;
    for (int i = 0; i < fo.num_elements; i++) fo.x[i] = float(fc.x[i]);
    wmma::store_matrix_sync(c + tm * 16 * N + tn * 16, fo, N, wmma::mem_row_major);
  }
}

// The accumulator stored column-major through shared memory.
__global__ void gemm_tile_colmajor_shared(const half *a, const half *b, float *c) {
  __shared__ half as[256], bs[256];
  __shared__ float cs[256];
  for (int i = threadIdx.x; i < 256; i += 32) { as[i] = a[i]; bs[i] = b[i]; }
  __syncwarp();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::col_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::fill_fragment(fc, 1.0f);
  wmma::load_matrix_sync(fa, as, 16);
  wmma::load_matrix_sync(fb, bs, 16);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(cs, fc, 16, wmma::mem_col_major);
  __syncwarp();
  for (int i = threadIdx.x; i < 256; i += 32) c[i] = cs[i];
}

static int val(int i, int salt) { return (i * 7 + salt) % 5 - 2; }

int main() {
  const int M = 48, N = 64, K = 80;
  std::vector<half> ha(M * K), hb_row(K * N), hb_col(K * N);
  std::vector<float> hc0(M * N);
  for (int i = 0; i < M * K; i++) ha[i] = __float2half((float)val(i, 1));
  for (int k = 0; k < K; k++)
    for (int n = 0; n < N; n++) {
      float v = (float)val(k * N + n, 3);
      hb_row[k * N + n] = __float2half(v);
      hb_col[n * K + k] = __float2half(v);
    }
  for (int i = 0; i < M * N; i++) hc0[i] = (float)(i % 9);
  std::vector<float> want(M * N);
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      float s = 0;
      for (int k = 0; k < K; k++) s += (float)val(m * K + k, 1) * (float)val(k * N + n, 3);
      want[m * N + n] = s;
    }
  half *da, *dbr, *dbc;
  float *dc0, *dc;
  CHECK(cudaMalloc(&da, M * K * sizeof(half)));
  CHECK(cudaMalloc(&dbr, K * N * sizeof(half)));
  CHECK(cudaMalloc(&dbc, K * N * sizeof(half)));
  CHECK(cudaMalloc(&dc0, M * N * sizeof(float)));
  CHECK(cudaMalloc(&dc, M * N * sizeof(float)));
  CHECK(cudaMemcpy(da, ha.data(), M * K * sizeof(half), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dbr, hb_row.data(), K * N * sizeof(half), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dbc, hb_col.data(), K * N * sizeof(half), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dc0, hc0.data(), M * N * sizeof(float), cudaMemcpyHostToDevice));
  dim3 grid(N / 16 / 2, M / 16), block(64);
  std::vector<float> got(M * N);
  for (int variant = 0; variant < 4; variant++) {
    CHECK(cudaMemset(dc, 0, M * N * sizeof(float)));
    float alpha = variant == 3 ? 0.5f : 2.0f;
    bool load_c = variant == 2;
    if (variant == 0) gemm<wmma::row_major, float><<<grid, block>>>(da, dbr, dc0, dc, M, N, K, alpha, load_c);
    if (variant == 1) gemm<wmma::col_major, float><<<grid, block>>>(da, dbc, dc0, dc, M, N, K, alpha, load_c);
    if (variant == 2) gemm<wmma::row_major, float><<<grid, block>>>(da, dbr, dc0, dc, M, N, K, alpha, load_c);
    if (variant == 3) gemm<wmma::col_major, half><<<grid, block>>>(da, dbc, dc0, dc, M, N, K, alpha, load_c);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(got.data(), dc, M * N * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < M * N; i++) {
      float w = want[i] * alpha + (load_c ? hc0[i] : 0.0f);
      if (got[i] != w) {
        std::fprintf(stderr, "FAIL gemm variant %d element (%d,%d): %g, want %g\n", variant, i / N, i % N, got[i], w);
        return 1;
      }
    }
  }
  // 16x16 tile, A column-major, through shared memory, C stored column-major
  float hc[256];
  gemm_tile_colmajor_shared<<<1, 32>>>(da, dbr, dc);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(hc, dc, sizeof hc, cudaMemcpyDeviceToHost));
  for (int m = 0; m < 16; m++)
    for (int n = 0; n < 16; n++) {
      float s = 1.0f;
      for (int k = 0; k < 16; k++) s += (float)val(k * 16 + m, 1) * (float)val(k * 16 + n, 3);
      if (hc[n * 16 + m] != s) {
        std::fprintf(stderr, "FAIL col-major tile (%d,%d): %g, want %g\n", m, n, hc[n * 16 + m], s);
        return 1;
      }
    }
  CHECK(cudaFree(da));
  CHECK(cudaFree(dbr));
  CHECK(cudaFree(dbc));
  CHECK(cudaFree(dc0));
  CHECK(cudaFree(dc));
  pass("wmma_gemm");
  return 0;
}
