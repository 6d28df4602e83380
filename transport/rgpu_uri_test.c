#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "rgpu_transport.h"

static void test_clear_text_network(void **state) {
  assert_true(rgpu_uri_is_clear_text_network("tcp://gpu-box.example:7000"));
  assert_true(rgpu_uri_is_clear_text_network("tcp://10.1.2.3:7000"));
  assert_true(rgpu_uri_is_clear_text_network("tcp://0.0.0.0:7000"));
  assert_true(rgpu_uri_is_clear_text_network("tcp://[::]:7000"));
  assert_false(rgpu_uri_is_clear_text_network("tcp://127.0.0.1:7000"));
  assert_false(rgpu_uri_is_clear_text_network("tcp://localhost:7000"));
  assert_false(rgpu_uri_is_clear_text_network("tcp://[::1]:7000"));
  assert_false(rgpu_uri_is_clear_text_network("tls://gpu-box.example:7000"));
  assert_false(rgpu_uri_is_clear_text_network("quic://gpu-box.example:7000"));
  assert_false(rgpu_uri_is_clear_text_network("unix:///tmp/x.sock"));
  assert_false(rgpu_uri_is_clear_text_network("garbage"));
  assert_false(rgpu_uri_is_clear_text_network(NULL));
}

static void test_good(void **state) {
  rgpu_uri u;
  char err[256];
  assert_int_equal(rgpu_uri_parse("tcp://127.0.0.1:7000", &u, err, sizeof err), 0);
  assert_int_equal(u.scheme, RGPU_URI_TCP);
  assert_string_equal(u.host, "127.0.0.1");
  assert_int_equal(u.port, 7000);
  assert_int_equal(rgpu_uri_parse("tcp://[::1]:65535", &u, err, sizeof err), 0);
  assert_string_equal(u.host, "::1");
  assert_int_equal(u.port, 65535);
  assert_int_equal(rgpu_uri_parse("tls://gpu-box.example:443", &u, err, sizeof err), 0);
  assert_int_equal(u.scheme, RGPU_URI_TLS);
  assert_string_equal(u.host, "gpu-box.example");
  assert_int_equal(rgpu_uri_parse("quic://localhost:0", &u, err, sizeof err), 0);
  assert_int_equal(u.scheme, RGPU_URI_QUIC);
  assert_int_equal(u.port, 0);
  assert_int_equal(rgpu_uri_parse("unix:///tmp/rgpu.sock", &u, err, sizeof err), 0);
  assert_int_equal(u.scheme, RGPU_URI_UNIX);
  assert_string_equal(u.path, "/tmp/rgpu.sock");
  assert_string_equal(rgpu_uri_scheme_name(RGPU_URI_QUIC), "quic");
}

static void expect_bad(const char *text, const char *needle) {
  rgpu_uri u;
  char err[256] = "";
  assert_int_equal(rgpu_uri_parse(text, &u, err, sizeof err), RGPU_T_EINVAL);
  if (!strstr(err, needle)) fail_msg("'%s': message '%s' lacks '%s'", text, err, needle);
}

static void test_bad(void **state) {
  expect_bad("tcp://127.0.0.1", "missing port");
  expect_bad("tcp://127.0.0.1:", "missing port");
  expect_bad("tcp://127.0.0.1:70000", "out of range");
  expect_bad("tcp://127.0.0.1:99999999999999999999", "out of range");
  expect_bad("tcp://127.0.0.1:7x", "not a number");
  expect_bad("tcp://:7000", "missing host");
  expect_bad("tcp://::1:7000", "brackets");
  expect_bad("tcp://[::1]7000", "missing port");
  expect_bad("tcp://[::1:7000", "']'");
  expect_bad("tcp://host:7000/path", "unexpected path");
  expect_bad("unix://relative/sock", "absolute");
  expect_bad("unix://", "absolute");
  expect_bad("http://x:80", "unknown scheme");
  expect_bad("127.0.0.1:7000", "SCHEME://");
  expect_bad("", "SCHEME://");
  char longp[300] = "unix:///";
  memset(longp + 8, 'a', 200);
  longp[208] = 0;
  expect_bad(longp, "limit");
  /* NULL err buffer must be tolerated. */
  rgpu_uri u;
  assert_int_equal(rgpu_uri_parse("bogus", &u, NULL, 0), RGPU_T_EINVAL);
  assert_int_equal(rgpu_uri_parse(NULL, &u, NULL, 0), RGPU_T_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_good), cmocka_unit_test(test_clear_text_network), cmocka_unit_test(test_bad)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
