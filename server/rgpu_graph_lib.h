/* GRAPH_LIB_NODE (rgpu_graph_lib.c): library calls that are nodes of a
 * client's CUDA graph, captured by the server into graphs of its own on a
 * GPU.  The handler rgpu_h_graph_lib_node is declared in rgpu_dispatch.h. */
#ifndef RGPU_GRAPH_LIB_H
#define RGPU_GRAPH_LIB_H

#include "rgpu_worker_internal.h"

/* Forgets the captured calls of device dev (all and the state itself:
 * dev < 0); destroy = 1 destroys their graphs and capture streams (their
 * context is current), 0 only forgets them (the context is gone). */
void rgpu_graph_lib_drop_device(rgpu_worker *w, int dev, int destroy);

/* Forgets every captured call (their graphs destroyed; one in flight ends
 * first).  A captured call was checked against the session's memory when
 * it was captured and is launched unchecked afterwards, so a free, which
 * may leave its pointers dangling, makes each one be captured, and
 * checked, again at its next launch. */
void rgpu_graph_lib_forget(rgpu_worker *w);

#endif
