/* Driver-API kernel nodes (cuGraphAddKernelNode, cuGraphKernelNode
 * Get/SetParams, cuGraphExecKernelNodeSetParams; the v1 and v2 forms).
 *
 * A kernel node is the runtime graph model's node (cudart's
 * rgpu_cudart_graph_internal.h) holding the launch operation a
 * cuLaunchKernel would submit (rgpu_drv_launch_prepare: the same checks and
 * parameter packing), so driver and runtime nodes instantiate, launch and
 * update alike.  The node remembers the CUfunction (or CUkernel) it was
 * given, for GetParams; a kernel node the runtime made (or a captured
 * launch) reports a NULL function there. */
#include <stdlib.h>
#include <string.h>

#include "rgpu_cudart_graph_internal.h"
#include "rgpu_drv_module.h"

/* The node parameters of a driver kernel node: the launch op, its
 * parameters owned by the node.  v1 params are v2's without kern/ctx. */
static CUresult kernel_node_params(rgpu_client *c, const CUDA_KERNEL_NODE_PARAMS_v1 *kp,
                                   CUkernel kern, node_params *np) {
  if (!kp) return CUDA_ERROR_INVALID_VALUE;
  CUfunction func = kp->func ? kp->func : (CUfunction)kern;
  if (!func) return CUDA_ERROR_INVALID_VALUE;
  rgpu_drv_launch_cfg cfg = {.grid = {kp->gridDimX, kp->gridDimY, kp->gridDimZ},
                             .block = {kp->blockDimX, kp->blockDimY, kp->blockDimZ},
                             .shmem = kp->sharedMemBytes};
  uint8_t stackbuf[4096];
  uint8_t *heap = NULL;
  rgpu_rt_op op;
  CUresult r = rgpu_drv_launch_prepare(c, func, &cfg, kp->kernelParams, kp->extra, stackbuf,
                                       sizeof stackbuf, &heap, &op);
  if (r == CUDA_SUCCESS) {
    cudaError_t e = node_params_launch(np, &op);
    if (e != cudaSuccess) {
      node_params_free(np);
      r = rgpu_drv_from_rt(e);
    } else {
      np->func = func;
    }
  }
  free(heap);
  return r;
}

/* Begin of every entry here: the session, the current context (its device
 * is where the node's kernel runs), the runtime last error saved. */
#define BEGIN_NODE()                                          \
  RGPU_DRV_BEGIN();                                           \
  do {                                                        \
    CUresult cr_ = rgpu_drv_ctx_enter(NULL);                  \
    if (cr_ != CUDA_SUCCESS) RGPU_DRV_RET(cr_);               \
  } while (0)

static CUresult add_kernel_node(CUgraphNode *phGraphNode, CUgraph hGraph,
                                const CUgraphNode *dependencies, size_t numDependencies,
                                const CUDA_KERNEL_NODE_PARAMS_v1 *kp, CUkernel kern) {
  BEGIN_NODE();
  if (!phGraphNode || !valid_graph((cudaGraph_t)hGraph)) RGPU_DRV_RET(CUDA_ERROR_INVALID_VALUE);
  node_params np;
  memset(&np, 0, sizeof np);
  CUresult r = kernel_node_params(c, kp, kern, &np);
  if (r == CUDA_SUCCESS) {
    cudaError_t e = graph_node_add((cudaGraphNode_t *)phGraphNode, (cudaGraph_t)hGraph,
                                   (const cudaGraphNode_t *)dependencies, numDependencies, &np);
    if (e != cudaSuccess) {
      node_params_free(&np);
      r = rgpu_drv_from_rt(e);
    }
  }
  RGPU_DRV_RET(r);
}

RGPU_DRV CUresult rgpu_drv_cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                   const CUgraphNode *dependencies,
                                                   size_t numDependencies,
                                                   const CUDA_KERNEL_NODE_PARAMS *nodeParams) {
  return add_kernel_node(phGraphNode, hGraph, dependencies, numDependencies,
                         (const CUDA_KERNEL_NODE_PARAMS_v1 *)nodeParams,
                         nodeParams ? nodeParams->kern : NULL);
}

RGPU_DRV CUresult rgpu_drv_cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                const CUgraphNode *dependencies,
                                                size_t numDependencies,
                                                const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams) {
  return add_kernel_node(phGraphNode, hGraph, dependencies, numDependencies, nodeParams, NULL);
}

static CUresult kernel_node(CUgraphNode hNode, cudaGraphNode_t *out) {
  cudaGraphNode_t n = (cudaGraphNode_t)hNode;
  if (!valid_node(n) || n->p.type != cudaGraphNodeTypeKernel) return CUDA_ERROR_INVALID_VALUE;
  *out = n;
  return CUDA_SUCCESS;
}

static void get_params(const node_params *p, CUDA_KERNEL_NODE_PARAMS_v1 *out) {
  /* A runtime-made node's func is a host stub, not a CUfunction. */
  out->func = p->op.launch.kernel ? NULL : (CUfunction)p->func;
  out->gridDimX = p->op.launch.grid.x;
  out->gridDimY = p->op.launch.grid.y;
  out->gridDimZ = p->op.launch.grid.z;
  out->blockDimX = p->op.launch.block.x;
  out->blockDimY = p->op.launch.block.y;
  out->blockDimZ = p->op.launch.block.z;
  out->sharedMemBytes = p->op.launch.shmem;
  out->kernelParams = p->argv;
  out->extra = NULL;
}

RGPU_DRV CUresult rgpu_drv_cuGraphKernelNodeGetParams(CUgraphNode hNode,
                                                      CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams) {
  rgpu_rt_count_call();
  cudaGraphNode_t n;
  CUresult r = kernel_node(hNode, &n);
  if (r == CUDA_SUCCESS && !nodeParams) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) get_params(&n->p, nodeParams);
  return r;
}

RGPU_DRV CUresult rgpu_drv_cuGraphKernelNodeGetParams_v2(CUgraphNode hNode,
                                                         CUDA_KERNEL_NODE_PARAMS *nodeParams) {
  rgpu_rt_count_call();
  cudaGraphNode_t n;
  CUresult r = kernel_node(hNode, &n);
  if (r == CUDA_SUCCESS && !nodeParams) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) {
    get_params(&n->p, (CUDA_KERNEL_NODE_PARAMS_v1 *)nodeParams);
    nodeParams->kern = NULL;
    nodeParams->ctx = NULL;
  }
  return r;
}

static CUresult set_kernel_node(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v1 *kp,
                                CUkernel kern) {
  BEGIN_NODE();
  cudaGraphNode_t n;
  CUresult r = kernel_node(hNode, &n);
  node_params np;
  memset(&np, 0, sizeof np);
  if (r == CUDA_SUCCESS) r = kernel_node_params(c, kp, kern, &np);
  if (r == CUDA_SUCCESS) {
    /* Replaced only once the new parameters are complete. */
    node_params_free(&n->p);
    n->p = np;
  }
  RGPU_DRV_RET(r);
}

RGPU_DRV CUresult rgpu_drv_cuGraphKernelNodeSetParams_v2(CUgraphNode hNode,
                                                         const CUDA_KERNEL_NODE_PARAMS *nodeParams) {
  return set_kernel_node(hNode, (const CUDA_KERNEL_NODE_PARAMS_v1 *)nodeParams,
                         nodeParams ? nodeParams->kern : NULL);
}

RGPU_DRV CUresult rgpu_drv_cuGraphKernelNodeSetParams(CUgraphNode hNode,
                                                      const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams) {
  return set_kernel_node(hNode, nodeParams, NULL);
}

static CUresult exec_set_kernel_node(CUgraphExec hGraphExec, CUgraphNode hNode,
                                     const CUDA_KERNEL_NODE_PARAMS_v1 *kp, CUkernel kern) {
  BEGIN_NODE();
  node_params np;
  memset(&np, 0, sizeof np);
  CUresult r = kernel_node_params(c, kp, kern, &np);
  if (r == CUDA_SUCCESS) {
    /* Takes np over, whatever the result. */
    cudaError_t e = rgpu_rt_graph_exec_set_node((cudaGraphExec_t)hGraphExec,
                                                (cudaGraphNode_t)hNode, &np);
    if (e != cudaSuccess) r = rgpu_drv_from_rt(e);
  }
  RGPU_DRV_RET(r);
}

RGPU_DRV CUresult rgpu_drv_cuGraphExecKernelNodeSetParams_v2(
    CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS *nodeParams) {
  return exec_set_kernel_node(hGraphExec, hNode, (const CUDA_KERNEL_NODE_PARAMS_v1 *)nodeParams,
                              nodeParams ? nodeParams->kern : NULL);
}

RGPU_DRV CUresult rgpu_drv_cuGraphExecKernelNodeSetParams(
    CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams) {
  return exec_set_kernel_node(hGraphExec, hNode, nodeParams, NULL);
}

/* Kernel node attributes are the runtime's (rgpu_cudart_graph_model.c):
 * CUkernelNodeAttrID and its value union are cudaKernelNodeAttrID's. */
RGPU_DRV CUresult rgpu_drv_cuGraphKernelNodeGetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr,
                                                        CUkernelNodeAttrValue *value_out) {
  return RGPU_DRV_RT(cudaGraphKernelNodeGetAttribute(
      (cudaGraphNode_t)hNode, (cudaKernelNodeAttrID)attr, (cudaKernelNodeAttrValue *)value_out));
}

RGPU_DRV CUresult rgpu_drv_cuGraphKernelNodeSetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr,
                                                        const CUkernelNodeAttrValue *value) {
  return RGPU_DRV_RT(cudaGraphKernelNodeSetAttribute((cudaGraphNode_t)hNode,
                                                     (cudaKernelNodeAttrID)attr,
                                                     (const cudaKernelNodeAttrValue *)value));
}

RGPU_DRV CUresult rgpu_drv_cuGraphKernelNodeCopyAttributes(CUgraphNode dst, CUgraphNode src) {
  return RGPU_DRV_RT(
      cudaGraphKernelNodeCopyAttributes((cudaGraphNode_t)dst, (cudaGraphNode_t)src));
}
