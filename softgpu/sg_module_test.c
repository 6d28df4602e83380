/* softgpu modules and launches, on the fatbins nvcc built from
 * softgpu/testdata/kernels.cu (SG_TESTDATA).  Expectations mirror what the
 * real driver answered for the same files (softgpu/tools/probe_h200.txt). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "softgpu.h"

static CUcontext ctx;

static void *load(const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", SG_TESTDATA, name);
  FILE *f = fopen(path, "rb");
  if (!f) {
    fail_msg("cannot open %s (build target sg_testdata)", path);
    return NULL;
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
  b[n] = 0;
  fclose(f);
  return b;
}

static int setup(void **state) {
  if (cuInit(0) != CUDA_SUCCESS) return -1;
  if (cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS) return -1;
  return cuCtxSetCurrent(ctx) == CUDA_SUCCESS ? 0 : -1;
}

static CUresult load_file(const char *name, CUmodule *m) {
  void *img = load(name);
  CUresult r = cuModuleLoadData(m, img);
  free(img);
  return r;
}

static void test_load_variants(void **state) {
  const char *ok[] = {"kernels_zstd.fatbin", "kernels_lz4.fatbin", "kernels_none.fatbin", "kernels_ptx.fatbin",
                      "kernels_rdc.fatbin", "kernels.ptx"};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    CUmodule m = NULL;
    CUresult r = load_file(ok[i], &m);
    if (r != CUDA_SUCCESS) fail_msg("loading %s gave %d", ok[i], r);
    unsigned n = 0;
    assert_int_equal(cuModuleGetFunctionCount(&n, m), CUDA_SUCCESS);
    assert_int_equal(n, 10);
    assert_int_equal(cuModuleUnload(m), CUDA_SUCCESS);
    assert_int_equal(cuModuleUnload(m), CUDA_ERROR_INVALID_HANDLE);
  }
  CUmodule m;
  /* SASS-only images: the CPU cannot run them. */
  assert_int_equal(load_file("kernels_sass.fatbin", &m), CUDA_ERROR_NO_BINARY_FOR_GPU);
  assert_int_equal(load_file("kernels.cubin", &m), CUDA_ERROR_NO_BINARY_FOR_GPU);
  /* PTX only for compute_90 is too new for this sm_75 device. */
  assert_int_equal(load_file("kernels_multi.fatbin", &m), CUDA_ERROR_NO_BINARY_FOR_GPU);
  assert_int_equal(cuModuleLoadData(&m, "garbage"), CUDA_ERROR_INVALID_IMAGE);
  assert_int_equal(cuModuleLoadData(&m, "\x7f" "ELFgarbage"), CUDA_ERROR_INVALID_IMAGE);
  assert_int_equal(cuModuleLoadData(&m, NULL), CUDA_ERROR_INVALID_VALUE);
  /* A truncated fatbin header is refused, not read past. */
  uint8_t hdr[16] = {0x50, 0xed, 0x55, 0xba, 1, 0, 16, 0, 0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0};
  assert_int_equal(cuModuleLoadData(&m, hdr), CUDA_ERROR_INVALID_IMAGE);
  /* Neither entry point takes the wrapper, only the data it points to. */
  void *img = load("kernels_zstd.fatbin");
  struct {
    int magic, version;
    const void *data;
    void *unused;
  } wrapper = {0x466243B1, 1, img, NULL};
  assert_int_equal(cuModuleLoadData(&m, &wrapper), CUDA_ERROR_INVALID_IMAGE);
  assert_int_equal(cuModuleLoadFatBinary(&m, &wrapper), CUDA_ERROR_INVALID_IMAGE);
  assert_int_equal(cuModuleLoadFatBinary(&m, img), CUDA_SUCCESS);
  assert_int_equal(cuModuleUnload(m), CUDA_SUCCESS);
  free(img);
}

static void test_jit_error_log(void **state) {
  char log[256] = "untouched";
  CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *vals[] = {log, (void *)(uintptr_t)sizeof log};
  CUmodule m;
  const char *bad = ".version 9.0\n.target sm_75\n.address_size 64\n.visible .entry k() { frobnicate.u32 %r1; }\n";
  CUresult r = cuModuleLoadDataEx(&m, bad, 2, opts, vals);
  assert_true(r == CUDA_ERROR_INVALID_PTX || r == CUDA_ERROR_NOT_SUPPORTED);
  assert_true(strlen(log) > 0 && strcmp(log, "untouched") != 0);
  const char *too_new = ".version 9.0\n.target sm_90\n.address_size 64\n.visible .entry k() { ret; }\n";
  assert_int_equal(cuModuleLoadDataEx(&m, too_new, 2, opts, vals), CUDA_ERROR_INVALID_PTX);
}

static void test_functions_and_params(void **state) {
  CUmodule m;
  assert_int_equal(load_file("kernels_zstd.fatbin", &m), CUDA_SUCCESS);
  CUfunction fs[16];
  unsigned n = 0;
  assert_int_equal(cuModuleGetFunctionCount(&n, m), CUDA_SUCCESS);
  assert_int_equal(cuModuleEnumerateFunctions(fs, n, m), CUDA_SUCCESS);
  int seen_vecadd = 0;
  for (unsigned i = 0; i < n; i++) {
    const char *name = NULL;
    assert_int_equal(cuFuncGetName(&name, fs[i]), CUDA_SUCCESS);
    CUfunction g;
    assert_int_equal(cuModuleGetFunction(&g, m, name), CUDA_SUCCESS);
    assert_ptr_equal(g, fs[i]);
    if (strcmp(name, "_Z6vecaddPKfS0_Pfi") == 0) seen_vecadd = 1;
  }
  assert_true(seen_vecadd);
  CUfunction f;
  assert_int_equal(cuModuleGetFunction(&f, m, "nonexistent"), CUDA_ERROR_NOT_FOUND);
  struct {
    const char *name;
    int n;
    size_t layout[5][2];
  } want[] = {
      {"_Z6vecaddPKfS0_Pfi", 4, {{0, 8}, {8, 8}, {16, 8}, {24, 4}}},
      {"_Z7structk6ParamsPf", 2, {{0, 24}, {24, 8}}},
      {"_Z4tmplIfLi3EEvPT_S0_i", 3, {{0, 8}, {8, 4}, {12, 4}}},
      {"_Z12shmem_reducePKfPfi", 3, {{0, 8}, {8, 8}, {16, 4}}},
      {"_Z5helloi", 1, {{0, 4}}},
      {"noparams", 0, {{0}}},
  };
  for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
    assert_int_equal(cuModuleGetFunction(&f, m, want[k].name), CUDA_SUCCESS);
    for (int i = 0; i < want[k].n; i++) {
      size_t off = 99, sz = 99;
      assert_int_equal(cuFuncGetParamInfo(f, (size_t)i, &off, &sz), CUDA_SUCCESS);
      assert_int_equal(off, want[k].layout[i][0]);
      assert_int_equal(sz, want[k].layout[i][1]);
    }
    size_t off, sz;
    assert_int_equal(cuFuncGetParamInfo(f, (size_t)want[k].n, &off, &sz), CUDA_ERROR_INVALID_VALUE);
  }
  int v = -1;
  assert_int_equal(cuModuleGetFunction(&f, m, "_Z12shmem_reducePKfPfi"), CUDA_SUCCESS);
  assert_int_equal(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f), CUDA_SUCCESS);
  assert_int_equal(v, 1024);
  assert_int_equal(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f), CUDA_SUCCESS);
  assert_int_equal(v, 1024);
  assert_int_equal(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_PTX_VERSION, f), CUDA_SUCCESS);
  assert_int_equal(v, 75);
  assert_int_equal(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, f), CUDA_SUCCESS);
  assert_int_equal(v, 16); /* the module's __constant__ bank, as the driver reports it */
  assert_int_equal(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f), CUDA_SUCCESS);
  assert_int_equal(v, 49152 - 1024);
  assert_int_equal(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, f), CUDA_SUCCESS);
  assert_int_equal(v, -1);
  assert_int_equal(cuFuncGetAttribute(&v, (CUfunction_attribute)999, f), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 10), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1 << 20),
                   CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuFuncSetCacheConfig(f, CU_FUNC_CACHE_PREFER_SHARED), CUDA_SUCCESS);
  /* Occupancy from the reported resources: 1024 threads/SM and 32
   * registers/thread on sm_75; shmem_reduce's 1 KiB of shared memory does
   * not limit it. */
  int nb = -1, minGrid = 0, bs = 0;
  assert_int_equal(cuOccupancyMaxActiveBlocksPerMultiprocessor(&nb, f, 256, 0), CUDA_SUCCESS);
  assert_int_equal(nb, 4);
  assert_int_equal(cuOccupancyMaxActiveBlocksPerMultiprocessor(&nb, f, 1025, 0), CUDA_SUCCESS);
  assert_int_equal(nb, 0);
  assert_int_equal(cuOccupancyMaxActiveBlocksPerMultiprocessor(&nb, f, 32, 0), CUDA_SUCCESS);
  assert_int_equal(nb, 16);
  assert_int_equal(cuOccupancyMaxPotentialBlockSize(&minGrid, &bs, f, NULL, 0, 0), CUDA_SUCCESS);
  assert_int_equal(bs, 1024);
  assert_true(minGrid >= 1);
  CUmodule back;
  assert_int_equal(cuFuncGetModule(&back, f), CUDA_SUCCESS);
  assert_ptr_equal(back, m);

  /* Module variables are device memory, initialised from the PTX. */
  CUdeviceptr g = 0;
  size_t sz = 0;
  assert_int_equal(cuModuleGetGlobal(&g, &sz, m, "g_table"), CUDA_SUCCESS);
  assert_int_equal(sz, 64);
  assert_int_equal(cuModuleGetGlobal(&g, &sz, m, "c_coef"), CUDA_SUCCESS);
  assert_int_equal(sz, 16);
  assert_int_equal(cuModuleGetGlobal(&g, &sz, m, "g_counter"), CUDA_SUCCESS);
  assert_int_equal(sz, 4);
  assert_int_equal(cuModuleGetGlobal(&g, &sz, m, "nonexistent"), CUDA_ERROR_NOT_FOUND);
  assert_int_equal(cuModuleGetGlobal(&g, &sz, m, "g_init"), CUDA_SUCCESS);
  int init[4] = {0};
  assert_int_equal(cuMemcpyDtoH(init, g, 16), CUDA_SUCCESS);
  assert_int_equal(init[0], 1);
  assert_int_equal(init[3], 4);
  CUdeviceptr base;
  assert_int_equal(cuMemGetAddressRange(&base, &sz, g), CUDA_SUCCESS);
  assert_int_equal(sz, 16);
  assert_int_equal(cuModuleUnload(m), CUDA_SUCCESS);
  assert_int_equal(cuMemGetAddressRange(&base, &sz, g), CUDA_ERROR_NOT_FOUND);
  assert_int_equal(cuFuncGetName(&(const char *){0}, f), CUDA_ERROR_INVALID_HANDLE);
}

#define N 1000

static void test_vecadd(void **state) {
  CUmodule m;
  CUfunction f;
  assert_int_equal(load_file("kernels_lz4.fatbin", &m), CUDA_SUCCESS);
  assert_int_equal(cuModuleGetFunction(&f, m, "_Z6vecaddPKfS0_Pfi"), CUDA_SUCCESS);
  float a[N], b[N], c[N];
  for (int i = 0; i < N; i++) {
    a[i] = (float)i;
    b[i] = 0.5f * (float)i;
  }
  CUdeviceptr da, db, dc;
  assert_int_equal(cuMemAlloc(&da, sizeof a), CUDA_SUCCESS);
  assert_int_equal(cuMemAlloc(&db, sizeof b), CUDA_SUCCESS);
  assert_int_equal(cuMemAlloc(&dc, sizeof c), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyHtoD(da, a, sizeof a), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyHtoD(db, b, sizeof b), CUDA_SUCCESS);
  int n = N;
  void *args[] = {&da, &db, &dc, &n};
  assert_int_equal(cuLaunchKernel(f, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(c, dc, sizeof c), CUDA_SUCCESS);
  for (int i = 0; i < N; i++) assert_true(c[i] == 1.5f * (float)i);

  /* The packed-buffer form, on a stream. */
  CUstream s;
  assert_int_equal(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  assert_int_equal(cuMemsetD32(dc, 0, N), CUDA_SUCCESS);
  char pbuf[28];
  memcpy(pbuf, &da, 8);
  memcpy(pbuf + 8, &da, 8);
  memcpy(pbuf + 16, &dc, 8);
  memcpy(pbuf + 24, &n, 4);
  size_t psize = sizeof pbuf;
  void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, pbuf, CU_LAUNCH_PARAM_BUFFER_SIZE, &psize, CU_LAUNCH_PARAM_END};
  assert_int_equal(cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, s, NULL, extra), CUDA_SUCCESS);
  assert_int_equal(cuStreamSynchronize(s), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(c, dc, sizeof c), CUDA_SUCCESS);
  for (int i = 0; i < N; i++) assert_true(c[i] == 2.0f * (float)i);

  /* Configuration errors, as 13.0 reports them. */
  assert_int_equal(cuLaunchKernel(f, 1, 1, 1, 2048, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuLaunchKernel(f, 1, 1, 1, 0, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuLaunchKernel(f, 0, 1, 1, 32, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuLaunchKernel(f, 1, 1, 1, 1, 1, 65, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuLaunchKernel(f, 1, 70000, 1, 1, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 49153, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, args, extra), CUDA_ERROR_INVALID_VALUE);
  psize = 40;
  assert_int_equal(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, extra), CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
  assert_int_equal(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100000), CUDA_SUCCESS);
  assert_int_equal(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 90000, NULL, args, NULL), CUDA_SUCCESS);
  assert_int_equal(cuLaunchKernel((CUfunction)0x10, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);

  /* Unloading with a launch still queued is safe: the launch keeps the module. */
  assert_int_equal(cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, s, args, NULL), CUDA_SUCCESS);
  assert_int_equal(cuModuleUnload(m), CUDA_SUCCESS);
  assert_int_equal(cuStreamSynchronize(s), CUDA_SUCCESS);
  cuStreamDestroy(s);
  cuMemFree(da);
  cuMemFree(db);
  cuMemFree(dc);
}

static void test_globals_shared_struct(void **state) {
  CUmodule m;
  CUfunction f;
  assert_int_equal(load_file("kernels_none.fatbin", &m), CUDA_SUCCESS);
  CUdeviceptr coef, counter, out;
  size_t sz;
  float cv[4] = {10, 20, 30, 40};
  assert_int_equal(cuModuleGetGlobal(&coef, &sz, m, "c_coef"), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyHtoD(coef, cv, sizeof cv), CUDA_SUCCESS);
  assert_int_equal(cuModuleGetGlobal(&counter, &sz, m, "g_counter"), CUDA_SUCCESS);
  assert_int_equal(cuMemAlloc(&out, 4096), CUDA_SUCCESS);
  assert_int_equal(cuModuleGetFunction(&f, m, "_Z9globals_kPf"), CUDA_SUCCESS);
  void *a1[] = {&out};
  assert_int_equal(cuLaunchKernel(f, 3, 1, 1, 64, 1, 1, 0, NULL, a1, NULL), CUDA_SUCCESS);
  int cnt = 0;
  float o = 0;
  assert_int_equal(cuMemcpyDtoH(&cnt, counter, 4), CUDA_SUCCESS);
  assert_int_equal(cnt, 3 * 64);
  assert_int_equal(cuMemcpyDtoH(&o, out, 4), CUDA_SUCCESS);
  assert_true(o == 11.0f); /* c_coef[0] + g_init[0] */

  /* Shared-memory reduction with __syncthreads. */
  float in[1024];
  for (int i = 0; i < 1024; i++) in[i] = 1.0f;
  CUdeviceptr din;
  assert_int_equal(cuMemAlloc(&din, sizeof in), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyHtoD(din, in, sizeof in), CUDA_SUCCESS);
  assert_int_equal(cuMemsetD32(out, 0, 1), CUDA_SUCCESS);
  int n = 1024;
  void *a2[] = {&din, &out, &n};
  assert_int_equal(cuModuleGetFunction(&f, m, "_Z12shmem_reducePKfPfi"), CUDA_SUCCESS);
  assert_int_equal(cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, NULL, a2, NULL), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(&o, out, 4), CUDA_SUCCESS);
  assert_true(o == 1024.0f);

  /* A struct passed by value. */
  struct {
    float f;
    int i;
    double d;
    char c[3];
  } p = {2.0f, 1024, 0.5, {'x', 1, 'z'}};
  void *a3[] = {&p, &out};
  assert_int_equal(cuModuleGetFunction(&f, m, "_Z7structk6ParamsPf"), CUDA_SUCCESS);
  assert_int_equal(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, a3, NULL), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(&o, out, 4), CUDA_SUCCESS);
  assert_true(o == 2.0f + 1024 + 0.5f + 'x' + 1 + 'z');

  /* Template instance. */
  int v = 7;
  void *a4[] = {&out, &v, &n};
  assert_int_equal(cuModuleGetFunction(&f, m, "_Z4tmplIiLi5EEvPT_S0_i"), CUDA_SUCCESS);
  assert_int_equal(cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, NULL, a4, NULL), CUDA_SUCCESS);
  int iv[1024];
  assert_int_equal(cuMemcpyDtoH(iv, out, sizeof iv), CUDA_SUCCESS);
  assert_int_equal(iv[0], 35);
  assert_int_equal(iv[1023], 35);
  cuMemFree(din);
  cuMemFree(out);
  assert_int_equal(cuModuleUnload(m), CUDA_SUCCESS);
}

/* Kernels on several streams at once, each stream chaining its launches
 * through its own buffers; events order a final cross-stream step. */
static void test_concurrent_streams(void **state) {
  CUmodule m;
  CUfunction f;
  assert_int_equal(load_file("kernels_zstd.fatbin", &m), CUDA_SUCCESS);
  assert_int_equal(cuModuleGetFunction(&f, m, "_Z6vecaddPKfS0_Pfi"), CUDA_SUCCESS);
  enum { NS = 4, LEN = 512, ROUNDS = 20 };
  CUstream s[NS];
  CUevent done[NS];
  CUdeviceptr one, acc[NS];
  float h[LEN];
  for (int i = 0; i < LEN; i++) h[i] = 1.0f;
  assert_int_equal(cuMemAlloc(&one, sizeof h), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyHtoD(one, h, sizeof h), CUDA_SUCCESS);
  int n = LEN;
  for (int k = 0; k < NS; k++) {
    assert_int_equal(cuStreamCreate(&s[k], CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    assert_int_equal(cuEventCreate(&done[k], CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
    assert_int_equal(cuMemAlloc(&acc[k], sizeof h), CUDA_SUCCESS);
    assert_int_equal(cuMemsetD32Async(acc[k], 0, LEN, s[k]), CUDA_SUCCESS);
  }
  for (int r = 0; r < ROUNDS; r++)
    for (int k = 0; k < NS; k++) {
      void *args[] = {&acc[k], &one, &acc[k], &n}; /* acc += 1 */
      assert_int_equal(cuLaunchKernel(f, LEN / 128, 1, 1, 128, 1, 1, 0, s[k], args, NULL), CUDA_SUCCESS);
    }
  /* Stream 0 adds the other accumulators once they are done. */
  for (int k = 1; k < NS; k++) {
    assert_int_equal(cuEventRecord(done[k], s[k]), CUDA_SUCCESS);
    assert_int_equal(cuStreamWaitEvent(s[0], done[k], 0), CUDA_SUCCESS);
    void *args[] = {&acc[0], &acc[k], &acc[0], &n};
    assert_int_equal(cuLaunchKernel(f, LEN / 128, 1, 1, 128, 1, 1, 0, s[0], args, NULL), CUDA_SUCCESS);
  }
  assert_int_equal(cuStreamSynchronize(s[0]), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(h, acc[0], sizeof h), CUDA_SUCCESS);
  for (int i = 0; i < LEN; i++) assert_true(h[i] == (float)(NS * ROUNDS));
  for (int k = 0; k < NS; k++) {
    cuStreamDestroy(s[k]);
    cuEventDestroy(done[k]);
    cuMemFree(acc[k]);
  }
  cuMemFree(one);
  assert_int_equal(cuModuleUnload(m), CUDA_SUCCESS);
}

static char printed[4096];
static size_t nprinted;
static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;
static void capture(void *c, const char *text, size_t len) {
  pthread_mutex_lock(&print_lock);
  if (nprinted + len < sizeof printed) {
    memcpy(printed + nprinted, text, len);
    nprinted += len;
    printed[nprinted] = 0;
  }
  *(int *)c += 1;
  pthread_mutex_unlock(&print_lock);
}

static void test_printf(void **state) {
  CUmodule m;
  CUfunction f;
  int calls = 0;
  assert_int_equal(sgSetPrintHandler(capture, &calls), CUDA_SUCCESS);
  assert_int_equal(load_file("kernels.ptx", &m), CUDA_SUCCESS);
  assert_int_equal(cuModuleGetFunction(&f, m, "_Z5helloi"), CUDA_SUCCESS);
  int v = 7;
  void *a[] = {&v};
  assert_int_equal(cuLaunchKernel(f, 1, 1, 1, 2, 1, 1, 0, NULL, a, NULL), CUDA_SUCCESS);
  assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
  assert_int_equal(calls, 2);
  assert_non_null(strstr(printed, "hello 7 from 0\n"));
  assert_non_null(strstr(printed, "hello 7 from 1\n"));
  sgSetPrintHandler(NULL, NULL);
  assert_int_equal(cuModuleUnload(m), CUDA_SUCCESS);
}

static pthread_mutex_t gate_m = PTHREAD_MUTEX_INITIALIZER;
static void gate_fn(void *u) {
  (void)u;
  pthread_mutex_lock(&gate_m);
  pthread_mutex_unlock(&gate_m);
}
static atomic_int hostfn_ran;
static void hostfn(void *u) {
  (void)u;
  atomic_store(&hostfn_ran, 1);
}
static atomic_int cb_status;
static void cb(CUstream s, CUresult st, void *u) {
  (void)s, (void)u;
  atomic_store(&cb_status, (int)st);
}

/* Runs last: a fault poisons the context until it is reset. */
static void test_fault_is_sticky(void **state) {
  CUmodule m;
  CUfunction f;
  assert_int_equal(load_file("kernels_zstd.fatbin", &m), CUDA_SUCCESS);
  assert_int_equal(cuModuleGetFunction(&f, m, "_Z6faultyPi"), CUDA_SUCCESS);
  CUdeviceptr d;
  assert_int_equal(cuMemAlloc(&d, 1024), CUDA_SUCCESS);
  void *a[] = {&d};
  CUevent ev;
  assert_int_equal(cuEventCreate(&ev, 0), CUDA_SUCCESS);
  /* Hold the stream until everything is queued, so the fault cannot
   * happen before the calls below are made. */
  pthread_mutex_lock(&gate_m);
  assert_int_equal(cuLaunchHostFunc(NULL, gate_fn, NULL), CUDA_SUCCESS);
  assert_int_equal(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, a, NULL), CUDA_SUCCESS);
  atomic_store(&hostfn_ran, 0);
  atomic_store(&cb_status, -1);
  assert_int_equal(cuLaunchHostFunc(NULL, hostfn, NULL), CUDA_SUCCESS);
  assert_int_equal(cuStreamAddCallback(NULL, cb, NULL, 0), CUDA_SUCCESS);
  pthread_mutex_unlock(&gate_m);
  assert_int_equal(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  /* A faulted context answers at once, without waiting for its queue; the
   * callback (queued last) tells when the stream got past the rest. */
  for (int i = 0; i < 2000 && atomic_load(&cb_status) == -1; i++) usleep(1000);
  /* As on the GPU: host functions after a fault are skipped, callbacks
   * are told the error. */
  assert_int_equal(atomic_load(&hostfn_ran), 0);
  assert_int_equal(atomic_load(&cb_status), CUDA_ERROR_ILLEGAL_ADDRESS);
  assert_int_equal(cuEventQuery(ev), CUDA_ERROR_ILLEGAL_ADDRESS);
  assert_int_equal(cuStreamQuery(NULL), CUDA_ERROR_ILLEGAL_ADDRESS);
  assert_int_equal(cuEventDestroy(ev), CUDA_ERROR_ILLEGAL_ADDRESS);
  assert_int_equal(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  CUdeviceptr d2;
  char h[4];
  CUstream s;
  CUevent e;
  assert_int_equal(cuMemAlloc(&d2, 16), CUDA_ERROR_ILLEGAL_ADDRESS);
  assert_int_equal(cuMemcpyHtoD(d, h, 4), CUDA_ERROR_ILLEGAL_ADDRESS);
  assert_int_equal(cuStreamCreate(&s, 0), CUDA_ERROR_ILLEGAL_ADDRESS);
  assert_int_equal(cuEventCreate(&e, 0), CUDA_ERROR_ILLEGAL_ADDRESS);
  assert_int_equal(cuModuleUnload(m), CUDA_ERROR_ILLEGAL_ADDRESS);
  assert_int_equal(cuMemFree(d), CUDA_ERROR_ILLEGAL_ADDRESS);
  unsigned api;
  assert_int_equal(cuCtxGetApiVersion(ctx, &api), CUDA_SUCCESS);
  /* Reset: the handle reports a destroyed context until retained again,
   * and then everything works. */
  assert_int_equal(cuDevicePrimaryCtxReset(0), CUDA_SUCCESS);
  assert_int_equal(cuMemAlloc(&d2, 16), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CUcontext c2;
  assert_int_equal(cuDevicePrimaryCtxRetain(&c2, 0), CUDA_SUCCESS);
  assert_ptr_equal(c2, ctx);
  assert_int_equal(cuMemAlloc(&d2, 16), CUDA_SUCCESS);
  assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
  assert_int_equal(cuMemFree(d2), CUDA_SUCCESS);
}

int main(void) {
#ifndef SG_HAVE_PTX
  printf("softgpu built without the PTX interpreter: module tests skipped\n");
  return 0;
#endif
  setenv("RGPU_SOFTGPU_THREADS", "2", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_load_variants),      cmocka_unit_test(test_jit_error_log),
      cmocka_unit_test(test_functions_and_params), cmocka_unit_test(test_vecadd),
      cmocka_unit_test(test_globals_shared_struct), cmocka_unit_test(test_concurrent_streams),
      cmocka_unit_test(test_printf),
      cmocka_unit_test(test_fault_is_sticky),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
