/* rgpu_bulk: the worker's side of bulk streams ("lanes", quic:// only).
 *
 * A client host thread moves the bytes of its large copies to a QUIC stream
 * of its own (proto/rgpu_bulk.h), while every request stays on stream 0 in
 * order.  The listener routes each such stream to the session's worker over
 * the control channel; rgpu_bulk_adopt() takes it.  Per lane:
 *
 * - a reader thread receives host-to-device items {bulk_id, len, bytes}
 *   into staging buffers keyed by bulk id; when the session thread reaches
 *   MEMCPY_HTOD_BULK it waits (rgpu_worker_bulk_wait: the control channel
 *   and the connection stay watched) until that item is complete and runs
 *   it exactly like an inline MEMCPY_HTOD (the same handler, which takes
 *   the buffer without a copy);
 * - a sender thread sends device-to-host replies: MEMCPY_DTOH_BULK is
 *   enqueued on its CUDA stream by the session thread (into pinned staging,
 *   with a marker event, so the session thread never blocks), the sender
 *   waits for the event, writes [frame header, bytes] on the lane, then a
 *   zero-length reply with the same sequence on stream 0 (replay-buffered:
 *   it confirms the request and orders the copy after the async errors
 *   before it).  If the lane is gone the whole reply goes on stream 0.
 *
 * Anything wrong with a lane ends in the inline path: a lane that is dead
 * when its request arrives, a reply that cannot be written, a resume
 * (rgpu_bulk_reset: the client re-sends unexecuted bulk requests as their
 * inline twins, see rgpu_messages.def). */
#ifndef RGPU_BULK_SERVER_H
#define RGPU_BULK_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "rgpu_bulk_proto.h"
#include "rgpu_transport.h"
#include "rgpu_worker_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rgpu_bulk rgpu_bulk;

/* Listener -> worker on the control channel (rgpu_worker.h's RGPU_CTL_*):
 * a bulk stream of the worker's QUIC connection follows (rgpu_conn_send). */
#define RGPU_CTL_STREAM 7
/* The server's default for quic_max_streams: stream 0 and one lane per
 * RGPU_BULK_MAX_LANES. */
#define RGPU_BULK_DEFAULT_QUIC_STREAMS (1 + RGPU_BULK_MAX_LANES)

/* Staged host-to-device bytes beyond which lane readers stop reading (QUIC
 * flow control then holds the client back). */
#define RGPU_BULK_STAGED_MAX (64u << 20)

/* Made on first use; NULL when out of memory. */
rgpu_bulk *rgpu_bulk_get(rgpu_worker *w);
/* Takes ownership of a lane conn routed by the listener. */
void rgpu_bulk_adopt(rgpu_worker *w, rgpu_conn *c);
/* The descriptor that polls readable when something changed (an item
 * completed, a lane came or died); -1 without bulk state. */
int rgpu_bulk_notify_fd(rgpu_worker *w);
/* Empties the notify descriptor. */
void rgpu_bulk_notify_drain(rgpu_worker *w);
/* The connection was replaced (RESUME): every lane is closed, staged items
 * are dropped; replies not sent yet go on stream 0. */
void rgpu_bulk_reset(rgpu_worker *w);
/* Waits until every queued device-to-host reply was sent (before frees,
 * device resets, GOODBYE: like rgpu_jobs_barrier). */
void rgpu_bulk_barrier(rgpu_worker *w);
/* End of the session: closes the lanes and joins their threads. */
void rgpu_bulk_shutdown(rgpu_worker *w);

/* The handlers of MEMCPY_HTOD_BULK and MEMCPY_DTOH_BULK (rgpu_h_memcpy_*_bulk)
 * are declared in rgpu_dispatch.h. */

/* ---- pure bookkeeping (unit-tested in rgpu_bulk_test.c) -----------------
 * Staged host-to-device items by bulk id. */
typedef struct rgpu_bulk_item {
  uint64_t id;
  uint32_t lane;
  rgpu_buf buf;     /* the data (MEMCPY_HTOD's handler may take buf.data) */
  size_t len;       /* data bytes announced */
  int done;         /* all of them arrived */
  struct rgpu_bulk_item *next;
} rgpu_bulk_item;

typedef struct {
  rgpu_bulk_item *head;
  size_t staged_bytes;
} rgpu_bulk_items;

/* A new item (not done) of len bytes, or NULL when out of memory. */
rgpu_bulk_item *rgpu_bulk_items_add(rgpu_bulk_items *t, uint64_t id, uint32_t lane, size_t len);
rgpu_bulk_item *rgpu_bulk_items_find(rgpu_bulk_items *t, uint64_t id);
/* Unlinks it (the caller owns it then). */
void rgpu_bulk_items_unlink(rgpu_bulk_items *t, rgpu_bulk_item *it);
void rgpu_bulk_item_free(rgpu_bulk_item *it);
/* Drops every item (of lane, or all with lane < 0). */
void rgpu_bulk_items_drop(rgpu_bulk_items *t, int lane, int only_incomplete);

#ifdef __cplusplus
}
#endif
#endif
