/* Helpers shared by the transport unit tests: an echo server on a listener
 * (one thread per accepted conn) and a full-duplex, byte-exact echo check. */
#ifndef RGPU_TRANSPORT_TESTUTIL_H
#define RGPU_TRANSPORT_TESTUTIL_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_transport.h"

static inline uint8_t tu_pattern(size_t i, unsigned seed) {
  return (uint8_t)((i * 131u) ^ (i >> 11) ^ seed);
}

static void *tu_echo_conn(void *arg) {
  rgpu_conn *c = arg;
  size_t cap = 1 << 20;
  char *buf = malloc(cap);
  for (;;) {
    ssize_t n = rgpu_conn_read_some(c, buf, cap);
    if (n <= 0) break;
    struct iovec v = {buf, (size_t)n};
    if (rgpu_conn_writev_all(c, &v, 1)) break;
  }
  free(buf);
  rgpu_conn_close(c);
  return NULL;
}

typedef struct {
  rgpu_listener *l;
  int nconns;
  pthread_t th;
} tu_echo_server;

static void *tu_echo_accept_loop(void *arg) {
  tu_echo_server *s = arg;
  pthread_t workers[64];
  int n = 0;
  for (int i = 0; i < s->nconns && i < 64; i++) {
    rgpu_conn *c;
    char err[256];
    if (rgpu_listener_accept(s->l, &c, err, sizeof err)) {
      fprintf(stderr, "accept: %s\n", err);
      break;
    }
    pthread_create(&workers[n++], NULL, tu_echo_conn, c);
  }
  for (int i = 0; i < n; i++) pthread_join(workers[i], NULL);
  return NULL;
}

static inline void tu_echo_start(tu_echo_server *s, rgpu_listener *l, int nconns) {
  s->l = l;
  s->nconns = nconns;
  pthread_create(&s->th, NULL, tu_echo_accept_loop, s);
}
static inline void tu_echo_join(tu_echo_server *s) { pthread_join(s->th, NULL); }

typedef struct {
  rgpu_conn *c;
  const uint8_t *data;
  size_t total, piece;
  int rc;
} tu_writer;

static void *tu_writer_main(void *arg) {
  tu_writer *w = arg;
  size_t npieces = (w->total + w->piece - 1) / w->piece;
  struct iovec *iov = calloc(npieces, sizeof *iov);
  for (size_t i = 0; i < npieces; i++) {
    iov[i].iov_base = (void *)(w->data + i * w->piece);
    size_t left = w->total - i * w->piece;
    iov[i].iov_len = left < w->piece ? left : w->piece;
  }
  w->rc = rgpu_conn_writev_all(w->c, iov, (int)npieces);
  free(iov);
  return NULL;
}

/* Sends `total` bytes in one gathered write of `piece`-sized parts while
 * reading the echo back; returns 0 when every byte came back in order. */
static inline int tu_echo_check(rgpu_conn *c, size_t total, size_t piece, unsigned seed) {
  uint8_t *data = malloc(total), *back = malloc(total);
  for (size_t i = 0; i < total; i++) data[i] = tu_pattern(i, seed);
  tu_writer w = {c, data, total, piece, -1};
  pthread_t th;
  pthread_create(&th, NULL, tu_writer_main, &w);
  int rc = rgpu_conn_read_exact(c, back, total);
  pthread_join(th, NULL);
  int ok = rc == 0 && w.rc == 0 && memcmp(data, back, total) == 0;
  if (!ok) fprintf(stderr, "echo check: read rc %d, write rc %d\n", rc, w.rc);
  free(data);
  free(back);
  return ok ? 0 : -1;
}

typedef struct {
  const char *uri;
  const rgpu_transport_opts *o;
  unsigned seed;
  int rc;
} tu_par_client;

static void *tu_par_client_main(void *arg) {
  tu_par_client *p = arg;
  rgpu_conn *c;
  char err[256];
  p->rc = rgpu_conn_connect(p->uri, p->o, &c, err, sizeof err);
  if (p->rc) {
    fprintf(stderr, "parallel connect: %s\n", err);
    return NULL;
  }
  p->rc = tu_echo_check(c, 4u << 20, 1000 + p->seed * 77, p->seed);
  rgpu_conn_close(c);
  return NULL;
}

/* n clients at once, each a 4 MiB full-duplex echo; returns failures. */
static inline int tu_parallel_clients(const char *uri, const rgpu_transport_opts *o, int n) {
  pthread_t th[32];
  tu_par_client pc[32];
  for (int i = 0; i < n && i < 32; i++) {
    pc[i] = (tu_par_client){uri, o, (unsigned)i, -1};
    pthread_create(&th[i], NULL, tu_par_client_main, &pc[i]);
  }
  int bad = 0;
  for (int i = 0; i < n && i < 32; i++) {
    pthread_join(th[i], NULL);
    if (pc[i].rc) bad++;
  }
  return bad;
}

/* Client half-closes after its request; the server still answers. */
static inline int tu_half_close(rgpu_listener *l, const char *uri, const rgpu_transport_opts *o) {
  rgpu_conn *c, *w;
  char err[256];
  if (rgpu_conn_connect(uri, o, &c, err, sizeof err)) return -1;
  struct iovec v = {"request", 7};
  if (rgpu_conn_writev_all(c, &v, 1)) return -2;
  rgpu_conn_shutdown(c);
  if (rgpu_listener_accept(l, &w, err, sizeof err)) return -3;
  char b[16];
  if (rgpu_conn_read_exact(w, b, 7) || memcmp(b, "request", 7)) return -4;
  if (rgpu_conn_read_some(w, b, sizeof b) != 0) return -5; /* EOF after the request */
  struct iovec r = {"reply", 5};
  if (rgpu_conn_writev_all(w, &r, 1)) return -6;
  rgpu_conn_close(w);
  if (rgpu_conn_read_exact(c, b, 5) || memcmp(b, "reply", 5)) return -7;
  ssize_t n = rgpu_conn_read_some(c, b, sizeof b);
  rgpu_conn_close(c);
  return n == 0 ? 0 : -8;
}

#endif
