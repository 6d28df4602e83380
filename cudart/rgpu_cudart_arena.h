/* The client-side sub-allocator behind cudaMalloc (pure: no I/O, no locks).
 *
 * Small allocations come from chunks of device memory the server allocated
 * (MEM_ALLOC) for this process, so that most cudaMalloc calls need no round
 * trip: the chunk is committed memory, so a sub-allocation that fits can
 * never fail on the server — success answered locally is exact, and a
 * failure is only ever reported after the server said so.
 *
 * A freed block is not handed out again until a device-wide synchronization
 * issued after the free has completed (`clean_before`): CUDA's cudaFree
 * synchronizes, ours does not, so work queued before the free may still be
 * using the memory. */
#ifndef RGPU_CUDART_ARENA_H
#define RGPU_CUDART_ARENA_H

#include <stddef.h>
#include <stdint.h>

/* CUDA guarantees at least 256-byte alignment for cudaMalloc. */
#define RGPU_ARENA_ALIGN 256u
/* The GPU's allocation granularity: a first small cudaMalloc takes this
 * much of the device on a local GPU too. */
#define RGPU_ARENA_CHUNK (2u << 20)
/* Larger requests get their own server allocation. */
#define RGPU_ARENA_MAX_SUB (256u << 10)

typedef struct {
  uint64_t off, size;
  uint64_t free_seq; /* client sequence number when it was freed (0: never used) */
  int used;
} rgpu_arena_block;

typedef struct {
  uint64_t base, size;
  rgpu_arena_block *b; /* sorted by offset, covering the chunk */
  size_t n, cap;
  uint64_t used_bytes;
} rgpu_arena_chunk;

typedef struct {
  rgpu_arena_chunk *c;
  size_t n, cap;
  uint64_t committed; /* bytes of all chunks */
  uint64_t in_use;    /* bytes handed out */
} rgpu_arena;

void rgpu_arena_init(rgpu_arena *a);
void rgpu_arena_free_all(rgpu_arena *a); /* forgets every chunk */
/* Adds a chunk the server allocated; 0 or -1 (out of memory). */
int rgpu_arena_add_chunk(rgpu_arena *a, uint64_t base, uint64_t size);
/* Hands out size bytes (rounded up to the alignment) from a block that is
 * free and clean (free_seq < clean_before).  0 and *out; -1 if nothing
 * fits, with *dirty_fits = 1 when a block freed since the last
 * synchronization would. */
int rgpu_arena_alloc(rgpu_arena *a, uint64_t size, uint64_t clean_before, uint64_t *out,
                     int *dirty_fits);
/* Returns a block that rgpu_arena_alloc handed out (ptr must be its start);
 * 0, or -1 if ptr is not one. */
int rgpu_arena_release(rgpu_arena *a, uint64_t ptr, uint64_t seq);
/* Removes one chunk nothing is allocated from; 0 and *base, or -1. */
int rgpu_arena_take_empty_chunk(rgpu_arena *a, uint64_t *base);
/* 1 if ptr lies in one of the chunks. */
int rgpu_arena_owns(const rgpu_arena *a, uint64_t ptr);

#endif
