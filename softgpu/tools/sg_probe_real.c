/* sg_probe_real: asks the real CUDA driver the questions softgpu must answer
 * the same way (error texts, attribute values, error codes of edge cases).
 * Run on a machine with a GPU; its output is what softgpu's tables and
 * tests were checked against.  Not part of the build: compile with
 *   cc -I/usr/local/cuda/include sg_probe_real.c -L/usr/local/cuda/lib64/stubs -lcuda
 * and run with the fatbins of softgpu/testdata in argv[1]. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define P(expr) printf("%-70s -> %d\n", #expr, (int)(expr))

static void *load(const char *dir, const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  if (!f) { printf("cannot open %s\n", path); return NULL; }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc(n + 1);
  if (fread(b, 1, n, f) != (size_t)n) { fclose(f); free(b); return NULL; }
  b[n] = 0;
  fclose(f);
  return b;
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : ".";
  CUdevice dev;
  CUcontext ctx = NULL, cur = NULL;
  unsigned flags = 0;
  int active = -1, v = 0;
  P(cuCtxGetCurrent(&cur));
  P(cuInit(0));
  P(cuCtxGetCurrent(&cur));
  printf("current before retain: %p\n", (void *)cur);
  P(cuDeviceGet(&dev, 0));
  P(cuDeviceGet(&dev, 99));
  P(cuDevicePrimaryCtxGetState(0, &flags, &active));
  printf("primary state: flags=%u active=%d\n", flags, active);
  P(cuDriverGetVersion(&v));
  printf("driver version %d\n", v);
  char name[256];
  P(cuDeviceGetName(name, sizeof name, 0));
  printf("name '%s'\n", name);

  printf("== errors\n");
  for (int e = 0; e < 1000; e++) {
    const char *n = NULL, *s = NULL;
    CUresult r1 = cuGetErrorName((CUresult)e, &n);
    CUresult r2 = cuGetErrorString((CUresult)e, &s);
    if (r1 == CUDA_SUCCESS || r2 == CUDA_SUCCESS)
      printf("ERR %d|%s|%s\n", e, n ? n : "(null)", s ? s : "(null)");
  }
  const char *n = (const char *)1;
  printf("unknown code: name rc=%d ptr=%p\n", cuGetErrorName((CUresult)12345, &n), (void *)n);

  printf("== attributes\n");
  for (int a = 0; a < 200; a++) {
    int val = -12345;
    CUresult r = cuDeviceGetAttribute(&val, (CUdevice_attribute)a, dev);
    printf("ATTR %d rc=%d val=%d\n", a, r, val);
  }
  size_t tot = 0;
  P(cuDeviceTotalMem(&tot, dev));
  printf("total %zu\n", tot);

  P(cuDevicePrimaryCtxRetain(&ctx, dev));
  P(cuDevicePrimaryCtxGetState(0, &flags, &active));
  printf("primary state: flags=%u active=%d\n", flags, active);
  P(cuCtxGetCurrent(&cur));
  printf("current after retain (not set): %p\n", (void *)cur);
  P(cuMemAlloc(&(CUdeviceptr){0}, 16));
  P(cuCtxSetCurrent(ctx));
  unsigned api = 0;
  P(cuCtxGetApiVersion(ctx, &api));
  printf("api version %u\n", api);
  int lo, hi;
  P(cuCtxGetStreamPriorityRange(&lo, &hi));
  printf("prio range least=%d greatest=%d\n", lo, hi);

  printf("== memory\n");
  CUdeviceptr d = 0, d2 = 0, base = 0;
  size_t sz = 0;
  P(cuMemAlloc(&d, 0));
  P(cuMemAlloc(&d, 1000));
  P(cuMemAlloc(&d2, 1));
  printf("d=%llx d2=%llx diff=%lld\n", (unsigned long long)d, (unsigned long long)d2, (long long)(d2 - d));
  P(cuMemGetAddressRange(&base, &sz, d + 10));
  printf("range base-d=%lld size=%zu\n", (long long)(base - d), sz);
  P(cuMemGetAddressRange(&base, &sz, d + 1000));
  P(cuMemGetAddressRange(&base, &sz, d + 1024));
  P(cuMemGetAddressRange(&base, &sz, 0));
  char hbuf[4096];
  P(cuMemcpyHtoD(d, hbuf, 1000));
  P(cuMemcpyHtoD(d, hbuf, 1001));
  P(cuMemcpyHtoD(d, hbuf, 1024));
  P(cuMemcpyHtoD(d, hbuf, 2048));
  P(cuMemcpyHtoD(d + 999, hbuf, 2));
  P(cuMemcpyDtoH(hbuf, d, 1001));
  P(cuMemcpyDtoH(hbuf, 0x1000, 4));
  P(cuMemcpyDtoD(d, d2, 1));
  P(cuMemcpyDtoD(d, d2, 300));
  P(cuMemcpyHtoD(d, hbuf, 0));
  P(cuMemsetD32(d + 2, 0, 4));
  P(cuMemsetD16(d + 1, 0, 4));
  P(cuMemsetD32(d, 0, 250));
  P(cuMemsetD32(d, 0, 251));
  P(cuMemsetD8(d, 0, 1001));
  P(cuMemcpy(d, (CUdeviceptr)hbuf, 100));
  P(cuMemcpy((CUdeviceptr)hbuf, d, 1001));
  size_t fr, to;
  P(cuMemGetInfo(&fr, &to));
  P(cuMemAlloc(&base, (size_t)1 << 50));
  unsigned mt = 0;
  CUcontext pctx = NULL;
  P(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d));
  printf("memtype %u\n", mt);
  P(cuPointerGetAttribute(&pctx, CU_POINTER_ATTRIBUTE_CONTEXT, d));
  printf("ctx match %d\n", pctx == ctx);
  P(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)hbuf));
  unsigned long long ull = 0;
  P(cuPointerGetAttribute(&ull, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d + 5));
  P(cuPointerGetAttribute(&ull, CU_POINTER_ATTRIBUTE_BUFFER_ID, d + 5));
  printf("buffer id %llu\n", ull);
  int ord = -5;
  P(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d + 5));
  void *hp = NULL;
  P(cuMemAllocHost(&hp, 100));
  P(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)hp));
  printf("host memtype %u\n", mt);
  P(cuMemcpyHtoD(d, hp, 100));
  P(cuMemGetAddressRange(&base, &sz, (CUdeviceptr)hp));
  printf("host range size %zu\n", sz);
  P(cuMemFreeHost(hp));
  P(cuMemFreeHost(hbuf));
  P(cuMemFree(d2));
  P(cuMemFree(d2));
  P(cuMemFree(d + 4));
  P(cuMemFree(0));

  printf("== streams/events\n");
  CUstream s = NULL;
  CUevent e1, e2, e3;
  float ms = -1;
  P(cuStreamCreate(&s, 0));
  P(cuStreamCreate(&s, 7));
  P(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, -100));
  int prio = 99;
  P(cuStreamGetPriority(s, &prio));
  printf("clamped prio %d\n", prio);
  P(cuStreamGetFlags(s, &flags));
  printf("stream flags %u\n", flags);
  P(cuStreamGetFlags(NULL, &flags));
  printf("null stream flags %u\n", flags);
  P(cuStreamGetPriority(NULL, &prio));
  P(cuEventCreate(&e1, 0));
  P(cuEventCreate(&e2, 0));
  P(cuEventCreate(&e3, CU_EVENT_DISABLE_TIMING));
  P(cuEventCreate(&e3, 0x100));
  P(cuEventCreate(&e3, CU_EVENT_DISABLE_TIMING));
  P(cuEventQuery(e1));
  P(cuEventSynchronize(e1));
  P(cuEventElapsedTime(&ms, e1, e2));
  P(cuEventRecord(e1, s));
  P(cuEventElapsedTime(&ms, e1, e2));
  P(cuEventRecord(e2, s));
  P(cuEventSynchronize(e2));
  P(cuEventElapsedTime(&ms, e1, e2));
  P(cuEventElapsedTime(&ms, e2, e1));
  printf("ms e2->e1 %f\n", ms);
  P(cuEventRecord(e3, s));
  P(cuEventSynchronize(e3));
  P(cuEventElapsedTime(&ms, e1, e3));
  P(cuStreamWaitEvent(s, e1, 0));
  P(cuStreamWaitEvent(s, e1, 5));
  P(cuStreamQuery(s));
  P(cuEventRecordWithFlags(e1, s, 0));
  P(cuEventRecordWithFlags(e1, s, 8));
  P(cuStreamDestroy(s));
  P(cuEventDestroy(e1));

  printf("== VMM\n");
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t gmin = 0, grec = 0;
  P(cuMemGetAllocationGranularity(&gmin, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  P(cuMemGetAllocationGranularity(&grec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  printf("granularity min %zu rec %zu\n", gmin, grec);
  CUdeviceptr va = 0;
  P(cuMemAddressReserve(&va, gmin * 4, 0, 0, 0));
  P(cuMemAddressReserve(&base, 1000, 0, 0, 0));
  CUmemGenericAllocationHandle h = 0, h2 = 0;
  P(cuMemCreate(&h, 1000, &prop, 0));
  P(cuMemCreate(&h, gmin, &prop, 0));
  P(cuMemCreate(&h2, gmin * 2, &prop, 0));
  P(cuMemcpyHtoD(va, hbuf, 16));
  P(cuMemMap(va, gmin, 0, h, 0));
  P(cuMemcpyHtoD(va, hbuf, 16));
  P(cuMemMap(va, gmin, 0, h, 0));
  P(cuMemMap(va + gmin, gmin, 0, h2, 0));
  P(cuMemMap(va + gmin, gmin * 2, 0, h2, 0));
  P(cuMemMap(va + gmin * 3, gmin, gmin, h2, 0));
  CUmemAccessDesc acc;
  acc.location = prop.location;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  P(cuMemSetAccess(va, gmin, &acc, 1));
  P(cuMemcpyHtoD(va, hbuf, 16));
  P(cuMemcpyHtoD(va + gmin - 8, hbuf, 16));
  P(cuMemSetAccess(va, gmin * 2, &acc, 1));
  P(cuMemcpyHtoD(va + gmin - 8, hbuf, 16));
  P(cuMemGetAddressRange(&base, &sz, va + gmin + 5));
  printf("vmm range base-va=%lld size=%zu\n", (long long)(base - va), sz);
  P(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va));
  P(cuMemsetD8(va, 1, gmin * 2));
  P(cuMemsetD8(va, 1, gmin * 4));
  P(cuMemUnmap(va + 1, gmin));
  P(cuMemUnmap(va, gmin / 2));
  P(cuMemRelease(h));
  P(cuMemUnmap(va, gmin));
  P(cuMemcpyHtoD(va, hbuf, 16));
  P(cuMemUnmap(va + gmin, gmin));
  P(cuMemRelease(h2));
  P(cuMemRelease(h2));
  P(cuMemAddressFree(va, gmin * 4));
  P(cuMemAddressFree(va, gmin * 4));

  printf("== modules\n");
  CUmodule m = NULL;
  CUfunction f = NULL;
  P(cuModuleLoadData(&m, "garbage"));
  P(cuModuleLoadData(&m, "\x7f" "ELFgarbage"));
  const char *files[] = {"kernels_zstd.fatbin", "kernels_lz4.fatbin", "kernels_none.fatbin",
                         "kernels_ptx.fatbin", "kernels_sass.fatbin", "kernels.cubin", "kernels.ptx",
                         "kernels_multi.fatbin"};
  for (int i = 0; i < 8; i++) {
    void *img = load(dir, files[i]);
    if (!img) continue;
    CUresult r = cuModuleLoadData(&m, img);
    printf("load %s -> %d\n", files[i], r);
    if (r == CUDA_SUCCESS && i != 7) P(cuModuleUnload(m));
  }
  void *img = load(dir, "kernels_ptx.fatbin");
  P(cuModuleLoadData(&m, img));
  unsigned cnt = 0;
  P(cuModuleGetFunctionCount(&cnt, m));
  printf("function count %u\n", cnt);
  CUfunction fs[32];
  P(cuModuleEnumerateFunctions(fs, cnt, m));
  P(cuModuleEnumerateFunctions(fs, 1, m));
  for (unsigned i = 0; i < cnt; i++) {
    const char *fn = NULL;
    cuFuncGetName(&fn, fs[i]);
    printf("func %s:", fn);
    for (size_t k = 0; k < 10; k++) {
      size_t off, psz;
      CUresult r = cuFuncGetParamInfo(fs[i], k, &off, &psz);
      if (r) { printf(" end rc=%d", r); break; }
      printf(" #%zu@%zu:%zu", k, off, psz);
    }
    int attrs[10];
    for (int a = 0; a < 10; a++) { attrs[a] = -1; cuFuncGetAttribute(&attrs[a], (CUfunction_attribute)a, fs[i]); }
    printf(" attrs");
    for (int a = 0; a < 10; a++) printf(" %d", attrs[a]);
    printf("\n");
  }
  P(cuModuleGetFunction(&f, m, "nonexistent"));
  P(cuModuleGetFunction(&f, m, "_Z6vecaddPKfS0_Pfi"));
  CUdeviceptr g = 0;
  P(cuModuleGetGlobal(&g, &sz, m, "g_table"));
  printf("g_table size %zu\n", sz);
  P(cuModuleGetGlobal(&g, &sz, m, "c_coef"));
  printf("c_coef size %zu\n", sz);
  P(cuModuleGetGlobal(&g, &sz, m, "nonexistent"));
  int init[4] = {0};
  P(cuModuleGetGlobal(&g, &sz, m, "g_init"));
  P(cuMemcpyDtoH(init, g, 16));
  printf("g_init %d %d %d %d\n", init[0], init[1], init[2], init[3]);
  P(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, g));
  P(cuMemGetAddressRange(&base, &sz, g));
  printf("global range size %zu\n", sz);
  P(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100000));
  P(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1 << 20));
  P(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 10));
  P(cuFuncSetCacheConfig(f, CU_FUNC_CACHE_PREFER_SHARED));

  printf("== launches\n");
  CUdeviceptr a = 0, b = 0, c = 0;
  int nn = 256;
  cuMemAlloc(&a, 1024);
  cuMemAlloc(&b, 1024);
  cuMemAlloc(&c, 1024);
  void *args[] = {&a, &b, &c, &nn};
  P(cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
  P(cuLaunchKernel(f, 1, 1, 1, 2048, 1, 1, 0, NULL, args, NULL));
  P(cuLaunchKernel(f, 1, 1, 1, 0, 1, 1, 0, NULL, args, NULL));
  P(cuLaunchKernel(f, 0, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
  P(cuLaunchKernel(f, 1, 1, 1, 1, 1, 65, 0, NULL, args, NULL));
  P(cuLaunchKernel(f, 1, 70000, 1, 1, 1, 1, 0, NULL, args, NULL));
  P(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 49152, NULL, args, NULL));
  P(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 49153, NULL, args, NULL));
  P(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 90000, NULL, args, NULL));
  P(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
  char pbuf[28];
  memcpy(pbuf, &a, 8);
  memcpy(pbuf + 8, &b, 8);
  memcpy(pbuf + 16, &c, 8);
  memcpy(pbuf + 24, &nn, 4);
  size_t psize = sizeof pbuf;
  void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, pbuf, CU_LAUNCH_PARAM_BUFFER_SIZE, &psize, CU_LAUNCH_PARAM_END};
  P(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, extra));
  P(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, args, extra));
  psize = 20;
  P(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, extra));
  psize = 40;
  P(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, extra));
  P(cuCtxSynchronize());
  CUfunction fz = NULL, fnp = NULL;
  P(cuModuleGetFunction(&fnp, m, "noparams"));
  P(cuLaunchKernel(fnp, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
  P(cuModuleGetFunction(&fz, m, "_Z6faultyPi"));
  void *zargs[] = {&a};
  P(cuLaunchKernel(fz, 1, 1, 1, 32, 1, 1, 0, NULL, zargs, NULL));
  P(cuCtxSynchronize());
  P(cuCtxSynchronize());
  P(cuMemAlloc(&d, 16));
  P(cuMemcpyHtoD(a, hbuf, 4));
  P(cuStreamCreate(&s, 0));
  P(cuEventCreate(&e1, 0));
  P(cuModuleUnload(m));
  P(cuMemFree(a));
  P(cuCtxGetApiVersion(ctx, &api));
  P(cuDevicePrimaryCtxGetState(0, &flags, &active));
  P(cuDevicePrimaryCtxRelease(dev));
  P(cuDevicePrimaryCtxReset(dev));
  P(cuCtxGetCurrent(&cur));
  printf("current after reset: same=%d null=%d\n", cur == ctx, cur == NULL);
  P(cuMemAlloc(&d, 16));
  P(cuDevicePrimaryCtxRetain(&ctx, dev));
  P(cuMemAlloc(&d, 16));
  P(cuCtxSetCurrent(ctx));
  P(cuMemAlloc(&d, 16));
  P(cuDevicePrimaryCtxGetState(0, &flags, &active));
  printf("primary state: flags=%u active=%d\n", flags, active);
  P(cuDevicePrimaryCtxSetFlags(dev, CU_CTX_SCHED_BLOCKING_SYNC));
  P(cuDevicePrimaryCtxRelease(dev));
  P(cuDevicePrimaryCtxRelease(dev));

  printf("== ctx create\n");
  CUcontext c2 = NULL, popped = NULL;
  P(cuCtxCreate(&c2, NULL, 0, dev));
  P(cuCtxGetCurrent(&cur));
  printf("created is current %d\n", cur == c2);
  P(cuCtxPopCurrent(&popped));
  printf("popped is created %d\n", popped == c2);
  P(cuCtxPopCurrent(&popped));
  P(cuCtxGetCurrent(&cur));
  printf("current after pops null=%d\n", cur == NULL);
  P(cuCtxPushCurrent(c2));
  CUdevice dd = -1;
  P(cuCtxGetDevice(&dd));
  P(cuCtxDestroy(c2));
  P(cuCtxGetCurrent(&cur));
  printf("after destroy current null=%d\n", cur == NULL);
  P(cuCtxGetDevice(&dd));
  P(cuCtxSynchronize());
  return 0;
}
