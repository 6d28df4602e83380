/* rgpu_metrics: the server's counters, served in the Prometheus text format
 * (version 0.0.4) over HTTP/1.1 at GET /metrics.
 *
 * Sessions run in forked worker processes, so their counts cannot live in
 * the listener's memory.  The listener maps one shared segment (a memfd):
 * an array of per-session slots.  It hands the memfd and a free slot to each
 * new worker (through the fork server, rgpu_forkserver.h), which maps it;
 * the worker adds to its own slot only (relaxed
 * atomics, no locks shared across processes, so a worker that dies in the
 * middle of an update cannot wedge anyone).  When the listener reaps a worker
 * it folds the slot into its own totals and frees the slot, so counters are
 * monotonic across sessions and a crashed worker's counts are kept.
 *
 * The HTTP side is one thread of the listener process with non-blocking
 * sockets: a request must arrive within RGPU_METRICS_REQ_TIMEOUT_MS and fit
 * in RGPU_METRICS_MAX_REQUEST bytes, at most RGPU_METRICS_MAX_CONNS are open
 * at once, and every response closes its connection.  A slow or hostile
 * scraper therefore costs one socket for a few seconds, never the accept
 * loop.  Workers are not forked from the listener, so they never hold the
 * metrics port (the thread's descriptors are also closed in any child a
 * fork of the listener makes, by pthread_atfork).
 *
 * Without rgpu_metrics_open() every call here is a cheap no-op, so the
 * worker code, its tests and the fuzzer need no special case. */
#ifndef RGPU_METRICS_H
#define RGPU_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "rgpu_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RGPU_METRICS_SLOTS 1024         /* live sessions counted in detail */
#define RGPU_METRICS_OPS 256            /* request opcodes 0..254; 255 = any other */
#define RGPU_METRICS_ERR_CODES 32       /* distinct CUresult codes per slot */
#define RGPU_METRICS_BUCKETS 14         /* latency histogram, +Inf included */
#define RGPU_METRICS_MAX_REQUEST 8192   /* request line + headers */
#define RGPU_METRICS_MAX_CONNS 32
#define RGPU_METRICS_REQ_TIMEOUT_MS 5000

typedef struct rgpu_metrics rgpu_metrics;

/* Binds tcp://HOST:PORT (port 0 picks one), maps the slots and starts the
 * HTTP thread.  Returns 0, or -1 with a message in err.  One per process:
 * the worker-side calls below find it through a process-wide pointer. */
int rgpu_metrics_open(const char *uri, rgpu_metrics **out, char *err, size_t errlen);
/* uri NULL: the slots only (the session table that NVML_QUERY reads), no
 * HTTP endpoint and no thread; rgpu_metrics_address is then "". */
/* Stops the thread, closes the socket, unmaps the slots. */
void rgpu_metrics_close(rgpu_metrics *m);
/* "127.0.0.1:9100" (the bound port). */
const char *rgpu_metrics_address(const rgpu_metrics *m);

/* ---- listener side (m may be NULL: no-op) ------------------------------- */
/* A session is about to be forked: returns its slot (or -1 when all slots
 * are busy; the session is then counted in totals only). */
int rgpu_metrics_session_begin(rgpu_metrics *m, uint64_t session_id, const char *transport);
/* After fork: the worker's pid, or pid <= 0 if the fork failed. */
void rgpu_metrics_session_pid(rgpu_metrics *m, int slot, pid_t pid);
/* waitpid reported pid: folds its slot into the totals.  Unknown pids
 * (refusers) are ignored. */
void rgpu_metrics_reaped(rgpu_metrics *m, pid_t pid, int wait_status);
/* A connection refused before any worker ("server-full", "flood", "fork"). */
void rgpu_metrics_refused(rgpu_metrics *m, const char *reason);

/* ---- worker side (no-op unless the process is a worker with a slot) ------ */
/* In the forked child, before serving: makes `slot` this process's own. */
void rgpu_metrics_enter_worker(rgpu_metrics *m, int slot);
/* The listener's memfd of the slots, for workers forked elsewhere; -1 for
 * m == NULL. */
int rgpu_metrics_slots_fd(const rgpu_metrics *m);
/* In a worker forked by the fork server: maps the slots from slots_fd (the
 * caller still closes it) and makes `slot` this process's own.  0, or -1
 * (no fd, no slot, mmap failed: the worker counts nothing). */
int rgpu_metrics_enter_worker_fd(int slots_fd, int slot);
/* CLOCK_MONOTONIC in ns when this process counts requests, else 0 (so a
 * worker without metrics does not pay for the clock). */
uint64_t rgpu_metrics_now_ns(void);
/* One request handled: its opcode, CUresult, time in the session thread,
 * bytes read (header + payload), and the session's device memory after it. */
void rgpu_metrics_request(uint16_t opcode, uint32_t status, uint64_t ns, uint64_t bytes_in,
                          uint64_t mem_held);
/* Frames written to the client (any thread of the worker: replies of
 * background waits included). */
struct iovec;
void rgpu_metrics_bytes_sent(const struct iovec *iov, int n);
/* The session's end reason ("eof", "goodbye", "hello-refused", ...; at most
 * 23 characters kept), written just before the worker exits. */
void rgpu_metrics_session_end_reason(const char *reason);
/* A copy pinned its own staging memory (cuMemHostRegister) because the
 * session's pinned pools were used up or may not grow: ns is what the
 * pinning (or, with pins 0, the unpinning) cost.  Counted because it is
 * slow next to a copy from the pools. */
void rgpu_metrics_staging_pin(unsigned pins, uint64_t ns);

/* The session table.  A worker records its client's pid and name (from
 * HELLO; name_len bytes, at most 31 kept) and each device it makes a
 * context on; rgpu_metrics_sessions copies the live sessions that said
 * HELLO into out (at most cap) and returns how many, or -1 in a process
 * without slots (the caller then knows only its own session). */
typedef struct {
  uint64_t session_id;
  uint32_t client_pid;
  uint64_t mem_held; /* the session's device memory (allocations and module globals) */
  uint64_t devices;  /* bit d: a context on device d */
  char client_name[32];
} rgpu_metrics_session_info;
void rgpu_metrics_session_client(uint32_t client_pid, const char *name, size_t name_len);
void rgpu_metrics_session_device(int dev);
int rgpu_metrics_sessions(rgpu_metrics_session_info *out, int cap);

/* Logs the session's first device fault (a CUresult that leaves the context
 * unusable: 700 illegal address, 702 launch timeout, 715-719 illegal
 * instruction, misaligned/invalid address, invalid PC, launch failure) as
 * one structured line "session=N event=fault code=C name=... op=OP", and
 * counts it.  Works with or without metrics; any thread.  Returns 1 for a
 * fault code. */
int rgpu_metrics_note_status(uint64_t session_id, uint16_t opcode, uint32_t status);

/* Kernel image cache events of this worker (rgpu_image_cache.h, issue 15):
 * a MODULE_LOAD served from the cache, one that had to ask for the image,
 * an image stored, an entry that failed verification (removed). */
enum {
  RGPU_METRICS_IMAGE_HIT = 0,
  RGPU_METRICS_IMAGE_MISS = 1,
  RGPU_METRICS_IMAGE_STORE = 2,
  RGPU_METRICS_IMAGE_CORRUPT = 3,
  RGPU_METRICS_IMAGE_EVENTS = 4
};
void rgpu_metrics_image_cache(int event);

/* ---- pure parts, exposed for tests --------------------------------------- */
/* Appends the whole exposition text to out.  Returns 0, or -1 if out ran
 * out of memory. */
int rgpu_metrics_render(rgpu_metrics *m, rgpu_buf *out);

/* Parses an HTTP/1.x request head in buf[0..len).  Returns 0 while more
 * bytes are needed, else the HTTP status to answer: 200 (GET or HEAD of
 * /metrics; *head set for HEAD), 404 (other path), 405 (other method), 400
 * (malformed), 414 (request line over 2 KiB), 431 (head larger than RGPU_METRICS_MAX_REQUEST), 505 (not
 * HTTP/1.x). */
int rgpu_metrics_http_parse(const char *buf, size_t len, int *head);

/* Bucket upper bounds in seconds (the last is +Inf). */
extern const double rgpu_metrics_bucket_bounds[RGPU_METRICS_BUCKETS];

#ifdef __cplusplus
}
#endif
#endif
