/* Background completion of waits: see rgpu_worker_internal.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "rgpu_clock.h"
#include "rgpu_fifo.h"
#include "rgpu_log.h"
#include "rgpu_metrics.h"
#include "rgpu_worker_internal.h"
#include "rgpu_thread_name.h"

/* Bounds the threads of their own one session may hold (jobs that are not
 * a wait for a point in a stream); beyond it submit waits. */
#define RGPU_MAX_JOBS 64
/* Completion queues: streams are spread over this many FIFO threads. */
#define RGPU_JOB_QUEUES 8

/* Why queues and not a thread per job: a session thread that must wait for
 * a free job slot cannot read the HOST_CALL_DONE that a blocked stream
 * waits for, and a real GPU blocks streams behind host callbacks for as
 * long as the client takes (host_callback_data hung on the H200 with 64
 * jobs in flight).  A queue never makes its submitter wait, costs no
 * thread creation per copy, and cannot deadlock: its jobs wait for points
 * in streams in submission order, so a job stuck behind an earlier one only
 * waits for work submitted earlier still, never for a host callback that
 * waits for it (rgpu_host_call_run waits only for earlier jobs).  Waits on
 * the whole device (cuCtxSynchronize, cuMemFree) or on user events (which
 * may be recorded again later) keep a thread of their own: they may wait
 * for work submitted after them. */
typedef struct rgpu_job_queue {
  rgpu_worker *w;
  rgpu_job *head, *tail; /* FIFO through qnext (rgpu_fifo.h) */
  pthread_cond_t cond; /* work arrived or stop (with w->jobs.lock) */
  pthread_t th;
  int started;
} rgpu_job_queue;

/* A thread of its own that finished its job waits this long for the next
 * one before it exits.  Why: a cudaDeviceSynchronize took 380-420 us
 * through rgpu on the H200 against 8 us natively, and each one created a
 * thread (stack mapping, clone, its exit): a program that synchronizes in
 * a loop now pays that once. */
#define RGPU_JOB_PARK_NS (200 * 1000 * 1000L)

struct rgpu_job_queues {
  rgpu_job_queue q[RGPU_JOB_QUEUES];
  int stop;
  int threaded; /* threads of their own: running a job or parked */
  int parked;   /* of which waiting for a job and not yet given one */
  /* Jobs given to parked threads, not yet taken (through qnext). */
  rgpu_job *head, *tail;
  pthread_cond_t park_cond; /* a job for a parked thread, or stop */
};

int rgpu_jobs_enabled(const rgpu_worker *w) { return w->conn != NULL && w->drv_state == 1; }

int rgpu_worker_send(rgpu_worker *w, const struct iovec *iov, int n) {
  pthread_mutex_lock(&w->write_lock);
  int rc = rgpu_worker_send_locked(w, iov, n);
  pthread_mutex_unlock(&w->write_lock);
  if (rc == 0) rgpu_metrics_bytes_sent(iov, n);
  return rc;
}

CUresult rgpu_worker_marker(rgpu_worker *w, CUstream s, CUevent *out) {
  CUresult r = w->drv.cuEventCreate(out, CU_EVENT_DISABLE_TIMING);
  if (r != CUDA_SUCCESS) return r;
  r = w->drv.cuEventRecord(*out, s);
  if (r != CUDA_SUCCESS) {
    w->drv.cuEventDestroy(*out);
    *out = NULL;
  }
  return r;
}

CUresult rgpu_worker_marker_pooled(rgpu_worker *w, CUcontext ctx, CUstream s, CUevent *out,
                                   int *own) {
  /* Pooled events are made in the session thread's current context; one
   * is only reused where the stream's context is that one. */
  CUcontext cur = w->cur_dev >= 0 && w->cur_dev < RGPU_MAX_DEVICES ? w->ctx[w->cur_dev] : NULL;
  *own = 1;
  if (!ctx || ctx != cur) return rgpu_worker_marker(w, s, out);
  *own = 2;
  CUevent ev = NULL;
  pthread_mutex_lock(&w->jobs.lock);
  for (int i = w->jobs.n_markers - 1; i >= 0; i--)
    if (w->jobs.markers[i].ctx == ctx) {
      ev = w->jobs.markers[i].ev;
      w->jobs.markers[i] = w->jobs.markers[--w->jobs.n_markers];
      break;
    }
  pthread_mutex_unlock(&w->jobs.lock);
  if (ev) {
    if (w->drv.cuEventRecord(ev, s) == CUDA_SUCCESS) {
      *out = ev;
      return CUDA_SUCCESS;
    }
    w->drv.cuEventDestroy(ev); /* a fresh one reports the error, if any */
  }
  return rgpu_worker_marker(w, s, out);
}

void rgpu_worker_marker_release(rgpu_worker *w, CUcontext ctx, CUevent ev, int own, int ok) {
  if (!ev) return;
  if (own == 2 && ok && ctx) {
    pthread_mutex_lock(&w->jobs.lock);
    int kept = w->jobs.n_markers < (int)(sizeof w->jobs.markers / sizeof w->jobs.markers[0]);
    if (kept) {
      w->jobs.markers[w->jobs.n_markers].ctx = ctx;
      w->jobs.markers[w->jobs.n_markers++].ev = ev;
    }
    pthread_mutex_unlock(&w->jobs.lock);
    if (kept) return;
  }
  w->drv.cuEventDestroy(ev);
}

void rgpu_worker_markers_drop(rgpu_worker *w) {
  if (w->drv_state != 1) {
    w->jobs.n_markers = 0;
    return;
  }
  CUcontext cur = w->cur_dev >= 0 && w->cur_dev < RGPU_MAX_DEVICES ? w->ctx[w->cur_dev] : NULL;
  pthread_mutex_lock(&w->jobs.lock);
  for (int i = 0; i < w->jobs.n_markers; i++) {
    /* Like every resource, destroyed inside its own context. */
    CUcontext c = w->jobs.markers[i].ctx;
    if (c != cur) w->drv.cuCtxSetCurrent(c);
    w->drv.cuEventDestroy(w->jobs.markers[i].ev);
    if (c != cur) w->drv.cuCtxSetCurrent(cur);
  }
  w->jobs.n_markers = 0;
  pthread_mutex_unlock(&w->jobs.lock);
}

/* The in-flight list is doubly linked: jobs are pushed at the head and
 * mostly finish oldest first, so finding a job by walking from the head
 * made every completion O(jobs in flight) under w->jobs.lock.  20,000
 * queued 64-byte copies took 0.4-0.6 ms each to drain instead of ~20 us,
 * and the session thread waited on the lock meanwhile (issue 14's "D2H
 * after H2D" cost). */
static void inflight_push(rgpu_worker *w, rgpu_job *j) {
  j->prev = NULL;
  j->next = w->jobs.inflight;
  if (j->next) j->next->prev = j;
  w->jobs.inflight = j;
}

static void inflight_remove(rgpu_worker *w, rgpu_job *j) {
  if (j->prev)
    j->prev->next = j->next;
  else
    w->jobs.inflight = j->next;
  if (j->next) j->next->prev = j->prev;
  j->next = j->prev = NULL;
}

static void job_done(rgpu_job *j) {
  rgpu_worker *w = j->w;
  pthread_mutex_lock(&w->jobs.lock);
  inflight_remove(w, j);
  w->jobs.n--;
  pthread_cond_broadcast(&w->jobs.cond);
  if (w->jobs.readers && w->jobs.wake_fd > 0) {
    uint64_t one = 1;
    ssize_t wr = write(w->jobs.wake_fd, &one, sizeof one);
    (void)wr; /* a full counter still wakes the reader */
  }
  pthread_mutex_unlock(&w->jobs.lock);
  rgpu_staging_release(w, j->buf, j->pinned);
  free(j);
}

/* Replies from this size on are kept by the replay by reference.  A kept
 * reply holds its whole pooled staging buffer (RGPU_CHUNK_BYTES, 4 MiB)
 * until the client acknowledges it, every few MiB: with the bound at
 * 64 KiB, a run of 64 KiB D2H copies whose replies a job sent held one
 * buffer each, so the pool grew by a buffer per copy (up to 32 of them),
 * and on softgpu, whose pools start empty, each new buffer cost 4 MiB of
 * page faults: 3-4 ms per 64 KiB copy on the 2-vCPU dev VM (issue 21:
 * most of quic's D2H 64 KiB gap under cellular; quic's relay thread made
 * the session thread's 20 us poll miss more often, so more of its replies
 * went through a job).  Copying a reply under 1 MiB into the replay's
 * own blocks costs less than that, and the buffer goes back at once, as
 * it does when the session thread replies itself. */
#define RGPU_REPLY_KEEP_MIN (1u << 20)

/* A job whose reply leaves this long after its request is logged at debug
 * level (where the time went); RGPU_SLOW_REPLY_US sets it (0: every one). */
#define RGPU_JOB_SLOW_NS 1000000ull

static uint64_t slow_reply_ns(void) {
  static uint64_t cached = UINT64_MAX; /* racy first use is harmless: same value */
  uint64_t v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (v != UINT64_MAX) return v;
  const char *e = getenv("RGPU_SLOW_REPLY_US");
  char *end = NULL;
  unsigned long long us = e && *e ? strtoull(e, &end, 10) : 0;
  v = e && *e && end && !*end && us < 10000000ull ? us * 1000ull : RGPU_JOB_SLOW_NS;
  __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
  return v;
}

static void release_kept_staging(void *ctx, void *buf) {
  rgpu_staging_release(ctx, buf, NULL);
}

/* Whether job j sends a reply when it is done (the others release or free). */
static int job_replies(const rgpu_job *j) {
  return j->kind != RGPU_JOB_RELEASE && j->kind != RGPU_JOB_FREE &&
         j->kind != RGPU_JOB_ARRAY_DESTROY;
}

static void job_run(rgpu_job *j) {
  rgpu_worker *w = j->w;
  const rgpu_driver *d = &w->drv;
  CUresult r = d->cuCtxSetCurrent(j->ctx);
  if (r == CUDA_SUCCESS && j->kind == RGPU_JOB_FREE)
    r = d->cuMemFree((CUdeviceptr)j->dptr);
  else if (r == CUDA_SUCCESS && j->kind == RGPU_JOB_ARRAY_DESTROY)
    r = d->cuArrayDestroy((CUarray)(uintptr_t)j->dptr);
  else if (r == CUDA_SUCCESS)
    r = j->kind == RGPU_JOB_CTX_SYNC ? d->cuCtxSynchronize() : d->cuEventSynchronize(j->ev);
  uint64_t waited_ns = rgpu_clock_ns() - j->submitted_ns;
  if (j->own_ev && j->ev) rgpu_worker_marker_release(w, j->ctx, j->ev, j->own_ev, r == CUDA_SUCCESS);
  if (r != CUDA_SUCCESS) rgpu_metrics_note_status(w->cfg.session_id, j->opcode, (uint32_t)r);
  if (job_replies(j)) {
    rgpu_buf out;
    rgpu_buf_init(&out);
    rgpu_worker_flush_output(w, &out);
    char msg[160] = "";
    const void *tail = NULL;
    size_t tail_len = 0;
    if (r == CUDA_SUCCESS) {
      tail = j->buf;
      tail_len = j->buf_len;
    } else {
      tail_len = (size_t)snprintf(msg, sizeof msg, "%s: %s", rgpu_op_name(j->opcode),
                                  rgpu_driver_error_name(d, r));
      tail = msg;
    }
    rgpu_frame_hdr h = {RGPU_PROTO_VERSION, RGPU_KIND_REPLY, j->opcode, (uint32_t)tail_len,
                        r == CUDA_SUCCESS ? 0u : (uint32_t)r, j->seq};
    uint8_t hdr[RGPU_FRAME_HDR_SIZE];
    rgpu_frame_hdr_encode(hdr, &h);
    rgpu_buf_put(&out, hdr, sizeof hdr);
    struct iovec iov[2] = {{out.data, out.len}, {(void *)tail, tail_len}};
    if (!out.err && tail == j->buf && tail_len >= RGPU_REPLY_KEEP_MIN && !j->pinned) {
      /* The replay keeps the staging buffer until the client has the bytes
       * (no copy of every reply byte); it gives it back to its pool. */
      pthread_mutex_lock(&w->write_lock);
      rgpu_worker_send_locked_keep(w, iov, 2, 1, release_kept_staging, w, j->buf);
      pthread_mutex_unlock(&w->write_lock);
      rgpu_metrics_bytes_sent(iov, 2);
      j->buf = NULL;
    } else if (!out.err) {
      rgpu_worker_send(w, iov, tail_len ? 2 : 1);
    }
    rgpu_buf_free(&out);
    uint64_t sent_ns = rgpu_clock_ns();
    __atomic_store_n(&w->jobs.last_reply_ns, sent_ns, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&w->jobs.replies_pending, 1, __ATOMIC_RELAXED);
    /* Where a late reply spent its time (RGPU_LOG=debug): in the queue and
     * the wait for its point in the stream, or in sending. */
    uint64_t total_ns = sent_ns - j->submitted_ns;
    if (total_ns >= slow_reply_ns() && rgpu_log_enabled(RGPU_LOG_DEBUG))
      RGPU_DEBUG("session=%llu %s seq=%llu: reply %.3f ms after its request was handled "
                 "(%.3f ms waiting for the stream, %.3f ms sending %zu bytes)",
                 (unsigned long long)w->cfg.session_id, rgpu_op_name(j->opcode),
                 (unsigned long long)j->seq, total_ns / 1e6, waited_ns / 1e6,
                 (total_ns - waited_ns) / 1e6, tail_len);
  } else if (r != CUDA_SUCCESS) {
    /* The copy itself failed: report it like any unreplied failure. */
    RGPU_DEBUG("session=%llu background %s failed: %s", (unsigned long long)w->cfg.session_id,
               j->kind == RGPU_JOB_FREE            ? "free"
               : j->kind == RGPU_JOB_ARRAY_DESTROY ? "array destroy"
                                                   : "copy",
               rgpu_driver_error_name(d, r));
  }
  job_done(j);
}

/* A thread of its own for device-wide waits: runs j (if any), then waits
 * parked for the next such job; it exits after RGPU_JOB_PARK_NS without
 * one, except the last parked thread, which stays for the whole session.
 * Creating a thread for a wait costs a clone and, at its first malloc, a
 * new malloc arena: the first cudaDeviceSynchronize of a session took
 * 160-400 us more than the next ones (softgpu and the H200). */
static void job_thread(rgpu_worker *w, rgpu_job *j) {
  struct rgpu_job_queues *qs = w->jobs.queues;
  for (;;) {
    if (j) job_run(j);
    /* Parked: rgpu_jobs_submit hands the next such job over (parked--);
     * a thread that finds none when it wakes was not counted on. */
    pthread_mutex_lock(&w->jobs.lock);
    qs->parked++;
    pthread_cond_broadcast(&w->jobs.cond); /* a submitter may wait for room */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += RGPU_JOB_PARK_NS;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    int timed_out = 0;
    while (!qs->head && !qs->stop) {
      if (qs->parked == 1) { /* the last one parked: stays */
        pthread_cond_wait(&qs->park_cond, &w->jobs.lock);
        continue;
      }
      if (timed_out) break;
      timed_out = pthread_cond_timedwait(&qs->park_cond, &w->jobs.lock, &until) != 0;
    }
    j = rgpu_fifo_pop(qs, qnext);
    if (!j) break;
    j->qnext = NULL;
    pthread_mutex_unlock(&w->jobs.lock);
  }
  qs->parked--;
  qs->threaded--;
  pthread_cond_broadcast(&w->jobs.cond);
  pthread_mutex_unlock(&w->jobs.lock);
}

static void *job_main(void *arg) {
  rgpu_thread_name("rgpu-job");
  rgpu_job *j = arg;
  job_thread(j->w, j);
  return NULL;
}

/* The session's first thread for device-wide waits, started parked with
 * the job queues, so that no synchronization pays for its creation. */
static void *spare_main(void *arg) {
  rgpu_thread_name("rgpu-job-spare");
  /* glibc gives a thread its malloc arena at its first malloc (a 64 MiB
   * mapping): take it now, not inside the first wait's reply. */
  void *volatile warm = malloc(64); /* volatile: the pair must not be optimized away */
  free(warm);
  job_thread(arg, NULL);
  return NULL;
}

static void *queue_main(void *arg) {
  rgpu_thread_name("rgpu-stream-q");
  rgpu_job_queue *q = arg;
  rgpu_worker *w = q->w;
  pthread_mutex_lock(&w->jobs.lock);
  for (;;) {
    while (!q->head && !w->jobs.queues->stop) pthread_cond_wait(&q->cond, &w->jobs.lock);
    rgpu_job *j = rgpu_fifo_pop(q, qnext);
    if (!j) break; /* stopped and empty */
    j->qnext = NULL;
    pthread_mutex_unlock(&w->jobs.lock);
    job_run(j);
    pthread_mutex_lock(&w->jobs.lock);
  }
  pthread_mutex_unlock(&w->jobs.lock);
  return NULL;
}

static int start_thread(pthread_t *th, int detached, void *(*fn)(void *), void *arg) {
  pthread_attr_t a;
  pthread_attr_init(&a);
  if (detached) pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&a, 256 << 10);
  int rc = pthread_create(th, &a, fn, arg);
  pthread_attr_destroy(&a);
  return rc;
}

/* A wait for an internal marker: a point in one stream, never re-recorded. */
static int queueable(const rgpu_job *j) {
  return j->own_ev && j->ev && (j->kind == RGPU_JOB_WAIT_EVENT || j->kind == RGPU_JOB_RELEASE);
}

/* The queue of j's stream (with w->jobs.lock held), its thread started on
 * first use; NULL if no thread could be started. */
static rgpu_job_queue *queue_for(rgpu_worker *w, const rgpu_job *j) {
  uintptr_t key = (uintptr_t)j->stream;
  rgpu_job_queue *q = &w->jobs.queues->q[(key >> 4 ^ key >> 12) % RGPU_JOB_QUEUES];
  if (!q->started) {
    q->w = w;
    pthread_cond_init(&q->cond, NULL);
    if (start_thread(&q->th, 0, queue_main, q)) {
      pthread_cond_destroy(&q->cond);
      return NULL;
    }
    q->started = 1;
  }
  return q;
}

int rgpu_jobs_submit(rgpu_worker *w, rgpu_job *j) {
  j->w = w;
  j->qnext = NULL;
  j->submitted_ns = rgpu_clock_ns();
  if (job_replies(j)) __atomic_add_fetch(&w->jobs.replies_pending, 1, __ATOMIC_RELAXED);
  pthread_mutex_lock(&w->jobs.lock);
  if (!w->jobs.queues) {
    w->jobs.queues = calloc(1, sizeof *w->jobs.queues);
    if (!w->jobs.queues) {
      pthread_mutex_unlock(&w->jobs.lock);
      return -1;
    }
    pthread_cond_init(&w->jobs.queues->park_cond, NULL);
    pthread_t spare;
    w->jobs.queues->threaded++;
    if (start_thread(&spare, 1, spare_main, w)) w->jobs.queues->threaded--;
  }
  struct rgpu_job_queues *qs = w->jobs.queues;
  rgpu_job_queue *q = queueable(j) && !qs->stop ? queue_for(w, j) : NULL;
  if (!q)
    while (!qs->parked && qs->threaded >= RGPU_MAX_JOBS)
      pthread_cond_wait(&w->jobs.cond, &w->jobs.lock);
  j->order = ++w->jobs.order;
  inflight_push(w, j);
  w->jobs.n++;
  int rc = 0;
  if (q) {
    rgpu_fifo_push(q, j, qnext);
    pthread_cond_signal(&q->cond);
  } else if (qs->parked && !qs->stop) {
    qs->parked--;
    rgpu_fifo_push(qs, j, qnext);
    pthread_cond_signal(&qs->park_cond);
  } else {
    qs->threaded++;
    rc = start_thread(&j->th, 1, job_main, j);
    if (rc) {
      qs->threaded--;
      inflight_remove(w, j);
      w->jobs.n--;
    }
  }
  pthread_mutex_unlock(&w->jobs.lock);
  if (rc && job_replies(j)) __atomic_sub_fetch(&w->jobs.replies_pending, 1, __ATOMIC_RELAXED);
  return rc;
}

void rgpu_jobs_stop(rgpu_worker *w) {
  struct rgpu_job_queues *qs = w->jobs.queues;
  if (!qs) return;
  pthread_mutex_lock(&w->jobs.lock);
  qs->stop = 1;
  for (int i = 0; i < RGPU_JOB_QUEUES; i++)
    if (qs->q[i].started) pthread_cond_broadcast(&qs->q[i].cond);
  pthread_cond_broadcast(&qs->park_cond); /* parked threads exit */
  /* Threaded jobs touch qs until their very end. */
  while (qs->threaded) pthread_cond_wait(&w->jobs.cond, &w->jobs.lock);
  pthread_mutex_unlock(&w->jobs.lock);
  for (int i = 0; i < RGPU_JOB_QUEUES; i++)
    if (qs->q[i].started) {
      pthread_join(qs->q[i].th, NULL);
      pthread_cond_destroy(&qs->q[i].cond);
    }
  pthread_cond_destroy(&qs->park_cond);
  free(qs);
  w->jobs.queues = NULL;
  if (w->jobs.wake_fd > 0) close(w->jobs.wake_fd);
  w->jobs.wake_fd = 0;
}

static int jobs_busy(rgpu_worker *w, const void *ref) {
  for (rgpu_job *j = w->jobs.inflight; j; j = j->next)
    if (ref == NULL || j->ref == ref) return 1;
  return 0;
}

void rgpu_jobs_barrier(rgpu_worker *w, const void *ref) {
  /* Inside a handler (the session thread) with host callbacks about, a job
   * may wait for a stream that waits for a HOST_CALL_DONE only this thread
   * can read (GOODBYE, module unload, event destroy or device reset behind
   * a copy queued after a pending host function wedged the worker forever):
   * keep reading the connection while waiting. */
  /* A batch of small copies not sealed yet holds staging no job knows. */
  if (!ref) rgpu_small_h2d_seal(w);
  int reading = w->req != NULL && w->host_calls != NULL && w->conn != NULL;
  int client_gone = 0;
  pthread_mutex_lock(&w->jobs.lock);
  if (reading && w->jobs.wake_fd <= 0) {
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    w->jobs.wake_fd = fd > 0 ? fd : 0;
    if (fd == 0) close(fd); /* 0 means none here; never our stdin */
    if (w->jobs.wake_fd <= 0) reading = 0;
  }
  if (reading) w->jobs.readers++;
  while (jobs_busy(w, ref)) {
    if (reading) {
      pthread_mutex_unlock(&w->jobs.lock);
      int r = rgpu_worker_read_ahead(w, w->jobs.wake_fd);
      if (r == RGPU_T_ECLOSED) client_gone = 1;
      if (r) {
        if (!client_gone)
          RGPU_WARN("session=%llu cannot read ahead while waiting for background work: a host "
                    "callback's answer may be out of reach",
                    (unsigned long long)w->cfg.session_id);
        pthread_mutex_lock(&w->jobs.lock);
        w->jobs.readers--;
        reading = 0;
        continue;
      }
      pthread_mutex_lock(&w->jobs.lock);
    } else if (client_gone) {
      /* Nobody will answer the host functions: release them (again and
       * again: the stream may reach more of them). */
      pthread_mutex_unlock(&w->jobs.lock);
      rgpu_host_calls_release_waiting(w);
      pthread_mutex_lock(&w->jobs.lock);
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 50 * 1000 * 1000;
      if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
      }
      if (jobs_busy(w, ref)) pthread_cond_timedwait(&w->jobs.cond, &w->jobs.lock, &ts);
    } else {
      pthread_cond_wait(&w->jobs.cond, &w->jobs.lock);
    }
  }
  if (reading) w->jobs.readers--;
  pthread_mutex_unlock(&w->jobs.lock);
}

/* ---- host callbacks ------------------------------------------------------ */

typedef struct rgpu_host_wait {
  uint64_t token;
  int done;
  struct rgpu_host_wait *next;
} rgpu_host_wait;

struct rgpu_host_calls {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  uint64_t next_token;
  int shutdown;
  int sending; /* host functions between their shutdown check and their send */
  rgpu_host_wait *waits;
  /* Tokens whose HOST_CALL_DONE a reading barrier ran ahead of its turn. */
  uint64_t *early;
  size_t n_early, cap_early;
  /* Host functions released without their client (the client went away in
   * a reading barrier): a late HOST_CALL_DONE for them is no error. */
  uint64_t released_upto;
};

struct rgpu_host_call {
  rgpu_worker *w;
  uint64_t callback_id;
  int once;
  /* For stream callbacks: where it was enqueued and the jobs submitted by
   * then (order_known = 0 for graph host nodes, which have no order). */
  CUstream stream;
  uint64_t order;
  int order_known;
};

/* A device-to-host copy's reply is sent by its job thread once the copy's
 * marker completes, while the stream runs on and may reach a host callback
 * at the same instant: without this wait the client could run the callback
 * before the copy's bytes landed (a callback reading what an earlier
 * cudaMemcpyAsync fetched saw stale data in 188 of 200 tries).  Waits for
 * the earlier replies of this stream (and of the legacy stream, which the
 * others wait for, or of every stream for a callback on the legacy one).
 * Those copies are complete when the callback runs, so their jobs only
 * have their send left: no wait here can depend on the callback. */
static void wait_earlier_replies(rgpu_host_call *hc) {
  rgpu_worker *w = hc->w;
  if (!hc->order_known) return;
  pthread_mutex_lock(&w->jobs.lock);
  for (;;) {
    int pending = 0;
    for (rgpu_job *j = w->jobs.inflight; j; j = j->next)
      if (j->kind == RGPU_JOB_WAIT_EVENT && j->buf && j->order <= hc->order &&
          (j->stream == hc->stream || !j->stream || !hc->stream)) {
        pending = 1;
        break;
      }
    if (!pending) break;
    pthread_cond_wait(&w->jobs.cond, &w->jobs.lock);
  }
  pthread_mutex_unlock(&w->jobs.lock);
}

rgpu_host_call *rgpu_host_call_new(rgpu_worker *w, uint64_t callback_id, int once) {
  /* Without a connection nobody could run the callback: refuse rather than
   * let the stream hang. */
  if (!rgpu_jobs_enabled(w)) return NULL;
  if (!w->host_calls) rgpu_staging_prepare(w); /* pinned while no stream waits for us */
  if (!w->host_calls) {
    struct rgpu_host_calls *hs = calloc(1, sizeof *hs);
    if (!hs) return NULL;
    pthread_mutex_init(&hs->lock, NULL);
    pthread_cond_init(&hs->cond, NULL);
    w->host_calls = hs;
  }
  rgpu_host_call *hc = calloc(1, sizeof *hc);
  if (!hc) return NULL;
  *hc = (rgpu_host_call){.w = w, .callback_id = callback_id, .once = once};
  return hc;
}

void rgpu_host_call_free(rgpu_host_call *hc) { free(hc); }

void CUDA_CB rgpu_host_call_run(void *user) {
  rgpu_host_call *hc = user;
  rgpu_worker *w = hc->w;
  struct rgpu_host_calls *hs = w->host_calls;
  rgpu_host_wait me = {0};
  pthread_mutex_lock(&hs->lock);
  if (hs->shutdown) {
    pthread_mutex_unlock(&hs->lock);
    goto out;
  }
  me.token = ++hs->next_token;
  me.next = hs->waits;
  hs->waits = &me;
  hs->sending++;
  pthread_mutex_unlock(&hs->lock);

  wait_earlier_replies(hc);
  /* Device printf of the work before the callback goes first, so the
   * client's output keeps the stream's order. */
  rgpu_buf out, ev;
  rgpu_buf_init(&out);
  rgpu_buf_init(&ev);
  rgpu_worker_flush_output(w, &out);
  rgpu_msg_host_call_evt m = {.callback = hc->callback_id, .token = me.token};
  rgpu_msg_host_call_evt_encode(&ev, &m);
  rgpu_frame_hdr h = {RGPU_PROTO_VERSION, RGPU_KIND_EVENT, RGPU_EVT_HOST_CALL, (uint32_t)ev.len, 0, 0};
  uint8_t hdr[RGPU_FRAME_HDR_SIZE];
  rgpu_frame_hdr_encode(hdr, &h);
  rgpu_buf_put(&out, hdr, sizeof hdr);
  rgpu_buf_put(&out, ev.data, ev.len);
  struct iovec iov = {out.data, out.len};
  int rc = out.err || ev.err ? -1 : rgpu_worker_send(w, &iov, 1);
  rgpu_buf_free(&out);
  rgpu_buf_free(&ev);

  pthread_mutex_lock(&hs->lock);
  hs->sending--;
  pthread_cond_broadcast(&hs->cond);
  if (rc)
    RGPU_DEBUG("session=%llu host callback %llu not delivered (connection failed)",
               (unsigned long long)w->cfg.session_id, (unsigned long long)hc->callback_id);
  while (rc == 0 && !me.done && !hs->shutdown) pthread_cond_wait(&hs->cond, &hs->lock);
  for (rgpu_host_wait **pp = &hs->waits; *pp; pp = &(*pp)->next)
    if (*pp == &me) {
      *pp = me.next;
      break;
    }
  pthread_mutex_unlock(&hs->lock);
out:
  if (hc->once) free(hc);
}

CUresult rgpu_host_call_enqueue(rgpu_worker *w, CUstream s, uint64_t callback_id) {
  if (!w->drv.cuLaunchHostFunc)
    return rgpu_worker_fail(w, CUDA_ERROR_NOT_SUPPORTED,
                            "host callbacks: the driver %s has no cuLaunchHostFunc", w->drv.path);
  rgpu_host_call *hc = rgpu_host_call_new(w, callback_id, 1);
  if (!hc)
    return rgpu_worker_fail(w, rgpu_jobs_enabled(w) ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_NOT_SUPPORTED,
                            "host callbacks need a client connection (and server memory)");
  hc->stream = s;
  pthread_mutex_lock(&w->jobs.lock);
  hc->order = w->jobs.order;
  pthread_mutex_unlock(&w->jobs.lock);
  hc->order_known = 1;
  CUresult r = w->drv.cuLaunchHostFunc(s, rgpu_host_call_run, hc);
  if (r != CUDA_SUCCESS) {
    free(hc);
    return rgpu_worker_fail(w, r, "cuLaunchHostFunc: %s", rgpu_driver_error_name(&w->drv, r));
  }
  return CUDA_SUCCESS;
}

/* With hs->lock held: 1 if token was run early (and forgets it). */
static int take_early(struct rgpu_host_calls *hs, uint64_t token) {
  for (size_t i = 0; i < hs->n_early; i++)
    if (hs->early[i] == token) {
      hs->early[i] = hs->early[--hs->n_early];
      return 1;
    }
  return 0;
}

void rgpu_host_call_done_early(rgpu_worker *w, uint64_t token) {
  struct rgpu_host_calls *hs = w->host_calls;
  if (!hs) return;
  pthread_mutex_lock(&hs->lock);
  int seen = 0;
  for (size_t i = 0; i < hs->n_early && !seen; i++) seen = hs->early[i] == token;
  if (!seen && hs->n_early == hs->cap_early) {
    size_t cap = hs->cap_early ? hs->cap_early * 2 : 16;
    uint64_t *ne = realloc(hs->early, cap * sizeof *ne);
    if (ne) {
      hs->early = ne;
      hs->cap_early = cap;
    }
  }
  /* Without room to remember it, leave it to its turn (rgpu_host_call_done). */
  if (!seen && hs->n_early < hs->cap_early) {
    for (rgpu_host_wait *p = hs->waits; p; p = p->next)
      if (p->token == token && !p->done) {
        p->done = 1;
        hs->early[hs->n_early++] = token;
        pthread_cond_broadcast(&hs->cond);
        break;
      }
  }
  pthread_mutex_unlock(&hs->lock);
}

void rgpu_host_calls_release_waiting(rgpu_worker *w) {
  struct rgpu_host_calls *hs = w->host_calls;
  if (!hs) return;
  pthread_mutex_lock(&hs->lock);
  for (rgpu_host_wait *p = hs->waits; p; p = p->next) p->done = 1;
  hs->released_upto = hs->next_token;
  pthread_cond_broadcast(&hs->cond);
  pthread_mutex_unlock(&hs->lock);
}

CUresult rgpu_host_call_done(rgpu_worker *w, uint64_t token) {
  struct rgpu_host_calls *hs = w->host_calls;
  int found = 0;
  if (hs) {
    pthread_mutex_lock(&hs->lock);
    found = take_early(hs, token) || (token != 0 && token <= hs->released_upto);
    for (rgpu_host_wait *p = hs->waits; p && !found; p = p->next)
      if (p->token == token && !p->done) {
        p->done = 1;
        found = 1;
        break;
      }
    if (found) pthread_cond_broadcast(&hs->cond);
    pthread_mutex_unlock(&hs->lock);
  }
  if (!found)
    return rgpu_worker_fail(w, CUDA_ERROR_INVALID_VALUE,
                            "HOST_CALL_DONE: no host function waits for token %llu",
                            (unsigned long long)token);
  return CUDA_SUCCESS;
}

void rgpu_host_calls_shutdown(rgpu_worker *w) {
  struct rgpu_host_calls *hs = w->host_calls;
  if (!hs) return;
  pthread_mutex_lock(&hs->lock);
  hs->shutdown = 1;
  pthread_cond_broadcast(&hs->cond);
  /* After this nobody sends on the connection the caller is about to drop. */
  while (hs->sending) pthread_cond_wait(&hs->cond, &hs->lock);
  pthread_mutex_unlock(&hs->lock);
}

void rgpu_host_calls_free(rgpu_worker *w) {
  struct rgpu_host_calls *hs = w->host_calls;
  if (!hs) return;
  pthread_mutex_destroy(&hs->lock);
  pthread_cond_destroy(&hs->cond);
  free(hs->early);
  free(hs);
  w->host_calls = NULL;
}
