/* softgpu's cuDNN operations: every oneDNN-backed one (rgpu_cudnn_dnnl.c)
 * against the plain-C reference (rgpu_cudnn_cpu_ref.c) on random data, in
 * several shapes and layouts (channels-last strides, gapped non-dense
 * strides, groups, dilation, stride, unequal padding) and blends (alpha and
 * beta other than 1 and 0, beta 0 over a NaN-filled output, in place); the
 * reference's backward passes against central finite differences of its
 * forward ones, so the reference itself is shown right; the fallback
 * (rgpu_cudnn_cpu.c) where oneDNN refuses; and a timing of one convolution
 * (printed, never asserted). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cudnn.h>

#include "rgpu_cudnn_cpu.h"
#include "rgpu_cudnn_cpu_ref.h"
#include "rgpu_cudnn_dnnl.h"

/* oneDNN accumulates in float, the reference in double. */
#define TOL 1e-4

/* ---- random numbers ------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static double uniform(double lo, double hi) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return lo + (hi - lo) * (double)(rng_state >> 11) / (double)(1ull << 53);
}

/* ---- tensors in a buffer with room around them -------------------------- */

typedef enum {
  L_DENSE,  /* NCHW..., packed */
  L_CLAST,  /* channels last (NHWC): the channel innermost */
  L_GAPPED, /* every other element innermost, one spare element per row */
  L_NGAP,   /* packed but for seven spare elements between images */
} layout;

/* What the buffer holds outside the tensor: must survive every operation. */
#define SENTINEL 12345.0f

typedef struct {
  rgpu_cudnn_cpu_tensor t;
  float *buf;
  int64_t len;
} tbuf;

static tbuf tnew(int nb, const int *dim, layout l) {
  tbuf b;
  memset(&b, 0, sizeof b);
  b.t.nb = nb;
  int order[RGPU_CUDNN_CPU_DIM_MAX], n = 0; /* outermost first */
  order[n++] = 0;
  if (l == L_CLAST) {
    for (int i = 2; i < nb; i++) order[n++] = i;
    order[n++] = 1;
  } else {
    for (int i = 1; i < nb; i++) order[n++] = i;
  }
  int64_t s = l == L_GAPPED ? 2 : 1;
  for (int k = nb - 1; k >= 0; k--) {
    int i = order[k];
    b.t.dim[i] = dim[i];
    b.t.stride[i] = (int)s;
    s *= dim[i];
    if (l == L_GAPPED) s += 1;
    if (l == L_NGAP && k == 1) s += 7;
  }
  b.len = s + 3;
  b.buf = malloc((size_t)b.len * sizeof(float));
  assert_non_null(b.buf);
  for (int64_t i = 0; i < b.len; i++) b.buf[i] = SENTINEL;
  b.t.base = b.buf + 1; /* not the buffer's start: offsets are exercised */
  return b;
}

static tbuf tnew4(int n, int c, int h, int w, layout l) {
  int dim[4] = {n, c, h, w};
  return tnew(4, dim, l);
}

static int next_index(int nb, const int *dim, int *idx) {
  for (int i = nb - 1; i >= 0; i--) {
    if (++idx[i] < dim[i]) return 1;
    idx[i] = 0;
  }
  return 0;
}

static float *tat(const tbuf *b, const int *idx) {
  int64_t o = 0;
  for (int i = 0; i < b->t.nb; i++) o += (int64_t)idx[i] * b->t.stride[i];
  return b->t.base + o;
}

static int64_t tcount(const tbuf *b) {
  int64_t n = 1;
  for (int i = 0; i < b->t.nb; i++) n *= b->t.dim[i];
  return n;
}

static void tfill(tbuf *b, double lo, double hi) {
  int idx[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  do {
    *tat(b, idx) = (float)uniform(lo, hi);
  } while (next_index(b->t.nb, b->t.dim, idx));
}

static void tfill_nan(tbuf *b) {
  int idx[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  do {
    *tat(b, idx) = NAN;
  } while (next_index(b->t.nb, b->t.dim, idx));
}

static tbuf tclone(const tbuf *b) {
  tbuf c = *b;
  c.buf = malloc((size_t)b->len * sizeof(float));
  assert_non_null(c.buf);
  memcpy(c.buf, b->buf, (size_t)b->len * sizeof(float));
  c.t.base = c.buf + (b->t.base - b->buf);
  return c;
}

static void tfree(tbuf *b) {
  free(b->buf);
  b->buf = NULL;
}

/* The i-th element in logical order (for picking finite-difference
 * coordinates). */
static float *tnth(const tbuf *b, int64_t i) {
  int idx[RGPU_CUDNN_CPU_DIM_MAX];
  for (int k = b->t.nb - 1; k >= 0; k--) {
    idx[k] = (int)(i % b->t.dim[k]);
    i /= b->t.dim[k];
  }
  return tat(b, idx);
}

/* got equals want within TOL of want's largest magnitude, and got's buffer
 * outside the tensor is untouched. */
static void check_close_tol(const tbuf *got, const tbuf *want, double tol, const char *what) {
  int idx[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  double max_ref = 0, max_err = 0;
  int bad_idx[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  do {
    double w = *tat(want, idx);
    if (fabs(w) > max_ref) max_ref = fabs(w);
  } while (next_index(want->t.nb, want->t.dim, idx));
  do {
    double g = *tat(got, idx), w = *tat(want, idx), e = fabs(g - w);
    if (!(e <= max_err)) { /* NaN counts as the worst */
      max_err = isnan(e) ? INFINITY : e;
      memcpy(bad_idx, idx, sizeof idx);
    }
  } while (next_index(want->t.nb, want->t.dim, idx));
  if (!(max_err <= tol * (max_ref > 1e-6 ? max_ref : 1e-6))) {
    print_error("%s: error %g (largest |ref| %g) at [%d %d %d %d]: got %g want %g\n", what,
                max_err, max_ref, bad_idx[0], bad_idx[1], bad_idx[2], bad_idx[3],
                (double)*tat(got, bad_idx), (double)*tat(want, bad_idx));
    fail();
  }
  /* Outside the tensor: the sentinel everywhere. */
  char *mine = calloc((size_t)got->len, 1);
  assert_non_null(mine);
  memset(idx, 0, sizeof idx);
  do {
    mine[tat(got, idx) - got->buf] = 1;
  } while (next_index(got->t.nb, got->t.dim, idx));
  for (int64_t i = 0; i < got->len; i++)
    if (!mine[i] && got->buf[i] != SENTINEL) {
      print_error("%s: element %lld outside the tensor was written (%g)\n", what, (long long)i,
                  (double)got->buf[i]);
      fail();
    }
  free(mine);
}

static void check_close(const tbuf *got, const tbuf *want, const char *what) {
  check_close_tol(got, want, TOL, what);
}

static double dot(const tbuf *a, const tbuf *b) {
  int idx[RGPU_CUDNN_CPU_DIM_MAX] = {0};
  double s = 0;
  do {
    s += (double)*tat(a, idx) * *tat(b, idx);
  } while (next_index(a->t.nb, a->t.dim, idx));
  return s;
}

/* An output's initial content: random (read by beta != 0) or NaN (beta 0
 * must not read it). */
static void init_output(tbuf *b, double beta) {
  if (beta == 0) tfill_nan(b);
  else tfill(b, -1, 1);
}

/* ---- finite differences ------------------------------------------------- */

/* loss(ctx) is a scalar function of the float at *param; its derivative
 * there must be `analytic`.  Central difference; the step is the one the
 * float actually took. */
typedef double (*loss_fn)(void *ctx);

static void check_fd(loss_fn loss, void *ctx, float *param, double analytic, const char *what) {
  const double h = 1e-2;
  float save = *param;
  float up = (float)(save + h), down = (float)(save - h);
  *param = up;
  double lu = loss(ctx);
  *param = down;
  double ld = loss(ctx);
  *param = save;
  double numeric = (lu - ld) / ((double)up - (double)down);
  double scale = fabs(analytic) > 1 ? fabs(analytic) : 1;
  if (!(fabs(numeric - analytic) <= 2e-3 * scale)) {
    print_error("%s: finite difference %.7g, backward pass %.7g\n", what, numeric, analytic);
    fail();
  }
}

/* ---- convolution --------------------------------------------------------- */

typedef struct {
  int N, C, H, W, K, R, S;
  int pad[2], stride[2], dil[2], groups, flip;
  layout lx, ly;
  double alpha, beta;
} conv_case;

typedef struct {
  rgpu_cudnn_cpu_conv p;
  tbuf x, y, w; /* w: dense KCRS, as a 4-d tensor */
  int oh, ow;
} conv_setup;

static conv_setup conv_make(const conv_case *c) {
  conv_setup s;
  memset(&s, 0, sizeof s);
  s.oh = 1 + (c->H + 2 * c->pad[0] - ((c->R - 1) * c->dil[0] + 1)) / c->stride[0];
  s.ow = 1 + (c->W + 2 * c->pad[1] - ((c->S - 1) * c->dil[1] + 1)) / c->stride[1];
  s.x = tnew4(c->N, c->C, c->H, c->W, c->lx);
  s.y = tnew4(c->N, c->K, s.oh, s.ow, c->ly);
  s.w = tnew4(c->K, c->C / c->groups, c->R, c->S, L_DENSE);
  tfill(&s.x, -1, 1);
  tfill(&s.y, -1, 1);
  tfill(&s.w, -1, 1);
  s.p.x = s.x.t;
  s.p.y = s.y.t;
  s.p.w = s.w.t.base;
  s.p.w_dim[0] = c->K;
  s.p.w_dim[1] = c->C / c->groups;
  s.p.w_dim[2] = c->R;
  s.p.w_dim[3] = c->S;
  for (int i = 0; i < 2; i++) {
    s.p.pad[i] = c->pad[i];
    s.p.stride[i] = c->stride[i];
    s.p.dilation[i] = c->dil[i];
  }
  s.p.groups = c->groups;
  s.p.flip = c->flip;
  s.p.alpha = c->alpha;
  s.p.beta = c->beta;
  return s;
}

static void conv_free(conv_setup *s) {
  tfree(&s->x);
  tfree(&s->y);
  tfree(&s->w);
}

static const conv_case conv_cases[] = {
    /* plain: NCHW, 3x3, padding 1, the direct path (alpha 1, beta 0) */
    {2, 3, 7, 7, 4, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, 0, L_DENSE, L_DENSE, 1, 0},
    /* two groups, unequal padding, stride (2,1), dilation (1,2),
     * channels-last x, a blend */
    {2, 4, 9, 8, 6, 3, 3, {0, 2}, {2, 1}, {1, 2}, 2, 0, L_CLAST, L_DENSE, 0.5, 0.25},
    /* depthwise (groups = C), CUDNN_CONVOLUTION (flipped), 5x3, gapped y,
     * beta 0 over NaN, alpha 2 */
    {1, 4, 8, 9, 4, 5, 3, {2, 1}, {1, 2}, {1, 1}, 4, 1, L_DENSE, L_GAPPED, 2, 0},
    /* 1x1, stride 2, gapped x, channels-last y, flipped, beta 1 */
    {3, 5, 6, 7, 3, 1, 1, {0, 0}, {2, 2}, {1, 1}, 1, 1, L_GAPPED, L_CLAST, 1, 1},
    /* dilated and flipped, grouped (3 groups), padded between images */
    {2, 6, 10, 10, 9, 3, 2, {2, 1}, {1, 1}, {2, 3}, 3, 1, L_NGAP, L_NGAP, -1, 0.5},
};

static void test_conv_fwd(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++) {
    const conv_case *c = &conv_cases[i];
    conv_setup s = conv_make(c);
    init_output(&s.y, c->beta);
    tbuf y_ref = tclone(&s.y), y_dnnl = tclone(&s.y);
    s.p.y = y_ref.t;
    rgpu_cudnn_ref_conv_fwd(&s.p);
    s.p.y = y_dnnl.t;
    assert_int_equal(rgpu_cudnn_dnnl_conv_fwd(&s.p), 0);
    char what[64];
    snprintf(what, sizeof what, "convolution forward, case %zu", i);
    check_close(&y_dnnl, &y_ref, what);
    tfree(&y_ref);
    tfree(&y_dnnl);
    conv_free(&s);
  }
}

static void test_conv_bwd_data(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++) {
    const conv_case *c = &conv_cases[i];
    conv_setup s = conv_make(c); /* s.y: dy; s.x: dx's initial content */
    init_output(&s.x, c->beta);
    tbuf dx_ref = tclone(&s.x), dx_dnnl = tclone(&s.x);
    s.p.x = dx_ref.t;
    rgpu_cudnn_ref_conv_bwd_data(&s.p);
    s.p.x = dx_dnnl.t;
    assert_int_equal(rgpu_cudnn_dnnl_conv_bwd_data(&s.p), 0);
    char what[64];
    snprintf(what, sizeof what, "convolution backward data, case %zu", i);
    check_close(&dx_dnnl, &dx_ref, what);
    tfree(&dx_ref);
    tfree(&dx_dnnl);
    conv_free(&s);
  }
}

static void test_conv_bwd_filter(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++) {
    const conv_case *c = &conv_cases[i];
    conv_setup s = conv_make(c); /* s.y: dy */
    tbuf dw0 = tclone(&s.w);
    init_output(&dw0, c->beta);
    tbuf dw_ref = tclone(&dw0), dw_dnnl = tclone(&dw0);
    rgpu_cudnn_ref_conv_bwd_filter(&s.p, dw_ref.t.base);
    assert_int_equal(rgpu_cudnn_dnnl_conv_bwd_filter(&s.p, dw_dnnl.t.base), 0);
    char what[64];
    snprintf(what, sizeof what, "convolution backward filter, case %zu", i);
    check_close(&dw_dnnl, &dw_ref, what);
    tfree(&dw0);
    tfree(&dw_ref);
    tfree(&dw_dnnl);
    conv_free(&s);
  }
}

typedef struct {
  conv_setup *s;
  tbuf *g;
} conv_loss_ctx;

static double conv_loss(void *v) {
  conv_loss_ctx *c = v;
  rgpu_cudnn_ref_conv_fwd(&c->s->p);
  return dot(c->g, &c->s->y);
}

/* d/dx and d/dw of sum(g conv(x, w)) are bwd_data(g) and bwd_filter(g). */
static void test_conv_reference_gradients(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++) {
    conv_case c = conv_cases[i];
    c.alpha = 1;
    c.beta = 0;
    conv_setup s = conv_make(&c);
    tbuf g = tclone(&s.y), dx = tclone(&s.x), dw = tclone(&s.w);
    tfill(&g, -1, 1);
    rgpu_cudnn_cpu_conv q = s.p;
    q.y = g.t;
    q.x = dx.t;
    rgpu_cudnn_ref_conv_bwd_data(&q);
    q.x = s.x.t;
    rgpu_cudnn_ref_conv_bwd_filter(&q, dw.t.base);
    conv_loss_ctx ctx = {&s, &g};
    char what[80];
    for (int k = 0; k < 6; k++) {
      int64_t e = (int64_t)uniform(0, (double)tcount(&s.x));
      snprintf(what, sizeof what, "convolution d/dx, case %zu, element %lld", i, (long long)e);
      check_fd(conv_loss, &ctx, tnth(&s.x, e), *tnth(&dx, e), what);
      e = (int64_t)uniform(0, (double)tcount(&s.w));
      snprintf(what, sizeof what, "convolution d/dw, case %zu, element %lld", i, (long long)e);
      check_fd(conv_loss, &ctx, tnth(&s.w, e), *tnth(&dw, e), what);
    }
    tfree(&g);
    tfree(&dx);
    tfree(&dw);
    conv_free(&s);
  }
}

/* ---- pooling ------------------------------------------------------------- */

typedef struct {
  int N, C, H, W, window[2], pad[2], stride[2];
  layout lx, ly;
  double alpha, beta;
} pool_case;

static const pool_case pool_cases[] = {
    {2, 3, 8, 8, {2, 2}, {0, 0}, {2, 2}, L_DENSE, L_DENSE, 1, 0},
    {2, 3, 9, 7, {3, 3}, {1, 1}, {2, 2}, L_CLAST, L_GAPPED, 0.5, 0.5},
    {1, 5, 7, 10, {3, 2}, {1, 0}, {1, 2}, L_GAPPED, L_CLAST, 2, 0},
    {3, 2, 6, 6, {2, 3}, {1, 2}, {1, 1}, L_NGAP, L_DENSE, -1, 1},
};

static const int pool_modes[] = {CUDNN_POOLING_MAX, CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
                                 CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,
                                 CUDNN_POOLING_MAX_DETERMINISTIC};

static void pool_dims(const pool_case *c, int *oh, int *ow) {
  *oh = 1 + (c->H + 2 * c->pad[0] - c->window[0]) / c->stride[0];
  *ow = 1 + (c->W + 2 * c->pad[1] - c->window[1]) / c->stride[1];
}

static void test_pooling(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof pool_cases / sizeof pool_cases[0]; i++)
    for (size_t m = 0; m < sizeof pool_modes / sizeof pool_modes[0]; m++) {
      const pool_case *c = &pool_cases[i];
      int mode = pool_modes[m], oh, ow;
      pool_dims(c, &oh, &ow);
      tbuf x = tnew4(c->N, c->C, c->H, c->W, c->lx), y = tnew4(c->N, c->C, oh, ow, c->ly);
      tfill(&x, -1, 1);
      init_output(&y, c->beta);
      tbuf y_ref = tclone(&y), y_dnnl = tclone(&y);
      rgpu_cudnn_ref_pooling(&x.t, &y_ref.t, mode, c->window, c->pad, c->stride, c->alpha, c->beta);
      assert_int_equal(rgpu_cudnn_dnnl_pooling(&x.t, &y_dnnl.t, mode, c->window, c->pad,
                                               c->stride, c->alpha, c->beta),
                       0);
      char what[64];
      snprintf(what, sizeof what, "pooling, case %zu, mode %d", i, mode);
      check_close(&y_dnnl, &y_ref, what);

      /* Backward: y the forward's output, dy random, dx blended. */
      tbuf fy = tnew4(c->N, c->C, oh, ow, L_DENSE), dy = tnew4(c->N, c->C, oh, ow, c->ly);
      rgpu_cudnn_ref_pooling(&x.t, &fy.t, mode, c->window, c->pad, c->stride, 1, 0);
      tfill(&dy, -1, 1);
      tbuf dx = tnew4(c->N, c->C, c->H, c->W, c->ly == L_GAPPED ? L_DENSE : L_GAPPED);
      init_output(&dx, c->beta);
      tbuf dx_ref = tclone(&dx), dx_dnnl = tclone(&dx);
      rgpu_cudnn_ref_pooling_bwd(&fy.t, &dy.t, &x.t, &dx_ref.t, mode, c->window, c->pad,
                                 c->stride, c->alpha, c->beta);
      assert_int_equal(rgpu_cudnn_dnnl_pooling_bwd(&fy.t, &dy.t, &x.t, &dx_dnnl.t, mode,
                                                   c->window, c->pad, c->stride, c->alpha,
                                                   c->beta),
                       0);
      snprintf(what, sizeof what, "pooling backward, case %zu, mode %d", i, mode);
      check_close(&dx_dnnl, &dx_ref, what);
      tfree(&x);
      tfree(&y);
      tfree(&y_ref);
      tfree(&y_dnnl);
      tfree(&fy);
      tfree(&dy);
      tfree(&dx);
      tfree(&dx_ref);
      tfree(&dx_dnnl);
    }
}

/* Max pooling's backward where windows hold equal maxima (ReLU's zeros
 * feeding a pool): each dy goes to the first of them in window order, by
 * oneDNN's plain and vectorized (channels-last) kernels alike. */
static void test_pooling_max_ties(void **state) {
  (void)state;
  static const layout layouts[] = {L_DENSE, L_CLAST};
  int window[2] = {3, 3}, pad[2] = {1, 1}, stride[2] = {2, 2};
  for (int l = 0; l < 2; l++)
    for (int all_zero = 0; all_zero < 2; all_zero++) {
      tbuf x = tnew4(2, 8, 8, 8, layouts[l]), y = tnew4(2, 8, 4, 4, layouts[l]);
      tbuf dy = tnew4(2, 8, 4, 4, layouts[l]), dx = tnew4(2, 8, 8, 8, layouts[l]);
      for (int64_t i = 0; i < tcount(&x); i++)
        *tnth(&x, i) = all_zero ? 0.0f : (float)(i * 7 % 5 == 0);
      tfill(&dy, 1, 2);
      tfill_nan(&dx);
      rgpu_cudnn_ref_pooling(&x.t, &y.t, CUDNN_POOLING_MAX, window, pad, stride, 1, 0);
      tbuf dx_ref = tclone(&dx), dx_dnnl = tclone(&dx);
      rgpu_cudnn_ref_pooling_bwd(&y.t, &dy.t, &x.t, &dx_ref.t, CUDNN_POOLING_MAX, window, pad,
                                 stride, 1, 0);
      assert_int_equal(rgpu_cudnn_dnnl_pooling_bwd(&y.t, &dy.t, &x.t, &dx_dnnl.t,
                                                   CUDNN_POOLING_MAX, window, pad, stride, 1, 0),
                       0);
      /* A misrouted dy would be off by 1 or more. */
      check_close(&dx_dnnl, &dx_ref, "max pooling backward over ties");
      tbuf *all[] = {&x, &y, &dy, &dx, &dx_ref, &dx_dnnl};
      for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) tfree(all[k]);
    }
}

/* A window that can lie wholly in the padding: refused (the reference
 * answers 0 there), and the public function's answer is the reference's. */
static void test_pooling_padding_refusal(void **state) {
  (void)state;
  int window[2] = {2, 2}, pad[2] = {2, 0}, stride[2] = {1, 1}, oh = 1 + (5 + 4 - 2), ow = 4;
  tbuf x = tnew4(1, 2, 5, 5, L_DENSE), y = tnew4(1, 2, oh, ow, L_DENSE);
  tfill(&x, -1, 1);
  tfill_nan(&y);
  tbuf y_ref = tclone(&y);
  assert_int_equal(rgpu_cudnn_dnnl_pooling(&x.t, &y.t, CUDNN_POOLING_MAX, window, pad, stride, 1,
                                           0),
                   -1);
  rgpu_cudnn_cpu_pooling(&x.t, &y.t, CUDNN_POOLING_MAX, window, pad, stride, 1, 0);
  rgpu_cudnn_ref_pooling(&x.t, &y_ref.t, CUDNN_POOLING_MAX, window, pad, stride, 1, 0);
  check_close(&y, &y_ref, "max pooling, a window in the padding, through the fallback");
  int first_row[4] = {0, 0, 0, 0};
  assert_true(*tat(&y, first_row) == 0.0f);
  tfree(&x);
  tfree(&y);
  tfree(&y_ref);
}

typedef struct {
  tbuf *x, *y, *g;
  const pool_case *c;
  int mode;
} pool_loss_ctx;

static double pool_loss(void *v) {
  pool_loss_ctx *p = v;
  rgpu_cudnn_ref_pooling(&p->x->t, &p->y->t, p->mode, p->c->window, p->c->pad, p->c->stride, 1,
                         0);
  return dot(p->g, p->y);
}

/* Average pooling is linear: its gradient is exact. */
static void test_pooling_reference_gradients(void **state) {
  (void)state;
  static const int modes[] = {CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
                              CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING};
  for (size_t i = 0; i < sizeof pool_cases / sizeof pool_cases[0]; i++)
    for (int m = 0; m < 2; m++) {
      const pool_case *c = &pool_cases[i];
      int oh, ow;
      pool_dims(c, &oh, &ow);
      tbuf x = tnew4(c->N, c->C, c->H, c->W, c->lx), y = tnew4(c->N, c->C, oh, ow, c->ly);
      tbuf g = tnew4(c->N, c->C, oh, ow, L_DENSE), dx = tnew4(c->N, c->C, c->H, c->W, L_DENSE);
      tfill(&x, -1, 1);
      tfill(&g, -1, 1);
      rgpu_cudnn_ref_pooling(&x.t, &y.t, modes[m], c->window, c->pad, c->stride, 1, 0);
      rgpu_cudnn_ref_pooling_bwd(&y.t, &g.t, &x.t, &dx.t, modes[m], c->window, c->pad, c->stride,
                                 1, 0);
      pool_loss_ctx ctx = {&x, &y, &g, c, modes[m]};
      for (int k = 0; k < 6; k++) {
        int64_t e = (int64_t)uniform(0, (double)tcount(&x));
        char what[80];
        snprintf(what, sizeof what, "average pooling d/dx, case %zu, mode %d", i, modes[m]);
        check_fd(pool_loss, &ctx, tnth(&x, e), *tnth(&dx, e), what);
      }
      tfree(&x);
      tfree(&y);
      tfree(&g);
      tfree(&dx);
    }
}

/* ---- activation ---------------------------------------------------------- */

static const int act_modes[] = {CUDNN_ACTIVATION_SIGMOID,      CUDNN_ACTIVATION_RELU,
                                CUDNN_ACTIVATION_TANH,         CUDNN_ACTIVATION_CLIPPED_RELU,
                                CUDNN_ACTIVATION_ELU,          CUDNN_ACTIVATION_SWISH,
                                CUDNN_ACTIVATION_IDENTITY};
#define ACT_COEF 0.6
#define ACT_SWISH 1.3

typedef struct {
  int nb, dim[5];
  layout lx, ly;
  double alpha, beta;
  int in_place;
} elt_case;

static const elt_case elt_cases[] = {
    {4, {2, 3, 4, 5}, L_DENSE, L_DENSE, 1, 0, 0},
    {5, {2, 3, 2, 3, 4}, L_CLAST, L_GAPPED, 0.7, 0.3, 0},
    {4, {2, 5, 3, 3}, L_DENSE, L_DENSE, 1, 0, 1},
    {4, {1, 4, 5, 6}, L_GAPPED, L_NGAP, 2, 0, 0},
    {3, {3, 4, 5}, L_NGAP, L_CLAST, -0.5, 2, 0},
};

static void test_activation(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof elt_cases / sizeof elt_cases[0]; i++)
    for (size_t m = 0; m < sizeof act_modes / sizeof act_modes[0]; m++) {
      const elt_case *c = &elt_cases[i];
      int mode = act_modes[m];
      /* Identity in place would be a copy onto itself: refused. */
      if (c->in_place && mode == CUDNN_ACTIVATION_IDENTITY) continue;
      tbuf x = tnew(c->nb, c->dim, c->lx), y = tnew(c->nb, c->dim, c->ly);
      tfill(&x, -2, 2);
      init_output(&y, c->beta);
      tbuf y_ref = tclone(&y), y_dnnl = c->in_place ? tclone(&x) : tclone(&y);
      rgpu_cudnn_ref_activation(&x.t, &y_ref.t, mode, ACT_COEF, ACT_SWISH, c->alpha, c->beta);
      assert_int_equal(rgpu_cudnn_dnnl_activation(c->in_place ? &y_dnnl.t : &x.t, &y_dnnl.t, mode,
                                                  ACT_COEF, ACT_SWISH, c->alpha, c->beta),
                       0);
      char what[64];
      snprintf(what, sizeof what, "activation, case %zu, mode %d", i, mode);
      if (c->in_place) { /* compare values only: the layouts differ */
        tbuf want = tclone(&x);
        rgpu_cudnn_ref_activation(&x.t, &want.t, mode, ACT_COEF, ACT_SWISH, c->alpha, c->beta);
        check_close(&y_dnnl, &want, what);
        tfree(&want);
      } else {
        check_close(&y_dnnl, &y_ref, what);
      }

      /* Backward. */
      tbuf fy = tnew(c->nb, c->dim, c->ly), dy = tnew(c->nb, c->dim, c->lx);
      rgpu_cudnn_ref_activation(&x.t, &fy.t, mode, ACT_COEF, ACT_SWISH, 1, 0);
      tfill(&dy, -1, 1);
      tbuf dx = tnew(c->nb, c->dim, c->ly);
      init_output(&dx, c->beta);
      tbuf dx_ref = tclone(&dx), dx_dnnl = tclone(&dx);
      rgpu_cudnn_ref_activation_bwd(&fy.t, &dy.t, &x.t, &dx_ref.t, mode, ACT_COEF, ACT_SWISH,
                                    c->alpha, c->beta);
      assert_int_equal(rgpu_cudnn_dnnl_activation_bwd(&fy.t, &dy.t, &x.t, &dx_dnnl.t, mode,
                                                      ACT_COEF, ACT_SWISH, c->alpha, c->beta),
                       0);
      snprintf(what, sizeof what, "activation backward, case %zu, mode %d", i, mode);
      check_close(&dx_dnnl, &dx_ref, what);
      tfree(&x);
      tfree(&y);
      tfree(&y_ref);
      tfree(&y_dnnl);
      tfree(&fy);
      tfree(&dy);
      tfree(&dx);
      tfree(&dx_ref);
      tfree(&dx_dnnl);
    }
}

typedef struct {
  tbuf *x, *y, *g;
  int mode;
} act_loss_ctx;

static double act_loss(void *v) {
  act_loss_ctx *a = v;
  rgpu_cudnn_ref_activation(&a->x->t, &a->y->t, a->mode, ACT_COEF, ACT_SWISH, 1, 0);
  return dot(a->g, a->y);
}

static void test_activation_reference_gradients(void **state) {
  (void)state;
  int dim[4] = {2, 3, 4, 5};
  for (size_t m = 0; m < sizeof act_modes / sizeof act_modes[0]; m++) {
    int mode = act_modes[m];
    tbuf x = tnew(4, dim, L_CLAST), y = tnew(4, dim, L_DENSE), g = tnew(4, dim, L_DENSE);
    tbuf dx = tnew(4, dim, L_GAPPED);
    tfill(&x, -2, 2);
    tfill(&g, -1, 1);
    rgpu_cudnn_ref_activation(&x.t, &y.t, mode, ACT_COEF, ACT_SWISH, 1, 0);
    rgpu_cudnn_ref_activation_bwd(&y.t, &g.t, &x.t, &dx.t, mode, ACT_COEF, ACT_SWISH, 1, 0);
    act_loss_ctx ctx = {&x, &y, &g, mode};
    int checked = 0;
    for (int64_t e = 0; e < tcount(&x) && checked < 8; e += 7) {
      double v = *tnth(&x, e);
      /* Not within a step of a kink (0, and coef for clipped ReLU). */
      if (fabs(v) < 0.05 || fabs(v - ACT_COEF) < 0.05) continue;
      char what[64];
      snprintf(what, sizeof what, "activation d/dx, mode %d, x %g", mode, v);
      check_fd(act_loss, &ctx, tnth(&x, e), *tnth(&dx, e), what);
      checked++;
    }
    assert_int_equal(checked, 8);
    tfree(&x);
    tfree(&y);
    tfree(&g);
    tfree(&dx);
  }
}

/* ---- softmax ------------------------------------------------------------- */

typedef struct {
  int nb, dim[5];
  layout lx, ly;
  double alpha, beta;
} sm_case;

static const sm_case sm_cases[] = {
    {4, {2, 5, 3, 4}, L_DENSE, L_DENSE, 1, 0},
    {4, {3, 7, 2, 3}, L_NGAP, L_DENSE, 0.5, 0.5},
    {5, {2, 4, 2, 2, 3}, L_DENSE, L_NGAP, 2, 0},
    {3, {4, 6, 5}, L_DENSE, L_DENSE, -1, 1},
};

static const int sm_algos[] = {CUDNN_SOFTMAX_FAST, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_LOG};
static const int sm_modes[] = {CUDNN_SOFTMAX_MODE_CHANNEL, CUDNN_SOFTMAX_MODE_INSTANCE};

static void test_softmax(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof sm_cases / sizeof sm_cases[0]; i++)
    for (int a = 0; a < 3; a++)
      for (int m = 0; m < 2; m++) {
        const sm_case *c = &sm_cases[i];
        int algo = sm_algos[a], mode = sm_modes[m];
        /* CHANNEL also with channels-last x (any strides); INSTANCE needs
         * dimensions 1.. nested in order (else the reference; below). */
        layout lx = mode == CUDNN_SOFTMAX_MODE_CHANNEL && i == 0 ? L_CLAST : c->lx;
        tbuf x = tnew(c->nb, c->dim, lx), y = tnew(c->nb, c->dim, c->ly);
        tfill(&x, -3, 3);
        init_output(&y, c->beta);
        tbuf y_ref = tclone(&y), y_dnnl = tclone(&y);
        rgpu_cudnn_ref_softmax(&x.t, &y_ref.t, algo, mode, c->alpha, c->beta);
        assert_int_equal(
            rgpu_cudnn_dnnl_softmax(&x.t, &y_dnnl.t, algo, mode, c->alpha, c->beta), 0);
        char what[64];
        snprintf(what, sizeof what, "softmax, case %zu, algo %d, mode %d", i, algo, mode);
        check_close(&y_dnnl, &y_ref, what);

        tbuf fy = tnew(c->nb, c->dim, c->lx), dy = tnew(c->nb, c->dim, c->ly);
        rgpu_cudnn_ref_softmax(&x.t, &fy.t, algo, mode, 1, 0);
        tfill(&dy, -1, 1);
        tbuf dx = tnew(c->nb, c->dim, c->lx);
        init_output(&dx, c->beta);
        tbuf dx_ref = tclone(&dx), dx_dnnl = tclone(&dx);
        rgpu_cudnn_ref_softmax_bwd(&fy.t, &dy.t, &dx_ref.t, algo, mode, c->alpha, c->beta);
        assert_int_equal(rgpu_cudnn_dnnl_softmax_bwd(&fy.t, &dy.t, &dx_dnnl.t, algo, mode,
                                                     c->alpha, c->beta),
                         0);
        snprintf(what, sizeof what, "softmax backward, case %zu, algo %d, mode %d", i, algo, mode);
        check_close(&dx_dnnl, &dx_ref, what);
        tfree(&x);
        tfree(&y);
        tfree(&y_ref);
        tfree(&y_dnnl);
        tfree(&fy);
        tfree(&dy);
        tfree(&dx);
        tfree(&dx_ref);
        tfree(&dx_dnnl);
      }
}

/* INSTANCE over channels-last strides: oneDNN is not asked (its 2-d form
 * needs nested dimensions); rgpu_cudnn_cpu_softmax still answers right. */
static void test_softmax_fallback(void **state) {
  (void)state;
  int dim[4] = {2, 3, 4, 5};
  tbuf x = tnew(4, dim, L_CLAST), y = tnew(4, dim, L_CLAST);
  tfill(&x, -2, 2);
  tfill_nan(&y);
  tbuf y_ref = tclone(&y), y_cpu = tclone(&y);
  assert_int_equal(rgpu_cudnn_dnnl_softmax(&x.t, &y_cpu.t, CUDNN_SOFTMAX_ACCURATE,
                                           CUDNN_SOFTMAX_MODE_INSTANCE, 1, 0),
                   -1);
  /* The refusal left y alone (compared by bits: NaN != NaN). */
  assert_int_equal(memcmp(y_cpu.buf, y.buf, (size_t)y.len * sizeof(float)), 0);
  rgpu_cudnn_ref_softmax(&x.t, &y_ref.t, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE, 1,
                         0);
  rgpu_cudnn_cpu_softmax(&x.t, &y_cpu.t, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE, 1,
                         0);
  check_close(&y_cpu, &y_ref, "softmax INSTANCE channels-last, through the fallback");
  tfree(&x);
  tfree(&y);
  tfree(&y_ref);
  tfree(&y_cpu);
}

typedef struct {
  tbuf *x, *y, *g;
  int algo, mode;
} sm_loss_ctx;

static double sm_loss(void *v) {
  sm_loss_ctx *s = v;
  rgpu_cudnn_ref_softmax(&s->x->t, &s->y->t, s->algo, s->mode, 1, 0);
  return dot(s->g, s->y);
}

static void test_softmax_reference_gradients(void **state) {
  (void)state;
  int dim[4] = {2, 4, 3, 2};
  for (int a = 0; a < 3; a++)
    for (int m = 0; m < 2; m++) {
      tbuf x = tnew(4, dim, L_CLAST), y = tnew(4, dim, L_DENSE), g = tnew(4, dim, L_DENSE);
      tbuf dx = tnew(4, dim, L_DENSE);
      tfill(&x, -2, 2);
      tfill(&g, -1, 1);
      rgpu_cudnn_ref_softmax(&x.t, &y.t, sm_algos[a], sm_modes[m], 1, 0);
      rgpu_cudnn_ref_softmax_bwd(&y.t, &g.t, &dx.t, sm_algos[a], sm_modes[m], 1, 0);
      sm_loss_ctx ctx = {&x, &y, &g, sm_algos[a], sm_modes[m]};
      for (int k = 0; k < 6; k++) {
        int64_t e = (int64_t)uniform(0, (double)tcount(&x));
        char what[64];
        snprintf(what, sizeof what, "softmax d/dx, algo %d, mode %d", sm_algos[a], sm_modes[m]);
        check_fd(sm_loss, &ctx, tnth(&x, e), *tnth(&dx, e), what);
      }
      tfree(&x);
      tfree(&y);
      tfree(&g);
      tfree(&dx);
    }
}

/* ---- batch normalization ------------------------------------------------- */

typedef struct {
  int nb, dim[5], mode;
  layout lx, ly;
  double alpha, beta;
} bn_case;

static const bn_case bn_cases[] = {
    {4, {4, 3, 5, 5}, CUDNN_BATCHNORM_SPATIAL, L_DENSE, L_DENSE, 1, 0},
    {4, {3, 5, 4, 3}, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, L_CLAST, L_GAPPED, 0.5, 0.5},
    {5, {2, 4, 2, 3, 3}, CUDNN_BATCHNORM_SPATIAL, L_NGAP, L_CLAST, 2, 0},
    {4, {6, 3, 2, 4}, CUDNN_BATCHNORM_PER_ACTIVATION, L_DENSE, L_NGAP, 1, 0},
    {4, {5, 2, 3, 3}, CUDNN_BATCHNORM_PER_ACTIVATION, L_NGAP, L_DENSE, -1, 1},
};

static int64_t bn_stats(const bn_case *c) {
  if (c->mode != CUDNN_BATCHNORM_PER_ACTIVATION) return c->dim[1];
  int64_t n = 1;
  for (int i = 1; i < c->nb; i++) n *= c->dim[i];
  return n;
}

/* A float array of n as a 1-d tensor (to compare with check_close). */
static tbuf tvec(int64_t n, double lo, double hi) {
  int dim[1] = {(int)n};
  tbuf b = tnew(1, dim, L_DENSE);
  tfill(&b, lo, hi);
  return b;
}

static void test_batchnorm(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof bn_cases / sizeof bn_cases[0]; i++) {
    const bn_case *c = &bn_cases[i];
    int64_t ns = bn_stats(c);
    tbuf x = tnew(c->nb, c->dim, c->lx), y = tnew(c->nb, c->dim, c->ly);
    tfill(&x, -2, 3);
    init_output(&y, c->beta);
    tbuf scale = tvec(ns, 0.5, 1.5), bias = tvec(ns, -1, 1);
    tbuf mean = tvec(ns, -0.5, 0.5), var = tvec(ns, 0.5, 1.5);
    rgpu_cudnn_cpu_batchnorm p = {.x = x.t, .mode = c->mode, .epsilon = 1e-4,
                                  .alpha = c->alpha, .beta = c->beta,
                                  .scale = scale.t.base, .bias = bias.t.base,
                                  .mean = mean.t.base, .variance = var.t.base, .factor = 0.1};
    char what[80];

    /* Inference. */
    tbuf y_ref = tclone(&y), y_dnnl = tclone(&y);
    p.y = y_ref.t;
    rgpu_cudnn_ref_batchnorm_fwd_inference(&p);
    p.y = y_dnnl.t;
    assert_int_equal(rgpu_cudnn_dnnl_batchnorm_fwd_inference(&p), 0);
    snprintf(what, sizeof what, "batch-norm inference, case %zu", i);
    check_close(&y_dnnl, &y_ref, what);

    /* Training: y, the running averages, the saved statistics. */
    tbuf m_ref = tclone(&mean), m_dnnl = tclone(&mean), v_ref = tclone(&var),
         v_dnnl = tclone(&var);
    tbuf sm_ref = tvec(ns, 0, 1), sm_dnnl = tvec(ns, 0, 1), si_ref = tvec(ns, 0, 1),
         si_dnnl = tvec(ns, 0, 1);
    tbuf y2_ref = tclone(&y), y2_dnnl = tclone(&y);
    p.y = y2_ref.t;
    p.mean = m_ref.t.base;
    p.variance = v_ref.t.base;
    p.save_mean = sm_ref.t.base;
    p.save_inv_std = si_ref.t.base;
    rgpu_cudnn_ref_batchnorm_fwd_training(&p);
    p.y = y2_dnnl.t;
    p.mean = m_dnnl.t.base;
    p.variance = v_dnnl.t.base;
    p.save_mean = sm_dnnl.t.base;
    p.save_inv_std = si_dnnl.t.base;
    assert_int_equal(rgpu_cudnn_dnnl_batchnorm_fwd_training(&p), 0);
    snprintf(what, sizeof what, "batch-norm training, case %zu", i);
    check_close(&y2_dnnl, &y2_ref, what);
    check_close(&m_dnnl, &m_ref, "batch-norm running mean");
    check_close(&v_dnnl, &v_ref, "batch-norm running variance");
    check_close(&sm_dnnl, &sm_ref, "batch-norm saved mean");
    check_close(&si_dnnl, &si_ref, "batch-norm saved inverse deviation");

    /* Backward, with the saved statistics and without. */
    for (int saved = 0; saved < 2; saved++) {
      tbuf dy = tnew(c->nb, c->dim, c->ly), dx = tnew(c->nb, c->dim, c->lx);
      tfill(&dy, -1, 1);
      init_output(&dx, c->beta);
      tbuf ds = tvec(ns, -1, 1), db = tvec(ns, -1, 1);
      double beta_param = saved ? 0 : 0.5;
      if (beta_param == 0) {
        tfill_nan(&ds);
        tfill_nan(&db);
      }
      tbuf dx_ref = tclone(&dx), dx_dnnl = tclone(&dx), ds_ref = tclone(&ds),
           ds_dnnl = tclone(&ds), db_ref = tclone(&db), db_dnnl = tclone(&db);
      rgpu_cudnn_cpu_batchnorm b = {.x = x.t, .y = dy.t, .mode = c->mode, .epsilon = 1e-4,
                                    .alpha = c->alpha, .beta = c->beta, .alpha_param = 1.5,
                                    .beta_param = beta_param, .scale = scale.t.base,
                                    .save_mean = saved ? sm_ref.t.base : NULL,
                                    .save_inv_std = saved ? si_ref.t.base : NULL};
      b.dx = dx_ref.t;
      b.dscale = ds_ref.t.base;
      b.dbias = db_ref.t.base;
      rgpu_cudnn_ref_batchnorm_bwd(&b);
      b.dx = dx_dnnl.t;
      b.dscale = ds_dnnl.t.base;
      b.dbias = db_dnnl.t.base;
      assert_int_equal(rgpu_cudnn_dnnl_batchnorm_bwd(&b), 0);
      snprintf(what, sizeof what, "batch-norm backward dx, case %zu, saved %d", i, saved);
      check_close(&dx_dnnl, &dx_ref, what);
      check_close(&ds_dnnl, &ds_ref, "batch-norm backward dscale");
      check_close(&db_dnnl, &db_ref, "batch-norm backward dbias");
      tfree(&dy);
      tfree(&dx);
      tfree(&ds);
      tfree(&db);
      tfree(&dx_ref);
      tfree(&dx_dnnl);
      tfree(&ds_ref);
      tfree(&ds_dnnl);
      tfree(&db_ref);
      tfree(&db_dnnl);
    }
    tbuf *all[] = {&x, &y, &scale, &bias, &mean, &var, &y_ref, &y_dnnl, &m_ref, &m_dnnl,
                   &v_ref, &v_dnnl, &sm_ref, &sm_dnnl, &si_ref, &si_dnnl, &y2_ref, &y2_dnnl};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) tfree(all[k]);
  }
}

/* PER_ACTIVATION over channels-last strides: no 2-d form for oneDNN, so
 * the reference answers, through rgpu_cudnn_cpu_batchnorm_*. */
static void test_batchnorm_fallback(void **state) {
  (void)state;
  int dim[4] = {4, 3, 2, 2};
  int64_t ns = 3 * 2 * 2;
  tbuf x = tnew(4, dim, L_CLAST), y = tnew(4, dim, L_CLAST);
  tfill(&x, -1, 2);
  tfill_nan(&y);
  tbuf scale = tvec(ns, 0.5, 1.5), bias = tvec(ns, -1, 1);
  tbuf y_ref = tclone(&y), y_cpu = tclone(&y);
  rgpu_cudnn_cpu_batchnorm p = {.x = x.t, .y = y_cpu.t, .mode = CUDNN_BATCHNORM_PER_ACTIVATION,
                                .epsilon = 1e-5, .alpha = 1, .beta = 0, .scale = scale.t.base,
                                .bias = bias.t.base, .factor = 1};
  assert_int_equal(rgpu_cudnn_dnnl_batchnorm_fwd_training(&p), -1);
  assert_int_equal(memcmp(y_cpu.buf, y.buf, (size_t)y.len * sizeof(float)), 0);
  rgpu_cudnn_cpu_batchnorm_fwd_training(&p);
  p.y = y_ref.t;
  rgpu_cudnn_ref_batchnorm_fwd_training(&p);
  check_close(&y_cpu, &y_ref, "batch-norm PER_ACTIVATION channels-last, through the fallback");
  tbuf *all[] = {&x, &y, &scale, &bias, &y_ref, &y_cpu};
  for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) tfree(all[k]);
}

typedef struct {
  rgpu_cudnn_cpu_batchnorm *p;
  tbuf *y, *g;
} bn_loss_ctx;

static double bn_loss(void *v) {
  bn_loss_ctx *b = v;
  rgpu_cudnn_ref_batchnorm_fwd_training(b->p);
  return dot(b->g, b->y);
}

/* The training forward pass (batch statistics) differentiated in x, scale
 * and bias. */
static void test_batchnorm_reference_gradients(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof bn_cases / sizeof bn_cases[0]; i++) {
    const bn_case *c = &bn_cases[i];
    int64_t ns = bn_stats(c);
    tbuf x = tnew(c->nb, c->dim, c->lx), y = tnew(c->nb, c->dim, c->ly);
    tbuf g = tnew(c->nb, c->dim, L_DENSE), dx = tnew(c->nb, c->dim, L_DENSE);
    tfill(&x, -2, 3);
    tfill(&g, -1, 1);
    tbuf scale = tvec(ns, 0.5, 1.5), bias = tvec(ns, -1, 1), ds = tvec(ns, 0, 1),
         db = tvec(ns, 0, 1);
    rgpu_cudnn_cpu_batchnorm f = {.x = x.t, .y = y.t, .mode = c->mode, .epsilon = 1e-4,
                                  .alpha = 1, .beta = 0, .scale = scale.t.base,
                                  .bias = bias.t.base};
    rgpu_cudnn_cpu_batchnorm b = {.x = x.t, .y = g.t, .dx = dx.t, .mode = c->mode,
                                  .epsilon = 1e-4, .alpha = 1, .beta = 0, .alpha_param = 1,
                                  .beta_param = 0, .scale = scale.t.base, .dscale = ds.t.base,
                                  .dbias = db.t.base};
    rgpu_cudnn_ref_batchnorm_bwd(&b);
    bn_loss_ctx ctx = {&f, &y, &g};
    char what[80];
    for (int k = 0; k < 5; k++) {
      int64_t e = (int64_t)uniform(0, (double)tcount(&x));
      snprintf(what, sizeof what, "batch-norm d/dx, case %zu", i);
      check_fd(bn_loss, &ctx, tnth(&x, e), *tnth(&dx, e), what);
      int64_t s = (int64_t)uniform(0, (double)ns);
      snprintf(what, sizeof what, "batch-norm d/dscale, case %zu", i);
      check_fd(bn_loss, &ctx, &scale.t.base[s], ds.t.base[s], what);
      snprintf(what, sizeof what, "batch-norm d/dbias, case %zu", i);
      check_fd(bn_loss, &ctx, &bias.t.base[s], db.t.base[s], what);
    }
    tbuf *all[] = {&x, &y, &g, &dx, &scale, &bias, &ds, &db};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) tfree(all[k]);
  }
}

/* ---- op tensor, add, reduce, set, scale ---------------------------------- */

static void test_op_tensor(void **state) {
  (void)state;
  static const int ops[] = {CUDNN_OP_TENSOR_ADD, CUDNN_OP_TENSOR_MUL, CUDNN_OP_TENSOR_MIN,
                            CUDNN_OP_TENSOR_MAX, CUDNN_OP_TENSOR_SQRT, CUDNN_OP_TENSOR_NOT};
  int full[4] = {2, 3, 4, 5}, chan[4] = {1, 3, 1, 1};
  struct {
    const int *adim, *bdim;
    layout la, lb, lc;
    double alpha1, alpha2, beta;
  } cases[] = {
      {full, full, L_DENSE, L_DENSE, L_DENSE, 1, 1, 0},
      {full, chan, L_CLAST, L_DENSE, L_GAPPED, 0.5, -2, 0.25},
      {chan, full, L_DENSE, L_NGAP, L_CLAST, 1.5, 0.5, 0}, /* a broadcast: swapped */
      {full, full, L_GAPPED, L_CLAST, L_NGAP, 2, 1, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
      int op = ops[o];
      int unary = op == CUDNN_OP_TENSOR_SQRT || op == CUDNN_OP_TENSOR_NOT;
      if (unary && cases[i].adim != full) continue;
      tbuf a = tnew(4, cases[i].adim, cases[i].la), b = tnew(4, cases[i].bdim, cases[i].lb);
      tbuf c = tnew(4, full, cases[i].lc);
      if (op == CUDNN_OP_TENSOR_SQRT) tfill(&a, 0.1, 2);
      else tfill(&a, -1, 1);
      tfill(&b, -1, 1);
      init_output(&c, cases[i].beta);
      tbuf c_ref = tclone(&c), c_dnnl = tclone(&c);
      rgpu_cudnn_ref_op_tensor(&a.t, &b.t, &c_ref.t, op, cases[i].alpha1, cases[i].alpha2,
                               cases[i].beta);
      assert_int_equal(rgpu_cudnn_dnnl_op_tensor(&a.t, &b.t, &c_dnnl.t, op, cases[i].alpha1,
                                                 cases[i].alpha2, cases[i].beta),
                       0);
      char what[64];
      snprintf(what, sizeof what, "op tensor, case %zu, op %d", i, op);
      check_close(&c_dnnl, &c_ref, what);
      tfree(&a);
      tfree(&b);
      tfree(&c);
      tfree(&c_ref);
      tfree(&c_dnnl);
    }
}

static void test_add_and_reduce(void **state) {
  (void)state;
  int full[4] = {2, 3, 4, 5}, chan[4] = {1, 3, 1, 1}, one[4] = {1, 1, 1, 1},
      rows[4] = {2, 1, 4, 1};
  /* add: a full (a blended copy) and a broadcast (beta != 0: a binary). */
  struct {
    const int *adim;
    layout la, lc;
    double alpha, beta;
  } adds[] = {
      {full, L_CLAST, L_DENSE, 0.5, 0},
      {full, L_DENSE, L_GAPPED, 2, 0.5},
      {chan, L_DENSE, L_CLAST, 1, 1},
      {rows, L_NGAP, L_DENSE, -1, 0.5},
  };
  for (size_t i = 0; i < sizeof adds / sizeof adds[0]; i++) {
    tbuf a = tnew(4, adds[i].adim, adds[i].la), c = tnew(4, full, adds[i].lc);
    tfill(&a, -1, 1);
    init_output(&c, adds[i].beta);
    tbuf c_ref = tclone(&c), c_dnnl = tclone(&c);
    rgpu_cudnn_ref_add(&a.t, &c_ref.t, adds[i].alpha, adds[i].beta);
    assert_int_equal(rgpu_cudnn_dnnl_add(&a.t, &c_dnnl.t, adds[i].alpha, adds[i].beta), 0);
    char what[32];
    snprintf(what, sizeof what, "add, case %zu", i);
    check_close(&c_dnnl, &c_ref, what);
    tfree(&a);
    tfree(&c);
    tfree(&c_ref);
    tfree(&c_dnnl);
  }
  /* A broadcast with beta 0: refused, and the public function's fallback
   * is right. */
  {
    tbuf a = tnew(4, chan, L_DENSE), c = tnew(4, full, L_DENSE);
    tfill(&a, -1, 1);
    tfill_nan(&c);
    tbuf c_ref = tclone(&c);
    assert_int_equal(rgpu_cudnn_dnnl_add(&a.t, &c.t, 3, 0), -1);
    rgpu_cudnn_cpu_add(&a.t, &c.t, 3, 0);
    rgpu_cudnn_ref_add(&a.t, &c_ref.t, 3, 0);
    check_close(&c, &c_ref, "add, broadcast with beta 0, through the fallback");
    tfree(&a);
    tfree(&c);
    tfree(&c_ref);
  }
  /* reduce_to: per channel (the bias gradient), to one value, to rows. */
  struct {
    const int *ddim;
    layout ly, ld;
    double alpha, beta;
  } reds[] = {
      {chan, L_DENSE, L_DENSE, 1, 0},
      {chan, L_CLAST, L_DENSE, 0.5, 1},
      {one, L_GAPPED, L_DENSE, 2, 0},
      {rows, L_NGAP, L_GAPPED, -1, 0.5},
  };
  for (size_t i = 0; i < sizeof reds / sizeof reds[0]; i++) {
    tbuf dy = tnew(4, full, reds[i].ly), db = tnew(4, reds[i].ddim, reds[i].ld);
    tfill(&dy, -1, 1);
    init_output(&db, reds[i].beta);
    tbuf db_ref = tclone(&db), db_dnnl = tclone(&db);
    rgpu_cudnn_ref_reduce_to(&dy.t, &db_ref.t, reds[i].alpha, reds[i].beta);
    assert_int_equal(rgpu_cudnn_dnnl_reduce_to(&dy.t, &db_dnnl.t, reds[i].alpha, reds[i].beta), 0);
    char what[32];
    snprintf(what, sizeof what, "reduce, case %zu", i);
    check_close(&db_dnnl, &db_ref, what);
    tfree(&dy);
    tfree(&db);
    tfree(&db_ref);
    tfree(&db_dnnl);
  }
}

/* Set writes every element (NaN before), scale multiplies; neither touches
 * the gaps. */
static void test_set_and_scale(void **state) {
  (void)state;
  int dim[4] = {2, 3, 4, 5};
  tbuf y = tnew(4, dim, L_GAPPED);
  tfill_nan(&y);
  rgpu_cudnn_cpu_set(&y.t, 2.5);
  int idx[4] = {0};
  do {
    assert_true(*tat(&y, idx) == 2.5f);
  } while (next_index(4, dim, idx));
  tfill(&y, -1, 1);
  tbuf want = tclone(&y);
  do {
    *tat(&want, idx) *= -3;
  } while (next_index(4, dim, idx));
  rgpu_cudnn_cpu_scale(&y.t, -3);
  check_close(&y, &want, "scale");
  tfree(&y);
  tfree(&want);
}

/* The public functions reach oneDNN and agree with the reference (one
 * shape each: the dispatch, not the maths). */
static void test_public_dispatch(void **state) {
  (void)state;
  conv_setup s = conv_make(&conv_cases[1]);
  tbuf y_ref = tclone(&s.y), y_cpu = tclone(&s.y);
  s.p.y = y_ref.t;
  rgpu_cudnn_ref_conv_fwd(&s.p);
  s.p.y = y_cpu.t;
  rgpu_cudnn_cpu_conv_fwd(&s.p);
  check_close(&y_cpu, &y_ref, "rgpu_cudnn_cpu_conv_fwd");
  tfree(&y_ref);
  tfree(&y_cpu);
  conv_free(&s);
}

/* In place, as cuDNN allows: softmax and batch-norm forward with y == x
 * (oneDNN's own in-place case), activation and softmax backward with
 * dx == dy (a temporary). */
static void test_in_place(void **state) {
  (void)state;
  int dim[4] = {3, 4, 3, 5};
  tbuf x = tnew(4, dim, L_NGAP), want = tnew(4, dim, L_NGAP);
  tfill(&x, -2, 2);
  tbuf xs = tclone(&x);
  rgpu_cudnn_ref_softmax(&x.t, &want.t, CUDNN_SOFTMAX_LOG, CUDNN_SOFTMAX_MODE_CHANNEL, 1, 0);
  assert_int_equal(rgpu_cudnn_dnnl_softmax(&xs.t, &xs.t, CUDNN_SOFTMAX_LOG,
                                           CUDNN_SOFTMAX_MODE_CHANNEL, 1, 0),
                   0);
  check_close(&xs, &want, "softmax in place");

  tbuf scale = tvec(4, 0.5, 1.5), bias = tvec(4, -1, 1), mean = tvec(4, -1, 1),
       var = tvec(4, 0.5, 1);
  rgpu_cudnn_cpu_batchnorm p = {.x = x.t, .y = want.t, .mode = CUDNN_BATCHNORM_SPATIAL,
                                .epsilon = 1e-5, .alpha = 1, .beta = 0, .scale = scale.t.base,
                                .bias = bias.t.base, .mean = mean.t.base,
                                .variance = var.t.base};
  rgpu_cudnn_ref_batchnorm_fwd_inference(&p);
  tfree(&xs);
  xs = tclone(&x);
  p.x = p.y = xs.t;
  assert_int_equal(rgpu_cudnn_dnnl_batchnorm_fwd_inference(&p), 0);
  check_close(&xs, &want, "batch-norm inference in place");

  /* Backward passes overwriting their dy. */
  tbuf y = tnew(4, dim, L_DENSE), dy = tnew(4, dim, L_NGAP);
  rgpu_cudnn_ref_activation(&x.t, &y.t, CUDNN_ACTIVATION_TANH, 0, 0, 1, 0);
  tfill(&dy, -1, 1);
  tbuf dyx = tclone(&dy);
  rgpu_cudnn_ref_activation_bwd(&y.t, &dy.t, &x.t, &want.t, CUDNN_ACTIVATION_TANH, 0, 0, 1, 0);
  assert_int_equal(rgpu_cudnn_dnnl_activation_bwd(&y.t, &dyx.t, &x.t, &dyx.t,
                                                  CUDNN_ACTIVATION_TANH, 0, 0, 1, 0),
                   0);
  check_close(&dyx, &want, "activation backward in place");
  rgpu_cudnn_ref_softmax(&x.t, &y.t, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE, 1, 0);
  tfree(&dyx);
  dyx = tclone(&dy);
  rgpu_cudnn_ref_softmax_bwd(&y.t, &dy.t, &want.t, CUDNN_SOFTMAX_ACCURATE,
                             CUDNN_SOFTMAX_MODE_INSTANCE, 0.5, 0);
  assert_int_equal(rgpu_cudnn_dnnl_softmax_bwd(&y.t, &dyx.t, &dyx.t, CUDNN_SOFTMAX_ACCURATE,
                                               CUDNN_SOFTMAX_MODE_INSTANCE, 0.5, 0),
                   0);
  check_close(&dyx, &want, "softmax backward in place");
  tbuf *all[] = {&x, &want, &xs, &scale, &bias, &mean, &var, &y, &dy, &dyx};
  for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) tfree(all[k]);
}

/* Host functions of several streams call in at once: one engine, one
 * stream, the first call from two threads together. */
typedef struct {
  conv_setup s;
  tbuf want, got;
  int failures;
} thread_job;

static void *thread_main(void *arg) {
  thread_job *t = arg;
  for (int i = 0; i < 4; i++) {
    t->s.p.y = t->got.t;
    if (rgpu_cudnn_dnnl_conv_fwd(&t->s.p) != 0) t->failures++;
    int idx[4] = {0};
    do {
      double w = *tat(&t->want, idx), g = *tat(&t->got, idx);
      if (!(fabs(g - w) <= 1e-3 * (1 + fabs(w)))) {
        t->failures++;
        break;
      }
    } while (next_index(4, t->want.t.dim, idx));
  }
  return NULL;
}

static void test_threads(void **state) {
  (void)state;
  thread_job jobs[3];
  pthread_t th[3];
  for (int i = 0; i < 3; i++) {
    jobs[i].s = conv_make(&conv_cases[i]);
    jobs[i].s.p.alpha = 1;
    jobs[i].s.p.beta = 0;
    jobs[i].want = tclone(&jobs[i].s.y);
    jobs[i].got = tclone(&jobs[i].s.y);
    jobs[i].s.p.y = jobs[i].want.t;
    rgpu_cudnn_ref_conv_fwd(&jobs[i].s.p);
    jobs[i].failures = 0;
  }
  for (int i = 0; i < 3; i++)
    assert_int_equal(pthread_create(&th[i], NULL, thread_main, &jobs[i]), 0);
  for (int i = 0; i < 3; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(jobs[i].failures, 0);
    tfree(&jobs[i].want);
    tfree(&jobs[i].got);
    conv_free(&jobs[i].s);
  }
}

/* ---- timing -------------------------------------------------------------- */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* N=8, C=64, 56x56, K=64, 3x3, padding 1: oneDNN (best of 5, after a
 * warm-up that builds the kernels) against the reference (once).  A
 * measurement, not a check: it runs only with RGPU_BENCH=1 (the reference
 * alone takes seconds, more on a loaded CI machine). */
static void test_conv_timing(void **state) {
  (void)state;
  if (!getenv("RGPU_BENCH")) skip();
  conv_case c = {8, 64, 56, 56, 64, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, 0, L_DENSE, L_DENSE, 1, 0};
  conv_setup s = conv_make(&c);
  tbuf y_ref = tclone(&s.y);
  assert_int_equal(rgpu_cudnn_dnnl_conv_fwd(&s.p), 0);
  double best = INFINITY;
  for (int i = 0; i < 5; i++) {
    double t0 = now_ms();
    assert_int_equal(rgpu_cudnn_dnnl_conv_fwd(&s.p), 0);
    double t = now_ms() - t0;
    if (t < best) best = t;
  }
  double t0 = now_ms();
  s.p.y = y_ref.t;
  rgpu_cudnn_ref_conv_fwd(&s.p);
  double ref = now_ms() - t0;
  check_close(&s.y, &y_ref, "timed convolution");
  double gflop = 2.0 * 8 * 64 * 56 * 56 * 64 * 9 / 1e9;
  printf("conv fwd N=8 C=64 H=W=56 K=64 3x3 pad 1: oneDNN %.1f ms (%.1f GFLOP/s), "
         "reference %.1f ms (%.2f GFLOP/s): %.0fx\n",
         best, gflop / (best / 1e3), ref, gflop / (ref / 1e3), ref / best);
  tfree(&y_ref);
  conv_free(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_threads), /* first: the engine's creation races */
      cmocka_unit_test(test_conv_fwd),
      cmocka_unit_test(test_conv_bwd_data),
      cmocka_unit_test(test_conv_bwd_filter),
      cmocka_unit_test(test_conv_reference_gradients),
      cmocka_unit_test(test_pooling),
      cmocka_unit_test(test_pooling_max_ties),
      cmocka_unit_test(test_pooling_padding_refusal),
      cmocka_unit_test(test_pooling_reference_gradients),
      cmocka_unit_test(test_activation),
      cmocka_unit_test(test_activation_reference_gradients),
      cmocka_unit_test(test_softmax),
      cmocka_unit_test(test_softmax_fallback),
      cmocka_unit_test(test_softmax_reference_gradients),
      cmocka_unit_test(test_batchnorm),
      cmocka_unit_test(test_batchnorm_fallback),
      cmocka_unit_test(test_batchnorm_reference_gradients),
      cmocka_unit_test(test_op_tensor),
      cmocka_unit_test(test_add_and_reduce),
      cmocka_unit_test(test_set_and_scale),
      cmocka_unit_test(test_public_dispatch),
      cmocka_unit_test(test_in_place),
      cmocka_unit_test(test_conv_timing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
