/* GRAPH_LIB_NODE: a library call (cuBLAS, cuDNN) that is a node of a CUDA
 * graph the client launched, run the way a captured call runs natively.
 *
 * Natively, capturing a cuBLAS or cuDNN call puts the library's kernels
 * into the program's graph: a replay launches them without the library's
 * host work, and the libraries choose their kernels knowing they are being
 * captured (PyTorch's graphed training step gave other bits through rgpu
 * while library nodes ran as plain calls at each replay).  So the first
 * time the server sees a node's request (by content: the same node of the
 * same graph sends the same bytes every launch), it captures the call on a
 * private stream into a CUDA graph of its own, instantiates it, and from
 * then on launches that graph on the node's stream.
 *
 * Where that cannot be done (softgpu, whose library work runs in host
 * functions; a driver without stream capture; a call that fails to
 * capture) the request runs as the plain call it wraps, and a request that
 * failed to capture once is not captured again. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_dispatch.h"
#include "rgpu_graph_lib.h"
#include "rgpu_hash.h"
#include "rgpu_log.h"
#include "rgpu_worker_internal.h"

#define D (&w->drv)
#define FAIL(status, ...) rgpu_worker_fail(w, (status), __VA_ARGS__)
#define SLOTS 512 /* captured calls kept per session, replaced round-robin */

/* The driver's capture API, resolved on first use (two levels so that
 * cuda.h's macros give the exported names: cuStreamBeginCapture_v2, ...). */
#define CAPTURE_FUNCS(X)                                                                  \
  X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuGraphInstantiateWithFlags)            \
  X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphDestroy)
#define STR2(x) #x
#define STR(x) STR2(x)

typedef struct {
  uint64_t hash;
  int device;
  uint16_t opcode;
  uint8_t *bytes; /* the request, its stream field zeroed */
  size_t len;
  CUgraphExec exec; /* NULL: could not be captured; runs as a plain call */
} captured;

struct rgpu_graph_lib {
  int state; /* 0 not tried, 1 capture available, -1 plain calls only */
#define FIELD(name) __typeof__(&name) name;
  CAPTURE_FUNCS(FIELD)
#undef FIELD
  CUstream capture[RGPU_MAX_DEVICES]; /* private capture streams */
  captured slot[SLOTS];
  unsigned next;
};

static struct rgpu_graph_lib *lib_state(rgpu_worker *w) {
  if (!w->graph_libs) {
    w->graph_libs = calloc(1, sizeof *w->graph_libs);
    if (!w->graph_libs) return NULL;
  }
  struct rgpu_graph_lib *s = w->graph_libs;
  if (s->state == 0) {
    s->state = -1;
    const char *plain = getenv("RGPU_GRAPH_LIB_PLAIN");
    if (!D->is_softgpu && w->drv.lib && !(plain && *plain == '1')) {
      int ok = 1;
#define RESOLVE(name)                                      \
  *(void **)&s->name = dlsym(w->drv.lib, STR(name));       \
  if (!s->name) ok = 0;
      CAPTURE_FUNCS(RESOLVE)
#undef RESOLVE
      if (ok) s->state = 1;
    }
  }
  return s;
}

static void captured_free(struct rgpu_graph_lib *s, captured *c) {
  if (c->exec) s->cuGraphExecDestroy(c->exec);
  free(c->bytes);
  memset(c, 0, sizeof *c);
}

void rgpu_graph_lib_drop_device(rgpu_worker *w, int dev, int destroy) {
  struct rgpu_graph_lib *s = w->graph_libs;
  if (!s) return;
  for (unsigned i = 0; i < SLOTS; i++)
    if (s->slot[i].bytes && (dev < 0 || s->slot[i].device == dev)) {
      if (!destroy) s->slot[i].exec = NULL; /* its context is gone: forget */
      captured_free(s, &s->slot[i]);
    }
  for (int d = 0; d < RGPU_MAX_DEVICES; d++)
    if (s->capture[d] && (dev < 0 || d == dev)) {
      if (destroy) D->cuStreamDestroy(s->capture[d]);
      s->capture[d] = NULL;
    }
  if (dev < 0) {
    free(s);
    w->graph_libs = NULL;
  }
}

void rgpu_graph_lib_forget(rgpu_worker *w) {
  struct rgpu_graph_lib *s = w->graph_libs;
  if (!s || s->state != 1) return;
  int cur = w->cur_dev, switched = 0;
  for (unsigned i = 0; i < SLOTS; i++) {
    captured *c = &s->slot[i];
    if (!c->bytes) continue;
    /* An executable graph is destroyed in its own context. */
    if (c->device != cur && c->device >= 0 && c->device < RGPU_MAX_DEVICES && w->ctx[c->device]) {
      D->cuCtxSetCurrent(w->ctx[c->device]);
      switched = 1;
    }
    captured_free(s, c);
    if (switched && cur >= 0 && cur < RGPU_MAX_DEVICES && w->ctx[cur]) {
      D->cuCtxSetCurrent(w->ctx[cur]);
      switched = 0;
    }
  }
}

/* Runs the wrapped request through its handler, as if it had come alone,
 * on a copy of its bytes whose stream field (at stream_at) names
 * stream_id. */
static CUresult run_inner(rgpu_req *rq, const rgpu_dispatch_entry *e, const uint8_t *req,
                          size_t len, size_t stream_at, uint64_t stream_id) {
  rgpu_worker *w = rq->w;
  uint8_t *bytes = malloc(len ? len : 1);
  if (!bytes) return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "graph library node: server out of memory");
  memcpy(bytes, req, len);
  memcpy(bytes + stream_at, &stream_id, 8);
  rgpu_req inner = *rq;
  inner.op = e->op;
  inner.need_reply = 0;
  inner.in = NULL;
  inner.msg[0] = 0;
  /* Helpers that only have the worker write the message of w->req, the
   * outer request; rgpu_req_fail writes inner's. */
  CUresult r = e->run(&inner, bytes, len);
  if (r && inner.msg[0]) memcpy(rq->msg, inner.msg, sizeof rq->msg);
  free(bytes);
  return r;
}

/* A request's key: its bytes with the stream field (8 bytes at at) taken
 * as zeros, so the same node launched on any stream is one captured call. */
static uint64_t key_hash(const uint8_t *p, size_t n, size_t at) {
  static const uint8_t zero[8];
  uint64_t h = rgpu_fnv1a64_more(RGPU_FNV1A64_INIT, p, at);
  h = rgpu_fnv1a64_more(h, zero, sizeof zero);
  return rgpu_fnv1a64_more(h, p + at + 8, n - at - 8);
}

static int key_equal(const captured *c, const uint8_t *p, size_t n, size_t at) {
  static const uint8_t zero[8];
  return c->len == n && !memcmp(c->bytes, p, at) && !memcmp(c->bytes + at, zero, 8) &&
         !memcmp(c->bytes + at + 8, p + at + 8, n - at - 8);
}

/* The u64 at p (the codec writes them little-endian, as this host is). */
static uint64_t u64_at(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

CUresult rgpu_h_graph_lib_node(rgpu_req *rq, const rgpu_msg_graph_lib_node_req *q) {
  rgpu_worker *w = rq->w;
  const char *api = "graph library node";
  const rgpu_dispatch_entry *e = rgpu_dispatch_for((uint16_t)q->opcode);
  if (q->opcode > 0xffff || !e || !(e->flags & RGPU_DISPATCH_GRAPHNODE))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: opcode 0x%04x is no library call of a graph", api,
                (unsigned)q->opcode);
  const uint8_t *req = q->request.data;
  size_t len = q->request.len, stream_at = q->stream_at;
  if (stream_at > len || len - stream_at < 8 || u64_at(req + stream_at) != q->stream)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: the request's stream field (at %zu of %zu bytes) "
                "does not name stream %llu", api, stream_at, len, (unsigned long long)q->stream);
  struct rgpu_graph_lib *s = lib_state(w);
  CUstream st = NULL;
  if (q->stream) {
    const rgpu_handle_entry *he = rgpu_handle_map_get(&w->streams, q->stream);
    if (!he)
      return FAIL(CUDA_ERROR_INVALID_HANDLE, "%s: unknown stream id %llu", api,
                  (unsigned long long)q->stream);
    st = (CUstream)he->ptr;
  }
  int dev = w->cur_dev < 0 ? 0 : w->cur_dev;
  if (!s || s->state != 1) return run_inner(rq, e, req, len, stream_at, q->stream);
  /* A replay: no copy of the request, a graph launch. */
  uint64_t hash = key_hash(req, len, stream_at);
  captured *hit = NULL;
  for (unsigned i = 0; i < SLOTS && !hit; i++) {
    captured *c = &s->slot[i];
    if (c->bytes && c->hash == hash && c->device == dev && c->opcode == q->opcode &&
        key_equal(c, req, len, stream_at))
      hit = c;
  }
  if (hit) {
    if (!hit->exec) return run_inner(rq, e, req, len, stream_at, q->stream);
    CUresult r = s->cuGraphLaunch(hit->exec, st);
    return r ? FAIL(r, "%s: cuGraphLaunch: %s", api, rgpu_driver_error_name(D, r)) : CUDA_SUCCESS;
  }
  /* First sight: capture the call on the device's private stream, under a
   * temporary stream id (removed before any other request is read). */
  captured *c = &s->slot[s->next++ % SLOTS];
  captured_free(s, c);
  CUresult r = CUDA_SUCCESS;
  if (!s->capture[dev]) r = D->cuStreamCreateWithPriority(&s->capture[dev], CU_STREAM_NON_BLOCKING, 0);
  uint64_t tmp_id = 0xfffffffff0000000ull;
  while (r == CUDA_SUCCESS && rgpu_handle_map_get(&w->streams, tmp_id)) tmp_id++;
  CUgraphExec exec = NULL;
  int captured_ok = 0;
  if (r == CUDA_SUCCESS &&
      rgpu_handle_map_put(&w->streams, tmp_id, s->capture[dev], dev) == 0) {
    CUgraph g = NULL;
    r = s->cuStreamBeginCapture(s->capture[dev], CU_STREAM_CAPTURE_MODE_RELAXED);
    if (r == CUDA_SUCCESS) {
      CUresult call = run_inner(rq, e, req, len, stream_at, tmp_id);
      CUresult end = s->cuStreamEndCapture(s->capture[dev], &g);
      if (call == CUDA_SUCCESS && end == CUDA_SUCCESS && g &&
          s->cuGraphInstantiateWithFlags(&exec, g, 0) == CUDA_SUCCESS)
        captured_ok = 1;
      if (g) s->cuGraphDestroy(g);
      /* A call that failed under capture may have failed because of it (a
       * library that synchronizes inside): it runs once more as a plain
       * call below, whose status is the call's own. */
      rq->msg[0] = 0;
    }
    rgpu_handle_entry gone;
    rgpu_handle_map_remove(&w->streams, tmp_id, &gone);
  }
  /* Remembered (its key, with the stream field zeroed) whether captured
   * or not: a call that cannot be captured is not tried again. */
  uint8_t *bytes = malloc(len ? len : 1);
  if (bytes) {
    memcpy(bytes, req, len);
    memset(bytes + stream_at, 0, 8);
    *c = (captured){.hash = hash, .device = dev, .opcode = (uint16_t)q->opcode, .bytes = bytes,
                    .len = len, .exec = captured_ok ? exec : NULL};
  } else if (captured_ok) {
    s->cuGraphExecDestroy(exec); /* not kept: the launch below runs the call */
    captured_ok = 0;
  }
  if (captured_ok) {
    r = s->cuGraphLaunch(exec, st);
    return r ? FAIL(r, "%s: cuGraphLaunch: %s", api, rgpu_driver_error_name(D, r)) : CUDA_SUCCESS;
  }
  RGPU_DEBUG("session=%llu %s (%s) cannot be captured: it runs as a plain call",
             (unsigned long long)w->cfg.session_id, api, e->name);
  return run_inner(rq, e, req, len, stream_at, q->stream);
}
