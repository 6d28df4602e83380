/* rgpu_signal: installing a signal handler the way the server's processes
 * do it (the listener, the fork server, the worker a fork server forks).
 *
 * sigaction rather than signal(): signal()'s flags differ between C
 * libraries, and each caller must say whether a system call the signal
 * interrupts restarts (SA_RESTART) or fails with EINTR.  No signal is
 * blocked while the handler runs beyond the one being handled. */
#ifndef RGPU_SIGNAL_H
#define RGPU_SIGNAL_H

#include <signal.h>
#include <string.h>

static inline void rgpu_signal_handle(int sig, void (*handler)(int), int flags) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = flags;
  sigaction(sig, &sa, NULL);
}

#endif
