/* Internal interfaces of the NVML facade (compiled into libcudart.so.13).
 *
 * State (rgpu_nvml_state.c): nvmlInit's reference count, one handle per
 * device, and per device a snapshot of the server's figures (NVML_QUERY)
 * cached for RGPU_NVML_CACHE_MS, so a monitoring loop calling ten getters
 * costs one round trip per device and period, not ten.  No lock of this
 * facade is held across a round trip. */
#ifndef RGPU_NVML_INTERNAL_H
#define RGPU_NVML_INTERNAL_H

#include "rgpu_nvml_snapshot.h"
#include "rgpu_nvml_types.h"

#define RGPU_NVML_CACHE_MS 1000

/* A device handle: nvmlDevice_t points at entry i of a static table for
 * device i (its position is its index), so a handle stays valid for the
 * life of the process and is never written after load. */
struct nvmlDevice_st {
  char unused;
};

/* NVML_SUCCESS if nvmlInit succeeded and was not shut down. */
nvmlReturn_t rgpu_nvml_check_init(void);
/* Number of devices (the server's, as cudaGetDeviceCount sees them). */
nvmlReturn_t rgpu_nvml_count(unsigned int *count);
/* The handle of device i (NULL past the table). */
nvmlDevice_t rgpu_nvml_handle(unsigned int i);
/* Checks init and the handle, then copies the device's snapshot (fetched
 * when the cached one is older than RGPU_NVML_CACHE_MS) into *out. */
nvmlReturn_t rgpu_nvml_snapshot_of(nvmlDevice_t d, rgpu_nvml_snapshot *out);

#endif
