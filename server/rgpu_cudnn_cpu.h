/* softgpu's cuDNN forward operations: straightforward CPU code for float
 * tensors (any dimensions and strides the server has checked), run in a
 * host function on the request's stream.  oneDNN is the eventual backend;
 * these are the reference the tests compare against. */
#ifndef RGPU_CUDNN_CPU_H
#define RGPU_CUDNN_CPU_H

#include <stdint.h>

#define RGPU_CUDNN_CPU_DIM_MAX 8

/* A float tensor at host address base (checked by the caller). */
typedef struct {
  int nb;
  int dim[RGPU_CUDNN_CPU_DIM_MAX];
  int stride[RGPU_CUDNN_CPU_DIM_MAX];
  float *base;
} rgpu_cudnn_cpu_tensor;

/* y = alpha conv(x, w) + beta y: NCHW (4-d) tensors, a KCRS filter, with
 * padding, stride, dilation and groups; flip: CUDNN_CONVOLUTION (the
 * filter flipped), else cross-correlation.  y is not read when beta is 0. */
typedef struct {
  rgpu_cudnn_cpu_tensor x, y;
  const float *w;
  int w_dim[4];
  int pad[2], stride[2], dilation[2], groups, flip;
  double alpha, beta;
} rgpu_cudnn_cpu_conv;
void rgpu_cudnn_cpu_conv_fwd(const rgpu_cudnn_cpu_conv *p);

/* c = alpha a + beta c, a broadcast where its dimensions are 1. */
void rgpu_cudnn_cpu_add(const rgpu_cudnn_cpu_tensor *a, const rgpu_cudnn_cpu_tensor *c,
                        double alpha, double beta);

/* y = alpha act(x) + beta y; mode is cudnnActivationMode_t. */
void rgpu_cudnn_cpu_activation(const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *y,
                               int mode, double coef, double swish_beta, double alpha,
                               double beta);

/* 2-d pooling of 4-d tensors; mode is cudnnPoolingMode_t. */
void rgpu_cudnn_cpu_pooling(const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *y,
                            int mode, const int window[2], const int pad[2], const int stride[2],
                            double alpha, double beta);

/* Softmax over the channels (mode CHANNEL: per n and spatial position) or
 * over everything but n (INSTANCE); algo is cudnnSoftmaxAlgorithm_t (LOG:
 * log-softmax).  x and y have the same dimensions. */
void rgpu_cudnn_cpu_softmax(const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *y,
                            int algo, int mode, double alpha, double beta);

#endif
