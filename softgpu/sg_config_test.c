/* softgpu configuration from the environment: compute capability, memory
 * size suffixes, worker count, and a compute_90 module that only a
 * RGPU_SOFTGPU_CC=90 device accepts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cuda.h>

static void *load(const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", SG_TESTDATA, name);
  FILE *f = fopen(path, "rb");
  if (!f) {
    fail_msg("cannot open %s", path);
    return NULL;
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  return b;
}

static void test_cc90(void **state) {
  assert_int_equal(cuInit(0), CUDA_SUCCESS);
  int v;
  assert_int_equal(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0), CUDA_SUCCESS);
  assert_int_equal(v, 9);
  assert_int_equal(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0), CUDA_SUCCESS);
  assert_int_equal(v, 0);
  assert_int_equal(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 0), CUDA_SUCCESS);
  assert_int_equal(v, 2048);
  size_t mem;
  assert_int_equal(cuDeviceTotalMem(&mem, 0), CUDA_SUCCESS);
  assert_int_equal(mem, (size_t)3 << 30); /* "3GiB" */
  int n;
  assert_int_equal(cuDeviceGetCount(&n), CUDA_SUCCESS);
  assert_int_equal(n, 1); /* "lots" is not a number: default kept */

  CUcontext c;
  assert_int_equal(cuDevicePrimaryCtxRetain(&c, 0), CUDA_SUCCESS);
  assert_int_equal(cuCtxSetCurrent(c), CUDA_SUCCESS);
  CUmodule m;
  void *img = load("kernels_multi.fatbin"); /* sm_75, sm_90 SASS + compute_90 PTX */
  assert_int_equal(cuModuleLoadData(&m, img), CUDA_SUCCESS);
  free(img);
  CUfunction f;
  assert_int_equal(cuModuleGetFunction(&f, m, "_Z6vecaddPKfS0_Pfi"), CUDA_SUCCESS);
  assert_int_equal(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_PTX_VERSION, f), CUDA_SUCCESS);
  assert_int_equal(v, 90);
  float h[300];
  for (int i = 0; i < 300; i++) h[i] = (float)i;
  CUdeviceptr a, out;
  assert_int_equal(cuMemAlloc(&a, sizeof h), CUDA_SUCCESS);
  assert_int_equal(cuMemAlloc(&out, sizeof h), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyHtoD(a, h, sizeof h), CUDA_SUCCESS);
  int cnt = 300;
  void *args[] = {&a, &a, &out, &cnt};
  /* One worker thread (RGPU_SOFTGPU_THREADS=1) still runs many blocks. */
  assert_int_equal(cuLaunchKernel(f, 10, 1, 1, 32, 1, 1, 0, NULL, args, NULL), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(h, out, sizeof h), CUDA_SUCCESS);
  assert_true(h[299] == 598.0f);
  assert_int_equal(cuModuleUnload(m), CUDA_SUCCESS);
  assert_int_equal(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
}

int main(void) {
#ifndef SG_HAVE_PTX
  printf("softgpu built without the PTX interpreter: config test skipped\n");
  return 0;
#endif
  setenv("RGPU_SOFTGPU_CC", "90", 1);
  setenv("RGPU_SOFTGPU_MEM", "3GiB", 1);
  setenv("RGPU_SOFTGPU_THREADS", "1", 1);
  setenv("RGPU_SOFTGPU_DEVICES", "lots", 1);
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_cc90)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
