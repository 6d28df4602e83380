/* Graph memory nodes (cudaGraphAddMemAllocNode, cudaGraphAddMemFreeNode,
 * and cudaMallocAsync / cudaFreeAsync inside a stream capture).
 *
 * CUDA gives a graph allocation a fixed address when its node is made, and
 * the memory exists from the node's execution to its free.  rgpu allocates
 * it once, when the node is made, and keeps it while anything refers to
 * it: every node that allocates it (the original, clones, and the flat
 * copies inside each instantiated graph) holds a reference, and so does
 * the program while it owns an allocation that a launch left allocated
 * (an alloc node without a free node in its graph); cudaFree or
 * cudaFreeAsync of it gives that reference back.  On the server both node
 * kinds are empty nodes: the memory is already there.  So the addresses,
 * the lifetimes a correct program relies on, and the results are CUDA's;
 * what differs is that the memory is held between launches (no
 * virtual-address reuse across graphs).  The last reference makes the
 * block free at the next safe point (graph and exec destruction, trim),
 * never under the graph locks. */
#include <stdlib.h>
#include <string.h>

#include "rgpu_cudart_alloc.h"
#include "rgpu_cudart_graph_internal.h"
#include "rgpu_log.h"
#include "rgpu_mutex.h"

typedef struct {
  uint64_t ptr, size;
  int dev;
  int refs;
  int user_owned; /* a launch left it allocated and the program has not freed it */
} gmem_rec;

static rgpu_mutex g_gm_lock = RGPU_MUTEX_INITIALIZER;
static gmem_rec *g_gm;
static size_t g_ngm, g_capgm;
typedef struct {
  uint64_t ptr;
  int dev;
} dead_block;
static dead_block *g_dead; /* blocks whose last reference went: freed at collect */
static size_t g_ndead, g_capdead;
static uint64_t g_used_high[RGPU_MAX_DEVICES];

static gmem_rec *find_locked(uint64_t ptr) {
  assert(rgpu_mutex_held(&g_gm_lock));
  for (size_t i = 0; i < g_ngm; i++)
    if (g_gm[i].ptr == ptr) return &g_gm[i];
  return NULL;
}

static uint64_t used_locked(int dev) {
  uint64_t s = 0;
  for (size_t i = 0; i < g_ngm; i++)
    if (g_gm[i].dev == dev) s += g_gm[i].size;
  return s;
}

static void drop_ref_locked(gmem_rec *r) {
  assert(rgpu_mutex_held(&g_gm_lock));
  if (--r->refs > 0) return;
  if (!RGPU_ARRAY_RESERVE(g_dead, g_capdead, g_ndead + 1, 16))
    g_dead[g_ndead++] = (dead_block){r->ptr, r->dev};
  /* else: out of memory for the list, the block stays allocated */
  *r = g_gm[--g_ngm];
}

int rgpu_rt_graphmem_is(uint64_t ptr) {
  if (!__atomic_load_n(&g_ngm, __ATOMIC_RELAXED)) return 0;
  rgpu_mutex_lock(&g_gm_lock);
  int is = find_locked(ptr) != NULL;
  rgpu_mutex_unlock(&g_gm_lock);
  return is;
}

void rgpu_rt_graphmem_ref(uint64_t ptr) {
  rgpu_mutex_lock(&g_gm_lock);
  gmem_rec *r = find_locked(ptr);
  if (r) r->refs++;
  rgpu_mutex_unlock(&g_gm_lock);
}

void rgpu_rt_graphmem_unref(uint64_t ptr) {
  rgpu_mutex_lock(&g_gm_lock);
  gmem_rec *r = find_locked(ptr);
  if (r) drop_ref_locked(r);
  rgpu_mutex_unlock(&g_gm_lock);
}

void rgpu_rt_graphmem_collect(void) {
  if (!__atomic_load_n(&g_ndead, __ATOMIC_RELAXED)) return;
  rgpu_client *c = rgpu_rt_client_peek();
  rgpu_mutex_lock(&g_gm_lock);
  dead_block *v = g_dead;
  size_t n = g_ndead;
  g_dead = NULL;
  g_ndead = g_capdead = 0;
  rgpu_mutex_unlock(&g_gm_lock);
  for (size_t i = 0; i < n && c; i++) {
    cudaError_t e = rgpu_rt_dev_free(c, (void *)(uintptr_t)v[i].ptr);
    if (e != cudaSuccess)
      RGPU_DEBUG("graph allocation 0x%llx on device %d: free said %d",
                 (unsigned long long)v[i].ptr, v[i].dev, (int)e);
  }
  free(v);
}

/* A new graph allocation of size bytes on dev, with the node's reference. */
static cudaError_t graphmem_new(rgpu_client *c, int dev, size_t size, uint64_t *out) {
  void *p = NULL;
  cudaError_t e = rgpu_rt_dev_alloc(c, dev, size, &p);
  if (e != cudaSuccess) return e;
  rgpu_mutex_lock(&g_gm_lock);
  int ok = !RGPU_ARRAY_RESERVE(g_gm, g_capgm, g_ngm + 1, 16);
  if (ok) {
    g_gm[g_ngm] = (gmem_rec){.ptr = (uint64_t)(uintptr_t)p, .size = size, .dev = dev, .refs = 1};
    __atomic_store_n(&g_ngm, g_ngm + 1, __ATOMIC_RELAXED);
    if (dev >= 0 && dev < RGPU_MAX_DEVICES) {
      uint64_t used = used_locked(dev);
      if (used > g_used_high[dev]) g_used_high[dev] = used;
    }
  }
  rgpu_mutex_unlock(&g_gm_lock);
  if (!ok) {
    rgpu_rt_dev_free(c, p);
    return cudaErrorMemoryAllocation;
  }
  *out = (uint64_t)(uintptr_t)p;
  return cudaSuccess;
}

static void alloc_params(node_params *p, uint64_t ptr, size_t size, int dev) {
  memset(p, 0, sizeof *p);
  p->type = cudaGraphNodeTypeMemAlloc;
  p->mem_ptr = ptr;
  p->mem_size = size;
  p->mem_dev = dev;
}

static void free_params(node_params *p, uint64_t ptr) {
  memset(p, 0, sizeof *p);
  p->type = cudaGraphNodeTypeMemFree;
  p->mem_ptr = ptr;
}

cudaError_t rgpu_rt_graphmem_capture_alloc(rgpu_client *c, uint64_t wire, int dev, size_t size,
                                           void **out) {
  uint64_t ptr;
  cudaError_t e = graphmem_new(c, dev, size, &ptr);
  if (e != cudaSuccess) return e;
  node_params p;
  alloc_params(&p, ptr, size, dev);
  cudaError_t ce = cudaSuccess;
  /* The node takes the allocation's reference over. */
  if (!rgpu_rt_capture_node(wire, &p, &ce)) ce = cudaErrorStreamCaptureUnsupported;
  if (ce != cudaSuccess) {
    rgpu_rt_graphmem_collect();
    return ce;
  }
  *out = (void *)(uintptr_t)ptr;
  return cudaSuccess;
}

cudaError_t rgpu_rt_graphmem_capture_free(uint64_t wire, uint64_t ptr) {
  node_params p;
  free_params(&p, ptr);
  cudaError_t ce = cudaSuccess;
  if (!rgpu_rt_capture_node(wire, &p, &ce)) ce = cudaErrorStreamCaptureUnsupported;
  return ce;
}

int rgpu_rt_graphmem_user_free(uint64_t ptr) {
  if (!__atomic_load_n(&g_ngm, __ATOMIC_RELAXED)) return 0;
  rgpu_mutex_lock(&g_gm_lock);
  gmem_rec *r = find_locked(ptr);
  if (r && r->user_owned) {
    r->user_owned = 0;
    drop_ref_locked(r);
  }
  rgpu_mutex_unlock(&g_gm_lock);
  if (r) rgpu_rt_graphmem_collect();
  return r != NULL;
}

void rgpu_rt_graphmem_launched(uint64_t ptr) {
  rgpu_mutex_lock(&g_gm_lock);
  gmem_rec *r = find_locked(ptr);
  if (r && !r->user_owned) {
    r->user_owned = 1;
    r->refs++;
  }
  rgpu_mutex_unlock(&g_gm_lock);
}

void rgpu_rt_graphmem_forget_device(int dev) {
  rgpu_mutex_lock(&g_gm_lock);
  for (size_t i = 0; i < g_ngm;)
    if (g_gm[i].dev == dev)
      g_gm[i] = g_gm[--g_ngm];
    else
      i++;
  size_t k = 0;
  for (size_t i = 0; i < g_ndead; i++)
    if (g_dead[i].dev != dev) g_dead[k++] = g_dead[i];
  g_ndead = k;
  if (dev >= 0 && dev < RGPU_MAX_DEVICES) g_used_high[dev] = 0;
  rgpu_mutex_unlock(&g_gm_lock);
}

/* ---- the explicit API ------------------------------------------------------ */

RGPU_API cudaError_t cudaGraphAddMemAllocNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                              const cudaGraphNode_t *pDependencies,
                                              size_t numDependencies,
                                              struct cudaMemAllocNodeParams *nodeParams) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!pGraphNode || !valid_graph(graph) || !nodeParams || nodeParams->bytesize == 0 ||
      (numDependencies && !pDependencies))
    return rgpu_rt_ret(cudaErrorInvalidValue);
  const struct cudaMemPoolProps *pp = &nodeParams->poolProps;
  if (pp->allocType != cudaMemAllocationTypePinned || pp->location.type != cudaMemLocationTypeDevice ||
      pp->handleTypes != cudaMemHandleTypeNone)
    return rgpu_rt_ret(cudaErrorInvalidValue);
  int dev = pp->location.id;
  int count = 0;
  if ((e = rgpu_rt_device_count(c, &count)) != cudaSuccess) return rgpu_rt_ret(e);
  if (dev < 0 || dev >= count) return rgpu_rt_ret(cudaErrorInvalidDevice);
  uint64_t ptr;
  if ((e = graphmem_new(c, dev, nodeParams->bytesize, &ptr)) != cudaSuccess) return e;
  node_params p;
  alloc_params(&p, ptr, nodeParams->bytesize, dev);
  e = graph_node_add(pGraphNode, graph, pDependencies, numDependencies, &p);
  if (e != cudaSuccess) {
    node_params_free(&p); /* the reference goes, and with it the block */
    rgpu_rt_graphmem_collect();
    return rgpu_rt_ret(e);
  }
  nodeParams->dptr = (void *)(uintptr_t)ptr;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaGraphAddMemFreeNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                             const cudaGraphNode_t *pDependencies,
                                             size_t numDependencies, void *dptr) {
  rgpu_rt_count_call();
  if (!pGraphNode || !valid_graph(graph) || (numDependencies && !pDependencies))
    return rgpu_rt_ret(cudaErrorInvalidValue);
  /* Only memory a graph allocated can be freed by a graph. */
  if (!rgpu_rt_graphmem_is((uint64_t)(uintptr_t)dptr)) return rgpu_rt_ret(cudaErrorInvalidValue);
  node_params p;
  free_params(&p, (uint64_t)(uintptr_t)dptr);
  cudaError_t e = graph_node_add(pGraphNode, graph, pDependencies, numDependencies, &p);
  return e == cudaSuccess ? cudaSuccess : rgpu_rt_ret(e);
}

RGPU_API cudaError_t cudaGraphMemAllocNodeGetParams(cudaGraphNode_t node,
                                                    struct cudaMemAllocNodeParams *params_out) {
  rgpu_rt_count_call();
  if (!valid_node(node) || !params_out || node->p.type != cudaGraphNodeTypeMemAlloc)
    return rgpu_rt_ret(cudaErrorInvalidValue);
  memset(params_out, 0, sizeof *params_out);
  params_out->poolProps.allocType = cudaMemAllocationTypePinned;
  params_out->poolProps.location.type = cudaMemLocationTypeDevice;
  params_out->poolProps.location.id = node->p.mem_dev;
  params_out->bytesize = (size_t)node->p.mem_size;
  params_out->dptr = (void *)(uintptr_t)node->p.mem_ptr;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaGraphMemFreeNodeGetParams(cudaGraphNode_t node, void *dptr_out) {
  rgpu_rt_count_call();
  if (!valid_node(node) || !dptr_out || node->p.type != cudaGraphNodeTypeMemFree)
    return rgpu_rt_ret(cudaErrorInvalidValue);
  *(void **)dptr_out = (void *)(uintptr_t)node->p.mem_ptr;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaDeviceGraphMemTrim(int device) {
  rgpu_rt_count_call();
  (void)device;
  /* Nothing is cached past its last reference: hand back what is waiting. */
  rgpu_rt_graphmem_collect();
  return cudaSuccess;
}

RGPU_API cudaError_t cudaDeviceGetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr,
                                                    void *value) {
  rgpu_rt_count_call();
  if (!value) return rgpu_rt_ret(cudaErrorInvalidValue);
  if (device < 0 || device >= RGPU_MAX_DEVICES) return rgpu_rt_ret(cudaErrorInvalidDevice);
  rgpu_mutex_lock(&g_gm_lock);
  uint64_t used = used_locked(device), high = g_used_high[device];
  rgpu_mutex_unlock(&g_gm_lock);
  uint64_t v;
  switch (attr) {
  /* Held and reserved are the same here: no pool keeps memory around. */
  case cudaGraphMemAttrUsedMemCurrent:
  case cudaGraphMemAttrReservedMemCurrent: v = used; break;
  case cudaGraphMemAttrUsedMemHigh:
  case cudaGraphMemAttrReservedMemHigh: v = high; break;
  default: return rgpu_rt_ret(cudaErrorInvalidValue);
  }
  memcpy(value, &v, sizeof v);
  return cudaSuccess;
}

RGPU_API cudaError_t cudaDeviceSetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr,
                                                    void *value) {
  rgpu_rt_count_call();
  if (!value) return rgpu_rt_ret(cudaErrorInvalidValue);
  if (device < 0 || device >= RGPU_MAX_DEVICES) return rgpu_rt_ret(cudaErrorInvalidDevice);
  uint64_t v;
  memcpy(&v, value, sizeof v);
  /* Only the high watermarks can be set, and only to 0 (a reset). */
  if ((attr != cudaGraphMemAttrUsedMemHigh && attr != cudaGraphMemAttrReservedMemHigh) || v != 0)
    return rgpu_rt_ret(cudaErrorInvalidValue);
  rgpu_mutex_lock(&g_gm_lock);
  g_used_high[device] = used_locked(device);
  rgpu_mutex_unlock(&g_gm_lock);
  return cudaSuccess;
}
