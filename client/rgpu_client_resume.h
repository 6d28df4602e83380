/* rgpu_client_resume: what the client keeps so that a session survives a
 * broken connection (issue 9).
 *
 * The resend buffer holds the bytes of every request frame written to the
 * server (in wire order, exactly as written; ACK and RESUME frames are not
 * part of the stream) until the server has confirmed them.  Confirmation is
 * implicit: the server executes frames in wire order, so a reply (or an
 * async error) for request S means S and every frame written before it
 * were executed; the buffer then drops everything up to the end of S.  On
 * RESUME the server says how many request bytes it executed and the client
 * re-sends the rest from here: nothing is lost, nothing runs twice.
 *
 * Data of host-to-device copies is copied in (the program may reuse its
 * buffer as soon as cudaMemcpy returns), except for asynchronous copies
 * from page-locked memory, kept by reference (rgpu_resend_append_ref).
 * The buffer is bounded by the
 * client core: past RGPU_RESEND_MAX_BYTES it asks the server to confirm
 * (one round trip) before sending more bulk data.
 *
 * Pure data structure, no locking (the client core holds its write lock). */
#ifndef RGPU_CLIENT_RESUME_H
#define RGPU_CLIENT_RESUME_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Held request bytes beyond which bulk sends wait for a confirmation. */
#ifndef RGPU_RESEND_MAX_BYTES /* -D for the benchmarks' window comparisons */
#define RGPU_RESEND_MAX_BYTES (32u << 20)
#endif

/* The bytes are kept in a ring of chunks of this size: a frame may span
 * chunks, a confirmation gives whole chunks back, and no byte, once kept,
 * is ever copied again (compacting one contiguous buffer copied up to the
 * whole window on the writing thread; issue 14). */
#define RGPU_RESEND_CHUNK_BYTES (1u << 20)
/* Emptied chunks kept for reuse (beyond these they are freed): enough for
 * the window plus a bulk frame, so a streaming copy does no malloc, free
 * or page fault once it is going. */
#define RGPU_RESEND_SPARE_CHUNKS (RGPU_RESEND_MAX_BYTES / RGPU_RESEND_CHUNK_BYTES + 8u)

typedef struct {
  uint64_t seq; /* request sequence */
  uint64_t end; /* stream offset just past the frame */
} rgpu_resend_frame;

/* A payload kept by reference (rgpu_resend_append_ref): stream bytes
 * [off, off + len) are the program's own memory at ptr.  The chunks have
 * room for them too, never written unless the reference has to be
 * dropped early (rgpu_resend_own). */
typedef struct {
  uint64_t off;
  size_t len;
  const uint8_t *ptr;
} rgpu_resend_ref;

typedef struct {
  /* Chunk FIFO: chunk[chunk_head .. chunk_head + nchunk); the first byte
   * of chunk[chunk_head] is stream offset `origin`, the stream continues
   * without gaps through the following chunks.  Held bytes are stream
   * [base, total), origin <= base < origin + RGPU_RESEND_CHUNK_BYTES
   * (while any are held). */
  uint8_t **chunk;
  size_t chunk_head, nchunk, chunk_cap;
  uint64_t origin;
  uint8_t *spare[RGPU_RESEND_SPARE_CHUNKS]; /* emptied chunks, for reuse */
  size_t nspare;
  uint64_t base, total;
  rgpu_resend_frame *idx;
  size_t idx_head, nidx, idx_cap;
  /* References, in stream order (a FIFO like idx). */
  rgpu_resend_ref *ref;
  size_t ref_head, nref, ref_cap;
  int oom; /* a frame could not be kept: a resume would lose it */
} rgpu_resend_buf;

void rgpu_resend_init(rgpu_resend_buf *b);
void rgpu_resend_free(rgpu_resend_buf *b);
/* Appends complete request frames (iov[0..n), as written to the wire) and
 * indexes them by sequence.  Returns 0 or -1 when out of memory (then oom
 * is set and a later resume fails instead of silently losing a request). */
int rgpu_resend_append(rgpu_resend_buf *b, const struct iovec *iov, int n);
/* The same, except that iov[aside] (a frame's payload, holding no frame
 * header) is not copied: dst[0..*ndst) (*ndst = 0 on failure) are the
 * places its bytes must go, in order (it may span chunks), and the caller
 * copies them there before anything else uses the buffer (so a copy can
 * overlap the socket write).  When it would take more than maxdst places
 * the bytes are copied here and *ndst is 0. */
int rgpu_resend_append_aside(rgpu_resend_buf *b, const struct iovec *iov, int n, int aside,
                             struct iovec *dst, int maxdst, int *ndst);
/* The same, except that iov[ref] (a frame's payload, holding no frame
 * header) is kept by reference, not copied: the caller guarantees its
 * memory stays as it is until the frame is confirmed or rgpu_resend_own
 * is called for it.  Why: an asynchronous copy from page-locked memory
 * may not be changed by the program before it has seen the copy complete,
 * and seeing that takes a reply, which confirms the frame; copying 4 MiB
 * per chunk into the buffer halved H2D bandwidth on two CPUs.  Room in the
 * chunks is still reserved (not touched), so _own never fails. */
int rgpu_resend_append_ref(rgpu_resend_buf *b, const struct iovec *iov, int n, int ref);
/* The program is about to release [p, p + n) (cudaFreeHost,
 * cudaHostUnregister): the held bytes of every reference into it are
 * copied into the chunks and the references dropped. */
void rgpu_resend_own(rgpu_resend_buf *b, const void *p, size_t n);
/* Request seq was executed: drops it and everything written before it.
 * Unknown sequence numbers (already dropped, or not ours) change nothing. */
void rgpu_resend_confirm(rgpu_resend_buf *b, uint64_t seq);
/* The server executed the stream up to off: drops what is before it and
 * returns 0 with *n the bytes to re-send (read them with rgpu_resend_iov)
 * and *frames their frame count, or -1 when off is outside what is held
 * (the server and the client disagree: the session cannot resume). */
int rgpu_resend_from(rgpu_resend_buf *b, uint64_t off, size_t *n, size_t *frames);
/* Describes held bytes from `skip` bytes past the oldest one in up to max
 * iovecs (valid until the next append or confirm); returns how many were
 * filled (0: nothing held past skip).  Replay writes them in a loop. */
int rgpu_resend_iov(const rgpu_resend_buf *b, size_t skip, struct iovec *iov, int max);
/* Bytes held. */
static inline size_t rgpu_resend_held(const rgpu_resend_buf *b) {
  return (size_t)(b->total - b->base);
}

/* Delay before reconnect attempt `attempt` (0, 1, ...): 100 ms doubling up
 * to 2 s, so a short outage costs little and a long one few attempts. */
int rgpu_resume_backoff_ms(int attempt);

#ifdef __cplusplus
}
#endif
#endif
