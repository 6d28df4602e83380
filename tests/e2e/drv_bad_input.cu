// rgpu-nvcc-flags: -lcuda
// Bad input to the driver API's module and launch calls (issue 15): each is
// refused with the code a real GPU's driver returns, and the session keeps
// working afterwards (a good module loads and runs at the end).
#include <vector>

#include "rgpu_drv_check.h"

int main() {
  drv_setup(nullptr);

  // Garbage: no fatbin, no ELF, no PTX.  The driver calls it a bad image
  // (or, reading it as PTX text, bad PTX); either way the call fails.
  static const char garbage[] = "\x01\x02\x03 this is not a module \xfe\xff";
  CUmodule mod;
  CUresult r = cuModuleLoadData(&mod, garbage);
  EXPECT(r == CUDA_ERROR_INVALID_IMAGE || r == CUDA_ERROR_INVALID_PTX);
  printf("garbage image refused\n");
  char log[512];
  log[0] = 'x';
  CUjit_option opt[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *val[] = {log, (void *)(uintptr_t)sizeof log};
  r = cuModuleLoadDataEx(&mod, garbage, 2, opt, val);
  EXPECT(r == CUDA_ERROR_INVALID_IMAGE || r == CUDA_ERROR_INVALID_PTX);
  EXPECT(std::memchr(log, 0, sizeof log) != nullptr); // the log is a string
  // A library: refused at the load, or (a driver that loads libraries
  // lazily) at its first use.
  CUlibrary lib;
  r = cuLibraryLoadData(&lib, garbage, nullptr, nullptr, 0, nullptr, nullptr, 0);
  if (r == CUDA_SUCCESS) {
    CUkernel k;
    EXPECT(cuLibraryGetKernel(&k, lib, "saxpy") != CUDA_SUCCESS);
    CU_CHECK(cuLibraryUnload(lib));
  } else {
    EXPECT(r == CUDA_ERROR_INVALID_IMAGE || r == CUDA_ERROR_INVALID_PTX);
  }
  CU_EXPECT_ERR(cuModuleLoad(&mod, "/nonexistent/drv_kernels.ptx"), CUDA_ERROR_FILE_NOT_FOUND);
  // A cubin with Turing SASS only: neither softgpu (which runs PTX) nor a
  // GPU of a later major architecture can run it.
  size_t cubin_len = 0;
  void *cubin = read_whole(beside_exe("drv_kernels.cubin"), &cubin_len);
  int major = 0;
  CUdevice dev0;
  CU_CHECK(cuDeviceGet(&dev0, 0));
  CU_CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev0));
  r = cuModuleLoadData(&mod, cubin);
  if (r == CUDA_SUCCESS) {
    EXPECT(major == 7); // only a Turing GPU runs it
    CU_CHECK(cuModuleUnload(mod));
    printf("sm_75 cubin loaded\n");
  } else {
    CU_EXPECT_ERR(r, CUDA_ERROR_NO_BINARY_FOR_GPU);
    printf("sm_75 cubin refused\n");
  }
  std::free(cubin);
  CU_EXPECT_ERR(cuModuleLoadData(nullptr, garbage), CUDA_ERROR_INVALID_VALUE);

  // A good module, and names it does not have.
  CU_CHECK(cuModuleLoad(&mod, beside_exe("drv_kernels.ptx")));
  CUfunction f;
  CU_EXPECT_ERR(cuModuleGetFunction(&f, mod, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  CU_EXPECT_ERR(cuModuleGetFunction(&f, mod, nullptr), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr dp;
  size_t sz;
  CU_EXPECT_ERR(cuModuleGetGlobal(&dp, &sz, mod, "no_such_variable"), CUDA_ERROR_NOT_FOUND);
  printf("unknown names: CUDA_ERROR_NOT_FOUND\n");

  // Launch configurations beyond the device's limits.
  CU_CHECK(cuModuleGetFunction(&f, mod, "saxpy"));
  const int n = 1000;
  CUdeviceptr dx, dy;
  CU_CHECK(cuMemAlloc(&dx, n * sizeof(float)));
  CU_CHECK(cuMemAlloc(&dy, n * sizeof(float)));
  float a = 2.0f;
  int nn = n;
  void *args[] = {&a, &dx, &dy, &nn};
  CU_EXPECT_ERR(cuLaunchKernel(f, 1, 1, 1, 2048, 1, 1, 0, nullptr, args, nullptr),
                CUDA_ERROR_INVALID_VALUE);
  CU_EXPECT_ERR(cuLaunchKernel(f, 0, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr),
                CUDA_ERROR_INVALID_VALUE);
  int v;
  CU_EXPECT_ERR(cuFuncGetAttribute(nullptr, CU_FUNC_ATTRIBUTE_NUM_REGS, f), CUDA_ERROR_INVALID_VALUE);
  (void)v;
  printf("bad launch configurations: CUDA_ERROR_INVALID_VALUE\n");

  // The session still works: a real launch computes.
  std::vector<float> x(n), y(n, 1.0f);
  for (int i = 0; i < n; i++) x[i] = (float)i;
  CU_CHECK(cuMemcpyHtoD(dx, x.data(), n * sizeof(float)));
  CU_CHECK(cuMemcpyHtoD(dy, y.data(), n * sizeof(float)));
  CU_CHECK(cuLaunchKernel(f, (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr));
  CU_CHECK(cuMemcpyDtoH(y.data(), dy, n * sizeof(float)));
  for (int i = 0; i < n; i++) EXPECT(y[i] == 2.0f * (float)i + 1.0f);
  CU_CHECK(cuMemFree(dx));
  CU_CHECK(cuMemFree(dy));
  CU_CHECK(cuModuleUnload(mod));
  pass("drv_bad_input");
  return 0;
}
