/* rgpu_interval: sorted tables of non-overlapping address intervals.
 *
 * The client's pointer classes, the server's allocation table and the
 * software GPU's memory table all answer "which allocation contains this
 * address" on hot paths (every copy; in softgpu every checked kernel load
 * and store), so the table is a sorted array searched by binary search:
 * O(log n) lookups touching one contiguous array, O(n) inserts and removes
 * that happen once per allocation.
 *
 * The functions are generated per table type by a macro, as static inline
 * functions on the caller's own struct and entry type: the compiler sees
 * the element size and field offsets as constants, so a lookup is the same
 * code as the hand-written copies it replaces, with no callback or
 * element-size multiply.  The table struct needs members `v` (T *), `n` and
 * `cap` (size_t); it may hold more (a lock, byte counters).  T needs two
 * uint64_t members for the interval's start and length, named by the
 * caller; an entry covers [start, start + length), length > 0.
 *
 *   typedef struct { uint64_t base, size; int kind; } my_alloc;
 *   typedef struct { my_alloc *v; size_t n, cap; } my_table;
 *   RGPU_INTERVAL_TABLE_DEFINE(my_table, my_table, my_alloc, base, size, 64)
 *   ...  my_alloc *a = my_table_find(&t, addr);
 *
 * generates, for prefix P:
 *   size_t P_upper(const Table *, uint64_t addr)   first index with start > addr
 *   T *P_find(const Table *, uint64_t addr)        entry containing addr, or NULL
 *   T *P_find_range(const Table *, uint64_t addr, uint64_t len)
 *                                                  entry containing all of
 *                                                  [addr, addr+len) (len 0: addr)
 *   T *P_find_start(const Table *, uint64_t start) entry starting exactly there
 *   int P_overlaps(const Table *, uint64_t start, uint64_t len)
 *   int P_insert(Table *, const T *e, T **out)     RGPU_INTERVAL_OK / _EINVAL
 *                                                  (empty or wrapping) / _EOVERLAP
 *                                                  / _ENOMEM; *out (if out) is
 *                                                  the stored copy, valid until
 *                                                  the next insert or remove
 *   void P_remove_at(Table *, size_t i)
 *   int P_remove(Table *, uint64_t start, T *out)  0, or -1 when no entry starts there
 *   void P_remove_if(Table *, int (*pred)(void *ctx, const T *), void *ctx)
 *                                                  drops entries pred accepts, in order
 *   void P_free(Table *)
 * None of them locks: the owner's lock protects the table. */
#ifndef RGPU_INTERVAL_H
#define RGPU_INTERVAL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_array.h"

enum {
  RGPU_INTERVAL_OK = 0,
  RGPU_INTERVAL_EINVAL = -1,
  RGPU_INTERVAL_EOVERLAP = -2,
  RGPU_INTERVAL_ENOMEM = -3,
};

#define RGPU_INTERVAL_TABLE_DEFINE(P, Table, T, START, LEN, FIRST_CAP)                         \
  static inline size_t P##_upper(const Table *t, uint64_t addr) {                              \
    size_t lo = 0, hi = t->n;                                                                  \
    while (lo < hi) {                                                                          \
      size_t mid = lo + (hi - lo) / 2;                                                         \
      if (t->v[mid].START <= addr) lo = mid + 1;                                               \
      else hi = mid;                                                                           \
    }                                                                                          \
    return lo;                                                                                 \
  }                                                                                            \
  static inline T *P##_find(const Table *t, uint64_t addr) {                                   \
    size_t i = P##_upper(t, addr);                                                             \
    if (i == 0) return NULL;                                                                   \
    T *e = &t->v[i - 1];                                                                       \
    /* addr >= start here, so the subtraction cannot wrap; start + length is                   \
     * one past the end. */                                                                    \
    return addr - e->START < e->LEN ? e : NULL;                                                \
  }                                                                                            \
  static inline T *P##_find_range(const Table *t, uint64_t addr,                               \
                                                          uint64_t len) {                      \
    T *e = P##_find(t, addr);                                                                  \
    return e && len <= e->LEN - (addr - e->START) ? e : NULL;                                  \
  }                                                                                            \
  static inline T *P##_find_start(const Table *t, uint64_t start) {                            \
    size_t i = P##_upper(t, start);                                                            \
    return i > 0 && t->v[i - 1].START == start ? &t->v[i - 1] : NULL;                          \
  }                                                                                            \
  /* [start, start+len) against the neighbours of its insertion point. */                      \
  static inline int P##_overlaps_at(const Table *t, size_t i,                                  \
                                                            uint64_t start, uint64_t len) {    \
    if (i > 0 && t->v[i - 1].START + t->v[i - 1].LEN > start) return 1;                        \
    if (i < t->n && t->v[i].START - start < len) return 1;                                     \
    return 0;                                                                                  \
  }                                                                                            \
  static inline int P##_overlaps(const Table *t, uint64_t start,                               \
                                                         uint64_t len) {                       \
    return len > 0 && P##_overlaps_at(t, P##_upper(t, start), start, len);                     \
  }                                                                                            \
  static inline int P##_insert(Table *t, const T *e, T **out) {                                \
    uint64_t start = e->START, len = e->LEN;                                                   \
    if (len == 0 || start + len < start) return RGPU_INTERVAL_EINVAL;                          \
    size_t i = P##_upper(t, start);                                                            \
    if (P##_overlaps_at(t, i, start, len)) return RGPU_INTERVAL_EOVERLAP;                      \
    if (RGPU_ARRAY_RESERVE(t->v, t->cap, t->n + 1, (FIRST_CAP))) return RGPU_INTERVAL_ENOMEM;  \
    memmove(&t->v[i + 1], &t->v[i], (t->n - i) * sizeof *t->v);                                \
    t->v[i] = *e;                                                                              \
    t->n++;                                                                                    \
    if (out) *out = &t->v[i];                                                                  \
    return RGPU_INTERVAL_OK;                                                                   \
  }                                                                                            \
  static inline void P##_remove_at(Table *t, size_t i) {                                       \
    memmove(&t->v[i], &t->v[i + 1], (t->n - i - 1) * sizeof *t->v);                            \
    t->n--;                                                                                    \
  }                                                                                            \
  static inline int P##_remove(Table *t, uint64_t start, T *out) {                             \
    T *e = P##_find_start(t, start);                                                           \
    if (!e) return -1;                                                                         \
    if (out) *out = *e;                                                                        \
    P##_remove_at(t, (size_t)(e - t->v));                                                      \
    return 0;                                                                                  \
  }                                                                                            \
  static inline void P##_remove_if(                                                            \
      Table *t, int (*pred)(void *ctx, const T *e), void *ctx) {                               \
    size_t w = 0;                                                                              \
    for (size_t r = 0; r < t->n; r++) {                                                        \
      if (pred(ctx, &t->v[r])) continue;                                                       \
      if (w != r) t->v[w] = t->v[r];                                                           \
      w++;                                                                                     \
    }                                                                                          \
    t->n = w;                                                                                  \
  }                                                                                            \
  static inline void P##_free(Table *t) {                                                      \
    free(t->v);                                                                                \
    t->v = NULL;                                                                               \
    t->n = t->cap = 0;                                                                         \
  }

#endif /* RGPU_INTERVAL_H */
