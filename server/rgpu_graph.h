/* rgpu_graph: instantiated graphs of a session (GRAPH_* requests).
 *
 * The client flattens its graphs, so a server graph is a plain list of
 * nodes with edges.  Each node is a type and 12 u64 words on the wire; the
 * layout is proto/rgpu_graph_nodes.def, and the generated codec
 * (rgpu_graph_nodes.h: rgpu_gnode_decode) is the only reader of the words.
 *
 * Every pointer, size, module, function and event is checked against the
 * session's tables at instantiation and again at each launch (the client
 * may free or unload in between).  With a driver that has the graph API the
 * server builds a real CUgraph (cuGraphAdd*Node, cuGraphInstantiate,
 * cuGraphLaunch); without one (softgpu before its graph support, the test
 * driver) a launch replays the nodes in topological order on the stream,
 * which gives the same results with less concurrency.  RGPU_GRAPH_REPLAY=1
 * forces replay. */
#ifndef RGPU_GRAPH_H
#define RGPU_GRAPH_H

#include "rgpu_worker_internal.h"

#include "rgpu_graph_nodes.h"

#define RGPU_GRAPH_WORDS RGPU_GNODE_WORDS

/* The GRAPH_* handlers (rgpu_h_graph_*) are declared in rgpu_dispatch.h. */

/* Forgets (destroy = 0) or destroys the graphs of device dev (all: dev < 0;
 * then the bookkeeping is freed too). */
void rgpu_graph_drop_device(rgpu_worker *w, int dev, int destroy);

#endif
