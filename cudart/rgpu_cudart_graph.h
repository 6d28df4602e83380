/* What the stream-capture code (rgpu_cudart_graph_capture.c) tells the
 * synchronize, query and allocation paths.  Operations themselves reach
 * capture through rgpu_rt_submit (rgpu_cudart_op.h).  Every check costs one
 * relaxed atomic load while nothing is capturing. */
#ifndef RGPU_CUDART_GRAPH_H
#define RGPU_CUDART_GRAPH_H

#include "rgpu_cudart.h"

/* Whether the stream (wire id) is capturing now. */
int rgpu_rt_graph_is_capturing(uint64_t wire);

/* Library nodes made by an API call rather than a capture (the driver's
 * cuGraphAddBatchMemOpNode): a whole pre-encoded request of `opcode`
 * (a `graphnode` message) whose u64 stream field lies at byte stream_at,
 * sent or captured by the server at each launch like a captured call's.
 * add copies the request; get gives the node's request and, with scratch,
 * scratch_len bytes the node owns until its request changes or it goes
 * (what a GetParams call returns pointers into); set replaces the request.
 * cudaErrorInvalidValue for a node that is no such node of opcode. */
cudaError_t rgpu_rt_graph_add_request_node(cudaGraphNode_t *out, cudaGraph_t g,
                                           const cudaGraphNode_t *deps, size_t ndeps,
                                           uint16_t opcode, size_t stream_at, const void *req,
                                           size_t len);
cudaError_t rgpu_rt_graph_request_node_get(cudaGraphNode_t node, uint16_t opcode,
                                           const uint8_t **req, size_t *len, void **scratch,
                                           size_t scratch_len);
cudaError_t rgpu_rt_graph_request_node_set(cudaGraphNode_t node, uint16_t opcode, const void *req,
                                           size_t len);
/* The same node's request in executable graph hGraphExec replaced (the
 * server updates its graph: a new capture of the call on a GPU). */
cudaError_t rgpu_rt_graph_exec_set_request_node(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                uint16_t opcode, const void *req, size_t len);
/* Synchronizing a stream (or query): cudaErrorStreamCaptureUnsupported if
 * it is capturing or the call is prohibited by a capture (which is then
 * invalidated), else cudaSuccess. */
cudaError_t rgpu_rt_graph_check_sync(uint64_t wire);
/* cudaEventQuery/Synchronize of an event last recorded in a capture that
 * is still going: cudaErrorCapturedEvent. */
cudaError_t rgpu_rt_graph_check_event(cudaEvent_t event);
/* Any other potentially unsafe call (cudaMalloc, cudaDeviceSynchronize):
 * the same rule without a stream. */
cudaError_t rgpu_rt_graph_unsafe_call(void);

#endif
