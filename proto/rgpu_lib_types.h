/* Sizes of the library data types that travel in LIB_CALL: a host-mode
 * scalar or result whose C type is `void *` takes its size from a
 * cudaDataType parameter (cublasGemmEx's alpha from its compute type,
 * cublasDotEx's result from resultType).  Shared by the generated client
 * stubs and server dispatch. */
#ifndef RGPU_LIB_TYPES_H
#define RGPU_LIB_TYPES_H

#include <cublas_api.h>
#include <library_types.h>
#include <stddef.h>

/* Bytes of one element of cudaDataType t; 0 for a type rgpu does not know
 * (the call is then refused as malformed, never sized by a guess). */
static inline size_t rgpu_cuda_type_size(int t) {
  switch (t) {
    case CUDA_R_8I: case CUDA_R_8U: case CUDA_R_8F_E4M3: case CUDA_R_8F_E5M2: return 1;
    case CUDA_R_16F: case CUDA_R_16BF: case CUDA_C_8I: case CUDA_C_8U: case CUDA_R_16I:
    case CUDA_R_16U: return 2;
    case CUDA_R_32F: case CUDA_C_16F: case CUDA_C_16BF: case CUDA_R_32I: case CUDA_R_32U:
    case CUDA_C_16I: case CUDA_C_16U: return 4;
    case CUDA_R_64F: case CUDA_C_32F: case CUDA_C_32I: case CUDA_C_32U: case CUDA_R_64I:
    case CUDA_R_64U: return 8;
    case CUDA_C_64F: case CUDA_C_64I: case CUDA_C_64U: return 16;
    default: return 0;
  }
}

/* The scalars' type of a cublasGemmEx-style call (NVIDIA's table: the
 * compute type decides, complex when A is complex), as a cudaDataType;
 * -1 for a compute type rgpu does not know. */
static inline int rgpu_cublas_compute_scale_type(int compute, int atype) {
  int cplx = atype == CUDA_C_16F || atype == CUDA_C_16BF || atype == CUDA_C_32F ||
                atype == CUDA_C_64F || atype == CUDA_C_8I || atype == CUDA_C_32I;
  switch (compute) {
    case CUBLAS_COMPUTE_16F: case CUBLAS_COMPUTE_16F_PEDANTIC: return CUDA_R_16F;
    case CUBLAS_COMPUTE_32F: case CUBLAS_COMPUTE_32F_PEDANTIC: case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF: case CUBLAS_COMPUTE_32F_FAST_TF32:
      return cplx ? CUDA_C_32F : CUDA_R_32F;
    case CUBLAS_COMPUTE_64F: case CUBLAS_COMPUTE_64F_PEDANTIC:
      return cplx ? CUDA_C_64F : CUDA_R_64F;
    case CUBLAS_COMPUTE_32I: case CUBLAS_COMPUTE_32I_PEDANTIC: return CUDA_R_32I;
    default: return -1;
  }
}

/* The size of a scalar of cudaDataType t, 0 when unknown (see above). */
static inline size_t rgpu_cuda_scalar_size(int t) { return t < 0 ? 0 : rgpu_cuda_type_size(t); }

#endif
