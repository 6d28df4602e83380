/* What the cuBLAS facade's sources share: the handle record and the entry
 * hooks.  Everything here is compiled into rgpu's libcudart.so.13 (which
 * holds the session); libcublas.so.13 only forwards to rgpu_cublas_<name>. */
#ifndef RGPU_CUBLAS_INTERNAL_H
#define RGPU_CUBLAS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "rgpu_cublas_protos.h"
#include "rgpu_cudart.h"

#define RGPU_CUBLAS __attribute__((visibility("default")))

/* A cublasHandle_t is a pointer to this record, named by the client: the
 * server keeps no per-handle state (each computing call carries the modes,
 * the stream and the workspace), so creating and destroying one costs no
 * round trip.  cublas_api.h leaves struct cublasContext opaque; rgpu gives
 * it this body. */
#define RGPU_CUBLAS_MAGIC 0x63624c48u /* "cbLH": tells a live handle from garbage */
struct cublasContext {
  uint32_t magic;
  int device;            /* the current device at cublasCreate (as with cuBLAS) */
  uint64_t id;           /* client-chosen, for the server's logs and later per-handle state */
  cudaStream_t stream;   /* cublasSetStream: resolved when a call is issued */
  cublasMath_t math_mode;
  cublasPointerMode_t pointer_mode;
  cublasAtomicsMode_t atomics_mode;
  void *workspace;       /* cublasSetWorkspace: NULL = the library's own */
  size_t workspace_size;
};

/* A live handle, or NULL (a NULL or destroyed handle). */
/* A local cuBLAS reports a bad argument of its classic routines itself,
 * LAPACK's xerbla style, on stdout: " ** On entry to SGEMM  parameter
 * number 8 had an illegal value" (measured on the H200; the handle is not
 * counted).  The facade checks the arguments on the client, so it prints
 * the same line where the routine's name is known: api is the facade's
 * entry ("cublasSgemm_v2"); for the others nothing is printed. */
void rgpu_cublas_report_illegal(const char *api, int param);

static inline struct cublasContext *rgpu_cublas_handle(cublasHandle_t h) {
  return h && h->magic == RGPU_CUBLAS_MAGIC ? h : NULL;
}

/* Enters a call that goes to the server: the session (connecting on first
 * use) and the handle's stream as the wire id and its device.  A call that
 * waits for a result (capturable 0) on a capturing stream is refused (it
 * would synchronize inside the capture), logged once per *logged flag with
 * the call's name; the others are captured as graph nodes by
 * rgpu_rt_submit.  Returns CUBLAS_STATUS_SUCCESS or the status the call
 * returns. */
cublasStatus_t rgpu_cublas_enter(struct cublasContext *h, const char *name, int capturable,
                                 int *logged, rgpu_client **c, uint64_t *stream, int *device);

#endif
