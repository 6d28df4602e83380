/* End-to-end measurements through rgpu-netem: real namespaces, TUN devices,
 * kernel TCP and UDP, real time.  Needs root and /dev/net/tun; every test is
 * skipped with a message where the machine cannot create a namespace.
 *
 * Tolerances are wider than the model tests' (rgpu_netem_pipe_test.c),
 * because here scheduling noise of a shared 2-core machine adds to every
 * figure; the RNG is seeded, so the loss patterns themselves repeat. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static int capable = -1; /* -1 unknown, 0 no, 1 yes */
static char tmpdir[64];

static void check_capable(void) {
  if (capable >= 0) return;
  pid_t p = fork();
  if (p == 0) {
    if (unshare(CLONE_NEWNET) < 0) _exit(1);
    int fd = open("/dev/net/tun", O_RDWR);
    if (fd < 0) _exit(2);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
    strcpy(ifr.ifr_name, "probe0");
    _exit(ioctl(fd, TUNSETIFF, &ifr) < 0 ? 3 : 0);
  }
  int st = 0;
  waitpid(p, &st, 0);
  capable = WIFEXITED(st) && WEXITSTATUS(st) == 0;
  if (!capable)
    fprintf(stderr, "rgpu_netem_test: SKIPPING: cannot create a network namespace "
                    "with a TUN device here (needs root and /dev/net/tun; step %d "
                    "failed)\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

#define NEED_ROOT()          \
  do {                       \
    check_capable();         \
    if (!capable) skip();    \
  } while (0)

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  return buf;
}

/* The number after "key": inside the object that follows "within" (or the
 * whole text when within is NULL).  Good enough for our own flat output. */
static double jnum(const char *json, const char *within, const char *key) {
  const char *s = json;
  char pat[96];
  if (within) {
    snprintf(pat, sizeof pat, "\"%s\"", within);
    s = strstr(s, pat);
    if (!s) fail_msg("no \"%s\" in %s", within, json);
  }
  snprintf(pat, sizeof pat, "\"%s\": ", key);
  s = strstr(s, pat);
  if (!s) fail_msg("no \"%s\" in %s", key, json);
  return strtod(s + strlen(pat), NULL);
}

/* Runs a shell command line; returns its exit status. */
static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
  char cmd[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  int st = system(cmd);
  if (st == -1) fail_msg("system() failed");
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

#define NETEM RGPU_NETEM_BIN " -q --seed 1"
#define PROBE RGPU_NETEM_PROBE_BIN

/* Emulator options, then a probe client's arguments; results in out.json and
 * stats.json of tmpdir. */
static char *run_probe(const char *netem_opts, const char *probe_args) {
  int rc = sh(NETEM " --stats %s/stats.json --server-ready-wait udp:9000 %s -- "
              PROBE " server --port 9000 ::: " PROBE " %s --to 10.77.0.2:9000 --out %s/out.json",
              tmpdir, netem_opts, probe_args, tmpdir);
  assert_int_equal(rc, 0);
  char path[128];
  snprintf(path, sizeof path, "%s/out.json", tmpdir);
  static char copy[1 << 16];
  char *j = slurp(path);
  assert_non_null(j);
  strcpy(copy, j);
  return copy;
}

static char *stats(void) {
  char path[128];
  snprintf(path, sizeof path, "%s/stats.json", tmpdir);
  static char copy[1 << 16];
  char *j = slurp(path);
  assert_non_null(j);
  strcpy(copy, j);
  return copy;
}

#define ASSERT_IN(v, lo, hi)                                                  \
  do {                                                                        \
    double v_ = (v);                                                          \
    if (!(v_ >= (lo) && v_ <= (hi)))                                          \
      fail_msg("%s = %g, expected within [%g, %g]", #v, v_, (double)(lo),     \
               (double)(hi));                                                 \
  } while (0)

static void test_udp_rtt(void **state) {
  (void)state;
  NEED_ROOT();
  char *j = run_probe("--rtt-ms 20", "udp-ping --count 200 --interval-us 5000");
  assert_int_equal((int)jnum(j, NULL, "lost"), 0);
  ASSERT_IN(jnum(j, "rtt_ms", "median"), 19.5, 23.0);
  ASSERT_IN(jnum(j, "rtt_ms", "min"), 19.9, 23.0); /* never faster than configured */
}

static void test_tcp_rtt(void **state) {
  (void)state;
  NEED_ROOT();
  char *j = run_probe("--rtt-ms 20", "tcp-ping --count 40 --size 64");
  ASSERT_IN(jnum(j, "rtt_ms", "median"), 19.5, 23.0);
  ASSERT_IN(jnum(j, "rtt_ms", "min"), 19.9, 23.0);
}

static void test_asymmetric_delay(void **state) {
  (void)state;
  NEED_ROOT();
  char *j = run_probe("--dir c2s --delay-ms 15 --dir s2c --delay-ms 5",
                      "udp-ping --count 100 --interval-us 5000");
  ASSERT_IN(jnum(j, "rtt_ms", "median"), 19.5, 23.0);
}

static void test_bernoulli_loss(void **state) {
  (void)state;
  NEED_ROOT();
  char *j = run_probe("--dir c2s --loss 5", "udp-ping --count 4000 --interval-us 250");
  double loss = jnum(j, NULL, "loss");
  ASSERT_IN(loss, 0.035, 0.065);
  /* Only the probes cross the link, so the emulator's count is exact. */
  char *s = stats();
  assert_int_equal((int)jnum(s, "c2s", "lost_random"), (int)jnum(j, NULL, "lost"));
  assert_int_equal((int)jnum(s, "s2c", "lost_random"), 0);
  assert_int_equal((int)jnum(s, "c2s", "rx_pkts"), 4000);
}

static void test_gilbert_elliott_bursts(void **state) {
  (void)state;
  NEED_ROOT();
  /* P(Bad) = 5/(5+25) = 1/6, all of Bad lost, bursts of mean 1/r = 4. */
  char *j = run_probe("--dir c2s --ge 5,25,100,0",
                      "udp-ping --count 8000 --interval-us 200");
  ASSERT_IN(jnum(j, NULL, "loss"), 0.12, 0.215);
  ASSERT_IN(jnum(j, "bursts", "mean_len"), 3.2, 4.8);
  char *s = stats();
  assert_int_equal((int)jnum(s, "c2s", "lost_burst"), (int)jnum(j, NULL, "lost"));
}

static void test_rate_tcp(void **state) {
  (void)state;
  NEED_ROOT();
  int rc = sh(NETEM " --rate-mbit 20 --rtt-ms 10 --queue-pkts 100 --server-ready-wait tcp:9000 -- "
              PROBE " server --port 9000 ::: " PROBE " tcp-bulk --to 10.77.0.2:9000 --seconds 3 --out %s/out.json",
              tmpdir);
  assert_int_equal(rc, 0);
  char path[128];
  snprintf(path, sizeof path, "%s/out.json", tmpdir);
  char *j = slurp(path);
  assert_non_null(j);
  /* The upper bound is the emulator's contract: never faster than the rate.
   * The lower one only says the link was kept busy; TCP's own recovery and a
   * stalled 2-core CI machine decide it (19.28 here every time, 16.53 once in
   * CI with the test running alone), so it is loose: a rate limiter off by a
   * factor still fails it. test_rate_udp checks the rate itself tightly. */
  ASSERT_IN(jnum(j, NULL, "goodput_mbit"), 14.0, 20.5);
}

static void test_rate_udp(void **state) {
  (void)state;
  NEED_ROOT();
  /* 1200 B every 320 us offers 30 Mbit/s to a 20 Mbit/s link. */
  char *j = run_probe("--dir c2s --rate-mbit 20 --queue-pkts 50",
                      "udp-ping --size 1200 --count 5000 --interval-us 320");
  ASSERT_IN(jnum(j, NULL, "rx_goodput_mbit"), 17.0, 20.5);
  char *s = stats();
  assert_true(jnum(s, "c2s", "dropped_queue") > 1000);
  ASSERT_IN(jnum(s, "c2s", "max_queue_pkts"), 50, 50);
}

static void test_outage_window(void **state) {
  (void)state;
  NEED_ROOT();
  /* Down from 1 s to 2 s after the client starts; 5 ms each way. */
  char *j = run_probe("--rtt-ms 10 --outage 1:1",
                      "udp-ping --count 300 --interval-us 10000 --window-ms 1000:1990");
  assert_int_equal((int)jnum(j, "window", "received"), 0);
  ASSERT_IN(jnum(j, "window", "sent"), 95, 101);
  /* Outside the window only the probes whose echo was still in flight when
   * the link went down may be lost. */
  const char *l = strstr(j, "\"lost_t_ms\": [");
  assert_non_null(l);
  l += strlen("\"lost_t_ms\": [");
  while (*l && *l != ']') {
    char *end;
    double t = strtod(l, &end);
    if (end == l) break;
    ASSERT_IN(t, 950.0, 2005.0);
    l = end;
    while (*l == ',' || *l == ' ') l++;
  }
  ASSERT_IN(jnum(j, "outside", "received"), jnum(j, "outside", "sent") - 5,
            jnum(j, "outside", "sent"));
  char *s = stats();
  assert_true(jnum(s, "c2s", "dropped_outage") >= 95);
}

static void test_jitter_order(void **state) {
  (void)state;
  NEED_ROOT();
  char *j = run_probe("--delay-ms 10 --jitter-ms 4",
                      "udp-ping --count 500 --interval-us 2000");
  assert_int_equal((int)jnum(j, NULL, "reordered"), 0);
  /* Never below 2 x (10 - 4) ms; how close the minimum comes to that
   * depends on the timing, because keeping order holds a packet behind the
   * previous one's due time. */
  ASSERT_IN(jnum(j, "rtt_ms", "min"), 11.9, 18.0);
  assert_true(jnum(j, "rtt_ms", "max") - jnum(j, "rtt_ms", "min") > 4.0);
  /* 28 ms + scheduling slack: a loaded 2-core CI machine once took 40.07,
   * so the bound only catches a delay applied many times over. */
  ASSERT_IN(jnum(j, "rtt_ms", "max"), 20.0, 100.0);
  j = run_probe("--delay-ms 10 --jitter-ms 4 --reorder",
                "udp-ping --count 500 --interval-us 1000");
  assert_true(jnum(j, NULL, "reordered") > 10);
  assert_int_equal((int)jnum(j, NULL, "lost"), 0);
}

static void test_commands_and_status(void **state) {
  (void)state;
  NEED_ROOT();
  assert_int_equal(sh(NETEM " -- ::: sh -c 'exit 7'"), 7);
  assert_int_equal(sh(NETEM " -- ::: sh -c 'test \"$RGPU_NETEM_SERVER_ADDR\" = 10.77.0.2 "
                      "&& test \"$RGPU_NETEM_CLIENT_ADDR\" = 10.77.0.1 && test "
                      "\"$RGPU_NETEM_SIDE\" = client'"), 0);
  assert_int_equal(sh(NETEM " -- sh -c 'test \"$RGPU_NETEM_SIDE\" = server && "
                      "touch %s/server-ran; sleep 5' ::: sleep 0.2", tmpdir), 0);
  assert_int_equal(sh("test -f %s/server-ran", tmpdir), 0);
  /* Loopback is up inside a side's namespace. */
  assert_int_equal(sh(NETEM " -- ::: sh -c '" PROBE " server --bind 127.0.0.1 --port 9100 & "
                      "sleep 0.2; " PROBE " udp-ping --to 127.0.0.1:9100 --count 5 "
                      "--interval-us 1000 --out %s/lo.json'", tmpdir), 0);
  char path[128];
  snprintf(path, sizeof path, "%s/lo.json", tmpdir);
  char *j = slurp(path);
  assert_non_null(j);
  assert_int_equal((int)jnum(j, NULL, "received"), 5);
  assert_int_equal(sh(NETEM " -- ::: /nonexistent/cmd 2>/dev/null"), 127);
  assert_int_equal(sh(NETEM " --bogus -- ::: true 2>/dev/null"), 2);
  /* A server that never binds makes the wait fail instead of hanging. */
  assert_int_equal(sh(NETEM " --server-ready-wait tcp:9999 --server-ready-timeout 0.3 -- "
                      "sleep 5 ::: true 2>/dev/null"), 125);
}

static int leftovers(const char *marker) {
  DIR *d = opendir("/proc");
  int found = 0;
  struct dirent *e;
  while (d && (e = readdir(d))) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char path[300], buf[512];
    snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
    int fd = open(path, O_RDONLY);
    if (fd < 0) continue;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) continue;
    for (ssize_t i = 0; i < n; i++)
      if (!buf[i]) buf[i] = ' ';
    buf[n] = 0;
    if (strstr(buf, marker)) found++;
  }
  if (d) closedir(d);
  return found;
}

static void test_kill9_leaves_nothing(void **state) {
  (void)state;
  NEED_ROOT();
  pid_t p = fork();
  if (p == 0) {
    execl(RGPU_NETEM_BIN, "rgpu-netem", "-q", "--", "sh", "-c", "sleep 31.4159; true",
          ":::", "sleep", "27.1828", (char *)NULL);
    _exit(127);
  }
  struct timespec ts = {0, 300000000};
  nanosleep(&ts, NULL);
  assert_true(leftovers("31.4159") >= 1);
  kill(p, SIGKILL);
  waitpid(p, NULL, 0);
  int left = 1;
  for (int i = 0; i < 40 && left; i++) {
    ts.tv_nsec = 50000000;
    nanosleep(&ts, NULL);
    left = leftovers("31.4159") + leftovers("27.1828");
  }
  assert_int_equal(left, 0);
  /* A second run right after works. */
  char *j = run_probe("--rtt-ms 2", "udp-ping --count 20 --interval-us 1000");
  assert_int_equal((int)jnum(j, NULL, "received"), 20);
}

static void test_sigint_stops_everything(void **state) {
  (void)state;
  NEED_ROOT();
  pid_t p = fork();
  if (p == 0) {
    /* The server ignores SIGTERM: the emulator must escalate to SIGKILL. */
    execl(RGPU_NETEM_BIN, "rgpu-netem", "-q", "--server-grace-ms", "300", "--", "sh",
          "-c", "trap '' TERM; sleep 31.4160; true", ":::", "sleep", "27.1829",
          (char *)NULL);
    _exit(127);
  }
  struct timespec ts = {0, 300000000};
  nanosleep(&ts, NULL);
  assert_true(leftovers("31.4160") >= 1);
  kill(p, SIGINT);
  int st = 0;
  waitpid(p, &st, 0);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 130);
  assert_int_equal(leftovers("31.4160") + leftovers("27.1829"), 0);
}

static void test_tcp_survives_outage(void **state) {
  (void)state;
  NEED_ROOT();
  /* 10 ms RTT, link down 0.5 s to 1.0 s: the ping-pong stalls through the
   * outage (retransmissions are dropped too) and then completes. */
  int rc = sh(NETEM " --rtt-ms 10 --outage 0.5:0.5 --stats %s/stats.json "
              "--server-ready-wait tcp:9000 -- " PROBE " server --port 9000 ::: " PROBE
              " tcp-ping --to 10.77.0.2:9000 --count 120 --out %s/out.json",
              tmpdir, tmpdir);
  assert_int_equal(rc, 0);
  char path[128];
  snprintf(path, sizeof path, "%s/out.json", tmpdir);
  char *j = slurp(path);
  assert_non_null(j);
  ASSERT_IN(jnum(j, "rtt_ms", "max"), 400.0, 3000.0);
  ASSERT_IN(jnum(j, "rtt_ms", "median"), 9.9, 12.0);
  char *s = stats();
  assert_true(jnum(s, "c2s", "dropped_outage") + jnum(s, "s2c", "dropped_outage") >= 1);
}

static int setup(void **state) {
  (void)state;
  snprintf(tmpdir, sizeof tmpdir, "/tmp/rgpu_netem_test.XXXXXX");
  if (!mkdtemp(tmpdir)) return -1;
  return 0;
}

static int teardown(void **state) {
  (void)state;
  sh("rm -rf %s", tmpdir);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_udp_rtt),
      cmocka_unit_test(test_tcp_rtt),
      cmocka_unit_test(test_asymmetric_delay),
      cmocka_unit_test(test_bernoulli_loss),
      cmocka_unit_test(test_gilbert_elliott_bursts),
      cmocka_unit_test(test_rate_tcp),
      cmocka_unit_test(test_rate_udp),
      cmocka_unit_test(test_outage_window),
      cmocka_unit_test(test_jitter_order),
      cmocka_unit_test(test_commands_and_status),
      cmocka_unit_test(test_kill9_leaves_nothing),
      cmocka_unit_test(test_sigint_stops_everything),
      cmocka_unit_test(test_tcp_survives_outage),
  };
  int rc = cmocka_run_group_tests(tests, setup, teardown);
  /* 77 tells ctest (SKIP_RETURN_CODE) that nothing could be measured here. */
  return rc == 0 && capable == 0 ? 77 : rc;
}
