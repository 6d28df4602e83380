/* softgpu: cuGetProcAddress, older ABI versions of renamed entry points,
 * per-thread-default-stream (_ptsz/_ptds) variants, and stubs for driver
 * functions softgpu exports but does not implement. */
#include <string.h>

#include "sg_internal.h"

/* ---- older ABI versions the 13.0 header no longer declares -------------- */

SG_EXPORT CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
SG_EXPORT CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                          unsigned int flags, CUdevice dev);

SG_EXPORT CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
  return cuCtxCreate(pctx, NULL, flags, dev);
}

SG_EXPORT CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                          unsigned int flags, CUdevice dev) {
  if (numParams > 0 || paramsArray) {
    RGPU_WARN("cuCtxCreate execution affinity is not supported");
    return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
  }
  return cuCtxCreate(pctx, NULL, flags, dev);
}

/* ---- per-thread default stream variants --------------------------------- */
/* Code built with --default-stream per-thread (or cuGetProcAddress with
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) means "per-thread stream"
 * by the NULL stream. */
static CUstream ptds(CUstream s) { return s ? s : CU_STREAM_PER_THREAD; }

#define SG_PTSZ_DECL(name, params) SG_EXPORT CUresult CUDAAPI name params;
SG_PTSZ_DECL(cuMemcpyAsync_ptsz, (CUdeviceptr, CUdeviceptr, size_t, CUstream))
SG_PTSZ_DECL(cuMemcpyHtoDAsync_v2_ptsz, (CUdeviceptr, const void *, size_t, CUstream))
SG_PTSZ_DECL(cuMemcpyDtoHAsync_v2_ptsz, (void *, CUdeviceptr, size_t, CUstream))
SG_PTSZ_DECL(cuMemcpyDtoDAsync_v2_ptsz, (CUdeviceptr, CUdeviceptr, size_t, CUstream))
SG_PTSZ_DECL(cuMemsetD8Async_ptsz, (CUdeviceptr, unsigned char, size_t, CUstream))
SG_PTSZ_DECL(cuMemsetD16Async_ptsz, (CUdeviceptr, unsigned short, size_t, CUstream))
SG_PTSZ_DECL(cuMemsetD32Async_ptsz, (CUdeviceptr, unsigned int, size_t, CUstream))
SG_PTSZ_DECL(cuLaunchKernel_ptsz, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                   unsigned, CUstream, void **, void **))
SG_PTSZ_DECL(cuLaunchHostFunc_ptsz, (CUstream, CUhostFn, void *))
SG_PTSZ_DECL(cuStreamAddCallback_ptsz, (CUstream, CUstreamCallback, void *, unsigned))
SG_PTSZ_DECL(cuStreamSynchronize_ptsz, (CUstream))
SG_PTSZ_DECL(cuStreamQuery_ptsz, (CUstream))
SG_PTSZ_DECL(cuStreamWaitEvent_ptsz, (CUstream, CUevent, unsigned))
SG_PTSZ_DECL(cuStreamGetFlags_ptsz, (CUstream, unsigned *))
SG_PTSZ_DECL(cuStreamGetPriority_ptsz, (CUstream, int *))
SG_PTSZ_DECL(cuStreamGetCtx_ptsz, (CUstream, CUcontext *))
SG_PTSZ_DECL(cuEventRecord_ptsz, (CUevent, CUstream))
SG_PTSZ_DECL(cuEventRecordWithFlags_ptsz, (CUevent, CUstream, unsigned))
SG_PTSZ_DECL(cuGraphLaunch_ptsz, (CUgraphExec, CUstream))
SG_PTSZ_DECL(cuGraphUpload_ptsz, (CUgraphExec, CUstream))
SG_PTSZ_DECL(cuStreamBeginCapture_v2_ptsz, (CUstream, CUstreamCaptureMode))
SG_PTSZ_DECL(cuStreamBeginCaptureToGraph_ptsz,
             (CUstream, CUgraph, const CUgraphNode *, const CUgraphEdgeData *, size_t, CUstreamCaptureMode))
SG_PTSZ_DECL(cuStreamEndCapture_ptsz, (CUstream, CUgraph *))
SG_PTSZ_DECL(cuStreamIsCapturing_ptsz, (CUstream, CUstreamCaptureStatus *))
SG_PTSZ_DECL(cuStreamGetCaptureInfo_v3_ptsz, (CUstream, CUstreamCaptureStatus *, cuuint64_t *, CUgraph *,
                                               const CUgraphNode **, const CUgraphEdgeData **, size_t *))
SG_PTSZ_DECL(cuStreamUpdateCaptureDependencies_v2_ptsz,
             (CUstream, CUgraphNode *, const CUgraphEdgeData *, size_t, unsigned))
SG_PTSZ_DECL(cuMemcpy_ptds, (CUdeviceptr, CUdeviceptr, size_t))
SG_PTSZ_DECL(cuMemcpyHtoD_v2_ptds, (CUdeviceptr, const void *, size_t))
SG_PTSZ_DECL(cuMemcpyDtoH_v2_ptds, (void *, CUdeviceptr, size_t))
SG_PTSZ_DECL(cuMemcpyDtoD_v2_ptds, (CUdeviceptr, CUdeviceptr, size_t))
SG_PTSZ_DECL(cuMemsetD8_v2_ptds, (CUdeviceptr, unsigned char, size_t))
SG_PTSZ_DECL(cuMemsetD16_v2_ptds, (CUdeviceptr, unsigned short, size_t))
SG_PTSZ_DECL(cuMemsetD32_v2_ptds, (CUdeviceptr, unsigned int, size_t))

CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream h) {
  return cuMemcpyAsync(d, s, n, ptds(h));
}
CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr d, const void *s, size_t n, CUstream h) {
  return cuMemcpyHtoDAsync(d, s, n, ptds(h));
}
CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void *d, CUdeviceptr s, size_t n, CUstream h) {
  return cuMemcpyDtoHAsync(d, s, n, ptds(h));
}
CUresult CUDAAPI cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream h) {
  return cuMemcpyDtoDAsync(d, s, n, ptds(h));
}
CUresult CUDAAPI cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream h) {
  return cuMemsetD8Async(d, v, n, ptds(h));
}
CUresult CUDAAPI cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short v, size_t n, CUstream h) {
  return cuMemsetD16Async(d, v, n, ptds(h));
}
CUresult CUDAAPI cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream h) {
  return cuMemsetD32Async(d, v, n, ptds(h));
}
CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                     unsigned bz, unsigned sh, CUstream h, void **p, void **e) {
  return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, sh, ptds(h), p, e);
}
CUresult CUDAAPI cuLaunchHostFunc_ptsz(CUstream h, CUhostFn fn, void *u) { return cuLaunchHostFunc(ptds(h), fn, u); }
CUresult CUDAAPI cuStreamAddCallback_ptsz(CUstream h, CUstreamCallback cb, void *u, unsigned f) {
  return cuStreamAddCallback(ptds(h), cb, u, f);
}
CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream h) { return cuStreamSynchronize(ptds(h)); }
CUresult CUDAAPI cuStreamQuery_ptsz(CUstream h) { return cuStreamQuery(ptds(h)); }
CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream h, CUevent e, unsigned f) { return cuStreamWaitEvent(ptds(h), e, f); }
CUresult CUDAAPI cuStreamGetFlags_ptsz(CUstream h, unsigned *f) { return cuStreamGetFlags(ptds(h), f); }
CUresult CUDAAPI cuStreamGetPriority_ptsz(CUstream h, int *p) { return cuStreamGetPriority(ptds(h), p); }
CUresult CUDAAPI cuStreamGetCtx_ptsz(CUstream h, CUcontext *c) { return cuStreamGetCtx(ptds(h), c); }
CUresult CUDAAPI cuEventRecord_ptsz(CUevent e, CUstream h) { return cuEventRecord(e, ptds(h)); }
CUresult CUDAAPI cuEventRecordWithFlags_ptsz(CUevent e, CUstream h, unsigned f) {
  return cuEventRecordWithFlags(e, ptds(h), f);
}

/* Synchronous calls on the per-thread stream: queue, then wait for it. */
#define SG_PTDS_SYNC(call)                                   \
  do {                                                       \
    CUresult r_ = (call);                                    \
    return r_ ? r_ : cuStreamSynchronize(CU_STREAM_PER_THREAD); \
  } while (0)
CUresult CUDAAPI cuMemcpy_ptds(CUdeviceptr d, CUdeviceptr s, size_t n) {
  SG_PTDS_SYNC(cuMemcpyAsync(d, s, n, CU_STREAM_PER_THREAD));
}
CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr d, const void *s, size_t n) {
  SG_PTDS_SYNC(cuMemcpyHtoDAsync(d, s, n, CU_STREAM_PER_THREAD));
}
CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void *d, CUdeviceptr s, size_t n) {
  SG_PTDS_SYNC(cuMemcpyDtoHAsync(d, s, n, CU_STREAM_PER_THREAD));
}
CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr d, CUdeviceptr s, size_t n) {
  SG_PTDS_SYNC(cuMemcpyDtoDAsync(d, s, n, CU_STREAM_PER_THREAD));
}
CUresult CUDAAPI cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char v, size_t n) {
  SG_PTDS_SYNC(cuMemsetD8Async(d, v, n, CU_STREAM_PER_THREAD));
}
CUresult CUDAAPI cuMemsetD16_v2_ptds(CUdeviceptr d, unsigned short v, size_t n) {
  SG_PTDS_SYNC(cuMemsetD16Async(d, v, n, CU_STREAM_PER_THREAD));
}
CUresult CUDAAPI cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int v, size_t n) {
  SG_PTDS_SYNC(cuMemsetD32Async(d, v, n, CU_STREAM_PER_THREAD));
}

SG_EXPORT CUresult CUDAAPI cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *pCopy);
SG_EXPORT CUresult CUDAAPI cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *pCopy);
SG_EXPORT CUresult CUDAAPI cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *pCopy);
SG_EXPORT CUresult CUDAAPI cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *pCopy, CUstream hStream);
SG_EXPORT CUresult CUDAAPI cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *pCopy, CUstream hStream);

/* ---- exported but not implemented --------------------------------------- */
/* Commonly resolved by libraries at load time; answering NOT_SUPPORTED
 * (and logging once) is better than a missing symbol. */

SG_EXPORT CUresult CUDAAPI cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId) {
  (void)ppExportTable, (void)pExportTableId;
  SG_UNSUPPORTED("cuGetExportTable");
}
SG_EXPORT CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
  (void)dptr, (void)bytesize, (void)flags;
  SG_UNSUPPORTED("cuMemAllocManaged");
}
SG_EXPORT CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
  (void)dptr, (void)bytesize, (void)hStream;
  SG_UNSUPPORTED("cuMemAllocAsync");
}
SG_EXPORT CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  (void)dptr, (void)hStream;
  SG_UNSUPPORTED("cuMemFreeAsync");
}
SG_EXPORT CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                                     unsigned int bx, unsigned int by, unsigned int bz,
                                                     unsigned int sh, CUstream hStream, void **kernelParams) {
  (void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)sh, (void)hStream, (void)kernelParams;
  SG_UNSUPPORTED("cuLaunchCooperativeKernel");
}
SG_EXPORT CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                            void **extra) {
  (void)config, (void)f, (void)kernelParams, (void)extra;
  SG_UNSUPPORTED("cuLaunchKernelEx");
}
SG_EXPORT CUresult CUDAAPI cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                                             void **jitOptionsValues, unsigned int numJitOptions,
                                             CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                             unsigned int numLibraryOptions) {
  (void)library, (void)code, (void)jitOptions, (void)jitOptionsValues, (void)numJitOptions;
  (void)libraryOptions, (void)libraryOptionValues, (void)numLibraryOptions;
  SG_UNSUPPORTED("cuLibraryLoadData");
}
SG_EXPORT CUresult CUDAAPI cuModuleLoad(CUmodule *module, const char *fname) {
  (void)module, (void)fname;
  SG_UNSUPPORTED("cuModuleLoad");
}

/* ---- cuGetProcAddress --------------------------------------------------- */

typedef struct {
  const char *name;
  void *fn;
  void *ptsz;       /* per-thread-default-stream variant, if different */
  int min_version;  /* CUDA version (e.g. 12040) that introduced it */
} sg_proc;

#define P(n) {#n, (void *)n, NULL, 0}
#define PV(n, v) {#n, (void *)n, NULL, v}
#define PT(n, t) {#n, (void *)n, (void *)t, 0}
static const sg_proc procs[] = {
    P(cuInit), P(cuDriverGetVersion), P(cuGetErrorName), P(cuGetErrorString),
    P(cuDeviceGetCount), P(cuDeviceGet), P(cuDeviceGetName), P(cuDeviceGetUuid), P(cuDeviceTotalMem),
    P(cuDeviceGetAttribute),
    P(cuDevicePrimaryCtxRetain), P(cuDevicePrimaryCtxRelease), P(cuDevicePrimaryCtxReset),
    P(cuDevicePrimaryCtxGetState), P(cuDevicePrimaryCtxSetFlags),
    P(cuCtxDestroy), P(cuCtxSetCurrent), P(cuCtxGetCurrent), P(cuCtxPushCurrent), P(cuCtxPopCurrent),
    P(cuCtxGetDevice), P(cuCtxGetFlags), P(cuCtxSynchronize), P(cuCtxGetApiVersion),
    P(cuCtxGetStreamPriorityRange), P(cuCtxGetLimit), P(cuCtxSetLimit), P(cuCtxGetCacheConfig),
    P(cuCtxSetCacheConfig), P(cuDeviceCanAccessPeer), P(cuCtxEnablePeerAccess), P(cuCtxDisablePeerAccess),
    P(cuMemAlloc), P(cuMemFree), P(cuMemGetInfo), P(cuMemGetAddressRange), P(cuMemAllocHost), P(cuMemFreeHost),
    P(cuMemHostAlloc), P(cuMemHostGetDevicePointer), P(cuPointerGetAttribute),
    {"cuMemcpy", (void *)cuMemcpy, (void *)cuMemcpy_ptds, 0},
    {"cuMemcpyHtoD", (void *)cuMemcpyHtoD, (void *)cuMemcpyHtoD_v2_ptds, 0},
    {"cuMemcpyDtoH", (void *)cuMemcpyDtoH, (void *)cuMemcpyDtoH_v2_ptds, 0},
    {"cuMemcpyDtoD", (void *)cuMemcpyDtoD, (void *)cuMemcpyDtoD_v2_ptds, 0},
    P(cuArrayCreate), P(cuArray3DCreate), P(cuArrayDestroy), P(cuArrayGetDescriptor), P(cuArray3DGetDescriptor),
    PT(cuMemcpy2D, cuMemcpy2D_v2_ptds), PT(cuMemcpy2DUnaligned, cuMemcpy2DUnaligned_v2_ptds),
    PT(cuMemcpy3D, cuMemcpy3D_v2_ptds), PT(cuMemcpy2DAsync, cuMemcpy2DAsync_v2_ptsz),
    PT(cuMemcpy3DAsync, cuMemcpy3DAsync_v2_ptsz),
    P(cuTexObjectCreate), P(cuTexObjectDestroy), P(cuTexObjectGetResourceDesc), P(cuTexObjectGetTextureDesc),
    P(cuTexObjectGetResourceViewDesc), P(cuSurfObjectCreate), P(cuSurfObjectDestroy), P(cuSurfObjectGetResourceDesc),
    PT(cuMemcpyAsync, cuMemcpyAsync_ptsz), PT(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2_ptsz),
    PT(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2_ptsz), PT(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2_ptsz),
    {"cuMemsetD8", (void *)cuMemsetD8, (void *)cuMemsetD8_v2_ptds, 0},
    {"cuMemsetD16", (void *)cuMemsetD16, (void *)cuMemsetD16_v2_ptds, 0},
    {"cuMemsetD32", (void *)cuMemsetD32, (void *)cuMemsetD32_v2_ptds, 0},
    PT(cuMemsetD8Async, cuMemsetD8Async_ptsz), PT(cuMemsetD16Async, cuMemsetD16Async_ptsz),
    PT(cuMemsetD32Async, cuMemsetD32Async_ptsz),
    PV(cuMemAddressReserve, 10020), PV(cuMemAddressFree, 10020), PV(cuMemCreate, 10020), PV(cuMemRelease, 10020),
    PV(cuMemMap, 10020), PV(cuMemUnmap, 10020), PV(cuMemSetAccess, 10020),
    PV(cuMemGetAllocationGranularity, 10020), PV(cuMemGetAllocationPropertiesFromHandle, 10020),
    P(cuModuleLoadData), P(cuModuleLoadDataEx), P(cuModuleLoadFatBinary), P(cuModuleUnload),
    P(cuModuleGetFunction), P(cuModuleGetGlobal), PV(cuModuleGetFunctionCount, 12040),
    PV(cuModuleEnumerateFunctions, 12040), PV(cuFuncGetName, 12030), PV(cuFuncGetParamInfo, 12040),
    P(cuFuncGetAttribute), P(cuFuncSetAttribute), P(cuFuncSetCacheConfig), P(cuFuncGetModule),
    PT(cuLaunchKernel, cuLaunchKernel_ptsz), PT(cuLaunchHostFunc, cuLaunchHostFunc_ptsz),
    PT(cuStreamAddCallback, cuStreamAddCallback_ptsz),
    P(cuStreamCreate), P(cuStreamCreateWithPriority), P(cuStreamDestroy),
    PT(cuStreamSynchronize, cuStreamSynchronize_ptsz), PT(cuStreamQuery, cuStreamQuery_ptsz),
    PT(cuStreamWaitEvent, cuStreamWaitEvent_ptsz), PT(cuStreamGetFlags, cuStreamGetFlags_ptsz),
    PT(cuStreamGetPriority, cuStreamGetPriority_ptsz), PT(cuStreamGetCtx, cuStreamGetCtx_ptsz),
    P(cuEventCreate), P(cuEventDestroy), PT(cuEventRecord, cuEventRecord_ptsz),
    PT(cuEventRecordWithFlags, cuEventRecordWithFlags_ptsz), P(cuEventSynchronize), P(cuEventQuery),
    P(cuEventElapsedTime), P(cuGetProcAddress),
    P(cuMemHostRegister), P(cuMemHostUnregister), P(cuDeviceGetPCIBusId),
    P(cuOccupancyMaxActiveBlocksPerMultiprocessor), P(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags),
    P(cuOccupancyMaxPotentialBlockSize), P(cuOccupancyMaxPotentialBlockSizeWithFlags),
    PV(cuOccupancyMaxActiveClusters, 11070), PV(cuOccupancyMaxPotentialClusterSize, 11070),
    PV(cuDeviceGetTexture1DLinearMaxWidth, 11010), PV(cuDeviceGetHostAtomicCapabilities, 13000),
    PV(cuDeviceGetP2PAtomicCapabilities, 13000), PV(cuCtxResetPersistingL2Cache, 11000),
    P(cuGetExportTable), P(cuMemAllocManaged), P(cuMemAllocAsync),
    P(cuMemFreeAsync), P(cuLaunchCooperativeKernel), P(cuLaunchKernelEx), P(cuLibraryLoadData),
    P(cuModuleLoad),
    /* graphs and stream capture (sg_graph.c, sg_graph_capture.c) */
    P(cuGraphCreate), P(cuGraphDestroy), P(cuGraphClone), P(cuGraphNodeFindInClone),
    PV(cuGraphAddKernelNode, 12000), PV(cuGraphKernelNodeGetParams, 12000), PV(cuGraphKernelNodeSetParams, 12000),
    P(cuGraphAddMemcpyNode), P(cuGraphMemcpyNodeGetParams), P(cuGraphMemcpyNodeSetParams),
    P(cuGraphAddMemsetNode), P(cuGraphMemsetNodeGetParams), P(cuGraphMemsetNodeSetParams),
    P(cuGraphAddHostNode), P(cuGraphHostNodeGetParams), P(cuGraphHostNodeSetParams),
    P(cuGraphAddChildGraphNode), P(cuGraphChildGraphNodeGetGraph), P(cuGraphAddEmptyNode),
    P(cuGraphAddEventRecordNode), P(cuGraphEventRecordNodeGetEvent), P(cuGraphEventRecordNodeSetEvent),
    P(cuGraphAddEventWaitNode), P(cuGraphEventWaitNodeGetEvent), P(cuGraphEventWaitNodeSetEvent),
    P(cuGraphNodeGetType), P(cuGraphGetNodes), P(cuGraphGetRootNodes), PV(cuGraphGetEdges, 12030),
    PV(cuGraphNodeGetDependencies, 12030), PV(cuGraphNodeGetDependentNodes, 12030),
    PV(cuGraphAddDependencies, 12030), PV(cuGraphRemoveDependencies, 12030), P(cuGraphDestroyNode),
    PV(cuGraphInstantiate, 11040), P(cuGraphInstantiateWithFlags), PV(cuGraphInstantiateWithParams, 12000),
    P(cuGraphExecGetFlags), PV(cuGraphExecKernelNodeSetParams, 12000), P(cuGraphExecMemcpyNodeSetParams),
    P(cuGraphExecMemsetNodeSetParams), P(cuGraphExecHostNodeSetParams), P(cuGraphExecChildGraphNodeSetParams),
    P(cuGraphExecEventRecordNodeSetEvent), P(cuGraphExecEventWaitNodeSetEvent), PV(cuGraphExecUpdate, 12000),
    P(cuGraphNodeSetEnabled), P(cuGraphNodeGetEnabled), PT(cuGraphUpload, cuGraphUpload_ptsz),
    PT(cuGraphLaunch, cuGraphLaunch_ptsz), P(cuGraphExecDestroy), P(cuGraphDebugDotPrint),
    PV(cuGraphAddNode, 12030), PV(cuGraphNodeSetParams, 12020), PV(cuGraphExecNodeSetParams, 12020),
    {"cuStreamBeginCapture", (void *)cuStreamBeginCapture, (void *)cuStreamBeginCapture_v2_ptsz, 10010},
    {"cuStreamBeginCaptureToGraph", (void *)cuStreamBeginCaptureToGraph, (void *)cuStreamBeginCaptureToGraph_ptsz,
     12030},
    PT(cuStreamEndCapture, cuStreamEndCapture_ptsz), PT(cuStreamIsCapturing, cuStreamIsCapturing_ptsz),
    {"cuStreamGetCaptureInfo", (void *)cuStreamGetCaptureInfo, (void *)cuStreamGetCaptureInfo_v3_ptsz, 12030},
    {"cuStreamUpdateCaptureDependencies", (void *)cuStreamUpdateCaptureDependencies,
     (void *)cuStreamUpdateCaptureDependencies_v2_ptsz, 12030},
    P(cuThreadExchangeStreamCaptureMode),
};
#undef P
#undef PV
#undef PT

SG_EXPORT CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                            CUdriverProcAddressQueryResult *symbolStatus) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
    return CUDA_ERROR_INVALID_VALUE;
  *pfn = NULL;
  for (size_t i = 0; i < sizeof procs / sizeof procs[0]; i++) {
    if (strcmp(procs[i].name, symbol) != 0) continue;
    if (cudaVersion < procs[i].min_version) {
      /* With a status to report, 13.0 returns CUDA_SUCCESS and a NULL
       * pointer (measured); without one, the error is the only signal. */
      if (!symbolStatus) return CUDA_ERROR_NOT_FOUND;
      *symbolStatus = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
      return CUDA_SUCCESS;
    }
    void *fn = procs[i].fn;
    if ((flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && procs[i].ptsz) fn = procs[i].ptsz;
    *pfn = fn;
    if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  if (strcmp(symbol, "cuCtxCreate") == 0) {
    /* Callers asking for a pre-12.5 cuCtxCreate expect the 3-argument ABI. */
    *pfn = cudaVersion >= 12050 ? (void *)cuCtxCreate : (void *)cuCtxCreate_v2;
    if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  if (!symbolStatus) return CUDA_ERROR_NOT_FOUND;
  *symbolStatus = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_SUCCESS;
}

/* ---- unversioned names with the same ABI as their successors ------------ */
/* libcuda.so.1 exports both; a caller that dlsym()s the plain name must
 * find something.  Only names whose signature did not change are aliased:
 * the plain cuMemAlloc, cuMemcpyHtoD, ... are the 32-bit-size ABI and are
 * deliberately absent. */
#undef cuCtxDestroy
#undef cuCtxPopCurrent
#undef cuCtxPushCurrent
#undef cuStreamDestroy
#undef cuEventDestroy
#undef cuDevicePrimaryCtxRelease
#undef cuDevicePrimaryCtxReset
#undef cuDevicePrimaryCtxSetFlags
#undef cuDeviceGetUuid
#undef cuEventElapsedTime
#undef cuGetProcAddress
SG_EXPORT CUresult CUDAAPI cuCtxDestroy(CUcontext ctx);
SG_EXPORT CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx);
SG_EXPORT CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx);
SG_EXPORT CUresult CUDAAPI cuStreamDestroy(CUstream hStream);
SG_EXPORT CUresult CUDAAPI cuEventDestroy(CUevent hEvent);
SG_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev);
SG_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev);
SG_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags);
SG_EXPORT CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
SG_EXPORT CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);
SG_EXPORT CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);

CUresult CUDAAPI cuCtxDestroy(CUcontext ctx) { return cuCtxDestroy_v2(ctx); }
CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx) { return cuCtxPopCurrent_v2(pctx); }
CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx) { return cuCtxPushCurrent_v2(ctx); }
CUresult CUDAAPI cuStreamDestroy(CUstream hStream) { return cuStreamDestroy_v2(hStream); }
CUresult CUDAAPI cuEventDestroy(CUevent hEvent) { return cuEventDestroy_v2(hEvent); }
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }
CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev) { return cuDevicePrimaryCtxReset_v2(dev); }
CUresult CUDAAPI cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}
CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) { return cuDeviceGetUuid_v2(uuid, dev); }
CUresult CUDAAPI cuEventElapsedTime(float *ms, CUevent hStart, CUevent hEnd) {
  return cuEventElapsedTime_v2(ms, hStart, hEnd);
}
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
  return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}
