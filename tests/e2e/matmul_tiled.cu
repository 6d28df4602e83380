// Tiled single-precision matrix multiply with shared memory, checked
// against a host product.
#include "rgpu_check.h"
#include <cmath>
#include <vector>

#define TILE 16

__global__ void matmul(const float *A, const float *B, float *C, int N) {
  __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE];
  int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
  float acc = 0;
  for (int t = 0; t < (N + TILE - 1) / TILE; t++) {
    int ac = t * TILE + threadIdx.x, br = t * TILE + threadIdx.y;
    As[threadIdx.y][threadIdx.x] = (row < N && ac < N) ? A[row * N + ac] : 0.0f;
    Bs[threadIdx.y][threadIdx.x] = (br < N && col < N) ? B[br * N + col] : 0.0f;
    __syncthreads();
    for (int k = 0; k < TILE; k++) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  if (row < N && col < N) C[row * N + col] = acc;
}

int main(int argc, char **argv) {
  int N = argc > 1 ? atoi(argv[1]) : 100;
  std::vector<float> A(N * N), B(N * N), C(N * N), R(N * N, 0.0f);
  for (int i = 0; i < N * N; i++) {
    A[i] = (float)((i * 7) % 13) - 6.0f;
    B[i] = (float)((i * 5) % 11) * 0.5f - 2.0f;
  }
  for (int i = 0; i < N; i++)
    for (int k = 0; k < N; k++)
      for (int j = 0; j < N; j++) R[i * N + j] += A[i * N + k] * B[k * N + j];
  float *dA, *dB, *dC;
  size_t bytes = (size_t)N * N * 4;
  CHECK(cudaMalloc(&dA, bytes));
  CHECK(cudaMalloc(&dB, bytes));
  CHECK(cudaMalloc(&dC, bytes));
  CHECK(cudaMemcpy(dA, A.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dB, B.data(), bytes, cudaMemcpyHostToDevice));
  dim3 block(TILE, TILE), grid((N + TILE - 1) / TILE, (N + TILE - 1) / TILE);
  matmul<<<grid, block>>>(dA, dB, dC, N);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(C.data(), dC, bytes, cudaMemcpyDeviceToHost));
  for (int i = 0; i < N * N; i++) {
    if (std::fabs(C[i] - R[i]) > 1e-3f * (1 + std::fabs(R[i]))) {
      std::fprintf(stderr, "FAIL C[%d] = %g want %g\n", i, C[i], R[i]);
      return 1;
    }
  }
  std::printf("%dx%d tiled matmul correct\n", N, N);
  CHECK(cudaFree(dA));
  CHECK(cudaFree(dB));
  CHECK(cudaFree(dC));
  pass("matmul_tiled");
  return 0;
}
