/* The reference implementations of softgpu's cuDNN operations: plain C,
 * loops straight from the definitions, accumulation in double and one
 * rounding to float per output.  Each rgpu_cudnn_ref_X has the contract of
 * rgpu_cudnn_cpu_X (rgpu_cudnn_cpu.h).  They are what the oneDNN path
 * (rgpu_cudnn_dnnl.c) falls back to when oneDNN refuses a combination, and
 * what its unit test (rgpu_cudnn_cpu_test.c) checks it against; the test
 * checks every backward pass here against its forward by finite
 * differences. */
#ifndef RGPU_CUDNN_CPU_REF_H
#define RGPU_CUDNN_CPU_REF_H

#include "rgpu_cudnn_cpu.h"

void rgpu_cudnn_ref_conv_fwd(const rgpu_cudnn_cpu_conv *p);
void rgpu_cudnn_ref_conv_bwd_data(const rgpu_cudnn_cpu_conv *p);
void rgpu_cudnn_ref_conv_bwd_filter(const rgpu_cudnn_cpu_conv *p, float *dw);
void rgpu_cudnn_ref_add(const rgpu_cudnn_cpu_tensor *a, const rgpu_cudnn_cpu_tensor *c,
                        double alpha, double beta);
void rgpu_cudnn_ref_reduce_to(const rgpu_cudnn_cpu_tensor *dy, const rgpu_cudnn_cpu_tensor *db,
                              double alpha, double beta);
void rgpu_cudnn_ref_activation(const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *y,
                               int mode, double coef, double swish_beta, double alpha,
                               double beta);
void rgpu_cudnn_ref_activation_bwd(const rgpu_cudnn_cpu_tensor *y, const rgpu_cudnn_cpu_tensor *dy,
                                   const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *dx,
                                   int mode, double coef, double swish_beta, double alpha,
                                   double beta);
void rgpu_cudnn_ref_pooling(const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *y,
                            int mode, const int window[2], const int pad[2], const int stride[2],
                            double alpha, double beta);
void rgpu_cudnn_ref_pooling_bwd(const rgpu_cudnn_cpu_tensor *y, const rgpu_cudnn_cpu_tensor *dy,
                                const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *dx,
                                int mode, const int window[2], const int pad[2],
                                const int stride[2], double alpha, double beta);
void rgpu_cudnn_ref_softmax(const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *y,
                            int algo, int mode, double alpha, double beta);
void rgpu_cudnn_ref_softmax_bwd(const rgpu_cudnn_cpu_tensor *y, const rgpu_cudnn_cpu_tensor *dy,
                                const rgpu_cudnn_cpu_tensor *dx, int algo, int mode,
                                double alpha, double beta);
void rgpu_cudnn_ref_batchnorm_fwd_inference(const rgpu_cudnn_cpu_batchnorm *p);
void rgpu_cudnn_ref_batchnorm_fwd_training(const rgpu_cudnn_cpu_batchnorm *p);
void rgpu_cudnn_ref_batchnorm_bwd(const rgpu_cudnn_cpu_batchnorm *p);
void rgpu_cudnn_ref_op_tensor(const rgpu_cudnn_cpu_tensor *a, const rgpu_cudnn_cpu_tensor *b,
                              const rgpu_cudnn_cpu_tensor *c, int op, double alpha1,
                              double alpha2, double beta);
void rgpu_cudnn_ref_set(const rgpu_cudnn_cpu_tensor *y, double value);
void rgpu_cudnn_ref_scale(const rgpu_cudnn_cpu_tensor *y, double alpha);

#endif
