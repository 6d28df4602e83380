/* Unit tests of the generated graph node codec: the word positions are the
 * protocol (server/rgpu_graph.h), so they are pinned here word by word. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "rgpu_graph_nodes.h"

static void test_kernel_words(void **state) {
  (void)state;
  rgpu_gnode n = {.type = RGPU_GNODE_KERNEL,
                  .kernel = {.module_id = 10, .func_index = 11, .grid_x = 12, .grid_y = 13,
                             .grid_z = 14, .block_x = 15, .block_y = 16, .block_z = 17,
                             .shared_bytes = 18}};
  uint64_t w[RGPU_GNODE_WORDS];
  rgpu_gnode_encode(&n, w);
  for (int i = 0; i < 9; i++) assert_int_equal(w[i], 10 + i);
  for (int i = 9; i < RGPU_GNODE_WORDS; i++) assert_int_equal(w[i], 0);
  rgpu_gnode d;
  rgpu_gnode_decode(RGPU_GNODE_KERNEL, w, &d);
  assert_int_equal(d.type, RGPU_GNODE_KERNEL);
  assert_memory_equal(&d.kernel, &n.kernel, sizeof n.kernel);
}

static void test_copy_memset_event_words(void **state) {
  (void)state;
  rgpu_gnode n = {.type = RGPU_GNODE_MEMCPY,
                  .copy = {.dir = RGPU_GCOPY_D2D, .dst = 1, .src = 2, .width = 3, .height = 4,
                           .depth = 5, .dst_pitch = 6, .dst_rows = 7, .src_pitch = 8,
                           .src_rows = 9}};
  uint64_t w[RGPU_GNODE_WORDS];
  rgpu_gnode_encode(&n, w);
  assert_int_equal(w[0], 3);
  for (int i = 1; i < 10; i++) assert_int_equal(w[i], i);
  n = (rgpu_gnode){.type = RGPU_GNODE_MEMSET,
                   .fill = {.dst = 1, .pitch = 2, .value = 3, .elem_size = 4, .width = 5, .height = 6}};
  rgpu_gnode_encode(&n, w);
  for (int i = 0; i < 6; i++) assert_int_equal(w[i], i + 1);
  n = (rgpu_gnode){.type = RGPU_GNODE_EVENT_WAIT, .event = {.event = 77}};
  rgpu_gnode_encode(&n, w);
  assert_int_equal(w[0], 77);
  for (int i = 1; i < RGPU_GNODE_WORDS; i++) assert_int_equal(w[i], 0);
  rgpu_gnode d;
  rgpu_gnode_decode(RGPU_GNODE_EVENT_RECORD, w, &d);
  assert_int_equal(d.event.event, 77);
  /* Unknown types keep their type only: the server's check refuses them. */
  rgpu_gnode_decode(99, w, &d);
  assert_int_equal(d.type, 99);
  assert_int_equal(RGPU_GNODE_KERNEL, 1);
  assert_int_equal(RGPU_GNODE_EMPTY, 4);
  assert_int_equal(RGPU_GNODE_EVENT_WAIT, 6);
  assert_int_equal(RGPU_GNODE_WORDS, 12);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kernel_words),
      cmocka_unit_test(test_copy_memset_event_words),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
