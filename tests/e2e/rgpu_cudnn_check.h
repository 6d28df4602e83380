// What the cuDNN end-to-end programs share: DN() checks a cuDNN call (a
// failure prints the call and cuDNN's status name and exits 1), and small
// builders of finalized backend descriptors (float NCHW tensors, a 2-d
// cross-correlation).  Each program still builds its own operations,
// graphs and plans: that is what they test.
#ifndef RGPU_CUDNN_CHECK_H
#define RGPU_CUDNN_CHECK_H

#include <cstdio>
#include <cstdlib>
#include <cudnn.h>
#include <vector>

#include "rgpu_check.h"

#define DN(call)                                                                  \
  do {                                                                            \
    cudnnStatus_t st_ = (call);                                                   \
    if (st_ != CUDNN_STATUS_SUCCESS) {                                            \
      std::fprintf(stderr, "FAIL %s:%d: %s -> %s\n", __FILE__, __LINE__, #call,  \
                   cudnnGetErrorString(st_));                                     \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

// A float vector copied into new device memory, and n floats copied back.
static inline float *to_device(const std::vector<float> &v) {
  float *d;
  CHECK(cudaMalloc(&d, v.size() * sizeof(float)));
  CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}

static inline std::vector<float> from_device(const float *d, size_t n) {
  std::vector<float> v(n);
  CHECK(cudaMemcpy(v.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
  return v;
}

static inline cudnnBackendDescriptor_t bd_make(cudnnBackendDescriptorType_t t) {
  cudnnBackendDescriptor_t d;
  DN(cudnnBackendCreateDescriptor(t, &d));
  return d;
}

static inline void bd_set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
                          cudnnBackendAttributeType_t t, int64_t n, const void *v) {
  DN(cudnnBackendSetAttribute(d, a, t, n, v));
}

// A finalized dense NCHW float tensor with unique id uid.
static inline cudnnBackendDescriptor_t bd_tensor4(int64_t uid, int64_t n, int64_t c, int64_t h,
                                                  int64_t w, bool virt = false) {
  cudnnBackendDescriptor_t t = bd_make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  int64_t dims[4] = {n, c, h, w}, strides[4] = {c * h * w, h * w, w, 1}, align = 16;
  cudnnDataType_t f = CUDNN_DATA_FLOAT;
  bd_set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f);
  bd_set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
  bd_set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
  bd_set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  bd_set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
  if (virt) bd_set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
  DN(cudnnBackendFinalize(t));
  return t;
}

// A finalized 2-d float cross-correlation with symmetric padding pad and
// stride stride, no dilation.
static inline cudnnBackendDescriptor_t bd_conv2d(int64_t pad, int64_t stride) {
  cudnnBackendDescriptor_t conv = bd_make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  int64_t sd = 2, p[2] = {pad, pad}, s[2] = {stride, stride}, dil[2] = {1, 1};
  cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  bd_set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
  bd_set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  bd_set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sd);
  bd_set(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, p);
  bd_set(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, p);
  bd_set(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, s);
  bd_set(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil);
  DN(cudnnBackendFinalize(conv));
  return conv;
}

#endif
