/* One function per request opcode.
 *
 * The generated dispatch (rgpu_dispatch.h) hands every handler its decoded
 * request; the handler checks every client-supplied pointer, size and
 * handle against this session's tables, and only then calls the driver.
 * The contract (replies, failures, deferring) is in rgpu_req.h. */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "rgpu_array.h"
#include "rgpu_bulk_proto.h"
#include "rgpu_clock.h"
#include "rgpu_dispatch.h"
#include "rgpu_graph_lib.h"
#include "rgpu_graph.h"
#include "rgpu_job_token.h"
#include "rgpu_log.h"
#include "rgpu_metrics.h"
#include "rgpu_staging.h"
#include "rgpu_quic_direct.h"
#include "rgpu_worker_internal.h"

#ifndef RGPU_VERSION
#define RGPU_VERSION "0.0.0"
#endif

#define D (&w->drv)
#define FAIL(status, ...) rgpu_worker_fail(w, (status), __VA_ARGS__)
#define ENAME(r) rgpu_driver_error_name(D, (r))

static CUresult drv_fail(rgpu_worker *w, CUresult r, const char *what) {
  return FAIL(r, "%s: %s", what, ENAME(r));
}
#define CHECK_DRV(call, what)                 \
  do {                                        \
    CUresult r_ = (call);                     \
    if (r_ != CUDA_SUCCESS) return drv_fail(w, r_, (what)); \
  } while (0)

/* ---- lookups ------------------------------------------------------------ */

/* Streams, events and modules are named by ids the client chose; kind
 * ("stream", "event", "module") names the id in the failure message. */
static CUresult unknown_id(rgpu_worker *w, const char *kind, uint64_t id) {
  return FAIL(CUDA_ERROR_INVALID_HANDLE, "unknown %s id %llu", kind, (unsigned long long)id);
}

static CUresult get_handle(rgpu_worker *w, const rgpu_handle_map *map, const char *kind,
                           uint64_t id, void **out) {
  const rgpu_handle_entry *e = rgpu_handle_map_get(map, id);
  if (!e) return unknown_id(w, kind, id);
  *out = e->ptr;
  return CUDA_SUCCESS;
}

static CUresult take_handle(rgpu_worker *w, rgpu_handle_map *map, const char *kind, uint64_t id,
                            rgpu_handle_entry *out) {
  return rgpu_handle_map_remove(map, id, out) ? unknown_id(w, kind, id) : CUDA_SUCCESS;
}

/* A create's id: not 0 (zero_msg says why) and not in use yet. */
static CUresult check_new_id(rgpu_worker *w, const rgpu_handle_map *map, const char *kind,
                             uint64_t id, const char *zero_msg) {
  if (id == 0) return FAIL(CUDA_ERROR_INVALID_VALUE, "%s", zero_msg);
  if (rgpu_handle_map_get(map, id))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s id %llu already exists", kind, (unsigned long long)id);
  return CUDA_SUCCESS;
}

/* A query's driver result: NOT_READY passes through unlogged (it is an
 * answer, not a failure). */
static CUresult query_result(rgpu_worker *w, CUresult r, const char *what) {
  if (r == CUDA_ERROR_NOT_READY) return r;
  if (r != CUDA_SUCCESS) return drv_fail(w, r, what);
  return CUDA_SUCCESS;
}

static CUresult get_stream(rgpu_worker *w, uint64_t id, CUstream *out) {
  void *p = NULL;
  CUresult r = id == 0 ? CUDA_SUCCESS : get_handle(w, &w->streams, "stream", id, &p);
  if (r == CUDA_SUCCESS) *out = (CUstream)p;
  return r;
}

static CUresult get_event(rgpu_worker *w, uint64_t id, CUevent *out) {
  void *p = NULL;
  CUresult r = get_handle(w, &w->events, "event", id, &p);
  if (r == CUDA_SUCCESS) *out = (CUevent)p;
  return r;
}

/* The launches hand the driver pointers into a private copy of the
 * parameters: aligned to 64 (the strictest parameter alignment), kept in the
 * worker and grown in steps of 64 so that a session's launches reuse it. */
CUresult rgpu_worker_copy_params(rgpu_worker *w, const void *data, size_t len) {
  if (len > w->param_cap) {
    size_t cap = (len + 63) & ~(size_t)63;
    void *nb = aligned_alloc(64, cap);
    if (!nb) return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory for launch parameters");
    free(w->param_buf);
    w->param_buf = nb;
    w->param_cap = cap;
  }
  if (len) memcpy(w->param_buf, data, len);
  return CUDA_SUCCESS;
}

static CUresult get_func(rgpu_worker *w, uint64_t module_id, uint32_t fi, rgpu_module_rec **mrec,
                         CUfunction *f) {
  void *p = NULL;
  CUresult r = get_handle(w, &w->modules, "module", module_id, &p);
  if (r) return r;
  rgpu_module_rec *m = p;
  if (fi >= m->nfuncs)
    return FAIL(CUDA_ERROR_INVALID_HANDLE, "module %llu has no function index %u (it has %u)",
                (unsigned long long)module_id, fi, m->nfuncs);
  if (!m->funcs[fi])
    return FAIL(CUDA_ERROR_NOT_FOUND, "function %u of module %llu was not found when it was loaded",
                fi, (unsigned long long)module_id);
  *mrec = m;
  *f = (CUfunction)m->funcs[fi];
  return CUDA_SUCCESS;
}

/* The range must lie entirely inside one allocation of this session. */
static CUresult check_range(rgpu_worker *w, uint64_t ptr, uint64_t len, const char *what) {
  if (rgpu_alloc_table_lookup(&w->allocs, ptr, len)) return CUDA_SUCCESS;
  const rgpu_alloc *a = rgpu_alloc_table_lookup(&w->allocs, ptr, 0);
  if (a)
    return FAIL(CUDA_ERROR_INVALID_VALUE,
                "%s: %llu bytes at 0x%llx run past the end of the %llu-byte allocation at 0x%llx",
                what, (unsigned long long)len, (unsigned long long)ptr, (unsigned long long)a->size,
                (unsigned long long)a->dptr);
  return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: 0x%llx is not a device pointer of this session", what,
              (unsigned long long)ptr);
}

/* The context a stream belongs to (stream 0: the current device's). */
static CUcontext stream_ctx(rgpu_worker *w, uint64_t id) {
  const rgpu_handle_entry *e = id ? rgpu_handle_map_get(&w->streams, id) : NULL;
  int dev = e ? e->device : w->cur_dev;
  return dev >= 0 && dev < RGPU_MAX_DEVICES ? w->ctx[dev] : NULL;
}

/* A short copy or sync on an idle stream is done within microseconds:
 * handing its reply to a completion thread costs a wake-up (5-35 us) that
 * a local GPU does not pay.  So the session thread first polls the marker
 * for this long and replies itself when it completed; otherwise (a busy
 * stream, a host callback ahead) the job takes it and the session thread
 * reads on. */
#define RGPU_INLINE_WAIT_NS 20000

static int marker_done_soon(rgpu_worker *w, CUevent ev) {
  uint64_t t0 = rgpu_clock_ns();
  for (;;) {
    CUresult r = D->cuEventQuery(ev);
    if (r == CUDA_SUCCESS) return 1;
    if (r != CUDA_ERROR_NOT_READY) return 0; /* the job reports it */
    if (rgpu_clock_elapsed_ns(t0) > RGPU_INLINE_WAIT_NS) return 0;
  }
}

/* Hands the reply of request rq to a job that waits for ev (or the whole
 * context with ev NULL and kind CTX_SYNC).  Returns 1 if taken; 0 if the
 * caller must wait itself (no connection, or no thread). */
static int defer_to_job_on(rgpu_req *rq, rgpu_job_kind kind, CUcontext ctx, CUstream stream,
                           CUevent ev, int own_ev, const void *ref, void *buf, size_t buf_len,
                           void *pinned) {
  rgpu_worker *w = rq->w;
  if (!rgpu_jobs_enabled(w) || (kind != RGPU_JOB_RELEASE && !rq->need_reply)) return 0;
  rgpu_job *j = calloc(1, sizeof *j);
  if (!j) return 0;
  *j = (rgpu_job){.kind = kind, .opcode = rq->op, .seq = rq->seq, .ctx = ctx, .ev = ev,
                  .own_ev = own_ev, .ref = ref, .buf = buf, .buf_len = buf_len, .pinned = pinned,
                  .stream = stream};
  if (rgpu_jobs_submit(w, j)) {
    free(j);
    return 0;
  }
  if (kind != RGPU_JOB_RELEASE) rq->reply_taken = 1;
  return 1;
}

static int defer_to_job(rgpu_req *rq, rgpu_job_kind kind, CUcontext ctx, CUevent ev, int own_ev,
                        const void *ref, void *buf, size_t buf_len, void *pinned) {
  return defer_to_job_on(rq, kind, ctx, NULL, ev, own_ev, ref, buf, buf_len, pinned);
}

/* ---- session ------------------------------------------------------------ */

CUresult rgpu_h_hello(rgpu_req *rq, const rgpu_msg_hello_req *q) {
  rgpu_worker *w = rq->w;
  if (w->hello_done) return FAIL(CUDA_ERROR_INVALID_VALUE, "HELLO sent twice in one session");
  if (q->proto_version != RGPU_PROTO_VERSION)
    return FAIL(CUDA_ERROR_NOT_SUPPORTED,
                "protocol version mismatch: client speaks %u, server speaks %u; upgrade the older side",
                q->proto_version, RGPU_PROTO_VERSION);
  w->job_token[0] = 0;
  if (w->cfg.token_required || w->cfg.token_dir[0]) {
    int ok = w->cfg.token_required &&
             rgpu_auth_token_equal(w->cfg.token, q->token.data, q->token.len);
    if (!ok && w->cfg.token_dir[0]) {
      /* A job's token (rgpu_job_token.h): valid while its file is there
       * and has not expired; the listener watches it from now on. */
      char why[600];
      int f = rgpu_job_token_find(w->cfg.token_dir, q->token.data, q->token.len,
                                  (int64_t)time(NULL), w->job_token, sizeof w->job_token, why,
                                  sizeof why);
      if (f < 0) RGPU_WARN("session=%llu %s", (unsigned long long)w->cfg.session_id, why);
      ok = f == 1;
    }
    if (!ok) {
      RGPU_WARN("session=%llu peer=%s event=auth-failed", (unsigned long long)w->cfg.session_id,
                w->cfg.peer);
      return FAIL(CUDA_ERROR_NOT_PERMITTED, "authentication failed: bad or missing token");
    }
    if (w->job_token[0])
      RGPU_INFO("session=%llu peer=%s event=auth token=%s", (unsigned long long)w->cfg.session_id,
                w->cfg.peer, w->job_token);
  }
  if (getrandom(w->session_token, sizeof w->session_token, 0) != (ssize_t)sizeof w->session_token) {
    /* Without getrandom the token could be guessed: refuse, do not weaken. */
    return FAIL(CUDA_ERROR_OPERATING_SYSTEM, "cannot generate a session token (getrandom failed)");
  }
  w->caps = q->caps & (RGPU_CAP_ASYNC_ERRORS | RGPU_CAP_OUTPUT);
  /* Bulk streams are offered on quic:// sessions whose client asks for
   * them and that have a control channel for the listener to route lanes
   * through (rgpu_bulk.h). */
  if ((q->caps & RGPU_CAP_BULK_STREAMS) && strcmp(w->cfg.transport, "quic") == 0 &&
      w->cfg.ctl_fd > 0)
    w->caps |= RGPU_CAP_BULK_STREAMS;
  /* A client that will never resume never acknowledges either: keeping its
   * replies would only fill the replay buffer and copy every byte into it. */
  if (q->caps & RGPU_CAP_NO_RESUME) w->replay.enabled = 0;
  /* Images by hash only where the cache can be used (else every module
   * would cost a second round trip for nothing). */
  if ((q->caps & RGPU_CAP_IMAGE_CACHE) && rgpu_worker_image_cache(w))
    w->caps |= RGPU_CAP_IMAGE_CACHE;
  w->hello_done = 1;
  w->client_caps = q->caps;
  /* Who the session is, for NVML_QUERY's process list (rgpu_handlers_nvml.c). */
  w->client_pid = q->client_pid;
  rgpu_str_copy(w->client_name, sizeof w->client_name, q->client_name.data,
                q->client_name.len < sizeof w->client_name - 1 ? q->client_name.len
                                                               : sizeof w->client_name - 1);
  rgpu_metrics_session_client(q->client_pid, q->client_name.data, q->client_name.len);
  /* Authenticated: now (and only now) the driver is worth loading.  A
   * failure is reported on the first request that needs it. */
  rgpu_worker_ensure_driver(w);
  rq->msg[0] = 0;
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  const char *kind = w->drv_state == 1 ? (w->drv.is_softgpu ? "softgpu" : "cuda")
                                       : rgpu_device_kind_name(w->cfg.device);
  rgpu_msg_hello_rep r = {
      .proto_version = RGPU_PROTO_VERSION,
      .caps = w->caps,
      .session_id = w->cfg.session_id,
      .session_token = {w->session_token, sizeof w->session_token},
      .server_name = {host, strlen(host)},
      .device_kind = {kind, strlen(kind)},
      .max_payload = w->cfg.max_payload,
      .quic_direct_port = rgpu_quic_direct_offer(w, q->caps),
  };
  rgpu_msg_hello_rep_encode(rq->rep, &r);
  return CUDA_SUCCESS;
}

CUresult rgpu_h_goodbye(rgpu_req *rq, const rgpu_msg_goodbye_req *q) {
  rgpu_worker *w = rq->w;
  (void)q;
  /* Every earlier reply goes out before GOODBYE's. */
  rgpu_jobs_barrier(w, NULL);
  return CUDA_SUCCESS;
}

CUresult rgpu_h_ping(rgpu_req *rq, const rgpu_msg_ping_req *q) {
  rgpu_buf_put(rq->rep, q->data.data, q->data.len);
  return CUDA_SUCCESS;
}

CUresult rgpu_h_server_status(rgpu_req *rq, const rgpu_msg_server_status_req *q) {
  rgpu_worker *w = rq->w;
  (void)q;
  uint64_t now = rgpu_wall_s();
  rgpu_msg_server_status_rep r = {
      .version = {RGPU_VERSION, strlen(RGPU_VERSION)},
      .sessions_active = w->cfg.sessions_active,
      .sessions_max = w->cfg.max_sessions,
      .uptime_s = now > w->cfg.server_start ? now - w->cfg.server_start : 0,
      .session_quota_bytes = w->cfg.mem_quota,
  };
  rgpu_msg_server_status_rep_encode(rq->rep, &r);
  return CUDA_SUCCESS;
}

/* ---- devices ------------------------------------------------------------ */

CUresult rgpu_h_driver_info(rgpu_req *rq, const rgpu_msg_driver_info_req *q) {
  rgpu_worker *w = rq->w;
  (void)q;
  CUresult r = rgpu_worker_ensure_driver(w);
  if (r) return r;
  int ver = 0;
  CHECK_DRV(D->cuDriverGetVersion(&ver), "cuDriverGetVersion");
  rgpu_msg_driver_info_rep rep = {.driver_version = ver, .device_count = (uint32_t)w->device_count};
  rgpu_msg_driver_info_rep_encode(rq->rep, &rep);
  return CUDA_SUCCESS;
}

CUresult rgpu_h_device_props(rgpu_req *rq, const rgpu_msg_device_props_req *q) {
  rgpu_worker *w = rq->w;
  CUresult r = rgpu_worker_ensure_driver(w);
  if (r) return r;
  if (q->device >= (uint32_t)w->device_count)
    return FAIL(CUDA_ERROR_INVALID_DEVICE, "device %u does not exist (%d device%s)", q->device,
                w->device_count, w->device_count == 1 ? "" : "s");
  CUdevice dev;
  CHECK_DRV(D->cuDeviceGet(&dev, rgpu_worker_ordinal(w, (int)q->device)), "cuDeviceGet");
  char name[256] = "";
  CHECK_DRV(D->cuDeviceGetName(name, sizeof name - 1, dev), "cuDeviceGetName");
  CUuuid uuid;
  memset(&uuid, 0, sizeof uuid);
  CHECK_DRV(D->cuDeviceGetUuid(&uuid, dev), "cuDeviceGetUuid");
  size_t total = 0;
  CHECK_DRV(D->cuDeviceTotalMem(&total, dev), "cuDeviceTotalMem");
  if (w->cfg.mem_quota && total > w->cfg.mem_quota) total = w->cfg.mem_quota;
  enum { NATTR = CU_DEVICE_ATTRIBUTE_MAX < 1024 ? CU_DEVICE_ATTRIBUTE_MAX : 1024 };
  int32_t attrs[NATTR];
  for (int i = 0; i < NATTR; i++) {
    int v = 0;
    if (i == 0 || D->cuDeviceGetAttribute(&v, (CUdevice_attribute)i, dev) != CUDA_SUCCESS) v = 0;
    attrs[i] = v;
  }
  rgpu_msg_device_props_rep rep = {
      .name = {name, strlen(name)},
      .uuid = {uuid.bytes, sizeof uuid.bytes},
      .total_mem = total,
      .attrs = {attrs, NATTR},
  };
  rgpu_msg_device_props_rep_encode(rq->rep, &rep);
  return CUDA_SUCCESS;
}

CUresult rgpu_h_ctx_set_device(rgpu_req *rq, const rgpu_msg_ctx_set_device_req *q) {
  rgpu_worker *w = rq->w;
  if (q->device > INT32_MAX) return FAIL(CUDA_ERROR_INVALID_DEVICE, "device %u does not exist", q->device);
  return rgpu_worker_set_device(w, (int)q->device);
}

CUresult rgpu_h_ctx_sync(rgpu_req *rq, const rgpu_msg_ctx_sync_req *q) {
  rgpu_worker *w = rq->w;
  (void)q;
  if (defer_to_job(rq, RGPU_JOB_CTX_SYNC, w->ctx[w->cur_dev], NULL, 0, NULL, NULL, 0, NULL))
    return CUDA_SUCCESS;
  CHECK_DRV(D->cuCtxSynchronize(), "cuCtxSynchronize");
  return CUDA_SUCCESS;
}

CUresult rgpu_h_device_reset(rgpu_req *rq, const rgpu_msg_device_reset_req *q) {
  rgpu_worker *w = rq->w;
  CUresult r = rgpu_worker_ensure_driver(w);
  if (r) return r;
  if (q->device >= (uint32_t)w->device_count)
    return FAIL(CUDA_ERROR_INVALID_DEVICE, "device %u does not exist", q->device);
  int dev = (int)q->device;
  rgpu_jobs_barrier(w, NULL);
  /* Host registrations die with the context: unpin the pool first. */
  rgpu_staging_drop(w);
  /* The reset destroys every resource of the context; only our tables need
   * forgetting. */
  rgpu_worker_drop_device_state(w, dev, 0);
  CUdevice d;
  CHECK_DRV(D->cuDeviceGet(&d, rgpu_worker_ordinal(w, dev)), "cuDeviceGet");
  /* After a fault CUDA 13 resets and still returns the sticky error (the
   * H200): the old context is gone either way. */
  CUresult reset_r = D->cuDevicePrimaryCtxReset(d);
  /* Whether our retain survives a reset differs between drivers (softgpu
   * drops it and reports the old handle as destroyed), so retain the primary
   * context afresh: the program expects a working device right after
   * cudaDeviceReset.  An extra reference on a driver that kept ours is
   * released with the worker's process.  A driver that refuses the new
   * context (the H200 after a fault: CUDA_ERROR_DEVICE_UNAVAILABLE) leaves
   * no context: the next request asks again and reports the driver's
   * answer, where a local cudart reports it too. */
  if (w->ctx[dev]) {
    CUcontext fresh = NULL;
    CUresult rr = D->cuDevicePrimaryCtxRetain(&fresh, d);
    w->ctx[dev] = rr == CUDA_SUCCESS ? fresh : NULL;
    if (rr == CUDA_SUCCESS && w->cur_dev == dev)
      CHECK_DRV(D->cuCtxSetCurrent(fresh), "cuCtxSetCurrent");
    else if (rr != CUDA_SUCCESS && w->cur_dev == dev)
      D->cuCtxSetCurrent(NULL);
  }
  if (reset_r != CUDA_SUCCESS) return drv_fail(w, reset_r, "cuDevicePrimaryCtxReset");
  return CUDA_SUCCESS;
}

/* ---- memory ------------------------------------------------------------- */

CUresult rgpu_h_mem_get_info(rgpu_req *rq, const rgpu_msg_mem_get_info_req *q) {
  rgpu_worker *w = rq->w;
  (void)q;
  size_t fr = 0, tot = 0;
  CHECK_DRV(D->cuMemGetInfo(&fr, &tot), "cuMemGetInfo");
  uint64_t f = fr, t = tot;
  if (w->cfg.mem_quota) {
    uint64_t used = rgpu_worker_held_bytes(w);
    uint64_t qfree = used < w->cfg.mem_quota ? w->cfg.mem_quota - used : 0;
    if (w->cfg.mem_quota < t) t = w->cfg.mem_quota;
    if (qfree < f) f = qfree;
  }
  rgpu_msg_mem_get_info_rep rep = {.free_bytes = f, .total_bytes = t};
  rgpu_msg_mem_get_info_rep_encode(rq->rep, &rep);
  return CUDA_SUCCESS;
}

CUresult rgpu_h_mem_alloc(rgpu_req *rq, const rgpu_msg_mem_alloc_req *q) {
  rgpu_worker *w = rq->w;
  if (q->size == 0) return FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemAlloc: size 0");
  uint64_t held = rgpu_worker_held_bytes(w); /* globals count too */
  if (w->cfg.mem_quota && (q->size > w->cfg.mem_quota || held > w->cfg.mem_quota - q->size))
    return FAIL(CUDA_ERROR_OUT_OF_MEMORY,
                "session memory quota exceeded: %llu bytes in use, %llu requested, quota %llu",
                (unsigned long long)held, (unsigned long long)q->size,
                (unsigned long long)w->cfg.mem_quota);
  if (q->size > SIZE_MAX) return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "allocation too large");
  CUdeviceptr dp = 0;
  CHECK_DRV(D->cuMemAlloc(&dp, (size_t)q->size), "cuMemAlloc");
  int rc = rgpu_alloc_table_add(&w->allocs, dp, q->size, RGPU_ALLOC_MALLOC, w->cur_dev, 0);
  if (rc) {
    D->cuMemFree(dp);
    return FAIL(rc == RGPU_SESS_ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_UNKNOWN,
                "cannot track the allocation at 0x%llx (%d)", (unsigned long long)dp, rc);
  }
  rgpu_msg_mem_alloc_rep rep = {.dptr = dp};
  rgpu_msg_mem_alloc_rep_encode(rq->rep, &rep);
  return CUDA_SUCCESS;
}

CUresult rgpu_h_mem_free(rgpu_req *rq, const rgpu_msg_mem_free_req *q) {
  rgpu_worker *w = rq->w;
  const rgpu_alloc *a = rgpu_alloc_table_find(&w->allocs, q->dptr);
  if (!a || a->kind != RGPU_ALLOC_MALLOC)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemFree: 0x%llx was not returned by cuMemAlloc in this session",
                (unsigned long long)q->dptr);
  rgpu_graph_lib_invalidate(w);
  rgpu_worker_drop_views(w, NULL, a->dptr, a->size);
  rgpu_worker_drop_managed_copies(w, -1, a->dptr, a->size);
  if (w->host_calls && rgpu_jobs_enabled(w) && a->device >= 0 && a->device < RGPU_MAX_DEVICES) {
    /* cuMemFree waits for the device, which may wait for a host callback
     * whose HOST_CALL_DONE only this thread can read: free in the
     * background (the table forgets it now, so later requests see it gone). */
    rgpu_job *j = calloc(1, sizeof *j);
    if (j) {
      *j = (rgpu_job){.kind = RGPU_JOB_FREE, .opcode = rq->op, .seq = rq->seq,
                      .ctx = w->ctx[a->device], .dptr = q->dptr};
      rgpu_alloc_table_remove(&w->allocs, q->dptr, NULL);
      if (rgpu_jobs_submit(w, j) == 0) return CUDA_SUCCESS;
      free(j);
      /* No thread: free here, as below. */
      CUresult r = D->cuMemFree((CUdeviceptr)q->dptr);
      if (r != CUDA_SUCCESS) return drv_fail(w, r, "cuMemFree");
      return CUDA_SUCCESS;
    }
  }
  /* Background copies may still use it (cudaFree synchronises anyway). */
  rgpu_jobs_barrier(w, NULL);
  CUresult r = D->cuMemFree((CUdeviceptr)q->dptr);
  /* Forget it even if the driver complains (sticky context error): the
   * memory is gone with the context anyway. */
  rgpu_alloc_table_remove(&w->allocs, q->dptr, NULL);
  if (r != CUDA_SUCCESS) return drv_fail(w, r, "cuMemFree");
  return CUDA_SUCCESS;
}

/* A copy the program saw complete (RGPU_REQ_HOST_ORDERED: a synchronous
 * cudaMemcpy, which the client does not wait for) and that the session
 * left running on its stream, s: the device's other streams, and those
 * made later (rgpu_h_stream_create), wait for it on the device.  Without
 * this a kernel on a non-blocking stream could read the destination
 * before the copy landed (softgpu runs each stream on its own thread:
 * e2e_graph_stream_memop failed so under load).  Waits on the device,
 * never here: the copy's stream may be waiting for a host callback whose
 * completion only this thread can read.  Best effort: a failure leaves
 * CUDA's plain stream semantics.  Nothing for a request without the flag. */
static void host_ordered_fence(rgpu_req *rq, uint64_t stream_id, CUstream s) {
  rgpu_worker *w = rq->w;
  if (!(rq->hdr.aux & RGPU_REQ_HOST_ORDERED)) return;
  int dev = w->cur_dev;
  if (stream_id) {
    const rgpu_handle_entry *e = rgpu_handle_map_get(&w->streams, stream_id);
    if (!e || e->device != dev) return; /* the events are made in the current context */
  }
  if (dev < 0 || dev >= RGPU_MAX_DEVICES || !w->ctx[dev]) return;
  if (!w->host_fence[dev] && D->cuEventCreate(&w->host_fence[dev], CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
    w->host_fence[dev] = NULL;
    return;
  }
  if (D->cuEventRecord(w->host_fence[dev], s) != CUDA_SUCCESS) return;
  for (size_t i = 0; i < w->streams.n; i++) {
    const rgpu_handle_entry *e = &w->streams.v[i];
    if (e->id != stream_id && e->device == dev)
      D->cuStreamWaitEvent((CUstream)e->ptr, w->host_fence[dev], 0);
  }
}

CUresult rgpu_h_memcpy_htod(rgpu_req *rq, const rgpu_msg_memcpy_htod_req *q) {
  rgpu_worker *w = rq->w;
  CUresult r;
  CUstream s = NULL;
  if (q->data.len == 0) {
    /* Empty: nothing to copy, but with RGPU_REQ_HOST_ORDERED the fence
     * after a copy whose bytes went on a bulk stream (cudart's copy_htod). */
    if (rgpu_jobs_enabled(w) && get_stream(w, q->stream, &s) == CUDA_SUCCESS)
      host_ordered_fence(rq, q->stream, s);
    return CUDA_SUCCESS;
  }
  r = check_range(w, q->dst, q->data.len, "cuMemcpyHtoD");
  if (r) return r;
  if ((r = get_stream(w, q->stream, &s))) return r;
  if (rgpu_jobs_enabled(w)) {
    /* Also on the legacy stream: the session thread must never block on a
     * stream that may be waiting for a host callback, whose HOST_CALL_DONE
     * only this thread can read. */
    /* Keep the source alive until the stream has consumed it, so nothing
     * waits here: a large frame's own buffer is taken from the read loop,
     * a small one (inside the loop's batch buffer) is copied. */
    if (!(rq->in && rq->in->data) && q->data.len <= RGPU_SMALL_H2D_MAX) {
      /* Packed with the stream's other small copies: one marker and one
       * job per batch, not per copy (rgpu_worker_internal.h). */
      void *dst = rgpu_small_h2d_place(w, s, stream_ctx(w, q->stream), q->data.len);
      if (dst) {
        memcpy(dst, q->data.data, q->data.len);
        CUresult cr = D->cuMemcpyHtoDAsync((CUdeviceptr)q->dst, dst, q->data.len, s);
        /* Its room stays in the batch, released with it. */
        if (cr != CUDA_SUCCESS) return drv_fail(w, cr, "cuMemcpyHtoDAsync");
        host_ordered_fence(rq, q->stream, s);
        return CUDA_SUCCESS;
      }
    }
    void *base;
    const void *src;
    void *pinned = NULL;
    if (rq->in && rq->in->data) {
      base = rq->in->data;
      src = q->data.data;
      rgpu_buf_init(rq->in);
      int pooled_pin = 0;
      if (!w->staging.chunk || !rgpu_chunk_pool_owns(w->staging.chunk, base, &pooled_pin) || !pooled_pin)
        pinned = rgpu_staging_pin(w, (void *)src, q->data.len);
    } else {
      base = rgpu_staging_get(w, q->data.len, &pinned);
      if (!base) return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory staging a copy");
      memcpy(base, q->data.data, q->data.len);
      src = base;
    }
    CUresult cr = D->cuMemcpyHtoDAsync((CUdeviceptr)q->dst, src, q->data.len, s);
    if (cr == CUDA_SUCCESS) host_ordered_fence(rq, q->stream, s);
    return rgpu_req_release_after_stream(rq, q->stream, s, cr, "cuMemcpyHtoDAsync", base, pinned);
  } else if (!s) {
    CHECK_DRV(D->cuMemcpyHtoD((CUdeviceptr)q->dst, q->data.data, q->data.len), "cuMemcpyHtoD");
  } else {
    /* The source is this frame's buffer, reused for the next frame: wait
     * for the copy before returning. */
    CHECK_DRV(D->cuMemcpyHtoDAsync((CUdeviceptr)q->dst, q->data.data, q->data.len, s),
              "cuMemcpyHtoDAsync");
    CHECK_DRV(D->cuStreamSynchronize(s), "cuMemcpyHtoDAsync");
  }
  return CUDA_SUCCESS;
}

CUresult rgpu_req_release_after_stream(rgpu_req *rq, uint64_t stream_id, CUstream s,
                                       CUresult queued, const char *what, void *base,
                                       void *pinned) {
  rgpu_worker *w = rq->w;
  CUevent ev = NULL;
  CUcontext sctx = stream_ctx(w, stream_id);
  int own = 1;
  CUresult cr = queued;
  if (cr == CUDA_SUCCESS) cr = rgpu_worker_marker_pooled(w, sctx, s, &ev, &own);
  if (cr != CUDA_SUCCESS) {
    D->cuStreamSynchronize(s);
    rgpu_staging_release(w, base, pinned);
    return drv_fail(w, cr, what);
  }
  if (!defer_to_job_on(rq, RGPU_JOB_RELEASE, sctx, s, ev, own, NULL, base, 0, pinned)) {
    CUresult sr = D->cuEventSynchronize(ev);
    rgpu_worker_marker_release(w, sctx, ev, own, sr == CUDA_SUCCESS);
    rgpu_staging_release(w, base, pinned);
  }
  return CUDA_SUCCESS;
}

CUresult rgpu_worker_stream_get(rgpu_worker *w, uint64_t id, CUstream *out) {
  return get_stream(w, id, out);
}

CUresult rgpu_worker_range_check(rgpu_worker *w, uint64_t ptr, uint64_t len, const char *what) {
  return check_range(w, ptr, len, what);
}

CUresult rgpu_req_reply_after_stream(rgpu_req *rq, uint64_t stream_id, CUstream s, void *buf,
                                     size_t len, void *pinned) {
  rgpu_worker *w = rq->w;
  CUevent ev = NULL;
  CUcontext sctx = stream_ctx(w, stream_id);
  int own = 1;
  CUresult cr = rgpu_worker_marker_pooled(w, sctx, s, &ev, &own);
  if (cr != CUDA_SUCCESS) {
    D->cuStreamSynchronize(s);
    rgpu_staging_release(w, buf, pinned);
    return drv_fail(w, cr, "marking a reply's point in its stream");
  }
  int done = marker_done_soon(w, ev);
  if (!done && defer_to_job_on(rq, RGPU_JOB_WAIT_EVENT, sctx, s, ev, own, NULL, buf, len, pinned))
    return CUDA_SUCCESS;
  CUresult sr = done ? CUDA_SUCCESS : D->cuEventSynchronize(ev);
  rgpu_worker_marker_release(w, sctx, ev, own, sr == CUDA_SUCCESS);
  if (sr != CUDA_SUCCESS) {
    rgpu_staging_release(w, buf, pinned);
    return drv_fail(w, sr, "waiting for a reply's point in its stream");
  }
  rgpu_buf_put(rq->rep, buf, len);
  rgpu_staging_release(w, buf, pinned);
  return CUDA_SUCCESS;
}

CUresult rgpu_h_memcpy_dtoh(rgpu_req *rq, const rgpu_msg_memcpy_dtoh_req *q) {
  rgpu_worker *w = rq->w;
  if (q->size > w->cfg.max_payload)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemcpyDtoH: %llu bytes exceed the %u-byte frame limit; split the copy",
                (unsigned long long)q->size, w->cfg.max_payload);
  if (q->size == 0) return CUDA_SUCCESS;
  CUresult r = check_range(w, q->src, q->size, "cuMemcpyDtoH");
  if (r) return r;
  CUstream s = NULL;
  if ((r = get_stream(w, q->stream, &s))) return r;
  if (rgpu_jobs_enabled(w) && rq->need_reply) {
    /* Enqueued now, in stream order; the reply leaves when it is done (the
     * legacy stream too: see h_memcpy_htod). */
    void *pinned = NULL;
    void *buf = rgpu_staging_get(w, (size_t)q->size, &pinned);
    if (!buf) return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory");
    CUevent ev = NULL;
    CUcontext sctx = stream_ctx(w, q->stream);
    int own = 1;
    CUresult cr = D->cuMemcpyDtoHAsync(buf, (CUdeviceptr)q->src, (size_t)q->size, s);
    if (cr == CUDA_SUCCESS) cr = rgpu_worker_marker_pooled(w, sctx, s, &ev, &own);
    if (cr != CUDA_SUCCESS) {
      D->cuStreamSynchronize(s);
      rgpu_staging_release(w, buf, pinned);
      return drv_fail(w, cr, "cuMemcpyDtoHAsync");
    }
    int done = marker_done_soon(w, ev);
    if (!done && defer_to_job_on(rq, RGPU_JOB_WAIT_EVENT, sctx, s, ev, own, NULL, buf,
                                 (size_t)q->size, pinned))
      return CUDA_SUCCESS;
    /* A marker the poll saw complete needs no second driver call. */
    CUresult sr = done ? CUDA_SUCCESS : D->cuEventSynchronize(ev);
    rgpu_worker_marker_release(w, sctx, ev, own, sr == CUDA_SUCCESS);
    if (sr != CUDA_SUCCESS) {
      rgpu_staging_release(w, buf, pinned);
      return drv_fail(w, sr, "cuMemcpyDtoHAsync");
    }
    rgpu_buf_put(rq->rep, buf, (size_t)q->size);
    rgpu_staging_release(w, buf, pinned);
    return CUDA_SUCCESS;
  }
  if (rgpu_buf_reserve(rq->rep, (size_t)q->size)) return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory");
  void *dst = rq->rep->data + rq->rep->len;
  if (!s) {
    CHECK_DRV(D->cuMemcpyDtoH(dst, (CUdeviceptr)q->src, (size_t)q->size), "cuMemcpyDtoH");
  } else {
    CHECK_DRV(D->cuMemcpyDtoHAsync(dst, (CUdeviceptr)q->src, (size_t)q->size, s), "cuMemcpyDtoHAsync");
    CHECK_DRV(D->cuStreamSynchronize(s), "cuMemcpyDtoHAsync");
  }
  rq->rep->len += (size_t)q->size;
  return CUDA_SUCCESS;
}

CUresult rgpu_h_memcpy_dtod(rgpu_req *rq, const rgpu_msg_memcpy_dtod_req *q) {
  rgpu_worker *w = rq->w;
  if (q->size == 0) return CUDA_SUCCESS;
  CUresult r = check_range(w, q->dst, q->size, "cuMemcpyDtoD (destination)");
  if (!r) r = check_range(w, q->src, q->size, "cuMemcpyDtoD (source)");
  if (r) return r;
  CUstream s = NULL;
  if ((r = get_stream(w, q->stream, &s))) return r;
  /* Between two devices' memory (issue 19): the driver's peer copy, which
   * takes the best path it has (peer-to-peer, else through the host). */
  const rgpu_alloc *da = rgpu_alloc_table_lookup(&w->allocs, q->dst, q->size);
  const rgpu_alloc *sa = rgpu_alloc_table_lookup(&w->allocs, q->src, q->size);
  if (da && sa && da->device != sa->device && da->device >= 0 && sa->device >= 0 &&
      da->device < RGPU_MAX_DEVICES && sa->device < RGPU_MAX_DEVICES && w->ctx[da->device] &&
      w->ctx[sa->device] && D->cuMemcpyPeer && D->cuMemcpyPeerAsync) {
    CUcontext dc = w->ctx[da->device], sc = w->ctx[sa->device];
    if (!s)
      CHECK_DRV(D->cuMemcpyPeer((CUdeviceptr)q->dst, dc, (CUdeviceptr)q->src, sc, (size_t)q->size),
                "cuMemcpyPeer");
    else
      CHECK_DRV(D->cuMemcpyPeerAsync((CUdeviceptr)q->dst, dc, (CUdeviceptr)q->src, sc,
                                     (size_t)q->size, s),
                "cuMemcpyPeerAsync");
    return CUDA_SUCCESS;
  }
  if (!s)
    CHECK_DRV(D->cuMemcpyDtoD((CUdeviceptr)q->dst, (CUdeviceptr)q->src, (size_t)q->size), "cuMemcpyDtoD");
  else
    CHECK_DRV(D->cuMemcpyDtoDAsync((CUdeviceptr)q->dst, (CUdeviceptr)q->src, (size_t)q->size, s),
              "cuMemcpyDtoDAsync");
  return CUDA_SUCCESS;
}

CUresult rgpu_h_memset(rgpu_req *rq, const rgpu_msg_memset_req *q) {
  rgpu_worker *w = rq->w;
  if (q->elem_size != 1 && q->elem_size != 2 && q->elem_size != 4)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "memset: element size %u (must be 1, 2 or 4)", q->elem_size);
  if (q->count == 0) return CUDA_SUCCESS;
  if (q->count > UINT64_MAX / q->elem_size)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "memset: %llu elements overflow", (unsigned long long)q->count);
  CUresult r = check_range(w, q->dst, q->count * q->elem_size, "memset");
  if (r) return r;
  CUstream s = NULL;
  if ((r = get_stream(w, q->stream, &s))) return r;
  CUdeviceptr d = (CUdeviceptr)q->dst;
  size_t c = (size_t)q->count;
  switch (q->elem_size) {
    case 1:
      r = s ? D->cuMemsetD8Async(d, (unsigned char)q->value, c, s) : D->cuMemsetD8(d, (unsigned char)q->value, c);
      break;
    case 2:
      r = s ? D->cuMemsetD16Async(d, (unsigned short)q->value, c, s)
            : D->cuMemsetD16(d, (unsigned short)q->value, c);
      break;
    default:
      r = s ? D->cuMemsetD32Async(d, q->value, c, s) : D->cuMemsetD32(d, q->value, c);
      break;
  }
  if (r != CUDA_SUCCESS) return drv_fail(w, r, "cuMemsetD*");
  return CUDA_SUCCESS;
}

/* ---- modules and launches ----------------------------------------------- */

/* Growable u32 array for the flattened parameter tables. */
/* Parameter tables: at most 65536 functions x RGPU_MAX_KERNEL_PARAMS, so a
 * count always fits the reply's u32 counts. */
typedef RGPU_ARRAY(uint32_t) u32vec;

/* Parameters per kernel are bounded by the 32 KiB parameter space. */
#define RGPU_MAX_KERNEL_PARAMS 8192

CUresult rgpu_h_module_load(rgpu_req *rq, const rgpu_msg_module_load_req *q) {
  rgpu_worker *w = rq->w;
  if (q->module_id == 0) return FAIL(CUDA_ERROR_INVALID_VALUE, "module id 0 is reserved");
  if (rgpu_handle_map_get(&w->modules, q->module_id))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "module id %llu is already loaded", (unsigned long long)q->module_id);
  if (q->image_hash.len != 0 && q->image_hash.len != 32)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "module load: image hash of %zu bytes (SHA-256 has 32)",
                q->image_hash.len);
  /* Named by its hash alone: the image cache has it, or the client is told
   * to send it (rgpu_handlers_image.c). */
  const void *image = q->image.data;
  size_t image_len = q->image.len;
  void *cached = NULL;
  if (image_len == 0 && q->image_hash.len) {
    CUresult cr = rgpu_worker_image_lookup(w, q->image_hash.data, &cached, &image_len);
    if (cr != CUDA_SUCCESS) return cr;
    image = cached;
  }
  if (image_len == 0) {
    free(cached);
    return FAIL(CUDA_ERROR_INVALID_IMAGE, "cuModuleLoadData: empty image");
  }

  /* The image sits unaligned in the frame and a PTX image need not be
   * NUL-terminated there; the driver wants both. */
  size_t alen = (image_len + 1 + 63) & ~(size_t)63;
  unsigned char *img = aligned_alloc(64, alen);
  if (img) {
    memcpy(img, image, image_len);
    memset(img + image_len, 0, alen - image_len);
  }
  free(cached);
  if (!img) return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory copying the module image");
  CUmodule mod = NULL;
  /* The JIT's error log says why a module is refused (softgpu: "unknown
   * symbol 'WARP_SZ'"); the code alone (CUDA_ERROR_INVALID_PTX) does not, and
   * the reply's text is all the client gets to show. */
  char jit_err[1024] = "";
  CUresult r;
  if (D->cuModuleLoadDataEx) {
    CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *vals[] = {jit_err, (void *)(uintptr_t)sizeof jit_err};
    r = D->cuModuleLoadDataEx(&mod, img, 2, opts, vals);
  } else {
    r = D->cuModuleLoadData(&mod, img);
  }
  free(img);
  jit_err[sizeof jit_err - 1] = 0;
  for (size_t n = strlen(jit_err); n && (jit_err[n - 1] == '\n' || jit_err[n - 1] == ' '); n--)
    jit_err[n - 1] = 0;
  if (r != CUDA_SUCCESS && jit_err[0])
    return FAIL(r, "cuModuleLoadData: %s: %s", ENAME(r), jit_err);
  if (r != CUDA_SUCCESS) return drv_fail(w, r, "cuModuleLoadData");
  /* An image the driver accepted, sent whole: the next process need not. */
  if (q->image.len)
    rgpu_worker_image_store(w, q->image.data, q->image.len,
                            q->image_hash.len ? q->image_hash.data : NULL);

  uint32_t nf = q->func_names.count, nv = q->var_names.count;
  int32_t *fstat = calloc(nf ? nf : 1, sizeof *fstat);
  uint32_t *fnp = calloc(nf ? nf : 1, sizeof *fnp);
  CUfunction *fns = calloc(nf ? nf : 1, sizeof *fns);
  int32_t *vstat = calloc(nv ? nv : 1, sizeof *vstat);
  uint64_t *vdp = calloc(nv ? nv : 1, sizeof *vdp);
  uint64_t *vsz = calloc(nv ? nv : 1, sizeof *vsz);
  u32vec offs = {0}, sizes = {0};
  rgpu_module_rec *rec = NULL;
  char name[65536 + 1];
  CUresult status = CUDA_SUCCESS;
  if (!fstat || !fnp || !fns || !vstat || !vdp || !vsz) {
    status = FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory loading a module");
    goto out;
  }
  rgpu_strlist_iter it;
  const char *s;
  size_t sl;
  rgpu_strlist_iter_init(&it, &q->func_names);
  for (uint32_t i = 0; i < nf && rgpu_strlist_next(&it, &s, &sl); i++) {
    if (rgpu_str_copy(name, sizeof name, s, sl)) {
      fstat[i] = CUDA_ERROR_INVALID_VALUE;
      continue;
    }
    CUfunction f = NULL;
    CUresult fr = D->cuModuleGetFunction(&f, mod, name);
    fstat[i] = (int32_t)fr;
    if (fr != CUDA_SUCCESS) continue;
    fns[i] = f;
    if (!D->cuFuncGetParamInfo) continue;
    for (uint32_t k = 0; k < RGPU_MAX_KERNEL_PARAMS; k++) {
      size_t off = 0, sz = 0;
      if (D->cuFuncGetParamInfo(f, k, &off, &sz) != CUDA_SUCCESS) break;
      if (off > UINT32_MAX || sz > UINT32_MAX || rgpu_array_push(&offs, (uint32_t)off) ||
          rgpu_array_push(&sizes, (uint32_t)sz)) {
        status = FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory reading parameter tables");
        goto out;
      }
      fnp[i]++;
    }
  }
  uint64_t held_before = rgpu_worker_held_bytes(w);
  rgpu_strlist_iter_init(&it, &q->var_names);
  for (uint32_t i = 0; i < nv && rgpu_strlist_next(&it, &s, &sl); i++) {
    if (rgpu_str_copy(name, sizeof name, s, sl)) {
      vstat[i] = CUDA_ERROR_INVALID_VALUE;
      continue;
    }
    CUdeviceptr dp = 0;
    size_t sz = 0;
    CUresult vr = D->cuModuleGetGlobal(&dp, &sz, mod, name);
    vstat[i] = (int32_t)vr;
    if (vr != CUDA_SUCCESS) continue;
    vdp[i] = dp;
    vsz[i] = sz;
    /* Symbol copies (cudaMemcpyToSymbol) then validate like any other. */
    if (sz) rgpu_alloc_table_add(&w->allocs, dp, sz, RGPU_ALLOC_MODULE_GLOBAL, w->cur_dev, q->module_id);
  }
  /* A module's __device__ variables are device memory the session holds:
   * a 512 MiB array must not load under a 64 MiB quota. */
  if (w->cfg.mem_quota && rgpu_worker_held_bytes(w) > w->cfg.mem_quota) {
    status = FAIL(CUDA_ERROR_OUT_OF_MEMORY,
                  "session memory quota exceeded: the module's __device__ variables need more "
                  "than the %llu bytes left of the quota %llu",
                  (unsigned long long)(w->cfg.mem_quota > held_before ? w->cfg.mem_quota - held_before : 0),
                  (unsigned long long)w->cfg.mem_quota);
    goto out;
  }

  rec = rgpu_module_rec_new(nf, (uint32_t)offs.n);
  if (!rec || rgpu_handle_map_put(&w->modules, q->module_id, rec, w->cur_dev)) {
    status = FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory recording a module");
    goto out;
  }
  rec->module = mod;
  uint32_t first = 0;
  for (uint32_t i = 0; i < nf; i++) {
    rec->funcs[i] = fns[i];
    rec->nparams[i] = fnp[i];
    rec->param_first[i] = first;
    first += fnp[i];
  }
  if (offs.n) {
    memcpy(rec->param_offsets, offs.v, offs.n * sizeof *offs.v);
    memcpy(rec->param_sizes, sizes.v, sizes.n * sizeof *sizes.v);
  }
  rec->params_known = D->cuFuncGetParamInfo != NULL;
  rgpu_msg_module_load_rep rep = {
      .func_status = {fstat, nf},
      .func_nparams = {fnp, nf},
      .param_offsets = {offs.v, (uint32_t)offs.n},
      .param_sizes = {sizes.v, (uint32_t)sizes.n},
      .var_status = {vstat, nv},
      .var_dptrs = {vdp, nv},
      .var_sizes = {vsz, nv},
  };
  rgpu_msg_module_load_rep_encode(rq->rep, &rep);
  rec = NULL; /* owned by the handle map now */
out:
  if (status != CUDA_SUCCESS) {
    rgpu_alloc_table_remove_matching(&w->allocs, -1, q->module_id, NULL, NULL);
    D->cuModuleUnload(mod);
    rgpu_module_rec_free(rec);
  }
  free(fstat);
  free(fnp);
  free(fns);
  free(vstat);
  free(vdp);
  free(vsz);
  free(offs.v);
  free(sizes.v);
  return status;
}

CUresult rgpu_h_module_unload(rgpu_req *rq, const rgpu_msg_module_unload_req *q) {
  rgpu_worker *w = rq->w;
  rgpu_handle_entry e;
  CUresult r = take_handle(w, &w->modules, "module", q->module_id, &e);
  if (r) return r;
  rgpu_module_rec *m = e.ptr;
  rgpu_jobs_barrier(w, NULL);
  rgpu_graph_lib_invalidate(w); /* its globals may be a captured call's pointers */
  rgpu_alloc_table_remove_matching(&w->allocs, -1, q->module_id, NULL, NULL);
  r = D->cuModuleUnload((CUmodule)m->module);
  rgpu_module_rec_free(m);
  if (r != CUDA_SUCCESS) return drv_fail(w, r, "cuModuleUnload");
  return CUDA_SUCCESS;
}

CUresult rgpu_h_launch(rgpu_req *rq, const rgpu_msg_launch_req *q) {
  rgpu_worker *w = rq->w;
  rgpu_module_rec *m = NULL;
  CUfunction f = NULL;
  CUresult r = get_func(w, q->module_id, q->func_index, &m, &f);
  if (r) return r;
  CUstream s = NULL;
  if ((r = get_stream(w, q->stream, &s))) return r;
  /* An aligned private copy: the driver reads parameters in place. */
  size_t plen = q->params.len;
  if ((r = rgpu_worker_copy_params(w, q->params.data, plen))) return r;
  if (m->params_known) {
    uint32_t np = m->nparams[q->func_index];
    uint64_t extent = rgpu_module_rec_param_extent(m, q->func_index);
    if (plen != extent)
      return FAIL(CUDA_ERROR_INVALID_VALUE,
                  "launch: %zu bytes of parameters sent, the kernel's %u parameters take %llu", plen,
                  np, (unsigned long long)extent);
    void *kp[RGPU_MAX_KERNEL_PARAMS];
    for (uint32_t k = 0; k < np; k++)
      kp[k] = (unsigned char *)w->param_buf + m->param_offsets[m->param_first[q->func_index] + k];
    r = D->cuLaunchKernel(f, q->grid_x, q->grid_y, q->grid_z, q->block_x, q->block_y, q->block_z,
                          q->shared_bytes, s, np ? kp : NULL, NULL);
  } else {
    /* No layout from the driver: hand the packed buffer over whole. */
    size_t sz = plen;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, w->param_buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &sz,
                     CU_LAUNCH_PARAM_END};
    r = D->cuLaunchKernel(f, q->grid_x, q->grid_y, q->grid_z, q->block_x, q->block_y, q->block_z,
                          q->shared_bytes, s, NULL, plen ? extra : NULL);
  }
  if (r != CUDA_SUCCESS) return drv_fail(w, r, "cuLaunchKernel");
  return CUDA_SUCCESS;
}

CUresult rgpu_h_func_get_attrs(rgpu_req *rq, const rgpu_msg_func_get_attrs_req *q) {
  rgpu_worker *w = rq->w;
  rgpu_module_rec *m = NULL;
  CUfunction f = NULL;
  CUresult r = get_func(w, q->module_id, q->func_index, &m, &f);
  if (r) return r;
  enum { NATTR = CU_FUNC_ATTRIBUTE_MAX < 64 ? CU_FUNC_ATTRIBUTE_MAX : 64 };
  int32_t attrs[NATTR];
  for (int i = 0; i < NATTR; i++) {
    int v = 0;
    if (D->cuFuncGetAttribute(&v, (CUfunction_attribute)i, f) != CUDA_SUCCESS) v = 0;
    attrs[i] = v;
  }
  rgpu_msg_func_get_attrs_rep rep = {.attrs = {attrs, NATTR}};
  rgpu_msg_func_get_attrs_rep_encode(rq->rep, &rep);
  return CUDA_SUCCESS;
}

/* ---- streams and events ------------------------------------------------- */

CUresult rgpu_h_stream_create(rgpu_req *rq, const rgpu_msg_stream_create_req *q) {
  rgpu_worker *w = rq->w;
  CUresult r = check_new_id(w, &w->streams, "stream", q->stream, "stream id 0 is the default stream");
  if (r) return r;
  CUstream s = NULL;
  CHECK_DRV(D->cuStreamCreateWithPriority(&s, q->flags, q->priority), "cuStreamCreateWithPriority");
  if (rgpu_handle_map_put(&w->streams, q->stream, s, w->cur_dev)) {
    D->cuStreamDestroy(s);
    return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory recording a stream");
  }
  /* A copy the program saw complete may still be running (host_ordered_fence). */
  if (w->cur_dev >= 0 && w->cur_dev < RGPU_MAX_DEVICES && w->host_fence[w->cur_dev])
    D->cuStreamWaitEvent(s, w->host_fence[w->cur_dev], 0);
  return CUDA_SUCCESS;
}

CUresult rgpu_h_stream_destroy(rgpu_req *rq, const rgpu_msg_stream_destroy_req *q) {
  rgpu_worker *w = rq->w;
  rgpu_handle_entry e;
  CUresult r = take_handle(w, &w->streams, "stream", q->stream, &e);
  if (r) return r;
  CHECK_DRV(D->cuStreamDestroy((CUstream)e.ptr), "cuStreamDestroy");
  return CUDA_SUCCESS;
}

CUresult rgpu_h_stream_sync(rgpu_req *rq, const rgpu_msg_stream_sync_req *q) {
  rgpu_worker *w = rq->w;
  CUstream s = NULL;
  CUresult r = get_stream(w, q->stream, &s);
  if (r) return r;
  if (rgpu_jobs_enabled(w) && rq->need_reply) {
    CUevent ev = NULL;
    if (rgpu_worker_marker(w, s, &ev) == CUDA_SUCCESS) {
      if (!marker_done_soon(w, ev) &&
          defer_to_job_on(rq, RGPU_JOB_WAIT_EVENT, stream_ctx(w, q->stream), s, ev, 1, NULL, NULL,
                          0, NULL))
        return CUDA_SUCCESS;
      D->cuEventDestroy(ev);
    }
  }
  CHECK_DRV(D->cuStreamSynchronize(s), "cuStreamSynchronize");
  return CUDA_SUCCESS;
}

CUresult rgpu_h_stream_query(rgpu_req *rq, const rgpu_msg_stream_query_req *q) {
  rgpu_worker *w = rq->w;
  CUstream s = NULL;
  CUresult r = get_stream(w, q->stream, &s);
  if (r) return r;
  return query_result(w, D->cuStreamQuery(s), "cuStreamQuery");
}

CUresult rgpu_h_stream_wait_event(rgpu_req *rq, const rgpu_msg_stream_wait_event_req *q) {
  rgpu_worker *w = rq->w;
  CUstream s = NULL;
  CUevent e = NULL;
  CUresult r = get_stream(w, q->stream, &s);
  if (!r) r = get_event(w, q->event, &e);
  if (r) return r;
  CHECK_DRV(D->cuStreamWaitEvent(s, e, q->flags), "cuStreamWaitEvent");
  return CUDA_SUCCESS;
}

/* Host callbacks: see rgpu_host_call_* in rgpu_worker_internal.h. */
CUresult rgpu_h_host_func(rgpu_req *rq, const rgpu_msg_host_func_req *q) {
  rgpu_worker *w = rq->w;
  CUstream s = NULL;
  CUresult r = get_stream(w, q->stream, &s);
  if (r) return r;
  return rgpu_host_call_enqueue(w, s, q->callback);
}

CUresult rgpu_h_host_call_done(rgpu_req *rq, const rgpu_msg_host_call_done_req *q) {
  rgpu_worker *w = rq->w;
  return rgpu_host_call_done(w, q->token);
}

CUresult rgpu_h_event_create(rgpu_req *rq, const rgpu_msg_event_create_req *q) {
  rgpu_worker *w = rq->w;
  CUresult r = check_new_id(w, &w->events, "event", q->event, "event id 0 is reserved");
  if (r) return r;
  CUevent e = NULL;
  CHECK_DRV(D->cuEventCreate(&e, q->flags), "cuEventCreate");
  if (rgpu_handle_map_put(&w->events, q->event, e, w->cur_dev)) {
    D->cuEventDestroy(e);
    return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory recording an event");
  }
  return CUDA_SUCCESS;
}

CUresult rgpu_h_event_destroy(rgpu_req *rq, const rgpu_msg_event_destroy_req *q) {
  rgpu_worker *w = rq->w;
  rgpu_handle_entry e;
  CUresult r = take_handle(w, &w->events, "event", q->event, &e);
  if (r) return r;
  rgpu_jobs_barrier(w, e.ptr); /* an EVENT_SYNC may still wait on it */
  CHECK_DRV(D->cuEventDestroy((CUevent)e.ptr), "cuEventDestroy");
  return CUDA_SUCCESS;
}

CUresult rgpu_h_event_record(rgpu_req *rq, const rgpu_msg_event_record_req *q) {
  rgpu_worker *w = rq->w;
  CUevent e = NULL;
  CUstream s = NULL;
  CUresult r = get_event(w, q->event, &e);
  if (!r) r = get_stream(w, q->stream, &s);
  if (r) return r;
  CHECK_DRV(D->cuEventRecord(e, s), "cuEventRecord");
  return CUDA_SUCCESS;
}

CUresult rgpu_h_event_sync(rgpu_req *rq, const rgpu_msg_event_sync_req *q) {
  rgpu_worker *w = rq->w;
  CUevent e = NULL;
  CUresult r = get_event(w, q->event, &e);
  if (r) return r;
  const rgpu_handle_entry *he = rgpu_handle_map_get(&w->events, q->event);
  CUcontext ctx = he && he->device >= 0 ? w->ctx[he->device] : NULL;
  if (ctx && defer_to_job(rq, RGPU_JOB_WAIT_EVENT, ctx, e, 0, e, NULL, 0, NULL)) return CUDA_SUCCESS;
  CHECK_DRV(D->cuEventSynchronize(e), "cuEventSynchronize");
  return CUDA_SUCCESS;
}

CUresult rgpu_h_event_query(rgpu_req *rq, const rgpu_msg_event_query_req *q) {
  rgpu_worker *w = rq->w;
  CUevent e = NULL;
  CUresult r = get_event(w, q->event, &e);
  if (r) return r;
  return query_result(w, D->cuEventQuery(e), "cuEventQuery");
}

CUresult rgpu_h_event_elapsed(rgpu_req *rq, const rgpu_msg_event_elapsed_req *q) {
  rgpu_worker *w = rq->w;
  CUevent a = NULL, b = NULL;
  CUresult r = get_event(w, q->start_event, &a);
  if (!r) r = get_event(w, q->end_event, &b);
  if (r) return r;
  float ms = 0;
  CHECK_DRV(D->cuEventElapsedTime(&ms, a, b), "cuEventElapsedTime");
  rgpu_msg_event_elapsed_rep rep = {.ms = ms};
  rgpu_msg_event_elapsed_rep_encode(rq->rep, &rep);
  return CUDA_SUCCESS;
}
