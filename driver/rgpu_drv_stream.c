/* Streams, events and host functions.
 *
 * A CUstream is a cudaStream_t and a CUevent a cudaEvent_t (the runtime's
 * structs are the driver's handle types), so each call is the runtime's
 * operation in the current context; CU_STREAM_LEGACY and
 * CU_STREAM_PER_THREAD are cudaStreamLegacy and cudaStreamPerThread. */
#include "rgpu_drv_internal.h"

/* The plain and the _ptsz driver function of one runtime call: pt selects
 * the runtime's per-thread form. */
#define RT_PAIR(pt, plain, ptsz) ((pt) ? RGPU_DRV_RT(ptsz) : RGPU_DRV_RT(plain))

/* ---- streams ------------------------------------------------------------------ */

RGPU_DRV CUresult rgpu_drv_cuStreamCreate(CUstream *phStream, unsigned int Flags) {
  RGPU_DRV_ENTER_CTX();
  /* CU_STREAM_NON_BLOCKING is cudaStreamNonBlocking. */
  return RGPU_DRV_RT(cudaStreamCreateWithFlags(phStream, Flags));
}

RGPU_DRV CUresult rgpu_drv_cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags,
                                                      int priority) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaStreamCreateWithPriority(phStream, flags, priority));
}

RGPU_DRV CUresult rgpu_drv_cuStreamDestroy_v2(CUstream hStream) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaStreamDestroy(hStream));
}
RGPU_DRV CUresult rgpu_drv_cuStreamDestroy(CUstream hStream) {
  return rgpu_drv_cuStreamDestroy_v2(hStream);
}

static CUresult stream_sync(CUstream s, int pt) {
  RGPU_DRV_ENTER_CTX();
  return RT_PAIR(pt, cudaStreamSynchronize(s), cudaStreamSynchronize_ptsz(s));
}
RGPU_DRV CUresult rgpu_drv_cuStreamSynchronize(CUstream hStream) { return stream_sync(hStream, 0); }
RGPU_DRV CUresult rgpu_drv_cuStreamSynchronize_ptsz(CUstream hStream) {
  return stream_sync(hStream, 1);
}

static CUresult stream_query(CUstream s, int pt) {
  RGPU_DRV_ENTER_CTX();
  /* cudaErrorNotReady maps to CUDA_ERROR_NOT_READY. */
  return RT_PAIR(pt, cudaStreamQuery(s), cudaStreamQuery_ptsz(s));
}
RGPU_DRV CUresult rgpu_drv_cuStreamQuery(CUstream hStream) { return stream_query(hStream, 0); }
RGPU_DRV CUresult rgpu_drv_cuStreamQuery_ptsz(CUstream hStream) { return stream_query(hStream, 1); }

static CUresult stream_wait_event(CUstream s, CUevent e, unsigned flags, int pt) {
  RGPU_DRV_ENTER_CTX();
  return RT_PAIR(pt, cudaStreamWaitEvent(s, e, flags), cudaStreamWaitEvent_ptsz(s, e, flags));
}
RGPU_DRV CUresult rgpu_drv_cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  return stream_wait_event(hStream, hEvent, Flags, 0);
}
RGPU_DRV CUresult rgpu_drv_cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent,
                                                  unsigned int Flags) {
  return stream_wait_event(hStream, hEvent, Flags, 1);
}

/* CUstreamCallback and cudaStreamCallback_t differ only in the status
 * type (CUresult / cudaError_t, both int-sized enums, and the status
 * passed is always success), so the runtime calls the driver's callback. */
static CUresult add_callback(CUstream s, CUstreamCallback cb, void *user, unsigned flags, int pt) {
  RGPU_DRV_ENTER_CTX();
  cudaStreamCallback_t rcb = (cudaStreamCallback_t)(void (*)(void))cb;
  return RT_PAIR(pt, cudaStreamAddCallback(s, rcb, user, flags),
                 cudaStreamAddCallback_ptsz(s, rcb, user, flags));
}
RGPU_DRV CUresult rgpu_drv_cuStreamAddCallback(CUstream hStream, CUstreamCallback callback,
                                               void *userData, unsigned int flags) {
  return add_callback(hStream, callback, userData, flags, 0);
}
RGPU_DRV CUresult rgpu_drv_cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback,
                                                    void *userData, unsigned int flags) {
  return add_callback(hStream, callback, userData, flags, 1);
}

static CUresult host_func(CUstream s, CUhostFn fn, void *user, int pt) {
  RGPU_DRV_ENTER_CTX();
  return RT_PAIR(pt, cudaLaunchHostFunc(s, fn, user), cudaLaunchHostFunc_ptsz(s, fn, user));
}
RGPU_DRV CUresult rgpu_drv_cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData) {
  return host_func(hStream, fn, userData, 0);
}
RGPU_DRV CUresult rgpu_drv_cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData) {
  return host_func(hStream, fn, userData, 1);
}

/* ---- stream queries ------------------------------------------------------------- */

/* A stream query with one result and its _ptsz form: the runtime's query
 * of the same shape, and its per-thread form, in the current context. */
#define STREAM_QUERY(cu, rt, type)                                                           \
  RGPU_DRV CUresult rgpu_drv_##cu(CUstream hStream, type *out) {                             \
    RGPU_DRV_ENTER_CTX();                                                                    \
    return RGPU_DRV_RT(rt(hStream, out));                                                    \
  }                                                                                          \
  RGPU_DRV CUresult rgpu_drv_##cu##_ptsz(CUstream hStream, type *out) {                      \
    RGPU_DRV_ENTER_CTX();                                                                    \
    return RGPU_DRV_RT(rt##_ptsz(hStream, out));                                             \
  }

STREAM_QUERY(cuStreamGetFlags, cudaStreamGetFlags, unsigned int)
STREAM_QUERY(cuStreamGetPriority, cudaStreamGetPriority, int)
STREAM_QUERY(cuStreamGetDevice, cudaStreamGetDevice, CUdevice)

/* The context of a stream: the current one when it is of the stream's
 * device (it made the stream, or shares its server context), else the
 * device's primary context. */
static CUresult stream_ctx(CUstream s, CUcontext *pctx, int pt) {
  RGPU_DRV_ENTER_CTX();
  if (!pctx) {
    rgpu_rt_count_call();
    return CUDA_ERROR_INVALID_VALUE;
  }
  int dev = 0;
  CUresult r = pt ? RGPU_DRV_RT(cudaStreamGetDevice_ptsz(s, &dev))
                  : RGPU_DRV_RT(cudaStreamGetDevice(s, &dev));
  if (r != CUDA_SUCCESS) return r;
  CUcontext cur = rgpu_drv_ctx_current();
  *pctx = cur && cur->device == dev ? cur : rgpu_drv_primary_ctx(dev);
  return CUDA_SUCCESS;
}
RGPU_DRV CUresult rgpu_drv_cuStreamGetCtx(CUstream hStream, CUcontext *pctx) {
  return stream_ctx(hStream, pctx, 0);
}
RGPU_DRV CUresult rgpu_drv_cuStreamGetCtx_ptsz(CUstream hStream, CUcontext *pctx) {
  return stream_ctx(hStream, pctx, 1);
}
RGPU_DRV CUresult rgpu_drv_cuStreamGetCtx_v2(CUstream hStream, CUcontext *pCtx,
                                             CUgreenCtx *pGreenCtx) {
  if (pGreenCtx) *pGreenCtx = NULL; /* no green contexts */
  return stream_ctx(hStream, pCtx, 0);
}
RGPU_DRV CUresult rgpu_drv_cuStreamGetCtx_v2_ptsz(CUstream hStream, CUcontext *pCtx,
                                                  CUgreenCtx *pGreenCtx) {
  if (pGreenCtx) *pGreenCtx = NULL;
  return stream_ctx(hStream, pCtx, 1);
}

/* A stream's id: rgpu's wire id, unique in the process (the per-thread
 * default stream has its own; the legacy stream is 0). */
static CUresult stream_id(CUstream s, unsigned long long *id, int pt) {
  RGPU_DRV_ENTER_CTX();
  rgpu_client *c;
  CUresult r = rgpu_drv_enter(&c);
  if (r != CUDA_SUCCESS) return r;
  if (!id) return CUDA_ERROR_INVALID_VALUE;
  uint64_t wire = 0;
  int dev;
  cudaError_t e = rgpu_rt_stream_resolve(c, s, pt, &wire, &dev);
  if (e != cudaSuccess) return rgpu_drv_from_rt(e);
  *id = wire;
  return CUDA_SUCCESS;
}
RGPU_DRV CUresult rgpu_drv_cuStreamGetId(CUstream hStream, unsigned long long *streamId) {
  return stream_id(hStream, streamId, 0);
}
RGPU_DRV CUresult rgpu_drv_cuStreamGetId_ptsz(CUstream hStream, unsigned long long *streamId) {
  return stream_id(hStream, streamId, 1);
}

/* ---- stream capture --------------------------------------------------------------- */

RGPU_DRV CUresult rgpu_drv_cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaStreamBeginCapture(hStream, (enum cudaStreamCaptureMode)mode));
}
RGPU_DRV CUresult rgpu_drv_cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaStreamBeginCapture_ptsz(hStream, (enum cudaStreamCaptureMode)mode));
}
/* The 10.0 form: global capture mode. */
RGPU_DRV CUresult rgpu_drv_cuStreamBeginCapture(CUstream hStream) {
  return rgpu_drv_cuStreamBeginCapture_v2(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}
RGPU_DRV CUresult rgpu_drv_cuStreamBeginCapture_ptsz(CUstream hStream) {
  return rgpu_drv_cuStreamBeginCapture_v2_ptsz(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

RGPU_DRV CUresult rgpu_drv_cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaStreamEndCapture(hStream, phGraph));
}
RGPU_DRV CUresult rgpu_drv_cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaStreamEndCapture_ptsz(hStream, phGraph));
}

RGPU_DRV CUresult rgpu_drv_cuStreamIsCapturing(CUstream hStream,
                                               CUstreamCaptureStatus *captureStatus) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(
      cudaStreamIsCapturing(hStream, (enum cudaStreamCaptureStatus *)captureStatus));
}
RGPU_DRV CUresult rgpu_drv_cuStreamIsCapturing_ptsz(CUstream hStream,
                                                    CUstreamCaptureStatus *captureStatus) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(
      cudaStreamIsCapturing_ptsz(hStream, (enum cudaStreamCaptureStatus *)captureStatus));
}

/* CUDA 13's form (edges); CUgraphEdgeData is cudaGraphEdgeData. */
RGPU_DRV CUresult rgpu_drv_cuStreamGetCaptureInfo_v3(
    CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
    CUgraph *graph_out, const CUgraphNode **dependencies_out,
    const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaStreamGetCaptureInfo(
      hStream, (enum cudaStreamCaptureStatus *)captureStatus_out,
      (unsigned long long *)id_out, graph_out, dependencies_out,
      (const cudaGraphEdgeData **)edgeData_out, numDependencies_out));
}
RGPU_DRV CUresult rgpu_drv_cuStreamGetCaptureInfo_v3_ptsz(
    CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
    CUgraph *graph_out, const CUgraphNode **dependencies_out,
    const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaStreamGetCaptureInfo_ptsz(
      hStream, (enum cudaStreamCaptureStatus *)captureStatus_out,
      (unsigned long long *)id_out, graph_out, dependencies_out,
      (const cudaGraphEdgeData **)edgeData_out, numDependencies_out));
}
/* The 10.1 form: status and id only. */
RGPU_DRV CUresult rgpu_drv_cuStreamGetCaptureInfo(CUstream hStream,
                                                  CUstreamCaptureStatus *captureStatus_out,
                                                  cuuint64_t *id_out) {
  return rgpu_drv_cuStreamGetCaptureInfo_v3(hStream, captureStatus_out, id_out, NULL, NULL,
                                            NULL, NULL);
}
RGPU_DRV CUresult rgpu_drv_cuStreamGetCaptureInfo_ptsz(CUstream hStream,
                                                       CUstreamCaptureStatus *captureStatus_out,
                                                       cuuint64_t *id_out) {
  return rgpu_drv_cuStreamGetCaptureInfo_v3_ptsz(hStream, captureStatus_out, id_out, NULL,
                                                 NULL, NULL, NULL);
}

RGPU_DRV CUresult rgpu_drv_cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
  return RGPU_DRV_RT(cudaThreadExchangeStreamCaptureMode((enum cudaStreamCaptureMode *)mode));
}

/* ---- events ------------------------------------------------------------------------- */

RGPU_DRV CUresult rgpu_drv_cuEventCreate(CUevent *phEvent, unsigned int Flags) {
  RGPU_DRV_ENTER_CTX();
  /* CU_EVENT_* are the cudaEvent* flag values. */
  return RGPU_DRV_RT(cudaEventCreateWithFlags(phEvent, Flags));
}

RGPU_DRV CUresult rgpu_drv_cuEventDestroy_v2(CUevent hEvent) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaEventDestroy(hEvent));
}
RGPU_DRV CUresult rgpu_drv_cuEventDestroy(CUevent hEvent) { return rgpu_drv_cuEventDestroy_v2(hEvent); }

RGPU_DRV CUresult rgpu_drv_cuEventRecord(CUevent hEvent, CUstream hStream) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaEventRecord(hEvent, hStream));
}
RGPU_DRV CUresult rgpu_drv_cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaEventRecord_ptsz(hEvent, hStream));
}
RGPU_DRV CUresult rgpu_drv_cuEventRecordWithFlags(CUevent hEvent, CUstream hStream,
                                                  unsigned int flags) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaEventRecordWithFlags(hEvent, hStream, flags));
}
RGPU_DRV CUresult rgpu_drv_cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream,
                                                       unsigned int flags) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaEventRecordWithFlags_ptsz(hEvent, hStream, flags));
}

RGPU_DRV CUresult rgpu_drv_cuEventSynchronize(CUevent hEvent) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaEventSynchronize(hEvent));
}

RGPU_DRV CUresult rgpu_drv_cuEventQuery(CUevent hEvent) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaEventQuery(hEvent));
}

RGPU_DRV CUresult rgpu_drv_cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart,
                                                 CUevent hEnd) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaEventElapsedTime(pMilliseconds, hStart, hEnd));
}
RGPU_DRV CUresult rgpu_drv_cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
  return rgpu_drv_cuEventElapsedTime_v2(pMilliseconds, hStart, hEnd);
}

/* A _ptsz function's stream for the runtime's plain function: 0 names the
 * per-thread default stream there. */
static CUstream per_thread_stream(CUstream s) { return s ? s : CU_STREAM_PER_THREAD; }

/* The 11.3 form: no edge data. */
RGPU_DRV CUresult rgpu_drv_cuStreamGetCaptureInfo_v2(CUstream hStream,
                                                     CUstreamCaptureStatus *captureStatus_out,
                                                     cuuint64_t *id_out, CUgraph *graph_out,
                                                     const CUgraphNode **dependencies_out,
                                                     size_t *numDependencies_out) {
  return rgpu_drv_cuStreamGetCaptureInfo_v3(hStream, captureStatus_out, id_out, graph_out,
                                            dependencies_out, NULL, numDependencies_out);
}
RGPU_DRV CUresult rgpu_drv_cuStreamGetCaptureInfo_v2_ptsz(
    CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
    CUgraph *graph_out, const CUgraphNode **dependencies_out, size_t *numDependencies_out) {
  return rgpu_drv_cuStreamGetCaptureInfo_v3_ptsz(hStream, captureStatus_out, id_out, graph_out,
                                                 dependencies_out, NULL, numDependencies_out);
}

RGPU_DRV CUresult rgpu_drv_cuStreamUpdateCaptureDependencies_v2(
    CUstream hStream, CUgraphNode *dependencies, const CUgraphEdgeData *dependencyData,
    size_t numDependencies, unsigned int flags) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaStreamUpdateCaptureDependencies(
      hStream, dependencies, (const cudaGraphEdgeData *)dependencyData, numDependencies, flags));
}
RGPU_DRV CUresult rgpu_drv_cuStreamUpdateCaptureDependencies_v2_ptsz(
    CUstream hStream, CUgraphNode *dependencies, const CUgraphEdgeData *dependencyData,
    size_t numDependencies, unsigned int flags) {
  return rgpu_drv_cuStreamUpdateCaptureDependencies_v2(per_thread_stream(hStream), dependencies,
                                                       dependencyData, numDependencies, flags);
}
RGPU_DRV CUresult rgpu_drv_cuStreamUpdateCaptureDependencies(CUstream hStream,
                                                             CUgraphNode *dependencies,
                                                             size_t numDependencies,
                                                             unsigned int flags) {
  return rgpu_drv_cuStreamUpdateCaptureDependencies_v2(hStream, dependencies, NULL,
                                                       numDependencies, flags);
}
RGPU_DRV CUresult rgpu_drv_cuStreamUpdateCaptureDependencies_ptsz(CUstream hStream,
                                                                  CUgraphNode *dependencies,
                                                                  size_t numDependencies,
                                                                  unsigned int flags) {
  return rgpu_drv_cuStreamUpdateCaptureDependencies_v2(per_thread_stream(hStream), dependencies,
                                                       NULL, numDependencies, flags);
}

RGPU_DRV CUresult rgpu_drv_cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
                                                       const CUgraphNode *dependencies,
                                                       const CUgraphEdgeData *dependencyData,
                                                       size_t numDependencies,
                                                       CUstreamCaptureMode mode) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaStreamBeginCaptureToGraph(
      hStream, hGraph, dependencies, (const cudaGraphEdgeData *)dependencyData, numDependencies,
      (enum cudaStreamCaptureMode)mode));
}
RGPU_DRV CUresult rgpu_drv_cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
                                                            const CUgraphNode *dependencies,
                                                            const CUgraphEdgeData *dependencyData,
                                                            size_t numDependencies,
                                                            CUstreamCaptureMode mode) {
  return rgpu_drv_cuStreamBeginCaptureToGraph(per_thread_stream(hStream), hGraph, dependencies,
                                              dependencyData, numDependencies, mode);
}

/* ---- stream attributes ---------------------------------------------------------- */

/* CUstreamAttrValue is cudaStreamAttrValue (CUlaunchAttributeValue and
 * cudaLaunchAttributeValue share their layout and ids): the runtime's
 * calls, which keep hints and refuse what would change how work runs. */
RGPU_DRV CUresult rgpu_drv_cuStreamGetAttribute(CUstream hStream, CUstreamAttrID attr, CUstreamAttrValue *value_out) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaStreamGetAttribute(hStream, (cudaStreamAttrID)attr, (cudaStreamAttrValue *)value_out));
}
RGPU_DRV CUresult rgpu_drv_cuStreamGetAttribute_ptsz(CUstream hStream, CUstreamAttrID attr,
                                                     CUstreamAttrValue *value_out) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(
      cudaStreamGetAttribute_ptsz(hStream, (cudaStreamAttrID)attr, (cudaStreamAttrValue *)value_out));
}
RGPU_DRV CUresult rgpu_drv_cuStreamSetAttribute(CUstream hStream, CUstreamAttrID attr,
                                                const CUstreamAttrValue *value) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaStreamSetAttribute(hStream, (cudaStreamAttrID)attr, (const cudaStreamAttrValue *)value));
}
RGPU_DRV CUresult rgpu_drv_cuStreamSetAttribute_ptsz(CUstream hStream, CUstreamAttrID attr,
                                                     const CUstreamAttrValue *value) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(
      cudaStreamSetAttribute_ptsz(hStream, (cudaStreamAttrID)attr, (const cudaStreamAttrValue *)value));
}
RGPU_DRV CUresult rgpu_drv_cuStreamCopyAttributes(CUstream dst, CUstream src) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaStreamCopyAttributes(dst, src));
}
RGPU_DRV CUresult rgpu_drv_cuStreamCopyAttributes_ptsz(CUstream dst, CUstream src) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaStreamCopyAttributes_ptsz(dst, src));
}
