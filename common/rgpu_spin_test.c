/* rgpu_spin: a readable descriptor ends the poll at once, an idle one after
 * the budget and not before; RGPU_SPIN_US is read with its bounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

#include "rgpu_clock.h"
#include "rgpu_spin.h"

/* RGPU_SPIN_KEEP_CPU decides where it names 0 or 1, once per process; a
 * poll that keeps its CPU still ends at its budget.  First in the list:
 * every spinning poll reads the setting. */
static void test_keep_cpu_from_environment(void **state) {
  (void)state;
  setenv("RGPU_SPIN_KEEP_CPU", "1", 1);
  assert_int_equal(rgpu_spin_keeps_cpu(), 1);
  setenv("RGPU_SPIN_KEEP_CPU", "0", 1);
  assert_int_equal(rgpu_spin_keeps_cpu(), 1); /* read once per process */
  unsetenv("RGPU_SPIN_KEEP_CPU");
  int p[2];
  assert_int_equal(pipe(p), 0);
  uint64_t t0 = rgpu_clock_ns();
  assert_int_equal(rgpu_spin_readable(p[0], 2000), 0);
  assert_true(rgpu_clock_elapsed_ns(t0) >= 2 * RGPU_NS_PER_MS);
  assert_int_equal(write(p[1], "x", 1), 1);
  assert_int_equal(rgpu_spin_readable(p[0], 100000), 1);
  close(p[0]);
  close(p[1]);
}

static void test_readable_and_idle(void **state) {
  (void)state;
  int p[2];
  assert_int_equal(pipe(p), 0);
  uint64_t t0 = rgpu_clock_ns();
  assert_int_equal(rgpu_spin_readable(p[0], 3000), 0); /* nothing written */
  assert_true(rgpu_clock_elapsed_ns(t0) >= 3 * RGPU_NS_PER_MS);
  assert_int_equal(rgpu_spin_readable(p[0], 0), 0); /* budget 0: no poll at all */
  assert_int_equal(write(p[1], "x", 1), 1);
  t0 = rgpu_clock_ns();
  assert_int_equal(rgpu_spin_readable(p[0], 100000), 1);
  assert_true(rgpu_clock_elapsed_ns(t0) < 50 * RGPU_NS_PER_MS); /* at once, not the budget */
  close(p[1]);
  char b;
  assert_int_equal(read(p[0], &b, 1), 1);
  assert_int_equal(rgpu_spin_readable(p[0], 100000), 1); /* hang-up: the read reports it */
  close(p[0]);
  assert_int_equal(rgpu_spin_readable(-1, 1000), 0);
}

static void test_budget_from_environment(void **state) {
  (void)state;
  unsetenv("RGPU_SPIN_US");
  assert_int_equal(rgpu_spin_budget_us(200), 200);
  setenv("RGPU_SPIN_US", "0", 1);
  assert_int_equal(rgpu_spin_budget_us(200), 0);
  setenv("RGPU_SPIN_US", "750", 1);
  assert_int_equal(rgpu_spin_budget_us(200), 750);
  setenv("RGPU_SPIN_US", "100001", 1); /* out of range: the default */
  assert_int_equal(rgpu_spin_budget_us(200), 200);
  setenv("RGPU_SPIN_US", "12ms", 1);
  assert_int_equal(rgpu_spin_budget_us(200), 200);
  unsetenv("RGPU_SPIN_US");
}

/* rgpu_spin_ppoll: input ends both phases at once; with no input it polls
 * until the spin end, then sleeps until the deadline, never past it. */
static void test_spin_ppoll(void **state) {
  (void)state;
  int p[2];
  assert_int_equal(pipe(p), 0);
  struct pollfd pf = {.fd = p[0], .events = POLLIN};
  uint64_t t0 = rgpu_clock_ns();
  assert_int_equal(rgpu_spin_ppoll(&pf, 1, t0 + 2 * RGPU_NS_PER_MS, t0 + 5 * RGPU_NS_PER_MS), 0);
  assert_true(rgpu_clock_elapsed_ns(t0) >= 5 * RGPU_NS_PER_MS);
  /* A spin end past the deadline stops at the deadline. */
  t0 = rgpu_clock_ns();
  assert_int_equal(rgpu_spin_ppoll(&pf, 1, t0 + 10000 * RGPU_NS_PER_MS, t0 + 3 * RGPU_NS_PER_MS), 0);
  uint64_t took = rgpu_clock_elapsed_ns(t0);
  assert_true(took >= 3 * RGPU_NS_PER_MS && took < 2000 * RGPU_NS_PER_MS);
  assert_int_equal(write(p[1], "x", 1), 1);
  t0 = rgpu_clock_ns();
  assert_int_equal(rgpu_spin_ppoll(&pf, 1, t0 + 10000 * RGPU_NS_PER_MS, UINT64_MAX), 1);
  assert_true(pf.revents & POLLIN);
  assert_int_equal(rgpu_spin_ppoll(&pf, 1, 0, UINT64_MAX), 1); /* no spin: blocks, ready */
  assert_true(rgpu_clock_elapsed_ns(t0) < 1000 * RGPU_NS_PER_MS);
  close(p[0]);
  close(p[1]);
}

/* The environment decides where it names 0 or 1; the answer is kept. */
static void test_relayed_from_environment(void **state) {
  (void)state;
  setenv("RGPU_SPIN_RELAYED", "1", 1);
  assert_int_equal(rgpu_spin_spare_cpus(), 1);
  setenv("RGPU_SPIN_RELAYED", "0", 1);
  assert_int_equal(rgpu_spin_spare_cpus(), 1); /* read once per process */
  unsetenv("RGPU_SPIN_RELAYED");
}

/* A relay awaiting a worker's answer polls until RGPU_SPIN_ANSWER_US after
 * the request, never shortens its window, and does nothing where it never
 * polls (RGPU_SPIN_US=0).  Runs after test_relayed_from_environment, which
 * leaves spare CPUs set for this process. */
static void test_window_await(void **state) {
  (void)state;
  rgpu_spin_window s;
  rgpu_spin_window_init(&s, 200);
  assert_int_equal(s.window_ns, 200 * RGPU_NS_PER_US);
  rgpu_spin_window_await(&s, 0); /* nothing asked yet */
  assert_int_equal(s.until_ns, 0);
  uint64_t asked = rgpu_clock_ns();
  rgpu_spin_window_await(&s, asked);
  assert_int_equal(s.until_ns, asked + RGPU_SPIN_ANSWER_US * RGPU_NS_PER_US);
  s.until_ns = asked + 10 * RGPU_NS_PER_MS; /* a later window stays */
  rgpu_spin_window_await(&s, asked);
  assert_int_equal(s.until_ns, asked + 10 * RGPU_NS_PER_MS);
  setenv("RGPU_SPIN_US", "0", 1);
  rgpu_spin_window_init(&s, 200);
  unsetenv("RGPU_SPIN_US");
  rgpu_spin_window_await(&s, asked);
  assert_int_equal(s.until_ns, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_keep_cpu_from_environment),
      cmocka_unit_test(test_readable_and_idle),
      cmocka_unit_test(test_budget_from_environment),
      cmocka_unit_test(test_spin_ppoll),
      cmocka_unit_test(test_relayed_from_environment),
      cmocka_unit_test(test_window_await),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
