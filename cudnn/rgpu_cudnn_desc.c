/* The legacy descriptors (tensor, filter, convolution, activation,
 * pooling): client records, created, set and read without a message, with
 * cuDNN's argument checks (CUDNN_STATUS_BAD_PARAM).  The calls that compute
 * carry their content to the server.  The output-dimension queries are
 * answered here with cuDNN's formula. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_cudart.h"
#include "rgpu_cudnn_internal.h"
#include "rgpu_log.h"

/* A refusal of something rgpu does not carry: logged once per site. */
#define REFUSE(...)                                          \
  do {                                                       \
    static int logged_;                                      \
    if (!__atomic_exchange_n(&logged_, 1, __ATOMIC_RELAXED)) \
      RGPU_WARN(__VA_ARGS__);                                \
    return CUDNN_STATUS_NOT_SUPPORTED;                       \
  } while (0)

/* cuDNN's limit on a tensor's element count (2 giga-elements). */
#define ELEMENTS_MAX ((int64_t)INT_MAX)

size_t rgpu_cudnn_type_size(int type) {
  switch (type) {
    case CUDNN_DATA_DOUBLE:
    case CUDNN_DATA_INT64: return 8;
    case CUDNN_DATA_FLOAT:
    case CUDNN_DATA_INT32:
    case CUDNN_DATA_UINT32: return 4;
    case CUDNN_DATA_HALF:
    case CUDNN_DATA_BFLOAT16: return 2;
    case CUDNN_DATA_INT8:
    case CUDNN_DATA_UINT8:
    case CUDNN_DATA_BOOLEAN:
    case CUDNN_DATA_FP8_E4M3:
    case CUDNN_DATA_FP8_E5M2:
    case CUDNN_DATA_FP8_E8M0: return 1;
    default: return 0;
  }
}

/* BAD_PARAM for a value outside cudnnDataType_t; NOT_SUPPORTED (logged)
 * for a type rgpu does not size (vector, sub-byte, complex types). */
static cudnnStatus_t type_check(const char *api, cudnnDataType_t t) {
  if ((int)t < 0 || (int)t > CUDNN_DATA_COMPLEX_FP64) return CUDNN_STATUS_BAD_PARAM;
  if (!rgpu_cudnn_type_size((int)t))
    REFUSE("%s: data type %d is not supported by rgpu; it returns CUDNN_STATUS_NOT_SUPPORTED",
           api, (int)t);
  return CUDNN_STATUS_SUCCESS;
}

/* ---- creation and destruction: one pattern per record kind ------------- */

#define RECORD_KIND(kind, type_t, magic_v, create, destroy)                          \
  RGPU_CUDNN cudnnStatus_t rgpu_cudnn_##create(type_t *d) {                          \
    rgpu_rt_count_call();                                                            \
    if (!d) return CUDNN_STATUS_BAD_PARAM;                                           \
    struct kind *r = calloc(1, sizeof *r);                                           \
    if (!r) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;               \
    r->magic = magic_v;                                                              \
    init_##kind(r);                                                                  \
    *d = r;                                                                          \
    return CUDNN_STATUS_SUCCESS;                                                     \
  }                                                                                  \
  RGPU_CUDNN cudnnStatus_t rgpu_cudnn_##destroy(type_t d) {                          \
    rgpu_rt_count_call();                                                            \
    if (!d) return CUDNN_STATUS_SUCCESS; /* cuDNN ignores a NULL descriptor */      \
    if (d->magic != magic_v) return CUDNN_STATUS_BAD_PARAM;                          \
    d->magic = 0;                                                                    \
    free(d);                                                                         \
    return CUDNN_STATUS_SUCCESS;                                                     \
  }

static void init_cudnnTensorStruct(struct cudnnTensorStruct *r) { (void)r; }
static void init_cudnnFilterStruct(struct cudnnFilterStruct *r) { (void)r; }
/* cuDNN's defaults for a fresh convolution descriptor. */
static void init_cudnnConvolutionStruct(struct cudnnConvolutionStruct *r) {
  r->mode = CUDNN_CONVOLUTION;
  r->compute_type = CUDNN_DATA_FLOAT;
  r->math_type = CUDNN_DEFAULT_MATH;
  r->group_count = 1;
  r->reorder_type = CUDNN_DEFAULT_REORDER;
}
static void init_cudnnActivationStruct(struct cudnnActivationStruct *r) {
  r->mode = CUDNN_ACTIVATION_RELU;
  r->nan_prop = CUDNN_NOT_PROPAGATE_NAN;
}
static void init_cudnnPoolingStruct(struct cudnnPoolingStruct *r) { (void)r; }

RECORD_KIND(cudnnTensorStruct, cudnnTensorDescriptor_t, RGPU_CUDNN_TENSOR_MAGIC,
            cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor)
RECORD_KIND(cudnnFilterStruct, cudnnFilterDescriptor_t, RGPU_CUDNN_FILTER_MAGIC,
            cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor)
RECORD_KIND(cudnnConvolutionStruct, cudnnConvolutionDescriptor_t, RGPU_CUDNN_CONV_MAGIC,
            cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor)
RECORD_KIND(cudnnActivationStruct, cudnnActivationDescriptor_t, RGPU_CUDNN_ACT_MAGIC,
            cudnnCreateActivationDescriptor, cudnnDestroyActivationDescriptor)
RECORD_KIND(cudnnPoolingStruct, cudnnPoolingDescriptor_t, RGPU_CUDNN_POOL_MAGIC,
            cudnnCreatePoolingDescriptor, cudnnDestroyPoolingDescriptor)

struct cudnnTensorStruct *rgpu_cudnn_tensor(cudnnTensorDescriptor_t d) {
  return d && d->magic == RGPU_CUDNN_TENSOR_MAGIC ? d : NULL;
}
struct cudnnFilterStruct *rgpu_cudnn_filter(cudnnFilterDescriptor_t d) {
  return d && d->magic == RGPU_CUDNN_FILTER_MAGIC ? d : NULL;
}
struct cudnnConvolutionStruct *rgpu_cudnn_conv(cudnnConvolutionDescriptor_t d) {
  return d && d->magic == RGPU_CUDNN_CONV_MAGIC ? d : NULL;
}
struct cudnnActivationStruct *rgpu_cudnn_act(cudnnActivationDescriptor_t d) {
  return d && d->magic == RGPU_CUDNN_ACT_MAGIC ? d : NULL;
}
struct cudnnPoolingStruct *rgpu_cudnn_pool(cudnnPoolingDescriptor_t d) {
  return d && d->magic == RGPU_CUDNN_POOL_MAGIC ? d : NULL;
}

/* ---- tensors ------------------------------------------------------------ */

/* Stores a shape after cuDNN's checks: dimensions and strides positive,
 * the element count within 2 giga-elements (NOT_SUPPORTED beyond). */
static cudnnStatus_t tensor_store(struct cudnnTensorStruct *t, cudnnDataType_t type, int nb,
                                  const int *dim, const int *stride) {
  int64_t elems = 1;
  for (int i = 0; i < nb; i++) {
    if (dim[i] <= 0 || stride[i] <= 0) return CUDNN_STATUS_BAD_PARAM;
    elems *= dim[i];
    if (elems > ELEMENTS_MAX) return CUDNN_STATUS_NOT_SUPPORTED;
  }
  t->type = (int)type;
  t->nb_dims = nb;
  for (int i = 0; i < nb; i++) {
    t->dim[i] = dim[i];
    t->stride[i] = stride[i];
  }
  t->set = 1;
  return CUDNN_STATUS_SUCCESS;
}

/* Packed strides of dim[0..nb) in format (NCHW: the last dimension
 * fastest; NHWC: the channel, dimension 1, fastest, then the spatial ones
 * from the last). 0 when a stride would overflow int. */
static int packed_strides(cudnnTensorFormat_t format, int nb, const int *dim, int *stride) {
  int64_t s = 1;
  if (format == CUDNN_TENSOR_NCHW) {
    for (int i = nb - 1; i >= 0; i--) {
      stride[i] = (int)s;
      s *= dim[i] > 0 ? dim[i] : 1;
      if (s > INT_MAX) return 0;
    }
    return 1;
  }
  stride[1] = 1;
  s = dim[1] > 0 ? dim[1] : 1;
  for (int i = nb - 1; i >= 2; i--) {
    stride[i] = (int)s;
    s *= dim[i] > 0 ? dim[i] : 1;
    if (s > INT_MAX) return 0;
  }
  stride[0] = (int)s;
  return 1;
}

static cudnnStatus_t format_check(const char *api, cudnnTensorFormat_t format) {
  if (format == CUDNN_TENSOR_NCHW || format == CUDNN_TENSOR_NHWC) return CUDNN_STATUS_SUCCESS;
  if (format == CUDNN_TENSOR_NCHW_VECT_C)
    REFUSE("%s: CUDNN_TENSOR_NCHW_VECT_C is not supported by rgpu; it returns "
           "CUDNN_STATUS_NOT_SUPPORTED", api);
  return CUDNN_STATUS_BAD_PARAM;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnSetTensorNdDescriptorEx(cudnnTensorDescriptor_t d,
                                                                 cudnnTensorFormat_t format,
                                                                 cudnnDataType_t dataType,
                                                                 int nbDims, const int dimA[]) {
  struct cudnnTensorStruct *t = rgpu_cudnn_tensor(d);
  rgpu_rt_count_call();
  if (!t || !dimA) return CUDNN_STATUS_BAD_PARAM;
  cudnnStatus_t st = format_check("cudnnSetTensorNdDescriptorEx", format);
  if (st) return st;
  if ((st = type_check("cudnnSetTensorNdDescriptorEx", dataType))) return st;
  if (nbDims < 3 || nbDims > RGPU_CUDNN_DIM_MAX) return CUDNN_STATUS_NOT_SUPPORTED;
  int stride[RGPU_CUDNN_DIM_MAX];
  if (!packed_strides(format, nbDims, dimA, stride)) return CUDNN_STATUS_NOT_SUPPORTED;
  return tensor_store(t, dataType, nbDims, dimA, stride);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d,
                                                               cudnnTensorFormat_t format,
                                                               cudnnDataType_t dataType, int n,
                                                               int c, int h, int w) {
  const int dim[4] = {n, c, h, w};
  return rgpu_cudnn_cudnnSetTensorNdDescriptorEx(d, format, dataType, 4, dim);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t d,
                                                               cudnnDataType_t dataType,
                                                               int nbDims, const int dimA[],
                                                               const int strideA[]) {
  struct cudnnTensorStruct *t = rgpu_cudnn_tensor(d);
  rgpu_rt_count_call();
  if (!t || !dimA || !strideA) return CUDNN_STATUS_BAD_PARAM;
  cudnnStatus_t st = type_check("cudnnSetTensorNdDescriptor", dataType);
  if (st) return st;
  if (nbDims < 3 || nbDims > RGPU_CUDNN_DIM_MAX) return CUDNN_STATUS_NOT_SUPPORTED;
  return tensor_store(t, dataType, nbDims, dimA, strideA);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnSetTensor4dDescriptorEx(
    cudnnTensorDescriptor_t d, cudnnDataType_t dataType, int n, int c, int h, int w, int nStride,
    int cStride, int hStride, int wStride) {
  const int dim[4] = {n, c, h, w}, stride[4] = {nStride, cStride, hStride, wStride};
  return rgpu_cudnn_cudnnSetTensorNdDescriptor(d, dataType, 4, dim, stride);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetTensor4dDescriptor(
    const cudnnTensorDescriptor_t d, cudnnDataType_t *dataType, int *n, int *c, int *h, int *w,
    int *nStride, int *cStride, int *hStride, int *wStride) {
  struct cudnnTensorStruct *t = rgpu_cudnn_tensor(d);
  rgpu_rt_count_call();
  if (!t || !t->set || t->nb_dims != 4 || !dataType || !n || !c || !h || !w || !nStride ||
      !cStride || !hStride || !wStride)
    return CUDNN_STATUS_BAD_PARAM;
  *dataType = (cudnnDataType_t)t->type;
  *n = t->dim[0], *c = t->dim[1], *h = t->dim[2], *w = t->dim[3];
  *nStride = t->stride[0], *cStride = t->stride[1], *hStride = t->stride[2],
  *wStride = t->stride[3];
  return CUDNN_STATUS_SUCCESS;
}

/* cuDNN writes min(requested, nbDims) dimensions and strides and reports
 * the full count. */
RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetTensorNdDescriptor(const cudnnTensorDescriptor_t d,
                                                               int nbDimsRequested,
                                                               cudnnDataType_t *dataType,
                                                               int *nbDims, int dimA[],
                                                               int strideA[]) {
  struct cudnnTensorStruct *t = rgpu_cudnn_tensor(d);
  rgpu_rt_count_call();
  if (!t || !t->set || nbDimsRequested < 0 || !dataType || !nbDims ||
      (nbDimsRequested > 0 && (!dimA || !strideA)))
    return CUDNN_STATUS_BAD_PARAM;
  *dataType = (cudnnDataType_t)t->type;
  *nbDims = t->nb_dims;
  for (int i = 0; i < nbDimsRequested && i < t->nb_dims; i++) {
    dimA[i] = t->dim[i];
    strideA[i] = t->stride[i];
  }
  return CUDNN_STATUS_SUCCESS;
}

uint64_t rgpu_cudnn_tensor_extent(const struct cudnnTensorStruct *t) {
  /* The bytes from the first element to one past the last: what a call
   * touches (strides may leave gaps or overlap).  The last element's
   * offset stays below 2^62 (at most 2^31-1 elements, strides below
   * 2^31); the bytes may not: UINT64_MAX then. */
  uint64_t last = 0, bytes;
  for (int i = 0; i < t->nb_dims; i++) last += (uint64_t)(t->dim[i] - 1) * (uint64_t)t->stride[i];
  if (__builtin_mul_overflow(last + 1, (uint64_t)rgpu_cudnn_type_size(t->type), &bytes))
    return UINT64_MAX;
  return bytes;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetTensorSizeInBytes(const cudnnTensorDescriptor_t d,
                                                              size_t *size) {
  struct cudnnTensorStruct *t = rgpu_cudnn_tensor(d);
  rgpu_rt_count_call();
  if (!t || !t->set || !size) return CUDNN_STATUS_BAD_PARAM;
  uint64_t bytes = rgpu_cudnn_tensor_extent(t);
  if (bytes == UINT64_MAX) return CUDNN_STATUS_NOT_SUPPORTED; /* no size_t holds it */
  *size = (size_t)bytes;
  return CUDNN_STATUS_SUCCESS;
}

/* ---- filters ------------------------------------------------------------ */

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnSetFilterNdDescriptor(cudnnFilterDescriptor_t d,
                                                               cudnnDataType_t dataType,
                                                               cudnnTensorFormat_t format,
                                                               int nbDims,
                                                               const int filterDimA[]) {
  struct cudnnFilterStruct *f = rgpu_cudnn_filter(d);
  rgpu_rt_count_call();
  if (!f || !filterDimA) return CUDNN_STATUS_BAD_PARAM;
  cudnnStatus_t st = format_check("cudnnSetFilterNdDescriptor", format);
  if (st) return st;
  if ((st = type_check("cudnnSetFilterNdDescriptor", dataType))) return st;
  if (nbDims < 3 || nbDims > RGPU_CUDNN_DIM_MAX) return CUDNN_STATUS_NOT_SUPPORTED;
  int64_t elems = 1;
  for (int i = 0; i < nbDims; i++) {
    if (filterDimA[i] <= 0) return CUDNN_STATUS_BAD_PARAM;
    elems *= filterDimA[i];
    if (elems > ELEMENTS_MAX) return CUDNN_STATUS_NOT_SUPPORTED;
  }
  f->type = (int)dataType;
  f->format = (int)format;
  f->nb_dims = nbDims;
  for (int i = 0; i < nbDims; i++) f->dim[i] = filterDimA[i];
  f->set = 1;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d,
                                                               cudnnDataType_t dataType,
                                                               cudnnTensorFormat_t format, int k,
                                                               int c, int h, int w) {
  const int dim[4] = {k, c, h, w};
  return rgpu_cudnn_cudnnSetFilterNdDescriptor(d, dataType, format, 4, dim);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetFilter4dDescriptor(const cudnnFilterDescriptor_t d,
                                                               cudnnDataType_t *dataType,
                                                               cudnnTensorFormat_t *format,
                                                               int *k, int *c, int *h, int *w) {
  struct cudnnFilterStruct *f = rgpu_cudnn_filter(d);
  rgpu_rt_count_call();
  if (!f || !f->set || f->nb_dims != 4 || !dataType || !format || !k || !c || !h || !w)
    return CUDNN_STATUS_BAD_PARAM;
  *dataType = (cudnnDataType_t)f->type;
  *format = (cudnnTensorFormat_t)f->format;
  *k = f->dim[0], *c = f->dim[1], *h = f->dim[2], *w = f->dim[3];
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetFilterNdDescriptor(const cudnnFilterDescriptor_t d,
                                                               int nbDimsRequested,
                                                               cudnnDataType_t *dataType,
                                                               cudnnTensorFormat_t *format,
                                                               int *nbDims, int filterDimA[]) {
  struct cudnnFilterStruct *f = rgpu_cudnn_filter(d);
  rgpu_rt_count_call();
  if (!f || !f->set || nbDimsRequested < 0 || !dataType || !format || !nbDims ||
      (nbDimsRequested > 0 && !filterDimA))
    return CUDNN_STATUS_BAD_PARAM;
  *dataType = (cudnnDataType_t)f->type;
  *format = (cudnnTensorFormat_t)f->format;
  *nbDims = f->nb_dims;
  for (int i = 0; i < nbDimsRequested && i < f->nb_dims; i++) filterDimA[i] = f->dim[i];
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetFilterSizeInBytes(const cudnnFilterDescriptor_t d,
                                                              size_t *size) {
  struct cudnnFilterStruct *f = rgpu_cudnn_filter(d);
  rgpu_rt_count_call();
  if (!f || !f->set || !size) return CUDNN_STATUS_BAD_PARAM;
  uint64_t n = rgpu_cudnn_type_size(f->type);
  for (int i = 0; i < f->nb_dims; i++) n *= (uint64_t)f->dim[i];
  *size = (size_t)n;
  return CUDNN_STATUS_SUCCESS;
}

/* ---- convolutions ------------------------------------------------------- */

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnSetConvolutionNdDescriptor(
    cudnnConvolutionDescriptor_t d, int arrayLength, const int padA[], const int filterStrideA[],
    const int dilationA[], cudnnConvolutionMode_t mode, cudnnDataType_t computeType) {
  struct cudnnConvolutionStruct *r = rgpu_cudnn_conv(d);
  rgpu_rt_count_call();
  if (!r || arrayLength <= 0 || !padA || !filterStrideA || !dilationA) return CUDNN_STATUS_BAD_PARAM;
  if (arrayLength > RGPU_CUDNN_CONV_DIMS_MAX) return CUDNN_STATUS_NOT_SUPPORTED;
  if (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION) return CUDNN_STATUS_BAD_PARAM;
  cudnnStatus_t st = type_check("cudnnSetConvolutionNdDescriptor", computeType);
  if (st) return st;
  for (int i = 0; i < arrayLength; i++)
    if (padA[i] < 0 || filterStrideA[i] <= 0 || dilationA[i] <= 0) return CUDNN_STATUS_BAD_PARAM;
  r->nb_spatial = arrayLength;
  for (int i = 0; i < arrayLength; i++) {
    r->pad[i] = padA[i];
    r->stride[i] = filterStrideA[i];
    r->dilation[i] = dilationA[i];
  }
  r->mode = (int)mode;
  r->compute_type = (int)computeType;
  r->set = 1;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnSetConvolution2dDescriptor(
    cudnnConvolutionDescriptor_t d, int pad_h, int pad_w, int u, int v, int dilation_h,
    int dilation_w, cudnnConvolutionMode_t mode, cudnnDataType_t computeType) {
  const int pad[2] = {pad_h, pad_w}, stride[2] = {u, v}, dil[2] = {dilation_h, dilation_w};
  return rgpu_cudnn_cudnnSetConvolutionNdDescriptor(d, 2, pad, stride, dil, mode, computeType);
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetConvolution2dDescriptor(
    const cudnnConvolutionDescriptor_t d, int *pad_h, int *pad_w, int *u, int *v, int *dilation_h,
    int *dilation_w, cudnnConvolutionMode_t *mode, cudnnDataType_t *computeType) {
  struct cudnnConvolutionStruct *r = rgpu_cudnn_conv(d);
  rgpu_rt_count_call();
  if (!r || !r->set || r->nb_spatial != 2 || !pad_h || !pad_w || !u || !v || !dilation_h ||
      !dilation_w || !mode || !computeType)
    return CUDNN_STATUS_BAD_PARAM;
  *pad_h = r->pad[0], *pad_w = r->pad[1], *u = r->stride[0], *v = r->stride[1];
  *dilation_h = r->dilation[0], *dilation_w = r->dilation[1];
  *mode = (cudnnConvolutionMode_t)r->mode;
  *computeType = (cudnnDataType_t)r->compute_type;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetConvolutionNdDescriptor(
    const cudnnConvolutionDescriptor_t d, int arrayLengthRequested, int *arrayLength, int padA[],
    int strideA[], int dilationA[], cudnnConvolutionMode_t *mode, cudnnDataType_t *computeType) {
  struct cudnnConvolutionStruct *r = rgpu_cudnn_conv(d);
  rgpu_rt_count_call();
  if (!r || !r->set || arrayLengthRequested < 0 || !arrayLength || !mode || !computeType ||
      (arrayLengthRequested > 0 && (!padA || !strideA || !dilationA)))
    return CUDNN_STATUS_BAD_PARAM;
  *arrayLength = r->nb_spatial;
  for (int i = 0; i < arrayLengthRequested && i < r->nb_spatial; i++) {
    padA[i] = r->pad[i];
    strideA[i] = r->stride[i];
    dilationA[i] = r->dilation[i];
  }
  *mode = (cudnnConvolutionMode_t)r->mode;
  *computeType = (cudnnDataType_t)r->compute_type;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d,
                                                                cudnnMathType_t mathType) {
  struct cudnnConvolutionStruct *r = rgpu_cudnn_conv(d);
  rgpu_rt_count_call();
  if (!r || (int)mathType < CUDNN_DEFAULT_MATH || (int)mathType > CUDNN_FMA_MATH)
    return CUDNN_STATUS_BAD_PARAM;
  r->math_type = (int)mathType;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetConvolutionMathType(cudnnConvolutionDescriptor_t d,
                                                                cudnnMathType_t *mathType) {
  struct cudnnConvolutionStruct *r = rgpu_cudnn_conv(d);
  rgpu_rt_count_call();
  if (!r || !mathType) return CUDNN_STATUS_BAD_PARAM;
  *mathType = (cudnnMathType_t)r->math_type;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d,
                                                                  int groupCount) {
  struct cudnnConvolutionStruct *r = rgpu_cudnn_conv(d);
  rgpu_rt_count_call();
  if (!r || groupCount <= 0) return CUDNN_STATUS_BAD_PARAM;
  r->group_count = groupCount;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetConvolutionGroupCount(cudnnConvolutionDescriptor_t d,
                                                                  int *groupCount) {
  struct cudnnConvolutionStruct *r = rgpu_cudnn_conv(d);
  rgpu_rt_count_call();
  if (!r || !groupCount) return CUDNN_STATUS_BAD_PARAM;
  *groupCount = r->group_count;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnSetConvolutionReorderType(cudnnConvolutionDescriptor_t d,
                                                                   cudnnReorderType_t reorderType) {
  struct cudnnConvolutionStruct *r = rgpu_cudnn_conv(d);
  rgpu_rt_count_call();
  if (!r || (reorderType != CUDNN_DEFAULT_REORDER && reorderType != CUDNN_NO_REORDER))
    return CUDNN_STATUS_BAD_PARAM;
  r->reorder_type = (int)reorderType;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetConvolutionReorderType(cudnnConvolutionDescriptor_t d,
                                                                   cudnnReorderType_t *reorderType) {
  struct cudnnConvolutionStruct *r = rgpu_cudnn_conv(d);
  rgpu_rt_count_call();
  if (!r || !reorderType) return CUDNN_STATUS_BAD_PARAM;
  *reorderType = (cudnnReorderType_t)r->reorder_type;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t rgpu_cudnn_conv_output_dims(const struct cudnnConvolutionStruct *conv,
                                          const struct cudnnTensorStruct *x,
                                          const struct cudnnFilterStruct *w, int nb, int *out) {
  /* cuDNN's formula, per spatial dimension i:
   *   out = 1 + (in + 2 pad - ((filter - 1) dilation + 1)) / stride
   * with the batch from x and the channels from the filter's k; x's
   * channels must be the filter's times the group count. */
  if (!conv || !conv->set || !x || !x->set || !w || !w->set) return CUDNN_STATUS_BAD_PARAM;
  if (x->nb_dims != w->nb_dims || x->nb_dims != conv->nb_spatial + 2 || nb != x->nb_dims)
    return CUDNN_STATUS_BAD_PARAM;
  if ((int64_t)w->dim[1] * conv->group_count != x->dim[1] || w->dim[0] % conv->group_count)
    return CUDNN_STATUS_BAD_PARAM;
  out[0] = x->dim[0];
  out[1] = w->dim[0];
  for (int i = 0; i < conv->nb_spatial; i++) {
    int64_t span = (int64_t)(w->dim[i + 2] - 1) * conv->dilation[i] + 1;
    int64_t room = (int64_t)x->dim[i + 2] + 2 * (int64_t)conv->pad[i] - span;
    if (room < 0) return CUDNN_STATUS_BAD_PARAM;
    out[i + 2] = (int)(1 + room / conv->stride[i]);
  }
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetConvolutionNdForwardOutputDim(
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t inputTensorDesc,
    const cudnnFilterDescriptor_t filterDesc, int nbDims, int tensorOuputDimA[]) {
  rgpu_rt_count_call();
  if (!tensorOuputDimA || nbDims < 3 || nbDims > RGPU_CUDNN_DIM_MAX) return CUDNN_STATUS_BAD_PARAM;
  int out[RGPU_CUDNN_DIM_MAX];
  cudnnStatus_t st = rgpu_cudnn_conv_output_dims(rgpu_cudnn_conv(convDesc),
                                                 rgpu_cudnn_tensor(inputTensorDesc),
                                                 rgpu_cudnn_filter(filterDesc), nbDims, out);
  if (st) return st;
  memcpy(tensorOuputDimA, out, sizeof out[0] * (size_t)nbDims);
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetConvolution2dForwardOutputDim(
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t inputTensorDesc,
    const cudnnFilterDescriptor_t filterDesc, int *n, int *c, int *h, int *w) {
  rgpu_rt_count_call();
  if (!n || !c || !h || !w) return CUDNN_STATUS_BAD_PARAM;
  int out[4];
  cudnnStatus_t st = rgpu_cudnn_conv_output_dims(rgpu_cudnn_conv(convDesc),
                                                 rgpu_cudnn_tensor(inputTensorDesc),
                                                 rgpu_cudnn_filter(filterDesc), 4, out);
  if (st) return st;
  *n = out[0], *c = out[1], *h = out[2], *w = out[3];
  return CUDNN_STATUS_SUCCESS;
}

/* ---- activation --------------------------------------------------------- */

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnSetActivationDescriptor(
    cudnnActivationDescriptor_t d, cudnnActivationMode_t mode, cudnnNanPropagation_t reluNanOpt,
    double coef) {
  struct cudnnActivationStruct *a = rgpu_cudnn_act(d);
  rgpu_rt_count_call();
  if (!a || (int)mode < CUDNN_ACTIVATION_SIGMOID || (int)mode > CUDNN_ACTIVATION_SWISH ||
      (reluNanOpt != CUDNN_NOT_PROPAGATE_NAN && reluNanOpt != CUDNN_PROPAGATE_NAN))
    return CUDNN_STATUS_BAD_PARAM;
  a->mode = (int)mode;
  a->nan_prop = (int)reluNanOpt;
  a->coef = coef;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetActivationDescriptor(
    const cudnnActivationDescriptor_t d, cudnnActivationMode_t *mode,
    cudnnNanPropagation_t *reluNanOpt, double *coef) {
  struct cudnnActivationStruct *a = rgpu_cudnn_act(d);
  rgpu_rt_count_call();
  if (!a || !mode || !reluNanOpt || !coef) return CUDNN_STATUS_BAD_PARAM;
  *mode = (cudnnActivationMode_t)a->mode;
  *reluNanOpt = (cudnnNanPropagation_t)a->nan_prop;
  *coef = a->coef;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnSetActivationDescriptorSwishBeta(
    cudnnActivationDescriptor_t d, double swish_beta) {
  struct cudnnActivationStruct *a = rgpu_cudnn_act(d);
  rgpu_rt_count_call();
  if (!a) return CUDNN_STATUS_BAD_PARAM;
  a->swish_beta = swish_beta;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetActivationDescriptorSwishBeta(
    cudnnActivationDescriptor_t d, double *swish_beta) {
  struct cudnnActivationStruct *a = rgpu_cudnn_act(d);
  rgpu_rt_count_call();
  if (!a || !swish_beta) return CUDNN_STATUS_BAD_PARAM;
  *swish_beta = a->swish_beta;
  return CUDNN_STATUS_SUCCESS;
}

/* ---- pooling ------------------------------------------------------------ */

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnSetPooling2dDescriptor(
    cudnnPoolingDescriptor_t d, cudnnPoolingMode_t mode, cudnnNanPropagation_t maxpoolingNanOpt,
    int windowHeight, int windowWidth, int verticalPadding, int horizontalPadding,
    int verticalStride, int horizontalStride) {
  struct cudnnPoolingStruct *p = rgpu_cudnn_pool(d);
  rgpu_rt_count_call();
  if (!p || (int)mode < CUDNN_POOLING_MAX || (int)mode > CUDNN_POOLING_MAX_DETERMINISTIC ||
      (maxpoolingNanOpt != CUDNN_NOT_PROPAGATE_NAN && maxpoolingNanOpt != CUDNN_PROPAGATE_NAN) ||
      windowHeight <= 0 || windowWidth <= 0 || verticalPadding < 0 || horizontalPadding < 0 ||
      verticalStride <= 0 || horizontalStride <= 0)
    return CUDNN_STATUS_BAD_PARAM;
  *p = (struct cudnnPoolingStruct){.magic = RGPU_CUDNN_POOL_MAGIC,
                                   .set = 1,
                                   .mode = (int)mode,
                                   .nan_prop = (int)maxpoolingNanOpt,
                                   .nb_spatial = 2,
                                   .window = {windowHeight, windowWidth},
                                   .pad = {verticalPadding, horizontalPadding},
                                   .stride = {verticalStride, horizontalStride}};
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetPooling2dDescriptor(
    const cudnnPoolingDescriptor_t d, cudnnPoolingMode_t *mode,
    cudnnNanPropagation_t *maxpoolingNanOpt, int *windowHeight, int *windowWidth,
    int *verticalPadding, int *horizontalPadding, int *verticalStride, int *horizontalStride) {
  struct cudnnPoolingStruct *p = rgpu_cudnn_pool(d);
  rgpu_rt_count_call();
  if (!p || !p->set || p->nb_spatial != 2 || !mode || !maxpoolingNanOpt || !windowHeight ||
      !windowWidth || !verticalPadding || !horizontalPadding || !verticalStride ||
      !horizontalStride)
    return CUDNN_STATUS_BAD_PARAM;
  *mode = (cudnnPoolingMode_t)p->mode;
  *maxpoolingNanOpt = (cudnnNanPropagation_t)p->nan_prop;
  *windowHeight = p->window[0], *windowWidth = p->window[1];
  *verticalPadding = p->pad[0], *horizontalPadding = p->pad[1];
  *verticalStride = p->stride[0], *horizontalStride = p->stride[1];
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t rgpu_cudnn_pool_runnable(const struct cudnnPoolingStruct *p, const char *api,
                                       int *logged) {
  if (!p->set || p->nb_spatial == 2) return CUDNN_STATUS_SUCCESS;
  if (!__atomic_exchange_n(logged, 1, __ATOMIC_RELAXED))
    RGPU_WARN("%s of %d-d pooling is not supported by rgpu (2-d is); it returns "
              "CUDNN_STATUS_NOT_SUPPORTED", api, p->nb_spatial);
  return CUDNN_STATUS_NOT_SUPPORTED;
}

/* The pooled dimensions of x's output, cuDNN's formula: out = 1 + (in +
 * 2 pad - window) / stride.  x has the descriptor's dimensions + 2. */
static cudnnStatus_t pool_out_dims(const struct cudnnPoolingStruct *p,
                                   const struct cudnnTensorStruct *x, int *out) {
  for (int i = 0; i < p->nb_spatial; i++) {
    int64_t room = (int64_t)x->dim[i + 2] + 2 * (int64_t)p->pad[i] - p->window[i];
    if (room < 0) return CUDNN_STATUS_BAD_PARAM;
    out[i] = (int)(1 + room / p->stride[i]);
  }
  return CUDNN_STATUS_SUCCESS;
}

/* The Nd forms (what frameworks written against cuDNN's general API call,
 * 2-d pooling included): the same record.  Pooling of other than two
 * dimensions is described but not computed (cudnnPoolingForward/Backward
 * answer NOT_SUPPORTED for it). */
RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnSetPoolingNdDescriptor(
    cudnnPoolingDescriptor_t d, const cudnnPoolingMode_t mode,
    const cudnnNanPropagation_t maxpoolingNanOpt, int nbDims, const int windowDimA[],
    const int paddingA[], const int strideA[]) {
  struct cudnnPoolingStruct *p = rgpu_cudnn_pool(d);
  rgpu_rt_count_call();
  if (!p || (int)mode < CUDNN_POOLING_MAX || (int)mode > CUDNN_POOLING_MAX_DETERMINISTIC ||
      (maxpoolingNanOpt != CUDNN_NOT_PROPAGATE_NAN && maxpoolingNanOpt != CUDNN_PROPAGATE_NAN) ||
      nbDims < 1 || nbDims > RGPU_CUDNN_CONV_DIMS_MAX || !windowDimA || !paddingA || !strideA)
    return CUDNN_STATUS_BAD_PARAM;
  for (int i = 0; i < nbDims; i++)
    if (windowDimA[i] <= 0 || paddingA[i] < 0 || strideA[i] <= 0) return CUDNN_STATUS_BAD_PARAM;
  *p = (struct cudnnPoolingStruct){.magic = RGPU_CUDNN_POOL_MAGIC,
                                   .set = 1,
                                   .mode = (int)mode,
                                   .nan_prop = (int)maxpoolingNanOpt,
                                   .nb_spatial = nbDims};
  for (int i = 0; i < nbDims; i++) {
    p->window[i] = windowDimA[i];
    p->pad[i] = paddingA[i];
    p->stride[i] = strideA[i];
  }
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetPoolingNdDescriptor(
    const cudnnPoolingDescriptor_t d, int nbDimsRequested, cudnnPoolingMode_t *mode,
    cudnnNanPropagation_t *maxpoolingNanOpt, int *nbDims, int windowDimA[], int paddingA[],
    int strideA[]) {
  struct cudnnPoolingStruct *p = rgpu_cudnn_pool(d);
  rgpu_rt_count_call();
  if (!p || !p->set || nbDimsRequested < 0 || !mode || !maxpoolingNanOpt || !nbDims ||
      (nbDimsRequested > 0 && (!windowDimA || !paddingA || !strideA)))
    return CUDNN_STATUS_BAD_PARAM;
  *mode = (cudnnPoolingMode_t)p->mode;
  *maxpoolingNanOpt = (cudnnNanPropagation_t)p->nan_prop;
  *nbDims = p->nb_spatial;
  for (int i = 0; i < nbDimsRequested && i < p->nb_spatial; i++) {
    windowDimA[i] = p->window[i];
    paddingA[i] = p->pad[i];
    strideA[i] = p->stride[i];
  }
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetPoolingNdForwardOutputDim(
    const cudnnPoolingDescriptor_t poolingDesc, const cudnnTensorDescriptor_t inputTensorDesc,
    int nbDims, int outputTensorDimA[]) {
  struct cudnnPoolingStruct *p = rgpu_cudnn_pool(poolingDesc);
  struct cudnnTensorStruct *x = rgpu_cudnn_tensor(inputTensorDesc);
  rgpu_rt_count_call();
  /* nbDims is the tensor's: batch, channels and the pooled dimensions. */
  if (!p || !p->set || !x || !x->set || !outputTensorDimA || nbDims != x->nb_dims ||
      nbDims != p->nb_spatial + 2)
    return CUDNN_STATUS_BAD_PARAM;
  int out[RGPU_CUDNN_CONV_DIMS_MAX];
  if (pool_out_dims(p, x, out)) return CUDNN_STATUS_BAD_PARAM;
  outputTensorDimA[0] = x->dim[0];
  outputTensorDimA[1] = x->dim[1];
  for (int i = 0; i < p->nb_spatial; i++) outputTensorDimA[i + 2] = out[i];
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetPooling2dForwardOutputDim(
    const cudnnPoolingDescriptor_t poolingDesc, const cudnnTensorDescriptor_t inputTensorDesc,
    int *n, int *c, int *h, int *w) {
  struct cudnnPoolingStruct *p = rgpu_cudnn_pool(poolingDesc);
  struct cudnnTensorStruct *x = rgpu_cudnn_tensor(inputTensorDesc);
  rgpu_rt_count_call();
  if (!p || !p->set || p->nb_spatial != 2 || !x || !x->set || x->nb_dims != 4 || !n || !c ||
      !h || !w)
    return CUDNN_STATUS_BAD_PARAM;
  int out[2];
  if (pool_out_dims(p, x, out)) return CUDNN_STATUS_BAD_PARAM;
  *n = x->dim[0], *c = x->dim[1], *h = out[0], *w = out[1];
  return CUDNN_STATUS_SUCCESS;
}
