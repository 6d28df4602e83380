/* The client's graph model, shared by the three graph files:
 *   rgpu_cudart_graph_model.c    graphs, nodes, edges, node parameters,
 *                                clone, inspection, DOT output
 *   rgpu_cudart_graph_exec.c     instantiation (flattening, levels, the
 *                                server's node list), launch, updates
 *   rgpu_cudart_graph_capture.c  stream capture: sequences, modes, CUDA's
 *                                errors for illegal calls, capture of ops
 *   rgpu_cudart_graph_cond.c     conditional nodes and their handles
 * Nothing here is visible outside libcudart (hidden visibility). */
#ifndef RGPU_CUDART_GRAPH_INTERNAL_H
#define RGPU_CUDART_GRAPH_INTERNAL_H

#include "rgpu_array.h" /* RGPU_ARRAY_RESERVE: the graph files' growing lists */
#include "rgpu_cudart.h"
#include "rgpu_cudart_op.h"

#define GRAPH_MAGIC 0x47525048u /* "GRPH" */
#define NODE_MAGIC 0x474e4f44u  /* "GNOD" */
#define EXEC_MAGIC 0x47455843u  /* "GEXC" */

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
  /* kernel nodes: cudaGraphKernelNodeSetAttribute's values, owned (hints
   * kept for Get and Copy; rgpu_cudart_graph_model.c says why they are
   * not sent) */
  cudaLaunchAttribute *kattrs;
  size_t nkattrs;
  /* child graph: an owned clone */
  cudaGraph_t child;
  /* memory alloc and free nodes (rgpu_cudart_graph_mem.c): the block, and
   * for alloc nodes its size and device; an alloc node holds a reference
   * to the block (taken by node_params_copy, given back by _free). */
  uint64_t mem_ptr, mem_size;
  int mem_dev;
  /* conditional nodes (rgpu_cudart_graph_cond.c): the handle's value, its
   * default and flags (copied from cudaGraphConditionalHandleCreate), and
   * the bodies, owned, cond_size of them */
  uint64_t cond_handle;
  uint32_t cond_kind, cond_size, cond_default, cond_flags;
  cudaGraph_t *bodies;
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

/* User-object references a graph or an executable graph holds
 * (rgpu_cudart_user_object.c): each object once, with its count. */
typedef struct {
  struct {
    cudaUserObject_t obj;
    unsigned count;
  } *v;
  size_t n, cap;
} rgpu_user_refs;

/* dst takes references of its own to everything src holds. */
cudaError_t rgpu_user_refs_copy(rgpu_user_refs *dst, const rgpu_user_refs *src);
/* Releases everything r holds (a destructor may then be queued) and empties it. */
void rgpu_user_refs_release(rgpu_user_refs *r);

struct CUgraph_st {
  uint32_t magic;
  int body; /* a conditional node's body: CUDA's, not the program's to destroy */
  struct CUgraphNode_st **nodes;
  size_t n, cap;
  rgpu_user_refs user_refs; /* cudaGraphRetainUserObject */
};

/* A library call captured from a stream (a cuBLAS gemm): a node of type
 * host that is not host-side: it travels to the server with the graph
 * (a LIB node), which makes the library's kernels part of its graph. */
static inline int node_params_is_lib(const node_params *p) {
  return p->type == cudaGraphNodeTypeHost && p->op.kind == RGPU_RT_OP_LIB_CALL;
}

static inline int valid_graph(cudaGraph_t g) { return g && g->magic == GRAPH_MAGIC; }
static inline int valid_node(cudaGraphNode_t n) { return n && n->magic == NODE_MAGIC; }
static inline int valid_event(cudaEvent_t ev) { return ev && ev->magic == RGPU_EVENT_MAGIC; }

/* ---- rgpu_cudart_graph_model.c ------------------------------------------ */

/* Node parameters: free, deep copy (the child graph is cloned). */
void node_params_free(node_params *p);
/* A library node's parameters like `like` (a node of that request's
 * opcode) with request req (copied) instead of its own: what the node
 * API's SetParams calls build.  cudaErrorInvalidValue where like is no
 * library node of opcode or req has no room for its stream field. */
cudaError_t node_params_request_like(node_params *out, const node_params *like, uint16_t opcode,
                                     const void *req, size_t len);
cudaError_t node_params_copy(node_params *dst, const node_params *src);
/* Parameters from the API's structs, checked as CUDA checks them (p is
 * replaced only on success). */
cudaError_t node_params_kernel(node_params *p, const struct cudaKernelNodeParams *kp);
cudaError_t node_params_memcpy(node_params *p, const struct cudaMemcpy3DParms *cp);
cudaError_t node_params_symbol(node_params *p, int to_symbol, const void *symbol, void *host,
                               size_t count, size_t offset, enum cudaMemcpyKind kind);
cudaError_t node_params_memset(node_params *p, const struct cudaMemsetParams *ms);
cudaError_t node_params_generic(node_params *p, const struct cudaGraphNodeParams *np);
/* The single-purpose fills that the add, set and generic forms share. */
cudaError_t node_params_memcpy_1d(node_params *p, void *dst, const void *src, size_t count,
                                  enum cudaMemcpyKind kind);
cudaError_t node_params_host(node_params *p, const struct cudaHostNodeParams *hp);
cudaError_t node_params_event(node_params *p, enum cudaGraphNodeType type, cudaEvent_t event);
cudaError_t node_params_child(node_params *p, cudaGraph_t child); /* clones child */
cudaError_t node_params_empty(node_params *p);
/* A kernel node from a launch operation (the node owns a copy of the
 * packed parameters). */
cudaError_t node_params_launch(node_params *p, const rgpu_rt_op *launch);
/* Host nodes (not library nodes) and host-to-host copies: they run in
 * this process. */
int node_params_host_side(const node_params *p);
/* Start and span of a 3D copy's side; -1 when it does not fit. */
int graph_copy_extent(const struct cudaPitchedPtr *pp, const struct cudaPos *pos,
                      const struct cudaExtent *ex, uint64_t *base, uint64_t *span);

cudaError_t graph_new(cudaGraph_t *out);
/* Whether g or a child graph of it holds a conditional node. */
int graph_has_conditional(cudaGraph_t g);
void graph_free(cudaGraph_t g);
/* Adds a node with params p (taken over on success). */
cudaError_t graph_node_add(cudaGraphNode_t *out, cudaGraph_t g, const cudaGraphNode_t *deps,
                           size_t ndeps, node_params *p);
/* keep_origin: the clone's nodes remember their originals (FindInClone). */
cudaError_t graph_clone(cudaGraph_t src, cudaGraph_t *out, int keep_origin);
/* Node indices of g in a topological order; -1 on a cycle or no memory. */
int graph_topo_order(cudaGraph_t g, size_t *order);

/* ---- rgpu_cudart_graph_cond.c ---------------------------------------------- */

/* A conditional node for graph g from the API's parameters: its bodies are
 * made (empty graphs) but not yet handed out; cond_publish points the
 * caller's phGraph_out at them once the node is in its graph. */
cudaError_t node_params_conditional(node_params *p, cudaGraph_t g, const struct cudaConditionalNodeParams *cp);
void cond_publish(const node_params *p, struct cudaConditionalNodeParams *cp);
/* Deep copy / free of the bodies (node_params_copy, node_params_free). */
cudaError_t cond_bodies_copy(node_params *dst, const node_params *src);
void cond_bodies_free(node_params *p);
/* Forgets the handles created on g (graph_free). */
void cond_graph_forget(cudaGraph_t g);
/* Whether a node may stand in a body (CUDA's list, less what rgpu cannot
 * run there): cudaSuccess or the error instantiation returns. */
cudaError_t cond_body_node_ok(const node_params *p);

/* ---- rgpu_cudart_graph_capture.c ------------------------------------------ */

/* Adds a node with params p (taken over) to the capture of stream `wire`:
 * 1 and *out when the stream captures (p consumed either way), 0 when it
 * does not (p untouched). */
int rgpu_rt_capture_node(uint64_t wire, node_params *p, cudaError_t *out);

/* ---- rgpu_cudart_graph_exec.c ------------------------------------------- */

/* Replaces an instantiated graph's node parameters with np (same node
 * type), as cudaGraphExec*NodeSetParams do: for the driver API's kernel
 * nodes.  np is taken over whatever the result. */
cudaError_t rgpu_rt_graph_exec_set_node(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                        node_params *np);

#endif
