/* Device management: count, current device, properties and attributes,
 * synchronize/reset, flags and limits, versions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_cudart.h"
#include "rgpu_cudart_op.h"
#include "rgpu_cudart_graph.h"
#include "rgpu_device_query.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"

/* g_dev_lock guards g_count, g_driver_version, g_devs (the pointers and a
 * device until it is valid; a valid one is read without it) and
 * g_dev_fetching.  It is never held across a round trip: the thread that
 * fetches (DRIVER_INFO, DEVICE_PROPS) marks g_dev_fetching and drops it,
 * and other threads that need a fetch wait on g_dev_fetch_done, so every
 * answer is still asked for once. */
static rgpu_mutex g_dev_lock = RGPU_MUTEX_INITIALIZER;
static pthread_cond_t g_dev_fetch_done = PTHREAD_COND_INITIALIZER;
static int g_dev_fetching;
static int g_count = -1;
static int g_driver_version;
static rgpu_rt_device *g_devs[RGPU_MAX_DEVICES];
static uint32_t g_epoch[RGPU_MAX_DEVICES];
static __thread int tl_device;
/* The thread chose tl_device (cudaSetDevice, a driver context); until then
 * its device is the implicit one. */
static __thread int tl_device_chosen;
/* The device of threads that chose none: 0, or the first usable device of
 * cudaSetValidDevices' list. */
static int g_implicit_device;

int rgpu_rt_current_device(void) {
  return tl_device_chosen ? tl_device : __atomic_load_n(&g_implicit_device, __ATOMIC_RELAXED);
}
void rgpu_rt_set_current_device(int dev) {
  tl_device = dev;
  tl_device_chosen = 1;
}
uint32_t rgpu_rt_device_epoch(int dev) {
  return (dev >= 0 && dev < RGPU_MAX_DEVICES) ? __atomic_load_n(&g_epoch[dev], __ATOMIC_ACQUIRE)
                                              : 0;
}

/* The generated NotSupported stubs (rgpu_cudart_stubs.c, linked into the
 * library with this file). */
extern const char *const rgpu_cudart_stubbed_names[];

static int runtime_fn_is_stubbed(const char *fn, void *ctx) {
  (void)ctx;
  for (const char *const *s = rgpu_cudart_stubbed_names; *s; s++)
    if (strcmp(*s, fn) == 0) return 1;
  return 0;
}

static void fill_device(rgpu_rt_device *d, const rgpu_msg_device_props_rep *p) {
  d->nattrs = p->attrs.count > RGPU_MAX_ATTRS ? RGPU_MAX_ATTRS : p->attrs.count;
  for (uint32_t i = 0; i < d->nattrs; i++) d->attrs[i] = rgpu_array_i32(&p->attrs, i);
  /* Before the struct is built, so cudaGetDeviceProperties and
   * cudaDeviceGetAttribute give the same answer. */
  rgpu_cudart_mask_undelivered(d->attrs, d->nattrs, runtime_fn_is_stubbed, NULL);
  rgpu_cudart_build_props(&d->prop, p->name.data, p->name.len, p->uuid.data, p->uuid.len,
                          p->total_mem, d->attrs, d->nattrs);
  d->valid = 1;
}

/* DRIVER_INFO once: device count and driver version.  Device 0's
 * properties are asked for in the same write: nearly every program needs
 * them before its first launch (configuration checks), and on a 100 ms link
 * one round trip less at start-up is worth more than one small reply.
 * The caller holds g_dev_lock; the round trip is made with it dropped
 * (begin_fetch/end_fetch). */
/* The replies rgpu_rt_device_prefetch asked for with HELLO, read by
 * rgpu_client_connect_with before the client is published (so no lock);
 * the first fetch_driver_info takes them. */
static uint64_t g_pre_seqs[2];
static rgpu_client_reply g_pre_rs[2];
static rgpu_buf g_pre_pay[2];
static size_t g_pre_n;

size_t rgpu_rt_device_prefetch(rgpu_client *c, void *ctx, uint64_t **seqs, rgpu_client_reply **rs) {
  (void)ctx;
  g_pre_n = 0;
  memset(g_pre_rs, 0, sizeof g_pre_rs);
  for (int i = 0; i < 2; i++) {
    rgpu_buf_free(&g_pre_pay[i]);
    g_pre_rs[i].payload = &g_pre_pay[i];
  }
  rgpu_msg_device_props_req props0 = {.device = 0};
  if (rgpu_send_driver_info_locked(c, 1, NULL, &g_pre_seqs[0]) == 0) {
    g_pre_n = 1;
    if (rgpu_send_device_props_locked(c, 1, &props0, &g_pre_seqs[1]) == 0) g_pre_n = 2;
  }
  *seqs = g_pre_seqs;
  *rs = g_pre_rs;
  return g_pre_n;
}

/* With g_dev_lock held: waits while another thread fetches.  Returns 1
 * when `fetched` says the answer arrived meanwhile (nothing to do), else 0
 * with this thread marked as the fetcher and the lock dropped. */
static int begin_fetch(int (*fetched)(int), int arg) {
  assert(rgpu_mutex_held(&g_dev_lock));
  for (;;) {
    if (fetched(arg)) return 1;
    if (!g_dev_fetching) break;
    rgpu_mutex_cond_wait(&g_dev_fetch_done, &g_dev_lock);
  }
  g_dev_fetching = 1;
  rgpu_mutex_unlock(&g_dev_lock);
  return 0;
}

/* After the round trip: takes g_dev_lock back and lets waiters look. */
static void end_fetch(void) {
  rgpu_mutex_lock(&g_dev_lock);
  g_dev_fetching = 0;
  pthread_cond_broadcast(&g_dev_fetch_done);
}

static int driver_info_known(int unused) {
  (void)unused;
  return g_count >= 0;
}

static cudaError_t fetch_driver_info(rgpu_client *c) {
  if (begin_fetch(driver_info_known, 0)) return cudaSuccess;
  rgpu_buf pay0, pay1;
  rgpu_buf_init(&pay0);
  rgpu_buf_init(&pay1);
  rgpu_msg_device_props_req props0 = {.device = 0};
  rgpu_client_reply rs[2];
  memset(rs, 0, sizeof rs);
  rs[0].payload = &pay0;
  rs[1].payload = &pay1;
  uint64_t seqs[2] = {0, 0};
  rgpu_status rc = 0;
  int props_sent = 0;
  if (g_pre_n && g_pre_rs[0].done) {
    /* Read with HELLO's reply: no round trip of its own. */
    props_sent = g_pre_n == 2 && g_pre_rs[1].done;
    for (int i = 0; i < 2; i++) {
      rs[i] = g_pre_rs[i];
      rgpu_buf_free(i ? &pay1 : &pay0);
      *(i ? &pay1 : &pay0) = g_pre_pay[i];
      rgpu_buf_init(&g_pre_pay[i]);
      rs[i].payload = i ? &pay1 : &pay0;
    }
    g_pre_n = 0;
    goto decode;
  }
  assert(rgpu_mutex_held_count() == 0); /* a round trip: no cudart lock held */
  rgpu_client_lock(c);
  uint64_t first = rgpu_client_next_seq_locked(c);
  rc = rgpu_send_driver_info_locked(c, 1, NULL, &seqs[0]);
  props_sent = rc == 0 && rgpu_send_device_props_locked(c, 1, &props0, &seqs[1]) == 0;
  size_t nwait = props_sent ? 2 : 1;
  for (size_t got = 0; rc == 0 && got < nwait; got++) {
    size_t which = 0;
    rc = rgpu_client_wait_any_locked(c, seqs, rs, nwait, first, &which);
    rs[0].continued = 1; /* the second reply is the same round trip */
  }
  rgpu_client_unlock(c);
decode:
  end_fetch();
  if (rc == 0) rc = (rgpu_status)rs[0].status;
  cudaError_t e = rgpu_rt_from_call(rc);
  if (e == cudaSuccess) {
    rgpu_msg_driver_info_rep di;
    if (rgpu_msg_driver_info_rep_decode(pay0.data, pay0.len, &di) == 0) {
      g_driver_version = di.driver_version;
      g_count = di.device_count > RGPU_MAX_DEVICES ? RGPU_MAX_DEVICES : (int)di.device_count;
    } else {
      RGPU_ERROR("malformed DRIVER_INFO reply from the server");
      e = cudaErrorUnknown;
    }
  }
  /* Device 0's answer is a bonus: a failure (no device) is left for
   * rgpu_rt_device_get to ask again and report. */
  rgpu_msg_device_props_rep props;
  if (e == cudaSuccess && props_sent && rs[1].done && rs[1].status == 0 && g_count > 0) {
    if (rgpu_msg_device_props_rep_decode(pay1.data, pay1.len, &props) != 0) {
      RGPU_ERROR("malformed DEVICE_PROPS reply from the server");
    } else {
      if (!g_devs[0]) g_devs[0] = calloc(1, sizeof *g_devs[0]);
      if (g_devs[0]) fill_device(g_devs[0], &props);
    }
  }
  rgpu_buf_free(&pay0);
  rgpu_buf_free(&pay1);
  return e;
}

void rgpu_rt_devices_preset(int count, int driver_version) {
  rgpu_mutex_lock(&g_dev_lock);
  g_count = count;
  g_driver_version = driver_version;
  rgpu_mutex_unlock(&g_dev_lock);
}

cudaError_t rgpu_rt_device_count(rgpu_client *c, int *count) {
  rgpu_mutex_lock(&g_dev_lock);
  cudaError_t e = fetch_driver_info(c);
  if (e == cudaSuccess) *count = g_count;
  rgpu_mutex_unlock(&g_dev_lock);
  return e;
}

static int device_known(int dev) { return g_devs[dev] && g_devs[dev]->valid; }

cudaError_t rgpu_rt_device_get(rgpu_client *c, int dev, rgpu_rt_device **out) {
  rgpu_mutex_lock(&g_dev_lock);
  cudaError_t e = fetch_driver_info(c);
  if (e == cudaSuccess && (dev < 0 || dev >= g_count)) e = cudaErrorInvalidDevice;
  if (e == cudaSuccess && !g_devs[dev]) {
    rgpu_rt_device *d = calloc(1, sizeof *d);
    if (!d) e = cudaErrorMemoryAllocation;
    else g_devs[dev] = d;
  }
  if (e == cudaSuccess && !begin_fetch(device_known, dev)) {
    /* Filled into a buffer of our own while unlocked: g_devs[dev] is read
     * by others as soon as it is valid. */
    rgpu_rt_device *d = calloc(1, sizeof *d);
    rgpu_buf pay;
    rgpu_buf_init(&pay);
    rgpu_client *owner = rgpu_rt_route(c, dev);
    rgpu_msg_device_props_req req = {.device = rgpu_rt_local_device(owner, dev)};
    rgpu_msg_device_props_rep rep;
    rgpu_client_reply r = {.payload = &pay}; /* rep points into pay */
    assert(rgpu_mutex_held_count() == 0); /* a round trip: no cudart lock held */
    rgpu_status rc = d ? rgpu_call_device_props(owner, -1, 0, &req, &rep, &r) : 0;
    e = d ? rgpu_rt_from_call(rc) : cudaErrorMemoryAllocation;
    if (e == cudaSuccess) fill_device(d, &rep);
    rgpu_buf_free(&pay);
    end_fetch();
    if (e == cudaSuccess) {
      /* Keeps what cudaSetDeviceFlags stored meanwhile (flags, epoch are not
       * part of the reply). */
      d->flags = g_devs[dev]->flags;
      d->epoch = g_devs[dev]->epoch;
      *g_devs[dev] = *d;
    }
    free(d);
  }
  if (e == cudaSuccess) *out = g_devs[dev];
  rgpu_mutex_unlock(&g_dev_lock);
  return e;
}

RGPU_API cudaError_t cudaGetDeviceCount(int *count) {
  rgpu_rt_count_call();
  if (!count) return rgpu_rt_ret(cudaErrorInvalidValue);
  *count = 0;
  cudaError_t e = cudaErrorNoDevice;
  rgpu_client *c = rgpu_rt_client(&e);
  if (!c) return rgpu_rt_ret(e);
  if (rgpu_rt_all_lost(c)) return rgpu_rt_ret(cudaErrorNoDevice);
  int n = 0;
  e = rgpu_rt_device_count(c, &n);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  *count = n;
  if (n == 0) return rgpu_rt_ret(cudaErrorNoDevice);
  return cudaSuccess;
}

RGPU_API cudaError_t cudaSetDevice(int device) {
  rgpu_client *c;
  cudaError_t e;
  if (rgpu_rt_client_peek() && rgpu_rt_several_servers && !rgpu_rt_in_host_callback()) {
    /* Several servers: switching is no work for any server, so a lost
     * server or a sticky error of the current device's must not keep the
     * thread from moving to a device of another one. */
    rgpu_rt_count_call();
    c = rgpu_rt_client_peek();
  } else {
    e = rgpu_rt_enter(&c);
    if (e != cudaSuccess) return e;
  }
  int n = 0;
  e = rgpu_rt_device_count(c, &n);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  if (device < 0 || device >= n) return rgpu_rt_ret(cudaErrorInvalidDevice);
  rgpu_rt_set_current_device(device);
  rgpu_rt_bind_device(device); /* CUDA 12+: initializes the device's primary context */
  return cudaSuccess;
}

RGPU_API cudaError_t cudaGetDevice(int *device) {
  rgpu_rt_count_call();
  if (!device) return rgpu_rt_ret(cudaErrorInvalidValue);
  *device = rgpu_rt_current_device();
  return cudaSuccess;
}

RGPU_API cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!prop) return rgpu_rt_ret(cudaErrorInvalidValue);
  rgpu_rt_device *d;
  e = rgpu_rt_device_get(c, device, &d);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  *prop = d->prop;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!value) return rgpu_rt_ret(cudaErrorInvalidValue);
  rgpu_rt_device *d;
  e = rgpu_rt_device_get(c, device, &d);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  if ((int)attr <= 0 || (uint32_t)attr >= d->nattrs || (int)attr >= (int)cudaDevAttrMax)
    return rgpu_rt_ret(cudaErrorInvalidValue);
  *value = d->attrs[attr];
  return cudaSuccess;
}

RGPU_API cudaError_t cudaDeviceSynchronize(void) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if ((e = rgpu_rt_graph_unsafe_call()) != cudaSuccess) return rgpu_rt_ret(e);
  rgpu_status rc = rgpu_rt_sync_call(c, rgpu_rt_current_device(), RGPU_RT_SYNC_DEVICE, 0,
                                     RGPU_CLIENT_ALL_STREAMS);
  return rgpu_rt_sync_ret(c, rc);
}

RGPU_API cudaError_t cudaDeviceReset(void) {
  rgpu_rt_count_call();
  cudaError_t e = cudaErrorNoDevice;
  rgpu_client *c = rgpu_rt_client(&e);
  if (!c) return rgpu_rt_ret(e);
  int dev = rgpu_rt_current_device();
  c = rgpu_rt_route(c, dev);
  if (rgpu_client_is_dead(c)) return rgpu_rt_ret(cudaErrorDevicesUnavailable);
  rgpu_msg_device_reset_req req = {.device = rgpu_rt_local_device(c, dev)};
  assert(rgpu_mutex_held_count() == 0); /* a round trip: no cudart lock held */
  rgpu_client_lock(c);
  /* Copies still on their way land before the context they came from goes. */
  rgpu_client_drain_locked(c, RGPU_CLIENT_ALL_STREAMS, UINT64_MAX);
  uint64_t seq;
  uint64_t first = rgpu_client_next_seq_locked(c);
  rgpu_status rc = rgpu_send_device_reset_locked(c, 1, &req, &seq);
  rgpu_client_reply r = {0};
  if (rc == 0) rc = rgpu_client_wait_locked(c, seq, first, &r);
  if (rc == 0) rc = (rgpu_status)r.status;
  /* The server's context of this device is new: send CTX_SET_DEVICE again
   * before the next request. */
  rgpu_client_unbind_device_locked(c);
  rgpu_client_unlock(c);
  /* Whatever the reset answered, everything the old context had is gone:
   * allocations, modules, streams and any error it had latched. */
  while (rgpu_client_take_async_error(c, NULL, NULL, NULL, 0)) {
  }
  rgpu_err_state_reset(rgpu_rt_err_state_of(c));
  if (dev >= 0 && dev < RGPU_MAX_DEVICES) __atomic_add_fetch(&g_epoch[dev], 1, __ATOMIC_RELEASE);
  rgpu_range_remove_device(rgpu_rt_device_ranges(), dev, 0);
  rgpu_rt_arena_forget_device(dev);
  rgpu_rt_limits_forget_device(dev);
  rgpu_rt_graphmem_forget_device(dev);
  rgpu_rt_managed_forget_device(dev);
  rgpu_rt_arrays_forget_device(dev);
  rgpu_rt_modules_forget_device(dev);
  rgpu_rt_host_pending_forget();
  return rgpu_rt_ret(rgpu_rt_from_call(rc));
}

RGPU_API cudaError_t cudaSetDeviceFlags(unsigned int flags) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  const unsigned known = cudaDeviceScheduleMask | cudaDeviceMapHost | cudaDeviceLmemResizeToMax |
                         cudaDeviceSyncMemops;
  if (flags & ~known) return rgpu_rt_ret(cudaErrorInvalidValue);
  if ((flags & cudaDeviceScheduleMask) == (cudaDeviceScheduleSpin | cudaDeviceScheduleYield))
    return rgpu_rt_ret(cudaErrorInvalidValue);
  rgpu_rt_device *d;
  e = rgpu_rt_device_get(c, rgpu_rt_current_device(), &d);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  /* Scheduling flags describe how the host thread waits: blocking sync
   * asks that it sleep, the others allow the short poll the client makes
   * before a read blocks (rgpu_client_set_spin).  Kept for
   * cudaGetDeviceFlags. */
  d->flags = flags;
  rgpu_client_set_spin(c, (flags & cudaDeviceScheduleMask) != cudaDeviceScheduleBlockingSync);
  return cudaSuccess;
}

/* Initializes a device without making it current: rgpu's devices need no
 * work for that (the server makes the primary context on first use), so
 * this checks the device and applies deviceFlags when flags says so, as
 * cudaSetDeviceFlags would on that device. */
RGPU_API cudaError_t cudaInitDevice(int device, unsigned int deviceFlags, unsigned int flags) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (flags & ~(unsigned)cudaInitDeviceFlagsAreValid) return rgpu_rt_ret(cudaErrorInvalidValue);
  rgpu_rt_device *d;
  e = rgpu_rt_device_get(c, device, &d);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  if (!(flags & cudaInitDeviceFlagsAreValid)) return cudaSuccess;
  int cur = tl_device, chosen = tl_device_chosen;
  rgpu_rt_set_current_device(device);
  e = cudaSetDeviceFlags(deviceFlags);
  tl_device = cur;
  tl_device_chosen = chosen;
  return e;
}

RGPU_API cudaError_t cudaGetDeviceFlags(unsigned int *flags) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!flags) return rgpu_rt_ret(cudaErrorInvalidValue);
  rgpu_rt_device *d;
  e = rgpu_rt_device_get(c, rgpu_rt_current_device(), &d);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  /* NVIDIA's runtime reports cudaDeviceMapHost as always set since 11.x. */
  *flags = d->flags | cudaDeviceMapHost;
  return cudaSuccess;
}

/* Context limits live in the server's driver (CTX_LIMIT): a set is a round
 * trip, and so is the first read of a limit on a device; the answers are
 * kept per device until a reset (rgpu_rt_limits_forget_device). */
static rgpu_mutex g_limits_lock = RGPU_MUTEX_INITIALIZER;
static size_t g_limits[RGPU_MAX_DEVICES][16];
static unsigned char g_limit_known[RGPU_MAX_DEVICES][16];

static void limit_keep(int dev, unsigned limit, size_t v) {
  if (dev < 0 || dev >= RGPU_MAX_DEVICES || limit >= 16) return;
  rgpu_mutex_lock(&g_limits_lock);
  g_limits[dev][limit] = v;
  g_limit_known[dev][limit] = 1;
  rgpu_mutex_unlock(&g_limits_lock);
}

void rgpu_rt_limits_forget_device(int dev) {
  if (dev < 0 || dev >= RGPU_MAX_DEVICES) return;
  rgpu_mutex_lock(&g_limits_lock);
  memset(g_limit_known[dev], 0, sizeof g_limit_known[dev]);
  rgpu_mutex_unlock(&g_limits_lock);
}

static cudaError_t limit_call(enum cudaLimit limit, int set, size_t value, size_t *out) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  int dev = rgpu_rt_current_device();
  if (!set && dev >= 0 && dev < RGPU_MAX_DEVICES && (unsigned)limit < 16) {
    rgpu_mutex_lock(&g_limits_lock);
    int known = g_limit_known[dev][limit];
    size_t v = g_limits[dev][limit];
    rgpu_mutex_unlock(&g_limits_lock);
    if (known) {
      *out = v;
      return cudaSuccess;
    }
  }
  rgpu_msg_ctx_limit_req q = {.limit = (uint32_t)limit, .set = (uint32_t)set, .value = value};
  rgpu_msg_ctx_limit_rep rep;
  rgpu_status rc = rgpu_call_ctx_limit(c, dev, 0, &q, &rep, NULL);
  if (rc) return rgpu_rt_ret(rgpu_rt_from_call(rc));
  limit_keep(dev, (unsigned)limit, (size_t)rep.value);
  if (out) *out = (size_t)rep.value;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaDeviceGetLimit(size_t *pValue, enum cudaLimit limit) {
  if (!pValue) {
    rgpu_rt_count_call();
    return rgpu_rt_ret(cudaErrorInvalidValue);
  }
  return limit_call(limit, 0, 0, pValue);
}

RGPU_API cudaError_t cudaDeviceSetLimit(enum cudaLimit limit, size_t value) {
  return limit_call(limit, 1, value, NULL);
}

RGPU_API cudaError_t cudaChooseDevice(int *device, const struct cudaDeviceProp *prop) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!device || !prop) return rgpu_rt_ret(cudaErrorInvalidValue);
  int n = 0;
  e = rgpu_rt_device_count(c, &n);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  if (n == 0) return rgpu_rt_ret(cudaErrorNoDevice);
  /* Closest compute capability at or above the requested one, else 0. */
  int best = 0, best_score = -1;
  for (int i = 0; i < n; i++) {
    rgpu_rt_device *d;
    if (rgpu_rt_device_get(c, i, &d) != cudaSuccess) continue;
    int score = 0;
    if (d->prop.major > prop->major ||
        (d->prop.major == prop->major && d->prop.minor >= prop->minor))
      score += 2;
    if (prop->totalGlobalMem && d->prop.totalGlobalMem >= prop->totalGlobalMem) score += 1;
    if (score > best_score) {
      best_score = score;
      best = i;
    }
  }
  *device = best;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!pciBusId || len <= 0) return rgpu_rt_ret(cudaErrorInvalidValue);
  rgpu_rt_device *d;
  e = rgpu_rt_device_get(c, device, &d);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  snprintf(pciBusId, (size_t)len, "%04x:%02x:%02x.0", (unsigned)d->prop.pciDomainID,
           (unsigned)d->prop.pciBusID, (unsigned)d->prop.pciDeviceID);
  return cudaSuccess;
}

/* The device whose PCI id cudaDeviceGetPCIBusId would print: the domain is
 * optional and hex digits may be of either case, as in NVIDIA's parser
 * ("0000:1b:00.0", "1b:00.0"). */
RGPU_API cudaError_t cudaDeviceGetByPCIBusId(int *device, const char *pciBusId) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!device || !pciBusId) return rgpu_rt_ret(cudaErrorInvalidValue);
  unsigned dom = 0, bus = 0, dv = 0, fn = 0;
  char tail;
  if (sscanf(pciBusId, "%x:%x:%x.%x%c", &dom, &bus, &dv, &fn, &tail) != 4) {
    dom = 0;
    if (sscanf(pciBusId, "%x:%x.%x%c", &bus, &dv, &fn, &tail) != 3)
      return rgpu_rt_ret(cudaErrorInvalidValue);
  }
  int n = 0;
  e = rgpu_rt_device_count(c, &n);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  for (int i = 0; i < n; i++) {
    rgpu_rt_device *d;
    if (rgpu_rt_device_get(c, i, &d) != cudaSuccess) continue;
    if ((unsigned)d->prop.pciDomainID == dom && (unsigned)d->prop.pciBusID == bus &&
        (unsigned)d->prop.pciDeviceID == dv && fn == 0) {
      *device = i;
      return cudaSuccess;
    }
  }
  return rgpu_rt_ret(cudaErrorInvalidDevice);
}

/* Bank size: four bytes on every GPU CUDA 13 supports; a setting is
 * accepted and changes nothing, as NVIDIA's runtime does (H200: set eight,
 * read back four). */
RGPU_API cudaError_t cudaDeviceGetSharedMemConfig(enum cudaSharedMemConfig *pConfig) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!pConfig) return rgpu_rt_ret(cudaErrorInvalidValue);
  *pConfig = cudaSharedMemBankSizeFourByte;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaDeviceSetSharedMemConfig(enum cudaSharedMemConfig config) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if ((unsigned)config > (unsigned)cudaSharedMemBankSizeEightByte)
    return rgpu_rt_ret(cudaErrorInvalidValue);
  return cudaSuccess;
}

RGPU_API cudaError_t cudaDriverGetVersion(int *driverVersion) {
  rgpu_rt_count_call();
  if (!driverVersion) return rgpu_rt_ret(cudaErrorInvalidValue);
  cudaError_t e;
  rgpu_client *c = rgpu_rt_client(&e);
  /* Like NVIDIA's runtime without a driver: 0 and success. */
  *driverVersion = 0;
  if (!c || rgpu_client_is_dead(c)) return cudaSuccess;
  rgpu_mutex_lock(&g_dev_lock);
  e = fetch_driver_info(c);
  if (e == cudaSuccess) *driverVersion = g_driver_version;
  rgpu_mutex_unlock(&g_dev_lock);
  return cudaSuccess;
}

RGPU_API cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!free_bytes || !total_bytes) return rgpu_rt_ret(cudaErrorInvalidValue);
  rgpu_msg_mem_get_info_rep m;
  e = rgpu_rt_from_call(rgpu_call_mem_get_info(c, rgpu_rt_current_device(), 0, NULL, &m, NULL));
  if (e == cudaSuccess) {
    /* What the arena holds unused is free memory to the program. */
    uint64_t f = m.free_bytes + rgpu_rt_arena_unused(rgpu_rt_current_device());
    *free_bytes = (size_t)(f < m.total_bytes ? f : m.total_bytes);
    *total_bytes = (size_t)m.total_bytes;
  }
  return rgpu_rt_ret(e);
}

/* Cache and shared-memory configuration are preferences the driver may
 * ignore; accepting them changes no result, and refusing them would stop
 * programs that check every return code. */
static enum cudaFuncCache g_cache_config = cudaFuncCachePreferNone;

RGPU_API cudaError_t cudaDeviceSetCacheConfig(enum cudaFuncCache cacheConfig) {
  rgpu_rt_count_call();
  if ((unsigned)cacheConfig > (unsigned)cudaFuncCachePreferEqual)
    return rgpu_rt_ret(cudaErrorInvalidValue);
  g_cache_config = cacheConfig;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaDeviceGetCacheConfig(enum cudaFuncCache *pCacheConfig) {
  rgpu_rt_count_call();
  if (!pCacheConfig) return rgpu_rt_ret(cudaErrorInvalidValue);
  *pCacheConfig = g_cache_config;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaFuncSetCacheConfig(const void *func, enum cudaFuncCache cacheConfig) {
  rgpu_rt_count_call();
  if (!rgpu_rt_func_by_stub(func) && !rgpu_rt_is_driver_function(func))
    return rgpu_rt_ret(cudaErrorInvalidDeviceFunction);
  if ((unsigned)cacheConfig > (unsigned)cudaFuncCachePreferEqual)
    return rgpu_rt_ret(cudaErrorInvalidValue);
  return cudaSuccess;
}

/* Without a profiler attached NVIDIA's runtime answers success too. */
RGPU_API cudaError_t cudaProfilerStart(void) {
  rgpu_rt_count_call();
  return cudaSuccess;
}

RGPU_API cudaError_t cudaProfilerStop(void) {
  rgpu_rt_count_call();
  return cudaSuccess;
}

/* ---- cudaSetValidDevices --------------------------------------------------- */

/* The list as the program gave it (priority order), kept for the program's
 * lifetime; g_valid_lock guards it.  CUDA documents the list as the devices
 * the runtime tries, in order, "until it finds one that works" when a
 * thread has not chosen a device: so the implicit device becomes the
 * first listed one that works (its server's session is alive and its
 * compute mode allows contexts), and cudaSetDevice is unaffected.  A list
 * of length 0 goes back to the default (device 0, then the others). */
static rgpu_mutex g_valid_lock = RGPU_MUTEX_INITIALIZER;
static int g_valid[RGPU_MAX_DEVICES];
static int g_nvalid;

static int device_works(rgpu_client *c, int dev) {
  if (rgpu_client_is_dead(rgpu_rt_route(c, dev))) return 0;
  rgpu_rt_device *d;
  if (rgpu_rt_device_get(c, dev, &d) != cudaSuccess) return 0;
  return CU_DEVICE_ATTRIBUTE_COMPUTE_MODE >= d->nattrs ||
         d->attrs[CU_DEVICE_ATTRIBUTE_COMPUTE_MODE] != CU_COMPUTEMODE_PROHIBITED;
}

RGPU_API cudaError_t cudaSetValidDevices(int *device_arr, int len) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  int n = 0;
  if ((e = rgpu_rt_device_count(c, &n)) != cudaSuccess) return rgpu_rt_ret(e);
  /* CUDA's order of checks: the list itself, then each device. */
  if (len < 0 || (len > 0 && !device_arr) || len > n) return rgpu_rt_ret(cudaErrorInvalidValue);
  unsigned char seen[RGPU_MAX_DEVICES] = {0};
  for (int i = 0; i < len; i++) {
    int dev = device_arr[i];
    if (dev < 0 || dev >= n || dev >= RGPU_MAX_DEVICES) return rgpu_rt_ret(cudaErrorInvalidDevice);
    /* A device listed twice: with len <= count, a list naming every device
     * once is the longest valid one, so a repeat is an invalid list. */
    if (seen[dev]++) return rgpu_rt_ret(cudaErrorInvalidValue);
  }
  int implicit = 0;
  for (int i = 0; i < len; i++)
    if (device_works(c, device_arr[i])) {
      implicit = device_arr[i];
      break;
    }
  rgpu_mutex_lock(&g_valid_lock);
  for (int i = 0; i < len; i++) g_valid[i] = device_arr[i];
  g_nvalid = len;
  __atomic_store_n(&g_implicit_device, implicit, __ATOMIC_RELAXED);
  rgpu_mutex_unlock(&g_valid_lock);
  return cudaSuccess;
}

/* ---- DEVICE_QUERY: answers of the server's driver ---------------------------- */

rgpu_status rgpu_rt_device_query(rgpu_client *c, int bind_dev, const rgpu_msg_device_query_req *q,
                                 uint64_t *values, uint32_t nvalues) {
  rgpu_buf pay;
  rgpu_buf_init(&pay);
  rgpu_client_reply r = {.payload = &pay}; /* rep points into pay */
  rgpu_msg_device_query_rep rep;
  memset(&rep, 0, sizeof rep);
  assert(rgpu_mutex_held_count() == 0); /* a round trip: no cudart lock held */
  rgpu_status rc = rgpu_call_device_query(c, bind_dev, 0, q, &rep, &r);
  if (rc == 0 && rep.values.count != nvalues) {
    RGPU_ERROR("DEVICE_QUERY %u: %u answers, expected %u", q->what, rep.values.count, nvalues);
    rc = CUDA_ERROR_UNKNOWN;
  }
  for (uint32_t i = 0; rc == 0 && i < nvalues; i++) values[i] = rgpu_array_u64(&rep.values, i);
  rgpu_buf_free(&pay);
  return rc;
}

/* cudaDeviceGet{Host,P2P}AtomicCapabilities (peer < 0: the host link).
 * The server's driver answers for its devices, in pieces of at most
 * RGPU_DQ_MAX_ARGS operations.  Two exceptions, both links rgpu cannot
 * offer: the host is the client's CPU, which has no coherent link to a
 * remote GPU (cudaDevAttrHostNativeAtomicSupported is 0 for the same
 * reason, rgpu_cudart_props.c), so after the driver validated the list
 * every capability is 0; and devices of two servers have no link at all,
 * so every capability of such a pair is 0 too.  The runtime's operation
 * numbers are the driver's CUatomicOperation values. */
static cudaError_t atomic_caps(unsigned int *caps, const enum cudaAtomicOperation *ops,
                               unsigned int count, int device, int peer) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  int n = 0;
  if ((e = rgpu_rt_device_count(c, &n)) != cudaSuccess) return rgpu_rt_ret(e);
  int p2p = peer != -1; /* -1: the host; other negatives: an invalid peer */
  if (device < 0 || device >= n || (p2p && (peer < 0 || peer >= n)))
    return rgpu_rt_ret(cudaErrorInvalidDevice);
  if (p2p && device == peer) return rgpu_rt_ret(cudaErrorInvalidDevice);
  if (!caps || !ops || count == 0) return rgpu_rt_ret(cudaErrorInvalidValue);
  if (p2p && rgpu_rt_devices_apart(device, peer)) {
    for (unsigned i = 0; i < count; i++)
      if ((unsigned)ops[i] > (unsigned)cudaAtomicOperationFloatMax)
        return rgpu_rt_ret(cudaErrorInvalidValue);
    memset(caps, 0, count * sizeof *caps);
    return cudaSuccess;
  }
  rgpu_client *owner = rgpu_rt_route(c, device);
  for (unsigned done = 0; done < count;) {
    uint32_t k = count - done < RGPU_DQ_MAX_ARGS ? count - done : RGPU_DQ_MAX_ARGS;
    uint32_t args[RGPU_DQ_MAX_ARGS];
    uint64_t values[RGPU_DQ_MAX_ARGS];
    for (uint32_t i = 0; i < k; i++) args[i] = (uint32_t)ops[done + i];
    rgpu_msg_device_query_req q = {
        .what = p2p ? RGPU_DQ_P2P_ATOMIC_CAPS : RGPU_DQ_HOST_ATOMIC_CAPS,
        .device = rgpu_rt_local_device(owner, device),
        .peer = p2p ? rgpu_rt_local_device(owner, peer) : 0,
        .args = {args, k}};
    rgpu_status rc = rgpu_rt_device_query(owner, -1, &q, values, k);
    if (rc) return rgpu_rt_ret(rgpu_rt_from_call(rc));
    for (uint32_t i = 0; i < k; i++) caps[done + i] = p2p ? (unsigned)values[i] : 0u;
    done += k;
  }
  return cudaSuccess;
}

RGPU_API cudaError_t cudaDeviceGetHostAtomicCapabilities(unsigned int *capabilities,
                                                         const enum cudaAtomicOperation *operations,
                                                         unsigned int count, int device) {
  return atomic_caps(capabilities, operations, count, device, -1);
}

RGPU_API cudaError_t cudaDeviceGetP2PAtomicCapabilities(unsigned int *capabilities,
                                                        const enum cudaAtomicOperation *operations,
                                                        unsigned int count, int srcDevice,
                                                        int dstDevice) {
  /* A negative dstDevice is an invalid device, not "the host". */
  return atomic_caps(capabilities, operations, count, srcDevice, dstDevice < 0 ? -2 : dstDevice);
}

/* The current device's context.  A round trip, not a queued request: CUDA
 * says the reset takes effect when the call returns, and its status
 * (cudaErrorNotSupported where the GPU keeps no persisting lines) is the
 * program's answer at this call, which a queued request could only report
 * later, at an unrelated one.  The server runs requests in order, so the
 * work issued before is queued to the GPU before the reset, as locally. */
RGPU_API cudaError_t cudaCtxResetPersistingL2Cache(void) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  rgpu_msg_device_query_req q = {.what = RGPU_DQ_RESET_PERSISTING_L2};
  rgpu_status rc = rgpu_rt_device_query(c, rgpu_rt_current_device(), &q, NULL, 0);
  return rc ? rgpu_rt_ret(rgpu_rt_from_call(rc)) : cudaSuccess;
}
