/* Streams and events.  Handles are named by the client (u64 ids), so
 * creating, recording, waiting and destroying need no round trip; only
 * synchronize, query and elapsed-time wait for the server.
 *
 * The _ptsz entry points are what `--default-stream per-thread` programs
 * call: there stream 0 means the calling thread's own default stream,
 * created on the server the first time it is used. */
#include <assert.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_cudart.h"
#include "rgpu_cudart_graph.h"
#include "rgpu_cudart_op.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"

static atomic_ullong g_next_id = 1;

uint64_t rgpu_rt_new_handle_id(void) {
  return atomic_fetch_add_explicit(&g_next_id, 1, memory_order_relaxed);
}

typedef struct {
  uint64_t id;
  uint32_t epoch;
} per_thread_stream;
static __thread per_thread_stream tl_ptds[RGPU_MAX_DEVICES];

/* The frame of a synchronizing request, client lock held. */
static rgpu_status sync_send_locked(rgpu_client *c, rgpu_rt_sync_kind kind, uint64_t handle,
                                    uint64_t *seq) {
  switch (kind) {
  case RGPU_RT_SYNC_DEVICE: return rgpu_send_ctx_sync_locked(c, 1, NULL, seq);
  case RGPU_RT_SYNC_STREAM: {
    rgpu_msg_stream_sync_req q = {.stream = handle};
    return rgpu_send_stream_sync_locked(c, 1, &q, seq);
  }
  case RGPU_RT_QUERY_STREAM: {
    rgpu_msg_stream_query_req q = {.stream = handle};
    return rgpu_send_stream_query_locked(c, 1, &q, seq);
  }
  case RGPU_RT_SYNC_EVENT: {
    rgpu_msg_event_sync_req q = {.event = handle};
    return rgpu_send_event_sync_locked(c, 1, &q, seq);
  }
  case RGPU_RT_QUERY_EVENT: {
    rgpu_msg_event_query_req q = {.event = handle};
    return rgpu_send_event_query_locked(c, 1, &q, seq);
  }
  }
  return RGPU_CLIENT_EARG;
}

/* (client lock) For each device, the sequence number the next frame had
 * right after its last successful device-wide synchronization: while no
 * frame has left since, the device has nothing in flight that the program
 * gave it (no launch, copy, host function or free), so a
 * cudaDeviceSynchronize answers at once, without a round trip: every error
 * of earlier work arrived before that synchronization's reply.  0 = none. */
static uint64_t g_idle_next[RGPU_MAX_DEVICES];

void rgpu_rt_idle_after_wait_locked(rgpu_client *c, int device, uint64_t first, int ok) {
  assert(rgpu_client_lock_held(c));
  if (device < 0 || device >= RGPU_MAX_DEVICES || rgpu_client_sync_every_call(c)) return;
  if (g_idle_next[device] == 0 || g_idle_next[device] != first) return;
  /* Only this request left since the device was idle, and it is complete:
   * the device is idle again.  A failure may have been a fault: unknown. */
  g_idle_next[device] = ok ? rgpu_client_next_seq_locked(c) : 0;
}

/* (client lock) Per stream, as g_idle_next per device: the next frame's
 * sequence number right after a synchronous operation on the stream
 * completed.  PyTorch's `.cpu()` is a pageable D2H cudaMemcpyAsync (which
 * waits) followed by cudaStreamSynchronize of the same stream: the second
 * is answered here.  A small direct-mapped table: a stream that lost its
 * slot just pays its round trip. */
#define STREAM_IDLE_SLOTS 64
/* One table per server (issue 19): each is read and written under its own
 * session's lock, and its sequence numbers are that session's. */
static struct {
  uint64_t stream, next;
} g_stream_idle[RGPU_CLIENT_MAX_SERVERS][STREAM_IDLE_SLOTS];

static unsigned stream_idle_slot(uint64_t stream) {
  return (unsigned)((stream * 0x9e3779b97f4a7c15ull) >> 58) % STREAM_IDLE_SLOTS;
}

void rgpu_rt_stream_idle_at_locked(rgpu_client *c, uint64_t stream, uint64_t next) {
  assert(rgpu_client_lock_held(c));
  if (rgpu_client_sync_every_call(c)) return;
  unsigned i = stream_idle_slot(stream);
  int k = rgpu_rt_server_index(c);
  g_stream_idle[k][i].stream = stream;
  g_stream_idle[k][i].next = next;
}

void rgpu_rt_stream_idle_locked(rgpu_client *c, uint64_t stream, int ok) {
  rgpu_rt_stream_idle_at_locked(c, stream, ok ? rgpu_client_next_seq_locked(c) : 0);
}

/* (client lock) Nothing left since stream was last seen idle, or since its
 * device was. */
static int stream_known_idle_locked(rgpu_client *c, int device, uint64_t stream) {
  uint64_t next = rgpu_client_next_seq_locked(c);
  unsigned i = stream_idle_slot(stream);
  if (rgpu_client_sync_every_call(c)) return 0;
  int k = rgpu_rt_server_index(c);
  if (g_stream_idle[k][i].stream == stream && g_stream_idle[k][i].next == next && next) return 1;
  return device >= 0 && device < RGPU_MAX_DEVICES && g_idle_next[device] == next && next;
}

static rgpu_status sync_call_wait(rgpu_client *c, int device, rgpu_rt_sync_kind kind,
                                  uint64_t handle, uint64_t drain_stream);

rgpu_status rgpu_rt_sync_call(rgpu_client *c, int device, rgpu_rt_sync_kind kind,
                              uint64_t handle, uint64_t drain_stream) {
  rgpu_status rc = sync_call_wait(c, device, kind, handle, drain_stream);
  if (rc == 0) {
    /* The program may now read managed memory: it comes back from the
     * device (nothing happens while there is none). */
    /* A stream's synchronization brings back what is attached to it (and
     * what is global, after the whole device); the legacy stream, events
     * and the device count as device-wide. */
    int one_stream = (kind == RGPU_RT_SYNC_STREAM || kind == RGPU_RT_QUERY_STREAM) && handle;
    cudaError_t e = rgpu_rt_managed_to_host(c, one_stream ? handle : 0, !one_stream,
                                            kind == RGPU_RT_SYNC_DEVICE ? device : -1);
    if (e != cudaSuccess) rc = rgpu_cudart_to_cu(e);
  }
  return rc;
}

static rgpu_status sync_call_wait(rgpu_client *c, int device, rgpu_rt_sync_kind kind,
                                  uint64_t handle, uint64_t drain_stream) {
  rgpu_client_reply r = {0};
  assert(rgpu_mutex_held_count() == 0); /* a round trip: no cudart lock held */
  c = rgpu_rt_route(c, device);
  rgpu_client_lock(c);
  if ((kind == RGPU_RT_SYNC_STREAM || kind == RGPU_RT_QUERY_STREAM) &&
      stream_known_idle_locked(c, device, handle)) {
    rgpu_client_unlock(c);
    return 0;
  }
  int idle_known = kind == RGPU_RT_SYNC_DEVICE && device >= 0 && device < RGPU_MAX_DEVICES &&
                   !rgpu_client_sync_every_call(c);
  if (idle_known && g_idle_next[device] != 0 &&
      g_idle_next[device] == rgpu_client_next_seq_locked(c)) {
    /* (That sync also drained every background reply, and a new one would
     * be a new frame.) */
    uint64_t next = rgpu_client_next_seq_locked(c);
    rgpu_client_unlock(c);
    /* Frees since then were made with nothing in flight (rgpu_cudart_arena). */
    rgpu_rt_arena_synced(device, next + 1);
    return 0;
  }
  rgpu_status rc = device >= 0 ? rgpu_client_bind_device_locked(c, device) : 0;
  uint64_t first = rgpu_client_next_seq_locked(c), seq = 0;
  if (rc == 0) rc = sync_send_locked(c, kind, handle, &seq);
  if (rc == 0) rc = rgpu_client_wait_locked(c, seq, first, &r);
  if (rc == 0) rc = (rgpu_status)r.status;
  /* The legacy stream synchronizes with every blocking stream. */
  if (drain_stream == 0) drain_stream = RGPU_CLIENT_ALL_STREAMS;
  if (rc == 0) rc = rgpu_client_drain_locked(c, drain_stream, seq);
  if (idle_known) g_idle_next[device] = rc == 0 ? rgpu_client_next_seq_locked(c) : 0;
  if (kind == RGPU_RT_SYNC_STREAM) rgpu_rt_stream_idle_locked(c, handle, rc == 0);
  rgpu_client_unlock(c);
  if (rc == 0 && kind == RGPU_RT_SYNC_DEVICE) rgpu_rt_arena_synced(device, seq);
  return rc;
}

/* The result of a request that may be queued (RGPU_CALL_ASYNC). */
static cudaError_t queued_ret(rgpu_client *c, rgpu_status rc) {
  return rc ? rgpu_rt_sync_ret(c, rc) : cudaSuccess;
}

static cudaError_t per_thread_stream_id(rgpu_client *c, int dev, uint64_t *wire) {
  if (dev < 0 || dev >= RGPU_MAX_DEVICES) return cudaErrorInvalidDevice;
  per_thread_stream *p = &tl_ptds[dev];
  uint32_t epoch = rgpu_rt_device_epoch(dev);
  if (p->id == 0 || p->epoch != epoch) {
    uint64_t id = rgpu_rt_new_handle_id();
    /* Blocking like NVIDIA's per-thread stream: it synchronizes with the
     * legacy default stream. */
    rgpu_msg_stream_create_req req = {.stream = id, .flags = 0, .priority = 0};
    cudaError_t e =
        queued_ret(c, rgpu_call_stream_create(c, dev, RGPU_CALL_ASYNC, &req, NULL, NULL));
    if (e != cudaSuccess) return e;
    p->id = id;
    p->epoch = epoch;
  }
  *wire = p->id;
  return cudaSuccess;
}

cudaError_t rgpu_rt_stream_resolve(rgpu_client *c, cudaStream_t s, int per_thread,
                                   uint64_t *wire, int *device) {
  int dev = rgpu_rt_current_device();
  if (s == NULL) {
    *device = dev;
    if (per_thread) return per_thread_stream_id(c, dev, wire);
    *wire = 0;
    return cudaSuccess;
  }
  if (s == cudaStreamLegacy) {
    *device = dev;
    *wire = 0;
    return cudaSuccess;
  }
  if (s == cudaStreamPerThread) {
    *device = dev;
    return per_thread_stream_id(c, dev, wire);
  }
  if (s->magic != RGPU_STREAM_MAGIC) return cudaErrorInvalidResourceHandle;
  *device = s->device;
  *wire = s->id;
  return cudaSuccess;
}

static int is_special(cudaStream_t s) {
  return s == NULL || s == cudaStreamLegacy || s == cudaStreamPerThread;
}

/* ---- streams ------------------------------------------------------------ */

/* The current device's stream priorities: the driver's range where they
 * exist (0 = lowest, -5 = highest on every GPU since Volta); a device
 * without them has only 0. */
static cudaError_t priority_range(rgpu_client *c, int *least, int *greatest) {
  rgpu_rt_device *d;
  cudaError_t e = rgpu_rt_device_get(c, rgpu_rt_current_device(), &d);
  if (e != cudaSuccess) return e;
  *least = 0;
  *greatest = d->prop.streamPrioritiesSupported ? -5 : 0;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags,
                                                  int priority) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!pStream) return rgpu_rt_ret(cudaErrorInvalidValue);
  if (flags & ~(unsigned)cudaStreamNonBlocking) return rgpu_rt_ret(cudaErrorInvalidValue);
  /* CUDA clamps a priority outside cudaDeviceGetStreamPriorityRange to the
   * range, and cudaStreamGetPriority reports the clamped value. */
  int least, greatest;
  e = priority_range(c, &least, &greatest);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  if (priority < greatest) priority = greatest;
  if (priority > least) priority = least;
  struct CUstream_st *s = calloc(1, sizeof *s);
  if (!s) return rgpu_rt_ret(cudaErrorMemoryAllocation);
  s->magic = RGPU_STREAM_MAGIC;
  s->id = rgpu_rt_new_handle_id();
  s->device = rgpu_rt_current_device();
  s->flags = flags;
  s->priority = priority;
  rgpu_msg_stream_create_req req = {.stream = s->id, .flags = flags, .priority = priority};
  e = queued_ret(c, rgpu_call_stream_create(c, s->device, RGPU_CALL_ASYNC, &req, NULL, NULL));
  if (e != cudaSuccess) {
    s->magic = 0;
    free(s);
    return e;
  }
  *pStream = s;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags) {
  return cudaStreamCreateWithPriority(pStream, flags, 0);
}

RGPU_API cudaError_t cudaStreamCreate(cudaStream_t *pStream) {
  return cudaStreamCreateWithPriority(pStream, 0, 0);
}

RGPU_API cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (is_special(stream) || stream->magic != RGPU_STREAM_MAGIC)
    return rgpu_rt_ret(cudaErrorInvalidResourceHandle);
  rgpu_msg_stream_destroy_req req = {.stream = stream->id};
  e = queued_ret(c, rgpu_call_stream_destroy(c, stream->device, RGPU_CALL_ASYNC, &req, NULL, NULL));
  stream->magic = 0;
  free(stream);
  return e;
}

/* Queries answer cudaErrorNotReady without making it the last error. */
static cudaError_t query_ret(rgpu_client *c, int rc) {
  if (rc == CUDA_ERROR_NOT_READY) {
    rgpu_rt_collect_async(c);
    cudaError_t s = rgpu_err_state_sync(rgpu_rt_err_state_of(c), cudaSuccess);
    return s != cudaSuccess ? rgpu_rt_ret(s) : cudaErrorNotReady;
  }
  return rgpu_rt_sync_ret(c, rc);
}

/* Synchronize and query: the same round trip (refused while the stream
 * captures) but for its kind and how the answer is returned. */
static cudaError_t stream_wait_call(cudaStream_t stream, int per_thread, rgpu_rt_sync_kind kind) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  uint64_t wire;
  int dev;
  e = rgpu_rt_stream_resolve(c, stream, per_thread, &wire, &dev);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  if ((e = rgpu_rt_graph_check_sync(wire)) != cudaSuccess) return rgpu_rt_ret(e);
  c = rgpu_rt_route(c, dev); /* its errors are its server's */
  rgpu_status rc = rgpu_rt_sync_call(c, dev, kind, wire, wire);
  return kind == RGPU_RT_QUERY_STREAM ? query_ret(c, rc) : rgpu_rt_sync_ret(c, rc);
}

RGPU_API cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return stream_wait_call(stream, 0, RGPU_RT_SYNC_STREAM);
}
RGPU_API_PTSZ(cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream)) {
  return stream_wait_call(stream, 1, RGPU_RT_SYNC_STREAM);
}
RGPU_API cudaError_t cudaStreamQuery(cudaStream_t stream) {
  return stream_wait_call(stream, 0, RGPU_RT_QUERY_STREAM);
}
RGPU_API_PTSZ(cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream)) {
  return stream_wait_call(stream, 1, RGPU_RT_QUERY_STREAM);
}

/* Recording an event on a stream and making a stream wait for one are the
 * same operation but for its kind: each accepts only its own "external"
 * flag, and a record must be on a stream of the event's device. */
static cudaError_t submit_event_op(rgpu_rt_op_kind kind, cudaEvent_t event, cudaStream_t stream,
                                   unsigned flags, int per_thread) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!event || event->magic != RGPU_EVENT_MAGIC)
    return rgpu_rt_ret(cudaErrorInvalidResourceHandle);
  unsigned allowed = kind == RGPU_RT_OP_EVENT_RECORD ? (unsigned)cudaEventRecordExternal
                                                     : (unsigned)cudaEventWaitExternal;
  if (flags & ~allowed) return rgpu_rt_ret(cudaErrorInvalidValue);
  uint64_t wire;
  int dev;
  e = rgpu_rt_stream_resolve(c, stream, per_thread, &wire, &dev);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  if (kind == RGPU_RT_OP_EVENT_RECORD && dev != event->device)
    return rgpu_rt_ret(cudaErrorInvalidResourceHandle);
  if (kind == RGPU_RT_OP_EVENT_WAIT && rgpu_rt_devices_apart(dev, event->device)) {
    /* An event of another server (issue 19): no server can wait for the
     * other's, so the client does, now, with cudaEventSynchronize's round
     * trip; the stream's later work is sent after the event completed.
     * The host blocks where CUDA would not.  A capture cannot record a
     * wait that happens in the client. */
    if (rgpu_rt_graph_is_capturing(wire)) {
      static int logged;
      if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
        RGPU_WARN("cudaStreamWaitEvent: a capturing stream cannot wait for an event of another "
                  "server; it returns cudaErrorNotSupported");
      return rgpu_rt_ret(cudaErrorNotSupported);
    }
    rgpu_client *owner = rgpu_rt_route(c, event->device);
    rgpu_status rc = rgpu_rt_sync_call(owner, event->device, RGPU_RT_SYNC_EVENT, event->id,
                                       RGPU_CLIENT_ALL_STREAMS);
    return rgpu_rt_sync_ret(owner, rc);
  }
  rgpu_rt_op op = {.kind = kind, .stream = wire, .device = dev};
  op.event.event = event;
  op.event.flags = flags;
  return rgpu_rt_submit(c, &op);
}

static cudaError_t stream_wait_event(cudaStream_t stream, cudaEvent_t event, unsigned flags,
                                     int per_thread) {
  return submit_event_op(RGPU_RT_OP_EVENT_WAIT, event, stream, flags, per_thread);
}

RGPU_API cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                         unsigned int flags) {
  return stream_wait_event(stream, event, flags, 0);
}
RGPU_API_PTSZ(cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event,
                                                   unsigned int flags)) {
  return stream_wait_event(stream, event, flags, 1);
}

static cudaError_t stream_get(cudaStream_t s, unsigned *flags, int *prio, int *dev) {
  rgpu_rt_count_call();
  if (is_special(s)) {
    if (flags) *flags = 0;
    if (prio) *prio = 0;
    if (dev) *dev = rgpu_rt_current_device();
    return cudaSuccess;
  }
  if (s->magic != RGPU_STREAM_MAGIC) return rgpu_rt_ret(cudaErrorInvalidResourceHandle);
  if (flags) *flags = s->flags;
  if (prio) *prio = s->priority;
  if (dev) *dev = s->device;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaStreamGetFlags(cudaStream_t s, unsigned int *flags) {
  if (!flags) return rgpu_rt_ret(cudaErrorInvalidValue);
  return stream_get(s, flags, NULL, NULL);
}
RGPU_API_PTSZ(cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t s, unsigned int *flags)) {
  return cudaStreamGetFlags(s, flags);
}
RGPU_API cudaError_t cudaStreamGetPriority(cudaStream_t s, int *priority) {
  if (!priority) return rgpu_rt_ret(cudaErrorInvalidValue);
  return stream_get(s, NULL, priority, NULL);
}
RGPU_API_PTSZ(cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t s, int *priority)) {
  return cudaStreamGetPriority(s, priority);
}
RGPU_API cudaError_t cudaStreamGetDevice(cudaStream_t s, int *device) {
  if (!device) return rgpu_rt_ret(cudaErrorInvalidValue);
  return stream_get(s, NULL, NULL, device);
}
RGPU_API_PTSZ(cudaError_t cudaStreamGetDevice_ptsz(cudaStream_t s, int *device)) {
  return cudaStreamGetDevice(s, device);
}

/* The stream's identity on the wire: 0 for the legacy stream, the per-thread
 * stream's own id for each thread, a created stream's id (never 0 or
 * reused within the process). */
static cudaError_t stream_get_id(cudaStream_t s, unsigned long long *id, int per_thread) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!id) return rgpu_rt_ret(cudaErrorInvalidValue);
  if (!is_special(s) && s->magic != RGPU_STREAM_MAGIC)
    return rgpu_rt_ret(cudaErrorInvalidResourceHandle);
  uint64_t wire;
  int dev;
  e = rgpu_rt_stream_resolve(c, s, per_thread, &wire, &dev);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  *id = (unsigned long long)wire;
  return cudaSuccess;
}
RGPU_API cudaError_t cudaStreamGetId(cudaStream_t s, unsigned long long *streamId) {
  return stream_get_id(s, streamId, 0);
}
RGPU_API_PTSZ(cudaError_t cudaStreamGetId_ptsz(cudaStream_t s, unsigned long long *streamId)) {
  return stream_get_id(s, streamId, 1);
}

RGPU_API cudaError_t cudaDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  int least, greatest;
  e = priority_range(c, &least, &greatest);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  if (leastPriority) *leastPriority = least;
  if (greatestPriority) *greatestPriority = greatest;
  return cudaSuccess;
}

/* ---- events ------------------------------------------------------------- */

RGPU_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!event) return rgpu_rt_ret(cudaErrorInvalidValue);
  if (flags & ~(unsigned)(cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess))
    return rgpu_rt_ret(cudaErrorInvalidValue);
  if (flags & cudaEventInterprocess) {
    if (!(flags & cudaEventDisableTiming)) return rgpu_rt_ret(cudaErrorInvalidValue);
    /* An IPC event would have to be shared between sessions on the server. */
    return rgpu_rt_ret(cudaErrorNotSupported);
  }
  struct CUevent_st *ev = calloc(1, sizeof *ev);
  if (!ev) return rgpu_rt_ret(cudaErrorMemoryAllocation);
  ev->magic = RGPU_EVENT_MAGIC;
  ev->id = rgpu_rt_new_handle_id();
  ev->device = rgpu_rt_current_device();
  ev->flags = flags;
  rgpu_msg_event_create_req req = {.event = ev->id, .flags = flags};
  e = queued_ret(c, rgpu_call_event_create(c, ev->device, RGPU_CALL_ASYNC, &req, NULL, NULL));
  if (e != cudaSuccess) {
    ev->magic = 0;
    free(ev);
    return e;
  }
  *event = ev;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaEventCreate(cudaEvent_t *event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

RGPU_API cudaError_t cudaEventDestroy(cudaEvent_t event) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!event || event->magic != RGPU_EVENT_MAGIC)
    return rgpu_rt_ret(cudaErrorInvalidResourceHandle);
  rgpu_msg_event_destroy_req req = {.event = event->id};
  e = queued_ret(c, rgpu_call_event_destroy(c, event->device, RGPU_CALL_ASYNC, &req, NULL, NULL));
  event->magic = 0;
  free(event);
  return e;
}

static cudaError_t event_record(cudaEvent_t event, cudaStream_t stream, unsigned flags,
                                int per_thread) {
  return submit_event_op(RGPU_RT_OP_EVENT_RECORD, event, stream, flags, per_thread);
}

RGPU_API cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  return event_record(event, stream, 0, 0);
}
RGPU_API_PTSZ(cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream)) {
  return event_record(event, stream, 0, 1);
}
/* cudaEventRecordExternal only matters during stream capture, which rgpu
 * does not support yet, so it is accepted and means a plain record. */
RGPU_API cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream,
                                              unsigned int flags) {
  return event_record(event, stream, flags, 0);
}
RGPU_API_PTSZ(cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t event, cudaStream_t stream,
                                                        unsigned int flags)) {
  return event_record(event, stream, flags, 1);
}

static cudaError_t event_wait_call(cudaEvent_t event, rgpu_rt_sync_kind kind) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!event || event->magic != RGPU_EVENT_MAGIC)
    return rgpu_rt_ret(cudaErrorInvalidResourceHandle);
  if ((e = rgpu_rt_graph_check_event(event)) != cudaSuccess) return rgpu_rt_ret(e);
  c = rgpu_rt_route(c, event->device);
  /* The event's stream is not tracked here: drain every stream's earlier
   * copies (more waiting than needed at worst, never missing data). */
  rgpu_status rc = rgpu_rt_sync_call(c, event->device, kind, event->id, RGPU_CLIENT_ALL_STREAMS);
  return kind == RGPU_RT_QUERY_EVENT ? query_ret(c, rc) : rgpu_rt_sync_ret(c, rc);
}

RGPU_API cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return event_wait_call(event, RGPU_RT_SYNC_EVENT);
}

RGPU_API cudaError_t cudaEventQuery(cudaEvent_t event) {
  return event_wait_call(event, RGPU_RT_QUERY_EVENT);
}

RGPU_API cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!ms) return rgpu_rt_ret(cudaErrorInvalidValue);
  if (!start || start->magic != RGPU_EVENT_MAGIC || !end || end->magic != RGPU_EVENT_MAGIC)
    return rgpu_rt_ret(cudaErrorInvalidResourceHandle);
  if ((start->flags | end->flags) & cudaEventDisableTiming)
    return rgpu_rt_ret(cudaErrorInvalidResourceHandle);
  /* Two servers' clocks cannot be compared; CUDA refuses events of two
   * devices alike. */
  if (rgpu_rt_devices_apart(start->device, end->device))
    return rgpu_rt_ret(cudaErrorInvalidResourceHandle);
  c = rgpu_rt_route(c, start->device);
  rgpu_msg_event_elapsed_req req = {.start_event = start->id, .end_event = end->id};
  rgpu_msg_event_elapsed_rep rep;
  rgpu_status rc = rgpu_call_event_elapsed(c, start->device, 0, &req, &rep, NULL);
  if (rc == 0) *ms = rep.ms;
  if (rc == CUDA_ERROR_NOT_READY) return query_ret(c, rc);
  return rgpu_rt_sync_ret(c, rc);
}

/* ---- stream attributes (STREAM_ATTR: the server's driver answers) ------------ */

/* op 0 gets attr of s into *out, 1 sets it from *in, 2 copies every
 * attribute of src to s.  The reply is attr as the driver then reports
 * it: a copy asks with the priority, and a priority that changed goes into
 * the stream's record, so cudaStreamGetPriority agrees. */
static cudaError_t stream_attr(cudaStream_t s, int per_thread, uint32_t op, uint32_t attr,
                               cudaStream_t src, const cudaLaunchAttributeValue *in,
                               cudaLaunchAttributeValue *out) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  uint64_t wire = 0, src_wire = 0;
  int dev, src_dev;
  if ((e = rgpu_rt_stream_resolve(c, s, per_thread, &wire, &dev)) != cudaSuccess)
    return rgpu_rt_ret(e);
  if (op == 2) {
    if ((e = rgpu_rt_stream_resolve(c, src, per_thread, &src_wire, &src_dev)) != cudaSuccess)
      return rgpu_rt_ret(e);
    if (src_dev != dev) return rgpu_rt_ret(cudaErrorInvalidValue);
  }
  rgpu_msg_stream_attr_req q = {.stream = wire, .op = op, .attr = attr, .src = src_wire};
  if (in) q.value = (rgpu_bytes){in, sizeof *in};
  rgpu_msg_stream_attr_rep rep;
  rgpu_buf payload;
  rgpu_buf_init(&payload);
  rgpu_client_reply r;
  memset(&r, 0, sizeof r);
  r.payload = &payload;
  rgpu_status rc = rgpu_call_stream_attr(c, dev, 0, &q, &rep, &r);
  cudaLaunchAttributeValue now;
  if (rc == 0) {
    if (rep.value.len == sizeof now)
      memcpy(&now, rep.value.data, sizeof now);
    else
      rc = CUDA_ERROR_UNKNOWN;
  }
  rgpu_buf_free(&payload);
  if (rc == 0 && out) *out = now;
  if (rc == 0 && op != 0 && attr == cudaLaunchAttributePriority && !is_special(s))
    s->priority = now.priority;
  return rc ? rgpu_rt_ret(rgpu_rt_from_call(rc)) : cudaSuccess;
}

RGPU_API cudaError_t cudaStreamSetAttribute(cudaStream_t hStream, cudaStreamAttrID attr,
                                            const cudaStreamAttrValue *value) {
  if (!value) return rgpu_rt_ret(cudaErrorInvalidValue);
  return stream_attr(hStream, 0, 1, (uint32_t)attr, NULL, value, NULL);
}
RGPU_API_PTSZ(cudaError_t cudaStreamSetAttribute_ptsz(cudaStream_t hStream, cudaStreamAttrID attr,
                                                      const cudaStreamAttrValue *value)) {
  if (!value) return rgpu_rt_ret(cudaErrorInvalidValue);
  return stream_attr(hStream, 1, 1, (uint32_t)attr, NULL, value, NULL);
}
RGPU_API cudaError_t cudaStreamGetAttribute(cudaStream_t hStream, cudaStreamAttrID attr,
                                            cudaStreamAttrValue *value_out) {
  if (!value_out) return rgpu_rt_ret(cudaErrorInvalidValue);
  return stream_attr(hStream, 0, 0, (uint32_t)attr, NULL, NULL, value_out);
}
RGPU_API_PTSZ(cudaError_t cudaStreamGetAttribute_ptsz(cudaStream_t hStream, cudaStreamAttrID attr,
                                                      cudaStreamAttrValue *value_out)) {
  if (!value_out) return rgpu_rt_ret(cudaErrorInvalidValue);
  return stream_attr(hStream, 1, 0, (uint32_t)attr, NULL, NULL, value_out);
}
RGPU_API cudaError_t cudaStreamCopyAttributes(cudaStream_t dst, cudaStream_t src) {
  return stream_attr(dst, 0, 2, cudaLaunchAttributePriority, src, NULL, NULL);
}
RGPU_API_PTSZ(cudaError_t cudaStreamCopyAttributes_ptsz(cudaStream_t dst, cudaStream_t src)) {
  return stream_attr(dst, 1, 2, cudaLaunchAttributePriority, src, NULL, NULL);
}
