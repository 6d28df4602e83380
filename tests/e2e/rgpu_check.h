// Shared helpers for the end-to-end programs: every CUDA call is checked and
// a failure names the call, the code and CUDA's text, then exits 1, so ctest
// shows exactly what broke.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

// RGPU_E2E_PROBE=1: a failed EXPECT or EXPECT_ERR is reported and the program
// goes on, so one run on a GPU shows every place where CUDA's behaviour
// differs from what a test expects (CHECK still stops: the program could not
// go on sensibly).
static inline void rgpu_expect_failed(void) {
  const char *p = std::getenv("RGPU_E2E_PROBE");
  if (!(p && *p == '1')) std::exit(1);
  (void)cudaGetLastError();
}

#define CHECK(call)                                                               \
  do {                                                                            \
    cudaError_t err_ = (call);                                                    \
    if (err_ != cudaSuccess) {                                                    \
      std::fprintf(stderr, "FAIL %s:%d: %s -> %d %s (%s)\n", __FILE__, __LINE__, \
                   #call, (int)err_, cudaGetErrorName(err_),                      \
                   cudaGetErrorString(err_));                                     \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

#define EXPECT_ERR(call, want)                                                    \
  do {                                                                            \
    cudaError_t err_ = (call);                                                    \
    if (err_ != (want)) {                                                         \
      std::fprintf(stderr, "FAIL %s:%d: %s -> %d %s, expected %d %s\n", __FILE__, \
                   __LINE__, #call, (int)err_, cudaGetErrorName(err_), (int)(want), \
                   cudaGetErrorName(want));                                       \
      rgpu_expect_failed();                                                       \
    }                                                                             \
  } while (0)

#define EXPECT(cond)                                                              \
  do {                                                                            \
    if (!(cond)) {                                                                \
      std::fprintf(stderr, "FAIL %s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
      rgpu_expect_failed();                                                       \
    }                                                                             \
  } while (0)

static inline void pass(const char *name) { std::printf("PASS %s\n", name); }

// A number from the RGPU_STATS file at path (one JSON object), or -1.
static inline long rgpu_stat_of(const char *path, const char *key) {
  FILE *f = std::fopen(path, "r");
  if (!f) return -1;
  char buf[4096];
  size_t len = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[len] = 0;
  char k[128];
  std::snprintf(k, sizeof k, "\"%s\":", key);
  const char *p = std::strstr(buf, k);
  return p ? std::atol(p + std::strlen(k)) : -1;
}
