/* Unit tests of the cuDNN facade without a session: a program linked
 * against the built libcudnn.so.9 (so every call goes through the
 * generated forwarder into libcudart.so.13) gets the versions, names, the
 * handle checks, the generated NOT_SUPPORTED stubs and the client-side
 * legacy descriptors (cuDNN's checks and output-dimension formulas). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <cudnn.h>

/* Written by gen_cudnn.py stubs (exported under RGPU_PRIVATE_1). */
extern const char *const rgpu_cudnn_stubbed_names[];
extern const int rgpu_cudnn_stubbed_count;

static void test_versions_and_names(void **state) {
  (void)state;
  int v = -1;
  assert_int_equal(cudnnGetProperty(MAJOR_VERSION, &v), CUDNN_STATUS_SUCCESS);
  assert_int_equal(v, CUDNN_MAJOR);
  assert_int_equal(cudnnGetProperty(PATCH_LEVEL, &v), CUDNN_STATUS_SUCCESS);
  assert_int_equal(v, CUDNN_PATCHLEVEL);
  assert_int_equal(cudnnGetProperty(MAJOR_VERSION, NULL), CUDNN_STATUS_BAD_PARAM);
  assert_int_equal((int)cudnnGetVersion(), CUDNN_VERSION);
  assert_int_equal((int)cudnnGetCudartVersion(), CUDART_VERSION);
  assert_int_equal(cudnnOpsVersionCheck(), CUDNN_STATUS_SUCCESS);
  assert_string_equal(cudnnGetErrorString(CUDNN_STATUS_NOT_SUPPORTED),
                      "CUDNN_STATUS_NOT_SUPPORTED");
  assert_string_equal(cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM), "CUDNN_STATUS_BAD_PARAM");
  assert_string_equal(cudnnGetErrorString((cudnnStatus_t)77), "CUDNN_STATUS_UNKNOWN");
  char msg[8] = "x";
  cudnnGetLastErrorString(msg, sizeof msg);
  assert_string_equal(msg, "");
}

/* Without a server (the unit tests run without one) cudnnCreate fails as
 * cuDNN does without a GPU; the handle calls check their handle. */
static void test_handles_and_stubs(void **state) {
  (void)state;
  cudnnHandle_t h = NULL;
  assert_int_equal(cudnnCreate(NULL), CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnCreate(&h), CUDNN_STATUS_NOT_INITIALIZED);
  assert_null(h);
  uint64_t junk[4] = {0};
  cudaStream_t s = (cudaStream_t)1;
  assert_int_equal(cudnnSetStream((cudnnHandle_t)junk, 0), CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnGetStream((cudnnHandle_t)junk, &s), CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnDestroy(NULL), CUDNN_STATUS_SUCCESS);
  /* A stub: NOT_SUPPORTED, never a silent success. */
  assert_int_equal(cudnnBackendPopulateCudaGraph(NULL, NULL, NULL, NULL),
                   CUDNN_STATUS_NOT_SUPPORTED);
  int saw_backend = 0;
  for (int i = 0; rgpu_cudnn_stubbed_names[i]; i++) {
    assert_string_not_equal(rgpu_cudnn_stubbed_names[i], "cudnnCreate");
    saw_backend |= !strcmp(rgpu_cudnn_stubbed_names[i], "cudnnBackendPopulateCudaGraph");
  }
  assert_true(saw_backend);
  /* The generated list is in use (RNN, attention, normalization, ... are
   * still stubs: 97 once the training calls were implemented). */
  assert_true(rgpu_cudnn_stubbed_count > 50);
}


/* Tensors: packed strides of both formats, explicit strides, the Nd read
 * back (truncated to the count asked for), sizes, and cuDNN's checks. */
static void test_tensor(void **state) {
  (void)state;
  cudnnTensorDescriptor_t t;
  cudnnDataType_t type;
  int n, c, h, w, ns, cs, hs, ws;
  assert_int_equal(cudnnCreateTensorDescriptor(NULL), CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnCreateTensorDescriptor(&t), CUDNN_STATUS_SUCCESS);
  /* A fresh descriptor has no shape to read. */
  assert_int_equal(cudnnGetTensor4dDescriptor(t, &type, &n, &c, &h, &w, &ns, &cs, &hs, &ws),
                   CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 3, 4, 5),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnGetTensor4dDescriptor(t, &type, &n, &c, &h, &w, &ns, &cs, &hs, &ws),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(type, CUDNN_DATA_FLOAT);
  assert_int_equal(n * 1000 + c * 100 + h * 10 + w, 2345);
  assert_int_equal(ns, 60);
  assert_int_equal(cs, 20);
  assert_int_equal(hs, 5);
  assert_int_equal(ws, 1);
  size_t bytes = 0;
  assert_int_equal(cudnnGetTensorSizeInBytes(t, &bytes), CUDNN_STATUS_SUCCESS);
  assert_int_equal(bytes, 2 * 3 * 4 * 5 * 4);
  /* NHWC: the channel fastest. */
  assert_int_equal(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, 2, 3, 4, 5),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnGetTensor4dDescriptor(t, &type, &n, &c, &h, &w, &ns, &cs, &hs, &ws),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(type, CUDNN_DATA_HALF);
  assert_int_equal(ns, 60);
  assert_int_equal(cs, 1);
  assert_int_equal(hs, 15);
  assert_int_equal(ws, 3);
  /* Explicit strides with a gap: the size spans the last element. */
  assert_int_equal(cudnnSetTensor4dDescriptorEx(t, CUDNN_DATA_FLOAT, 1, 2, 2, 2, 100, 10, 4, 1),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnGetTensorSizeInBytes(t, &bytes), CUDNN_STATUS_SUCCESS);
  assert_int_equal(bytes, (10 + 4 + 1 + 1) * 4);
  int dims[8] = {0}, strides[8] = {0}, nb = 0;
  assert_int_equal(cudnnGetTensorNdDescriptor(t, 2, &type, &nb, dims, strides),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(nb, 4);
  assert_int_equal(dims[1], 2);
  assert_int_equal(strides[1], 10);
  assert_int_equal(dims[2], 0); /* not asked for: not written */
  const int d5[5] = {1, 2, 3, 4, 5};
  assert_int_equal(cudnnSetTensorNdDescriptorEx(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_DOUBLE, 5, d5),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnGetTensorNdDescriptor(t, 8, &type, &nb, dims, strides),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(nb, 5);
  assert_int_equal(strides[0], 120);
  assert_int_equal(strides[4], 1);
  /* cuDNN's checks. */
  assert_int_equal(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 0, 3, 4, 5),
                   CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, (cudnnDataType_t)99, 1, 1, 1, 1),
                   CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnSetTensor4dDescriptorEx(t, CUDNN_DATA_FLOAT, 1, 2, 2, 2, 8, 4, 2, -1),
                   CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnGetTensor4dDescriptor(t, &type, &n, &c, &h, &w, &ns, &cs, &hs, &ws),
                   CUDNN_STATUS_BAD_PARAM); /* still the 5-d shape: no 4-d view */
  assert_int_equal(cudnnDestroyTensorDescriptor(t), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnDestroyTensorDescriptor(NULL), CUDNN_STATUS_SUCCESS);
}

/* Filters and convolutions: set, read back, defaults, and the output
 * dimensions by cuDNN's formula (padding, stride, dilation, groups). */
static void test_filter_and_convolution(void **state) {
  (void)state;
  cudnnTensorDescriptor_t x;
  cudnnFilterDescriptor_t f;
  cudnnConvolutionDescriptor_t cv;
  assert_int_equal(cudnnCreateTensorDescriptor(&x), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnCreateFilterDescriptor(&f), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnCreateConvolutionDescriptor(&cv), CUDNN_STATUS_SUCCESS);
  cudnnMathType_t math;
  int groups = 0;
  cudnnReorderType_t reorder;
  assert_int_equal(cudnnGetConvolutionMathType(cv, &math), CUDNN_STATUS_SUCCESS);
  assert_int_equal(math, CUDNN_DEFAULT_MATH);
  assert_int_equal(cudnnGetConvolutionGroupCount(cv, &groups), CUDNN_STATUS_SUCCESS);
  assert_int_equal(groups, 1);
  assert_int_equal(cudnnGetConvolutionReorderType(cv, &reorder), CUDNN_STATUS_SUCCESS);
  assert_int_equal(reorder, CUDNN_DEFAULT_REORDER);

  assert_int_equal(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 4, 9, 11),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnSetFilter4dDescriptor(f, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 6, 4, 3, 3),
                   CUDNN_STATUS_SUCCESS);
  cudnnDataType_t type;
  cudnnTensorFormat_t format;
  int k, c, h, w;
  assert_int_equal(cudnnGetFilter4dDescriptor(f, &type, &format, &k, &c, &h, &w),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(k * 1000 + c * 100 + h * 10 + w, 6433);
  assert_int_equal(format, CUDNN_TENSOR_NCHW);
  size_t bytes;
  assert_int_equal(cudnnGetFilterSizeInBytes(f, &bytes), CUDNN_STATUS_SUCCESS);
  assert_int_equal(bytes, 6 * 4 * 3 * 3 * 4);
  assert_int_equal(cudnnSetFilter4dDescriptor(f, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 6, 0, 3, 3),
                   CUDNN_STATUS_BAD_PARAM);

  /* pad 1x2, stride 2x1, dilation 1x2: h = 1 + (9 + 2 - 3) / 2 = 5,
   * w = 1 + (11 + 4 - 5) / 1 = 11. */
  assert_int_equal(cudnnSetConvolution2dDescriptor(cv, 1, 2, 2, 1, 1, 2, CUDNN_CROSS_CORRELATION,
                                                   CUDNN_DATA_FLOAT),
                   CUDNN_STATUS_SUCCESS);
  int n, oc, oh, ow;
  assert_int_equal(cudnnGetConvolution2dForwardOutputDim(cv, x, f, &n, &oc, &oh, &ow),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(n, 2);
  assert_int_equal(oc, 6);
  assert_int_equal(oh, 5);
  assert_int_equal(ow, 11);
  int out[4];
  assert_int_equal(cudnnGetConvolutionNdForwardOutputDim(cv, x, f, 4, out), CUDNN_STATUS_SUCCESS);
  assert_int_equal(out[2] * 100 + out[3], 511);
  int ph, pw, u, v, dh, dw;
  cudnnConvolutionMode_t mode;
  assert_int_equal(cudnnGetConvolution2dDescriptor(cv, &ph, &pw, &u, &v, &dh, &dw, &mode, &type),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(ph * 100000 + pw * 10000 + u * 1000 + v * 100 + dh * 10 + dw, 122112);
  assert_int_equal(mode, CUDNN_CROSS_CORRELATION);
  /* Groups: x's channels must be the filter's times the group count. */
  assert_int_equal(cudnnSetConvolutionGroupCount(cv, 2), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnGetConvolution2dForwardOutputDim(cv, x, f, &n, &oc, &oh, &ow),
                   CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnSetFilter4dDescriptor(f, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 6, 2, 3, 3),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnGetConvolution2dForwardOutputDim(cv, x, f, &n, &oc, &oh, &ow),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(oc, 6);
  assert_int_equal(cudnnSetConvolutionGroupCount(cv, 0), CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnSetConvolutionMathType(cv, CUDNN_TENSOR_OP_MATH), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnSetConvolutionMathType(cv, (cudnnMathType_t)9), CUDNN_STATUS_BAD_PARAM);
  /* cuDNN's checks of the convolution's own arguments. */
  assert_int_equal(cudnnSetConvolution2dDescriptor(cv, -1, 0, 1, 1, 1, 1, CUDNN_CONVOLUTION,
                                                   CUDNN_DATA_FLOAT),
                   CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnSetConvolution2dDescriptor(cv, 0, 0, 0, 1, 1, 1, CUDNN_CONVOLUTION,
                                                   CUDNN_DATA_FLOAT),
                   CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnSetConvolution2dDescriptor(cv, 0, 0, 1, 1, 1, 1, (cudnnConvolutionMode_t)5,
                                                   CUDNN_DATA_FLOAT),
                   CUDNN_STATUS_BAD_PARAM);
  /* A filter larger than the padded input has no output. */
  assert_int_equal(cudnnSetConvolution2dDescriptor(cv, 0, 0, 1, 1, 5, 1, CUDNN_CONVOLUTION,
                                                   CUDNN_DATA_FLOAT),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnGetConvolution2dForwardOutputDim(cv, x, f, &n, &oc, &oh, &ow),
                   CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnDestroyConvolutionDescriptor(cv), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnDestroyFilterDescriptor(f), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnDestroyTensorDescriptor(x), CUDNN_STATUS_SUCCESS);
}

static void test_activation_and_pooling(void **state) {
  (void)state;
  cudnnActivationDescriptor_t a;
  cudnnPoolingDescriptor_t p;
  cudnnTensorDescriptor_t x;
  assert_int_equal(cudnnCreateActivationDescriptor(&a), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnSetActivationDescriptor(a, CUDNN_ACTIVATION_CLIPPED_RELU,
                                                CUDNN_PROPAGATE_NAN, 6.0),
                   CUDNN_STATUS_SUCCESS);
  cudnnActivationMode_t mode;
  cudnnNanPropagation_t nan;
  double coef = 0;
  assert_int_equal(cudnnGetActivationDescriptor(a, &mode, &nan, &coef), CUDNN_STATUS_SUCCESS);
  assert_int_equal(mode, CUDNN_ACTIVATION_CLIPPED_RELU);
  assert_int_equal(nan, CUDNN_PROPAGATE_NAN);
  assert_true(coef == 6.0);
  assert_int_equal(cudnnSetActivationDescriptor(a, (cudnnActivationMode_t)42,
                                                CUDNN_PROPAGATE_NAN, 0),
                   CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnDestroyActivationDescriptor(a), CUDNN_STATUS_SUCCESS);

  assert_int_equal(cudnnCreatePoolingDescriptor(&p), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnCreateTensorDescriptor(&x), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 3, 5, 8, 7),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnSetPooling2dDescriptor(p, CUDNN_POOLING_MAX, CUDNN_NOT_PROPAGATE_NAN, 2,
                                               3, 0, 1, 2, 2),
                   CUDNN_STATUS_SUCCESS);
  int n, c, h, w;
  /* h = 1 + (8 - 2) / 2 = 4, w = 1 + (7 + 2 - 3) / 2 = 4. */
  assert_int_equal(cudnnGetPooling2dForwardOutputDim(p, x, &n, &c, &h, &w), CUDNN_STATUS_SUCCESS);
  assert_int_equal(n * 1000 + c * 100 + h * 10 + w, 3544);
  cudnnPoolingMode_t pm;
  int wh, ww, ph, pw, sh, sw;
  assert_int_equal(cudnnGetPooling2dDescriptor(p, &pm, &nan, &wh, &ww, &ph, &pw, &sh, &sw),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(wh * 100000 + ww * 10000 + ph * 1000 + pw * 100 + sh * 10 + sw, 230122);
  assert_int_equal(cudnnSetPooling2dDescriptor(p, CUDNN_POOLING_MAX, CUDNN_NOT_PROPAGATE_NAN, 0,
                                               3, 0, 1, 2, 2),
                   CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnDestroyPoolingDescriptor(p), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnDestroyTensorDescriptor(x), CUDNN_STATUS_SUCCESS);
}

/* The Nd pooling forms: a 2-d descriptor set through them reads back
 * through the 2-d ones and gives the same output; a 3-d one describes a
 * 5-d tensor's output, is refused by the 2-d getters, and refused (named,
 * NOT_SUPPORTED) where it would compute. */
static void test_pooling_nd(void **state) {
  (void)state;
  cudnnPoolingDescriptor_t p;
  cudnnTensorDescriptor_t x, y;
  assert_int_equal(cudnnCreatePoolingDescriptor(&p), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnCreateTensorDescriptor(&x), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnCreateTensorDescriptor(&y), CUDNN_STATUS_SUCCESS);
  int win[3] = {2, 3, 2}, pad[3] = {0, 1, 1}, str[3] = {2, 2, 1};
  assert_int_equal(cudnnSetPoolingNdDescriptor(p, CUDNN_POOLING_MAX, CUDNN_NOT_PROPAGATE_NAN, 2,
                                               win, pad, str),
                   CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 3, 5, 8, 7),
                   CUDNN_STATUS_SUCCESS);
  int n, c, h, w, out[5];
  assert_int_equal(cudnnGetPooling2dForwardOutputDim(p, x, &n, &c, &h, &w), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnGetPoolingNdForwardOutputDim(p, x, 4, out), CUDNN_STATUS_SUCCESS);
  assert_int_equal(out[0] * 1000 + out[1] * 100 + out[2] * 10 + out[3], 3544);
  assert_true(n == out[0] && c == out[1] && h == out[2] && w == out[3]);
  assert_int_equal(cudnnGetPoolingNdForwardOutputDim(p, x, 5, out), CUDNN_STATUS_BAD_PARAM);

  /* 3-d: x 2x4x6x8x10, y = 1 + (in + 2 pad - win) / stride per dimension. */
  assert_int_equal(cudnnSetPoolingNdDescriptor(p, CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
                                               CUDNN_PROPAGATE_NAN, 3, win, pad, str),
                   CUDNN_STATUS_SUCCESS);
  int xd[5] = {2, 4, 6, 8, 10}, xs[5] = {1920, 480, 80, 10, 1};
  assert_int_equal(cudnnSetTensorNdDescriptor(x, CUDNN_DATA_FLOAT, 5, xd, xs), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnGetPoolingNdForwardOutputDim(p, x, 5, out), CUDNN_STATUS_SUCCESS);
  assert_int_equal(out[2] * 100 + out[3] * 10 + out[4], 3 * 100 + 4 * 10 + 11);
  assert_int_equal(cudnnGetPooling2dForwardOutputDim(p, x, &n, &c, &h, &w), CUDNN_STATUS_BAD_PARAM);
  cudnnPoolingMode_t pm;
  cudnnNanPropagation_t nan;
  int nb, gw[3], gp[3], gs[3];
  assert_int_equal(cudnnGetPoolingNdDescriptor(p, 3, &pm, &nan, &nb, gw, gp, gs), CUDNN_STATUS_SUCCESS);
  assert_int_equal(nb, 3);
  assert_int_equal(pm, CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING);
  assert_int_equal(nan, CUDNN_PROPAGATE_NAN);
  assert_true(!memcmp(gw, win, sizeof win) && !memcmp(gp, pad, sizeof pad) && !memcmp(gs, str, sizeof str));
  int wh, ww, ph, pw, sh, sw;
  assert_int_equal(cudnnGetPooling2dDescriptor(p, &pm, &nan, &wh, &ww, &ph, &pw, &sh, &sw),
                   CUDNN_STATUS_BAD_PARAM);
  int yd[5] = {2, 4, 3, 4, 11}, ys[5] = {528, 132, 44, 11, 1};
  assert_int_equal(cudnnSetTensorNdDescriptor(y, CUDNN_DATA_FLOAT, 5, yd, ys), CUDNN_STATUS_SUCCESS);
  /* No session here: a handle that is none; the refusal comes first. */
  float one = 1, zero = 0;
  static char junk[256];
  assert_int_equal(cudnnPoolingForward((cudnnHandle_t)junk, p, &one, x, (void *)0x100, &zero, y,
                                       (void *)0x200),
                   CUDNN_STATUS_NOT_SUPPORTED);

  /* Bad arguments. */
  win[0] = 0;
  assert_int_equal(cudnnSetPoolingNdDescriptor(p, CUDNN_POOLING_MAX, CUDNN_NOT_PROPAGATE_NAN, 2,
                                               win, pad, str),
                   CUDNN_STATUS_BAD_PARAM);
  win[0] = 2;
  assert_int_equal(cudnnSetPoolingNdDescriptor(p, CUDNN_POOLING_MAX, CUDNN_NOT_PROPAGATE_NAN,
                                               CUDNN_DIM_MAX - 1, win, pad, str),
                   CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnSetPoolingNdDescriptor(p, CUDNN_POOLING_MAX, CUDNN_NOT_PROPAGATE_NAN, 2,
                                               NULL, pad, str),
                   CUDNN_STATUS_BAD_PARAM);
  assert_int_equal(cudnnDestroyPoolingDescriptor(p), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnDestroyTensorDescriptor(x), CUDNN_STATUS_SUCCESS);
  assert_int_equal(cudnnDestroyTensorDescriptor(y), CUDNN_STATUS_SUCCESS);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_versions_and_names),
      cmocka_unit_test(test_handles_and_stubs),
      cmocka_unit_test(test_tensor),
      cmocka_unit_test(test_filter_and_convolution),
      cmocka_unit_test(test_activation_and_pooling),
      cmocka_unit_test(test_pooling_nd),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
