// rgpu-nvcc-flags: -lcuda
// CUDA 13 device queries and the calls around them, through the runtime and
// the driver API: the 1D linear texture width per format, the atomic
// capabilities of the host link and of a device pair, cluster occupancy,
// resetting persisting L2 lines, the memory pools of a location, the list
// of valid devices and a texture's resource view.  Every line printed is
// the same on any GPU (no raw numbers: widths, capability masks and cluster
// counts differ between devices), and cudaErrorNotSupported is accepted
// where a device may lack the feature, so the output matches a native run.
#include <algorithm>
#include <cuda.h>
#include <vector>
#include "rgpu_drv_check.h"

__global__ void fill(int *p, int v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v + i;
}

__global__ void sample(cudaTextureObject_t t, float *out, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x < w && y < h) out[y * w + x] = tex2D<float>(t, x + 0.5f, y + 0.5f);
}

// cudaErrorNotSupported is an answer a device may give: the thread's last
// error is cleared so that later checks see only real failures.
static bool supported(cudaError_t e, const char *what) {
  if (e == cudaErrorNotSupported) {
    cudaGetLastError();
    return false;
  }
  if (e != cudaSuccess) {
    std::fprintf(stderr, "FAIL %s -> %d %s\n", what, (int)e, cudaGetErrorName(e));
    std::exit(1);
  }
  return true;
}

#define EXPECT_ERR_CLEAR(call, want) \
  do {                               \
    EXPECT_ERR(call, want);          \
    cudaGetLastError();              \
  } while (0)

// A kernel on device 0 still computes what it should.
static void check_kernel(int v) {
  const int n = 1000;
  int *d = nullptr;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  fill<<<(n + 127) / 128, 128>>>(d, v, n);
  CHECK(cudaGetLastError());
  std::vector<int> h(n);
  CHECK(cudaMemcpy(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++) EXPECT(h[i] == v + i);
  CHECK(cudaFree(d));
}

// Before anything makes a context: the list of devices CUDA may use.
static void valid_devices(int ndev) {
  EXPECT_ERR_CLEAR(cudaSetValidDevices(nullptr, 1), cudaErrorInvalidValue);
  int bad[1] = {ndev};
  EXPECT_ERR_CLEAR(cudaSetValidDevices(bad, 1), cudaErrorInvalidDevice);
  bad[0] = -1;
  EXPECT_ERR_CLEAR(cudaSetValidDevices(bad, 1), cudaErrorInvalidDevice);
  std::vector<int> too_long(ndev + 1);
  for (int i = 0; i <= ndev; i++) too_long[i] = i % ndev;
  EXPECT_ERR_CLEAR(cudaSetValidDevices(too_long.data(), ndev + 1), cudaErrorInvalidValue);
  int twice[2] = {0, 0};
  EXPECT_ERR_CLEAR(cudaSetValidDevices(twice, 2), cudaErrorInvalidValue);
  std::vector<int> all(ndev);
  for (int i = 0; i < ndev; i++) all[i] = i;
  CHECK(cudaSetValidDevices(all.data(), ndev));
  int one[1] = {0};
  CHECK(cudaSetValidDevices(one, 1));
  CHECK(cudaSetValidDevices(nullptr, 0));  // back to CUDA's default list
  int dev = -1;
  CHECK(cudaGetDevice(&dev));
  EXPECT(dev == 0);
  check_kernel(7);
  std::printf("valid devices: checked and set\n");
}

static void texture_width() {
  cudaChannelFormatDesc f1 = cudaCreateChannelDesc<float>();
  cudaChannelFormatDesc f4 = cudaCreateChannelDesc<float4>();
  cudaChannelFormatDesc u8 = cudaCreateChannelDesc<unsigned char>();
  size_t w1 = 0, w4 = 0, w8 = 0;
  CHECK(cudaDeviceGetTexture1DLinearMaxWidth(&w1, &f1, 0));
  CHECK(cudaDeviceGetTexture1DLinearMaxWidth(&w4, &f4, 0));
  CHECK(cudaDeviceGetTexture1DLinearMaxWidth(&w8, &u8, 0));
  // GPUs take 2^27 elements and more of any format; a million is a floor
  // no device CUDA 13 runs on goes below.
  EXPECT(w1 >= (1u << 20) && w4 >= (1u << 20) && w8 >= (1u << 20));
  size_t wd = 0;
  CU_CHECK(cuDeviceGetTexture1DLinearMaxWidth(&wd, CU_AD_FORMAT_FLOAT, 1, 0));
  EXPECT(wd == w1);
  CU_CHECK(cuDeviceGetTexture1DLinearMaxWidth(&wd, CU_AD_FORMAT_FLOAT, 4, 0));
  EXPECT(wd == w4);
  std::printf("1D linear texture width: plausible, the same through the driver\n");
}

static const cudaAtomicOperation kOps[] = {
    cudaAtomicOperationIntegerAdd, cudaAtomicOperationIntegerMin,
    cudaAtomicOperationIntegerMax, cudaAtomicOperationIntegerIncrement,
    cudaAtomicOperationIntegerDecrement, cudaAtomicOperationAnd,
    cudaAtomicOperationOr, cudaAtomicOperationXOR,
    cudaAtomicOperationExchange, cudaAtomicOperationCAS,
    cudaAtomicOperationFloatAdd, cudaAtomicOperationFloatMin,
    cudaAtomicOperationFloatMax};
static const unsigned kNops = sizeof kOps / sizeof kOps[0];
static const unsigned kAllCaps = 0x7f;  // the seven cudaAtomicCapability bits

// Every entry was written, with known capability bits only.
static void expect_filled(const unsigned *caps) {
  for (unsigned i = 0; i < kNops; i++) EXPECT((caps[i] & ~kAllCaps) == 0);
}

static void atomic_capabilities(int ndev) {
  unsigned caps[kNops];
  std::fill(caps, caps + kNops, ~0u);
  if (supported(cudaDeviceGetHostAtomicCapabilities(caps, kOps, kNops, 0), "host atomics")) {
    expect_filled(caps);
    // The driver API gives the same answer; a list of one, the same entry.
    unsigned dcaps[kNops];
    std::fill(dcaps, dcaps + kNops, ~0u);
    CU_CHECK(cuDeviceGetHostAtomicCapabilities(dcaps, (const CUatomicOperation *)kOps, kNops, 0));
    for (unsigned i = 0; i < kNops; i++) EXPECT(dcaps[i] == caps[i]);
    unsigned one = ~0u;
    CHECK(cudaDeviceGetHostAtomicCapabilities(&one, &kOps[9], 1, 0));
    EXPECT(one == caps[9]);
  }
  // CUDA's documented refusals: no operations, an unknown one, no device.
  EXPECT_ERR_CLEAR(cudaDeviceGetHostAtomicCapabilities(caps, kOps, 0, 0), cudaErrorInvalidValue);
  cudaAtomicOperation unknown = (cudaAtomicOperation)99;
  EXPECT_ERR_CLEAR(cudaDeviceGetHostAtomicCapabilities(caps, &unknown, 1, 0),
                   cudaErrorInvalidValue);
  EXPECT_ERR_CLEAR(cudaDeviceGetHostAtomicCapabilities(caps, kOps, kNops, ndev),
                   cudaErrorInvalidDevice);
  std::printf("host atomic capabilities: filled or not supported, refusals as documented\n");

  // A device is never its own peer.
  EXPECT_ERR_CLEAR(cudaDeviceGetP2PAtomicCapabilities(caps, kOps, kNops, 0, 0),
                   cudaErrorInvalidDevice);
  if (ndev >= 2) {
    std::fill(caps, caps + kNops, ~0u);
    if (supported(cudaDeviceGetP2PAtomicCapabilities(caps, kOps, kNops, 0, 1), "p2p atomics"))
      expect_filled(caps);
  }
  std::printf("peer atomic capabilities: filled or not supported, no device its own peer\n");
}

static void clusters() {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(16);
  cfg.blockDim = dim3(128);
  int size = 0;
  CHECK(cudaOccupancyMaxPotentialClusterSize(&size, fill, &cfg));
  EXPECT(size >= 1);
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = 1;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int singles = 0;
  CHECK(cudaOccupancyMaxActiveClusters(&singles, fill, &cfg));
  EXPECT(singles >= 1);
  if (size > 1) {
    attr.val.clusterDim.x = (unsigned)size;
    cfg.gridDim = dim3(size * 4);
    int n = 0;
    CHECK(cudaOccupancyMaxActiveClusters(&n, fill, &cfg));
    EXPECT(n >= 1);
  }
  // The driver API names the same kernel by its CUfunction.
  cudaFunction_t fn = nullptr;
  CHECK(cudaGetFuncBySymbol(&fn, (const void *)fill));
  CUlaunchConfig dcfg = {};
  dcfg.gridDimX = 16, dcfg.gridDimY = 1, dcfg.gridDimZ = 1;
  dcfg.blockDimX = 128, dcfg.blockDimY = 1, dcfg.blockDimZ = 1;
  int dsize = 0;
  CU_CHECK(cuOccupancyMaxPotentialClusterSize(&dsize, (CUfunction)fn, &dcfg));
  EXPECT(dsize == size);
  CUlaunchAttribute dattr = {};
  dattr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  dattr.value.clusterDim.x = dattr.value.clusterDim.y = dattr.value.clusterDim.z = 1;
  dcfg.attrs = &dattr;
  dcfg.numAttrs = 1;
  int dsingles = 0;
  CU_CHECK(cuOccupancyMaxActiveClusters(&dsingles, (CUfunction)fn, &dcfg));
  EXPECT(dsingles == singles);
  std::printf("cluster occupancy: size and count plausible, the same through the driver\n");
}

static void persisting_l2() {
  check_kernel(1);
  bool ok = supported(cudaCtxResetPersistingL2Cache(), "cudaCtxResetPersistingL2Cache");
  CUresult r = cuCtxResetPersistingL2Cache();
  EXPECT(r == (ok ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED));
  check_kernel(2);
  std::printf("persisting L2 reset: done or not supported, kernels still right\n");
}

static void mem_pools() {
  cudaMemPool_t def = nullptr, cur = nullptr, got = nullptr;
  CHECK(cudaDeviceGetDefaultMemPool(&def, 0));
  CHECK(cudaDeviceGetMemPool(&cur, 0));
  cudaMemLocation loc = {};
  loc.type = cudaMemLocationTypeDevice;
  loc.id = 0;
  CHECK(cudaMemGetDefaultMemPool(&got, &loc, cudaMemAllocationTypePinned));
  EXPECT(got == def);
  CHECK(cudaMemGetMemPool(&got, &loc, cudaMemAllocationTypePinned));
  EXPECT(got == cur);

  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location = loc;
  cudaMemPool_t pool = nullptr;
  CHECK(cudaMemPoolCreate(&pool, &props));
  CHECK(cudaMemSetMemPool(&loc, cudaMemAllocationTypePinned, pool));
  CHECK(cudaMemGetMemPool(&got, &loc, cudaMemAllocationTypePinned));
  EXPECT(got == pool);
  CHECK(cudaDeviceGetMemPool(&got, 0));
  EXPECT(got == pool);
  CHECK(cudaMemGetDefaultMemPool(&got, &loc, cudaMemAllocationTypePinned));
  EXPECT(got == def);

  // cudaMallocAsync takes the current pool: the new one.
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  const int n = 1 << 18;
  int *d = nullptr;
  CHECK(cudaMallocAsync(&d, n * sizeof(int), s));
  size_t used = 0;
  CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  EXPECT(used >= n * sizeof(int));
  fill<<<n / 256, 256, 0, s>>>(d, 3, n);
  CHECK(cudaGetLastError());
  std::vector<int> h(n);
  CHECK(cudaMemcpyAsync(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaFreeAsync(d, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; i++) EXPECT(h[i] == 3 + i);
  CHECK(cudaStreamDestroy(s));

  // A pool of another type, or a location CUDA does not know: refused.
  EXPECT_ERR_CLEAR(cudaMemSetMemPool(&loc, cudaMemAllocationTypeManaged, pool),
                   cudaErrorInvalidValue);
  cudaMemLocation odd = {};
  odd.type = (cudaMemLocationType)77;
  EXPECT_ERR_CLEAR(cudaMemGetDefaultMemPool(&got, &odd, cudaMemAllocationTypePinned),
                   cudaErrorNotSupported); // as on the H100
  CHECK(cudaMemSetMemPool(&loc, cudaMemAllocationTypePinned, def));
  CHECK(cudaMemGetMemPool(&got, &loc, cudaMemAllocationTypePinned));
  EXPECT(got == def);
  CHECK(cudaMemPoolDestroy(pool));

  // Host pools: a device may have them or not.
  cudaMemLocation host = {};
  host.type = cudaMemLocationTypeHost;
  got = nullptr;
  if (supported(cudaMemGetDefaultMemPool(&got, &host, cudaMemAllocationTypePinned), "host pool"))
    EXPECT(got != nullptr);
  std::printf("memory pools by location: device pools round-trip, host pools answered\n");
}

static void resource_view() {
  const int w = 64, h = 32;
  cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
  cudaArray_t arr = nullptr;
  CHECK(cudaMallocArray(&arr, &fd, w, h));
  std::vector<float> src(w * h);
  for (int i = 0; i < w * h; i++) src[i] = (float)(i * 3 + 1);
  CHECK(cudaMemcpy2DToArray(arr, 0, 0, src.data(), w * sizeof(float), w * sizeof(float), h,
                            cudaMemcpyHostToDevice));
  cudaResourceDesc rd = {};
  rd.resType = cudaResourceTypeArray;
  rd.res.array.array = arr;
  cudaTextureDesc td = {};
  td.addressMode[0] = td.addressMode[1] = cudaAddressModeClamp;
  td.filterMode = cudaFilterModePoint;
  td.readMode = cudaReadModeElementType;

  // Without a view: CUDA documents cudaErrorInvalidValue for the query.
  cudaTextureObject_t plain = 0;
  CHECK(cudaCreateTextureObject(&plain, &rd, &td, nullptr));
  cudaResourceViewDesc got;
  std::memset(&got, 0xab, sizeof got);
  cudaError_t e = cudaGetTextureObjectResourceViewDesc(&got, plain);
  if (e == cudaSuccess) {
    cudaResourceViewDesc zero = {};
    EXPECT(std::memcmp(&got, &zero, sizeof got) == 0);
  } else {
    EXPECT(e == cudaErrorInvalidValue);
    cudaGetLastError();
  }

  // With the view of the whole array: the same descriptor comes back, and
  // sampling through it reads the array.
  cudaResourceViewDesc view = {};
  view.format = cudaResViewFormatFloat1;
  view.width = w;
  view.height = h;
  cudaTextureObject_t viewed = 0;
  CHECK(cudaCreateTextureObject(&viewed, &rd, &td, &view));
  std::memset(&got, 0xab, sizeof got);
  CHECK(cudaGetTextureObjectResourceViewDesc(&got, viewed));
  EXPECT(got.format == view.format && got.width == view.width && got.height == view.height &&
         got.depth == view.depth && got.firstMipmapLevel == 0 && got.lastMipmapLevel == 0 &&
         got.firstLayer == 0 && got.lastLayer == 0);
  float *out = nullptr;
  CHECK(cudaMalloc(&out, w * h * sizeof(float)));
  sample<<<dim3(1, h), w>>>(viewed, out, w, h);
  CHECK(cudaGetLastError());
  std::vector<float> back(w * h);
  CHECK(cudaMemcpy(back.data(), out, w * h * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < w * h; i++) EXPECT(back[i] == src[i]);
  CHECK(cudaDestroyTextureObject(viewed));
  CHECK(cudaDestroyTextureObject(plain));
  CHECK(cudaFree(out));
  CHECK(cudaFreeArray(arr));
  std::printf("texture resource view: none reported as documented, a given one round-trips\n");
}

int main() {
  int ndev = 0;
  CHECK(cudaGetDeviceCount(&ndev));
  EXPECT(ndev >= 1);
  valid_devices(ndev);
  texture_width();
  atomic_capabilities(ndev);
  clusters();
  persisting_l2();
  mem_pools();
  resource_view();
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaGetLastError());
  pass("device_queries13");
  return 0;
}
