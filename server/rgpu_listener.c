#define _GNU_SOURCE
#include "rgpu_listener.h"
#include "rgpu_server_config.h"

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

#include "rgpu_array.h"
#include "rgpu_bulk.h"
#include "rgpu_clock.h"
#include "rgpu_forkserver.h"
#include "rgpu_frame_io.h"
#include "rgpu_job_token.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"
#include "rgpu_metrics.h"
#include "rgpu_signal.h"

typedef struct {
  pid_t pid;
  uint64_t session_id;
  int refuser; /* a short-lived child that only tells a client "server full" */
  char peer[128];
  char transport[16];
  uint64_t start_ns; /* rgpu_clock_ns() at accept */
  int ctl;            /* our end of the worker's control channel; -1 = none */
  int has_token;      /* the worker registered its session token */
  int authed;         /* admitted after an authenticated HELLO: counts against --max-sessions */
  int evicted;        /* killed before authenticating, to make room (--max-pending-auth) */
  uint8_t token[32];
  uint64_t qkey;      /* rgpu_conn_session_key of its current QUIC connection; 0 = none */
  char job_token[RGPU_JOB_TOKEN_NAME_MAX]; /* --token-dir file of its HELLO; "" = none */
  int revoked;        /* told SHUTDOWN because that file went or expired */
} rgpu_child;

/* What the fork server hands the child function for one session.  It
 * travels as bytes to another process, so rgpu_worker_config must stay
 * plain data (arrays, no pointers); its descriptors travel beside it as
 * SCM_RIGHTS (WORKER_FD_*). */
typedef struct {
  rgpu_worker_config cfg; /* ctl_fd is filled in from WORKER_FD_CTL */
  int metrics_slot;       /* -1 = counted in totals only */
  int full;               /* a refuser: answers HELLO with cfg.refuse_new */
  int draining;
  uint32_t active;        /* sessions at spawn time, for the refusal line */
} worker_spawn_arg;

enum { WORKER_FD_CTL = 0, WORKER_FD_METRICS = 1, WORKER_NFDS = 2 };

static int sig_pipe[2] = {-1, -1};
static volatile sig_atomic_t stop_requested; /* number of SIGTERM/SIGINT */
static volatile sig_atomic_t reload_requested; /* SIGHUP */

static void on_signal(int sig) {
  if ((sig == SIGTERM || sig == SIGINT) && stop_requested < 2) stop_requested++;
  if (sig == SIGHUP) reload_requested = 1;
  int saved = errno;
  char b = (char)sig;
  (void)!write(sig_pipe[1], &b, 1);
  errno = saved;
}

/* Constant time: a session token is a secret. */
static int token_equal(const uint8_t *a, const uint8_t *b) {
  uint8_t d = 0;
  for (int i = 0; i < 32; i++) d |= (uint8_t)(a[i] ^ b[i]);
  return d == 0;
}

static int ctl_send(int fd, const rgpu_ctl_msg *m) {
  for (;;) {
    ssize_t r = send(fd, m, sizeof *m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r == (ssize_t)sizeof *m) return 0;
    if (r < 0 && errno == EINTR) continue;
    return -1;
  }
}

/* Sessions admitted (authenticated HELLO), against --max-sessions. */
typedef struct {
  uint32_t max_sessions;
  uint32_t authed;
} admission;

/* A message from worker kids[k] on its control channel. */
static void handle_worker_msg(rgpu_child *kids, size_t nchild, size_t k, admission *adm) {
  rgpu_ctl_msg m;
  ssize_t r;
  do {
    r = recv(kids[k].ctl, &m, sizeof m, MSG_DONTWAIT);
  } while (r < 0 && errno == EINTR);
  if (r == 0) {
    /* The worker is exiting; the fork server reports its exit. */
    close(kids[k].ctl);
    kids[k].ctl = -1;
    return;
  }
  if (r != (ssize_t)sizeof m) return;
  if (m.type == RGPU_CTL_REGISTER) {
    if (kids[k].authed || kids[k].refuser) return;
    /* Only now does the session count: a peer that never authenticates
     * must not take a real client's slot (the workers before HELLO have
     * --max-pending-auth). */
    if (adm->max_sessions && adm->authed >= adm->max_sessions) {
      rgpu_ctl_msg no = {.type = RGPU_CTL_ADMIT, .ok = 0};
      snprintf(no.text, sizeof no.text, "server full (%u sessions); try again later",
               adm->max_sessions);
      ctl_send(kids[k].ctl, &no);
      return;
    }
    memcpy(kids[k].token, m.token, 32);
    kids[k].has_token = 1;
    m.text[sizeof m.text - 1] = 0;
    snprintf(kids[k].job_token, sizeof kids[k].job_token, "%.*s",
             (int)sizeof kids[k].job_token - 1, m.text);
    kids[k].authed = 1;
    adm->authed++;
    if (adm->max_sessions) {
      rgpu_ctl_msg yes = {.type = RGPU_CTL_ADMIT, .ok = 1, .session_id = kids[k].session_id};
      ctl_send(kids[k].ctl, &yes);
    }
    return;
  }
  if (m.type != RGPU_CTL_RESUME_REQ) return;
  /* The worker sent the connection right behind the request. */
  rgpu_conn *c = NULL;
  char err[256];
  if (rgpu_conn_recv(kids[k].ctl, &c, err, sizeof err)) {
    RGPU_WARN("resume: %s", err);
    return;
  }
  rgpu_ctl_msg ans = {.type = RGPU_CTL_RESUME_ANS};
  size_t t = nchild;
  for (size_t i = 0; i < nchild; i++)
    if (i != k && kids[i].has_token && kids[i].ctl >= 0 && token_equal(kids[i].token, m.token))
      t = i;
  if (t < nchild) {
    rgpu_ctl_msg fwd = {.type = RGPU_CTL_RESUME, .rx_bytes = m.rx_bytes,
                        .session_id = kids[t].session_id};
    if (ctl_send(kids[t].ctl, &fwd) == 0 &&
        rgpu_conn_send(kids[t].ctl, c, err, sizeof err) == 0) {
      ans.ok = 1;
      /* Bulk streams of the new QUIC connection go to the session too. */
      kids[t].qkey = rgpu_conn_session_key(c);
      kids[k].qkey = 0; /* the fresh worker only passed it on */
      ans.session_id = kids[t].session_id;
      RGPU_INFO("session=%llu peer=%s event=reconnect", (unsigned long long)kids[t].session_id,
                rgpu_conn_peer(c));
    }
  } else {
    snprintf(ans.text, sizeof ans.text,
             "session unknown to this server (its grace period ended, or the server restarted)");
  }
  ctl_send(kids[k].ctl, &ans);
  rgpu_conn_close(c); /* the target worker (or the fresh one) has its own copy */
}

/* An extra QUIC stream (a bulk lane, rgpu_bulk.h) goes to the worker that
 * owns its connection; one nobody owns is closed (the client then falls
 * back to stream 0). */
static void route_stream(rgpu_child *kids, size_t nchild, rgpu_conn *c) {
  uint64_t key = rgpu_conn_session_key(c);
  char err[256];
  for (size_t k = 0; key && k < nchild; k++) {
    /* Only a worker that owns a session (it registered its token after
     * HELLO, before any lane could be opened): the short-lived worker that
     * passes a RESUME on shares the key for a moment and must never get
     * one (it would take the message for the answer it waits for). */
    if (kids[k].qkey != key || kids[k].ctl < 0 || kids[k].refuser || !kids[k].has_token) continue;
    rgpu_ctl_msg m = {.type = RGPU_CTL_STREAM, .session_id = kids[k].session_id};
    if (ctl_send(kids[k].ctl, &m) == 0 && rgpu_conn_send(kids[k].ctl, c, err, sizeof err) == 0) {
      RGPU_DEBUG("session=%llu event=bulk-stream index=%d", (unsigned long long)kids[k].session_id,
                 rgpu_conn_stream_index(c));
    } else {
      RGPU_WARN("session=%llu bulk stream not routed: %s", (unsigned long long)kids[k].session_id,
                err);
    }
    break;
  }
  rgpu_conn_close(c); /* the worker has its own copy */
}

static void format_uri(const rgpu_listener *l, const char *asked, char *out, size_t cap) {
  rgpu_uri u;
  char err[64];
  const char *scheme = "tcp";
  if (rgpu_uri_parse(asked, &u, err, sizeof err) == 0) scheme = rgpu_uri_scheme_name(u.scheme);
  snprintf(out, cap, "%s://%s", scheme, rgpu_listener_address(l));
}

/* One session, in a process the fork server forked (rgpu_forkserver.h):
 * the worker's whole life.  It owns c and fds. */
static int worker_child_main(const void *argp, size_t len, rgpu_conn *c, const int *fds, int nfds) {
  if (len != sizeof(worker_spawn_arg) || nfds < WORKER_NFDS) return 1;
  worker_spawn_arg a;
  memcpy(&a, argp, sizeof a);
  signal(SIGCHLD, SIG_DFL);
  /* Drain is the listener's business: a SIGTERM sent to the whole process
   * group (systemd, a shell) must not cut sessions short, but neither may
   * it be ignored forever: the worker exits after the drain period and
   * the session end timeout (rgpu_worker_on_sigterm). */
  rgpu_signal_handle(SIGTERM, rgpu_worker_on_sigterm, SA_RESTART);
  signal(SIGINT, SIG_IGN); /* ^C reaches the listener, which stops us */
  signal(SIGPIPE, SIG_IGN);
  /* A hang-up sent to the whole process group (a terminal, `systemctl
   * kill -s HUP`) is the listener's reload, never the end of a session. */
  signal(SIGHUP, SIG_IGN);
  rgpu_worker_config *cfg = &a.cfg;
  cfg->ctl_fd = fds[WORKER_FD_CTL] > 0 ? fds[WORKER_FD_CTL] : 0;
  cfg->own_process = 1;
  uint64_t sid = cfg->session_id;
  /* The refusal line is the server's, as when the listener forked. */
  rgpu_log_set_component("server");
  if (a.full)
    RGPU_WARN("peer=%s transport=%s event=refused reason=%s sessions=%u", cfg->peer,
              cfg->transport, a.draining ? "draining" : "server-full", a.active);
  rgpu_log_set_component("worker");
  if (fds[WORKER_FD_METRICS] >= 0) {
    rgpu_metrics_enter_worker_fd(fds[WORKER_FD_METRICS], a.metrics_slot);
    close(fds[WORKER_FD_METRICS]);
  }
  uint64_t t0 = rgpu_clock_ns();
  rgpu_worker *w = rgpu_worker_new(cfg);
  rgpu_worker_watchdog_start(w);
  int status = 1;
  uint64_t calls = 0;
  const char *reason = "oom";
  if (w) {
    status = rgpu_worker_serve(w, c);
    calls = rgpu_worker_calls(w);
    reason = rgpu_worker_end_reason(w);
  }
  int handed = w && rgpu_worker_handed_off(w);
  if (!a.full && !handed)
    rgpu_log(status ? RGPU_LOG_WARN : RGPU_LOG_INFO,
             "session=%llu peer=%s transport=%s event=end status=%s reason=%s calls=%llu "
             "duration_s=%.3f",
             (unsigned long long)sid, cfg->peer, cfg->transport, status ? "error" : "ok", reason,
             (unsigned long long)calls, rgpu_clock_elapsed_s(t0));
  /* A connection handed to its session's worker lives on there: close our
   * descriptor only. */
  if (!handed) rgpu_conn_shutdown(c);
  rgpu_metrics_session_end_reason(handed ? "handed-off" : reason);
  rgpu_worker_free(w);
  rgpu_conn_close(c);
  return status;
}

static void kill_worker(rgpu_forkserver *fs, pid_t pid);

/* SIGHUP: the token file and the TLS credentials again.  Each piece is
 * replaced only when its new file loads; the workers forked from now on get
 * the new token (it travels in their config), the TLS/QUIC listeners hand
 * new handshakes the new certificate.  Running sessions are not touched. */
static void reload_secrets(rgpu_server_opts *o, rgpu_listener **ls, int nl) {
  int failed = 0;
  if (o->token_file) {
    static char fresh[RGPU_AUTH_TOKEN_MAX + 1]; /* off the stack: 4 KiB of secret */
    char err[600];
    if (rgpu_auth_load_token(o->token_file, fresh, sizeof fresh, err, sizeof err)) {
      RGPU_ERROR("event=reload-failed what=token reason=\"%s\": keeping the current token", err);
      failed++;
    } else {
      memcpy(o->worker.token, fresh, sizeof fresh);
      RGPU_INFO("event=reload what=token file=%s", o->token_file);
    }
    explicit_bzero(fresh, sizeof fresh);
  }
  for (int i = 0; i < nl; i++) {
    if (!ls[i]) continue;
    rgpu_uri u;
    char err[600];
    if (rgpu_uri_parse(o->listen[i], &u, err, sizeof err) ||
        (u.scheme != RGPU_URI_TLS && u.scheme != RGPU_URI_QUIC))
      continue;
    if (rgpu_listener_reload(ls[i], &o->topts, err, sizeof err)) {
      RGPU_ERROR("event=reload-failed what=certificate listen=%s reason=\"%s\": keeping the "
                 "current certificate", o->listen[i], err);
      failed++;
    } else {
      RGPU_INFO("event=reload what=certificate listen=%s cert=%s", o->listen[i],
                o->topts.cert_file ? o->topts.cert_file : "");
    }
  }
  RGPU_INFO("event=reloaded failures=%d", failed);
}

/* Sessions whose --token-dir token is gone (the job ended: the scheduler
 * removed its file) or expired end now, connected or not: their GPUs are
 * the next job's.  Once per session. */
static void revoke_job_sessions(const rgpu_server_opts *o, rgpu_child *kids, size_t nchild) {
  int64_t now = (int64_t)time(NULL);
  for (size_t k = 0; k < nchild; k++) {
    if (!kids[k].job_token[0] || kids[k].revoked || kids[k].ctl < 0) continue;
    /* A worker that has already ended its session (its channel is at EOF,
     * not yet read) needs no SHUTDOWN. */
    char peek;
    if (recv(kids[k].ctl, &peek, 1, MSG_PEEK | MSG_DONTWAIT) == 0) continue;
    char why[600];
    if (rgpu_job_token_still_valid(o->worker.token_dir, kids[k].job_token, now, why, sizeof why))
      continue;
    kids[k].revoked = 1;
    RGPU_INFO("session=%llu peer=%s event=token-revoked token=%s reason=\"%s\"",
              (unsigned long long)kids[k].session_id, kids[k].peer, kids[k].job_token, why);
    rgpu_ctl_msg m = {.type = RGPU_CTL_SHUTDOWN, .session_id = kids[k].session_id};
    snprintf(m.text, sizeof m.text, "the job's token %.60s was revoked or expired", kids[k].job_token);
    if (ctl_send(kids[k].ctl, &m)) kill_worker(o->forkserver, kids[k].pid);
  }
}

int rgpu_server_start_forkserver(rgpu_server_opts *o, char *err, size_t errlen) {
  if (o->forkserver) return 0;
  return rgpu_forkserver_start(worker_child_main, &o->forkserver, err, errlen);
}

/* SIGKILL for a worker: through the fork server, which knows whether the
 * pid is still its child; once it is gone, directly (the orphaned worker
 * is ours still; its pid could only have been recycled had it exited,
 * which a control channel at EOF would have told us). */
static void kill_worker(rgpu_forkserver *fs, pid_t pid) {
  if (rgpu_forkserver_kill(fs, pid, SIGKILL)) kill(pid, SIGKILL);
}

/* A quic:// session's worker takes its client's connection on a port of
 * its own (rgpu_quic_direct.h) with the listener's address and transport
 * options, unless --quic-direct off or RGPU_QUIC_DIRECT=0 (the listener's
 * environment) keeps every session on the relay.  host: the listener's address; NULL for the
 * other transports. */
static void quic_direct_config(const rgpu_server_opts *o, rgpu_worker_config *cfg,
                               const char *host) {
  memset(&cfg->quic_direct, 0, sizeof cfg->quic_direct);
  const char *env = getenv("RGPU_QUIC_DIRECT");
  if (!host || o->quic_direct_off || (env && !strcmp(env, "0"))) return;
  const rgpu_transport_opts *t = &o->topts;
  cfg->quic_direct.on = 1;
  snprintf(cfg->quic_direct.host, sizeof cfg->quic_direct.host, "%s", host);
  snprintf(cfg->quic_direct.cert_file, sizeof cfg->quic_direct.cert_file, "%s",
           t->cert_file ? t->cert_file : "");
  snprintf(cfg->quic_direct.key_file, sizeof cfg->quic_direct.key_file, "%s",
           t->key_file ? t->key_file : "");
  snprintf(cfg->quic_direct.client_ca_file, sizeof cfg->quic_direct.client_ca_file, "%s",
           t->client_ca_file ? t->client_ca_file : "");
  snprintf(cfg->quic_direct.cc_algo, sizeof cfg->quic_direct.cc_algo, "%s",
           t->cc_algo ? t->cc_algo : "");
  cfg->quic_direct.idle_timeout_ms = t->idle_timeout_ms;
  cfg->quic_direct.keepalive_ms = t->keepalive_ms;
  cfg->quic_direct.max_pto_ms = t->quic_max_pto_ms;
  cfg->quic_direct.max_streams = t->quic_max_streams;
  cfg->quic_direct.port_lo = o->quic_direct_lo;
  cfg->quic_direct.port_hi = o->quic_direct_hi;
}

int rgpu_server_run(rgpu_server_opts *o) {
  /* main() starts the fork server before anything can make a thread; a
   * caller that did not gets one here, before this function's own relay
   * and metrics threads. */
  {
    char ferr[256];
    if (rgpu_server_start_forkserver(o, ferr, sizeof ferr)) {
      fprintf(stderr, "rgpu-server: %s\n", ferr);
      return 1;
    }
  }
  rgpu_forkserver *fs = o->forkserver;
  int exit_status = 0, fs_dead = 0;
  /* quic://: room for the bulk lanes, which route_stream hands on. */
  if (o->topts.quic_max_streams == 0) o->topts.quic_max_streams = RGPU_BULK_DEFAULT_QUIC_STREAMS;
  rgpu_listener *ls[RGPU_SERVER_MAX_LISTEN];
  char lname[RGPU_SERVER_MAX_LISTEN][16];
  char lhost[RGPU_SERVER_MAX_LISTEN][256]; /* the address each listens on */
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
    snprintf(lhost[nl], sizeof lhost[nl], "%s", u.host);
    nl++;
  }
  if (nl == 0) {
    fprintf(stderr, "rgpu-server: nothing to listen on (give --listen URI)\n");
    goto fail;
  }

  if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
    fprintf(stderr, "rgpu-server: pipe: %s\n", strerror(errno));
    goto fail;
  }
  rgpu_signal_handle(SIGCHLD, on_signal, SA_RESTART);
  rgpu_signal_handle(SIGTERM, on_signal, SA_RESTART);
  rgpu_signal_handle(SIGINT, on_signal, SA_RESTART);
  rgpu_signal_handle(SIGHUP, on_signal, SA_RESTART);
  signal(SIGPIPE, SIG_IGN);

  /* Bound before printing: scripts wait for this line, then connect. */
  for (int i = 0; i < nl; i++) {
    char uri[400];
    format_uri(ls[i], o->listen[i], uri, sizeof uri);
    fprintf(stderr, "rgpu-server: listening on %s (device: %s)\n", uri,
            rgpu_device_kind_name(o->worker.device));
  }
  /* Under systemd (Type=notify): ready once every listener is bound. */
  if (rgpu_server_notify("READY=1") < 0)
    RGPU_WARN("could not tell systemd that the server is ready ($NOTIFY_SOCKET)");
  rgpu_metrics *metrics = NULL;
  if (o->metrics) {
    char merr[512];
    if (rgpu_metrics_open(o->metrics, &metrics, merr, sizeof merr)) {
      fprintf(stderr, "rgpu-server: %s\n", merr);
      goto fail;
    }
    fprintf(stderr, "rgpu-server: metrics on http://%s/metrics\n", rgpu_metrics_address(metrics));
  } else {
    /* Without --metrics the slots still hold the session table that
     * NVML_QUERY lists (rgpu smi, nvmlDeviceGetComputeRunningProcesses);
     * without them a session would see only itself. */
    char merr[512];
    if (rgpu_metrics_open(NULL, &metrics, merr, sizeof merr))
      RGPU_WARN("no session table, NVML process lists show one session: %s", merr);
  }
  fflush(stderr);

  o->worker.server_start = rgpu_wall_s();
  o->worker.max_sessions = o->max_sessions;
  o->worker.grace_s = o->grace_s;
  int drain_ms = (o->drain_s < 0 ? 30 : o->drain_s) * 1000;
  o->worker.drain_s = drain_ms / 1000;
  int draining = 0, shutdown_sent = 0;
  uint64_t drain_t0 = 0;

  size_t ncap = 16, nchild = 0;
  rgpu_child *kids = calloc(ncap, sizeof *kids);
  if (!kids) goto fail;
  /* active: session workers (before and after HELLO); adm.authed: those
   * admitted after an authenticated HELLO; active - adm.authed are pending
   * authentication (bounded by --max-pending-auth). */
  uint32_t active = 0, refusers = 0;
  admission adm = {.max_sessions = o->max_sessions};
  uint32_t max_pending = o->max_pending_auth ? o->max_pending_auth : 16;
  unsigned pending_refused = 0;
  uint64_t next_session = 1;
  uint64_t last_token_check = 0;
  unsigned accept_failures = 0;
  struct pollfd *pfd = NULL;
  size_t pfd_cap = 0;

  for (;;) {
    if (fs_dead == 1) {
      /* No worker can start any more.  Restarting it would mean forking
       * from this multithreaded process, the very hazard it exists to
       * avoid; so stop taking connections and let the running sessions
       * finish as in a drain, then exit 1 for the supervisor to restart
       * the server. */
      fs_dead = 2;
      exit_status = 1;
      /* Closed before the line is logged: whoever reads it finds the
       * ports already refusing. */
      for (int i = 0; i < nl; i++) {
        rgpu_listener_close(ls[i]);
        ls[i] = NULL;
      }
      RGPU_ERROR("event=forkserver-died pid=%d reason=\"%s\": no new session can start; "
                 "listeners closed, draining %u session%s",
                 (int)rgpu_forkserver_pid(fs), rgpu_forkserver_death(fs), active,
                 active == 1 ? "" : "s");
      /* Its reports are over: a worker whose control channel is already
       * closed has exited (channels close only with their worker). */
      for (size_t k = 0; k < nchild;) {
        if (kids[k].ctl >= 0) {
          k++;
          continue;
        }
        if (kids[k].refuser) refusers--; else active--;
        if (kids[k].authed) adm.authed--;
        kids[k] = kids[--nchild];
      }
      if (!stop_requested) stop_requested = 1;
    }
    if (stop_requested && !draining) {
      /* Drain: refuse new sessions, let running ones finish (and resume). */
      draining = 1;
      drain_t0 = rgpu_clock_ns();
      snprintf(o->worker.refuse_new, sizeof o->worker.refuse_new,
               "the server is shutting down; try again later");
      RGPU_INFO("event=drain sessions=%u drain_s=%d", active, drain_ms / 1000);
      /* Sessions whose client is gone end now; connected ones may finish. */
      for (size_t k = 0; k < nchild; k++) {
        rgpu_ctl_msg m = {.type = RGPU_CTL_DRAIN};
        if (kids[k].ctl >= 0) ctl_send(kids[k].ctl, &m);
      }
    }
    if (draining && !shutdown_sent &&
        (active == 0 || stop_requested > 1 || rgpu_clock_elapsed_s(drain_t0) * 1000.0 >= drain_ms))
      break;
    /* pfd: the signal pipe, the listeners, the fork server, the workers'
     * control channels. */
    size_t kbase = (size_t)nl + 2;
    if (RGPU_ARRAY_RESERVE(pfd, pfd_cap, kbase + nchild, kbase + 16)) break;
    pfd[0].fd = sig_pipe[0];
    pfd[0].events = POLLIN;
    for (int i = 0; i < nl; i++) {
      pfd[i + 1].fd = ls[i] ? rgpu_listener_poll_fd(ls[i]) : -1;
      pfd[i + 1].events = POLLIN;
      pfd[i + 1].revents = 0;
    }
    pfd[nl + 1].fd = rgpu_forkserver_poll_fd(fs); /* exit reports; -1 once it is gone */
    pfd[nl + 1].events = POLLIN;
    for (size_t k = 0; k < nchild; k++) {
      pfd[kbase + k].fd = kids[k].ctl;
      pfd[kbase + k].events = POLLIN;
      pfd[kbase + k].revents = 0;
    }
    int timeout = -1;
    if (draining) {
      double left = drain_ms - rgpu_clock_elapsed_s(drain_t0) * 1000.0;
      timeout = left > 0 ? (int)left + 1 : 0;
    }
    /* Job tokens are looked at about once a second while a session holds one. */
    int job_sessions = 0;
    for (size_t k = 0; k < nchild; k++)
      if (kids[k].job_token[0] && !kids[k].revoked) job_sessions = 1;
    if (job_sessions && (timeout < 0 || timeout > 1000)) timeout = 1000;
    size_t npoll_kids = nchild;
    int pr = poll(pfd, (nfds_t)(kbase + npoll_kids), timeout);
    if (pr < 0 && errno != EINTR) {
      RGPU_ERROR("poll: %s", strerror(errno));
      break;
    }
    char drain[64];
    while (read(sig_pipe[0], drain, sizeof drain) > 0) {
    }
    if (reload_requested) {
      reload_requested = 0;
      reload_secrets(o, ls, nl);
    }
    if (job_sessions && rgpu_clock_elapsed_s(last_token_check) >= 0.5) {
      last_token_check = rgpu_clock_ns();
      revoke_job_sessions(o, kids, nchild);
    }
    /* Every finished worker: the fork server reaped it and says how it
     * ended. */
    for (;;) {
      int st;
      pid_t pid;
      int er = rgpu_forkserver_next_exit(fs, &pid, &st);
      if (er < 0 && !fs_dead) fs_dead = 1;
      if (er <= 0) break;
      rgpu_metrics_reaped(metrics, pid, st);
      for (size_t k = 0; k < nchild; k++) {
        if (kids[k].pid != pid) continue;
        if (kids[k].refuser) {
          refusers--;
        } else {
          active--;
          if (kids[k].authed) adm.authed--;
          /* The worker logs its own orderly end; only deaths are ours. */
          if (WIFSIGNALED(st))
            RGPU_WARN("session=%llu peer=%s transport=%s event=end status=signal:%d duration_s=%.3f",
                      (unsigned long long)kids[k].session_id, kids[k].peer, kids[k].transport,
                      WTERMSIG(st), rgpu_clock_elapsed_s(kids[k].start_ns));
        }
        if (kids[k].ctl >= 0) close(kids[k].ctl);
        kids[k] = kids[--nchild];
        break;
      }
    }
    if (fs_dead == 1) continue; /* said and handled at the top */
    if (pr <= 0) continue;
    /* Control messages (index k is still valid: reaping above moved kids,
     * so match by descriptor). */
    for (size_t p = 0; p < npoll_kids; p++) {
      if (!pfd[kbase + p].revents || pfd[kbase + p].fd < 0) continue;
      for (size_t k = 0; k < nchild; k++)
        if (kids[k].ctl == pfd[kbase + p].fd) {
          handle_worker_msg(kids, nchild, k, &adm);
          /* Without a fork server no exit report comes: the channel's
           * end is the worker's. */
          if (fs_dead && kids[k].ctl < 0) {
            if (kids[k].refuser) refusers--; else active--;
            if (kids[k].authed) adm.authed--;
            kids[k] = kids[--nchild];
          }
          break;
        }
    }
    for (int i = 0; i < nl && !fs_dead; i++) {
      if (!ls[i] || !(pfd[i + 1].revents & (POLLIN | POLLERR | POLLHUP))) continue;
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
      if (rgpu_conn_stream_index(c) > 0) {
        route_stream(kids, nchild, c);
        continue;
      }
      if (RGPU_ARRAY_RESERVE(kids, ncap, nchild + 1, 16)) {
        rgpu_conn_close(c);
        continue;
      }
      /* Full or draining: a short-lived worker still answers, so that a
       * HELLO gets a reason and a RESUME still reaches its session. */
      int full = draining || (o->max_sessions && adm.authed >= o->max_sessions);
      if (!full) {
        /* Workers before authentication are bounded apart from the
         * sessions, and the oldest makes room for the newest: peers that
         * stay silent (or send half a HELLO) can neither lock real
         * clients out nor pile up. */
        uint32_t pending = 0;
        size_t oldest = nchild;
        for (size_t k = 0; k < nchild; k++) {
          if (kids[k].refuser || kids[k].authed || kids[k].evicted) continue;
          pending++;
          if (oldest == nchild || kids[k].start_ns < kids[oldest].start_ns) oldest = k;
        }
        if (pending >= max_pending && oldest < nchild) {
          if (pending_refused++ % 100 == 0)
            RGPU_WARN("peer=%s transport=%s event=evicted reason=pending-auth pending=%u "
                      "(--max-pending-auth %u)", kids[oldest].peer, kids[oldest].transport,
                      pending, max_pending);
          rgpu_metrics_refused(metrics, "pending-auth");
          kids[oldest].evicted = 1;
          kill_worker(fs, kids[oldest].pid);
        }
      }
      if (full && refusers >= 16) {
        /* Under a flood, a bare close is all a full server can afford. */
        rgpu_conn_close(c);
        continue;
      }
      uint64_t sid = full ? 0 : next_session++;
      int mslot = full ? -1 : rgpu_metrics_session_begin(metrics, sid, lname[i]);
      rgpu_child *kid = &kids[nchild];
      memset(kid, 0, sizeof *kid);
      kid->session_id = sid;
      kid->refuser = full;
      kid->qkey = rgpu_conn_session_key(c);
      snprintf(kid->peer, sizeof kid->peer, "%s", rgpu_conn_peer(c));
      snprintf(kid->transport, sizeof kid->transport, "%.15s", lname[i]); /* tcp, quic, ... */
      kid->start_ns = rgpu_clock_ns();
      int sp[2] = {-1, -1};
      if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) {
        RGPU_WARN("socketpair: %s (session without resume)", strerror(errno));
        sp[0] = sp[1] = -1;
      }
      kid->ctl = sp[0];
      o->worker.ctl_fd = sp[1] > 0 ? sp[1] : 0;
      if (full && !draining)
        snprintf(o->worker.refuse_new, sizeof o->worker.refuse_new,
                 "server full (%u sessions); try again later", o->max_sessions);
      else if (!draining)
        o->worker.refuse_new[0] = 0;
      o->worker.session_id = sid;
      o->worker.sessions_active = active + 1;
      snprintf(o->worker.peer, sizeof o->worker.peer, "%s", kid->peer);
      snprintf(o->worker.transport, sizeof o->worker.transport, "%s", kid->transport);

      quic_direct_config(o, &o->worker, strcmp(lname[i], "quic") ? NULL : lhost[i]);
      worker_spawn_arg arg;
      memset(&arg, 0, sizeof arg);
      arg.cfg = o->worker;
      arg.cfg.ctl_fd = 0; /* the child's own number comes with the descriptor */
      arg.metrics_slot = mslot;
      arg.full = full;
      arg.draining = draining;
      arg.active = active;
      int wfds[WORKER_NFDS];
      wfds[WORKER_FD_CTL] = sp[1];
      wfds[WORKER_FD_METRICS] = mslot >= 0 ? rgpu_metrics_slots_fd(metrics) : -1;
      pid_t pid = -1;
      char ferr[256];
      int src = rgpu_forkserver_spawn(fs, &arg, sizeof arg, c, wfds, WORKER_NFDS, &pid, ferr,
                                      sizeof ferr);
      if (src) {
        RGPU_ERROR("fork: %s (session refused)", ferr);
        rgpu_metrics_session_pid(metrics, mslot, -1);
        rgpu_conn_close(c);
        if (sp[0] >= 0) close(sp[0]);
        if (sp[1] >= 0) close(sp[1]);
        o->worker.ctl_fd = 0;
        if (src == RGPU_FORKSERVER_EDEAD) fs_dead = 1;
        continue;
      }
      kid->pid = pid;
      rgpu_metrics_session_pid(metrics, mslot, pid);
      if (sp[1] >= 0) close(sp[1]);
      o->worker.ctl_fd = 0;
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

  /* End of the drain: the sessions still running are told SHUTDOWN (the
   * client reports it), free their state and exit. */
  RGPU_INFO("shutting down: %u active session%s", active, active == 1 ? "" : "s");
  for (int i = 0; i < nl; i++) rgpu_listener_close(ls[i]);
  nl = 0;
  for (size_t k = 0; k < nchild; k++) {
    rgpu_ctl_msg m = {.type = RGPU_CTL_SHUTDOWN};
    snprintf(m.text, sizeof m.text, "the server is shutting down (drain period of %d s over)",
             drain_ms / 1000);
    /* A worker without a channel (socketpair failed) still ends on SIGKILL below. */
    if (kids[k].ctl < 0 || ctl_send(kids[k].ctl, &m)) kill_worker(fs, kids[k].pid);
  }
  shutdown_sent = 1;
  (void)shutdown_sent;
  int grace = o->shutdown_timeout_ms > 0 ? o->shutdown_timeout_ms : 5000;
  uint64_t t0 = rgpu_clock_ns();
  int killed = 0;
  while (nchild > 0) {
    int st;
    pid_t pid;
    int er = rgpu_forkserver_next_exit(fs, &pid, &st);
    if (er > 0) {
      for (size_t k = 0; k < nchild; k++)
        if (kids[k].pid == pid) {
          if (kids[k].ctl >= 0) close(kids[k].ctl);
          kids[k] = kids[--nchild];
          break;
        }
      continue;
    }
    if (er < 0) {
      /* No fork server, no reports: a worker has ended when its control
       * channel has (ctl-less ones only end by the SIGKILL below). */
      for (size_t k = 0; k < nchild;) {
        char b[sizeof(rgpu_ctl_msg)];
        ssize_t r = kids[k].ctl >= 0 ? recv(kids[k].ctl, b, sizeof b, MSG_DONTWAIT) : -1;
        if (r == 0 || (r < 0 && kids[k].ctl >= 0 && errno != EAGAIN && errno != EINTR) ||
            (killed && kids[k].ctl < 0)) {
          if (kids[k].ctl >= 0) close(kids[k].ctl);
          kids[k] = kids[--nchild];
          continue;
        }
        if (r > 0) continue; /* a late message: read on, to the end */
        k++;
      }
      if (nchild == 0) break;
    }
    double waited_ms = rgpu_clock_elapsed_s(t0) * 1000.0;
    if (!killed && waited_ms > grace) {
      for (size_t k = 0; k < nchild; k++) {
        RGPU_WARN("session=%llu did not stop within %d ms: killing", (unsigned long long)kids[k].session_id,
                  grace);
        kill_worker(fs, kids[k].pid);
      }
      killed = 1;
    }
    /* SIGKILL takes effect at once; the reports come right behind it. */
    if (killed && waited_ms > grace + 2000.0) break;
    struct pollfd pf = {rgpu_forkserver_poll_fd(fs), POLLIN, 0};
    poll(&pf, 1, 20);
  }
  for (size_t k = 0; k < nchild; k++)
    if (kids[k].ctl >= 0) close(kids[k].ctl);
  free(kids);
  free(pfd);
  rgpu_metrics_close(metrics);
  close(sig_pipe[0]);
  close(sig_pipe[1]);
  /* Workers still running (only after a failed SIGKILL) outlive it. */
  rgpu_forkserver_stop(fs);
  o->forkserver = NULL;
  return exit_status;

fail:
  for (int i = 0; i < nl; i++) rgpu_listener_close(ls[i]);
  rgpu_forkserver_stop(fs);
  o->forkserver = NULL;
  return 1;
}
