/* softgpu's cuDNN backend engine: the operation graphs it computes on the
 * CPU, planned once from a decoded graph (rgpu_cudnn_graph.h) and run in a
 * host function on the request's stream.
 *
 * A graph is softgpu's when every operation is one of: convolution forward,
 * backward data, backward filter (2-d, float, symmetric padding, a dense
 * KCRS filter, groups from the channels), or pointwise (the arithmetic,
 * activation forward/backward and comparison modes of pointwise_eval), and
 * every tensor is float.  Virtual tensors (a convolution's output feeding
 * its bias-add and activation epilogue) live in host buffers for the run.
 * softgpu answers one engine, global index 0, no knobs, workspace 0. */
#ifndef RGPU_CUDNN_BACKEND_SOFT_H
#define RGPU_CUDNN_BACKEND_SOFT_H

#include <stddef.h>
#include <stdint.h>

#include "rgpu_cudnn_graph.h"

typedef struct rgpu_cudnn_soft_plan rgpu_cudnn_soft_plan;

/* Plans operation graph og of g.  Returns 0 and *out; or -1 with why (a
 * sentence naming what softgpu does not compute); -2 out of memory. */
int rgpu_cudnn_soft_plan_build(const rgpu_cudnn_wgraph *g, const rgpu_cudnn_wnode *og,
                               rgpu_cudnn_soft_plan **out, char *why, size_t why_len);
void rgpu_cudnn_soft_plan_free(rgpu_cudnn_soft_plan *p);

/* A run of plan p on the variant pack's n (unique id, host address) pairs,
 * which the caller has checked against the session.  The job copies what it
 * needs from p (a plan may be evicted while the job waits on its stream).
 * Returns 0 and *job; -1 with why (a tensor of the plan has no address); -2
 * out of memory. */
int rgpu_cudnn_soft_job_make(const rgpu_cudnn_soft_plan *p, const int64_t *uid,
                             const uint64_t *addr, uint32_t n, void **job, char *why,
                             size_t why_len);

/* Runs and frees a job: the host function launched on the stream. */
void rgpu_cudnn_soft_job_run(void *job);
void rgpu_cudnn_soft_job_free(void *job);

#endif
