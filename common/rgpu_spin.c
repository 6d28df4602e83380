/* Bounded busy waits: see rgpu_spin.h. */
#include "rgpu_spin.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>

#include "rgpu_clock.h"
#include "rgpu_log.h"

int rgpu_spin_readable(int fd, unsigned budget_us) {
  if (fd < 0 || budget_us == 0) return 0;
  uint64_t end = rgpu_clock_ns() + (uint64_t)budget_us * RGPU_NS_PER_US;
  struct pollfd p = {.fd = fd, .events = POLLIN};
  for (;;) {
    int r = poll(&p, 1, 0);
    if (r > 0) return 1;
    if (r < 0 && errno != EINTR) return 1; /* the read reports it */
    if (rgpu_clock_ns() >= end) return 0;
    sched_yield();
  }
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
