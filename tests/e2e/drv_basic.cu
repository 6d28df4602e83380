// rgpu-nvcc-flags: -lcuda
// The driver API alone (issue 15): initialization, device queries,
// primary and explicit contexts, memory round trips with checked values,
// streams and events, host functions, stream capture into a graph,
// cuGetProcAddress, error names, and a function rgpu does not offer.
// Device-specific values (name, memory size, versions) appear only on
// rgpu-stats: lines, which the native comparison leaves out.
#include <cuda.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "rgpu_drv_check.h"

static int g_host_fn_ran, g_callback_ran;
static void CUDA_CB host_fn(void *p) { g_host_fn_ran = *(int *)p; }
static void CUDA_CB stream_cb(CUstream, CUresult status, void *p) {
  if (status == CUDA_SUCCESS) g_callback_ran = *(int *)p;
}

int main() {
  // Before cuInit every call but a few answers NOT_INITIALIZED.
  int count = -1;
  CU_EXPECT_ERR(cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
  CU_CHECK(cuInit(0));
  int version = 0;
  CU_CHECK(cuDriverGetVersion(&version));
  EXPECT(version > 0);
  std::printf("rgpu-stats: driver version %d\n", version);

  // ---- devices
  CU_CHECK(cuDeviceGetCount(&count));
  EXPECT(count >= 1);
  CUdevice dev;
  CU_CHECK(cuDeviceGet(&dev, 0));
  CU_EXPECT_ERR(cuDeviceGet(&dev, count), CUDA_ERROR_INVALID_DEVICE);
  CU_CHECK(cuDeviceGet(&dev, 0));
  char name[256] = "";
  CU_CHECK(cuDeviceGetName(name, sizeof name, dev));
  EXPECT(name[0] != 0);
  size_t total = 0;
  CU_CHECK(cuDeviceTotalMem(&total, dev));
  EXPECT(total > 0);
  int warp = 0, major = 0, minor = 0, cc_major = 0, threads = 0;
  CU_CHECK(cuDeviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev));
  EXPECT(warp == 32);
  CU_CHECK(cuDeviceGetAttribute(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, dev));
  EXPECT(threads >= 64);
  CU_CHECK(cuDeviceGetAttribute(&cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  CU_CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  CU_CHECK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  EXPECT(major == cc_major && major >= 1 && minor >= 0);
  CU_EXPECT_ERR(cuDeviceGetAttribute(&warp, (CUdevice_attribute)100000, dev),
            CUDA_ERROR_INVALID_VALUE);
  char bus[64] = "";
  CU_CHECK(cuDeviceGetPCIBusId(bus, sizeof bus, dev));
  CUdevice by_bus = -1;
  CU_CHECK(cuDeviceGetByPCIBusId(&by_bus, bus));
  EXPECT(by_bus == dev);
  CUuuid uuid;
  CU_CHECK(cuDeviceGetUuid(&uuid, dev));
  std::printf("rgpu-stats: device %s, %zu MiB, sm_%d%d, %s\n", name, total >> 20, major, minor,
              bus);
  std::printf("devices ok\n");

  // ---- contexts: nothing current yet; the primary context is inactive
  CUcontext cur = (CUcontext)1;
  CU_CHECK(cuCtxGetCurrent(&cur));
  EXPECT(cur == nullptr);
  CUdeviceptr none;
  CU_EXPECT_ERR(cuMemAlloc(&none, 1024), CUDA_ERROR_INVALID_CONTEXT);
  unsigned flags = 1;
  int active = 1;
  CU_CHECK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
  std::printf("primary before retain: active %d\n", active);
  CUcontext primary;
  CU_CHECK(cuDevicePrimaryCtxRetain(&primary, dev));
  CU_CHECK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
  std::printf("primary after retain: active %d\n", active);
  CU_CHECK(cuCtxSetCurrent(primary));
  CU_CHECK(cuCtxGetCurrent(&cur));
  EXPECT(cur == primary);
  CUdevice ctx_dev = -1;
  CU_CHECK(cuCtxGetDevice(&ctx_dev));
  EXPECT(ctx_dev == dev);

  CUcontext ctx;
  CU_CHECK(cuCtxCreate(&ctx, nullptr, 0, dev));
  EXPECT(ctx != primary);
  CU_CHECK(cuCtxGetCurrent(&cur));
  EXPECT(cur == ctx);
  unsigned long long id_ctx = 0, id_primary = 0;
  CU_CHECK(cuCtxGetId(ctx, &id_ctx));
  CU_CHECK(cuCtxGetId(primary, &id_primary));
  EXPECT(id_ctx != id_primary);
  CUcontext popped;
  CU_CHECK(cuCtxPopCurrent(&popped));
  EXPECT(popped == ctx);
  CU_CHECK(cuCtxGetCurrent(&cur));
  EXPECT(cur == primary);
  CU_CHECK(cuCtxPushCurrent(ctx));
  CU_CHECK(cuCtxGetCurrent(&cur));
  EXPECT(cur == ctx);
  int least = 1, greatest = 1;
  CU_CHECK(cuCtxGetStreamPriorityRange(&least, &greatest));
  EXPECT(greatest <= least);
  std::printf("contexts ok\n");

  // ---- memory: set, copy, check
  const size_t n = 1 << 18; // 256 Ki ints = 1 MiB
  CUdeviceptr a, b;
  CU_CHECK(cuMemAlloc(&a, n * 4));
  CU_CHECK(cuMemAlloc(&b, n * 4));
  std::vector<unsigned> h(n), back(n);
  CU_CHECK(cuMemsetD32(a, 0xdeadbeefu, n));
  CU_CHECK(cuMemcpyDtoH(back.data(), a, n * 4));
  for (size_t i = 0; i < n; i++) EXPECT(back[i] == 0xdeadbeefu);
  for (size_t i = 0; i < n; i++) h[i] = (unsigned)(i * 2654435761u);
  CU_CHECK(cuMemcpyHtoD(a, h.data(), n * 4));
  CU_CHECK(cuMemcpyDtoD(b, a, n * 4));
  CU_CHECK(cuMemsetD8(b + 8, 0x5a, 4));       // element 2
  CU_CHECK(cuMemsetD16(b + 16, 0x1234, 4));   // elements 4 and 5 (half each)
  CU_CHECK(cuMemcpyDtoH(back.data(), b, n * 4));
  for (size_t i = 0; i < n; i++) {
    unsigned want = h[i];
    if (i == 2) want = 0x5a5a5a5au;
    if (i == 4 || i == 5) want = 0x12341234u;
    EXPECT(back[i] == want);
  }
  CU_CHECK(cuMemcpy(a, b, 64)); // unified addressing: device to device
  unsigned first[16];
  CU_CHECK(cuMemcpyDtoH(first, a, sizeof first));
  EXPECT(first[2] == 0x5a5a5a5au && first[4] == 0x12341234u && first[15] == h[15]);
  CUdeviceptr base = 0;
  size_t size = 0;
  CU_CHECK(cuMemGetAddressRange(&base, &size, b + 100));
  EXPECT(base == b && size == n * 4);
  size_t mfree = 0, mtotal = 0;
  CU_CHECK(cuMemGetInfo(&mfree, &mtotal));
  EXPECT(mtotal > 0 && mfree <= mtotal);
  int ordinal = -1;
  CU_CHECK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, a));
  EXPECT(ordinal == dev);
  unsigned mem_type = 0;
  CU_CHECK(cuPointerGetAttribute(&mem_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a));
  EXPECT(mem_type == CU_MEMORYTYPE_DEVICE);
  // Pitched: a 2D memset of a sub-rectangle, read back with a 2D copy.
  CUdeviceptr pd;
  size_t pitch = 0;
  const size_t W = 100, H = 37; // elements, rows
  CU_CHECK(cuMemAllocPitch(&pd, &pitch, W * 4, H, 4));
  EXPECT(pitch >= W * 4);
  CU_CHECK(cuMemsetD2D32(pd, pitch, 0xabcdu, W, H));
  CU_CHECK(cuMemsetD2D8(pd + pitch * 5 + 8, pitch, 0x01, 8, 3)); // elements 2..3 of rows 5..7
  std::vector<unsigned> grid(W * H);
  CUDA_MEMCPY2D cp;
  std::memset(&cp, 0, sizeof cp);
  cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  cp.srcDevice = pd;
  cp.srcPitch = pitch;
  cp.dstMemoryType = CU_MEMORYTYPE_HOST;
  cp.dstHost = grid.data();
  cp.dstPitch = W * 4;
  cp.WidthInBytes = W * 4;
  cp.Height = H;
  CU_CHECK(cuMemcpy2D(&cp));
  for (size_t y = 0; y < H; y++)
    for (size_t x = 0; x < W; x++)
      EXPECT(grid[y * W + x] == ((y >= 5 && y < 8 && (x == 2 || x == 3)) ? 0x01010101u : 0xabcdu));
  CU_CHECK(cuMemFree(pd));
  // 3D: a 32-byte x 3-row x 2-slice box out of a 256-byte-pitch, 8-row volume.
  CU_CHECK(cuMemcpyHtoD(a, h.data(), n * 4));
  unsigned box[2][3][8];
  CUDA_MEMCPY3D c3d;
  std::memset(&c3d, 0, sizeof c3d);
  c3d.srcXInBytes = 16;
  c3d.srcY = 1;
  c3d.srcZ = 1;
  c3d.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c3d.srcDevice = a;
  c3d.srcPitch = 256;
  c3d.srcHeight = 8;
  c3d.dstMemoryType = CU_MEMORYTYPE_HOST;
  c3d.dstHost = box;
  c3d.dstPitch = 32;
  c3d.dstHeight = 3;
  c3d.WidthInBytes = 32;
  c3d.Height = 3;
  c3d.Depth = 2;
  CU_CHECK(cuMemcpy3D(&c3d));
  for (int z = 0; z < 2; z++)
    for (int y = 0; y < 3; y++)
      for (int x = 0; x < 8; x++)
        EXPECT(box[z][y][x] == h[((1 + z) * 8 + 1 + y) * 64 + 4 + x]);
  std::printf("memory ok\n");

  // ---- streams, events, pinned memory, host functions
  CUstream s;
  CU_CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  unsigned sflags = 0;
  CU_CHECK(cuStreamGetFlags(s, &sflags));
  EXPECT(sflags == CU_STREAM_NON_BLOCKING);
  CUcontext sctx = nullptr;
  CU_CHECK(cuStreamGetCtx(s, &sctx));
  EXPECT(sctx == ctx);
  CUstream hi;
  CU_CHECK(cuStreamCreateWithPriority(&hi, CU_STREAM_NON_BLOCKING, greatest));
  int prio = 1;
  CU_CHECK(cuStreamGetPriority(hi, &prio));
  EXPECT(prio == greatest);
  CUevent e0, e1;
  CU_CHECK(cuEventCreate(&e0, CU_EVENT_DEFAULT));
  CU_CHECK(cuEventCreate(&e1, CU_EVENT_DEFAULT));
  unsigned *pinned = nullptr;
  CU_CHECK(cuMemAllocHost((void **)&pinned, n * 4));
  for (size_t i = 0; i < n; i++) pinned[i] = (unsigned)i ^ 0x00ff00ffu;
  int token = 7, token2 = 9;
  CU_CHECK(cuEventRecord(e0, s));
  CU_CHECK(cuMemcpyHtoDAsync(a, pinned, n * 4, s));
  CU_CHECK(cuMemsetD32Async(a + 4 * 10, 77, 5, s));
  CU_CHECK(cuMemcpyDtoHAsync(pinned, a, n * 4, s));
  CU_CHECK(cuLaunchHostFunc(s, host_fn, &token));
  CU_CHECK(cuStreamAddCallback(s, stream_cb, &token2, 0));
  CU_CHECK(cuEventRecord(e1, s));
  CU_CHECK(cuStreamSynchronize(s));
  CU_CHECK(cuStreamQuery(s));
  CU_CHECK(cuEventQuery(e1));
  for (size_t i = 0; i < n; i++)
    EXPECT(pinned[i] == ((i >= 10 && i < 15) ? 77u : ((unsigned)i ^ 0x00ff00ffu)));
  EXPECT(g_host_fn_ran == 7 && g_callback_ran == 9);
  float ms = -1;
  CU_CHECK(cuEventElapsedTime(&ms, e0, e1));
  EXPECT(ms >= 0);
  CU_CHECK(cuEventSynchronize(e1));
  // Cross-stream order: hi waits for an event recorded on s.
  CU_CHECK(cuMemsetD32Async(b, 0x11111111u, n, s));
  CU_CHECK(cuEventRecord(e0, s));
  CU_CHECK(cuStreamWaitEvent(hi, e0, 0));
  CU_CHECK(cuMemcpyDtoDAsync(a, b, n * 4, hi));
  CU_CHECK(cuMemcpyDtoHAsync(pinned, a, n * 4, hi));
  CU_CHECK(cuStreamSynchronize(hi));
  for (size_t i = 0; i < n; i++) EXPECT(pinned[i] == 0x11111111u);
  // Stream-ordered allocation.
  CUdeviceptr sa = 0;
  CU_CHECK(cuMemAllocAsync(&sa, 4096, s));
  CU_CHECK(cuMemsetD32Async(sa, 42, 1024, s));
  CU_CHECK(cuMemcpyDtoHAsync(pinned, sa, 4096, s));
  CU_CHECK(cuMemFreeAsync(sa, s));
  CU_CHECK(cuStreamSynchronize(s));
  for (size_t i = 0; i < 1024; i++) EXPECT(pinned[i] == 42u);
  // Another thread has no current context until it sets one.
  int thread_ok = 0;
  std::thread t([&] {
    CUcontext tc = (CUcontext)1;
    if (cuCtxGetCurrent(&tc) != CUDA_SUCCESS || tc != nullptr) return;
    CUdeviceptr tp;
    if (cuMemAlloc(&tp, 256) != CUDA_ERROR_INVALID_CONTEXT) return;
    if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS) return;
    if (cuMemAlloc(&tp, 256) != CUDA_SUCCESS) return;
    unsigned v[64];
    if (cuMemsetD32(tp, 5, 64) != CUDA_SUCCESS || cuMemcpyDtoH(v, tp, sizeof v) != CUDA_SUCCESS)
      return;
    if (v[0] != 5 || v[63] != 5 || cuMemFree(tp) != CUDA_SUCCESS) return;
    thread_ok = 1;
  });
  t.join();
  EXPECT(thread_ok == 1);
  // Several attributes at once; an unknown pointer is no error there.
  unsigned mt = 7;
  int ord = 7;
  CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                  CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
  void *vals[2] = {&mt, &ord};
  CU_CHECK(cuPointerGetAttributes(2, attrs, vals, a));
  EXPECT(mt == CU_MEMORYTYPE_DEVICE && ord == dev);
  CU_CHECK(cuPointerGetAttributes(2, attrs, vals, (CUdeviceptr)0x1000));
  EXPECT(mt == 0);
  std::printf("rgpu-stats: elapsed %.3f ms\n", ms);
  std::printf("streams and events ok\n");

  // ---- stream capture into a graph, launched twice
  CUgraph graph;
  CU_CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureStatus cap;
  CU_CHECK(cuStreamIsCapturing(s, &cap));
  EXPECT(cap == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CU_CHECK(cuMemsetD32Async(a, 0x2222u, n, s));
  CU_CHECK(cuMemcpyDtoDAsync(b, a, n * 4, s));
  CU_CHECK(cuStreamEndCapture(s, &graph));
  size_t nodes = 0;
  CU_CHECK(cuGraphGetNodes(graph, nullptr, &nodes));
  EXPECT(nodes == 2);
  CUgraphExec exec;
  CU_CHECK(cuGraphInstantiate(&exec, graph, 0));
  CU_CHECK(cuMemsetD32(b, 0, n));
  CU_CHECK(cuCtxSynchronize());
  CU_CHECK(cuGraphLaunch(exec, s));
  CU_CHECK(cuGraphLaunch(exec, s));
  CU_CHECK(cuStreamSynchronize(s));
  CU_CHECK(cuMemcpyDtoH(back.data(), b, n * 4));
  for (size_t i = 0; i < n; i++) EXPECT(back[i] == 0x2222u);
  CU_CHECK(cuGraphExecDestroy(exec));
  CU_CHECK(cuGraphDestroy(graph));
  // An explicit graph: a memset node, then a memcpy node into pinned memory.
  CUgraph g2;
  CU_CHECK(cuGraphCreate(&g2, 0));
  CUDA_MEMSET_NODE_PARAMS msp;
  std::memset(&msp, 0, sizeof msp);
  msp.dst = a;
  msp.value = 0x33u;
  msp.elementSize = 4;
  msp.width = n;
  msp.height = 1;
  CUgraphNode mset, mcpy;
  CU_CHECK(cuGraphAddMemsetNode(&mset, g2, nullptr, 0, &msp, ctx));
  CUDA_MEMCPY3D c3;
  std::memset(&c3, 0, sizeof c3);
  c3.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c3.srcDevice = a;
  c3.dstMemoryType = CU_MEMORYTYPE_HOST;
  c3.dstHost = pinned;
  c3.srcPitch = c3.dstPitch = n * 4;
  c3.srcHeight = c3.dstHeight = 1;
  c3.WidthInBytes = n * 4;
  c3.Height = 1;
  c3.Depth = 1;
  CU_CHECK(cuGraphAddMemcpyNode(&mcpy, g2, &mset, 1, &c3, ctx));
  CUgraphNodeType type;
  CU_CHECK(cuGraphNodeGetType(mcpy, &type));
  EXPECT(type == CU_GRAPH_NODE_TYPE_MEMCPY);
  size_t ndeps = 0;
  CU_CHECK(cuGraphNodeGetDependencies(mcpy, nullptr, nullptr, &ndeps));
  EXPECT(ndeps == 1);
  CUgraphExec exec2;
  CU_CHECK(cuGraphInstantiate(&exec2, g2, 0));
  CU_CHECK(cuGraphLaunch(exec2, s));
  CU_CHECK(cuStreamSynchronize(s));
  for (size_t i = 0; i < n; i++) EXPECT(pinned[i] == 0x33u);
  CU_CHECK(cuGraphExecDestroy(exec2));
  CU_CHECK(cuGraphDestroy(g2));
  std::printf("graph ok\n");

  // ---- cuGetProcAddress
  void *fn = nullptr;
  CUdriverProcAddressQueryResult qr;
  CU_CHECK(cuGetProcAddress("cuMemAlloc", &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &qr));
  EXPECT(fn != nullptr && qr == CU_GET_PROC_ADDRESS_SUCCESS);
  CUdeviceptr c = 0;
  CU_CHECK(((CUresult(*)(CUdeviceptr *, size_t))fn)(&c, 4096));
  CU_CHECK(cuMemsetD32(c, 3, 1024));
  unsigned three[4];
  CU_CHECK(cuMemcpyDtoH(three, c + 64, sizeof three));
  EXPECT(three[0] == 3 && three[3] == 3);
  CU_CHECK(cuMemFree(c));
  void *legacy = nullptr, *per_thread = nullptr;
  CU_CHECK(cuGetProcAddress("cuMemcpyHtoD", &legacy, CUDA_VERSION, CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                      &qr));
  CU_CHECK(cuGetProcAddress("cuMemcpyHtoD", &per_thread, CUDA_VERSION,
                      CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &qr));
  EXPECT(legacy && per_thread && legacy != per_thread);
  fn = (void *)1;
  // A missing name is a successful query whose status says so (the H200's
  // driver returns CUDA_SUCCESS here).
  CU_EXPECT_ERR(cuGetProcAddress("cuNoSuchFunction", &fn, CUDA_VERSION, 0, &qr), CUDA_SUCCESS);
  EXPECT(fn == nullptr && qr == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  std::printf("proc address ok\n");

  // ---- error names; a function rgpu does not offer
  const char *ename = nullptr, *etext = nullptr;
  CU_CHECK(cuGetErrorName(CUDA_ERROR_INVALID_VALUE, &ename));
  EXPECT(std::strcmp(ename, "CUDA_ERROR_INVALID_VALUE") == 0);
  CU_CHECK(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &etext));
  std::printf("CUDA_ERROR_INVALID_VALUE: %s\n", etext);
  CUdeviceptr managed = 0;
  CUresult mr = cuMemAllocManaged(&managed, 4096, CU_MEM_ATTACH_GLOBAL);
  // Managed memory: written here, read by the device (a copy out of it).
  CU_CHECK(mr);
  cuGetErrorName(mr, &ename);
  std::printf("rgpu-stats: cuMemAllocManaged -> %s\n", ename);
  int *mh = (int *)(uintptr_t)managed;
  for (int i = 0; i < 1024; i++) mh[i] = 3 * i;
  int seen[1024];
  CU_CHECK(cuMemcpyDtoH(seen, managed, sizeof seen));
  for (int i = 0; i < 1024; i++) EXPECT(seen[i] == 3 * i);
  // Its advice and prefetches, read back.
  CUmemLocation dev_loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CU_CHECK(cuMemAdvise(managed, 4096, CU_MEM_ADVISE_SET_READ_MOSTLY, dev_loc));
  CU_CHECK(cuMemPrefetchAsync(managed, 4096, dev_loc, 0, 0));
  CU_CHECK(cuCtxSynchronize());
  int read_mostly = -9, last_prefetch = -9;
  CU_CHECK(cuMemRangeGetAttribute(&read_mostly, 4, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, managed,
                                  4096));
  CU_CHECK(cuMemRangeGetAttribute(&last_prefetch, 4,
                                  CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, managed, 4096));
  std::printf("managed range: read mostly %d, last prefetched to device %d\n", read_mostly,
              last_prefetch);
  EXPECT(read_mostly == 1 && last_prefetch == 0);
  CU_CHECK(cuMemFree(managed));

  // ---- teardown
  CU_CHECK(cuMemFreeHost(pinned));
  CU_CHECK(cuEventDestroy(e0));
  CU_CHECK(cuEventDestroy(e1));
  CU_CHECK(cuStreamDestroy(s));
  CU_CHECK(cuStreamDestroy(hi));
  CU_CHECK(cuMemFree(a));
  CU_CHECK(cuMemFree(b));
  CU_CHECK(cuCtxDestroy(ctx));
  CU_CHECK(cuCtxGetCurrent(&cur));
  EXPECT(cur == primary);
  CU_CHECK(cuCtxSetCurrent(nullptr));
  CU_CHECK(cuDevicePrimaryCtxRelease(dev));
  CU_CHECK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
  std::printf("primary after release: active %d\n", active);
  std::printf("PASS drv_basic\n");
  return 0;
}
