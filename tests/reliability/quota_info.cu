// Prints what cudaMemGetInfo reports and whether an allocation above it
// fails: used by the reliability checks to see a --mem-quota server.
#include <cuda_runtime.h>
#include <stdio.h>
int main(void) {
  size_t fr = 0, tot = 0;
  cudaError_t e = cudaMemGetInfo(&fr, &tot);
  printf("meminfo %d free=%zu total=%zu\n", (int)e, fr, tot);
  void *p = NULL;
  e = cudaMalloc(&p, tot + (1u << 20));
  printf("over-quota malloc -> %s\n", cudaGetErrorName(e));
  return 0;
}
