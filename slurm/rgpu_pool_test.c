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

#include "rgpu_pool.h"

static char dir[64];
static char conf[128];

static void write_conf(const char *body) {
  FILE *f = fopen(conf, "w");
  assert_non_null(f);
  fputs(body, f);
  fclose(f);
}

static void load_two(rgpu_pool *p) {
  char body[512], err[512];
  snprintf(body, sizeof body,
           "# two servers\n"
           "token-dir %s/tokens\n"
           "ca /etc/ca.pem\n"
           "server a tcp://127.0.0.1:7001 gpus=2  # first\n"
           "server b tcp://127.0.0.1:7002\n",
           dir);
  write_conf(body);
  assert_int_equal(rgpu_pool_load(conf, p, err, sizeof err), 0);
}

static void test_load(void **state) {
  (void)state;
  rgpu_pool p;
  char err[512];
  load_two(&p);
  assert_int_equal(p.nservers, 2);
  assert_string_equal(p.servers[0].name, "a");
  assert_int_equal(p.servers[0].gpus, 2);
  assert_int_equal(p.servers[1].gpus, 1);
  assert_string_equal(p.ca, "/etc/ca.pem");
  write_conf("token-dir /x\nserver a tcp://h:1 gpus=0\n");
  assert_int_equal(rgpu_pool_load(conf, &p, err, sizeof err), -1);
  assert_non_null(strstr(err, ":2: expected gpus=N"));
  write_conf("token-dir /x\nserver ../a tcp://h:1\n");
  assert_int_equal(rgpu_pool_load(conf, &p, err, sizeof err), -1);
  write_conf("token-dir /x\nserver a h:1\n");
  assert_int_equal(rgpu_pool_load(conf, &p, err, sizeof err), -1);
  assert_non_null(strstr(err, "not a server URI"));
  write_conf("server a tcp://h:1\n");
  assert_int_equal(rgpu_pool_load(conf, &p, err, sizeof err), -1);
  assert_non_null(strstr(err, "no token-dir"));
  write_conf("token-dir relative\nserver a tcp://h:1\n");
  assert_int_equal(rgpu_pool_load(conf, &p, err, sizeof err), -1);
  write_conf("token-dir /x\nbogus line\n");
  assert_int_equal(rgpu_pool_load(conf, &p, err, sizeof err), -1);
  assert_int_equal(rgpu_pool_load("/nonexistent/pool.conf", &p, err, sizeof err), -1);
}

static void test_grant_spread_and_revoke(void **state) {
  (void)state;
  rgpu_pool p;
  char err[512], servers[1024];
  load_two(&p);
  rgpu_pool_grant g1, g2, g3;
  /* Two GPUs: one on each server (spread), a's first (most free). */
  assert_int_equal(rgpu_pool_grant_gpus(&p, 2, "job-1.0", 5000, -1, 1000, &g1, err, sizeof err), 0);
  assert_int_equal(g1.n, 2);
  assert_int_equal(g1.server[0], 0);
  assert_int_equal(g1.server[1], 1);
  assert_int_equal(strlen(g1.token), 64);
  assert_int_equal(rgpu_pool_grant_servers(&p, &g1, servers, sizeof servers), 0);
  assert_string_equal(servers, "tcp://127.0.0.1:7001,tcp://127.0.0.1:7002");
  assert_int_equal(rgpu_pool_used(&p, 0, 1000), 1);
  assert_int_equal(rgpu_pool_used(&p, 1, 1000), 1);
  /* The token file is the server's format: token, expires=, gpus=. */
  char path[256], line[128];
  snprintf(path, sizeof path, "%s/tokens/a/job-1.0", dir);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  assert_non_null(fgets(line, sizeof line, f));
  line[strcspn(line, "\n")] = 0;
  assert_string_equal(line, g1.token);
  assert_non_null(fgets(line, sizeof line, f));
  assert_string_equal(line, "expires=5000\n");
  fclose(f);
  /* One left (on a); two more do not fit. */
  assert_int_equal(rgpu_pool_grant_gpus(&p, 2, "job-2.0", 5000, -1, 1000, &g2, err, sizeof err), -1);
  assert_non_null(strstr(err, "2 remote GPUs asked, 1 free"));
  assert_int_equal(rgpu_pool_grant_gpus(&p, 1, "job-2.0", 5000, -1, 1000, &g2, err, sizeof err), 0);
  assert_int_equal(g2.server[0], 0);
  assert_string_not_equal(g1.token, g2.token);
  /* Revoking frees them. */
  assert_int_equal(rgpu_pool_revoke(&p, "job-1.0"), 2);
  assert_int_equal(rgpu_pool_used(&p, 1, 1000), 0);
  assert_int_equal(rgpu_pool_grant_gpus(&p, 2, "job-3.0", 5000, -1, 1000, &g3, err, sizeof err), 0);
  /* Expired grants count for nothing and are swept. */
  assert_int_equal(rgpu_pool_used(&p, 0, 6000), 0);
  assert_int_equal(access(path, F_OK), -1);
  /* The epilog's sweep by job. */
  assert_int_equal(rgpu_pool_grant_gpus(&p, 1, "job-7.0", 9000, -1, 6000, &g1, err, sizeof err), 0);
  assert_int_equal(rgpu_pool_grant_gpus(&p, 1, "job-7.1", 9000, -1, 6000, &g2, err, sizeof err), 0);
  assert_int_equal(rgpu_pool_revoke_job(&p, 7), 2);
  assert_int_equal(rgpu_pool_used(&p, 0, 6000) + rgpu_pool_used(&p, 1, 6000), 0);
  assert_int_equal(rgpu_pool_grant_gpus(&p, 0, "job-8.0", 9000, -1, 6000, &g1, err, sizeof err), -1);
  assert_int_equal(rgpu_pool_grant_gpus(&p, 1, "../x", 9000, -1, 6000, &g1, err, sizeof err), -1);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/rgpu_pool_test.XXXXXX");
  if (!mkdtemp(dir)) return 1;
  snprintf(conf, sizeof conf, "%s/pool.conf", dir);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_load),
      cmocka_unit_test(test_grant_spread_and_revoke),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd)) rc = rc ? rc : 1;
  return rc;
}
