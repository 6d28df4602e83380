// What PyTorch's `tensor.cpu()` and `.item()` do, many times: kernels on a
// stream, a cudaMemcpyAsync into pageable memory (CUDA returns only once
// the copy has completed, so the bytes must be there when it returns), then
// cudaStreamSynchronize and cudaStreamQuery of the same stream.  Checks the
// values every time; through rgpu it also reads rgpu's counters
// (rgpu_stats_json, found with dlsym: natively there is none) and requires
// one round trip per iteration, for the copy, not two: the stream is known
// idle after it.  Work queued after the copy must still be waited for.
// Usage: sync_after_copy [N]: N ints per copy (default 1000; a large copy
// travels on a QUIC bulk lane).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "rgpu_check.h"

__global__ void fill(int *p, int n, int v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v + i;
}

__global__ void slow_add(int *p, int n, long long spin) {
  long long t0 = clock64();
  while (clock64() - t0 < spin) {
  }
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1;
}

typedef int (*stats_fn)(char *, size_t);

static long round_trips(stats_fn fn) {
  char buf[4096];
  if (!fn || fn(buf, sizeof buf) <= 0) return -1;
  const char *p = std::strstr(buf, "\"round_trips\":");
  return p ? std::atol(p + 14) : -1;
}

int main(int argc, char **argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 1000, iters = 50;
  EXPECT(n > 0);
  int *d;
  cudaStream_t s;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  CHECK(cudaStreamCreate(&s));
  int *host = static_cast<int *>(std::malloc(n * sizeof(int)));
  stats_fn stats = reinterpret_cast<stats_fn>(dlsym(RTLD_DEFAULT, "rgpu_stats_json"));

  // Warm-up: module load and first launch.
  fill<<<(n + 255) / 256, 256, 0, s>>>(d, n, 0);
  CHECK(cudaStreamSynchronize(s));

  long before = round_trips(stats);
  for (int it = 0; it < iters; it++) {
    fill<<<(n + 255) / 256, 256, 0, s>>>(d, n, it * 7);
    CHECK(cudaMemcpyAsync(host, d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    // Pageable destination: complete on return, before any synchronization.
    for (int i = 0; i < n; i++) EXPECT(host[i] == it * 7 + i);
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaStreamQuery(s));
  }
  long after = round_trips(stats);

  // Work queued after the copy is not covered by it: the synchronization
  // must wait for the slow kernel, and its result must be visible.
  CHECK(cudaMemcpyAsync(host, d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
  slow_add<<<(n + 255) / 256, 256, 0, s>>>(d, n, 20000000);
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaStreamQuery(s));
  CHECK(cudaMemcpy(host, d, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++) EXPECT(host[i] == (iters - 1) * 7 + i + 1);

  // A launch on another stream does not make s busy, but rgpu cannot know
  // that cheaply: it must still answer correctly.
  cudaStream_t s2;
  CHECK(cudaStreamCreate(&s2));
  CHECK(cudaMemcpyAsync(host, d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
  slow_add<<<(n + 255) / 256, 256, 0, s2>>>(d, n, 1000);
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaStreamSynchronize(s2));
  CHECK(cudaMemcpy(host, d, sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT(host[0] == (iters - 1) * 7 + 2);

  if (before >= 0 && after >= 0) {
    std::printf("rgpu-stats: %d iterations of launch + pageable D2H copy + stream sync + query: %ld round trips\n",
                iters, after - before);
    EXPECT(after - before == iters);
  } else {
    std::printf("rgpu-stats: not running through rgpu, round trips not counted\n");
  }
  CHECK(cudaStreamDestroy(s2));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d));
  std::free(host);
  std::printf("values checked over %d iterations\n", iters);
  pass("sync_after_copy");
  return 0;
}
