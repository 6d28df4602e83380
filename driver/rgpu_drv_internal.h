/* Internal interfaces of the driver API facade.
 *
 * The driver functions live inside rgpu's libcudart.so.13, which holds the
 * process's one session, and are exported there as rgpu_drv_<export> under
 * the RGPU_PRIVATE_1 version node; libcuda.so.1 is a generated forwarder
 * (gen_driver.py).  They share everything with the runtime: handles (a
 * CUstream is a cudaStream_t, a CUevent a cudaEvent_t, a CUgraph a
 * cudaGraph_t, device pointers the same numbers), the asynchronous rules
 * and the deferred and sticky errors.  One rule is the driver's own: no
 * driver call changes cudart's per-thread last error (RGPU_DRV_RT).
 *
 * The sources compile with __CUDA_API_VERSION_INTERNAL, so cuda.h declares
 * every export under its own name (cuMemAlloc is the 2.0 API there, not a
 * macro for cuMemAlloc_v2); rgpu_drv_protos.h (generated) declares every
 * rgpu_drv_ function with cuda.h's prototype, so each definition is
 * checked against NVIDIA's. */
#ifndef RGPU_DRV_INTERNAL_H
#define RGPU_DRV_INTERNAL_H

#include "rgpu_cudart.h"
#include "rgpu_drv_proctable.h"
#include "rgpu_drv_protos.h"
#include "rgpu_drv_unsupported.h"

/* Definition of a driver entry point: exported from libcudart.so.13 (the
 * library is built with hidden visibility). */
#define RGPU_DRV __attribute__((visibility("default")))

/* cudaError_t -> CUresult. */
static inline CUresult rgpu_drv_from_rt(cudaError_t e) { return (CUresult)rgpu_cudart_to_cu(e); }

/* Runs runtime code `expr` (a cudaError_t expression: a public cudart
 * function or an internal one) for a driver call and returns its CUresult,
 * leaving the thread's runtime last error as it was; marked as a driver
 * call, so the runtime code binds no primary context and marks no device
 * used.  The runtime function counts the call for RGPU_STATS; the driver
 * function then does not. */
#define RGPU_DRV_RT(expr)                                                                    \
  __extension__({                                                                            \
    cudaError_t saved_ = rgpu_rt_last_error_get();                                           \
    rgpu_rt_driver_call_begin();                                                             \
    cudaError_t rt_ = (expr);                                                                \
    rgpu_rt_driver_call_end();                                                               \
    rgpu_rt_last_error_set(saved_);                                                          \
    rgpu_drv_from_rt(rt_);                                                                   \
  })

/* Start of a driver call that works in the current context
 * (rgpu_drv_ctx_enter); without one the call fails here, counting itself
 * (no runtime code ran to count it). */
#define RGPU_DRV_ENTER_CTX()                                                                 \
  do {                                                                                       \
    CUresult r_ = rgpu_drv_ctx_enter(NULL);                                                  \
    if (r_ != CUDA_SUCCESS) {                                                                \
      rgpu_rt_count_call();                                                                  \
      return r_;                                                                             \
    }                                                                                        \
  } while (0)

/* A driver call that does its own requests (not through a runtime entry
 * point) and may run runtime code on the way: RGPU_DRV_BEGIN() counts it,
 * checks initialization and connects (rgpu_drv_enter, `c` the client;
 * its failure is returned as is), and remembers the runtime's last error;
 * RGPU_DRV_RET(r) puts that back and returns r, so a driver call never
 * changes what cudaGetLastError answers. */
#define RGPU_DRV_BEGIN()                                                                     \
  rgpu_client *c;                                                                            \
  cudaError_t rgpu_drv_saved_last_ = rgpu_rt_last_error_get();                               \
  do {                                                                                       \
    CUresult br_ = rgpu_drv_enter(&c);                                                       \
    if (br_ != CUDA_SUCCESS) return br_;                                                     \
  } while (0)
#define RGPU_DRV_RET(r) return (rgpu_rt_last_error_set(rgpu_drv_saved_last_), (r))

/* One side of a driver copy (CUDA_MEMCPY2D or CUDA_MEMCPY3D): the first
 * byte its memory type names, and its direction in *dev: 1 device, 0 host,
 * -1 unified (the pointer decides).  Arrays are not a pointer: copies
 * that name one go to rgpu_drv_copy_3d_array; an unknown type is invalid. */
static inline CUresult rgpu_drv_copy_side(CUmemorytype type, const void *host,
                                          CUdeviceptr device, const char **base, int *dev) {
  switch (type) {
  case CU_MEMORYTYPE_HOST: *base = host; *dev = 0; return CUDA_SUCCESS;
  case CU_MEMORYTYPE_DEVICE: *base = (const char *)(uintptr_t)device; *dev = 1; return CUDA_SUCCESS;
  case CU_MEMORYTYPE_UNIFIED: *base = (const char *)(uintptr_t)device; *dev = -1; return CUDA_SUCCESS;
  case CU_MEMORYTYPE_ARRAY: return CUDA_ERROR_NOT_SUPPORTED;
  default: return CUDA_ERROR_INVALID_VALUE;
  }
}

/* A driver copy with a CUDA array on either side, as the runtime's
 * cudaMemcpy3D(Async) (rgpu_drv_array.c); pt: the _ptds/_ptsz entry. */
CUresult rgpu_drv_copy_3d_array(const CUDA_MEMCPY3D *p, CUstream s, int pt, int async);

/* The runtime's copy kind for two sides' directions (rgpu_drv_copy_side):
 * cudaMemcpyDefault when either is unified. */
static inline enum cudaMemcpyKind rgpu_drv_copy_kind(int src_dev, int dst_dev) {
  if (src_dev < 0 || dst_dev < 0) return cudaMemcpyDefault;
  return src_dev ? (dst_dev ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                 : (dst_dev ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
}

/* Start of a driver call that does not go through runtime code: counts it,
 * checks cuInit ran (CUDA_ERROR_NOT_INITIALIZED otherwise), connects, and
 * returns the sticky error if there is one.  *out may be NULL when the
 * result is not CUDA_SUCCESS. */
CUresult rgpu_drv_enter(rgpu_client **out);
/* rgpu_drv_enter for a call on device dev: then CUDA_ERROR_INVALID_DEVICE
 * unless 0 <= dev < the server's device count (a failed count is its own
 * error).  *out is set only on CUDA_SUCCESS. */
CUresult rgpu_drv_enter_device(CUdevice dev, rgpu_client **out);
/* cuInit has succeeded in this process. */
int rgpu_drv_initialized(void);

/* ---- runtime entry points the driver reuses ------------------------------ */

/* The runtime's per-thread-default-stream forms (cuda_runtime_api.h
 * declares them only under --default-stream per-thread): the driver's
 * _ptds/_ptsz functions run them. */
cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count,
                                 enum cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemcpy2D_ptds(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpy2DAsync_ptsz(void *dst, size_t dpitch, const void *src, size_t spitch,
                                   size_t width, size_t height, enum cudaMemcpyKind kind,
                                   cudaStream_t stream);
cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream);
cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream);
cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t memPool,
                                         cudaStream_t stream);
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream);
cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t s, unsigned int *flags);
cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t s, int *priority);
cudaError_t cudaStreamGetDevice_ptsz(cudaStream_t s, int *device);
cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t stream, cudaStreamCallback_t callback,
                                       void *userData, unsigned int flags);
cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void *userData);
cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, enum cudaStreamCaptureMode mode);
cudaError_t cudaStreamGetAttribute_ptsz(cudaStream_t hStream, cudaStreamAttrID attr,
                                        cudaStreamAttrValue *value_out);
cudaError_t cudaStreamSetAttribute_ptsz(cudaStream_t hStream, cudaStreamAttrID attr,
                                        const cudaStreamAttrValue *value);
cudaError_t cudaStreamCopyAttributes_ptsz(cudaStream_t dst, cudaStream_t src);
cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph);
cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream,
                                       enum cudaStreamCaptureStatus *pCaptureStatus);
cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t stream,
                                          enum cudaStreamCaptureStatus *captureStatus_out,
                                          unsigned long long *id_out, cudaGraph_t *graph_out,
                                          const cudaGraphNode_t **dependencies_out,
                                          const cudaGraphEdgeData **edgeData_out,
                                          size_t *numDependencies_out);
cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t event, cudaStream_t stream,
                                          unsigned int flags);
cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream);
cudaError_t cudaGraphUpload_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream);
cudaError_t cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                                cudaGraphInstantiateParams *instantiateParams);

/* ---- contexts (rgpu_drv_ctx.c) ----------------------------------------- */

#define RGPU_CTX_MAGIC 0x43545854u /* "CTXT" */
#define RGPU_CTX_DEAD 0x44454144u  /* "DEAD": after cuCtxDestroy */

/* A context.  Every context of a device shares the device's one server
 * context (allocations are not separated between contexts of one device);
 * the primary context is a fixed object per device.  Destroyed contexts
 * are kept (marked dead), so a stale handle is an error, not a crash. */
struct CUctx_st {
  uint32_t magic;
  int device;
  int primary;            /* the device's primary context */
  unsigned flags;         /* CU_CTX_* */
  unsigned long long id;  /* cuCtxGetId: unique in the process */
};

/* The calling thread's current context (NULL if none): the top of its
 * context stack; when the stack is empty and a runtime call has bound the
 * thread (cudaSetDevice or any runtime call), the primary context of the
 * runtime's current device. */
CUcontext rgpu_drv_ctx_current(void);
/* CUDA_SUCCESS for a live context handle, CUDA_ERROR_INVALID_CONTEXT
 * otherwise (NULL, dead or not a context). */
CUresult rgpu_drv_ctx_check(CUcontext ctx);
/* Start of a driver call that works in the current context: checks
 * initialization and that a context is current (CUDA_ERROR_INVALID_CONTEXT
 * otherwise), and makes its device the runtime's current device, so the
 * runtime code it reuses runs there.  *dev: that device (may be NULL). */
CUresult rgpu_drv_ctx_enter(int *dev);
/* The primary context object of a device (NULL past RGPU_MAX_DEVICES). */
CUcontext rgpu_drv_primary_ctx(int dev);

/* ---- the per-thread context stack (rgpu_drv_ctxstack.c, pure) ---------- */

#define RGPU_CTX_STACK_MAX 64

typedef struct {
  CUcontext v[RGPU_CTX_STACK_MAX];
  int n;
} rgpu_ctx_stack;

/* 0, or -1 when full. */
int rgpu_ctx_stack_push(rgpu_ctx_stack *s, CUcontext c);
/* The popped context, or NULL when empty. */
CUcontext rgpu_ctx_stack_pop(rgpu_ctx_stack *s);
CUcontext rgpu_ctx_stack_top(const rgpu_ctx_stack *s);
/* cuCtxSetCurrent: replaces the top (pushes onto an empty stack); NULL
 * pops the top. */
void rgpu_ctx_stack_set_top(rgpu_ctx_stack *s, CUcontext c);
/* Removes every occurrence of c (a destroyed context). */
void rgpu_ctx_stack_remove(rgpu_ctx_stack *s, CUcontext c);

#endif
