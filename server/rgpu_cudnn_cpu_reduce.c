/* softgpu's cudnnReduceTensor in plain C (see rgpu_cudnn_cpu_reduce.h):
 * accumulation in double, one rounding per output. */
#include "rgpu_cudnn_cpu_reduce.h"

#include <math.h>

#include <cudnn.h>

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

void rgpu_cudnn_cpu_reduce(int op, const rgpu_cudnn_cpu_tensor *a, const rgpu_cudnn_cpu_tensor *c,
                           uint32_t *indices, double alpha, double beta) {
  int nb = a->nb, slice[RGPU_CUDNN_CPU_DIM_MAX], o[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  for (int i = 0; i < nb; i++) slice[i] = c->dim[i] == 1 ? a->dim[i] : 1;
  int64_t k = 0; /* c's element in row-major order */
  do {
    int in[RGPU_CUDNN_CPU_DIM_MAX] = {0}, idx[RGPU_CUDNN_CPU_DIM_MAX];
    double acc = op == CUDNN_REDUCE_TENSOR_MUL || op == CUDNN_REDUCE_TENSOR_MUL_NO_ZEROS ? 1 : 0;
    double best = 0;
    int64_t count = 0, pos = 0, best_pos = 0;
    do {
      for (int i = 0; i < nb; i++) idx[i] = o[i] + in[i];
      double v = a->base[off(a, idx)];
      switch (op) {
        case CUDNN_REDUCE_TENSOR_MUL: acc *= v; break;
        case CUDNN_REDUCE_TENSOR_MUL_NO_ZEROS: acc *= v != 0 ? v : 1; break;
        case CUDNN_REDUCE_TENSOR_MIN:
        case CUDNN_REDUCE_TENSOR_MAX:
        case CUDNN_REDUCE_TENSOR_AMAX: {
          double m = op == CUDNN_REDUCE_TENSOR_AMAX ? fabs(v) : v;
          int better = op == CUDNN_REDUCE_TENSOR_MIN ? m < best : m > best;
          if (!count || better) best = m, best_pos = pos;
          break;
        }
        case CUDNN_REDUCE_TENSOR_NORM1: acc += fabs(v); break;
        case CUDNN_REDUCE_TENSOR_NORM2: acc += v * v; break;
        default: acc += v; break; /* ADD, AVG */
      }
      count++;
      pos++;
    } while (next(nb, slice, in));
    double r = op == CUDNN_REDUCE_TENSOR_MIN || op == CUDNN_REDUCE_TENSOR_MAX ||
                       op == CUDNN_REDUCE_TENSOR_AMAX
                   ? best
               : op == CUDNN_REDUCE_TENSOR_AVG   ? acc / (double)count
               : op == CUDNN_REDUCE_TENSOR_NORM2 ? sqrt(acc)
                                                 : acc;
    float *out = c->base + off(c, o);
    *out = (float)(beta == 0 ? alpha * r : alpha * r + beta * (double)*out);
    if (indices) indices[k] = (uint32_t)best_pos;
    k++;
  } while (next(nb, c->dim, o));
}
