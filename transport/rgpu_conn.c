/* Generic conn/listener entry points, the plain stream-socket conn, and the
 * relay descriptor registry used across fork(). */
#include "rgpu_transport_internal.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rgpu_array.h"
#include "rgpu_clock.h"

int rgpu_t_fail(char *err, size_t errlen, int code, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return code;
}

int rgpu_t_errno_code(int e) {
  switch (e) {
  case ECONNREFUSED: return RGPU_T_ECONNREFUSED;
  case ETIMEDOUT: return RGPU_T_ETIMEDOUT;
  case EPIPE:
  case ECONNRESET:
  case ENOTCONN:
  case ESHUTDOWN: return RGPU_T_ECLOSED;
  case EINVAL: return RGPU_T_EINVAL;
  case EACCES:
  case EPERM: return RGPU_T_EAUTH;
  default: return RGPU_T_EIO;
  }
}

int rgpu_wait_fd(int fd, short events, int timeout_ms) {
  struct pollfd p = {.fd = fd, .events = events};
  for (;;) {
    int r = poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    return r;
  }
}

int rgpu_wait_writable_reading(int fd, int (*on_readable)(void *ctx), void *ctx) {
  struct pollfd p = {.fd = fd, .events = POLLOUT | POLLIN};
  int pr = poll(&p, 1, -1);
  if (pr < 0 && errno != EINTR) return rgpu_t_errno_code(errno);
  if (pr > 0 && (p.revents & POLLIN) && !(p.revents & POLLOUT)) {
    int rc = on_readable(ctx);
    if (rc < 0) return rc;
  }
  return 0;
}

/* ---- plain fd stream ---------------------------------------------------- */

int rgpu_fd_writev_all(int fd, const struct iovec *iov, int iovcnt) {
  return rgpu_fd_writev_all_reading(fd, iov, iovcnt, NULL, NULL);
}

int rgpu_fd_writev_all_reading(int fd, const struct iovec *iov, int iovcnt,
                               int (*on_readable)(void *ctx), void *ctx) {
  /* The caller's iovec array is const, so walk it with (index, offset) and
   * hand the kernel a window of at most IOV_MAX entries per call. */
  int idx = 0;
  size_t off = 0;
  struct iovec win[64];
  while (idx < iovcnt && iov[idx].iov_len == 0) idx++;
  while (idx < iovcnt) {
    int n = 0;
    for (int i = idx; i < iovcnt && n < (int)(sizeof win / sizeof win[0]); i++) {
      if (iov[i].iov_len == 0) continue;
      win[n].iov_base = (char *)iov[i].iov_base + (i == idx ? off : 0);
      win[n].iov_len = iov[i].iov_len - (i == idx ? off : 0);
      n++;
    }
    struct msghdr mh = {.msg_iov = win, .msg_iovlen = (size_t)n};
    ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL | (on_readable ? MSG_DONTWAIT : 0));
    if (w < 0) {
      if (errno == EINTR) continue;
      if ((errno == EAGAIN || errno == EWOULDBLOCK) && on_readable) {
        /* Full: make room on the other side too if the peer waits for us.
         * (Polling POLLOUT for the client's spin budget before this sleep
         * made no difference to bulk H2D on the H200: not done.) */
        int rc = rgpu_wait_writable_reading(fd, on_readable, ctx);
        if (rc) return rc;
        continue;
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        /* Someone handed us a non-blocking socket; keep blocking semantics. */
        rgpu_wait_fd(fd, POLLOUT, -1);
        continue;
      }
      if (errno == ENOTSOCK) {
        w = writev(fd, win, n);
        if (w < 0) {
          if (errno == EINTR) continue;
          return rgpu_t_errno_code(errno);
        }
      } else {
        return rgpu_t_errno_code(errno);
      }
    }
    size_t left = (size_t)w;
    while (left > 0 && idx < iovcnt) {
      size_t avail = iov[idx].iov_len - off;
      if (left < avail) {
        off += left;
        left = 0;
      } else {
        left -= avail;
        idx++;
        off = 0;
      }
    }
    while (idx < iovcnt && iov[idx].iov_len == 0) idx++;
  }
  return 0;
}

ssize_t rgpu_fd_read_some(int fd, void *buf, size_t len) {
  if (len == 0) return 0;
  for (;;) {
    ssize_t r = read(fd, buf, len);
    if (r >= 0) return r;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      rgpu_wait_fd(fd, POLLIN, -1);
      continue;
    }
    if (errno == ECONNRESET) return RGPU_T_ECLOSED;
    return rgpu_t_errno_code(errno);
  }
}

static int fd_writev(rgpu_conn *c, const struct iovec *iov, int iovcnt) {
  return rgpu_fd_writev_all(c->fd, iov, iovcnt);
}
static int fd_writev_reading(rgpu_conn *c, const struct iovec *iov, int iovcnt,
                             int (*on_readable)(void *ctx), void *ctx) {
  return rgpu_fd_writev_all_reading(c->fd, iov, iovcnt, on_readable, ctx);
}
static ssize_t fd_read(rgpu_conn *c, void *buf, size_t len) {
  return rgpu_fd_read_some(c->fd, buf, len);
}
static size_t fd_pending(const rgpu_conn *c) { return 0; }
static void fd_shutdown(rgpu_conn *c) { shutdown(c->fd, SHUT_WR); }
static void fd_destroy(rgpu_conn *c) {}

const struct rgpu_conn_ops rgpu_fd_conn_ops = {
    .writev_all = fd_writev,
    .writev_reading = fd_writev_reading,
    .read_some = fd_read,
    .pending = fd_pending,
    .shutdown = fd_shutdown,
    .destroy = fd_destroy,
};

int rgpu_fd_conn_new(int fd, const char *name, const char *peer, int raw_visible,
                     rgpu_conn **out) {
  rgpu_conn *c = calloc(1, sizeof *c);
  if (!c) return RGPU_T_EIO;
  c->ops = &rgpu_fd_conn_ops;
  c->fd = fd;
  c->raw_fd_visible = raw_visible;
  snprintf(c->name, sizeof c->name, "%s", name ? name : "fd");
  snprintf(c->peer, sizeof c->peer, "%s", peer ? peer : "");
  *out = c;
  return 0;
}

int rgpu_conn_from_fd(int fd, const char *transport_name, rgpu_conn **out) {
  if (fd < 0 || !out) return RGPU_T_EINVAL;
  char peer[128] = "";
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0)
    rgpu_sockaddr_string((struct sockaddr *)&ss, sl, peer, sizeof peer);
  if (!peer[0]) snprintf(peer, sizeof peer, "fd %d", fd);
  return rgpu_fd_conn_new(fd, transport_name ? transport_name : "fd", peer, 1, out);
}

/* ---- generic entry points ----------------------------------------------- */

int rgpu_conn_connect(const char *uri, const rgpu_transport_opts *opts,
                      rgpu_conn **out, char *err, size_t errlen) {
  rgpu_transport_opts zero = {0};
  if (!opts) opts = &zero;
  if (!out) return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "rgpu_conn_connect: no output pointer");
  *out = NULL;
  rgpu_uri u;
  int rc = rgpu_uri_parse(uri, &u, err, errlen);
  if (rc) return rc;
  if (u.scheme == RGPU_URI_TLS) return rgpu_tls_connect(&u, opts, out, err, errlen);
  if (u.scheme == RGPU_URI_QUIC) return rgpu_quic_connect(&u, opts, out, err, errlen);
  char peer[128];
  int fd = rgpu_tcp_connect_socket(&u, opts, peer, sizeof peer, err, errlen);
  if (fd < 0) return fd;
  rc = rgpu_fd_conn_new(fd, rgpu_uri_scheme_name(u.scheme), peer, 1, out);
  if (rc) close(fd);
  return rc;
}

int rgpu_conn_writev_all(rgpu_conn *c, const struct iovec *iov, int iovcnt) {
  if (!c || iovcnt < 0 || (iovcnt > 0 && !iov)) return RGPU_T_EINVAL;
  return c->ops->writev_all(c, iov, iovcnt);
}

int rgpu_conn_writev_all_reading(rgpu_conn *c, const struct iovec *iov, int iovcnt,
                                 int (*on_readable)(void *ctx), void *ctx) {
  if (!c || iovcnt < 0 || (iovcnt > 0 && !iov)) return RGPU_T_EINVAL;
  if (!on_readable || !c->ops->writev_reading) return c->ops->writev_all(c, iov, iovcnt);
  return c->ops->writev_reading(c, iov, iovcnt, on_readable, ctx);
}

ssize_t rgpu_conn_read_some(rgpu_conn *c, void *buf, size_t len) {
  if (!c || (!buf && len)) return RGPU_T_EINVAL;
  return c->ops->read_some(c, buf, len);
}

int rgpu_conn_read_exact(rgpu_conn *c, void *buf, size_t len) {
  if (!c || (!buf && len)) return RGPU_T_EINVAL;
  char *p = buf;
  while (len > 0) {
    ssize_t r = c->ops->read_some(c, p, len);
    if (r == 0) {
      if (!c->errmsg[0])
        snprintf(c->errmsg, sizeof c->errmsg, "%s peer %s closed the connection", c->name, c->peer);
      return RGPU_T_ECLOSED;
    }
    if (r < 0) return (int)r;
    p += r;
    len -= (size_t)r;
  }
  return 0;
}

int rgpu_conn_read_exact_by(rgpu_conn *c, void *buf, size_t len, int stop_fd,
                            uint64_t deadline_ns) {
  uint8_t *p = buf;
  while (len) {
    uint64_t now = rgpu_clock_ns();
    if (now >= deadline_ns) return RGPU_T_ETIMEDOUT;
    int ms = (int)((deadline_ns - now + 999999) / 1000000);
    int w = rgpu_conn_wait_input(c, stop_fd, ms);
    if (w == 2) return RGPU_T_ECLOSED;
    if (w == 0) continue; /* the deadline decides */
    ssize_t r = rgpu_conn_read_some(c, p, len);
    if (r == 0) return RGPU_T_ECLOSED;
    if (r < 0) return (int)r;
    p += r;
    len -= (size_t)r;
  }
  return 0;
}

int rgpu_conn_poll_fd(const rgpu_conn *c) { return c ? c->fd : -1; }
size_t rgpu_conn_pending(const rgpu_conn *c) { return c ? c->ops->pending(c) : 0; }
void rgpu_conn_shutdown(rgpu_conn *c) {
  if (c) c->ops->shutdown(c);
}

int rgpu_conn_wait_input(rgpu_conn *c, int extra_fd, int timeout_ms) {
  if (c && c->ops->wait_input) return c->ops->wait_input(c, extra_fd, timeout_ms);
  if (c && c->ops->pending(c)) return 1;
  struct pollfd pf[2];
  int n = 0, ci = -1, xi = -1;
  if (c && c->fd >= 0) {
    pf[n] = (struct pollfd){c->fd, POLLIN, 0};
    ci = n++;
  }
  if (extra_fd >= 0) {
    pf[n] = (struct pollfd){extra_fd, POLLIN, 0};
    xi = n++;
  }
  if (n == 0) return 1;
  for (;;) {
    int pr = poll(pf, (nfds_t)n, timeout_ms);
    if (pr < 0 && errno == EINTR) continue;
    if (pr < 0) return 1; /* the read reports it */
    if (pr == 0) return 0;
    if (ci >= 0 && pf[ci].revents) return 1; /* the conn's bytes first */
    if (xi >= 0 && pf[xi].revents) return 2;
    return 1;
  }
}

void rgpu_conn_abort(rgpu_conn *c) {
  if (!c) return;
  if (c->ops->abort)
    c->ops->abort(c);
  else if (c->fd >= 0)
    shutdown(c->fd, SHUT_RDWR);
}
void rgpu_conn_close(rgpu_conn *c) {
  if (!c) return;
  c->ops->destroy(c); /* may close c->fd itself and set it to -1 */
  if (c->fd >= 0) close(c->fd);
  free(c);
}
const char *rgpu_conn_transport_name(const rgpu_conn *c) { return c ? c->name : ""; }
const char *rgpu_conn_peer(const rgpu_conn *c) { return c ? c->peer : ""; }
const char *rgpu_conn_error(const rgpu_conn *c) { return c ? c->errmsg : ""; }
uint64_t rgpu_conn_session_key(const rgpu_conn *c) { return c ? c->session_key : 0; }
int rgpu_conn_stream_index(const rgpu_conn *c) { return c ? c->stream_index : 0; }
int rgpu_conn_raw_fd(const rgpu_conn *c) {
  return (c && c->raw_fd_visible) ? c->fd : -1;
}

/* ---- listeners ---------------------------------------------------------- */

int rgpu_tcp_listener_init(rgpu_listener *l, const rgpu_transport_opts *o, char *err,
                           size_t errlen);

int rgpu_listener_open(const char *uri, const rgpu_transport_opts *opts,
                       rgpu_listener **out, char *err, size_t errlen) {
  rgpu_transport_opts zero = {0};
  if (!opts) opts = &zero;
  if (!out) return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "rgpu_listener_open: no output pointer");
  *out = NULL;
  rgpu_listener *l = calloc(1, sizeof *l);
  if (!l) return rgpu_t_fail(err, errlen, RGPU_T_EIO, "out of memory");
  l->fd = -1;
  int rc = rgpu_uri_parse(uri, &l->uri, err, errlen);
  if (!rc) {
    switch (l->uri.scheme) {
    case RGPU_URI_TLS: rc = rgpu_tls_listen(l, opts, err, errlen); break;
    case RGPU_URI_QUIC: rc = rgpu_quic_listen(l, opts, err, errlen); break;
    default: rc = rgpu_tcp_listener_init(l, opts, err, errlen); break;
    }
  }
  if (rc) {
    free(l);
    return rc;
  }
  *out = l;
  return 0;
}

int rgpu_listener_poll_fd(const rgpu_listener *l) { return l ? l->fd : -1; }
int rgpu_listener_accept(rgpu_listener *l, rgpu_conn **out, char *err, size_t errlen) {
  if (!l || !out) return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "rgpu_listener_accept: bad arguments");
  *out = NULL;
  return l->ops->accept(l, out, err, errlen);
}
const char *rgpu_listener_address(const rgpu_listener *l) { return l ? l->address : ""; }
uint16_t rgpu_listener_port(const rgpu_listener *l) { return l ? l->port : 0; }
int rgpu_listener_reload(rgpu_listener *l, const rgpu_transport_opts *opts, char *err,
                         size_t errlen) {
  if (!l || !opts)
    return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "rgpu_listener_reload: bad arguments");
  return l->ops->reload ? l->ops->reload(l, opts, err, errlen) : 0;
}
void rgpu_listener_close(rgpu_listener *l) {
  if (!l) return;
  l->ops->close(l);
  free(l);
}

/* ---- relay descriptor registry ------------------------------------------ */

static pthread_mutex_t relay_lock = PTHREAD_MUTEX_INITIALIZER;
static int *relay_fds;
static size_t relay_nfds, relay_cap;
static pid_t relay_owner_pid;
static pthread_once_t relay_once = PTHREAD_ONCE_INIT;

static void relay_prepare(void) { pthread_mutex_lock(&relay_lock); }
static void relay_parent(void) { pthread_mutex_unlock(&relay_lock); }
static void relay_child(void) {
  /* The relay threads do not exist here; the descriptors they own must not
   * outlive the fork, or peers and workers never see EOF. */
  for (size_t i = 0; i < relay_nfds; i++) close(relay_fds[i]);
  relay_nfds = 0;
  pthread_mutex_unlock(&relay_lock);
}
static void relay_init(void) {
  relay_owner_pid = getpid();
  pthread_atfork(relay_prepare, relay_parent, relay_child);
}

void rgpu_relay_fd_register(int fd) {
  if (fd < 0) return;
  pthread_once(&relay_once, relay_init);
  pthread_mutex_lock(&relay_lock);
  /* Without memory the fd stays unregistered (a forked child then keeps
   * it open), as before. */
  if (!RGPU_ARRAY_RESERVE(relay_fds, relay_cap, relay_nfds + 1, 64)) relay_fds[relay_nfds++] = fd;
  pthread_mutex_unlock(&relay_lock);
}

void rgpu_relay_fd_unregister(int fd) {
  if (fd < 0) return;
  pthread_once(&relay_once, relay_init);
  pthread_mutex_lock(&relay_lock);
  for (size_t i = 0; i < relay_nfds; i++) {
    if (relay_fds[i] == fd) {
      relay_fds[i] = relay_fds[--relay_nfds];
      break;
    }
  }
  pthread_mutex_unlock(&relay_lock);
}

int rgpu_relay_in_forked_child(void) {
  pthread_once(&relay_once, relay_init);
  return getpid() != relay_owner_pid;
}
