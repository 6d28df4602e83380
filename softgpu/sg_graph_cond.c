/* softgpu graphs: conditional nodes (CUDA 12.3+: IF, IF/ELSE, WHILE,
 * SWITCH) and their handles.
 *
 * A handle is a slot in one table: its value, its default and whether each
 * run of its graph starts from the default.  Device code sets the value with
 * cudaGraphSetConditional, which the PTX interpreter hands to sg_cond_set;
 * the handle it passes is (generation << 32 | slot + 1), so a stale or made-up
 * handle is refused instead of writing another graph's slot.  Slots are
 * counted: the graph that created a handle holds one reference, every node
 * that uses it (and every clone of such a node: execs, launches) another.
 *
 * A launch turns a conditional node into one SG_OP_FUNC on the stream.  When
 * the stream reaches it, everything before it in the graph has run (the
 * chain is the graph in topological order), so it reads the value, then runs
 * the chosen body's ops right there, in order (sg_run_chain_inline), for a
 * WHILE again as long as the value stays non-zero.  The op owns a private
 * copy of the bodies, so an exec destroyed or updated meanwhile does not
 * pull them away from a launch in flight. */
#include <stdlib.h>
#include <string.h>

#include "rgpu_array.h"
#include "sg_graph.h"

typedef struct {
  _Atomic uint32_t value;
  uint32_t dflt, flags;
  uint32_t gen;
  int refs; /* 0: free */
} cond_slot;

static pthread_mutex_t cond_lock = PTHREAD_MUTEX_INITIALIZER;
static cond_slot *slots;
static size_t nslots, capslots;

/* Body graphs loop at most this often per launch before the launch fails:
 * a WHILE whose body never clears its value would otherwise hold the
 * stream (and its session) forever.  A GPU would spin; the server's kernel
 * time limit is the other bound. */
#define COND_MAX_ITERATIONS (1u << 24)

static cond_slot *slot_of(uint64_t h) {
  uint32_t idx = (uint32_t)h, gen = (uint32_t)(h >> 32);
  if (!idx || idx > nslots) return NULL;
  cond_slot *s = &slots[idx - 1];
  return s->refs > 0 && s->gen == gen ? s : NULL;
}

static CUresult slot_new(uint32_t dflt, uint32_t flags, uint64_t *out) {
  pthread_mutex_lock(&cond_lock);
  size_t i = 0;
  while (i < nslots && slots[i].refs) i++;
  if (i == nslots) {
    if (i >= UINT32_MAX - 1 || RGPU_ARRAY_RESERVE(slots, capslots, nslots + 1, 16)) {
      pthread_mutex_unlock(&cond_lock);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memset(&slots[nslots], 0, sizeof *slots);
    nslots++;
  }
  cond_slot *s = &slots[i];
  s->gen++;
  s->refs = 1;
  s->dflt = dflt;
  s->flags = flags;
  atomic_store(&s->value, dflt);
  *out = (uint64_t)s->gen << 32 | (uint64_t)(i + 1);
  pthread_mutex_unlock(&cond_lock);
  return CUDA_SUCCESS;
}

static int slot_ref(uint64_t h) {
  pthread_mutex_lock(&cond_lock);
  cond_slot *s = slot_of(h);
  if (s) s->refs++;
  pthread_mutex_unlock(&cond_lock);
  return s ? 0 : -1;
}

static void slot_unref(uint64_t h) {
  pthread_mutex_lock(&cond_lock);
  cond_slot *s = slot_of(h);
  if (s) s->refs--;
  pthread_mutex_unlock(&cond_lock);
}

int sg_cond_set(uint64_t handle, uint32_t value) {
  pthread_mutex_lock(&cond_lock);
  cond_slot *s = slot_of(handle);
  if (s) atomic_store(&s->value, value);
  pthread_mutex_unlock(&cond_lock);
  return s ? 0 : -1;
}

static int slot_get(uint64_t handle, uint32_t *value) {
  pthread_mutex_lock(&cond_lock);
  cond_slot *s = slot_of(handle);
  if (s) *value = atomic_load(&s->value);
  pthread_mutex_unlock(&cond_lock);
  return s ? 0 : -1;
}

/* ---- handles -------------------------------------------------------------- */

SG_EXPORT CUresult CUDAAPI cuGraphConditionalHandleCreate(CUgraphConditionalHandle *pHandle_out, CUgraph hGraph,
                                                          CUcontext ctx, unsigned int defaultLaunchValue,
                                                          unsigned int flags) {
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!pHandle_out || (flags & ~(unsigned)CU_GRAPH_COND_ASSIGN_DEFAULT)) return CUDA_ERROR_INVALID_VALUE;
  if (ctx && !sg_handle_ok(ctx, SG_H_CTX)) return CUDA_ERROR_INVALID_CONTEXT;
  pthread_mutex_lock(&sg_graph_lock);
  CUresult r = sg_handle_ok(hGraph, SG_H_GRAPH) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  if (!r && RGPU_ARRAY_RESERVE(hGraph->conds, hGraph->capconds, (size_t)hGraph->nconds + 1, 4))
    r = CUDA_ERROR_OUT_OF_MEMORY;
  uint64_t h = 0;
  if (!r) r = slot_new(defaultLaunchValue, flags, &h);
  if (!r) {
    hGraph->conds[hGraph->nconds++] = h;
    *pHandle_out = h;
  }
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

void sg_cond_graph_release(sg_graph *g) {
  for (int i = 0; i < g->nconds; i++) slot_unref(g->conds[i]);
  free(g->conds);
  g->conds = NULL;
  g->nconds = 0;
  g->capconds = 0;
}

/* ---- nodes ---------------------------------------------------------------- */

void sg_cond_node_release(sg_gnode *n) {
  for (unsigned b = 0; n->u.cond.bodies && b < n->u.cond.size; b++) sg_graph_free(n->u.cond.bodies[b]);
  free(n->u.cond.bodies);
  n->u.cond.bodies = NULL;
  if (n->u.cond.handle) slot_unref(n->u.cond.handle);
  n->u.cond.handle = 0;
}

CUresult sg_cond_node_copy(sg_gnode *m, const sg_gnode *n) {
  memset(&m->u.cond, 0, sizeof m->u.cond);
  if (slot_ref(n->u.cond.handle)) return CUDA_ERROR_INVALID_VALUE;
  m->u.cond.handle = n->u.cond.handle;
  m->u.cond.type = n->u.cond.type;
  m->u.cond.bodies = calloc(n->u.cond.size, sizeof *m->u.cond.bodies);
  if (!m->u.cond.bodies) {
    sg_cond_node_release(m);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  for (unsigned b = 0; b < n->u.cond.size; b++) {
    CUresult r = sg_graph_clone(n->u.cond.bodies[b], &m->u.cond.bodies[b]);
    if (r) {
      sg_cond_node_release(m);
      return r;
    }
    m->u.cond.size = b + 1;
    m->u.cond.bodies[b]->owner = m;
    /* The exec's sorted copy: clone the order too (launch ops clone the
     * exec's bodies and run them without sorting again). */
    if (n->u.cond.bodies[b]->order && (r = sg_graph_topo_sort(m->u.cond.bodies[b]))) {
      sg_cond_node_release(m);
      return r;
    }
  }
  return CUDA_SUCCESS;
}

CUresult sg_cond_node_add(CUgraphNode *out, sg_graph *g, const CUgraphNode *deps, size_t ndeps,
                          CUDA_CONDITIONAL_NODE_PARAMS *p) {
  if (!p->size) return CUDA_ERROR_INVALID_VALUE;
  switch (p->type) {
  case CU_GRAPH_COND_TYPE_IF:
    if (p->size > 2) return CUDA_ERROR_INVALID_VALUE;
    break;
  case CU_GRAPH_COND_TYPE_WHILE:
    if (p->size != 1) return CUDA_ERROR_INVALID_VALUE;
    break;
  case CU_GRAPH_COND_TYPE_SWITCH:
    if (p->size > 65536) return CUDA_ERROR_INVALID_VALUE;
    break;
  default: return CUDA_ERROR_INVALID_VALUE;
  }
  if (p->ctx && !sg_handle_ok(p->ctx, SG_H_CTX)) return CUDA_ERROR_INVALID_CONTEXT;
  /* The handle must be one of g's own (CUDA: created on the graph that
   * holds the node). */
  int mine = 0;
  for (int i = 0; i < g->nconds && !mine; i++) mine = g->conds[i] == p->handle;
  if (!mine) return CUDA_ERROR_INVALID_VALUE;
  sg_graph **bodies = calloc(p->size, sizeof *bodies);
  if (!bodies) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = CUDA_SUCCESS;
  unsigned made = 0;
  for (; made < p->size && !r; made++) r = sg_graph_new(&bodies[made]);
  if (r) made--;
  sg_gnode *n = NULL;
  if (!r) r = sg_graph_add_begin(out, g, deps, ndeps, CU_GRAPH_NODE_TYPE_CONDITIONAL, &n);
  if (!r && slot_ref(p->handle)) {
    sg_gnode_free(n); /* type conditional with no bodies yet: nothing to release */
    r = CUDA_ERROR_INVALID_VALUE;
  }
  if (r) {
    for (unsigned b = 0; b < made; b++) sg_graph_free(bodies[b]);
    free(bodies);
    return r;
  }
  n->u.cond.handle = p->handle;
  n->u.cond.type = p->type;
  n->u.cond.size = p->size;
  n->u.cond.bodies = bodies;
  for (unsigned b = 0; b < p->size; b++) bodies[b]->owner = n;
  /* CUDA's array, valid as long as the node: the node's own. */
  p->phGraph_out = bodies;
  *out = n;
  return CUDA_SUCCESS;
}

/* CUDA's rule for what a body may hold, checked at instantiation: kernels,
 * empty nodes, memsets, copies, child graphs and conditionals, recursively. */
static CUresult check_body(const sg_graph *g) {
  for (int i = 0; i < g->n; i++) {
    const sg_gnode *n = g->nodes[i];
    CUresult r = CUDA_SUCCESS;
    switch (n->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
    case CU_GRAPH_NODE_TYPE_EMPTY:
    case CU_GRAPH_NODE_TYPE_MEMSET:
    case CU_GRAPH_NODE_TYPE_MEMCPY: break;
    case CU_GRAPH_NODE_TYPE_GRAPH: r = check_body(n->u.child); break;
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
      for (unsigned b = 0; b < n->u.cond.size && !r; b++) r = check_body(n->u.cond.bodies[b]);
      break;
    default: {
      static atomic_int once;
      if (!atomic_exchange(&once, 1))
        RGPU_WARN("cuGraphInstantiate: a conditional body holds a node of type %d; CUDA allows "
                  "kernels, empty nodes, memsets, copies, child graphs and conditionals",
                  (int)n->type);
      r = CUDA_ERROR_INVALID_VALUE;
    }
    }
    if (r) return r;
  }
  return CUDA_SUCCESS;
}

CUresult sg_cond_check_bodies(const sg_graph *g) {
  for (int i = 0; i < g->n; i++) {
    const sg_gnode *n = g->nodes[i];
    CUresult r = CUDA_SUCCESS;
    if (n->type == CU_GRAPH_NODE_TYPE_GRAPH) r = sg_cond_check_bodies(n->u.child);
    if (n->type == CU_GRAPH_NODE_TYPE_CONDITIONAL)
      for (unsigned b = 0; b < n->u.cond.size && !r; b++) r = check_body(n->u.cond.bodies[b]);
    if (r) return r;
  }
  return CUDA_SUCCESS;
}

/* ---- launch ----------------------------------------------------------------- */

typedef struct {
  uint64_t handle; /* a reference */
  CUgraphConditionalNodeType type;
  unsigned size;
  sg_graph **bodies; /* the op's own sorted copies */
} cond_run;

static void cond_run_free(void *arg) {
  cond_run *cr = arg;
  for (unsigned b = 0; cr->bodies && b < cr->size; b++) sg_graph_free(cr->bodies[b]);
  free(cr->bodies);
  if (cr->handle) slot_unref(cr->handle);
  free(cr);
}

/* Runs body b once: 0, or -1 when its ops could not be built (the context
 * is then sticky, as a GPU fault would leave it). */
static int run_body(sg_ctx *c, const sg_graph *body) {
  sg_op *head = NULL, *tail = NULL;
  CUresult r = sg_graph_build_ops(body, &head, &tail);
  if (r) {
    sg_op_free_chain(head);
    sg_ctx_set_sticky(c, r);
    return -1;
  }
  sg_run_chain_inline(c, head);
  return atomic_load(&c->sticky) ? -1 : 0;
}

static void cond_run_exec(sg_ctx *c, void *arg) {
  cond_run *cr = arg;
  uint32_t v = 0;
  if (slot_get(cr->handle, &v)) {
    sg_ctx_set_sticky(c, CUDA_ERROR_LAUNCH_FAILED);
    return;
  }
  switch (cr->type) {
  case CU_GRAPH_COND_TYPE_IF:
    if (v) run_body(c, cr->bodies[0]);
    else if (cr->size == 2) run_body(c, cr->bodies[1]);
    break;
  case CU_GRAPH_COND_TYPE_SWITCH:
    if (v < cr->size) run_body(c, cr->bodies[v]);
    break;
  case CU_GRAPH_COND_TYPE_WHILE:
    for (uint32_t it = 0; v; it++) {
      if (it == COND_MAX_ITERATIONS) {
        RGPU_WARN("a conditional WHILE node ran its body %u times without its value turning 0: "
                  "the launch fails", COND_MAX_ITERATIONS);
        sg_ctx_set_sticky(c, CUDA_ERROR_LAUNCH_TIMEOUT);
        return;
      }
      if (run_body(c, cr->bodies[0]) || slot_get(cr->handle, &v)) return;
    }
    break;
  default: break;
  }
}

CUresult sg_cond_build_op(const sg_gnode *n, sg_op **out) {
  cond_run *cr = calloc(1, sizeof *cr);
  if (!cr) return CUDA_ERROR_OUT_OF_MEMORY;
  if (slot_ref(n->u.cond.handle)) {
    free(cr);
    return CUDA_ERROR_INVALID_VALUE;
  }
  cr->handle = n->u.cond.handle;
  cr->type = n->u.cond.type;
  cr->bodies = calloc(n->u.cond.size, sizeof *cr->bodies);
  CUresult r = cr->bodies ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
  for (unsigned b = 0; !r && b < n->u.cond.size; b++) {
    r = sg_graph_clone(n->u.cond.bodies[b], &cr->bodies[b]);
    if (!r) {
      cr->size = b + 1;
      r = sg_graph_topo_sort(cr->bodies[b]);
    }
  }
  sg_op *op = r ? NULL : sg_op_new(SG_OP_FUNC);
  if (!op) {
    cond_run_free(cr);
    return r ? r : CUDA_ERROR_OUT_OF_MEMORY;
  }
  op->u.func.run = cond_run_exec;
  op->u.func.free = cond_run_free;
  op->u.func.arg = cr;
  *out = op;
  return CUDA_SUCCESS;
}

typedef struct {
  uint64_t *h;
  size_t n;
} cond_defaults;

static void defaults_free(void *arg) {
  cond_defaults *d = arg;
  for (size_t i = 0; i < d->n; i++) slot_unref(d->h[i]);
  free(d->h);
  free(d);
}

static void defaults_exec(sg_ctx *c, void *arg) {
  (void)c;
  cond_defaults *d = arg;
  pthread_mutex_lock(&cond_lock);
  for (size_t i = 0; i < d->n; i++) {
    cond_slot *s = slot_of(d->h[i]);
    if (s) atomic_store(&s->value, s->dflt);
  }
  pthread_mutex_unlock(&cond_lock);
}

CUresult sg_cond_defaults_op(const sg_graph *g, sg_op **out) {
  *out = NULL;
  cond_defaults *d = NULL;
  size_t cap = 0;
  CUresult r = CUDA_SUCCESS;
  for (int i = 0; i < g->n && !r; i++) {
    const sg_gnode *n = g->nodes[i];
    if (n->type != CU_GRAPH_NODE_TYPE_CONDITIONAL) continue;
    pthread_mutex_lock(&cond_lock);
    cond_slot *s = slot_of(n->u.cond.handle);
    int assign = s && (s->flags & CU_GRAPH_COND_ASSIGN_DEFAULT);
    pthread_mutex_unlock(&cond_lock);
    if (!assign) continue;
    if (!d && !(d = calloc(1, sizeof *d))) return CUDA_ERROR_OUT_OF_MEMORY;
    if (RGPU_ARRAY_RESERVE(d->h, cap, d->n + 1, 4) || slot_ref(n->u.cond.handle)) {
      r = CUDA_ERROR_OUT_OF_MEMORY;
      break;
    }
    d->h[d->n++] = n->u.cond.handle;
  }
  if (!d) return r;
  sg_op *op = r ? NULL : sg_op_new(SG_OP_FUNC);
  if (!op) {
    defaults_free(d);
    return r ? r : CUDA_ERROR_OUT_OF_MEMORY;
  }
  op->u.func.run = defaults_exec;
  op->u.func.free = defaults_free;
  op->u.func.arg = d;
  *out = op;
  return CUDA_SUCCESS;
}
