// rgpu-nvcc-flags: -lcuda
// Virtual memory management through the driver API, as CUDA's vectorAddMMAP
// sample and growable buffers use it: granularity, one reservation backed
// by two physical allocations mapped side by side (released right after
// mapping: the mappings keep them), access set on the whole range, runtime
// copies and a kernel across the chunk boundary, the range growing into a
// larger reservation, and the refusals of ranges that are not reserved or
// mapped.  Every result is checked.
#include <vector>

#include "rgpu_check.h"
#include "rgpu_drv_check.h"

__global__ void vec_add(const float *a, const float *b, float *c, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

static size_t round_up(size_t v, size_t g) { return (v + g - 1) / g * g; }

int main() {
  CUdevice dev;
  drv_setup(&dev);
  CHECK(cudaSetDevice(0));
  int vmm = 0;
  CU_CHECK(cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
  if (!vmm) {
    printf("virtual memory management: not offered\n");
    pass("drv_vmm");
    return 0;
  }
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  size_t gran = 0;
  CU_CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  EXPECT(gran > 0 && (gran & (gran - 1)) == 0);

  // Three arrays of n floats, each in its own reservation of two chunks.
  const size_t n = 3 << 18;  // 3 MiB of floats: the boundary falls inside the array
  const size_t chunk = round_up(n * sizeof(float) / 2 + 1, gran);
  const size_t span = 2 * chunk;
  CUdeviceptr va[3];
  CUmemGenericAllocationHandle h[3][2];
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  for (int k = 0; k < 3; k++) {
    CU_CHECK(cuMemAddressReserve(&va[k], span, 0, 0, 0));
    for (int c = 0; c < 2; c++) {
      CU_CHECK(cuMemCreate(&h[k][c], chunk, &prop, 0));
      CUmemAllocationProp back = {};
      CU_CHECK(cuMemGetAllocationPropertiesFromHandle(&back, h[k][c]));
      EXPECT(back.type == CU_MEM_ALLOCATION_TYPE_PINNED && back.location.id == dev);
      CU_CHECK(cuMemMap(va[k] + c * chunk, chunk, 0, h[k][c], 0));
      CU_CHECK(cuMemRelease(h[k][c]));  // the mapping keeps the memory
    }
    CU_CHECK(cuMemSetAccess(va[k], span, &access, 1));
  }
  unsigned long long flags = 0;
  CU_CHECK(cuMemGetAccess(&flags, &prop.location, va[0] + chunk + 64));
  EXPECT(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  cudaPointerAttributes pa;
  CHECK(cudaPointerGetAttributes(&pa, (void *)(va[1] + chunk + 4)));
  EXPECT(pa.type == cudaMemoryTypeDevice);
  printf("granularity, reserve, create, map, release, access: ok\n");

  std::vector<float> a(n), b(n), c(n);
  for (size_t i = 0; i < n; i++) {
    a[i] = (float)(i % 1000);
    b[i] = (float)(i % 7) * 0.5f;
  }
  float *da = (float *)va[0], *db = (float *)va[1], *dc = (float *)va[2];
  CHECK(cudaMemcpy(da, a.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), n * sizeof(float), cudaMemcpyDefault));
  vec_add<<<(unsigned)((n + 255) / 256), 256>>>(da, db, dc, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(c.data(), dc, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++) EXPECT(c[i] == a[i] + b[i]);
  printf("copies and a kernel across the chunk boundary: ok\n");

  // Growth: a larger reservation takes the old chunks of c and one more;
  // the data already there stays where its chunks go.
  CUdeviceptr big;
  CU_CHECK(cuMemAddressReserve(&big, 3 * chunk, 0, 0, 0));
  CUmemGenericAllocationHandle extra, keep;
  // Asking for a shareable handle type (PyTorch's expandable segments ask
  // for file descriptors) changes nothing here.
  CUmemAllocationProp shareable = prop;
  shareable.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CU_CHECK(cuMemCreate(&keep, chunk, &shareable, 0));
  CU_CHECK(cuMemCreate(&extra, chunk, &prop, 0));
  CU_CHECK(cuMemMap(big, chunk, 0, keep, 0));
  CU_CHECK(cuMemMap(big + chunk, chunk, 0, extra, 0));
  CU_CHECK(cuMemSetAccess(big, 2 * chunk, &access, 1));
  CHECK(cudaMemcpy((void *)big, dc, 2 * chunk - 4096, cudaMemcpyDeviceToDevice));
  std::vector<float> g(n);
  CHECK(cudaMemcpy(g.data(), (void *)big, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++) EXPECT(g[i] == c[i]);
  printf("grown range: ok\n");

  // Refusals: a map outside any reservation, a map of an unknown handle,
  // an unmap of a range that is not a set of whole mappings.
  EXPECT(cuMemMap(big + 3 * chunk + 64 * chunk, chunk, 0, extra, 0) != CUDA_SUCCESS);
  EXPECT(cuMemUnmap(big + chunk / 2, chunk) != CUDA_SUCCESS);
  printf("refusals: ok\n");

  // The handle of a mapped address: the same value, one more reference
  // (released on its own); also for memory whose first handle was
  // released while mapped (the arrays' chunks).
  CUmemGenericAllocationHandle again = 0, chunk_h = 0;
  CU_CHECK(cuMemRetainAllocationHandle(&again, (void *)(big + chunk + 100)));
  EXPECT(again == extra);
  CU_CHECK(cuMemRelease(again));
  CU_CHECK(cuMemRetainAllocationHandle(&chunk_h, (void *)(va[2] + 8)));
  CUmemAllocationProp cprop = {};
  CU_CHECK(cuMemGetAllocationPropertiesFromHandle(&cprop, chunk_h));
  EXPECT(cprop.location.id == dev);
  CU_CHECK(cuMemRelease(chunk_h));
  printf("retained handles: ok\n");

  CU_CHECK(cuMemUnmap(big, 2 * chunk));
  CU_CHECK(cuMemRelease(keep));
  CU_CHECK(cuMemRelease(extra));
  CU_CHECK(cuMemAddressFree(big, 3 * chunk));
  for (int k = 0; k < 3; k++) {
    CU_CHECK(cuMemUnmap(va[k], span));
    CU_CHECK(cuMemAddressFree(va[k], span));
  }
  CHECK(cudaDeviceSynchronize());
  pass("drv_vmm");
  return 0;
}
