/* The server half of a generated cuBLAS call (LIB_CALL with lib cuBLAS).
 *
 * rgpu_cublas_dispatch (rgpu_cublas_server.c) finds the call by its name
 * hash in rgpu_cublas_table (generated: build/server/gen/
 * rgpu_cublas_dispatch.c), prepares an rgpu_cublas_call and runs the
 * call's generated decoder, which reads the arguments, checks every device
 * address against the session's allocations (with its extent where the
 * annotations give one) and then either
 *   - on a GPU: calls NVIDIA's function (call->real) with the context's
 *     real handle (call->handle), set up with the request's stream, modes
 *     and workspace, and returns rgpu_cublas_done(); or
 *   - on softgpu: hands a malloc'd argument record to
 *     rgpu_cublas_cpu_<name> (rgpu_cublas_cpu.c), which queues the CPU work
 *     on the stream as a host function; or rgpu_cublas_no_cpu().
 * A result in host memory (pointer mode host) is written to
 * rgpu_cublas_result(): on a GPU a device slot copied back after the call,
 * on softgpu straight into the reply; the reply leaves once the stream
 * reaches the call.
 *
 * Everything here runs on the session thread. */
#ifndef RGPU_CUBLAS_SERVER_H
#define RGPU_CUBLAS_SERVER_H

#include <cublas_api.h>
#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include "rgpu_messages.h"
#include "rgpu_req.h"
#include "rgpu_wire.h"

typedef struct rgpu_cublas_call {
  rgpu_req *rq;
  rgpu_worker *w;
  const rgpu_msg_lib_call_req *q;
  const char *name;   /* the call's export name */
  CUstream stream;
  int device_mode;    /* the client's pointer mode is CUBLAS_POINTER_MODE_DEVICE */
  int softgpu;
  cublasHandle_t handle; /* GPU: the context's real handle, set up for this call */
  void *real;            /* GPU: NVIDIA's function */
  /* Host-mode results: the reply buffer (RGPU_LIB_REPLY_HEAD, then the
   * results) and, on a GPU, the device slot cuBLAS writes them to. */
  unsigned char *out;
  void *out_pinned;
  size_t out_len;
  CUdeviceptr out_dev;
} rgpu_cublas_call;

typedef CUresult (*rgpu_cublas_decoder)(rgpu_cublas_call *call, rgpu_reader *args);

typedef struct {
  uint32_t hash;
  const char *name;
  rgpu_cublas_decoder run;
} rgpu_cublas_entry;

extern const rgpu_cublas_entry rgpu_cublas_table[];
extern const size_t rgpu_cublas_table_len;

/* LIB_CALL for lib cuBLAS. */
CUresult rgpu_cublas_dispatch(rgpu_req *rq, const rgpu_msg_lib_call_req *q);

/* ---- for the generated decoders -------------------------------------------- */

/* A host-mode scalar (u32 length + bytes) copied into buf (at least
 * RGPU_LIB_SCALAR_MAX bytes); *n its length, checked by the decoder once
 * the type parameters are known.  Returns buf. */
void *rgpu_cublas_get_scalar(rgpu_reader *r, void *buf, size_t *n);
/* [ptr, ptr + bytes) must lie in one allocation of the session; bytes 0
 * checks nothing (an empty operand, never read). */
CUresult rgpu_cublas_check_dev(rgpu_cublas_call *call, const char *param, uint64_t ptr,
                               uint64_t bytes);
/* The next host-mode result of n bytes: where cuBLAS (or the CPU code)
 * writes it.  NULL when out of memory. */
void *rgpu_cublas_result(rgpu_cublas_call *call, size_t n);
/* After NVIDIA's function returned st: a failure is the call's error (a
 * deferred ASYNC_ERROR, or the status in the reply when the client waits);
 * on success host-mode results are copied back in stream order. */
CUresult rgpu_cublas_done(rgpu_cublas_call *call, cublasStatus_t st);
CUresult rgpu_cublas_malformed(rgpu_cublas_call *call);
CUresult rgpu_cublas_oom(rgpu_cublas_call *call);
/* softgpu and a call without a CPU implementation (the client refuses
 * those itself; this answers a client that does not). */
CUresult rgpu_cublas_no_cpu(rgpu_cublas_call *call);

/* ---- for the CPU implementations (rgpu_cublas_cpu.c) ------------------------ */

/* Queues run(args) on the call's stream as a host function; run frees
 * args.  On failure args is freed and the error returned. */
CUresult rgpu_cublas_cpu_enqueue(rgpu_cublas_call *call, void (*run)(void *), void *args);
CUresult rgpu_cublas_cpu_fail(rgpu_cublas_call *call, void *args, CUresult r, const char *why);

#endif
