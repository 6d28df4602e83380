/* softgpu's cuDNN operations on oneDNN (Intel's CPU deep-learning library,
 * Debian's libdnnl 2.6, its C API).  Each rgpu_cudnn_dnnl_X has the
 * contract of rgpu_cudnn_cpu_X (rgpu_cudnn_cpu.h) and returns 0 when oneDNN
 * computed it, or -1 when oneDNN refused the combination (a layout, an
 * algorithm, memory): then the output has not been touched and the caller
 * computes it with the reference (rgpu_cudnn_cpu_ref.h).
 * rgpu_cudnn_cpu.c is that caller; the unit test calls these directly so
 * that a silent fallback cannot pass for oneDNN. */
#ifndef RGPU_CUDNN_DNNL_H
#define RGPU_CUDNN_DNNL_H

#include "rgpu_cudnn_cpu.h"

int rgpu_cudnn_dnnl_conv_fwd(const rgpu_cudnn_cpu_conv *p);
int rgpu_cudnn_dnnl_conv_bwd_data(const rgpu_cudnn_cpu_conv *p);
int rgpu_cudnn_dnnl_conv_bwd_filter(const rgpu_cudnn_cpu_conv *p, float *dw);
int rgpu_cudnn_dnnl_add(const rgpu_cudnn_cpu_tensor *a, const rgpu_cudnn_cpu_tensor *c,
                        double alpha, double beta);
int rgpu_cudnn_dnnl_reduce_to(const rgpu_cudnn_cpu_tensor *dy, const rgpu_cudnn_cpu_tensor *db,
                              double alpha, double beta);
int rgpu_cudnn_dnnl_activation(const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *y,
                               int mode, double coef, double swish_beta, double alpha,
                               double beta);
int rgpu_cudnn_dnnl_activation_bwd(const rgpu_cudnn_cpu_tensor *y, const rgpu_cudnn_cpu_tensor *dy,
                                   const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *dx,
                                   int mode, double coef, double swish_beta, double alpha,
                                   double beta);
int rgpu_cudnn_dnnl_pooling(const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *y,
                            int mode, const int window[2], const int pad[2], const int stride[2],
                            double alpha, double beta);
int rgpu_cudnn_dnnl_pooling_bwd(const rgpu_cudnn_cpu_tensor *y, const rgpu_cudnn_cpu_tensor *dy,
                                const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *dx,
                                int mode, const int window[2], const int pad[2],
                                const int stride[2], double alpha, double beta);
int rgpu_cudnn_dnnl_softmax(const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *y,
                            int algo, int mode, double alpha, double beta);
int rgpu_cudnn_dnnl_softmax_bwd(const rgpu_cudnn_cpu_tensor *y, const rgpu_cudnn_cpu_tensor *dy,
                                const rgpu_cudnn_cpu_tensor *dx, int algo, int mode,
                                double alpha, double beta);
int rgpu_cudnn_dnnl_batchnorm_fwd_inference(const rgpu_cudnn_cpu_batchnorm *p);
int rgpu_cudnn_dnnl_batchnorm_fwd_training(const rgpu_cudnn_cpu_batchnorm *p);
int rgpu_cudnn_dnnl_batchnorm_bwd(const rgpu_cudnn_cpu_batchnorm *p);
int rgpu_cudnn_dnnl_op_tensor(const rgpu_cudnn_cpu_tensor *a, const rgpu_cudnn_cpu_tensor *b,
                              const rgpu_cudnn_cpu_tensor *c, int op, double alpha1,
                              double alpha2, double beta);

#endif
