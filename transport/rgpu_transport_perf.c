/* rgpu-transport-perf: the raw-transport baseline for the benchmarks.
 *
 *   rgpu-transport-perf --server URI [--cert F --key F] [--client-ca F] [--cc ALGO] [--direct]
 *   rgpu-transport-perf --client URI [--ca F] [--mode ping|bulk|down|all]
 *                       [-n ITER] [--size BYTES] [--bytes TOTAL] [--cc ALGO] [--json]
 *
 * ping: SIZE-byte request, SIZE-byte echo, ITER times; reports median/p99.
 * bulk: TOTAL bytes client -> server; the server acknowledges the last byte,
 *       so the time includes one round trip (negligible for large TOTAL).
 * down: TOTAL bytes server -> client.
 * The server prints "listening on ADDRESS" once ready (port 0 picks one).
 * --direct (quic:// only): the server terminates QUIC in its serving
 * thread, as a worker does on a session's own port (rgpu_quic_direct_accept:
 * no relay thread), one client at a time on URI's port. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rgpu_clock.h"
#include "rgpu_transport.h"

enum { MODE_PING = 1, MODE_BULK = 2, MODE_DOWN = 3 };

/* Request header; little-endian on the wire (both ends are this tool). */
typedef struct {
  uint32_t magic; /* 'RGTP' */
  uint32_t mode;
  uint32_t msglen;
  uint32_t pad;
  uint64_t count; /* ping iterations, or bulk bytes */
} perf_hdr;
#define PERF_MAGIC 0x50544752u

/* Bulk I/O size: rgpu's own chunk (RGPU_CHUNK_BYTES, 4 MiB), so the raw
 * figure is the transport's limit for the writes rgpu makes, not one
 * lowered by smaller system calls. */
#define PERF_BULK_IO (4u << 20)

static int write_all(rgpu_conn *c, const void *p, size_t n) {
  struct iovec v = {(void *)p, n};
  return rgpu_conn_writev_all(c, &v, 1);
}

static void *serve_conn(void *arg) {
  rgpu_conn *c = arg;
  perf_hdr h;
  char *buf = malloc(PERF_BULK_IO);
  while (buf && rgpu_conn_read_exact(c, &h, sizeof h) == 0) {
    if (h.magic != PERF_MAGIC || h.msglen > (1u << 20)) {
      fprintf(stderr, "rgpu-transport-perf: bad request from %s\n", rgpu_conn_peer(c));
      break;
    }
    int rc = 0;
    if (h.mode == MODE_PING) {
      for (uint64_t i = 0; i < h.count && !rc; i++) {
        rc = rgpu_conn_read_exact(c, buf, h.msglen);
        if (!rc) rc = write_all(c, buf, h.msglen);
      }
    } else if (h.mode == MODE_BULK) {
      uint64_t left = h.count;
      while (left && !rc) {
        ssize_t r = rgpu_conn_read_some(c, buf, left < PERF_BULK_IO ? left : PERF_BULK_IO);
        if (r <= 0) rc = -1;
        else left -= (uint64_t)r;
      }
      uint64_t ack = h.count;
      if (!rc) rc = write_all(c, &ack, sizeof ack);
    } else if (h.mode == MODE_DOWN) {
      memset(buf, 0x5a, PERF_BULK_IO);
      uint64_t left = h.count;
      while (left && !rc) {
        size_t n = left < PERF_BULK_IO ? left : PERF_BULK_IO;
        rc = write_all(c, buf, n);
        left -= n;
      }
    } else {
      break;
    }
    if (rc) break;
  }
  free(buf);
  rgpu_conn_close(c);
  return NULL;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void usage(void) {
  fprintf(stderr,
          "usage: rgpu-transport-perf --server URI [--cert F --key F] [--client-ca F] [--cc ALGO]\n"
          "              [--direct]\n"
          "       rgpu-transport-perf --client URI [--ca F] [--cert F --key F] [--server-name N]\n"
          "              [--mode ping|bulk|down|all] [-n ITER] [--size BYTES] [--bytes TOTAL]\n"
          "              [--cc ALGO] [--max-pto-ms MS] [--idle-ms MS] [--json]\n");
}

int main(int argc, char **argv) {
  const char *server = NULL, *client = NULL, *mode = "all";
  rgpu_transport_opts o = {0};
  long iters = 10000, size = 64;
  unsigned long long bytes = 1ull << 30;
  int json = 0, direct = 0;
  signal(SIGPIPE, SIG_IGN);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define TAKE() (v ? (i++, v) : (usage(), exit(2), (const char *)NULL))
    if (!strcmp(a, "--server")) server = TAKE();
    else if (!strcmp(a, "--client")) client = TAKE();
    else if (!strcmp(a, "--cert")) o.cert_file = TAKE();
    else if (!strcmp(a, "--key")) o.key_file = TAKE();
    else if (!strcmp(a, "--ca")) o.ca_file = TAKE();
    else if (!strcmp(a, "--client-ca")) o.client_ca_file = TAKE();
    else if (!strcmp(a, "--server-name")) o.server_name = TAKE();
    else if (!strcmp(a, "--cc")) o.cc_algo = TAKE();
    else if (!strcmp(a, "--mode")) mode = TAKE();
    else if (!strcmp(a, "-n")) iters = atol(TAKE());
    else if (!strcmp(a, "--size")) size = atol(TAKE());
    else if (!strcmp(a, "--bytes")) bytes = strtoull(TAKE(), NULL, 0);
    else if (!strcmp(a, "--json")) json = 1;
    else if (!strcmp(a, "--direct")) direct = 1;
    else if (!strcmp(a, "--max-pto-ms")) o.quic_max_pto_ms = atoi(TAKE());
    else if (!strcmp(a, "--idle-ms")) o.idle_timeout_ms = atoi(TAKE());
    else {
      usage();
      return 2;
    }
  }
  if (!o.ca_file) o.ca_file = getenv("RGPU_CA");
  char err[512];
  if (server && direct) {
    rgpu_uri u;
    if (rgpu_uri_parse(server, &u, err, sizeof err) || strcmp(rgpu_uri_scheme_name(u.scheme), "quic")) {
      fprintf(stderr, "rgpu-transport-perf: --direct needs a quic:// URI\n");
      return 2;
    }
    for (int first = 1;; first = 0) {
      int fd;
      uint16_t port;
      if (rgpu_quic_direct_socket(u.host, u.port, u.port, &fd, &port, err, sizeof err)) {
        fprintf(stderr, "rgpu-transport-perf: %s\n", err);
        return 1;
      }
      if (first) {
        printf("listening on quic://%s:%u (direct)\n", u.host, (unsigned)port);
        fflush(stdout);
      }
      u.port = port;
      rgpu_conn *c;
      if (rgpu_quic_direct_accept(fd, &o, -1, -1, &c, err, sizeof err)) {
        fprintf(stderr, "rgpu-transport-perf: %s\n", err);
        continue;
      }
      serve_conn(c); /* one at a time: the next socket takes the same port */
    }
  }
  if (server) {
    rgpu_listener *l;
    if (rgpu_listener_open(server, &o, &l, err, sizeof err)) {
      fprintf(stderr, "rgpu-transport-perf: %s\n", err);
      return 1;
    }
    printf("listening on %s\n", rgpu_listener_address(l));
    fflush(stdout);
    for (;;) {
      rgpu_conn *c;
      if (rgpu_listener_accept(l, &c, err, sizeof err)) {
        fprintf(stderr, "rgpu-transport-perf: %s\n", err);
        continue;
      }
      pthread_t th;
      pthread_create(&th, NULL, serve_conn, c);
      pthread_detach(th);
    }
  }
  if (!client || size < 1 || size > (1 << 20) || iters < 1) {
    usage();
    return 2;
  }
  double t0 = rgpu_clock_s();
  rgpu_conn *c;
  if (rgpu_conn_connect(client, &o, &c, err, sizeof err)) {
    fprintf(stderr, "rgpu-transport-perf: %s\n", err);
    return 1;
  }
  double connect_ms = (rgpu_clock_s() - t0) * 1e3;
  const char *tn = rgpu_conn_transport_name(c);
  if (json)
    printf("{\"transport\":\"%s\",\"test\":\"connect\",\"ms\":%.3f}\n", tn, connect_ms);
  else
    printf("%-5s connect            %9.3f ms\n", tn, connect_ms);
  int all = !strcmp(mode, "all");
  int rc = 0;
  if (all || !strcmp(mode, "ping")) {
    perf_hdr h = {PERF_MAGIC, MODE_PING, (uint32_t)size, 0, (uint64_t)iters};
    char *buf = calloc(1, (size_t)size);
    double *lat = malloc(sizeof(double) * (size_t)iters);
    rc = write_all(c, &h, sizeof h);
    for (long i = 0; i < iters && !rc; i++) {
      double s = rgpu_clock_s();
      rc = write_all(c, buf, (size_t)size);
      if (!rc) rc = rgpu_conn_read_exact(c, buf, (size_t)size);
      lat[i] = (rgpu_clock_s() - s) * 1e6;
    }
    if (!rc) {
      qsort(lat, (size_t)iters, sizeof *lat, cmp_double);
      double med = lat[iters / 2], p99 = lat[(size_t)((double)iters * 0.99)];
      /* max: under an emulated outage, the one call that waited it out. */
      double mx = lat[iters - 1];
      if (json)
        printf("{\"transport\":\"%s\",\"test\":\"ping\",\"size\":%ld,\"n\":%ld,\"median_us\":%.2f,"
               "\"p99_us\":%.2f,\"min_us\":%.2f,\"max_us\":%.2f}\n", tn, size, iters, med, p99,
               lat[0], mx);
      else
        printf("%-5s ping %5ld B x %-6ld median %8.2f us  p99 %8.2f us  min %8.2f us  max %8.2f us\n",
               tn, size, iters, med, p99, lat[0], mx);
    }
    free(buf);
    free(lat);
  }
  if (!rc && (all || !strcmp(mode, "bulk"))) {
    perf_hdr h = {PERF_MAGIC, MODE_BULK, 0, 0, bytes};
    size_t chunk = PERF_BULK_IO;
    char *buf = malloc(chunk);
    memset(buf, 0xa5, chunk);
    double s = rgpu_clock_s();
    rc = write_all(c, &h, sizeof h);
    for (unsigned long long left = bytes; left && !rc;) {
      size_t n = left < chunk ? (size_t)left : chunk;
      rc = write_all(c, buf, n);
      left -= n;
    }
    uint64_t ack = 0;
    if (!rc) rc = rgpu_conn_read_exact(c, &ack, sizeof ack);
    double el = rgpu_clock_s() - s;
    if (!rc) {
      if (json)
        printf("{\"transport\":\"%s\",\"test\":\"bulk\",\"bytes\":%llu,\"seconds\":%.4f,"
               "\"gbit_s\":%.3f}\n", tn, bytes, el, bytes * 8 / el / 1e9);
      else
        printf("%-5s bulk up   %6.0f MiB  %8.3f s  %7.2f Gbit/s\n", tn, bytes / 1048576.0, el,
               bytes * 8 / el / 1e9);
    }
    free(buf);
  }
  if (!rc && (all || !strcmp(mode, "down"))) {
    perf_hdr h = {PERF_MAGIC, MODE_DOWN, 0, 0, bytes};
    size_t chunk = PERF_BULK_IO;
    char *buf = malloc(chunk);
    double s = rgpu_clock_s();
    rc = write_all(c, &h, sizeof h);
    for (unsigned long long left = bytes; left && !rc;) {
      ssize_t r = rgpu_conn_read_some(c, buf, left < chunk ? (size_t)left : chunk);
      if (r <= 0) rc = r ? (int)r : RGPU_T_ECLOSED;
      else left -= (unsigned long long)r;
    }
    double el = rgpu_clock_s() - s;
    if (!rc) {
      if (json)
        printf("{\"transport\":\"%s\",\"test\":\"down\",\"bytes\":%llu,\"seconds\":%.4f,"
               "\"gbit_s\":%.3f}\n", tn, bytes, el, bytes * 8 / el / 1e9);
      else
        printf("%-5s bulk down %6.0f MiB  %8.3f s  %7.2f Gbit/s\n", tn, bytes / 1048576.0, el,
               bytes * 8 / el / 1e9);
    }
    free(buf);
  }
  rgpu_quic_info qi;
  char qerr[200];
  if (!rc && rgpu_conn_quic_info(c, &qi, qerr, sizeof qerr) == 0) {
    /* What the QUIC connection ran with: the benchmarks print it beside
     * the figures (congestion controller, probe cap, probes it fired). */
    if (json)
      printf("{\"transport\":\"%s\",\"test\":\"quic_info\",\"cc\":\"%s\",\"max_pto_ms\":%llu,"
             "\"idle_timeout_ms\":%llu,\"srtt_us\":%llu,\"min_rtt_us\":%llu,\"cwnd\":%llu,"
             "\"capped_probes\":%llu,\"max_udp_payload\":%llu}\n",
             tn, qi.cc, (unsigned long long)qi.max_pto_ms, (unsigned long long)qi.idle_timeout_ms,
             (unsigned long long)qi.srtt_us, (unsigned long long)qi.min_rtt_us,
             (unsigned long long)qi.cwnd_bytes, (unsigned long long)qi.capped_probes,
             (unsigned long long)qi.max_udp_payload);
    else
      printf("%-5s cc %s, probe cap %llu ms, srtt %.2f ms, cwnd %llu B, %llu capped probes, "
             "payload %llu B\n", tn, qi.cc, (unsigned long long)qi.max_pto_ms, qi.srtt_us / 1e3,
             (unsigned long long)qi.cwnd_bytes, (unsigned long long)qi.capped_probes,
             (unsigned long long)qi.max_udp_payload);
  }
  if (rc) {
    const char *why = rgpu_conn_error(c);
    fprintf(stderr, "rgpu-transport-perf: transfer failed (%d)%s%s\n", rc, *why ? ": " : "", why);
  }
  rgpu_conn_close(c);
  return rc ? 1 : 0;
}
