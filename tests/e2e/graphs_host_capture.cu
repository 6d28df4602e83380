// cudaLaunchHostFunc on a capturing stream becomes a host node: the host
// function runs at each launch, in order with the device work around it;
// cudaStreamAddCallback cannot be captured.
#include "rgpu_check.h"

__global__ void inc(int *p) { p[threadIdx.x] += 1; }

static int *g_pinned;
static int g_calls, g_seen[4];
static void CUDART_CB snoop(void *arg) {
  int k = (int)(long)arg;
  if (g_calls < 4) g_seen[g_calls] = g_pinned[0] * 10 + k;
  g_calls++;
}
static void CUDART_CB scb(cudaStream_t, cudaError_t, void *) {}

int main() {
  int *d;
  CHECK(cudaMalloc(&d, 32 * sizeof(int)));
  CHECK(cudaMemset(d, 0, 32 * sizeof(int)));
  CHECK(cudaMallocHost(&g_pinned, 32 * sizeof(int)));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  // Host callbacks come with the asynchronous-calls work (issue 6); a
  // build without them has nothing to capture.
  if (cudaLaunchHostFunc(s, snoop, (void *)0) == cudaErrorNotSupported) {
    (void)cudaGetLastError();
    std::printf("SKIP graphs_host_capture: cudaLaunchHostFunc is not supported by this build\n");
    pass("graphs_host_capture");
    return 0;
  }
  CHECK(cudaStreamSynchronize(s));
  g_calls = 0;
  cudaGraph_t g;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  inc<<<1, 32, 0, s>>>(d);
  CHECK(cudaMemcpyAsync(g_pinned, d, 32 * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaLaunchHostFunc(s, snoop, (void *)1));
  inc<<<1, 32, 0, s>>>(d);
  CHECK(cudaMemcpyAsync(g_pinned, d, 32 * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaLaunchHostFunc(s, snoop, (void *)2));
  CHECK(cudaStreamEndCapture(s, &g));
  EXPECT(g_calls == 0);
  size_t n = 0;
  CHECK(cudaGraphGetNodes(g, nullptr, &n));
  EXPECT(n == 6);
  cudaGraphExec_t ex;
  CHECK(cudaGraphInstantiate(&ex, g, 0));
  CHECK(cudaGraphLaunch(ex, s));
  CHECK(cudaGraphLaunch(ex, s));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(g_calls == 4);
  // Each host function saw the copy before it: 1, 2, then 3, 4.
  EXPECT(g_seen[0] == 11 && g_seen[1] == 22 && g_seen[2] == 31 && g_seen[3] == 42);

  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  EXPECT_ERR(cudaStreamAddCallback(s, scb, nullptr, 0), cudaErrorStreamCaptureUnsupported);
  cudaGraph_t bad;
  EXPECT_ERR(cudaStreamEndCapture(s, &bad), cudaErrorStreamCaptureInvalidated);
  (void)cudaGetLastError();
  CHECK(cudaGraphExecDestroy(ex));
  CHECK(cudaGraphDestroy(g));
  pass("graphs_host_capture");
  return 0;
}
