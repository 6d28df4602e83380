#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rgpu_clock.h"
#include "rgpu_transport_testutil.h"
#include "rgpu_transport_internal.h"

#include <arpa/inet.h>

static char srv_dir[64], other_dir[64], cli_dir[64];
static char srv_cert[128], srv_key[128], other_cert[128], cli_cert[128], cli_key[128];

static int setup(void **state) {
  char err[256];
  strcpy(srv_dir, "/tmp/rgpu_quic_test_XXXXXX");
  strcpy(other_dir, "/tmp/rgpu_quic_test_XXXXXX");
  strcpy(cli_dir, "/tmp/rgpu_quic_test_XXXXXX");
  if (!mkdtemp(srv_dir) || !mkdtemp(other_dir) || !mkdtemp(cli_dir)) return -1;
  if (rgpu_tls_generate_self_signed(srv_dir, "localhost,127.0.0.1,::1", err, sizeof err) ||
      rgpu_tls_generate_self_signed(other_dir, "localhost,127.0.0.1", err, sizeof err) ||
      rgpu_tls_generate_self_signed(cli_dir, "client-1", err, sizeof err)) {
    fprintf(stderr, "gen: %s\n", err);
    return -1;
  }
  snprintf(srv_cert, sizeof srv_cert, "%s/cert.pem", srv_dir);
  snprintf(srv_key, sizeof srv_key, "%s/key.pem", srv_dir);
  snprintf(other_cert, sizeof other_cert, "%s/cert.pem", other_dir);
  snprintf(cli_cert, sizeof cli_cert, "%s/cert.pem", cli_dir);
  snprintf(cli_key, sizeof cli_key, "%s/key.pem", cli_dir);
  return 0;
}

static void rmdir_pair(const char *d) {
  char p[128];
  snprintf(p, sizeof p, "%s/cert.pem", d);
  unlink(p);
  snprintf(p, sizeof p, "%s/key.pem", d);
  unlink(p);
  rmdir(d);
}

static int teardown(void **state) {
  rmdir_pair(srv_dir);
  rmdir_pair(other_dir);
  rmdir_pair(cli_dir);
  return 0;
}


static rgpu_listener *open_server(const char *client_ca, char *uri, size_t urilen) {
  rgpu_transport_opts o = {.cert_file = srv_cert, .key_file = srv_key,
                           .client_ca_file = client_ca, .handshake_timeout_ms = 2000};
  rgpu_listener *l;
  char err[256];
  int rc = rgpu_listener_open("quic://127.0.0.1:0", &o, &l, err, sizeof err);
  if (rc) fail_msg("listen: %s", err);
  snprintf(uri, urilen, "quic://127.0.0.1:%u", rgpu_listener_port(l));
  return l;
}

static void test_echo_large_and_concurrent(void **state) {
  char uri[64], err[256];
  rgpu_listener *l = open_server(NULL, uri, sizeof uri);
  assert_int_not_equal(rgpu_listener_port(l), 0);
  tu_echo_server s;
  tu_echo_start(&s, l, 4);
  rgpu_transport_opts co = {.ca_file = srv_cert};
  rgpu_conn *c;
  int rc = rgpu_conn_connect(uri, &co, &c, err, sizeof err);
  if (rc) fail_msg("connect: %s", err);
  assert_string_equal(rgpu_conn_transport_name(c), "quic");
  assert_int_equal(rgpu_conn_raw_fd(c), -1);
  assert_true(rgpu_conn_poll_fd(c) >= 0);
  assert_int_equal(tu_echo_check(c, 64u << 20, 100000 + 3, 1), 0);
  rgpu_conn_close(c);
  rgpu_conn *cs[3];
  co.server_name = "localhost";
  co.cc_algo = "bbr2";
  for (int i = 0; i < 3; i++) {
    rc = rgpu_conn_connect(uri, &co, &cs[i], err, sizeof err);
    if (rc) fail_msg("connect %d: %s", i, err);
  }
  for (int i = 0; i < 3; i++) assert_int_equal(tu_echo_check(cs[i], 4u << 20, 61, (unsigned)i), 0);
  for (int i = 0; i < 3; i++) rgpu_conn_close(cs[i]);
  tu_echo_join(&s);
  rgpu_listener_close(l);
}

static void test_eof_both_ways(void **state) {
  char uri[64], err[256];
  rgpu_listener *l = open_server(NULL, uri, sizeof uri);
  rgpu_transport_opts co = {.ca_file = srv_cert};
  rgpu_conn *c, *w;
  assert_int_equal(rgpu_conn_connect(uri, &co, &c, err, sizeof err), 0);
  struct iovec v = {"ping", 4};
  assert_int_equal(rgpu_conn_writev_all(c, &v, 1), 0);
  assert_int_equal(rgpu_listener_accept(l, &w, err, sizeof err), 0);
  assert_string_equal(rgpu_conn_transport_name(w), "quic");
  assert_non_null(strstr(rgpu_conn_peer(w), "127.0.0.1:"));
  char b[8];
  assert_int_equal(rgpu_conn_read_exact(w, b, 4), 0);
  assert_memory_equal(b, "ping", 4);
  /* The worker ends the session: the client reads the reply, then EOF. */
  struct iovec r = {"pong", 4};
  assert_int_equal(rgpu_conn_writev_all(w, &r, 1), 0);
  rgpu_conn_close(w);
  assert_int_equal(rgpu_conn_read_exact(c, b, 4), 0);
  assert_memory_equal(b, "pong", 4);
  ssize_t n = rgpu_conn_read_some(c, b, sizeof b);
  assert_true(n == 0 || n == RGPU_T_ECLOSED);
  rgpu_conn_close(c);
  /* Client leaves first: the worker sees EOF. */
  assert_int_equal(rgpu_conn_connect(uri, &co, &c, err, sizeof err), 0);
  assert_int_equal(rgpu_listener_accept(l, &w, err, sizeof err), 0);
  assert_int_equal(rgpu_conn_writev_all(c, &v, 1), 0);
  rgpu_conn_close(c);
  assert_int_equal(rgpu_conn_read_exact(w, b, 4), 0);
  assert_int_equal(rgpu_conn_read_some(w, b, sizeof b), 0);
  rgpu_conn_close(w);
  rgpu_listener_close(l);
}

static void test_wrong_ca(void **state) {
  char uri[64], err[512] = "";
  rgpu_listener *l = open_server(NULL, uri, sizeof uri);
  rgpu_transport_opts co = {.ca_file = other_cert};
  rgpu_conn *c;
  assert_int_equal(rgpu_conn_connect(uri, &co, &c, err, sizeof err), RGPU_T_EAUTH);
  assert_non_null(strstr(err, "verification failed"));
  co.ca_file = srv_cert;
  co.server_name = "gpu.example.org";
  assert_int_equal(rgpu_conn_connect(uri, &co, &c, err, sizeof err), RGPU_T_EAUTH);
  assert_non_null(strstr(err, "verification failed"));
  /* Garbage datagrams are dropped without harm. */
  int u = socket(AF_INET, SOCK_DGRAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(rgpu_listener_port(l)),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  unsigned char junk[1200];
  for (int i = 0; i < 200; i++) {
    for (size_t k = 0; k < sizeof junk; k++) junk[k] = (unsigned char)(k * 7 + i * 13);
    junk[0] = (unsigned char)(i & 1 ? 0xc0 : 0x40); /* long and short headers */
    sendto(u, junk, (size_t)(1 + i * 5), 0, (struct sockaddr *)&sa, sizeof sa);
  }
  close(u);
  /* Still serving. */
  tu_echo_server s;
  tu_echo_start(&s, l, 1);
  co.server_name = NULL;
  assert_int_equal(rgpu_conn_connect(uri, &co, &c, err, sizeof err), 0);
  assert_int_equal(tu_echo_check(c, 1 << 20, 1000, 9), 0);
  rgpu_conn_close(c);
  tu_echo_join(&s);
  rgpu_listener_close(l);
}

/* ---- silent handshakes (issue 14) ------------------------------------- */

/* A UDP relay that forwards only the first datagram of each client flow to
 * the server, from a socket of its own per flow, and drops everything else:
 * each client through it leaves the server a handshake that never goes on
 * (what a flood of spoofed or silent peers does). */
typedef struct {
  int fd;               /* where clients send */
  struct sockaddr_in server;
  int ups[512];         /* one upstream socket per flow, kept open */
  struct sockaddr_in seen[512];
  int nflows;
  volatile int stop;
  pthread_t th;
} first_flight_relay;

static void *first_flight_main(void *arg) {
  first_flight_relay *r = arg;
  unsigned char buf[65536];
  while (!r->stop) {
    struct pollfd p = {r->fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    struct sockaddr_in from;
    socklen_t fl = sizeof from;
    ssize_t n = recvfrom(r->fd, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl);
    if (n <= 0) continue;
    int known = 0;
    for (int i = 0; i < r->nflows && !known; i++)
      known = r->seen[i].sin_port == from.sin_port;
    if (known || r->nflows >= 512) continue;
    int u = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (u < 0) continue;
    r->seen[r->nflows] = from;
    r->ups[r->nflows++] = u;
    sendto(u, buf, (size_t)n, 0, (struct sockaddr *)&r->server, sizeof r->server);
  }
  return NULL;
}

typedef struct {
  const char *uri;
  int n;
} silent_clients;

static void *silent_clients_main(void *arg) {
  silent_clients *sc = arg;
  for (int i = 0; i < sc->n; i++) {
    rgpu_transport_opts o = {.ca_file = srv_cert, .connect_timeout_ms = 150};
    rgpu_conn *c = NULL;
    char err[256];
    if (rgpu_conn_connect(sc->uri, &o, &c, err, sizeof err) == 0) rgpu_conn_close(c);
  }
  return NULL;
}

static void test_silent_handshakes_bounded(void **state) {
  /* A long handshake deadline: without the slot bound, silent peers would
   * hold their connections for all of it. */
  rgpu_transport_opts so = {.cert_file = srv_cert, .key_file = srv_key,
                            .handshake_timeout_ms = 30000};
  rgpu_listener *l;
  char err[256], uri[64], relay_uri[64];
  if (rgpu_listener_open("quic://127.0.0.1:0", &so, &l, err, sizeof err)) fail_msg("listen: %s", err);
  snprintf(uri, sizeof uri, "quic://127.0.0.1:%u", rgpu_listener_port(l));

  first_flight_relay *r = calloc(1, sizeof *r);
  assert_non_null(r);
  r->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(r->fd, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t al = sizeof a;
  getsockname(r->fd, (struct sockaddr *)&a, &al);
  snprintf(relay_uri, sizeof relay_uri, "quic://127.0.0.1:%u", ntohs(a.sin_port));
  r->server = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(rgpu_listener_port(l)),
                                   .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(pthread_create(&r->th, NULL, first_flight_main, r), 0);

  /* The server's warning (one line per 256 evictions) goes to stderr:
   * catch it in a file. */
  char logpath[] = "/tmp/rgpu-quic-silent-XXXXXX";
  int logfd = mkstemp(logpath);
  assert_true(logfd >= 0);
  fflush(stderr);
  int saved = dup(2);
  dup2(logfd, 2);

  /* 300 silent handshakes, more than the 256 slots. */
  enum { THREADS = 20, PER = 15 };
  pthread_t th[THREADS];
  silent_clients sc = {relay_uri, PER};
  for (int i = 0; i < THREADS; i++) pthread_create(&th[i], NULL, silent_clients_main, &sc);
  for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
  int flows = r->nflows;

  /* A real client still gets in (its first Initial may be dropped while no
   * slot is old enough; it retransmits) and its session works. */
  tu_echo_server s;
  tu_echo_start(&s, l, 1);
  rgpu_transport_opts co = {.ca_file = srv_cert, .connect_timeout_ms = 8000};
  rgpu_conn *c;
  int rc = rgpu_conn_connect(uri, &co, &c, err, sizeof err);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  if (rc) fail_msg("a real client was locked out by %d silent handshakes: %s", flows, err);
  assert_int_equal(tu_echo_check(c, 1 << 20, 4096, 3), 0);
  rgpu_conn_close(c);
  tu_echo_join(&s);

  char text[8192] = "";
  ssize_t n = pread(logfd, text, sizeof text - 1, 0);
  text[n > 0 ? n : 0] = 0;
  close(logfd);
  unlink(logpath);
  assert_true(flows > 256);
  /* The bound was reached and the oldest gave way, with one line for it. */
  assert_non_null(strstr(text, "handshake slots are taken"));

  r->stop = 1;
  pthread_join(r->th, NULL);
  for (int i = 0; i < r->nflows; i++) close(r->ups[i]);
  close(r->fd);
  free(r);
  rgpu_listener_close(l);
}

static void test_mtls(void **state) {
  char uri[64], err[512] = "";
  rgpu_listener *l = open_server(cli_cert, uri, sizeof uri);
  rgpu_transport_opts co = {.ca_file = srv_cert};
  rgpu_conn *c;
  assert_int_equal(rgpu_conn_connect(uri, &co, &c, err, sizeof err), RGPU_T_EAUTH);
  assert_non_null(strstr(err, "ertificate"));
  tu_echo_server s;
  tu_echo_start(&s, l, 1);
  rgpu_transport_opts good = {.ca_file = srv_cert, .cert_file = cli_cert, .key_file = cli_key};
  int rc = rgpu_conn_connect(uri, &good, &c, err, sizeof err);
  if (rc) fail_msg("mtls connect: %s", err);
  /* The server asked for a certificate: connect waited for its verdict. */
  rgpu_quic_info qi;
  assert_int_equal(rgpu_conn_quic_info(c, &qi, err, sizeof err), 0);
  assert_int_equal(qi.connect_waited_confirm, 1);
  assert_int_equal(tu_echo_check(c, 1 << 20, 5000, 5), 0);
  rgpu_conn_close(c);
  tu_echo_join(&s);
  rgpu_listener_close(l);
}

static void test_no_server(void **state) {
  /* Bind a UDP port and close it: nothing listens there. */
  rgpu_listener *l;
  char uri[64], err[512];
  l = open_server(NULL, uri, sizeof uri);
  rgpu_listener_close(l);
  rgpu_transport_opts co = {.ca_file = srv_cert, .connect_timeout_ms = 1000};
  rgpu_conn *c;
  int rc = rgpu_conn_connect(uri, &co, &c, err, sizeof err);
  assert_true(rc == RGPU_T_ECONNREFUSED || rc == RGPU_T_ETIMEDOUT);
  assert_non_null(strstr(err, "127.0.0.1"));
  co.cc_algo = "vegas";
  assert_int_equal(rgpu_conn_connect(uri, &co, &c, err, sizeof err), RGPU_T_EINVAL);
  assert_non_null(strstr(err, "vegas"));
}

static void test_fork_worker(void **state) {
  char uri[64], err[256];
  rgpu_listener *l = open_server(NULL, uri, sizeof uri);
  rgpu_transport_opts co = {.ca_file = srv_cert};
  rgpu_conn *c, *w;
  assert_int_equal(rgpu_conn_connect(uri, &co, &c, err, sizeof err), 0);
  assert_int_equal(rgpu_listener_accept(l, &w, err, sizeof err), 0);
  assert_true(rgpu_conn_raw_fd(w) >= 0);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(20);
    /* The client conn's thread does not exist here; only drop the fd. */
    close(rgpu_conn_poll_fd(c));
    rgpu_listener_close(l);
    tu_echo_conn(w);
    _exit(0);
  }
  rgpu_conn_close(w);
  assert_int_equal(tu_echo_check(c, 4u << 20, 65536, 7), 0);
  rgpu_conn_close(c);
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  rgpu_listener_close(l);
}

static void test_migration(void **state) {
  char uri[64], err[256];
  rgpu_listener *l = open_server(NULL, uri, sizeof uri);
  tu_echo_server s;
  tu_echo_start(&s, l, 1);
  rgpu_transport_opts co = {.ca_file = srv_cert};
  rgpu_conn *c;
  assert_int_equal(rgpu_conn_connect(uri, &co, &c, err, sizeof err), 0);
  assert_int_equal(tu_echo_check(c, 1 << 20, 4096, 1), 0);
  /* New local port mid-session: the old socket is gone, so data can only
   * keep flowing if the server follows the connection ID. */
  int rc = rgpu_conn_migrate(c, err, sizeof err);
  if (rc) fail_msg("migrate: %s", err);
  assert_int_equal(tu_echo_check(c, 8u << 20, 65536, 2), 0);
  assert_int_equal(rgpu_conn_migrate(c, err, sizeof err), 0);
  assert_int_equal(tu_echo_check(c, 1 << 20, 100, 3), 0);
  rgpu_conn_close(c);
  tu_echo_join(&s);
  rgpu_listener_close(l);
  /* Not a QUIC conn: a clear refusal. */
  int sv[2];
  socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
  rgpu_conn *p;
  rgpu_conn_from_fd(sv[0], "unix", &p);
  assert_int_equal(rgpu_conn_migrate(p, err, sizeof err), RGPU_T_ENOTSUP);
  rgpu_conn_close(p);
  close(sv[1]);
}

static void test_idle_and_keepalive(void **state) {
  rgpu_transport_opts so = {.cert_file = srv_cert, .key_file = srv_key, .idle_timeout_ms = 300,
                            .keepalive_ms = -1};
  rgpu_listener *l;
  char err[256], uri[64];
  assert_int_equal(rgpu_listener_open("quic://127.0.0.1:0", &so, &l, err, sizeof err), 0);
  snprintf(uri, sizeof uri, "quic://127.0.0.1:%u", rgpu_listener_port(l));
  tu_echo_server s;
  tu_echo_start(&s, l, 2);
  /* Keep-alive PINGs hold an otherwise silent connection open. */
  rgpu_transport_opts ka = {.ca_file = srv_cert, .idle_timeout_ms = 300, .keepalive_ms = 80};
  rgpu_conn *c;
  assert_int_equal(rgpu_conn_connect(uri, &ka, &c, err, sizeof err), 0);
  usleep(900 * 1000);
  assert_int_equal(tu_echo_check(c, 1 << 16, 512, 4), 0);
  rgpu_conn_close(c);
  /* Without them the idle timeout ends it, with a reason. */
  rgpu_transport_opts idle = {.ca_file = srv_cert, .idle_timeout_ms = 300, .keepalive_ms = -1};
  assert_int_equal(rgpu_conn_connect(uri, &idle, &c, err, sizeof err), 0);
  usleep(900 * 1000);
  char b;
  ssize_t r = rgpu_conn_read_some(c, &b, 1);
  assert_int_equal(r, RGPU_T_ETIMEDOUT);
  assert_non_null(strstr(rgpu_conn_error(c), "idle"));
  rgpu_conn_close(c);
  tu_echo_join(&s);
  rgpu_listener_close(l);
}

static rgpu_listener *open_multi(char *uri, size_t urilen) {
  rgpu_transport_opts o = {.cert_file = srv_cert, .key_file = srv_key, .quic_max_streams = 8};
  rgpu_listener *l;
  char err[256];
  if (rgpu_listener_open("quic://127.0.0.1:0", &o, &l, err, sizeof err)) fail_msg("listen: %s", err);
  snprintf(uri, urilen, "quic://127.0.0.1:%u", rgpu_listener_port(l));
  return l;
}

static void test_streams(void **state) {
  char uri[64], err[256];
  rgpu_listener *l = open_multi(uri, sizeof uri);
  rgpu_transport_opts co = {.ca_file = srv_cert};
  rgpu_conn *c, *s1, *s2;
  assert_int_equal(rgpu_conn_connect(uri, &co, &c, err, sizeof err), 0);
  assert_int_equal(rgpu_conn_open_stream(c, &s1, err, sizeof err), 0);
  assert_int_equal(rgpu_conn_open_stream(c, &s2, err, sizeof err), 0);
  assert_string_equal(rgpu_conn_transport_name(s1), "quic");
  /* A stream reaches the server with its first byte. */
  struct iovec v = {"x", 1};
  assert_int_equal(rgpu_conn_writev_all(s1, &v, 1), 0);
  assert_int_equal(rgpu_conn_writev_all(s2, &v, 1), 0);
  assert_int_equal(rgpu_conn_writev_all(c, &v, 1), 0);
  rgpu_conn *w[3];
  int seen = 0;
  uint64_t key = 0;
  for (int i = 0; i < 3; i++) {
    assert_int_equal(rgpu_listener_accept(l, &w[i], err, sizeof err), 0);
    if (i == 0) key = rgpu_conn_session_key(w[i]);
    assert_true(key != 0);
    assert_true(rgpu_conn_session_key(w[i]) == key);
    seen |= 1 << rgpu_conn_stream_index(w[i]);
    char b;
    assert_int_equal(rgpu_conn_read_exact(w[i], &b, 1), 0);
  }
  assert_int_equal(seen, 7);
  pthread_t th[3];
  for (int i = 0; i < 3; i++) pthread_create(&th[i], NULL, tu_echo_conn, w[i]);
  assert_int_equal(tu_echo_check(s1, 4u << 20, 4096, 1), 0);
  assert_int_equal(tu_echo_check(s2, 4u << 20, 333, 2), 0);
  assert_int_equal(tu_echo_check(c, 1u << 20, 1000, 3), 0);
  /* Stream conns may outlive the session conn; they then read an end. */
  rgpu_conn_close(s1);
  rgpu_conn_close(c);
  char b;
  ssize_t r = rgpu_conn_read_some(s2, &b, 1);
  assert_true(r <= 0);
  rgpu_conn_close(s2);
  for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
  rgpu_listener_close(l);
}

typedef struct {
  rgpu_conn *c;
  size_t total;
  int rc;
} bulk_writer;

static void *bulk_write_main(void *arg) {
  bulk_writer *b = arg;
  char *buf = calloc(1, 1 << 20);
  b->rc = 0;
  for (size_t done = 0; done < b->total && !b->rc; done += 1 << 20) {
    struct iovec v = {buf, 1 << 20};
    b->rc = rgpu_conn_writev_all(b->c, &v, 1);
  }
  free(buf);
  return NULL;
}

/* The reason for streams: a thread stuck behind a full window (its server
 * side not reading) must not delay another thread's small calls. */
static void test_streams_no_head_of_line(void **state) {
  char uri[64], err[256];
  rgpu_listener *l = open_multi(uri, sizeof uri);
  rgpu_transport_opts co = {.ca_file = srv_cert};
  rgpu_conn *c, *s1;
  assert_int_equal(rgpu_conn_connect(uri, &co, &c, err, sizeof err), 0);
  assert_int_equal(rgpu_conn_open_stream(c, &s1, err, sizeof err), 0);
  struct iovec v = {"x", 1};
  assert_int_equal(rgpu_conn_writev_all(s1, &v, 1), 0);
  rgpu_conn *w0, *w1;
  assert_int_equal(rgpu_listener_accept(l, &w0, err, sizeof err), 0);
  assert_int_equal(rgpu_listener_accept(l, &w1, err, sizeof err), 0);
  if (rgpu_conn_stream_index(w0) != 0) {
    rgpu_conn *t = w0;
    w0 = w1;
    w1 = t;
  }
  char b;
  assert_int_equal(rgpu_conn_read_exact(w1, &b, 1), 0);
  /* Nobody reads w0: the session stream fills its window and blocks. */
  bulk_writer bw = {c, 96u << 20, -1};
  pthread_t th;
  pthread_create(&th, NULL, bulk_write_main, &bw);
  usleep(300 * 1000);
  pthread_t eth;
  pthread_create(&eth, NULL, tu_echo_conn, w1);
  uint64_t t0 = rgpu_clock_ns();
  for (int i = 0; i < 200; i++) {
    char m[64] = {(char)i};
    struct iovec mv = {m, sizeof m};
    assert_int_equal(rgpu_conn_writev_all(s1, &mv, 1), 0);
    assert_int_equal(rgpu_conn_read_exact(s1, m, sizeof m), 0);
    assert_int_equal(m[0], (char)i);
  }
  double ms = (double)rgpu_clock_elapsed_ns(t0) / 1e6;
  assert_true(ms < 5000);
  /* Now drain the blocked stream; the writer finishes. */
  char *sink = malloc(1 << 20);
  size_t got = 0;
  while (got < bw.total) {
    ssize_t n = rgpu_conn_read_some(w0, sink, 1 << 20);
    assert_true(n > 0);
    got += (size_t)n;
  }
  free(sink);
  pthread_join(th, NULL);
  assert_int_equal(bw.rc, 0);
  rgpu_conn_close(s1);
  rgpu_conn_close(c);
  pthread_join(eth, NULL);
  rgpu_conn_close(w0);
  rgpu_listener_close(l);
}

static void test_streams_refused(void **state) {
  char uri[64], err[256];
  rgpu_listener *l = open_server(NULL, uri, sizeof uri); /* default: one stream */
  rgpu_transport_opts co = {.ca_file = srv_cert};
  rgpu_conn *c, *s1;
  assert_int_equal(rgpu_conn_connect(uri, &co, &c, err, sizeof err), 0);
  assert_int_equal(rgpu_conn_open_stream(c, &s1, err, sizeof err), RGPU_T_ENOTSUP);
  assert_non_null(strstr(err, "no more streams"));
  rgpu_conn_close(c);
  rgpu_listener_close(l);
  rgpu_listener *tl;
  assert_int_equal(rgpu_listener_open("tcp://127.0.0.1:0", NULL, &tl, err, sizeof err), 0);
  char turi[64];
  snprintf(turi, sizeof turi, "tcp://127.0.0.1:%u", rgpu_listener_port(tl));
  assert_int_equal(rgpu_conn_connect(turi, NULL, &c, err, sizeof err), 0);
  assert_int_equal(rgpu_conn_open_stream(c, &s1, err, sizeof err), RGPU_T_ENOTSUP);
  assert_int_equal(rgpu_conn_session_key(c), 0);
  rgpu_conn_close(c);
  rgpu_listener_close(tl);
}

/* A server bound to a wildcard address must answer from the address the
 * client used (127.0.0.2 here), or the client's connected socket drops it. */
static void test_wildcard_and_v6(void **state) {
  const char *binds[] = {"quic://0.0.0.0:0", "quic://[::]:0", "quic://[::1]:0"};
  const char *targets[][2] = {{"127.0.0.2", "127.0.0.1"}, {"127.0.0.2", "[::1]"}, {"[::1]", NULL}};
  for (int b = 0; b < 3; b++) {
    rgpu_transport_opts so = {.cert_file = srv_cert, .key_file = srv_key};
    rgpu_listener *l;
    char err[256], uri[80];
    if (rgpu_listener_open(binds[b], &so, &l, err, sizeof err)) {
      if (b > 0) continue; /* no IPv6 on this machine */
      fail_msg("listen %s: %s", binds[b], err);
    }
    int n = targets[b][1] ? 2 : 1;
    tu_echo_server s;
    tu_echo_start(&s, l, n);
    for (int t = 0; t < n; t++) {
      snprintf(uri, sizeof uri, "quic://%s:%u", targets[b][t], rgpu_listener_port(l));
      rgpu_transport_opts co = {.ca_file = srv_cert, .server_name = "localhost",
                                .connect_timeout_ms = 3000};
      rgpu_conn *c;
      int rc = rgpu_conn_connect(uri, &co, &c, err, sizeof err);
      if (rc) fail_msg("%s -> %s: %s", binds[b], uri, err);
      assert_int_equal(tu_echo_check(c, 1 << 20, 1000, (unsigned)t), 0);
      rgpu_conn_close(c);
    }
    tu_echo_join(&s);
    rgpu_listener_close(l);
  }
}

static void test_parallel_clients(void **state) {
  char uri[64];
  rgpu_listener *l = open_server(NULL, uri, sizeof uri);
  tu_echo_server s;
  tu_echo_start(&s, l, 8);
  rgpu_transport_opts co = {.ca_file = srv_cert};
  assert_int_equal(tu_parallel_clients(uri, &co, 8), 0);
  tu_echo_join(&s);
  rgpu_listener_close(l);
}

static void test_half_close(void **state) {
  char uri[64];
  rgpu_listener *l = open_server(NULL, uri, sizeof uri);
  rgpu_transport_opts co = {.ca_file = srv_cert};
  assert_int_equal(tu_half_close(l, uri, &co), 0);
  rgpu_listener_close(l);
}

/* A lossy UDP middlebox on loopback: forwards between one client and the
 * server, dropping a fixed share of datagrams each way (seeded, so the
 * drop pattern is the same every run). */
typedef struct {
  int fd;              /* faces the client */
  int up;              /* connected to the server */
  struct sockaddr_in client;
  int have_client;
  unsigned loss_permille;
  size_t max_datagram;    /* >0: drop longer datagrams (a link with a smaller MTU) */
  volatile int blackhole; /* drop everything both ways (an outage) */
  uint32_t rng;
  volatile int stop;
  unsigned long fwd, dropped;
  unsigned long dropped_up; /* of those, datagrams from the client */
  /* Connection ID lengths of the last long-header packet each way (-1:
   * none yet), and the first bytes of the last short-header packet up. */
  int up_dcid_len, up_scid_len, down_dcid_len, down_scid_len;
  unsigned char up_server_cid[20];
  unsigned char up_short_head[21];
  unsigned long up_short;
  pthread_t th;
} lossy_proxy;

/* Notes the connection IDs a datagram's first packet shows. */
static void lossy_note_cids(lossy_proxy *p, const unsigned char *b, ssize_t n, int up) {
  if (n < 7) return;
  if (b[0] & 0x80) { /* long header: version, DCID length and DCID, SCID length and SCID */
    int dl = b[5];
    if (6 + dl >= n) return;
    int sl = b[6 + dl];
    if (up) {
      p->up_dcid_len = dl, p->up_scid_len = sl;
      if (dl <= 20) memcpy(p->up_server_cid, b + 6, (size_t)dl);
    } else {
      p->down_dcid_len = dl, p->down_scid_len = sl;
    }
  } else if (up && n >= 21) {
    memcpy(p->up_short_head, b, 21);
    p->up_short++;
  }
}

static int lossy_drop(lossy_proxy *p, ssize_t n) {
  if (p->blackhole) return 1;
  if (p->max_datagram && n > (ssize_t)p->max_datagram) return 1;
  p->rng = p->rng * 1103515245u + 12345u;
  return ((p->rng >> 16) % 1000) < p->loss_permille;
}

static void *lossy_main(void *arg) {
  lossy_proxy *p = arg;
  unsigned char buf[65536];
  while (!p->stop) {
    struct pollfd f[2] = {{.fd = p->fd, .events = POLLIN}, {.fd = p->up, .events = POLLIN}};
    if (poll(f, 2, 50) <= 0) continue;
    if (f[0].revents & POLLIN) {
      socklen_t sl = sizeof p->client;
      ssize_t n = recvfrom(p->fd, buf, sizeof buf, 0, (struct sockaddr *)&p->client, &sl);
      p->have_client = 1;
      lossy_note_cids(p, buf, n, 1);
      if (n > 0 && !lossy_drop(p, n)) send(p->up, buf, (size_t)n, 0), p->fwd++;
      else p->dropped++, p->dropped_up++;
    }
    if (f[1].revents & POLLIN) {
      ssize_t n = recv(p->up, buf, sizeof buf, 0);
      lossy_note_cids(p, buf, n, 0);
      if (n > 0 && p->have_client && !lossy_drop(p, n))
        sendto(p->fd, buf, (size_t)n, 0, (struct sockaddr *)&p->client, sizeof p->client), p->fwd++;
      else p->dropped++;
    }
  }
  return NULL;
}

static uint16_t lossy_start(lossy_proxy *p, uint16_t server_port, unsigned permille) {
  memset(p, 0, sizeof *p);
  p->loss_permille = permille;
  p->rng = 12345;
  p->up_dcid_len = p->up_scid_len = p->down_dcid_len = p->down_scid_len = -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  p->fd = socket(AF_INET, SOCK_DGRAM, 0);
  bind(p->fd, (struct sockaddr *)&a, sizeof a);
  socklen_t sl = sizeof a;
  getsockname(p->fd, (struct sockaddr *)&a, &sl);
  uint16_t port = ntohs(a.sin_port);
  struct sockaddr_in s = {.sin_family = AF_INET, .sin_port = htons(server_port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  p->up = socket(AF_INET, SOCK_DGRAM, 0);
  connect(p->up, (struct sockaddr *)&s, sizeof s);
  pthread_create(&p->th, NULL, lossy_main, p);
  return port;
}

static void lossy_stop(lossy_proxy *p) {
  p->stop = 1;
  pthread_join(p->th, NULL);
  close(p->fd);
  close(p->up);
}

/* A quic listener with `so`, a lossy_proxy dropping `permille` in front of
 * it, an echo server behind it, and a client connected through the proxy
 * with `co`. */
typedef struct {
  rgpu_listener *l;
  lossy_proxy px;
  tu_echo_server s;
  rgpu_conn *c;
} proxied_echo;

static void proxied_echo_open(proxied_echo *e, const rgpu_transport_opts *so, unsigned permille,
                              const rgpu_transport_opts *co) {
  char uri[64], err[256];
  assert_int_equal(rgpu_listener_open("quic://127.0.0.1:0", so, &e->l, err, sizeof err), 0);
  uint16_t pport = lossy_start(&e->px, rgpu_listener_port(e->l), permille);
  snprintf(uri, sizeof uri, "quic://127.0.0.1:%u", pport);
  tu_echo_start(&e->s, e->l, 1);
  if (rgpu_conn_connect(uri, co, &e->c, err, sizeof err)) fail_msg("connect through the proxy: %s", err);
}

static void proxied_echo_close(proxied_echo *e) {
  rgpu_conn_close(e->c);
  tu_echo_join(&e->s);
  lossy_stop(&e->px);
  rgpu_listener_close(e->l);
}

/* 3% loss each way: handshake, bulk and ping-pong still complete intact. */
static void test_loss_recovery(void **state) {
  /* A short idle timeout bounds the test should every CONNECTION_CLOSE copy
   * be lost. */
  rgpu_transport_opts so = {.cert_file = srv_cert, .key_file = srv_key, .idle_timeout_ms = 3000};
  rgpu_transport_opts co = {.ca_file = srv_cert, .cc_algo = "bbr2"};
  proxied_echo e;
  proxied_echo_open(&e, &so, 30, &co);
  rgpu_conn *c = e.c;
  assert_int_equal(tu_echo_check(c, 8u << 20, 10000, 11), 0);
  for (int i = 0; i < 300; i++) {
    char m[64];
    memset(m, i, sizeof m);
    struct iovec v = {m, sizeof m};
    assert_int_equal(rgpu_conn_writev_all(c, &v, 1), 0);
    assert_int_equal(rgpu_conn_read_exact(c, m, sizeof m), 0);
    assert_int_equal((unsigned char)m[63], (unsigned char)i);
  }
  assert_true(e.px.dropped > 0);
  proxied_echo_close(&e);
}

/* Issue 21: every packet carries its receiver's connection ID, so they are
 * short: 4 bytes for the server's (it routes by them), none for the
 * client's.  The handshake's long headers say both lengths; the short
 * headers that follow start with the server's ID. */
static void test_connection_id_lengths(void **state) {
  rgpu_transport_opts so = {.cert_file = srv_cert, .key_file = srv_key};
  rgpu_transport_opts co = {.ca_file = srv_cert};
  proxied_echo e;
  proxied_echo_open(&e, &so, 0, &co);
  assert_int_equal(tu_echo_check(e.c, 1 << 20, 4096, 5), 0);
  /* The client's last long-header packet (a Handshake packet) is addressed
   * to the server's chosen ID; the server's to the client's empty one. */
  assert_int_equal(e.px.up_dcid_len, 4);
  assert_int_equal(e.px.up_scid_len, 0);
  assert_int_equal(e.px.down_dcid_len, 0);
  assert_int_equal(e.px.down_scid_len, 4);
  assert_true(e.px.up_short > 0);
  assert_memory_equal(e.px.up_short_head + 1, e.px.up_server_cid, 4);
  proxied_echo_close(&e);
}

/* Issue 21: what a connection runs with by default and when told
 * otherwise (congestion controller, probe cap, idle timeout). */
static void test_info_defaults_and_options(void **state) {
  char uri[64], err[256];
  rgpu_listener *l = open_server(NULL, uri, sizeof uri);
  tu_echo_server s;
  tu_echo_start(&s, l, 3);
  rgpu_transport_opts co = {.ca_file = srv_cert};
  rgpu_conn *c;
  rgpu_quic_info qi;
  assert_int_equal(rgpu_conn_connect(uri, &co, &c, err, sizeof err), 0);
  assert_int_equal(rgpu_conn_quic_info(c, &qi, err, sizeof err), 0);
  assert_string_equal(qi.cc, "cubic"); /* the peer is loopback */
  assert_int_equal(qi.max_pto_ms, 1000);
  /* No client certificate asked for: connect returned with our Finished,
   * not a round trip later with the server's HANDSHAKE_DONE. */
  assert_int_equal(qi.connect_waited_confirm, 0);
  /* The announced ACK delay (Q_MAX_ACK_DELAY_MS) reaches the peer. */
  assert_int_equal(qi.peer_max_ack_delay_ms, 5);
  assert_int_equal(qi.idle_timeout_ms, 30000);
  assert_true(qi.cwnd_bytes > 0);
  assert_int_equal(tu_echo_check(c, 1 << 20, 4096, 5), 0);
  /* PMTUD had the buffer room to probe: packets grew past the 1200-byte
   * minimum on loopback. */
  assert_int_equal(rgpu_conn_quic_info(c, &qi, err, sizeof err), 0);
  assert_true(qi.max_udp_payload > 1200);
  rgpu_conn_close(c);

  rgpu_transport_opts cubic = {.ca_file = srv_cert, .cc_algo = "cubic", .quic_max_pto_ms = -1,
                               .idle_timeout_ms = 5000};
  assert_int_equal(rgpu_conn_connect(uri, &cubic, &c, err, sizeof err), 0);
  assert_int_equal(rgpu_conn_quic_info(c, &qi, err, sizeof err), 0);
  assert_string_equal(qi.cc, "cubic");
  assert_int_equal(qi.max_pto_ms, 0);
  assert_int_equal(qi.idle_timeout_ms, 5000);
  rgpu_conn_close(c);

  rgpu_transport_opts cap = {.ca_file = srv_cert, .cc_algo = "reno", .quic_max_pto_ms = 250};
  assert_int_equal(rgpu_conn_connect(uri, &cap, &c, err, sizeof err), 0);
  assert_int_equal(rgpu_conn_quic_info(c, &qi, err, sizeof err), 0);
  assert_string_equal(qi.cc, "reno");
  assert_int_equal(qi.max_pto_ms, 250);
  rgpu_conn_close(c);
  tu_echo_join(&s);
  rgpu_listener_close(l);

  /* Not a QUIC client conn: refused with a reason, nothing filled in. */
  assert_int_equal(rgpu_conn_quic_info(NULL, &qi, err, sizeof err), RGPU_T_ENOTSUP);
  assert_non_null(strstr(err, "quic://"));
}

/* Issue 21: the default congestion controller per peer address. */
static void test_default_cc_by_peer(void **state) {
  struct sockaddr_in v4 = {.sin_family = AF_INET};
  struct sockaddr_in6 v6 = {.sin6_family = AF_INET6};
  inet_pton(AF_INET, "127.0.0.1", &v4.sin_addr);
  assert_string_equal(rgpu_quic_default_cc_name((struct sockaddr *)&v4), "cubic");
  inet_pton(AF_INET, "127.3.2.1", &v4.sin_addr);
  assert_string_equal(rgpu_quic_default_cc_name((struct sockaddr *)&v4), "cubic");
  inet_pton(AF_INET, "10.77.0.2", &v4.sin_addr);
  assert_string_equal(rgpu_quic_default_cc_name((struct sockaddr *)&v4), "bbr");
  inet_pton(AF_INET, "192.168.1.20", &v4.sin_addr);
  assert_string_equal(rgpu_quic_default_cc_name((struct sockaddr *)&v4), "bbr");
  inet_pton(AF_INET6, "::1", &v6.sin6_addr);
  assert_string_equal(rgpu_quic_default_cc_name((struct sockaddr *)&v6), "cubic");
  inet_pton(AF_INET6, "::ffff:127.0.0.1", &v6.sin6_addr);
  assert_string_equal(rgpu_quic_default_cc_name((struct sockaddr *)&v6), "cubic");
  inet_pton(AF_INET6, "2001:db8::1", &v6.sin6_addr);
  assert_string_equal(rgpu_quic_default_cc_name((struct sockaddr *)&v6), "bbr");
}

/* Server side of test_outage_probe_after_silence: reads `n` bytes, checks
 * them, answers one byte (1 = all correct). */
typedef struct {
  rgpu_listener *l;
  size_t n;
  pthread_t th;
} sink_server;

static void *sink_main(void *arg) {
  sink_server *k = arg;
  rgpu_conn *c;
  char err[256];
  if (rgpu_listener_accept(k->l, &c, err, sizeof err)) return NULL;
  unsigned char *buf = malloc(k->n);
  unsigned char ok = buf && rgpu_conn_read_exact(c, buf, k->n) == 0;
  for (size_t i = 0; ok && i < k->n; i++) ok = buf[i] == (unsigned char)(i * 7 + 3);
  struct iovec v = {&ok, 1};
  rgpu_conn_writev_all(c, &v, 1);
  unsigned char b;
  rgpu_conn_read_some(c, &b, 1); /* until the client closes */
  free(buf);
  rgpu_conn_close(c);
  return NULL;
}

/* Issue 21: an upload survives an outage longer than the probe cap.  The
 * client uploads 4 MiB through a proxy that drops everything for 3.5 s:
 * with BBRv2 the client is window-limited and backs off; the server, which
 * only receives, sends a keep-alive PING at least once a second, and the
 * first that crosses after the outage may fire the client's probe at once
 * (rule 2 in rgpu_quic.c).  Every byte must arrive. */
static void test_outage_probe_after_silence(void **state) {
  char uri[64], err[256];
  rgpu_transport_opts so = {.cert_file = srv_cert, .key_file = srv_key, .cc_algo = "bbr2"};
  rgpu_listener *l;
  assert_int_equal(rgpu_listener_open("quic://127.0.0.1:0", &so, &l, err, sizeof err), 0);
  lossy_proxy px;
  uint16_t pport = lossy_start(&px, rgpu_listener_port(l), 0);
  snprintf(uri, sizeof uri, "quic://127.0.0.1:%u", pport);
  size_t n = 4u << 20;
  sink_server k = {.l = l, .n = n};
  pthread_create(&k.th, NULL, sink_main, &k);
  rgpu_transport_opts co = {.ca_file = srv_cert, .cc_algo = "bbr2"};
  rgpu_conn *c;
  assert_int_equal(rgpu_conn_connect(uri, &co, &c, err, sizeof err), 0);
  unsigned char *out = malloc(n);
  for (size_t i = 0; i < n; i++) out[i] = (unsigned char)(i * 7 + 3);
  /* The first 64 KiB cross, so that both ends have an RTT and the server
   * knows the stream; then the link goes down under the rest. */
  struct iovec v = {out, 65536};
  assert_int_equal(rgpu_conn_writev_all(c, &v, 1), 0);
  usleep(100 * 1000);
  px.blackhole = 1;
  v = (struct iovec){out + 65536, n - 65536};
  assert_int_equal(rgpu_conn_writev_all(c, &v, 1), 0);
  usleep(3500 * 1000);
  px.blackhole = 0;
  unsigned char ok = 0;
  assert_int_equal(rgpu_conn_read_exact(c, &ok, 1), 0);
  assert_int_equal(ok, 1);
  /* Whether the cap fired (capped_probes) depends on which packet crosses
   * first after the outage, a matter of timing: bench/quic_vs_tcp.py
   * --outage measures and reports it; here the connection must only
   * survive with every byte intact. */
  rgpu_quic_info qi;
  assert_int_equal(rgpu_conn_quic_info(c, &qi, err, sizeof err), 0);
  assert_int_equal(qi.max_pto_ms, 1000);
  free(out);
  rgpu_conn_close(c);
  pthread_join(k.th, NULL);
  lossy_stop(&px);
  rgpu_listener_close(l);
}

/* Issue 21, rule 3 in rgpu_quic.c: a client waiting on a request lost in
 * an outage PINGs once a plain PTO (about 25 ms on loopback) until the link
 * returns, not once a cap (1 s), so the first packet through leaves soon
 * after the link does.  Counted at the proxy: a 2 s outage saw 14 client
 * datagrams before (doubling probes, cap PINGs), 77-78 now.  The answer
 * must then arrive intact. */
static void test_outage_pings_each_pto(void **state) {
  rgpu_transport_opts so = {.cert_file = srv_cert, .key_file = srv_key};
  rgpu_transport_opts co = {.ca_file = srv_cert};
  proxied_echo e;
  proxied_echo_open(&e, &so, 0, &co);
  rgpu_conn *c = e.c;
  char m[64];
  for (int i = 0; i < 20; i++) { /* an RTT sample, and a busy connection */
    memset(m, i, sizeof m);
    struct iovec v = {m, sizeof m};
    assert_int_equal(rgpu_conn_writev_all(c, &v, 1), 0);
    assert_int_equal(rgpu_conn_read_exact(c, m, sizeof m), 0);
  }
  e.px.blackhole = 1;
  unsigned long before = e.px.dropped_up;
  memset(m, 0x5a, sizeof m);
  struct iovec v = {m, sizeof m};
  assert_int_equal(rgpu_conn_writev_all(c, &v, 1), 0);
  usleep(2000 * 1000);
  unsigned long sent_in_outage = e.px.dropped_up - before;
  e.px.blackhole = 0;
  memset(m, 0, sizeof m);
  assert_int_equal(rgpu_conn_read_exact(c, m, sizeof m), 0);
  for (size_t i = 0; i < sizeof m; i++) assert_int_equal((unsigned char)m[i], 0x5a);
  if (sent_in_outage < 30) fail_msg("only %lu client datagrams in a 2 s outage", sent_in_outage);
  proxied_echo_close(&e);
}

/* The listener's side of multi-stream sessions: accept the extra stream and
 * pass it to the worker process that owns the session. */
static void test_stream_routed_to_worker(void **state) {
  char uri[64], err[256];
  rgpu_listener *l = open_multi(uri, sizeof uri);
  rgpu_transport_opts co = {.ca_file = srv_cert};
  rgpu_conn *c, *s1, *w0, *w1;
  assert_int_equal(rgpu_conn_connect(uri, &co, &c, err, sizeof err), 0);
  assert_int_equal(rgpu_listener_accept(l, &w0, err, sizeof err), 0); /* the session */
  int chan[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, chan), 0);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(20);
    close(rgpu_conn_poll_fd(c));
    rgpu_listener_close(l);
    close(chan[0]);
    /* Worker: serves its session conn and every stream routed to it. */
    pthread_t th[4];
    int n = 0;
    pthread_create(&th[n++], NULL, tu_echo_conn, w0);
    rgpu_conn *x;
    while (n < 4 && rgpu_conn_recv(chan[1], &x, err, sizeof err) == 0) {
      if (rgpu_conn_stream_index(x) != 1 || strcmp(rgpu_conn_transport_name(x), "quic")) _exit(3);
      pthread_create(&th[n++], NULL, tu_echo_conn, x);
    }
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    _exit(n == 2 ? 0 : 4);
  }
  close(chan[1]);
  uint64_t key = rgpu_conn_session_key(w0);
  rgpu_conn_close(w0);
  assert_int_equal(rgpu_conn_open_stream(c, &s1, err, sizeof err), 0);
  struct iovec v = {"x", 1};
  assert_int_equal(rgpu_conn_writev_all(s1, &v, 1), 0);
  assert_int_equal(rgpu_listener_accept(l, &w1, err, sizeof err), 0);
  assert_true(rgpu_conn_session_key(w1) == key);
  assert_int_equal(rgpu_conn_send(chan[0], w1, err, sizeof err), 0);
  rgpu_conn_close(w1);
  close(chan[0]);
  char b;
  assert_int_equal(rgpu_conn_read_exact(s1, &b, 1), 0);
  assert_int_equal(tu_echo_check(s1, 2u << 20, 3000, 5), 0);
  assert_int_equal(tu_echo_check(c, 1u << 20, 3000, 6), 0);
  rgpu_conn_close(s1);
  rgpu_conn_close(c);
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  /* A conn without a raw fd cannot be passed. */
  assert_int_equal(rgpu_conn_send(-1, NULL, err, sizeof err), RGPU_T_EINVAL);
  rgpu_listener_close(l);
}

/* Issue 21: toward a loopback peer packets are 64 KiB datagrams (one per
 * send, no pacing); RGPU_QUIC_NO_LOOPBACK_TUNING=1 keeps Ethernet-sized
 * ones; and a "loopback" path that cannot carry them (a NAT rule sending
 * 127.0.0.1 over a 1500-byte link, played here by a proxy that drops
 * longer datagrams) falls back to 1452-byte packets and loses no byte. */
static void test_loopback_datagrams(void **state) {
  char uri[64], err[256];
  rgpu_listener *l = open_server(NULL, uri, sizeof uri);
  tu_echo_server s;
  tu_echo_start(&s, l, 3);
  rgpu_transport_opts co = {.ca_file = srv_cert};
  rgpu_conn *c;
  rgpu_quic_info qi;
  assert_int_equal(rgpu_conn_connect(uri, &co, &c, err, sizeof err), 0);
  assert_int_equal(tu_echo_check(c, 16u << 20, 100000, 21), 0);
  assert_int_equal(rgpu_conn_quic_info(c, &qi, err, sizeof err), 0);
  assert_int_equal(qi.max_udp_payload, 65000);
  rgpu_conn_close(c);

  setenv("RGPU_QUIC_NO_LOOPBACK_TUNING", "1", 1);
  assert_int_equal(rgpu_conn_connect(uri, &co, &c, err, sizeof err), 0);
  assert_int_equal(tu_echo_check(c, 4u << 20, 100000, 22), 0);
  assert_int_equal(rgpu_conn_quic_info(c, &qi, err, sizeof err), 0);
  assert_true(qi.max_udp_payload >= 1200 && qi.max_udp_payload <= 1452);
  rgpu_conn_close(c);
  unsetenv("RGPU_QUIC_NO_LOOPBACK_TUNING");

  /* Static: a failed assertion leaves the test by longjmp, and the
   * proxy's thread must not then read a dead stack frame (an ASan CI run
   * turned one slow run of this test into a crash of the next). */
  static lossy_proxy px;
  uint16_t pport = lossy_start(&px, rgpu_listener_port(l), 0);
  px.max_datagram = 1500;
  char puri[64];
  snprintf(puri, sizeof puri, "quic://127.0.0.1:%u", pport);
  assert_int_equal(rgpu_conn_connect(puri, &co, &c, err, sizeof err), 0);
  uint64_t t0 = rgpu_clock_ns();
  assert_int_equal(tu_echo_check(c, 8u << 20, 100000, 23), 0);
  /* One fallback each way (about 200 ms), not a stall until the 30 s idle
   * timeout.  The bound leaves room for a slow machine: 8 MiB in 1452-byte
   * packets through the proxy thread took over 10 s once in an ASan CI
   * run on two loaded CPUs (2-3 s otherwise). */
  assert_true(rgpu_clock_ns() - t0 < 25000000000ull);
  assert_int_equal(rgpu_conn_quic_info(c, &qi, err, sizeof err), 0);
  assert_int_equal(qi.max_udp_payload, 1452);
  assert_true(px.dropped > 0);
  rgpu_conn_close(c);
  tu_echo_join(&s);
  lossy_stop(&px);
  rgpu_listener_close(l);
}

/* Defaults keep an idle session alive past the idle timeout. */
static void test_default_keepalive(void **state) {
  rgpu_transport_opts so = {.cert_file = srv_cert, .key_file = srv_key, .idle_timeout_ms = 300};
  rgpu_listener *l;
  char err[256], uri[64];
  assert_int_equal(rgpu_listener_open("quic://127.0.0.1:0", &so, &l, err, sizeof err), 0);
  snprintf(uri, sizeof uri, "quic://127.0.0.1:%u", rgpu_listener_port(l));
  tu_echo_server s;
  tu_echo_start(&s, l, 1);
  rgpu_transport_opts co = {.ca_file = srv_cert, .idle_timeout_ms = 300};
  rgpu_conn *c;
  assert_int_equal(rgpu_conn_connect(uri, &co, &c, err, sizeof err), 0);
  usleep(900 * 1000);
  assert_int_equal(tu_echo_check(c, 1 << 16, 512, 8), 0);
  rgpu_conn_close(c);
  tu_echo_join(&s);
  rgpu_listener_close(l);
}

#ifndef __SANITIZE_ADDRESS__
static void *blocked_reader_main(void *arg) {
  char b;
  rgpu_conn_read_some(arg, &b, 1); /* cancelled while it waits */
  return NULL;
}
#endif

/* The client is driven by the threads that read and write (issue 21): its
 * poll fd still says when bytes wait (the I/O thread brings them when no
 * thread reads), and a reading thread cancelled while it polls the socket
 * does not leave the other streams without a poller. */
static void test_client_poll_fd_and_cancel(void **state) {
  char uri[64], err[256];
  rgpu_listener *l = open_multi(uri, sizeof uri);
  tu_echo_server srv;
  tu_echo_start(&srv, l, 2);
  rgpu_transport_opts co = {.ca_file = srv_cert};
  rgpu_conn *c, *s1;
  assert_int_equal(rgpu_conn_connect(uri, &co, &c, err, sizeof err), 0);
  assert_int_equal(rgpu_conn_open_stream(c, &s1, err, sizeof err), 0);
  struct iovec v = {"ping", 4};
  assert_int_equal(rgpu_conn_writev_all(c, &v, 1), 0);
  struct pollfd p = {.fd = rgpu_conn_poll_fd(c), .events = POLLIN};
  assert_int_equal(poll(&p, 1, 5000), 1);
  assert_int_equal(rgpu_conn_pending(c), 4);
  char got[4];
  assert_int_equal(rgpu_conn_read_exact(c, got, 4), 0);
  assert_memory_equal(got, "ping", 4);
  assert_int_equal(poll(&p, 1, 0), 0); /* nothing left: not readable */
  assert_int_equal(rgpu_conn_pending(c), 0);

#ifndef __SANITIZE_ADDRESS__ /* ASan's runtime aborts when a cancellation unwinds
                                (asan_thread.cpp CHECK in __asan_handle_no_return) */
  pthread_t th;
  pthread_create(&th, NULL, blocked_reader_main, s1);
  usleep(50 * 1000);
  pthread_cancel(th);
  pthread_join(th, NULL);
#endif
  assert_int_equal(tu_echo_check(c, 1u << 20, 4096, 31), 0);
  assert_int_equal(tu_echo_check(s1, 1u << 20, 999, 32), 0);
  rgpu_conn_close(s1);
  rgpu_conn_close(c);
  tu_echo_join(&srv);
  rgpu_listener_close(l);
}

/* Issue 21, direct sessions: a QUIC connection terminated by the process
 * that accepts it on a socket of its own (a worker's port), with its later
 * streams handed to a handler, waits that watch another descriptor, an
 * abort that ends a stream's threads, and a socket that takes nobody after
 * its one connection. */
typedef struct {
  int fd, stop;
  rgpu_conn *conn;
  int rc;
  pthread_mutex_t mu;
  rgpu_conn *lane;
} direct_srv;

static void *direct_accept_main(void *arg) {
  direct_srv *d = arg;
  rgpu_transport_opts so = {.cert_file = srv_cert, .key_file = srv_key, .quic_max_streams = 4};
  char err[256];
  d->rc = rgpu_quic_direct_accept(d->fd, &so, d->stop, 5000, &d->conn, err, sizeof err);
  if (d->rc) fprintf(stderr, "direct accept: %s\n", err);
  return NULL;
}

static void direct_lane(void *ctx, rgpu_conn *stream) {
  direct_srv *d = ctx;
  pthread_mutex_lock(&d->mu);
  d->lane = stream;
  pthread_mutex_unlock(&d->mu);
}

static void test_direct_session(void **state) {
  char uri[64], err[256];
  direct_srv d = {.stop = -1};
  pthread_mutex_init(&d.mu, NULL);
  uint16_t port = 0;
  assert_int_equal(rgpu_quic_direct_socket("127.0.0.1", 0, 0, &d.fd, &port, err, sizeof err), 0);
  assert_int_not_equal(port, 0);
  /* A range: a port of it that is taken is skipped. */
  int fd2;
  uint16_t port2;
  assert_int_equal(rgpu_quic_direct_socket("127.0.0.1", port, port, &fd2, &port2, err, sizeof err),
                   RGPU_T_EIO); /* the range's only port is taken */
  if (port < 65535 && rgpu_quic_direct_socket("127.0.0.1", port, (uint16_t)(port + 1), &fd2,
                                              &port2, err, sizeof err) == 0) {
    assert_int_equal(port2, port + 1);
    close(fd2);
  }
  pthread_t th;
  pthread_create(&th, NULL, direct_accept_main, &d);
  snprintf(uri, sizeof uri, "quic://127.0.0.1:%u", port);
  rgpu_transport_opts co = {.ca_file = srv_cert};
  rgpu_conn *c;
  assert_int_equal(rgpu_conn_connect(uri, &co, &c, err, sizeof err), 0);
  struct iovec v = {"hello", 5};
  assert_int_equal(rgpu_conn_writev_all(c, &v, 1), 0); /* the first stream's first bytes */
  pthread_join(th, NULL);
  assert_int_equal(d.rc, 0);
  rgpu_conn *w = d.conn;
  assert_string_equal(rgpu_conn_transport_name(w), "quic");
  char b[8] = {0};
  assert_int_equal(rgpu_conn_read_exact(w, b, 5), 0);
  assert_memory_equal(b, "hello", 5);
  /* Waits: the extra descriptor, then a timeout, then the conn's bytes. */
  int ev = eventfd(1, EFD_CLOEXEC);
  assert_int_equal(rgpu_conn_wait_input(w, ev, 1000), 2);
  close(ev);
  uint64_t t0 = rgpu_clock_ns();
  assert_int_equal(rgpu_conn_wait_input(w, -1, 50), 0);
  assert_true(rgpu_clock_ns() - t0 >= 40000000ull);
  pthread_t echo;
  pthread_create(&echo, NULL, tu_echo_conn, w);
  assert_int_equal(tu_echo_check(c, 4u << 20, 7000, 11), 0);
  /* A stream the client opens goes to the handler, also one that came
   * before it was set. */
  rgpu_conn *s1;
  assert_int_equal(rgpu_conn_open_stream(c, &s1, err, sizeof err), 0);
  struct iovec lv = {"lane", 4};
  assert_int_equal(rgpu_conn_writev_all(s1, &lv, 1), 0);
  usleep(100000);
  rgpu_conn_set_stream_handler(w, direct_lane, &d);
  rgpu_conn *lane = NULL;
  for (int i = 0; i < 500 && !lane; i++) {
    pthread_mutex_lock(&d.mu);
    lane = d.lane;
    pthread_mutex_unlock(&d.mu);
    if (!lane) usleep(10000);
  }
  assert_non_null(lane);
  assert_int_equal(rgpu_conn_stream_index(lane), 1);
  assert_int_equal(rgpu_conn_read_exact(lane, b, 4), 0);
  assert_memory_equal(b, "lane", 4);
  /* The server's side does not open streams or migrate. */
  rgpu_conn *bad;
  assert_int_equal(rgpu_conn_open_stream(w, &bad, err, sizeof err), RGPU_T_ENOTSUP);
  assert_int_equal(rgpu_conn_migrate(w, err, sizeof err), RGPU_T_ENOTSUP);
  /* Abort: the client's reader of that stream sees it end. */
  rgpu_conn_abort(lane);
  assert_true(rgpu_conn_read_exact(s1, b, 1) != 0);
  rgpu_conn_close(lane);
  rgpu_conn_close(s1);
  /* The socket belongs to its one connection: nobody else gets in. */
  rgpu_transport_opts co2 = {.ca_file = srv_cert, .connect_timeout_ms = 300};
  rgpu_conn *c2 = NULL;
  assert_int_equal(rgpu_conn_connect(uri, &co2, &c2, err, sizeof err), RGPU_T_ETIMEDOUT);
  assert_int_equal(tu_echo_check(c, 1u << 20, 3000, 12), 0);
  rgpu_conn_shutdown(c);
  pthread_join(echo, NULL); /* the echo ends at the client's FIN and closes w */
  rgpu_conn_close(c);
  /* Nobody comes: the accept times out; a stop ends it at once. */
  assert_int_equal(rgpu_quic_direct_socket("127.0.0.1", 0, 0, &d.fd, &port, err, sizeof err), 0);
  rgpu_transport_opts so = {.cert_file = srv_cert, .key_file = srv_key};
  t0 = rgpu_clock_ns();
  assert_int_equal(rgpu_quic_direct_accept(d.fd, &so, -1, 200, &w, err, sizeof err),
                   RGPU_T_ETIMEDOUT);
  assert_true(rgpu_clock_ns() - t0 >= 150000000ull);
  assert_int_equal(rgpu_quic_direct_socket("127.0.0.1", 0, 0, &d.fd, &port, err, sizeof err), 0);
  int stop = eventfd(1, EFD_CLOEXEC);
  assert_int_equal(rgpu_quic_direct_accept(d.fd, &so, stop, 5000, &w, err, sizeof err),
                   RGPU_T_ECLOSED);
  close(stop);
  pthread_mutex_destroy(&d.mu);
}

int main(void) {
  signal(SIGPIPE, SIG_DFL);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parallel_clients), cmocka_unit_test(test_half_close),
      cmocka_unit_test(test_echo_large_and_concurrent), cmocka_unit_test(test_eof_both_ways),
      cmocka_unit_test(test_wrong_ca), cmocka_unit_test(test_mtls),
      cmocka_unit_test(test_no_server), cmocka_unit_test(test_fork_worker),
      cmocka_unit_test(test_migration), cmocka_unit_test(test_idle_and_keepalive),
      cmocka_unit_test(test_streams), cmocka_unit_test(test_streams_no_head_of_line),
      cmocka_unit_test(test_default_keepalive), cmocka_unit_test(test_loss_recovery), cmocka_unit_test(test_stream_routed_to_worker), cmocka_unit_test(test_streams_refused), cmocka_unit_test(test_wildcard_and_v6),
      cmocka_unit_test(test_silent_handshakes_bounded),
      cmocka_unit_test(test_info_defaults_and_options),
      cmocka_unit_test(test_connection_id_lengths),
      cmocka_unit_test(test_default_cc_by_peer),
      cmocka_unit_test(test_outage_probe_after_silence),
      cmocka_unit_test(test_outage_pings_each_pto),
      cmocka_unit_test(test_loopback_datagrams),
      cmocka_unit_test(test_client_poll_fd_and_cancel),
      cmocka_unit_test(test_direct_session),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
