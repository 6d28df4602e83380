/* Hooks of the graph and stream-capture code (rgpu_cudart_graph.c) in the
 * launch, copy, memset, event and synchronize paths.
 *
 * Each take_* hook returns 1 when it consumed the operation (it became a
 * node of a capture, or of a kernel node being built) and then *out is
 * what the API call returns; 0 means "not capturing, proceed as usual".
 * All of them cost one relaxed atomic load while nothing is capturing. */
#ifndef RGPU_CUDART_GRAPH_H
#define RGPU_CUDART_GRAPH_H

#include "rgpu_cudart.h"

/* rgpu_rt_launch, after packing the parameters (l: the kernel's layout). */
int rgpu_rt_graph_take_launch(uint64_t wire, rgpu_rt_func *f, uint64_t module_id,
                              uint32_t func_index, dim3 grid, dim3 block, size_t shmem,
                              const rgpu_param_layout *l, const void *params, size_t len,
                              cudaError_t *out);
/* The host stub of a registered function (rgpu_cudart_register.c). */
const void *rgpu_rt_func_stub(const rgpu_rt_func *f);
/* rgpu_rt_memcpy (kind resolved; async = 0 for the synchronous API). */
int rgpu_rt_graph_take_memcpy(uint64_t dst, uint64_t src, size_t n, enum cudaMemcpyKind kind,
                              uint64_t wire, int async, cudaError_t *out);
/* memset and memset2D (byte values; height 1 for 1D). */
int rgpu_rt_graph_take_memset(uint64_t dst, size_t pitch, int value, size_t width, size_t height,
                              uint64_t wire, cudaError_t *out);
/* cudaEventRecord(WithFlags) and cudaStreamWaitEvent. */
int rgpu_rt_graph_take_event_record(cudaEvent_t event, uint64_t wire, unsigned flags,
                                    cudaError_t *out);
int rgpu_rt_graph_take_event_wait(uint64_t wire, cudaEvent_t event, unsigned flags,
                                  cudaError_t *out);
/* cudaLaunchHostFunc / cudaStreamAddCallback (stream_callback = 1: not
 * capturable) on a capturing stream: a host node. */
int rgpu_rt_graph_take_host_func(uint64_t wire, cudaHostFn_t fn, void *user, int stream_callback,
                                 cudaError_t *out);
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
