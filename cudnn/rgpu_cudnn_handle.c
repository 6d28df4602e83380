/* The cuDNN handle, its stream, versions and status names: all answered in
 * the client (cuDNN keeps the stream in the handle too; only the calls
 * that compute carry it to the server). */
#include <stdlib.h>
#include <string.h>

#include "rgpu_cudart.h"
#include "rgpu_cudnn_internal.h"
#include "rgpu_log.h"

void rgpu_cudnn_report_unsupported(const char *name, int *logged_once) {
  rgpu_rt_count_call();
  if (!__atomic_exchange_n(logged_once, 1, __ATOMIC_RELAXED))
    RGPU_WARN("%s is not supported by rgpu's cuDNN; it returns CUDNN_STATUS_NOT_SUPPORTED", name);
}

struct cudnnContext *rgpu_cudnn_handle(cudnnHandle_t h) {
  return h && h->magic == RGPU_CUDNN_MAGIC ? h : NULL;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnCreate(cudnnHandle_t *handle) {
  if (!handle) {
    rgpu_rt_count_call();
    return CUDNN_STATUS_BAD_PARAM;
  }
  rgpu_client *c;
  /* cuDNN binds the handle to the current device's context here: without
   * a server that is NOT_INITIALIZED, as natively without a GPU. */
  if (rgpu_rt_enter(&c) != cudaSuccess) return CUDNN_STATUS_NOT_INITIALIZED;
  struct cudnnContext *h = calloc(1, sizeof *h);
  if (!h) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
  *h = (struct cudnnContext){.magic = RGPU_CUDNN_MAGIC,
                             .device = rgpu_rt_current_device(),
                             .id = rgpu_rt_new_handle_id()};
  *handle = h;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnDestroy(cudnnHandle_t handle) {
  rgpu_rt_count_call();
  /* cuDNN accepts a NULL handle here (nothing to free). */
  if (!handle) return CUDNN_STATUS_SUCCESS;
  struct cudnnContext *h = rgpu_cudnn_handle(handle);
  if (!h) return CUDNN_STATUS_BAD_PARAM;
  h->magic = 0;
  free(h);
  return CUDNN_STATUS_SUCCESS;
}

/* The stream is kept as the caller's cudaStream_t and resolved (through
 * the runtime facade's stream table) by each call that runs on it, so a
 * stream destroyed after cudnnSetStream fails that call, not this one. */
RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId) {
  struct cudnnContext *h = rgpu_cudnn_handle(handle);
  rgpu_rt_count_call();
  if (!h) return CUDNN_STATUS_BAD_PARAM;
  h->stream = streamId;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetStream(cudnnHandle_t handle, cudaStream_t *streamId) {
  struct cudnnContext *h = rgpu_cudnn_handle(handle);
  rgpu_rt_count_call();
  if (!h || !streamId) return CUDNN_STATUS_BAD_PARAM;
  *streamId = h->stream;
  return CUDNN_STATUS_SUCCESS;
}

RGPU_CUDNN size_t rgpu_cudnn_cudnnGetVersion(void) {
  rgpu_rt_count_call();
  return CUDNN_VERSION;
}

RGPU_CUDNN size_t rgpu_cudnn_cudnnGetMaxDeviceVersion(void) {
  rgpu_rt_count_call();
  return CUDNN_MAX_DEVICE_VERSION;
}

RGPU_CUDNN size_t rgpu_cudnn_cudnnGetCudartVersion(void) {
  rgpu_rt_count_call();
  return CUDART_VERSION;
}

RGPU_CUDNN const char *rgpu_cudnn_cudnnGetErrorString(cudnnStatus_t status) {
  const char *n = rgpu_cudnn_status_name_of((int)status);
  return n ? n : "CUDNN_STATUS_UNKNOWN";
}

/* cuDNN fills this with the message of its last failure; rgpu's failures
 * are logged instead, so the message is empty (a valid answer: cuDNN's is
 * empty too when nothing failed). */
RGPU_CUDNN void rgpu_cudnn_cudnnGetLastErrorString(char *message, size_t max_size) {
  rgpu_rt_count_call();
  if (message && max_size) message[0] = '\0';
}

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGetProperty(libraryPropertyType type, int *value) {
  rgpu_rt_count_call();
  if (!value) return CUDNN_STATUS_BAD_PARAM;
  switch (type) {
    case MAJOR_VERSION: *value = CUDNN_MAJOR; return CUDNN_STATUS_SUCCESS;
    case MINOR_VERSION: *value = CUDNN_MINOR; return CUDNN_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = CUDNN_PATCHLEVEL; return CUDNN_STATUS_SUCCESS;
    default: return CUDNN_STATUS_BAD_PARAM;
  }
}

/* The sub-library checks: cuDNN's pieces must come from one release; rgpu's
 * facade is one library, so they always agree. */
RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnGraphVersionCheck(void) {
  rgpu_rt_count_call();
  return CUDNN_STATUS_SUCCESS;
}
RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnOpsVersionCheck(void) {
  rgpu_rt_count_call();
  return CUDNN_STATUS_SUCCESS;
}
RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnCnnVersionCheck(void) {
  rgpu_rt_count_call();
  return CUDNN_STATUS_SUCCESS;
}
RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnAdvVersionCheck(void) {
  rgpu_rt_count_call();
  return CUDNN_STATUS_SUCCESS;
}
