/* rgpu_log: one small logging facility for every component.
 *
 * Messages go to stderr prefixed with the component and pid, because the
 * client library lives inside someone else's program and its lines must be
 * told apart from the program's own output.  RGPU_LOG=error|warn|info|debug
 * selects the level (default warn).  Under systemd, when stderr is the
 * journal, each line starts with its syslog priority ("<4>"). */
#ifndef RGPU_LOG_H
#define RGPU_LOG_H

#include <stdarg.h>

typedef enum {
  RGPU_LOG_ERROR = 0,
  RGPU_LOG_WARN = 1,
  RGPU_LOG_INFO = 2,
  RGPU_LOG_DEBUG = 3
} rgpu_log_level;

/* Sets the name printed in front of every line ("client", "server", ...). */
void rgpu_log_set_component(const char *name);
void rgpu_log_set_level(rgpu_log_level level);
rgpu_log_level rgpu_log_get_level(void);
int rgpu_log_enabled(rgpu_log_level level);

/* 1 when stderr is systemd's journal (JOURNAL_STREAM names fd 2): lines
 * then start with the syslog priority, "<3>" .. "<7>", which journald
 * turns into the entry's priority. */
int rgpu_log_stderr_is_journal(void);

/* A tap sees every error and warning, whatever RGPU_LOG lets through to
 * stderr, as its text without the prefix (the client library feeds CUDA's
 * error log with it, cudart/rgpu_cudart_logs.c).  It is called with no
 * rgpu lock of the log's held and must not log itself. */
typedef void (*rgpu_log_tap_fn)(rgpu_log_level level, const char *msg);
void rgpu_log_set_tap(rgpu_log_tap_fn fn);

void rgpu_log(rgpu_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void rgpu_logv(rgpu_log_level level, const char *fmt, va_list ap);

#define RGPU_ERROR(...) rgpu_log(RGPU_LOG_ERROR, __VA_ARGS__)
#define RGPU_WARN(...) rgpu_log(RGPU_LOG_WARN, __VA_ARGS__)
#define RGPU_INFO(...) rgpu_log(RGPU_LOG_INFO, __VA_ARGS__)
#define RGPU_DEBUG(...)                                                        \
  do {                                                                         \
    if (rgpu_log_enabled(RGPU_LOG_DEBUG)) rgpu_log(RGPU_LOG_DEBUG, __VA_ARGS__); \
  } while (0)

#endif
