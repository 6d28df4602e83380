/* NVML system queries and nvmlErrorString. */
#include <stdio.h>
#include <string.h>

#include "rgpu_cudart.h"
#include "rgpu_nvml_internal.h"

RGPU_NVML_PRIVATE const char *rgpu_nvml_nvmlErrorString(nvmlReturn_t result) {
  const char *t = rgpu_nvml_return_text((int)result);
  return t ? t : "Unknown Error";
}

/* Copies s into buf (length bytes); NVML's rule: too small a buffer is
 * NVML_ERROR_INSUFFICIENT_SIZE, not a cut string. */
static nvmlReturn_t put_string(char *buf, unsigned int length, const char *s) {
  if (!buf) return NVML_ERROR_INVALID_ARGUMENT;
  size_t n = strlen(s);
  if (length < n + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
  memcpy(buf, s, n + 1);
  return NVML_SUCCESS;
}

/* The system figures travel with every device's snapshot: device 0's.
 * Without a device there is nobody to ask. */
static nvmlReturn_t system_snapshot(rgpu_nvml_snapshot *s) {
  unsigned int n = 0;
  nvmlReturn_t r = rgpu_nvml_count(&n);
  if (r) return r;
  if (n == 0) return NVML_ERROR_NOT_SUPPORTED;
  return rgpu_nvml_snapshot_of(rgpu_nvml_handle(0), s);
}

/* A version string of the server's NVML (nvml: its own, else the kernel
 * driver's); softgpu has neither: not supported rather than a made-up
 * version. */
static nvmlReturn_t system_version(char *version, unsigned int length, int nvml) {
  if (!version) return NVML_ERROR_INVALID_ARGUMENT;
  rgpu_nvml_snapshot s;
  nvmlReturn_t r = system_snapshot(&s);
  if (r) return r;
  const char *v = nvml ? s.nvml_version : s.driver_version;
  if (!v[0]) return NVML_ERROR_NOT_SUPPORTED;
  return put_string(version, length, v);
}

RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlSystemGetDriverVersion(char *version, unsigned int length) {
  return system_version(version, length, 0);
}

RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
  return system_version(version, length, 1);
}

/* The CUDA driver version comes with HELLO (DRIVER_INFO): no round trip. */
static nvmlReturn_t cuda_version(int *v) {
  if (!v) return NVML_ERROR_INVALID_ARGUMENT;
  nvmlReturn_t r = rgpu_nvml_check_init();
  if (r) return r;
  int ver = 0;
  if (cudaDriverGetVersion(&ver) != cudaSuccess || ver == 0) return NVML_ERROR_UNKNOWN;
  *v = ver;
  return NVML_SUCCESS;
}
RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlSystemGetCudaDriverVersion(int *v) { return cuda_version(v); }
RGPU_NVML_PRIVATE nvmlReturn_t rgpu_nvml_nvmlSystemGetCudaDriverVersion_v2(int *v) { return cuda_version(v); }
