// Host<->device bandwidth for a list of sizes, pageable or pinned host memory.
//
// Host-to-device: R copies then one cudaDeviceSynchronize inside the timed
// region: cudaMemcpy from host memory may return once the data has been
// handed over, before it reached the GPU, so timing the copy alone could
// measure a socket buffer instead of the link.  Device-to-host copies are
// synchronous by nature (the data is in the host buffer on return), and
// so is a host-to-device cudaMemcpy from page-locked memory (CUDA's API
// synchronization rules): those count as synchronization points too.
// Each size prints one RESULT line per direction; the data are verified
// after the timed region.
#include "bench_util.h"

static void fill(unsigned char *p, long long n, unsigned seed) {
  unsigned *w = (unsigned *)p;
  long long nw = n / 4;
  for (long long i = 0; i < nw; i++) w[i] = bench_lcg(seed) ^ (unsigned)i;
  for (long long i = nw * 4; i < n; i++) p[i] = (unsigned char)bench_lcg(seed);
}

// A host-to-device cudaMemcpy: from page-locked memory a synchronization
// point (it returns once the bytes are on the device).
static void upload(void *dev, const unsigned char *src, long long n, bool pinned) {
  if (pinned)
    CK_SYNC(cudaMemcpy(dev, src, (size_t)n, cudaMemcpyHostToDevice));
  else
    CK(cudaMemcpy(dev, src, (size_t)n, cudaMemcpyHostToDevice));
}

int main(int argc, char **argv) {
  bench_name = "bandwidth";
  bench_args a = bench_args_init(argc, argv);
  const char *sizes_s = bench_arg_str(a, "--sizes", "4K,64K,1M,16M,256M,1G");
  const char *mem = bench_arg_str(a, "--mem", "pinned");
  const char *dir = bench_arg_str(a, "--dir", "both");
  int reps = (int)bench_arg_num(a, "--reps", 5, 1, 100000);
  long long min_bytes = bench_arg_num(a, "--min-bytes", 0, 0, 1ll << 40);
  bench_args_done(a, "[--sizes 4K,1M,...] [--mem pinned|pageable] [--dir h2d|d2h|both] "
                     "[--reps R] [--min-bytes B (repeat small copies until B bytes moved)]");
  bool pinned = !std::strcmp(mem, "pinned");
  VERIFY(pinned || !std::strcmp(mem, "pageable"), "--mem must be pinned or pageable");
  bool do_h2d = !std::strcmp(dir, "both") || !std::strcmp(dir, "h2d");
  bool do_d2h = !std::strcmp(dir, "both") || !std::strcmp(dir, "d2h");
  VERIFY(do_h2d || do_d2h, "--dir must be h2d, d2h or both");

  long long sizes[64];
  int ns = 0;
  long long max_size = 0;
  char *list = strdup(sizes_s), *save = nullptr;
  for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(nullptr, ",", &save)) {
    VERIFY(ns < 64, "at most 64 sizes");
    sizes[ns] = bench_parse_size(tok, "--sizes");
    VERIFY(sizes[ns] > 0, "sizes must be positive");
    if (sizes[ns] > max_size) max_size = sizes[ns];
    ns++;
  }
  std::free(list);
  VERIFY(ns > 0, "--sizes is empty");

  unsigned char *src, *dst, *dev;
  if (pinned) {
    CK_SYNC(cudaMallocHost(&src, (size_t)max_size));
    CK_SYNC(cudaMallocHost(&dst, (size_t)max_size));
  } else {
    src = (unsigned char *)std::malloc((size_t)max_size);
    dst = (unsigned char *)std::malloc((size_t)max_size);
    VERIFY(src && dst, "out of host memory for %lld bytes", max_size);
  }
  CK_SYNC(cudaMalloc(&dev, (size_t)max_size));

  for (int s = 0; s < ns; s++) {
    long long n = sizes[s];
    // Small copies are repeated so a run measures more than clock noise.
    int r = reps;
    if (min_bytes > 0 && (long long)r * n < min_bytes) {
      long long want = (min_bytes + n - 1) / n;
      r = want > 100000 ? 100000 : (int)want;
    }
    fill(src, n, 1234u + (unsigned)s);
    if (do_h2d) {
      upload(dev, src, n, pinned);  // warm-up
      CK_SYNC(cudaDeviceSynchronize());
      double t0 = bench_now();
      for (int i = 0; i < r; i++) upload(dev, src, n, pinned);
      CK_SYNC(cudaDeviceSynchronize());
      double t = (bench_now() - t0) / r;
      std::memset(dst, 0, (size_t)n);
      CK_SYNC(cudaMemcpy(dst, dev, (size_t)n, cudaMemcpyDeviceToHost));
      VERIFY(!std::memcmp(dst, src, (size_t)n), "host-to-device copy of %lld bytes corrupted", n);
      bench_result("variant=h2d_%s dir=h2d mem=%s size=%lld reps=%d time_s=%.9f bytes=%lld "
                   "bytes_h2d=%lld bytes_d2h=0 syncs=%.6f gbps=%.4f",
                   mem, mem, n, r, t, n, n, (pinned ? 1.0 : 0.0) + 1.0 / r, n / t / 1e9);
    }
    if (do_d2h) {
      if (!do_h2d) upload(dev, src, n, pinned);
      CK_SYNC(cudaMemcpy(dst, dev, (size_t)n, cudaMemcpyDeviceToHost));  // warm-up
      double t0 = bench_now();
      for (int i = 0; i < r; i++) CK_SYNC(cudaMemcpy(dst, dev, (size_t)n, cudaMemcpyDeviceToHost));
      double t = (bench_now() - t0) / r;
      VERIFY(!std::memcmp(dst, src, (size_t)n), "device-to-host copy of %lld bytes corrupted", n);
      bench_result("variant=d2h_%s dir=d2h mem=%s size=%lld reps=%d time_s=%.9f bytes=%lld "
                   "bytes_h2d=0 bytes_d2h=%lld syncs=1 gbps=%.4f",
                   mem, mem, n, r, t, n, n, n / t / 1e9);
    }
  }
  CK(cudaFree(dev));
  if (pinned) {
    CK(cudaFreeHost(src));
    CK(cudaFreeHost(dst));
  } else {
    std::free(src);
    std::free(dst);
  }
  return 0;
}
