/* Library calls (cuBLAS, cuDNN) that are nodes of a client's CUDA graph
 * (LIB nodes of GRAPH_EXEC_CREATE, rgpu_graph.c), run the way a captured
 * call runs natively.
 *
 * Natively, capturing a cuBLAS or cuDNN call puts the library's kernels
 * into the program's graph: a replay launches them without the library's
 * host work, and the libraries choose their kernels knowing they are being
 * captured (PyTorch's graphed training step gave other bits through rgpu
 * while library nodes ran as plain calls at each replay).  So the server
 * captures the call on a private stream into a graph of its own, which
 * rgpu_graph.c adds to the instantiated graph as a child graph: a launch is
 * one graph launch, library kernels included.
 *
 * Where that cannot be done (softgpu, whose library work runs in host
 * functions; a driver without stream capture; a call that fails to
 * capture) rgpu_graph.c replays the graph node by node and runs the call
 * as the plain call it is, through rgpu_graph_lib_run_plain. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_dispatch.h"
#include "rgpu_graph_lib.h"
#include "rgpu_log.h"
#include "rgpu_worker_internal.h"

#define D (&w->drv)
#define FAIL(status, ...) rgpu_worker_fail(w, (status), __VA_ARGS__)

/* The driver's capture API, resolved on first use (two levels so that
 * cuda.h's macros give the exported names: cuStreamBeginCapture_v2, ...). */
#define CAPTURE_FUNCS(X) X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuGraphDestroy)
#define STR2(x) #x
#define STR(x) STR2(x)

struct rgpu_graph_lib {
  int state; /* 0 not tried, 1 capture available, -1 plain calls only */
#define FIELD(name) __typeof__(&name) name;
  CAPTURE_FUNCS(FIELD)
#undef FIELD
  CUstream capture[RGPU_MAX_DEVICES]; /* private capture streams */
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

void rgpu_graph_lib_drop_device(rgpu_worker *w, int dev, int destroy) {
  struct rgpu_graph_lib *s = w->graph_libs;
  if (!s) return;
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

void rgpu_graph_lib_invalidate(rgpu_worker *w) { w->graph_lib_epoch++; }

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
  inner.graph_node = 1;
  inner.msg[0] = 0;
  /* Helpers that only have the worker write the message of w->req, the
   * outer request; rgpu_req_fail writes inner's. */
  CUresult r = e->run(&inner, bytes, len);
  if (r && inner.msg[0]) memcpy(rq->msg, inner.msg, sizeof rq->msg);
  free(bytes);
  return r;
}

const rgpu_dispatch_entry *rgpu_graph_lib_entry(uint32_t opcode) {
  const rgpu_dispatch_entry *e = opcode <= 0xffff ? rgpu_dispatch_for((uint16_t)opcode) : NULL;
  return e && (e->flags & RGPU_DISPATCH_GRAPHNODE) ? e : NULL;
}

/* The entry of a library node's request, or NULL after failing the
 * request: an opcode that is no library call of a graph, or a stream field
 * (8 bytes at stream_at) outside its len bytes. */
static const rgpu_dispatch_entry *node_entry(rgpu_req *rq, uint32_t opcode, size_t len,
                                             size_t stream_at) {
  rgpu_worker *w = rq->w;
  const rgpu_dispatch_entry *e = rgpu_graph_lib_entry(opcode);
  if (!e || stream_at > len || len - stream_at < 8) {
    FAIL(CUDA_ERROR_INVALID_VALUE, "graph library node: opcode 0x%04x with its stream field at "
         "%zu of %zu bytes", (unsigned)opcode, stream_at, len);
    return NULL;
  }
  return e;
}

CUresult rgpu_graph_lib_run_plain(rgpu_req *rq, uint32_t opcode, const uint8_t *req, size_t len,
                                  size_t stream_at, uint64_t stream_id) {
  const rgpu_dispatch_entry *e = node_entry(rq, opcode, len, stream_at);
  if (!e) return CUDA_ERROR_INVALID_VALUE;
  return run_inner(rq, e, req, len, stream_at, stream_id);
}

CUresult rgpu_graph_lib_capture(rgpu_req *rq, uint32_t opcode, const uint8_t *req, size_t len,
                                size_t stream_at, CUgraph *out) {
  rgpu_worker *w = rq->w;
  *out = NULL;
  const rgpu_dispatch_entry *e = node_entry(rq, opcode, len, stream_at);
  if (!e) return CUDA_ERROR_INVALID_VALUE;
  struct rgpu_graph_lib *s = lib_state(w);
  if (!s) return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "graph library node: server out of memory");
  if (s->state != 1) return CUDA_ERROR_NOT_SUPPORTED;
  int dev = w->cur_dev < 0 ? 0 : w->cur_dev;
  CUresult r = CUDA_SUCCESS;
  if (!s->capture[dev]) r = D->cuStreamCreateWithPriority(&s->capture[dev], CU_STREAM_NON_BLOCKING, 0);
  /* The call runs under a temporary stream id, removed before any other
   * request is read. */
  uint64_t tmp_id = 0xfffffffff0000000ull;
  while (r == CUDA_SUCCESS && rgpu_handle_map_get(&w->streams, tmp_id)) tmp_id++;
  if (r != CUDA_SUCCESS) return r;
  if (rgpu_handle_map_put(&w->streams, tmp_id, s->capture[dev], dev))
    return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "graph library node: server out of memory");
  CUgraph g = NULL;
  r = s->cuStreamBeginCapture(s->capture[dev], CU_STREAM_CAPTURE_MODE_RELAXED);
  if (r == CUDA_SUCCESS) {
    CUresult call = run_inner(rq, e, req, len, stream_at, tmp_id);
    CUresult end = s->cuStreamEndCapture(s->capture[dev], &g);
    r = call != CUDA_SUCCESS ? call : end != CUDA_SUCCESS ? end : g ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
    if (r != CUDA_SUCCESS && g) {
      s->cuGraphDestroy(g);
      g = NULL;
    }
  }
  rgpu_handle_entry gone;
  rgpu_handle_map_remove(&w->streams, tmp_id, &gone);
  *out = g;
  return r;
}

void rgpu_graph_lib_destroy_graph(rgpu_worker *w, CUgraph g) {
  struct rgpu_graph_lib *s = w->graph_libs;
  if (g && s && s->state == 1) s->cuGraphDestroy(g);
}
