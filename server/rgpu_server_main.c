/* rgpu-server: command line. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rgpu_auth.h"
#include "rgpu_device_list.h"
#include "rgpu_driver.h"
#include "rgpu_frame.h"
#include "rgpu_image_cache.h"
#include "rgpu_listener.h"
#include "rgpu_log.h"
#include "rgpu_server_config.h"
#include "rgpu_transport.h"

#ifndef RGPU_VERSION
#define RGPU_VERSION "0.0.0"
#endif

/* Provided by the transport once TLS lands; weak so the server links (and
 * says so) before that. */
int rgpu_tls_generate_self_signed(const char *dir, const char *hostnames, char *err,
                                  size_t errlen) __attribute__((weak));

static void usage(FILE *f) {
  fprintf(f,
          "usage: rgpu-server --listen URI [--listen URI ...] [options]\n"
          "\n"
          "Serves CUDA to rgpu clients: one worker process per client session.\n"
          "\n"
          "  --config FILE       settings, one long option per line ('listen = URI',\n"
          "                      'max-sessions = 8', 'foreground'); the command line wins\n"
          "  --listen URI        tcp://HOST:PORT, unix:///PATH, tls://HOST:PORT or\n"
          "                      quic://HOST:PORT (port 0 picks a free port); repeatable\n"
          "  --device KIND       cuda (libcuda.so.1) or softgpu (CPU); default: cuda if a\n"
          "                      driver with a device loads, else softgpu\n"
          "  --softgpu-lib PATH  libsoftgpu.so to load (default: $RGPU_SOFTGPU_LIB, else\n"
          "                      <dir of rgpu-server>/../lib/libsoftgpu.so)\n"
          "  --softgpu-devices N softgpu shows N devices (1-64; default\n"
          "                      $RGPU_SOFTGPU_DEVICES, else 1)\n"
          "  --devices LIST      the devices sessions see, e.g. 0,2: renumbered from 0 in\n"
          "                      that order, like CUDA_VISIBLE_DEVICES (default: all)\n"
          "  --token-file FILE   require clients to present the first line of FILE\n"
          "                      (re-read on SIGHUP, as are --cert, --key, --client-ca)\n"
          "  --token-dir DIR     also accept the token of any file in DIR while it is there\n"
          "                      and not past its expires= line; sessions of a removed or\n"
          "                      expired one end (per-job tokens: the Slurm plugin)\n"
          "  --cert FILE --key FILE  certificate and key for tls:// and quic://\n"
          "  --client-ca FILE    require client certificates signed by this CA\n"
          "  --max-sessions N    refuse sessions beyond N (default: unlimited); a session\n"
          "                      counts once its HELLO is authenticated\n"
          "  --max-pending-auth N  connections not yet authenticated at once (default 16);\n"
          "                      beyond it the oldest of them is closed\n"
          "  --hello-timeout-s N the whole first frame must arrive within N s (default 10)\n"
          "  --session-end-timeout-s N  after a session ended, give its device N s to\n"
          "                      drain (an endless kernel), then exit the worker (default 10)\n"
          "  --mem-quota BYTES   device memory per session, suffix K/M/G (default: unlimited)\n"
          "  --max-payload BYTES largest frame payload accepted (default and max: %u)\n"
          "  --quic-direct PORTS quic:// sessions move to a UDP port of their worker's own\n"
          "                      (no relay between client and worker): 'any' (default),\n"
          "                      LO-HI (ports a firewall lets through), or 'off'\n"
          "  --grace-s N         keep a disconnected session N s for the client to resume\n"
          "                      it (default 60; 0: a broken connection ends the session)\n"
          "  --drain-s N         on SIGTERM/SIGINT refuse new sessions, wait up to N s for\n"
          "                      running ones, then end them with SHUTDOWN (default 30)\n"
          "  --metrics URI       serve Prometheus metrics at http://HOST:PORT/metrics\n"
          "                      (URI tcp://HOST:PORT; port 0 picks one, printed at start)\n"
          "  --metrics-port N    the same as --metrics tcp://0.0.0.0:N\n"
          "  --image-cache DIR   keep the kernel images clients send in DIR, shared by all\n"
          "                      sessions and kept across restarts, so each image crosses\n"
          "                      the network once (default: $XDG_CACHE_HOME/rgpu/images,\n"
          "                      else /var/tmp/rgpu-image-cache-<uid>; 'off': no cache)\n"
          "  --image-cache-max-mb N  bound of the image cache, least recently used images\n"
          "                      go first (default %d)\n"
          "  --gen-cert DIR      write DIR/cert.pem and DIR/key.pem (self-signed, for\n"
          "                      localhost,127.0.0.1 and the --cert-names) and exit\n"
          "  --cert-names LIST   with --gen-cert: the server's other names or addresses the\n"
          "                      certificate is valid for (gpu-host.example,10.0.0.5)\n"
          "  --foreground        stay in the foreground (the only mode; accepted for scripts)\n"
          "  --help, --version\n"
          "\n"
          "Logging: RGPU_LOG=error|warn|info|debug (default info for the server).\n",
          (unsigned)RGPU_FRAME_MAX_PAYLOAD, RGPU_IMAGE_CACHE_DEFAULT_MB);
}

/* "64M" -> 67108864.  Returns 0 or -1. */
static int parse_bytes(const char *s, uint64_t *out) {
  if (!s || !*s) return -1;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *s == '-') return -1;
  uint64_t mul = 1;
  if (*end) {
    switch (*end) {
      case 'k': case 'K': mul = 1ull << 10; break;
      case 'm': case 'M': mul = 1ull << 20; break;
      case 'g': case 'G': mul = 1ull << 30; break;
      case 't': case 'T': mul = 1ull << 40; break;
      default: return -1;
    }
    end++;
    if (*end == 'i' || *end == 'I') end++;
    if (*end == 'b' || *end == 'B') end++;
    if (*end) return -1;
  }
  if (v > UINT64_MAX / mul) return -1;
  *out = v * mul;
  return 0;
}

/* The kernel image cache's directory (rgpu_image_cache.h) into cfg, after
 * checking that it can be used: a directory given with --image-cache must
 * be (else the server does not start); the default one is left out with a
 * warning when it cannot.  'off' turns the cache off. */
static int setup_image_cache(rgpu_worker_config *cfg, const char *given) {
  cfg->image_cache_dir[0] = 0;
  if (given && !strcmp(given, "off")) return 0;
  char dir[sizeof cfg->image_cache_dir];
  if (given && given[0] != '/') {
    /* Absolute, so that it names the same place from every process. */
    char cwd[256];
    if (!getcwd(cwd, sizeof cwd) ||
        snprintf(dir, sizeof dir, "%s/%s", cwd, given) >= (int)sizeof dir) {
      fprintf(stderr, "rgpu-server: --image-cache %s: give an absolute path\n", given);
      return -1;
    }
  } else if (given) {
    snprintf(dir, sizeof dir, "%s", given);
  } else {
    rgpu_image_cache_default_dir(dir, sizeof dir);
  }
  char err[768];
  rgpu_image_cache *c = rgpu_image_cache_open(dir, cfg->image_cache_max_bytes, err, sizeof err);
  if (!c) {
    if (given) {
      fprintf(stderr, "rgpu-server: --image-cache: %s\n", err);
      return -1;
    }
    RGPU_WARN("no kernel image cache: %s (choose one with --image-cache DIR)", err);
    return 0;
  }
  /* A smaller bound than the last run's applies from now on. */
  rgpu_image_cache_evict(c);
  unsigned long long total = rgpu_image_cache_total(c);
  rgpu_image_cache_close(c);
  snprintf(cfg->image_cache_dir, sizeof cfg->image_cache_dir, "%s", dir);
  RGPU_INFO("kernel image cache %s: %llu MiB held, bound %llu MiB", dir, total >> 20,
            (unsigned long long)((cfg->image_cache_max_bytes
                                      ? cfg->image_cache_max_bytes
                                      : (uint64_t)RGPU_IMAGE_CACHE_DEFAULT_MB << 20) >> 20));
  return 0;
}

int main(int argc, char **argv) {
  rgpu_log_set_component("server");
  /* A daemon's session lines are its point: info unless told otherwise. */
  const char *lv = getenv("RGPU_LOG");
  if (!lv || !*lv) rgpu_log_set_level(RGPU_LOG_INFO);

  enum {
    OPT_LISTEN = 256, OPT_DEVICE, OPT_SGLIB, OPT_TOKEN, OPT_CERT, OPT_KEY, OPT_CLIENT_CA,
    OPT_MAXSESS, OPT_QUOTA, OPT_MAXPAY, OPT_GENCERT, OPT_CERTNAMES, OPT_FG, OPT_HELP, OPT_VERSION,
    OPT_GRACE, OPT_DRAIN, OPT_METRICS, OPT_METRICS_PORT, OPT_MAXPENDING, OPT_HELLO_TIMEOUT,
    OPT_END_TIMEOUT, OPT_IMAGE_CACHE, OPT_IMAGE_CACHE_MAX, OPT_CONFIG, OPT_TOKEN_DIR,
    OPT_SG_DEVICES, OPT_DEVICES, OPT_QUIC_DIRECT
  };
  static const struct option longopts[] = {
      {"listen", required_argument, 0, OPT_LISTEN},
      {"device", required_argument, 0, OPT_DEVICE},
      {"softgpu-lib", required_argument, 0, OPT_SGLIB},
      {"softgpu-devices", required_argument, 0, OPT_SG_DEVICES},
      {"devices", required_argument, 0, OPT_DEVICES},
      {"token-file", required_argument, 0, OPT_TOKEN},
      {"token-dir", required_argument, 0, OPT_TOKEN_DIR},
      {"cert", required_argument, 0, OPT_CERT},
      {"key", required_argument, 0, OPT_KEY},
      {"client-ca", required_argument, 0, OPT_CLIENT_CA},
      {"max-sessions", required_argument, 0, OPT_MAXSESS},
      {"mem-quota", required_argument, 0, OPT_QUOTA},
      {"max-payload", required_argument, 0, OPT_MAXPAY},
      {"gen-cert", required_argument, 0, OPT_GENCERT},
      {"cert-names", required_argument, 0, OPT_CERTNAMES},
      {"grace-s", required_argument, 0, OPT_GRACE},
      {"quic-direct", required_argument, 0, OPT_QUIC_DIRECT},
      {"drain-s", required_argument, 0, OPT_DRAIN},
      {"max-pending-auth", required_argument, 0, OPT_MAXPENDING},
      {"hello-timeout-s", required_argument, 0, OPT_HELLO_TIMEOUT},
      {"session-end-timeout-s", required_argument, 0, OPT_END_TIMEOUT},
      {"metrics", required_argument, 0, OPT_METRICS},
      {"metrics-port", required_argument, 0, OPT_METRICS_PORT},
      {"image-cache", required_argument, 0, OPT_IMAGE_CACHE},
      {"image-cache-max-mb", required_argument, 0, OPT_IMAGE_CACHE_MAX},
      {"foreground", no_argument, 0, OPT_FG},
      {"help", no_argument, 0, OPT_HELP},
      {"version", no_argument, 0, OPT_VERSION},
      {"config", required_argument, 0, OPT_CONFIG},
      {0, 0, 0, 0}};

  static rgpu_server_opts o; /* large (token buffer): keep it off the stack */
  memset(&o, 0, sizeof o);
  const char *sglib = NULL, *token_file = NULL, *gen_cert = NULL, *image_cache = NULL;
  const char *cert_names = NULL;
  const char *token_dir = NULL;
  int device_set = 0;
  o.worker.max_payload = RGPU_FRAME_MAX_PAYLOAD;
  o.grace_s = 60;
  o.drain_s = 30;
  /* Notices clients that vanished without a FIN (their worker and device
   * memory are freed) within about a minute; QUIC pings keep idle sessions up. */
  o.topts.keepalive_ms = 15000;
  /* --config FILE: its settings first, the command line after them. */
  {
    static const char *const accumulating[] = {"listen", NULL};
    char err[600];
    if (rgpu_server_config_argv(argc, argv, longopts, accumulating, &argc, &argv, err,
                                sizeof err)) {
      fprintf(stderr, "rgpu-server: %s\n", err);
      return 2;
    }
  }
  int c;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    uint64_t v;
    switch (c) {
      case OPT_LISTEN:
        if (o.nlisten == RGPU_SERVER_MAX_LISTEN) {
          fprintf(stderr, "rgpu-server: at most %d --listen addresses\n", RGPU_SERVER_MAX_LISTEN);
          return 2;
        }
        o.listen[o.nlisten++] = optarg;
        break;
      case OPT_DEVICE:
        if (!strcmp(optarg, "cuda"))
          o.worker.device = RGPU_DEVICE_CUDA;
        else if (!strcmp(optarg, "softgpu"))
          o.worker.device = RGPU_DEVICE_SOFTGPU;
        else {
          fprintf(stderr, "rgpu-server: --device %s: expected cuda or softgpu\n", optarg);
          return 2;
        }
        device_set = 1;
        break;
      case OPT_SGLIB: sglib = optarg; break;
      case OPT_SG_DEVICES: {
        char *end;
        long n = strtol(optarg, &end, 10);
        if (end == optarg || *end || n < 1 || n > 64) {
          fprintf(stderr, "rgpu-server: --softgpu-devices %s: expected a number from 1 to 64\n",
                  optarg);
          return 2;
        }
        /* softgpu reads its device count from the environment when a worker
         * loads it; the fork server (forked below) hands this on to every
         * worker. */
        char v[8];
        snprintf(v, sizeof v, "%ld", n);
        setenv("RGPU_SOFTGPU_DEVICES", v, 1);
        break;
      }
      case OPT_DEVICES: {
        char err[300];
        if (rgpu_device_list_parse(optarg, o.worker.devices,
                                   (int)(sizeof o.worker.devices / sizeof *o.worker.devices),
                                   &o.worker.ndevices, err, sizeof err)) {
          fprintf(stderr, "rgpu-server: %s\n", err);
          return 2;
        }
        break;
      }
      case OPT_TOKEN: token_file = optarg; break;
      case OPT_TOKEN_DIR: token_dir = optarg; break;
      case OPT_CERT: o.topts.cert_file = optarg; break;
      case OPT_KEY: o.topts.key_file = optarg; break;
      case OPT_CLIENT_CA: o.topts.client_ca_file = optarg; break;
      case OPT_MAXSESS:
        if (parse_bytes(optarg, &v) || v > UINT32_MAX || strpbrk(optarg, "kKmMgGtT")) {
          fprintf(stderr, "rgpu-server: --max-sessions %s: expected a number\n", optarg);
          return 2;
        }
        o.max_sessions = (uint32_t)v;
        break;
      case OPT_MAXPENDING:
        if (parse_bytes(optarg, &v) || v == 0 || v > 65536 || strpbrk(optarg, "kKmMgGtT")) {
          fprintf(stderr, "rgpu-server: --max-pending-auth %s: expected a number (1 .. 65536)\n",
                  optarg);
          return 2;
        }
        o.max_pending_auth = (uint32_t)v;
        break;
      case OPT_HELLO_TIMEOUT:
      case OPT_END_TIMEOUT: {
        char *end;
        errno = 0;
        long n = strtol(optarg, &end, 10);
        if (errno || end == optarg || *end || n < 1 || n > 86400) {
          fprintf(stderr, "rgpu-server: --%s %s: expected seconds (1 .. 86400)\n",
                  c == OPT_HELLO_TIMEOUT ? "hello-timeout-s" : "session-end-timeout-s", optarg);
          return 2;
        }
        if (c == OPT_HELLO_TIMEOUT) o.worker.hello_timeout_s = (int)n;
        else o.worker.session_end_timeout_s = (int)n;
        break;
      }
      case OPT_QUOTA:
        if (parse_bytes(optarg, &v)) {
          fprintf(stderr, "rgpu-server: --mem-quota %s: expected bytes, e.g. 512M or 2G\n", optarg);
          return 2;
        }
        o.worker.mem_quota = v;
        break;
      case OPT_MAXPAY:
        if (parse_bytes(optarg, &v) || v < 4096 || v > RGPU_FRAME_MAX_PAYLOAD) {
          fprintf(stderr, "rgpu-server: --max-payload %s: expected 4K .. %u bytes\n", optarg,
                  (unsigned)RGPU_FRAME_MAX_PAYLOAD);
          return 2;
        }
        o.worker.max_payload = (uint32_t)v;
        break;
      case OPT_GENCERT: gen_cert = optarg; break;
      case OPT_CERTNAMES: cert_names = optarg; break;
      case OPT_QUIC_DIRECT: {
        unsigned lo = 0, hi = 0;
        char tail;
        if (!strcmp(optarg, "off")) {
          o.quic_direct_off = 1;
        } else if (!strcmp(optarg, "any")) {
          o.quic_direct_off = 0;
          o.quic_direct_lo = o.quic_direct_hi = 0;
        } else if (sscanf(optarg, "%u-%u%c", &lo, &hi, &tail) == 2 && lo >= 1 && lo <= hi &&
                   hi <= 65535) {
          o.quic_direct_off = 0;
          o.quic_direct_lo = (uint16_t)lo;
          o.quic_direct_hi = (uint16_t)hi;
        } else {
          fprintf(stderr, "rgpu-server: --quic-direct %s: expected any, off or LO-HI (UDP ports)\n",
                  optarg);
          return 2;
        }
        break;
      }
      case OPT_GRACE:
      case OPT_DRAIN: {
        char *end;
        errno = 0;
        long n = strtol(optarg, &end, 10);
        if (errno || end == optarg || *end || n < 0 || n > 86400) {
          fprintf(stderr, "rgpu-server: --%s %s: expected seconds (0 .. 86400)\n",
                  c == OPT_GRACE ? "grace-s" : "drain-s", optarg);
          return 2;
        }
        if (c == OPT_GRACE) o.grace_s = (int)n; else o.drain_s = (int)n;
        break;
      }
      case OPT_METRICS: o.metrics = optarg; break;
      case OPT_METRICS_PORT: {
        static char muri[64];
        char *end;
        long p = strtol(optarg, &end, 10);
        if (*optarg == 0 || *end || p < 0 || p > 65535) {
          fprintf(stderr, "rgpu-server: --metrics-port %s: expected a port number\n", optarg);
          return 2;
        }
        snprintf(muri, sizeof muri, "tcp://0.0.0.0:%ld", p);
        o.metrics = muri;
        break;
      }
      case OPT_IMAGE_CACHE:
        image_cache = optarg;
        break;
      case OPT_IMAGE_CACHE_MAX: {
        char *end;
        errno = 0;
        unsigned long long mb = strtoull(optarg, &end, 10);
        if (errno || end == optarg || *end || *optarg == '-' || mb == 0 || mb > (1ull << 40)) {
          fprintf(stderr, "rgpu-server: --image-cache-max-mb %s: expected a number of MiB >= 1\n",
                  optarg);
          return 2;
        }
        o.worker.image_cache_max_bytes = (uint64_t)mb << 20;
        break;
      }
      case OPT_FG: break;
      case OPT_CONFIG: break; /* read above */
      case OPT_HELP: case 'h': usage(stdout); return 0;
      case OPT_VERSION: printf("rgpu-server %s (protocol %d)\n", RGPU_VERSION, RGPU_PROTO_VERSION); return 0;
      default: usage(stderr); return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "rgpu-server: unexpected argument '%s'\n", argv[optind]);
    usage(stderr);
    return 2;
  }

  if (cert_names && !gen_cert) {
    fprintf(stderr, "rgpu-server: --cert-names goes with --gen-cert (it names the certificate's hosts)\n");
    return 2;
  }
  if (gen_cert) {
    if (!rgpu_tls_generate_self_signed) {
      fprintf(stderr, "rgpu-server: --gen-cert: this build has no TLS support\n");
      return 1;
    }
    char err[512] = "", names[1024] = "localhost,127.0.0.1";
    if (cert_names) {
      /* Names for a server reached by another name than localhost (a host
       * name, a LAN or emulator address): each non-empty, no blanks. */
      size_t n = strlen(names);
      for (const char *p = cert_names; *p;) {
        size_t k = strcspn(p, ",");
        if (k == 0 || k > 253 || memchr(p, ' ', k) || n + 1 + k >= sizeof names) {
          fprintf(stderr, "rgpu-server: --cert-names '%s': expected a comma list of host names "
                  "or addresses (no empty entries, no blanks, 253 bytes each, 1000 in all)\n",
                  cert_names);
          return 2;
        }
        names[n++] = ',';
        memcpy(names + n, p, k);
        n += k;
        names[n] = 0;
        p += k + (p[k] == ',');
      }
    }
    if (rgpu_tls_generate_self_signed(gen_cert, names, err, sizeof err)) {
      fprintf(stderr, "rgpu-server: --gen-cert %s: %s\n", gen_cert, err);
      return 1;
    }
    fprintf(stderr, "rgpu-server: wrote %s/cert.pem and %s/key.pem (clients pin cert.pem)\n", gen_cert,
            gen_cert);
    return 0;
  }
  if (o.nlisten == 0) {
    fprintf(stderr, "rgpu-server: give at least one --listen URI (e.g. --listen tcp://127.0.0.1:7000)\n");
    return 2;
  }
  for (int i = 0; i < o.nlisten; i++) {
    int secure = !strncmp(o.listen[i], "tls://", 6) || !strncmp(o.listen[i], "quic://", 7);
    if (secure && (!o.topts.cert_file || !o.topts.key_file)) {
      fprintf(stderr,
              "rgpu-server: %s needs --cert FILE --key FILE (make a pair with --gen-cert DIR)\n",
              o.listen[i]);
      return 2;
    }
  }
  if (!!o.topts.cert_file != !!o.topts.key_file) {
    fprintf(stderr, "rgpu-server: --cert and --key go together\n");
    return 2;
  }
  /* A bad --image-cache ends the start before any process was forked.  The
   * directory's descriptor is closed again here: nothing is inherited. */
  if (setup_image_cache(&o.worker, image_cache)) return 2;
  /* Before anything that may start a thread (the CUDA probe below loads
   * libcuda; rgpu_server_run starts relay and metrics threads): workers are
   * forked from this still single-threaded process (rgpu_forkserver.h).
   * Parsing the command line above starts none. */
  {
    char err[256];
    if (rgpu_server_start_forkserver(&o, err, sizeof err)) {
      fprintf(stderr, "rgpu-server: %s\n", err);
      return 1;
    }
  }
  if (token_file) {
    char err[512];
    if (rgpu_auth_load_token(token_file, o.worker.token, sizeof o.worker.token, err, sizeof err)) {
      fprintf(stderr, "rgpu-server: %s\n", err);
      return 2;
    }
    o.worker.token_required = 1;
    o.token_file = token_file;
  }
  if (token_dir) {
    /* Absolute: workers and the listener must name the same place. */
    char *abs = realpath(token_dir, NULL);
    struct stat st;
    if (!abs || stat(abs, &st) < 0 || !S_ISDIR(st.st_mode) ||
        strlen(abs) >= sizeof o.worker.token_dir) {
      fprintf(stderr, "rgpu-server: --token-dir %s: %s\n", token_dir,
              abs ? "not a directory (or its path is too long)" : strerror(errno));
      free(abs);
      return 2;
    }
    snprintf(o.worker.token_dir, sizeof o.worker.token_dir, "%s", abs);
    free(abs);
  }
  if (token_file || token_dir) {
    /* Clients send the token in their HELLO: over tcp:// to the network
     * anyone on the path reads it (issue 14). */
    for (int i = 0; i < o.nlisten; i++)
      if (rgpu_uri_is_clear_text_network(o.listen[i]))
        RGPU_WARN("a token with %s: clients send the token in clear over it, anyone on the "
                  "network path can read it; listen on tls:// or quic:// instead",
                  o.listen[i]);
  }
  rgpu_driver_softgpu_path(sglib, o.worker.softgpu_lib, sizeof o.worker.softgpu_lib);
  if (!device_set)
    o.worker.device = rgpu_driver_probe_cuda() ? RGPU_DEVICE_CUDA : RGPU_DEVICE_SOFTGPU;
  if (o.worker.ndevices > 0) {
    /* A list naming a device the driver lacks is a start-up error, not a
     * failure of every session later. */
    const char *drv = o.worker.device == RGPU_DEVICE_CUDA ? "libcuda.so.1" : o.worker.softgpu_lib;
    int count = rgpu_driver_probe_count(drv);
    char err[300];
    if (count < 0) {
      fprintf(stderr, "rgpu-server: --devices: cannot count the devices of %s\n", drv);
      return 2;
    }
    if (rgpu_device_list_check(o.worker.devices, o.worker.ndevices, count, err, sizeof err)) {
      fprintf(stderr, "rgpu-server: %s\n", err);
      return 2;
    }
  }
  return rgpu_server_run(&o);
}
