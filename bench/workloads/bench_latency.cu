// Synchronous call latency: the time of one call that needs the GPU's answer,
// a small device-to-host cudaMemcpy (issue 4: 64-byte request/response).
// Every iteration is one round trip, so p50/p99 show the link and the
// per-call cost of the client and server together.
#include "bench_util.h"

int main(int argc, char **argv) {
  bench_name = "latency";
  bench_args a = bench_args_init(argc, argv);
  int iters = (int)bench_arg_num(a, "--iters", 1000, 1, 10000000);
  long long size = bench_arg_num(a, "--size", 64, 1, 1 << 20);
  int warmup = (int)bench_arg_num(a, "--warmup", 10, 0, 1000000);
  bench_args_done(a, "[--iters N] [--size BYTES] [--warmup N]");

  unsigned char *dev = nullptr;
  unsigned char *host = (unsigned char *)std::malloc((size_t)size);
  unsigned char *want = (unsigned char *)std::malloc((size_t)size);
  double *lat = (double *)std::malloc(sizeof(double) * (size_t)iters);
  VERIFY(host && want && lat, "out of host memory");
  unsigned seed = 7;
  for (long long i = 0; i < size; i++) want[i] = (unsigned char)bench_lcg(seed);
  CK_SYNC(cudaMalloc(&dev, (size_t)size));
  CK(cudaMemcpy(dev, want, (size_t)size, cudaMemcpyHostToDevice));
  for (int i = 0; i < warmup; i++)
    CK_SYNC(cudaMemcpy(host, dev, (size_t)size, cudaMemcpyDeviceToHost));

  double t_all = bench_now();
  for (int i = 0; i < iters; i++) {
    host[0] ^= 0xff;  // a stale buffer must not pass the check below
    double t0 = bench_now();
    CK_SYNC(cudaMemcpy(host, dev, (size_t)size, cudaMemcpyDeviceToHost));
    lat[i] = bench_now() - t0;
    VERIFY(host[0] == want[0], "iteration %d returned stale data", i);
  }
  t_all = bench_now() - t_all;
  VERIFY(!std::memcmp(host, want, (size_t)size), "device-to-host data differs");

  double mean = bench_mean(lat, iters);
  double p99 = bench_quantile(lat, iters, 0.99);
  double p50 = bench_quantile(lat, iters, 0.50);
  CK(cudaFree(dev));
  bench_result("variant=d2h%lld iters=%d time_s=%.9f bytes=%lld bytes_h2d=0 bytes_d2h=%lld syncs=1 p50_us=%.3f p99_us=%.3f "
               "mean_us=%.3f min_us=%.3f calls_per_s=%.1f",
               size, iters, p50, size, size, p50 * 1e6, p99 * 1e6, mean * 1e6, lat[0] * 1e6,
               iters / t_all);
  std::free(host);
  std::free(want);
  std::free(lat);
  return 0;
}
