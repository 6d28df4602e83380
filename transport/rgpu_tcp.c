/* tcp:// and unix:// sockets: connect with a deadline, socket tuning, and the
 * listener whose accepted sockets a server hands straight to its workers. */
#include "rgpu_transport_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "rgpu_clock.h"

int rgpu_set_nonblock(int fd, int on) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0) return -1;
  fl = on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
  return fcntl(fd, F_SETFL, fl);
}

int rgpu_sockaddr_string(const struct sockaddr *sa, socklen_t len, char *buf,
                         size_t buflen) {
  char host[INET6_ADDRSTRLEN];
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
    inet_ntop(AF_INET, &s->sin_addr, host, sizeof host);
    snprintf(buf, buflen, "%s:%u", host, ntohs(s->sin_port));
  } else if (sa->sa_family == AF_INET6) {
    const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;
    inet_ntop(AF_INET6, &s->sin6_addr, host, sizeof host);
    snprintf(buf, buflen, "[%s]:%u", host, ntohs(s->sin6_port));
  } else if (sa->sa_family == AF_UNIX) {
    const struct sockaddr_un *s = (const struct sockaddr_un *)sa;
    if (len > offsetof(struct sockaddr_un, sun_path) && s->sun_path[0])
      snprintf(buf, buflen, "%s", s->sun_path);
    else
      snprintf(buf, buflen, "unix peer");
  } else {
    snprintf(buf, buflen, "?");
    return -1;
  }
  return 0;
}

static void read_available_cc(char *buf, size_t len) {
  buf[0] = 0;
  FILE *f = fopen("/proc/sys/net/ipv4/tcp_available_congestion_control", "r");
  if (!f) {
    snprintf(buf, len, "unknown");
    return;
  }
  if (!fgets(buf, (int)len, f)) snprintf(buf, len, "unknown");
  fclose(f);
  buf[strcspn(buf, "\n")] = 0;
}

int rgpu_tcp_apply_opts(int fd, const rgpu_transport_opts *o, char *err, size_t errlen) {
  int one = 1;
  /* RPC messages are small and latency-bound; Nagle would hold them. */
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (o->cc_algo && *o->cc_algo) {
    const char *cc = o->cc_algo;
    /* "bbr2" is a QUIC (ngtcp2) name; Linux calls its BBR module "bbr". */
    if (!strcmp(cc, "bbr2")) cc = "bbr";
    if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, (socklen_t)strlen(cc)) < 0) {
      char avail[256];
      read_available_cc(avail, sizeof avail);
      return rgpu_t_fail(err, errlen, RGPU_T_EINVAL,
                         "TCP congestion control '%s' refused by the kernel (%s); available: %s",
                         o->cc_algo, strerror(errno), avail);
    }
  }
  if (o->sock_buf_bytes > 0) {
    int b = o->sock_buf_bytes;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof b);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof b);
  }
  /* Keep-alive probes where the caller set an idle timeout, as QUIC sends
   * PINGs: with TCP_USER_TIMEOUT alone, a connection that has nothing
   * unacknowledged when its path dies (a client waiting for a reply whose
   * request the server had acknowledged) is never found dead, and a read
   * blocks forever.  Seen: reliability_migrate_netem's tcp run hung in 1
   * of 3-7 runs when the client's address went away (gdb: the client in
   * read(), its socket's send queue empty); unacknowledged probes end the
   * connection at the user timeout, and the session resumes. */
  int ka_ms = rgpu_t_keepalive_ms(o, 0);
  if (ka_ms > 0) {
    int idle = ka_ms / 1000;
    if (idle < 1) idle = 1;
    int cnt = 3;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  }
  /* Without a user timeout a peer that vanished mid-transfer keeps a write
   * pending for the full retransmission schedule (~15 minutes). */
  unsigned ut = 0;
  if (o->idle_timeout_ms > 0)
    ut = (unsigned)o->idle_timeout_ms;
  else if (ka_ms > 0)
    ut = (unsigned)ka_ms * 4u;
  if (ut) setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, sizeof ut);
  return 0;
}

/* Non-blocking connect bounded by the remaining time to the deadline. */
static int connect_with_deadline(int fd, const struct sockaddr *sa, socklen_t sl,
                                 uint64_t deadline_ns) {
  if (rgpu_set_nonblock(fd, 1) < 0) return errno;
  int r = connect(fd, sa, sl);
  if (r < 0 && errno != EINPROGRESS && errno != EINTR) return errno;
  if (r < 0) {
    for (;;) {
      uint64_t now = rgpu_clock_ns();
      if (now >= deadline_ns) return ETIMEDOUT;
      int ms = (int)((deadline_ns - now + 999999) / 1000000);
      int pr = rgpu_wait_fd(fd, POLLOUT, ms);
      if (pr < 0) return errno;
      if (pr == 0) continue;
      break;
    }
    int soerr = 0;
    socklen_t el = sizeof soerr;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &el) < 0) return errno;
    if (soerr) return soerr;
  }
  rgpu_set_nonblock(fd, 0);
  return 0;
}

static const char *connect_errtext(int e) {
  switch (e) {
  case ECONNREFUSED: return "connection refused (is rgpu-server listening there?)";
  case ETIMEDOUT: return "timed out";
  case ENOENT: return "no such socket file (is rgpu-server listening there?)";
  default: return strerror(e);
  }
}

int rgpu_tcp_connect_socket(const rgpu_uri *u, const rgpu_transport_opts *o,
                            char *peer, size_t peerlen, char *err, size_t errlen) {
  int timeout_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 10000;
  uint64_t deadline = rgpu_clock_ns() + (uint64_t)timeout_ms * 1000000ull;
  if (u->scheme == RGPU_URI_UNIX) {
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof sun.sun_path, "%s", u->path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
      return rgpu_t_fail(err, errlen, RGPU_T_EIO, "socket: %s", strerror(errno));
    int e = connect_with_deadline(fd, (struct sockaddr *)&sun, sizeof sun, deadline);
    if (e) {
      close(fd);
      return rgpu_t_fail(err, errlen, e == ENOENT ? RGPU_T_ECONNREFUSED : rgpu_t_errno_code(e),
                         "connect to unix:%s: %s", u->path, connect_errtext(e));
    }
    snprintf(peer, peerlen, "unix:%s", u->path);
    return fd;
  }
  if (u->port == 0)
    return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "connect to %s: port 0 is not a server port", u->host);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_ADDRCONFIG};
  char port[8];
  snprintf(port, sizeof port, "%u", u->port);
  struct addrinfo *res = NULL;
  int g = getaddrinfo(u->host, port, &hints, &res);
  if (g == EAI_NONAME || g == EAI_ADDRFAMILY || g == EAI_NODATA) {
    hints.ai_flags = 0; /* loopback-only hosts report no configured address */
    g = getaddrinfo(u->host, port, &hints, &res);
  }
  if (g)
    return rgpu_t_fail(err, errlen, RGPU_T_EIO, "resolve '%s': %s", u->host, gai_strerror(g));
  int last = ECONNREFUSED, fd = -1;
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last = errno;
      continue;
    }
    int rc = rgpu_tcp_apply_opts(fd, o, err, errlen);
    if (rc) {
      close(fd);
      freeaddrinfo(res);
      return rc;
    }
    int e = connect_with_deadline(fd, ai->ai_addr, ai->ai_addrlen, deadline);
    if (!e) {
      rgpu_sockaddr_string(ai->ai_addr, ai->ai_addrlen, peer, peerlen);
      break;
    }
    last = e;
    close(fd);
    fd = -1;
    if (e == ETIMEDOUT) break;
  }
  freeaddrinfo(res);
  if (fd < 0) {
    if (last == ETIMEDOUT)
      return rgpu_t_fail(err, errlen, RGPU_T_ETIMEDOUT, "connect to %s:%u: timed out after %d ms",
                         u->host, u->port, timeout_ms);
    return rgpu_t_fail(err, errlen, rgpu_t_errno_code(last), "connect to %s:%u: %s", u->host,
                       u->port, connect_errtext(last));
  }
  return fd;
}

/* Removes a unix socket file left by a dead server, but never one a live
 * server still answers on, and never anything that is not a socket. */
static int unix_clear_stale(const char *path, char *err, size_t errlen) {
  struct stat st;
  if (lstat(path, &st) < 0) return 0;
  if (!S_ISSOCK(st.st_mode))
    return rgpu_t_fail(err, errlen, RGPU_T_EINVAL,
                       "listen on unix:%s: the path exists and is not a socket", path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return rgpu_t_fail(err, errlen, RGPU_T_EIO, "socket: %s", strerror(errno));
  struct sockaddr_un sun = {.sun_family = AF_UNIX};
  snprintf(sun.sun_path, sizeof sun.sun_path, "%s", path);
  int r = connect(fd, (struct sockaddr *)&sun, sizeof sun);
  int e = errno;
  close(fd);
  if (r == 0)
    return rgpu_t_fail(err, errlen, RGPU_T_EINVAL,
                       "listen on unix:%s: another server is already listening there", path);
  if (e != ECONNREFUSED)
    return rgpu_t_fail(err, errlen, RGPU_T_EIO, "listen on unix:%s: probing the existing socket: %s",
                       path, strerror(e));
  if (unlink(path) < 0 && errno != ENOENT)
    return rgpu_t_fail(err, errlen, RGPU_T_EIO, "listen on unix:%s: removing stale socket: %s", path,
                       strerror(errno));
  return 0;
}

int rgpu_tcp_listen_socket(const rgpu_uri *u, const rgpu_transport_opts *o,
                           char *address, size_t addrlen, uint16_t *port,
                           char *err, size_t errlen) {
  if (u->scheme == RGPU_URI_UNIX) {
    int rc = unix_clear_stale(u->path, err, errlen);
    if (rc) return rc;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return rgpu_t_fail(err, errlen, RGPU_T_EIO, "socket: %s", strerror(errno));
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof sun.sun_path, "%s", u->path);
    if (bind(fd, (struct sockaddr *)&sun, sizeof sun) < 0 || listen(fd, 128) < 0) {
      int e = errno;
      close(fd);
      return rgpu_t_fail(err, errlen, rgpu_t_errno_code(e), "listen on unix:%s: %s", u->path,
                         strerror(e));
    }
    snprintf(address, addrlen, "%s", u->path);
    *port = 0;
    return fd;
  }
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
  char ps[8];
  snprintf(ps, sizeof ps, "%u", u->port);
  struct addrinfo *res = NULL;
  int g = getaddrinfo(u->host, ps, &hints, &res);
  if (g) return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "resolve '%s': %s", u->host, gai_strerror(g));
  int fd = -1, last = 0;
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 128) == 0) break;
    last = errno;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0)
    return rgpu_t_fail(err, errlen, rgpu_t_errno_code(last), "listen on %s:%u: %s", u->host,
                       u->port, strerror(last));
  /* Accepted sockets inherit these, so the server side is tuned as well. */
  int rc = rgpu_tcp_apply_opts(fd, o, err, errlen);
  if (rc) {
    close(fd);
    return rc;
  }
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  getsockname(fd, (struct sockaddr *)&ss, &sl);
  rgpu_sockaddr_string((struct sockaddr *)&ss, sl, address, addrlen);
  *port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                         : ((struct sockaddr_in *)&ss)->sin_port);
  return fd;
}

/* ---- tcp/unix listener -------------------------------------------------- */

struct tcp_listener {
  pid_t owner;
  rgpu_transport_opts opts; /* only the scalar fields are used after open */
};

static int tcp_accept(rgpu_listener *l, rgpu_conn **out, char *err, size_t errlen) {
  struct sockaddr_storage ss;
  for (;;) {
    socklen_t sl = sizeof ss;
    int fd = accept4(l->fd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return rgpu_t_fail(err, errlen, rgpu_t_errno_code(errno), "accept on %s: %s", l->address,
                         strerror(errno));
    }
    /* A listener polled non-blocking must not leak O_NONBLOCK to workers. */
    rgpu_set_nonblock(fd, 0);
    if (l->uri.scheme == RGPU_URI_TCP) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    char peer[128];
    if (l->uri.scheme == RGPU_URI_UNIX)
      snprintf(peer, sizeof peer, "unix:%.100s", l->address);
    else
      rgpu_sockaddr_string((struct sockaddr *)&ss, sl, peer, sizeof peer);
    int rc = rgpu_fd_conn_new(fd, rgpu_uri_scheme_name(l->uri.scheme), peer, 1, out);
    if (rc) {
      close(fd);
      return rgpu_t_fail(err, errlen, rc, "out of memory");
    }
    return 0;
  }
}

static void tcp_close(rgpu_listener *l) {
  struct tcp_listener *t = l->impl;
  close(l->fd);
  /* Only the process that bound the socket file removes it: a forked worker
   * closing its inherited copy must not take the server's address away. */
  if (l->uri.scheme == RGPU_URI_UNIX && t && t->owner == getpid()) unlink(l->uri.path);
  free(t);
}

static const struct rgpu_listener_ops tcp_listener_ops = {.accept = tcp_accept,
                                                          .close = tcp_close};

int rgpu_tcp_listener_init(rgpu_listener *l, const rgpu_transport_opts *o, char *err,
                           size_t errlen) {
  struct tcp_listener *t = calloc(1, sizeof *t);
  if (!t) return rgpu_t_fail(err, errlen, RGPU_T_EIO, "out of memory");
  int fd = rgpu_tcp_listen_socket(&l->uri, o, l->address, sizeof l->address, &l->port, err, errlen);
  if (fd < 0) {
    free(t);
    return fd;
  }
  t->owner = getpid();
  l->fd = fd;
  l->impl = t;
  l->ops = &tcp_listener_ops;
  return 0;
}
