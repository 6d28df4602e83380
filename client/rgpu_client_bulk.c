/* Bulk streams, the client's side: see rgpu_client_bulk.h. */
#include "rgpu_client_bulk.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_calls.h"
#include "rgpu_clock.h"
#include "rgpu_client_internal.h"
#include "rgpu_frame.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"
#include "rgpu_mutex.h"
#include "rgpu_transport.h"

/* A lane is written and read by its owner thread holding no lock at all
 * (rgpu_client_internal.h): the other threads' calls go on meanwhile. */
#define ASSERT_NO_LOCK_HELD(c) assert(rgpu_client_lock_not_held(c) && rgpu_mutex_held_count() == 0)

struct rgpu_client_bulk {
  rgpu_client_lanes t;
};

/* ---- bookkeeping -------------------------------------------------------- */

int rgpu_client_lanes_claim(rgpu_client_lanes *t, pthread_t self) {
  int free_k = -1;
  for (int k = 0; k < RGPU_BULK_MAX_LANES; k++) {
    if (t->lane[k].used && pthread_equal(t->lane[k].owner, self)) return k;
    if (!t->lane[k].used && free_k < 0) free_k = k;
  }
  if (free_k < 0) return -1;
  memset(&t->lane[free_k], 0, sizeof t->lane[free_k]);
  t->lane[free_k].used = 1;
  t->lane[free_k].owner = self;
  return free_k;
}

int rgpu_client_lanes_note(rgpu_client_lanes *t, uint64_t seq, uint32_t status) {
  if (!seq) return 0;
  for (int k = 0; k < RGPU_BULK_MAX_LANES; k++) {
    rgpu_client_lane *l = &t->lane[k];
    if (l->used && l->marker_seq == seq) {
      l->marker_seen = 1;
      l->marker_status = status;
      return 1;
    }
  }
  return 0;
}

/* ---- hooks of rgpu_client.c --------------------------------------------- */

int rgpu_client_bulk_wanted(const char *uri) {
  if (!uri || strncmp(uri, "quic://", 7) != 0) return 0;
  const char *e = getenv("RGPU_QUIC_STREAMS");
  return !(e && e[0] == '0' && e[1] == 0);
}

void rgpu_client_bulk_note_reply(rgpu_client *c, uint64_t seq, uint32_t status) {
  RGPU_CLIENT_ASSERT_LOCKED(c);
  struct rgpu_client_bulk *b = *rgpu_client_bulk_slot(c);
  if (b) rgpu_client_lanes_note(&b->t, seq, status);
}

void rgpu_client_bulk_free(rgpu_client *c) {
  RGPU_CLIENT_ASSERT_LOCKED(c);
  struct rgpu_client_bulk **slot = rgpu_client_bulk_slot(c);
  if (!*slot) return;
  for (int k = 0; k < RGPU_BULK_MAX_LANES; k++)
    if ((*slot)->t.lane[k].conn) rgpu_conn_close((*slot)->t.lane[k].conn);
  free(*slot);
  *slot = NULL;
}

/* ---- lanes -------------------------------------------------------------- */

/* The calling thread's lane, open in the current generation, or NULL (copy
 * inline).  Lock held.  Only the owner thread touches its lane's conn, so
 * it may use it without the lock afterwards. */
static rgpu_client_lane *lane_get_locked(rgpu_client *c, int *index) {
  RGPU_CLIENT_ASSERT_LOCKED(c);
  if (!(rgpu_client_caps(c) & RGPU_CAP_BULK_STREAMS) || rgpu_client_sync_every_call(c)) return NULL;
  rgpu_conn *conn = rgpu_client_conn_locked(c);
  if (!conn) return NULL;
  struct rgpu_client_bulk **slot = rgpu_client_bulk_slot(c);
  if (!*slot && !(*slot = calloc(1, sizeof **slot))) return NULL;
  int k = rgpu_client_lanes_claim(&(*slot)->t, pthread_self());
  if (k < 0) return NULL;
  rgpu_client_lane *l = &(*slot)->t.lane[k];
  uint64_t gen = rgpu_client_generation_locked(c);
  if (l->gen != gen) {
    /* A resume replaced the connection: the old stream is dead. */
    if (l->conn) rgpu_conn_close(l->conn);
    l->conn = NULL;
    l->broken = 0;
    l->gen = gen;
  }
  if (l->broken) return NULL;
  if (!l->conn) {
    rgpu_conn *s = NULL;
    char err[256] = "";
    int rc = rgpu_conn_open_stream(conn, &s, err, sizeof err);
    uint8_t pre[RGPU_BULK_PREAMBLE_SIZE];
    rgpu_bulk_preamble_encode(pre, (uint32_t)k);
    struct iovec iov = {pre, sizeof pre};
    if (rc == 0) rc = rgpu_conn_writev_all(s, &iov, 1);
    if (rc) {
      RGPU_DEBUG("bulk stream %d: %s; copying on stream 0", k, err[0] ? err : "write failed");
      if (s) rgpu_conn_close(s);
      l->broken = 1;
      return NULL;
    }
    l->conn = s;
  }
  *index = k;
  return l;
}

/* The worker's receipt for item id (a zero-length reply frame, opcode
 * MEMCPY_HTOD_BULK, seq = id): its bytes are all staged there. */
static int lane_read_ack(rgpu_conn *s, uint64_t id) {
  uint8_t hb[RGPU_FRAME_HDR_SIZE];
  rgpu_frame_hdr h;
  int rc = rgpu_conn_read_exact(s, hb, sizeof hb);
  if (rc == 0) rc = rgpu_frame_hdr_decode(hb, 0, &h);
  if (rc) return rc;
  if (h.kind != RGPU_KIND_REPLY || h.opcode != RGPU_OP_MEMCPY_HTOD_BULK || h.seq != id || h.aux)
    return RGPU_PROTO_EINVAL;
  return 0;
}

/* A bulk request and its inline twin under one sequence number: the bulk
 * frame is sent, the twin kept to re-send inline after a resume. */
static rgpu_status send_bulk_with_twin_locked(rgpu_client *c, uint16_t op, int need_reply,
                                              uint64_t seq, const rgpu_call_frame *bulk,
                                              const rgpu_call_frame *twin) {
  struct iovec twin_iov[2];
  int ntwin = rgpu_call_frame_iov(twin, twin_iov);
  return rgpu_client_send_twin_locked(c, op, need_reply, seq, rgpu_call_frame_fields(bulk),
                                      rgpu_call_frame_fields_len(bulk), twin_iov, ntwin);
}

/* Queues chunk [off, off+len) on stream 0: MEMCPY_HTOD_BULK when its bytes
 * are staged in the worker (acked in this generation), else inline. */
static rgpu_status htod_request(rgpu_client *c, rgpu_client_lane *l, int k, int device, uint64_t dst,
                        uint64_t stream, const uint8_t *src, size_t len, uint64_t id, int acked,
                        uint64_t gen) {
  rgpu_client_lock(c);
  rgpu_status rc = rgpu_client_bind_device_locked(c, device);
  /* The inline copy of this chunk: sent as is when the lane cannot be used,
   * else kept as the bulk request's resend twin. */
  rgpu_msg_memcpy_htod_req inline_req = {.dst = dst, .stream = stream, .data = {src, len}};
  if (rc == 0 && acked && gen == rgpu_client_generation_locked(c)) {
    rgpu_client_count_bulk_locked(c, RGPU_BULK_ITEM_HDR_SIZE + len, 0);
    rgpu_msg_memcpy_htod_bulk_req bulk_req = {
        .dst = dst, .stream = stream, .bulk_id = id, .len = len, .lane = (uint32_t)k};
    uint64_t seq = rgpu_client_take_seq_locked(c);
    rgpu_call_frame bulk, twin;
    rgpu_frame_memcpy_htod_bulk(&bulk, 0, seq, &bulk_req);
    rgpu_frame_memcpy_htod(&twin, 0, seq, &inline_req);
    rc = send_bulk_with_twin_locked(c, RGPU_OP_MEMCPY_HTOD_BULK, 0, seq, &bulk, &twin);
  } else if (rc == 0) {
    /* The lane is gone (or a resume came between): this chunk inline. */
    rc = rgpu_send_memcpy_htod_locked(c, 0, &inline_req, NULL);
  }
  (void)l;
  rgpu_client_unlock(c);
  return rc;
}

/* A lane costs a host-to-device copy one round trip: the thread waits for
 * the worker's receipt of the last chunk before it queues that chunk's
 * request on stream 0 (so that the session thread never waits for bytes
 * in flight while other threads' requests queue behind it), where an
 * inline copy is queued right behind its bytes.  That round trip buys
 * something only while other threads make calls; a program whose calls
 * all come from one thread paid it for nothing (issue 21: a 256 KiB H2D
 * under the cellular profile took 0.31 s on a lane, 0.25 s inline and
 * over tcp).  So a copy takes its lane only if another thread made a
 * request within the last RGPU_BULK_MIXED_MS; device-to-host copies,
 * whose lane costs no round trip, always do.  RGPU_QUIC_STREAMS=all
 * puts every large copy on a lane (tests of the lane path from a single
 * thread). */
#define RGPU_BULK_MIXED_MS 1000

static int htod_lane_pays_locked(rgpu_client *c) {
  const char *e = getenv("RGPU_QUIC_STREAMS");
  if (e && !strcmp(e, "all")) return 1;
  uint64_t mixed = rgpu_client_mixed_ns_locked(c);
  return mixed && rgpu_clock_elapsed_ns(mixed) < RGPU_BULK_MIXED_MS * 1000000ull;
}

rgpu_status rgpu_client_bulk_htod(rgpu_client *c, int device, uint64_t dst, uint64_t stream,
                                  const uint8_t *src, size_t n, size_t *done_bytes) {
  *done_bytes = 0;
  rgpu_client_lock(c);
  if (!htod_lane_pays_locked(c)) {
    rgpu_client_unlock(c);
    return 0; /* not taken: the caller copies inline */
  }
  int k = -1;
  rgpu_client_lane *l = lane_get_locked(c, &k);
  struct rgpu_client_bulk *b = *rgpu_client_bulk_slot(c);
  rgpu_client_unlock(c);
  if (!l) return 0; /* not taken: *done_bytes stays 0 */
  size_t chunk = rgpu_client_chunk_bytes(c);
  size_t nch = (n + chunk - 1) / chunk;
  uint64_t gen = l->gen;
  /* The request of chunk j goes on stream 0 only once the worker has all
   * of j's bytes (its receipt on the lane), so the session thread never
   * waits for bytes in flight, which would hold every other thread's
   * requests behind them.  Chunk j+1 is written before j's receipt is
   * read, so the lane stays busy. */
  uint64_t ids[2] = {0, 0};
  int written[2] = {0, 0};
  rgpu_status rc = 0;
  for (size_t j = 0; rc == 0 && j <= nch; j++) {
    if (j < nch) {
      size_t off = j * chunk, len = n - off < chunk ? n - off : chunk;
      rgpu_client_lock(c);
      ids[j % 2] = ++b->t.next_id;
      rgpu_client_unlock(c);
      written[j % 2] = 0;
      if (!l->broken && l->conn) {
        /* The bytes on the lane, without the client lock: the other
         * threads' calls go on meanwhile. */
        ASSERT_NO_LOCK_HELD(c);
        uint8_t ih[RGPU_BULK_ITEM_HDR_SIZE];
        rgpu_bulk_item_encode(ih, ids[j % 2], len);
        struct iovec iov[2] = {{ih, sizeof ih}, {(void *)(src + off), len}};
        if (rgpu_conn_writev_all(l->conn, iov, 2) == 0)
          written[j % 2] = 1;
        else
          l->broken = 1;
      }
    }
    if (j == 0) continue;
    size_t p = j - 1, off = p * chunk, len = n - off < chunk ? n - off : chunk;
    ASSERT_NO_LOCK_HELD(c); /* the receipt is a wait for the worker */
    int acked = written[p % 2] && !l->broken && lane_read_ack(l->conn, ids[p % 2]) == 0;
    if (written[p % 2] && !acked && !l->broken) l->broken = 1;
    if (l->broken) {
      RGPU_DEBUG("bulk stream %d failed; copying on stream 0", k);
      acked = 0;
    }
    rc = htod_request(c, l, k, device, dst + off, stream, src + off, len, ids[p % 2], acked, gen);
  }
  /* Every chunk went out (on the lane or, where it failed, inline). */
  if (rc == 0) *done_bytes = n;
  return rc;
}

/* Reads one reply frame of the lane into dst (len bytes expected).  0 and
 * *status (with msg on failure), or <0 when the lane failed. */
static int lane_read_reply(rgpu_conn *s, uint64_t seq, uint8_t *dst, size_t len,
                           uint32_t *status, char *msg, size_t msglen, uint64_t *bytes) {
  uint8_t hb[RGPU_FRAME_HDR_SIZE];
  rgpu_frame_hdr h;
  int rc = rgpu_conn_read_exact(s, hb, sizeof hb);
  if (rc) return rc;
  rc = rgpu_frame_hdr_decode(hb, RGPU_FRAME_MAX_PAYLOAD, &h);
  if (rc) return rc;
  if (h.kind != RGPU_KIND_REPLY || h.seq != seq) return RGPU_PROTO_EINVAL;
  *bytes += sizeof hb + h.length;
  if (h.aux == 0) {
    if (h.length != len) return RGPU_PROTO_EINVAL;
    *status = 0;
    return rgpu_conn_read_exact(s, dst, len);
  }
  /* The error text: what fits in msg, the rest read and dropped. */
  size_t m = h.length < msglen - 1 ? h.length : msglen - 1;
  rc = m ? rgpu_conn_read_exact(s, msg, m) : 0;
  for (size_t left = h.length - m; rc == 0 && left;) {
    char junk[256];
    size_t k = left < sizeof junk ? left : sizeof junk;
    rc = rgpu_conn_read_exact(s, junk, k);
    left -= k;
  }
  if (rc) return rc;
  msg[m] = 0;
  for (size_t i = 0; i < m; i++)
    if ((unsigned char)msg[i] < 0x20) msg[i] = ' ';
  *status = h.aux;
  return 0;
}

rgpu_status rgpu_client_bulk_dtoh(rgpu_client *c, int device, uint8_t *dst, uint64_t src,
                                  size_t n, uint64_t stream, size_t *done_bytes,
                                  uint64_t *idle_next) {
  *done_bytes = 0;
  *idle_next = 0;
  rgpu_client_lock(c);
  int k = -1;
  rgpu_client_lane *l = lane_get_locked(c, &k);
  if (!l) {
    rgpu_client_unlock(c);
    return 0; /* not taken: *done_bytes stays 0 */
  }
  size_t chunk = rgpu_client_chunk_bytes(c);
  size_t nchunks = (n + chunk - 1) / chunk;
  /* As many requests in flight as the inline copy allows itself. */
  enum { WINDOW = 16 };
  uint64_t seqs[WINDOW];
  uint64_t first = rgpu_client_next_seq_locked(c);
  rgpu_client_count_round_trip_locked(c);
  rgpu_status rc = rgpu_client_bind_device_locked(c, device);
  uint32_t status = 0;
  char msg[256] = "";
  size_t sent = 0, done = 0;
  uint64_t last = 0;
  int lane_failed = 0;
  while (rc == 0 && done < nchunks && !lane_failed) {
    /* Lock held: the next window of requests. */
    for (; rc == 0 && sent < nchunks && sent < done + WINDOW; sent++) {
      size_t off = sent * chunk, len = n - off < chunk ? n - off : chunk;
      rgpu_msg_memcpy_dtoh_bulk_req bulk_req = {
          .src = src + off, .size = len, .stream = stream, .lane = (uint32_t)k};
      rgpu_msg_memcpy_dtoh_req inline_req = {.src = src + off, .size = len, .stream = stream};
      uint64_t seq = rgpu_client_take_seq_locked(c);
      rgpu_call_frame bulk, twin;
      rgpu_frame_memcpy_dtoh_bulk(&bulk, 1, seq, &bulk_req);
      rgpu_frame_memcpy_dtoh(&twin, 1, seq, &inline_req);
      rc = send_bulk_with_twin_locked(c, RGPU_OP_MEMCPY_DTOH_BULK, 1, seq, &bulk, &twin);
      seqs[sent % WINDOW] = seq;
      last = seq;
      l->marker_seq = seq;
      l->marker_seen = 0;
    }
    if (rc) break;
    rgpu_client_unlock(c);
    /* The replies, in order, from the lane: no lock, so the other threads
     * keep using stream 0. */
    ASSERT_NO_LOCK_HELD(c);
    uint64_t got = 0;
    for (; done < sent; done++) {
      size_t off = done * chunk, len = n - off < chunk ? n - off : chunk;
      uint32_t st = 0;
      char m[256];
      if (lane_read_reply(l->conn, seqs[done % WINDOW], dst + off, len, &st, m, sizeof m, &got)) {
        lane_failed = 1;
        break;
      }
      if (st && !status) {
        status = st;
        snprintf(msg, sizeof msg, "%s", m);
      }
    }
    rgpu_client_lock(c);
    rgpu_client_count_bulk_locked(c, 0, got);
  }
  if (lane_failed) {
    RGPU_DEBUG("bulk stream %d failed during a device-to-host copy; finishing on stream 0", k);
    l->broken = 1;
  }
  /* The last request's confirmation on stream 0: everything before it
   * (async errors of earlier work included) has then been read.  After a
   * lane failure it may instead be the whole inline reply (the server had
   * no lane, or ran the twin after a resume): it is read into its chunk. */
  if (rc == 0 && last && !l->marker_seen) {
    size_t li = sent - 1, off = li * chunk, len = n - off < chunk ? n - off : chunk;
    rgpu_client_reply r = {.continued = 1};
    if (lane_failed) {
      r.dst = dst + off;
      r.dst_cap = len;
    }
    rc = rgpu_client_wait_locked(c, last, first, &r);
    if (rc == 0 && r.status && !status) {
      status = r.status;
      snprintf(msg, sizeof msg, "%s", r.msg);
    }
  } else if (rc == 0 && l->marker_seen && l->marker_status && !status) {
    status = l->marker_status;
  }
  l->marker_seq = 0;
  l->marker_seen = 0;
  if (rc == 0 && !status) {
    /* A synchronous copy also synchronizes with earlier work. */
    rc = rgpu_client_drain_locked(c, stream ? stream : RGPU_CLIENT_ALL_STREAMS, UINT64_MAX);
    if (rc == 0 && !lane_failed && done == nchunks) *idle_next = rgpu_client_next_seq_locked(c);
  }
  rgpu_client_unlock(c);
  if (status && msg[0]) RGPU_INFO("device-to-host copy failed: %s", msg);
  return rgpu_client_bulk_dtoh_outcome(rc, status, lane_failed, done * chunk, n, done_bytes);
}

rgpu_status rgpu_client_bulk_dtoh_outcome(rgpu_status rc, uint32_t server_status, int lane_failed,
                                          size_t delivered, size_t n, size_t *done) {
  *done = 0;
  if (rc) return rc;
  /* A server failure is the copy's result, whatever its value: never a
   * reason to copy again inline (CUDA_ERROR_INVALID_VALUE is 1). */
  if (server_status) return (rgpu_status)server_status;
  /* After a lane failure, what the lane did not deliver is copied again,
   * inline, by the caller (reading the device twice is harmless; losing
   * bytes is not). */
  *done = lane_failed ? (delivered < n ? delivered : n) : n;
  return 0;
}
