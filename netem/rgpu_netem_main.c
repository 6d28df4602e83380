/* rgpu-netem: runs a server and a client command in two network namespaces
 * joined by an emulated link (see docs/netem.md).
 *
 * Process layout: the command the user starts stays outside and only relays
 * signals and the exit status; its child is PID 1 of a fresh PID namespace
 * and does the work (topology, forwarding threads, the two commands).  When
 * that PID 1 dies, for whatever reason, the kernel kills every process in the
 * PID namespace, and with them the network namespaces and TUN devices go. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rgpu_clock.h"
#include "rgpu_log.h"
#include "rgpu_netem_config.h"
#include "rgpu_netem_pipe.h"
#include "rgpu_netem_topo.h"

#define EXIT_USAGE 2
#define EXIT_SETUP 125
#define EXIT_NOEXEC 127

extern char **environ;

/* ---- forwarding -------------------------------------------------------- */

typedef struct {
  const char *name;
  rgpu_netem_pipe pipe;
  int in_fd, out_fd, stop_fd;
  pthread_t thread;
  int started;
} fwd_dir;

static void *fwd_main(void *arg) {
  fwd_dir *f = arg;
  /* The default 50 us slack would add that much to every delayed packet. */
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  struct pollfd pfd[2] = {{.fd = f->in_fd, .events = POLLIN},
                          {.fd = f->stop_fd, .events = POLLIN}};
  uint8_t scratch[65536];
  for (;;) {
    uint64_t t = rgpu_clock_ns();
    rgpu_netem_slot *s;
    while ((s = rgpu_netem_pipe_pop(&f->pipe, t))) {
      if (write(f->out_fd, s->data, s->len) != (ssize_t)s->len)
        f->pipe.st.write_errors++;
      rgpu_netem_pipe_put_slot(&f->pipe, s);
    }
    uint64_t due = rgpu_netem_pipe_next_due(&f->pipe);
    struct timespec ts, *tsp = NULL;
    if (due != UINT64_MAX) {
      t = rgpu_clock_ns();
      uint64_t wait = due > t ? due - t : 0;
      ts.tv_sec = (time_t)(wait / 1000000000ull);
      ts.tv_nsec = (long)(wait % 1000000000ull);
      tsp = &ts;
    }
    int n = ppoll(pfd, 2, tsp, NULL);
    if (n < 0 && errno != EINTR) {
      RGPU_ERROR("%s: ppoll: %s", f->name, strerror(errno));
      break;
    }
    if (n <= 0) continue;
    if (pfd[1].revents) break;
    if (pfd[0].revents & (POLLERR | POLLHUP | POLLNVAL)) {
      RGPU_ERROR("%s: TUN device failed", f->name);
      break;
    }
    for (int k = 0; k < 256; k++) {
      rgpu_netem_slot *slot = rgpu_netem_pipe_get_slot(&f->pipe);
      ssize_t r;
      if (slot) {
        r = read(f->in_fd, slot->data, f->pipe.slot_size);
        if (r > 0) {
          slot->len = (uint32_t)r;
          rgpu_netem_pipe_submit(&f->pipe, slot, rgpu_clock_ns());
          continue;
        }
        rgpu_netem_pipe_put_slot(&f->pipe, slot);
      } else {
        r = read(f->in_fd, scratch, sizeof scratch);
        if (r > 0) {
          rgpu_netem_pipe_count_overflow(&f->pipe, (uint32_t)r);
          continue;
        }
      }
      if (r < 0 && errno != EAGAIN && errno != EINTR)
        RGPU_WARN("%s: read: %s", f->name, strerror(errno));
      break;
    }
  }
  return NULL;
}

/* ---- child processes --------------------------------------------------- */

typedef struct {
  pid_t pid;
  int status;
  int done;
} child;

/* Builds the environment of a command.  Only the array is allocated (free
 * it); the strings are environ's or static.  Inherited RGPU_NETEM_* values are
 * dropped so that a command never sees those of an enclosing run. */
static char **make_env(const char *side, uint64_t epoch) {
  size_t n = 0;
  while (environ[n]) n++;
  char **envp = calloc(n + 5, sizeof *envp);
  if (!envp) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "RGPU_NETEM_", 11)) envp[k++] = environ[i];
  envp[k++] = "RGPU_NETEM_SERVER_ADDR=" RGPU_NETEM_SERVER_ADDR;
  envp[k++] = "RGPU_NETEM_CLIENT_ADDR=" RGPU_NETEM_CLIENT_ADDR;
  static char epoch_var[64];
  if (!strcmp(side, "server")) {
    envp[k++] = "RGPU_NETEM_SIDE=server";
  } else {
    envp[k++] = "RGPU_NETEM_SIDE=client";
    snprintf(epoch_var, sizeof epoch_var, "RGPU_NETEM_EPOCH_NS=%" PRIu64, epoch);
    envp[k++] = epoch_var;
  }
  envp[k] = NULL;
  return envp;
}

/* Starts argv inside the namespace ns_fd.  Returns the pid, or -1 with a
 * message (the exec error is reported back through a close-on-exec pipe). */
static pid_t spawn(char **argv, int ns_fd, char **envp, int have_pidns,
                   char *err, size_t errlen) {
  int ep[2];
  if (pipe2(ep, O_CLOEXEC) < 0) {
    snprintf(err, errlen, "pipe: %s", strerror(errno));
    return -1;
  }
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(err, errlen, "fork: %s", strerror(errno));
    close(ep[0]);
    close(ep[1]);
    return -1;
  }
  if (pid == 0) {
    int e = 0;
    close(ep[0]);
    if (!have_pidns) prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (setns(ns_fd, CLONE_NEWNET) < 0) {
      e = errno;
    } else {
      struct sigaction sa = {.sa_handler = SIG_DFL};
      for (int sig = 1; sig < NSIG; sig++) sigaction(sig, &sa, NULL);
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, NULL);
      execvpe(argv[0], argv, envp);
      e = errno;
    }
    ssize_t w = write(ep[1], &e, sizeof e);
    (void)w;
    _exit(EXIT_NOEXEC);
  }
  close(ep[1]);
  int e = 0;
  ssize_t r;
  do r = read(ep[0], &e, sizeof e);
  while (r < 0 && errno == EINTR);
  close(ep[0]);
  if (r == (ssize_t)sizeof e) {
    snprintf(err, errlen, "cannot run '%s': %s", argv[0], strerror(e));
    waitpid(pid, NULL, 0);
    return -1;
  }
  return pid;
}

static int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return EXIT_SETUP;
}

/* Reaps every exited child (PID 1 also inherits orphans). */
static void reap(child *srv, child *cli) {
  int st;
  pid_t p;
  while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
    if (srv && p == srv->pid) {
      srv->status = st;
      srv->done = 1;
    } else if (cli && p == cli->pid) {
      cli->status = st;
      cli->done = 1;
    }
  }
}

/* Waits up to timeout for c to exit, serving signals meanwhile; returns the
 * first terminating signal received (0 if none). */
static int wait_child(const sigset_t *set, child *srv, child *cli, child *c,
                      uint64_t timeout_ns) {
  uint64_t end = rgpu_clock_ns() + timeout_ns;
  int got = 0;
  while (!c->done) {
    uint64_t t = rgpu_clock_ns();
    if (t >= end) break;
    uint64_t w = end - t;
    if (w > 50000000ull) w = 50000000ull;
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)w};
    int sig = sigtimedwait(set, NULL, &ts);
    if (sig > 0 && sig != SIGCHLD && !got) got = sig;
    reap(srv, cli);
  }
  return got;
}

/* ---- stats ------------------------------------------------------------- */

static void json_dir(FILE *f, const char *name, const fwd_dir *d) {
  const rgpu_netem_pipe_stats *s = &d->pipe.st;
  char desc[320];
  rgpu_netem_describe_dir(&d->pipe.cfg, desc, sizeof desc);
  fprintf(f,
          "  \"%s\": {\"config\": \"%s\", \"rx_pkts\": %" PRIu64
          ", \"rx_bytes\": %" PRIu64 ", \"tx_pkts\": %" PRIu64
          ", \"tx_bytes\": %" PRIu64 ", \"lost_random\": %" PRIu64
          ", \"lost_burst\": %" PRIu64 ", \"dropped_queue\": %" PRIu64
          ", \"dropped_outage\": %" PRIu64 ", \"dropped_overflow\": %" PRIu64
          ", \"dropped_oversize\": %" PRIu64 ", \"write_errors\": %" PRIu64
          ", \"max_queue_pkts\": %" PRIu64 ", \"held_at_exit\": %zu}",
          name, desc, s->rx_pkts, s->rx_bytes, s->tx_pkts, s->tx_bytes,
          s->lost_random, s->lost_burst, s->dropped_queue, s->dropped_outage,
          s->dropped_overflow, s->dropped_oversize, s->write_errors,
          s->max_queue_pkts, d->pipe.heap_len);
}

static void write_stats(const rgpu_netem_options *o, const fwd_dir dirs[2],
                        double wall_s, const child *srv, const child *cli) {
  FILE *f = fopen(o->stats_path, "w");
  if (!f) {
    RGPU_WARN("cannot write --stats %s: %s", o->stats_path, strerror(errno));
    return;
  }
  fprintf(f, "{\n  \"profile\": %s%s%s,\n  \"seed\": %" PRIu64
             ",\n  \"wall_s\": %.6f,\n  \"outages\": %zu,\n",
          o->profile ? "\"" : "", o->profile ? o->profile : "null",
          o->profile ? "\"" : "", o->seed, wall_s, o->outages.count);
  fprintf(f, "  \"client_exit\": %d,\n", cli->done ? exit_code(cli->status) : -1);
  if (srv->pid > 0)
    fprintf(f, "  \"server_exit\": %d,\n", srv->done ? exit_code(srv->status) : -1);
  else
    fprintf(f, "  \"server_exit\": null,\n");
  json_dir(f, "c2s", &dirs[0]);
  fputs(",\n", f);
  json_dir(f, "s2c", &dirs[1]);
  fputs("\n}\n", f);
  if (fclose(f) != 0)
    RGPU_WARN("writing --stats %s: %s", o->stats_path, strerror(errno));
}

/* ---- the emulator proper (PID 1 of its PID namespace, if one) ---------- */

static int run_emulator(rgpu_netem_options *o, int have_pidns) {
  char err[512];
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGQUIT);
  /* Blocked before any thread exists, so every signal is taken by
   * sigtimedwait in this thread. */
  sigprocmask(SIG_BLOCK, &set, NULL);
  signal(SIGPIPE, SIG_IGN);

  rgpu_netem_side cs, ss;
  if (rgpu_netem_side_create(&cs, "rgpu-c", RGPU_NETEM_CLIENT_ADDR,
                             RGPU_NETEM_SERVER_ADDR, o->mtu, err, sizeof err)) {
    RGPU_ERROR("client namespace: %s", err);
    return EXIT_SETUP;
  }
  if (rgpu_netem_side_create(&ss, "rgpu-s", RGPU_NETEM_SERVER_ADDR,
                             RGPU_NETEM_CLIENT_ADDR, o->mtu, err, sizeof err)) {
    RGPU_ERROR("server namespace: %s", err);
    rgpu_netem_side_close(&cs);
    return EXIT_SETUP;
  }

  int stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd < 0) {
    RGPU_ERROR("eventfd: %s", strerror(errno));
    return EXIT_SETUP;
  }
  fwd_dir dirs[2] = {{.name = "c2s", .in_fd = cs.tun_fd, .out_fd = ss.tun_fd},
                     {.name = "s2c", .in_fd = ss.tun_fd, .out_fd = cs.tun_fd}};
  for (int d = 0; d < 2; d++) {
    dirs[d].stop_fd = stop_fd;
    size_t max_slots = 65536 + (size_t)o->dir[d].queue_pkts;
    if (rgpu_netem_pipe_init(&dirs[d].pipe, &o->dir[d], &o->outages,
                             o->seed * 2 + (uint64_t)d, o->mtu, max_slots, err,
                             sizeof err)) {
      RGPU_ERROR("%s: %s", dirs[d].name, err);
      return EXIT_SETUP;
    }
  }
  if (o->verbose >= 1) {
    char a[320], b[320];
    rgpu_netem_describe_dir(&o->dir[0], a, sizeof a);
    rgpu_netem_describe_dir(&o->dir[1], b, sizeof b);
    fprintf(stderr, "rgpu-netem: profile %s; c2s: %s; s2c: %s; %zu outage(s)\n",
            o->profile ? o->profile : "(none)", a, b, o->outages.count);
  }
  for (int d = 0; d < 2; d++) {
    int e = pthread_create(&dirs[d].thread, NULL, fwd_main, &dirs[d]);
    if (e) {
      RGPU_ERROR("pthread_create: %s", strerror(e));
      return EXIT_SETUP;
    }
    dirs[d].started = 1;
  }

  uint64_t t_start = rgpu_clock_ns();
  child srv = {.pid = -1}, cli = {.pid = -1};
  int rc = EXIT_SETUP, interrupted = 0;
  char **senv = make_env("server", 0);
  if (!senv) {
    RGPU_ERROR("out of memory");
    goto out;
  }

  if (o->server_argv) {
    srv.pid = spawn(o->server_argv, ss.ns_fd, senv, have_pidns, err, sizeof err);
    if (srv.pid < 0) {
      RGPU_ERROR("server: %s", err);
      rc = EXIT_NOEXEC;
      goto out;
    }
  }

  /* Wait until the server is ready, serving signals meanwhile. */
  if (o->ready != RGPU_NETEM_READY_NONE) {
    uint64_t t0 = rgpu_clock_ns();
    for (;;) {
      uint64_t t = rgpu_clock_ns();
      if (o->ready == RGPU_NETEM_READY_DELAY) {
        if (t - t0 >= o->ready_delay_ns) break;
      } else {
        int b = rgpu_netem_port_bound(&ss, o->ready == RGPU_NETEM_READY_TCP,
                                      o->ready_port);
        if (b < 0) {
          RGPU_ERROR("cannot watch the server's ports (no /proc/net in its "
                     "namespace); use --server-ready-wait MS instead");
          goto out;
        }
        if (b > 0) break;
        if (t - t0 >= o->ready_timeout_ns) {
          RGPU_ERROR("the server did not bind %s port %u within %.1f s",
                     o->ready == RGPU_NETEM_READY_TCP ? "TCP" : "UDP",
                     o->ready_port, o->ready_timeout_ns / 1e9);
          goto out;
        }
      }
      struct timespec ts = {.tv_sec = 0, .tv_nsec = 5000000};
      int sig = sigtimedwait(&set, NULL, &ts);
      reap(&srv, NULL);
      if (sig > 0 && sig != SIGCHLD) {
        interrupted = sig;
        goto out;
      }
      if (srv.done) {
        RGPU_ERROR("the server exited (status %d) before it was ready",
                   exit_code(srv.status));
        goto out;
      }
    }
  }

  uint64_t epoch = rgpu_clock_ns();
  atomic_store_explicit(&o->outages.epoch_ns, epoch, memory_order_release);
  char **cenv = make_env("client", epoch);
  if (!cenv) {
    RGPU_ERROR("out of memory");
    goto out;
  }
  cli.pid = spawn(o->client_argv, cs.ns_fd, cenv, have_pidns, err, sizeof err);
  free(cenv);
  if (cli.pid < 0) {
    RGPU_ERROR("client: %s", err);
    rc = EXIT_NOEXEC;
    goto out;
  }

  int readdress_pending = o->readdress_ns != 0;
  while (!cli.done) {
    int sig;
    if (readdress_pending) {
      uint64_t at = epoch + o->readdress_ns, t = rgpu_clock_ns();
      if (t >= at) {
        readdress_pending = 0;
        if (rgpu_netem_readdress(&cs, &ss, RGPU_NETEM_CLIENT_ADDR, RGPU_NETEM_CLIENT_ADDR2,
                                 RGPU_NETEM_SERVER_ADDR, err, sizeof err))
          RGPU_ERROR("--client-readdress: %s", err);
        else if (o->verbose >= 1)
          fprintf(stderr, "rgpu-netem: client readdressed %s -> %s at %.3f s\n",
                  RGPU_NETEM_CLIENT_ADDR, RGPU_NETEM_CLIENT_ADDR2, (t - epoch) / 1e9);
        continue;
      }
      struct timespec ts = {.tv_sec = (time_t)((at - t) / 1000000000ull),
                            .tv_nsec = (long)((at - t) % 1000000000ull)};
      sig = sigtimedwait(&set, NULL, &ts);
      if (sig < 0 && errno == EAGAIN) continue;
    } else {
      sig = sigwaitinfo(&set, NULL);
    }
    if (sig == SIGCHLD || sig < 0) {
      int was_done = srv.done;
      reap(&srv, &cli);
      if (srv.done && !was_done && !cli.done && o->verbose >= 1)
        RGPU_WARN("the server command exited early (status %d)",
                  exit_code(srv.status));
      continue;
    }
    interrupted = sig;
    break;
  }
  if (cli.done) rc = exit_code(cli.status);

out:
  if (interrupted) {
    rc = 128 + interrupted;
    if (cli.pid > 0 && !cli.done) {
      kill(cli.pid, interrupted == SIGQUIT ? SIGQUIT : SIGTERM);
      wait_child(&set, &srv, &cli, &cli, o->grace_ns);
      if (!cli.done) kill(cli.pid, SIGKILL);
    }
  }
  if (srv.pid > 0 && !srv.done) {
    kill(srv.pid, SIGTERM);
    wait_child(&set, &srv, &cli, &srv, o->grace_ns);
    if (!srv.done) {
      kill(srv.pid, SIGKILL);
      wait_child(&set, &srv, &cli, &srv, 1000000000ull);
    }
  }
  if (cli.pid > 0 && !cli.done) {
    kill(cli.pid, SIGKILL);
    wait_child(&set, &srv, &cli, &cli, 1000000000ull);
  }
  uint64_t one = 1;
  ssize_t w = write(stop_fd, &one, sizeof one);
  (void)w;
  for (int d = 0; d < 2; d++)
    if (dirs[d].started) pthread_join(dirs[d].thread, NULL);
  if (o->stats_path)
    write_stats(o, dirs, (rgpu_clock_ns() - t_start) / 1e9, &srv, &cli);
  for (int d = 0; d < 2; d++) rgpu_netem_pipe_free(&dirs[d].pipe);
  free(senv);
  rgpu_netem_side_close(&cs);
  rgpu_netem_side_close(&ss);
  close(stop_fd);
  return rc;
}

/* ---- the outer process: PID namespace, signal relay -------------------- */

/* Gives the PID namespace its own /proc (in a private mount namespace, so the
 * host's mounts are untouched).  Without it /proc shows the outer PID
 * namespace: `ps` inside would list host processes, and tools that find their
 * own threads through /proc/self (LeakSanitizer) fail.  Best effort: where
 * mounting is not allowed the old /proc stays, which works for everything the
 * emulator itself does. */
static void private_proc(void) {
  if (unshare(CLONE_NEWNS) < 0) {
    RGPU_DEBUG("unshare(CLONE_NEWNS): %s; keeping the outer /proc", strerror(errno));
    return;
  }
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
      mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
    RGPU_DEBUG("mounting a private /proc: %s; keeping the outer /proc",
               strerror(errno));
}

int main(int argc, char **argv) {
  rgpu_log_set_component("netem");
  rgpu_netem_options o;
  char err[512];
  int pr = rgpu_netem_parse_args(argc, argv, &o, stdout, err, sizeof err);
  if (pr > 0) return 0;
  if (pr < 0) {
    fprintf(stderr, "rgpu-netem: %s\n", err);
    return EXIT_USAGE;
  }
  if (o.verbose >= 2 && !getenv("RGPU_LOG")) rgpu_log_set_level(RGPU_LOG_DEBUG);

  if (unshare(CLONE_NEWPID) < 0) {
    if (errno == EPERM) {
      /* The network namespaces need the same privilege, so stop here with
       * the error that tells what is missing. */
      fprintf(stderr, "rgpu-netem: cannot create namespaces: %s (rgpu-netem "
                      "needs root, or CAP_SYS_ADMIN + CAP_NET_ADMIN)\n",
              strerror(errno));
      return EXIT_SETUP;
    }
    /* Without a PID namespace, commands still die with the emulator
     * (PR_SET_PDEATHSIG), but their own children might not. */
    RGPU_WARN("unshare(CLONE_NEWPID): %s; processes the commands start may "
              "outlive a killed emulator", strerror(errno));
    return run_emulator(&o, 0);
  }

  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGQUIT);
  sigprocmask(SIG_BLOCK, &set, NULL);
  int alive[2];
  if (pipe2(alive, O_CLOEXEC) < 0) {
    fprintf(stderr, "rgpu-netem: pipe: %s\n", strerror(errno));
    return EXIT_SETUP;
  }
  fflush(NULL);
  pid_t inner = fork();
  if (inner < 0) {
    fprintf(stderr, "rgpu-netem: fork: %s\n", strerror(errno));
    return EXIT_SETUP;
  }
  if (inner == 0) {
    close(alive[1]);
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    /* The outer process may have died before PDEATHSIG was armed; its end
     * of the pipe being closed tells. */
    struct pollfd p = {.fd = alive[0], .events = POLLIN};
    if (poll(&p, 1, 0) > 0) _exit(EXIT_SETUP);
    private_proc();
    exit(run_emulator(&o, 1));
  }
  close(alive[0]);
  for (;;) {
    int sig = sigwaitinfo(&set, NULL);
    if (sig == SIGCHLD) {
      int st;
      pid_t p = waitpid(inner, &st, WNOHANG);
      /* _exit: this process's later children would land in the dead PID
       * namespace, so atexit work that forks or clones (LeakSanitizer's
       * checker) must not run here. */
      if (p == inner) _exit(exit_code(st));
    } else if (sig > 0) {
      kill(inner, sig);
    }
  }
}
