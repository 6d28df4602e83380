// A host function still pending on a stream, a copy queued behind it, then
// a request the server answers only after all its background work (GOODBYE
// at exit, cudaDeviceReset): the server must keep
// reading the connection while it waits, or it never sees the callback's
// HOST_CALL_DONE and the program hangs (issue 14, "Found by hostile
// clients").  Usage: host_callback_exit exit|reset [BYTES]
// BYTES (default 64 KiB): the size of the queued copy; a large one travels
// on a QUIC bulk lane, whose barrier GOODBYE and cudaDeviceReset wait for.
#include "rgpu_check.h"
#include <atomic>
#include <chrono>
#include <thread>

static std::atomic<int> g_ran{0};
static void slow(void *) {
  // Long enough for the program's next request to reach the server first.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  g_ran = 1;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "exit";
  const size_t n = argc > 2 ? std::strtoull(argv[2], nullptr, 0) : (size_t)1 << 16;
  int *d;
  CHECK(cudaMalloc(&d, n));
  CHECK(cudaMemset(d, 7, n));
  char *host; // pinned: the copy stays asynchronous (a pageable one waits)
  CHECK(cudaMallocHost(&host, n));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CHECK(cudaLaunchHostFunc(s, slow, nullptr));
  CHECK(cudaMemcpyAsync(host, d, n, cudaMemcpyDeviceToHost, s));
  if (!strcmp(mode, "reset")) {
    CHECK(cudaDeviceReset());
    if (!g_ran) {
      std::fprintf(stderr, "FAIL the host function had not run when cudaDeviceReset returned\n");
      return 1;
    }
  }
  // "exit": returns with the host function pending (GOODBYE waits for it).
  std::printf("PASS host_callback_exit %s\n", mode);
  return 0;
}
