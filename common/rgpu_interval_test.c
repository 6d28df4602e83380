/* rgpu_interval: a table generated for a test entry type, checked against
 * a brute-force model under random inserts, removes and lookups, plus the
 * edges (one past the end, wrap-around, empty intervals). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "rgpu_interval.h"

typedef struct {
  uint64_t tag; /* start and length need not come first */
  uint64_t start, len;
} ent;

typedef struct {
  int lock_stand_in;
  ent *v;
  size_t n, cap;
} table;

RGPU_INTERVAL_TABLE_DEFINE(tab, table, ent, start, len, 4)

static int insert(table *t, uint64_t s, uint64_t l, uint64_t tag) {
  ent e = {tag, s, l};
  ent *out = NULL;
  int rc = tab_insert(t, &e, &out);
  if (rc == 0) {
    assert_non_null(out);
    assert_int_equal(out->tag, tag);
  }
  return rc;
}

static void test_edges(void **state) {
  (void)state;
  table t = {0};
  assert_null(tab_find(&t, 0));
  assert_int_equal(insert(&t, 100, 0, 1), RGPU_INTERVAL_EINVAL);
  assert_int_equal(insert(&t, UINT64_MAX - 4, 10, 1), RGPU_INTERVAL_EINVAL);
  assert_int_equal(insert(&t, 100, 50, 1), 0);
  assert_int_equal(insert(&t, 200, 50, 2), 0);
  assert_int_equal(insert(&t, 150, 50, 3), 0); /* exactly between: touches both */
  assert_int_equal(insert(&t, 149, 1, 4), RGPU_INTERVAL_EOVERLAP);
  assert_int_equal(insert(&t, 249, 5, 4), RGPU_INTERVAL_EOVERLAP);
  assert_int_equal(insert(&t, 50, 51, 4), RGPU_INTERVAL_EOVERLAP);
  assert_int_equal(insert(&t, 0, UINT64_MAX, 4), RGPU_INTERVAL_EOVERLAP);
  assert_int_equal(t.n, 3);
  assert_null(tab_find(&t, 99));
  assert_int_equal(tab_find(&t, 100)->tag, 1);
  assert_int_equal(tab_find(&t, 149)->tag, 1);
  assert_int_equal(tab_find(&t, 150)->tag, 3);
  assert_int_equal(tab_find(&t, 249)->tag, 2);
  assert_null(tab_find(&t, 250)); /* one past the end */
  assert_null(tab_find(&t, UINT64_MAX));
  assert_non_null(tab_find_range(&t, 100, 50));
  assert_non_null(tab_find_range(&t, 120, 0));
  assert_null(tab_find_range(&t, 120, 31)); /* runs into the next entry */
  assert_null(tab_find_range(&t, 149, UINT64_MAX));
  assert_null(tab_find_start(&t, 101));
  assert_int_equal(tab_find_start(&t, 200)->tag, 2);
  assert_true(tab_overlaps(&t, 0, 101));
  assert_false(tab_overlaps(&t, 0, 100));
  assert_false(tab_overlaps(&t, 250, 1000));
  assert_false(tab_overlaps(&t, 120, 0));
  ent out;
  assert_int_equal(tab_remove(&t, 151, &out), -1);
  assert_int_equal(tab_remove(&t, 150, &out), 0);
  assert_int_equal(out.tag, 3);
  assert_null(tab_find(&t, 170));
  assert_int_equal(t.n, 2);
  tab_free(&t);
  assert_null(t.v);
  assert_int_equal(t.n + t.cap, 0);
}

static int odd_tag(void *ctx, const ent *e) {
  (*(int *)ctx)++;
  return (int)(e->tag & 1);
}

static void test_remove_if_keeps_order(void **state) {
  (void)state;
  table t = {0};
  for (uint64_t i = 0; i < 20; i++) assert_int_equal(insert(&t, i * 10, 5, i), 0);
  int seen = 0;
  tab_remove_if(&t, odd_tag, &seen);
  assert_int_equal(seen, 20);
  assert_int_equal(t.n, 10);
  for (size_t i = 0; i < t.n; i++) assert_int_equal(t.v[i].tag, i * 2);
  assert_null(tab_find(&t, 12));
  assert_int_equal(tab_find(&t, 24)->tag, 2);
  tab_free(&t);
}

/* A model: which of 64 slots of 16 bytes each start an entry of what length. */
static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static void test_random_against_model(void **state) {
  (void)state;
  enum { SPACE = 1024 };
  static int owner[SPACE]; /* start of the entry covering each byte, or -1 */
  for (int i = 0; i < SPACE; i++) owner[i] = -1;
  table t = {0};
  for (int step = 0; step < 20000; step++) {
    uint64_t s = next_rand() % SPACE, l = 1 + next_rand() % 40;
    if (next_rand() % 3) {
      int free_run = s + l <= SPACE;
      for (uint64_t k = s; free_run && k < s + l; k++) free_run = owner[k] < 0;
      int rc = insert(&t, s, l, s);
      if (s + l <= SPACE) {
        assert_int_equal(rc, free_run ? 0 : RGPU_INTERVAL_EOVERLAP);
        if (free_run)
          for (uint64_t k = s; k < s + l; k++) owner[k] = (int)s;
      } else if (rc == 0) {
        tab_remove(&t, s, NULL); /* past the modelled space: keep out */
      }
    } else {
      int starts = owner[s] == (int)s;
      ent out = {0};
      assert_int_equal(tab_remove(&t, s, &out), starts ? 0 : -1);
      if (starts)
        for (uint64_t k = s; k < s + out.len; k++) owner[k] = -1;
    }
    uint64_t q = next_rand() % SPACE;
    ent *e = tab_find(&t, q);
    if (owner[q] < 0) assert_null(e);
    else assert_int_equal(e->start, (uint64_t)owner[q]);
    for (size_t i = 1; i < t.n; i++) assert_true(t.v[i - 1].start + t.v[i - 1].len <= t.v[i].start);
  }
  tab_free(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_edges),
      cmocka_unit_test(test_remove_if_keeps_order),
      cmocka_unit_test(test_random_against_model),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
