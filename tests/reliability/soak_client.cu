// One soak client (issue 9): for a bounded time, allocates buffers of
// varying size, copies data in (pageable and pinned, sync and async), runs
// kernels over it, copies it back and verifies every element, then frees
// everything.  Sizes stay small (at most 1 MiB per buffer) so that 64 of these
// fit on a small CI machine next to their 64 server workers: the point is
// many sessions doing many calls, not bulk memory.
//
// usage: soak_client SECONDS [SEED]
// Prints "PASS soak_client iterations=N calls~=C bytes=B" on success; the
// first wrong element or CUDA error ends it with exit 1 and a FAIL line.
#include "rgpu_check.h"
#include <chrono>
#include <cstdint>
#include <vector>

__global__ void affine(const uint32_t *x, uint32_t *y, uint32_t a, uint32_t b, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    y[i] = a * x[i] + b + (uint32_t)i;
}

// Block-level sum in shared memory (bar.sync), then one atomic per block.
__global__ void block_sum(const uint32_t *x, unsigned long long *sum, int n) {
  __shared__ unsigned long long part[128];
  unsigned long long s = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) s += x[i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(sum, part[0]);
}

static uint32_t next(uint32_t &s) {
  s ^= s << 13;
  s ^= s >> 17;
  s ^= s << 5;
  return s;
}

int main(int argc, char **argv) {
  double seconds = argc > 1 ? std::atof(argv[1]) : 10.0;
  uint32_t seed = argc > 2 ? (uint32_t)std::strtoul(argv[2], nullptr, 0) : 1u;
  if (seed == 0) seed = 1;
  const int max_n = 1 << 18; // 1 MiB of uint32_t
  std::vector<uint32_t> hx(max_n), hy(max_n);
  uint32_t *pin_in = nullptr, *pin_out = nullptr;
  CHECK(cudaMallocHost((void **)&pin_in, max_n * 4));
  CHECK(cudaMallocHost((void **)&pin_out, max_n * 4));
  cudaStream_t st;
  CHECK(cudaStreamCreate(&st));
  auto t0 = std::chrono::steady_clock::now();
  long iters = 0, calls = 0;
  unsigned long long bytes = 0;
  uint32_t rng = seed * 2654435761u + 7;
  do {
    int n = 1 + (int)(next(rng) % max_n);
    if (iters % 4 == 0) n = 1 + (int)(next(rng) % 1000); // many tiny ones too
    uint32_t a = next(rng) | 1, b = next(rng);
    uint32_t *dx, *dy;
    unsigned long long *dsum;
    CHECK(cudaMalloc(&dx, (size_t)n * 4));
    CHECK(cudaMalloc(&dy, (size_t)n * 4));
    CHECK(cudaMalloc(&dsum, 8));
    // pageable H2D, kernel, pageable D2H
    for (int i = 0; i < n; i++) hx[i] = next(rng);
    CHECK(cudaMemcpy(dx, hx.data(), (size_t)n * 4, cudaMemcpyHostToDevice));
    int blocks = (n + 127) / 128;
    if (blocks > 64) blocks = 64; // grid-stride: bounded interpreter work per launch
    affine<<<blocks, 128>>>(dx, dy, a, b, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(hy.data(), dy, (size_t)n * 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) {
      uint32_t want = a * hx[i] + b + (uint32_t)i;
      if (hy[i] != want) {
        std::fprintf(stderr, "FAIL soak_client iteration %ld: affine[%d] of %d = %u, want %u\n", iters, i, n,
                     hy[i], want);
        return 1;
      }
    }
    // pinned async H2D on a stream, memset, reduction, async D2H, sync
    unsigned long long want_sum = 0;
    for (int i = 0; i < n; i++) {
      pin_in[i] = next(rng) & 0xffffff;
      want_sum += pin_in[i];
    }
    CHECK(cudaMemcpyAsync(dx, pin_in, (size_t)n * 4, cudaMemcpyHostToDevice, st));
    CHECK(cudaMemsetAsync(dsum, 0, 8, st));
    block_sum<<<blocks, 128, 0, st>>>(dx, dsum, n);
    CHECK(cudaMemcpyAsync(dy, dx, (size_t)n * 4, cudaMemcpyDeviceToDevice, st));
    CHECK(cudaMemcpyAsync(pin_out, dy, (size_t)n * 4, cudaMemcpyDeviceToHost, st));
    unsigned long long got_sum = 0;
    CHECK(cudaMemcpyAsync(&got_sum, dsum, 8, cudaMemcpyDeviceToHost, st));
    CHECK(cudaStreamSynchronize(st));
    if (got_sum != want_sum) {
      std::fprintf(stderr, "FAIL soak_client iteration %ld: sum of %d = %llu, want %llu\n", iters, n, got_sum,
                   want_sum);
      return 1;
    }
    if (std::memcmp(pin_in, pin_out, (size_t)n * 4) != 0) {
      std::fprintf(stderr, "FAIL soak_client iteration %ld: pinned round trip of %d differs\n", iters, n);
      return 1;
    }
    CHECK(cudaFree(dx));
    CHECK(cudaFree(dy));
    CHECK(cudaFree(dsum));
    iters++;
    calls += 17;
    bytes += (unsigned long long)n * 4 * 5 + 8;
  } while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds);
  CHECK(cudaStreamDestroy(st));
  CHECK(cudaFreeHost(pin_in));
  CHECK(cudaFreeHost(pin_out));
  std::printf("PASS soak_client iterations=%ld calls~=%ld bytes=%llu\n", iters, calls, bytes);
  return 0;
}
