/* rgpu_clock: the one place that reads the clocks.
 *
 * Everything that measures a duration or waits for a deadline uses the
 * monotonic clock, so that a wall-clock step (NTP, a user setting the date)
 * can neither fire a timeout early nor stall one.  Times are plain uint64_t
 * nanoseconds: they subtract and compare without struct timespec
 * arithmetic, and 2^64 ns is 584 years of uptime.  The wall clock is here
 * too, named as such, for the few values that leave the process (uptime
 * reported to a client, time stamps in a trace). */
#ifndef RGPU_CLOCK_H
#define RGPU_CLOCK_H

#include <limits.h>
#include <stdint.h>
#include <time.h>

#define RGPU_NS_PER_US 1000ull
#define RGPU_NS_PER_MS 1000000ull
#define RGPU_NS_PER_S 1000000000ull

static inline uint64_t rgpu_timespec_ns(const struct timespec *ts) {
  return (uint64_t)ts->tv_sec * RGPU_NS_PER_S + (uint64_t)ts->tv_nsec;
}

static inline struct timespec rgpu_ns_timespec(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / RGPU_NS_PER_S), (long)(ns % RGPU_NS_PER_S)};
  return ts;
}

/* Monotonic time since an arbitrary origin (boot). */
static inline uint64_t rgpu_clock_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return rgpu_timespec_ns(&ts);
}
static inline uint64_t rgpu_clock_us(void) { return rgpu_clock_ns() / RGPU_NS_PER_US; }
static inline uint64_t rgpu_clock_ms(void) { return rgpu_clock_ns() / RGPU_NS_PER_MS; }
/* Monotonic seconds as a double, for reports and rates. */
static inline double rgpu_clock_s(void) { return (double)rgpu_clock_ns() / 1e9; }

/* Wall-clock (CLOCK_REALTIME) time since the epoch: only for values shown
 * to people or other hosts, never for timeouts. */
static inline uint64_t rgpu_wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return rgpu_timespec_ns(&ts);
}
static inline uint64_t rgpu_wall_s(void) { return rgpu_wall_ns() / RGPU_NS_PER_S; }

/* Nanoseconds from t0 (an rgpu_clock_ns() value) to now; 0 if t0 lies in
 * the future. */
static inline uint64_t rgpu_clock_elapsed_ns(uint64_t t0) {
  uint64_t now = rgpu_clock_ns();
  return now > t0 ? now - t0 : 0;
}
static inline double rgpu_clock_elapsed_s(uint64_t t0) {
  return (double)rgpu_clock_elapsed_ns(t0) / 1e9;
}

/* The deadline `in_ns` from now, saturating instead of wrapping so that a
 * huge timeout means "never" rather than "already passed". */
static inline uint64_t rgpu_deadline_in_ns(uint64_t in_ns) {
  uint64_t now = rgpu_clock_ns();
  return in_ns > UINT64_MAX - now ? UINT64_MAX : now + in_ns;
}
static inline uint64_t rgpu_deadline_in_ms(uint64_t in_ms) {
  return rgpu_deadline_in_ns(in_ms > UINT64_MAX / RGPU_NS_PER_MS ? UINT64_MAX : in_ms * RGPU_NS_PER_MS);
}
static inline int rgpu_deadline_passed(uint64_t deadline_ns) { return rgpu_clock_ns() >= deadline_ns; }

/* Nanoseconds left until the deadline, 0 once it has passed. */
static inline uint64_t rgpu_deadline_left_ns(uint64_t deadline_ns) {
  uint64_t now = rgpu_clock_ns();
  return deadline_ns > now ? deadline_ns - now : 0;
}

/* Whole milliseconds left until the deadline, clamped to [0, cap_ms]: what
 * poll() takes.  Rounds down, like the copies this replaces (a poll that
 * wakes a little early just loops once more). */
static inline int rgpu_deadline_left_ms(uint64_t deadline_ns, int cap_ms) {
  uint64_t ms = rgpu_deadline_left_ns(deadline_ns) / RGPU_NS_PER_MS;
  if (cap_ms < 0) cap_ms = INT_MAX;
  return ms > (uint64_t)cap_ms ? cap_ms : (int)ms;
}

/* An absolute CLOCK_MONOTONIC timespec `in_ns` from now, for
 * pthread_cond_timedwait on a condition variable whose clock was set with
 * pthread_condattr_setclock(CLOCK_MONOTONIC). */
static inline struct timespec rgpu_clock_timespec_in(uint64_t in_ns) {
  return rgpu_ns_timespec(rgpu_deadline_in_ns(in_ns));
}

#endif /* RGPU_CLOCK_H */
