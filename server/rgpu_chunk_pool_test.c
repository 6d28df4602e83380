/* rgpu_chunk_pool: reuse, pin once, fallbacks, threads. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rgpu_chunk_pool.h"

typedef struct {
  int pins, unpins, fail_pin;
  pthread_mutex_t mu;
} pin_log;

static int fake_pin(void *ctx, void *p, size_t n) {
  pin_log *l = ctx;
  (void)p;
  assert_true(n > 0);
  pthread_mutex_lock(&l->mu);
  l->pins++;
  int fail = l->fail_pin;
  pthread_mutex_unlock(&l->mu);
  return fail ? -1 : 0;
}

static void fake_unpin(void *ctx, void *p) {
  pin_log *l = ctx;
  (void)p;
  pthread_mutex_lock(&l->mu);
  l->unpins++;
  pthread_mutex_unlock(&l->mu);
}

static void test_reuse_pins_once(void **state) {
  (void)state;
  pin_log l = {0, 0, 0, PTHREAD_MUTEX_INITIALIZER};
  rgpu_chunk_pool_config cfg = {.chunk_bytes = 1 << 16, .max_buffers = 4, .pin = fake_pin,
                                .unpin = fake_unpin, .ctx = &l};
  rgpu_chunk_pool *p = rgpu_chunk_pool_new(&cfg);
  assert_non_null(p);
  int pinned = 0;
  void *a = rgpu_chunk_pool_get(p, 1000, &pinned);
  assert_non_null(a);
  assert_true(pinned);
  assert_int_equal((uintptr_t)a % 4096, 0);
  memset(a, 0xab, 1 << 16); /* the whole chunk is usable */
  rgpu_chunk_pool_put(p, a);
  for (int i = 0; i < 100; i++) {
    void *b = rgpu_chunk_pool_get(p, 1 << 16, &pinned);
    assert_ptr_equal(b, a); /* the same buffer, not a new one */
    assert_true(pinned);
    rgpu_chunk_pool_put(p, b);
  }
  assert_int_equal(l.pins, 1);
  rgpu_chunk_pool_stats st;
  rgpu_chunk_pool_get_stats(p, &st);
  assert_int_equal(st.buffers, 1);
  assert_int_equal(st.pinned, 1);
  assert_int_equal(st.cached, 1);
  assert_int_equal(st.gets, 101);
  assert_int_equal(st.reuses, 100);
  assert_int_equal(st.fallbacks, 0);
  rgpu_chunk_pool_free(p);
  assert_int_equal(l.unpins, 1);
}

static void test_fallbacks(void **state) {
  (void)state;
  pin_log l = {0, 0, 0, PTHREAD_MUTEX_INITIALIZER};
  rgpu_chunk_pool_config cfg = {.chunk_bytes = 4096, .max_buffers = 2, .pin = fake_pin,
                                .unpin = fake_unpin, .ctx = &l};
  rgpu_chunk_pool *p = rgpu_chunk_pool_new(&cfg);
  int pinned = 1;
  /* Larger than a chunk: plain memory, put() frees it. */
  void *big = rgpu_chunk_pool_get(p, 8192, &pinned);
  assert_non_null(big);
  assert_false(pinned);
  memset(big, 1, 8192);
  rgpu_chunk_pool_put(p, big);
  /* All pooled buffers in flight: a plain one, the caller never waits. */
  void *a = rgpu_chunk_pool_get(p, 10, NULL);
  void *b = rgpu_chunk_pool_get(p, 10, NULL);
  void *c = rgpu_chunk_pool_get(p, 10, &pinned);
  assert_non_null(a);
  assert_non_null(b);
  assert_non_null(c);
  assert_false(pinned);
  assert_true(a != b && b != c && a != c);
  rgpu_chunk_pool_put(p, c);
  rgpu_chunk_pool_put(p, b);
  rgpu_chunk_pool_put(p, a);
  rgpu_chunk_pool_put(p, NULL);
  rgpu_chunk_pool_stats st;
  rgpu_chunk_pool_get_stats(p, &st);
  assert_int_equal(st.buffers, 2);
  assert_int_equal(st.fallbacks, 2);
  assert_int_equal(st.cached, 2);
  rgpu_chunk_pool_free(p);
  assert_int_equal(l.pins, 2);
  assert_int_equal(l.unpins, 2);
}

static void test_pin_failure_and_no_driver(void **state) {
  (void)state;
  pin_log l = {0, 0, 1, PTHREAD_MUTEX_INITIALIZER};
  rgpu_chunk_pool_config cfg = {.chunk_bytes = 4096, .pin = fake_pin, .unpin = fake_unpin,
                                .ctx = &l};
  rgpu_chunk_pool *p = rgpu_chunk_pool_new(&cfg);
  int pinned = 1;
  void *a = rgpu_chunk_pool_get(p, 100, &pinned);
  assert_non_null(a);
  assert_false(pinned); /* still a usable buffer, only pageable */
  rgpu_chunk_pool_put(p, a);
  assert_ptr_equal(rgpu_chunk_pool_get(p, 100, &pinned), a);
  assert_false(pinned);
  rgpu_chunk_pool_put(p, a);
  rgpu_chunk_pool_free(p);
  assert_int_equal(l.pins, 1); /* not retried per use */
  assert_int_equal(l.unpins, 0);
  /* Defaults and no callbacks at all. */
  p = rgpu_chunk_pool_new(NULL);
  assert_non_null(p);
  a = rgpu_chunk_pool_get(p, 4u << 20, &pinned);
  assert_non_null(a);
  assert_false(pinned);
  rgpu_chunk_pool_put(p, a);
  rgpu_chunk_pool_free(p);
}

typedef struct {
  rgpu_chunk_pool *p;
  int id;
} thr_arg;

static void *hammer(void *arg) {
  thr_arg *t = arg;
  for (int i = 0; i < 2000; i++) {
    size_t n = (size_t)(i % 7 + 1) * 512;
    unsigned char *b = rgpu_chunk_pool_get(t->p, n, NULL);
    if (!b) return (void *)1;
    memset(b, t->id, n);
    for (size_t k = 0; k < n; k += 511)
      if (b[k] != (unsigned char)t->id) return (void *)1; /* shared with another thread */
    rgpu_chunk_pool_put(t->p, b);
  }
  return NULL;
}

/* owns() tells pooled buffers (and their pin state) from fallbacks: the
 * worker uses it to skip pinning a frame read into pooled memory and to
 * route a released buffer to the pool it came from. */
static void test_owns(void **state) {
  (void)state;
  pin_log l = {0, 0, 0, PTHREAD_MUTEX_INITIALIZER};
  rgpu_chunk_pool_config cfg = {.chunk_bytes = 4096, .max_buffers = 1, .pin = fake_pin,
                                .unpin = fake_unpin, .ctx = &l};
  rgpu_chunk_pool *p = rgpu_chunk_pool_new(&cfg);
  assert_non_null(p);
  void *a = rgpu_chunk_pool_get(p, 100, NULL);
  void *b = rgpu_chunk_pool_get(p, 100, NULL); /* exhausted: a fallback */
  int pinned = 0;
  assert_int_equal(rgpu_chunk_pool_owns(p, a, &pinned), 1);
  assert_int_equal(pinned, 1);
  assert_int_equal(rgpu_chunk_pool_owns(p, b, NULL), 0);
  assert_int_equal(rgpu_chunk_pool_owns(p, NULL, NULL), 0);
  rgpu_chunk_pool_put(p, b);
  rgpu_chunk_pool_put(p, a);
  assert_int_equal(rgpu_chunk_pool_owns(p, a, NULL), 1); /* cached: still the pool's */
  rgpu_chunk_pool_free(p);
  assert_int_equal(l.unpins, 1);
}

static int g_grow_ok = 1;
static int grow_gate(void *ctx) {
  (void)ctx;
  return g_grow_ok;
}

/* Preallocated buffers are one region pinned with one call; with growth
 * closed, a pool that is out of cached buffers falls back instead of
 * pinning (the worker closes it once host callbacks exist). */
static void test_prealloc_and_gate(void **state) {
  (void)state;
  pin_log l = {0, 0, 0, PTHREAD_MUTEX_INITIALIZER};
  rgpu_chunk_pool_config cfg = {.chunk_bytes = 4096, .max_buffers = 8, .pin = fake_pin,
                                .unpin = fake_unpin, .ctx = &l, .prealloc = 3,
                                .may_grow = grow_gate};
  g_grow_ok = 0;
  rgpu_chunk_pool *p = rgpu_chunk_pool_new(&cfg);
  assert_non_null(p);
  assert_int_equal(l.pins, 1); /* one call for the region */
  void *b[4];
  int pinned = 0;
  for (int i = 0; i < 3; i++) {
    b[i] = rgpu_chunk_pool_get(p, 100, &pinned);
    assert_non_null(b[i]);
    assert_int_equal(pinned, 1);
    assert_int_equal(rgpu_chunk_pool_owns(p, b[i], NULL), 1);
  }
  b[3] = rgpu_chunk_pool_get(p, 100, &pinned); /* gate closed: a fallback */
  assert_int_equal(pinned, 0);
  assert_int_equal(rgpu_chunk_pool_owns(p, b[3], NULL), 0);
  assert_int_equal(l.pins, 1);
  rgpu_chunk_pool_put(p, b[3]);
  g_grow_ok = 1;
  b[3] = rgpu_chunk_pool_get(p, 100, &pinned); /* gate open: a new pinned buffer */
  assert_int_equal(pinned, 1);
  assert_int_equal(l.pins, 2);
  for (int i = 0; i < 4; i++) rgpu_chunk_pool_put(p, b[i]);
  rgpu_chunk_pool_stats st;
  rgpu_chunk_pool_get_stats(p, &st);
  assert_int_equal(st.buffers, 4);
  assert_int_equal(st.cached, 4);
  rgpu_chunk_pool_free(p);
  assert_int_equal(l.unpins, 2); /* the region once, the grown buffer once */
}

static void test_threads(void **state) {
  (void)state;
  pin_log l = {0, 0, 0, PTHREAD_MUTEX_INITIALIZER};
  rgpu_chunk_pool_config cfg = {.chunk_bytes = 4096, .max_buffers = 3, .pin = fake_pin,
                                .unpin = fake_unpin, .ctx = &l};
  rgpu_chunk_pool *p = rgpu_chunk_pool_new(&cfg);
  pthread_t th[6];
  thr_arg args[6];
  for (int i = 0; i < 6; i++) {
    args[i] = (thr_arg){p, i + 1};
    pthread_create(&th[i], NULL, hammer, &args[i]);
  }
  for (int i = 0; i < 6; i++) {
    void *r;
    pthread_join(th[i], &r);
    assert_null(r);
  }
  rgpu_chunk_pool_stats st;
  rgpu_chunk_pool_get_stats(p, &st);
  assert_true(st.buffers <= 3);
  assert_int_equal(st.cached, st.buffers);
  assert_int_equal(st.gets, 6 * 2000);
  rgpu_chunk_pool_free(p);
  assert_int_equal(l.pins, l.unpins);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reuse_pins_once),
      cmocka_unit_test(test_fallbacks),
      cmocka_unit_test(test_pin_failure_and_no_driver),
      cmocka_unit_test(test_owns),
      cmocka_unit_test(test_prealloc_and_gate),
      cmocka_unit_test(test_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
