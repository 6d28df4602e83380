/* rgpu_nvml: the server's own NVML, read by NVML_QUERY
 * (rgpu_handlers_nvml.c).
 *
 * A worker dlopen()s the real libnvidia-ml.so.1 the first time one of its
 * sessions asks, never earlier and never in the listener: rgpu-server is
 * not linked against it, runs where it is missing (softgpu machines), and
 * a session that never asks pays nothing.  Types come from nvml/nvml.def
 * (rgpu_nvml_types.h), the same spec the client facade is built from. */
#ifndef RGPU_SERVER_NVML_H
#define RGPU_SERVER_NVML_H

#include "rgpu_nvml_types.h"

/* Required: without them NVML cannot find the device a session uses. */
#define RGPU_SERVER_NVML_FUNCS(X) \
  X(nvmlInit_v2) X(nvmlErrorString) X(nvmlDeviceGetHandleByUUID) X(nvmlDeviceGetHandleByPciBusId_v2)
/* Optional: a figure whose function is missing reads as not supported. */
#define RGPU_SERVER_NVML_OPTIONAL_FUNCS(X)                                                   \
  X(nvmlSystemGetDriverVersion) X(nvmlSystemGetNVMLVersion) X(nvmlDeviceGetPciInfo_v3)       \
  X(nvmlDeviceGetMemoryInfo) X(nvmlDeviceGetMemoryInfo_v2) X(nvmlDeviceGetUtilizationRates)  \
  X(nvmlDeviceGetTemperature) X(nvmlDeviceGetPowerUsage) X(nvmlDeviceGetEnforcedPowerLimit) \
  X(nvmlDeviceGetClockInfo) X(nvmlDeviceGetMaxClockInfo) X(nvmlDeviceGetComputeMode)         \
  X(nvmlDeviceGetPersistenceMode) X(nvmlDeviceGetPerformanceState) X(nvmlDeviceGetFanSpeed)  \
  X(nvmlDeviceGetMinorNumber)

typedef struct {
#define RGPU_SERVER_NVML_FIELD(name) __typeof__(rgpu_nvml_##name) *name;
  RGPU_SERVER_NVML_FUNCS(RGPU_SERVER_NVML_FIELD)
  RGPU_SERVER_NVML_OPTIONAL_FUNCS(RGPU_SERVER_NVML_FIELD)
#undef RGPU_SERVER_NVML_FIELD
} rgpu_server_nvml;

/* The process's NVML, loaded and initialized on the first call (later
 * calls return the same answer).  NULL when there is none: *why is then
 * NVML_ERROR_LIBRARY_NOT_FOUND (no libnvidia-ml.so.1),
 * NVML_ERROR_FUNCTION_NOT_FOUND (a required function is missing) or
 * nvmlInit_v2's own code; the first failure is logged once. */
const rgpu_server_nvml *rgpu_server_nvml_get(int *why);

#endif
