/* The NVML facade's state: init count, handles, the snapshot cache. */
#include <stdlib.h>
#include <string.h>

#include "rgpu_clock.h"
#include "rgpu_cudart.h"
#include "rgpu_log.h"
#include "rgpu_nvml_internal.h"

/* g_lock guards g_init and the cache entries; a fetch runs with it
 * dropped (a round trip under a facade lock is forbidden, see
 * rgpu_cudart_locks.h), so two threads may fetch the same device at once:
 * both answers are current, the later one stays. */
static rgpu_mutex g_lock = RGPU_MUTEX_INITIALIZER;
static int g_init;
static struct nvmlDevice_st g_handles[RGPU_MAX_DEVICES];
typedef struct {
  int valid;
  uint64_t fetched_ms;
  rgpu_nvml_snapshot snap;
} cache_entry;
static cache_entry *g_cache[RGPU_MAX_DEVICES];

void rgpu_nvml_note_unsupported(const char *name, int *logged) {
  if (__atomic_exchange_n(logged, 1, __ATOMIC_RELAXED)) return;
  RGPU_WARN("%s is not supported by rgpu's NVML: returning NVML_ERROR_NOT_SUPPORTED", name);
}

/* nvmlInit connects (the first CUDA call would too): HELLO's round trip
 * also brings DRIVER_INFO, so the device count costs nothing more and no
 * device figure is asked for until a getter needs it. */
static nvmlReturn_t init_common(void) {
  cudaError_t e = cudaSuccess;
  rgpu_client *c = rgpu_rt_client(&e);
  if (!c || rgpu_rt_all_lost(c)) return NVML_ERROR_DRIVER_NOT_LOADED;
  int n = 0;
  if (rgpu_rt_device_count(c, &n) != cudaSuccess) return NVML_ERROR_DRIVER_NOT_LOADED;
  rgpu_mutex_lock(&g_lock);
  g_init++;
  rgpu_mutex_unlock(&g_lock);
  return NVML_SUCCESS;
}

RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlInit_v2(void) { return init_common(); }
RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlInit(void) { return init_common(); }
/* The flags (no GPUs needed, no attach) change nothing here: rgpu never
 * attaches to a local GPU, and zero devices is not an error. */
RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlInitWithFlags(unsigned int flags) {
  (void)flags;
  return init_common();
}

RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlShutdown(void) {
  rgpu_mutex_lock(&g_lock);
  nvmlReturn_t r = g_init > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
  if (g_init > 0 && --g_init == 0)
    for (int i = 0; i < RGPU_MAX_DEVICES; i++)
      if (g_cache[i]) g_cache[i]->valid = 0;
  rgpu_mutex_unlock(&g_lock);
  return r;
}

nvmlReturn_t rgpu_nvml_check_init(void) {
  rgpu_mutex_lock(&g_lock);
  int ok = g_init > 0;
  rgpu_mutex_unlock(&g_lock);
  return ok ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

nvmlReturn_t rgpu_nvml_count(unsigned int *count) {
  nvmlReturn_t r = rgpu_nvml_check_init();
  if (r) return r;
  rgpu_client *c = rgpu_rt_client_peek();
  int n = 0;
  if (!c || rgpu_rt_device_count(c, &n) != cudaSuccess) return NVML_ERROR_UNKNOWN;
  if (n > RGPU_MAX_DEVICES) n = RGPU_MAX_DEVICES;
  *count = (unsigned int)n;
  return NVML_SUCCESS;
}

nvmlDevice_t rgpu_nvml_handle(unsigned int i) {
  return i < RGPU_MAX_DEVICES ? &g_handles[i] : NULL;
}

static int handle_index(nvmlDevice_t d, unsigned int *idx) {
  /* Only pointers into our table: anything else is a caller's bug or a
   * handle of another NVML, answered as an invalid argument, not a crash. */
  uintptr_t p = (uintptr_t)d, base = (uintptr_t)g_handles;
  if (!d || p < base || p >= base + sizeof g_handles || (p - base) % sizeof g_handles[0]) return -1;
  *idx = (unsigned int)((p - base) / sizeof g_handles[0]);
  return 0;
}

/* One NVML_QUERY round trip into *s. */
static nvmlReturn_t fetch(unsigned int dev, rgpu_nvml_snapshot *s) {
  rgpu_client *c = rgpu_rt_client_peek();
  if (!c) return NVML_ERROR_UNKNOWN;
  /* Several servers (issue 19): the owner's session, its own number. */
  c = rgpu_rt_route(c, (int)dev);
  rgpu_buf pay;
  rgpu_buf_init(&pay);
  rgpu_client_reply rr = {.payload = &pay};
  rgpu_msg_nvml_query_req q = {.device = rgpu_rt_local_device(c, (int)dev)};
  rgpu_msg_nvml_query_rep rep;
  rgpu_status rc = rgpu_call_nvml_query(c, -1, 0, &q, &rep, &rr);
  nvmlReturn_t r = NVML_SUCCESS;
  if (rc == CUDA_ERROR_INVALID_DEVICE) {
    r = NVML_ERROR_INVALID_ARGUMENT;
  } else if (rc) {
    /* A server without NVML_QUERY (older) answers an unknown opcode;
     * anything else is a broken session.  Said once: a monitoring loop
     * would repeat it every call. */
    static int warned;
    if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
      RGPU_WARN("NVML_QUERY for device %u failed (%d)%s%s; NVML calls fail from here", dev, (int)rc,
                rr.msg[0] ? ": " : "", rr.msg);
    r = rc > 0 ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_UNKNOWN;
  } else if (rgpu_nvml_snapshot_from_reply(s, &rep)) {
    RGPU_WARN("NVML_QUERY for device %u: inconsistent reply", dev);
    r = NVML_ERROR_UNKNOWN;
  }
  rgpu_buf_free(&pay);
  return r;
}

nvmlReturn_t rgpu_nvml_snapshot_of(nvmlDevice_t d, rgpu_nvml_snapshot *out) {
  nvmlReturn_t r = rgpu_nvml_check_init();
  if (r) return r;
  unsigned int idx, count = 0;
  if (handle_index(d, &idx)) return NVML_ERROR_INVALID_ARGUMENT;
  r = rgpu_nvml_count(&count);
  if (r) return r;
  if (idx >= count) return NVML_ERROR_INVALID_ARGUMENT;
  uint64_t now = rgpu_clock_ms();
  rgpu_mutex_lock(&g_lock);
  cache_entry *e = g_cache[idx];
  if (e && e->valid && now - e->fetched_ms < RGPU_NVML_CACHE_MS) {
    *out = e->snap;
    rgpu_mutex_unlock(&g_lock);
    return NVML_SUCCESS;
  }
  rgpu_mutex_unlock(&g_lock);
  r = fetch(idx, out);
  if (r) return r;
  rgpu_mutex_lock(&g_lock);
  if (!g_cache[idx]) g_cache[idx] = calloc(1, sizeof *g_cache[idx]);
  if (g_cache[idx]) {
    g_cache[idx]->snap = *out;
    g_cache[idx]->fetched_ms = now;
    g_cache[idx]->valid = 1;
  }
  rgpu_mutex_unlock(&g_lock);
  return NVML_SUCCESS;
}
