/* The predicates that cublas/libcublas.annotations' check= conditions use
 * (the generated stubs in rgpu_cublas_calls.c include this): cuBLAS's own
 * argument rules, so a bad call fails at once with its status, as it does
 * with a local GPU. */
#ifndef RGPU_CUBLAS_CHECKS_H
#define RGPU_CUBLAS_CHECKS_H

#include <cublas_api.h>
#include <stdint.h>

#include "rgpu_cublas_gemm_types.h"

static inline int rgpu_op_ok(cublasOperation_t op) {
  return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

/* A leading dimension's lower bound: max(1, rows). */
static inline int64_t rgpu_max1(int64_t rows) { return rows < 1 ? 1 : rows; }

#endif
