/* rgpu_half.h: every half survives the round trip through float; floats
 * round to the nearest half and bfloat16, ties to even, with overflow to
 * infinity and subnormals exact. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "rgpu_half.h"

static void test_half_round_trip(void **state) {
  (void)state;
  for (unsigned h = 0; h < 65536; h++) {
    float f = rgpu_half_to_float((uint16_t)h);
    if (isnan(f)) {
      assert_true(isnan(rgpu_half_to_float(rgpu_float_to_half(f))));
      continue;
    }
    assert_int_equal(rgpu_float_to_half(f), h);
  }
}

static void test_half_rounding(void **state) {
  (void)state;
  assert_true(rgpu_half_to_float(0x3c00) == 1.0f);
  assert_true(rgpu_half_to_float(0x7bff) == 65504.0f);
  assert_true(rgpu_half_to_float(0x0001) == 0x1p-24f);
  /* 1 + 2^-11 is halfway between 1 and the next half: to even (1). */
  assert_int_equal(rgpu_float_to_half(1.0f + 0x1p-11f), 0x3c00);
  /* 1 + 3 * 2^-11 is halfway between 1 + 2^-10 and 1 + 2^-9: to even. */
  assert_int_equal(rgpu_float_to_half(1.0f + 3 * 0x1p-11f), 0x3c02);
  assert_int_equal(rgpu_float_to_half(65519.0f), 0x7bff);
  assert_int_equal(rgpu_float_to_half(65520.0f), 0x7c00);
  assert_int_equal(rgpu_float_to_half(-INFINITY), 0xfc00);
  assert_int_equal(rgpu_float_to_half(0x1p-25f), 0x0000);      /* tie: to even (0) */
  assert_int_equal(rgpu_float_to_half(0x1p-25f * 3), 0x0002);  /* tie: to even (2) */
  assert_int_equal(rgpu_float_to_half(-0.0f), 0x8000);
}

static void test_bf16(void **state) {
  (void)state;
  assert_true(rgpu_bf16_to_float(0x3f80) == 1.0f);
  assert_int_equal(rgpu_float_to_bf16(1.0f), 0x3f80);
  /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to even (1). */
  assert_int_equal(rgpu_float_to_bf16(1.0f + 0x1p-8f), 0x3f80);
  assert_int_equal(rgpu_float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
  assert_int_equal(rgpu_float_to_bf16(-2.5f), 0xc020);
  assert_true(isnan(rgpu_bf16_to_float(rgpu_float_to_bf16(NAN))));
  for (unsigned b = 0; b < 65536; b++) {
    float f = rgpu_bf16_to_float((uint16_t)b);
    if (!isnan(f)) assert_int_equal(rgpu_float_to_bf16(f), b);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_half_round_trip),
      cmocka_unit_test(test_half_rounding),
      cmocka_unit_test(test_bf16),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
