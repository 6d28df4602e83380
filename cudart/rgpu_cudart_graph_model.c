/* CUDA graphs, the model: graphs, nodes, edges, node parameters, clone,
 * inspection and DOT output (rgpu_cudart_graph_internal.h lists the three
 * graph files).
 *
 * The client keeps every graph itself: nodes, dependencies and parameters
 * live here, so building, inspecting, cloning and capturing a graph costs
 * no message at all.  A node's parameters are the operation it stands for
 * (rgpu_cudart_op.h): a kernel node holds exactly the launch operation the
 * launch path would build (rgpu_rt_launch_prepare: same checks, same
 * parameter packing), copy and memset nodes are checked against the
 * client's allocation table when they are added. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_cudart.h"
#include "rgpu_cudart_graph_internal.h"
#include "rgpu_log.h"

static atomic_ullong g_node_ids = 1;

/* ---- small helpers ------------------------------------------------------ */


static int is_device_ptr(const void *p, uint64_t len, rgpu_range *out) {
  return rgpu_range_find(rgpu_rt_device_ranges(), (uint64_t)(uintptr_t)p, len ? len : 1, out) == 0;
}

/* The op is a union: a kernel node owns memory through it (its packed
 * parameters), and so does a library node (its encoded arguments). */
void node_params_free(node_params *p) {
  if (p->type == cudaGraphNodeTypeMemAlloc && p->mem_ptr) {
    rgpu_rt_graphmem_unref(p->mem_ptr);
    p->mem_ptr = 0;
  }
  if (p->type == cudaGraphNodeTypeKernel) {
    free(p->op.launch.params);
    p->op.launch.params = NULL;
    p->op.launch.plen = 0;
  }
  if (node_params_is_lib(p)) {
    free(p->op.lib.args);
    p->op.lib.args = NULL;
    p->op.lib.args_len = 0;
  }
  free(p->offsets);
  free(p->argv);
  free(p->kattrs);
  p->offsets = NULL;
  p->argv = NULL;
  p->kattrs = NULL;
  p->nkattrs = 0;
  if (p->child) cudaGraphDestroy(p->child);
  p->child = NULL;
  if (p->type == cudaGraphNodeTypeConditional) cond_bodies_free(p);
}


/* Deep copy (the child graph is cloned). */
cudaError_t node_params_copy(node_params *dst, const node_params *src) {
  *dst = *src;
  if (src->type == cudaGraphNodeTypeMemAlloc && src->mem_ptr) rgpu_rt_graphmem_ref(src->mem_ptr);
  dst->offsets = NULL;
  dst->argv = NULL;
  dst->child = NULL;
  dst->kattrs = NULL;
  dst->nkattrs = 0;
  dst->bodies = NULL;
  if (src->type == cudaGraphNodeTypeConditional) {
    cudaError_t e = cond_bodies_copy(dst, src);
    if (e != cudaSuccess) return e;
  }
  if (src->nkattrs) {
    dst->kattrs = malloc(src->nkattrs * sizeof *dst->kattrs);
    if (!dst->kattrs) return cudaErrorMemoryAllocation;
    memcpy(dst->kattrs, src->kattrs, src->nkattrs * sizeof *dst->kattrs);
    dst->nkattrs = src->nkattrs;
  }
  if (node_params_is_lib(src)) {
    dst->op.lib.args = malloc(src->op.lib.args_len ? src->op.lib.args_len : 1);
    if (!dst->op.lib.args) return cudaErrorMemoryAllocation;
    memcpy(dst->op.lib.args, src->op.lib.args, src->op.lib.args_len);
  }
  if (src->type == cudaGraphNodeTypeKernel) {
    dst->op.launch.params = NULL;
    if (src->op.launch.plen) {
      dst->op.launch.params = malloc(src->op.launch.plen);
      if (!dst->op.launch.params) return cudaErrorMemoryAllocation;
      memcpy(dst->op.launch.params, src->op.launch.params, src->op.launch.plen);
    }
    if (src->nparams) {
      dst->offsets = malloc(src->nparams * sizeof *dst->offsets);
      dst->argv = malloc(src->nparams * sizeof *dst->argv);
      if (!dst->offsets || !dst->argv) {
        node_params_free(dst);
        return cudaErrorMemoryAllocation;
      }
      memcpy(dst->offsets, src->offsets, src->nparams * sizeof *dst->offsets);
      for (uint32_t i = 0; i < src->nparams; i++)
        dst->argv[i] = dst->op.launch.params + dst->offsets[i];
    }
  }
  if (src->child) {
    cudaError_t e = graph_clone(src->child, &dst->child, 1);
    if (e != cudaSuccess) {
      node_params_free(dst);
      return e;
    }
  }
  return cudaSuccess;
}

/* ---- kernel parameters: packed through the launch path ------------------ */


/* rgpu_rt_launch_with's use for a kernel node: the node copies the op. */
static cudaError_t copy_launch(rgpu_client *c, const rgpu_rt_op *op, void *np) {
  (void)c;
  return node_params_launch(np, op);
}

cudaError_t node_params_kernel(node_params *p, const struct cudaKernelNodeParams *kp) {
  if (!kp || !kp->func) return cudaErrorInvalidValue;
  if (kp->extra && !kp->kernelParams) {
    static int logged;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      RGPU_WARN("kernel graph nodes with 'extra' (CU_LAUNCH_PARAM_BUFFER_POINTER) are not supported");
    return cudaErrorNotSupported;
  }
  rgpu_rt_func *f = rgpu_rt_func_by_stub(kp->func);
  int library_kernel = !f && rgpu_rt_is_driver_function(kp->func);
  if (!f && !library_kernel) return cudaErrorInvalidDeviceFunction;
  /* The launch path's own checks and packing, without sending: a kernel
   * node is exactly the operation a launch on the legacy stream would be.
   * rgpu_rt_launch_with counts the call and connects, as the launch did;
   * a library's cudaKernel_t goes through the driver's launch path. */
  node_params np;
  memset(&np, 0, sizeof np); /* freed below also when the launch fails before the copy */
  cudaError_t e =
      library_kernel
          ? rgpu_rt_driver_launch_with(kp->func, kp->gridDim, kp->blockDim, kp->kernelParams,
                                       kp->sharedMemBytes, copy_launch, &np)
          : rgpu_rt_launch_with(f, kp->gridDim, kp->blockDim, kp->kernelParams,
                                kp->sharedMemBytes, NULL, 0, copy_launch, &np);
  if (e != cudaSuccess) {
    node_params_free(&np);
    return e;
  }
  np.func = kp->func;
  /* New parameters keep the node's attributes. */
  np.kattrs = p->kattrs;
  np.nkattrs = p->nkattrs;
  p->kattrs = NULL;
  p->nkattrs = 0;
  node_params_free(p);
  *p = np;
  return cudaSuccess;
}

/* A kernel node from a launch operation (a kernel node being added, or a
 * launch captured): the node owns a copy of the packed parameters and
 * records the layout's offsets for cudaGraphKernelNodeGetParams. */
cudaError_t node_params_launch(node_params *p, const rgpu_rt_op *launch) {
  memset(p, 0, sizeof *p);
  p->type = cudaGraphNodeTypeKernel;
  p->op = *launch;
  p->op.stream = 0;
  p->op.device = rgpu_rt_current_device();
  p->op.launch.params = NULL;
  p->op.launch.plen = 0;
  p->op.launch.layout = NULL;
  p->func = rgpu_rt_func_stub(launch->launch.kernel);
  size_t len = launch->launch.plen;
  if (len) {
    p->op.launch.params = malloc(len);
    if (!p->op.launch.params) return cudaErrorMemoryAllocation;
    memcpy(p->op.launch.params, launch->launch.params, len);
  }
  p->op.launch.plen = len;
  const rgpu_param_layout *l = launch->launch.layout;
  if (l && l->nparams) {
    p->offsets = malloc(l->nparams * sizeof *p->offsets);
    p->argv = malloc(l->nparams * sizeof *p->argv);
    if (!p->offsets || !p->argv) return cudaErrorMemoryAllocation;
    p->nparams = l->nparams;
    for (uint32_t i = 0; i < l->nparams; i++) {
      p->offsets[i] = l->offsets[i] < len ? l->offsets[i] : 0;
      p->argv[i] = p->op.launch.params + p->offsets[i];
    }
  }
  return cudaSuccess;
}

/* ---- memcpy and memset parameters --------------------------------------- */

int graph_copy_extent(const struct cudaPitchedPtr *pp, const struct cudaPos *pos,
                       const struct cudaExtent *ex, uint64_t *base, uint64_t *span) {
  size_t pitch = pp->pitch ? pp->pitch : ex->width;
  size_t ysize = pp->ysize ? pp->ysize : ex->height;
  if (ex->width > pitch && (ex->height > 1 || ex->depth > 1)) return -1;
  if (ex->height > ysize && ex->depth > 1) return -1;
  unsigned __int128 off = (unsigned __int128)pos->z * pitch * ysize + (unsigned __int128)pos->y * pitch + pos->x;
  unsigned __int128 s = (unsigned __int128)(ex->depth - 1) * pitch * ysize +
                        (unsigned __int128)(ex->height - 1) * pitch + ex->width;
  if (off + (uintptr_t)pp->ptr > UINT64_MAX || s > UINT64_MAX) return -1;
  *base = (uint64_t)(uintptr_t)pp->ptr + (uint64_t)off;
  *span = (uint64_t)s;
  return 0;
}

/* p becomes a memcpy node of the checked parameters cp, kind resolved. */
static void memcpy_node_set(node_params *p, const struct cudaMemcpy3DParms *cp,
                            enum cudaMemcpyKind kind) {
  node_params_free(p);
  memset(p, 0, sizeof *p);
  p->type = cudaGraphNodeTypeMemcpy;
  p->op.kind = RGPU_RT_OP_COPY;
  p->op.copy.cp = *cp;
  p->op.copy.cp.kind = kind;
  p->op.device = rgpu_rt_current_device();
}

cudaError_t node_params_memcpy(node_params *p, const struct cudaMemcpy3DParms *cp) {
  if (!cp) return cudaErrorInvalidValue;
  if (cp->srcArray || cp->dstArray) {
    /* Checked as cudaMemcpy3D checks it (an array and device memory or
     * another array; a host side is not supported in a graph); the node
     * keeps the API's parameters, and instantiation sends the ARRAY_COPY
     * request it stands for (rgpu_cudart_graph_exec.c). */
    if ((int)cp->kind < 0 || (int)cp->kind > (int)cudaMemcpyDefault)
      return cudaErrorInvalidMemcpyDirection;
    cudaError_t e = rgpu_rt_array_copy_node(cp, NULL);
    if (e != cudaSuccess) return e;
    memcpy_node_set(p, cp, cudaMemcpyDeviceToDevice);
    return cudaSuccess;
  }
  if (!cp->extent.width || !cp->extent.height || !cp->extent.depth) return cudaErrorInvalidValue;
  if (!cp->srcPtr.ptr || !cp->dstPtr.ptr) return cudaErrorInvalidValue;
  if ((int)cp->kind < 0 || (int)cp->kind > (int)cudaMemcpyDefault)
    return cudaErrorInvalidMemcpyDirection;
  uint64_t sb, ss, db, ds;
  if (graph_copy_extent(&cp->srcPtr, &cp->srcPos, &cp->extent, &sb, &ss) ||
      graph_copy_extent(&cp->dstPtr, &cp->dstPos, &cp->extent, &db, &ds))
    return cudaErrorInvalidPitchValue;
  int sdev = is_device_ptr((void *)(uintptr_t)sb, 1, NULL);
  int ddev = is_device_ptr((void *)(uintptr_t)db, 1, NULL);
  enum cudaMemcpyKind k = cp->kind;
  if (k == cudaMemcpyDefault)
    k = sdev && ddev ? cudaMemcpyDeviceToDevice
                     : ddev ? cudaMemcpyHostToDevice : sdev ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost;
  int need_s = k == cudaMemcpyDeviceToHost || k == cudaMemcpyDeviceToDevice;
  int need_d = k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToDevice;
  if (need_s && !is_device_ptr((void *)(uintptr_t)sb, ss, NULL)) return cudaErrorInvalidValue;
  if (need_d && !is_device_ptr((void *)(uintptr_t)db, ds, NULL)) return cudaErrorInvalidValue;
  memcpy_node_set(p, cp, k);
  return cudaSuccess;
}

cudaError_t node_params_symbol(node_params *p, int to_symbol, const void *symbol, void *host,
                                 size_t count, size_t offset, enum cudaMemcpyKind kind) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  uint64_t dptr;
  size_t size;
  e = rgpu_rt_symbol(c, symbol, &dptr, &size);
  if (e != cudaSuccess) return e;
  if (offset > size || count > size - offset) return cudaErrorInvalidValue;
  void *dev = (void *)(uintptr_t)(dptr + offset);
  return to_symbol ? node_params_memcpy_1d(p, dev, host, count, kind)
                   : node_params_memcpy_1d(p, host, dev, count, kind);
}

cudaError_t node_params_memset(node_params *p, const struct cudaMemsetParams *ms) {
  if (!ms || !ms->dst) return cudaErrorInvalidValue;
  if (ms->elementSize != 1 && ms->elementSize != 2 && ms->elementSize != 4)
    return cudaErrorInvalidValue;
  if (!ms->width || !ms->height) return cudaErrorInvalidValue;
  size_t row = ms->width * ms->elementSize;
  if (ms->height > 1 && ms->pitch < row) return cudaErrorInvalidValue;
  uint64_t span = (uint64_t)(ms->height - 1) * (ms->height > 1 ? ms->pitch : 0) + row;
  if (!is_device_ptr(ms->dst, span, NULL)) return cudaErrorInvalidValue;
  node_params_free(p);
  memset(p, 0, sizeof *p);
  p->type = cudaGraphNodeTypeMemset;
  p->op.kind = RGPU_RT_OP_MEMSET;
  p->op.fill = *ms;
  p->op.device = rgpu_rt_current_device();
  return cudaSuccess;
}

cudaError_t node_params_memcpy_1d(node_params *p, void *dst, const void *src, size_t count,
                                  enum cudaMemcpyKind kind) {
  struct cudaMemcpy3DParms cp = rgpu_rt_copy_1d(dst, src, count, kind);
  return node_params_memcpy(p, &cp);
}

cudaError_t node_params_host(node_params *p, const struct cudaHostNodeParams *hp) {
  if (!hp || !hp->fn) return cudaErrorInvalidValue;
  /* A library node given host parameters is a host node from now on. */
  if (node_params_is_lib(p)) free(p->op.lib.args);
  p->op.kind = RGPU_RT_OP_HOST_FUNC;
  p->type = cudaGraphNodeTypeHost;
  p->op.host.params = *hp;
  return cudaSuccess;
}

cudaError_t node_params_event(node_params *p, enum cudaGraphNodeType type, cudaEvent_t event) {
  if (!valid_event(event)) return cudaErrorInvalidValue;
  p->type = type;
  p->op.event.event = event;
  return cudaSuccess;
}

int graph_has_conditional(cudaGraph_t g) {
  for (size_t i = 0; i < g->n; i++) {
    const node_params *p = &g->nodes[i]->p;
    if (p->type == cudaGraphNodeTypeConditional) return 1;
    if (p->type == cudaGraphNodeTypeGraph && p->child && graph_has_conditional(p->child)) return 1;
  }
  return 0;
}

cudaError_t node_params_child(node_params *p, cudaGraph_t child) {
  if (!valid_graph(child)) return cudaErrorInvalidValue;
  /* Embedding is cloning: CUDA refuses it for conditional nodes too. */
  if (graph_has_conditional(child)) return cudaErrorNotSupported;
  p->type = cudaGraphNodeTypeGraph;
  return graph_clone(child, &p->child, 1);
}

cudaError_t node_params_empty(node_params *p) {
  p->type = cudaGraphNodeTypeEmpty;
  return cudaSuccess;
}

int node_params_host_side(const node_params *p) {
  return (p->type == cudaGraphNodeTypeHost && !node_params_is_lib(p)) ||
         (p->type == cudaGraphNodeTypeMemcpy && p->op.copy.cp.kind == cudaMemcpyHostToHost);
}

/* ---- graphs and nodes ---------------------------------------------------- */

cudaError_t graph_new(cudaGraph_t *out) {
  struct CUgraph_st *g = calloc(1, sizeof *g);
  if (!g) return cudaErrorMemoryAllocation;
  g->magic = GRAPH_MAGIC;
  *out = g;
  return cudaSuccess;
}

static void node_free(cudaGraphNode_t n) {
  node_params_free(&n->p);
  free(n->deps);
  n->magic = 0;
  free(n);
}

void graph_free(cudaGraph_t g) {
  cond_graph_forget(g);
  for (size_t i = 0; i < g->n; i++) node_free(g->nodes[i]);
  free(g->nodes);
  rgpu_user_refs_release(&g->user_refs);
  g->magic = 0;
  free(g);
}

static int has_dep(cudaGraphNode_t n, cudaGraphNode_t d) {
  for (size_t i = 0; i < n->ndeps; i++)
    if (n->deps[i] == d) return 1;
  return 0;
}

static cudaError_t add_dep(cudaGraphNode_t n, cudaGraphNode_t d) {
  if (has_dep(n, d)) return cudaSuccess;
  if (RGPU_ARRAY_RESERVE(n->deps, n->capd, n->ndeps + 1, 8)) return cudaErrorMemoryAllocation;
  n->deps[n->ndeps++] = d;
  return cudaSuccess;
}

/* Adds a node with params p (taken over on success). */
cudaError_t graph_node_add(cudaGraphNode_t *out, cudaGraph_t g, const cudaGraphNode_t *deps,
                            size_t ndeps, node_params *p) {
  if (!valid_graph(g) || (ndeps && !deps)) return cudaErrorInvalidValue;
  for (size_t i = 0; i < ndeps; i++) {
    if (!valid_node(deps[i]) || deps[i]->g != g) return cudaErrorInvalidValue;
    for (size_t j = 0; j < i; j++)
      if (deps[j] == deps[i]) return cudaErrorInvalidValue; /* CUDA refuses duplicates */
  }
  struct CUgraphNode_st *n = calloc(1, sizeof *n);
  if (!n || RGPU_ARRAY_RESERVE(g->nodes, g->cap, g->n + 1, 8)) {
    free(n);
    return cudaErrorMemoryAllocation;
  }
  n->magic = NODE_MAGIC;
  n->id = atomic_fetch_add(&g_node_ids, 1);
  n->g = g;
  for (size_t i = 0; i < ndeps; i++)
    if (add_dep(n, deps[i]) != cudaSuccess) {
      free(n->deps);
      free(n);
      return cudaErrorMemoryAllocation;
    }
  n->p = *p;
  memset(p, 0, sizeof *p);
  g->nodes[g->n++] = n;
  if (out) *out = n;
  return cudaSuccess;
}

/* Records every node's position, so a dependency's index is one load
 * (captured graphs have thousands of nodes). */
static void index_nodes(cudaGraph_t g) {
  for (size_t i = 0; i < g->n; i++) g->nodes[i]->pos = i;
}

cudaError_t graph_clone(cudaGraph_t src, cudaGraph_t *out, int keep_origin) {
  (void)keep_origin;
  cudaGraph_t g;
  cudaError_t e = graph_new(&g);
  if (e != cudaSuccess) return e;
  /* A clone (and so a child graph node's copy) owns references of its own. */
  e = rgpu_user_refs_copy(&g->user_refs, &src->user_refs);
  for (size_t i = 0; i < src->n && e == cudaSuccess; i++) {
    cudaGraphNode_t s = src->nodes[i];
    node_params p;
    e = node_params_copy(&p, &s->p);
    if (e != cudaSuccess) break;
    cudaGraphNode_t n;
    e = graph_node_add(&n, g, NULL, 0, &p);
    if (e != cudaSuccess) {
      node_params_free(&p);
      break;
    }
    n->origin_id = s->id;
  }
  /* Dependencies by index: a node's deps may come later in the list when
   * cudaGraphAddDependencies added them. */
  index_nodes(src);
  for (size_t i = 0; i < src->n && e == cudaSuccess; i++) {
    cudaGraphNode_t s = src->nodes[i];
    for (size_t k = 0; k < s->ndeps && e == cudaSuccess; k++)
      e = add_dep(g->nodes[i], g->nodes[s->deps[k]->pos]);
  }
  if (e != cudaSuccess) {
    graph_free(g);
    return e;
  }
  *out = g;
  return cudaSuccess;
}

/* Topological order of g's nodes (indices; among ready nodes, lower index
 * first, so equal graphs give equal orders); -1 on a cycle or no memory. */
int graph_topo_order(cudaGraph_t g, size_t *order) {
  size_t n = g->n;
  if (!n) return 0;
  index_nodes(g);
  size_t *indeg = calloc(n, sizeof *indeg), *start = calloc(n + 1, sizeof *start);
  size_t edges = 0;
  for (size_t i = 0; i < n; i++) edges += g->nodes[i]->ndeps;
  size_t *adj = malloc((edges ? edges : 1) * sizeof *adj), *fill = calloc(n, sizeof *fill);
  int rc = -1;
  if (indeg && start && adj && fill) {
    /* Dependents of each node, in ascending index order. */
    for (size_t i = 0; i < n; i++) {
      indeg[i] = g->nodes[i]->ndeps;
      for (size_t k = 0; k < g->nodes[i]->ndeps; k++) start[g->nodes[i]->deps[k]->pos + 1]++;
    }
    for (size_t i = 0; i < n; i++) start[i + 1] += start[i];
    for (size_t i = 0; i < n; i++)
      for (size_t k = 0; k < g->nodes[i]->ndeps; k++) {
        size_t d = g->nodes[i]->deps[k]->pos;
        adj[start[d] + fill[d]++] = i;
      }
    size_t head = 0, tail = 0;
    for (size_t i = 0; i < n; i++)
      if (!indeg[i]) order[tail++] = i;
    while (head < tail) {
      size_t d = order[head++];
      for (size_t k = start[d]; k < start[d + 1]; k++)
        if (--indeg[adj[k]] == 0) order[tail++] = adj[k];
    }
    rc = tail == n ? 0 : -1;
  }
  free(indeg);
  free(start);
  free(adj);
  free(fill);
  return rc;
}

/* ---- public API: graphs -------------------------------------------------- */

RGPU_API cudaError_t cudaGraphCreate(cudaGraph_t *pGraph, unsigned int flags) {
  rgpu_rt_count_call();
  if (!pGraph || flags) return rgpu_rt_ret(cudaErrorInvalidValue);
  return rgpu_rt_ret(graph_new(pGraph));
}

RGPU_API cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  rgpu_rt_count_call();
  if (!valid_graph(graph)) return rgpu_rt_ret(cudaErrorInvalidValue);
  /* A conditional node's body lives and dies with its node. */
  if (graph->body) return rgpu_rt_ret(cudaErrorInvalidValue);
  graph_free(graph);
  rgpu_rt_graphmem_collect(); /* graph blocks whose last hold was this graph */
  return cudaSuccess;
}

RGPU_API cudaError_t cudaGraphClone(cudaGraph_t *pGraphClone, cudaGraph_t originalGraph) {
  rgpu_rt_count_call();
  if (!pGraphClone || !valid_graph(originalGraph)) return rgpu_rt_ret(cudaErrorInvalidValue);
  /* CUDA clones no graph with conditional nodes (measured on the H100). */
  if (graph_has_conditional(originalGraph)) return rgpu_rt_ret(cudaErrorNotSupported);
  return rgpu_rt_ret(graph_clone(originalGraph, pGraphClone, 1));
}

RGPU_API cudaError_t cudaGraphNodeFindInClone(cudaGraphNode_t *pNode, cudaGraphNode_t originalNode,
                                              cudaGraph_t clonedGraph) {
  rgpu_rt_count_call();
  if (!pNode || !valid_node(originalNode) || !valid_graph(clonedGraph))
    return rgpu_rt_ret(cudaErrorInvalidValue);
  for (size_t i = 0; i < clonedGraph->n; i++)
    if (clonedGraph->nodes[i]->origin_id == originalNode->id) {
      *pNode = clonedGraph->nodes[i];
      return cudaSuccess;
    }
  return rgpu_rt_ret(cudaErrorInvalidValue);
}

/* Every cudaGraphAdd*Node shares the first four parameters and one body:
 * fill a zeroed node_params with FILL (an expression that may use p, the
 * graph and the caller's own parameters and yields a cudaError_t), then
 * add the node; p is freed whenever it does not end up in the graph. */
#define ADD_NODE_ARGS                                                                       \
  cudaGraphNode_t *pGraphNode, cudaGraph_t graph, const cudaGraphNode_t *pDependencies,     \
      size_t numDependencies
#define ADD_NODE(FILL)                                                                      \
  rgpu_rt_count_call();                                                                     \
  if (!pGraphNode) return rgpu_rt_ret(cudaErrorInvalidValue);                               \
  node_params p;                                                                            \
  memset(&p, 0, sizeof p);                                                                  \
  cudaError_t e = (FILL);                                                                   \
  if (e == cudaSuccess) e = graph_node_add(pGraphNode, graph, pDependencies, numDependencies, &p); \
  if (e != cudaSuccess) node_params_free(&p);                                               \
  return rgpu_rt_ret(e)

RGPU_API cudaError_t cudaGraphAddKernelNode(ADD_NODE_ARGS,
                                            const struct cudaKernelNodeParams *pNodeParams) {
  ADD_NODE(valid_graph(graph) ? node_params_kernel(&p, pNodeParams) : cudaErrorInvalidValue);
}

RGPU_API cudaError_t cudaGraphAddMemcpyNode(ADD_NODE_ARGS,
                                            const struct cudaMemcpy3DParms *pCopyParams) {
  ADD_NODE(node_params_memcpy(&p, pCopyParams));
}

RGPU_API cudaError_t cudaGraphAddMemcpyNode1D(ADD_NODE_ARGS, void *dst, const void *src,
                                              size_t count, enum cudaMemcpyKind kind) {
  ADD_NODE(node_params_memcpy_1d(&p, dst, src, count, kind));
}

RGPU_API cudaError_t cudaGraphAddMemcpyNodeToSymbol(ADD_NODE_ARGS, const void *symbol,
                                                    const void *src, size_t count, size_t offset,
                                                    enum cudaMemcpyKind kind) {
  ADD_NODE(node_params_symbol(&p, 1, symbol, (void *)src, count, offset, kind));
}

RGPU_API cudaError_t cudaGraphAddMemcpyNodeFromSymbol(ADD_NODE_ARGS, void *dst,
                                                      const void *symbol, size_t count,
                                                      size_t offset, enum cudaMemcpyKind kind) {
  ADD_NODE(node_params_symbol(&p, 0, symbol, dst, count, offset, kind));
}

RGPU_API cudaError_t cudaGraphAddMemsetNode(ADD_NODE_ARGS,
                                            const struct cudaMemsetParams *pMemsetParams) {
  ADD_NODE(node_params_memset(&p, pMemsetParams));
}

RGPU_API cudaError_t cudaGraphAddHostNode(ADD_NODE_ARGS,
                                          const struct cudaHostNodeParams *pNodeParams) {
  ADD_NODE(node_params_host(&p, pNodeParams));
}

RGPU_API cudaError_t cudaGraphAddChildGraphNode(ADD_NODE_ARGS, cudaGraph_t childGraph) {
  ADD_NODE(childGraph != graph ? node_params_child(&p, childGraph) : cudaErrorInvalidValue);
}

RGPU_API cudaError_t cudaGraphAddEmptyNode(ADD_NODE_ARGS) {
  ADD_NODE(node_params_empty(&p));
}

RGPU_API cudaError_t cudaGraphAddEventRecordNode(ADD_NODE_ARGS, cudaEvent_t event) {
  ADD_NODE(node_params_event(&p, cudaGraphNodeTypeEventRecord, event));
}

RGPU_API cudaError_t cudaGraphAddEventWaitNode(ADD_NODE_ARGS, cudaEvent_t event) {
  ADD_NODE(node_params_event(&p, cudaGraphNodeTypeWaitEvent, event));
}

/* The generic (CUDA 12.2+) form. */
cudaError_t node_params_generic(node_params *p, const struct cudaGraphNodeParams *np) {
  if (!np) return cudaErrorInvalidValue;
  switch (np->type) {
  case cudaGraphNodeTypeKernel: {
    struct cudaKernelNodeParams kp = {np->kernel.func, np->kernel.gridDim, np->kernel.blockDim,
                                      np->kernel.sharedMemBytes, np->kernel.kernelParams,
                                      np->kernel.extra};
    return node_params_kernel(p, &kp);
  }
  case cudaGraphNodeTypeMemcpy: return node_params_memcpy(p, &np->memcpy.copyParams);
  case cudaGraphNodeTypeMemset: {
    struct cudaMemsetParams ms = {np->memset.dst, np->memset.pitch, np->memset.value,
                                  np->memset.elementSize, np->memset.width, np->memset.height};
    return node_params_memset(p, &ms);
  }
  case cudaGraphNodeTypeHost: {
    struct cudaHostNodeParams hp = {np->host.fn, np->host.userData};
    return node_params_host(p, &hp);
  }
  case cudaGraphNodeTypeGraph: return node_params_child(p, np->graph.graph);
  case cudaGraphNodeTypeEmpty: return node_params_empty(p);
  case cudaGraphNodeTypeEventRecord: return node_params_event(p, np->type, np->eventRecord.event);
  case cudaGraphNodeTypeWaitEvent: return node_params_event(p, np->type, np->eventWait.event);
  default: return cudaErrorNotSupported;
  }
}

RGPU_API cudaError_t cudaGraphAddNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                      const cudaGraphNode_t *pDependencies,
                                      const cudaGraphEdgeData *dependencyData,
                                      size_t numDependencies, struct cudaGraphNodeParams *nodeParams) {
  (void)dependencyData; /* only default edges exist without programmatic launches */
  if (nodeParams && nodeParams->type == cudaGraphNodeTypeConditional) {
    /* The bodies go to the caller only once the node is in its graph. */
    rgpu_rt_count_call();
    if (!pGraphNode) return rgpu_rt_ret(cudaErrorInvalidValue);
    node_params p;
    memset(&p, 0, sizeof p);
    cudaError_t e = node_params_conditional(&p, graph, &nodeParams->conditional);
    if (e == cudaSuccess) e = graph_node_add(pGraphNode, graph, pDependencies, numDependencies, &p);
    if (e != cudaSuccess) {
      node_params_free(&p);
      return rgpu_rt_ret(e);
    }
    cond_publish(&(*pGraphNode)->p, &nodeParams->conditional);
    return cudaSuccess;
  }
  ADD_NODE(node_params_generic(&p, nodeParams));
}

/* ---- public API: node inspection and parameters ------------------------- */

RGPU_API cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, enum cudaGraphNodeType *pType) {
  rgpu_rt_count_call();
  if (!valid_node(node) || !pType) return rgpu_rt_ret(cudaErrorInvalidValue);
  *pType = node->p.type;
  /* A captured stream memory operation is a library node here (its
   * request travels whole) and a batch memory-operation node to CUDA. */
  if (node_params_is_lib(&node->p) && node->p.op.lib.opcode == RGPU_OP_STREAM_MEMOP)
    *pType = (enum cudaGraphNodeType)12; /* CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: the runtime names no such type */
  return cudaSuccess;
}

static cudaError_t want_type(cudaGraphNode_t node, enum cudaGraphNodeType t) {
  if (!valid_node(node)) return cudaErrorInvalidValue;
  return node->p.type == t ? cudaSuccess : cudaErrorInvalidValue;
}

/* Per kind: a node's parameters as the API struct, and the struct checked
 * and taken into the node (the rest of each accessor comes from the table
 * in common/rgpu_graph_node_params.def). */
static cudaError_t get_Kernel(const node_params *p, struct cudaKernelNodeParams *out) {
  /* A node made from a library's cudaKernel_t: CUDA answers
   * cudaErrorInvalidDeviceFunction here (measured on the H100), the node
   * having no function of the runtime's to report. */
  if (p->func && !rgpu_rt_func_by_stub(p->func) && rgpu_rt_is_driver_function(p->func))
    return cudaErrorInvalidDeviceFunction;
  out->func = (void *)p->func;
  out->gridDim = p->op.launch.grid;
  out->blockDim = p->op.launch.block;
  out->sharedMemBytes = p->op.launch.shmem;
  out->kernelParams = p->argv;
  out->extra = NULL;
  return cudaSuccess;
}
static cudaError_t set_Kernel(node_params *p, const struct cudaKernelNodeParams *in) {
  return node_params_kernel(p, in);
}
static cudaError_t get_Memcpy(const node_params *p, struct cudaMemcpy3DParms *out) {
  *out = p->op.copy.cp;
  return cudaSuccess;
}
static cudaError_t set_Memcpy(node_params *p, const struct cudaMemcpy3DParms *in) {
  return node_params_memcpy(p, in);
}
static cudaError_t get_Memset(const node_params *p, struct cudaMemsetParams *out) {
  *out = p->op.fill;
  return cudaSuccess;
}
static cudaError_t set_Memset(node_params *p, const struct cudaMemsetParams *in) {
  return node_params_memset(p, in);
}
static cudaError_t get_Host(const node_params *p, struct cudaHostNodeParams *out) {
  /* A library call captured from a stream is a host node only in rgpu's
   * model (to CUDA its kernels are kernel nodes): it has no function. */
  if (node_params_is_lib(p)) return cudaErrorInvalidValue;
  *out = p->op.host.params;
  return cudaSuccess;
}
static cudaError_t set_Host(node_params *p, const struct cudaHostNodeParams *in) {
  return node_params_host(p, in);
}

#define RGPU_GRAPH_NODE_PARAMS(Kind, rt_type, RtParams, drv_type, DrvParams, drv_suffix)      \
  RGPU_API cudaError_t cudaGraph##Kind##NodeGetParams(cudaGraphNode_t node, RtParams *pNodeParams) { \
    rgpu_rt_count_call();                                                                        \
    cudaError_t e = want_type(node, rt_type);                                                    \
    if (e == cudaSuccess && !pNodeParams) e = cudaErrorInvalidValue;                             \
    if (e == cudaSuccess) e = get_##Kind(&node->p, pNodeParams);                                 \
    return rgpu_rt_ret(e);                                                                       \
  }                                                                                              \
  RGPU_API cudaError_t cudaGraph##Kind##NodeSetParams(cudaGraphNode_t node,                      \
                                                      const RtParams *pNodeParams) {             \
    rgpu_rt_count_call();                                                                        \
    cudaError_t e = want_type(node, rt_type);                                                    \
    if (e == cudaSuccess) e = set_##Kind(&node->p, pNodeParams);                                 \
    return rgpu_rt_ret(e);                                                                       \
  }
#define RGPU_GRAPH_NODE_EVENT(Kind, rt_type, drv_type)                                           \
  RGPU_API cudaError_t cudaGraph##Kind##NodeGetEvent(cudaGraphNode_t node, cudaEvent_t *event_out) { \
    rgpu_rt_count_call();                                                                        \
    cudaError_t e = want_type(node, rt_type);                                                    \
    if (e == cudaSuccess && !event_out) e = cudaErrorInvalidValue;                               \
    if (e == cudaSuccess) *event_out = node->p.op.event.event;                                   \
    return rgpu_rt_ret(e);                                                                       \
  }                                                                                              \
  RGPU_API cudaError_t cudaGraph##Kind##NodeSetEvent(cudaGraphNode_t node, cudaEvent_t event) {  \
    rgpu_rt_count_call();                                                                        \
    cudaError_t e = want_type(node, rt_type);                                                    \
    if (e == cudaSuccess && !valid_event(event)) e = cudaErrorInvalidValue;                      \
    if (e == cudaSuccess) node->p.op.event.event = event;                                        \
    return rgpu_rt_ret(e);                                                                       \
  }
#define RGPU_GRAPH_NODE_CHILD(Kind, rt_type, drv_type)                                           \
  RGPU_API cudaError_t cudaGraph##Kind##NodeGetGraph(cudaGraphNode_t node, cudaGraph_t *pGraph) { \
    rgpu_rt_count_call();                                                                        \
    cudaError_t e = want_type(node, rt_type);                                                    \
    if (e == cudaSuccess && !pGraph) e = cudaErrorInvalidValue;                                  \
    if (e == cudaSuccess) *pGraph = node->p.child;                                               \
    return rgpu_rt_ret(e);                                                                       \
  }
#include "rgpu_graph_node_params.def"

/* ---- kernel node attributes ----------------------------------------------- */

/* What a kernel node runs with on the server is its launch (function,
 * grid, block, shared memory, parameters).  Attributes that only hint (the
 * L2 access policy window of the L2-persistence recipes, priority,
 * synchronization policy, memory-sync domains, the carveout and cluster
 * scheduling preferences) change no result: they are kept on the node for
 * Get and Copy and not sent, the rule cudaLaunchKernelEx follows
 * (rgpu_cudart_launch_ex.c).  One that would change how the kernel runs
 * (cooperative, a cluster shape, programmatic or completion events, a
 * device-updatable node) is cudaErrorNotSupported, logged once, unless it
 * asks for the default. */
static cudaError_t kernel_attr_check(cudaLaunchAttributeID id, const cudaLaunchAttributeValue *v) {
  if (id != cudaLaunchAttributeIgnore && rgpu_rt_launch_attr_is_hint(id)) return cudaSuccess;
  switch (id) {
  case cudaLaunchAttributeCooperative:
    if (!v->cooperative) return cudaSuccess;
    break;
  case cudaLaunchAttributeClusterDimension:
    if (v->clusterDim.x <= 1 && v->clusterDim.y <= 1 && v->clusterDim.z <= 1) return cudaSuccess;
    break;
  case cudaLaunchAttributeDeviceUpdatableKernelNode:
    if (!v->deviceUpdatableKernelNode.deviceUpdatable) return cudaSuccess;
    break;
  case cudaLaunchAttributeProgrammaticEvent:
  case cudaLaunchAttributeLaunchCompletionEvent:
    break;
  default:
    return cudaErrorInvalidValue;
  }
  static int logged;
  if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
    RGPU_WARN("cudaGraphKernelNodeSetAttribute(%d): rgpu's graph kernel nodes do not take this "
              "attribute; cudaErrorNotSupported",
              (int)id);
  return cudaErrorNotSupported;
}

RGPU_API cudaError_t cudaGraphKernelNodeSetAttribute(cudaGraphNode_t hNode,
                                                     cudaKernelNodeAttrID attr,
                                                     const cudaKernelNodeAttrValue *value) {
  rgpu_rt_count_call();
  cudaError_t e = want_type(hNode, cudaGraphNodeTypeKernel);
  if (e == cudaSuccess && !value) e = cudaErrorInvalidValue;
  if (e == cudaSuccess) e = kernel_attr_check(attr, value);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  node_params *p = &hNode->p;
  for (size_t i = 0; i < p->nkattrs; i++)
    if (p->kattrs[i].id == attr) {
      p->kattrs[i].val = *value;
      return cudaSuccess;
    }
  cudaLaunchAttribute *grown = realloc(p->kattrs, (p->nkattrs + 1) * sizeof *grown);
  if (!grown) return rgpu_rt_ret(cudaErrorMemoryAllocation);
  p->kattrs = grown;
  memset(&p->kattrs[p->nkattrs], 0, sizeof *p->kattrs);
  p->kattrs[p->nkattrs].id = attr;
  p->kattrs[p->nkattrs].val = *value;
  p->nkattrs++;
  return cudaSuccess;
}

/* An attribute never set reads as its default: all zeros. */
RGPU_API cudaError_t cudaGraphKernelNodeGetAttribute(cudaGraphNode_t hNode,
                                                     cudaKernelNodeAttrID attr,
                                                     cudaKernelNodeAttrValue *value_out) {
  rgpu_rt_count_call();
  cudaError_t e = want_type(hNode, cudaGraphNodeTypeKernel);
  if (e == cudaSuccess && !value_out) e = cudaErrorInvalidValue;
  if (e == cudaSuccess && (int)attr <= 0) e = cudaErrorInvalidValue;
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  memset(value_out, 0, sizeof *value_out);
  const node_params *p = &hNode->p;
  for (size_t i = 0; i < p->nkattrs; i++)
    if (p->kattrs[i].id == attr) *value_out = p->kattrs[i].val;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaGraphKernelNodeCopyAttributes(cudaGraphNode_t hDst, cudaGraphNode_t hSrc) {
  rgpu_rt_count_call();
  cudaError_t e = want_type(hDst, cudaGraphNodeTypeKernel);
  if (e == cudaSuccess) e = want_type(hSrc, cudaGraphNodeTypeKernel);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  if (hDst == hSrc) return cudaSuccess;
  cudaLaunchAttribute *copy = NULL;
  size_t n = hSrc->p.nkattrs;
  if (n) {
    copy = malloc(n * sizeof *copy);
    if (!copy) return rgpu_rt_ret(cudaErrorMemoryAllocation);
    memcpy(copy, hSrc->p.kattrs, n * sizeof *copy);
  }
  free(hDst->p.kattrs);
  hDst->p.kattrs = copy;
  hDst->p.nkattrs = n;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaGraphMemcpyNodeSetParams1D(cudaGraphNode_t node, void *dst,
                                                    const void *src, size_t count,
                                                    enum cudaMemcpyKind kind) {
  struct cudaMemcpy3DParms cp = rgpu_rt_copy_1d(dst, src, count, kind);
  return cudaGraphMemcpyNodeSetParams(node, &cp);
}

RGPU_API cudaError_t cudaGraphMemcpyNodeSetParamsToSymbol(cudaGraphNode_t node, const void *symbol,
                                                          const void *src, size_t count,
                                                          size_t offset, enum cudaMemcpyKind kind) {
  cudaError_t e = want_type(node, cudaGraphNodeTypeMemcpy);
  if (e == cudaSuccess) e = node_params_symbol(&node->p, 1, symbol, (void *)src, count, offset, kind);
  else rgpu_rt_count_call();
  return rgpu_rt_ret(e);
}

RGPU_API cudaError_t cudaGraphMemcpyNodeSetParamsFromSymbol(cudaGraphNode_t node, void *dst,
                                                            const void *symbol, size_t count,
                                                            size_t offset, enum cudaMemcpyKind kind) {
  cudaError_t e = want_type(node, cudaGraphNodeTypeMemcpy);
  if (e == cudaSuccess) e = node_params_symbol(&node->p, 0, symbol, dst, count, offset, kind);
  else rgpu_rt_count_call();
  return rgpu_rt_ret(e);
}

RGPU_API cudaError_t cudaGraphNodeSetParams(cudaGraphNode_t node,
                                            struct cudaGraphNodeParams *nodeParams) {
  rgpu_rt_count_call();
  if (!valid_node(node) || !nodeParams || nodeParams->type != node->p.type)
    return rgpu_rt_ret(cudaErrorInvalidValue);
  node_params p;
  memset(&p, 0, sizeof p);
  cudaError_t e = node_params_generic(&p, nodeParams);
  if (e != cudaSuccess) {
    node_params_free(&p);
    return rgpu_rt_ret(e);
  }
  node_params_free(&node->p);
  node->p = p;
  return cudaSuccess;
}

/* ---- public API: structure ----------------------------------------------- */

RGPU_API cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *numNodes) {
  rgpu_rt_count_call();
  if (!valid_graph(graph) || !numNodes) return rgpu_rt_ret(cudaErrorInvalidValue);
  if (nodes) {
    size_t k = *numNodes < graph->n ? *numNodes : graph->n;
    for (size_t i = 0; i < k; i++) nodes[i] = graph->nodes[i];
    for (size_t i = k; i < *numNodes; i++) nodes[i] = NULL;
    *numNodes = k;
  } else {
    *numNodes = graph->n;
  }
  return cudaSuccess;
}

RGPU_API cudaError_t cudaGraphGetRootNodes(cudaGraph_t graph, cudaGraphNode_t *pRootNodes,
                                           size_t *pNumRootNodes) {
  rgpu_rt_count_call();
  if (!valid_graph(graph) || !pNumRootNodes) return rgpu_rt_ret(cudaErrorInvalidValue);
  size_t k = 0;
  for (size_t i = 0; i < graph->n; i++) {
    if (graph->nodes[i]->ndeps) continue;
    if (pRootNodes && k < *pNumRootNodes) pRootNodes[k] = graph->nodes[i];
    k++;
  }
  if (pRootNodes) {
    for (size_t i = k; i < *pNumRootNodes; i++) pRootNodes[i] = NULL;
    if (k > *pNumRootNodes) k = *pNumRootNodes;
  }
  *pNumRootNodes = k;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaGraphGetEdges(cudaGraph_t graph, cudaGraphNode_t *from, cudaGraphNode_t *to,
                                       cudaGraphEdgeData *edgeData, size_t *numEdges) {
  rgpu_rt_count_call();
  if (!valid_graph(graph) || !numEdges || (!from != !to)) return rgpu_rt_ret(cudaErrorInvalidValue);
  size_t k = 0;
  for (size_t i = 0; i < graph->n; i++) {
    cudaGraphNode_t n = graph->nodes[i];
    for (size_t j = 0; j < n->ndeps; j++) {
      if (from && k < *numEdges) {
        from[k] = n->deps[j];
        to[k] = n;
        if (edgeData) memset(&edgeData[k], 0, sizeof edgeData[k]);
      }
      k++;
    }
  }
  if (from) {
    for (size_t i = k; i < *numEdges; i++) from[i] = to[i] = NULL;
    if (k > *numEdges) k = *numEdges;
  }
  *numEdges = k;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t *pDependencies,
                                                  cudaGraphEdgeData *edgeData,
                                                  size_t *pNumDependencies) {
  rgpu_rt_count_call();
  if (!valid_node(node) || !pNumDependencies) return rgpu_rt_ret(cudaErrorInvalidValue);
  if (!pDependencies) {
    *pNumDependencies = node->ndeps;
    return cudaSuccess;
  }
  size_t k = *pNumDependencies < node->ndeps ? *pNumDependencies : node->ndeps;
  for (size_t i = 0; i < k; i++) {
    pDependencies[i] = node->deps[i];
    if (edgeData) memset(&edgeData[i], 0, sizeof edgeData[i]);
  }
  for (size_t i = k; i < *pNumDependencies; i++) pDependencies[i] = NULL;
  *pNumDependencies = k;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaGraphNodeGetDependentNodes(cudaGraphNode_t node,
                                                    cudaGraphNode_t *pDependentNodes,
                                                    cudaGraphEdgeData *edgeData,
                                                    size_t *pNumDependentNodes) {
  rgpu_rt_count_call();
  if (!valid_node(node) || !pNumDependentNodes) return rgpu_rt_ret(cudaErrorInvalidValue);
  size_t k = 0;
  cudaGraph_t g = node->g;
  for (size_t i = 0; i < g->n; i++) {
    if (!has_dep(g->nodes[i], node)) continue;
    if (pDependentNodes && k < *pNumDependentNodes) {
      pDependentNodes[k] = g->nodes[i];
      if (edgeData) memset(&edgeData[k], 0, sizeof edgeData[k]);
    }
    k++;
  }
  if (pDependentNodes) {
    for (size_t i = k; i < *pNumDependentNodes; i++) pDependentNodes[i] = NULL;
    if (k > *pNumDependentNodes) k = *pNumDependentNodes;
  }
  *pNumDependentNodes = k;
  return cudaSuccess;
}

/* Add and remove take the same edge list and check it the same way, but
 * for the edge's presence: an added edge must be new (and not a self
 * loop), a removed one must exist.  Nothing changes unless every edge
 * passes. */
#define GRAPH_EDGE_ARGS                                                                     \
  cudaGraph_t graph, const cudaGraphNode_t *from, const cudaGraphNode_t *to,                \
      const cudaGraphEdgeData *edgeData, size_t numDependencies
static int edges_valid(cudaGraph_t graph, const cudaGraphNode_t *from, const cudaGraphNode_t *to,
                       size_t n, int adding) {
  if (!valid_graph(graph) || (n && (!from || !to))) return 0;
  for (size_t i = 0; i < n; i++) {
    if (!valid_node(from[i]) || !valid_node(to[i]) || to[i]->g != graph) return 0;
    if (adding ? from[i]->g != graph || from[i] == to[i] || has_dep(to[i], from[i])
               : !has_dep(to[i], from[i]))
      return 0;
  }
  return 1;
}

RGPU_API cudaError_t cudaGraphAddDependencies(GRAPH_EDGE_ARGS) {
  (void)edgeData;
  rgpu_rt_count_call();
  if (!edges_valid(graph, from, to, numDependencies, 1)) return rgpu_rt_ret(cudaErrorInvalidValue);
  for (size_t i = 0; i < numDependencies; i++) {
    cudaError_t e = add_dep(to[i], from[i]);
    if (e != cudaSuccess) return rgpu_rt_ret(e);
  }
  return cudaSuccess;
}

static void remove_dep(cudaGraphNode_t n, cudaGraphNode_t d) {
  for (size_t i = 0; i < n->ndeps; i++)
    if (n->deps[i] == d) {
      memmove(&n->deps[i], &n->deps[i + 1], (n->ndeps - i - 1) * sizeof *n->deps);
      n->ndeps--;
      return;
    }
}

RGPU_API cudaError_t cudaGraphRemoveDependencies(GRAPH_EDGE_ARGS) {
  (void)edgeData;
  rgpu_rt_count_call();
  if (!edges_valid(graph, from, to, numDependencies, 0)) return rgpu_rt_ret(cudaErrorInvalidValue);
  for (size_t i = 0; i < numDependencies; i++) remove_dep(to[i], from[i]);
  return cudaSuccess;
}

RGPU_API cudaError_t cudaGraphDestroyNode(cudaGraphNode_t node) {
  rgpu_rt_count_call();
  if (!valid_node(node)) return rgpu_rt_ret(cudaErrorInvalidValue);
  cudaGraph_t g = node->g;
  for (size_t i = 0; i < g->n; i++) remove_dep(g->nodes[i], node);
  for (size_t i = 0; i < g->n; i++)
    if (g->nodes[i] == node) {
      memmove(&g->nodes[i], &g->nodes[i + 1], (g->n - i - 1) * sizeof *g->nodes);
      g->n--;
      break;
    }
  node_free(node);
  return cudaSuccess;
}

/* ---- DOT output ----------------------------------------------------------- */

static const char *type_name(enum cudaGraphNodeType t) {
  switch (t) {
  case cudaGraphNodeTypeKernel: return "kernel";
  case cudaGraphNodeTypeMemcpy: return "memcpy";
  case cudaGraphNodeTypeMemset: return "memset";
  case cudaGraphNodeTypeHost: return "host";
  case cudaGraphNodeTypeGraph: return "graph";
  case cudaGraphNodeTypeEmpty: return "empty";
  case cudaGraphNodeTypeMemAlloc: return "mem_alloc";
  case cudaGraphNodeTypeMemFree: return "mem_free";
  case cudaGraphNodeTypeWaitEvent: return "event_wait";
  case cudaGraphNodeTypeEventRecord: return "event_record";
  case cudaGraphNodeTypeConditional: return "conditional";
  default: return "other";
  }
}

static void dot_graph(FILE *f, cudaGraph_t g, const char *prefix, int verbose) {
  index_nodes(g);
  for (size_t i = 0; i < g->n; i++) {
    cudaGraphNode_t n = g->nodes[i];
    if (n->p.type == cudaGraphNodeTypeGraph && n->p.child) {
      char sub[64];
      snprintf(sub, sizeof sub, "%sn%zu_", prefix, i);
      fprintf(f, "subgraph cluster_%s {\nlabel=\"child graph %zu\";\n", sub, i);
      dot_graph(f, n->p.child, sub, verbose);
      fprintf(f, "}\n");
      fprintf(f, "\"%sn%zu\" [shape=point];\n", prefix, i);
    } else if (n->p.type == cudaGraphNodeTypeConditional && n->p.bodies) {
      static const char *kinds[] = {"if", "while", "switch"};
      fprintf(f, "\"%sn%zu\" [label=\"%zu conditional %s\"];\n", prefix, i, i,
              n->p.cond_kind < 3 ? kinds[n->p.cond_kind] : "?");
      for (uint32_t b = 0; b < n->p.cond_size; b++) {
        char sub[80];
        snprintf(sub, sizeof sub, "%sn%zu_b%u_", prefix, i, b);
        fprintf(f, "subgraph cluster_%s {\nlabel=\"body %u of node %zu\";\n", sub, b, i);
        dot_graph(f, n->p.bodies[b], sub, verbose);
        fprintf(f, "}\n");
      }
    } else if (n->p.type == cudaGraphNodeTypeKernel && verbose) {
      fprintf(f, "\"%sn%zu\" [label=\"%zu kernel\\ngrid (%u,%u,%u) block (%u,%u,%u)\\nshared %u params %zu B\"];\n",
              prefix, i, i, n->p.op.launch.grid.x, n->p.op.launch.grid.y, n->p.op.launch.grid.z, n->p.op.launch.block.x, n->p.op.launch.block.y,
              n->p.op.launch.block.z, n->p.op.launch.shmem, n->p.op.launch.plen);
    } else if (n->p.type == cudaGraphNodeTypeMemcpy && verbose) {
      fprintf(f, "\"%sn%zu\" [label=\"%zu memcpy kind %d\\n%zux%zux%zu\"];\n", prefix, i, i,
              (int)n->p.op.copy.cp.kind, n->p.op.copy.cp.extent.width, n->p.op.copy.cp.extent.height, n->p.op.copy.cp.extent.depth);
    } else {
      fprintf(f, "\"%sn%zu\" [label=\"%zu %s\"];\n", prefix, i, i, type_name(n->p.type));
    }
    for (size_t k = 0; k < n->ndeps; k++)
      fprintf(f, "\"%sn%zu\" -> \"%sn%zu\";\n", prefix, n->deps[k]->pos, prefix, i);
  }
}

RGPU_API cudaError_t cudaGraphDebugDotPrint(cudaGraph_t graph, const char *path, unsigned int flags) {
  rgpu_rt_count_call();
  if (!valid_graph(graph) || !path) return rgpu_rt_ret(cudaErrorInvalidValue);
  FILE *f = fopen(path, "w");
  if (!f) return rgpu_rt_ret(cudaErrorOperatingSystem);
  fprintf(f, "digraph rgpu_graph {\n");
  dot_graph(f, graph, "", (flags & cudaGraphDebugDotFlagsVerbose) != 0);
  fprintf(f, "}\n");
  int bad = ferror(f);
  if (fclose(f) || bad) return rgpu_rt_ret(cudaErrorOperatingSystem);
  return cudaSuccess;
}


/* ---- library nodes made by an API call ------------------------------------- */

cudaError_t rgpu_rt_graph_add_request_node(cudaGraphNode_t *out, cudaGraph_t g,
                                           const cudaGraphNode_t *deps, size_t ndeps,
                                           uint16_t opcode, size_t stream_at, const void *req,
                                           size_t len) {
  if (!out || !req || stream_at + 8 > len) return cudaErrorInvalidValue;
  node_params p;
  memset(&p, 0, sizeof p);
  p.type = cudaGraphNodeTypeHost;
  p.op.kind = RGPU_RT_OP_LIB_CALL;
  p.op.device = rgpu_rt_current_device();
  p.op.lib.opcode = opcode;
  p.op.lib.stream_at = (uint32_t)stream_at;
  p.op.lib.args = malloc(len);
  if (!p.op.lib.args) return cudaErrorMemoryAllocation;
  memcpy(p.op.lib.args, req, len);
  p.op.lib.args_len = len;
  cudaError_t e = graph_node_add(out, g, deps, ndeps, &p);
  if (e != cudaSuccess) node_params_free(&p);
  return e;
}

/* The scratch lives after the request in the node's own copy of it, so
 * it goes with the node (and with a new request) and needs no list of
 * its own; a clone copies only the request and makes its scratch anew. */
cudaError_t rgpu_rt_graph_request_node_get(cudaGraphNode_t node, uint16_t opcode,
                                           const uint8_t **req, size_t *len, void **scratch,
                                           size_t scratch_len) {
  if (!valid_node(node) || !node_params_is_lib(&node->p) || node->p.op.lib.opcode != opcode)
    return cudaErrorInvalidValue;
  rgpu_rt_op *op = &node->p.op;
  if (scratch) {
    uint8_t *grown = realloc(op->lib.args, op->lib.args_len + scratch_len + 1);
    if (!grown) return cudaErrorMemoryAllocation;
    op->lib.args = grown;
    *scratch = grown + op->lib.args_len;
  }
  *req = op->lib.args;
  *len = op->lib.args_len;
  return cudaSuccess;
}

cudaError_t node_params_request_like(node_params *out, const node_params *like, uint16_t opcode,
                                     const void *req, size_t len) {
  if (!node_params_is_lib(like) || like->op.lib.opcode != opcode || !req ||
      like->op.lib.stream_at + 8 > len)
    return cudaErrorInvalidValue;
  memset(out, 0, sizeof *out);
  out->type = like->type;
  out->op = like->op;
  out->op.lib.args = malloc(len);
  if (!out->op.lib.args) return cudaErrorMemoryAllocation;
  memcpy(out->op.lib.args, req, len);
  out->op.lib.args_len = len;
  return cudaSuccess;
}

cudaError_t rgpu_rt_graph_request_node_set(cudaGraphNode_t node, uint16_t opcode, const void *req,
                                           size_t len) {
  if (!valid_node(node)) return cudaErrorInvalidValue;
  node_params np;
  cudaError_t e = node_params_request_like(&np, &node->p, opcode, req, len);
  if (e != cudaSuccess) return e;
  node_params_free(&node->p);
  node->p = np;
  return cudaSuccess;
}
