/* softgpu's cross-channel LRN in plain C (see rgpu_cudnn_cpu_lrn.h):
 * accumulation in double, one rounding per output. */
#include "rgpu_cudnn_cpu_lrn.h"

#include <math.h>
#include <stdlib.h>

static int64_t off(const rgpu_cudnn_cpu_tensor *t, const int *idx) {
  int64_t o = 0;
  for (int i = 0; i < t->nb; i++) o += (int64_t)idx[i] * t->stride[i];
  return o;
}

/* Advances idx over every dimension but the channels (the last fastest);
 * 0 when done. */
static int next_position(int nb, const int *dim, int *idx) {
  for (int i = nb - 1; i >= 0; i--) {
    if (i == 1) continue;
    if (++idx[i] < dim[i]) return 1;
    idx[i] = 0;
  }
  return 0;
}

static void blend(float *y, double v, double a, double b) {
  *y = (float)(b == 0 ? a * v : a * v + b * (double)*y);
}

/* The scale of every channel at one position: k + alpha/n sum of x^2
 * over the window. */
static void scales(const rgpu_cudnn_cpu_lrn_params *p, const rgpu_cudnn_cpu_tensor *x, int *idx,
                   double *scale) {
  int C = x->dim[1], lb = (int)(p->n - 1) / 2, la = (int)p->n - 1 - lb;
  for (int c = 0; c < C; c++) {
    double sum = 0;
    for (int j = c - lb; j <= c + la; j++) {
      if (j < 0 || j >= C) continue;
      idx[1] = j;
      double v = x->base[off(x, idx)];
      sum += v * v;
    }
    scale[c] = p->k + p->alpha / p->n * sum;
  }
}

void rgpu_cudnn_cpu_lrn_fwd(const rgpu_cudnn_cpu_lrn_params *p, const rgpu_cudnn_cpu_tensor *x,
                            const rgpu_cudnn_cpu_tensor *y, double a, double b) {
  int C = x->dim[1], idx[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  double *scale = malloc(sizeof *scale * (size_t)C);
  if (!scale) return; /* host memory exhausted: y is left as it was */
  do {
    scales(p, x, idx, scale);
    for (int c = 0; c < C; c++) {
      idx[1] = c;
      blend(y->base + off(y, idx), x->base[off(x, idx)] * pow(scale[c], -p->beta), a, b);
    }
    idx[1] = 0;
  } while (next_position(x->nb, x->dim, idx));
  free(scale);
}

void rgpu_cudnn_cpu_lrn_bwd(const rgpu_cudnn_cpu_lrn_params *p, const rgpu_cudnn_cpu_tensor *x,
                            const rgpu_cudnn_cpu_tensor *dy, const rgpu_cudnn_cpu_tensor *dx,
                            double a, double b) {
  int C = x->dim[1], lb = (int)(p->n - 1) / 2, la = (int)p->n - 1 - lb;
  int idx[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  double *scale = malloc(sizeof *scale * (size_t)C * 2);
  if (!scale) return;
  double *t = scale + C; /* dy_j x_j scale_j^(-beta-1) */
  do {
    scales(p, x, idx, scale);
    for (int j = 0; j < C; j++) {
      idx[1] = j;
      t[j] = (double)dy->base[off(dy, idx)] * x->base[off(x, idx)] * pow(scale[j], -p->beta - 1);
    }
    /* dx_c = dy_c scale_c^-beta - 2 alpha beta / n x_c sum of t_j over the
     * windows that hold c: j in [c - la, c + lb]. */
    for (int c = 0; c < C; c++) {
      double sum = 0;
      for (int j = c - la; j <= c + lb; j++)
        if (j >= 0 && j < C) sum += t[j];
      idx[1] = c;
      double xv = x->base[off(x, idx)];
      double d = dy->base[off(dy, idx)] * pow(scale[c], -p->beta) -
                 2.0 * p->alpha * p->beta / p->n * xv * sum;
      blend(dx->base + off(dx, idx), d, a, b);
    }
    idx[1] = 0;
  } while (next_position(x->nb, x->dim, idx));
  free(scale);
}
