/* The driver facade in a live session (ctest runs it under `rgpu run` on
 * softgpu): behaviour that is rgpu's own and so has no place in the e2e
 * programs, which must also pass natively (handle checks, the refused and
 * stubbed functions, cuGetExportTable), and the rules shared with the
 * runtime (primary context binding, the runtime's last error). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

static void test_init(void **state) {
  (void)state;
  CUcontext c;
  assert_int_equal(cuCtxGetCurrent(&c), CUDA_ERROR_NOT_INITIALIZED);
  assert_int_equal(cuInit(1), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuInit(0), CUDA_SUCCESS);
  assert_int_equal(cuCtxGetCurrent(&c), CUDA_SUCCESS);
  assert_null(c);
}

static void test_runtime_binds_primary(void **state) {
  (void)state;
  unsigned flags;
  int active = -1;
  assert_int_equal(cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
  assert_int_equal(active, 0);
  assert_int_equal(cudaSetDevice(0), cudaSuccess);
  assert_int_equal(cudaFree(NULL), cudaSuccess);
  assert_int_equal(cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
  assert_int_equal(active, 1);
  CUcontext cur = NULL, primary = NULL;
  assert_int_equal(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  assert_int_equal(cuDevicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
  assert_ptr_equal(cur, primary);
  /* Popping the runtime-bound primary context empties the stack; the next
   * runtime call binds it again. */
  CUcontext popped = NULL;
  assert_int_equal(cuCtxPopCurrent(&popped), CUDA_SUCCESS);
  assert_ptr_equal(popped, primary);
  assert_int_equal(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  assert_null(cur);
  assert_int_equal(cuCtxPopCurrent(&popped), CUDA_ERROR_INVALID_CONTEXT);
  void *p = NULL;
  assert_int_equal(cudaMalloc(&p, 256), cudaSuccess);
  assert_int_equal(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  assert_ptr_equal(cur, primary);
  assert_int_equal(cuMemFree((CUdeviceptr)(uintptr_t)p), CUDA_SUCCESS);
  /* The primary context's flags are the runtime's device flags. */
  assert_int_equal(cuDevicePrimaryCtxSetFlags(0, CU_CTX_SCHED_BLOCKING_SYNC), CUDA_SUCCESS);
  unsigned rt_flags = 0;
  assert_int_equal(cudaGetDeviceFlags(&rt_flags), cudaSuccess);
  assert_int_equal(rt_flags & cudaDeviceScheduleMask, cudaDeviceScheduleBlockingSync);
  assert_int_equal(cudaSetDeviceFlags(cudaDeviceScheduleSpin), cudaSuccess);
  assert_int_equal(cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
  assert_int_equal(flags & CU_CTX_SCHED_MASK, CU_CTX_SCHED_SPIN);
  assert_int_equal(cuDevicePrimaryCtxSetFlags(0, 0xffff), CUDA_ERROR_INVALID_VALUE);
  unsigned v = 0;
  assert_int_equal(cuCtxGetApiVersion(NULL, &v), CUDA_SUCCESS);
  assert_int_equal(v, 3020);
  assert_int_equal(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  assert_int_equal(cuDevicePrimaryCtxRelease(0), CUDA_ERROR_INVALID_CONTEXT);
}

static void test_last_error_untouched(void **state) {
  (void)state;
  unsigned word = 1;
  assert_int_equal(cudaGetLastError(), cudaSuccess);
  /* A driver failure is not the runtime's last error... */
  assert_int_equal(cuMemcpyHtoD((CUdeviceptr)16, &word, 4), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cudaPeekAtLastError(), cudaSuccess);
  /* ...and a runtime failure stays the runtime's through driver calls. */
  assert_int_equal(cudaMemcpy((void *)16, &word, 4, cudaMemcpyHostToDevice),
                   cudaErrorInvalidValue);
  CUdeviceptr d;
  assert_int_equal(cuMemAlloc(&d, 64), CUDA_SUCCESS);
  assert_int_equal(cuMemFree(d), CUDA_SUCCESS);
  assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
  assert_int_equal(cudaGetLastError(), cudaSuccess);
}

static void test_bad_handles(void **state) {
  (void)state;
  int not_a_context = 0;
  assert_int_equal(cuCtxPushCurrent((CUcontext)&not_a_context), CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(cuCtxSetCurrent((CUcontext)&not_a_context), CUDA_ERROR_INVALID_CONTEXT);
  CUcontext ctx, primary, cur;
  assert_int_equal(cuCtxCreate(&ctx, NULL, 0, 0), CUDA_SUCCESS);
  assert_int_equal(cuCtxDestroy(ctx), CUDA_SUCCESS);
  assert_int_equal(cuCtxPushCurrent(ctx), CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(cuCtxDestroy(ctx), CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(cuDevicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
  assert_int_equal(cuCtxDestroy(primary), CUDA_ERROR_INVALID_CONTEXT);
  assert_int_equal(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  assert_int_equal(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  assert_ptr_equal(cur, primary); /* the destroyed context left the stack */
  CUdevice dev;
  assert_int_equal(cuDeviceGet(&dev, 1000), CUDA_ERROR_INVALID_DEVICE);
  unsigned flags;
  int active;
  assert_int_equal(cuDevicePrimaryCtxGetState(1000, &flags, &active), CUDA_ERROR_INVALID_DEVICE);
}

static void test_refused_and_stubbed(void **state) {
  (void)state;
  assert_int_equal(cuMemAllocManaged(NULL, 4096, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE);
  CUmemGenericAllocationHandle h;
  CUmemAllocationProp prop = {0};
  assert_int_equal(cuMemCreate(&h, 1 << 21, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  /* Host memory of the server is not the program's: refused before
   * anything is sent, as is exporting a shareable handle (it names memory
   * of one machine's processes). */
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
  assert_int_equal(cuMemCreate(&h, 1 << 21, &prop, 0), CUDA_ERROR_NOT_SUPPORTED);
  int fd = -1;
  assert_int_equal(cuMemExportToShareableHandle(&fd, 1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                   CUDA_ERROR_NOT_SUPPORTED);
  CUipcMemHandle ipc;
  assert_int_equal(cuIpcGetMemHandle(&ipc, 0), CUDA_ERROR_NOT_SUPPORTED);
  CUuuid id = {{0}};
  const void *table = (const void *)1;
  assert_int_equal(cuGetExportTable(&table, &id), CUDA_ERROR_NOT_FOUND);
  assert_null(table);
  const char *name = NULL;
  assert_int_equal(cuGetErrorName(CUDA_ERROR_NOT_SUPPORTED, &name), CUDA_SUCCESS);
  assert_string_equal(name, "CUDA_ERROR_NOT_SUPPORTED");
}

static void test_entry_points_agree(void **state) {
  (void)state;
  void *from_driver = NULL, *from_runtime = NULL;
  CUdriverProcAddressQueryResult q;
  enum cudaDriverEntryPointQueryResult rq;
  assert_int_equal(cuGetProcAddress("cuCtxGetCurrent", &from_driver, 13000, 0, &q), CUDA_SUCCESS);
  assert_int_equal(cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &from_runtime, 13000,
                                                    cudaEnableDefault, &rq),
                   cudaSuccess);
  assert_non_null(from_driver);
  assert_ptr_equal(from_driver, from_runtime);
  /* Both hand out libcuda.so.1's own export, the one the program links. */
  assert_ptr_equal(from_driver, (void *)&cuCtxGetCurrent);
  void *alloc = NULL;
  assert_int_equal(cuGetProcAddress("cuMemAlloc", &alloc, 13000, 0, &q), CUDA_SUCCESS);
  assert_ptr_equal(alloc, (void *)&cuMemAlloc_v2);
  CUcontext cur = (CUcontext)1;
  assert_int_equal(((CUresult(*)(CUcontext *))from_driver)(&cur), CUDA_SUCCESS);
  assert_non_null(cur);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_init),          cmocka_unit_test(test_runtime_binds_primary),
      cmocka_unit_test(test_last_error_untouched), cmocka_unit_test(test_bad_handles),
      cmocka_unit_test(test_refused_and_stubbed),  cmocka_unit_test(test_entry_points_agree),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
