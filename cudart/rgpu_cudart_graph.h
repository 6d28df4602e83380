/* What the stream-capture code (rgpu_cudart_graph_capture.c) tells the
 * synchronize, query and allocation paths.  Operations themselves reach
 * capture through rgpu_rt_submit (rgpu_cudart_op.h).  Every check costs one
 * relaxed atomic load while nothing is capturing. */
#ifndef RGPU_CUDART_GRAPH_H
#define RGPU_CUDART_GRAPH_H

#include "rgpu_cudart.h"

/* Whether the stream (wire id) is capturing now. */
int rgpu_rt_graph_is_capturing(uint64_t wire);
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
