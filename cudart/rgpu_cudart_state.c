/* Global state of the runtime facade: the lazily opened session, the error
 * rules (per-thread last error, sticky context errors, latched async
 * errors), call counting and the RGPU_STATS report at exit, and the error
 * query functions. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rgpu_clock.h"
#include "rgpu_cudart.h"
#include "rgpu_cudart_errors.h"
#include "rgpu_cudart_unsupported.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"

/* ---- globals ------------------------------------------------------------ */

/* Error state per server (issue 19): a sticky error or a latched async
 * error is its context's, and with several servers each one's devices
 * keep their own (with one server, g_errs[0] is the process's). */
static rgpu_err_state g_errs[RGPU_CLIENT_MAX_SERVERS];
static __thread cudaError_t tl_last_error;
static __thread int tl_call_waited;
/* A runtime call on this thread made its device's primary context current
 * (CUDA: the runtime binds the primary context on its first call). */
static __thread int tl_bound;
/* Inside a driver API call (which reuses runtime code but must not bind
 * contexts the way a runtime call does). */
static __thread int tl_driver_depth;
/* Per device: 1 + the reset epoch in which a runtime call last used it
 * (the primary context is active from the runtime's first use until
 * cudaDeviceReset). */
static uint32_t g_rt_used[RGPU_MAX_DEVICES];

static atomic_ullong g_calls;
static atomic_ullong g_calls_waited;
static uint64_t g_start_ns;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
/* The session of server 0: with one server, the session. */
static rgpu_client *g_client;
/* Several servers (RGPU_SERVER=URI,URI...; issue 19): each its own session,
 * its devices following the previous server's in the process's list.
 * Written once in connect_once (before g_client is published), then read
 * without locks. */
static rgpu_client *g_server_clients[RGPU_CLIENT_MAX_SERVERS];
static rgpu_devlist g_devlist;
static int g_nservers;
int rgpu_rt_several_servers;
static cudaError_t g_connect_error = cudaErrorNoDevice;
static rgpu_client_config g_cfg;
static int g_cfg_loaded;

int rgpu_rt_server_count(void) { return g_nservers; }
rgpu_client *rgpu_rt_server_client(int i) {
  return i >= 0 && i < g_nservers ? g_server_clients[i] : NULL;
}

int rgpu_rt_server_of_device(int dev) {
  if (!rgpu_rt_several_servers) return 0;
  int i = rgpu_devlist_server_of(&g_devlist, dev);
  /* No such device: the last server's session refuses it (its range
   * check), as one server's would. */
  return i >= 0 ? i : g_nservers - 1;
}

rgpu_client *rgpu_rt_client_of_device(int dev) {
  if (!rgpu_rt_several_servers) return g_client;
  return g_server_clients[rgpu_rt_server_of_device(dev)];
}

int rgpu_rt_all_lost(rgpu_client *c) {
  if (!rgpu_rt_several_servers) return rgpu_client_is_dead(c);
  for (int i = 0; i < g_nservers; i++)
    if (g_server_clients[i] && !rgpu_client_is_dead(g_server_clients[i])) return 0;
  return 1;
}

int rgpu_rt_server_index(const rgpu_client *c) {
  for (int i = 1; i < g_nservers; i++)
    if (g_server_clients[i] == c) return i;
  return 0;
}

rgpu_err_state *rgpu_rt_err_state(void) {
  return rgpu_rt_several_servers
             ? &g_errs[rgpu_rt_server_of_device(rgpu_rt_current_device())]
             : &g_errs[0];
}
rgpu_err_state *rgpu_rt_err_state_of(const rgpu_client *c) {
  return &g_errs[rgpu_rt_server_index(c)];
}
cudaError_t rgpu_rt_last_error_get(void) { return tl_last_error; }
void rgpu_rt_last_error_set(cudaError_t e) { tl_last_error = e; }
int rgpu_rt_thread_bound(void) { return tl_bound; }
void rgpu_rt_thread_set_bound(int bound) { tl_bound = bound; }
void rgpu_rt_driver_call_begin(void) { tl_driver_depth++; }
void rgpu_rt_driver_call_end(void) { tl_driver_depth--; }
void rgpu_rt_bind_device(int dev) {
  if (tl_driver_depth) return;
  tl_bound = 1;
  if (dev >= 0 && dev < RGPU_MAX_DEVICES)
    __atomic_store_n(&g_rt_used[dev], rgpu_rt_device_epoch(dev) + 1, __ATOMIC_RELEASE);
}
int rgpu_rt_device_used(int dev) {
  if (dev < 0 || dev >= RGPU_MAX_DEVICES) return 0;
  return __atomic_load_n(&g_rt_used[dev], __ATOMIC_ACQUIRE) == rgpu_rt_device_epoch(dev) + 1;
}

__attribute__((constructor)) static void rgpu_rt_init(void) {
  g_start_ns = rgpu_clock_ns();
  rgpu_log_set_component("client");
  for (int i = 0; i < RGPU_CLIENT_MAX_SERVERS; i++) rgpu_err_state_init(&g_errs[i]);
}

void rgpu_rt_count_call(void) {
  atomic_fetch_add_explicit(&g_calls, 1, memory_order_relaxed);
  tl_call_waited = 0;
}

/* RGPU_TRACE_ROUND_TRIPS=1: every round trip logs (info level) the
 * exported functions on the stack that waited, innermost first: the
 * facade's API call and the program's or framework's callers, so a
 * surprising round trip can be named without a debugger. */
static int g_trace_round_trips;

static void trace_round_trip(void) {
  void *pc[24];
  int n = backtrace(pc, 24);
  char line[512];
  size_t len = 0;
  int names = 0;
  const char *last = NULL;
  for (int i = 2; i < n && names < 6 && len < sizeof line - 64; i++) {
    Dl_info di;
    if (!dladdr(pc[i], &di) || !di.dli_sname || !strncmp(di.dli_sname, "rgpu_", 5)) continue;
    if (last && !strcmp(last, di.dli_sname)) continue;
    last = di.dli_sname;
    int k = snprintf(line + len, sizeof line - len, "%s%.80s", names ? " < " : "", di.dli_sname);
    if (k > 0) len += (size_t)k;
    names++;
  }
  line[len < sizeof line ? len : sizeof line - 1] = 0;
  RGPU_INFO("round trip: %s", names ? line : "(no exported caller)");
}

static void on_wait(void) {
  if (g_trace_round_trips) trace_round_trip();
  if (!tl_call_waited) {
    tl_call_waited = 1;
    atomic_fetch_add_explicit(&g_calls_waited, 1, memory_order_relaxed);
  }
}

static void enable_round_trip_trace(void) {
  const char *trace = getenv("RGPU_TRACE_ROUND_TRIPS");
  g_trace_round_trips = trace && *trace && strcmp(trace, "0");
}

/* DRIVER_INFO asked for in HELLO's round trip (rgpu_client_hello_fn), so
 * opening each of several servers costs one round trip, as opening one
 * does. */
typedef struct {
  uint64_t seq;
  rgpu_client_reply reply;
  rgpu_buf pay;
} driver_info_prefetch;

static size_t prefetch_driver_info(rgpu_client *c, void *ctx, uint64_t **seqs,
                                   rgpu_client_reply **rs) {
  driver_info_prefetch *p = ctx;
  p->reply = (rgpu_client_reply){.payload = &p->pay};
  if (rgpu_send_driver_info_locked(c, 1, NULL, &p->seq) != 0) return 0;
  *seqs = &p->seq;
  *rs = &p->reply;
  return 1;
}

/* Device count and driver version of a server: the prefetched answer, or
 * (none came) a round trip now. */
static int server_driver_info(rgpu_client *c, driver_info_prefetch *pre, int *count,
                              int *driver_version, char *err, size_t errlen) {
  rgpu_msg_driver_info_rep rep;
  rgpu_status rc;
  rgpu_client_reply *r = &pre->reply;
  if (r->done && r->status == 0) {
    rc = rgpu_msg_driver_info_rep_decode(pre->pay.data, pre->pay.len, &rep) == 0
             ? 0
             : 999 /* CUDA_ERROR_UNKNOWN: a malformed reply */;
  } else {
    rgpu_buf_free(&pre->pay);
    *r = (rgpu_client_reply){.payload = &pre->pay};
    rc = rgpu_call_driver_info(c, -1, 0, NULL, &rep, r);
  }
  if (rc == 0) {
    *count = (int)rep.device_count;
    *driver_version = rep.driver_version;
  } else {
    snprintf(err, errlen, "rgpu: server %s did not say how many GPUs it has (%s%s%s)",
             rgpu_client_uri(c), rgpu_cudart_error_name(rgpu_rt_from_call(rc)),
             r->msg[0] ? ": " : "", r->msg);
  }
  return rc == 0 ? 0 : -1;
}

static void close_servers(int n) {
  for (int i = 0; i < n; i++) {
    rgpu_client_close(g_server_clients[i]);
    g_server_clients[i] = NULL;
  }
}

/* RGPU_SERVER names several servers: a session with each, in order, and
 * their devices in one list.  Every server must answer: leaving one out
 * would renumber the devices of those after it, so the program would
 * silently use other GPUs than it was told. */
static int connect_several(void) {
  char uris[RGPU_CLIENT_MAX_SERVERS][RGPU_CLIENT_URI_MAX];
  char err[1024] = "";
  int n = rgpu_client_server_list_parse(g_cfg.server, uris, RGPU_CLIENT_MAX_SERVERS, err,
                                        sizeof err);
  if (n < 0) {
    fprintf(stderr, "rgpu: %s\n", err);
    return -1;
  }
  int counts[RGPU_CLIENT_MAX_SERVERS], driver_version = 0;
  for (int i = 0; i < n; i++) {
    rgpu_client_config one = g_cfg;
    memcpy(one.server, uris[i], sizeof one.server); /* both RGPU_CLIENT_URI_MAX */
    one.nservers = 1;
    rgpu_client *c = NULL;
    int version = 0;
    driver_info_prefetch pre = {0};
    rgpu_buf_init(&pre.pay);
    int failed = rgpu_client_connect_with(&one, prefetch_driver_info, &pre, &c, err, sizeof err) ||
                 server_driver_info(c, &pre, &counts[i], &version, err, sizeof err);
    rgpu_buf_free(&pre.pay);
    if (failed) {
      fprintf(stderr, "%s (server %d of %d in RGPU_SERVER; no device of any is used)\n", err,
              i + 1, n);
      if (c) rgpu_client_close(c);
      close_servers(i);
      return -1;
    }
    g_server_clients[i] = c;
    /* The oldest driver bounds what the program may rely on. */
    if (i == 0 || version < driver_version) driver_version = version;
  }
  int total = rgpu_devlist_build(&g_devlist, counts, n, RGPU_MAX_DEVICES);
  for (int i = 0; i < n; i++) {
    rgpu_client_set_device_range(g_server_clients[i], g_devlist.first[i], g_devlist.count[i],
                                 rgpu_rt_client_of_device);
    rgpu_client_set_wait_hook(g_server_clients[i], on_wait);
    RGPU_INFO("server %d of %d: %s, devices %d..%d", i + 1, n, uris[i], g_devlist.first[i],
              g_devlist.first[i] + g_devlist.count[i] - 1);
  }
  g_nservers = n;
  rgpu_rt_several_servers = 1;
  rgpu_rt_devices_preset(total, driver_version);
  return 0;
}

static void connect_once(void) {
  char err[1024] = "";
  if (rgpu_client_config_load(&g_cfg, NULL, NULL, err, sizeof err)) {
    fprintf(stderr, "rgpu: %s\n", err);
    return;
  }
  g_cfg_loaded = 1;
  if (!g_cfg.server[0]) {
    fprintf(stderr, "rgpu: no GPU server configured: set RGPU_SERVER=tcp://HOST:PORT or run "
                    "the program with `rgpu run`\n");
    return;
  }
  enable_round_trip_trace();
  if (g_cfg.nservers > 1) {
    if (connect_several()) return;
    g_client = g_server_clients[0];
    g_connect_error = cudaSuccess;
    return;
  }
  rgpu_client *c = NULL;
  if (rgpu_client_connect_with(&g_cfg, rgpu_rt_device_prefetch, NULL, &c, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return;
  }
  rgpu_client_set_wait_hook(c, on_wait);
  g_server_clients[0] = c;
  g_nservers = 1;
  g_client = c;
  g_connect_error = cudaSuccess;
}

rgpu_client *rgpu_rt_client_peek(void) { return g_client; }

rgpu_client *rgpu_rt_client(cudaError_t *err) {
  pthread_once(&g_once, connect_once);
  if (!g_client && err) *err = g_connect_error;
  return g_client;
}

cudaError_t rgpu_rt_ret(cudaError_t e) {
  if (e != cudaSuccess) {
    tl_last_error = e;
    rgpu_rt_logs_deliver(); /* CUDA's error log callbacks (rgpu_cudart_logs.c) */
  }
  return e;
}

cudaError_t rgpu_rt_enter(rgpu_client **out) {
  rgpu_rt_count_call();
  /* CUDA forbids CUDA calls in host callbacks; here one could deadlock on
   * the stream that waits for the callback, so it is refused. */
  if (rgpu_rt_in_host_callback()) {
    *out = NULL;
    return rgpu_rt_ret(cudaErrorNotPermitted);
  }
  cudaError_t err = cudaErrorNoDevice;
  rgpu_client *c = rgpu_rt_client(&err);
  if (c && rgpu_rt_several_servers) c = rgpu_rt_client_of_device(rgpu_rt_current_device());
  *out = c;
  if (!c) return rgpu_rt_ret(err);
  if (rgpu_client_is_dead(c)) return rgpu_rt_ret(cudaErrorDevicesUnavailable);
  rgpu_rt_bind_device(rgpu_rt_current_device());
  cudaError_t s = rgpu_err_state_sticky(rgpu_rt_err_state_of(c));
  if (s != cudaSuccess) return rgpu_rt_ret(s);
  return cudaSuccess;
}

cudaError_t rgpu_rt_from_call(int rc) {
  if (rc < 0) {
    /* With several servers a lost one fails only its devices: its dead
     * session answers every later call on them (rgpu_rt_enter, the
     * client's fast failure); the others' error states stay clean. */
    if (!rgpu_rt_several_servers) rgpu_err_state_async(&g_errs[0], cudaErrorDevicesUnavailable);
    return cudaErrorDevicesUnavailable;
  }
  return rgpu_cudart_from_cu(rc);
}

void rgpu_rt_collect_async(rgpu_client *c) {
  uint32_t st;
  uint64_t seq;
  char msg[256];
  while (rgpu_client_take_async_error(c, &st, &seq, msg, sizeof msg)) {
    cudaError_t e = rgpu_cudart_from_cu((int)st);
    RGPU_INFO("asynchronous error %s from request %llu%s%s", rgpu_cudart_error_name(e),
              (unsigned long long)seq, msg[0] ? ": " : "", msg);
    rgpu_err_state_async(rgpu_rt_err_state_of(c), e);
  }
}

cudaError_t rgpu_rt_sync_ret(rgpu_client *c, int rc) {
  cudaError_t e = rgpu_rt_from_call(rc);
  if (c) rgpu_rt_collect_async(c);
  return rgpu_rt_ret(rgpu_err_state_sync(c ? rgpu_rt_err_state_of(c) : &g_errs[0], e));
}

/* ---- exit: flush, goodbye, stats ---------------------------------------- */

/* The counters of this process's session as the RGPU_STATS object.  The
 * strings land in the caller's buffers, which must outlive the use of *s. */
static void rgpu_rt_stats_fill(rgpu_client *c, rgpu_client_stats *s, char *transport,
                               size_t tcap, char *server, size_t scap) {
  rgpu_client_counters ctr = {0};
  snprintf(transport, tcap, "none");
  server[0] = 0;
  if (c) {
    rgpu_client_get_counters(c, &ctr);
    snprintf(transport, tcap, "%s", rgpu_client_transport(c));
    snprintf(server, scap, "%s", rgpu_client_uri(c));
  }
  /* Several servers: the counters are the sums over their sessions, the
   * server is RGPU_SERVER's list (docs/architecture.md, issue 19). */
  for (int i = 1; c && rgpu_rt_several_servers && i < g_nservers; i++) {
    rgpu_client_counters more = {0};
    if (!g_server_clients[i]) continue;
    rgpu_client_get_counters(g_server_clients[i], &more);
    ctr.round_trips += more.round_trips;
    ctr.bytes_sent += more.bytes_sent;
    ctr.bytes_received += more.bytes_received;
    ctr.frames_sent += more.frames_sent;
    ctr.flushes += more.flushes;
    ctr.flow_waits += more.flow_waits;
    ctr.wait_ns += more.wait_ns;
    ctr.resumes += more.resumes;
    ctr.quic_direct_moves += more.quic_direct_moves;
    if (strcmp(transport, rgpu_client_transport(g_server_clients[i])))
      snprintf(transport, tcap, "mixed");
  }
  if (c && rgpu_rt_several_servers) snprintf(server, scap, "%s", g_cfg.server);
  unsigned long long calls = atomic_load(&g_calls);
  unsigned long long waited = atomic_load(&g_calls_waited);
  *s = (rgpu_client_stats){
      .calls = calls,
      .async_calls = calls > waited ? calls - waited : 0,
      .round_trips = ctr.round_trips,
      .bytes_sent = ctr.bytes_sent,
      .bytes_received = ctr.bytes_received,
      .wall_s = rgpu_clock_elapsed_s(g_start_ns),
      .transport = transport,
      .server = server[0] ? server : g_cfg.server,
      .sync_every_call = g_cfg.sync_every_call,
      .frames_sent = ctr.frames_sent,
      .flushes = ctr.flushes,
      .flow_waits = ctr.flow_waits,
      .wait_s = (double)ctr.wait_ns / 1e9,
      .resumes = ctr.resumes,
      .quic_direct_moves = ctr.quic_direct_moves,
      .connected = c != NULL,
  };
  rgpu_rt_image_counters(&s->images_sent, &s->image_bytes_sent, &s->image_cache_hits);
}

/* rgpu's one public extension: the RGPU_STATS object now, so a program (or
 * a script through ctypes, e.g. tests/torch/) can count the round trips and
 * bytes of a stretch of its own work.  Natively the symbol does not exist,
 * which is how a caller tells the two apart.  Returns the bytes written
 * (without the NUL) or -1 when cap is too small. */
RGPU_API int rgpu_stats_json(char *out, size_t cap) {
  rgpu_client_stats s;
  char transport[16], server[1024];
  rgpu_rt_stats_fill(g_client, &s, transport, sizeof transport, server, sizeof server);
  return rgpu_client_stats_json(&s, out, cap);
}

/* A destructor runs after the program's atexit handlers (including the
 * __cudaUnregisterFatBinary ones nvcc registers), so every call the
 * program made is counted and its queued work reaches the server. */
__attribute__((destructor)) static void rgpu_rt_fini(void) {
  rgpu_client *c = g_client;
  rgpu_rt_callbacks_stop();
  rgpu_client_stats s;
  char transport[16], server[1024];
  if (!g_cfg_loaded) {
    char err[256];
    if (rgpu_client_config_load(&g_cfg, NULL, NULL, err, sizeof err) == 0) g_cfg_loaded = 1;
  }
  /* Counted before the close: the goodbye is not the program's work. */
  rgpu_rt_stats_fill(c, &s, transport, sizeof transport, server, sizeof server);
  if (c) {
    g_client = NULL;
    /* Every session says goodbye (the others' queued work must run too). */
    int n = rgpu_rt_several_servers ? g_nservers : 1;
    for (int i = 0; i < n; i++) {
      rgpu_client *ci = i == 0 ? c : g_server_clients[i];
      g_server_clients[i] = NULL;
      if (ci) rgpu_client_close(ci);
    }
  }
  if (g_cfg_loaded && g_cfg.stats_path[0]) {
    if (rgpu_client_stats_write(g_cfg.stats_path, &s))
      fprintf(stderr, "rgpu: cannot write RGPU_STATS file %s: %m\n", g_cfg.stats_path);
  }
}

/* ---- error queries ------------------------------------------------------ */

/* The pending async error or unreported sticky error of the calling
 * thread's current device's server first, then of the other servers (an
 * error of any device the program used is reported, as CUDA reports the
 * errors of every context the thread used). */
static cudaError_t poll_errors(int take) {
  if (!g_client || rgpu_rt_in_host_callback()) return cudaSuccess;
  int n = rgpu_rt_several_servers ? g_nservers : 1;
  int mine = rgpu_rt_several_servers ? rgpu_rt_server_of_device(rgpu_rt_current_device()) : 0;
  for (int k = 0; k < n; k++) {
    int i = (mine + k) % n;
    rgpu_client *c = g_server_clients[i];
    if (!c) continue;
    rgpu_client_poll_events(c);
    rgpu_rt_collect_async(c);
    cudaError_t e = rgpu_err_state_poll(&g_errs[i], take);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

RGPU_API cudaError_t cudaGetLastError(void) {
  rgpu_rt_count_call();
  cudaError_t e = tl_last_error;
  tl_last_error = cudaSuccess;
  if (e == cudaSuccess) e = poll_errors(1);
  return e;
}

RGPU_API cudaError_t cudaPeekAtLastError(void) {
  rgpu_rt_count_call();
  cudaError_t e = tl_last_error;
  if (e == cudaSuccess) e = poll_errors(0);
  return e;
}

RGPU_API const char *cudaGetErrorString(cudaError_t error) {
  rgpu_rt_count_call();
  return rgpu_cudart_error_text((int)error);
}

RGPU_API const char *cudaGetErrorName(cudaError_t error) {
  rgpu_rt_count_call();
  return rgpu_cudart_error_name((int)error);
}

int rgpu_cudart_report_unsupported(const char *name, int *logged_once) {
  rgpu_rt_count_call();
  if (!__atomic_exchange_n(logged_once, 1, __ATOMIC_RELAXED))
    RGPU_WARN("%s is not supported yet; it returns cudaErrorNotSupported", name);
  tl_last_error = cudaErrorNotSupported;
  return cudaErrorNotSupported;
}

RGPU_API cudaError_t cudaRuntimeGetVersion(int *runtimeVersion) {
  rgpu_rt_count_call();
  if (!runtimeVersion) return rgpu_rt_ret(cudaErrorInvalidValue);
  *runtimeVersion = CUDART_VERSION;
  return cudaSuccess;
}
