/* The figures of an NVML_QUERY reply (proto/rgpu_messages.def): index i of
 * fig_status/fig_value is figure i below.  The server fills what it can
 * (from its NVML, or its own accounting on softgpu) and gives every figure
 * its own nvmlReturn_t, so "not supported" travels per figure and the
 * client never has to invent a number.  New figures go at the end: an older
 * peer sends fewer entries, and a missing entry reads as not supported. */
#ifndef RGPU_NVML_FIGURES_H
#define RGPU_NVML_FIGURES_H

enum {
  RGPU_NVML_FIG_MEM_TOTAL = 0,   /* bytes (nvmlMemory_t.total) */
  RGPU_NVML_FIG_MEM_FREE,        /* bytes */
  RGPU_NVML_FIG_MEM_USED,        /* bytes, nvmlMemory_t (v1) meaning */
  RGPU_NVML_FIG_MEM_RESERVED,    /* bytes (nvmlMemory_v2_t.reserved) */
  RGPU_NVML_FIG_UTIL_GPU,        /* percent */
  RGPU_NVML_FIG_UTIL_MEM,        /* percent */
  RGPU_NVML_FIG_TEMP_GPU,        /* degrees C */
  RGPU_NVML_FIG_POWER,           /* milliwatts */
  RGPU_NVML_FIG_POWER_LIMIT,     /* milliwatts (enforced) */
  RGPU_NVML_FIG_CLOCK_GRAPHICS,  /* MHz, then SM, MEM, VIDEO: nvmlClockType_t order */
  RGPU_NVML_FIG_CLOCK_SM,
  RGPU_NVML_FIG_CLOCK_MEM,
  RGPU_NVML_FIG_CLOCK_VIDEO,
  RGPU_NVML_FIG_MAXCLOCK_GRAPHICS,
  RGPU_NVML_FIG_MAXCLOCK_SM,
  RGPU_NVML_FIG_MAXCLOCK_MEM,
  RGPU_NVML_FIG_MAXCLOCK_VIDEO,
  RGPU_NVML_FIG_COMPUTE_MODE,    /* nvmlComputeMode_t */
  RGPU_NVML_FIG_PERSISTENCE,     /* nvmlEnableState_t */
  RGPU_NVML_FIG_PSTATE,          /* nvmlPstates_t */
  RGPU_NVML_FIG_FAN,             /* percent */
  RGPU_NVML_FIG_MINOR,           /* /dev/nvidiaN */
  RGPU_NVML_FIG_CC_MAJOR,
  RGPU_NVML_FIG_CC_MINOR,
  RGPU_NVML_FIG_PCI_DOMAIN,
  RGPU_NVML_FIG_PCI_BUS,
  RGPU_NVML_FIG_PCI_DEVICE,
  RGPU_NVML_FIG_PCI_DEVICE_ID,   /* nvmlPciInfo_t.pciDeviceId */
  RGPU_NVML_FIG_PCI_SUBSYSTEM_ID,
  RGPU_NVML_FIG_COUNT
};

/* nvmlReturn_t values the server and the client both use (the full list
 * is nvml/nvml.def). */
enum {
  RGPU_NVML_SUCCESS = 0,
  RGPU_NVML_ERROR_NOT_SUPPORTED = 3,
  RGPU_NVML_ERROR_NOT_FOUND = 6,
  RGPU_NVML_ERROR_LIBRARY_NOT_FOUND = 12,
  RGPU_NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  RGPU_NVML_ERROR_UNKNOWN = 999
};

#endif
