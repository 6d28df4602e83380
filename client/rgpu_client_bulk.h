/* rgpu_client_bulk: large copies of a host thread on a QUIC stream of its
 * own (a "lane"), so that one thread's 256 MiB copy does not hold up the
 * small calls of the others (docs/architecture.md, "Bulk streams").
 *
 * Every request still goes on stream 0 in order; only the bytes move:
 * - host to device: the thread writes {bulk id, length, bytes} on its lane
 *   without the client lock, then queues MEMCPY_HTOD_BULK on stream 0;
 * - device to host (synchronous): MEMCPY_DTOH_BULK on stream 0 asks for
 *   the reply on the lane; the thread reads it from there without the
 *   client lock, then reads (or finds already read) the request's short
 *   confirmation on stream 0, so the async errors before it are seen.
 * The resend buffer keeps each bulk request's inline twin, so a resume
 * re-sends it inline; a lane that fails ends in the inline path too.
 *
 * Negotiated with RGPU_CAP_BULK_STREAMS on quic:// only; RGPU_QUIC_STREAMS=0
 * turns it off.  A host-to-device copy takes its lane only while other
 * threads make calls too (its receipt costs a round trip that protects
 * nobody in a single-threaded program); RGPU_QUIC_STREAMS=all always.  At most RGPU_BULK_MAX_LANES threads get a lane (a thread
 * keeps its lane for the session); the others copy inline. */
#ifndef RGPU_CLIENT_BULK_H
#define RGPU_CLIENT_BULK_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "rgpu_bulk_proto.h"
#include "rgpu_client.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Both copies return an rgpu_status (the copy's result: 0, a CUresult, or a
 * negative code) and say in *done how many leading bytes they took care
 * of; the caller copies bytes [*done, n) inline.  *done is 0 when the lane
 * path is not available (no lane, not quic://, sync_every_call), n when
 * the copy was done, and in between after a lane failure.  A status is
 * never a request to copy inline: a server error ends the copy. */

/* Host-to-device copy of n bytes (n >= RGPU_BULK_MIN_BYTES makes sense)
 * through the calling thread's lane; chunks whose lane write fails are
 * queued inline here, so *done is 0 or n. */
rgpu_status rgpu_client_bulk_htod(rgpu_client *c, int device, uint64_t dst, uint64_t stream,
                                  const uint8_t *src, size_t n, size_t *done);
/* Synchronous device-to-host copy through the lane.  Drains the background
 * replies the copy covers, as the inline copy does.  *idle_next: the next
 * frame's sequence number when the whole copy succeeded (the stream was
 * idle then: cudart's known-idle streams), else 0. */
rgpu_status rgpu_client_bulk_dtoh(rgpu_client *c, int device, uint8_t *dst, uint64_t src,
                                  size_t n, uint64_t stream, size_t *done,
                                  uint64_t *idle_next);

/* ---- pure bookkeeping (unit-tested) --------------------------------------
 * Which thread owns which lane, and the one confirmation a lane's thread
 * may be waiting for on stream 0. */
typedef struct {
  int used;
  pthread_t owner;
  void *conn;          /* rgpu_conn of the lane; NULL: not open */
  uint64_t gen;        /* client generation (resumes) it was opened in */
  int broken;          /* failed in generation gen: inline until the next one */
  uint64_t marker_seq; /* confirmation awaited (0: none) */
  int marker_seen;
  uint32_t marker_status;
} rgpu_client_lane;

typedef struct {
  rgpu_client_lane lane[RGPU_BULK_MAX_LANES];
  uint64_t next_id;
} rgpu_client_lanes;

/* How a lane D2H copy ends: rc (the connection's result), server_status
 * (the first failure a reply reported), whether the lane failed after
 * delivering `delivered` of the n bytes.  Returns the copy's status and
 * sets *done (rgpu_client_bulk_dtoh's contract above). */
rgpu_status rgpu_client_bulk_dtoh_outcome(rgpu_status rc, uint32_t server_status, int lane_failed,
                                          size_t delivered, size_t n, size_t *done);

/* The lane of thread self (claimed on first use), or -1 when all are taken. */
int rgpu_client_lanes_claim(rgpu_client_lanes *t, pthread_t self);
/* A confirmation for seq arrived while its thread did not wait on stream 0:
 * remembered for it.  Returns 1 if seq was awaited by a lane. */
int rgpu_client_lanes_note(rgpu_client_lanes *t, uint64_t seq, uint32_t status);

#ifdef __cplusplus
}
#endif
#endif
