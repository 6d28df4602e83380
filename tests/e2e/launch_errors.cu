// Launch errors: configuration errors are synchronous, an illegal address
// is reported at the next synchronization and is sticky, as on a GPU (what
// an H200 does natively: client/probe/h200-results.txt).
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
  // A store to address 0x10 (mapped in no process): cudaErrorIllegalAddress
  // on an H200 natively and on softgpu.  Not a store far past d: what lies
  // there depends on the process, and an H200 reported one such address in
  // an rgpu worker as cudaErrorInvalidAddressSpace.
  write_at<<<1, 1>>>(nullptr, 4);
  cudaError_t e = cudaDeviceSynchronize();
  std::printf("after the faulting kernel: %s\n", cudaGetErrorName(e));
  EXPECT_ERR(e, cudaErrorIllegalAddress);
  // sticky: later calls keep failing with the same error
  EXPECT_ERR(cudaMemset(d, 0, 4), e);
  EXPECT_ERR(cudaDeviceSynchronize(), e);
  // a reset: CUDA 13 on an H200 may return the sticky error (and resets);
  // softgpu returns cudaSuccess
  cudaError_t reset = cudaDeviceReset();
  EXPECT(reset == cudaSuccess || reset == e);
  (void)cudaGetLastError();
  // An H200 then refuses new contexts natively (cudaErrorDevicesUnavailable)
  // until the GPU itself is reset; anywhere else the device works again.
  cudaError_t again = cudaMalloc(&d, 64);
  if (again != cudaErrorDevicesUnavailable) {
    CHECK(again);
    nothing<<<1, 1>>>();
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(d));
  }
  pass("launch_errors");
  return 0;
}
