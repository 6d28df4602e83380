// rgpu-nvcc-flags: -lcuda
// The runtime and the driver API on one stream (issue 15): a stream made by
// cudaStreamCreate carries a cuLaunchKernel, then cudaMemcpyAsync and
// cudaStreamSynchronize read the result, which is checked.  A failing
// driver call leaves the runtime's last error alone, as in CUDA.
#include <vector>

#include "rgpu_drv_check.h"

int main() {
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(nullptr)); // the primary context, current on this thread
  CU_CHECK(cuInit(0));

  size_t fat_len = 0;
  void *fatbin = read_whole(beside_exe("drv_kernels.fatbin"), &fat_len);
  CUmodule mod;
  CU_CHECK(cuModuleLoadData(&mod, fatbin));
  std::free(fatbin);
  CUfunction saxpy;
  CU_CHECK(cuModuleGetFunction(&saxpy, mod, "saxpy"));

  // A driver error is the driver call's own: cudaGetLastError stays clear.
  CUfunction none;
  CU_EXPECT_ERR(cuModuleGetFunction(&none, mod, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  CHECK(cudaGetLastError());

  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  const int n = 1 << 16;
  float *x, *y, *host;
  CHECK(cudaMalloc(&x, n * sizeof(float)));
  CHECK(cudaMalloc(&y, n * sizeof(float)));
  CHECK(cudaMallocHost(&host, n * sizeof(float)));
  std::vector<float> hx(n);
  for (int i = 0; i < n; i++) hx[i] = (float)(i & 1023), host[i] = 0.5f;
  CHECK(cudaMemcpyAsync(x, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(y, host, n * sizeof(float), cudaMemcpyHostToDevice, s));
  float a = -2.0f;
  int nn = n;
  CUdeviceptr dx = (CUdeviceptr)x, dy = (CUdeviceptr)y;
  void *args[] = {&a, &dx, &dy, &nn};
  for (int rep = 0; rep < 3; rep++)
    CU_CHECK(cuLaunchKernel(saxpy, n / 256, 1, 1, 256, 1, 1, 0, (CUstream)s, args, nullptr));
  CHECK(cudaMemcpyAsync(host, y, n * sizeof(float), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; i++) EXPECT(host[i] == 0.5f - 6.0f * hx[i]);
  printf("mixed stream: y[1023] = %.1f\n", host[1023]);

  // The driver's view of the runtime's stream: the same object.
  CUcontext ctx = nullptr;
  CU_CHECK(cuStreamGetCtx((CUstream)s, &ctx));
  EXPECT(ctx != nullptr);
  CU_CHECK(cuStreamSynchronize((CUstream)s));

  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(x));
  CHECK(cudaFree(y));
  CHECK(cudaFreeHost(host));
  CU_CHECK(cuModuleUnload(mod));
  CHECK(cudaGetLastError());
  pass("drv_mixed");
  return 0;
}
