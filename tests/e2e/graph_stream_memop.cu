// rgpu-nvcc-flags: -lcuda
// Stream memory operations captured into a CUDA graph: a kernel, a 32-bit
// write, a wait that the write satisfies, a 64-bit write, a batch (a write
// and a barrier), another kernel.  The graph is launched three times, each
// after the words were cleared outside it; every launch's words and both
// kernels' results are read back and checked.  The captured operations are
// batch memory-operation nodes.  Then the same nodes made with the node API
// (cuGraphAddBatchMemOpNode, cuGraphAddNode): parameters read back, changed
// and launched, then changed in the executable graph and launched again.
#include <cuda_runtime.h>
#include <vector>

#include "rgpu_drv_check.h"

__global__ void bump(int *data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += 1;
}

__global__ void twice(const int *data, int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2 * data[i];
}

int main() {
  CUdevice dev;
  drv_setup(&dev);
  const int n = 2048;
  int *data, *out;
  CHECK(cudaMalloc(&data, n * sizeof(int)));
  CHECK(cudaMalloc(&out, n * sizeof(int)));
  std::vector<int> h(n);
  for (int i = 0; i < n; i++) h[i] = i;
  CHECK(cudaMemcpy(data, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  CUdeviceptr flag, word64, pair;
  CU_CHECK(cuMemAlloc(&flag, 4));
  CU_CHECK(cuMemAlloc(&word64, 8));
  CU_CHECK(cuMemAlloc(&pair, 8));

  CUstream s;
  CU_CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  const cuuint64_t big = 0xfedcba9876543210ull;
  CU_CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  bump<<<n / 256, 256, 0, (cudaStream_t)s>>>(data, n);
  CU_CHECK(cuStreamWriteValue32(s, flag, 7, CU_STREAM_WRITE_VALUE_DEFAULT));
  CU_CHECK(cuStreamWaitValue32(s, flag, 7, CU_STREAM_WAIT_VALUE_GEQ));
  CU_CHECK(cuStreamWriteValue64(s, word64, big, 0));
  CUstreamBatchMemOpParams ops[2];
  memset(ops, 0, sizeof ops);
  ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  ops[0].writeValue.address = pair + 4;
  ops[0].writeValue.value = 9;
  ops[1].memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
  ops[1].memoryBarrier.flags = CU_STREAM_MEMORY_BARRIER_TYPE_GPU;
  CU_CHECK(cuStreamBatchMemOp(s, 2, ops, 0));
  twice<<<n / 256, 256, 0, (cudaStream_t)s>>>(data, out, n);
  CUgraph g;
  CU_CHECK(cuStreamEndCapture(s, &g));

  size_t count = 0;
  CU_CHECK(cuGraphGetNodes(g, NULL, &count));
  std::vector<CUgraphNode> nodes(count);
  CU_CHECK(cuGraphGetNodes(g, nodes.data(), &count));
  int kernels = 0, memops = 0;
  for (size_t i = 0; i < count; i++) {
    CUgraphNodeType t;
    CU_CHECK(cuGraphNodeGetType(nodes[i], &t));
    kernels += t == CU_GRAPH_NODE_TYPE_KERNEL;
    memops += t == CU_GRAPH_NODE_TYPE_BATCH_MEM_OP;
  }
  printf("captured: %d kernel nodes, memory-operation nodes: %s\n", kernels, memops > 0 ? "yes" : "no");
  EXPECT(kernels == 2 && memops > 0);

  CUgraphExec x;
  CU_CHECK(cuGraphInstantiate(&x, g, 0));
  for (int launch = 1; launch <= 3; launch++) {
    CU_CHECK(cuMemsetD32Async(flag, 0, 1, s));
    CU_CHECK(cuMemsetD32Async(word64, 0, 2, s));
    CU_CHECK(cuMemsetD32Async(pair, 0, 2, s));
    CU_CHECK(cuGraphLaunch(x, s));
    CU_CHECK(cuStreamSynchronize(s));
    unsigned f = 0, p[2] = {1, 1};
    unsigned long long w = 0;
    CU_CHECK(cuMemcpyDtoH(&f, flag, 4));
    CU_CHECK(cuMemcpyDtoH(&w, word64, 8));
    CU_CHECK(cuMemcpyDtoH(p, pair, 8));
    CHECK(cudaMemcpy(h.data(), out, n * sizeof(int), cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < n; i++) bad += h[i] != 2 * (i + launch);
    printf("launch %d: flag %u, word 0x%llx, pair %u %u, out[%d] = %d, wrong %d\n", launch, f, w,
           p[0], p[1], n - 1, h[n - 1], bad);
    EXPECT(f == 7 && w == big && p[0] == 0 && p[1] == 9 && bad == 0);
  }

  CU_CHECK(cuGraphExecDestroy(x));
  CU_CHECK(cuGraphDestroy(g));

  // The node API: a write node and, after it, a wait node that the write
  // satisfies and a 64-bit write from cuGraphAddNode.
  CUcontext ctx;
  CU_CHECK(cuCtxGetCurrent(&ctx));
  CUgraph g2;
  CU_CHECK(cuGraphCreate(&g2, 0));
  CUstreamBatchMemOpParams w[1];
  memset(w, 0, sizeof w);
  w[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  w[0].writeValue.address = flag;
  w[0].writeValue.value = 5;
  CUDA_BATCH_MEM_OP_NODE_PARAMS np = {ctx, 1, w, 0};
  CUgraphNode wn, vn, an;
  CU_CHECK(cuGraphAddBatchMemOpNode(&wn, g2, NULL, 0, &np));
  CUDA_BATCH_MEM_OP_NODE_PARAMS got;
  memset(&got, 0, sizeof got);
  CU_CHECK(cuGraphBatchMemOpNodeGetParams(wn, &got));
  printf("node parameters: %u operation(s), kind %d, value %u, same address %s\n", got.count,
         (int)got.paramArray[0].operation, got.paramArray[0].writeValue.value,
         got.paramArray[0].writeValue.address == flag ? "yes" : "no");
  EXPECT(got.count == 1 && got.paramArray[0].writeValue.value == 5);
  w[0].writeValue.value = 6;
  CU_CHECK(cuGraphBatchMemOpNodeSetParams(wn, &np));
  CUstreamBatchMemOpParams v[1];
  memset(v, 0, sizeof v);
  v[0].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  v[0].waitValue.address = flag;
  v[0].waitValue.value = 6;
  v[0].waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
  CUDA_BATCH_MEM_OP_NODE_PARAMS vp = {ctx, 1, v, 0};
  CU_CHECK(cuGraphAddBatchMemOpNode(&vn, g2, &wn, 1, &vp));
  CUstreamBatchMemOpParams w64[1];
  memset(w64, 0, sizeof w64);
  w64[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
  w64[0].writeValue.address = word64;
  w64[0].writeValue.value64 = 0x1122334455667788ull;
  CUgraphNodeParams gp;
  memset(&gp, 0, sizeof gp);
  gp.type = CU_GRAPH_NODE_TYPE_BATCH_MEM_OP;
  gp.memOp.ctx = ctx;
  gp.memOp.count = 1;
  gp.memOp.paramArray = w64;
  CU_CHECK(cuGraphAddNode(&an, g2, &vn, NULL, 1, &gp));
  CUgraphNodeType t2;
  CU_CHECK(cuGraphNodeGetType(an, &t2));
  EXPECT(t2 == CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
  CUgraphExec x2;
  CU_CHECK(cuGraphInstantiate(&x2, g2, 0));
  CU_CHECK(cuMemsetD32Async(flag, 0, 1, s));
  CU_CHECK(cuGraphLaunch(x2, s));
  CU_CHECK(cuStreamSynchronize(s));
  unsigned f2 = 0;
  unsigned long long w2 = 0;
  CU_CHECK(cuMemcpyDtoH(&f2, flag, 4));
  CU_CHECK(cuMemcpyDtoH(&w2, word64, 8));
  printf("node API graph: flag %u, word 0x%llx\n", f2, w2);
  EXPECT(f2 == 6 && w2 == 0x1122334455667788ull);
  // New operations for the executable graph's write node.
  w[0].writeValue.value = 8;
  CU_CHECK(cuGraphExecBatchMemOpNodeSetParams(x2, wn, &np));
  CU_CHECK(cuMemsetD32Async(flag, 0, 1, s));
  CU_CHECK(cuGraphLaunch(x2, s));
  CU_CHECK(cuStreamSynchronize(s));
  CU_CHECK(cuMemcpyDtoH(&f2, flag, 4));
  printf("after the exec update: flag %u\n", f2);
  EXPECT(f2 == 8);
  CU_CHECK(cuGraphExecDestroy(x2));
  CU_CHECK(cuGraphDestroy(g2));
  CU_CHECK(cuStreamDestroy(s));
  CU_CHECK(cuMemFree(flag));
  CU_CHECK(cuMemFree(word64));
  CU_CHECK(cuMemFree(pair));
  CHECK(cudaFree(data));
  CHECK(cudaFree(out));
  printf("PASS graph_stream_memop\n");
  return 0;
}
