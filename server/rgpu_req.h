/* rgpu_req: one request being handled, and the contract of its handler.
 *
 * The session loop (rgpu_worker.c handle_frame) fills an rgpu_req for each
 * request frame and runs the generated dispatch entry (rgpu_dispatch.h,
 * made by server/gen_dispatch.py from proto/rgpu_messages.def), which
 * decodes the payload and calls the message's handler:
 *
 *   CUresult rgpu_h_<message>(rgpu_req *rq, const rgpu_msg_<message>_req *q);
 *
 * Handler contract:
 * - q is decoded and validated (lengths, limits, no trailing bytes); its
 *   byte and string fields point into the frame's payload, which lives
 *   until the handler returns.  Everything else a client sends (pointers,
 *   sizes, handles) the handler checks against the session's tables before
 *   any driver call.
 * - A context is current (rgpu_req_ensure_ctx) unless the message has the
 *   `noctx` attribute; `barrier` messages run after bulk-lane work ended.
 * - Success: append the reply's fields (rgpu_msg_<message>_rep_encode) and
 *   any tail to rq->rep and return CUDA_SUCCESS.  The loop sends it when
 *   rq->need_reply, else nothing.  Appending nothing is a valid empty reply.
 * - Failure: return the CUresult, with a sentence in rq->msg
 *   (rgpu_req_fail, or rgpu_worker_fail from helpers that only have the
 *   worker: it writes the message of the request being handled).  The loop
 *   discards rq->rep and sends the status and message as the reply, or as
 *   an ASYNC_ERROR event without need_reply.  Out of memory in rq->rep is
 *   turned into CUDA_ERROR_OUT_OF_MEMORY by the loop.
 * - Deferring: a handler that hands its reply to a background job (which
 *   sends it itself, later, with rq->op and rq->seq) sets rq->reply_taken
 *   and returns CUDA_SUCCESS; the loop then sends no reply.  Only with
 *   rq->need_reply (nobody waits otherwise).
 * - The payload buffer: when rq->in is not NULL, the payload lies in that
 *   buffer (a large frame read on its own) and the handler may take it
 *   (keep in->data, rgpu_buf_init(in)) to use past its return, giving it
 *   back with rgpu_staging_release.  Otherwise the payload lies in
 *   the loop's read buffer and is overwritten by the next frame.
 * - Abandoning (bulk copies only): rgpu_req_abandon marks the frame as not
 *   executed; the loop sends nothing, does not count it, and the client
 *   re-sends it after a resume.
 * - A handler runs on the session thread and must not block on anything
 *   that only this thread can unblock (HOST_CALL_DONE is read here). */
#ifndef RGPU_REQ_H
#define RGPU_REQ_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include "rgpu_frame.h"
#include "rgpu_wire.h"

typedef struct rgpu_worker rgpu_worker;

#define RGPU_REQ_MSG_MAX 1024

typedef struct rgpu_req {
  rgpu_worker *w;       /* the session */
  rgpu_frame_hdr hdr;   /* the request's frame header */
  uint16_t op;          /* hdr.opcode */
  uint64_t seq;         /* hdr.seq: a deferred reply carries it */
  int need_reply;       /* RGPU_REQ_NEED_REPLY was set */
  rgpu_buf *rep;        /* reply payload (fields, then tail); the worker's buffer */
  char msg[RGPU_REQ_MSG_MAX]; /* failure text */
  int reply_taken;      /* a job or a bulk lane sends the reply; the loop must not */
  rgpu_buf *in;         /* buffer holding the payload, which the handler may take; or NULL */
  int abandon;          /* 1: leave the frame unexecuted; 2: and break the connection */
  int graph_node;       /* run as a LIB node of a graph (rgpu_graph_lib.c): no reply of its own */
} rgpu_req;

/* Formats rq->msg (printf-style).  Returns status, for `return rgpu_req_fail(...)`. */
CUresult rgpu_req_fail(rgpu_req *rq, CUresult status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The malformed-request failure (CUDA_ERROR_INVALID_VALUE) for a payload
 * that its decoder rejected with proto error e. */
CUresult rgpu_req_malformed(rgpu_req *rq, int e);
/* Loads the driver and makes a context current if none is (device 0). */
CUresult rgpu_req_ensure_ctx(rgpu_req *rq);
/* After a copy from staging buffer `base` was queued on s (`queued`: the
 * driver's answer to queueing it; `what` names the call in a failure):
 * base is released once the stream has consumed it, by a job where one
 * runs, else after waiting here.  Returns the failure or CUDA_SUCCESS. */
CUresult rgpu_req_release_after_stream(rgpu_req *rq, uint64_t stream_id, CUstream s,
                                       CUresult queued, const char *what, void *base,
                                       void *pinned);
/* Replies with len bytes at buf (a staging buffer, rgpu_staging_get; given
 * back here) once stream s (wire id stream_id) has reached this point: by a
 * job when the stream is busy, else at once.  For replies computed in
 * stream order (a cuBLAS result in host memory). */
CUresult rgpu_req_reply_after_stream(rgpu_req *rq, uint64_t stream_id, CUstream s, void *buf,
                                     size_t len, void *pinned);
/* The frame is left unexecuted (and uncounted); with break_conn the
 * connection is cut too, so that the client resumes and re-sends it. */
void rgpu_req_abandon(rgpu_req *rq, int break_conn);

#endif
