/* The cuDNN handlers (server/rgpu_handlers_cudnn.c) in-process on softgpu:
 * frames in, frames out, as in rgpu_handlers_cublaslt_test.c.  Well-formed
 * requests compute what a host reference does (a convolution in
 * CUDNN_CONVOLUTION mode with stride, log-softmax, average pooling that
 * excludes the padding, ELU, a broadcast add); hostile requests (tensors
 * outside the session's memory, extents that overflow, shapes that do not
 * agree, unknown modes) get a clear error and leave the worker serving.
 * Skips when softgpu is not part of the build. */
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
  return harness_open(softgpu_lib, 11, 0);
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

/* x 1x2x5x5, w 3x2x3x3, stride 2, padding 1: y 1x3x3x3; packed NCHW. */
static const int32_t k_xd[4] = {1, 2, 5, 5}, k_xs[4] = {50, 25, 5, 1};
static const int32_t k_wd[4] = {3, 2, 3, 3};
static const int32_t k_yd[4] = {1, 3, 3, 3}, k_ys[4] = {27, 9, 3, 1};
static const int32_t k_pad[2] = {1, 1}, k_stride[2] = {2, 2}, k_dil[2] = {1, 1};
enum { X_OFF = 0, W_OFF = 256, Y_OFF = 512, MEM = 1024 };

static rgpu_msg_cudnn_conv_fwd_req valid_conv(uint64_t mem) {
  rgpu_msg_cudnn_conv_fwd_req q = {
      .alpha = 1, .beta = 0,
      .x_type = CUDNN_DATA_FLOAT, .x_dim = {k_xd, 4}, .x_stride = {k_xs, 4}, .x = mem + X_OFF,
      .w_type = CUDNN_DATA_FLOAT, .w_format = CUDNN_TENSOR_NCHW, .w_dim = {k_wd, 4},
      .w = mem + W_OFF,
      .conv_pad = {k_pad, 2}, .conv_stride = {k_stride, 2}, .conv_dilation = {k_dil, 2},
      .conv_mode = CUDNN_CONVOLUTION, .conv_compute = CUDNN_DATA_FLOAT, .conv_groups = 1,
      .y_type = CUDNN_DATA_FLOAT, .y_dim = {k_yd, 4}, .y_stride = {k_ys, 4}, .y = mem + Y_OFF,
      .algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM};
  return q;
}

static uint32_t conv(harness *t, const rgpu_msg_cudnn_conv_fwd_req *q) {
  return HARNESS_SEND(t, RGPU_OP_CUDNN_CONV_FWD, cudnn_conv_fwd, q, NULL, 0);
}

static void test_conv_computes(void **state) {
  (void)state;
  harness *t = harness_new();
  if (!t) skip();
  harness_hello(t);
  uint64_t mem = harness_mem_alloc(t, MEM);
  float x[50], w[54], y[27];
  for (int i = 0; i < 50; i++) x[i] = (float)((i * 7) % 11 - 5);
  for (int i = 0; i < 54; i++) w[i] = (float)((i * 5) % 7 - 3);
  harness_htod(t, mem + X_OFF, x, sizeof x);
  harness_htod(t, mem + W_OFF, w, sizeof w);
  rgpu_msg_cudnn_conv_fwd_req q = valid_conv(mem);
  q.alpha = 2;
  assert_int_equal(conv(t, &q), 0);
  harness_dtoh(t, mem + Y_OFF, y, sizeof y); /* the legacy stream: after the convolution */
  /* CUDNN_CONVOLUTION: the filter flipped in both spatial dimensions. */
  for (int k = 0; k < 3; k++)
    for (int oh = 0; oh < 3; oh++)
      for (int ow = 0; ow < 3; ow++) {
        float acc = 0;
        for (int c = 0; c < 2; c++)
          for (int r = 0; r < 3; r++)
            for (int s = 0; s < 3; s++) {
              int ih = oh * 2 - 1 + r, iw = ow * 2 - 1 + s;
              if (ih < 0 || ih >= 5 || iw < 0 || iw >= 5) continue;
              acc += w[((k * 2 + c) * 3 + (2 - r)) * 3 + (2 - s)] * x[(c * 5 + ih) * 5 + iw];
            }
        assert_true(y[(k * 3 + oh) * 3 + ow] == 2 * acc);
      }
  harness_free(t);
}

static void test_hostile_convs(void **state) {
  (void)state;
  harness *t = harness_new();
  if (!t) skip();
  harness_hello(t);
  uint64_t mem = harness_mem_alloc(t, MEM);
  rgpu_msg_cudnn_conv_fwd_req q;
  static const int32_t far_s[4] = {50, INT32_MAX, 5, 1};
  static const int32_t bad_y[4] = {1, 3, 4, 3}, neg[2] = {-1, 0}, three[3] = {1, 1, 1};
  const rgpu_array far_stride = {far_s, 4}, y_bad = {bad_y, 4},
                   pad_neg = {neg, 2}, pad_three = {three, 3}, stride_short = {k_xs, 3};
#define BAD(mutation, status, needle)      \
  q = valid_conv(mem);                     \
  mutation;                                \
  assert_int_equal(conv(t, &q), status);   \
  assert_true(reply_says(t, needle))
  BAD(q.y = mem + 1000, CUDA_ERROR_INVALID_VALUE, "y (108 bytes at");
  BAD(q.x = 0x1000, CUDA_ERROR_INVALID_VALUE, "not inside a device allocation");
  BAD(q.w = mem + 900, CUDA_ERROR_INVALID_VALUE, "w (216 bytes at");
  BAD((q.workspace = mem + 1000, q.workspace_size = 64), CUDA_ERROR_INVALID_VALUE, "workspace");
  BAD(q.x_stride = far_stride, CUDA_ERROR_INVALID_VALUE, "x (8589934688 bytes at");
  BAD(q.y_dim = y_bad, CUDA_ERROR_INVALID_VALUE, "not the output's");
  BAD(q.conv_pad = pad_neg, CUDA_ERROR_INVALID_VALUE, "padding");
  BAD(q.conv_pad = pad_three, CUDA_ERROR_INVALID_VALUE, "does not fit");
  BAD(q.conv_groups = 2, CUDA_ERROR_INVALID_VALUE, "channels");
  BAD(q.conv_mode = 9, CUDA_ERROR_INVALID_VALUE, "does not fit");
  BAD(q.x_type = 99, CUDA_ERROR_INVALID_VALUE, "type 99");
  BAD(q.x_stride = stride_short, CUDA_ERROR_INVALID_VALUE, "strides");
  BAD((q.x_type = CUDNN_DATA_DOUBLE, q.w_type = CUDNN_DATA_DOUBLE, q.y_type = CUDNN_DATA_DOUBLE),
      CUDA_ERROR_NOT_SUPPORTED, "float tensors only");
  BAD(q.stream = 77, CUDA_ERROR_INVALID_HANDLE, "unknown stream");
#undef BAD
  /* A tensor whose last element lies beyond 2^64 bytes. */
  static const int32_t one[4] = {1, 1, 1, 1}, huge[4] = {1, 1, INT32_MAX, 1};
  rgpu_msg_cudnn_add_tensor_req ad = {
      .alpha = 1, .beta = 1,
      .a_type = CUDNN_DATA_DOUBLE, .a_dim = {one, 4}, .a_stride = {one, 4}, .a = mem,
      .c_type = CUDNN_DATA_DOUBLE, .c_dim = {huge, 4}, .c_stride = {huge, 4}, .c = mem};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_ADD_TENSOR, cudnn_add_tensor, &ad, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "C spans more than 2^64 bytes"));
  /* The worker goes on serving. */
  q = valid_conv(mem);
  assert_int_equal(conv(t, &q), 0);
  harness_free(t);
}

/* ELU, log-softmax over the channels, average pooling without the
 * padding, and a broadcast bias add, on one 1x3x2x2 tensor. */
static void test_elementwise_pool_softmax(void **state) {
  (void)state;
  harness *t = harness_new();
  if (!t) skip();
  harness_hello(t);
  uint64_t mem = harness_mem_alloc(t, MEM);
  static const int32_t d[4] = {1, 3, 2, 2}, s[4] = {12, 4, 2, 1};
  static const int32_t bd[4] = {1, 3, 1, 1}, bs[4] = {3, 1, 1, 1};
  float x[12], y[12], bias[3] = {1, -2, 0.5f};
  for (int i = 0; i < 12; i++) x[i] = (float)(i % 5) - 2.0f;
  harness_htod(t, mem, x, sizeof x);
  harness_htod(t, mem + 128, bias, sizeof bias);

  rgpu_msg_cudnn_activation_fwd_req a = {
      .act_mode = CUDNN_ACTIVATION_ELU, .act_coef = 0.5, .alpha = 1, .beta = 0,
      .x_type = CUDNN_DATA_FLOAT, .x_dim = {d, 4}, .x_stride = {s, 4}, .x = mem,
      .y_type = CUDNN_DATA_FLOAT, .y_dim = {d, 4}, .y_stride = {s, 4}, .y = mem + 256};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_ACTIVATION_FWD, cudnn_activation_fwd, &a, NULL, 0), 0);
  harness_dtoh(t, mem + 256, y, sizeof y);
  for (int i = 0; i < 12; i++)
    assert_float_equal(y[i], x[i] > 0 ? x[i] : 0.5 * (exp(x[i]) - 1), 1e-6);
  a.act_mode = 42;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_ACTIVATION_FWD, cudnn_activation_fwd, &a, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);

  rgpu_msg_cudnn_softmax_fwd_req sm = {
      .softmax_algo = CUDNN_SOFTMAX_LOG, .softmax_mode = CUDNN_SOFTMAX_MODE_CHANNEL, .alpha = 1,
      .x_type = CUDNN_DATA_FLOAT, .x_dim = {d, 4}, .x_stride = {s, 4}, .x = mem,
      .y_type = CUDNN_DATA_FLOAT, .y_dim = {d, 4}, .y_stride = {s, 4}, .y = mem + 256};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_SOFTMAX_FWD, cudnn_softmax_fwd, &sm, NULL, 0), 0);
  harness_dtoh(t, mem + 256, y, sizeof y);
  for (int p = 0; p < 4; p++) {
    double sum = 0;
    for (int c = 0; c < 3; c++) sum += exp(x[c * 4 + p]);
    for (int c = 0; c < 3; c++) assert_float_equal(y[c * 4 + p], x[c * 4 + p] - log(sum), 1e-5);
  }
  sm.y_dim = (rgpu_array){bd, 4};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_SOFTMAX_FWD, cudnn_softmax_fwd, &sm, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);

  /* 2x2 windows, stride 1, padding 1: a 3x3 output; corners average one
   * element. */
  static const int32_t win[2] = {2, 2}, pad[2] = {1, 1}, str[2] = {1, 1};
  static const int32_t pd[4] = {1, 3, 3, 3}, ps[4] = {27, 9, 3, 1};
  rgpu_msg_cudnn_pooling_fwd_req pl = {
      .pool_mode = CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, .pool_window = {win, 2},
      .pool_pad = {pad, 2}, .pool_stride = {str, 2}, .alpha = 1,
      .x_type = CUDNN_DATA_FLOAT, .x_dim = {d, 4}, .x_stride = {s, 4}, .x = mem,
      .y_type = CUDNN_DATA_FLOAT, .y_dim = {pd, 4}, .y_stride = {ps, 4}, .y = mem + 256};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_POOLING_FWD, cudnn_pooling_fwd, &pl, NULL, 0), 0);
  float py[27];
  harness_dtoh(t, mem + 256, py, sizeof py);
  assert_float_equal(py[0], x[0], 1e-6);                                /* corner */
  assert_float_equal(py[4], (x[0] + x[1] + x[2] + x[3]) / 4.0, 1e-6);   /* centre */
  assert_float_equal(py[9 + 1], (x[4] + x[5]) / 2.0, 1e-6);             /* top edge, channel 1 */
  pl.y = mem + 1000;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_POOLING_FWD, cudnn_pooling_fwd, &pl, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);

  rgpu_msg_cudnn_add_tensor_req ad = {
      .alpha = 1, .beta = 1,
      .a_type = CUDNN_DATA_FLOAT, .a_dim = {bd, 4}, .a_stride = {bs, 4}, .a = mem + 128,
      .c_type = CUDNN_DATA_FLOAT, .c_dim = {d, 4}, .c_stride = {s, 4}, .c = mem};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_ADD_TENSOR, cudnn_add_tensor, &ad, NULL, 0), 0);
  harness_dtoh(t, mem, y, sizeof y);
  for (int i = 0; i < 12; i++) assert_true(y[i] == x[i] + bias[i / 4]);
  ad.a_dim = (rgpu_array){pd, 4};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_ADD_TENSOR, cudnn_add_tensor, &ad, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  harness_free(t);
}

static void test_query(void **state) {
  (void)state;
  harness *t = harness_new();
  if (!t) skip();
  harness_hello(t);
  rgpu_msg_cudnn_conv_fwd_req c = valid_conv(0);
  rgpu_msg_cudnn_conv_fwd_query_req q = {
      .query = 1, .requested = 8,
      .x_type = c.x_type, .x_dim = c.x_dim, .x_stride = c.x_stride,
      .w_type = c.w_type, .w_format = c.w_format, .w_dim = c.w_dim,
      .conv_pad = c.conv_pad, .conv_stride = c.conv_stride, .conv_dilation = c.conv_dilation,
      .conv_mode = c.conv_mode, .conv_compute = c.conv_compute, .conv_groups = 1,
      .y_type = c.y_type, .y_dim = c.y_dim, .y_stride = c.y_stride};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_CONV_FWD_QUERY, cudnn_conv_fwd_query, &q, NULL, 0), 0);
  rgpu_msg_cudnn_conv_fwd_query_rep r;
  assert_int_equal(rgpu_msg_cudnn_conv_fwd_query_rep_decode(t->p, t->h.length, &r), 0);
  assert_int_equal(r.algo.count, 1);
  assert_int_equal(rgpu_array_u32(&r.algo, 0), CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM);
  assert_int_equal(rgpu_array_u64(&r.memory, 0), 0);
  q.requested = 0;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_CONV_FWD_QUERY, cudnn_conv_fwd_query, &q, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  harness_free(t);
}

int main(void) {
  char self[360];
  harness_exe_dir(self, sizeof self);
  snprintf(softgpu_lib, sizeof softgpu_lib, "%s/../lib/libsoftgpu.so", self);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv_computes),
      cmocka_unit_test(test_hostile_convs),
      cmocka_unit_test(test_elementwise_pool_softmax),
      cmocka_unit_test(test_query),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
