// Shared by the cuBLAS end-to-end programs: every cuBLAS call is checked and
// a failure names the call and cuBLAS's status name, then exits 1.
#pragma once
#include <cublas_v2.h>

#include "rgpu_check.h"

#define CB(call)                                                                  \
  do {                                                                            \
    cublasStatus_t st_ = (call);                                                  \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                           \
      std::fprintf(stderr, "FAIL %s:%d: %s -> %d %s\n", __FILE__, __LINE__, #call, \
                   (int)st_, cublasGetStatusName(st_));                           \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

#define CB_EXPECT(call, want)                                                     \
  do {                                                                            \
    cublasStatus_t st_ = (call);                                                  \
    if (st_ != (want)) {                                                          \
      std::fprintf(stderr, "FAIL %s:%d: %s -> %d %s, expected %d %s\n", __FILE__, \
                   __LINE__, #call, (int)st_, cublasGetStatusName(st_), (int)(want), \
                   cublasGetStatusName(want));                                    \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

// Relative error of got against a double-precision reference, scaled so
// that values near zero are compared absolutely.
static inline double rel_err(double got, double ref) {
  double d = got - ref;
  if (d < 0) d = -d;
  double m = ref < 0 ? -ref : ref;
  return d / (1.0 + m);
}
