// rgpu-nvcc-flags: -lcuda
// Driver-API kernel nodes and captured driver launches (issue 15): a graph
// of two kernel nodes (a CUfunction and a CUkernel), launched, its node
// parameters read, changed in the graph and in the executable graph, and a
// stream capture of cuLaunchKernel; every result is checked.
#include <vector>

#include "rgpu_drv_check.h"

static void expect_y(CUdeviceptr dy, const std::vector<float> &want) {
  std::vector<float> y(want.size());
  CU_CHECK(cuMemcpyDtoH(y.data(), dy, y.size() * sizeof(float)));
  for (size_t i = 0; i < y.size(); i++) EXPECT(y[i] == want[i]);
}

int main() {
  drv_setup(nullptr);
  CUmodule mod;
  CU_CHECK(cuModuleLoad(&mod, beside_exe("drv_kernels.ptx")));
  CUfunction saxpy;
  CU_CHECK(cuModuleGetFunction(&saxpy, mod, "saxpy"));
  CUlibrary lib;
  CU_CHECK(cuLibraryLoadFromFile(&lib, beside_exe("drv_kernels.ptx"), nullptr, nullptr, 0,
                                 nullptr, nullptr, 0));
  CUkernel k_saxpy;
  CU_CHECK(cuLibraryGetKernel(&k_saxpy, lib, "saxpy"));

  const int n = 2048;
  std::vector<float> x(n), want(n, 2.0f);
  for (int i = 0; i < n; i++) x[i] = (float)(i % 7);
  CUdeviceptr dx, dy;
  CU_CHECK(cuMemAlloc(&dx, n * sizeof(float)));
  CU_CHECK(cuMemAlloc(&dy, n * sizeof(float)));
  CU_CHECK(cuMemcpyHtoD(dx, x.data(), n * sizeof(float)));
  CU_CHECK(cuMemcpyHtoD(dy, want.data(), n * sizeof(float)));

  // Two nodes, one after the other: y += 1*x through the CUfunction, then
  // y += 10*x through the CUkernel.
  float a1 = 1.0f, a2 = 10.0f;
  int nn = n;
  void *args1[] = {&a1, &dx, &dy, &nn};
  void *args2[] = {&a2, &dx, &dy, &nn};
  CUgraph g;
  CU_CHECK(cuGraphCreate(&g, 0));
  CUDA_KERNEL_NODE_PARAMS p1;
  std::memset(&p1, 0, sizeof p1);
  p1.func = saxpy;
  p1.gridDimX = n / 128;
  p1.gridDimY = p1.gridDimZ = 1;
  p1.blockDimX = 128;
  p1.blockDimY = p1.blockDimZ = 1;
  p1.kernelParams = args1;
  CUgraphNode n1, n2;
  CU_CHECK(cuGraphAddKernelNode(&n1, g, nullptr, 0, &p1));
  CUDA_KERNEL_NODE_PARAMS p2 = p1;
  p2.func = nullptr;
  p2.kern = k_saxpy;
  p2.kernelParams = args2;
  CU_CHECK(cuGraphAddKernelNode(&n2, g, &n1, 1, &p2));
  a1 = a2 = -100.0f; // the nodes hold copies of the parameters
  CUgraphExec ge;
  CU_CHECK(cuGraphInstantiate(&ge, g, 0));
  CUstream s;
  // A blocking stream: it waits for the copies above on the legacy stream
  // (a host-to-device copy from pageable memory may return before its DMA
  // has landed).
  CU_CHECK(cuStreamCreate(&s, CU_STREAM_DEFAULT));
  CU_CHECK(cuGraphLaunch(ge, s));
  CU_CHECK(cuGraphLaunch(ge, s));
  CU_CHECK(cuStreamSynchronize(s));
  for (int i = 0; i < n; i++) want[i] += 2 * 11.0f * x[i];
  expect_y(dy, want);
  printf("graph of two kernel nodes, twice: y[6] = %.1f\n", want[6]);

  // The node's parameters as the driver reports them.
  CUDA_KERNEL_NODE_PARAMS got;
  std::memset(&got, 0, sizeof got);
  CU_CHECK(cuGraphKernelNodeGetParams(n1, &got));
  EXPECT(got.func == saxpy && got.gridDimX == (unsigned)(n / 128) && got.blockDimX == 128);
  EXPECT(*(float *)got.kernelParams[0] == 1.0f);

  // A new multiplier in the executable graph (the graph keeps the old one).
  float a3 = 3.0f;
  void *args3[] = {&a3, &dx, &dy, &nn};
  CUDA_KERNEL_NODE_PARAMS p3 = p1;
  p3.kernelParams = args3;
  CU_CHECK(cuGraphExecKernelNodeSetParams(ge, n1, &p3));
  CU_CHECK(cuGraphLaunch(ge, s));
  CU_CHECK(cuStreamSynchronize(s));
  for (int i = 0; i < n; i++) want[i] += 13.0f * x[i];
  expect_y(dy, want);
  // ... and in the graph, seen by a new instantiation.
  CU_CHECK(cuGraphKernelNodeSetParams(n2, &p3));
  CUgraphExec ge2;
  CU_CHECK(cuGraphInstantiate(&ge2, g, 0));
  CU_CHECK(cuGraphLaunch(ge2, s));
  CU_CHECK(cuStreamSynchronize(s));
  for (int i = 0; i < n; i++) want[i] += 4.0f * x[i];
  expect_y(dy, want);
  printf("node parameters updated: y[6] = %.1f\n", want[6]);

  // cuLaunchKernel on a capturing stream becomes a node.
  CUgraph cg;
  CUgraphExec cge;
  float a4 = 0.5f;
  void *args4[] = {&a4, &dx, &dy, &nn};
  CU_CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_CHECK(cuLaunchKernel(saxpy, n / 256, 1, 1, 256, 1, 1, 0, s, args4, nullptr));
  CU_CHECK(cuLaunchKernel((CUfunction)k_saxpy, n / 256, 1, 1, 256, 1, 1, 0, s, args4, nullptr));
  CU_CHECK(cuStreamEndCapture(s, &cg));
  size_t nodes = 0;
  CU_CHECK(cuGraphGetNodes(cg, nullptr, &nodes));
  EXPECT(nodes == 2);
  CU_CHECK(cuGraphInstantiate(&cge, cg, 0));
  CU_CHECK(cuGraphLaunch(cge, s));
  CU_CHECK(cuStreamSynchronize(s));
  for (int i = 0; i < n; i++) want[i] += 1.0f * x[i];
  expect_y(dy, want);
  printf("captured driver launches: y[6] = %.1f\n", want[6]);

  CU_CHECK(cuGraphExecDestroy(cge));
  CU_CHECK(cuGraphDestroy(cg));
  CU_CHECK(cuGraphExecDestroy(ge2));
  CU_CHECK(cuGraphExecDestroy(ge));
  CU_CHECK(cuGraphDestroy(g));
  CU_CHECK(cuStreamDestroy(s));
  CU_CHECK(cuMemFree(dx));
  CU_CHECK(cuMemFree(dy));
  CU_CHECK(cuLibraryUnload(lib));
  CU_CHECK(cuModuleUnload(mod));
  pass("drv_graph");
  return 0;
}
