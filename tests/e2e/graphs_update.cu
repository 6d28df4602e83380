// Changing an instantiated graph: exec SetParams of kernel, memcpy, memset
// and host nodes, cudaGraphExecUpdate from a re-captured graph with new
// kernel arguments, a child graph swapped in, and the refusal of a
// topology change.
#include "rgpu_check.h"
#include <vector>

// Page-locked host memory for the buffers captured copies use: what CUDA
// programs capture (and what a GPU's capture is known to accept).
template <class T> struct pinned_alloc {
  using value_type = T;
  pinned_alloc() = default;
  template <class U> pinned_alloc(const pinned_alloc<U> &) {}
  T *allocate(size_t n) {
    void *p = nullptr;
    CHECK(cudaMallocHost(&p, n * sizeof(T)));
    return (T *)p;
  }
  void deallocate(T *p, size_t) { cudaFreeHost(p); }
  bool operator==(const pinned_alloc &) const { return true; }
  bool operator!=(const pinned_alloc &) const { return false; }
};
template <class T> using pinned_vec = std::vector<T, pinned_alloc<T>>;

__global__ void fill(int *p, int v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}
__global__ void addv(int *p, int v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += v;
}

static int host_val = 0;
static void CUDART_CB set_host(void *arg) { host_val = (int)(long)arg; }

static void capture(cudaStream_t s, int *d, int *h, int v, int n, cudaGraph_t *g) {
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  fill<<<(n + 63) / 64, 64, 0, s>>>(d, v, n);
  addv<<<(n + 63) / 64, 64, 0, s>>>(d, v, n);
  CHECK(cudaMemcpyAsync(h, d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamEndCapture(s, g));
}

int main() {
  const int n = 300;
  int *d, *d2;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  CHECK(cudaMalloc(&d2, n * sizeof(int)));
  pinned_vec<int> h(n), h2(n);
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));

  // 1. Explicit graph; exec kernel params changed without re-instantiating.
  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  int v = 5, nn = n;
  void *args[] = {&d, &v, &nn};
  cudaKernelNodeParams kp = {};
  kp.func = (void *)fill;
  kp.gridDim = dim3((n + 63) / 64);
  kp.blockDim = dim3(64);
  kp.kernelParams = args;
  cudaGraphNode_t k, c, hn, m;
  CHECK(cudaGraphAddKernelNode(&k, g, nullptr, 0, &kp));
  cudaMemsetParams mp = {};
  mp.dst = d2;
  mp.value = 0;
  mp.elementSize = 4;
  mp.width = n;
  mp.height = 1;
  CHECK(cudaGraphAddMemsetNode(&m, g, &k, 1, &mp));
  CHECK(cudaGraphAddMemcpyNode1D(&c, g, &m, 1, h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
  cudaHostNodeParams hp = {set_host, (void *)1};
  CHECK(cudaGraphAddHostNode(&hn, g, &c, 1, &hp));
  cudaGraphExec_t ex;
  CHECK(cudaGraphInstantiate(&ex, g, 0));
  CHECK(cudaGraphLaunch(ex, s));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(h[0] == 5 && h[n - 1] == 5 && host_val == 1);

  v = 42;
  CHECK(cudaGraphExecKernelNodeSetParams(ex, k, &kp));
  v = 0; // the params were copied at the call
  cudaHostNodeParams hp2 = {set_host, (void *)2};
  CHECK(cudaGraphExecHostNodeSetParams(ex, hn, &hp2));
  CHECK(cudaGraphLaunch(ex, s));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(h[0] == 42 && h[n / 2] == 42 && host_val == 2);

  // Memcpy node now copies d2 (set to 7s by a memset node) into h2.
  mp.dst = d2;
  mp.value = 7;
  CHECK(cudaGraphExecMemsetNodeSetParams(ex, m, &mp));
  CHECK(cudaGraphExecMemcpyNodeSetParams1D(ex, c, h2.data(), d2, n * sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaGraphLaunch(ex, s));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(h2[0] == 7 && h2[n - 1] == 7);

  // A disabled memset node does nothing until it is enabled again.
  unsigned en = 2;
  CHECK(cudaGraphNodeGetEnabled(ex, m, &en));
  EXPECT(en == 1);
  CHECK(cudaGraphNodeSetEnabled(ex, m, 0));
  CHECK(cudaGraphNodeGetEnabled(ex, m, &en));
  EXPECT(en == 0);
  CHECK(cudaMemset(d2, 9, n * sizeof(int)));
  CHECK(cudaGraphLaunch(ex, s));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(h2[0] == 0x09090909 && h2[n - 1] == 0x09090909);
  CHECK(cudaGraphNodeSetEnabled(ex, m, 1));
  CHECK(cudaGraphLaunch(ex, s));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(h2[0] == 7);
  EXPECT_ERR(cudaGraphNodeSetEnabled(ex, hn, 0), cudaErrorInvalidValue); // host nodes cannot
  (void)cudaGetLastError();

  // The source graph's own params are untouched by exec updates.
  cudaKernelNodeParams back;
  CHECK(cudaGraphKernelNodeGetParams(k, &back));
  EXPECT(*(int *)back.kernelParams[1] == 5);

  // 2. cudaGraphExecUpdate from a re-captured graph with other arguments.
  cudaGraph_t g1, g2;
  capture(s, d, h.data(), 3, n, &g1);
  cudaGraphExec_t cx;
  CHECK(cudaGraphInstantiate(&cx, g1, 0));
  CHECK(cudaGraphLaunch(cx, s));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(h[0] == 6);
  capture(s, d, h.data(), 10, n, &g2);
  cudaGraphExecUpdateResultInfo info;
  CHECK(cudaGraphExecUpdate(cx, g2, &info));
  EXPECT(info.result == cudaGraphExecUpdateSuccess);
  CHECK(cudaGraphLaunch(cx, s));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(h[0] == 20 && h[n - 1] == 20);

  // Exec node setters take the nodes of the graph the exec was instantiated
  // from, also after an update (CUDA documents only these).
  {
    cudaGraphNode_t n1[3], n2[3];
    size_t c1 = 3, c2 = 3;
    CHECK(cudaGraphGetNodes(g1, n1, &c1));
    CHECK(cudaGraphGetNodes(g2, n2, &c2));
    EXPECT(c1 == 3 && c2 == 3);
    cudaKernelNodeParams fp;
    CHECK(cudaGraphKernelNodeGetParams(n1[0], &fp));
    EXPECT(fp.func == (void *)fill);
    int nv = 50;
    void *fa[] = {&d, &nv, &nn};
    fp.kernelParams = fa;
    CHECK(cudaGraphExecKernelNodeSetParams(cx, n1[0], &fp));
    CHECK(cudaGraphLaunch(cx, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECT(h[0] == 60);
    nv = 70;
    CHECK(cudaGraphExecKernelNodeSetParams(cx, n1[0], &fp));
    CHECK(cudaGraphLaunch(cx, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECT(h[0] == 80);
    nv = 10;
    CHECK(cudaGraphExecKernelNodeSetParams(cx, n1[0], &fp));
    CHECK(cudaGraphLaunch(cx, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECT(h[0] == 20);
  }

  // A different topology is refused and the exec keeps working.
  cudaGraph_t g3;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  fill<<<1, 64, 0, s>>>(d, 1, 64);
  CHECK(cudaStreamEndCapture(s, &g3));
  EXPECT_ERR(cudaGraphExecUpdate(cx, g3, &info), cudaErrorGraphExecUpdateFailure);
  EXPECT(info.result == cudaGraphExecUpdateErrorTopologyChanged);
  (void)cudaGetLastError();
  CHECK(cudaGraphLaunch(cx, s));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(h[5] == 20);

  // 3. A child graph node swapped for another child of the same shape.
  cudaGraph_t parent;
  CHECK(cudaGraphCreate(&parent, 0));
  cudaGraphNode_t child_node, copy;
  CHECK(cudaGraphAddChildGraphNode(&child_node, parent, nullptr, 0, g1));
  CHECK(cudaGraphAddMemcpyNode1D(&copy, parent, &child_node, 1, h2.data(), d, n * sizeof(int),
                                 cudaMemcpyDeviceToHost));
  cudaGraphExec_t px;
  CHECK(cudaGraphInstantiate(&px, parent, 0));
  CHECK(cudaGraphLaunch(px, s));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(h2[0] == 6);
  CHECK(cudaGraphExecChildGraphNodeSetParams(px, child_node, g2));
  CHECK(cudaGraphLaunch(px, s));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(h2[0] == 20);

  CHECK(cudaGraphExecDestroy(px));
  CHECK(cudaGraphExecDestroy(cx));
  CHECK(cudaGraphExecDestroy(ex));
  CHECK(cudaGraphDestroy(parent));
  CHECK(cudaGraphDestroy(g3));
  CHECK(cudaGraphDestroy(g2));
  CHECK(cudaGraphDestroy(g1));
  CHECK(cudaGraphDestroy(g));
  pass("graphs_update");
  return 0;
}
