/* CUDA Graphs and stream capture.
 *
 * The client keeps every graph itself: nodes, dependencies and parameters
 * live here, so building, inspecting, cloning and capturing a graph costs
 * no message at all.  Instantiation flattens the graph (child graphs are
 * inlined between two empty nodes) and ships it to the server once, as one
 * GRAPH_EXEC_CREATE per "level"; cudaGraphLaunch is then one GRAPH_LAUNCH
 * per level, and a graph without host nodes has exactly one level.
 *
 * Host nodes (and host-to-host copies) must run in this process.  They
 * split the graph into levels: the device nodes of level L run as one
 * server-side graph, after the host nodes of level L, which run after the
 * device work of every earlier level has finished.  They are queued on the
 * stream as host callbacks (no round trip), unless a host-to-device node of
 * that or a later level takes host bytes at launch time, which a host node
 * might produce: then the launch syncs the stream and runs them itself (a
 * round trip per such level).
 *
 * Host memory inside node parameters is translated: a host-to-device copy
 * node sends the current bytes of its host source with every launch (in
 * the launch's tail), and a device-to-host node is read back after the
 * launch with an ordinary cudaMemcpyAsync on the stream (background into
 * pinned memory: no round trip): from its source when nothing later in the
 * graph can overwrite it, else from a device staging buffer the node
 * copies into.  So a launch is one message plus one per device-to-host
 * node, none of them waited for.
 *
 * Stream capture happens here too: the launch, copy, memset and event
 * paths call the rgpu_rt_graph_take_* hooks, which turn work issued to a
 * capturing stream into nodes instead of requests. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_cudart.h"
#include "rgpu_cudart_graph.h"
#include "rgpu_cudart_op.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"

#define GRAPH_MAGIC 0x47525048u /* "GRPH" */
#define NODE_MAGIC 0x474e4f44u  /* "GNOD" */
#define EXEC_MAGIC 0x47455843u  /* "GEXC" */

/* Wire node types and the words per node (see server/rgpu_graph.h). */
enum {
  W_KERNEL = 1,
  W_MEMCPY = 2,
  W_MEMSET = 3,
  W_EMPTY = 4,
  W_EVENT_RECORD = 5,
  W_EVENT_WAIT = 6
};
enum { W_H2D = 1, W_D2H = 2, W_D2D = 3 };
#define NWORDS 12
/* Host-to-device bytes a launch carries itself; larger copies go ahead of
 * it through a device staging buffer (so no size limit applies). */
#define H2D_INLINE_MAX (1u << 20)

/* ---- node parameters ---------------------------------------------------- */

typedef struct {
  enum cudaGraphNodeType type;
  /* Kernel, memcpy, memset, host and event nodes: the operation itself
   * (rgpu_cudart_op.h), with the kernel's parameters owned by the node.
   * Memcpy kinds are resolved (never cudaMemcpyDefault). */
  rgpu_rt_op op;
  /* kernel nodes, for cudaGraphKernelNodeGetParams */
  const void *func; /* the host stub */
  uint32_t nparams;
  uint32_t *offsets;
  void **argv; /* pointers into op.launch.params */
  /* child graph: an owned clone */
  cudaGraph_t child;
} node_params;

struct CUgraphNode_st {
  uint32_t magic;
  uint64_t id;
  uint64_t origin_id; /* the node this one was cloned from, 0 if none */
  struct CUgraph_st *g;
  struct CUgraphNode_st **deps;
  size_t ndeps, capd;
  size_t pos; /* index in g->nodes, valid after index_nodes(g) */
  node_params p;
};

struct CUgraph_st {
  uint32_t magic;
  struct CUgraphNode_st **nodes;
  size_t n, cap;
};

/* One node of an instantiated graph, after flattening. */
typedef struct {
  node_params p;   /* deep copy */
  uint64_t orig_id; /* node id in the instantiated graph (or its child clones) */
  uint64_t alt_id;  /* the paired node of the last cudaGraphExecUpdate source */
  uint32_t *deps;
  size_t ndeps;
  int level;
  uint32_t sidx; /* index in its level's server graph */
  uint32_t child_end; /* for a child graph's entry node: index of its exit node */
  uint64_t stage;     /* device-to-host copy: its device staging buffer */
  int disabled;       /* cudaGraphNodeSetEnabled(0): an empty node on the server */
  int direct;         /* device-to-host copy read straight from its source after the
                         launch (nothing in its level can still write it) */
} flat_node;

typedef struct {
  uint64_t server_id; /* 0: no device nodes in this level */
  uint32_t *host;     /* flat indices of host nodes, in order */
  size_t nhost;
  uint32_t *dev;      /* flat indices of device nodes, in order */
  size_t ndev;
  size_t h2d_bytes;
  uint32_t *d2h; /* flat indices of device-to-host copies, in order */
  uint32_t *h2d_big; /* host-to-device copies sent ahead through staging */
  size_t nh2d_big;
  size_t nd2h;
} level_t;

struct CUgraphExec_st {
  uint32_t magic;
  int device;
  unsigned long long flags;
  flat_node *f;
  size_t nf;
  level_t *lv;
  size_t nlevels;
};

static atomic_ullong g_node_ids = 1;

/* ---- small helpers ------------------------------------------------------ */

static int grow(void **v, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t nc = *cap ? *cap * 2 : 8;
  while (nc < need) nc *= 2;
  void *nv = realloc(*v, nc * elem);
  if (!nv) return -1;
  *v = nv;
  *cap = nc;
  return 0;
}

static int valid_graph(cudaGraph_t g) { return g && g->magic == GRAPH_MAGIC; }
static int valid_node(cudaGraphNode_t n) { return n && n->magic == NODE_MAGIC; }
static int valid_exec(cudaGraphExec_t e) { return e && e->magic == EXEC_MAGIC; }

static int is_device_ptr(const void *p, uint64_t len, rgpu_range *out) {
  return rgpu_range_find(rgpu_rt_device_ranges(), (uint64_t)(uintptr_t)p, len ? len : 1, out) == 0;
}

/* The op is a union: only a kernel node owns memory through it (its packed
 * parameters). */
static void params_free(node_params *p) {
  if (p->type == cudaGraphNodeTypeKernel) {
    free(p->op.launch.params);
    p->op.launch.params = NULL;
    p->op.launch.plen = 0;
  }
  free(p->offsets);
  free(p->argv);
  p->offsets = NULL;
  p->argv = NULL;
  if (p->child) cudaGraphDestroy(p->child);
  p->child = NULL;
}

static cudaError_t graph_clone(cudaGraph_t src, cudaGraph_t *out, int keep_origin);

/* Deep copy (the child graph is cloned). */
static cudaError_t params_copy(node_params *dst, const node_params *src) {
  *dst = *src;
  dst->offsets = NULL;
  dst->argv = NULL;
  dst->child = NULL;
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
        params_free(dst);
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
      params_free(dst);
      return e;
    }
  }
  return cudaSuccess;
}

/* ---- kernel parameters: packed through the launch path ------------------ */

static cudaError_t kernel_params_set(node_params *p, const rgpu_rt_op *launch);

static cudaError_t kernel_params_from(node_params *p, const struct cudaKernelNodeParams *kp) {
  if (!kp || !kp->func) return cudaErrorInvalidValue;
  if (kp->extra && !kp->kernelParams) {
    static int logged;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      RGPU_WARN("kernel graph nodes with 'extra' (CU_LAUNCH_PARAM_BUFFER_POINTER) are not supported");
    return cudaErrorNotSupported;
  }
  rgpu_rt_func *f = rgpu_rt_func_by_stub(kp->func);
  if (!f) return cudaErrorInvalidDeviceFunction;
  /* The launch path's own checks and packing, without sending: a kernel
   * node is exactly the operation a launch on the legacy stream would be.
   * rgpu_rt_enter counts the call and connects, as the launch did. */
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  uint8_t stackbuf[4096];
  uint8_t *heap;
  rgpu_rt_op op;
  e = rgpu_rt_launch_prepare(c, f, kp->gridDim, kp->blockDim, kp->kernelParams, kp->sharedMemBytes,
                             NULL, 0, stackbuf, sizeof stackbuf, &heap, &op);
  if (e != cudaSuccess) {
    free(heap);
    return rgpu_rt_ret(e);
  }
  node_params np;
  e = kernel_params_set(&np, &op);
  free(heap);
  if (e != cudaSuccess) {
    params_free(&np);
    return e;
  }
  np.func = kp->func;
  params_free(p);
  *p = np;
  return cudaSuccess;
}

/* A kernel node from a launch operation (a kernel node being added, or a
 * launch captured): the node owns a copy of the packed parameters and
 * records the layout's offsets for cudaGraphKernelNodeGetParams. */
static cudaError_t kernel_params_set(node_params *p, const rgpu_rt_op *launch) {
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

static int copy_extent(const struct cudaPitchedPtr *pp, const struct cudaPos *pos,
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

static cudaError_t memcpy_params_from(node_params *p, const struct cudaMemcpy3DParms *cp) {
  if (!cp) return cudaErrorInvalidValue;
  if (cp->srcArray || cp->dstArray) {
    static int logged;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      RGPU_WARN("memcpy graph nodes with CUDA arrays are not supported");
    return cudaErrorNotSupported;
  }
  if (!cp->extent.width || !cp->extent.height || !cp->extent.depth) return cudaErrorInvalidValue;
  if (!cp->srcPtr.ptr || !cp->dstPtr.ptr) return cudaErrorInvalidValue;
  if ((int)cp->kind < 0 || (int)cp->kind > (int)cudaMemcpyDefault)
    return cudaErrorInvalidMemcpyDirection;
  uint64_t sb, ss, db, ds;
  if (copy_extent(&cp->srcPtr, &cp->srcPos, &cp->extent, &sb, &ss) ||
      copy_extent(&cp->dstPtr, &cp->dstPos, &cp->extent, &db, &ds))
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
  params_free(p);
  memset(p, 0, sizeof *p);
  p->type = cudaGraphNodeTypeMemcpy;
  p->op.kind = RGPU_RT_OP_COPY;
  p->op.copy.cp = *cp;
  p->op.copy.cp.kind = k;
  p->op.device = rgpu_rt_current_device();
  return cudaSuccess;
}

static cudaError_t symbol_params(node_params *p, int to_symbol, const void *symbol, void *host,
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
  struct cudaMemcpy3DParms cp = to_symbol ? rgpu_rt_copy_1d(dev, host, count, kind)
                                          : rgpu_rt_copy_1d(host, dev, count, kind);
  return memcpy_params_from(p, &cp);
}

static cudaError_t memset_params_from(node_params *p, const struct cudaMemsetParams *ms) {
  if (!ms || !ms->dst) return cudaErrorInvalidValue;
  if (ms->elementSize != 1 && ms->elementSize != 2 && ms->elementSize != 4)
    return cudaErrorInvalidValue;
  if (!ms->width || !ms->height) return cudaErrorInvalidValue;
  size_t row = ms->width * ms->elementSize;
  if (ms->height > 1 && ms->pitch < row) return cudaErrorInvalidValue;
  uint64_t span = (uint64_t)(ms->height - 1) * (ms->height > 1 ? ms->pitch : 0) + row;
  if (!is_device_ptr(ms->dst, span, NULL)) return cudaErrorInvalidValue;
  params_free(p);
  memset(p, 0, sizeof *p);
  p->type = cudaGraphNodeTypeMemset;
  p->op.kind = RGPU_RT_OP_MEMSET;
  p->op.fill = *ms;
  p->op.device = rgpu_rt_current_device();
  return cudaSuccess;
}

static int is_host_side(const node_params *p) {
  return p->type == cudaGraphNodeTypeHost ||
         (p->type == cudaGraphNodeTypeMemcpy && p->op.copy.cp.kind == cudaMemcpyHostToHost);
}

/* ---- graphs and nodes ---------------------------------------------------- */

static cudaError_t graph_new(cudaGraph_t *out) {
  struct CUgraph_st *g = calloc(1, sizeof *g);
  if (!g) return cudaErrorMemoryAllocation;
  g->magic = GRAPH_MAGIC;
  *out = g;
  return cudaSuccess;
}

static void node_free(cudaGraphNode_t n) {
  params_free(&n->p);
  free(n->deps);
  n->magic = 0;
  free(n);
}

static void graph_free(cudaGraph_t g) {
  for (size_t i = 0; i < g->n; i++) node_free(g->nodes[i]);
  free(g->nodes);
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
  if (grow((void **)&n->deps, &n->capd, n->ndeps + 1, sizeof *n->deps)) return cudaErrorMemoryAllocation;
  n->deps[n->ndeps++] = d;
  return cudaSuccess;
}

/* Adds a node with params p (taken over on success). */
static cudaError_t node_add(cudaGraphNode_t *out, cudaGraph_t g, const cudaGraphNode_t *deps,
                            size_t ndeps, node_params *p) {
  if (!valid_graph(g) || (ndeps && !deps)) return cudaErrorInvalidValue;
  for (size_t i = 0; i < ndeps; i++) {
    if (!valid_node(deps[i]) || deps[i]->g != g) return cudaErrorInvalidValue;
    for (size_t j = 0; j < i; j++)
      if (deps[j] == deps[i]) return cudaErrorInvalidValue; /* CUDA refuses duplicates */
  }
  struct CUgraphNode_st *n = calloc(1, sizeof *n);
  if (!n || grow((void **)&g->nodes, &g->cap, g->n + 1, sizeof *g->nodes)) {
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

static cudaError_t graph_clone(cudaGraph_t src, cudaGraph_t *out, int keep_origin) {
  (void)keep_origin;
  cudaGraph_t g;
  cudaError_t e = graph_new(&g);
  if (e != cudaSuccess) return e;
  for (size_t i = 0; i < src->n && e == cudaSuccess; i++) {
    cudaGraphNode_t s = src->nodes[i];
    node_params p;
    e = params_copy(&p, &s->p);
    if (e != cudaSuccess) break;
    cudaGraphNode_t n;
    e = node_add(&n, g, NULL, 0, &p);
    if (e != cudaSuccess) {
      params_free(&p);
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
static int topo_order(cudaGraph_t g, size_t *order) {
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
  graph_free(graph);
  return cudaSuccess;
}

RGPU_API cudaError_t cudaGraphClone(cudaGraph_t *pGraphClone, cudaGraph_t originalGraph) {
  rgpu_rt_count_call();
  if (!pGraphClone || !valid_graph(originalGraph)) return rgpu_rt_ret(cudaErrorInvalidValue);
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

#define ADD_NODE_BEGIN()                               \
  rgpu_rt_count_call();                                \
  if (!pGraphNode) return rgpu_rt_ret(cudaErrorInvalidValue); \
  node_params p;                                       \
  memset(&p, 0, sizeof p);                             \
  cudaError_t e

#define ADD_NODE_END()                                            \
  if (e == cudaSuccess) e = node_add(pGraphNode, graph, pDependencies, numDependencies, &p); \
  if (e != cudaSuccess) params_free(&p);                          \
  return rgpu_rt_ret(e)

RGPU_API cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                            const cudaGraphNode_t *pDependencies,
                                            size_t numDependencies,
                                            const struct cudaKernelNodeParams *pNodeParams) {
  ADD_NODE_BEGIN();
  e = valid_graph(graph) ? kernel_params_from(&p, pNodeParams) : cudaErrorInvalidValue;
  ADD_NODE_END();
}

RGPU_API cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                            const cudaGraphNode_t *pDependencies,
                                            size_t numDependencies,
                                            const struct cudaMemcpy3DParms *pCopyParams) {
  ADD_NODE_BEGIN();
  e = memcpy_params_from(&p, pCopyParams);
  ADD_NODE_END();
}

RGPU_API cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                              const cudaGraphNode_t *pDependencies,
                                              size_t numDependencies, void *dst, const void *src,
                                              size_t count, enum cudaMemcpyKind kind) {
  ADD_NODE_BEGIN();
  struct cudaMemcpy3DParms cp = rgpu_rt_copy_1d(dst, src, count, kind);
  e = memcpy_params_from(&p, &cp);
  ADD_NODE_END();
}

RGPU_API cudaError_t cudaGraphAddMemcpyNodeToSymbol(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                                    const cudaGraphNode_t *pDependencies,
                                                    size_t numDependencies, const void *symbol,
                                                    const void *src, size_t count, size_t offset,
                                                    enum cudaMemcpyKind kind) {
  ADD_NODE_BEGIN();
  e = symbol_params(&p, 1, symbol, (void *)src, count, offset, kind);
  ADD_NODE_END();
}

RGPU_API cudaError_t cudaGraphAddMemcpyNodeFromSymbol(cudaGraphNode_t *pGraphNode,
                                                      cudaGraph_t graph,
                                                      const cudaGraphNode_t *pDependencies,
                                                      size_t numDependencies, void *dst,
                                                      const void *symbol, size_t count,
                                                      size_t offset, enum cudaMemcpyKind kind) {
  ADD_NODE_BEGIN();
  e = symbol_params(&p, 0, symbol, dst, count, offset, kind);
  ADD_NODE_END();
}

RGPU_API cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                            const cudaGraphNode_t *pDependencies,
                                            size_t numDependencies,
                                            const struct cudaMemsetParams *pMemsetParams) {
  ADD_NODE_BEGIN();
  e = memset_params_from(&p, pMemsetParams);
  ADD_NODE_END();
}

RGPU_API cudaError_t cudaGraphAddHostNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                          const cudaGraphNode_t *pDependencies,
                                          size_t numDependencies,
                                          const struct cudaHostNodeParams *pNodeParams) {
  ADD_NODE_BEGIN();
  e = pNodeParams && pNodeParams->fn ? cudaSuccess : cudaErrorInvalidValue;
  p.type = cudaGraphNodeTypeHost;
  if (pNodeParams) p.op.host.params = *pNodeParams;
  ADD_NODE_END();
}

RGPU_API cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                                const cudaGraphNode_t *pDependencies,
                                                size_t numDependencies, cudaGraph_t childGraph) {
  ADD_NODE_BEGIN();
  p.type = cudaGraphNodeTypeGraph;
  e = valid_graph(childGraph) && childGraph != graph ? graph_clone(childGraph, &p.child, 1)
                                                     : cudaErrorInvalidValue;
  ADD_NODE_END();
}

RGPU_API cudaError_t cudaGraphAddEmptyNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                           const cudaGraphNode_t *pDependencies,
                                           size_t numDependencies) {
  ADD_NODE_BEGIN();
  p.type = cudaGraphNodeTypeEmpty;
  e = cudaSuccess;
  ADD_NODE_END();
}

static int valid_event(cudaEvent_t ev) { return ev && ev->magic == RGPU_EVENT_MAGIC; }

RGPU_API cudaError_t cudaGraphAddEventRecordNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                                 const cudaGraphNode_t *pDependencies,
                                                 size_t numDependencies, cudaEvent_t event) {
  ADD_NODE_BEGIN();
  p.type = cudaGraphNodeTypeEventRecord;
  p.op.event.event = event;
  e = valid_event(event) ? cudaSuccess : cudaErrorInvalidValue;
  ADD_NODE_END();
}

RGPU_API cudaError_t cudaGraphAddEventWaitNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                               const cudaGraphNode_t *pDependencies,
                                               size_t numDependencies, cudaEvent_t event) {
  ADD_NODE_BEGIN();
  p.type = cudaGraphNodeTypeWaitEvent;
  p.op.event.event = event;
  e = valid_event(event) ? cudaSuccess : cudaErrorInvalidValue;
  ADD_NODE_END();
}

/* The generic (CUDA 12.2+) form. */
static cudaError_t generic_params(node_params *p, const struct cudaGraphNodeParams *np) {
  if (!np) return cudaErrorInvalidValue;
  switch (np->type) {
  case cudaGraphNodeTypeKernel: {
    struct cudaKernelNodeParams kp = {np->kernel.func, np->kernel.gridDim, np->kernel.blockDim,
                                      np->kernel.sharedMemBytes, np->kernel.kernelParams,
                                      np->kernel.extra};
    return kernel_params_from(p, &kp);
  }
  case cudaGraphNodeTypeMemcpy: return memcpy_params_from(p, &np->memcpy.copyParams);
  case cudaGraphNodeTypeMemset: {
    struct cudaMemsetParams ms = {np->memset.dst, np->memset.pitch, np->memset.value,
                                  np->memset.elementSize, np->memset.width, np->memset.height};
    return memset_params_from(p, &ms);
  }
  case cudaGraphNodeTypeHost:
    if (!np->host.fn) return cudaErrorInvalidValue;
    p->type = cudaGraphNodeTypeHost;
    p->op.host.params.fn = np->host.fn;
    p->op.host.params.userData = np->host.userData;
    return cudaSuccess;
  case cudaGraphNodeTypeGraph:
    if (!valid_graph(np->graph.graph)) return cudaErrorInvalidValue;
    p->type = cudaGraphNodeTypeGraph;
    return graph_clone(np->graph.graph, &p->child, 1);
  case cudaGraphNodeTypeEmpty: p->type = cudaGraphNodeTypeEmpty; return cudaSuccess;
  case cudaGraphNodeTypeEventRecord:
  case cudaGraphNodeTypeWaitEvent: {
    cudaEvent_t ev = np->type == cudaGraphNodeTypeEventRecord ? np->eventRecord.event : np->eventWait.event;
    if (!valid_event(ev)) return cudaErrorInvalidValue;
    p->type = np->type;
    p->op.event.event = ev;
    return cudaSuccess;
  }
  default: return cudaErrorNotSupported;
  }
}

RGPU_API cudaError_t cudaGraphAddNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                      const cudaGraphNode_t *pDependencies,
                                      const cudaGraphEdgeData *dependencyData,
                                      size_t numDependencies, struct cudaGraphNodeParams *nodeParams) {
  (void)dependencyData; /* only default edges exist without programmatic launches */
  ADD_NODE_BEGIN();
  e = generic_params(&p, nodeParams);
  ADD_NODE_END();
}

/* ---- public API: node inspection and parameters ------------------------- */

RGPU_API cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, enum cudaGraphNodeType *pType) {
  rgpu_rt_count_call();
  if (!valid_node(node) || !pType) return rgpu_rt_ret(cudaErrorInvalidValue);
  *pType = node->p.type;
  return cudaSuccess;
}

static cudaError_t want_type(cudaGraphNode_t node, enum cudaGraphNodeType t) {
  if (!valid_node(node)) return cudaErrorInvalidValue;
  return node->p.type == t ? cudaSuccess : cudaErrorInvalidValue;
}

RGPU_API cudaError_t cudaGraphKernelNodeGetParams(cudaGraphNode_t node,
                                                  struct cudaKernelNodeParams *pNodeParams) {
  rgpu_rt_count_call();
  cudaError_t e = want_type(node, cudaGraphNodeTypeKernel);
  if (e == cudaSuccess && !pNodeParams) e = cudaErrorInvalidValue;
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  pNodeParams->func = (void *)node->p.func;
  pNodeParams->gridDim = node->p.op.launch.grid;
  pNodeParams->blockDim = node->p.op.launch.block;
  pNodeParams->sharedMemBytes = node->p.op.launch.shmem;
  pNodeParams->kernelParams = node->p.argv;
  pNodeParams->extra = NULL;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaGraphKernelNodeSetParams(cudaGraphNode_t node,
                                                  const struct cudaKernelNodeParams *pNodeParams) {
  rgpu_rt_count_call();
  cudaError_t e = want_type(node, cudaGraphNodeTypeKernel);
  if (e == cudaSuccess) e = kernel_params_from(&node->p, pNodeParams);
  return rgpu_rt_ret(e);
}

RGPU_API cudaError_t cudaGraphMemcpyNodeGetParams(cudaGraphNode_t node,
                                                  struct cudaMemcpy3DParms *pNodeParams) {
  rgpu_rt_count_call();
  cudaError_t e = want_type(node, cudaGraphNodeTypeMemcpy);
  if (e == cudaSuccess && !pNodeParams) e = cudaErrorInvalidValue;
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  *pNodeParams = node->p.op.copy.cp;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaGraphMemcpyNodeSetParams(cudaGraphNode_t node,
                                                  const struct cudaMemcpy3DParms *pNodeParams) {
  rgpu_rt_count_call();
  cudaError_t e = want_type(node, cudaGraphNodeTypeMemcpy);
  if (e == cudaSuccess) e = memcpy_params_from(&node->p, pNodeParams);
  return rgpu_rt_ret(e);
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
  if (e == cudaSuccess) e = symbol_params(&node->p, 1, symbol, (void *)src, count, offset, kind);
  else rgpu_rt_count_call();
  return rgpu_rt_ret(e);
}

RGPU_API cudaError_t cudaGraphMemcpyNodeSetParamsFromSymbol(cudaGraphNode_t node, void *dst,
                                                            const void *symbol, size_t count,
                                                            size_t offset, enum cudaMemcpyKind kind) {
  cudaError_t e = want_type(node, cudaGraphNodeTypeMemcpy);
  if (e == cudaSuccess) e = symbol_params(&node->p, 0, symbol, dst, count, offset, kind);
  else rgpu_rt_count_call();
  return rgpu_rt_ret(e);
}

RGPU_API cudaError_t cudaGraphMemsetNodeGetParams(cudaGraphNode_t node,
                                                  struct cudaMemsetParams *pNodeParams) {
  rgpu_rt_count_call();
  cudaError_t e = want_type(node, cudaGraphNodeTypeMemset);
  if (e == cudaSuccess && !pNodeParams) e = cudaErrorInvalidValue;
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  *pNodeParams = node->p.op.fill;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaGraphMemsetNodeSetParams(cudaGraphNode_t node,
                                                  const struct cudaMemsetParams *pNodeParams) {
  rgpu_rt_count_call();
  cudaError_t e = want_type(node, cudaGraphNodeTypeMemset);
  if (e == cudaSuccess) e = memset_params_from(&node->p, pNodeParams);
  return rgpu_rt_ret(e);
}

RGPU_API cudaError_t cudaGraphHostNodeGetParams(cudaGraphNode_t node,
                                                struct cudaHostNodeParams *pNodeParams) {
  rgpu_rt_count_call();
  cudaError_t e = want_type(node, cudaGraphNodeTypeHost);
  if (e == cudaSuccess && !pNodeParams) e = cudaErrorInvalidValue;
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  *pNodeParams = node->p.op.host.params;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaGraphHostNodeSetParams(cudaGraphNode_t node,
                                                const struct cudaHostNodeParams *pNodeParams) {
  rgpu_rt_count_call();
  cudaError_t e = want_type(node, cudaGraphNodeTypeHost);
  if (e == cudaSuccess && (!pNodeParams || !pNodeParams->fn)) e = cudaErrorInvalidValue;
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  node->p.op.host.params = *pNodeParams;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaGraphChildGraphNodeGetGraph(cudaGraphNode_t node, cudaGraph_t *pGraph) {
  rgpu_rt_count_call();
  cudaError_t e = want_type(node, cudaGraphNodeTypeGraph);
  if (e == cudaSuccess && !pGraph) e = cudaErrorInvalidValue;
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  *pGraph = node->p.child;
  return cudaSuccess;
}

static cudaError_t event_node_get(cudaGraphNode_t node, enum cudaGraphNodeType t, cudaEvent_t *out) {
  rgpu_rt_count_call();
  cudaError_t e = want_type(node, t);
  if (e == cudaSuccess && !out) e = cudaErrorInvalidValue;
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  *out = node->p.op.event.event;
  return cudaSuccess;
}

static cudaError_t event_node_set(cudaGraphNode_t node, enum cudaGraphNodeType t, cudaEvent_t ev) {
  rgpu_rt_count_call();
  cudaError_t e = want_type(node, t);
  if (e == cudaSuccess && !valid_event(ev)) e = cudaErrorInvalidValue;
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  node->p.op.event.event = ev;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaGraphEventRecordNodeGetEvent(cudaGraphNode_t node, cudaEvent_t *event_out) {
  return event_node_get(node, cudaGraphNodeTypeEventRecord, event_out);
}
RGPU_API cudaError_t cudaGraphEventRecordNodeSetEvent(cudaGraphNode_t node, cudaEvent_t event) {
  return event_node_set(node, cudaGraphNodeTypeEventRecord, event);
}
RGPU_API cudaError_t cudaGraphEventWaitNodeGetEvent(cudaGraphNode_t node, cudaEvent_t *event_out) {
  return event_node_get(node, cudaGraphNodeTypeWaitEvent, event_out);
}
RGPU_API cudaError_t cudaGraphEventWaitNodeSetEvent(cudaGraphNode_t node, cudaEvent_t event) {
  return event_node_set(node, cudaGraphNodeTypeWaitEvent, event);
}

RGPU_API cudaError_t cudaGraphNodeSetParams(cudaGraphNode_t node,
                                            struct cudaGraphNodeParams *nodeParams) {
  rgpu_rt_count_call();
  if (!valid_node(node) || !nodeParams || nodeParams->type != node->p.type)
    return rgpu_rt_ret(cudaErrorInvalidValue);
  node_params p;
  memset(&p, 0, sizeof p);
  cudaError_t e = generic_params(&p, nodeParams);
  if (e != cudaSuccess) {
    params_free(&p);
    return rgpu_rt_ret(e);
  }
  params_free(&node->p);
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

RGPU_API cudaError_t cudaGraphAddDependencies(cudaGraph_t graph, const cudaGraphNode_t *from,
                                              const cudaGraphNode_t *to,
                                              const cudaGraphEdgeData *edgeData,
                                              size_t numDependencies) {
  (void)edgeData;
  rgpu_rt_count_call();
  if (!valid_graph(graph) || (numDependencies && (!from || !to)))
    return rgpu_rt_ret(cudaErrorInvalidValue);
  for (size_t i = 0; i < numDependencies; i++)
    if (!valid_node(from[i]) || !valid_node(to[i]) || from[i]->g != graph || to[i]->g != graph ||
        from[i] == to[i] || has_dep(to[i], from[i]))
      return rgpu_rt_ret(cudaErrorInvalidValue);
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

RGPU_API cudaError_t cudaGraphRemoveDependencies(cudaGraph_t graph, const cudaGraphNode_t *from,
                                                 const cudaGraphNode_t *to,
                                                 const cudaGraphEdgeData *edgeData,
                                                 size_t numDependencies) {
  (void)edgeData;
  rgpu_rt_count_call();
  if (!valid_graph(graph) || (numDependencies && (!from || !to)))
    return rgpu_rt_ret(cudaErrorInvalidValue);
  for (size_t i = 0; i < numDependencies; i++)
    if (!valid_node(from[i]) || !valid_node(to[i]) || to[i]->g != graph || !has_dep(to[i], from[i]))
      return rgpu_rt_ret(cudaErrorInvalidValue);
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
  case cudaGraphNodeTypeWaitEvent: return "event_wait";
  case cudaGraphNodeTypeEventRecord: return "event_record";
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

/* ---- flattening ----------------------------------------------------------- */

typedef struct {
  flat_node *v;
  size_t n, cap;
} flat_list;

static void flat_free(flat_node *v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    params_free(&v[i].p);
    free(v[i].deps);
  }
  free(v);
}

static cudaError_t flat_push(flat_list *fl, const node_params *p, uint64_t orig_id,
                             const uint32_t *deps, size_t ndeps, uint32_t *idx) {
  if (grow((void **)&fl->v, &fl->cap, fl->n + 1, sizeof *fl->v)) return cudaErrorMemoryAllocation;
  flat_node *f = &fl->v[fl->n];
  memset(f, 0, sizeof *f);
  if (p->type != cudaGraphNodeTypeGraph) {
    cudaError_t e = params_copy(&f->p, p);
    if (e != cudaSuccess) return e;
  } else {
    f->p.type = cudaGraphNodeTypeGraph; /* entry of an inlined child: empty on the wire */
  }
  if (ndeps) {
    f->deps = malloc(ndeps * sizeof *f->deps);
    if (!f->deps) {
      params_free(&f->p);
      return cudaErrorMemoryAllocation;
    }
    memcpy(f->deps, deps, ndeps * sizeof *deps);
  }
  f->ndeps = ndeps;
  f->orig_id = orig_id;
  *idx = (uint32_t)fl->n++;
  return cudaSuccess;
}

/* Appends g's nodes in topological order; nodes without dependencies
 * depend on `entry` (UINT32_MAX: none).  *exits receives every appended
 * index of this level (the exit node of a child waits for all of them). */
static cudaError_t flatten(cudaGraph_t g, uint32_t entry, flat_list *fl, int depth) {
  if (depth > 32) return cudaErrorInvalidValue;
  size_t *order = malloc((g->n ? g->n : 1) * sizeof *order);
  uint32_t *idx = malloc((g->n ? g->n : 1) * sizeof *idx);
  uint32_t *deps = NULL;
  size_t capdeps = 0;
  cudaError_t e = cudaSuccess;
  if (!order || !idx) e = cudaErrorMemoryAllocation;
  if (e == cudaSuccess && topo_order(g, order)) e = cudaErrorInvalidValue; /* cycle */
  for (size_t oi = 0; e == cudaSuccess && oi < g->n; oi++) {
    size_t i = order[oi];
    cudaGraphNode_t n = g->nodes[i];
    size_t nd = 0;
    if (grow((void **)&deps, &capdeps, n->ndeps + 1, sizeof *deps)) {
      e = cudaErrorMemoryAllocation;
      break;
    }
    for (size_t k = 0; k < n->ndeps; k++) deps[nd++] = idx[n->deps[k]->pos];
    if (!nd && entry != UINT32_MAX) deps[nd++] = entry;
    uint32_t me;
    e = flat_push(fl, &n->p, n->id, deps, nd, &me);
    if (e != cudaSuccess) break;
    if (n->p.type == cudaGraphNodeTypeGraph) {
      size_t first = fl->n;
      e = flatten(n->p.child, me, fl, depth + 1);
      if (e != cudaSuccess) break;
      /* The exit node waits for every node of the child. */
      size_t cnt = fl->n - first;
      uint32_t *all = malloc((cnt + 1) * sizeof *all);
      if (!all) {
        e = cudaErrorMemoryAllocation;
        break;
      }
      for (size_t k = 0; k < cnt; k++) all[k] = (uint32_t)(first + k);
      if (!cnt) all[cnt++] = me;
      node_params empty;
      memset(&empty, 0, sizeof empty);
      empty.type = cudaGraphNodeTypeEmpty;
      uint32_t exit_idx;
      e = flat_push(fl, &empty, 0, all, cnt, &exit_idx);
      free(all);
      if (e != cudaSuccess) break;
      fl->v[me].child_end = exit_idx;
      idx[i] = exit_idx;
    } else {
      idx[i] = me;
    }
  }
  free(order);
  free(idx);
  free(deps);
  return e;
}

/* ---- encoding nodes for the server ------------------------------------- */

typedef struct {
  rgpu_buf types, words, plens, params;
} node_enc;

static void enc_init(node_enc *x) {
  rgpu_buf_init(&x->types);
  rgpu_buf_init(&x->words);
  rgpu_buf_init(&x->plens);
  rgpu_buf_init(&x->params);
}
static void enc_free(node_enc *x) {
  rgpu_buf_free(&x->types);
  rgpu_buf_free(&x->words);
  rgpu_buf_free(&x->plens);
  rgpu_buf_free(&x->params);
}

/* Bytes a memcpy node moves (its host side is contiguous on the wire). */
static size_t copy_bytes(const struct cudaMemcpy3DParms *cp) {
  return cp->extent.width * cp->extent.height * cp->extent.depth;
}

/* stage: for a device-to-host copy, the device buffer it really copies
 * into (the launch then reads it back with an ordinary asynchronous copy,
 * so graph results arrive like any cudaMemcpyAsync's). */
static void enc_node(node_enc *x, const node_params *p, uint64_t stage);

/* A flat node as the server sees it: disabled nodes and directly read
 * device-to-host copies are empty there. */
static void enc_flat(node_enc *x, const flat_node *f) {
  if (f->disabled || f->direct) {
    node_params empty;
    memset(&empty, 0, sizeof empty);
    empty.type = cudaGraphNodeTypeEmpty;
    enc_node(x, &empty, 0);
  } else {
    enc_node(x, &f->p, f->stage);
  }
}

static void enc_node(node_enc *x, const node_params *p, uint64_t stage) {
  uint64_t w[NWORDS];
  memset(w, 0, sizeof w);
  uint32_t type = W_EMPTY;
  uint32_t plen = 0;
  switch (p->type) {
  case cudaGraphNodeTypeKernel:
    type = W_KERNEL;
    w[0] = p->op.launch.module_id;
    w[1] = p->op.launch.func_index;
    w[2] = p->op.launch.grid.x, w[3] = p->op.launch.grid.y, w[4] = p->op.launch.grid.z;
    w[5] = p->op.launch.block.x, w[6] = p->op.launch.block.y, w[7] = p->op.launch.block.z;
    w[8] = p->op.launch.shmem;
    plen = (uint32_t)p->op.launch.plen;
    rgpu_buf_put(&x->params, p->op.launch.params, p->op.launch.plen);
    break;
  case cudaGraphNodeTypeMemcpy: {
    type = W_MEMCPY;
    const struct cudaMemcpy3DParms *cp = &p->op.copy.cp;
    uint64_t sb = 0, ss = 0, db = 0, ds = 0;
    copy_extent(&cp->srcPtr, &cp->srcPos, &cp->extent, &sb, &ss);
    copy_extent(&cp->dstPtr, &cp->dstPos, &cp->extent, &db, &ds);
    w[0] = cp->kind == cudaMemcpyHostToDevice ? W_H2D : cp->kind == cudaMemcpyDeviceToHost ? W_D2H : W_D2D;
    w[1] = w[0] == W_D2H ? 0 : db;
    w[2] = w[0] == W_H2D ? 0 : sb;
    w[3] = cp->extent.width, w[4] = cp->extent.height, w[5] = cp->extent.depth;
    w[6] = cp->dstPtr.pitch ? cp->dstPtr.pitch : cp->extent.width;
    w[7] = cp->dstPtr.ysize ? cp->dstPtr.ysize : cp->extent.height;
    if (w[0] == W_D2H && stage) {
      w[0] = W_D2D;
      w[1] = stage;
      w[6] = cp->extent.width;
      w[7] = cp->extent.height;
    }
    w[8] = cp->srcPtr.pitch ? cp->srcPtr.pitch : cp->extent.width;
    w[9] = cp->srcPtr.ysize ? cp->srcPtr.ysize : cp->extent.height;
    if (w[0] == W_H2D && stage) {
      /* A large host source goes ahead of the launch with an ordinary
       * (chunked) copy into its staging buffer. */
      w[0] = W_D2D;
      w[2] = stage;
      w[8] = cp->extent.width;
      w[9] = cp->extent.height;
    }
    break;
  }
  case cudaGraphNodeTypeMemset:
    type = W_MEMSET;
    w[0] = (uint64_t)(uintptr_t)p->op.fill.dst;
    w[1] = p->op.fill.height > 1 ? p->op.fill.pitch : p->op.fill.width * p->op.fill.elementSize;
    w[2] = p->op.fill.value;
    w[3] = p->op.fill.elementSize;
    w[4] = p->op.fill.width;
    w[5] = p->op.fill.height;
    break;
  case cudaGraphNodeTypeEventRecord:
  case cudaGraphNodeTypeWaitEvent:
    type = p->type == cudaGraphNodeTypeEventRecord ? W_EVENT_RECORD : W_EVENT_WAIT;
    w[0] = valid_event(p->op.event.event) ? p->op.event.event->id : 0;
    break;
  default: break; /* empty, child entry */
  }
  rgpu_buf_put_u32(&x->types, type);
  rgpu_buf_put(&x->words, w, sizeof w);
  rgpu_buf_put_u32(&x->plens, plen);
}

/* ---- instantiation ------------------------------------------------------ */

static void exec_free(cudaGraphExec_t x) {
  for (size_t i = 0; i < x->nf; i++)
    if (x->f[i].stage) cudaFree((void *)(uintptr_t)x->f[i].stage);
  flat_free(x->f, x->nf);
  for (size_t i = 0; i < x->nlevels; i++) {
    free(x->lv[i].host);
    free(x->lv[i].dev);
    free(x->lv[i].d2h);
    free(x->lv[i].h2d_big);
  }
  free(x->lv);
  x->magic = 0;
  free(x);
}

/* Whether device-to-host node i may be read from its source after its
 * level: every other node of the level is an ancestor of it or only reads
 * device memory (another device-to-host copy).  Returns -1 without memory. */
static int d2h_direct(cudaGraphExec_t x, size_t i, int *out) {
  int lvl = x->f[i].level;
  char *anc = calloc(x->nf, 1);
  uint32_t *todo = malloc(x->nf * sizeof *todo);
  if (!anc || !todo) {
    free(anc);
    free(todo);
    return -1;
  }
  size_t n = 0;
  todo[n++] = (uint32_t)i;
  anc[i] = 1;
  while (n) {
    const flat_node *f = &x->f[todo[--n]];
    for (size_t k = 0; k < f->ndeps; k++)
      if (!anc[f->deps[k]]) {
        anc[f->deps[k]] = 1;
        todo[n++] = f->deps[k];
      }
  }
  int ok = 1;
  for (size_t j = 0; j < x->nf && ok; j++) {
    const flat_node *g = &x->f[j];
    if (anc[j] || g->level != lvl || is_host_side(&g->p)) continue;
    int reads_only = (g->p.type == cudaGraphNodeTypeMemcpy && g->p.op.copy.cp.kind == cudaMemcpyDeviceToHost) ||
                     g->p.type == cudaGraphNodeTypeEmpty || g->p.type == cudaGraphNodeTypeGraph ||
                     g->p.type == cudaGraphNodeTypeEventRecord || g->p.type == cudaGraphNodeTypeWaitEvent;
    if (!reads_only) ok = 0;
  }
  free(anc);
  free(todo);
  *out = ok;
  return 0;
}

static cudaError_t assign_levels(cudaGraphExec_t x) {
  int maxl = 0;
  for (size_t i = 0; i < x->nf; i++) {
    flat_node *f = &x->f[i];
    int host = is_host_side(&f->p);
    int l = 0;
    for (size_t k = 0; k < f->ndeps; k++) {
      const flat_node *d = &x->f[f->deps[k]];
      int dl = d->level + (host && !is_host_side(&d->p) ? 1 : 0);
      if (dl > l) l = dl;
    }
    f->level = l;
    if (l > maxl) maxl = l;
  }
  x->nlevels = (size_t)maxl + 1;
  x->lv = calloc(x->nlevels, sizeof *x->lv);
  if (!x->lv) return cudaErrorMemoryAllocation;
  for (size_t i = 0; i < x->nf; i++) {
    flat_node *f = &x->f[i];
    level_t *L = &x->lv[f->level];
    uint32_t **list = is_host_side(&f->p) ? &L->host : &L->dev;
    size_t *cnt = is_host_side(&f->p) ? &L->nhost : &L->ndev;
    uint32_t *nl = realloc(*list, (*cnt + 1) * sizeof *nl);
    if (!nl) return cudaErrorMemoryAllocation;
    *list = nl;
    if (!is_host_side(&f->p)) f->sidx = (uint32_t)*cnt;
    nl[(*cnt)++] = (uint32_t)i;
    if (f->p.type == cudaGraphNodeTypeMemcpy && f->p.op.copy.cp.kind == cudaMemcpyHostToDevice) {
      size_t nb = copy_bytes(&f->p.op.copy.cp);
      if (nb <= H2D_INLINE_MAX && L->h2d_bytes + nb <= H2D_INLINE_MAX) {
        L->h2d_bytes += nb;
      } else {
        uint32_t *nh = realloc(L->h2d_big, (L->nh2d_big + 1) * sizeof *nh);
        if (!nh) return cudaErrorMemoryAllocation;
        L->h2d_big = nh;
        nh[L->nh2d_big++] = (uint32_t)i;
        void *stage = NULL;
        cudaError_t e = cudaMalloc(&stage, nb);
        if (e != cudaSuccess) return e;
        f->stage = (uint64_t)(uintptr_t)stage;
      }
    }
    if (f->p.type == cudaGraphNodeTypeMemcpy && f->p.op.copy.cp.kind == cudaMemcpyDeviceToHost) {
      uint32_t *nd = realloc(L->d2h, (L->nd2h + 1) * sizeof *nd);
      if (!nd) return cudaErrorMemoryAllocation;
      L->d2h = nd;
      nd[L->nd2h++] = (uint32_t)i;
      int direct = 0;
      if (d2h_direct(x, i, &direct)) return cudaErrorMemoryAllocation;
      if (direct) {
        /* Nothing after it in its level writes device memory: read the
         * source itself once the level is done (no staging, no extra
         * copy, no allocation round trip). */
        f->direct = 1;
        continue;
      }
      void *stage = NULL;
      cudaError_t e = cudaMalloc(&stage, copy_bytes(&f->p.op.copy.cp));
      if (e != cudaSuccess) return e;
      f->stage = (uint64_t)(uintptr_t)stage;
    }
  }
  return cudaSuccess;
}

static cudaError_t post_async(rgpu_client *c, int dev, uint16_t op, rgpu_buf *b) {
  int rc = b->err ? CUDA_ERROR_OUT_OF_MEMORY
                  : rgpu_client_call(c, dev, op, 1, b->data, b->len, NULL, 0, NULL);
  return rc ? rgpu_rt_sync_ret(c, rc) : cudaSuccess;
}

static cudaError_t send_level(rgpu_client *c, cudaGraphExec_t x, level_t *L) {
  node_enc enc;
  enc_init(&enc);
  rgpu_buf edges, b;
  rgpu_buf_init(&edges);
  rgpu_buf_init(&b);
  for (size_t k = 0; k < L->ndev; k++) {
    const flat_node *f = &x->f[L->dev[k]];
    enc_flat(&enc, f);
    for (size_t d = 0; d < f->ndeps; d++) {
      const flat_node *df = &x->f[f->deps[d]];
      if (df->level != f->level || is_host_side(&df->p)) continue;
      rgpu_buf_put_u32(&edges, df->sidx);
      rgpu_buf_put_u32(&edges, (uint32_t)k);
    }
  }
  L->server_id = rgpu_rt_new_handle_id();
  rgpu_msg_graph_exec_create_req m = {
      .exec_id = L->server_id,
      .flags = (uint32_t)x->flags,
      .types = {enc.types.data, (uint32_t)(enc.types.len / 4)},
      .words = {enc.words.data, (uint32_t)(enc.words.len / 8)},
      .param_lens = {enc.plens.data, (uint32_t)(enc.plens.len / 4)},
      .params = {enc.params.data, enc.params.len},
      .edges = {edges.data, (uint32_t)(edges.len / 4)},
  };
  cudaError_t e = cudaSuccess;
  if (enc.types.err || enc.words.err || enc.plens.err || enc.params.err || edges.err)
    e = cudaErrorMemoryAllocation;
  else if (enc.params.len > 16u << 20 || L->ndev > 65536 || edges.len / 4 > 1048576) {
    RGPU_WARN("graph too large to instantiate: %zu nodes, %zu edges, %zu bytes of kernel "
              "parameters (limits: 65536, 524288, 16 MiB)", L->ndev, edges.len / 8, enc.params.len);
    e = cudaErrorNotSupported;
  }
  if (e == cudaSuccess) {
    rgpu_msg_graph_exec_create_req_encode(&b, &m);
    e = post_async(c, x->device, RGPU_OP_GRAPH_EXEC_CREATE, &b);
  }
  if (e != cudaSuccess) L->server_id = 0;
  rgpu_buf_free(&b);
  rgpu_buf_free(&edges);
  enc_free(&enc);
  return e;
}

static cudaError_t instantiate(cudaGraphExec_t *out, cudaGraph_t graph, unsigned long long flags) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!out || !valid_graph(graph)) return rgpu_rt_ret(cudaErrorInvalidValue);
  if (flags & ~(unsigned long long)(cudaGraphInstantiateFlagAutoFreeOnLaunch |
                                    cudaGraphInstantiateFlagUpload |
                                    cudaGraphInstantiateFlagUseNodePriority))
    return rgpu_rt_ret(flags & cudaGraphInstantiateFlagDeviceLaunch ? cudaErrorNotSupported
                                                                    : cudaErrorInvalidValue);
  struct CUgraphExec_st *x = calloc(1, sizeof *x);
  if (!x) return rgpu_rt_ret(cudaErrorMemoryAllocation);
  x->magic = EXEC_MAGIC;
  x->device = rgpu_rt_current_device();
  x->flags = flags;
  flat_list fl = {0};
  e = flatten(graph, UINT32_MAX, &fl, 0);
  x->f = fl.v;
  x->nf = fl.n;
  if (e == cudaSuccess) e = assign_levels(x);
  for (size_t i = 0; e == cudaSuccess && i < x->nlevels; i++) {
    if (e == cudaSuccess && x->lv[i].ndev) e = send_level(c, x, &x->lv[i]);
  }
  if (e != cudaSuccess) {
    exec_free(x);
    return rgpu_rt_ret(e);
  }
  *out = x;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                          unsigned long long flags) {
  return instantiate(pGraphExec, graph, flags);
}

RGPU_API cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                                   unsigned long long flags) {
  return instantiate(pGraphExec, graph, flags);
}

static cudaError_t launch(cudaGraphExec_t x, cudaStream_t stream, int per_thread);

static cudaError_t instantiate_with_params(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                           cudaGraphInstantiateParams *ip, int per_thread) {
  if (!ip) {
    rgpu_rt_count_call();
    return rgpu_rt_ret(cudaErrorInvalidValue);
  }
  cudaError_t e = instantiate(pGraphExec, graph, ip->flags);
  ip->errNode_out = NULL;
  ip->result_out = e == cudaSuccess ? cudaGraphInstantiateSuccess : cudaGraphInstantiateError;
  (void)per_thread; /* upload is implicit: the graph is on the server already */
  return e;
}

RGPU_API cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                                    cudaGraphInstantiateParams *instantiateParams) {
  return instantiate_with_params(pGraphExec, graph, instantiateParams, 0);
}
RGPU_API cudaError_t cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t *pGraphExec,
                                                         cudaGraph_t graph,
                                                         cudaGraphInstantiateParams *instantiateParams);
RGPU_API cudaError_t cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t *pGraphExec,
                                                         cudaGraph_t graph,
                                                         cudaGraphInstantiateParams *instantiateParams) {
  return instantiate_with_params(pGraphExec, graph, instantiateParams, 1);
}

RGPU_API cudaError_t cudaGraphExecGetFlags(cudaGraphExec_t graphExec, unsigned long long *flags) {
  rgpu_rt_count_call();
  if (!valid_exec(graphExec) || !flags) return rgpu_rt_ret(cudaErrorInvalidValue);
  *flags = graphExec->flags;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (!valid_exec(graphExec)) return rgpu_rt_ret(cudaErrorInvalidValue);
  if (e == cudaSuccess) {
    for (size_t i = 0; i < graphExec->nlevels; i++) {
      if (!graphExec->lv[i].server_id) continue;
      rgpu_buf b;
      rgpu_buf_init(&b);
      rgpu_msg_graph_exec_destroy_req m = {.exec_id = graphExec->lv[i].server_id};
      rgpu_msg_graph_exec_destroy_req_encode(&b, &m);
      cudaError_t e2 = post_async(c, graphExec->device, RGPU_OP_GRAPH_EXEC_DESTROY, &b);
      rgpu_buf_free(&b);
      if (e == cudaSuccess) e = e2;
    }
  }
  exec_free(graphExec);
  return e;
}

/* ---- exec updates --------------------------------------------------------- */

/* Sends new parameters for the flat nodes idx[0..n) (all device nodes of
 * one level). */
static cudaError_t send_update(rgpu_client *c, cudaGraphExec_t x, level_t *L, const uint32_t *idx,
                               size_t n) {
  if (!n || !L->server_id) return cudaSuccess;
  node_enc enc;
  enc_init(&enc);
  rgpu_buf ind, b;
  rgpu_buf_init(&ind);
  rgpu_buf_init(&b);
  for (size_t k = 0; k < n; k++) {
    const flat_node *f = &x->f[idx[k]];
    enc_flat(&enc, f);
    rgpu_buf_put_u32(&ind, f->sidx);
  }
  rgpu_msg_graph_exec_update_req m = {
      .exec_id = L->server_id,
      .indices = {ind.data, (uint32_t)(ind.len / 4)},
      .types = {enc.types.data, (uint32_t)(enc.types.len / 4)},
      .words = {enc.words.data, (uint32_t)(enc.words.len / 8)},
      .param_lens = {enc.plens.data, (uint32_t)(enc.plens.len / 4)},
      .params = {enc.params.data, enc.params.len},
  };
  cudaError_t e = cudaSuccess;
  if (enc.types.err || enc.words.err || enc.plens.err || enc.params.err || ind.err)
    e = cudaErrorMemoryAllocation;
  if (e == cudaSuccess) {
    rgpu_msg_graph_exec_update_req_encode(&b, &m);
    e = post_async(c, x->device, RGPU_OP_GRAPH_EXEC_UPDATE, &b);
  }
  rgpu_buf_free(&b);
  rgpu_buf_free(&ind);
  enc_free(&enc);
  return e;
}

static flat_node *exec_find(cudaGraphExec_t x, cudaGraphNode_t node) {
  for (size_t i = 0; i < x->nf; i++)
    if (x->f[i].orig_id == node->id || (x->f[i].alt_id && x->f[i].alt_id == node->id)) return &x->f[i];
  return NULL;
}

/* Whether a kind change would move a node between host and device side or
 * change the bytes a launch carries: that changes the plan, not just the
 * parameters, so CUDA's "not supported" answer is the honest one. */
static int same_shape(const node_params *a, const node_params *b) {
  if (a->type != b->type) return 0;
  if (is_host_side(a) != is_host_side(b)) return 0;
  if (a->type == cudaGraphNodeTypeMemcpy)
    return a->op.copy.cp.kind == b->op.copy.cp.kind && copy_bytes(&a->op.copy.cp) == copy_bytes(&b->op.copy.cp);
  return 1;
}

/* Replaces flat node f's params by np (taken over) and updates the server. */
static cudaError_t exec_set_node(cudaGraphExec_t x, flat_node *f, node_params *np) {
  if (!same_shape(&f->p, np)) {
    params_free(np);
    return cudaErrorInvalidValue;
  }
  params_free(&f->p);
  f->p = *np;
  memset(np, 0, sizeof *np);
  if (is_host_side(&f->p)) return cudaSuccess;
  rgpu_client *c = rgpu_rt_client_peek();
  if (!c) return cudaErrorDevicesUnavailable;
  uint32_t idx = (uint32_t)(f - x->f);
  return send_update(c, x, &x->lv[f->level], &idx, 1);
}

#define EXEC_SET_BEGIN(T)                                                  \
  rgpu_rt_count_call();                                                    \
  if (!valid_exec(hGraphExec) || !valid_node(node)) return rgpu_rt_ret(cudaErrorInvalidValue); \
  flat_node *f = exec_find(hGraphExec, node);                              \
  if (!f || f->p.type != (T)) return rgpu_rt_ret(cudaErrorInvalidValue);   \
  node_params np;                                                          \
  memset(&np, 0, sizeof np);                                               \
  cudaError_t e

#define EXEC_SET_END()                                 \
  if (e != cudaSuccess) {                              \
    params_free(&np);                                  \
    return rgpu_rt_ret(e);                             \
  }                                                    \
  return rgpu_rt_ret(exec_set_node(hGraphExec, f, &np))

RGPU_API cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                      const struct cudaKernelNodeParams *pNodeParams) {
  EXEC_SET_BEGIN(cudaGraphNodeTypeKernel);
  e = kernel_params_from(&np, pNodeParams);
  EXEC_SET_END();
}

RGPU_API cudaError_t cudaGraphExecMemcpyNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                      const struct cudaMemcpy3DParms *pNodeParams) {
  EXEC_SET_BEGIN(cudaGraphNodeTypeMemcpy);
  e = memcpy_params_from(&np, pNodeParams);
  EXEC_SET_END();
}

RGPU_API cudaError_t cudaGraphExecMemcpyNodeSetParams1D(cudaGraphExec_t hGraphExec,
                                                        cudaGraphNode_t node, void *dst,
                                                        const void *src, size_t count,
                                                        enum cudaMemcpyKind kind) {
  EXEC_SET_BEGIN(cudaGraphNodeTypeMemcpy);
  struct cudaMemcpy3DParms cp = rgpu_rt_copy_1d(dst, src, count, kind);
  e = memcpy_params_from(&np, &cp);
  EXEC_SET_END();
}

RGPU_API cudaError_t cudaGraphExecMemcpyNodeSetParamsToSymbol(cudaGraphExec_t hGraphExec,
                                                              cudaGraphNode_t node,
                                                              const void *symbol, const void *src,
                                                              size_t count, size_t offset,
                                                              enum cudaMemcpyKind kind) {
  EXEC_SET_BEGIN(cudaGraphNodeTypeMemcpy);
  e = symbol_params(&np, 1, symbol, (void *)src, count, offset, kind);
  EXEC_SET_END();
}

RGPU_API cudaError_t cudaGraphExecMemcpyNodeSetParamsFromSymbol(cudaGraphExec_t hGraphExec,
                                                                cudaGraphNode_t node, void *dst,
                                                                const void *symbol, size_t count,
                                                                size_t offset,
                                                                enum cudaMemcpyKind kind) {
  EXEC_SET_BEGIN(cudaGraphNodeTypeMemcpy);
  e = symbol_params(&np, 0, symbol, dst, count, offset, kind);
  EXEC_SET_END();
}

RGPU_API cudaError_t cudaGraphExecMemsetNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                      const struct cudaMemsetParams *pNodeParams) {
  EXEC_SET_BEGIN(cudaGraphNodeTypeMemset);
  e = memset_params_from(&np, pNodeParams);
  EXEC_SET_END();
}

RGPU_API cudaError_t cudaGraphExecHostNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                    const struct cudaHostNodeParams *pNodeParams) {
  EXEC_SET_BEGIN(cudaGraphNodeTypeHost);
  e = pNodeParams && pNodeParams->fn ? cudaSuccess : cudaErrorInvalidValue;
  np.type = cudaGraphNodeTypeHost;
  if (pNodeParams) np.op.host.params = *pNodeParams;
  EXEC_SET_END();
}

static cudaError_t exec_event_set(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                  enum cudaGraphNodeType t, cudaEvent_t event) {
  EXEC_SET_BEGIN(t);
  e = valid_event(event) ? cudaSuccess : cudaErrorInvalidValue;
  np.type = t;
  np.op.event.event = event;
  EXEC_SET_END();
}

RGPU_API cudaError_t cudaGraphExecEventRecordNodeSetEvent(cudaGraphExec_t hGraphExec,
                                                          cudaGraphNode_t hNode, cudaEvent_t event) {
  return exec_event_set(hGraphExec, hNode, cudaGraphNodeTypeEventRecord, event);
}
RGPU_API cudaError_t cudaGraphExecEventWaitNodeSetEvent(cudaGraphExec_t hGraphExec,
                                                        cudaGraphNode_t hNode, cudaEvent_t event) {
  return exec_event_set(hGraphExec, hNode, cudaGraphNodeTypeWaitEvent, event);
}

/* Applies the flattened form of a new graph (fl, same length as x->f) to
 * x->f[first..first+n): same topology required; changed device nodes are
 * sent in one message per level.  *why: cudaGraphExecUpdateResult. */
static cudaError_t exec_apply(cudaGraphExec_t x, size_t first, flat_node *nf, size_t n,
                              enum cudaGraphExecUpdateResult *why, size_t *bad) {
  for (size_t i = 0; i < n; i++) {
    flat_node *a = &x->f[first + i], *b = &nf[i];
    *bad = first + i;
    if (a->p.type != b->p.type) {
      *why = cudaGraphExecUpdateErrorNodeTypeChanged;
      return cudaErrorGraphExecUpdateFailure;
    }
    if (a->ndeps != b->ndeps) {
      *why = cudaGraphExecUpdateErrorTopologyChanged;
      return cudaErrorGraphExecUpdateFailure;
    }
    for (size_t k = 0; k < a->ndeps; k++)
      if (a->deps[k] != b->deps[k]) {
        *why = cudaGraphExecUpdateErrorTopologyChanged;
        return cudaErrorGraphExecUpdateFailure;
      }
    if (!same_shape(&a->p, &b->p)) {
      *why = cudaGraphExecUpdateErrorParametersChanged;
      return cudaErrorGraphExecUpdateFailure;
    }
    if (a->p.type == cudaGraphNodeTypeKernel && a->p.op.device != b->p.op.device) {
      *why = cudaGraphExecUpdateErrorUnsupportedFunctionChange;
      return cudaErrorGraphExecUpdateFailure;
    }
  }
  rgpu_client *c = rgpu_rt_client_peek();
  cudaError_t e = cudaSuccess;
  for (size_t L = 0; L < x->nlevels && e == cudaSuccess; L++) {
    uint32_t *idx = malloc((n ? n : 1) * sizeof *idx);
    if (!idx) return cudaErrorMemoryAllocation;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
      flat_node *a = &x->f[first + i];
      if ((size_t)a->level != L) continue;
      uint64_t keep = a->orig_id;
      uint32_t child_end = a->child_end;
      params_free(&a->p);
      a->p = nf[i].p;
      memset(&nf[i].p, 0, sizeof nf[i].p);
      /* The exec keeps answering to the nodes it was instantiated from. */
      a->orig_id = keep;
      a->child_end = child_end;
      if (!is_host_side(&a->p)) idx[k++] = (uint32_t)(first + i);
    }
    if (k && c) e = send_update(c, x, &x->lv[L], idx, k);
    free(idx);
  }
  return e;
}

RGPU_API cudaError_t cudaGraphExecChildGraphNodeSetParams(cudaGraphExec_t hGraphExec,
                                                          cudaGraphNode_t node, cudaGraph_t childGraph) {
  rgpu_rt_count_call();
  if (!valid_exec(hGraphExec) || !valid_node(node) || !valid_graph(childGraph))
    return rgpu_rt_ret(cudaErrorInvalidValue);
  flat_node *f = exec_find(hGraphExec, node);
  if (!f || f->p.type != cudaGraphNodeTypeGraph) return rgpu_rt_ret(cudaErrorInvalidValue);
  size_t first = (size_t)(f - hGraphExec->f) + 1, end = f->child_end;
  /* Flatten the new child at the same position (placeholders before it),
   * so its dependency indices compare directly with the exec's. */
  flat_list fl = {0};
  cudaError_t e = cudaSuccess;
  if (grow((void **)&fl.v, &fl.cap, first + 1, sizeof *fl.v)) e = cudaErrorMemoryAllocation;
  if (e == cudaSuccess) {
    memset(fl.v, 0, first * sizeof *fl.v);
    fl.n = first;
    e = flatten(childGraph, (uint32_t)(first - 1), &fl, 1);
  }
  if (e == cudaSuccess && fl.n - first != end - first) e = cudaErrorInvalidValue;
  if (e == cudaSuccess) {
    enum cudaGraphExecUpdateResult why;
    size_t bad;
    e = exec_apply(hGraphExec, first, fl.v + first, fl.n - first, &why, &bad);
    if (e == cudaErrorGraphExecUpdateFailure) e = cudaErrorInvalidValue;
  }
  flat_free(fl.v, fl.n);
  return rgpu_rt_ret(e);
}

RGPU_API cudaError_t cudaGraphExecUpdate(cudaGraphExec_t hGraphExec, cudaGraph_t hGraph,
                                         cudaGraphExecUpdateResultInfo *resultInfo) {
  rgpu_rt_count_call();
  if (resultInfo) memset(resultInfo, 0, sizeof *resultInfo);
  if (!valid_exec(hGraphExec) || !valid_graph(hGraph)) return rgpu_rt_ret(cudaErrorInvalidValue);
  flat_list fl = {0};
  cudaError_t e = flatten(hGraph, UINT32_MAX, &fl, 0);
  enum cudaGraphExecUpdateResult why = cudaGraphExecUpdateSuccess;
  size_t bad = 0;
  if (e == cudaSuccess && fl.n != hGraphExec->nf) {
    e = cudaErrorGraphExecUpdateFailure;
    why = cudaGraphExecUpdateErrorTopologyChanged;
  }
  /* The exec answers to the new graph's nodes too (and still to its own). */
  uint64_t *ids = NULL;
  if (e == cudaSuccess) {
    ids = malloc((fl.n ? fl.n : 1) * sizeof *ids);
    if (!ids) e = cudaErrorMemoryAllocation;
    for (size_t i = 0; ids && i < fl.n; i++) ids[i] = fl.v[i].orig_id;
  }
  if (e == cudaSuccess) e = exec_apply(hGraphExec, 0, fl.v, fl.n, &why, &bad);
  if (e == cudaSuccess)
    for (size_t i = 0; i < fl.n; i++) hGraphExec->f[i].alt_id = ids[i];
  free(ids);
  if (resultInfo) {
    resultInfo->result = e == cudaSuccess ? cudaGraphExecUpdateSuccess
                         : why != cudaGraphExecUpdateSuccess ? why : cudaGraphExecUpdateError;
    resultInfo->errorNode = NULL;
    resultInfo->errorFromNode = NULL;
    if (e == cudaErrorGraphExecUpdateFailure) {
      /* Name the offending node of the new graph when it is a top-level one. */
      for (size_t i = 0; i < hGraph->n; i++)
        if (bad < fl.n && hGraph->nodes[i]->id == fl.v[bad].orig_id) resultInfo->errorNode = hGraph->nodes[i];
    }
  }
  flat_free(fl.v, fl.n);
  return rgpu_rt_ret(e);
}

RGPU_API cudaError_t cudaGraphExecNodeSetParams(cudaGraphExec_t graphExec, cudaGraphNode_t node,
                                                struct cudaGraphNodeParams *nodeParams) {
  rgpu_rt_count_call();
  if (!valid_exec(graphExec) || !valid_node(node) || !nodeParams)
    return rgpu_rt_ret(cudaErrorInvalidValue);
  flat_node *f = exec_find(graphExec, node);
  if (!f || f->p.type != nodeParams->type) return rgpu_rt_ret(cudaErrorInvalidValue);
  if (nodeParams->type == cudaGraphNodeTypeGraph)
    return cudaGraphExecChildGraphNodeSetParams(graphExec, node, nodeParams->graph.graph);
  node_params np;
  memset(&np, 0, sizeof np);
  cudaError_t e = generic_params(&np, nodeParams);
  if (e != cudaSuccess) {
    params_free(&np);
    return rgpu_rt_ret(e);
  }
  return rgpu_rt_ret(exec_set_node(graphExec, f, &np));
}

/* Kernel, memcpy and memset nodes can be switched off and on (CUDA 11.6+):
 * a disabled device node is an empty node on the server until enabled. */
RGPU_API cudaError_t cudaGraphNodeSetEnabled(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode,
                                             unsigned int isEnabled) {
  rgpu_rt_count_call();
  if (!valid_exec(hGraphExec) || !valid_node(hNode)) return rgpu_rt_ret(cudaErrorInvalidValue);
  flat_node *f = exec_find(hGraphExec, hNode);
  if (!f || (f->p.type != cudaGraphNodeTypeKernel && f->p.type != cudaGraphNodeTypeMemcpy &&
             f->p.type != cudaGraphNodeTypeMemset))
    return rgpu_rt_ret(cudaErrorInvalidValue);
  int dis = !isEnabled;
  if (f->disabled == dis) return cudaSuccess;
  f->disabled = dis;
  if (is_host_side(&f->p)) return cudaSuccess;
  rgpu_client *c = rgpu_rt_client_peek();
  if (!c) return rgpu_rt_ret(cudaErrorDevicesUnavailable);
  uint32_t idx = (uint32_t)(f - hGraphExec->f);
  return rgpu_rt_ret(send_update(c, hGraphExec, &hGraphExec->lv[f->level], &idx, 1));
}

RGPU_API cudaError_t cudaGraphNodeGetEnabled(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode,
                                             unsigned int *isEnabled) {
  rgpu_rt_count_call();
  if (!valid_exec(hGraphExec) || !valid_node(hNode) || !isEnabled)
    return rgpu_rt_ret(cudaErrorInvalidValue);
  flat_node *f = exec_find(hGraphExec, hNode);
  if (!f || (f->p.type != cudaGraphNodeTypeKernel && f->p.type != cudaGraphNodeTypeMemcpy &&
             f->p.type != cudaGraphNodeTypeMemset))
    return rgpu_rt_ret(cudaErrorInvalidValue);
  *isEnabled = !f->disabled;
  return cudaSuccess;
}

/* ---- launch --------------------------------------------------------------- */

/* Gathers the current host bytes of the level's host-to-device nodes. */
static void gather_h2d(cudaGraphExec_t x, level_t *L, uint8_t *out) {
  size_t off = 0;
  for (size_t k = 0; k < L->ndev; k++) {
    const node_params *p = &x->f[L->dev[k]].p;
    if (p->type != cudaGraphNodeTypeMemcpy || p->op.copy.cp.kind != cudaMemcpyHostToDevice) continue;
    if (x->f[L->dev[k]].stage) continue; /* sent ahead */
    const struct cudaMemcpy3DParms *cp = &p->op.copy.cp;
    uint64_t base, span;
    copy_extent(&cp->srcPtr, &cp->srcPos, &cp->extent, &base, &span);
    size_t pitch = cp->srcPtr.pitch ? cp->srcPtr.pitch : cp->extent.width;
    size_t ysize = cp->srcPtr.ysize ? cp->srcPtr.ysize : cp->extent.height;
    for (size_t z = 0; z < cp->extent.depth; z++)
      for (size_t y = 0; y < cp->extent.height; y++) {
        memcpy(out + off, (const uint8_t *)(uintptr_t)base + (z * ysize + y) * pitch, cp->extent.width);
        off += cp->extent.width;
      }
  }
}

/* Reads a device-to-host node's result back from its staging buffer: an
 * ordinary asynchronous copy on the launch stream (into pinned memory it
 * completes in the background, into pageable memory it waits, as
 * cudaMemcpyAsync does). */
static cudaError_t fetch_d2h(rgpu_client *c, const flat_node *f, uint64_t wire, int dev) {
  const struct cudaMemcpy3DParms *cp = &f->p.op.copy.cp;
  uint64_t base, span;
  copy_extent(&cp->dstPtr, &cp->dstPos, &cp->extent, &base, &span);
  size_t w = cp->extent.width;
  size_t pitch = cp->dstPtr.pitch ? cp->dstPtr.pitch : w;
  size_t ysize = cp->dstPtr.ysize ? cp->dstPtr.ysize : cp->extent.height;
  /* The device side: the staging buffer (contiguous) or the source itself. */
  uint64_t src = f->stage, sspan;
  size_t sp = w, sy = cp->extent.height;
  if (f->direct) {
    copy_extent(&cp->srcPtr, &cp->srcPos, &cp->extent, &src, &sspan);
    sp = cp->srcPtr.pitch ? cp->srcPtr.pitch : w;
    sy = cp->srcPtr.ysize ? cp->srcPtr.ysize : cp->extent.height;
  }
  int flat_d = pitch == w && (cp->extent.depth == 1 || ysize == cp->extent.height);
  int flat_s = sp == w && (cp->extent.depth == 1 || sy == cp->extent.height);
  if (flat_d && flat_s)
    return rgpu_rt_memcpy(c, base, src, copy_bytes(cp), cudaMemcpyDeviceToHost, wire, dev, 1);
  for (size_t z = 0; z < cp->extent.depth; z++)
    for (size_t y = 0; y < cp->extent.height; y++) {
      cudaError_t e = rgpu_rt_memcpy(c, base + (z * ysize + y) * pitch, src + (z * sy + y) * sp, w,
                                     cudaMemcpyDeviceToHost, wire, dev, 1);
      if (e != cudaSuccess) return e;
    }
  return cudaSuccess;
}

/* A large host-to-device node's bytes, copied into its staging buffer on
 * the launch stream just before the launch. */
static cudaError_t send_h2d(rgpu_client *c, const flat_node *f, uint64_t wire, int dev) {
  const struct cudaMemcpy3DParms *cp = &f->p.op.copy.cp;
  uint64_t base, span;
  copy_extent(&cp->srcPtr, &cp->srcPos, &cp->extent, &base, &span);
  size_t w = cp->extent.width, n = copy_bytes(cp);
  size_t pitch = cp->srcPtr.pitch ? cp->srcPtr.pitch : w;
  size_t ysize = cp->srcPtr.ysize ? cp->srcPtr.ysize : cp->extent.height;
  if (pitch == w && (cp->extent.depth == 1 || ysize == cp->extent.height))
    return rgpu_rt_memcpy(c, f->stage, base, n, cudaMemcpyHostToDevice, wire, dev, 1);
  uint8_t *tmp = malloc(n);
  if (!tmp) return rgpu_rt_ret(cudaErrorMemoryAllocation);
  size_t off = 0;
  for (size_t z = 0; z < cp->extent.depth; z++)
    for (size_t y = 0; y < cp->extent.height; y++, off += w)
      memcpy(tmp + off, (const uint8_t *)(uintptr_t)base + (z * ysize + y) * pitch, w);
  /* The copy engine has sent or queued the bytes when it returns. */
  cudaError_t e = rgpu_rt_memcpy(c, f->stage, (uint64_t)(uintptr_t)tmp, n, cudaMemcpyHostToDevice,
                                 wire, dev, 1);
  free(tmp);
  return e;
}

static void run_host_node(const node_params *p) {
  if (p->type == cudaGraphNodeTypeHost) {
    p->op.host.params.fn(p->op.host.params.userData);
    return;
  }
  const struct cudaMemcpy3DParms *cp = &p->op.copy.cp;
  uint64_t sb, ss, db, ds;
  copy_extent(&cp->srcPtr, &cp->srcPos, &cp->extent, &sb, &ss);
  copy_extent(&cp->dstPtr, &cp->dstPos, &cp->extent, &db, &ds);
  size_t sp = cp->srcPtr.pitch ? cp->srcPtr.pitch : cp->extent.width;
  size_t sy = cp->srcPtr.ysize ? cp->srcPtr.ysize : cp->extent.height;
  size_t dp = cp->dstPtr.pitch ? cp->dstPtr.pitch : cp->extent.width;
  size_t dy = cp->dstPtr.ysize ? cp->dstPtr.ysize : cp->extent.height;
  for (size_t z = 0; z < cp->extent.depth; z++)
    for (size_t y = 0; y < cp->extent.height; y++)
      memmove((uint8_t *)(uintptr_t)db + (z * dy + y) * dp,
              (const uint8_t *)(uintptr_t)sb + (z * sy + y) * sp, cp->extent.width);
}

static int capturing_wire(uint64_t wire);
RGPU_API cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream);
RGPU_API cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void *userData);

/* A host node queued on the stream as a host callback: its own copy of the
 * parameters, because the exec may be destroyed before the stream gets
 * there (host and host-to-host copy parameters hold no owned memory). */
typedef struct {
  node_params p;
} queued_host_node;

static void CUDART_CB run_queued_host_node(void *user) {
  queued_host_node *q = user;
  run_host_node(&q->p);
  free(q);
}

/* 1 if no level from L on sends host bytes with the launch: only then may
 * level L's host nodes run later than the call (a host node may produce
 * what a host-to-device node of its own or a later level reads, and those
 * bytes are taken when cudaGraphLaunch is called). */
static int host_nodes_may_queue(cudaGraphExec_t x, size_t L) {
  for (size_t k = L; k < x->nlevels; k++)
    if (x->lv[k].h2d_bytes || x->lv[k].nh2d_big) return 0;
  return 1;
}

static cudaError_t launch(cudaGraphExec_t x, cudaStream_t stream, int per_thread) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!valid_exec(x)) return rgpu_rt_ret(cudaErrorInvalidValue);
  uint64_t wire;
  int sdev;
  e = rgpu_rt_stream_resolve(c, stream, per_thread, &wire, &sdev);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  if (sdev != x->device) return rgpu_rt_ret(cudaErrorInvalidValue);
  if (capturing_wire(wire)) {
    static int logged;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      RGPU_WARN("cudaGraphLaunch into a capturing stream is not supported");
    return rgpu_rt_ret(cudaErrorStreamCaptureUnsupported);
  }
  for (size_t L = 0; L < x->nlevels; L++) {
    level_t *lv = &x->lv[L];
    if (lv->nhost && host_nodes_may_queue(x, L)) {
      /* Queued on the stream as host callbacks (HOST_FUNC): no round trip;
       * the server announces each only after the earlier device-to-host
       * results of the stream have been sent. */
      for (size_t k = 0; k < lv->nhost; k++) {
        if (x->f[lv->host[k]].disabled) continue;
        queued_host_node *q = malloc(sizeof *q);
        if (!q) return rgpu_rt_ret(cudaErrorMemoryAllocation);
        q->p = x->f[lv->host[k]].p;
        e = per_thread ? cudaLaunchHostFunc_ptsz(stream, run_queued_host_node, q)
                       : cudaLaunchHostFunc(stream, run_queued_host_node, q);
        if (e != cudaSuccess) {
          free(q);
          return e;
        }
      }
    } else if (lv->nhost) {
      /* Host work runs here, after everything before it on the stream
       * (the public call, so earlier background copies land first). */
      e = per_thread ? cudaStreamSynchronize_ptsz(stream) : cudaStreamSynchronize(stream);
      if (e != cudaSuccess) return e;
      for (size_t k = 0; k < lv->nhost; k++)
        if (!x->f[lv->host[k]].disabled) run_host_node(&x->f[lv->host[k]].p);
    }
    if (!lv->server_id) continue;
    for (size_t k = 0; k < lv->nh2d_big; k++) {
      if (x->f[lv->h2d_big[k]].disabled) continue;
      e = send_h2d(c, &x->f[lv->h2d_big[k]], wire, sdev);
      if (e != cudaSuccess) return e;
    }
    uint8_t *h2d = NULL;
    if (lv->h2d_bytes) {
      h2d = malloc(lv->h2d_bytes);
      if (!h2d) return rgpu_rt_ret(cudaErrorMemoryAllocation);
      gather_h2d(x, lv, h2d);
    }
    rgpu_buf b;
    rgpu_buf_init(&b);
    rgpu_msg_graph_launch_req m = {.exec_id = lv->server_id, .stream = wire};
    rgpu_msg_graph_launch_req_encode(&b, &m);
    int rc = rgpu_client_call(c, sdev, RGPU_OP_GRAPH_LAUNCH, 1, b.data, b.len, h2d,
                              lv->h2d_bytes, NULL);
    free(h2d);
    rgpu_buf_free(&b);
    if (rc) return rgpu_rt_sync_ret(c, rc);
    for (size_t k = 0; k < lv->nd2h; k++) {
      if (x->f[lv->d2h[k]].disabled) continue;
      e = fetch_d2h(c, &x->f[lv->d2h[k]], wire, sdev);
      if (e != cudaSuccess) return e;
    }
  }
  return cudaSuccess;
}

RGPU_API cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  return launch(graphExec, stream, 0);
}
RGPU_API cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream);
RGPU_API cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream) {
  return launch(graphExec, stream, 1);
}

/* The graph is on the server since instantiation: nothing to upload. */
static cudaError_t upload(cudaGraphExec_t x, cudaStream_t stream, int per_thread) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!valid_exec(x)) return rgpu_rt_ret(cudaErrorInvalidValue);
  uint64_t wire;
  int sdev;
  return rgpu_rt_ret(rgpu_rt_stream_resolve(c, stream, per_thread, &wire, &sdev));
}
RGPU_API cudaError_t cudaGraphUpload(cudaGraphExec_t graphExec, cudaStream_t stream) {
  return upload(graphExec, stream, 0);
}
RGPU_API cudaError_t cudaGraphUpload_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream);
RGPU_API cudaError_t cudaGraphUpload_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream) {
  return upload(graphExec, stream, 1);
}

/* ---- stream capture -------------------------------------------------------
 *
 * A capture sequence starts on an origin stream and grows to other streams
 * that wait on events recorded in it.  Every capturing stream has its own
 * dependency set (the nodes its next captured node depends on). */

typedef struct cap_seq {
  unsigned long long id;
  cudaGraph_t graph;
  int own_graph; /* created by BeginCapture (vs BeginCaptureToGraph) */
  enum cudaStreamCaptureMode mode;
  int invalidated;
  int blocking; /* origin is a blocking stream: legacy-stream work would join it */
  pthread_t thread;
  uint64_t origin;
  struct cap_seq *next;
} cap_seq;

typedef struct {
  uint64_t wire;
  cap_seq *seq;
  cudaGraphNode_t *deps;
  size_t ndeps, cap;
  cudaGraphEdgeData *edges; /* zeroed, for GetCaptureInfo */
  size_t edges_cap;
} cap_stream;

typedef struct {
  uint64_t event;
  unsigned long long seq_id;
  cudaGraphNode_t *deps;
  size_t ndeps;
} cap_event;

static pthread_mutex_t g_cap_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int g_capturing; /* streams capturing: the hooks' fast path */
static cap_seq *g_seqs;
static cap_stream *g_cs;
static size_t g_ncs, g_capcs;
static cap_event *g_ce;
static size_t g_nce, g_capce;
static unsigned long long g_next_seq = 1;
static __thread enum cudaStreamCaptureMode tl_mode = cudaStreamCaptureModeGlobal;

static cap_stream *cs_find(uint64_t wire) {
  for (size_t i = 0; i < g_ncs; i++)
    if (g_cs[i].wire == wire) return &g_cs[i];
  return NULL;
}

static cap_seq *seq_by_id(unsigned long long id) {
  for (cap_seq *s = g_seqs; s; s = s->next)
    if (s->id == id) return s;
  return NULL;
}

static cap_event *ce_find(uint64_t ev) {
  for (size_t i = 0; i < g_nce; i++)
    if (g_ce[i].event == ev) return &g_ce[i];
  return NULL;
}

static void ce_remove(uint64_t ev) {
  cap_event *e = ce_find(ev);
  if (!e) return;
  free(e->deps);
  *e = g_ce[--g_nce];
}

static int set_deps(cudaGraphNode_t **v, size_t *n, size_t *cap, cudaGraphNode_t *src, size_t ns) {
  if (grow((void **)v, cap, ns ? ns : 1, sizeof **v)) return -1;
  if (ns) memcpy(*v, src, ns * sizeof *src);
  *n = ns;
  return 0;
}

static cudaError_t cs_join(uint64_t wire, cap_seq *seq, cudaGraphNode_t *deps, size_t ndeps) {
  if (grow((void **)&g_cs, &g_capcs, g_ncs + 1, sizeof *g_cs)) return cudaErrorMemoryAllocation;
  cap_stream *cs = &g_cs[g_ncs];
  memset(cs, 0, sizeof *cs);
  cs->wire = wire;
  cs->seq = seq;
  if (set_deps(&cs->deps, &cs->ndeps, &cs->cap, deps, ndeps)) return cudaErrorMemoryAllocation;
  g_ncs++;
  atomic_fetch_add(&g_capturing, 1);
  return cudaSuccess;
}

static void cs_leave(cap_stream *cs) {
  free(cs->deps);
  free(cs->edges);
  *cs = g_cs[--g_ncs];
  atomic_fetch_sub(&g_capturing, 1);
}

/* Ends a sequence: its streams stop capturing; the graph is returned or
 * destroyed. */
static void seq_end(cap_seq *seq) {
  for (size_t i = 0; i < g_ncs;) {
    if (g_cs[i].seq == seq)
      cs_leave(&g_cs[i]);
    else
      i++;
  }
  for (cap_seq **pp = &g_seqs; *pp; pp = &(*pp)->next)
    if (*pp == seq) {
      *pp = seq->next;
      break;
    }
  free(seq);
}

static int capturing_wire(uint64_t wire) {
  if (!atomic_load_explicit(&g_capturing, memory_order_relaxed)) return 0;
  pthread_mutex_lock(&g_cap_lock);
  int r = cs_find(wire) != NULL;
  pthread_mutex_unlock(&g_cap_lock);
  return r;
}

/* Whether a potentially unsafe call (synchronous copy, synchronize,
 * malloc) is prohibited for this thread now: CUDA's rules for the modes.
 * Invalidates the captures it would interfere with.  Lock held. */
static int unsafe_prohibited_locked(void) {
  if (tl_mode == cudaStreamCaptureModeRelaxed) return 0;
  int hit = 0;
  pthread_t me = pthread_self();
  for (cap_seq *s = g_seqs; s; s = s->next) {
    if (s->mode == cudaStreamCaptureModeRelaxed) continue;
    int mine = pthread_equal(s->thread, me);
    if (mine || (s->mode == cudaStreamCaptureModeGlobal && tl_mode == cudaStreamCaptureModeGlobal)) {
      s->invalidated = 1;
      hit = 1;
    }
  }
  return hit;
}

cudaError_t rgpu_rt_graph_unsafe_call(void) {
  if (!atomic_load_explicit(&g_capturing, memory_order_relaxed)) return cudaSuccess;
  pthread_mutex_lock(&g_cap_lock);
  int bad = unsafe_prohibited_locked();
  pthread_mutex_unlock(&g_cap_lock);
  return bad ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

/* Work on the legacy stream joins every blocking stream, so while one of
 * them captures it is an implicit dependency: invalidates that capture and
 * returns 1 (lock held). */
static int legacy_joins_capture_locked(void) {
  for (cap_seq *s = g_seqs; s; s = s->next)
    if (s->blocking && !s->invalidated) {
      s->invalidated = 1;
      return 1;
    }
  return 0;
}

/* Adds a node with params p to the capture of `wire` (lock held).  Returns
 * 0 if the stream is not capturing (p untouched), 1 if handled (*out). */
static int capture_node_locked(uint64_t wire, node_params *p, cudaError_t *out) {
  cap_stream *cs = cs_find(wire);
  if (!cs) {
    if (wire == 0 && legacy_joins_capture_locked()) {
      params_free(p);
      *out = cudaErrorStreamCaptureImplicit;
      return 1;
    }
    return 0;
  }
  if (cs->seq->invalidated) {
    params_free(p);
    *out = cudaErrorStreamCaptureInvalidated;
    return 1;
  }
  cudaGraphNode_t n;
  cudaError_t e = node_add(&n, cs->seq->graph, cs->deps, cs->ndeps, p);
  if (e != cudaSuccess) {
    params_free(p);
    cs->seq->invalidated = 1;
    *out = e;
    return 1;
  }
  cs->deps[0] = n;
  cs->ndeps = 1;
  *out = cudaSuccess;
  return 1;
}

static int capture_node(uint64_t wire, node_params *p, cudaError_t *out) {
  pthread_mutex_lock(&g_cap_lock);
  int r = capture_node_locked(wire, p, out);
  pthread_mutex_unlock(&g_cap_lock);
  return r;
}

/* The capture side of each operation kind: 1 when taken (or refused
 * because of a capture), *out the call's result; 0: send it. */
static int take_launch(const rgpu_rt_op *op, cudaError_t *out) {
  uint64_t wire = op->stream;
  node_params p;
  cudaError_t e = kernel_params_set(&p, op);
  if (e != cudaSuccess) {
    params_free(&p);
    if (!capturing_wire(wire)) return 0;
    *out = e;
    return 1;
  }
  if (capture_node(wire, &p, out)) return 1;
  params_free(&p);
  return 0;
}

static int take_copy(const rgpu_rt_op *op, cudaError_t *out) {
  uint64_t wire = op->stream;
  int async = op->copy.async;
  pthread_mutex_lock(&g_cap_lock);
  int r = 0;
  if (!async && !cs_find(wire)) {
    /* A synchronous copy on the legacy stream while a blocking stream
     * captures is first of all an implicit dependency on that capture:
     * CUDA 13 says cudaErrorStreamCaptureImplicit (measured on an H200),
     * and only otherwise the global mode's "unsafe call". */
    if (wire == 0 && legacy_joins_capture_locked()) {
      *out = cudaErrorStreamCaptureImplicit;
      r = 1;
    } else if (unsafe_prohibited_locked()) {
      *out = cudaErrorStreamCaptureUnsupported;
      r = 1;
    }
  }
  if (!r) {
    node_params p;
    memset(&p, 0, sizeof p);
    p.type = cudaGraphNodeTypeMemcpy;
    p.op = *op;
    p.op.stream = 0;
    p.op.device = rgpu_rt_current_device();
    if (cs_find(wire) && !async) {
      /* A synchronous copy cannot be part of a graph. */
      cs_find(wire)->seq->invalidated = 1;
      *out = cudaErrorStreamCaptureUnsupported;
      r = 1;
    } else {
      r = capture_node_locked(wire, &p, out);
    }
  }
  pthread_mutex_unlock(&g_cap_lock);
  return r;
}

static int take_memset(const rgpu_rt_op *op, cudaError_t *out) {
  node_params p;
  memset(&p, 0, sizeof p);
  p.type = cudaGraphNodeTypeMemset;
  p.op = *op;
  p.op.stream = 0;
  /* A one-row node's pitch is its width (what the node reports). */
  if (op->fill.height <= 1) p.op.fill.pitch = op->fill.width;
  p.op.device = rgpu_rt_current_device();
  return capture_node(op->stream, &p, out);
}

static int take_host_func(const rgpu_rt_op *op, cudaError_t *out) {
  uint64_t wire = op->stream;
  int stream_callback = op->host.stream_cb != NULL;
  pthread_mutex_lock(&g_cap_lock);
  cap_stream *cs = cs_find(wire);
  pthread_mutex_unlock(&g_cap_lock);
  if (!cs) return 0;
  if (stream_callback) {
    /* cudaStreamAddCallback cannot be captured (it passes a status). */
    pthread_mutex_lock(&g_cap_lock);
    if ((cs = cs_find(wire))) cs->seq->invalidated = 1;
    pthread_mutex_unlock(&g_cap_lock);
    *out = cudaErrorStreamCaptureUnsupported;
    return 1;
  }
  node_params p;
  memset(&p, 0, sizeof p);
  p.type = cudaGraphNodeTypeHost;
  p.op = *op;
  p.op.stream = 0;
  p.op.host.stream_cb = NULL;
  p.op.host.handle = NULL;
  if (capture_node(wire, &p, out)) return 1;
  params_free(&p);
  return 0;
}

static int take_event_record(const rgpu_rt_op *op, cudaError_t *out) {
  cudaEvent_t event = op->event.event;
  uint64_t wire = op->stream;
  unsigned flags = op->event.flags;
  if (!atomic_load_explicit(&g_capturing, memory_order_relaxed)) {
    if (g_nce) {
      pthread_mutex_lock(&g_cap_lock);
      ce_remove(event->id);
      pthread_mutex_unlock(&g_cap_lock);
    }
    return 0;
  }
  pthread_mutex_lock(&g_cap_lock);
  int r = 0;
  cap_stream *cs = cs_find(wire);
  if (!cs) {
    ce_remove(event->id); /* a real record: the event leaves any capture */
  } else if (cs->seq->invalidated) {
    *out = cudaErrorStreamCaptureInvalidated;
    r = 1;
  } else {
    r = 1;
    *out = cudaSuccess;
    if (flags & cudaEventRecordExternal) {
      node_params p;
      memset(&p, 0, sizeof p);
      p.type = cudaGraphNodeTypeEventRecord;
      p.op.event.event = event;
      capture_node_locked(wire, &p, out);
      cs = cs_find(wire);
    }
    if (*out == cudaSuccess) {
      cap_event *ce = ce_find(event->id);
      if (!ce && !grow((void **)&g_ce, &g_capce, g_nce + 1, sizeof *g_ce)) {
        ce = &g_ce[g_nce++];
        memset(ce, 0, sizeof *ce);
        ce->event = event->id;
      }
      if (!ce) {
        *out = cudaErrorMemoryAllocation;
      } else {
        free(ce->deps);
        ce->deps = malloc((cs->ndeps ? cs->ndeps : 1) * sizeof *ce->deps);
        ce->ndeps = ce->deps ? cs->ndeps : 0;
        if (ce->deps && cs->ndeps) memcpy(ce->deps, cs->deps, cs->ndeps * sizeof *cs->deps);
        ce->seq_id = cs->seq->id;
      }
    }
  }
  pthread_mutex_unlock(&g_cap_lock);
  return r;
}

static int take_event_wait(const rgpu_rt_op *op, cudaError_t *out) {
  cudaEvent_t event = op->event.event;
  uint64_t wire = op->stream;
  unsigned flags = op->event.flags;
  pthread_mutex_lock(&g_cap_lock);
  int r = 1;
  *out = cudaSuccess;
  cap_stream *cs = cs_find(wire);
  cap_event *ce = ce_find(event->id);
  cap_seq *eseq = ce ? seq_by_id(ce->seq_id) : NULL;
  if (!eseq) {
    if (!cs) {
      r = 0; /* an ordinary wait */
    } else if (cs->seq->invalidated) {
      *out = cudaErrorStreamCaptureInvalidated;
    } else if (flags & cudaEventWaitExternal) {
      node_params p;
      memset(&p, 0, sizeof p);
      p.type = cudaGraphNodeTypeWaitEvent;
      p.op.event.event = event;
      capture_node_locked(wire, &p, out);
    } else {
      /* Waiting on work outside the capture would leave the graph. */
      cs->seq->invalidated = 1;
      *out = cudaErrorStreamCaptureIsolation;
    }
  } else if (!cs) {
    /* Fork: the stream joins the sequence the event was recorded in. */
    if (eseq->invalidated)
      *out = cudaErrorStreamCaptureInvalidated;
    else
      *out = cs_join(wire, eseq, ce->deps, ce->ndeps);
  } else if (cs->seq != eseq) {
    cs->seq->invalidated = 1;
    eseq->invalidated = 1;
    *out = cudaErrorStreamCaptureMerge;
  } else if (cs->seq->invalidated) {
    *out = cudaErrorStreamCaptureInvalidated;
  } else {
    /* Join: the stream's next node depends on the event's nodes too. */
    for (size_t i = 0; i < ce->ndeps && *out == cudaSuccess; i++) {
      int dup = 0;
      for (size_t k = 0; k < cs->ndeps; k++) dup |= cs->deps[k] == ce->deps[i];
      if (dup) continue;
      if (grow((void **)&cs->deps, &cs->cap, cs->ndeps + 1, sizeof *cs->deps))
        *out = cudaErrorMemoryAllocation;
      else
        cs->deps[cs->ndeps++] = ce->deps[i];
    }
  }
  pthread_mutex_unlock(&g_cap_lock);
  return r;
}

int rgpu_rt_capture_take(const rgpu_rt_op *op, cudaError_t *out) {
  /* Event records have to look even when nothing captures: a real record
   * takes the event out of a finished capture. */
  if (op->kind == RGPU_RT_OP_EVENT_RECORD) return take_event_record(op, out);
  if (!atomic_load_explicit(&g_capturing, memory_order_relaxed)) return 0;
  switch (op->kind) {
  case RGPU_RT_OP_LAUNCH: return take_launch(op, out);
  case RGPU_RT_OP_COPY: return take_copy(op, out);
  case RGPU_RT_OP_MEMSET: return take_memset(op, out);
  case RGPU_RT_OP_EVENT_WAIT: return take_event_wait(op, out);
  case RGPU_RT_OP_HOST_FUNC: return take_host_func(op, out);
  default: return 0;
  }
}

int rgpu_rt_graph_is_capturing(uint64_t wire) { return capturing_wire(wire); }

cudaError_t rgpu_rt_graph_check_event(cudaEvent_t event) {
  if (!atomic_load_explicit(&g_capturing, memory_order_relaxed)) return cudaSuccess;
  pthread_mutex_lock(&g_cap_lock);
  cap_event *ce = ce_find(event->id);
  int live = ce && seq_by_id(ce->seq_id) != NULL;
  pthread_mutex_unlock(&g_cap_lock);
  return live ? cudaErrorCapturedEvent : cudaSuccess;
}

cudaError_t rgpu_rt_graph_check_sync(uint64_t wire) {
  if (!atomic_load_explicit(&g_capturing, memory_order_relaxed)) return cudaSuccess;
  pthread_mutex_lock(&g_cap_lock);
  cudaError_t e = cudaSuccess;
  cap_stream *cs = cs_find(wire);
  if (cs) {
    cs->seq->invalidated = 1;
    e = cudaErrorStreamCaptureUnsupported;
  } else if (wire == 0 && unsafe_prohibited_locked()) {
    /* The legacy stream waits for every blocking stream, capturing ones
     * included.  Synchronizing another, unrelated stream is left alone:
     * CUDA does not document it as unsafe. */
    e = cudaErrorStreamCaptureUnsupported;
  }
  pthread_mutex_unlock(&g_cap_lock);
  return e;
}

static cudaError_t begin_capture(cudaStream_t stream, int per_thread, cudaGraph_t graph,
                                 const cudaGraphNode_t *deps, size_t ndeps,
                                 enum cudaStreamCaptureMode mode) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if ((int)mode < 0 || mode > cudaStreamCaptureModeRelaxed) return rgpu_rt_ret(cudaErrorInvalidValue);
  if (graph && !valid_graph(graph)) return rgpu_rt_ret(cudaErrorInvalidValue);
  if (ndeps && (!deps || !graph)) return rgpu_rt_ret(cudaErrorInvalidValue);
  for (size_t i = 0; i < ndeps; i++)
    if (!valid_node(deps[i]) || deps[i]->g != graph) return rgpu_rt_ret(cudaErrorInvalidValue);
  uint64_t wire;
  int dev;
  e = rgpu_rt_stream_resolve(c, stream, per_thread, &wire, &dev);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  /* The legacy stream synchronizes with everything: it cannot be captured. */
  if (wire == 0) return rgpu_rt_ret(cudaErrorStreamCaptureUnsupported);
  cap_seq *seq = calloc(1, sizeof *seq);
  if (!seq) return rgpu_rt_ret(cudaErrorMemoryAllocation);
  pthread_mutex_lock(&g_cap_lock);
  if (cs_find(wire)) {
    pthread_mutex_unlock(&g_cap_lock);
    free(seq);
    return rgpu_rt_ret(cudaErrorIllegalState);
  }
  seq->id = g_next_seq++;
  seq->mode = mode;
  seq->thread = pthread_self();
  seq->origin = wire;
  unsigned sflags = 0;
  if (stream && stream != cudaStreamPerThread && stream != cudaStreamLegacy) sflags = stream->flags;
  seq->blocking = !(sflags & cudaStreamNonBlocking);
  if (graph) {
    seq->graph = graph;
  } else {
    e = graph_new(&seq->graph);
    seq->own_graph = 1;
  }
  if (e == cudaSuccess) e = cs_join(wire, seq, (cudaGraphNode_t *)deps, ndeps);
  if (e == cudaSuccess) {
    seq->next = g_seqs;
    g_seqs = seq;
  } else {
    if (seq->own_graph && seq->graph) graph_free(seq->graph);
    free(seq);
  }
  pthread_mutex_unlock(&g_cap_lock);
  return rgpu_rt_ret(e);
}

RGPU_API cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  return begin_capture(stream, 0, NULL, NULL, 0, mode);
}
RGPU_API cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, enum cudaStreamCaptureMode mode);
RGPU_API cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  return begin_capture(stream, 1, NULL, NULL, 0, mode);
}
RGPU_API cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
                                                   const cudaGraphNode_t *dependencies,
                                                   const cudaGraphEdgeData *dependencyData,
                                                   size_t numDependencies,
                                                   enum cudaStreamCaptureMode mode) {
  (void)dependencyData;
  if (!graph) {
    rgpu_rt_count_call();
    return rgpu_rt_ret(cudaErrorInvalidValue);
  }
  return begin_capture(stream, 0, graph, dependencies, numDependencies, mode);
}
RGPU_API cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t stream, cudaGraph_t graph,
                                                        const cudaGraphNode_t *dependencies,
                                                        const cudaGraphEdgeData *dependencyData,
                                                        size_t numDependencies,
                                                        enum cudaStreamCaptureMode mode);
RGPU_API cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t stream, cudaGraph_t graph,
                                                        const cudaGraphNode_t *dependencies,
                                                        const cudaGraphEdgeData *dependencyData,
                                                        size_t numDependencies,
                                                        enum cudaStreamCaptureMode mode) {
  (void)dependencyData;
  if (!graph) {
    rgpu_rt_count_call();
    return rgpu_rt_ret(cudaErrorInvalidValue);
  }
  return begin_capture(stream, 1, graph, dependencies, numDependencies, mode);
}

/* Whether node n is one of roots or an ancestor of one. */
static int reaches(cudaGraphNode_t *roots, size_t nroots, cudaGraphNode_t n, int depth) {
  for (size_t i = 0; i < nroots; i++) {
    if (roots[i] == n) return 1;
    if (depth < 4096 && reaches(roots[i]->deps, roots[i]->ndeps, n, depth + 1)) return 1;
  }
  return 0;
}

static cudaError_t end_capture(cudaStream_t stream, int per_thread, cudaGraph_t *pGraph) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!pGraph) return rgpu_rt_ret(cudaErrorInvalidValue);
  uint64_t wire;
  int dev;
  e = rgpu_rt_stream_resolve(c, stream, per_thread, &wire, &dev);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  pthread_mutex_lock(&g_cap_lock);
  cap_stream *cs = cs_find(wire);
  if (!cs) {
    pthread_mutex_unlock(&g_cap_lock);
    return rgpu_rt_ret(cudaErrorIllegalState);
  }
  cap_seq *seq = cs->seq;
  if (seq->origin != wire) {
    /* Ending on a forked stream: CUDA invalidates the whole capture. */
    seq->invalidated = 1;
    pthread_mutex_unlock(&g_cap_lock);
    return rgpu_rt_ret(cudaErrorStreamCaptureUnmatched);
  }
  if (seq->mode != cudaStreamCaptureModeRelaxed && !pthread_equal(seq->thread, pthread_self())) {
    pthread_mutex_unlock(&g_cap_lock);
    return rgpu_rt_ret(cudaErrorStreamCaptureWrongThread);
  }
  /* Every forked stream must have been joined back into the origin. */
  cudaError_t result = cudaSuccess;
  for (size_t i = 0; i < g_ncs && !seq->invalidated; i++) {
    cap_stream *o = &g_cs[i];
    if (o->seq != seq || o->wire == wire) continue;
    for (size_t k = 0; k < o->ndeps; k++)
      if (!reaches(cs->deps, cs->ndeps, o->deps[k], 0)) result = cudaErrorStreamCaptureUnjoined;
  }
  cudaGraph_t g = seq->graph;
  int own = seq->own_graph;
  if (seq->invalidated && result == cudaSuccess) result = cudaErrorStreamCaptureInvalidated;
  seq_end(seq);
  pthread_mutex_unlock(&g_cap_lock);
  if (result != cudaSuccess) {
    if (own) graph_free(g);
    *pGraph = NULL;
    return rgpu_rt_ret(result);
  }
  *pGraph = g;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph) {
  return end_capture(stream, 0, pGraph);
}
RGPU_API cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph);
RGPU_API cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph) {
  return end_capture(stream, 1, pGraph);
}

static cudaError_t capture_info(cudaStream_t stream, int per_thread,
                                enum cudaStreamCaptureStatus *status, unsigned long long *id,
                                cudaGraph_t *graph, const cudaGraphNode_t **deps,
                                const cudaGraphEdgeData **edges, size_t *ndeps) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!status) return rgpu_rt_ret(cudaErrorInvalidValue);
  uint64_t wire;
  int dev;
  e = rgpu_rt_stream_resolve(c, stream, per_thread, &wire, &dev);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  pthread_mutex_lock(&g_cap_lock);
  cap_stream *cs = atomic_load(&g_capturing) ? cs_find(wire) : NULL;
  if (!cs && wire == 0) {
    /* Asking about the legacy stream while a blocking stream captures. */
    for (cap_seq *s = g_seqs; s; s = s->next)
      if (s->blocking) e = cudaErrorStreamCaptureImplicit;
  }
  if (e == cudaSuccess) {
    if (!cs) {
      *status = cudaStreamCaptureStatusNone;
    } else {
      *status = cs->seq->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
      if (id) *id = cs->seq->id;
      if (graph) *graph = cs->seq->graph;
      if (deps) *deps = cs->deps;
      if (ndeps) *ndeps = cs->ndeps;
      if (edges) {
        if (!grow((void **)&cs->edges, &cs->edges_cap, cs->ndeps ? cs->ndeps : 1, sizeof *cs->edges))
          memset(cs->edges, 0, cs->edges_cap * sizeof *cs->edges);
        *edges = cs->edges;
      }
    }
  }
  pthread_mutex_unlock(&g_cap_lock);
  return rgpu_rt_ret(e);
}

RGPU_API cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus) {
  return capture_info(stream, 0, pCaptureStatus, NULL, NULL, NULL, NULL, NULL);
}
RGPU_API cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream,
                                                enum cudaStreamCaptureStatus *pCaptureStatus);
RGPU_API cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream,
                                                enum cudaStreamCaptureStatus *pCaptureStatus) {
  return capture_info(stream, 1, pCaptureStatus, NULL, NULL, NULL, NULL, NULL);
}

RGPU_API cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream,
                                              enum cudaStreamCaptureStatus *captureStatus_out,
                                              unsigned long long *id_out, cudaGraph_t *graph_out,
                                              const cudaGraphNode_t **dependencies_out,
                                              const cudaGraphEdgeData **edgeData_out,
                                              size_t *numDependencies_out) {
  return capture_info(stream, 0, captureStatus_out, id_out, graph_out, dependencies_out,
                      edgeData_out, numDependencies_out);
}
RGPU_API cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t stream,
                                                   enum cudaStreamCaptureStatus *captureStatus_out,
                                                   unsigned long long *id_out, cudaGraph_t *graph_out,
                                                   const cudaGraphNode_t **dependencies_out,
                                                   const cudaGraphEdgeData **edgeData_out,
                                                   size_t *numDependencies_out);
RGPU_API cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t stream,
                                                   enum cudaStreamCaptureStatus *captureStatus_out,
                                                   unsigned long long *id_out, cudaGraph_t *graph_out,
                                                   const cudaGraphNode_t **dependencies_out,
                                                   const cudaGraphEdgeData **edgeData_out,
                                                   size_t *numDependencies_out) {
  return capture_info(stream, 1, captureStatus_out, id_out, graph_out, dependencies_out,
                      edgeData_out, numDependencies_out);
}

static cudaError_t update_capture_deps(cudaStream_t stream, int per_thread, cudaGraphNode_t *deps,
                                       size_t n, unsigned flags) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if ((flags & ~1u) || (n && !deps)) return rgpu_rt_ret(cudaErrorInvalidValue);
  uint64_t wire;
  int dev;
  e = rgpu_rt_stream_resolve(c, stream, per_thread, &wire, &dev);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  pthread_mutex_lock(&g_cap_lock);
  cap_stream *cs = cs_find(wire);
  if (!cs) e = cudaErrorIllegalState;
  for (size_t i = 0; e == cudaSuccess && i < n; i++)
    if (!valid_node(deps[i]) || deps[i]->g != cs->seq->graph) e = cudaErrorInvalidValue;
  if (e == cudaSuccess) {
    if (flags == cudaStreamSetCaptureDependencies) cs->ndeps = 0;
    for (size_t i = 0; e == cudaSuccess && i < n; i++) {
      int dup = 0;
      for (size_t k = 0; k < cs->ndeps; k++) dup |= cs->deps[k] == deps[i];
      if (dup) continue;
      if (grow((void **)&cs->deps, &cs->cap, cs->ndeps + 1, sizeof *cs->deps))
        e = cudaErrorMemoryAllocation;
      else
        cs->deps[cs->ndeps++] = deps[i];
    }
  }
  pthread_mutex_unlock(&g_cap_lock);
  return rgpu_rt_ret(e);
}

RGPU_API cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t stream, cudaGraphNode_t *dependencies,
                                                         const cudaGraphEdgeData *dependencyData,
                                                         size_t numDependencies, unsigned int flags) {
  (void)dependencyData;
  return update_capture_deps(stream, 0, dependencies, numDependencies, flags);
}
RGPU_API cudaError_t cudaStreamUpdateCaptureDependencies_ptsz(cudaStream_t stream,
                                                              cudaGraphNode_t *dependencies,
                                                              const cudaGraphEdgeData *dependencyData,
                                                              size_t numDependencies,
                                                              unsigned int flags);
RGPU_API cudaError_t cudaStreamUpdateCaptureDependencies_ptsz(cudaStream_t stream,
                                                              cudaGraphNode_t *dependencies,
                                                              const cudaGraphEdgeData *dependencyData,
                                                              size_t numDependencies,
                                                              unsigned int flags) {
  (void)dependencyData;
  return update_capture_deps(stream, 1, dependencies, numDependencies, flags);
}

RGPU_API cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode) {
  rgpu_rt_count_call();
  if (!mode || (int)*mode < 0 || *mode > cudaStreamCaptureModeRelaxed)
    return rgpu_rt_ret(cudaErrorInvalidValue);
  enum cudaStreamCaptureMode old = tl_mode;
  tl_mode = *mode;
  *mode = old;
  return cudaSuccess;
}
