/* rgpu_mutex: lock/unlock, the owner predicates across threads and
 * condition waits (debug builds), and that misuse aborts instead of
 * deadlocking.  In a release build (NDEBUG) the predicates answer 1 and
 * only the locking itself is checked. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rgpu_mutex.h"

static rgpu_mutex g_static = RGPU_MUTEX_INITIALIZER;

typedef struct {
  rgpu_mutex *mu;
  int held_seen;
  int locked_ok;
} probe;

#ifndef NDEBUG
/* Another thread never sees a mutex held by the main thread as its own. */
static void *probe_other(void *arg) {
  probe *p = arg;
  p->held_seen = rgpu_mutex_held(p->mu) || rgpu_mutex_held_count() != 0;
  return NULL;
}
#endif

static void test_static_and_dynamic(void **state) {
  (void)state;
  rgpu_mutex dyn;
  rgpu_mutex_init(&dyn);
  rgpu_mutex *both[2] = {&g_static, &dyn};
  for (int i = 0; i < 2; i++) {
    rgpu_mutex *mu = both[i];
    assert_true(rgpu_mutex_not_held(mu) || rgpu_mutex_held(mu)); /* release: both 1 */
#ifndef NDEBUG
    assert_false(rgpu_mutex_held(mu));
#endif
    rgpu_mutex_lock(mu);
    assert_true(rgpu_mutex_held(mu));
#ifndef NDEBUG
    assert_int_equal(rgpu_mutex_held_count(), 1);
    assert_false(rgpu_mutex_not_held(mu));
    probe p = {.mu = mu, .held_seen = -1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, probe_other, &p), 0);
    pthread_join(t, NULL);
    assert_int_equal(p.held_seen, 0);
#endif
    rgpu_mutex_unlock(mu);
    assert_true(rgpu_mutex_not_held(mu));
    assert_int_equal(rgpu_mutex_held_count(), 0);
  }
  rgpu_mutex_destroy(&dyn);
}

/* trylock: busy while another thread holds the mutex, and when it takes
 * the mutex the caller owns it like after rgpu_mutex_lock. */
static rgpu_mutex g_try_lock = RGPU_MUTEX_INITIALIZER;

static void *try_other(void *arg) {
  int *rc = arg;
  *rc = rgpu_mutex_trylock(&g_try_lock);
  if (*rc == 0) rgpu_mutex_unlock(&g_try_lock);
  return NULL;
}

static void test_trylock(void **state) {
  (void)state;
  rgpu_mutex_lock(&g_try_lock);
  int other = -1;
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, try_other, &other), 0);
  pthread_join(t, NULL);
  assert_int_equal(other, EBUSY);
  rgpu_mutex_unlock(&g_try_lock);

  assert_int_equal(rgpu_mutex_trylock(&g_try_lock), 0);
  assert_true(rgpu_mutex_held(&g_try_lock));
#ifndef NDEBUG
  assert_int_equal(rgpu_mutex_held_count(), 1);
#endif
  rgpu_mutex_unlock(&g_try_lock);
  assert_int_equal(rgpu_mutex_held_count(), 0);
}

/* Mutual exclusion still holds: N threads each add to a counter under the
 * lock. */
static rgpu_mutex g_count_lock = RGPU_MUTEX_INITIALIZER;
static long g_count;

static void *adder(void *arg) {
  (void)arg;
  for (int i = 0; i < 100000; i++) {
    rgpu_mutex_lock(&g_count_lock);
    assert(rgpu_mutex_held(&g_count_lock));
    g_count++;
    rgpu_mutex_unlock(&g_count_lock);
  }
  return NULL;
}

static void test_exclusion(void **state) {
  (void)state;
  pthread_t t[4];
  for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&t[i], NULL, adder, NULL), 0);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  assert_int_equal(g_count, 400000);
}

/* While a thread waits on a condition the mutex is not its own, and the
 * thread that signals can hold it; after the wait the waiter owns it again. */
static rgpu_mutex g_cv_lock = RGPU_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_flag;
static int g_signaller_held = -1;

static void *signaller(void *arg) {
  (void)arg;
  rgpu_mutex_lock(&g_cv_lock);
  g_signaller_held = rgpu_mutex_held(&g_cv_lock);
  g_flag = 1;
  pthread_cond_broadcast(&g_cv);
  rgpu_mutex_unlock(&g_cv_lock);
  return NULL;
}

static void test_cond_wait_moves_owner(void **state) {
  (void)state;
  rgpu_mutex_lock(&g_cv_lock);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, signaller, NULL), 0);
  while (!g_flag) rgpu_mutex_cond_wait(&g_cv, &g_cv_lock);
  assert_true(rgpu_mutex_held(&g_cv_lock));
  rgpu_mutex_unlock(&g_cv_lock);
  pthread_join(t, NULL);
  assert_int_equal(g_signaller_held, 1);

  /* A timed wait that times out gives the mutex back to the caller too. */
  rgpu_mutex_lock(&g_cv_lock);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += 1000000;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  rgpu_mutex_cond_timedwait(&g_cv, &g_cv_lock, &ts);
  assert_true(rgpu_mutex_held(&g_cv_lock));
  rgpu_mutex_unlock(&g_cv_lock);
}

#ifndef NDEBUG
/* Runs fn in a child and returns how it ended (the wait status). */
static int in_child(void (*fn)(void)) {
  pid_t pid = fork();
  if (pid == 0) {
    alarm(5); /* a deadlock ends as SIGALRM, not as a hung test */
    fn();
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return st;
}

static void lock_twice(void) {
  rgpu_mutex mu = RGPU_MUTEX_INITIALIZER;
  rgpu_mutex_lock(&mu);
  rgpu_mutex_lock(&mu);
}

static void unlock_unheld(void) {
  rgpu_mutex mu = RGPU_MUTEX_INITIALIZER;
  rgpu_mutex_unlock(&mu);
}
#endif

static void test_misuse_aborts(void **state) {
  (void)state;
#ifdef NDEBUG
  skip();
#else
  int st = in_child(lock_twice);
  assert_true(WIFSIGNALED(st));
  assert_int_equal(WTERMSIG(st), SIGABRT);
  st = in_child(unlock_unheld);
  assert_true(WIFSIGNALED(st));
  assert_int_equal(WTERMSIG(st), SIGABRT);
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_static_and_dynamic),
      cmocka_unit_test(test_trylock),
      cmocka_unit_test(test_exclusion),
      cmocka_unit_test(test_cond_wait_moves_owner),
      cmocka_unit_test(test_misuse_aborts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
