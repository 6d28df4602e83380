// rgpu-nvcc-flags: -lcuda
// JIT linking through the driver API, as PTX JIT programs and Numba do it:
// cuLinkCreate with log buffers, their sizes, the wall time and verbose
// logging; PTX added from memory (cuLinkAddData) and from a file
// (cuLinkAddFile); cuLinkComplete's image loaded with cuModuleLoadData and
// its kernel run and checked; the image stays valid until cuLinkDestroy.
// Bad input: a missing file, and broken PTX (refused at add, link or load,
// depending on where the driver compiles it: the error is the same).
#include <vector>

#include "rgpu_drv_check.h"

static void run_saxpy(CUmodule m, const char *how) {
  CUfunction saxpy;
  CU_CHECK(cuModuleGetFunction(&saxpy, m, "saxpy"));
  const int n = 4096;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; i++) x[i] = (float)i, y[i] = 3.0f;
  CUdeviceptr dx, dy;
  CU_CHECK(cuMemAlloc(&dx, n * sizeof(float)));
  CU_CHECK(cuMemAlloc(&dy, n * sizeof(float)));
  CU_CHECK(cuMemcpyHtoD(dx, x.data(), n * sizeof(float)));
  CU_CHECK(cuMemcpyHtoD(dy, y.data(), n * sizeof(float)));
  float a = 0.5f;
  int nn = n;
  void *args[] = {&a, &dx, &dy, &nn};
  CU_CHECK(cuLaunchKernel(saxpy, n / 256, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr));
  CU_CHECK(cuMemcpyDtoH(y.data(), dy, n * sizeof(float)));
  for (int i = 0; i < n; i++) EXPECT(y[i] == 0.5f * (float)i + 3.0f);
  printf("%s: saxpy y[4095] = %.1f\n", how, y[n - 1]);
  CU_CHECK(cuMemFree(dx));
  CU_CHECK(cuMemFree(dy));
}

int main() {
  CUdevice dev;
  drv_setup(&dev);
  size_t ptx_len = 0;
  char *ptx = (char *)read_whole(beside_exe("drv_kernels.ptx"), &ptx_len);

  // From memory, with the logs and the wall time.
  char info[8192], errlog[8192];
  info[0] = errlog[0] = 0;
  CUjit_option opts[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
                         CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_WALL_TIME, CU_JIT_LOG_VERBOSE};
  void *vals[] = {info, (void *)(uintptr_t)sizeof info, errlog, (void *)(uintptr_t)sizeof errlog, nullptr,
                  (void *)(uintptr_t)1};
  CUlinkState ls;
  CU_CHECK(cuLinkCreate(6, opts, vals, &ls));
  CU_CHECK(cuLinkAddData(ls, CU_JIT_INPUT_PTX, ptx, ptx_len + 1, "drv_kernels.ptx", 0, nullptr, nullptr));
  void *image = nullptr;
  size_t image_len = 0;
  CU_CHECK(cuLinkComplete(ls, &image, &image_len));
  EXPECT(image && image_len > 0);
  size_t filled = (size_t)(uintptr_t)vals[1];
  if (getenv("RGPU_E2E_PROBE"))
    printf("probe: info log size written back %zu, strlen %zu\n", filled, strlen(info));
  EXPECT(filled < sizeof info && strlen(info) == filled); // filled: the text without its NUL
  float wall;
  memcpy(&wall, &vals[4], sizeof wall);
  EXPECT(wall >= 0.0f);
  printf("linked from memory: image ok, info log %s\n", info[0] ? "filled" : "empty");
  CUmodule m1;
  CU_CHECK(cuModuleLoadData(&m1, image));
  run_saxpy(m1, "linked from memory");
  CU_CHECK(cuLinkDestroy(ls));
  CU_CHECK(cuModuleUnload(m1));

  // From a file, no options.
  CU_CHECK(cuLinkCreate(0, nullptr, nullptr, &ls));
  CU_EXPECT_ERR(cuLinkAddFile(ls, CU_JIT_INPUT_PTX, "/nonexistent/rgpu.ptx", 0, nullptr, nullptr),
                CUDA_ERROR_FILE_NOT_FOUND);
  CU_CHECK(cuLinkAddFile(ls, CU_JIT_INPUT_PTX, beside_exe("drv_kernels.ptx"), 0, nullptr, nullptr));
  CU_CHECK(cuLinkComplete(ls, &image, &image_len));
  CUmodule m2;
  CU_CHECK(cuModuleLoadData(&m2, image));
  run_saxpy(m2, "linked from a file");
  CU_CHECK(cuModuleUnload(m2));
  CU_CHECK(cuLinkDestroy(ls));

  // Broken PTX: refused, at whichever step compiles it.
  const char broken[] = ".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry k( {\n";
  CU_CHECK(cuLinkCreate(0, nullptr, nullptr, &ls));
  CUresult r = cuLinkAddData(ls, CU_JIT_INPUT_PTX, (void *)broken, sizeof broken, "broken.ptx", 0, nullptr,
                             nullptr);
  if (r == CUDA_SUCCESS) r = cuLinkComplete(ls, &image, &image_len);
  if (r == CUDA_SUCCESS) {
    CUmodule bad;
    r = cuModuleLoadData(&bad, image);
  }
  printf("broken PTX refused: %s\n", cu_name(r));
  EXPECT(r == CUDA_ERROR_INVALID_PTX);
  CU_CHECK(cuLinkDestroy(ls));

  std::free(ptx);
  printf("PASS drv_link\n");
  return 0;
}
