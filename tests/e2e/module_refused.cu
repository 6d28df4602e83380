// A module the device cannot load (issue 14).  On a GPU this is an ordinary
// program: a recursive device function, 10th Fibonacci number.  softgpu
// refuses recursion when it loads the PTX, and what a user must then see is
// the server's reason, once, at error level ("the server refused the module
// of kernel ...: ... recursive device function calls ..."), and, from
// `rgpu run` with its private server, where that server's log was kept: the
// program fails as it would with a refused module on a GPU (the launch
// returns the load's error, cudaErrorNotSupported from softgpu) and exits 1.
#include "rgpu_check.h"

__device__ __noinline__ int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

__global__ void fib_kernel(int *out, int n) { *out = fib(n); }

int main() {
  int *d;
  CHECK(cudaMalloc(&d, sizeof(int)));
  fib_kernel<<<1, 1>>>(d, 10);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    std::printf("launch: %s\n", cudaGetErrorName(e));
    return 1;
  }
  int h = 0;
  CHECK(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost));
  std::printf("fib(10) = %d\n", h);
  EXPECT(h == 55);
  CHECK(cudaFree(d));
  pass("module_refused");
  return 0;
}
