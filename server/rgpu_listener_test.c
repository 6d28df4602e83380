#define _GNU_SOURCE
/* rgpu-server as a process: real sockets, real forks, the fake driver. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cuda.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rgpu_clock.h"
#include "rgpu_frame_io.h"
#include "rgpu_messages.h"

typedef struct {
  pid_t pid;
  int err_fd;
  char uris[4][300];
  int nuris;
} server;

static char tmpdir[64];
/* Found beside this test at run time, so the build tree can be moved. */
static char server_bin[1024];
static char softgpu_lib[1024];
/* Servers still running when a test fails are killed by the teardown. */
static pid_t live_servers[8];
static int nlive;
static char driver_path[1024];

/* Starts rgpu-server with the given extra arguments and waits for its
 * "listening on" lines. */
static void server_start(server *s, int nlisten, const char *const *args) {
  memset(s, 0, sizeof *s);
  int p[2];
  assert_int_equal(pipe(p), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(p[1], 2);
    close(p[0]);
    close(p[1]);
    const char *argv[32];
    int n = 0;
    argv[n++] = server_bin;
    argv[n++] = "--device";
    argv[n++] = "softgpu";
    argv[n++] = "--softgpu-lib";
    argv[n++] = driver_path;
    for (int i = 0; args[i] && n < 30; i++) argv[n++] = args[i];
    argv[n] = NULL;
    execv(argv[0], (char **)argv);
    _exit(127);
  }
  close(p[1]);
  s->pid = pid;
  if (nlive < 8) live_servers[nlive++] = pid;
  s->err_fd = p[0];
  char buf[4096];
  size_t len = 0;
  uint64_t t0 = rgpu_clock_ns();
  while (s->nuris < nlisten) {
    struct pollfd pf = {p[0], POLLIN, 0};
    poll(&pf, 1, 200);
    assert_true(rgpu_clock_elapsed_s(t0) < 10);
    if (!(pf.revents & (POLLIN | POLLHUP))) continue;
    ssize_t r = read(p[0], buf + len, sizeof buf - 1 - len);
    assert_true(r > 0);
    len += (size_t)r;
    buf[len] = 0;
    char *line;
    while ((line = strstr(buf, "\n"))) {
      *line = 0;
      const char *k = strstr(buf, "rgpu-server: listening on ");
      if (k) {
        const char *u = k + strlen("rgpu-server: listening on ");
        const char *e = strstr(u, " (device: ");
        assert_non_null(e);
        snprintf(s->uris[s->nuris++], sizeof s->uris[0], "%.*s", (int)(e - u), u);
      }
      size_t used = (size_t)(line - buf) + 1;
      memmove(buf, line + 1, len - used + 1);
      len -= used;
    }
  }
  fcntl(p[0], F_SETFL, O_NONBLOCK);
}

static int server_stop(server *s) {
  kill(s->pid, SIGTERM);
  int st = 0;
  for (int i = 0; i < 500; i++) {
    if (waitpid(s->pid, &st, WNOHANG) == s->pid) break;
    char b[4096];
    while (read(s->err_fd, b, sizeof b) > 0) {
    }
    struct timespec nap = {0, 10 * 1000 * 1000};
    nanosleep(&nap, NULL);
  }
  close(s->err_fd);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

typedef struct {
  rgpu_conn *c;
  uint64_t seq;
  rgpu_buf in;
  rgpu_frame_hdr h;
} client;

static void client_connect(client *cl, const char *uri) {
  memset(cl, 0, sizeof *cl);
  char err[256];
  int rc = rgpu_conn_connect(uri, NULL, &cl->c, err, sizeof err);
  if (rc) print_message("connect %s: %s\n", uri, err);
  assert_int_equal(rc, 0);
  rgpu_buf_init(&cl->in);
}

static void client_close(client *cl) {
  rgpu_conn_close(cl->c);
  rgpu_buf_free(&cl->in);
}

/* Sends a request and waits for its reply (skipping events); returns the
 * status, or -1 if the connection ended. */
static int64_t call(client *cl, uint16_t op, const rgpu_buf *fields, const void *tail, size_t tlen) {
  rgpu_frame_hdr h = {RGPU_PROTO_VERSION, RGPU_KIND_REQUEST, op, 0, RGPU_REQ_NEED_REPLY, ++cl->seq};
  if (rgpu_frame_write(cl->c, &h, fields ? fields->data : NULL, fields ? fields->len : 0, tail, tlen))
    return -1;
  for (;;) {
    if (rgpu_frame_read(cl->c, &cl->h, &cl->in, RGPU_FRAME_MAX_PAYLOAD)) return -1;
    if (cl->h.kind != RGPU_KIND_REPLY) continue;
    assert_int_equal(cl->h.seq, cl->seq);
    return cl->h.aux;
  }
}

static int64_t hello(client *cl, const char *token) {
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_hello_req q = {.proto_version = RGPU_PROTO_VERSION,
                          .token = {token, token ? strlen(token) : 0},
                          .client_name = {"listener-test", 13}};
  rgpu_msg_hello_req_encode(&b, &q);
  int64_t st = call(cl, RGPU_OP_HELLO, &b, NULL, 0);
  rgpu_buf_free(&b);
  return st;
}

static int64_t ping(client *cl) {
  int64_t st = call(cl, RGPU_OP_PING, NULL, "ping!", 5);
  if (st == 0) {
    assert_int_equal(cl->in.len, 5);
    assert_memory_equal(cl->in.data, "ping!", 5);
  }
  return st;
}

static int64_t u64_call(client *cl, uint16_t op, uint64_t v) {
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_buf_put_u64(&b, v);
  int64_t st = call(cl, op, &b, NULL, 0);
  rgpu_buf_free(&b);
  return st;
}

static int connection_closed(client *cl) {
  rgpu_frame_hdr h;
  int rc = rgpu_frame_read(cl->c, &h, &cl->in, RGPU_FRAME_MAX_PAYLOAD);
  return rc != 0;
}

static char sock_path[128];

static void test_hello_ping_tcp_unix(void **state) {
  const char *args[] = {"--listen", "tcp://127.0.0.1:0", "--listen", NULL, NULL};
  char unix_uri[160];
  snprintf(unix_uri, sizeof unix_uri, "unix://%s", sock_path);
  args[3] = unix_uri;
  server s;
  server_start(&s, 2, args);
  assert_non_null(strstr(s.uris[0], "tcp://127.0.0.1:"));
  assert_string_not_equal(s.uris[0], "tcp://127.0.0.1:0");
  assert_string_equal(s.uris[1], unix_uri);
  for (int i = 0; i < 2; i++) {
    client c;
    client_connect(&c, s.uris[i]);
    assert_int_equal(hello(&c, NULL), 0);
    rgpu_msg_hello_rep r;
    assert_int_equal(rgpu_msg_hello_rep_decode(c.in.data, c.in.len, &r), 0);
    assert_int_equal(r.session_token.len, 32);
    assert_int_equal(ping(&c), 0);
    assert_int_equal(call(&c, RGPU_OP_GOODBYE, NULL, NULL, 0), 0);
    assert_true(connection_closed(&c));
    client_close(&c);
  }
  assert_int_equal(server_stop(&s), 0);
  assert_int_equal(access(sock_path, F_OK), -1); /* the listener removed its socket */
}

static void test_token(void **state) {
  char tf[128];
  snprintf(tf, sizeof tf, "%s/token", tmpdir);
  FILE *f = fopen(tf, "w");
  fputs("open-sesame\n", f);
  fclose(f);
  const char *args[] = {"--listen", "tcp://127.0.0.1:0", "--token-file", tf, NULL};
  server s;
  server_start(&s, 1, args);
  client c;
  client_connect(&c, s.uris[0]);
  assert_int_equal(hello(&c, "guess"), CUDA_ERROR_NOT_PERMITTED);
  assert_non_null(memmem(c.in.data, c.in.len, "authentication failed", 21));
  assert_true(connection_closed(&c));
  client_close(&c);
  client_connect(&c, s.uris[0]);
  assert_int_equal(ping(&c), CUDA_ERROR_NOT_INITIALIZED); /* HELLO must come first */
  client_close(&c);
  client_connect(&c, s.uris[0]);
  assert_int_equal(hello(&c, "open-sesame"), 0);
  assert_int_equal(ping(&c), 0);
  client_close(&c);
  assert_int_equal(server_stop(&s), 0);
  unlink(tf);
}

static void test_isolation_and_garbage(void **state) {
  const char *args[] = {"--listen", "tcp://127.0.0.1:0", NULL};
  server s;
  server_start(&s, 1, args);
  client a, b, g;
  client_connect(&a, s.uris[0]);
  client_connect(&b, s.uris[0]);
  assert_int_equal(hello(&a, NULL), 0);
  assert_int_equal(hello(&b, NULL), 0);
  rgpu_msg_hello_rep ra;
  assert_int_equal(rgpu_msg_hello_rep_decode(a.in.data, a.in.len, &ra), 0);
  assert_int_equal(u64_call(&a, RGPU_OP_MEM_ALLOC, 256), 0);
  uint64_t pa;
  memcpy(&pa, a.in.data, 8);
  rgpu_buf f;
  rgpu_buf_init(&f);
  rgpu_msg_memcpy_htod_req hq = {.dst = pa};
  rgpu_msg_memcpy_htod_req_encode(&f, &hq);
  assert_int_equal(call(&a, RGPU_OP_MEMCPY_HTOD, &f, "A's secret", 10), 0);
  /* B can neither read, overwrite nor free A's memory. */
  rgpu_buf_reset(&f);
  rgpu_msg_memcpy_dtoh_req dq = {.src = pa, .size = 10};
  rgpu_msg_memcpy_dtoh_req_encode(&f, &dq);
  assert_int_equal(call(&b, RGPU_OP_MEMCPY_DTOH, &f, NULL, 0), CUDA_ERROR_INVALID_VALUE);
  rgpu_buf_reset(&f);
  rgpu_msg_memcpy_htod_req_encode(&f, &hq);
  assert_int_equal(call(&b, RGPU_OP_MEMCPY_HTOD, &f, "overwrite!", 10), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(u64_call(&b, RGPU_OP_MEM_FREE, pa), CUDA_ERROR_INVALID_VALUE);
  /* Garbage on a third connection closes that one only. */
  client_connect(&g, s.uris[0]);
  struct iovec iov = {"this is not an rgpu frame at all", 32};
  assert_int_equal(rgpu_conn_writev_all(g.c, &iov, 1), 0);
  assert_true(connection_closed(&g));
  client_close(&g);
  rgpu_buf_reset(&f);
  rgpu_msg_memcpy_dtoh_req_encode(&f, &dq);
  assert_int_equal(call(&a, RGPU_OP_MEMCPY_DTOH, &f, NULL, 0), 0);
  assert_int_equal(a.in.len, 10);
  assert_memory_equal(a.in.data, "A's secret", 10);
  assert_int_equal(ping(&b), 0);
  rgpu_buf_free(&f);
  client_close(&a);
  client_close(&b);
  assert_int_equal(server_stop(&s), 0);
}

/* Connects and says HELLO until the server has a free session slot. */
static void hello_when_free(client *c, const char *uri) {
  for (int tries = 0;; tries++) {
    client_connect(c, uri);
    int64_t st = hello(c, NULL);
    if (st == 0) return;
    assert_int_equal(st, CUDA_ERROR_DEVICE_UNAVAILABLE);
    client_close(c);
    assert_true(tries < 200);
    struct timespec nap = {0, 10 * 1000 * 1000};
    nanosleep(&nap, NULL);
  }
}

static void test_max_sessions(void **state) {
  /* --grace-s 0: a session ends at EOF (no wait for a resume), so its slot
   * frees at once; --drain-s 1: SIGTERM ends the live session after 1 s. */
  const char *args[] = {"--listen", "tcp://127.0.0.1:0", "--max-sessions", "1",
                        "--grace-s", "0", "--drain-s", "1", NULL};
  server s;
  server_start(&s, 1, args);
  client a, b;
  client_connect(&a, s.uris[0]);
  assert_int_equal(hello(&a, NULL), 0);
  client_connect(&b, s.uris[0]);
  assert_int_equal(hello(&b, NULL), CUDA_ERROR_DEVICE_UNAVAILABLE);
  assert_non_null(memmem(b.in.data, b.in.len, "server full (1 sessions)", 24));
  client_close(&b);
  assert_int_equal(ping(&a), 0);
  client_close(&a);
  /* The slot frees when the session ends (the worker notices EOF soon). */
  hello_when_free(&b, s.uris[0]);
  client_close(&b);
  /* SIGTERM with a live session still ends in an orderly exit; the
   * session is told so (SHUTDOWN event) before its connection closes. */
  hello_when_free(&a, s.uris[0]);
  assert_int_equal(server_stop(&s), 0);
  rgpu_frame_hdr eh;
  assert_int_equal(rgpu_frame_read(a.c, &eh, &a.in, RGPU_FRAME_MAX_PAYLOAD), 0);
  assert_int_equal(eh.kind, RGPU_KIND_EVENT);
  assert_int_equal(eh.opcode, RGPU_EVT_SHUTDOWN);
  assert_true(connection_closed(&a));
  client_close(&a);
}

/* 1 if the server closes c within ms milliseconds (anything it sends
 * first is read and dropped). */
static int closed_within(client *cl, int ms) {
  uint64_t t0 = rgpu_clock_ns();
  for (;;) {
    int left = ms - (int)(rgpu_clock_elapsed_s(t0) * 1000.0);
    if (left <= 0) return 0;
    struct pollfd pf = {rgpu_conn_poll_fd(cl->c), POLLIN, 0};
    if (poll(&pf, 1, left) <= 0) continue;
    char b[256];
    ssize_t r = rgpu_conn_read_some(cl->c, b, sizeof b);
    if (r <= 0) return 1;
  }
}

/* Pre-auth slowloris (issue 14): a peer that sends one byte and then
 * nothing must neither keep its worker past the HELLO deadline nor take a
 * real client's --max-sessions slot; such workers are bounded apart
 * (--max-pending-auth), beyond which connections are closed at once. */
static void test_slowloris(void **state) {
  const char *args[] = {"--listen", "tcp://127.0.0.1:0", "--max-sessions", "2",
                        "--max-pending-auth", "2", "--hello-timeout-s", "2",
                        "--grace-s", "0", NULL};
  server s;
  server_start(&s, 1, args);
  client p1, p2, a, b, c;
  struct iovec one = {"\x01", 1};
  client_connect(&p1, s.uris[0]);
  assert_int_equal(rgpu_conn_writev_all(p1.c, &one, 1), 0);
  client_connect(&p2, s.uris[0]);
  assert_int_equal(rgpu_conn_writev_all(p2.c, &one, 1), 0);
  /* The silent peers' workers do not count as sessions; the oldest makes
   * room for a newcomer. */
  uint64_t t0 = rgpu_clock_ns();
  client_connect(&a, s.uris[0]);
  assert_int_equal(hello(&a, NULL), 0);
  assert_true(closed_within(&p1, 1000));
  /* A partial first frame meets the HELLO deadline too. */
  assert_true(closed_within(&p2, 6000));
  assert_true(rgpu_clock_elapsed_s(t0) < 6.0);
  client_close(&p1);
  client_close(&p2);
  /* Many at once: never more than two wait, the newest get their turn. */
  client p[4];
  for (int i = 0; i < 4; i++) {
    client_connect(&p[i], s.uris[0]);
    assert_int_equal(rgpu_conn_writev_all(p[i].c, &one, 1), 0);
  }
  assert_true(closed_within(&p[0], 1000));
  assert_true(closed_within(&p[1], 1000));
  for (int i = 0; i < 4; i++) client_close(&p[i]);
  /* Authenticated sessions fill the slots as before. */
  client_connect(&b, s.uris[0]);
  assert_int_equal(hello(&b, NULL), 0);
  client_connect(&c, s.uris[0]);
  assert_int_equal(hello(&c, NULL), CUDA_ERROR_DEVICE_UNAVAILABLE);
  client_close(&c);
  assert_int_equal(ping(&a), 0);
  assert_int_equal(ping(&b), 0);
  client_close(&a);
  client_close(&b);
  assert_int_equal(server_stop(&s), 0);
}

/* 4 MiB each way (one RGPU_CHUNK_BYTES chunk): the reply's tail goes out as
 * its own iovec. */
static void bulk_roundtrip(client *c) {
  const size_t n = RGPU_CHUNK_BYTES;
  assert_int_equal(u64_call(c, RGPU_OP_MEM_ALLOC, n), 0);
  uint64_t d;
  memcpy(&d, c->in.data, 8);
  uint8_t *src = malloc(n);
  for (size_t i = 0; i < n; i++) src[i] = (uint8_t)(i * 131 + (i >> 12));
  rgpu_buf f;
  rgpu_buf_init(&f);
  rgpu_msg_memcpy_htod_req hq = {.dst = d};
  rgpu_msg_memcpy_htod_req_encode(&f, &hq);
  assert_int_equal(call(c, RGPU_OP_MEMCPY_HTOD, &f, src, n), 0);
  rgpu_buf_reset(&f);
  rgpu_msg_memcpy_dtoh_req dq = {.src = d, .size = n};
  rgpu_msg_memcpy_dtoh_req_encode(&f, &dq);
  assert_int_equal(call(c, RGPU_OP_MEMCPY_DTOH, &f, NULL, 0), 0);
  assert_int_equal(c->in.len, n);
  assert_memory_equal(c->in.data, src, n);
  rgpu_buf_free(&f);
  free(src);
  assert_int_equal(u64_call(c, RGPU_OP_MEM_FREE, d), 0);
}

/* tcp, tls and quic in one server: the TLS and QUIC relay threads run
 * beside every session start.  Workers come from the single-threaded fork
 * server, so this runs under AddressSanitizer too (forking beside the relay
 * threads used to hang a worker there on an inherited allocator lock). */
static void test_bulk_and_tls(void **state) {
  char gen[160];
  snprintf(gen, sizeof gen, "%s", tmpdir);
  /* --gen-cert writes a pair a client can pin. */
  pid_t pid = fork();
  if (pid == 0) {
    int dn = open("/dev/null", O_WRONLY);
    dup2(dn, 2);
    execl(server_bin, server_bin, "--gen-cert", gen, (char *)NULL);
    _exit(127);
  }
  int st;
  waitpid(pid, &st, 0);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  char cert[200], key[200];
  snprintf(cert, sizeof cert, "%s/cert.pem", tmpdir);
  snprintf(key, sizeof key, "%s/key.pem", tmpdir);
  const char *args[] = {"--listen", "tcp://127.0.0.1:0", "--listen", "tls://127.0.0.1:0",
                        "--listen", "quic://127.0.0.1:0", "--cert", cert, "--key", key, NULL};
  server s;
  server_start(&s, 3, args);
  assert_non_null(strstr(s.uris[1], "tls://127.0.0.1:"));
  client c;
  client_connect(&c, s.uris[0]);
  assert_int_equal(hello(&c, NULL), 0);
  bulk_roundtrip(&c);
  client_close(&c);

  rgpu_transport_opts o = {.ca_file = cert};
  char err[256];
  memset(&c, 0, sizeof c);
  rgpu_buf_init(&c.in);
  int rc = rgpu_conn_connect(s.uris[1], &o, &c.c, err, sizeof err);
  if (rc) print_message("tls connect: %s\n", err);
  assert_int_equal(rc, 0);
  assert_int_equal(hello(&c, NULL), 0);
  assert_int_equal(ping(&c), 0);
  bulk_roundtrip(&c);
  client_close(&c);

  memset(&c, 0, sizeof c);
  rgpu_buf_init(&c.in);
  rc = rgpu_conn_connect(s.uris[2], &o, &c.c, err, sizeof err);
  if (rc) print_message("quic connect: %s\n", err);
  assert_int_equal(rc, 0);
  assert_int_equal(hello(&c, NULL), 0);
  assert_int_equal(ping(&c), 0);
  bulk_roundtrip(&c);
  client_close(&c);
  assert_int_equal(server_stop(&s), 0);
  unlink(cert);
  unlink(key);
}

/* The process whose parent is `parent` (the fork server is the listener's
 * only child once it serves), or -1. */
static pid_t find_child(pid_t parent) {
  DIR *d = opendir("/proc");
  if (!d) return -1;
  pid_t found = -1;
  struct dirent *e;
  while ((e = readdir(d)) && found < 0) {
    char path[300], buf[512];
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    /* pid (comm) state ppid ...: comm may hold spaces, so from the last ')'. */
    const char *rp = strrchr(buf, ')');
    char st;
    int ppid;
    if (rp && sscanf(rp + 1, " %c %d", &st, &ppid) == 2 && ppid == parent && st != 'Z')
      found = (pid_t)atoi(e->d_name);
  }
  closedir(d);
  return found;
}

/* Reads the server's log until `what` appears (5 s at most). */
static int log_wait_for(server *s, const char *what) {
  static char logbuf[65536];
  size_t len = 0;
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    struct pollfd pf = {s->err_fd, POLLIN, 0};
    poll(&pf, 1, 100);
    ssize_t r;
    while (len < sizeof logbuf - 1 && (r = read(s->err_fd, logbuf + len, sizeof logbuf - 1 - len)) > 0)
      len += (size_t)r;
    logbuf[len] = 0;
    if (strstr(logbuf, what)) return 1;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - t0.tv_sec >= 5) {
      print_message("log so far:\n%s\n", logbuf);
      return 0;
    }
  }
}

/* A dead fork server: the listener says so, stops accepting, lets the
 * running session finish and exits 1; it never hangs. */
static void test_forkserver_death(void **state) {
  const char *args[] = {"--listen", "tcp://127.0.0.1:0", "--drain-s", "20", NULL};
  server s;
  server_start(&s, 1, args);
  client c;
  client_connect(&c, s.uris[0]);
  assert_int_equal(hello(&c, NULL), 0);
  pid_t fs = find_child(s.pid);
  assert_true(fs > 0);
  assert_int_equal(kill(fs, SIGKILL), 0);
  assert_true(log_wait_for(&s, "event=forkserver-died"));
  /* The running session is untouched... */
  assert_int_equal(ping(&c), 0);
  /* ...but nothing new is accepted. */
  rgpu_conn *nc = NULL;
  char err[256];
  assert_int_not_equal(rgpu_conn_connect(s.uris[0], NULL, &nc, err, sizeof err), 0);
  /* The session ends with its client; then the listener exits 1 by itself. */
  client_close(&c);
  int st = -1;
  for (int i = 0; i < 500; i++) {
    if (waitpid(s.pid, &st, WNOHANG) == s.pid) break;
    st = -1;
    struct timespec nap = {0, 10 * 1000 * 1000};
    nanosleep(&nap, NULL);
  }
  assert_true(st != -1);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 1);
  close(s.err_fd);
}

/* Waits that run on background threads still answer every request. */
static void stream_waits_on(const char *lib, const char *device) {
  const char *args[] = {"--listen", "tcp://127.0.0.1:0", "--softgpu-lib", lib, "--device", device, NULL};
  server s;
  server_start(&s, 1, args);
  client c;
  client_connect(&c, s.uris[0]);
  assert_int_equal(hello(&c, NULL), 0);
  rgpu_buf f;
  rgpu_buf_init(&f);
  rgpu_msg_stream_create_req sc = {.stream = 3};
  rgpu_msg_stream_create_req_encode(&f, &sc);
  assert_int_equal(call(&c, RGPU_OP_STREAM_CREATE, &f, NULL, 0), 0);
  rgpu_buf_reset(&f);
  rgpu_msg_event_create_req ec = {.event = 8};
  rgpu_msg_event_create_req_encode(&f, &ec);
  assert_int_equal(call(&c, RGPU_OP_EVENT_CREATE, &f, NULL, 0), 0);
  assert_int_equal(u64_call(&c, RGPU_OP_MEM_ALLOC, 1 << 20), 0);
  uint64_t d;
  memcpy(&d, c.in.data, 8);
  static uint8_t src[1 << 20];
  for (size_t i = 0; i < sizeof src; i++) src[i] = (uint8_t)(i ^ (i >> 8));
  for (int round = 0; round < 20; round++) {
    /* Unreplied async H2D on the stream, then a replied D2H on it. */
    rgpu_buf_reset(&f);
    rgpu_msg_memcpy_htod_req hq = {.dst = d, .stream = 3};
    rgpu_msg_memcpy_htod_req_encode(&f, &hq);
    src[0] = (uint8_t)round;
    rgpu_frame_hdr h = {RGPU_PROTO_VERSION, RGPU_KIND_REQUEST, RGPU_OP_MEMCPY_HTOD, 0, 0, ++c.seq};
    assert_int_equal(rgpu_frame_write(c.c, &h, f.data, f.len, src, sizeof src), 0);
    rgpu_buf_reset(&f);
    rgpu_msg_event_record_req er = {.event = 8, .stream = 3};
    rgpu_msg_event_record_req_encode(&f, &er);
    assert_int_equal(call(&c, RGPU_OP_EVENT_RECORD, &f, NULL, 0), 0);
    rgpu_buf_reset(&f);
    rgpu_msg_memcpy_dtoh_req dq = {.src = d, .size = sizeof src, .stream = 3};
    rgpu_msg_memcpy_dtoh_req_encode(&f, &dq);
    assert_int_equal(call(&c, RGPU_OP_MEMCPY_DTOH, &f, NULL, 0), 0);
    assert_int_equal(c.in.len, sizeof src);
    assert_memory_equal(c.in.data, src, sizeof src);
    assert_int_equal(u64_call(&c, RGPU_OP_STREAM_SYNC, 3), 0);
    assert_int_equal(u64_call(&c, RGPU_OP_STREAM_SYNC, 0), 0);
    assert_int_equal(u64_call(&c, RGPU_OP_EVENT_SYNC, 8), 0);
    assert_int_equal(call(&c, RGPU_OP_CTX_SYNC, NULL, NULL, 0), 0);
  }
  assert_int_equal(u64_call(&c, RGPU_OP_STREAM_SYNC, 4), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(u64_call(&c, RGPU_OP_EVENT_DESTROY, 8), 0);
  assert_int_equal(u64_call(&c, RGPU_OP_MEM_FREE, d), 0);
  assert_int_equal(call(&c, RGPU_OP_GOODBYE, NULL, NULL, 0), 0);
  rgpu_buf_free(&f);
  client_close(&c);
  assert_int_equal(server_stop(&s), 0);
}

static void stream_waits(const char *lib) { stream_waits_on(lib, "softgpu"); }

static void test_stream_waits(void **state) { stream_waits(driver_path); }

/* On a real GPU where there is one. */
static void test_stream_waits_cuda(void **state) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    print_message("SKIP: no libcuda.so.1\n");
    skip();
  }
  dlclose(h);
  stream_waits_on(driver_path, "cuda");
}

/* Many unreplied requests in one write, then one replied: every frame is
 * executed in order and only failures produce events. */
static void test_batch(void **state) {
  const char *args[] = {"--listen", "tcp://127.0.0.1:0", NULL};
  server s;
  server_start(&s, 1, args);
  client c;
  client_connect(&c, s.uris[0]);
  assert_int_equal(hello(&c, NULL), 0);
  assert_int_equal(u64_call(&c, RGPU_OP_MEM_ALLOC, 4096), 0);
  uint64_t d;
  memcpy(&d, c.in.data, 8);
  enum { N = 20000 };
  rgpu_buf batch;
  rgpu_buf_init(&batch);
  for (uint32_t i = 0; i < N; i++) {
    rgpu_buf f;
    rgpu_buf_init(&f);
    /* Frame 777 is out of range: it must come back as ASYNC_ERROR seq 777. */
    rgpu_msg_memset_req m = {.dst = d + (i % 1024) * 4, .value = i, .elem_size = 4,
                             .count = i == 777 ? 2000 : 1};
    rgpu_msg_memset_req_encode(&f, &m);
    rgpu_frame_hdr h = {RGPU_PROTO_VERSION, RGPU_KIND_REQUEST, RGPU_OP_MEMSET, (uint32_t)f.len, 0,
                        1000000 + i};
    uint8_t hdr[RGPU_FRAME_HDR_SIZE];
    rgpu_frame_hdr_encode(hdr, &h);
    rgpu_buf_put(&batch, hdr, sizeof hdr);
    rgpu_buf_put(&batch, f.data, f.len);
    rgpu_buf_free(&f);
  }
  uint64_t t0 = rgpu_clock_ns();
  struct iovec iov = {batch.data, batch.len};
  assert_int_equal(rgpu_conn_writev_all(c.c, &iov, 1), 0);
  rgpu_buf f;
  rgpu_buf_init(&f);
  rgpu_msg_memcpy_dtoh_req dq = {.src = d, .size = 4096};
  rgpu_msg_memcpy_dtoh_req_encode(&f, &dq);
  rgpu_frame_hdr h = {RGPU_PROTO_VERSION, RGPU_KIND_REQUEST, RGPU_OP_MEMCPY_DTOH, 0,
                      RGPU_REQ_NEED_REPLY, 5};
  assert_int_equal(rgpu_frame_write(c.c, &h, f.data, f.len, NULL, 0), 0);
  int events = 0;
  for (;;) {
    assert_int_equal(rgpu_frame_read(c.c, &c.h, &c.in, RGPU_FRAME_MAX_PAYLOAD), 0);
    if (c.h.kind == RGPU_KIND_EVENT) {
      assert_int_equal(c.h.opcode, RGPU_EVT_ASYNC_ERROR);
      assert_int_equal(c.h.seq, 1000000 + 777);
      events++;
      continue;
    }
    break;
  }
  uint64_t t1 = rgpu_clock_ns();
  assert_int_equal(events, 1);
  assert_int_equal(c.h.seq, 5);
  assert_int_equal(c.h.aux, 0);
  uint32_t last[1024];
  memcpy(last, c.in.data, sizeof last);
  for (uint32_t k = 0; k < 1024; k++) {
    uint32_t i = N - 1024 + k; /* the last write to slot i % 1024 */
    assert_int_equal(last[i % 1024], i);
  }
  double us = (double)(t1 - t0) / 1e3;
  print_message("batch: %d unreplied MEMSETs + 1 DTOH in %.1f ms (%.2f us/request)\n", N, us / 1e3,
                us / N);
  rgpu_buf_free(&f);
  rgpu_buf_free(&batch);
  client_close(&c);
  assert_int_equal(server_stop(&s), 0);
}

static void test_stream_waits_softgpu(void **state) {
  if (access(softgpu_lib, R_OK)) {
    print_message("SKIP: %s not built\n", softgpu_lib);
    skip();
  }
  stream_waits(softgpu_lib);
}

/* Many sessions at once, each with its own memory; and the round-trip
 * cost of a PING (printed, not asserted: the machine is shared). */
static void test_many_sessions_and_latency(void **state) {
  const char *args[] = {"--listen", "tcp://127.0.0.1:0", "--listen", NULL, NULL};
  char unix_uri[160];
  snprintf(unix_uri, sizeof unix_uri, "unix://%s", sock_path);
  args[3] = unix_uri;
  server s;
  server_start(&s, 2, args);
  enum { K = 16 };
  client c[K];
  uint64_t d[K];
  for (int i = 0; i < K; i++) {
    client_connect(&c[i], s.uris[i % 2]);
    assert_int_equal(hello(&c[i], NULL), 0);
    assert_int_equal(u64_call(&c[i], RGPU_OP_MEM_ALLOC, 64), 0);
    memcpy(&d[i], c[i].in.data, 8);
  }
  for (int i = 0; i < K; i++) {
    rgpu_buf f;
    rgpu_buf_init(&f);
    rgpu_msg_memset_req m = {.dst = d[i], .value = (uint32_t)i, .elem_size = 4, .count = 16};
    rgpu_msg_memset_req_encode(&f, &m);
    assert_int_equal(call(&c[i], RGPU_OP_MEMSET, &f, NULL, 0), 0);
    rgpu_buf_free(&f);
  }
  for (int i = 0; i < K; i++) {
    rgpu_buf f;
    rgpu_buf_init(&f);
    rgpu_msg_memcpy_dtoh_req q = {.src = d[i], .size = 64};
    rgpu_msg_memcpy_dtoh_req_encode(&f, &q);
    assert_int_equal(call(&c[i], RGPU_OP_MEMCPY_DTOH, &f, NULL, 0), 0);
    uint32_t v[16];
    memcpy(v, c[i].in.data, 64);
    for (int k = 0; k < 16; k++) assert_int_equal(v[k], (uint32_t)i);
    rgpu_buf_free(&f);
  }
  for (int t = 0; t < 2; t++) {
    enum { P = 2000 };
    uint64_t t0 = rgpu_clock_ns();
    for (int k = 0; k < P; k++) assert_int_equal(ping(&c[t]), 0);
    double us = (double)rgpu_clock_elapsed_ns(t0) / 1e3;
    print_message("PING round trip over %s: %.1f us\n", t ? "unix" : "tcp", us / P);
  }
  for (int i = 0; i < K; i++) client_close(&c[i]);
  assert_int_equal(server_stop(&s), 0);
}

static void test_cli_errors(void **state) {
  /* Each must fail with a usage error, not run and not crash. */
  const char *cases[][5] = {
      {"--listen", "bogus://x", NULL},
      {"--device", "tpu", "--listen", "tcp://127.0.0.1:0", NULL},
      {"--listen", "tls://127.0.0.1:0", NULL},
      {"--mem-quota", "lots", "--listen", "tcp://127.0.0.1:0", NULL},
      {NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    pid_t pid = fork();
    if (pid == 0) {
      int dn = open("/dev/null", O_WRONLY);
      dup2(dn, 2);
      const char *argv[7] = {server_bin};
      for (int k = 0; k < 5 && cases[i][k]; k++) argv[k + 1] = cases[i][k];
      execv(argv[0], (char **)argv);
      _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st));
    assert_true(WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 127);
  }
}

static int setup(void **state) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/rgpu_listener_test.XXXXXX");
  if (!mkdtemp(tmpdir)) return -1;
  snprintf(sock_path, sizeof sock_path, "%s/srv.sock", tmpdir);
  char self[900];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  self[n > 0 ? n : 0] = 0;
  char *slash = strrchr(self, '/');
  if (slash) *slash = 0;
  snprintf(driver_path, sizeof driver_path, "%s/../lib/librgpu_test_driver.so", self);
  snprintf(server_bin, sizeof server_bin, "%s/rgpu-server", self);
  snprintf(softgpu_lib, sizeof softgpu_lib, "%s/../lib/libsoftgpu.so", self);
  signal(SIGPIPE, SIG_IGN);
  return 0;
}
static int teardown(void **state) {
  for (int i = 0; i < nlive; i++)
    if (kill(live_servers[i], 0) == 0 && waitpid(live_servers[i], NULL, WNOHANG) == 0) {
      kill(live_servers[i], SIGKILL);
      waitpid(live_servers[i], NULL, 0);
    }
  unlink(sock_path);
  rmdir(tmpdir);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hello_ping_tcp_unix),
      cmocka_unit_test(test_token),
      cmocka_unit_test(test_isolation_and_garbage),
      cmocka_unit_test(test_max_sessions),
      cmocka_unit_test(test_slowloris),
      cmocka_unit_test(test_cli_errors),
      cmocka_unit_test(test_stream_waits),
      cmocka_unit_test(test_batch),
      cmocka_unit_test(test_many_sessions_and_latency),
      cmocka_unit_test(test_stream_waits_softgpu),
      cmocka_unit_test(test_stream_waits_cuda),
      cmocka_unit_test(test_bulk_and_tls),
      cmocka_unit_test(test_forkserver_death),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
