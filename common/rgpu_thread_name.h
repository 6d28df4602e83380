/* rgpu_thread_name: names the calling thread (15 characters at most), so
 * that `top -H`, `ps -L` and /proc/PID/task/TID/comm tell rgpu's threads
 * apart: in a client program they sit beside the program's own threads,
 * and the per-thread CPU time of a transfer says which stage is the
 * bottleneck (the QUIC I/O thread, the listener's relay, the worker's job
 * threads...).  Header only: prctl names the caller on Linux. */
#ifndef RGPU_THREAD_NAME_H
#define RGPU_THREAD_NAME_H

#include <sys/prctl.h>

static inline void rgpu_thread_name(const char *name) {
  prctl(PR_SET_NAME, name, 0, 0, 0);
}

#endif
