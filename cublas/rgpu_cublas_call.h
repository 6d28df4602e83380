/* The client half of a generated cuBLAS call (rgpu_cublas_calls.c, made by
 * cublas/gen_cublas_calls.py): each stub checks its arguments, encodes them
 * (proto/rgpu_lib_args.h) and hands them here, which sends one LIB_CALL.
 *
 * A call without a host-mode result is queued without a reply: it costs no
 * round trip, and a failure on the server comes back as a deferred error
 * (the next synchronizing call reports it), as with a kernel launch.  A
 * call whose result lands in host memory waits for the reply, as cuBLAS
 * itself blocks for such a result. */
#ifndef RGPU_CUBLAS_CALL_H
#define RGPU_CUBLAS_CALL_H

#include <stddef.h>
#include <stdint.h>

#include "rgpu_cublas_internal.h"
#include "rgpu_wire.h"

/* One generated function: its name, LIB_CALL's hash of it, whether softgpu
 * computes it, and whether its refusal was logged. */
typedef struct {
  const char *name;
  uint32_t hash;
  int cpu;
  int logged;
} rgpu_cublas_fn;

#define RGPU_CUBLAS_MAX_OUT 4

/* One call being built: the encoded arguments and where host-mode results
 * go. */
typedef struct {
  rgpu_buf args;
  int cpu_ok; /* 0: this call's arguments are beyond softgpu (annotation cpuif) */
  int nout;
  struct {
    void *p;
    size_t n;
  } out[RGPU_CUBLAS_MAX_OUT];
} rgpu_cublas_call_args;

/* Starts a call: the live handle (NULL for a bad one, after counting the
 * call: the stub then returns CUBLAS_STATUS_NOT_INITIALIZED). */
struct cublasContext *rgpu_cublas_call_begin(cublasHandle_t handle, rgpu_cublas_call_args *a);
/* Ends a call that sends nothing, returning st. */
cublasStatus_t rgpu_cublas_call_fail(rgpu_cublas_call_args *a, cublasStatus_t st);
/* A failed check= of parameter number `param` (cuBLAS's numbering: the
 * handle is 0): prints cuBLAS's line for the routines it prints one for,
 * returns CUBLAS_STATUS_INVALID_VALUE. */
cublasStatus_t rgpu_cublas_call_illegal(rgpu_cublas_fn *f, rgpu_cublas_call_args *a, int param);
/* A host-mode result of n bytes that the reply fills at p. */
void rgpu_cublas_call_out(rgpu_cublas_call_args *a, void *p, size_t n);
/* Sends the call and returns its status (see above). */
cublasStatus_t rgpu_cublas_call_submit(struct cublasContext *h, rgpu_cublas_fn *f,
                                       rgpu_cublas_call_args *a);

#endif
