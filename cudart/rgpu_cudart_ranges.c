/* Address ranges the client knows: device allocations and variables (from
 * the server) and pinned host buffers (local).  They classify pointers for
 * cudaMemcpyDefault and cudaPointerGetAttributes and let bad pointers fail
 * synchronously with cudaErrorInvalidValue, as on a local GPU, instead of
 * as a late asynchronous error. */
#include <stdlib.h>
#include <string.h>

#include "rgpu_cudart.h"
#include "rgpu_interval.h"

/* The sorted-interval code is common/rgpu_interval.h's; this file adds the
 * table's lock around each call and the cudart return convention (0 / -1). */
RGPU_INTERVAL_TABLE_DEFINE(range_tab, rgpu_range_table, rgpu_range, base, size, 64)

void rgpu_range_table_init(rgpu_range_table *t) {
  memset(t, 0, sizeof *t);
  rgpu_mutex_init(&t->lock);
}

void rgpu_range_table_free(rgpu_range_table *t) {
  range_tab_free(t);
  rgpu_mutex_destroy(&t->lock);
}

int rgpu_range_add(rgpu_range_table *t, const rgpu_range *r) {
  rgpu_mutex_lock(&t->lock);
  /* Empty or wrapping, overlapping, out of memory: all refused alike. */
  int rc = range_tab_insert(t, r, NULL);
  rgpu_mutex_unlock(&t->lock);
  return rc == RGPU_INTERVAL_OK ? 0 : -1;
}

int rgpu_range_remove(rgpu_range_table *t, uint64_t base, rgpu_range *out) {
  rgpu_mutex_lock(&t->lock);
  int rc = range_tab_remove(t, base, out);
  rgpu_mutex_unlock(&t->lock);
  return rc;
}

int rgpu_range_find(rgpu_range_table *t, uint64_t p, uint64_t len, rgpu_range *out) {
  if (len == 0) len = 1; /* a pointer alone: the range that holds its byte */
  rgpu_mutex_lock(&t->lock);
  const rgpu_range *r = range_tab_find_range(t, p, len);
  if (r && out) *out = *r;
  rgpu_mutex_unlock(&t->lock);
  return r ? 0 : -1;
}

typedef struct {
  int device, kind;
} range_match;

static int range_matches(void *ctx, const rgpu_range *r) {
  const range_match *m = ctx;
  return r->device == m->device && (m->kind == 0 || r->kind == m->kind);
}

void rgpu_range_remove_device(rgpu_range_table *t, int device, int kind) {
  range_match m = {device, kind};
  rgpu_mutex_lock(&t->lock);
  range_tab_remove_if(t, range_matches, &m);
  rgpu_mutex_unlock(&t->lock);
}
