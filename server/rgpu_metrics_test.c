/* rgpu_metrics: HTTP request parsing (hostile heads), exposition-format
 * correctness, counts that cross a fork, and an HTTP endpoint that keeps
 * answering while slow or silent clients hold connections. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rgpu_clock.h"
#include "rgpu_frame.h"
#include "rgpu_messages.h"
#include "rgpu_metrics.h"

static int parse(const char *s, int *head) { return rgpu_metrics_http_parse(s, strlen(s), head); }

static void test_http_parse(void **state) {
  (void)state;
  int head = -1;
  assert_int_equal(parse("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", &head), 200);
  assert_int_equal(head, 0);
  assert_int_equal(parse("HEAD /metrics HTTP/1.0\r\n\r\n", &head), 200);
  assert_int_equal(head, 1);
  assert_int_equal(parse("GET /metrics?x=1 HTTP/1.1\n\n", &head), 200); /* bare LF */
  assert_int_equal(parse("GET / HTTP/1.1\r\n\r\n", &head), 404);
  /* HEAD is reported only with a 200 (found by the fuzz target). */
  assert_int_equal(parse("HEAD * HTTP/1.1\r\n\n", &head), 404);
  assert_int_equal(head, 0);
  assert_int_equal(parse("GET /metricsX HTTP/1.1\r\n\r\n", &head), 404);
  assert_int_equal(parse("POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\n", &head), 405);
  assert_int_equal(parse("DELETE /metrics HTTP/1.1\r\n\r\n", &head), 405);
  assert_int_equal(parse("GET /metrics HTTP/2.0\r\n\r\n", &head), 505);
  assert_int_equal(parse("get /metrics HTTP/1.1\r\n\r\n", &head), 400);
  assert_int_equal(parse("GET /metrics\r\n\r\n", &head), 400);
  assert_int_equal(parse("GET  /metrics HTTP/1.1\r\n\r\n", &head), 400);
  assert_int_equal(parse("GET /metrics FTP/1.1\r\n\r\n", &head), 400);
  assert_int_equal(parse("GET /met\x01rics HTTP/1.1\r\n\r\n", &head), 400);
  assert_int_equal(parse("GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n", &head), 400);
  assert_int_equal(parse("GET /metrics HTTP/1.1\r\nA: b\r\n  folded\r\n\r\n", &head), 400);
  assert_int_equal(parse("GET /metrics HTTP/1.1\r\n: empty name\r\n\r\n", &head), 400);
  assert_int_equal(parse("\r\n\r\n", &head), 400);
  /* Incomplete heads wait for more, a bad request line does not. */
  assert_int_equal(parse("", &head), 0);
  assert_int_equal(parse("GET /met", &head), 0);
  assert_int_equal(parse("GET /metrics HTTP/1.1\r\nHost: x\r\n", &head), 0);
  assert_int_equal(parse("BAD\r\n", &head), 400);
  /* Huge: a request line with no end, a head with no end, a long target. */
  char *big = malloc(RGPU_METRICS_MAX_REQUEST + 1);
  memset(big, 'A', RGPU_METRICS_MAX_REQUEST);
  big[RGPU_METRICS_MAX_REQUEST] = 0;
  assert_int_equal(parse(big, &head), 431);
  memcpy(big, "GET /metrics HTTP/1.1\r\nX: ", 26);
  assert_int_equal(parse(big, &head), 431);
  memset(big, 'A', RGPU_METRICS_MAX_REQUEST);
  memcpy(big, "GET /", 5);
  memcpy(big + 3000, " HTTP/1.1\r\n\r\n", 14);
  assert_int_equal(parse(big, &head), 414);
  memset(big, 'A', 3000);
  big[3000] = 0;
  assert_int_equal(parse(big, &head), 400);
  free(big);
  /* Every prefix of a good request is "need more", never a verdict. */
  const char *good = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: */*\r\n\r\n";
  for (size_t n = 0; n < strlen(good); n++) assert_int_equal(rgpu_metrics_http_parse(good, n, &head), 0);
}

/* Checks the text against the exposition format: every sample belongs to a
 * family announced by HELP and TYPE, names and labels are well formed,
 * values parse, histogram buckets are cumulative and end in +Inf == count. */
static void check_exposition(const char *text) {
  char family[128] = "";
  long long prev_bucket = -1, inf_bucket = -1, count = -2;
  const char *p = text;
  int samples = 0;
  while (*p) {
    const char *nl = strchr(p, '\n');
    assert_non_null(nl); /* every line ends in \n */
    char line[600];
    size_t l = (size_t)(nl - p);
    assert_true(l < sizeof line);
    memcpy(line, p, l);
    line[l] = 0;
    p = nl + 1;
    if (!strncmp(line, "# HELP ", 7)) {
      sscanf(line + 7, "%127s", family);
      continue;
    }
    if (!strncmp(line, "# TYPE ", 7)) {
      char name[128], type[32];
      assert_int_equal(sscanf(line + 7, "%127s %31s", name, type), 2);
      assert_string_equal(name, family);
      assert_true(!strcmp(type, "counter") || !strcmp(type, "gauge") || !strcmp(type, "histogram"));
      continue;
    }
    assert_true(line[0] != '#' && line[0] != 0);
    size_t n = strspn(line, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:");
    assert_true(n > 0);
    assert_true(!strncmp(line, family, strlen(family)));
    const char *rest = line + n;
    if (*rest == '{') {
      /* name="value"(,name="value")* } */
      rest++;
      for (;;) {
        size_t k = strspn(rest, "abcdefghijklmnopqrstuvwxyz_");
        assert_true(k > 0);
        rest += k;
        assert_true(rest[0] == '=' && rest[1] == '"');
        rest += 2;
        while (*rest && *rest != '"') {
          assert_true(*rest != '\\' && *rest != '\n');
          rest++;
        }
        assert_true(*rest == '"');
        rest++;
        if (*rest == ',') {
          rest++;
          continue;
        }
        assert_true(*rest == '}');
        rest++;
        break;
      }
    }
    assert_true(*rest == ' ');
    char *end;
    double v = strtod(rest + 1, &end);
    assert_true(*end == 0);
    assert_true(v >= 0);
    samples++;
    if (!strncmp(line, "rgpu_request_duration_seconds_bucket", 36)) {
      assert_true((long long)v >= prev_bucket);
      prev_bucket = (long long)v;
      if (strstr(line, "le=\"+Inf\"")) inf_bucket = (long long)v;
    }
    if (!strncmp(line, "rgpu_request_duration_seconds_count ", 36)) count = (long long)v;
  }
  assert_true(samples > 10);
  assert_true(inf_bucket >= 0);
  assert_int_equal(inf_bucket, count);
}

static char *render(rgpu_metrics *m) {
  rgpu_buf b;
  rgpu_buf_init(&b);
  assert_int_equal(rgpu_metrics_render(m, &b), 0);
  rgpu_buf_put(&b, "", 1);
  return (char *)b.data;
}

static void test_render_and_fork(void **state) {
  (void)state;
  rgpu_metrics *m;
  char err[256];
  assert_int_equal(rgpu_metrics_open("tcp://127.0.0.1:0", &m, err, sizeof err), 0);
  char *t = render(m);
  check_exposition(t);
  assert_non_null(strstr(t, "rgpu_sessions_active 0\n"));
  free(t);

  /* A worker in a real child process: its counts reach the listener
   * through the shared slot, and survive the child. */
  int slot = rgpu_metrics_session_begin(m, 7, "tcp");
  assert_true(slot >= 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    rgpu_metrics_enter_worker(m, slot);
    rgpu_metrics_request(RGPU_OP_HELLO, 0, 20000, 100, 0);
    rgpu_metrics_request(RGPU_OP_MEM_ALLOC, 0, 3000000, 40, 1 << 20);
    rgpu_metrics_request(RGPU_OP_MEM_ALLOC, 2, 1000, 40, 1 << 20);
    rgpu_metrics_request(0x7777, 1, 1000, 24, 1 << 20);
    char b[260];
    struct iovec iov[2] = {{b, 200}, {b, 60}};
    rgpu_metrics_bytes_sent(iov, 2);
    rgpu_metrics_session_end_reason("goodbye");
    _exit(0);
  }
  rgpu_metrics_session_pid(m, slot, pid);
  int st;
  /* Live view first: wait until the child's last request is visible. */
  for (int i = 0; i < 200; i++) {
    t = render(m);
    int seen = strstr(t, "rgpu_errors_all 2\n") != NULL;
    free(t);
    if (seen) break;
    usleep(10000);
  }
  assert_int_equal(waitpid(pid, &st, 0), pid);
  t = render(m);
  check_exposition(t);
  assert_non_null(strstr(t, "rgpu_sessions_active 1\n"));
  assert_non_null(strstr(t, "rgpu_session_device_memory_bytes{session=\"7\",transport=\"tcp\"} 1048576\n"));
  free(t);
  rgpu_metrics_reaped(m, pid, st);
  t = render(m);
  check_exposition(t);
  assert_non_null(strstr(t, "rgpu_sessions_active 0\n"));
  assert_non_null(strstr(t, "rgpu_sessions_total 1\n"));
  assert_non_null(strstr(t, "rgpu_sessions_ended_total{reason=\"goodbye\"} 1\n"));
  assert_non_null(strstr(t, "rgpu_calls_total{op=\"HELLO\"} 1\n"));
  assert_non_null(strstr(t, "rgpu_calls_total{op=\"MEM_ALLOC\"} 2\n"));
  assert_non_null(strstr(t, "rgpu_calls_total{op=\"0x00ff\"} 1\n")); /* opcodes beyond the table */
  assert_non_null(strstr(t, "rgpu_calls_total_all 4\n"));
  /* Time per opcode: 3 ms + 1 us for the two MEM_ALLOCs. */
  assert_non_null(strstr(t, "rgpu_request_seconds_total{op=\"MEM_ALLOC\"} 0.003001000\n"));
  assert_non_null(strstr(t, "rgpu_request_seconds_total{op=\"HELLO\"} 0.000020000\n"));
  assert_non_null(strstr(t, "rgpu_errors_total{code=\"2\"} 1\n"));
  assert_non_null(strstr(t, "rgpu_errors_total{code=\"1\"} 1\n"));
  assert_non_null(strstr(t, "rgpu_bytes_received_total 204\n"));
  assert_non_null(strstr(t, "rgpu_bytes_sent_total 260\n"));
  assert_non_null(strstr(t, "rgpu_request_duration_seconds_bucket{le=\"1e-05\"} 2\n"));
  assert_non_null(strstr(t, "rgpu_request_duration_seconds_bucket{le=\"5e-05\"} 3\n"));
  assert_non_null(strstr(t, "rgpu_request_duration_seconds_bucket{le=\"0.005\"} 4\n"));
  assert_non_null(strstr(t, "rgpu_request_duration_seconds_count 4\n"));
  assert_non_null(strstr(t, "rgpu_device_memory_bytes 0\n"));
  free(t);

  /* A worker killed by a signal, a failed fork, refusals. */
  slot = rgpu_metrics_session_begin(m, 8, "unix");
  pid = fork();
  if (pid == 0) {
    rgpu_metrics_enter_worker(m, slot);
    rgpu_metrics_request(RGPU_OP_PING, 0, 1000, 24, 0);
    pause();
    _exit(0);
  }
  rgpu_metrics_session_pid(m, slot, pid);
  usleep(50000);
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  rgpu_metrics_reaped(m, pid, st);
  rgpu_metrics_session_pid(m, rgpu_metrics_session_begin(m, 9, "tcp"), -1);
  rgpu_metrics_refused(m, "server-full");
  rgpu_metrics_refused(m, "server-full");
  rgpu_metrics_refused(m, "Bad \"name\"\n");
  rgpu_metrics_reaped(m, 424242, 0); /* unknown pid: ignored */
  t = render(m);
  check_exposition(t);
  assert_non_null(strstr(t, "rgpu_sessions_ended_total{reason=\"signal:9\"} 1\n"));
  assert_non_null(strstr(t, "rgpu_sessions_ended_total{reason=\"fork-failed\"} 1\n"));
  assert_non_null(strstr(t, "rgpu_sessions_refused_total{reason=\"server-full\"} 2\n"));
  assert_non_null(strstr(t, "rgpu_sessions_refused_total{reason=\"bad__name__\"} 1\n"));
  assert_non_null(strstr(t, "rgpu_calls_total{op=\"PING\"} 1\n")); /* kept after the kill */
  assert_non_null(strstr(t, "rgpu_sessions_total 3\n"));
  free(t);
  rgpu_metrics_close(m);
}

static int connect_to(const char *addr) {
  int port = atoi(strrchr(addr, ':') + 1);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {0};
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(0x7f000001);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  struct timeval tv = {3, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

/* Sends req, reads to EOF (bounded); returns the HTTP status. */
static int exchange(const char *addr, const void *req, size_t len, char *body, size_t cap) {
  int fd = connect_to(addr);
  if (len) assert_true(send(fd, req, len, MSG_NOSIGNAL) == (ssize_t)len || 1);
  size_t got = 0;
  char tmp[4096];
  ssize_t n;
  while ((n = recv(fd, tmp, sizeof tmp, 0)) > 0) {
    if (body && got + (size_t)n < cap) memcpy(body + got, tmp, (size_t)n);
    got += (size_t)n;
  }
  if (body) body[got < cap ? got : cap - 1] = 0;
  close(fd);
  int code = 0;
  if (body) sscanf(body, "HTTP/1.1 %d", &code);
  return code;
}

static void test_http_endpoint(void **state) {
  (void)state;
  rgpu_metrics *m;
  char err[256];
  assert_int_equal(rgpu_metrics_open("tcp://127.0.0.1:0", &m, err, sizeof err), 0);
  const char *addr = rgpu_metrics_address(m);
  static char body[1 << 16];
  const char get[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  assert_int_equal(exchange(addr, get, sizeof get - 1, body, sizeof body), 200);
  assert_non_null(strstr(body, "Content-Type: text/plain; version=0.0.4"));
  char *text = strstr(body, "\r\n\r\n");
  assert_non_null(text);
  check_exposition(text + 4);
  assert_int_equal(exchange(addr, "HEAD /metrics HTTP/1.1\r\n\r\n", 26, body, sizeof body), 200);
  assert_null(strstr(body, "# HELP"));
  assert_int_equal(exchange(addr, "PUT /metrics HTTP/1.1\r\n\r\n", 25, body, sizeof body), 405);
  assert_int_equal(exchange(addr, "GET /x HTTP/1.1\r\n\r\n", 19, body, sizeof body), 404);
  /* Garbage, a huge head, an early close: answered or dropped, not stuck. */
  char junk[20000];
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (char)(i * 7919u >> 3);
  int code = exchange(addr, junk, sizeof junk, body, sizeof body);
  assert_true((code >= 400 && code < 500) || code == 0);
  memset(junk, 'H', sizeof junk);
  memcpy(junk, "GET /metrics HTTP/1.1\r\nX: ", 26);
  code = exchange(addr, junk, sizeof junk, body, sizeof body);
  assert_true(code == 431 || code == 0); /* 0: reset while we still sent */
  int fd = connect_to(addr);
  send(fd, "GET /me", 7, MSG_NOSIGNAL);
  close(fd);
  usleep(200000); /* let the thread see that EOF before the slots fill up */

  /* Slow clients: every connection slot held by a silent or half-sent
   * request.  A scraper beyond them gets an immediate 503, and once they
   * go away it is served again, all without waiting for the timeouts. */
  int idle[RGPU_METRICS_MAX_CONNS];
  for (int i = 0; i < RGPU_METRICS_MAX_CONNS; i++) {
    idle[i] = connect_to(addr);
    if (i % 2) send(idle[i], "GET /metrics HTTP/1.1\r\nHo", 25, MSG_NOSIGNAL);
  }
  usleep(200000);
  double t0 = rgpu_clock_s();
  code = exchange(addr, get, sizeof get - 1, body, sizeof body);
  assert_int_equal(code, 503);
  assert_true(rgpu_clock_s() - t0 < 1.0);
  for (int i = 0; i < RGPU_METRICS_MAX_CONNS; i++) close(idle[i]);
  usleep(200000);
  t0 = rgpu_clock_s();
  assert_int_equal(exchange(addr, get, sizeof get - 1, body, sizeof body), 200);
  assert_true(rgpu_clock_s() - t0 < 1.0);
  assert_non_null(strstr(body, "rgpu_metrics_http_errors_total "));
  rgpu_metrics_close(m);

  /* Bad --metrics values. */
  assert_int_equal(rgpu_metrics_open("unix:///tmp/x", &m, err, sizeof err), -1);
  assert_non_null(strstr(err, "tcp://"));
  assert_int_equal(rgpu_metrics_open("tcp://", &m, err, sizeof err), -1);
  assert_int_equal(rgpu_metrics_open("nonsense", &m, err, sizeof err), -1);
}

static void test_noop_without_metrics(void **state) {
  (void)state;
  /* Worker-side calls in a process without a slot (tests, the fuzzer). */
  rgpu_metrics_request(RGPU_OP_PING, 0, 1, 1, 1);
  struct iovec iov = {NULL, 0};
  rgpu_metrics_bytes_sent(&iov, 1);
  rgpu_metrics_session_end_reason("eof");
  rgpu_metrics_enter_worker(NULL, 3);
  assert_int_equal(rgpu_metrics_session_begin(NULL, 1, "tcp"), -1);
  rgpu_metrics_session_pid(NULL, 0, 1);
  rgpu_metrics_reaped(NULL, 1, 0);
  rgpu_metrics_refused(NULL, "x");
  rgpu_metrics_close(NULL);
  rgpu_buf b;
  rgpu_buf_init(&b);
  assert_int_equal(rgpu_metrics_render(NULL, &b), -1);
  rgpu_buf_free(&b);
}

/* Image cache events (issue 15) reach the listener like other counts, and
 * the cache's "send the image" answer is not counted as an error. */
static void test_image_cache_events(void **state) {
  (void)state;
  rgpu_metrics *m = NULL;
  char err[256];
  assert_int_equal(rgpu_metrics_open("tcp://127.0.0.1:0", &m, err, sizeof err), 0);
  int slot = rgpu_metrics_session_begin(m, 11, "tcp");
  assert_true(slot >= 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    rgpu_metrics_enter_worker(m, slot);
    rgpu_metrics_image_cache(RGPU_METRICS_IMAGE_MISS);
    rgpu_metrics_request(RGPU_OP_MODULE_LOAD, RGPU_STATUS_IMAGE_NOT_CACHED, 1000, 100, 0);
    rgpu_metrics_image_cache(RGPU_METRICS_IMAGE_STORE);
    rgpu_metrics_request(RGPU_OP_MODULE_LOAD, 0, 1000, 600, 0);
    for (int i = 0; i < 3; i++) rgpu_metrics_image_cache(RGPU_METRICS_IMAGE_HIT);
    rgpu_metrics_image_cache(RGPU_METRICS_IMAGE_CORRUPT);
    rgpu_metrics_image_cache(99); /* ignored */
    _exit(0);
  }
  rgpu_metrics_session_pid(m, slot, pid);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  rgpu_metrics_reaped(m, pid, st);
  char *t = render(m);
  check_exposition(t);
  assert_non_null(strstr(t, "rgpu_image_cache_events_total{event=\"hit\"} 3\n"));
  assert_non_null(strstr(t, "rgpu_image_cache_events_total{event=\"miss\"} 1\n"));
  assert_non_null(strstr(t, "rgpu_image_cache_events_total{event=\"store\"} 1\n"));
  assert_non_null(strstr(t, "rgpu_image_cache_events_total{event=\"corrupt\"} 1\n"));
  assert_non_null(strstr(t, "rgpu_calls_total{op=\"MODULE_LOAD\"} 2\n"));
  assert_non_null(strstr(t, "rgpu_errors_all 0\n"));
  free(t);
  rgpu_metrics_close(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_http_parse),
      cmocka_unit_test(test_render_and_fork),
      cmocka_unit_test(test_http_endpoint),
      cmocka_unit_test(test_noop_without_metrics),
      cmocka_unit_test(test_image_cache_events),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
