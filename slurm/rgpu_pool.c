#define _GNU_SOURCE
#include "rgpu_pool.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t') s++;
  size_t n = strlen(s);
  while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
    s[--n] = 0;
  return s;
}

static int name_ok(const char *s) {
  if (!*s || *s == '.') return 0;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
          *s == '-' || *s == '_' || *s == '.'))
      return 0;
  return 1;
}

int rgpu_pool_load(const char *path, rgpu_pool *p, char *err, size_t errlen) {
  memset(p, 0, sizeof *p);
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(err, errlen, "pool file %s: %s", path, strerror(errno));
    return -1;
  }
  char buf[1024];
  int lineno = 0, rc = 0;
  while (!rc && fgets(buf, sizeof buf, f)) {
    lineno++;
    char *hash = strchr(buf, '#');
    if (hash) *hash = 0;
    char *line = trim(buf);
    if (!*line) continue;
    char key[32], a[512], b[512], c[64];
    int n = sscanf(line, "%31s %511s %511s %63s", key, a, b, c);
    if (!strcmp(key, "token-dir") && n == 2) {
      if (a[0] != '/') {
        snprintf(err, errlen, "%s:%d: token-dir must be an absolute path", path, lineno);
        rc = -1;
      }
      snprintf(p->token_dir, sizeof p->token_dir, "%s", a);
    } else if (!strcmp(key, "ca") && n == 2) {
      snprintf(p->ca, sizeof p->ca, "%s", a);
    } else if (!strcmp(key, "server") && (n == 3 || n == 4)) {
      if (p->nservers == RGPU_POOL_MAX_SERVERS) {
        snprintf(err, errlen, "%s:%d: more than %d servers", path, lineno, RGPU_POOL_MAX_SERVERS);
        rc = -1;
        break;
      }
      rgpu_pool_server *s = &p->servers[p->nservers];
      int gpus = 1;
      if (n == 4) {
        char *end;
        long v = strncmp(c, "gpus=", 5) ? -1 : strtol(c + 5, &end, 10);
        if (v < 1 || v > 4096 || *end) {
          snprintf(err, errlen, "%s:%d: expected gpus=N (N >= 1), got '%s'", path, lineno, c);
          rc = -1;
          break;
        }
        gpus = (int)v;
      }
      if (!name_ok(a) || strlen(a) >= sizeof s->name) {
        snprintf(err, errlen, "%s:%d: server name '%s': letters, digits, '-', '_', '.' only", path,
                 lineno, a);
        rc = -1;
        break;
      }
      if (!strstr(b, "://") || strlen(b) >= sizeof s->uri) {
        snprintf(err, errlen, "%s:%d: '%s' is not a server URI (tcp://, tls://, quic://)", path,
                 lineno, b);
        rc = -1;
        break;
      }
      for (int i = 0; i < p->nservers; i++)
        if (!strcmp(p->servers[i].name, a)) {
          snprintf(err, errlen, "%s:%d: server %s named twice", path, lineno, a);
          rc = -1;
        }
      snprintf(s->name, sizeof s->name, "%s", a);
      snprintf(s->uri, sizeof s->uri, "%s", b);
      s->gpus = gpus;
      p->nservers++;
    } else {
      snprintf(err, errlen,
               "%s:%d: expected 'token-dir DIR', 'ca FILE' or 'server NAME URI gpus=N', got '%s'",
               path, lineno, line);
      rc = -1;
    }
  }
  fclose(f);
  if (!rc && !p->token_dir[0]) {
    snprintf(err, errlen, "%s: no token-dir line", path);
    rc = -1;
  }
  if (!rc && p->nservers == 0) {
    snprintf(err, errlen, "%s: no server line", path);
    rc = -1;
  }
  return rc;
}

static int server_dir(const rgpu_pool *p, int i, char *out, size_t cap) {
  return snprintf(out, cap, "%s/%s", p->token_dir, p->servers[i].name) >= (int)cap ? -1 : 0;
}

/* gpus= and expires= of one token file; -1 when it is not one. */
static int read_grant_file(const char *path, int *gpus, int64_t *expires) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[512];
  *gpus = 1;
  *expires = 0;
  int first = 1;
  while (fgets(line, sizeof line, f)) {
    if (first) { /* the token */
      first = 0;
      continue;
    }
    if (!strncmp(line, "gpus=", 5)) *gpus = atoi(line + 5);
    if (!strncmp(line, "expires=", 8)) *expires = strtoll(line + 8, NULL, 10);
  }
  fclose(f);
  return first ? -1 : 0;
}

int rgpu_pool_used(const rgpu_pool *p, int i, int64_t now) {
  char dir[700];
  if (server_dir(p, i, dir, sizeof dir)) return -1;
  DIR *d = opendir(dir);
  if (!d) return errno == ENOENT ? 0 : -1;
  int used = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[1024];
    if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) continue;
    int gpus;
    int64_t expires;
    if (read_grant_file(path, &gpus, &expires)) continue;
    if (expires && now >= expires) {
      /* Its job is long gone (the server refuses the token already). */
      unlink(path);
      continue;
    }
    if (gpus > 0) used += gpus;
  }
  closedir(d);
  return used;
}

static int write_token_file(const char *dir, const char *name, const rgpu_pool_grant *g, int gpus,
                            long gid, char *err, size_t errlen) {
  char tmp[1024], path[1024];
  if (snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name) >= (int)sizeof tmp ||
      snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) {
    snprintf(err, errlen, "token path too long in %s", dir);
    return -1;
  }
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    return -1;
  }
  char body[512];
  int n = snprintf(body, sizeof body, "%s\nexpires=%lld\ngpus=%d\n", g->token,
                   (long long)g->expires, gpus);
  int ok = write(fd, body, (size_t)n) == n;
  /* The server's user reads it through the group (never everyone). */
  if (ok && gid >= 0) ok = fchown(fd, (uid_t)-1, (gid_t)gid) == 0 && fchmod(fd, 0640) == 0;
  ok = ok && fsync(fd) == 0;
  explicit_bzero(body, sizeof body);
  close(fd);
  if (!ok || rename(tmp, path) != 0) {
    snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
    unlink(tmp);
    return -1;
  }
  return 0;
}

int rgpu_pool_grant_gpus(const rgpu_pool *p, int gpus, const char *name, int64_t expires,
                         long gid, int64_t now, rgpu_pool_grant *g, char *err, size_t errlen) {
  memset(g, 0, sizeof *g);
  if (errlen) err[0] = 0;
  if (gpus < 1 || gpus > RGPU_POOL_MAX_GPUS) {
    snprintf(err, errlen, "%d remote GPUs asked: 1 .. %d per job", gpus, RGPU_POOL_MAX_GPUS);
    return -1;
  }
  if (!name_ok(name) || strlen(name) >= sizeof g->name) {
    snprintf(err, errlen, "bad token name '%s'", name);
    return -1;
  }
  if (mkdir(p->token_dir, 0755) < 0 && errno != EEXIST) {
    snprintf(err, errlen, "token directory %s: %s", p->token_dir, strerror(errno));
    return -1;
  }
  char lockpath[600];
  snprintf(lockpath, sizeof lockpath, "%s/.lock", p->token_dir);
  int lk = open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lk < 0 || flock(lk, LOCK_EX) < 0) {
    snprintf(err, errlen, "pool lock %s: %s", lockpath, strerror(errno));
    if (lk >= 0) close(lk);
    return -1;
  }
  int rc = -1;
  int freen[RGPU_POOL_MAX_SERVERS], total = 0;
  for (int i = 0; i < p->nservers; i++) {
    int used = rgpu_pool_used(p, i, now);
    freen[i] = used < 0 ? 0 : p->servers[i].gpus - used;
    if (freen[i] < 0) freen[i] = 0;
    total += freen[i];
  }
  if (total < gpus) {
    snprintf(err, errlen, "%d remote GPU%s asked, %d free in the pool of %d server%s", gpus,
             gpus == 1 ? "" : "s", total, p->nservers, p->nservers == 1 ? "" : "s");
    goto out;
  }
  /* One GPU at a time: to a server this job has the fewest GPUs on, among
   * those the one with the most free (the first in the pool file on a
   * tie).  A job spreads over servers, and load spreads over jobs. */
  int take[RGPU_POOL_MAX_SERVERS] = {0};
  for (int k = 0; k < gpus; k++) {
    int best = -1;
    for (int i = 0; i < p->nservers; i++) {
      if (freen[i] - take[i] <= 0) continue;
      if (best < 0 || take[i] < take[best] ||
          (take[i] == take[best] && freen[i] - take[i] > freen[best] - take[best]))
        best = i;
    }
    take[best]++;
    g->server[g->n++] = best;
  }
  uint8_t raw[32];
  if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
    snprintf(err, errlen, "getrandom failed: %s", strerror(errno));
    goto out;
  }
  for (int i = 0; i < 32; i++) snprintf(g->token + 2 * i, 3, "%02x", raw[i]);
  explicit_bzero(raw, sizeof raw);
  snprintf(g->name, sizeof g->name, "%s", name);
  g->expires = expires;
  for (int i = 0; i < p->nservers; i++) {
    if (!take[i]) continue;
    char dir[700];
    if (server_dir(p, i, dir, sizeof dir) || (mkdir(dir, 0755) < 0 && errno != EEXIST) ||
        write_token_file(dir, name, g, take[i], gid, err, errlen)) {
      if (!err[0]) snprintf(err, errlen, "token directory %s: %s", dir, strerror(errno));
      rgpu_pool_revoke(p, name);
      goto out;
    }
  }
  rc = 0;
out:
  flock(lk, LOCK_UN);
  close(lk);
  if (rc) explicit_bzero(g, sizeof *g);
  return rc;
}

int rgpu_pool_revoke(const rgpu_pool *p, const char *name) {
  if (!name_ok(name)) return 0;
  int removed = 0;
  for (int i = 0; i < p->nservers; i++) {
    char dir[700], path[1024];
    if (server_dir(p, i, dir, sizeof dir)) continue;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (unlink(path) == 0) removed++;
  }
  return removed;
}

int rgpu_pool_revoke_job(const rgpu_pool *p, uint32_t job) {
  char prefix[32];
  int plen = snprintf(prefix, sizeof prefix, "job-%u.", job);
  int removed = 0;
  for (int i = 0; i < p->nservers; i++) {
    char dir[700];
    if (server_dir(p, i, dir, sizeof dir)) continue;
    DIR *d = opendir(dir);
    if (!d) continue;
    struct dirent *e;
    while ((e = readdir(d))) {
      if (strncmp(e->d_name, prefix, (size_t)plen)) continue;
      char path[1024];
      if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) < (int)sizeof path &&
          unlink(path) == 0)
        removed++;
    }
    closedir(d);
  }
  return removed;
}

int rgpu_pool_grant_servers(const rgpu_pool *p, const rgpu_pool_grant *g, char *out, size_t cap) {
  size_t o = 0;
  if (cap) out[0] = 0;
  for (int k = 0; k < g->n; k++) {
    int n = snprintf(out + o, cap - o, "%s%s", k ? "," : "", p->servers[g->server[k]].uri);
    if (n < 0 || (size_t)n >= cap - o) return -1;
    o += (size_t)n;
  }
  return 0;
}
