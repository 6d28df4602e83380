/* softgpu CUDA graphs: explicit construction, instantiation, update and
 * launch (stream capture is in sg_graph_capture.c).
 *
 * A graph is an array of nodes in creation order, each with the list of
 * nodes it depends on.  Instantiation makes a private deep copy (the exec)
 * and sorts it topologically once.  Launching expands the exec into the
 * stream's ordinary ops (launch, copy, memset, host function, event record,
 * event wait) in that order and queues them as one unit, so every ordering
 * rule, the sticky-error behaviour of a faulting kernel and the event
 * bookkeeping are exactly those of the same work issued to the stream one
 * call at a time.  Independent branches therefore run one after another;
 * that respects every dependency and is what correctness needs.
 *
 * Nodes keep their own copies of everything (packed kernel arguments, copy
 * descriptors, embedded child graphs), and each queued op gets its own copy
 * again, so a graph or exec may be changed or destroyed while launches of
 * it are still running, as CUDA allows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sg_graph.h"
#include "rgpu_array.h"
#include "rgpu_fifo.h"

pthread_mutex_t sg_graph_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- kernel parameters -------------------------------------------------- */

static void kern_clear(sg_kern *k) {
  if (k->fn) sg_module_unref(k->fn->mod);
  free(k->buf);
  free(k->kparams);
  memset(k, 0, sizeof *k);
}

CUresult sg_kern_from_launch(sg_kern *k, sg_function *f, const unsigned grid[3], const unsigned block[3],
                             unsigned shared, void *buf, size_t size) {
#ifdef SG_HAVE_PTX
  memset(k, 0, sizeof *k);
  int np = sg_ptx_kernel_param_count(f->k);
  k->buf = malloc(size ? size : 1);
  k->kparams = calloc((size_t)(np > 0 ? np : 1), sizeof *k->kparams);
  if (!k->buf || !k->kparams) {
    free(k->buf);
    free(k->kparams);
    memset(k, 0, sizeof *k);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (size) memcpy(k->buf, buf, size);
  k->size = size;
  for (int i = 0; i < np; i++) {
    size_t off = 0, sz = 0;
    sg_ptx_kernel_param_info(f->k, i, &off, &sz);
    k->kparams[i] = (char *)k->buf + off;
  }
  k->nparams = np;
  memcpy(k->grid, grid, sizeof k->grid);
  memcpy(k->block, block, sizeof k->block);
  k->shared = shared;
  k->fn = f;
  atomic_fetch_add(&f->mod->refs, 1);
  return CUDA_SUCCESS;
#else
  (void)k, (void)f, (void)grid, (void)block, (void)shared, (void)buf, (void)size;
  SG_UNSUPPORTED("kernel graph nodes (softgpu built without the PTX interpreter)");
#endif
}

/* Validates a CUDA_KERNEL_NODE_PARAMS the way cuLaunchKernel validates its
 * arguments and packs the parameters into a new sg_kern. */
static CUresult kern_from_params(sg_kern *k, const CUDA_KERNEL_NODE_PARAMS *p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  sg_function *f = p->func;
  if (!f) {
    if (p->kern) {
      static atomic_int once;
      if (!atomic_exchange(&once, 1)) RGPU_WARN("kernel graph nodes by CUkernel (cuLibrary*) are not implemented");
      return CUDA_ERROR_NOT_SUPPORTED;
    }
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!sg_handle_ok(f, SG_H_FUNCTION)) return CUDA_ERROR_INVALID_HANDLE;
  CUresult r = sg_ctx_usable(f->mod->ctx);
  if (r) return r;
#ifndef SG_HAVE_PTX
  SG_UNSUPPORTED("kernel graph nodes (softgpu built without the PTX interpreter)");
#else
  const sg_ptx_kernel *kk = f->k;
  unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
  unsigned block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
  /* Same limits, and the same answer (INVALID_VALUE), as cuLaunchKernel. */
  if (!grid[0] || !grid[1] || !grid[2] || !block[0] || !block[1] || !block[2]) return CUDA_ERROR_INVALID_VALUE;
  if (block[0] > 1024 || block[1] > 1024 || block[2] > 64) return CUDA_ERROR_INVALID_VALUE;
  uint64_t threads = (uint64_t)block[0] * block[1] * block[2];
  int maxt = sg_ptx_kernel_max_threads(kk);
  if (threads > 1024 || (maxt > 0 && threads > (uint64_t)maxt)) return CUDA_ERROR_INVALID_VALUE;
  if (grid[0] > 2147483647u || grid[1] > 65535 || grid[2] > 65535) return CUDA_ERROR_INVALID_VALUE;
  if (p->sharedMemBytes > (unsigned)f->max_dynamic_shared) return CUDA_ERROR_INVALID_VALUE;
  if (p->kernelParams && p->extra) return CUDA_ERROR_INVALID_VALUE;
  int np = sg_ptx_kernel_param_count(kk);
  size_t need = sg_ptx_kernel_param_bytes(kk);
  char *buf = calloc(1, need ? need : 1);
  if (!buf) return CUDA_ERROR_OUT_OF_MEMORY;
  if (p->extra) {
    const void *ptr = NULL;
    const size_t *psize = NULL;
    for (size_t i = 0; p->extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (i > 64) goto bad; /* unterminated list */
      if (p->extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) ptr = p->extra[i + 1];
      else if (p->extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) psize = p->extra[i + 1];
      else goto bad;
    }
    if (!ptr || !psize) goto bad;
    if (*psize > need) {
      free(buf);
      return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES; /* as cuLaunchKernel */
    }
    memcpy(buf, ptr, *psize);
  } else if (np > 0) {
    if (!p->kernelParams) goto bad;
    for (int i = 0; i < np; i++) {
      size_t off, sz;
      if (!p->kernelParams[i] || sg_ptx_kernel_param_info(kk, i, &off, &sz) != 0 || off + sz > need) goto bad;
      memcpy(buf + off, p->kernelParams[i], sz);
    }
  }
  r = sg_kern_from_launch(k, f, grid, block, p->sharedMemBytes, buf, need);
  free(buf);
  return r;
bad:
  free(buf);
  return CUDA_ERROR_INVALID_VALUE;
#endif
}

static CUresult kern_copy(sg_kern *dst, const sg_kern *src) {
  if (!src->fn) {
    memset(dst, 0, sizeof *dst);
    return CUDA_SUCCESS;
  }
  return sg_kern_from_launch(dst, src->fn, src->grid, src->block, src->shared, src->buf, src->size);
}

static void kern_get(const sg_kern *k, CUDA_KERNEL_NODE_PARAMS *p) {
  memset(p, 0, sizeof *p);
  p->func = k->fn;
  p->gridDimX = k->grid[0];
  p->gridDimY = k->grid[1];
  p->gridDimZ = k->grid[2];
  p->blockDimX = k->block[0];
  p->blockDimY = k->block[1];
  p->blockDimZ = k->block[2];
  p->sharedMemBytes = k->shared;
  p->kernelParams = k->kparams;
  p->ctx = k->fn ? k->fn->mod->ctx : NULL;
}

/* ---- copies and memsets ------------------------------------------------- */

static int mul_add(uint64_t a, uint64_t b, uint64_t c, uint64_t *out) {
  uint64_t m;
  if (__builtin_mul_overflow(a, b, &m) || __builtin_add_overflow(m, c, out)) return -1;
  return 0;
}

/* 2D/3D copies (arrays too) are sg_array.c's copy engine, shared with
 * cuMemcpy2D/3D: sg_copy3d_resolve, sg_memcpy3d_check, sg_copy3d_run. */

static CUresult memset_check(const CUDA_MEMSET_NODE_PARAMS *p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  unsigned es = p->elementSize;
  if (es != 1 && es != 2 && es != 4) return CUDA_ERROR_INVALID_VALUE;
  if (!p->dst || p->dst % es || !p->width || !p->height) return CUDA_ERROR_INVALID_VALUE;
  uint64_t row, span;
  if (__builtin_mul_overflow((uint64_t)p->width, (uint64_t)es, &row)) return CUDA_ERROR_INVALID_VALUE;
  if (p->height > 1 && (p->pitch < row || p->pitch % es)) return CUDA_ERROR_INVALID_VALUE;
  if (mul_add(p->height - 1, p->pitch, row, &span)) return CUDA_ERROR_INVALID_VALUE;
  if (sg_mem_check(p->dst, span, 1, NULL) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

static void memset2d_run(sg_ctx *ctx, void *arg) {
  CUDA_MEMSET_NODE_PARAMS *p = arg;
  size_t row = p->width * p->elementSize;
  uint64_t span = (uint64_t)(p->height - 1) * p->pitch + row;
  sg_mem_use_begin();
  if (sg_mem_check(p->dst, span, 1, NULL) != CUDA_SUCCESS) {
    sg_mem_use_end();
    RGPU_WARN("graph memset node at 0x%llx hit freed memory", (unsigned long long)p->dst);
    sg_ctx_set_sticky(ctx, CUDA_ERROR_ILLEGAL_ADDRESS);
    return;
  }
  for (size_t y = 0; y < p->height; y++) {
    char *d = (char *)(uintptr_t)(p->dst + y * p->pitch);
    if (p->elementSize == 1) {
      memset(d, (int)(p->value & 0xff), p->width);
    } else if (p->elementSize == 2) {
      uint16_t v = (uint16_t)p->value;
      for (size_t i = 0; i < p->width; i++) memcpy(d + 2 * i, &v, 2);
    } else {
      uint32_t v = p->value;
      for (size_t i = 0; i < p->width; i++) memcpy(d + 4 * i, &v, 4);
    }
  }
  sg_mem_use_end();
}

/* ---- graphs and nodes --------------------------------------------------- */

CUresult sg_graph_new(sg_graph **out) {
  sg_graph *g = calloc(1, sizeof *g);
  if (!g) return CUDA_ERROR_OUT_OF_MEMORY;
  if (sg_handle_add(g, SG_H_GRAPH) != 0) {
    free(g);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *out = g;
  return CUDA_SUCCESS;
}

static void node_release_params(sg_gnode *n) {
  switch (n->type) {
  case CU_GRAPH_NODE_TYPE_KERNEL:
    kern_clear(&n->u.k);
    break;
  case CU_GRAPH_NODE_TYPE_GRAPH:
    if (n->u.child) sg_graph_free(n->u.child);
    n->u.child = NULL;
    break;
  case CU_GRAPH_NODE_TYPE_CONDITIONAL:
    sg_cond_node_release(n);
    break;
  default:
    break;
  }
}

/* Frees a node without touching the rest of its graph (whole-graph free). */
static void node_free_only(sg_gnode *n) {
  node_release_params(n);
  sg_handle_del(n);
  free(n->deps);
  free(n);
}

void sg_graph_free(sg_graph *g) {
  if (!g) return;
  for (int i = 0; i < g->n; i++) node_free_only(g->nodes[i]);
  sg_cond_graph_release(g);
  free(g->nodes);
  free(g->order);
  sg_handle_del(g);
  free(g);
}

static int has_dep(const sg_gnode *n, const sg_gnode *d) {
  for (int i = 0; i < n->ndeps; i++)
    if (n->deps[i] == d) return 1;
  return 0;
}

static CUresult dep_push(sg_gnode *n, sg_gnode *d) {
  if (RGPU_ARRAY_RESERVE(n->deps, n->capdeps, (size_t)n->ndeps + 1, 4)) return CUDA_ERROR_OUT_OF_MEMORY;
  n->deps[n->ndeps++] = d;
  return CUDA_SUCCESS;
}

CUresult sg_graph_add(sg_graph *g, CUgraphNodeType t, sg_gnode *const *deps, size_t ndeps, sg_gnode **out) {
  if (RGPU_ARRAY_RESERVE(g->nodes, g->cap, (size_t)g->n + 1, 8)) return CUDA_ERROR_OUT_OF_MEMORY;
  sg_gnode *n = calloc(1, sizeof *n);
  if (!n) return CUDA_ERROR_OUT_OF_MEMORY;
  n->g = g;
  n->type = t;
  for (size_t i = 0; i < ndeps; i++)
    if (dep_push(n, deps[i]) != CUDA_SUCCESS) {
      free(n->deps);
      free(n);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  if (sg_handle_add(n, SG_H_GRAPH_NODE) != 0) {
    free(n->deps);
    free(n);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  n->idx = g->n;
  g->nodes[g->n++] = n;
  *out = n;
  return CUDA_SUCCESS;
}

void sg_gnode_free(sg_gnode *n) {
  sg_graph *g = n->g;
  for (int i = 0; i < g->n; i++) {
    sg_gnode *m = g->nodes[i];
    for (int j = 0; j < m->ndeps;)
      if (m->deps[j] == n) m->deps[j] = m->deps[--m->ndeps];
      else j++;
  }
  for (int i = n->idx + 1; i < g->n; i++) {
    g->nodes[i - 1] = g->nodes[i];
    g->nodes[i - 1]->idx = i - 1;
  }
  g->n--;
  node_free_only(n);
}

/* Copies n's parameters into m (same type), deep. */
static CUresult params_copy(sg_gnode *m, const sg_gnode *n) {
  switch (n->type) {
  case CU_GRAPH_NODE_TYPE_KERNEL:
    return kern_copy(&m->u.k, &n->u.k);
  case CU_GRAPH_NODE_TYPE_GRAPH:
    m->u.child = NULL;
    if (sg_graph_clone(n->u.child, &m->u.child) != CUDA_SUCCESS) return CUDA_ERROR_OUT_OF_MEMORY;
    m->u.child->owner = m;
    return CUDA_SUCCESS;
  case CU_GRAPH_NODE_TYPE_CONDITIONAL:
    return sg_cond_node_copy(m, n);
  default:
    m->u = n->u;
    return CUDA_SUCCESS;
  }
}

CUresult sg_graph_clone(const sg_graph *src, sg_graph **out) {
  sg_graph *g;
  CUresult r = sg_graph_new(&g);
  if (r) return r;
  for (int i = 0; i < src->n; i++) {
    const sg_gnode *n = src->nodes[i];
    sg_gnode *m;
    r = sg_graph_add(g, n->type, NULL, 0, &m);
    if (!r) {
      r = params_copy(m, n);
      if (r) m->type = CU_GRAPH_NODE_TYPE_EMPTY; /* nothing to release */
    }
    if (!r) m->orig = (sg_gnode *)n;
    if (r) {
      sg_graph_free(g);
      return r;
    }
  }
  /* Edges once every node exists: a dependency may name a later node. */
  for (int i = 0; i < src->n; i++) {
    const sg_gnode *n = src->nodes[i];
    for (int j = 0; j < n->ndeps && !r; j++) r = dep_push(g->nodes[i], g->nodes[n->deps[j]->idx]);
    if (r) {
      sg_graph_free(g);
      return r;
    }
  }
  *out = g;
  return CUDA_SUCCESS;
}

/* Validates a dependency list for graph g. */
static CUresult deps_check(sg_graph *g, const CUgraphNode *deps, size_t n) {
  if (n && !deps) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < n; i++) {
    if (!sg_handle_ok(deps[i], SG_H_GRAPH_NODE) || deps[i]->g != g) return CUDA_ERROR_INVALID_VALUE;
    for (size_t j = 0; j < i; j++)
      if (deps[j] == deps[i]) return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

static CUresult graph_check(CUgraph g) {
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  return sg_handle_ok(g, SG_H_GRAPH) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult node_check(CUgraphNode n, CUgraphNodeType t) {
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!sg_handle_ok(n, SG_H_GRAPH_NODE)) return CUDA_ERROR_INVALID_VALUE;
  if ((int)t >= 0 && n->type != t) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}
#define ANY_TYPE ((CUgraphNodeType)-1)

/* Common front half of every cuGraphAdd*Node: checks, then adds a node whose
 * parameters the caller fills in (still under the lock). */
CUresult sg_graph_add_begin(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps, CUgraphNodeType t,
                          sg_gnode **n) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = graph_check(g);
  if (r) return r;
  r = deps_check(g, deps, ndeps);
  if (r) return r;
  return sg_graph_add(g, t, deps, ndeps, n);
}

SG_EXPORT CUresult CUDAAPI cuGraphCreate(CUgraph *phGraph, unsigned int flags) {
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!phGraph || flags) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sg_graph_lock);
  CUresult r = sg_graph_new(phGraph);
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

SG_EXPORT CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph) {
  pthread_mutex_lock(&sg_graph_lock);
  CUresult r = graph_check(hGraph);
  /* A child graph belongs to its node. */
  if (!r && hGraph->owner) r = CUDA_ERROR_INVALID_VALUE;
  if (!r) sg_graph_free(hGraph);
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

SG_EXPORT CUresult CUDAAPI cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph) {
  if (!phGraphClone) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sg_graph_lock);
  CUresult r = graph_check(originalGraph);
  if (!r) r = sg_graph_clone(originalGraph, phGraphClone);
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

static sg_gnode *find_in_clone(sg_graph *g, sg_gnode *orig) {
  for (int i = 0; i < g->n; i++) {
    sg_gnode *m = g->nodes[i];
    if (m->orig == orig) return m;
    if (m->type == CU_GRAPH_NODE_TYPE_GRAPH && m->u.child) {
      sg_gnode *c = find_in_clone(m->u.child, orig);
      if (c) return c;
    }
  }
  return NULL;
}

SG_EXPORT CUresult CUDAAPI cuGraphNodeFindInClone(CUgraphNode *phNode, CUgraphNode hOriginalNode, CUgraph hClonedGraph) {
  if (!phNode) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sg_graph_lock);
  CUresult r = graph_check(hClonedGraph);
  if (!r) r = node_check(hOriginalNode, ANY_TYPE);
  if (!r) {
    sg_gnode *m = find_in_clone(hClonedGraph, hOriginalNode);
    if (m) *phNode = m;
    else r = CUDA_ERROR_INVALID_VALUE;
  }
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

SG_EXPORT CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                   const CUgraphNode *dependencies, size_t numDependencies,
                                                   const CUDA_KERNEL_NODE_PARAMS *nodeParams) {
  sg_kern k;
  pthread_mutex_lock(&sg_graph_lock);
  CUresult r = kern_from_params(&k, nodeParams);
  sg_gnode *n = NULL;
  if (!r) {
    r = sg_graph_add_begin(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_KERNEL, &n);
    if (r) kern_clear(&k);
  }
  if (!r) {
    n->u.k = k;
    *phGraphNode = n;
  }
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

static CUresult ctx_arg(CUcontext c, sg_ctx **out) {
  if (c) {
    CUresult r = sg_ctx_usable(c);
    if (r) return r;
    *out = c;
    return CUDA_SUCCESS;
  }
  return sg_current(out);
}

/* Copy and memset nodes run in a context (ctx, or the current one): the
 * node takes the checked parameters (CHECK, a CUresult expression) and the
 * context into its union member MEMBER.  The names are the driver API's
 * parameter names of cuGraphAdd{Memcpy,Memset}Node. */
#define ADD_CTX_NODE(CHECK, TYPE, MEMBER, PARAMS)                                             \
  sg_ctx *c;                                                                                  \
  CUresult r = ctx_arg(ctx, &c);                                                              \
  if (r) return r;                                                                            \
  pthread_mutex_lock(&sg_graph_lock);                                                         \
  r = (CHECK);                                                                                \
  sg_gnode *n = NULL;                                                                         \
  if (!r) r = sg_graph_add_begin(phGraphNode, hGraph, dependencies, numDependencies, (TYPE), &n);      \
  if (!r) {                                                                                   \
    n->u.MEMBER.p = *(PARAMS);                                                                \
    n->u.MEMBER.ctx = c;                                                                      \
    *phGraphNode = n;                                                                         \
  }                                                                                           \
  pthread_mutex_unlock(&sg_graph_lock);                                                       \
  return r

SG_EXPORT CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                const CUgraphNode *dependencies, size_t numDependencies,
                                                const CUDA_MEMCPY3D *copyParams, CUcontext ctx) {
  ADD_CTX_NODE(sg_memcpy3d_check(copyParams), CU_GRAPH_NODE_TYPE_MEMCPY, cp, copyParams);
}

SG_EXPORT CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                const CUgraphNode *dependencies, size_t numDependencies,
                                                const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx) {
  ADD_CTX_NODE(memset_check(memsetParams), CU_GRAPH_NODE_TYPE_MEMSET, ms, memsetParams);
}

SG_EXPORT CUresult CUDAAPI cuGraphAddHostNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                              const CUgraphNode *dependencies, size_t numDependencies,
                                              const CUDA_HOST_NODE_PARAMS *nodeParams) {
  if (!nodeParams || !nodeParams->fn) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sg_graph_lock);
  sg_gnode *n = NULL;
  CUresult r = sg_graph_add_begin(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_HOST, &n);
  if (!r) {
    n->u.host = *nodeParams;
    *phGraphNode = n;
  }
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

/* 1 if g is h or contains h (a child graph may not embed its own parent). */
static int graph_contains(const sg_graph *g, const sg_graph *h) {
  if (g == h) return 1;
  for (int i = 0; i < g->n; i++)
    if (g->nodes[i]->type == CU_GRAPH_NODE_TYPE_GRAPH && graph_contains(g->nodes[i]->u.child, h)) return 1;
  return 0;
}

SG_EXPORT CUresult CUDAAPI cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                    const CUgraphNode *dependencies, size_t numDependencies,
                                                    CUgraph childGraph) {
  pthread_mutex_lock(&sg_graph_lock);
  CUresult r = graph_check(childGraph);
  sg_graph *copy = NULL;
  if (!r && sg_handle_ok(hGraph, SG_H_GRAPH) && graph_contains(childGraph, hGraph)) r = CUDA_ERROR_INVALID_VALUE;
  if (!r) r = sg_graph_clone(childGraph, &copy);
  sg_gnode *n = NULL;
  if (!r) {
    r = sg_graph_add_begin(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_GRAPH, &n);
    if (r) sg_graph_free(copy);
  }
  if (!r) {
    n->u.child = copy;
    copy->owner = n;
    *phGraphNode = n;
  }
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

SG_EXPORT CUresult CUDAAPI cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                               const CUgraphNode *dependencies, size_t numDependencies) {
  pthread_mutex_lock(&sg_graph_lock);
  sg_gnode *n = NULL;
  CUresult r = sg_graph_add_begin(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_EMPTY, &n);
  if (!r) *phGraphNode = n;
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

static CUresult add_event_node(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps, CUevent ev,
                               CUgraphNodeType t) {
  if (!sg_handle_ok(ev, SG_H_EVENT)) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sg_graph_lock);
  sg_gnode *n = NULL;
  CUresult r = sg_graph_add_begin(out, g, deps, ndeps, t, &n);
  if (!r) {
    n->u.ev = ev;
    *out = n;
  }
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

SG_EXPORT CUresult CUDAAPI cuGraphAddEventRecordNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                     const CUgraphNode *dependencies, size_t numDependencies,
                                                     CUevent event) {
  return add_event_node(phGraphNode, hGraph, dependencies, numDependencies, event, CU_GRAPH_NODE_TYPE_EVENT_RECORD);
}

SG_EXPORT CUresult CUDAAPI cuGraphAddEventWaitNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                   const CUgraphNode *dependencies, size_t numDependencies,
                                                   CUevent event) {
  return add_event_node(phGraphNode, hGraph, dependencies, numDependencies, event, CU_GRAPH_NODE_TYPE_WAIT_EVENT);
}

/* ---- node parameters: the accessors, from one table ----------------------- */

/* Per kind: a node's parameters as the API struct; a struct checked before
 * the lock; the struct checked and taken into the node (sg_graph_lock
 * held).  The accessors themselves come from the table in
 * common/rgpu_graph_node_params.def. */
static void get_Kernel(const sg_gnode *n, CUDA_KERNEL_NODE_PARAMS *out) { kern_get(&n->u.k, out); }
static CUresult precheck_Kernel(const CUDA_KERNEL_NODE_PARAMS *in) { (void)in; return CUDA_SUCCESS; }
static CUresult set_Kernel(sg_gnode *n, const CUDA_KERNEL_NODE_PARAMS *in) {
  sg_kern k;
  CUresult r = kern_from_params(&k, in);
  if (r) return r;
  kern_clear(&n->u.k);
  n->u.k = k;
  return CUDA_SUCCESS;
}
static void get_Memcpy(const sg_gnode *n, CUDA_MEMCPY3D *out) { *out = n->u.cp.p; }
static CUresult precheck_Memcpy(const CUDA_MEMCPY3D *in) { (void)in; return CUDA_SUCCESS; }
static CUresult set_Memcpy(sg_gnode *n, const CUDA_MEMCPY3D *in) {
  CUresult r = sg_memcpy3d_check(in);
  if (!r) n->u.cp.p = *in;
  return r;
}
static void get_Memset(const sg_gnode *n, CUDA_MEMSET_NODE_PARAMS *out) { *out = n->u.ms.p; }
static CUresult precheck_Memset(const CUDA_MEMSET_NODE_PARAMS *in) { (void)in; return CUDA_SUCCESS; }
static CUresult set_Memset(sg_gnode *n, const CUDA_MEMSET_NODE_PARAMS *in) {
  CUresult r = memset_check(in);
  if (!r) n->u.ms.p = *in;
  return r;
}
static void get_Host(const sg_gnode *n, CUDA_HOST_NODE_PARAMS *out) { *out = n->u.host; }
static CUresult precheck_Host(const CUDA_HOST_NODE_PARAMS *in) {
  return !in || !in->fn ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}
static CUresult set_Host(sg_gnode *n, const CUDA_HOST_NODE_PARAMS *in) {
  n->u.host = *in;
  return CUDA_SUCCESS;
}

#define RGPU_GRAPH_NODE_PARAMS(Kind, rt_type, RtParams, drv_type, DrvParams, drv_suffix)         \
  SG_EXPORT CUresult CUDAAPI cuGraph##Kind##NodeGetParams##drv_suffix(CUgraphNode hNode,           \
                                                                   DrvParams *nodeParams) {       \
    if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;                                             \
    pthread_mutex_lock(&sg_graph_lock);                                                           \
    CUresult r = node_check(hNode, drv_type);                                                     \
    if (!r) get_##Kind(hNode, nodeParams);                                                        \
    pthread_mutex_unlock(&sg_graph_lock);                                                         \
    return r;                                                                                     \
  }                                                                                               \
  SG_EXPORT CUresult CUDAAPI cuGraph##Kind##NodeSetParams##drv_suffix(CUgraphNode hNode,           \
                                                                   const DrvParams *nodeParams) { \
    CUresult r = precheck_##Kind(nodeParams);                                                     \
    if (r) return r;                                                                              \
    pthread_mutex_lock(&sg_graph_lock);                                                           \
    r = node_check(hNode, drv_type);                                                              \
    if (!r) r = set_##Kind(hNode, nodeParams);                                                    \
    pthread_mutex_unlock(&sg_graph_lock);                                                         \
    return r;                                                                                     \
  }
#define RGPU_GRAPH_NODE_EVENT(Kind, rt_type, drv_type)                                             \
  SG_EXPORT CUresult CUDAAPI cuGraph##Kind##NodeGetEvent(CUgraphNode hNode, CUevent *event_out) {  \
    if (!event_out) return CUDA_ERROR_INVALID_VALUE;                                              \
    pthread_mutex_lock(&sg_graph_lock);                                                           \
    CUresult r = node_check(hNode, drv_type);                                                     \
    if (!r) *event_out = hNode->u.ev;                                                             \
    pthread_mutex_unlock(&sg_graph_lock);                                                         \
    return r;                                                                                     \
  }                                                                                               \
  SG_EXPORT CUresult CUDAAPI cuGraph##Kind##NodeSetEvent(CUgraphNode hNode, CUevent event) {       \
    if (!sg_handle_ok(event, SG_H_EVENT)) return CUDA_ERROR_INVALID_VALUE;                        \
    pthread_mutex_lock(&sg_graph_lock);                                                           \
    CUresult r = node_check(hNode, drv_type);                                                     \
    if (!r) hNode->u.ev = event;                                                                  \
    pthread_mutex_unlock(&sg_graph_lock);                                                         \
    return r;                                                                                     \
  }
#define RGPU_GRAPH_NODE_CHILD(Kind, rt_type, drv_type)                                             \
  SG_EXPORT CUresult CUDAAPI cuGraph##Kind##NodeGetGraph(CUgraphNode hNode, CUgraph *phGraph) {    \
    if (!phGraph) return CUDA_ERROR_INVALID_VALUE;                                                \
    pthread_mutex_lock(&sg_graph_lock);                                                           \
    CUresult r = node_check(hNode, drv_type);                                                     \
    if (!r) *phGraph = hNode->u.child;                                                            \
    pthread_mutex_unlock(&sg_graph_lock);                                                         \
    return r;                                                                                     \
  }
#include "rgpu_graph_node_params.def"

SG_EXPORT CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type) {
  if (!type) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sg_graph_lock);
  CUresult r = node_check(hNode, ANY_TYPE);
  if (!r) *type = hNode->type;
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

/* The "array of unknown size" convention of cuGraphGetNodes and friends:
 * NULL array: report the count; otherwise fill up to *num, NULL the rest,
 * and report how many were written. */
static void fill_nodes(CUgraphNode *out, size_t *num, sg_gnode *const *src, size_t count) {
  if (!out) {
    *num = count;
    return;
  }
  size_t k = *num < count ? *num : count;
  for (size_t i = 0; i < k; i++) out[i] = src[i];
  for (size_t i = k; i < *num; i++) out[i] = NULL;
  *num = k;
}

SG_EXPORT CUresult CUDAAPI cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes) {
  if (!numNodes) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sg_graph_lock);
  CUresult r = graph_check(hGraph);
  if (!r) fill_nodes(nodes, numNodes, hGraph->nodes, (size_t)hGraph->n);
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

SG_EXPORT CUresult CUDAAPI cuGraphGetRootNodes(CUgraph hGraph, CUgraphNode *rootNodes, size_t *numRootNodes) {
  if (!numRootNodes) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sg_graph_lock);
  CUresult r = graph_check(hGraph);
  if (!r) {
    sg_gnode **roots = malloc((size_t)(hGraph->n ? hGraph->n : 1) * sizeof *roots);
    if (!roots) {
      r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
      size_t k = 0;
      for (int i = 0; i < hGraph->n; i++)
        if (!hGraph->nodes[i]->ndeps) roots[k++] = hGraph->nodes[i];
      fill_nodes(rootNodes, numRootNodes, roots, k);
      free(roots);
    }
  }
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

SG_EXPORT CUresult CUDAAPI cuGraphGetEdges_v2(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to,
                                              CUgraphEdgeData *edgeData, size_t *numEdges) {
  if (!numEdges || (!from) != (!to) || (edgeData && !from)) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sg_graph_lock);
  CUresult r = graph_check(hGraph);
  if (!r) {
    size_t k = 0, cap = *numEdges;
    for (int i = 0; i < hGraph->n; i++) {
      sg_gnode *n = hGraph->nodes[i];
      for (int j = 0; j < n->ndeps; j++, k++) {
        if (!from || k >= cap) continue;
        from[k] = n->deps[j];
        to[k] = n;
        if (edgeData) memset(&edgeData[k], 0, sizeof edgeData[k]);
      }
    }
    if (!from) {
      *numEdges = k;
    } else {
      for (size_t i = k; i < cap; i++) {
        from[i] = to[i] = NULL;
        if (edgeData) memset(&edgeData[i], 0, sizeof edgeData[i]);
      }
      *numEdges = k < cap ? k : cap;
    }
  }
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

SG_EXPORT CUresult CUDAAPI cuGraphNodeGetDependencies_v2(CUgraphNode hNode, CUgraphNode *dependencies,
                                                         CUgraphEdgeData *edgeData, size_t *numDependencies) {
  if (!numDependencies) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sg_graph_lock);
  CUresult r = node_check(hNode, ANY_TYPE);
  if (!r) {
    size_t cap = *numDependencies;
    fill_nodes(dependencies, numDependencies, hNode->deps, (size_t)hNode->ndeps);
    if (edgeData && dependencies) memset(edgeData, 0, cap * sizeof *edgeData);
  }
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

SG_EXPORT CUresult CUDAAPI cuGraphNodeGetDependentNodes_v2(CUgraphNode hNode, CUgraphNode *dependentNodes,
                                                           CUgraphEdgeData *edgeData, size_t *numDependentNodes) {
  if (!numDependentNodes) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sg_graph_lock);
  CUresult r = node_check(hNode, ANY_TYPE);
  if (!r) {
    sg_graph *g = hNode->g;
    sg_gnode **outs = malloc((size_t)g->n * sizeof *outs);
    if (!outs) {
      r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
      size_t k = 0, cap = *numDependentNodes;
      for (int i = 0; i < g->n; i++)
        if (has_dep(g->nodes[i], hNode)) outs[k++] = g->nodes[i];
      fill_nodes(dependentNodes, numDependentNodes, outs, k);
      if (edgeData && dependentNodes) memset(edgeData, 0, cap * sizeof *edgeData);
      free(outs);
    }
  }
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

/* 1 if a depends on b, directly or transitively (or is b). */
static int depends_on(const sg_gnode *a, const sg_gnode *b, unsigned char *seen) {
  if (a == b) return 1;
  if (seen[a->idx]) return 0;
  seen[a->idx] = 1;
  for (int i = 0; i < a->ndeps; i++)
    if (depends_on(a->deps[i], b, seen)) return 1;
  return 0;
}

static CUresult edges_check(CUgraph g, const CUgraphNode *from, const CUgraphNode *to, const CUgraphEdgeData *ed,
                            size_t n) {
  CUresult r = graph_check(g);
  if (r) return r;
  if (n && (!from || !to)) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < n; i++) {
    if (!sg_handle_ok(from[i], SG_H_GRAPH_NODE) || !sg_handle_ok(to[i], SG_H_GRAPH_NODE)) return CUDA_ERROR_INVALID_VALUE;
    if (from[i]->g != g || to[i]->g != g || from[i] == to[i]) return CUDA_ERROR_INVALID_VALUE;
    if (ed) {
      static const CUgraphEdgeData zero;
      /* Only full-completion edges exist in softgpu. */
      if (memcmp(&ed[i], &zero, sizeof zero) != 0) return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuGraphAddDependencies_v2(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                                     const CUgraphEdgeData *edgeData, size_t numDependencies) {
  pthread_mutex_lock(&sg_graph_lock);
  CUresult r = edges_check(hGraph, from, to, edgeData, numDependencies);
  /* All or nothing: check every edge (existing, or closing a cycle) first. */
  unsigned char *seen = NULL;
  if (!r && numDependencies) {
    seen = malloc((size_t)hGraph->n);
    if (!seen) r = CUDA_ERROR_OUT_OF_MEMORY;
  }
  for (size_t i = 0; !r && i < numDependencies; i++) {
    if (has_dep(to[i], from[i])) r = CUDA_ERROR_INVALID_VALUE;
    for (size_t j = 0; !r && j < i; j++)
      if (from[j] == from[i] && to[j] == to[i]) r = CUDA_ERROR_INVALID_VALUE;
  }
  size_t added = 0;
  for (size_t i = 0; !r && i < numDependencies; i++) {
    memset(seen, 0, (size_t)hGraph->n);
    if (depends_on(from[i], to[i], seen)) r = CUDA_ERROR_INVALID_VALUE; /* would close a cycle */
    else r = dep_push(to[i], from[i]);
    if (!r) added++;
  }
  if (r)
    for (size_t i = added; i-- > 0;) to[i]->ndeps--; /* undo, newest first */
  free(seen);
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

SG_EXPORT CUresult CUDAAPI cuGraphRemoveDependencies_v2(CUgraph hGraph, const CUgraphNode *from,
                                                        const CUgraphNode *to, const CUgraphEdgeData *edgeData,
                                                        size_t numDependencies) {
  pthread_mutex_lock(&sg_graph_lock);
  CUresult r = edges_check(hGraph, from, to, edgeData, numDependencies);
  for (size_t i = 0; !r && i < numDependencies; i++)
    if (!has_dep(to[i], from[i])) r = CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; !r && i < numDependencies; i++) {
    sg_gnode *t = to[i];
    for (int j = 0; j < t->ndeps; j++)
      if (t->deps[j] == from[i]) {
        memmove(&t->deps[j], &t->deps[j + 1], (size_t)(t->ndeps - j - 1) * sizeof *t->deps);
        t->ndeps--;
        break;
      }
  }
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

SG_EXPORT CUresult CUDAAPI cuGraphDestroyNode(CUgraphNode hNode) {
  pthread_mutex_lock(&sg_graph_lock);
  CUresult r = node_check(hNode, ANY_TYPE);
  if (!r) sg_gnode_free(hNode);
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

/* ---- instantiation ------------------------------------------------------ */

/* Kahn's algorithm, taking ready nodes in creation order so the order is
 * deterministic.  Sorts child graphs too.  CUDA_ERROR_INVALID_VALUE on a
 * cycle (cuGraphAddDependencies refuses them, so that is only defence). */
CUresult sg_graph_topo_sort(sg_graph *g) {
  int n = g->n;
  free(g->order);
  g->order = NULL;
  int *indeg = calloc((size_t)n + 1, sizeof *indeg);
  int *start = calloc((size_t)n + 2, sizeof *start);
  int nedges = 0;
  for (int i = 0; i < n; i++) nedges += g->nodes[i]->ndeps;
  int *adj = malloc((size_t)(nedges ? nedges : 1) * sizeof *adj);
  int *queue = malloc((size_t)(n ? n : 1) * sizeof *queue);
  g->order = malloc((size_t)(n ? n : 1) * sizeof *g->order);
  CUresult r = CUDA_SUCCESS;
  if (!indeg || !start || !adj || !queue || !g->order) {
    r = CUDA_ERROR_OUT_OF_MEMORY;
    goto out;
  }
  for (int i = 0; i < n; i++) {
    sg_gnode *m = g->nodes[i];
    indeg[i] = m->ndeps;
    for (int j = 0; j < m->ndeps; j++) start[m->deps[j]->idx + 1]++;
  }
  for (int i = 0; i < n; i++) start[i + 1] += start[i];
  int *fillp = calloc((size_t)n + 1, sizeof *fillp);
  if (!fillp) {
    r = CUDA_ERROR_OUT_OF_MEMORY;
    goto out;
  }
  for (int i = 0; i < n; i++) {
    sg_gnode *m = g->nodes[i];
    for (int j = 0; j < m->ndeps; j++) {
      int d = m->deps[j]->idx;
      adj[start[d] + fillp[d]++] = i;
    }
  }
  free(fillp);
  int qh = 0, qt = 0;
  for (int i = 0; i < n; i++)
    if (!indeg[i]) queue[qt++] = i;
  int k = 0;
  while (qh < qt) {
    int i = queue[qh++];
    g->order[k++] = g->nodes[i];
    for (int e = start[i]; e < start[i + 1]; e++)
      if (--indeg[adj[e]] == 0) queue[qt++] = adj[e];
  }
  if (k != n) {
    r = CUDA_ERROR_INVALID_VALUE;
    goto out;
  }
  for (int i = 0; i < n && !r; i++) {
    const sg_gnode *m = g->nodes[i];
    if (m->type == CU_GRAPH_NODE_TYPE_GRAPH) r = sg_graph_topo_sort(m->u.child);
    if (m->type == CU_GRAPH_NODE_TYPE_CONDITIONAL)
      for (unsigned b = 0; b < m->u.cond.size && !r; b++) r = sg_graph_topo_sort(m->u.cond.bodies[b]);
  }
out:
  free(indeg);
  free(start);
  free(adj);
  free(queue);
  if (r) {
    free(g->order);
    g->order = NULL;
  }
  return r;
}

static CUresult exec_check(CUgraphExec x) {
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  return sg_handle_ok(x, SG_H_GRAPH_EXEC) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult instantiate(CUgraphExec *out, CUgraph g, cuuint64_t flags, CUgraphInstantiateResult *res) {
  if (res) *res = CUDA_GRAPH_INSTANTIATE_ERROR;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  sg_ctx *c;
  CUresult r = sg_current(&c);
  if (r) return r;
  cuuint64_t known = CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
                     CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
  if (flags & ~known) return CUDA_ERROR_INVALID_VALUE;
  if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) {
    if (res) *res = CUDA_GRAPH_INSTANTIATE_NODE_OPERATION_NOT_SUPPORTED;
    static atomic_int once;
    if (!atomic_exchange(&once, 1)) RGPU_WARN("device-launchable graphs are not implemented");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  r = graph_check(g);
  if (r) return r;
  sg_gexec *x = calloc(1, sizeof *x);
  if (!x) return CUDA_ERROR_OUT_OF_MEMORY;
  r = sg_graph_clone(g, &x->g);
  if (!r) r = sg_graph_topo_sort(x->g);
  if (!r) r = sg_cond_check_bodies(x->g);
  if (!r && sg_handle_add(x, SG_H_GRAPH_EXEC) != 0) r = CUDA_ERROR_OUT_OF_MEMORY;
  if (r) {
    sg_graph_free(x->g);
    free(x);
    return r;
  }
  x->ctx = c;
  x->flags = flags;
  *out = x;
  if (res) *res = CUDA_GRAPH_INSTANTIATE_SUCCESS;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                       unsigned long long flags) {
  pthread_mutex_lock(&sg_graph_lock);
  CUresult r = instantiate(phGraphExec, hGraph, flags, NULL);
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

SG_EXPORT CUresult CUDAAPI cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream);

SG_EXPORT CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                        CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams) {
  if (!instantiateParams) return CUDA_ERROR_INVALID_VALUE;
  instantiateParams->hErrNode_out = NULL;
  pthread_mutex_lock(&sg_graph_lock);
  CUresult r =
      instantiate(phGraphExec, hGraph, instantiateParams->flags, &instantiateParams->result_out);
  pthread_mutex_unlock(&sg_graph_lock);
  if (!r && (instantiateParams->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD)) {
    r = cuGraphUpload(*phGraphExec, instantiateParams->hUploadStream);
    if (r) {
      pthread_mutex_lock(&sg_graph_lock);
      sg_handle_del(*phGraphExec);
      sg_graph_free((*phGraphExec)->g);
      free(*phGraphExec);
      pthread_mutex_unlock(&sg_graph_lock);
      instantiateParams->result_out = CUDA_GRAPH_INSTANTIATE_ERROR;
    }
  }
  return r;
}

SG_EXPORT CUresult CUDAAPI cuGraphExecGetFlags(CUgraphExec hGraphExec, cuuint64_t *flags) {
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sg_graph_lock);
  CUresult r = exec_check(hGraphExec);
  if (!r) *flags = hGraphExec->flags;
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

SG_EXPORT CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec) {
  pthread_mutex_lock(&sg_graph_lock);
  CUresult r = exec_check(hGraphExec);
  if (!r) {
    /* Launches in flight own copies of what they run. */
    sg_handle_del(hGraphExec);
    sg_graph_free(hGraphExec->g);
    free(hGraphExec);
  }
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

/* ---- launch ------------------------------------------------------------- */

typedef RGPU_FIFO(sg_op) chain; /* ops linked through next, handed to sg_submit_chain */

/* Appends the ops of g (sorted) to c.  sg_graph_lock held. */
static CUresult build_ops(const sg_graph *g, chain *c) {
  sg_op *defaults = NULL;
  CUresult dr = sg_cond_defaults_op(g, &defaults);
  if (dr) return dr;
  if (defaults) rgpu_fifo_push(c, defaults, next);
  for (int i = 0; i < g->n; i++) {
    const sg_gnode *n = g->order[i];
    if (n->disabled) continue;
    sg_op *op = NULL;
    switch (n->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      const sg_kern *k = &n->u.k;
      op = sg_op_new(SG_OP_LAUNCH);
      if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
      op->u.launch.params = malloc(k->size ? k->size : 1);
      if (!op->u.launch.params) {
        free(op);
        return CUDA_ERROR_OUT_OF_MEMORY;
      }
      if (k->size) memcpy(op->u.launch.params, k->buf, k->size);
      op->u.launch.params_size = k->size;
      memcpy(op->u.launch.grid, k->grid, sizeof k->grid);
      memcpy(op->u.launch.block, k->block, sizeof k->block);
      op->u.launch.shared = k->shared;
      op->u.launch.fn = k->fn;
      atomic_fetch_add(&k->fn->mod->refs, 1);
      break;
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
      sg_copy3d *cp = malloc(sizeof *cp);
      if (!cp) return CUDA_ERROR_OUT_OF_MEMORY;
      CUresult r = sg_copy3d_resolve(&n->u.cp.p, cp);
      if (r) {
        /* Its memory was freed since the node was set: what a GPU would
         * meet as an illegal address, but here we can still refuse. */
        free(cp);
        return r;
      }
      op = sg_op_new(SG_OP_FUNC);
      if (!op) {
        free(cp);
        return CUDA_ERROR_OUT_OF_MEMORY;
      }
      op->u.func.run = sg_copy3d_run;
      op->u.func.free = free;
      op->u.func.arg = cp;
      break;
    }
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      CUDA_MEMSET_NODE_PARAMS *p = malloc(sizeof *p);
      if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
      *p = n->u.ms.p;
      op = sg_op_new(SG_OP_FUNC);
      if (!op) {
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
      }
      op->u.func.run = memset2d_run;
      op->u.func.free = free;
      op->u.func.arg = p;
      break;
    }
    case CU_GRAPH_NODE_TYPE_HOST:
      op = sg_op_new(SG_OP_HOSTFN);
      if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
      op->u.hostfn.fn = n->u.host.fn;
      op->u.hostfn.user = n->u.host.userData;
      break;
    case CU_GRAPH_NODE_TYPE_GRAPH: {
      CUresult r = build_ops(n->u.child, c);
      if (r) return r;
      break;
    }
    case CU_GRAPH_NODE_TYPE_CONDITIONAL: {
      CUresult r = sg_cond_build_op(n, &op);
      if (r) return r;
      break;
    }
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      if (!sg_handle_ok(n->u.ev, SG_H_EVENT)) return CUDA_ERROR_INVALID_HANDLE;
      op = sg_op_new(SG_OP_RECORD);
      if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
      op->u.record.ev = n->u.ev; /* sg_submit_chain takes the event reference */
      break;
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: {
      sg_event *e = n->u.ev;
      if (!sg_handle_ok(e, SG_H_EVENT)) return CUDA_ERROR_INVALID_HANDLE;
      op = sg_op_new(SG_OP_NOP);
      if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
      /* Waits for the record most recent at launch, as cuStreamWaitEvent. */
      pthread_mutex_lock(&sg_sched_lock);
      if (e->stream) {
        op->waits[0].stream = e->stream;
        op->waits[0].seq = e->seq;
        op->nwaits = 1;
        e->stream->refs++;
      }
      pthread_mutex_unlock(&sg_sched_lock);
      if (!op->nwaits) {
        free(op);
        op = NULL;
      }
      break;
    }
    default:
      break; /* empty */
    }
    if (op) rgpu_fifo_push(c, op, next);
  }
  return CUDA_SUCCESS;
}

CUresult sg_graph_build_ops(const sg_graph *g, sg_op **head, sg_op **tail) {
  chain c = {*head, *tail};
  CUresult r = build_ops(g, &c);
  *head = c.head;
  *tail = c.tail;
  return r;
}

/* Graph launch on a capturing stream: sg_graph_capture.c. */
int sg_capture_graph_launch(sg_stream *s, const sg_graph *g, CUresult *res);

SG_EXPORT CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  sg_stream *s;
  CUresult r = sg_stream_resolve(hStream, &s);
  if (r) return r;
  pthread_mutex_lock(&sg_graph_lock);
  r = exec_check(hGraphExec);
  if (r) {
    pthread_mutex_unlock(&sg_graph_lock);
    return r;
  }
  if (atomic_load(&sg_captures_active) && sg_capture_graph_launch(s, hGraphExec->g, &r)) {
    pthread_mutex_unlock(&sg_graph_lock);
    return r;
  }
  chain c = {0};
  r = build_ops(hGraphExec->g, &c);
  pthread_mutex_unlock(&sg_graph_lock);
  if (r) {
    sg_op_free_chain(c.head);
    return r;
  }
  if (!c.head) {
    /* An empty graph still orders like one op: queue a no-op. */
    sg_op *op = sg_op_new(SG_OP_NOP);
    if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
    rgpu_fifo_push(&c, op, next);
  }
  return sg_submit_chain(s, c.head);
}

SG_EXPORT CUresult CUDAAPI cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
  /* Nothing to upload: the exec already lives where it runs. */
  sg_stream *s;
  CUresult r = sg_stream_resolve(hStream, &s);
  if (r) return r;
  pthread_mutex_lock(&sg_graph_lock);
  r = exec_check(hGraphExec);
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

/* ---- exec updates ------------------------------------------------------- */

/* The exec's copy of node n of the instantiated (or last update) graph,
 * top level only, as CUDA requires. */
static sg_gnode *exec_node(sg_gexec *x, CUgraphNode n) {
  for (int i = 0; i < x->g->n; i++) {
    sg_gnode *m = x->g->nodes[i];
    if (m->orig == n || m->upd == n) return m;
  }
  return NULL;
}

static CUresult exec_node_get(CUgraphExec x, CUgraphNode n, CUgraphNodeType t, sg_gnode **out) {
  CUresult r = exec_check(x);
  if (r) return r;
  if (!sg_handle_ok(n, SG_H_GRAPH_NODE)) return CUDA_ERROR_INVALID_VALUE;
  sg_gnode *m = exec_node(x, n);
  if (!m || ((int)t >= 0 && m->type != t)) return CUDA_ERROR_INVALID_VALUE;
  *out = m;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                             const CUDA_KERNEL_NODE_PARAMS *nodeParams) {
  pthread_mutex_lock(&sg_graph_lock);
  sg_gnode *m;
  sg_kern k;
  CUresult r = exec_node_get(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_KERNEL, &m);
  if (!r) r = kern_from_params(&k, nodeParams);
  if (!r && m->u.k.fn && k.fn->mod->ctx != m->u.k.fn->mod->ctx) {
    kern_clear(&k);
    r = CUDA_ERROR_INVALID_VALUE; /* a kernel node cannot move to another context */
  }
  if (!r) {
    kern_clear(&m->u.k);
    m->u.k = k;
  }
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

/* The executable-graph form of ADD_CTX_NODE: the node of type TYPE takes
 * the checked parameters, which must name the context it was created in. */
#define EXEC_SET_CTX_NODE(TYPE, CHECK, MEMBER, PARAMS)                                         \
  sg_ctx *c;                                                                                  \
  CUresult r = ctx_arg(ctx, &c);                                                              \
  if (r) return r;                                                                            \
  pthread_mutex_lock(&sg_graph_lock);                                                         \
  sg_gnode *m;                                                                                \
  r = exec_node_get(hGraphExec, hNode, (TYPE), &m);                                           \
  if (!r) r = (CHECK);                                                                        \
  if (!r && c != m->u.MEMBER.ctx) r = CUDA_ERROR_INVALID_VALUE;                               \
  if (!r) m->u.MEMBER.p = *(PARAMS);                                                          \
  pthread_mutex_unlock(&sg_graph_lock);                                                       \
  return r

SG_EXPORT CUresult CUDAAPI cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                          const CUDA_MEMCPY3D *copyParams, CUcontext ctx) {
  EXEC_SET_CTX_NODE(CU_GRAPH_NODE_TYPE_MEMCPY, sg_memcpy3d_check(copyParams), cp, copyParams);
}

SG_EXPORT CUresult CUDAAPI cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                          const CUDA_MEMSET_NODE_PARAMS *memsetParams,
                                                          CUcontext ctx) {
  EXEC_SET_CTX_NODE(CU_GRAPH_NODE_TYPE_MEMSET, memset_check(memsetParams), ms, memsetParams);
}

SG_EXPORT CUresult CUDAAPI cuGraphExecHostNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                        const CUDA_HOST_NODE_PARAMS *nodeParams) {
  if (!nodeParams || !nodeParams->fn) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sg_graph_lock);
  sg_gnode *m;
  CUresult r = exec_node_get(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_HOST, &m);
  if (!r) m->u.host = *nodeParams;
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

static CUresult exec_event_set(CUgraphExec x, CUgraphNode n, CUgraphNodeType t, CUevent ev) {
  if (!sg_handle_ok(ev, SG_H_EVENT)) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sg_graph_lock);
  sg_gnode *m;
  CUresult r = exec_node_get(x, n, t, &m);
  if (!r) m->u.ev = ev;
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

SG_EXPORT CUresult CUDAAPI cuGraphExecEventRecordNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                              CUevent event) {
  return exec_event_set(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_EVENT_RECORD, event);
}
SG_EXPORT CUresult CUDAAPI cuGraphExecEventWaitNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                            CUevent event) {
  return exec_event_set(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_WAIT_EVENT, event);
}

/* Compares the topology of exec graph a (instantiated copy) with graph b:
 * same nodes in creation order, same types, same edges.  On a mismatch
 * fills info and returns the CU_GRAPH_EXEC_UPDATE_* reason. */
static CUgraphExecUpdateResult topo_match(const sg_graph *a, const sg_graph *b, CUgraphExecUpdateResultInfo *info) {
  if (a->n != b->n) return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
  for (int i = 0; i < a->n; i++) {
    const sg_gnode *x = a->nodes[i], *y = b->nodes[i];
    if (x->type != y->type) {
      info->errorNode = (CUgraphNode)y;
      return CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
    }
    if (x->ndeps != y->ndeps) {
      info->errorNode = (CUgraphNode)y;
      return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    }
    for (int j = 0; j < y->ndeps; j++) {
      int found = 0;
      for (int k = 0; k < x->ndeps && !found; k++) found = x->deps[k]->idx == y->deps[j]->idx;
      if (!found) {
        info->errorNode = (CUgraphNode)y;
        info->errorFromNode = y->deps[j];
        return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
      }
    }
    if (x->type == CU_GRAPH_NODE_TYPE_KERNEL && x->u.k.fn && y->u.k.fn &&
        x->u.k.fn->mod->ctx != y->u.k.fn->mod->ctx) {
      info->errorNode = (CUgraphNode)y;
      return CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE;
    }
    if (x->type == CU_GRAPH_NODE_TYPE_MEMCPY && x->u.cp.ctx != y->u.cp.ctx) {
      info->errorNode = (CUgraphNode)y;
      return CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED;
    }
    if (x->type == CU_GRAPH_NODE_TYPE_MEMSET && x->u.ms.ctx != y->u.ms.ctx) {
      info->errorNode = (CUgraphNode)y;
      return CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED;
    }
    if (x->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
      /* Not updatable in place here: its bodies would have to match too. */
      info->errorNode = (CUgraphNode)y;
      return CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED;
    }
    if (x->type == CU_GRAPH_NODE_TYPE_GRAPH) {
      CUgraphExecUpdateResult cr = topo_match(x->u.child, y->u.child, info);
      if (cr != CU_GRAPH_EXEC_UPDATE_SUCCESS) return cr;
    }
  }
  return CU_GRAPH_EXEC_UPDATE_SUCCESS;
}

/* Copies b's parameters into a (topologies match).  Kernel packing can run
 * out of memory; everything else is a plain copy. */
static CUresult params_update(sg_graph *a, const sg_graph *b, int top) {
  for (int i = 0; i < a->n; i++) {
    sg_gnode *x = a->nodes[i];
    const sg_gnode *y = b->nodes[i];
    if (top) x->upd = (sg_gnode *)y;
    switch (x->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      sg_kern k;
      CUresult r = kern_copy(&k, &y->u.k);
      if (r) return r;
      kern_clear(&x->u.k);
      x->u.k = k;
      break;
    }
    case CU_GRAPH_NODE_TYPE_GRAPH: {
      CUresult r = params_update(x->u.child, y->u.child, 0);
      if (r) return r;
      break;
    }
    default:
      x->u = y->u;
      break;
    }
  }
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph,
                                                CUgraphExecUpdateResultInfo *resultInfo) {
  CUgraphExecUpdateResultInfo info = {CU_GRAPH_EXEC_UPDATE_ERROR, NULL, NULL};
  pthread_mutex_lock(&sg_graph_lock);
  CUresult r = exec_check(hGraphExec);
  if (!r) r = graph_check(hGraph);
  if (!r) {
    info.result = topo_match(hGraphExec->g, hGraph, &info);
    if (info.result != CU_GRAPH_EXEC_UPDATE_SUCCESS) r = CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
  }
  if (!r) {
    r = params_update(hGraphExec->g, hGraph, 1);
    if (r) info.result = CU_GRAPH_EXEC_UPDATE_ERROR;
  }
  pthread_mutex_unlock(&sg_graph_lock);
  if (resultInfo) *resultInfo = info;
  return r;
}

SG_EXPORT CUresult CUDAAPI cuGraphExecChildGraphNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                              CUgraph childGraph) {
  pthread_mutex_lock(&sg_graph_lock);
  sg_gnode *m;
  CUresult r = exec_node_get(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_GRAPH, &m);
  if (!r) r = graph_check(childGraph);
  if (!r) {
    CUgraphExecUpdateResultInfo info = {0};
    if (topo_match(m->u.child, childGraph, &info) != CU_GRAPH_EXEC_UPDATE_SUCCESS) r = CUDA_ERROR_INVALID_VALUE;
  }
  if (!r) r = params_update(m->u.child, childGraph, 0);
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

SG_EXPORT CUresult CUDAAPI cuGraphNodeSetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int isEnabled) {
  pthread_mutex_lock(&sg_graph_lock);
  sg_gnode *m;
  CUresult r = exec_node_get(hGraphExec, hNode, ANY_TYPE, &m);
  /* CUDA allows it for kernel, memcpy and memset nodes only. */
  if (!r && m->type != CU_GRAPH_NODE_TYPE_KERNEL && m->type != CU_GRAPH_NODE_TYPE_MEMCPY &&
      m->type != CU_GRAPH_NODE_TYPE_MEMSET)
    r = CUDA_ERROR_INVALID_VALUE;
  if (!r) m->disabled = !isEnabled;
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

SG_EXPORT CUresult CUDAAPI cuGraphNodeGetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int *isEnabled) {
  if (!isEnabled) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sg_graph_lock);
  sg_gnode *m;
  CUresult r = exec_node_get(hGraphExec, hNode, ANY_TYPE, &m);
  if (!r && m->type != CU_GRAPH_NODE_TYPE_KERNEL && m->type != CU_GRAPH_NODE_TYPE_MEMCPY &&
      m->type != CU_GRAPH_NODE_TYPE_MEMSET)
    r = CUDA_ERROR_INVALID_VALUE;
  if (!r) *isEnabled = !m->disabled;
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

/* ---- cuGraphDebugDotPrint ----------------------------------------------- */

static const char *type_name(CUgraphNodeType t) {
  switch (t) {
  case CU_GRAPH_NODE_TYPE_KERNEL: return "KERNEL";
  case CU_GRAPH_NODE_TYPE_MEMCPY: return "MEMCPY";
  case CU_GRAPH_NODE_TYPE_MEMSET: return "MEMSET";
  case CU_GRAPH_NODE_TYPE_HOST: return "HOST";
  case CU_GRAPH_NODE_TYPE_GRAPH: return "GRAPH";
  case CU_GRAPH_NODE_TYPE_EMPTY: return "EMPTY";
  case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return "WAIT_EVENT";
  case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return "EVENT_RECORD";
  default: return "?";
  }
}

static void dot_graph(FILE *f, const sg_graph *g, const char *prefix, int verbose) {
  for (int i = 0; i < g->n; i++) {
    const sg_gnode *n = g->nodes[i];
    fprintf(f, "  \"%s%d\" [shape=box label=\"%s %d", prefix, i, type_name(n->type), i);
    if (n->type == CU_GRAPH_NODE_TYPE_KERNEL && n->u.k.fn) {
      fprintf(f, "\\n%s", n->u.k.fn->name ? n->u.k.fn->name : "?");
      if (verbose)
        fprintf(f, "\\ngrid (%u,%u,%u) block (%u,%u,%u) shared %u", n->u.k.grid[0], n->u.k.grid[1], n->u.k.grid[2],
                n->u.k.block[0], n->u.k.block[1], n->u.k.block[2], n->u.k.shared);
    } else if (n->type == CU_GRAPH_NODE_TYPE_MEMCPY && verbose) {
      const CUDA_MEMCPY3D *p = &n->u.cp.p;
      fprintf(f, "\\n%zu x %zu x %zu bytes", p->WidthInBytes, p->Height, p->Depth);
    } else if (n->type == CU_GRAPH_NODE_TYPE_MEMSET && verbose) {
      const CUDA_MEMSET_NODE_PARAMS *p = &n->u.ms.p;
      fprintf(f, "\\n0x%llx value 0x%x size %u %zu x %zu", (unsigned long long)p->dst, p->value, p->elementSize,
              p->width, p->height);
    }
    fprintf(f, "\"];\n");
    for (int j = 0; j < n->ndeps; j++) fprintf(f, "  \"%s%d\" -> \"%s%d\";\n", prefix, n->deps[j]->idx, prefix, i);
    if (n->type == CU_GRAPH_NODE_TYPE_GRAPH && n->u.child) {
      char sub[256];
      snprintf(sub, sizeof sub, "%s%d_", prefix, i);
      fprintf(f, "  subgraph \"cluster_%s\" {\n  label=\"child of %s%d\";\n", sub, prefix, i);
      dot_graph(f, n->u.child, sub, verbose);
      fprintf(f, "  }\n");
    }
  }
}

SG_EXPORT CUresult CUDAAPI cuGraphDebugDotPrint(CUgraph hGraph, const char *path, unsigned int flags) {
  if (!path) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sg_graph_lock);
  CUresult r = graph_check(hGraph);
  if (!r) {
    FILE *f = fopen(path, "w");
    if (!f) {
      r = CUDA_ERROR_OPERATING_SYSTEM;
    } else {
      fprintf(f, "digraph softgpu_graph {\n");
      dot_graph(f, hGraph, "n", (flags & CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE) != 0);
      fprintf(f, "}\n");
      if (fclose(f) != 0) r = CUDA_ERROR_OPERATING_SYSTEM;
    }
  }
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}
