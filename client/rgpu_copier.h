/* rgpu_copier: one memcpy at a time on a thread of its own.
 *
 * Why: a resumable session keeps every H2D byte in the client's resend
 * buffer (client/rgpu_client_resume.h), because cudaMemcpy returns before
 * the server confirms.  Copying a 4 MiB chunk there and then writing it to
 * the socket made the bulk rate the sum of both times: on the H200's
 * loopback H2D reached 63 % of the raw transport.  Copying on another core
 * while the calling thread writes makes it the larger of the two.
 *
 * The destination is a short list of segments, filled in order from one
 * contiguous source: the resend buffer is a ring of chunks, so a payload
 * kept there may span two or more of them.
 *
 * The caller owns the copier and serializes its use (the client's write
 * lock); start() hands over one copy, wait() returns when it is done. */
#ifndef RGPU_COPIER_H
#define RGPU_COPIER_H

#include <stddef.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rgpu_copier rgpu_copier;

/* Most destination segments one copy may have. */
#define RGPU_COPIER_MAX_SEGS 16

/* NULL when no thread could be made (callers then copy themselves). */
rgpu_copier *rgpu_copier_new(void);
/* Waits for a copy in progress, ends the thread and frees. */
void rgpu_copier_free(rgpu_copier *cp);
/* Starts copying the bytes from src on into dst[0], dst[1], ...
 * dst[ndst - 1] (1 <= ndst <= RGPU_COPIER_MAX_SEGS; the list itself is
 * copied, the memory it and src name must stay valid until
 * rgpu_copier_wait returns).  One copy at a time. */
void rgpu_copier_start(rgpu_copier *cp, const struct iovec *dst, int ndst, const void *src);
void rgpu_copier_wait(rgpu_copier *cp);

#ifdef __cplusplus
}
#endif
#endif
