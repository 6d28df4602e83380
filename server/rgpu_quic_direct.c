/* A quic:// session's own QUIC endpoint in its worker: see
 * rgpu_quic_direct.h. */
#include "rgpu_quic_direct.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "rgpu_clock.h"
#include "rgpu_frame.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"
#include "rgpu_thread_name.h"
#include "rgpu_worker_internal.h"

#define DIRECT_MAX_LANES 64

struct rgpu_quic_direct {
  /* Read-only once the accept thread runs. */
  rgpu_transport_opts opts; /* strings point into the worker's cfg */
  uint8_t token[32];
  uint64_t session_id;
  int notify_fd;  /* eventfd: a conn or lane waits for the session thread */
  int stop_fd;    /* eventfd: the accept thread gives up */
  pthread_t th;
  int th_started;
  int fd;         /* the offered socket until the accept thread takes it */

  pthread_mutex_t mu;
  /* Under mu: */
  rgpu_conn *ready;  /* checked, waiting for the session thread */
  uint64_t ready_rx;
  rgpu_conn *lanes[DIRECT_MAX_LANES];
  int nlanes;
};

static void notify(struct rgpu_quic_direct *d) {
  uint64_t one = 1;
  (void)!write(d->notify_fd, &one, sizeof one);
}

/* A refusal the client reads as RESUME's failure (it then stays on the
 * relay). */
static void refuse(rgpu_conn *c, const char *why) {
  rgpu_worker_write_reply_oob(c, RGPU_OP_RESUME, CUDA_ERROR_DEVICE_UNAVAILABLE, why, strlen(why),
                              NULL, 0);
  rgpu_conn_shutdown(c);
}

/* Whether the first frame on c is this session's RESUME; *rx its count. */
static int check_resume(struct rgpu_quic_direct *d, rgpu_conn *c, uint64_t *rx) {
  uint64_t deadline = rgpu_clock_ns() + (uint64_t)RGPU_QUIC_DIRECT_RESUME_MS * 1000000ull;
  uint8_t hdr[RGPU_FRAME_HDR_SIZE];
  if (rgpu_conn_read_exact_by(c, hdr, sizeof hdr, d->stop_fd, deadline)) return 0;
  rgpu_frame_hdr h;
  if (rgpu_frame_hdr_decode(hdr, 1024, &h) || h.kind != RGPU_KIND_REQUEST ||
      h.opcode != RGPU_OP_RESUME) {
    refuse(c, "a direct QUIC port takes RESUME only");
    return 0;
  }
  uint8_t pay[1024];
  if (rgpu_conn_read_exact_by(c, pay, h.length, d->stop_fd, deadline)) return 0;
  rgpu_msg_resume_req q;
  /* Constant time: the token is the session's only secret. */
  unsigned diff = 1;
  if (rgpu_msg_resume_req_decode(pay, h.length, &q) == 0 && q.session_token.len == 32) {
    diff = 0;
    const uint8_t *t = q.session_token.data;
    for (int i = 0; i < 32; i++) diff |= (unsigned)(t[i] ^ d->token[i]);
  }
  if (diff) {
    refuse(c, "not this session's port");
    return 0;
  }
  *rx = q.rx_bytes;
  return 1;
}

static void *accept_main(void *arg) {
  rgpu_thread_name("rgpu-quic-acc");
  struct rgpu_quic_direct *d = arg;
  rgpu_conn *c = NULL;
  char err[256];
  int fd = d->fd;
  d->fd = -1;
  int rc = rgpu_quic_direct_accept(fd, &d->opts, d->stop_fd, RGPU_QUIC_DIRECT_ACCEPT_MS, &c, err,
                                   sizeof err);
  if (rc) {
    RGPU_DEBUG("session=%llu quic direct: %s", (unsigned long long)d->session_id, err);
    return NULL;
  }
  uint64_t rx = 0;
  if (!check_resume(d, c, &rx)) {
    RGPU_WARN("session=%llu quic direct: %s did not resume this session on its port",
              (unsigned long long)d->session_id, rgpu_conn_peer(c));
    rgpu_conn_close(c);
    return NULL;
  }
  pthread_mutex_lock(&d->mu);
  rgpu_conn *older = d->ready; /* an earlier offer's, never taken: superseded */
  d->ready = c;
  d->ready_rx = rx;
  pthread_mutex_unlock(&d->mu);
  if (older) rgpu_conn_close(older);
  notify(d);
  return NULL;
}

/* The direct connection's I/O thread: a stream the client opened. */
static void lane_arrived(void *ctx, rgpu_conn *stream) {
  struct rgpu_quic_direct *d = ctx;
  pthread_mutex_lock(&d->mu);
  int kept = d->nlanes < DIRECT_MAX_LANES;
  if (kept) d->lanes[d->nlanes++] = stream;
  pthread_mutex_unlock(&d->mu);
  if (kept)
    notify(d);
  else
    rgpu_conn_close(stream); /* more lanes than the server allows streams: never */
}

/* Stops and joins the accept thread (session thread). */
static void stop_accept(struct rgpu_quic_direct *d) {
  if (d->th_started) {
    uint64_t one = 1;
    (void)!write(d->stop_fd, &one, sizeof one);
    pthread_join(d->th, NULL);
    d->th_started = 0;
    uint64_t v;
    (void)!read(d->stop_fd, &v, sizeof v);
  }
  if (d->fd >= 0) {
    close(d->fd);
    d->fd = -1;
  }
}

static struct rgpu_quic_direct *direct_state(rgpu_worker *w) {
  if (w->direct) return w->direct;
  struct rgpu_quic_direct *d = calloc(1, sizeof *d);
  if (!d) return NULL;
  d->fd = -1;
  d->notify_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  d->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (d->notify_fd < 0 || d->stop_fd < 0) {
    if (d->notify_fd >= 0) close(d->notify_fd);
    if (d->stop_fd >= 0) close(d->stop_fd);
    free(d);
    return NULL;
  }
  pthread_mutex_init(&d->mu, NULL);
  w->direct = d;
  return d;
}

uint16_t rgpu_quic_direct_offer(rgpu_worker *w, uint32_t client_caps) {
  const typeof(w->cfg.quic_direct) *qc = &w->cfg.quic_direct;
  /* A move is a resume: only a session that can resume can move. */
  if (!qc->on || !(client_caps & RGPU_CAP_QUIC_DIRECT) || strcmp(w->cfg.transport, "quic") ||
      !w->replay.enabled || w->cfg.grace_s <= 0 || w->cfg.ctl_fd <= 0)
    return 0;
  struct rgpu_quic_direct *d = direct_state(w);
  if (!d) return 0;
  stop_accept(d);
  d->opts = (rgpu_transport_opts){
      .cert_file = qc->cert_file,
      .key_file = qc->key_file,
      .client_ca_file = qc->client_ca_file[0] ? qc->client_ca_file : NULL,
      .cc_algo = qc->cc_algo[0] ? qc->cc_algo : NULL,
      .idle_timeout_ms = qc->idle_timeout_ms,
      .keepalive_ms = qc->keepalive_ms,
      .quic_max_pto_ms = qc->max_pto_ms,
      .quic_max_streams = qc->max_streams,
  };
  memcpy(d->token, w->session_token, sizeof d->token);
  d->session_id = w->cfg.session_id;
  uint16_t port = 0;
  char err[256];
  if (rgpu_quic_direct_socket(qc->host, qc->port_lo, qc->port_hi, &d->fd, &port, err,
                              sizeof err)) {
    RGPU_WARN("session=%llu quic direct: %s (the session stays on the relay)",
              (unsigned long long)w->cfg.session_id, err);
    return 0;
  }
  if (pthread_create(&d->th, NULL, accept_main, d) != 0) {
    RGPU_WARN("session=%llu quic direct: cannot start a thread (the session stays on the relay)",
              (unsigned long long)w->cfg.session_id);
    close(d->fd);
    d->fd = -1;
    return 0;
  }
  d->th_started = 1;
  RGPU_DEBUG("session=%llu quic direct: port %u offered", (unsigned long long)w->cfg.session_id,
             port);
  return port;
}

int rgpu_quic_direct_notify_fd(rgpu_worker *w) { return w->direct ? w->direct->notify_fd : -1; }

int rgpu_quic_direct_take(rgpu_worker *w, rgpu_conn **conn, uint64_t *rx_bytes) {
  struct rgpu_quic_direct *d = w->direct;
  if (!d) return 0;
  /* Drained first: whatever comes after this read raises it again. */
  uint64_t v;
  (void)!read(d->notify_fd, &v, sizeof v);
  pthread_mutex_lock(&d->mu);
  rgpu_conn *c = d->ready;
  *rx_bytes = d->ready_rx;
  d->ready = NULL;
  pthread_mutex_unlock(&d->mu);
  if (!c) return 0;
  /* The accept thread has ended (it made c); join it now. */
  if (d->th_started) {
    pthread_join(d->th, NULL);
    d->th_started = 0;
  }
  *conn = c;
  return 1;
}

rgpu_conn *rgpu_quic_direct_take_lane(rgpu_worker *w) {
  struct rgpu_quic_direct *d = w->direct;
  if (!d) return NULL;
  pthread_mutex_lock(&d->mu);
  rgpu_conn *c = NULL;
  if (d->nlanes) {
    c = d->lanes[0];
    memmove(d->lanes, d->lanes + 1, (size_t)--d->nlanes * sizeof d->lanes[0]);
  } else if (!d->ready) {
    /* Nothing waits: quiet the notify fd.  Under mu, so that a lane pushed
     * after this raises it again. */
    uint64_t v;
    (void)!read(d->notify_fd, &v, sizeof v);
  }
  pthread_mutex_unlock(&d->mu);
  return c;
}

int rgpu_quic_direct_conn_waiting(rgpu_worker *w) {
  if (!w->direct) return 0;
  pthread_mutex_lock(&w->direct->mu);
  int waiting = w->direct->ready != NULL;
  pthread_mutex_unlock(&w->direct->mu);
  return waiting;
}

void rgpu_quic_direct_watch(rgpu_worker *w, rgpu_conn *conn) {
  if (w->direct) rgpu_conn_set_stream_handler(conn, lane_arrived, w->direct);
}

void rgpu_quic_direct_free(rgpu_worker *w) {
  struct rgpu_quic_direct *d = w->direct;
  if (!d) return;
  stop_accept(d);
  if (d->ready) rgpu_conn_close(d->ready);
  for (int i = 0; i < d->nlanes; i++) rgpu_conn_close(d->lanes[i]);
  close(d->notify_fd);
  close(d->stop_fd);
  pthread_mutex_destroy(&d->mu);
  free(d);
  w->direct = NULL;
}
