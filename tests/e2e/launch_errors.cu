// Launch errors: configuration errors are synchronous, an illegal address
// is reported at the next synchronization and is sticky, as on a GPU.
#include "rgpu_check.h"

__global__ void write_at(int *p, long long offset) { p[offset] = 1; }
__global__ void nothing() {}

int main(int argc, char **argv) {
  // 2048 threads per block: CUDA 13 reports cudaErrorInvalidValue
  nothing<<<1, 2048>>>();
  EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_ERR(cudaGetLastError(), cudaSuccess);
  // a zero-sized grid: also cudaErrorInvalidValue on CUDA 13 (measured on
  // an H200, client/probe/h200-results.txt)
  nothing<<<0, 32>>>();
  EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidValue);
  // too much dynamic shared memory
  nothing<<<1, 32, 1 << 30>>>();
  EXPECT(cudaGetLastError() != cudaSuccess);
  // the device still works
  nothing<<<4, 64>>>();
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  if (argc > 1 && std::strcmp(argv[1], "--no-fault") == 0) {
    pass("launch_errors");
    return 0;
  }
  int *d;
  CHECK(cudaMalloc(&d, 64 * sizeof(int)));
  write_at<<<1, 1>>>(d, 1ll << 28);  // far outside the allocation
  cudaError_t e = cudaDeviceSynchronize();
  std::printf("after the faulting kernel: %s\n", cudaGetErrorName(e));
  // softgpu: cudaErrorIllegalAddress; an H200 reports this unmapped address
  // as cudaErrorInvalidAddressSpace
  EXPECT(e == cudaErrorIllegalAddress || e == cudaErrorInvalidAddressSpace);
  // sticky: later calls keep failing with the same error
  EXPECT_ERR(cudaMemset(d, 0, 4), e);
  EXPECT_ERR(cudaDeviceSynchronize(), e);
  // a reset recovers the device
  // (CUDA 13 on an H200 resets but returns the sticky error; softgpu and
  // older drivers return cudaSuccess)
  cudaError_t reset = cudaDeviceReset();
  EXPECT(reset == cudaSuccess || reset == e);
  (void)cudaGetLastError();
  if (reset != cudaSuccess) {
    // The H200 then refuses new contexts (cudaErrorDevicesUnavailable
    // natively) until the GPU itself is reset: nothing left to check.
    std::printf("cudaDeviceReset: %s; recovery not checked\n", cudaGetErrorName(reset));
    pass("launch_errors");
    return 0;
  }
  CHECK(cudaMalloc(&d, 64));
  CHECK(cudaFree(d));
  pass("launch_errors");
  return 0;
}
