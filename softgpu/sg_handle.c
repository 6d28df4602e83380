/* Registry of live handles: an open-addressing hash set keyed by pointer.
 * The server passes handles it got from us, but a bug or a hostile client
 * can make it pass stale ones; checking membership costs one hash probe and
 * turns a use-after-free into CUDA_ERROR_INVALID_HANDLE. */
#include <stdlib.h>

#include "sg_internal.h"

typedef struct {
  uintptr_t key;  /* 0 empty, 1 tombstone */
  int type;
} slot;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static slot *slots;
static size_t cap, used, live;

static size_t hash(uintptr_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return (size_t)k;
}

static int grow(void) {
  size_t ncap = cap ? cap * 2 : 256;
  /* Rehash into a table sized for the live entries; tombstones vanish. */
  while (live * 2 >= ncap) ncap *= 2;
  slot *ns = calloc(ncap, sizeof *ns);
  if (!ns) return -1;
  for (size_t i = 0; i < cap; i++) {
    if (slots[i].key <= 1) continue;
    size_t j = hash(slots[i].key) & (ncap - 1);
    while (ns[j].key) j = (j + 1) & (ncap - 1);
    ns[j] = slots[i];
  }
  free(slots);
  slots = ns;
  cap = ncap;
  used = live;
  return 0;
}

int sg_handle_add(const void *p, sg_handle_type t) {
  uintptr_t k = (uintptr_t)p;
  if (k <= 1) return -1;
  pthread_mutex_lock(&lock);
  if ((used + 1) * 2 > cap && grow() != 0) {
    pthread_mutex_unlock(&lock);
    return -1;
  }
  size_t j = hash(k) & (cap - 1);
  while (slots[j].key > 1 && slots[j].key != k) j = (j + 1) & (cap - 1);
  if (slots[j].key == 0) used++;
  if (slots[j].key != k) live++;
  slots[j].key = k;
  slots[j].type = t;
  pthread_mutex_unlock(&lock);
  return 0;
}

static slot *find(uintptr_t k) {
  if (!cap) return NULL;
  size_t j = hash(k) & (cap - 1);
  for (size_t n = 0; n < cap && slots[j].key; n++, j = (j + 1) & (cap - 1))
    if (slots[j].key == k) return &slots[j];
  return NULL;
}

void sg_handle_del(const void *p) {
  pthread_mutex_lock(&lock);
  slot *s = find((uintptr_t)p);
  if (s) {
    s->key = 1;
    live--;
  }
  pthread_mutex_unlock(&lock);
}

int sg_handle_ok(const void *p, sg_handle_type t) {
  if ((uintptr_t)p <= 1) return 0;
  pthread_mutex_lock(&lock);
  slot *s = find((uintptr_t)p);
  int ok = s && s->type == (int)t;
  pthread_mutex_unlock(&lock);
  return ok;
}
