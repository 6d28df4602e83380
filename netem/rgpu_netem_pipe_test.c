/* Model tests of the impairment pipeline: the time is simulated, so these
 * are exact and fast, and run without root. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rgpu_netem_pipe.h"

#define MS 1000000ull
#define US 1000ull

static rgpu_netem_dir_config base(void) {
  rgpu_netem_dir_config c;
  memset(&c, 0, sizeof c);
  c.queue_pkts = 1000;
  return c;
}

static void init(rgpu_netem_pipe *p, const rgpu_netem_dir_config *c,
                 const rgpu_netem_schedule *s, size_t slots) {
  char err[128];
  assert_int_equal(rgpu_netem_pipe_init(p, c, s, 42, 1500, slots, err, sizeof err), 0);
}

/* Submits one packet of len bytes at t carrying id in its first bytes. */
static bool put(rgpu_netem_pipe *p, uint64_t t, uint32_t len, uint32_t id) {
  rgpu_netem_slot *s = rgpu_netem_pipe_get_slot(p);
  assert_non_null(s);
  s->len = len;
  memcpy(s->data, &id, sizeof id);
  return rgpu_netem_pipe_submit(p, s, t);
}

static uint32_t id_of(const rgpu_netem_slot *s) {
  uint32_t id;
  memcpy(&id, s->data, sizeof id);
  return id;
}

static void test_passthrough(void **state) {
  (void)state;
  rgpu_netem_dir_config c = base();
  rgpu_netem_pipe p;
  init(&p, &c, NULL, 16);
  for (uint32_t i = 0; i < 10; i++) assert_true(put(&p, 1000, 100, i));
  assert_int_equal(rgpu_netem_pipe_next_due(&p), 1000);
  assert_null(rgpu_netem_pipe_pop(&p, 999));
  for (uint32_t i = 0; i < 10; i++) {
    rgpu_netem_slot *s = rgpu_netem_pipe_pop(&p, 1000);
    assert_non_null(s);
    assert_int_equal(id_of(s), i);
    rgpu_netem_pipe_put_slot(&p, s);
  }
  assert_null(rgpu_netem_pipe_pop(&p, 1000));
  assert_int_equal(rgpu_netem_pipe_next_due(&p), UINT64_MAX);
  assert_int_equal(p.st.rx_pkts, 10);
  assert_int_equal(p.st.tx_pkts, 10);
  assert_int_equal(p.st.tx_bytes, 1000);
  rgpu_netem_pipe_free(&p);
}

static void test_delay(void **state) {
  (void)state;
  rgpu_netem_dir_config c = base();
  c.delay_ns = 25 * MS;
  rgpu_netem_pipe p;
  init(&p, &c, NULL, 16);
  assert_true(put(&p, 5 * MS, 100, 1));
  assert_int_equal(rgpu_netem_pipe_next_due(&p), 30 * MS);
  assert_null(rgpu_netem_pipe_pop(&p, 30 * MS - 1));
  rgpu_netem_slot *s = rgpu_netem_pipe_pop(&p, 30 * MS);
  assert_non_null(s);
  rgpu_netem_pipe_put_slot(&p, s);
  rgpu_netem_pipe_free(&p);
}

/* Runs n packets through and returns the loss pattern (1 = lost). */
static uint8_t *loss_pattern(const rgpu_netem_dir_config *c, size_t n,
                             rgpu_netem_pipe *p) {
  init(p, c, NULL, 4);
  uint8_t *lost = calloc(n, 1);
  assert_non_null(lost);
  for (size_t i = 0; i < n; i++) {
    if (!put(p, i * US, 100, (uint32_t)i)) {
      lost[i] = 1;
      continue;
    }
    rgpu_netem_slot *s = rgpu_netem_pipe_pop(p, i * US);
    assert_non_null(s);
    rgpu_netem_pipe_put_slot(p, s);
  }
  return lost;
}

static void burst_stats(const uint8_t *lost, size_t n, double *ratio,
                        double *mean_burst) {
  size_t lsum = 0, bursts = 0, run = 0;
  for (size_t i = 0; i <= n; i++) {
    if (i < n && lost[i]) {
      run++;
      lsum++;
    } else if (run) {
      bursts++;
      run = 0;
    }
  }
  *ratio = (double)lsum / (double)n;
  *mean_burst = bursts ? (double)lsum / (double)bursts : 0;
}

static void test_bernoulli(void **state) {
  (void)state;
  rgpu_netem_dir_config c = base();
  c.loss = 0.05;
  rgpu_netem_pipe p;
  size_t n = 200000;
  uint8_t *lost = loss_pattern(&c, n, &p);
  double ratio, mb;
  burst_stats(lost, n, &ratio, &mb);
  assert_true(fabs(ratio - 0.05) < 0.003);
  /* Independent losses: bursts have mean length 1/(1-p). */
  assert_true(fabs(mb - 1.0 / 0.95) < 0.02);
  assert_int_equal(p.st.lost_random, (uint64_t)llround(ratio * (double)n));
  free(lost);
  rgpu_netem_pipe_free(&p);
}

static void test_gilbert_elliott(void **state) {
  (void)state;
  rgpu_netem_dir_config c = base();
  c.ge_enabled = true;
  c.ge_p = 0.05;
  c.ge_r = 0.25;
  c.ge_h = 1.0;
  c.ge_k = 0.0;
  rgpu_netem_pipe p;
  size_t n = 400000;
  uint8_t *lost = loss_pattern(&c, n, &p);
  double ratio, mb;
  burst_stats(lost, n, &ratio, &mb);
  /* P(Bad) = p/(p+r) = 1/6; bursts are Bad sojourns of mean 1/r = 4. */
  assert_true(fabs(ratio - 1.0 / 6) < 0.01);
  assert_true(fabs(mb - 4.0) < 0.15);
  assert_int_equal(p.st.lost_burst, (uint64_t)llround(ratio * (double)n));
  free(lost);
  rgpu_netem_pipe_free(&p);
}

static void test_gilbert_elliott_partial(void **state) {
  (void)state;
  /* The wifi-bad parameters: 2% mean loss. */
  rgpu_netem_dir_config c = base();
  c.ge_enabled = true;
  c.ge_p = 0.0083333;
  c.ge_r = 0.20;
  c.ge_h = 0.50;
  rgpu_netem_pipe p;
  size_t n = 400000;
  uint8_t *lost = loss_pattern(&c, n, &p);
  double ratio, mb;
  burst_stats(lost, n, &ratio, &mb);
  assert_true(fabs(ratio - 0.02) < 0.002);
  assert_true(mb > 1.2); /* burstier than independent loss (1.02) */
  free(lost);
  rgpu_netem_pipe_free(&p);
}

static void test_seed_determinism(void **state) {
  (void)state;
  rgpu_netem_dir_config c = base();
  c.loss = 0.1;
  rgpu_netem_pipe a, b;
  uint8_t *la = loss_pattern(&c, 5000, &a);
  uint8_t *lb = loss_pattern(&c, 5000, &b);
  assert_memory_equal(la, lb, 5000);
  free(la);
  free(lb);
  rgpu_netem_pipe_free(&a);
  rgpu_netem_pipe_free(&b);
}

static void test_rate_and_droptail(void **state) {
  (void)state;
  rgpu_netem_dir_config c = base();
  c.rate_bps = 10e6; /* 1000 B = 800 us */
  c.queue_pkts = 100;
  rgpu_netem_pipe p;
  init(&p, &c, NULL, 1000);
  int kept = 0;
  for (uint32_t i = 0; i < 150; i++) kept += put(&p, 0, 1000, i);
  assert_int_equal(kept, 100);
  assert_int_equal(p.st.dropped_queue, 50);
  assert_int_equal(p.st.max_queue_pkts, 100);
  assert_int_equal(rgpu_netem_pipe_backlog(&p, 0), 100);
  /* After 10 packet times 10 have left the queue and 10 more fit. */
  assert_int_equal(rgpu_netem_pipe_backlog(&p, 8000 * US), 90);
  for (uint32_t i = 0; i < 12; i++) kept += put(&p, 8000 * US, 1000, 200 + i);
  assert_int_equal(kept, 110);
  for (uint32_t i = 0; i < 110; i++) {
    rgpu_netem_slot *s = rgpu_netem_pipe_pop(&p, UINT64_MAX - 1);
    assert_non_null(s);
    assert_int_equal(s->due_ns, (uint64_t)(i + 1) * 800 * US);
    rgpu_netem_pipe_put_slot(&p, s);
  }
  rgpu_netem_pipe_free(&p);
}

static void test_rate_throughput(void **state) {
  (void)state;
  /* Offered 2x the rate for one simulated second: the output runs at the
   * rate exactly and the excess is dropped at the tail. */
  rgpu_netem_dir_config c = base();
  c.rate_bps = 20e6;
  c.queue_pkts = 50;
  c.delay_ns = 10 * MS;
  rgpu_netem_pipe p;
  init(&p, &c, NULL, 10000);
  uint64_t out_bytes = 0, last = 0;
  for (uint64_t t = 0; t < 1000 * MS; t += 300 * US) { /* 1500 B / 300 us = 40 Mbit/s */
    put(&p, t, 1500, 0);
    rgpu_netem_slot *s;
    while ((s = rgpu_netem_pipe_pop(&p, t))) {
      out_bytes += s->len;
      last = s->due_ns;
      rgpu_netem_pipe_put_slot(&p, s);
    }
  }
  double mbit = (double)out_bytes * 8 / ((double)(last - 10 * MS) / 1e9) / 1e6;
  assert_true(fabs(mbit - 20.0) < 0.2);
  assert_true(p.st.dropped_queue > 1000);
  rgpu_netem_pipe_free(&p);
}

static void test_queue_bytes(void **state) {
  (void)state;
  rgpu_netem_dir_config c = base();
  c.rate_bps = 1e6;
  c.queue_pkts = 1000;
  c.queue_bytes = 5000;
  rgpu_netem_pipe p;
  init(&p, &c, NULL, 100);
  int kept = 0;
  for (uint32_t i = 0; i < 10; i++) kept += put(&p, 0, 1000, i);
  assert_int_equal(kept, 5);
  rgpu_netem_pipe_free(&p);
}

static void test_jitter_keeps_order(void **state) {
  (void)state;
  rgpu_netem_dir_config c = base();
  c.delay_ns = 20 * MS;
  c.jitter_ns = 5 * MS;
  rgpu_netem_pipe p;
  init(&p, &c, NULL, 20000);
  for (uint32_t i = 0; i < 10000; i++) put(&p, i * 100 * US, 100, i);
  uint64_t prev = 0, min_d = UINT64_MAX, max_d = 0;
  for (uint32_t i = 0; i < 10000; i++) {
    rgpu_netem_slot *s = rgpu_netem_pipe_pop(&p, UINT64_MAX - 1);
    assert_non_null(s);
    assert_int_equal(id_of(s), i);
    assert_true(s->due_ns >= prev);
    prev = s->due_ns;
    uint64_t d = s->due_ns - i * 100 * US;
    if (d < min_d) min_d = d;
    if (d > max_d) max_d = d;
    rgpu_netem_pipe_put_slot(&p, s);
  }
  /* Order preservation only ever adds delay, and never past the largest
   * jittered delay. */
  assert_true(min_d >= 15 * MS);
  assert_true(max_d <= 25 * MS);
  assert_true(max_d - min_d > 8 * MS);
  rgpu_netem_pipe_free(&p);
}

static void test_jitter_reorders_when_asked(void **state) {
  (void)state;
  rgpu_netem_dir_config c = base();
  c.delay_ns = 20 * MS;
  c.jitter_ns = 5 * MS;
  c.jitter_dist = RGPU_NETEM_JITTER_NORMAL;
  c.reorder = true;
  rgpu_netem_pipe p;
  init(&p, &c, NULL, 20000);
  size_t n = 20000;
  for (uint32_t i = 0; i < n; i++) put(&p, i * 100 * US, 100, i);
  uint32_t out_of_order = 0, max_id = 0;
  double sum = 0, sum2 = 0;
  uint64_t prev_due = 0;
  for (uint32_t i = 0; i < n; i++) {
    rgpu_netem_slot *s = rgpu_netem_pipe_pop(&p, UINT64_MAX - 1);
    assert_non_null(s);
    assert_true(s->due_ns >= prev_due); /* the heap hands out by due time */
    prev_due = s->due_ns;
    uint32_t id = id_of(s);
    if (id < max_id) out_of_order++;
    if (id > max_id) max_id = id;
    double d = (double)(s->due_ns - (uint64_t)id * 100 * US) / 1e6;
    sum += d;
    sum2 += d * d;
    rgpu_netem_pipe_put_slot(&p, s);
  }
  double mean = sum / n, sd = sqrt(sum2 / n - mean * mean);
  assert_true(out_of_order > n / 4);
  assert_true(fabs(mean - 20.0) < 0.2);
  assert_true(fabs(sd - 5.0) < 0.2);
  rgpu_netem_pipe_free(&p);
}

static void test_outage(void **state) {
  (void)state;
  rgpu_netem_schedule sch;
  memset(&sch, 0, sizeof sch);
  sch.count = 1;
  sch.win[0].start_ns = 100 * MS;
  sch.win[0].dur_ns = 50 * MS;
  rgpu_netem_dir_config c = base();
  c.delay_ns = 10 * MS;
  rgpu_netem_pipe p;
  init(&p, &c, &sch, 100);
  /* Before the epoch the link is always up. */
  assert_false(rgpu_netem_schedule_down(&sch, 1000 * MS));
  atomic_store(&sch.epoch_ns, 1000 * MS);
  assert_false(rgpu_netem_schedule_down(&sch, 1099 * MS));
  assert_true(rgpu_netem_schedule_down(&sch, 1100 * MS));
  assert_true(rgpu_netem_schedule_down(&sch, 1149 * MS));
  assert_false(rgpu_netem_schedule_down(&sch, 1150 * MS));

  assert_true(put(&p, 1080 * MS, 100, 1));   /* due 1090: delivered */
  assert_true(put(&p, 1095 * MS, 100, 2));   /* due 1105: link down then */
  assert_false(put(&p, 1120 * MS, 100, 3));  /* enters while down */
  assert_true(put(&p, 1150 * MS, 100, 4));   /* after: delivered */
  rgpu_netem_slot *s = rgpu_netem_pipe_pop(&p, 1090 * MS);
  assert_non_null(s);
  assert_int_equal(id_of(s), 1);
  rgpu_netem_pipe_put_slot(&p, s);
  assert_null(rgpu_netem_pipe_pop(&p, 1105 * MS));
  s = rgpu_netem_pipe_pop(&p, 1160 * MS);
  assert_non_null(s);
  assert_int_equal(id_of(s), 4);
  rgpu_netem_pipe_put_slot(&p, s);
  assert_int_equal(p.st.dropped_outage, 2);
  rgpu_netem_pipe_free(&p);
}

static void test_slot_limit_and_oversize(void **state) {
  (void)state;
  rgpu_netem_dir_config c = base();
  c.delay_ns = MS;
  rgpu_netem_pipe p;
  init(&p, &c, NULL, 2);
  assert_true(put(&p, 0, 100, 1));
  rgpu_netem_slot *s = rgpu_netem_pipe_get_slot(&p);
  assert_non_null(s);
  assert_null(rgpu_netem_pipe_get_slot(&p));
  s->len = 1501; /* larger than the slot */
  assert_false(rgpu_netem_pipe_submit(&p, s, 0));
  assert_int_equal(p.st.dropped_oversize, 1);
  rgpu_netem_pipe_count_overflow(&p, 100);
  assert_int_equal(p.st.dropped_overflow, 1);
  rgpu_netem_pipe_free(&p);
}

static void test_bad_config(void **state) {
  (void)state;
  char err[128];
  rgpu_netem_pipe p;
  rgpu_netem_dir_config c = base();
  c.loss = 1.5;
  assert_int_equal(rgpu_netem_pipe_init(&p, &c, NULL, 1, 1500, 10, err, sizeof err), -1);
  assert_non_null(strstr(err, "[0, 1]"));
  c = base();
  c.rate_bps = 1e6;
  c.queue_pkts = 0;
  assert_int_equal(rgpu_netem_pipe_init(&p, &c, NULL, 1, 1500, 10, err, sizeof err), -1);
  assert_non_null(strstr(err, "queue"));
  c = base();
  assert_int_equal(rgpu_netem_pipe_init(&p, &c, NULL, 1, 0, 10, err, sizeof err), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_passthrough),
      cmocka_unit_test(test_delay),
      cmocka_unit_test(test_bernoulli),
      cmocka_unit_test(test_gilbert_elliott),
      cmocka_unit_test(test_gilbert_elliott_partial),
      cmocka_unit_test(test_seed_determinism),
      cmocka_unit_test(test_rate_and_droptail),
      cmocka_unit_test(test_rate_throughput),
      cmocka_unit_test(test_queue_bytes),
      cmocka_unit_test(test_jitter_keeps_order),
      cmocka_unit_test(test_jitter_reorders_when_asked),
      cmocka_unit_test(test_outage),
      cmocka_unit_test(test_slot_limit_and_oversize),
      cmocka_unit_test(test_bad_config),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
