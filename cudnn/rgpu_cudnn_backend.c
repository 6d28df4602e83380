/* The backend API's descriptors, kept on the client: create, set, get,
 * destroy and the finalize of every descriptor that needs no answer from
 * the GPU cost no message.  PyTorch makes ~300 of these calls per new
 * convolution shape; each a round trip would cost more than the
 * convolution.  The engine heuristics and execution plan finalize in
 * rgpu_cudnn_backend_remote.c. */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_cudart.h"
#include "rgpu_cudnn_backend.h"
#include "rgpu_log.h"

/* One lock for every backend record: records are shared between
 * descriptors by reference, and frameworks build graphs from several
 * threads; the work under it is a few copies. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
void rgpu_cudnn_backend_lock(void) { pthread_mutex_lock(&g_lock); }
void rgpu_cudnn_backend_unlock(void) { pthread_mutex_unlock(&g_lock); }

#define REFUSE(...)                                          \
  do {                                                       \
    static int logged_;                                      \
    if (!__atomic_exchange_n(&logged_, 1, __ATOMIC_RELAXED)) \
      RGPU_WARN(__VA_ARGS__);                                \
  } while (0)

/* The element size of each cudnnBackendAttributeType_t, by the C type
 * cudnn_graph.h documents for it: the scalar types by their C type, every
 * enum-valued type as its enum (an int: C gives enums int's size), the
 * pointers (a handle, a device pointer in a variant pack, another backend
 * descriptor) as pointers, a fraction as its two int64_t. */
size_t rgpu_cudnn_battr_elem_size(int type) {
  switch (type) {
    case CUDNN_TYPE_HANDLE: return sizeof(cudnnHandle_t);
    case CUDNN_TYPE_VOID_PTR: return sizeof(void *);
    case CUDNN_TYPE_BACKEND_DESCRIPTOR: return sizeof(cudnnBackendDescriptor_t);
    case CUDNN_TYPE_BOOLEAN: return sizeof(bool);
    case CUDNN_TYPE_INT64: return sizeof(int64_t);
    case CUDNN_TYPE_INT32: return sizeof(int32_t);
    case CUDNN_TYPE_FLOAT: return sizeof(float);
    case CUDNN_TYPE_DOUBLE: return sizeof(double);
    case CUDNN_TYPE_CHAR: return sizeof(char);
    case CUDNN_TYPE_FRACTION: return sizeof(cudnnFraction_t);
    case CUDNN_TYPE_DATA_TYPE:               /* cudnnDataType_t */
    case CUDNN_TYPE_CONVOLUTION_MODE:        /* cudnnConvolutionMode_t */
    case CUDNN_TYPE_HEUR_MODE:               /* cudnnBackendHeurMode_t */
    case CUDNN_TYPE_KNOB_TYPE:               /* cudnnBackendKnobType_t */
    case CUDNN_TYPE_NAN_PROPOGATION:         /* cudnnNanPropagation_t */
    case CUDNN_TYPE_NUMERICAL_NOTE:          /* cudnnBackendNumericalNote_t */
    case CUDNN_TYPE_LAYOUT_TYPE:             /* cudnnBackendLayoutType_t */
    case CUDNN_TYPE_ATTRIB_NAME:             /* cudnnBackendAttributeName_t */
    case CUDNN_TYPE_POINTWISE_MODE:          /* cudnnPointwiseMode_t */
    case CUDNN_TYPE_GENSTATS_MODE:           /* cudnnGenStatsMode_t */
    case CUDNN_TYPE_BN_FINALIZE_STATS_MODE:  /* cudnnBnFinalizeStatsMode_t */
    case CUDNN_TYPE_REDUCTION_OPERATOR_TYPE: /* cudnnReduceTensorOp_t */
    case CUDNN_TYPE_BEHAVIOR_NOTE:           /* cudnnBackendBehaviorNote_t */
    case CUDNN_TYPE_TENSOR_REORDERING_MODE:  /* cudnnBackendTensorReordering_t */
    case CUDNN_TYPE_RESAMPLE_MODE:           /* cudnnResampleMode_t */
    case CUDNN_TYPE_PADDING_MODE:            /* cudnnPaddingMode_t */
    case CUDNN_TYPE_SIGNAL_MODE:             /* cudnnSignalMode_t */
    case CUDNN_TYPE_NORM_MODE:               /* cudnnBackendNormMode_t */
    case CUDNN_TYPE_NORM_FWD_PHASE:          /* cudnnBackendNormFwdPhase_t */
    case CUDNN_TYPE_RNG_DISTRIBUTION:        /* cudnnRngDistribution_t */
    case CUDNN_TYPE_MOE_GROUPED_MATMUL_MODE: /* cudnnMoeGroupedMatmulMode_t */
      return sizeof(int);
    default: return 0;
  }
}

/* ---- records and references -------------------------------------------- */

struct rgpu_cudnn_bdesc *rgpu_cudnn_bdesc_new(int type) {
  struct rgpu_cudnn_bdesc *d = calloc(1, sizeof *d);
  if (!d) return NULL;
  d->magic = RGPU_CUDNN_BDESC_MAGIC;
  d->type = type;
  d->refs = 1;
  return d;
}

static void attr_clear(struct rgpu_cudnn_battr *a) {
  if (a->type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
    for (int64_t i = 0; i < a->count; i++)
      rgpu_cudnn_bdesc_unref(((struct rgpu_cudnn_bdesc **)a->data)[i]);
  free(a->data);
  a->data = NULL;
  a->count = 0;
}

void rgpu_cudnn_bdesc_unref(struct rgpu_cudnn_bdesc *d) {
  if (!d || --d->refs > 0) return;
  for (int i = 0; i < d->nattr; i++) attr_clear(&d->attr[i]);
  free(d->attr);
  free(d->graph);
  free(d->by_value);
  d->magic = 0;
  free(d);
}

struct rgpu_cudnn_bdesc *rgpu_cudnn_bdesc_of(cudnnBackendDescriptor_t p) {
  struct rgpu_cudnn_bdesc *d = p;
  if (!d || d->magic != RGPU_CUDNN_BDESC_MAGIC || d->user_destroyed) return NULL;
  return d;
}

const struct rgpu_cudnn_battr *rgpu_cudnn_bdesc_find(const struct rgpu_cudnn_bdesc *d,
                                                      int64_t name) {
  for (int i = 0; i < d->nattr; i++)
    if (d->attr[i].name == name) return &d->attr[i];
  return NULL;
}

cudnnStatus_t rgpu_cudnn_bdesc_store(struct rgpu_cudnn_bdesc *d, int64_t name, int type,
                                     int64_t count, const void *elems) {
  size_t es = rgpu_cudnn_battr_elem_size(type);
  void *copy = NULL;
  if (count > 0) {
    copy = malloc((size_t)count * es);
    if (!copy) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
    memcpy(copy, elems, (size_t)count * es);
  }
  struct rgpu_cudnn_battr *a = (struct rgpu_cudnn_battr *)rgpu_cudnn_bdesc_find(d, name);
  if (!a) {
    if (d->nattr == d->cap) {
      int cap = d->cap ? 2 * d->cap : 8;
      struct rgpu_cudnn_battr *grown = realloc(d->attr, (size_t)cap * sizeof *grown);
      if (!grown) {
        free(copy);
        return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
      }
      d->attr = grown;
      d->cap = cap;
    }
    a = &d->attr[d->nattr++];
    memset(a, 0, sizeof *a);
    a->name = name;
  }
  /* References first, then release the old value: setting the same
   * descriptor again must not free it in between. */
  if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
    for (int64_t i = 0; i < count; i++) ((struct rgpu_cudnn_bdesc **)copy)[i]->refs++;
  attr_clear(a);
  a->type = type;
  a->count = count;
  a->data = copy;
  return CUDNN_STATUS_SUCCESS;
}

/* ---- the API ------------------------------------------------------------ */

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnBackendCreateDescriptor(
    cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t *out) {
  rgpu_rt_count_call();
  if (!out) return CUDNN_STATUS_BAD_PARAM;
  if ((int)type < 0 || (int)type > CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR)
    return CUDNN_STATUS_BAD_PARAM;
  struct rgpu_cudnn_bdesc *d = rgpu_cudnn_bdesc_new((int)type);
  if (!d) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
  *out = d;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t p) {
  rgpu_rt_count_call();
  if (!p) return CUDNN_STATUS_SUCCESS; /* as free(NULL) */
  pthread_mutex_lock(&g_lock);
  struct rgpu_cudnn_bdesc *d = rgpu_cudnn_bdesc_of(p);
  if (d) {
    d->user_destroyed = 1;
    rgpu_cudnn_bdesc_unref(d);
  }
  pthread_mutex_unlock(&g_lock);
  return d ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}

/* cudnnBackendInitialize (deprecated): resets a descriptor to its created
 * state. */
RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnBackendInitialize(cudnnBackendDescriptor_t p) {
  rgpu_rt_count_call();
  pthread_mutex_lock(&g_lock);
  struct rgpu_cudnn_bdesc *d = rgpu_cudnn_bdesc_of(p);
  if (d) {
    for (int i = 0; i < d->nattr; i++) attr_clear(&d->attr[i]);
    d->nattr = 0;
    d->finalized = 0;
  }
  pthread_mutex_unlock(&g_lock);
  return d ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnBackendSetAttribute(
    cudnnBackendDescriptor_t p, cudnnBackendAttributeName_t name,
    cudnnBackendAttributeType_t type, int64_t count, const void *elems) {
  rgpu_rt_count_call();
  size_t es = rgpu_cudnn_battr_elem_size((int)type);
  if (!es || count < 0 || (count > 0 && !elems) || count > (int64_t)(SIZE_MAX / 2 / es))
    return CUDNN_STATUS_BAD_PARAM;
  cudnnStatus_t st;
  pthread_mutex_lock(&g_lock);
  struct rgpu_cudnn_bdesc *d = rgpu_cudnn_bdesc_of(p);
  if (!d) {
    st = CUDNN_STATUS_BAD_PARAM;
    goto out;
  }
  /* cuDNN: a finalized descriptor is read-only. */
  if (d->finalized) {
    st = CUDNN_STATUS_NOT_INITIALIZED;
    goto out;
  }
  struct rgpu_cudnn_bdesc **refs = NULL;
  if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
    /* Every descriptor set into another must be a live, finalized one
     * (cuDNN copies its finalized content). */
    refs = malloc((size_t)count * sizeof *refs + 1);
    if (!refs) {
      st = CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
      goto out;
    }
    for (int64_t i = 0; i < count; i++) {
      refs[i] = rgpu_cudnn_bdesc_of(((const cudnnBackendDescriptor_t *)elems)[i]);
      if (!refs[i] || !refs[i]->finalized || refs[i] == d) {
        free(refs);
        st = CUDNN_STATUS_BAD_PARAM;
        goto out;
      }
    }
    elems = refs;
  }
  st = rgpu_cudnn_bdesc_store(d, (int64_t)name, (int)type, count, elems);
  free(refs);
out:
  /* Frameworks try engines and attributes until one answers: refusals are
   * part of normal operation, so they are logged at debug level only. */
  if (st)
    RGPU_DEBUG("cudnnBackendSetAttribute(descriptor type %d, attribute %d, type %d, count %lld): "
               "status %d", d ? d->type : -1, (int)name, (int)type, (long long)count, (int)st);
  pthread_mutex_unlock(&g_lock);
  return st;
}

/* Copies a record's content into the program's descriptor dst (cuDNN's
 * way of answering a descriptor-valued attribute: the program passes
 * descriptors it created, of the right type, and cuDNN fills them in). */
static cudnnStatus_t copy_into(struct rgpu_cudnn_bdesc *dst, const struct rgpu_cudnn_bdesc *src) {
  if (dst == src) return CUDNN_STATUS_SUCCESS;
  if (dst->type != src->type) return CUDNN_STATUS_BAD_PARAM;
  for (int i = 0; i < dst->nattr; i++) attr_clear(&dst->attr[i]);
  dst->nattr = 0;
  for (int i = 0; i < src->nattr; i++) {
    const struct rgpu_cudnn_battr *a = &src->attr[i];
    cudnnStatus_t st = rgpu_cudnn_bdesc_store(dst, a->name, a->type, a->count, a->data);
    if (st != CUDNN_STATUS_SUCCESS) return st;
  }
  dst->finalized = src->finalized;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnBackendGetAttribute(
    cudnnBackendDescriptor_t const p, cudnnBackendAttributeName_t name,
    cudnnBackendAttributeType_t type, int64_t requested, int64_t *count, void *elems) {
  int entered = 0; /* a round trip counted the call */
  size_t es = rgpu_cudnn_battr_elem_size((int)type);
  /* A NULL array asks for the count only, whatever is requested: cuDNN's
   * frontend reads engine notes that way (requested = the note types'
   * count, then again into a vector of the count it got, NULL when 0). */
  if (!es || requested < 0) {
    rgpu_rt_count_call();
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (!elems) requested = 0;
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  pthread_mutex_lock(&g_lock);
  struct rgpu_cudnn_bdesc *d = rgpu_cudnn_bdesc_of(p);
  const struct rgpu_cudnn_battr *a = d ? rgpu_cudnn_bdesc_find(d, (int64_t)name) : NULL;
  /* How many engines cuDNN has for a graph is the server's answer, asked
   * when a program wants it (cuDNN's frontend, before making an engine by
   * index), not at every finalize. */
  if (d && d->type == CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR &&
      name == CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT) {
    int64_t n = 0;
    if (type != CUDNN_TYPE_INT64 || !d->finalized)
      st = CUDNN_STATUS_BAD_PARAM;
    else if (!(st = rgpu_cudnn_backend_engine_count(d, &n, &entered))) {
      if (count) *count = 1;
      if (requested > 0) memcpy(elems, &n, sizeof n);
    }
    goto out;
  }
  /* cuDNN's answers about an engine or config the program made itself (by
   * global index), which no heuristics answer brought: asked of the server
   * once per content, then kept on the record. */
  if (!a && d && d->finalized &&
      ((d->type == CUDNN_BACKEND_ENGINE_DESCRIPTOR &&
        (name == CUDNN_ATTR_ENGINE_NUMERICAL_NOTE || name == CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE)) ||
       (d->type == CUDNN_BACKEND_ENGINECFG_DESCRIPTOR &&
        (name == CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE ||
         name == CUDNN_ATTR_ENGINECFG_SHARED_MEMORY_USED)))) {
    if ((st = rgpu_cudnn_backend_info(d, &entered))) goto out;
    a = rgpu_cudnn_bdesc_find(d, (int64_t)name);
  }
  /* A config made without knob choices has none: an empty list, not an
   * error (the frontend reads them to tag every plan). */
  if (!a && d && d->type == CUDNN_BACKEND_ENGINECFG_DESCRIPTOR &&
      name == CUDNN_ATTR_ENGINECFG_KNOB_CHOICES && type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
    if (count) *count = 0;
    goto out;
  }
  /* An attribute never set, or asked as another type, is a bad parameter
   * (cuDNN's answer for both). */
  if (!a || a->type != (int)type) {
    st = CUDNN_STATUS_BAD_PARAM;
    goto out;
  }
  if (count) *count = a->count;
  int64_t n = requested < a->count ? requested : a->count;
  if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
    for (int64_t i = 0; i < n && st == CUDNN_STATUS_SUCCESS; i++) {
      struct rgpu_cudnn_bdesc *dst = rgpu_cudnn_bdesc_of(((cudnnBackendDescriptor_t *)elems)[i]);
      st = dst ? copy_into(dst, ((struct rgpu_cudnn_bdesc **)a->data)[i])
               : CUDNN_STATUS_BAD_PARAM;
    }
  } else if (n > 0) {
    memcpy(elems, a->data, (size_t)n * es);
  }
out:
  if (st)
    RGPU_DEBUG("cudnnBackendGetAttribute(descriptor type %d, attribute %d, type %d, requested "
               "%lld): status %d", d ? d->type : -1, (int)name, (int)type, (long long)requested,
               (int)st);
  pthread_mutex_unlock(&g_lock);
  if (!entered) rgpu_rt_count_call();
  return st;
}

/* ---- finalize: cuDNN's required attributes, checked locally ------------ */

/* The attributes cuDNN requires of a descriptor type before it finalizes
 * (the backend documentation's "required attributes"), for the types
 * finalized on the client. */
struct required {
  int type;
  int64_t attrs[8]; /* 0-terminated after the first (a name may be 0) */
  int n;
};
static const struct required k_required[] = {
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR,
     {CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT,
      CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_ATTR_TENSOR_STRIDES},
     5},
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR,
     {CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_ATTR_CONVOLUTION_CONV_MODE,
      CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_ATTR_CONVOLUTION_DILATIONS,
      CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS,
      CUDNN_ATTR_CONVOLUTION_POST_PADDINGS},
     7},
    {CUDNN_BACKEND_POINTWISE_DESCRIPTOR, {CUDNN_ATTR_POINTWISE_MODE}, 1},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
     {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
      CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y},
     4},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
     {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
      CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
      CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY},
     4},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
     {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
      CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
      CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
      CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY},
     4},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR,
     {CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
      CUDNN_ATTR_OPERATION_POINTWISE_YDESC},
     3},
    {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR,
     {CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_ATTR_OPERATIONGRAPH_OPS},
     2},
    {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR,
     {CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS},
     2},
    {CUDNN_BACKEND_ENGINE_DESCRIPTOR,
     {CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_ATTR_ENGINE_GLOBAL_INDEX},
     2},
    {CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, {CUDNN_ATTR_ENGINECFG_ENGINE}, 1},
    {CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR,
     {CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE},
     2},
    /* Descriptors whose content is only data, checked where they are used
     * (the server rebuilds them with cuDNN's own checks). */
    {CUDNN_BACKEND_MATMUL_DESCRIPTOR, {0}, 0},
    {CUDNN_BACKEND_REDUCTION_DESCRIPTOR, {0}, 0},
    {CUDNN_BACKEND_RESAMPLE_DESCRIPTOR, {0}, 0},
    {CUDNN_BACKEND_RNG_DESCRIPTOR, {0}, 0},
    {CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, {0}, 0},
    {CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, {0}, 0},
    {CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR, {0}, 0},
};

/* The attribute's count, -1 when it is not set. */
static int64_t count_of(const struct rgpu_cudnn_bdesc *d, int64_t name) {
  const struct rgpu_cudnn_battr *a = rgpu_cudnn_bdesc_find(d, name);
  return a ? a->count : -1;
}

/* What cuDNN checks beyond presence, for the types rgpu computes with. */
static cudnnStatus_t check_shape(const struct rgpu_cudnn_bdesc *d) {
  switch (d->type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR: {
      const struct rgpu_cudnn_battr *dims = rgpu_cudnn_bdesc_find(d, CUDNN_ATTR_TENSOR_DIMENSIONS);
      const struct rgpu_cudnn_battr *str = rgpu_cudnn_bdesc_find(d, CUDNN_ATTR_TENSOR_STRIDES);
      if (dims->type != CUDNN_TYPE_INT64 || str->type != CUDNN_TYPE_INT64 ||
          dims->count != str->count || dims->count < 1 || dims->count > CUDNN_DIM_MAX)
        return CUDNN_STATUS_BAD_PARAM;
      for (int64_t i = 0; i < dims->count; i++)
        if (((int64_t *)dims->data)[i] <= 0 || ((int64_t *)str->data)[i] < 0)
          return CUDNN_STATUS_BAD_PARAM;
      return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR: {
      const struct rgpu_cudnn_battr *sd =
          rgpu_cudnn_bdesc_find(d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS);
      if (sd->type != CUDNN_TYPE_INT64 || sd->count != 1) return CUDNN_STATUS_BAD_PARAM;
      int64_t n = *(int64_t *)sd->data;
      if (n < 1 || n > RGPU_CUDNN_CONV_DIMS_MAX) return CUDNN_STATUS_BAD_PARAM;
      if (count_of(d, CUDNN_ATTR_CONVOLUTION_DILATIONS) != n ||
          count_of(d, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES) != n ||
          count_of(d, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS) != n ||
          count_of(d, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS) != n)
        return CUDNN_STATUS_BAD_PARAM;
      return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
      return count_of(d, CUDNN_ATTR_OPERATIONGRAPH_OPS) >= 1 ? CUDNN_STATUS_SUCCESS
                                                             : CUDNN_STATUS_BAD_PARAM;
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR:
      return count_of(d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS) ==
                     count_of(d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS)
                 ? CUDNN_STATUS_SUCCESS
                 : CUDNN_STATUS_BAD_PARAM;
    default: return CUDNN_STATUS_SUCCESS;
  }
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnBackendFinalize(cudnnBackendDescriptor_t p) {
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  pthread_mutex_lock(&g_lock);
  struct rgpu_cudnn_bdesc *d = rgpu_cudnn_bdesc_of(p);
  /* The server's finalizes count their call themselves (once, whether the
   * cache answers or a round trip does). */
  if (d && !d->finalized &&
      (d->type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR ||
       d->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR)) {
    st = rgpu_cudnn_backend_finalize_remote(d);
    if (st == CUDNN_STATUS_SUCCESS) d->finalized = 1;
    goto out;
  }
  rgpu_rt_count_call();
  if (!d) {
    st = CUDNN_STATUS_BAD_PARAM;
    goto out;
  }
  /* Finalizing twice: cuDNN refuses a finalized descriptor's changes. */
  if (d->finalized) {
    st = CUDNN_STATUS_NOT_INITIALIZED;
    goto out;
  }
  const struct required *r = NULL;
  for (size_t i = 0; i < sizeof k_required / sizeof k_required[0]; i++)
    if (k_required[i].type == d->type) r = &k_required[i];
  /* Every other operation and its parameters (normalization, resample,
   * concatenation, signals, SDPA, block scaling, ...) are data too: the
   * server rebuilds them with cuDNN's own checks when a plan needs them.
   * The types whose content is cuDNN's answer about its kernels (knob,
   * layout and intermediate info, kernel caches, device properties) have
   * no client-side meaning. */
  static const struct required k_data_only = {0, {0}, 0};
  if (!r && d->type != CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR &&
      d->type != CUDNN_BACKEND_LAYOUT_INFO_DESCRIPTOR &&
      d->type != CUDNN_BACKEND_INTERMEDIATE_INFO_DESCRIPTOR &&
      d->type != CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR &&
      d->type != CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR)
    r = &k_data_only;
  if (!r) {
    REFUSE("cudnnBackendFinalize: backend descriptor type %d is not supported by rgpu; it "
           "returns CUDNN_STATUS_NOT_SUPPORTED",
           d->type);
    st = CUDNN_STATUS_NOT_SUPPORTED;
    goto out;
  }
  for (int i = 0; i < r->n; i++)
    if (!rgpu_cudnn_bdesc_find(d, r->attrs[i])) {
      RGPU_DEBUG("cudnnBackendFinalize: descriptor type %d lacks required attribute %lld", d->type,
                 (long long)r->attrs[i]);
      st = CUDNN_STATUS_BAD_PARAM;
      goto out;
    }
  st = check_shape(d);
  if (st == CUDNN_STATUS_SUCCESS) d->finalized = 1;
out:
  if (st) RGPU_DEBUG("cudnnBackendFinalize(descriptor type %d): status %d", d ? d->type : -1, (int)st);
  pthread_mutex_unlock(&g_lock);
  return st;
}
