// rgpu-nvcc-flags: -lcuda
// A kernel fault is one error for both APIs (issue 15): the runtime
// launches a kernel that stores to address 0x10 (mapped in no process, so
// every GPU reports the same fault: see async_errors.cu); the driver's
// synchronization reports it, and from then on it is sticky for driver and
// runtime calls alike.
#include <cuda.h>
#include "rgpu_check.h"

__global__ void write_at(int *p, long long offset) { p[offset] = 1; }

static const char *cu_name(CUresult r) {
  const char *n = "?";
  cuGetErrorName(r, &n);
  return n;
}

int main() {
  CHECK(cudaSetDevice(0));
  int *d;
  CHECK(cudaMalloc(&d, 64 * sizeof(int)));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CUdeviceptr before;
  if (cuMemAlloc(&before, 256) != CUDA_SUCCESS) {
    std::fprintf(stderr, "FAIL: cuMemAlloc before the fault\n");
    return 1;
  }
  write_at<<<1, 1, 0, s>>>(nullptr, 4);
  CUresult fault = cuStreamSynchronize((CUstream)s);
  std::printf("driver sync: %s\n", cu_name(fault));
  EXPECT(fault == CUDA_ERROR_ILLEGAL_ADDRESS);
  // Sticky for the driver...
  CUdeviceptr p;
  CUresult r = cuMemAlloc(&p, 256);
  std::printf("driver alloc after the fault: %s\n", cu_name(r));
  EXPECT(r == CUDA_ERROR_ILLEGAL_ADDRESS);
  r = cuCtxSynchronize();
  std::printf("driver context sync: %s\n", cu_name(r));
  EXPECT(r == CUDA_ERROR_ILLEGAL_ADDRESS);
  // ...and for the runtime, which never saw the fault itself.
  cudaError_t e = cudaDeviceSynchronize();
  std::printf("runtime sync: %s\n", cudaGetErrorName(e));
  EXPECT(e == cudaErrorIllegalAddress);
  e = cudaMemsetAsync(d, 0, 4, s);
  std::printf("runtime memset: %s\n", cudaGetErrorName(e));
  EXPECT(e == cudaErrorIllegalAddress);
  pass("drv_sticky");
  return 0;
}
