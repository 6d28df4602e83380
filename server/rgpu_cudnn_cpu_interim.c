/* INTERIM: replaced by the oneDNN implementation on merge.
 *
 * Straightforward plain-C bodies of the backward, batch-norm, op-tensor,
 * set and scale functions that rgpu_cudnn_cpu.h declares, so that the
 * legacy backward handlers (rgpu_handlers_cudnn_bwd.c) link and their
 * tests run before softgpu's oneDNN backend lands; the lead deletes this
 * file then.  Accumulation is in double, each output rounded once to
 * float; every function blends like cuDNN (beta 0 never reads the
 * output). */
#include "rgpu_cudnn_cpu.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include <cudnn.h>

static int64_t off(const rgpu_cudnn_cpu_tensor *t, const int *idx) {
  int64_t o = 0;
  for (int i = 0; i < t->nb; i++) o += (int64_t)idx[i] * t->stride[i];
  return o;
}

/* Advances idx over dim (the last fastest); 0 when done. */
static int next(int nb, const int *dim, int *idx) {
  for (int i = nb - 1; i >= 0; i--) {
    if (++idx[i] < dim[i]) return 1;
    idx[i] = 0;
  }
  return 0;
}

static void blend(float *y, double v, double alpha, double beta) {
  *y = (float)(beta == 0 ? alpha * v : alpha * v + beta * (double)*y);
}

static float *at4(const rgpu_cudnn_cpu_tensor *t, int n, int c, int h, int w) {
  return t->base + (int64_t)n * t->stride[0] + (int64_t)c * t->stride[1] +
         (int64_t)h * t->stride[2] + (int64_t)w * t->stride[3];
}

/* ---- convolution --------------------------------------------------------- */

void rgpu_cudnn_cpu_conv_bwd_data(const rgpu_cudnn_cpu_conv *p) {
  const int N = p->x.dim[0], CX = p->x.dim[1], H = p->x.dim[2], W = p->x.dim[3];
  const int K = p->y.dim[1], OH = p->y.dim[2], OW = p->y.dim[3];
  const int C = p->w_dim[1], R = p->w_dim[2], S = p->w_dim[3];
  const int kpg = K / p->groups;
  /* Gathers, for each dx element, the dy elements whose window used it. */
  for (int n = 0; n < N; n++)
    for (int cx = 0; cx < CX; cx++) {
      int g = cx / C, c = cx % C;
      for (int ih = 0; ih < H; ih++)
        for (int iw = 0; iw < W; iw++) {
          double acc = 0;
          for (int r = 0; r < R; r++) {
            int th = ih + p->pad[0] - r * p->dilation[0];
            if (th < 0 || th % p->stride[0]) continue;
            int oh = th / p->stride[0];
            if (oh >= OH) continue;
            for (int s = 0; s < S; s++) {
              int tw = iw + p->pad[1] - s * p->dilation[1];
              if (tw < 0 || tw % p->stride[1]) continue;
              int ow = tw / p->stride[1];
              if (ow >= OW) continue;
              int fr = p->flip ? R - 1 - r : r, fs = p->flip ? S - 1 - s : s;
              for (int k = g * kpg; k < (g + 1) * kpg; k++)
                acc += (double)p->w[(((int64_t)k * C + c) * R + fr) * S + fs] *
                       *at4(&p->y, n, k, oh, ow);
            }
          }
          blend(at4(&p->x, n, cx, ih, iw), acc, p->alpha, p->beta);
        }
    }
}

void rgpu_cudnn_cpu_conv_bwd_filter(const rgpu_cudnn_cpu_conv *p, float *dw) {
  const int N = p->x.dim[0], H = p->x.dim[2], W = p->x.dim[3];
  const int OH = p->y.dim[2], OW = p->y.dim[3];
  const int K = p->w_dim[0], C = p->w_dim[1], R = p->w_dim[2], S = p->w_dim[3];
  const int kpg = K / p->groups;
  for (int k = 0; k < K; k++) {
    int g = k / kpg;
    for (int c = 0; c < C; c++)
      for (int r = 0; r < R; r++)
        for (int s = 0; s < S; s++) {
          double acc = 0;
          for (int n = 0; n < N; n++)
            for (int oh = 0; oh < OH; oh++) {
              int ih = oh * p->stride[0] - p->pad[0] + r * p->dilation[0];
              if (ih < 0 || ih >= H) continue;
              for (int ow = 0; ow < OW; ow++) {
                int iw = ow * p->stride[1] - p->pad[1] + s * p->dilation[1];
                if (iw < 0 || iw >= W) continue;
                acc += (double)*at4(&p->y, n, k, oh, ow) * *at4(&p->x, n, g * C + c, ih, iw);
              }
            }
          /* CUDNN_CONVOLUTION used the flipped filter: the gradient of
           * w[r][s] is what tap (R-1-r, S-1-s) saw. */
          int fr = p->flip ? R - 1 - r : r, fs = p->flip ? S - 1 - s : s;
          blend(&dw[(((int64_t)k * C + c) * R + fr) * S + fs], acc, p->alpha, p->beta);
        }
  }
}

void rgpu_cudnn_cpu_reduce_to(const rgpu_cudnn_cpu_tensor *dy, const rgpu_cudnn_cpu_tensor *db,
                              double alpha, double beta) {
  int nb = dy->nb;
  /* For each db element: the dy elements that share its index where db's
   * dimension is dy's, any index where it is 1. */
  int free_dim[RGPU_CUDNN_CPU_DIM_MAX];
  for (int i = 0; i < nb; i++) free_dim[i] = db->dim[i] == 1 ? dy->dim[i] : 1;
  int o[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  do {
    int in[RGPU_CUDNN_CPU_DIM_MAX] = {0}, idx[RGPU_CUDNN_CPU_DIM_MAX];
    double acc = 0;
    do {
      for (int i = 0; i < nb; i++) idx[i] = o[i] + in[i];
      acc += dy->base[off(dy, idx)];
    } while (next(nb, free_dim, in));
    blend(db->base + off(db, o), acc, alpha, beta);
  } while (next(nb, db->dim, o));
}

/* ---- activation, pooling, softmax ----------------------------------------- */

static double sigmoid(double v) { return 1.0 / (1.0 + exp(-v)); }

void rgpu_cudnn_cpu_activation_bwd(const rgpu_cudnn_cpu_tensor *y, const rgpu_cudnn_cpu_tensor *dy,
                                   const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *dx,
                                   int mode, double coef, double swish_beta, double alpha,
                                   double beta) {
  int idx[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  do {
    double yv = y->base[off(y, idx)], g = dy->base[off(dy, idx)], xv = x->base[off(x, idx)], d;
    switch (mode) {
      case CUDNN_ACTIVATION_SIGMOID: d = g * yv * (1 - yv); break;
      case CUDNN_ACTIVATION_RELU: d = xv > 0 ? g : 0; break;
      case CUDNN_ACTIVATION_TANH: d = g * (1 - yv * yv); break;
      case CUDNN_ACTIVATION_CLIPPED_RELU: d = xv > 0 && xv < coef ? g : 0; break;
      case CUDNN_ACTIVATION_ELU: d = xv > 0 ? g : g * coef * exp(xv); break;
      case CUDNN_ACTIVATION_SWISH: {
        double s = sigmoid(swish_beta * xv);
        d = g * (s + swish_beta * xv * s * (1 - s));
        break;
      }
      default: d = g; break; /* IDENTITY */
    }
    blend(dx->base + off(dx, idx), d, alpha, beta);
  } while (next(x->nb, x->dim, idx));
}

/* The first output index whose window (start o stride - pad, size win)
 * reaches i. */
static int first_window(int i, int pad, int win, int stride) {
  int t = i + pad - win + 1; /* o stride >= t */
  return t <= 0 ? 0 : (t + stride - 1) / stride;
}

void rgpu_cudnn_cpu_pooling_bwd(const rgpu_cudnn_cpu_tensor *y, const rgpu_cudnn_cpu_tensor *dy,
                                const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *dx,
                                int mode, const int window[2], const int pad[2],
                                const int stride[2], double alpha, double beta) {
  (void)y; /* the maximum's position is found again in x */
  const int H = x->dim[2], W = x->dim[3], OH = dy->dim[2], OW = dy->dim[3];
  int is_max = mode == CUDNN_POOLING_MAX || mode == CUDNN_POOLING_MAX_DETERMINISTIC;
  for (int n = 0; n < x->dim[0]; n++)
    for (int c = 0; c < x->dim[1]; c++)
      for (int ih = 0; ih < H; ih++)
        for (int iw = 0; iw < W; iw++) {
          double acc = 0;
          /* The windows that hold (ih, iw): oh from the first whose
           * window reaches ih to the last that starts at or before it. */
          int oh0 = first_window(ih, pad[0], window[0], stride[0]);
          int ow0 = first_window(iw, pad[1], window[1], stride[1]);
          for (int oh = oh0; oh < OH && oh * stride[0] - pad[0] <= ih; oh++) {
            int h0 = oh * stride[0] - pad[0];
            for (int ow = ow0; ow < OW && ow * stride[1] - pad[1] <= iw; ow++) {
              int w0 = ow * stride[1] - pad[1];
              double g = *at4(dy, n, c, oh, ow);
              if (is_max) {
                /* The window's first maximum gets the gradient. */
                int bh = -1, bw = -1;
                double best = -INFINITY;
                for (int r = 0; r < window[0]; r++)
                  for (int s = 0; s < window[1]; s++) {
                    int hh = h0 + r, ww = w0 + s;
                    if (hh < 0 || hh >= H || ww < 0 || ww >= W) continue;
                    double v = *at4(x, n, c, hh, ww);
                    if (bh < 0 || v > best) best = v, bh = hh, bw = ww;
                  }
                if (bh == ih && bw == iw) acc += g;
              } else {
                int count = window[0] * window[1];
                if (mode != CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING) {
                  int hs = h0 < 0 ? 0 : h0, he = h0 + window[0] > H ? H : h0 + window[0];
                  int ws = w0 < 0 ? 0 : w0, we = w0 + window[1] > W ? W : w0 + window[1];
                  count = (he - hs) * (we - ws);
                }
                acc += g / count;
              }
            }
          }
          blend(at4(dx, n, c, ih, iw), acc, alpha, beta);
        }
}

void rgpu_cudnn_cpu_softmax_bwd(const rgpu_cudnn_cpu_tensor *y, const rgpu_cudnn_cpu_tensor *dy,
                                const rgpu_cudnn_cpu_tensor *dx, int algo, int mode,
                                double alpha, double beta) {
  int nb = y->nb;
  int outer_dim[RGPU_CUDNN_CPU_DIM_MAX], inner_dim[RGPU_CUDNN_CPU_DIM_MAX];
  for (int i = 0; i < nb; i++) {
    int inner = i == 1 || (mode == CUDNN_SOFTMAX_MODE_INSTANCE && i >= 1);
    outer_dim[i] = inner ? 1 : y->dim[i];
    inner_dim[i] = inner ? y->dim[i] : 1;
  }
  int o[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  do {
    int in[RGPU_CUDNN_CPU_DIM_MAX] = {0}, idx[RGPU_CUDNN_CPU_DIM_MAX];
    /* softmax: dx = y (dy - sum dy y); log-softmax: dx = dy - exp(y) sum dy. */
    double sum = 0;
    do {
      for (int i = 0; i < nb; i++) idx[i] = o[i] + in[i];
      double g = dy->base[off(dy, idx)];
      sum += algo == CUDNN_SOFTMAX_LOG ? g : g * y->base[off(y, idx)];
    } while (next(nb, inner_dim, in));
    do {
      for (int i = 0; i < nb; i++) idx[i] = o[i] + in[i];
      double g = dy->base[off(dy, idx)], yv = y->base[off(y, idx)];
      double d = algo == CUDNN_SOFTMAX_LOG ? g - exp(yv) * sum : yv * (g - sum);
      blend(dx->base + off(dx, idx), d, alpha, beta);
    } while (next(nb, inner_dim, in));
  } while (next(nb, outer_dim, o));
}

/* ---- batch normalization ----------------------------------------------------- */

/* The statistic an element of x belongs to (dense over the parameters'
 * shape) and how many elements each statistic covers. */
static int64_t stat_of(const rgpu_cudnn_cpu_tensor *x, int mode, const int *idx) {
  if (mode != CUDNN_BATCHNORM_PER_ACTIVATION) return idx[1];
  int64_t s = 0;
  for (int i = 1; i < x->nb; i++) s = s * x->dim[i] + idx[i];
  return s;
}
static int64_t stat_count(const rgpu_cudnn_cpu_tensor *x, int mode) {
  if (mode != CUDNN_BATCHNORM_PER_ACTIVATION) return x->dim[1];
  int64_t n = 1;
  for (int i = 1; i < x->nb; i++) n *= x->dim[i];
  return n;
}

/* Per statistic: the batch's mean and biased variance of x. */
static int batch_stats(const rgpu_cudnn_cpu_tensor *x, int mode, double *mean, double *var,
                       int64_t *m) {
  int64_t ns = stat_count(x, mode);
  int64_t total = 1;
  for (int i = 0; i < x->nb; i++) total *= x->dim[i];
  *m = total / ns;
  int idx[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  do mean[stat_of(x, mode, idx)] += x->base[off(x, idx)];
  while (next(x->nb, x->dim, idx));
  for (int64_t s = 0; s < ns; s++) mean[s] /= (double)*m;
  do {
    double d = x->base[off(x, idx)] - mean[stat_of(x, mode, idx)];
    var[stat_of(x, mode, idx)] += d * d;
  } while (next(x->nb, x->dim, idx));
  for (int64_t s = 0; s < ns; s++) var[s] /= (double)*m;
  return 0;
}

void rgpu_cudnn_cpu_batchnorm_fwd_inference(const rgpu_cudnn_cpu_batchnorm *p) {
  int idx[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  do {
    int64_t s = stat_of(&p->x, p->mode, idx);
    double v = ((double)p->x.base[off(&p->x, idx)] - p->mean[s]) /
                   sqrt((double)p->variance[s] + p->epsilon) * p->scale[s] +
               p->bias[s];
    blend(p->y.base + off(&p->y, idx), v, p->alpha, p->beta);
  } while (next(p->x.nb, p->x.dim, idx));
}

void rgpu_cudnn_cpu_batchnorm_fwd_training(const rgpu_cudnn_cpu_batchnorm *p) {
  int64_t ns = stat_count(&p->x, p->mode), m;
  double *mean = calloc((size_t)ns, sizeof *mean), *var = calloc((size_t)ns, sizeof *var);
  if (!mean || !var) goto out; /* host memory exhausted: the output is left as it was */
  batch_stats(&p->x, p->mode, mean, var, &m);
  int idx[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  do {
    int64_t s = stat_of(&p->x, p->mode, idx);
    double v = ((double)p->x.base[off(&p->x, idx)] - mean[s]) / sqrt(var[s] + p->epsilon) *
                   p->scale[s] + p->bias[s];
    blend(p->y.base + off(&p->y, idx), v, p->alpha, p->beta);
  } while (next(p->x.nb, p->x.dim, idx));
  for (int64_t s = 0; s < ns; s++) {
    if (p->mean && p->variance) {
      double unbiased = m > 1 ? var[s] * (double)m / (double)(m - 1) : var[s];
      p->mean[s] = (float)((1 - p->factor) * p->mean[s] + p->factor * mean[s]);
      p->variance[s] = (float)((1 - p->factor) * p->variance[s] + p->factor * unbiased);
    }
    if (p->save_mean && p->save_inv_std) {
      p->save_mean[s] = (float)mean[s];
      p->save_inv_std[s] = (float)(1.0 / sqrt(var[s] + p->epsilon));
    }
  }
out:
  free(mean);
  free(var);
}

void rgpu_cudnn_cpu_batchnorm_bwd(const rgpu_cudnn_cpu_batchnorm *p) {
  const rgpu_cudnn_cpu_tensor *x = &p->x, *dy = &p->y, *dx = &p->dx;
  int64_t ns = stat_count(x, p->mode), m;
  double *mean = calloc((size_t)ns, sizeof *mean), *var = calloc((size_t)ns, sizeof *var);
  double *sdy = calloc((size_t)ns, sizeof *sdy), *sdyx = calloc((size_t)ns, sizeof *sdyx);
  if (!mean || !var || !sdy || !sdyx) goto out;
  batch_stats(x, p->mode, mean, var, &m);
  /* inv: the saved inverse standard deviation where the forward kept it,
   * recomputed otherwise (var then holds it). */
  for (int64_t s = 0; s < ns; s++) {
    if (p->save_mean && p->save_inv_std) {
      mean[s] = p->save_mean[s];
      var[s] = p->save_inv_std[s];
    } else {
      var[s] = 1.0 / sqrt(var[s] + p->epsilon);
    }
  }
  int idx[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  do {
    int64_t s = stat_of(x, p->mode, idx);
    double g = dy->base[off(dy, idx)];
    sdy[s] += g;
    sdyx[s] += g * (x->base[off(x, idx)] - mean[s]) * var[s];
  } while (next(x->nb, x->dim, idx));
  do {
    int64_t s = stat_of(x, p->mode, idx);
    double xhat = (x->base[off(x, idx)] - mean[s]) * var[s];
    double d = p->scale[s] * var[s] / (double)m *
               ((double)m * dy->base[off(dy, idx)] - sdy[s] - xhat * sdyx[s]);
    blend(dx->base + off(dx, idx), d, p->alpha, p->beta);
  } while (next(x->nb, x->dim, idx));
  for (int64_t s = 0; s < ns; s++) {
    blend(&p->dscale[s], sdyx[s], p->alpha_param, p->beta_param);
    blend(&p->dbias[s], sdy[s], p->alpha_param, p->beta_param);
  }
out:
  free(mean);
  free(var);
  free(sdy);
  free(sdyx);
}

/* ---- op-tensor, set, scale ------------------------------------------------------ */

void rgpu_cudnn_cpu_op_tensor(const rgpu_cudnn_cpu_tensor *a, const rgpu_cudnn_cpu_tensor *b,
                              const rgpu_cudnn_cpu_tensor *c, int op, double alpha1,
                              double alpha2, double beta) {
  int idx[RGPU_CUDNN_CPU_DIM_MAX] = {0}, ai[RGPU_CUDNN_CPU_DIM_MAX], bi[RGPU_CUDNN_CPU_DIM_MAX];
  int unary = op == CUDNN_OP_TENSOR_SQRT || op == CUDNN_OP_TENSOR_NOT;
  do {
    for (int i = 0; i < c->nb; i++) {
      ai[i] = a->dim[i] == 1 ? 0 : idx[i];
      bi[i] = unary || b->dim[i] == 1 ? 0 : idx[i];
    }
    double va = alpha1 * a->base[off(a, ai)], vb = unary ? 0 : alpha2 * b->base[off(b, bi)], v;
    switch (op) {
      case CUDNN_OP_TENSOR_ADD: v = va + vb; break;
      case CUDNN_OP_TENSOR_MUL: v = va * vb; break;
      case CUDNN_OP_TENSOR_MIN: v = va < vb ? va : vb; break;
      case CUDNN_OP_TENSOR_MAX: v = va > vb ? va : vb; break;
      case CUDNN_OP_TENSOR_SQRT: v = sqrt(va); break;
      default: v = 1.0 - va; break; /* NOT */
    }
    blend(c->base + off(c, idx), v, 1.0, beta);
  } while (next(c->nb, c->dim, idx));
}

void rgpu_cudnn_cpu_set(const rgpu_cudnn_cpu_tensor *y, double value) {
  int idx[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  do y->base[off(y, idx)] = (float)value;
  while (next(y->nb, y->dim, idx));
}

void rgpu_cudnn_cpu_scale(const rgpu_cudnn_cpu_tensor *y, double alpha) {
  int idx[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  do y->base[off(y, idx)] = (float)(alpha * y->base[off(y, idx)]);
  while (next(y->nb, y->dim, idx));
}
