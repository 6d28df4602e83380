// rgpu-nvcc-flags: -lcuda
// A kernel compiled at run time with NVRTC on the client and launched
// through the driver API (issue 15): the PTX NVRTC writes for the device's
// compute capability (capped to what this NVRTC supports) is loaded with
// cuModuleLoadDataEx, its error log wired, and launched; results checked.
// NVRTC is opened with dlopen so that nothing here links the toolkit's
// libraries beyond libcuda.
#include <dlfcn.h>
#include <nvrtc.h>
#include <vector>

#include "rgpu_drv_check.h"

static const char k_source[] =
    "extern \"C\" __global__ void poly(const int *x, long long *y, int n, int c) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = (long long)x[i] * x[i] * 3 - 7LL * x[i] + c;\n"
    "}\n";

typedef nvrtcResult (*create_fn)(nvrtcProgram *, const char *, const char *, int,
                                 const char *const *, const char *const *);
typedef nvrtcResult (*compile_fn)(nvrtcProgram, int, const char *const *);
typedef nvrtcResult (*size_fn)(nvrtcProgram, size_t *);
typedef nvrtcResult (*get_fn)(nvrtcProgram, char *);
typedef nvrtcResult (*destroy_fn)(nvrtcProgram *);
typedef nvrtcResult (*num_archs_fn)(int *);
typedef nvrtcResult (*archs_fn)(int *);

static void *sym(void *h, const char *name) {
  void *p = dlsym(h, name);
  if (!p) {
    std::fprintf(stderr, "FAIL libnvrtc has no %s\n", name);
    std::exit(1);
  }
  return p;
}

int main() {
  CUdevice dev;
  drv_setup(&dev);
  void *h = dlopen("libnvrtc.so.13", RTLD_NOW);
  if (!h) h = dlopen("/usr/local/cuda/lib64/libnvrtc.so.13", RTLD_NOW);
  if (!h) {
    std::fprintf(stderr, "FAIL cannot open libnvrtc.so.13: %s\n", dlerror());
    return 1;
  }
  auto create = (create_fn)sym(h, "nvrtcCreateProgram");
  auto compile = (compile_fn)sym(h, "nvrtcCompileProgram");
  auto log_size = (size_fn)sym(h, "nvrtcGetProgramLogSize");
  auto get_log = (get_fn)sym(h, "nvrtcGetProgramLog");
  auto ptx_size = (size_fn)sym(h, "nvrtcGetPTXSize");
  auto get_ptx = (get_fn)sym(h, "nvrtcGetPTX");
  auto destroy = (destroy_fn)sym(h, "nvrtcDestroyProgram");
  auto num_archs = (num_archs_fn)sym(h, "nvrtcGetNumSupportedArchs");
  auto archs = (archs_fn)sym(h, "nvrtcGetSupportedArchs");

  int major = 0, minor = 0;
  CU_CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  CU_CHECK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  int cc = major * 10 + minor, narch = 0;
  EXPECT(num_archs(&narch) == NVRTC_SUCCESS && narch > 0);
  std::vector<int> supported(narch);
  EXPECT(archs(supported.data()) == NVRTC_SUCCESS);
  // The newest architecture NVRTC knows that the device runs.
  int arch = 0;
  for (int a : supported)
    if (a <= cc && a > arch) arch = a;
  EXPECT(arch > 0);
  char opt[64];
  std::snprintf(opt, sizeof opt, "--gpu-architecture=compute_%d", arch);
  const char *opts[] = {opt};

  nvrtcProgram prog;
  EXPECT(create(&prog, k_source, "poly.cu", 0, nullptr, nullptr) == NVRTC_SUCCESS);
  nvrtcResult cr = compile(prog, 1, opts);
  size_t lsz = 0;
  log_size(prog, &lsz);
  std::vector<char> log(lsz + 1, 0);
  get_log(prog, log.data());
  if (cr != NVRTC_SUCCESS) {
    std::fprintf(stderr, "FAIL nvrtc: %s\n", log.data());
    return 1;
  }
  size_t psz = 0;
  EXPECT(ptx_size(prog, &psz) == NVRTC_SUCCESS && psz > 0);
  std::vector<char> ptx(psz);
  EXPECT(get_ptx(prog, ptx.data()) == NVRTC_SUCCESS);
  destroy(&prog);

  char err_log[1024] = "unchanged";
  CUjit_option jopt[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                         CU_JIT_OPTIMIZATION_LEVEL};
  void *jval[] = {err_log, (void *)(uintptr_t)sizeof err_log, (void *)(uintptr_t)3};
  CUmodule mod;
  CU_CHECK(cuModuleLoadDataEx(&mod, ptx.data(), 3, jopt, jval));
  CUfunction poly;
  CU_CHECK(cuModuleGetFunction(&poly, mod, "poly"));

  const int n = 5000;
  std::vector<int> x(n);
  for (int i = 0; i < n; i++) x[i] = i - 2500;
  CUdeviceptr dx, dy;
  CU_CHECK(cuMemAlloc(&dx, n * sizeof(int)));
  CU_CHECK(cuMemAlloc(&dy, n * sizeof(long long)));
  CU_CHECK(cuMemcpyHtoD(dx, x.data(), n * sizeof(int)));
  int nn = n, c = 11;
  void *args[] = {&dx, &dy, &nn, &c};
  CU_CHECK(cuLaunchKernel(poly, (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr));
  std::vector<long long> y(n);
  CU_CHECK(cuMemcpyDtoH(y.data(), dy, n * sizeof(long long)));
  for (int i = 0; i < n; i++) {
    long long v = x[i];
    EXPECT(y[i] == v * v * 3 - 7 * v + 11);
  }
  printf("nvrtc poly: y[0] = %lld, y[4999] = %lld\n", y[0], y[n - 1]);
  CU_CHECK(cuMemFree(dx));
  CU_CHECK(cuMemFree(dy));
  CU_CHECK(cuModuleUnload(mod));
  pass("drv_nvrtc");
  return 0;
}
