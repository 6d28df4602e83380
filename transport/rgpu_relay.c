/* The accept queue between a TLS/QUIC relay thread and the server's accept
 * loop.  The server never sees TLS or QUIC: it accepts a plain stream whose
 * other end the relay feeds with decrypted bytes. */
#include "rgpu_transport_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rgpu_fifo.h"

void rgpu_relay_close_fd(int fd) {
  if (fd < 0) return;
  rgpu_relay_fd_unregister(fd);
  close(fd);
}

int rgpu_relay_queue_init(rgpu_relay_queue *q, char *err, size_t errlen) {
  memset(q, 0, sizeof *q);
  pthread_mutex_init(&q->mu, NULL);
  int a[2], b[2];
  if (pipe2(a, O_CLOEXEC) < 0) return rgpu_t_fail(err, errlen, RGPU_T_EIO, "pipe: %s", strerror(errno));
  if (pipe2(b, O_CLOEXEC | O_NONBLOCK) < 0) {
    close(a[0]);
    close(a[1]);
    return rgpu_t_fail(err, errlen, RGPU_T_EIO, "pipe: %s", strerror(errno));
  }
  q->notify_r = a[0];
  q->notify_w = a[1];
  q->stop_r = b[0];
  q->stop_w = b[1];
  rgpu_relay_fd_register(a[0]);
  rgpu_relay_fd_register(a[1]);
  rgpu_relay_fd_register(b[0]);
  rgpu_relay_fd_register(b[1]);
  return 0;
}

void rgpu_relay_queue_push(rgpu_relay_queue *q, int worker_fd, const char *peer,
                           uint64_t session_key, int stream_index) {
  rgpu_relay_item *it = calloc(1, sizeof *it);
  if (!it) {
    rgpu_relay_close_fd(worker_fd);
    return;
  }
  it->fd = worker_fd;
  snprintf(it->peer, sizeof it->peer, "%s", peer);
  it->session_key = session_key;
  it->stream_index = stream_index;
  pthread_mutex_lock(&q->mu);
  rgpu_fifo_push(q, it, next);
  pthread_mutex_unlock(&q->mu);
  char one = 1;
  while (write(q->notify_w, &one, 1) < 0 && errno == EINTR) {
  }
}

int rgpu_relay_queue_pop(rgpu_relay_queue *q, const char *name, rgpu_conn **out,
                         char *err, size_t errlen) {
  char b;
  for (;;) {
    ssize_t r = read(q->notify_r, &b, 1);
    if (r == 1) break;
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno == EAGAIN) {
      rgpu_wait_fd(q->notify_r, POLLIN, -1);
      continue;
    }
    return rgpu_t_fail(err, errlen, RGPU_T_ECLOSED, "%s listener is closed", name);
  }
  pthread_mutex_lock(&q->mu);
  rgpu_relay_item *it = rgpu_fifo_pop(q, next);
  pthread_mutex_unlock(&q->mu);
  if (!it) return rgpu_t_fail(err, errlen, RGPU_T_EIO, "%s accept queue out of step", name);
  /* From here on the worker end belongs to the caller, who may fork a
   * worker that keeps it: it must survive the atfork cleanup. */
  rgpu_relay_fd_unregister(it->fd);
  int rc = rgpu_fd_conn_new(it->fd, name, it->peer, 1, out);
  if (rc) {
    close(it->fd);
  } else {
    (*out)->session_key = it->session_key;
    (*out)->stream_index = it->stream_index;
  }
  free(it);
  return rc ? rgpu_t_fail(err, errlen, rc, "out of memory") : 0;
}

void rgpu_relay_queue_destroy(rgpu_relay_queue *q) {
  rgpu_relay_item *it;
  while ((it = rgpu_fifo_pop(q, next))) {
    rgpu_relay_close_fd(it->fd);
    free(it);
  }
  rgpu_relay_close_fd(q->notify_r);
  rgpu_relay_close_fd(q->notify_w);
  rgpu_relay_close_fd(q->stop_r);
  rgpu_relay_close_fd(q->stop_w);
  pthread_mutex_destroy(&q->mu);
}

int rgpu_relay_socketpair(int *relay_end, int *worker_end) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) return -errno;
  rgpu_set_nonblock(sv[0], 1);
  rgpu_relay_fd_register(sv[0]);
  rgpu_relay_fd_register(sv[1]);
  *relay_end = sv[0];
  *worker_end = sv[1];
  return 0;
}
