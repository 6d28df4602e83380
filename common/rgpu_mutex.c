/* rgpu_mutex: see rgpu_mutex.h. */
#include "rgpu_mutex.h"

/* Its address identifies the thread: unique among live threads, never 0,
 * and cheaper than pthread_self() compared with pthread_equal(). */
static _Thread_local char tl_self_token;

uintptr_t rgpu_mutex_self(void) { return (uintptr_t)&tl_self_token; }

/* Maintained only by the debug lock/unlock (a condition wait leaves it
 * alone: the mutex is the caller's again when the wait returns). */
static _Thread_local int tl_held_count;

int rgpu_mutex_held_count(void) { return tl_held_count; }
void rgpu_mutex_count_acquired(void) { tl_held_count++; }
void rgpu_mutex_count_released(void) { tl_held_count--; }

void rgpu_mutex_init(rgpu_mutex *mu) {
  pthread_mutex_init(&mu->m, NULL);
  atomic_init(&mu->owner, 0);
}

void rgpu_mutex_destroy(rgpu_mutex *mu) {
  assert(rgpu_mutex_not_held(mu) && "destroying an rgpu_mutex this thread holds");
  pthread_mutex_destroy(&mu->m);
}
