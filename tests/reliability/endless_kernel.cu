// A kernel that never ends (issue 14): the program exits with it running,
// or (with "stay") stays connected while the test stops the server.  The
// server's worker must still end in bounded time (endless_kernel.sh).
#include "rgpu_check.h"
#include <chrono>
#include <thread>

__device__ volatile int g_stop;

__global__ void spin(int *out) {
  while (!g_stop) {
  }
  *out = 1;
}

int main(int argc, char **argv) {
  int *d;
  CHECK(cudaMalloc(&d, sizeof(int)));
  spin<<<1, 1>>>(d);
  CHECK(cudaGetLastError());
  std::printf("launched\n");
  std::fflush(stdout);
  if (argc > 1 && !strcmp(argv[1], "stay"))
    std::this_thread::sleep_for(std::chrono::seconds(60));
  return 0;
}
