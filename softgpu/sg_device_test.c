/* softgpu: devices, attributes, contexts, error texts, cuGetProcAddress.
 * Expected values follow the real driver (softgpu/tools/probe_h200.txt). */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cuda.h>
#include <pthread.h>
#include <unistd.h>

#include "softgpu.h"

static void test_before_init(void **state) {
  CUcontext c = (CUcontext)1;
  int v = 0;
  const char *s = NULL;
  /* Only version and error texts work before cuInit. */
  assert_int_equal(cuCtxGetCurrent(&c), CUDA_ERROR_NOT_INITIALIZED);
  assert_int_equal(cuDeviceGetCount(&v), CUDA_ERROR_NOT_INITIALIZED);
  assert_int_equal(cuMemAlloc(&(CUdeviceptr){0}, 16), CUDA_ERROR_NOT_INITIALIZED);
  assert_int_equal(cuDriverGetVersion(&v), CUDA_SUCCESS);
  assert_int_equal(v, 13000);
  assert_int_equal(cuGetErrorString(CUDA_ERROR_ILLEGAL_ADDRESS, &s), CUDA_SUCCESS);
  assert_string_equal(s, "an illegal memory access was encountered");
  assert_int_equal(cuInit(1), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuInit(0), CUDA_SUCCESS);
  assert_int_equal(cuInit(0), CUDA_SUCCESS);
  assert_int_equal(sgIsSoftgpu(), 1);
}

static void test_devices(void **state) {
  int n = 0;
  CUdevice d = -1;
  assert_int_equal(cuDeviceGetCount(&n), CUDA_SUCCESS);
  assert_int_equal(n, 2); /* RGPU_SOFTGPU_DEVICES=2 set in main */
  assert_int_equal(cuDeviceGet(&d, 1), CUDA_SUCCESS);
  assert_int_equal(d, 1);
  assert_int_equal(cuDeviceGet(&d, 2), CUDA_ERROR_INVALID_DEVICE);
  assert_int_equal(cuDeviceGet(&d, -1), CUDA_ERROR_INVALID_DEVICE);
  assert_int_equal(cuDeviceGet(NULL, 0), CUDA_ERROR_INVALID_VALUE);
  char name[64];
  assert_int_equal(cuDeviceGetName(name, sizeof name, 0), CUDA_SUCCESS);
  assert_non_null(strstr(name, "softgpu"));
  assert_int_equal(cuDeviceGetName(name, 4, 0), CUDA_SUCCESS);
  assert_int_equal(strlen(name), 3);
  assert_int_equal(cuDeviceGetName(name, 0, 0), CUDA_ERROR_INVALID_VALUE);
  CUuuid u0, u1;
  assert_int_equal(cuDeviceGetUuid(&u0, 0), CUDA_SUCCESS);
  assert_int_equal(cuDeviceGetUuid(&u1, 1), CUDA_SUCCESS);
  assert_memory_not_equal(u0.bytes, u1.bytes, 16);
  size_t mem = 0;
  assert_int_equal(cuDeviceTotalMem(&mem, 0), CUDA_SUCCESS);
  assert_int_equal(mem, (size_t)96 << 20); /* RGPU_SOFTGPU_MEM=96M */
  assert_int_equal(cuDeviceTotalMem(&mem, 5), CUDA_ERROR_INVALID_DEVICE);
}

static int attr(CUdevice_attribute a) {
  int v = -12345;
  assert_int_equal(cuDeviceGetAttribute(&v, a, 0), CUDA_SUCCESS);
  return v;
}

/* Peer access between the two devices (issue 19): CUDA's answers and
 * errors, and cuMemcpyPeer(Async) between their allocations. */
static void test_peer(void **state) {
  (void)state;
  int can = -1;
  assert_int_equal(cuDeviceCanAccessPeer(&can, 0, 1), CUDA_SUCCESS);
  assert_int_equal(can, 1);
  assert_int_equal(cuDeviceCanAccessPeer(&can, 1, 1), CUDA_SUCCESS);
  assert_int_equal(can, 0);
  assert_int_equal(cuDeviceCanAccessPeer(&can, 0, 2), CUDA_ERROR_INVALID_DEVICE);
  assert_int_equal(cuDeviceCanAccessPeer(NULL, 0, 1), CUDA_ERROR_INVALID_VALUE);
  CUcontext c0, c1;
  assert_int_equal(cuDevicePrimaryCtxRetain(&c0, 0), CUDA_SUCCESS);
  assert_int_equal(cuDevicePrimaryCtxRetain(&c1, 1), CUDA_SUCCESS);
  assert_int_equal(cuCtxSetCurrent(c0), CUDA_SUCCESS);
  assert_int_equal(cuCtxEnablePeerAccess(c0, 0), CUDA_ERROR_INVALID_DEVICE);
  assert_int_equal(cuCtxEnablePeerAccess(c1, 1), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuCtxEnablePeerAccess(NULL, 0), CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(cuCtxDisablePeerAccess(c1), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
  assert_int_equal(cuCtxEnablePeerAccess(c1, 0), CUDA_SUCCESS);
  assert_int_equal(cuCtxEnablePeerAccess(c1, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
  /* Each direction is its own. */
  assert_int_equal(cuCtxSetCurrent(c1), CUDA_SUCCESS);
  assert_int_equal(cuCtxDisablePeerAccess(c0), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
  assert_int_equal(cuCtxSetCurrent(c0), CUDA_SUCCESS);
  assert_int_equal(cuCtxDisablePeerAccess(c1), CUDA_SUCCESS);

  CUdeviceptr a, b;
  assert_int_equal(cuMemAlloc(&a, 1000), CUDA_SUCCESS);
  assert_int_equal(cuCtxSetCurrent(c1), CUDA_SUCCESS);
  assert_int_equal(cuMemAlloc(&b, 1000), CUDA_SUCCESS);
  unsigned char src[1000], back[1000];
  for (int i = 0; i < 1000; i++) src[i] = (unsigned char)(i * 3 + 1);
  assert_int_equal(cuMemcpyHtoD(a, src, sizeof src), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyPeer(b, c1, a, c0, 1000), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(back, b, 1000), CUDA_SUCCESS);
  assert_memory_equal(back, src, 1000);
  CUstream s;
  assert_int_equal(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  assert_int_equal(cuMemsetD8(a, 0, 1000), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyPeerAsync(a + 1, c0, b, c1, 999, s), CUDA_SUCCESS);
  assert_int_equal(cuStreamSynchronize(s), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(back, a, 1000), CUDA_SUCCESS);
  assert_int_equal(back[0], 0);
  assert_memory_equal(back + 1, src, 999);
  assert_int_equal(cuMemcpyPeer(b, NULL, a, c0, 10), CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(cuMemcpyPeer(b, c1, a, c0, 2000), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuStreamDestroy(s), CUDA_SUCCESS);
  assert_int_equal(cuMemFree(b), CUDA_SUCCESS);
  assert_int_equal(cuCtxSetCurrent(c0), CUDA_SUCCESS);
  assert_int_equal(cuMemFree(a), CUDA_SUCCESS);
  /* A reset forgets the peers the context had. */
  assert_int_equal(cuCtxEnablePeerAccess(c1, 0), CUDA_SUCCESS);
  assert_int_equal(cuDevicePrimaryCtxReset(0), CUDA_SUCCESS);
  assert_int_equal(cuDevicePrimaryCtxRetain(&c0, 0), CUDA_SUCCESS);
  assert_int_equal(cuCtxSetCurrent(c0), CUDA_SUCCESS);
  assert_int_equal(cuCtxDisablePeerAccess(c1), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
  assert_int_equal(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  assert_int_equal(cuDevicePrimaryCtxRelease(1), CUDA_SUCCESS);
  assert_int_equal(cuCtxSetCurrent(NULL), CUDA_SUCCESS);
}

static void test_attributes(void **state) {
  assert_int_equal(attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE), 32);
  assert_int_equal(attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK), 1024);
  assert_int_equal(attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X), 1024);
  assert_int_equal(attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y), 1024);
  assert_int_equal(attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z), 64);
  assert_int_equal(attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X), 2147483647);
  assert_int_equal(attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y), 65535);
  assert_int_equal(attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z), 65535);
  assert_int_equal(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK), 49152);
  assert_int_equal(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN), 227 * 1024);
  assert_int_equal(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), 7);
  assert_int_equal(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR), 5);
  assert_int_equal(attr(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING), 1);
  assert_int_equal(attr(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS), 1);
  assert_int_equal(attr(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED), 1);
  assert_int_equal(attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), (int)sysconf(_SC_NPROCESSORS_ONLN));
  assert_true(attr(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT) >= 1);
  assert_true(attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE) > 0);
  assert_true(attr(CU_DEVICE_ATTRIBUTE_CLOCK_RATE) > 0);
  assert_true(attr(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE) > 0);
  assert_true(attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH) > 0);
  /* Features softgpu does not implement are reported absent. */
  assert_int_equal(attr(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY), 0);
  assert_int_equal(attr(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED), 0);
  assert_int_equal(attr(CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED), 1);
  /* Every attribute 1..147 the 13.0 header defines answers; others do not. */
  for (int a = 1; a <= 147; a++) {
    int v;
    assert_int_equal(cuDeviceGetAttribute(&v, (CUdevice_attribute)a, 0), CUDA_SUCCESS);
  }
  int v;
  assert_int_equal(cuDeviceGetAttribute(&v, (CUdevice_attribute)0, 0), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuDeviceGetAttribute(&v, (CUdevice_attribute)148, 0), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, 0), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 9), CUDA_ERROR_INVALID_DEVICE);
  assert_int_equal(cuDeviceGetAttribute(NULL, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0), CUDA_ERROR_INVALID_VALUE);
}

static void test_primary_context(void **state) {
  unsigned flags = 99;
  int active = -1;
  CUcontext c = NULL, cur = (CUcontext)1, c2 = NULL;
  assert_int_equal(cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
  assert_int_equal(active, 0);
  assert_int_equal(cuDevicePrimaryCtxRelease(0), CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(cuDevicePrimaryCtxRetain(&c, 0), CUDA_SUCCESS);
  assert_non_null(c);
  assert_int_equal(cuDevicePrimaryCtxRetain(&c2, 0), CUDA_SUCCESS);
  assert_ptr_equal(c, c2);
  assert_int_equal(cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
  assert_int_equal(active, 1);
  /* Retaining does not make it current. */
  assert_int_equal(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  assert_null(cur);
  assert_int_equal(cuMemAlloc(&(CUdeviceptr){0}, 16), CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(cuCtxSetCurrent(c), CUDA_SUCCESS);
  CUdevice d = -1;
  assert_int_equal(cuCtxGetDevice(&d), CUDA_SUCCESS);
  assert_int_equal(d, 0);
  unsigned api = 0;
  assert_int_equal(cuCtxGetApiVersion(c, &api), CUDA_SUCCESS);
  assert_int_equal(api, 3020);
  int lo = 1, hi = 1;
  assert_int_equal(cuCtxGetStreamPriorityRange(&lo, &hi), CUDA_SUCCESS);
  assert_int_equal(lo, 0);
  assert_int_equal(hi, -5);
  assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
  size_t lim = 0;
  assert_int_equal(cuCtxGetLimit(&lim, CU_LIMIT_PRINTF_FIFO_SIZE), CUDA_SUCCESS);
  assert_int_equal(lim, 1 << 20);
  assert_int_equal(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 4096), CUDA_SUCCESS);
  assert_int_equal(cuCtxGetLimit(&lim, CU_LIMIT_STACK_SIZE), CUDA_SUCCESS);
  assert_int_equal(lim, 4096);
  assert_int_equal(cuCtxSetLimit((CUlimit)77, 1), CUDA_ERROR_INVALID_VALUE);
  CUfunc_cache cc = (CUfunc_cache)9;
  assert_int_equal(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_L1), CUDA_SUCCESS);
  assert_int_equal(cuCtxGetCacheConfig(&cc), CUDA_SUCCESS);
  assert_int_equal(cc, CU_FUNC_CACHE_PREFER_L1);
  assert_int_equal(cuDevicePrimaryCtxSetFlags(0, CU_CTX_SCHED_BLOCKING_SYNC), CUDA_SUCCESS);
  assert_int_equal(cuDevicePrimaryCtxSetFlags(0, 0x3), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
  assert_int_equal(flags, CU_CTX_SCHED_BLOCKING_SYNC);

  /* Two releases deactivate it; the still-current handle then reports a
   * destroyed context, and a retain revives it. */
  assert_int_equal(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  assert_int_equal(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  assert_int_equal(cuMemAlloc(&(CUdeviceptr){0}, 16), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  assert_int_equal(cuCtxSynchronize(), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  assert_int_equal(cuDevicePrimaryCtxRetain(&c2, 0), CUDA_SUCCESS);
  assert_ptr_equal(c, c2);
  CUdeviceptr p = 0;
  assert_int_equal(cuMemAlloc(&p, 16), CUDA_SUCCESS);
  /* Reset frees its memory and deactivates it. */
  assert_int_equal(cuDevicePrimaryCtxReset(0), CUDA_SUCCESS);
  assert_int_equal(cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
  assert_int_equal(active, 0);
  assert_int_equal(flags, 0);
  assert_int_equal(cuMemFree(p), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  assert_int_equal(cuDevicePrimaryCtxRetain(&c2, 0), CUDA_SUCCESS);
  assert_int_equal(cuMemGetAddressRange(NULL, NULL, p), CUDA_ERROR_NOT_FOUND);
  assert_int_equal(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  assert_int_equal(cuCtxSetCurrent(NULL), CUDA_SUCCESS);
}

static void test_context_stack(void **state) {
  CUcontext a = NULL, b = NULL, cur = NULL, popped = NULL;
  assert_int_equal(cuCtxCreate(&a, NULL, 0, 0), CUDA_SUCCESS);
  assert_int_equal(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  assert_ptr_equal(cur, a);
  assert_int_equal(cuCtxCreate(&b, NULL, 0, 1), CUDA_SUCCESS);
  CUdevice d = -1;
  assert_int_equal(cuCtxGetDevice(&d), CUDA_SUCCESS);
  assert_int_equal(d, 1);
  assert_int_equal(cuCtxPopCurrent(&popped), CUDA_SUCCESS);
  assert_ptr_equal(popped, b);
  assert_int_equal(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  assert_ptr_equal(cur, a);
  assert_int_equal(cuCtxPushCurrent(b), CUDA_SUCCESS);
  assert_int_equal(cuCtxPushCurrent(NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuCtxCreate(&b, NULL, 0x1000, 0), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuCtxCreate(&b, NULL, 0, 7), CUDA_ERROR_INVALID_DEVICE);
  CUcontext bb = NULL;
  assert_int_equal(cuCtxGetCurrent(&bb), CUDA_SUCCESS);
  /* Destroying pops it from this thread; the handle is dead afterwards. */
  assert_int_equal(cuCtxDestroy(bb), CUDA_SUCCESS);
  assert_int_equal(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  assert_ptr_equal(cur, a);
  assert_int_equal(cuCtxDestroy(bb), CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(cuCtxSetCurrent(bb), CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(cuCtxDestroy(NULL), CUDA_ERROR_INVALID_VALUE);
  CUcontext prim;
  assert_int_equal(cuDevicePrimaryCtxRetain(&prim, 0), CUDA_SUCCESS);
  assert_int_equal(cuCtxDestroy(prim), CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  assert_int_equal(cuCtxDestroy(a), CUDA_SUCCESS);
  assert_int_equal(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  assert_null(cur);
  assert_int_equal(cuCtxPopCurrent(&popped), CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(cuCtxGetDevice(&d), CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
}

/* The context stack is per thread. */
static void *other_thread(void *arg) {
  CUcontext cur = (CUcontext)1;
  cuCtxGetCurrent(&cur);
  *(CUcontext *)arg = cur;
  return NULL;
}

static void test_context_per_thread(void **state) {
  CUcontext a = NULL, seen = (CUcontext)1;
  assert_int_equal(cuCtxCreate(&a, NULL, 0, 0), CUDA_SUCCESS);
  pthread_t t;
  pthread_create(&t, NULL, other_thread, &seen);
  pthread_join(t, NULL);
  assert_null(seen);
  assert_int_equal(cuCtxDestroy(a), CUDA_SUCCESS);
}

static void test_error_texts(void **state) {
  const char *n = NULL, *s = NULL;
  assert_int_equal(cuGetErrorName(CUDA_ERROR_INVALID_VALUE, &n), CUDA_SUCCESS);
  assert_string_equal(n, "CUDA_ERROR_INVALID_VALUE");
  assert_int_equal(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &s), CUDA_SUCCESS);
  assert_string_equal(s, "invalid argument");
  assert_int_equal(cuGetErrorString(CUDA_ERROR_NO_BINARY_FOR_GPU, &s), CUDA_SUCCESS);
  assert_string_equal(s, "no kernel image is available for execution on the device");
  assert_int_equal(cuGetErrorString(CUDA_SUCCESS, &s), CUDA_SUCCESS);
  assert_string_equal(s, "no error");
  n = (const char *)1;
  assert_int_equal(cuGetErrorName((CUresult)12345, &n), CUDA_ERROR_INVALID_VALUE);
  assert_ptr_equal(n, (const char *)1);
  assert_int_equal(cuGetErrorName(CUDA_SUCCESS, NULL), CUDA_ERROR_INVALID_VALUE);
  /* Every code the header defines has a name equal to its enumerator. */
  int codes[] = {0, 1, 2, 3, 100, 101, 200, 209, 218, 400, 500, 600, 700, 709, 719, 801, 999};
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
    assert_int_equal(cuGetErrorName((CUresult)codes[i], &n), CUDA_SUCCESS);
    assert_int_equal(strncmp(n, "CUDA_", 5), 0);
  }
}

static void test_proc_address(void **state) {
  void *fn = NULL;
  CUdriverProcAddressQueryResult st = 99;
  assert_int_equal(cuGetProcAddress("cuMemAlloc", &fn, 13000, 0, &st), CUDA_SUCCESS);
  assert_int_equal(st, CU_GET_PROC_ADDRESS_SUCCESS);
  assert_ptr_equal(fn, (void *)cuMemAlloc);
  assert_int_equal(cuGetProcAddress("cuLaunchKernel", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st),
                   CUDA_SUCCESS);
  assert_ptr_not_equal(fn, (void *)cuLaunchKernel);
  /* With a status pointer 13.0 answers CUDA_SUCCESS and says why in it. */
  assert_int_equal(cuGetProcAddress("cuFuncGetParamInfo", &fn, 12000, 0, &st), CUDA_SUCCESS);
  assert_int_equal(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  assert_null(fn);
  assert_int_equal(cuGetProcAddress("cuNoSuchThing", &fn, 13000, 0, &st), CUDA_SUCCESS);
  assert_int_equal(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  assert_null(fn);
  assert_int_equal(cuGetProcAddress("cuNoSuchThing", &fn, 13000, 0, NULL), CUDA_ERROR_NOT_FOUND);
  assert_int_equal(cuGetProcAddress("cuInit", &fn, 13000, 8, &st), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuGetProcAddress("cuCtxCreate", &fn, 13000, 0, &st), CUDA_SUCCESS);
  assert_ptr_equal(fn, (void *)cuCtxCreate);
  assert_int_equal(cuGetProcAddress("cuCtxCreate", &fn, 12000, 0, &st), CUDA_SUCCESS);
  assert_ptr_not_equal(fn, (void *)cuCtxCreate);
  /* Unimplemented exports answer NOT_SUPPORTED. */
  const void *tbl = NULL;
  CUuuid id = {{0}};
  assert_int_equal(cuGetExportTable(&tbl, &id), CUDA_ERROR_NOT_SUPPORTED);

  /* The server's way in: dlopen + dlsym of the names cuda.h maps to. */
  void *h = dlopen("libsoftgpu.so", RTLD_NOW | RTLD_LOCAL);
  assert_non_null(h);
  const char *names[] = {"cuInit", "cuMemAlloc_v2", "cuCtxCreate_v4", "cuEventElapsedTime_v2",
                         "cuGetProcAddress_v2", "cuLaunchKernel", "cuMemcpyHtoD_v2", "sgIsSoftgpu",
                         "sgSetPrintHandler", "sgMemCheck", "cuModuleGetGlobal_v2",
                         "cuMemAddressReserve"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!dlsym(h, names[i])) fail_msg("libsoftgpu.so does not export %s", names[i]);
  assert_null(dlsym(h, "rgpu_fatbin_open")); /* internals stay private */
  dlclose(h);
}

int main(void) {
  setenv("RGPU_SOFTGPU_DEVICES", "2", 1);
  setenv("RGPU_SOFTGPU_MEM", "96M", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_before_init),     cmocka_unit_test(test_devices),
      cmocka_unit_test(test_attributes),      cmocka_unit_test(test_primary_context),
      cmocka_unit_test(test_context_stack),   cmocka_unit_test(test_context_per_thread),
      cmocka_unit_test(test_error_texts),     cmocka_unit_test(test_proc_address),
      cmocka_unit_test(test_peer),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
