/* sg_probe_real2: second round of questions for the real driver (edge cases
 * softgpu had guessed).  Build and run like sg_probe_real.c; output in
 * probe2_h200.txt.  Run with CUDA_MODULE_LOADING=EAGER. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define P(expr) printf("%-78s -> %d\n", #expr, (int)(expr))

static void *load(const char *dir, const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc(n + 1);
  if (fread(b, 1, n, f) != (size_t)n) return NULL;
  b[n] = 0;
  fclose(f);
  return b;
}

static int hostfn_ran;
static void hostfn(void *u) { hostfn_ran = 1; (void)u; }
static int cb_status = -1;
static void cb(CUstream s, CUresult st, void *u) { cb_status = st; (void)s; (void)u; }

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : ".";
  setvbuf(stdout, NULL, _IONBF, 0); /* keep the lines before a crash */
  CUcontext ctx, cur;
  CUdevice dev = 0;
  P(cuInit(0));
  P(cuDevicePrimaryCtxRetain(&ctx, 0));
  P(cuCtxSetCurrent(ctx));
  P(cuCtxDestroy(ctx));
  P(cuCtxGetCurrent(&cur));
  printf("primary still current %d\n", cur == ctx);
  P(cuCtxSetCurrent(ctx));
  void *hp = NULL;
  CUdeviceptr d = 0;
  P(cuMemAllocHost(&hp, 0));
  P(cuMemHostAlloc(&hp, 100, 0x80));
  P(cuMemAllocHost(&hp, 100));
  P(cuMemAlloc(&d, 1000));
  P(cuMemcpyHtoD(d, hp, 101));
  P(cuMemcpyHtoDAsync(d, hp, 101, NULL));
  P(cuMemsetD8((CUdeviceptr)hp, 0, 100));
  P(cuMemsetD8((CUdeviceptr)hp, 0, 101));
  char a[64], b[64];
  P(cuMemcpy((CUdeviceptr)a, (CUdeviceptr)b, 64));
  CUdeviceptr dp = 0;
  P(cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, (CUdeviceptr)hp));
  printf("pinned device pointer same %d\n", dp == (CUdeviceptr)hp);
  void *hpp = NULL;
  P(cuPointerGetAttribute(&hpp, CU_POINTER_ATTRIBUTE_HOST_POINTER, d));
  P(cuMemHostGetDevicePointer(&dp, hp, 0));
  P(cuMemHostGetDevicePointer(&dp, a, 0));
  unsigned fl = 99;
  P(cuStreamGetFlags(CU_STREAM_PER_THREAD, &fl));
  printf("ptds flags %u\n", fl);
  P(cuStreamDestroy(NULL));
  /* A forged stream handle segfaults the real driver (measured); softgpu
   * answers CUDA_ERROR_INVALID_HANDLE instead. */
  CUevent e1, e2;
  float ms;
  P(cuEventCreate(&e1, 0));
  P(cuEventCreate(&e2, 0));
  P(cuEventCreate(&e2, CU_EVENT_INTERPROCESS));
  P(cuEventCreate(&e2, 0));
  P(cuEventRecord(e1, NULL));
  P(cuEventSynchronize(e1));
  P(cuEventElapsedTime(&ms, e1, e1));
  printf("self elapsed %f\n", ms);
  P(cuStreamAddCallback(NULL, cb, NULL, 0));
  P(cuCtxSynchronize());
  printf("callback status %d\n", cb_status);
  void *fn = NULL;
  CUdriverProcAddressQueryResult st = 9;
  P(cuGetProcAddress("cuFuncGetParamInfo", &fn, 12000, 0, &st));
  printf("status %d fn %p\n", st, fn);
  P(cuGetProcAddress("cuNoSuch", &fn, 13000, 0, &st));
  printf("status %d fn %p\n", st, fn);
  P(cuGetProcAddress("cuMemAlloc", &fn, 13000, 8, &st));
  P(cuGetProcAddress("cuCtxCreate", &fn, 12000, 0, &st));
  void *fn2 = NULL;
  P(cuGetProcAddress("cuCtxCreate", &fn2, 13000, 0, &st));
  printf("cuCtxCreate 12000 vs 13000 same %d\n", fn == fn2);
  P(cuGetProcAddress("cuLaunchKernel", &fn, 13000, 2, &st));
  P(cuGetProcAddress("cuLaunchKernel", &fn2, 13000, 0, &st));
  printf("ptsz differs %d\n", fn != fn2);

  CUmodule m;
  CUfunction f, fz;
  void *img = load(dir, "kernels_ptx.fatbin");
  P(cuModuleLoadData(&m, img));
  struct { int magic, version; const void *data; void *x; } w = {0x466243B1, 1, img, NULL};
  CUmodule m2;
  P(cuModuleLoadData(&m2, &w));
  P(cuModuleLoadFatBinary(&m2, &w));
  P(cuModuleLoadFatBinary(&m2, img));
  P(cuModuleGetFunction(&f, m, "_Z6vecaddPKfS0_Pfi"));
  int attrs[11];
  for (int i = 0; i < 11; i++) {
    attrs[i] = -99;
    CUresult r = cuFuncGetAttribute(&attrs[i], (CUfunction_attribute)i, f);
    printf("func attr %d rc=%d val=%d\n", i, r, attrs[i]);
  }
  CUdeviceptr da;
  cuMemAlloc(&da, 4096);
  int n = 16;
  void *args[] = {&da, &da, &da, &n};
  void *extra_bad[] = {(void *)0x77, NULL, CU_LAUNCH_PARAM_END};
  P(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, extra_bad));
  void *extra_nosize[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, a, CU_LAUNCH_PARAM_END};
  P(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, extra_nosize));
  void *args_null[] = {&da, NULL, &da, &n};
  P(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, args_null, NULL));
  P(cuCtxSynchronize());
  CUstream s;
  P(cuStreamCreate(&s, 0));
  P(cuEventRecord(e2, s));
  P(cuModuleGetFunction(&fz, m, "_Z6faultyPi"));
  void *zargs[] = {&da};
  P(cuLaunchKernel(fz, 1, 1, 1, 32, 1, 1, 0, s, zargs, NULL));
  hostfn_ran = 0;
  P(cuLaunchHostFunc(s, hostfn, NULL));
  P(cuStreamAddCallback(s, cb, NULL, 0));
  P(cuEventRecord(e1, s));
  sleep(1);
  P(cuStreamQuery(s));
  P(cuEventQuery(e1));
  P(cuEventQuery(e2));
  P(cuEventSynchronize(e1));
  P(cuStreamSynchronize(s));
  printf("hostfn ran after fault %d, callback status %d\n", hostfn_ran, cb_status);
  P(cuEventElapsedTime(&ms, e2, e1));
  P(cuStreamDestroy(s));
  P(cuEventDestroy(e1));
  P(cuCtxGetCurrent(&cur));
  P(cuDevicePrimaryCtxGetState(dev, &fl, &n));
  return 0;
}
