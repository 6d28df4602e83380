// Managed memory from several host threads, each with a stream of its own,
// as CUDA's UnifiedMemoryStreams sample uses it: every task's buffer is
// attached to its thread's stream (cudaStreamAttachMemAsync) and worked on
// by a kernel, or attached to the host and worked on by the CPU, while
// the other threads' tasks run.  Each thread checks its results after its
// own stream's synchronization; the buffers never mix.
#include "rgpu_check.h"
#include <thread>
#include <vector>

__global__ void step(int *v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] = v[i] * 2 + 1;
}

static const int N = 3000, TASKS = 8, THREADS = 4;

static void worker(int t, int *bad) {
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  for (int k = 0; k < TASKS; k++) {
    int *v = nullptr;
    // Attached to the host from the start, so that other threads' work
    // cannot claim it while this thread fills it (CUDA's rule on devices
    // without concurrent managed access, which rgpu reports).
    CHECK(cudaMallocManaged(&v, N * sizeof(int), cudaMemAttachHost));
    for (int i = 0; i < N; i++) v[i] = t * 100000 + k * 1000 + i % 1000;
    for (int round = 0; round < 3; round++) {
      if ((k + round) % 3 == 0) {
        CHECK(cudaStreamAttachMemAsync(s, v, 0, cudaMemAttachHost));
        CHECK(cudaStreamSynchronize(s));
        for (int i = 0; i < N; i++) v[i] = v[i] * 2 + 1;
      } else {
        CHECK(cudaStreamAttachMemAsync(s, v, 0, cudaMemAttachSingle));
        step<<<(N + 255) / 256, 256, 0, s>>>(v, N);
        CHECK(cudaStreamSynchronize(s));
      }
    }
    for (int i = 0; i < N; i++) {
      long long want = t * 100000 + k * 1000 + i % 1000;
      for (int r = 0; r < 3; r++) want = want * 2 + 1;
      if (v[i] != want) (*bad)++;
    }
    CHECK(cudaFree(v));
  }
  CHECK(cudaStreamDestroy(s));
}

int main() {
  int bad[THREADS] = {0};
  std::vector<std::thread> th;
  for (int t = 0; t < THREADS; t++) th.emplace_back(worker, t, &bad[t]);
  for (auto &x : th) x.join();
  int total = 0;
  for (int t = 0; t < THREADS; t++) total += bad[t];
  EXPECT(total == 0);
  std::printf("%d threads x %d tasks, device and host steps mixed: every value right\n", THREADS,
              TASKS);
  pass("managed_streams");
  return 0;
}
