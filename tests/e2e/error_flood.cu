// A careless program (issue 14: no hang under careless clients): a kernel
// faults, and the program goes on queueing 200,000 launches without looking
// at a single result before it synchronizes.  Every one of them fails on
// the device; through rgpu each failure is an event the server writes back
// while the client is still writing its queue, and a client that did not
// read while it wrote hung with the server, both blocked writing.  The
// synchronization reports the fault, as natively.
#include "rgpu_check.h"

__global__ void write_at(int *p) { p[0] = 1; }
__global__ void add_one(int *p) { p[threadIdx.x] += 1; }

int main() {
  int *d = nullptr;
  CHECK(cudaMalloc(&d, 64 * sizeof(int)));
  CHECK(cudaMemset(d, 0, 64 * sizeof(int)));
  add_one<<<1, 64>>>(d);
  CHECK(cudaDeviceSynchronize());
  // A store to address 0x10: a fault on every GPU (see async_errors.cu).
  write_at<<<1, 1>>>((int *)0x10);
  const int flood = 200000;
  for (int i = 0; i < flood; i++) add_one<<<1, 64>>>(d);
  cudaError_t e = cudaDeviceSynchronize();
  std::printf("synchronize after %d launches: %s\n", flood, cudaGetErrorName(e));
  EXPECT(e == cudaErrorIllegalAddress);
  // Sticky until the process ends, as CUDA keeps it.
  EXPECT(cudaMemset(d, 0, 4) == cudaErrorIllegalAddress);
  pass("error_flood");
  return 0;
}
