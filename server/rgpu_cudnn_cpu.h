/* softgpu's cuDNN operations on float tensors (any dimensions and strides
 * the server has checked), run in a host function on the request's stream.
 * The one interface both the legacy handlers (rgpu_handlers_cudnn*.c) and
 * the backend graphs (rgpu_handlers_cudnn_backend.c) compute through. */
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

/* ---- backward passes and the rest of the legacy API (issue 17) ----------
 * Every function blends like cuDNN: out = alpha result + beta out, and beta
 * 0 never reads out.  Shapes, strides and extents are the caller's checks. */

/* dx = alpha conv_bwd_data(dy, w) + beta dx: p->x is dx, p->y is dy, p->w
 * the filter; the same geometry as the forward convolution of p. */
void rgpu_cudnn_cpu_conv_bwd_data(const rgpu_cudnn_cpu_conv *p);

/* dw = alpha conv_bwd_filter(x, dy) + beta dw: p->x is x, p->y is dy, dw has
 * p->w_dim (dense KCRS); p->w is not read.  alpha/beta are p's. */
void rgpu_cudnn_cpu_conv_bwd_filter(const rgpu_cudnn_cpu_conv *p, float *dw);

/* db = alpha (sum of dy over every dimension where db is 1) + beta db; db
 * is 1xCx1x1 (or its Nd form) for cudnnConvolutionBackwardBias. */
void rgpu_cudnn_cpu_reduce_to(const rgpu_cudnn_cpu_tensor *dy, const rgpu_cudnn_cpu_tensor *db,
                              double alpha, double beta);

/* dx = alpha act'(x, y) dy + beta dx (cudnnActivationBackward: y is the
 * forward output, x its input). */
void rgpu_cudnn_cpu_activation_bwd(const rgpu_cudnn_cpu_tensor *y, const rgpu_cudnn_cpu_tensor *dy,
                                   const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *dx,
                                   int mode, double coef, double swish_beta, double alpha,
                                   double beta);

/* dx = alpha pool'(x, y, dy) + beta dx; max pooling routes each dy to the
 * first maximum of its window, as cuDNN does. */
void rgpu_cudnn_cpu_pooling_bwd(const rgpu_cudnn_cpu_tensor *y, const rgpu_cudnn_cpu_tensor *dy,
                                const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *dx,
                                int mode, const int window[2], const int pad[2],
                                const int stride[2], double alpha, double beta);

/* dx = alpha softmax'(y, dy) + beta dx over the same axis as the forward
 * softmax (algo LOG: y is the log-softmax). */
void rgpu_cudnn_cpu_softmax_bwd(const rgpu_cudnn_cpu_tensor *y, const rgpu_cudnn_cpu_tensor *dy,
                                const rgpu_cudnn_cpu_tensor *dx, int algo, int mode,
                                double alpha, double beta);

/* Batch normalization; mode is cudnnBatchNormMode_t (PER_ACTIVATION: the
 * statistics per C,H,W over N; SPATIAL and SPATIAL_PERSISTENT: per C over
 * N,H,W).  The parameter tensors (scale, bias, means, variances) are dense
 * floats of the statistics' shape. */
typedef struct {
  rgpu_cudnn_cpu_tensor x, y;  /* backward: x, and dy in y */
  rgpu_cudnn_cpu_tensor dx;    /* backward only */
  int mode;
  double epsilon;
  double alpha, beta;             /* the data's blend (alphaDataDiff in backward) */
  double alpha_param, beta_param; /* backward: dscale/dbias's blend */
  float *scale, *bias;            /* backward: scale read, bias unused */
  float *dscale, *dbias;          /* backward only */
  /* Inference: the estimates used.  Training: the running averages updated
   * with factor (either may be NULL: not kept). */
  float *mean, *variance;
  double factor;
  /* Training's saved mean and inverse standard deviation, the backward's
   * cache (either may be NULL: training does not save, backward recomputes). */
  float *save_mean, *save_inv_std;
} rgpu_cudnn_cpu_batchnorm;
void rgpu_cudnn_cpu_batchnorm_fwd_inference(const rgpu_cudnn_cpu_batchnorm *p);
/* The running variance is updated with the unbiased variance (n/(n-1)), as
 * cuDNN does; the normalization uses the biased one. */
void rgpu_cudnn_cpu_batchnorm_fwd_training(const rgpu_cudnn_cpu_batchnorm *p);
void rgpu_cudnn_cpu_batchnorm_bwd(const rgpu_cudnn_cpu_batchnorm *p);

/* c = op(alpha1 a, alpha2 b) + beta c, a and b broadcast where their
 * dimensions are 1; op is cudnnOpTensorOp_t (ADD, MUL, MIN, MAX, SQRT and
 * NOT use a only). */
void rgpu_cudnn_cpu_op_tensor(const rgpu_cudnn_cpu_tensor *a, const rgpu_cudnn_cpu_tensor *b,
                              const rgpu_cudnn_cpu_tensor *c, int op, double alpha1,
                              double alpha2, double beta);

/* y = value everywhere (cudnnSetTensor); y = alpha y (cudnnScaleTensor). */
void rgpu_cudnn_cpu_set(const rgpu_cudnn_cpu_tensor *y, double value);
void rgpu_cudnn_cpu_scale(const rgpu_cudnn_cpu_tensor *y, double alpha);

#endif
