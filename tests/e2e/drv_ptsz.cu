// rgpu-nvcc-flags: -lcuda --default-stream per-thread
// Driver launches on the per-thread default stream (issue 15): built with
// --default-stream per-thread, cuda.h sends cuLaunchKernel, the copies and
// cuStreamSynchronize to their _ptsz/_ptds entry points, where stream 0 is
// the calling thread's own stream.  Four threads each launch and check
// their own work.
#include <thread>
#include <vector>

#include "rgpu_drv_check.h"

static CUcontext g_ctx;
static CUfunction g_saxpy;
static int g_ok[4];

static void worker(int t) {
  CU_CHECK(cuCtxSetCurrent(g_ctx));
  const int n = 3000 + 100 * t;
  std::vector<float> x(n), y(n, (float)t);
  for (int i = 0; i < n; i++) x[i] = (float)(i % 13);
  CUdeviceptr dx, dy;
  CU_CHECK(cuMemAlloc(&dx, n * sizeof(float)));
  CU_CHECK(cuMemAlloc(&dy, n * sizeof(float)));
  CU_CHECK(cuMemcpyHtoD(dx, x.data(), n * sizeof(float)));
  CU_CHECK(cuMemcpyHtoD(dy, y.data(), n * sizeof(float)));
  float a = (float)(t + 1);
  int nn = n;
  void *args[] = {&a, &dx, &dy, &nn};
  for (int rep = 0; rep < 5; rep++)
    CU_CHECK(cuLaunchKernel(g_saxpy, (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr));
  CU_CHECK(cuStreamSynchronize(nullptr));
  CU_CHECK(cuMemcpyDtoH(y.data(), dy, n * sizeof(float)));
  int ok = 1;
  for (int i = 0; i < n; i++) ok &= y[i] == (float)t + 5.0f * (float)(t + 1) * x[i];
  CU_CHECK(cuMemFree(dx));
  CU_CHECK(cuMemFree(dy));
  g_ok[t] = ok;
}

int main() {
  CUdevice dev;
  g_ctx = drv_setup(&dev);
  CUmodule mod;
  CU_CHECK(cuModuleLoad(&mod, beside_exe("drv_kernels.ptx")));
  CU_CHECK(cuModuleGetFunction(&g_saxpy, mod, "saxpy"));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; t++) threads.emplace_back(worker, t);
  for (auto &th : threads) th.join();
  for (int t = 0; t < 4; t++) {
    EXPECT(g_ok[t]);
    printf("thread %d: ok\n", t);
  }
  CU_CHECK(cuModuleUnload(mod));
  pass("drv_ptsz");
  return 0;
}
