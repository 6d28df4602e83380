/* Reusable bulk buffers, pinned once: see rgpu_chunk_pool.h. */
#include "rgpu_chunk_pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_frame.h"

typedef struct {
  void *p;
  int pinned;
  int in_use;
} pool_slot;

struct rgpu_chunk_pool {
  pthread_mutex_t mu;
  rgpu_chunk_pool_config cfg;
  void *region; /* the preallocated buffers, one allocation */
  unsigned region_count;
  int region_pinned;
  pool_slot *slots; /* cfg.max_buffers entries; p == NULL: not allocated yet */
  unsigned nslots_used;
  rgpu_chunk_pool_stats st;
};

rgpu_chunk_pool *rgpu_chunk_pool_new(const rgpu_chunk_pool_config *cfg) {
  rgpu_chunk_pool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  if (cfg) p->cfg = *cfg;
  if (!p->cfg.chunk_bytes) p->cfg.chunk_bytes = RGPU_CHUNK_BYTES;
  if (!p->cfg.max_buffers) p->cfg.max_buffers = 32;
  p->slots = calloc(p->cfg.max_buffers, sizeof *p->slots);
  if (!p->slots) {
    free(p);
    return NULL;
  }
  pthread_mutex_init(&p->mu, NULL);
  unsigned pre = p->cfg.prealloc < p->cfg.max_buffers ? p->cfg.prealloc : p->cfg.max_buffers;
  size_t rbytes = (size_t)pre * p->cfg.chunk_bytes;
  if (pre && posix_memalign(&p->region, 4096, rbytes) == 0) {
    memset(p->region, 0, rbytes); /* fault the pages in once, now */
    p->region_pinned = p->cfg.pin && p->cfg.pin(p->cfg.ctx, p->region, rbytes) == 0;
    for (unsigned i = 0; i < pre; i++) {
      p->slots[i].p = (uint8_t *)p->region + (size_t)i * p->cfg.chunk_bytes;
      p->slots[i].pinned = p->region_pinned;
    }
    p->nslots_used = pre;
    p->region_count = pre;
    p->st.buffers = pre;
    p->st.pinned = p->region_pinned ? pre : 0;
    p->st.cached = pre;
  } else {
    p->region = NULL;
  }
  return p;
}

void *rgpu_chunk_pool_get(rgpu_chunk_pool *p, size_t len, int *pinned) {
  if (pinned) *pinned = 0;
  if (len == 0) len = 1;
  if (len > p->cfg.chunk_bytes) {
    pthread_mutex_lock(&p->mu);
    p->st.gets++;
    p->st.fallbacks++;
    pthread_mutex_unlock(&p->mu);
    return malloc(len);
  }
  pthread_mutex_lock(&p->mu);
  p->st.gets++;
  /* A cached buffer first: it is pinned and its pages are in already. */
  for (unsigned i = 0; i < p->nslots_used; i++) {
    pool_slot *s = &p->slots[i];
    if (s->p && !s->in_use) {
      s->in_use = 1;
      p->st.reuses++;
      p->st.cached--;
      if (pinned) *pinned = s->pinned;
      void *r = s->p;
      pthread_mutex_unlock(&p->mu);
      return r;
    }
  }
  /* An empty slot (one whose allocation failed before), else a new one. */
  unsigned idx = p->nslots_used;
  for (unsigned i = 0; i < p->nslots_used; i++)
    if (!p->slots[i].p && !p->slots[i].in_use) {
      idx = i;
      break;
    }
  if (idx == p->cfg.max_buffers || (p->cfg.may_grow && !p->cfg.may_grow(p->cfg.ctx))) {
    /* Every pooled buffer is in flight (or pinning one now could wait for
     * the device): never make the caller wait. */
    p->st.fallbacks++;
    pthread_mutex_unlock(&p->mu);
    return malloc(len);
  }
  if (idx == p->nslots_used) p->nslots_used++;
  /* Reserve the slot, then allocate and pin outside the lock: pinning a
   * chunk takes a while on a real GPU and job threads put buffers back
   * meanwhile. */
  p->slots[idx].in_use = 1;
  pthread_mutex_unlock(&p->mu);

  void *buf = NULL;
  if (posix_memalign(&buf, 4096, p->cfg.chunk_bytes)) buf = NULL;
  int pin_ok = 0;
  if (buf) {
    /* Touch every page once now (register would fault them in anyway). */
    memset(buf, 0, p->cfg.chunk_bytes);
    if (p->cfg.pin) pin_ok = p->cfg.pin(p->cfg.ctx, buf, p->cfg.chunk_bytes) == 0;
  }
  pthread_mutex_lock(&p->mu);
  if (!buf) {
    p->slots[idx].in_use = 0; /* stays empty: a later get retries it */
    pthread_mutex_unlock(&p->mu);
    return NULL;
  }
  p->slots[idx].p = buf;
  p->slots[idx].pinned = pin_ok;
  p->st.buffers++;
  if (pin_ok) p->st.pinned++;
  pthread_mutex_unlock(&p->mu);
  if (pinned) *pinned = pin_ok;
  return buf;
}

int rgpu_chunk_pool_owns(rgpu_chunk_pool *p, const void *buf, int *pinned) {
  int found = 0;
  pthread_mutex_lock(&p->mu);
  for (unsigned i = 0; i < p->nslots_used && !found; i++)
    if (buf && p->slots[i].p == buf) {
      found = 1;
      if (pinned) *pinned = p->slots[i].pinned;
    }
  pthread_mutex_unlock(&p->mu);
  return found;
}

void rgpu_chunk_pool_put(rgpu_chunk_pool *p, void *buf) {
  if (!buf) return;
  pthread_mutex_lock(&p->mu);
  for (unsigned i = 0; i < p->nslots_used; i++) {
    if (p->slots[i].p == buf) {
      p->slots[i].in_use = 0;
      p->st.cached++;
      pthread_mutex_unlock(&p->mu);
      return;
    }
  }
  pthread_mutex_unlock(&p->mu);
  free(buf); /* a fallback buffer */
}

void rgpu_chunk_pool_get_stats(rgpu_chunk_pool *p, rgpu_chunk_pool_stats *out) {
  pthread_mutex_lock(&p->mu);
  *out = p->st;
  pthread_mutex_unlock(&p->mu);
}

void rgpu_chunk_pool_free(rgpu_chunk_pool *p) {
  if (!p) return;
  uint8_t *r0 = p->region, *r1 = r0 ? r0 + (size_t)p->region_count * p->cfg.chunk_bytes : NULL;
  for (unsigned i = 0; i < p->nslots_used; i++) {
    pool_slot *s = &p->slots[i];
    if (!s->p || ((uint8_t *)s->p >= r0 && (uint8_t *)s->p < r1)) continue;
    if (s->pinned && p->cfg.unpin) p->cfg.unpin(p->cfg.ctx, s->p);
    free(s->p);
  }
  if (p->region) {
    if (p->region_pinned && p->cfg.unpin) p->cfg.unpin(p->cfg.ctx, p->region);
    free(p->region);
  }
  pthread_mutex_destroy(&p->mu);
  free(p->slots);
  free(p);
}
