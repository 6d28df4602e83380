// rgpu-nvcc-flags: -lcuda
// The runtime and the driver API in one program (issue 15): they share the
// primary context, device pointers, streams, events and graphs, and a
// failing driver call leaves the runtime's last error alone.
#include <cuda.h>
#include <vector>
#include "rgpu_drv_check.h"

__global__ void scale(unsigned *p, unsigned k, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) p[i] *= k;
}

int main() {
  const size_t n = 1 << 16;
  std::vector<unsigned> h(n), back(n);
  for (size_t i = 0; i < n; i++) h[i] = (unsigned)i + 1;

  // The runtime's first call binds the primary context of device 0.
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(nullptr));
  CUcontext cur = nullptr, primary = nullptr;
  CU_CHECK(cuCtxGetCurrent(&cur));
  EXPECT(cur != nullptr);
  CU_CHECK(cuDevicePrimaryCtxRetain(&primary, 0));
  EXPECT(cur == primary);
  unsigned flags;
  int active = 0;
  CU_CHECK(cuDevicePrimaryCtxGetState(0, &flags, &active));
  EXPECT(active == 1);
  CUdevice dev = -1;
  CU_CHECK(cuCtxGetDevice(&dev));
  EXPECT(dev == 0);

  // cudaMalloc'd memory written by the driver, read back by the runtime.
  unsigned *d = nullptr;
  CHECK(cudaMalloc(&d, n * 4));
  CU_CHECK(cuMemcpyHtoD((CUdeviceptr)d, h.data(), n * 4));
  CHECK(cudaMemcpy(back.data(), d, n * 4, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++) EXPECT(back[i] == h[i]);

  // A runtime stream used by the driver.
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CU_CHECK(cuMemsetD32Async((CUdeviceptr)d, 0x12345678u, n, (CUstream)s));
  CU_CHECK(cuStreamSynchronize((CUstream)s));
  CHECK(cudaMemcpy(back.data(), d, n * 4, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++) EXPECT(back[i] == 0x12345678u);

  // A runtime kernel launch, then the driver's context synchronize.
  CU_CHECK(cuMemcpyHtoD((CUdeviceptr)d, h.data(), n * 4));
  scale<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(d, 3, n);
  CHECK(cudaGetLastError());
  CU_CHECK(cuCtxSynchronize());
  CU_CHECK(cuMemcpyDtoH(back.data(), (CUdeviceptr)d, n * 4));
  for (size_t i = 0; i < n; i++) EXPECT(back[i] == h[i] * 3);

  // Events across the APIs.
  cudaEvent_t e;
  CHECK(cudaEventCreate(&e));
  scale<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(d, 2, n);
  CU_CHECK(cuEventRecord((CUevent)e, (CUstream)s));
  CHECK(cudaEventSynchronize(e));
  CU_CHECK(cuEventQuery((CUevent)e));
  CHECK(cudaMemcpy(back.data(), d, n * 4, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++) EXPECT(back[i] == h[i] * 6);

  // Memory of one API freed by the other.
  CUdeviceptr dd = 0;
  CU_CHECK(cuMemAlloc(&dd, 4096));
  CHECK(cudaMemset((void *)dd, 0x7f, 4096));
  unsigned word = 0;
  CU_CHECK(cuMemcpyDtoH(&word, dd + 64, 4));
  EXPECT(word == 0x7f7f7f7fu);
  CHECK(cudaFree((void *)dd));
  void *rt = nullptr;
  CHECK(cudaMalloc(&rt, 4096));
  CU_CHECK(cuMemFree((CUdeviceptr)rt));

  // A failing driver call does not become the runtime's last error.
  CHECK(cudaGetLastError());
  CUresult bad = cuMemcpyHtoD((CUdeviceptr)0x1000, h.data(), 4);
  EXPECT(bad != CUDA_SUCCESS);
  CHECK(cudaGetLastError());

  // A runtime capture of driver work, instantiated and launched by the driver.
  cudaGraph_t g;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CU_CHECK(cuMemsetD32Async((CUdeviceptr)d, 5, n, (CUstream)s));
  scale<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(d, 7, n);
  CHECK(cudaStreamEndCapture(s, &g));
  CUgraphExec ge;
  CU_CHECK(cuGraphInstantiate(&ge, (CUgraph)g, 0));
  CU_CHECK(cuGraphLaunch(ge, (CUstream)s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemcpy(back.data(), d, n * 4, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++) EXPECT(back[i] == 35u);
  CU_CHECK(cuGraphExecDestroy(ge));
  CHECK(cudaGraphDestroy(g));

  // The runtime's driver entry points are the driver's functions.
  void *fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  CHECK(cudaGetDriverEntryPointByVersion("cuMemsetD32", &fn, CUDART_VERSION, cudaEnableDefault, &q));
  EXPECT(fn != nullptr && q == cudaDriverEntryPointSuccess);
  CU_CHECK(((CUresult(*)(CUdeviceptr, unsigned, size_t))fn)((CUdeviceptr)d, 9, n));
  CHECK(cudaMemcpy(back.data(), d, n * 4, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++) EXPECT(back[i] == 9u);

  CHECK(cudaEventDestroy(e));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d));
  CU_CHECK(cuDevicePrimaryCtxRelease(0));
  pass("drv_rt_mix");
  return 0;
}
