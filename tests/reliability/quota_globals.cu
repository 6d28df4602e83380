// --mem-quota counts a module's __device__ variables (issue 14): under a
// 64 MiB quota a module holding a 512 MiB array must not load; the program
// sees cudaErrorMemoryAllocation (and the server's reason in the log), and a
// small allocation still works afterwards.  Run against --mem-quota 64M.
#include "rgpu_check.h"

__device__ char g_big[512u << 20];

__global__ void touch(int v) { g_big[threadIdx.x] = (char)v; }

int main() {
  touch<<<1, 32>>>(1);
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  std::printf("launch with a 512 MiB __device__ array: %s\n", cudaGetErrorName(e));
  if (e != cudaErrorMemoryAllocation) {
    std::fprintf(stderr, "FAIL expected cudaErrorMemoryAllocation\n");
    return 1;
  }
  void *p = nullptr;
  cudaGetLastError();
  CHECK(cudaMalloc(&p, 1 << 20));
  CHECK(cudaFree(p));
  std::printf("PASS quota_globals\n");
  return 0;
}
