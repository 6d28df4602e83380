/* The fork server of rgpu-server (see rgpu_forkserver.h): a single-threaded
 * process that forks the session workers, and the listener's handle on it. */
#define _GNU_SOURCE
#include "rgpu_forkserver.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rgpu_clock.h"
#include "rgpu_log.h"
#include "rgpu_signal.h"

/* One datagram on the channel; SPAWN carries arg_len argument bytes after
 * the header and the descriptors named by fd_mask (SCM_RIGHTS), and is
 * followed by an rgpu_conn_send datagram with the connection. */
enum {
  FS_SPAWN = 1,  /* listener -> fork server */
  FS_KILL = 2,   /* listener -> fork server: pid, value = signal */
  FS_FORKED = 3, /* fork server -> listener: seq, pid (<= 0: -errno) */
  FS_EXITED = 4  /* fork server -> listener: pid, value = wait status */
};

typedef struct {
  uint32_t type;
  uint32_t seq;
  int32_t pid;
  int32_t value;
  uint32_t arg_len;
  uint32_t fd_mask;
} fs_msg;

typedef struct {
  pid_t pid;
  int status;
} fs_exit;

struct rgpu_forkserver {
  int sock;  /* our end of the channel; -1 once the fork server is gone */
  pid_t pid;
  int reaped; /* the fork server itself has been waited for */
  uint32_t seq;
  fs_exit *exits; /* reports read while waiting for a FORKED answer */
  size_t nexit, exit_head, exit_cap;
  char death[96];
};

/* ---- the fork server process ------------------------------------------- */

/* The process name the fork server was started with: `ps` shows the fork
 * server as "rgpu-forksrv", its children get this one back. */
static char start_comm[17];

static void on_sigchld(int sig) { (void)sig; /* only interrupts ppoll */ }

static int send_msg(int sock, const fs_msg *m) {
  for (;;) {
    ssize_t w = send(sock, m, sizeof *m, MSG_NOSIGNAL);
    if (w == (ssize_t)sizeof *m) return 0;
    if (w < 0 && errno == EINTR) continue;
    return -1;
  }
}

typedef struct {
  pid_t *pids;
  size_t n, cap;
} pid_set;

static int pid_set_has(const pid_set *s, pid_t pid) {
  for (size_t i = 0; i < s->n; i++)
    if (s->pids[i] == pid) return 1;
  return 0;
}

static void pid_set_remove(pid_set *s, pid_t pid) {
  for (size_t i = 0; i < s->n; i++)
    if (s->pids[i] == pid) {
      s->pids[i] = s->pids[--s->n];
      return;
    }
}

static int pid_set_add(pid_set *s, pid_t pid) {
  if (s->n == s->cap) {
    size_t nc = s->cap ? s->cap * 2 : 64;
    pid_t *np = realloc(s->pids, nc * sizeof *np);
    if (!np) return -1;
    s->pids = np;
    s->cap = nc;
  }
  s->pids[s->n++] = pid;
  return 0;
}

/* Reads one SPAWN (its header is in buf already, r bytes with control
 * data in mh), receives the connection behind it, forks.  Returns the pid
 * or -errno for the FORKED answer. */
static pid_t do_spawn(int sock, rgpu_forkserver_child_fn child, const sigset_t *child_mask,
                      unsigned char *buf, ssize_t r, struct msghdr *mh, pid_set *kids) {
  int fds[RGPU_FORKSERVER_MAX_FDS];
  for (int i = 0; i < RGPU_FORKSERVER_MAX_FDS; i++) fds[i] = -1;
  int got[RGPU_FORKSERVER_MAX_FDS];
  int ngot = 0;
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    int n = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    int tmp[RGPU_FORKSERVER_MAX_FDS];
    memcpy(tmp, CMSG_DATA(cm), (size_t)(n > RGPU_FORKSERVER_MAX_FDS ? RGPU_FORKSERVER_MAX_FDS : n) * sizeof(int));
    for (int i = 0; i < n && i < RGPU_FORKSERVER_MAX_FDS; i++) {
      if (ngot < RGPU_FORKSERVER_MAX_FDS) got[ngot++] = tmp[i];
      else close(tmp[i]);
    }
  }
  fs_msg h;
  memcpy(&h, buf, sizeof h);
  /* Place the descriptors where the listener had them (bit i of fd_mask). */
  int k = 0, bad = (mh->msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 ||
                   (size_t)r != sizeof h + h.arg_len;
  for (int i = 0; i < RGPU_FORKSERVER_MAX_FDS; i++)
    if (h.fd_mask & (1u << i)) {
      if (k < ngot) fds[i] = got[k++];
      else bad = 1;
    }
  while (k < ngot) close(got[k++]);
  /* The connection always follows the header: take it even when the header
   * was bad, so that the channel stays in step. */
  rgpu_conn *c = NULL;
  char err[256];
  int crc = rgpu_conn_recv(sock, &c, err, sizeof err);
  pid_t pid = -EBADMSG;
  if (crc == RGPU_T_ECLOSED) pid = -EPIPE;
  if (!bad && crc == 0) {
    pid = fork();
    if (pid == 0) {
      /* The worker: the caller's signal state, nothing of the channel. */
      signal(SIGCHLD, SIG_DFL);
      sigprocmask(SIG_SETMASK, child_mask, NULL);
      prctl(PR_SET_NAME, start_comm, 0, 0, 0);
      close(sock);
      free(kids->pids);
      _exit(child(buf + sizeof h, h.arg_len, c, fds, RGPU_FORKSERVER_MAX_FDS));
    }
    if (pid < 0) {
      pid = -errno;
      RGPU_ERROR("fork: %s", strerror(-pid));
    } else if (pid_set_add(kids, pid)) {
      /* Out of memory for the table: the child is still reported, only
       * KILL cannot reach it.  Vanishingly unlikely; keep serving. */
    }
  } else if (crc && crc != RGPU_T_ECLOSED) {
    RGPU_WARN("session not started: %s", err);
  }
  rgpu_conn_close(c);
  for (int i = 0; i < RGPU_FORKSERVER_MAX_FDS; i++)
    if (fds[i] >= 0) close(fds[i]);
  return pid;
}

/* The fork server's whole life.  Never returns. */
static void forkserver_main(int sock, rgpu_forkserver_child_fn child, const sigset_t *child_mask) {
  rgpu_log_set_component("forkserver");
  prctl(PR_GET_NAME, start_comm, 0, 0, 0);
  prctl(PR_SET_NAME, "rgpu-forksrv", 0, 0, 0);
  /* Shutdown is the listener's business: a SIGTERM or ^C sent to the
   * process group must not take the fork server (or, inherited, the
   * workers) down; the listener's closing the channel ends it. */
  signal(SIGTERM, SIG_IGN);
  signal(SIGINT, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  /* SIGHUP is the listener's reload (a process-group hang-up included). */
  signal(SIGHUP, SIG_IGN);
  /* SIGCHLD stays blocked except inside ppoll, so no exit is missed
   * between the reap loop and the wait. */
  sigset_t block, wait_mask;
  sigemptyset(&block);
  sigaddset(&block, SIGCHLD);
  sigprocmask(SIG_BLOCK, &block, &wait_mask);
  sigdelset(&wait_mask, SIGCHLD);
  rgpu_signal_handle(SIGCHLD, on_sigchld, SA_NOCLDSTOP);

  unsigned char *buf = malloc(sizeof(fs_msg) + RGPU_FORKSERVER_MAX_ARG);
  if (!buf) _exit(1);
  pid_set kids = {0};
  for (;;) {
    for (;;) {
      int st;
      pid_t pid = waitpid(-1, &st, WNOHANG);
      if (pid <= 0) break;
      pid_set_remove(&kids, pid);
      fs_msg m = {.type = FS_EXITED, .pid = pid, .value = st};
      if (send_msg(sock, &m)) _exit(0); /* the listener is gone */
    }
    struct pollfd pf = {sock, POLLIN, 0};
    int pr = ppoll(&pf, 1, NULL, &wait_mask);
    if (pr < 0) {
      if (errno == EINTR) continue;
      _exit(1);
    }
    char ctrl[CMSG_SPACE(sizeof(int) * RGPU_FORKSERVER_MAX_FDS)];
    struct iovec iov = {buf, sizeof(fs_msg) + RGPU_FORKSERVER_MAX_ARG};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctrl,
                        .msg_controllen = sizeof ctrl};
    ssize_t r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) _exit(0); /* the listener closed the channel or exited */
    fs_msg h;
    if ((size_t)r < sizeof h) continue;
    memcpy(&h, buf, sizeof h);
    if (h.type == FS_SPAWN) {
      pid_t pid = do_spawn(sock, child, child_mask, buf, r, &mh, &kids);
      fs_msg ans = {.type = FS_FORKED, .seq = h.seq, .pid = pid};
      if (send_msg(sock, &ans)) _exit(0);
    } else if (h.type == FS_KILL) {
      /* Only a child not yet reaped: its pid cannot have been reused. */
      if (pid_set_has(&kids, h.pid)) kill(h.pid, h.value);
    }
  }
}

int rgpu_forkserver_start(rgpu_forkserver_child_fn child, rgpu_forkserver **out, char *err,
                          size_t errlen) {
  *out = NULL;
  if (!child) {
    snprintf(err, errlen, "fork server: no child function");
    return -1;
  }
  rgpu_forkserver *fs = calloc(1, sizeof *fs);
  if (!fs) {
    snprintf(err, errlen, "fork server: out of memory");
    return -1;
  }
  int sp[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) {
    snprintf(err, errlen, "fork server: socketpair: %s", strerror(errno));
    free(fs);
    return -1;
  }
  sigset_t mask;
  sigprocmask(SIG_SETMASK, NULL, &mask);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(err, errlen, "fork server: fork: %s", strerror(errno));
    close(sp[0]);
    close(sp[1]);
    free(fs);
    return -1;
  }
  if (pid == 0) {
    /* Never outlive the server (its workers notice the listener's end on
     * their control channels). */
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getppid() != parent) _exit(1);
    close(sp[0]);
    forkserver_main(sp[1], child, &mask);
  }
  close(sp[1]);
  fs->sock = sp[0];
  fs->pid = pid;
  *out = fs;
  return 0;
}

/* ---- the listener's side -------------------------------------------------- */

pid_t rgpu_forkserver_pid(const rgpu_forkserver *fs) { return fs ? fs->pid : -1; }
int rgpu_forkserver_poll_fd(const rgpu_forkserver *fs) { return fs ? fs->sock : -1; }
int rgpu_forkserver_alive(const rgpu_forkserver *fs) { return fs && fs->sock >= 0; }
const char *rgpu_forkserver_death(const rgpu_forkserver *fs) { return fs ? fs->death : ""; }

/* Waits up to ms for the fork server's exit status, for the death
 * sentence; 0 once reaped. */
static int reap_server(rgpu_forkserver *fs, int ms) {
  if (fs->reaped) return 0;
  for (int waited = 0;; waited += 5) {
    int st;
    pid_t r = waitpid(fs->pid, &st, WNOHANG);
    if (r == fs->pid || (r < 0 && errno != EINTR)) {
      fs->reaped = 1;
      if (r == fs->pid && !fs->death[0]) {
        if (WIFSIGNALED(st))
          snprintf(fs->death, sizeof fs->death, "killed by signal %d", WTERMSIG(st));
        else
          snprintf(fs->death, sizeof fs->death, "exited with status %d",
                   WIFEXITED(st) ? WEXITSTATUS(st) : -1);
      }
      return 0;
    }
    if (waited >= ms) return -1;
    struct timespec nap = {0, 5 * 1000 * 1000};
    nanosleep(&nap, NULL);
  }
}

/* The channel broke (EOF, error, or no answer): the fork server is done
 * for.  A wedged one is killed, so that it cannot fork anything later. */
static void mark_dead(rgpu_forkserver *fs, const char *why) {
  if (fs->sock < 0) return;
  close(fs->sock);
  fs->sock = -1;
  if (why) {
    snprintf(fs->death, sizeof fs->death, "%s", why);
    kill(fs->pid, SIGKILL);
  }
  if (reap_server(fs, 200) && !fs->death[0])
    snprintf(fs->death, sizeof fs->death, "closed its channel");
}

static int queue_exit(rgpu_forkserver *fs, pid_t pid, int st) {
  if (fs->exit_head == fs->nexit) fs->exit_head = fs->nexit = 0;
  if (fs->nexit == fs->exit_cap) {
    if (fs->exit_head > 0) {
      memmove(fs->exits, fs->exits + fs->exit_head, (fs->nexit - fs->exit_head) * sizeof *fs->exits);
      fs->nexit -= fs->exit_head;
      fs->exit_head = 0;
    } else {
      size_t nc = fs->exit_cap ? fs->exit_cap * 2 : 16;
      fs_exit *ne = realloc(fs->exits, nc * sizeof *ne);
      if (!ne) return -1;
      fs->exits = ne;
      fs->exit_cap = nc;
    }
  }
  fs->exits[fs->nexit++] = (fs_exit){pid, st};
  return 0;
}

/* Reads one message if one is there (or, timeout_ms > 0, waits that long
 * for one).  Returns 1 and *m, 0 when none came, -1 when the channel broke. */
static int read_msg(rgpu_forkserver *fs, fs_msg *m, int timeout_ms) {
  if (fs->sock < 0) return -1;
  struct pollfd pf = {fs->sock, POLLIN, 0};
  int pr;
  do {
    pr = poll(&pf, 1, timeout_ms);
  } while (pr < 0 && errno == EINTR);
  if (pr == 0) return 0;
  ssize_t r;
  do {
    r = recv(fs->sock, m, sizeof *m, MSG_DONTWAIT);
  } while (r < 0 && errno == EINTR);
  if (r < 0 && errno == EAGAIN) return 0;
  if (r != (ssize_t)sizeof *m) {
    mark_dead(fs, r > 0 ? "broke the protocol" : NULL);
    return -1;
  }
  return 1;
}

int rgpu_forkserver_spawn(rgpu_forkserver *fs, const void *arg, size_t len, const rgpu_conn *c,
                          const int *fds, int nfds, pid_t *pid, char *err, size_t errlen) {
  *pid = -1;
  if (!fs || len > RGPU_FORKSERVER_MAX_ARG || nfds > RGPU_FORKSERVER_MAX_FDS || nfds < 0 ||
      (len && !arg) || !c || rgpu_conn_raw_fd(c) < 0) {
    snprintf(err, errlen, "fork server: bad spawn request");
    return RGPU_FORKSERVER_EINVAL;
  }
  if (fs->sock < 0) {
    snprintf(err, errlen, "the fork server is gone (%s)", fs->death);
    return RGPU_FORKSERVER_EDEAD;
  }
  fs_msg h = {.type = FS_SPAWN, .seq = ++fs->seq, .arg_len = (uint32_t)len};
  int pass[RGPU_FORKSERVER_MAX_FDS];
  int npass = 0;
  for (int i = 0; i < nfds; i++)
    if (fds[i] >= 0) {
      h.fd_mask |= 1u << i;
      pass[npass++] = fds[i];
    }
  struct iovec iov[2] = {{&h, sizeof h}, {(void *)arg, len}};
  char ctrl[CMSG_SPACE(sizeof(int) * RGPU_FORKSERVER_MAX_FDS)];
  memset(ctrl, 0, sizeof ctrl);
  struct msghdr mh = {.msg_iov = iov, .msg_iovlen = len ? 2 : 1};
  if (npass) {
    mh.msg_control = ctrl;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)npass);
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)npass);
    memcpy(CMSG_DATA(cm), pass, sizeof(int) * (size_t)npass);
  }
  ssize_t w;
  /* Non-blocking: only one request is ever outstanding, so a full buffer
   * means a fork server that stopped reading. */
  do {
    w = sendmsg(fs->sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (w < 0 && errno == EINTR);
  char cerr[256] = "";
  if (w != (ssize_t)(sizeof h + len) || rgpu_conn_send(fs->sock, c, cerr, sizeof cerr)) {
    int e = errno;
    mark_dead(fs, (w < 0 && e == EAGAIN) ? "stopped reading its channel" : NULL);
    snprintf(err, errlen, "the fork server is gone (%s)", fs->death);
    return RGPU_FORKSERVER_EDEAD;
  }
  /* The fork server answers at once unless it is wedged. */
  uint64_t deadline = rgpu_deadline_in_ms(10000);
  for (;;) {
    int left = rgpu_deadline_left_ms(deadline, 10000);
    if (left <= 0) {
      mark_dead(fs, "stopped answering");
      snprintf(err, errlen, "the fork server is gone (%s)", fs->death);
      return RGPU_FORKSERVER_EDEAD;
    }
    fs_msg m;
    int rr = read_msg(fs, &m, left);
    if (rr < 0) {
      snprintf(err, errlen, "the fork server is gone (%s)", fs->death);
      return RGPU_FORKSERVER_EDEAD;
    }
    if (rr == 0) continue;
    if (m.type == FS_EXITED) {
      if (queue_exit(fs, m.pid, m.value)) {
        /* Out of memory: a lost report would leave a session counted
         * forever; better to stop than to drift. */
        mark_dead(fs, "lost an exit report (out of memory)");
        snprintf(err, errlen, "the fork server is gone (%s)", fs->death);
        return RGPU_FORKSERVER_EDEAD;
      }
      continue;
    }
    if (m.type != FS_FORKED || m.seq != fs->seq) continue;
    if (m.pid <= 0) {
      snprintf(err, errlen, "fork: %s", strerror(m.pid < 0 ? -m.pid : EAGAIN));
      return RGPU_FORKSERVER_EFORK;
    }
    *pid = m.pid;
    return 0;
  }
}

int rgpu_forkserver_next_exit(rgpu_forkserver *fs, pid_t *pid, int *wait_status) {
  if (!fs) return -1;
  if (fs->exit_head < fs->nexit) {
    *pid = fs->exits[fs->exit_head].pid;
    *wait_status = fs->exits[fs->exit_head].status;
    fs->exit_head++;
    return 1;
  }
  for (;;) {
    fs_msg m;
    int rr = read_msg(fs, &m, 0);
    if (rr <= 0) return rr;
    if (m.type != FS_EXITED) continue; /* a late FORKED of a timed-out spawn */
    *pid = m.pid;
    *wait_status = m.value;
    return 1;
  }
}

int rgpu_forkserver_kill(rgpu_forkserver *fs, pid_t pid, int sig) {
  if (!fs || fs->sock < 0) return RGPU_FORKSERVER_EDEAD;
  fs_msg m = {.type = FS_KILL, .pid = pid, .value = sig};
  /* A full channel (many KILLs at shutdown) gets a second of room; one
   * that stays full belongs to a fork server that stopped reading. */
  for (int tries = 0; tries < 2; tries++) {
    ssize_t w;
    do {
      w = send(fs->sock, &m, sizeof m, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (w < 0 && errno == EINTR);
    if (w == (ssize_t)sizeof m) return 0;
    if (w >= 0 || errno != EAGAIN) {
      mark_dead(fs, NULL);
      return RGPU_FORKSERVER_EDEAD;
    }
    struct pollfd pf = {fs->sock, POLLOUT, 0};
    poll(&pf, 1, 1000);
  }
  mark_dead(fs, "stopped reading its channel");
  return RGPU_FORKSERVER_EDEAD;
}

void rgpu_forkserver_stop(rgpu_forkserver *fs) {
  if (!fs) return;
  if (fs->sock >= 0) {
    close(fs->sock);
    fs->sock = -1;
  }
  if (reap_server(fs, 2000)) {
    kill(fs->pid, SIGKILL);
    reap_server(fs, 2000);
  }
  free(fs->exits);
  free(fs);
}
