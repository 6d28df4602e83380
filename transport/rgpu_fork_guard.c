#define _GNU_SOURCE
#include "rgpu_fork_guard.h"

#include <pthread.h>

/* Readers are the background threads while they work; the writer is fork()'s
 * prepare handler.  Writer preference keeps a busy relay from starving a fork:
 * once a fork waits, a thread coming back from poll() waits for it too. */
static pthread_rwlock_t guard;
static pthread_once_t guard_once = PTHREAD_ONCE_INIT;

static void guard_before_fork(void) { pthread_rwlock_wrlock(&guard); }
static void guard_after_fork_parent(void) { pthread_rwlock_unlock(&guard); }
/* The child's only thread is the one that forked, so it owns the write lock
 * and may release it; the readers do not exist there. */
static void guard_after_fork_child(void) { pthread_rwlock_unlock(&guard); }

static void guard_init(void) {
  pthread_rwlockattr_t a;
  pthread_rwlockattr_init(&a);
  pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  pthread_rwlock_init(&guard, &a);
  pthread_rwlockattr_destroy(&a);
  pthread_atfork(guard_before_fork, guard_after_fork_parent, guard_after_fork_child);
}

void rgpu_fork_guard_enter(void) {
  pthread_once(&guard_once, guard_init);
  pthread_rwlock_rdlock(&guard);
}

void rgpu_fork_guard_leave(void) { pthread_rwlock_unlock(&guard); }
