/* The kernel image cache seen from a session (issue 15): what MODULE_LOAD
 * (rgpu_handlers.c) needs of server/rgpu_image_cache.h, with the session's
 * log lines (one per hit, store and corrupted entry, at info level) and
 * its metrics.  The cache logic itself stays in rgpu_image_cache.c. */
#include <errno.h>
#include <string.h>

#include "rgpu_image_cache.h"
#include "rgpu_log.h"
#include "rgpu_metrics.h"
#include "rgpu_worker_internal.h"

struct rgpu_image_cache *rgpu_worker_image_cache(rgpu_worker *w) {
  if (w->image_cache_state == 0) {
    w->image_cache_state = -1;
    if (w->cfg.image_cache_dir[0]) {
      char err[768];
      w->image_cache = rgpu_image_cache_open(w->cfg.image_cache_dir, w->cfg.image_cache_max_bytes,
                                             err, sizeof err);
      if (w->image_cache)
        w->image_cache_state = 1;
      else
        RGPU_WARN("session=%llu event=image-cache-unusable %s: images are sent every time",
                  (unsigned long long)w->cfg.session_id, err);
    }
  }
  return w->image_cache;
}

CUresult rgpu_worker_image_lookup(rgpu_worker *w, const uint8_t *hash, void **data, size_t *len) {
  struct rgpu_image_cache *c = rgpu_worker_image_cache(w);
  char hex[65];
  rgpu_image_hash_hex(hash, hex);
  int r = c ? rgpu_image_cache_get(c, hash, data, len) : RGPU_IMAGE_CACHE_MISS;
  unsigned long long sid = (unsigned long long)w->cfg.session_id;
  if (r == RGPU_IMAGE_CACHE_HIT) {
    RGPU_INFO("session=%llu event=image-cache-hit hash=%.16s bytes=%zu", sid, hex, *len);
    rgpu_metrics_image_cache(RGPU_METRICS_IMAGE_HIT);
    return CUDA_SUCCESS;
  }
  if (r == RGPU_IMAGE_CACHE_CORRUPT) {
    RGPU_INFO("session=%llu event=image-cache-corrupt hash=%.16s (removed; asking the client "
              "for the image)", sid, hex);
    rgpu_metrics_image_cache(RGPU_METRICS_IMAGE_CORRUPT);
  } else if (r < 0) {
    RGPU_WARN("session=%llu event=image-cache-error hash=%.16s %s", sid, hex, strerror(-r));
  } else {
    RGPU_DEBUG("session=%llu event=image-cache-miss hash=%.16s", sid, hex);
  }
  rgpu_metrics_image_cache(RGPU_METRICS_IMAGE_MISS);
  return rgpu_worker_fail(w, (CUresult)RGPU_STATUS_IMAGE_NOT_CACHED,
                          "image %.16s is not in the server's image cache: send it", hex);
}

void rgpu_worker_image_store(rgpu_worker *w, const void *data, size_t len,
                             const uint8_t *client_hash) {
  struct rgpu_image_cache *c = rgpu_worker_image_cache(w);
  if (!c) return;
  uint8_t hash[RGPU_IMAGE_HASH_BYTES];
  char hex[65];
  int r = rgpu_image_cache_put(c, data, len, hash);
  rgpu_image_hash_hex(hash, hex);
  unsigned long long sid = (unsigned long long)w->cfg.session_id;
  if (client_hash && memcmp(client_hash, hash, sizeof hash))
    RGPU_WARN("session=%llu event=image-hash-mismatch hash=%.16s: the client named the image "
              "by another hash (stored under its real one)", sid, hex);
  if (r == 1) {
    RGPU_INFO("session=%llu event=image-cache-store hash=%.16s bytes=%zu", sid, hex, len);
    rgpu_metrics_image_cache(RGPU_METRICS_IMAGE_STORE);
  } else if (r == -EFBIG) {
    RGPU_INFO("session=%llu event=image-cache-skip hash=%.16s bytes=%zu: larger than the cache "
              "bound", sid, hex, len);
  } else if (r < 0) {
    RGPU_WARN("session=%llu event=image-cache-error hash=%.16s cannot store: %s", sid, hex,
              strerror(-r));
  }
}
