/* Address ranges the client knows: device allocations and variables (from
 * the server) and pinned host buffers (local).  They classify pointers for
 * cudaMemcpyDefault and cudaPointerGetAttributes and let bad pointers fail
 * synchronously with cudaErrorInvalidValue, as on a local GPU, instead of
 * as a late asynchronous error. */
#include <stdlib.h>
#include <string.h>

#include "rgpu_cudart.h"

void rgpu_range_table_init(rgpu_range_table *t) {
  memset(t, 0, sizeof *t);
  rgpu_mutex_init(&t->lock);
}

void rgpu_range_table_free(rgpu_range_table *t) {
  free(t->v);
  t->v = NULL;
  t->n = t->cap = 0;
  rgpu_mutex_destroy(&t->lock);
}

/* Index of the first range with base > p. */
static size_t upper(rgpu_range_table *t, uint64_t p) {
  assert(rgpu_mutex_held(&t->lock));
  size_t lo = 0, hi = t->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (t->v[mid].base <= p)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

int rgpu_range_add(rgpu_range_table *t, const rgpu_range *r) {
  if (r->size == 0 || r->base + r->size < r->base) return -1;
  rgpu_mutex_lock(&t->lock);
  size_t i = upper(t, r->base);
  int bad = 0;
  if (i > 0 && t->v[i - 1].base + t->v[i - 1].size > r->base) bad = 1;
  if (i < t->n && r->base + r->size > t->v[i].base) bad = 1;
  if (!bad && t->n == t->cap) {
    size_t nc = t->cap ? t->cap * 2 : 64;
    rgpu_range *nv = realloc(t->v, nc * sizeof *nv);
    if (!nv)
      bad = 1;
    else {
      t->v = nv;
      t->cap = nc;
    }
  }
  if (!bad) {
    memmove(t->v + i + 1, t->v + i, (t->n - i) * sizeof *t->v);
    t->v[i] = *r;
    t->n++;
  }
  rgpu_mutex_unlock(&t->lock);
  return bad ? -1 : 0;
}

int rgpu_range_remove(rgpu_range_table *t, uint64_t base, rgpu_range *out) {
  rgpu_mutex_lock(&t->lock);
  size_t i = upper(t, base);
  int rc = -1;
  if (i > 0 && t->v[i - 1].base == base) {
    if (out) *out = t->v[i - 1];
    memmove(t->v + i - 1, t->v + i, (t->n - i) * sizeof *t->v);
    t->n--;
    rc = 0;
  }
  rgpu_mutex_unlock(&t->lock);
  return rc;
}

int rgpu_range_find(rgpu_range_table *t, uint64_t p, uint64_t len, rgpu_range *out) {
  if (len == 0) len = 1;
  if (p + len < p) return -1;
  rgpu_mutex_lock(&t->lock);
  size_t i = upper(t, p);
  int rc = -1;
  if (i > 0) {
    const rgpu_range *r = &t->v[i - 1];
    if (p >= r->base && p + len <= r->base + r->size) {
      if (out) *out = *r;
      rc = 0;
    }
  }
  rgpu_mutex_unlock(&t->lock);
  return rc;
}

void rgpu_range_remove_device(rgpu_range_table *t, int device, int kind) {
  rgpu_mutex_lock(&t->lock);
  size_t w = 0;
  for (size_t i = 0; i < t->n; i++) {
    if (t->v[i].device == device && (kind == 0 || t->v[i].kind == kind)) continue;
    t->v[w++] = t->v[i];
  }
  t->n = w;
  rgpu_mutex_unlock(&t->lock);
}
