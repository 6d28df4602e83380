/* What a CUBLASLT_MATMUL / CUBLASLT_HEURISTIC request may carry, shared by
 * the cuBLASLt facade (which refuses the rest with
 * CUBLAS_STATUS_NOT_SUPPORTED before sending) and rgpu-server (which
 * checks again: a hostile client must not get past it).  The type table
 * is cublasGemmEx's (rgpu_cublas_gemm_types.h): the real types that
 * softgpu computes too. */
#ifndef RGPU_CUBLASLT_SHAPE_H
#define RGPU_CUBLASLT_SHAPE_H

#include <cublasLt.h>
#include <stdint.h>

#include "rgpu_cublas_gemm_types.h"

/* The epilogues rgpu computes: none, ReLU, GELU, each with or without a
 * bias vector (m elements, added to every column of D before the
 * activation). */
static inline int rgpu_cublaslt_epilogue_ok(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_RELU ||
         e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS;
}
static inline int rgpu_cublaslt_epilogue_has_bias(uint32_t e) {
  return (e & CUBLASLT_EPILOGUE_BIAS) != 0;
}

/* Column-major (0) and row-major (1) layouts: the element (r, c) of a
 * rows x cols matrix with leading dimension ld lies at this index. */
static inline uint64_t rgpu_cublaslt_index(uint32_t order, int64_t ld, uint64_t r, uint64_t c) {
  return order == CUBLASLT_ORDER_ROW ? r * (uint64_t)ld + c : c * (uint64_t)ld + r;
}

/* The smallest leading dimension a layout may have (its column length in
 * column-major order, its row length in row-major order; at least 1). */
static inline uint64_t rgpu_cublaslt_min_ld(uint32_t order, uint64_t rows, uint64_t cols) {
  uint64_t v = order == CUBLASLT_ORDER_ROW ? cols : rows;
  return v ? v : 1;
}

/* Elements spanned by one matrix of the layout (0 when empty); -1 on
 * overflow. */
static inline int rgpu_cublaslt_span(uint32_t order, uint64_t rows, uint64_t cols, int64_t ld,
                                     uint64_t *out) {
  uint64_t outer = order == CUBLASLT_ORDER_ROW ? rows : cols;
  uint64_t inner = order == CUBLASLT_ORDER_ROW ? cols : rows;
  uint64_t t;
  if (rows == 0 || cols == 0) {
    *out = 0;
    return 0;
  }
  if (__builtin_mul_overflow(outer - 1, (uint64_t)ld, &t) || __builtin_add_overflow(t, inner, out))
    return -1;
  return 0;
}

#endif
