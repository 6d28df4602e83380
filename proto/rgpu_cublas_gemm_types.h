/* Which type combinations of cublasGemmEx softgpu computes (its
 * annotation's cpuif: the client refuses others with
 * CUBLAS_STATUS_NOT_SUPPORTED when the server is softgpu, and
 * server/rgpu_cublas_cpu.c checks them again), and the scalars' type of
 * each.  cublasGemmEx's table in NVIDIA's documentation, restricted to the
 * real types; a GPU server takes every combination cuBLAS does. */
#ifndef RGPU_CUBLAS_GEMM_TYPES_H
#define RGPU_CUBLAS_GEMM_TYPES_H

#include <cublas_api.h>
#include <library_types.h>
#include <stdint.h>

/* The scalars' type for compute type `compute` (0: a typed call, whose
 * scalars have A's type), or -1 when rgpu does not carry the combination. */
static inline int rgpu_cublas_gemm_scale_type(uint32_t atype, uint32_t btype, uint32_t ctype,
                                              uint32_t compute) {
  if (compute == 0)
    return atype == btype && btype == ctype && (atype == CUDA_R_32F || atype == CUDA_R_64F)
               ? (int)atype : -1;
  if (atype != btype) return -1;
  switch (compute) {
    case CUBLAS_COMPUTE_16F:
    case CUBLAS_COMPUTE_16F_PEDANTIC:
      return atype == CUDA_R_16F && ctype == CUDA_R_16F ? CUDA_R_16F : -1;
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
    case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF:
    case CUBLAS_COMPUTE_32F_FAST_TF32:
      if (atype == CUDA_R_32F) return ctype == CUDA_R_32F ? CUDA_R_32F : -1;
      if (atype == CUDA_R_16F || atype == CUDA_R_16BF)
        return ctype == atype || ctype == CUDA_R_32F ? CUDA_R_32F : -1;
      return -1;
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC:
      return atype == CUDA_R_64F && ctype == CUDA_R_64F ? CUDA_R_64F : -1;
    default:
      return -1;
  }
}

/* Bytes of one element of a type the table above allows. */
static inline size_t rgpu_cublas_type_size(uint32_t t) {
  return t == CUDA_R_64F ? 8 : t == CUDA_R_32F ? 4 : 2;
}

#endif
