/* The backend (graph) API's descriptors on the client: every
 * cudnnBackendDescriptor_t is an rgpu record holding the attributes the
 * program set, answered back by cudnnBackendGetAttribute without a message.
 * Only the descriptors whose answer lives on the server (engine heuristics,
 * execution plan) ever travel, serialized with the graph they reference. */
#ifndef RGPU_CUDNN_BACKEND_H
#define RGPU_CUDNN_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "rgpu_cudnn_internal.h"

/* One attribute as the program set it: cuDNN's attribute type, count and
 * the elements' bytes.  For CUDNN_TYPE_BACKEND_DESCRIPTOR the elements are
 * struct rgpu_cudnn_bdesc pointers, each holding a reference: cuDNN copies
 * a descriptor when it is set into another, so the program may destroy its
 * own right after; rgpu shares the (finalized, hence immutable) record. */
struct rgpu_cudnn_battr {
  int64_t name; /* cudnnBackendAttributeName_t */
  int type;     /* cudnnBackendAttributeType_t */
  int64_t count;
  void *data; /* count * rgpu_cudnn_battr_elem_size(type) bytes (NULL when 0) */
};

#define RGPU_CUDNN_BDESC_MAGIC 0x6442636bu /* "dBck" */
struct rgpu_cudnn_bdesc {
  uint32_t magic;
  int type;           /* cudnnBackendDescriptorType_t */
  int finalized;      /* cudnnBackendFinalize succeeded: no more sets */
  int user_destroyed; /* the program destroyed its handle; references live on */
  int refs;           /* the program's handle + each attribute naming it */
  int nattr, cap;
  struct rgpu_cudnn_battr *attr;
  /* A finalized execution plan: its serialized graph and that graph's
   * content hash, what cudnnBackendExecute sends (owned; NULL otherwise). */
  uint8_t *graph;
  size_t graph_len;
  uint64_t hash;
  /* A finalized plan's by-value tensors (CUDNN_ATTR_TENSOR_IS_BY_VALUE),
   * whose values travel with each execute (owned; NULL when none). */
  struct rgpu_cudnn_by_value {
    int64_t uid;
    uint64_t bytes;
  } *by_value;
  int n_by_value;
};

/* The bytes of one element of a cudnnBackendAttributeType_t, 0 for a value
 * outside the enum. */
size_t rgpu_cudnn_battr_elem_size(int type);

/* The live record behind a descriptor the program holds, or NULL. */
struct rgpu_cudnn_bdesc *rgpu_cudnn_bdesc_of(cudnnBackendDescriptor_t d);
/* The stored attribute name of d, or NULL. */
const struct rgpu_cudnn_battr *rgpu_cudnn_bdesc_find(const struct rgpu_cudnn_bdesc *d,
                                                      int64_t name);
/* Stores (replacing) an attribute, taking references on descriptor
 * elements; what the server's answers use to fill in records too. */
cudnnStatus_t rgpu_cudnn_bdesc_store(struct rgpu_cudnn_bdesc *d, int64_t name, int type,
                                     int64_t count, const void *elems);
/* A new record of a type (one reference, the caller's), or NULL. */
struct rgpu_cudnn_bdesc *rgpu_cudnn_bdesc_new(int type);
/* Drops one reference (the record and its references go at zero). */
void rgpu_cudnn_bdesc_unref(struct rgpu_cudnn_bdesc *d);

/* The lock every backend record is read and written under. */
void rgpu_cudnn_backend_lock(void);
void rgpu_cudnn_backend_unlock(void);

/* Finalize of the descriptors whose answer lives on the server (engine
 * heuristics, execution plan): defined by the server-facing file; called
 * with the backend lock held. */
cudnnStatus_t rgpu_cudnn_backend_finalize_remote(struct rgpu_cudnn_bdesc *d);
/* CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT of finalized operation graph
 * graph: the server's cuDNN knows it (CUDNN_BACKEND_ENGINE_COUNT, cached per
 * graph content).  *entered: a round trip was made (it counted the call).
 * Called with the backend lock held. */
/* cuDNN's answers about an engine or engine config the program made
 * itself (notes; a config's workspace and shared memory), stored on d
 * (CUDNN_BACKEND_INFO, cached per graph content).  *entered as for
 * rgpu_cudnn_backend_engine_count. */
cudnnStatus_t rgpu_cudnn_backend_info(struct rgpu_cudnn_bdesc *d, int *entered);
cudnnStatus_t rgpu_cudnn_backend_engine_count(struct rgpu_cudnn_bdesc *graph, int64_t *count,
                                              int *entered);

#endif
