// What a synchronization costs when there is little or nothing to wait
// for (issue 14's cost rows): the price of a program's bookkeeping syncs,
// paid once per step by most real programs.
//   empty:       cudaDeviceSynchronize with nothing pending, in a loop;
//   d2h_after:   2,000 synchronous 64-byte H2D copies, then 2,000
//                synchronous 64-byte D2H copies that read them (mean each);
//   after_copies: one cudaDeviceSynchronize right after 2,000 small
//                asynchronous H2D copies (what the copies left to drain);
//   after_idle:  a small async copy, 100 ms of doing nothing, then
//                cudaDeviceSynchronize (the first call after an idle spell:
//                wake-ups, cold caches, a GPU that lowered its clocks).
// Each variant prints one RESULT line; the data of every copy is checked.
#include <unistd.h>

#include "bench_util.h"

int main(int argc, char **argv) {
  bench_name = "sync";
  bench_args a = bench_args_init(argc, argv);
  int iters = (int)bench_arg_num(a, "--iters", 2000, 10, 1000000);
  int idles = (int)bench_arg_num(a, "--idle-reps", 10, 1, 1000);
  int idle_ms = (int)bench_arg_num(a, "--idle-ms", 100, 1, 10000);
  bench_args_done(a, "[--iters N] [--idle-reps N] [--idle-ms MS]");

  const int slot = 64;
  unsigned char *dev = nullptr;
  CK_SYNC(cudaMalloc(&dev, (size_t)iters * slot));
  double *lat = (double *)std::malloc(sizeof(double) * (size_t)(iters > idles ? iters : idles));
  unsigned char *src = (unsigned char *)std::malloc((size_t)iters * slot);
  unsigned char back[64];
  VERIFY(lat && src, "out of host memory");
  unsigned seed = 11;
  for (int i = 0; i < iters * slot; i++) src[i] = (unsigned char)bench_lcg(seed);
  for (int i = 0; i < 20; i++) CK_SYNC(cudaDeviceSynchronize());

  // 1. Nothing pending.
  for (int i = 0; i < iters; i++) {
    double t0 = bench_now();
    CK_SYNC(cudaDeviceSynchronize());
    lat[i] = bench_now() - t0;
  }
  double mean = bench_mean(lat, iters);
  bench_result("variant=empty iters=%d time_s=%.9f syncs=1 p50_us=%.3f p99_us=%.3f mean_us=%.3f", iters,
               bench_quantile(lat, iters, 0.5), bench_quantile(lat, iters, 0.5) * 1e6,
               bench_quantile(lat, iters, 0.99) * 1e6, mean * 1e6);

  // 2. Synchronous small D2H copies right after as many small H2D copies.
  for (int i = 0; i < iters; i++)
    CK(cudaMemcpy(dev + (size_t)i * slot, src + (size_t)i * slot, slot, cudaMemcpyHostToDevice));
  int bad = 0;
  for (int i = 0; i < iters; i++) {
    double t0 = bench_now();
    CK_SYNC(cudaMemcpy(back, dev + (size_t)i * slot, slot, cudaMemcpyDeviceToHost));
    lat[i] = bench_now() - t0;
    bad += std::memcmp(back, src + (size_t)i * slot, slot) != 0;
  }
  VERIFY(bad == 0, "%d small copies read back wrong", bad);
  mean = bench_mean(lat, iters);
  bench_result("variant=d2h_after iters=%d time_s=%.9f bytes=64 syncs=1 p50_us=%.3f p99_us=%.3f mean_us=%.3f",
               iters, mean, bench_quantile(lat, iters, 0.5) * 1e6, bench_quantile(lat, iters, 0.99) * 1e6,
               mean * 1e6);

  // 3. One device-wide sync right after many small async copies (pageable
  // source: each is staged before the call returns, as on a local GPU).
  for (int r = 0; r < idles; r++) {
    for (int i = 0; i < iters; i++) src[(size_t)i * slot] = (unsigned char)(i + r);
    for (int i = 0; i < iters; i++)
      CK(cudaMemcpyAsync(dev + (size_t)i * slot, src + (size_t)i * slot, slot, cudaMemcpyHostToDevice, 0));
    double t0 = bench_now();
    CK_SYNC(cudaDeviceSynchronize());
    lat[r] = bench_now() - t0;
  }
  CK_SYNC(cudaMemcpy(back, dev + (size_t)(iters - 1) * slot, slot, cudaMemcpyDeviceToHost));
  VERIFY(back[0] == (unsigned char)(iters - 1 + idles - 1), "the last async copy did not land");
  bench_result("variant=after_copies copies=%d reps=%d time_s=%.9f syncs=1 p50_us=%.3f max_us=%.3f", iters,
               idles, bench_quantile(lat, idles, 0.5), bench_quantile(lat, idles, 0.5) * 1e6,
               bench_quantile(lat, idles, 1.0) * 1e6);

  // 4. The first synchronization after an idle spell, with one small copy
  // queued before it (else rgpu knows the device idle and asks no one).
  for (int r = 0; r < idles; r++) {
    src[0] = (unsigned char)r;
    CK(cudaMemcpyAsync(dev, src, slot, cudaMemcpyHostToDevice, 0));
    usleep((useconds_t)idle_ms * 1000);
    double t0 = bench_now();
    CK_SYNC(cudaDeviceSynchronize());
    lat[r] = bench_now() - t0;
  }
  CK_SYNC(cudaMemcpy(back, dev, slot, cudaMemcpyDeviceToHost));
  VERIFY(back[0] == (unsigned char)(idles - 1), "the copy before the idle spell did not land");
  bench_result("variant=after_idle idle_ms=%d reps=%d time_s=%.9f syncs=1 p50_us=%.3f max_us=%.3f", idle_ms,
               idles, bench_quantile(lat, idles, 0.5), bench_quantile(lat, idles, 0.5) * 1e6,
               bench_quantile(lat, idles, 1.0) * 1e6);

  CK(cudaFree(dev));
  std::free(lat);
  std::free(src);
  return 0;
}
