/* The cuBLASLt handle, versions and status names: all answered in the
 * client. */
#include <stdlib.h>
#include <string.h>

#include "rgpu_cublaslt_internal.h"
#include "rgpu_cudart.h"
#include "rgpu_log.h"

void rgpu_cublaslt_report_unsupported(const char *name, int *logged_once) {
  if (!__atomic_exchange_n(logged_once, 1, __ATOMIC_RELAXED))
    RGPU_WARN("%s is not supported by rgpu's cuBLASLt; it returns CUBLAS_STATUS_NOT_SUPPORTED",
              name);
}

struct cublasLtContext *rgpu_cublaslt_handle(cublasLtHandle_t h) {
  return h && h->magic == RGPU_CUBLASLT_MAGIC ? h : NULL;
}

/* The first word of rgpu's cuBLAS handle record (RGPU_CUBLAS_MAGIC in
 * cublas/rgpu_cublas_internal.h, whose generated headers this target does
 * not see); only that word is read.  rgpu_cublaslt_session_test runs a
 * matmul through a cast cuBLAS handle, so a change there shows. */
#define RGPU_CUBLAS_HANDLE_MAGIC 0x63624c48u

int rgpu_cublaslt_handle_use(cublasLtHandle_t h, struct cublasLtContext *out) {
  if (!h) return 0;
  uint32_t magic;
  memcpy(&magic, (const void *)h, sizeof magic);
  if (magic == RGPU_CUBLASLT_MAGIC) {
    *out = *h;
    return 1;
  }
  if (magic == RGPU_CUBLAS_HANDLE_MAGIC) {
    *out = (struct cublasLtContext){.magic = RGPU_CUBLASLT_MAGIC,
                                    .device = rgpu_rt_current_device()};
    return 1;
  }
  return 0;
}

RGPU_CUBLASLT cublasStatus_t rgpu_cublaslt_cublasLtCreate(cublasLtHandle_t *lightHandle) {
  if (!lightHandle) {
    rgpu_rt_count_call();
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  rgpu_client *c;
  /* cuBLASLt binds the handle to the current device's context here:
   * without a server that is NOT_INITIALIZED, as natively without a GPU. */
  if (rgpu_rt_enter(&c) != cudaSuccess) return CUBLAS_STATUS_NOT_INITIALIZED;
  struct cublasLtContext *h = calloc(1, sizeof *h);
  if (!h) return CUBLAS_STATUS_ALLOC_FAILED;
  *h = (struct cublasLtContext){.magic = RGPU_CUBLASLT_MAGIC,
                                .device = rgpu_rt_current_device(),
                                .id = rgpu_rt_new_handle_id()};
  *lightHandle = h;
  return CUBLAS_STATUS_SUCCESS;
}

RGPU_CUBLASLT cublasStatus_t rgpu_cublaslt_cublasLtDestroy(cublasLtHandle_t lightHandle) {
  struct cublasLtContext *h = rgpu_cublaslt_handle(lightHandle);
  rgpu_rt_count_call();
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->magic = 0;
  free(h);
  return CUBLAS_STATUS_SUCCESS;
}

RGPU_CUBLASLT size_t rgpu_cublaslt_cublasLtGetVersion(void) {
  rgpu_rt_count_call();
  return CUBLAS_VERSION;
}

RGPU_CUBLASLT size_t rgpu_cublaslt_cublasLtGetCudartVersion(void) {
  rgpu_rt_count_call();
  return CUDART_VERSION;
}

RGPU_CUBLASLT cublasStatus_t rgpu_cublaslt_cublasLtGetProperty(libraryPropertyType type,
                                                               int *value) {
  rgpu_rt_count_call();
  if (!value) return CUBLAS_STATUS_INVALID_VALUE;
  switch (type) {
    case MAJOR_VERSION: *value = CUBLAS_VER_MAJOR; return CUBLAS_STATUS_SUCCESS;
    case MINOR_VERSION: *value = CUBLAS_VER_MINOR; return CUBLAS_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = CUBLAS_VER_PATCH; return CUBLAS_STATUS_SUCCESS;
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

RGPU_CUBLASLT const char *rgpu_cublaslt_cublasLtGetStatusName(cublasStatus_t status) {
  const char *n = rgpu_cublaslt_status_name_of((int)status);
  return n ? n : "CUBLAS_STATUS_UNKNOWN";
}

/* rgpu has the enum's names, not NVIDIA's sentences: the name stands in. */
RGPU_CUBLASLT const char *rgpu_cublaslt_cublasLtGetStatusString(cublasStatus_t status) {
  return rgpu_cublaslt_cublasLtGetStatusName(status);
}
