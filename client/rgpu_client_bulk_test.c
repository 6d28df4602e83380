/* rgpu_client_bulk: lanes per host thread and awaited confirmations. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rgpu_client_bulk.h"
#include "rgpu_client_internal.h"

/* Claims run under the client lock in the library; here under this one. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t g_bar;
static rgpu_client_lanes g_t;
enum { NTHREADS = RGPU_BULK_MAX_LANES + 3 };
static int g_lane[NTHREADS];

static void *claim_main(void *arg) {
  int i = (int)(intptr_t)arg;
  pthread_mutex_lock(&g_mu);
  g_lane[i] = rgpu_client_lanes_claim(&g_t, pthread_self());
  /* The same thread keeps its lane. */
  if (rgpu_client_lanes_claim(&g_t, pthread_self()) != g_lane[i]) g_lane[i] = -2;
  pthread_mutex_unlock(&g_mu);
  pthread_barrier_wait(&g_bar); /* all alive at once: distinct thread ids */
  return NULL;
}

static void test_claim(void **state) {
  (void)state;
  memset(&g_t, 0, sizeof g_t);
  pthread_barrier_init(&g_bar, NULL, NTHREADS);
  pthread_t th[NTHREADS];
  for (int i = 0; i < NTHREADS; i++)
    assert_int_equal(pthread_create(&th[i], NULL, claim_main, (void *)(intptr_t)i), 0);
  for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&g_bar);
  /* Every lane went to exactly one thread; the threads beyond the cap got
   * none (they copy inline). */
  int seen[RGPU_BULK_MAX_LANES] = {0}, none = 0;
  for (int i = 0; i < NTHREADS; i++) {
    assert_true(g_lane[i] >= -1);
    if (g_lane[i] < 0)
      none++;
    else
      seen[g_lane[i]]++;
  }
  assert_int_equal(none, NTHREADS - RGPU_BULK_MAX_LANES);
  for (int k = 0; k < RGPU_BULK_MAX_LANES; k++) assert_int_equal(seen[k], 1);
}

static void test_cap(void **state) {
  (void)state;
  rgpu_client_lanes t;
  memset(&t, 0, sizeof t);
  /* Fake owners: every lane taken by some other thread. */
  for (int k = 0; k < RGPU_BULK_MAX_LANES; k++) {
    t.lane[k].used = 1;
    memset(&t.lane[k].owner, 0xff - k, sizeof t.lane[k].owner);
  }
  assert_int_equal(rgpu_client_lanes_claim(&t, pthread_self()), -1);
  t.lane[5].used = 0;
  assert_int_equal(rgpu_client_lanes_claim(&t, pthread_self()), 5);
  assert_int_equal(rgpu_client_lanes_claim(&t, pthread_self()), 5);
  assert_true(t.lane[5].conn == NULL && t.lane[5].marker_seq == 0);
}

static void test_note(void **state) {
  (void)state;
  rgpu_client_lanes t;
  memset(&t, 0, sizeof t);
  int k = rgpu_client_lanes_claim(&t, pthread_self());
  assert_true(k >= 0);
  assert_int_equal(rgpu_client_lanes_note(&t, 42, 0), 0); /* nobody awaits it */
  t.lane[k].marker_seq = 42;
  assert_int_equal(rgpu_client_lanes_note(&t, 41, 0), 0);
  assert_int_equal(t.lane[k].marker_seen, 0);
  assert_int_equal(rgpu_client_lanes_note(&t, 42, 700), 1);
  assert_int_equal(t.lane[k].marker_seen, 1);
  assert_int_equal(t.lane[k].marker_status, 700);
  assert_int_equal(rgpu_client_lanes_note(&t, 0, 0), 0);
}

static void test_wanted(void **state) {
  (void)state;
  unsetenv("RGPU_QUIC_STREAMS");
  assert_int_equal(rgpu_client_bulk_wanted("tcp://127.0.0.1:1"), 0);
  assert_int_equal(rgpu_client_bulk_wanted("tls://127.0.0.1:1"), 0);
  assert_int_equal(rgpu_client_bulk_wanted(NULL), 0);
  setenv("RGPU_QUIC_STREAMS", "0", 1);
  assert_int_equal(rgpu_client_bulk_wanted("quic://127.0.0.1:1"), 0);
  setenv("RGPU_QUIC_STREAMS", "1", 1);
  assert_int_equal(rgpu_client_bulk_wanted("quic://127.0.0.1:1"), 1);
  unsetenv("RGPU_QUIC_STREAMS");
}

/* The bug this guards against: "copy inline" used to be the return value 1,
 * which is also CUDA_ERROR_INVALID_VALUE, so a server's error 1 on a lane
 * copy made the caller silently copy again on stream 0.  The copy's status
 * and "how much is left to copy inline" are now separate. */
static void test_dtoh_server_error_is_not_inline(void **state) {
  (void)state;
  enum { N = 64 << 20 };
  const uint32_t invalid_value = 1; /* CUDA_ERROR_INVALID_VALUE */
  size_t done = 12345;
  rgpu_status st = rgpu_client_bulk_dtoh_outcome(0, invalid_value, 0, N, N, &done);
  assert_int_equal(st, 1);      /* reported as the error it is */
  assert_int_equal(done, 0);    /* and nothing is to be copied inline */
  /* Also when the lane broke after the error: the error wins. */
  st = rgpu_client_bulk_dtoh_outcome(0, invalid_value, 1, N / 2, N, &done);
  assert_int_equal(st, 1);
  assert_int_equal(done, 0);
  /* Other CUresults, and connection failures, likewise. */
  assert_int_equal(rgpu_client_bulk_dtoh_outcome(0, 700, 0, N, N, &done), 700);
  assert_int_equal(rgpu_client_bulk_dtoh_outcome(RGPU_CLIENT_EDEAD, 0, 0, 0, N, &done),
                   RGPU_CLIENT_EDEAD);
  assert_int_equal(done, 0);
}

static void test_dtoh_outcomes(void **state) {
  (void)state;
  enum { N = 64 << 20 };
  size_t done = 0;
  /* All bytes came on the lane: success, nothing left. */
  assert_int_equal(rgpu_client_bulk_dtoh_outcome(0, 0, 0, N, N, &done), 0);
  assert_int_equal(done, N);
  /* The lane failed after 3 chunks: success so far, the rest inline. */
  assert_int_equal(rgpu_client_bulk_dtoh_outcome(0, 0, 1, 3u << 22, N, &done), 0);
  assert_int_equal(done, 3u << 22);
  /* A count past the end (the last chunk is short) is clamped. */
  assert_int_equal(rgpu_client_bulk_dtoh_outcome(0, 0, 1, N + 100, N, &done), 0);
  assert_int_equal(done, N);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_claim),
      cmocka_unit_test(test_cap),
      cmocka_unit_test(test_note),
      cmocka_unit_test(test_wanted),
      cmocka_unit_test(test_dtoh_server_error_is_not_inline),
      cmocka_unit_test(test_dtoh_outcomes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
