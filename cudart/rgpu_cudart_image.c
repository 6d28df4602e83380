/* Loading a kernel image as a module on the server, with the image cache
 * protocol (issue 15; proto/rgpu_messages.def MODULE_LOAD,
 * server/rgpu_image_cache.h).
 *
 * Every process start used to send each image it used again, whole.  Now:
 * 1. The image is cut down to the entry the server's device runs
 *    (common/rgpu_fatbin_filter.h): its SASS, or the PTX the driver would
 *    JIT; softgpu runs only PTX.  What is hashed and sent is that.
 * 2. Where the server keeps an image cache (RGPU_CAP_IMAGE_CACHE), the
 *    first MODULE_LOAD names the image by its SHA-256 only: a hit costs
 *    the one round trip a module load always cost.  On a miss the server
 *    answers RGPU_STATUS_IMAGE_NOT_CACHED and the same request goes again
 *    with the image, which the server then stores.
 * Counted for RGPU_STATS: images_sent, image_bytes_sent, image_cache_hits. */
#include <gnutls/crypto.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_cudart.h"
#include "rgpu_fatbin_filter.h"
#include "rgpu_log.h"

static atomic_ullong g_images_sent, g_image_bytes_sent, g_image_cache_hits;

void rgpu_rt_image_counters(uint64_t *images_sent, uint64_t *image_bytes_sent,
                            uint64_t *image_cache_hits) {
  *images_sent = atomic_load(&g_images_sent);
  *image_bytes_sent = atomic_load(&g_image_bytes_sent);
  *image_cache_hits = atomic_load(&g_image_cache_hits);
}

/* What the device runs: its compute capability, and whether it runs SASS
 * at all (softgpu interprets PTX only).  -1 when unknown (the image then
 * goes unfiltered). */
static int device_target(rgpu_client *c, int dev, unsigned *cc, int *sass_ok) {
  rgpu_rt_device *d;
  if (rgpu_rt_device_get(c, dev, &d) != cudaSuccess) return -1;
  if (d->prop.major <= 0 || d->prop.minor < 0 || d->prop.minor > 9) return -1;
  *cc = (unsigned)(d->prop.major * 10 + d->prop.minor);
  *sass_ok = strcmp(rgpu_client_device_kind(c), "softgpu") != 0;
  return 0;
}

rgpu_status rgpu_rt_image_load(rgpu_client *c, int dev, uint64_t module_id, const void *image,
                               size_t len, const char *const *func_names, uint32_t nfuncs,
                               const char *const *var_names, uint32_t nvars,
                               rgpu_client_reply *r) {
  c = rgpu_rt_route(c, dev); /* its server's cache and kind */
  rgpu_client_reply local;
  if (!r) {
    memset(&local, 0, sizeof local);
    r = &local;
  }
  void *filtered = NULL;
  size_t filtered_len = 0;
  unsigned cc;
  int sass_ok;
  /* Not a fatbin (a cubin or PTX for cuModuleLoadData), or nothing in it
   * for this device: sent as it is, and the driver has its say. */
  if (device_target(c, dev, &cc, &sass_ok) == 0 &&
      rgpu_fatbin_filter(image, len, cc, sass_ok, &filtered, &filtered_len) == RGPU_FATBIN_OK) {
    RGPU_DEBUG("image of %zu bytes filtered to %zu for sm_%u%s", len, filtered_len, cc,
               sass_ok ? "" : " (PTX only)");
    image = filtered;
    len = filtered_len;
  }
  uint8_t hash[32];
  int hashed = gnutls_hash_fast(GNUTLS_DIG_SHA256, image, len, hash) == 0;
  rgpu_msg_module_load_req req = {
      .module_id = module_id,
      .func_names = {.items = func_names, .count = nfuncs},
      .var_names = {.items = var_names, .count = nvars},
      .image_hash = {hashed ? hash : NULL, hashed ? sizeof hash : 0},
  };
  rgpu_status rc;
  if (hashed && (rgpu_client_caps(c) & RGPU_CAP_IMAGE_CACHE)) {
    rc = rgpu_call_module_load(c, dev, 0, &req, NULL, r);
    if (rc == 0) atomic_fetch_add(&g_image_cache_hits, 1);
    if (rc != (rgpu_status)RGPU_STATUS_IMAGE_NOT_CACHED) goto out;
    /* A miss: the same request with the image, into a clean reply slot. */
    RGPU_DEBUG("image %02x%02x%02x%02x... not cached on the server: sending %zu bytes", hash[0],
               hash[1], hash[2], hash[3], len);
    r->status = 0;
    r->msg[0] = 0;
    r->done = 0;
    r->continued = 0;
    if (r->payload) rgpu_buf_reset(r->payload);
  }
  req.image = (rgpu_bytes){.data = image, .len = len};
  rc = rgpu_call_module_load(c, dev, 0, &req, NULL, r);
  /* Counted when it went out: the server answered (loaded or refused). */
  if (rc >= 0) {
    atomic_fetch_add(&g_images_sent, 1);
    atomic_fetch_add(&g_image_bytes_sent, len);
  }
out:
  free(filtered);
  return rc;
}
