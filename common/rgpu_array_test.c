/* rgpu_array: growth doubles from the first capacity, keeps contents, and
 * refuses sizes that overflow without touching the array. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "rgpu_array.h"

typedef struct {
  uint64_t a, b;
} pair;

static void test_reserve_grows_and_keeps(void **state) {
  (void)state;
  pair *v = NULL;
  size_t cap = 0;
  assert_int_equal(RGPU_ARRAY_RESERVE(v, cap, 1, 16), 0);
  assert_int_equal(cap, 16);
  for (size_t i = 0; i < 16; i++) v[i] = (pair){i, ~i};
  assert_int_equal(RGPU_ARRAY_RESERVE(v, cap, 16, 16), 0); /* fits: no change */
  assert_int_equal(cap, 16);
  assert_int_equal(RGPU_ARRAY_RESERVE(v, cap, 17, 16), 0);
  assert_int_equal(cap, 32); /* doubled */
  assert_int_equal(RGPU_ARRAY_RESERVE(v, cap, 100, 16), 0);
  assert_int_equal(cap, 100); /* more than double asked: exactly that */
  for (size_t i = 0; i < 16; i++) {
    assert_int_equal(v[i].a, i);
    assert_int_equal(v[i].b, ~i);
  }
  free(v);
}

static void test_overflow_refused(void **state) {
  (void)state;
  pair *v = NULL;
  size_t cap = 0;
  assert_int_equal(RGPU_ARRAY_RESERVE(v, cap, 4, 0), 0);
  pair *keep = v;
  assert_int_equal(RGPU_ARRAY_RESERVE(v, cap, SIZE_MAX / sizeof(pair) + 1, 0), -1);
  assert_int_equal(RGPU_ARRAY_RESERVE(v, cap, SIZE_MAX, 0), -1);
  assert_ptr_equal(v, keep);
  assert_int_equal(cap, 4);
  free(v);
  /* Doubling past the largest possible count is cut back, not refused. */
  size_t big = SIZE_MAX / sizeof(pair);
  assert_int_equal(rgpu_array_next_cap(big - 1, big, sizeof(pair), 0), big);
  assert_int_equal(rgpu_array_next_cap(SIZE_MAX / 2 + 1, SIZE_MAX / 2 + 2, 1, 0), SIZE_MAX);
  assert_int_equal(rgpu_array_next_cap(0, 1, 0, 0), 0);
  assert_int_equal(rgpu_array_next_cap(0, 3, 8, 64), 64);
}

static void test_typed_array_push(void **state) {
  (void)state;
  RGPU_ARRAY(int) a = {0};
  for (int i = 0; i < 1000; i++) assert_int_equal(rgpu_array_push(&a, i * 3), 0);
  assert_int_equal(a.n, 1000);
  assert_true(a.cap >= 1000 && a.cap < 2048);
  for (int i = 0; i < 1000; i++) assert_int_equal(a.v[i], i * 3);
  rgpu_array_free(&a);
  assert_null(a.v);
  assert_int_equal(a.n, 0);
  assert_int_equal(a.cap, 0);
}

static void test_array_queue(void **state) {
  (void)state;
  uint64_t *v = NULL;
  size_t head = 0, n = 0, cap = 0;
  uint64_t next_in = 0, next_out = 0;
  /* Push 3, pop 2, many times: the queue stays short, so the array must
   * stop growing (slides reuse the dead prefix) and order must hold. */
  for (int round = 0; round < 10000; round++) {
    for (int k = 0; k < 3; k++) {
      assert_int_equal(RGPU_ARRAY_QUEUE_ROOM(v, head, n, cap, 8), 0);
      assert_true(head + n < cap);
      v[head + n++] = next_in++;
    }
    for (int k = 0; k < 2; k++) {
      assert_int_equal(v[head], next_out++);
      head++;
      n--;
    }
  }
  assert_int_equal(n, 10000);
  assert_true(cap <= 4 * 16384); /* grew with the live count, not the total pushed */
  while (n) {
    assert_int_equal(v[head++], next_out++);
    n--;
  }
  assert_int_equal(next_out, next_in);
  /* A queue emptied by pops and refilled slides instead of growing. */
  size_t cap_before = cap;
  for (uint64_t i = 0; i < cap_before; i++) {
    assert_int_equal(RGPU_ARRAY_QUEUE_ROOM(v, head, n, cap, 8), 0);
    v[head + n++] = i;
  }
  assert_int_equal(cap, cap_before);
  assert_int_equal(head, 0);
  assert_int_equal(v[0], 0);
  free(v);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reserve_grows_and_keeps),
      cmocka_unit_test(test_overflow_refused),
      cmocka_unit_test(test_typed_array_push),
      cmocka_unit_test(test_array_queue),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
