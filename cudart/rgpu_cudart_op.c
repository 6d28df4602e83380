/* rgpu_rt_submit and the wire side of every operation (rgpu_cudart_op.h).
 *
 * Submit asks the capture code first (a capturing stream turns the op into
 * a graph node); everything else is sent here, one sender per kind, through
 * the typed calls generated from the message spec (rgpu_calls.h), with
 * exactly the frames the entry points sent before the op value existed.
 *
 * Copies are cut into frames of at most the chunk size.  Host-to-device
 * chunks are queued or written before the call returns (the program may
 * reuse its buffer at once, as with pageable memory on a local GPU) and
 * need no reply; device-to-host chunks are all requested first and then
 * read back in order straight into the destination, so a large copy costs
 * one round trip, not one per chunk. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_cudart.h"
#include "rgpu_cudart_op.h"
#include "rgpu_calls.h"
#include "rgpu_client_bulk.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"

struct cudaMemcpy3DParms rgpu_rt_copy_1d(void *dst, const void *src, size_t n,
                                         enum cudaMemcpyKind kind) {
  struct cudaMemcpy3DParms cp;
  memset(&cp, 0, sizeof cp);
  cp.srcPtr = (struct cudaPitchedPtr){(void *)src, n, n, 1};
  cp.dstPtr = (struct cudaPitchedPtr){dst, n, n, 1};
  cp.extent = (struct cudaExtent){n, 1, 1};
  cp.kind = kind;
  return cp;
}

/* ---- copy: the copy engine --------------------------------------------- */

/* From this size on, a synchronous cudaMemcpy from page-locked memory
 * waits for the server to confirm its last chunk, and in exchange the
 * client keeps no copy of its bytes for a resume (see copy_htod).  The
 * round trip is well under 1 % of such a copy's time on any link. */
#define RGPU_RT_PINNED_WAIT_BYTES (16u << 20)

/* Below this round trip (the client's fastest reply so far), such a copy
 * goes a chunk at a time (copy_htod): a server on the same host.  A round
 * trip per chunk costs its share of a chunk's time, about 3 % on loopback
 * (30 us against 1 ms); on a 10 Gbit/s LAN with a 300 us round trip it
 * would cost 9 %, against a gain measured only on loopback. */
#define RGPU_RT_CHUNK_WAIT_RTT_NS (100u * 1000u)

/* pinned: the source is page-locked memory.  Of an asynchronous copy, the
 * program may not change it before it has seen the copy complete (a
 * synchronization, whose reply confirms the copy's frames): the resend
 * buffer keeps a reference to it instead of a copy of it.  A synchronous
 * copy from it CUDA makes synchronous with the host: large ones wait for
 * the server's confirmation of their last chunk and are kept by reference
 * likewise
 * (a copy into the resend buffer per chunk took a CPU's worth of memory
 * bandwidth and made rgpu's default mode slower than RGPU_SYNC_EVERY_CALL
 * for pinned 256 MiB uploads, issue 14). */
static cudaError_t copy_htod(rgpu_client *c, uint64_t dst, const uint8_t *src, size_t n,
                             uint64_t stream, int device, int pinned, int async) {
  if (n >= RGPU_BULK_MIN_BYTES) {
    /* quic://: the bytes on this thread's own stream (rgpu_client_bulk.h). */
    size_t done = 0;
    int brc = rgpu_client_bulk_htod(c, device, dst, stream, src, n, &done);
    if (brc) return rgpu_rt_sync_ret(c, brc);
    if (done == n && !async) {
      /* The fence the last inline chunk would carry (below), alone. */
      rgpu_msg_memcpy_htod_req fence = {.dst = dst, .stream = stream, .data = {NULL, 0}};
      rgpu_client_lock(c);
      int rc = rgpu_client_bind_device_locked(c, device);
      if (rc == 0) {
        rgpu_client_host_ordered_next_locked(c);
        rc = rgpu_send_memcpy_htod_locked(c, 0, &fence, NULL);
      }
      rgpu_client_unlock(c);
      return rc ? rgpu_rt_sync_ret(c, rc) : cudaSuccess;
    }
    if (done == n) return cudaSuccess;
  }
  size_t chunk = rgpu_client_chunk_bytes(c);
  int big_sync = pinned && !async && n >= RGPU_RT_PINNED_WAIT_BYTES;
  /* With the server on the same host, such a copy also waits for every
   * chunk's confirmation before the next chunk goes: over loopback tcp on
   * the H100 host the chunks one at a time moved 4.2-4.7 GB/s and streamed
   * 3.5-3.8 GB/s (8 of 9 pairs in three calls; the raw transport's bulk
   * 3.3-3.9 GB/s in the same call), a round trip of some 30 us per 4 MiB
   * chunk of about a millisecond (RGPU_RT_CHUNK_WAIT_RTT_NS).  Farther,
   * and over quic:// (measured neither way), the copy streams as before. */
  uint64_t floor_ns = big_sync ? rgpu_client_rtt_floor_ns(c) : 0;
  int near_stream = floor_ns && floor_ns < RGPU_RT_CHUNK_WAIT_RTT_NS &&
                    strcmp(rgpu_client_transport(c), "quic") != 0;
  int wait_each_asked = rgpu_client_sync_every_call(c);
  int wait_each = wait_each_asked || near_stream;
  int wait_last = !wait_each && big_sync;
  rgpu_client_lock(c);
  uint64_t first = rgpu_client_next_seq_locked(c);
  int rc = rgpu_client_bind_device_locked(c, device);
  uint32_t status = 0;
  /* With a wait for every chunk (RGPU_SYNC_EVERY_CALL) each is confirmed
   * before the next goes, and the call returns after the last: any
   * source stays as it is until then. */
  rgpu_client_set_stable_tails_locked(c, (pinned && async) || wait_last || wait_each);
  for (size_t off = 0; rc == 0 && off < n; off += chunk) {
    size_t len = n - off < chunk ? n - off : chunk;
    rgpu_msg_memcpy_htod_req q = {.dst = dst + off, .stream = stream, .data = {src + off, len}};
    uint64_t seq;
    int wait = wait_each || (wait_last && off + len == n);
    /* A synchronous copy returns before the server has run it: its last
     * chunk asks the server to order the device's other streams after it
     * (on a GPU the copy is done by the time the program's next call
     * reaches a non-blocking stream). */
    if (!async && off + len == n) rgpu_client_host_ordered_next_locked(c);
    rc = rgpu_send_memcpy_htod_locked(c, wait, &q, &seq);
    if (rc == 0 && wait) {
      /* A chunk at a time, the waits before the last chunk's are flow
       * control, not the copy's synchronization: not round trips. */
      rgpu_client_reply r = {.continued = near_stream && !wait_each_asked && off + len < n};
      rc = rgpu_client_wait_locked(c, seq, first, &r);
      if (rc == 0 && r.status) {
        status = r.status;
        break;
      }
    }
  }
  rgpu_client_set_stable_tails_locked(c, 0);
  rgpu_client_unlock(c);
  if (rc) return rgpu_rt_sync_ret(c, rc);
  if (status) return rgpu_rt_sync_ret(c, (int)status);
  return cudaSuccess;
}

/* cudaMemcpyAsync into pinned memory: every chunk is queued and its reply
 * is read into the destination whenever it arrives (during the next wait,
 * which drains what the synchronization covers), so it costs no round
 * trip.  Errors come back as asynchronous errors, as on a GPU. */
static cudaError_t copy_dtoh_background(rgpu_client *c, uint8_t *dst, uint64_t src, size_t n,
                                        uint64_t stream, int device) {
  size_t chunk = rgpu_client_chunk_bytes(c);
  rgpu_client_lock(c);
  int rc = rgpu_client_bind_device_locked(c, device);
  for (size_t off = 0; rc == 0 && off < n; off += chunk) {
    size_t len = n - off < chunk ? n - off : chunk;
    rgpu_msg_memcpy_dtoh_req q = {.src = src + off, .size = len, .stream = stream};
    rc = rgpu_send_memcpy_dtoh_background_locked(c, &q, dst + off, len, NULL);
  }
  rgpu_client_unlock(c);
  return rc ? rgpu_rt_sync_ret(c, rc) : cudaSuccess;
}

static cudaError_t copy_dtoh(rgpu_client *c, uint8_t *dst, uint64_t src, size_t n,
                             uint64_t stream, int device) {
  if (n >= RGPU_BULK_MIN_BYTES) {
    /* quic://: the reply on this thread's own stream (rgpu_client_bulk.h);
     * what a failed stream did not deliver is copied inline below. */
    size_t done = 0;
    uint64_t idle_next = 0;
    int brc = rgpu_client_bulk_dtoh(c, device, dst, src, n, stream, &done, &idle_next);
    if (idle_next) {
      /* The stream was idle when the copy ended (a later frame undoes it). */
      rgpu_client_lock(c);
      rgpu_rt_stream_idle_at_locked(c, stream, idle_next);
      rgpu_client_unlock(c);
    }
    if (brc || done == n) return rgpu_rt_sync_ret(c, brc);
    dst += done;
    src += done;
    n -= done;
  }
  size_t chunk = rgpu_client_chunk_bytes(c);
  size_t nchunks = (n + chunk - 1) / chunk;
  /* Bound the requests in flight so the replies not read yet never exceed
   * what the kernel buffers plus one chunk.  Replies of a copy on a stream
   * may come back in any order (the server completes them in the
   * background), so each slot reads straight into its own chunk. */
  enum { WINDOW = 16 };
  size_t window = rgpu_client_sync_every_call(c) ? 1 : WINDOW;
  uint64_t seqs[WINDOW];
  rgpu_client_reply rs[WINDOW];
  size_t chunk_of[WINDOW];
  memset(rs, 0, sizeof rs);
  for (size_t k = 0; k < WINDOW; k++) rs[k].done = 1; /* free slot */
  rgpu_client_lock(c);
  uint64_t first = rgpu_client_next_seq_locked(c);
  int rc = rgpu_client_bind_device_locked(c, device);
  uint32_t status = 0;
  char msg[256] = "";
  size_t sent = 0, done = 0, waits = 0;
  while (rc == 0 && done < nchunks) {
    for (size_t k = 0; rc == 0 && k < window && sent < nchunks; k++) {
      if (!rs[k].done) continue;
      size_t off = sent * chunk;
      size_t len = n - off < chunk ? n - off : chunk;
      rgpu_msg_memcpy_dtoh_req q = {.src = src + off, .size = len, .stream = stream};
      rc = rgpu_send_memcpy_dtoh_locked(c, 1, &q, &seqs[k]);
      rs[k] = (rgpu_client_reply){.dst = dst + off, .dst_cap = len};
      chunk_of[k] = sent;
      sent++;
    }
    if (rc) break;
    size_t k = 0;
    rs[0].continued = waits > 0;
    rc = rgpu_client_wait_any_locked(c, seqs, rs, window, first, &k);
    waits++;
    if (rc) break;
    size_t off = chunk_of[k] * chunk;
    size_t len = n - off < chunk ? n - off : chunk;
    if (rs[k].status && !status) {
      status = rs[k].status;
      memcpy(msg, rs[k].msg, sizeof msg);
    } else if (!rs[k].status && rs[k].dst_len != len && !status) {
      status = CUDA_ERROR_UNKNOWN;
      snprintf(msg, sizeof msg, "short reply: %zu of %zu bytes", rs[k].dst_len, len);
    }
    done++;
  }
  /* A synchronous copy also synchronizes with earlier work: background
   * copies it covers must have landed before it returns. */
  if (rc == 0) rc = rgpu_client_drain_locked(c, stream ? stream : RGPU_CLIENT_ALL_STREAMS, UINT64_MAX);
  rgpu_rt_idle_after_wait_locked(c, device, first, rc == 0 && status == 0);
  rgpu_rt_stream_idle_locked(c, stream, rc == 0 && status == 0);
  rgpu_client_unlock(c);
  if (status && msg[0]) RGPU_INFO("device-to-host copy failed: %s", msg);
  return rgpu_rt_sync_ret(c, rc ? rc : (int)status);
}

/* Async D2H may complete in the background only into page-locked memory:
 * into pageable memory CUDA's cudaMemcpyAsync is synchronous. */
static int is_pinned(uint64_t p, size_t n) {
  return rgpu_range_find(rgpu_rt_host_ranges(), p, n, NULL) == 0;
}

static cudaError_t send_copy(rgpu_client *c, const rgpu_rt_op *op) {
  uint64_t dst = (uint64_t)(uintptr_t)op->copy.cp.dstPtr.ptr;
  uint64_t src = (uint64_t)(uintptr_t)op->copy.cp.srcPtr.ptr;
  size_t n = op->copy.cp.extent.width;
  uint64_t stream = op->stream;
  int device = op->device;
  switch (op->copy.cp.kind) {
  case cudaMemcpyHostToHost:
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    return cudaSuccess;
  case cudaMemcpyHostToDevice:
    /* A transient source is copied like a pageable one (rgpu_cudart_op.h). */
    return copy_htod(c, dst, (const uint8_t *)(uintptr_t)src, n, stream, device,
                     !op->copy.src_transient && is_pinned(src, n), op->copy.async);
  case cudaMemcpyDeviceToHost:
    if (op->copy.async && !rgpu_client_sync_every_call(c) && is_pinned(dst, n))
      return copy_dtoh_background(c, (uint8_t *)(uintptr_t)dst, src, n, stream, device);
    return copy_dtoh(c, (uint8_t *)(uintptr_t)dst, src, n, stream, device);
  case cudaMemcpyDeviceToDevice: {
    rgpu_msg_memcpy_dtod_req m = {.dst = dst, .src = src, .size = n, .stream = stream};
    rgpu_status rc = rgpu_call_memcpy_dtod(c, device, RGPU_CALL_ASYNC, &m, NULL, NULL);
    return rc ? rgpu_rt_sync_ret(c, rc) : cudaSuccess;
  }
  default:
    return rgpu_rt_ret(cudaErrorInvalidMemcpyDirection);
  }
}

/* ---- memset ------------------------------------------------------------- */

/* One MEMSET for a contiguous area, else one per row.  Element sizes 2 and
 * 4 come from the driver API (cuMemsetD16/D32); width counts elements. */
static cudaError_t send_memset(rgpu_client *c, const rgpu_rt_op *op) {
  const struct cudaMemsetParams *ms = &op->fill;
  uint64_t d = (uint64_t)(uintptr_t)ms->dst;
  unsigned es = ms->elementSize == 2 || ms->elementSize == 4 ? ms->elementSize : 1;
  unsigned value = es == 4 ? ms->value : es == 2 ? (ms->value & 0xffff) : (ms->value & 0xff);
  int contiguous = ms->pitch == ms->width * es;
  size_t rows = contiguous ? 1 : ms->height;
  size_t len = contiguous ? ms->width * ms->height : ms->width;
  rgpu_status rc = 0;
  for (size_t i = 0; i < rows && rc == 0; i++) {
    rgpu_msg_memset_req m = {.dst = d + i * ms->pitch,
                             .value = value,
                             .elem_size = es,
                             .count = len,
                             .stream = op->stream};
    rc = rgpu_call_memset(c, op->device, RGPU_CALL_ASYNC, &m, NULL, NULL);
  }
  return rc ? rgpu_rt_sync_ret(c, rc) : cudaSuccess;
}

/* ---- launch, events (queued, no reply) ---------------------------------- */

static cudaError_t send_launch(rgpu_client *c, const rgpu_rt_op *op) {
  /* Fixed fields first (60 bytes), the packed parameters after them. */
  rgpu_msg_launch_req lr = {RGPU_RT_LAUNCH_FIXED_FIELDS(op),
                            .stream = op->stream,
                            .params = {op->launch.params, op->launch.plen}};
  rgpu_status rc;
  if (op->launch.cooperative || op->launch.cluster[0] > 1 || op->launch.cluster[1] > 1 ||
      op->launch.cluster[2] > 1) {
    /* The same fields and what LAUNCH cannot say (cuLaunchCooperativeKernel
     * or cuLaunchKernelEx on the server). */
    rgpu_msg_launch_ex_req xr = {.module_id = lr.module_id, .func_index = lr.func_index,
                                 .grid_x = lr.grid_x, .grid_y = lr.grid_y, .grid_z = lr.grid_z,
                                 .block_x = lr.block_x, .block_y = lr.block_y,
                                 .block_z = lr.block_z, .shared_bytes = lr.shared_bytes,
                                 .stream = lr.stream,
                                 .cooperative = op->launch.cooperative ? 1u : 0u,
                                 .cluster_x = op->launch.cluster[0],
                                 .cluster_y = op->launch.cluster[1],
                                 .cluster_z = op->launch.cluster[2],
                                 .params = lr.params};
    rc = rgpu_call_launch_ex(c, op->device, RGPU_CALL_ASYNC, &xr, NULL, NULL);
  } else {
    rc = rgpu_call_launch(c, op->device, RGPU_CALL_ASYNC, &lr, NULL, NULL);
  }
  return rc ? rgpu_rt_sync_ret(c, rc) : cudaSuccess;
}

static cudaError_t send_event_record(rgpu_client *c, const rgpu_rt_op *op) {
  rgpu_msg_event_record_req m = {.event = op->event.event->id, .stream = op->stream};
  rgpu_status rc = rgpu_call_event_record(c, op->device, RGPU_CALL_ASYNC, &m, NULL, NULL);
  return rc ? rgpu_rt_sync_ret(c, rc) : cudaSuccess;
}

static cudaError_t send_event_wait(rgpu_client *c, const rgpu_rt_op *op) {
  /* cudaEventWaitExternal matters only to a capture: the server's wait is
   * a plain one. */
  rgpu_msg_stream_wait_event_req m = {.stream = op->stream, .event = op->event.event->id, .flags = 0};
  rgpu_status rc = rgpu_call_stream_wait_event(c, op->device, RGPU_CALL_ASYNC, &m, NULL, NULL);
  return rc ? rgpu_rt_sync_ret(c, rc) : cudaSuccess;
}

/* The LIB_CALL request of a library op (a cuBLAS call), on stream. */
static rgpu_msg_lib_call_req lib_call_msg(const rgpu_rt_op *op, uint64_t stream) {
  return (rgpu_msg_lib_call_req){.lib = op->lib.lib,
                                 .fn = op->lib.fn,
                                 .handle = op->lib.handle,
                                 .stream = stream,
                                 .math_mode = op->lib.math_mode,
                                 .pointer_mode = op->lib.pointer_mode,
                                 .atomics_mode = op->lib.atomics_mode,
                                 .workspace = op->lib.workspace,
                                 .workspace_size = op->lib.workspace_size,
                                 .args = {op->lib.args, op->lib.args_len}};
}

/* A pre-encoded request (op->lib.opcode): a copy with this send's stream
 * in its stream field (a graph node keeps its bytes for every launch). */
static cudaError_t patched_request(const rgpu_rt_op *op, uint8_t **out) {
  if (op->lib.stream_at + 8 > op->lib.args_len) return cudaErrorInvalidValue;
  uint8_t *req = malloc(op->lib.args_len);
  if (!req) return cudaErrorMemoryAllocation;
  memcpy(req, op->lib.args, op->lib.args_len);
  uint64_t wire = op->stream;
  memcpy(req + op->lib.stream_at, &wire, 8); /* the codec writes u64s so */
  *out = req;
  return cudaSuccess;
}

cudaError_t rgpu_rt_lib_node_request(const rgpu_rt_op *op, rgpu_buf *out, size_t *stream_at,
                                     uint16_t *opcode) {
  if (op->lib.opcode) {
    /* Pre-encoded (cuDNN): the bytes as they are, the stream field zeroed. */
    if (op->lib.stream_at + 8 > op->lib.args_len) return cudaErrorInvalidValue;
    size_t at = op->lib.stream_at;
    rgpu_buf_put(out, op->lib.args, op->lib.args_len);
    if (out->err) return cudaErrorMemoryAllocation;
    memset(out->data + out->len - op->lib.args_len + at, 0, 8);
    *stream_at = at;
    *opcode = (uint16_t)op->lib.opcode;
    return cudaSuccess;
  }
  /* A LIB_CALL (cuBLAS): encoded here; its stream field's place is where
   * two encodings that differ only in the stream differ. */
  rgpu_msg_lib_call_req m = lib_call_msg(op, 0);
  rgpu_buf a, b;
  rgpu_buf_init(&a);
  rgpu_buf_init(&b);
  int ea = rgpu_msg_lib_call_req_encode(&a, &m);
  m.stream = ~(uint64_t)0;
  int eb = rgpu_msg_lib_call_req_encode(&b, &m);
  cudaError_t e = cudaErrorMemoryAllocation;
  if (!ea && !eb && a.len == b.len) {
    size_t at = 0;
    while (at < a.len && a.data[at] == b.data[at]) at++;
    /* The codec leaves a message's last bytes field (args) to the frame's
     * tail: here it follows the fields. */
    if (op->lib.args_len) rgpu_buf_put(&a, op->lib.args, op->lib.args_len);
    if (a.err) {
      e = cudaErrorMemoryAllocation;
    } else if (at + 8 <= a.len) {
      rgpu_buf_put(out, a.data, a.len);
      e = out->err ? cudaErrorMemoryAllocation : cudaSuccess;
      *stream_at = at;
      *opcode = RGPU_OP_LIB_CALL;
    } else {
      e = cudaErrorInvalidValue;
    }
  }
  rgpu_buf_free(&a);
  rgpu_buf_free(&b);
  return e;
}

cudaError_t rgpu_rt_submit_request(rgpu_client *c, int device, uint64_t wire, uint16_t opcode,
                                   size_t stream_at, rgpu_buf *req) {
  rgpu_rt_op op = {.kind = RGPU_RT_OP_LIB_CALL, .stream = wire, .device = device};
  op.lib.opcode = opcode;
  op.lib.stream_at = stream_at;
  op.lib.args = req->data;
  op.lib.args_len = req->len;
  cudaError_t e = rgpu_rt_submit(c, &op);
  rgpu_buf_free(req);
  return e;
}

cudaError_t rgpu_rt_lib_call_send(rgpu_client *c, const rgpu_rt_op *op) {
  if (op->lib.opcode) {
    uint8_t *req;
    cudaError_t e = patched_request(op, &req);
    if (e != cudaSuccess) return e;
    rgpu_status rc = rgpu_client_call(c, op->device, (uint16_t)op->lib.opcode, 1, req,
                                      op->lib.args_len, NULL, 0, NULL);
    free(req);
    return rc ? rgpu_rt_sync_ret(c, rc) : cudaSuccess;
  }
  rgpu_msg_lib_call_req m = lib_call_msg(op, op->stream);
  rgpu_status rc = rgpu_call_lib_call(c, op->device, RGPU_CALL_ASYNC, &m, NULL, NULL);
  return rc ? rgpu_rt_sync_ret(c, rc) : cudaSuccess;
}

/* ---- submit ------------------------------------------------------------- */

cudaError_t rgpu_rt_submit(rgpu_client *c, const rgpu_rt_op *op) {
  cudaError_t e;
  if (rgpu_rt_capture_take(op, &e)) return rgpu_rt_ret(e);
  /* The session of the server owning the op's device (issue 19). */
  c = rgpu_rt_route(c, op->device);
  if (op->kind == RGPU_RT_OP_LAUNCH || op->kind == RGPU_RT_OP_COPY ||
      op->kind == RGPU_RT_OP_MEMSET || op->kind == RGPU_RT_OP_LIB_CALL) {
    /* Managed memory the host owns goes to the device first. */
    if ((e = rgpu_rt_managed_to_device(c, op->stream)) != cudaSuccess) return rgpu_rt_ret(e);
  }
  /* A stream behind an unanswered host function takes only so much. */
  rgpu_rt_host_backpressure(c, op->stream, op->kind == RGPU_RT_OP_HOST_FUNC);
  switch (op->kind) {
  case RGPU_RT_OP_LAUNCH: return send_launch(c, op);
  case RGPU_RT_OP_COPY: return send_copy(c, op);
  case RGPU_RT_OP_MEMSET: return send_memset(c, op);
  case RGPU_RT_OP_EVENT_RECORD: return send_event_record(c, op);
  case RGPU_RT_OP_EVENT_WAIT: return send_event_wait(c, op);
  case RGPU_RT_OP_HOST_FUNC: return rgpu_rt_host_func_send(c, op);
  case RGPU_RT_OP_LIB_CALL: return rgpu_rt_ret(rgpu_rt_lib_call_send(c, op));
  default: return rgpu_rt_ret(cudaErrorInvalidValue);
  }
}
