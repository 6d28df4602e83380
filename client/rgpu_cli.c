/* rgpu: run an unmodified CUDA program against a remote GPU, or show what a
 * server offers.
 *
 *   rgpu run [--server URI] [--sync-every-call] [--stats PATH] -- PROGRAM ARGS...
 *   rgpu info [--server URI]
 *
 * Without --server and RGPU_SERVER both start a private rgpu-server on
 * softgpu (unix socket in a private temp dir), so the quick start needs no
 * GPU and no setup. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rgpu_calls.h"
#include "rgpu_client.h"
#include "rgpu_clock.h"
#include "rgpu_frame.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"

#ifndef RGPU_VERSION
#define RGPU_VERSION "0.1.0"
#endif

#define EXIT_USAGE 2

static void usage(FILE *f) {
  fprintf(f,
          "usage: rgpu run [--server URI] [--sync-every-call] [--stats PATH] [--] PROGRAM [ARGS...]\n"
          "       rgpu info [--server URI]\n"
          "       rgpu --help | --version\n"
          "\n"
          "  run    runs PROGRAM (built with nvcc -cudart shared) with rgpu's libcudart.so.13,\n"
          "         on the GPU of the server at URI (tcp://HOST:PORT, tls://, quic://, unix:///PATH).\n"
          "         URI,URI,... names several servers: their GPUs form one device list, in order.\n"
          "         With no --server and no RGPU_SERVER, a private local server on softgpu (the\n"
          "         CPU implementation) is started for the run; when PROGRAM fails, that\n"
          "         server's log is kept in $TMPDIR (or /tmp) and its last lines are shown.\n"
          "         --sync-every-call  wait for the server after every request (baseline mode)\n"
          "         --stats PATH       write call/round-trip/byte counts as JSON at exit\n"
          "  info   shows the server's version, sessions and devices (each server's of a list).\n"
          "\n"
          "environment: RGPU_SERVER, RGPU_TOKEN / RGPU_TOKEN_FILE, RGPU_CA, RGPU_CERT, RGPU_KEY,\n"
          "             RGPU_LIBDIR (where libcudart.so.13 is), RGPU_LOG=error|warn|info|debug\n");
}

static int die_usage(const char *fmt, const char *arg) {
  fprintf(stderr, "rgpu: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, " (see rgpu --help)\n");
  return EXIT_USAGE;
}

/* Directory of this executable. */
static int exe_dir(char *out, size_t cap) {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return -1;
  buf[n] = '\0';
  snprintf(out, cap, "%s", dirname(buf));
  return 0;
}

/* ---- private server ----------------------------------------------------- */

typedef struct {
  pid_t pid;
  char dir[200];
  char sock[256];
  char log[256];
  char uri[300];
} private_server;

static void print_file(const char *path, FILE *to) {
  FILE *f = fopen(path, "r");
  if (!f) return;
  char line[1024];
  while (fgets(line, sizeof line, f)) fputs(line, to);
  fclose(f);
}

/* The server announces "rgpu-server: listening on URI" once it accepts
 * connections; reading that line (instead of probing with a connection)
 * leaves no empty session behind in the server's logs and counts. */
static int log_says_listening(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char line[1024];
  int ok = 0;
  while (!ok && fgets(line, sizeof line, f)) ok = strstr(line, "listening on") != NULL;
  fclose(f);
  return ok;
}

/* The last n lines of path, to f. */
static void print_tail(const char *path, FILE *to, int n) {
  FILE *f = fopen(path, "r");
  if (!f) return;
  enum { TAIL_MAX = 64 };
  char lines[TAIL_MAX][512];
  if (n > TAIL_MAX) n = TAIL_MAX;
  long total = 0;
  while (fgets(lines[total % n], sizeof lines[0], f)) {
    /* A line longer than the buffer continues in the next slot: rare in a
     * log, and only cuts how much context is shown. */
    total++;
  }
  fclose(f);
  for (long i = total > n ? total - n : 0; i < total; i++) {
    const char *l = lines[i % n];
    fputs(l, to);
    if (!*l || l[strlen(l) - 1] != '\n') fputc('\n', to);
  }
}

/* Moves the private server's log (it lives in the private directory that
 * server_stop removes) to a file of its own in TMPDIR.  Returns 0 with its
 * name in out. */
static int keep_server_log(private_server *s, char *out, size_t cap) {
  const char *tmp = getenv("TMPDIR");
  snprintf(out, cap, "%s/rgpu-server-XXXXXX.log", tmp && *tmp ? tmp : "/tmp");
  int fd = mkstemps(out, 4);
  if (fd < 0) return -1;
  close(fd);
  /* rename replaces the placeholder mkstemps made, atomically. */
  if (rename(s->log, out)) {
    unlink(out);
    return -1;
  }
  s->log[0] = '\0';
  return 0;
}

static void server_stop(private_server *s) {
  if (s->pid > 0) {
    kill(s->pid, SIGTERM);
    int st;
    int gone = 0;
    for (int i = 0; i < 300; i++) { /* 3 s */
      pid_t r = waitpid(s->pid, &st, WNOHANG);
      if (r == s->pid || (r < 0 && errno == ECHILD)) {
        gone = 1;
        break;
      }
      usleep(10000);
    }
    if (!gone) {
      kill(s->pid, SIGKILL);
      waitpid(s->pid, &st, 0);
    }
    s->pid = 0;
  }
  if (s->sock[0]) unlink(s->sock);
  if (s->log[0]) unlink(s->log);
  if (s->dir[0]) rmdir(s->dir);
}

static int server_start(private_server *s) {
  memset(s, 0, sizeof *s);
  char bindir[PATH_MAX];
  if (exe_dir(bindir, sizeof bindir)) {
    fprintf(stderr, "rgpu: cannot find my own executable (/proc/self/exe)\n");
    return -1;
  }
  char server_bin[PATH_MAX + 16];
  const char *ov = getenv("RGPU_SERVER_BIN");
  if (ov && *ov)
    snprintf(server_bin, sizeof server_bin, "%s", ov);
  else
    snprintf(server_bin, sizeof server_bin, "%s/rgpu-server", bindir);
  if (access(server_bin, X_OK)) {
    fprintf(stderr,
            "rgpu: no server given and cannot start a local one: %s: %s (use --server URI or "
            "set RGPU_SERVER)\n",
            server_bin, strerror(errno));
    return -1;
  }
  const char *tmp = getenv("TMPDIR");
  snprintf(s->dir, sizeof s->dir, "%s/rgpu-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(s->dir)) {
    fprintf(stderr, "rgpu: cannot create a private directory in %s: %s\n",
            tmp && *tmp ? tmp : "/tmp", strerror(errno));
    s->dir[0] = '\0';
    return -1;
  }
  snprintf(s->sock, sizeof s->sock, "%s/rgpu.sock", s->dir);
  snprintf(s->log, sizeof s->log, "%s/server.log", s->dir);
  snprintf(s->uri, sizeof s->uri, "unix://%s", s->sock);
  if (strlen(s->sock) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
    fprintf(stderr, "rgpu: socket path %s is too long (set TMPDIR to a shorter directory)\n",
            s->sock);
    server_stop(s);
    return -1;
  }
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "rgpu: fork: %s\n", strerror(errno));
    server_stop(s);
    return -1;
  }
  if (pid == 0) {
    int fd = open(s->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0) {
      dup2(fd, 2);
      dup2(fd, 1);
    }
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    /* Our own library must not be preloaded into the server. */
    unsetenv("LD_PRELOAD");
    /* No image cache: this server is on this machine, images cross no
     * network, and a run should leave nothing behind in /var/tmp. */
    execl(server_bin, server_bin, "--listen", s->uri, "--device", "softgpu", "--image-cache", "off",
          (char *)NULL);
    fprintf(stderr, "rgpu: cannot run %s: %s\n", server_bin, strerror(errno));
    _exit(127);
  }
  s->pid = pid;
  uint64_t t0 = rgpu_clock_ns();
  for (;;) {
    if (log_says_listening(s->log)) return 0;
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      s->pid = 0;
      fprintf(stderr, "rgpu: the local rgpu-server exited before listening (%s %d); its output:\n",
              WIFEXITED(st) ? "status" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
      print_file(s->log, stderr);
      server_stop(s);
      return -1;
    }
    double el = rgpu_clock_elapsed_s(t0);
    if (el > 10.0) {
      fprintf(stderr, "rgpu: the local rgpu-server did not listen on %s within 10 s; its output:\n",
              s->uri);
      print_file(s->log, stderr);
      server_stop(s);
      return -1;
    }
    usleep(10000);
  }
}

/* ---- rgpu run ----------------------------------------------------------- */

static volatile pid_t g_child;

static void forward_signal(int sig) {
  if (g_child > 0) kill(g_child, sig);
}

static int find_libdir(char *out, size_t cap) {
  const char *env = getenv("RGPU_LIBDIR");
  if (env && *env) {
    snprintf(out, cap, "%s", env);
  } else {
    /* An install keeps the facades in a private directory (lib/rgpu,
     * packaging/CMakeLists.txt); the build tree in lib. */
    char bindir[PATH_MAX];
    if (exe_dir(bindir, sizeof bindir)) return -1;
    static const char *const subdirs[] = {"../lib/rgpu", "../lib"};
    for (size_t i = 0; i < sizeof subdirs / sizeof subdirs[0]; i++) {
      char buf[PATH_MAX], real[PATH_MAX], probe[PATH_MAX + 32];
      snprintf(buf, sizeof buf, "%.4000s/%s", bindir, subdirs[i]);
      snprintf(out, cap, "%s", realpath(buf, real) ? real : buf);
      snprintf(probe, sizeof probe, "%s/libcudart.so.13", out);
      if (!access(probe, R_OK)) break;
    }
  }
  char lib[PATH_MAX + 32];
  snprintf(lib, sizeof lib, "%s/libcudart.so.13", out);
  if (access(lib, R_OK)) {
    fprintf(stderr, "rgpu: cannot find rgpu's libcudart.so.13 in %s (%s); set RGPU_LIBDIR\n",
            out, strerror(errno));
    return -1;
  }
  return 0;
}

/* The facades `rgpu run` makes win by SONAME, in load order: libcudart
 * first (it holds the session; the others are forwarders into it).  A
 * facade the build did not make is skipped; libcudart must be there
 * (find_libdir checked). */
static const char *const k_facades[] = {
    "libcudart.so.13", "libcuda.so.1",      "libnvidia-ml.so.1",
    "libcublas.so.13", "libcublasLt.so.13", "libcudnn.so.9",
};

/* Writes "DIR/libcudart.so.13:DIR/libcuda.so.1:..." into out: 0, or -1
 * (with a message) when it does not fit. */
static int facade_preload_list(const char *libdir, char *out, size_t cap) {
  size_t n = 0;
  out[0] = 0;
  for (size_t i = 0; i < sizeof k_facades / sizeof k_facades[0]; i++) {
    char lib[PATH_MAX + 32];
    snprintf(lib, sizeof lib, "%s/%s", libdir, k_facades[i]);
    if (access(lib, R_OK)) continue;
    int w = snprintf(out + n, cap - n, "%s%s", n ? ":" : "", lib);
    if (w < 0 || (size_t)w >= cap - n) {
      fprintf(stderr, "rgpu: the library path %s is too long for LD_PRELOAD\n", libdir);
      return -1;
    }
    n += (size_t)w;
  }
  return 0;
}

static int cmd_run(int argc, char **argv) {
  const char *server = NULL, *stats = NULL;
  int sync_every = 0;
  int i = 0;
  for (; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--")) {
      i++;
      break;
    }
    if (!strcmp(a, "--server") || !strcmp(a, "--stats")) {
      if (i + 1 >= argc) return die_usage("%s needs a value", a);
      if (!strcmp(a, "--server"))
        server = argv[++i];
      else
        stats = argv[++i];
    } else if (!strncmp(a, "--server=", 9)) {
      server = a + 9;
    } else if (!strncmp(a, "--stats=", 8)) {
      stats = a + 8;
    } else if (!strcmp(a, "--sync-every-call")) {
      sync_every = 1;
    } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (a[0] == '-') {
      return die_usage("unknown option %s for run", a);
    } else {
      break;
    }
  }
  if (i >= argc) return die_usage("%s", "run needs a PROGRAM to run");
  char **prog = argv + i;

  char libdir[PATH_MAX];
  if (find_libdir(libdir, sizeof libdir)) return 1;
  if (!server || !*server) server = getenv("RGPU_SERVER");
  private_server ps = {0};
  int have_private = 0;
  if (!server || !*server) {
    if (server_start(&ps)) return 1;
    have_private = 1;
    server = ps.uri;
  }

  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "rgpu: fork: %s\n", strerror(errno));
    if (have_private) server_stop(&ps);
    return 1;
  }
  if (pid == 0) {
    setenv("RGPU_SERVER", server, 1);
    char buf[2 * PATH_MAX + 64];
    const char *old = getenv("LD_LIBRARY_PATH");
    snprintf(buf, sizeof buf, "%s%s%s", libdir, old && *old ? ":" : "", old ? old : "");
    setenv("LD_LIBRARY_PATH", buf, 1);
    /* LD_PRELOAD also beats a DT_RPATH pointing at NVIDIA's library (torch's
     * wheels carry one), and a library dlopen()ed by SONAME later finds the
     * preloaded copy first.  Every facade the build made is preloaded. */
    char pre[8 * PATH_MAX];
    if (facade_preload_list(libdir, pre, sizeof pre)) _exit(126);
    old = getenv("LD_PRELOAD");
    char *pbuf = malloc(strlen(pre) + (old ? strlen(old) : 0) + 2);
    if (!pbuf) _exit(126);
    sprintf(pbuf, "%s%s%s", pre, old && *old ? ":" : "", old ? old : "");
    setenv("LD_PRELOAD", pbuf, 1);
    free(pbuf);
    if (sync_every) setenv("RGPU_SYNC_EVERY_CALL", "1", 1);
    if (stats) setenv("RGPU_STATS", stats, 1);
    execvp(prog[0], prog);
    fprintf(stderr, "rgpu: cannot run %s: %s\n", prog[0], strerror(errno));
    _exit(errno == ENOENT ? 127 : 126);
  }
  g_child = pid;
  struct sigaction sa = {0};
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  sigaction(SIGQUIT, &sa, NULL);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;
  int rc = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1;
  if (have_private) {
    int sst;
    int server_died = 0;
    if (waitpid(ps.pid, &sst, WNOHANG) == ps.pid) {
      ps.pid = 0;
      server_died = 1;
      fprintf(stderr, "rgpu: the local rgpu-server ended during the run; its output:\n");
      print_file(ps.log, stderr);
    }
    /* Stopped first, so the log is complete (the session's end is in it). */
    int keep = rc != 0 && !server_died;
    if (keep && ps.pid > 0) {
      kill(ps.pid, SIGTERM);
      for (int k = 0; k < 300; k++) { /* 3 s, as server_stop */
        pid_t r = waitpid(ps.pid, &sst, WNOHANG);
        if (r == ps.pid || (r < 0 && errno == ECHILD)) {
          ps.pid = 0; /* reaped: server_stop must not signal the number again */
          break;
        }
        usleep(10000);
      }
    }
    /* A failed run keeps the server's side of the story: why a module was
     * refused, which request faulted.  The private server's log would
     * otherwise go with its directory (issue 14). */
    char kept[PATH_MAX];
    if (keep && keep_server_log(&ps, kept, sizeof kept) == 0) {
      fprintf(stderr, "rgpu: %s exited with status %d; the private rgpu-server's log is kept in %s; "
                      "its last lines:\n",
              prog[0], rc, kept);
      print_tail(kept, stderr, 20);
    }
    server_stop(&ps);
  }
  return rc;
}

/* ---- rgpu info ---------------------------------------------------------- */

/* A reply slot for the next request, reading its payload into pay. */
static rgpu_client_reply *fresh(rgpu_client_reply *r, rgpu_buf *pay) {
  *r = (rgpu_client_reply){.payload = pay};
  return r;
}

/* Says why an info request failed; returns -1 for failure, 0 otherwise. */
static int info_check(rgpu_status rc, const rgpu_client_reply *r, const char *what) {
  if (!rc) return 0;
  fprintf(stderr, "rgpu: %s failed: %s%s%s\n", what, rc < 0 ? "connection lost" : "server error",
          r->msg[0] ? ": " : "", r->msg);
  return -1;
}

/* Options of a query command (info, smi): [--server URI] [-h|--help].
 * Returns -1 to go on, with *server the URI given (or left NULL), else the
 * exit status: 0 after help(stdout), EXIT_USAGE for a bad argument. */
static int query_args(int argc, char **argv, const char *cmd, void (*help)(FILE *),
                      const char **server) {
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--server")) {
      if (i + 1 >= argc) return die_usage("%s needs a value", argv[i]);
      *server = argv[++i];
    } else if (!strncmp(argv[i], "--server=", 9)) {
      *server = argv[i] + 9;
    } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      help(stdout);
      return 0;
    } else {
      char fmt[64];
      snprintf(fmt, sizeof fmt, "unexpected argument %%s for %s", cmd);
      return die_usage(fmt, argv[i]);
    }
  }
  return -1;
}

/* A query command's connection, made one request at a time. */
typedef struct {
  rgpu_client *c;
  private_server ps;
  int have_private; /* ps was started for this command */
} query_conn;

/* Connects to server, else to RGPU_SERVER or the configuration's server,
 * else to a private server started for the command.  Returns 0, or 1 with
 * the reason on stderr (and no private server left running). */
static int query_open(const char *server, query_conn *q) {
  memset(q, 0, sizeof *q);
  rgpu_client_config cfg;
  char err[1024];
  if (rgpu_client_config_load(&cfg, NULL, NULL, err, sizeof err)) {
    fprintf(stderr, "rgpu: %s\n", err);
    return 1;
  }
  cfg.sync_every_call = 1;
  if (server && *server) snprintf(cfg.server, sizeof cfg.server, "%s", server);
  if (!cfg.server[0]) {
    if (server_start(&q->ps)) return 1;
    q->have_private = 1;
    snprintf(cfg.server, sizeof cfg.server, "%s", q->ps.uri);
  }
  if (rgpu_client_connect(&cfg, &q->c, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    if (q->have_private) server_stop(&q->ps);
    return 1;
  }
  return 0;
}

/* query_args then query_open: -1 to go on with *q open, else the exit
 * status. */
static int query_start(int argc, char **argv, const char *cmd, void (*help)(FILE *),
                       query_conn *q) {
  const char *server = NULL;
  int rc = query_args(argc, argv, cmd, help, &server);
  if (rc >= 0) return rc;
  return query_open(server, q) ? 1 : -1;
}

static void query_close(query_conn *q) {
  rgpu_client_close(q->c);
  if (q->have_private) server_stop(&q->ps);
}

static int cmd_info(int argc, char **argv) {
  query_conn q;
  int rc = query_start(argc, argv, "info", usage, &q);
  if (rc >= 0) return rc;
  rgpu_client *c = q.c;
  int ret = 0;
  /* The replies' strings and arrays point into pay until the next call. */
  rgpu_buf pay;
  rgpu_buf_init(&pay);
  rgpu_client_reply r;

  printf("server     %s%s\n", rgpu_client_uri(c), q.have_private ? " (private, started for this command)" : "");
  printf("transport  %s\n", rgpu_client_transport(c));
  rgpu_msg_server_status_rep s;
  if (info_check(rgpu_call_server_status(c, -1, 0, NULL, &s, fresh(&r, &pay)), &r, "SERVER_STATUS") == 0) {
    {
      char ver[65] = "";
      rgpu_str_copy(ver, sizeof ver, s.version.data, s.version.len < 64 ? s.version.len : 64);
      printf("version    %s (%s)\n", ver, rgpu_client_server_name(c));
      printf("sessions   %u active, %u max\n", s.sessions_active, s.sessions_max);
      printf("uptime     %llu s\n", (unsigned long long)s.uptime_s);
      if (s.session_quota_bytes)
        printf("quota      %llu MiB per session\n",
               (unsigned long long)(s.session_quota_bytes >> 20));
      else
        printf("quota      none\n");
    }
  } else {
    ret = 1;
  }
  printf("device     %s\n", rgpu_client_device_kind(c));
  uint32_t count = 0;
  rgpu_msg_driver_info_rep d;
  if (info_check(rgpu_call_driver_info(c, -1, 0, NULL, &d, fresh(&r, &pay)), &r, "DRIVER_INFO") == 0) {
    {
      printf("driver     %d.%d\n", d.driver_version / 1000, (d.driver_version % 1000) / 10);
      count = d.device_count;
      printf("devices    %u\n", count);
    }
  } else {
    ret = 1;
  }
  for (uint32_t dev = 0; dev < count && dev < 64; dev++) {
    rgpu_msg_device_props_req q = {.device = dev};
    rgpu_msg_device_props_rep p;
    if (info_check(rgpu_call_device_props(c, -1, 0, &q, &p, fresh(&r, &pay)), &r, "DEVICE_PROPS")) {
      ret = 1;
      continue;
    }
    char name[257] = "";
    rgpu_str_copy(name, sizeof name, p.name.data, p.name.len < 256 ? p.name.len : 256);
    int32_t a[160] = {0};
    for (uint32_t k = 0; k < p.attrs.count && k < 160; k++) a[k] = rgpu_array_i32(&p.attrs, k);
    uint8_t u[16] = {0};
    memcpy(u, p.uuid.data, p.uuid.len < 16 ? p.uuid.len : 16);
    uint64_t total = p.total_mem;
    printf("\nGPU %u      %s\n", dev, name);
    printf("  compute capability  %d.%d\n", a[75], a[76]);
    printf("  multiprocessors     %d\n", a[16]);
    printf("  clock               %d MHz (memory %d MHz)\n", a[13] / 1000, a[36] / 1000);
    printf("  uuid                GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
           "%02x%02x%02x%02x%02x%02x\n",
           u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
           u[13], u[14], u[15]);
    rgpu_msg_mem_get_info_rep m;
    if (info_check(rgpu_call_mem_get_info(c, (int)dev, 0, NULL, &m, fresh(&r, &pay)), &r, "MEM_GET_INFO") ==
        0) {
      printf("  memory              %llu MiB total, %llu MiB free\n",
               (unsigned long long)(m.total_bytes >> 20), (unsigned long long)(m.free_bytes >> 20));
    } else {
      printf("  memory              %llu MiB total\n", (unsigned long long)(total >> 20));
    }
  }
  rgpu_buf_free(&pay);
  query_close(&q);
  return ret;
}

/* ---- rgpu smi ----------------------------------------------------------- */

#include "rgpu_smi.h"

static void smi_usage(FILE *f) {
  fprintf(f, "usage: rgpu smi [--server URI]\n"
             "  shows the server's GPUs (name, bus id, temperature, power, memory, utilization)\n"
             "  and the rgpu sessions using them; N/A where the server has no such figure.\n");
}

/* rgpu smi [--server URI]: the server's GPUs and the sessions using them,
 * as NVML_QUERY reports them (the same figures the NVML facade serves);
 * the table itself is rgpu_smi_format (client/rgpu_smi.c). */
static int cmd_smi(int argc, char **argv) {
  query_conn q;
  int rc = query_start(argc, argv, "smi", smi_usage, &q);
  if (rc >= 0) return rc;
  rgpu_client *c = q.c;
  int ret = 0;
  rgpu_buf pay;
  rgpu_buf_init(&pay);
  rgpu_client_reply r;
  rgpu_msg_driver_info_rep d;
  uint32_t count = 0;
  if (info_check(rgpu_call_driver_info(c, -1, 0, NULL, &d, fresh(&r, &pay)), &r, "DRIVER_INFO") == 0)
    count = d.device_count < 64 ? d.device_count : 64;
  else
    ret = 1;
  rgpu_nvml_snapshot *devs = calloc(count ? count : 1, sizeof *devs);
  int *failed = calloc(count ? count : 1, sizeof *failed);
  if (!devs || !failed) {
    fprintf(stderr, "rgpu: out of memory\n");
    count = 0;
    ret = 1;
  }
  for (uint32_t dev = 0; dev < count; dev++) {
    rgpu_msg_nvml_query_req q = {.device = dev};
    rgpu_msg_nvml_query_rep rep;
    if (info_check(rgpu_call_nvml_query(c, -1, 0, &q, &rep, fresh(&r, &pay)), &r, "NVML_QUERY") ||
        rgpu_nvml_snapshot_from_reply(&devs[dev], &rep)) {
      failed[dev] = 1;
      ret = 1;
    }
  }
  char uri[600];
  snprintf(uri, sizeof uri, "%s%s", rgpu_client_uri(c), q.have_private ? " [private]" : "");
  rgpu_smi_view view = {.server = uri, .device_kind = rgpu_client_device_kind(c), .ndev = count,
                        .devs = devs, .dev_failed = failed};
  if (devs && failed) rgpu_smi_format(stdout, &view);
  free(devs);
  free(failed);
  rgpu_buf_free(&pay);
  query_close(&q);
  return ret;
}

/* info and smi given several servers (--server or RGPU_SERVER naming a
 * list, issue 19): the command once per server, in the list's order (the
 * order of their devices in a program's device list). */
static int query_each_server(int (*cmd)(int, char **), int argc, char **argv, const char *name,
                             void (*help)(FILE *)) {
  const char *server = NULL;
  int rc = query_args(argc, argv, name, help, &server);
  if (rc >= 0) return rc;
  if (!server || !*server) server = getenv("RGPU_SERVER");
  if (!server || !strchr(server, ',')) return cmd(argc, argv);
  static char uris[RGPU_CLIENT_MAX_SERVERS][RGPU_CLIENT_URI_MAX];
  char err[1024];
  int n = rgpu_client_server_list_parse(server, uris, RGPU_CLIENT_MAX_SERVERS, err, sizeof err);
  if (n < 0) {
    fprintf(stderr, "rgpu: %s\n", err);
    return 1;
  }
  int worst = 0;
  for (int i = 0; i < n; i++) {
    if (i) printf("\n");
    char *one[2] = {"--server", uris[i]};
    int r = cmd(2, one);
    if (r > worst) worst = r;
  }
  return worst;
}

int main(int argc, char **argv) {
  rgpu_log_set_component("rgpu");
  if (argc < 2) {
    usage(stderr);
    return EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
    printf("rgpu %s (protocol %d, CUDA runtime API 13.0)\n", RGPU_VERSION, RGPU_PROTO_VERSION);
    return 0;
  }
  if (!strcmp(cmd, "run")) return cmd_run(argc - 2, argv + 2);
  if (!strcmp(cmd, "info")) return query_each_server(cmd_info, argc - 2, argv + 2, "info", usage);
  if (!strcmp(cmd, "smi"))
    return query_each_server(cmd_smi, argc - 2, argv + 2, "smi", smi_usage);
  return die_usage("unknown command %s", cmd);
}
