// A device attribute must not promise what the runtime does not deliver
// (issue 14): programs read canMapHostMemory, managedMemory, cooperativeLaunch,
// memoryPoolsSupported... and take their own fallback when it is 0.  For each
// capability this program reads the attribute (cudaDeviceGetAttribute and
// cudaGetDeviceProperties must agree) and, where it is 1, uses the feature and
// checks the result.  The printed lines are the same natively and through rgpu
// (the values differ: a remote GPU has fewer capabilities); `-v` prints the
// values too.
#include <cstdint>

#include "rgpu_check.h"

__global__ void fill(int *p, int n, int v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v + i;
}

static bool verbose;

static int attr(cudaDeviceAttr a, int prop_value, const char *name) {
  int v = -1;
  CHECK(cudaDeviceGetAttribute(&v, a, 0));
  if (v != prop_value) {
    std::fprintf(stderr, "FAIL %s: cudaDeviceGetAttribute says %d, cudaGetDeviceProperties %d\n",
                 name, v, prop_value);
    std::exit(1);
  }
  if (verbose) std::printf("value %s %d\n", name, v);
  return v;
}

static void expect_filled(const int *p, int n, int v) {
  for (int i = 0; i < n; i++) EXPECT(p[i] == v + i);
}

int main(int argc, char **argv) {
  verbose = argc > 1 && std::strcmp(argv[1], "-v") == 0;
  const int n = 1024;
  cudaDeviceProp p;
  CHECK(cudaGetDeviceProperties(&p, 0));

  if (attr(cudaDevAttrCanMapHostMemory, p.canMapHostMemory, "canMapHostMemory")) {
    int *h = nullptr, *d = nullptr;
    CHECK(cudaHostAlloc((void **)&h, n * sizeof(int), cudaHostAllocMapped));
    CHECK(cudaHostGetDevicePointer((void **)&d, h, 0));
    fill<<<(n + 255) / 256, 256>>>(d, n, 7);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    expect_filled(h, n, 7);
    CHECK(cudaFreeHost(h));
  }
  std::printf("canMapHostMemory: consistent\n");

  if (attr(cudaDevAttrManagedMemory, p.managedMemory, "managedMemory")) {
    int *m = nullptr;
    CHECK(cudaMallocManaged((void **)&m, n * sizeof(int)));
    fill<<<(n + 255) / 256, 256>>>(m, n, 11);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    expect_filled(m, n, 11);
    CHECK(cudaFree(m));
  }
  std::printf("managedMemory: consistent\n");
  // Without managed memory there is nothing to access concurrently.
  int cma = attr(cudaDevAttrConcurrentManagedAccess, p.concurrentManagedAccess,
                 "concurrentManagedAccess");
  EXPECT(!cma || p.managedMemory);
  std::printf("concurrentManagedAccess: consistent\n");

  if (attr(cudaDevAttrPageableMemoryAccess, p.pageableMemoryAccess, "pageableMemoryAccess")) {
    int *h = (int *)std::malloc(n * sizeof(int));
    fill<<<(n + 255) / 256, 256>>>(h, n, 13);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    expect_filled(h, n, 13);
    std::free(h);
  }
  attr(cudaDevAttrPageableMemoryAccessUsesHostPageTables,
       p.pageableMemoryAccessUsesHostPageTables, "pageableMemoryAccessUsesHostPageTables");
  attr(cudaDevAttrDirectManagedMemAccessFromHost, p.directManagedMemAccessFromHost,
       "directManagedMemAccessFromHost");
  std::printf("pageableMemoryAccess: consistent\n");

  if (attr(cudaDevAttrCooperativeLaunch, p.cooperativeLaunch, "cooperativeLaunch")) {
    int *d = nullptr;
    CHECK(cudaMalloc((void **)&d, n * sizeof(int)));
    int nn = n, v = 17;
    void *args[] = {&d, &nn, &v};
    CHECK(cudaLaunchCooperativeKernel((void *)fill, dim3(1), dim3(256), args, 0, 0));
    CHECK(cudaDeviceSynchronize());
    int h[256];
    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    expect_filled(h, 256, 17);
    CHECK(cudaFree(d));
  }
  std::printf("cooperativeLaunch: consistent\n");

  if (attr(cudaDevAttrMemoryPoolsSupported, p.memoryPoolsSupported, "memoryPoolsSupported")) {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    int *d = nullptr;
    CHECK(cudaMallocAsync((void **)&d, n * sizeof(int), s));
    fill<<<(n + 255) / 256, 256, 0, s>>>(d, n, 19);
    CHECK(cudaGetLastError());
    static int h[1024];
    CHECK(cudaMemcpyAsync(h, d, sizeof h, cudaMemcpyDeviceToHost, s));
    CHECK(cudaFreeAsync(d, s));
    CHECK(cudaStreamSynchronize(s));
    expect_filled(h, n, 19);
    CHECK(cudaStreamDestroy(s));
  }
  std::printf("memoryPoolsSupported: consistent\n");

  if (attr(cudaDevAttrHostRegisterSupported, p.hostRegisterSupported, "hostRegisterSupported")) {
    int *h = (int *)std::malloc(n * sizeof(int));
    int *d = nullptr;
    CHECK(cudaHostRegister(h, n * sizeof(int), cudaHostRegisterDefault));
    CHECK(cudaMalloc((void **)&d, n * sizeof(int)));
    fill<<<(n + 255) / 256, 256>>>(d, n, 23);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(h, d, n * sizeof(int), cudaMemcpyDeviceToHost));
    expect_filled(h, n, 23);
    CHECK(cudaHostUnregister(h));
    CHECK(cudaFree(d));
    std::free(h);
  }
  std::printf("hostRegisterSupported: consistent\n");

  attr(cudaDevAttrHostNativeAtomicSupported, p.hostNativeAtomicSupported,
       "hostNativeAtomicSupported");
  attr(cudaDevAttrCanUseHostPointerForRegisteredMem, p.canUseHostPointerForRegisteredMem,
       "canUseHostPointerForRegisteredMem");
  attr(cudaDevAttrIpcEventSupport, p.ipcEventSupported, "ipcEventSupported");
  attr(cudaDevAttrUnifiedAddressing, p.unifiedAddressing, "unifiedAddressing");
  pass("device_caps");
  return 0;
}
