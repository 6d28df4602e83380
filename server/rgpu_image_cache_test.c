/* rgpu_image_cache: store and lookup, verification of corrupted entries,
 * the size bound with LRU eviction, concurrent stores of one image from
 * several processes, and the ownership/permission checks. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "rgpu_image_cache.h"

static char g_dir[256];

static int setup(void **state) {
  (void)state;
  snprintf(g_dir, sizeof g_dir, "/tmp/rgpu-image-cache-test-XXXXXX");
  assert_non_null(mkdtemp(g_dir));
  return 0;
}

static int teardown(void **state) {
  (void)state;
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "chmod -R u+rwx '%s' 2>/dev/null; rm -rf '%s'", g_dir, g_dir);
  return system(cmd) == 0 ? 0 : -1;
}

static void fill(uint8_t *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(seed * 131u + i * 7u + (i >> 8));
}

static char *entry_path(const uint8_t hash[32], char *buf, size_t cap) {
  char hex[65];
  rgpu_image_hash_hex(hash, hex);
  snprintf(buf, cap, "%s/c/%s", g_dir, hex);
  return buf;
}

/* Names in the cache directory that are not entries (temporary files). */
static int count_files(const char *dir, int *tmp) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  *tmp = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.' && (!de->d_name[1] || !strcmp(de->d_name, ".."))) continue;
    if (!strncmp(de->d_name, ".tmp.", 5)) (*tmp)++;
    else n++;
  }
  closedir(d);
  return n;
}

static void test_hash_known_vector(void **state) {
  (void)state;
  uint8_t h[32];
  char hex[65];
  rgpu_image_hash("abc", 3, h);
  rgpu_image_hash_hex(h, hex);
  assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

static void test_store_and_lookup(void **state) {
  (void)state;
  char dir[300], err[256];
  snprintf(dir, sizeof dir, "%s/c", g_dir);
  rgpu_image_cache *c = rgpu_image_cache_open(dir, 1 << 20, err, sizeof err);
  assert_non_null(c);
  struct stat st;
  assert_int_equal(stat(dir, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0700); /* created private */

  uint8_t img[5000], h[32], other[32];
  fill(img, sizeof img, 1);
  void *data;
  size_t len;
  rgpu_image_hash(img, sizeof img, h);
  assert_int_equal(rgpu_image_cache_get(c, h, &data, &len), RGPU_IMAGE_CACHE_MISS);
  uint8_t named[32];
  assert_int_equal(rgpu_image_cache_put(c, img, sizeof img, named), 1);
  assert_memory_equal(named, h, 32);
  assert_int_equal(rgpu_image_cache_put(c, img, sizeof img, NULL), 0); /* already there */
  assert_int_equal(rgpu_image_cache_get(c, h, &data, &len), RGPU_IMAGE_CACHE_HIT);
  assert_int_equal(len, sizeof img);
  assert_memory_equal(data, img, sizeof img);
  free(data);
  char path[400];
  assert_int_equal(stat(entry_path(h, path, sizeof path), &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  /* Another image is another entry; a hash nobody stored misses. */
  fill(img, sizeof img, 2);
  assert_int_equal(rgpu_image_cache_put(c, img, sizeof img, other), 1);
  memset(other, 0x5a, sizeof other);
  assert_int_equal(rgpu_image_cache_get(c, other, &data, &len), RGPU_IMAGE_CACHE_MISS);
  int tmp;
  assert_int_equal(count_files(dir, &tmp), 2);
  assert_int_equal(tmp, 0);
  assert_int_equal(rgpu_image_cache_total(c), 2 * sizeof img);
  rgpu_image_cache_close(c);

  /* A new handle (a later worker, a restarted server) finds it. */
  c = rgpu_image_cache_open(dir, 1 << 20, err, sizeof err);
  assert_non_null(c);
  fill(img, sizeof img, 1);
  assert_int_equal(rgpu_image_cache_get(c, h, &data, &len), RGPU_IMAGE_CACHE_HIT);
  assert_memory_equal(data, img, sizeof img);
  free(data);
  rgpu_image_cache_close(c);
}

static void test_corrupted_entry_removed(void **state) {
  (void)state;
  char dir[300], err[256], path[400];
  snprintf(dir, sizeof dir, "%s/c", g_dir);
  rgpu_image_cache *c = rgpu_image_cache_open(dir, 1 << 20, err, sizeof err);
  assert_non_null(c);
  uint8_t img[4096], h[32];
  fill(img, sizeof img, 3);
  assert_int_equal(rgpu_image_cache_put(c, img, sizeof img, h), 1);
  /* Flip one byte in place. */
  int fd = open(entry_path(h, path, sizeof path), O_RDWR);
  assert_true(fd >= 0);
  uint8_t b;
  assert_int_equal(pread(fd, &b, 1, 100), 1);
  b ^= 0x40;
  assert_int_equal(pwrite(fd, &b, 1, 100), 1);
  close(fd);
  void *data = (void *)1;
  size_t len = 7;
  assert_int_equal(rgpu_image_cache_get(c, h, &data, &len), RGPU_IMAGE_CACHE_CORRUPT);
  assert_null(data);
  assert_int_equal(len, 0);
  assert_int_equal(access(path, F_OK), -1); /* deleted */
  assert_int_equal(rgpu_image_cache_get(c, h, &data, &len), RGPU_IMAGE_CACHE_MISS);
  /* Stored again, it is good again. */
  assert_int_equal(rgpu_image_cache_put(c, img, sizeof img, NULL), 1);
  assert_int_equal(rgpu_image_cache_get(c, h, &data, &len), RGPU_IMAGE_CACHE_HIT);
  free(data);

  /* Truncated (a torn write): also caught, and a put of the right bytes
   * replaces the short file rather than trusting it. */
  assert_int_equal(truncate(path, 1000), 0);
  assert_int_equal(rgpu_image_cache_put(c, img, sizeof img, NULL), 1);
  assert_int_equal(rgpu_image_cache_get(c, h, &data, &len), RGPU_IMAGE_CACHE_HIT);
  free(data);
  assert_int_equal(truncate(path, 1000), 0);
  assert_int_equal(rgpu_image_cache_get(c, h, &data, &len), RGPU_IMAGE_CACHE_CORRUPT);
  assert_int_equal(access(path, F_OK), -1);

  /* A file whose name is another image's hash (a wrong rename). */
  uint8_t img2[64], h2[32];
  fill(img2, sizeof img2, 4);
  rgpu_image_hash(img2, sizeof img2, h2);
  char path2[400];
  FILE *f = fopen(entry_path(h2, path2, sizeof path2), "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(img, 1, 64, f), 64);
  fclose(f);
  chmod(path2, 0600);
  assert_int_equal(rgpu_image_cache_get(c, h2, &data, &len), RGPU_IMAGE_CACHE_CORRUPT);
  assert_int_equal(access(path2, F_OK), -1);
  rgpu_image_cache_close(c);
}

static void set_age(const char *path, time_t age_s) {
  struct timespec t[2];
  clock_gettime(CLOCK_REALTIME, &t[0]);
  t[0].tv_sec -= age_s;
  t[1] = t[0];
  assert_int_equal(utimensat(AT_FDCWD, path, t, 0), 0);
}

static void test_bound_lru(void **state) {
  (void)state;
  char dir[300], err[256], path[400];
  snprintf(dir, sizeof dir, "%s/c", g_dir);
  /* Room for three 10 000-byte images. */
  rgpu_image_cache *c = rgpu_image_cache_open(dir, 30000, err, sizeof err);
  assert_non_null(c);
  enum { N = 10000 };
  static uint8_t img[5][N];
  uint8_t h[5][32];
  for (int i = 0; i < 3; i++) {
    fill(img[i], N, 10 + (unsigned)i);
    assert_int_equal(rgpu_image_cache_put(c, img[i], N, h[i]), 1);
    /* Ages 300, 200, 100 s: image 0 is the least recently used... */
    set_age(entry_path(h[i], path, sizeof path), 300 - 100 * i);
  }
  /* ...until a hit makes it the most recent one. */
  void *data;
  size_t len;
  assert_int_equal(rgpu_image_cache_get(c, h[0], &data, &len), RGPU_IMAGE_CACHE_HIT);
  free(data);
  fill(img[3], N, 13);
  assert_int_equal(rgpu_image_cache_put(c, img[3], N, h[3]), 1);
  /* Over the bound: image 1 (oldest now) went. */
  assert_true(rgpu_image_cache_total(c) <= 30000);
  assert_int_equal(rgpu_image_cache_get(c, h[1], &data, &len), RGPU_IMAGE_CACHE_MISS);
  for (int i = 0; i < 4; i++) {
    if (i == 1) continue;
    assert_int_equal(rgpu_image_cache_get(c, h[i], &data, &len), RGPU_IMAGE_CACHE_HIT);
    assert_memory_equal(data, img[i], N);
    free(data);
  }
  /* An image larger than the whole bound is not stored at all. */
  static uint8_t big[40000];
  fill(big, sizeof big, 99);
  assert_int_equal(rgpu_image_cache_put(c, big, sizeof big, NULL), -EFBIG);
  assert_true(rgpu_image_cache_total(c) <= 30000);

  /* A temporary file of a writer that died an hour ago is cleaned up; a
   * fresh one (a writer at work) is left alone. */
  char stale[400], fresh[400];
  snprintf(stale, sizeof stale, "%s/.tmp.1.2.3", dir);
  snprintf(fresh, sizeof fresh, "%s/.tmp.4.5.6", dir);
  FILE *f = fopen(stale, "wb");
  fclose(f);
  f = fopen(fresh, "wb");
  fclose(f);
  set_age(stale, 7200);
  rgpu_image_cache_evict(c);
  assert_int_equal(access(stale, F_OK), -1);
  assert_int_equal(access(fresh, F_OK), 0);
  unlink(fresh);
  rgpu_image_cache_close(c);

  /* A smaller bound on a reopened cache (the server restarted with a lower
   * --image-cache-max-mb) takes effect at the next store. */
  c = rgpu_image_cache_open(dir, 15000, err, sizeof err);
  assert_non_null(c);
  fill(img[4], N, 14);
  assert_int_equal(rgpu_image_cache_put(c, img[4], N, h[4]), 1);
  assert_true(rgpu_image_cache_total(c) <= 15000);
  assert_int_equal(rgpu_image_cache_get(c, h[4], &data, &len), RGPU_IMAGE_CACHE_HIT);
  free(data);
  rgpu_image_cache_close(c);
}

static void test_concurrent_store(void **state) {
  (void)state;
  char dir[300], err[256];
  snprintf(dir, sizeof dir, "%s/c", g_dir);
  enum { PROCS = 6, ROUNDS = 30, N = 256 * 1024 };
  uint8_t *img = malloc(N);
  assert_non_null(img);
  fill(img, N, 21);
  uint8_t h[32];
  rgpu_image_hash(img, N, h);
  pid_t pids[PROCS];
  for (int p = 0; p < PROCS; p++) {
    pids[p] = fork();
    assert_true(pids[p] >= 0);
    if (pids[p] == 0) {
      /* Each process is a worker of its own, storing and reading the same
       * image; every read it makes must be whole and verified. */
      char e[256];
      rgpu_image_cache *c = rgpu_image_cache_open(dir, 64 << 20, e, sizeof e);
      if (!c) _exit(2);
      for (int r = 0; r < ROUNDS; r++) {
        if (rgpu_image_cache_put(c, img, N, NULL) < 0) _exit(3);
        void *d;
        size_t l;
        int g = rgpu_image_cache_get(c, h, &d, &l);
        /* A hit, or a miss in the instant a writer's rename is not yet
         * visible; never a corrupt entry. */
        if (g == RGPU_IMAGE_CACHE_CORRUPT || g < 0) _exit(4);
        if (g == RGPU_IMAGE_CACHE_HIT && (l != N || memcmp(d, img, N))) _exit(5);
        free(d);
      }
      rgpu_image_cache_close(c);
      _exit(0);
    }
  }
  for (int p = 0; p < PROCS; p++) {
    int st;
    assert_int_equal(waitpid(pids[p], &st, 0), pids[p]);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
  }
  rgpu_image_cache *c = rgpu_image_cache_open(dir, 64 << 20, err, sizeof err);
  assert_non_null(c);
  void *d;
  size_t l;
  assert_int_equal(rgpu_image_cache_get(c, h, &d, &l), RGPU_IMAGE_CACHE_HIT);
  assert_int_equal(l, N);
  assert_memory_equal(d, img, N);
  free(d);
  int tmp;
  assert_int_equal(count_files(dir, &tmp), 1); /* one entry, no leftovers */
  assert_int_equal(tmp, 0);
  rgpu_image_cache_close(c);
  free(img);
}

static void test_permissions(void **state) {
  (void)state;
  char dir[300], err[256], path[400];
  /* A directory others may write into is refused, with the reason. */
  snprintf(dir, sizeof dir, "%s/open", g_dir);
  assert_int_equal(mkdir(dir, 0700), 0);
  assert_int_equal(chmod(dir, 0777), 0);
  assert_null(rgpu_image_cache_open(dir, 0, err, sizeof err));
  assert_non_null(strstr(err, "writable by group or others"));
  /* A symlink in place of the directory is refused. */
  char link[300];
  snprintf(link, sizeof link, "%s/link", g_dir);
  snprintf(dir, sizeof dir, "%s/c", g_dir);
  assert_int_equal(mkdir(dir, 0700), 0);
  assert_int_equal(symlink(dir, link), 0);
  assert_null(rgpu_image_cache_open(link, 0, err, sizeof err));
  /* A regular file is not a directory. */
  char file[300];
  snprintf(file, sizeof file, "%s/file", g_dir);
  FILE *f = fopen(file, "w");
  fclose(f);
  assert_null(rgpu_image_cache_open(file, 0, err, sizeof err));
  /* Owned by another user (only root can arrange that here). */
  if (geteuid() == 0) {
    char theirs[300];
    snprintf(theirs, sizeof theirs, "%s/theirs", g_dir);
    assert_int_equal(mkdir(theirs, 0700), 0);
    assert_int_equal(chown(theirs, 65534, 65534), 0);
    assert_null(rgpu_image_cache_open(theirs, 0, err, sizeof err));
    assert_non_null(strstr(err, "owned by another user"));
  }

  rgpu_image_cache *c = rgpu_image_cache_open(dir, 1 << 20, err, sizeof err);
  assert_non_null(c);
  uint8_t img[2048], h[32];
  fill(img, sizeof img, 31);
  void *d;
  size_t l;
  /* An entry with the right bytes that others could have written is not
   * trusted: removed, reported, and the image is fetched again. */
  assert_int_equal(rgpu_image_cache_put(c, img, sizeof img, h), 1);
  assert_int_equal(chmod(entry_path(h, path, sizeof path), 0666), 0);
  assert_int_equal(rgpu_image_cache_get(c, h, &d, &l), RGPU_IMAGE_CACHE_CORRUPT);
  assert_int_equal(access(path, F_OK), -1);
  /* The same for a symlink to a file with the right bytes. */
  char target[300];
  snprintf(target, sizeof target, "%s/target", g_dir);
  f = fopen(target, "wb");
  assert_int_equal(fwrite(img, 1, sizeof img, f), sizeof img);
  fclose(f);
  chmod(target, 0600);
  assert_int_equal(symlink(target, path), 0);
  assert_int_equal(rgpu_image_cache_get(c, h, &d, &l), RGPU_IMAGE_CACHE_CORRUPT);
  struct stat st;
  assert_int_equal(lstat(path, &st), -1);
  /* A FIFO does not hang the lookup. */
  assert_int_equal(mkfifo(path, 0600), 0);
  assert_int_equal(rgpu_image_cache_get(c, h, &d, &l), RGPU_IMAGE_CACHE_CORRUPT);
  assert_int_equal(lstat(path, &st), -1);
  if (geteuid() == 0) {
    assert_int_equal(rgpu_image_cache_put(c, img, sizeof img, h), 1);
    assert_int_equal(chown(path, 65534, 65534), 0);
    assert_int_equal(rgpu_image_cache_get(c, h, &d, &l), RGPU_IMAGE_CACHE_CORRUPT);
    assert_int_equal(access(path, F_OK), -1);
  }
  rgpu_image_cache_close(c);
}

static void test_default_dir(void **state) {
  (void)state;
  char out[512], want[512];
  char *old = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
  setenv("XDG_CACHE_HOME", "/home/u/.cache", 1);
  rgpu_image_cache_default_dir(out, sizeof out);
  assert_string_equal(out, "/home/u/.cache/rgpu/images");
  unsetenv("XDG_CACHE_HOME");
  rgpu_image_cache_default_dir(out, sizeof out);
  snprintf(want, sizeof want, "/var/tmp/rgpu-image-cache-%u", (unsigned)geteuid());
  assert_string_equal(out, want);
  if (old) {
    setenv("XDG_CACHE_HOME", old, 1);
    free(old);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hash_known_vector),
      cmocka_unit_test_setup_teardown(test_store_and_lookup, setup, teardown),
      cmocka_unit_test_setup_teardown(test_corrupted_entry_removed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bound_lru, setup, teardown),
      cmocka_unit_test_setup_teardown(test_concurrent_store, setup, teardown),
      cmocka_unit_test_setup_teardown(test_permissions, setup, teardown),
      cmocka_unit_test(test_default_dir),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
