// rgpu-nvcc-flags: -lcuda
// Stream memory operations captured into a CUDA graph: a kernel, a 32-bit
// write, a wait that the write satisfies, a 64-bit write, a batch (a write
// and a barrier), another kernel.  The graph is launched three times, each
// after the words were cleared outside it; every launch's words and both
// kernels' results are read back and checked.  The captured operations are
// batch memory-operation nodes.
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
  CU_CHECK(cuStreamDestroy(s));
  CU_CHECK(cuMemFree(flag));
  CU_CHECK(cuMemFree(word64));
  CU_CHECK(cuMemFree(pair));
  CHECK(cudaFree(data));
  CHECK(cudaFree(out));
  printf("PASS graph_stream_memop\n");
  return 0;
}
