// Dynamic shared memory (extern __shared__) and half-precision arithmetic.
#include "rgpu_check.h"
#include <cuda_fp16.h>
#include <vector>

__global__ void reverse_block(int *d, int n) {
  extern __shared__ int s[];
  int t = threadIdx.x;
  if (t < n) s[t] = d[blockIdx.x * n + t];
  __syncthreads();
  if (t < n) d[blockIdx.x * n + t] = s[n - 1 - t];
}

__global__ void half_axpy(const __half *x, __half *y, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __hadd(__hmul(__float2half(a), x[i]), y[i]);
}

int main() {
  const int n = 200, blocks = 3;
  std::vector<int> h(n * blocks), r(n * blocks);
  for (int i = 0; i < n * blocks; i++) h[i] = i * 3;
  int *d;
  CHECK(cudaMalloc(&d, h.size() * 4));
  CHECK(cudaMemcpy(d, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
  reverse_block<<<blocks, 256, n * sizeof(int)>>>(d, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(r.data(), d, h.size() * 4, cudaMemcpyDeviceToHost));
  for (int b = 0; b < blocks; b++)
    for (int t = 0; t < n; t++) EXPECT(r[b * n + t] == h[b * n + n - 1 - t]);
  const int m = 1000;
  std::vector<__half> x(m), y(m), out(m);
  for (int i = 0; i < m; i++) { x[i] = __float2half((i % 32) * 0.25f); y[i] = __float2half(1.5f); }
  __half *dx, *dy;
  CHECK(cudaMalloc(&dx, m * 2));
  CHECK(cudaMalloc(&dy, m * 2));
  CHECK(cudaMemcpy(dx, x.data(), m * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dy, y.data(), m * 2, cudaMemcpyHostToDevice));
  half_axpy<<<(m + 127) / 128, 128>>>(dx, dy, 2.0f, m);
  CHECK(cudaMemcpy(out.data(), dy, m * 2, cudaMemcpyDeviceToHost));
  for (int i = 0; i < m; i++) {
    float want = 2.0f * ((i % 32) * 0.25f) + 1.5f;  // exactly representable in fp16
    if (__half2float(out[i]) != want) {
      std::fprintf(stderr, "FAIL half_axpy[%d] = %g want %g\n", i, __half2float(out[i]), want);
      return 1;
    }
  }
  CHECK(cudaFree(d)); CHECK(cudaFree(dx)); CHECK(cudaFree(dy));
  pass("dynshared_half");
  return 0;
}
