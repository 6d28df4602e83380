/* State shared by the session loop (rgpu_worker.c), the driver and contexts
 * (rgpu_device.c), the handlers (rgpu_handlers.c, rgpu_graph.c,
 * rgpu_bulk.c), background jobs (rgpu_jobs.c) and staging (rgpu_staging.c).  What one request may do is
 * in rgpu_req.h; the dispatch table is generated (rgpu_dispatch.h). */
#ifndef RGPU_WORKER_INTERNAL_H
#define RGPU_WORKER_INTERNAL_H

#include <pthread.h>

#include "rgpu_chunk_pool.h"
#include "rgpu_dispatch.h"
#include "rgpu_driver.h"
#include "rgpu_messages.h"
#include "rgpu_output.h"
#include "rgpu_replay.h"
#include "rgpu_req.h"
#include "rgpu_session.h"
#include "rgpu_staging.h"
#include "rgpu_worker.h"

#define RGPU_MAX_DEVICES 64
_Static_assert(sizeof(((rgpu_worker_config *)0)->devices) / sizeof(int) == RGPU_MAX_DEVICES,
               "--devices holds one entry per possible device");

/* Background completion (rgpu_jobs.c): jobs in flight and their threads. */
typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t cond;     /* a job or a completion thread ended (with lock) */
  struct rgpu_job *inflight;
  int n;
  uint64_t order;          /* jobs submitted so far (under lock) */
  uint64_t last_reply_ns;  /* rgpu_clock_ns when a job last sent a reply (atomic) */
  int replies_pending;     /* jobs in flight that will send a reply (atomic) */
  struct rgpu_job_queues *queues; /* per-stream completion threads */
  int wake_fd;             /* eventfd a reading barrier polls beside the connection (0: none) */
  int readers;             /* reading barriers waiting (under lock): job_done signals wake_fd */
  /* Completed marker events kept for reuse (under lock), with the context
   * they belong to: rgpu_worker_marker_pooled. */
  struct {
    CUcontext ctx;
    CUevent ev;
  } markers[64];
  int n_markers;
} rgpu_worker_jobs;

/* Small host-to-device copies packed into one staging buffer per stream
 * (rgpu_staging.c, issue 14).  Only the session thread touches it. */
typedef struct {
  void *buf;        /* the open batch's staging buffer; NULL: none open */
  void *pinned;     /* what rgpu_staging_get pinned for it (usually NULL) */
  size_t used;      /* bytes handed out (aligned) */
  unsigned copies;  /* copies placed in it */
  CUstream stream;  /* the stream every copy of the batch was enqueued on */
  CUcontext ctx;    /* its context (the legacy stream differs per device) */
  uint64_t sealed;  /* batches sealed so far (for tests and the log) */
} rgpu_small_h2d;

/* A broken connection the session waits to be resumed on (rgpu_worker.c). */
typedef struct {
  int lost;               /* the connection broke; waiting for RESUME */
  double lost_at;         /* CLOCK_MONOTONIC seconds */
  int handed_off;         /* a fresh worker passed its RESUME connection on */
  int draining;           /* RGPU_CTL_DRAIN: no waiting for a resume any more */
  rgpu_conn *orig_conn;   /* the conn serve() was given (its caller closes it) */
} rgpu_worker_resume;

struct rgpu_worker {
  rgpu_worker_config cfg;
  int hello_done;
  uint32_t caps; /* negotiated: client's AND server's */
  uint8_t session_token[32];
  char job_token[128];   /* the --token-dir file that authenticated the HELLO; "" = none */
  uint32_t client_pid;    /* from HELLO: NVML_QUERY's process list */
  char client_name[32];
  uint64_t calls;
  const char *end_reason;

  /* Driver and contexts: loaded after an authenticated HELLO. */
  int drv_state; /* 0 not tried, 1 loaded, -1 failed */
  /* How long the session thread polls for the client's next frame before
   * it blocks (rgpu_spin.h; RGPU_SPIN_US, default 200 us): a program's
   * next request follows the reply it waited for within tens of us.  0 for
   * sessions that reach the worker through the listener's relay (tls,
   * quic: rgpu_worker_serve). */
  unsigned spin_us;
  rgpu_driver drv;
  char drv_err[768];
  int device_count; /* the devices the session sees (--devices) */
  int cur_dev; /* -1: none current yet (device 0 is retained lazily) */
  /* Session device -> the driver's ordinal (--devices); identity without a
   * list.  Every cuDeviceGet goes through rgpu_worker_ordinal. */
  int ordinal[RGPU_MAX_DEVICES];
  CUcontext ctx[RGPU_MAX_DEVICES];
  /* Per device: the event the last RGPU_REQ_HOST_ORDERED copy recorded,
   * which the device's other streams, and streams made later, wait for
   * (rgpu_handlers.c, host_ordered_fence).  NULL: none yet. */
  CUevent host_fence[RGPU_MAX_DEVICES];

  /* Session tables. */
  rgpu_alloc_table allocs;
  rgpu_handle_map streams;
  rgpu_handle_map events;
  rgpu_handle_map modules; /* ptr: rgpu_module_rec * */
  rgpu_handle_map arrays;  /* ptr: rgpu_array_rec * (rgpu_handlers_array.c) */
  /* Texture and surface objects by the driver's value (the client names
   * none: a kernel parameter carries the driver's own handle). */
  rgpu_handle_map texobjs;
  rgpu_handle_map surfobjs;
  uint64_t array_bytes; /* device bytes held by arrays: counted by the quota */
  /* Virtual memory management (rgpu_handlers_vmm.c): reservations and
   * mappings (for mappings, module_id holds the physical allocation's id),
   * the physical allocations by the client's ids (ptr: vmm_phys *), and
   * their bytes, counted by the quota. */
  rgpu_alloc_table vmm_reserved;
  rgpu_alloc_table vmm_mapped;
  rgpu_handle_map vmm_handles;
  rgpu_handle_map vmm_access; /* id: an accessible mapping's address */
  uint64_t vmm_bytes;
  /* MANAGED_PULL's copies of what it last sent, by device address
   * (rgpu_handlers_managed.c); ptr: a managed_copy. */
  rgpu_handle_map managed_copies;
  uint64_t managed_copy_bytes;
  struct rgpu_graph_state *graphs; /* rgpu_graph.c; created on first use */
  struct rgpu_graph_lib *graph_libs; /* rgpu_graph_lib.c; created on first use */
  /* Advanced by every free and module unload: a library call captured into
   * a graph before it was checked against memory that may be gone. */
  uint64_t graph_lib_epoch;

  /* Request handling (rgpu_req.h). */
  rgpu_req *req;     /* the request being handled (NULL between requests):
                      * rgpu_worker_fail writes its message */
  rgpu_buf rep_buf;  /* storage of req->rep, reused; the loop sends it after
                      * handle_frame returned (a second iovec, not copied) */
  void *param_buf;   /* aligned copy of LAUNCH parameters, reused */
  size_t param_cap;

  rgpu_worker_output output;

  /* The connection; jobs and lane threads write to it too. */
  rgpu_conn *conn;
  pthread_mutex_t write_lock; /* one frame group at a time on conn */
  int write_failed;

  /* Background completion: only with a connection. */
  rgpu_worker_jobs jobs;
  /* Host callbacks in flight (rgpu_jobs.c); created on first HOST_FUNC. */
  struct rgpu_host_calls *host_calls;

  /* Resumable session (rgpu_worker.c, rgpu_replay.h): the replay buffer and
   * request count live under write_lock. */
  rgpu_replay replay;
  rgpu_worker_resume resume;

  /* Pinned-once staging buffers for background copies (rgpu_staging.h);
   * made at the first copy that needs one, dropped with the context. */
  rgpu_staging staging;
  rgpu_small_h2d small_h2d;

  /* Bulk streams (rgpu_bulk.h); created when the first lane arrives. */
  struct rgpu_bulk *bulk;
  void *cur_rb;      /* the serve loop's read buffer, for control messages in a bulk wait */
  double read_deadline; /* rgpu_clock_s() by which a read must complete (the first frame); 0 = none */
  int bulk_end;      /* a control message during a bulk wait ended the session */

  /* The kernel image cache (rgpu_image_cache.h), opened at the first
   * MODULE_LOAD that uses it; image_cache_state -1: it could not be. */
  struct rgpu_image_cache *image_cache;
  int image_cache_state;

  /* quic:// sessions' own endpoint (rgpu_quic_direct.h); NULL until the
   * first offer.  events_ep: an epoll set of ctl_fd and its notify fd, for
   * waits that take one extra descriptor (rgpu_conn_wait_input). */
  struct rgpu_quic_direct *direct;
  int events_ep;
  uint32_t client_caps;   /* HELLO's, as the client sent them */
  unsigned spin_us_relay; /* spin_us for a conn that is not direct */
  int conn_direct;        /* conn came from the direct endpoint */
  unsigned spin_us_direct, direct_poll_us; /* its poll budget: base, as set now */
};

/* ---- background completion (rgpu_jobs.c) ---------------------------------
 * Waiting for a stream, an event or a device-to-host copy must not stop the
 * session from reading later requests (other client threads, other
 * streams), so with a connection those waits run on other threads that
 * send the reply themselves: waits for a point in a stream on that stream's
 * completion queue (one thread, FIFO), the rest on a thread of their own.
 * Work is always *enqueued* in order by
 * the session thread (an internal event marks the point to wait for); only
 * the waiting moves. */
typedef enum {
  RGPU_JOB_WAIT_EVENT = 1, /* cuEventSynchronize(ev), then reply */
  RGPU_JOB_CTX_SYNC = 2,   /* cuCtxSynchronize, then reply */
  RGPU_JOB_RELEASE = 3,    /* wait for ev, free buf, no reply (async HTOD source) */
  RGPU_JOB_FREE = 4,       /* cuMemFree(dptr), no reply: it waits for the device */
  RGPU_JOB_ARRAY_DESTROY = 5 /* cuArrayDestroy((CUarray)dptr), no reply, as FREE */
} rgpu_job_kind;

typedef struct rgpu_job {
  rgpu_worker *w;
  rgpu_job_kind kind;
  uint16_t opcode;
  uint64_t seq;
  CUcontext ctx;
  CUevent ev;
  int own_ev;       /* internal event: destroyed by the job (1), or kept in
                     * the marker pool under ctx once it completed (2) */
  const void *ref;  /* user handle the job uses, for rgpu_jobs_barrier */
  void *buf;        /* reply tail (DTOH) or buffer to free (RELEASE) */
  void *pinned;     /* cuMemHostRegister'ed inside buf: unregistered first */
  uint64_t dptr;    /* RGPU_JOB_FREE; the CUarray of RGPU_JOB_ARRAY_DESTROY */
  size_t buf_len;
  /* The stream a device-to-host reply was copied on (NULL: legacy) and the
   * job's place in submission order: a host callback on that stream sends
   * its HOST_CALL only after such earlier replies (rgpu_host_call_run). */
  CUstream stream;
  uint64_t order;
  uint64_t submitted_ns; /* rgpu_clock_ns at rgpu_jobs_submit (the debug log's slow jobs) */
  pthread_t th;
  struct rgpu_job *next, *prev; /* w->jobs.inflight, under w->jobs.lock */
  struct rgpu_job *qnext; /* in its completion queue (rgpu_jobs.c) */
} rgpu_job;

/* 1 if waits can move off the session thread (a connection is attached). */
int rgpu_jobs_enabled(const rgpu_worker *w);
/* Starts job j (allocated by the caller with malloc; the job frees it).
 * On failure returns nonzero and the caller keeps ownership. */
int rgpu_jobs_submit(rgpu_worker *w, rgpu_job *j);
/* Waits until no job uses ref (NULL: until no job is in flight).  Called
 * by a handler (on the session thread) while host callbacks exist, it keeps
 * reading the connection meanwhile and runs the HOST_CALL_DONEs it finds
 * (rgpu_worker_read_ahead): a job may wait for a stream that waits for a
 * host callback, whose HOST_CALL_DONE only this thread reads. */
void rgpu_jobs_barrier(rgpu_worker *w, const void *ref);
/* For a reading barrier (rgpu_worker.c): waits until the connection has
 * bytes or wake_fd is signalled, reads what fits behind the frames not yet
 * handled (never moving them: the running handler may point into them) and
 * runs the HOST_CALL_DONE frames found there early (rgpu_host_call_done_early).
 * 0: go on; RGPU_T_ECLOSED: the client is gone; -1: nothing more can be read
 * ahead (no connection, the read buffer full, a frame too large for it). */
int rgpu_worker_read_ahead(rgpu_worker *w, int wake_fd);
/* A reply frame written straight to c, outside the session's byte stream
 * (RESUME's reply is not counted by either side; a direct QUIC port's
 * refusal is not part of any session): header, payload p, optional
 * tail.  The transport's result. */
int rgpu_worker_write_reply_oob(rgpu_conn *c, uint16_t op, uint32_t status, const void *p,
                                size_t n, const void *tail, size_t tail_len);
/* Ends the completion threads (after rgpu_jobs_barrier(w, NULL)). */
void rgpu_jobs_stop(rgpu_worker *w);
/* Sends frames on the connection under the write lock. */
int rgpu_worker_send(rgpu_worker *w, const struct iovec *iov, int n);
/* The same with write_lock held (rgpu_worker.c): records the frames in the
 * replay buffer; while the session is resumable a failed write is not an
 * error (the frames reach the client after RESUME). */
int rgpu_worker_send_locked(rgpu_worker *w, const struct iovec *iov, int n);
/* The same for a reply whose iov[keep] lies in buf, a staging buffer the
 * replay keeps instead of copying; buf is released with release(ctx, buf)
 * (also when the write fails).  With write_lock held. */
int rgpu_worker_send_locked_keep(rgpu_worker *w, const struct iovec *iov, int n, int keep,
                                 rgpu_replay_release_fn release, void *ctx, void *buf);
/* Appends pending device printf text as OUTPUT events (any thread). */
void rgpu_worker_flush_output(rgpu_worker *w, rgpu_buf *out);
/* An event that only marks a point in a stream (no timing). */
CUresult rgpu_worker_marker(rgpu_worker *w, CUstream s, CUevent *out);
/* The same, reusing a completed marker of the pool when the stream's
 * context ctx is the session thread's current one (session thread only).
 * *own says how to give it back: 2 pooled, 1 made for this use; pass it
 * as the job's own_ev or to rgpu_worker_marker_release.  Why: an event
 * create and destroy per small copy are two driver calls of the ~7 a
 * synchronous 64-byte D2H costs the server. */
CUresult rgpu_worker_marker_pooled(rgpu_worker *w, CUcontext ctx, CUstream s, CUevent *out,
                                   int *own);
/* Gives a marker back once nothing waits on it any more (any thread): into
 * the pool when own is 2 and it completed without error (ok), else
 * destroyed. */
void rgpu_worker_marker_release(rgpu_worker *w, CUcontext ctx, CUevent ev, int own, int ok);
/* Destroys the pooled markers (session thread, no job in flight): before
 * their contexts may go (rgpu_staging_drop). */
void rgpu_worker_markers_drop(rgpu_worker *w);
/* Copies a launch's parameters into w->param_buf (grown as needed; what
 * the driver reads them from).  CUDA_ERROR_OUT_OF_MEMORY with a message when
 * it cannot grow (rgpu_handlers.c). */
CUresult rgpu_worker_copy_params(rgpu_worker *w, const void *data, size_t len);
/* Device bytes the session holds, as its memory quota counts them:
 * cuMemAlloc'ed memory, module globals, CUDA arrays and cuMemCreate'd
 * memory. */
static inline uint64_t rgpu_worker_held_bytes(const rgpu_worker *w) {
  return w->allocs.malloc_bytes + w->allocs.module_bytes + w->array_bytes + w->vmm_bytes;
}

/* rgpu_handlers.c's lookups for the handlers in other files: a stream by
 * its wire id (0: the legacy stream), and a device range that must lie in
 * one allocation of the session (`what` names the call in the failure). */
CUresult rgpu_worker_stream_get(rgpu_worker *w, uint64_t id, CUstream *out);
CUresult rgpu_worker_range_check(rgpu_worker *w, uint64_t ptr, uint64_t len, const char *what);
/* Texture and surface objects that read an array or a device allocation
 * (rgpu_handlers_array.c): destroyed before the memory under them goes, so
 * a kernel that still names one gets an invalid handle, never freed memory.
 * Those of array_rec (an rgpu_array_rec), or with array_rec NULL those
 * whose memory overlaps [dptr, dptr + size). */
void rgpu_worker_drop_views(rgpu_worker *w, const void *array_rec, uint64_t dptr, uint64_t size);
/* Forgets MANAGED_PULL's copies of ranges starting inside [dptr, dptr +
 * size), or with size 0 all of device dev (-1: all devices). */
void rgpu_worker_drop_managed_copies(rgpu_worker *w, int dev, uint64_t dptr, uint64_t size);
/* Frees the session's arrays and objects of device dev (-1: all); destroy 0
 * forgets them without calling the driver (their context is gone). */
void rgpu_worker_drop_arrays(rgpu_worker *w, int dev, int destroy);
/* Unmaps, releases and frees the session's virtual memory of device dev
 * (-1: all; reservations go with the device current when they were made);
 * destroy 0 only forgets (rgpu_handlers_vmm.c). */
void rgpu_worker_drop_vmm(rgpu_worker *w, int dev, int destroy);

/* ---- small host-to-device copies (rgpu_staging.c) ------------------------
 * A 64-byte H2D used to cost a staging buffer of its own, a marker event
 * (create, record, synchronize, destroy) and a RELEASE job (a malloc, the
 * jobs lock, a queue thread's wake-up): ~20 us per copy on the H200 for a
 * copy that costs 6.5 us natively.  Copies of up to RGPU_SMALL_H2D_MAX
 * bytes are instead packed into one staging buffer per stream ("batch");
 * one marker and one RELEASE job cover the whole batch when it is sealed.
 * The batch is sealed (rgpu_small_h2d_seal) before any other request is
 * handled (rgpu_worker.c handle_frame: streams and contexts cannot go away
 * under it, nothing waits for a copy that has no marker yet), when the
 * serve loop has no complete frame left to handle (before it may block
 * reading), when it is full, when a copy for another stream arrives, and
 * by rgpu_jobs_barrier(w, NULL).  The stream keeps the buffer until its
 * marker completes, as for a single copy; the session thread never waits. */
#define RGPU_SMALL_H2D_MAX 4096u
/* Room for n bytes in the open batch of (s, ctx), sealing the open batch
 * first when it belongs to another stream or is full, opening one when
 * needed.  NULL when n is too large for batching or no buffer could be had:
 * the caller stages the copy on its own. */
void *rgpu_small_h2d_place(rgpu_worker *w, CUstream s, CUcontext ctx, size_t n);
/* Records the open batch's marker and hands its buffer to a RELEASE job
 * (session thread only); nothing when no batch is open. */
void rgpu_small_h2d_seal(rgpu_worker *w);

/* ---- host callbacks (rgpu_jobs.c) -----------------------------------------
 * A host function in a stream that runs in the *client*: when the stream
 * reaches it, rgpu_host_call_run (on the driver's thread) sends a HOST_CALL
 * event {callback, token} and blocks that stream until the session thread
 * reads HOST_CALL_DONE {token} (rgpu_host_call_done).  The session thread
 * itself never waits for it, so it keeps reading requests meanwhile.
 * Reusable: stream HOST_FUNC uses rgpu_host_call_enqueue; a graph host node
 * takes a record from rgpu_host_call_new and passes rgpu_host_call_run and
 * the record as its CUDA_HOST_NODE_PARAMS {fn, userData}. */
typedef struct rgpu_host_call rgpu_host_call;
/* A record for client callback `callback_id`.  once = 1: freed after its
 * first run (stream use); once = 0: runs any number of times (graph node)
 * and is freed with rgpu_host_call_free once nothing can run it.  NULL when
 * out of memory or when the worker has no connection to send events on. */
rgpu_host_call *rgpu_host_call_new(rgpu_worker *w, uint64_t callback_id, int once);
void rgpu_host_call_free(rgpu_host_call *hc);
/* The CUhostFn: userData is an rgpu_host_call. */
void CUDA_CB rgpu_host_call_run(void *user);
/* cuLaunchHostFunc(s, rgpu_host_call_run, one-shot record); a CUresult, with
 * a message in the request's message on failure. */
CUresult rgpu_host_call_enqueue(rgpu_worker *w, CUstream s, uint64_t callback_id);
/* HOST_CALL_DONE: releases the stream waiting on token.  CUDA_ERROR_INVALID_VALUE
 * for a token no host function waits for. */
CUresult rgpu_host_call_done(rgpu_worker *w, uint64_t token);
/* A HOST_CALL_DONE read ahead of its turn (by a reading barrier): releases
 * the stream now and remembers the token, so that the frame, when the
 * session loop reaches it in order, is a success with nothing left to do. */
void rgpu_host_call_done_early(rgpu_worker *w, uint64_t token);
/* The client went away during a reading barrier: the host functions that
 * wait for it now return without their callback (streams can drain). */
void rgpu_host_calls_release_waiting(rgpu_worker *w);
/* The session is ending: every waiting host function returns at once
 * (without its client callback), so streams can drain and be destroyed. */
void rgpu_host_calls_shutdown(rgpu_worker *w);
/* Frees the bookkeeping (after the driver state is gone). */
void rgpu_host_calls_free(rgpu_worker *w);

/* Formats the message of the request being handled (w->req->msg; dropped
 * between requests), printf-style, for the helpers that only have the
 * worker.  Returns status, for `return fail(...)`. */
CUresult rgpu_worker_fail(rgpu_worker *w, CUresult status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Loads the driver and makes a context current if needed (rgpu_device.c). */
CUresult rgpu_worker_ensure_driver(rgpu_worker *w);
CUresult rgpu_worker_ensure_ctx(rgpu_worker *w);
/* The driver's ordinal of session device dev (--devices renumbers them). */
static inline int rgpu_worker_ordinal(const rgpu_worker *w, int dev) {
  return dev >= 0 && dev < RGPU_MAX_DEVICES ? w->ordinal[dev] : dev;
}
CUresult rgpu_worker_set_device(rgpu_worker *w, int dev);
/* Forgets (without driver calls) or destroys (with) everything of device
 * dev, or all devices with dev < 0. */
void rgpu_worker_drop_device_state(rgpu_worker *w, int dev, int destroy);

/* ---- bulk streams (rgpu_worker.c, for rgpu_bulk.c) ------------------------
 * Waits on the session thread until ready(w, arg) returns 1 (0: not yet,
 * -1: never), watching the bulk notify descriptor, the control channel
 * (lanes arrive through it; a RESUME replaces the connection) and the
 * connection's hang-up.  Returns 0 (ready), RGPU_BULK_WAIT_GONE (never, or
 * nothing happened for RGPU_BULK_WAIT_IDLE_MS) or RGPU_BULK_WAIT_ABANDON
 * (the connection broke or was replaced, or the session must end: rq is
 * abandoned, rgpu_req_abandon; the client re-sends it after a resume). */
#define RGPU_BULK_WAIT_GONE 1
#define RGPU_BULK_WAIT_ABANDON 2
#define RGPU_BULK_WAIT_IDLE_MS 60000
int rgpu_worker_bulk_wait(rgpu_req *rq, int (*ready)(rgpu_worker *w, void *arg), void *arg);
/* 1 when a broken connection would be resumed. */
int rgpu_worker_resumable(const rgpu_worker *w);

/* ---- kernel image cache (rgpu_handlers_image.c, issue 15) -----------------
 * The session's handle on the shared cache (rgpu_image_cache.h), opened on
 * first use; NULL when the server has none or it cannot be used (logged
 * once). */
struct rgpu_image_cache *rgpu_worker_image_cache(rgpu_worker *w);
/* The image cached under hash (32 bytes) into *data (malloc'd) and *len,
 * or a failure with RGPU_STATUS_IMAGE_NOT_CACHED (missing, or failed its
 * verification and was removed) for the client to send the image. */
CUresult rgpu_worker_image_lookup(rgpu_worker *w, const uint8_t *hash, void **data, size_t *len);
/* Stores an image a client sent (named by its own hash; client_hash, when
 * not NULL, is what the client said it was, checked only for the log). */
void rgpu_worker_image_store(rgpu_worker *w, const void *data, size_t len,
                             const uint8_t *client_hash);

#endif
