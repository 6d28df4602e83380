/* softgpu streams and events.
 *
 * Each stream is a FIFO of operations run in order by its own worker
 * thread.  Ordering between streams is expressed as waits: an op carries
 * (stream, seq) pairs and starts only when each of those streams has
 * completed that sequence number.  That one mechanism gives
 * cuStreamWaitEvent and the legacy NULL stream's implicit synchronisation
 * (the legacy stream waits for every blocking stream's earlier work, and a
 * blocking stream waits for the legacy stream's).  Waits always name work
 * queued earlier, under one lock, so they cannot form a cycle.
 *
 * One global lock and one condition variable keep this simple and make
 * cross-context waits work; softgpu's work items are coarse (copies,
 * kernels), so contention does not matter. */
#include <stdlib.h>
#include <string.h>

#include "sg_internal.h"
#include "rgpu_clock.h"
#include "rgpu_fifo.h"
#include "rgpu_thread_name.h"

pthread_mutex_t sg_sched_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t progress = PTHREAD_COND_INITIALIZER;

sg_op *sg_op_new(sg_op_type type) {
  sg_op *op = calloc(1, sizeof *op);
  if (op) op->type = type;
  return op;
}

/* ---- reference counting (all under sg_sched_lock) ----------------------- */

static void stream_unref_locked(sg_stream *s) {
  if (--s->refs > 0) return;
  pthread_cond_destroy(&s->work);
  free(s->cap_deps);
  free(s);
}

static void event_unref_locked(sg_event *e) {
  if (--e->refs > 0) return;
  if (e->stream) stream_unref_locked(e->stream);
  free(e->cap_nodes);
  free(e);
}

static void op_free_locked(sg_op *op) {
  for (int i = 0; i < op->nwaits; i++) stream_unref_locked(op->waits[i].stream);
  for (int i = 0; i < op->nmore; i++) stream_unref_locked(op->more_waits[i].stream);
  free(op->more_waits);
  if (op->type == SG_OP_COPY) free(op->u.copy.staging);
  if (op->type == SG_OP_LAUNCH) {
    free(op->u.launch.params);
    /* Normally released by the worker outside the lock; this path is for
     * launches that never ran. */
    if (op->u.launch.fn) sg_module_unref(op->u.launch.fn->mod);
  }
  if (op->type == SG_OP_RECORD) event_unref_locked(op->u.record.ev);
  if (op->type == SG_OP_FUNC && op->u.func.free) op->u.func.free(op->u.func.arg);
  free(op);
}

/* Frees an op that never went through prepare_locked: a record has not
 * taken its event reference yet. */
static void discard_locked(sg_op *op) {
  if (op->type == SG_OP_RECORD && !op->seq) op->type = SG_OP_NOP;
  op_free_locked(op);
}

static int waits_done(const sg_op *op) {
  for (int i = 0; i < op->nwaits; i++)
    if (op->waits[i].stream->completed < op->waits[i].seq) return 0;
  for (int i = 0; i < op->nmore; i++)
    if (op->more_waits[i].stream->completed < op->more_waits[i].seq) return 0;
  return 1;
}

/* ---- the worker --------------------------------------------------------- */

static void run_op(sg_ctx *c, sg_op *op) {
  int sticky = atomic_load(&c->sticky);
  switch (op->type) {
  case SG_OP_COPY:
    if (!sticky) sg_exec_copy(c, op);
    break;
  case SG_OP_MEMSET:
    if (!sticky) sg_exec_memset(c, op);
    break;
  case SG_OP_LAUNCH:
    /* A faulted GPU runs nothing more; neither do we. */
    if (!sticky) sg_module_run_launch(op);
    break;
  case SG_OP_HOSTFN:
    /* cuLaunchHostFunc: "the function will not be called in the event of an
     * error in the CUDA context". */
    if (!sticky) op->u.hostfn.fn(op->u.hostfn.user);
    break;
  case SG_OP_CALLBACK:
    op->u.callback.fn(op->u.callback.handle, (CUresult)sticky, op->u.callback.user);
    break;
  case SG_OP_FUNC:
    if (!sticky) op->u.func.run(c, op->u.func.arg);
    break;
  default:
    break;
  }
}

static void stream_stop_locked(sg_stream *s);

static void *worker_main(void *arg) {
  rgpu_thread_name("sg-stream");
  sg_stream *s = arg;
  pthread_mutex_lock(&sg_sched_lock);
  for (;;) {
    while (rgpu_fifo_empty(s) || s->inline_running) pthread_cond_wait(&s->work, &sg_sched_lock);
    sg_op *op = rgpu_fifo_peek(s);
    while (!waits_done(op)) pthread_cond_wait(&progress, &sg_sched_lock);
    (void)rgpu_fifo_pop(s, next); /* op: only this thread takes from s */
    int exit_now = op->type == SG_OP_EXIT;
    if (!exit_now && op->type != SG_OP_RECORD && op->type != SG_OP_NOP) {
      pthread_mutex_unlock(&sg_sched_lock);
      run_op(s->ctx, op);
      if (op->type == SG_OP_LAUNCH) {
        /* Unloading frees device memory, which waits for in-flight
         * accesses: never do that while holding the scheduler lock. */
        sg_module_unref(op->u.launch.fn->mod);
        op->u.launch.fn = NULL;
      }
      pthread_mutex_lock(&sg_sched_lock);
    }
    if (op->type == SG_OP_RECORD) {
      sg_event *e = op->u.record.ev;
      if (e->gen == op->u.record.gen) {
        e->time_ns = rgpu_clock_ns();
        e->has_time = 1;
      }
    }
    s->completed = op->seq;
    op_free_locked(op);
    pthread_cond_broadcast(&progress);
    if (exit_now) break;
  }
  /* Leave the context's list; whoever tears the context down waits for
   * the list to empty. */
  sg_stream **pp = &s->ctx->streams;
  while (*pp && *pp != s) pp = &(*pp)->next;
  if (*pp) *pp = s->next;
  pthread_cond_broadcast(&progress);
  stream_unref_locked(s);
  pthread_mutex_unlock(&sg_sched_lock);
  return NULL;
}

static CUresult stream_new(sg_ctx *c, unsigned flags, int prio, int legacy, int ptds, sg_stream **out) {
  sg_stream *s = calloc(1, sizeof *s);
  if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
  s->ctx = c;
  s->flags = flags;
  s->priority = prio;
  s->is_legacy = legacy;
  s->is_ptds = ptds;
  if (ptds) s->ptds_owner = pthread_self();
  s->refs = 2; /* the handle and the worker */
  pthread_cond_init(&s->work, NULL);
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&at, 1 << 20);
  pthread_mutex_lock(&sg_sched_lock);
  int rc = pthread_create(&s->thread, &at, worker_main, s);
  pthread_attr_destroy(&at);
  if (rc != 0) {
    pthread_mutex_unlock(&sg_sched_lock);
    pthread_cond_destroy(&s->work);
    free(s);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  s->next = c->streams;
  c->streams = s;
  pthread_mutex_unlock(&sg_sched_lock);
  if (!legacy && !ptds && sg_handle_add(s, SG_H_STREAM) != 0) {
    pthread_mutex_lock(&sg_sched_lock);
    stream_stop_locked(s);
    stream_unref_locked(s);
    pthread_mutex_unlock(&sg_sched_lock);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *out = s;
  return CUDA_SUCCESS;
}

CUresult sg_stream_create_legacy(sg_ctx *c) { return stream_new(c, 0, 0, 1, 0, &c->legacy); }

/* Per-thread default stream of the calling thread in c, created on first
 * use.  It is a blocking stream: it synchronises with the legacy stream. */
static CUresult ptds_get(sg_ctx *c, sg_stream **out) {
  pthread_t me = pthread_self();
  pthread_mutex_lock(&sg_sched_lock);
  for (sg_stream *s = c->streams; s; s = s->next)
    if (s->is_ptds && !s->destroyed && pthread_equal(s->ptds_owner, me)) {
      pthread_mutex_unlock(&sg_sched_lock);
      *out = s;
      return CUDA_SUCCESS;
    }
  pthread_mutex_unlock(&sg_sched_lock);
  return stream_new(c, 0, 0, 0, 1, out);
}

CUresult sg_stream_resolve(CUstream h, sg_stream **out) {
  CUresult r;
  sg_ctx *c;
  if (h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
    r = sg_current(&c);
    if (r) return r;
    if (h == CU_STREAM_PER_THREAD) return ptds_get(c, out);
    pthread_mutex_lock(&sg_sched_lock);
    *out = c->legacy;
    pthread_mutex_unlock(&sg_sched_lock);
    /* NULL only while a concurrent reset tears the context down. */
    return *out ? CUDA_SUCCESS : CUDA_ERROR_CONTEXT_IS_DESTROYED;
  }
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!sg_handle_ok(h, SG_H_STREAM)) return CUDA_ERROR_INVALID_HANDLE;
  r = sg_ctx_usable(h->ctx);
  if (r) return r;
  *out = h;
  return CUDA_SUCCESS;
}

/* Gives op its place in s: the implicit legacy-stream waits, its sequence
 * number, and an event record's bookkeeping.  sg_sched_lock held; on
 * failure op is freed. */
static CUresult prepare_locked(sg_stream *s, sg_op *op) {
  sg_ctx *c = s->ctx;
  if (op->type != SG_OP_EXIT) {
    if (s->is_legacy) {
      int n = 0;
      for (sg_stream *t = c->streams; t; t = t->next)
        if (t != s && !(t->flags & CU_STREAM_NON_BLOCKING) && t->submitted > t->completed) n++;
      if (n) {
        op->more_waits = malloc((size_t)n * sizeof *op->more_waits);
        if (!op->more_waits) {
          discard_locked(op);
          return CUDA_ERROR_OUT_OF_MEMORY;
        }
        for (sg_stream *t = c->streams; t; t = t->next)
          if (t != s && !(t->flags & CU_STREAM_NON_BLOCKING) && t->submitted > t->completed) {
            op->more_waits[op->nmore].stream = t;
            op->more_waits[op->nmore].seq = t->submitted;
            op->nmore++;
            t->refs++;
          }
      }
    } else if (!(s->flags & CU_STREAM_NON_BLOCKING)) {
      sg_stream *l = c->legacy;
      if (l && l->submitted > l->completed && op->nwaits < 4) {
        op->waits[op->nwaits].stream = l;
        op->waits[op->nwaits].seq = l->submitted;
        op->nwaits++;
        l->refs++;
      }
    }
  }
  op->seq = ++s->submitted;
  if (op->type == SG_OP_RECORD) {
    sg_event *e = op->u.record.ev;
    e->refs++;
    if (e->stream != s) {
      if (e->stream) stream_unref_locked(e->stream);
      e->stream = s;
      s->refs++;
    }
    e->seq = op->seq;
    e->gen++;
    e->has_time = 0;
    op->u.record.gen = e->gen;
  }
  return CUDA_SUCCESS;
}

static void append_locked(sg_stream *s, sg_op *op) { rgpu_fifo_push(s, op, next); }

CUresult sg_submit(sg_stream *s, sg_op *op, int wait) {
  sg_ctx *c = s->ctx;
  CUresult cr;
  if (atomic_load(&sg_captures_active) && sg_capture_submit(s, op, wait, &cr)) return cr;
  pthread_mutex_lock(&sg_sched_lock);
  if (s->destroyed) {
    /* Lost a race with cuStreamDestroy or a context teardown: the worker is
     * gone or going, so the op would never run (and a waiter never wake). */
    discard_locked(op);
    pthread_mutex_unlock(&sg_sched_lock);
    return c->active ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_CONTEXT_IS_DESTROYED;
  }
  cr = prepare_locked(s, op);
  if (cr) {
    pthread_mutex_unlock(&sg_sched_lock);
    return cr;
  }
  uint64_t seq = op->seq;
  if (wait && !op->nwaits && !op->nmore && rgpu_fifo_empty(s) && s->completed + 1 == seq &&
      (op->type == SG_OP_COPY || op->type == SG_OP_MEMSET || op->type == SG_OP_NOP)) {
    /* Idle stream, nothing to wait for: run a synchronous copy or memset
     * right here instead of paying two thread hand-offs.  The worker holds
     * back anything queued meanwhile until this is done. */
    s->inline_running = 1;
    s->refs++;
    pthread_mutex_unlock(&sg_sched_lock);
    run_op(s->ctx, op);
    pthread_mutex_lock(&sg_sched_lock);
    s->inline_running = 0;
    s->completed = seq;
    op_free_locked(op);
    pthread_cond_broadcast(&progress);
    pthread_cond_signal(&s->work);
    stream_unref_locked(s);
    pthread_mutex_unlock(&sg_sched_lock);
    return (CUresult)atomic_load(&c->sticky);
  }
  append_locked(s, op);
  pthread_cond_signal(&s->work);
  if (wait) {
    s->refs++;
    while (s->completed < seq) pthread_cond_wait(&progress, &sg_sched_lock);
    stream_unref_locked(s);
  }
  pthread_mutex_unlock(&sg_sched_lock);
  return wait ? (CUresult)atomic_load(&c->sticky) : CUDA_SUCCESS;
}

void sg_stream_ref(sg_stream *s) {
  pthread_mutex_lock(&sg_sched_lock);
  s->refs++;
  pthread_mutex_unlock(&sg_sched_lock);
}

void sg_stream_unref(sg_stream *s) {
  pthread_mutex_lock(&sg_sched_lock);
  stream_unref_locked(s);
  pthread_mutex_unlock(&sg_sched_lock);
}

/* A conditional node's body runs inside that node's own op, on the stream
 * thread: the stream's order already holds, so its ops need no queue, only
 * what the worker does with each (sg_graph_cond.c builds them without
 * waits, records or host functions: CUDA allows none in a body). */
void sg_run_chain_inline(sg_ctx *c, sg_op *first) {
  for (sg_op *op = first; op; op = op->next) {
    run_op(c, op);
    if (op->type == SG_OP_LAUNCH) {
      sg_module_unref(op->u.launch.fn->mod);
      op->u.launch.fn = NULL;
    }
  }
  sg_op_free_chain(first);
}

void sg_op_free_chain(sg_op *first) {
  pthread_mutex_lock(&sg_sched_lock);
  while (first) {
    sg_op *op = first;
    first = op->next;
    discard_locked(op);
  }
  pthread_mutex_unlock(&sg_sched_lock);
}

CUresult sg_submit_chain(sg_stream *s, sg_op *first) {
  sg_ctx *c = s->ctx;
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&sg_sched_lock);
  if (s->destroyed) r = c->active ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_CONTEXT_IS_DESTROYED;
  while (first) {
    sg_op *op = first;
    first = op->next;
    if (r) {
      discard_locked(op);
      continue;
    }
    r = prepare_locked(s, op);
    if (!r) append_locked(s, op);
  }
  pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&sg_sched_lock);
  return r;
}

void sg_ctx_drain(sg_ctx *c) {
  pthread_mutex_lock(&sg_sched_lock);
  for (;;) {
    int busy = 0;
    for (sg_stream *s = c->streams; s; s = s->next)
      if (s->completed < s->submitted) busy = 1;
    if (!busy) break;
    pthread_cond_wait(&progress, &sg_sched_lock);
  }
  pthread_mutex_unlock(&sg_sched_lock);
}

static void stream_stop_locked(sg_stream *s) {
  if (s->destroyed) return;
  s->destroyed = 1;
  sg_op *op = sg_op_new(SG_OP_EXIT);
  if (!op) return; /* the worker then lives on; nothing else is at risk */
  op->seq = ++s->submitted;
  append_locked(s, op);
  pthread_cond_signal(&s->work);
}

void sg_ctx_release_streams(sg_ctx *c) {
  pthread_mutex_lock(&sg_sched_lock);
  for (sg_stream *s = c->streams; s; s = s->next) {
    if (!s->destroyed) {
      /* Drop the handle's reference (legacy and per-thread streams hold
       * one as well); the worker keeps its own until it exits. */
      if (!s->is_legacy && !s->is_ptds) sg_handle_del(s);
      s->refs--;
    }
    stream_stop_locked(s);
  }
  while (c->streams) pthread_cond_wait(&progress, &sg_sched_lock);
  c->legacy = NULL;
  sg_event *e = c->events;
  c->events = NULL;
  while (e) {
    sg_event *n = e->next;
    sg_handle_del(e);
    event_unref_locked(e);
    e = n;
  }
  pthread_mutex_unlock(&sg_sched_lock);
}

/* ---- stream API --------------------------------------------------------- */

SG_EXPORT CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority) {
  sg_ctx *c;
  CUresult r = sg_current(&c);
  if (r) return r;
  if (!phStream || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
  /* Out-of-range priorities are clamped, as the driver does. */
  if (priority > 0) priority = 0;
  if (priority < -5) priority = -5;
  sg_stream *s;
  r = stream_new(c, flags, priority, 0, 0, &s);
  if (r) return r;
  *phStream = s;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags) {
  return cuStreamCreateWithPriority(phStream, Flags, 0);
}

SG_EXPORT CUresult CUDAAPI cuStreamDestroy(CUstream hStream) {
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!sg_handle_ok(hStream, SG_H_STREAM)) return CUDA_ERROR_INVALID_HANDLE;
  CUresult r = sg_ctx_usable(hStream->ctx);
  if (r) return r;
  sg_handle_del(hStream);
  pthread_mutex_lock(&sg_sched_lock);
  /* Queued work still runs (as with the driver); the worker frees it. */
  stream_stop_locked(hStream);
  stream_unref_locked(hStream);
  pthread_mutex_unlock(&sg_sched_lock);
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuStreamSynchronize(CUstream hStream) {
  sg_stream *s;
  CUresult r = sg_stream_resolve(hStream, &s);
  if (r) return r;
  if (atomic_load(&sg_captures_active) && (r = sg_capture_check_sync(s)) != CUDA_SUCCESS) return r;
  if (s->is_legacy) {
    /* Waiting on the legacy stream is waiting on a marker queued in it now,
     * which (like any legacy-stream work) follows the blocking streams'
     * earlier work. */
    sg_op *op = sg_op_new(SG_OP_NOP);
    if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
    return sg_submit(s, op, 1);
  }
  pthread_mutex_lock(&sg_sched_lock);
  uint64_t target = s->submitted;
  s->refs++;
  while (s->completed < target) pthread_cond_wait(&progress, &sg_sched_lock);
  stream_unref_locked(s);
  pthread_mutex_unlock(&sg_sched_lock);
  return (CUresult)atomic_load(&s->ctx->sticky);
}

SG_EXPORT CUresult CUDAAPI cuStreamQuery(CUstream hStream) {
  sg_stream *s;
  CUresult r = sg_stream_resolve(hStream, &s);
  if (r) return r;
  if (atomic_load(&sg_captures_active) && (r = sg_capture_check_sync(s)) != CUDA_SUCCESS) return r;
  pthread_mutex_lock(&sg_sched_lock);
  int done = s->completed >= s->submitted;
  pthread_mutex_unlock(&sg_sched_lock);
  return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

SG_EXPORT CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  sg_stream *s;
  CUresult r = sg_stream_resolve(hStream, &s);
  if (r) return r;
  if (!sg_handle_ok(hEvent, SG_H_EVENT)) return CUDA_ERROR_INVALID_HANDLE;
  if (Flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
  if (atomic_load(&sg_captures_active) && sg_capture_wait_event(s, hEvent, Flags, &r)) return r;
  sg_op *op = sg_op_new(SG_OP_NOP);
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&sg_sched_lock);
  /* The wait is for the record most recent at the time of this call. */
  if (hEvent->stream) {
    op->waits[0].stream = hEvent->stream;
    op->waits[0].seq = hEvent->seq;
    op->nwaits = 1;
    hEvent->stream->refs++;
  }
  pthread_mutex_unlock(&sg_sched_lock);
  if (op->nwaits == 0) {
    free(op); /* never recorded: nothing to wait for */
    return CUDA_SUCCESS;
  }
  return sg_submit(s, op, 0);
}

SG_EXPORT CUresult CUDAAPI cuStreamGetFlags(CUstream hStream, unsigned int *flags) {
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  sg_stream *s;
  CUresult r = sg_stream_resolve(hStream, &s);
  if (r) return r;
  *flags = s->flags;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuStreamGetPriority(CUstream hStream, int *priority) {
  if (!priority) return CUDA_ERROR_INVALID_VALUE;
  sg_stream *s;
  CUresult r = sg_stream_resolve(hStream, &s);
  if (r) return r;
  *priority = s->priority;
  return CUDA_SUCCESS;
}

/* ---- stream attributes ------------------------------------------------------ */

/* Whether v is a value NVIDIA's driver accepts for attr on a stream. */
static CUresult stream_attr_check(CUstreamAttrID attr, const CUstreamAttrValue *v) {
  switch (attr) {
  case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW: {
    const CUaccessPolicyWindow *w = &v->accessPolicyWindow;
    if (!(w->hitRatio >= 0.0f && w->hitRatio <= 1.0f)) return CUDA_ERROR_INVALID_VALUE;
    if (w->hitProp > CU_ACCESS_PROPERTY_PERSISTING || w->missProp > CU_ACCESS_PROPERTY_PERSISTING)
      return CUDA_ERROR_INVALID_VALUE;
    if (w->missProp == CU_ACCESS_PROPERTY_PERSISTING) return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
  }
  case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
    return v->syncPolicy >= CU_SYNC_POLICY_AUTO && v->syncPolicy <= CU_SYNC_POLICY_BLOCKING_SYNC
               ? CUDA_SUCCESS
               : CUDA_ERROR_INVALID_VALUE;
  case CU_LAUNCH_ATTRIBUTE_PRIORITY:
  case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP: return CUDA_SUCCESS;
  case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
    return v->memSyncDomain == CU_LAUNCH_MEM_SYNC_DOMAIN_DEFAULT ||
                   v->memSyncDomain == CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE
               ? CUDA_SUCCESS
               : CUDA_ERROR_INVALID_VALUE;
  default: return CUDA_ERROR_INVALID_VALUE;
  }
}

SG_EXPORT CUresult CUDAAPI cuStreamSetAttribute(CUstream hStream, CUstreamAttrID attr,
                                                const CUstreamAttrValue *value) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  sg_stream *s;
  CUresult r = sg_stream_resolve(hStream, &s);
  if (r) return r;
  if ((r = stream_attr_check(attr, value))) return r;
  switch (attr) {
  case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW: s->access_policy = value->accessPolicyWindow; break;
  case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY: s->sync_policy = value->syncPolicy; break;
  case CU_LAUNCH_ATTRIBUTE_PRIORITY:
    /* Clamped to cuCtxGetStreamPriorityRange's [-5, 0], as at creation. */
    s->priority = value->priority < -5 ? -5 : value->priority > 0 ? 0 : value->priority;
    break;
  case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP: s->mem_sync_domain_map = value->memSyncDomainMap; break;
  default: s->mem_sync_domain = value->memSyncDomain; break;
  }
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuStreamGetAttribute(CUstream hStream, CUstreamAttrID attr,
                                                CUstreamAttrValue *value_out) {
  if (!value_out) return CUDA_ERROR_INVALID_VALUE;
  sg_stream *s;
  CUresult r = sg_stream_resolve(hStream, &s);
  if (r) return r;
  memset(value_out, 0, sizeof *value_out);
  switch (attr) {
  case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW: value_out->accessPolicyWindow = s->access_policy; break;
  case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
    value_out->syncPolicy = s->sync_policy ? (CUsynchronizationPolicy)s->sync_policy
                                           : CU_SYNC_POLICY_AUTO;
    break;
  case CU_LAUNCH_ATTRIBUTE_PRIORITY: value_out->priority = s->priority; break;
  case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP: value_out->memSyncDomainMap = s->mem_sync_domain_map; break;
  case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN: value_out->memSyncDomain = s->mem_sync_domain; break;
  default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuStreamCopyAttributes(CUstream dst, CUstream src) {
  sg_stream *d, *s;
  CUresult r = sg_stream_resolve(dst, &d);
  if (r == CUDA_SUCCESS) r = sg_stream_resolve(src, &s);
  if (r) return r;
  d->access_policy = s->access_policy;
  d->sync_policy = s->sync_policy;
  d->priority = s->priority;
  d->mem_sync_domain = s->mem_sync_domain;
  d->mem_sync_domain_map = s->mem_sync_domain_map;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuStreamGetCtx(CUstream hStream, CUcontext *pctx) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  sg_stream *s;
  CUresult r = sg_stream_resolve(hStream, &s);
  if (r) return r;
  *pctx = s->ctx;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData) {
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  sg_stream *s;
  CUresult r = sg_stream_resolve(hStream, &s);
  if (r) return r;
  sg_op *op = sg_op_new(SG_OP_HOSTFN);
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  op->u.hostfn.fn = fn;
  op->u.hostfn.user = userData;
  return sg_submit(s, op, 0);
}

SG_EXPORT CUresult CUDAAPI cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void *userData,
                                               unsigned int flags) {
  if (!callback || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  sg_stream *s;
  CUresult r = sg_stream_resolve(hStream, &s);
  if (r) return r;
  sg_op *op = sg_op_new(SG_OP_CALLBACK);
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  op->u.callback.fn = callback;
  op->u.callback.user = userData;
  op->u.callback.handle = hStream;
  return sg_submit(s, op, 0);
}

/* ---- events ------------------------------------------------------------- */

SG_EXPORT CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags) {
  sg_ctx *c;
  CUresult r = sg_current(&c);
  if (r) return r;
  unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (!phEvent || (Flags & ~known)) return CUDA_ERROR_INVALID_VALUE;
  if ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING)) return CUDA_ERROR_INVALID_VALUE;
  sg_event *e = calloc(1, sizeof *e);
  if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
  e->ctx = c;
  e->flags = Flags;
  e->refs = 1;
  if (sg_handle_add(e, SG_H_EVENT) != 0) {
    free(e);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  pthread_mutex_lock(&sg_sched_lock);
  e->next = c->events;
  if (e->next) e->next->prev = e;
  c->events = e;
  pthread_mutex_unlock(&sg_sched_lock);
  *phEvent = e;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuEventDestroy(CUevent hEvent) {
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!sg_handle_ok(hEvent, SG_H_EVENT)) return CUDA_ERROR_INVALID_HANDLE;
  /* A faulted context refuses this too (measured); the event lives on
   * until the context is reset. */
  CUresult r = sg_ctx_usable(hEvent->ctx);
  if (r) return r;
  sg_handle_del(hEvent);
  pthread_mutex_lock(&sg_sched_lock);
  /* Unlinked in O(1): servers create and destroy an event per queued copy,
   * newest first in the list and oldest first destroyed, so a walk made
   * 20,000 queued copies quadratic (70 % of the server's time). */
  if (hEvent->prev)
    hEvent->prev->next = hEvent->next;
  else
    hEvent->ctx->events = hEvent->next;
  if (hEvent->next) hEvent->next->prev = hEvent->prev;
  hEvent->next = hEvent->prev = NULL;
  event_unref_locked(hEvent);
  pthread_mutex_unlock(&sg_sched_lock);
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags) {
  if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
  sg_stream *s;
  CUresult r = sg_stream_resolve(hStream, &s);
  if (r) return r;
  if (!sg_handle_ok(hEvent, SG_H_EVENT)) return CUDA_ERROR_INVALID_HANDLE;
  if (atomic_load(&sg_captures_active) && sg_capture_record_event(s, hEvent, flags, &r)) return r;
  sg_op *op = sg_op_new(SG_OP_RECORD);
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  op->u.record.ev = hEvent;
  return sg_submit(s, op, 0);
}

SG_EXPORT CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream) {
  return cuEventRecordWithFlags(hEvent, hStream, 0);
}

static CUresult event_check(CUevent e) {
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!sg_handle_ok(e, SG_H_EVENT)) return CUDA_ERROR_INVALID_HANDLE;
  return sg_ctx_usable(e->ctx);
}

SG_EXPORT CUresult CUDAAPI cuEventQuery(CUevent hEvent) {
  CUresult r = event_check(hEvent);
  if (r) return r;
  if (atomic_load(&sg_captures_active) && (r = sg_capture_event_check(hEvent)) != CUDA_SUCCESS) return r;
  pthread_mutex_lock(&sg_sched_lock);
  int done = !hEvent->stream || hEvent->stream->completed >= hEvent->seq;
  pthread_mutex_unlock(&sg_sched_lock);
  return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

SG_EXPORT CUresult CUDAAPI cuEventSynchronize(CUevent hEvent) {
  CUresult r = event_check(hEvent);
  if (r) return r;
  if (atomic_load(&sg_captures_active) && (r = sg_capture_event_check(hEvent)) != CUDA_SUCCESS) return r;
  pthread_mutex_lock(&sg_sched_lock);
  sg_stream *s = hEvent->stream;
  if (s) {
    uint64_t seq = hEvent->seq;
    s->refs++;
    while (s->completed < seq) pthread_cond_wait(&progress, &sg_sched_lock);
    stream_unref_locked(s);
  }
  pthread_mutex_unlock(&sg_sched_lock);
  return (CUresult)atomic_load(&hEvent->ctx->sticky);
}

SG_EXPORT CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
  if (!pMilliseconds) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = event_check(hStart);
  if (r) return r;
  r = event_check(hEnd);
  if (r) return r;
  if ((hStart->flags | hEnd->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&sg_sched_lock);
  if (!hStart->stream || !hEnd->stream) {
    r = CUDA_ERROR_INVALID_HANDLE; /* never recorded (measured) */
  } else if (!hStart->has_time || !hEnd->has_time) {
    r = CUDA_ERROR_NOT_READY;
  } else {
    int64_t d = (int64_t)(hEnd->time_ns - hStart->time_ns);
    *pMilliseconds = (float)((double)d / 1e6);
  }
  pthread_mutex_unlock(&sg_sched_lock);
  return r;
}
