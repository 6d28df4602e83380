/* softgpu stream capture: work issued to a capturing stream becomes graph
 * nodes instead of running.
 *
 * A capture has an origin stream and a graph.  Each stream taking part
 * keeps the set of nodes its next captured node depends on (its "capture
 * dependencies").  An event recorded in a capturing stream remembers that
 * set; a stream waiting on such an event joins the capture (fork) or merges
 * the set into its own (join).  cuStreamEndCapture on the origin requires
 * every other stream's last work to be an ancestor of the origin's
 * (CUDA_ERROR_STREAM_CAPTURE_UNJOINED otherwise).
 *
 * The hooks are called from sg_stream.c (every queued op passes through
 * sg_submit) only while some capture is active, so streams that are not
 * capturing pay one atomic load. */
#include <stdlib.h>
#include <string.h>

#include "sg_graph.h"
#include "rgpu_array.h"

atomic_int sg_captures_active;

typedef struct sg_capture {
  uint64_t id;
  sg_graph *g;
  int own_graph;             /* 0 for cuStreamBeginCaptureToGraph */
  CUstreamCaptureMode mode;
  int invalidated;
  sg_stream *origin;
  pthread_t thread;
  sg_ctx *ctx;
  sg_stream **streams;       /* every stream taking part, origin first */
  int nstreams;
  size_t capstreams;
  CUgraphEdgeData *edge_zero; /* what GetCaptureInfo hands out as edge data */
  int nedge_zero;
  struct sg_capture *next;
} sg_capture;

static sg_capture *captures; /* active ones, sg_graph_lock */
static uint64_t next_capture_id = 1;
static __thread CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

static sg_capture *capture_by_id(uint64_t id) {
  for (sg_capture *c = captures; c; c = c->next)
    if (c->id == id) return c;
  return NULL;
}

static CUresult deps_set(sg_stream *s, sg_gnode *const *nodes, int n) {
  if (RGPU_ARRAY_RESERVE(s->cap_deps, s->cap_deps_cap, (size_t)n, 4)) return CUDA_ERROR_OUT_OF_MEMORY;
  if (n) memmove(s->cap_deps, nodes, (size_t)n * sizeof *nodes);
  s->ncap_deps = n;
  return CUDA_SUCCESS;
}

static CUresult deps_merge(sg_stream *s, sg_gnode *const *nodes, int n) {
  for (int i = 0; i < n; i++) {
    int have = 0;
    for (int j = 0; j < s->ncap_deps && !have; j++) have = s->cap_deps[j] == nodes[i];
    if (have) continue;
    if (RGPU_ARRAY_RESERVE(s->cap_deps, s->cap_deps_cap, (size_t)s->ncap_deps + 1, 4))
      return CUDA_ERROR_OUT_OF_MEMORY;
    s->cap_deps[s->ncap_deps++] = nodes[i];
  }
  return CUDA_SUCCESS;
}

static CUresult join(sg_capture *c, sg_stream *s) {
  if (RGPU_ARRAY_RESERVE(c->streams, c->capstreams, (size_t)c->nstreams + 1, 4)) return CUDA_ERROR_OUT_OF_MEMORY;
  c->streams[c->nstreams++] = s;
  sg_stream_ref(s); /* a stream destroyed mid-capture stays readable */
  s->capture = c;
  s->ncap_deps = 0;
  return CUDA_SUCCESS;
}

/* Ends capture c (sg_graph_lock held): every stream leaves it. */
static void capture_end(sg_capture *c, int free_graph) {
  for (int i = 0; i < c->nstreams; i++) {
    c->streams[i]->capture = NULL;
    c->streams[i]->ncap_deps = 0;
    sg_stream_unref(c->streams[i]);
  }
  sg_capture **pp = &captures;
  while (*pp && *pp != c) pp = &(*pp)->next;
  if (*pp) *pp = c->next;
  if (free_graph && c->own_graph) sg_graph_free(c->g);
  free(c->streams);
  free(c->edge_zero);
  free(c);
  atomic_fetch_sub(&sg_captures_active, 1);
}

/* An illegal call during capture: the whole capture is now unusable. */
static CUresult invalidate(sg_capture *c, CUresult err) {
  c->invalidated = 1;
  return err;
}

/* A capture (active in the legacy stream's context) that contains a
 * blocking stream, which the legacy stream would synchronise with. */
static sg_capture *implicit_conflict(sg_stream *legacy) {
  for (sg_capture *c = captures; c; c = c->next) {
    if (c->ctx != legacy->ctx) continue;
    for (int i = 0; i < c->nstreams; i++)
      if (!(c->streams[i]->flags & CU_STREAM_NON_BLOCKING)) return c;
  }
  return NULL;
}

/* Adds a node of type t at the end of s's capture; the caller fills u. */
static CUresult capture_add(sg_stream *s, CUgraphNodeType t, sg_gnode **out) {
  sg_capture *c = s->capture;
  sg_gnode *n;
  CUresult r = sg_graph_add(c->g, t, s->cap_deps, (size_t)s->ncap_deps, &n);
  if (r) return invalidate(c, r);
  r = deps_set(s, &n, 1);
  if (r) {
    sg_gnode_free(n);
    return invalidate(c, r);
  }
  *out = n;
  return CUDA_SUCCESS;
}

int sg_capture_submit(sg_stream *s, sg_op *op, int wait, CUresult *res) {
  pthread_mutex_lock(&sg_graph_lock);
  sg_capture *c = s->capture;
  if (!c) {
    sg_capture *k = s->is_legacy ? implicit_conflict(s) : NULL;
    /* The legacy stream would wait for (or be waited on by) a capturing
     * stream: CUDA refuses this and invalidates the capture. */
    if (k) invalidate(k, 0);
    pthread_mutex_unlock(&sg_graph_lock);
    if (!k) return 0;
    sg_op_free_chain(op);
    *res = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    return 1;
  }
  CUresult r = CUDA_SUCCESS;
  sg_gnode *n = NULL;
  if (c->invalidated) {
    r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  } else {
    switch (op->type) {
    case SG_OP_LAUNCH: {
      sg_kern k;
      r = sg_kern_from_launch(&k, op->u.launch.fn, op->u.launch.grid, op->u.launch.block,
                              (unsigned)op->u.launch.shared, op->u.launch.params, op->u.launch.params_size);
      if (!r) r = capture_add(s, CU_GRAPH_NODE_TYPE_KERNEL, &n);
      if (!r) n->u.k = k;
      else if (k.fn) sg_module_unref(k.fn->mod), free(k.buf), free(k.kparams);
      break;
    }
    case SG_OP_COPY: {
      /* An async copy (pageable host memory too: a graph reads it when the
       * node runs). */
      CUDA_MEMCPY3D p;
      memset(&p, 0, sizeof p);
      p.srcMemoryType = op->u.copy.src_dev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
      p.srcDevice = op->u.copy.src;
      p.srcHost = (const void *)(uintptr_t)op->u.copy.src;
      p.dstMemoryType = op->u.copy.dst_dev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
      p.dstDevice = op->u.copy.dst;
      p.dstHost = (void *)(uintptr_t)op->u.copy.dst;
      p.WidthInBytes = op->u.copy.len;
      p.Height = p.Depth = 1;
      /* Pinned host memory is in the table too: describe it as host. */
      sg_alloc a;
      if (op->u.copy.src_dev && sg_mem_find(op->u.copy.src, &a) == 0 &&
          (a.kind == SG_MEM_HOST || a.kind == SG_MEM_REGISTERED))
        p.srcMemoryType = CU_MEMORYTYPE_HOST;
      if (op->u.copy.dst_dev && sg_mem_find(op->u.copy.dst, &a) == 0 &&
          (a.kind == SG_MEM_HOST || a.kind == SG_MEM_REGISTERED))
        p.dstMemoryType = CU_MEMORYTYPE_HOST;
      r = capture_add(s, CU_GRAPH_NODE_TYPE_MEMCPY, &n);
      if (!r) {
        n->u.cp.p = p;
        n->u.cp.ctx = s->ctx;
      }
      break;
    }
    case SG_OP_FUNC:
      /* cuMemcpy2D/3D(Async): a memcpy node with the caller's parameters */
      if (op->u.func.run == sg_copy3d_run) {
        r = capture_add(s, CU_GRAPH_NODE_TYPE_MEMCPY, &n);
        if (!r) {
          n->u.cp.p = ((const sg_copy3d *)op->u.func.arg)->p;
          n->u.cp.ctx = s->ctx;
        }
      } else {
        r = invalidate(c, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
      }
      break;
    case SG_OP_MEMSET:
      r = capture_add(s, CU_GRAPH_NODE_TYPE_MEMSET, &n);
      if (!r) {
        memset(&n->u.ms.p, 0, sizeof n->u.ms.p);
        n->u.ms.p.dst = op->u.memset.dst;
        n->u.ms.p.value = op->u.memset.value;
        n->u.ms.p.elementSize = op->u.memset.elsize;
        n->u.ms.p.width = op->u.memset.count;
        n->u.ms.p.height = 1;
        n->u.ms.p.pitch = op->u.memset.count * op->u.memset.elsize;
        n->u.ms.ctx = s->ctx;
      }
      break;
    case SG_OP_HOSTFN:
      r = capture_add(s, CU_GRAPH_NODE_TYPE_HOST, &n);
      if (!r) {
        n->u.host.fn = op->u.hostfn.fn;
        n->u.host.userData = op->u.hostfn.user;
      }
      break;
    default:
      /* Stream callbacks, synchronous waits: not capturable. */
      r = invalidate(c, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
      break;
    }
    (void)wait;
  }
  pthread_mutex_unlock(&sg_graph_lock);
  sg_op_free_chain(op);
  *res = r;
  return 1;
}

int sg_capture_graph_launch(sg_stream *s, const sg_graph *g, CUresult *res) {
  /* sg_graph_lock held by cuGraphLaunch. */
  sg_capture *c = s->capture;
  if (!c) {
    if (s->is_legacy && (c = implicit_conflict(s)) != NULL) {
      *res = invalidate(c, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
      return 1;
    }
    return 0;
  }
  if (c->invalidated) {
    *res = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    return 1;
  }
  /* Launching an exec inside a capture records it as a child graph. */
  sg_graph *copy;
  CUresult r = sg_graph_clone(g, &copy);
  sg_gnode *n = NULL;
  if (!r) {
    r = capture_add(s, CU_GRAPH_NODE_TYPE_GRAPH, &n);
    if (r) sg_graph_free(copy);
  }
  if (!r) {
    n->u.child = copy;
    copy->owner = n;
  }
  *res = r;
  return 1;
}

int sg_capture_wait_event(sg_stream *s, sg_event *e, unsigned flags, CUresult *res) {
  pthread_mutex_lock(&sg_graph_lock);
  sg_capture *ec = e->cap_id ? capture_by_id(e->cap_id) : NULL;
  sg_capture *c = s->capture;
  CUresult r = CUDA_SUCCESS;
  if (ec) {
    if (ec->invalidated) {
      r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    } else if (!c) {
      if (s->is_legacy) r = invalidate(ec, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
      else if ((r = join(ec, s)) == CUDA_SUCCESS) r = deps_set(s, e->cap_nodes, e->ncap_nodes); /* fork */
    } else if (c == ec) {
      r = deps_merge(s, e->cap_nodes, e->ncap_nodes); /* join */
    } else {
      r = invalidate(c, CUDA_ERROR_STREAM_CAPTURE_MERGE);
    }
  } else if (!c) {
    pthread_mutex_unlock(&sg_graph_lock);
    return 0; /* an ordinary wait */
  } else if (c->invalidated) {
    r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  } else if (flags & CU_EVENT_WAIT_EXTERNAL) {
    sg_gnode *n;
    r = capture_add(s, CU_GRAPH_NODE_TYPE_WAIT_EVENT, &n);
    if (!r) n->u.ev = e;
  } else {
    /* Depending on work outside the capture. */
    r = invalidate(c, CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
  }
  pthread_mutex_unlock(&sg_graph_lock);
  *res = r;
  return 1;
}

int sg_capture_record_event(sg_stream *s, sg_event *e, unsigned flags, CUresult *res) {
  pthread_mutex_lock(&sg_graph_lock);
  sg_capture *c = s->capture;
  if (!c) {
    /* An ordinary record replaces any captured one. */
    e->cap_id = 0;
    e->ncap_nodes = 0;
    pthread_mutex_unlock(&sg_graph_lock);
    return 0;
  }
  CUresult r = CUDA_SUCCESS;
  if (c->invalidated) {
    r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  } else {
    if (flags & CU_EVENT_RECORD_EXTERNAL) {
      sg_gnode *n;
      r = capture_add(s, CU_GRAPH_NODE_TYPE_EVENT_RECORD, &n);
      if (!r) n->u.ev = e;
    }
    if (!r) {
      sg_gnode **nn = realloc(e->cap_nodes, (size_t)(s->ncap_deps ? s->ncap_deps : 1) * sizeof *nn);
      if (!nn) {
        r = invalidate(c, CUDA_ERROR_OUT_OF_MEMORY);
      } else {
        e->cap_nodes = nn;
        if (s->ncap_deps) memcpy(nn, s->cap_deps, (size_t)s->ncap_deps * sizeof *nn);
        e->ncap_nodes = s->ncap_deps;
        e->cap_id = c->id;
      }
    }
  }
  pthread_mutex_unlock(&sg_graph_lock);
  *res = r;
  return 1;
}

CUresult sg_capture_check_sync(sg_stream *s) {
  pthread_mutex_lock(&sg_graph_lock);
  CUresult r = CUDA_SUCCESS;
  sg_capture *c = s->capture;
  if (c) r = invalidate(c, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  else if (s->is_legacy && (c = implicit_conflict(s)) != NULL) r = invalidate(c, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

CUresult sg_capture_event_check(sg_event *e) {
  pthread_mutex_lock(&sg_graph_lock);
  CUresult r = e->cap_id && capture_by_id(e->cap_id) ? CUDA_ERROR_CAPTURED_EVENT : CUDA_SUCCESS;
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

/* ---- API ---------------------------------------------------------------- */

static CUresult begin(CUstream hStream, sg_graph *g, sg_gnode *const *deps, size_t ndeps, CUstreamCaptureMode mode) {
  sg_stream *s;
  CUresult r = sg_stream_resolve(hStream, &s);
  if (r) return r;
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  /* The legacy stream cannot capture (it synchronises with everything). */
  if (s->is_legacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  pthread_mutex_lock(&sg_graph_lock);
  if (s->capture) {
    pthread_mutex_unlock(&sg_graph_lock);
    return CUDA_ERROR_ILLEGAL_STATE;
  }
  sg_capture *c = calloc(1, sizeof *c);
  if (!c) {
    pthread_mutex_unlock(&sg_graph_lock);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (g) {
    c->g = g;
  } else {
    r = sg_graph_new(&c->g);
    c->own_graph = 1;
  }
  if (!r) r = join(c, s);
  if (!r && ndeps) r = deps_set(s, deps, (int)ndeps);
  if (r) {
    if (c->own_graph && c->g) sg_graph_free(c->g);
    if (c->nstreams) {
      s->capture = NULL;
      sg_stream_unref(s);
    }
    free(c->streams);
    free(c);
    pthread_mutex_unlock(&sg_graph_lock);
    return r;
  }
  c->id = next_capture_id++;
  c->mode = mode;
  c->origin = s;
  c->thread = pthread_self();
  c->ctx = s->ctx;
  c->next = captures;
  captures = c;
  atomic_fetch_add(&sg_captures_active, 1);
  pthread_mutex_unlock(&sg_graph_lock);
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
  return begin(hStream, NULL, NULL, 0, mode);
}

SG_EXPORT CUresult CUDAAPI cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
                                                       const CUgraphNode *dependencies,
                                                       const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                                       CUstreamCaptureMode mode) {
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  pthread_mutex_lock(&sg_graph_lock);
  CUresult r = sg_handle_ok(hGraph, SG_H_GRAPH) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  if (numDependencies && !dependencies) r = CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; !r && i < numDependencies; i++) {
    if (!sg_handle_ok(dependencies[i], SG_H_GRAPH_NODE) || dependencies[i]->g != hGraph) r = CUDA_ERROR_INVALID_VALUE;
    if (dependencyData) {
      static const CUgraphEdgeData zero;
      if (memcmp(&dependencyData[i], &zero, sizeof zero) != 0) r = CUDA_ERROR_INVALID_VALUE;
    }
  }
  pthread_mutex_unlock(&sg_graph_lock);
  if (r) return r;
  return begin(hStream, hGraph, dependencies, numDependencies, mode);
}

/* Marks every node that `n` depends on, itself included. */
static void mark_ancestors(const sg_gnode *n, unsigned char *seen) {
  if (seen[n->idx]) return;
  seen[n->idx] = 1;
  for (int i = 0; i < n->ndeps; i++) mark_ancestors(n->deps[i], seen);
}

SG_EXPORT CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
  if (!phGraph) return CUDA_ERROR_INVALID_VALUE;
  sg_stream *s;
  CUresult r = sg_stream_resolve(hStream, &s);
  if (r) return r;
  pthread_mutex_lock(&sg_graph_lock);
  sg_capture *c = s->capture;
  if (!c) {
    r = CUDA_ERROR_ILLEGAL_STATE;
  } else if (c->origin != s) {
    r = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  } else if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && !pthread_equal(c->thread, pthread_self())) {
    r = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  } else if (c->invalidated) {
    *phGraph = NULL;
    capture_end(c, 1);
    r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  } else {
    /* Every forked stream must have been joined back into the origin. */
    unsigned char *seen = calloc((size_t)c->g->n + 1, 1);
    if (!seen) {
      r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
      for (int i = 0; i < s->ncap_deps; i++) mark_ancestors(s->cap_deps[i], seen);
      for (int i = 1; i < c->nstreams && !r; i++) {
        sg_stream *t = c->streams[i];
        for (int j = 0; j < t->ncap_deps && !r; j++)
          if (!seen[t->cap_deps[j]->idx]) r = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
      }
      free(seen);
      if (r) {
        *phGraph = NULL;
        capture_end(c, 1);
      } else {
        *phGraph = c->g;
        capture_end(c, 0);
      }
    }
  }
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

SG_EXPORT CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus) {
  if (!captureStatus) return CUDA_ERROR_INVALID_VALUE;
  sg_stream *s;
  CUresult r = sg_stream_resolve(hStream, &s);
  if (r) return r;
  pthread_mutex_lock(&sg_graph_lock);
  sg_capture *c = s->capture;
  if (c) {
    *captureStatus = c->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  } else if (s->is_legacy && implicit_conflict(s)) {
    r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  } else {
    *captureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
  }
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

SG_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                                     cuuint64_t *id_out, CUgraph *graph_out,
                                                     const CUgraphNode **dependencies_out,
                                                     const CUgraphEdgeData **edgeData_out,
                                                     size_t *numDependencies_out) {
  if (!captureStatus_out) return CUDA_ERROR_INVALID_VALUE;
  sg_stream *s;
  CUresult r = sg_stream_resolve(hStream, &s);
  if (r) return r;
  pthread_mutex_lock(&sg_graph_lock);
  sg_capture *c = s->capture;
  if (!c) {
    if (s->is_legacy && implicit_conflict(s)) {
      r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    } else {
      *captureStatus_out = CU_STREAM_CAPTURE_STATUS_NONE;
    }
  } else {
    *captureStatus_out = c->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (id_out) *id_out = c->id;
    if (graph_out) *graph_out = c->g;
    /* Valid until the next call on the stream, as CUDA documents. */
    if (dependencies_out) *dependencies_out = (const CUgraphNode *)s->cap_deps;
    if (numDependencies_out) *numDependencies_out = (size_t)s->ncap_deps;
    if (edgeData_out) {
      if (c->nedge_zero < s->ncap_deps) {
        CUgraphEdgeData *z = realloc(c->edge_zero, (size_t)s->ncap_deps * sizeof *z);
        if (z) {
          c->edge_zero = z;
          c->nedge_zero = s->ncap_deps;
        }
      }
      if (c->edge_zero) memset(c->edge_zero, 0, (size_t)c->nedge_zero * sizeof *c->edge_zero);
      *edgeData_out = c->nedge_zero >= s->ncap_deps ? c->edge_zero : NULL;
    }
  }
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

SG_EXPORT CUresult CUDAAPI cuStreamUpdateCaptureDependencies_v2(CUstream hStream, CUgraphNode *dependencies,
                                                                const CUgraphEdgeData *dependencyData,
                                                                size_t numDependencies, unsigned int flags) {
  sg_stream *s;
  CUresult r = sg_stream_resolve(hStream, &s);
  if (r) return r;
  if (flags != CU_STREAM_ADD_CAPTURE_DEPENDENCIES && flags != CU_STREAM_SET_CAPTURE_DEPENDENCIES)
    return CUDA_ERROR_INVALID_VALUE;
  if (numDependencies && !dependencies) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&sg_graph_lock);
  sg_capture *c = s->capture;
  if (!c) r = CUDA_ERROR_ILLEGAL_STATE;
  else if (c->invalidated) r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  for (size_t i = 0; !r && i < numDependencies; i++) {
    if (!sg_handle_ok(dependencies[i], SG_H_GRAPH_NODE) || dependencies[i]->g != c->g) r = CUDA_ERROR_INVALID_VALUE;
    if (dependencyData) {
      static const CUgraphEdgeData zero;
      if (memcmp(&dependencyData[i], &zero, sizeof zero) != 0) r = CUDA_ERROR_INVALID_VALUE;
    }
  }
  if (!r) {
    if (flags == CU_STREAM_SET_CAPTURE_DEPENDENCIES) r = deps_set(s, dependencies, (int)numDependencies);
    else r = deps_merge(s, dependencies, (int)numDependencies);
  }
  pthread_mutex_unlock(&sg_graph_lock);
  return r;
}

SG_EXPORT CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
  if (!mode) return CUDA_ERROR_INVALID_VALUE;
  CUstreamCaptureMode m = *mode;
  if (m != CU_STREAM_CAPTURE_MODE_GLOBAL && m != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      m != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  *mode = thread_mode;
  thread_mode = m;
  return CUDA_SUCCESS;
}
