/* softgpu's cudnnReduceTensor on float tensors, for the reduce handler
 * (rgpu_handlers_cudnn_reduce.c); kept apart from rgpu_cudnn_cpu.h, whose
 * interface the oneDNN backend implements. */
#ifndef RGPU_CUDNN_CPU_REDUCE_H
#define RGPU_CUDNN_CPU_REDUCE_H

#include <stdint.h>

#include "rgpu_cudnn_cpu.h"

/* c = alpha reduce_op(a) + beta c over every dimension where c is 1 (beta
 * 0: c not read); op is cudnnReduceTensorOp_t.  indices (NULL: none), one
 * per element of c in c's row-major order: the flattened row-major
 * position, within its reduced slice, of the first minimum (MIN), maximum
 * (MAX) or largest magnitude (AMAX). */
void rgpu_cudnn_cpu_reduce(int op, const rgpu_cudnn_cpu_tensor *a, const rgpu_cudnn_cpu_tensor *c,
                           uint32_t *indices, double alpha, double beta);

#endif
