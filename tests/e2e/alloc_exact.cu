// cudaMalloc answered by the client's arena (issue 6) stays exact: run
// against a server with --mem-quota, allocations succeed and fail exactly
// where the quota says (small ones come from 2 MiB chunks, like the GPU's
// own allocation granularity), cudaMemGetInfo counts unused arena memory
// as free, and memory freed is usable again, also for one big allocation.
#include "rgpu_check.h"
#include <cstdint>
#include <vector>

__global__ void fill(unsigned char *p, size_t n, unsigned char v) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

int main() {
  size_t free0 = 0, total = 0;
  CHECK(cudaMemGetInfo(&free0, &total));
  std::printf("free %zu total %zu\n", free0, total);
  const size_t MiB = 1u << 20;
  // The exact figures below hold for a quota (ctest runs it against
  // --mem-quota 16M); a whole real GPU has other tenants and its own
  // granularity, so there is nothing exact to check.
  if (total > 256 * MiB) {
    std::printf("no --mem-quota (total %zu): nothing exact to check\n", total);
    pass("alloc_exact");
    return 0;
  }
  EXPECT(free0 >= 8 * MiB);
  // many small allocations, all distinct and usable
  std::vector<unsigned char *> small(64);
  for (size_t i = 0; i < small.size(); i++) {
    CHECK(cudaMalloc((void **)&small[i], 1000 + i));
    EXPECT(((uintptr_t)small[i] & 255) == 0);
    fill<<<4, 256>>>(small[i], 1000 + i, (unsigned char)i);
  }
  CHECK(cudaGetLastError());
  for (size_t i = 0; i < small.size(); i++) {
    unsigned char b[1000];
    CHECK(cudaMemcpy(b, small[i], sizeof b, cudaMemcpyDeviceToHost));
    for (int k = 0; k < 1000; k++) EXPECT(b[k] == (unsigned char)i);
  }
  size_t free1 = 0;
  CHECK(cudaMemGetInfo(&free1, &total));
  EXPECT(free1 < free0 && free0 - free1 < 2 * MiB);  // about 64 KB used
  // the rest of the quota in one piece: exactly what is left of whole pages
  unsigned char *big = nullptr;
  size_t rest = free0 - 2 * MiB;
  CHECK(cudaMalloc((void **)&big, rest));
  // nothing more fits in a page of its own ...
  void *none = nullptr;
  EXPECT_ERR(cudaMalloc(&none, 3 * MiB), cudaErrorMemoryAllocation);
  EXPECT_ERR(cudaGetLastError(), cudaErrorMemoryAllocation);
  // ... but a small one still does, from the arena's chunk
  unsigned char *s2 = nullptr;
  CHECK(cudaMalloc((void **)&s2, 4096));
  // everything back, then the whole quota in one allocation
  for (auto p : small) CHECK(cudaFree(p));
  CHECK(cudaFree(s2));
  CHECK(cudaFree(big));
  size_t free2 = 0;
  CHECK(cudaMemGetInfo(&free2, &total));
  EXPECT(free2 == free0);
  CHECK(cudaMalloc((void **)&big, free0));
  fill<<<64, 256>>>(big, 64 * 256, 7);
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaFree(big));
  // and small ones again (the arena gave its chunk back for the big one)
  CHECK(cudaMalloc((void **)&s2, 100));
  CHECK(cudaFree(s2));
  pass("alloc_exact");
  return 0;
}
