// Head-of-line blocking between host threads (issue 4, bulk streams): thread
// A moves 64 MiB copies to and from the device while thread B makes small
// synchronous calls.  Over quic:// with bulk streams the bytes of A's copies
// travel on A's own QUIC stream, so B's calls should not wait behind them.
//
// The program runs itself twice as a child (RGPU_QUIC_STREAMS=0 and =1, the
// same fixed amount of work) and prints B's median call latency alone and
// during A's transfers, and A's bandwidth, for both; it checks every byte of
// A's copies and B's replies, and that RGPU_STATS round trips did not grow
// with bulk streams.  Timings are printed, never asserted.
#include "rgpu_check.h"
#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

static double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static double pct_us(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t k = (size_t)(q * (double)(v.size() - 1) + 0.5);
  return v[k] * 1e6;
}
static double mean_us(const std::vector<double> &v) {
  double t = 0;
  for (double x : v) t += x;
  return v.empty() ? 0 : t / (double)v.size() * 1e6;
}

static const size_t kBig = 64u << 20;
static const int kIters = 3;
static const int kAlone = 200, kDuring = 400;

static int child() {
  unsigned char *d_big = nullptr, *d_small = nullptr;
  CHECK(cudaMalloc(&d_big, kBig));
  CHECK(cudaMalloc(&d_small, 64));
  CHECK(cudaMemset(d_small, 0x5a, 64));
  std::vector<unsigned char> down(kBig);

  // B's calls go on a non-blocking stream: on the legacy stream they would
  // wait (as on a GPU) for A's copies queued there, which says nothing of
  // the transport.  Into pageable memory the copy is synchronous.
  cudaStream_t sb;
  CHECK(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking));
  auto small_call = [&](std::vector<double> *lat) {
    unsigned char h[64];
    double t0 = now_s();
    CHECK(cudaMemcpyAsync(h, d_small, 64, cudaMemcpyDeviceToHost, sb));
    double t1 = now_s();
    for (int i = 0; i < 64; i++) EXPECT(h[i] == 0x5a);
    if (lat) lat->push_back(t1 - t0);
  };

  // B alone.
  std::vector<double> alone;
  for (int i = 0; i < 10; i++) small_call(nullptr); // warm up
  for (int i = 0; i < kAlone; i++) small_call(&alone);

  // A's copies with B's calls beside them.  The patterns are made first,
  // so that B's calls meet A's transfers, not A's loops.
  std::vector<std::vector<unsigned char>> pat(kIters, std::vector<unsigned char>(kBig));
  for (int it = 0; it < kIters; it++)
    for (size_t i = 0; i < kBig; i++) pat[it][i] = (unsigned char)(i * 7 + it * 13 + (i >> 20));
  std::atomic<int> a_running{0};
  std::vector<double> during;
  double a_bytes = 0, a_t = 0;
  std::thread a([&] {
    a_running.store(1);
    for (int it = 0; it < kIters; it++) {
      std::fill(down.begin(), down.end(), 0);
      double t0 = now_s();
      CHECK(cudaMemcpy(d_big, pat[it].data(), kBig, cudaMemcpyHostToDevice));
      CHECK(cudaMemcpy(down.data(), d_big, kBig, cudaMemcpyDeviceToHost));
      a_t += now_s() - t0;
      a_bytes += 2.0 * kBig;
      if (std::memcmp(pat[it].data(), down.data(), kBig) != 0) {
        size_t i = 0;
        while (pat[it][i] == down[i]) i++;
        std::fprintf(stderr, "FAIL iteration %d: byte %zu is %u, expected %u\n", it, i, down[i],
                     pat[it][i]);
        std::exit(1);
      }
    }
    a_running.store(2);
  });
  std::thread b([&] {
    while (a_running.load() == 0) std::this_thread::yield();
    // A fixed number of calls (RGPU_STATS compares runs); those that began
    // and ended while A was copying are A's neighbours.
    for (int i = 0; i < kDuring; i++) {
      int before = a_running.load();
      std::vector<double> one;
      small_call(&one);
      if (before == 1 && a_running.load() == 1) during.push_back(one[0]);
    }
  });
  a.join();
  b.join();
  CHECK(cudaStreamDestroy(sb));
  CHECK(cudaFree(d_big));
  CHECK(cudaFree(d_small));
  // The median says how a typical call fares; the tail and the mean show
  // the calls that waited behind a whole copy.
  std::printf("RESULT b_alone_p50_us=%.1f b_during_p50_us=%.1f p90_us=%.1f max_us=%.1f "
              "mean_us=%.1f samples=%zu a_MBps=%.1f\n",
              pct_us(alone, 0.5), pct_us(during, 0.5), pct_us(during, 0.9), pct_us(during, 1.0),
              mean_us(during), during.size(), a_bytes / a_t / 1e6);
  return 0;
}

static int run(const char *streams, long *rts) {
  char path[] = "/tmp/rgpu-bulk-hol-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return -1;
  close(fd);
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    setenv("RGPU_STATS", path, 1);
    setenv("RGPU_QUIC_STREAMS", streams, 1);
    std::printf("rgpu-stats: streams=%s: ", streams);
    std::fflush(stdout);
    execl("/proc/self/exe", "threads_bulk_hol", "--child", (char *)nullptr);
    _exit(127);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  *rts = rgpu_stat_of(path, "round_trips");
  unlink(path);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(int argc, char **argv) {
  if (argc == 2 && std::strcmp(argv[1], "--child") == 0) return child();
  long off = -1, on = -1;
  EXPECT(run("0", &off) == 0);
  EXPECT(run("1", &on) == 0);
  if (off < 0) {
    std::printf("rgpu-stats: not running through rgpu, round trips not checked\n");
  } else {
    std::printf("rgpu-stats: round trips: streams off %ld, on %ld\n", off, on);
    EXPECT(on >= 0 && on <= off);
  }
  pass("threads_bulk_hol");
  return 0;
}
