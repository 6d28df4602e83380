#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rgpu_job_token.h"

static char dir[64];

static void put(const char *name, const char *content, mode_t mode) {
  char path[128];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(content, f);
  fclose(f);
  chmod(path, mode);
}

static void test_read(void **state) {
  (void)state;
  char path[128], err[256];
  rgpu_job_token t;
  put("a", "tok-a\nexpires=1000\ngpus=2\n", 0600);
  snprintf(path, sizeof path, "%s/a", dir);
  assert_int_equal(rgpu_job_token_read(path, &t, err, sizeof err), 0);
  assert_string_equal(t.token, "tok-a");
  assert_int_equal(t.expires, 1000);
  put("b", "tok-b\r\n", 0600);
  snprintf(path, sizeof path, "%s/b", dir);
  assert_int_equal(rgpu_job_token_read(path, &t, err, sizeof err), 0);
  assert_int_equal(t.expires, 0);
  put("c", "tok-c\nexpires=soon\n", 0600);
  snprintf(path, sizeof path, "%s/c", dir);
  assert_int_equal(rgpu_job_token_read(path, &t, err, sizeof err), -1);
  assert_non_null(strstr(err, "expires"));
  put("d", "tok-d\n", 0666);
  snprintf(path, sizeof path, "%s/d", dir);
  assert_int_equal(rgpu_job_token_read(path, &t, err, sizeof err), -1);
  assert_non_null(strstr(err, "writable by everyone"));
  put("e", "\nexpires=5\n", 0600);
  snprintf(path, sizeof path, "%s/e", dir);
  assert_int_equal(rgpu_job_token_read(path, &t, err, sizeof err), -1);
  /* A symlink to a token is not one. */
  char link[128];
  snprintf(link, sizeof link, "%s/f", dir);
  snprintf(path, sizeof path, "%s/a", dir);
  assert_int_equal(symlink(path, link), 0);
  assert_int_equal(rgpu_job_token_read(link, &t, err, sizeof err), -1);
  unlink(link);
  for (const char *n = "bcde"; *n; n++) {
    snprintf(path, sizeof path, "%s/%c", dir, *n);
    unlink(path);
  }
}

static void test_find_and_validity(void **state) {
  (void)state;
  char name[RGPU_JOB_TOKEN_NAME_MAX], err[256];
  put("job-1", "one\nexpires=2000\n", 0600);
  put("job-2", "two\n", 0640);
  put(".job-3.tmp", "three\n", 0600); /* a writer's temporary file */
  assert_int_equal(rgpu_job_token_find(dir, "one", 3, 1999, name, sizeof name, err, sizeof err), 1);
  assert_string_equal(name, "job-1");
  /* Expired at its second. */
  assert_int_equal(rgpu_job_token_find(dir, "one", 3, 2000, name, sizeof name, err, sizeof err), 0);
  assert_int_equal(rgpu_job_token_find(dir, "two", 3, 1 << 30, name, sizeof name, err, sizeof err), 1);
  assert_string_equal(name, "job-2");
  assert_int_equal(rgpu_job_token_find(dir, "three", 5, 0, name, sizeof name, err, sizeof err), 0);
  assert_int_equal(rgpu_job_token_find(dir, "on", 2, 0, name, sizeof name, err, sizeof err), 0);
  assert_int_equal(rgpu_job_token_find("/nonexistent/rgpu", "one", 3, 0, name, sizeof name, err,
                                       sizeof err), -1);

  assert_int_equal(rgpu_job_token_still_valid(dir, "job-1", 1999, err, sizeof err), 1);
  assert_int_equal(rgpu_job_token_still_valid(dir, "job-1", 2001, err, sizeof err), 0);
  assert_non_null(strstr(err, "expired"));
  char path[128];
  snprintf(path, sizeof path, "%s/job-2", dir);
  unlink(path);
  assert_int_equal(rgpu_job_token_still_valid(dir, "job-2", 0, err, sizeof err), 0);
  assert_int_equal(rgpu_job_token_still_valid(dir, "../job-1", 0, err, sizeof err), 0);
  assert_int_equal(rgpu_job_token_still_valid(dir, ".job-3.tmp", 0, err, sizeof err), 0);
  snprintf(path, sizeof path, "%s/job-1", dir);
  unlink(path);
  snprintf(path, sizeof path, "%s/.job-3.tmp", dir);
  unlink(path);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/rgpu_job_token_test.XXXXXX");
  if (!mkdtemp(dir)) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_read),
      cmocka_unit_test(test_find_and_validity),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  char path[128];
  snprintf(path, sizeof path, "%s/a", dir);
  unlink(path);
  rmdir(dir);
  return rc;
}
