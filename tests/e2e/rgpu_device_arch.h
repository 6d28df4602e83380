// What the tensor-core programs (mma_*) share: the __CUDA_ARCH__ of the
// device code that runs, so a program built without sm_80 code says SKIP
// instead of testing the fallback path.
#pragma once
#include "rgpu_check.h"

__global__ void rgpu_arch_of(int *out) {
#ifdef __CUDA_ARCH__
  *out = __CUDA_ARCH__;
#endif
}

// The running device code's __CUDA_ARCH__ (0 when none ran).
static inline int device_code_arch() {
  int *d_arch, arch = 0;
  CHECK(cudaMalloc(&d_arch, sizeof(int)));
  CHECK(cudaMemset(d_arch, 0, sizeof(int)));
  rgpu_arch_of<<<1, 1>>>(d_arch);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(&arch, d_arch, sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaFree(d_arch));
  return arch;
}
