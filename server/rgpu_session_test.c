#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "rgpu_session.h"

/* Module globals are device memory the quota counts (issue 14): added,
 * removed one by one and with their module. */
static void test_module_bytes(void **state) {
  (void)state;
  rgpu_alloc_table t;
  rgpu_alloc_table_init(&t);
  assert_int_equal(rgpu_alloc_table_add(&t, 0x1000, 0x100, RGPU_ALLOC_MALLOC, 0, 0), 0);
  assert_int_equal(rgpu_alloc_table_add(&t, 0x2000, 0x80, RGPU_ALLOC_MODULE_GLOBAL, 0, 7), 0);
  assert_int_equal(rgpu_alloc_table_add(&t, 0x3000, 0x40, RGPU_ALLOC_MODULE_GLOBAL, 0, 7), 0);
  assert_int_equal(rgpu_alloc_table_add(&t, 0x4000, 0x20, RGPU_ALLOC_MODULE_GLOBAL, 0, 8), 0);
  assert_int_equal(t.malloc_bytes, 0x100);
  assert_int_equal(t.module_bytes, 0xe0);
  assert_int_equal(rgpu_alloc_table_remove(&t, 0x4000, NULL), 0);
  assert_int_equal(t.module_bytes, 0xc0);
  rgpu_alloc_table_remove_matching(&t, -1, 7, NULL, NULL);
  assert_int_equal(t.module_bytes, 0);
  assert_int_equal(t.malloc_bytes, 0x100);
  rgpu_alloc_table_free(&t);
}

static void test_alloc_lookup(void **state) {
  rgpu_alloc_table t;
  rgpu_alloc_table_init(&t);
  assert_int_equal(rgpu_alloc_table_add(&t, 0x1000, 0x100, RGPU_ALLOC_MALLOC, 0, 0), 0);
  assert_int_equal(rgpu_alloc_table_add(&t, 0x3000, 0x100, RGPU_ALLOC_MALLOC, 0, 0), 0);
  assert_int_equal(rgpu_alloc_table_add(&t, 0x2000, 0x80, RGPU_ALLOC_MODULE_GLOBAL, 0, 7), 0);
  assert_int_equal(t.malloc_bytes, 0x200);
  /* Whole ranges inside one allocation. */
  assert_non_null(rgpu_alloc_table_lookup(&t, 0x1000, 0x100));
  assert_non_null(rgpu_alloc_table_lookup(&t, 0x10ff, 1));
  assert_non_null(rgpu_alloc_table_lookup(&t, 0x1080, 0));
  assert_ptr_equal(rgpu_alloc_table_lookup(&t, 0x2010, 0x10)->dptr, 0x2000);
  /* One byte past the end, a gap, before the first, spanning two. */
  assert_null(rgpu_alloc_table_lookup(&t, 0x1000, 0x101));
  assert_null(rgpu_alloc_table_lookup(&t, 0x1100, 1));
  assert_null(rgpu_alloc_table_lookup(&t, 0x1100, 0));
  assert_null(rgpu_alloc_table_lookup(&t, 0xfff, 2));
  assert_null(rgpu_alloc_table_lookup(&t, 0x10, 1));
  assert_null(rgpu_alloc_table_lookup(&t, 0x1000, 0x3000));
  assert_null(rgpu_alloc_table_lookup(&t, 0x3050, UINT64_MAX));   /* wraps */
  assert_null(rgpu_alloc_table_lookup(&t, UINT64_MAX, 2));
  /* Exact-start find is what free uses. */
  assert_non_null(rgpu_alloc_table_find(&t, 0x3000));
  assert_null(rgpu_alloc_table_find(&t, 0x3001));
  rgpu_alloc_table_free(&t);
}

static void test_alloc_overlap(void **state) {
  rgpu_alloc_table t;
  rgpu_alloc_table_init(&t);
  assert_int_equal(rgpu_alloc_table_add(&t, 0x1000, 0x100, RGPU_ALLOC_MALLOC, 0, 0), 0);
  assert_int_equal(rgpu_alloc_table_add(&t, 0x1000, 0x10, RGPU_ALLOC_MALLOC, 0, 0), RGPU_SESS_EEXIST);
  assert_int_equal(rgpu_alloc_table_add(&t, 0x10ff, 0x10, RGPU_ALLOC_MALLOC, 0, 0), RGPU_SESS_EEXIST);
  assert_int_equal(rgpu_alloc_table_add(&t, 0xf00, 0x101, RGPU_ALLOC_MALLOC, 0, 0), RGPU_SESS_EEXIST);
  assert_int_equal(rgpu_alloc_table_add(&t, 0xf00, 0x100, RGPU_ALLOC_MALLOC, 0, 0), 0); /* adjacent */
  assert_int_equal(rgpu_alloc_table_add(&t, 0x1100, 0x100, RGPU_ALLOC_MALLOC, 0, 0), 0);
  assert_int_equal(rgpu_alloc_table_add(&t, 0x5000, 0, RGPU_ALLOC_MALLOC, 0, 0), RGPU_SESS_EINVAL);
  assert_int_equal(rgpu_alloc_table_add(&t, UINT64_MAX - 4, 16, RGPU_ALLOC_MALLOC, 0, 0), RGPU_SESS_EINVAL);
  assert_int_equal(t.n, 3);
  rgpu_alloc a;
  assert_int_equal(rgpu_alloc_table_remove(&t, 0x1000, &a), 0);
  assert_int_equal(a.size, 0x100);
  assert_int_equal(rgpu_alloc_table_remove(&t, 0x1000, NULL), RGPU_SESS_ENOENT);
  assert_int_equal(t.malloc_bytes, 0x200);
  assert_null(rgpu_alloc_table_lookup(&t, 0x1000, 1));
  rgpu_alloc_table_free(&t);
}

static int removed;
static void count_removed(void *ctx, const rgpu_alloc *a) { removed++; }

static void test_alloc_remove_matching(void **state) {
  rgpu_alloc_table t;
  rgpu_alloc_table_init(&t);
  for (uint64_t i = 0; i < 100; i++)
    assert_int_equal(rgpu_alloc_table_add(&t, 0x10000 + i * 0x1000, 0x100,
                                          i % 3 ? RGPU_ALLOC_MALLOC : RGPU_ALLOC_MODULE_GLOBAL,
                                          (int)(i % 2), i % 3 ? 0 : 5), 0);
  removed = 0;
  rgpu_alloc_table_remove_matching(&t, -1, 5, count_removed, NULL);
  assert_int_equal(removed, 34);
  removed = 0;
  rgpu_alloc_table_remove_matching(&t, 1, 0, count_removed, NULL);
  assert_int_equal(removed, 33);
  assert_int_equal(t.n, 33);
  assert_int_equal(t.malloc_bytes, 33 * 0x100);
  /* Still sorted and searchable after compaction. */
  for (size_t i = 1; i < t.n; i++) assert_true(t.v[i - 1].dptr < t.v[i].dptr);
  assert_non_null(rgpu_alloc_table_lookup(&t, 0x10000 + 2 * 0x1000 + 5, 10));
  rgpu_alloc_table_remove_matching(&t, -1, 0, NULL, NULL);
  assert_int_equal(t.n, 0);
  assert_int_equal(t.malloc_bytes, 0);
  rgpu_alloc_table_free(&t);
}

static void test_handles(void **state) {
  rgpu_handle_map m;
  rgpu_handle_map_init(&m);
  int x, y;
  assert_int_equal(rgpu_handle_map_put(&m, 0, &x, 0), RGPU_SESS_EINVAL);
  assert_int_equal(rgpu_handle_map_put(&m, 42, &x, 0), 0);
  assert_int_equal(rgpu_handle_map_put(&m, 42, &y, 0), RGPU_SESS_EEXIST);
  assert_int_equal(rgpu_handle_map_put(&m, UINT64_MAX, &y, 1), 0);
  for (uint64_t i = 100; i < 200; i++) assert_int_equal(rgpu_handle_map_put(&m, i * 7, &y, 0), 0);
  assert_ptr_equal(rgpu_handle_map_get(&m, 42)->ptr, &x);
  assert_int_equal(rgpu_handle_map_get(&m, UINT64_MAX)->device, 1);
  assert_null(rgpu_handle_map_get(&m, 43));
  rgpu_handle_entry e;
  assert_int_equal(rgpu_handle_map_remove(&m, 42, &e), 0);
  assert_ptr_equal(e.ptr, &x);
  assert_int_equal(rgpu_handle_map_remove(&m, 42, &e), RGPU_SESS_ENOENT);
  assert_int_equal(rgpu_handle_map_put(&m, 42, &y, 0), 0); /* free ids may be reused */
  rgpu_handle_map_remove_matching(&m, 1, NULL, NULL);
  assert_null(rgpu_handle_map_get(&m, UINT64_MAX));
  assert_non_null(rgpu_handle_map_get(&m, 700));
  rgpu_handle_map_free(&m);
}

static void test_module_rec(void **state) {
  rgpu_module_rec *m = rgpu_module_rec_new(2, 3);
  assert_non_null(m);
  m->nparams[0] = 2;
  m->param_first[0] = 0;
  m->param_offsets[0] = 0;
  m->param_sizes[0] = 8;
  m->param_offsets[1] = 8;
  m->param_sizes[1] = 4;
  m->nparams[1] = 1;
  m->param_first[1] = 2;
  m->param_offsets[2] = 0;
  m->param_sizes[2] = 24;
  assert_int_equal(rgpu_module_rec_param_extent(m, 0), 12);
  assert_int_equal(rgpu_module_rec_param_extent(m, 1), 24);
  assert_int_equal(rgpu_module_rec_param_extent(m, 2), 0);
  rgpu_module_rec_free(m);
  m = rgpu_module_rec_new(0, 0);
  assert_non_null(m);
  rgpu_module_rec_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_alloc_lookup),
      cmocka_unit_test(test_module_bytes),
      cmocka_unit_test(test_alloc_overlap),
      cmocka_unit_test(test_alloc_remove_matching),
      cmocka_unit_test(test_handles),
      cmocka_unit_test(test_module_rec),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
