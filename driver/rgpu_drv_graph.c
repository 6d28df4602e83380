/* Graphs on the runtime's graph model: a CUgraph is a cudaGraph_t, a
 * CUgraphExec a cudaGraphExec_t and a CUgraphNode a cudaGraphNode_t, so a
 * graph captured or built through one API is instantiated and launched
 * through the other.  Node kinds whose driver parameter structs differ
 * from the runtime's (memcpy, memset, kernel) are not added here; kernel
 * nodes come with the driver's kernels (rgpu_drv_launch.c). */
#include <string.h>

#include "rgpu_drv_internal.h"

RGPU_DRV CUresult rgpu_drv_cuGraphCreate(CUgraph *phGraph, unsigned int flags) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphCreate(phGraph, flags));
}

RGPU_DRV CUresult rgpu_drv_cuGraphDestroy(CUgraph hGraph) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphDestroy(hGraph));
}

/* User objects are cudart's (rgpu_cudart_user_object.c): the handle
 * types are the same structs. */
RGPU_DRV CUresult rgpu_drv_cuUserObjectCreate(CUuserObject *object_out, void *ptr, CUhostFn destroy,
                                              unsigned int initialRefcount, unsigned int flags) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaUserObjectCreate(object_out, ptr, destroy, initialRefcount, flags));
}
RGPU_DRV CUresult rgpu_drv_cuUserObjectRetain(CUuserObject object, unsigned int count) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaUserObjectRetain(object, count));
}
RGPU_DRV CUresult rgpu_drv_cuUserObjectRelease(CUuserObject object, unsigned int count) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaUserObjectRelease(object, count));
}
RGPU_DRV CUresult rgpu_drv_cuGraphRetainUserObject(CUgraph graph, CUuserObject object,
                                                   unsigned int count, unsigned int flags) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphRetainUserObject(graph, object, count, flags));
}
RGPU_DRV CUresult rgpu_drv_cuGraphReleaseUserObject(CUgraph graph, CUuserObject object,
                                                    unsigned int count) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphReleaseUserObject(graph, object, count));
}

RGPU_DRV CUresult rgpu_drv_cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphClone(phGraphClone, originalGraph));
}

RGPU_DRV CUresult rgpu_drv_cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                       unsigned long long flags) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphInstantiateWithFlags(phGraphExec, hGraph, flags));
}

/* The 10.0 and 11.0 forms: no flags; the error node and log are empty
 * (the runtime reports what failed through its return code). */
RGPU_DRV CUresult rgpu_drv_cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                 CUgraphNode *phErrorNode, char *logBuffer,
                                                 size_t bufferSize) {
  if (phErrorNode) *phErrorNode = NULL;
  if (logBuffer && bufferSize) logBuffer[0] = 0;
  return rgpu_drv_cuGraphInstantiateWithFlags(phGraphExec, hGraph, 0);
}
RGPU_DRV CUresult rgpu_drv_cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph,
                                              CUgraphNode *phErrorNode, char *logBuffer,
                                              size_t bufferSize) {
  return rgpu_drv_cuGraphInstantiate_v2(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

/* CUDA_GRAPH_INSTANTIATE_PARAMS is cudaGraphInstantiateParams field for
 * field (flags, upload stream, error node, result). */
RGPU_DRV CUresult rgpu_drv_cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                        CUDA_GRAPH_INSTANTIATE_PARAMS *p) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(
      cudaGraphInstantiateWithParams(phGraphExec, hGraph, (cudaGraphInstantiateParams *)p));
}
RGPU_DRV CUresult rgpu_drv_cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec,
                                                             CUgraph hGraph,
                                                             CUDA_GRAPH_INSTANTIATE_PARAMS *p) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphInstantiateWithParams_ptsz(phGraphExec, hGraph,
                                                         (cudaGraphInstantiateParams *)p));
}

RGPU_DRV CUresult rgpu_drv_cuGraphExecGetFlags(CUgraphExec hGraphExec, cuuint64_t *flags) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphExecGetFlags(hGraphExec, (unsigned long long *)flags));
}

RGPU_DRV CUresult rgpu_drv_cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphLaunch(hGraphExec, hStream));
}
RGPU_DRV CUresult rgpu_drv_cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphLaunch_ptsz(hGraphExec, hStream));
}

RGPU_DRV CUresult rgpu_drv_cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphUpload(hGraphExec, hStream));
}
RGPU_DRV CUresult rgpu_drv_cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphUpload_ptsz(hGraphExec, hStream));
}

RGPU_DRV CUresult rgpu_drv_cuGraphExecDestroy(CUgraphExec hGraphExec) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphExecDestroy(hGraphExec));
}

/* CUgraphExecUpdateResultInfo is cudaGraphExecUpdateResultInfo. */
RGPU_DRV CUresult rgpu_drv_cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph,
                                                CUgraphExecUpdateResultInfo *resultInfo) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(
      cudaGraphExecUpdate(hGraphExec, hGraph, (cudaGraphExecUpdateResultInfo *)resultInfo));
}
/* The 10.2 form: result and error node as two out-parameters. */
RGPU_DRV CUresult rgpu_drv_cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph,
                                             CUgraphNode *hErrorNode_out,
                                             CUgraphExecUpdateResult *updateResult_out) {
  CUgraphExecUpdateResultInfo info = {0};
  CUresult r = rgpu_drv_cuGraphExecUpdate_v2(hGraphExec, hGraph, &info);
  if (hErrorNode_out) *hErrorNode_out = info.errorNode;
  if (updateResult_out) *updateResult_out = info.result;
  return r;
}

RGPU_DRV CUresult rgpu_drv_cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphGetNodes(hGraph, nodes, numNodes));
}

RGPU_DRV CUresult rgpu_drv_cuGraphGetRootNodes(CUgraph hGraph, CUgraphNode *rootNodes,
                                               size_t *numRootNodes) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphGetRootNodes(hGraph, rootNodes, numRootNodes));
}

RGPU_DRV CUresult rgpu_drv_cuGraphGetEdges_v2(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to,
                                              CUgraphEdgeData *edgeData, size_t *numEdges) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(
      cudaGraphGetEdges(hGraph, from, to, (cudaGraphEdgeData *)edgeData, numEdges));
}
RGPU_DRV CUresult rgpu_drv_cuGraphGetEdges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to,
                                           size_t *numEdges) {
  return rgpu_drv_cuGraphGetEdges_v2(hGraph, from, to, NULL, numEdges);
}

RGPU_DRV CUresult rgpu_drv_cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type) {
  RGPU_DRV_ENTER_CTX();
  /* CU_GRAPH_NODE_TYPE_* are the cudaGraphNodeType* values. */
  return RGPU_DRV_RT(cudaGraphNodeGetType(hNode, (enum cudaGraphNodeType *)type));
}

RGPU_DRV CUresult rgpu_drv_cuGraphDestroyNode(CUgraphNode hNode) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphDestroyNode(hNode));
}

RGPU_DRV CUresult rgpu_drv_cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                               const CUgraphNode *dependencies,
                                               size_t numDependencies) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphAddEmptyNode(phGraphNode, hGraph, dependencies, numDependencies));
}

/* CUDA_HOST_NODE_PARAMS is cudaHostNodeParams (fn, userData). */
RGPU_DRV CUresult rgpu_drv_cuGraphAddHostNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                              const CUgraphNode *dependencies,
                                              size_t numDependencies,
                                              const CUDA_HOST_NODE_PARAMS *nodeParams) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphAddHostNode(phGraphNode, hGraph, dependencies, numDependencies,
                                          (const struct cudaHostNodeParams *)nodeParams));
}

RGPU_DRV CUresult rgpu_drv_cuGraphHostNodeGetParams(CUgraphNode hNode,
                                                    CUDA_HOST_NODE_PARAMS *nodeParams) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(
      cudaGraphHostNodeGetParams(hNode, (struct cudaHostNodeParams *)nodeParams));
}

RGPU_DRV CUresult rgpu_drv_cuGraphAddEventRecordNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                     const CUgraphNode *dependencies,
                                                     size_t numDependencies, CUevent event) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(
      cudaGraphAddEventRecordNode(phGraphNode, hGraph, dependencies, numDependencies, event));
}

RGPU_DRV CUresult rgpu_drv_cuGraphAddEventWaitNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                   const CUgraphNode *dependencies,
                                                   size_t numDependencies, CUevent event) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(
      cudaGraphAddEventWaitNode(phGraphNode, hGraph, dependencies, numDependencies, event));
}

RGPU_DRV CUresult rgpu_drv_cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                    const CUgraphNode *dependencies,
                                                    size_t numDependencies, CUgraph childGraph) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphAddChildGraphNode(phGraphNode, hGraph, dependencies,
                                                numDependencies, childGraph));
}

RGPU_DRV CUresult rgpu_drv_cuGraphAddDependencies_v2(CUgraph hGraph, const CUgraphNode *from,
                                                     const CUgraphNode *to,
                                                     const CUgraphEdgeData *edgeData,
                                                     size_t numDependencies) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphAddDependencies(hGraph, from, to,
                                              (const cudaGraphEdgeData *)edgeData,
                                              numDependencies));
}
RGPU_DRV CUresult rgpu_drv_cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode *from,
                                                  const CUgraphNode *to, size_t numDependencies) {
  return rgpu_drv_cuGraphAddDependencies_v2(hGraph, from, to, NULL, numDependencies);
}

/* CUDA_MEMSET_NODE_PARAMS is cudaMemsetParams (the destination as a
 * number); the context argument names the device, which the destination
 * already does. */
RGPU_DRV CUresult rgpu_drv_cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                const CUgraphNode *dependencies,
                                                size_t numDependencies,
                                                const CUDA_MEMSET_NODE_PARAMS *memsetParams,
                                                CUcontext ctx) {
  RGPU_DRV_ENTER_CTX();
  if (ctx && rgpu_drv_ctx_check(ctx) != CUDA_SUCCESS) {
    rgpu_rt_count_call();
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  return RGPU_DRV_RT(cudaGraphAddMemsetNode(phGraphNode, hGraph, dependencies, numDependencies,
                                            (const struct cudaMemsetParams *)memsetParams));
}

RGPU_DRV CUresult rgpu_drv_cuGraphMemsetNodeGetParams(CUgraphNode hNode,
                                                      CUDA_MEMSET_NODE_PARAMS *nodeParams) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(
      cudaGraphMemsetNodeGetParams(hNode, (struct cudaMemsetParams *)nodeParams));
}

/* ---- node queries and settings with the runtime's types -------------------------- */

RGPU_DRV CUresult rgpu_drv_cuGraphNodeGetDependencies_v2(CUgraphNode hNode, CUgraphNode *deps,
                                                         CUgraphEdgeData *edgeData,
                                                         size_t *numDependencies) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphNodeGetDependencies(hNode, deps, (cudaGraphEdgeData *)edgeData,
                                                  numDependencies));
}
RGPU_DRV CUresult rgpu_drv_cuGraphNodeGetDependencies(CUgraphNode hNode, CUgraphNode *deps,
                                                      size_t *numDependencies) {
  return rgpu_drv_cuGraphNodeGetDependencies_v2(hNode, deps, NULL, numDependencies);
}

RGPU_DRV CUresult rgpu_drv_cuGraphNodeGetDependentNodes_v2(CUgraphNode hNode, CUgraphNode *nodes,
                                                           CUgraphEdgeData *edgeData,
                                                           size_t *numDependentNodes) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphNodeGetDependentNodes(hNode, nodes, (cudaGraphEdgeData *)edgeData,
                                                    numDependentNodes));
}
RGPU_DRV CUresult rgpu_drv_cuGraphNodeGetDependentNodes(CUgraphNode hNode, CUgraphNode *nodes,
                                                        size_t *numDependentNodes) {
  return rgpu_drv_cuGraphNodeGetDependentNodes_v2(hNode, nodes, NULL, numDependentNodes);
}

RGPU_DRV CUresult rgpu_drv_cuGraphRemoveDependencies_v2(CUgraph hGraph, const CUgraphNode *from,
                                                        const CUgraphNode *to,
                                                        const CUgraphEdgeData *edgeData,
                                                        size_t numDependencies) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphRemoveDependencies(hGraph, from, to,
                                                 (const cudaGraphEdgeData *)edgeData,
                                                 numDependencies));
}
RGPU_DRV CUresult rgpu_drv_cuGraphRemoveDependencies(CUgraph hGraph, const CUgraphNode *from,
                                                     const CUgraphNode *to,
                                                     size_t numDependencies) {
  return rgpu_drv_cuGraphRemoveDependencies_v2(hGraph, from, to, NULL, numDependencies);
}

RGPU_DRV CUresult rgpu_drv_cuGraphHostNodeSetParams(CUgraphNode hNode,
                                                    const CUDA_HOST_NODE_PARAMS *nodeParams) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(
      cudaGraphHostNodeSetParams(hNode, (const struct cudaHostNodeParams *)nodeParams));
}

RGPU_DRV CUresult rgpu_drv_cuGraphExecHostNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                        const CUDA_HOST_NODE_PARAMS *nodeParams) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphExecHostNodeSetParams(
      hGraphExec, hNode, (const struct cudaHostNodeParams *)nodeParams));
}

RGPU_DRV CUresult rgpu_drv_cuGraphMemsetNodeSetParams(CUgraphNode hNode,
                                                      const CUDA_MEMSET_NODE_PARAMS *nodeParams) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(
      cudaGraphMemsetNodeSetParams(hNode, (const struct cudaMemsetParams *)nodeParams));
}

RGPU_DRV CUresult rgpu_drv_cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec,
                                                          CUgraphNode hNode,
                                                          const CUDA_MEMSET_NODE_PARAMS *p,
                                                          CUcontext ctx) {
  RGPU_DRV_ENTER_CTX();
  if (ctx && rgpu_drv_ctx_check(ctx) != CUDA_SUCCESS) {
    rgpu_rt_count_call();
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  return RGPU_DRV_RT(
      cudaGraphExecMemsetNodeSetParams(hGraphExec, hNode, (const struct cudaMemsetParams *)p));
}

RGPU_DRV CUresult rgpu_drv_cuGraphNodeSetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                 unsigned int isEnabled) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphNodeSetEnabled(hGraphExec, hNode, isEnabled));
}

RGPU_DRV CUresult rgpu_drv_cuGraphNodeGetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                 unsigned int *isEnabled) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphNodeGetEnabled(hGraphExec, hNode, isEnabled));
}

RGPU_DRV CUresult rgpu_drv_cuGraphEventRecordNodeGetEvent(CUgraphNode hNode, CUevent *event_out) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphEventRecordNodeGetEvent(hNode, event_out));
}
RGPU_DRV CUresult rgpu_drv_cuGraphEventRecordNodeSetEvent(CUgraphNode hNode, CUevent event) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphEventRecordNodeSetEvent(hNode, event));
}
RGPU_DRV CUresult rgpu_drv_cuGraphEventWaitNodeGetEvent(CUgraphNode hNode, CUevent *event_out) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphEventWaitNodeGetEvent(hNode, event_out));
}
RGPU_DRV CUresult rgpu_drv_cuGraphEventWaitNodeSetEvent(CUgraphNode hNode, CUevent event) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphEventWaitNodeSetEvent(hNode, event));
}

RGPU_DRV CUresult rgpu_drv_cuGraphChildGraphNodeGetGraph(CUgraphNode hNode, CUgraph *phGraph) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphChildGraphNodeGetGraph(hNode, phGraph));
}

RGPU_DRV CUresult rgpu_drv_cuGraphDebugDotPrint(CUgraph hGraph, const char *path,
                                                unsigned int flags) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphDebugDotPrint(hGraph, path, flags));
}

/* ---- memcpy nodes: CUDA_MEMCPY3D <-> cudaMemcpy3DParms ------------------------- */

/* One side of a driver 3D copy as the runtime's pitched pointer
 * (rgpu_drv_copy_side gives the base and the direction). */
static CUresult side_3d(CUmemorytype type, const void *host, CUdeviceptr device, size_t pitch,
                        size_t height, size_t width, struct cudaPitchedPtr *out, int *dev) {
  const char *base;
  CUresult r = rgpu_drv_copy_side(type, host, device, &base, dev);
  if (r != CUDA_SUCCESS) return r;
  *out = (struct cudaPitchedPtr){.ptr = (void *)base, .pitch = pitch ? pitch : width,
                                .xsize = width, .ysize = height};
  return CUDA_SUCCESS;
}

static CUresult to_runtime_3d(const CUDA_MEMCPY3D *p, struct cudaMemcpy3DParms *rp) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  if (p->srcLOD || p->dstLOD) return CUDA_ERROR_NOT_SUPPORTED; /* mipmap levels: arrays */
  memset(rp, 0, sizeof *rp);
  int sdev, ddev;
  CUresult r = side_3d(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcPitch,
                       p->srcHeight ? p->srcHeight : p->Height, p->WidthInBytes, &rp->srcPtr,
                       &sdev);
  if (r == CUDA_SUCCESS)
    r = side_3d(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstPitch,
                p->dstHeight ? p->dstHeight : p->Height, p->WidthInBytes, &rp->dstPtr, &ddev);
  if (r != CUDA_SUCCESS) return r;
  rp->srcPos = (struct cudaPos){p->srcXInBytes, p->srcY, p->srcZ};
  rp->dstPos = (struct cudaPos){p->dstXInBytes, p->dstY, p->dstZ};
  rp->extent = (struct cudaExtent){p->WidthInBytes, p->Height, p->Depth ? p->Depth : 1};
  rp->kind = rgpu_drv_copy_kind(sdev, ddev);
  return CUDA_SUCCESS;
}

/* A memcpy node's parameters as the runtime takes them: the context (when
 * given) must be live, the copy converted; a refusal counts the call (no
 * runtime code ran to count it). */
static CUresult memcpy_node_params(const CUDA_MEMCPY3D *p, CUcontext ctx, struct cudaMemcpy3DParms *rp) {
  CUresult r = ctx && rgpu_drv_ctx_check(ctx) != CUDA_SUCCESS ? CUDA_ERROR_INVALID_CONTEXT : to_runtime_3d(p, rp);
  if (r != CUDA_SUCCESS) rgpu_rt_count_call();
  return r;
}

RGPU_DRV CUresult rgpu_drv_cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                const CUgraphNode *dependencies,
                                                size_t numDependencies,
                                                const CUDA_MEMCPY3D *copyParams, CUcontext ctx) {
  RGPU_DRV_ENTER_CTX();
  struct cudaMemcpy3DParms rp;
  CUresult r = memcpy_node_params(copyParams, ctx, &rp);
  if (r != CUDA_SUCCESS) return r;
  return RGPU_DRV_RT(
      cudaGraphAddMemcpyNode(phGraphNode, hGraph, dependencies, numDependencies, &rp));
}

/* One side (src or dst) of a runtime copy rp into the driver's fields of
 * CUDA_MEMCPY3D *p; host: the copy's kind puts this side on the host.  A
 * side of a cudaMemcpyDefault copy is unified, the others are device. */
#define FROM_RUNTIME_SIDE(p, rp, side, host)                                                 \
  do {                                                                                       \
    (p)->side##XInBytes = (rp).side##Pos.x;                                                  \
    (p)->side##Y = (rp).side##Pos.y;                                                         \
    (p)->side##Z = (rp).side##Pos.z;                                                         \
    (p)->side##MemoryType = (host)                           ? CU_MEMORYTYPE_HOST            \
                            : (rp).kind == cudaMemcpyDefault ? CU_MEMORYTYPE_UNIFIED         \
                                                             : CU_MEMORYTYPE_DEVICE;         \
    if (host)                                                                                \
      (p)->side##Host = (rp).side##Ptr.ptr;                                                  \
    else                                                                                     \
      (p)->side##Device = (CUdeviceptr)(uintptr_t)(rp).side##Ptr.ptr;                        \
    (p)->side##Pitch = (rp).side##Ptr.pitch;                                                 \
    (p)->side##Height = (rp).side##Ptr.ysize;                                                \
  } while (0)

RGPU_DRV CUresult rgpu_drv_cuGraphMemcpyNodeGetParams(CUgraphNode hNode, CUDA_MEMCPY3D *nodeParams) {
  RGPU_DRV_ENTER_CTX();
  if (!nodeParams) {
    rgpu_rt_count_call();
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct cudaMemcpy3DParms rp;
  CUresult r = RGPU_DRV_RT(cudaGraphMemcpyNodeGetParams(hNode, &rp));
  if (r != CUDA_SUCCESS) return r;
  if (rp.srcArray || rp.dstArray) return CUDA_ERROR_NOT_SUPPORTED;
  memset(nodeParams, 0, sizeof *nodeParams);
  /* Pointers as unified addresses: the direction is in the pointers. */
  int src_host = rp.kind == cudaMemcpyHostToDevice || rp.kind == cudaMemcpyHostToHost;
  int dst_host = rp.kind == cudaMemcpyDeviceToHost || rp.kind == cudaMemcpyHostToHost;
  FROM_RUNTIME_SIDE(nodeParams, rp, src, src_host);
  FROM_RUNTIME_SIDE(nodeParams, rp, dst, dst_host);
  nodeParams->WidthInBytes = rp.extent.width;
  nodeParams->Height = rp.extent.height;
  nodeParams->Depth = rp.extent.depth;
  return CUDA_SUCCESS;
}

/* Conditional nodes (cudart's rgpu_cudart_graph_cond.c): the handle is the
 * runtime's; the context must be the current one's or NULL. */
RGPU_DRV CUresult rgpu_drv_cuGraphConditionalHandleCreate(CUgraphConditionalHandle *pHandle_out,
                                                          CUgraph hGraph, CUcontext ctx,
                                                          unsigned int defaultLaunchValue,
                                                          unsigned int flags) {
  RGPU_DRV_ENTER_CTX();
  if (ctx && rgpu_drv_ctx_check(ctx) != CUDA_SUCCESS) {
    rgpu_rt_count_call();
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  return RGPU_DRV_RT(cudaGraphConditionalHandleCreate((cudaGraphConditionalHandle *)pHandle_out, hGraph, defaultLaunchValue, flags));
}

/* The generic node API: each kind goes to its own cuGraphAdd*Node (which
 * converts the driver's struct where it differs from the runtime's), a
 * conditional node to the runtime's cudaGraphAddNode.  Edge data must be
 * the default (no programmatic edges without programmatic launches). */
RGPU_DRV CUresult rgpu_drv_cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                             const CUgraphNode *dependencies,
                                             const CUgraphEdgeData *dependencyData,
                                             size_t numDependencies, CUgraphNodeParams *p) {
  static const CUgraphEdgeData zero;
  for (size_t i = 0; dependencyData && i < numDependencies; i++)
    if (memcmp(&dependencyData[i], &zero, sizeof zero)) return CUDA_ERROR_NOT_SUPPORTED;
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  const CUgraphNode *d = dependencies;
  size_t n = numDependencies;
  switch (p->type) {
  case CU_GRAPH_NODE_TYPE_KERNEL:
    /* CUDA_KERNEL_NODE_PARAMS_v3 has v2's layout. */
    return rgpu_drv_cuGraphAddKernelNode_v2(phGraphNode, hGraph, d, n,
                                            (const CUDA_KERNEL_NODE_PARAMS_v2 *)&p->kernel);
  case CU_GRAPH_NODE_TYPE_MEMCPY:
    if (p->memcpy.flags || p->memcpy.reserved) return CUDA_ERROR_INVALID_VALUE;
    return rgpu_drv_cuGraphAddMemcpyNode(phGraphNode, hGraph, d, n, &p->memcpy.copyParams, p->memcpy.copyCtx);
  case CU_GRAPH_NODE_TYPE_MEMSET: {
    CUDA_MEMSET_NODE_PARAMS m = {p->memset.dst, p->memset.pitch, p->memset.value, p->memset.elementSize,
                                 p->memset.width, p->memset.height};
    return rgpu_drv_cuGraphAddMemsetNode(phGraphNode, hGraph, d, n, &m, p->memset.ctx);
  }
  case CU_GRAPH_NODE_TYPE_HOST: {
    CUDA_HOST_NODE_PARAMS h = {p->host.fn, p->host.userData};
    return rgpu_drv_cuGraphAddHostNode(phGraphNode, hGraph, d, n, &h);
  }
  case CU_GRAPH_NODE_TYPE_GRAPH:
    if (p->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE) return CUDA_ERROR_NOT_SUPPORTED;
    return rgpu_drv_cuGraphAddChildGraphNode(phGraphNode, hGraph, d, n, p->graph.graph);
  case CU_GRAPH_NODE_TYPE_EMPTY: return rgpu_drv_cuGraphAddEmptyNode(phGraphNode, hGraph, d, n);
  case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    return rgpu_drv_cuGraphAddEventRecordNode(phGraphNode, hGraph, d, n, p->eventRecord.event);
  case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
    return rgpu_drv_cuGraphAddEventWaitNode(phGraphNode, hGraph, d, n, p->eventWait.event);
  case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
    CUDA_MEM_ALLOC_NODE_PARAMS a = {p->alloc.poolProps, p->alloc.accessDescs, p->alloc.accessDescCount,
                                    p->alloc.bytesize, 0};
    CUresult r = rgpu_drv_cuGraphAddMemAllocNode(phGraphNode, hGraph, d, n, &a);
    if (r == CUDA_SUCCESS) p->alloc.dptr = a.dptr;
    return r;
  }
  case CU_GRAPH_NODE_TYPE_MEM_FREE: return rgpu_drv_cuGraphAddMemFreeNode(phGraphNode, hGraph, d, n, p->free.dptr);
  case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: {
    /* v2 has v1's layout. */
    CUDA_BATCH_MEM_OP_NODE_PARAMS m = {p->memOp.ctx, p->memOp.count, p->memOp.paramArray, p->memOp.flags};
    return rgpu_drv_cuGraphAddBatchMemOpNode(phGraphNode, hGraph, d, n, &m);
  }
  case CU_GRAPH_NODE_TYPE_CONDITIONAL: {
    RGPU_DRV_ENTER_CTX();
    if (p->conditional.ctx && rgpu_drv_ctx_check(p->conditional.ctx) != CUDA_SUCCESS) {
      rgpu_rt_count_call();
      return CUDA_ERROR_INVALID_CONTEXT;
    }
    struct cudaGraphNodeParams rp;
    memset(&rp, 0, sizeof rp);
    rp.type = cudaGraphNodeTypeConditional;
    rp.conditional.handle = p->conditional.handle;
    rp.conditional.type = (enum cudaGraphConditionalNodeType)p->conditional.type;
    rp.conditional.size = p->conditional.size;
    CUresult r = RGPU_DRV_RT(cudaGraphAddNode(phGraphNode, hGraph, d, NULL, n, &rp));
    /* The bodies' array is CUDA's (the node's), as natively. */
    if (r == CUDA_SUCCESS) p->conditional.phGraph_out = (CUgraph *)rp.conditional.phGraph_out;
    return r;
  }
  default: return CUDA_ERROR_NOT_SUPPORTED;
  }
}

RGPU_DRV CUresult rgpu_drv_cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                          const CUgraphNode *dependencies, size_t numDependencies,
                                          CUgraphNodeParams *nodeParams) {
  return rgpu_drv_cuGraphAddNode_v2(phGraphNode, hGraph, dependencies, NULL, numDependencies, nodeParams);
}

/* Executable-graph and clone calls whose arguments are the runtime's. */
RGPU_DRV CUresult rgpu_drv_cuGraphExecEventRecordNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                              CUevent event) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphExecEventRecordNodeSetEvent(hGraphExec, hNode, event));
}
RGPU_DRV CUresult rgpu_drv_cuGraphExecEventWaitNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                            CUevent event) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphExecEventWaitNodeSetEvent(hGraphExec, hNode, event));
}
RGPU_DRV CUresult rgpu_drv_cuGraphExecChildGraphNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                              CUgraph childGraph) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphExecChildGraphNodeSetParams(hGraphExec, hNode, childGraph));
}
RGPU_DRV CUresult rgpu_drv_cuGraphNodeFindInClone(CUgraphNode *phNode, CUgraphNode hOriginalNode,
                                                  CUgraph hClonedGraph) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphNodeFindInClone(phNode, hOriginalNode, hClonedGraph));
}

/* New parameters for a memcpy node, in the graph and in an executable
 * graph: the same conversion as cuGraphAddMemcpyNode. */
RGPU_DRV CUresult rgpu_drv_cuGraphMemcpyNodeSetParams(CUgraphNode hNode, const CUDA_MEMCPY3D *nodeParams) {
  RGPU_DRV_ENTER_CTX();
  struct cudaMemcpy3DParms rp;
  CUresult r = memcpy_node_params(nodeParams, NULL, &rp);
  if (r != CUDA_SUCCESS) return r;
  return RGPU_DRV_RT(cudaGraphMemcpyNodeSetParams(hNode, &rp));
}
RGPU_DRV CUresult rgpu_drv_cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                          const CUDA_MEMCPY3D *copyParams, CUcontext ctx) {
  RGPU_DRV_ENTER_CTX();
  struct cudaMemcpy3DParms rp;
  CUresult r = memcpy_node_params(copyParams, ctx, &rp);
  if (r != CUDA_SUCCESS) return r;
  return RGPU_DRV_RT(cudaGraphExecMemcpyNodeSetParams(hGraphExec, hNode, &rp));
}

/* Graph memory nodes (the runtime's, rgpu_cudart_graph_mem.c):
 * CUDA_MEM_ALLOC_NODE_PARAMS has cudaMemAllocNodeParams's layout (pool
 * properties, access descriptors, size, the address out). */
RGPU_DRV CUresult rgpu_drv_cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                  const CUgraphNode *dependencies, size_t numDependencies,
                                                  CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphAddMemAllocNode(phGraphNode, hGraph, dependencies, numDependencies,
                                              (struct cudaMemAllocNodeParams *)nodeParams));
}
RGPU_DRV CUresult rgpu_drv_cuGraphMemAllocNodeGetParams(CUgraphNode hNode, CUDA_MEM_ALLOC_NODE_PARAMS *params_out) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphMemAllocNodeGetParams(hNode, (struct cudaMemAllocNodeParams *)params_out));
}
RGPU_DRV CUresult rgpu_drv_cuGraphAddMemFreeNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                 const CUgraphNode *dependencies, size_t numDependencies,
                                                 CUdeviceptr dptr) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(
      cudaGraphAddMemFreeNode(phGraphNode, hGraph, dependencies, numDependencies, (void *)(uintptr_t)dptr));
}
RGPU_DRV CUresult rgpu_drv_cuGraphMemFreeNodeGetParams(CUgraphNode hNode, CUdeviceptr *dptr_out) {
  RGPU_DRV_ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphMemFreeNodeGetParams(hNode, (void *)dptr_out));
}

/* The generic parameter calls: each kind to its own call.  Changing a
 * child graph node in place (outside an executable graph) has no call of
 * its own in CUDA either: CUDA_ERROR_NOT_SUPPORTED here. */
RGPU_DRV CUresult rgpu_drv_cuGraphNodeSetParams(CUgraphNode hNode, CUgraphNodeParams *p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  switch (p->type) {
  case CU_GRAPH_NODE_TYPE_KERNEL:
    return rgpu_drv_cuGraphKernelNodeSetParams_v2(hNode, (const CUDA_KERNEL_NODE_PARAMS_v2 *)&p->kernel);
  case CU_GRAPH_NODE_TYPE_MEMCPY: return rgpu_drv_cuGraphMemcpyNodeSetParams(hNode, &p->memcpy.copyParams);
  case CU_GRAPH_NODE_TYPE_MEMSET: {
    CUDA_MEMSET_NODE_PARAMS m = {p->memset.dst, p->memset.pitch, p->memset.value, p->memset.elementSize,
                                 p->memset.width, p->memset.height};
    return rgpu_drv_cuGraphMemsetNodeSetParams(hNode, &m);
  }
  case CU_GRAPH_NODE_TYPE_HOST: {
    CUDA_HOST_NODE_PARAMS h = {p->host.fn, p->host.userData};
    return rgpu_drv_cuGraphHostNodeSetParams(hNode, &h);
  }
  case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return rgpu_drv_cuGraphEventRecordNodeSetEvent(hNode, p->eventRecord.event);
  case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return rgpu_drv_cuGraphEventWaitNodeSetEvent(hNode, p->eventWait.event);
  case CU_GRAPH_NODE_TYPE_EMPTY: return CUDA_SUCCESS;
  default: return CUDA_ERROR_NOT_SUPPORTED;
  }
}

RGPU_DRV CUresult rgpu_drv_cuGraphExecNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                    CUgraphNodeParams *p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  switch (p->type) {
  case CU_GRAPH_NODE_TYPE_KERNEL:
    return rgpu_drv_cuGraphExecKernelNodeSetParams_v2(hGraphExec, hNode,
                                                      (const CUDA_KERNEL_NODE_PARAMS_v2 *)&p->kernel);
  case CU_GRAPH_NODE_TYPE_MEMCPY:
    return rgpu_drv_cuGraphExecMemcpyNodeSetParams(hGraphExec, hNode, &p->memcpy.copyParams, p->memcpy.copyCtx);
  case CU_GRAPH_NODE_TYPE_MEMSET: {
    CUDA_MEMSET_NODE_PARAMS m = {p->memset.dst, p->memset.pitch, p->memset.value, p->memset.elementSize,
                                 p->memset.width, p->memset.height};
    return rgpu_drv_cuGraphExecMemsetNodeSetParams(hGraphExec, hNode, &m, p->memset.ctx);
  }
  case CU_GRAPH_NODE_TYPE_HOST: {
    CUDA_HOST_NODE_PARAMS h = {p->host.fn, p->host.userData};
    return rgpu_drv_cuGraphExecHostNodeSetParams(hGraphExec, hNode, &h);
  }
  case CU_GRAPH_NODE_TYPE_GRAPH: return rgpu_drv_cuGraphExecChildGraphNodeSetParams(hGraphExec, hNode, p->graph.graph);
  case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    return rgpu_drv_cuGraphExecEventRecordNodeSetEvent(hGraphExec, hNode, p->eventRecord.event);
  case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
    return rgpu_drv_cuGraphExecEventWaitNodeSetEvent(hGraphExec, hNode, p->eventWait.event);
  default: return CUDA_ERROR_NOT_SUPPORTED;
  }
}
