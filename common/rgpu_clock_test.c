/* rgpu_clock: the helpers agree with clock_gettime and saturate instead of
 * wrapping. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <unistd.h>

#include "rgpu_clock.h"

static void test_monotonic_units(void **state) {
  (void)state;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  uint64_t before = rgpu_timespec_ns(&ts);
  uint64_t ns = rgpu_clock_ns();
  assert_true(ns >= before);
  assert_true(rgpu_clock_us() >= ns / 1000);
  assert_true(rgpu_clock_ms() >= ns / 1000000);
  assert_true(rgpu_clock_s() >= (double)ns / 1e9);
  usleep(2000);
  assert_true(rgpu_clock_elapsed_ns(ns) >= 2000000);
  assert_true(rgpu_clock_elapsed_s(ns) >= 0.002);
  assert_int_equal(rgpu_clock_elapsed_ns(UINT64_MAX), 0); /* t0 in the future */
}

static void test_timespec_round_trip(void **state) {
  (void)state;
  struct timespec ts = rgpu_ns_timespec(3 * RGPU_NS_PER_S + 17);
  assert_int_equal(ts.tv_sec, 3);
  assert_int_equal(ts.tv_nsec, 17);
  assert_int_equal(rgpu_timespec_ns(&ts), 3 * RGPU_NS_PER_S + 17);
  struct timespec in = rgpu_clock_timespec_in(RGPU_NS_PER_S);
  uint64_t now = rgpu_clock_ns();
  assert_true(rgpu_timespec_ns(&in) > now);
  assert_true(rgpu_timespec_ns(&in) <= now + RGPU_NS_PER_S);
  assert_true(in.tv_nsec >= 0 && in.tv_nsec < 1000000000L);
}

static void test_deadlines(void **state) {
  (void)state;
  uint64_t d = rgpu_deadline_in_ms(50);
  assert_false(rgpu_deadline_passed(d));
  int ms = rgpu_deadline_left_ms(d, -1);
  assert_true(ms > 0 && ms <= 50);
  assert_int_equal(rgpu_deadline_left_ms(d, 10), 10); /* clamped */
  assert_int_equal(rgpu_deadline_left_ms(rgpu_clock_ns() - 1, 1000), 0);
  assert_true(rgpu_deadline_passed(rgpu_clock_ns()));
  assert_int_equal(rgpu_deadline_left_ns(0), 0);
  /* A timeout too large to add means never, not already passed. */
  assert_int_equal(rgpu_deadline_in_ns(UINT64_MAX), UINT64_MAX);
  assert_int_equal(rgpu_deadline_in_ms(UINT64_MAX / 2), UINT64_MAX);
  assert_false(rgpu_deadline_passed(rgpu_deadline_in_ms(UINT64_MAX)));
  assert_int_equal(rgpu_deadline_left_ms(UINT64_MAX, -1), INT_MAX);
}

static void test_wall_clock(void **state) {
  (void)state;
  /* After 2020-01-01: the wall clock, not the monotonic one. */
  assert_true(rgpu_wall_s() > 1577836800ull);
  assert_true(rgpu_wall_ns() / RGPU_NS_PER_S >= rgpu_wall_s() - 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_monotonic_units),
      cmocka_unit_test(test_timespec_round_trip),
      cmocka_unit_test(test_deadlines),
      cmocka_unit_test(test_wall_clock),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
