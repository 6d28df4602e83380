/* rgpu_netem_pipe: the impairment model of one direction of the emulated link.
 *
 * A pipe decides the fate of every packet that enters it (outage, random or
 * Gilbert-Elliott loss, drop-tail queue behind a rate serializer, delay with
 * jitter) and holds the survivors until they are due.  It knows nothing about
 * file descriptors or clocks: the caller passes the time in, which is what
 * makes the model testable without root or real time.
 *
 * A pipe is used by one thread at a time; the outage schedule may be shared
 * between the two pipes of a link. */
#ifndef RGPU_NETEM_PIPE_H
#define RGPU_NETEM_PIPE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RGPU_NETEM_MAX_OUTAGES 64

typedef enum {
  RGPU_NETEM_JITTER_UNIFORM = 0, /* delay + U(-j, +j) */
  RGPU_NETEM_JITTER_NORMAL = 1   /* delay + N(0, j^2) */
} rgpu_netem_jitter_dist;

/* Parameters of one direction.  Probabilities are in [0, 1]. */
typedef struct {
  uint64_t delay_ns;  /* one-way propagation delay */
  uint64_t jitter_ns; /* amplitude (uniform) or standard deviation (normal) */
  rgpu_netem_jitter_dist jitter_dist;
  bool reorder;       /* false: jitter never reorders (due = max(due, last)) */
  double loss;        /* independent (Bernoulli) loss probability */
  bool ge_enabled;    /* Gilbert-Elliott burst loss, applied after Bernoulli */
  double ge_p;        /* P(Good -> Bad) per packet */
  double ge_r;        /* P(Bad -> Good) per packet */
  double ge_h;        /* loss probability in Bad */
  double ge_k;        /* loss probability in Good */
  double rate_bps;    /* serialization rate in bit/s over the IP packet; 0 = unlimited */
  uint32_t queue_pkts;  /* drop-tail limit of packets waiting for the serializer */
  uint64_t queue_bytes; /* same limit in bytes; 0 = no byte limit */
} rgpu_netem_dir_config;

typedef struct {
  uint64_t start_ns; /* relative to the schedule's epoch */
  uint64_t dur_ns;
} rgpu_netem_outage;

/* Outage windows, relative to an epoch that is set once the workload starts
 * (before that the link is always up). */
typedef struct {
  size_t count;
  rgpu_netem_outage win[RGPU_NETEM_MAX_OUTAGES];
  _Atomic uint64_t epoch_ns; /* 0: not started */
} rgpu_netem_schedule;

/* True when the link is down at absolute time now_ns. */
bool rgpu_netem_schedule_down(const rgpu_netem_schedule *s, uint64_t now_ns);

typedef struct {
  uint64_t rx_pkts, rx_bytes;  /* packets that entered the pipe */
  uint64_t tx_pkts, tx_bytes;  /* packets handed out as due */
  uint64_t lost_random;        /* Bernoulli loss */
  uint64_t lost_burst;         /* Gilbert-Elliott loss */
  uint64_t dropped_queue;      /* drop-tail queue full */
  uint64_t dropped_outage;     /* link down on entry or on delivery */
  uint64_t dropped_overflow;   /* emulator out of packet slots */
  uint64_t dropped_oversize;   /* larger than the slot size (MTU) */
  uint64_t write_errors;       /* counted by the forwarder */
  uint64_t max_queue_pkts;     /* high-water mark of the serializer queue */
} rgpu_netem_pipe_stats;

/* A packet buffer owned by the pipe. */
typedef struct rgpu_netem_slot {
  uint64_t due_ns;
  uint64_t seq;
  uint32_t len;
  struct rgpu_netem_slot *next_free;
  uint8_t data[];
} rgpu_netem_slot;

typedef struct {
  rgpu_netem_dir_config cfg;
  const rgpu_netem_schedule *sched; /* may be NULL */
  uint64_t rng[4];
  bool ge_bad;
  /* rate serializer */
  uint64_t busy_until_ns;
  double ns_per_byte;
  uint64_t *q_finish; /* ring of serialization finish times, capacity queue_pkts */
  uint32_t *q_len;
  uint32_t q_head, q_count;
  uint64_t q_bytes;
  /* delay line: binary min-heap on (due, seq) */
  rgpu_netem_slot **heap;
  size_t heap_len, heap_cap;
  uint64_t last_due_ns;
  uint64_t next_seq;
  /* slots */
  size_t slot_size, slots_made, slots_max;
  rgpu_netem_slot *free_list;
  rgpu_netem_pipe_stats st;
} rgpu_netem_pipe;

/* Sets a pipe up; it allocates its queues and slots lazily (up to max_slots
 * packets of slot_size bytes).  Returns 0, or -1 with a message in err. */
int rgpu_netem_pipe_init(rgpu_netem_pipe *p, const rgpu_netem_dir_config *cfg,
                         const rgpu_netem_schedule *sched, uint64_t seed,
                         size_t slot_size, size_t max_slots, char *err,
                         size_t errlen);
void rgpu_netem_pipe_free(rgpu_netem_pipe *p);

/* A free slot to read a packet into, or NULL when every slot is in use. */
rgpu_netem_slot *rgpu_netem_pipe_get_slot(rgpu_netem_pipe *p);
/* Returns a slot obtained from get_slot or pop. */
void rgpu_netem_pipe_put_slot(rgpu_netem_pipe *p, rgpu_netem_slot *s);

/* Hands a filled slot (s->len set) to the pipe at time now_ns.  The pipe keeps
 * it (returns true) or drops it, counting why, and takes the slot back. */
bool rgpu_netem_pipe_submit(rgpu_netem_pipe *p, rgpu_netem_slot *s,
                            uint64_t now_ns);

/* Counts a packet that could not even be read into a slot. */
void rgpu_netem_pipe_count_overflow(rgpu_netem_pipe *p, uint32_t len);

/* Due time of the earliest held packet, or UINT64_MAX when none. */
uint64_t rgpu_netem_pipe_next_due(const rgpu_netem_pipe *p);

/* Removes and returns the earliest packet if it is due at now_ns, else NULL.
 * A packet due while the link is down is dropped here (and not returned). The
 * caller gives the slot back with put_slot after sending it. */
rgpu_netem_slot *rgpu_netem_pipe_pop(rgpu_netem_pipe *p, uint64_t now_ns);

/* Serializer backlog at now_ns, in packets (for tests and stats). */
uint32_t rgpu_netem_pipe_backlog(rgpu_netem_pipe *p, uint64_t now_ns);

/* Pseudo-random numbers (xoshiro256**), exposed for the tests. */
uint64_t rgpu_netem_rng_next(uint64_t s[4]);
void rgpu_netem_rng_seed(uint64_t s[4], uint64_t seed);
double rgpu_netem_rng_unit(uint64_t s[4]); /* [0, 1) */

#endif
