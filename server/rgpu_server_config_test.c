/* rgpu-server --config FILE (rgpu_server_config.c): the file's settings
 * come first, the command line after them and wins, --listen from the
 * command line replaces the file's, and a bad line names file and line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "rgpu_server_config.h"

static const struct option opts[] = {{"listen", required_argument, 0, 1},
                                     {"max-sessions", required_argument, 0, 2},
                                     {"foreground", no_argument, 0, 3},
                                     {"config", required_argument, 0, 4},
                                     {0, 0, 0, 0}};
static const char *const acc[] = {"listen", NULL};

/* The vector the call made: its own strings (not those of the command line
 * it was given) and itself; the server keeps it for its life. */
static void free_argv(char **av, char **given, int ngiven) {
  if (av == given) return;
  for (int i = 1; av[i]; i++) {
    int from_cli = 0;
    for (int k = 0; k < ngiven; k++) from_cli |= av[i] == given[k];
    if (!from_cli) free(av[i]);
  }
  free(av);
}

static char *write_file(const char *text) {
  static char path[64];
  snprintf(path, sizeof path, "/tmp/rgpu-conf-XXXXXX");
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  return path;
}

static void test_order_and_override(void **state) {
  (void)state;
  char *p = write_file("# a comment\n  listen = tcp://1.2.3.4:7000  # trailing\n"
                       "max-sessions 8\nforeground\n\nlisten=quic://0.0.0.0:7001\n");
  char *argv[] = {"rgpu-server", "--config", p, "--max-sessions", "2", NULL};
  int ac;
  char **av;
  char err[256];
  assert_int_equal(rgpu_server_config_argv(5, argv, opts, acc, &ac, &av, err, sizeof err), 0);
  const char *want[] = {"rgpu-server", "--listen", "tcp://1.2.3.4:7000", "--max-sessions", "8",
                        "--foreground", "--listen", "quic://0.0.0.0:7001", "--max-sessions", "2"};
  assert_int_equal(ac, 10);
  for (int i = 0; i < ac; i++) assert_string_equal(av[i], want[i]);
  assert_null(av[ac]);
  free_argv(av, argv, 5);
  /* --listen on the command line replaces the file's. */
  char *argv2[] = {"rgpu-server", "--listen=unix:///tmp/s", "--config=", NULL};
  char cfg[128];
  snprintf(cfg, sizeof cfg, "--config=%s", p);
  argv2[2] = cfg;
  assert_int_equal(rgpu_server_config_argv(3, argv2, opts, acc, &ac, &av, err, sizeof err), 0);
  assert_int_equal(ac, 5);
  assert_string_equal(av[1], "--max-sessions");
  assert_string_equal(av[4], "--listen=unix:///tmp/s");
  free_argv(av, argv2, 3);
  unlink(p);
  /* Without --config: argv itself. */
  char *argv3[] = {"rgpu-server", "--foreground", NULL};
  assert_int_equal(rgpu_server_config_argv(2, argv3, opts, acc, &ac, &av, err, sizeof err), 0);
  assert_ptr_equal(av, argv3);
}

static void test_bad_files(void **state) {
  (void)state;
  static const struct {
    const char *text, *says;
  } bad[] = {{"lisen = x\n", ":1: unknown setting 'lisen'"},
             {"\nmax-sessions =\n", ":2: 'max-sessions' needs a value"},
             {"foreground = yes\n", ":1: 'foreground' takes no value"},
             {"config = other\n", "unknown setting 'config'"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *p = write_file(bad[i].text);
    char *argv[] = {"rgpu-server", "--config", p, NULL};
    int ac;
    char **av;
    char err[256] = "";
    assert_int_equal(rgpu_server_config_argv(3, argv, opts, acc, &ac, &av, err, sizeof err), -1);
    if (!strstr(err, bad[i].says)) fail_msg("'%s' does not say '%s'", err, bad[i].says);
    unlink(p);
  }
  char *argv[] = {"rgpu-server", "--config", "/nonexistent/rgpu.conf", NULL};
  int ac;
  char **av;
  char err[256] = "";
  assert_int_equal(rgpu_server_config_argv(3, argv, opts, acc, &ac, &av, err, sizeof err), -1);
  assert_non_null(strstr(err, "/nonexistent/rgpu.conf"));
}

/* READY=1 reaches the socket systemd names; no socket, nothing sent. */
static void test_notify(void **state) {
  (void)state;
  unsetenv("NOTIFY_SOCKET");
  assert_int_equal(rgpu_server_notify("READY=1"), 0);
  char path[64];
  snprintf(path, sizeof path, "/tmp/rgpu-notify-%d", (int)getpid());
  int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
  unlink(path);
  assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  setenv("NOTIFY_SOCKET", path, 1);
  assert_int_equal(rgpu_server_notify("READY=1"), 1);
  char buf[32] = "";
  assert_int_equal(recv(fd, buf, sizeof buf - 1, 0), 7);
  assert_string_equal(buf, "READY=1");
  close(fd);
  unlink(path);
  unsetenv("NOTIFY_SOCKET");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_order_and_override),
      cmocka_unit_test(test_bad_files),
      cmocka_unit_test(test_notify),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
