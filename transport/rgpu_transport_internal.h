/* Internal plumbing shared by the transport implementations.  Not installed,
 * not included by anyone outside transport/. */
#ifndef RGPU_TRANSPORT_INTERNAL_H
#define RGPU_TRANSPORT_INTERNAL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* accept4, EAI_ADDRFAMILY, UDP_SEGMENT, ppoll */
#endif

#include "rgpu_transport.h"

#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/socket.h>

/* Unfinished handshakes a TLS or QUIC relay holds at most, and the age from
 * which the oldest of them gives its slot to a new client when all are
 * taken (issue 14: silent peers must not lock real clients out). */
#define RGPU_T_MAX_PENDING_HANDSHAKES 256
#define RGPU_T_HS_EVICT_AGE_MS 1000

/* Every conn is a vtable plus a file descriptor.  For tcp/unix and the
 * relayed server side of tls/quic the fd is the stream itself; the TLS client
 * keeps the TCP socket there and routes I/O through GnuTLS; the QUIC client
 * keeps its end of a socketpair to the connection's I/O thread. */
struct rgpu_conn_ops {
  int (*writev_all)(rgpu_conn *c, const struct iovec *iov, int iovcnt);
  /* Optional (NULL: writev_all): rgpu_conn_writev_all_reading. */
  int (*writev_reading)(rgpu_conn *c, const struct iovec *iov, int iovcnt,
                        int (*on_readable)(void *ctx), void *ctx);
  ssize_t (*read_some)(rgpu_conn *c, void *buf, size_t len);
  size_t (*pending)(const rgpu_conn *c);
  void (*shutdown)(rgpu_conn *c);
  void (*destroy)(rgpu_conn *c); /* releases impl; generic code closes fd */
  /* Optional (NULL: poll the fd): rgpu_conn_wait_input. */
  int (*wait_input)(rgpu_conn *c, int extra_fd, int timeout_ms);
  /* Optional (NULL: shutdown(fd, SHUT_RDWR)): rgpu_conn_abort. */
  void (*abort)(rgpu_conn *c);
};

struct rgpu_conn {
  const struct rgpu_conn_ops *ops;
  int fd;
  int raw_fd_visible; /* rgpu_conn_raw_fd() returns fd only when this is set */
  char name[8];
  char peer[128];
  char errmsg[256]; /* why the last failing read/write failed, if known */
  uint64_t session_key; /* quic: shared by the streams of one connection */
  int stream_index;     /* quic: 0 = the connection's first stream */
  void *impl;
};

struct rgpu_listener_ops {
  int (*accept)(rgpu_listener *l, rgpu_conn **out, char *err, size_t errlen);
  void (*close)(rgpu_listener *l);
  /* Re-read certificate files for new connections (NULL: nothing to reload). */
  int (*reload)(rgpu_listener *l, const rgpu_transport_opts *o, char *err, size_t errlen);
};

struct rgpu_listener {
  const struct rgpu_listener_ops *ops;
  int fd;                   /* what rgpu_listener_poll_fd returns */
  rgpu_uri uri;
  char address[300];
  uint16_t port;
  void *impl;
};

/* Error text helper: writes into err (may be NULL) and returns code. */
int rgpu_t_fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Maps an errno value to an RGPU_T_E* code. */
int rgpu_t_errno_code(int e);

/* The keep-alive interval in ms that o asks for: keepalive_ms as given, or
 * for 0 a third of the idle timeout (idle_timeout_ms, else default_idle_ms;
 * 0 when neither is set).  <0: off.  TCP probes and QUIC PINGs follow the
 * same rule (rgpu_transport_opts); QUIC's idle timeout defaults to 30 s,
 * TCP has none. */
static inline int rgpu_t_keepalive_ms(const rgpu_transport_opts *o, int default_idle_ms) {
  if (o->keepalive_ms != 0) return o->keepalive_ms;
  int idle = o->idle_timeout_ms > 0 ? o->idle_timeout_ms : default_idle_ms;
  return idle > 0 ? idle / 3 : 0;
}

/* Plain stream-socket ops (tcp, unix, relayed tls/quic worker ends). */
extern const struct rgpu_conn_ops rgpu_fd_conn_ops;
int rgpu_fd_conn_new(int fd, const char *name, const char *peer, int raw_visible,
                     rgpu_conn **out);
/* sendmsg/recv loops usable by any fd-backed implementation. */
int rgpu_fd_writev_all(int fd, const struct iovec *iov, int iovcnt);
/* on_readable non-NULL: rgpu_conn_writev_all_reading's contract on fd. */
int rgpu_fd_writev_all_reading(int fd, const struct iovec *iov, int iovcnt,
                               int (*on_readable)(void *ctx), void *ctx);
ssize_t rgpu_fd_read_some(int fd, void *buf, size_t len);

/* Socket helpers (rgpu_tcp.c). */
int rgpu_sockaddr_string(const struct sockaddr *sa, socklen_t len, char *buf,
                         size_t buflen);
int rgpu_tcp_connect_socket(const rgpu_uri *u, const rgpu_transport_opts *o,
                            char *peer, size_t peerlen, char *err, size_t errlen);
int rgpu_tcp_listen_socket(const rgpu_uri *u, const rgpu_transport_opts *o,
                           char *address, size_t addrlen, uint16_t *port,
                           char *err, size_t errlen);
int rgpu_tcp_apply_opts(int fd, const rgpu_transport_opts *o, char *err, size_t errlen);
int rgpu_set_nonblock(int fd, int on);
int rgpu_wait_fd(int fd, short events, int timeout_ms);
/* A write on fd would block: waits until fd is writable, calling
 * on_readable(ctx) when only input is there (rgpu_conn_writev_all_reading's
 * contract).  0 to retry the write, or a negative code. */
int rgpu_wait_writable_reading(int fd, int (*on_readable)(void *ctx), void *ctx);

/* Per-scheme entry points. */
int rgpu_tls_connect(const rgpu_uri *u, const rgpu_transport_opts *o,
                     rgpu_conn **out, char *err, size_t errlen);
int rgpu_tls_listen(rgpu_listener *l, const rgpu_transport_opts *o, char *err,
                    size_t errlen);
int rgpu_quic_connect(const rgpu_uri *u, const rgpu_transport_opts *o,
                      rgpu_conn **out, char *err, size_t errlen);
int rgpu_quic_listen(rgpu_listener *l, const rgpu_transport_opts *o, char *err,
                     size_t errlen);

/* The QUIC congestion controller used toward `peer` when the options name
 * none: "cubic" for a loopback address, "bbr2" otherwise (rgpu_quic.c says
 * why).  For tests. */
const char *rgpu_quic_default_cc_name(const struct sockaddr *peer);

/* Relay bookkeeping shared by the TLS and QUIC listeners: every descriptor a
 * relay owns is registered here so that a forked worker can close them all in
 * its pthread_atfork child handler.  A worker that kept a copy of another
 * client's socket (or of its own relay end) would stop peers seeing EOF. */
void rgpu_relay_fd_register(int fd);
void rgpu_relay_fd_unregister(int fd);
/* True in a process forked from the one that created the relays. */
int rgpu_relay_in_forked_child(void);

/* Hand-off from a relay thread to rgpu_listener_accept: finished
 * handshakes queue the worker end of their socketpair here, and one byte in
 * the notify pipe per entry makes the listener's poll fd readable. */
typedef struct rgpu_relay_item {
  struct rgpu_relay_item *next;
  int fd;
  char peer[128];
  uint64_t session_key;
  int stream_index;
} rgpu_relay_item;

typedef struct {
  pthread_mutex_t mu;
  rgpu_relay_item *head, *tail; /* an rgpu_fifo linked through next, under mu */
  int notify_r, notify_w; /* accept queue */
  int stop_r, stop_w;     /* wakes the relay thread to exit */
} rgpu_relay_queue;

int rgpu_relay_queue_init(rgpu_relay_queue *q, char *err, size_t errlen);
void rgpu_relay_queue_push(rgpu_relay_queue *q, int worker_fd, const char *peer,
                           uint64_t session_key, int stream_index);
int rgpu_relay_queue_pop(rgpu_relay_queue *q, const char *name, rgpu_conn **out,
                         char *err, size_t errlen);
/* Closes queued, never-accepted worker ends and the pipes. */
void rgpu_relay_queue_destroy(rgpu_relay_queue *q);
/* A socketpair for one relayed session: relay end non-blocking, worker end
 * blocking; both registered for closing in forked children. */
int rgpu_relay_socketpair(int *relay_end, int *worker_end);
void rgpu_relay_close_fd(int fd); /* unregister + close */

#endif
