/* The named link profiles used by the benchmarks.  This table is the single
 * source of their parameters; docs/netem.md lists the same values and
 * `rgpu-netem --list-profiles` prints them from here.
 *
 * RTT is the sum of both one-way delays, so every one-way delay below is half
 * the profile's RTT.  Loss, jitter, rate and queue apply to each direction on
 * its own.  Queues are about two bandwidth-delay products, at least 100
 * packets, so that TCP can fill the link without unbounded bufferbloat. */
#include <string.h>

#include "rgpu_netem_config.h"

#define MS(x) ((uint64_t)((x) * 1000000.0))
#define MBIT(x) ((x) * 1e6)

static const rgpu_netem_profile profiles[] = {
    {"lan", "1 ms RTT, 1 Gbit/s",
     {.delay_ns = MS(0.5), .rate_bps = MBIT(1000), .queue_pkts = 1000}},
    {"wifi-good", "10 ms RTT, +-2 ms jitter, 0.1% loss, 100 Mbit/s",
     {.delay_ns = MS(5), .jitter_ns = MS(2), .loss = 0.001,
      .rate_bps = MBIT(100), .queue_pkts = 500}},
    /* Gilbert-Elliott: P(Bad) = p/(p+r) = 4%, half the packets in Bad are
     * lost -> 2% loss in bursts; a Bad period lasts 1/r = 5 packets. */
    {"wifi-bad", "30 ms RTT, +-10 ms jitter, 2% burst loss, 20 Mbit/s",
     {.delay_ns = MS(15), .jitter_ns = MS(10), .ge_enabled = true,
      .ge_p = 0.0083333, .ge_r = 0.20, .ge_h = 0.50, .ge_k = 0.0,
      .rate_bps = MBIT(20), .queue_pkts = 200}},
    {"cellular", "60 ms RTT, 1% loss, 10 Mbit/s",
     {.delay_ns = MS(30), .loss = 0.01, .rate_bps = MBIT(10),
      .queue_pkts = 200}},
    {"satellite-like", "300 ms RTT, 0.5% loss, 10 Mbit/s",
     {.delay_ns = MS(150), .loss = 0.005, .rate_bps = MBIT(10),
      .queue_pkts = 500}},
    {"edge-worst", "100 ms RTT, 5% loss, 5 Mbit/s",
     {.delay_ns = MS(50), .loss = 0.05, .rate_bps = MBIT(5),
      .queue_pkts = 100}},
    /* No impairment at all: for measuring the emulator itself. */
    {"none", "no impairment (the emulator's own cost)", {.queue_pkts = 1000}},
};

const rgpu_netem_profile *rgpu_netem_profiles(size_t *count) {
  *count = sizeof profiles / sizeof profiles[0];
  return profiles;
}

const rgpu_netem_profile *rgpu_netem_profile_find(const char *name) {
  size_t n;
  const rgpu_netem_profile *p = rgpu_netem_profiles(&n);
  for (size_t i = 0; i < n; i++)
    if (!strcmp(p[i].name, name)) return &p[i];
  return NULL;
}
