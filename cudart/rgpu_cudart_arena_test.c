/* The cudaMalloc sub-allocator: alignment, splitting and merging, no reuse
 * of a freed block before a later synchronization, empty chunks given back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "rgpu_cudart_arena.h"

static void test_alloc_align_fill(void **state) {
  (void)state;
  rgpu_arena a;
  rgpu_arena_init(&a);
  uint64_t p = 0;
  assert_int_equal(rgpu_arena_alloc(&a, 16, 1, &p, NULL), -1); /* no chunk */
  assert_int_equal(rgpu_arena_add_chunk(&a, 0x100000, 4096), 0);
  uint64_t q[16];
  for (int i = 0; i < 16; i++) {
    assert_int_equal(rgpu_arena_alloc(&a, 1 + (uint64_t)i, 1, &q[i], NULL), 0);
    assert_int_equal(q[i] % RGPU_ARENA_ALIGN, 0);
    assert_int_equal(q[i], 0x100000 + 256u * (uint64_t)i);
  }
  int dirty = 7;
  assert_int_equal(rgpu_arena_alloc(&a, 1, 1, &p, &dirty), -1); /* full */
  assert_int_equal(dirty, 0);
  assert_int_equal(a.in_use, 4096);
  assert_int_equal(rgpu_arena_release(&a, q[3] + 1, 5), -1); /* not a block start */
  assert_int_equal(rgpu_arena_release(&a, 0x900000, 5), -1);  /* not ours */
  rgpu_arena_free_all(&a);
}

static void test_reuse_waits_for_sync(void **state) {
  (void)state;
  rgpu_arena a;
  rgpu_arena_init(&a);
  assert_int_equal(rgpu_arena_add_chunk(&a, 0x200000, 1024), 0);
  uint64_t x, y, z;
  assert_int_equal(rgpu_arena_alloc(&a, 512, 1, &x, NULL), 0);
  assert_int_equal(rgpu_arena_alloc(&a, 512, 1, &y, NULL), 0);
  assert_int_equal(rgpu_arena_release(&a, x, 10), 0); /* freed at seq 10 */
  assert_int_equal(rgpu_arena_release(&a, x, 10), -1); /* twice */
  int dirty = 0;
  /* last completed synchronization was issued at seq 9: not reusable */
  assert_int_equal(rgpu_arena_alloc(&a, 256, 10, &z, &dirty), -1);
  assert_int_equal(dirty, 1);
  /* a synchronization issued at seq 11 completed: clean */
  assert_int_equal(rgpu_arena_alloc(&a, 256, 11, &z, &dirty), 0);
  assert_int_equal(z, x);
  rgpu_arena_free_all(&a);
}

static void test_merge_and_empty_chunks(void **state) {
  (void)state;
  rgpu_arena a;
  rgpu_arena_init(&a);
  assert_int_equal(rgpu_arena_add_chunk(&a, 0x300000, 1024), 0);
  assert_int_equal(rgpu_arena_add_chunk(&a, 0x400000, 1024), 0);
  uint64_t b[4], big, base;
  for (int i = 0; i < 4; i++) assert_int_equal(rgpu_arena_alloc(&a, 256, 1, &b[i], NULL), 0);
  assert_int_equal(rgpu_arena_take_empty_chunk(&a, &base), 0);
  assert_int_equal(base, 0x400000);
  assert_int_equal(a.committed, 1024);
  assert_int_equal(rgpu_arena_take_empty_chunk(&a, &base), -1);
  /* free 1, 3, then 2: one merged block of 768 bytes at b[1] */
  assert_int_equal(rgpu_arena_release(&a, b[1], 2), 0);
  assert_int_equal(rgpu_arena_release(&a, b[3], 3), 0);
  assert_int_equal(rgpu_arena_release(&a, b[2], 4), 0);
  assert_int_equal(rgpu_arena_alloc(&a, 768, 5, &big, NULL), 0);
  assert_int_equal(big, b[1]);
  assert_true(rgpu_arena_owns(&a, b[0] + 10));
  assert_false(rgpu_arena_owns(&a, 0x400000));
  rgpu_arena_free_all(&a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_alloc_align_fill),
      cmocka_unit_test(test_reuse_waits_for_sync),
      cmocka_unit_test(test_merge_and_empty_chunks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
