/* FNV-1a, 64 bits: the content keys of rgpu's caches.  One definition,
 * because the client's and the server's cuDNN plan caches must agree on
 * the key of the same serialized graph (the client sends it with an
 * execute that has no reply). */
#ifndef RGPU_HASH_H
#define RGPU_HASH_H

#include <stddef.h>
#include <stdint.h>

#define RGPU_FNV1A64_INIT 0xcbf29ce484222325ull

/* Continues hash h over n more bytes (h = RGPU_FNV1A64_INIT to start). */
static inline uint64_t rgpu_fnv1a64_more(uint64_t h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static inline uint64_t rgpu_fnv1a64(const void *p, size_t n) {
  return rgpu_fnv1a64_more(RGPU_FNV1A64_INIT, p, n);
}

#endif
