/* Unit tests of the client core parts that need no server: configuration
 * from the environment, the stats JSON, and a connect failure. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "rgpu_client.h"

typedef struct {
  const char *k[16];
  const char *v[16];
  int n;
} fake_env;

static const char *fake_getenv(const char *name, void *ctx) {
  fake_env *e = ctx;
  for (int i = 0; i < e->n; i++)
    if (strcmp(e->k[i], name) == 0) return e->v[i];
  return NULL;
}

static void set(fake_env *e, const char *k, const char *v) {
  e->k[e->n] = k;
  e->v[e->n] = v;
  e->n++;
}

static void test_config_defaults(void **state) {
  fake_env e = {0};
  rgpu_client_config cfg;
  char err[256];
  assert_int_equal(rgpu_client_config_load(&cfg, fake_getenv, &e, err, sizeof err), 0);
  assert_string_equal(cfg.server, "");
  assert_int_equal(cfg.connect_timeout_ms, RGPU_CLIENT_DEFAULT_CONNECT_TIMEOUT_MS);
  assert_int_equal(cfg.batch_us, RGPU_CLIENT_DEFAULT_BATCH_US);
  assert_int_equal(cfg.batch_bytes, RGPU_CLIENT_DEFAULT_BATCH_BYTES);
  assert_int_equal(cfg.idle_sends, RGPU_CLIENT_DEFAULT_IDLE_SENDS);
  assert_int_equal(cfg.sync_every_call, 0);
  assert_string_equal(cfg.stats_path, "");
}

static void test_config_values(void **state) {
  fake_env e = {0};
  set(&e, "RGPU_SERVER", "tcp://10.0.0.2:7000");
  set(&e, "RGPU_TOKEN", "secret");
  set(&e, "RGPU_CONNECT_TIMEOUT_MS", "1500");
  set(&e, "RGPU_SYNC_EVERY_CALL", "1");
  set(&e, "RGPU_BATCH_US", "0");
  set(&e, "RGPU_BATCH_IDLE_SENDS", "0");
  set(&e, "RGPU_STATS", "/tmp/x.json");
  set(&e, "RGPU_CA", "/etc/ca.pem");
  rgpu_client_config cfg;
  char err[256];
  assert_int_equal(rgpu_client_config_load(&cfg, fake_getenv, &e, err, sizeof err), 0);
  assert_string_equal(cfg.server, "tcp://10.0.0.2:7000");
  assert_string_equal(cfg.token, "secret");
  assert_int_equal(cfg.connect_timeout_ms, 1500);
  assert_int_equal(cfg.sync_every_call, 1);
  assert_int_equal(cfg.batch_us, 0);
  assert_int_equal(cfg.idle_sends, 0);
  assert_string_equal(cfg.stats_path, "/tmp/x.json");
  assert_string_equal(cfg.ca_file, "/etc/ca.pem");
}

static void test_config_sync_false_words(void **state) {
  const char *no[] = {"0", "false", "off", "no", ""};
  for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
    fake_env e = {0};
    set(&e, "RGPU_SYNC_EVERY_CALL", no[i]);
    rgpu_client_config cfg;
    char err[256];
    assert_int_equal(rgpu_client_config_load(&cfg, fake_getenv, &e, err, sizeof err), 0);
    assert_int_equal(cfg.sync_every_call, 0);
  }
}

static void test_config_bad_number(void **state) {
  fake_env e = {0};
  set(&e, "RGPU_BATCH_US", "2ms");
  rgpu_client_config cfg;
  char err[256] = "";
  assert_int_equal(rgpu_client_config_load(&cfg, fake_getenv, &e, err, sizeof err), -1);
  assert_non_null(strstr(err, "RGPU_BATCH_US=2ms"));
}

static void test_config_token_file(void **state) {
  char path[] = "/tmp/rgpu_client_test_tokenXXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "abc123\r\nsecond line\n", 20), 20);
  close(fd);
  fake_env e = {0};
  set(&e, "RGPU_TOKEN_FILE", path);
  rgpu_client_config cfg;
  char err[256];
  assert_int_equal(rgpu_client_config_load(&cfg, fake_getenv, &e, err, sizeof err), 0);
  assert_string_equal(cfg.token, "abc123");
  unlink(path);

  fake_env e2 = {0};
  set(&e2, "RGPU_TOKEN_FILE", "/nonexistent/rgpu/token");
  assert_int_equal(rgpu_client_config_load(&cfg, fake_getenv, &e2, err, sizeof err), -1);
  assert_non_null(strstr(err, "/nonexistent/rgpu/token"));
}

static void test_stats_json(void **state) {
  rgpu_client_stats s = {.calls = 10,
                         .async_calls = 7,
                         .round_trips = 3,
                         .bytes_sent = 1000,
                         .bytes_received = 2000,
                         .wall_s = 1.5,
                         .transport = "tcp",
                         .server = "tcp://h:1/\"x\"",
                         .sync_every_call = 0,
                         .connected = 1,
                         .resumes = 4,
                         .quic_direct_moves = 1,
                         .images_sent = 2,
                         .image_bytes_sent = 4096,
                         .image_cache_hits = 5,
                         .flow_waits = 2,
                         .wait_s = 0.25};
  char buf[1024];
  int n = rgpu_client_stats_json(&s, buf, sizeof buf);
  assert_true(n > 0);
  assert_int_equal((size_t)n, strlen(buf));
  assert_non_null(strstr(buf, "\"calls\":10,"));
  assert_non_null(strstr(buf, "\"async_calls\":7,"));
  assert_non_null(strstr(buf, "\"round_trips\":3,"));
  assert_non_null(strstr(buf, "\"bytes_sent\":1000,"));
  assert_non_null(strstr(buf, "\"bytes_received\":2000,"));
  assert_non_null(strstr(buf, "\"wall_s\":1.500000,"));
  assert_non_null(strstr(buf, "\"transport\":\"tcp\""));
  assert_non_null(strstr(buf, "\"server\":\"tcp://h:1/\\\"x\\\"\""));
  assert_non_null(strstr(buf, "\"sync_every_call\":false"));
  assert_non_null(strstr(buf, "\"resumes\":4,\"quic_direct_moves\":1,"));
  assert_non_null(strstr(buf, "\"flow_waits\":2,\"wait_s\":0.250000,"));
  assert_non_null(strstr(buf, "\"images_sent\":2,\"image_bytes_sent\":4096,\"image_cache_hits\":5}"));
  assert_int_equal(buf[0], '{');
  assert_int_equal(buf[n - 1], '}');
  /* Too small a buffer fails cleanly. */
  assert_int_equal(rgpu_client_stats_json(&s, buf, 20), -1);
}

static void test_connect_no_server(void **state) {
  rgpu_client_config cfg;
  char err[256];
  fake_env e = {0};
  assert_int_equal(rgpu_client_config_load(&cfg, fake_getenv, &e, err, sizeof err), 0);
  rgpu_client *c = (rgpu_client *)1;
  assert_true(rgpu_client_connect(&cfg, &c, err, sizeof err) < 0);
  assert_null(c);
  assert_non_null(strstr(err, "RGPU_SERVER"));
}

/* A list of servers is split into its URIs, blanks around each dropped;
 * one URI is a list of one. */
static void test_server_list(void **state) {
  (void)state;
  rgpu_client_config cfg;
  char err[512];
  fake_env e = {0};
  set(&e, "RGPU_SERVER", "tcp://10.0.0.2:7000, quic://gpu-b:7001");
  assert_int_equal(rgpu_client_config_load(&cfg, fake_getenv, &e, err, sizeof err), 0);
  assert_int_equal(cfg.nservers, 2);
  char uris[RGPU_CLIENT_MAX_SERVERS][RGPU_CLIENT_URI_MAX];
  assert_int_equal(rgpu_client_server_list_parse(cfg.server, uris, RGPU_CLIENT_MAX_SERVERS, err,
                                                 sizeof err),
                   2);
  assert_string_equal(uris[0], "tcp://10.0.0.2:7000");
  assert_string_equal(uris[1], "quic://gpu-b:7001");
  /* One URI is a list of one. */
  fake_env one = {0};
  set(&one, "RGPU_SERVER", "unix:///tmp/s.sock");
  assert_int_equal(rgpu_client_config_load(&cfg, fake_getenv, &one, err, sizeof err), 0);
  assert_int_equal(cfg.nservers, 1);
}

static void expect_list_error(const char *list, const char *words) {
  char uris[RGPU_CLIENT_MAX_SERVERS][RGPU_CLIENT_URI_MAX];
  char err[512] = "";
  assert_int_equal(rgpu_client_server_list_parse(list, uris, RGPU_CLIENT_MAX_SERVERS, err,
                                                 sizeof err),
                   -1);
  if (!strstr(err, words)) fail_msg("list %s: message '%s' lacks '%s'", list, err, words);
}

static void test_server_list_malformed(void **state) {
  (void)state;
  expect_list_error("tcp://a:1,,tcp://b:1", "entry 2 is empty");
  expect_list_error("tcp://a:1,", "entry 2 is empty");
  expect_list_error(",tcp://a:1", "entry 1 is empty");
  expect_list_error("tcp://a:1, ", "entry 2 is empty");
  expect_list_error("tcp://a:1,b:7000", "entry 2: URI 'b:7000': expected SCHEME://");
  expect_list_error("tcp://a:1,://b:7000", "entry 2: URI '://b:7000'");
  expect_list_error("tcp://a:1,tcp://", "entry 2: URI 'tcp://'");
  expect_list_error("tcp://a:1,tcp://b", "entry 2: URI 'tcp://b': missing port");
  expect_list_error("foo://a:1,tcp://b:1", "entry 1: URI 'foo://a:1': unknown scheme");
  /* One URI is the connection's to judge, as before lists existed. */
  char one[1][RGPU_CLIENT_URI_MAX];
  char err1[256];
  assert_int_equal(rgpu_client_server_list_parse("b:7000", one, 1, err1, sizeof err1), 1);
  expect_list_error("tcp://a:1,tcp://a:1", "names tcp://a:1 twice");
  expect_list_error("tcp://a:1,tcp://a:2,tcp://a:3,tcp://a:4,tcp://a:5,tcp://a:6,tcp://a:7,"
                    "tcp://a:8,tcp://a:9",
                    "more than 8 servers");
  /* Through the environment: the same sentence, and no partial config. */
  rgpu_client_config cfg;
  char err[512];
  fake_env e = {0};
  set(&e, "RGPU_SERVER", "tcp://10.0.0.2:7000,,tcp://10.0.0.3:7000");
  assert_int_equal(rgpu_client_config_load(&cfg, fake_getenv, &e, err, sizeof err), -1);
  assert_non_null(strstr(err, "entry 2 is empty"));
}

/* A list given to the one-server connect is refused, not read as one URI. */
static void test_connect_list_refused(void **state) {
  (void)state;
  rgpu_client_config cfg;
  char err[512];
  fake_env e = {0};
  set(&e, "RGPU_SERVER", "tcp://127.0.0.1:1,tcp://127.0.0.1:2");
  assert_int_equal(rgpu_client_config_load(&cfg, fake_getenv, &e, err, sizeof err), 0);
  rgpu_client *c = NULL;
  assert_true(rgpu_client_connect(&cfg, &c, err, sizeof err) < 0);
  assert_null(c);
  assert_non_null(strstr(err, "names several servers"));
}

static void test_connect_refused(void **state) {
  rgpu_client_config cfg;
  char err[256];
  fake_env e = {0};
  set(&e, "RGPU_SERVER", "unix:///tmp/rgpu-client-test-no-such.sock");
  assert_int_equal(rgpu_client_config_load(&cfg, fake_getenv, &e, err, sizeof err), 0);
  rgpu_client *c = NULL;
  assert_true(rgpu_client_connect(&cfg, &c, err, sizeof err) < 0);
  assert_null(c);
  assert_non_null(strstr(err, "cannot reach server unix:///tmp/rgpu-client-test-no-such.sock"));
  assert_non_null(strstr(err, "rgpu run"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_config_defaults),   cmocka_unit_test(test_config_values),
      cmocka_unit_test(test_config_sync_false_words), cmocka_unit_test(test_config_bad_number),
      cmocka_unit_test(test_config_token_file), cmocka_unit_test(test_stats_json),
      cmocka_unit_test(test_connect_no_server),
      cmocka_unit_test(test_server_list), cmocka_unit_test(test_server_list_malformed),
      cmocka_unit_test(test_connect_list_refused), cmocka_unit_test(test_connect_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
