// The async-heavy iterative workload (issues 6, 7, 8): every step copies a
// small input to the device, runs K small kernels on it and copies the result
// back, all asynchronously on one stream, with one synchronization per step.
// With --graph the step is captured once (stream capture) and each step is a
// single cudaGraphLaunch.  Every step's output is checked exactly against the
// host (the kernels use explicit fused multiply-adds, so the host can
// reproduce them bit for bit).
#include <cmath>
#include "bench_util.h"

__global__ void affine(float *x, int n, float a, float b) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __fmaf_rn(x[i], a, b);
}

static float coef_a(int k) { return 1.0f + 0.03125f * (float)(k % 5); }
static float coef_b(int k) { return 0.5f - 0.25f * (float)(k % 3); }

int main(int argc, char **argv) {
  bench_name = "pipeline";
  bench_args a = bench_args_init(argc, argv);
  int steps = (int)bench_arg_num(a, "--steps", 50, 1, 10000000);
  int kernels = (int)bench_arg_num(a, "--kernels", 8, 1, 100000);
  int n = (int)bench_arg_num(a, "--elems", 4096, 1, 1 << 28);
  bool graph = bench_arg_flag(a, "--graph");
  bench_args_done(a, "[--steps S] [--kernels K] [--elems E] [--graph]");
  if (graph) bench_name = "graph";

  size_t bytes = (size_t)n * sizeof(float);
  float *h_in, *h_out, *d_x;
  CK_SYNC(cudaMallocHost(&h_in, bytes));
  CK_SYNC(cudaMallocHost(&h_out, bytes));
  CK_SYNC(cudaMalloc(&d_x, bytes));
  float *want = (float *)std::malloc(bytes);
  VERIFY(want, "out of host memory");
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int threads = 128, blocks = (n + threads - 1) / threads;

  auto enqueue_step = [&]() {
    CK(cudaMemcpyAsync(d_x, h_in, bytes, cudaMemcpyHostToDevice, s));
    for (int k = 0; k < kernels; k++) affine<<<blocks, threads, 0, s>>>(d_x, n, coef_a(k), coef_b(k));
    CK(cudaGetLastError());
    CK(cudaMemcpyAsync(h_out, d_x, bytes, cudaMemcpyDeviceToHost, s));
  };

  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  if (graph) {
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    enqueue_step();
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
  }

  auto fill_input = [&](int step) {
    for (int i = 0; i < n; i++) h_in[i] = (float)((i * 7 + step * 13) % 101) * 0.01f - 0.5f;
  };
  auto check = [&](int step) {
    for (int i = 0; i < n; i++) {
      float x = (float)((i * 7 + step * 13) % 101) * 0.01f - 0.5f;
      for (int k = 0; k < kernels; k++) x = std::fmaf(x, coef_a(k), coef_b(k));
      want[i] = x;
    }
    for (int i = 0; i < n; i++)
      VERIFY(h_out[i] == want[i], "step %d element %d: %.9g, expected %.9g", step, i, h_out[i],
             want[i]);
  };

  // One untimed step loads the module (and, for graphs, the graph) remotely.
  fill_input(-1);
  if (graph) CK(cudaGraphLaunch(ge, s)); else enqueue_step();
  CK_SYNC(cudaStreamSynchronize(s));
  check(-1);

  double t0 = bench_now(), tcheck = 0;
  for (int step = 0; step < steps; step++) {
    fill_input(step);
    if (graph) CK(cudaGraphLaunch(ge, s)); else enqueue_step();
    CK_SYNC(cudaStreamSynchronize(s));
    double tc = bench_now();
    check(step);
    tcheck += bench_now() - tc;
  }
  double t = bench_now() - t0 - tcheck;

  if (graph) {
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
  }
  CK(cudaStreamDestroy(s));
  CK(cudaFree(d_x));
  CK(cudaFreeHost(h_in));
  CK(cudaFreeHost(h_out));
  std::free(want);
  bench_result("variant=s%d_k%d_e%d steps=%d kernels=%d elems=%d time_s=%.9f bytes=%zu bytes_h2d=%zu bytes_d2h=%zu syncs=%d "
               "step_ms=%.4f calls_per_step=%d",
               steps, kernels, n, steps, kernels, n, t, 2 * bytes * (size_t)steps, bytes * (size_t)steps, bytes * (size_t)steps, steps,
               t / steps * 1e3, graph ? 2 : kernels + 3);
  return 0;
}
