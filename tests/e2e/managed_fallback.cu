// Managed memory (issue 14): where the device reports managedMemory the
// program uses cudaMallocManaged; where it does not, the calls answer
// cudaErrorNotSupported and the program takes its explicit-copy fallback.
// Either way the results are the same.  rgpu reports managedMemory (the
// client moves managed allocations at launches and synchronizations,
// cudart/rgpu_cudart_managed.c), so through rgpu the first branch runs.
#include "rgpu_check.h"
#include <vector>

__global__ void scale(float *p, int n, float a) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] *= a;
}

int main() {
  int dev = 0, managed = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&managed, cudaDevAttrManagedMemory, dev));
  const int n = 100000;
  std::vector<float> out(n);
  if (managed) {
    float *m = nullptr;
    CHECK(cudaMallocManaged(&m, n * sizeof(float)));
    for (int i = 0; i < n; i++) m[i] = (float)i;
    scale<<<(n + 255) / 256, 256>>>(m, n, 2.0f);
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++) out[i] = m[i];
    CHECK(cudaFree(m));
  } else {
    float *m = nullptr;
    EXPECT_ERR(cudaMallocManaged(&m, n * sizeof(float)), cudaErrorNotSupported);
    EXPECT_ERR(cudaGetLastError(), cudaErrorNotSupported);
    // The fallback: device memory and explicit copies.
    std::vector<float> h(n);
    for (int i = 0; i < n; i++) h[i] = (float)i;
    float *d;
    CHECK(cudaMalloc(&d, n * sizeof(float)));
    CHECK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    scale<<<(n + 255) / 256, 256>>>(d, n, 2.0f);
    CHECK(cudaMemcpy(out.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(cudaFree(d));
  }
  for (int i = 0; i < n; i++) EXPECT(out[i] == 2.0f * i);
  pass("managed_fallback");
  return 0;
}
