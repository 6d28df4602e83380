/* rgpu_replay: what a worker keeps so that a session survives a broken
 * connection (resumable sessions, issue 9).
 *
 * Server to client, the worker keeps the bytes of every frame it sent
 * (replies, events, device printf) that the client has not acknowledged, as
 * one byte stream numbered from 0.  The client counts the bytes of complete
 * frames it received; on RESUME it says how many, and the worker re-sends
 * the rest.  The client acknowledges progress with ACK frames (every few
 * MiB) so the buffer stays small.  Replies of background jobs, written
 * while no connection exists, go into the same stream and reach the client
 * after the resume.
 *
 * Client to server the same holds the other way round: the worker counts
 * the bytes of complete request frames it has executed (ACK and RESUME
 * frames excepted), in wire order; the RESUME reply carries that count and
 * the client re-sends exactly what comes after it, so a request is never
 * executed twice and never lost.  (Sequence numbers cannot serve here: a
 * host-callback thread may write a frame with a higher sequence before a
 * queued one with a lower sequence.)  The reply index below is the reply
 * cache: the replies still held, by request sequence.
 *
 * Bounded: beyond max_bytes unacknowledged bytes the oldest are dropped and
 * a resume that needs them fails (the session is then lost, as it would be
 * without resume).  Pure data structure, no locking: the worker holds its
 * write lock around every call. */
#ifndef RGPU_REPLAY_H
#define RGPU_REPLAY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Default bound of unacknowledged bytes (16 pipelined 4 MiB D2H chunks
 * plus acknowledgement lag fit twice). */
#define RGPU_REPLAY_DEFAULT_BYTES (128u << 20)

typedef struct {
  uint64_t seq;  /* request sequence of a reply frame */
  uint64_t off;  /* stream offset of its header */
  uint64_t len;  /* header + payload */
} rgpu_replay_reply;

typedef struct {
  int enabled;         /* 0: nothing is kept (resume off); counters still run */
  size_t max_bytes;
  uint8_t *data;       /* bytes [base, total) of the stream at data[head..] */
  size_t head, len, cap;
  uint64_t base;       /* stream offset of data[head] */
  uint64_t total;      /* bytes ever appended */
  rgpu_replay_reply *idx; /* reply frames in the buffer, oldest first */
  size_t idx_head, nidx, idx_cap;
  uint64_t rx_consumed; /* request bytes executed (wire order) */
  /* figures */
  uint64_t dropped_unacked; /* bytes evicted before the client acknowledged them */
  uint64_t replayed_bytes;  /* bytes re-sent after resumes */
  uint64_t resumes;
} rgpu_replay;

void rgpu_replay_init(rgpu_replay *r, int enabled, size_t max_bytes);
void rgpu_replay_free(rgpu_replay *r);

/* Appends the bytes of iov[0..n) (complete frames, as written to the
 * client) to the stream, indexing the reply frames among them.  Returns 0,
 * or -1 when out of memory (the bytes are counted but not kept: a resume
 * that needs them will fail). */
int rgpu_replay_append(rgpu_replay *r, const struct iovec *iov, int n);

/* The client has received the stream up to rx_bytes: drops what is below.
 * Offsets beyond the stream are ignored (a confused or hostile client). */
void rgpu_replay_ack(rgpu_replay *r, uint64_t rx_bytes);

/* The bytes a client that received rx_bytes is missing: 0 and *p, *n (valid
 * until the next append/ack), or -1 when rx_bytes is beyond the stream or
 * below what is still kept. */
int rgpu_replay_from(const rgpu_replay *r, uint64_t rx_bytes, const uint8_t **p, size_t *n);

/* A complete request frame of n bytes was executed (consumed). */
void rgpu_replay_consumed(rgpu_replay *r, uint64_t n);

/* The cached reply frame of request seq: 0 and *p, *n, or -1 when it is not
 * (or no longer) in the buffer. */
int rgpu_replay_find_reply(const rgpu_replay *r, uint64_t seq, const uint8_t **p, size_t *n);

#ifdef __cplusplus
}
#endif
#endif
