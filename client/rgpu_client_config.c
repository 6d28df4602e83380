/* Client configuration from the environment, and the stats JSON writer.
 * Both are pure enough to be unit-tested without a server. */
#include <errno.h>
#include <stdarg.h>
#include <strings.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rgpu_client.h"
#include "rgpu_transport.h"

static const char *env_default(const char *name, void *ctx) {
  (void)ctx;
  return getenv(name);
}

static int copy_str(char *dst, size_t cap, const char *src, const char *what, char *err,
                    size_t errlen) {
  size_t n = strlen(src);
  if (n >= cap) {
    snprintf(err, errlen, "%s is too long (%zu bytes, at most %zu)", what, n, cap - 1);
    return -1;
  }
  memcpy(dst, src, n + 1);
  return 0;
}

/* Parses a non-negative decimal integer up to max; an empty string counts
 * as unset so that `RGPU_BATCH_US= prog` keeps the default. */
static int parse_uint(const char *name, const char *v, long long max, long long *out, char *err,
                      size_t errlen) {
  if (!v || !*v) return 1;
  char *end = NULL;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || end == v || *end != '\0' || x < 0 || x > max) {
    snprintf(err, errlen, "%s=%s is not a number between 0 and %lld", name, v, max);
    return -1;
  }
  *out = x;
  return 0;
}

static int parse_bool(const char *v) {
  if (!v || !*v) return 0;
  return !(strcmp(v, "0") == 0 || strcasecmp(v, "false") == 0 || strcasecmp(v, "no") == 0 ||
           strcasecmp(v, "off") == 0);
}

static int read_token_file(const char *path, char *dst, size_t cap, char *err, size_t errlen) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    snprintf(err, errlen, "cannot read RGPU_TOKEN_FILE %s: %s", path, strerror(errno));
    return -1;
  }
  size_t n = 0;
  for (;;) {
    if (n + 1 >= cap) break;
    ssize_t r = read(fd, dst + n, cap - 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      snprintf(err, errlen, "cannot read RGPU_TOKEN_FILE %s: %s", path, strerror(errno));
      close(fd);
      return -1;
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  close(fd);
  dst[n] = '\0';
  /* The token is the first line; editors add newlines and some add CRs. */
  char *nl = strpbrk(dst, "\r\n");
  if (nl) *nl = '\0';
  if (!dst[0]) {
    snprintf(err, errlen, "RGPU_TOKEN_FILE %s is empty", path);
    return -1;
  }
  return 0;
}

/* One entry of a server list without the blanks around it: [*b, *e). */
static void trim_span(const char **b, const char **e) {
  while (*b < *e && (**b == ' ' || **b == '\t')) (*b)++;
  while (*e > *b && ((*e)[-1] == ' ' || (*e)[-1] == '\t')) (*e)--;
}

int rgpu_client_server_list_parse(const char *list, char (*uris)[RGPU_CLIENT_URI_MAX], int max,
                                  char *err, size_t errlen) {
  int n = 0;
  const char *p = list;
  for (;;) {
    const char *end = strchr(p, ',');
    if (!end) end = p + strlen(p);
    const char *b = p, *e = end;
    trim_span(&b, &e);
    size_t len = (size_t)(e - b);
    if (len == 0) {
      snprintf(err, errlen,
               "RGPU_SERVER=%.200s: entry %d is empty (expected SCHEME://HOST:PORT, several "
               "separated by commas)",
               list, n + 1);
      return -1;
    }
    if (n == max) {
      snprintf(err, errlen, "RGPU_SERVER=%.200s names more than %d servers", list, max);
      return -1;
    }
    if (len >= RGPU_CLIENT_URI_MAX) {
      snprintf(err, errlen, "RGPU_SERVER: entry %d is too long (%zu bytes, at most %d)", n + 1,
               len, RGPU_CLIENT_URI_MAX - 1);
      return -1;
    }
    memcpy(uris[n], b, len);
    uris[n][len] = '\0';
    /* Each entry of a list is checked now, with the transport's own words
     * (a forgotten scheme, "a:7000,b:7000", is likeliest there); one URI
     * alone is left to the connection, which says the same. */
    rgpu_uri parsed;
    char why[300];
    if (strchr(list, ',') && rgpu_uri_parse(uris[n], &parsed, why, sizeof why)) {
      snprintf(err, errlen, "RGPU_SERVER=%.200s: entry %d: %.300s", list, n + 1, why);
      return -1;
    }
    for (int k = 0; k < n; k++)
      if (!strcmp(uris[k], uris[n])) {
        /* Two sessions with one server would show its GPUs twice, each
         * copy with memory the other cannot see. */
        snprintf(err, errlen, "RGPU_SERVER=%.200s names %.200s twice", list, uris[n]);
        return -1;
      }
    n++;
    if (!*end) break;
    p = end + 1;
  }
  return n;
}

int rgpu_client_config_load(rgpu_client_config *cfg, rgpu_client_getenv_fn getenv_fn, void *ctx,
                            char *err, size_t errlen) {
  if (!getenv_fn) getenv_fn = env_default;
  memset(cfg, 0, sizeof *cfg);
  cfg->connect_timeout_ms = RGPU_CLIENT_DEFAULT_CONNECT_TIMEOUT_MS;
  cfg->batch_us = RGPU_CLIENT_DEFAULT_BATCH_US;
  cfg->batch_bytes = RGPU_CLIENT_DEFAULT_BATCH_BYTES;
  cfg->idle_sends = RGPU_CLIENT_DEFAULT_IDLE_SENDS;

  const char *v;
  if ((v = getenv_fn("RGPU_SERVER", ctx)) && *v) {
    /* A comma list names several servers whose devices form one list
     * (issue 19): checked here so that a malformed list is one clear
     * sentence at the first CUDA call, not a connection error. */
    char uris[RGPU_CLIENT_MAX_SERVERS][RGPU_CLIENT_URI_MAX];
    int n = rgpu_client_server_list_parse(v, uris, RGPU_CLIENT_MAX_SERVERS, err, errlen);
    if (n < 0) return -1;
    cfg->nservers = n;
    if (copy_str(cfg->server, sizeof cfg->server, v, "RGPU_SERVER", err, errlen)) return -1;
  }
  if ((v = getenv_fn("RGPU_TOKEN", ctx)) && *v) {
    if (copy_str(cfg->token, sizeof cfg->token, v, "RGPU_TOKEN", err, errlen)) return -1;
  } else if ((v = getenv_fn("RGPU_TOKEN_FILE", ctx)) && *v) {
    if (read_token_file(v, cfg->token, sizeof cfg->token, err, errlen)) return -1;
  }
  if ((v = getenv_fn("RGPU_CA", ctx)) && *v &&
      copy_str(cfg->ca_file, sizeof cfg->ca_file, v, "RGPU_CA", err, errlen))
    return -1;
  if ((v = getenv_fn("RGPU_CERT", ctx)) && *v &&
      copy_str(cfg->cert_file, sizeof cfg->cert_file, v, "RGPU_CERT", err, errlen))
    return -1;
  if ((v = getenv_fn("RGPU_KEY", ctx)) && *v &&
      copy_str(cfg->key_file, sizeof cfg->key_file, v, "RGPU_KEY", err, errlen))
    return -1;
  if ((v = getenv_fn("RGPU_STATS", ctx)) && *v &&
      copy_str(cfg->stats_path, sizeof cfg->stats_path, v, "RGPU_STATS", err, errlen))
    return -1;

  long long x;
  int r = parse_uint("RGPU_CONNECT_TIMEOUT_MS", getenv_fn("RGPU_CONNECT_TIMEOUT_MS", ctx),
                     3600 * 1000, &x, err, errlen);
  if (r < 0) return -1;
  if (r == 0) cfg->connect_timeout_ms = x > 0 ? (int)x : RGPU_CLIENT_DEFAULT_CONNECT_TIMEOUT_MS;
  r = parse_uint("RGPU_BATCH_US", getenv_fn("RGPU_BATCH_US", ctx), 10 * 1000 * 1000, &x, err,
                 errlen);
  if (r < 0) return -1;
  if (r == 0) cfg->batch_us = (int)x;
  r = parse_uint("RGPU_BATCH_BYTES", getenv_fn("RGPU_BATCH_BYTES", ctx), 64ll << 20, &x, err,
                 errlen);
  if (r < 0) return -1;
  if (r == 0) cfg->batch_bytes = (size_t)x;
  r = parse_uint("RGPU_BATCH_IDLE_SENDS", getenv_fn("RGPU_BATCH_IDLE_SENDS", ctx), 1000, &x, err,
                 errlen);
  if (r < 0) return -1;
  if (r == 0) cfg->idle_sends = (int)x;
  cfg->sync_every_call = parse_bool(getenv_fn("RGPU_SYNC_EVERY_CALL", ctx));
  r = parse_uint("RGPU_IDLE_TIMEOUT_MS", getenv_fn("RGPU_IDLE_TIMEOUT_MS", ctx), 3600 * 1000, &x,
                 err, errlen);
  if (r < 0) return -1;
  if (r == 0) cfg->idle_timeout_ms = (int)x;
  cfg->reconnect_s = 60;
  r = parse_uint("RGPU_RECONNECT_S", getenv_fn("RGPU_RECONNECT_S", ctx), 86400, &x, err, errlen);
  if (r < 0) return -1;
  if (r == 0) cfg->reconnect_s = (int)x;

  /* The program's name helps the server operator tell sessions apart. */
  char exe[256] = "";
  FILE *f = fopen("/proc/self/comm", "r");
  if (f) {
    if (fgets(exe, sizeof exe, f)) exe[strcspn(exe, "\n")] = '\0';
    fclose(f);
  }
  snprintf(cfg->client_name, sizeof cfg->client_name, "%s", exe[0] ? exe : "unknown");
  return 0;
}

/* JSON string escaping for the few free-text fields (URI, transport). */
static int put_json_str(char *out, size_t cap, size_t *pos, const char *s) {
  if (*pos >= cap) return -1;
  out[(*pos)++] = '"';
  for (; *s; s++) {
    char tmp[8];
    const char *w = tmp;
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') {
      tmp[0] = '\\';
      tmp[1] = (char)ch;
      tmp[2] = 0;
    } else if (ch < 0x20) {
      snprintf(tmp, sizeof tmp, "\\u%04x", ch);
    } else {
      tmp[0] = (char)ch;
      tmp[1] = 0;
    }
    size_t n = strlen(w);
    if (*pos + n >= cap) return -1;
    memcpy(out + *pos, w, n);
    *pos += n;
  }
  if (*pos + 1 >= cap) return -1;
  out[(*pos)++] = '"';
  out[*pos] = '\0';
  return 0;
}

static int put_raw(char *out, size_t cap, size_t *pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int put_raw(char *out, size_t cap, size_t *pos, const char *fmt, ...) {
  if (*pos >= cap) return -1;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(out + *pos, cap - *pos, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= cap - *pos) return -1;
  *pos += (size_t)n;
  return 0;
}

int rgpu_client_stats_json(const rgpu_client_stats *s, char *out, size_t cap) {
  size_t pos = 0;
  if (!out || cap == 0) return -1;
  out[0] = '\0';
  if (put_raw(out, cap, &pos,
              "{\"calls\":%llu,\"async_calls\":%llu,\"round_trips\":%llu,\"bytes_sent\":%llu,"
              "\"bytes_received\":%llu,\"wall_s\":%.6f,\"transport\":",
              (unsigned long long)s->calls, (unsigned long long)s->async_calls,
              (unsigned long long)s->round_trips, (unsigned long long)s->bytes_sent,
              (unsigned long long)s->bytes_received, s->wall_s))
    return -1;
  if (put_json_str(out, cap, &pos, s->transport ? s->transport : "none")) return -1;
  if (put_raw(out, cap, &pos, ",\"server\":")) return -1;
  if (put_json_str(out, cap, &pos, s->server ? s->server : "")) return -1;
  if (put_raw(out, cap, &pos,
              ",\"sync_every_call\":%s,\"frames_sent\":%llu,\"flushes\":%llu,\"flow_waits\":%llu,\"wait_s\":%.6f,"
              "\"resumes\":%llu,\"quic_direct_moves\":%llu,\"connected\":%s,\"images_sent\":%llu,"
              "\"image_bytes_sent\":%llu,\"image_cache_hits\":%llu}",
              s->sync_every_call ? "true" : "false", (unsigned long long)s->frames_sent,
              (unsigned long long)s->flushes, (unsigned long long)s->flow_waits, s->wait_s,
              (unsigned long long)s->resumes, (unsigned long long)s->quic_direct_moves,
              s->connected ? "true" : "false", (unsigned long long)s->images_sent,
              (unsigned long long)s->image_bytes_sent, (unsigned long long)s->image_cache_hits))
    return -1;
  return (int)pos;
}

int rgpu_client_stats_write(const char *path, const rgpu_client_stats *s) {
  char buf[4096];
  int n = rgpu_client_stats_json(s, buf, sizeof buf - 1);
  if (n < 0) {
    errno = ENOSPC;
    return -1;
  }
  buf[n++] = '\n';
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  size_t off = 0;
  while (off < (size_t)n) {
    ssize_t w = write(fd, buf + off, (size_t)n - off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      int e = errno;
      close(fd);
      errno = e;
      return -1;
    }
    off += (size_t)w;
  }
  return close(fd);
}
