/* Graphs on the runtime's graph model: a CUgraph is a cudaGraph_t, a
 * CUgraphExec a cudaGraphExec_t and a CUgraphNode a cudaGraphNode_t, so a
 * graph captured or built through one API is instantiated and launched
 * through the other.  Node kinds whose driver parameter structs differ
 * from the runtime's (memcpy, memset, kernel) are not added here; kernel
 * nodes come with the driver's kernels (rgpu_drv_launch.c). */
#include "rgpu_drv_internal.h"

#define ENTER_CTX()                                                                          \
  do {                                                                                       \
    CUresult r_ = rgpu_drv_ctx_enter(NULL);                                                  \
    if (r_ != CUDA_SUCCESS) {                                                                \
      rgpu_rt_count_call();                                                                  \
      return r_;                                                                             \
    }                                                                                        \
  } while (0)

RGPU_DRV CUresult rgpu_drv_cuGraphCreate(CUgraph *phGraph, unsigned int flags) {
  ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphCreate(phGraph, flags));
}

RGPU_DRV CUresult rgpu_drv_cuGraphDestroy(CUgraph hGraph) {
  ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphDestroy(hGraph));
}

RGPU_DRV CUresult rgpu_drv_cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph) {
  ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphClone(phGraphClone, originalGraph));
}

RGPU_DRV CUresult rgpu_drv_cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                       unsigned long long flags) {
  ENTER_CTX();
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
  ENTER_CTX();
  return RGPU_DRV_RT(
      cudaGraphInstantiateWithParams(phGraphExec, hGraph, (cudaGraphInstantiateParams *)p));
}
RGPU_DRV CUresult rgpu_drv_cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec,
                                                             CUgraph hGraph,
                                                             CUDA_GRAPH_INSTANTIATE_PARAMS *p) {
  ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphInstantiateWithParams_ptsz(phGraphExec, hGraph,
                                                         (cudaGraphInstantiateParams *)p));
}

RGPU_DRV CUresult rgpu_drv_cuGraphExecGetFlags(CUgraphExec hGraphExec, cuuint64_t *flags) {
  ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphExecGetFlags(hGraphExec, (unsigned long long *)flags));
}

RGPU_DRV CUresult rgpu_drv_cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphLaunch(hGraphExec, hStream));
}
RGPU_DRV CUresult rgpu_drv_cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphLaunch_ptsz(hGraphExec, hStream));
}

RGPU_DRV CUresult rgpu_drv_cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
  ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphUpload(hGraphExec, hStream));
}
RGPU_DRV CUresult rgpu_drv_cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphUpload_ptsz(hGraphExec, hStream));
}

RGPU_DRV CUresult rgpu_drv_cuGraphExecDestroy(CUgraphExec hGraphExec) {
  ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphExecDestroy(hGraphExec));
}

/* CUgraphExecUpdateResultInfo is cudaGraphExecUpdateResultInfo. */
RGPU_DRV CUresult rgpu_drv_cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph,
                                                CUgraphExecUpdateResultInfo *resultInfo) {
  ENTER_CTX();
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
  ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphGetNodes(hGraph, nodes, numNodes));
}

RGPU_DRV CUresult rgpu_drv_cuGraphGetRootNodes(CUgraph hGraph, CUgraphNode *rootNodes,
                                               size_t *numRootNodes) {
  ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphGetRootNodes(hGraph, rootNodes, numRootNodes));
}

RGPU_DRV CUresult rgpu_drv_cuGraphGetEdges_v2(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to,
                                              CUgraphEdgeData *edgeData, size_t *numEdges) {
  ENTER_CTX();
  return RGPU_DRV_RT(
      cudaGraphGetEdges(hGraph, from, to, (cudaGraphEdgeData *)edgeData, numEdges));
}
RGPU_DRV CUresult rgpu_drv_cuGraphGetEdges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to,
                                           size_t *numEdges) {
  return rgpu_drv_cuGraphGetEdges_v2(hGraph, from, to, NULL, numEdges);
}

RGPU_DRV CUresult rgpu_drv_cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type) {
  ENTER_CTX();
  /* CU_GRAPH_NODE_TYPE_* are the cudaGraphNodeType* values. */
  return RGPU_DRV_RT(cudaGraphNodeGetType(hNode, (enum cudaGraphNodeType *)type));
}

RGPU_DRV CUresult rgpu_drv_cuGraphDestroyNode(CUgraphNode hNode) {
  ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphDestroyNode(hNode));
}

RGPU_DRV CUresult rgpu_drv_cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                               const CUgraphNode *dependencies,
                                               size_t numDependencies) {
  ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphAddEmptyNode(phGraphNode, hGraph, dependencies, numDependencies));
}

/* CUDA_HOST_NODE_PARAMS is cudaHostNodeParams (fn, userData). */
RGPU_DRV CUresult rgpu_drv_cuGraphAddHostNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                              const CUgraphNode *dependencies,
                                              size_t numDependencies,
                                              const CUDA_HOST_NODE_PARAMS *nodeParams) {
  ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphAddHostNode(phGraphNode, hGraph, dependencies, numDependencies,
                                          (const struct cudaHostNodeParams *)nodeParams));
}

RGPU_DRV CUresult rgpu_drv_cuGraphHostNodeGetParams(CUgraphNode hNode,
                                                    CUDA_HOST_NODE_PARAMS *nodeParams) {
  ENTER_CTX();
  return RGPU_DRV_RT(
      cudaGraphHostNodeGetParams(hNode, (struct cudaHostNodeParams *)nodeParams));
}

RGPU_DRV CUresult rgpu_drv_cuGraphAddEventRecordNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                     const CUgraphNode *dependencies,
                                                     size_t numDependencies, CUevent event) {
  ENTER_CTX();
  return RGPU_DRV_RT(
      cudaGraphAddEventRecordNode(phGraphNode, hGraph, dependencies, numDependencies, event));
}

RGPU_DRV CUresult rgpu_drv_cuGraphAddEventWaitNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                   const CUgraphNode *dependencies,
                                                   size_t numDependencies, CUevent event) {
  ENTER_CTX();
  return RGPU_DRV_RT(
      cudaGraphAddEventWaitNode(phGraphNode, hGraph, dependencies, numDependencies, event));
}

RGPU_DRV CUresult rgpu_drv_cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                    const CUgraphNode *dependencies,
                                                    size_t numDependencies, CUgraph childGraph) {
  ENTER_CTX();
  return RGPU_DRV_RT(cudaGraphAddChildGraphNode(phGraphNode, hGraph, dependencies,
                                                numDependencies, childGraph));
}

RGPU_DRV CUresult rgpu_drv_cuGraphAddDependencies_v2(CUgraph hGraph, const CUgraphNode *from,
                                                     const CUgraphNode *to,
                                                     const CUgraphEdgeData *edgeData,
                                                     size_t numDependencies) {
  ENTER_CTX();
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
  ENTER_CTX();
  if (ctx && rgpu_drv_ctx_check(ctx) != CUDA_SUCCESS) {
    rgpu_rt_count_call();
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  return RGPU_DRV_RT(cudaGraphAddMemsetNode(phGraphNode, hGraph, dependencies, numDependencies,
                                            (const struct cudaMemsetParams *)memsetParams));
}

RGPU_DRV CUresult rgpu_drv_cuGraphMemsetNodeGetParams(CUgraphNode hNode,
                                                      CUDA_MEMSET_NODE_PARAMS *nodeParams) {
  ENTER_CTX();
  return RGPU_DRV_RT(
      cudaGraphMemsetNodeGetParams(hNode, (struct cudaMemsetParams *)nodeParams));
}
