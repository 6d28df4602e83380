/* STREAM_MEMOP: stream memory operations (waits on and writes of a 32- or
 * 64-bit word of device memory, barriers, flushes) in stream order, as
 * cuStreamWaitValue32/64, cuStreamWriteValue32/64 and cuStreamBatchMemOp
 * queue them (proto/rgpu_messages.def; the client side is
 * driver/rgpu_drv_stream_memop.c).
 *
 * Every address must lie in one of the session's allocations, aligned for
 * its size: a wait that watches memory of no allocation would wait forever
 * on a GPU, and a write would land anywhere.  Each request is one
 * cuStreamBatchMemOp (the single-operation calls are its one-element
 * form). */
#include <string.h>

#include "rgpu_worker_internal.h"

#define D (&w->drv)
#define FAIL(status, ...) rgpu_worker_fail(w, (status), __VA_ARGS__)

#define MEMOP_MAX 256

CUresult rgpu_h_stream_memop(rgpu_req *rq, const rgpu_msg_stream_memop_req *q) {
  rgpu_worker *w = rq->w;
  uint32_t n = q->ops.count;
  if (!n || n > MEMOP_MAX || q->op_flags.count != n || q->addrs.count != n || q->values.count != n)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "stream memory operations: %u ops, %u flags, %u addresses, %u values",
                n, q->op_flags.count, q->addrs.count, q->values.count);
  CUstream s = NULL;
  CUresult r = rgpu_worker_stream_get(w, q->stream, &s);
  if (r) return r;
  CUstreamBatchMemOpParams p[MEMOP_MAX];
  memset(p, 0, n * sizeof *p);
  for (uint32_t i = 0; i < n; i++) {
    uint32_t op = rgpu_array_u32(&q->ops, i), fl = rgpu_array_u32(&q->op_flags, i);
    uint64_t addr = rgpu_array_u64(&q->addrs, i), v = rgpu_array_u64(&q->values, i);
    uint64_t size = op == CU_STREAM_MEM_OP_WAIT_VALUE_64 || op == CU_STREAM_MEM_OP_WRITE_VALUE_64 ? 8 : 4;
    switch (op) {
    case CU_STREAM_MEM_OP_WAIT_VALUE_32:
    case CU_STREAM_MEM_OP_WAIT_VALUE_64:
    case CU_STREAM_MEM_OP_WRITE_VALUE_32:
    case CU_STREAM_MEM_OP_WRITE_VALUE_64:
      if (addr % size || !rgpu_alloc_table_lookup(&w->allocs, addr, size))
        return FAIL(CUDA_ERROR_INVALID_VALUE,
                    "stream memory operation %u: %llu bytes at 0x%llx are not an aligned word of this "
                    "session's device memory", i, (unsigned long long)size, (unsigned long long)addr);
      if (size == 4 && v > UINT32_MAX)
        return FAIL(CUDA_ERROR_INVALID_VALUE, "stream memory operation %u: a 32-bit value of 0x%llx", i,
                    (unsigned long long)v);
      break;
    case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
    case CU_STREAM_MEM_OP_BARRIER:
      if (addr || v) return FAIL(CUDA_ERROR_INVALID_VALUE, "stream memory operation %u: a barrier with an address", i);
      break;
    default: return FAIL(CUDA_ERROR_INVALID_VALUE, "stream memory operation %u: unknown kind %u", i, op);
    }
    p[i].operation = (CUstreamBatchMemOpType)op;
    if (op == CU_STREAM_MEM_OP_WAIT_VALUE_32 || op == CU_STREAM_MEM_OP_WAIT_VALUE_64) {
      p[i].waitValue.address = (CUdeviceptr)addr;
      if (size == 8) p[i].waitValue.value64 = v;
      else p[i].waitValue.value = (cuuint32_t)v;
      p[i].waitValue.flags = fl;
    } else if (op == CU_STREAM_MEM_OP_WRITE_VALUE_32 || op == CU_STREAM_MEM_OP_WRITE_VALUE_64) {
      p[i].writeValue.address = (CUdeviceptr)addr;
      if (size == 8) p[i].writeValue.value64 = v;
      else p[i].writeValue.value = (cuuint32_t)v;
      p[i].writeValue.flags = fl;
    } else if (op == CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES) {
      p[i].flushRemoteWrites.flags = fl;
    } else {
      p[i].memoryBarrier.flags = fl;
    }
  }
  if (!D->cuStreamBatchMemOp)
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "the server's driver has no stream memory operations");
  r = D->cuStreamBatchMemOp(s, n, p, q->flags);
  if (r != CUDA_SUCCESS)
    return FAIL(r, "cuStreamBatchMemOp (%u operations): %s", n, rgpu_driver_error_name(D, r));
  return CUDA_SUCCESS;
}
