#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "rgpu_clock.h"
#include "rgpu_transport_testutil.h"

static void echo_roundtrip(const char *uri, size_t total, size_t piece, int nclients) {
  rgpu_listener *l;
  char err[256];
  assert_int_equal(rgpu_listener_open(uri, NULL, &l, err, sizeof err), 0);
  char curi[256];
  if (!strncmp(uri, "unix://", 7))
    snprintf(curi, sizeof curi, "%s", uri);
  else
    snprintf(curi, sizeof curi, "tcp://127.0.0.1:%u", rgpu_listener_port(l));
  tu_echo_server s;
  tu_echo_start(&s, l, nclients);
  for (int i = 0; i < nclients; i++) {
    rgpu_conn *c;
    int rc = rgpu_conn_connect(curi, NULL, &c, err, sizeof err);
    if (rc) fail_msg("connect %s: %s", curi, err);
    assert_int_equal(tu_echo_check(c, total, piece, (unsigned)i), 0);
    rgpu_conn_close(c);
  }
  tu_echo_join(&s);
  rgpu_listener_close(l);
}

static void test_tcp_echo_64m(void **state) {
  echo_roundtrip("tcp://127.0.0.1:0", 64u << 20, 16384 + 13, 1);
}

static void test_tcp_small_pieces(void **state) {
  /* Many more pieces than IOV_MAX in one call. */
  echo_roundtrip("tcp://127.0.0.1:0", 3u << 20, 7, 2);
}

static void test_tcp_v6(void **state) {
  rgpu_listener *l;
  char err[256], uri[64];
  if (rgpu_listener_open("tcp://[::1]:0", NULL, &l, err, sizeof err)) skip(); /* no IPv6 here */
  snprintf(uri, sizeof uri, "tcp://[::1]:%u", rgpu_listener_port(l));
  assert_non_null(strstr(rgpu_listener_address(l), "[::1]:"));
  tu_echo_server s;
  tu_echo_start(&s, l, 1);
  rgpu_conn *c;
  assert_int_equal(rgpu_conn_connect(uri, NULL, &c, err, sizeof err), 0);
  assert_non_null(strstr(rgpu_conn_peer(c), "[::1]:"));
  assert_int_equal(tu_echo_check(c, 1 << 20, 999, 4), 0);
  rgpu_conn_close(c);
  tu_echo_join(&s);
  rgpu_listener_close(l);
}

static void test_unix_echo(void **state) {
  char path[108];
  snprintf(path, sizeof path, "unix:///tmp/rgpu_tcp_test_%d.sock", (int)getpid());
  echo_roundtrip(path, 64u << 20, 65536 + 1, 1);
  assert_int_not_equal(access(path + 7, F_OK), 0); /* removed on close */
}

static void test_listener_port_and_names(void **state) {
  rgpu_listener *l;
  char err[256];
  assert_int_equal(rgpu_listener_open("tcp://127.0.0.1:0", NULL, &l, err, sizeof err), 0);
  assert_int_not_equal(rgpu_listener_port(l), 0);
  assert_non_null(strstr(rgpu_listener_address(l), "127.0.0.1:"));
  assert_true(rgpu_listener_poll_fd(l) >= 0);
  char uri[64];
  snprintf(uri, sizeof uri, "tcp://localhost:%u", rgpu_listener_port(l));
  rgpu_conn *c, *s;
  assert_int_equal(rgpu_conn_connect(uri, NULL, &c, err, sizeof err), 0);
  assert_int_equal(rgpu_listener_accept(l, &s, err, sizeof err), 0);
  assert_string_equal(rgpu_conn_transport_name(c), "tcp");
  assert_string_equal(rgpu_conn_transport_name(s), "tcp");
  assert_non_null(strstr(rgpu_conn_peer(s), "127.0.0.1:"));
  assert_true(rgpu_conn_raw_fd(s) >= 0);
  assert_int_equal(rgpu_conn_pending(c), 0);
  rgpu_conn_close(c);
  rgpu_conn_close(s);
  rgpu_listener_close(l);
}

/* Two connected conns over a socketpair. */
static void conn_pair(rgpu_conn **a, rgpu_conn **b) {
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  assert_int_equal(rgpu_conn_from_fd(sv[0], "unix", a), 0);
  assert_int_equal(rgpu_conn_from_fd(sv[1], "unix", b), 0);
}

static void test_eof(void **state) {
  rgpu_conn *a, *b;
  conn_pair(&a, &b);
  struct iovec v = {"hello", 5};
  assert_int_equal(rgpu_conn_writev_all(a, &v, 1), 0);
  rgpu_conn_shutdown(a);
  char buf[16];
  /* Partial data then EOF: read_exact reports the truncation. */
  assert_int_equal(rgpu_conn_read_exact(b, buf, 8), RGPU_T_ECLOSED);
  assert_int_equal(rgpu_conn_read_some(b, buf, sizeof buf), 0);
  rgpu_conn_close(a);
  /* Writing to a closed peer is an error, not SIGPIPE. */
  int rc = 0;
  char big[65536] = {0};
  struct iovec bv = {big, sizeof big};
  for (int i = 0; i < 64 && rc == 0; i++) rc = rgpu_conn_writev_all(b, &bv, 1);
  assert_int_equal(rc, RGPU_T_ECLOSED);
  rgpu_conn_close(b);
}

/* The reading writer (rgpu_conn_writev_all_reading): both ends write
 * 8 MiB before either reads, which blocks for ever with plain writes once
 * the socket buffers are full.  The peer thread writes blocking, then
 * reads; our write takes its bytes in through on_readable meanwhile. */
enum { CROSS_BYTES = 8u << 20 };
typedef struct {
  rgpu_conn *conn;
  uint8_t *got;
  size_t have;
} cross_sink;

static int cross_take(void *ctx) {
  cross_sink *k = ctx;
  ssize_t r = rgpu_conn_read_some(k->conn, k->got + k->have, CROSS_BYTES - k->have);
  if (r <= 0) return r == 0 ? RGPU_T_ECLOSED : (int)r;
  k->have += (size_t)r;
  return 0;
}

static void *cross_peer(void *arg) {
  rgpu_conn *b = arg;
  uint8_t *buf = malloc(CROSS_BYTES);
  for (size_t i = 0; i < CROSS_BYTES; i++) buf[i] = (uint8_t)(i * 7 + 1);
  struct iovec v = {buf, CROSS_BYTES};
  intptr_t ok = rgpu_conn_writev_all(b, &v, 1) == 0 &&
                rgpu_conn_read_exact(b, buf, CROSS_BYTES) == 0;
  for (size_t i = 0; ok && i < CROSS_BYTES; i++) ok = buf[i] == (uint8_t)(i * 3);
  free(buf);
  return (void *)ok;
}

static void test_writer_reads_meanwhile(void **state) {
  rgpu_conn *a, *b;
  conn_pair(&a, &b);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, cross_peer, b), 0);
  uint8_t *mine = malloc(CROSS_BYTES);
  cross_sink k = {a, malloc(CROSS_BYTES), 0};
  assert_non_null(mine);
  assert_non_null(k.got);
  for (size_t i = 0; i < CROSS_BYTES; i++) mine[i] = (uint8_t)(i * 3);
  struct iovec v = {mine, CROSS_BYTES};
  assert_int_equal(rgpu_conn_writev_all_reading(a, &v, 1, cross_take, &k), 0);
  /* What the write did not take in is still to come, in order. */
  assert_int_equal(rgpu_conn_read_exact(a, k.got + k.have, CROSS_BYTES - k.have), 0);
  assert_true(k.have > 0); /* it did read meanwhile */
  for (size_t i = 0; i < CROSS_BYTES; i++)
    if (k.got[i] != (uint8_t)(i * 7 + 1)) fail_msg("byte %zu differs", i);
  void *ok = NULL;
  pthread_join(t, &ok);
  assert_true(ok != NULL);
  free(mine);
  free(k.got);
  rgpu_conn_close(a);
  rgpu_conn_close(b);
}

static void test_connect_refused(void **state) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  socklen_t sl = sizeof sa;
  getsockname(fd, (struct sockaddr *)&sa, &sl);
  char uri[64];
  snprintf(uri, sizeof uri, "tcp://127.0.0.1:%u", ntohs(sa.sin_port));
  rgpu_conn *c;
  char err[256] = "";
  /* Bound but not listening: the kernel answers with RST. */
  assert_int_equal(rgpu_conn_connect(uri, NULL, &c, err, sizeof err), RGPU_T_ECONNREFUSED);
  assert_non_null(strstr(err, "connection refused"));
  assert_non_null(strstr(err, "127.0.0.1"));
  close(fd);
  assert_int_equal(rgpu_conn_connect("unix:///nonexistent/rgpu.sock", NULL, &c, err, sizeof err),
                   RGPU_T_ECONNREFUSED);
  assert_non_null(strstr(err, "/nonexistent/rgpu.sock"));
  assert_int_equal(rgpu_conn_connect("tcp://127.0.0.1", NULL, &c, err, sizeof err), RGPU_T_EINVAL);
  assert_int_equal(rgpu_conn_connect("tcp://no-such-host.invalid:7000", NULL, &c, err, sizeof err),
                   RGPU_T_EIO);
  assert_non_null(strstr(err, "no-such-host.invalid"));
}

static void test_connect_timeout(void **state) {
  /* A listener whose accept queue is full drops SYNs, so connect hangs. */
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  assert_int_equal(listen(fd, 0), 0);
  socklen_t sl = sizeof sa;
  getsockname(fd, (struct sockaddr *)&sa, &sl);
  char uri[64];
  snprintf(uri, sizeof uri, "tcp://127.0.0.1:%u", ntohs(sa.sin_port));
  rgpu_transport_opts o = {.connect_timeout_ms = 300};
  rgpu_conn *fill[4] = {0};
  char err[256] = "";
  int rc = 0, i;
  uint64_t t0 = 0, t1 = 0;
  for (i = 0; i < 4; i++) {
    t0 = rgpu_clock_ns();
    rc = rgpu_conn_connect(uri, &o, &fill[i], err, sizeof err);
    t1 = rgpu_clock_ns();
    if (rc) break;
  }
  assert_int_equal(rc, RGPU_T_ETIMEDOUT);
  assert_non_null(strstr(err, "timed out"));
  double ms = (double)(t1 - t0) / 1e6;
  assert_true(ms >= 250 && ms < 2000);
  for (int j = 0; j < i; j++) rgpu_conn_close(fill[j]);
  close(fd);
}

static void test_bad_cc(void **state) {
  rgpu_transport_opts o = {.cc_algo = "no-such-cc"};
  rgpu_listener *l;
  char err[512] = "";
  assert_int_equal(rgpu_listener_open("tcp://127.0.0.1:0", &o, &l, err, sizeof err), RGPU_T_EINVAL);
  assert_non_null(strstr(err, "no-such-cc"));
  assert_non_null(strstr(err, "available"));
  o.cc_algo = "cubic";
  o.keepalive_ms = 2000;
  o.sock_buf_bytes = 1 << 20;
  assert_int_equal(rgpu_listener_open("tcp://127.0.0.1:0", &o, &l, err, sizeof err), 0);
  rgpu_listener_close(l);
}

/* An idle timeout without a keep-alive interval turns keep-alive probes on
 * at a third of it (at least a second), with the user timeout the idle
 * timeout: a client whose path died while it waited for a reply (nothing
 * of its own unacknowledged) must find out, not block in read() forever
 * (reliability_migrate_netem's tcp run did, 1 run in 3-7).  keepalive_ms
 * < 0 keeps them off. */
static int sockopt_int(int fd, int level, int name) {
  int v = -1;
  socklen_t len = sizeof v;
  assert_int_equal(getsockopt(fd, level, name, &v, &len), 0);
  return v;
}

static void test_keepalive_from_idle_timeout(void **state) {
  (void)state;
  rgpu_listener *l;
  char err[256], uri[64];
  assert_int_equal(rgpu_listener_open("tcp://127.0.0.1:0", NULL, &l, err, sizeof err), 0);
  snprintf(uri, sizeof uri, "tcp://127.0.0.1:%u", rgpu_listener_port(l));
  rgpu_transport_opts o = {.idle_timeout_ms = 4000};
  rgpu_conn *c;
  assert_int_equal(rgpu_conn_connect(uri, &o, &c, err, sizeof err), 0);
  int fd = rgpu_conn_raw_fd(c);
  assert_true(fd >= 0);
  assert_int_equal(sockopt_int(fd, SOL_SOCKET, SO_KEEPALIVE), 1);
  assert_int_equal(sockopt_int(fd, IPPROTO_TCP, TCP_KEEPIDLE), 1); /* 4000 / 3 ms: 1 s */
  assert_int_equal(sockopt_int(fd, IPPROTO_TCP, TCP_USER_TIMEOUT), 4000);
  rgpu_conn_close(c);
  o.idle_timeout_ms = 30000;
  assert_int_equal(rgpu_conn_connect(uri, &o, &c, err, sizeof err), 0);
  assert_int_equal(sockopt_int(rgpu_conn_raw_fd(c), IPPROTO_TCP, TCP_KEEPIDLE), 10);
  rgpu_conn_close(c);
  o.keepalive_ms = -1;
  assert_int_equal(rgpu_conn_connect(uri, &o, &c, err, sizeof err), 0);
  assert_int_equal(sockopt_int(rgpu_conn_raw_fd(c), SOL_SOCKET, SO_KEEPALIVE), 0);
  rgpu_conn_close(c);
  rgpu_listener_close(l);
}

static void test_unix_stale(void **state) {
  char path[108], uri[120];
  snprintf(path, sizeof path, "/tmp/rgpu_tcp_test_stale_%d.sock", (int)getpid());
  snprintf(uri, sizeof uri, "unix://%s", path);
  unlink(path);
  /* A socket file nobody listens on (a crashed server) is replaced. */
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sun = {.sun_family = AF_UNIX};
  snprintf(sun.sun_path, sizeof sun.sun_path, "%s", path);
  assert_int_equal(bind(fd, (struct sockaddr *)&sun, sizeof sun), 0);
  close(fd);
  rgpu_listener *l, *l2;
  char err[256];
  assert_int_equal(rgpu_listener_open(uri, NULL, &l, err, sizeof err), 0);
  /* A live one is not. */
  assert_int_equal(rgpu_listener_open(uri, NULL, &l2, err, sizeof err), RGPU_T_EINVAL);
  assert_non_null(strstr(err, "already listening"));
  rgpu_listener_close(l);
  /* Nor is a regular file. */
  FILE *f = fopen(path, "w");
  fclose(f);
  assert_int_equal(rgpu_listener_open(uri, NULL, &l2, err, sizeof err), RGPU_T_EINVAL);
  assert_non_null(strstr(err, "not a socket"));
  unlink(path);
}

static void test_parallel_and_half_close(void **state) {
  rgpu_listener *l;
  char err[256], uri[64];
  assert_int_equal(rgpu_listener_open("tcp://127.0.0.1:0", NULL, &l, err, sizeof err), 0);
  snprintf(uri, sizeof uri, "tcp://127.0.0.1:%u", rgpu_listener_port(l));
  tu_echo_server s;
  tu_echo_start(&s, l, 8);
  assert_int_equal(tu_parallel_clients(uri, NULL, 8), 0);
  tu_echo_join(&s);
  assert_int_equal(tu_half_close(l, uri, NULL), 0);
  rgpu_listener_close(l);
}

int main(void) {
  signal(SIGPIPE, SIG_DFL); /* prove MSG_NOSIGNAL: a SIGPIPE would kill the test */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parallel_and_half_close),
      cmocka_unit_test(test_tcp_echo_64m),   cmocka_unit_test(test_tcp_small_pieces),
      cmocka_unit_test(test_unix_echo),      cmocka_unit_test(test_listener_port_and_names),
      cmocka_unit_test(test_tcp_v6),
      cmocka_unit_test(test_eof),            cmocka_unit_test(test_connect_refused),
      cmocka_unit_test(test_writer_reads_meanwhile),
      cmocka_unit_test(test_connect_timeout), cmocka_unit_test(test_bad_cc),
      cmocka_unit_test(test_unix_stale), cmocka_unit_test(test_keepalive_from_idle_timeout),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
