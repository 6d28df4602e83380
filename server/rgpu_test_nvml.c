/* A fake libnvidia-ml.so.1 for rgpu_handlers_nvml_test: fixed figures for
 * the test driver's device (found by its UUID), so the server's real-NVML
 * path (rgpu_nvml.c, nvml_figures in rgpu_handlers_nvml.c) is checked
 * without a GPU.  The signatures come from nvml/nvml.def. */
#define RGPU_NVML_DECLARE_EXPORTS 1
#include <stdio.h>
#include <string.h>

#include "rgpu_nvml_types.h"

#define API __attribute__((visibility("default")))
#define MIB (1024ull * 1024ull)

struct nvmlDevice_st {
  int unused;
};
static struct nvmlDevice_st the_device;

/* The UUID rgpu_test_driver.c gives its device: bytes 1..16. */
static const char k_uuid[] = "GPU-01020304-0506-0708-090a-0b0c0d0e0f10";

#define DEV_CHECK(d) \
  if ((d) != &the_device) return NVML_ERROR_INVALID_ARGUMENT

API nvmlReturn_t nvmlInit_v2(void) { return NVML_SUCCESS; }
API const char *nvmlErrorString(nvmlReturn_t r) { return r ? "fake error" : "Success"; }
API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *d) {
  if (strcmp(uuid, k_uuid)) return NVML_ERROR_NOT_FOUND;
  *d = &the_device;
  return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus, nvmlDevice_t *d) {
  (void)bus;
  (void)d;
  return NVML_ERROR_NOT_FOUND;
}
API nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int n) {
  snprintf(v, n, "580.159.04");
  return NVML_SUCCESS;
}
API nvmlReturn_t nvmlSystemGetNVMLVersion(char *v, unsigned int n) {
  snprintf(v, n, "13.580.159.04");
  return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p) {
  DEV_CHECK(d);
  memset(p, 0, sizeof *p);
  p->domain = 0;
  p->bus = 0x1b;
  p->device = 0;
  p->pciDeviceId = 0x233510DE;
  p->pciSubSystemId = 0x18A610DE;
  snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "0000:1B:00.0");
  snprintf(p->busId, sizeof p->busId, "00000000:1B:00.0");
  return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
  DEV_CHECK(d);
  m->total = 143771 * MIB;
  m->used = 1024 * MIB;
  m->free = m->total - m->used;
  return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
  DEV_CHECK(d);
  if (m->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  m->total = 143771 * MIB;
  m->reserved = 512 * MIB;
  m->used = 512 * MIB;
  m->free = m->total - 1024 * MIB;
  return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
  DEV_CHECK(d);
  u->gpu = 55;
  u->memory = 22;
  return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, nvmlTemperatureSensors_t s, unsigned int *t) {
  DEV_CHECK(d);
  if (s != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
  *t = 41;
  return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *p) {
  DEV_CHECK(d);
  *p = 123456;
  return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *p) {
  DEV_CHECK(d);
  *p = 700000;
  return NVML_SUCCESS;
}
static const unsigned int k_clock[4] = {1980, 1980, 3201, 1755};
API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, nvmlClockType_t t, unsigned int *c) {
  DEV_CHECK(d);
  if ((unsigned)t > 3) return NVML_ERROR_INVALID_ARGUMENT;
  *c = k_clock[t] / 2;
  return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t d, nvmlClockType_t t, unsigned int *c) {
  DEV_CHECK(d);
  if ((unsigned)t > 3) return NVML_ERROR_INVALID_ARGUMENT;
  *c = k_clock[t];
  return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t d, nvmlComputeMode_t *m) {
  DEV_CHECK(d);
  *m = NVML_COMPUTEMODE_EXCLUSIVE_PROCESS;
  return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t d, nvmlEnableState_t *m) {
  DEV_CHECK(d);
  *m = NVML_FEATURE_ENABLED;
  return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t d, nvmlPstates_t *p) {
  DEV_CHECK(d);
  *p = NVML_PSTATE_0;
  return NVML_SUCCESS;
}
/* A passively cooled board: no fan. */
API nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t d, unsigned int *s) {
  DEV_CHECK(d);
  (void)s;
  return NVML_ERROR_NOT_SUPPORTED;
}
API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *m) {
  DEV_CHECK(d);
  *m = 3;
  return NVML_SUCCESS;
}
