/* rgpu_output: what a real driver prints to stdout (stdio or write(2))
 * ends up in the session's pending output, in order, and stdout is back
 * where it was afterwards. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "rgpu_output.h"

static int pending_is(rgpu_worker_output *o, const char *want) {
  pthread_mutex_lock(&o->lock);
  rgpu_output_capture_drain(o);
  int ok = o->pending.len == strlen(want) && memcmp(o->pending.data, want, o->pending.len) == 0;
  pthread_mutex_unlock(&o->lock);
  return ok;
}

static void test_capture_stdio_and_write(void **state) {
  (void)state;
  rgpu_worker_output o;
  rgpu_output_init(&o);
  assert_int_equal(rgpu_output_capture_start(&o), 0);
  /* stdio (buffered: a pipe is not a terminal) and a raw write, in order. */
  printf("hello from block %d\n", 0);
  assert_true(pending_is(&o, "hello from block 0\n"));
  assert_int_equal(write(STDOUT_FILENO, "raw\n", 4), 4);
  printf("after\n");
  assert_true(pending_is(&o, "hello from block 0\nraw\nafter\n"));
  rgpu_output_capture_stop(&o);
  assert_true(o.capture_fd < 0);
  rgpu_output_free(&o);
}

/* More than a pipe holds, with nobody draining: the reader thread keeps the
 * writer from blocking, and nothing is lost. */
static void test_capture_more_than_a_pipe(void **state) {
  (void)state;
  rgpu_worker_output o;
  rgpu_output_init(&o);
  assert_int_equal(rgpu_output_capture_start(&o), 0);
  char line[101];
  memset(line, 'x', 99);
  line[99] = '\n';
  line[100] = 0;
  for (int i = 0; i < 4000; i++) assert_int_equal(write(STDOUT_FILENO, line, 100), 100);
  rgpu_output_capture_stop(&o);
  assert_int_equal(o.pending.len, 400000);
  assert_int_equal(o.dropped, 0);
  rgpu_output_free(&o);
}

static void test_append_bounded(void **state) {
  (void)state;
  rgpu_worker_output o;
  rgpu_output_init(&o);
  rgpu_output_append(&o, "abc", 3);
  static char big[RGPU_OUTPUT_MAX];
  rgpu_output_append(&o, big, sizeof big);
  assert_int_equal(o.pending.len, 3);
  assert_int_equal(o.dropped, sizeof big);
  rgpu_output_free(&o);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_capture_stdio_and_write),
      cmocka_unit_test(test_capture_more_than_a_pipe),
      cmocka_unit_test(test_append_bounded),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
