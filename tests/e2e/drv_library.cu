// rgpu-nvcc-flags: -lcuda
// Driver-API libraries and kernels (issue 15): cuLibraryLoadFromFile (PTX)
// and cuLibraryLoadData (a fatbin in memory), a CUkernel launched directly
// as a CUfunction (CUDA allows the cast) and through cuKernelGetFunction,
// cuLaunchKernelEx, a library global, the library's module, kernel
// attributes and the occupancy calculator.  Results are checked.
#include <vector>

#include "rgpu_drv_check.h"

static void check_saxpy(CUdeviceptr dy, const std::vector<float> &want, int n) {
  std::vector<float> y(n);
  CU_CHECK(cuMemcpyDtoH(y.data(), dy, n * sizeof(float)));
  for (int i = 0; i < n; i++) EXPECT(y[i] == want[i]);
}

// A saxpy launch (a = 3) of a kind the device may not offer: where it is
// offered it succeeded and y gained 3x, else it answered NOT_SUPPORTED.
static void check_optional_saxpy(const char *what, int offered, CUresult cr, CUdeviceptr dy,
                                 const std::vector<float> &x, std::vector<float> &want) {
  int n = (int)x.size();
  if (offered) {
    CU_CHECK(cr);
    for (int i = 0; i < n; i++) want[i] += 3.0f * x[i];
    check_saxpy(dy, want, n);
    printf("%s: ok\n", what);
  } else {
    CU_EXPECT_ERR(cr, CUDA_ERROR_NOT_SUPPORTED);
    printf("%s: not offered\n", what);
  }
}

int main() {
  CUdevice dev;
  drv_setup(&dev);

  CUlibrary lib_ptx, lib_fat;
  CU_CHECK(cuLibraryLoadFromFile(&lib_ptx, beside_exe("drv_kernels.ptx"), nullptr, nullptr, 0,
                                 nullptr, nullptr, 0));
  size_t fat_len = 0;
  void *fatbin = read_whole(beside_exe("drv_kernels.fatbin"), &fat_len);
  CU_CHECK(cuLibraryLoadData(&lib_fat, fatbin, nullptr, nullptr, 0, nullptr, nullptr, 0));
  std::free(fatbin);

  CUkernel k_saxpy;
  CU_CHECK(cuLibraryGetKernel(&k_saxpy, lib_ptx, "saxpy"));
  const char *kname = nullptr;
  CU_CHECK(cuKernelGetName(&kname, k_saxpy));
  EXPECT(std::strcmp(kname, "saxpy") == 0);
  CU_EXPECT_ERR(cuLibraryGetKernel(&k_saxpy, lib_ptx, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  CU_CHECK(cuLibraryGetKernel(&k_saxpy, lib_ptx, "saxpy"));
  CUlibrary owner;
  CU_CHECK(cuKernelGetLibrary(&owner, k_saxpy));
  EXPECT(owner == lib_ptx);
  size_t poff = 0, psize = 0;
  CU_CHECK(cuKernelGetParamInfo(k_saxpy, 1, &poff, &psize));
  EXPECT(poff == 8 && psize == 8);
  // Every kernel of the fatbin library, by name.
  unsigned nk = 0;
  CU_CHECK(cuLibraryGetKernelCount(&nk, lib_fat));
  EXPECT(nk == 3);
  CUkernel ks[3];
  CU_CHECK(cuLibraryEnumerateKernels(ks, 3, lib_fat));
  int seen = 0;
  for (int i = 0; i < 3; i++) {
    const char *nm = nullptr;
    CU_CHECK(cuKernelGetName(&nm, ks[i]));
    seen |= drv_kernels_bit(nm);
  }
  EXPECT(seen == 7);
  printf("fatbin library: %u kernels\n", nk);

  const int n = 4096;
  std::vector<float> x(n), y(n, 1.0f), want(n);
  for (int i = 0; i < n; i++) x[i] = (float)(i % 100);
  CUdeviceptr dx, dy;
  CU_CHECK(cuMemAlloc(&dx, n * sizeof(float)));
  CU_CHECK(cuMemAlloc(&dy, n * sizeof(float)));
  CU_CHECK(cuMemcpyHtoD(dx, x.data(), n * sizeof(float)));
  CU_CHECK(cuMemcpyHtoD(dy, y.data(), n * sizeof(float)));
  float a = 3.0f;
  int nn = n;
  void *args[] = {&a, &dx, &dy, &nn};

  // 1: the CUkernel itself as the CUfunction.
  CU_CHECK(cuLaunchKernel((CUfunction)k_saxpy, n / 128, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr));
  for (int i = 0; i < n; i++) want[i] = 3.0f * x[i] + 1.0f;
  check_saxpy(dy, want, n);

  // 2: its function in the current context.
  CUfunction f_saxpy;
  CU_CHECK(cuKernelGetFunction(&f_saxpy, k_saxpy));
  CU_CHECK(cuLaunchKernel(f_saxpy, n / 256, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr));
  for (int i = 0; i < n; i++) want[i] += 3.0f * x[i];
  check_saxpy(dy, want, n);

  // 3: cuLaunchKernelEx with a hint attribute (priority: changes no result).
  CUlaunchAttribute attr;
  std::memset(&attr, 0, sizeof attr);
  attr.id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
  attr.value.priority = 0;
  CUlaunchConfig cfg;
  std::memset(&cfg, 0, sizeof cfg);
  cfg.gridDimX = n / 64;
  cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 64;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  CU_CHECK(cuLaunchKernelEx(&cfg, f_saxpy, args, nullptr));
  for (int i = 0; i < n; i++) want[i] += 3.0f * x[i];
  check_saxpy(dy, want, n);
  printf("saxpy three ways: y[99] = %.1f\n", want[99]);

  // Kernel attributes on a device, and the function's.
  int kmax = 0, fmax = 0;
  CU_CHECK(cuKernelGetAttribute(&kmax, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k_saxpy, dev));
  CU_CHECK(cuFuncGetAttribute(&fmax, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f_saxpy));
  EXPECT(kmax == fmax && kmax >= 256);

  // The occupancy calculator's block size is usable as it is.
  int min_grid = 0, block = 0;
  CU_CHECK(cuOccupancyMaxPotentialBlockSize(&min_grid, &block, f_saxpy, nullptr, 0, 0));
  EXPECT(block > 0 && block % 32 == 0 && block <= kmax && min_grid > 0);
  int per_sm = 0;
  CU_CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, f_saxpy, block, 0));
  EXPECT(per_sm >= 1);
  CU_CHECK(cuLaunchKernel(f_saxpy, (n + block - 1) / block, 1, 1, block, 1, 1, 0, nullptr, args, nullptr));
  for (int i = 0; i < n; i++) want[i] += 3.0f * x[i];
  check_saxpy(dy, want, n);
  printf("occupancy block size launch: ok\n");

  // A cooperative launch where the device offers them (softgpu does not).
  int coop = 0;
  CU_CHECK(cuDeviceGetAttribute(&coop, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, dev));
  CUresult cr = cuLaunchCooperativeKernel(f_saxpy, n / 256, 1, 1, 256, 1, 1, 0, nullptr, args);
  check_optional_saxpy("cooperative launch", coop, cr, dy, x, want);

  // Thread block clusters of 2 where the device launches clusters.
  int clusters = 0;
  CU_CHECK(cuDeviceGetAttribute(&clusters, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, dev));
  CUlaunchAttribute cattr;
  std::memset(&cattr, 0, sizeof cattr);
  cattr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  cattr.value.clusterDim.x = 2;
  cattr.value.clusterDim.y = 1;
  cattr.value.clusterDim.z = 1;
  CUlaunchConfig ccfg = cfg;
  ccfg.gridDimX = n / 128;
  ccfg.blockDimX = 128;
  ccfg.attrs = &cattr;
  ccfg.numAttrs = 1;
  cr = cuLaunchKernelEx(&ccfg, f_saxpy, args, nullptr);
  check_optional_saxpy("cluster launch", clusters, cr, dy, x, want);

  // The library's global and its module in the current context.
  CUdeviceptr dcounter;
  size_t sz = 0;
  CU_CHECK(cuLibraryGetGlobal(&dcounter, &sz, lib_fat, "g_counter"));
  EXPECT(sz == sizeof(int));
  int counter = -40;
  CU_CHECK(cuMemcpyHtoD(dcounter, &counter, sizeof counter));
  CUmodule mod;
  CU_CHECK(cuLibraryGetModule(&mod, lib_fat));
  CUfunction add_counter;
  CU_CHECK(cuModuleGetFunction(&add_counter, mod, "add_counter"));
  CUdeviceptr dints;
  CU_CHECK(cuMemAlloc(&dints, n * sizeof(int)));
  void *args2[] = {&dints, &nn};
  CU_CHECK(cuLaunchKernel(add_counter, n / 128, 1, 1, 128, 1, 1, 0, nullptr, args2, nullptr));
  std::vector<int> ints(n);
  CU_CHECK(cuMemcpyDtoH(ints.data(), dints, n * sizeof(int)));
  for (int i = 0; i < n; i++) EXPECT(ints[i] == i - 40);
  printf("library global: out[100] = %d\n", ints[100]);

  CU_CHECK(cuMemFree(dx));
  CU_CHECK(cuMemFree(dy));
  CU_CHECK(cuMemFree(dints));
  CU_CHECK(cuLibraryUnload(lib_ptx));
  CU_CHECK(cuLibraryUnload(lib_fat));
  pass("drv_library");
  return 0;
}
