/* rgpu_image_cache: see rgpu_image_cache.h. */
#define _GNU_SOURCE
#include "rgpu_image_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <gnutls/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rgpu_log.h"

/* A temporary file this old belongs to a writer that died. */
#define STALE_TMP_S 3600
#define TMP_PREFIX ".tmp."

struct rgpu_image_cache {
  int dirfd;
  uint64_t max_bytes;
  char dir[512]; /* for log lines only: every access goes through dirfd */
  unsigned tmp_counter;
};

void rgpu_image_hash(const void *data, size_t len, uint8_t out[RGPU_IMAGE_HASH_BYTES]) {
  /* gnutls_hash_fast cannot fail for SHA-256 short of a broken library;
   * a zero hash then never matches an entry (entries are named by their
   * real hash), so the image is merely not cached. */
  if (gnutls_hash_fast(GNUTLS_DIG_SHA256, data, len, out) < 0)
    memset(out, 0, RGPU_IMAGE_HASH_BYTES);
}

void rgpu_image_hash_hex(const uint8_t hash[RGPU_IMAGE_HASH_BYTES], char out[65]) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < RGPU_IMAGE_HASH_BYTES; i++) {
    out[2 * i] = digits[hash[i] >> 4];
    out[2 * i + 1] = digits[hash[i] & 15];
  }
  out[64] = 0;
}

static int is_entry_name(const char *s) {
  size_t n = 0;
  for (; s[n]; n++)
    if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f'))) return 0;
  return n == 2 * RGPU_IMAGE_HASH_BYTES;
}

void rgpu_image_cache_default_dir(char *out, size_t cap) {
  const char *xdg = getenv("XDG_CACHE_HOME");
  if (xdg && xdg[0] == '/')
    snprintf(out, cap, "%s/rgpu/images", xdg);
  else
    snprintf(out, cap, "/var/tmp/rgpu-image-cache-%u", (unsigned)geteuid());
}

/* Another user must not be able to write where images come from. */
static const char *untrusted(const struct stat *st, int want_dir) {
  if (want_dir ? !S_ISDIR(st->st_mode) : !S_ISREG(st->st_mode))
    return want_dir ? "not a directory" : "not a regular file";
  if (st->st_uid != geteuid()) return "owned by another user";
  if (st->st_mode & (S_IWGRP | S_IWOTH)) return "writable by group or others";
  return NULL;
}

/* mkdir -p with mode 0700 for what it creates. */
static int make_dirs(const char *dir) {
  char path[512];
  if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) return -ENAMETOOLONG;
  for (char *p = path + 1;; p++) {
    if (*p != '/' && *p != 0) continue;
    char saved = *p;
    *p = 0;
    if (mkdir(path, 0700) != 0 && errno != EEXIST) return -errno;
    *p = saved;
    if (!saved) break;
  }
  return 0;
}

rgpu_image_cache *rgpu_image_cache_open(const char *dir, uint64_t max_bytes, char *err,
                                        size_t errlen) {
  if (!dir || dir[0] == 0) {
    snprintf(err, errlen, "no image cache directory given");
    return NULL;
  }
  if (strlen(dir) >= sizeof ((rgpu_image_cache *)0)->dir) {
    snprintf(err, errlen, "image cache directory name too long: %s", dir);
    return NULL;
  }
  int r = make_dirs(dir);
  if (r) {
    snprintf(err, errlen, "cannot create image cache directory %s: %s", dir, strerror(-r));
    return NULL;
  }
  /* O_NOFOLLOW: a symlink planted in place of the directory is refused. */
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    snprintf(err, errlen, "cannot open image cache directory %s: %s", dir, strerror(errno));
    return NULL;
  }
  struct stat st;
  const char *why = fstat(fd, &st) ? strerror(errno) : untrusted(&st, 1);
  if (why) {
    snprintf(err, errlen,
             "image cache directory %s is %s; use a directory of this user that only it can "
             "write (mode 0700)",
             dir, why);
    close(fd);
    return NULL;
  }
  rgpu_image_cache *c = calloc(1, sizeof *c);
  if (!c) {
    snprintf(err, errlen, "out of memory");
    close(fd);
    return NULL;
  }
  c->dirfd = fd;
  c->max_bytes = max_bytes ? max_bytes : (uint64_t)RGPU_IMAGE_CACHE_DEFAULT_MB << 20;
  snprintf(c->dir, sizeof c->dir, "%s", dir);
  return c;
}

void rgpu_image_cache_close(rgpu_image_cache *c) {
  if (!c) return;
  close(c->dirfd);
  free(c);
}

/* Removes name if it is still the file fd refers to: a concurrent writer
 * may have renamed a good entry over the bad one meanwhile. */
static void remove_entry(rgpu_image_cache *c, const char *name, int fd) {
  struct stat a, b;
  if (fd >= 0 && fstat(fd, &a) == 0 &&
      fstatat(c->dirfd, name, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
      (a.st_dev != b.st_dev || a.st_ino != b.st_ino))
    return;
  if (unlinkat(c->dirfd, name, 0) != 0 && errno != ENOENT)
    RGPU_WARN("image cache %s: cannot remove %s: %s", c->dir, name, strerror(errno));
}

static int read_all(int fd, uint8_t *buf, size_t len) {
  size_t off = 0;
  while (off < len) {
    ssize_t n = pread(fd, buf + off, len - off, (off_t)off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    off += (size_t)n;
  }
  /* One byte more would mean the file grew: not the entry we sized. */
  uint8_t extra;
  return pread(fd, &extra, 1, (off_t)len) == 0 ? 0 : -1;
}

int rgpu_image_cache_get(rgpu_image_cache *c, const uint8_t hash[RGPU_IMAGE_HASH_BYTES],
                         void **data, size_t *len) {
  *data = NULL;
  *len = 0;
  char name[65];
  rgpu_image_hash_hex(hash, name);
  /* O_NONBLOCK: opening a planted FIFO must not hang the session. */
  int fd = openat(c->dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return RGPU_IMAGE_CACHE_MISS;
    if (errno == ELOOP) { /* a symlink: never ours */
      RGPU_WARN("image cache %s: entry %s is a symbolic link; removed", c->dir, name);
      remove_entry(c, name, -1);
      return RGPU_IMAGE_CACHE_CORRUPT;
    }
    return -errno;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  const char *why = untrusted(&st, 0);
  if (!why && (uint64_t)st.st_size > RGPU_IMAGE_CACHE_MAX_ENTRY) why = "larger than any image";
  if (why) {
    RGPU_WARN("image cache %s: entry %s is %s; removed", c->dir, name, why);
    remove_entry(c, name, fd);
    close(fd);
    return RGPU_IMAGE_CACHE_CORRUPT;
  }
  size_t n = (size_t)st.st_size;
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) {
    close(fd);
    return -ENOMEM;
  }
  uint8_t got[RGPU_IMAGE_HASH_BYTES];
  int ok = read_all(fd, buf, n) == 0;
  if (ok) {
    rgpu_image_hash(buf, n, got);
    ok = memcmp(got, hash, sizeof got) == 0;
  }
  if (!ok) {
    RGPU_WARN("image cache %s: entry %s does not match its hash (%zu bytes); removed", c->dir,
              name, n);
    remove_entry(c, name, fd);
    close(fd);
    free(buf);
    return RGPU_IMAGE_CACHE_CORRUPT;
  }
  /* Most recently used now (mtime drives eviction). */
  futimens(fd, NULL);
  close(fd);
  *data = buf;
  *len = n;
  return RGPU_IMAGE_CACHE_HIT;
}

static int write_all(int fd, const uint8_t *p, size_t len) {
  while (len) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

int rgpu_image_cache_put(rgpu_image_cache *c, const void *data, size_t len,
                         uint8_t hash_out[RGPU_IMAGE_HASH_BYTES]) {
  uint8_t hash[RGPU_IMAGE_HASH_BYTES];
  rgpu_image_hash(data, len, hash);
  if (hash_out) memcpy(hash_out, hash, sizeof hash);
  char name[65];
  rgpu_image_hash_hex(hash, name);
  struct stat st;
  if (fstatat(c->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
      (uint64_t)st.st_size == len && !untrusted(&st, 0)) {
    /* Present (its bytes are checked when read): only refresh its age. */
    utimensat(c->dirfd, name, NULL, AT_SYMLINK_NOFOLLOW);
    return 0;
  }
  if (len > c->max_bytes || len > RGPU_IMAGE_CACHE_MAX_ENTRY) return -EFBIG;
  char tmp[96];
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  snprintf(tmp, sizeof tmp, TMP_PREFIX "%ld.%lld.%u", (long)getpid(), (long long)now.tv_nsec,
           c->tmp_counter++);
  int fd = openat(c->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return -errno;
  int r = write_all(fd, data, len);
  if (close(fd) != 0 && !r) r = -errno;
  /* rename replaces atomically: readers see the old entry or the whole new
   * one; a same-hash writer racing us renames identical bytes. */
  if (!r && renameat(c->dirfd, tmp, c->dirfd, name) != 0) r = -errno;
  if (r) {
    unlinkat(c->dirfd, tmp, 0);
    return r;
  }
  rgpu_image_cache_evict(c);
  return 1;
}

typedef struct {
  char name[65];
  uint64_t size;
  struct timespec mtime;
} entry_info;

static int older_first(const void *a, const void *b) {
  const entry_info *x = a, *y = b;
  if (x->mtime.tv_sec != y->mtime.tv_sec) return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
  if (x->mtime.tv_nsec != y->mtime.tv_nsec) return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* The entries in the directory (allocated), removing stale temporary files
 * on the way.  Returns how many, or -1. */
static long scan(rgpu_image_cache *c, entry_info **out, uint64_t *total) {
  *out = NULL;
  *total = 0;
  int fd = openat(c->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return -1;
  }
  entry_info *v = NULL;
  size_t n = 0, cap = 0;
  time_t now = time(NULL);
  struct dirent *de;
  while ((de = readdir(d))) {
    struct stat st;
    if (fstatat(c->dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
      continue;
    if (!strncmp(de->d_name, TMP_PREFIX, strlen(TMP_PREFIX))) {
      if (st.st_mtime + STALE_TMP_S < now) unlinkat(c->dirfd, de->d_name, 0);
      continue;
    }
    if (!is_entry_name(de->d_name)) continue;
    if (n == cap) {
      size_t nc = cap ? cap * 2 : 64;
      entry_info *nv = realloc(v, nc * sizeof *nv);
      if (!nv) break;
      v = nv;
      cap = nc;
    }
    memcpy(v[n].name, de->d_name, 65);
    v[n].size = (uint64_t)st.st_size;
    v[n].mtime = st.st_mtim;
    *total += v[n].size;
    n++;
  }
  closedir(d);
  *out = v;
  return (long)n;
}

int rgpu_image_cache_evict(rgpu_image_cache *c) {
  entry_info *v;
  uint64_t total;
  long n = scan(c, &v, &total);
  if (n < 0) return 0;
  int removed = 0;
  if (total > c->max_bytes) {
    qsort(v, (size_t)n, sizeof *v, older_first);
    for (long i = 0; i < n && total > c->max_bytes; i++) {
      if (unlinkat(c->dirfd, v[i].name, 0) != 0 && errno != ENOENT) continue;
      total -= v[i].size;
      removed++;
      RGPU_INFO("event=image-cache-evict hash=%.16s bytes=%llu dir=%s", v[i].name,
                (unsigned long long)v[i].size, c->dir);
    }
  }
  free(v);
  return removed;
}

uint64_t rgpu_image_cache_total(rgpu_image_cache *c) {
  entry_info *v;
  uint64_t total;
  if (scan(c, &v, &total) < 0) return 0;
  free(v);
  return total;
}
