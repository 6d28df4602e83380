// Shared helpers for the driver-API end-to-end programs (drv_*.cu): every
// driver call is checked and a failure names the call and the driver's
// code, then exits 1; the module files the programs load are found beside
// the program itself (tests/CMakeLists.txt builds them there).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda.h>
#include <unistd.h>

#include "rgpu_check.h"

static inline const char *cu_name(CUresult r) {
  const char *s = nullptr;
  if (cuGetErrorName(r, &s) != CUDA_SUCCESS || !s) return "?";
  return s;
}

#define CU_CHECK(call)                                                            \
  do {                                                                            \
    CUresult r_ = (call);                                                         \
    if (r_ != CUDA_SUCCESS) {                                                     \
      std::fprintf(stderr, "FAIL %s:%d: %s -> %d %s\n", __FILE__, __LINE__, #call, \
                   (int)r_, cu_name(r_));                                         \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

#define CU_EXPECT_ERR(call, want)                                                 \
  do {                                                                            \
    CUresult r_ = (call);                                                         \
    if (r_ != (want)) {                                                           \
      std::fprintf(stderr, "FAIL %s:%d: %s -> %d %s, expected %d %s\n", __FILE__, \
                   __LINE__, #call, (int)r_, cu_name(r_), (int)(want), cu_name(want)); \
      rgpu_expect_failed();                                                       \
    }                                                                             \
  } while (0)

// path of a file next to this program's executable
static inline const char *beside_exe(const char *file) {
  static char buf[4096];
  char self[3000];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  self[n > 0 ? n : 0] = 0;
  char *slash = std::strrchr(self, '/');
  if (slash) *slash = 0;
  std::snprintf(buf, sizeof buf, "%s/%s", self, file);
  return buf;
}

// A whole file in memory (NUL after it); exits when it is missing.
static inline void *read_whole(const char *path, size_t *len) {
  FILE *f = std::fopen(path, "rb");
  if (!f) {
    std::fprintf(stderr, "FAIL cannot open %s\n", path);
    std::exit(1);
  }
  std::fseek(f, 0, SEEK_END);
  long n = std::ftell(f);
  std::fseek(f, 0, SEEK_SET);
  char *p = (char *)std::malloc((size_t)n + 1);
  if (!p || std::fread(p, 1, (size_t)n, f) != (size_t)n) std::exit(1);
  p[n] = 0;
  std::fclose(f);
  if (len) *len = (size_t)n;
  return p;
}

// The bit of one of the three kernels of drv_kernels/drv_kernels.cu (saxpy 1,
// add_counter 2, mixed 4) by name, 0 for any other name: enumerating all of
// a module's or library's kernels sets all three bits.
static inline int drv_kernels_bit(const char *name) {
  return std::strcmp(name, "saxpy") == 0         ? 1
         : std::strcmp(name, "add_counter") == 0 ? 2
         : std::strcmp(name, "mixed") == 0       ? 4
                                                 : 0;
}

// cuInit and device 0's primary context, current on this thread.
static inline CUcontext drv_setup(CUdevice *dev_out) {
  CU_CHECK(cuInit(0));
  CUdevice dev;
  CU_CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CU_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU_CHECK(cuCtxSetCurrent(ctx));
  if (dev_out) *dev_out = dev;
  return ctx;
}
