// Explicit CUDA graphs: kernels, copies of every kind (1D, pitched 3D,
// symbols), memsets, host nodes, event nodes, empty and child graphs give
// the same results as the same work issued directly; the structure calls
// (nodes, roots, edges, dependencies, clone) answer like CUDA's.
#include "rgpu_check.h"
#include <vector>

__device__ float g_bias[4];

__global__ void axpb(float *y, const float *x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + g_bias[i % 4];
}
__global__ void add_one(int *p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1;
}

static int host_hits = 0;
static int host_seen_value = -1;
static int *host_probe = nullptr;
static void CUDART_CB host_fn(void *arg) {
  host_hits += *(int *)arg;
  host_seen_value = host_probe ? host_probe[5] : -2;
}

int main() {
  const int n = 1000;
  std::vector<float> hx(n), hy(n), ref(n);
  for (int i = 0; i < n; i++) hx[i] = (float)i * 0.5f;
  float bias[4] = {1, 2, 3, 4};
  float *dx, *dy, *dz;
  CHECK(cudaMalloc(&dx, n * sizeof(float)));
  CHECK(cudaMalloc(&dy, n * sizeof(float)));
  CHECK(cudaMalloc(&dz, n * sizeof(float)));
  for (int i = 0; i < n; i++) ref[i] = 3.0f * hx[i] + bias[i % 4];

  // bias -> symbol, x -> dx, memset dy, kernel, dy -> dz, dz -> host.
  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  cudaGraphNode_t sym, h2d, ms, k, d2d, d2h;
  CHECK(cudaGraphAddMemcpyNodeToSymbol(&sym, g, nullptr, 0, g_bias, bias, sizeof bias, 0,
                                       cudaMemcpyHostToDevice));
  CHECK(cudaGraphAddMemcpyNode1D(&h2d, g, nullptr, 0, dx, hx.data(), n * sizeof(float),
                                 cudaMemcpyHostToDevice));
  cudaMemsetParams mp = {};
  mp.dst = dy;
  mp.value = 0;
  mp.elementSize = 4;
  mp.width = n;
  mp.height = 1;
  CHECK(cudaGraphAddMemsetNode(&ms, g, nullptr, 0, &mp));
  float a = 3.0f;
  int nn = n;
  void *args[] = {&dy, &dx, &a, &nn};
  cudaKernelNodeParams kp = {};
  kp.func = (void *)axpb;
  kp.gridDim = dim3((n + 127) / 128);
  kp.blockDim = dim3(128);
  kp.kernelParams = args;
  cudaGraphNode_t kdeps[] = {sym, h2d, ms};
  CHECK(cudaGraphAddKernelNode(&k, g, kdeps, 3, &kp));
  CHECK(cudaGraphAddMemcpyNode1D(&d2d, g, &k, 1, dz, dy, n * sizeof(float), cudaMemcpyDeviceToDevice));
  CHECK(cudaGraphAddMemcpyNode1D(&d2h, g, &d2d, 1, hy.data(), dz, n * sizeof(float), cudaMemcpyDefault));

  size_t cnt = 0;
  CHECK(cudaGraphGetNodes(g, nullptr, &cnt));
  EXPECT(cnt == 6);
  CHECK(cudaGraphGetRootNodes(g, nullptr, &cnt));
  EXPECT(cnt == 3);
  CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &cnt));
  EXPECT(cnt == 5);
  cudaGraphNode_t deps[4];
  cnt = 4;
  CHECK(cudaGraphNodeGetDependencies(k, deps, nullptr, &cnt));
  EXPECT(cnt == 3 && deps[0] == sym && deps[2] == ms);
  CHECK(cudaGraphNodeGetDependentNodes(k, nullptr, nullptr, &cnt));
  EXPECT(cnt == 1);
  cudaGraphNodeType t;
  CHECK(cudaGraphNodeGetType(ms, &t));
  EXPECT(t == cudaGraphNodeTypeMemset);
  cudaKernelNodeParams back;
  CHECK(cudaGraphKernelNodeGetParams(k, &back));
  EXPECT(back.func == (void *)axpb && back.gridDim.x == kp.gridDim.x);
  EXPECT(*(float *)back.kernelParams[2] == 3.0f);
  CHECK(cudaGraphDebugDotPrint(g, "/dev/null", cudaGraphDebugDotFlagsVerbose));

  cudaGraphExec_t ex;
  CHECK(cudaGraphInstantiate(&ex, g, 0));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  for (int rep = 0; rep < 3; rep++) {
    std::fill(hy.begin(), hy.end(), -1.0f);
    CHECK(cudaGraphLaunch(ex, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < n; i++)
      if (hy[i] != ref[i]) {
        std::fprintf(stderr, "FAIL rep %d y[%d] = %f, want %f\n", rep, i, hy[i], ref[i]);
        return 1;
      }
  }
  // Host data is read at launch time, not at instantiation.
  for (int i = 0; i < n; i++) hx[i] = 1.0f;
  CHECK(cudaGraphLaunch(ex, s));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(hy[7] == 3.0f + bias[3]);

  // Clone keeps the structure; FindInClone maps nodes.
  cudaGraph_t gc;
  CHECK(cudaGraphClone(&gc, g));
  cudaGraphNode_t kc;
  CHECK(cudaGraphNodeFindInClone(&kc, k, gc));
  CHECK(cudaGraphNodeGetType(kc, &t));
  EXPECT(t == cudaGraphNodeTypeKernel);
  CHECK(cudaGraphGetNodes(gc, nullptr, &cnt));
  EXPECT(cnt == 6);

  // Child graph (two kernels), host node, event record/wait, empty node,
  // and a pitched 3D copy, in one parent.
  int *di, *hi;
  const int m = 256;
  CHECK(cudaMalloc(&di, m * sizeof(int)));
  CHECK(cudaMallocHost(&hi, m * sizeof(int)));
  cudaGraph_t child;
  CHECK(cudaGraphCreate(&child, 0));
  int mm = m;
  void *cargs[] = {&di, &mm};
  cudaKernelNodeParams ck = {};
  ck.func = (void *)add_one;
  ck.gridDim = dim3(2);
  ck.blockDim = dim3(128);
  ck.kernelParams = cargs;
  cudaGraphNode_t c1, c2;
  CHECK(cudaGraphAddKernelNode(&c1, child, nullptr, 0, &ck));
  CHECK(cudaGraphAddKernelNode(&c2, child, &c1, 1, &ck));

  cudaEvent_t ev;
  CHECK(cudaEventCreate(&ev));
  cudaGraph_t p;
  CHECK(cudaGraphCreate(&p, 0));
  cudaGraphNode_t pm, pc, pe, pr, pw, pd, ph;
  cudaMemsetParams mp2 = {};
  mp2.dst = di;
  mp2.value = 0;
  mp2.elementSize = 1;
  mp2.width = m * sizeof(int);
  mp2.height = 1;
  CHECK(cudaGraphAddMemsetNode(&pm, p, nullptr, 0, &mp2));
  CHECK(cudaGraphAddChildGraphNode(&pc, p, &pm, 1, child));
  CHECK(cudaGraphAddEmptyNode(&pe, p, &pc, 1));
  CHECK(cudaGraphAddEventRecordNode(&pr, p, &pe, 1, ev));
  CHECK(cudaGraphAddEventWaitNode(&pw, p, &pr, 1, ev));
  CHECK(cudaGraphAddMemcpyNode1D(&pd, p, &pw, 1, hi, di, m * sizeof(int), cudaMemcpyDeviceToHost));
  static int inc = 1;
  cudaHostNodeParams hp = {host_fn, &inc};
  host_probe = hi;
  CHECK(cudaGraphAddHostNode(&ph, p, &pd, 1, &hp));
  cudaGraphExec_t pex;
  CHECK(cudaGraphInstantiate(&pex, p, 0));
  for (int rep = 0; rep < 2; rep++) {
    CHECK(cudaGraphLaunch(pex, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < m; i++) EXPECT(hi[i] == 2);
  }
  EXPECT(host_hits == 2);
  EXPECT(host_seen_value == 2); // the host node ran after the copy before it
  CHECK(cudaEventQuery(ev));

  // Pitched 3D copy host -> device -> host through a graph.
  const size_t W = 40, H = 5, D = 3, pitch = 64;
  std::vector<unsigned char> src(W * H * D), dst(W * H * D, 0);
  for (size_t i = 0; i < src.size(); i++) src[i] = (unsigned char)(i * 7 + 3);
  unsigned char *dp;
  CHECK(cudaMalloc(&dp, pitch * H * D));
  cudaGraph_t g3;
  CHECK(cudaGraphCreate(&g3, 0));
  cudaMemcpy3DParms up = {};
  up.srcPtr = make_cudaPitchedPtr(src.data(), W, W, H);
  up.dstPtr = make_cudaPitchedPtr(dp, pitch, W, H);
  up.extent = make_cudaExtent(W, H, D);
  up.kind = cudaMemcpyHostToDevice;
  cudaMemcpy3DParms down = {};
  down.srcPtr = make_cudaPitchedPtr(dp, pitch, W, H);
  down.dstPtr = make_cudaPitchedPtr(dst.data(), W, W, H);
  down.extent = make_cudaExtent(W, H, D);
  down.kind = cudaMemcpyDeviceToHost;
  cudaGraphNode_t u, dn;
  CHECK(cudaGraphAddMemcpyNode(&u, g3, nullptr, 0, &up));
  CHECK(cudaGraphAddMemcpyNode(&dn, g3, &u, 1, &down));
  cudaGraphExec_t e3;
  CHECK(cudaGraphInstantiate(&e3, g3, 0));
  CHECK(cudaGraphLaunch(e3, s));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(src == dst);

  // A copy to the host that a later kernel overwrites the source of: the
  // host gets the bytes as they were at the copy node.
  {
    int *dv, hv[256], after[256];
    CHECK(cudaMalloc(&dv, sizeof hv));
    cudaGraph_t gw;
    CHECK(cudaGraphCreate(&gw, 0));
    cudaMemsetParams z = {};
    z.dst = dv;
    z.value = 0;
    z.elementSize = 4;
    z.width = 256;
    z.height = 1;
    cudaGraphNode_t w0, w1, w2;
    CHECK(cudaGraphAddMemsetNode(&w0, gw, nullptr, 0, &z));
    CHECK(cudaGraphAddMemcpyNode1D(&w1, gw, &w0, 1, hv, dv, sizeof hv, cudaMemcpyDeviceToHost));
    int m256 = 256;
    void *wa[] = {&dv, &m256};
    cudaKernelNodeParams wk = {};
    wk.func = (void *)add_one;
    wk.gridDim = dim3(2);
    wk.blockDim = dim3(128);
    wk.kernelParams = wa;
    CHECK(cudaGraphAddKernelNode(&w2, gw, &w1, 1, &wk));
    cudaGraphExec_t ew;
    CHECK(cudaGraphInstantiate(&ew, gw, 0));
    for (int rep = 0; rep < 2; rep++) {
      std::memset(hv, 0x55, sizeof hv);
      CHECK(cudaGraphLaunch(ew, s));
      CHECK(cudaStreamSynchronize(s));
      CHECK(cudaMemcpy(after, dv, sizeof after, cudaMemcpyDeviceToHost));
      for (int i = 0; i < 256; i++) EXPECT(hv[i] == 0 && after[i] == 1);
    }
    CHECK(cudaGraphExecDestroy(ew));
    CHECK(cudaGraphDestroy(gw));
    CHECK(cudaFree(dv));
  }

  // A large copy (beyond what a launch carries inline) both ways.
  {
    const size_t big = 3u << 20;
    std::vector<unsigned char> in(big), out(big, 0);
    for (size_t i = 0; i < big; i++) in[i] = (unsigned char)(i * 13 + (i >> 12));
    unsigned char *db;
    CHECK(cudaMalloc(&db, big));
    cudaGraph_t gb;
    CHECK(cudaGraphCreate(&gb, 0));
    cudaGraphNode_t b1, b2;
    CHECK(cudaGraphAddMemcpyNode1D(&b1, gb, nullptr, 0, db, in.data(), big, cudaMemcpyHostToDevice));
    CHECK(cudaGraphAddMemcpyNode1D(&b2, gb, &b1, 1, out.data(), db, big, cudaMemcpyDeviceToHost));
    cudaGraphExec_t eb;
    CHECK(cudaGraphInstantiate(&eb, gb, 0));
    for (int rep = 0; rep < 2; rep++) {
      in[12345] = (unsigned char)rep;
      CHECK(cudaGraphLaunch(eb, s));
      CHECK(cudaStreamSynchronize(s));
      EXPECT(in == out);
    }
    CHECK(cudaGraphExecDestroy(eb));
    CHECK(cudaGraphDestroy(gb));
    CHECK(cudaFree(db));
  }

  // Bad parameters are refused when the node is added.
  cudaGraphNode_t bad;
  EXPECT_ERR(cudaGraphAddMemcpyNode1D(&bad, g3, nullptr, 0, dp, src.data(), 16, (cudaMemcpyKind)77),
             cudaErrorInvalidMemcpyDirection);
  (void)cudaGetLastError();
  if (std::getenv("RGPU_SERVER")) {
    // rgpu checks device ranges against its allocations when the node is
    // added (CUDA may only notice at launch).
    EXPECT_ERR(cudaGraphAddMemcpyNode1D(&bad, g3, nullptr, 0, dp + pitch * H * D, src.data(), 16,
                                        cudaMemcpyHostToDevice),
               cudaErrorInvalidValue);
    (void)cudaGetLastError();
  }

  CHECK(cudaGraphExecDestroy(e3));
  CHECK(cudaGraphExecDestroy(pex));
  CHECK(cudaGraphExecDestroy(ex));
  CHECK(cudaGraphDestroy(g3));
  CHECK(cudaGraphDestroy(p));
  CHECK(cudaGraphDestroy(child));
  CHECK(cudaGraphDestroy(gc));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaEventDestroy(ev));
  CHECK(cudaStreamDestroy(s));
  pass("graphs_explicit");
  return 0;
}
