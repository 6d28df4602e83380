/* A server built without NVIDIA's libcublas.so.13 in its toolkit has no
 * generated cuBLAS table: every LIB_CALL for cuBLAS is then an unknown
 * function, answered CUDA_ERROR_NOT_SUPPORTED with that reason. */
#include "rgpu_cublas_server.h"

const rgpu_cublas_entry rgpu_cublas_table[1];
const size_t rgpu_cublas_table_len = 0;
