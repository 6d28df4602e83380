// rgpu-nvcc-flags: -lcuda
// Several GPUs through the driver API (issue 19): a primary context per
// device, memory of each, cuDeviceCanAccessPeer, cuCtxEnablePeerAccess /
// cuCtxDisablePeerAccess and their errors, cuMemcpyPeer and
// cuMemcpyPeerAsync both directions (checked byte for byte), and
// CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL of each device's memory.  With fewer
// than two devices it prints a SKIP line and exits 0.
#include <vector>

#include "rgpu_drv_check.h"

static unsigned char pattern(size_t i, int seed) { return (unsigned char)(i * 13 + seed * 101); }

int main() {
  CU_CHECK(cuInit(0));
  int count = 0;
  CU_CHECK(cuDeviceGetCount(&count));
  if (count < 2) {
    std::printf("SKIP drv_multi_device: needs 2 devices\n");
    return 0;
  }
  std::printf("devices >= 2\n");
  CUdevice dev[2];
  CUcontext ctx[2];
  CUdeviceptr mem[2], out[2];
  const size_t n = 300007;
  std::vector<unsigned char> h(n);
  for (int d = 0; d < 2; d++) {
    CU_CHECK(cuDeviceGet(&dev[d], d));
    CU_CHECK(cuDevicePrimaryCtxRetain(&ctx[d], dev[d]));
    CU_CHECK(cuCtxSetCurrent(ctx[d]));
    CU_CHECK(cuMemAlloc(&mem[d], n));
    CU_CHECK(cuMemAlloc(&out[d], n));
    for (size_t i = 0; i < n; i++) h[i] = pattern(i, d);
    CU_CHECK(cuMemcpyHtoD(mem[d], h.data(), n));
    int ordinal = -1;
    CU_CHECK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, mem[d]));
    EXPECT(ordinal == d);
  }
  std::printf("memory of each device ok\n");

  int can_self = -1, can01 = -1;
  CU_CHECK(cuDeviceCanAccessPeer(&can_self, dev[0], dev[0]));
  EXPECT(can_self == 0);
  CU_CHECK(cuDeviceCanAccessPeer(&can01, dev[0], dev[1]));
  CU_CHECK(cuCtxSetCurrent(ctx[0]));
  CU_EXPECT_ERR(cuCtxEnablePeerAccess(ctx[0], 0), CUDA_ERROR_INVALID_DEVICE);
  CU_EXPECT_ERR(cuCtxEnablePeerAccess(ctx[1], 1), CUDA_ERROR_INVALID_VALUE);
  if (can01) {
    CU_CHECK(cuCtxEnablePeerAccess(ctx[1], 0));
    CU_EXPECT_ERR(cuCtxEnablePeerAccess(ctx[1], 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
    CU_CHECK(cuCtxDisablePeerAccess(ctx[1]));
    CU_EXPECT_ERR(cuCtxDisablePeerAccess(ctx[1]), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
  }
  std::printf("peer access ok\n");

  CU_CHECK(cuMemcpyPeer(out[1], ctx[1], mem[0], ctx[0], n));
  CU_CHECK(cuMemcpyPeer(out[0], ctx[0], mem[1], ctx[1], n));
  for (int d = 0; d < 2; d++) {
    CU_CHECK(cuMemcpyDtoH(h.data(), out[d], n));
    for (size_t i = 0; i < n; i++) EXPECT(h[i] == pattern(i, 1 - d));
  }
  std::printf("cuMemcpyPeer both directions ok\n");

  CUstream s;
  CU_CHECK(cuCtxSetCurrent(ctx[1]));
  CU_CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CU_CHECK(cuMemsetD8Async(out[0], 0, n, s));
  CU_CHECK(cuMemsetD8Async(out[1], 0, n, s));
  CU_CHECK(cuMemcpyPeerAsync(out[0] + 5, ctx[0], mem[1] + 3, ctx[1], n - 5, s));
  CU_CHECK(cuMemcpyPeerAsync(out[1], ctx[1], mem[0], ctx[0], n, s));
  CU_CHECK(cuMemcpyDtoHAsync(h.data(), out[0], n, s));
  CU_CHECK(cuStreamSynchronize(s));
  for (size_t i = 0; i < 5; i++) EXPECT(h[i] == 0);
  for (size_t i = 5; i < n; i++) EXPECT(h[i] == pattern(i - 2, 1));
  CU_CHECK(cuMemcpyDtoH(h.data(), out[1], n));
  for (size_t i = 0; i < n; i++) EXPECT(h[i] == pattern(i, 0));
  CU_EXPECT_ERR(cuMemcpyPeer(out[1], nullptr, mem[0], ctx[0], n), CUDA_ERROR_INVALID_CONTEXT);
  std::printf("cuMemcpyPeerAsync both directions ok\n");

  CU_CHECK(cuStreamDestroy(s));
  for (int d = 0; d < 2; d++) {
    CU_CHECK(cuCtxSetCurrent(ctx[d]));
    CU_CHECK(cuMemFree(mem[d]));
    CU_CHECK(cuMemFree(out[d]));
    CU_CHECK(cuDevicePrimaryCtxRelease(dev[d]));
  }
  pass("drv_multi_device");
  return 0;
}
