/* softgpu's cuDNN operations (rgpu_cudnn_cpu.h): oneDNN computes what it
 * implements (rgpu_cudnn_dnnl.c); whatever it refuses, a layout or a
 * combination it has no kernel for, the plain-C reference computes
 * (rgpu_cudnn_cpu_ref.c), with the same result within float rounding.  A
 * refusal leaves the output untouched, so the fallback is always safe.
 *
 * Set and scale are loops here: memory-bound, a loop is as fast, and set
 * must not read y (it may hold NaN, which oneDNN's linear eltwise would
 * carry through 0 * y). */
#include "rgpu_cudnn_cpu.h"

#include "rgpu_cudnn_cpu_ref.h"
#include "rgpu_cudnn_dnnl.h"

void rgpu_cudnn_cpu_conv_fwd(const rgpu_cudnn_cpu_conv *p) {
  if (rgpu_cudnn_dnnl_conv_fwd(p)) rgpu_cudnn_ref_conv_fwd(p);
}

void rgpu_cudnn_cpu_conv_bwd_data(const rgpu_cudnn_cpu_conv *p) {
  if (rgpu_cudnn_dnnl_conv_bwd_data(p)) rgpu_cudnn_ref_conv_bwd_data(p);
}

void rgpu_cudnn_cpu_conv_bwd_filter(const rgpu_cudnn_cpu_conv *p, float *dw) {
  if (rgpu_cudnn_dnnl_conv_bwd_filter(p, dw)) rgpu_cudnn_ref_conv_bwd_filter(p, dw);
}

void rgpu_cudnn_cpu_add(const rgpu_cudnn_cpu_tensor *a, const rgpu_cudnn_cpu_tensor *c,
                        double alpha, double beta) {
  if (rgpu_cudnn_dnnl_add(a, c, alpha, beta)) rgpu_cudnn_ref_add(a, c, alpha, beta);
}

void rgpu_cudnn_cpu_reduce_to(const rgpu_cudnn_cpu_tensor *dy, const rgpu_cudnn_cpu_tensor *db,
                              double alpha, double beta) {
  if (rgpu_cudnn_dnnl_reduce_to(dy, db, alpha, beta)) rgpu_cudnn_ref_reduce_to(dy, db, alpha, beta);
}

void rgpu_cudnn_cpu_activation(const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *y,
                               int mode, double coef, double swish_beta, double alpha,
                               double beta) {
  if (rgpu_cudnn_dnnl_activation(x, y, mode, coef, swish_beta, alpha, beta))
    rgpu_cudnn_ref_activation(x, y, mode, coef, swish_beta, alpha, beta);
}

void rgpu_cudnn_cpu_activation_bwd(const rgpu_cudnn_cpu_tensor *y, const rgpu_cudnn_cpu_tensor *dy,
                                   const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *dx,
                                   int mode, double coef, double swish_beta, double alpha,
                                   double beta) {
  if (rgpu_cudnn_dnnl_activation_bwd(y, dy, x, dx, mode, coef, swish_beta, alpha, beta))
    rgpu_cudnn_ref_activation_bwd(y, dy, x, dx, mode, coef, swish_beta, alpha, beta);
}

void rgpu_cudnn_cpu_pooling(const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *y,
                            int mode, const int window[2], const int pad[2], const int stride[2],
                            double alpha, double beta) {
  if (rgpu_cudnn_dnnl_pooling(x, y, mode, window, pad, stride, alpha, beta))
    rgpu_cudnn_ref_pooling(x, y, mode, window, pad, stride, alpha, beta);
}

void rgpu_cudnn_cpu_pooling_bwd(const rgpu_cudnn_cpu_tensor *y, const rgpu_cudnn_cpu_tensor *dy,
                                const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *dx,
                                int mode, const int window[2], const int pad[2],
                                const int stride[2], double alpha, double beta) {
  if (rgpu_cudnn_dnnl_pooling_bwd(y, dy, x, dx, mode, window, pad, stride, alpha, beta))
    rgpu_cudnn_ref_pooling_bwd(y, dy, x, dx, mode, window, pad, stride, alpha, beta);
}

void rgpu_cudnn_cpu_softmax(const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *y,
                            int algo, int mode, double alpha, double beta) {
  if (rgpu_cudnn_dnnl_softmax(x, y, algo, mode, alpha, beta))
    rgpu_cudnn_ref_softmax(x, y, algo, mode, alpha, beta);
}

void rgpu_cudnn_cpu_softmax_bwd(const rgpu_cudnn_cpu_tensor *y, const rgpu_cudnn_cpu_tensor *dy,
                                const rgpu_cudnn_cpu_tensor *dx, int algo, int mode,
                                double alpha, double beta) {
  if (rgpu_cudnn_dnnl_softmax_bwd(y, dy, dx, algo, mode, alpha, beta))
    rgpu_cudnn_ref_softmax_bwd(y, dy, dx, algo, mode, alpha, beta);
}

void rgpu_cudnn_cpu_batchnorm_fwd_inference(const rgpu_cudnn_cpu_batchnorm *p) {
  if (rgpu_cudnn_dnnl_batchnorm_fwd_inference(p)) rgpu_cudnn_ref_batchnorm_fwd_inference(p);
}

void rgpu_cudnn_cpu_batchnorm_fwd_training(const rgpu_cudnn_cpu_batchnorm *p) {
  if (rgpu_cudnn_dnnl_batchnorm_fwd_training(p)) rgpu_cudnn_ref_batchnorm_fwd_training(p);
}

void rgpu_cudnn_cpu_batchnorm_bwd(const rgpu_cudnn_cpu_batchnorm *p) {
  if (rgpu_cudnn_dnnl_batchnorm_bwd(p)) rgpu_cudnn_ref_batchnorm_bwd(p);
}

void rgpu_cudnn_cpu_op_tensor(const rgpu_cudnn_cpu_tensor *a, const rgpu_cudnn_cpu_tensor *b,
                              const rgpu_cudnn_cpu_tensor *c, int op, double alpha1,
                              double alpha2, double beta) {
  if (rgpu_cudnn_dnnl_op_tensor(a, b, c, op, alpha1, alpha2, beta))
    rgpu_cudnn_ref_op_tensor(a, b, c, op, alpha1, alpha2, beta);
}

void rgpu_cudnn_cpu_set(const rgpu_cudnn_cpu_tensor *y, double value) {
  rgpu_cudnn_ref_set(y, value);
}

void rgpu_cudnn_cpu_scale(const rgpu_cudnn_cpu_tensor *y, double alpha) {
  rgpu_cudnn_ref_scale(y, alpha);
}
