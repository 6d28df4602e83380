/* Unit tests of the driver facade's module handles that need no session
 * (through the exported rgpu_drv_ functions of the built libcudart.so.13):
 * made-up handles are CUDA_ERROR_INVALID_HANDLE without being read past
 * their magic, a call before cuInit is CUDA_ERROR_NOT_INITIALIZED, and the
 * loading mode follows the program's CUDA_MODULE_LOADING. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "rgpu_drv_module.h"

static void test_bad_handles(void **state) {
  (void)state;
  const char *name = "unchanged";
  /* Small integers and misaligned pointers are never dereferenced. */
  assert_int_equal(rgpu_drv_cuFuncGetName(&name, (CUfunction)(uintptr_t)0x10), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(rgpu_drv_cuFuncGetName(&name, NULL), CUDA_ERROR_INVALID_HANDLE);
  static uint64_t words[8];
  assert_int_equal(rgpu_drv_cuFuncGetName(&name, (CUfunction)((char *)words + 4)),
                   CUDA_ERROR_INVALID_HANDLE);
  /* Readable memory without a handle's magic. */
  assert_int_equal(rgpu_drv_cuFuncGetName(&name, (CUfunction)words), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(rgpu_drv_cuKernelGetName(&name, (CUkernel)words), CUDA_ERROR_INVALID_HANDLE);
  /* A module's magic is not a function's, nor a kernel's. */
  struct CUmod_st mod;
  memset(&mod, 0, sizeof mod);
  mod.magic = RGPU_DRV_MODULE_MAGIC;
  assert_int_equal(rgpu_drv_cuFuncGetName(&name, (CUfunction)&mod), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(rgpu_drv_cuKernelGetName(&name, (CUkernel)&mod), CUDA_ERROR_INVALID_HANDLE);
  assert_string_equal(name, "unchanged");
  /* A released function (a husk) is refused too; a live one answers. */
  struct CUfunc_st fn;
  memset(&fn, 0, sizeof fn);
  fn.magic = RGPU_DRV_DEAD_MAGIC;
  fn.name = "saxpy";
  assert_int_equal(rgpu_drv_cuFuncGetName(&name, &fn), CUDA_ERROR_INVALID_HANDLE);
  fn.magic = RGPU_DRV_FUNC_MAGIC;
  assert_int_equal(rgpu_drv_cuFuncGetName(&name, &fn), CUDA_SUCCESS);
  assert_string_equal(name, "saxpy");
  assert_int_equal(rgpu_drv_cuFuncGetName(NULL, &fn), CUDA_ERROR_INVALID_VALUE);
  /* A kernel's name through the CUfunction it may be cast to. */
  struct CUkern_st k = {.magic = RGPU_DRV_KERNEL_MAGIC, .name = "poly"};
  assert_int_equal(rgpu_drv_cuFuncGetName(&name, (CUfunction)&k), CUDA_SUCCESS);
  assert_string_equal(name, "poly");
  assert_int_equal(rgpu_drv_cuKernelGetName(&name, &k), CUDA_SUCCESS);
}

static void test_before_init(void **state) {
  (void)state;
  /* No cuInit in this process: calls that need the session say so before
   * they look at their handles. */
  CUfunction f;
  assert_int_equal(rgpu_drv_cuModuleGetFunction(&f, (CUmodule)(uintptr_t)0x10, "x"),
                   CUDA_ERROR_NOT_INITIALIZED);
  CUmodule m;
  assert_int_equal(rgpu_drv_cuModuleLoadData(&m, "garbage"), CUDA_ERROR_NOT_INITIALIZED);
  assert_int_equal(rgpu_drv_cuLaunchKernel((CUfunction)(uintptr_t)0x10, 1, 1, 1, 1, 1, 1, 0, NULL,
                                           NULL, NULL),
                   CUDA_ERROR_NOT_INITIALIZED);
  /* The JIT options are checked first: a count without arrays. */
  assert_int_equal(rgpu_drv_cuModuleLoadDataEx(&m, "x", 2, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
}

static void test_loading_mode(void **state) {
  (void)state;
  CUmoduleLoadingMode mode;
  setenv("CUDA_MODULE_LOADING", "EAGER", 1);
  assert_int_equal(rgpu_drv_cuModuleGetLoadingMode(&mode), CUDA_SUCCESS);
  assert_int_equal(mode, CU_MODULE_EAGER_LOADING);
  unsetenv("CUDA_MODULE_LOADING");
  assert_int_equal(rgpu_drv_cuModuleGetLoadingMode(&mode), CUDA_SUCCESS);
  assert_int_equal(mode, CU_MODULE_LAZY_LOADING);
  assert_int_equal(rgpu_drv_cuModuleGetLoadingMode(NULL), CUDA_ERROR_INVALID_VALUE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_handles),
      cmocka_unit_test(test_before_init),
      cmocka_unit_test(test_loading_mode),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
