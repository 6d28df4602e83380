/* rgpu_graph_lib.c: library calls that are nodes of a client's CUDA graph
 * (LIB nodes), captured by the server into graphs of its own on a GPU. */
#ifndef RGPU_GRAPH_LIB_H
#define RGPU_GRAPH_LIB_H

#include "rgpu_dispatch.h"
#include "rgpu_worker_internal.h"

/* Forgets device dev's capture stream (all and the state itself: dev < 0);
 * destroy = 1 destroys the streams (their context is current), 0 only
 * forgets them (the context is gone). */
void rgpu_graph_lib_drop_device(rgpu_worker *w, int dev, int destroy);

/* Called on every free and module unload: advances w->graph_lib_epoch.
 * A library node was checked against the session's memory when it was
 * captured and is launched unchecked afterwards, so every instantiated
 * graph with library nodes captures them again, which checks them again,
 * before its next launch (rgpu_graph.c). */
void rgpu_graph_lib_invalidate(rgpu_worker *w);

/* The dispatch entry of a request that may be a library node of a graph
 * (a `graphnode` message), NULL for any other opcode. */
const rgpu_dispatch_entry *rgpu_graph_lib_entry(uint32_t opcode);

/* Captures the library request req (len bytes, its stream field 8 bytes
 * at stream_at) on the current device into a new graph *out, which the
 * caller destroys with rgpu_graph_lib_destroy_graph.  The handler checks
 * the call's arguments as for a plain call.  Returns CUDA_ERROR_NOT_SUPPORTED
 * (no message) where calls cannot be captured (softgpu, a driver without
 * stream capture, RGPU_GRAPH_LIB_PLAIN=1); else the call's status or the
 * capture's. */
CUresult rgpu_graph_lib_capture(rgpu_req *rq, uint32_t opcode, const uint8_t *req, size_t len,
                                size_t stream_at, CUgraph *out);
void rgpu_graph_lib_destroy_graph(rgpu_worker *w, CUgraph g);

/* Runs the library request as a plain call on the stream with wire id
 * stream_id (written into a copy of the request's stream field). */
CUresult rgpu_graph_lib_run_plain(rgpu_req *rq, uint32_t opcode, const uint8_t *req, size_t len,
                                  size_t stream_at, uint64_t stream_id);

#endif
