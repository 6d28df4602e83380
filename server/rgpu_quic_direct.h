/* rgpu_quic_direct: a quic:// session's own QUIC endpoint in its worker
 * (issue 21; docs/architecture.md, "Direct QUIC sessions").
 *
 * A quic:// session reaches its worker through the listener's relay.  When
 * the client asks (RGPU_CAP_QUIC_DIRECT) and the session can be resumed,
 * HELLO's reply (and the reply to a RESUME that came through the relay)
 * names a UDP port the worker listens on itself.  The client connects
 * there and sends RESUME; the worker checks the session token and takes
 * the new connection as its session's (adopt_conn in rgpu_worker.c), and
 * the relayed one ends.  Nothing of the session is lost on any path: the
 * move is a resume, and a client that cannot reach the port stays on the
 * relay.
 *
 * Threads: an accept thread per offer waits for the client's handshake and
 * its RESUME (bounded in time), then hands the conn to the session thread
 * through notify_fd; bulk lanes the client opens on the direct connection
 * come the same way.  Everything else runs on the session thread. */
#ifndef RGPU_QUIC_DIRECT_H
#define RGPU_QUIC_DIRECT_H

#include <stdint.h>

#include "rgpu_transport.h"

typedef struct rgpu_worker rgpu_worker;

/* How long an offered port waits for its client's handshake, and then for
 * its RESUME frame. */
#define RGPU_QUIC_DIRECT_ACCEPT_MS 10000
#define RGPU_QUIC_DIRECT_RESUME_MS 5000

/* Session thread.  Opens a port for this session's client and starts
 * waiting there; returns it, or 0 when the session stays relayed (not
 * quic://, the client did not ask, no resume, the port could not be
 * opened: logged).  An earlier offer still waiting is withdrawn. */
uint16_t rgpu_quic_direct_offer(rgpu_worker *w, uint32_t client_caps);

/* Readable while a conn waits for the session thread; -1 before any offer. */
int rgpu_quic_direct_notify_fd(rgpu_worker *w);

/* Session thread, when notify_fd polled readable (it is drained here;
 * take the lanes next): the client's direct conn, checked (its RESUME
 * carried this session's token), with the byte count of that RESUME; 1
 * when there is one, else 0. */
int rgpu_quic_direct_take(rgpu_worker *w, rgpu_conn **conn, uint64_t *rx_bytes);

/* Session thread: a bulk lane the client opened on the direct connection,
 * or NULL (then notify_fd is drained unless a conn waits). */
rgpu_conn *rgpu_quic_direct_take_lane(rgpu_worker *w);

/* Whether a checked direct conn waits for rgpu_quic_direct_take. */
int rgpu_quic_direct_conn_waiting(rgpu_worker *w);

/* Session thread, after adopting a direct conn: its later streams are
 * bulk lanes (rgpu_quic_direct_take_lane). */
void rgpu_quic_direct_watch(rgpu_worker *w, rgpu_conn *conn);

/* Session end: the accept thread stops, waiting conns are closed.  After
 * every direct conn has been closed (their I/O threads call into this
 * state). */
void rgpu_quic_direct_free(rgpu_worker *w);

#endif
