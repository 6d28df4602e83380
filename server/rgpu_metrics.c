/* Prometheus metrics of rgpu-server: shared slots written by workers, an
 * HTTP thread in the listener that renders them.  See rgpu_metrics.h. */
#define _GNU_SOURCE
#include "rgpu_driver.h"
#include "rgpu_metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rgpu_clock.h"
#include "rgpu_frame.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"
#include "rgpu_transport.h"
#include "rgpu_thread_name.h"

const double rgpu_metrics_bucket_bounds[RGPU_METRICS_BUCKETS] = {
    0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 1e300 /* +Inf */};

/* Counters of one session or of the totals.  Workers write their slot with
 * relaxed atomic adds; the listener reads with relaxed loads.  A scrape may
 * see a request's call counted before its bytes: harmless for monitoring. */
typedef struct {
  uint64_t calls[RGPU_METRICS_OPS];
  /* Session-thread time per opcode: where a server-bound workload's time
   * goes (the histogram below has no opcode). */
  uint64_t op_ns[RGPU_METRICS_OPS];
  uint64_t err_code[RGPU_METRICS_ERR_CODES]; /* 0 = free entry */
  uint64_t err_count[RGPU_METRICS_ERR_CODES];
  uint64_t err_other;                        /* codes beyond the table */
  uint64_t lat_bucket[RGPU_METRICS_BUCKETS]; /* non-cumulative */
  uint64_t lat_sum_ns;
  uint64_t bytes_in, bytes_out;
  uint64_t image_cache[RGPU_METRICS_IMAGE_EVENTS]; /* RGPU_METRICS_IMAGE_* */
  uint64_t staging_pins, staging_pin_ns;
} rgpu_metrics_counts;

typedef struct {
  /* Owned by the listener (under m->lock). */
  int in_use;
  pid_t pid;
  uint64_t session_id;
  char transport[16];
  /* Written by the worker. */
  uint64_t mem_held;
  char end_reason[24];
  /* The session table (rgpu_metrics_sessions, NVML_QUERY's process list):
   * the client's pid and name from HELLO, the devices it has a context on. */
  uint32_t client_pid;
  char client_name[32];
  uint64_t devices;
  rgpu_metrics_counts c;
} rgpu_metrics_slot;

#define END_REASONS 24
typedef struct {
  char name[24];
  uint64_t n;
} reason_count;

struct rgpu_metrics {
  rgpu_metrics_slot *slots; /* shared mapping of RGPU_METRICS_SLOTS */
  size_t map_len;
  int slots_fd; /* the memfd behind slots: workers map it (rgpu_metrics_enter_worker_fd) */
  int lfd;
  int wake[2]; /* close: wakes the thread */
  char addr[300];
  pthread_t th;
  int th_started;
  pthread_mutex_t lock; /* totals, slot ownership, conns[] */
  /* Totals (listener memory, under lock). */
  rgpu_metrics_counts done; /* folded counts of ended sessions */
  uint64_t sessions_total, sessions_untracked;
  reason_count ended[END_REASONS];
  reason_count refused[8];
  uint64_t scrapes, http_errors;
  uint64_t started_ns;
  /* HTTP connections of the thread (fds closed in forked children). */
  struct {
    int fd;
    uint64_t deadline_ns;
    char req[RGPU_METRICS_MAX_REQUEST];
    size_t req_len;
    rgpu_buf resp;
    size_t resp_off;
    int writing;
  } conns[RGPU_METRICS_MAX_CONNS];
};

/* Process-wide: the listener's instance (for the atfork handlers) and, in a
 * worker, its own slot. */
static rgpu_metrics *g_metrics;
static rgpu_metrics_slot *g_self;
static rgpu_metrics_slot *g_all; /* in a worker: every slot, for the session table */
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

/* ---- fork safety ---------------------------------------------------------- */

static void atfork_prepare(void) {
  if (g_metrics) pthread_mutex_lock(&g_metrics->lock);
}
static void atfork_parent(void) {
  if (g_metrics) pthread_mutex_unlock(&g_metrics->lock);
}
/* The child is a worker (or a refuser): it must not keep the metrics port
 * or any scraper's socket open.  The lock was held across fork, so conns[]
 * is consistent here. */
static void atfork_child(void) {
  rgpu_metrics *m = g_metrics;
  if (!m) return;
  if (m->lfd >= 0) close(m->lfd);
  close(m->wake[0]);
  close(m->wake[1]);
  for (int i = 0; i < RGPU_METRICS_MAX_CONNS; i++)
    if (m->conns[i].fd >= 0) close(m->conns[i].fd);
  pthread_mutex_unlock(&m->lock);
  /* The child has no HTTP thread: nothing of m but its slot is usable. */
  g_metrics = NULL;
}
static void register_atfork(void) { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); }

/* ---- counting ------------------------------------------------------------ */

static inline void add(uint64_t *p, uint64_t v) { __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
static inline uint64_t ld(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }

static int bucket_of(uint64_t ns) {
  double s = (double)ns / 1e9;
  for (int i = 0; i < RGPU_METRICS_BUCKETS - 1; i++)
    if (s <= rgpu_metrics_bucket_bounds[i]) return i;
  return RGPU_METRICS_BUCKETS - 1;
}

/* Codes are stored +1 so that 0 marks a free entry. Single writer per table. */
static void count_error(rgpu_metrics_counts *c, uint32_t code, uint64_t n) {
  uint64_t key = (uint64_t)code + 1;
  for (int i = 0; i < RGPU_METRICS_ERR_CODES; i++) {
    uint64_t k = ld(&c->err_code[i]);
    if (k == key) {
      add(&c->err_count[i], n);
      return;
    }
    if (k == 0) {
      add(&c->err_count[i], n); /* count first: a reader skips count 0 */
      __atomic_store_n(&c->err_code[i], key, __ATOMIC_RELEASE);
      return;
    }
  }
  add(&c->err_other, n);
}

int rgpu_metrics_note_status(uint64_t session_id, uint16_t opcode, uint32_t status) {
  const char *name = rgpu_driver_fault_name((CUresult)status);
  if (!name) return 0;
  /* One worker process is one session: later requests repeat the sticky
   * error, one line is the event. */
  static int logged;
  if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED)) {
    const char *op = rgpu_op_name(opcode);
    RGPU_WARN("session=%llu event=fault code=%u name=%s op=%s", (unsigned long long)session_id,
              (unsigned)status, name, op ? op : "unknown");
  }
  return 1;
}

uint64_t rgpu_metrics_now_ns(void) {
  if (!g_self) return 0;
  return rgpu_clock_ns();
}

void rgpu_metrics_bytes_sent(const struct iovec *iov, int n) {
  rgpu_metrics_slot *s = g_self;
  if (!s) return;
  uint64_t t = 0;
  for (int i = 0; i < n; i++) t += iov[i].iov_len;
  add(&s->c.bytes_out, t);
}

void rgpu_metrics_request(uint16_t opcode, uint32_t status, uint64_t ns, uint64_t bytes_in,
                          uint64_t mem_held) {
  rgpu_metrics_slot *s = g_self;
  if (!s) return;
  rgpu_metrics_counts *c = &s->c;
  unsigned op = opcode < RGPU_METRICS_OPS - 1 ? opcode : RGPU_METRICS_OPS - 1;
  add(&c->calls[op], 1);
  add(&c->op_ns[op], ns);
  /* "Send the image" is the cache protocol's question, not a failure. */
  if (status && status != RGPU_STATUS_IMAGE_NOT_CACHED) count_error(c, status, 1);
  add(&c->lat_bucket[bucket_of(ns)], 1);
  add(&c->lat_sum_ns, ns);
  add(&c->bytes_in, bytes_in);
  __atomic_store_n(&s->mem_held, mem_held, __ATOMIC_RELAXED);
}

void rgpu_metrics_staging_pin(unsigned pins, uint64_t ns) {
  rgpu_metrics_slot *s = g_self;
  if (!s) return;
  add(&s->c.staging_pins, pins);
  add(&s->c.staging_pin_ns, ns);
}

void rgpu_metrics_image_cache(int event) {
  rgpu_metrics_slot *s = g_self;
  if (!s || event < 0 || event >= RGPU_METRICS_IMAGE_EVENTS) return;
  add(&s->c.image_cache[event], 1);
}

void rgpu_metrics_session_end_reason(const char *reason) {
  rgpu_metrics_slot *s = g_self;
  if (!s || !reason) return;
  /* Plain bytes into shared memory: the listener reads them only after the
   * worker has exited. */
  snprintf(s->end_reason, sizeof s->end_reason, "%s", reason);
}

void rgpu_metrics_enter_worker(rgpu_metrics *m, int slot) {
  g_self = NULL;
  g_all = NULL;
  if (!m || slot < 0 || slot >= RGPU_METRICS_SLOTS) return;
  g_self = &m->slots[slot];
  g_all = m->slots;
}

void rgpu_metrics_session_client(uint32_t client_pid, const char *name, size_t name_len) {
  rgpu_metrics_slot *s = g_self;
  if (!s) return;
  /* The name may be read half-written by another worker (NVML_QUERY): the
   * reader copies it bounded and terminates it, so the worst is a torn
   * name, never a read past the slot. */
  size_t n = name_len < sizeof s->client_name - 1 ? name_len : sizeof s->client_name - 1;
  for (size_t i = 0; i < n; i++) s->client_name[i] = name[i] ? name[i] : '?';
  s->client_name[n] = 0;
  __atomic_store_n(&s->client_pid, client_pid, __ATOMIC_RELEASE);
}

void rgpu_metrics_session_device(int dev) {
  rgpu_metrics_slot *s = g_self;
  if (!s || dev < 0 || dev >= 64) return;
  __atomic_fetch_or(&s->devices, (uint64_t)1 << dev, __ATOMIC_RELAXED);
}

int rgpu_metrics_sessions(rgpu_metrics_session_info *out, int cap) {
  const rgpu_metrics_slot *all = g_all;
  if (!all) return -1;
  int n = 0;
  for (int i = 0; i < RGPU_METRICS_SLOTS && n < cap; i++) {
    const rgpu_metrics_slot *s = &all[i];
    if (!__atomic_load_n(&s->in_use, __ATOMIC_ACQUIRE)) continue;
    /* 0 until the worker's HELLO: a connection that is not a session yet. */
    uint32_t pid = __atomic_load_n(&s->client_pid, __ATOMIC_ACQUIRE);
    if (!pid) continue;
    rgpu_metrics_session_info *o = &out[n++];
    o->session_id = __atomic_load_n(&s->session_id, __ATOMIC_RELAXED);
    o->client_pid = pid;
    o->mem_held = ld(&s->mem_held);
    o->devices = ld(&s->devices);
    memcpy(o->client_name, s->client_name, sizeof o->client_name);
    o->client_name[sizeof o->client_name - 1] = 0;
  }
  return n;
}

int rgpu_metrics_slots_fd(const rgpu_metrics *m) { return m ? m->slots_fd : -1; }

int rgpu_metrics_enter_worker_fd(int slots_fd, int slot) {
  g_self = NULL;
  if (slots_fd < 0 || slot < 0 || slot >= RGPU_METRICS_SLOTS) return -1;
  size_t len = sizeof(rgpu_metrics_slot) * RGPU_METRICS_SLOTS;
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, slots_fd, 0);
  if (p == MAP_FAILED) return -1;
  /* Mapped for the rest of the worker's life: the process exits with it. */
  g_self = &((rgpu_metrics_slot *)p)[slot];
  g_all = p;
  return 0;
}

static void fold(rgpu_metrics_counts *dst, const rgpu_metrics_counts *src) {
  for (int i = 0; i < RGPU_METRICS_OPS; i++) {
    dst->calls[i] += ld(&src->calls[i]);
    dst->op_ns[i] += ld(&src->op_ns[i]);
  }
  for (int i = 0; i < RGPU_METRICS_ERR_CODES; i++) {
    uint64_t k = ld(&src->err_code[i]);
    if (k) count_error(dst, (uint32_t)(k - 1), ld(&src->err_count[i]));
  }
  dst->err_other += ld(&src->err_other);
  for (int i = 0; i < RGPU_METRICS_BUCKETS; i++) dst->lat_bucket[i] += ld(&src->lat_bucket[i]);
  dst->lat_sum_ns += ld(&src->lat_sum_ns);
  dst->bytes_in += ld(&src->bytes_in);
  dst->bytes_out += ld(&src->bytes_out);
  for (int i = 0; i < RGPU_METRICS_IMAGE_EVENTS; i++) dst->image_cache[i] += ld(&src->image_cache[i]);
  dst->staging_pins += ld(&src->staging_pins);
  dst->staging_pin_ns += ld(&src->staging_pin_ns);
}

/* Reason names come from the server's own code but end up in label values:
 * keep them to [a-z0-9:-] so the exposition stays parseable whatever. */
static void count_reason(reason_count *t, int n, const char *name) {
  char clean[24];
  size_t k = 0;
  for (const char *p = name; *p && k + 1 < sizeof clean; p++) {
    char ch = *p;
    if ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == ':')
      clean[k++] = ch;
    else if (ch >= 'A' && ch <= 'Z')
      clean[k++] = (char)(ch - 'A' + 'a');
    else
      clean[k++] = '_';
  }
  clean[k] = 0;
  if (!k) snprintf(clean, sizeof clean, "unknown");
  for (int i = 0; i < n; i++) {
    if (!t[i].name[0]) snprintf(t[i].name, sizeof t[i].name, "%s", clean);
    if (!strcmp(t[i].name, clean) || i == n - 1) {
      if (i == n - 1 && strcmp(t[i].name, clean)) snprintf(t[i].name, sizeof t[i].name, "other");
      t[i].n++;
      return;
    }
  }
}

int rgpu_metrics_session_begin(rgpu_metrics *m, uint64_t session_id, const char *transport) {
  if (!m) return -1;
  pthread_mutex_lock(&m->lock);
  m->sessions_total++;
  int slot = -1;
  for (int i = 0; i < RGPU_METRICS_SLOTS; i++) {
    if (m->slots[i].in_use) continue;
    rgpu_metrics_slot *s = &m->slots[i];
    memset(s, 0, sizeof *s);
    s->in_use = 1;
    s->session_id = session_id;
    snprintf(s->transport, sizeof s->transport, "%s", transport ? transport : "");
    slot = i;
    break;
  }
  if (slot < 0) m->sessions_untracked++;
  pthread_mutex_unlock(&m->lock);
  return slot;
}

void rgpu_metrics_session_pid(rgpu_metrics *m, int slot, pid_t pid) {
  if (!m || slot < 0 || slot >= RGPU_METRICS_SLOTS) return;
  pthread_mutex_lock(&m->lock);
  if (pid > 0) {
    m->slots[slot].pid = pid;
  } else {
    m->slots[slot].in_use = 0;
    count_reason(m->ended, END_REASONS, "fork-failed");
  }
  pthread_mutex_unlock(&m->lock);
}

void rgpu_metrics_reaped(rgpu_metrics *m, pid_t pid, int st) {
  if (!m || pid <= 0) return;
  pthread_mutex_lock(&m->lock);
  for (int i = 0; i < RGPU_METRICS_SLOTS; i++) {
    rgpu_metrics_slot *s = &m->slots[i];
    if (!s->in_use || s->pid != pid) continue;
    fold(&m->done, &s->c);
    char why[24];
    if (WIFSIGNALED(st))
      snprintf(why, sizeof why, "signal:%d", WTERMSIG(st));
    else if (s->end_reason[0])
      snprintf(why, sizeof why, "%.23s", s->end_reason);
    else
      snprintf(why, sizeof why, "exit:%d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    count_reason(m->ended, END_REASONS, why);
    s->in_use = 0;
    break;
  }
  pthread_mutex_unlock(&m->lock);
}

void rgpu_metrics_refused(rgpu_metrics *m, const char *reason) {
  if (!m) return;
  pthread_mutex_lock(&m->lock);
  count_reason(m->refused, 8, reason ? reason : "unknown");
  pthread_mutex_unlock(&m->lock);
}

/* ---- exposition text ----------------------------------------------------- */

static void putf(rgpu_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(rgpu_buf *b, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  rgpu_buf_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void help(rgpu_buf *b, const char *name, const char *type, const char *text) {
  putf(b, "# HELP %s %s\n# TYPE %s %s\n", name, text, name, type);
}

/* Prometheus floats: "+Inf" and a C-locale decimal point. */
static void put_le(rgpu_buf *b, double v) {
  if (v >= 1e300)
    putf(b, "+Inf");
  else
    putf(b, "%g", v);
}

/* An opcode's label value: its name, or 0xNNNN beyond the table. */
static const char *op_label(int op, char buf[8]) {
  const char *name = op < RGPU_METRICS_OPS - 1 ? rgpu_op_name((uint16_t)op) : NULL;
  if (name) return name;
  snprintf(buf, 8, "0x%04x", (unsigned)op);
  return buf;
}

int rgpu_metrics_render(rgpu_metrics *m, rgpu_buf *out) {
  if (!m) return -1;
  /* Snapshot under the lock (a reap folds concurrently), render outside. */
  rgpu_metrics_counts *all = calloc(1, sizeof *all);
  if (!all) return -1;
  uint64_t active = 0, mem_total = 0, total, untracked, scrapes, http_errors;
  reason_count ended[END_REASONS], refused[8];
  struct {
    uint64_t id;
    uint64_t mem;
    char transport[16];
  } *live = calloc(RGPU_METRICS_SLOTS, sizeof *live);
  if (!live) {
    free(all);
    return -1;
  }
  int nlive = 0;
  pthread_mutex_lock(&m->lock);
  fold(all, &m->done);
  for (int i = 0; i < RGPU_METRICS_SLOTS; i++) {
    rgpu_metrics_slot *s = &m->slots[i];
    if (!s->in_use) continue;
    fold(all, &s->c);
    uint64_t mem = ld(&s->mem_held);
    live[nlive].id = s->session_id;
    live[nlive].mem = mem;
    memcpy(live[nlive].transport, s->transport, sizeof s->transport);
    nlive++;
    mem_total += mem;
  }
  active = (uint64_t)nlive;
  total = m->sessions_total;
  untracked = m->sessions_untracked;
  memcpy(ended, m->ended, sizeof ended);
  memcpy(refused, m->refused, sizeof refused);
  scrapes = ++m->scrapes;
  http_errors = m->http_errors;
  pthread_mutex_unlock(&m->lock);

  double up = rgpu_clock_elapsed_s(m->started_ns);

  help(out, "rgpu_up_seconds", "gauge", "Seconds since the metrics endpoint started.");
  putf(out, "rgpu_up_seconds %.3f\n", up);
  help(out, "rgpu_sessions_active", "gauge", "Sessions with a live worker process.");
  putf(out, "rgpu_sessions_active %llu\n", (unsigned long long)active);
  help(out, "rgpu_sessions_total", "counter", "Sessions started (a worker was forked).");
  putf(out, "rgpu_sessions_total %llu\n", (unsigned long long)total);
  help(out, "rgpu_sessions_untracked_total", "counter",
       "Sessions beyond the metrics slots: counted here and in sessions_total only.");
  putf(out, "rgpu_sessions_untracked_total %llu\n", (unsigned long long)untracked);
  help(out, "rgpu_sessions_ended_total", "counter", "Sessions ended, by reason.");
  for (int i = 0; i < END_REASONS && ended[i].name[0]; i++)
    putf(out, "rgpu_sessions_ended_total{reason=\"%s\"} %llu\n", ended[i].name, (unsigned long long)ended[i].n);
  help(out, "rgpu_sessions_refused_total", "counter", "Connections refused before a session began, by reason.");
  for (int i = 0; i < 8 && refused[i].name[0]; i++)
    putf(out, "rgpu_sessions_refused_total{reason=\"%s\"} %llu\n", refused[i].name,
         (unsigned long long)refused[i].n);

  help(out, "rgpu_calls_total", "counter", "Requests handled, by opcode.");
  uint64_t calls_all = 0;
  char label[8];
  for (int op = 0; op < RGPU_METRICS_OPS; op++) {
    if (!all->calls[op]) continue;
    calls_all += all->calls[op];
    putf(out, "rgpu_calls_total{op=\"%s\"} %llu\n", op_label(op, label),
         (unsigned long long)all->calls[op]);
  }
  help(out, "rgpu_request_seconds_total", "counter",
       "Time requests spent in the session thread, by opcode (waits moved to background threads excluded).");
  for (int op = 0; op < RGPU_METRICS_OPS; op++)
    if (all->calls[op])
      putf(out, "rgpu_request_seconds_total{op=\"%s\"} %.9f\n", op_label(op, label),
           (double)all->op_ns[op] / 1e9);
  help(out, "rgpu_calls_total_all", "counter", "Requests handled, all opcodes.");
  putf(out, "rgpu_calls_total_all %llu\n", (unsigned long long)calls_all);

  help(out, "rgpu_errors_total", "counter", "Requests that failed, by CUresult code.");
  uint64_t errs_all = all->err_other;
  for (int i = 0; i < RGPU_METRICS_ERR_CODES; i++) {
    if (!all->err_code[i]) continue;
    errs_all += all->err_count[i];
    putf(out, "rgpu_errors_total{code=\"%llu\"} %llu\n", (unsigned long long)(all->err_code[i] - 1),
         (unsigned long long)all->err_count[i]);
  }
  if (all->err_other) putf(out, "rgpu_errors_total{code=\"other\"} %llu\n", (unsigned long long)all->err_other);
  help(out, "rgpu_errors_all", "counter", "Requests that failed, all codes.");
  putf(out, "rgpu_errors_all %llu\n", (unsigned long long)errs_all);

  help(out, "rgpu_bytes_received_total", "counter", "Frame bytes read from clients (headers included).");
  putf(out, "rgpu_bytes_received_total %llu\n", (unsigned long long)all->bytes_in);
  help(out, "rgpu_bytes_sent_total", "counter", "Frame bytes written to clients.");
  putf(out, "rgpu_bytes_sent_total %llu\n", (unsigned long long)all->bytes_out);

  help(out, "rgpu_image_cache_events_total", "counter",
       "Kernel image cache: module loads served from it (hit), that asked the client for the "
       "image (miss), images stored, entries that failed verification and were removed (corrupt).");
  static const char *const image_events[RGPU_METRICS_IMAGE_EVENTS] = {"hit", "miss", "store",
                                                                      "corrupt"};
  for (int i = 0; i < RGPU_METRICS_IMAGE_EVENTS; i++)
    putf(out, "rgpu_image_cache_events_total{event=\"%s\"} %llu\n", image_events[i],
         (unsigned long long)all->image_cache[i]);

  help(out, "rgpu_staging_pins_total", "counter",
       "Copies that pinned their own staging memory because the session's pinned pools were used up.");
  putf(out, "rgpu_staging_pins_total %llu\n", (unsigned long long)all->staging_pins);
  help(out, "rgpu_staging_pin_seconds_total", "counter", "Time those copies spent pinning and unpinning.");
  putf(out, "rgpu_staging_pin_seconds_total %.9f\n", (double)all->staging_pin_ns / 1e9);

  help(out, "rgpu_request_duration_seconds", "histogram",
       "Time a request spends in the session thread (waits moved to background threads excluded).");
  uint64_t cum = 0;
  for (int i = 0; i < RGPU_METRICS_BUCKETS; i++) {
    cum += all->lat_bucket[i];
    putf(out, "rgpu_request_duration_seconds_bucket{le=\"");
    put_le(out, rgpu_metrics_bucket_bounds[i]);
    putf(out, "\"} %llu\n", (unsigned long long)cum);
  }
  putf(out, "rgpu_request_duration_seconds_sum %.9f\n", (double)all->lat_sum_ns / 1e9);
  putf(out, "rgpu_request_duration_seconds_count %llu\n", (unsigned long long)cum);

  help(out, "rgpu_device_memory_bytes", "gauge", "Device memory held by all live sessions (cuMemAlloc).");
  putf(out, "rgpu_device_memory_bytes %llu\n", (unsigned long long)mem_total);
  help(out, "rgpu_session_device_memory_bytes", "gauge", "Device memory held per live session.");
  for (int i = 0; i < nlive; i++)
    putf(out, "rgpu_session_device_memory_bytes{session=\"%llu\",transport=\"%s\"} %llu\n",
         (unsigned long long)live[i].id, live[i].transport[0] ? live[i].transport : "unknown",
         (unsigned long long)live[i].mem);
  help(out, "rgpu_metrics_scrapes_total", "counter", "Metrics requests answered with 200.");
  putf(out, "rgpu_metrics_scrapes_total %llu\n", (unsigned long long)scrapes);
  help(out, "rgpu_metrics_http_errors_total", "counter",
       "Metrics connections answered with an error or dropped (bad request, timeout, too many).");
  putf(out, "rgpu_metrics_http_errors_total %llu\n", (unsigned long long)http_errors);
  free(live);
  free(all);
  return out->err ? -1 : 0;
}

/* ---- HTTP ------------------------------------------------------------------ */

int rgpu_metrics_http_parse(const char *buf, size_t len, int *head) {
  if (head) *head = 0;
  /* The head ends at the first empty line; tolerate bare LF as RFC 9112
   * allows. */
  size_t end = 0;
  for (size_t i = 0; i < len; i++) {
    if (buf[i] != '\n') continue;
    if (i >= 1 && buf[i - 1] == '\n') { end = i + 1; break; }
    if (i >= 2 && buf[i - 1] == '\r' && buf[i - 2] == '\n') { end = i + 1; break; }
  }
  if (!end) {
    if (len >= RGPU_METRICS_MAX_REQUEST) return 431;
    /* Reject a bad request line early, without waiting for the rest. */
    const char *nl = memchr(buf, '\n', len);
    if (!nl) return len > 2048 ? 400 : 0;
  }
  size_t lend = 0;
  while (lend < len && buf[lend] != '\n') lend++;
  if (lend > 0 && buf[lend - 1] == '\r') lend--;
  /* METHOD SP TARGET SP HTTP/1.x */
  char line[2048];
  if (lend >= sizeof line) return 414;
  memcpy(line, buf, lend);
  line[lend] = 0;
  for (size_t i = 0; i < lend; i++)
    if ((unsigned char)line[i] < 0x20 || (unsigned char)line[i] == 0x7f) return 400;
  char *sp1 = strchr(line, ' ');
  if (!sp1) return 400;
  *sp1 = 0;
  char *target = sp1 + 1;
  char *sp2 = strchr(target, ' ');
  if (!sp2) return 400;
  *sp2 = 0;
  const char *version = sp2 + 1;
  if (!line[0] || !target[0] || strchr(version, ' ')) return 400;
  for (const char *p = line; *p; p++)
    if (*p < 'A' || *p > 'Z') return 400;
  if (strncmp(version, "HTTP/", 5)) return 400;
  if (strcmp(version, "HTTP/1.1") && strcmp(version, "HTTP/1.0")) return 505;
  int is_head = !strcmp(line, "HEAD");
  if (strcmp(line, "GET") && !is_head) return end ? 405 : 0;
  if (!end) return 0; /* good line so far: wait for the headers */
  /* Headers: "name: value" lines, no obs-fold; names are tokens. */
  size_t p = lend;
  while (p < len && buf[p] != '\n') p++;
  p++;
  while (p < end) {
    size_t q = p;
    while (q < end && buf[q] != '\n') q++;
    size_t l = q - p;
    if (l && buf[q - 1] == '\r') l--;
    if (l == 0) break;
    if (buf[p] == ' ' || buf[p] == '\t') return 400;
    const char *colon = memchr(buf + p, ':', l);
    if (!colon || colon == buf + p) return 400;
    for (const char *c = buf + p; c < colon; c++)
      if (*c <= ' ' || *c >= 0x7f) return 400;
    p = q + 1;
  }
  /* Target: origin form, query string ignored. */
  size_t tl = strcspn(target, "?");
  if (tl != 8 || strncmp(target, "/metrics", 8)) return 404;
  /* Only a request that is served says HEAD (the fuzz target's rule:
   * "HEAD * HTTP/1.1" reported it with its 404). */
  if (head) *head = is_head;
  return 200;
}

static const char *status_text(int code) {
  switch (code) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
  }
}

static void build_response(rgpu_metrics *m, int code, int head, rgpu_buf *out) {
  rgpu_buf body;
  rgpu_buf_init(&body);
  if (code == 200) {
    if (rgpu_metrics_render(m, &body)) {
      code = 503;
      rgpu_buf_reset(&body);
      body.err = 0;
    }
  }
  if (code != 200) {
    char t[96];
    int n = snprintf(t, sizeof t, "%d %s\n", code, status_text(code));
    rgpu_buf_put(&body, t, (size_t)n);
    pthread_mutex_lock(&m->lock);
    m->http_errors++;
    pthread_mutex_unlock(&m->lock);
  }
  char hdr[320];
  int n = snprintf(hdr, sizeof hdr,
                   "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%sConnection: close\r\n\r\n",
                   code, status_text(code),
                   code == 200 ? "text/plain; version=0.0.4; charset=utf-8" : "text/plain; charset=utf-8",
                   body.len, code == 405 ? "Allow: GET, HEAD\r\n" : "");
  rgpu_buf_put(out, hdr, (size_t)n);
  if (!head) rgpu_buf_put(out, body.data, body.len);
  rgpu_buf_free(&body);
}

static void conn_close(rgpu_metrics *m, int i) {
  pthread_mutex_lock(&m->lock);
  close(m->conns[i].fd);
  m->conns[i].fd = -1;
  pthread_mutex_unlock(&m->lock);
  rgpu_buf_free(&m->conns[i].resp);
  m->conns[i].req_len = 0;
  m->conns[i].resp_off = 0;
  m->conns[i].writing = 0;
}

static void conn_start_response(rgpu_metrics *m, int i, int code, int head) {
  rgpu_buf_init(&m->conns[i].resp);
  build_response(m, code, head, &m->conns[i].resp);
  m->conns[i].resp_off = 0;
  m->conns[i].writing = 1;
  /* The whole exchange shares one deadline, so a client that stops reading
   * is dropped as surely as one that stops writing. */
}

static void accept_all(rgpu_metrics *m) {
  for (;;) {
    /* The fd is stored under the lock so a fork never sees it half-owned. */
    pthread_mutex_lock(&m->lock);
    int fd = accept4(m->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    int slot = -1;
    if (fd >= 0)
      for (int i = 0; i < RGPU_METRICS_MAX_CONNS; i++)
        if (m->conns[i].fd < 0) {
          slot = i;
          m->conns[i].fd = fd;
          break;
        }
    if (fd >= 0 && slot < 0) m->http_errors++;
    pthread_mutex_unlock(&m->lock);
    if (fd < 0) return;
    if (slot < 0) {
      /* Full: a short answer, best effort, never a wait. */
      static const char busy[] =
          "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
      (void)!send(fd, busy, sizeof busy - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      close(fd);
      continue;
    }
    m->conns[slot].deadline_ns = rgpu_deadline_in_ms(RGPU_METRICS_REQ_TIMEOUT_MS);
    m->conns[slot].req_len = 0;
    m->conns[slot].writing = 0;
  }
}

static void conn_io(rgpu_metrics *m, int i, short rev) {
  if (m->conns[i].writing) {
    rgpu_buf *r = &m->conns[i].resp;
    while (m->conns[i].resp_off < r->len) {
      ssize_t n = send(m->conns[i].fd, r->data + m->conns[i].resp_off, r->len - m->conns[i].resp_off,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        m->conns[i].resp_off += (size_t)n;
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
      conn_close(m, i);
      return;
    }
    /* Done: half-close so the client reads EOF, then drop. */
    shutdown(m->conns[i].fd, SHUT_WR);
    conn_close(m, i);
    return;
  }
  if (!(rev & (POLLIN | POLLHUP | POLLERR))) return;
  for (;;) {
    size_t room = RGPU_METRICS_MAX_REQUEST - m->conns[i].req_len;
    if (room == 0) break;
    ssize_t n = recv(m->conns[i].fd, m->conns[i].req + m->conns[i].req_len, room, MSG_DONTWAIT);
    if (n > 0) {
      m->conns[i].req_len += (size_t)n;
      continue;
    }
    if (n == 0) {
      /* EOF before a complete request: nothing to answer. */
      int head;
      if (rgpu_metrics_http_parse(m->conns[i].req, m->conns[i].req_len, &head) == 0) {
        pthread_mutex_lock(&m->lock);
        m->http_errors++;
        pthread_mutex_unlock(&m->lock);
        conn_close(m, i);
        return;
      }
      break;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
    conn_close(m, i);
    return;
  }
  int head = 0;
  int code = rgpu_metrics_http_parse(m->conns[i].req, m->conns[i].req_len, &head);
  if (code == 0) return;
  conn_start_response(m, i, code, head);
  conn_io(m, i, POLLOUT);
}

static void *http_thread(void *arg) {
  rgpu_thread_name("rgpu-metrics");
  rgpu_metrics *m = arg;
  struct pollfd pfd[RGPU_METRICS_MAX_CONNS + 2];
  int idx[RGPU_METRICS_MAX_CONNS + 2];
  for (;;) {
    int n = 0, timeout = -1;
    pfd[n].fd = m->wake[0];
    pfd[n].events = POLLIN;
    idx[n++] = -1;
    pfd[n].fd = m->lfd;
    pfd[n].events = POLLIN;
    idx[n++] = -2;
    for (int i = 0; i < RGPU_METRICS_MAX_CONNS; i++) {
      if (m->conns[i].fd < 0) continue;
      int left = rgpu_deadline_left_ms(m->conns[i].deadline_ns, 60000);
      if (left == 0) {
        /* Slow or silent client: drop it. */
        pthread_mutex_lock(&m->lock);
        m->http_errors++;
        pthread_mutex_unlock(&m->lock);
        conn_close(m, i);
        continue;
      }
      if (timeout < 0 || left < timeout) timeout = left;
      pfd[n].fd = m->conns[i].fd;
      pfd[n].events = m->conns[i].writing ? POLLOUT : POLLIN;
      idx[n++] = i;
    }
    int pr = poll(pfd, (nfds_t)n, timeout);
    if (pr < 0) {
      if (errno == EINTR) continue;
      RGPU_ERROR("metrics: poll: %s", strerror(errno));
      return NULL;
    }
    if (pfd[0].revents) return NULL; /* rgpu_metrics_close */
    if (pfd[1].revents & POLLIN) accept_all(m);
    for (int k = 2; k < n; k++)
      if (pfd[k].revents && m->conns[idx[k]].fd == pfd[k].fd) conn_io(m, idx[k], pfd[k].revents);
  }
}

int rgpu_metrics_open(const char *uri, rgpu_metrics **out, char *err, size_t errlen) {
  *out = NULL;
  if (g_metrics) {
    snprintf(err, errlen, "metrics: already open in this process");
    return -1;
  }
  rgpu_uri u = {0};
  char uerr[256];
  if (uri && rgpu_uri_parse(uri, &u, uerr, sizeof uerr)) {
    snprintf(err, errlen, "--metrics %s: %s", uri, uerr);
    return -1;
  }
  if (uri && u.scheme != RGPU_URI_TCP) {
    snprintf(err, errlen, "--metrics %s: expected tcp://HOST:PORT (HTTP, no TLS)", uri);
    return -1;
  }
  rgpu_metrics *m = calloc(1, sizeof *m);
  if (!m) {
    snprintf(err, errlen, "metrics: out of memory");
    return -1;
  }
  m->lfd = -1;
  m->slots_fd = -1;
  m->wake[0] = m->wake[1] = -1;
  for (int i = 0; i < RGPU_METRICS_MAX_CONNS; i++) m->conns[i].fd = -1;
  pthread_mutex_init(&m->lock, NULL);
  m->started_ns = rgpu_clock_ns();
  m->map_len = sizeof(rgpu_metrics_slot) * RGPU_METRICS_SLOTS;
  /* A memfd, not an anonymous mapping: workers are forked by the fork
   * server (rgpu_forkserver.h), which started before this mapping existed,
   * so each worker maps the slots from this descriptor. */
  m->slots_fd = memfd_create("rgpu-metrics", MFD_CLOEXEC);
  if (m->slots_fd < 0 || ftruncate(m->slots_fd, (off_t)m->map_len)) {
    snprintf(err, errlen, "metrics: memfd of %zu bytes: %s", m->map_len, strerror(errno));
    goto fail;
  }
  m->slots = mmap(NULL, m->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, m->slots_fd, 0);
  if (m->slots == MAP_FAILED) {
    m->slots = NULL;
    snprintf(err, errlen, "metrics: mmap of %zu bytes: %s", m->map_len, strerror(errno));
    goto fail;
  }
  if (!uri) {
    /* The session table only (no HTTP endpoint, no thread): workers still
     * count into their slots, so NVML_QUERY can list every session. */
    g_metrics = m;
    *out = m;
    return 0;
  }
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  char port[8];
  snprintf(port, sizeof port, "%u", (unsigned)u.port);
  int gai = getaddrinfo(u.host[0] ? u.host : NULL, port, &hints, &res);
  if (gai) {
    snprintf(err, errlen, "--metrics %s: %s", uri, gai_strerror(gai));
    goto fail;
  }
  int last = 0;
  for (struct addrinfo *a = res; a; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      last = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 64) == 0) {
      m->lfd = fd;
      break;
    }
    last = errno;
    close(fd);
  }
  freeaddrinfo(res);
  if (m->lfd < 0) {
    snprintf(err, errlen, "--metrics %s: cannot listen: %s", uri, strerror(last));
    goto fail;
  }
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  char host[128] = "?", serv[16] = "?";
  if (getsockname(m->lfd, (struct sockaddr *)&ss, &sl) == 0)
    getnameinfo((struct sockaddr *)&ss, sl, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV);
  snprintf(m->addr, sizeof m->addr, strchr(host, ':') ? "[%s]:%s" : "%s:%s", host, serv);
  if (pipe2(m->wake, O_CLOEXEC | O_NONBLOCK)) {
    snprintf(err, errlen, "metrics: pipe: %s", strerror(errno));
    goto fail;
  }
  pthread_once(&g_atfork_once, register_atfork);
  g_metrics = m;
  if (pthread_create(&m->th, NULL, http_thread, m)) {
    g_metrics = NULL;
    snprintf(err, errlen, "metrics: cannot start the HTTP thread");
    goto fail;
  }
  m->th_started = 1;
  *out = m;
  return 0;
fail:
  if (m->lfd >= 0) close(m->lfd);
  if (m->wake[0] >= 0) close(m->wake[0]);
  if (m->wake[1] >= 0) close(m->wake[1]);
  if (m->slots) munmap(m->slots, m->map_len);
  if (m->slots_fd >= 0) close(m->slots_fd);
  pthread_mutex_destroy(&m->lock);
  free(m);
  return -1;
}

const char *rgpu_metrics_address(const rgpu_metrics *m) { return m ? m->addr : ""; }

void rgpu_metrics_close(rgpu_metrics *m) {
  if (!m) return;
  if (m->th_started) {
    char b = 1;
    (void)!write(m->wake[1], &b, 1);
    pthread_join(m->th, NULL);
  }
  for (int i = 0; i < RGPU_METRICS_MAX_CONNS; i++)
    if (m->conns[i].fd >= 0) conn_close(m, i);
  if (g_metrics == m) g_metrics = NULL;
  close(m->lfd);
  close(m->wake[0]);
  close(m->wake[1]);
  munmap(m->slots, m->map_len);
  close(m->slots_fd);
  pthread_mutex_destroy(&m->lock);
  free(m);
}
