/* Interim straightforward backward convolutions so this branch links before
 * the oneDNN implementations (server/rgpu_cudnn_cpu.c, branch h/dnnl) land;
 * the lead deletes this file at that merge. */
#include "rgpu_cudnn_cpu.h"
#include <stdlib.h>
static float *at4(const rgpu_cudnn_cpu_tensor *t, int n, int c, int h, int w) {
  return t->base + (int64_t)n * t->stride[0] + (int64_t)c * t->stride[1] + (int64_t)h * t->stride[2] + (int64_t)w * t->stride[3];
}
void rgpu_cudnn_cpu_conv_bwd_data(const rgpu_cudnn_cpu_conv *p) {
  int N = p->x.dim[0], C = p->x.dim[1], H = p->x.dim[2], W = p->x.dim[3];
  int K = p->y.dim[1], OH = p->y.dim[2], OW = p->y.dim[3], Cg = p->w_dim[1], R = p->w_dim[2], S = p->w_dim[3];
  int kpg = K / p->groups;
  double *acc = calloc((size_t)N * C * H * W, sizeof *acc);
  for (int n = 0; n < N; n++) for (int k = 0; k < K; k++) { int g = k / kpg;
    for (int oh = 0; oh < OH; oh++) for (int ow = 0; ow < OW; ow++) { double dy = *at4(&p->y, n, k, oh, ow);
      for (int c = 0; c < Cg; c++) for (int r = 0; r < R; r++) { int ih = oh * p->stride[0] - p->pad[0] + r * p->dilation[0]; if (ih < 0 || ih >= H) continue;
        for (int s = 0; s < S; s++) { int iw = ow * p->stride[1] - p->pad[1] + s * p->dilation[1]; if (iw < 0 || iw >= W) continue;
          int fr = p->flip ? R - 1 - r : r, fs = p->flip ? S - 1 - s : s;
          acc[(((int64_t)n * C + g * Cg + c) * H + ih) * W + iw] += dy * p->w[(((int64_t)k * Cg + c) * R + fr) * S + fs]; } } } }
  for (int n = 0; n < N; n++) for (int c = 0; c < C; c++) for (int h = 0; h < H; h++) for (int w = 0; w < W; w++) {
    float *o = at4(&p->x, n, c, h, w); double v = acc[(((int64_t)n * C + c) * H + h) * W + w];
    *o = (float)(p->beta == 0 ? p->alpha * v : p->alpha * v + p->beta * *o); }
  free(acc);
}
void rgpu_cudnn_cpu_conv_bwd_filter(const rgpu_cudnn_cpu_conv *p, float *dw) {
  int N = p->x.dim[0], H = p->x.dim[2], W = p->x.dim[3];
  int K = p->y.dim[1], OH = p->y.dim[2], OW = p->y.dim[3], Cg = p->w_dim[1], R = p->w_dim[2], S = p->w_dim[3];
  int kpg = K / p->groups;
  for (int k = 0; k < K; k++) { int g = k / kpg; for (int c = 0; c < Cg; c++) for (int r = 0; r < R; r++) for (int s = 0; s < S; s++) {
    double acc = 0;
    for (int n = 0; n < N; n++) for (int oh = 0; oh < OH; oh++) { int ih = oh * p->stride[0] - p->pad[0] + r * p->dilation[0]; if (ih < 0 || ih >= H) continue;
      for (int ow = 0; ow < OW; ow++) { int iw = ow * p->stride[1] - p->pad[1] + s * p->dilation[1]; if (iw < 0 || iw >= W) continue;
        acc += (double)*at4(&p->y, n, k, oh, ow) * *at4(&p->x, n, g * Cg + c, ih, iw); } }
    int fr = p->flip ? R - 1 - r : r, fs = p->flip ? S - 1 - s : s;
    float *o = &dw[(((int64_t)k * Cg + c) * R + fr) * S + fs];
    *o = (float)(p->beta == 0 ? p->alpha * acc : p->alpha * acc + p->beta * *o); } }
}
