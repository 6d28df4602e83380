/* A cuDNN backend descriptor graph as the client serializes it (the form is
 * in proto/rgpu_messages.def, CUDNN_BACKEND_HEUR): decoded and bounds-checked
 * once, then read through these accessors by both the GPU path
 * (rgpu_handlers_cudnn_backend.c rebuilds it with NVIDIA's descriptors) and
 * softgpu's planner (rgpu_cudnn_backend_soft.c).  Nothing here allocates
 * after decoding; attribute data points into the request's bytes. */
#ifndef RGPU_CUDNN_GRAPH_H
#define RGPU_CUDNN_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#define RGPU_CUDNN_GRAPH_NODES_MAX 4096
#define RGPU_CUDNN_GRAPH_ATTRS_MAX 256

typedef struct {
  int64_t name;
  uint32_t type, count;
  const uint8_t *data; /* count elements of rgpu_cudnn_wire_size(type) bytes (unaligned) */
} rgpu_cudnn_wattr;

typedef struct {
  uint32_t type, nattr;
  rgpu_cudnn_wattr *attr;
} rgpu_cudnn_wnode;

typedef struct {
  uint32_t n;
  rgpu_cudnn_wnode *node;
  rgpu_cudnn_wattr *attrs; /* every node's, in one block */
} rgpu_cudnn_wgraph;

/* An element's bytes on the wire: a descriptor is its u32 index, handles
 * and device pointers do not travel (0), everything else is its C type; -1
 * for a type rgpu does not know. */
int rgpu_cudnn_wire_size(uint32_t type);

/* Decodes len bytes at p into g: bounded counts, known element types, every
 * descriptor reference to an earlier node, nothing left over.
 * Returns 0; -1 malformed (g is empty); -2 out of memory. */
int rgpu_cudnn_graph_decode(const uint8_t *p, size_t len, rgpu_cudnn_wgraph *g);
void rgpu_cudnn_graph_free(rgpu_cudnn_wgraph *g);

/* The attribute name of d, or NULL. */
const rgpu_cudnn_wattr *rgpu_cudnn_graph_attr(const rgpu_cudnn_wnode *d, int64_t name);

/* The node a single-descriptor attribute names when it has the type
 * expected, else NULL. */
const rgpu_cudnn_wnode *rgpu_cudnn_graph_ref(const rgpu_cudnn_wgraph *g,
                                             const rgpu_cudnn_wnode *d, int64_t name,
                                             uint32_t type);

/* Up to max int64 elements of an attribute: the count, or -1 (absent,
 * another type, or more than max). */
int rgpu_cudnn_graph_i64s(const rgpu_cudnn_wnode *d, int64_t name, int64_t *out, int max);

/* One enum element of attribute type type: 0, or -1. */
int rgpu_cudnn_graph_enum(const rgpu_cudnn_wnode *d, int64_t name, uint32_t type, int *out);

/* A float or double scalar, dflt when not set. */
double rgpu_cudnn_graph_scalar(const rgpu_cudnn_wnode *d, int64_t name, double dflt);

/* The non-virtual tensor with unique id uid, or NULL. */
const rgpu_cudnn_wnode *rgpu_cudnn_graph_tensor(const rgpu_cudnn_wgraph *g, int64_t uid);

/* The bytes a tensor node spans from its address (0: not computable). */
uint64_t rgpu_cudnn_graph_tensor_extent(const rgpu_cudnn_wnode *t);

/* A tensor passed by value (CUDNN_ATTR_TENSOR_IS_BY_VALUE): its variant
 * pack entry is a host pointer to the value, which the client sends along
 * (an attention scale, a dropout probability). */
int rgpu_cudnn_graph_tensor_by_value(const rgpu_cudnn_wnode *t);

/* FNV-1a 64 of the serialized bytes: the plan caches' key (with a full
 * compare). */
uint64_t rgpu_cudnn_graph_hash(const uint8_t *p, size_t n);

#endif
