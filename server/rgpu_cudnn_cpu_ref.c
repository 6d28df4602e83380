/* softgpu's cuDNN operations in plain C, the reference (rgpu_cudnn_cpu_ref.h).
 * Accumulation is in double; each output is rounded once to float.  Speed
 * is not the point: every loop follows the operation's definition. */
#include "rgpu_cudnn_cpu_ref.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include <cudnn.h>

#include "rgpu_log.h"

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

static int64_t count_of(int nb, const int *dim) {
  int64_t n = 1;
  for (int i = 0; i < nb; i++) n *= dim[i];
  return n;
}

/* cuDNN's blend: beta 0 does not read the old value (it may be NaN). */
static void blend(float *y, double v, double alpha, double beta) {
  *y = (float)(beta == 0 ? alpha * v : alpha * v + beta * (double)*y);
}

static float *at4(const rgpu_cudnn_cpu_tensor *t, int n, int c, int h, int w) {
  return t->base + (int64_t)n * t->stride[0] + (int64_t)c * t->stride[1] +
         (int64_t)h * t->stride[2] + (int64_t)w * t->stride[3];
}

/* A zeroed double per element of dims: the accumulator of a backward pass
 * that scatters (each output gathers from several places).  NULL (logged)
 * when memory is short: the operation then leaves its output alone. */
static double *accumulator(int64_t n, const char *what) {
  double *acc = calloc((size_t)(n > 0 ? n : 1), sizeof *acc);
  if (!acc) RGPU_ERROR("cudnn cpu: %s: no memory for %lld accumulators", what, (long long)n);
  return acc;
}

/* Blends acc (dense, t's dims in order) into t. */
static void blend_dense(const rgpu_cudnn_cpu_tensor *t, const double *acc, double alpha,
                        double beta) {
  int idx[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  int64_t i = 0;
  do {
    blend(t->base + offset_of(t, idx), acc[i++], alpha, beta);
  } while (next_index(t->nb, t->dim, idx));
}

/* ---- convolution -------------------------------------------------------- */

/* The filter's element for output channel k, input channel c (in its
 * group) and window position (r, s): CUDNN_CONVOLUTION flips the filter;
 * cross-correlation (what frameworks call convolution) does not. */
static int64_t filter_index(const rgpu_cudnn_cpu_conv *p, int k, int c, int r, int s) {
  const int C = p->w_dim[1], R = p->w_dim[2], S = p->w_dim[3];
  int fr = p->flip ? R - 1 - r : r, fs = p->flip ? S - 1 - s : s;
  return (((int64_t)k * C + c) * R + fr) * S + fs;
}

void rgpu_cudnn_ref_conv_fwd(const rgpu_cudnn_cpu_conv *p) {
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
                acc += (double)p->w[filter_index(p, k, c, r, s)] *
                       *at4(&p->x, n, g * C + c, ih, iw);
              }
            }
          blend(at4(&p->y, n, k, oh, ow), acc, p->alpha, p->beta);
        }
    }
}

/* dx[n, g C + c, ih, iw] gathers w[k, c, r, s] dy[n, k, oh, ow] over every
 * (k, oh, ow, r, s) the forward pass paired them in. */
void rgpu_cudnn_ref_conv_bwd_data(const rgpu_cudnn_cpu_conv *p) {
  const int N = p->y.dim[0], K = p->y.dim[1], OH = p->y.dim[2], OW = p->y.dim[3];
  const int C = p->w_dim[1], R = p->w_dim[2], S = p->w_dim[3];
  const int CT = p->x.dim[1], H = p->x.dim[2], W = p->x.dim[3];
  const int k_per_group = K / p->groups;
  double *acc = accumulator((int64_t)N * CT * H * W, "convolution backward data");
  if (!acc) return;
  for (int n = 0; n < N; n++)
    for (int k = 0; k < K; k++) {
      int g = k / k_per_group;
      for (int oh = 0; oh < OH; oh++)
        for (int ow = 0; ow < OW; ow++) {
          double dy = *at4(&p->y, n, k, oh, ow);
          for (int c = 0; c < C; c++)
            for (int r = 0; r < R; r++) {
              int ih = oh * p->stride[0] - p->pad[0] + r * p->dilation[0];
              if (ih < 0 || ih >= H) continue;
              for (int s = 0; s < S; s++) {
                int iw = ow * p->stride[1] - p->pad[1] + s * p->dilation[1];
                if (iw < 0 || iw >= W) continue;
                acc[(((int64_t)n * CT + g * C + c) * H + ih) * W + iw] +=
                    (double)p->w[filter_index(p, k, c, r, s)] * dy;
              }
            }
        }
    }
  blend_dense(&p->x, acc, p->alpha, p->beta);
  free(acc);
}

/* dw[k, c, r, s] (at the flipped place for CUDNN_CONVOLUTION) gathers
 * x[n, g C + c, ih, iw] dy[n, k, oh, ow]. */
void rgpu_cudnn_ref_conv_bwd_filter(const rgpu_cudnn_cpu_conv *p, float *dw) {
  const int N = p->y.dim[0], K = p->y.dim[1], OH = p->y.dim[2], OW = p->y.dim[3];
  const int C = p->w_dim[1], R = p->w_dim[2], S = p->w_dim[3];
  const int H = p->x.dim[2], W = p->x.dim[3];
  const int k_per_group = K / p->groups;
  int64_t size = (int64_t)K * C * R * S;
  double *acc = accumulator(size, "convolution backward filter");
  if (!acc) return;
  for (int k = 0; k < K; k++) {
    int g = k / k_per_group;
    for (int c = 0; c < C; c++)
      for (int r = 0; r < R; r++)
        for (int s = 0; s < S; s++) {
          double sum = 0;
          for (int n = 0; n < N; n++)
            for (int oh = 0; oh < OH; oh++) {
              int ih = oh * p->stride[0] - p->pad[0] + r * p->dilation[0];
              if (ih < 0 || ih >= H) continue;
              for (int ow = 0; ow < OW; ow++) {
                int iw = ow * p->stride[1] - p->pad[1] + s * p->dilation[1];
                if (iw < 0 || iw >= W) continue;
                sum += (double)*at4(&p->x, n, g * C + c, ih, iw) * *at4(&p->y, n, k, oh, ow);
              }
            }
          acc[filter_index(p, k, c, r, s)] = sum;
        }
  }
  for (int64_t i = 0; i < size; i++) blend(&dw[i], acc[i], p->alpha, p->beta);
  free(acc);
}

/* ---- tensor arithmetic -------------------------------------------------- */

/* idx of c mapped onto a, whose dimensions of extent 1 broadcast. */
static void broadcast_index(const rgpu_cudnn_cpu_tensor *a, int nb, const int *idx, int *aidx) {
  for (int i = 0; i < nb; i++) aidx[i] = a->dim[i] == 1 ? 0 : idx[i];
}

void rgpu_cudnn_ref_add(const rgpu_cudnn_cpu_tensor *a, const rgpu_cudnn_cpu_tensor *c,
                        double alpha, double beta) {
  int idx[RGPU_CUDNN_CPU_DIM_MAX] = {0}, aidx[RGPU_CUDNN_CPU_DIM_MAX];
  do {
    broadcast_index(a, c->nb, idx, aidx);
    blend(c->base + offset_of(c, idx), a->base[offset_of(a, aidx)], alpha, beta);
  } while (next_index(c->nb, c->dim, idx));
}

void rgpu_cudnn_ref_reduce_to(const rgpu_cudnn_cpu_tensor *dy, const rgpu_cudnn_cpu_tensor *db,
                              double alpha, double beta) {
  double *acc = accumulator(count_of(db->nb, db->dim), "reduce");
  if (!acc) return;
  int idx[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  do {
    /* The dense index in db of dy's element: db's extent-1 dimensions
     * collapse. */
    int64_t o = 0;
    for (int i = 0; i < db->nb; i++) o = o * db->dim[i] + (db->dim[i] == 1 ? 0 : idx[i]);
    acc[o] += dy->base[offset_of(dy, idx)];
  } while (next_index(dy->nb, dy->dim, idx));
  blend_dense(db, acc, alpha, beta);
  free(acc);
}

void rgpu_cudnn_ref_op_tensor(const rgpu_cudnn_cpu_tensor *a, const rgpu_cudnn_cpu_tensor *b,
                              const rgpu_cudnn_cpu_tensor *c, int op, double alpha1,
                              double alpha2, double beta) {
  int idx[RGPU_CUDNN_CPU_DIM_MAX] = {0}, aidx[RGPU_CUDNN_CPU_DIM_MAX],
      bidx[RGPU_CUDNN_CPU_DIM_MAX];
  int uses_b = op != CUDNN_OP_TENSOR_SQRT && op != CUDNN_OP_TENSOR_NOT;
  do {
    broadcast_index(a, c->nb, idx, aidx);
    double va = alpha1 * a->base[offset_of(a, aidx)], vb = 0, r;
    if (uses_b) {
      broadcast_index(b, c->nb, idx, bidx);
      vb = alpha2 * b->base[offset_of(b, bidx)];
    }
    switch (op) {
      case CUDNN_OP_TENSOR_ADD: r = va + vb; break;
      case CUDNN_OP_TENSOR_MUL: r = va * vb; break;
      case CUDNN_OP_TENSOR_MIN: r = va < vb ? va : vb; break;
      case CUDNN_OP_TENSOR_MAX: r = va > vb ? va : vb; break;
      case CUDNN_OP_TENSOR_SQRT: r = sqrt(va); break;
      default: r = 1.0 - va; break; /* NOT: the logical negation of a 0/1 value */
    }
    blend(c->base + offset_of(c, idx), r, 1.0, beta);
  } while (next_index(c->nb, c->dim, idx));
}

void rgpu_cudnn_ref_set(const rgpu_cudnn_cpu_tensor *y, double value) {
  int idx[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  do {
    y->base[offset_of(y, idx)] = (float)value;
  } while (next_index(y->nb, y->dim, idx));
}

void rgpu_cudnn_ref_scale(const rgpu_cudnn_cpu_tensor *y, double alpha) {
  int idx[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  do {
    float *v = y->base + offset_of(y, idx);
    *v = (float)(alpha * *v);
  } while (next_index(y->nb, y->dim, idx));
}

/* ---- activation --------------------------------------------------------- */

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

/* act'(x) dy; sigmoid and tanh read the forward output y (as cuDNN does),
 * the others the input x. */
static double activate_bwd(int mode, double x, double y, double dy, double coef,
                           double swish_beta) {
  switch (mode) {
    case CUDNN_ACTIVATION_SIGMOID: return dy * y * (1.0 - y);
    case CUDNN_ACTIVATION_RELU: return x > 0 ? dy : 0;
    case CUDNN_ACTIVATION_TANH: return dy * (1.0 - y * y);
    case CUDNN_ACTIVATION_CLIPPED_RELU: return x > 0 && x < coef ? dy : 0;
    case CUDNN_ACTIVATION_ELU: return x > 0 ? dy : dy * coef * exp(x);
    case CUDNN_ACTIVATION_SWISH: {
      double s = 1.0 / (1.0 + exp(-swish_beta * x));
      return dy * (s + swish_beta * x * s * (1.0 - s));
    }
    default: return dy; /* IDENTITY */
  }
}

void rgpu_cudnn_ref_activation(const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *y,
                               int mode, double coef, double swish_beta, double alpha,
                               double beta) {
  int idx[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  do {
    double v = x->base[offset_of(x, idx)];
    blend(y->base + offset_of(y, idx), activate(mode, v, coef, swish_beta), alpha, beta);
  } while (next_index(x->nb, x->dim, idx));
}

void rgpu_cudnn_ref_activation_bwd(const rgpu_cudnn_cpu_tensor *y, const rgpu_cudnn_cpu_tensor *dy,
                                   const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *dx,
                                   int mode, double coef, double swish_beta, double alpha,
                                   double beta) {
  int idx[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  do {
    double r = activate_bwd(mode, x->base[offset_of(x, idx)], y->base[offset_of(y, idx)],
                            dy->base[offset_of(dy, idx)], coef, swish_beta);
    blend(dx->base + offset_of(dx, idx), r, alpha, beta);
  } while (next_index(dx->nb, dx->dim, idx));
}

/* ---- pooling ------------------------------------------------------------ */

static int is_max_pooling(int mode) {
  return mode == CUDNN_POOLING_MAX || mode == CUDNN_POOLING_MAX_DETERMINISTIC;
}

void rgpu_cudnn_ref_pooling(const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *y,
                            int mode, const int window[2], const int pad[2], const int stride[2],
                            double alpha, double beta) {
  const int H = x->dim[2], W = x->dim[3];
  int is_max = is_max_pooling(mode);
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

/* Max: each dy goes to the first maximum of its window (x's, in window
 * order); average: dy / count to every element of the window inside x. */
void rgpu_cudnn_ref_pooling_bwd(const rgpu_cudnn_cpu_tensor *y, const rgpu_cudnn_cpu_tensor *dy,
                                const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *dx,
                                int mode, const int window[2], const int pad[2],
                                const int stride[2], double alpha, double beta) {
  (void)y; /* the maximum is found again in x: the same place, no float compare */
  const int C = x->dim[1], H = x->dim[2], W = x->dim[3];
  int is_max = is_max_pooling(mode);
  double *acc = accumulator(count_of(4, x->dim), "pooling backward");
  if (!acc) return;
  for (int n = 0; n < dy->dim[0]; n++)
    for (int c = 0; c < dy->dim[1]; c++)
      for (int oh = 0; oh < dy->dim[2]; oh++)
        for (int ow = 0; ow < dy->dim[3]; ow++) {
          double g = *at4(dy, n, c, oh, ow);
          int valid = 0;
          int64_t best = -1;
          double best_v = -INFINITY;
          for (int r = 0; r < window[0]; r++)
            for (int s = 0; s < window[1]; s++) {
              int ih = oh * stride[0] - pad[0] + r, iw = ow * stride[1] - pad[1] + s;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              valid++;
              double v = *at4(x, n, c, ih, iw);
              if (best < 0 || v > best_v) {
                best_v = v;
                best = (((int64_t)n * C + c) * H + ih) * W + iw;
              }
            }
          if (is_max) {
            if (best >= 0) acc[best] += g;
            continue;
          }
          int count = mode == CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                          ? window[0] * window[1] : valid;
          if (!count) continue;
          for (int r = 0; r < window[0]; r++)
            for (int s = 0; s < window[1]; s++) {
              int ih = oh * stride[0] - pad[0] + r, iw = ow * stride[1] - pad[1] + s;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              acc[(((int64_t)n * C + c) * H + ih) * W + iw] += g / count;
            }
        }
  blend_dense(dx, acc, alpha, beta);
  free(acc);
}

/* ---- softmax ------------------------------------------------------------ */

/* The elements of one softmax are those sharing n and (CHANNEL) the spatial
 * position: outer walks the softmaxes, inner the channel (and, for
 * INSTANCE, the spatial) dimensions of one. */
static void softmax_split(const rgpu_cudnn_cpu_tensor *x, int mode, int *outer_dim,
                          int *inner_dim) {
  for (int i = 0; i < x->nb; i++) {
    int inner = i == 1 || (mode == CUDNN_SOFTMAX_MODE_INSTANCE && i >= 1);
    outer_dim[i] = inner ? 1 : x->dim[i];
    inner_dim[i] = inner ? x->dim[i] : 1;
  }
}

void rgpu_cudnn_ref_softmax(const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *y,
                            int algo, int mode, double alpha, double beta) {
  int nb = x->nb;
  int outer_dim[RGPU_CUDNN_CPU_DIM_MAX], inner_dim[RGPU_CUDNN_CPU_DIM_MAX];
  softmax_split(x, mode, outer_dim, inner_dim);
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

/* softmax: dx = y (dy - sum(dy y)); log-softmax: dx = dy - exp(y) sum(dy). */
void rgpu_cudnn_ref_softmax_bwd(const rgpu_cudnn_cpu_tensor *y, const rgpu_cudnn_cpu_tensor *dy,
                                const rgpu_cudnn_cpu_tensor *dx, int algo, int mode,
                                double alpha, double beta) {
  int nb = y->nb;
  int outer_dim[RGPU_CUDNN_CPU_DIM_MAX], inner_dim[RGPU_CUDNN_CPU_DIM_MAX];
  softmax_split(y, mode, outer_dim, inner_dim);
  int o[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  do {
    int in[RGPU_CUDNN_CPU_DIM_MAX] = {0}, idx[RGPU_CUDNN_CPU_DIM_MAX];
    double sum = 0;
    do {
      for (int i = 0; i < nb; i++) idx[i] = o[i] + in[i];
      double g = dy->base[offset_of(dy, idx)];
      sum += algo == CUDNN_SOFTMAX_LOG ? g : g * y->base[offset_of(y, idx)];
    } while (next_index(nb, inner_dim, in));
    do {
      for (int i = 0; i < nb; i++) idx[i] = o[i] + in[i];
      double g = dy->base[offset_of(dy, idx)], v = y->base[offset_of(y, idx)];
      double r = algo == CUDNN_SOFTMAX_LOG ? g - exp(v) * sum : v * (g - sum);
      blend(dx->base + offset_of(dx, idx), r, alpha, beta);
    } while (next_index(nb, inner_dim, in));
  } while (next_index(nb, outer_dim, o));
}

/* ---- batch normalization ------------------------------------------------ */

/* The statistic an element belongs to: its channel (SPATIAL modes) or its
 * whole C,H,W position (PER_ACTIVATION), as an index into the dense
 * parameter arrays. */
static int64_t stat_index(const rgpu_cudnn_cpu_batchnorm *p, const int *idx) {
  if (p->mode != CUDNN_BATCHNORM_PER_ACTIVATION) return idx[1];
  int64_t s = 0;
  for (int i = 1; i < p->x.nb; i++) s = s * p->x.dim[i] + idx[i];
  return s;
}

static int64_t stat_count(const rgpu_cudnn_cpu_batchnorm *p) {
  if (p->mode != CUDNN_BATCHNORM_PER_ACTIVATION) return p->x.dim[1];
  return count_of(p->x.nb, p->x.dim) / p->x.dim[0];
}

/* The mean and biased variance of x per statistic, in double. */
static void batch_stats(const rgpu_cudnn_cpu_batchnorm *p, double *mean, double *var) {
  int64_t ns = stat_count(p), m = count_of(p->x.nb, p->x.dim) / ns;
  int idx[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  for (int64_t s = 0; s < ns; s++) mean[s] = var[s] = 0;
  do {
    mean[stat_index(p, idx)] += p->x.base[offset_of(&p->x, idx)];
  } while (next_index(p->x.nb, p->x.dim, idx));
  for (int64_t s = 0; s < ns; s++) mean[s] /= (double)m;
  do {
    double d = p->x.base[offset_of(&p->x, idx)] - mean[stat_index(p, idx)];
    var[stat_index(p, idx)] += d * d;
  } while (next_index(p->x.nb, p->x.dim, idx));
  for (int64_t s = 0; s < ns; s++) var[s] /= (double)m;
}

/* y = scale (x - mean) inv_std + bias, blended. */
static void batch_normalize(const rgpu_cudnn_cpu_batchnorm *p, const double *mean,
                            const double *inv_std) {
  int idx[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  do {
    int64_t s = stat_index(p, idx);
    double v = p->scale[s] * (p->x.base[offset_of(&p->x, idx)] - mean[s]) * inv_std[s] +
               p->bias[s];
    blend(p->y.base + offset_of(&p->y, idx), v, p->alpha, p->beta);
  } while (next_index(p->x.nb, p->x.dim, idx));
}

void rgpu_cudnn_ref_batchnorm_fwd_inference(const rgpu_cudnn_cpu_batchnorm *p) {
  int64_t ns = stat_count(p);
  double *mean = accumulator(2 * ns, "batch normalization");
  if (!mean) return;
  double *inv_std = mean + ns;
  for (int64_t s = 0; s < ns; s++) {
    mean[s] = p->mean[s];
    inv_std[s] = 1.0 / sqrt((double)p->variance[s] + p->epsilon);
  }
  batch_normalize(p, mean, inv_std);
  free(mean);
}

void rgpu_cudnn_ref_batchnorm_fwd_training(const rgpu_cudnn_cpu_batchnorm *p) {
  int64_t ns = stat_count(p), m = count_of(p->x.nb, p->x.dim) / ns;
  double *mean = accumulator(3 * ns, "batch normalization");
  if (!mean) return;
  double *var = mean + ns, *inv_std = var + ns;
  batch_stats(p, mean, var);
  for (int64_t s = 0; s < ns; s++) inv_std[s] = 1.0 / sqrt(var[s] + p->epsilon);
  batch_normalize(p, mean, inv_std);
  /* The running averages take the unbiased variance (m / (m - 1)), as
   * cuDNN does; with one element per statistic there is none, the biased
   * one (0) is kept. */
  double unbias = m > 1 ? (double)m / (double)(m - 1) : 1.0;
  for (int64_t s = 0; s < ns; s++) {
    if (p->mean) p->mean[s] = (float)((1.0 - p->factor) * p->mean[s] + p->factor * mean[s]);
    if (p->variance)
      p->variance[s] =
          (float)((1.0 - p->factor) * p->variance[s] + p->factor * var[s] * unbias);
    if (p->save_mean) p->save_mean[s] = (float)mean[s];
    if (p->save_inv_std) p->save_inv_std[s] = (float)inv_std[s];
  }
  free(mean);
}

/* With xhat = (x - mean) inv_std and m elements per statistic:
 * dbias = sum dy, dscale = sum dy xhat,
 * dx = scale inv_std (dy - dbias / m - xhat dscale / m). */
void rgpu_cudnn_ref_batchnorm_bwd(const rgpu_cudnn_cpu_batchnorm *p) {
  int64_t ns = stat_count(p), m = count_of(p->x.nb, p->x.dim) / ns;
  double *mean = accumulator(5 * ns, "batch normalization backward");
  if (!mean) return;
  double *var = mean + ns, *inv_std = var + ns, *dbias = inv_std + ns, *dscale = dbias + ns;
  const rgpu_cudnn_cpu_tensor *x = &p->x, *dy = &p->y;
  if (p->save_mean && p->save_inv_std) {
    for (int64_t s = 0; s < ns; s++) {
      mean[s] = p->save_mean[s];
      inv_std[s] = p->save_inv_std[s];
    }
  } else {
    batch_stats(p, mean, var);
    for (int64_t s = 0; s < ns; s++) inv_std[s] = 1.0 / sqrt(var[s] + p->epsilon);
  }
  int idx[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  do {
    int64_t s = stat_index(p, idx);
    double g = dy->base[offset_of(dy, idx)];
    dbias[s] += g;
    dscale[s] += g * (x->base[offset_of(x, idx)] - mean[s]) * inv_std[s];
  } while (next_index(x->nb, x->dim, idx));
  do {
    int64_t s = stat_index(p, idx);
    double xhat = (x->base[offset_of(x, idx)] - mean[s]) * inv_std[s];
    double g = dy->base[offset_of(dy, idx)];
    double r = p->scale[s] * inv_std[s] * (g - dbias[s] / m - xhat * dscale[s] / m);
    blend(p->dx.base + offset_of(&p->dx, idx), r, p->alpha, p->beta);
  } while (next_index(x->nb, x->dim, idx));
  for (int64_t s = 0; s < ns; s++) {
    if (p->dscale) blend(&p->dscale[s], dscale[s], p->alpha_param, p->beta_param);
    if (p->dbias) blend(&p->dbias[s], dbias[s], p->alpha_param, p->beta_param);
  }
  free(mean);
}
