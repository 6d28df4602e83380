// With the server unreachable the program gets CUDA errors and a clear
// message, never a crash, a hang or an exit() inside the library.
#include "rgpu_check.h"

int main() {
  int n = 7;
  cudaError_t e = cudaGetDeviceCount(&n);
  std::printf("cudaGetDeviceCount -> %d (%s), count %d\n", (int)e, cudaGetErrorName(e), n);
  EXPECT(e == cudaErrorNoDevice);
  EXPECT(n == 0);
  void *d = nullptr;
  e = cudaMalloc(&d, 16);
  EXPECT(e != cudaSuccess);
  e = cudaDeviceSynchronize();
  EXPECT(e != cudaSuccess);
  pass("no_server");
  return 0;
}
