/* tls://: TCP + TLS 1.3 through GnuTLS.
 *
 * Client: GnuTLS runs in-process on the calling threads (one reader and one
 * writer may work at once; GnuTLS allows that for TLS 1.3 records).
 * Server: the listener owns one relay thread that accepts TCP, runs every
 * handshake non-blocking, and then shuttles decrypted bytes between each TLS
 * session and a socketpair whose other end rgpu_listener_accept returns.  A
 * client that fails the handshake (wrong certificate, plain TCP, no client
 * certificate when one is required) never reaches the accept queue, so it
 * costs the server nothing but the handshake. */
#include "rgpu_tls_internal.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <gnutls/crypto.h>
#include <gnutls/x509.h>

#include "rgpu_array.h"
#include "rgpu_clock.h"
#include "rgpu_log.h"
#include "rgpu_spin.h"
#include "rgpu_thread_name.h"

/* TLS 1.3 only; QUIC additionally needs compat mode off, harmless for TCP. */
static const char tls_priority[] = "NORMAL:-VERS-ALL:+VERS-TLS1.3:%DISABLE_TLS13_COMPAT_MODE";

static pthread_once_t gnutls_once = PTHREAD_ONCE_INIT;
static int gnutls_init_rc;
static void gnutls_init_once(void) { gnutls_init_rc = gnutls_global_init(); }

static int file_readable(const char *what, const char *path, char *err, size_t errlen) {
  if (access(path, R_OK) < 0)
    return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "%s '%s': %s", what, path, strerror(errno));
  return 0;
}

int rgpu_tls_client_creds(const rgpu_transport_opts *o, gnutls_certificate_credentials_t *out,
                          char *err, size_t errlen) {
  pthread_once(&gnutls_once, gnutls_init_once);
  if (gnutls_init_rc < 0)
    return rgpu_t_fail(err, errlen, RGPU_T_EIO, "GnuTLS init: %s", gnutls_strerror(gnutls_init_rc));
  gnutls_certificate_credentials_t cred;
  if (gnutls_certificate_allocate_credentials(&cred) < 0)
    return rgpu_t_fail(err, errlen, RGPU_T_EIO, "out of memory");
  int r;
  if (o->ca_file && *o->ca_file) {
    if ((r = file_readable("CA file (RGPU_CA)", o->ca_file, err, errlen))) goto fail;
    r = gnutls_certificate_set_x509_trust_file(cred, o->ca_file, GNUTLS_X509_FMT_PEM);
    if (r <= 0) {
      r = rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "CA file '%s': %s", o->ca_file,
                      r == 0 ? "no PEM certificate in it" : gnutls_strerror(r));
      goto fail;
    }
  } else {
    r = gnutls_certificate_set_x509_system_trust(cred);
    if (r < 0) {
      r = rgpu_t_fail(err, errlen, RGPU_T_EINVAL,
                      "no CA file given (set RGPU_CA to the server's certificate) and the system "
                      "trust store failed to load: %s", gnutls_strerror(r));
      goto fail;
    }
  }
  if ((o->cert_file && *o->cert_file) != (o->key_file && *o->key_file)) {
    r = rgpu_t_fail(err, errlen, RGPU_T_EINVAL,
                    "client certificate needs both a certificate and a key file");
    goto fail;
  }
  if (o->cert_file && *o->cert_file) {
    if ((r = file_readable("client certificate", o->cert_file, err, errlen))) goto fail;
    if ((r = file_readable("client key", o->key_file, err, errlen))) goto fail;
    r = gnutls_certificate_set_x509_key_file(cred, o->cert_file, o->key_file, GNUTLS_X509_FMT_PEM);
    if (r < 0) {
      r = rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "client certificate '%s' / key '%s': %s",
                      o->cert_file, o->key_file, gnutls_strerror(r));
      goto fail;
    }
  }
  *out = cred;
  return 0;
fail:
  gnutls_certificate_free_credentials(cred);
  return r;
}

int rgpu_tls_server_creds(const rgpu_transport_opts *o, gnutls_certificate_credentials_t *out,
                          char *err, size_t errlen) {
  pthread_once(&gnutls_once, gnutls_init_once);
  if (gnutls_init_rc < 0)
    return rgpu_t_fail(err, errlen, RGPU_T_EIO, "GnuTLS init: %s", gnutls_strerror(gnutls_init_rc));
  if (!o->cert_file || !*o->cert_file || !o->key_file || !*o->key_file)
    return rgpu_t_fail(err, errlen, RGPU_T_EINVAL,
                       "a TLS/QUIC listener needs a certificate and a key (--cert, --key; "
                       "`rgpu-server --gen-cert DIR` makes a self-signed pair)");
  int r;
  if ((r = file_readable("server certificate", o->cert_file, err, errlen))) return r;
  if ((r = file_readable("server key", o->key_file, err, errlen))) return r;
  gnutls_certificate_credentials_t cred;
  if (gnutls_certificate_allocate_credentials(&cred) < 0)
    return rgpu_t_fail(err, errlen, RGPU_T_EIO, "out of memory");
  r = gnutls_certificate_set_x509_key_file(cred, o->cert_file, o->key_file, GNUTLS_X509_FMT_PEM);
  if (r < 0) {
    r = rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "server certificate '%s' / key '%s': %s",
                    o->cert_file, o->key_file, gnutls_strerror(r));
    goto fail;
  }
  char when[512];
  int dates = rgpu_tls_cert_check_dates(o->cert_file, time(NULL), when, sizeof when);
  if (dates < 0) {
    r = rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "%s", when);
    goto fail;
  }
  if (dates == 1) {
    /* Logged once per listener: clients with a right clock refuse it. */
    RGPU_WARN("%s", when);
  }
  if (o->client_ca_file && *o->client_ca_file) {
    if ((r = file_readable("client CA file", o->client_ca_file, err, errlen))) goto fail;
    r = gnutls_certificate_set_x509_trust_file(cred, o->client_ca_file, GNUTLS_X509_FMT_PEM);
    if (r <= 0) {
      r = rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "client CA file '%s': %s", o->client_ca_file,
                      r == 0 ? "no PEM certificate in it" : gnutls_strerror(r));
      goto fail;
    }
  }
  *out = cred;
  return 0;
fail:
  gnutls_certificate_free_credentials(cred);
  return r;
}

int rgpu_tls_server_cred_init(rgpu_tls_server_cred *c, const rgpu_transport_opts *o, char *err,
                              size_t errlen) {
  memset(c, 0, sizeof *c);
  gnutls_certificate_credentials_t cred = NULL;
  int rc = rgpu_tls_server_creds(o, &cred, err, errlen);
  if (rc) return rc;
  atomic_store(&c->current, cred);
  return 0;
}

gnutls_certificate_credentials_t rgpu_tls_server_cred_get(rgpu_tls_server_cred *c) {
  return atomic_load(&c->current);
}

int rgpu_tls_server_cred_reload(rgpu_tls_server_cred *c, const rgpu_transport_opts *o, char *err,
                                size_t errlen) {
  /* Room for the old set first: once swapped, it must not be lost. */
  if (RGPU_ARRAY_RESERVE(c->retired, c->retired_cap, c->nretired + 1, 4))
    return rgpu_t_fail(err, errlen, RGPU_T_EIO, "out of memory");
  gnutls_certificate_credentials_t fresh = NULL;
  int rc = rgpu_tls_server_creds(o, &fresh, err, errlen);
  if (rc) return rc;
  c->retired[c->nretired++] = atomic_exchange(&c->current, fresh);
  return 0;
}

void rgpu_tls_server_cred_free(rgpu_tls_server_cred *c) {
  gnutls_certificate_credentials_t cur = atomic_exchange(&c->current, NULL);
  if (cur) gnutls_certificate_free_credentials(cur);
  for (size_t i = 0; i < c->nretired; i++) gnutls_certificate_free_credentials(c->retired[i]);
  free(c->retired);
  c->retired = NULL;
  c->nretired = c->retired_cap = 0;
}

static void utc_date(time_t t, char *out, size_t cap) {
  struct tm tm;
  if (t == (time_t)-1 || !gmtime_r(&t, &tm) || !strftime(out, cap, "%Y-%m-%d %H:%M:%S UTC", &tm))
    snprintf(out, cap, "an unreadable date");
}

int rgpu_tls_cert_check_dates(const char *cert_file, time_t now, char *err, size_t errlen) {
  pthread_once(&gnutls_once, gnutls_init_once);
  gnutls_datum_t pem = {0};
  int g = gnutls_load_file(cert_file, &pem);
  if (g < 0)
    return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "server certificate '%s': %s", cert_file,
                       gnutls_strerror(g));
  gnutls_x509_crt_t crt;
  if (gnutls_x509_crt_init(&crt) < 0) {
    gnutls_free(pem.data);
    return rgpu_t_fail(err, errlen, RGPU_T_EIO, "out of memory");
  }
  /* The first certificate of the file is the server's own (a chain follows). */
  g = gnutls_x509_crt_import(crt, &pem, GNUTLS_X509_FMT_PEM);
  gnutls_free(pem.data);
  if (g < 0) {
    gnutls_x509_crt_deinit(crt);
    return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "server certificate '%s': %s", cert_file,
                       gnutls_strerror(g));
  }
  time_t from = gnutls_x509_crt_get_activation_time(crt);
  time_t until = gnutls_x509_crt_get_expiration_time(crt);
  gnutls_x509_crt_deinit(crt);
  char f[64], u[64], n[64];
  utc_date(from, f, sizeof f);
  utc_date(until, u, sizeof u);
  utc_date(now, n, sizeof n);
  if (until != (time_t)-1 && now > until)
    return rgpu_t_fail(err, errlen, RGPU_T_EINVAL,
                       "server certificate '%s' expired on %s (valid from %s; now %s): every "
                       "client would refuse it; make a new one (`rgpu-server --gen-cert DIR` for "
                       "a self-signed pair)",
                       cert_file, u, f, n);
  if (from != (time_t)-1 && now < from) {
    snprintf(err, errlen,
             "server certificate '%s' is not valid before %s (until %s; now %s): clients refuse "
             "it until then; is this machine's clock right?",
             cert_file, f, u, n);
    return 1;
  }
  return 0;
}

int rgpu_bytes_look_like_tls(const unsigned char *p, size_t n) {
  /* A TLS record: content type change_cipher_spec (20), alert (21),
   * handshake (22) or application data (23), then version 3.x (SSL 3.0 to
   * TLS 1.3 all put 3,0..4 on the wire).  An rgpu frame starts "RGP1". */
  if (n < 3) return 0;
  return p[0] >= 20 && p[0] <= 23 && p[1] == 3 && p[2] <= 4;
}

int rgpu_tls_describe_failure(gnutls_session_t s, int gerr, const char *what, char *err,
                              size_t errlen) {
  if (gerr == GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR) {
    unsigned status = gnutls_session_get_verify_cert_status(s);
    gnutls_datum_t txt = {0};
    const char *msg = "certificate not trusted";
    if (gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &txt, 0) == 0)
      msg = (const char *)txt.data;
    rgpu_t_fail(err, errlen, RGPU_T_EAUTH,
                "%s: certificate verification failed: %s (check RGPU_CA / the server name)", what,
                msg);
    gnutls_free(txt.data);
    return RGPU_T_EAUTH;
  }
  if (gerr == GNUTLS_E_FATAL_ALERT_RECEIVED) {
    gnutls_alert_description_t a = gnutls_alert_get(s);
    int code = RGPU_T_EAUTH;
    const char *hint = "";
    if (a == GNUTLS_A_CERTIFICATE_REQUIRED || a == GNUTLS_A_BAD_CERTIFICATE ||
        a == GNUTLS_A_UNKNOWN_CA)
      hint = " (the server wants a client certificate it trusts)";
    return rgpu_t_fail(err, errlen, code, "%s: the peer refused the handshake: %s%s", what,
                       gnutls_alert_get_name(a), hint);
  }
  if (gerr == GNUTLS_E_CERTIFICATE_REQUIRED || gerr == GNUTLS_E_NO_CERTIFICATE_FOUND ||
      gerr == GNUTLS_E_CERTIFICATE_ERROR)
    return rgpu_t_fail(err, errlen, RGPU_T_EAUTH, "%s: %s", what, gnutls_strerror(gerr));
  if (gerr == GNUTLS_E_TIMEDOUT)
    return rgpu_t_fail(err, errlen, RGPU_T_ETIMEDOUT, "%s: handshake timed out", what);
  if (gerr == GNUTLS_E_PREMATURE_TERMINATION || gerr == GNUTLS_E_PUSH_ERROR ||
      gerr == GNUTLS_E_PULL_ERROR)
    return rgpu_t_fail(err, errlen, RGPU_T_ECLOSED,
                       "%s: the peer closed the connection during the TLS handshake (is it a "
                       "tls:// listener, and does it accept this client?)", what);
  return rgpu_t_fail(err, errlen, RGPU_T_EAUTH, "%s: TLS handshake failed: %s", what,
                     gnutls_strerror(gerr));
}

/* GnuTLS's own push function uses sendmsg without MSG_NOSIGNAL: a peer
 * that vanished would raise SIGPIPE in the user's program or the server. */
static ssize_t tls_vec_push(gnutls_transport_ptr_t p, const giovec_t *iov, int iovcnt) {
  struct msghdr mh = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};
  return sendmsg((int)(intptr_t)p, &mh, MSG_NOSIGNAL);
}

static void tls_set_fd(gnutls_session_t s, int fd) {
  gnutls_transport_set_int(s, fd);
  gnutls_transport_set_vec_push_function(s, tls_vec_push);
}

/* ---- client ---------------------------------------------------------------- */

typedef struct {
  gnutls_session_t s;
  gnutls_certificate_credentials_t cred;
  int eof;
  pid_t owner; /* a forked child must not send close_notify on our stream */
  /* Small pieces of a gathered write are packed into full records instead
   * of one record (and 22+ bytes of overhead) each. */
  char stage[16384];
  /* During rgpu_conn_writev_all_reading: the socket is non-blocking, and a
   * record that cannot go out waits in poll, taking input in meanwhile. */
  int fd;
  int (*on_readable)(void *ctx);
  void *ctx;
} tls_client;

static int tls_send_all(tls_client *t, const char *p, size_t n) {
  gnutls_session_t s = t->s;
  while (n > 0) {
    ssize_t w = gnutls_record_send(s, p, n);
    if (w == GNUTLS_E_AGAIN && t->on_readable) {
      /* Non-blocking socket: GnuTLS keeps the unsent part of its record
       * for the retry, and reading in between is allowed (its send and
       * receive record states are apart). */
      int rc = rgpu_wait_writable_reading(t->fd, t->on_readable, t->ctx);
      if (rc) return rc;
      continue;
    }
    if (w == GNUTLS_E_INTERRUPTED || w == GNUTLS_E_AGAIN) continue;
    if (w < 0) return (w == GNUTLS_E_PUSH_ERROR) ? RGPU_T_ECLOSED : RGPU_T_EIO;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static int tls_writev(rgpu_conn *c, const struct iovec *iov, int iovcnt) {
  tls_client *t = c->impl;
  size_t staged = 0;
  for (int i = 0; i < iovcnt; i++) {
    const char *p = iov[i].iov_base;
    size_t n = iov[i].iov_len;
    if (n <= sizeof t->stage - staged) {
      memcpy(t->stage + staged, p, n);
      staged += n;
      continue;
    }
    if (staged) {
      /* Top the staging record up to full size before flushing it. */
      size_t fill = sizeof t->stage - staged;
      memcpy(t->stage + staged, p, fill);
      p += fill;
      n -= fill;
      int rc = tls_send_all(t, t->stage, sizeof t->stage);
      if (rc) return rc;
      staged = 0;
    }
    size_t direct = n - n % sizeof t->stage;
    if (direct) {
      int rc = tls_send_all(t, p, direct);
      if (rc) return rc;
    }
    memcpy(t->stage, p + direct, n - direct);
    staged = n - direct;
  }
  return staged ? tls_send_all(t, t->stage, staged) : 0;
}

static ssize_t tls_read(rgpu_conn *c, void *buf, size_t len) {
  tls_client *t = c->impl;
  if (len == 0 || t->eof) return 0;
  for (;;) {
    ssize_t r = gnutls_record_recv(t->s, buf, len);
    if (r >= 0) {
      if (r == 0) t->eof = 1;
      return r;
    }
    if (r == GNUTLS_E_AGAIN && t->on_readable) {
      /* Reading in the middle of a non-blocking write: the rest of the
       * record is on its way. */
      rgpu_wait_fd(t->fd, POLLIN, -1);
      continue;
    }
    if (r == GNUTLS_E_INTERRUPTED || r == GNUTLS_E_AGAIN) continue;
    if (r == GNUTLS_E_PREMATURE_TERMINATION || r == GNUTLS_E_PULL_ERROR) {
      snprintf(c->errmsg, sizeof c->errmsg, "TLS peer %s closed the connection without close_notify",
               c->peer);
      return RGPU_T_ECLOSED;
    }
    if (!gnutls_error_is_fatal((int)r)) continue; /* e.g. a session ticket or key update */
    /* With TLS 1.3 a server rejects a client certificate only after the
     * client finished its handshake, so that refusal arrives here. */
    char what[180];
    snprintf(what, sizeof what, "TLS connection to %s", c->peer);
    return rgpu_tls_describe_failure(t->s, (int)r, what, c->errmsg, sizeof c->errmsg);
  }
}

static size_t tls_pending(const rgpu_conn *c) {
  const tls_client *t = c->impl;
  return gnutls_record_check_pending(t->s);
}

static void tls_shutdown(rgpu_conn *c) {
  tls_client *t = c->impl;
  if (t->owner != getpid()) return;
  gnutls_bye(t->s, GNUTLS_SHUT_WR);
  shutdown(c->fd, SHUT_WR);
}

static void tls_destroy(rgpu_conn *c) {
  tls_client *t = c->impl;
  if (!t) return;
  gnutls_deinit(t->s);
  gnutls_certificate_free_credentials(t->cred);
  free(t);
}

static int tls_writev_reading(rgpu_conn *c, const struct iovec *iov, int iovcnt,
                              int (*on_readable)(void *ctx), void *ctx) {
  tls_client *t = c->impl;
  int fl = fcntl(c->fd, F_GETFL);
  if (fl < 0 || fcntl(c->fd, F_SETFL, fl | O_NONBLOCK) < 0) return tls_writev(c, iov, iovcnt);
  t->fd = c->fd;
  t->on_readable = on_readable;
  t->ctx = ctx;
  int rc = tls_writev(c, iov, iovcnt);
  t->on_readable = NULL;
  t->ctx = NULL;
  fcntl(c->fd, F_SETFL, fl);
  return rc;
}

static const struct rgpu_conn_ops tls_client_ops = {
    .writev_all = tls_writev,
    .writev_reading = tls_writev_reading,
    .read_some = tls_read,
    .pending = tls_pending,
    .shutdown = tls_shutdown,
    .destroy = tls_destroy,
};

int rgpu_tls_connect(const rgpu_uri *u, const rgpu_transport_opts *o, rgpu_conn **out,
                     char *err, size_t errlen) {
  tls_client *t = calloc(1, sizeof *t);
  if (!t) return rgpu_t_fail(err, errlen, RGPU_T_EIO, "out of memory");
  int rc = rgpu_tls_client_creds(o, &t->cred, err, errlen);
  if (rc) {
    free(t);
    return rc;
  }
  uint64_t t0 = rgpu_clock_ns();
  int timeout_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 10000;
  char peer[128];
  int fd = rgpu_tcp_connect_socket(u, o, peer, sizeof peer, err, errlen);
  if (fd < 0) {
    gnutls_certificate_free_credentials(t->cred);
    free(t);
    return fd;
  }
  const char *name = (o->server_name && *o->server_name) ? o->server_name : u->host;
  gnutls_init(&t->s, GNUTLS_CLIENT);
  gnutls_priority_set_direct(t->s, tls_priority, NULL);
  gnutls_credentials_set(t->s, GNUTLS_CRD_CERTIFICATE, t->cred);
  /* SNI only for names; RFC 6066 forbids IP literals there. */
  struct in6_addr tmp;
  if (inet_pton(AF_INET, name, &tmp) != 1 && inet_pton(AF_INET6, name, &tmp) != 1)
    gnutls_server_name_set(t->s, GNUTLS_NAME_DNS, name, strlen(name));
  gnutls_session_set_verify_cert(t->s, name, 0);
  gnutls_datum_t alpn = {(unsigned char *)RGPU_ALPN, sizeof RGPU_ALPN - 1};
  gnutls_alpn_set_protocols(t->s, &alpn, 1, 0);
  tls_set_fd(t->s, fd);
  int left = timeout_ms - (int)((rgpu_clock_ns() - t0) / 1000000);
  gnutls_handshake_set_timeout(t->s, (unsigned)(left > 100 ? left : 100));
  int g;
  do {
    g = gnutls_handshake(t->s);
  } while (g < 0 && !gnutls_error_is_fatal(g));
  if (g < 0) {
    char what[300];
    snprintf(what, sizeof what, "TLS connect to %s:%u", u->host, u->port);
    rc = rgpu_tls_describe_failure(t->s, g, what, err, errlen);
    gnutls_deinit(t->s);
    gnutls_certificate_free_credentials(t->cred);
    free(t);
    close(fd);
    return rc;
  }
  rgpu_conn *c = calloc(1, sizeof *c);
  if (!c) {
    gnutls_deinit(t->s);
    gnutls_certificate_free_credentials(t->cred);
    free(t);
    close(fd);
    return rgpu_t_fail(err, errlen, RGPU_T_EIO, "out of memory");
  }
  c->ops = &tls_client_ops;
  c->fd = fd;
  c->impl = t;
  t->owner = getpid();
  snprintf(c->name, sizeof c->name, "tls");
  snprintf(c->peer, sizeof c->peer, "%s", peer);
  *out = c;
  return 0;
}

/* ---- server relay -------------------------------------------------------- */

enum { SESS_HANDSHAKE, SESS_RELAY };
#define RELAY_BUF (256 * 1024)

typedef struct tls_sess {
  struct tls_sess *next;
  int state;
  int tcp;   /* the client's socket */
  int rel;   /* our end of the socketpair */
  int wfd;   /* worker end until queued */
  gnutls_session_t s;
  uint64_t deadline_ns; /* handshake deadline, then the close-grace deadline */
  uint64_t started_ns;  /* accepted at */
  char peer[128];
  /* client -> worker */
  char *down;
  size_t down_off, down_len;
  int tls_eof;       /* no more bytes will come from the client */
  int rel_wr_closed; /* shutdown(rel, SHUT_WR) done */
  int worker_gone;   /* the worker reads no more: client bytes are dropped */
  /* worker -> client */
  char *up;
  size_t up_off, up_len;
  int rel_eof;  /* the worker has finished sending */
  int bye_sent;
  int want_tcp_out;
  uint64_t asked_ns; /* when client bytes last went to the worker */
} tls_sess;

typedef struct {
  rgpu_relay_queue q;
  int lfd;
  rgpu_tls_server_cred cred;
  int require_client_cert;
  int hs_timeout_ms;
  pthread_t th;
  int th_started;
  tls_sess *sessions;
  int nsessions;
  int evict_when_full; /* this round may evict stale handshakes for new clients */
  uint64_t evictions;  /* handshakes evicted so far (logged in bursts) */
} tls_server;

#define TLS_MAX_HANDSHAKES RGPU_T_MAX_PENDING_HANDSHAKES
#define TLS_HS_EVICT_AGE_MS RGPU_T_HS_EVICT_AGE_MS

static void sess_free(tls_sess *x) {
  if (x->s) {
    if (x->state == SESS_RELAY && !x->bye_sent) gnutls_bye(x->s, GNUTLS_SHUT_WR);
    gnutls_deinit(x->s);
  }
  rgpu_relay_close_fd(x->tcp);
  rgpu_relay_close_fd(x->rel);
  rgpu_relay_close_fd(x->wfd);
  free(x->down);
  free(x->up);
  free(x);
}

static void sess_new(tls_server *sv, int fd, const char *peer) {
  tls_sess *x = calloc(1, sizeof *x);
  if (!x) {
    close(fd);
    return;
  }
  x->tcp = fd;
  x->rel = x->wfd = -1;
  rgpu_relay_fd_register(fd);
  snprintf(x->peer, sizeof x->peer, "%s", peer);
  rgpu_set_nonblock(fd, 1);
  gnutls_init(&x->s, GNUTLS_SERVER | GNUTLS_NONBLOCK | GNUTLS_NO_TICKETS);
  gnutls_priority_set_direct(x->s, tls_priority, NULL);
  gnutls_credentials_set(x->s, GNUTLS_CRD_CERTIFICATE, rgpu_tls_server_cred_get(&sv->cred));
  if (sv->require_client_cert) {
    gnutls_certificate_server_set_request(x->s, GNUTLS_CERT_REQUIRE);
    gnutls_session_set_verify_cert(x->s, NULL, 0);
  }
  gnutls_datum_t alpn = {(unsigned char *)RGPU_ALPN, sizeof RGPU_ALPN - 1};
  gnutls_alpn_set_protocols(x->s, &alpn, 1, 0);
  tls_set_fd(x->s, fd);
  x->started_ns = rgpu_clock_ns();
  x->deadline_ns = x->started_ns + (uint64_t)sv->hs_timeout_ms * 1000000ull;
  x->next = sv->sessions;
  sv->sessions = x;
  sv->nsessions++;
}

/* Returns 0 to keep the session, -1 to drop it. */
static int sess_handshake(tls_server *sv, tls_sess *x) {
  int g = gnutls_handshake(x->s);
  if (g == GNUTLS_E_AGAIN || g == GNUTLS_E_INTERRUPTED) return 0;
  if (g < 0 && !gnutls_error_is_fatal(g)) return 0;
  if (g < 0) {
    char what[300], msg[512];
    snprintf(what, sizeof what, "TLS client %s", x->peer);
    if (g == GNUTLS_E_PREMATURE_TERMINATION || g == GNUTLS_E_PULL_ERROR || g == GNUTLS_E_PUSH_ERROR)
      snprintf(msg, sizeof msg, "%s closed the connection during the handshake", what);
    else if (g == GNUTLS_E_FATAL_ALERT_RECEIVED)
      snprintf(msg, sizeof msg, "%s aborted the handshake: %s", what,
               gnutls_alert_get_name(gnutls_alert_get(x->s)));
    else
      rgpu_tls_describe_failure(x->s, g, what, msg, sizeof msg);
    RGPU_INFO("%s (refused before any session was created)", msg);
    gnutls_alert_send_appropriate(x->s, g);
    return -1;
  }
  int rel, wfd;
  if (rgpu_relay_socketpair(&rel, &wfd) < 0) {
    RGPU_WARN("tls: socketpair for %s: %s", x->peer, strerror(errno));
    return -1;
  }
  x->down = malloc(RELAY_BUF);
  x->up = malloc(RELAY_BUF);
  if (!x->down || !x->up) {
    rgpu_relay_close_fd(rel);
    rgpu_relay_close_fd(wfd);
    return -1;
  }
  x->rel = rel;
  x->state = SESS_RELAY;
  x->deadline_ns = 0;
  rgpu_relay_queue_push(&sv->q, wfd, x->peer, 0, 0);
  return 0;
}

/* Moves bytes as far as they go without blocking. */
static int sess_pump(tls_sess *x) {
  int progress = 1;
  while (progress) {
    progress = 0;
    /* client -> worker */
    if (!x->tls_eof && x->down_len == 0) {
      ssize_t r = gnutls_record_recv(x->s, x->down, RELAY_BUF);
      if (r > 0) {
        x->down_off = 0;
        x->down_len = (size_t)r;
        progress = 1;
      } else if (r == 0 || r == GNUTLS_E_PREMATURE_TERMINATION || r == GNUTLS_E_PULL_ERROR ||
                 (r < 0 && gnutls_error_is_fatal((int)r))) {
        if (r < 0) RGPU_DEBUG("tls: %s: %s", x->peer, gnutls_strerror((int)r));
        x->tls_eof = 1;
        progress = 1;
      }
    }
    if (x->down_len > 0 && x->worker_gone) {
      x->down_len = 0;
      progress = 1;
    } else if (x->down_len > 0) {
      ssize_t w = send(x->rel, x->down + x->down_off, x->down_len, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) {
        x->down_off += (size_t)w;
        x->down_len -= (size_t)w;
        x->asked_ns = rgpu_clock_ns();
        progress = 1;
      } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
        /* The worker stopped reading: it ended the session, e.g. refused a
         * HELLO that came with requests behind it.  Dropping the
         * connection now would lose what it wrote last (the refusal and
         * its reason, still in the socketpair): the client's further bytes
         * are dropped instead, and the worker's go out before the close. */
        x->worker_gone = 1;
        x->down_len = 0;
        progress = 1;
      }
    }
    if (x->tls_eof && x->down_len == 0 && !x->rel_wr_closed) {
      shutdown(x->rel, SHUT_WR);
      x->rel_wr_closed = 1;
    }
    /* worker -> client */
    if (!x->rel_eof && x->up_len == 0) {
      ssize_t r = recv(x->rel, x->up, RELAY_BUF, MSG_DONTWAIT);
      if (r > 0) {
        x->up_off = 0;
        x->up_len = (size_t)r;
        progress = 1;
      } else if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        x->rel_eof = 1;
        progress = 1;
      }
    }
    x->want_tcp_out = 0;
    if (x->up_len > 0) {
      ssize_t w = gnutls_record_send(x->s, x->up + x->up_off, x->up_len);
      if (w > 0) {
        x->up_off += (size_t)w;
        x->up_len -= (size_t)w;
        progress = 1;
      } else if (w == GNUTLS_E_AGAIN || w == GNUTLS_E_INTERRUPTED) {
        x->want_tcp_out = 1;
      } else {
        return -1; /* the client is gone; the worker sees EOF when we close */
      }
    }
    if (x->rel_eof && x->up_len == 0 && !x->bye_sent) {
      /* close_notify may not fit into a full socket buffer: retry it on
       * POLLOUT rather than cut it off with shutdown(). */
      int g = gnutls_bye(x->s, GNUTLS_SHUT_WR);
      if (g == GNUTLS_E_AGAIN || g == GNUTLS_E_INTERRUPTED) {
        x->want_tcp_out = 1;
        break;
      }
      shutdown(x->tcp, SHUT_WR);
      x->bye_sent = 1;
      /* A client that never answers our close must not linger forever. */
      x->deadline_ns = rgpu_clock_ns() + 5000000000ull;
    }
  }
  if (x->tls_eof && x->down_len == 0 && x->rel_eof && x->up_len == 0 && x->bye_sent) return -1;
  return 0;
}

/* With every handshake slot taken, drops the oldest pending handshake if it
 * is old enough to be evicted, so that one more client can be accepted.
 * Returns 0 when a slot is free (or was freed), -1 when none can be. */
static int tls_evict_oldest_handshake(tls_server *sv) {
  int handshaking = 0;
  tls_sess **oldest = NULL;
  for (tls_sess **pp = &sv->sessions; *pp; pp = &(*pp)->next) {
    if ((*pp)->state != SESS_HANDSHAKE) continue;
    handshaking++;
    if (!oldest || (*pp)->started_ns < (*oldest)->started_ns) oldest = pp;
  }
  if (handshaking < TLS_MAX_HANDSHAKES) return 0;
  uint64_t now = rgpu_clock_ns();
  if (!oldest || now < (*oldest)->started_ns + (uint64_t)TLS_HS_EVICT_AGE_MS * 1000000ull)
    return -1;
  tls_sess *x = *oldest;
  *oldest = x->next;
  sv->nsessions--;
  /* One line per 256 evictions: a flood must not flood the log too. */
  if (sv->evictions++ % TLS_MAX_HANDSHAKES == 0)
    RGPU_WARN("tls: all %d handshake slots are taken by clients that do not finish their "
              "handshake (%s, %.1f s); the oldest give their slot to new clients (%llu so far)",
              TLS_MAX_HANDSHAKES, x->peer, (double)(now - x->started_ns) / 1e9,
              (unsigned long long)sv->evictions);
  sess_free(x);
  return 0;
}

static void *tls_relay_main(void *arg) {
  rgpu_thread_name("rgpu-tls-rly");
  tls_server *sv = arg;
  struct pollfd *pfd = NULL;
  tls_sess **who = NULL;
  size_t pfd_cap = 0, who_cap = 0;
  /* Polls after traffic as long as a worker does (rgpu_spin.h). */
  rgpu_spin_window spin;
  rgpu_spin_window_init(&spin, 200);
  for (;;) {
    size_t need = 2 + 2 * (size_t)sv->nsessions;
    /* Out of memory for the poll set ends the relay, as a failed poll does. */
    if (RGPU_ARRAY_RESERVE(pfd, pfd_cap, need, 2 * need) || RGPU_ARRAY_RESERVE(who, who_cap, need, 2 * need))
      break;
    size_t n = 0;
    pfd[n++] = (struct pollfd){.fd = sv->q.stop_r, .events = POLLIN};
    /* Unfinished handshakes are bounded (memory), but silent peers must not
     * hold every slot until their deadline (issue 14: 256 of them locked
     * real clients out for the whole timeout, and forever if renewed).
     * When the slots are full, the oldest handshake gives its slot to a new
     * client once it is older than TLS_HS_EVICT_AGE_MS: a real client's
     * handshake takes a few round trips, far less than that; only a stream
     * of new connections faster than 256 per second can still crowd out
     * another client, which is load, not a slowloris. */
    int handshaking = 0;
    tls_sess *oldest = NULL;
    uint64_t now = rgpu_clock_ns(), next = UINT64_MAX;
    for (tls_sess *x = sv->sessions; x; x = x->next) {
      if (x->state != SESS_HANDSHAKE) continue;
      handshaking++;
      if (!oldest || x->started_ns < oldest->started_ns) oldest = x;
    }
    int can_accept = handshaking < TLS_MAX_HANDSHAKES;
    if (!can_accept && oldest) {
      uint64_t evictable = oldest->started_ns + (uint64_t)TLS_HS_EVICT_AGE_MS * 1000000ull;
      if (now >= evictable) {
        can_accept = 1;
        sv->evict_when_full = 1;
      } else if (evictable < next) {
        next = evictable; /* wake when it can be evicted */
      }
    }
    pfd[n++] = (struct pollfd){.fd = can_accept ? sv->lfd : -1, .events = POLLIN};
    int immediate = 0;
    for (tls_sess *x = sv->sessions; x; x = x->next) {
      rgpu_spin_window_await(&spin, x->asked_ns);
      if (x->deadline_ns && x->deadline_ns < next) next = x->deadline_ns;
      short ev = 0;
      if (x->state == SESS_HANDSHAKE) {
        ev = gnutls_record_get_direction(x->s) ? POLLOUT : POLLIN;
      } else {
        if (!x->tls_eof && x->down_len == 0) {
          ev |= POLLIN;
          if (gnutls_record_check_pending(x->s)) immediate = 1;
        }
        if (x->want_tcp_out) ev |= POLLOUT;
      }
      /* poll reports HUP/ERR even for no events; a closed client whose
       * data still waits for a slow worker must not make us spin. */
      who[n] = x;
      pfd[n++] = (struct pollfd){.fd = ev ? x->tcp : -1, .events = ev};
      if (x->state == SESS_RELAY) {
        short rev = 0;
        if (!x->rel_eof && x->up_len == 0) rev |= POLLIN;
        if (x->down_len > 0) rev |= POLLOUT;
        who[n] = x;
        pfd[n++] = (struct pollfd){.fd = rev ? x->rel : -1, .events = rev};
      }
    }
    int pr = rgpu_spin_window_ppoll(&spin, pfd, n, immediate ? now : next);
    if (pr < 0 && errno != EINTR) {
      RGPU_ERROR("tls relay: poll: %s", strerror(errno));
      break;
    }
    if (pfd[0].revents) break;
    if (pfd[1].revents & POLLIN) {
      for (int k = 0; k < 32; k++) {
        if (sv->evict_when_full && tls_evict_oldest_handshake(sv) < 0) break;
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(sv->lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        char peer[128];
        rgpu_sockaddr_string((struct sockaddr *)&ss, sl, peer, sizeof peer);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        sess_new(sv, fd, peer);
      }
      sv->evict_when_full = 0;
    }
    /* Every session is pumped each round: cheap at the scale of one server's
     * clients, and it cannot miss data GnuTLS already buffered. */
    now = rgpu_clock_ns();
    tls_sess **pp = &sv->sessions;
    while (*pp) {
      tls_sess *x = *pp;
      int drop = 0;
      if (x->state == SESS_HANDSHAKE) {
        drop = sess_handshake(sv, x) < 0;
        if (!drop && x->state == SESS_HANDSHAKE && x->deadline_ns && now >= x->deadline_ns) {
          RGPU_INFO("TLS client %s: handshake timed out; dropped", x->peer);
          drop = 1;
        }
      }
      if (!drop && x->state == SESS_RELAY) {
        drop = sess_pump(x) < 0;
        if (!drop && x->bye_sent && x->deadline_ns && now >= x->deadline_ns) drop = 1;
      }
      if (drop) {
        *pp = x->next;
        sv->nsessions--;
        sess_free(x);
      } else {
        pp = &x->next;
      }
    }
  }
  free(pfd);
  free(who);
  return NULL;
}

static int tls_accept(rgpu_listener *l, rgpu_conn **out, char *err, size_t errlen) {
  tls_server *sv = l->impl;
  return rgpu_relay_queue_pop(&sv->q, "tls", out, err, errlen);
}

static void tls_server_close(rgpu_listener *l) {
  tls_server *sv = l->impl;
  /* In a forked worker the relay thread does not exist and the atfork
   * handler already closed its descriptors; touching anything else here
   * would close descriptor numbers the worker has reused. */
  if (rgpu_relay_in_forked_child()) return;
  if (sv->th_started) {
    char b = 1;
    (void)!write(sv->q.stop_w, &b, 1);
    pthread_join(sv->th, NULL);
  }
  while (sv->sessions) {
    tls_sess *x = sv->sessions;
    sv->sessions = x->next;
    sess_free(x);
  }
  rgpu_relay_close_fd(sv->lfd);
  rgpu_relay_queue_destroy(&sv->q);
  rgpu_tls_server_cred_free(&sv->cred);
  free(sv);
}

static int tls_server_reload(rgpu_listener *l, const rgpu_transport_opts *o, char *err,
                             size_t errlen) {
  tls_server *sv = l->impl;
  return rgpu_tls_server_cred_reload(&sv->cred, o, err, errlen);
}

static const struct rgpu_listener_ops tls_listener_ops = {.accept = tls_accept,
                                                          .close = tls_server_close,
                                                          .reload = tls_server_reload};

int rgpu_tls_listen(rgpu_listener *l, const rgpu_transport_opts *o, char *err, size_t errlen) {
  tls_server *sv = calloc(1, sizeof *sv);
  if (!sv) return rgpu_t_fail(err, errlen, RGPU_T_EIO, "out of memory");
  int rc = rgpu_tls_server_cred_init(&sv->cred, o, err, errlen);
  if (rc) {
    free(sv);
    return rc;
  }
  sv->require_client_cert = o->client_ca_file && *o->client_ca_file;
  sv->hs_timeout_ms = o->handshake_timeout_ms > 0 ? o->handshake_timeout_ms : 10000;
  int fd = rgpu_tcp_listen_socket(&l->uri, o, l->address, sizeof l->address, &l->port, err, errlen);
  if (fd < 0) {
    rgpu_tls_server_cred_free(&sv->cred);
    free(sv);
    return fd;
  }
  rgpu_set_nonblock(fd, 1);
  sv->lfd = fd;
  rgpu_relay_fd_register(fd);
  rc = rgpu_relay_queue_init(&sv->q, err, errlen);
  if (rc) {
    rgpu_relay_close_fd(fd);
    rgpu_tls_server_cred_free(&sv->cred);
    free(sv);
    return rc;
  }
  l->impl = sv;
  l->ops = &tls_listener_ops;
  l->fd = sv->q.notify_r;
  if (pthread_create(&sv->th, NULL, tls_relay_main, sv) != 0) {
    tls_server_close(l);
    l->impl = NULL;
    return rgpu_t_fail(err, errlen, RGPU_T_EIO, "tls listener: cannot start relay thread");
  }
  sv->th_started = 1;
  return 0;
}

/* ---- self-signed certificate ------------------------------------------- */

static int write_file(const char *path, const gnutls_datum_t *d, mode_t mode, char *err,
                      size_t errlen) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return rgpu_t_fail(err, errlen, RGPU_T_EIO, "write %s: %s", path, strerror(errno));
  fchmod(fd, mode);
  size_t off = 0;
  while (off < d->size) {
    ssize_t w = write(fd, d->data + off, d->size - off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      int e = errno;
      close(fd);
      return rgpu_t_fail(err, errlen, RGPU_T_EIO, "write %s: %s", path, strerror(e));
    }
    off += (size_t)w;
  }
  if (close(fd) < 0) return rgpu_t_fail(err, errlen, RGPU_T_EIO, "write %s: %s", path, strerror(errno));
  return 0;
}

int rgpu_tls_generate_self_signed(const char *dir, const char *hostnames, char *err,
                                  size_t errlen) {
  if (!dir || !*dir) return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "no directory given");
  if (!hostnames || !*hostnames) hostnames = "localhost,127.0.0.1,::1";
  struct stat st;
  if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
    return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "'%s' is not an existing directory", dir);
  char cpath[4096], kpath[4096];
  if (snprintf(cpath, sizeof cpath, "%s/cert.pem", dir) >= (int)sizeof cpath ||
      snprintf(kpath, sizeof kpath, "%s/key.pem", dir) >= (int)sizeof kpath)
    return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "directory path too long");
  pthread_once(&gnutls_once, gnutls_init_once);
  if (gnutls_init_rc < 0)
    return rgpu_t_fail(err, errlen, RGPU_T_EIO, "GnuTLS init: %s", gnutls_strerror(gnutls_init_rc));

  gnutls_x509_privkey_t key = NULL;
  gnutls_x509_crt_t crt = NULL;
  gnutls_datum_t kd = {0}, cd = {0};
  int rc = RGPU_T_EIO, g;
  const char *step = "key generation";
  if ((g = gnutls_x509_privkey_init(&key)) < 0) goto out;
  if ((g = gnutls_x509_privkey_generate(key, GNUTLS_PK_ECDSA,
                                        GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1), 0)) < 0)
    goto out;
  step = "certificate";
  if ((g = gnutls_x509_crt_init(&crt)) < 0) goto out;
  gnutls_x509_crt_set_version(crt, 3);
  unsigned char serial[16];
  gnutls_rnd(GNUTLS_RND_NONCE, serial, sizeof serial);
  serial[0] &= 0x7f; /* positive */
  serial[0] |= 0x01; /* and without a leading zero byte */
  gnutls_x509_crt_set_serial(crt, serial, sizeof serial);
  time_t now = time(NULL);
  gnutls_x509_crt_set_activation_time(crt, now - 3600);
  gnutls_x509_crt_set_expiration_time(crt, now + 10 * 365 * 24 * 3600L);
  /* The first name becomes the CN as well, for tools that still show it. */
  char first[256];
  size_t fl = strcspn(hostnames, ",");
  if (fl >= sizeof first) fl = sizeof first - 1;
  memcpy(first, hostnames, fl);
  first[fl] = 0;
  if (first[0] && (g = gnutls_x509_crt_set_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, first,
                                                     (unsigned)strlen(first))) < 0)
    goto out;
  if ((g = gnutls_x509_crt_set_key(crt, key)) < 0) goto out;
  const char *p = hostnames;
  int nsan = 0;
  while (*p) {
    size_t len = strcspn(p, ",");
    char name[256];
    if (len >= sizeof name) {
      rc = rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "host name too long in '%s'", hostnames);
      g = 0;
      goto out_noerr;
    }
    memcpy(name, p, len);
    name[len] = 0;
    p += len;
    if (*p == ',') p++;
    char *s = name;
    while (*s == ' ') s++;
    if (!*s) continue;
    unsigned char addr[16];
    if (inet_pton(AF_INET, s, addr) == 1)
      g = gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_IPADDRESS, addr, 4, GNUTLS_FSAN_APPEND);
    else if (inet_pton(AF_INET6, s, addr) == 1)
      g = gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_IPADDRESS, addr, 16, GNUTLS_FSAN_APPEND);
    else
      g = gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_DNSNAME, s, (unsigned)strlen(s),
                                               GNUTLS_FSAN_APPEND);
    if (g < 0) goto out;
    nsan++;
  }
  if (!nsan) {
    rc = rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "no host names in '%s'", hostnames);
    goto out_noerr;
  }
  gnutls_x509_crt_set_basic_constraints(crt, 0, -1);
  gnutls_x509_crt_set_key_usage(crt, GNUTLS_KEY_DIGITAL_SIGNATURE);
  gnutls_x509_crt_set_key_purpose_oid(crt, GNUTLS_KP_TLS_WWW_SERVER, 0);
  gnutls_x509_crt_set_key_purpose_oid(crt, GNUTLS_KP_TLS_WWW_CLIENT, 0);
  unsigned char kid[64];
  size_t kidlen = sizeof kid;
  if (gnutls_x509_crt_get_key_id(crt, 0, kid, &kidlen) >= 0)
    gnutls_x509_crt_set_subject_key_id(crt, kid, kidlen);
  step = "signing";
  if ((g = gnutls_x509_crt_sign2(crt, crt, key, GNUTLS_DIG_SHA256, 0)) < 0) goto out;
  step = "export";
  if ((g = gnutls_x509_privkey_export2(key, GNUTLS_X509_FMT_PEM, &kd)) < 0) goto out;
  if ((g = gnutls_x509_crt_export2(crt, GNUTLS_X509_FMT_PEM, &cd)) < 0) goto out;
  rc = write_file(kpath, &kd, 0600, err, errlen);
  if (!rc) rc = write_file(cpath, &cd, 0644, err, errlen);
  goto out_noerr;
out:
  rc = rgpu_t_fail(err, errlen, RGPU_T_EIO, "self-signed certificate: %s: %s", step,
                   gnutls_strerror(g));
out_noerr:
  gnutls_free(kd.data);
  gnutls_free(cd.data);
  if (crt) gnutls_x509_crt_deinit(crt);
  if (key) gnutls_x509_privkey_deinit(key);
  return rc;
}
