/* Bounded busy waits: see rgpu_spin.h. */
#define _GNU_SOURCE
#include "rgpu_spin.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rgpu_clock.h"
#include "rgpu_log.h"

int rgpu_spin_readable(int fd, unsigned budget_us) {
  if (fd < 0 || budget_us == 0) return 0;
  uint64_t end = rgpu_clock_ns() + (uint64_t)budget_us * RGPU_NS_PER_US;
  struct pollfd p = {.fd = fd, .events = POLLIN};
  int r = rgpu_spin_ppoll(&p, 1, end, end);
  return r > 0 || (r < 0 && errno != EINTR); /* an error: the read reports it */
}

unsigned rgpu_spin_budget_us(unsigned dflt) {
  const char *s = getenv("RGPU_SPIN_US");
  if (!s || !*s) return dflt;
  char *end;
  unsigned long v = strtoul(s, &end, 10);
  if (*end || v > 100000) {
    static int warned;
    if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
      RGPU_WARN("RGPU_SPIN_US=%s is not a number of microseconds from 0 to 100000: using %u", s, dflt);
    return dflt;
  }
  return (unsigned)v;
}

/* Whether this process may run on RGPU_SPIN_MIN_SPARE_CPUS or more CPUs,
 * unless the environment variable env says "0" or "1".  Cached in *cached
 * (-1: not known yet); a racy first use is harmless, every thread computes
 * the same. */
static int spin_many_cpus(int *cached, const char *env) {
  int v = __atomic_load_n(cached, __ATOMIC_RELAXED);
  if (v >= 0) return v;
  const char *e = getenv(env);
  if (e && (!strcmp(e, "0") || !strcmp(e, "1"))) {
    v = e[0] == '1';
  } else {
    cpu_set_t set;
    CPU_ZERO(&set);
    v = sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) >= RGPU_SPIN_MIN_SPARE_CPUS;
  }
  __atomic_store_n(cached, v, __ATOMIC_RELAXED);
  return v;
}

int rgpu_spin_spare_cpus(void) {
  static int cached = -1;
  return spin_many_cpus(&cached, "RGPU_SPIN_RELAYED");
}

int rgpu_spin_keeps_cpu(void) {
  static int cached = -1;
  return spin_many_cpus(&cached, "RGPU_SPIN_KEEP_CPU");
}

/* One round's pause between polls that keep the CPU: a few spin-wait hints
 * (the sibling hyperthread gets the core's issue slots meanwhile). */
static void spin_relax(void) {
  for (int i = 0; i < 16; i++) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#else
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
#endif
  }
}

int rgpu_spin_ppoll(struct pollfd *fds, unsigned long nfds, uint64_t spin_until_ns,
                    uint64_t deadline_ns) {
  if (spin_until_ns > deadline_ns) spin_until_ns = deadline_ns;
  if (spin_until_ns) {
    static const struct timespec zero;
    int keep = rgpu_spin_keeps_cpu();
    for (;;) {
      int r = ppoll(fds, (nfds_t)nfds, &zero, NULL);
      if (r > 0 || (r < 0 && errno != EINTR)) return r;
      if (rgpu_clock_ns() >= spin_until_ns) break;
      if (keep)
        spin_relax();
      else
        sched_yield();
    }
  }
  struct timespec ts, *tsp = NULL;
  if (deadline_ns != UINT64_MAX) {
    ts = rgpu_ns_timespec(rgpu_deadline_left_ns(deadline_ns)); /* ppoll takes the time left */
    tsp = &ts;
  }
  return ppoll(fds, (nfds_t)nfds, tsp, NULL);
}

void rgpu_spin_window_init(rgpu_spin_window *s, unsigned dflt_us) {
  s->until_ns = 0;
  s->window_ns = rgpu_spin_spare_cpus() ? (uint64_t)rgpu_spin_budget_us(dflt_us) * RGPU_NS_PER_US : 0;
}

int rgpu_spin_window_ppoll(rgpu_spin_window *s, struct pollfd *fds, unsigned long nfds,
                           uint64_t deadline_ns) {
  int r = rgpu_spin_ppoll(fds, nfds, s->until_ns, deadline_ns);
  if (r > 0 && s->window_ns) s->until_ns = rgpu_clock_ns() + s->window_ns;
  return r;
}

void rgpu_spin_window_await(rgpu_spin_window *s, uint64_t asked_ns) {
  if (!s->window_ns || !asked_ns) return;
  uint64_t until = asked_ns + (uint64_t)RGPU_SPIN_ANSWER_US * RGPU_NS_PER_US;
  if (until > s->until_ns) s->until_ns = until;
}
