/* rgpu_bulk: the lane byte layout (proto/rgpu_bulk_proto.h) and the
 * worker's table of staged host-to-device items. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rgpu_bulk.h"
#include "rgpu_bulk_proto.h"

static void test_preamble(void **state) {
  (void)state;
  uint8_t p[RGPU_BULK_PREAMBLE_SIZE];
  uint32_t lane = 99;
  rgpu_bulk_preamble_encode(p, 7);
  assert_int_equal(rgpu_bulk_preamble_decode(p, &lane), 0);
  assert_int_equal(lane, 7);
  /* Little-endian magic "RGPB" first, whatever the host. */
  assert_memory_equal(p, "RGPB", 4);
  /* Out-of-range lane, bad magic, nonzero reserved word: refused. */
  rgpu_bulk_preamble_encode(p, RGPU_BULK_MAX_LANES);
  assert_int_equal(rgpu_bulk_preamble_decode(p, &lane), -1);
  rgpu_bulk_preamble_encode(p, 1);
  p[0] ^= 1;
  assert_int_equal(rgpu_bulk_preamble_decode(p, &lane), -1);
  rgpu_bulk_preamble_encode(p, 1);
  p[15] = 1;
  assert_int_equal(rgpu_bulk_preamble_decode(p, &lane), -1);
  /* An ordinary frame header (a client speaking the wrong protocol) is
   * not a preamble. */
  memcpy(p, "RGP1", 4);
  assert_int_equal(rgpu_bulk_preamble_decode(p, &lane), -1);
}

static void test_item_header(void **state) {
  (void)state;
  uint8_t h[RGPU_BULK_ITEM_HDR_SIZE];
  uint64_t id = 0, len = 0;
  rgpu_bulk_item_encode(h, 0x0102030405060708ull, 4u << 20);
  assert_int_equal(h[0], 0x08);
  assert_int_equal(rgpu_bulk_item_decode(h, 4u << 20, &id, &len), 0);
  assert_true(id == 0x0102030405060708ull);
  assert_true(len == (4u << 20));
  /* Above the limit, zero length, zero id: refused. */
  assert_int_equal(rgpu_bulk_item_decode(h, (4u << 20) - 1, &id, &len), -1);
  rgpu_bulk_item_encode(h, 5, 0);
  assert_int_equal(rgpu_bulk_item_decode(h, 100, &id, &len), -1);
  rgpu_bulk_item_encode(h, 0, 10);
  assert_int_equal(rgpu_bulk_item_decode(h, 100, &id, &len), -1);
  rgpu_bulk_item_encode(h, 1, UINT64_MAX);
  assert_int_equal(rgpu_bulk_item_decode(h, UINT32_MAX, &id, &len), -1);
}

static void test_items(void **state) {
  (void)state;
  rgpu_bulk_items t = {0};
  rgpu_bulk_item *a = rgpu_bulk_items_add(&t, 1, 0, 1000);
  rgpu_bulk_item *b = rgpu_bulk_items_add(&t, 2, 1, 3000);
  rgpu_bulk_item *c = rgpu_bulk_items_add(&t, 3, 1, 5000);
  assert_non_null(a);
  assert_non_null(b);
  assert_non_null(c);
  assert_int_equal(t.staged_bytes, 9000);
  /* Room for the data. */
  assert_true(a->buf.cap >= 1000);
  assert_ptr_equal(rgpu_bulk_items_find(&t, 2), b);
  assert_null(rgpu_bulk_items_find(&t, 4));
  rgpu_bulk_items_unlink(&t, b);
  assert_null(rgpu_bulk_items_find(&t, 2));
  assert_int_equal(t.staged_bytes, 6000);
  rgpu_bulk_item_free(b);
  /* Dropping lane 1's incomplete items keeps lane 0's and complete ones. */
  a->done = 1;
  rgpu_bulk_items_drop(&t, 1, 1);
  assert_ptr_equal(rgpu_bulk_items_find(&t, 1), a);
  assert_null(rgpu_bulk_items_find(&t, 3));
  assert_int_equal(t.staged_bytes, 1000);
  rgpu_bulk_items_drop(&t, -1, 0);
  assert_null(t.head);
  assert_int_equal(t.staged_bytes, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_preamble),
      cmocka_unit_test(test_item_header),
      cmocka_unit_test(test_items),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
