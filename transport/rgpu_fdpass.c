/* Passing an accepted conn to another process (SCM_RIGHTS).  A QUIC session
 * that opens extra streams (rgpu_conn_open_stream) gets each one accepted by
 * the listener process, which must hand it to the worker that owns the
 * session; this is that hand-off, metadata included. */
#include "rgpu_transport_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FDPASS_MAGIC 0x52474650u /* 'RGFP' */

typedef struct {
  uint32_t magic;
  uint32_t stream_index;
  uint64_t session_key;
  char name[8];
  char peer[128];
} fdpass_msg;

int rgpu_conn_send(int chan, const rgpu_conn *c, char *err, size_t errlen) {
  int fd = rgpu_conn_raw_fd(c);
  if (chan < 0 || fd < 0)
    return rgpu_t_fail(err, errlen, RGPU_T_EINVAL,
                       "rgpu_conn_send: needs a channel and a conn with a raw fd");
  fdpass_msg m;
  memset(&m, 0, sizeof m);
  m.magic = FDPASS_MAGIC;
  m.stream_index = (uint32_t)c->stream_index;
  m.session_key = c->session_key;
  memcpy(m.name, c->name, sizeof m.name);
  memcpy(m.peer, c->peer, sizeof m.peer);
  struct iovec iov = {&m, sizeof m};
  char ctrl[CMSG_SPACE(sizeof(int))];
  memset(ctrl, 0, sizeof ctrl);
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctrl,
                      .msg_controllen = sizeof ctrl};
  struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cm), &fd, sizeof fd);
  for (;;) {
    ssize_t w = sendmsg(chan, &mh, MSG_NOSIGNAL);
    if (w == (ssize_t)sizeof m) return 0;
    if (w < 0 && errno == EINTR) continue;
    if (w < 0)
      return rgpu_t_fail(err, errlen, rgpu_t_errno_code(errno), "passing conn from %s: %s", c->peer,
                         strerror(errno));
    /* A stream socket took part of it: finish the bytes; the fd went along
     * with the first byte. */
    size_t off = (size_t)w;
    while (off < sizeof m) {
      ssize_t n = send(chan, (char *)&m + off, sizeof m - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        return rgpu_t_fail(err, errlen, RGPU_T_EIO, "passing conn from %s: %s", c->peer,
                           strerror(errno));
      off += (size_t)n;
    }
    return 0;
  }
}

int rgpu_conn_recv(int chan, rgpu_conn **out, char *err, size_t errlen) {
  if (!out) return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "rgpu_conn_recv: no output pointer");
  *out = NULL;
  fdpass_msg m;
  char ctrl[CMSG_SPACE(sizeof(int) * 4)];
  struct iovec iov = {&m, sizeof m};
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctrl,
                      .msg_controllen = sizeof ctrl};
  ssize_t r;
  do {
    r = recvmsg(chan, &mh, MSG_CMSG_CLOEXEC);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return rgpu_t_fail(err, errlen, RGPU_T_ECLOSED, "conn channel closed");
  if (r < 0)
    return rgpu_t_fail(err, errlen, rgpu_t_errno_code(errno), "conn channel: %s", strerror(errno));
  int fd = -1;
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
    if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
      int n = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      int fds[4];
      memcpy(fds, CMSG_DATA(cm), (size_t)(n > 4 ? 4 : n) * sizeof(int));
      for (int i = 0; i < n && i < 4; i++) {
        if (fd < 0)
          fd = fds[i];
        else
          close(fds[i]); /* more than we asked for: not ours to keep */
      }
    }
  }
  size_t got = (size_t)r;
  while (got < sizeof m) {
    ssize_t n = recv(chan, (char *)&m + got, sizeof m - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (fd >= 0) close(fd);
      return rgpu_t_fail(err, errlen, RGPU_T_EIO, "conn channel: truncated message");
    }
    got += (size_t)n;
  }
  if (m.magic != FDPASS_MAGIC || fd < 0 || (mh.msg_flags & MSG_CTRUNC)) {
    if (fd >= 0) close(fd);
    return rgpu_t_fail(err, errlen, RGPU_T_EIO, "conn channel: malformed message");
  }
  m.name[sizeof m.name - 1] = 0;
  m.peer[sizeof m.peer - 1] = 0;
  int rc = rgpu_fd_conn_new(fd, m.name, m.peer, 1, out);
  if (rc) {
    close(fd);
    return rgpu_t_fail(err, errlen, rc, "out of memory");
  }
  (*out)->session_key = m.session_key;
  (*out)->stream_index = (int)m.stream_index;
  return 0;
}
