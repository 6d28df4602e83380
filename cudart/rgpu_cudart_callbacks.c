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
 * callback thread runs it and answers with rgpu_client_send_now, which does
 * not need the client lock.  While callbacks are outstanding and nobody
 * else reads, the callback thread reads the connection itself
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

#include "rgpu_clock.h"
#include "rgpu_cudart.h"
#include "rgpu_cudart_graph.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"

typedef struct rgpu_cb_rec {
  uint64_t id;
  cudaHostFn_t host_fn;             /* cudaLaunchHostFunc */
  cudaStreamCallback_t stream_cb;   /* cudaStreamAddCallback */
  cudaStream_t stream;              /* as the program passed it */
  void *user;
  struct rgpu_cb_rec *next;
} rgpu_cb_rec;

typedef struct rgpu_cb_call {
  rgpu_cb_rec *rec; /* NULL: unknown id, answer without running anything */
  uint64_t token;
  uint64_t callback;
  struct rgpu_cb_call *next;
} rgpu_cb_call;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond;
static rgpu_cb_rec *g_waiting;     /* sent, not yet called */
static rgpu_cb_call *g_head, *g_tail; /* called by the server, not yet run */
static size_t g_outstanding;       /* registered and not yet answered */
static int g_stop;
static int g_started;
static pthread_t g_thread;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static __thread int tl_in_callback;

int rgpu_rt_in_host_callback(void) { return tl_in_callback; }

/* Called with the client lock held, from whichever thread reads. */
static void on_host_call(void *ctx, uint64_t callback, uint64_t token) {
  (void)ctx;
  rgpu_cb_call *call = calloc(1, sizeof *call);
  pthread_mutex_lock(&g_lock);
  rgpu_cb_rec *rec = NULL;
  for (rgpu_cb_rec **pp = &g_waiting; *pp; pp = &(*pp)->next)
    if ((*pp)->id == callback) {
      rec = *pp;
      *pp = rec->next;
      break;
    }
  if (!rec) RGPU_WARN("server called unknown host callback %llu; answering without running it",
                      (unsigned long long)callback);
  if (call) {
    *call = (rgpu_cb_call){.rec = rec, .token = token, .callback = callback};
    if (g_tail) g_tail->next = call;
    else g_head = call;
    g_tail = call;
    pthread_cond_broadcast(&g_cond);
  } else {
    /* Without memory the stream would wait forever: keep its record for
     * the log and let the session's end release the stream. */
    RGPU_ERROR("out of memory queueing host callback %llu", (unsigned long long)callback);
    free(rec);
  }
  pthread_mutex_unlock(&g_lock);
}

static void answer(rgpu_client *c, uint64_t token) {
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_host_call_done_req m = {.token = token};
  rgpu_msg_host_call_done_req_encode(&b, &m);
  if (!b.err && rgpu_client_send_now(c, RGPU_OP_HOST_CALL_DONE, b.data, b.len) != 0)
    RGPU_DEBUG("could not answer host callback (connection lost)");
  rgpu_buf_free(&b);
}

static void *callback_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&g_lock);
  for (;;) {
    while (!g_head && !g_stop) {
      rgpu_client *c = rgpu_rt_client_peek();
      if (!g_outstanding || !c || rgpu_client_is_dead(c)) {
        pthread_cond_wait(&g_cond, &g_lock);
        continue;
      }
      /* Outstanding callbacks: make sure their events get read even when no
       * application thread waits. */
      pthread_mutex_unlock(&g_lock);
      int busy = rgpu_client_try_pump(c) == 1;
      pthread_mutex_lock(&g_lock);
      if (g_head || g_stop) break;
      if (busy) {
        /* Someone else reads and will hand us the event. */
        struct timespec ts = rgpu_clock_timespec_in(RGPU_NS_PER_MS);
        pthread_cond_timedwait(&g_cond, &g_lock, &ts);
      } else {
        int fd = rgpu_client_poll_fd(c);
        pthread_mutex_unlock(&g_lock);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (fd >= 0) poll(&p, 1, 1);
        pthread_mutex_lock(&g_lock);
      }
    }
    if (!g_head) break; /* stopping and nothing left to run */
    rgpu_cb_call *call = g_head;
    g_head = call->next;
    if (!g_head) g_tail = NULL;
    pthread_mutex_unlock(&g_lock);

    rgpu_cb_rec *rec = call->rec;
    int known = rec != NULL;
    if (rec) {
      tl_in_callback = 1;
      if (rec->host_fn)
        rec->host_fn(rec->user);
      else if (rec->stream_cb)
        rec->stream_cb(rec->stream, cudaSuccess, rec->user);
      tl_in_callback = 0;
    }
    rgpu_client *c = rgpu_rt_client_peek();
    if (c) answer(c, call->token);
    free(rec);
    free(call);

    pthread_mutex_lock(&g_lock);
    if (known && g_outstanding) g_outstanding--;
  }
  pthread_mutex_unlock(&g_lock);
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
  pthread_mutex_lock(&g_lock);
  g_stop = 1;
  pthread_cond_broadcast(&g_cond);
  pthread_mutex_unlock(&g_lock);
  pthread_join(g_thread, NULL);
  g_started = 0;
  for (rgpu_cb_rec *r = g_waiting, *n; r; r = n) {
    n = r->next;
    free(r);
  }
  g_waiting = NULL;
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
  if (rgpu_rt_graph_take_host_func(wire, fn, user, scb != NULL, &e)) return rgpu_rt_ret(e);
  pthread_once(&g_once, start_once);
  if (!g_started) return rgpu_rt_ret(cudaErrorMemoryAllocation);
  rgpu_cb_rec *rec = calloc(1, sizeof *rec);
  if (!rec) return rgpu_rt_ret(cudaErrorMemoryAllocation);
  *rec = (rgpu_cb_rec){.id = rgpu_rt_new_handle_id(), .host_fn = fn, .stream_cb = scb,
                       .stream = stream, .user = user};
  rgpu_client_set_host_call_hook(c, on_host_call, NULL);
  pthread_mutex_lock(&g_lock);
  rec->next = g_waiting;
  g_waiting = rec;
  g_outstanding++;
  pthread_cond_broadcast(&g_cond);
  pthread_mutex_unlock(&g_lock);

  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_host_func_req m = {.stream = wire, .callback = rec->id};
  rgpu_msg_host_func_req_encode(&b, &m);
  uint64_t id = rec->id;
  int rc = rgpu_client_call(c, dev, RGPU_OP_HOST_FUNC, 1, b.data, b.len, NULL, 0, NULL);
  rgpu_buf_free(&b);
  if (rc == 0) return cudaSuccess;
  /* Refused at once (sync-every-call mode, or the connection failed): the
   * server will never call it. */
  pthread_mutex_lock(&g_lock);
  for (rgpu_cb_rec **pp = &g_waiting; *pp; pp = &(*pp)->next)
    if ((*pp)->id == id) {
      rgpu_cb_rec *dead = *pp;
      *pp = dead->next;
      free(dead);
      if (g_outstanding) g_outstanding--;
      break;
    }
  pthread_mutex_unlock(&g_lock);
  return rgpu_rt_sync_ret(c, rc);
}

RGPU_API cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData) {
  return enqueue(stream, 0, fn, NULL, userData);
}
RGPU_API cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn,
                                             void *userData);
RGPU_API cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn,
                                             void *userData) {
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
RGPU_API cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t stream,
                                                cudaStreamCallback_t callback, void *userData,
                                                unsigned int flags);
RGPU_API cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t stream,
                                                cudaStreamCallback_t callback, void *userData,
                                                unsigned int flags) {
  return add_callback(stream, callback, userData, flags, 1);
}
