/* Device printf output of a session (rgpu_output.h). */
#define _GNU_SOURCE /* pipe2 */
#include "rgpu_output.h"
#include "rgpu_thread_name.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <unistd.h>

void rgpu_output_init(rgpu_worker_output *o) {
  pthread_mutex_init(&o->lock, NULL);
  rgpu_buf_init(&o->pending);
  o->dropped = 0;
  o->capture_fd = -1;
  o->saved_stdout = -1;
  o->reader_running = 0;
}

static void append_locked(rgpu_worker_output *o, const char *text, size_t len) {
  if (o->pending.len + len > RGPU_OUTPUT_MAX)
    o->dropped += len;
  else
    rgpu_buf_put(&o->pending, text, len);
}

void rgpu_output_append(rgpu_worker_output *o, const char *text, size_t len) {
  pthread_mutex_lock(&o->lock);
  append_locked(o, text, len);
  pthread_mutex_unlock(&o->lock);
}

/* Reads everything the (non-blocking) pipe holds now.  Returns 0 on EOF
 * (the write end is gone), 1 otherwise. */
static int read_available_locked(rgpu_worker_output *o) {
  char b[16384];
  for (;;) {
    ssize_t n = read(o->capture_fd, b, sizeof b);
    if (n > 0) {
      append_locked(o, b, (size_t)n);
      continue;
    }
    if (n == 0) return 0;
    if (errno == EINTR) continue;
    return 1; /* EAGAIN: empty for now */
  }
}

/* The driver may print more than a pipe holds between two replies; with
 * nobody reading, its write would block the synchronization that prints. */
static void *reader_main(void *arg) {
  rgpu_thread_name("rgpu-output");
  rgpu_worker_output *o = arg;
  for (;;) {
    struct pollfd p = {o->capture_fd, POLLIN, 0};
    int r = poll(&p, 1, -1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) break;
    pthread_mutex_lock(&o->lock);
    int open = read_available_locked(o);
    pthread_mutex_unlock(&o->lock);
    if (!open) break;
  }
  return NULL;
}

int rgpu_output_capture_start(rgpu_worker_output *o) {
  if (o->capture_fd >= 0) return 0;
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return -1;
  fflush(stdout);
  int saved = dup(STDOUT_FILENO);
  if (saved < 0 || dup2(p[1], STDOUT_FILENO) < 0) {
    int e = errno;
    if (saved >= 0) close(saved);
    close(p[0]);
    close(p[1]);
    errno = e;
    return -1;
  }
  close(p[1]); /* fd 1 is now the only write end */
  (void)fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK);
  o->capture_fd = p[0];
  o->saved_stdout = saved;
  if (pthread_create(&o->reader, NULL, reader_main, o) == 0) o->reader_running = 1;
  return 0;
}

void rgpu_output_capture_drain(rgpu_worker_output *o) {
  if (o->capture_fd < 0) return;
  /* The driver prints through stdio: what it wrote may still sit in
   * stdout's buffer (a pipe is fully buffered). */
  fflush(stdout);
  (void)read_available_locked(o);
}

void rgpu_output_capture_stop(rgpu_worker_output *o) {
  if (o->capture_fd < 0) return;
  fflush(stdout);
  /* Putting the old stdout back closes the pipe's last write end: the
   * reader reads what is left, sees EOF and ends. */
  if (o->saved_stdout >= 0) {
    dup2(o->saved_stdout, STDOUT_FILENO);
    close(o->saved_stdout);
    o->saved_stdout = -1;
  }
  if (o->reader_running) pthread_join(o->reader, NULL);
  o->reader_running = 0;
  pthread_mutex_lock(&o->lock);
  (void)read_available_locked(o);
  pthread_mutex_unlock(&o->lock);
  close(o->capture_fd);
  o->capture_fd = -1;
}

void rgpu_output_free(rgpu_worker_output *o) {
  rgpu_output_capture_stop(o);
  rgpu_buf_free(&o->pending);
  pthread_mutex_destroy(&o->lock);
}
