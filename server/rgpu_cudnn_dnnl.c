/* softgpu's cuDNN operations on oneDNN (rgpu_cudnn_dnnl.h).
 *
 * Every operation has the same shape: describe the caller's tensors to
 * oneDNN as they are (dimensions and strides: dnnl_memory_desc_init_by_
 * strides), create the primitive descriptor (where oneDNN says no to a
 * combination it does not implement: we return -1 before touching the
 * output, and the caller falls back to the plain-C reference), run it, and
 * blend.  cuDNN's blend, out = alpha result + beta out with beta 0 never
 * reading out (it may hold NaN), is a reorder from the raw result to out
 * with an output scale alpha and a sum post-op beta (none when beta is 0).
 * Only when alpha is 1, beta 0 and out overlaps no input does the primitive
 * write out itself.  Convolutions let oneDNN choose its layouts (blocked,
 * what its fast kernels want) and reorder in and out of them.
 *
 * One engine and one stream, created at the first call (pthread_once).  The
 * stream is shared: executions on it are serialized by a mutex, which costs
 * nothing as each primitive already spreads over every core (oneDNN's
 * OpenMP runtime) and keeps us independent of the stream's own thread
 * safety.  Creating a primitive descriptor each call is cheap next to the
 * work; oneDNN's own primitive cache (1024 entries by default) keeps the
 * compiled kernels of recent shapes, so no cache of ours.
 *
 * dnnl_primitive_execute on the CPU fails only before it starts (argument
 * checks, scratchpad allocation), so -1 after an execution error still
 * means the output is untouched. */
#include "rgpu_cudnn_dnnl.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cudnn.h>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include "rgpu_log.h"

/* ---- engine, stream, execution ------------------------------------------ */

static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t engine;
static dnnl_stream_t stream;
static pthread_mutex_t stream_lock = PTHREAD_MUTEX_INITIALIZER;

static void engine_init(void) {
  dnnl_status_t s = dnnl_engine_create(&engine, dnnl_cpu, 0);
  if (s == dnnl_success) {
    s = dnnl_stream_create(&stream, engine, dnnl_stream_default_flags);
    if (s != dnnl_success) {
      dnnl_engine_destroy(engine);
      engine = NULL;
    }
  } else {
    engine = NULL;
  }
  if (!engine)
    RGPU_WARN("cudnn: no oneDNN CPU engine (%s): softgpu's cuDNN operations run in plain C",
              dnnl_status2str(s));
}

static int ready(void) {
  pthread_once(&engine_once, engine_init);
  return engine != NULL;
}

/* Why oneDNN was not used, at debug level: a fallback is correct, only
 * slower. */
static int refuse(const char *op, const char *why) {
  RGPU_DEBUG("cudnn: oneDNN does not compute this %s (%s): the plain-C reference does", op, why);
  return -1;
}

/* The arguments and temporaries of one operation's primitives. */
#define JOB_ARGS 12
#define JOB_TEMPS 12
typedef struct {
  dnnl_exec_arg_t args[JOB_ARGS];
  int nargs;
  void *temps[JOB_TEMPS];
  int ntemps;
  int failed; /* an argument could not be wrapped: the next run fails */
} job;

static void job_arg(job *j, int arg, const dnnl_memory_desc_t *md, const void *ptr) {
  dnnl_memory_t m;
  if (j->failed || j->nargs == JOB_ARGS ||
      dnnl_memory_create(&m, md, engine, (void *)ptr) != dnnl_success) {
    j->failed = 1;
    return;
  }
  j->args[j->nargs].arg = arg;
  j->args[j->nargs++].memory = m;
}

/* Memory for md (its full extent, gaps included), freed by job_free. */
static void *job_temp(job *j, const dnnl_memory_desc_t *md) {
  size_t size = dnnl_memory_desc_get_size(md);
  void *p = NULL;
  if (j->ntemps == JOB_TEMPS || posix_memalign(&p, 64, size ? size : 64) != 0) return NULL;
  j->temps[j->ntemps++] = p;
  return p;
}

static void *job_temp_floats(job *j, int64_t n) {
  dnnl_memory_desc_t md;
  dnnl_dims_t dims = {n};
  if (dnnl_memory_desc_init_by_tag(&md, 1, dims, dnnl_f32, dnnl_a) != dnnl_success) return NULL;
  return job_temp(j, &md);
}

static void job_free(job *j) {
  for (int i = 0; i < j->ntemps; i++) free(j->temps[i]);
  j->ntemps = 0;
}

/* Runs pd's primitive on the arguments given since the last run. */
static int job_run(job *j, const_dnnl_primitive_desc_t pd) {
  int rc = -1;
  dnnl_primitive_t prim;
  if (!j->failed && dnnl_primitive_create(&prim, pd) == dnnl_success) {
    pthread_mutex_lock(&stream_lock);
    dnnl_status_t s = dnnl_primitive_execute(prim, stream, j->nargs, j->args);
    if (s == dnnl_success) s = dnnl_stream_wait(stream);
    pthread_mutex_unlock(&stream_lock);
    if (s != dnnl_success) RGPU_DEBUG("cudnn: oneDNN execution failed: %s", dnnl_status2str(s));
    rc = s == dnnl_success ? 0 : -1;
    dnnl_primitive_destroy(prim);
  }
  for (int i = 0; i < j->nargs; i++) dnnl_memory_destroy(j->args[i].memory);
  j->nargs = 0;
  j->failed = 0;
  return rc;
}

static dnnl_primitive_desc_t pd_create(const void *op_desc, const_dnnl_primitive_attr_t attr,
                                       const_dnnl_primitive_desc_t hint) {
  dnnl_primitive_desc_t pd = NULL;
  dnnl_status_t s = dnnl_primitive_desc_create(&pd, op_desc, attr, engine, hint);
  if (s != dnnl_success) {
    RGPU_DEBUG("cudnn: oneDNN primitive descriptor: %s", dnnl_status2str(s));
    return NULL;
  }
  return pd;
}

static void pd_destroy(dnnl_primitive_desc_t pd) {
  if (pd) dnnl_primitive_desc_destroy(pd);
}

/* ---- memory descriptors -------------------------------------------------- */

static int md_of(dnnl_memory_desc_t *md, const rgpu_cudnn_cpu_tensor *t) {
  dnnl_dims_t dims, strides;
  if (t->nb < 1 || t->nb > RGPU_CUDNN_CPU_DIM_MAX) return -1;
  for (int i = 0; i < t->nb; i++) {
    dims[i] = t->dim[i];
    strides[i] = t->stride[i];
  }
  return dnnl_memory_desc_init_by_strides(md, t->nb, dims, dnnl_f32, strides) == dnnl_success
             ? 0 : -1;
}

/* t seen as 2-d (N, the rest): possible when dimensions 1.. are laid out
 * one inside the other (dense among themselves, in order); INSTANCE softmax
 * and PER_ACTIVATION batch-norm are then their 2-d forms. */
static int md_collapsed(dnnl_memory_desc_t *md, const rgpu_cudnn_cpu_tensor *t) {
  if (t->nb < 2) return -1;
  int64_t rest = 1;
  for (int i = 1; i < t->nb; i++) {
    if (i + 1 < t->nb && (int64_t)t->stride[i] != (int64_t)t->stride[i + 1] * t->dim[i + 1])
      return -1;
    rest *= t->dim[i];
  }
  dnnl_dims_t dims = {t->dim[0], rest}, strides = {t->stride[0], t->stride[t->nb - 1]};
  return dnnl_memory_desc_init_by_strides(md, 2, dims, dnnl_f32, strides) == dnnl_success ? 0
                                                                                           : -1;
}

/* Dense memory of dims, its dimensions nested in the order of like's
 * strides (so that a result reorders into like with a plain copy). */
static int md_dense_like(dnnl_memory_desc_t *md, const dnnl_memory_desc_t *like) {
  int nb = like->ndims;
  int order[DNNL_MAX_NDIMS];
  const dnnl_dim_t *ls = like->format_desc.blocking.strides;
  if (like->format_kind != dnnl_blocked) return -1;
  for (int i = 0; i < nb; i++) order[i] = i;
  /* Insertion sort, outermost (largest stride) first, ties in dimension
   * order: stable and tiny. */
  for (int i = 1; i < nb; i++)
    for (int k = i; k > 0 && ls[order[k]] > ls[order[k - 1]]; k--) {
      int t = order[k];
      order[k] = order[k - 1];
      order[k - 1] = t;
    }
  dnnl_dims_t strides;
  dnnl_dim_t s = 1;
  for (int i = nb - 1; i >= 0; i--) {
    strides[order[i]] = s;
    s *= like->dims[order[i]];
  }
  return dnnl_memory_desc_init_by_strides(md, nb, like->dims, dnnl_f32, strides) == dnnl_success
             ? 0 : -1;
}

static int dims_equal(const rgpu_cudnn_cpu_tensor *a, const rgpu_cudnn_cpu_tensor *b) {
  if (a->nb != b->nb) return 0;
  for (int i = 0; i < a->nb; i++)
    if (a->dim[i] != b->dim[i]) return 0;
  return 1;
}

/* The bytes a tensor spans (strides are positive: the server checked). */
static void span_of(const rgpu_cudnn_cpu_tensor *t, uintptr_t *lo, uintptr_t *hi) {
  int64_t last = 0;
  for (int i = 0; i < t->nb; i++) last += (int64_t)(t->dim[i] - 1) * t->stride[i];
  *lo = (uintptr_t)t->base;
  *hi = (uintptr_t)(t->base + last + 1);
}

static int overlaps(const rgpu_cudnn_cpu_tensor *a, const rgpu_cudnn_cpu_tensor *b) {
  uintptr_t alo, ahi, blo, bhi;
  span_of(a, &alo, &ahi);
  span_of(b, &blo, &bhi);
  return alo < bhi && blo < ahi;
}

static int overlaps_raw(const rgpu_cudnn_cpu_tensor *a, const void *p, size_t bytes) {
  uintptr_t alo, ahi, lo = (uintptr_t)p, hi = lo + bytes;
  span_of(a, &alo, &ahi);
  return alo < hi && lo < ahi;
}

/* The same elements at the same places: oneDNN's in-place case. */
static int same_tensor(const rgpu_cudnn_cpu_tensor *a, const rgpu_cudnn_cpu_tensor *b) {
  if (a->base != b->base || !dims_equal(a, b)) return 0;
  for (int i = 0; i < a->nb; i++)
    if (a->dim[i] > 1 && a->stride[i] != b->stride[i]) return 0;
  return 1;
}

/* ---- reorder: copies, layouts and cuDNN's blend -------------------------- */

/* dst = alpha src + beta dst (beta 0: dst not read). */
static int reorder(job *j, const dnnl_memory_desc_t *src_md, const void *src,
                   const dnnl_memory_desc_t *dst_md, void *dst, double alpha, double beta) {
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t post_ops = NULL;
  dnnl_primitive_desc_t pd = NULL;
  int rc = -1;
  float scale = (float)alpha, sum = (float)beta;
  if (dnnl_primitive_attr_create(&attr) != dnnl_success) goto done;
  if (alpha != 1 && dnnl_primitive_attr_set_output_scales(attr, 1, 0, &scale) != dnnl_success)
    goto done;
  if (beta != 0) {
    if (dnnl_post_ops_create(&post_ops) != dnnl_success ||
        dnnl_post_ops_append_sum(post_ops, sum) != dnnl_success ||
        dnnl_primitive_attr_set_post_ops(attr, post_ops) != dnnl_success)
      goto done;
  }
  if (dnnl_reorder_primitive_desc_create(&pd, src_md, engine, dst_md, engine, attr) !=
      dnnl_success)
    goto done;
  job_arg(j, DNNL_ARG_FROM, src_md, src);
  job_arg(j, DNNL_ARG_TO, dst_md, dst);
  rc = job_run(j, pd);
done:
  pd_destroy(pd);
  if (post_ops) dnnl_post_ops_destroy(post_ops);
  if (attr) dnnl_primitive_attr_destroy(attr);
  return rc;
}

/* The memory a primitive reads for argument `what`: the caller's own when
 * the layout pd chose is the caller's, else a reordered copy. */
static const void *input_for(job *j, const_dnnl_primitive_desc_t pd, dnnl_query_t what,
                             const dnnl_memory_desc_t *user_md, const void *user) {
  const dnnl_memory_desc_t *want = dnnl_primitive_desc_query_md(pd, what, 0);
  if (!want) return NULL;
  if (dnnl_memory_desc_equal(want, user_md)) return user;
  void *t = job_temp(j, want);
  if (!t || reorder(j, user_md, user, want, t, 1, 0) != 0) return NULL;
  return t;
}

/* Where a primitive writes its result: out itself when direct (alpha 1,
 * beta 0, no overlap with an input, out in the layout pd chose), else a
 * temporary that finish() blends into out. */
typedef struct {
  const dnnl_memory_desc_t *md; /* the result's layout */
  void *ptr;
  int direct;
} result_place;

static int result_for(job *j, const dnnl_memory_desc_t *result_md,
                      const dnnl_memory_desc_t *out_md, void *out, int direct_ok,
                      result_place *r) {
  r->md = result_md;
  r->direct = direct_ok && dnnl_memory_desc_equal(result_md, out_md);
  r->ptr = r->direct ? out : job_temp(j, result_md);
  return r->ptr ? 0 : -1;
}

static int finish(job *j, const result_place *r, const dnnl_memory_desc_t *out_md, void *out,
                  double alpha, double beta) {
  if (r->direct) return 0;
  return reorder(j, r->md, r->ptr, out_md, out, alpha, beta);
}

/* ---- convolution --------------------------------------------------------- */

typedef struct {
  dnnl_memory_desc_t x, y, w;          /* the caller's layouts */
  dnnl_memory_desc_t x_any, y_any, w_any; /* oneDNN's choice */
  dnnl_dims_t stride, dilation, pad_l, pad_r;
} conv_shape;

static int conv_shape_of(const rgpu_cudnn_cpu_conv *p, conv_shape *c) {
  if (p->x.nb != 4 || p->y.nb != 4 || p->groups < 1 || p->y.dim[1] % p->groups) return -1;
  if (md_of(&c->x, &p->x) || md_of(&c->y, &p->y)) return -1;
  /* The filter: KCRS dense, (G, K/G, C/G, R, S) when grouped: the same
   * bytes. */
  int g = p->groups, nw = g > 1 ? 5 : 4;
  dnnl_dims_t wd;
  if (g > 1) {
    dnnl_dims_t d = {g, p->w_dim[0] / g, p->w_dim[1], p->w_dim[2], p->w_dim[3]};
    memcpy(wd, d, sizeof d);
  } else {
    dnnl_dims_t d = {p->w_dim[0], p->w_dim[1], p->w_dim[2], p->w_dim[3]};
    memcpy(wd, d, sizeof d);
  }
  if (dnnl_memory_desc_init_by_tag(&c->w, nw, wd, dnnl_f32, g > 1 ? dnnl_goihw : dnnl_oihw) !=
          dnnl_success ||
      dnnl_memory_desc_init_by_tag(&c->w_any, nw, wd, dnnl_f32, dnnl_format_tag_any) !=
          dnnl_success ||
      dnnl_memory_desc_init_by_tag(&c->x_any, 4, c->x.dims, dnnl_f32, dnnl_format_tag_any) !=
          dnnl_success ||
      dnnl_memory_desc_init_by_tag(&c->y_any, 4, c->y.dims, dnnl_f32, dnnl_format_tag_any) !=
          dnnl_success)
    return -1;
  for (int i = 0; i < 2; i++) {
    c->stride[i] = p->stride[i];
    c->dilation[i] = p->dilation[i] - 1; /* oneDNN counts the gaps */
    c->pad_l[i] = c->pad_r[i] = p->pad[i];
  }
  return 0;
}

/* The filter as the forward cross-correlation reads it: CUDNN_CONVOLUTION
 * flips it (R and S reversed) into a temporary. */
static const float *filter_for(job *j, const rgpu_cudnn_cpu_conv *p) {
  if (!p->flip) return p->w;
  const int KC = p->w_dim[0] * p->w_dim[1], R = p->w_dim[2], S = p->w_dim[3];
  float *f = job_temp_floats(j, (int64_t)KC * R * S);
  if (!f) return NULL;
  for (int64_t kc = 0; kc < KC; kc++)
    for (int r = 0; r < R; r++)
      for (int s = 0; s < S; s++)
        f[(kc * R + r) * S + s] = p->w[(kc * R + (R - 1 - r)) * S + (S - 1 - s)];
  return f;
}

static dnnl_primitive_desc_t conv_fwd_pd(const conv_shape *c, dnnl_prop_kind_t prop) {
  dnnl_convolution_desc_t d;
  if (dnnl_dilated_convolution_forward_desc_init(&d, prop, dnnl_convolution_direct, &c->x_any,
                                                 &c->w_any, NULL, &c->y_any, c->stride,
                                                 c->dilation, c->pad_l, c->pad_r) !=
      dnnl_success)
    return NULL;
  return pd_create(&d, NULL, NULL);
}

int rgpu_cudnn_dnnl_conv_fwd(const rgpu_cudnn_cpu_conv *p) {
  conv_shape c;
  if (!ready()) return -1;
  if (conv_shape_of(p, &c)) return refuse("convolution", "shape");
  dnnl_primitive_desc_t pd = conv_fwd_pd(&c, dnnl_forward_inference);
  if (!pd) return refuse("convolution", "no implementation");
  job j = {0};
  int rc = -1;
  result_place r;
  const float *w = filter_for(&j, p);
  const void *x = w ? input_for(&j, pd, dnnl_query_src_md, &c.x, p->x.base) : NULL;
  const void *wk = x ? input_for(&j, pd, dnnl_query_weights_md, &c.w, w) : NULL;
  int direct_ok = p->alpha == 1 && p->beta == 0 && !overlaps(&p->y, &p->x) &&
                  !overlaps_raw(&p->y, p->w, dnnl_memory_desc_get_size(&c.w));
  if (!wk || result_for(&j, dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0), &c.y,
                        p->y.base, direct_ok, &r))
    goto done;
  job_arg(&j, DNNL_ARG_SRC, dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0), x);
  job_arg(&j, DNNL_ARG_WEIGHTS, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0), wk);
  job_arg(&j, DNNL_ARG_DST, r.md, r.ptr);
  if (job_run(&j, pd)) goto done;
  rc = finish(&j, &r, &c.y, p->y.base, p->alpha, p->beta);
done:
  job_free(&j);
  pd_destroy(pd);
  return rc ? refuse("convolution", "execution") : 0;
}

int rgpu_cudnn_dnnl_conv_bwd_data(const rgpu_cudnn_cpu_conv *p) {
  conv_shape c;
  dnnl_convolution_desc_t d;
  if (!ready()) return -1;
  if (conv_shape_of(p, &c)) return refuse("convolution backward data", "shape");
  dnnl_primitive_desc_t hint = conv_fwd_pd(&c, dnnl_forward_training), pd = NULL;
  if (hint && dnnl_dilated_convolution_backward_data_desc_init(
                  &d, dnnl_convolution_direct, &c.x_any, &c.w_any, &c.y_any, c.stride,
                  c.dilation, c.pad_l, c.pad_r) == dnnl_success)
    pd = pd_create(&d, NULL, hint);
  if (!pd) {
    pd_destroy(hint);
    return refuse("convolution backward data", "no implementation");
  }
  job j = {0};
  int rc = -1;
  result_place r;
  const float *w = filter_for(&j, p);
  const void *dy = w ? input_for(&j, pd, dnnl_query_diff_dst_md, &c.y, p->y.base) : NULL;
  const void *wk = dy ? input_for(&j, pd, dnnl_query_weights_md, &c.w, w) : NULL;
  int direct_ok = p->alpha == 1 && p->beta == 0 && !overlaps(&p->x, &p->y) &&
                  !overlaps_raw(&p->x, p->w, dnnl_memory_desc_get_size(&c.w));
  if (!wk || result_for(&j, dnnl_primitive_desc_query_md(pd, dnnl_query_diff_src_md, 0), &c.x,
                        p->x.base, direct_ok, &r))
    goto done;
  job_arg(&j, DNNL_ARG_DIFF_DST, dnnl_primitive_desc_query_md(pd, dnnl_query_diff_dst_md, 0), dy);
  job_arg(&j, DNNL_ARG_WEIGHTS, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0), wk);
  job_arg(&j, DNNL_ARG_DIFF_SRC, r.md, r.ptr);
  if (job_run(&j, pd)) goto done;
  rc = finish(&j, &r, &c.x, p->x.base, p->alpha, p->beta);
done:
  job_free(&j);
  pd_destroy(pd);
  pd_destroy(hint);
  return rc ? refuse("convolution backward data", "execution") : 0;
}

int rgpu_cudnn_dnnl_conv_bwd_filter(const rgpu_cudnn_cpu_conv *p, float *dw) {
  conv_shape c;
  dnnl_convolution_desc_t d;
  if (!ready()) return -1;
  if (conv_shape_of(p, &c)) return refuse("convolution backward filter", "shape");
  dnnl_primitive_desc_t hint = conv_fwd_pd(&c, dnnl_forward_training), pd = NULL;
  if (hint && dnnl_dilated_convolution_backward_weights_desc_init(
                  &d, dnnl_convolution_direct, &c.x_any, &c.w_any, NULL, &c.y_any, c.stride,
                  c.dilation, c.pad_l, c.pad_r) == dnnl_success)
    pd = pd_create(&d, NULL, hint);
  if (!pd) {
    pd_destroy(hint);
    return refuse("convolution backward filter", "no implementation");
  }
  job j = {0};
  int rc = -1;
  const dnnl_memory_desc_t *dw_md = dnnl_primitive_desc_query_md(pd, dnnl_query_diff_weights_md, 0);
  const void *x = input_for(&j, pd, dnnl_query_src_md, &c.x, p->x.base);
  const void *dy = x ? input_for(&j, pd, dnnl_query_diff_dst_md, &c.y, p->y.base) : NULL;
  /* The gradient lands in a temporary (oneDNN's layout), is reordered to
   * KCRS, and blended (and flipped back for CUDNN_CONVOLUTION) by a loop:
   * the filter is small next to the data. */
  void *dw_raw = dy ? job_temp(&j, dw_md) : NULL;
  float *dw_kcrs = dw_raw ? job_temp(&j, &c.w) : NULL;
  if (!dw_kcrs) goto done;
  job_arg(&j, DNNL_ARG_SRC, dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0), x);
  job_arg(&j, DNNL_ARG_DIFF_DST, dnnl_primitive_desc_query_md(pd, dnnl_query_diff_dst_md, 0), dy);
  job_arg(&j, DNNL_ARG_DIFF_WEIGHTS, dw_md, dw_raw);
  if (job_run(&j, pd) || reorder(&j, dw_md, dw_raw, &c.w, dw_kcrs, 1, 0)) goto done;
  const int KC = p->w_dim[0] * p->w_dim[1], R = p->w_dim[2], S = p->w_dim[3];
  for (int64_t kc = 0; kc < KC; kc++)
    for (int r = 0; r < R; r++)
      for (int s = 0; s < S; s++) {
        int fr = p->flip ? R - 1 - r : r, fs = p->flip ? S - 1 - s : s;
        float *o = &dw[(kc * R + fr) * S + fs];
        double v = dw_kcrs[(kc * R + r) * S + s];
        *o = (float)(p->beta == 0 ? p->alpha * v : p->alpha * v + p->beta * *o);
      }
  rc = 0;
done:
  job_free(&j);
  pd_destroy(pd);
  pd_destroy(hint);
  return rc ? refuse("convolution backward filter", "execution") : 0;
}

/* ---- tensor arithmetic --------------------------------------------------- */

int rgpu_cudnn_dnnl_add(const rgpu_cudnn_cpu_tensor *a, const rgpu_cudnn_cpu_tensor *c,
                        double alpha, double beta) {
  dnnl_memory_desc_t a_md, c_md;
  if (!ready()) return -1;
  if (md_of(&a_md, a) || md_of(&c_md, c) || a->nb != c->nb) return refuse("add", "shape");
  /* A read while C is written: only oneDNN's exact in-place case is safe,
   * and a reorder is not one. */
  if (overlaps(a, c)) return refuse("add", "a overlaps c");
  job j = {0};
  int rc = -1;
  if (dims_equal(a, c)) {
    rc = reorder(&j, &a_md, a->base, &c_md, c->base, alpha, beta);
  } else if (beta != 0) {
    /* c = beta c + alpha a, a broadcast: a binary add, c in place. */
    dnnl_binary_desc_t d;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    float s0 = (float)beta, s1 = (float)alpha;
    if (dnnl_binary_desc_init(&d, dnnl_binary_add, &c_md, &a_md, &c_md) == dnnl_success &&
        dnnl_primitive_attr_create(&attr) == dnnl_success &&
        (beta == 1 || dnnl_primitive_attr_set_scales(attr, DNNL_ARG_SRC_0, 1, 0, &s0) ==
                          dnnl_success) &&
        (alpha == 1 || dnnl_primitive_attr_set_scales(attr, DNNL_ARG_SRC_1, 1, 0, &s1) ==
                           dnnl_success))
      pd = pd_create(&d, attr, NULL);
    if (pd) {
      job_arg(&j, DNNL_ARG_SRC_0, &c_md, c->base);
      job_arg(&j, DNNL_ARG_SRC_1, &a_md, a->base);
      job_arg(&j, DNNL_ARG_DST, &c_md, c->base);
      rc = job_run(&j, pd);
    }
    pd_destroy(pd);
    if (attr) dnnl_primitive_attr_destroy(attr);
  }
  /* beta 0 with a broadcast: a broadcast copy, the reference's loop. */
  job_free(&j);
  return rc ? refuse("add", "broadcast") : 0;
}

int rgpu_cudnn_dnnl_reduce_to(const rgpu_cudnn_cpu_tensor *dy, const rgpu_cudnn_cpu_tensor *db,
                              double alpha, double beta) {
  dnnl_memory_desc_t dy_md, db_md, r_md;
  dnnl_reduction_desc_t d;
  if (!ready()) return -1;
  if (md_of(&dy_md, dy) || md_of(&db_md, db) || dy->nb != db->nb ||
      md_dense_like(&r_md, &db_md))
    return refuse("reduction", "shape");
  if (dims_equal(dy, db)) { /* nothing to reduce: a blended copy */
    job j = {0};
    int rc = overlaps(dy, db) ? -1 : reorder(&j, &dy_md, dy->base, &db_md, db->base, alpha, beta);
    job_free(&j);
    return rc ? refuse("reduction", "copy") : 0;
  }
  if (dnnl_reduction_desc_init(&d, dnnl_reduction_sum, &dy_md, &r_md, 0, 0) != dnnl_success)
    return refuse("reduction", "descriptor");
  dnnl_primitive_desc_t pd = pd_create(&d, NULL, NULL);
  if (!pd) return refuse("reduction", "no implementation");
  job j = {0};
  int rc = -1;
  void *r = job_temp(&j, &r_md);
  if (r) {
    job_arg(&j, DNNL_ARG_SRC, &dy_md, dy->base);
    job_arg(&j, DNNL_ARG_DST, &r_md, r);
    if (!job_run(&j, pd)) rc = reorder(&j, &r_md, r, &db_md, db->base, alpha, beta);
  }
  job_free(&j);
  pd_destroy(pd);
  return rc ? refuse("reduction", "execution") : 0;
}

/* An elementwise function of a into a temporary of a's layout, then
 * c = scale result + beta c. */
static int unary_op(const rgpu_cudnn_cpu_tensor *a, const rgpu_cudnn_cpu_tensor *c,
                    dnnl_alg_kind_t alg, float fa, float fb, double scale, double beta) {
  dnnl_memory_desc_t a_md, c_md;
  dnnl_eltwise_desc_t d;
  if (md_of(&a_md, a) || md_of(&c_md, c) || !dims_equal(a, c) ||
      dnnl_eltwise_forward_desc_init(&d, dnnl_forward_inference, alg, &a_md, fa, fb) !=
          dnnl_success)
    return -1;
  dnnl_primitive_desc_t pd = pd_create(&d, NULL, NULL);
  if (!pd) return -1;
  job j = {0};
  int rc = -1;
  void *t = job_temp(&j, &a_md);
  if (t) {
    job_arg(&j, DNNL_ARG_SRC, &a_md, a->base);
    job_arg(&j, DNNL_ARG_DST, &a_md, t);
    if (!job_run(&j, pd)) rc = reorder(&j, &a_md, t, &c_md, c->base, scale, beta);
  }
  job_free(&j);
  pd_destroy(pd);
  return rc;
}

int rgpu_cudnn_dnnl_op_tensor(const rgpu_cudnn_cpu_tensor *a, const rgpu_cudnn_cpu_tensor *b,
                              const rgpu_cudnn_cpu_tensor *c, int op, double alpha1,
                              double alpha2, double beta) {
  if (!ready()) return -1;
  if (op == CUDNN_OP_TENSOR_SQRT) {
    /* sqrt(alpha1 a) = sqrt(alpha1) sqrt(a) for alpha1 >= 0. */
    if (alpha1 < 0) return refuse("op tensor", "sqrt of a negative scale");
    if (unary_op(a, c, dnnl_eltwise_sqrt, 0, 0, sqrt(alpha1), beta))
      return refuse("op tensor", "sqrt");
    return 0;
  }
  if (op == CUDNN_OP_TENSOR_NOT) {
    if (unary_op(a, c, dnnl_eltwise_linear, (float)-alpha1, 1.0f, 1.0, beta))
      return refuse("op tensor", "not");
    return 0;
  }
  dnnl_alg_kind_t alg;
  switch (op) {
    case CUDNN_OP_TENSOR_ADD: alg = dnnl_binary_add; break;
    case CUDNN_OP_TENSOR_MUL: alg = dnnl_binary_mul; break;
    case CUDNN_OP_TENSOR_MIN: alg = dnnl_binary_min; break;
    case CUDNN_OP_TENSOR_MAX: alg = dnnl_binary_max; break;
    default: return refuse("op tensor", "operation");
  }
  /* oneDNN broadcasts only its second source; the four operations commute,
   * so a broadcast a goes second. */
  const rgpu_cudnn_cpu_tensor *s0 = a, *s1 = b;
  float sc0 = (float)alpha1, sc1 = (float)alpha2;
  if (!dims_equal(a, c)) {
    s0 = b;
    s1 = a;
    sc0 = (float)alpha2;
    sc1 = (float)alpha1;
  }
  dnnl_memory_desc_t s0_md, s1_md, c_md, t_md;
  dnnl_binary_desc_t d;
  if (!dims_equal(s0, c) || md_of(&s0_md, s0) || md_of(&s1_md, s1) || md_of(&c_md, c) ||
      md_dense_like(&t_md, &c_md))
    return refuse("op tensor", "shape");
  /* The binary writes c itself when beta is 0 and c overlaps neither
   * source; else a dense temporary in c's order, blended after. */
  int direct = beta == 0 && !overlaps(c, a) && !overlaps(c, b);
  result_place r = {.md = direct ? &c_md : &t_md, .direct = direct};
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t pd = NULL;
  if (dnnl_binary_desc_init(&d, alg, &s0_md, &s1_md, r.md) == dnnl_success &&
      dnnl_primitive_attr_create(&attr) == dnnl_success &&
      (sc0 == 1 || dnnl_primitive_attr_set_scales(attr, DNNL_ARG_SRC_0, 1, 0, &sc0) ==
                       dnnl_success) &&
      (sc1 == 1 || dnnl_primitive_attr_set_scales(attr, DNNL_ARG_SRC_1, 1, 0, &sc1) ==
                       dnnl_success))
    pd = pd_create(&d, attr, NULL);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (!pd) return refuse("op tensor", "no implementation");
  job j = {0};
  int rc = -1;
  r.ptr = direct ? c->base : job_temp(&j, r.md);
  if (r.ptr) {
    job_arg(&j, DNNL_ARG_SRC_0, &s0_md, s0->base);
    job_arg(&j, DNNL_ARG_SRC_1, &s1_md, s1->base);
    job_arg(&j, DNNL_ARG_DST, r.md, r.ptr);
    if (!job_run(&j, pd)) rc = finish(&j, &r, &c_md, c->base, 1.0, beta);
  }
  job_free(&j);
  pd_destroy(pd);
  return rc ? refuse("op tensor", "execution") : 0;
}

/* ---- activation ---------------------------------------------------------- */

/* cuDNN's activation as oneDNN's eltwise algorithm and parameters; use_dst:
 * the backward pass reads the forward output (sigmoid, tanh). */
static int eltwise_of(int mode, double coef, double swish_beta, int backward,
                      dnnl_alg_kind_t *alg, float *a, float *b) {
  *a = *b = 0;
  switch (mode) {
    case CUDNN_ACTIVATION_SIGMOID:
      *alg = backward ? dnnl_eltwise_logistic_use_dst_for_bwd : dnnl_eltwise_logistic;
      return 0;
    case CUDNN_ACTIVATION_RELU: *alg = dnnl_eltwise_relu; return 0;
    case CUDNN_ACTIVATION_TANH:
      *alg = backward ? dnnl_eltwise_tanh_use_dst_for_bwd : dnnl_eltwise_tanh;
      return 0;
    case CUDNN_ACTIVATION_CLIPPED_RELU:
      /* clip_v2: min(max(x, 0), coef), gradient where 0 < x < coef. */
      *alg = dnnl_eltwise_clip_v2;
      *b = (float)coef;
      return 0;
    case CUDNN_ACTIVATION_ELU: *alg = dnnl_eltwise_elu; *a = (float)coef; return 0;
    case CUDNN_ACTIVATION_SWISH: *alg = dnnl_eltwise_swish; *a = (float)swish_beta; return 0;
    default: return -1;
  }
}

int rgpu_cudnn_dnnl_activation(const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *y,
                               int mode, double coef, double swish_beta, double alpha,
                               double beta) {
  dnnl_memory_desc_t x_md, y_md;
  dnnl_eltwise_desc_t d;
  dnnl_alg_kind_t alg;
  float fa, fb;
  if (!ready()) return -1;
  if (md_of(&x_md, x) || md_of(&y_md, y) || !dims_equal(x, y))
    return refuse("activation", "shape");
  job j = {0};
  int rc = -1;
  if (mode == CUDNN_ACTIVATION_IDENTITY) { /* a blend of x into y */
    if (overlaps(x, y)) return refuse("activation", "identity in place");
    rc = reorder(&j, &x_md, x->base, &y_md, y->base, alpha, beta);
    job_free(&j);
    return rc ? refuse("activation", "identity") : 0;
  }
  if (eltwise_of(mode, coef, swish_beta, 0, &alg, &fa, &fb)) return refuse("activation", "mode");
  /* oneDNN's eltwise writes its result in the source's layout (one
   * descriptor for both). */
  if (dnnl_eltwise_forward_desc_init(&d, dnnl_forward_inference, alg, &x_md, fa, fb) !=
      dnnl_success)
    return refuse("activation", "descriptor");
  dnnl_primitive_desc_t pd = pd_create(&d, NULL, NULL);
  if (!pd) return refuse("activation", "no implementation");
  result_place r;
  int direct_ok = alpha == 1 && beta == 0 && (!overlaps(x, y) || same_tensor(x, y));
  if (!result_for(&j, &x_md, &y_md, y->base, direct_ok, &r)) {
    job_arg(&j, DNNL_ARG_SRC, &x_md, x->base);
    job_arg(&j, DNNL_ARG_DST, &x_md, r.ptr);
    if (!job_run(&j, pd)) rc = finish(&j, &r, &y_md, y->base, alpha, beta);
  }
  job_free(&j);
  pd_destroy(pd);
  return rc ? refuse("activation", "execution") : 0;
}

int rgpu_cudnn_dnnl_activation_bwd(const rgpu_cudnn_cpu_tensor *y, const rgpu_cudnn_cpu_tensor *dy,
                                   const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *dx,
                                   int mode, double coef, double swish_beta, double alpha,
                                   double beta) {
  dnnl_memory_desc_t data_md, dy_md, dx_md;
  dnnl_eltwise_desc_t fd, bd;
  dnnl_alg_kind_t alg;
  float fa, fb;
  if (!ready()) return -1;
  if (md_of(&dy_md, dy) || md_of(&dx_md, dx) || !dims_equal(dy, dx))
    return refuse("activation backward", "shape");
  job j = {0};
  int rc = -1;
  if (mode == CUDNN_ACTIVATION_IDENTITY) { /* dx = dy, blended */
    if (overlaps(dy, dx)) return refuse("activation backward", "identity in place");
    rc = reorder(&j, &dy_md, dy->base, &dx_md, dx->base, alpha, beta);
    job_free(&j);
    return rc ? refuse("activation backward", "identity") : 0;
  }
  if (eltwise_of(mode, coef, swish_beta, 1, &alg, &fa, &fb))
    return refuse("activation backward", "mode");
  int use_dst = alg == dnnl_eltwise_logistic_use_dst_for_bwd ||
                alg == dnnl_eltwise_tanh_use_dst_for_bwd;
  const rgpu_cudnn_cpu_tensor *data = use_dst ? y : x;
  if (md_of(&data_md, data) || !dims_equal(data, dy))
    return refuse("activation backward", "shape");
  dnnl_primitive_desc_t hint = NULL, pd = NULL;
  if (dnnl_eltwise_forward_desc_init(&fd, dnnl_forward_training, alg, &data_md, fa, fb) ==
          dnnl_success &&
      (hint = pd_create(&fd, NULL, NULL)) != NULL &&
      dnnl_eltwise_backward_desc_init(&bd, alg, &dy_md, &data_md, fa, fb) == dnnl_success)
    pd = pd_create(&bd, NULL, hint);
  if (!pd) {
    pd_destroy(hint);
    return refuse("activation backward", "no implementation");
  }
  /* diff_src takes diff_dst's layout (one descriptor for both). */
  result_place r;
  int direct_ok = alpha == 1 && beta == 0 && !overlaps(dx, dy) && !overlaps(dx, data);
  if (!result_for(&j, &dy_md, &dx_md, dx->base, direct_ok, &r)) {
    job_arg(&j, use_dst ? DNNL_ARG_DST : DNNL_ARG_SRC, &data_md, data->base);
    job_arg(&j, DNNL_ARG_DIFF_DST, &dy_md, dy->base);
    job_arg(&j, DNNL_ARG_DIFF_SRC, &dy_md, r.ptr);
    if (!job_run(&j, pd)) rc = finish(&j, &r, &dx_md, dx->base, alpha, beta);
  }
  job_free(&j);
  pd_destroy(pd);
  pd_destroy(hint);
  return rc ? refuse("activation backward", "execution") : 0;
}

/* ---- pooling ------------------------------------------------------------- */

typedef struct {
  dnnl_alg_kind_t alg;
  dnnl_dims_t stride, kernel, dilation, pad_l, pad_r;
} pool_shape;

static int pool_shape_of(int mode, const int window[2], const int pad[2], const int stride[2],
                         pool_shape *s) {
  switch (mode) {
    case CUDNN_POOLING_MAX:
    case CUDNN_POOLING_MAX_DETERMINISTIC: s->alg = dnnl_pooling_max; break;
    case CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING:
      s->alg = dnnl_pooling_avg_include_padding;
      break;
    case CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING:
      s->alg = dnnl_pooling_avg_exclude_padding;
      break;
    default: return -1;
  }
  for (int i = 0; i < 2; i++) {
    /* A window that can lie entirely in the padding has no element: the
     * reference's answer (0), not oneDNN's (-inf or 0/0). */
    if (pad[i] >= window[i]) return -1;
    s->stride[i] = stride[i];
    s->kernel[i] = window[i];
    s->dilation[i] = 0;
    s->pad_l[i] = s->pad_r[i] = pad[i];
  }
  return 0;
}

static dnnl_primitive_desc_t pool_fwd_pd(const pool_shape *s, dnnl_prop_kind_t prop,
                                         const dnnl_memory_desc_t *x_md,
                                         const dnnl_memory_desc_t *y_md) {
  dnnl_pooling_v2_desc_t d;
  if (dnnl_pooling_v2_forward_desc_init(&d, prop, s->alg, x_md, y_md, s->stride, s->kernel,
                                        s->dilation, s->pad_l, s->pad_r) != dnnl_success)
    return NULL;
  return pd_create(&d, NULL, NULL);
}

int rgpu_cudnn_dnnl_pooling(const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *y,
                            int mode, const int window[2], const int pad[2], const int stride[2],
                            double alpha, double beta) {
  dnnl_memory_desc_t x_md, y_md, t_md;
  pool_shape s;
  if (!ready()) return -1;
  if (x->nb != 4 || y->nb != 4 || md_of(&x_md, x) || md_of(&y_md, y) ||
      pool_shape_of(mode, window, pad, stride, &s) || md_dense_like(&t_md, &y_md))
    return refuse("pooling", "shape");
  int direct = alpha == 1 && beta == 0 && !overlaps(x, y);
  result_place r = {.md = direct ? &y_md : &t_md, .direct = direct};
  dnnl_primitive_desc_t pd = pool_fwd_pd(&s, dnnl_forward_inference, &x_md, r.md);
  if (!pd) return refuse("pooling", "no implementation");
  job j = {0};
  int rc = -1;
  r.ptr = direct ? y->base : job_temp(&j, r.md);
  if (r.ptr) {
    job_arg(&j, DNNL_ARG_SRC, &x_md, x->base);
    job_arg(&j, DNNL_ARG_DST, r.md, r.ptr);
    if (!job_run(&j, pd)) rc = finish(&j, &r, &y_md, y->base, alpha, beta);
  }
  job_free(&j);
  pd_destroy(pd);
  return rc ? refuse("pooling", "execution") : 0;
}

int rgpu_cudnn_dnnl_pooling_bwd(const rgpu_cudnn_cpu_tensor *y, const rgpu_cudnn_cpu_tensor *dy,
                                const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *dx,
                                int mode, const int window[2], const int pad[2],
                                const int stride[2], double alpha, double beta) {
  (void)y; /* max pooling's places come from oneDNN's forward workspace */
  dnnl_memory_desc_t x_md, dy_md, dx_md, t_md;
  dnnl_pooling_v2_desc_t bd;
  pool_shape s;
  if (!ready()) return -1;
  if (x->nb != 4 || dy->nb != 4 || dx->nb != 4 || md_of(&x_md, x) || md_of(&dy_md, dy) ||
      md_of(&dx_md, dx) || !dims_equal(x, dx) ||
      pool_shape_of(mode, window, pad, stride, &s) || md_dense_like(&t_md, &dx_md))
    return refuse("pooling backward", "shape");
  int direct = alpha == 1 && beta == 0 && !overlaps(dx, dy) && !overlaps(dx, x);
  result_place r = {.md = direct ? &dx_md : &t_md, .direct = direct};
  /* The forward pass (training: max pooling's workspace, the index of each
   * window's maximum) with dy's layout for its output, as the backward
   * descriptor wants the workspace in that layout. */
  dnnl_primitive_desc_t hint = pool_fwd_pd(&s, dnnl_forward_training, &x_md, &dy_md), pd = NULL;
  if (hint && dnnl_pooling_v2_backward_desc_init(&bd, s.alg, r.md, &dy_md, s.stride, s.kernel,
                                                 s.dilation, s.pad_l, s.pad_r) == dnnl_success)
    pd = pd_create(&bd, NULL, hint);
  if (!pd) {
    pd_destroy(hint);
    return refuse("pooling backward", "no implementation");
  }
  job j = {0};
  int rc = -1;
  const dnnl_memory_desc_t *ws_md = dnnl_primitive_desc_query_md(hint, dnnl_query_workspace_md, 0);
  int has_ws = ws_md && ws_md->ndims > 0;
  void *ws = has_ws ? job_temp(&j, ws_md) : NULL;
  if (has_ws && ws) {
    void *y_tmp = job_temp(&j, &dy_md);
    if (y_tmp) {
      job_arg(&j, DNNL_ARG_SRC, &x_md, x->base);
      job_arg(&j, DNNL_ARG_DST, &dy_md, y_tmp);
      job_arg(&j, DNNL_ARG_WORKSPACE, ws_md, ws);
      if (job_run(&j, hint)) ws = NULL;
    } else {
      ws = NULL;
    }
  }
  r.ptr = direct ? dx->base : job_temp(&j, r.md);
  if (r.ptr && (!has_ws || ws)) {
    job_arg(&j, DNNL_ARG_DIFF_DST, &dy_md, dy->base);
    job_arg(&j, DNNL_ARG_DIFF_SRC, r.md, r.ptr);
    if (has_ws) job_arg(&j, DNNL_ARG_WORKSPACE, ws_md, ws);
    if (!job_run(&j, pd)) rc = finish(&j, &r, &dx_md, dx->base, alpha, beta);
  }
  job_free(&j);
  pd_destroy(pd);
  pd_destroy(hint);
  return rc ? refuse("pooling backward", "execution") : 0;
}

/* ---- softmax ------------------------------------------------------------- */

/* The tensor as oneDNN's softmax sees it and the axis: CHANNEL is axis 1 of
 * the tensor as it is; INSTANCE the 2-d form (N, the rest), axis 1. */
static int softmax_md(const rgpu_cudnn_cpu_tensor *t, int mode, dnnl_memory_desc_t *md) {
  if (mode == CUDNN_SOFTMAX_MODE_INSTANCE) return md_collapsed(md, t);
  if (mode != CUDNN_SOFTMAX_MODE_CHANNEL || t->nb < 2) return -1;
  return md_of(md, t);
}

int rgpu_cudnn_dnnl_softmax(const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *y,
                            int algo, int mode, double alpha, double beta) {
  dnnl_memory_desc_t x_md, y_md, t_md;
  dnnl_softmax_v2_desc_t d;
  if (!ready()) return -1;
  if (!dims_equal(x, y) || softmax_md(x, mode, &x_md) || softmax_md(y, mode, &y_md) ||
      md_dense_like(&t_md, &y_md))
    return refuse("softmax", "layout");
  /* FAST skips the maximum's subtraction; the result is the same. */
  dnnl_alg_kind_t alg = algo == CUDNN_SOFTMAX_LOG ? dnnl_softmax_log : dnnl_softmax_accurate;
  int direct = alpha == 1 && beta == 0 && (!overlaps(x, y) || same_tensor(x, y));
  result_place r = {.md = direct ? &y_md : &t_md, .direct = direct};
  if (dnnl_softmax_v2_forward_desc_init(&d, dnnl_forward_inference, alg, &x_md, r.md, 1) !=
      dnnl_success)
    return refuse("softmax", "descriptor");
  dnnl_primitive_desc_t pd = pd_create(&d, NULL, NULL);
  if (!pd) return refuse("softmax", "no implementation");
  job j = {0};
  int rc = -1;
  r.ptr = direct ? y->base : job_temp(&j, r.md);
  if (r.ptr) {
    job_arg(&j, DNNL_ARG_SRC, &x_md, x->base);
    job_arg(&j, DNNL_ARG_DST, r.md, r.ptr);
    if (!job_run(&j, pd)) rc = finish(&j, &r, &y_md, y->base, alpha, beta);
  }
  job_free(&j);
  pd_destroy(pd);
  return rc ? refuse("softmax", "execution") : 0;
}

int rgpu_cudnn_dnnl_softmax_bwd(const rgpu_cudnn_cpu_tensor *y, const rgpu_cudnn_cpu_tensor *dy,
                                const rgpu_cudnn_cpu_tensor *dx, int algo, int mode,
                                double alpha, double beta) {
  dnnl_memory_desc_t y_md, dy_md, dx_md, t_md;
  dnnl_softmax_v2_desc_t fd, bd;
  if (!ready()) return -1;
  if (!dims_equal(y, dy) || !dims_equal(y, dx) || softmax_md(y, mode, &y_md) ||
      softmax_md(dy, mode, &dy_md) || softmax_md(dx, mode, &dx_md) ||
      md_dense_like(&t_md, &dx_md))
    return refuse("softmax backward", "layout");
  dnnl_alg_kind_t alg = algo == CUDNN_SOFTMAX_LOG ? dnnl_softmax_log : dnnl_softmax_accurate;
  int direct = alpha == 1 && beta == 0 && !overlaps(dx, dy) && !overlaps(dx, y);
  result_place r = {.md = direct ? &dx_md : &t_md, .direct = direct};
  dnnl_primitive_desc_t hint = NULL, pd = NULL;
  if (dnnl_softmax_v2_forward_desc_init(&fd, dnnl_forward_training, alg, &y_md, &y_md, 1) ==
          dnnl_success &&
      (hint = pd_create(&fd, NULL, NULL)) != NULL &&
      dnnl_softmax_v2_backward_desc_init(&bd, alg, r.md, &dy_md, &y_md, 1) == dnnl_success)
    pd = pd_create(&bd, NULL, hint);
  if (!pd) {
    pd_destroy(hint);
    return refuse("softmax backward", "no implementation");
  }
  job j = {0};
  int rc = -1;
  r.ptr = direct ? dx->base : job_temp(&j, r.md);
  if (r.ptr) {
    job_arg(&j, DNNL_ARG_DST, &y_md, y->base);
    job_arg(&j, DNNL_ARG_DIFF_DST, &dy_md, dy->base);
    job_arg(&j, DNNL_ARG_DIFF_SRC, r.md, r.ptr);
    if (!job_run(&j, pd)) rc = finish(&j, &r, &dx_md, dx->base, alpha, beta);
  }
  job_free(&j);
  pd_destroy(pd);
  pd_destroy(hint);
  return rc ? refuse("softmax backward", "execution") : 0;
}

/* ---- batch normalization ------------------------------------------------- */

/* The data as oneDNN's batch normalization sees it (statistics per axis 1):
 * SPATIAL as it is; PER_ACTIVATION (statistics per C,H,W position) the 2-d
 * form (N, C*H*W), so every position is a channel.  ns: the statistics'
 * count, the length of the parameter arrays. */
static int bn_md(const rgpu_cudnn_cpu_tensor *t, int mode, dnnl_memory_desc_t *md, int64_t *ns) {
  if (t->nb < 2) return -1;
  if (mode == CUDNN_BATCHNORM_PER_ACTIVATION) {
    if (md_collapsed(md, t)) return -1;
    *ns = md->dims[1];
    return 0;
  }
  if (t->nb > 5) return -1; /* oneDNN: at most 3 spatial dimensions */
  *ns = t->dim[1];
  return md_of(md, t);
}

static int bn_params_md(dnnl_memory_desc_t *md, int64_t ns) {
  dnnl_dims_t dims = {ns};
  return dnnl_memory_desc_init_by_tag(md, 1, dims, dnnl_f32, dnnl_a) == dnnl_success ? 0 : -1;
}

static dnnl_primitive_desc_t bn_fwd_pd(dnnl_prop_kind_t prop, const dnnl_memory_desc_t *x_md,
                                       double epsilon, unsigned flags) {
  dnnl_batch_normalization_desc_t d;
  if (dnnl_batch_normalization_forward_desc_init(&d, prop, x_md, (float)epsilon, flags) !=
      dnnl_success)
    return NULL;
  return pd_create(&d, NULL, NULL);
}

/* Forward, inference (the given estimates) or training (the batch's
 * statistics into mean and var, ns floats each). */
static int bn_forward(const rgpu_cudnn_cpu_batchnorm *p, int training, const char *what,
                      float *mean, float *var) {
  dnnl_memory_desc_t x_md, y_md, s_md;
  int64_t ns, ns_y;
  if (!ready()) return -1;
  if (!dims_equal(&p->x, &p->y) || bn_md(&p->x, p->mode, &x_md, &ns) ||
      bn_md(&p->y, p->mode, &y_md, &ns_y) || bn_params_md(&s_md, ns))
    return refuse(what, "layout");
  unsigned flags = dnnl_use_scale | dnnl_use_shift | (training ? 0 : dnnl_use_global_stats);
  dnnl_prop_kind_t prop = training ? dnnl_forward_training : dnnl_forward_inference;
  dnnl_primitive_desc_t pd = bn_fwd_pd(prop, &x_md, p->epsilon, flags);
  if (!pd) return refuse(what, "no implementation");
  job j = {0};
  int rc = -1;
  result_place r;
  /* oneDNN writes y in x's layout (one descriptor for both). */
  int direct_ok = p->alpha == 1 && p->beta == 0 && (!overlaps(&p->x, &p->y) ||
                                                    same_tensor(&p->x, &p->y));
  if (!result_for(&j, &x_md, &y_md, p->y.base, direct_ok, &r)) {
    job_arg(&j, DNNL_ARG_SRC, &x_md, p->x.base);
    job_arg(&j, DNNL_ARG_DST, &x_md, r.ptr);
    job_arg(&j, DNNL_ARG_SCALE, &s_md, p->scale);
    job_arg(&j, DNNL_ARG_SHIFT, &s_md, p->bias);
    job_arg(&j, DNNL_ARG_MEAN, &s_md, training ? mean : p->mean);
    job_arg(&j, DNNL_ARG_VARIANCE, &s_md, training ? var : p->variance);
    if (!job_run(&j, pd)) rc = finish(&j, &r, &y_md, p->y.base, p->alpha, p->beta);
  }
  job_free(&j);
  pd_destroy(pd);
  return rc ? refuse(what, "execution") : 0;
}

static int64_t bn_stat_count(const rgpu_cudnn_cpu_batchnorm *p) {
  int64_t ns = 1;
  if (p->mode != CUDNN_BATCHNORM_PER_ACTIVATION) return p->x.dim[1];
  for (int i = 1; i < p->x.nb; i++) ns *= p->x.dim[i];
  return ns;
}

int rgpu_cudnn_dnnl_batchnorm_fwd_inference(const rgpu_cudnn_cpu_batchnorm *p) {
  return bn_forward(p, 0, "batch normalization (inference)", NULL, NULL);
}

int rgpu_cudnn_dnnl_batchnorm_fwd_training(const rgpu_cudnn_cpu_batchnorm *p) {
  if (p->x.nb < 2) return -1;
  int64_t ns = bn_stat_count(p), m = 1;
  for (int i = 0; i < p->x.nb; i++) m *= p->x.dim[i];
  m /= ns;
  float *stats = malloc(2 * (size_t)ns * sizeof *stats);
  if (!stats) return refuse("batch normalization (training)", "memory");
  int rc = bn_forward(p, 1, "batch normalization (training)", stats, stats + ns);
  if (rc == 0) {
    /* The running averages (the unbiased variance, as cuDNN keeps) and
     * the saved mean and inverse standard deviation: per statistic. */
    double unbias = m > 1 ? (double)m / (double)(m - 1) : 1.0;
    for (int64_t s = 0; s < ns; s++) {
      double mean = stats[s], var = stats[ns + s];
      if (p->mean) p->mean[s] = (float)((1.0 - p->factor) * p->mean[s] + p->factor * mean);
      if (p->variance)
        p->variance[s] = (float)((1.0 - p->factor) * p->variance[s] + p->factor * var * unbias);
      if (p->save_mean) p->save_mean[s] = (float)mean;
      if (p->save_inv_std) p->save_inv_std[s] = (float)(1.0 / sqrt(var + p->epsilon));
    }
  }
  free(stats);
  return rc;
}

int rgpu_cudnn_dnnl_batchnorm_bwd(const rgpu_cudnn_cpu_batchnorm *p) {
  const char *what = "batch normalization backward";
  dnnl_memory_desc_t x_md, dy_md, dx_md, s_md;
  dnnl_batch_normalization_desc_t bd;
  int64_t ns, ns2, ns3;
  if (!ready()) return -1;
  const rgpu_cudnn_cpu_tensor *dy = &p->y, *dx = &p->dx;
  if (!dims_equal(&p->x, dy) || !dims_equal(&p->x, dx) || bn_md(&p->x, p->mode, &x_md, &ns) ||
      bn_md(dy, p->mode, &dy_md, &ns2) || bn_md(dx, p->mode, &dx_md, &ns3) ||
      bn_params_md(&s_md, ns))
    return refuse(what, "layout");
  unsigned flags = dnnl_use_scale | dnnl_use_shift;
  dnnl_primitive_desc_t hint = bn_fwd_pd(dnnl_forward_training, &x_md, p->epsilon, flags);
  dnnl_primitive_desc_t pd = NULL;
  if (hint && dnnl_batch_normalization_backward_desc_init(&bd, dnnl_backward, &dy_md, &x_md,
                                                          (float)p->epsilon, flags) ==
                  dnnl_success)
    pd = pd_create(&bd, NULL, hint);
  if (!pd) {
    pd_destroy(hint);
    return refuse(what, "no implementation");
  }
  job j = {0};
  int rc = -1;
  float *mean = job_temp_floats(&j, ns), *var = job_temp_floats(&j, ns);
  float *dscale = job_temp_floats(&j, ns), *dbias = job_temp_floats(&j, ns);
  float *shift = job_temp_floats(&j, ns);
  if (!mean || !var || !dscale || !dbias || !shift) goto done;
  /* The shift takes no part in the gradients, but oneDNN's backward with
   * dnnl_use_shift (which computes diff_shift) checks it is given. */
  memset(shift, 0, (size_t)ns * sizeof *shift);
  if (p->save_mean && p->save_inv_std) {
    /* oneDNN takes the variance; the saved inverse standard deviation
     * gives it back (1/inv^2 - epsilon). */
    for (int64_t s = 0; s < ns; s++) {
      double inv = p->save_inv_std[s];
      mean[s] = p->save_mean[s];
      var[s] = (float)(1.0 / (inv * inv) - p->epsilon);
    }
  } else {
    /* No cache: the batch's statistics again, from a forward pass whose
     * output is thrown away. */
    dnnl_primitive_desc_t stats_pd = bn_fwd_pd(dnnl_forward_training, &x_md, p->epsilon, 0);
    void *y_tmp = stats_pd ? job_temp(&j, &x_md) : NULL;
    int ok = 0;
    if (y_tmp) {
      job_arg(&j, DNNL_ARG_SRC, &x_md, p->x.base);
      job_arg(&j, DNNL_ARG_DST, &x_md, y_tmp);
      job_arg(&j, DNNL_ARG_MEAN, &s_md, mean);
      job_arg(&j, DNNL_ARG_VARIANCE, &s_md, var);
      ok = job_run(&j, stats_pd) == 0;
    }
    pd_destroy(stats_pd);
    if (!ok) goto done;
  }
  result_place r;
  int direct_ok = p->alpha == 1 && p->beta == 0 && !overlaps(dx, dy) && !overlaps(dx, &p->x);
  if (result_for(&j, &dy_md, &dx_md, dx->base, direct_ok, &r)) goto done;
  job_arg(&j, DNNL_ARG_SRC, &x_md, p->x.base);
  job_arg(&j, DNNL_ARG_MEAN, &s_md, mean);
  job_arg(&j, DNNL_ARG_VARIANCE, &s_md, var);
  job_arg(&j, DNNL_ARG_DIFF_DST, &dy_md, dy->base);
  job_arg(&j, DNNL_ARG_SCALE, &s_md, p->scale);
  job_arg(&j, DNNL_ARG_SHIFT, &s_md, shift);
  job_arg(&j, DNNL_ARG_DIFF_SRC, &dy_md, r.ptr);
  job_arg(&j, DNNL_ARG_DIFF_SCALE, &s_md, dscale);
  job_arg(&j, DNNL_ARG_DIFF_SHIFT, &s_md, dbias);
  if (job_run(&j, pd) || finish(&j, &r, &dx_md, dx->base, p->alpha, p->beta)) goto done;
  for (int64_t s = 0; s < ns; s++) {
    if (p->dscale)
      p->dscale[s] = (float)(p->beta_param == 0 ? p->alpha_param * dscale[s]
                                                : p->alpha_param * dscale[s] +
                                                      p->beta_param * p->dscale[s]);
    if (p->dbias)
      p->dbias[s] = (float)(p->beta_param == 0 ? p->alpha_param * dbias[s]
                                               : p->alpha_param * dbias[s] +
                                                     p->beta_param * p->dbias[s]);
  }
  rc = 0;
done:
  job_free(&j);
  pd_destroy(pd);
  pd_destroy(hint);
  return rc ? refuse(what, "execution") : 0;
}
