/* What the legacy cuDNN handlers share with the backend API's
 * (rgpu_handlers_cudnn_backend.c): NVIDIA's libcudnn.so.9, opened once. */
#ifndef RGPU_HANDLERS_CUDNN_H
#define RGPU_HANDLERS_CUDNN_H

#include <cudnn.h>

#include "rgpu_worker_internal.h"

/* A symbol of NVIDIA's libcudnn.so.9, or NULL (not found, or the library
 * could not be opened). */
void *rgpu_cudnn_server_sym(const char *name);
/* The current context's cuDNN handle with its stream set to stream
 * (fails the request with a clear error when cuDNN cannot be had). */
CUresult rgpu_cudnn_server_handle(rgpu_worker *w, const char *api, CUstream stream,
                                  cudnnHandle_t *out);

#endif
