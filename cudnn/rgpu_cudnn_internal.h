/* What the cuDNN facade's sources share: the handle and descriptor records
 * and the entry hooks.  Everything here is compiled into rgpu's
 * libcudart.so.13 (which holds the session); libcudnn.so.9 only forwards
 * to rgpu_cudnn_<name>. */
#ifndef RGPU_CUDNN_INTERNAL_H
#define RGPU_CUDNN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "rgpu_cudnn_protos.h"

#define RGPU_CUDNN __attribute__((visibility("default")))

/* A cudnnHandle_t points to this record, named by the client: the server
 * keeps no per-handle state (each compute call carries what it needs), so
 * creating and destroying one costs no round trip.  cudnn_graph.h leaves
 * struct cudnnContext opaque; rgpu gives it this body. */
#define RGPU_CUDNN_MAGIC 0x63644e48u /* "cdNH": tells a live handle from garbage */
struct cudnnContext {
  uint32_t magic;
  int device;          /* the current device at cudnnCreate */
  uint64_t id;         /* client-chosen, for the server's logs */
  cudaStream_t stream; /* a runtime facade stream (0: the legacy default) */
};

/* The live record behind a handle, or NULL (NULL, destroyed, or not one of
 * rgpu's). */
struct cudnnContext *rgpu_cudnn_handle(cudnnHandle_t h);

/* ---- legacy descriptors: client records, sent with the calls ---------- */

/* cuDNN's own limit on a tensor's dimensions (CUDNN_DIM_MAX is 8). */
#define RGPU_CUDNN_DIM_MAX CUDNN_DIM_MAX

#define RGPU_CUDNN_TENSOR_MAGIC 0x64546e73u /* "dTns" */
struct cudnnTensorStruct {
  uint32_t magic;
  int set;      /* a Set call succeeded (a fresh descriptor has no shape) */
  int type;     /* cudnnDataType_t */
  int nb_dims;
  int dim[RGPU_CUDNN_DIM_MAX];
  int stride[RGPU_CUDNN_DIM_MAX];
};

#define RGPU_CUDNN_FILTER_MAGIC 0x6446696cu /* "dFil" */
struct cudnnFilterStruct {
  uint32_t magic;
  int set;
  int type;
  int format; /* cudnnTensorFormat_t */
  int nb_dims;
  int dim[RGPU_CUDNN_DIM_MAX]; /* k, c, then the spatial extents */
};

#define RGPU_CUDNN_CONV_MAGIC 0x64436e76u /* "dCnv" */
#define RGPU_CUDNN_CONV_DIMS_MAX (RGPU_CUDNN_DIM_MAX - 2)
struct cudnnConvolutionStruct {
  uint32_t magic;
  int set;
  int nb_spatial; /* arrayLength: 2 for the 2d calls */
  int pad[RGPU_CUDNN_CONV_DIMS_MAX];
  int stride[RGPU_CUDNN_CONV_DIMS_MAX];
  int dilation[RGPU_CUDNN_CONV_DIMS_MAX];
  int mode;         /* cudnnConvolutionMode_t */
  int compute_type; /* cudnnDataType_t */
  int math_type;    /* cudnnMathType_t */
  int group_count;
  int reorder_type; /* cudnnReorderType_t */
};

#define RGPU_CUDNN_ACT_MAGIC 0x64416374u /* "dAct" */
struct cudnnActivationStruct {
  uint32_t magic;
  int mode;     /* cudnnActivationMode_t */
  int nan_prop; /* cudnnNanPropagation_t */
  double coef;
  double swish_beta;
};

#define RGPU_CUDNN_POOL_MAGIC 0x64506f6cu /* "dPol" */
struct cudnnPoolingStruct {
  uint32_t magic;
  int set;
  int mode;     /* cudnnPoolingMode_t */
  int nan_prop; /* cudnnNanPropagation_t */
  int nb_spatial;
  int window[RGPU_CUDNN_CONV_DIMS_MAX];
  int pad[RGPU_CUDNN_CONV_DIMS_MAX];
  int stride[RGPU_CUDNN_CONV_DIMS_MAX];
};

/* The live records behind descriptors, or NULL. */
struct cudnnTensorStruct *rgpu_cudnn_tensor(cudnnTensorDescriptor_t d);
struct cudnnFilterStruct *rgpu_cudnn_filter(cudnnFilterDescriptor_t d);
struct cudnnConvolutionStruct *rgpu_cudnn_conv(cudnnConvolutionDescriptor_t d);
struct cudnnActivationStruct *rgpu_cudnn_act(cudnnActivationDescriptor_t d);
struct cudnnPoolingStruct *rgpu_cudnn_pool(cudnnPoolingDescriptor_t d);
/* CUDNN_STATUS_NOT_SUPPORTED (logged once per *logged) for a set pooling
 * descriptor of other than two dimensions, which api (a compute call)
 * cannot run; else CUDNN_STATUS_SUCCESS. */
cudnnStatus_t rgpu_cudnn_pool_runnable(const struct cudnnPoolingStruct *p, const char *api,
                                       int *logged);

/* The bytes a tensor spans, from its first element to one past its last
 * (what a call touches: strides may leave gaps). */
uint64_t rgpu_cudnn_tensor_extent(const struct cudnnTensorStruct *t);
/* cuDNN's forward output dimensions (nb of them) of a convolution of x by
 * w into out; BAD_PARAM for a mismatch. */
cudnnStatus_t rgpu_cudnn_conv_output_dims(const struct cudnnConvolutionStruct *conv,
                                          const struct cudnnTensorStruct *x,
                                          const struct cudnnFilterStruct *w, int nb, int *out);

/* Size in bytes of one element of a cudnnDataType_t, 0 for a type rgpu
 * does not size (the packed vector types among them). */
size_t rgpu_cudnn_type_size(int type);

/* Logs once per *logged_once that name is not supported (the generated
 * stubs, and refusals of unsupported argument values). */
void rgpu_cudnn_report_unsupported(const char *name, int *logged_once);
/* The name of a cudnnStatus_t value, or NULL (generated). */
const char *rgpu_cudnn_status_name_of(int status);

#endif
