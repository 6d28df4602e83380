// cudaGetKernel (CUDA 12+): the kernel handle of a __global__ function,
// then the handle used where the function symbol goes: a launch, its
// attributes, an occupancy query.
#include "rgpu_check.h"

__global__ void fill(float *p, int n, float v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

int main() {
  const int n = 1000;
  float *d = nullptr;
  CHECK(cudaMalloc(&d, n * sizeof(float)));
  cudaKernel_t k = nullptr;
  CHECK(cudaGetKernel(&k, fill));
  EXPECT(k != nullptr);
  float v = 2.5f;
  int nn = n;
  void *args[] = {&d, &nn, &v};
  CHECK(cudaLaunchKernel((const void *)k, dim3((n + 255) / 256), dim3(256), args, 0, 0));
  float h[n];
  CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++) EXPECT(h[i] == 2.5f);
  cudaFuncAttributes by_handle, by_symbol;
  CHECK(cudaFuncGetAttributes(&by_handle, (const void *)k));
  CHECK(cudaFuncGetAttributes(&by_symbol, fill));
  EXPECT(by_handle.maxThreadsPerBlock == by_symbol.maxThreadsPerBlock);
  EXPECT(by_handle.numRegs == by_symbol.numRegs);
  int blocks = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, (const void *)k, 256, 0));
  EXPECT(blocks > 0);
  std::printf("kernel handle: launch, attributes and occupancy as by symbol\n");
  CHECK(cudaFree(d));
  pass("kernel_handle");
  return 0;
}
