/* The facade's cache of server answers (see rgpu_cudnn_cache.h). */
#include "rgpu_cudnn_cache.h"

#include <stdlib.h>
#include <string.h>

struct rgpu_cudnn_cache_entry {
  size_t klen, vlen;
  unsigned char bytes[]; /* the key, then the value */
};

/* The slot holding key, or -1.  Called with the lock held. */
static int find_locked(const rgpu_cudnn_cache *c, const void *key, size_t klen) {
  for (int i = 0; i < RGPU_CUDNN_CACHE_SLOTS; i++) {
    const struct rgpu_cudnn_cache_entry *e = c->slot[i];
    if (e && e->klen == klen && !memcmp(e->bytes, key, klen)) return i;
  }
  return -1;
}

long rgpu_cudnn_cache_get(rgpu_cudnn_cache *c, const void *key, size_t klen, void *val,
                          size_t cap) {
  long n = -1;
  pthread_mutex_lock(&c->lock);
  int i = find_locked(c, key, klen);
  if (i >= 0) {
    const struct rgpu_cudnn_cache_entry *e = c->slot[i];
    n = (long)e->vlen;
    memcpy(val, e->bytes + e->klen, e->vlen < cap ? e->vlen : cap);
  }
  pthread_mutex_unlock(&c->lock);
  return n;
}

void rgpu_cudnn_cache_put(rgpu_cudnn_cache *c, const void *key, size_t klen, const void *val,
                          size_t vlen) {
  struct rgpu_cudnn_cache_entry *e = malloc(sizeof *e + klen + vlen);
  if (!e) return;
  e->klen = klen;
  e->vlen = vlen;
  memcpy(e->bytes, key, klen);
  memcpy(e->bytes + klen, val, vlen);
  pthread_mutex_lock(&c->lock);
  /* Two threads may have asked the same question at once: one entry. */
  int i = find_locked(c, key, klen);
  if (i < 0) i = (int)(c->next++ % RGPU_CUDNN_CACHE_SLOTS);
  free(c->slot[i]);
  c->slot[i] = e;
  pthread_mutex_unlock(&c->lock);
}
