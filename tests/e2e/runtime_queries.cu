// Runtime queries older and newer programs make, with the answers NVIDIA's
// runtime gives on the H200 (CUDA 13.0, measured there): the deprecated
// shared-memory bank size calls (accepted, four bytes whatever is set),
// cudaOccupancyAvailableDynamicSMemPerBlock (capped by the kernel's 48 KiB
// default), cudaDeviceGetByPCIBusId (round trip with cudaDeviceGetPCIBusId,
// unknown ids refused), cudaDeviceGetP2PAttribute of a device with itself,
// stream priorities clamped to the device's range.
#include "rgpu_check.h"

__global__ void uses_dynamic_shared(float *p) {
  extern __shared__ float s[];
  s[threadIdx.x] = (float)threadIdx.x;
  __syncthreads();
  p[threadIdx.x] = s[blockDim.x - 1 - threadIdx.x];
}

int main() {
  cudaSharedMemConfig cfg = cudaSharedMemBankSizeDefault;
  CHECK(cudaDeviceGetSharedMemConfig(&cfg));
  EXPECT(cfg == cudaSharedMemBankSizeFourByte);
  CHECK(cudaDeviceSetSharedMemConfig(cudaSharedMemBankSizeEightByte));
  CHECK(cudaDeviceGetSharedMemConfig(&cfg));
  EXPECT(cfg == cudaSharedMemBankSizeFourByte);  // accepted, changes nothing
  CHECK(cudaFuncSetSharedMemConfig(uses_dynamic_shared, cudaSharedMemBankSizeFourByte));
  std::printf("bank size: four bytes, settings accepted\n");

  size_t avail = 0;
  CHECK(cudaOccupancyAvailableDynamicSMemPerBlock(&avail, uses_dynamic_shared, 2, 128));
  std::printf("dynamic shared memory for 2 blocks of 128: %zu\n", avail);
  CHECK(cudaOccupancyAvailableDynamicSMemPerBlock(&avail, uses_dynamic_shared, 1, 1024));
  std::printf("dynamic shared memory for 1 block of 1024: %zu\n", avail);
  // The answer must launch: a block of 128 with that much dynamic memory.
  float *d = nullptr;
  CHECK(cudaMalloc(&d, 128 * sizeof(float)));
  uses_dynamic_shared<<<1, 128, avail>>>(d);
  CHECK(cudaGetLastError());
  float h[128];
  CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 128; i++) EXPECT(h[i] == (float)(127 - i));
  // No null-pointer case here: NVIDIA's runtime crashes on it (measured on
  // the H200); rgpu answers cudaErrorInvalidValue.

  char bus[64] = {0};
  CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, 0));
  int dev = -1;
  CHECK(cudaDeviceGetByPCIBusId(&dev, bus));
  EXPECT(dev == 0);
  EXPECT_ERR(cudaDeviceGetByPCIBusId(&dev, "0000:ff:1f.0"), cudaErrorInvalidDevice);
  std::printf("device 0 found again by its PCI bus id\n");

  // Stream priorities outside the device's range are clamped to it, and the
  // stream reports the clamped value (CUDA's documented behaviour).
  int least = 0, greatest = 0, prio = 1;
  CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t hi_s, lo_s;
  CHECK(cudaStreamCreateWithPriority(&hi_s, cudaStreamNonBlocking, greatest - 100));
  CHECK(cudaStreamCreateWithPriority(&lo_s, cudaStreamNonBlocking, least + 100));
  CHECK(cudaStreamGetPriority(hi_s, &prio));
  EXPECT(prio == greatest);
  CHECK(cudaStreamGetPriority(lo_s, &prio));
  EXPECT(prio == least);
  std::printf("stream priorities clamped to [%d, %d]\n", greatest, least);
  CHECK(cudaStreamDestroy(hi_s));
  CHECK(cudaStreamDestroy(lo_s));

  int v = -1;
  EXPECT_ERR(cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrAccessSupported, 0, 0),
             cudaErrorInvalidDevice);
  std::printf("a device is not its own peer\n");
  cudaGetLastError();
  CHECK(cudaFree(d));
  pass("runtime_queries");
  return 0;
}
