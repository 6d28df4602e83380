/* Unit tests of the driver facade's pure parts: the per-thread context
 * stack, and cuGetProcAddress over the generated table (through the
 * exported rgpu_drv_cuGetProcAddress_v2 of the built libcudart.so.13; the
 * lookup needs no session). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "rgpu_drv_internal.h"

static void proc(const char *name, int version, cuuint64_t flags, void *want, CUresult want_rc,
                 CUdriverProcAddressQueryResult want_status) {
  void *fn = (void *)1;
  CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
  CUresult rc = rgpu_drv_cuGetProcAddress_v2(name, &fn, version, flags, &st);
  assert_int_equal(rc, want_rc);
  assert_int_equal(st, want_status);
  assert_ptr_equal(fn, want);
}

static void test_proc_versions(void **state) {
  (void)state;
  /* cuMemAlloc: the 2.0 API until 3.2, then cuMemAlloc_v2. */
  proc("cuMemAlloc", 2000, 0, (void *)rgpu_drv_cuMemAlloc, CUDA_SUCCESS,
       CU_GET_PROC_ADDRESS_SUCCESS);
  proc("cuMemAlloc", 3020, 0, (void *)rgpu_drv_cuMemAlloc_v2, CUDA_SUCCESS,
       CU_GET_PROC_ADDRESS_SUCCESS);
  proc("cuMemAlloc", 13000, 0, (void *)rgpu_drv_cuMemAlloc_v2, CUDA_SUCCESS,
       CU_GET_PROC_ADDRESS_SUCCESS);
  proc("cuCtxCreate", 12050, 0, (void *)rgpu_drv_cuCtxCreate_v4, CUDA_SUCCESS,
       CU_GET_PROC_ADDRESS_SUCCESS);
  proc("cuCtxCreate", 12000, 0, (void *)rgpu_drv_cuCtxCreate_v3, CUDA_SUCCESS,
       CU_GET_PROC_ADDRESS_SUCCESS);
  proc("cuGetProcAddress", 12000, 0, (void *)rgpu_drv_cuGetProcAddress_v2, CUDA_SUCCESS,
       CU_GET_PROC_ADDRESS_SUCCESS);
  proc("cuEventElapsedTime", 13000, 0, (void *)rgpu_drv_cuEventElapsedTime_v2, CUDA_SUCCESS,
       CU_GET_PROC_ADDRESS_SUCCESS);
}

static void test_proc_per_thread(void **state) {
  (void)state;
  const cuuint64_t pt = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  const cuuint64_t legacy = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
  proc("cuMemcpyHtoD", 12000, pt, (void *)rgpu_drv_cuMemcpyHtoD_v2_ptds, CUDA_SUCCESS,
       CU_GET_PROC_ADDRESS_SUCCESS);
  proc("cuMemcpyHtoD", 12000, legacy, (void *)rgpu_drv_cuMemcpyHtoD_v2, CUDA_SUCCESS,
       CU_GET_PROC_ADDRESS_SUCCESS);
  proc("cuMemcpyHtoDAsync", 12000, pt, (void *)rgpu_drv_cuMemcpyHtoDAsync_v2_ptsz,
       CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS);
  proc("cuStreamSynchronize", 12000, pt, (void *)rgpu_drv_cuStreamSynchronize_ptsz,
       CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS);
  proc("cuMemsetD32Async", 12000, pt, (void *)rgpu_drv_cuMemsetD32Async_ptsz, CUDA_SUCCESS,
       CU_GET_PROC_ADDRESS_SUCCESS);
  proc("cuStreamBeginCapture", 12000, pt, (void *)rgpu_drv_cuStreamBeginCapture_v2_ptsz,
       CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS);
  /* No per-thread form: the plain one. */
  proc("cuMemAlloc", 12000, pt, (void *)rgpu_drv_cuMemAlloc_v2, CUDA_SUCCESS,
       CU_GET_PROC_ADDRESS_SUCCESS);
}

static void test_proc_not_found(void **state) {
  (void)state;
  proc("cuNoSuchFunction", 13000, 0, NULL, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  /* Exact export names are not API names. */
  proc("cuMemAlloc_v2", 13000, 0, NULL, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  /* cuMemAllocAsync appeared in 11.2. */
  proc("cuMemAllocAsync", 11000, 0, NULL, CUDA_SUCCESS,
       CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  void *fn;
  /* The v1 call has no status to read: the code says it. */
  assert_int_equal(rgpu_drv_cuGetProcAddress("cuNoSuchFunction", &fn, 13000, 0),
                   CUDA_ERROR_NOT_FOUND);
  assert_int_equal(rgpu_drv_cuGetProcAddress_v2(NULL, &fn, 13000, 0, NULL),
                   CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(rgpu_drv_cuGetProcAddress_v2("cuInit", &fn, 13000, 1ull << 40, NULL),
                   CUDA_ERROR_INVALID_VALUE);
}

static void test_table_sorted_and_complete(void **state) {
  (void)state;
  /* Every row in order (the lookup's binary search relies on it). */
  int st;
  assert_non_null(rgpu_drv_proc_lookup(
      (const rgpu_proc_entry[]){{"a", 1000, RGPU_PROC_PLAIN, "a", (void *)1}}, 1, "a", 1000, 0,
      &st));
  assert_null(rgpu_drv_proc_lookup(
      (const rgpu_proc_entry[]){{"a", 1000, RGPU_PROC_PLAIN, "a", (void *)1}}, 1, "b", 1000, 0,
      &st));
  assert_int_equal(st, RGPU_PROC_SYMBOL_NOT_FOUND);
  assert_string_equal(rgpu_drv_result_name_of(CUDA_ERROR_NOT_SUPPORTED),
                      "CUDA_ERROR_NOT_SUPPORTED");
  assert_string_equal(rgpu_drv_result_name_of(0), "CUDA_SUCCESS");
  assert_null(rgpu_drv_result_name_of(123456));
}

static void test_error_strings(void **state) {
  (void)state;
  const char *s = NULL;
  assert_int_equal(rgpu_drv_cuGetErrorName(CUDA_ERROR_INVALID_VALUE, &s), CUDA_SUCCESS);
  assert_string_equal(s, "CUDA_ERROR_INVALID_VALUE");
  assert_int_equal(rgpu_drv_cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s), CUDA_SUCCESS);
  assert_string_equal(s, "out of memory");
  assert_int_equal(rgpu_drv_cuGetErrorString((CUresult)123456, &s), CUDA_ERROR_INVALID_VALUE);
  assert_null(s);
}

static void test_error_map(void **state) {
  (void)state;
  /* cudaError_t -> CUresult: where the codes differ, and the round trip of
   * every runtime code the server's codes map to. */
  assert_int_equal(rgpu_cudart_to_cu(cudaSuccess), CUDA_SUCCESS);
  assert_int_equal(rgpu_cudart_to_cu(cudaErrorMemoryAllocation), CUDA_ERROR_OUT_OF_MEMORY);
  assert_int_equal(rgpu_cudart_to_cu(cudaErrorInvalidResourceHandle), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(rgpu_cudart_to_cu(cudaErrorUnknown), CUDA_ERROR_UNKNOWN);
  assert_int_equal(rgpu_cudart_to_cu(cudaErrorNotReady), CUDA_ERROR_NOT_READY);
  assert_int_equal(rgpu_cudart_to_cu(cudaErrorInvalidDevicePointer), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(rgpu_cudart_to_cu(cudaErrorSymbolNotFound), CUDA_ERROR_NOT_FOUND);
  assert_int_equal(rgpu_cudart_to_cu(cudaErrorNotSupported), CUDA_ERROR_NOT_SUPPORTED);
  for (size_t i = 0; i < rgpu_drv_result_names_len; i++) {
    int cu = rgpu_drv_result_names[i].code;
    cudaError_t rt = rgpu_cudart_from_cu(cu);
    if (rt == cudaErrorUnknown) continue; /* several driver codes share it */
    assert_int_equal(rgpu_cudart_from_cu(rgpu_cudart_to_cu(rt)), rt);
  }
}

static void test_export_table_refused(void **state) {
  (void)state;
  CUuuid id = {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}};
  const void *table = (const void *)1;
  assert_int_equal(rgpu_drv_cuGetExportTable(&table, &id), CUDA_ERROR_NOT_FOUND);
  assert_null(table);
  assert_int_equal(rgpu_drv_cuGetExportTable(NULL, &id), CUDA_ERROR_INVALID_VALUE);
}

static void test_not_initialized(void **state) {
  (void)state;
  /* Without cuInit (and without a runtime session) calls that need the
   * driver answer CUDA_ERROR_NOT_INITIALIZED. */
  int n = -1;
  assert_int_equal(rgpu_drv_cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
  assert_int_equal(n, -1);
}

static void test_ctx_stack(void **state) {
  (void)state;
  rgpu_ctx_stack s = {0};
  struct CUctx_st a = {0}, b = {0}, c = {0};
  assert_null(rgpu_ctx_stack_top(&s));
  assert_null(rgpu_ctx_stack_pop(&s));
  assert_int_equal(rgpu_ctx_stack_push(&s, &a), 0);
  assert_int_equal(rgpu_ctx_stack_push(&s, &b), 0);
  assert_ptr_equal(rgpu_ctx_stack_top(&s), &b);
  rgpu_ctx_stack_set_top(&s, &c); /* cuCtxSetCurrent replaces the top */
  assert_ptr_equal(rgpu_ctx_stack_top(&s), &c);
  assert_int_equal(s.n, 2);
  assert_ptr_equal(rgpu_ctx_stack_pop(&s), &c);
  assert_ptr_equal(rgpu_ctx_stack_top(&s), &a);
  rgpu_ctx_stack_set_top(&s, NULL); /* cuCtxSetCurrent(NULL) unbinds it */
  assert_null(rgpu_ctx_stack_top(&s));
  rgpu_ctx_stack_set_top(&s, &b); /* on an empty stack: pushes */
  assert_ptr_equal(rgpu_ctx_stack_top(&s), &b);
  rgpu_ctx_stack_push(&s, &a);
  rgpu_ctx_stack_push(&s, &b);
  rgpu_ctx_stack_remove(&s, &b); /* a destroyed context leaves every level */
  assert_int_equal(s.n, 1);
  assert_ptr_equal(rgpu_ctx_stack_top(&s), &a);
  rgpu_ctx_stack_pop(&s);
  for (int i = 0; i < RGPU_CTX_STACK_MAX; i++) assert_int_equal(rgpu_ctx_stack_push(&s, &a), 0);
  assert_int_equal(rgpu_ctx_stack_push(&s, &a), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_proc_versions),   cmocka_unit_test(test_proc_per_thread),
      cmocka_unit_test(test_proc_not_found),  cmocka_unit_test(test_table_sorted_and_complete),
      cmocka_unit_test(test_error_strings),   cmocka_unit_test(test_error_map),
      cmocka_unit_test(test_export_table_refused), cmocka_unit_test(test_not_initialized),
      cmocka_unit_test(test_ctx_stack),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
