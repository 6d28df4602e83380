// Device printf reaches the client's stdout.
#include "rgpu_check.h"

__global__ void hello(int base, double f, const char *unused) {
  if (threadIdx.x < 2) printf("hello from block %d thread %d: %d %.2f %s\n", blockIdx.x, threadIdx.x, base + threadIdx.x, f, "ok");
}

int main() {
  hello<<<2, 32>>>(40, 3.14159, nullptr);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::fflush(stdout);
  pass("device_printf");
  return 0;
}
