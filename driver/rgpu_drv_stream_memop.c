/* Stream memory operations: cuStreamWaitValue32/64, cuStreamWriteValue32/64
 * and cuStreamBatchMemOp (v1 and v2 names, _ptsz forms): a stream waits
 * until a word of device memory meets a condition, or writes one, in
 * stream order.  Programs use them to let one stream wait for a flag
 * another stream's kernel sets, without a host round trip.
 *
 * Each call is one queued STREAM_MEMOP request (server/
 * rgpu_handlers_memop.c), so it costs no round trip, and the server's
 * driver queues the operations on the stream.  The word must be device
 * memory of the session: a wait on this machine's memory (mapped pinned
 * memory, the usual way a CPU signals a GPU) cannot be watched by a remote
 * GPU and is CUDA_ERROR_NOT_SUPPORTED, logged once.  On a capturing
 * stream the request becomes a library node of the graph (the message is a
 * `graphnode` one): the server captures it into its graph on a GPU, where
 * it is a batch memory-operation node, and runs it on the launch's stream
 * at every launch elsewhere (softgpu).  The node reports the type
 * CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, and the explicit node API
 * (cuGraphAddBatchMemOpNode, its GetParams and SetParams, the executable
 * graph's SetParams) makes and edits the same node (the end of this
 * file). */
#include <string.h>

#include "rgpu_calls.h"
#include "rgpu_cudart_graph.h"
#include "rgpu_drv_module.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"

#define MEMOP_MAX 256

static int is_wait(CUstreamBatchMemOpType t) {
  return t == CU_STREAM_MEM_OP_WAIT_VALUE_32 || t == CU_STREAM_MEM_OP_WAIT_VALUE_64;
}
static int is_write(CUstreamBatchMemOpType t) {
  return t == CU_STREAM_MEM_OP_WRITE_VALUE_32 || t == CU_STREAM_MEM_OP_WRITE_VALUE_64;
}

/* Whether [addr, addr + len) is device memory this client knows; logs
 * once when it is host memory instead. */
static CUresult device_word(uint64_t addr, uint64_t len) {
  rgpu_range rg;
  if (rgpu_range_find(rgpu_rt_device_ranges(), addr, len, &rg) == 0) return CUDA_SUCCESS;
  if (rgpu_range_find(rgpu_rt_host_ranges(), addr, len, &rg) == 0) {
    static int logged;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      RGPU_WARN("stream memory operations on host memory are not supported (the remote GPU cannot "
                "watch or write this machine's memory); they return CUDA_ERROR_NOT_SUPPORTED");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

/* A batch as STREAM_MEMOP's arrays, every word checked (aligned device
 * memory of this session). */
typedef struct {
  uint32_t ops[MEMOP_MAX], opf[MEMOP_MAX];
  uint64_t addrs[MEMOP_MAX], vals[MEMOP_MAX];
} memop_arrays;

static CUresult memop_fill(unsigned count, const CUstreamBatchMemOpParams *p, unsigned flags,
                           memop_arrays *a) {
  if (!count || !p || count > MEMOP_MAX || flags) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < count; i++) {
    CUstreamBatchMemOpType t = p[i].operation;
    int wide = t == CU_STREAM_MEM_OP_WAIT_VALUE_64 || t == CU_STREAM_MEM_OP_WRITE_VALUE_64;
    a->ops[i] = (uint32_t)t;
    a->addrs[i] = a->vals[i] = 0;
    if (is_wait(t)) {
      a->addrs[i] = p[i].waitValue.address;
      a->vals[i] = wide ? p[i].waitValue.value64 : p[i].waitValue.value;
      a->opf[i] = p[i].waitValue.flags;
    } else if (is_write(t)) {
      a->addrs[i] = p[i].writeValue.address;
      a->vals[i] = wide ? p[i].writeValue.value64 : p[i].writeValue.value;
      a->opf[i] = p[i].writeValue.flags;
    } else if (t == CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES) {
      a->opf[i] = p[i].flushRemoteWrites.flags;
    } else if (t == CU_STREAM_MEM_OP_BARRIER) {
      a->opf[i] = p[i].memoryBarrier.flags;
    } else {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (is_wait(t) || is_write(t)) {
      if (a->addrs[i] % (wide ? 8 : 4)) return CUDA_ERROR_INVALID_VALUE;
      CUresult r = device_word(a->addrs[i], wide ? 8 : 4);
      if (r != CUDA_SUCCESS) return r;
    }
  }
  return CUDA_SUCCESS;
}

/* STREAM_MEMOP for the checked arrays on stream `wire`. */
static rgpu_msg_stream_memop_req memop_req(unsigned count, const memop_arrays *a, unsigned flags,
                                           uint64_t wire) {
  return (rgpu_msg_stream_memop_req){.stream = wire,
                                     .flags = flags,
                                     .ops = {a->ops, count},
                                     .op_flags = {a->opf, count},
                                     .addrs = {a->addrs, count},
                                     .values = {a->vals, count}};
}

/* The request of a graph's library node: stream field zeroed (it leads
 * the request; the server writes the launch's own there). */
static CUresult memop_node_request(unsigned count, const memop_arrays *a, unsigned flags,
                                   rgpu_buf *req) {
  rgpu_msg_stream_memop_req q = memop_req(count, a, flags, 0);
  rgpu_buf_init(req);
  if (rgpu_msg_stream_memop_req_encode(req, &q)) {
    rgpu_buf_free(req);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}

static CUresult memop_send(CUstream stream, int per_thread, unsigned count, const CUstreamBatchMemOpParams *p,
                           unsigned flags) {
  RGPU_DRV_BEGIN();
  if (!count || !p || count > MEMOP_MAX || flags) RGPU_DRV_RET(CUDA_ERROR_INVALID_VALUE);
  CUresult r = rgpu_drv_ctx_enter(NULL);
  if (r != CUDA_SUCCESS) RGPU_DRV_RET(r);
  memop_arrays a;
  if ((r = memop_fill(count, p, flags, &a)) != CUDA_SUCCESS) RGPU_DRV_RET(r);
  uint64_t wire;
  int dev;
  cudaError_t e = rgpu_rt_stream_resolve(c, (cudaStream_t)stream, per_thread, &wire, &dev);
  if (e != cudaSuccess) RGPU_DRV_RET(rgpu_drv_from_rt(e));
  if (rgpu_rt_graph_is_capturing(wire)) {
    rgpu_buf req;
    if ((r = memop_node_request(count, &a, flags, &req)) != CUDA_SUCCESS) RGPU_DRV_RET(r);
    RGPU_DRV_RET(rgpu_drv_from_rt(rgpu_rt_submit_request(c, dev, wire, RGPU_OP_STREAM_MEMOP, 0, &req)));
  }
  rgpu_msg_stream_memop_req q = memop_req(count, &a, flags, wire);
  rgpu_status rc = rgpu_call_stream_memop(c, dev, RGPU_CALL_ASYNC, &q, NULL, NULL);
  RGPU_DRV_RET(rc ? rgpu_drv_reply_ret(c, rc) : CUDA_SUCCESS);
}

/* One operation in CUDA's form, from STREAM_MEMOP's fields (the single
 * calls and a node's parameters read back). */
static void memop_param(CUstreamBatchMemOpParams *p, CUstreamBatchMemOpType t, uint64_t addr,
                        uint64_t value, unsigned fl) {
  memset(p, 0, sizeof *p);
  p->operation = t;
  if (is_wait(t)) {
    p->waitValue.address = addr;
    if (t == CU_STREAM_MEM_OP_WAIT_VALUE_64) p->waitValue.value64 = value;
    else p->waitValue.value = (cuuint32_t)value;
    p->waitValue.flags = fl;
  } else if (is_write(t)) {
    p->writeValue.address = addr;
    if (t == CU_STREAM_MEM_OP_WRITE_VALUE_64) p->writeValue.value64 = value;
    else p->writeValue.value = (cuuint32_t)value;
    p->writeValue.flags = fl;
  } else if (t == CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES) {
    p->flushRemoteWrites.flags = fl;
  } else {
    p->memoryBarrier.flags = fl;
  }
}

static CUresult one(CUstream s, int pt, CUstreamBatchMemOpType t, CUdeviceptr addr, uint64_t value, unsigned fl) {
  CUstreamBatchMemOpParams p;
  memop_param(&p, t, addr, value, fl);
  return memop_send(s, pt, 1, &p, 0);
}

/* The four single operations, each under its v1 and v2 names, with and
 * without _ptsz: one macro per operation. */
#define RGPU_DRV_MEMOP_FAMILY(Name, type, op)                                                         \
  RGPU_DRV CUresult rgpu_drv_##Name##_v2(CUstream s, CUdeviceptr addr, type value, unsigned int flags) { \
    return one(s, 0, op, addr, value, flags);                                                         \
  }                                                                                                   \
  RGPU_DRV CUresult rgpu_drv_##Name##_v2_ptsz(CUstream s, CUdeviceptr addr, type value,               \
                                              unsigned int flags) {                                   \
    return one(s, 1, op, addr, value, flags);                                                         \
  }                                                                                                   \
  RGPU_DRV CUresult rgpu_drv_##Name(CUstream s, CUdeviceptr addr, type value, unsigned int flags) {   \
    return one(s, 0, op, addr, value, flags);                                                         \
  }                                                                                                   \
  RGPU_DRV CUresult rgpu_drv_##Name##_ptsz(CUstream s, CUdeviceptr addr, type value, unsigned int flags) { \
    return one(s, 1, op, addr, value, flags);                                                         \
  }

RGPU_DRV_MEMOP_FAMILY(cuStreamWaitValue32, cuuint32_t, CU_STREAM_MEM_OP_WAIT_VALUE_32)
RGPU_DRV_MEMOP_FAMILY(cuStreamWaitValue64, cuuint64_t, CU_STREAM_MEM_OP_WAIT_VALUE_64)
RGPU_DRV_MEMOP_FAMILY(cuStreamWriteValue32, cuuint32_t, CU_STREAM_MEM_OP_WRITE_VALUE_32)
RGPU_DRV_MEMOP_FAMILY(cuStreamWriteValue64, cuuint64_t, CU_STREAM_MEM_OP_WRITE_VALUE_64)

/* cuStreamBatchMemOp under its four names (v1 and v2 share the layout). */
#define RGPU_DRV_BATCH_MEMOP(name, pt)                                                              \
  RGPU_DRV CUresult rgpu_drv_##name(CUstream stream, unsigned int count,                           \
                                    CUstreamBatchMemOpParams *paramArray, unsigned int flags) {    \
    return memop_send(stream, pt, count, paramArray, flags);                                       \
  }
RGPU_DRV_BATCH_MEMOP(cuStreamBatchMemOp, 0)
RGPU_DRV_BATCH_MEMOP(cuStreamBatchMemOp_ptsz, 1)
RGPU_DRV_BATCH_MEMOP(cuStreamBatchMemOp_v2, 0)
RGPU_DRV_BATCH_MEMOP(cuStreamBatchMemOp_v2_ptsz, 1)

/* ---- batch memory-operation nodes (cuGraphAddBatchMemOpNode and friends) --------
 * The node is the library node a capture makes (the STREAM_MEMOP request,
 * rgpu_rt_graph_add_request_node); its parameters are read back from the
 * request into an array the node owns; new parameters for the node of an
 * executable graph update the server's graph like any exec node update. */

static CUresult memop_node_checked(const CUDA_BATCH_MEM_OP_NODE_PARAMS *np, rgpu_buf *req) {
  if (!np) return CUDA_ERROR_INVALID_VALUE;
  if (np->ctx) {
    CUresult r = rgpu_drv_ctx_check(np->ctx);
    if (r != CUDA_SUCCESS) return r;
  }
  memop_arrays a;
  CUresult r = memop_fill(np->count, np->paramArray, np->flags, &a);
  if (r != CUDA_SUCCESS) return r;
  return memop_node_request(np->count, &a, np->flags, req);
}

RGPU_DRV CUresult rgpu_drv_cuGraphAddBatchMemOpNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                    const CUgraphNode *dependencies,
                                                    size_t numDependencies,
                                                    const CUDA_BATCH_MEM_OP_NODE_PARAMS *nodeParams) {
  RGPU_DRV_BEGIN();
  (void)c;
  CUresult r = rgpu_drv_ctx_enter(NULL);
  if (r != CUDA_SUCCESS) RGPU_DRV_RET(r);
  rgpu_buf req;
  if ((r = memop_node_checked(nodeParams, &req)) != CUDA_SUCCESS) RGPU_DRV_RET(r);
  cudaError_t e = rgpu_rt_graph_add_request_node(phGraphNode, hGraph, dependencies, numDependencies,
                                                 RGPU_OP_STREAM_MEMOP, 0, req.data, req.len);
  rgpu_buf_free(&req);
  RGPU_DRV_RET(rgpu_drv_from_rt(e));
}

RGPU_DRV CUresult rgpu_drv_cuGraphBatchMemOpNodeGetParams(CUgraphNode hNode,
                                                          CUDA_BATCH_MEM_OP_NODE_PARAMS *out) {
  RGPU_DRV_BEGIN();
  (void)c;
  if (!out) RGPU_DRV_RET(CUDA_ERROR_INVALID_VALUE);
  const uint8_t *req;
  size_t len;
  cudaError_t e = rgpu_rt_graph_request_node_get(hNode, RGPU_OP_STREAM_MEMOP, &req, &len, NULL, 0);
  if (e != cudaSuccess) RGPU_DRV_RET(rgpu_drv_from_rt(e));
  rgpu_msg_stream_memop_req q;
  if (rgpu_msg_stream_memop_req_decode(req, len, &q) || !q.ops.count || q.ops.count > MEMOP_MAX ||
      q.op_flags.count != q.ops.count || q.addrs.count != q.ops.count || q.values.count != q.ops.count)
    RGPU_DRV_RET(CUDA_ERROR_INVALID_VALUE);
  unsigned n = q.ops.count;
  /* Built on the stack first: growing the node's copy for the scratch may
   * move the request q's arrays point into. */
  CUstreamBatchMemOpParams built[MEMOP_MAX];
  for (unsigned i = 0; i < n; i++)
    memop_param(&built[i], (CUstreamBatchMemOpType)rgpu_array_u32(&q.ops, i), rgpu_array_u64(&q.addrs, i),
                rgpu_array_u64(&q.values, i), rgpu_array_u32(&q.op_flags, i));
  void *scratch;
  e = rgpu_rt_graph_request_node_get(hNode, RGPU_OP_STREAM_MEMOP, &req, &len, &scratch,
                                     (size_t)n * sizeof(CUstreamBatchMemOpParams) + 8);
  if (e != cudaSuccess) RGPU_DRV_RET(rgpu_drv_from_rt(e));
  CUstreamBatchMemOpParams *p = (CUstreamBatchMemOpParams *)(((uintptr_t)scratch + 7) & ~(uintptr_t)7);
  memcpy(p, built, (size_t)n * sizeof *p);
  out->ctx = rgpu_drv_ctx_current();
  out->count = n;
  out->paramArray = p;
  out->flags = q.flags;
  RGPU_DRV_RET(CUDA_SUCCESS);
}

/* New parameters for the node of a graph, or (in_exec) of the executable
 * graph exec. */
static CUresult memop_node_set(int in_exec, CUgraphExec exec, CUgraphNode node,
                               const CUDA_BATCH_MEM_OP_NODE_PARAMS *np) {
  rgpu_buf req;
  CUresult r = memop_node_checked(np, &req);
  if (r != CUDA_SUCCESS) return r;
  cudaError_t e =
      in_exec ? rgpu_rt_graph_exec_set_request_node(exec, node, RGPU_OP_STREAM_MEMOP, req.data, req.len)
           : rgpu_rt_graph_request_node_set(node, RGPU_OP_STREAM_MEMOP, req.data, req.len);
  rgpu_buf_free(&req);
  return rgpu_drv_from_rt(e);
}

RGPU_DRV CUresult rgpu_drv_cuGraphBatchMemOpNodeSetParams(CUgraphNode hNode,
                                                          const CUDA_BATCH_MEM_OP_NODE_PARAMS *nodeParams) {
  RGPU_DRV_BEGIN();
  (void)c;
  RGPU_DRV_RET(memop_node_set(0, NULL, hNode, nodeParams));
}

RGPU_DRV CUresult rgpu_drv_cuGraphExecBatchMemOpNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                              const CUDA_BATCH_MEM_OP_NODE_PARAMS *nodeParams) {
  RGPU_DRV_BEGIN();
  (void)c;
  RGPU_DRV_RET(memop_node_set(1, hGraphExec, hNode, nodeParams));
}
