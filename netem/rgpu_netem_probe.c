/* rgpu-netem-probe: measures a link the way the netem tests and benchmark
 * need it: UDP ping-pong with per-probe loss accounting, TCP ping-pong and
 * TCP bulk goodput measured at the receiver.  Results are one JSON object.
 *
 *   rgpu-netem-probe server [--bind ADDR] --port P      UDP echo + TCP on P
 *   rgpu-netem-probe udp-ping --to ADDR:P [--count N] [--interval-us I]
 *                    [--size B] [--wait-ms W] [--window-ms A:B] [--out F]
 *   rgpu-netem-probe tcp-ping --to ADDR:P [--count N] [--size B] [--out F]
 *   rgpu-netem-probe tcp-bulk --to ADDR:P [--seconds S] [--cc ALGO] [--out F]
 *
 * Times in udp-ping output are relative to RGPU_NETEM_EPOCH_NS when the
 * emulator sets it (the origin of its outage schedule), else to the start. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rgpu_clock.h"

#define PROBE_MAGIC 0x52474e50u /* "RGNP" */
#define MAX_COUNT 10000000u

static void die(const char *fmt, const char *arg) {
  fprintf(stderr, "rgpu-netem-probe: ");
  fprintf(stderr, fmt, arg);
  fputc('\n', stderr);
  exit(2);
}

static void usage(void) {
  fputs("usage: rgpu-netem-probe server [--bind ADDR] --port P\n"
        "       rgpu-netem-probe udp-ping --to ADDR:PORT [--count N] [--interval-us I]\n"
        "                        [--size B] [--wait-ms W] [--window-ms A:B] [--out FILE]\n"
        "       rgpu-netem-probe tcp-ping --to ADDR:PORT [--count N] [--size B] [--out FILE]\n"
        "       rgpu-netem-probe tcp-bulk --to ADDR:PORT [--seconds S] [--cc ALGO] [--out FILE]\n",
        stderr);
  exit(2);
}

typedef struct {
  const char *bind_addr, *to, *out, *cc;
  unsigned port;
  uint64_t count, interval_us, size, wait_ms;
  double seconds;
  int have_window;
  double win_a_ms, win_b_ms;
} opts;

static uint64_t num(const char *s, const char *what) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end || *s == '-') die("bad number for %s", what);
  return v;
}

static void parse(int argc, char **argv, opts *o) {
  memset(o, 0, sizeof *o);
  o->bind_addr = "0.0.0.0";
  o->count = 1000;
  o->interval_us = 1000;
  o->size = 64;
  o->wait_ms = 1000;
  o->seconds = 3;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    if (i + 1 >= argc) die("%s needs a value", a);
    const char *v = argv[++i];
    if (!strcmp(a, "--bind")) o->bind_addr = v;
    else if (!strcmp(a, "--port")) o->port = (unsigned)num(v, a);
    else if (!strcmp(a, "--to")) o->to = v;
    else if (!strcmp(a, "--out")) o->out = v;
    else if (!strcmp(a, "--cc")) o->cc = v;
    else if (!strcmp(a, "--count")) o->count = num(v, a);
    else if (!strcmp(a, "--interval-us")) o->interval_us = num(v, a);
    else if (!strcmp(a, "--size")) o->size = num(v, a);
    else if (!strcmp(a, "--wait-ms")) o->wait_ms = num(v, a);
    else if (!strcmp(a, "--seconds")) {
      char *end;
      o->seconds = strtod(v, &end);
      if (end == v || *end || o->seconds <= 0 || o->seconds > 86400)
        die("bad --seconds %s", v);
    } else if (!strcmp(a, "--window-ms")) {
      if (sscanf(v, "%lf:%lf", &o->win_a_ms, &o->win_b_ms) != 2 ||
          o->win_b_ms < o->win_a_ms)
        die("--window-ms %s: expected A:B with A <= B", v);
      o->have_window = 1;
    } else
      die("unknown option %s", a);
  }
  if (o->count == 0 || o->count > MAX_COUNT) die("%s", "--count must be 1..10000000");
  if (o->size < 16 || o->size > 65000) die("%s", "--size must be 16..65000");
}

static struct sockaddr_in target(const char *to) {
  struct sockaddr_in sa = {.sin_family = AF_INET};
  char host[64];
  const char *colon = to ? strrchr(to, ':') : NULL;
  if (!colon || (size_t)(colon - to) >= sizeof host) die("--to %s: expected ADDR:PORT", to ? to : "(missing)");
  memcpy(host, to, (size_t)(colon - to));
  host[colon - to] = 0;
  if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) die("--to %s: bad IPv4 address", to);
  uint64_t port = num(colon + 1, "port");
  if (port == 0 || port > 65535) die("--to %s: bad port", to);
  sa.sin_port = htons((uint16_t)port);
  return sa;
}

static FILE *outfile(const opts *o) {
  if (!o->out) return stdout;
  FILE *f = fopen(o->out, "w");
  if (!f) die("cannot write %s", o->out);
  return f;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double pct(const double *sorted, size_t n, double p) {
  if (!n) return 0;
  size_t i = (size_t)(p * (double)(n - 1) + 0.5);
  return sorted[i < n ? i : n - 1];
}

static void print_rtts(FILE *f, double *rtt, size_t n) {
  qsort(rtt, n, sizeof *rtt, cmp_double);
  double sum = 0;
  for (size_t i = 0; i < n; i++) sum += rtt[i];
  fprintf(f,
          "\"rtt_ms\": {\"min\": %.4f, \"median\": %.4f, \"mean\": %.4f, "
          "\"p90\": %.4f, \"p99\": %.4f, \"max\": %.4f}",
          n ? rtt[0] : 0, pct(rtt, n, 0.5), n ? sum / (double)n : 0,
          pct(rtt, n, 0.9), pct(rtt, n, 0.99), n ? rtt[n - 1] : 0);
}

/* ---- server ------------------------------------------------------------ */

static int read_full(int fd, void *buf, size_t len) {
  size_t got = 0;
  while (got < len) {
    ssize_t n = read(fd, (char *)buf + got, len - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    got += (size_t)n;
  }
  return 0;
}

static int write_full(int fd, const void *buf, size_t len) {
  size_t put = 0;
  while (put < len) {
    ssize_t n = write(fd, (const char *)buf + put, len - put);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    put += (size_t)n;
  }
  return 0;
}

static void *tcp_conn(void *arg) {
  int fd = (int)(intptr_t)arg;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  static __thread char buf[1 << 17];
  ssize_t n = read(fd, buf, sizeof buf);
  if (n > 0 && buf[0] == 'E') {
    if (n > 1 && write_full(fd, buf + 1, (size_t)n - 1)) goto done;
    while ((n = read(fd, buf, sizeof buf)) > 0)
      if (write_full(fd, buf, (size_t)n)) break;
  } else if (n > 0 && buf[0] == 'B') {
    uint64_t bytes = (uint64_t)n - 1, first = rgpu_clock_ns(), last = first;
    while ((n = read(fd, buf, sizeof buf)) > 0) {
      bytes += (uint64_t)n;
      last = rgpu_clock_ns();
    }
    /* Measured at the receiver, from the first to the last byte, so that
     * data still queued in the emulator when the sender stops counts. */
    uint64_t rep[2] = {bytes, last - first};
    write_full(fd, rep, sizeof rep);
  }
done:
  close(fd);
  return NULL;
}

static int run_server(const opts *o) {
  if (!o->port || o->port > 65535) die("%s", "server needs --port 1..65535");
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o->port)};
  if (inet_pton(AF_INET, o->bind_addr, &sa.sin_addr) != 1) die("bad --bind %s", o->bind_addr);
  int one = 1;
  int u = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  int t = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int big = 8 << 20;
  setsockopt(u, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  setsockopt(t, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(u, (struct sockaddr *)&sa, sizeof sa) < 0 ||
      bind(t, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(t, 64) < 0) {
    fprintf(stderr, "rgpu-netem-probe: bind %s:%u: %s\n", o->bind_addr, o->port,
            strerror(errno));
    return 1;
  }
  struct pollfd p[2] = {{.fd = u, .events = POLLIN}, {.fd = t, .events = POLLIN}};
  char buf[65536];
  for (;;) {
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    if (p[0].revents & POLLIN) {
      for (int k = 0; k < 64; k++) {
        struct sockaddr_in from;
        socklen_t fl = sizeof from;
        ssize_t n = recvfrom(u, buf, sizeof buf, MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
        if (n < 0) break;
        sendto(u, buf, (size_t)n, 0, (struct sockaddr *)&from, fl);
      }
    }
    if (p[1].revents & POLLIN) {
      int c = accept4(t, NULL, NULL, SOCK_CLOEXEC);
      if (c < 0) continue;
      pthread_t th;
      pthread_attr_t at;
      pthread_attr_init(&at);
      pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
      if (pthread_create(&th, &at, tcp_conn, (void *)(intptr_t)c)) close(c);
      pthread_attr_destroy(&at);
    }
  }
}

/* ---- udp-ping ---------------------------------------------------------- */

typedef struct {
  uint32_t magic, seq;
  uint64_t sent_ns;
} probe_hdr;

static int run_udp_ping(const opts *o) {
  struct sockaddr_in sa = target(o->to);
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  int big = 8 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
    fprintf(stderr, "rgpu-netem-probe: connect %s: %s\n", o->to, strerror(errno));
    return 1;
  }
  size_t n = (size_t)o->count;
  uint64_t *sent = calloc(n, sizeof *sent);
  double *rtt = calloc(n, sizeof *rtt);
  uint8_t *got = calloc(n, 1);
  char *buf = calloc(1, 65536);
  if (!sent || !rtt || !got || !buf) die("%s", "out of memory");
  const char *ep = getenv("RGPU_NETEM_EPOCH_NS");
  uint64_t start = rgpu_clock_ns();
  uint64_t epoch = ep ? strtoull(ep, NULL, 10) : start;
  if (!epoch || epoch > start) epoch = start;
  uint64_t interval = o->interval_us * 1000ull;
  size_t next = 0, received = 0, dups = 0, reordered = 0;
  uint32_t max_seq_seen = 0;
  uint64_t bytes = 0, first_rx = 0, last_rx = 0, end_wait = 0;
  for (;;) {
    uint64_t t = rgpu_clock_ns();
    while (next < n && t >= start + next * interval) {
      probe_hdr *h = (probe_hdr *)buf;
      h->magic = PROBE_MAGIC;
      h->seq = (uint32_t)next;
      h->sent_ns = rgpu_clock_ns();
      sent[next] = h->sent_ns;
      if (send(fd, buf, (size_t)o->size, 0) < 0 && errno != ECONNREFUSED &&
          errno != ENOBUFS && errno != EAGAIN)
        fprintf(stderr, "rgpu-netem-probe: send: %s\n", strerror(errno));
      next++;
      if (next == n) end_wait = rgpu_clock_ns() + o->wait_ms * 1000000ull;
    }
    if (next == n && (received == n || rgpu_clock_ns() >= end_wait)) break;
    uint64_t wake = next < n ? start + next * interval : end_wait;
    t = rgpu_clock_ns();
    uint64_t w = wake > t ? wake - t : 0;
    struct timespec ts = {.tv_sec = (time_t)(w / 1000000000ull), .tv_nsec = (long)(w % 1000000000ull)};
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (ppoll(&p, 1, &ts, NULL) <= 0) continue;
    for (;;) {
      ssize_t r = recv(fd, buf, 65536, MSG_DONTWAIT);
      if (r < 0) break;
      uint64_t tr = rgpu_clock_ns();
      probe_hdr *h = (probe_hdr *)buf;
      if ((size_t)r < sizeof *h || h->magic != PROBE_MAGIC || h->seq >= n) continue;
      if (got[h->seq]) {
        dups++;
        continue;
      }
      if (h->seq < max_seq_seen) reordered++;
      if (h->seq > max_seq_seen) max_seq_seen = h->seq;
      got[h->seq] = 1;
      rtt[received++] = (double)(tr - sent[h->seq]) / 1e6;
      if (!first_rx) first_rx = tr;
      last_rx = tr;
      bytes += (uint64_t)r;
    }
  }

  size_t bursts = 0, burst_sum = 0, burst_max = 0, run = 0;
  size_t win_sent = 0, win_recv = 0, out_sent = 0, out_recv = 0;
  for (size_t i = 0; i <= n; i++) {
    if (i < n && !got[i]) {
      run++;
    } else if (run) {
      bursts++;
      burst_sum += run;
      if (run > burst_max) burst_max = run;
      run = 0;
    }
    if (i < n && o->have_window) {
      double tms = (double)(sent[i] - epoch) / 1e6;
      if (tms >= o->win_a_ms && tms <= o->win_b_ms) {
        win_sent++;
        win_recv += got[i];
      } else {
        out_sent++;
        out_recv += got[i];
      }
    }
  }
  FILE *f = outfile(o);
  size_t lost = n - received;
  fprintf(f, "{\"mode\": \"udp-ping\", \"sent\": %zu, \"received\": %zu, \"lost\": %zu, "
             "\"loss\": %.6f, \"duplicates\": %zu, \"reordered\": %zu, ",
          n, received, lost, (double)lost / (double)n, dups, reordered);
  fprintf(f, "\"bursts\": {\"count\": %zu, \"mean_len\": %.4f, \"max_len\": %zu}, ", bursts,
          bursts ? (double)burst_sum / (double)bursts : 0.0, burst_max);
  double span = (double)(last_rx - first_rx) / 1e9;
  fprintf(f, "\"rx_goodput_mbit\": %.4f, \"start_ms\": %.3f, ",
          span > 0 ? (double)bytes * 8 / span / 1e6 : 0.0, (double)(start - epoch) / 1e6);
  if (o->have_window)
    fprintf(f, "\"window\": {\"sent\": %zu, \"received\": %zu}, "
               "\"outside\": {\"sent\": %zu, \"received\": %zu}, ",
            win_sent, win_recv, out_sent, out_recv);
  fputs("\"lost_t_ms\": [", f);
  size_t shown = 0;
  for (size_t i = 0; i < n && shown < 1000; i++)
    if (!got[i]) fprintf(f, "%s%.3f", shown++ ? ", " : "", (double)(sent[i] - epoch) / 1e6);
  fputs("], ", f);
  print_rtts(f, rtt, received);
  fputs("}\n", f);
  if (f != stdout) fclose(f);
  free(sent);
  free(rtt);
  free(got);
  free(buf);
  return 0;
}

/* ---- TCP clients ------------------------------------------------------- */

static int tcp_connect(const opts *o) {
  struct sockaddr_in sa = target(o->to);
  uint64_t give_up = rgpu_clock_ns() + 5000000000ull;
  for (;;) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (o->cc && setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, o->cc, (socklen_t)strlen(o->cc)) < 0) {
      fprintf(stderr, "rgpu-netem-probe: congestion control %s: %s\n", o->cc, strerror(errno));
      exit(1);
    }
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) return fd;
    int e = errno;
    close(fd);
    /* The server may still be starting when no ready-wait was given. */
    if (e != ECONNREFUSED || rgpu_clock_ns() > give_up) {
      fprintf(stderr, "rgpu-netem-probe: connect %s: %s\n", o->to, strerror(e));
      exit(1);
    }
    usleep(10000);
  }
}

static int run_tcp_ping(const opts *o) {
  int fd = tcp_connect(o);
  size_t n = (size_t)o->count, len = (size_t)o->size;
  char *buf = calloc(1, len);
  double *rtt = calloc(n, sizeof *rtt);
  if (!buf || !rtt) die("%s", "out of memory");
  if (write_full(fd, "E", 1)) die("%s", "tcp-ping: write failed");
  for (size_t i = 0; i < n; i++) {
    uint64_t t = rgpu_clock_ns();
    if (write_full(fd, buf, len) || read_full(fd, buf, len)) die("%s", "tcp-ping: connection lost");
    rtt[i] = (double)(rgpu_clock_ns() - t) / 1e6;
  }
  close(fd);
  FILE *f = outfile(o);
  fprintf(f, "{\"mode\": \"tcp-ping\", \"count\": %zu, \"size\": %zu, ", n, len);
  print_rtts(f, rtt, n);
  fputs("}\n", f);
  if (f != stdout) fclose(f);
  free(buf);
  free(rtt);
  return 0;
}

static int run_tcp_bulk(const opts *o) {
  int fd = tcp_connect(o);
  static char buf[1 << 16];
  buf[0] = 'B';
  uint64_t start = rgpu_clock_ns(), stop = start + (uint64_t)(o->seconds * 1e9), sent = 0;
  while (rgpu_clock_ns() < stop) {
    ssize_t w = write(fd, buf, sizeof buf);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) die("%s", "tcp-bulk: connection lost");
    sent += (uint64_t)w;
    buf[0] = 0;
  }
  shutdown(fd, SHUT_WR);
  uint64_t rep[2];
  if (read_full(fd, rep, sizeof rep)) die("%s", "tcp-bulk: no report from the server");
  double secs = (double)rep[1] / 1e9;
  FILE *f = outfile(o);
  fprintf(f, "{\"mode\": \"tcp-bulk\", \"sent_bytes\": %" PRIu64 ", \"bytes\": %" PRIu64
             ", \"seconds\": %.6f, \"goodput_mbit\": %.3f, \"sender_wall_s\": %.6f}\n",
          sent, rep[0], secs, secs > 0 ? (double)rep[0] * 8 / secs / 1e6 : 0.0,
          (double)(rgpu_clock_ns() - start) / 1e9);
  if (f != stdout) fclose(f);
  close(fd);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) usage();
  signal(SIGPIPE, SIG_IGN);
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  opts o;
  parse(argc, argv, &o);
  if (!strcmp(argv[1], "server")) return run_server(&o);
  if (!strcmp(argv[1], "udp-ping")) return run_udp_ping(&o);
  if (!strcmp(argv[1], "tcp-ping")) return run_tcp_ping(&o);
  if (!strcmp(argv[1], "tcp-bulk")) return run_tcp_bulk(&o);
  usage();
}
