/* NVML_QUERY: one device's monitoring figures and the sessions using it,
 * for the client's libnvidia-ml.so.1 facade and `rgpu smi`.
 *
 * With a real GPU the figures come from the server's NVML (rgpu_nvml.h),
 * found by the device's UUID (CUDA and NVML may number devices
 * differently).  On softgpu, or without NVML, the server answers from
 * what it knows itself: name, UUID, PCI location and compute capability
 * from the driver, memory from its own allocation accounting; every other
 * figure is NVML_ERROR_NOT_SUPPORTED, never a made-up number.
 *
 * The process list is rgpu's sessions, not the server's OS processes: the
 * pid is the client's (sent in HELLO), the memory what the session holds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_dispatch.h"
#include "rgpu_metrics.h"
#include "rgpu_nvml.h"
#include "rgpu_nvml_figures.h"
#include "rgpu_worker_internal.h"

#define D (&w->drv)

typedef struct {
  uint32_t status[RGPU_NVML_FIG_COUNT];
  uint64_t value[RGPU_NVML_FIG_COUNT];
} figures;

static void fig_set(figures *f, int i, uint32_t status, uint64_t value) {
  f->status[i] = status;
  f->value[i] = status == NVML_SUCCESS ? value : 0;
}

static int attr(rgpu_worker *w, CUdevice dev, CUdevice_attribute a, int *v) {
  *v = 0;
  return D->cuDeviceGetAttribute(v, a, dev) == CUDA_SUCCESS;
}

/* One value from an NVML getter of unsigned int: its status into f. */
#define NVML_UINT(fn, fig, ...)                                         \
  do {                                                                  \
    unsigned int v_ = 0;                                                \
    nvmlReturn_t r_ = nv->fn ? nv->fn(__VA_ARGS__, &v_) : NVML_ERROR_FUNCTION_NOT_FOUND; \
    fig_set(f, (fig), (uint32_t)r_, v_);                                \
  } while (0)

/* The figures of the server's NVML for handle h.  The NVML strings go into
 * drv_ver, nvml_ver and bus_id (left empty when NVML has no answer). */
static void nvml_figures(const rgpu_server_nvml *nv, nvmlDevice_t h, figures *f, char *drv_ver,
                         char *nvml_ver, char *bus_id, size_t bus_id_cap) {
  if (nv->nvmlSystemGetDriverVersion &&
      nv->nvmlSystemGetDriverVersion(drv_ver, NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE) != NVML_SUCCESS)
    drv_ver[0] = 0;
  if (nv->nvmlSystemGetNVMLVersion &&
      nv->nvmlSystemGetNVMLVersion(nvml_ver, NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE) != NVML_SUCCESS)
    nvml_ver[0] = 0;
  nvmlPciInfo_t pci;
  memset(&pci, 0, sizeof pci);
  if (nv->nvmlDeviceGetPciInfo_v3 && nv->nvmlDeviceGetPciInfo_v3(h, &pci) == NVML_SUCCESS) {
    fig_set(f, RGPU_NVML_FIG_PCI_DOMAIN, NVML_SUCCESS, pci.domain);
    fig_set(f, RGPU_NVML_FIG_PCI_BUS, NVML_SUCCESS, pci.bus);
    fig_set(f, RGPU_NVML_FIG_PCI_DEVICE, NVML_SUCCESS, pci.device);
    fig_set(f, RGPU_NVML_FIG_PCI_DEVICE_ID, NVML_SUCCESS, pci.pciDeviceId);
    fig_set(f, RGPU_NVML_FIG_PCI_SUBSYSTEM_ID, NVML_SUCCESS, pci.pciSubSystemId);
    pci.busId[sizeof pci.busId - 1] = 0;
    snprintf(bus_id, bus_id_cap, "%s", pci.busId);
  }
  nvmlMemory_t m;
  memset(&m, 0, sizeof m);
  nvmlReturn_t r = nv->nvmlDeviceGetMemoryInfo ? nv->nvmlDeviceGetMemoryInfo(h, &m)
                                               : NVML_ERROR_FUNCTION_NOT_FOUND;
  fig_set(f, RGPU_NVML_FIG_MEM_TOTAL, r, m.total);
  fig_set(f, RGPU_NVML_FIG_MEM_FREE, r, m.free);
  fig_set(f, RGPU_NVML_FIG_MEM_USED, r, m.used);
  nvmlMemory_v2_t m2;
  memset(&m2, 0, sizeof m2);
  m2.version = nvmlMemory_v2;
  r = nv->nvmlDeviceGetMemoryInfo_v2 ? nv->nvmlDeviceGetMemoryInfo_v2(h, &m2)
                                     : NVML_ERROR_FUNCTION_NOT_FOUND;
  fig_set(f, RGPU_NVML_FIG_MEM_RESERVED, r, m2.reserved);
  nvmlUtilization_t u = {0, 0};
  r = nv->nvmlDeviceGetUtilizationRates ? nv->nvmlDeviceGetUtilizationRates(h, &u)
                                        : NVML_ERROR_FUNCTION_NOT_FOUND;
  fig_set(f, RGPU_NVML_FIG_UTIL_GPU, r, u.gpu);
  fig_set(f, RGPU_NVML_FIG_UTIL_MEM, r, u.memory);
  NVML_UINT(nvmlDeviceGetTemperature, RGPU_NVML_FIG_TEMP_GPU, h, NVML_TEMPERATURE_GPU);
  NVML_UINT(nvmlDeviceGetPowerUsage, RGPU_NVML_FIG_POWER, h);
  NVML_UINT(nvmlDeviceGetEnforcedPowerLimit, RGPU_NVML_FIG_POWER_LIMIT, h);
  for (int c = 0; c < 4; c++) {
    NVML_UINT(nvmlDeviceGetClockInfo, RGPU_NVML_FIG_CLOCK_GRAPHICS + c, h, (nvmlClockType_t)c);
    NVML_UINT(nvmlDeviceGetMaxClockInfo, RGPU_NVML_FIG_MAXCLOCK_GRAPHICS + c, h, (nvmlClockType_t)c);
  }
  NVML_UINT(nvmlDeviceGetFanSpeed, RGPU_NVML_FIG_FAN, h);
  NVML_UINT(nvmlDeviceGetMinorNumber, RGPU_NVML_FIG_MINOR, h);
  {
    nvmlComputeMode_t v = NVML_COMPUTEMODE_DEFAULT;
    r = nv->nvmlDeviceGetComputeMode ? nv->nvmlDeviceGetComputeMode(h, &v) : NVML_ERROR_FUNCTION_NOT_FOUND;
    fig_set(f, RGPU_NVML_FIG_COMPUTE_MODE, r, (uint64_t)v);
  }
  {
    nvmlEnableState_t v = NVML_FEATURE_DISABLED;
    r = nv->nvmlDeviceGetPersistenceMode ? nv->nvmlDeviceGetPersistenceMode(h, &v)
                                         : NVML_ERROR_FUNCTION_NOT_FOUND;
    fig_set(f, RGPU_NVML_FIG_PERSISTENCE, r, (uint64_t)v);
  }
  {
    nvmlPstates_t v = NVML_PSTATE_UNKNOWN;
    r = nv->nvmlDeviceGetPerformanceState ? nv->nvmlDeviceGetPerformanceState(h, &v)
                                          : NVML_ERROR_FUNCTION_NOT_FOUND;
    fig_set(f, RGPU_NVML_FIG_PSTATE, r, (uint64_t)v);
  }
}

/* The sessions with a context on device dev: from the server's session
 * table when this worker has one, else this session alone. */
typedef struct {
  uint32_t pid[RGPU_METRICS_SLOTS];
  uint64_t mem[RGPU_METRICS_SLOTS];
  uint64_t session[RGPU_METRICS_SLOTS];
  const char *name[RGPU_METRICS_SLOTS];
  rgpu_metrics_session_info info[RGPU_METRICS_SLOTS];
  uint32_t n;
  uint64_t mem_sum;
} proc_list;

static uint64_t own_mem(const rgpu_worker *w) { return rgpu_worker_held_bytes(w); }

static void proc_add(proc_list *p, uint32_t pid, uint64_t mem, uint64_t session, const char *name) {
  if (p->n >= RGPU_METRICS_SLOTS) return;
  p->pid[p->n] = pid;
  p->mem[p->n] = mem;
  p->session[p->n] = session;
  p->name[p->n] = name;
  p->n++;
  p->mem_sum += mem;
}

static void collect_sessions(rgpu_worker *w, int dev, proc_list *p) {
  int n = rgpu_metrics_sessions(p->info, RGPU_METRICS_SLOTS);
  int self_listed = 0;
  int ordinal = rgpu_worker_ordinal(w, dev); /* the table records the driver's ordinals */
  for (int i = 0; i < n; i++) {
    const rgpu_metrics_session_info *s = &p->info[i];
    if (!(s->devices >> ordinal & 1)) continue;
    int self = s->session_id == w->cfg.session_id;
    self_listed |= self;
    /* This session's own figure is exact now; the table's is as of its
     * last request. */
    proc_add(p, s->client_pid, self ? own_mem(w) : s->mem_held, s->session_id, s->client_name);
  }
  if (!self_listed && w->ctx[dev])
    proc_add(p, w->client_pid, own_mem(w), w->cfg.session_id, w->client_name);
}

static void format_uuid(char *out, size_t cap, const unsigned char *u) {
  snprintf(out, cap,
           "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
           u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

CUresult rgpu_h_nvml_query(rgpu_req *rq, const rgpu_msg_nvml_query_req *q) {
  rgpu_worker *w = rq->w;
  CUresult r = rgpu_worker_ensure_driver(w);
  if (r) return r;
  if (q->device >= (uint32_t)w->device_count)
    return rgpu_worker_fail(w, CUDA_ERROR_INVALID_DEVICE, "device %u does not exist (%d device%s)",
                            q->device, w->device_count, w->device_count == 1 ? "" : "s");
  CUdevice dev;
  r = D->cuDeviceGet(&dev, rgpu_worker_ordinal(w, (int)q->device));
  if (r) return rgpu_worker_fail(w, r, "cuDeviceGet: %s", rgpu_driver_error_name(D, r));
  char name[96] = "";
  if (D->cuDeviceGetName(name, sizeof name - 1, dev) != CUDA_SUCCESS) name[0] = 0;
  CUuuid cu_uuid;
  memset(&cu_uuid, 0, sizeof cu_uuid);
  char uuid[96] = "";
  if (D->cuDeviceGetUuid(&cu_uuid, dev) == CUDA_SUCCESS)
    format_uuid(uuid, sizeof uuid, (const unsigned char *)cu_uuid.bytes);
  int cuda_ver = 0;
  if (D->cuDriverGetVersion(&cuda_ver) != CUDA_SUCCESS) cuda_ver = 0;

  figures f;
  for (int i = 0; i < RGPU_NVML_FIG_COUNT; i++) fig_set(&f, i, NVML_ERROR_NOT_SUPPORTED, 0);
  /* What the driver itself says holds with and without NVML. */
  int v;
  if (attr(w, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &v))
    fig_set(&f, RGPU_NVML_FIG_CC_MAJOR, NVML_SUCCESS, (uint64_t)v);
  if (attr(w, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &v))
    fig_set(&f, RGPU_NVML_FIG_CC_MINOR, NVML_SUCCESS, (uint64_t)v);
  if (attr(w, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, &v))
    fig_set(&f, RGPU_NVML_FIG_COMPUTE_MODE, NVML_SUCCESS, (uint64_t)v);
  int dom = 0, bus = 0, pdev = 0;
  int have_pci = attr(w, dev, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, &dom) &&
                 attr(w, dev, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, &bus) &&
                 attr(w, dev, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, &pdev);
  char bus_id[32] = "";
  if (have_pci) {
    fig_set(&f, RGPU_NVML_FIG_PCI_DOMAIN, NVML_SUCCESS, (uint64_t)dom);
    fig_set(&f, RGPU_NVML_FIG_PCI_BUS, NVML_SUCCESS, (uint64_t)bus);
    fig_set(&f, RGPU_NVML_FIG_PCI_DEVICE, NVML_SUCCESS, (uint64_t)pdev);
    /* NVML's busId form: 8 hex digits of domain. */
    snprintf(bus_id, sizeof bus_id, "%08X:%02X:%02X.0", (unsigned)dom & 0xffffffffu,
             (unsigned)bus & 0xff, (unsigned)pdev & 0xff);
  }

  proc_list *procs = calloc(1, sizeof *procs);
  if (!procs) return rgpu_worker_fail(w, CUDA_ERROR_OUT_OF_MEMORY, "NVML_QUERY: out of memory");
  collect_sessions(w, (int)q->device, procs);

  char drv_ver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = "";
  char nvml_ver[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE] = "";
  uint32_t nvml_status;
  const rgpu_server_nvml *nv = NULL;
  if (w->drv.is_softgpu) {
    /* A GPU on the same machine is not the device this session uses. */
    nvml_status = NVML_ERROR_NOT_SUPPORTED;
  } else {
    int why = 0;
    nv = rgpu_server_nvml_get(&why);
    nvml_status = (uint32_t)why;
  }
  nvmlDevice_t h = NULL;
  if (nv && (!uuid[0] || nv->nvmlDeviceGetHandleByUUID(uuid, &h) != NVML_SUCCESS)) {
    h = NULL;
    if (!bus_id[0] || nv->nvmlDeviceGetHandleByPciBusId_v2(bus_id, &h) != NVML_SUCCESS) h = NULL;
  }
  if (nv && !h) nvml_status = NVML_ERROR_NOT_FOUND;
  if (h) {
    nvml_figures(nv, h, &f, drv_ver, nvml_ver, bus_id, sizeof bus_id);
  } else {
    /* The server's own figures: the device's size and what the sessions
     * hold on it. */
    size_t total = 0;
    if (D->cuDeviceTotalMem(&total, dev) == CUDA_SUCCESS) {
      uint64_t used = procs->mem_sum < total ? procs->mem_sum : total;
      fig_set(&f, RGPU_NVML_FIG_MEM_TOTAL, NVML_SUCCESS, total);
      fig_set(&f, RGPU_NVML_FIG_MEM_USED, NVML_SUCCESS, used);
      fig_set(&f, RGPU_NVML_FIG_MEM_FREE, NVML_SUCCESS, total - used);
      fig_set(&f, RGPU_NVML_FIG_MEM_RESERVED, NVML_SUCCESS, 0);
    }
  }

  rgpu_msg_nvml_query_rep rep = {
      .nvml_status = nvml_status,
      .driver_version = {drv_ver, strlen(drv_ver)},
      .nvml_version = {nvml_ver, strlen(nvml_ver)},
      .cuda_driver_version = cuda_ver,
      .name = {name, strlen(name)},
      .uuid = {uuid, strlen(uuid)},
      .pci_bus_id = {bus_id, strlen(bus_id)},
      .fig_status = {f.status, RGPU_NVML_FIG_COUNT},
      .fig_value = {f.value, RGPU_NVML_FIG_COUNT},
      .proc_pid = {procs->pid, procs->n},
      .proc_mem = {procs->mem, procs->n},
      .proc_session = {procs->session, procs->n},
      .proc_name = {procs->name, procs->n},
  };
  rgpu_msg_nvml_query_rep_encode(rq->rep, &rep);
  free(procs);
  return CUDA_SUCCESS;
}
