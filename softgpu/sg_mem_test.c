/* softgpu memory: allocation table, limits, bounds-checked copies and
 * memsets, pointer attributes, VMM.  Error codes as measured on an H200. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cuda.h>

#include "softgpu.h"
#include <pthread.h>

static CUcontext ctx;

static int setup(void **state) {
  if (cuInit(0) != CUDA_SUCCESS) return -1;
  if (cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS) return -1;
  return cuCtxSetCurrent(ctx) == CUDA_SUCCESS ? 0 : -1;
}

static void test_alloc_free(void **state) {
  CUdeviceptr d = 0, d2 = 0, base = 0;
  size_t sz = 0;
  assert_int_equal(cuMemAlloc(&d, 0), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemAlloc(NULL, 16), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemAlloc(&d, 1000), CUDA_SUCCESS);
  assert_int_equal(d % 256, 0);
  assert_int_equal(cuMemAlloc(&d2, 1 << 20), CUDA_SUCCESS);
  assert_int_equal(d2 % 256, 0);
  assert_int_equal(cuMemGetAddressRange(&base, &sz, d + 10), CUDA_SUCCESS);
  assert_int_equal(base, d);
  assert_int_equal(sz, 1000);
  assert_int_equal(cuMemGetAddressRange(&base, &sz, d + 1000), CUDA_ERROR_NOT_FOUND);
  assert_int_equal(cuMemGetAddressRange(&base, &sz, 0), CUDA_ERROR_NOT_FOUND);
  /* The extension rgpu-server's CPU BLAS checks operands with. */
  assert_int_equal(sgMemCheck(d, 1000, 1), CUDA_SUCCESS);
  assert_int_equal(sgMemCheck(d + 999, 1, 0), CUDA_SUCCESS);
  assert_int_equal(sgMemCheck(d + 999, 2, 0), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(sgMemCheck(d - 8, 8, 0), CUDA_ERROR_INVALID_VALUE);
  /* Fresh memory reads as zero (lazy pages or a cleared heap block). */
  unsigned char buf[1000];
  memset(buf, 0xaa, sizeof buf);
  assert_int_equal(cuMemcpyDtoH(buf, d, 1000), CUDA_SUCCESS);
  for (int i = 0; i < 1000; i++) assert_int_equal(buf[i], 0);
  assert_int_equal(cuMemFree(d + 4), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemFree(d), CUDA_SUCCESS);
  assert_int_equal(cuMemFree(d), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemFree(0), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(buf, d, 4), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemFree(d2), CUDA_SUCCESS);
}

static void test_limits(void **state) {
  size_t fr0, tot, fr1;
  assert_int_equal(cuMemGetInfo(&fr0, &tot), CUDA_SUCCESS);
  assert_int_equal(tot, (size_t)64 << 20); /* RGPU_SOFTGPU_MEM=64M */
  CUdeviceptr a = 0, b = 0;
  assert_int_equal(cuMemAlloc(&a, 40 << 20), CUDA_SUCCESS);
  assert_int_equal(cuMemGetInfo(&fr1, &tot), CUDA_SUCCESS);
  assert_int_equal(fr0 - fr1, (size_t)40 << 20);
  assert_int_equal(cuMemAlloc(&b, 40 << 20), CUDA_ERROR_OUT_OF_MEMORY);
  assert_int_equal(cuMemAlloc(&b, (size_t)1 << 50), CUDA_ERROR_OUT_OF_MEMORY);
  assert_int_equal(cuMemFree(a), CUDA_SUCCESS);
  assert_int_equal(cuMemAlloc(&b, 40 << 20), CUDA_SUCCESS);
  assert_int_equal(cuMemFree(b), CUDA_SUCCESS);
  assert_int_equal(cuMemGetInfo(&fr1, &tot), CUDA_SUCCESS);
  assert_int_equal(fr1, fr0);
  /* Pinned host memory does not count against the device. */
  void *h = NULL;
  assert_int_equal(cuMemAllocHost(&h, 50 << 20), CUDA_SUCCESS);
  assert_int_equal(cuMemGetInfo(&fr1, &tot), CUDA_SUCCESS);
  assert_int_equal(fr1, fr0);
  assert_int_equal(cuMemFreeHost(h), CUDA_SUCCESS);
}

static void test_bounds(void **state) {
  CUdeviceptr d = 0, d2 = 0;
  char h[4096];
  memset(h, 1, sizeof h);
  assert_int_equal(cuMemAlloc(&d, 1000), CUDA_SUCCESS);
  assert_int_equal(cuMemAlloc(&d2, 1), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyHtoD(d, h, 1000), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyHtoD(d, h, 1001), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemcpyHtoD(d, h, 2048), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemcpyHtoD(d + 999, h, 2), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemcpyDtoH(h, d, 1001), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemcpyDtoH(h, 0x1000, 4), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemcpyDtoD(d, d2, 1), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoD(d, d2, 300), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemcpyHtoD(d, h, 0), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyHtoD(d, NULL, 4), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemcpy(d, (CUdeviceptr)h, 100), CUDA_SUCCESS);
  assert_int_equal(cuMemcpy((CUdeviceptr)h, d, 1001), CUDA_ERROR_INVALID_VALUE);
  /* Async forms check the same way, synchronously. */
  assert_int_equal(cuMemcpyHtoDAsync(d, h, 1001, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemcpyDtoDAsync(d + 900, d2, 200, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemsetD8Async(d, 0, 1001, NULL), CUDA_ERROR_INVALID_VALUE);
  /* Round trip through the device. */
  for (int i = 0; i < 1000; i++) h[i] = (char)(i * 7);
  assert_int_equal(cuMemcpyHtoD(d, h, 1000), CUDA_SUCCESS);
  char back[1000];
  assert_int_equal(cuMemcpyDtoH(back, d, 1000), CUDA_SUCCESS);
  assert_memory_equal(back, h, 1000);
  assert_int_equal(cuMemFree(d), CUDA_SUCCESS);
  assert_int_equal(cuMemFree(d2), CUDA_SUCCESS);
}

static void test_memset(void **state) {
  CUdeviceptr d = 0;
  assert_int_equal(cuMemAlloc(&d, 1000), CUDA_SUCCESS);
  assert_int_equal(cuMemsetD32(d + 2, 0, 4), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemsetD16(d + 1, 0, 4), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemsetD32(d, 0, 251), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemsetD8(d, 0, 1001), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemsetD32(d, 0xdeadbeef, 250), CUDA_SUCCESS);
  assert_int_equal(cuMemsetD16(d + 2, 0x1234, 3), CUDA_SUCCESS);
  assert_int_equal(cuMemsetD8(d + 9, 0x5a, 2), CUDA_SUCCESS);
  assert_int_equal(cuMemsetD8(d, 0x77, 0), CUDA_SUCCESS);
  uint8_t b[1000];
  assert_int_equal(cuMemcpyDtoH(b, d, 1000), CUDA_SUCCESS);
  const uint8_t want[16] = {0xef, 0xbe, 0x34, 0x12, 0x34, 0x12, 0x34, 0x12, 0xef, 0x5a, 0x5a, 0xde,
                            0xef, 0xbe, 0xad, 0xde};
  assert_memory_equal(b, want, 16);
  uint32_t last;
  memcpy(&last, b + 996, 4);
  assert_int_equal(last, 0xdeadbeef);
  CUstream s;
  assert_int_equal(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  assert_int_equal(cuMemsetD32Async(d, 7, 250, s), CUDA_SUCCESS);
  assert_int_equal(cuMemsetD16Async(d, 9, 1, s), CUDA_SUCCESS);
  assert_int_equal(cuMemsetD8Async(d + 999, 1, 1, s), CUDA_SUCCESS);
  assert_int_equal(cuStreamSynchronize(s), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(b, d, 1000), CUDA_SUCCESS);
  assert_int_equal(b[0], 9);
  assert_int_equal(b[1], 0);
  assert_int_equal(b[4], 7);
  assert_int_equal(b[999], 1);
  assert_int_equal(cuStreamDestroy(s), CUDA_SUCCESS);
  assert_int_equal(cuMemFree(d), CUDA_SUCCESS);
}

static void test_pinned_and_attributes(void **state) {
  void *hp = NULL;
  CUdeviceptr d = 0, base = 0;
  size_t sz = 0;
  assert_int_equal(cuMemAlloc(&d, 1000), CUDA_SUCCESS);
  assert_int_equal(cuMemAllocHost(&hp, 100), CUDA_SUCCESS);
  assert_int_equal(cuMemHostAlloc(&hp, 100, 0x80), CUDA_ERROR_INVALID_VALUE);
  void *empty = (void *)1;
  assert_int_equal(cuMemAllocHost(&empty, 0), CUDA_SUCCESS);
  assert_int_equal(cuMemFreeHost(empty), CUDA_SUCCESS);
  unsigned mt = 0;
  assert_int_equal(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d), CUDA_SUCCESS);
  assert_int_equal(mt, CU_MEMORYTYPE_DEVICE);
  assert_int_equal(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)hp), CUDA_SUCCESS);
  assert_int_equal(mt, CU_MEMORYTYPE_HOST);
  char stackbuf[8];
  assert_int_equal(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)stackbuf),
                   CUDA_ERROR_INVALID_VALUE);
  CUcontext pc = NULL;
  assert_int_equal(cuPointerGetAttribute(&pc, CU_POINTER_ATTRIBUTE_CONTEXT, d + 5), CUDA_SUCCESS);
  assert_ptr_equal(pc, ctx);
  CUdeviceptr start = 0;
  assert_int_equal(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d + 5), CUDA_SUCCESS);
  assert_int_equal(start, d);
  int ord = -1;
  assert_int_equal(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d), CUDA_SUCCESS);
  assert_int_equal(ord, 0);
  assert_int_equal(cuMemGetAddressRange(&base, &sz, (CUdeviceptr)hp), CUDA_SUCCESS);
  assert_int_equal(sz, 100);
  CUdeviceptr dp = 0;
  assert_int_equal(cuMemHostGetDevicePointer(&dp, hp, 0), CUDA_SUCCESS);
  assert_int_equal(dp, (CUdeviceptr)hp);
  /* Pinned memory is device-visible: async copies in and out, memsets. */
  memset(hp, 3, 100);
  assert_int_equal(cuMemcpyHtoDAsync(d, hp, 100, NULL), CUDA_SUCCESS);
  assert_int_equal(cuMemsetD8((CUdeviceptr)hp, 0, 100), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoHAsync(hp, d, 100, NULL), CUDA_SUCCESS);
  assert_int_equal(cuStreamSynchronize(NULL), CUDA_SUCCESS);
  assert_int_equal(((unsigned char *)hp)[99], 3);
  /* A pinned source is known, so over-reading it is caught too. */
  assert_int_equal(cuMemcpyHtoD(d, hp, 101), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemFreeHost(stackbuf), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemFreeHost((void *)d), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemFree((CUdeviceptr)hp), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemFreeHost(hp), CUDA_SUCCESS);
  assert_int_equal(cuMemFree(d), CUDA_SUCCESS);
}

static void test_host_register(void **state) {
  static char buf[8192];
  CUdeviceptr d;
  assert_int_equal(cuMemAlloc(&d, 4096), CUDA_SUCCESS);
  assert_int_equal(cuMemHostRegister(buf, sizeof buf, CU_MEMHOSTREGISTER_IOMEMORY), CUDA_ERROR_NOT_SUPPORTED);
  assert_int_equal(cuMemHostRegister(buf, sizeof buf, 0), CUDA_SUCCESS);
  assert_int_equal(cuMemHostRegister(buf + 100, 10, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  unsigned mt = 0;
  assert_int_equal(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)buf), CUDA_SUCCESS);
  assert_int_equal(mt, CU_MEMORYTYPE_HOST);
  memset(buf, 9, 4096);
  assert_int_equal(cuMemcpyHtoDAsync(d, buf, 4096, NULL), CUDA_SUCCESS);
  assert_int_equal(cuMemsetD8((CUdeviceptr)buf, 1, 8192), CUDA_SUCCESS); /* device-visible now */
  assert_int_equal(cuMemcpyHtoD(d, buf, 8193), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemFreeHost(buf), CUDA_ERROR_INVALID_VALUE); /* not ours to free */
  assert_int_equal(cuMemHostUnregister(buf + 1), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  assert_int_equal(cuMemHostUnregister(buf), CUDA_SUCCESS);
  assert_int_equal(cuMemHostUnregister(buf), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  unsigned char b[4];
  assert_int_equal(cuMemcpyDtoH(b, d, 4), CUDA_SUCCESS);
  assert_int_equal(b[0], 9);
  assert_int_equal(buf[8191], 1); /* still the caller's, untouched by unregistering */
  assert_int_equal(cuMemFree(d), CUDA_SUCCESS);
  char bus[32];
  assert_int_equal(cuDeviceGetPCIBusId(bus, sizeof bus, 0), CUDA_SUCCESS);
  assert_string_equal(bus, "0000:00:00.0");
}

/* Many threads allocating, copying and freeing at once. */
static void *churn(void *arg) {
  cuCtxSetCurrent(ctx);
  unsigned seed = (unsigned)(uintptr_t)arg;
  char h[512];
  for (int i = 0; i < 300; i++) {
    CUdeviceptr d;
    size_t n = 1 + (rand_r(&seed) % 500);
    if (cuMemAlloc(&d, n) != CUDA_SUCCESS) return (void *)1;
    memset(h, i & 0xff, n);
    if (cuMemcpyHtoD(d, h, n) != CUDA_SUCCESS) return (void *)2;
    char b[512];
    if (cuMemcpyDtoH(b, d, n) != CUDA_SUCCESS || memcmp(b, h, n) != 0) return (void *)3;
    if (cuMemFree(d) != CUDA_SUCCESS) return (void *)4;
  }
  return NULL;
}

static void test_threads(void **state) {
  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(i + 1));
  for (int i = 0; i < 4; i++) {
    void *rc;
    pthread_join(t[i], &rc);
    assert_null(rc);
  }
}

static void test_vmm(void **state) {
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t g = 0;
  assert_int_equal(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  assert_int_equal(g, 2 << 20);
  assert_int_equal(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), CUDA_SUCCESS);
  assert_int_equal(g, 2 << 20);
  CUdeviceptr va = 0, bad = 0;
  char h[64];
  memset(h, 0x42, sizeof h);
  assert_int_equal(cuMemAddressReserve(&va, g * 4, 0, 0, 0), CUDA_SUCCESS);
  assert_int_equal(va % g, 0);
  assert_int_equal(cuMemAddressReserve(&bad, 1000, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  CUmemGenericAllocationHandle h1 = 0, h2 = 0;
  assert_int_equal(cuMemCreate(&h1, 1000, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemCreate(&h1, g, &prop, 0), CUDA_SUCCESS);
  assert_int_equal(cuMemCreate(&h2, g * 2, &prop, 0), CUDA_SUCCESS);
  size_t fr, tot;
  assert_int_equal(cuMemGetInfo(&fr, &tot), CUDA_SUCCESS);
  assert_true(tot - fr >= 3 * g);
  /* Nothing is accessible before map + set access. */
  assert_int_equal(cuMemcpyHtoD(va, h, 16), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemMap(va, g, 0, h1, 0), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyHtoD(va, h, 16), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemMap(va, g, 0, h1, 0), CUDA_ERROR_INVALID_VALUE);      /* already mapped */
  assert_int_equal(cuMemMap(va + g, g, 0, h2, 0), CUDA_ERROR_NOT_SUPPORTED);  /* partial allocation */
  assert_int_equal(cuMemMap(va + g, g * 2, 0, h2, 0), CUDA_SUCCESS);
  assert_int_equal(cuMemMap(va + g * 3, g * 2, 0, h1, 0), CUDA_ERROR_INVALID_VALUE); /* past the reservation */
  CUmemAccessDesc acc;
  memset(&acc, 0, sizeof acc);
  acc.location = prop.location;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  assert_int_equal(cuMemSetAccess(va, g, &acc, 1), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyHtoD(va, h, 16), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyHtoD(va + g - 8, h, 16), CUDA_ERROR_INVALID_VALUE); /* runs into a piece without access */
  assert_int_equal(cuMemSetAccess(va, g * 2, &acc, 1), CUDA_ERROR_INVALID_VALUE); /* cuts h2's mapping */
  CUdeviceptr base;
  size_t sz;
  unsigned char b0[16];
  assert_int_equal(cuMemGetAddressRange(&base, &sz, va + g + 5), CUDA_ERROR_NOT_FOUND);
  assert_int_equal(cuMemSetAccess(va + g, g * 2, &acc, 1), CUDA_SUCCESS);
  assert_int_equal(cuMemGetAddressRange(&base, &sz, va + g + 5), CUDA_SUCCESS);
  assert_int_equal(base, va + g);
  assert_int_equal(sz, 2 * g);
  /* Mappings side by side are one range of addresses, as on a GPU (CUDA's
   * vectorAddMMAP copies across the chunks of its devices): a memset may
   * run from one into the next. */
  assert_int_equal(cuMemsetD8(va, 1, g * 2), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(b0, va + g - 8, 16), CUDA_SUCCESS);
  for (int i = 0; i < 16; i++) assert_int_equal(b0[i], 1);
  assert_int_equal(cuMemsetD8(va + g, 7, g * 2), CUDA_SUCCESS);
  unsigned char b[16];
  assert_int_equal(cuMemcpyDtoH(b, va + 3 * g - 16, 16), CUDA_SUCCESS);
  assert_int_equal(b[15], 7);
  assert_int_equal(cuMemcpyHtoD(va, h, 16), CUDA_SUCCESS); /* the memset above overwrote it */
  assert_int_equal(cuMemcpyDtoH(b, va, 16), CUDA_SUCCESS);
  assert_memory_equal(b, h, 16);
  /* A second mapping of the same physical memory aliases it. */
  CUdeviceptr va2 = 0;
  assert_int_equal(cuMemAddressReserve(&va2, g, 0, 0, 0), CUDA_SUCCESS);
  assert_int_equal(cuMemMap(va2, g, 0, h1, 0), CUDA_SUCCESS);
  assert_int_equal(cuMemSetAccess(va2, g, &acc, 1), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(b, va2, 16), CUDA_SUCCESS);
  assert_memory_equal(b, h, 16);
  /* Read-only access refuses writes. */
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
  assert_int_equal(cuMemSetAccess(va2, g, &acc, 1), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(b, va2, 16), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyHtoD(va2, h, 16), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemUnmap(va2, g), CUDA_SUCCESS);
  assert_int_equal(cuMemAddressFree(va2, g), CUDA_SUCCESS);
  /* Unmapping must cover whole mappings. */
  assert_int_equal(cuMemUnmap(va + 1, g), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemUnmap(va, g / 2), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemUnmap(va + g, g), CUDA_ERROR_INVALID_VALUE);
  /* Released memory stays until unmapped. */
  assert_int_equal(cuMemRelease(h1), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(b, va, 16), CUDA_SUCCESS);
  assert_int_equal(cuMemRelease(h1), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemUnmap(va, g), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyHtoD(va, h, 16), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemAddressFree(va, g * 4), CUDA_ERROR_INVALID_VALUE); /* h2 still mapped */
  assert_int_equal(cuMemUnmap(va + g, g * 2), CUDA_SUCCESS);
  assert_int_equal(cuMemRelease(h2), CUDA_SUCCESS);
  assert_int_equal(cuMemRelease(h2), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuMemAddressFree(va, g * 4), CUDA_SUCCESS);
  assert_int_equal(cuMemAddressFree(va, g * 4), CUDA_ERROR_INVALID_VALUE);
  size_t fr2;
  assert_int_equal(cuMemGetInfo(&fr2, &tot), CUDA_SUCCESS);
  assert_int_equal(fr2, fr + 3 * g);
  /* Sub-allocating a big reservation, the way the client does. */
  assert_int_equal(cuMemAddressReserve(&va, g * 8, 0, 0, 0), CUDA_SUCCESS);
  CUmemGenericAllocationHandle hs[3];
  for (int i = 0; i < 3; i++) {
    assert_int_equal(cuMemCreate(&hs[i], g, &prop, 0), CUDA_SUCCESS);
    assert_int_equal(cuMemMap(va + i * g, g, 0, hs[i], 0), CUDA_SUCCESS);
    assert_int_equal(cuMemRelease(hs[i]), CUDA_SUCCESS);
  }
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  assert_int_equal(cuMemSetAccess(va, g * 3, &acc, 1), CUDA_SUCCESS);
  assert_int_equal(cuMemsetD32(va + 2 * g + 64, 5, 4), CUDA_SUCCESS);
  assert_int_equal(cuMemUnmap(va, g * 3), CUDA_SUCCESS);
  assert_int_equal(cuMemAddressFree(va, g * 8), CUDA_SUCCESS);
}

int main(void) {
  setenv("RGPU_SOFTGPU_MEM", "64M", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_alloc_free), cmocka_unit_test(test_limits),
      cmocka_unit_test(test_bounds),     cmocka_unit_test(test_memset),
      cmocka_unit_test(test_pinned_and_attributes), cmocka_unit_test(test_host_register),
      cmocka_unit_test(test_threads),
      cmocka_unit_test(test_vmm),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
