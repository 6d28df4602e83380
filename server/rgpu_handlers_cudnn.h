/* What the legacy cuDNN handlers share with the backend API's
 * (rgpu_handlers_cudnn_backend.c): NVIDIA's libcudnn.so.9, opened once. */
#ifndef RGPU_HANDLERS_CUDNN_H
#define RGPU_HANDLERS_CUDNN_H

#include <cudnn.h>

#include "rgpu_cudnn_cpu.h"
#include "rgpu_worker_internal.h"

/* A symbol of NVIDIA's libcudnn.so.9, or NULL (not found, or the library
 * could not be opened). */
void *rgpu_cudnn_server_sym(const char *name);
/* The current context's cuDNN handle with its stream set to stream
 * (fails the request with a clear error when cuDNN cannot be had). */
CUresult rgpu_cudnn_server_handle(rgpu_worker *w, const char *api, CUstream stream,
                                  cudnnHandle_t *out);


/* ---- what the legacy handlers share (rgpu_handlers_cudnn.c defines;
 * rgpu_handlers_cudnn_bwd.c, _lrn.c and _reduce.c use) ----------------------- */

/* A tensor as the wire carries it, checked. */
typedef struct {
  uint32_t type;
  int nb;
  int dim[8], stride[8];
  uint64_t ptr;
} dnn_tensor;

/* A convolution's x, filter, y and geometry, checked (y the output's). */
typedef struct {
  dnn_tensor x, y;
  uint32_t w_type, w_format;
  int w_dim[8];
  uint64_t w;
  int nb_spatial;
  int pad[6], stride[6], dilation[6];
  uint32_t mode, compute, math;
  int groups;
} dnn_conv;

/* Element size of a cudnnDataType_t rgpu sizes, else 0. */
size_t rgpu_cudnn_srv_type_size(uint32_t type);
/* Decodes and checks one tensor: a type rgpu sizes, 3 to 8 dimensions,
 * positive dimensions and strides, at most 2^31-1 elements. */
CUresult rgpu_cudnn_srv_tensor(rgpu_worker *w, const char *api, const char *name, uint32_t type,
                               const rgpu_array *dim, const rgpu_array *stride, uint64_t ptr,
                               dnn_tensor *t);
/* The bytes t spans lie inside one allocation of the session. */
CUresult rgpu_cudnn_srv_in_session(rgpu_worker *w, const char *api, const char *name,
                                   const dnn_tensor *t);
/* The session's stream of a wire id (0: the legacy default). */
CUresult rgpu_cudnn_srv_stream(rgpu_worker *w, uint64_t id, CUstream *out);
/* A convolution's fields checked (the filter and convolution fit x, y's
 * dimensions are the output's). */
CUresult rgpu_cudnn_srv_conv(rgpu_worker *w, const char *api, uint32_t x_type,
                             const rgpu_array *x_dim, const rgpu_array *x_stride, uint64_t x,
                             uint32_t w_type, uint32_t w_format, const rgpu_array *w_dim,
                             uint64_t wp, const rgpu_array *pad, const rgpu_array *stride,
                             const rgpu_array *dil, uint32_t mode, uint32_t compute, uint32_t math,
                             int32_t groups, uint32_t y_type, const rgpu_array *y_dim,
                             const rgpu_array *y_stride, uint64_t y, dnn_conv *c);
/* softgpu's view of a checked tensor (its address is a host address). */
rgpu_cudnn_cpu_tensor rgpu_cudnn_srv_cpu_tensor(const dnn_tensor *t);
/* A cuDNN status as the CUresult the client turns back into it. */
CUresult rgpu_cudnn_srv_status(cudnnStatus_t st);
/* softgpu: a copy of the size bytes at tmpl, handed to fn (which frees it)
 * in a host function on stream st. */
CUresult rgpu_cudnn_srv_host_launch(rgpu_worker *w, const char *api, CUstream st,
                                    void(CUDA_CB *fn)(void *), const void *tmpl, size_t size);

/* ---- a GPU: NVIDIA's descriptors built from checked requests -------------- */

/* The descriptors of one request, NULL-initialized, freed by
 * rgpu_cudnn_real_free (with the library rgpu_handlers_cudnn.c opened). */
typedef struct {
  cudnnTensorDescriptor_t t[5];
  cudnnFilterDescriptor_t f;
  cudnnConvolutionDescriptor_t cv;
  cudnnActivationDescriptor_t act;
  cudnnPoolingDescriptor_t pool;
  cudnnOpTensorDescriptor_t op;
} rgpu_cudnn_real;
void rgpu_cudnn_real_free(rgpu_cudnn_real *r);
/* An Nd tensor descriptor of t. */
cudnnStatus_t rgpu_cudnn_real_tensor(const dnn_tensor *t, cudnnTensorDescriptor_t *out);
/* A forward convolution's descriptors: t[0] x, t[1] y, the filter, the
 * convolution (math type and groups set). */
cudnnStatus_t rgpu_cudnn_real_conv(const dnn_conv *c, rgpu_cudnn_real *r);
/* A host scaling factor in cuDNN's type for data of type type (double for
 * double data, float otherwise). */
typedef union {
  float f;
  double d;
} rgpu_cudnn_scale;
rgpu_cudnn_scale rgpu_cudnn_scale_for(uint32_t type, double v);

#endif
