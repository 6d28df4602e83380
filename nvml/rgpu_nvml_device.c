/* NVML device queries: handles, identity, state, processes.  Every figure
 * comes from the device's snapshot (rgpu_nvml_state.c) with the status the
 * server gave it. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "rgpu_nvml_internal.h"

/* ---- handles ------------------------------------------------------------ */

RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
  if (!deviceCount) return NVML_ERROR_INVALID_ARGUMENT;
  return rgpu_nvml_count(deviceCount);
}
RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlDeviceGetCount(unsigned int *deviceCount) {
  return rgpu_nvml_nvmlDeviceGetCount_v2(deviceCount);
}

RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                                       nvmlDevice_t *device) {
  if (!device) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned int n = 0;
  nvmlReturn_t r = rgpu_nvml_count(&n);
  if (r) return r;
  if (index >= n) return NVML_ERROR_INVALID_ARGUMENT;
  *device = rgpu_nvml_handle(index);
  return NVML_SUCCESS;
}
RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlDeviceGetHandleByIndex(unsigned int index,
                                                                    nvmlDevice_t *device) {
  return rgpu_nvml_nvmlDeviceGetHandleByIndex_v2(index, device);
}

/* "domain:bus:device.function" (domain of 4 or 8 hex digits) or
 * "bus:device.function"; 0 and the numbers, or -1. */
static int parse_bus_id(const char *s, unsigned *dom, unsigned *bus, unsigned *dev) {
  unsigned fn = 0;
  char tail;
  if (sscanf(s, "%x:%x:%x.%x%c", dom, bus, dev, &fn, &tail) == 4) return 0;
  *dom = 0;
  if (sscanf(s, "%x:%x.%x%c", bus, dev, &fn, &tail) == 3) return 0;
  return -1;
}

static int fig_is(const rgpu_nvml_snapshot *s, int fig, uint64_t want) {
  uint64_t v = 0;
  return rgpu_nvml_fig(s, fig, &v) == NVML_SUCCESS && v == want;
}

/* Looks for the device whose snapshot matches (one fetch per device the
 * first time; cached after). */
static nvmlReturn_t find_device(int (*match)(const rgpu_nvml_snapshot *, const void *),
                                const void *key, nvmlDevice_t *device) {
  unsigned int n = 0;
  nvmlReturn_t r = rgpu_nvml_count(&n);
  if (r) return r;
  for (unsigned int i = 0; i < n; i++) {
    rgpu_nvml_snapshot s;
    r = rgpu_nvml_snapshot_of(rgpu_nvml_handle(i), &s);
    if (r) return r;
    if (match(&s, key)) {
      *device = rgpu_nvml_handle(i);
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

typedef struct {
  unsigned dom, bus, dev;
} bus_key;
static int match_bus(const rgpu_nvml_snapshot *s, const void *k) {
  const bus_key *b = k;
  return fig_is(s, RGPU_NVML_FIG_PCI_DOMAIN, b->dom) && fig_is(s, RGPU_NVML_FIG_PCI_BUS, b->bus) &&
         fig_is(s, RGPU_NVML_FIG_PCI_DEVICE, b->dev);
}

RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId,
                                                                          nvmlDevice_t *device) {
  if (!pciBusId || !device) return NVML_ERROR_INVALID_ARGUMENT;
  nvmlReturn_t r = rgpu_nvml_check_init();
  if (r) return r;
  bus_key k;
  if (parse_bus_id(pciBusId, &k.dom, &k.bus, &k.dev)) return NVML_ERROR_INVALID_ARGUMENT;
  return find_device(match_bus, &k, device);
}
RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlDeviceGetHandleByPciBusId(const char *pciBusId,
                                                                       nvmlDevice_t *device) {
  return rgpu_nvml_nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

static int match_uuid(const rgpu_nvml_snapshot *s, const void *k) {
  return s->uuid[0] && strcasecmp(s->uuid, (const char *)k) == 0;
}
RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
  if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
  nvmlReturn_t r = rgpu_nvml_check_init();
  if (r) return r;
  return find_device(match_uuid, uuid, device);
}

RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
  if (!index) return NVML_ERROR_INVALID_ARGUMENT;
  nvmlReturn_t r = rgpu_nvml_check_init();
  if (r) return r;
  unsigned int n = 0;
  r = rgpu_nvml_count(&n);
  if (r) return r;
  for (unsigned int i = 0; i < n; i++)
    if (rgpu_nvml_handle(i) == device) {
      *index = i;
      return NVML_SUCCESS;
    }
  return NVML_ERROR_INVALID_ARGUMENT;
}

/* ---- identity ----------------------------------------------------------- */

static nvmlReturn_t put_string(char *buf, unsigned int length, const char *s) {
  size_t n = strlen(s);
  if (length < n + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
  memcpy(buf, s, n + 1);
  return NVML_SUCCESS;
}

RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlDeviceGetName(nvmlDevice_t device, char *name,
                                                           unsigned int length) {
  if (!name) return NVML_ERROR_INVALID_ARGUMENT;
  rgpu_nvml_snapshot s;
  nvmlReturn_t r = rgpu_nvml_snapshot_of(device, &s);
  return r ? r : put_string(name, length, s.name);
}

RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid,
                                                           unsigned int length) {
  if (!uuid) return NVML_ERROR_INVALID_ARGUMENT;
  rgpu_nvml_snapshot s;
  nvmlReturn_t r = rgpu_nvml_snapshot_of(device, &s);
  if (r) return r;
  if (!s.uuid[0]) return NVML_ERROR_NOT_SUPPORTED;
  return put_string(uuid, length, s.uuid);
}

static nvmlReturn_t pci_info(nvmlDevice_t device, nvmlPciInfo_t *pci) {
  if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
  rgpu_nvml_snapshot s;
  nvmlReturn_t r = rgpu_nvml_snapshot_of(device, &s);
  if (r) return r;
  uint64_t dom = 0, bus = 0, dev = 0, id = 0, sub = 0;
  r = rgpu_nvml_fig(&s, RGPU_NVML_FIG_PCI_DOMAIN, &dom);
  if (!r) r = rgpu_nvml_fig(&s, RGPU_NVML_FIG_PCI_BUS, &bus);
  if (!r) r = rgpu_nvml_fig(&s, RGPU_NVML_FIG_PCI_DEVICE, &dev);
  if (r) return r;
  /* The ids may be unknown (softgpu has no PCI function): 0, as for a
   * field NVML leaves unset. */
  rgpu_nvml_fig(&s, RGPU_NVML_FIG_PCI_DEVICE_ID, &id);
  rgpu_nvml_fig(&s, RGPU_NVML_FIG_PCI_SUBSYSTEM_ID, &sub);
  memset(pci, 0, sizeof *pci);
  pci->domain = (unsigned int)dom;
  pci->bus = (unsigned int)bus;
  pci->device = (unsigned int)dev;
  pci->pciDeviceId = (unsigned int)id;
  pci->pciSubSystemId = (unsigned int)sub;
  snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", (unsigned)dom & 0xffff,
           (unsigned)bus & 0xff, (unsigned)dev & 0xff);
  if (s.bus_id[0])
    snprintf(pci->busId, sizeof pci->busId, "%s", s.bus_id);
  else
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.0", (unsigned)dom, (unsigned)bus & 0xff,
             (unsigned)dev & 0xff);
  return NVML_SUCCESS;
}
RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
  return pci_info(device, pci);
}
RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci) {
  return pci_info(device, pci);
}

/* Figures figs[0..n) of one snapshot into out[0..n): the status of the
 * first that fails (the later ones are not read), else NVML_SUCCESS. */
static nvmlReturn_t figures(nvmlDevice_t device, int n, const int *figs, uint64_t *out) {
  rgpu_nvml_snapshot s;
  nvmlReturn_t r = rgpu_nvml_snapshot_of(device, &s);
  for (int i = 0; !r && i < n; i++) r = rgpu_nvml_fig(&s, figs[i], &out[i]);
  return r;
}

RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device,
                                                                            int *major, int *minor) {
  if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
  const int figs[2] = {RGPU_NVML_FIG_CC_MAJOR, RGPU_NVML_FIG_CC_MINOR};
  uint64_t v[2] = {0};
  nvmlReturn_t r = figures(device, 2, figs, v);
  if (r) return r;
  *major = (int)v[0];
  *minor = (int)v[1];
  return NVML_SUCCESS;
}

/* ---- single figures ----------------------------------------------------- */

/* The figure's status; its value into *out when it is a success. */
static nvmlReturn_t figure(nvmlDevice_t device, int fig, uint64_t *out) {
  return figures(device, 1, &fig, out);
}

#define UINT_GETTER(fn, fig, ctype)                                                  \
  RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_##fn(nvmlDevice_t device, ctype *out) {   \
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;                                    \
    uint64_t v = 0;                                                                  \
    nvmlReturn_t r = figure(device, (fig), &v);                                      \
    if (r == NVML_SUCCESS) *out = (ctype)v;                                          \
    return r;                                                                        \
  }
UINT_GETTER(nvmlDeviceGetPowerUsage, RGPU_NVML_FIG_POWER, unsigned int)
UINT_GETTER(nvmlDeviceGetEnforcedPowerLimit, RGPU_NVML_FIG_POWER_LIMIT, unsigned int)
UINT_GETTER(nvmlDeviceGetFanSpeed, RGPU_NVML_FIG_FAN, unsigned int)
UINT_GETTER(nvmlDeviceGetMinorNumber, RGPU_NVML_FIG_MINOR, unsigned int)
UINT_GETTER(nvmlDeviceGetComputeMode, RGPU_NVML_FIG_COMPUTE_MODE, nvmlComputeMode_t)
UINT_GETTER(nvmlDeviceGetPersistenceMode, RGPU_NVML_FIG_PERSISTENCE, nvmlEnableState_t)
UINT_GETTER(nvmlDeviceGetPerformanceState, RGPU_NVML_FIG_PSTATE, nvmlPstates_t)
/* The deprecated name of the same figure. */
UINT_GETTER(nvmlDeviceGetPowerState, RGPU_NVML_FIG_PSTATE, nvmlPstates_t)

RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device,
                                                                     unsigned int *isMigDevice) {
  if (!isMigDevice) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned int idx;
  nvmlReturn_t r = rgpu_nvml_nvmlDeviceGetIndex(device, &idx);
  if (r) return r;
  *isMigDevice = 0;
  return NVML_SUCCESS;
}

RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlDeviceGetTemperature(nvmlDevice_t device,
                                                                  nvmlTemperatureSensors_t sensorType,
                                                                  unsigned int *temp) {
  if (!temp || sensorType != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
  uint64_t v = 0;
  nvmlReturn_t r = figure(device, RGPU_NVML_FIG_TEMP_GPU, &v);
  if (r == NVML_SUCCESS) *temp = (unsigned int)v;
  return r;
}

static nvmlReturn_t clock_of(nvmlDevice_t device, int first_fig, nvmlClockType_t type, unsigned int *clock) {
  if (!clock || (unsigned)type > NVML_CLOCK_VIDEO) return NVML_ERROR_INVALID_ARGUMENT;
  uint64_t v = 0;
  nvmlReturn_t r = figure(device, first_fig + (int)type, &v);
  if (r == NVML_SUCCESS) *clock = (unsigned int)v;
  return r;
}
RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                                                unsigned int *clock) {
  return clock_of(device, RGPU_NVML_FIG_CLOCK_GRAPHICS, type, clock);
}
RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                                                   unsigned int *clock) {
  return clock_of(device, RGPU_NVML_FIG_MAXCLOCK_GRAPHICS, type, clock);
}

/* ---- memory, utilization ------------------------------------------------ */

RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
  if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
  const int figs[3] = {RGPU_NVML_FIG_MEM_TOTAL, RGPU_NVML_FIG_MEM_FREE, RGPU_NVML_FIG_MEM_USED};
  uint64_t v[3] = {0};
  nvmlReturn_t r = figures(device, 3, figs, v);
  if (r) return r;
  memory->total = v[0];
  memory->free = v[1];
  memory->used = v[2];
  return NVML_SUCCESS;
}

RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
                                                                    nvmlMemory_v2_t *memory) {
  if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
  if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  nvmlMemory_t m;
  nvmlReturn_t r = rgpu_nvml_nvmlDeviceGetMemoryInfo(device, &m);
  if (r) return r;
  uint64_t reserved = 0;
  (void)figure(device, RGPU_NVML_FIG_MEM_RESERVED, &reserved);
  /* v1's used includes what the driver reserves; v2 counts it apart. */
  if (reserved > m.used) reserved = m.used;
  memory->total = m.total;
  memory->reserved = reserved;
  memory->free = m.free;
  memory->used = m.used - reserved;
  return NVML_SUCCESS;
}

RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                                       nvmlUtilization_t *utilization) {
  if (!utilization) return NVML_ERROR_INVALID_ARGUMENT;
  const int figs[2] = {RGPU_NVML_FIG_UTIL_GPU, RGPU_NVML_FIG_UTIL_MEM};
  uint64_t v[2] = {0};
  nvmlReturn_t r = figures(device, 2, figs, v);
  if (r) return r;
  utilization->gpu = (unsigned int)v[0];
  utilization->memory = (unsigned int)v[1];
  return NVML_SUCCESS;
}

/* Peer access between the devices of a server is not something rgpu
 * offers (cudaDeviceCanAccessPeer is 0 through rgpu), so every pair reads
 * as not supported: an answer, not an error. */
RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                                                nvmlGpuP2PCapsIndex_t p2pIndex,
                                                                nvmlGpuP2PStatus_t *p2pStatus) {
  if (!p2pStatus || (unsigned)p2pIndex >= NVML_P2P_CAPS_INDEX_UNKNOWN) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned int a, b;
  nvmlReturn_t r = rgpu_nvml_nvmlDeviceGetIndex(device1, &a);
  if (!r) r = rgpu_nvml_nvmlDeviceGetIndex(device2, &b);
  if (r) return r;
  *p2pStatus = NVML_P2P_STATUS_NOT_SUPPORTED;
  return NVML_SUCCESS;
}

/* ---- processes (rgpu's sessions on the device) -------------------------- */

/* NVML's contract: with *count too small (or infos NULL and a nonzero
 * list) the call says NVML_ERROR_INSUFFICIENT_SIZE and sets *count to the
 * length needed; otherwise it fills infos and sets *count. */
static nvmlReturn_t processes(nvmlDevice_t device, unsigned int *count, nvmlProcessInfo_t *v2,
                              nvmlProcessInfo_v1_t *v1) {
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  rgpu_nvml_snapshot s;
  nvmlReturn_t r = rgpu_nvml_snapshot_of(device, &s);
  if (r) return r;
  if (*count < s.n_procs || (s.n_procs && !v1 && !v2)) {
    *count = s.n_procs;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (unsigned int i = 0; i < s.n_procs; i++) {
    if (v2) {
      memset(&v2[i], 0, sizeof v2[i]);
      v2[i].pid = s.procs[i].pid;
      v2[i].usedGpuMemory = s.procs[i].mem;
      /* No MIG: NVML's "not available" for the instance ids. */
      v2[i].gpuInstanceId = 0xFFFFFFFFu;
      v2[i].computeInstanceId = 0xFFFFFFFFu;
    } else {
      memset(&v1[i], 0, sizeof v1[i]);
      v1[i].pid = s.procs[i].pid;
      v1[i].usedGpuMemory = s.procs[i].mem;
    }
  }
  *count = s.n_procs;
  return NVML_SUCCESS;
}
RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                                 unsigned int *infoCount,
                                                                                 nvmlProcessInfo_t *infos) {
  return processes(device, infoCount, infos, NULL);
}
RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                                                 unsigned int *infoCount,
                                                                                 nvmlProcessInfo_t *infos) {
  return processes(device, infoCount, infos, NULL);
}
RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device,
                                                                              unsigned int *infoCount,
                                                                              nvmlProcessInfo_v1_t *infos) {
  return processes(device, infoCount, NULL, infos);
}
