/* Unit tests of the generated message codecs: round trips, and rejection of
 * every truncation, trailing garbage and oversized counts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_messages.h"

static void test_hello_roundtrip(void **state) {
  rgpu_msg_hello_req m = {.proto_version = 1, .caps = 7, .client_pid = 42,
                          .token = {"secret", 6}, .resume_token = {NULL, 0},
                          .client_name = {"app", 3}};
  rgpu_buf b;
  rgpu_buf_init(&b);
  assert_int_equal(rgpu_msg_hello_req_encode(&b, &m), 0);
  rgpu_msg_hello_req d;
  assert_int_equal(rgpu_msg_hello_req_decode(b.data, b.len, &d), 0);
  assert_int_equal(d.client_pid, 42);
  assert_int_equal(d.token.len, 6);
  assert_memory_equal(d.token.data, "secret", 6);
  assert_int_equal(d.client_name.len, 3);
  /* every strict prefix fails */
  for (size_t n = 0; n < b.len; n++)
    assert_int_not_equal(rgpu_msg_hello_req_decode(b.data, n, &d), 0);
  /* a trailing byte fails */
  rgpu_buf_put_u8(&b, 0);
  assert_int_equal(rgpu_msg_hello_req_decode(b.data, b.len, &d), RGPU_PROTO_ETRAILING);
  rgpu_buf_free(&b);
}

static void test_string_with_nul_rejected(void **state) {
  rgpu_msg_hello_req m = {.token = {"a\0b", 3}};
  rgpu_buf b;
  rgpu_buf_init(&b);
  assert_int_equal(rgpu_msg_hello_req_encode(&b, &m), 0);
  rgpu_msg_hello_req d;
  assert_int_equal(rgpu_msg_hello_req_decode(b.data, b.len, &d), RGPU_PROTO_EINVAL);
  rgpu_buf_free(&b);
}

static void test_module_load_strlist_and_tail(void **state) {
  const char *funcs[] = {"_Z6vecaddPKfS0_Pfi", "_Z4tmplIfLi3EEvPT_S0_i"};
  const char *vars[] = {"g_counter"};
  rgpu_msg_module_load_req m = {.module_id = 9,
                                .func_names = {.items = funcs, .count = 2},
                                .var_names = {.items = vars, .count = 1}};
  rgpu_buf b;
  rgpu_buf_init(&b);
  assert_int_equal(rgpu_msg_module_load_req_encode(&b, &m), 0);
  const char image[] = "FATBIN-IMAGE";
  rgpu_buf_put(&b, image, sizeof image); /* the tail travels after the fields */
  rgpu_msg_module_load_req d;
  assert_int_equal(rgpu_msg_module_load_req_decode(b.data, b.len, &d), 0);
  assert_int_equal(d.module_id, 9);
  assert_int_equal(d.func_names.count, 2);
  assert_int_equal(d.image.len, sizeof image);
  assert_memory_equal(d.image.data, image, sizeof image);
  rgpu_strlist_iter it;
  const char *s;
  size_t n;
  rgpu_strlist_iter_init(&it, &d.func_names);
  assert_true(rgpu_strlist_next(&it, &s, &n));
  assert_int_equal(n, strlen(funcs[0]));
  assert_memory_equal(s, funcs[0], n);
  assert_true(rgpu_strlist_next(&it, &s, &n));
  assert_memory_equal(s, funcs[1], n);
  assert_false(rgpu_strlist_next(&it, &s, &n));
  assert_int_equal(d.image_hash.len, 0); /* no hash: the image is the tail */
  rgpu_buf_free(&b);

  /* The image cache's form (issue 15): a 32-byte hash, no tail; a longer
   * hash does not encode nor decode. */
  uint8_t hash[33];
  for (int i = 0; i < 33; i++) hash[i] = (uint8_t)(i * 7);
  m.image_hash = (rgpu_bytes){hash, 32};
  rgpu_buf_init(&b);
  assert_int_equal(rgpu_msg_module_load_req_encode(&b, &m), 0);
  assert_int_equal(rgpu_msg_module_load_req_decode(b.data, b.len, &d), 0);
  assert_int_equal(d.image_hash.len, 32);
  assert_memory_equal(d.image_hash.data, hash, 32);
  assert_int_equal(d.image.len, 0);
  rgpu_buf_free(&b);
  m.image_hash.len = 33;
  rgpu_buf_init(&b);
  assert_int_equal(rgpu_msg_module_load_req_encode(&b, &m), RGPU_PROTO_ETOOBIG);
  rgpu_buf_free(&b);
}

static void test_array_count_over_limit(void **state) {
  /* DEVICE_PROPS reply: attrs limited to 1024 entries */
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_buf_put_bytes(&b, "dev", 3);
  rgpu_buf_put_bytes(&b, "0123456789abcdef", 16);
  rgpu_buf_put_u64(&b, 1);
  rgpu_buf_put_u32(&b, 5000);
  rgpu_msg_device_props_rep d;
  assert_int_equal(rgpu_msg_device_props_rep_decode(b.data, b.len, &d), RGPU_PROTO_ETOOBIG);
  /* a count that fits the limit but not the buffer */
  b.len -= 4;
  rgpu_buf_put_u32(&b, 1000);
  assert_int_equal(rgpu_msg_device_props_rep_decode(b.data, b.len, &d), RGPU_PROTO_ETRUNC);
  rgpu_buf_free(&b);
}

static void test_arrays_roundtrip(void **state) {
  int32_t attrs[3] = {32, -1, 1024};
  rgpu_msg_device_props_rep m = {.name = {"softgpu", 7}, .uuid = {"0123456789abcdef", 16},
                                 .total_mem = 1ull << 32, .attrs = {attrs, 3}};
  rgpu_buf b;
  rgpu_buf_init(&b);
  assert_int_equal(rgpu_msg_device_props_rep_encode(&b, &m), 0);
  rgpu_msg_device_props_rep d;
  assert_int_equal(rgpu_msg_device_props_rep_decode(b.data, b.len, &d), 0);
  assert_int_equal(d.attrs.count, 3);
  assert_int_equal(rgpu_array_i32(&d.attrs, 1), -1);
  assert_int_equal(rgpu_array_i32(&d.attrs, 2), 1024);
  assert_true(d.total_mem == (1ull << 32));
  rgpu_buf_free(&b);
}

static void test_validate_all_ops_on_garbage(void **state) {
  /* Every opcode's decoders must survive random bytes of every length. */
  uint8_t junk[256];
  unsigned seed = 12345;
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (uint8_t)((seed = seed * 1103515245u + 12345u) >> 16);
  for (unsigned op = 0; op < 0x200; op++) {
    if (!rgpu_op_name((uint16_t)op)) {
      assert_int_equal(rgpu_msg_validate((uint16_t)op, 0, junk, 10), RGPU_PROTO_EOPCODE);
      continue;
    }
    for (int part = 0; part < 3; part++)
      for (size_t n = 0; n <= sizeof junk; n += 7) (void)rgpu_msg_validate((uint16_t)op, part, junk, n);
  }
}

static void test_names(void **state) {
  assert_string_equal(rgpu_op_name(RGPU_OP_LAUNCH), "LAUNCH");
  assert_true(rgpu_op_is_request(RGPU_OP_MEMCPY_HTOD));
  assert_false(rgpu_op_is_request(RGPU_EVT_ASYNC_ERROR));
  assert_true(rgpu_op_has_tail(RGPU_OP_MEMCPY_HTOD, 0));
  assert_false(rgpu_op_has_tail(RGPU_OP_MEMCPY_HTOD, 1));
  assert_true(rgpu_op_has_tail(RGPU_OP_MEMCPY_DTOH, 1));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hello_roundtrip),
      cmocka_unit_test(test_string_with_nul_rejected),
      cmocka_unit_test(test_module_load_strlist_and_tail),
      cmocka_unit_test(test_array_count_over_limit),
      cmocka_unit_test(test_arrays_roundtrip),
      cmocka_unit_test(test_validate_all_ops_on_garbage),
      cmocka_unit_test(test_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
