// Registered host memory (issue 14): cudaHostRegister makes a program's own
// buffer page-locked, so cudaMemcpyAsync into it runs in the background
// like cudaMallocHost memory; the registration errors are CUDA's.  Where
// the device cannot map host memory (canMapHostMemory = 0, as through a
// remote GPU) the zero-copy calls fail the way CUDA reports the missing
// capability, so a program takes its copy fallback.
#include "rgpu_check.h"
#include <cstdlib>
#include <vector>

__global__ void iota(int *p, int n, int base) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = base + i;
}

int main() {
  const int n = 1 << 20;
  const size_t bytes = n * sizeof(int);
  int *host = nullptr;
  EXPECT(posix_memalign((void **)&host, 4096, bytes) == 0);
  std::memset(host, 0, bytes);
  CHECK(cudaHostRegister(host, bytes, cudaHostRegisterDefault));
  EXPECT_ERR(cudaHostRegister(host, bytes, cudaHostRegisterDefault),
             cudaErrorHostMemoryAlreadyRegistered);
  EXPECT_ERR(cudaGetLastError(), cudaErrorHostMemoryAlreadyRegistered);
  cudaPointerAttributes pa;
  CHECK(cudaPointerGetAttributes(&pa, host + 10));
  EXPECT(pa.type == cudaMemoryTypeHost);

  int *dev;
  CHECK(cudaMalloc(&dev, bytes));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  for (int round = 0; round < 3; round++) {
    iota<<<(n + 255) / 256, 256, 0, s>>>(dev, n, round * 1000);
    CHECK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < n; i += 997) EXPECT(host[i] == round * 1000 + i);
    EXPECT(host[n - 1] == round * 1000 + n - 1);
  }
  // Host to device from the registered buffer, then back.
  for (int i = 0; i < n; i++) host[i] = 3 * i;
  CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s));
  std::vector<int> back(n);
  CHECK(cudaMemcpyAsync(back.data(), dev, bytes, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; i += 991) EXPECT(back[i] == 3 * i);

  CHECK(cudaHostUnregister(host));
  EXPECT_ERR(cudaHostUnregister(host), cudaErrorHostMemoryNotRegistered);
  EXPECT_ERR(cudaGetLastError(), cudaErrorHostMemoryNotRegistered);

  int can_map = 0;
  CHECK(cudaDeviceGetAttribute(&can_map, cudaDevAttrCanMapHostMemory, 0));
  if (!can_map) {
    // No zero-copy: mapping a registration is the missing capability, and
    // pinned memory has no device pointer.
    EXPECT_ERR(cudaHostRegister(host, bytes, cudaHostRegisterMapped), cudaErrorNotSupported);
    EXPECT_ERR(cudaGetLastError(), cudaErrorNotSupported);
    int *mapped = nullptr;
    CHECK(cudaHostAlloc((void **)&mapped, 4096, cudaHostAllocMapped));
    void *dp = nullptr;
    cudaError_t e = cudaHostGetDevicePointer(&dp, mapped, 0);
    EXPECT(e == cudaErrorNotSupported || e == cudaErrorInvalidValue);
    cudaGetLastError();
    CHECK(cudaFreeHost(mapped));
  }
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(dev));
  std::free(host);
  pass("host_register");
  return 0;
}
