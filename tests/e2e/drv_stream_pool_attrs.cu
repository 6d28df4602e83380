// rgpu-nvcc-flags: -lcuda
// Driver-API forms of stream attributes, memory pools by location, graph
// memory attributes, SYNC_MEMOPS and peer attributes: each answer checked
// against what the program set or what the runtime reports for the same
// thing (both APIs name one object).
#include <cuda_runtime.h>

#include "rgpu_drv_check.h"

int main() {
  CUdevice dev;
  drv_setup(&dev);

  // Stream attributes: the L2 access policy window and the priority.
  CUstream a, b;
  CU_CHECK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
  CU_CHECK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
  CUdeviceptr buf;
  CU_CHECK(cuMemAlloc(&buf, 1 << 20));
  CUstreamAttrValue v = {};
  v.accessPolicyWindow.base_ptr = (void *)(uintptr_t)buf;
  v.accessPolicyWindow.num_bytes = 1 << 20;
  v.accessPolicyWindow.hitRatio = 0.5f;
  v.accessPolicyWindow.hitProp = CU_ACCESS_PROPERTY_PERSISTING;
  v.accessPolicyWindow.missProp = CU_ACCESS_PROPERTY_STREAMING;
  CU_CHECK(cuStreamSetAttribute(a, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &v));
  CUstreamAttrValue got = {};
  CU_CHECK(cuStreamGetAttribute(a, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &got));
  EXPECT(got.accessPolicyWindow.base_ptr == v.accessPolicyWindow.base_ptr);
  EXPECT(got.accessPolicyWindow.num_bytes == v.accessPolicyWindow.num_bytes);
  EXPECT(got.accessPolicyWindow.hitRatio == 0.5f);
  EXPECT(got.accessPolicyWindow.hitProp == CU_ACCESS_PROPERTY_PERSISTING);
  CU_CHECK(cuStreamCopyAttributes(b, a));
  CUstreamAttrValue got_b = {};
  CU_CHECK(cuStreamGetAttribute(b, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &got_b));
  EXPECT(got_b.accessPolicyWindow.num_bytes == v.accessPolicyWindow.num_bytes);
  cudaStreamAttrValue rt = {};
  EXPECT(cudaStreamGetAttribute((cudaStream_t)b, cudaStreamAttributeAccessPolicyWindow, &rt) == cudaSuccess);
  EXPECT(rt.accessPolicyWindow.num_bytes == v.accessPolicyWindow.num_bytes);
  printf("stream attributes: window of %zu bytes set, read, copied\n", got_b.accessPolicyWindow.num_bytes);
  CU_CHECK(cuStreamGetAttribute(a, CU_LAUNCH_ATTRIBUTE_PRIORITY, &got));
  int prio = 0;
  CU_CHECK(cuStreamGetPriority(a, &prio));
  EXPECT(got.priority == prio);

  // Pools by location: the device's pool either way.
  CUmemLocation loc = {};
  loc.type = CU_MEM_LOCATION_TYPE_DEVICE;
  loc.id = dev;
  CUmemoryPool by_loc, by_dev, def;
  CU_CHECK(cuMemGetMemPool(&by_loc, &loc, CU_MEM_ALLOCATION_TYPE_PINNED));
  CU_CHECK(cuDeviceGetMemPool(&by_dev, dev));
  CU_CHECK(cuMemGetDefaultMemPool(&def, &loc, CU_MEM_ALLOCATION_TYPE_PINNED));
  EXPECT(by_loc == by_dev);
  CUmemoryPool dflt;
  CU_CHECK(cuDeviceGetDefaultMemPool(&dflt, dev));
  EXPECT(def == dflt);
  CU_CHECK(cuMemSetMemPool(&loc, CU_MEM_ALLOCATION_TYPE_PINNED, dflt));
  printf("memory pools by location: same as by device\n");

  // Graph memory: nothing allocated by graphs yet.
  cuuint64_t used = 1;
  CU_CHECK(cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used));
  CU_CHECK(cuDeviceGraphMemTrim(dev));
  printf("graph memory in use: %llu\n", (unsigned long long)used);

  // SYNC_MEMOPS on device memory; refused on a host pointer.
  unsigned one = 1;
  CU_CHECK(cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, buf));
  int local = 0;
  CU_EXPECT_ERR(cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, (CUdeviceptr)(uintptr_t)&local),
                CUDA_ERROR_INVALID_VALUE);

  // A device is not its own peer.
  int pv = -1;
  CU_EXPECT_ERR(cuDeviceGetP2PAttribute(&pv, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, dev, dev),
                CUDA_ERROR_INVALID_DEVICE);

  CU_CHECK(cuMemFree(buf));
  CU_CHECK(cuStreamDestroy(a));
  CU_CHECK(cuStreamDestroy(b));
  printf("PASS drv_stream_pool_attrs\n");
  return 0;
}
