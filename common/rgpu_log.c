#include "rgpu_log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *log_component = "rgpu";
static int log_level = -1; /* -1: not read from the environment yet */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

/* A program that forks while another of its threads (a TLS/QUIC relay of
 * the client library) is in the middle of a log line would leave the lock
 * held in the child, which then blocks on its first log line forever.  The
 * child gets a fresh lock (its only thread holds nothing).  No prepare
 * handler on purpose: taking the lock before fork would order it against
 * whatever locks other libraries' prepare handlers take.  (rgpu-server
 * itself forks its workers from a single-threaded fork server.) */
static void log_after_fork_child(void) {
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  log_lock = fresh;
}
static pthread_once_t log_atfork_once = PTHREAD_ONCE_INIT;
static void log_install_atfork(void) {
  pthread_atfork(NULL, NULL, log_after_fork_child);
}

static int level_from_env(void) {
  const char *s = getenv("RGPU_LOG");
  if (!s || !*s) return RGPU_LOG_WARN;
  if (!strcasecmp(s, "error")) return RGPU_LOG_ERROR;
  if (!strcasecmp(s, "warn")) return RGPU_LOG_WARN;
  if (!strcasecmp(s, "info")) return RGPU_LOG_INFO;
  if (!strcasecmp(s, "debug")) return RGPU_LOG_DEBUG;
  return RGPU_LOG_WARN;
}

/* systemd sets JOURNAL_STREAM=DEV:INODE for a service whose stderr is a
 * stream to the journal; journald reads a leading "<N>" on each line as its
 * syslog priority (3 err, 4 warning, 6 info, 7 debug), so the journal can
 * filter and colour rgpu's levels.  The variable is inherited by children
 * whose stderr may be something else, hence the comparison with fd 2. */
int rgpu_log_stderr_is_journal(void) {
  const char *js = getenv("JOURNAL_STREAM");
  if (!js || !*js) return 0;
  unsigned long long dev, ino;
  if (sscanf(js, "%llu:%llu", &dev, &ino) != 2) return 0;
  struct stat st;
  if (fstat(2, &st) < 0) return 0;
  return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

static int journal_prefix = -1; /* -1: not checked yet */

void rgpu_log_set_component(const char *name) { log_component = name; }
void rgpu_log_set_level(rgpu_log_level level) { log_level = (int)level; }

rgpu_log_level rgpu_log_get_level(void) {
  if (log_level < 0) log_level = level_from_env();
  return (rgpu_log_level)log_level;
}

int rgpu_log_enabled(rgpu_log_level level) {
  return (int)level <= (int)rgpu_log_get_level();
}

static rgpu_log_tap_fn log_tap;
void rgpu_log_set_tap(rgpu_log_tap_fn fn) { __atomic_store_n(&log_tap, fn, __ATOMIC_RELEASE); }

void rgpu_logv(rgpu_log_level level, const char *fmt, va_list ap) {
  static const char *names[] = {"error", "warn", "info", "debug"};
  rgpu_log_tap_fn tap = __atomic_load_n(&log_tap, __ATOMIC_ACQUIRE);
  if (tap && level <= RGPU_LOG_WARN) {
    char msg[1024];
    va_list aq;
    va_copy(aq, ap);
    vsnprintf(msg, sizeof msg, fmt, aq);
    va_end(aq);
    tap(level, msg);
  }
  if (!rgpu_log_enabled(level)) return;
  static const int journal_priority[] = {3, 4, 6, 7};
  if (journal_prefix < 0) journal_prefix = rgpu_log_stderr_is_journal();
  char line[2048];
  char prio[8] = "";
  if (journal_prefix) snprintf(prio, sizeof prio, "<%d>", journal_priority[level]);
  int n = snprintf(line, sizeof line, "%srgpu-%s[%d] %s: ", prio, log_component,
                   (int)getpid(), names[level]);
  if (n < 0) return;
  if ((size_t)n < sizeof line) {
    int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    if (m > 0) n += m;
  }
  if ((size_t)n >= sizeof line - 1) n = (int)sizeof line - 2;
  line[n++] = '\n';
  /* One write per line so concurrent processes do not interleave halves. */
  pthread_once(&log_atfork_once, log_install_atfork);
  pthread_mutex_lock(&log_lock);
  ssize_t w = write(2, line, (size_t)n);
  (void)w;
  pthread_mutex_unlock(&log_lock);
}

void rgpu_log(rgpu_log_level level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  rgpu_logv(level, fmt, ap);
  va_end(ap);
}
