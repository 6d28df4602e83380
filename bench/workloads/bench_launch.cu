// Queued-call throughput and per-call cost (issue 6): N launches of a
// near-empty kernel followed by one synchronization.  Reports launches per
// second end to end and the client process's CPU time (user + system, all
// threads, so the client library's own threads count) per launch.
#include "bench_util.h"

// Thread 0 of block 0 counts, so the result proves every launch ran exactly
// once, while the kernel stays as close to empty as a checked kernel can be.
__global__ void tick(unsigned *counter) {
  if (threadIdx.x == 0 && blockIdx.x == 0) *counter += 1;
}

int main(int argc, char **argv) {
  bench_name = "launch";
  bench_args a = bench_args_init(argc, argv);
  int n = (int)bench_arg_num(a, "--launches", 100000, 1, 100000000);
  bench_args_done(a, "[--launches N]");

  unsigned *counter = nullptr;
  CK_SYNC(cudaMalloc(&counter, sizeof *counter));
  CK(cudaMemset(counter, 0, sizeof *counter));
  // The first launch loads the module; keep it out of the region.
  tick<<<1, 1>>>(counter);
  CK(cudaGetLastError());
  CK_SYNC(cudaDeviceSynchronize());

  double c0 = bench_cpu_s(), t0 = bench_now();
  for (int i = 0; i < n; i++) tick<<<1, 1>>>(counter);
  double t_queued = bench_now() - t0;
  CK(cudaGetLastError());
  CK_SYNC(cudaDeviceSynchronize());
  double t = bench_now() - t0, cpu = bench_cpu_s() - c0;

  unsigned got = 0;
  CK_SYNC(cudaMemcpy(&got, counter, sizeof got, cudaMemcpyDeviceToHost));
  VERIFY(got == (unsigned)n + 1, "counter is %u, expected %u", got, (unsigned)n + 1);
  CK(cudaFree(counter));
  bench_result("variant=n%d launches=%d time_s=%.9f bytes=0 bytes_h2d=0 bytes_d2h=0 syncs=1 launches_per_s=%.1f "
               "cpu_us_per_launch=%.4f enqueue_us_per_launch=%.4f",
               n, n, t, n / t, cpu * 1e6 / n, t_queued * 1e6 / n);
  return 0;
}
