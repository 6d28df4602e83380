#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gnutls/gnutls.h>
#include <gnutls/x509.h>

#include "rgpu_clock.h"
#include "rgpu_transport_testutil.h"

static char srv_dir[64], other_dir[64], cli_dir[64];
static char srv_cert[128], srv_key[128], other_cert[128], cli_cert[128], cli_key[128];

static int setup(void **state) {
  char err[256];
  strcpy(srv_dir, "/tmp/rgpu_tls_test_XXXXXX");
  strcpy(other_dir, "/tmp/rgpu_tls_test_XXXXXX");
  strcpy(cli_dir, "/tmp/rgpu_tls_test_XXXXXX");
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
  int rc = rgpu_listener_open("tls://127.0.0.1:0", &o, &l, err, sizeof err);
  if (rc) fail_msg("listen: %s", err);
  snprintf(uri, urilen, "tls://127.0.0.1:%u", rgpu_listener_port(l));
  return l;
}

static void test_gen_cert(void **state) {
  struct stat st;
  assert_int_equal(stat(srv_key, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  char err[256];
  assert_int_equal(rgpu_tls_generate_self_signed("/nonexistent/dir", "localhost", err, sizeof err),
                   RGPU_T_EINVAL);
  assert_non_null(strstr(err, "/nonexistent/dir"));
  assert_int_equal(rgpu_tls_generate_self_signed(srv_dir, ",,", err, sizeof err), RGPU_T_EINVAL);
}

static void test_echo_large_and_concurrent(void **state) {
  char uri[64], err[256];
  rgpu_listener *l = open_server(NULL, uri, sizeof uri);
  tu_echo_server s;
  tu_echo_start(&s, l, 4);
  rgpu_transport_opts co = {.ca_file = srv_cert};
  rgpu_conn *c;
  int rc = rgpu_conn_connect(uri, &co, &c, err, sizeof err);
  if (rc) fail_msg("connect: %s", err);
  assert_string_equal(rgpu_conn_transport_name(c), "tls");
  assert_int_equal(rgpu_conn_raw_fd(c), -1);
  assert_int_equal(tu_echo_check(c, 64u << 20, 100000 + 3, 1), 0);
  rgpu_conn_close(c);
  /* Three at once, small gathered pieces (record packing path). */
  rgpu_conn *cs[3];
  co.server_name = "localhost";
  for (int i = 0; i < 3; i++) assert_int_equal(rgpu_conn_connect(uri, &co, &cs[i], err, sizeof err), 0);
  for (int i = 0; i < 3; i++) assert_int_equal(tu_echo_check(cs[i], 2u << 20, 61, (unsigned)i), 0);
  for (int i = 0; i < 3; i++) rgpu_conn_close(cs[i]);
  tu_echo_join(&s);
  rgpu_listener_close(l);
}

static void test_wrong_ca(void **state) {
  char uri[64], err[512] = "";
  rgpu_listener *l = open_server(NULL, uri, sizeof uri);
  rgpu_transport_opts co = {.ca_file = other_cert};
  rgpu_conn *c;
  assert_int_equal(rgpu_conn_connect(uri, &co, &c, err, sizeof err), RGPU_T_EAUTH);
  assert_non_null(strstr(err, "verification failed"));
  /* Right CA, wrong name. */
  co.ca_file = srv_cert;
  co.server_name = "gpu.example.org";
  assert_int_equal(rgpu_conn_connect(uri, &co, &c, err, sizeof err), RGPU_T_EAUTH);
  assert_non_null(strstr(err, "verification failed"));
  /* No CA at all: the system store does not know our self-signed cert. */
  rgpu_transport_opts none = {0};
  int rc = rgpu_conn_connect(uri, &none, &c, err, sizeof err);
  assert_true(rc == RGPU_T_EAUTH || rc == RGPU_T_EINVAL);
  /* Missing CA file: clear error before any connect. */
  co.ca_file = "/nonexistent/ca.pem";
  co.server_name = NULL;
  assert_int_equal(rgpu_conn_connect(uri, &co, &c, err, sizeof err), RGPU_T_EINVAL);
  assert_non_null(strstr(err, "/nonexistent/ca.pem"));
  /* The listener still serves a good client afterwards. */
  tu_echo_server s;
  tu_echo_start(&s, l, 1);
  co.ca_file = srv_cert;
  assert_int_equal(rgpu_conn_connect(uri, &co, &c, err, sizeof err), 0);
  assert_int_equal(tu_echo_check(c, 1 << 16, 1000, 9), 0);
  rgpu_conn_close(c);
  tu_echo_join(&s);
  rgpu_listener_close(l);
}

/* Connects over plain TCP to the TLS listener l and sends 64 bytes that
 * are no TLS handshake (the start of an rgpu HELLO); returns the conn. */
static rgpu_conn *plain_tcp_bytes_to(rgpu_listener *l) {
  char turi[64], err[256];
  snprintf(turi, sizeof turi, "tcp://127.0.0.1:%u", rgpu_listener_port(l));
  rgpu_conn *t;
  assert_int_equal(rgpu_conn_connect(turi, NULL, &t, err, sizeof err), 0);
  char hello[64];
  memset(hello, 'R', sizeof hello);
  struct iovec v = {hello, sizeof hello};
  assert_int_equal(rgpu_conn_writev_all(t, &v, 1), 0);
  return t;
}

static void test_plain_tcp_to_tls_port(void **state) {
  char uri[64], err[256];
  rgpu_listener *l = open_server(NULL, uri, sizeof uri);
  rgpu_conn *t = plain_tcp_bytes_to(l);
  char buf[256];
  ssize_t r;
  /* Whatever the server sends back (an alert at most), it ends with EOF. */
  do {
    r = rgpu_conn_read_some(t, buf, sizeof buf);
  } while (r > 0);
  assert_true(r == 0 || r == RGPU_T_ECLOSED);
  rgpu_conn_close(t);
  /* And a TLS client speaking to a plain TCP listener fails cleanly too. */
  rgpu_listener *pl;
  assert_int_equal(rgpu_listener_open("tcp://127.0.0.1:0", NULL, &pl, err, sizeof err), 0);
  char puri[64];
  snprintf(puri, sizeof puri, "tls://127.0.0.1:%u", rgpu_listener_port(pl));
  rgpu_transport_opts co = {.ca_file = srv_cert, .connect_timeout_ms = 500};
  rgpu_conn *c;
  rgpu_conn *srv_side;
  /* The plain server accepts and closes right away. */
  pid_t pid = fork();
  if (pid == 0) {
    rgpu_conn *x;
    if (rgpu_listener_accept(pl, &x, err, sizeof err) == 0) rgpu_conn_close(x);
    _exit(0);
  }
  int rc = rgpu_conn_connect(puri, &co, &c, err, sizeof err);
  assert_true(rc == RGPU_T_ECLOSED || rc == RGPU_T_EAUTH);
  waitpid(pid, NULL, 0);
  (void)srv_side;
  rgpu_listener_close(pl);
  /* The TLS listener keeps serving. */
  tu_echo_server s;
  tu_echo_start(&s, l, 1);
  co.connect_timeout_ms = 0;
  assert_int_equal(rgpu_conn_connect(uri, &co, &c, err, sizeof err), 0);
  assert_int_equal(tu_echo_check(c, 1 << 20, 4096, 3), 0);
  rgpu_conn_close(c);
  tu_echo_join(&s);
  rgpu_listener_close(l);
}

static void test_mtls(void **state) {
  char uri[64], err[512];
  rgpu_listener *l = open_server(cli_cert, uri, sizeof uri);
  rgpu_transport_opts co = {.ca_file = srv_cert};
  rgpu_conn *c;
  /* No client certificate: TLS 1.3 lets the client finish first, so the
   * refusal shows on the first read at the latest. */
  int rc = rgpu_conn_connect(uri, &co, &c, err, sizeof err);
  if (rc == 0) {
    char b;
    ssize_t r = rgpu_conn_read_some(c, &b, 1);
    assert_true(r == RGPU_T_EAUTH || r == RGPU_T_ECLOSED);
    if (r == RGPU_T_EAUTH) assert_non_null(strstr(rgpu_conn_error(c), "ertificate"));
    rgpu_conn_close(c);
  } else {
    assert_int_equal(rc, RGPU_T_EAUTH);
  }
  /* An untrusted client certificate is refused as well. */
  char okey[128];
  snprintf(okey, sizeof okey, "%s/key.pem", other_dir);
  rgpu_transport_opts bad = {.ca_file = srv_cert, .cert_file = other_cert, .key_file = okey};
  rc = rgpu_conn_connect(uri, &bad, &c, err, sizeof err);
  if (rc == 0) {
    char b;
    ssize_t r = rgpu_conn_read_some(c, &b, 1);
    assert_true(r == RGPU_T_EAUTH || r == RGPU_T_ECLOSED);
    rgpu_conn_close(c);
  }
  /* The trusted one gets through. */
  tu_echo_server s;
  tu_echo_start(&s, l, 1);
  rgpu_transport_opts good = {.ca_file = srv_cert, .cert_file = cli_cert, .key_file = cli_key};
  rc = rgpu_conn_connect(uri, &good, &c, err, sizeof err);
  if (rc) fail_msg("mtls connect: %s", err);
  assert_int_equal(tu_echo_check(c, 1 << 20, 5000, 5), 0);
  rgpu_conn_close(c);
  tu_echo_join(&s);
  rgpu_listener_close(l);
}

static void test_listener_needs_cert(void **state) {
  rgpu_listener *l;
  char err[256];
  assert_int_equal(rgpu_listener_open("tls://127.0.0.1:0", NULL, &l, err, sizeof err), RGPU_T_EINVAL);
  assert_non_null(strstr(err, "--cert"));
}

/* The server's model: accept, fork a worker, worker closes the listener and
 * serves the conn.  The worker must see EOF when the client leaves (so no
 * stray copies of relay descriptors survive in it). */
static void test_fork_worker(void **state) {
  char uri[64], err[256];
  rgpu_listener *l = open_server(NULL, uri, sizeof uri);
  rgpu_transport_opts co = {.ca_file = srv_cert};
  rgpu_conn *c, *w;
  assert_int_equal(rgpu_conn_connect(uri, &co, &c, err, sizeof err), 0);
  assert_int_equal(rgpu_listener_accept(l, &w, err, sizeof err), 0);
  assert_string_equal(rgpu_conn_transport_name(w), "tls");
  assert_non_null(strstr(rgpu_conn_peer(w), "127.0.0.1:"));
  assert_true(rgpu_conn_raw_fd(w) >= 0);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(20);
    rgpu_conn_close(c); /* the client lives in another process in real life */
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

/* A client that connects and never speaks is dropped at the handshake
 * deadline, without ever reaching accept. */
static void test_handshake_timeout(void **state) {
  rgpu_transport_opts o = {.cert_file = srv_cert, .key_file = srv_key, .handshake_timeout_ms = 300};
  rgpu_listener *l;
  char err[256], uri[64];
  assert_int_equal(rgpu_listener_open("tls://127.0.0.1:0", &o, &l, err, sizeof err), 0);
  snprintf(uri, sizeof uri, "tcp://127.0.0.1:%u", rgpu_listener_port(l));
  rgpu_conn *t;
  assert_int_equal(rgpu_conn_connect(uri, NULL, &t, err, sizeof err), 0);
  char b;
  ssize_t r = rgpu_conn_read_some(t, &b, 1);
  assert_true(r == 0 || r == RGPU_T_ECLOSED);
  rgpu_conn_close(t);
  struct pollfd p = {.fd = rgpu_listener_poll_fd(l), .events = POLLIN};
  assert_int_equal(poll(&p, 1, 0), 0); /* nothing to accept */
  rgpu_listener_close(l);
}

/* 256 peers that open a connection and never speak take every handshake
 * slot; a real client must still get in (issue 14), long before their 30 s
 * deadline: a slot older than a second goes to the new client. */
static void test_silent_handshakes_do_not_lock_out(void **state) {
  rgpu_transport_opts o = {.cert_file = srv_cert, .key_file = srv_key,
                           .handshake_timeout_ms = 30000};
  rgpu_listener *l;
  char err[256], uri[64], turi[64];
  assert_int_equal(rgpu_listener_open("tls://127.0.0.1:0", &o, &l, err, sizeof err), 0);
  snprintf(uri, sizeof uri, "tls://127.0.0.1:%u", rgpu_listener_port(l));
  snprintf(turi, sizeof turi, "tcp://127.0.0.1:%u", rgpu_listener_port(l));
  enum { SILENT = 300 };
  rgpu_conn *silent[SILENT];
  for (int i = 0; i < SILENT; i++)
    assert_int_equal(rgpu_conn_connect(turi, NULL, &silent[i], err, sizeof err), 0);
  usleep(1200 * 1000); /* every slot is now older than the eviction age */
  tu_echo_server s;
  tu_echo_start(&s, l, 1);
  rgpu_transport_opts co = {.ca_file = srv_cert, .connect_timeout_ms = 5000};
  rgpu_conn *c;
  uint64_t t0 = rgpu_clock_ns();
  int rc = rgpu_conn_connect(uri, &co, &c, err, sizeof err);
  if (rc) fail_msg("a real client was locked out by silent handshakes: %s", err);
  assert_true(rgpu_clock_elapsed_s(t0) < 5.0);
  assert_int_equal(tu_echo_check(c, 1 << 16, 4096, 5), 0);
  rgpu_conn_close(c);
  tu_echo_join(&s);
  for (int i = 0; i < SILENT; i++) rgpu_conn_close(silent[i]);
  rgpu_listener_close(l);
}

/* Certificate dates (issue 14): expired is refused with the dates, not yet
 * valid is a warning; a listener does not start on an expired one.  The
 * generated pair is valid from an hour ago for ten years, so "now" moves. */
static void test_cert_dates(void **state) {
  char err[512];
  time_t now = time(NULL);
  assert_int_equal(rgpu_tls_cert_check_dates(srv_cert, now, err, sizeof err), 0);
  assert_int_equal(rgpu_tls_cert_check_dates(srv_cert, now + 11 * 365 * 24 * 3600L, err, sizeof err),
                   RGPU_T_EINVAL);
  assert_non_null(strstr(err, "expired on "));
  assert_non_null(strstr(err, " UTC"));
  assert_non_null(strstr(err, "--gen-cert"));
  assert_int_equal(rgpu_tls_cert_check_dates(srv_cert, now - 2 * 24 * 3600L, err, sizeof err), 1);
  assert_non_null(strstr(err, "is not valid before "));
  assert_int_equal(rgpu_tls_cert_check_dates("/nonexistent/cert.pem", now, err, sizeof err),
                   RGPU_T_EINVAL);
  assert_non_null(strstr(err, "/nonexistent/cert.pem"));
}

/* A self-signed pair valid from `from` to `until`, as dir/cert.pem + key.pem. */
static void write_pair_with_dates(const char *dir, time_t from, time_t until) {
  gnutls_x509_privkey_t key;
  gnutls_x509_crt_t crt;
  assert_int_equal(gnutls_x509_privkey_init(&key), 0);
  assert_int_equal(gnutls_x509_privkey_generate(key, GNUTLS_PK_ECDSA,
                                                GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1), 0),
                   0);
  assert_int_equal(gnutls_x509_crt_init(&crt), 0);
  gnutls_x509_crt_set_version(crt, 3);
  unsigned char serial[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  gnutls_x509_crt_set_serial(crt, serial, sizeof serial);
  gnutls_x509_crt_set_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, "localhost", 9);
  gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_DNSNAME, "localhost", 9, GNUTLS_FSAN_SET);
  gnutls_x509_crt_set_activation_time(crt, from);
  gnutls_x509_crt_set_expiration_time(crt, until);
  gnutls_x509_crt_set_key(crt, key);
  assert_int_equal(gnutls_x509_crt_sign2(crt, crt, key, GNUTLS_DIG_SHA256, 0), 0);
  char path[128];
  unsigned char buf[8192];
  size_t len = sizeof buf;
  assert_int_equal(gnutls_x509_crt_export(crt, GNUTLS_X509_FMT_PEM, buf, &len), 0);
  snprintf(path, sizeof path, "%s/cert.pem", dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fwrite(buf, 1, len, f);
  fclose(f);
  len = sizeof buf;
  assert_int_equal(gnutls_x509_privkey_export(key, GNUTLS_X509_FMT_PEM, buf, &len), 0);
  snprintf(path, sizeof path, "%s/key.pem", dir);
  f = fopen(path, "w");
  assert_non_null(f);
  fwrite(buf, 1, len, f);
  fclose(f);
  gnutls_x509_crt_deinit(crt);
  gnutls_x509_privkey_deinit(key);
}

/* A listener does not start on an expired certificate, and says so with the
 * dates; one not yet valid starts (a warning). */
static void test_listener_refuses_expired_cert(void **state) {
  char dir[64] = "/tmp/rgpu_tls_test_XXXXXX", cert[128], key[128], err[512] = "";
  assert_non_null(mkdtemp(dir));
  snprintf(cert, sizeof cert, "%s/cert.pem", dir);
  snprintf(key, sizeof key, "%s/key.pem", dir);
  time_t now = time(NULL);
  write_pair_with_dates(dir, now - 2 * 365 * 24 * 3600L, now - 365 * 24 * 3600L);
  rgpu_transport_opts o = {.cert_file = cert, .key_file = key};
  rgpu_listener *l = NULL;
  assert_int_equal(rgpu_listener_open("tls://127.0.0.1:0", &o, &l, err, sizeof err), RGPU_T_EINVAL);
  assert_non_null(strstr(err, "expired on "));
  assert_non_null(strstr(err, cert));
  err[0] = 0;
  assert_int_equal(rgpu_listener_open("quic://127.0.0.1:0", &o, &l, err, sizeof err), RGPU_T_EINVAL);
  assert_non_null(strstr(err, "expired on "));
  write_pair_with_dates(dir, now + 24 * 3600L, now + 365 * 24 * 3600L);
  assert_int_equal(rgpu_listener_open("tls://127.0.0.1:0", &o, &l, err, sizeof err), 0);
  rgpu_listener_close(l);
  rmdir_pair(dir);
}

/* The first bytes of a TLS server's answer are told apart from an rgpu
 * frame, so a client speaking tcp:// to a tls:// port can say so. */
static void test_tls_bytes(void **state) {
  const unsigned char alert[] = {21, 3, 3, 0, 2, 2, 50};
  const unsigned char hello[] = {22, 3, 1, 0, 100};
  const unsigned char rgpu[] = {'R', 'G', 'P', '1', 0};
  assert_true(rgpu_bytes_look_like_tls(alert, sizeof alert));
  assert_true(rgpu_bytes_look_like_tls(hello, sizeof hello));
  assert_false(rgpu_bytes_look_like_tls(rgpu, sizeof rgpu));
  assert_false(rgpu_bytes_look_like_tls(alert, 2));
  /* What our listener really sends to a plain-tcp HELLO. */
  char uri[64];
  rgpu_listener *l = open_server(NULL, uri, sizeof uri);
  rgpu_conn *t = plain_tcp_bytes_to(l);
  unsigned char buf[64];
  ssize_t r = rgpu_conn_read_some(t, buf, sizeof buf);
  assert_true(r >= 3);
  assert_true(rgpu_bytes_look_like_tls(buf, (size_t)r));
  rgpu_conn_close(t);
  rgpu_listener_close(l);
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

/* A worker that answers the first message and ends the session while the
 * client's next bytes are still coming (a refused HELLO with requests
 * pipelined behind it): the client still reads the answer, and the relay
 * drops what the worker no longer reads instead of the connection. */
static void *answer_first_and_close(void *arg) {
  rgpu_conn *w = arg;
  char first[16];
  if (rgpu_conn_read_exact(w, first, sizeof first) == 0) {
    struct iovec v = {.iov_base = "refused: bad token, goodbye....", .iov_len = 32};
    rgpu_conn_writev_all(w, &v, 1);
  }
  rgpu_conn_close(w);
  return NULL;
}

static void test_worker_ends_with_input_unread(void **state) {
  char uri[64], err[256];
  rgpu_listener *l = open_server(NULL, uri, sizeof uri);
  rgpu_transport_opts co = {.ca_file = srv_cert};
  for (int round = 0; round < 5; round++) {
    rgpu_conn *c, *w;
    assert_int_equal(rgpu_conn_connect(uri, &co, &c, err, sizeof err), 0);
    assert_int_equal(rgpu_listener_accept(l, &w, err, sizeof err), 0);
    pthread_t th;
    pthread_create(&th, NULL, answer_first_and_close, w);
    size_t more = 8u << 20;
    char *buf = calloc(1, 16 + more);
    assert_non_null(buf);
    struct iovec v = {.iov_base = buf, .iov_len = 16 + more};
    /* The write may fail once the relay closes after its answer. */
    (void)rgpu_conn_writev_all(c, &v, 1);
    char got[32];
    assert_int_equal(rgpu_conn_read_exact(c, got, sizeof got), 0);
    assert_memory_equal(got, "refused: bad token, goodbye....", 32);
    pthread_join(th, NULL);
    free(buf);
    rgpu_conn_close(c);
  }
  rgpu_listener_close(l);
}

int main(void) {
  signal(SIGPIPE, SIG_DFL);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parallel_clients), cmocka_unit_test(test_half_close),
      cmocka_unit_test(test_gen_cert),      cmocka_unit_test(test_echo_large_and_concurrent),
      cmocka_unit_test(test_wrong_ca),      cmocka_unit_test(test_plain_tcp_to_tls_port),
      cmocka_unit_test(test_mtls),          cmocka_unit_test(test_listener_needs_cert),
      cmocka_unit_test(test_fork_worker),   cmocka_unit_test(test_handshake_timeout),
      cmocka_unit_test(test_silent_handshakes_do_not_lock_out),
      cmocka_unit_test(test_cert_dates),    cmocka_unit_test(test_tls_bytes),
      cmocka_unit_test(test_listener_refuses_expired_cert),
      cmocka_unit_test(test_worker_ends_with_input_unread),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
