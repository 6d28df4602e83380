// Graph memory nodes: cudaMallocAsync / cudaFreeAsync captured into a
// graph, the same with the explicit cudaGraphAddMemAllocNode /
// cudaGraphAddMemFreeNode, and an allocation a graph leaves allocated for
// the program to use and free.  Every launch's result is checked.
#include "rgpu_check.h"

__global__ void fill(float *p, int n, float v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v + i;
}

__global__ void twice(const float *in, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2 * in[i];
}

static void check(const float *d, int n, float v) {
  float *h = new float[n];
  CHECK(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++) EXPECT(h[i] == 2 * (v + i));
  delete[] h;
}

int main() {
  const int n = 4096;
  float *out = nullptr;
  CHECK(cudaMalloc(&out, n * sizeof(float)));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));

  // Captured: a scratch buffer that lives inside each launch.
  cudaGraph_t g;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  float *tmp = nullptr;
  CHECK(cudaMallocAsync(&tmp, n * sizeof(float), s));
  EXPECT(tmp != nullptr);
  fill<<<n / 256, 256, 0, s>>>(tmp, n, 1.0f);
  twice<<<n / 256, 256, 0, s>>>(tmp, out, n);
  CHECK(cudaFreeAsync(tmp, s));
  CHECK(cudaStreamEndCapture(s, &g));
  size_t count = 0;
  CHECK(cudaGraphGetNodes(g, nullptr, &count));
  EXPECT(count == 4);
  cudaGraphExec_t x;
  CHECK(cudaGraphInstantiate(&x, g, 0));
  for (int r = 0; r < 3; r++) {
    CHECK(cudaMemset(out, 0, n * sizeof(float)));
    CHECK(cudaGraphLaunch(x, s));
    CHECK(cudaStreamSynchronize(s));
    check(out, n, 1.0f);
  }
  std::printf("captured alloc/free nodes: 3 launches right\n");
  CHECK(cudaGraphExecDestroy(x));
  CHECK(cudaGraphDestroy(g));

  // Explicit nodes.
  CHECK(cudaGraphCreate(&g, 0));
  cudaMemAllocNodeParams ap = {};
  ap.poolProps.allocType = cudaMemAllocationTypePinned;
  ap.poolProps.location.type = cudaMemLocationTypeDevice;
  ap.poolProps.location.id = 0;
  ap.bytesize = n * sizeof(float);
  cudaGraphNode_t an, k1, k2, fn;
  CHECK(cudaGraphAddMemAllocNode(&an, g, nullptr, 0, &ap));
  EXPECT(ap.dptr != nullptr);
  float *buf = (float *)ap.dptr;
  float v = 5.0f;
  int nn = n;
  void *a1[] = {&buf, &nn, &v};
  cudaKernelNodeParams kp = {};
  kp.func = (void *)fill;
  kp.gridDim = dim3(n / 256);
  kp.blockDim = dim3(256);
  kp.kernelParams = a1;
  CHECK(cudaGraphAddKernelNode(&k1, g, &an, 1, &kp));
  void *a2[] = {&buf, &out, &nn};
  kp.func = (void *)twice;
  kp.kernelParams = a2;
  CHECK(cudaGraphAddKernelNode(&k2, g, &k1, 1, &kp));
  CHECK(cudaGraphAddMemFreeNode(&fn, g, &k2, 1, buf));
  cudaMemAllocNodeParams back = {};
  CHECK(cudaGraphMemAllocNodeGetParams(an, &back));
  EXPECT(back.dptr == buf && back.bytesize == n * sizeof(float) && back.poolProps.location.id == 0);
  void *freed = nullptr;
  CHECK(cudaGraphMemFreeNodeGetParams(fn, &freed));
  EXPECT(freed == buf);
  cudaGraphNodeType t;
  CHECK(cudaGraphNodeGetType(an, &t));
  EXPECT(t == cudaGraphNodeTypeMemAlloc);
  CHECK(cudaGraphInstantiate(&x, g, 0));
  CHECK(cudaGraphLaunch(x, s));
  CHECK(cudaStreamSynchronize(s));
  check(out, n, 5.0f);
  std::printf("explicit alloc/free nodes: parameters read back, result right\n");
  CHECK(cudaGraphExecDestroy(x));
  CHECK(cudaGraphDestroy(g));

  // A graph that allocates and does not free: the block is the program's.
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  float *kept = nullptr;
  CHECK(cudaMallocAsync(&kept, n * sizeof(float), s));
  fill<<<n / 256, 256, 0, s>>>(kept, n, 9.0f);
  CHECK(cudaStreamEndCapture(s, &g));
  CHECK(cudaGraphInstantiate(&x, g, 0));
  CHECK(cudaGraphLaunch(x, s));
  CHECK(cudaStreamSynchronize(s));
  unsigned long long used = 0;
  CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used));
  EXPECT(used >= n * sizeof(float));
  CHECK(cudaGraphExecDestroy(x));
  CHECK(cudaGraphDestroy(g));
  twice<<<n / 256, 256, 0, s>>>(kept, out, n);
  CHECK(cudaStreamSynchronize(s));
  check(out, n, 9.0f);
  CHECK(cudaFreeAsync(kept, s));
  CHECK(cudaStreamSynchronize(s));
  std::printf("a block left allocated by a graph outlives it until freed\n");

  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(out));
  pass("graph_mem_nodes");
  return 0;
}
