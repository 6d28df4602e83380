/* The cuDNN facade's one cache of server answers: algorithm rankings,
 * workspace and reserve sizes, anything whose answer depends only on the
 * device and on descriptor contents.  A key and a value are plain bytes (a
 * key struct built in zeroed memory, so padding compares equal); entries are
 * copies, replaced round-robin once the cache is full, so a loop that asks
 * the same question every step pays one round trip.  Thread-safe: the lock
 * is a leaf, held for a lookup or an insert only. */
#ifndef RGPU_CUDNN_CACHE_H
#define RGPU_CUDNN_CACHE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define RGPU_CUDNN_CACHE_SLOTS 128

struct rgpu_cudnn_cache_entry;

typedef struct {
  pthread_mutex_t lock;
  unsigned next;
  struct rgpu_cudnn_cache_entry *slot[RGPU_CUDNN_CACHE_SLOTS];
} rgpu_cudnn_cache;

#define RGPU_CUDNN_CACHE_INIT {PTHREAD_MUTEX_INITIALIZER, 0, {0}}

/* Copies the value stored under key (klen bytes) into val, at most cap
 * bytes.  Returns its length, or -1 when the key is not there. */
long rgpu_cudnn_cache_get(rgpu_cudnn_cache *c, const void *key, size_t klen, void *val, size_t cap);

/* Stores copies of key and val (replacing the entry of an equal key, else
 * the oldest slot once full).  Out of memory: nothing is stored, and the
 * next lookup asks the server again. */
void rgpu_cudnn_cache_put(rgpu_cudnn_cache *c, const void *key, size_t klen, const void *val,
                          size_t vlen);

#endif
