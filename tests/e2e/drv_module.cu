// rgpu-nvcc-flags: -lcuda
// Driver-API modules (issue 15): a module from a PTX file (cuModuleLoad)
// and one from a fatbin in memory (cuModuleLoadData), kernels by name,
// launches with kernelParams and with a packed `extra` buffer, a __device__
// variable read and written through cuModuleGetGlobal, and the function
// queries.  Every result is checked against values computed here.
#include <vector>

#include "rgpu_drv_check.h"

int main() {
  CUdevice dev;
  drv_setup(&dev);

  CUmodule from_ptx, from_fatbin;
  CU_CHECK(cuModuleLoad(&from_ptx, beside_exe("drv_kernels.ptx")));
  size_t fat_len = 0;
  void *fatbin = read_whole(beside_exe("drv_kernels.fatbin"), &fat_len);
  CU_CHECK(cuModuleLoadData(&from_fatbin, fatbin));
  std::free(fatbin); // the driver keeps what it needs

  // saxpy from the PTX module, parameters by kernelParams.
  CUfunction saxpy;
  CU_CHECK(cuModuleGetFunction(&saxpy, from_ptx, "saxpy"));
  CUfunction again;
  CU_CHECK(cuModuleGetFunction(&again, from_ptx, "saxpy"));
  EXPECT(again == saxpy);
  const int n = 10000;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; i++) x[i] = (float)i, y[i] = 1.0f - (float)i;
  CUdeviceptr dx, dy;
  CU_CHECK(cuMemAlloc(&dx, n * sizeof(float)));
  CU_CHECK(cuMemAlloc(&dy, n * sizeof(float)));
  CU_CHECK(cuMemcpyHtoD(dx, x.data(), n * sizeof(float)));
  CU_CHECK(cuMemcpyHtoD(dy, y.data(), n * sizeof(float)));
  float a = 2.5f;
  int nn = n;
  void *args[] = {&a, &dx, &dy, &nn};
  CU_CHECK(cuLaunchKernel(saxpy, (n + 255) / 256, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr));
  CU_CHECK(cuMemcpyDtoH(y.data(), dy, n * sizeof(float)));
  for (int i = 0; i < n; i++) EXPECT(y[i] == 2.5f * (float)i + 1.0f - (float)i);
  printf("saxpy from PTX: y[9999] = %.1f\n", y[n - 1]);

  // The parameter layout the driver reports: saxpy(float, ptr, ptr, int).
  size_t off = 0, size = 0;
  CU_CHECK(cuFuncGetParamInfo(saxpy, 3, &off, &size));
  EXPECT(off == 24 && size == 4);
  CU_EXPECT_ERR(cuFuncGetParamInfo(saxpy, 4, &off, &size), CUDA_ERROR_INVALID_VALUE);
  const char *fname = nullptr;
  CU_CHECK(cuFuncGetName(&fname, saxpy));
  EXPECT(std::strcmp(fname, "saxpy") == 0);
  CUmodule owner;
  CU_CHECK(cuFuncGetModule(&owner, saxpy));
  EXPECT(owner == from_ptx);
  int max_threads = 0;
  CU_CHECK(cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, saxpy));
  EXPECT(max_threads >= 256);
  // Attributes the program sets: read back, and a launch after them works.
  CU_CHECK(cuFuncSetAttribute(saxpy, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1024));
  int dyn = 0;
  CU_CHECK(cuFuncGetAttribute(&dyn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, saxpy));
  EXPECT(dyn == 1024);
  CU_CHECK(cuFuncSetCacheConfig(saxpy, CU_FUNC_CACHE_PREFER_SHARED));
  CU_CHECK(cuLaunchKernel(saxpy, (n + 255) / 256, 1, 1, 256, 1, 1, 512, nullptr, args, nullptr));
  CU_CHECK(cuMemcpyDtoH(y.data(), dy, n * sizeof(float)));
  for (int i = 0; i < n; i++) EXPECT(y[i] == 5.0f * (float)i + 1.0f - (float)i);

  // mixed from the fatbin module, parameters as one packed buffer.
  CUfunction mixed;
  CU_CHECK(cuModuleGetFunction(&mixed, from_fatbin, "mixed"));
  CUdeviceptr dout;
  CU_CHECK(cuMemAlloc(&dout, 3 * sizeof(int)));
  unsigned char buf[32];
  std::memset(buf, 0, sizeof buf);
  char c = 'R';
  double d = 10.25;
  int k = -77;
  std::memcpy(buf, &dout, 8);
  std::memcpy(buf + 8, &c, 1);
  std::memcpy(buf + 16, &d, 8);
  std::memcpy(buf + 24, &k, 4);
  size_t buf_size = 28;
  void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &buf_size,
                   CU_LAUNCH_PARAM_END};
  CU_CHECK(cuLaunchKernel(mixed, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, extra));
  int out[3] = {0, 0, 0};
  CU_CHECK(cuMemcpyDtoH(out, dout, sizeof out));
  EXPECT(out[0] == 'R' && out[1] == 41 && out[2] == -77);
  printf("mixed with extra: %d %d %d\n", out[0], out[1], out[2]);

  // The __device__ variable: its initial value, then one written by the host.
  CUdeviceptr dcounter;
  size_t counter_size = 0;
  CU_CHECK(cuModuleGetGlobal(&dcounter, &counter_size, from_fatbin, "g_counter"));
  EXPECT(counter_size == sizeof(int));
  int counter = 0;
  CU_CHECK(cuMemcpyDtoH(&counter, dcounter, sizeof counter));
  EXPECT(counter == 5);
  counter = 1000;
  CU_CHECK(cuMemcpyHtoD(dcounter, &counter, sizeof counter));
  CUfunction add_counter;
  CU_CHECK(cuModuleGetFunction(&add_counter, from_fatbin, "add_counter"));
  CUdeviceptr dints;
  CU_CHECK(cuMemAlloc(&dints, n * sizeof(int)));
  void *args2[] = {&dints, &nn};
  CU_CHECK(cuLaunchKernel(add_counter, (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, args2, nullptr));
  std::vector<int> ints(n);
  CU_CHECK(cuMemcpyDtoH(ints.data(), dints, n * sizeof(int)));
  for (int i = 0; i < n; i++) EXPECT(ints[i] == i + 1000);
  printf("add_counter with g_counter = 1000: out[42] = %d\n", ints[42]);
  // The PTX module has its own copy of the variable, still at 5.
  CUdeviceptr dcounter_ptx;
  CU_CHECK(cuModuleGetGlobal(&dcounter_ptx, nullptr, from_ptx, "g_counter"));
  EXPECT(dcounter_ptx != dcounter);
  CU_CHECK(cuMemcpyDtoH(&counter, dcounter_ptx, sizeof counter));
  EXPECT(counter == 5);

  // Enumerating the fatbin module's kernels.
  unsigned count = 0;
  CU_CHECK(cuModuleGetFunctionCount(&count, from_fatbin));
  EXPECT(count == 3);
  CUfunction all[3];
  CU_CHECK(cuModuleEnumerateFunctions(all, 3, from_fatbin));
  int seen = 0;
  for (int i = 0; i < 3; i++) {
    const char *nm = nullptr;
    CU_CHECK(cuFuncGetName(&nm, all[i]));
    seen |= drv_kernels_bit(nm);
  }
  EXPECT(seen == 7);
  printf("fatbin module: %u kernels\n", count);

  CU_CHECK(cuMemFree(dx));
  CU_CHECK(cuMemFree(dy));
  CU_CHECK(cuMemFree(dout));
  CU_CHECK(cuMemFree(dints));
  CU_CHECK(cuModuleUnload(from_ptx));
  CU_CHECK(cuModuleUnload(from_fatbin));
  pass("drv_module");
  return 0;
}
