/* Instantiated graphs: see rgpu_graph.h. */
#include "rgpu_graph.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_clock.h"
#include "rgpu_graph_lib.h"
#include "rgpu_log.h"

#define FAIL(status, ...) rgpu_worker_fail(w, (status), __VA_ARGS__)
#define ENAME(r) rgpu_driver_error_name(&w->drv, (r))
#define MAX_KERNEL_PARAMS 8192
/* CUDA's limit on a kernel's parameter bytes (32764 since CUDA 12.1). */
#define KERNEL_PARAM_BYTES 32768

/* The driver's graph API, resolved on first use (optional: softgpu may not
 * have it yet, the test driver never does).  Two levels so that cuda.h's
 * macros give the exported names (cuGraphAddKernelNode_v2, ...). */
#define GRAPH_FUNCS(X)                                                                   \
  X(cuGraphCreate) X(cuGraphDestroy) X(cuGraphAddKernelNode) X(cuGraphAddMemcpyNode)      \
  X(cuGraphAddMemsetNode) X(cuGraphAddEmptyNode) X(cuGraphAddEventRecordNode)             \
  X(cuGraphAddEventWaitNode) X(cuGraphInstantiateWithFlags) X(cuGraphLaunch)              \
  X(cuGraphExecDestroy) X(cuGraphExecKernelNodeSetParams) X(cuGraphExecMemcpyNodeSetParams) \
  X(cuGraphExecMemsetNodeSetParams) X(cuGraphExecEventRecordNodeSetEvent)                 \
  X(cuGraphExecEventWaitNodeSetEvent)
#define STR2(x) #x
#define STR(x) STR2(x)

typedef struct {
#define FIELD(name) __typeof__(&name) name;
  GRAPH_FUNCS(FIELD)
#undef FIELD
  __typeof__(&cuGraphNodeSetEnabled) cuGraphNodeSetEnabled; /* optional */
  /* Optional: library nodes become child graphs (else the exec replays). */
  __typeof__(&cuGraphAddChildGraphNode) cuGraphAddChildGraphNode;
  __typeof__(&cuGraphExecChildGraphNodeSetParams) cuGraphExecChildGraphNodeSetParams;
  /* Optional: conditional nodes (CUDA 12.3+; cuGraphAddNode is cuda.h's
   * macro for cuGraphAddNode_v2). */
  __typeof__(&cuGraphConditionalHandleCreate) cuGraphConditionalHandleCreate;
  __typeof__(&cuGraphAddNode) cuGraphAddNode;
} graph_drv;

typedef struct {
  uint32_t type;
  rgpu_gnode n; /* type and fields (proto/rgpu_graph_nodes.def) */
  uint8_t *params; /* aligned private copy */
  uint32_t plen;
  void *func;      /* CUfunction at validation, to notice an unload */
  size_t stage;    /* offset in the exec's h2d or d2h staging */
  CUevent ev;      /* the event at validation */
  CUgraphNode dn;  /* driver node */
  int disabled;    /* switched off by an update to an empty node */
} gnode;

typedef struct {
  uint64_t id;
  int device;
  uint32_t n;
  gnode *nodes;
  uint32_t *order; /* topological */
  uint32_t nedges;
  uint32_t *edges; /* pairs */
  uint32_t *in_start; /* CSR of incoming edges: sources of node i are */
  uint32_t *in_src;   /* in_src[in_start[i] .. in_start[i+1]) */
  CUgraph g;
  CUgraphExec ge; /* NULL: replay */
  uint8_t *h2d, *d2h;
  size_t h2d_len, d2h_len;
  CUevent last; /* marks the end of the last launch that read h2d */
  int last_pending;
  /* Replay: launches of one exec run in order even on different streams,
   * as CUDA orders them; the end of the previous one and its stream. */
  CUevent done;
  CUstream done_stream;
  int done_valid;
  /* Library nodes (LIB): how many, and the w->graph_lib_epoch their
   * captures were checked at; lib_stale: an update changed one that could
   * not be updated in place.  Either makes the next launch capture them
   * all again (a rebuilt driver graph). */
  uint32_t nlib;
  uint64_t lib_epoch;
  int lib_stale;
  /* The session tables' removal counts when every node last passed its
   * launch check: while none moved, the check would pass again. */
  int checked;
  uint64_t checked_allocs, checked_modules, checked_events;
  /* Conditional nodes (rgpu_graph_nodes.def, COND and BODY): the graph
   * each node belongs to (UINT32_MAX: the top; else the index of its body's
   * BODY node), each BODY node's COND, the body graphs the driver made (per
   * BODY node, valid while building), and the handles made for this build
   * (client value -> driver handle). */
  uint32_t nconds;
  uint32_t *scope, *owner;
  CUgraph *body_graph;
  uint64_t *hclient;
  CUgraphConditionalHandle *hdriver;
  uint32_t nhandles;
  CUresult build_err; /* why the driver graph failed, for a graph that cannot replay */
  /* Debug log only: launches, node checks, rebuilds and the time spent in
   * the launch handler since the last report. */
  uint64_t launches, checks, rebuilds;
  double launch_s;
} gexec;

typedef struct rgpu_graph_state {
  rgpu_handle_map execs; /* ptr: gexec * */
  int drv_state;         /* 0 not tried, 1 graph API present, -1 replay only */
  graph_drv d;
} rgpu_graph_state;

static rgpu_graph_state *state(rgpu_worker *w) {
  if (!w->graphs) {
    w->graphs = calloc(1, sizeof *w->graphs);
    if (w->graphs) rgpu_handle_map_init(&w->graphs->execs);
  }
  return w->graphs;
}

static int have_graph_api(rgpu_worker *w, rgpu_graph_state *st) {
  if (st->drv_state == 0) {
    st->drv_state = -1;
    const char *force = getenv("RGPU_GRAPH_REPLAY");
    if (w->drv.lib && !(force && *force == '1')) {
      int ok = 1;
#define RESOLVE(name)                                             \
  *(void **)&st->d.name = dlsym(w->drv.lib, STR(name));           \
  if (!st->d.name) ok = 0;
      GRAPH_FUNCS(RESOLVE)
#undef RESOLVE
      if (ok) st->drv_state = 1;
      *(void **)&st->d.cuGraphNodeSetEnabled = dlsym(w->drv.lib, "cuGraphNodeSetEnabled");
      *(void **)&st->d.cuGraphAddChildGraphNode = dlsym(w->drv.lib, "cuGraphAddChildGraphNode");
      *(void **)&st->d.cuGraphExecChildGraphNodeSetParams =
          dlsym(w->drv.lib, "cuGraphExecChildGraphNodeSetParams");
      *(void **)&st->d.cuGraphConditionalHandleCreate = dlsym(w->drv.lib, "cuGraphConditionalHandleCreate");
      *(void **)&st->d.cuGraphAddNode = dlsym(w->drv.lib, STR(cuGraphAddNode));
    }
    RGPU_DEBUG("session=%llu graphs: %s", (unsigned long long)w->cfg.session_id,
               st->drv_state == 1 ? "driver graph API" : "replay on the stream");
  }
  return st->drv_state == 1;
}

/* ---- validation ---------------------------------------------------------- */

static CUresult check_range(rgpu_worker *w, uint64_t p, uint64_t len, const char *what) {
  if (len && p + len < p) return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: range wraps around", what);
  if (rgpu_alloc_table_lookup(&w->allocs, p, len)) return CUDA_SUCCESS;
  return FAIL(CUDA_ERROR_INVALID_VALUE,
              "%s: %llu bytes at 0x%llx are not inside one device allocation of this session", what,
              (unsigned long long)len, (unsigned long long)p);
}

/* Extent in bytes of a pitched box on the device side. */
static int box_span(uint64_t width, uint64_t height, uint64_t depth, uint64_t pitch,
                    uint64_t rows, uint64_t *out) {
  if (!width || !height || !depth) return -1;
  if ((height > 1 || depth > 1) && pitch < width) return -1;
  if (depth > 1 && rows < height) return -1;
  unsigned __int128 s = (unsigned __int128)(depth - 1) * pitch * rows +
                        (unsigned __int128)(height - 1) * pitch + width;
  if (s > UINT64_MAX) return -1;
  *out = (uint64_t)s;
  return 0;
}

static uint64_t copy_bytes(const gnode *g) {
  unsigned __int128 b = (unsigned __int128)g->n.copy.width * g->n.copy.height * g->n.copy.depth;
  return b > UINT64_MAX ? UINT64_MAX : (uint64_t)b;
}

/* Checks node g against the session (and records what it resolved to).
 * `fresh`: at instantiation/update (records func/event); else at launch,
 * where they must still be the same. */
static CUresult check_node(rgpu_worker *w, gnode *g, uint32_t i, int fresh) {
  switch (g->type) {
  case RGPU_GNODE_KERNEL: {
    const rgpu_handle_entry *e = rgpu_handle_map_get(&w->modules, g->n.kernel.module_id);
    if (!e) return FAIL(CUDA_ERROR_INVALID_HANDLE, "graph node %u: unknown module id %llu", i,
                        (unsigned long long)g->n.kernel.module_id);
    rgpu_module_rec *m = e->ptr;
    if (g->n.kernel.func_index >= m->nfuncs || !m->funcs[g->n.kernel.func_index])
      return FAIL(CUDA_ERROR_INVALID_HANDLE, "graph node %u: module %llu has no function %llu", i,
                  (unsigned long long)g->n.kernel.module_id, (unsigned long long)g->n.kernel.func_index);
    if (!fresh && g->func != m->funcs[g->n.kernel.func_index])
      return FAIL(CUDA_ERROR_INVALID_HANDLE, "graph node %u: its module was unloaded", i);
    g->func = m->funcs[g->n.kernel.func_index];
    const rgpu_gnode_kernel *kn = &g->n.kernel;
    const uint64_t dims[6] = {kn->grid_x, kn->grid_y, kn->grid_z, kn->block_x, kn->block_y, kn->block_z};
    for (int k = 0; k < 6; k++)
      if (dims[k] == 0 || dims[k] > UINT32_MAX)
        return FAIL(CUDA_ERROR_INVALID_VALUE, "graph node %u: bad grid or block size", i);
    if (g->n.kernel.shared_bytes > UINT32_MAX) return FAIL(CUDA_ERROR_INVALID_VALUE, "graph node %u: bad shared size", i);
    if (m->params_known) {
      uint64_t extent = rgpu_module_rec_param_extent(m, (uint32_t)g->n.kernel.func_index);
      if (g->plen != extent)
        return FAIL(CUDA_ERROR_INVALID_VALUE,
                    "graph node %u: %u bytes of parameters, the kernel takes %llu", i, g->plen,
                    (unsigned long long)extent);
    }
    return CUDA_SUCCESS;
  }
  case RGPU_GNODE_MEMCPY: {
    uint64_t dir = g->n.copy.dir, ds = 0, ss = 0;
    if (dir < RGPU_GCOPY_H2D || dir > RGPU_GCOPY_D2D)
      return FAIL(CUDA_ERROR_INVALID_VALUE, "graph node %u: bad copy direction %llu", i,
                  (unsigned long long)dir);
    if (g->plen) return FAIL(CUDA_ERROR_INVALID_VALUE, "graph node %u: copy with parameters", i);
    if (dir != RGPU_GCOPY_D2H) {
      if (box_span(g->n.copy.width, g->n.copy.height, g->n.copy.depth, g->n.copy.dst_pitch, g->n.copy.dst_rows, &ds))
        return FAIL(CUDA_ERROR_INVALID_VALUE, "graph node %u: bad copy extent or pitch", i);
      CUresult r = check_range(w, g->n.copy.dst, ds, "graph memcpy destination");
      if (r) return r;
    }
    if (dir != RGPU_GCOPY_H2D) {
      if (box_span(g->n.copy.width, g->n.copy.height, g->n.copy.depth, g->n.copy.src_pitch, g->n.copy.src_rows, &ss))
        return FAIL(CUDA_ERROR_INVALID_VALUE, "graph node %u: bad copy extent or pitch", i);
      CUresult r = check_range(w, g->n.copy.src, ss, "graph memcpy source");
      if (r) return r;
    }
    if (dir != RGPU_GCOPY_D2D && copy_bytes(g) > w->cfg.max_payload)
      return FAIL(CUDA_ERROR_INVALID_VALUE, "graph node %u: host copy larger than a frame", i);
    return CUDA_SUCCESS;
  }
  case RGPU_GNODE_MEMSET: {
    uint64_t es = g->n.fill.elem_size, span = 0;
    if (es != 1 && es != 2 && es != 4)
      return FAIL(CUDA_ERROR_INVALID_VALUE, "graph node %u: memset element size %llu", i,
                  (unsigned long long)es);
    if (g->n.fill.width > UINT64_MAX / es || box_span(g->n.fill.width * es, g->n.fill.height, 1, g->n.fill.pitch, g->n.fill.height, &span))
      return FAIL(CUDA_ERROR_INVALID_VALUE, "graph node %u: bad memset extent or pitch", i);
    if (g->n.fill.dst % es) return FAIL(CUDA_ERROR_INVALID_VALUE, "graph node %u: misaligned memset", i);
    return check_range(w, g->n.fill.dst, span, "graph memset");
  }
  case RGPU_GNODE_EMPTY: return CUDA_SUCCESS;
  case RGPU_GNODE_EVENT_RECORD:
  case RGPU_GNODE_EVENT_WAIT: {
    const rgpu_handle_entry *e = rgpu_handle_map_get(&w->events, g->n.event.event);
    if (!e) return FAIL(CUDA_ERROR_INVALID_HANDLE, "graph node %u: unknown event id %llu", i,
                        (unsigned long long)g->n.event.event);
    if (!fresh && g->ev != (CUevent)e->ptr)
      return FAIL(CUDA_ERROR_INVALID_HANDLE, "graph node %u: its event was destroyed", i);
    g->ev = (CUevent)e->ptr;
    return CUDA_SUCCESS;
  }
  case RGPU_GNODE_LIB:
    /* The call's own arguments are checked by its handler: when it is
     * captured (instantiation, and again after any free) or at each launch
     * when it runs as a plain call. */
    if (g->n.lib.opcode > UINT32_MAX || !rgpu_graph_lib_entry((uint32_t)g->n.lib.opcode))
      return FAIL(CUDA_ERROR_INVALID_VALUE, "graph node %u: opcode 0x%llx is no library call of a graph",
                  i, (unsigned long long)g->n.lib.opcode);
    if (g->n.lib.stream_at > g->plen || g->plen - g->n.lib.stream_at < 8)
      return FAIL(CUDA_ERROR_INVALID_VALUE, "graph node %u: stream field at %llu of a %u-byte request",
                  i, (unsigned long long)g->n.lib.stream_at, g->plen);
    return CUDA_SUCCESS;
  case RGPU_GNODE_COND: {
    const rgpu_gnode_cond *c = &g->n.cond;
    uint64_t maxsz = c->kind == RGPU_GCOND_IF ? 2 : c->kind == RGPU_GCOND_WHILE ? 1 : 65536;
    if (c->kind > RGPU_GCOND_SWITCH || !c->size || c->size > maxsz || !c->handle ||
        c->default_value > UINT32_MAX || c->flags > 1 || g->plen)
      return FAIL(CUDA_ERROR_INVALID_VALUE, "graph node %u: bad conditional node (kind %llu, %llu bodies)",
                  i, (unsigned long long)c->kind, (unsigned long long)c->size);
    return CUDA_SUCCESS;
  }
  case RGPU_GNODE_BODY:
    /* Its place is checked with the graph's structure (cond_structure). */
    return g->plen ? FAIL(CUDA_ERROR_INVALID_VALUE, "graph node %u: body start with parameters", i)
                   : CUDA_SUCCESS;
  default:
    return FAIL(CUDA_ERROR_INVALID_VALUE, "graph node %u: unknown node type %u", i, g->type);
  }
}

/* ---- conditional nodes ----------------------------------------------------- */

/* Checks where COND and BODY nodes stand (rgpu_graph_nodes.def) and fills
 * x->scope and x->owner: every body starts with its BODY node, branches in
 * order, spans nest, and each COND has exactly its `size` bodies. */
static CUresult cond_structure(rgpu_worker *w, gexec *x) {
  /* A graph without COND or BODY nodes needs none of this. */
  uint32_t k = 0;
  while (k < x->n && x->nodes[k].type != RGPU_GNODE_COND && x->nodes[k].type != RGPU_GNODE_BODY) k++;
  if (k == x->n) return CUDA_SUCCESS;
  x->scope = malloc(((size_t)x->n + 1) * sizeof *x->scope);
  x->owner = malloc(((size_t)x->n + 1) * sizeof *x->owner);
  x->body_graph = calloc((size_t)x->n + 1, sizeof *x->body_graph);
  /* The open COND nodes, innermost last: at most one per nesting level. */
  uint32_t *stk = malloc(((size_t)x->n + 1) * sizeof *stk);
  uint32_t *next_branch = calloc((size_t)x->n + 1, sizeof *next_branch);
  uint32_t *cur_body = malloc(((size_t)x->n + 1) * sizeof *cur_body);
  CUresult r = CUDA_SUCCESS;
  if (!x->scope || !x->owner || !x->body_graph || !stk || !next_branch || !cur_body)
    r = FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory for a graph");
  uint32_t depth = 0;
  for (uint32_t i = 0; r == CUDA_SUCCESS && i <= x->n; i++) {
    /* Close the COND nodes whose span ended before i. */
    while (depth && (uint64_t)stk[depth - 1] + x->nodes[stk[depth - 1]].n.cond.span < i) {
      uint32_t c = stk[--depth];
      if (next_branch[c] != x->nodes[c].n.cond.size)
        r = FAIL(CUDA_ERROR_INVALID_VALUE, "graph node %u: %u bodies of %llu", c, next_branch[c],
                 (unsigned long long)x->nodes[c].n.cond.size);
    }
    if (r != CUDA_SUCCESS || i == x->n) break;
    const gnode *g = &x->nodes[i];
    uint32_t top = depth ? stk[depth - 1] : UINT32_MAX;
    x->owner[i] = UINT32_MAX;
    x->scope[i] = top == UINT32_MAX ? UINT32_MAX : cur_body[top];
    if (g->type == RGPU_GNODE_BODY) {
      if (top == UINT32_MAX || g->n.body.branch != next_branch[top]) {
        r = FAIL(CUDA_ERROR_INVALID_VALUE, "graph node %u: a body start out of place", i);
        break;
      }
      next_branch[top]++;
      cur_body[top] = i;
      x->scope[i] = i;
      x->owner[i] = top;
      continue;
    }
    if (top != UINT32_MAX && cur_body[top] == UINT32_MAX) {
      r = FAIL(CUDA_ERROR_INVALID_VALUE, "graph node %u: inside conditional node %u before its first body", i, top);
      break;
    }
    if (g->type == RGPU_GNODE_COND) {
      uint64_t end = (uint64_t)i + g->n.cond.span;
      uint64_t limit = top == UINT32_MAX ? x->n - 1 : (uint64_t)top + x->nodes[top].n.cond.span;
      if (end > limit || g->n.cond.span < g->n.cond.size) {
        r = FAIL(CUDA_ERROR_INVALID_VALUE, "graph node %u: its bodies run past their graph", i);
        break;
      }
      cur_body[i] = UINT32_MAX;
      stk[depth++] = i;
      x->nconds++;
    }
  }
  /* Edges stay inside one graph and point forward (a COND is built before
   * its bodies, so the build goes in index order). */
  for (uint32_t k = 0; r == CUDA_SUCCESS && k < x->nedges; k++) {
    uint32_t a = x->edges[2 * k], b = x->edges[2 * k + 1];
    if (x->scope[a] != x->scope[b] || a >= b)
      r = FAIL(CUDA_ERROR_INVALID_VALUE, "graph: edge %u -> %u crosses a conditional body", a, b);
  }
  free(stk);
  free(next_branch);
  free(cur_body);
  return r;
}

/* Makes the driver handles of the COND nodes that stand directly in graph
 * `scope` (now built as dg). */
static CUresult cond_make_handles(rgpu_worker *w, rgpu_graph_state *st, gexec *x, uint32_t scope, CUgraph dg) {
  CUcontext ctx = x->device >= 0 && x->device < RGPU_MAX_DEVICES ? w->ctx[x->device] : NULL;
  for (uint32_t i = 0; i < x->n; i++) {
    const gnode *g = &x->nodes[i];
    if (g->type != RGPU_GNODE_COND || x->scope[i] != scope) continue;
    uint32_t k = 0;
    while (k < x->nhandles && x->hclient[k] != g->n.cond.handle) k++;
    if (k < x->nhandles) continue; /* two nodes of one graph on one handle */
    CUgraphConditionalHandle h;
    CUresult r = st->d.cuGraphConditionalHandleCreate(&h, dg, ctx, (unsigned)g->n.cond.default_value,
                                                      (unsigned)g->n.cond.flags);
    if (r != CUDA_SUCCESS) return r;
    x->hclient[x->nhandles] = g->n.cond.handle;
    x->hdriver[x->nhandles++] = h;
  }
  return CUDA_SUCCESS;
}

/* The parameters a kernel node passes to the driver: its own, with every
 * client handle value in an 8-byte aligned word replaced by the driver's
 * handle.  Returns the buffer to use (g->params or out). */
static const uint8_t *cond_patch_params(const gexec *x, const gnode *g, uint8_t *out) {
  if (!x->nconds || g->plen < 8) return g->params;
  int changed = 0;
  for (uint32_t off = 0; off + 8 <= g->plen; off += 8) {
    uint64_t v;
    memcpy(&v, g->params + off, 8);
    for (uint32_t k = 0; k < x->nhandles; k++)
      if (v == x->hclient[k]) {
        if (!changed) memcpy(out, g->params, g->plen);
        changed = 1;
        uint64_t d = (uint64_t)x->hdriver[k];
        memcpy(out + off, &d, 8);
        break;
      }
  }
  return changed ? out : g->params;
}

/* ---- driver-graph nodes ------------------------------------------------- */

static void kernel_ptrs(rgpu_worker *w, const gnode *g, const uint8_t *params, void **kp, uint32_t *np) {
  const rgpu_handle_entry *e = rgpu_handle_map_get(&w->modules, g->n.kernel.module_id);
  rgpu_module_rec *m = e->ptr;
  uint32_t fi = (uint32_t)g->n.kernel.func_index;
  *np = m->params_known ? m->nparams[fi] : 0;
  for (uint32_t k = 0; k < *np && k < MAX_KERNEL_PARAMS; k++)
    kp[k] = (void *)(params + m->param_offsets[m->param_first[fi] + k]);
}

static int params_known(rgpu_worker *w, const gnode *g) {
  const rgpu_handle_entry *e = rgpu_handle_map_get(&w->modules, g->n.kernel.module_id);
  return e && ((rgpu_module_rec *)e->ptr)->params_known;
}

static void fill_memcpy3d(const gexec *x, const gnode *g, CUDA_MEMCPY3D *c) {
  memset(c, 0, sizeof *c);
  c->WidthInBytes = g->n.copy.width;
  c->Height = g->n.copy.height;
  c->Depth = g->n.copy.depth;
  if (g->n.copy.dir == RGPU_GCOPY_H2D) {
    c->srcMemoryType = CU_MEMORYTYPE_HOST;
    c->srcHost = x->h2d + g->stage;
    c->srcPitch = g->n.copy.width;
    c->srcHeight = g->n.copy.height;
  } else {
    c->srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c->srcDevice = (CUdeviceptr)g->n.copy.src;
    c->srcPitch = g->n.copy.src_pitch;
    c->srcHeight = g->n.copy.src_rows;
  }
  if (g->n.copy.dir == RGPU_GCOPY_D2H) {
    c->dstMemoryType = CU_MEMORYTYPE_HOST;
    c->dstHost = x->d2h + g->stage;
    c->dstPitch = g->n.copy.width;
    c->dstHeight = g->n.copy.height;
  } else {
    c->dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c->dstDevice = (CUdeviceptr)g->n.copy.dst;
    c->dstPitch = g->n.copy.dst_pitch;
    c->dstHeight = g->n.copy.dst_rows;
  }
}

static void fill_memset(const gnode *g, CUDA_MEMSET_NODE_PARAMS *m) {
  memset(m, 0, sizeof *m);
  m->dst = (CUdeviceptr)g->n.fill.dst;
  m->pitch = g->n.fill.pitch;
  m->value = (unsigned)g->n.fill.value;
  m->elementSize = (unsigned)g->n.fill.elem_size;
  m->width = g->n.fill.width;
  m->height = g->n.fill.height;
}

/* Adds (update == 0) or updates (in x->ge) driver node i. */
static CUresult driver_node(rgpu_req *rq, rgpu_graph_state *st, gexec *x, uint32_t i,
                            const CUgraphNode *deps, size_t ndeps, int update) {
  rgpu_worker *w = rq->w;
  gnode *g = &x->nodes[i];
  CUcontext ctx = x->device >= 0 && x->device < RGPU_MAX_DEVICES ? w->ctx[x->device] : NULL;
  /* The graph node i belongs to: the top, or a conditional node's body. */
  CUgraph dg = x->nconds && x->scope[i] != UINT32_MAX ? x->body_graph[x->scope[i]] : x->g;
  switch (g->type) {
  case RGPU_GNODE_KERNEL: {
    static __thread void *kp[MAX_KERNEL_PARAMS];
    static __thread _Alignas(64) uint8_t patched[KERNEL_PARAM_BYTES];
    const uint8_t *params = g->plen <= sizeof patched ? cond_patch_params(x, g, patched) : g->params;
    uint32_t np = 0;
    kernel_ptrs(w, g, params, kp, &np);
    size_t sz = g->plen;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, (void *)params, CU_LAUNCH_PARAM_BUFFER_SIZE, &sz,
                     CU_LAUNCH_PARAM_END};
    CUDA_KERNEL_NODE_PARAMS kn;
    memset(&kn, 0, sizeof kn);
    kn.func = (CUfunction)g->func;
    kn.gridDimX = (unsigned)g->n.kernel.grid_x, kn.gridDimY = (unsigned)g->n.kernel.grid_y, kn.gridDimZ = (unsigned)g->n.kernel.grid_z;
    kn.blockDimX = (unsigned)g->n.kernel.block_x, kn.blockDimY = (unsigned)g->n.kernel.block_y, kn.blockDimZ = (unsigned)g->n.kernel.block_z;
    kn.sharedMemBytes = (unsigned)g->n.kernel.shared_bytes;
    if (params_known(w, g))
      kn.kernelParams = np ? kp : NULL;
    else
      kn.extra = g->plen ? extra : NULL;
    return update ? st->d.cuGraphExecKernelNodeSetParams(x->ge, g->dn, &kn)
                  : st->d.cuGraphAddKernelNode(&g->dn, dg, deps, ndeps, &kn);
  }
  case RGPU_GNODE_MEMCPY: {
    CUDA_MEMCPY3D c;
    fill_memcpy3d(x, g, &c);
    return update ? st->d.cuGraphExecMemcpyNodeSetParams(x->ge, g->dn, &c, ctx)
                  : st->d.cuGraphAddMemcpyNode(&g->dn, dg, deps, ndeps, &c, ctx);
  }
  case RGPU_GNODE_MEMSET: {
    CUDA_MEMSET_NODE_PARAMS m;
    fill_memset(g, &m);
    return update ? st->d.cuGraphExecMemsetNodeSetParams(x->ge, g->dn, &m, ctx)
                  : st->d.cuGraphAddMemsetNode(&g->dn, dg, deps, ndeps, &m, ctx);
  }
  case RGPU_GNODE_EMPTY:
    return update ? CUDA_SUCCESS : st->d.cuGraphAddEmptyNode(&g->dn, dg, deps, ndeps);
  case RGPU_GNODE_EVENT_RECORD:
    return update ? st->d.cuGraphExecEventRecordNodeSetEvent(x->ge, g->dn, g->ev)
                  : st->d.cuGraphAddEventRecordNode(&g->dn, dg, deps, ndeps, g->ev);
  case RGPU_GNODE_EVENT_WAIT:
    return update ? st->d.cuGraphExecEventWaitNodeSetEvent(x->ge, g->dn, g->ev)
                  : st->d.cuGraphAddEventWaitNode(&g->dn, dg, deps, ndeps, g->ev);
  case RGPU_GNODE_LIB: {
    /* The library's kernels, captured now, as a child graph (added by
     * copy: the captured graph is not kept). */
    if (!st->d.cuGraphAddChildGraphNode || !st->d.cuGraphExecChildGraphNodeSetParams)
      return CUDA_ERROR_NOT_SUPPORTED;
    CUgraph child = NULL;
    CUresult r = rgpu_graph_lib_capture(rq, (uint32_t)g->n.lib.opcode, g->params, g->plen,
                                        (size_t)g->n.lib.stream_at, &child);
    /* A refusal under capture is not this graph's error: the node then
     * runs as a plain call, whose status is the call's own. */
    rq->msg[0] = 0;
    if (r != CUDA_SUCCESS) return r;
    r = update ? st->d.cuGraphExecChildGraphNodeSetParams(x->ge, g->dn, child)
               : st->d.cuGraphAddChildGraphNode(&g->dn, dg, deps, ndeps, child);
    rgpu_graph_lib_destroy_graph(w, child);
    return r;
  }
  case RGPU_GNODE_BODY:
    return update ? CUDA_SUCCESS : st->d.cuGraphAddEmptyNode(&g->dn, dg, NULL, 0);
  case RGPU_GNODE_COND: {
    if (update) return CUDA_ERROR_NOT_SUPPORTED;
    if (!st->d.cuGraphAddNode || !st->d.cuGraphConditionalHandleCreate) return CUDA_ERROR_NOT_SUPPORTED;
    uint32_t k = 0;
    while (k < x->nhandles && x->hclient[k] != g->n.cond.handle) k++;
    if (k == x->nhandles) return CUDA_ERROR_INVALID_VALUE;
    uint32_t size = (uint32_t)g->n.cond.size;
    CUgraphNodeParams np;
    memset(&np, 0, sizeof np);
    np.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    np.conditional.handle = x->hdriver[k];
    np.conditional.type = (CUgraphConditionalNodeType)g->n.cond.kind;
    np.conditional.size = size;
    np.conditional.ctx = ctx;
    CUresult r = st->d.cuGraphAddNode(&g->dn, dg, deps, NULL, ndeps, &np);
    /* The driver points phGraph_out at its own array of the bodies. */
    CUgraph *bodies = np.conditional.phGraph_out;
    if (r == CUDA_SUCCESS && !bodies) r = CUDA_ERROR_UNKNOWN;
    /* Its BODY nodes learn their graphs; the handles of each body's own
     * conditional nodes are made before any node of that body is added. */
    for (uint32_t j = i + 1; r == CUDA_SUCCESS && j <= i + g->n.cond.span; j++) {
      if (x->nodes[j].type != RGPU_GNODE_BODY || x->owner[j] != i) continue;
      x->body_graph[j] = bodies[x->nodes[j].n.body.branch];
      r = cond_make_handles(w, st, x, j, x->body_graph[j]);
    }
    return r;
  }
  default: return CUDA_ERROR_INVALID_VALUE;
  }
}

static CUresult build_driver_graph(rgpu_req *rq, rgpu_graph_state *st, gexec *x) {
  CUresult r = st->d.cuGraphCreate(&x->g, 0);
  if (r != CUDA_SUCCESS) return r;
  x->nhandles = 0;
  if (x->nconds) {
    if (!st->d.cuGraphAddNode || !st->d.cuGraphConditionalHandleCreate) return CUDA_ERROR_NOT_SUPPORTED;
    free(x->hclient);
    free(x->hdriver);
    x->hclient = malloc(x->nconds * sizeof *x->hclient);
    x->hdriver = malloc(x->nconds * sizeof *x->hdriver);
    if (!x->hclient || !x->hdriver) return CUDA_ERROR_OUT_OF_MEMORY;
    r = cond_make_handles(rq->w, st, x, UINT32_MAX, x->g);
    if (r != CUDA_SUCCESS) return r;
  }
  CUgraphNode *deps = malloc((x->nedges ? x->nedges : 1) * sizeof *deps);
  if (!deps) return CUDA_ERROR_OUT_OF_MEMORY;
  for (uint32_t oi = 0; oi < x->n && r == CUDA_SUCCESS; oi++) {
    /* With conditional nodes, index order (edges point forward there):
     * a COND node makes its bodies' graphs before their nodes come. */
    uint32_t i = x->nconds ? oi : x->order[oi];
    size_t nd = 0;
    for (uint32_t k = x->in_start[i]; k < x->in_start[i + 1]; k++) deps[nd++] = x->nodes[x->in_src[k]].dn;
    r = driver_node(rq, st, x, i, deps, nd, 0);
  }
  free(deps);
  if (r == CUDA_SUCCESS) r = st->d.cuGraphInstantiateWithFlags(&x->ge, x->g, 0);
  if (r != CUDA_SUCCESS) x->ge = NULL;
  /* Nodes switched off by updates stay off in a rebuilt graph. */
  for (uint32_t i = 0; r == CUDA_SUCCESS && i < x->n; i++)
    if (x->nodes[i].disabled)
      r = st->d.cuGraphNodeSetEnabled ? st->d.cuGraphNodeSetEnabled(x->ge, x->nodes[i].dn, 0)
                                      : CUDA_ERROR_NOT_SUPPORTED;
  x->lib_epoch = rq->w->graph_lib_epoch;
  x->lib_stale = 0;
  return r;
}

static void drop_driver_graph(rgpu_graph_state *st, gexec *x) {
  if (x->ge) st->d.cuGraphExecDestroy(x->ge);
  if (x->g) st->d.cuGraphDestroy(x->g);
  x->g = NULL;
  x->ge = NULL;
}

/* Builds x's driver graph (anew, its library nodes captured again, when it
 * has one), or leaves x to replay when the driver cannot take it (x->g and
 * x->ge NULL then).  A launch in flight keeps the graph it runs: the
 * driver frees a destroyed one when it ends. */
static void build_or_replay(rgpu_req *rq, rgpu_graph_state *st, gexec *x) {
  rgpu_worker *w = rq->w;
  drop_driver_graph(st, x);
  CUresult br = build_driver_graph(rq, st, x);
  x->build_err = br;
  if (br == CUDA_SUCCESS) return;
  /* A driver whose graph support cannot take this graph, or a library node
   * that cannot be captured (expected on softgpu: debug only). */
  rgpu_log(br == CUDA_ERROR_NOT_SUPPORTED ? RGPU_LOG_DEBUG : RGPU_LOG_INFO,
           "session=%llu graph %llu: the driver graph failed (%s%s): it runs node by node",
           (unsigned long long)w->cfg.session_id, (unsigned long long)x->id, ENAME(br),
           x->nlib ? "; it has library nodes" : "");
  drop_driver_graph(st, x);
}

/* ---- replay --------------------------------------------------------------- */

static CUresult replay_copy(rgpu_worker *w, gexec *x, const gnode *g, CUstream s) {
  const rgpu_driver *D = &w->drv;
  uint64_t width = g->n.copy.width, height = g->n.copy.height, depth = g->n.copy.depth;
  uint64_t dp = g->n.copy.dst_pitch, dr = g->n.copy.dst_rows, sp = g->n.copy.src_pitch, sr = g->n.copy.src_rows;
  int dir = (int)g->n.copy.dir;
  /* The host side is contiguous; the device side may be pitched. */
  if (dir == RGPU_GCOPY_H2D) sp = width, sr = height;
  if (dir == RGPU_GCOPY_D2H) dp = width, dr = height;
  int flat = dp == width && sp == width && (depth == 1 || (dr == height && sr == height));
  uint64_t rows = flat ? 1 : height * depth;
  uint64_t len = flat ? width * height * depth : width;
  for (uint64_t k = 0; k < rows; k++) {
    uint64_t z = flat ? 0 : k / height, y = flat ? 0 : k % height;
    uint64_t doff = z * dp * dr + y * dp, soff = z * sp * sr + y * sp;
    CUresult r;
    if (dir == RGPU_GCOPY_H2D)
      r = D->cuMemcpyHtoDAsync((CUdeviceptr)(g->n.copy.dst + doff), x->h2d + g->stage + soff, len, s);
    else if (dir == RGPU_GCOPY_D2H)
      r = D->cuMemcpyDtoHAsync(x->d2h + g->stage + doff, (CUdeviceptr)(g->n.copy.src + soff), len, s);
    else
      r = D->cuMemcpyDtoDAsync((CUdeviceptr)(g->n.copy.dst + doff), (CUdeviceptr)(g->n.copy.src + soff), len, s);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

static CUresult replay_memset(rgpu_worker *w, const gnode *g, CUstream s) {
  const rgpu_driver *D = &w->drv;
  uint64_t es = g->n.fill.elem_size, width = g->n.fill.width, height = g->n.fill.height, pitch = g->n.fill.pitch;
  int flat = height == 1 || pitch == width * es;
  uint64_t rows = flat ? 1 : height, count = flat ? width * height : width;
  for (uint64_t y = 0; y < rows; y++) {
    CUdeviceptr d = (CUdeviceptr)(g->n.fill.dst + y * pitch);
    CUresult r = es == 1   ? D->cuMemsetD8Async(d, (unsigned char)g->n.fill.value, count, s)
                 : es == 2 ? D->cuMemsetD16Async(d, (unsigned short)g->n.fill.value, count, s)
                           : D->cuMemsetD32Async(d, (unsigned)g->n.fill.value, count, s);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

static CUresult replay(rgpu_req *rq, gexec *x, CUstream s, uint64_t stream_id, uint32_t *failed) {
  rgpu_worker *w = rq->w;
  const rgpu_driver *D = &w->drv;
  if (x->nconds) {
    /* Replay cannot branch on a value the GPU writes. */
    *failed = 0;
    rgpu_worker_fail(w, CUDA_ERROR_NOT_SUPPORTED,
                     "graph launch: conditional nodes need the driver's graph API, and the driver "
                     "graph could not be built (%s)", x->build_err ? ENAME(x->build_err) : "no graph API");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  static __thread void *kp[MAX_KERNEL_PARAMS];
  for (uint32_t oi = 0; oi < x->n; oi++) {
    uint32_t i = x->order[oi];
    gnode *g = &x->nodes[i];
    CUresult r = CUDA_SUCCESS;
    *failed = i;
    if (g->disabled) continue;
    switch (g->type) {
    case RGPU_GNODE_KERNEL: {
      uint32_t np = 0;
      kernel_ptrs(w, g, g->params, kp, &np);
      if (params_known(w, g)) {
        r = D->cuLaunchKernel((CUfunction)g->func, (unsigned)g->n.kernel.grid_x, (unsigned)g->n.kernel.grid_y,
                              (unsigned)g->n.kernel.grid_z, (unsigned)g->n.kernel.block_x, (unsigned)g->n.kernel.block_y,
                              (unsigned)g->n.kernel.block_z, (unsigned)g->n.kernel.shared_bytes, s, np ? kp : NULL, NULL);
      } else {
        size_t sz = g->plen;
        void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, g->params, CU_LAUNCH_PARAM_BUFFER_SIZE,
                         &sz, CU_LAUNCH_PARAM_END};
        r = D->cuLaunchKernel((CUfunction)g->func, (unsigned)g->n.kernel.grid_x, (unsigned)g->n.kernel.grid_y,
                              (unsigned)g->n.kernel.grid_z, (unsigned)g->n.kernel.block_x, (unsigned)g->n.kernel.block_y,
                              (unsigned)g->n.kernel.block_z, (unsigned)g->n.kernel.shared_bytes, s, NULL, g->plen ? extra : NULL);
      }
      break;
    }
    case RGPU_GNODE_MEMCPY: r = replay_copy(w, x, g, s); break;
    case RGPU_GNODE_MEMSET: r = replay_memset(w, g, s); break;
    case RGPU_GNODE_EVENT_RECORD: r = D->cuEventRecord(g->ev, s); break;
    case RGPU_GNODE_EVENT_WAIT: r = D->cuStreamWaitEvent(s, g->ev, 0); break;
    case RGPU_GNODE_LIB:
      r = rgpu_graph_lib_run_plain(rq, (uint32_t)g->n.lib.opcode, g->params, g->plen,
                                   (size_t)g->n.lib.stream_at, stream_id);
      break;
    default: break;
    }
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

/* ---- exec lifetime -------------------------------------------------------- */

static void exec_free(rgpu_worker *w, rgpu_graph_state *st, gexec *x, int destroy) {
  if (destroy && w->drv_state == 1) {
    if (x->last) {
      if (x->last_pending) w->drv.cuEventSynchronize(x->last);
      w->drv.cuEventDestroy(x->last);
    }
    if (x->done) w->drv.cuEventDestroy(x->done);
    drop_driver_graph(st, x);
  }
  for (uint32_t i = 0; i < x->n; i++) free(x->nodes[i].params);
  free(x->nodes);
  free(x->order);
  free(x->edges);
  free(x->in_start);
  free(x->in_src);
  free(x->h2d);
  free(x->d2h);
  free(x->scope);
  free(x->owner);
  free(x->body_graph);
  free(x->hclient);
  free(x->hdriver);
  free(x);
}

/* Decodes node i from the arrays into g (params copied, aligned). */
static CUresult decode_node(rgpu_worker *w, gnode *g, uint32_t i, const rgpu_array *types,
                            const rgpu_array *words, const rgpu_array *plens, uint32_t k,
                            const uint8_t *params, size_t *poff, size_t ptotal) {
  memset(g, 0, sizeof *g);
  g->type = rgpu_array_u32(types, k);
  uint64_t nw[RGPU_GNODE_WORDS];
  for (int j = 0; j < RGPU_GNODE_WORDS; j++) nw[j] = rgpu_array_u64(words, k * RGPU_GNODE_WORDS + (uint32_t)j);
  rgpu_gnode_decode(g->type, nw, &g->n);
  uint32_t pl = rgpu_array_u32(plens, k);
  if (pl > ptotal - *poff)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "graph node %u: parameters run past the buffer", i);
  if (pl) {
    g->params = aligned_alloc(64, ((size_t)pl + 63) & ~(size_t)63);
    if (!g->params) return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory for graph parameters");
    memcpy(g->params, params + *poff, pl);
  }
  g->plen = pl;
  *poff += pl;
  return CUDA_SUCCESS;
}

CUresult rgpu_h_graph_exec_create(rgpu_req *rq, const rgpu_msg_graph_exec_create_req *q) {
  rgpu_worker *w = rq->w;
  rgpu_graph_state *st = state(w);
  if (!st) return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory for graphs");
  if (q->exec_id == 0 || rgpu_handle_map_get(&st->execs, q->exec_id))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "graph exec id %llu is 0 or already in use",
                (unsigned long long)q->exec_id);
  uint32_t nn = q->types.count;
  if ((uint64_t)q->words.count != (uint64_t)nn * RGPU_GRAPH_WORDS || q->param_lens.count != nn ||
      (q->edges.count & 1))
    return FAIL(CUDA_ERROR_INVALID_VALUE,
                "graph: %u nodes need %u words and %u parameter lengths (got %u, %u) and edges pairs",
                nn, nn * RGPU_GRAPH_WORDS, nn, q->words.count, q->param_lens.count);
  gexec *x = calloc(1, sizeof *x);
  if (!x) return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory for a graph");
  x->id = q->exec_id;
  x->device = w->cur_dev;
  x->n = nn;
  x->nedges = q->edges.count / 2;
  x->nodes = calloc(nn ? nn : 1, sizeof *x->nodes);
  x->order = calloc(nn ? nn : 1, sizeof *x->order);
  x->edges = calloc(q->edges.count ? q->edges.count : 1, sizeof *x->edges);
  uint32_t *indeg = calloc(nn ? nn : 1, sizeof *indeg);
  CUresult r = CUDA_SUCCESS;
  if (!x->nodes || !x->order || !x->edges || !indeg)
    r = FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory for a graph");
  size_t poff = 0;
  for (uint32_t i = 0; r == CUDA_SUCCESS && i < nn; i++) {
    r = decode_node(w, &x->nodes[i], i, &q->types, &q->words, &q->param_lens, i, q->params.data, &poff,
                    q->params.len);
    if (r == CUDA_SUCCESS) r = check_node(w, &x->nodes[i], i, 1);
    if (r == CUDA_SUCCESS && x->nodes[i].type == RGPU_GNODE_LIB) x->nlib++;
  }
  if (r == CUDA_SUCCESS && poff != q->params.len)
    r = FAIL(CUDA_ERROR_INVALID_VALUE, "graph: %zu parameter bytes unused", q->params.len - poff);
  for (uint32_t k = 0; r == CUDA_SUCCESS && k < q->edges.count; k++) {
    x->edges[k] = rgpu_array_u32(&q->edges, k);
    if (x->edges[k] >= nn) r = FAIL(CUDA_ERROR_INVALID_VALUE, "graph: edge to node %u of %u", x->edges[k], nn);
    if (r == CUDA_SUCCESS && (k & 1)) {
      if (x->edges[k] == x->edges[k - 1]) r = FAIL(CUDA_ERROR_INVALID_VALUE, "graph: self edge");
      indeg[x->edges[k]]++;
    }
  }
  /* Kahn's algorithm: the order for building and replay, and no cycles.
   * Edges as CSR both ways, so it is linear in nodes + edges. */
  uint32_t *out_start = NULL, *out_dst = NULL;
  if (r == CUDA_SUCCESS) {
    x->in_start = calloc((size_t)nn + 1, sizeof *x->in_start);
    x->in_src = malloc(((size_t)x->nedges + 1) * sizeof *x->in_src);
    out_start = calloc((size_t)nn + 1, sizeof *out_start);
    out_dst = malloc(((size_t)x->nedges + 1) * sizeof *out_dst);
    uint32_t *fi = calloc((size_t)nn + 1, sizeof *fi), *fo = calloc((size_t)nn + 1, sizeof *fo);
    if (!x->in_start || !x->in_src || !out_start || !out_dst || !fi || !fo) {
      r = FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory for a graph");
    } else {
      for (uint32_t k = 0; k < x->nedges; k++) {
        out_start[x->edges[2 * k] + 1]++;
        x->in_start[x->edges[2 * k + 1] + 1]++;
      }
      for (uint32_t i = 0; i < nn; i++) {
        out_start[i + 1] += out_start[i];
        x->in_start[i + 1] += x->in_start[i];
      }
      for (uint32_t k = 0; k < x->nedges; k++) {
        uint32_t a = x->edges[2 * k], b = x->edges[2 * k + 1];
        out_dst[out_start[a] + fo[a]++] = b;
        x->in_src[x->in_start[b] + fi[b]++] = a;
      }
      uint32_t head = 0, tail = 0;
      for (uint32_t i = 0; i < nn; i++)
        if (!indeg[i]) x->order[tail++] = i;
      while (head < tail) {
        uint32_t u = x->order[head++];
        for (uint32_t k = out_start[u]; k < out_start[u + 1]; k++)
          if (--indeg[out_dst[k]] == 0) x->order[tail++] = out_dst[k];
      }
      if (tail != nn) r = FAIL(CUDA_ERROR_INVALID_VALUE, "graph: the edges form a cycle");
    }
    free(fi);
    free(fo);
  }
  free(out_start);
  free(out_dst);
  if (r == CUDA_SUCCESS) r = cond_structure(w, x);
  /* Staging for the host side of copies, in node order. */
  for (uint32_t i = 0; r == CUDA_SUCCESS && i < nn; i++) {
    gnode *g = &x->nodes[i];
    if (g->type != RGPU_GNODE_MEMCPY || g->n.copy.dir == RGPU_GCOPY_D2D) continue;
    size_t *len = g->n.copy.dir == RGPU_GCOPY_H2D ? &x->h2d_len : &x->d2h_len;
    g->stage = *len;
    *len += (size_t)copy_bytes(g);
    if (*len > w->cfg.max_payload)
      r = FAIL(CUDA_ERROR_INVALID_VALUE, "graph: host copies of %zu bytes per launch exceed a frame", *len);
  }
  if (r == CUDA_SUCCESS && x->h2d_len && !(x->h2d = malloc(x->h2d_len))) r = CUDA_ERROR_OUT_OF_MEMORY;
  if (r == CUDA_SUCCESS && x->d2h_len && !(x->d2h = malloc(x->d2h_len))) r = CUDA_ERROR_OUT_OF_MEMORY;
  if (r == CUDA_SUCCESS && have_graph_api(w, st)) build_or_replay(rq, st, x);
  if (r == CUDA_SUCCESS && rgpu_handle_map_put(&st->execs, x->id, x, w->cur_dev))
    r = FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory recording a graph");
  free(indeg);
  if (r != CUDA_SUCCESS) exec_free(w, st, x, 1);
  return r;
}

static gexec *get_exec(rgpu_worker *w, uint64_t id) {
  rgpu_graph_state *st = w->graphs;
  const rgpu_handle_entry *e = st ? rgpu_handle_map_get(&st->execs, id) : NULL;
  if (!e) {
    FAIL(CUDA_ERROR_INVALID_HANDLE, "unknown graph exec id %llu", (unsigned long long)id);
    return NULL;
  }
  return e->ptr;
}

CUresult rgpu_h_graph_exec_destroy(rgpu_req *rq, const rgpu_msg_graph_exec_destroy_req *q) {
  rgpu_worker *w = rq->w;
  gexec *x = get_exec(w, q->exec_id);
  if (!x) return CUDA_ERROR_INVALID_HANDLE;
  rgpu_handle_map_remove(&w->graphs->execs, q->exec_id, NULL);
  exec_free(w, w->graphs, x, 1);
  return CUDA_SUCCESS;
}

static CUresult launch_exec(rgpu_req *rq, gexec *x, const rgpu_msg_graph_launch_req *q);

CUresult rgpu_h_graph_launch(rgpu_req *rq, const rgpu_msg_graph_launch_req *q) {
  rgpu_worker *w = rq->w;
  gexec *x = get_exec(w, q->exec_id);
  if (!x) return CUDA_ERROR_INVALID_HANDLE;
  if (!rgpu_log_enabled(RGPU_LOG_DEBUG)) return launch_exec(rq, x, q);
  /* What a launch costs the server, every 32 launches of a graph. */
  double t0 = rgpu_clock_s();
  CUresult r = launch_exec(rq, x, q);
  x->launch_s += rgpu_clock_s() - t0;
  if (++x->launches % 32 == 0) {
    RGPU_DEBUG("session=%llu graph %llu (%u nodes, %u library nodes, %s): %.1f us a launch in the "
               "server over the last 32; node checks %llu, rebuilds %llu in all",
               (unsigned long long)w->cfg.session_id, (unsigned long long)x->id, x->n, x->nlib,
               x->ge ? "driver graph" : "node by node", x->launch_s / 32 * 1e6,
               (unsigned long long)x->checks, (unsigned long long)x->rebuilds);
    x->launch_s = 0;
  }
  return r;
}

static CUresult launch_exec(rgpu_req *rq, gexec *x, const rgpu_msg_graph_launch_req *q) {
  rgpu_worker *w = rq->w;
  const rgpu_driver *D = &w->drv;
  if (q->h2d.len != x->h2d_len)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "graph launch: %zu bytes of host data, the graph copies %zu",
                q->h2d.len, x->h2d_len);
  CUstream s = NULL;
  if (q->stream) {
    const rgpu_handle_entry *e = rgpu_handle_map_get(&w->streams, q->stream);
    if (!e) return FAIL(CUDA_ERROR_INVALID_HANDLE, "unknown stream id %llu", (unsigned long long)q->stream);
    s = (CUstream)e->ptr;
  }
  /* What the graph touches may have been freed or unloaded since.  Each
   * node's check is a few table searches, on every launch of a graph that
   * may have thousands of nodes, so they run again only after one of the
   * tables lost an entry. */
  if (!x->checked || x->checked_allocs != w->allocs.removals ||
      x->checked_modules != w->modules.removals || x->checked_events != w->events.removals) {
    x->checked = 0;
    x->checks++;
    for (uint32_t i = 0; i < x->n; i++) {
      if (x->nodes[i].disabled) continue;
      CUresult r = check_node(w, &x->nodes[i], i, 0);
      if (r) return r;
    }
    x->checked = 1;
    x->checked_allocs = w->allocs.removals;
    x->checked_modules = w->modules.removals;
    x->checked_events = w->events.removals;
  }
  if (x->ge && x->nlib && (x->lib_stale || x->lib_epoch != w->graph_lib_epoch)) {
    /* Memory was freed since the library nodes were captured (and checked):
     * capture them again, which checks them again. */
    if (x->last_pending) D->cuEventSynchronize(x->last);
    x->last_pending = 0;
    x->rebuilds++;
    build_or_replay(rq, w->graphs, x);
  }
  if (x->h2d_len) {
    /* The staging buffer is read by the previous launch until it ends. */
    if (x->last_pending) D->cuEventSynchronize(x->last);
    x->last_pending = 0;
    memcpy(x->h2d, q->h2d.data, x->h2d_len);
  }
  CUresult r;
  uint32_t failed = 0;
  if (x->ge) {
    r = w->graphs->d.cuGraphLaunch(x->ge, s);
  } else {
    if (x->done_valid && x->done_stream != s) D->cuStreamWaitEvent(s, x->done, 0);
    r = replay(rq, x, s, q->stream, &failed);
    if (r == CUDA_SUCCESS && (x->done || D->cuEventCreate(&x->done, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS)) {
      x->done_valid = D->cuEventRecord(x->done, s) == CUDA_SUCCESS;
      x->done_stream = s;
    }
  }
  if (r != CUDA_SUCCESS) {
    if (x->h2d_len) D->cuStreamSynchronize(s);
    if (x->ge) return FAIL(r, "graph launch: %s", ENAME(r));
    /* A library node's failure keeps its handler's message. */
    if (x->nodes[failed].type == RGPU_GNODE_LIB && rq->msg[0]) return r;
    return FAIL(r, "graph launch (replay), node %u: %s", failed, ENAME(r));
  }
  if (x->h2d_len) {
    if (!x->last && D->cuEventCreate(&x->last, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) x->last = NULL;
    if (x->last && D->cuEventRecord(x->last, s) == CUDA_SUCCESS)
      x->last_pending = 1;
    else
      D->cuStreamSynchronize(s);
  }
  if (x->d2h_len) {
    /* The results are the reply: wait for the stream here. */
    CUresult sr = D->cuStreamSynchronize(s);
    if (sr != CUDA_SUCCESS) return FAIL(sr, "graph launch: %s", ENAME(sr));
    if (rq->need_reply) rgpu_buf_put(rq->rep, x->d2h, x->d2h_len);
  }
  return CUDA_SUCCESS;
}

CUresult rgpu_h_graph_exec_update(rgpu_req *rq, const rgpu_msg_graph_exec_update_req *q) {
  rgpu_worker *w = rq->w;
  gexec *x = get_exec(w, q->exec_id);
  if (!x) return CUDA_ERROR_INVALID_HANDLE;
  uint32_t cnt = q->indices.count;
  if (q->types.count != cnt || (uint64_t)q->words.count != (uint64_t)cnt * RGPU_GRAPH_WORDS ||
      q->param_lens.count != cnt)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "graph update: array lengths disagree");
  /* Validate everything first, so a refused update changes nothing. */
  gnode *nw = calloc(cnt ? cnt : 1, sizeof *nw);
  if (!nw) return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory for a graph update");
  CUresult r = CUDA_SUCCESS;
  size_t poff = 0;
  uint32_t k = 0;
  for (; r == CUDA_SUCCESS && k < cnt; k++) {
    uint32_t i = rgpu_array_u32(&q->indices, k);
    if (i >= x->n) {
      r = FAIL(CUDA_ERROR_INVALID_VALUE, "graph update: node %u of %u", i, x->n);
      break;
    }
    r = decode_node(w, &nw[k], i, &q->types, &q->words, &q->param_lens, k, q->params.data, &poff,
                    q->params.len);
    const gnode *old = &x->nodes[i];
    /* An empty node in place of a kernel, copy or memset disables it
     * (cudaGraphNodeSetEnabled); its own type enables it again. */
    if (r == CUDA_SUCCESS && nw[k].type == RGPU_GNODE_EMPTY &&
        (old->type == RGPU_GNODE_KERNEL || old->type == RGPU_GNODE_MEMCPY ||
         old->type == RGPU_GNODE_MEMSET)) {
      if (x->ge && !w->graphs->d.cuGraphNodeSetEnabled)
        r = FAIL(CUDA_ERROR_NOT_SUPPORTED, "graph update: the driver cannot disable nodes");
      nw[k].disabled = 1;
      continue;
    }
    if (r == CUDA_SUCCESS) r = check_node(w, &nw[k], i, 1);
    if (r == CUDA_SUCCESS && nw[k].type != old->type)
      r = FAIL(CUDA_ERROR_INVALID_VALUE, "graph update: node %u changes type", i);
    if (r == CUDA_SUCCESS && (old->type == RGPU_GNODE_COND || old->type == RGPU_GNODE_BODY))
      r = FAIL(CUDA_ERROR_NOT_SUPPORTED, "graph update: node %u is part of a conditional node", i);
    if (r == CUDA_SUCCESS && old->type == RGPU_GNODE_MEMCPY &&
        (nw[k].n.copy.dir != old->n.copy.dir || (old->n.copy.dir != RGPU_GCOPY_D2D && copy_bytes(&nw[k]) != copy_bytes(old))))
      r = FAIL(CUDA_ERROR_INVALID_VALUE, "graph update: node %u changes its copy direction or host size", i);
  }
  if (r == CUDA_SUCCESS && poff != q->params.len)
    r = FAIL(CUDA_ERROR_INVALID_VALUE, "graph update: parameter bytes unused");
  for (uint32_t j = 0; r == CUDA_SUCCESS && j < cnt; j++) {
    uint32_t i = rgpu_array_u32(&q->indices, j);
    gnode *g = &x->nodes[i];
    if (nw[j].disabled) {
      if (!g->disabled && x->ge) {
        CUresult dr = w->graphs->d.cuGraphNodeSetEnabled(x->ge, g->dn, 0);
        if (dr != CUDA_SUCCESS) r = FAIL(dr, "graph: disabling node %u: %s", i, ENAME(dr));
      }
      if (r == CUDA_SUCCESS) g->disabled = 1;
      continue;
    }
    int was_disabled = g->disabled;
    nw[j].stage = g->stage;
    nw[j].dn = g->dn;
    free(g->params);
    *g = nw[j];
    nw[j].params = NULL;
    if (x->ge && g->type == RGPU_GNODE_LIB) {
      /* Captured again at the next launch, with the whole graph if the
       * new capture does not fit the old one's place. */
      if (driver_node(rq, w->graphs, x, i, NULL, 0, 1) != CUDA_SUCCESS) x->lib_stale = 1;
    } else if (x->ge) {
      CUresult dr = driver_node(rq, w->graphs, x, i, NULL, 0, 1);
      if (dr == CUDA_SUCCESS && was_disabled) dr = w->graphs->d.cuGraphNodeSetEnabled(x->ge, g->dn, 1);
      if (dr != CUDA_SUCCESS) r = FAIL(dr, "graph update of node %u: %s", i, ENAME(dr));
    }
  }
  for (uint32_t j = 0; j < cnt; j++) free(nw[j].params);
  free(nw);
  x->checked = 0;
  return r;
}

typedef struct {
  rgpu_worker *w;
  int destroy;
} drop_ctx;

static void drop_one(void *ctx, const rgpu_handle_entry *e) {
  drop_ctx *d = ctx;
  exec_free(d->w, d->w->graphs, e->ptr, d->destroy);
}

void rgpu_graph_drop_device(rgpu_worker *w, int dev, int destroy) {
  rgpu_graph_state *st = w->graphs;
  if (!st) return;
  drop_ctx d = {w, destroy};
  rgpu_handle_map_remove_matching(&st->execs, dev, drop_one, &d);
  if (dev < 0) {
    rgpu_handle_map_free(&st->execs);
    free(st);
    w->graphs = NULL;
  }
}
