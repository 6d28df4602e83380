/* rgpu_graph: instantiated graphs of a session (GRAPH_* requests).
 *
 * The client flattens its graphs, so a server graph is a plain list of
 * nodes with edges.  Each node is 12 u64 words on the wire:
 *
 *   type 1 kernel  : module_id, func_index, grid x y z, block x y z, shared bytes
 *                    (parameters: param_lens[i] bytes of `params`, packed at the
 *                    offsets MODULE_LOAD reported, exactly the kernel's extent)
 *   type 2 memcpy  : dir (1 host-to-device, 2 device-to-host, 3 device-to-device),
 *                    dst, src, width (bytes), height, depth, dst pitch, dst rows
 *                    per slice, src pitch, src rows per slice.  The host side of
 *                    1 and 2 is 0: its bytes travel contiguously (rows of `width`)
 *                    in the launch's tail / reply, in node order.
 *   type 3 memset  : dst, pitch, value, element size (1, 2, 4), width (elements),
 *                    height
 *   type 4 empty
 *   type 5 event record, 6 event wait : event id
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

#define RGPU_GRAPH_WORDS 12

enum {
  RGPU_GNODE_KERNEL = 1,
  RGPU_GNODE_MEMCPY = 2,
  RGPU_GNODE_MEMSET = 3,
  RGPU_GNODE_EMPTY = 4,
  RGPU_GNODE_EVENT_RECORD = 5,
  RGPU_GNODE_EVENT_WAIT = 6
};
enum { RGPU_GCOPY_H2D = 1, RGPU_GCOPY_D2H = 2, RGPU_GCOPY_D2D = 3 };

/* The GRAPH_* handlers (rgpu_h_graph_*) are declared in rgpu_dispatch.h. */

/* Forgets (destroy = 0) or destroys the graphs of device dev (all: dev < 0;
 * then the bookkeeping is freed too). */
void rgpu_graph_drop_device(rgpu_worker *w, int dev, int destroy);

#endif
