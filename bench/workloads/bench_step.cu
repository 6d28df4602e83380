// A training or inference step in its simplest form (issue 18): GPU work
// of a fixed length, then one small device-to-host read of its result, the
// `.item()` or `.cpu()` that ends every PyTorch step.  Natively the step
// costs the GPU's time plus the driver's latency; through rgpu it also
// pays a round trip, and whatever else the remote path adds shows here
// without PyTorch's own host work around it.
//
//   gpu:    the work alone, timed with CUDA events (the limit);
//   kernel: launch the work, then cudaMemcpy 8 bytes back (one step);
//   graph:  the same work captured once as a CUDA graph, replayed per step.
//
// The work is one thread stepping a linear congruential generator `--work`
// times from the value it left in device memory, so every step's result
// depends on every earlier one and is checked on the host.
#include "bench_util.h"

__global__ void lcg_steps(unsigned long long *state, long long n) {
  unsigned long long x = *state;
  for (long long i = 0; i < n; i++) x = x * 6364136223846793005ull + 1442695040888963407ull;
  *state = x;
}

static unsigned long long host_steps(unsigned long long x, long long n) {
  for (long long i = 0; i < n; i++) x = x * 6364136223846793005ull + 1442695040888963407ull;
  return x;
}

int main(int argc, char **argv) {
  bench_name = "step";
  bench_args a = bench_args_init(argc, argv);
  long long work = bench_arg_num(a, "--work", 200000, 1, 1ll << 32);
  int steps = (int)bench_arg_num(a, "--steps", 200, 2, 1000000);
  bench_args_done(a, "[--work N (generator steps per GPU step)] [--steps N]");

  unsigned long long *state = nullptr, x = 12345, got = 0;
  cudaStream_t s;
  CK_SYNC(cudaMalloc(&state, sizeof *state));
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaMemcpyAsync(state, &x, sizeof x, cudaMemcpyHostToDevice, s));
  // Warm-up: loads the module, and wakes the GPU and every thread on the way.
  for (int i = 0; i < 3; i++) {
    lcg_steps<<<1, 1, 0, s>>>(state, work);
    x = host_steps(x, work);
  }
  CK(cudaGetLastError());
  CK_SYNC(cudaMemcpyAsync(&got, state, sizeof got, cudaMemcpyDeviceToHost, s));
  CK_SYNC(cudaStreamSynchronize(s));
  VERIFY(got == x, "warm-up state %llx, expected %llx", got, x);

  double *lat = (double *)std::malloc(sizeof(double) * (size_t)steps);

  // gpu: the device's own time per step.
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < steps; i++) {
    CK(cudaEventRecord(e0, s));
    lcg_steps<<<1, 1, 0, s>>>(state, work);
    CK(cudaEventRecord(e1, s));
    CK_SYNC(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    lat[i] = ms * 1e-3;
    x = host_steps(x, work);
  }
  double gpu_mean = bench_mean(lat, steps), gpu_p50 = bench_quantile(lat, steps, 0.5);
  bench_result("variant=gpu time_s=%.9f bytes=0 syncs=1 p50_us=%.3f mean_us=%.3f work=%lld",
               gpu_mean, gpu_p50 * 1e6, gpu_mean * 1e6, work);

  // One step: queue the work, read its result back, check it.
  auto run_steps = [&](const char *variant, auto queue_work) {
    for (int i = 0; i < steps; i++) {
      double t0 = bench_now();
      queue_work();
      CK_SYNC(cudaMemcpyAsync(&got, state, sizeof got, cudaMemcpyDeviceToHost, s));
      CK_SYNC(cudaStreamSynchronize(s));
      lat[i] = bench_now() - t0;
      x = host_steps(x, work);
      VERIFY(got == x, "%s step %d: state %llx, expected %llx", variant, i, got, x);
    }
    double mean = bench_mean(lat, steps), p50 = bench_quantile(lat, steps, 0.5);
    bench_result("variant=%s time_s=%.9f bytes=8 syncs=1 p50_us=%.3f mean_us=%.3f over_gpu_us=%.3f",
                 variant, mean, p50 * 1e6, mean * 1e6, (mean - gpu_mean) * 1e6);
  };

  // kernel: a launch per step.
  run_steps("kernel", [&] { lcg_steps<<<1, 1, 0, s>>>(state, work); });

  // graph: the same work, captured once.
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  lcg_steps<<<1, 1, 0, s>>>(state, work);
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  run_steps("graph", [&] { CK(cudaGraphLaunch(ge, s)); });

  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaStreamDestroy(s));
  CK(cudaFree(state));
  std::free(lat);
  return 0;
}
