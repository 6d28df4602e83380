// Shared helpers for the end-to-end programs: every CUDA call is checked and
// a failure names the call, the code and CUDA's text, then exits 1, so ctest
// shows exactly what broke.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

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
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

#define EXPECT(cond)                                                              \
  do {                                                                            \
    if (!(cond)) {                                                                \
      std::fprintf(stderr, "FAIL %s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

static inline void pass(const char *name) { std::printf("PASS %s\n", name); }
