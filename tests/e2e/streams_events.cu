// Streams and events: create/destroy/synchronize/query, records, elapsed
// time, waits across streams, flags, the legacy and per-thread handles.
#include "rgpu_check.h"
#include <vector>

int main() {
  cudaStream_t a, b, c;
  CHECK(cudaStreamCreate(&a));
  CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  int lo = 0, hi = 0;
  CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  CHECK(cudaStreamCreateWithPriority(&c, cudaStreamDefault, hi));
  cudaEvent_t e0, e1, e2;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  CHECK(cudaEventCreateWithFlags(&e2, cudaEventDisableTiming));
  const size_t n = 8u << 20;
  std::vector<char> h(n, 3), back(n);
  char *d = nullptr;
  CHECK(cudaMalloc((void **)&d, n));
  CHECK(cudaEventRecord(e0, a));
  CHECK(cudaMemcpyAsync(d, h.data(), n, cudaMemcpyHostToDevice, a));
  CHECK(cudaEventRecord(e1, a));
  CHECK(cudaEventRecord(e2, a));
  // b waits for a's copy, then reads the data back
  CHECK(cudaStreamWaitEvent(b, e2, 0));
  CHECK(cudaMemcpyAsync(back.data(), d, n, cudaMemcpyDeviceToHost, b));
  CHECK(cudaStreamSynchronize(b));
  EXPECT(std::memcmp(h.data(), back.data(), n) == 0);
  CHECK(cudaEventSynchronize(e1));
  CHECK(cudaEventQuery(e1));
  float ms = -1;
  CHECK(cudaEventElapsedTime(&ms, e0, e1));
  EXPECT(ms >= 0.0f);
  std::printf("8 MiB H2D took %.3f ms between events\n", ms);
  // timing disabled on e2: CUDA says invalid handle
  EXPECT_ERR(cudaEventElapsedTime(&ms, e0, e2), cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  CHECK(cudaStreamQuery(a));
  CHECK(cudaStreamSynchronize(c));
  // the special handles
  CHECK(cudaStreamSynchronize(cudaStreamLegacy));
  CHECK(cudaStreamSynchronize(cudaStreamPerThread));
  CHECK(cudaStreamSynchronize(0));
  CHECK(cudaEventRecord(e0, 0));
  CHECK(cudaEventSynchronize(e0));
  unsigned flags = 99;
  CHECK(cudaStreamGetFlags(b, &flags));
  EXPECT(flags == cudaStreamNonBlocking);
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  CHECK(cudaEventDestroy(e2));
  CHECK(cudaStreamDestroy(a));
  CHECK(cudaStreamDestroy(b));
  CHECK(cudaStreamDestroy(c));
  CHECK(cudaFree(d));
  pass("streams_events");
  return 0;
}
