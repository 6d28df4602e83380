/* softgpu's cuDNN forward operations in plain C (see rgpu_cudnn_cpu.h).
 * Accumulation is in double; each output is rounded once to float. */
#include "rgpu_cudnn_cpu.h"

#include <math.h>
#include <stddef.h>

#include <cudnn.h>

/* Element offset of multi-index idx in t. */
static int64_t offset_of(const rgpu_cudnn_cpu_tensor *t, const int *idx) {
  int64_t o = 0;
  for (int i = 0; i < t->nb; i++) o += (int64_t)idx[i] * t->stride[i];
  return o;
}

/* Advances idx over dims (the last fastest); 0 when done. */
static int next_index(int nb, const int *dim, int *idx) {
  for (int i = nb - 1; i >= 0; i--) {
    if (++idx[i] < dim[i]) return 1;
    idx[i] = 0;
  }
  return 0;
}

/* cuDNN's blend: beta 0 does not read the old value (it may be NaN). */
static void blend(float *y, double v, double alpha, double beta) {
  *y = (float)(beta == 0 ? alpha * v : alpha * v + beta * (double)*y);
}

static float *at4(const rgpu_cudnn_cpu_tensor *t, int n, int c, int h, int w) {
  return t->base + (int64_t)n * t->stride[0] + (int64_t)c * t->stride[1] +
         (int64_t)h * t->stride[2] + (int64_t)w * t->stride[3];
}

void rgpu_cudnn_cpu_conv_fwd(const rgpu_cudnn_cpu_conv *p) {
  const int N = p->y.dim[0], K = p->y.dim[1], OH = p->y.dim[2], OW = p->y.dim[3];
  const int C = p->w_dim[1], R = p->w_dim[2], S = p->w_dim[3];
  const int H = p->x.dim[2], W = p->x.dim[3];
  const int k_per_group = K / p->groups;
  for (int n = 0; n < N; n++)
    for (int k = 0; k < K; k++) {
      int g = k / k_per_group;
      for (int oh = 0; oh < OH; oh++)
        for (int ow = 0; ow < OW; ow++) {
          double acc = 0;
          for (int c = 0; c < C; c++)
            for (int r = 0; r < R; r++) {
              int ih = oh * p->stride[0] - p->pad[0] + r * p->dilation[0];
              if (ih < 0 || ih >= H) continue;
              for (int s = 0; s < S; s++) {
                int iw = ow * p->stride[1] - p->pad[1] + s * p->dilation[1];
                if (iw < 0 || iw >= W) continue;
                /* CUDNN_CONVOLUTION flips the filter; cross-correlation
                 * (what frameworks call convolution) does not. */
                int fr = p->flip ? R - 1 - r : r, fs = p->flip ? S - 1 - s : s;
                double wv = p->w[(((int64_t)k * C + c) * R + fr) * S + fs];
                acc += wv * *at4(&p->x, n, g * C + c, ih, iw);
              }
            }
          blend(at4(&p->y, n, k, oh, ow), acc, p->alpha, p->beta);
        }
    }
}

void rgpu_cudnn_cpu_add(const rgpu_cudnn_cpu_tensor *a, const rgpu_cudnn_cpu_tensor *c,
                        double alpha, double beta) {
  int idx[RGPU_CUDNN_CPU_DIM_MAX] = {0}, aidx[RGPU_CUDNN_CPU_DIM_MAX];
  do {
    for (int i = 0; i < c->nb; i++) aidx[i] = a->dim[i] == 1 ? 0 : idx[i];
    blend(c->base + offset_of(c, idx), a->base[offset_of(a, aidx)], alpha, beta);
  } while (next_index(c->nb, c->dim, idx));
}

static double activate(int mode, double x, double coef, double swish_beta) {
  switch (mode) {
    case CUDNN_ACTIVATION_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case CUDNN_ACTIVATION_RELU: return x > 0 ? x : 0;
    case CUDNN_ACTIVATION_TANH: return tanh(x);
    case CUDNN_ACTIVATION_CLIPPED_RELU: return x > 0 ? (x < coef ? x : coef) : 0;
    case CUDNN_ACTIVATION_ELU: return x > 0 ? x : coef * (exp(x) - 1.0);
    case CUDNN_ACTIVATION_SWISH: return x / (1.0 + exp(-swish_beta * x));
    default: return x; /* IDENTITY */
  }
}

void rgpu_cudnn_cpu_activation(const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *y,
                               int mode, double coef, double swish_beta, double alpha,
                               double beta) {
  int idx[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  do {
    double v = x->base[offset_of(x, idx)];
    blend(y->base + offset_of(y, idx), activate(mode, v, coef, swish_beta), alpha, beta);
  } while (next_index(x->nb, x->dim, idx));
}

void rgpu_cudnn_cpu_pooling(const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *y,
                            int mode, const int window[2], const int pad[2], const int stride[2],
                            double alpha, double beta) {
  const int H = x->dim[2], W = x->dim[3];
  int is_max = mode == CUDNN_POOLING_MAX || mode == CUDNN_POOLING_MAX_DETERMINISTIC;
  for (int n = 0; n < y->dim[0]; n++)
    for (int c = 0; c < y->dim[1]; c++)
      for (int oh = 0; oh < y->dim[2]; oh++)
        for (int ow = 0; ow < y->dim[3]; ow++) {
          double acc = is_max ? -INFINITY : 0;
          int valid = 0;
          for (int r = 0; r < window[0]; r++)
            for (int s = 0; s < window[1]; s++) {
              int ih = oh * stride[0] - pad[0] + r, iw = ow * stride[1] - pad[1] + s;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              double v = *at4(x, n, c, ih, iw);
              valid++;
              if (is_max) acc = v > acc ? v : acc;
              else acc += v;
            }
          if (!is_max) {
            int count = mode == CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                            ? window[0] * window[1] : valid;
            acc = count ? acc / count : 0;
          } else if (!valid) {
            acc = 0; /* a window entirely in the padding */
          }
          blend(at4(y, n, c, oh, ow), acc, alpha, beta);
        }
}

void rgpu_cudnn_cpu_softmax(const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *y,
                            int algo, int mode, double alpha, double beta) {
  /* The elements of one softmax: those sharing n and (CHANNEL) the
   * spatial position; inner walks the channel (and, for INSTANCE, the
   * spatial) dimensions. */
  int nb = x->nb;
  int outer_dim[RGPU_CUDNN_CPU_DIM_MAX], inner_dim[RGPU_CUDNN_CPU_DIM_MAX];
  for (int i = 0; i < nb; i++) {
    int inner = i == 1 || (mode == CUDNN_SOFTMAX_MODE_INSTANCE && i >= 1);
    outer_dim[i] = inner ? 1 : x->dim[i];
    inner_dim[i] = inner ? x->dim[i] : 1;
  }
  int o[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  do {
    int in[RGPU_CUDNN_CPU_DIM_MAX] = {0}, idx[RGPU_CUDNN_CPU_DIM_MAX];
    double mx = -INFINITY, sum = 0;
    /* Accurate and log subtract the maximum first; fast does not (the
     * result is the same in exact arithmetic). */
    if (algo != CUDNN_SOFTMAX_FAST) {
      do {
        for (int i = 0; i < nb; i++) idx[i] = o[i] + in[i];
        double v = x->base[offset_of(x, idx)];
        mx = v > mx ? v : mx;
      } while (next_index(nb, inner_dim, in));
    } else {
      mx = 0;
    }
    do {
      for (int i = 0; i < nb; i++) idx[i] = o[i] + in[i];
      sum += exp(x->base[offset_of(x, idx)] - mx);
    } while (next_index(nb, inner_dim, in));
    do {
      for (int i = 0; i < nb; i++) idx[i] = o[i] + in[i];
      double v = x->base[offset_of(x, idx)] - mx;
      double r = algo == CUDNN_SOFTMAX_LOG ? v - log(sum) : exp(v) / sum;
      blend(y->base + offset_of(y, idx), r, alpha, beta);
    } while (next_index(nb, inner_dim, in));
  } while (next_index(nb, outer_dim, o));
}
