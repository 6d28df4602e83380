/* rgpu_mutex: a pthread mutex that, in debug builds, knows its owner.
 *
 * Lock invariants ("g_arena_lock is held here", "no lock is held across
 * this round trip") are written as assertions, SQLite style:
 *
 *     assert(rgpu_mutex_held(&g_arena_lock));
 *     assert(rgpu_mutex_not_held(&g_arena_lock));
 *     assert(rgpu_mutex_held_count() == 0);   (before a round trip)
 *
 * Without NDEBUG (the Debug/ASan build) lock and unlock record the owning
 * thread, so the assertions check something; locking a mutex the thread
 * already holds and unlocking one it does not hold abort at once instead of
 * deadlocking or corrupting it.  With NDEBUG (the default RelWithDebInfo
 * build) the calls are the bare pthread calls, inlined, and both predicates
 * answer 1 ("cannot tell"): they are meant for assert() only, which is
 * compiled out there.
 *
 * The layout does not depend on NDEBUG (the owner word is always there,
 * just not maintained in release): a translation unit built with another
 * NDEBUG than the library it links must not see a different struct. */
#ifndef RGPU_MUTEX_H
#define RGPU_MUTEX_H

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

typedef struct {
  pthread_mutex_t m;
  /* rgpu_mutex_self() of the holder, 0 when free (debug builds only). */
  _Atomic uintptr_t owner;
} rgpu_mutex;

#define RGPU_MUTEX_INITIALIZER {PTHREAD_MUTEX_INITIALIZER, 0}

/* A nonzero token of the calling thread, the same in every translation
 * unit (the address of a thread-local object in rgpu_mutex.c). */
uintptr_t rgpu_mutex_self(void);

/* How many rgpu_mutexes the calling thread holds (debug builds; 0 with
 * NDEBUG), for "no lock is held across this round trip". */
int rgpu_mutex_held_count(void);
/* Bookkeeping of the debug lock/unlock (rgpu_mutex.c). */
void rgpu_mutex_count_acquired(void);
void rgpu_mutex_count_released(void);

void rgpu_mutex_init(rgpu_mutex *mu);
void rgpu_mutex_destroy(rgpu_mutex *mu);

#ifdef NDEBUG

static inline void rgpu_mutex_lock(rgpu_mutex *mu) { pthread_mutex_lock(&mu->m); }
static inline void rgpu_mutex_unlock(rgpu_mutex *mu) { pthread_mutex_unlock(&mu->m); }
static inline int rgpu_mutex_trylock(rgpu_mutex *mu) { return pthread_mutex_trylock(&mu->m); }
static inline int rgpu_mutex_held(const rgpu_mutex *mu) {
  (void)mu;
  return 1;
}
static inline int rgpu_mutex_not_held(const rgpu_mutex *mu) {
  (void)mu;
  return 1;
}
static inline int rgpu_mutex_cond_wait(pthread_cond_t *cv, rgpu_mutex *mu) {
  return pthread_cond_wait(cv, &mu->m);
}
static inline int rgpu_mutex_cond_timedwait(pthread_cond_t *cv, rgpu_mutex *mu,
                                            const struct timespec *deadline) {
  return pthread_cond_timedwait(cv, &mu->m, deadline);
}

#else /* !NDEBUG: owner tracking */

/* Relaxed is enough: only the calling thread ever stores its own token,
 * so it reads back what it stored itself or something else. */
static inline int rgpu_mutex_held(const rgpu_mutex *mu) {
  return atomic_load_explicit((_Atomic uintptr_t *)&mu->owner, memory_order_relaxed) ==
         rgpu_mutex_self();
}
static inline int rgpu_mutex_not_held(const rgpu_mutex *mu) { return !rgpu_mutex_held(mu); }

static inline void rgpu_mutex_lock(rgpu_mutex *mu) {
  assert(rgpu_mutex_not_held(mu) && "rgpu_mutex is not recursive");
  pthread_mutex_lock(&mu->m);
  atomic_store_explicit(&mu->owner, rgpu_mutex_self(), memory_order_relaxed);
  rgpu_mutex_count_acquired();
}
/* 0 when taken, else pthread_mutex_trylock's error (EBUSY: another thread
 * holds it).  Trying a mutex the thread holds itself is a bug, as with
 * rgpu_mutex_lock. */
static inline int rgpu_mutex_trylock(rgpu_mutex *mu) {
  assert(rgpu_mutex_not_held(mu) && "rgpu_mutex is not recursive");
  int rc = pthread_mutex_trylock(&mu->m);
  if (rc == 0) {
    atomic_store_explicit(&mu->owner, rgpu_mutex_self(), memory_order_relaxed);
    rgpu_mutex_count_acquired();
  }
  return rc;
}
static inline void rgpu_mutex_unlock(rgpu_mutex *mu) {
  assert(rgpu_mutex_held(mu) && "unlocking an rgpu_mutex this thread does not hold");
  rgpu_mutex_count_released();
  atomic_store_explicit(&mu->owner, 0, memory_order_relaxed);
  pthread_mutex_unlock(&mu->m);
}
/* A condition wait gives the mutex away and takes it back: the owner word
 * follows. */
static inline int rgpu_mutex_cond_wait(pthread_cond_t *cv, rgpu_mutex *mu) {
  assert(rgpu_mutex_held(mu));
  atomic_store_explicit(&mu->owner, 0, memory_order_relaxed);
  int rc = pthread_cond_wait(cv, &mu->m);
  atomic_store_explicit(&mu->owner, rgpu_mutex_self(), memory_order_relaxed);
  return rc;
}
static inline int rgpu_mutex_cond_timedwait(pthread_cond_t *cv, rgpu_mutex *mu,
                                            const struct timespec *deadline) {
  assert(rgpu_mutex_held(mu));
  atomic_store_explicit(&mu->owner, 0, memory_order_relaxed);
  int rc = pthread_cond_timedwait(cv, &mu->m, deadline);
  atomic_store_explicit(&mu->owner, rgpu_mutex_self(), memory_order_relaxed);
  return rc;
}

#endif

#endif
