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
    struct {             /* conditional (sg_graph_cond.c) */
      uint64_t handle;   /* holds a reference on the handle */
      CUgraphConditionalNodeType type;
      unsigned size;
      sg_graph **bodies; /* owned, size of them; each body's owner is the node */
    } cond;
    sg_event *ev;        /* event record / wait */
  } u;
};

struct CUgraph_st {
  sg_gnode **nodes;
  int n;
  size_t cap;
  sg_gnode *owner;       /* the child-graph node embedding it, or NULL */
  sg_gnode **order;      /* exec graphs: topological order, set at instantiation */
  uint64_t *conds;       /* conditional handles created on this graph (a reference each) */
  int nconds;
  size_t capconds;
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
/* cuGraphAdd*Node's checks (graph, dependencies), then sg_graph_add. */
CUresult sg_graph_add_begin(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps, CUgraphNodeType t,
                            sg_gnode **n);
/* Removes n from its graph and frees it. */
void sg_gnode_free(sg_gnode *n);
/* Deep copy for child-graph nodes, clones and execs. */
CUresult sg_graph_clone(const sg_graph *src, sg_graph **out);
/* Packs a kernel node's parameters; on success k holds a module reference. */
CUresult sg_kern_from_launch(sg_kern *k, sg_function *f, const unsigned grid[3], const unsigned block[3],
                             unsigned shared, void *buf, size_t size);
/* Checks a memcpy description; its host/device sides must lie in live memory. */
CUresult sg_memcpy3d_check(const CUDA_MEMCPY3D *p);
/* Kahn's order of g and of every graph inside it (sets g->order). */
CUresult sg_graph_topo_sort(sg_graph *g);
/* The ops a launch of g (sorted) runs, appended to the chain *head..*tail. */
CUresult sg_graph_build_ops(const sg_graph *g, sg_op **head, sg_op **tail);

/* ---- conditional nodes (sg_graph_cond.c; sg_graph_lock held unless said) */

/* cuGraphAddNode of a CU_GRAPH_NODE_TYPE_CONDITIONAL node. */
CUresult sg_cond_node_add(CUgraphNode *out, sg_graph *g, const CUgraphNode *deps, size_t ndeps,
                          CUDA_CONDITIONAL_NODE_PARAMS *p);
/* A conditional node's parameters: released; deep-copied into m (clones). */
void sg_cond_node_release(sg_gnode *n);
CUresult sg_cond_node_copy(sg_gnode *m, const sg_gnode *n);
/* Drops the handles graph g created (sg_graph_free). */
void sg_cond_graph_release(sg_graph *g);
/* Instantiation: the node types a body may hold, recursively. */
CUresult sg_cond_check_bodies(const sg_graph *g);
/* The launch op of conditional node n, and the op that gives g's own
 * handles their default values at the start of each run of g (NULL: none
 * needed). */
CUresult sg_cond_build_op(const sg_gnode *n, sg_op **out);
CUresult sg_cond_defaults_op(const sg_graph *g, sg_op **out);

#endif
