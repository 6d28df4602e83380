/* Unit tests of the wire primitives and the frame header. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "rgpu_frame.h"
#include "rgpu_wire.h"

static void test_scalars_roundtrip(void **state) {
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_buf_put_u8(&b, 0xab);
  rgpu_buf_put_u16(&b, 0x1234);
  rgpu_buf_put_u32(&b, 0xdeadbeef);
  rgpu_buf_put_u64(&b, 0x0102030405060708ull);
  rgpu_buf_put_f32(&b, 1.5f);
  rgpu_buf_put_bytes(&b, "hello", 5);
  assert_int_equal(b.err, 0);
  assert_int_equal(b.len, 1 + 2 + 4 + 8 + 4 + 4 + 5);
  /* little-endian on the wire */
  assert_int_equal(b.data[1], 0x34);
  assert_int_equal(b.data[2], 0x12);
  rgpu_reader r;
  rgpu_reader_init(&r, b.data, b.len);
  assert_int_equal(rgpu_reader_get_u8(&r), 0xab);
  assert_int_equal(rgpu_reader_get_u16(&r), 0x1234);
  assert_int_equal(rgpu_reader_get_u32(&r), 0xdeadbeef);
  assert_true(rgpu_reader_get_u64(&r) == 0x0102030405060708ull);
  assert_true(rgpu_reader_get_f32(&r) == 1.5f);
  size_t n;
  const uint8_t *s = rgpu_reader_get_bytes(&r, 16, &n);
  assert_non_null(s);
  assert_int_equal(n, 5);
  assert_memory_equal(s, "hello", 5);
  assert_int_equal(rgpu_reader_finish(&r), 0);
  rgpu_buf_free(&b);
}

static void test_reader_truncation_latches(void **state) {
  uint8_t three[3] = {1, 2, 3};
  rgpu_reader r;
  rgpu_reader_init(&r, three, sizeof three);
  assert_int_equal(rgpu_reader_get_u32(&r), 0);
  assert_int_equal(r.err, RGPU_PROTO_ETRUNC);
  /* later reads stay failed and return zero */
  assert_int_equal(rgpu_reader_get_u8(&r), 0);
  assert_int_equal(rgpu_reader_finish(&r), RGPU_PROTO_ETRUNC);
}

static void test_bytes_limit_and_length_past_end(void **state) {
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_buf_put_bytes(&b, "0123456789", 10);
  rgpu_reader r;
  size_t n;
  rgpu_reader_init(&r, b.data, b.len);
  assert_null(rgpu_reader_get_bytes(&r, 9, &n));
  assert_int_equal(r.err, RGPU_PROTO_ETOOBIG);
  /* a length prefix claiming more than the buffer holds */
  uint8_t lie[8] = {0xff, 0xff, 0xff, 0x7f, 'a', 'b', 'c', 'd'};
  rgpu_reader_init(&r, lie, sizeof lie);
  assert_null(rgpu_reader_get_bytes(&r, SIZE_MAX, &n));
  assert_int_equal(r.err, RGPU_PROTO_ETRUNC);
  rgpu_buf_free(&b);
}

static void test_trailing_bytes_rejected(void **state) {
  uint8_t five[5] = {0};
  rgpu_reader r;
  rgpu_reader_init(&r, five, sizeof five);
  (void)rgpu_reader_get_u32(&r);
  assert_int_equal(rgpu_reader_finish(&r), RGPU_PROTO_ETRAILING);
}

static void test_frame_header(void **state) {
  rgpu_frame_hdr h = {.version = RGPU_PROTO_VERSION, .kind = RGPU_KIND_REQUEST,
                      .opcode = 0x22, .length = 100, .aux = RGPU_REQ_NEED_REPLY,
                      .seq = 0x1122334455667788ull};
  uint8_t raw[RGPU_FRAME_HDR_SIZE];
  rgpu_frame_hdr_encode(raw, &h);
  assert_memory_equal(raw, "RGP1", 4);
  rgpu_frame_hdr d;
  assert_int_equal(rgpu_frame_hdr_decode(raw, 1000, &d), 0);
  assert_int_equal(d.opcode, 0x22);
  assert_int_equal(d.length, 100);
  assert_true(d.seq == h.seq);
  assert_int_equal(rgpu_frame_hdr_decode(raw, 99, &d), RGPU_PROTO_ETOOBIG);
  raw[4] = 9;
  assert_int_equal(rgpu_frame_hdr_decode(raw, 1000, &d), RGPU_PROTO_EVERSION);
  raw[4] = RGPU_PROTO_VERSION;
  raw[5] = 7;
  assert_int_equal(rgpu_frame_hdr_decode(raw, 1000, &d), RGPU_PROTO_EKIND);
  raw[0] = 'X';
  assert_int_equal(rgpu_frame_hdr_decode(raw, 1000, &d), RGPU_PROTO_EBADMAGIC);
}

static void test_str_copy(void **state) {
  char out[4];
  assert_int_equal(rgpu_str_copy(out, sizeof out, "abc", 3), 0);
  assert_string_equal(out, "abc");
  assert_int_equal(rgpu_str_copy(out, sizeof out, "abcd", 4), -1);
  assert_string_equal(out, "");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_scalars_roundtrip),
      cmocka_unit_test(test_reader_truncation_latches),
      cmocka_unit_test(test_bytes_limit_and_length_past_end),
      cmocka_unit_test(test_trailing_bytes_rejected),
      cmocka_unit_test(test_frame_header),
      cmocka_unit_test(test_str_copy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
