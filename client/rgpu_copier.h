/* rgpu_copier: one memcpy at a time on a thread of its own.
 *
 * Why: a resumable session keeps every H2D byte in the client's resend
 * buffer (client/rgpu_client_resume.h), because cudaMemcpy returns before
 * the server confirms.  Copying a 4 MiB chunk there and then writing it to
 * the socket made the bulk rate the sum of both times: on the H200's
 * loopback H2D reached 63 % of the raw transport.  Copying on another core
 * while the calling thread writes makes it the larger of the two.
 *
 * The caller owns the copier and serializes its use (the client's write
 * lock); start() hands over one copy, wait() returns when it is done. */
#ifndef RGPU_COPIER_H
#define RGPU_COPIER_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rgpu_copier rgpu_copier;

/* NULL when no thread could be made (callers then copy themselves). */
rgpu_copier *rgpu_copier_new(void);
/* Waits for a copy in progress, ends the thread and frees. */
void rgpu_copier_free(rgpu_copier *cp);
/* Starts copying n bytes from src to dst; both must stay valid until
 * rgpu_copier_wait returns.  One copy at a time. */
void rgpu_copier_start(rgpu_copier *cp, void *dst, const void *src, size_t n);
void rgpu_copier_wait(rgpu_copier *cp);

#ifdef __cplusplus
}
#endif
#endif
