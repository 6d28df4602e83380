// Round trips only at synchronization points (issue 6): between two
// synchronizations, 1000 kernel launches and 100 asynchronous copies (H2D
// and D2H between pinned buffers, D2D, memsets, event records, stream waits)
// and 100 small cudaMalloc/cudaFree pairs must not wait for the server.  Run with `--ops 0` it does the same
// start-up and the same two synchronizations without the work in between;
// tests/e2e_roundtrips.sh compares the two RGPU_STATS files (equal round
// trips) and checks every result here.
#include "rgpu_check.h"

__global__ void add_one(unsigned *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1;
}

int main(int argc, char **argv) {
  int ops = 1;
  if (argc > 2 && std::strcmp(argv[1], "--ops") == 0) ops = std::atoi(argv[2]);
  const int n = 1024, launches = 1000, copies = 100;
  const size_t bytes = n * sizeof(unsigned);
  unsigned *d = nullptr, *d2 = nullptr, *h_in = nullptr, *h_out = nullptr;
  CHECK(cudaMalloc(&d, bytes));
  CHECK(cudaMalloc(&d2, bytes));
  CHECK(cudaMallocHost(&h_in, bytes));
  CHECK(cudaMallocHost(&h_out, (size_t)copies * bytes));
  cudaStream_t s, t;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));
  cudaEvent_t ev;
  CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  for (int i = 0; i < n; i++) h_in[i] = (unsigned)i;
  // Start-up: module load and every lazy fetch happen before sync #1.
  add_one<<<1, 1, 0, s>>>(d, 0);
  CHECK(cudaMemsetAsync(d, 0, bytes, s));
  CHECK(cudaDeviceSynchronize());  // sync #1

  if (ops) {
    CHECK(cudaMemcpyAsync(d, h_in, bytes, cudaMemcpyHostToDevice, s));
    // 1000 launches, and after every tenth a D2H snapshot into pinned
    // memory: 100 asynchronous copies that complete in the background.
    for (int k = 0; k < launches; k++) {
      add_one<<<(n + 255) / 256, 256, 0, s>>>(d, n);
      if (k % 10 == 9) {
        int j = k / 10;
        CHECK(cudaMemcpyAsync(h_out + (size_t)j * n, d, bytes, cudaMemcpyDeviceToHost, s));
      }
    }
    // 100 small allocations, used and freed: answered by the client's arena
    for (int k = 0; k < 100; k++) {
      unsigned *tmp = nullptr;
      CHECK(cudaMalloc(&tmp, 512));
      CHECK(cudaMemsetAsync(tmp, k, 512, t));
      CHECK(cudaFree(tmp));
    }
    CHECK(cudaEventRecord(ev, s));
    CHECK(cudaStreamWaitEvent(t, ev, 0));
    CHECK(cudaMemcpyAsync(d2, d, bytes, cudaMemcpyDeviceToDevice, t));
    CHECK(cudaGetLastError());
  } else {
    // One queued call, so that sync #2 has work to wait for in both modes:
    // a cudaDeviceSynchronize with nothing sent since the last one is
    // answered by the client without a round trip.
    CHECK(cudaMemsetAsync(d2, 0, 4, t));
  }
  CHECK(cudaDeviceSynchronize());  // sync #2

  if (ops) {
    // Verified only after both synchronizations have been counted: reading
    // d2 back is the next (third) round trip, in both modes alike.
    for (int j = 0; j < copies; j++)
      for (int i = 0; i < n; i++) {
        unsigned want = (unsigned)i + 10u * (unsigned)(j + 1);
        if (h_out[(size_t)j * n + i] != want) {
          std::fprintf(stderr, "FAIL copy %d element %d: %u, expected %u\n", j, i,
                       h_out[(size_t)j * n + i], want);
          return 1;
        }
      }
  }
  CHECK(cudaMemcpy(h_in, d2, bytes, cudaMemcpyDeviceToHost));  // round trip #3
  if (ops)
    for (int i = 0; i < n; i++) EXPECT(h_in[i] == (unsigned)i + (unsigned)launches);
  CHECK(cudaEventDestroy(ev));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaStreamDestroy(t));
  CHECK(cudaFreeHost(h_in));
  CHECK(cudaFreeHost(h_out));
  CHECK(cudaFree(d));
  CHECK(cudaFree(d2));
  pass("async_roundtrips");
  return 0;
}
