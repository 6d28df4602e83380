/* softgpu's dropout in plain C (see rgpu_cudnn_cpu_dropout.h).  Each value
 * is drawn by a counter-based generator (SplitMix64 of seed and position),
 * so a mask depends only on the seed and how many values came before. */
#include "rgpu_cudnn_cpu_dropout.h"

static int64_t off(const rgpu_cudnn_cpu_tensor *t, const int *idx) {
  int64_t o = 0;
  for (int i = 0; i < t->nb; i++) o += (int64_t)idx[i] * t->stride[i];
  return o;
}

static int next(int nb, const int *dim, int *idx) {
  for (int i = nb - 1; i >= 0; i--) {
    if (++idx[i] < dim[i]) return 1;
    idx[i] = 0;
  }
  return 0;
}

/* SplitMix64's finalizer: a well-mixed 64-bit value for each input. */
static uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void rgpu_cudnn_cpu_dropout_init(uint64_t *states, uint64_t seed) {
  states[0] = seed;
  states[1] = 0;
}

void rgpu_cudnn_cpu_dropout_fwd(float p, uint64_t *states, const rgpu_cudnn_cpu_tensor *x,
                                const rgpu_cudnn_cpu_tensor *y, uint8_t *mask) {
  uint64_t seed = mix(states[0]), n = states[1];
  double scale = p < 1.0f ? 1.0 / (1.0 - (double)p) : 0.0;
  int idx[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  int64_t k = 0;
  do {
    /* The top 53 bits as a uniform value in [0, 1). */
    double u = (double)(mix(seed ^ (n + (uint64_t)k)) >> 11) * 0x1.0p-53;
    int keep = u >= (double)p;
    mask[k++] = (uint8_t)keep;
    y->base[off(y, idx)] = keep ? (float)(x->base[off(x, idx)] * scale) : 0.0f;
  } while (next(x->nb, x->dim, idx));
  states[1] = n + (uint64_t)k;
}

void rgpu_cudnn_cpu_dropout_bwd(float p, const uint8_t *mask, const rgpu_cudnn_cpu_tensor *dy,
                                const rgpu_cudnn_cpu_tensor *dx) {
  double scale = p < 1.0f ? 1.0 / (1.0 - (double)p) : 0.0;
  int idx[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  int64_t k = 0;
  do {
    dx->base[off(dx, idx)] = mask[k++] ? (float)(dy->base[off(dy, idx)] * scale) : 0.0f;
  } while (next(dy->nb, dy->dim, idx));
}
