// A host callback sees what the copies before it on its stream fetched:
// cudaMemcpyAsync into pinned memory, then cudaLaunchHostFunc reading that
// memory, 200 times.  rgpu completes such copies in the background, so the
// server must not announce the callback before the copy's bytes are sent
// (before the fix, 188 of 200 callbacks saw stale data).
#include "rgpu_check.h"

struct Probe {
  const int *host;
  int expect;
  int bad;
};

__global__ void set_value(int *d, int v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) d[i] = v;
}

static void CUDART_CB check_probe(void *p) {
  Probe *c = (Probe *)p;
  for (int i = 0; i < 1024; i++)
    if (c->host[i] != c->expect) {
      c->bad = 1;
      return;
    }
}

int main() {
  const int slots = 64, n = 1024, iters = 200;
  int *d = nullptr, *h = nullptr;
  CHECK(cudaMalloc(&d, sizeof(int) * n * slots));
  CHECK(cudaMallocHost(&h, sizeof(int) * n * slots));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  static Probe probes[iters];
  for (int it = 0; it < iters; it++) {
    int slot = it % slots;
    probes[it] = {h + slot * n, it, 0};
    set_value<<<4, 256, 0, s>>>(d + slot * n, it, n);
    CHECK(cudaMemcpyAsync(h + slot * n, d + slot * n, sizeof(int) * n, cudaMemcpyDeviceToHost, s));
    CHECK(cudaLaunchHostFunc(s, check_probe, &probes[it]));
    // a slot is reused only after everything that reads it has run
    if (slot == slots - 1) CHECK(cudaStreamSynchronize(s));
  }
  CHECK(cudaStreamSynchronize(s));
  int bad = 0;
  for (int it = 0; it < iters; it++) bad += probes[it].bad;
  std::printf("callbacks that saw stale data: %d of %d\n", bad, iters);
  EXPECT(bad == 0);
  CHECK(cudaFreeHost(h));
  CHECK(cudaFree(d));
  pass("host_callback_data");
  return 0;
}
