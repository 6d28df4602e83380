// Bad frees and bad pointers give CUDA's error codes, and the error state
// machine (last error, peek) behaves as CUDA's does.
#include "rgpu_check.h"

int main() {
  EXPECT(std::strcmp(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument") == 0);
  EXPECT(std::strcmp(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation") == 0);
  EXPECT(std::strcmp(cudaGetErrorString(cudaSuccess), "no error") == 0);
  CHECK(cudaFree(nullptr));  // freeing NULL is allowed
  int local = 0;
  EXPECT_ERR(cudaFree(&local), cudaErrorInvalidValue);
  // last error is recorded, peek keeps it, get clears it
  EXPECT_ERR(cudaPeekAtLastError(), cudaErrorInvalidValue);
  EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_ERR(cudaGetLastError(), cudaSuccess);
  void *d = nullptr;
  CHECK(cudaMalloc(&d, 1024));
  CHECK(cudaFree(d));
  EXPECT_ERR(cudaFree(d), cudaErrorInvalidValue);  // double free
  (void)cudaGetLastError();
  char buf[64] = {0};
  CHECK(cudaMalloc(&d, 32));
  // past the end of an allocation, and a pointer that was never allocated
  EXPECT_ERR(cudaMemcpy(d, buf, 64, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_ERR(cudaMemcpy(buf, (char *)d + 16, 32, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_ERR(cudaMemcpy((void *)0x1000, buf, 8, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_ERR(cudaMemset((void *)0x1000, 0, 8), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  // an absurd allocation fails cleanly
  void *huge = nullptr;
  EXPECT_ERR(cudaMalloc(&huge, (size_t)1 << 50), cudaErrorMemoryAllocation);
  (void)cudaGetLastError();
  // an unknown stream handle is rejected, not dereferenced into a crash
  // (CUDA itself would crash on a garbage pointer; rgpu checks its table)
  // the device still works after all these errors
  CHECK(cudaMemcpy(d, buf, 32, cudaMemcpyHostToDevice));
  CHECK(cudaFree(d));
  CHECK(cudaDeviceSynchronize());
  pass("bad_pointers");
  return 0;
}
