/* Host callbacks: cudaLaunchHostFunc and cudaStreamAddCallback.
 *
 * The function runs in this process when the remote stream reaches it, and
 * the stream waits for it: HOST_FUNC (queued, no round trip) puts a host
 * function into the server's stream; when the stream gets there the server
 * sends a HOST_CALL event and holds the stream until HOST_CALL_DONE.
 *
 * Callbacks run one at a time, in the order the events arrive, on one
 * dedicated thread, never on an application thread: the event is often read
 * by an application thread that holds the client lock while it waits for
 * that very stream.  That thread only queues the call (hook below); the
 * callback thread runs it and answers with rgpu_send_host_call_done_now,
 * which does not need the client lock.  While callbacks are outstanding
 * and nobody else reads, the callback thread reads the connection itself
 * (rgpu_client_try_pump), so a program that spins on a flag its callback
 * sets still makes progress.
 *
 * A callback may not call CUDA (CUDA's own rule); if it does, calls that
 * would need the server return cudaErrorNotPermitted instead of
 * deadlocking, and cudaGetLastError/cudaPeekAtLastError answer from local
 * state. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rgpu_array.h"
#include "rgpu_clock.h"
#include "rgpu_fifo.h"
#include "rgpu_cudart.h"
#include "rgpu_cudart_op.h"
#include "rgpu_calls.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"
#include "rgpu_thread_name.h"

typedef struct rgpu_cb_rec {
  uint64_t id;
  cudaHostFn_t host_fn;             /* cudaLaunchHostFunc */
  cudaStreamCallback_t stream_cb;   /* cudaStreamAddCallback */
  cudaStream_t stream;              /* as the program passed it */
  void *user;
  struct rgpu_cb_rec *next;
} rgpu_cb_rec;

/* ---- back-pressure ------------------------------------------------------
 * A real driver takes only so much work behind a host function that has not
 * returned: measured on the H200 (driver 580), enqueueing blocks after
 * about 1,022 copies behind one blocked host function, or after 57 groups
 * of (kernel, copy, event, host function).  On the server that enqueue is
 * made by the session thread, the only reader of the HOST_CALL_DONE that
 * would unblock the stream: tests/e2e/host_callback_data (64 host functions
 * per synchronization) wedged its session that way.  So the client bounds
 * what a stream holds behind its oldest unanswered host function, well
 * inside the driver's limit (each request is at most two driver operations
 * on the server: the operation and its completion marker), and an
 * application thread that would go past it waits, holding no lock, until
 * that host function has run, as it would wait inside a local driver's
 * enqueue. */
#define RGPU_HOST_FUNCS_PER_STREAM 24
#define RGPU_OPS_BEHIND_HOST_FUNC 256
/* Whether the driver's bound is per stream or per context was not
 * measured: all streams together stay inside it too. */
#define RGPU_HOST_FUNCS_TOTAL 48

typedef struct rgpu_cb_pending {
  uint64_t stream; /* wire id */
  uint64_t at;     /* the stream's operation count when it was queued */
  uint64_t id;     /* callback id */
  struct rgpu_cb_pending *next;
} rgpu_cb_pending;

/* Operations submitted to a stream while it has unanswered host functions. */
typedef struct {
  uint64_t stream;
  uint64_t ops;
  size_t pending;
} rgpu_cb_stream;

typedef struct rgpu_cb_call {
  rgpu_cb_rec *rec; /* NULL: unknown id, answer without running anything */
  uint64_t token;
  uint64_t callback;
  rgpu_client *client; /* the session whose server called (the one to answer) */
  struct rgpu_cb_call *next;
} rgpu_cb_call;

/* Guards the lists and counters below.  Taken under the client lock (the
 * hook), so it is third in cudart's lock order (rgpu_cudart_locks.h): never
 * held while the client is pumped, a frame is sent or a callback runs. */
static rgpu_mutex g_lock = RGPU_MUTEX_INITIALIZER;
static pthread_cond_t g_cond; /* (g_lock) a call queued, a record added, stop */
static rgpu_cb_rec *g_waiting;     /* sent, not yet called */
static RGPU_FIFO(rgpu_cb_call) g_calls; /* called by the server, not yet run */
static size_t g_outstanding;       /* registered and not yet answered */
static int g_stop;
static int g_started;
/* (g_lock) unanswered host functions in submission order, and the streams
 * that have some */
static rgpu_cb_pending *g_pending;
static rgpu_cb_stream *g_streams;
static size_t g_nstreams, g_cap_streams;
static size_t g_npending; /* entries of g_pending */
static pthread_t g_thread;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static __thread int tl_in_callback;

int rgpu_rt_in_host_callback(void) { return tl_in_callback; }

static rgpu_cb_stream *stream_state(uint64_t stream, int create) {
  assert(rgpu_mutex_held(&g_lock));
  for (size_t i = 0; i < g_nstreams; i++)
    if (g_streams[i].stream == stream) return &g_streams[i];
  if (!create || RGPU_ARRAY_RESERVE(g_streams, g_cap_streams, g_nstreams + 1, 8) != 0) return NULL;
  g_streams[g_nstreams] = (rgpu_cb_stream){.stream = stream};
  return &g_streams[g_nstreams++];
}

/* Records host function `id` on `stream` as unanswered.  0, or -1 (no
 * memory: the function is then not bounded, as before). */
static int pending_add(uint64_t stream, uint64_t id) {
  assert(rgpu_mutex_held(&g_lock));
  rgpu_cb_stream *st = stream_state(stream, 1);
  rgpu_cb_pending *p = st ? calloc(1, sizeof *p) : NULL;
  if (!p) return -1;
  *p = (rgpu_cb_pending){.stream = stream, .at = st->ops, .id = id};
  rgpu_cb_pending **pp = &g_pending;
  while (*pp) pp = &(*pp)->next;
  *pp = p;
  st->pending++;
  g_npending++;
  return 0;
}

/* Host function `id` was answered (or will never run): its stream may take
 * more work. */
static void pending_remove(uint64_t id) {
  assert(rgpu_mutex_held(&g_lock));
  for (rgpu_cb_pending **pp = &g_pending; *pp; pp = &(*pp)->next)
    if ((*pp)->id == id) {
      rgpu_cb_pending *p = *pp;
      *pp = p->next;
      g_npending--;
      rgpu_cb_stream *st = stream_state(p->stream, 0);
      if (st && st->pending && --st->pending == 0) *st = g_streams[--g_nstreams];
      free(p);
      pthread_cond_broadcast(&g_cond);
      return;
    }
}

/* 1 while one more operation on `stream` (`host_fn`: a host function)
 * would go past the bounds above. */
static int stream_full(uint64_t stream, int host_fn) {
  assert(rgpu_mutex_held(&g_lock));
  if (host_fn && g_npending >= RGPU_HOST_FUNCS_TOTAL) return 1;
  const rgpu_cb_stream *st = stream_state(stream, 0);
  if (!st) return 0;
  if (host_fn && st->pending >= RGPU_HOST_FUNCS_PER_STREAM) return 1;
  for (const rgpu_cb_pending *p = g_pending; p; p = p->next)
    if (p->stream == stream) return st->ops - p->at >= RGPU_OPS_BEHIND_HOST_FUNC;
  return 0;
}

static int context_failed(rgpu_client *c) {
  assert(rgpu_mutex_not_held(&g_lock));
  rgpu_err_state *es = rgpu_rt_err_state_of(c);
  rgpu_mutex_lock(&es->lock);
  int sticky = es->sticky != cudaSuccess;
  rgpu_mutex_unlock(&es->lock);
  return sticky || rgpu_client_async_error_pending(c);
}

void rgpu_rt_host_pending_forget(void) {
  rgpu_mutex_lock(&g_lock);
  for (rgpu_cb_pending *p = g_pending, *n; p; p = n) {
    n = p->next;
    free(p);
  }
  g_pending = NULL;
  g_nstreams = 0;
  g_npending = 0;
  pthread_cond_broadcast(&g_cond);
  rgpu_mutex_unlock(&g_lock);
}

void rgpu_rt_host_backpressure(rgpu_client *c, uint64_t stream, int host_fn) {
  /* A callback cannot wait for itself; CUDA calls from one are refused
   * anyway (cudaErrorNotPermitted). */
  if (!g_started || tl_in_callback) return;
  assert(rgpu_mutex_held_count() == 0);
  rgpu_mutex_lock(&g_lock);
  int flushed = 0;
  while (stream_full(stream, host_fn) && !g_stop && !rgpu_client_is_dead(c)) {
    rgpu_mutex_unlock(&g_lock);
    /* After a fault in the context the server's stream never reaches its
     * host functions (cuLaunchHostFunc's rule) and later work fails at
     * once: nothing is left to wait for. */
    if (context_failed(c)) {
      rgpu_mutex_lock(&g_lock);
      break;
    }
    if (!flushed) {
      /* The server must see the host functions we wait for; the callback
       * thread reads their HOST_CALLs while this thread waits. */
      rgpu_client_lock(c);
      (void)rgpu_client_flush_locked(c);
      rgpu_client_unlock(c);
      flushed = 1;
    }
    rgpu_mutex_lock(&g_lock);
    struct timespec ts = rgpu_clock_timespec_in(10 * RGPU_NS_PER_MS);
    rgpu_mutex_cond_timedwait(&g_cond, &g_lock, &ts);
  }
  rgpu_cb_stream *st = stream_state(stream, 0);
  if (st) st->ops++;
  rgpu_mutex_unlock(&g_lock);
}

/* Unlinks and returns the record of callback id from g_waiting (NULL: none). */
static rgpu_cb_rec *waiting_take(uint64_t id) {
  assert(rgpu_mutex_held(&g_lock));
  for (rgpu_cb_rec **pp = &g_waiting; *pp; pp = &(*pp)->next)
    if ((*pp)->id == id) {
      rgpu_cb_rec *rec = *pp;
      *pp = rec->next;
      return rec;
    }
  return NULL;
}

/* Called with the client lock held, from whichever thread reads. */
static void on_host_call(void *ctx, uint64_t callback, uint64_t token) {
  rgpu_client *from = ctx;
  rgpu_cb_call *call = calloc(1, sizeof *call);
  rgpu_mutex_lock(&g_lock);
  rgpu_cb_rec *rec = waiting_take(callback);
  if (!rec) RGPU_WARN("server called unknown host callback %llu; answering without running it",
                      (unsigned long long)callback);
  if (call) {
    *call = (rgpu_cb_call){.rec = rec, .token = token, .callback = callback, .client = from};
    rgpu_fifo_push(&g_calls, call, next);
    pthread_cond_broadcast(&g_cond);
  } else {
    /* Without memory the stream would wait forever: keep its record for
     * the log and let the session's end release the stream. */
    RGPU_ERROR("out of memory queueing host callback %llu", (unsigned long long)callback);
    free(rec);
  }
  rgpu_mutex_unlock(&g_lock);
}

/* HOST_CALL_DONE releases the server's stream.  Written at once under the
 * client's write lock only (no reply, no client lock: an application
 * thread may hold that lock while it waits for this very stream). */
static void answer(rgpu_client *c, uint64_t token) {
  assert(rgpu_mutex_not_held(&g_lock));
  rgpu_msg_host_call_done_req m = {.token = token};
  if (rgpu_send_host_call_done_now(c, &m) != 0)
    RGPU_DEBUG("could not answer host callback (connection lost)");
}

static void *callback_main(void *arg) {
  rgpu_thread_name("rgpu-hostfn");
  (void)arg;
  rgpu_mutex_lock(&g_lock);
  for (;;) {
    while (rgpu_fifo_empty(&g_calls) && !g_stop) {
      /* Every live session (several servers: issue 19) may call back. */
      rgpu_client *cs[RGPU_CLIENT_MAX_SERVERS];
      int n = 0;
      if (rgpu_rt_client_peek())
        for (int i = 0; i < rgpu_rt_server_count() && n < RGPU_CLIENT_MAX_SERVERS; i++) {
          rgpu_client *ci = rgpu_rt_server_client(i);
          if (ci && !rgpu_client_is_dead(ci)) cs[n++] = ci;
        }
      if (!g_outstanding || n == 0) {
        rgpu_mutex_cond_wait(&g_cond, &g_lock);
        continue;
      }
      /* Outstanding callbacks: make sure their events get read even when no
       * application thread waits. */
      rgpu_mutex_unlock(&g_lock);
      /* The pump may call on_host_call, which takes g_lock. */
      assert(rgpu_mutex_held_count() == 0);
      int busy = 0;
      for (int i = 0; i < n; i++) busy |= rgpu_client_try_pump(cs[i]) == 1;
      rgpu_mutex_lock(&g_lock);
      if (!rgpu_fifo_empty(&g_calls) || g_stop) break;
      if (busy) {
        /* Someone else reads and will hand us the event. */
        struct timespec ts = rgpu_clock_timespec_in(RGPU_NS_PER_MS);
        rgpu_mutex_cond_timedwait(&g_cond, &g_lock, &ts);
      } else {
        struct pollfd p[RGPU_CLIENT_MAX_SERVERS];
        int np = 0;
        for (int i = 0; i < n; i++) {
          int fd = rgpu_client_poll_fd(cs[i]);
          if (fd >= 0) p[np++] = (struct pollfd){.fd = fd, .events = POLLIN};
        }
        rgpu_mutex_unlock(&g_lock);
        if (np) poll(p, (nfds_t)np, 1);
        rgpu_mutex_lock(&g_lock);
      }
    }
    if (rgpu_fifo_empty(&g_calls)) break; /* stopping and nothing left to run */
    rgpu_cb_call *call = rgpu_fifo_pop(&g_calls, next);
    rgpu_mutex_unlock(&g_lock);

    rgpu_cb_rec *rec = call->rec;
    int known = rec != NULL;
    uint64_t call_id = call->callback;
    assert(rgpu_mutex_held_count() == 0); /* user code runs next: no lock of ours held */
    if (rec) {
      tl_in_callback = 1;
      if (rec->host_fn)
        rec->host_fn(rec->user);
      else if (rec->stream_cb)
        rec->stream_cb(rec->stream, cudaSuccess, rec->user);
      tl_in_callback = 0;
    }
    rgpu_client *c = call->client ? call->client : rgpu_rt_client_peek();
    if (c) answer(c, call->token);
    free(rec);
    free(call);

    rgpu_mutex_lock(&g_lock);
    if (known && g_outstanding) g_outstanding--;
    pending_remove(call_id);
  }
  rgpu_mutex_unlock(&g_lock);
  return NULL;
}

static void start_once(void) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&g_cond, &ca);
  pthread_condattr_destroy(&ca);
  if (pthread_create(&g_thread, NULL, callback_main, NULL) == 0) g_started = 1;
  else RGPU_ERROR("cannot start the host callback thread: %s", strerror(errno));
}

void rgpu_rt_callbacks_stop(void) {
  if (!g_started) return;
  rgpu_mutex_lock(&g_lock);
  g_stop = 1;
  pthread_cond_broadcast(&g_cond);
  rgpu_mutex_unlock(&g_lock);
  pthread_join(g_thread, NULL);
  g_started = 0;
  for (rgpu_cb_rec *r = g_waiting, *n; r; r = n) {
    n = r->next;
    free(r);
  }
  g_waiting = NULL;
  for (rgpu_cb_pending *p = g_pending, *n; p; p = n) {
    n = p->next;
    free(p);
  }
  g_pending = NULL;
  g_npending = 0;
  free(g_streams);
  g_streams = NULL;
  g_nstreams = g_cap_streams = 0;
}

static cudaError_t enqueue(cudaStream_t stream, int per_thread, cudaHostFn_t fn,
                           cudaStreamCallback_t scb, void *user) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!fn && !scb) return rgpu_rt_ret(cudaErrorInvalidValue);
  uint64_t wire;
  int dev;
  e = rgpu_rt_stream_resolve(c, stream, per_thread, &wire, &dev);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  rgpu_rt_op op = {.kind = RGPU_RT_OP_HOST_FUNC, .stream = wire, .device = dev};
  op.host.params = (struct cudaHostNodeParams){.fn = fn, .userData = user};
  op.host.stream_cb = scb;
  op.host.handle = stream;
  return rgpu_rt_submit(c, &op);
}

/* The wire side of a host function: registered here, so that the server's
 * HOST_CALL finds it, then queued as HOST_FUNC (no reply). */
cudaError_t rgpu_rt_host_func_send(rgpu_client *c, const rgpu_rt_op *op) {
  cudaHostFn_t fn = op->host.params.fn;
  void *user = op->host.params.userData;
  cudaStreamCallback_t scb = op->host.stream_cb;
  cudaStream_t stream = op->host.handle;
  uint64_t wire = op->stream;
  int dev = op->device;
  pthread_once(&g_once, start_once);
  if (!g_started) return rgpu_rt_ret(cudaErrorMemoryAllocation);
  rgpu_cb_rec *rec = calloc(1, sizeof *rec);
  if (!rec) return rgpu_rt_ret(cudaErrorMemoryAllocation);
  *rec = (rgpu_cb_rec){.id = rgpu_rt_new_handle_id(), .host_fn = fn, .stream_cb = scb,
                       .stream = stream, .user = user};
  rgpu_client_set_host_call_hook(c, on_host_call, c);
  rgpu_mutex_lock(&g_lock);
  rec->next = g_waiting;
  g_waiting = rec;
  g_outstanding++;
  (void)pending_add(wire, rec->id);
  pthread_cond_broadcast(&g_cond);
  rgpu_mutex_unlock(&g_lock);

  rgpu_msg_host_func_req m = {.stream = wire, .callback = rec->id};
  uint64_t id = rec->id;
  rgpu_status rc = rgpu_call_host_func(c, dev, RGPU_CALL_ASYNC, &m, NULL, NULL);
  if (rc == 0) return cudaSuccess;
  /* Refused at once (sync-every-call mode, or the connection failed): the
   * server will never call it. */
  rgpu_mutex_lock(&g_lock);
  rgpu_cb_rec *dead = waiting_take(id);
  if (dead && g_outstanding) g_outstanding--;
  pending_remove(id);
  rgpu_mutex_unlock(&g_lock);
  free(dead);
  return rgpu_rt_sync_ret(c, rc);
}

RGPU_API cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData) {
  return enqueue(stream, 0, fn, NULL, userData);
}
RGPU_API_PTSZ(cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn,
                                                  void *userData)) {
  return enqueue(stream, 1, fn, NULL, userData);
}

/* flags "must be zero" (CUDA's documentation); the callback gets
 * cudaSuccess: after an error in the context the server's stream does not
 * reach it at all, as cuLaunchHostFunc documents. */
static cudaError_t add_callback(cudaStream_t stream, cudaStreamCallback_t cb, void *user,
                                unsigned flags, int per_thread) {
  if (flags != 0) {
    rgpu_rt_count_call();
    return rgpu_rt_ret(cudaErrorInvalidValue);
  }
  return enqueue(stream, per_thread, NULL, cb, user);
}

RGPU_API cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback,
                                           void *userData, unsigned int flags) {
  return add_callback(stream, callback, userData, flags, 0);
}
RGPU_API_PTSZ(cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t stream,
                                                     cudaStreamCallback_t callback, void *userData,
                                                     unsigned int flags)) {
  return add_callback(stream, callback, userData, flags, 1);
}
