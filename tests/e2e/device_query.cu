// Device management and properties through rgpu: count, properties (CUDA 13
// struct), attributes, versions, set/get device.
#include "rgpu_check.h"

int main() {
  int n = -1;
  CHECK(cudaGetDeviceCount(&n));
  EXPECT(n >= 1);
  int rt = 0, drv = 0;
  CHECK(cudaRuntimeGetVersion(&rt));
  CHECK(cudaDriverGetVersion(&drv));
  EXPECT(rt >= 13000);
  EXPECT(drv >= 13000);
  for (int d = 0; d < n; d++) {
    cudaDeviceProp p;
    std::memset(&p, 0xab, sizeof p);
    CHECK(cudaGetDeviceProperties(&p, d));
    std::printf("device %d: %s cc %d.%d, %zu MiB, %d SMs, warp %d, maxThreads %d, smem/block %zu\n",
                d, p.name, p.major, p.minor, p.totalGlobalMem >> 20, p.multiProcessorCount,
                p.warpSize, p.maxThreadsPerBlock, p.sharedMemPerBlock);
    EXPECT(std::strlen(p.name) > 0 && std::strlen(p.name) < sizeof p.name);
    EXPECT(p.warpSize == 32);
    EXPECT(p.maxThreadsPerBlock >= 512 && p.maxThreadsPerBlock <= 2048);
    EXPECT(p.maxThreadsDim[0] >= 512 && p.maxThreadsDim[2] >= 1);
    EXPECT(p.maxGridSize[0] >= 65535);
    EXPECT(p.totalGlobalMem >= (64u << 20));
    EXPECT(p.major >= 3);
    EXPECT(p.multiProcessorCount >= 1);
    EXPECT(p.sharedMemPerBlock >= 16384);
    int v = 0;
    CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrWarpSize, d));
    EXPECT(v == 32);
    CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxThreadsPerBlock, d));
    EXPECT(v == p.maxThreadsPerBlock);
    CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, d));
    EXPECT(v == p.major);
    CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, d));
    EXPECT(v == p.multiProcessorCount);
    CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrClockRate, d));
    EXPECT(v > 0);
  }
  CHECK(cudaSetDevice(0));
  int cur = -1;
  CHECK(cudaGetDevice(&cur));
  EXPECT(cur == 0);
  EXPECT_ERR(cudaSetDevice(n + 5), cudaErrorInvalidDevice);
  EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_ERR(cudaGetLastError(), cudaSuccess);
  size_t freeb = 0, total = 0;
  CHECK(cudaMemGetInfo(&freeb, &total));
  EXPECT(total > 0 && freeb <= total);
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaDeviceReset());
  pass("device_query");
  return 0;
}
