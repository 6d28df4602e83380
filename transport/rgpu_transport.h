/* rgpu_transport: one byte-stream interface over tcp://, unix://, tls://, quic://.
 *
 * Everything above this layer (client core, server worker) sees a reliable,
 * ordered byte stream with blocking reads and gathered writes.  The URI
 * chooses the implementation.  Ownership follows libuv's habit: the caller
 * owns the handle returned by connect/accept and must close it exactly once;
 * the transport owns nothing of the caller's buffers after a call returns.
 *
 * Errors: every function that can fail returns a negative errno-style code
 * (RGPU_T_E*) and, where an `err` buffer is given, writes a sentence a user
 * can act on ("connect to 10.0.0.2:7000: connection refused").  No function
 * in this layer calls exit() or abort() on bad input or a failed peer. */
#ifndef RGPU_TRANSPORT_H
#define RGPU_TRANSPORT_H

#include <stddef.h>
#include <time.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  RGPU_URI_TCP = 1,
  RGPU_URI_UNIX = 2,
  RGPU_URI_TLS = 3,
  RGPU_URI_QUIC = 4
} rgpu_uri_scheme;

typedef struct {
  rgpu_uri_scheme scheme;
  char host[256]; /* tcp/tls/quic: host name or address ("[::1]" unbracketed) */
  uint16_t port;  /* tcp/tls/quic */
  char path[108]; /* unix: socket path */
} rgpu_uri;

/* Options shared by all transports; zero-initialise, then set what you need.
 * Strings are borrowed for the duration of the call only. */
typedef struct {
  const char *cc_algo;   /* TCP_CONGESTION / QUIC cc ("cubic", "bbr", "bbr2", "reno"); NULL = default
                          * (TCP: the kernel's; QUIC: bbr2, see transport/README.md) */
  int connect_timeout_ms;/* 0 = 10000 */
  /* TLS / QUIC (issue 4) */
  const char *ca_file;   /* client: CA or pinned server certificate (PEM) */
  const char *cert_file; /* server cert, or client cert for mutual TLS */
  const char *key_file;
  const char *server_name; /* client: name to verify; NULL = host part of URI */
  int idle_timeout_ms;   /* QUIC idle timeout; TCP/TLS: TCP_USER_TIMEOUT. 0 = default (QUIC 30 s) */
  int keepalive_ms;      /* Probe interval: QUIC PINGs, TCP/TLS SO_KEEPALIVE.  0 = a third of
                          * the idle timeout where one is set (QUIC: always; idle sessions
                          * survive, dead links are noticed), else off; <0 = off */
  /* Added after the first interface (append only; zero keeps the old behaviour). */
  int sock_buf_bytes;    /* >0 forces SO_SNDBUF/SO_RCVBUF; 0 lets the kernel autotune (best for TCP) */
  const char *client_ca_file; /* server: require client certificates signed by this CA (mutual TLS) */
  int handshake_timeout_ms;   /* server: TLS/QUIC handshake deadline per client; 0 = 10000 */
  /* quic:// server: bidirectional streams a client may open per connection
   * (0 = 1: just the session).  Raise it only if the server routes accepted
   * conns with rgpu_conn_stream_index() > 0 to the worker that owns
   * rgpu_conn_session_key(); each such stream arrives through
   * rgpu_listener_accept like a new connection. */
  int quic_max_streams;
  /* quic://: longest wait between loss probes while packets are outstanding
   * (issue 21).  ngtcp2 doubles its probe timeout after every unanswered
   * probe, so a 10 s outage used to cost up to 10 s more before the first
   * probe after it; with the cap a probe goes out at least this often, and
   * an outage costs about its length plus one round trip.  0 = 1000 ms,
   * <0 = ngtcp2's unbounded doubling.  Never shorter than one plain PTO. */
  int quic_max_pto_ms;
} rgpu_transport_opts;

/* quic:// client: what the connection runs with and how it is doing, for
 * tests and benchmarks. */
typedef struct {
  char cc[8];              /* congestion controller: "cubic", "reno", "bbr", "bbr2" */
  uint64_t max_pto_ms;     /* the probe-interval cap in force (0 = none) */
  uint64_t idle_timeout_ms;/* negotiated idle timeout */
  uint64_t srtt_us, min_rtt_us;
  uint64_t cwnd_bytes, bytes_in_flight;
  uint64_t pto_count;      /* consecutive unanswered probe timeouts now */
  uint64_t capped_probes;  /* probe timeouts fired early by the cap, so far */
  uint64_t peer_max_ack_delay_ms; /* the ACK delay the server announced */
  int connect_waited_confirm; /* connect waited for HANDSHAKE_DONE (the server asked for a
                               * client certificate); else it returned after our Finished */
  uint64_t max_udp_payload;/* current datagram payload size (after PMTUD) */
} rgpu_quic_info;

typedef struct rgpu_conn rgpu_conn;
typedef struct rgpu_listener rgpu_listener;

enum {
  RGPU_T_OK = 0,
  RGPU_T_EINVAL = -22,   /* bad URI or option */
  RGPU_T_ECLOSED = -32,  /* peer closed / EOF in the middle of data */
  RGPU_T_ETIMEDOUT = -110,
  RGPU_T_ECONNREFUSED = -111,
  RGPU_T_EAUTH = -13,    /* certificate or handshake verification failed */
  RGPU_T_ENOTSUP = -95,  /* scheme not built in */
  RGPU_T_EIO = -5
};

/* Parses "tcp://host:port", "unix:///path", "tls://host:port", "quic://host:port". */
int rgpu_uri_parse(const char *text, rgpu_uri *out, char *err, size_t errlen);
const char *rgpu_uri_scheme_name(rgpu_uri_scheme s);

/* Client side. */
int rgpu_conn_connect(const char *uri, const rgpu_transport_opts *opts,
                      rgpu_conn **out, char *err, size_t errlen);

/* Wraps an already connected stream socket (socketpair, accepted fd handed
 * to a worker).  Takes ownership of fd. */
int rgpu_conn_from_fd(int fd, const char *transport_name, rgpu_conn **out);

/* Writes every byte of iov[0..iovcnt) or fails; returns 0 or RGPU_T_E*. */
int rgpu_conn_writev_all(rgpu_conn *c, const struct iovec *iov, int iovcnt);
/* The same, for a writer that also owns the read side: while the write
 * cannot go on and c has bytes to read, calls on_readable(ctx), which must
 * read some (a negative return ends the write with that code).  Why: a
 * peer blocked writing to us stops reading from us; if we then block
 * writing to it, neither ever goes on (a program queueing many requests
 * that each fail asynchronously, each failure an event the server writes
 * back).  tcp, unix and quic connections do this; tls:// writes block as
 * rgpu_conn_writev_all does (its records are not resumable mid-write). */
int rgpu_conn_writev_all_reading(rgpu_conn *c, const struct iovec *iov, int iovcnt,
                                 int (*on_readable)(void *ctx), void *ctx);
/* Reads exactly len bytes; returns 0, RGPU_T_ECLOSED on EOF, or RGPU_T_E*. */
int rgpu_conn_read_exact(rgpu_conn *c, void *buf, size_t len);
/* The same, done by deadline_ns (rgpu_clock_ns) or RGPU_T_ETIMEDOUT, and
 * RGPU_T_ECLOSED as soon as stop_fd (-1: none) polls readable. */
int rgpu_conn_read_exact_by(rgpu_conn *c, void *buf, size_t len, int stop_fd,
                            uint64_t deadline_ns);
/* Reads what is available, blocking for at least one byte; >0 bytes read,
 * 0 on orderly EOF, <0 RGPU_T_E*. */
ssize_t rgpu_conn_read_some(rgpu_conn *c, void *buf, size_t len);
/* A file descriptor that polls readable when rgpu_conn_read_some would not
 * block (for transports with their own buffering this is an eventfd/pipe). */
int rgpu_conn_poll_fd(const rgpu_conn *c);
/* Bytes already buffered inside the transport (TLS records, QUIC streams). */
size_t rgpu_conn_pending(const rgpu_conn *c);
/* Waits until a read on c would not block (1), extra_fd (-1: none) polls
 * readable (2), or timeout_ms passed (0; < 0 waits without end).  Prefer
 * it to polling rgpu_conn_poll_fd: a direct QUIC conn's waiting thread
 * reads the UDP socket itself, where its poll fd only tells what another
 * thread already read.  A failure returns 1: the read reports it. */
int rgpu_conn_wait_input(rgpu_conn *c, int extra_fd, int timeout_ms);
/* Ends c both ways at once, so that threads blocked reading or writing it
 * return (EOF or an error); the conn must still be closed.  For fd conns
 * shutdown(SHUT_RDWR); a QUIC stream is reset. */
void rgpu_conn_abort(rgpu_conn *c);
/* Half-closes the sending direction (graceful end of session). */
void rgpu_conn_shutdown(rgpu_conn *c);
void rgpu_conn_close(rgpu_conn *c);
/* "tcp", "unix", "tls", "quic". */
const char *rgpu_conn_transport_name(const rgpu_conn *c);
/* Human-readable peer address, for logs. */
const char *rgpu_conn_peer(const rgpu_conn *c);
/* For tcp/unix: the socket itself (so a listener can hand it to a worker);
 * -1 for transports that must be relayed. */
int rgpu_conn_raw_fd(const rgpu_conn *c);
/* A sentence saying why the last read or write on c failed ("TLS connection
 * to 10.0.0.2:7000: the peer refused the handshake: Certificate is
 * required"), or "" when the transport knows nothing beyond the code. */
const char *rgpu_conn_error(const rgpu_conn *c);

/* quic:// client only: moves the connection to a new local UDP socket
 * (after a network change, or to test that the server follows); the session
 * and its stream survive.  RGPU_T_ENOTSUP for other transports. */
int rgpu_conn_migrate(rgpu_conn *c, char *err, size_t errlen);

/* quic:// client only: opens another bidirectional stream on the same QUIC
 * connection (one per host thread: a stalled stream does not hold up the
 * others).  *out is closed with rgpu_conn_close, before or after c; closing
 * c ends the whole connection.  RGPU_T_ENOTSUP for other transports or when
 * the server allows no more streams (see quic_max_streams). */
int rgpu_conn_open_stream(rgpu_conn *c, rgpu_conn **out, char *err, size_t errlen);
/* quic:// client: how long a thread that waits for bytes polls the UDP
 * socket before it sleeps (yielding the CPU each round); 0: it sleeps at
 * once.  The default is RGPU_SPIN_US or 2000.  Applies to every stream of the connection.  No
 * effect on other transports, whose waiting threads poll in the caller
 * (rgpu_spin_readable on the poll fd). */
void rgpu_conn_set_poll_us(rgpu_conn *c, unsigned us);
/* quic:// client only: fills *out (see rgpu_quic_info).  RGPU_T_ENOTSUP for
 * other transports, RGPU_T_ECLOSED once the connection has ended. */
int rgpu_conn_quic_info(rgpu_conn *c, rgpu_quic_info *out, char *err, size_t errlen);
/* Server side of quic://: conns that are streams of one QUIC connection
 * share a non-zero session key; the stream index is 0 for the connection's
 * first stream.  Other transports: 0 and 0. */
uint64_t rgpu_conn_session_key(const rgpu_conn *c);
int rgpu_conn_stream_index(const rgpu_conn *c);

/* quic:// direct sessions (issue 21).  A worker that serves a session
 * relayed through the listener can take the client's QUIC connection
 * itself, on a UDP socket of its own: no relay thread and no socketpair
 * copy between client and worker.  The client reaches it as a session
 * resume (docs/architecture.md, "Direct QUIC sessions").
 *
 * rgpu_quic_direct_socket: a UDP socket bound to host (the listener's
 * address; "" or "0.0.0.0" for any) on a free port of port_lo..port_hi
 * (tried from a random one on), or one the kernel picks (0, 0).  0 with *fd
 * and *port, or RGPU_T_E* with err (every port of the range taken: what
 * bind said). */
int rgpu_quic_direct_socket(const char *host, uint16_t port_lo, uint16_t port_hi, int *fd,
                            uint16_t *port, char *err, size_t errlen);
/* Takes fd (closed on every path) and waits until one client finished its
 * QUIC handshake there (o: cert_file, key_file, client_ca_file, cc_algo,
 * idle_timeout_ms, keepalive_ms, quic_max_pto_ms, quic_max_streams) and
 * opened its first stream; *out is that stream's conn, which behaves like
 * a quic:// client conn (rgpu_conn_wait_input, rgpu_conn_set_poll_us).
 * Handshakes that fail are dropped and the wait goes on.  Returns 0,
 * RGPU_T_ETIMEDOUT after timeout_ms, RGPU_T_ECLOSED once stop_fd (-1:
 * none) polls readable, or RGPU_T_E*. */
int rgpu_quic_direct_accept(int fd, const rgpu_transport_opts *o, int stop_fd, int timeout_ms,
                            rgpu_conn **out, char *err, size_t errlen);
/* A conn from rgpu_quic_direct_accept: streams its client opens later are
 * handed to fn (on the connection's I/O thread, which owns nothing the
 * handler may need; each stream conn is the handler's to close).  Streams
 * that came before a handler was set wait for it.  No effect on others. */
void rgpu_conn_set_stream_handler(rgpu_conn *c, void (*fn)(void *ctx, rgpu_conn *stream),
                                  void *ctx);

/* Hands conn c (one with a raw fd: tcp, unix, or an accepted tls/quic conn)
 * to another process over a connected AF_UNIX socket `chan` (SCM_RIGHTS),
 * with its transport name, peer, session key and stream index.  c stays
 * open here; close it after sending.  The listener uses this to route an
 * extra QUIC stream to the worker that owns its session. */
int rgpu_conn_send(int chan, const rgpu_conn *c, char *err, size_t errlen);
/* Receives one conn sent with rgpu_conn_send (blocking).  Returns 0 and
 * *out, RGPU_T_ECLOSED when the channel is closed, or RGPU_T_E*. */
int rgpu_conn_recv(int chan, rgpu_conn **out, char *err, size_t errlen);

/* Server side. */
int rgpu_listener_open(const char *uri, const rgpu_transport_opts *opts,
                       rgpu_listener **out, char *err, size_t errlen);
int rgpu_listener_poll_fd(const rgpu_listener *l);
/* Accepts one connection (blocking unless the poll fd was readable).
 * Returns 0 and *out, or RGPU_T_E*. */
int rgpu_listener_accept(rgpu_listener *l, rgpu_conn **out, char *err, size_t errlen);
/* The bound address ("127.0.0.1:7000"); port 0 in the URI picks a free one. */
const char *rgpu_listener_address(const rgpu_listener *l);
uint16_t rgpu_listener_port(const rgpu_listener *l);
void rgpu_listener_close(rgpu_listener *l);
/* Re-reads the certificate, key and client CA named in opts (tls://,
 * quic://; others have nothing to re-read: 0).  New handshakes use them;
 * connections already open keep theirs.  On failure the listener keeps its
 * current credentials and err says why. */
int rgpu_listener_reload(rgpu_listener *l, const rgpu_transport_opts *opts, char *err,
                         size_t errlen);

/* Writes dir/cert.pem and dir/key.pem: a self-signed ECDSA P-256 certificate
 * valid for every name in `hostnames` (comma list; entries that parse as
 * IPv4/IPv6 addresses become IP SANs, the rest DNS SANs), for
 * `rgpu-server --gen-cert DIR`.  The directory must exist.  The key file is
 * created mode 0600.  Clients pin cert.pem with opts->ca_file. */
int rgpu_tls_generate_self_signed(const char *dir, const char *hostnames,
                                  char *err, size_t errlen);

/* A server certificate's validity against `now` (issue 14: a server used to
 * start on an expired certificate without a word, and every client then
 * failed verification).  Returns 0 when valid; RGPU_T_EINVAL when expired;
 * 1 when not yet valid (the server's clock may be behind: a warning, not a
 * refusal); in both cases err holds a sentence with the dates. */
int rgpu_tls_cert_check_dates(const char *cert_file, time_t now, char *err, size_t errlen);

/* Whether the first bytes a peer sent are a TLS record (an alert or a
 * handshake such as a ServerHello): a tls:// port spoken to in tcp://. */
int rgpu_bytes_look_like_tls(const unsigned char *p, size_t n);

/* Whether uri is tcp:// to a host other than the loopback: what goes over it
 * (a token included) can be read on the network. */
int rgpu_uri_is_clear_text_network(const char *uri);

#ifdef __cplusplus
}
#endif
#endif
