#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rgpu_auth.h"

static char dir[64];

static const char *write_file(const char *name, const char *content) {
  static char path[128];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  fputs(content, f);
  fclose(f);
  return path;
}

static void test_token_equal(void **state) {
  assert_true(rgpu_auth_token_equal("secret", "secret", 6));
  assert_false(rgpu_auth_token_equal("secret", "secreT", 6));
  assert_false(rgpu_auth_token_equal("secret", "secre", 5));
  assert_false(rgpu_auth_token_equal("secret", "secrets", 7));
  assert_false(rgpu_auth_token_equal("secret", NULL, 0));
  assert_false(rgpu_auth_token_equal("secret", "secret\0", 7));
  assert_true(rgpu_auth_token_equal("", "", 0));
}

static void test_load_token(void **state) {
  char tok[RGPU_AUTH_TOKEN_MAX + 1], err[256];
  assert_int_equal(rgpu_auth_load_token(write_file("a", "hunter2\r\nsecond line\n"), tok, sizeof tok,
                                        err, sizeof err), 0);
  assert_string_equal(tok, "hunter2");
  assert_int_equal(rgpu_auth_load_token(write_file("b", "  x y \t\n"), tok, sizeof tok, err, sizeof err), 0);
  assert_string_equal(tok, "  x y");
  assert_int_equal(rgpu_auth_load_token(write_file("c", "no-newline"), tok, sizeof tok, err, sizeof err), 0);
  assert_string_equal(tok, "no-newline");
}

static void test_load_token_errors(void **state) {
  char tok[RGPU_AUTH_TOKEN_MAX + 1], err[256];
  assert_int_equal(rgpu_auth_load_token("/nonexistent/rgpu/token", tok, sizeof tok, err, sizeof err), -1);
  assert_non_null(strstr(err, "No such file"));
  assert_int_equal(rgpu_auth_load_token(write_file("e", ""), tok, sizeof tok, err, sizeof err), -1);
  assert_non_null(strstr(err, "empty"));
  assert_int_equal(rgpu_auth_load_token(write_file("f", "\n"), tok, sizeof tok, err, sizeof err), -1);
  char *big = malloc(RGPU_AUTH_TOKEN_MAX + 100);
  memset(big, 'a', RGPU_AUTH_TOKEN_MAX + 99);
  big[RGPU_AUTH_TOKEN_MAX + 99] = 0;
  assert_int_equal(rgpu_auth_load_token(write_file("g", big), tok, sizeof tok, err, sizeof err), -1);
  assert_non_null(strstr(err, "longer"));
  free(big);
}

static int setup(void **state) {
  snprintf(dir, sizeof dir, "/tmp/rgpu_auth_test.XXXXXX");
  return mkdtemp(dir) ? 0 : -1;
}
static int teardown(void **state) {
  const char *names[] = {"a", "b", "c", "e", "f", "g"};
  char path[128];
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    unlink(path);
  }
  rmdir(dir);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_token_equal),
      cmocka_unit_test(test_load_token),
      cmocka_unit_test(test_load_token_errors),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
