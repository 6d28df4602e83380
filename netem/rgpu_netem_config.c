#include "rgpu_netem_config.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}

/* Strict number parsing: the whole string must be the number (an optional
 * trailing '%' is allowed where percentages are expected). */
static int parse_double(const char *s, double *out, int allow_pct) {
  if (!s || !*s) return -1;
  errno = 0;
  char *end;
  double v = strtod(s, &end);
  if (errno || end == s) return -1;
  if (allow_pct && *end == '%') end++;
  if (*end || !isfinite(v)) return -1;
  *out = v;
  return 0;
}

static int parse_u64(const char *s, uint64_t *out) {
  if (!s || !*s || *s == '-') return -1;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno || end == s || *end) return -1;
  *out = v;
  return 0;
}

static uint64_t ms_to_ns(double ms) { return (uint64_t)llround(ms * 1e6); }

static void dir_defaults(rgpu_netem_dir_config *d) {
  memset(d, 0, sizeof *d);
  d->queue_pkts = 1000;
}

void rgpu_netem_print_usage(FILE *out) {
  fputs(
      "usage: rgpu-netem [OPTIONS] -- SERVER_CMD [ARGS...] ::: CLIENT_CMD [ARGS...]\n"
      "       rgpu-netem [OPTIONS] -- ::: CLIENT_CMD [ARGS...]   (client only)\n"
      "\n"
      "Runs SERVER_CMD in a network namespace with address " RGPU_NETEM_SERVER_ADDR
      " and CLIENT_CMD in\n"
      "one with " RGPU_NETEM_CLIENT_ADDR ", joined by an emulated link; exits with the client's status.\n"
      "Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and /dev/net/tun.\n"
      "\n"
      "Link (options after --dir apply to that direction only):\n"
      "  --profile NAME        start from a named profile (--list-profiles)\n"
      "  --dir c2s|s2c|both    direction the following link options apply to\n"
      "  --rtt-ms X            one-way delay X/2\n"
      "  --delay-ms X          one-way delay\n"
      "  --jitter-ms X         jitter amplitude (uniform +-X) or sigma (normal)\n"
      "  --jitter-dist uniform|normal\n"
      "  --reorder             let jitter reorder packets (default: order kept)\n"
      "  --no-reorder\n"
      "  --loss PCT            independent loss, percent per direction\n"
      "  --ge P,R[,H[,K]]      Gilbert-Elliott burst loss, percent: P(G->B),\n"
      "                        P(B->G), loss in Bad (default 100), loss in Good (0)\n"
      "  --no-loss             clear --loss and --ge\n"
      "  --rate-mbit X         rate limit, Mbit/s of IP packets (0: none)\n"
      "  --queue-pkts N        drop-tail queue before the rate limiter (default 1000)\n"
      "  --queue-bytes N       byte limit of that queue (0: none)\n"
      "  --outage T:D          link down (both directions) for D s starting T s\n"
      "                        after the client command starts; repeatable\n"
      "  --client-readdress T  T s after the client starts, give the client\n"
      "                        10.77.0.3 and remove 10.77.0.1 (an address change)\n"
      "Run:\n"
      "  --server-ready-wait tcp:PORT|udp:PORT|MS\n"
      "                        before starting the client, wait until the server\n"
      "                        listens on PORT (TCP) or has bound it (UDP), or MS ms\n"
      "  --server-ready-timeout S   give up waiting after S s (default 10)\n"
      "  --server-grace-ms MS  SIGTERM to SIGKILL delay for the server (default 2000)\n"
      "  --mtu N               link MTU (default 1500)\n"
      "  --seed N              seed of the random loss and jitter (default 1)\n"
      "  --stats FILE          write per-direction counters as JSON at exit\n"
      "  -q, --quiet / -v, --verbose\n"
      "  --list-profiles, -h, --help\n"
      "\n"
      "The commands get RGPU_NETEM_SERVER_ADDR, RGPU_NETEM_CLIENT_ADDR,\n"
      "RGPU_NETEM_SIDE (server|client) and RGPU_NETEM_EPOCH_NS (CLOCK_MONOTONIC\n"
      "time the outage schedule counts from).\n"
      "Exit status: the client's (128+N if killed by signal N); 2 usage error;\n"
      "125 setup failed; 127 a command cannot be run; 128+N stopped by signal N.\n",
      out);
}

void rgpu_netem_describe_dir(const rgpu_netem_dir_config *d, char *buf,
                             size_t len) {
  int n = snprintf(buf, len, "delay %.3f ms", d->delay_ns / 1e6);
  if (d->jitter_ns && n >= 0 && (size_t)n < len)
    n += snprintf(buf + n, len - n, ", jitter %s %.3f ms%s",
                  d->jitter_dist == RGPU_NETEM_JITTER_NORMAL ? "normal" : "+-",
                  d->jitter_ns / 1e6, d->reorder ? " (reordering)" : "");
  if (d->loss > 0 && n >= 0 && (size_t)n < len)
    n += snprintf(buf + n, len - n, ", loss %g%%", d->loss * 100);
  if (d->ge_enabled && n >= 0 && (size_t)n < len) {
    double pb = d->ge_p + d->ge_r > 0 ? d->ge_p / (d->ge_p + d->ge_r) : 0;
    n += snprintf(buf + n, len - n,
                  ", GE p=%g%% r=%g%% h=%g%% k=%g%% (mean loss %.3g%%)",
                  d->ge_p * 100, d->ge_r * 100, d->ge_h * 100, d->ge_k * 100,
                  100 * (pb * d->ge_h + (1 - pb) * d->ge_k));
  }
  if (d->rate_bps > 0 && n >= 0 && (size_t)n < len) {
    n += snprintf(buf + n, len - n, ", rate %g Mbit/s, queue %u pkts",
                  d->rate_bps / 1e6, d->queue_pkts);
    if (d->queue_bytes && n >= 0 && (size_t)n < len)
      n += snprintf(buf + n, len - n, "/%llu B",
                    (unsigned long long)d->queue_bytes);
  }
}

void rgpu_netem_print_profiles(FILE *out) {
  size_t n;
  const rgpu_netem_profile *p = rgpu_netem_profiles(&n);
  fprintf(out, "%-16s %s\n", "profile", "per direction");
  for (size_t i = 0; i < n; i++) {
    char d[256];
    rgpu_netem_describe_dir(&p[i].dir, d, sizeof d);
    fprintf(out, "%-16s %s  [%s]\n", p[i].name, d, p[i].summary);
  }
}

/* The value of an option given as "--opt VALUE" or "--opt=VALUE". */
static const char *opt_value(int argc, char **argv, int *i, const char *name,
                             int *matched) {
  const char *a = argv[*i];
  size_t n = strlen(name);
  *matched = 0;
  if (strncmp(a, name, n)) return NULL;
  if (a[n] == '=') {
    *matched = 1;
    return a + n + 1;
  }
  if (a[n] != 0) return NULL;
  *matched = 1;
  if (*i + 1 >= argc) return NULL;
  return argv[++*i];
}

static int parse_ge(const char *v, rgpu_netem_dir_config *d, char *err,
                    size_t errlen) {
  double x[4] = {0, 0, 100, 0};
  int n = 0;
  const char *s = v;
  while (*s && n < 4) {
    char tmp[64];
    size_t k = strcspn(s, ",");
    if (k == 0 || k >= sizeof tmp) break;
    memcpy(tmp, s, k);
    tmp[k] = 0;
    if (parse_double(tmp, &x[n], 1) || x[n] < 0 || x[n] > 100)
      return fail(err, errlen, "--ge %s: '%s' is not a percentage in [0, 100]",
                  v, tmp);
    n++;
    s += k;
    if (*s == ',') s++;
    else break;
  }
  if (*s || n < 2)
    return fail(err, errlen,
                "--ge %s: expected P,R[,H[,K]] in percent, e.g. --ge 1,30,50,0",
                v);
  if (x[1] == 0)
    return fail(err, errlen, "--ge %s: R (Bad->Good) must be > 0, or the link "
                "stays in Bad forever", v);
  d->ge_enabled = true;
  d->ge_p = x[0] / 100;
  d->ge_r = x[1] / 100;
  d->ge_h = x[2] / 100;
  d->ge_k = x[3] / 100;
  return 0;
}

static int parse_ready(const char *v, rgpu_netem_options *o, char *err,
                       size_t errlen) {
  uint64_t port;
  double ms;
  if (!strncmp(v, "tcp:", 4) || !strncmp(v, "udp:", 4)) {
    if (parse_u64(v + 4, &port) || port == 0 || port > 65535)
      return fail(err, errlen, "--server-ready-wait %s: bad port", v);
    o->ready = v[0] == 't' ? RGPU_NETEM_READY_TCP : RGPU_NETEM_READY_UDP;
    o->ready_port = (unsigned)port;
    return 0;
  }
  char tmp[64];
  size_t n = strlen(v);
  if (n >= sizeof tmp) n = sizeof tmp - 1;
  memcpy(tmp, v, n);
  tmp[n] = 0;
  if (n > 2 && !strcmp(tmp + n - 2, "ms")) tmp[n - 2] = 0;
  if (parse_double(tmp, &ms, 0) || ms < 0 || ms > 3.6e6)
    return fail(err, errlen,
                "--server-ready-wait %s: expected tcp:PORT, udp:PORT or a "
                "time in ms", v);
  o->ready = RGPU_NETEM_READY_DELAY;
  o->ready_delay_ns = ms_to_ns(ms);
  return 0;
}

static int parse_outage(const char *v, rgpu_netem_options *o, char *err,
                        size_t errlen) {
  const char *colon = strchr(v, ':');
  char a[64], b[64];
  double t, d;
  if (!colon || (size_t)(colon - v) >= sizeof a || strlen(colon + 1) >= sizeof b)
    return fail(err, errlen, "--outage %s: expected T:D in seconds, e.g. 2:0.5", v);
  memcpy(a, v, (size_t)(colon - v));
  a[colon - v] = 0;
  strcpy(b, colon + 1);
  if (parse_double(a, &t, 0) || parse_double(b, &d, 0) || t < 0 || d <= 0 ||
      t > 1e6 || d > 1e6)
    return fail(err, errlen,
                "--outage %s: T must be >= 0 and D > 0 (seconds)", v);
  if (o->outages.count >= RGPU_NETEM_MAX_OUTAGES)
    return fail(err, errlen, "at most %d --outage windows",
                RGPU_NETEM_MAX_OUTAGES);
  o->outages.win[o->outages.count].start_ns = (uint64_t)llround(t * 1e9);
  o->outages.win[o->outages.count].dur_ns = (uint64_t)llround(d * 1e9);
  o->outages.count++;
  return 0;
}

int rgpu_netem_parse_args(int argc, char **argv, rgpu_netem_options *o,
                          FILE *out, char *err, size_t errlen) {
  memset(o, 0, sizeof *o);
  dir_defaults(&o->dir[0]);
  dir_defaults(&o->dir[1]);
  o->seed = 1;
  o->mtu = 1500;
  o->ready_timeout_ns = 10000000000ull;
  o->grace_ns = 2000000000ull;
  o->verbose = 1;

  /* The profile is the base that every free parameter overrides, wherever
   * on the command line it appears. */
  for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
    int m;
    const char *v = opt_value(argc, argv, &i, "--profile", &m);
    if (!m) continue;
    if (!v) return fail(err, errlen, "--profile needs a name (--list-profiles)");
    const rgpu_netem_profile *p = rgpu_netem_profile_find(v);
    if (!p)
      return fail(err, errlen,
                  "unknown profile '%s' (rgpu-netem --list-profiles shows them)",
                  v);
    o->profile = p->name;
    o->dir[0] = o->dir[1] = p->dir;
  }

  int lo = 0, hi = 2; /* directions the link options apply to */
  int i;
  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--")) break;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      rgpu_netem_print_usage(out);
      return 1;
    }
    if (!strcmp(a, "--list-profiles")) {
      rgpu_netem_print_profiles(out);
      return 1;
    }
    if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) { o->verbose = 0; continue; }
    if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) { o->verbose = 2; continue; }
    if (!strcmp(a, "--reorder") || !strcmp(a, "--no-reorder")) {
      for (int d = lo; d < hi; d++) o->dir[d].reorder = a[2] == 'r';
      continue;
    }
    if (!strcmp(a, "--no-loss")) {
      for (int d = lo; d < hi; d++) {
        o->dir[d].loss = 0;
        o->dir[d].ge_enabled = false;
      }
      continue;
    }

    static const char *const valued[] = {
        "--profile", "--dir", "--rtt-ms", "--delay-ms", "--jitter-ms",
        "--jitter-dist", "--loss", "--ge", "--rate-mbit", "--queue-pkts",
        "--queue-bytes", "--outage", "--client-readdress", "--server-ready-wait",
        "--server-ready-timeout", "--server-grace-ms", "--mtu", "--seed",
        "--stats", NULL};
    const char *name = NULL, *v = NULL;
    for (int k = 0; valued[k]; k++) {
      int m;
      int j = i;
      v = opt_value(argc, argv, &j, valued[k], &m);
      if (m) {
        name = valued[k];
        i = j;
        break;
      }
    }
    if (!name) return fail(err, errlen, "unknown option '%s' (see --help)", a);
    if (!v) return fail(err, errlen, "%s needs a value (see --help)", name);

    double x;
    uint64_t u;
    if (!strcmp(name, "--profile")) {
      continue; /* applied above */
    } else if (!strcmp(name, "--dir")) {
      if (!strcmp(v, "c2s")) { lo = 0; hi = 1; }
      else if (!strcmp(v, "s2c")) { lo = 1; hi = 2; }
      else if (!strcmp(v, "both")) { lo = 0; hi = 2; }
      else return fail(err, errlen, "--dir %s: expected c2s, s2c or both", v);
    } else if (!strcmp(name, "--rtt-ms") || !strcmp(name, "--delay-ms")) {
      if (parse_double(v, &x, 0) || x < 0 || x > 1e6)
        return fail(err, errlen, "%s %s: expected milliseconds >= 0", name, v);
      if (name[2] == 'r') x /= 2;
      for (int d = lo; d < hi; d++) o->dir[d].delay_ns = ms_to_ns(x);
    } else if (!strcmp(name, "--jitter-ms")) {
      if (parse_double(v, &x, 0) || x < 0 || x > 1e6)
        return fail(err, errlen, "--jitter-ms %s: expected milliseconds >= 0", v);
      for (int d = lo; d < hi; d++) o->dir[d].jitter_ns = ms_to_ns(x);
    } else if (!strcmp(name, "--jitter-dist")) {
      rgpu_netem_jitter_dist jd;
      if (!strcmp(v, "uniform")) jd = RGPU_NETEM_JITTER_UNIFORM;
      else if (!strcmp(v, "normal")) jd = RGPU_NETEM_JITTER_NORMAL;
      else return fail(err, errlen, "--jitter-dist %s: expected uniform or normal", v);
      for (int d = lo; d < hi; d++) o->dir[d].jitter_dist = jd;
    } else if (!strcmp(name, "--loss")) {
      if (parse_double(v, &x, 1) || x < 0 || x > 100)
        return fail(err, errlen, "--loss %s: expected a percentage in [0, 100]", v);
      for (int d = lo; d < hi; d++) o->dir[d].loss = x / 100;
    } else if (!strcmp(name, "--ge")) {
      rgpu_netem_dir_config g = o->dir[lo];
      if (parse_ge(v, &g, err, errlen)) return -1;
      for (int d = lo; d < hi; d++) {
        o->dir[d].ge_enabled = true;
        o->dir[d].ge_p = g.ge_p;
        o->dir[d].ge_r = g.ge_r;
        o->dir[d].ge_h = g.ge_h;
        o->dir[d].ge_k = g.ge_k;
      }
    } else if (!strcmp(name, "--rate-mbit")) {
      if (parse_double(v, &x, 0) || x < 0 || x > 1e6)
        return fail(err, errlen, "--rate-mbit %s: expected Mbit/s >= 0 (0: unlimited)", v);
      for (int d = lo; d < hi; d++) o->dir[d].rate_bps = x * 1e6;
    } else if (!strcmp(name, "--queue-pkts")) {
      if (parse_u64(v, &u) || u == 0 || u > 1000000)
        return fail(err, errlen, "--queue-pkts %s: expected 1..1000000", v);
      for (int d = lo; d < hi; d++) o->dir[d].queue_pkts = (uint32_t)u;
    } else if (!strcmp(name, "--queue-bytes")) {
      if (parse_u64(v, &u) || u > (1ull << 34))
        return fail(err, errlen, "--queue-bytes %s: expected bytes (0: no limit)", v);
      for (int d = lo; d < hi; d++) o->dir[d].queue_bytes = u;
    } else if (!strcmp(name, "--outage")) {
      if (parse_outage(v, o, err, errlen)) return -1;
    } else if (!strcmp(name, "--client-readdress")) {
      if (parse_double(v, &x, 0) || x <= 0 || x > 86400)
        return fail(err, errlen, "--client-readdress %s: expected seconds > 0", v);
      o->readdress_ns = (uint64_t)llround(x * 1e9);
    } else if (!strcmp(name, "--server-ready-wait")) {
      if (parse_ready(v, o, err, errlen)) return -1;
    } else if (!strcmp(name, "--server-ready-timeout")) {
      if (parse_double(v, &x, 0) || x <= 0 || x > 86400)
        return fail(err, errlen, "--server-ready-timeout %s: expected seconds > 0", v);
      o->ready_timeout_ns = (uint64_t)llround(x * 1e9);
    } else if (!strcmp(name, "--server-grace-ms")) {
      if (parse_double(v, &x, 0) || x < 0 || x > 3.6e6)
        return fail(err, errlen, "--server-grace-ms %s: expected milliseconds >= 0", v);
      o->grace_ns = ms_to_ns(x);
    } else if (!strcmp(name, "--mtu")) {
      if (parse_u64(v, &u) || u < 576 || u > 65535)
        return fail(err, errlen, "--mtu %s: expected 576..65535", v);
      o->mtu = (unsigned)u;
    } else if (!strcmp(name, "--seed")) {
      if (parse_u64(v, &u))
        return fail(err, errlen, "--seed %s: expected an unsigned integer", v);
      o->seed = u;
    } else if (!strcmp(name, "--stats")) {
      if (!*v) return fail(err, errlen, "--stats needs a file name");
      o->stats_path = v;
    }
  }

  if (i >= argc)
    return fail(err, errlen,
                "no command given: expected -- SERVER_CMD ... ::: CLIENT_CMD ... "
                "(see --help)");
  int start = i + 1, sep = -1;
  for (int k = start; k < argc; k++)
    if (!strcmp(argv[k], ":::")) {
      sep = k;
      break;
    }
  if (sep < 0)
    return fail(err, errlen,
                "missing ':::' between the server and the client command "
                "(use '-- ::: CLIENT_CMD' to run a client alone)");
  if (sep + 1 >= argc)
    return fail(err, errlen, "no client command after ':::'");
  argv[sep] = NULL; /* ends the server's argv */
  o->server_argv = sep > start ? &argv[start] : NULL;
  o->client_argv = &argv[sep + 1];
  if (!o->server_argv && o->ready != RGPU_NETEM_READY_NONE &&
      o->ready != RGPU_NETEM_READY_DELAY)
    return fail(err, errlen, "--server-ready-wait needs a server command");
  for (int d = 0; d < 2; d++)
    if (o->dir[d].rate_bps > 0 && o->dir[d].queue_bytes &&
        o->dir[d].queue_bytes < o->mtu)
      return fail(err, errlen,
                  "--queue-bytes %llu is smaller than one packet (MTU %u)",
                  (unsigned long long)o->dir[d].queue_bytes, o->mtu);
  return 0;
}
