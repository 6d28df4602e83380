/* softgpu graphs: structures shared by sg_graph.c (graphs, nodes,
 * instantiation, launch) and sg_graph_capture.c (stream capture).
 * Not installed. */
#ifndef SG_GRAPH_H
#define SG_GRAPH_H

#include "sg_internal.h"

typedef struct CUgraph_st sg_graph;
typedef struct CUgraphNode_st sg_gnode;
typedef struct CUgraphExec_st sg_gexec;

/* Every graph, node, exec and capture is protected by this one lock.  Lock
 * order: sg_graph_lock before sg_sched_lock, never the other way. */
extern pthread_mutex_t sg_graph_lock;

/* A kernel node's launch, resolved: the parameter buffer is packed as
 * cuLaunchKernel packs it, and kparams points into it, so GetParams can
 * hand back a kernelParams array that stays valid with the node. */
typedef struct {
  sg_function *fn;       /* holds a module reference while set */
  unsigned grid[3], block[3], shared;
  void *buf;
  size_t size;
  void **kparams;        /* one pointer per parameter, into buf */
  int nparams;
} sg_kern;

struct CUgraphNode_st {
  sg_graph *g;
  CUgraphNodeType type;
  int idx;               /* position in g->nodes (creation order) */
  sg_gnode **deps;
  int ndeps;
  size_t capdeps;
  sg_gnode *orig;        /* in a clone or exec: the node it was copied from */
  sg_gnode *upd;         /* in an exec: the node of the last cuGraphExecUpdate graph */
  int disabled;          /* in an exec: cuGraphNodeSetEnabled(0) */
  union {
    sg_kern k;
    struct {
      CUDA_MEMCPY3D p;
      sg_ctx *ctx;
    } cp;
    struct {
      CUDA_MEMSET_NODE_PARAMS p;
      sg_ctx *ctx;
    } ms;
    CUDA_HOST_NODE_PARAMS host;
    sg_graph *child;     /* owned: the node's own copy */
    sg_event *ev;        /* event record / wait */
  } u;
};

struct CUgraph_st {
  sg_gnode **nodes;
  int n;
  size_t cap;
  sg_gnode *owner;       /* the child-graph node embedding it, or NULL */
  sg_gnode **order;      /* exec graphs: topological order, set at instantiation */
};

struct CUgraphExec_st {
  sg_graph *g;           /* private deep copy of the instantiated graph */
  sg_ctx *ctx;
  cuuint64_t flags;
};

/* Graph helpers used by the capture code (sg_graph_lock held). */
CUresult sg_graph_new(sg_graph **out);
void sg_graph_free(sg_graph *g);
/* Adds a node of type t with deps; fills *out.  The caller sets u. */
CUresult sg_graph_add(sg_graph *g, CUgraphNodeType t, sg_gnode *const *deps, size_t ndeps, sg_gnode **out);
/* Removes n from its graph and frees it. */
void sg_gnode_free(sg_gnode *n);
/* Deep copy for child-graph nodes, clones and execs. */
CUresult sg_graph_clone(const sg_graph *src, sg_graph **out);
/* Packs a kernel node's parameters; on success k holds a module reference. */
CUresult sg_kern_from_launch(sg_kern *k, sg_function *f, const unsigned grid[3], const unsigned block[3],
                             unsigned shared, void *buf, size_t size);
/* Checks a memcpy description; its host/device sides must lie in live memory. */
CUresult sg_memcpy3d_check(const CUDA_MEMCPY3D *p);

#endif
