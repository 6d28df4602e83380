/* softgpu's dropout on float tensors, for the dropout handler
 * (rgpu_handlers_cudnn_dropout.c); kept apart from rgpu_cudnn_cpu.h, whose
 * interface the oneDNN backend implements.  The random-number states are
 * two u64 in device memory: the seed and a counter of the values drawn,
 * so each forward call draws a fresh mask in stream order. */
#ifndef RGPU_CUDNN_CPU_DROPOUT_H
#define RGPU_CUDNN_CPU_DROPOUT_H

#include <stdint.h>

#include "rgpu_cudnn_cpu.h"

#define RGPU_CUDNN_CPU_DROPOUT_STATES 16 /* bytes: seed, counter */

/* states = {seed, 0}. */
void rgpu_cudnn_cpu_dropout_init(uint64_t *states, uint64_t seed);
/* y = x / (1 - p) where kept, else 0; mask (a byte per element of x,
 * row-major) records which were kept; the counter advances by the
 * elements drawn. */
void rgpu_cudnn_cpu_dropout_fwd(float p, uint64_t *states, const rgpu_cudnn_cpu_tensor *x,
                                const rgpu_cudnn_cpu_tensor *y, uint8_t *mask);
/* dx = dy / (1 - p) where the forward's mask kept, else 0. */
void rgpu_cudnn_cpu_dropout_bwd(float p, const uint8_t *mask, const rgpu_cudnn_cpu_tensor *dy,
                                const rgpu_cudnn_cpu_tensor *dx);

#endif
