/* cuBLAS handles, streams, modes, versions and status names: all answered
 * in the client (cuBLAS keeps them in the handle too; only the calls that
 * compute carry them to the server). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_cublas_internal.h"
#include "rgpu_cublas_tables.h"
#include "rgpu_cublas_unsupported.h"
#include "rgpu_cudart_graph.h"
#include "rgpu_log.h"

void rgpu_cublas_report_unsupported(const char *name, int *logged_once) {
  rgpu_rt_count_call();
  if (!__atomic_exchange_n(logged_once, 1, __ATOMIC_RELAXED))
    RGPU_WARN("%s is not supported by rgpu's cuBLAS; it returns CUBLAS_STATUS_NOT_SUPPORTED", name);
}

const char *rgpu_cublas_status_name_of(int status) {
  for (size_t i = 0; i < rgpu_cublas_status_names_len; i++)
    if (rgpu_cublas_status_names[i].value == status) return rgpu_cublas_status_names[i].name;
  return NULL;
}

cublasStatus_t rgpu_cublas_enter(struct cublasContext *h, const char *name, int capturable,
                                 int *logged, rgpu_client **c, uint64_t *stream, int *device) {
  /* A failed session, or a sticky device error: cuBLAS reports a launch
   * into a broken context as an execution failure. */
  if (rgpu_rt_enter(c) != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  if (rgpu_rt_stream_resolve(*c, h->stream, 0, stream, device) != cudaSuccess) {
    /* A stream destroyed after cublasSetStream: cuBLAS's launch fails. */
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  if (!capturable && rgpu_rt_graph_is_capturing(*stream)) {
    if (!__atomic_exchange_n(logged, 1, __ATOMIC_RELAXED))
      RGPU_WARN("%s with its result in host memory cannot be captured (it waits for the "
                "result); it returns CUBLAS_STATUS_NOT_SUPPORTED", name);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasCreate_v2(cublasHandle_t *handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  rgpu_client *c;
  /* cuBLAS initializes the device's context here: without a device (no
   * server) it is NOT_INITIALIZED, as natively without a GPU. */
  if (rgpu_rt_enter(&c) != cudaSuccess) return CUBLAS_STATUS_NOT_INITIALIZED;
  struct cublasContext *h = calloc(1, sizeof *h);
  if (!h) return CUBLAS_STATUS_ALLOC_FAILED;
  *h = (struct cublasContext){.magic = RGPU_CUBLAS_MAGIC,
                              .device = rgpu_rt_current_device(),
                              .id = rgpu_rt_new_handle_id(),
                              .math_mode = CUBLAS_DEFAULT_MATH,
                              .pointer_mode = CUBLAS_POINTER_MODE_HOST,
                              .atomics_mode = CUBLAS_ATOMICS_NOT_ALLOWED};
  *handle = h;
  return CUBLAS_STATUS_SUCCESS;
}

RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasDestroy_v2(cublasHandle_t handle) {
  struct cublasContext *h = rgpu_cublas_handle(handle);
  rgpu_rt_count_call();
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->magic = 0;
  free(h);
  return CUBLAS_STATUS_SUCCESS;
}

RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasGetVersion_v2(cublasHandle_t handle, int *version) {
  (void)handle; /* cuBLAS answers without looking at the handle */
  rgpu_rt_count_call();
  if (!version) return CUBLAS_STATUS_INVALID_VALUE;
  *version = CUBLAS_VERSION;
  return CUBLAS_STATUS_SUCCESS;
}

RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasGetProperty(libraryPropertyType type, int *value) {
  rgpu_rt_count_call();
  if (!value) return CUBLAS_STATUS_INVALID_VALUE;
  switch (type) {
    case MAJOR_VERSION: *value = CUBLAS_VER_MAJOR; return CUBLAS_STATUS_SUCCESS;
    case MINOR_VERSION: *value = CUBLAS_VER_MINOR; return CUBLAS_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = CUBLAS_VER_PATCH; return CUBLAS_STATUS_SUCCESS;
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

RGPU_CUBLAS size_t rgpu_cublas_cublasGetCudartVersion(void) {
  rgpu_rt_count_call();
  return CUDART_VERSION;
}

RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasSetStream_v2(cublasHandle_t handle,
                                                          cudaStream_t streamId) {
  struct cublasContext *h = rgpu_cublas_handle(handle);
  rgpu_rt_count_call();
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->stream = streamId;
  return CUBLAS_STATUS_SUCCESS;
}

RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasGetStream_v2(cublasHandle_t handle,
                                                          cudaStream_t *streamId) {
  struct cublasContext *h = rgpu_cublas_handle(handle);
  rgpu_rt_count_call();
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!streamId) return CUBLAS_STATUS_INVALID_VALUE;
  *streamId = h->stream;
  return CUBLAS_STATUS_SUCCESS;
}

RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  struct cublasContext *h = rgpu_cublas_handle(handle);
  rgpu_rt_count_call();
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  /* The mode proper (low bits: cublas_api.h's 0-4 and 8, CUDA 13's
   * emulation modes included) and the one flag bit above it; any other
   * bit is no mode this cuBLAS defines. */
  unsigned base = (unsigned)mode & 0xfu, flags = (unsigned)mode & ~0xfu;
  if ((base > CUBLAS_FP32_EMULATED_BF16X9_MATH && base != CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH) ||
      (flags & ~(unsigned)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION))
    return CUBLAS_STATUS_INVALID_VALUE;
  h->math_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode) {
  struct cublasContext *h = rgpu_cublas_handle(handle);
  rgpu_rt_count_call();
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = h->math_mode;
  return CUBLAS_STATUS_SUCCESS;
}

RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasSetPointerMode_v2(cublasHandle_t handle,
                                                               cublasPointerMode_t mode) {
  struct cublasContext *h = rgpu_cublas_handle(handle);
  rgpu_rt_count_call();
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE)
    return CUBLAS_STATUS_INVALID_VALUE;
  h->pointer_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasGetPointerMode_v2(cublasHandle_t handle,
                                                               cublasPointerMode_t *mode) {
  struct cublasContext *h = rgpu_cublas_handle(handle);
  rgpu_rt_count_call();
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = h->pointer_mode;
  return CUBLAS_STATUS_SUCCESS;
}

RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasSetAtomicsMode(cublasHandle_t handle,
                                                            cublasAtomicsMode_t mode) {
  struct cublasContext *h = rgpu_cublas_handle(handle);
  rgpu_rt_count_call();
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode != CUBLAS_ATOMICS_NOT_ALLOWED && mode != CUBLAS_ATOMICS_ALLOWED)
    return CUBLAS_STATUS_INVALID_VALUE;
  h->atomics_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasGetAtomicsMode(cublasHandle_t handle,
                                                            cublasAtomicsMode_t *mode) {
  struct cublasContext *h = rgpu_cublas_handle(handle);
  rgpu_rt_count_call();
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = h->atomics_mode;
  return CUBLAS_STATUS_SUCCESS;
}

RGPU_CUBLAS cublasStatus_t rgpu_cublas_cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace,
                                                             size_t workspaceSizeInBytes) {
  struct cublasContext *h = rgpu_cublas_handle(handle);
  rgpu_rt_count_call();
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  /* cuBLAS wants the workspace 256-byte aligned (its documentation). */
  if (workspace && ((uintptr_t)workspace & 255u)) return CUBLAS_STATUS_INVALID_VALUE;
  if (!workspace && workspaceSizeInBytes) return CUBLAS_STATUS_INVALID_VALUE;
  h->workspace = workspace;
  h->workspace_size = workspace ? workspaceSizeInBytes : 0;
  return CUBLAS_STATUS_SUCCESS;
}

RGPU_CUBLAS const char *rgpu_cublas_cublasGetStatusName(cublasStatus_t status) {
  const char *n = rgpu_cublas_status_name_of((int)status);
  return n ? n : "CUBLAS_STATUS_UNKNOWN";
}

/* rgpu has the enum's names, not NVIDIA's sentences: the name stands in. */
RGPU_CUBLAS const char *rgpu_cublas_cublasGetStatusString(cublasStatus_t status) {
  return rgpu_cublas_cublasGetStatusName(status);
}

void rgpu_cublas_report_illegal(const char *api, int param) {
  /* The routine names cuBLAS 13 prints, spacing included (measured on the
   * H200: "SGEMM  parameter", "GEMM_EX  parameter", but
   * "SgemmStridedBatched parameter"); a _64 form prints its int form's.
   * gemv prints nothing. */
  static const struct {
    const char *api, *routine;
  } names[] = {
      {"cublasSgemm_v2", "SGEMM "},
      {"cublasDgemm_v2", "DGEMM "},
      {"cublasGemmEx", "GEMM_EX "},
      {"cublasSgemmStridedBatched", "SgemmStridedBatched"},
      {"cublasDgemmStridedBatched", "DgemmStridedBatched"},
  };
  size_t len = strlen(api);
  if (len > 3 && !strcmp(api + len - 3, "_64")) len -= 3;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strlen(names[i].api) == len && !strncmp(api, names[i].api, len)) {
      printf(" ** On entry to %s parameter number %d had an illegal value\n", names[i].routine,
             param);
      fflush(stdout);
      return;
    }
}
