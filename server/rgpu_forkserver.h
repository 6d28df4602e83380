/* rgpu_forkserver: forks rgpu-server's session workers from a process that
 * has only ever had one thread.
 *
 * fork() copies only the calling thread.  The listener runs TLS and QUIC
 * relay threads and the metrics HTTP thread; a lock one of them held at the
 * instant of a fork (inside malloc of a sanitizer runtime, inside GnuTLS)
 * stays held forever in the child, which then hangs on its first
 * allocation.  So the listener never forks a worker itself: main() starts
 * the fork server first, before anything can create a thread, and the fork
 * server stays single-threaded for its whole life.  For every session the
 * listener sends it, over a SOCK_SEQPACKET socketpair, an opaque argument
 * (the worker config), up to RGPU_FORKSERVER_MAX_FDS extra descriptors (the
 * worker's control channel, the metrics slots) and the accepted connection
 * (SCM_RIGHTS, rgpu_conn_send); the fork server forks, runs the child
 * function given at start in the child, and answers with the pid.  It is
 * the workers' parent, so it reaps them and reports each exit status back
 * on the same socket; the listener folds metrics, counts sessions and
 * drains from those reports as it did from waitpid().
 *
 * When the listener closes its end (or exits) the fork server exits at
 * once; running workers live on until their sessions end.  When the fork
 * server dies, every call here returns RGPU_FORKSERVER_EDEAD and
 * rgpu_forkserver_next_exit() returns -1, so the listener can tell and stop;
 * nothing blocks on a dead fork server.
 *
 * The listener side is not thread-safe: one thread (the accept loop) owns
 * the handle. */
#ifndef RGPU_FORKSERVER_H
#define RGPU_FORKSERVER_H

#include <stddef.h>
#include <sys/types.h>

#include "rgpu_transport.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RGPU_FORKSERVER_MAX_FDS 4
#define RGPU_FORKSERVER_MAX_ARG 65536

enum {
  RGPU_FORKSERVER_OK = 0,
  RGPU_FORKSERVER_EFORK = -1, /* fork (or receiving the session) failed there; it lives on */
  RGPU_FORKSERVER_EDEAD = -2, /* the fork server is gone (or stopped answering) */
  RGPU_FORKSERVER_EINVAL = -3
};

typedef struct rgpu_forkserver rgpu_forkserver;

/* Runs in each forked child: arg/len is a copy of what the listener passed
 * to rgpu_forkserver_spawn, c the connection, fds[0..nfds) its extra
 * descriptors (-1 where it passed -1).  The child owns c and the fds.  Its
 * return value is the child's exit status (the child _exit()s with it).
 * The child starts with the signal mask and dispositions of the process
 * that called rgpu_forkserver_start, except SIGTERM, SIGINT and SIGPIPE,
 * which are ignored (the listener owns shutdown; see rgpu_listener.h). */
typedef int (*rgpu_forkserver_child_fn)(const void *arg, size_t len, rgpu_conn *c, const int *fds,
                                        int nfds);

/* Forks the fork server.  Call it while the process has one thread.
 * Returns 0 and *out, or -1 with a sentence in err. */
int rgpu_forkserver_start(rgpu_forkserver_child_fn child, rgpu_forkserver **out, char *err,
                          size_t errlen);

/* The fork server's pid (a child of the caller of rgpu_forkserver_start). */
pid_t rgpu_forkserver_pid(const rgpu_forkserver *fs);
/* Polls readable when an exit report is waiting or the fork server is gone
 * (then rgpu_forkserver_next_exit says which).  -1 after it died. */
int rgpu_forkserver_poll_fd(const rgpu_forkserver *fs);

/* Forks a child that runs the child function on (arg, c, fds).  c must have
 * a raw fd (every accepted conn has); it and the fds stay open here (close
 * them after).  Waits for the answer (a few hundred microseconds; at most
 * 10 s for a wedged fork server, which is then treated as dead); exit
 * reports read meanwhile are kept for rgpu_forkserver_next_exit.  Returns 0
 * and *pid, RGPU_FORKSERVER_EFORK or RGPU_FORKSERVER_EDEAD (a sentence in
 * err either way). */
int rgpu_forkserver_spawn(rgpu_forkserver *fs, const void *arg, size_t len, const rgpu_conn *c,
                          const int *fds, int nfds, pid_t *pid, char *err, size_t errlen);

/* One exit of a child, oldest first, without blocking: returns 1 and
 * *pid, *wait_status (as from waitpid), 0 when none is waiting, -1 when the
 * fork server is gone (after every report it sent has been returned). */
int rgpu_forkserver_next_exit(rgpu_forkserver *fs, pid_t *pid, int *wait_status);

/* Sends sig to child pid if it is still a live child of the fork server
 * (never to a pid it has already reaped, so a recycled pid is safe).  0, or
 * RGPU_FORKSERVER_EDEAD. */
int rgpu_forkserver_kill(rgpu_forkserver *fs, pid_t pid, int sig);

/* 1 while the fork server answers. */
int rgpu_forkserver_alive(const rgpu_forkserver *fs);
/* Why it is gone ("killed by signal 9", "exited with status 1", "stopped
 * answering"), or "" while alive. */
const char *rgpu_forkserver_death(const rgpu_forkserver *fs);

/* Closes the channel (the fork server exits; workers live on), reaps the
 * fork server (SIGKILL after 2 s) and frees fs. */
void rgpu_forkserver_stop(rgpu_forkserver *fs);

#ifdef __cplusplus
}
#endif
#endif
