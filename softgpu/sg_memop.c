/* softgpu's stream memory operations (cuStreamWaitValue32/64,
 * cuStreamWriteValue32/64, cuStreamBatchMemOp): one stream op per call that
 * runs the operations in order when the stream reaches it.
 *
 * A write stores the value atomically; a wait polls the word (atomically,
 * so a kernel or copy on another stream that stores it is seen) until its
 * condition holds, sleeping between looks.  A wait whose memory is freed
 * meanwhile faults the context, as a GPU would meet an illegal address.
 * Barriers and flushes have nothing to order here: every operation is
 * done before the stream's next one starts. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sg_internal.h"

typedef struct {
  unsigned n;
  CUstreamBatchMemOpParams ops[];
} memop_batch;

static int is_wait(CUstreamBatchMemOpType t) {
  return t == CU_STREAM_MEM_OP_WAIT_VALUE_32 || t == CU_STREAM_MEM_OP_WAIT_VALUE_64;
}
static int is_write(CUstreamBatchMemOpType t) {
  return t == CU_STREAM_MEM_OP_WRITE_VALUE_32 || t == CU_STREAM_MEM_OP_WRITE_VALUE_64;
}
static int is_64(CUstreamBatchMemOpType t) {
  return t == CU_STREAM_MEM_OP_WAIT_VALUE_64 || t == CU_STREAM_MEM_OP_WRITE_VALUE_64;
}

/* Whether the word satisfies a wait (CUstreamWaitValue_flags). */
static int wait_done(uint64_t now, uint64_t want, unsigned flags, int wide) {
  switch (flags & ~(unsigned)CU_STREAM_WAIT_VALUE_FLUSH) {
  case CU_STREAM_WAIT_VALUE_GEQ:
    return wide ? (int64_t)(now - want) >= 0 : (int32_t)((uint32_t)now - (uint32_t)want) >= 0;
  case CU_STREAM_WAIT_VALUE_EQ: return now == want;
  case CU_STREAM_WAIT_VALUE_AND: return (now & want) != 0;
  case CU_STREAM_WAIT_VALUE_NOR: return wide ? ~(now | want) != 0 : (uint32_t)~(now | want) != 0;
  default: return 1;
  }
}

/* The word at addr (4 or 8 bytes), read or written under the memory lock;
 * -1 when it is no longer device memory. */
static int word_access(uint64_t addr, int wide, int write, uint64_t *v) {
  sg_mem_use_begin();
  void *host = NULL;
  int rc = sg_mem_check(addr, wide ? 8 : 4, write, &host) == CUDA_SUCCESS ? 0 : -1;
  if (rc == 0) {
    if (wide) {
      if (write) __atomic_store_n((uint64_t *)host, *v, __ATOMIC_SEQ_CST);
      else *v = __atomic_load_n((uint64_t *)host, __ATOMIC_SEQ_CST);
    } else {
      if (write) __atomic_store_n((uint32_t *)host, (uint32_t)*v, __ATOMIC_SEQ_CST);
      else *v = __atomic_load_n((uint32_t *)host, __ATOMIC_SEQ_CST);
    }
  }
  sg_mem_use_end();
  return rc;
}

static void batch_run(sg_ctx *c, void *arg) {
  memop_batch *b = arg;
  for (unsigned i = 0; i < b->n; i++) {
    const CUstreamBatchMemOpParams *p = &b->ops[i];
    int wide = is_64(p->operation);
    if (is_write(p->operation)) {
      uint64_t v = wide ? p->writeValue.value64 : p->writeValue.value;
      if (word_access(p->writeValue.address, wide, 1, &v)) goto fault;
    } else if (is_wait(p->operation)) {
      uint64_t want = wide ? p->waitValue.value64 : p->waitValue.value, now = 0;
      for (unsigned spin = 0;; spin++) {
        if (word_access(p->waitValue.address, wide, 0, &now)) goto fault;
        if (wait_done(now, want, p->waitValue.flags, wide)) break;
        if (atomic_load(&c->sticky)) return; /* the context faulted meanwhile */
        struct timespec ts = {0, spin < 100 ? 2000 : 50000};
        nanosleep(&ts, NULL);
      }
    }
  }
  return;
fault:
  RGPU_WARN("a stream memory operation found its word freed: the context is now unusable until reset");
  sg_ctx_set_sticky(c, CUDA_ERROR_ILLEGAL_ADDRESS);
}

SG_EXPORT CUresult CUDAAPI cuStreamBatchMemOp_v2(CUstream stream, unsigned int count,
                                                 CUstreamBatchMemOpParams *paramArray, unsigned int flags) {
  if (!count || !paramArray || flags || count > 256) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < count; i++) {
    const CUstreamBatchMemOpParams *p = &paramArray[i];
    if (is_wait(p->operation) || is_write(p->operation)) {
      int wide = is_64(p->operation);
      CUdeviceptr a = is_wait(p->operation) ? p->waitValue.address : p->writeValue.address;
      unsigned fl = is_wait(p->operation) ? p->waitValue.flags : p->writeValue.flags;
      if (a % (wide ? 8 : 4) || sg_mem_check(a, wide ? 8 : 4, is_write(p->operation), NULL))
        return CUDA_ERROR_INVALID_VALUE;
      if (is_wait(p->operation) && (fl & ~(unsigned)CU_STREAM_WAIT_VALUE_FLUSH) > CU_STREAM_WAIT_VALUE_NOR)
        return CUDA_ERROR_INVALID_VALUE;
      if (is_write(p->operation) && (fl & ~(unsigned)CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER))
        return CUDA_ERROR_INVALID_VALUE;
    } else if (p->operation != CU_STREAM_MEM_OP_BARRIER && p->operation != CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  sg_stream *s;
  CUresult r = sg_stream_resolve(stream, &s);
  if (r) return r;
  memop_batch *b = malloc(sizeof *b + count * sizeof *b->ops);
  if (!b) return CUDA_ERROR_OUT_OF_MEMORY;
  b->n = count;
  memcpy(b->ops, paramArray, count * sizeof *b->ops);
  sg_op *op = sg_op_new(SG_OP_FUNC);
  if (!op) {
    free(b);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  op->u.func.run = batch_run;
  op->u.func.free = free;
  op->u.func.arg = b;
  return sg_submit(s, op, 0);
}

static CUresult one(CUstream stream, CUstreamBatchMemOpType t, CUdeviceptr addr, uint64_t value, unsigned flags) {
  CUstreamBatchMemOpParams p;
  memset(&p, 0, sizeof p);
  p.operation = t;
  if (is_wait(t)) {
    p.waitValue.address = addr;
    if (is_64(t)) p.waitValue.value64 = value;
    else p.waitValue.value = (cuuint32_t)value;
    p.waitValue.flags = flags;
  } else {
    p.writeValue.address = addr;
    if (is_64(t)) p.writeValue.value64 = value;
    else p.writeValue.value = (cuuint32_t)value;
    p.writeValue.flags = flags;
  }
  return cuStreamBatchMemOp_v2(stream, 1, &p, 0);
}

SG_EXPORT CUresult CUDAAPI cuStreamWaitValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                                  unsigned int flags) {
  return one(stream, CU_STREAM_MEM_OP_WAIT_VALUE_32, addr, value, flags);
}
SG_EXPORT CUresult CUDAAPI cuStreamWaitValue64_v2(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                                  unsigned int flags) {
  return one(stream, CU_STREAM_MEM_OP_WAIT_VALUE_64, addr, value, flags);
}
SG_EXPORT CUresult CUDAAPI cuStreamWriteValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                                   unsigned int flags) {
  return one(stream, CU_STREAM_MEM_OP_WRITE_VALUE_32, addr, value, flags);
}
SG_EXPORT CUresult CUDAAPI cuStreamWriteValue64_v2(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                                   unsigned int flags) {
  return one(stream, CU_STREAM_MEM_OP_WRITE_VALUE_64, addr, value, flags);
}
