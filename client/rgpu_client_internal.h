/* What rgpu_client.c lends its companion modules (rgpu_client_bulk.c):
 * not part of the client core's public interface. */
#ifndef RGPU_CLIENT_INTERNAL_H
#define RGPU_CLIENT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "rgpu_client.h"
#include "rgpu_transport.h"

#ifdef __cplusplus
extern "C" {
#endif

struct rgpu_client_bulk;

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
#endif
