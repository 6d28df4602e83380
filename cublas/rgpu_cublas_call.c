/* The client half of a generated cuBLAS call: see rgpu_cublas_call.h. */
#include <string.h>

#include "rgpu_calls.h"
#include "rgpu_cublas_call.h"
#include "rgpu_cudart_op.h"
#include "rgpu_lib_args.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"

struct cublasContext *rgpu_cublas_call_begin(cublasHandle_t handle, rgpu_cublas_call_args *a) {
  a->nout = 0;
  a->cpu_ok = 1;
  rgpu_buf_init(&a->args);
  struct cublasContext *h = rgpu_cublas_handle(handle);
  if (!h) rgpu_rt_count_call();
  return h;
}

cublasStatus_t rgpu_cublas_call_fail(rgpu_cublas_call_args *a, cublasStatus_t st) {
  rgpu_buf_free(&a->args);
  rgpu_rt_count_call();
  return st;
}

cublasStatus_t rgpu_cublas_call_illegal(rgpu_cublas_fn *f, rgpu_cublas_call_args *a, int param) {
  rgpu_cublas_report_illegal(f->name, param);
  return rgpu_cublas_call_fail(a, CUBLAS_STATUS_INVALID_VALUE);
}

void rgpu_cublas_call_out(rgpu_cublas_call_args *a, void *p, size_t n) {
  /* The generator gives no call more results than this (cuBLAS has one). */
  if (a->nout < RGPU_CUBLAS_MAX_OUT) a->out[a->nout++] = (__typeof__(a->out[0])){p, n};
}

/* softgpu computes only the calls server/rgpu_cublas_cpu.c implements; the
 * rest are refused here, at the call, as the contract wants
 * ("not supported on softgpu only"), rather than failing later. */
static int refused_on_softgpu(rgpu_client *c, rgpu_cublas_fn *f, const rgpu_cublas_call_args *a) {
  if (f->cpu && a->cpu_ok) return 0;
  const char *kind = rgpu_client_device_kind(c);
  if (!kind || strcmp(kind, "softgpu")) return 0;
  if (!__atomic_exchange_n(&f->logged, 1, __ATOMIC_RELAXED))
    RGPU_WARN("%s%s is not computed by softgpu (it runs on a GPU server); it returns "
              "CUBLAS_STATUS_NOT_SUPPORTED", f->name, f->cpu ? " with these types" : "");
  return 1;
}

cublasStatus_t rgpu_cublas_call_submit(struct cublasContext *h, rgpu_cublas_fn *f,
                                       rgpu_cublas_call_args *a) {
  if (a->args.err) return rgpu_cublas_call_fail(a, CUBLAS_STATUS_ALLOC_FAILED);
  rgpu_client *c;
  uint64_t stream;
  int device;
  cublasStatus_t st =
      rgpu_cublas_enter(h, f->name, a->nout == 0, &f->logged, &c, &stream, &device);
  if (st != CUBLAS_STATUS_SUCCESS) {
    rgpu_buf_free(&a->args);
    return st;
  }
  if (refused_on_softgpu(c, f, a)) {
    rgpu_buf_free(&a->args);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  rgpu_msg_lib_call_req m = {.lib = RGPU_LIB_CUBLAS,
                             .fn = f->hash,
                             .handle = h->id,
                             .stream = stream,
                             .math_mode = (uint32_t)h->math_mode,
                             .pointer_mode = (uint32_t)h->pointer_mode,
                             .atomics_mode = (uint32_t)h->atomics_mode,
                             .workspace = (uint64_t)(uintptr_t)h->workspace,
                             .workspace_size = h->workspace_size,
                             .args = {a->args.data, a->args.len}};
  rgpu_status rc;
  if (a->nout == 0) {
    /* Work on the stream like a kernel launch: rgpu_rt_submit captures it
     * on a capturing stream, else queues it (the stream's host-side bound
     * applies) without a reply. */
    rgpu_rt_op op = {.kind = RGPU_RT_OP_LIB_CALL, .stream = stream, .device = device};
    op.lib.lib = m.lib;
    op.lib.fn = m.fn;
    op.lib.handle = m.handle;
    op.lib.math_mode = m.math_mode;
    op.lib.pointer_mode = m.pointer_mode;
    op.lib.atomics_mode = m.atomics_mode;
    op.lib.workspace = m.workspace;
    op.lib.workspace_size = m.workspace_size;
    op.lib.args = a->args.data;
    op.lib.args_len = a->args.len;
    cudaError_t e = rgpu_rt_submit(c, &op);
    rgpu_buf_free(&a->args);
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
  }
  _Alignas(16) unsigned char reply[RGPU_LIB_REPLY_HEAD + RGPU_CUBLAS_MAX_OUT * RGPU_LIB_SCALAR_MAX];
  size_t want = RGPU_LIB_REPLY_HEAD;
  for (int i = 0; i < a->nout; i++) want += a->out[i].n;
  rgpu_client_reply r;
  memset(&r, 0, sizeof r);
  r.dst = reply;
  r.dst_cap = sizeof reply;
  /* Managed memory the host owns reaches the device first, as for work
   * that goes through rgpu_rt_submit. */
  if (rgpu_rt_managed_to_device(c, stream) != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  rc = rgpu_call_lib_call(c, device, 0, &m, NULL, &r);
  rgpu_buf_free(&a->args);
  if (rc) {
    rgpu_rt_sync_ret(c, rc);
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  uint32_t lib_status;
  memcpy(&lib_status, reply, sizeof lib_status);
  if (lib_status != CUBLAS_STATUS_SUCCESS) return (cublasStatus_t)lib_status;
  if (r.dst_len != want) {
    RGPU_ERROR("%s: the server's reply has %zu bytes, %zu expected", f->name, r.dst_len, want);
    return CUBLAS_STATUS_INTERNAL_ERROR;
  }
  size_t off = RGPU_LIB_REPLY_HEAD;
  for (int i = 0; i < a->nout; i++) {
    memcpy(a->out[i].p, reply + off, a->out[i].n);
    off += a->out[i].n;
  }
  return CUBLAS_STATUS_SUCCESS;
}
