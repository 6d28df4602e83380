/* The runtime's error rules as a small state machine: a sticky error (the
 * context is corrupt) wins over everything until reset; an asynchronous
 * error reported by the server waits for the next synchronizing call or
 * cudaGetLastError, and is reported once. */
#include <stdio.h>

#include "rgpu_cudart.h"
#include "rgpu_log.h"

/* ---- error state machine ----------------------------------------------- */

void rgpu_err_state_init(rgpu_err_state *s) {
  rgpu_mutex_init(&s->lock);
  s->sticky = cudaSuccess;
  s->pending = cudaSuccess;
  s->sticky_seen = 0;
}

void rgpu_err_state_async(rgpu_err_state *s, cudaError_t e) {
  if (e == cudaSuccess) return;
  rgpu_mutex_lock(&s->lock);
  if (rgpu_cudart_is_sticky(e)) {
    if (s->sticky == cudaSuccess) s->sticky = e;
  } else if (s->pending == cudaSuccess) {
    s->pending = e;
  }
  rgpu_mutex_unlock(&s->lock);
}

cudaError_t rgpu_err_state_sync(rgpu_err_state *s, cudaError_t result) {
  rgpu_mutex_lock(&s->lock);
  cudaError_t out = result;
  if (rgpu_cudart_is_sticky(result) && s->sticky == cudaSuccess) s->sticky = result;
  if (s->sticky != cudaSuccess) {
    out = s->sticky;
    s->sticky_seen = 1; /* the caller returns it and records it as last error */
  } else if (result == cudaSuccess && s->pending != cudaSuccess) {
    out = s->pending;
    s->pending = cudaSuccess;
  }
  rgpu_mutex_unlock(&s->lock);
  return out;
}

cudaError_t rgpu_err_state_poll(rgpu_err_state *s, int take) {
  rgpu_mutex_lock(&s->lock);
  cudaError_t out = cudaSuccess;
  if (s->pending != cudaSuccess) {
    out = s->pending;
    if (take) s->pending = cudaSuccess;
  } else if (s->sticky != cudaSuccess && !s->sticky_seen) {
    out = s->sticky;
    if (take) s->sticky_seen = 1;
  }
  rgpu_mutex_unlock(&s->lock);
  return out;
}

cudaError_t rgpu_err_state_sticky(rgpu_err_state *s) {
  rgpu_mutex_lock(&s->lock);
  cudaError_t e = s->sticky;
  if (e != cudaSuccess) s->sticky_seen = 1; /* the caller returns it */
  rgpu_mutex_unlock(&s->lock);
  return e;
}

void rgpu_err_state_reset(rgpu_err_state *s) {
  rgpu_mutex_lock(&s->lock);
  s->sticky = cudaSuccess;
  s->pending = cudaSuccess;
  s->sticky_seen = 0;
  rgpu_mutex_unlock(&s->lock);
}


/* ---- a module the server refused ---------------------------------------- */

void rgpu_rt_format_module_refused(char *buf, size_t len, const char *first_kernel,
                                   size_t nkernels, int code, const char *reason) {
  char what[256];
  if (!first_kernel) snprintf(what, sizeof what, "without kernels");
  else if (nkernels > 1)
    snprintf(what, sizeof what, "of kernel %s (and %zu more)", first_kernel, nkernels - 1);
  else snprintf(what, sizeof what, "of kernel %s", first_kernel);
  /* The reply's text names the driver call and code; without one (an
   * older server), the code is all there is. */
  if (reason && reason[0]) snprintf(buf, len, "the server refused the module %s: %s", what, reason);
  else snprintf(buf, len, "the server refused the module %s: CUresult %d", what, code);
}

void rgpu_rt_report_module_refused(const char *first_kernel, size_t nkernels, int code,
                                   const char *reason) {
  char line[1024];
  rgpu_rt_format_module_refused(line, sizeof line, first_kernel, nkernels, code, reason);
  /* Error level: the program's kernels will not run, whatever it does next,
   * and a program that does not check its launches prints wrong numbers. */
  RGPU_ERROR("%s", line);
}
