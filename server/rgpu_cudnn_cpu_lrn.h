/* softgpu's local response normalization across the channels (dimension 1)
 * of float tensors, for the LRN handler (rgpu_handlers_cudnn_lrn.c); kept
 * apart from rgpu_cudnn_cpu.h, whose interface the oneDNN backend
 * implements. */
#ifndef RGPU_CUDNN_CPU_LRN_H
#define RGPU_CUDNN_CPU_LRN_H

#include "rgpu_cudnn_cpu.h"

/* cuDNN's cross-channel LRN: window [c - lb, c + la], lb = (n-1)/2, la =
 * n-1-lb; scale = k + alpha/n sum x^2 over the window; y = x scale^-beta. */
typedef struct {
  unsigned n;
  double alpha, beta, k;
} rgpu_cudnn_cpu_lrn_params;

/* y = a lrn(x) + b y (b 0: y not read). */
void rgpu_cudnn_cpu_lrn_fwd(const rgpu_cudnn_cpu_lrn_params *p, const rgpu_cudnn_cpu_tensor *x,
                            const rgpu_cudnn_cpu_tensor *y, double a, double b);
/* dx = a lrn'(x, dy) + b dx (y, the forward's output, is not needed: the
 * scale is recomputed from x). */
void rgpu_cudnn_cpu_lrn_bwd(const rgpu_cudnn_cpu_lrn_params *p, const rgpu_cudnn_cpu_tensor *x,
                            const rgpu_cudnn_cpu_tensor *dy, const rgpu_cudnn_cpu_tensor *dx,
                            double a, double b);

#endif
