/* CUDA graphs, the executable graph: instantiation, levels, launch and
 * updates (rgpu_cudart_graph_internal.h lists the three graph files).
 *
 * Instantiation flattens the graph (child graphs are inlined between two
 * empty nodes) and ships it to the server once, as one GRAPH_EXEC_CREATE
 * per "level"; cudaGraphLaunch is then one GRAPH_LAUNCH per level, and a
 * graph without host nodes has exactly one level.
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
 * node, none of them waited for. */
#include <stdlib.h>
#include <string.h>

#include "rgpu_calls.h"
#include "rgpu_cudart.h"
#include "rgpu_cudart_graph.h"
#include "rgpu_cudart_graph_internal.h"
#include "rgpu_graph_nodes.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"

/* Host-to-device bytes a launch carries itself; larger copies go ahead of
 * it through a device staging buffer (so no size limit applies). */
#define H2D_INLINE_MAX (1u << 20)

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
  /* Conditional nodes: the graph the node is in (UINT32_MAX: the top, else
   * its body's BODY node), for a BODY node its branch + 1, for a COND node
   * how many flat nodes after it hold its bodies. */
  uint32_t scope, body, span;
} flat_node;

typedef struct {
  uint64_t server_id; /* 0: no device nodes in this level */
  uint32_t *host;     /* flat indices of host nodes, in order */
  size_t nhost, cap_host;
  uint32_t *dev;      /* flat indices of device nodes, in order */
  size_t ndev, cap_dev;
  size_t h2d_bytes;
  uint32_t *d2h; /* flat indices of device-to-host copies, in order */
  uint32_t *h2d_big; /* host-to-device copies sent ahead through staging */
  size_t nh2d_big, cap_h2d_big;
  size_t nd2h, cap_d2h;
} level_t;

struct CUgraphExec_st {
  uint32_t magic;
  int device;
  unsigned long long flags;
  flat_node *f;
  size_t nf;
  level_t *lv;
  size_t nlevels;
  /* Blocks an alloc node allocates that no free node of the graph frees:
   * each launch leaves them to the program (rgpu_cudart_graph_mem.c). */
  uint64_t *escapes;
  size_t nescapes;
  /* The graph's user objects (and its child graphs'), held until the work
   * of every launch is done; the streams it was launched on, for that. */
  rgpu_user_refs user_refs;
  cudaStream_t *launched; /* as handles: cudaStreamPerThread for a _ptsz NULL */
  size_t nlaunched, caplaunched;
};

/* ---- flattening ----------------------------------------------------------- */

static int valid_exec(cudaGraphExec_t e) { return e && e->magic == EXEC_MAGIC; }

typedef struct {
  flat_node *v;
  size_t n, cap;
} flat_list;

static void flat_free(flat_node *v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    node_params_free(&v[i].p);
    free(v[i].deps);
  }
  free(v);
}

static cudaError_t flat_push(flat_list *fl, const node_params *p, uint64_t orig_id,
                             const uint32_t *deps, size_t ndeps, uint32_t *idx) {
  if (RGPU_ARRAY_RESERVE(fl->v, fl->cap, fl->n + 1, 8)) return cudaErrorMemoryAllocation;
  flat_node *f = &fl->v[fl->n];
  memset(f, 0, sizeof *f);
  if (p->type == cudaGraphNodeTypeConditional) {
    /* Its bodies are flattened after it: the flat node keeps the rest. */
    f->p = *p;
    f->p.bodies = NULL;
    f->p.offsets = NULL;
    f->p.argv = NULL;
    f->p.kattrs = NULL;
    f->p.nkattrs = 0;
    f->p.child = NULL;
  } else if (p->type != cudaGraphNodeTypeGraph) {
    cudaError_t e = node_params_copy(&f->p, p);
    if (e != cudaSuccess) return e;
  } else {
    f->p.type = cudaGraphNodeTypeGraph; /* entry of an inlined child: empty on the wire */
  }
  if (ndeps) {
    f->deps = malloc(ndeps * sizeof *f->deps);
    if (!f->deps) {
      node_params_free(&f->p);
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
static cudaError_t flatten(cudaGraph_t g, uint32_t entry, flat_list *fl, int depth, uint32_t scope) {
  if (depth > 32) return cudaErrorInvalidValue;
  size_t *order = malloc((g->n ? g->n : 1) * sizeof *order);
  uint32_t *idx = malloc((g->n ? g->n : 1) * sizeof *idx);
  uint32_t *deps = NULL;
  size_t capdeps = 0;
  cudaError_t e = cudaSuccess;
  if (!order || !idx) e = cudaErrorMemoryAllocation;
  if (e == cudaSuccess && graph_topo_order(g, order)) e = cudaErrorInvalidValue; /* cycle */
  for (size_t oi = 0; e == cudaSuccess && oi < g->n; oi++) {
    size_t i = order[oi];
    cudaGraphNode_t n = g->nodes[i];
    size_t nd = 0;
    if (RGPU_ARRAY_RESERVE(deps, capdeps, n->ndeps + 1, 8)) {
      e = cudaErrorMemoryAllocation;
      break;
    }
    for (size_t k = 0; k < n->ndeps; k++) deps[nd++] = idx[n->deps[k]->pos];
    if (!nd && entry != UINT32_MAX) deps[nd++] = entry;
    uint32_t me;
    if (scope != UINT32_MAX && (e = cond_body_node_ok(&n->p)) != cudaSuccess) break;
    e = flat_push(fl, &n->p, n->id, deps, nd, &me);
    if (e != cudaSuccess) break;
    fl->v[me].scope = scope;
    if (n->p.type == cudaGraphNodeTypeConditional) {
      /* Each body behind its BODY node, which waits for the COND node (for
       * the levels here; the wire has no edge across graphs). */
      for (uint32_t b = 0; e == cudaSuccess && b < n->p.cond_size; b++) {
        node_params empty;
        memset(&empty, 0, sizeof empty);
        empty.type = cudaGraphNodeTypeEmpty;
        uint32_t marker;
        e = flat_push(fl, &empty, 0, &me, 1, &marker);
        if (e != cudaSuccess) break;
        fl->v[marker].body = b + 1;
        fl->v[marker].scope = marker;
        e = flatten(n->p.bodies[b], marker, fl, depth + 1, marker);
      }
      if (e != cudaSuccess) break;
      fl->v[me].span = (uint32_t)(fl->n - me - 1);
      idx[i] = me;
    } else if (n->p.type == cudaGraphNodeTypeGraph) {
      size_t first = fl->n;
      e = flatten(n->p.child, me, fl, depth + 1, scope);
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
      fl->v[exit_idx].scope = scope;
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
  cudaError_t err; /* a node that could not be encoded (a library node's request) */
} node_enc;

static void enc_init(node_enc *x) {
  x->err = cudaSuccess;
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
  if (f->body || f->p.type == cudaGraphNodeTypeConditional) {
    rgpu_gnode n;
    memset(&n, 0, sizeof n);
    if (f->body) {
      n.type = RGPU_GNODE_BODY;
      n.body.branch = f->body - 1;
    } else {
      n.type = RGPU_GNODE_COND;
      n.cond = (rgpu_gnode_cond){.handle = f->p.cond_handle,
                                 .kind = f->p.cond_kind,
                                 .size = f->p.cond_size,
                                 .default_value = f->p.cond_default,
                                 .flags = f->p.cond_flags,
                                 .span = f->span};
    }
    uint64_t w[RGPU_GNODE_WORDS];
    rgpu_gnode_encode(&n, w);
    rgpu_buf_put_u32(&x->types, n.type);
    rgpu_buf_put(&x->words, w, sizeof w);
    rgpu_buf_put_u32(&x->plens, 0);
    return;
  }
  if (f->disabled || f->direct) {
    node_params empty;
    memset(&empty, 0, sizeof empty);
    empty.type = cudaGraphNodeTypeEmpty;
    enc_node(x, &empty, 0);
  } else {
    enc_node(x, &f->p, f->stage);
  }
}

/* One side of a copy node as the wire carries it: its device address (0
 * for a host side, which the client moves itself), pitch and rows (the
 * extent's where the API left them 0); a staged host side is the staging
 * buffer, packed. */
static void gcopy_side(const struct cudaPitchedPtr *pp, const struct cudaExtent *ex,
                       uint64_t dev_addr, int host_side, uint64_t stage, uint64_t *addr,
                       uint64_t *pitch, uint64_t *rows) {
  if (host_side && stage) {
    *addr = stage;
    *pitch = ex->width;
    *rows = ex->height;
    return;
  }
  *addr = host_side ? 0 : dev_addr;
  *pitch = pp->pitch ? pp->pitch : ex->width;
  *rows = pp->ysize ? pp->ysize : ex->height;
}

static void enc_node(node_enc *x, const node_params *p, uint64_t stage) {
  /* The node's fields as the server sees them (proto/rgpu_graph_nodes.def);
   * the generated codec turns them into the wire words. */
  rgpu_gnode n;
  memset(&n, 0, sizeof n);
  n.type = RGPU_GNODE_EMPTY;
  uint32_t plen = 0;
  switch (p->type) {
  case cudaGraphNodeTypeKernel: {
    const rgpu_rt_op *o = &p->op;
    n.type = RGPU_GNODE_KERNEL;
    n.kernel = (rgpu_gnode_kernel){RGPU_RT_LAUNCH_FIXED_FIELDS(o)};
    plen = (uint32_t)o->launch.plen;
    rgpu_buf_put(&x->params, o->launch.params, o->launch.plen);
    break;
  }
  case cudaGraphNodeTypeMemcpy: {
    const struct cudaMemcpy3DParms *cp = &p->op.copy.cp;
    if (cp->srcArray || cp->dstArray) {
      /* A copy with a CUDA array: the server runs the ARRAY_COPY request
       * it stands for as a library node (captured into the graph on a
       * GPU, run on the launch's stream otherwise). */
      size_t before = x->params.len;
      cudaError_t e = rgpu_rt_array_copy_node(cp, &x->params);
      if (e != cudaSuccess) {
        if (x->err == cudaSuccess) x->err = e;
        break;
      }
      n.type = RGPU_GNODE_LIB;
      n.lib = (rgpu_gnode_lib){.opcode = RGPU_OP_ARRAY_COPY, .stream_at = 0};
      plen = (uint32_t)(x->params.len - before);
      break;
    }
    n.type = RGPU_GNODE_MEMCPY;
    rgpu_gnode_copy *c = &n.copy;
    uint64_t sb = 0, ss = 0, db = 0, ds = 0;
    graph_copy_extent(&cp->srcPtr, &cp->srcPos, &cp->extent, &sb, &ss);
    graph_copy_extent(&cp->dstPtr, &cp->dstPos, &cp->extent, &db, &ds);
    c->dir = cp->kind == cudaMemcpyHostToDevice   ? RGPU_GCOPY_H2D
             : cp->kind == cudaMemcpyDeviceToHost ? RGPU_GCOPY_D2H
                                                  : RGPU_GCOPY_D2D;
    c->width = cp->extent.width, c->height = cp->extent.height, c->depth = cp->extent.depth;
    /* A staged host side is the device staging buffer instead (a large
     * host source goes ahead of the launch with an ordinary, chunked copy
     * into it), and the copy becomes device to device. */
    int host_dst = c->dir == RGPU_GCOPY_D2H, host_src = c->dir == RGPU_GCOPY_H2D;
    if (stage && (host_dst || host_src)) c->dir = RGPU_GCOPY_D2D;
    gcopy_side(&cp->dstPtr, &cp->extent, db, host_dst, stage, &c->dst, &c->dst_pitch, &c->dst_rows);
    gcopy_side(&cp->srcPtr, &cp->extent, sb, host_src, stage, &c->src, &c->src_pitch, &c->src_rows);
    break;
  }
  case cudaGraphNodeTypeMemset: {
    const struct cudaMemsetParams *ms = &p->op.fill;
    n.type = RGPU_GNODE_MEMSET;
    n.fill = (rgpu_gnode_fill){.dst = (uint64_t)(uintptr_t)ms->dst,
                               .pitch = ms->height > 1 ? ms->pitch : ms->width * ms->elementSize,
                               .value = ms->value,
                               .elem_size = ms->elementSize,
                               .width = ms->width,
                               .height = ms->height};
    break;
  }
  case cudaGraphNodeTypeEventRecord:
  case cudaGraphNodeTypeWaitEvent:
    n.type = p->type == cudaGraphNodeTypeEventRecord ? RGPU_GNODE_EVENT_RECORD : RGPU_GNODE_EVENT_WAIT;
    n.event.event = valid_event(p->op.event.event) ? p->op.event.event->id : 0;
    break;
  case cudaGraphNodeTypeHost: {
    /* Only library nodes reach the server (host nodes run here): the
     * whole request, which the server captures into a child graph of
     * this one, or runs as a plain call at each launch where it cannot. */
    if (!node_params_is_lib(p)) break;
    size_t before = x->params.len, at = 0;
    uint16_t opcode = 0;
    cudaError_t e = rgpu_rt_lib_node_request(&p->op, &x->params, &at, &opcode);
    if (e != cudaSuccess) {
      if (x->err == cudaSuccess) x->err = e;
      break;
    }
    n.type = RGPU_GNODE_LIB;
    n.lib = (rgpu_gnode_lib){.opcode = opcode, .stream_at = at};
    plen = (uint32_t)(x->params.len - before);
    break;
  }
  default: break; /* empty, child entry */
  }
  uint64_t w[RGPU_GNODE_WORDS];
  rgpu_gnode_encode(&n, w);
  rgpu_buf_put_u32(&x->types, n.type);
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
  free(x->escapes);
  rgpu_user_refs_release(&x->user_refs);
  free(x->launched);
  x->magic = 0;
  free(x);
}

/* The user-object references of g and of its child graphs, into r. */
static cudaError_t collect_user_refs(rgpu_user_refs *r, cudaGraph_t g) {
  cudaError_t e = rgpu_user_refs_copy(r, &g->user_refs);
  for (size_t i = 0; i < g->n && e == cudaSuccess; i++)
    if (g->nodes[i]->p.child) e = collect_user_refs(r, g->nodes[i]->p.child);
  return e;
}

/* An executable graph's user-object references, handed over at its
 * destruction, and how many of its launch streams have still to reach the
 * host function that counts down (the last one releases them). */
typedef struct {
  rgpu_user_refs refs;
  unsigned left;
} exec_refs_pending;

static void CUDART_CB exec_refs_countdown(void *arg) {
  exec_refs_pending *h = arg;
  if (__atomic_sub_fetch(&h->left, 1, __ATOMIC_ACQ_REL)) return;
  rgpu_user_refs_release(&h->refs);
  free(h);
}

/* Releases x's user-object references once the work of its launches is
 * done: a host function behind its last launch on every stream it used.
 * Where one cannot be queued (the stream is gone, this is a host
 * callback), that stream counts as done.  The program's last error is not
 * touched. */
static void exec_release_user_refs(cudaGraphExec_t x) {
  if (!x->user_refs.n) return;
  exec_refs_pending *h = x->nlaunched ? malloc(sizeof *h) : NULL;
  if (!h) {
    rgpu_user_refs_release(&x->user_refs);
    return;
  }
  h->refs = x->user_refs;
  x->user_refs = (rgpu_user_refs){0};
  h->left = (unsigned)x->nlaunched;
  size_t n = x->nlaunched;
  cudaError_t saved = rgpu_rt_last_error_get();
  for (size_t i = 0; i < n; i++) {
    cudaStream_t st = x->launched[i];
    /* A stream being captured would put the host function into the
     * program's graph instead of behind the launches: counted as done. */
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing(st, &cs);
    if (e == cudaSuccess && cs == cudaStreamCaptureStatusNone)
      e = cudaLaunchHostFunc(st, exec_refs_countdown, h);
    else
      e = cudaErrorStreamCaptureUnsupported;
    if (e != cudaSuccess) exec_refs_countdown(h);
  }
  rgpu_rt_last_error_set(saved);
}

/* x->escapes from the flat nodes (once, at instantiation: updates keep the
 * node kinds). */
static cudaError_t find_escapes(cudaGraphExec_t x) {
  size_t cap = 0;
  for (size_t i = 0; i < x->nf; i++) {
    if (x->f[i].p.type != cudaGraphNodeTypeMemAlloc) continue;
    int freed = 0;
    for (size_t j = 0; j < x->nf && !freed; j++)
      freed = x->f[j].p.type == cudaGraphNodeTypeMemFree && x->f[j].p.mem_ptr == x->f[i].p.mem_ptr;
    if (freed) continue;
    if (RGPU_ARRAY_RESERVE(x->escapes, cap, x->nescapes + 1, 4)) return cudaErrorMemoryAllocation;
    x->escapes[x->nescapes++] = x->f[i].p.mem_ptr;
  }
  return cudaSuccess;
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
    if (anc[j] || g->level != lvl || node_params_host_side(&g->p)) continue;
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
    int host = node_params_host_side(&f->p);
    int l = 0;
    for (size_t k = 0; k < f->ndeps; k++) {
      const flat_node *d = &x->f[f->deps[k]];
      int dl = d->level + (host && !node_params_host_side(&d->p) ? 1 : 0);
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
    int host = node_params_host_side(&f->p);
    uint32_t **list = host ? &L->host : &L->dev;
    size_t *cnt = host ? &L->nhost : &L->ndev;
    size_t *cap = host ? &L->cap_host : &L->cap_dev;
    if (rgpu_array_reserve(list, cap, *cnt + 1, sizeof **list, 8)) return cudaErrorMemoryAllocation;
    if (!host) f->sidx = (uint32_t)*cnt;
    (*list)[(*cnt)++] = (uint32_t)i;
    if (f->p.type == cudaGraphNodeTypeMemcpy && f->p.op.copy.cp.kind == cudaMemcpyHostToDevice) {
      size_t nb = copy_bytes(&f->p.op.copy.cp);
      if (nb <= H2D_INLINE_MAX && L->h2d_bytes + nb <= H2D_INLINE_MAX) {
        L->h2d_bytes += nb;
      } else {
        if (RGPU_ARRAY_RESERVE(L->h2d_big, L->cap_h2d_big, L->nh2d_big + 1, 8))
          return cudaErrorMemoryAllocation;
        L->h2d_big[L->nh2d_big++] = (uint32_t)i;
        void *stage = NULL;
        cudaError_t e = cudaMalloc(&stage, nb);
        if (e != cudaSuccess) return e;
        f->stage = (uint64_t)(uintptr_t)stage;
      }
    }
    if (f->p.type == cudaGraphNodeTypeMemcpy && f->p.op.copy.cp.kind == cudaMemcpyDeviceToHost) {
      if (RGPU_ARRAY_RESERVE(L->d2h, L->cap_d2h, L->nd2h + 1, 8)) return cudaErrorMemoryAllocation;
      L->d2h[L->nd2h++] = (uint32_t)i;
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

/* The result of a queued GRAPH_* request.  A request that cannot be encoded
 * (no memory for its buffer) is CUDA_ERROR_OUT_OF_MEMORY, not a failed
 * connection. */
static cudaError_t queued_ret(rgpu_client *c, rgpu_status rc) {
  if (rc == RGPU_PROTO_ENOMEM) rc = CUDA_ERROR_OUT_OF_MEMORY;
  return rc ? rgpu_rt_sync_ret(c, rc) : cudaSuccess;
}

static cudaError_t send_level(rgpu_client *c, cudaGraphExec_t x, level_t *L) {
  node_enc enc;
  enc_init(&enc);
  rgpu_buf edges;
  rgpu_buf_init(&edges);
  for (size_t k = 0; k < L->ndev; k++) {
    const flat_node *f = &x->f[L->dev[k]];
    enc_flat(&enc, f);
    for (size_t d = 0; d < f->ndeps; d++) {
      const flat_node *df = &x->f[f->deps[d]];
      /* A body's first node waits for its COND node only here (levels). */
      if (df->level != f->level || node_params_host_side(&df->p) || df->scope != f->scope) continue;
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
  else if (enc.err != cudaSuccess)
    e = enc.err;
  else if (enc.params.len > 16u << 20 || L->ndev > 65536 || edges.len / 4 > 1048576) {
    RGPU_WARN("graph too large to instantiate: %zu nodes, %zu edges, %zu bytes of kernel "
              "parameters (limits: 65536, 524288, 16 MiB)", L->ndev, edges.len / 8, enc.params.len);
    e = cudaErrorNotSupported;
  }
  if (e == cudaSuccess)
    e = queued_ret(c, rgpu_call_graph_exec_create(c, x->device, RGPU_CALL_ASYNC, &m, NULL, NULL));
  if (e != cudaSuccess) L->server_id = 0;
  rgpu_buf_free(&edges);
  enc_free(&enc);
  return e;
}

/* A kernel that sets a conditional node's handle must run in the same
 * server graph as the node: the server puts its own handle into the
 * kernel's parameters only there.  A host node between them (levels)
 * would part them, so that graph is refused, logged once. */
static cudaError_t check_cond_levels(cudaGraphExec_t x) {
  /* The conditional nodes first: most graphs have none, and then no
   * kernel's parameters need reading. */
  const flat_node **conds = NULL;
  size_t nconds = 0, cap = 0;
  for (size_t j = 0; j < x->nf; j++) {
    if (x->f[j].p.type != cudaGraphNodeTypeConditional) continue;
    if (RGPU_ARRAY_RESERVE(conds, cap, nconds + 1, 8)) {
      free(conds);
      return cudaErrorMemoryAllocation;
    }
    conds[nconds++] = &x->f[j];
  }
  cudaError_t e = cudaSuccess;
  for (size_t i = 0; nconds && e == cudaSuccess && i < x->nf; i++) {
    const flat_node *k = &x->f[i];
    if (k->p.type != cudaGraphNodeTypeKernel) continue;
    for (size_t off = 0; e == cudaSuccess && off + 8 <= k->p.op.launch.plen; off += 8) {
      uint64_t v;
      memcpy(&v, k->p.op.launch.params + off, 8);
      for (size_t j = 0; j < nconds; j++)
        if (conds[j]->level != k->level && v == conds[j]->p.cond_handle) e = cudaErrorNotSupported;
    }
  }
  free(conds);
  if (e == cudaErrorNotSupported) {
    static int logged;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      RGPU_WARN("cudaGraphInstantiate: a kernel sets a conditional node's handle across a host "
                "node; rgpu runs the two in separate server graphs, so this graph returns "
                "cudaErrorNotSupported");
  }
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
  e = flatten(graph, UINT32_MAX, &fl, 0, UINT32_MAX);
  x->f = fl.v;
  x->nf = fl.n;
  /* Several servers (issue 19): an executable graph lives on one server;
   * a node for a device of another cannot run there. */
  for (size_t i = 0; e == cudaSuccess && rgpu_rt_several_servers && i < x->nf; i++) {
    if (node_params_host_side(&x->f[i].p) || !rgpu_rt_devices_apart(x->f[i].p.op.device, x->device))
      continue;
    static int logged;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      RGPU_WARN("cudaGraphInstantiate: a graph with work for devices of two servers is not "
                "supported; it returns cudaErrorNotSupported");
    e = cudaErrorNotSupported;
  }
  if (e == cudaSuccess) e = find_escapes(x);
  if (e == cudaSuccess) e = collect_user_refs(&x->user_refs, graph);
  if (e == cudaSuccess) e = assign_levels(x);
  if (e == cudaSuccess && x->nlevels > 1) e = check_cond_levels(x);
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
RGPU_API_PTSZ(cudaError_t cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t *pGraphExec,
                                                              cudaGraph_t graph,
                                                              cudaGraphInstantiateParams *instantiateParams)) {
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
      rgpu_msg_graph_exec_destroy_req m = {.exec_id = graphExec->lv[i].server_id};
      cudaError_t e2 = queued_ret(
          c, rgpu_call_graph_exec_destroy(c, graphExec->device, RGPU_CALL_ASYNC, &m, NULL, NULL));
      if (e == cudaSuccess) e = e2;
    }
  }
  exec_release_user_refs(graphExec);
  exec_free(graphExec);
  rgpu_rt_graphmem_collect(); /* graph blocks whose last hold was this exec */
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
  rgpu_buf ind;
  rgpu_buf_init(&ind);
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
  else if (enc.err != cudaSuccess)
    e = enc.err;
  if (e == cudaSuccess)
    e = queued_ret(c, rgpu_call_graph_exec_update(c, x->device, RGPU_CALL_ASYNC, &m, NULL, NULL));
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
  if (node_params_host_side(a) != node_params_host_side(b)) return 0;
  /* The host side of a copy is planned at instantiation (bytes in the
   * launch, a staging buffer); a device copy may change its size, as in
   * CUDA. */
  if (a->type == cudaGraphNodeTypeMemcpy)
    return a->op.copy.cp.kind == b->op.copy.cp.kind &&
           (a->op.copy.cp.kind == cudaMemcpyDeviceToDevice ||
            copy_bytes(&a->op.copy.cp) == copy_bytes(&b->op.copy.cp));
  return 1;
}

/* Replaces flat node f's params by np (taken over) and updates the server. */
static cudaError_t exec_set_node(cudaGraphExec_t x, flat_node *f, node_params *np) {
  if (!same_shape(&f->p, np)) {
    node_params_free(np);
    return cudaErrorInvalidValue;
  }
  node_params_free(&f->p);
  f->p = *np;
  memset(np, 0, sizeof *np);
  if (node_params_host_side(&f->p)) return cudaSuccess;
  rgpu_client *c = rgpu_rt_client_peek();
  if (!c) return cudaErrorDevicesUnavailable;
  uint32_t idx = (uint32_t)(f - x->f);
  return send_update(c, x, &x->lv[f->level], &idx, 1);
}

/* Every cudaGraphExec*NodeSetParams shares one body: the node must be in
 * the executable graph with type T; FILL (an expression over np and the
 * caller's parameters, yielding a cudaError_t) fills a zeroed node_params
 * that then replaces the node's, or is freed when FILL fails. */
#define EXEC_SET_ARGS cudaGraphExec_t hGraphExec, cudaGraphNode_t node
#define EXEC_SET(T, FILL)                                                  \
  rgpu_rt_count_call();                                                    \
  if (!valid_exec(hGraphExec) || !valid_node(node)) return rgpu_rt_ret(cudaErrorInvalidValue); \
  flat_node *f = exec_find(hGraphExec, node);                              \
  if (!f || f->p.type != (T)) return rgpu_rt_ret(cudaErrorInvalidValue);   \
  node_params np;                                                          \
  memset(&np, 0, sizeof np);                                               \
  cudaError_t e = (FILL);                                                  \
  if (e != cudaSuccess) {                                                  \
    node_params_free(&np);                                                 \
    return rgpu_rt_ret(e);                                                 \
  }                                                                        \
  return rgpu_rt_ret(exec_set_node(hGraphExec, f, &np))

RGPU_API cudaError_t cudaGraphExecKernelNodeSetParams(EXEC_SET_ARGS, const struct cudaKernelNodeParams *pNodeParams) {
  EXEC_SET(cudaGraphNodeTypeKernel, node_params_kernel(&np, pNodeParams));
}

RGPU_API cudaError_t cudaGraphExecMemcpyNodeSetParams(EXEC_SET_ARGS, const struct cudaMemcpy3DParms *pNodeParams) {
  EXEC_SET(cudaGraphNodeTypeMemcpy, node_params_memcpy(&np, pNodeParams));
}

RGPU_API cudaError_t cudaGraphExecMemcpyNodeSetParams1D(EXEC_SET_ARGS, void *dst, const void *src,
                                                        size_t count, enum cudaMemcpyKind kind) {
  EXEC_SET(cudaGraphNodeTypeMemcpy, node_params_memcpy_1d(&np, dst, src, count, kind));
}

RGPU_API cudaError_t cudaGraphExecMemcpyNodeSetParamsToSymbol(EXEC_SET_ARGS, const void *symbol,
                                                              const void *src, size_t count,
                                                              size_t offset,
                                                              enum cudaMemcpyKind kind) {
  EXEC_SET(cudaGraphNodeTypeMemcpy,
           node_params_symbol(&np, 1, symbol, (void *)src, count, offset, kind));
}

RGPU_API cudaError_t cudaGraphExecMemcpyNodeSetParamsFromSymbol(EXEC_SET_ARGS, void *dst,
                                                                const void *symbol, size_t count,
                                                                size_t offset,
                                                                enum cudaMemcpyKind kind) {
  EXEC_SET(cudaGraphNodeTypeMemcpy, node_params_symbol(&np, 0, symbol, dst, count, offset, kind));
}

RGPU_API cudaError_t cudaGraphExecMemsetNodeSetParams(EXEC_SET_ARGS, const struct cudaMemsetParams *pNodeParams) {
  EXEC_SET(cudaGraphNodeTypeMemset, node_params_memset(&np, pNodeParams));
}

RGPU_API cudaError_t cudaGraphExecHostNodeSetParams(EXEC_SET_ARGS, const struct cudaHostNodeParams *pNodeParams) {
  EXEC_SET(cudaGraphNodeTypeHost, node_params_host(&np, pNodeParams));
}

static cudaError_t exec_event_set(EXEC_SET_ARGS, enum cudaGraphNodeType t,
                                  cudaEvent_t event) {
  EXEC_SET(t, node_params_event(&np, t, event));
}

/* For the driver API's cuGraphExecKernelNodeSetParams (driver/
 * rgpu_drv_graph_kernel.c), whose parameters are built from a CUfunction:
 * the same rule with the node's new parameters already made (np is taken
 * over, whatever the result, as exec_set_node does). */
cudaError_t rgpu_rt_graph_exec_set_node(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                        node_params *np) {
  flat_node *f = valid_exec(hGraphExec) && valid_node(node) ? exec_find(hGraphExec, node) : NULL;
  if (!f || f->p.type != np->type) {
    node_params_free(np);
    memset(np, 0, sizeof *np);
    return cudaErrorInvalidValue;
  }
  return exec_set_node(hGraphExec, f, np);
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
    if (a->p.type == cudaGraphNodeTypeConditional || a->body) {
      /* The server builds a conditional node's handles and bodies with the
       * graph: not updated in place. */
      *why = cudaGraphExecUpdateErrorNotSupported;
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
      node_params_free(&a->p);
      a->p = nf[i].p;
      memset(&nf[i].p, 0, sizeof nf[i].p);
      /* The exec keeps answering to the nodes it was instantiated from. */
      a->orig_id = keep;
      a->child_end = child_end;
      if (!node_params_host_side(&a->p)) idx[k++] = (uint32_t)(first + i);
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
  if (RGPU_ARRAY_RESERVE(fl.v, fl.cap, first + 1, 8)) e = cudaErrorMemoryAllocation;
  if (e == cudaSuccess) {
    memset(fl.v, 0, first * sizeof *fl.v);
    fl.n = first;
    e = flatten(childGraph, (uint32_t)(first - 1), &fl, 1, f->scope);
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
  cudaError_t e = flatten(hGraph, UINT32_MAX, &fl, 0, UINT32_MAX);
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
  cudaError_t e = node_params_generic(&np, nodeParams);
  if (e != cudaSuccess) {
    node_params_free(&np);
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
  if (node_params_host_side(&f->p)) return cudaSuccess;
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
    graph_copy_extent(&cp->srcPtr, &cp->srcPos, &cp->extent, &base, &span);
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
  graph_copy_extent(&cp->dstPtr, &cp->dstPos, &cp->extent, &base, &span);
  size_t w = cp->extent.width;
  size_t pitch = cp->dstPtr.pitch ? cp->dstPtr.pitch : w;
  size_t ysize = cp->dstPtr.ysize ? cp->dstPtr.ysize : cp->extent.height;
  /* The device side: the staging buffer (contiguous) or the source itself. */
  uint64_t src = f->stage, sspan;
  size_t sp = w, sy = cp->extent.height;
  if (f->direct) {
    graph_copy_extent(&cp->srcPtr, &cp->srcPos, &cp->extent, &src, &sspan);
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
  graph_copy_extent(&cp->srcPtr, &cp->srcPos, &cp->extent, &base, &span);
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
  graph_copy_extent(&cp->srcPtr, &cp->srcPos, &cp->extent, &sb, &ss);
  graph_copy_extent(&cp->dstPtr, &cp->dstPos, &cp->extent, &db, &ds);
  size_t sp = cp->srcPtr.pitch ? cp->srcPtr.pitch : cp->extent.width;
  size_t sy = cp->srcPtr.ysize ? cp->srcPtr.ysize : cp->extent.height;
  size_t dp = cp->dstPtr.pitch ? cp->dstPtr.pitch : cp->extent.width;
  size_t dy = cp->dstPtr.ysize ? cp->dstPtr.ysize : cp->extent.height;
  for (size_t z = 0; z < cp->extent.depth; z++)
    for (size_t y = 0; y < cp->extent.height; y++)
      memmove((uint8_t *)(uintptr_t)db + (z * dy + y) * dp,
              (const uint8_t *)(uintptr_t)sb + (z * sy + y) * sp, cp->extent.width);
}

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

/* What launch and upload do first: connect, check the executable graph,
 * resolve the stream.  The error returned is already final. */
static cudaError_t exec_on_stream(cudaGraphExec_t x, cudaStream_t stream, int per_thread,
                                  rgpu_client **c, uint64_t *wire, int *sdev) {
  cudaError_t e = rgpu_rt_enter(c);
  if (e != cudaSuccess) return e;
  if (!valid_exec(x)) return rgpu_rt_ret(cudaErrorInvalidValue);
  return rgpu_rt_ret(rgpu_rt_stream_resolve(*c, stream, per_thread, wire, sdev));
}

static cudaError_t launch(cudaGraphExec_t x, cudaStream_t stream, int per_thread) {
  rgpu_client *c;
  uint64_t wire;
  int sdev;
  cudaError_t e = exec_on_stream(x, stream, per_thread, &c, &wire, &sdev);
  if (e != cudaSuccess) return e;
  if (sdev != x->device) return rgpu_rt_ret(cudaErrorInvalidValue);
  if (rgpu_rt_graph_is_capturing(wire)) {
    static int logged;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      RGPU_WARN("cudaGraphLaunch into a capturing stream is not supported");
    return rgpu_rt_ret(cudaErrorStreamCaptureUnsupported);
  }
  /* Managed memory the host owns goes to the device first. */
  if ((e = rgpu_rt_managed_to_device(c, wire)) != cudaSuccess) return rgpu_rt_ret(e);
  /* The streams whose work must be done before the user objects go. */
  if (x->user_refs.n) {
    cudaStream_t st = !stream && per_thread ? cudaStreamPerThread : stream;
    size_t k = 0;
    while (k < x->nlaunched && x->launched[k] != st) k++;
    if (k == x->nlaunched) {
      if (RGPU_ARRAY_RESERVE(x->launched, x->caplaunched, x->nlaunched + 1, 4))
        return rgpu_rt_ret(cudaErrorMemoryAllocation);
      x->launched[x->nlaunched++] = st;
    }
  }
  /* Blocks the graph allocates and does not free stay the program's after
   * this launch (rgpu_cudart_graph_mem.c). */
  for (size_t i = 0; i < x->nescapes; i++) rgpu_rt_graphmem_launched(x->escapes[i]);
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
    rgpu_msg_graph_launch_req m = {.exec_id = lv->server_id, .stream = wire,
                                   .h2d = {h2d, lv->h2d_bytes}};
    rgpu_status rc = rgpu_call_graph_launch(c, sdev, RGPU_CALL_ASYNC, &m, NULL, NULL);
    free(h2d);
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
RGPU_API_PTSZ(cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream)) {
  return launch(graphExec, stream, 1);
}

/* The graph is on the server since instantiation: nothing to upload. */
static cudaError_t upload(cudaGraphExec_t x, cudaStream_t stream, int per_thread) {
  rgpu_client *c;
  uint64_t wire;
  int sdev;
  return exec_on_stream(x, stream, per_thread, &c, &wire, &sdev);
}
RGPU_API cudaError_t cudaGraphUpload(cudaGraphExec_t graphExec, cudaStream_t stream) {
  return upload(graphExec, stream, 0);
}
RGPU_API_PTSZ(cudaError_t cudaGraphUpload_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream)) {
  return upload(graphExec, stream, 1);
}


cudaError_t rgpu_rt_graph_exec_set_request_node(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                uint16_t opcode, const void *req, size_t len) {
  flat_node *f = valid_exec(hGraphExec) && valid_node(node) ? exec_find(hGraphExec, node) : NULL;
  if (!f) return cudaErrorInvalidValue;
  node_params np;
  cudaError_t e = node_params_request_like(&np, &f->p, opcode, req, len);
  if (e != cudaSuccess) return e;
  return exec_set_node(hGraphExec, f, &np);
}
