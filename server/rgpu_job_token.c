#define _GNU_SOURCE
#include "rgpu_job_token.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A token file is small; anything larger is not one. */
#define JOB_TOKEN_FILE_MAX (RGPU_AUTH_TOKEN_MAX + 4096)

static void trim_right(char *s) {
  size_t n = strlen(s);
  while (n > 0 && (s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t')) s[--n] = 0;
}

int rgpu_job_token_read(const char *path, rgpu_job_token *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  /* Not through a symlink: the directory's writer decides what is a token,
   * nobody who can only make links elsewhere. */
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    snprintf(err, errlen, "token file %s: %s", path, strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    snprintf(err, errlen, "token file %s: not a regular file", path);
    return -1;
  }
  if (st.st_mode & S_IWOTH) {
    close(fd);
    snprintf(err, errlen, "token file %s: writable by everyone; ignored", path);
    return -1;
  }
  if (st.st_size > JOB_TOKEN_FILE_MAX) {
    close(fd);
    snprintf(err, errlen, "token file %s: larger than %d bytes", path, JOB_TOKEN_FILE_MAX);
    return -1;
  }
  char *buf = malloc(JOB_TOKEN_FILE_MAX + 1);
  if (!buf) {
    close(fd);
    snprintf(err, errlen, "token file %s: out of memory", path);
    return -1;
  }
  size_t n = 0;
  for (;;) {
    ssize_t r = read(fd, buf + n, JOB_TOKEN_FILE_MAX - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += (size_t)r;
    if (n == JOB_TOKEN_FILE_MAX) break;
  }
  close(fd);
  buf[n] = 0;
  int rc = -1;
  char *save = NULL;
  /* The first line is the token even when empty (strtok would skip it). */
  char *line = buf, *nl = strchr(buf, '\n');
  char *rest = nl ? nl + 1 : buf + n;
  if (nl) *nl = 0;
  trim_right(line);
  size_t tl = strlen(line);
  if (tl == 0 || tl > RGPU_AUTH_TOKEN_MAX) {
    snprintf(err, errlen, "token file %s: the first line (the token) is %s", path,
             tl == 0 ? "empty" : "too long");
    goto out;
  }
  memcpy(out->token, line, tl + 1);
  for (line = strtok_r(rest, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    trim_right(line);
    if (strncmp(line, "expires=", 8) != 0) continue;
    char *end;
    errno = 0;
    long long v = strtoll(line + 8, &end, 10);
    if (errno || end == line + 8 || *end || v < 0) {
      snprintf(err, errlen, "token file %s: bad expires= value '%s'", path, line + 8);
      goto out;
    }
    out->expires = (int64_t)v;
  }
  rc = 0;
out:
  /* The buffer held a secret. */
  explicit_bzero(buf, JOB_TOKEN_FILE_MAX + 1);
  free(buf);
  if (rc) explicit_bzero(out, sizeof *out);
  return rc;
}

/* Names the scheduler's writer keeps for itself (temporary files, locks)
 * start with a dot. */
static int token_name_ok(const char *name) {
  return name[0] && name[0] != '.' && !strchr(name, '/') && strlen(name) < RGPU_JOB_TOKEN_NAME_MAX;
}

int rgpu_job_token_find(const char *dir, const void *given, size_t len, int64_t now, char *name,
                        size_t cap, char *err, size_t errlen) {
  DIR *d = opendir(dir);
  if (!d) {
    snprintf(err, errlen, "token directory %s: %s", dir, strerror(errno));
    return -1;
  }
  int found = 0;
  struct dirent *e;
  static rgpu_job_token t; /* large (4 KiB token); a worker runs one HELLO at a time */
  while ((e = readdir(d))) {
    if (!token_name_ok(e->d_name)) continue;
    char path[1024];
    if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) continue;
    char why[256];
    if (rgpu_job_token_read(path, &t, why, sizeof why)) continue;
    int live = t.expires == 0 || now < t.expires;
    /* Compared whatever the expiry says: the time taken does not tell
     * which files are live. */
    int eq = rgpu_auth_token_equal(t.token, given, len);
    if (eq && live && !found) {
      snprintf(name, cap, "%s", e->d_name);
      found = 1;
    }
  }
  explicit_bzero(&t, sizeof t);
  closedir(d);
  return found;
}

int rgpu_job_token_still_valid(const char *dir, const char *name, int64_t now, char *err,
                               size_t errlen) {
  char path[1024];
  if (!token_name_ok(name) || snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) {
    snprintf(err, errlen, "bad token name");
    return 0;
  }
  static rgpu_job_token t;
  if (rgpu_job_token_read(path, &t, err, errlen)) return 0;
  int live = t.expires == 0 || now < t.expires;
  explicit_bzero(&t, sizeof t);
  if (!live) snprintf(err, errlen, "token %s expired", name);
  return live;
}
