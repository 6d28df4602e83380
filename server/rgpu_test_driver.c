#define _GNU_SOURCE
/* A tiny fake CUDA driver for rgpu-server's own tests and fuzzer.
 *
 * It exports, under cuda.h's symbol names, exactly the functions the server
 * resolves, with host memory as device memory, so the server's session
 * logic is tested whatever state softgpu is in.  Copies are NOT bounds
 * checked here on purpose: the server must have rejected bad ranges before
 * calling, and AddressSanitizer in the fuzz build catches any it lets by.
 * Kernel pointers are checked (a real GPU would fault, not corrupt us).
 *
 * Modules: an image starting with "STUB" loads; it has the functions
 * "vecadd" (float *a, float *b, float *c, int n: c = a + b), "noop",
 * "hello" (prints through the sgSetPrintHandler hook) and the global
 * "gvar" (64 bytes).
 *
 * Device memory comes from an arena at a fixed address with a bump pointer
 * that restarts when everything is freed, so the same requests get the same
 * pointers in every run: the fuzzer's seeds can name valid allocations.
 * Under AddressSanitizer the arena is poisoned except for live
 * allocations. */
#include <cuda.h>
#include <stdint.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define API __attribute__((visibility("default")))

static int inited;
static int ctx_dummy;
static size_t mem_used;
#define STUB_MEM_TOTAL ((size_t)1 << 30)

typedef struct {
  uintptr_t p;
  size_t n;
} stub_alloc;
static stub_alloc allocs[4096];
static int nallocs;

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define STUB_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define STUB_ASAN 1
#endif
#ifdef STUB_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)0)
#define UNPOISON(p, n) ((void)0)
#endif

#define ARENA_BASE ((uintptr_t)0x500000000000ull)
#define ARENA_SIZE ((size_t)2 << 30)
static uint8_t *arena;
static size_t arena_top;

static void *arena_alloc(size_t n) {
  if (!arena) {
    void *m = mmap((void *)ARENA_BASE, ARENA_SIZE, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (m == MAP_FAILED) return NULL;
    arena = m;
    POISON(arena, ARENA_SIZE);
  }
  /* 256-byte alignment like the real driver, and a gap after each block. */
  size_t need = (n + 256 + 255) & ~(size_t)255;
  if (need < n || need > ARENA_SIZE - arena_top) return NULL;
  uint8_t *p = arena + arena_top;
  arena_top += need;
  UNPOISON(p, n);
  return p;
}

static void arena_free(void *p, size_t n) {
  POISON(p, n);
}

static int ptr_ok(uintptr_t p, size_t n) {
  for (int i = 0; i < nallocs; i++)
    if (p >= allocs[i].p && p - allocs[i].p <= allocs[i].n && n <= allocs[i].n - (p - allocs[i].p))
      return 1;
  return 0;
}

typedef struct {
  char globals[64];
  int used;
} stub_module;
static stub_module modules[256];
typedef struct {
  int kind; /* 1 vecadd, 2 noop, 3 hello */
} stub_func;
static stub_func funcs[3] = {{1}, {2}, {3}};
typedef struct {
  double t_ms;
  int recorded;
  unsigned flags;
  int used;
} stub_event;
/* Streams and events live in static pools: a context reset forgets them
 * without a free, as a real reset does, and nothing shows up as a leak. */
#define STUB_POOL 4096
static stub_event events[STUB_POOL];
static char streams[STUB_POOL];

static void (*print_fn)(void *, const char *, size_t);
static void *print_ctx;

API CUresult sgSetPrintHandler(void (*fn)(void *, const char *, size_t), void *ctx) {
  print_fn = fn;
  print_ctx = ctx;
  return CUDA_SUCCESS;
}

API CUresult cuInit(unsigned int flags) {
  if (flags) return CUDA_ERROR_INVALID_VALUE;
  inited = 1;
  return CUDA_SUCCESS;
}
#define NEED_INIT \
  if (!inited) return CUDA_ERROR_NOT_INITIALIZED
API CUresult cuDriverGetVersion(int *v) {
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  *v = 13000;
  return CUDA_SUCCESS;
}
API CUresult cuGetErrorName(CUresult r, const char **s) {
  switch (r) {
    case CUDA_SUCCESS: *s = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case CUDA_ERROR_NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; break;
    case CUDA_ERROR_ILLEGAL_ADDRESS: *s = "CUDA_ERROR_ILLEGAL_ADDRESS"; break;
    case CUDA_ERROR_INVALID_IMAGE: *s = "CUDA_ERROR_INVALID_IMAGE"; break;
    default: *s = "CUDA_ERROR_UNKNOWN"; break;
  }
  return CUDA_SUCCESS;
}
API CUresult cuGetErrorString(CUresult r, const char **s) { return cuGetErrorName(r, s); }
API CUresult cuDeviceGetCount(int *n) {
  NEED_INIT;
  *n = 1;
  return CUDA_SUCCESS;
}
API CUresult cuDeviceGet(CUdevice *d, int ord) {
  NEED_INIT;
  if (ord != 0) return CUDA_ERROR_INVALID_DEVICE;
  *d = 0;
  return CUDA_SUCCESS;
}
API CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
  if (d != 0) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(name, (size_t)len, "rgpu test driver");
  return CUDA_SUCCESS;
}
API CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d) {
  for (int i = 0; i < 16; i++) u->bytes[i] = (char)(i + 1);
  return CUDA_SUCCESS;
}
API CUresult cuDeviceTotalMem(size_t *b, CUdevice d) {
  *b = STUB_MEM_TOTAL;
  return CUDA_SUCCESS;
}
API CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
  if (a <= 0 || a >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 7; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 5; break;
    default: *v = (int)a; break;
  }
  return CUDA_SUCCESS;
}
API CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
  NEED_INIT;
  /* RGPU_TEST_DRIVER_REFUSE_CTX=code: refuse the context with that code,
   * as an H200 refuses a new primary context after a fault and a reset
   * (CUDA_ERROR_ILLEGAL_ADDRESS). */
  const char *refuse = getenv("RGPU_TEST_DRIVER_REFUSE_CTX");
  if (refuse && *refuse) return (CUresult)atoi(refuse);
  *c = (CUcontext)&ctx_dummy;
  return CUDA_SUCCESS;
}
API CUresult cuDevicePrimaryCtxRelease(CUdevice d) { return CUDA_SUCCESS; }
API CUresult cuDevicePrimaryCtxReset(CUdevice d) {
  memset(events, 0, sizeof events);
  memset(streams, 0, sizeof streams);
  for (int i = 0; i < 256; i++)
    if (modules[i].used) cuModuleUnload((CUmodule)&modules[i]);
  for (int i = 0; i < nallocs; i++) arena_free((void *)allocs[i].p, allocs[i].n);
  nallocs = 0;
  arena_top = 0;
  mem_used = 0;
  return CUDA_SUCCESS;
}
API CUresult cuCtxSetCurrent(CUcontext c) { return CUDA_SUCCESS; }
API CUresult cuCtxSynchronize(void) { return CUDA_SUCCESS; }
API CUresult cuMemGetInfo(size_t *f, size_t *t) {
  *f = STUB_MEM_TOTAL - mem_used;
  *t = STUB_MEM_TOTAL;
  return CUDA_SUCCESS;
}
API CUresult cuMemAlloc(CUdeviceptr *p, size_t n) {
  if (n == 0) return CUDA_ERROR_INVALID_VALUE;
  if (n > STUB_MEM_TOTAL - mem_used || nallocs == 4096) return CUDA_ERROR_OUT_OF_MEMORY;
  void *m = arena_alloc(n);
  if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
  allocs[nallocs++] = (stub_alloc){(uintptr_t)m, n};
  mem_used += n;
  *p = (CUdeviceptr)(uintptr_t)m;
  return CUDA_SUCCESS;
}
API CUresult cuMemFree(CUdeviceptr p) {
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].p == p) {
      arena_free((void *)allocs[i].p, allocs[i].n);
      mem_used -= allocs[i].n;
      allocs[i] = allocs[--nallocs];
      if (nallocs == 0) arena_top = 0;
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_INVALID_VALUE;
}
API CUresult cuMemcpyHtoD(CUdeviceptr d, const void *s, size_t n) {
  memcpy((void *)(uintptr_t)d, s, n);
  return CUDA_SUCCESS;
}
API CUresult cuMemcpyHtoDAsync(CUdeviceptr d, const void *s, size_t n, CUstream st) {
  return cuMemcpyHtoD(d, s, n);
}
API CUresult cuMemcpyDtoH(void *d, CUdeviceptr s, size_t n) {
  memcpy(d, (const void *)(uintptr_t)s, n);
  return CUDA_SUCCESS;
}
API CUresult cuMemcpyDtoHAsync(void *d, CUdeviceptr s, size_t n, CUstream st) {
  return cuMemcpyDtoH(d, s, n);
}
API CUresult cuMemcpyDtoD(CUdeviceptr d, CUdeviceptr s, size_t n) {
  memmove((void *)(uintptr_t)d, (const void *)(uintptr_t)s, n);
  return CUDA_SUCCESS;
}
API CUresult cuMemcpyDtoDAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
  return cuMemcpyDtoD(d, s, n);
}
API CUresult cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n) {
  memset((void *)(uintptr_t)d, v, n);
  return CUDA_SUCCESS;
}
API CUresult cuMemsetD16(CUdeviceptr d, unsigned short v, size_t n) {
  if (d % 2) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < n; i++) memcpy((char *)(uintptr_t)d + 2 * i, &v, 2);
  return CUDA_SUCCESS;
}
API CUresult cuMemsetD32(CUdeviceptr d, unsigned int v, size_t n) {
  if (d % 4) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < n; i++) memcpy((char *)(uintptr_t)d + 4 * i, &v, 4);
  return CUDA_SUCCESS;
}
API CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) {
  return cuMemsetD8(d, v, n);
}
API CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s) {
  return cuMemsetD16(d, v, n);
}
API CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s) {
  return cuMemsetD32(d, v, n);
}
API CUresult cuModuleLoadData(CUmodule *m, const void *image) {
  if (memcmp(image, "STUB", 4)) return CUDA_ERROR_INVALID_IMAGE;
  for (int i = 0; i < 256; i++)
    if (!modules[i].used) {
      modules[i].used = 1;
      UNPOISON(modules[i].globals, sizeof modules[i].globals);
      memset(modules[i].globals, 0, sizeof modules[i].globals);
      *m = (CUmodule)&modules[i];
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_OUT_OF_MEMORY;
}
API CUresult cuModuleUnload(CUmodule m) {
  stub_module *sm = (stub_module *)m;
  if (sm < modules || sm >= modules + 256 || !sm->used) return CUDA_ERROR_INVALID_HANDLE;
  sm->used = 0;
  POISON(sm->globals, sizeof sm->globals);
  return CUDA_SUCCESS;
}
API CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
  if (!strcmp(name, "vecadd")) *f = (CUfunction)&funcs[0];
  else if (!strcmp(name, "noop")) *f = (CUfunction)&funcs[1];
  else if (!strcmp(name, "hello")) *f = (CUfunction)&funcs[2];
  else return CUDA_ERROR_NOT_FOUND;
  return CUDA_SUCCESS;
}
API CUresult cuModuleGetGlobal(CUdeviceptr *p, size_t *n, CUmodule m, const char *name) {
  if (strcmp(name, "gvar")) return CUDA_ERROR_NOT_FOUND;
  stub_module *sm = (stub_module *)m;
  *p = (CUdeviceptr)(uintptr_t)sm->globals;
  *n = sizeof sm->globals;
  return CUDA_SUCCESS;
}
API CUresult cuFuncGetParamInfo(CUfunction f, size_t i, size_t *off, size_t *sz) {
  stub_func *sf = (stub_func *)f;
  if (sf->kind != 1 || i >= 4) return CUDA_ERROR_INVALID_VALUE;
  *off = i * 8;
  *sz = i == 3 ? 4 : 8;
  return CUDA_SUCCESS;
}
API CUresult cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction f) {
  if (a < 0 || a >= CU_FUNC_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  *v = a == CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK ? 1024 : 0;
  return CUDA_SUCCESS;
}
API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                            unsigned by, unsigned bz, unsigned shm, CUstream s, void **params,
                            void **extra) {
  stub_func *sf = (stub_func *)f;
  if (!gx || !gy || !gz || !bx || !by || !bz || (uint64_t)bx * by * bz > 1024)
    return CUDA_ERROR_INVALID_VALUE;
  if (sf->kind == 3) {
    if (print_fn) print_fn(print_ctx, "hello from the stub\n", 20);
    return CUDA_SUCCESS;
  }
  if (sf->kind != 1) return CUDA_SUCCESS;
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  float *a, *b, *c;
  int n;
  memcpy(&a, params[0], 8);
  memcpy(&b, params[1], 8);
  memcpy(&c, params[2], 8);
  memcpy(&n, params[3], 4);
  if (n < 0) return CUDA_ERROR_INVALID_VALUE;
  size_t bytes = (size_t)n * sizeof(float);
  if (!ptr_ok((uintptr_t)a, bytes) || !ptr_ok((uintptr_t)b, bytes) || !ptr_ok((uintptr_t)c, bytes))
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  if (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % sizeof(float)) return CUDA_ERROR_MISALIGNED_ADDRESS;
  for (int i = 0; i < n; i++) c[i] = a[i] + b[i];
  return CUDA_SUCCESS;
}
API CUresult cuStreamCreateWithPriority(CUstream *s, unsigned flags, int prio) {
  for (int i = 0; i < STUB_POOL; i++)
    if (!streams[i]) {
      streams[i] = 1;
      *s = (CUstream)&streams[i];
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_OUT_OF_MEMORY;
}
API CUresult cuStreamDestroy(CUstream s) {
  char *p = (char *)s;
  if (p < streams || p >= streams + STUB_POOL || !*p) return CUDA_ERROR_INVALID_HANDLE;
  *p = 0;
  return CUDA_SUCCESS;
}
API CUresult cuStreamSynchronize(CUstream s) { return CUDA_SUCCESS; }
API CUresult cuStreamQuery(CUstream s) { return CUDA_SUCCESS; }
API CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags) { return CUDA_SUCCESS; }
API CUresult cuEventCreate(CUevent *e, unsigned flags) {
  for (int i = 0; i < STUB_POOL; i++)
    if (!events[i].used) {
      events[i] = (stub_event){0, 0, flags, 1};
      *e = (CUevent)&events[i];
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_OUT_OF_MEMORY;
}
API CUresult cuEventDestroy(CUevent e) {
  stub_event *se = (stub_event *)e;
  if (se < events || se >= events + STUB_POOL || !se->used) return CUDA_ERROR_INVALID_HANDLE;
  se->used = 0;
  return CUDA_SUCCESS;
}
API CUresult cuEventRecord(CUevent e, CUstream s) {
  stub_event *se = (stub_event *)e;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  se->t_ms = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
  se->recorded = 1;
  return CUDA_SUCCESS;
}
API CUresult cuEventSynchronize(CUevent e) { return CUDA_SUCCESS; }
API CUresult cuEventQuery(CUevent e) { return CUDA_SUCCESS; }
API CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) {
  stub_event *x = (stub_event *)a, *y = (stub_event *)b;
  if (!x->recorded || !y->recorded) return CUDA_ERROR_INVALID_HANDLE;
  *ms = (float)(y->t_ms - x->t_ms);
  return CUDA_SUCCESS;
}
