// Small calls beside a copying thread (issue 21: "a multi-threaded program
// under loss, one thread copying, another making small calls").
//
// Thread A copies --copy bytes host-to-device and back, over and over, and
// checks every byte it gets back.  Thread B makes --calls small synchronous
// calls meanwhile: a --size byte device-to-host copy on a non-blocking
// stream (one round trip each; on the legacy stream it would wait, as on a
// GPU, for A's copies queued there, which says nothing of the link).  Every
// reply of B is checked against the pattern it must hold.  The line reports
// B's latency quantiles during A's copies (time_s is the p99, the number
// the goal is about) and A's throughput.
//
// Over tcp:// B's request and reply share one byte stream with A's copies,
// so a call that meets a copy waits behind its bytes; over quic:// a copy
// of RGPU_BULK_MIN_BYTES or more travels on A's own QUIC stream (bulk
// lanes, docs/architecture.md) while B's calls use stream 0.
#include <atomic>
#include <thread>
#include <vector>

#include "bench_util.h"

static std::atomic<int> b_ready{0}, a_started{0}, b_done{0};

int main(int argc, char **argv) {
  bench_name = "threads";
  bench_args a = bench_args_init(argc, argv);
  long long copy = bench_arg_num(a, "--copy", 1 << 20, 4096, 1ll << 30);
  int calls = (int)bench_arg_num(a, "--calls", 100, 10, 1000000);
  long long size = bench_arg_num(a, "--size", 64, 1, 1 << 16);
  int warmup = (int)bench_arg_num(a, "--warmup", 5, 1, 1000);
  bench_args_done(a, "[--copy BYTES (thread A's copies)] [--calls N (thread B's calls)] "
                     "[--size BYTES (B's call)] [--warmup N]");

  unsigned char *d_big = nullptr, *d_small = nullptr;
  CK_SYNC(cudaMalloc(&d_big, (size_t)copy));
  CK_SYNC(cudaMalloc(&d_small, (size_t)size));
  std::vector<unsigned char> want((size_t)size);
  unsigned seed = 11;
  for (auto &x : want) x = (unsigned char)bench_lcg(seed);
  CK(cudaMemcpy(d_small, want.data(), (size_t)size, cudaMemcpyHostToDevice));
  cudaStream_t sb;
  CK_SYNC(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking));
  // B's stream does not wait for the legacy stream's copy above.
  CK_SYNC(cudaDeviceSynchronize());

  // Counted per thread and added up at the end: SYNC_CALL's counter is not
  // meant for two threads at once.
  long long a_syncs = 0, b_syncs = 0;
  std::vector<double> lat;
  lat.reserve((size_t)calls);
  double a_bytes = 0, a_time = 0;
  int a_copies = 0;

  std::thread tb([&] {
    std::vector<unsigned char> h((size_t)size);
    auto call = [&](std::vector<double> *out) {
      h[0] = (unsigned char)~want[0];  // a stale buffer must not pass
      double t0 = bench_now();
      CK(cudaMemcpyAsync(h.data(), d_small, (size_t)size, cudaMemcpyDeviceToHost, sb));
      double t = bench_now() - t0;
      b_syncs++;
      VERIFY(!std::memcmp(h.data(), want.data(), (size_t)size), "thread B: reply %zu differs",
             out ? out->size() : (size_t)0);
      if (out) out->push_back(t);
    };
    for (int i = 0; i < warmup; i++) call(nullptr);
    b_ready.store(1);
    while (!a_started.load()) std::this_thread::yield();
    for (int i = 0; i < calls; i++) call(&lat);
    b_done.store(1);
  });

  std::thread ta([&] {
    std::vector<unsigned char> up((size_t)copy), down((size_t)copy);
    while (!b_ready.load()) std::this_thread::yield();
    for (int it = 0; !b_done.load() || it == 0; it++) {
      unsigned s = 1234u + (unsigned)it;
      for (auto &x : up) x = (unsigned char)bench_lcg(s);
      std::memset(down.data(), 0, down.size());
      double t0 = bench_now();
      a_started.store(1);
      CK(cudaMemcpy(d_big, up.data(), (size_t)copy, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(down.data(), d_big, (size_t)copy, cudaMemcpyDeviceToHost));
      a_time += bench_now() - t0;
      a_syncs++;
      a_bytes += 2.0 * (double)copy;
      a_copies++;
      VERIFY(!std::memcmp(up.data(), down.data(), (size_t)copy),
             "thread A: copy %d came back different", it);
    }
  });
  tb.join();
  ta.join();
  bench_syncs_total += a_syncs + b_syncs;

  CK(cudaStreamDestroy(sb));
  CK(cudaFree(d_big));
  CK(cudaFree(d_small));
  int n = (int)lat.size();
  double mean = 0, mx = 0;
  for (double x : lat) {
    mean += x;
    if (x > mx) mx = x;
  }
  mean /= n;
  double p99 = bench_quantile(lat.data(), n, 0.99);
  double p90 = bench_quantile(lat.data(), n, 0.90);
  double p50 = bench_quantile(lat.data(), n, 0.50);
  bench_result("variant=d2h%lld_beside_copy%lld calls=%d time_s=%.9f bytes=%lld bytes_h2d=0 "
               "bytes_d2h=%lld syncs=1 p50_us=%.3f p90_us=%.3f p99_us=%.3f max_us=%.3f "
               "mean_us=%.3f a_copies=%d a_mbps=%.3f",
               size, copy, n, p99, size, size, p50 * 1e6, p90 * 1e6, p99 * 1e6, mx * 1e6,
               mean * 1e6, a_copies, a_time > 0 ? a_bytes / a_time / 1e6 : 0.0);
  return 0;
}
