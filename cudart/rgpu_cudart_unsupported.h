/* The hook every generated unsupported-function stub calls.
 *
 * Implemented by the runtime facade (it records the per-thread last error,
 * as CUDA does for a failing call) and logs `name` once per process. Returns
 * cudaErrorNotSupported. */
#ifndef RGPU_CUDART_UNSUPPORTED_H
#define RGPU_CUDART_UNSUPPORTED_H

int rgpu_cudart_report_unsupported(const char *name, int *logged_once);

#endif
