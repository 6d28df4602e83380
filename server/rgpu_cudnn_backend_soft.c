/* softgpu's cuDNN backend engine (see rgpu_cudnn_backend_soft.h).
 *
 * Planning reads the operation graph once: every tensor it touches gets a
 * slot, every operation is checked and its parameters taken, and the
 * operations are put in an order where each virtual tensor is written before
 * it is read (cuDNN does not require the program to list them in order).
 * Convolutions compute through rgpu_cudnn_cpu.h (oneDNN); pointwise
 * operations are evaluated here in one pass with broadcasting, since they
 * are memory-bound and their modes outnumber what any one library offers. */
#include "rgpu_cudnn_backend_soft.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cudnn.h>

#include "rgpu_cudnn_cpu.h"

#define TENSORS_MAX 32
#define OPS_MAX 16
#define DIMS_MAX 8
/* Host memory for one execute's virtual tensors: 1 GiB. */
#define VIRTUAL_FLOATS_MAX (1ull << 28)

typedef struct {
  const rgpu_cudnn_wnode *node;
  int64_t uid;
  int nb, virt;
  int dim[DIMS_MAX], stride[DIMS_MAX];
} soft_tensor;

enum { OP_CONV_FWD, OP_CONV_DGRAD, OP_CONV_WGRAD, OP_POINTWISE };

typedef struct {
  int kind;
  /* Tensor slots.  Convolutions: in[0] is x-shaped (x, or dx's dy... see
   * conv_of), in[1] the other input; out the result.  Pointwise: in[0] x
   * (dy for a backward mode), in[1] b (x for a backward mode) or -1. */
  int in[2], out;
  int xs, ws, ys; /* convolutions: the slots shaped as x, w and y */
  int pad[2], stride[2], dilation[2], groups, flip;
  double alpha, beta;
  /* pointwise */
  int mode;
  double alpha1, alpha2, lower, upper, slope, elu_alpha, softplus_beta, swish_beta;
} soft_op;

struct rgpu_cudnn_soft_plan {
  int nt, nop;
  soft_tensor t[TENSORS_MAX];
  soft_op op[OPS_MAX]; /* in execution order */
};

typedef struct {
  rgpu_cudnn_soft_plan plan;
  float *base[TENSORS_MAX];
  float *owned[TENSORS_MAX]; /* the virtual tensors' buffers */
} soft_job;

static int say(char *why, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, len, fmt, ap);
  va_end(ap);
  return -1;
}

/* The slot of tensor node t (added when new), or -1 with why. */
static int slot_of(rgpu_cudnn_soft_plan *p, const rgpu_cudnn_wnode *t, const char *role,
                   char *why, size_t len) {
  if (!t) return say(why, len, "an operation has no %s tensor", role);
  for (int i = 0; i < p->nt; i++)
    if (p->t[i].node == t) return i;
  if (p->nt == TENSORS_MAX) return say(why, len, "more than %d tensors", TENSORS_MAX);
  soft_tensor *s = &p->t[p->nt];
  int type;
  int64_t dim[DIMS_MAX], stride[DIMS_MAX];
  int nb = rgpu_cudnn_graph_i64s(t, CUDNN_ATTR_TENSOR_DIMENSIONS, dim, DIMS_MAX);
  if (rgpu_cudnn_graph_enum(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &type) ||
      type != CUDNN_DATA_FLOAT)
    return say(why, len, "the %s tensor is not float", role);
  if (nb < 1 || rgpu_cudnn_graph_i64s(t, CUDNN_ATTR_TENSOR_STRIDES, stride, DIMS_MAX) != nb ||
      rgpu_cudnn_graph_i64s(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, &s->uid, 1) != 1)
    return say(why, len, "the %s tensor lacks dimensions, strides or a unique id", role);
  for (int i = 0; i < nb; i++) {
    if (dim[i] < 1 || dim[i] > INT32_MAX || stride[i] < 1 || stride[i] > INT32_MAX)
      return say(why, len, "the %s tensor has dimension %d of %lld, stride %lld", role, i,
                 (long long)dim[i], (long long)stride[i]);
    s->dim[i] = (int)dim[i];
    s->stride[i] = (int)stride[i];
  }
  for (int i = 0; i < p->nt; i++)
    if (p->t[i].uid == s->uid)
      return say(why, len, "two tensors have unique id %lld", (long long)s->uid);
  const rgpu_cudnn_wattr *virt = rgpu_cudnn_graph_attr(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL);
  s->virt = virt && virt->type == CUDNN_TYPE_BOOLEAN && virt->count == 1 && virt->data[0];
  s->nb = nb;
  s->node = t;
  return p->nt++;
}

static const rgpu_cudnn_wnode *tensor_ref(const rgpu_cudnn_wgraph *g, const rgpu_cudnn_wnode *op,
                                          int64_t name) {
  return rgpu_cudnn_graph_ref(g, op, name, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
}

/* A convolution operation: its descriptor's geometry, checked against the
 * x-, w- and y-shaped tensors (the forward convolution's roles). */
static int conv_of(rgpu_cudnn_soft_plan *p, const rgpu_cudnn_wgraph *g,
                   const rgpu_cudnn_wnode *op, soft_op *o, char *why, size_t len) {
  int64_t a_x, a_w, a_y, a_desc, a_alpha, a_beta;
  switch (op->type) {
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
      o->kind = OP_CONV_FWD;
      a_x = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X;
      a_w = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W;
      a_y = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y;
      a_desc = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC;
      a_alpha = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA;
      a_beta = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA;
      break;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
      o->kind = OP_CONV_DGRAD;
      a_x = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX;
      a_w = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W;
      a_y = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY;
      a_desc = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC;
      a_alpha = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA;
      a_beta = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA;
      break;
    default:
      o->kind = OP_CONV_WGRAD;
      a_x = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X;
      a_w = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW;
      a_y = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY;
      a_desc = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC;
      a_alpha = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA;
      a_beta = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA;
  }
  if ((o->xs = slot_of(p, tensor_ref(g, op, a_x), "x", why, len)) < 0 ||
      (o->ws = slot_of(p, tensor_ref(g, op, a_w), "filter", why, len)) < 0 ||
      (o->ys = slot_of(p, tensor_ref(g, op, a_y), "y", why, len)) < 0)
    return -1;
  const soft_tensor *x = &p->t[o->xs], *w = &p->t[o->ws], *y = &p->t[o->ys];
  if (x->nb != 4 || w->nb != 4 || y->nb != 4)
    return say(why, len, "a convolution of %d-d tensors (softgpu: 2-d, NCHW-indexed)", x->nb);
  if (w->virt) return say(why, len, "a virtual filter");
  const rgpu_cudnn_wnode *cv =
      rgpu_cudnn_graph_ref(g, op, a_desc, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  int64_t sd, pre[2], post[2], st[2], dil[2];
  int comp, mode;
  if (!cv || rgpu_cudnn_graph_i64s(cv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, &sd, 1) != 1 ||
      sd != 2 || rgpu_cudnn_graph_i64s(cv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, pre, 2) != 2 ||
      rgpu_cudnn_graph_i64s(cv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, post, 2) != 2 ||
      rgpu_cudnn_graph_i64s(cv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, st, 2) != 2 ||
      rgpu_cudnn_graph_i64s(cv, CUDNN_ATTR_CONVOLUTION_DILATIONS, dil, 2) != 2 ||
      rgpu_cudnn_graph_enum(cv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &comp) ||
      rgpu_cudnn_graph_enum(cv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE,
                            &mode))
    return say(why, len, "a convolution descriptor that is not 2-d or lacks its geometry");
  if (comp != CUDNN_DATA_FLOAT) return say(why, len, "a convolution computing in type %d", comp);
  for (int i = 0; i < 2; i++) {
    if (pre[i] != post[i])
      return say(why, len, "asymmetric padding (%lld before, %lld after)", (long long)pre[i],
                 (long long)post[i]);
    if (pre[i] < 0 || pre[i] > 65536 || st[i] < 1 || st[i] > 65536 || dil[i] < 1 ||
        dil[i] > 65536)
      return say(why, len, "a convolution's padding, stride or dilation out of range");
    o->pad[i] = (int)pre[i];
    o->stride[i] = (int)st[i];
    o->dilation[i] = (int)dil[i];
  }
  /* The shapes agree: y is the convolution's output, groups divide. */
  if (w->dim[1] < 1 || x->dim[1] % w->dim[1] || y->dim[0] != x->dim[0] || y->dim[1] != w->dim[0])
    return say(why, len, "the convolution's x, filter and y shapes disagree");
  o->groups = x->dim[1] / w->dim[1];
  if (w->dim[0] % o->groups) return say(why, len, "the filter's K is not a multiple of groups");
  for (int i = 0; i < 2; i++) {
    int64_t span = (int64_t)(w->dim[2 + i] - 1) * o->dilation[i] + 1;
    int64_t out = 1 + ((int64_t)x->dim[2 + i] + 2 * o->pad[i] - span) / o->stride[i];
    if ((int64_t)x->dim[2 + i] + 2 * o->pad[i] < span || out != y->dim[2 + i])
      return say(why, len, "y's spatial size is not the convolution's output size");
  }
  /* The filter is dense KCRS (what the CPU code reads and writes). */
  if (w->stride[3] != 1 || w->stride[2] != w->dim[3] || w->stride[1] != w->dim[2] * w->dim[3] ||
      w->stride[0] != w->dim[1] * w->dim[2] * w->dim[3])
    return say(why, len, "a filter that is not dense KCRS");
  o->flip = mode == CUDNN_CONVOLUTION;
  o->alpha = rgpu_cudnn_graph_scalar(op, a_alpha, 1.0);
  o->beta = rgpu_cudnn_graph_scalar(op, a_beta, 0.0);
  switch (o->kind) {
    case OP_CONV_FWD: o->in[0] = o->xs, o->in[1] = o->ws, o->out = o->ys; break;
    case OP_CONV_DGRAD: o->in[0] = o->ys, o->in[1] = o->ws, o->out = o->xs; break;
    default: o->in[0] = o->xs, o->in[1] = o->ys, o->out = o->ws;
  }
  return 0;
}

static int pw_binary(int mode) {
  switch (mode) {
    case CUDNN_POINTWISE_ADD: case CUDNN_POINTWISE_SUB: case CUDNN_POINTWISE_MUL:
    case CUDNN_POINTWISE_DIV: case CUDNN_POINTWISE_MIN: case CUDNN_POINTWISE_MAX:
    case CUDNN_POINTWISE_ADD_SQUARE: case CUDNN_POINTWISE_POW:
    case CUDNN_POINTWISE_CMP_EQ: case CUDNN_POINTWISE_CMP_NEQ: case CUDNN_POINTWISE_CMP_GT:
    case CUDNN_POINTWISE_CMP_GE: case CUDNN_POINTWISE_CMP_LT: case CUDNN_POINTWISE_CMP_LE:
      return 1;
    default: return 0;
  }
}

static int pw_unary(int mode) {
  switch (mode) {
    case CUDNN_POINTWISE_IDENTITY: case CUDNN_POINTWISE_ABS: case CUDNN_POINTWISE_NEG:
    case CUDNN_POINTWISE_EXP: case CUDNN_POINTWISE_LOG: case CUDNN_POINTWISE_SQRT:
    case CUDNN_POINTWISE_RSQRT: case CUDNN_POINTWISE_RECIPROCAL: case CUDNN_POINTWISE_CEIL:
    case CUDNN_POINTWISE_FLOOR: case CUDNN_POINTWISE_SIN: case CUDNN_POINTWISE_COS:
    case CUDNN_POINTWISE_TAN: case CUDNN_POINTWISE_ERF:
    case CUDNN_POINTWISE_RELU_FWD: case CUDNN_POINTWISE_TANH_FWD:
    case CUDNN_POINTWISE_SIGMOID_FWD: case CUDNN_POINTWISE_ELU_FWD:
    case CUDNN_POINTWISE_GELU_FWD: case CUDNN_POINTWISE_GELU_APPROX_TANH_FWD:
    case CUDNN_POINTWISE_SOFTPLUS_FWD: case CUDNN_POINTWISE_SWISH_FWD:
      return 1;
    default: return 0;
  }
}

static int pw_backward(int mode) { return mode >= CUDNN_POINTWISE_RELU_BWD && mode <= CUDNN_POINTWISE_GELU_APPROX_TANH_BWD; }

/* An input broadcasts to the output: the same rank, each dimension equal
 * or 1. */
static int broadcasts(const soft_tensor *in, const soft_tensor *out) {
  if (in->nb != out->nb) return 0;
  for (int i = 0; i < in->nb; i++)
    if (in->dim[i] != out->dim[i] && in->dim[i] != 1) return 0;
  return 1;
}

static int pointwise_of(rgpu_cudnn_soft_plan *p, const rgpu_cudnn_wgraph *g,
                        const rgpu_cudnn_wnode *op, soft_op *o, char *why, size_t len) {
  o->kind = OP_POINTWISE;
  const rgpu_cudnn_wnode *pw = rgpu_cudnn_graph_ref(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
                                                    CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  if (!pw || rgpu_cudnn_graph_enum(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE,
                                   &o->mode))
    return say(why, len, "a pointwise operation without a mode");
  int prec;
  if (!rgpu_cudnn_graph_enum(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &prec) &&
      prec != CUDNN_DATA_FLOAT)
    return say(why, len, "pointwise math in type %d", prec);
  o->lower = rgpu_cudnn_graph_scalar(pw, CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, 0.0);
  o->upper = rgpu_cudnn_graph_scalar(pw, CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP, INFINITY);
  o->slope = rgpu_cudnn_graph_scalar(pw, CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE, 0.0);
  o->elu_alpha = rgpu_cudnn_graph_scalar(pw, CUDNN_ATTR_POINTWISE_ELU_ALPHA, 1.0);
  o->softplus_beta = rgpu_cudnn_graph_scalar(pw, CUDNN_ATTR_POINTWISE_SOFTPLUS_BETA, 1.0);
  o->swish_beta = rgpu_cudnn_graph_scalar(pw, CUDNN_ATTR_POINTWISE_SWISH_BETA, 1.0);
  o->alpha1 = rgpu_cudnn_graph_scalar(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, 1.0);
  o->alpha2 = rgpu_cudnn_graph_scalar(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, 1.0);
  o->in[1] = -1;
  if (pw_backward(o->mode)) {
    /* dx = dy * f'(x) */
    if ((o->in[0] = slot_of(p, tensor_ref(g, op, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC), "dy", why,
                            len)) < 0 ||
        (o->in[1] = slot_of(p, tensor_ref(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC), "x", why,
                            len)) < 0 ||
        (o->out = slot_of(p, tensor_ref(g, op, CUDNN_ATTR_OPERATION_POINTWISE_DXDESC), "dx", why,
                          len)) < 0)
      return -1;
  } else if (pw_binary(o->mode) || pw_unary(o->mode)) {
    if ((o->in[0] = slot_of(p, tensor_ref(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC), "x", why,
                            len)) < 0 ||
        (o->out = slot_of(p, tensor_ref(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC), "y", why,
                          len)) < 0)
      return -1;
    if (pw_binary(o->mode) &&
        (o->in[1] = slot_of(p, tensor_ref(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC), "b", why,
                            len)) < 0)
      return -1;
  } else {
    return say(why, len, "pointwise mode %d", o->mode);
  }
  for (int i = 0; i < 2; i++)
    if (o->in[i] >= 0 && !broadcasts(&p->t[o->in[i]], &p->t[o->out]))
      return say(why, len, "a pointwise input that does not broadcast to its output");
  return 0;
}

int rgpu_cudnn_soft_plan_build(const rgpu_cudnn_wgraph *g, const rgpu_cudnn_wnode *og,
                               rgpu_cudnn_soft_plan **out, char *why, size_t len) {
  *out = NULL;
  const rgpu_cudnn_wattr *ops = og ? rgpu_cudnn_graph_attr(og, CUDNN_ATTR_OPERATIONGRAPH_OPS) : NULL;
  if (!ops || ops->type != CUDNN_TYPE_BACKEND_DESCRIPTOR || ops->count < 1)
    return say(why, len, "an operation graph without operations");
  if (ops->count > OPS_MAX) return say(why, len, "more than %d operations", OPS_MAX);
  rgpu_cudnn_soft_plan *p = calloc(1, sizeof *p);
  soft_op listed[OPS_MAX];
  if (!p) return -2;
  memset(listed, 0, sizeof listed);
  int n = (int)ops->count;
  for (int i = 0; i < n; i++) {
    uint32_t idx;
    memcpy(&idx, ops->data + 4 * i, 4);
    const rgpu_cudnn_wnode *op = &g->node[idx];
    int rc;
    switch (op->type) {
      case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
      case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
      case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR:
        rc = conv_of(p, g, op, &listed[i], why, len);
        break;
      case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR:
        rc = pointwise_of(p, g, op, &listed[i], why, len);
        break;
      default:
        rc = say(why, len, "operation descriptor type %u", op->type);
    }
    if (rc) {
      free(p);
      return -1;
    }
  }
  /* Each virtual tensor is written by exactly one operation, and nothing
   * writes a tensor another operation also writes. */
  int writer[TENSORS_MAX];
  for (int i = 0; i < TENSORS_MAX; i++) writer[i] = -1;
  for (int i = 0; i < n; i++) {
    if (writer[listed[i].out] >= 0) {
      long long uid = (long long)p->t[listed[i].out].uid;
      free(p);
      return say(why, len, "two operations write tensor %lld", uid);
    }
    writer[listed[i].out] = i;
  }
  for (int i = 0; i < p->nt; i++)
    if (p->t[i].virt && writer[i] < 0) {
      long long uid = (long long)p->t[i].uid;
      free(p);
      return say(why, len, "virtual tensor %lld is read but never written", uid);
    }
  /* Order: an operation runs once what it reads is written (a cycle never
   * becomes ready). */
  int done[OPS_MAX] = {0}, ready[TENSORS_MAX];
  for (int i = 0; i < p->nt; i++) ready[i] = writer[i] < 0;
  while (p->nop < n) {
    int progressed = 0;
    for (int i = 0; i < n; i++) {
      const soft_op *o = &listed[i];
      if (done[i] || !ready[o->in[0]] || (o->in[1] >= 0 && !ready[o->in[1]])) continue;
      p->op[p->nop++] = *o;
      done[i] = 1;
      ready[o->out] = 1;
      progressed = 1;
    }
    if (!progressed) {
      free(p);
      return say(why, len, "the operations read each other's outputs in a cycle");
    }
  }
  *out = p;
  return 0;
}

void rgpu_cudnn_soft_plan_free(rgpu_cudnn_soft_plan *p) { free(p); }

static uint64_t extent_floats(const soft_tensor *t) {
  uint64_t last = 0;
  for (int i = 0; i < t->nb; i++) last += (uint64_t)(t->dim[i] - 1) * (uint64_t)t->stride[i];
  return last + 1;
}

void rgpu_cudnn_soft_job_free(void *arg) {
  soft_job *j = arg;
  if (!j) return;
  for (int i = 0; i < TENSORS_MAX; i++) free(j->owned[i]);
  free(j);
}

int rgpu_cudnn_soft_job_make(const rgpu_cudnn_soft_plan *p, const int64_t *uid,
                             const uint64_t *addr, uint32_t n, void **out, char *why,
                             size_t len) {
  *out = NULL;
  /* The virtual tensors' host buffers, bounded: a hostile graph could name
   * dimensions whose product the worker cannot hold. */
  uint64_t virt_floats = 0;
  for (int i = 0; i < p->nt; i++)
    if (p->t[i].virt) virt_floats += extent_floats(&p->t[i]);
  if (virt_floats > VIRTUAL_FLOATS_MAX)
    return say(why, len, "virtual tensors of %llu bytes (softgpu holds at most %llu)",
               (unsigned long long)virt_floats * 4ull,
               (unsigned long long)VIRTUAL_FLOATS_MAX * 4ull);
  soft_job *j = calloc(1, sizeof *j);
  if (!j) return -2;
  j->plan = *p;
  for (int i = 0; i < p->nt; i++) {
    const soft_tensor *t = &p->t[i];
    if (t->virt) {
      uint64_t floats = extent_floats(t);
      if (!(j->owned[i] = malloc(floats * sizeof(float)))) {
        rgpu_cudnn_soft_job_free(j);
        return -2;
      }
      j->base[i] = j->owned[i];
      continue;
    }
    for (uint32_t k = 0; k < n && !j->base[i]; k++)
      if (uid[k] == t->uid) j->base[i] = (float *)(uintptr_t)addr[k];
    if (!j->base[i]) {
      rgpu_cudnn_soft_job_free(j);
      return say(why, len, "the variant pack has no pointer for tensor %lld", (long long)t->uid);
    }
  }
  *out = j;
  return 0;
}

static rgpu_cudnn_cpu_tensor cpu_tensor(const soft_job *j, int slot) {
  const soft_tensor *t = &j->plan.t[slot];
  rgpu_cudnn_cpu_tensor c = {.nb = t->nb, .base = j->base[slot]};
  memcpy(c.dim, t->dim, sizeof c.dim);
  memcpy(c.stride, t->stride, sizeof c.stride);
  return c;
}

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

static double gelu_tanh_inner(double x) { return 0.7978845608028654 * (x + 0.044715 * x * x * x); }

/* One element of a pointwise operation: a is x (dy for backward modes), b
 * the second input (x for backward modes). */
static double pointwise_eval(const soft_op *o, double a, double b) {
  switch (o->mode) {
    case CUDNN_POINTWISE_ADD: return o->alpha1 * a + o->alpha2 * b;
    case CUDNN_POINTWISE_SUB: return o->alpha1 * a - o->alpha2 * b;
    case CUDNN_POINTWISE_MUL: return o->alpha1 * a * o->alpha2 * b;
    case CUDNN_POINTWISE_DIV: return o->alpha1 * a / (o->alpha2 * b);
    case CUDNN_POINTWISE_MIN: return fmin(o->alpha1 * a, o->alpha2 * b);
    case CUDNN_POINTWISE_MAX: return fmax(o->alpha1 * a, o->alpha2 * b);
    case CUDNN_POINTWISE_ADD_SQUARE: return o->alpha1 * a + o->alpha2 * b * b;
    case CUDNN_POINTWISE_POW: return pow(o->alpha1 * a, o->alpha2 * b);
    case CUDNN_POINTWISE_CMP_EQ: return a == b;
    case CUDNN_POINTWISE_CMP_NEQ: return a != b;
    case CUDNN_POINTWISE_CMP_GT: return a > b;
    case CUDNN_POINTWISE_CMP_GE: return a >= b;
    case CUDNN_POINTWISE_CMP_LT: return a < b;
    case CUDNN_POINTWISE_CMP_LE: return a <= b;
    default: break;
  }
  if (!pw_backward(o->mode)) {
    double x = o->alpha1 * a;
    switch (o->mode) {
      case CUDNN_POINTWISE_IDENTITY: return x;
      case CUDNN_POINTWISE_ABS: return fabs(x);
      case CUDNN_POINTWISE_NEG: return -x;
      case CUDNN_POINTWISE_EXP: return exp(x);
      case CUDNN_POINTWISE_LOG: return log(x);
      case CUDNN_POINTWISE_SQRT: return sqrt(x);
      case CUDNN_POINTWISE_RSQRT: return 1.0 / sqrt(x);
      case CUDNN_POINTWISE_RECIPROCAL: return 1.0 / x;
      case CUDNN_POINTWISE_CEIL: return ceil(x);
      case CUDNN_POINTWISE_FLOOR: return floor(x);
      case CUDNN_POINTWISE_SIN: return sin(x);
      case CUDNN_POINTWISE_COS: return cos(x);
      case CUDNN_POINTWISE_TAN: return tan(x);
      case CUDNN_POINTWISE_ERF: return erf(x);
      case CUDNN_POINTWISE_RELU_FWD:
        /* Clipped, with a leaky slope below the lower clip. */
        if (x <= o->lower) return o->lower + o->slope * (x - o->lower);
        return x < o->upper ? x : o->upper;
      case CUDNN_POINTWISE_TANH_FWD: return tanh(x);
      case CUDNN_POINTWISE_SIGMOID_FWD: return sigmoid(x);
      case CUDNN_POINTWISE_ELU_FWD: return x > 0 ? x : o->elu_alpha * (exp(x) - 1);
      case CUDNN_POINTWISE_GELU_FWD: return 0.5 * x * (1 + erf(x * 0.7071067811865476));
      case CUDNN_POINTWISE_GELU_APPROX_TANH_FWD: return 0.5 * x * (1 + tanh(gelu_tanh_inner(x)));
      case CUDNN_POINTWISE_SOFTPLUS_FWD:
        return log1p(exp(o->softplus_beta * x)) / o->softplus_beta;
      case CUDNN_POINTWISE_SWISH_FWD: return x * sigmoid(o->swish_beta * x);
      default: return NAN;
    }
  }
  double dy = a, x = b, d;
  switch (o->mode) {
    case CUDNN_POINTWISE_RELU_BWD:
      d = x <= o->lower ? o->slope : x < o->upper ? 1.0 : 0.0;
      break;
    case CUDNN_POINTWISE_TANH_BWD: d = 1 - tanh(x) * tanh(x); break;
    case CUDNN_POINTWISE_SIGMOID_BWD: d = sigmoid(x) * (1 - sigmoid(x)); break;
    case CUDNN_POINTWISE_ELU_BWD: d = x > 0 ? 1.0 : o->elu_alpha * exp(x); break;
    case CUDNN_POINTWISE_GELU_BWD:
      d = 0.5 * (1 + erf(x * 0.7071067811865476)) + x * exp(-0.5 * x * x) * 0.3989422804014327;
      break;
    case CUDNN_POINTWISE_GELU_APPROX_TANH_BWD: {
      double t = tanh(gelu_tanh_inner(x));
      d = 0.5 * (1 + t) +
          0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
      break;
    }
    case CUDNN_POINTWISE_SOFTPLUS_BWD: d = sigmoid(o->softplus_beta * x); break;
    case CUDNN_POINTWISE_SWISH_BWD: {
      double s = sigmoid(o->swish_beta * x);
      d = s + o->swish_beta * x * s * (1 - s);
      break;
    }
    default: return NAN;
  }
  return o->alpha1 * dy * d;
}

static void run_pointwise(const soft_job *j, const soft_op *o) {
  const soft_tensor *y = &j->plan.t[o->out];
  const soft_tensor *in[2] = {&j->plan.t[o->in[0]], o->in[1] >= 0 ? &j->plan.t[o->in[1]] : NULL};
  /* A broadcast dimension reads element 0 along it: stride 0. */
  int64_t st[2][DIMS_MAX];
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < y->nb; i++)
      st[k][i] = in[k] && in[k]->dim[i] != 1 ? in[k]->stride[i] : 0;
  int idx[DIMS_MAX] = {0};
  float *yb = j->base[o->out];
  const float *ab = j->base[o->in[0]], *bb = in[1] ? j->base[o->in[1]] : NULL;
  for (;;) {
    int64_t oy = 0, oa = 0, ob = 0;
    for (int i = 0; i < y->nb; i++) {
      oy += (int64_t)idx[i] * y->stride[i];
      oa += (int64_t)idx[i] * st[0][i];
      ob += (int64_t)idx[i] * st[1][i];
    }
    yb[oy] = (float)pointwise_eval(o, ab[oa], bb ? bb[ob] : 0.0);
    int i = y->nb - 1;
    while (i >= 0 && ++idx[i] == y->dim[i]) idx[i--] = 0;
    if (i < 0) break;
  }
}

void rgpu_cudnn_soft_job_run(void *arg) {
  soft_job *j = arg;
  for (int k = 0; k < j->plan.nop; k++) {
    const soft_op *o = &j->plan.op[k];
    if (o->kind == OP_POINTWISE) {
      run_pointwise(j, o);
      continue;
    }
    const soft_tensor *w = &j->plan.t[o->ws];
    rgpu_cudnn_cpu_conv c = {.x = cpu_tensor(j, o->xs), .y = cpu_tensor(j, o->ys),
                             .w = j->base[o->ws],
                             .w_dim = {w->dim[0], w->dim[1], w->dim[2], w->dim[3]},
                             .pad = {o->pad[0], o->pad[1]},
                             .stride = {o->stride[0], o->stride[1]},
                             .dilation = {o->dilation[0], o->dilation[1]},
                             .groups = o->groups, .flip = o->flip, .alpha = o->alpha,
                             .beta = o->beta};
    if (o->kind == OP_CONV_FWD) rgpu_cudnn_cpu_conv_fwd(&c);
    else if (o->kind == OP_CONV_DGRAD) rgpu_cudnn_cpu_conv_bwd_data(&c);
    else rgpu_cudnn_cpu_conv_bwd_filter(&c, j->base[o->ws]);
  }
  rgpu_cudnn_soft_job_free(j);
}
