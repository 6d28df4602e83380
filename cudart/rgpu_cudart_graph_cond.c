/* CUDA graphs: conditional nodes (IF, IF/ELSE, WHILE, SWITCH; CUDA 12.3+)
 * and their handles (rgpu_cudart_graph_internal.h lists the graph files).
 *
 * A handle is a value device code hands to cudaGraphSetConditional.  The
 * handle that works there is the server driver's, made per instantiation,
 * so a handle here is a value of rgpu's own that no kernel argument is
 * likely to equal (a tag, random bits, a counter): the server replaces it in
 * the kernel nodes' parameters of the graph it builds (proto/
 * rgpu_graph_nodes.def, COND).  Creating one needs no round trip.
 *
 * The node's bodies are graphs of the client model like any other: they are
 * filled with the graph API or by capture (cudaStreamBeginCaptureToGraph),
 * cloned with their node, and flattened after it at instantiation, each
 * behind a BODY node (rgpu_cudart_graph_exec.c). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "rgpu_cudart.h"
#include "rgpu_cudart_graph_internal.h"
#include "rgpu_log.h"

/* Handles made by cudaGraphConditionalHandleCreate, until their graph is
 * destroyed: what a conditional node of that graph copies. */
typedef struct {
  uint64_t value;
  cudaGraph_t graph;
  uint32_t dflt, flags;
} cond_handle;

static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;
static cond_handle *handles;
static size_t nhandles, caphandles;
static uint64_t handle_salt, handle_count;

#define COND_HANDLE_TAG 0xC0D1ull /* the top 16 bits of every handle */

static uint64_t handle_value_locked(void) {
  if (!handle_salt) {
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) r = (uint32_t)(uintptr_t)&r ^ 0x9e3779b9u;
    handle_salt = ((uint64_t)(r & 0xffffffu) | 1u) << 24;
  }
  handle_count = (handle_count + 1) & 0xffffffu;
  if (!handle_count) handle_count = 1;
  return COND_HANDLE_TAG << 48 | handle_salt | handle_count;
}

RGPU_API cudaError_t cudaGraphConditionalHandleCreate(cudaGraphConditionalHandle *pHandle_out,
                                                      cudaGraph_t graph, unsigned int defaultLaunchValue,
                                                      unsigned int flags) {
  rgpu_rt_count_call();
  if (!pHandle_out || !valid_graph(graph) || (flags & ~(unsigned)cudaGraphCondAssignDefault))
    return rgpu_rt_ret(cudaErrorInvalidValue);
  pthread_mutex_lock(&handles_lock);
  cudaError_t e = cudaSuccess;
  if (RGPU_ARRAY_RESERVE(handles, caphandles, nhandles + 1, 8)) {
    e = cudaErrorMemoryAllocation;
  } else {
    cond_handle *h = &handles[nhandles++];
    h->value = handle_value_locked();
    h->graph = graph;
    h->dflt = defaultLaunchValue;
    h->flags = flags;
    *pHandle_out = h->value;
  }
  pthread_mutex_unlock(&handles_lock);
  return rgpu_rt_ret(e);
}

void cond_graph_forget(cudaGraph_t g) {
  pthread_mutex_lock(&handles_lock);
  for (size_t i = 0; i < nhandles;)
    if (handles[i].graph == g) handles[i] = handles[--nhandles];
    else i++;
  pthread_mutex_unlock(&handles_lock);
}

/* ---- nodes ---------------------------------------------------------------- */

void cond_bodies_free(node_params *p) {
  for (uint32_t b = 0; p->bodies && b < p->cond_size; b++)
    if (p->bodies[b]) graph_free(p->bodies[b]);
  free(p->bodies);
  p->bodies = NULL;
}

static cudaError_t bodies_alloc(node_params *p) {
  p->bodies = calloc(p->cond_size, sizeof *p->bodies);
  return p->bodies ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cond_bodies_copy(node_params *dst, const node_params *src) {
  dst->bodies = NULL;
  if (!src->bodies) return cudaSuccess;
  cudaError_t e = bodies_alloc(dst);
  for (uint32_t b = 0; e == cudaSuccess && b < src->cond_size; b++) {
    e = graph_clone(src->bodies[b], &dst->bodies[b], 1);
    if (e == cudaSuccess) dst->bodies[b]->body = 1;
  }
  if (e != cudaSuccess) cond_bodies_free(dst);
  return e;
}

cudaError_t node_params_conditional(node_params *p, cudaGraph_t g, const struct cudaConditionalNodeParams *cp) {
  if (!valid_graph(g) || !cp->size) return cudaErrorInvalidValue;
  switch (cp->type) {
  case cudaGraphCondTypeIf:
    if (cp->size > 2) return cudaErrorInvalidValue;
    break;
  case cudaGraphCondTypeWhile:
    if (cp->size != 1) return cudaErrorInvalidValue;
    break;
  case cudaGraphCondTypeSwitch:
    if (cp->size > 65536) return cudaErrorInvalidValue;
    break;
  default: return cudaErrorInvalidValue;
  }
  /* CUDA: the handle was created on the graph that gets the node. */
  int found = 0;
  pthread_mutex_lock(&handles_lock);
  for (size_t i = 0; i < nhandles && !found; i++)
    if (handles[i].value == cp->handle && handles[i].graph == g) {
      found = 1;
      p->cond_default = handles[i].dflt;
      p->cond_flags = handles[i].flags;
    }
  pthread_mutex_unlock(&handles_lock);
  if (!found) return cudaErrorInvalidValue;
  p->type = cudaGraphNodeTypeConditional;
  p->op.device = rgpu_rt_current_device();
  p->cond_handle = cp->handle;
  p->cond_kind = (uint32_t)cp->type;
  p->cond_size = cp->size;
  cudaError_t e = bodies_alloc(p);
  for (uint32_t b = 0; e == cudaSuccess && b < p->cond_size; b++) {
    e = graph_new(&p->bodies[b]);
    if (e == cudaSuccess) p->bodies[b]->body = 1;
  }
  return e;
}

void cond_publish(const node_params *p, struct cudaConditionalNodeParams *cp) {
  /* CUDA's array, valid as long as the node: the node's own. */
  cp->phGraph_out = p->bodies;
}

cudaError_t cond_body_node_ok(const node_params *p) {
  switch (p->type) {
  case cudaGraphNodeTypeKernel:
  case cudaGraphNodeTypeEmpty:
  case cudaGraphNodeTypeMemset:
  case cudaGraphNodeTypeGraph:
  case cudaGraphNodeTypeConditional: return cudaSuccess;
  case cudaGraphNodeTypeMemcpy:
    if (p->op.copy.cp.kind == cudaMemcpyDeviceToDevice) return cudaSuccess;
    break;
  case cudaGraphNodeTypeHost:
    /* A library call captured into a body (a cuBLAS gemm) runs on the
     * server like a kernel. */
    if (node_params_is_lib(p)) return cudaSuccess;
    /* fall through */
  default: {
    static int logged;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      RGPU_WARN("cudaGraphInstantiate: a conditional node's body holds a node of type %d; CUDA "
                "allows kernels, empty nodes, memsets, copies, child graphs and conditionals there",
                (int)p->type);
    return cudaErrorInvalidValue;
  }
  }
  /* A host side in a body: its bytes would have to cross the link a number
   * of times only the GPU knows. */
  static int logged_copy;
  if (!__atomic_exchange_n(&logged_copy, 1, __ATOMIC_RELAXED))
    RGPU_WARN("cudaGraphInstantiate: a copy with host memory inside a conditional node's body is "
              "not supported (the remote GPU cannot reach this machine's memory); it returns "
              "cudaErrorNotSupported");
  return cudaErrorNotSupported;
}
