#define _GNU_SOURCE
#include "rgpu_listener.h"

#include <cuda.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rgpu_frame_io.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"

typedef struct {
  pid_t pid;
  uint64_t session_id;
  int refuser; /* a short-lived child that only tells a client "server full" */
  char peer[128];
  char transport[16];
  struct timespec start;
} rgpu_child;

static int sig_pipe[2] = {-1, -1};
static volatile sig_atomic_t stop_requested;

static void on_signal(int sig) {
  if (sig == SIGTERM || sig == SIGINT) stop_requested = 1;
  int saved = errno;
  char b = (char)sig;
  (void)!write(sig_pipe[1], &b, 1);
  errno = saved;
}

static double seconds_since(const struct timespec *t0) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)(now.tv_sec - t0->tv_sec) + (double)(now.tv_nsec - t0->tv_nsec) / 1e9;
}

/* The listener never reads frames of live sessions, but a client that finds
 * the server full deserves a reply it can show, not a bare reset.  A tiny
 * child answers its HELLO so the accept loop never waits on a client. */
static void refuse_session(rgpu_conn *c, uint32_t max_sessions) {
  int fd = rgpu_conn_raw_fd(c);
  if (fd >= 0) {
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  rgpu_buf in;
  rgpu_buf_init(&in);
  rgpu_frame_hdr h;
  if (rgpu_frame_read(c, &h, &in, 65536) == 0) {
    char msg[128];
    int n = snprintf(msg, sizeof msg, "server full (%u sessions); try again later", max_sessions);
    rgpu_frame_hdr r = {RGPU_PROTO_VERSION, RGPU_KIND_REPLY, h.opcode, 0,
                        (uint32_t)CUDA_ERROR_DEVICE_UNAVAILABLE, h.seq};
    rgpu_frame_write(c, &r, msg, (size_t)n, NULL, 0);
  }
  rgpu_buf_free(&in);
}

static void format_uri(const rgpu_listener *l, const char *asked, char *out, size_t cap) {
  rgpu_uri u;
  char err[64];
  const char *scheme = "tcp";
  if (rgpu_uri_parse(asked, &u, err, sizeof err) == 0) scheme = rgpu_uri_scheme_name(u.scheme);
  snprintf(out, cap, "%s://%s", scheme, rgpu_listener_address(l));
}

int rgpu_server_run(rgpu_server_opts *o) {
  rgpu_listener *ls[RGPU_SERVER_MAX_LISTEN];
  char lname[RGPU_SERVER_MAX_LISTEN][16];
  int nl = 0;
  for (int i = 0; i < o->nlisten && i < RGPU_SERVER_MAX_LISTEN; i++) {
    char err[512];
    rgpu_uri u;
    if (rgpu_uri_parse(o->listen[i], &u, err, sizeof err)) {
      fprintf(stderr, "rgpu-server: --listen %s: %s\n", o->listen[i], err);
      goto fail;
    }
    int rc = rgpu_listener_open(o->listen[i], &o->topts, &ls[nl], err, sizeof err);
    if (rc) {
      fprintf(stderr, "rgpu-server: cannot listen on %s: %s\n", o->listen[i], err);
      goto fail;
    }
    snprintf(lname[nl], sizeof lname[nl], "%s", rgpu_uri_scheme_name(u.scheme));
    nl++;
  }
  if (nl == 0) {
    fprintf(stderr, "rgpu-server: nothing to listen on (give --listen URI)\n");
    return 1;
  }

  if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
    fprintf(stderr, "rgpu-server: pipe: %s\n", strerror(errno));
    goto fail;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGCHLD, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);

  /* Bound before printing: scripts wait for this line, then connect. */
  for (int i = 0; i < nl; i++) {
    char uri[400];
    format_uri(ls[i], o->listen[i], uri, sizeof uri);
    fprintf(stderr, "rgpu-server: listening on %s (device: %s)\n", uri,
            rgpu_device_kind_name(o->worker.device));
  }
  fflush(stderr);

  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  o->worker.server_start = (uint64_t)ts.tv_sec;
  o->worker.max_sessions = o->max_sessions;

  size_t ncap = 16, nchild = 0;
  rgpu_child *kids = calloc(ncap, sizeof *kids);
  if (!kids) goto fail;
  uint32_t active = 0, refusers = 0;
  uint64_t next_session = 1;
  unsigned accept_failures = 0;
  struct pollfd pfd[RGPU_SERVER_MAX_LISTEN + 1];

  while (!stop_requested) {
    pfd[0].fd = sig_pipe[0];
    pfd[0].events = POLLIN;
    for (int i = 0; i < nl; i++) {
      pfd[i + 1].fd = rgpu_listener_poll_fd(ls[i]);
      pfd[i + 1].events = POLLIN;
    }
    int pr = poll(pfd, (nfds_t)nl + 1, -1);
    if (pr < 0 && errno != EINTR) {
      RGPU_ERROR("poll: %s", strerror(errno));
      break;
    }
    char drain[64];
    while (read(sig_pipe[0], drain, sizeof drain) > 0) {
    }
    /* Reap every finished worker. */
    for (;;) {
      int st;
      pid_t pid = waitpid(-1, &st, WNOHANG);
      if (pid <= 0) break;
      for (size_t k = 0; k < nchild; k++) {
        if (kids[k].pid != pid) continue;
        if (kids[k].refuser) {
          refusers--;
        } else {
          active--;
          /* The worker logs its own orderly end; only deaths are ours. */
          if (WIFSIGNALED(st))
            RGPU_WARN("session=%llu peer=%s transport=%s event=end status=signal:%d duration_s=%.3f",
                      (unsigned long long)kids[k].session_id, kids[k].peer, kids[k].transport,
                      WTERMSIG(st), seconds_since(&kids[k].start));
        }
        kids[k] = kids[--nchild];
        break;
      }
    }
    if (stop_requested || pr <= 0) continue;
    for (int i = 0; i < nl; i++) {
      if (!(pfd[i + 1].revents & (POLLIN | POLLERR | POLLHUP))) continue;
      rgpu_conn *c = NULL;
      char err[512];
      int rc = rgpu_listener_accept(ls[i], &c, err, sizeof err);
      if (rc) {
        /* Aborted handshakes are routine; a persistent failure (out of
         * descriptors) must not spin the listener at full speed. */
        if (++accept_failures % 100 == 1) RGPU_WARN("accept on %s: %s", o->listen[i], err);
        if (accept_failures > 10) {
          struct timespec nap = {0, 10 * 1000 * 1000};
          nanosleep(&nap, NULL);
        }
        continue;
      }
      accept_failures = 0;
      if (nchild == ncap) {
        rgpu_child *nk = realloc(kids, ncap * 2 * sizeof *kids);
        if (!nk) {
          rgpu_conn_close(c);
          continue;
        }
        kids = nk;
        ncap *= 2;
      }
      int full = o->max_sessions && active >= o->max_sessions;
      if (full && refusers >= 16) {
        /* Under a flood, a bare close is all a full server can afford. */
        rgpu_conn_close(c);
        continue;
      }
      uint64_t sid = full ? 0 : next_session++;
      rgpu_child *kid = &kids[nchild];
      memset(kid, 0, sizeof *kid);
      kid->session_id = sid;
      kid->refuser = full;
      snprintf(kid->peer, sizeof kid->peer, "%s", rgpu_conn_peer(c));
      snprintf(kid->transport, sizeof kid->transport, "%s", lname[i]);
      clock_gettime(CLOCK_MONOTONIC, &kid->start);
      o->worker.session_id = sid;
      o->worker.sessions_active = active + 1;
      snprintf(o->worker.peer, sizeof o->worker.peer, "%s", kid->peer);
      snprintf(o->worker.transport, sizeof o->worker.transport, "%s", kid->transport);

      pid_t pid = fork();
      if (pid < 0) {
        RGPU_ERROR("fork: %s (session refused)", strerror(errno));
        rgpu_conn_close(c);
        continue;
      }
      if (pid == 0) {
        /* Worker: nothing of the listener survives but the connection. */
        signal(SIGCHLD, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_IGN); /* ^C reaches the listener, which stops us */
        close(sig_pipe[0]);
        close(sig_pipe[1]);
        for (int k = 0; k < nl; k++) rgpu_listener_close(ls[k]);
        free(kids);
        if (full) {
          RGPU_WARN("peer=%s transport=%s event=refused reason=server-full sessions=%u",
                    o->worker.peer, o->worker.transport, active);
          refuse_session(c, o->max_sessions);
          rgpu_conn_close(c);
          _exit(0);
        }
        rgpu_log_set_component("worker");
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        rgpu_worker *w = rgpu_worker_new(&o->worker);
        int status = 1;
        uint64_t calls = 0;
        const char *reason = "oom";
        if (w) {
          status = rgpu_worker_serve(w, c);
          calls = rgpu_worker_calls(w);
          reason = rgpu_worker_end_reason(w);
        }
        rgpu_log(status ? RGPU_LOG_WARN : RGPU_LOG_INFO,
                 "session=%llu peer=%s transport=%s event=end status=%s reason=%s calls=%llu "
                 "duration_s=%.3f",
                 (unsigned long long)sid, o->worker.peer, o->worker.transport,
                 status ? "error" : "ok", reason, (unsigned long long)calls, seconds_since(&t0));
        rgpu_conn_shutdown(c);
        rgpu_worker_free(w);
        rgpu_conn_close(c);
        _exit(status);
      }
      kid->pid = pid;
      nchild++;
      if (full) refusers++;
      if (!full) {
        active++;
        RGPU_INFO("session=%llu peer=%s transport=%s event=start pid=%d sessions=%u",
                  (unsigned long long)sid, kid->peer, kid->transport, (int)pid, active);
      }
      rgpu_conn_close(c); /* the worker has its own copy */
    }
  }

  /* Orderly shutdown: no new sessions, then give workers a grace period. */
  RGPU_INFO("shutting down: %u active session%s", active, active == 1 ? "" : "s");
  for (int i = 0; i < nl; i++) rgpu_listener_close(ls[i]);
  for (size_t k = 0; k < nchild; k++) kill(kids[k].pid, SIGTERM);
  int grace = o->shutdown_timeout_ms > 0 ? o->shutdown_timeout_ms : 5000;
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (nchild > 0) {
    int st;
    pid_t pid = waitpid(-1, &st, WNOHANG);
    if (pid > 0) {
      for (size_t k = 0; k < nchild; k++)
        if (kids[k].pid == pid) {
          kids[k] = kids[--nchild];
          break;
        }
      continue;
    }
    if (pid < 0 && errno == ECHILD) break;
    if (seconds_since(&t0) * 1000.0 > grace) {
      for (size_t k = 0; k < nchild; k++) {
        RGPU_WARN("session=%llu did not stop within %d ms: killing", (unsigned long long)kids[k].session_id,
                  grace);
        kill(kids[k].pid, SIGKILL);
      }
      while (waitpid(-1, &st, 0) > 0) {
      }
      break;
    }
    struct timespec nap = {0, 20 * 1000 * 1000};
    nanosleep(&nap, NULL);
  }
  free(kids);
  close(sig_pipe[0]);
  close(sig_pipe[1]);
  return 0;

fail:
  for (int i = 0; i < nl; i++) rgpu_listener_close(ls[i]);
  return 1;
}
