#define _GNU_SOURCE
/* The fork server on its own: spawning with an argument, descriptors and a
 * connection; exit reports; KILL only for its own children; a dead fork
 * server is reported, never waited on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rgpu_forkserver.h"

/* The child: writes back "<arg>|<fd0 open?><fd1 open?>|<pid>", writes "x"
 * into fds[1] when given, then waits for one byte (or EOF) on the conn and
 * exits with the argument's first byte - '0'. */
static int echo_child(const void *arg, size_t len, rgpu_conn *c, const int *fds, int nfds) {
  char out[256];
  int n = snprintf(out, sizeof out, "%.*s|%c%c|%d", (int)len, (const char *)arg,
                   nfds > 0 && fds[0] >= 0 ? 'y' : 'n', nfds > 1 && fds[1] >= 0 ? 'y' : 'n',
                   (int)getpid());
  if (nfds > 1 && fds[1] >= 0) (void)!write(fds[1], "x", 1);
  struct iovec iov = {out, (size_t)n};
  if (rgpu_conn_writev_all(c, &iov, 1)) return 100;
  char b;
  (void)rgpu_conn_read_some(c, &b, 1);
  rgpu_conn_close(c);
  return len ? ((const char *)arg)[0] - '0' : 0;
}

static void make_conn(int *peer, rgpu_conn **c) {
  int sp[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
  assert_int_equal(rgpu_conn_from_fd(sp[1], "unix", c), 0);
  *peer = sp[0];
}

/* Waits up to 5 s for the next exit report. */
static int wait_exit(rgpu_forkserver *fs, pid_t *pid, int *st) {
  for (int i = 0; i < 500; i++) {
    int r = rgpu_forkserver_next_exit(fs, pid, st);
    if (r != 0) return r;
    struct pollfd pf = {rgpu_forkserver_poll_fd(fs), POLLIN, 0};
    poll(&pf, 1, 10);
  }
  return 0;
}

static void read_line(int fd, char *buf, size_t cap) {
  struct pollfd pf = {fd, POLLIN, 0};
  assert_int_equal(poll(&pf, 1, 5000), 1);
  ssize_t r = read(fd, buf, cap - 1);
  assert_true(r > 0);
  buf[r] = 0;
}

/* A fork server whose children run echo_child. */
static rgpu_forkserver *start_echo_forkserver(void) {
  rgpu_forkserver *fs;
  char err[256];
  assert_int_equal(rgpu_forkserver_start(echo_child, &fs, err, sizeof err), 0);
  return fs;
}

/* Spawns a child with argument "0" on a fresh connection and waits for its
 * line, so that it is running.  Returns its pid; *peer is our end of its
 * connection and *c the end the spawn passed on (still ours to close). */
static pid_t spawn_running_child(rgpu_forkserver *fs, int *peer, rgpu_conn **c) {
  char err[256];
  make_conn(peer, c);
  pid_t pid;
  assert_int_equal(rgpu_forkserver_spawn(fs, "0", 1, *c, NULL, 0, &pid, err, sizeof err), 0);
  char line[256];
  read_line(*peer, line, sizeof line);
  return pid;
}

static void test_spawn_fds_and_exit(void **state) {
  (void)state;
  rgpu_forkserver *fs = start_echo_forkserver();
  char err[256];
  assert_true(rgpu_forkserver_alive(fs));
  assert_true(rgpu_forkserver_pid(fs) > 0);

  int peer;
  rgpu_conn *c;
  make_conn(&peer, &c);
  int pp[2];
  assert_int_equal(pipe2(pp, O_CLOEXEC), 0);
  int fds[2] = {-1, pp[1]};
  pid_t pid;
  assert_int_equal(rgpu_forkserver_spawn(fs, "7hello", 6, c, fds, 2, &pid, err, sizeof err), 0);
  assert_true(pid > 0 && pid != rgpu_forkserver_pid(fs));
  /* Ours to close: the child has its own copies. */
  rgpu_conn_close(c);
  close(pp[1]);
  char line[256], want[64];
  read_line(peer, line, sizeof line);
  snprintf(want, sizeof want, "7hello|ny|%d", (int)pid);
  assert_string_equal(line, want);
  char x = 0;
  assert_int_equal(read(pp[0], &x, 1), 1);
  assert_int_equal(x, 'x');
  /* The child holds the only other copy of the pipe: EOF once it exits. */
  (void)!write(peer, "q", 1);
  pid_t ep;
  int st;
  assert_int_equal(wait_exit(fs, &ep, &st), 1);
  assert_int_equal(ep, pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 7);
  assert_int_equal(read(pp[0], &x, 1), 0);
  close(pp[0]);
  close(peer);

  /* Several at once; reports arrive as the children end. */
  int peers[3];
  pid_t pids[3];
  for (int i = 0; i < 3; i++) {
    make_conn(&peers[i], &c);
    char a[2] = {(char)('1' + i), 0};
    assert_int_equal(rgpu_forkserver_spawn(fs, a, 1, c, NULL, 0, &pids[i], err, sizeof err), 0);
    rgpu_conn_close(c);
  }
  for (int i = 2; i >= 0; i--) {
    read_line(peers[i], line, sizeof line);
    close(peers[i]); /* EOF: the child exits */
    assert_int_equal(wait_exit(fs, &ep, &st), 1);
    assert_int_equal(ep, pids[i]);
    assert_int_equal(WEXITSTATUS(st), i + 1);
  }
  pid_t none;
  assert_int_equal(rgpu_forkserver_next_exit(fs, &none, &st), 0);
  rgpu_forkserver_stop(fs);
}

static void test_kill_only_own_children(void **state) {
  (void)state;
  rgpu_forkserver *fs = start_echo_forkserver();
  /* A process that is not the fork server's child must not be signalled. */
  pid_t bystander = fork();
  if (bystander == 0) {
    pause();
    _exit(0);
  }
  int peer;
  rgpu_conn *c;
  pid_t pid = spawn_running_child(fs, &peer, &c);
  rgpu_conn_close(c);
  assert_int_equal(rgpu_forkserver_kill(fs, bystander, SIGKILL), 0);
  assert_int_equal(rgpu_forkserver_kill(fs, pid, SIGKILL), 0);
  pid_t ep;
  int st;
  assert_int_equal(wait_exit(fs, &ep, &st), 1);
  assert_int_equal(ep, pid);
  assert_true(WIFSIGNALED(st));
  assert_int_equal(WTERMSIG(st), SIGKILL);
  /* Reaped now: a second KILL of that pid is dropped there. */
  assert_int_equal(rgpu_forkserver_kill(fs, pid, SIGKILL), 0);
  struct timespec nap = {0, 50 * 1000 * 1000};
  nanosleep(&nap, NULL);
  assert_int_equal(waitpid(bystander, &st, WNOHANG), 0); /* still alive */
  kill(bystander, SIGKILL);
  waitpid(bystander, &st, 0);
  close(peer);
  rgpu_forkserver_stop(fs);
}

static void test_dead_forkserver(void **state) {
  (void)state;
  rgpu_forkserver *fs = start_echo_forkserver();
  /* A child that outlives the fork server. */
  int peer;
  rgpu_conn *c;
  pid_t pid = spawn_running_child(fs, &peer, &c);
  kill(rgpu_forkserver_pid(fs), SIGKILL);
  pid_t ep;
  int st;
  assert_int_equal(wait_exit(fs, &ep, &st), -1);
  assert_false(rgpu_forkserver_alive(fs));
  assert_string_equal(rgpu_forkserver_death(fs), "killed by signal 9");
  assert_int_equal(rgpu_forkserver_poll_fd(fs), -1);
  /* Nothing blocks: spawn and kill answer at once. */
  struct timespec t0, t1;
  char err[256];
  clock_gettime(CLOCK_MONOTONIC, &t0);
  assert_int_equal(rgpu_forkserver_spawn(fs, "0", 1, c, NULL, 0, &pid, err, sizeof err),
                   RGPU_FORKSERVER_EDEAD);
  assert_non_null(strstr(err, "killed by signal 9"));
  assert_int_equal(rgpu_forkserver_kill(fs, pid, SIGKILL), RGPU_FORKSERVER_EDEAD);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  assert_true(t1.tv_sec - t0.tv_sec < 2);
  rgpu_conn_close(c);
  /* The orphaned child still serves its connection. */
  (void)!write(peer, "q", 1);
  close(peer);
  rgpu_forkserver_stop(fs);
}

static void test_stop_leaves_children(void **state) {
  (void)state;
  rgpu_forkserver *fs = start_echo_forkserver();
  int peer;
  rgpu_conn *c;
  pid_t pid = spawn_running_child(fs, &peer, &c);
  rgpu_conn_close(c);
  pid_t fs_pid = rgpu_forkserver_pid(fs);
  rgpu_forkserver_stop(fs); /* reaps the fork server itself */
  assert_int_equal(kill(fs_pid, 0), -1);
  assert_int_equal(kill(pid, 0), 0); /* the worker lives on */
  close(peer);                       /* and ends with its session */
  for (int i = 0; i < 200 && kill(pid, 0) == 0; i++) {
    struct timespec nap = {0, 10 * 1000 * 1000};
    nanosleep(&nap, NULL);
  }
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_spawn_fds_and_exit),
      cmocka_unit_test(test_kill_only_own_children),
      cmocka_unit_test(test_dead_forkserver),
      cmocka_unit_test(test_stop_leaves_children),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
