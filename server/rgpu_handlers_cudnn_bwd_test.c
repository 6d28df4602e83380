/* The backward, batch-norm, op-tensor and set/scale handlers
 * (server/rgpu_handlers_cudnn_bwd.c) in-process on softgpu, frames in and
 * out as in rgpu_handlers_cudnn_test.c.  Well-formed requests compute
 * what a host reference here does (backward data and filter of a grouped,
 * strided CUDNN_CONVOLUTION-mode convolution with a beta blend, the bias
 * gradient, ELU/tanh/swish backward, max and average pooling backward,
 * softmax and log-softmax backward, batch-norm training, backward and
 * inference, op-tensor with broadcast, set and scale, cross-channel LRN
 * forward and backward (against central differences), reductions (sums,
 * norms, extrema with their indices), dropout (masks, scaling, the
 * seed's reproducibility, the backward), the queries'
 * softgpu answers); hostile requests (tensors, parameters and workspaces
 * outside the session, shapes that do not agree, out-of-range modes,
 * phases and directions, missing parameters, other types, an unknown
 * stream) get a clear error and leave the worker serving, also 3000
 * randomly mutated ones (whatever passes the checks must stay inside the
 * session's memory: a miss would crash the test).  Skips when
 * softgpu is not part of the build. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>
#include <cudnn.h>

#include "rgpu_dispatch.h"
#include "rgpu_handlers_test_harness.h"
#include "rgpu_messages.h"
#include "rgpu_worker.h"

static char softgpu_lib[400];

static harness *harness_new(void) {
  if (access(softgpu_lib, R_OK)) {
    print_message("SKIP: %s not built\n", softgpu_lib);
    return NULL;
  }
  return harness_open(softgpu_lib, 12, 0);
}

static int reply_says(harness *t, const char *needle) {
  char m[1024];
  size_t n = t->h.length < sizeof m - 1 ? t->h.length : sizeof m - 1;
  memcpy(m, t->p, n);
  m[n] = 0;
  if (strstr(m, needle)) return 1;
  print_message("reply '%s' lacks '%s'\n", m, needle);
  return 0;
}

/* Deterministic values in [-1, 1). */
static void fill(float *v, int n, unsigned seed) {
  for (int i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    v[i] = (float)((seed >> 9) & 0xffff) / 32768.0f - 1.0f;
  }
}

static void near(const float *got, const double *want, int n, double tol) {
  for (int i = 0; i < n; i++)
    if (!(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i])))) {
      print_message("element %d: %.7f, expected %.7f\n", i, got[i], want[i]);
      fail();
    }
}

/* ---- convolution: x 1x4x5x5, w 4x2x3x3 (groups 2), stride 2, padding 1,
 * CUDNN_CONVOLUTION (the filter flipped): y 1x4x3x3 ------------------------ */

static const int32_t c_xd[4] = {1, 4, 5, 5}, c_xs[4] = {100, 25, 5, 1};
static const int32_t c_wd[4] = {4, 2, 3, 3};
static const int32_t c_yd[4] = {1, 4, 3, 3}, c_ys[4] = {36, 9, 3, 1};
static const int32_t c_pad[2] = {1, 1}, c_stride[2] = {2, 2}, c_dil[2] = {1, 1};
enum { X_OFF = 0, W_OFF = 512, Y_OFF = 1024, DX_OFF = 1536, DW_OFF = 2048, MEM = 4096 };

static rgpu_msg_cudnn_conv_bwd_req valid_conv_bwd(uint64_t mem, uint32_t direction) {
  rgpu_msg_cudnn_conv_bwd_req q = {
      .direction = direction, .alpha = 1, .beta = 0,
      .x_type = CUDNN_DATA_FLOAT, .x_dim = {c_xd, 4}, .x_stride = {c_xs, 4},
      .x = mem + (direction ? X_OFF : DX_OFF),
      .w_type = CUDNN_DATA_FLOAT, .w_format = CUDNN_TENSOR_NCHW, .w_dim = {c_wd, 4},
      .w = mem + (direction ? DW_OFF : W_OFF),
      .conv_pad = {c_pad, 2}, .conv_stride = {c_stride, 2}, .conv_dilation = {c_dil, 2},
      .conv_mode = CUDNN_CONVOLUTION, .conv_compute = CUDNN_DATA_FLOAT, .conv_groups = 2,
      .y_type = CUDNN_DATA_FLOAT, .y_dim = {c_yd, 4}, .y_stride = {c_ys, 4}, .y = mem + Y_OFF,
      .algo = 1};
  return q;
}

static uint32_t conv_bwd(harness *t, const rgpu_msg_cudnn_conv_bwd_req *q) {
  return HARNESS_SEND(t, RGPU_OP_CUDNN_CONV_BWD, cudnn_conv_bwd, q, NULL, 0);
}

static void test_conv_bwd_computes(void **state) {
  (void)state;
  harness *t = harness_new();
  if (!t) skip();
  harness_hello(t);
  uint64_t mem = harness_mem_alloc(t, MEM);
  float x[100], w[72], dy[36], dx0[100], dw0[72], dx[100], dw[72];
  fill(x, 100, 1);
  fill(w, 72, 2);
  fill(dy, 36, 3);
  fill(dx0, 100, 4);
  fill(dw0, 72, 5);
  harness_htod(t, mem + X_OFF, x, sizeof x);
  harness_htod(t, mem + W_OFF, w, sizeof w);
  harness_htod(t, mem + Y_OFF, dy, sizeof dy);
  harness_htod(t, mem + DX_OFF, dx0, sizeof dx0);
  harness_htod(t, mem + DW_OFF, dw0, sizeof dw0);
  /* dx = 2 bwd_data + 0.5 dx0, dw = 1.5 bwd_filter - dw0. */
  rgpu_msg_cudnn_conv_bwd_req q = valid_conv_bwd(mem, 0);
  q.alpha = 2, q.beta = 0.5;
  assert_int_equal(conv_bwd(t, &q), 0);
  q = valid_conv_bwd(mem, 1);
  q.alpha = 1.5, q.beta = -1;
  assert_int_equal(conv_bwd(t, &q), 0);
  harness_dtoh(t, mem + DX_OFF, dx, sizeof dx);
  harness_dtoh(t, mem + DW_OFF, dw, sizeof dw);
  /* The forward definition, scattered: y[k][oh][ow] sums
   * w[k][c][2-r][2-s] x[g*2+c][2oh-1+r][2ow-1+s]. */
  double rdx[100] = {0}, rdw[72] = {0};
  for (int k = 0; k < 4; k++)
    for (int oh = 0; oh < 3; oh++)
      for (int ow = 0; ow < 3; ow++)
        for (int c = 0; c < 2; c++)
          for (int r = 0; r < 3; r++)
            for (int s = 0; s < 3; s++) {
              int ih = oh * 2 - 1 + r, iw = ow * 2 - 1 + s, cx = (k / 2) * 2 + c;
              if (ih < 0 || ih >= 5 || iw < 0 || iw >= 5) continue;
              int wi = ((k * 2 + c) * 3 + (2 - r)) * 3 + (2 - s), xi = (cx * 5 + ih) * 5 + iw;
              double g = dy[(k * 3 + oh) * 3 + ow];
              rdx[xi] += w[wi] * g;
              rdw[wi] += x[xi] * g;
            }
  for (int i = 0; i < 100; i++) rdx[i] = 2 * rdx[i] + 0.5 * dx0[i];
  for (int i = 0; i < 72; i++) rdw[i] = 1.5 * rdw[i] - dw0[i];
  near(dx, rdx, 100, 1e-5);
  near(dw, rdw, 72, 1e-5);
  harness_free(t);
}

static void test_hostile_conv_bwd(void **state) {
  (void)state;
  harness *t = harness_new();
  if (!t) skip();
  harness_hello(t);
  uint64_t mem = harness_mem_alloc(t, MEM);
  static const int32_t bad_y[4] = {1, 4, 2, 3};
  const rgpu_array y_bad = {bad_y, 4};
  rgpu_msg_cudnn_conv_bwd_req q;
#define BAD(dir, mutation, status, needle)   \
  q = valid_conv_bwd(mem, dir);              \
  mutation;                                  \
  assert_int_equal(conv_bwd(t, &q), status); \
  assert_true(reply_says(t, needle))
  BAD(0, q.x = mem + 3900, CUDA_ERROR_INVALID_VALUE, "dx (400 bytes at");
  BAD(1, q.x = 0x1000, CUDA_ERROR_INVALID_VALUE, "x (400 bytes at");
  BAD(0, q.y = mem + 4000, CUDA_ERROR_INVALID_VALUE, "dy (144 bytes at");
  BAD(1, q.w = mem + 4000, CUDA_ERROR_INVALID_VALUE, "dw (288 bytes at");
  BAD(0, q.w = 0x2000, CUDA_ERROR_INVALID_VALUE, "w (288 bytes at");
  BAD(0, (q.workspace = mem + 4000, q.workspace_size = 200), CUDA_ERROR_INVALID_VALUE,
      "workspace");
  BAD(1, q.y_dim = y_bad, CUDA_ERROR_INVALID_VALUE, "not the output's");
  BAD(0, q.conv_groups = 3, CUDA_ERROR_INVALID_VALUE, "channels");
  BAD(0, q.direction = 2, CUDA_ERROR_INVALID_VALUE, "direction 2");
  BAD(1, q.algo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, CUDA_ERROR_INVALID_VALUE, "algorithm");
  BAD(0, (q.x_type = CUDNN_DATA_DOUBLE, q.w_type = CUDNN_DATA_DOUBLE, q.y_type = CUDNN_DATA_DOUBLE),
      CUDA_ERROR_NOT_SUPPORTED, "float tensors only");
  BAD(1, q.stream = 99, CUDA_ERROR_INVALID_HANDLE, "unknown stream");
#undef BAD
  q = valid_conv_bwd(mem, 1);
  assert_int_equal(conv_bwd(t, &q), 0);
  harness_free(t);
}

/* ---- bias, activation, pooling, softmax ---------------------------------------- */

static const int32_t e_d[4] = {2, 3, 2, 2}, e_s[4] = {12, 4, 2, 1};
static const int32_t b_d[4] = {1, 3, 1, 1}, b_s[4] = {3, 1, 1, 1};

static void test_elementwise_bwd(void **state) {
  (void)state;
  harness *t = harness_new();
  if (!t) skip();
  harness_hello(t);
  uint64_t mem = harness_mem_alloc(t, MEM);
  enum { Y = 0, DY = 128, X = 256, DX = 384, DB = 512 };
  float x[24], dy[24], y[24], dx[24], db[3];
  fill(x, 24, 7);
  fill(dy, 24, 8);
  harness_htod(t, mem + X, x, sizeof x);
  harness_htod(t, mem + DY, dy, sizeof dy);

  /* The bias gradient: dy summed over n, h, w. */
  rgpu_msg_cudnn_conv_bwd_bias_req bq = {
      .alpha = 1, .beta = 0,
      .dy_type = CUDNN_DATA_FLOAT, .dy_dim = {e_d, 4}, .dy_stride = {e_s, 4}, .dy = mem + DY,
      .db_type = CUDNN_DATA_FLOAT, .db_dim = {b_d, 4}, .db_stride = {b_s, 4}, .db = mem + DB};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_CONV_BWD_BIAS, cudnn_conv_bwd_bias, &bq, NULL, 0), 0);
  harness_dtoh(t, mem + DB, db, sizeof db);
  double rdb[3] = {0};
  for (int i = 0; i < 24; i++) rdb[i / 4 % 3] += dy[i];
  near(db, rdb, 3, 1e-6);
  bq.db_dim = (rgpu_array){e_s, 4};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_CONV_BWD_BIAS, cudnn_conv_bwd_bias, &bq, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "neither dy's nor 1"));

  /* Activations: ELU (from x), tanh (from y), swish (from x). */
  rgpu_msg_cudnn_activation_bwd_req aq = {
      .act_coef = 0.7, .act_swish_beta = 1.5, .alpha = 1, .beta = 0,
      .y_type = CUDNN_DATA_FLOAT, .y_dim = {e_d, 4}, .y_stride = {e_s, 4}, .y = mem + Y,
      .dy_type = CUDNN_DATA_FLOAT, .dy_dim = {e_d, 4}, .dy_stride = {e_s, 4}, .dy = mem + DY,
      .x_type = CUDNN_DATA_FLOAT, .x_dim = {e_d, 4}, .x_stride = {e_s, 4}, .x = mem + X,
      .dx_type = CUDNN_DATA_FLOAT, .dx_dim = {e_d, 4}, .dx_stride = {e_s, 4}, .dx = mem + DX};
  const int modes[3] = {CUDNN_ACTIVATION_ELU, CUDNN_ACTIVATION_TANH, CUDNN_ACTIVATION_SWISH};
  for (int m = 0; m < 3; m++) {
    for (int i = 0; i < 24; i++)
      y[i] = modes[m] == CUDNN_ACTIVATION_TANH ? tanhf(x[i]) : 0; /* ELU, swish: x only */
    harness_htod(t, mem + Y, y, sizeof y);
    aq.act_mode = (uint32_t)modes[m];
    assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_ACTIVATION_BWD, cudnn_activation_bwd, &aq, NULL, 0), 0);
    harness_dtoh(t, mem + DX, dx, sizeof dx);
    double want[24];
    for (int i = 0; i < 24; i++) {
      double v = x[i], s = 1 / (1 + exp(-1.5 * v));
      want[i] = modes[m] == CUDNN_ACTIVATION_ELU    ? (v > 0 ? dy[i] : dy[i] * 0.7 * exp(v))
                : modes[m] == CUDNN_ACTIVATION_TANH ? dy[i] * (1 - (double)y[i] * y[i])
                                                    : dy[i] * (s + 1.5 * v * s * (1 - s));
    }
    near(dx, want, 24, 1e-5);
  }
  aq.act_mode = 99;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_ACTIVATION_BWD, cudnn_activation_bwd, &aq, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  aq.act_mode = CUDNN_ACTIVATION_RELU;
  aq.dx_dim = (rgpu_array){b_d, 4};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_ACTIVATION_BWD, cudnn_activation_bwd, &aq, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "x and dx differ"));

  /* Softmax backward over the channels (accurate) and the instance (log). */
  rgpu_msg_cudnn_softmax_bwd_req sq = {
      .softmax_algo = CUDNN_SOFTMAX_ACCURATE, .softmax_mode = CUDNN_SOFTMAX_MODE_CHANNEL,
      .alpha = 1, .beta = 0,
      .y_type = CUDNN_DATA_FLOAT, .y_dim = {e_d, 4}, .y_stride = {e_s, 4}, .y = mem + Y,
      .dy_type = CUDNN_DATA_FLOAT, .dy_dim = {e_d, 4}, .dy_stride = {e_s, 4}, .dy = mem + DY,
      .dx_type = CUDNN_DATA_FLOAT, .dx_dim = {e_d, 4}, .dx_stride = {e_s, 4}, .dx = mem + DX};
  for (int i = 0; i < 24; i++) y[i] = 0.1f + 0.03f * (float)i; /* any y: the formula is linear */
  harness_htod(t, mem + Y, y, sizeof y);
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_SOFTMAX_BWD, cudnn_softmax_bwd, &sq, NULL, 0), 0);
  harness_dtoh(t, mem + DX, dx, sizeof dx);
  double want[24];
  for (int n = 0; n < 2; n++)
    for (int p = 0; p < 4; p++) {
      double sum = 0;
      for (int c = 0; c < 3; c++) sum += (double)dy[n * 12 + c * 4 + p] * y[n * 12 + c * 4 + p];
      for (int c = 0; c < 3; c++) {
        int i = n * 12 + c * 4 + p;
        want[i] = y[i] * (dy[i] - sum);
      }
    }
  near(dx, want, 24, 1e-5);
  sq.softmax_algo = CUDNN_SOFTMAX_LOG;
  sq.softmax_mode = CUDNN_SOFTMAX_MODE_INSTANCE;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_SOFTMAX_BWD, cudnn_softmax_bwd, &sq, NULL, 0), 0);
  harness_dtoh(t, mem + DX, dx, sizeof dx);
  for (int n = 0; n < 2; n++) {
    double sum = 0;
    for (int i = 0; i < 12; i++) sum += dy[n * 12 + i];
    for (int i = 0; i < 12; i++) want[n * 12 + i] = dy[n * 12 + i] - exp(y[n * 12 + i]) * sum;
  }
  near(dx, want, 24, 1e-5);
  sq.softmax_mode = 7;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_SOFTMAX_BWD, cudnn_softmax_bwd, &sq, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  sq.softmax_mode = CUDNN_SOFTMAX_MODE_CHANNEL;
  sq.dy = mem + MEM - 8;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_SOFTMAX_BWD, cudnn_softmax_bwd, &sq, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "dy (96 bytes at"));
  harness_free(t);
}

static void test_pooling_bwd(void **state) {
  (void)state;
  harness *t = harness_new();
  if (!t) skip();
  harness_hello(t);
  uint64_t mem = harness_mem_alloc(t, MEM);
  enum { X = 0, DY = 256, DX = 512, Y = 768 };
  /* x 1x1x3x3 of distinct values; 2x2 windows, stride 1: y 1x1x2x2. */
  static const int32_t xd[4] = {1, 1, 3, 3}, xs[4] = {9, 9, 3, 1};
  static const int32_t yd[4] = {1, 1, 2, 2}, ys[4] = {4, 4, 2, 1};
  static const int32_t win[2] = {2, 2}, nopad[2] = {0, 0}, one[2] = {1, 1};
  const float x[9] = {1, 5, 2, 7, 3, 9, 4, 8, 6}, dy[4] = {1, 2, 3, 4};
  float dx[16], y[16] = {0};
  harness_htod(t, mem + X, x, sizeof x);
  harness_htod(t, mem + DY, dy, sizeof dy);
  harness_htod(t, mem + Y, y, sizeof y);
  rgpu_msg_cudnn_pooling_bwd_req q = {
      .pool_mode = CUDNN_POOLING_MAX, .pool_window = {win, 2}, .pool_pad = {nopad, 2},
      .pool_stride = {one, 2}, .alpha = 1, .beta = 0,
      .y_type = CUDNN_DATA_FLOAT, .y_dim = {yd, 4}, .y_stride = {ys, 4}, .y = mem + Y,
      .dy_type = CUDNN_DATA_FLOAT, .dy_dim = {yd, 4}, .dy_stride = {ys, 4}, .dy = mem + DY,
      .x_type = CUDNN_DATA_FLOAT, .x_dim = {xd, 4}, .x_stride = {xs, 4}, .x = mem + X,
      .dx_type = CUDNN_DATA_FLOAT, .dx_dim = {xd, 4}, .dx_stride = {xs, 4}, .dx = mem + DX};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_POOLING_BWD, cudnn_pooling_bwd, &q, NULL, 0), 0);
  harness_dtoh(t, mem + DX, dx, 9 * sizeof(float));
  /* Window maxima: 7 (index 3), 9 (5), 8 (7), 9 (5). */
  const double want_max[9] = {0, 0, 0, 1, 0, 2 + 4, 0, 3, 0};
  near(dx, want_max, 9, 0);
  /* Average, padding 1 included in the count: y 1x1x4x4, every window
   * counts 4. */
  static const int32_t y4d[4] = {1, 1, 4, 4}, y4s[4] = {16, 16, 4, 1};
  float dy4[16];
  for (int i = 0; i < 16; i++) dy4[i] = (float)(i + 1);
  harness_htod(t, mem + DY, dy4, sizeof dy4);
  q.pool_mode = CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
  q.pool_pad = (rgpu_array){one, 2};
  q.y_dim = q.dy_dim = (rgpu_array){y4d, 4};
  q.y_stride = q.dy_stride = (rgpu_array){y4s, 4};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_POOLING_BWD, cudnn_pooling_bwd, &q, NULL, 0), 0);
  harness_dtoh(t, mem + DX, dx, 9 * sizeof(float));
  double want_avg[9] = {0};
  for (int oh = 0; oh < 4; oh++)
    for (int ow = 0; ow < 4; ow++)
      for (int r = 0; r < 2; r++)
        for (int s = 0; s < 2; s++) {
          int ih = oh - 1 + r, iw = ow - 1 + s;
          if (ih >= 0 && ih < 3 && iw >= 0 && iw < 3) want_avg[ih * 3 + iw] += dy4[oh * 4 + ow] / 4.0;
        }
  near(dx, want_avg, 9, 1e-6);
  /* Average without the padding, 3x3 windows, stride 2, padding 1: y
   * 1x1x2x2, windows overlapping in the middle row and column. */
  static const int32_t win3[2] = {3, 3}, two[2] = {2, 2};
  q.pool_mode = CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
  q.pool_window = (rgpu_array){win3, 2};
  q.pool_stride = (rgpu_array){two, 2};
  q.y_dim = q.dy_dim = (rgpu_array){yd, 4};
  q.y_stride = q.dy_stride = (rgpu_array){ys, 4};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_POOLING_BWD, cudnn_pooling_bwd, &q, NULL, 0), 0);
  harness_dtoh(t, mem + DX, dx, 9 * sizeof(float));
  double want_ex[9] = {0};
  for (int oh = 0; oh < 2; oh++)
    for (int ow = 0; ow < 2; ow++) {
      int count = 0;
      for (int pass = 0; pass < 2; pass++)
        for (int r = 0; r < 3; r++)
          for (int s2 = 0; s2 < 3; s2++) {
            int ih = oh * 2 - 1 + r, iw = ow * 2 - 1 + s2;
            if (ih < 0 || ih >= 3 || iw < 0 || iw >= 3) continue;
            if (pass == 0) count++;
            else want_ex[ih * 3 + iw] += dy4[oh * 2 + ow] / count;
          }
    }
  near(dx, want_ex, 9, 1e-6);
  q.pool_window = (rgpu_array){win, 2};
  q.pool_stride = (rgpu_array){one, 2};
  q.pool_mode = CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
  q.y_dim = q.dy_dim = (rgpu_array){y4d, 4};
  q.y_stride = q.dy_stride = (rgpu_array){y4s, 4};
  /* Hostile: y that is not the pooling's output, a 3-d pooling, x outside. */
  q.pool_pad = (rgpu_array){nopad, 2};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_POOLING_BWD, cudnn_pooling_bwd, &q, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "not the output's"));
  q.pool_pad = (rgpu_array){one, 2};
  q.pool_window = (rgpu_array){xd, 3};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_POOLING_BWD, cudnn_pooling_bwd, &q, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  q.pool_window = (rgpu_array){win, 2};
  q.x = 0x4000;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_POOLING_BWD, cudnn_pooling_bwd, &q, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "not inside a device allocation"));
  q.x = mem + X;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_POOLING_BWD, cudnn_pooling_bwd, &q, NULL, 0), 0);
  harness_free(t);
}

/* ---- batch normalization: x 2x3x2x2, spatial (per channel over 8) ------------- */

enum { BX = 0, BY = 128, BDX = 256, BDY = 384, SC = 512, BI = 544, MEAN = 576, VAR = 608,
       SMEAN = 640, SINV = 672, DSC = 704, DBI = 736 };

static rgpu_msg_cudnn_batchnorm_req valid_bn(uint64_t mem, uint32_t phase) {
  rgpu_msg_cudnn_batchnorm_req q = {
      .phase = phase, .mode = CUDNN_BATCHNORM_SPATIAL, .epsilon = 1e-3, .factor = 0.25,
      .alpha = 1, .beta = 0, .alpha_param = 1, .beta_param = 0,
      .x_type = CUDNN_DATA_FLOAT, .x_dim = {e_d, 4}, .x_stride = {e_s, 4}, .x = mem + BX,
      .y_type = CUDNN_DATA_FLOAT, .y_dim = {e_d, 4}, .y_stride = {e_s, 4},
      .y = mem + (phase == 2 ? BDY : BY),
      .p_type = CUDNN_DATA_FLOAT, .p_dim = {b_d, 4}, .p_stride = {b_s, 4},
      .scale = mem + SC, .bias = phase == 2 ? 0 : mem + BI,
      .mean = phase == 2 ? 0 : mem + MEAN, .variance = phase == 2 ? 0 : mem + VAR,
      .save_mean = phase ? mem + SMEAN : 0, .save_inv_std = phase ? mem + SINV : 0,
      .dscale = phase == 2 ? mem + DSC : 0, .dbias = phase == 2 ? mem + DBI : 0};
  if (phase == 2) {
    q.dx_type = CUDNN_DATA_FLOAT;
    q.dx_dim = (rgpu_array){e_d, 4};
    q.dx_stride = (rgpu_array){e_s, 4};
    q.dx = mem + BDX;
  }
  return q;
}

static uint32_t bn(harness *t, const rgpu_msg_cudnn_batchnorm_req *q) {
  return HARNESS_SEND(t, RGPU_OP_CUDNN_BATCHNORM, cudnn_batchnorm, q, NULL, 0);
}

static void test_batchnorm(void **state) {
  (void)state;
  harness *t = harness_new();
  if (!t) skip();
  harness_hello(t);
  uint64_t mem = harness_mem_alloc(t, MEM);
  float x[24], dy[24], y[24], dx[24], out[3];
  const float scale[3] = {1.5f, -0.5f, 2.0f}, bias[3] = {0.1f, 0.2f, -0.3f};
  const float mean0[3] = {0.5f, 0, -1}, var0[3] = {2, 1, 0.5f};
  fill(x, 24, 11);
  fill(dy, 24, 12);
  harness_htod(t, mem + BX, x, sizeof x);
  harness_htod(t, mem + BDY, dy, sizeof dy);
  harness_htod(t, mem + SC, scale, sizeof scale);
  harness_htod(t, mem + BI, bias, sizeof bias);
  harness_htod(t, mem + MEAN, mean0, sizeof mean0);
  harness_htod(t, mem + VAR, var0, sizeof var0);
  /* The reference statistics per channel (8 elements each). */
  double mu[3] = {0}, var[3] = {0};
  for (int i = 0; i < 24; i++) mu[i / 4 % 3] += x[i] / 8.0;
  for (int i = 0; i < 24; i++) var[i / 4 % 3] += (x[i] - mu[i / 4 % 3]) * (x[i] - mu[i / 4 % 3]) / 8.0;

  /* Inference first, with the given estimates. */
  rgpu_msg_cudnn_batchnorm_req q = valid_bn(mem, 0);
  assert_int_equal(bn(t, &q), 0);
  harness_dtoh(t, mem + BY, y, sizeof y);
  double want[24];
  for (int i = 0; i < 24; i++) {
    int c = i / 4 % 3;
    want[i] = (x[i] - mean0[c]) / sqrt(var0[c] + 1e-3) * scale[c] + bias[c];
  }
  near(y, want, 24, 1e-5);

  /* Training: y from the batch's statistics, the running averages moved
   * by a quarter (the variance unbiased), the saved statistics. */
  q = valid_bn(mem, 1);
  assert_int_equal(bn(t, &q), 0);
  harness_dtoh(t, mem + BY, y, sizeof y);
  for (int i = 0; i < 24; i++) {
    int c = i / 4 % 3;
    want[i] = (x[i] - mu[c]) / sqrt(var[c] + 1e-3) * scale[c] + bias[c];
  }
  near(y, want, 24, 1e-5);
  double wm[3], wv[3], ws[3];
  for (int c = 0; c < 3; c++) {
    wm[c] = 0.75 * mean0[c] + 0.25 * mu[c];
    wv[c] = 0.75 * var0[c] + 0.25 * var[c] * 8 / 7;
    ws[c] = 1 / sqrt(var[c] + 1e-3);
  }
  harness_dtoh(t, mem + MEAN, out, sizeof out);
  near(out, wm, 3, 1e-5);
  harness_dtoh(t, mem + VAR, out, sizeof out);
  near(out, wv, 3, 1e-5);
  harness_dtoh(t, mem + SINV, out, sizeof out);
  near(out, ws, 3, 1e-5);

  /* Backward from the saved statistics, and again recomputing them. */
  double dsc[3] = {0}, dbi[3] = {0}, wdx[24];
  for (int i = 0; i < 24; i++) {
    int c = i / 4 % 3;
    dbi[c] += dy[i];
    dsc[c] += dy[i] * (x[i] - mu[c]) * ws[c];
  }
  for (int i = 0; i < 24; i++) {
    int c = i / 4 % 3;
    double xhat = (x[i] - mu[c]) * ws[c];
    wdx[i] = scale[c] * ws[c] / 8 * (8 * dy[i] - dbi[c] - xhat * dsc[c]);
  }
  for (int saved = 1; saved >= 0; saved--) {
    q = valid_bn(mem, 2);
    if (!saved) q.save_mean = q.save_inv_std = 0;
    assert_int_equal(bn(t, &q), 0);
    harness_dtoh(t, mem + BDX, dx, sizeof dx);
    near(dx, wdx, 24, 1e-4);
    harness_dtoh(t, mem + DSC, out, sizeof out);
    near(out, dsc, 3, 1e-4);
    harness_dtoh(t, mem + DBI, out, sizeof out);
    near(out, dbi, 3, 1e-5);
  }

  /* The Ex forms' sizes: softgpu needs none. */
  rgpu_msg_cudnn_batchnorm_query_req sq = {
      .which = 1, .mode = CUDNN_BATCHNORM_SPATIAL,
      .x_type = CUDNN_DATA_FLOAT, .x_dim = {e_d, 4}, .x_stride = {e_s, 4},
      .p_type = CUDNN_DATA_FLOAT, .p_dim = {b_d, 4}, .p_stride = {b_s, 4}};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_BATCHNORM_QUERY, cudnn_batchnorm_query, &sq, NULL, 0), 0);
  rgpu_msg_cudnn_batchnorm_query_rep sr;
  assert_int_equal(rgpu_msg_cudnn_batchnorm_query_rep_decode(t->p, t->h.length, &sr), 0);
  assert_int_equal(sr.size, 0);
  sq.mode = CUDNN_BATCHNORM_PER_ACTIVATION; /* p is not that mode's shape */
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_BATCHNORM_QUERY, cudnn_batchnorm_query, &sq, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  sq.which = 2; /* the reserve size has no parameter descriptor */
  sq.p_dim = sq.p_stride = (rgpu_array){NULL, 0};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_BATCHNORM_QUERY, cudnn_batchnorm_query, &sq, NULL, 0), 0);
  sq.which = 3;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_BATCHNORM_QUERY, cudnn_batchnorm_query, &sq, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  harness_free(t);
}

static void test_hostile_batchnorm(void **state) {
  (void)state;
  harness *t = harness_new();
  if (!t) skip();
  harness_hello(t);
  uint64_t mem = harness_mem_alloc(t, MEM);
  static const int32_t per_act[4] = {1, 3, 2, 2};
  const rgpu_array p_per_act = {per_act, 4}, dx_small = {b_d, 4};
  rgpu_msg_cudnn_batchnorm_req q;
#define BAD(phase, mutation, status, needle) \
  q = valid_bn(mem, phase);                  \
  mutation;                                  \
  assert_int_equal(bn(t, &q), status);       \
  assert_true(reply_says(t, needle))
  BAD(0, q.phase = 3, CUDA_ERROR_INVALID_VALUE, "phase 3");
  BAD(1, q.mode = 9, CUDA_ERROR_INVALID_VALUE, "mode 9");
  BAD(1, q.epsilon = -1, CUDA_ERROR_INVALID_VALUE, "epsilon");
  BAD(0, q.mean = 0, CUDA_ERROR_INVALID_VALUE, "mean is missing");
  BAD(2, q.dbias = 0, CUDA_ERROR_INVALID_VALUE, "dbias is missing");
  BAD(1, q.save_inv_std = 0, CUDA_ERROR_INVALID_VALUE, "save_mean and save_inv_std go together");
  BAD(1, q.variance = 0, CUDA_ERROR_INVALID_VALUE, "mean and variance go together");
  BAD(1, q.scale = mem + MEM - 4, CUDA_ERROR_INVALID_VALUE, "scale (12 bytes at");
  BAD(2, q.dscale = 0x9000, CUDA_ERROR_INVALID_VALUE, "dscale (12 bytes at");
  BAD(2, q.bias = 0x9000, CUDA_ERROR_INVALID_VALUE, "bias (12 bytes at");
  BAD(2, q.dx = mem + MEM - 16, CUDA_ERROR_INVALID_VALUE, "dx (96 bytes at");
  BAD(2, q.dx_dim = dx_small, CUDA_ERROR_INVALID_VALUE, "x and dx differ");
  BAD(1, q.p_dim = p_per_act, CUDA_ERROR_INVALID_VALUE, "derived shape");
  BAD(1, (q.workspace = mem + 4000, q.workspace_size = 1000), CUDA_ERROR_INVALID_VALUE,
      "the workspace");
  BAD(1, (q.reserve = 0x1000, q.reserve_size = 8), CUDA_ERROR_INVALID_VALUE, "the reserve space");
  BAD(0, (q.x_type = q.y_type = CUDNN_DATA_DOUBLE, q.p_type = CUDNN_DATA_DOUBLE),
      CUDA_ERROR_NOT_SUPPORTED, "float tensors only");
  BAD(1, q.stream = 5, CUDA_ERROR_INVALID_HANDLE, "unknown stream");
#undef BAD
  q = valid_bn(mem, 1);
  assert_int_equal(bn(t, &q), 0);
  harness_free(t);
}

/* ---- op-tensor, set, scale, the convolution queries ------------------------------ */

static void test_op_tensor_set_scale(void **state) {
  (void)state;
  harness *t = harness_new();
  if (!t) skip();
  harness_hello(t);
  uint64_t mem = harness_mem_alloc(t, MEM);
  enum { A = 0, B = 128, C = 256 };
  float a[24], b[3] = {2, -1, 0.5f}, c0[24], c[24];
  fill(a, 24, 21);
  for (int i = 0; i < 24; i++) a[i] = fabsf(a[i]);
  fill(c0, 24, 22);
  harness_htod(t, mem + A, a, sizeof a);
  harness_htod(t, mem + B, b, sizeof b);
  harness_htod(t, mem + C, c0, sizeof c0);
  /* c = (2 a) * (0.5 b) + c, b broadcast over n, h, w. */
  rgpu_msg_cudnn_op_tensor_req q = {
      .op = CUDNN_OP_TENSOR_MUL, .op_compute = CUDNN_DATA_FLOAT, .alpha1 = 2, .alpha2 = 0.5,
      .beta = 1,
      .a_type = CUDNN_DATA_FLOAT, .a_dim = {e_d, 4}, .a_stride = {e_s, 4}, .a = mem + A,
      .b_type = CUDNN_DATA_FLOAT, .b_dim = {b_d, 4}, .b_stride = {b_s, 4}, .b = mem + B,
      .c_type = CUDNN_DATA_FLOAT, .c_dim = {e_d, 4}, .c_stride = {e_s, 4}, .c = mem + C};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_OP_TENSOR, cudnn_op_tensor, &q, NULL, 0), 0);
  harness_dtoh(t, mem + C, c, sizeof c);
  double want[24];
  for (int i = 0; i < 24; i++) want[i] = 2.0 * a[i] * 0.5 * b[i / 4 % 3] + c0[i];
  near(c, want, 24, 1e-6);
  /* SQRT reads A only: B travels without dimensions. */
  rgpu_msg_cudnn_op_tensor_req u = q;
  u.op = CUDNN_OP_TENSOR_SQRT;
  u.beta = 0;
  u.b_dim = u.b_stride = (rgpu_array){NULL, 0};
  u.b = 0;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_OP_TENSOR, cudnn_op_tensor, &u, NULL, 0), 0);
  harness_dtoh(t, mem + C, c, sizeof c);
  for (int i = 0; i < 24; i++) want[i] = sqrt(2.0 * a[i]);
  near(c, want, 24, 1e-6);
  /* Hostile: B neither C's shape nor broadcast, B outside, an unknown op. */
  q.b_dim = (rgpu_array){e_s, 4};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_OP_TENSOR, cudnn_op_tensor, &q, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "B's dimension 0 is neither C's nor 1"));
  q.b_dim = (rgpu_array){b_d, 4};
  q.b = mem + MEM - 4;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_OP_TENSOR, cudnn_op_tensor, &q, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "B (12 bytes at"));
  q.b = mem + B;
  q.op = 6;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_OP_TENSOR, cudnn_op_tensor, &q, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);

  /* Set 3.25 everywhere, then scale by -2: a strided view (every other
   * element of the last dimension) leaves the gaps alone. */
  static const int32_t vd[4] = {1, 2, 2, 2}, vs[4] = {16, 8, 4, 2};
  for (int i = 0; i < 24; i++) c0[i] = -7;
  harness_htod(t, mem + C, c0, sizeof c0);
  rgpu_msg_cudnn_set_tensor_req s = {.op = 0, .value = 3.25, .y_type = CUDNN_DATA_FLOAT,
                                     .y_dim = {vd, 4}, .y_stride = {vs, 4}, .y = mem + C};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_SET_TENSOR, cudnn_set_tensor, &s, NULL, 0), 0);
  s.op = 1;
  s.value = -2;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_SET_TENSOR, cudnn_set_tensor, &s, NULL, 0), 0);
  harness_dtoh(t, mem + C, c, sizeof c);
  for (int i = 0; i < 16; i++) assert_true(c[i] == (i % 2 ? -7.0f : -6.5f));
  s.op = 2;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_SET_TENSOR, cudnn_set_tensor, &s, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  s.op = 0;
  s.y = mem + MEM - 8;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_SET_TENSOR, cudnn_set_tensor, &s, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "not inside a device allocation"));
  s.y = mem + C;
  s.y_type = CUDNN_DATA_INT8;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_SET_TENSOR, cudnn_set_tensor, &s, NULL, 0),
                   CUDA_ERROR_NOT_SUPPORTED);
  harness_free(t);
}

static void test_conv_bwd_query(void **state) {
  (void)state;
  harness *t = harness_new();
  if (!t) skip();
  harness_hello(t);
  for (uint32_t dir = 0; dir < 2; dir++) {
    rgpu_msg_cudnn_conv_bwd_req c = valid_conv_bwd(0, dir);
    rgpu_msg_cudnn_conv_bwd_query_req q = {
        .direction = dir, .query = 1, .requested = 8,
        .x_type = c.x_type, .x_dim = c.x_dim, .x_stride = c.x_stride,
        .w_type = c.w_type, .w_format = c.w_format, .w_dim = c.w_dim,
        .conv_pad = c.conv_pad, .conv_stride = c.conv_stride, .conv_dilation = c.conv_dilation,
        .conv_mode = c.conv_mode, .conv_compute = c.conv_compute, .conv_groups = 2,
        .y_type = c.y_type, .y_dim = c.y_dim, .y_stride = c.y_stride};
    assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_CONV_BWD_QUERY, cudnn_conv_bwd_query, &q, NULL, 0), 0);
    rgpu_msg_cudnn_conv_bwd_query_rep r;
    assert_int_equal(rgpu_msg_cudnn_conv_bwd_query_rep_decode(t->p, t->h.length, &r), 0);
    assert_int_equal(r.algo.count, 1);
    assert_int_equal(rgpu_array_u32(&r.algo, 0), dir ? CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1
                                                      : CUDNN_CONVOLUTION_BWD_DATA_ALGO_1);
    assert_int_equal(rgpu_array_u64(&r.memory, 0), 0);
    q.query = 0;
    q.algo = 3;
    assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_CONV_BWD_QUERY, cudnn_conv_bwd_query, &q, NULL, 0), 0);
    assert_int_equal(rgpu_msg_cudnn_conv_bwd_query_rep_decode(t->p, t->h.length, &r), 0);
    assert_int_equal(rgpu_array_u32(&r.algo, 0), 3);
    q.requested = 0;
    q.query = 1;
    assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_CONV_BWD_QUERY, cudnn_conv_bwd_query, &q, NULL, 0),
                     CUDA_ERROR_INVALID_VALUE);
    q.requested = 1;
    q.direction = 5;
    assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_CONV_BWD_QUERY, cudnn_conv_bwd_query, &q, NULL, 0),
                     CUDA_ERROR_INVALID_VALUE);
    assert_true(reply_says(t, "direction 5"));
  }
  harness_free(t);
}

/* ---- cross-channel LRN (rgpu_handlers_cudnn_lrn.c) ---------------------------- */

/* The forward in double: y_c = x_c (k + alpha/n sum x_j^2)^-beta over
 * [c - (n-1)/2, c + n - 1 - (n-1)/2], per position of a 2x5x1x2 tensor. */
static void lrn_ref(const double *x, double *y, int n, double alpha, double beta, double k) {
  int lb = (n - 1) / 2, la = n - 1 - lb;
  for (int b = 0; b < 2; b++)
    for (int p = 0; p < 2; p++)
      for (int c = 0; c < 5; c++) {
        double sum = 0;
        for (int j = c - lb; j <= c + la; j++)
          if (j >= 0 && j < 5) sum += x[b * 10 + j * 2 + p] * x[b * 10 + j * 2 + p];
        y[b * 10 + c * 2 + p] = x[b * 10 + c * 2 + p] * pow(k + alpha / n * sum, -beta);
      }
}

static void test_lrn(void **state) {
  (void)state;
  harness *t = harness_new();
  if (!t) skip();
  harness_hello(t);
  uint64_t mem = harness_mem_alloc(t, MEM);
  enum { X = 0, Y = 128, DY = 256, DX = 384 };
  static const int32_t d[4] = {2, 5, 1, 2}, s[4] = {10, 2, 2, 1};
  float x[20], dy[20], y[20], dx[20];
  fill(x, 20, 31);
  fill(dy, 20, 32);
  harness_htod(t, mem + X, x, sizeof x);
  harness_htod(t, mem + DY, dy, sizeof dy);
  rgpu_msg_cudnn_lrn_req q = {
      .direction = 0, .lrn_n = 4, .lrn_alpha = 0.8, .lrn_beta = 0.75, .lrn_k = 1.5, .alpha = 1,
      .beta = 0,
      .x_type = CUDNN_DATA_FLOAT, .x_dim = {d, 4}, .x_stride = {s, 4}, .x = mem + X,
      .y_type = CUDNN_DATA_FLOAT, .y_dim = {d, 4}, .y_stride = {s, 4}, .y = mem + Y};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_LRN, cudnn_lrn, &q, NULL, 0), 0);
  harness_dtoh(t, mem + Y, y, sizeof y);
  double xd[20], want[20];
  for (int i = 0; i < 20; i++) xd[i] = x[i];
  lrn_ref(xd, want, 4, 0.8, 0.75, 1.5);
  near(y, want, 20, 1e-6);
  /* Backward against central differences of the reference forward:
   * dx_i = sum over o of dy_o dy_o/dx_i. */
  q.direction = 1;
  q.dy_type = q.dx_type = CUDNN_DATA_FLOAT;
  q.dy_dim = q.dx_dim = (rgpu_array){d, 4};
  q.dy_stride = q.dx_stride = (rgpu_array){s, 4};
  q.dy = mem + DY;
  q.dx = mem + DX;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_LRN, cudnn_lrn, &q, NULL, 0), 0);
  harness_dtoh(t, mem + DX, dx, sizeof dx);
  for (int i = 0; i < 20; i++) {
    double plus[20], minus[20], yp[20], ym[20], g = 0;
    memcpy(plus, xd, sizeof plus);
    memcpy(minus, xd, sizeof minus);
    plus[i] += 1e-6;
    minus[i] -= 1e-6;
    lrn_ref(plus, yp, 4, 0.8, 0.75, 1.5);
    lrn_ref(minus, ym, 4, 0.8, 0.75, 1.5);
    for (int o = 0; o < 20; o++) g += dy[o] * (yp[o] - ym[o]) / 2e-6;
    want[i] = g;
  }
  near(dx, want, 20, 1e-4);
  /* Hostile: n beyond cuDNN's limit, dx of another shape, dx outside. */
  q.lrn_n = 17;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_LRN, cudnn_lrn, &q, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "out of cuDNN's range"));
  q.lrn_n = 4;
  q.dx_dim = (rgpu_array){e_d, 4};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_LRN, cudnn_lrn, &q, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "x and dx differ"));
  q.dx_dim = (rgpu_array){d, 4};
  q.dx = mem + MEM - 40;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_LRN, cudnn_lrn, &q, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "dx (80 bytes at"));
  q.direction = 2;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_LRN, cudnn_lrn, &q, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  q.direction = 0;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_LRN, cudnn_lrn, &q, NULL, 0), 0);
  harness_free(t);
}

/* ---- cudnnReduceTensor (rgpu_handlers_cudnn_reduce.c) ----------------------------- */

static void test_reduce(void **state) {
  (void)state;
  harness *t = harness_new();
  if (!t) skip();
  harness_hello(t);
  uint64_t mem = harness_mem_alloc(t, MEM);
  enum { A = 0, C = 128, IDX = 256 };
  float a[24], c[12];
  uint32_t idx[12];
  fill(a, 24, 41);
  a[5] = 0; /* MUL_NO_ZEROS skips it */
  harness_htod(t, mem + A, a, sizeof a);
  /* Over n, h, w to 1x3x1x1 (ADD, AVG, NORM1, NORM2, MUL_NO_ZEROS, AMAX),
   * c = 2 r - c0 with c0 = 1. */
  static const int32_t cd[4] = {1, 3, 1, 1}, cs[4] = {3, 1, 1, 1};
  const uint32_t ops[6] = {CUDNN_REDUCE_TENSOR_ADD, CUDNN_REDUCE_TENSOR_AVG,
                           CUDNN_REDUCE_TENSOR_NORM1, CUDNN_REDUCE_TENSOR_NORM2,
                           CUDNN_REDUCE_TENSOR_MUL_NO_ZEROS, CUDNN_REDUCE_TENSOR_AMAX};
  for (int o = 0; o < 6; o++) {
    const float ones[3] = {1, 1, 1};
    harness_htod(t, mem + C, ones, sizeof ones);
    rgpu_msg_cudnn_reduce_req q = {
        .red_op = ops[o], .red_compute = CUDNN_DATA_FLOAT, .alpha = 2, .beta = -1,
        .a_type = CUDNN_DATA_FLOAT, .a_dim = {e_d, 4}, .a_stride = {e_s, 4}, .a = mem + A,
        .c_type = CUDNN_DATA_FLOAT, .c_dim = {cd, 4}, .c_stride = {cs, 4}, .c = mem + C};
    assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_REDUCE, cudnn_reduce, &q, NULL, 0), 0);
    harness_dtoh(t, mem + C, c, 3 * sizeof(float));
    double want[3];
    for (int ch = 0; ch < 3; ch++) {
      double acc = ops[o] == CUDNN_REDUCE_TENSOR_MUL_NO_ZEROS ? 1 : 0;
      for (int i = 0; i < 24; i++) {
        if (i / 4 % 3 != ch) continue;
        double v = a[i];
        switch (ops[o]) {
          case CUDNN_REDUCE_TENSOR_NORM1: acc += fabs(v); break;
          case CUDNN_REDUCE_TENSOR_NORM2: acc += v * v; break;
          case CUDNN_REDUCE_TENSOR_MUL_NO_ZEROS: acc *= v != 0 ? v : 1; break;
          case CUDNN_REDUCE_TENSOR_AMAX: acc = fabs(v) > acc ? fabs(v) : acc; break;
          default: acc += v; break;
        }
      }
      if (ops[o] == CUDNN_REDUCE_TENSOR_AVG) acc /= 8;
      if (ops[o] == CUDNN_REDUCE_TENSOR_NORM2) acc = sqrt(acc);
      want[ch] = 2 * acc - 1;
    }
    near(c, want, 3, 1e-6);
  }
  /* The maximum over the channels (2x1x2x2) with its index, and the
   * minimum over everything but n (2x1x1x1). */
  static const int32_t md[4] = {2, 1, 2, 2}, ms[4] = {4, 4, 2, 1};
  rgpu_msg_cudnn_reduce_req q = {
      .red_op = CUDNN_REDUCE_TENSOR_MAX, .red_compute = CUDNN_DATA_FLOAT,
      .red_indices = CUDNN_REDUCE_TENSOR_FLATTENED_INDICES, .alpha = 1, .beta = 0,
      .a_type = CUDNN_DATA_FLOAT, .a_dim = {e_d, 4}, .a_stride = {e_s, 4}, .a = mem + A,
      .c_type = CUDNN_DATA_FLOAT, .c_dim = {md, 4}, .c_stride = {ms, 4}, .c = mem + C,
      .indices = mem + IDX, .indices_size = 32};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_REDUCE, cudnn_reduce, &q, NULL, 0), 0);
  harness_dtoh(t, mem + C, c, 8 * sizeof(float));
  harness_dtoh(t, mem + IDX, idx, 8 * sizeof(uint32_t));
  for (int n = 0; n < 2; n++)
    for (int p = 0; p < 4; p++) {
      int best = 0;
      for (int ch = 1; ch < 3; ch++)
        if (a[n * 12 + ch * 4 + p] > a[n * 12 + best * 4 + p]) best = ch;
      assert_true(c[n * 4 + p] == a[n * 12 + best * 4 + p]);
      assert_int_equal(idx[n * 4 + p], best);
    }
  static const int32_t nd[4] = {2, 1, 1, 1}, ns[4] = {1, 1, 1, 1};
  q.red_op = CUDNN_REDUCE_TENSOR_MIN;
  q.c_dim = (rgpu_array){nd, 4};
  q.c_stride = (rgpu_array){ns, 4};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_REDUCE, cudnn_reduce, &q, NULL, 0), 0);
  harness_dtoh(t, mem + C, c, 2 * sizeof(float));
  harness_dtoh(t, mem + IDX, idx, 2 * sizeof(uint32_t));
  for (int n = 0; n < 2; n++) {
    int best = 0;
    for (int i = 1; i < 12; i++)
      if (a[n * 12 + i] < a[n * 12 + best]) best = i;
    assert_true(c[n] == a[n * 12 + best]);
    assert_int_equal(idx[n], best);
  }
  /* Hostile: indices too small or outside, C not a reduction of A, an
   * unknown op. */
  q.indices_size = 4;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_REDUCE, cudnn_reduce, &q, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "the indices need 8 bytes, 4 given"));
  q.indices_size = 8;
  q.indices = 0x7000;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_REDUCE, cudnn_reduce, &q, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "the indices (8 bytes at"));
  q.indices = mem + IDX;
  q.c_dim = (rgpu_array){b_s, 4};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_REDUCE, cudnn_reduce, &q, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "C's dimension 0 is neither A's nor 1"));
  q.c_dim = (rgpu_array){nd, 4};
  q.red_op = 9;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_REDUCE, cudnn_reduce, &q, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  /* softgpu's sizes: a u32 per element of C for indices, no workspace. */
  rgpu_msg_cudnn_reduce_query_req sq = {
      .which = 0, .red_op = CUDNN_REDUCE_TENSOR_MAX, .red_compute = CUDNN_DATA_FLOAT,
      .red_indices = CUDNN_REDUCE_TENSOR_FLATTENED_INDICES,
      .a_type = CUDNN_DATA_FLOAT, .a_dim = {e_d, 4}, .a_stride = {e_s, 4},
      .c_type = CUDNN_DATA_FLOAT, .c_dim = {md, 4}, .c_stride = {ms, 4}};
  rgpu_msg_cudnn_reduce_query_rep sr;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_REDUCE_QUERY, cudnn_reduce_query, &sq, NULL, 0), 0);
  assert_int_equal(rgpu_msg_cudnn_reduce_query_rep_decode(t->p, t->h.length, &sr), 0);
  assert_int_equal(sr.size, 32);
  sq.which = 1;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_REDUCE_QUERY, cudnn_reduce_query, &sq, NULL, 0), 0);
  assert_int_equal(rgpu_msg_cudnn_reduce_query_rep_decode(t->p, t->h.length, &sr), 0);
  assert_int_equal(sr.size, 0);
  sq.which = 2;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_REDUCE_QUERY, cudnn_reduce_query, &sq, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  harness_free(t);
}

/* ---- dropout (rgpu_handlers_cudnn_dropout.c) --------------------------------------- */

static void test_dropout(void **state) {
  (void)state;
  harness *t = harness_new();
  if (!t) skip();
  harness_hello(t);
  uint64_t mem = harness_mem_alloc(t, 16384);
  enum { STATES = 0, X = 1024, Y = 5120, DX = 9216, RES = 13312, N = 1024 };
  static const int32_t d[4] = {1, 1, 32, 32}, s[4] = {1024, 1024, 32, 1};
  static float x[N], y[N], y1[N], dx[N];
  uint8_t mask[N], mask1[N];
  fill(x, N, 51);
  harness_htod(t, mem + X, x, sizeof x);
  rgpu_msg_cudnn_dropout_init_req in = {.dropout = 0.25f, .states = mem + STATES,
                                        .states_size = 16, .seed = 7};
  rgpu_msg_cudnn_dropout_req q = {
      .direction = 0, .dropout = 0.25f, .states = mem + STATES, .states_size = 16, .seed = 7,
      .x_type = CUDNN_DATA_FLOAT, .x_dim = {d, 4}, .x_stride = {s, 4}, .x = mem + X,
      .y_type = CUDNN_DATA_FLOAT, .y_dim = {d, 4}, .y_stride = {s, 4}, .y = mem + Y,
      .reserve = mem + RES, .reserve_size = N};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_DROPOUT_INIT, cudnn_dropout_init, &in, NULL, 0), 0);
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_DROPOUT, cudnn_dropout, &q, NULL, 0), 0);
  harness_dtoh(t, mem + Y, y1, sizeof y1);
  harness_dtoh(t, mem + RES, mask1, sizeof mask1);
  /* Kept elements scaled by 1/(1-p), dropped ones 0, about a quarter
   * dropped. */
  int dropped = 0;
  for (int i = 0; i < N; i++) {
    assert_true(mask1[i] <= 1);
    if (mask1[i]) assert_float_equal(y1[i], x[i] / 0.75f, 1e-6);
    else assert_true(y1[i] == 0);
    dropped += !mask1[i];
  }
  assert_true(dropped > 180 && dropped < 330);
  /* The next call draws a new mask; the backward follows the last one. */
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_DROPOUT, cudnn_dropout, &q, NULL, 0), 0);
  harness_dtoh(t, mem + RES, mask, sizeof mask);
  int differ = 0;
  for (int i = 0; i < N; i++) differ += mask[i] != mask1[i];
  assert_true(differ > 100);
  rgpu_msg_cudnn_dropout_req b = q;
  b.direction = 1;
  b.y = mem + DX; /* dy is x */
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_DROPOUT, cudnn_dropout, &b, NULL, 0), 0);
  harness_dtoh(t, mem + DX, dx, sizeof dx);
  for (int i = 0; i < N; i++) assert_float_equal(dx[i], (mask[i] ? x[i] / 0.75 : 0.0), 1e-6);
  /* The same seed again: the first mask again. */
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_DROPOUT_INIT, cudnn_dropout_init, &in, NULL, 0), 0);
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_DROPOUT, cudnn_dropout, &q, NULL, 0), 0);
  harness_dtoh(t, mem + Y, y, sizeof y);
  assert_memory_equal(y, y1, sizeof y);
  /* softgpu's sizes. */
  rgpu_msg_cudnn_dropout_query_req sq = {.which = 0};
  rgpu_msg_cudnn_dropout_query_rep sr;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_DROPOUT_QUERY, cudnn_dropout_query, &sq, NULL, 0), 0);
  assert_int_equal(rgpu_msg_cudnn_dropout_query_rep_decode(t->p, t->h.length, &sr), 0);
  assert_int_equal(sr.size, 16);
  sq = (rgpu_msg_cudnn_dropout_query_req){.which = 1, .x_type = CUDNN_DATA_FLOAT,
                                          .x_dim = {d, 4}, .x_stride = {s, 4}};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_DROPOUT_QUERY, cudnn_dropout_query, &sq, NULL, 0), 0);
  assert_int_equal(rgpu_msg_cudnn_dropout_query_rep_decode(t->p, t->h.length, &sr), 0);
  assert_int_equal(sr.size, N);
  /* Hostile: short states, a short or foreign reserve space, dropout out
   * of range, states outside the session. */
  in.states_size = 8;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_DROPOUT_INIT, cudnn_dropout_init, &in, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "the states need 16"));
  in.states_size = 16;
  in.states = 0x3000;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_DROPOUT_INIT, cudnn_dropout_init, &in, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "the states (16 bytes at"));
  q.reserve_size = 100;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_DROPOUT, cudnn_dropout, &q, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "the reserve space needs 1024 bytes, 100 given"));
  q.reserve_size = N;
  q.reserve = mem + 16000;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_DROPOUT, cudnn_dropout, &q, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "the reserve space (1024 bytes at"));
  q.reserve = mem + RES;
  q.dropout = 1.5f;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_DROPOUT, cudnn_dropout, &q, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "outside [0, 1]"));
  q.dropout = 0.25f;
  q.y_dim = (rgpu_array){e_d, 4};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_DROPOUT, cudnn_dropout, &q, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "x and y differ"));
  q.y_dim = (rgpu_array){d, 4};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_DROPOUT, cudnn_dropout, &q, NULL, 0), 0);
  harness_free(t);
}

/* ---- mutated requests: whatever passes the checks stays inside the
 * session's memory; the worker answers every one and serves on ------------ */

static unsigned g_rand = 99;
static unsigned rnd(unsigned n) {
  g_rand = g_rand * 1103515245u + 12345u;
  return (g_rand >> 8) % n;
}

/* Overwrites an array with a random count (0..8) of values a hostile
 * client might send. */
static void mutate_array(rgpu_array *a, int32_t *store) {
  static const int32_t pool[] = {-1, 0, 1, 2, 3, 4, 5, 9, 64, 1 << 20, INT32_MAX, INT32_MIN};
  uint32_t n = rnd(9);
  for (uint32_t i = 0; i < n; i++) store[i] = pool[rnd(sizeof pool / sizeof pool[0])];
  *a = (rgpu_array){store, n};
}

static uint64_t mutate_ptr(uint64_t mem) {
  static const uint64_t offs[] = {0, 4, 512, 1024, 2048, 4000, 4092, 8192};
  switch (rnd(4)) {
    case 0: return 0;
    case 1: return 0x1000 + rnd(1 << 16);
    default: return mem + offs[rnd(sizeof offs / sizeof offs[0])];
  }
}

static void test_mutated_requests(void **state) {
  (void)state;
  harness *t = harness_new();
  if (!t) skip();
  harness_hello(t);
  uint64_t mem = harness_mem_alloc(t, MEM);
  int32_t st[6][8];
  int counts[2] = {0, 0}; /* refused, computed */
  for (int round = 0; round < 3000; round++) {
    unsigned which = rnd(7), field = rnd(8);
    switch (which) {
      case 0: {
        rgpu_msg_cudnn_conv_bwd_req q = valid_conv_bwd(mem, rnd(2));
        rgpu_array *arr[] = {&q.x_dim, &q.x_stride, &q.w_dim, &q.conv_pad, &q.conv_stride,
                             &q.conv_dilation, &q.y_dim, &q.y_stride};
        mutate_array(arr[field], st[0]);
        if (rnd(2)) mutate_array(arr[rnd(8)], st[1]);
        if (rnd(3) == 0) q.x = mutate_ptr(mem);
        if (rnd(3) == 0) q.w = mutate_ptr(mem);
        if (rnd(4) == 0) q.conv_groups = (int32_t)rnd(5) - 1;
        counts[conv_bwd(t, &q) == 0]++;
        break;
      }
      case 1: {
        rgpu_msg_cudnn_batchnorm_req q = valid_bn(mem, rnd(3));
        rgpu_array *arr[] = {&q.x_dim, &q.x_stride, &q.y_dim, &q.y_stride,
                             &q.dx_dim, &q.dx_stride, &q.p_dim, &q.p_stride};
        mutate_array(arr[field], st[0]);
        uint64_t *ptrs[] = {&q.scale, &q.bias, &q.mean, &q.variance, &q.save_mean,
                            &q.save_inv_std, &q.dscale, &q.dbias, &q.x, &q.y, &q.dx};
        if (rnd(2)) *ptrs[rnd(11)] = mutate_ptr(mem);
        if (rnd(4) == 0) q.mode = rnd(4);
        counts[bn(t, &q) == 0]++;
        break;
      }
      case 2: {
        static const int32_t win[2] = {2, 2}, pad[2] = {0, 0}, str[2] = {2, 2};
        static const int32_t xd[4] = {1, 2, 4, 4}, xs[4] = {32, 16, 4, 1};
        static const int32_t yd[4] = {1, 2, 2, 2}, ys[4] = {8, 4, 2, 1};
        rgpu_msg_cudnn_pooling_bwd_req q = {
            .pool_mode = rnd(5), .pool_window = {win, 2}, .pool_pad = {pad, 2},
            .pool_stride = {str, 2}, .alpha = 1,
            .y_type = CUDNN_DATA_FLOAT, .y_dim = {yd, 4}, .y_stride = {ys, 4}, .y = mem,
            .dy_type = CUDNN_DATA_FLOAT, .dy_dim = {yd, 4}, .dy_stride = {ys, 4}, .dy = mem + 64,
            .x_type = CUDNN_DATA_FLOAT, .x_dim = {xd, 4}, .x_stride = {xs, 4}, .x = mem + 512,
            .dx_type = CUDNN_DATA_FLOAT, .dx_dim = {xd, 4}, .dx_stride = {xs, 4}, .dx = mem + 1024};
        rgpu_array *arr[] = {&q.pool_window, &q.pool_pad, &q.pool_stride, &q.y_dim,
                             &q.dy_stride, &q.x_dim, &q.dx_dim, &q.x_stride};
        mutate_array(arr[field], st[0]);
        if (rnd(3) == 0) q.dx = mutate_ptr(mem);
        counts[HARNESS_SEND(t, RGPU_OP_CUDNN_POOLING_BWD, cudnn_pooling_bwd, &q, NULL, 0) == 0]++;
        break;
      }
      case 4: {
        static const int32_t cd[4] = {1, 3, 1, 1}, cs[4] = {3, 1, 1, 1};
        rgpu_msg_cudnn_reduce_req q = {
            .red_op = rnd(10), .red_compute = CUDNN_DATA_FLOAT, .red_indices = rnd(3),
            .alpha = 1,
            .a_type = CUDNN_DATA_FLOAT, .a_dim = {e_d, 4}, .a_stride = {e_s, 4}, .a = mem,
            .c_type = CUDNN_DATA_FLOAT, .c_dim = {cd, 4}, .c_stride = {cs, 4}, .c = mem + 256,
            .indices = mutate_ptr(mem), .indices_size = rnd(64)};
        rgpu_array *arr[] = {&q.a_dim, &q.a_stride, &q.c_dim, &q.c_stride,
                             &q.a_dim, &q.c_dim, &q.a_stride, &q.c_stride};
        mutate_array(arr[field], st[0]);
        if (rnd(3) == 0) q.c = mutate_ptr(mem);
        counts[HARNESS_SEND(t, RGPU_OP_CUDNN_REDUCE, cudnn_reduce, &q, NULL, 0) == 0]++;
        break;
      }
      case 5: {
        static const int32_t d[4] = {2, 5, 1, 2}, s[4] = {10, 2, 2, 1};
        rgpu_msg_cudnn_lrn_req q = {
            .direction = rnd(3), .lrn_n = rnd(18), .lrn_alpha = 0.5, .lrn_beta = 0.75,
            .lrn_k = 1, .alpha = 1,
            .x_type = CUDNN_DATA_FLOAT, .x_dim = {d, 4}, .x_stride = {s, 4}, .x = mem,
            .y_type = CUDNN_DATA_FLOAT, .y_dim = {d, 4}, .y_stride = {s, 4}, .y = mem + 128,
            .dy_type = CUDNN_DATA_FLOAT, .dy_dim = {d, 4}, .dy_stride = {s, 4}, .dy = mem + 256,
            .dx_type = CUDNN_DATA_FLOAT, .dx_dim = {d, 4}, .dx_stride = {s, 4}, .dx = mem + 384};
        rgpu_array *arr[] = {&q.x_dim, &q.x_stride, &q.y_dim, &q.y_stride,
                             &q.dy_dim, &q.dy_stride, &q.dx_dim, &q.dx_stride};
        mutate_array(arr[field], st[0]);
        if (rnd(3) == 0) q.dx = mutate_ptr(mem);
        counts[HARNESS_SEND(t, RGPU_OP_CUDNN_LRN, cudnn_lrn, &q, NULL, 0) == 0]++;
        break;
      }
      case 6: {
        static const int32_t d[4] = {1, 1, 16, 16}, s[4] = {256, 256, 16, 1};
        rgpu_msg_cudnn_dropout_req q = {
            .direction = rnd(3), .dropout = (float)rnd(5) * 0.3f, .states = mutate_ptr(mem),
            .states_size = rnd(40), .seed = rnd(100),
            .x_type = CUDNN_DATA_FLOAT, .x_dim = {d, 4}, .x_stride = {s, 4}, .x = mem,
            .y_type = CUDNN_DATA_FLOAT, .y_dim = {d, 4}, .y_stride = {s, 4}, .y = mem + 1024,
            .reserve = mutate_ptr(mem), .reserve_size = rnd(600)};
        rgpu_array *arr[] = {&q.x_dim, &q.x_stride, &q.y_dim, &q.y_stride,
                             &q.x_dim, &q.y_dim, &q.x_stride, &q.y_stride};
        if (rnd(2)) mutate_array(arr[field], st[0]);
        if (rnd(4) == 0) {
          rgpu_msg_cudnn_dropout_init_req in = {.dropout = q.dropout, .states = q.states,
                                                .states_size = q.states_size, .seed = q.seed};
          counts[HARNESS_SEND(t, RGPU_OP_CUDNN_DROPOUT_INIT, cudnn_dropout_init, &in, NULL, 0) == 0]++;
        } else {
          counts[HARNESS_SEND(t, RGPU_OP_CUDNN_DROPOUT, cudnn_dropout, &q, NULL, 0) == 0]++;
        }
        break;
      }
      default: {
        rgpu_msg_cudnn_op_tensor_req q = {
            .op = rnd(7), .op_compute = CUDNN_DATA_FLOAT, .alpha1 = 1, .alpha2 = 1,
            .a_type = CUDNN_DATA_FLOAT, .a_dim = {e_d, 4}, .a_stride = {e_s, 4}, .a = mem,
            .b_type = CUDNN_DATA_FLOAT, .b_dim = {b_d, 4}, .b_stride = {b_s, 4}, .b = mem + 128,
            .c_type = CUDNN_DATA_FLOAT, .c_dim = {e_d, 4}, .c_stride = {e_s, 4}, .c = mem + 256};
        rgpu_array *arr[] = {&q.a_dim, &q.a_stride, &q.b_dim, &q.b_stride,
                             &q.c_dim, &q.c_stride, &q.a_dim, &q.c_dim};
        mutate_array(arr[field], st[0]);
        if (rnd(3) == 0) q.c = mutate_ptr(mem);
        counts[HARNESS_SEND(t, RGPU_OP_CUDNN_OP_TENSOR, cudnn_op_tensor, &q, NULL, 0) == 0]++;
        break;
      }
    }
  }
  /* Both outcomes were reached. */
  print_message("mutated requests: %d refused, %d computed\n", counts[0], counts[1]);
  assert_true(counts[0] > 1000 && counts[1] > 100);
  /* Still serving: a valid request computes. */
  rgpu_msg_cudnn_conv_bwd_req q = valid_conv_bwd(mem, 1);
  assert_int_equal(conv_bwd(t, &q), 0);
  float probe[4];
  harness_dtoh(t, mem, probe, sizeof probe);
  harness_free(t);
}

int main(void) {
  char self[360];
  harness_exe_dir(self, sizeof self);
  snprintf(softgpu_lib, sizeof softgpu_lib, "%s/../lib/libsoftgpu.so", self);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv_bwd_computes),  cmocka_unit_test(test_hostile_conv_bwd),
      cmocka_unit_test(test_elementwise_bwd),    cmocka_unit_test(test_pooling_bwd),
      cmocka_unit_test(test_batchnorm),          cmocka_unit_test(test_hostile_batchnorm),
      cmocka_unit_test(test_op_tensor_set_scale), cmocka_unit_test(test_conv_bwd_query),
      cmocka_unit_test(test_lrn),                cmocka_unit_test(test_reduce),
      cmocka_unit_test(test_dropout),
      cmocka_unit_test(test_mutated_requests),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
