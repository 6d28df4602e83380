#include "rgpu_netem_pipe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_array.h"

/* ---- random numbers ---------------------------------------------------- */

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rgpu_netem_rng_next(uint64_t s[4]) {
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

/* splitmix64 spreads a small seed over the whole state, so seeds 1 and 2 give
 * unrelated streams. */
void rgpu_netem_rng_seed(uint64_t s[4], uint64_t seed) {
  uint64_t z = seed;
  for (int i = 0; i < 4; i++) {
    z += 0x9e3779b97f4a7c15ull;
    uint64_t x = z;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    s[i] = x ^ (x >> 31);
  }
}

double rgpu_netem_rng_unit(uint64_t s[4]) {
  return (double)(rgpu_netem_rng_next(s) >> 11) * 0x1.0p-53;
}

static bool chance(uint64_t s[4], double prob) {
  if (prob <= 0.0) return false;
  if (prob >= 1.0) return true;
  return rgpu_netem_rng_unit(s) < prob;
}

static double normal01(uint64_t s[4]) {
  /* Box-Muller; one value per call is enough at packet rates. */
  double u1 = rgpu_netem_rng_unit(s);
  double u2 = rgpu_netem_rng_unit(s);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* ---- outage schedule --------------------------------------------------- */

bool rgpu_netem_schedule_down(const rgpu_netem_schedule *s, uint64_t now_ns) {
  if (!s || s->count == 0) return false;
  uint64_t epoch = atomic_load_explicit(&s->epoch_ns, memory_order_acquire);
  if (epoch == 0 || now_ns < epoch) return false;
  uint64_t t = now_ns - epoch;
  for (size_t i = 0; i < s->count; i++)
    if (t >= s->win[i].start_ns && t < s->win[i].start_ns + s->win[i].dur_ns)
      return true;
  return false;
}

/* ---- pipe -------------------------------------------------------------- */

int rgpu_netem_pipe_init(rgpu_netem_pipe *p, const rgpu_netem_dir_config *cfg,
                         const rgpu_netem_schedule *sched, uint64_t seed,
                         size_t slot_size, size_t max_slots, char *err,
                         size_t errlen) {
  memset(p, 0, sizeof *p);
  if (cfg->loss < 0 || cfg->loss > 1 || cfg->ge_p < 0 || cfg->ge_p > 1 ||
      cfg->ge_r < 0 || cfg->ge_r > 1 || cfg->ge_h < 0 || cfg->ge_h > 1 ||
      cfg->ge_k < 0 || cfg->ge_k > 1) {
    snprintf(err, errlen, "loss probabilities must lie in [0, 1]");
    return -1;
  }
  if (cfg->rate_bps < 0 || !isfinite(cfg->rate_bps)) {
    snprintf(err, errlen, "rate must be >= 0");
    return -1;
  }
  if (cfg->rate_bps > 0 && cfg->queue_pkts == 0) {
    snprintf(err, errlen, "a rate limit needs a queue of at least 1 packet");
    return -1;
  }
  if (slot_size == 0 || max_slots == 0) {
    snprintf(err, errlen, "slot size and slot count must be > 0");
    return -1;
  }
  p->cfg = *cfg;
  p->sched = sched;
  rgpu_netem_rng_seed(p->rng, seed);
  p->slot_size = slot_size;
  p->slots_max = max_slots;
  if (cfg->rate_bps > 0) {
    p->ns_per_byte = 8e9 / cfg->rate_bps;
    p->q_finish = calloc(cfg->queue_pkts, sizeof *p->q_finish);
    p->q_len = calloc(cfg->queue_pkts, sizeof *p->q_len);
    if (!p->q_finish || !p->q_len) {
      snprintf(err, errlen, "out of memory for a queue of %u packets",
               cfg->queue_pkts);
      rgpu_netem_pipe_free(p);
      return -1;
    }
  }
  return 0;
}

void rgpu_netem_pipe_free(rgpu_netem_pipe *p) {
  for (size_t i = 0; i < p->heap_len; i++) free(p->heap[i]);
  free(p->heap);
  while (p->free_list) {
    rgpu_netem_slot *n = p->free_list->next_free;
    free(p->free_list);
    p->free_list = n;
  }
  free(p->q_finish);
  free(p->q_len);
  memset(p, 0, sizeof *p);
}

rgpu_netem_slot *rgpu_netem_pipe_get_slot(rgpu_netem_pipe *p) {
  rgpu_netem_slot *s = p->free_list;
  if (s) {
    p->free_list = s->next_free;
    return s;
  }
  if (p->slots_made >= p->slots_max) return NULL;
  s = malloc(sizeof *s + p->slot_size);
  if (!s) return NULL;
  p->slots_made++;
  return s;
}

void rgpu_netem_pipe_put_slot(rgpu_netem_pipe *p, rgpu_netem_slot *s) {
  s->next_free = p->free_list;
  p->free_list = s;
}

void rgpu_netem_pipe_count_overflow(rgpu_netem_pipe *p, uint32_t len) {
  p->st.rx_pkts++;
  p->st.rx_bytes += len;
  p->st.dropped_overflow++;
}

static void q_expire(rgpu_netem_pipe *p, uint64_t now_ns) {
  uint32_t cap = p->cfg.queue_pkts;
  while (p->q_count && p->q_finish[p->q_head] <= now_ns) {
    p->q_bytes -= p->q_len[p->q_head];
    p->q_head = (p->q_head + 1) % cap;
    p->q_count--;
  }
}

uint32_t rgpu_netem_pipe_backlog(rgpu_netem_pipe *p, uint64_t now_ns) {
  if (p->cfg.rate_bps <= 0) return 0;
  q_expire(p, now_ns);
  return p->q_count;
}

static bool heap_less(const rgpu_netem_slot *a, const rgpu_netem_slot *b) {
  return a->due_ns < b->due_ns || (a->due_ns == b->due_ns && a->seq < b->seq);
}

static bool heap_push(rgpu_netem_pipe *p, rgpu_netem_slot *s) {
  if (RGPU_ARRAY_RESERVE(p->heap, p->heap_cap, p->heap_len + 1, 256)) return false;
  size_t i = p->heap_len++;
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (!heap_less(s, p->heap[parent])) break;
    p->heap[i] = p->heap[parent];
    i = parent;
  }
  p->heap[i] = s;
  return true;
}

static rgpu_netem_slot *heap_pop(rgpu_netem_pipe *p) {
  rgpu_netem_slot *top = p->heap[0];
  rgpu_netem_slot *last = p->heap[--p->heap_len];
  size_t i = 0, n = p->heap_len;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && heap_less(p->heap[c + 1], p->heap[c])) c++;
    if (!heap_less(p->heap[c], last)) break;
    p->heap[i] = p->heap[c];
    i = c;
  }
  if (n) p->heap[i] = last;
  return top;
}

static uint64_t jittered_delay(rgpu_netem_pipe *p) {
  const rgpu_netem_dir_config *c = &p->cfg;
  if (c->jitter_ns == 0) return c->delay_ns;
  double off;
  if (c->jitter_dist == RGPU_NETEM_JITTER_NORMAL)
    off = normal01(p->rng) * (double)c->jitter_ns;
  else
    off = (rgpu_netem_rng_unit(p->rng) * 2.0 - 1.0) * (double)c->jitter_ns;
  double d = (double)c->delay_ns + off;
  return d <= 0 ? 0 : (uint64_t)d;
}

bool rgpu_netem_pipe_submit(rgpu_netem_pipe *p, rgpu_netem_slot *s,
                            uint64_t now_ns) {
  const rgpu_netem_dir_config *c = &p->cfg;
  uint32_t len = s->len;
  p->st.rx_pkts++;
  p->st.rx_bytes += len;

  if (len > p->slot_size) {
    p->st.dropped_oversize++;
    goto drop;
  }
  if (rgpu_netem_schedule_down(p->sched, now_ns)) {
    p->st.dropped_outage++;
    goto drop;
  }
  if (chance(p->rng, c->loss)) {
    p->st.lost_random++;
    goto drop;
  }
  if (c->ge_enabled) {
    /* Transition first, then decide by the new state: with h = 1 and k = 0 a
     * burst then lasts a geometric number of packets with mean 1/r. */
    if (p->ge_bad) {
      if (chance(p->rng, c->ge_r)) p->ge_bad = false;
    } else {
      if (chance(p->rng, c->ge_p)) p->ge_bad = true;
    }
    if (chance(p->rng, p->ge_bad ? c->ge_h : c->ge_k)) {
      p->st.lost_burst++;
      goto drop;
    }
  }

  uint64_t leave = now_ns;
  if (c->rate_bps > 0) {
    q_expire(p, now_ns);
    if (p->q_count >= c->queue_pkts ||
        (c->queue_bytes && p->q_bytes + len > c->queue_bytes)) {
      p->st.dropped_queue++;
      goto drop;
    }
    uint64_t start = p->busy_until_ns > now_ns ? p->busy_until_ns : now_ns;
    p->busy_until_ns = start + (uint64_t)llround(len * p->ns_per_byte);
    uint32_t tail = (p->q_head + p->q_count) % c->queue_pkts;
    p->q_finish[tail] = p->busy_until_ns;
    p->q_len[tail] = len;
    p->q_count++;
    p->q_bytes += len;
    if (p->q_count > p->st.max_queue_pkts) p->st.max_queue_pkts = p->q_count;
    leave = p->busy_until_ns;
  }

  uint64_t due = leave + jittered_delay(p);
  if (!c->reorder && due < p->last_due_ns) due = p->last_due_ns;
  if (due > p->last_due_ns) p->last_due_ns = due;
  s->due_ns = due;
  s->seq = p->next_seq++;
  if (!heap_push(p, s)) {
    p->st.dropped_overflow++;
    goto drop;
  }
  return true;

drop:
  rgpu_netem_pipe_put_slot(p, s);
  return false;
}

uint64_t rgpu_netem_pipe_next_due(const rgpu_netem_pipe *p) {
  return p->heap_len ? p->heap[0]->due_ns : UINT64_MAX;
}

rgpu_netem_slot *rgpu_netem_pipe_pop(rgpu_netem_pipe *p, uint64_t now_ns) {
  while (p->heap_len && p->heap[0]->due_ns <= now_ns) {
    rgpu_netem_slot *s = heap_pop(p);
    if (rgpu_netem_schedule_down(p->sched, now_ns)) {
      p->st.dropped_outage++;
      rgpu_netem_pipe_put_slot(p, s);
      continue;
    }
    p->st.tx_pkts++;
    p->st.tx_bytes += s->len;
    return s;
  }
  return NULL;
}
