/* softgpu graphs: the generic node API (cuGraphAddNode, cuGraphNodeSetParams,
 * cuGraphExecNodeSetParams), the older ABI versions libcuda.so.1 still
 * exports under the unversioned names (cuGraphAddKernelNode with the v1
 * parameter struct, cuGraphGetEdges without edge data, cuGraphInstantiate
 * with an error log, ...), and the _ptsz variants of the stream-taking
 * graph and capture calls.  Each is a thin translation to sg_graph.c or
 * sg_graph_capture.c, so a caller that dlsym()s any name the real driver
 * exports gets the ABI it expects. */
#include <string.h>

#include "sg_graph.h"

/* The unversioned names are macros for the newest versions in cuda.h. */
#undef cuGraphInstantiate
#undef cuGraphAddKernelNode
#undef cuGraphKernelNodeGetParams
#undef cuGraphKernelNodeSetParams
#undef cuGraphExecKernelNodeSetParams
#undef cuGraphGetEdges
#undef cuGraphNodeGetDependencies
#undef cuGraphNodeGetDependentNodes
#undef cuGraphAddDependencies
#undef cuGraphRemoveDependencies
#undef cuGraphAddNode
#undef cuGraphExecUpdate
#undef cuStreamBeginCapture
#undef cuStreamGetCaptureInfo
#undef cuStreamUpdateCaptureDependencies

static int edge_data_zero(const CUgraphEdgeData *ed, size_t n) {
  static const CUgraphEdgeData zero;
  for (size_t i = 0; ed && i < n; i++)
    if (memcmp(&ed[i], &zero, sizeof zero) != 0) return 0;
  return 1;
}

/* ---- generic node API --------------------------------------------------- */

SG_EXPORT CUresult CUDAAPI cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                             const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                             CUgraphNodeParams *p) {
  if (!p || !edge_data_zero(dependencyData, numDependencies)) return CUDA_ERROR_INVALID_VALUE;
  const CUgraphNode *d = dependencies;
  size_t n = numDependencies;
  switch (p->type) {
  case CU_GRAPH_NODE_TYPE_KERNEL:
    /* v3 has the v2 layout. */
    return cuGraphAddKernelNode_v2(phGraphNode, hGraph, d, n, (const CUDA_KERNEL_NODE_PARAMS *)&p->kernel);
  case CU_GRAPH_NODE_TYPE_MEMCPY:
    if (p->memcpy.flags || p->memcpy.reserved) return CUDA_ERROR_INVALID_VALUE;
    return cuGraphAddMemcpyNode(phGraphNode, hGraph, d, n, &p->memcpy.copyParams, p->memcpy.copyCtx);
  case CU_GRAPH_NODE_TYPE_MEMSET: {
    CUDA_MEMSET_NODE_PARAMS m = {p->memset.dst, p->memset.pitch, p->memset.value, p->memset.elementSize,
                                 p->memset.width, p->memset.height};
    return cuGraphAddMemsetNode(phGraphNode, hGraph, d, n, &m, p->memset.ctx);
  }
  case CU_GRAPH_NODE_TYPE_HOST: {
    CUDA_HOST_NODE_PARAMS h = {p->host.fn, p->host.userData};
    return cuGraphAddHostNode(phGraphNode, hGraph, d, n, &h);
  }
  case CU_GRAPH_NODE_TYPE_GRAPH: {
    if (p->graph.ownership == CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE)
      return cuGraphAddChildGraphNode(phGraphNode, hGraph, d, n, p->graph.graph);
    if (p->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE) return CUDA_ERROR_INVALID_VALUE;
    /* Move: the caller's graph becomes the node's own (its handle stays
     * valid as the embedded graph). */
    CUgraphNode node;
    CUgraph g;
    CUresult r = cuGraphCreate(&g, 0);
    if (r) return r;
    r = cuGraphAddChildGraphNode(&node, hGraph, d, n, g);
    cuGraphDestroy(g);
    if (r) return r;
    pthread_mutex_lock(&sg_graph_lock);
    sg_graph *src = p->graph.graph;
    if (!sg_handle_ok(src, SG_H_GRAPH) || src->owner || src == hGraph) {
      r = CUDA_ERROR_INVALID_VALUE;
    } else {
      sg_graph_free(node->u.child);
      node->u.child = src;
      src->owner = node;
    }
    if (r) sg_gnode_free(node);
    pthread_mutex_unlock(&sg_graph_lock);
    if (!r) *phGraphNode = node;
    return r;
  }
  case CU_GRAPH_NODE_TYPE_EMPTY:
    return cuGraphAddEmptyNode(phGraphNode, hGraph, d, n);
  case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
    return cuGraphAddEventWaitNode(phGraphNode, hGraph, d, n, p->eventWait.event);
  case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    return cuGraphAddEventRecordNode(phGraphNode, hGraph, d, n, p->eventRecord.event);
  case CU_GRAPH_NODE_TYPE_CONDITIONAL: {
    if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&sg_graph_lock);
    CUresult r = sg_cond_node_add(phGraphNode, hGraph, d, n, &p->conditional);
    pthread_mutex_unlock(&sg_graph_lock);
    return r;
  }
  default: {
    static atomic_int once;
    if (!atomic_exchange(&once, 1))
      RGPU_WARN("cuGraphAddNode: node type %d is not implemented", (int)p->type);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  }
}

SG_EXPORT CUresult CUDAAPI cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                          size_t numDependencies, CUgraphNodeParams *nodeParams);
CUresult CUDAAPI cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                size_t numDependencies, CUgraphNodeParams *nodeParams) {
  return cuGraphAddNode_v2(phGraphNode, hGraph, dependencies, NULL, numDependencies, nodeParams);
}

SG_EXPORT CUresult CUDAAPI cuGraphNodeSetParams(CUgraphNode hNode, CUgraphNodeParams *p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  switch (p->type) {
  case CU_GRAPH_NODE_TYPE_KERNEL:
    return cuGraphKernelNodeSetParams_v2(hNode, (const CUDA_KERNEL_NODE_PARAMS *)&p->kernel);
  case CU_GRAPH_NODE_TYPE_MEMCPY:
    return cuGraphMemcpyNodeSetParams(hNode, &p->memcpy.copyParams);
  case CU_GRAPH_NODE_TYPE_MEMSET: {
    CUDA_MEMSET_NODE_PARAMS m = {p->memset.dst, p->memset.pitch, p->memset.value, p->memset.elementSize,
                                 p->memset.width, p->memset.height};
    return cuGraphMemsetNodeSetParams(hNode, &m);
  }
  case CU_GRAPH_NODE_TYPE_HOST: {
    CUDA_HOST_NODE_PARAMS h = {p->host.fn, p->host.userData};
    return cuGraphHostNodeSetParams(hNode, &h);
  }
  case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
    return cuGraphEventWaitNodeSetEvent(hNode, p->eventWait.event);
  case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    return cuGraphEventRecordNodeSetEvent(hNode, p->eventRecord.event);
  case CU_GRAPH_NODE_TYPE_EMPTY: {
    CUgraphNodeType t;
    CUresult r = cuGraphNodeGetType(hNode, &t);
    return r ? r : t == CU_GRAPH_NODE_TYPE_EMPTY ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  }
  default:
    return CUDA_ERROR_INVALID_VALUE;
  }
}

SG_EXPORT CUresult CUDAAPI cuGraphExecNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode, CUgraphNodeParams *p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  switch (p->type) {
  case CU_GRAPH_NODE_TYPE_KERNEL:
    return cuGraphExecKernelNodeSetParams_v2(hGraphExec, hNode, (const CUDA_KERNEL_NODE_PARAMS *)&p->kernel);
  case CU_GRAPH_NODE_TYPE_MEMCPY:
    return cuGraphExecMemcpyNodeSetParams(hGraphExec, hNode, &p->memcpy.copyParams, p->memcpy.copyCtx);
  case CU_GRAPH_NODE_TYPE_MEMSET: {
    CUDA_MEMSET_NODE_PARAMS m = {p->memset.dst, p->memset.pitch, p->memset.value, p->memset.elementSize,
                                 p->memset.width, p->memset.height};
    return cuGraphExecMemsetNodeSetParams(hGraphExec, hNode, &m, p->memset.ctx);
  }
  case CU_GRAPH_NODE_TYPE_HOST: {
    CUDA_HOST_NODE_PARAMS h = {p->host.fn, p->host.userData};
    return cuGraphExecHostNodeSetParams(hGraphExec, hNode, &h);
  }
  case CU_GRAPH_NODE_TYPE_GRAPH:
    return cuGraphExecChildGraphNodeSetParams(hGraphExec, hNode, p->graph.graph);
  case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
    return cuGraphExecEventWaitNodeSetEvent(hGraphExec, hNode, p->eventWait.event);
  case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    return cuGraphExecEventRecordNodeSetEvent(hGraphExec, hNode, p->eventRecord.event);
  default:
    return CUDA_ERROR_INVALID_VALUE;
  }
}

/* ---- older ABIs --------------------------------------------------------- */

SG_EXPORT CUresult CUDAAPI cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                const CUgraphNode *dependencies, size_t numDependencies,
                                                const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams);
SG_EXPORT CUresult CUDAAPI cuGraphKernelNodeGetParams(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams);
SG_EXPORT CUresult CUDAAPI cuGraphKernelNodeSetParams(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams);
SG_EXPORT CUresult CUDAAPI cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                          const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams);
SG_EXPORT CUresult CUDAAPI cuGraphGetEdges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, size_t *numEdges);
SG_EXPORT CUresult CUDAAPI cuGraphNodeGetDependencies(CUgraphNode hNode, CUgraphNode *dependencies,
                                                      size_t *numDependencies);
SG_EXPORT CUresult CUDAAPI cuGraphNodeGetDependentNodes(CUgraphNode hNode, CUgraphNode *dependentNodes,
                                                        size_t *numDependentNodes);
SG_EXPORT CUresult CUDAAPI cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                                  size_t numDependencies);
SG_EXPORT CUresult CUDAAPI cuGraphRemoveDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                                     size_t numDependencies);
SG_EXPORT CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                              char *logBuffer, size_t bufferSize);
SG_EXPORT CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                                 char *logBuffer, size_t bufferSize);
SG_EXPORT CUresult CUDAAPI cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphNode *hErrorNode_out,
                                             CUgraphExecUpdateResult *updateResult_out);
SG_EXPORT CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream);
SG_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                                  cuuint64_t *id_out);
SG_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                                     cuuint64_t *id_out, CUgraph *graph_out,
                                                     const CUgraphNode **dependencies_out,
                                                     size_t *numDependencies_out);
SG_EXPORT CUresult CUDAAPI cuStreamUpdateCaptureDependencies(CUstream hStream, CUgraphNode *dependencies,
                                                             size_t numDependencies, unsigned int flags);

static void kern_v1_to_v2(const CUDA_KERNEL_NODE_PARAMS_v1 *a, CUDA_KERNEL_NODE_PARAMS *b) {
  memset(b, 0, sizeof *b);
  b->func = a->func;
  b->gridDimX = a->gridDimX;
  b->gridDimY = a->gridDimY;
  b->gridDimZ = a->gridDimZ;
  b->blockDimX = a->blockDimX;
  b->blockDimY = a->blockDimY;
  b->blockDimZ = a->blockDimZ;
  b->sharedMemBytes = a->sharedMemBytes;
  b->kernelParams = a->kernelParams;
  b->extra = a->extra;
}

CUresult CUDAAPI cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                      size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams) {
  if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
  CUDA_KERNEL_NODE_PARAMS p;
  kern_v1_to_v2(nodeParams, &p);
  return cuGraphAddKernelNode_v2(phGraphNode, hGraph, dependencies, numDependencies, &p);
}

CUresult CUDAAPI cuGraphKernelNodeGetParams(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams) {
  if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
  CUDA_KERNEL_NODE_PARAMS p;
  CUresult r = cuGraphKernelNodeGetParams_v2(hNode, &p);
  if (r) return r;
  nodeParams->func = p.func;
  nodeParams->gridDimX = p.gridDimX;
  nodeParams->gridDimY = p.gridDimY;
  nodeParams->gridDimZ = p.gridDimZ;
  nodeParams->blockDimX = p.blockDimX;
  nodeParams->blockDimY = p.blockDimY;
  nodeParams->blockDimZ = p.blockDimZ;
  nodeParams->sharedMemBytes = p.sharedMemBytes;
  nodeParams->kernelParams = p.kernelParams;
  nodeParams->extra = p.extra;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphKernelNodeSetParams(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams) {
  if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
  CUDA_KERNEL_NODE_PARAMS p;
  kern_v1_to_v2(nodeParams, &p);
  return cuGraphKernelNodeSetParams_v2(hNode, &p);
}

CUresult CUDAAPI cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams) {
  if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
  CUDA_KERNEL_NODE_PARAMS p;
  kern_v1_to_v2(nodeParams, &p);
  return cuGraphExecKernelNodeSetParams_v2(hGraphExec, hNode, &p);
}

CUresult CUDAAPI cuGraphGetEdges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, size_t *numEdges) {
  return cuGraphGetEdges_v2(hGraph, from, to, NULL, numEdges);
}
CUresult CUDAAPI cuGraphNodeGetDependencies(CUgraphNode hNode, CUgraphNode *dependencies, size_t *numDependencies) {
  return cuGraphNodeGetDependencies_v2(hNode, dependencies, NULL, numDependencies);
}
CUresult CUDAAPI cuGraphNodeGetDependentNodes(CUgraphNode hNode, CUgraphNode *dependentNodes,
                                              size_t *numDependentNodes) {
  return cuGraphNodeGetDependentNodes_v2(hNode, dependentNodes, NULL, numDependentNodes);
}
CUresult CUDAAPI cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                        size_t numDependencies) {
  return cuGraphAddDependencies_v2(hGraph, from, to, NULL, numDependencies);
}
CUresult CUDAAPI cuGraphRemoveDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                           size_t numDependencies) {
  return cuGraphRemoveDependencies_v2(hGraph, from, to, NULL, numDependencies);
}

CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                    char *logBuffer, size_t bufferSize) {
  if (phErrorNode) *phErrorNode = NULL;
  CUresult r = cuGraphInstantiateWithFlags(phGraphExec, hGraph, 0);
  if (logBuffer && bufferSize) {
    const char *msg = "";
    if (r) cuGetErrorString(r, &msg);
    strncpy(logBuffer, msg ? msg : "", bufferSize - 1);
    logBuffer[bufferSize - 1] = 0;
  }
  return r;
}
CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                       char *logBuffer, size_t bufferSize) {
  return cuGraphInstantiate(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

CUresult CUDAAPI cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphNode *hErrorNode_out,
                                   CUgraphExecUpdateResult *updateResult_out) {
  CUgraphExecUpdateResultInfo info;
  CUresult r = cuGraphExecUpdate_v2(hGraphExec, hGraph, &info);
  if (hErrorNode_out) *hErrorNode_out = info.errorNode;
  if (updateResult_out) *updateResult_out = info.result;
  return r;
}

CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream) {
  return cuStreamBeginCapture_v2(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                        cuuint64_t *id_out) {
  return cuStreamGetCaptureInfo_v3(hStream, captureStatus_out, id_out, NULL, NULL, NULL, NULL);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                           cuuint64_t *id_out, CUgraph *graph_out,
                                           const CUgraphNode **dependencies_out, size_t *numDependencies_out) {
  return cuStreamGetCaptureInfo_v3(hStream, captureStatus_out, id_out, graph_out, dependencies_out, NULL,
                                   numDependencies_out);
}

CUresult CUDAAPI cuStreamUpdateCaptureDependencies(CUstream hStream, CUgraphNode *dependencies,
                                                   size_t numDependencies, unsigned int flags) {
  return cuStreamUpdateCaptureDependencies_v2(hStream, dependencies, NULL, numDependencies, flags);
}

/* ---- per-thread default stream variants --------------------------------- */
/* Code built with --default-stream per-thread means the per-thread stream
 * by the NULL stream. */
static CUstream ptds(CUstream s) { return s ? s : CU_STREAM_PER_THREAD; }

#define SG_PTSZ_DECL(name, params) SG_EXPORT CUresult CUDAAPI name params;
SG_PTSZ_DECL(cuGraphLaunch_ptsz, (CUgraphExec, CUstream))
SG_PTSZ_DECL(cuGraphUpload_ptsz, (CUgraphExec, CUstream))
SG_PTSZ_DECL(cuGraphInstantiateWithParams_ptsz, (CUgraphExec *, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS *))
SG_PTSZ_DECL(cuStreamBeginCapture_ptsz, (CUstream))
SG_PTSZ_DECL(cuStreamBeginCapture_v2_ptsz, (CUstream, CUstreamCaptureMode))
SG_PTSZ_DECL(cuStreamBeginCaptureToGraph_ptsz,
             (CUstream, CUgraph, const CUgraphNode *, const CUgraphEdgeData *, size_t, CUstreamCaptureMode))
SG_PTSZ_DECL(cuStreamEndCapture_ptsz, (CUstream, CUgraph *))
SG_PTSZ_DECL(cuStreamIsCapturing_ptsz, (CUstream, CUstreamCaptureStatus *))
SG_PTSZ_DECL(cuStreamGetCaptureInfo_ptsz, (CUstream, CUstreamCaptureStatus *, cuuint64_t *))
SG_PTSZ_DECL(cuStreamGetCaptureInfo_v2_ptsz,
             (CUstream, CUstreamCaptureStatus *, cuuint64_t *, CUgraph *, const CUgraphNode **, size_t *))
SG_PTSZ_DECL(cuStreamGetCaptureInfo_v3_ptsz, (CUstream, CUstreamCaptureStatus *, cuuint64_t *, CUgraph *,
                                               const CUgraphNode **, const CUgraphEdgeData **, size_t *))
SG_PTSZ_DECL(cuStreamUpdateCaptureDependencies_ptsz, (CUstream, CUgraphNode *, size_t, unsigned))
SG_PTSZ_DECL(cuStreamUpdateCaptureDependencies_v2_ptsz,
             (CUstream, CUgraphNode *, const CUgraphEdgeData *, size_t, unsigned))

CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec x, CUstream s) { return cuGraphLaunch(x, ptds(s)); }
CUresult CUDAAPI cuGraphUpload_ptsz(CUgraphExec x, CUstream s) { return cuGraphUpload(x, ptds(s)); }
CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec *x, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p) {
  if (p && !p->hUploadStream) p->hUploadStream = CU_STREAM_PER_THREAD;
  return cuGraphInstantiateWithParams(x, g, p);
}
CUresult CUDAAPI cuStreamBeginCapture_ptsz(CUstream s) {
  return cuStreamBeginCapture_v2(ptds(s), CU_STREAM_CAPTURE_MODE_GLOBAL);
}
CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode m) {
  return cuStreamBeginCapture_v2(ptds(s), m);
}
CUresult CUDAAPI cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode *d,
                                                  const CUgraphEdgeData *e, size_t n, CUstreamCaptureMode m) {
  return cuStreamBeginCaptureToGraph(ptds(s), g, d, e, n, m);
}
CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream s, CUgraph *g) { return cuStreamEndCapture(ptds(s), g); }
CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus *st) {
  return cuStreamIsCapturing(ptds(s), st);
}
CUresult CUDAAPI cuStreamGetCaptureInfo_ptsz(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id) {
  return cuStreamGetCaptureInfo_v3(ptds(s), st, id, NULL, NULL, NULL, NULL);
}
CUresult CUDAAPI cuStreamGetCaptureInfo_v2_ptsz(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
                                                const CUgraphNode **d, size_t *n) {
  return cuStreamGetCaptureInfo_v3(ptds(s), st, id, g, d, NULL, n);
}
CUresult CUDAAPI cuStreamGetCaptureInfo_v3_ptsz(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
                                                const CUgraphNode **d, const CUgraphEdgeData **e, size_t *n) {
  return cuStreamGetCaptureInfo_v3(ptds(s), st, id, g, d, e, n);
}
CUresult CUDAAPI cuStreamUpdateCaptureDependencies_ptsz(CUstream s, CUgraphNode *d, size_t n, unsigned f) {
  return cuStreamUpdateCaptureDependencies_v2(ptds(s), d, NULL, n, f);
}
CUresult CUDAAPI cuStreamUpdateCaptureDependencies_v2_ptsz(CUstream s, CUgraphNode *d, const CUgraphEdgeData *e,
                                                           size_t n, unsigned f) {
  return cuStreamUpdateCaptureDependencies_v2(ptds(s), d, e, n, f);
}

/* ---- exported but not implemented --------------------------------------- */
/* Node kinds softgpu has no backing for (memory-pool allocation nodes,
 * external semaphores, batch memory ops, user objects, kernel
 * node attributes).  They answer NOT_SUPPORTED, logged once, rather than
 * being missing symbols. */
#define SG_GRAPH_STUB(name, params)                  \
  SG_EXPORT CUresult CUDAAPI name params;            \
  CUresult CUDAAPI name params { SG_UNSUPPORTED(#name); }

SG_GRAPH_STUB(cuGraphAddBatchMemOpNode, (CUgraphNode * phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                         size_t numDependencies, const CUDA_BATCH_MEM_OP_NODE_PARAMS *nodeParams))
SG_GRAPH_STUB(cuGraphBatchMemOpNodeGetParams, (CUgraphNode hNode, CUDA_BATCH_MEM_OP_NODE_PARAMS *nodeParams_out))
SG_GRAPH_STUB(cuGraphBatchMemOpNodeSetParams, (CUgraphNode hNode, const CUDA_BATCH_MEM_OP_NODE_PARAMS *nodeParams))
SG_GRAPH_STUB(cuGraphExecBatchMemOpNodeSetParams,
              (CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_BATCH_MEM_OP_NODE_PARAMS *nodeParams))
SG_GRAPH_STUB(cuGraphAddExternalSemaphoresSignalNode,
              (CUgraphNode * phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, size_t numDependencies,
               const CUDA_EXT_SEM_SIGNAL_NODE_PARAMS *nodeParams))
SG_GRAPH_STUB(cuGraphAddExternalSemaphoresWaitNode,
              (CUgraphNode * phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, size_t numDependencies,
               const CUDA_EXT_SEM_WAIT_NODE_PARAMS *nodeParams))
SG_GRAPH_STUB(cuGraphExternalSemaphoresSignalNodeGetParams,
              (CUgraphNode hNode, CUDA_EXT_SEM_SIGNAL_NODE_PARAMS *params_out))
SG_GRAPH_STUB(cuGraphExternalSemaphoresSignalNodeSetParams,
              (CUgraphNode hNode, const CUDA_EXT_SEM_SIGNAL_NODE_PARAMS *nodeParams))
SG_GRAPH_STUB(cuGraphExternalSemaphoresWaitNodeGetParams, (CUgraphNode hNode, CUDA_EXT_SEM_WAIT_NODE_PARAMS *params_out))
SG_GRAPH_STUB(cuGraphExternalSemaphoresWaitNodeSetParams,
              (CUgraphNode hNode, const CUDA_EXT_SEM_WAIT_NODE_PARAMS *nodeParams))
SG_GRAPH_STUB(cuGraphExecExternalSemaphoresSignalNodeSetParams,
              (CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_EXT_SEM_SIGNAL_NODE_PARAMS *nodeParams))
SG_GRAPH_STUB(cuGraphExecExternalSemaphoresWaitNodeSetParams,
              (CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_EXT_SEM_WAIT_NODE_PARAMS *nodeParams))
SG_GRAPH_STUB(cuGraphAddMemAllocNode, (CUgraphNode * phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                       size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams))
SG_GRAPH_STUB(cuGraphMemAllocNodeGetParams, (CUgraphNode hNode, CUDA_MEM_ALLOC_NODE_PARAMS *params_out))
SG_GRAPH_STUB(cuGraphAddMemFreeNode, (CUgraphNode * phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                      size_t numDependencies, CUdeviceptr dptr))
SG_GRAPH_STUB(cuGraphMemFreeNodeGetParams, (CUgraphNode hNode, CUdeviceptr *dptr_out))
SG_GRAPH_STUB(cuGraphRetainUserObject, (CUgraph graph, CUuserObject object, unsigned int count, unsigned int flags))
SG_GRAPH_STUB(cuGraphReleaseUserObject, (CUgraph graph, CUuserObject object, unsigned int count))
SG_GRAPH_STUB(cuGraphKernelNodeGetAttribute,
              (CUgraphNode hNode, CUkernelNodeAttrID attr, CUkernelNodeAttrValue *value_out))
SG_GRAPH_STUB(cuGraphKernelNodeSetAttribute,
              (CUgraphNode hNode, CUkernelNodeAttrID attr, const CUkernelNodeAttrValue *value))

SG_EXPORT CUresult CUDAAPI cuGraphKernelNodeCopyAttributes(CUgraphNode dst, CUgraphNode src) {
  /* No kernel node ever has a non-default attribute (setting one is not
   * supported), so copying them is checking the handles. */
  CUgraphNodeType a, b;
  CUresult r = cuGraphNodeGetType(dst, &a);
  if (!r) r = cuGraphNodeGetType(src, &b);
  if (r) return r;
  if (a != CU_GRAPH_NODE_TYPE_KERNEL || b != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}
