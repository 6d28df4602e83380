// Order across host threads and streams (issue 6): a producer thread fills
// a buffer on its stream and records an event; a consumer thread makes its
// own stream wait for that event (cudaStreamWaitEvent across threads), then
// transforms the buffer and copies the result back asynchronously.  Every
// round's result must be exact.
#include "rgpu_check.h"
#include <atomic>
#include <thread>

__global__ void produce(int *p, int n, int round) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = i * 3 + round;
}
__global__ void consume(const int *p, int *q, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) q[i] = p[i] * 2 + 1;
}

int main() {
  const int n = 1 << 14, rounds = 40, slots = 2;
  int *buf[slots], *out[slots], *h[slots];
  cudaEvent_t produced[slots], consumed[slots];
  for (int k = 0; k < slots; k++) {
    CHECK(cudaMalloc(&buf[k], n * sizeof(int)));
    CHECK(cudaMalloc(&out[k], n * sizeof(int)));
    CHECK(cudaMallocHost(&h[k], n * sizeof(int)));
    CHECK(cudaEventCreateWithFlags(&produced[k], cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&consumed[k], cudaEventDisableTiming));
  }
  std::atomic<int> ready{-1}, done{-1};
  std::atomic<int> failed{0};

  std::thread producer([&] {
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int r = 0; r < rounds; r++) {
      int k = r % slots;
      // The slot is free once the consumer's stream has read it.
      while (done.load() < r - slots) std::this_thread::yield();
      if (r >= slots) CHECK(cudaStreamWaitEvent(s, consumed[k], 0));
      produce<<<(n + 255) / 256, 256, 0, s>>>(buf[k], n, r);
      CHECK(cudaEventRecord(produced[k], s));
      ready.store(r);
    }
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaStreamDestroy(s));
  });

  std::thread consumer([&] {
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int r = 0; r < rounds; r++) {
      int k = r % slots;
      while (ready.load() < r) std::this_thread::yield();
      CHECK(cudaStreamWaitEvent(s, produced[k], 0));
      consume<<<(n + 255) / 256, 256, 0, s>>>(buf[k], out[k], n);
      CHECK(cudaEventRecord(consumed[k], s));
      CHECK(cudaMemcpyAsync(h[k], out[k], n * sizeof(int), cudaMemcpyDeviceToHost, s));
      CHECK(cudaStreamSynchronize(s));
      for (int i = 0; i < n; i++)
        if (h[k][i] != (i * 3 + r) * 2 + 1) {
          std::fprintf(stderr, "FAIL round %d element %d: %d, expected %d\n", r, i, h[k][i],
                       (i * 3 + r) * 2 + 1);
          failed = 1;
          break;
        }
      done.store(r);
    }
    CHECK(cudaStreamDestroy(s));
  });
  producer.join();
  consumer.join();
  EXPECT(failed == 0);
  for (int k = 0; k < slots; k++) {
    CHECK(cudaEventDestroy(produced[k]));
    CHECK(cudaEventDestroy(consumed[k]));
    CHECK(cudaFree(buf[k]));
    CHECK(cudaFree(out[k]));
    CHECK(cudaFreeHost(h[k]));
  }
  pass("multithread_events");
  return 0;
}
