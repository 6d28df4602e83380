/* The decoded cuDNN backend graph (see rgpu_cudnn_graph.h). */
#include "rgpu_cudnn_graph.h"
#include "rgpu_hash.h"

#include <stdlib.h>
#include <string.h>

#include <cudnn.h>

int rgpu_cudnn_wire_size(uint32_t type) {
  switch (type) {
    case CUDNN_TYPE_HANDLE: case CUDNN_TYPE_VOID_PTR: return 0;
    case CUDNN_TYPE_BACKEND_DESCRIPTOR: return 4;
    case CUDNN_TYPE_BOOLEAN: case CUDNN_TYPE_CHAR: return 1;
    case CUDNN_TYPE_INT64: case CUDNN_TYPE_DOUBLE: return 8;
    case CUDNN_TYPE_FRACTION: return 16;
    default: return type <= CUDNN_TYPE_MOE_GROUPED_MATMUL_MODE ? 4 : -1;
  }
}

void rgpu_cudnn_graph_free(rgpu_cudnn_wgraph *g) {
  free(g->node);
  free(g->attrs);
  memset(g, 0, sizeof *g);
}

static int take(const uint8_t **p, const uint8_t *end, void *out, size_t n) {
  if ((size_t)(end - *p) < n) return -1;
  memcpy(out, *p, n);
  *p += n;
  return 0;
}

int rgpu_cudnn_graph_decode(const uint8_t *start, size_t len, rgpu_cudnn_wgraph *g) {
  memset(g, 0, sizeof *g);
  const uint8_t *p = start, *end = start + len;
  uint32_t n = 0;
  if (take(&p, end, &n, 4) || n < 1 || n > RGPU_CUDNN_GRAPH_NODES_MAX) return -1;
  /* At most one attribute per 16 bytes: the block is bounded by the input. */
  size_t max_attrs = len / 16 + 1;
  g->node = calloc(n, sizeof *g->node);
  g->attrs = calloc(max_attrs, sizeof *g->attrs);
  if (!g->node || !g->attrs) {
    rgpu_cudnn_graph_free(g);
    return -2;
  }
  size_t used = 0;
  for (uint32_t i = 0; i < n; i++) {
    rgpu_cudnn_wnode *d = &g->node[i];
    if (take(&p, end, &d->type, 4) || take(&p, end, &d->nattr, 4) ||
        d->nattr > RGPU_CUDNN_GRAPH_ATTRS_MAX || d->nattr > max_attrs - used ||
        d->type > CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR)
      goto bad;
    d->attr = &g->attrs[used];
    used += d->nattr;
    for (uint32_t j = 0; j < d->nattr; j++) {
      rgpu_cudnn_wattr *a = &d->attr[j];
      if (take(&p, end, &a->name, 8) || take(&p, end, &a->type, 4) || take(&p, end, &a->count, 4))
        goto bad;
      int es = rgpu_cudnn_wire_size(a->type);
      if (es < 0 || (uint64_t)a->count * (uint64_t)es > (uint64_t)(end - p)) goto bad;
      a->data = p;
      p += (size_t)a->count * (size_t)es;
      /* References point backwards only: no cycles, and the GPU path can
       * build the nodes in order. */
      if (a->type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
        for (uint32_t k = 0; k < a->count; k++) {
          uint32_t idx;
          memcpy(&idx, a->data + 4 * k, 4);
          if (idx >= i) goto bad;
        }
    }
  }
  if (p != end) goto bad;
  g->n = n;
  return 0;
bad:
  rgpu_cudnn_graph_free(g);
  return -1;
}

const rgpu_cudnn_wattr *rgpu_cudnn_graph_attr(const rgpu_cudnn_wnode *d, int64_t name) {
  for (uint32_t i = 0; i < d->nattr; i++)
    if (d->attr[i].name == name) return &d->attr[i];
  return NULL;
}

const rgpu_cudnn_wnode *rgpu_cudnn_graph_ref(const rgpu_cudnn_wgraph *g,
                                             const rgpu_cudnn_wnode *d, int64_t name,
                                             uint32_t type) {
  const rgpu_cudnn_wattr *a = d ? rgpu_cudnn_graph_attr(d, name) : NULL;
  if (!a || a->type != CUDNN_TYPE_BACKEND_DESCRIPTOR || a->count != 1) return NULL;
  uint32_t idx;
  memcpy(&idx, a->data, 4);
  return g->node[idx].type == type ? &g->node[idx] : NULL;
}

int rgpu_cudnn_graph_i64s(const rgpu_cudnn_wnode *d, int64_t name, int64_t *out, int max) {
  const rgpu_cudnn_wattr *a = rgpu_cudnn_graph_attr(d, name);
  if (!a || a->type != CUDNN_TYPE_INT64 || a->count > (uint32_t)max) return -1;
  memcpy(out, a->data, 8 * (size_t)a->count);
  return (int)a->count;
}

int rgpu_cudnn_graph_enum(const rgpu_cudnn_wnode *d, int64_t name, uint32_t type, int *out) {
  const rgpu_cudnn_wattr *a = rgpu_cudnn_graph_attr(d, name);
  if (!a || a->type != type || a->count != 1) return -1;
  memcpy(out, a->data, 4);
  return 0;
}

double rgpu_cudnn_graph_scalar(const rgpu_cudnn_wnode *d, int64_t name, double dflt) {
  const rgpu_cudnn_wattr *a = rgpu_cudnn_graph_attr(d, name);
  if (!a || a->count != 1) return dflt;
  if (a->type == CUDNN_TYPE_DOUBLE) {
    double v;
    memcpy(&v, a->data, 8);
    return v;
  }
  if (a->type == CUDNN_TYPE_FLOAT) {
    float v;
    memcpy(&v, a->data, 4);
    return v;
  }
  return dflt;
}

const rgpu_cudnn_wnode *rgpu_cudnn_graph_tensor(const rgpu_cudnn_wgraph *g, int64_t uid) {
  for (uint32_t i = 0; i < g->n; i++) {
    int64_t u;
    const rgpu_cudnn_wnode *t = &g->node[i];
    if (t->type != CUDNN_BACKEND_TENSOR_DESCRIPTOR ||
        rgpu_cudnn_graph_i64s(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, &u, 1) != 1 || u != uid)
      continue;
    const rgpu_cudnn_wattr *virt = rgpu_cudnn_graph_attr(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL);
    if (virt && virt->type == CUDNN_TYPE_BOOLEAN && virt->count == 1 && virt->data[0]) continue;
    return t;
  }
  return NULL;
}

uint64_t rgpu_cudnn_graph_tensor_extent(const rgpu_cudnn_wnode *t) {
  int64_t dim[8], stride[8];
  int type, n = rgpu_cudnn_graph_i64s(t, CUDNN_ATTR_TENSOR_DIMENSIONS, dim, 8);
  if (n < 1 || rgpu_cudnn_graph_i64s(t, CUDNN_ATTR_TENSOR_STRIDES, stride, 8) != n ||
      rgpu_cudnn_graph_enum(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &type))
    return 0;
  uint64_t last = 0, bytes, size;
  switch (type) {
    case CUDNN_DATA_DOUBLE: case CUDNN_DATA_INT64: size = 8; break;
    case CUDNN_DATA_HALF: case CUDNN_DATA_BFLOAT16: size = 2; break;
    case CUDNN_DATA_INT8: case CUDNN_DATA_UINT8: case CUDNN_DATA_BOOLEAN:
    case CUDNN_DATA_FP8_E4M3: case CUDNN_DATA_FP8_E5M2: case CUDNN_DATA_FP8_E8M0: size = 1; break;
    default: size = 4;
  }
  for (int i = 0; i < n; i++) {
    if (dim[i] < 1 || stride[i] < 0 || dim[i] > (1ll << 40) || stride[i] > (1ll << 40)) return 0;
    /* (2^40)^2 does not fit: a wrapped extent would pass the allocation
     * check of a tensor that reaches far past it. */
    uint64_t span;
    if (__builtin_mul_overflow((uint64_t)(dim[i] - 1), (uint64_t)stride[i], &span) ||
        __builtin_add_overflow(last, span, &last))
      return 0;
  }
  if (last == UINT64_MAX || __builtin_mul_overflow(last + 1, size, &bytes)) return 0;
  return bytes;
}

int rgpu_cudnn_graph_tensor_by_value(const rgpu_cudnn_wnode *t) {
  const rgpu_cudnn_wattr *a = rgpu_cudnn_graph_attr(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE);
  return a && a->type == CUDNN_TYPE_BOOLEAN && a->count == 1 && a->data[0] != 0;
}

uint64_t rgpu_cudnn_graph_hash(const uint8_t *p, size_t n) { return rgpu_fnv1a64(p, n); }
