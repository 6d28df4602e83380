/* Sub-allocation from server chunks: see rgpu_cudart_arena.h.  First fit
 * over a handful of chunks; blocks are split on allocation, and free
 * neighbours that are both clean are merged while searching. */
#include "rgpu_cudart_arena.h"

#include <stdlib.h>
#include <string.h>

#include "rgpu_array.h"

void rgpu_arena_init(rgpu_arena *a) { memset(a, 0, sizeof *a); }

void rgpu_arena_free_all(rgpu_arena *a) {
  for (size_t i = 0; i < a->n; i++) free(a->c[i].b);
  free(a->c);
  rgpu_arena_init(a);
}

int rgpu_arena_add_chunk(rgpu_arena *a, uint64_t base, uint64_t size) {
  if (RGPU_ARRAY_RESERVE(a->c, a->cap, a->n + 1, 8)) return -1;
  rgpu_arena_block *b = malloc(8 * sizeof *b);
  if (!b) return -1;
  b[0] = (rgpu_arena_block){.off = 0, .size = size, .free_seq = 0, .used = 0};
  a->c[a->n++] = (rgpu_arena_chunk){.base = base, .size = size, .b = b, .n = 1, .cap = 8};
  a->committed += size;
  return 0;
}

static int insert_block(rgpu_arena_chunk *ch, size_t at, rgpu_arena_block blk) {
  if (RGPU_ARRAY_RESERVE(ch->b, ch->cap, ch->n + 1, 8)) return -1;
  memmove(&ch->b[at + 1], &ch->b[at], (ch->n - at) * sizeof *ch->b);
  ch->b[at] = blk;
  ch->n++;
  return 0;
}

static int clean(const rgpu_arena_block *b, uint64_t clean_before) {
  return b->free_seq == 0 || b->free_seq < clean_before;
}

int rgpu_arena_alloc(rgpu_arena *a, uint64_t size, uint64_t clean_before, uint64_t *out,
                     int *dirty_fits) {
  if (dirty_fits) *dirty_fits = 0;
  if (size == 0 || size > UINT64_MAX - RGPU_ARENA_ALIGN) return -1;
  uint64_t want = (size + RGPU_ARENA_ALIGN - 1) / RGPU_ARENA_ALIGN * RGPU_ARENA_ALIGN;
  for (size_t i = 0; i < a->n; i++) {
    rgpu_arena_chunk *ch = &a->c[i];
    for (size_t k = 0; k < ch->n; k++) {
      rgpu_arena_block *b = &ch->b[k];
      /* Clean free neighbours merge here, not at release: merging a block
       * freed just now into clean space would make all of it wait. */
      while (!b->used && clean(b, clean_before) && k + 1 < ch->n && !ch->b[k + 1].used &&
             clean(&ch->b[k + 1], clean_before)) {
        b->size += ch->b[k + 1].size;
        if (ch->b[k + 1].free_seq > b->free_seq) b->free_seq = ch->b[k + 1].free_seq;
        memmove(&ch->b[k + 1], &ch->b[k + 2], (ch->n - k - 2) * sizeof *ch->b);
        ch->n--;
      }
      if (b->used || b->size < want) continue;
      if (!clean(b, clean_before)) {
        if (dirty_fits) *dirty_fits = 1;
        continue;
      }
      if (b->size > want) {
        rgpu_arena_block rest = {.off = b->off + want, .size = b->size - want,
                                 .free_seq = b->free_seq, .used = 0};
        if (insert_block(ch, k + 1, rest)) return -1;
        b = &ch->b[k];
        b->size = want;
      }
      b->used = 1;
      ch->used_bytes += want;
      a->in_use += want;
      *out = ch->base + b->off;
      return 0;
    }
  }
  return -1;
}

int rgpu_arena_release(rgpu_arena *a, uint64_t ptr, uint64_t seq) {
  for (size_t i = 0; i < a->n; i++) {
    rgpu_arena_chunk *ch = &a->c[i];
    if (ptr < ch->base || ptr - ch->base >= ch->size) continue;
    uint64_t off = ptr - ch->base;
    for (size_t k = 0; k < ch->n; k++) {
      rgpu_arena_block *b = &ch->b[k];
      if (b->off != off) continue;
      if (!b->used) return -1;
      b->used = 0;
      b->free_seq = seq ? seq : 1;
      ch->used_bytes -= b->size;
      a->in_use -= b->size;
      return 0;
    }
    return -1;
  }
  return -1;
}

int rgpu_arena_take_empty_chunk(rgpu_arena *a, uint64_t *base) {
  for (size_t i = 0; i < a->n; i++) {
    if (a->c[i].used_bytes) continue;
    *base = a->c[i].base;
    a->committed -= a->c[i].size;
    free(a->c[i].b);
    a->c[i] = a->c[--a->n];
    return 0;
  }
  return -1;
}

int rgpu_arena_owns(const rgpu_arena *a, uint64_t ptr) {
  for (size_t i = 0; i < a->n; i++)
    if (ptr >= a->c[i].base && ptr - a->c[i].base < a->c[i].size) return 1;
  return 0;
}
