/* CUDA graphs, stream capture (rgpu_cudart_graph_internal.h lists the
 * three graph files).
 *
 * Every operation goes through rgpu_rt_submit, which asks
 * rgpu_rt_capture_take first: on a capturing stream the operation becomes
 * a node of the capture's graph instead of a request.  Capture sequences,
 * fork and join through events, the three capture modes and CUDA's errors
 * for calls that a capture forbids are kept here. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_cudart.h"
#include "rgpu_cudart_graph.h"
#include "rgpu_cudart_graph_internal.h"
#include "rgpu_cudart_op.h"

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

/* Guards the capture state below (g_capturing is read without it as the
 * fast path).  A leaf in cudart's lock order (rgpu_cudart_locks.h): only
 * the graph model's own memory work happens under it, never a round trip
 * or another lock. */
static rgpu_mutex g_cap_lock = RGPU_MUTEX_INITIALIZER;
static atomic_int g_capturing; /* streams capturing: the fast path of every check here */
static cap_seq *g_seqs;
static cap_stream *g_cs;
static size_t g_ncs, g_capcs;
static cap_event *g_ce;
static size_t g_nce, g_capce;
static unsigned long long g_next_seq = 1;
static __thread enum cudaStreamCaptureMode tl_mode = cudaStreamCaptureModeGlobal;

static cap_stream *cs_find(uint64_t wire) {
  assert(rgpu_mutex_held(&g_cap_lock));
  for (size_t i = 0; i < g_ncs; i++)
    if (g_cs[i].wire == wire) return &g_cs[i];
  return NULL;
}

static cap_seq *seq_by_id(unsigned long long id) {
  assert(rgpu_mutex_held(&g_cap_lock));
  for (cap_seq *s = g_seqs; s; s = s->next)
    if (s->id == id) return s;
  return NULL;
}

static cap_event *ce_find(uint64_t ev) {
  assert(rgpu_mutex_held(&g_cap_lock));
  for (size_t i = 0; i < g_nce; i++)
    if (g_ce[i].event == ev) return &g_ce[i];
  return NULL;
}

static void ce_remove(uint64_t ev) {
  assert(rgpu_mutex_held(&g_cap_lock));
  cap_event *e = ce_find(ev);
  if (!e) return;
  free(e->deps);
  *e = g_ce[--g_nce];
}

static int set_deps(cudaGraphNode_t **v, size_t *n, size_t *cap, cudaGraphNode_t *src, size_t ns) {
  if (rgpu_array_reserve(v, cap, ns ? ns : 1, sizeof **v, 8)) return -1;
  if (ns) memcpy(*v, src, ns * sizeof *src);
  *n = ns;
  return 0;
}

static cudaError_t cs_join(uint64_t wire, cap_seq *seq, cudaGraphNode_t *deps, size_t ndeps) {
  assert(rgpu_mutex_held(&g_cap_lock));
  if (RGPU_ARRAY_RESERVE(g_cs, g_capcs, g_ncs + 1, 8)) return cudaErrorMemoryAllocation;
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
  assert(rgpu_mutex_held(&g_cap_lock));
  free(cs->deps);
  free(cs->edges);
  *cs = g_cs[--g_ncs];
  atomic_fetch_sub(&g_capturing, 1);
}

/* Ends a sequence: its streams stop capturing; the graph is returned or
 * destroyed. */
static void seq_end(cap_seq *seq) {
  assert(rgpu_mutex_held(&g_cap_lock));
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
  rgpu_mutex_lock(&g_cap_lock);
  int r = cs_find(wire) != NULL;
  rgpu_mutex_unlock(&g_cap_lock);
  return r;
}

/* Whether a potentially unsafe call (synchronous copy, synchronize,
 * malloc) is prohibited for this thread now: CUDA's rules for the modes.
 * Invalidates the captures it would interfere with.  Lock held. */
static int unsafe_prohibited_locked(void) {
  assert(rgpu_mutex_held(&g_cap_lock));
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
  rgpu_mutex_lock(&g_cap_lock);
  int bad = unsafe_prohibited_locked();
  rgpu_mutex_unlock(&g_cap_lock);
  return bad ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

/* Work on the legacy stream joins every blocking stream, so while one of
 * them captures it is an implicit dependency: invalidates that capture and
 * returns 1 (lock held). */
static int legacy_joins_capture_locked(void) {
  assert(rgpu_mutex_held(&g_cap_lock));
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
  assert(rgpu_mutex_held(&g_cap_lock));
  cap_stream *cs = cs_find(wire);
  if (!cs) {
    if (wire == 0 && legacy_joins_capture_locked()) {
      node_params_free(p);
      *out = cudaErrorStreamCaptureImplicit;
      return 1;
    }
    return 0;
  }
  if (cs->seq->invalidated) {
    node_params_free(p);
    *out = cudaErrorStreamCaptureInvalidated;
    return 1;
  }
  cudaGraphNode_t n;
  cudaError_t e = graph_node_add(&n, cs->seq->graph, cs->deps, cs->ndeps, p);
  if (e != cudaSuccess) {
    node_params_free(p);
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
  rgpu_mutex_lock(&g_cap_lock);
  int r = capture_node_locked(wire, p, out);
  rgpu_mutex_unlock(&g_cap_lock);
  return r;
}

int rgpu_rt_capture_node(uint64_t wire, node_params *p, cudaError_t *out) {
  return capture_node(wire, p, out);
}

/* The capture side of each operation kind: 1 when taken (or refused
 * because of a capture), *out the call's result; 0: send it. */
static int take_launch(const rgpu_rt_op *op, cudaError_t *out) {
  uint64_t wire = op->stream;
  node_params p;
  cudaError_t e = node_params_launch(&p, op);
  if (e != cudaSuccess) {
    node_params_free(&p);
    if (!capturing_wire(wire)) return 0;
    *out = e;
    return 1;
  }
  if (capture_node(wire, &p, out)) return 1;
  node_params_free(&p);
  return 0;
}

static int take_copy(const rgpu_rt_op *op, cudaError_t *out) {
  uint64_t wire = op->stream;
  int async = op->copy.async;
  rgpu_mutex_lock(&g_cap_lock);
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
  rgpu_mutex_unlock(&g_cap_lock);
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
  rgpu_mutex_lock(&g_cap_lock);
  cap_stream *cs = cs_find(wire);
  rgpu_mutex_unlock(&g_cap_lock);
  if (!cs) return 0;
  if (stream_callback) {
    /* cudaStreamAddCallback cannot be captured (it passes a status). */
    rgpu_mutex_lock(&g_cap_lock);
    if ((cs = cs_find(wire))) cs->seq->invalidated = 1;
    rgpu_mutex_unlock(&g_cap_lock);
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
  node_params_free(&p);
  return 0;
}

/* A library call (a cuBLAS gemm) becomes a host-side node that sends the
 * same request at each launch (rgpu_cudart_graph_exec.c): the node owns a
 * copy of the encoded arguments, so host-mode scalars are the values at
 * capture time, as with cuBLAS's own capture. */
static int take_lib_call(const rgpu_rt_op *op, cudaError_t *out) {
  uint64_t wire = op->stream;
  rgpu_mutex_lock(&g_cap_lock);
  cap_stream *cs = cs_find(wire);
  rgpu_mutex_unlock(&g_cap_lock);
  if (!cs) return 0;
  node_params p;
  memset(&p, 0, sizeof p);
  p.type = cudaGraphNodeTypeHost;
  p.op = *op;
  p.op.stream = 0;
  p.op.lib.args = malloc(op->lib.args_len ? op->lib.args_len : 1);
  if (!p.op.lib.args) {
    *out = cudaErrorMemoryAllocation;
    return 1;
  }
  memcpy(p.op.lib.args, op->lib.args, op->lib.args_len);
  if (capture_node(wire, &p, out)) return 1;
  node_params_free(&p);
  return 0;
}

static int take_event_record(const rgpu_rt_op *op, cudaError_t *out) {
  cudaEvent_t event = op->event.event;
  uint64_t wire = op->stream;
  unsigned flags = op->event.flags;
  if (!atomic_load_explicit(&g_capturing, memory_order_relaxed)) {
    if (g_nce) {
      rgpu_mutex_lock(&g_cap_lock);
      ce_remove(event->id);
      rgpu_mutex_unlock(&g_cap_lock);
    }
    return 0;
  }
  rgpu_mutex_lock(&g_cap_lock);
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
      if (!ce && !RGPU_ARRAY_RESERVE(g_ce, g_capce, g_nce + 1, 8)) {
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
  rgpu_mutex_unlock(&g_cap_lock);
  return r;
}

static int take_event_wait(const rgpu_rt_op *op, cudaError_t *out) {
  cudaEvent_t event = op->event.event;
  uint64_t wire = op->stream;
  unsigned flags = op->event.flags;
  rgpu_mutex_lock(&g_cap_lock);
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
      if (RGPU_ARRAY_RESERVE(cs->deps, cs->cap, cs->ndeps + 1, 8))
        *out = cudaErrorMemoryAllocation;
      else
        cs->deps[cs->ndeps++] = ce->deps[i];
    }
  }
  rgpu_mutex_unlock(&g_cap_lock);
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
  case RGPU_RT_OP_LIB_CALL: return take_lib_call(op, out);
  default: return 0;
  }
}

int rgpu_rt_graph_is_capturing(uint64_t wire) { return capturing_wire(wire); }

cudaError_t rgpu_rt_graph_check_event(cudaEvent_t event) {
  if (!atomic_load_explicit(&g_capturing, memory_order_relaxed)) return cudaSuccess;
  rgpu_mutex_lock(&g_cap_lock);
  cap_event *ce = ce_find(event->id);
  int live = ce && seq_by_id(ce->seq_id) != NULL;
  rgpu_mutex_unlock(&g_cap_lock);
  return live ? cudaErrorCapturedEvent : cudaSuccess;
}

cudaError_t rgpu_rt_graph_check_sync(uint64_t wire) {
  if (!atomic_load_explicit(&g_capturing, memory_order_relaxed)) return cudaSuccess;
  rgpu_mutex_lock(&g_cap_lock);
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
  rgpu_mutex_unlock(&g_cap_lock);
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
  rgpu_mutex_lock(&g_cap_lock);
  if (cs_find(wire)) {
    rgpu_mutex_unlock(&g_cap_lock);
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
  rgpu_mutex_unlock(&g_cap_lock);
  return rgpu_rt_ret(e);
}

RGPU_API cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  return begin_capture(stream, 0, NULL, NULL, 0, mode);
}
RGPU_API_PTSZ(cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, enum cudaStreamCaptureMode mode)) {
  return begin_capture(stream, 1, NULL, NULL, 0, mode);
}
/* Capture into an existing graph: the legacy and per-thread entry points
 * differ only in per_thread.  Edge data is ignored: only default edges
 * exist without programmatic launches. */
#define BEGIN_CAPTURE_TO_GRAPH_ARGS                                                     \
  cudaStream_t stream, cudaGraph_t graph, const cudaGraphNode_t *dependencies,          \
      const cudaGraphEdgeData *dependencyData, size_t numDependencies,                  \
      enum cudaStreamCaptureMode mode
static cudaError_t begin_capture_to_graph(int per_thread, BEGIN_CAPTURE_TO_GRAPH_ARGS) {
  (void)dependencyData;
  if (!graph) {
    rgpu_rt_count_call();
    return rgpu_rt_ret(cudaErrorInvalidValue);
  }
  return begin_capture(stream, per_thread, graph, dependencies, numDependencies, mode);
}
RGPU_API cudaError_t cudaStreamBeginCaptureToGraph(BEGIN_CAPTURE_TO_GRAPH_ARGS) {
  return begin_capture_to_graph(0, stream, graph, dependencies, dependencyData, numDependencies,
                                mode);
}
RGPU_API_PTSZ(cudaError_t cudaStreamBeginCaptureToGraph_ptsz(BEGIN_CAPTURE_TO_GRAPH_ARGS)) {
  return begin_capture_to_graph(1, stream, graph, dependencies, dependencyData, numDependencies,
                                mode);
}

/* Whether node n is one of roots or an ancestor of one. */
static int reaches(cudaGraphNode_t *roots, size_t nroots, cudaGraphNode_t n, int depth) {
  for (size_t i = 0; i < nroots; i++) {
    if (roots[i] == n) return 1;
    if (depth < 4096 && reaches(roots[i]->deps, roots[i]->ndeps, n, depth + 1)) return 1;
  }
  return 0;
}

/* The prologue of end and info: connect, refuse a missing out-parameter
 * (out_given 0), and resolve the stream to its wire id.  The error
 * returned is already final. */
static cudaError_t capture_stream_wire(cudaStream_t stream, int per_thread, int out_given,
                                       uint64_t *wire) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!out_given) return rgpu_rt_ret(cudaErrorInvalidValue);
  int dev;
  e = rgpu_rt_stream_resolve(c, stream, per_thread, wire, &dev);
  return e != cudaSuccess ? rgpu_rt_ret(e) : cudaSuccess;
}

static cudaError_t end_capture(cudaStream_t stream, int per_thread, cudaGraph_t *pGraph) {
  uint64_t wire;
  cudaError_t e = capture_stream_wire(stream, per_thread, 1, &wire);
  if (e != cudaSuccess) return e;
  rgpu_mutex_lock(&g_cap_lock);
  cap_stream *cs = cs_find(wire);
  if (!cs) {
    rgpu_mutex_unlock(&g_cap_lock);
    return rgpu_rt_ret(pGraph ? cudaErrorIllegalState : cudaErrorInvalidValue);
  }
  cap_seq *seq = cs->seq;
  /* Capturing into the program's own graph (cudaStreamBeginCaptureToGraph,
   * a conditional body's usual way) returns nothing new: pGraph may be NULL. */
  if (!pGraph && seq->own_graph) {
    rgpu_mutex_unlock(&g_cap_lock);
    return rgpu_rt_ret(cudaErrorInvalidValue);
  }
  if (seq->origin != wire) {
    /* Ending on a forked stream: CUDA invalidates the whole capture. */
    seq->invalidated = 1;
    rgpu_mutex_unlock(&g_cap_lock);
    return rgpu_rt_ret(cudaErrorStreamCaptureUnmatched);
  }
  if (seq->mode != cudaStreamCaptureModeRelaxed && !pthread_equal(seq->thread, pthread_self())) {
    rgpu_mutex_unlock(&g_cap_lock);
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
  rgpu_mutex_unlock(&g_cap_lock);
  if (result != cudaSuccess) {
    if (own) graph_free(g);
    if (pGraph) *pGraph = NULL;
    return rgpu_rt_ret(result);
  }
  if (pGraph) *pGraph = g;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph) {
  return end_capture(stream, 0, pGraph);
}
RGPU_API_PTSZ(cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph)) {
  return end_capture(stream, 1, pGraph);
}

static cudaError_t capture_info(cudaStream_t stream, int per_thread,
                                enum cudaStreamCaptureStatus *status, unsigned long long *id,
                                cudaGraph_t *graph, const cudaGraphNode_t **deps,
                                const cudaGraphEdgeData **edges, size_t *ndeps) {
  uint64_t wire;
  cudaError_t e = capture_stream_wire(stream, per_thread, status != NULL, &wire);
  if (e != cudaSuccess) return e;
  rgpu_mutex_lock(&g_cap_lock);
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
        if (!RGPU_ARRAY_RESERVE(cs->edges, cs->edges_cap, cs->ndeps ? cs->ndeps : 1, 8))
          memset(cs->edges, 0, cs->edges_cap * sizeof *cs->edges);
        *edges = cs->edges;
      }
    }
  }
  rgpu_mutex_unlock(&g_cap_lock);
  return rgpu_rt_ret(e);
}

RGPU_API cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus) {
  return capture_info(stream, 0, pCaptureStatus, NULL, NULL, NULL, NULL, NULL);
}
RGPU_API_PTSZ(cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream,
                                                     enum cudaStreamCaptureStatus *pCaptureStatus)) {
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
RGPU_API_PTSZ(cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t stream,
                                                        enum cudaStreamCaptureStatus *captureStatus_out,
                                                        unsigned long long *id_out, cudaGraph_t *graph_out,
                                                        const cudaGraphNode_t **dependencies_out,
                                                        const cudaGraphEdgeData **edgeData_out,
                                                        size_t *numDependencies_out)) {
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
  rgpu_mutex_lock(&g_cap_lock);
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
      if (RGPU_ARRAY_RESERVE(cs->deps, cs->cap, cs->ndeps + 1, 8))
        e = cudaErrorMemoryAllocation;
      else
        cs->deps[cs->ndeps++] = deps[i];
    }
  }
  rgpu_mutex_unlock(&g_cap_lock);
  return rgpu_rt_ret(e);
}

RGPU_API cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t stream, cudaGraphNode_t *dependencies,
                                                         const cudaGraphEdgeData *dependencyData,
                                                         size_t numDependencies, unsigned int flags) {
  (void)dependencyData;
  return update_capture_deps(stream, 0, dependencies, numDependencies, flags);
}
RGPU_API_PTSZ(cudaError_t cudaStreamUpdateCaptureDependencies_ptsz(cudaStream_t stream,
                                                                   cudaGraphNode_t *dependencies,
                                                                   const cudaGraphEdgeData *dependencyData,
                                                                   size_t numDependencies,
                                                                   unsigned int flags)) {
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

