// A host callback sees what the copies before it on its stream fetched:
// cudaMemcpyAsync into pinned memory, then cudaLaunchHostFunc reading that
// memory, 200 times.  rgpu completes such copies in the background, so the
// server must not announce the callback before the copy's bytes are sent
// (before the fix, 188 of 200 callbacks saw stale data).
#include <unistd.h>

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

static void CUDART_CB slow_callback(void *p) {
  usleep(100 * 1000);
  *(volatile int *)p = 1;
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

  // A backlog behind a slow callback: 200 copies queued after it on its
  // stream wait (on a GPU) until it returns.  The server must keep reading
  // meanwhile, or it never sees the callback's completion (a server that
  // gave each waiting copy a thread of its own, 64 at most, hung here).
  // 200 stays within the server's 256 pre-pinned small staging buffers.
  const int backlog = 200;
  volatile int slow_done = 0;
  set_value<<<4, 256, 0, s>>>(d, 7, n);
  CHECK(cudaLaunchHostFunc(s, slow_callback, (void *)&slow_done));
  for (int k = 0; k < backlog; k++)
    CHECK(cudaMemcpyAsync(h + (k % slots) * 16, d + (k % n), sizeof(int) * 16, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(slow_done == 1);
  for (int k = 0; k < backlog; k++) EXPECT(h[(k % slots) * 16] == 7);

  // A burst: 300 host functions, each behind a kernel and a copy, with no
  // synchronization in between.  A real driver takes only about 57 such
  // groups behind a host function that has not returned before its enqueue
  // blocks (measured on the H200); the client bounds what it sends behind
  // an unanswered one, so the server never blocks in an enqueue while the
  // HOST_CALL_DONE that would free the stream waits to be read.
  static int order[300];
  static int ran = 0;
  struct Step {
    int index;
  };
  static Step steps[300];
  for (int k = 0; k < 300; k++) {
    steps[k].index = k;
    set_value<<<4, 256, 0, s>>>(d + (k % slots) * n, k, n);
    CHECK(cudaMemcpyAsync(h + (k % slots) * 16, d + (k % slots) * n, sizeof(int) * 16,
                          cudaMemcpyDeviceToHost, s));
    CHECK(cudaLaunchHostFunc(
        s, [](void *p) { order[ran++] = ((Step *)p)->index; }, &steps[k]));
  }
  CHECK(cudaStreamSynchronize(s));
  std::printf("burst: %d of 300 host functions ran\n", ran);
  EXPECT(ran == 300);
  for (int k = 0; k < 300; k++) EXPECT(order[k] == k);
  CHECK(cudaFreeHost(h));
  CHECK(cudaFree(d));
  pass("host_callback_data");
  return 0;
}
