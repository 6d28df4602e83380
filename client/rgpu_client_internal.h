/* What rgpu_client.c lends its companion modules (rgpu_client_bulk.c):
 * not part of the client core's public interface.
 *
 * ---- Locks of the client core, and the order they are taken in ----------
 *
 * All are rgpu_mutexes (common/rgpu_mutex.h): in debug builds every
 * function that needs one asserts it is held (ASSERT_CLIENT_LOCK /
 * ASSERT_WRITE_LOCK in rgpu_client.c, RGPU_CLIENT_ASSERT_LOCKED below for
 * the companion files, rgpu_client_lock_held() for cudart), and locking one
 * twice or unlocking one not held aborts.  A lock may be taken while
 * holding the ones above it, never the other way round:
 *
 *   1. client lock  c->lock, rgpu_client_lock(): frame order, the send
 *                   queue, reading replies and events, background replies,
 *                   the latched async error, counters (but send_now's),
 *                   the bulk lane table.
 *                   Taken by every API call, the batch timer thread (which
 *                   waits on timer_cv with it) and rgpu_client_try_pump
 *                   (trylock, from cudart's callback thread).
 *   2. write lock   c->wlock: every write on the connection, the resend
 *                   buffer, `broken`, the connection swap of a resume and
 *                   rgpu_client_send_now's counters.
 *                   Taken under 1., or alone by rgpu_client_send_now (a
 *                   host-callback thread answering while another thread
 *                   holds 1. and waits for the stream that waits for it).
 *                   A resume (client_resume) holds 1. and 2. throughout.
 *   3. copier lock  rgpu_copier's mu: hands one copy (a source into a short list of resend-buffer segments) to the copier thread;
 *                   taken under 2. by client_write (a short segment list), alone by that thread.
 *   (rgpu_log's lock is a leaf below all of these.)
 *
 * rgpu_client_resume.c and the lane bookkeeping of rgpu_client_bulk.c have
 * no lock of their own (resend buffer: 2.; lane table: 1.).  A lane's
 * connection is used by its owner thread with no lock held.
 *
 * Relation to cudart's order (cudart/rgpu_cudart_locks.h): the client lock
 * is cudart's level 2, after fb->lock (level 1; cudart drops it before it
 * sends) and before g_lock (3); the write lock and the copier lock come
 * after the client lock and take no cudart lock.  The client calls into
 * cudart with the client lock held, never with the write lock: the wait
 * hook (takes nothing), the HOST_CALL hook (takes g_lock, only to queue
 * the call) and the HELLO hook (rgpu_rt_device_prefetch: sends under the
 * lock it was given, takes nothing).  cudart's leaf locks (arena, device
 * cache, ranges, registrations, error state) have nothing taken under
 * them, the client lock included.
 *
 * No lock but the client lock is held while this thread waits for the
 * server (rgpu_client_wait_any_locked, the drains, the background flow
 * wait; checked with rgpu_mutex_held_count() in debug builds), so a wait
 * never stalls a thread that only wanted a cache or the arena.  The
 * exception is connecting (HELLO inside cudart's pthread_once). */
#ifndef RGPU_CLIENT_INTERNAL_H
#define RGPU_CLIENT_INTERNAL_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "rgpu_client.h"
#include "rgpu_transport.h"

#ifdef __cplusplus
extern "C" {
#endif

struct rgpu_client_bulk;

/* For the companion files, which do not see struct rgpu_client. */
#define RGPU_CLIENT_ASSERT_LOCKED(c) assert(rgpu_client_lock_held(c))

/* The connection (may change at a resume; NULL while none). */
rgpu_conn *rgpu_client_conn_locked(rgpu_client *c);
/* Changes whenever the connection was replaced (a resume). */
uint64_t rgpu_client_generation_locked(rgpu_client *c);
/* The bulk-stream state slot of the client (rgpu_client_bulk.c owns it). */
struct rgpu_client_bulk **rgpu_client_bulk_slot(rgpu_client *c);
/* The program waits for the server here: one round trip (and the wait
 * hook), as if it were a reply wait. */
void rgpu_client_count_round_trip_locked(rgpu_client *c);
/* Bytes moved on bulk streams, for the counters. */
void rgpu_client_count_bulk_locked(rgpu_client *c, uint64_t sent, uint64_t received);
/* Writes request frame {op, fixed} on stream 0 at once (after the queue),
 * but keeps twin[0..ntwin) (a complete frame that the caller built with
 * the same sequence number, see rgpu_client_twin_hdr) in the resend buffer
 * in its place: after a resume the server runs the twin.  seq is the
 * frame's sequence number, taken with rgpu_client_take_seq_locked. */
rgpu_status rgpu_client_send_twin_locked(rgpu_client *c, uint16_t op, int need_reply, uint64_t seq,
                                 const void *fixed, size_t fixed_len, const struct iovec *twin,
                                 int ntwin);
uint64_t rgpu_client_take_seq_locked(rgpu_client *c);
/* When (rgpu_clock_ns) a request last came from a different host thread
 * than the request before it; 0 while only one thread has made requests. */
uint64_t rgpu_client_mixed_ns_locked(rgpu_client *c);
/* One more bulk request whose confirmation nobody waits for was seen on
 * stream 0 (called by the read path, lock held). */
void rgpu_client_bulk_note_reply(rgpu_client *c, uint64_t seq, uint32_t status);
/* Closes the bulk streams (rgpu_client_close, lock held). */
void rgpu_client_bulk_free(rgpu_client *c);
/* 1 when HELLO should ask for bulk streams (quic://, not RGPU_QUIC_STREAMS=0). */
int rgpu_client_bulk_wanted(const char *uri);

#ifdef __cplusplus
}
#endif
/* The most bytes a blocked write took in before a wait read them, and how
 * many async errors were taken in during writes (client_digest_async_errors
 * in rgpu_client.c): for tests of an error flood's memory bound. */
size_t rgpu_client_absorbed_peak_bytes(const rgpu_client *c);
uint64_t rgpu_client_async_errors_digested(const rgpu_client *c);

#endif
