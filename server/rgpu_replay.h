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
 * without resume).  Small frames are copied into blocks of
 * RGPU_REPLAY_BLOCK bytes; a large payload may be kept by reference
 * (rgpu_replay_append_ref).  Pure data structure, no locking: the worker
 * holds its write lock around every call. */
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
/* Owned blocks of copied frames. */
#define RGPU_REPLAY_BLOCK (1u << 20)

typedef struct {
  uint64_t seq;  /* request sequence of a reply frame */
  uint64_t off;  /* stream offset of its header */
  uint64_t len;  /* header + payload */
} rgpu_replay_reply;

/* Releases a buffer the replay kept by reference (rgpu_replay_append_ref). */
typedef void (*rgpu_replay_release_fn)(void *ctx, void *buf);

/* A run of kept bytes: a block the replay owns (copied frames; release
 * NULL) or a caller's buffer kept by reference until acknowledged. */
typedef struct {
  uint8_t *p;    /* first kept byte */
  size_t len;    /* kept bytes */
  size_t room;   /* owned block: free bytes after p + len */
  void *buf;     /* owned block's allocation / the caller's buffer */
  size_t block;  /* owned block's size */
  rgpu_replay_release_fn release;
  void *ctx;
} rgpu_replay_seg;

typedef struct {
  int enabled;         /* 0: nothing is kept (resume off); counters still run */
  size_t max_bytes;
  /* Bytes [base, total) of the stream, oldest segment first. */
  rgpu_replay_seg *segs;
  size_t seg_head, nsegs, seg_cap;
  size_t len;          /* bytes kept */
  size_t cap;          /* bytes of owned blocks allocated (spares included) */
  void *spare[2];      /* emptied blocks of RGPU_REPLAY_BLOCK bytes, reused */
  int nspare;
  uint8_t *scratch;    /* a kept range flattened for _from / _find_reply */
  size_t scratch_cap;
  uint64_t base;       /* stream offset of the oldest kept byte */
  uint64_t total;      /* bytes ever appended */
  rgpu_replay_reply *idx; /* reply frames in the buffer, oldest first */
  size_t idx_head, nidx, idx_cap;
  uint64_t rx_consumed; /* request bytes executed (wire order) */
  /* figures */
  uint64_t dropped_unacked; /* bytes evicted before the client acknowledged them */
  uint64_t replayed_bytes;  /* bytes re-sent after resumes */
  uint64_t resumes;
  uint64_t kept_by_ref;     /* bytes kept without a copy */
} rgpu_replay;

void rgpu_replay_init(rgpu_replay *r, int enabled, size_t max_bytes);
void rgpu_replay_free(rgpu_replay *r);

/* Appends the bytes of iov[0..n) (complete frames, as written to the
 * client) to the stream, indexing the reply frames among them.  Returns 0,
 * or -1 when out of memory (the bytes are counted but not kept: a resume
 * that needs them will fail). */
int rgpu_replay_append(rgpu_replay *r, const struct iovec *iov, int n);

/* The same, but iov[ref] (a large payload) is kept by reference instead of
 * copied: the replay owns `buf` from now on and calls release(ctx, buf)
 * once those bytes are acknowledged or dropped (at once when nothing is
 * kept).  Why: copying every D2H reply into the replay buffer cost half
 * the throughput of a loopback copy; the staging buffer the reply is sent
 * from holds the same bytes.  The caller must not touch buf afterwards. */
int rgpu_replay_append_ref(rgpu_replay *r, const struct iovec *iov, int n, int ref,
                           rgpu_replay_release_fn release, void *ctx, void *buf);

/* Copies every payload kept by reference and releases the references (the
 * owner of those buffers is about to free them: a context reset drops the
 * staging pools).  Out of memory, nothing is kept any more. */
void rgpu_replay_copy_refs(rgpu_replay *r);

/* The client has received the stream up to rx_bytes: drops what is below.
 * Offsets beyond the stream are ignored (a confused or hostile client). */
void rgpu_replay_ack(rgpu_replay *r, uint64_t rx_bytes);

/* The bytes a client that received rx_bytes is missing: 0 and *p, *n (valid
 * until the next call on r), or -1 when rx_bytes is beyond the stream or
 * below what is still kept (or, rarely, no memory to flatten them). */
int rgpu_replay_from(rgpu_replay *r, uint64_t rx_bytes, const uint8_t **p, size_t *n);

/* A complete request frame of n bytes was executed (consumed). */
void rgpu_replay_consumed(rgpu_replay *r, uint64_t n);

/* The cached reply frame of request seq: 0 and *p, *n, or -1 when it is not
 * (or no longer) in the buffer. */
int rgpu_replay_find_reply(rgpu_replay *r, uint64_t seq, const uint8_t **p, size_t *n);

#ifdef __cplusplus
}
#endif
#endif
