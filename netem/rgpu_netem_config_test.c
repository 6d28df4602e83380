/* Command-line parsing and the profile table (no root needed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "rgpu_netem_config.h"

#define MS 1000000ull

/* Parses a NULL-terminated list of words; argv storage is static so the
 * options may point into it. */
static int parse(rgpu_netem_options *o, char *err, size_t errlen, ...) {
  static char words[64][128];
  static char *argv[65];
  va_list ap;
  va_start(ap, errlen);
  int argc = 0;
  argv[argc] = words[argc];
  strcpy(words[argc++], "rgpu-netem");
  const char *w;
  while ((w = va_arg(ap, const char *)) && argc < 64) {
    snprintf(words[argc], sizeof words[argc], "%s", w);
    argv[argc] = words[argc];
    argc++;
  }
  va_end(ap);
  argv[argc] = NULL;
  FILE *devnull = fopen("/dev/null", "w");
  int rc = rgpu_netem_parse_args(argc, argv, o, devnull, err, errlen);
  fclose(devnull);
  return rc;
}

static void test_profiles_match_documentation(void **state) {
  (void)state;
  /* RTT = both one-way delays; values as documented in docs/netem.md. */
  struct {
    const char *name;
    double rtt_ms, jitter_ms, loss_pct, mbit;
  } want[] = {{"lan", 1, 0, 0, 1000},          {"wifi-good", 10, 2, 0.1, 100},
              {"wifi-bad", 30, 10, 2, 20},     {"cellular", 60, 0, 1, 10},
              {"satellite-like", 300, 0, 0.5, 10}, {"edge-worst", 100, 0, 5, 5}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    const rgpu_netem_profile *p = rgpu_netem_profile_find(want[i].name);
    assert_non_null(p);
    const rgpu_netem_dir_config *d = &p->dir;
    assert_int_equal(2 * d->delay_ns, (uint64_t)(want[i].rtt_ms * MS));
    assert_int_equal(d->jitter_ns, (uint64_t)(want[i].jitter_ms * MS));
    double loss = d->loss;
    if (d->ge_enabled) {
      double pb = d->ge_p / (d->ge_p + d->ge_r);
      loss = pb * d->ge_h + (1 - pb) * d->ge_k;
    }
    assert_true(loss * 100 > want[i].loss_pct - 0.001 &&
                loss * 100 < want[i].loss_pct + 0.001);
    assert_true(d->rate_bps == want[i].mbit * 1e6);
    assert_true(d->queue_pkts >= 100);
  }
  assert_true(rgpu_netem_profile_find("wifi-bad")->dir.ge_enabled);
  assert_null(rgpu_netem_profile_find("wifi"));
}

static void test_profile_then_overrides(void **state) {
  (void)state;
  rgpu_netem_options o;
  char err[256];
  /* A free parameter before --profile still overrides it. */
  assert_int_equal(parse(&o, err, sizeof err, "--loss", "3", "--profile", "cellular",
                         "--dir", "s2c", "--rate-mbit", "50", "--", "srv", ":::",
                         "cli", "-x", NULL), 0);
  assert_string_equal(o.profile, "cellular");
  assert_true(o.dir[0].loss == 0.03 && o.dir[1].loss == 0.03);
  assert_true(o.dir[0].rate_bps == 10e6);
  assert_true(o.dir[1].rate_bps == 50e6);
  assert_int_equal(o.dir[0].delay_ns, 30 * MS);
  assert_string_equal(o.server_argv[0], "srv");
  assert_null(o.server_argv[1]);
  assert_string_equal(o.client_argv[0], "cli");
  assert_string_equal(o.client_argv[1], "-x");
  assert_null(o.client_argv[2]);
}

static void test_free_parameters(void **state) {
  (void)state;
  rgpu_netem_options o;
  char err[256];
  assert_int_equal(parse(&o, err, sizeof err, "--rtt-ms", "20", "--dir=c2s",
                         "--jitter-ms", "1.5", "--jitter-dist", "normal", "--reorder",
                         "--ge", "1,30", "--dir", "both", "--queue-pkts", "77",
                         "--queue-bytes", "100000", "--outage", "2:0.5", "--outage",
                         "5.25:1", "--seed", "9", "--mtu", "1400", "--stats", "s.json",
                         "--server-ready-wait", "tcp:7000", "--", "a", ":::", "b", NULL), 0);
  assert_int_equal(o.dir[0].delay_ns, 10 * MS);
  assert_int_equal(o.dir[1].delay_ns, 10 * MS);
  assert_int_equal(o.dir[0].jitter_ns, 1500000);
  assert_int_equal(o.dir[1].jitter_ns, 0);
  assert_int_equal(o.dir[0].jitter_dist, RGPU_NETEM_JITTER_NORMAL);
  assert_true(o.dir[0].reorder && !o.dir[1].reorder);
  assert_true(o.dir[0].ge_enabled && !o.dir[1].ge_enabled);
  assert_true(o.dir[0].ge_p == 0.01 && o.dir[0].ge_r == 0.30);
  assert_true(o.dir[0].ge_h == 1.0 && o.dir[0].ge_k == 0.0);
  assert_int_equal(o.dir[1].queue_pkts, 77);
  assert_int_equal(o.dir[0].queue_bytes, 100000);
  assert_int_equal(o.outages.count, 2);
  assert_int_equal(o.outages.win[1].start_ns, 5250 * MS);
  assert_int_equal(o.outages.win[1].dur_ns, 1000 * MS);
  assert_int_equal(o.seed, 9);
  assert_int_equal(o.mtu, 1400);
  assert_string_equal(o.stats_path, "s.json");
  assert_int_equal(o.ready, RGPU_NETEM_READY_TCP);
  assert_int_equal(o.ready_port, 7000);

  assert_int_equal(parse(&o, err, sizeof err, "--server-ready-wait", "250ms", "--",
                         ":::", "b", NULL), 0);
  assert_int_equal(o.ready, RGPU_NETEM_READY_DELAY);
  assert_int_equal(o.ready_delay_ns, 250 * MS);
  assert_null(o.server_argv);
  assert_int_equal(o.readdress_ns, 0);
  assert_int_equal(parse(&o, err, sizeof err, "--client-readdress", "1.5", "--", ":::", "b",
                         NULL), 0);
  assert_int_equal(o.readdress_ns, 1500 * MS);
  assert_int_equal(parse(&o, err, sizeof err, "--profile", "wifi-bad", "--no-loss",
                         "--", ":::", "b", NULL), 0);
  assert_false(o.dir[0].ge_enabled);
  assert_true(o.dir[1].loss == 0);
}

static void test_errors(void **state) {
  (void)state;
  rgpu_netem_options o;
  char err[256];
  struct {
    const char *a, *b, *c;
    const char *msg;
  } bad[] = {
      {"--profile", "wifi", "--", "unknown profile"},
      {"--loss", "150", "--", "percentage"},
      {"--loss", "x", "--", "percentage"},
      {"--delay-ms", "-1", "--", "milliseconds"},
      {"--ge", "1", "--", "P,R"},
      {"--ge", "1,0", "--", "must be > 0"},
      {"--ge", "1,2,300", "--", "percentage"},
      {"--outage", "3", "--", "T:D"},
      {"--outage", "3:0", "--", "D > 0"},
      {"--client-readdress", "0", "--", "seconds > 0"},
      {"--client-readdress", "x", "--", "seconds > 0"},
      {"--dir", "up", "--", "c2s"},
      {"--bogus", "1", "--", "unknown option"},
      {"--mtu", "100", "--", "576"},
      {"--queue-pkts", "0", "--", "1..1000000"},
      {"--server-ready-wait", "tcp:0", "--", "bad port"},
      {"--jitter-dist", "pareto", "--", "uniform or normal"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err[0] = 0;
    assert_int_equal(parse(&o, err, sizeof err, bad[i].a, bad[i].b, bad[i].c, ":::",
                           "x", NULL), -1);
    if (!strstr(err, bad[i].msg)) fail_msg("%s %s: got '%s'", bad[i].a, bad[i].b, err);
  }
  assert_int_equal(parse(&o, err, sizeof err, "--loss", "1", NULL), -1);
  assert_non_null(strstr(err, "no command"));
  assert_int_equal(parse(&o, err, sizeof err, "--", "srv", "cli", NULL), -1);
  assert_non_null(strstr(err, ":::"));
  assert_int_equal(parse(&o, err, sizeof err, "--", "srv", ":::", NULL), -1);
  assert_non_null(strstr(err, "no client command"));
  assert_int_equal(parse(&o, err, sizeof err, "--loss", NULL), -1);
  assert_non_null(strstr(err, "needs a value"));
  assert_int_equal(parse(&o, err, sizeof err, "--server-ready-wait", "udp:53", "--",
                         ":::", "c", NULL), -1);
  assert_non_null(strstr(err, "needs a server"));
  assert_int_equal(parse(&o, err, sizeof err, "--help", NULL), 1);
  assert_int_equal(parse(&o, err, sizeof err, "--list-profiles", NULL), 1);
}

static void test_describe(void **state) {
  (void)state;
  char buf[320];
  rgpu_netem_describe_dir(&rgpu_netem_profile_find("wifi-bad")->dir, buf, sizeof buf);
  assert_non_null(strstr(buf, "mean loss 2%"));
  assert_non_null(strstr(buf, "20 Mbit/s"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_profiles_match_documentation),
      cmocka_unit_test(test_profile_then_overrides),
      cmocka_unit_test(test_free_parameters),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_describe),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
