// Error semantics of asynchronous calls (issue 6): launch-configuration
// errors are returned by the launch itself (CUDA 13: cudaErrorInvalidValue
// for all of them; unknown function: cudaErrorInvalidResourceHandle) and do
// not disturb later work; a kernel fault is asynchronous: the launch
// succeeds, the next synchronization reports it; it is sticky for every
// later call, queued or synchronizing, until cudaDeviceReset.
#include "rgpu_check.h"

__global__ void write_at(int *p, long long offset) { p[offset] = 1; }
__global__ void nothing() {}
static void not_a_kernel() {}

int main() {
  void *noargs[1] = {nullptr};
  // synchronous configuration errors, returned by the call itself
  EXPECT_ERR(cudaLaunchKernel((void *)nothing, dim3(1), dim3(4096), noargs, 0, 0),
             cudaErrorInvalidValue);
  EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_ERR(cudaGetLastError(), cudaSuccess);
  EXPECT_ERR(cudaLaunchKernel((void *)nothing, dim3(0), dim3(32), noargs, 0, 0),
             cudaErrorInvalidValue);
  EXPECT_ERR(cudaLaunchKernel((void *)nothing, dim3(1), dim3(32), noargs, 1u << 30, 0),
             cudaErrorInvalidValue);
  // CUDA 13 (measured on an H200): a pointer that is no kernel is an
  // invalid resource handle
  EXPECT_ERR(cudaLaunchKernel((void *)not_a_kernel, dim3(1), dim3(1), noargs, 0, 0),
             cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  // none of them is sticky: the device still works
  CHECK(cudaLaunchKernel((void *)nothing, dim3(2), dim3(32), noargs, 0, 0));
  CHECK(cudaDeviceSynchronize());

  // an asynchronous fault: the launch succeeds ...
  int *d;
  CHECK(cudaMalloc(&d, 64 * sizeof(int)));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  write_at<<<1, 1, 0, s>>>(d, 1ll << 28);
  // ... cudaGetLastError right after it does not wait for it (an H200
  // says cudaSuccess here too) ...
  cudaError_t e = cudaGetLastError();
  EXPECT(e == cudaSuccess || e == cudaErrorIllegalAddress || e == cudaErrorInvalidAddressSpace);
  // ... the next synchronization reports it.  softgpu says
  // cudaErrorIllegalAddress; an H200 says cudaErrorInvalidAddressSpace for
  // this address (nothing is mapped there): either is a fault, and from
  // here on the same code must come back everywhere.
  cudaError_t fault = cudaStreamSynchronize(s);
  std::printf("fault: %s\n", cudaGetErrorName(fault));
  EXPECT(fault == cudaErrorIllegalAddress || fault == cudaErrorInvalidAddressSpace);
  // ... and cudaGetLastError once more, then no longer (CUDA 13 on an H200)
  EXPECT_ERR(cudaGetLastError(), fault);
  EXPECT_ERR(cudaGetLastError(), cudaSuccess);
  // ... but sticky for every call: queued ones and synchronizing ones
  EXPECT_ERR(cudaMemsetAsync(d, 0, 4, s), fault);
  EXPECT_ERR(cudaStreamSynchronize(s), fault);
  EXPECT_ERR(cudaDeviceSynchronize(), fault);
  int *d2 = nullptr;
  EXPECT_ERR(cudaMalloc(&d2, 16), fault);
  // until a reset
  // (CUDA 13 on an H200 resets but returns the sticky error; softgpu and
  // older drivers return cudaSuccess)
  cudaError_t reset = cudaDeviceReset();
  EXPECT(reset == cudaSuccess || reset == fault);
  (void)cudaGetLastError();
  if (reset != cudaSuccess) {
    // The H200 then refuses new contexts (cudaErrorDevicesUnavailable
    // natively) until the GPU itself is reset: nothing left to check.
    std::printf("cudaDeviceReset: %s; recovery not checked\n", cudaGetErrorName(reset));
    pass("async_errors");
    return 0;
  }
  CHECK(cudaMalloc(&d, 64 * sizeof(int)));
  CHECK(cudaMemset(d, 0, 64 * sizeof(int)));
  nothing<<<1, 1>>>();
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaFree(d));
  pass("async_errors");
  return 0;
}
