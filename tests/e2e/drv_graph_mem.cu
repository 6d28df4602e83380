// rgpu-nvcc-flags: -lcuda
// Graph memory and copy nodes through the driver API: cuGraphAddMemAllocNode
// (and the same through cuGraphAddNode), a memset into the graph's memory,
// a copy out of it (cuGraphAddMemcpyNode), cuGraphAddMemFreeNode; the node
// parameters read back; the copy node changed in the graph
// (cuGraphMemcpyNodeSetParams) and in the executable graph
// (cuGraphExecMemcpyNodeSetParams), the memset's value through
// cuGraphExecNodeSetParams.  Every byte copied out is checked.
#include <vector>

#include "rgpu_drv_check.h"

static CUDA_MEMCPY3D d2d(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  CUDA_MEMCPY3D c;
  memset(&c, 0, sizeof c);
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = src;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = dst;
  c.WidthInBytes = n;
  c.Height = c.Depth = 1;
  return c;
}

static int count_bytes(CUdeviceptr p, size_t n, unsigned char v) {
  std::vector<unsigned char> h(n);
  CU_CHECK(cuMemcpyDtoH(h.data(), p, n));
  int k = 0;
  for (size_t i = 0; i < n; i++) k += h[i] == v;
  return k;
}

int main() {
  CUdevice dev;
  CUcontext ctx = drv_setup(&dev);
  const size_t n = 4096;
  CUdeviceptr out;
  CU_CHECK(cuMemAlloc(&out, n));
  CU_CHECK(cuMemsetD8(out, 0, n));

  CUgraph g;
  CU_CHECK(cuGraphCreate(&g, 0));
  CUDA_MEM_ALLOC_NODE_PARAMS ap;
  memset(&ap, 0, sizeof ap);
  ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  ap.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  ap.poolProps.location.id = dev;
  ap.bytesize = n;
  CUgraphNode alloc, fill, copy, freen;
  CU_CHECK(cuGraphAddMemAllocNode(&alloc, g, nullptr, 0, &ap));
  EXPECT(ap.dptr != 0);
  CUDA_MEMSET_NODE_PARAMS ms;
  memset(&ms, 0, sizeof ms);
  ms.dst = ap.dptr;
  ms.value = 0x2a;
  ms.elementSize = 1;
  ms.width = n;
  ms.height = 1;
  CU_CHECK(cuGraphAddMemsetNode(&fill, g, &alloc, 1, &ms, ctx));
  CUDA_MEMCPY3D cp = d2d(out, ap.dptr, n);
  CU_CHECK(cuGraphAddMemcpyNode(&copy, g, &fill, 1, &cp, ctx));
  CU_CHECK(cuGraphAddMemFreeNode(&freen, g, &copy, 1, ap.dptr));

  CUDA_MEM_ALLOC_NODE_PARAMS back;
  memset(&back, 0, sizeof back);
  CU_CHECK(cuGraphMemAllocNodeGetParams(alloc, &back));
  EXPECT(back.bytesize == n && back.dptr == ap.dptr);
  CUdeviceptr freed = 0;
  CU_CHECK(cuGraphMemFreeNodeGetParams(freen, &freed));
  EXPECT(freed == ap.dptr);
  printf("alloc node: %zu bytes, the free node frees them\n", back.bytesize);

  // Half the copy, changed in the graph before instantiation.
  CUDA_MEMCPY3D half = d2d(out, ap.dptr, n / 2);
  CU_CHECK(cuGraphMemcpyNodeSetParams(copy, &half));
  CUgraphExec x;
  CU_CHECK(cuGraphInstantiate(&x, g, 0));
  CU_CHECK(cuGraphLaunch(x, nullptr));
  CU_CHECK(cuCtxSynchronize());
  printf("copied out by the graph: %d of %zu bytes\n", count_bytes(out, n, 0x2a), n);
  EXPECT(count_bytes(out, n, 0x2a) == (int)(n / 2));

  // The whole copy again, changed in the executable graph.
  CU_CHECK(cuMemsetD8(out, 0, n));
  CU_CHECK(cuGraphExecMemcpyNodeSetParams(x, copy, &cp, ctx));
  CU_CHECK(cuGraphLaunch(x, nullptr));
  CU_CHECK(cuCtxSynchronize());
  printf("after the executable graph's copy changed: %d of %zu bytes\n", count_bytes(out, n, 0x2a), n);
  EXPECT(count_bytes(out, n, 0x2a) == (int)n);
  // The memset's value through the generic call, in the executable graph.
  CUgraphNodeParams gp;
  memset(&gp, 0, sizeof gp);
  gp.type = CU_GRAPH_NODE_TYPE_MEMSET;
  gp.memset.dst = ap.dptr;
  gp.memset.value = 0x11;
  gp.memset.elementSize = 1;
  gp.memset.width = n;
  gp.memset.height = 1;
  gp.memset.ctx = ctx;
  CU_CHECK(cuGraphExecNodeSetParams(x, fill, &gp));
  CU_CHECK(cuGraphLaunch(x, nullptr));
  CU_CHECK(cuCtxSynchronize());
  printf("after cuGraphExecNodeSetParams on the memset: %d of %zu bytes\n", count_bytes(out, n, 0x11), n);
  EXPECT(count_bytes(out, n, 0x11) == (int)n);
  CU_CHECK(cuGraphExecDestroy(x));
  CU_CHECK(cuGraphDestroy(g));

  // An alloc node through the generic call.
  CU_CHECK(cuGraphCreate(&g, 0));
  CUgraphNodeParams np;
  memset(&np, 0, sizeof np);
  np.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  np.alloc.poolProps = ap.poolProps;
  np.alloc.bytesize = 1024;
  CUgraphNode a2;
  CU_CHECK(cuGraphAddNode(&a2, g, nullptr, nullptr, 0, &np));
  EXPECT(np.alloc.dptr != 0);
  CUgraphNodeParams fp;
  memset(&fp, 0, sizeof fp);
  fp.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
  fp.free.dptr = np.alloc.dptr;
  CUgraphNode f2;
  CU_CHECK(cuGraphAddNode(&f2, g, &a2, nullptr, 1, &fp));
  CU_CHECK(cuGraphInstantiate(&x, g, 0));
  CU_CHECK(cuGraphLaunch(x, nullptr));
  CU_CHECK(cuCtxSynchronize());
  CU_CHECK(cuGraphExecDestroy(x));
  CU_CHECK(cuGraphDestroy(g));
  printf("alloc and free nodes through cuGraphAddNode: launched\n");

  CU_CHECK(cuMemFree(out));
  printf("PASS drv_graph_mem\n");
  return 0;
}
