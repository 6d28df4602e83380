/* rgpu_image_cache: the server's on-disk, content-addressed cache of kernel
 * images (issue 15), so that an image crosses the link once per server
 * instead of once per process start.
 *
 * Workers are separate processes forked per session, so the cache is a
 * directory they all share, and it outlives the server.  Each entry is one
 * file named by the lower-case hex SHA-256 of its bytes.  Rules:
 *
 * - Trust: the directory must belong to the server's user and be writable
 *   by nobody else (checked when opened, through a descriptor that does not
 *   follow symlinks, and every later access is relative to that
 *   descriptor), and an entry must be a regular file of that user that
 *   nobody else can write.  So another user cannot plant an image; an
 *   entry that fails the checks is removed like a corrupted one.
 * - Verified: an entry is read back whole and hashed again before use; a
 *   mismatch (a flipped bit, a truncated write) deletes it and reports
 *   RGPU_IMAGE_CACHE_CORRUPT, and the caller fetches the image again.
 * - Atomic: a store writes a temporary file (".tmp.*") and renames it to
 *   its name, so a concurrent reader or a crashed writer never exposes a
 *   partial entry.  No fsync: a torn entry after a power loss is caught
 *   by the hash.  Concurrent stores of the same image both rename
 *   identical bytes into place.
 * - Bounded: after a store, least recently used entries (by mtime, which a
 *   hit refreshes; atime is unreliable under noatime/relatime) are removed
 *   until the entries total at most max_bytes.  Temporary files left by a
 *   crashed writer are removed once they are an hour old.
 *
 * A name is computed here from the bytes (rgpu_image_cache_put hashes what
 * it is given), never taken from a client, so a client cannot store bytes
 * under another image's name.
 *
 * Not thread-safe per handle (one per worker process); any number of
 * processes may share the directory. */
#ifndef RGPU_IMAGE_CACHE_H
#define RGPU_IMAGE_CACHE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RGPU_IMAGE_HASH_BYTES 32
#define RGPU_IMAGE_CACHE_DEFAULT_MB 1024
/* Larger entries are neither stored nor read (the fatbin limit). */
#define RGPU_IMAGE_CACHE_MAX_ENTRY ((size_t)1 << 30)

/* Results of rgpu_image_cache_get; other failures are -errno. */
enum {
  RGPU_IMAGE_CACHE_HIT = 0,
  RGPU_IMAGE_CACHE_MISS = 1,
  RGPU_IMAGE_CACHE_CORRUPT = 2, /* an entry was there but failed its checks: removed */
};

typedef struct rgpu_image_cache rgpu_image_cache;

/* The default directory: $XDG_CACHE_HOME/rgpu/images when XDG_CACHE_HOME
 * is set (and absolute), else /var/tmp/rgpu-image-cache-<uid>. */
void rgpu_image_cache_default_dir(char *out, size_t cap);

/* Creates dir (and missing parents, mode 0700) if needed, then opens it
 * after the checks above.  Returns NULL with a sentence in err when the
 * directory cannot be used.  max_bytes 0 means the default bound. */
rgpu_image_cache *rgpu_image_cache_open(const char *dir, uint64_t max_bytes, char *err,
                                        size_t errlen);
void rgpu_image_cache_close(rgpu_image_cache *c);

/* Looks hash up.  On a hit *data (malloc'd, free() it) holds the verified
 * *len bytes and the entry becomes the most recently used. */
int rgpu_image_cache_get(rgpu_image_cache *c, const uint8_t hash[RGPU_IMAGE_HASH_BYTES],
                         void **data, size_t *len);

/* Stores data under its SHA-256 (written to hash_out when not NULL), then
 * evicts down to the bound.  Returns 1 stored, 0 already present (made most
 * recent), or -errno (-EFBIG: larger than the bound, not stored). */
int rgpu_image_cache_put(rgpu_image_cache *c, const void *data, size_t len,
                         uint8_t hash_out[RGPU_IMAGE_HASH_BYTES]);

/* Removes least recently used entries until they total at most the bound,
 * and stale temporary files.  Returns how many entries it removed. */
int rgpu_image_cache_evict(rgpu_image_cache *c);

/* Total bytes of the entries now in the directory (tests, logs). */
uint64_t rgpu_image_cache_total(rgpu_image_cache *c);

/* SHA-256 of data, and its 64-character lower-case hex form (out: 65 bytes). */
void rgpu_image_hash(const void *data, size_t len, uint8_t out[RGPU_IMAGE_HASH_BYTES]);
void rgpu_image_hash_hex(const uint8_t hash[RGPU_IMAGE_HASH_BYTES], char out[65]);

#ifdef __cplusplus
}
#endif
#endif
