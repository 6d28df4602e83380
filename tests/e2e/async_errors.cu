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
  // The store goes to address 0x10: the lowest page is mapped in no process,
  // so every GPU reports the same fault there (an H200 natively:
  // cudaErrorIllegalAddress, client/probe/h200-results.txt; softgpu too).
  // A store far past an allocation is not that: what lies there depends on
  // the process (an rgpu worker has pinned staging pools and other sessions'
  // chunks around its allocations), and an H200 answered
  // cudaErrorInvalidAddressSpace for such an address in the worker while
  // the same program natively got cudaErrorIllegalAddress.
  int *d;
  CHECK(cudaMalloc(&d, 64 * sizeof(int)));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  write_at<<<1, 1, 0, s>>>(nullptr, 4);
  // ... cudaGetLastError right after it does not wait for it (an H200
  // says cudaSuccess here) ...
  cudaError_t e = cudaGetLastError();
  EXPECT(e == cudaSuccess || e == cudaErrorIllegalAddress);
  // ... the next synchronization reports it ...
  cudaError_t fault = cudaStreamSynchronize(s);
  std::printf("fault: %s\n", cudaGetErrorName(fault));
  EXPECT_ERR(fault, cudaErrorIllegalAddress);
  // ... and cudaGetLastError once more, then no longer (CUDA 13 on an H200)
  EXPECT_ERR(cudaGetLastError(), fault);
  EXPECT_ERR(cudaGetLastError(), cudaSuccess);
  // ... but sticky for every call: queued ones and synchronizing ones
  EXPECT_ERR(cudaMemsetAsync(d, 0, 4, s), fault);
  EXPECT_ERR(cudaStreamSynchronize(s), fault);
  EXPECT_ERR(cudaDeviceSynchronize(), fault);
  int *d2 = nullptr;
  EXPECT_ERR(cudaMalloc(&d2, 16), fault);
  // ... until a reset.  CUDA 13 on an H200 resets but may return the sticky
  // error; softgpu returns cudaSuccess.
  cudaError_t reset = cudaDeviceReset();
  EXPECT(reset == cudaSuccess || reset == fault);
  (void)cudaGetLastError();
  // After such a fault an H200 natively refuses the new context
  // (cudaErrorDevicesUnavailable) until the GPU itself is reset; anywhere
  // else the device works again, fully.  Nothing is printed about which:
  // the output must read the same natively and through rgpu.
  cudaError_t again = cudaMalloc(&d, 64 * sizeof(int));
  if (again == cudaErrorDevicesUnavailable) {
    pass("async_errors");
    return 0;
  }
  CHECK(again);
  CHECK(cudaMemset(d, 0, 64 * sizeof(int)));
  nothing<<<1, 1>>>();
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaFree(d));
  pass("async_errors");
  return 0;
}
