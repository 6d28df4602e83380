/* rgpu-server --devices LIST (rgpu_device_list.c): the order given is the
 * session's numbering, and every malformed list is refused with a sentence
 * that names it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "rgpu_device_list.h"

static void parses_in_given_order(void **state) {
  (void)state;
  int v[8], n = -1;
  char err[200] = "";
  assert_int_equal(rgpu_device_list_parse("2,0", v, 8, &n, err, sizeof err), 0);
  assert_int_equal(n, 2);
  assert_int_equal(v[0], 2);
  assert_int_equal(v[1], 0);
  assert_int_equal(rgpu_device_list_parse("5", v, 8, &n, err, sizeof err), 0);
  assert_int_equal(n, 1);
  assert_int_equal(v[0], 5);
  assert_int_equal(rgpu_device_list_check(v, n, 6, err, sizeof err), 0);
}

static void refuses_malformed(void **state) {
  (void)state;
  static const char *const bad[] = {"", ",", "0,", ",1", "0,,1", "a", "-1", "0;1", "1 ,2",
                                    "0,1,0", "0x1", "99999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    int v[8], n;
    char err[200] = "";
    assert_int_equal(rgpu_device_list_parse(bad[i], v, 8, &n, err, sizeof err), -1);
    assert_non_null(strstr(err, "--devices"));
  }
  int v[8], n;
  char err[200] = "";
  assert_int_equal(rgpu_device_list_parse("0,1,0", v, 8, &n, err, sizeof err), -1);
  assert_non_null(strstr(err, "device 0 is named twice"));
  assert_int_equal(rgpu_device_list_parse("0,1,2", v, 2, &n, err, sizeof err), -1);
  assert_non_null(strstr(err, "more than 2 devices"));
}

static void refuses_missing_device(void **state) {
  (void)state;
  int v[8], n;
  char err[200] = "";
  assert_int_equal(rgpu_device_list_parse("0,2", v, 8, &n, err, sizeof err), 0);
  assert_int_equal(rgpu_device_list_check(v, n, 2, err, sizeof err), -1);
  assert_string_equal(err, "--devices: device 2 does not exist (the driver has 2 devices)");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(parses_in_given_order),
      cmocka_unit_test(refuses_malformed),
      cmocka_unit_test(refuses_missing_device),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
