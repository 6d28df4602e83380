/* Fork safety for the transport's background threads.
 *
 * The listener forks one worker per session while its TLS and QUIC relay
 * threads run.  fork() copies only the forking thread: a lock some relay
 * thread held at that instant (inside malloc of a sanitizer runtime, inside
 * GnuTLS, ...) stays locked forever in the child, and the worker hangs on its
 * first allocation.  The guard makes every fork of the process wait until
 * each background thread is parked in poll(), holding nothing.
 *
 * A background thread calls rgpu_fork_guard_enter() when it starts,
 * rgpu_fork_guard_leave() just before it blocks in poll() and
 * rgpu_fork_guard_enter() again after, and rgpu_fork_guard_leave() before it
 * exits.  Nothing else is needed: the guard installs its own pthread_atfork
 * handlers, so fork() in the listener (or in a user's program that loads the
 * client library) is covered without changes there. */
#ifndef RGPU_FORK_GUARD_H
#define RGPU_FORK_GUARD_H

void rgpu_fork_guard_enter(void);
void rgpu_fork_guard_leave(void);

#endif
