// rgpu-nvcc-flags: -lcuda
// The runtime's libraries (cudaLibrary*, CUDA 12) and registered kernels
// used through the driver (issue 14):
// - cudaLibraryLoadFromFile (PTX) and cudaLibraryLoadData (a fatbin in
//   memory), kernel counts and enumeration, a library global;
// - a library's cudaKernel_t wherever the runtime takes a kernel:
//   cudaLaunchKernel, cudaLaunchKernelExC, stream capture, cudaFuncGet/
//   SetAttribute(s), cudaFuncGetName, cudaFuncGetParamInfo, the occupancy
//   calculator, cudaKernelSetAttributeForDevice;
// - cudaGetFuncBySymbol's CUfunction and cudaGetKernel's handle launched
//   by cuLaunchKernel (CUTLASS's cluster launcher does this), a large
//   dynamic shared memory opt-in made through the runtime honoured there.
// Every launch's result is checked.
#include <vector>

#include "rgpu_check.h"
#include "rgpu_drv_check.h"

__global__ void scale(unsigned *p, unsigned k, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) p[i] *= k;
}

// Reverses n <= blockDim.x values through dynamic shared memory that is
// larger than the 48 KiB default (the opt-in path).
__global__ void reverse_big_smem(int *p, int n) {
  extern __shared__ int tile[];
  int i = threadIdx.x;
  if (i < n) tile[i] = p[i];
  tile[16383] = 0;  // touches the far end of 64 KiB
  __syncthreads();
  if (i < n) p[i] = tile[n - 1 - i];
}

static void check_saxpy(const float *dy, const std::vector<float> &want) {
  std::vector<float> y(want.size());
  CHECK(cudaMemcpy(y.data(), dy, y.size() * sizeof(float), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < y.size(); i++) EXPECT(y[i] == want[i]);
}

static void check_scaled(const unsigned *d, size_t n, unsigned factor) {
  std::vector<unsigned> h(n);
  CHECK(cudaMemcpy(h.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++) EXPECT(h[i] == (unsigned)(i + 1) * factor);
}

static void library_kernels() {
  cudaLibrary_t lib_ptx, lib_fat;
  CHECK(cudaLibraryLoadFromFile(&lib_ptx, beside_exe("drv_kernels.ptx"), nullptr, nullptr, 0,
                                nullptr, nullptr, 0));
  size_t fat_len = 0;
  void *fatbin = read_whole(beside_exe("drv_kernels.fatbin"), &fat_len);
  CHECK(cudaLibraryLoadData(&lib_fat, fatbin, nullptr, nullptr, 0, nullptr, nullptr, 0));
  std::free(fatbin);

  // Kernels by count and enumeration; names through the runtime.
  unsigned count = 0;
  CHECK(cudaLibraryGetKernelCount(&count, lib_fat));
  EXPECT(count == 3);
  cudaKernel_t all[3] = {};
  CHECK(cudaLibraryEnumerateKernels(all, 3, lib_fat));
  int bits = 0;
  for (cudaKernel_t k : all) {
    const char *name = nullptr;
    CHECK(cudaFuncGetName(&name, (const void *)k));
    bits |= drv_kernels_bit(name);
  }
  EXPECT(bits == 7);
  printf("library kernels enumerated: %u\n", count);

  cudaKernel_t k_saxpy;
  CHECK(cudaLibraryGetKernel(&k_saxpy, lib_ptx, "saxpy"));
  EXPECT_ERR(cudaLibraryGetKernel(&k_saxpy, lib_ptx, "no_such_kernel"), cudaErrorSymbolNotFound);
  EXPECT_ERR(cudaGetLastError(), cudaErrorSymbolNotFound);
  CHECK(cudaLibraryGetKernel(&k_saxpy, lib_ptx, "saxpy"));

  const int n = 3000;
  std::vector<float> x(n), want(n);
  for (int i = 0; i < n; i++) {
    x[i] = (float)(i % 97);
    want[i] = (float)i;
  }
  float *dx, *dy;
  CHECK(cudaMalloc(&dx, n * sizeof(float)));
  CHECK(cudaMalloc(&dy, n * sizeof(float)));
  CHECK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dy, want.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));

  // cudaLaunchKernel with the library's kernel.
  float a = 2.0f;
  int nn = n;
  void *args[] = {&a, &dx, &dy, &nn};
  CHECK(cudaLaunchKernel((const void *)k_saxpy, dim3((n + 255) / 256), dim3(256), args, 0, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; i++) want[i] += 2.0f * x[i];
  check_saxpy(dy, want);
  printf("cudaLaunchKernel(library kernel): ok\n");

  // cudaLaunchKernelExC.
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((n + 127) / 128);
  cfg.blockDim = dim3(128);
  cfg.stream = s;
  a = 0.5f;
  CHECK(cudaLaunchKernelExC(&cfg, (const void *)k_saxpy, args));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; i++) want[i] += 0.5f * x[i];
  check_saxpy(dy, want);
  printf("cudaLaunchKernelExC(library kernel): ok\n");

  // Captured into a graph and replayed twice.
  cudaGraph_t g;
  cudaGraphExec_t ge;
  a = 1.0f;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaLaunchKernel((const void *)k_saxpy, dim3((n + 255) / 256), dim3(256), args, 0, s));
  CHECK(cudaStreamEndCapture(s, &g));
  CHECK(cudaGraphInstantiate(&ge, g, 0));
  CHECK(cudaGraphLaunch(ge, s));
  CHECK(cudaGraphLaunch(ge, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; i++) want[i] += 2.0f * x[i];
  check_saxpy(dy, want);
  CHECK(cudaGraphExecDestroy(ge));
  CHECK(cudaGraphDestroy(g));
  printf("captured library kernel: ok\n");

  // An explicit graph's kernel node made from the library's kernel.
  cudaKernelNodeParams kp = {};
  kp.func = (void *)k_saxpy;
  kp.gridDim = dim3((n + 255) / 256);
  kp.blockDim = dim3(256);
  kp.kernelParams = args;
  a = 4.0f;
  cudaGraphNode_t node;
  CHECK(cudaGraphCreate(&g, 0));
  CHECK(cudaGraphAddKernelNode(&node, g, nullptr, 0, &kp));
  // Its parameters cannot be read back (CUDA: cudaErrorInvalidDeviceFunction
  // for a node of a library kernel, measured on the H100).
  cudaKernelNodeParams back = {};
  EXPECT_ERR(cudaGraphKernelNodeGetParams(node, &back), cudaErrorInvalidDeviceFunction);
  (void)cudaGetLastError();
  CHECK(cudaGraphInstantiate(&ge, g, 0));
  CHECK(cudaGraphLaunch(ge, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; i++) want[i] += 4.0f * x[i];
  check_saxpy(dy, want);
  CHECK(cudaGraphExecDestroy(ge));
  CHECK(cudaGraphDestroy(g));
  printf("graph kernel node of a library kernel: ok\n");

  // Attributes, parameters, occupancy.
  cudaFuncAttributes fa;
  CHECK(cudaFuncGetAttributes(&fa, (const void *)k_saxpy));
  EXPECT(fa.maxThreadsPerBlock >= 256);
  EXPECT(fa.numRegs >= 0);
  CHECK(cudaFuncSetAttribute((const void *)k_saxpy, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             1024));
  CHECK(cudaFuncGetAttributes(&fa, (const void *)k_saxpy));
  EXPECT(fa.maxDynamicSharedSizeBytes == 1024);
  CHECK(cudaKernelSetAttributeForDevice(k_saxpy, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        2048, 0));
  CHECK(cudaFuncGetAttributes(&fa, (const void *)k_saxpy));
  EXPECT(fa.maxDynamicSharedSizeBytes == 2048);
  int ndev = 0;
  CHECK(cudaGetDeviceCount(&ndev));
  EXPECT(cudaKernelSetAttributeForDevice(k_saxpy, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         2048, ndev + 7) != cudaSuccess);
  (void)cudaGetLastError();
  size_t off = 0, size = 0;
  CHECK(cudaFuncGetParamInfo((const void *)k_saxpy, 0, &off, &size));
  EXPECT(off == 0 && size == 4);
  CHECK(cudaFuncGetParamInfo((const void *)k_saxpy, 1, &off, &size));
  EXPECT(off == 8 && size == 8);
  CHECK(cudaFuncGetParamInfo((const void *)k_saxpy, 3, &off, &size));
  EXPECT(off == 24 && size == 4);
  int blocks = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, (const void *)k_saxpy, 128, 0));
  EXPECT(blocks >= 1);
  cudaLaunchConfig_t occ = {};
  occ.gridDim = dim3(16);
  occ.blockDim = dim3(128);
  int csize = 0;
  cudaError_t ce = cudaOccupancyMaxPotentialClusterSize(&csize, (const void *)k_saxpy, &occ);
  EXPECT(ce == cudaErrorNotSupported || (ce == cudaSuccess && csize >= 1));
  (void)cudaGetLastError();
  CHECK(cudaFuncSetCacheConfig((const void *)k_saxpy, cudaFuncCachePreferL1));
  printf("library kernel attributes: ok\n");

  // A library global, read and written by the runtime, used by a kernel.
  void *gp = nullptr;
  size_t gbytes = 0;
  CHECK(cudaLibraryGetGlobal(&gp, &gbytes, lib_fat, "g_counter"));
  EXPECT(gp != nullptr && gbytes == sizeof(int));
  int counter = 0;
  CHECK(cudaMemcpy(&counter, gp, sizeof counter, cudaMemcpyDeviceToHost));
  EXPECT(counter == 5);
  counter = 40;
  CHECK(cudaMemcpy(gp, &counter, sizeof counter, cudaMemcpyHostToDevice));
  cudaKernel_t k_add;
  CHECK(cudaLibraryGetKernel(&k_add, lib_fat, "add_counter"));
  int *dout;
  const int m = 500;
  CHECK(cudaMalloc(&dout, m * sizeof(int)));
  int mm = m;
  void *add_args[] = {&dout, &mm};
  CHECK(cudaLaunchKernel((const void *)k_add, dim3((m + 63) / 64), dim3(64), add_args, 0, s));
  std::vector<int> out(m);
  CHECK(cudaMemcpyAsync(out.data(), dout, m * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < m; i++) EXPECT(out[i] == i + 40);
  printf("library global: ok\n");

  // A bad image is refused at the call or at its first use: with lazy
  // loading (CUDA 13's default) the H100 takes it at cudaLibraryLoadData
  // and fails when a kernel is asked for; rgpu refuses it at the load.
  cudaLibrary_t bad;
  cudaError_t e = cudaLibraryLoadData(&bad, "this is not PTX", nullptr, nullptr, 0, nullptr,
                                      nullptr, 0);
  if (e == cudaSuccess) {
    cudaKernel_t k;
    e = cudaLibraryGetKernel(&k, bad, "k_add");
    (void)cudaLibraryUnload(bad);
  }
  EXPECT(e != cudaSuccess);
  (void)cudaGetLastError();
  printf("bad library image refused (at the load or its first use)\n");

  CHECK(cudaFree(dout));
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dy));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaLibraryUnload(lib_ptx));
  CHECK(cudaLibraryUnload(lib_fat));
}

static void registered_kernels_through_driver() {
  const size_t n = 10000;
  std::vector<unsigned> h(n);
  for (size_t i = 0; i < n; i++) h[i] = (unsigned)(i + 1);
  unsigned *d;
  CHECK(cudaMalloc(&d, n * sizeof(unsigned)));
  CHECK(cudaMemcpy(d, h.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));

  // cudaGetFuncBySymbol: a CUfunction the driver launches.
  cudaFunction_t fn = nullptr;
  CHECK(cudaGetFuncBySymbol(&fn, (const void *)scale));
  EXPECT(fn != nullptr);
  const char *rt_name = nullptr, *drv_name = nullptr;
  CHECK(cudaFuncGetName(&rt_name, (const void *)scale));
  CU_CHECK(cuFuncGetName(&drv_name, (CUfunction)fn));
  EXPECT(std::strcmp(rt_name, drv_name) == 0);
  int max_threads = 0;
  CU_CHECK(cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                              (CUfunction)fn));
  EXPECT(max_threads >= 256);
  unsigned k = 3;
  size_t nn = n;
  void *args[] = {&d, &k, &nn};
  CU_CHECK(cuLaunchKernel((CUfunction)fn, (unsigned)((n + 255) / 256), 1, 1, 256, 1, 1, 0,
                          (CUstream)s, args, nullptr));
  CHECK(cudaStreamSynchronize(s));
  check_scaled(d, n, 3);
  printf("cudaGetFuncBySymbol + cuLaunchKernel: ok\n");

  // cudaGetKernel's handle as a CUkernel and as a CUfunction.
  cudaKernel_t kern = nullptr;
  CHECK(cudaGetKernel(&kern, (const void *)scale));
  k = 5;
  CU_CHECK(cuLaunchKernel((CUfunction)kern, (unsigned)((n + 127) / 128), 1, 1, 128, 1, 1, 0,
                          (CUstream)s, args, nullptr));
  CUfunction kf = nullptr;
  CU_CHECK(cuKernelGetFunction(&kf, (CUkernel)kern));
  k = 7;
  CU_CHECK(cuLaunchKernel(kf, (unsigned)((n + 255) / 256), 1, 1, 256, 1, 1, 0, (CUstream)s, args,
                          nullptr));
  CHECK(cudaStreamSynchronize(s));
  check_scaled(d, n, 3 * 5 * 7);
  const char *kname = nullptr;
  CU_CHECK(cuKernelGetName(&kname, (CUkernel)kern));
  EXPECT(std::strcmp(kname, rt_name) == 0);
  printf("cudaGetKernel handle through the driver: ok\n");

  // A runtime opt-in to 64 KiB of dynamic shared memory, then a driver
  // launch that uses it.
  int dev = 0, optin = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (optin >= 65536) {
    CHECK(cudaFuncSetAttribute((const void *)reverse_big_smem,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, 65536));
    cudaFunction_t rfn = nullptr;
    CHECK(cudaGetFuncBySymbol(&rfn, (const void *)reverse_big_smem));
    const int m = 256;
    std::vector<int> v(m);
    for (int i = 0; i < m; i++) v[i] = i * 3;
    int *dv;
    CHECK(cudaMalloc(&dv, m * sizeof(int)));
    CHECK(cudaMemcpy(dv, v.data(), m * sizeof(int), cudaMemcpyHostToDevice));
    int mm = m;
    void *rargs[] = {&dv, &mm};
    CU_CHECK(cuLaunchKernel((CUfunction)rfn, 1, 1, 1, m, 1, 1, 65536, (CUstream)s, rargs, nullptr));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(v.data(), dv, m * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < m; i++) EXPECT(v[i] == (m - 1 - i) * 3);
    CHECK(cudaFree(dv));
    printf("runtime shared memory opt-in in a driver launch: ok\n");
  } else {
    printf("runtime shared memory opt-in in a driver launch: not offered\n");
  }

  CHECK(cudaFree(d));
  CHECK(cudaStreamDestroy(s));
}

int main() {
  CHECK(cudaSetDevice(0));
  library_kernels();
  registered_kernels_through_driver();
  CHECK(cudaDeviceSynchronize());
  EXPECT(cudaGetLastError() == cudaSuccess);
  pass("runtime_library");
  return 0;
}
