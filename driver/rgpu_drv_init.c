/* cuInit, versions, device queries and error strings.
 *
 * Device queries are answered from the runtime's cached properties (one
 * DEVICE_PROPS round trip per device for the whole process, shared with
 * cudaGetDeviceProperties), so after the first fetch they cost nothing;
 * the few that only the server's driver knows (texture width per format,
 * atomic capabilities) are one DEVICE_QUERY each. */
#include <stdio.h>
#include <string.h>

#include <cuda_profiler_api.h>

#include "rgpu_calls.h"
#include "rgpu_cudart_errors.h"
#include "rgpu_device_query.h"
#include "rgpu_drv_internal.h"
#include "rgpu_drv_module.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"

static int g_initialized;

int rgpu_drv_initialized(void) {
  /* The runtime initializes the driver implicitly (CUDA: the runtime calls
   * cuInit), so a process whose runtime has a session may use the driver
   * API without calling cuInit itself. */
  return __atomic_load_n(&g_initialized, __ATOMIC_ACQUIRE) || rgpu_rt_client_peek() != NULL;
}

CUresult rgpu_drv_enter(rgpu_client **out) {
  *out = NULL;
  if (!rgpu_drv_initialized()) {
    rgpu_rt_count_call();
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return RGPU_DRV_RT(rgpu_rt_enter(out));
}

int rgpu_drv_report_unsupported(const char *name, int *logged_once) {
  rgpu_rt_count_call();
  if (!__atomic_exchange_n(logged_once, 1, __ATOMIC_RELAXED))
    RGPU_WARN("%s is not supported by rgpu's driver API; it returns CUDA_ERROR_NOT_SUPPORTED",
              name);
  return CUDA_ERROR_NOT_SUPPORTED;
}

RGPU_DRV CUresult rgpu_drv_cuInit(unsigned int Flags) {
  rgpu_rt_count_call();
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  cudaError_t err = cudaErrorNoDevice;
  rgpu_client *c = rgpu_rt_client(&err);
  /* No server: CUDA's answer when no usable driver or device is present
   * (the client already said why, once). */
  if (!c) return CUDA_ERROR_NO_DEVICE;
  if (rgpu_rt_all_lost(c)) return CUDA_ERROR_DEVICE_UNAVAILABLE;
  __atomic_store_n(&g_initialized, 1, __ATOMIC_RELEASE);
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuDriverGetVersion(int *driverVersion) {
  if (!driverVersion) {
    rgpu_rt_count_call();
    return CUDA_ERROR_INVALID_VALUE;
  }
  /* The server's driver version (DRIVER_INFO, cached); works before cuInit
   * as NVIDIA's does. */
  return RGPU_DRV_RT(cudaDriverGetVersion(driverVersion));
}

/* ---- devices -------------------------------------------------------------- */

CUresult rgpu_drv_enter_device(CUdevice dev, rgpu_client **out) {
  rgpu_client *c;
  CUresult r = rgpu_drv_enter(&c);
  if (r != CUDA_SUCCESS) return r;
  int n = 0;
  cudaError_t e = rgpu_rt_device_count(c, &n);
  if (e != cudaSuccess) return rgpu_drv_from_rt(e);
  if (dev < 0 || dev >= n) return CUDA_ERROR_INVALID_DEVICE;
  *out = c;
  return CUDA_SUCCESS;
}

/* The cached properties of dev (a CUdevice is the device ordinal). */
static CUresult device_of(CUdevice dev, rgpu_rt_device **out) {
  rgpu_client *c;
  CUresult r = rgpu_drv_enter_device(dev, &c);
  if (r != CUDA_SUCCESS) return r;
  cudaError_t e = rgpu_rt_device_get(c, dev, out);
  return e == cudaSuccess ? CUDA_SUCCESS : rgpu_drv_from_rt(e);
}

RGPU_DRV CUresult rgpu_drv_cuDeviceGetCount(int *count) {
  rgpu_client *c;
  CUresult r = rgpu_drv_enter(&c);
  if (r != CUDA_SUCCESS) return r;
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  int n = 0;
  cudaError_t e = rgpu_rt_device_count(c, &n);
  if (e != cudaSuccess) return rgpu_drv_from_rt(e);
  *count = n; /* 0 devices is a success for the driver API */
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuDeviceGet(CUdevice *device, int ordinal) {
  rgpu_client *c;
  CUresult r = rgpu_drv_enter(&c);
  if (r != CUDA_SUCCESS) return r;
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  int n = 0;
  cudaError_t e = rgpu_rt_device_count(c, &n);
  if (e != cudaSuccess) return rgpu_drv_from_rt(e);
  if (ordinal < 0 || ordinal >= n) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuDeviceGetName(char *name, int len, CUdevice dev) {
  rgpu_rt_device *d;
  CUresult r = device_of(dev, &d);
  if (r != CUDA_SUCCESS) return r;
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  snprintf(name, (size_t)len, "%s", d->prop.name);
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) {
  rgpu_rt_device *d;
  CUresult r = device_of(dev, &d);
  if (r != CUDA_SUCCESS) return r;
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  memcpy(uuid->bytes, d->prop.uuid.bytes, sizeof uuid->bytes);
  return CUDA_SUCCESS;
}

/* The 9.2 form reports the same UUID (the difference is for MIG instances,
 * which rgpu's server exposes as whatever its driver reports). */
RGPU_DRV CUresult rgpu_drv_cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) {
  return rgpu_drv_cuDeviceGetUuid_v2(uuid, dev);
}

RGPU_DRV CUresult rgpu_drv_cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
  rgpu_rt_device *d;
  CUresult r = device_of(dev, &d);
  if (r != CUDA_SUCCESS) return r;
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  *bytes = d->prop.totalGlobalMem;
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
  rgpu_rt_device *d;
  CUresult r = device_of(dev, &d);
  if (r != CUDA_SUCCESS) return r;
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  /* Same table and masking as cudaDeviceGetAttribute (the runtime's
   * attribute numbers are the driver's). */
  if ((int)attrib <= 0 || (uint32_t)attrib >= d->nattrs || (int)attrib >= (int)CU_DEVICE_ATTRIBUTE_MAX)
    return CUDA_ERROR_INVALID_VALUE;
  *pi = d->attrs[attrib];
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuDeviceComputeCapability(int *major, int *minor, CUdevice dev) {
  rgpu_rt_device *d;
  CUresult r = device_of(dev, &d);
  if (r != CUDA_SUCCESS) return r;
  if (!major || !minor) return CUDA_ERROR_INVALID_VALUE;
  *major = d->prop.major;
  *minor = d->prop.minor;
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuDeviceGetProperties(CUdevprop *prop, CUdevice dev) {
  rgpu_rt_device *d;
  CUresult r = device_of(dev, &d);
  if (r != CUDA_SUCCESS) return r;
  if (!prop) return CUDA_ERROR_INVALID_VALUE;
  const struct cudaDeviceProp *p = &d->prop;
  memset(prop, 0, sizeof *prop);
  prop->maxThreadsPerBlock = p->maxThreadsPerBlock;
  for (int i = 0; i < 3; i++) {
    prop->maxThreadsDim[i] = p->maxThreadsDim[i];
    prop->maxGridSize[i] = p->maxGridSize[i];
  }
  prop->sharedMemPerBlock = (int)p->sharedMemPerBlock;
  prop->totalConstantMemory = (int)p->totalConstMem;
  prop->SIMDWidth = p->warpSize;
  prop->memPitch = (int)(p->memPitch > 0x7fffffff ? 0x7fffffff : p->memPitch);
  prop->regsPerBlock = p->regsPerBlock;
  prop->clockRate = d->attrs[CU_DEVICE_ATTRIBUTE_CLOCK_RATE];
  prop->textureAlign = (int)p->textureAlignment;
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev) {
  rgpu_rt_device *d;
  CUresult r = device_of(dev, &d);
  if (r != CUDA_SUCCESS) return r;
  if (!pciBusId || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  snprintf(pciBusId, (size_t)len, "%04x:%02x:%02x.0", (unsigned)d->prop.pciDomainID,
           (unsigned)d->prop.pciBusID, (unsigned)d->prop.pciDeviceID);
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId) {
  rgpu_client *c;
  CUresult r = rgpu_drv_enter(&c);
  if (r != CUDA_SUCCESS) return r;
  if (!dev || !pciBusId) return CUDA_ERROR_INVALID_VALUE;
  /* Accepted forms: [domain]:[bus]:[device].[function] and [bus]:[device]
   * (hexadecimal), as the driver documents. */
  unsigned dom = 0, bus = 0, slot = 0, fn = 0;
  if (sscanf(pciBusId, "%x:%x:%x.%x", &dom, &bus, &slot, &fn) < 3) {
    dom = 0;
    if (sscanf(pciBusId, "%x:%x.%x", &bus, &slot, &fn) < 2) return CUDA_ERROR_INVALID_VALUE;
  }
  int n = 0;
  cudaError_t e = rgpu_rt_device_count(c, &n);
  if (e != cudaSuccess) return rgpu_drv_from_rt(e);
  for (int i = 0; i < n; i++) {
    rgpu_rt_device *d;
    if (rgpu_rt_device_get(c, i, &d) != cudaSuccess) continue;
    if ((unsigned)d->prop.pciDomainID == dom && (unsigned)d->prop.pciBusID == bus &&
        (unsigned)d->prop.pciDeviceID == slot) {
      *dev = i;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_DEVICE;
}

/* ---- error strings -------------------------------------------------------- */

RGPU_DRV CUresult rgpu_drv_cuGetErrorName(CUresult error, const char **pStr) {
  rgpu_rt_count_call();
  if (!pStr) return CUDA_ERROR_INVALID_VALUE;
  const char *n = rgpu_drv_result_name_of((int)error);
  *pStr = n;
  return n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

RGPU_DRV CUresult rgpu_drv_cuGetErrorString(CUresult error, const char **pStr) {
  rgpu_rt_count_call();
  if (!pStr) return CUDA_ERROR_INVALID_VALUE;
  if (!rgpu_drv_result_name_of((int)error)) {
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
  }
  /* The runtime's exact text where the codes correspond (the driver and
   * runtime texts are the same sentences); a driver code without a
   * runtime counterpart gets its name. */
  cudaError_t rt = rgpu_cudart_from_cu((int)error);
  if (rt == cudaErrorUnknown && error != CUDA_ERROR_UNKNOWN)
    *pStr = rgpu_drv_result_name_of((int)error);
  else
    *pStr = rgpu_cudart_error_text((int)rt);
  return CUDA_SUCCESS;
}

/* ---- export tables -------------------------------------------------------- */

RGPU_DRV CUresult rgpu_drv_cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId) {
  rgpu_rt_count_call();
  if (!ppExportTable || !pExportTableId) return CUDA_ERROR_INVALID_VALUE;
  *ppExportTable = NULL;
  /* Private tables between NVIDIA's libraries (a static cudart inside
   * cuBLAS, cuDNN or a program linked with -cudart static asks for them):
   * their contents are undocumented, so they are refused and such
   * libraries are served by rgpu's library-level facades instead. */
  static int logged;
  if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED)) {
    char hex[33];
    for (int i = 0; i < 16; i++)
      snprintf(hex + 2 * i, 3, "%02x", (unsigned char)pExportTableId->bytes[i]);
    RGPU_WARN("cuGetExportTable(%s): NVIDIA's private export tables are not provided; a "
              "library with its own static CUDA runtime cannot run on rgpu's driver facade "
              "(CUDA_ERROR_NOT_FOUND)", hex);
  }
  return CUDA_ERROR_NOT_FOUND;
}

/* ---- peers, affinity, profiler ------------------------------------------------ */

RGPU_DRV CUresult rgpu_drv_cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev,
                                                 CUdevice peerDev) {
  rgpu_rt_device *d;
  CUresult r = device_of(dev, &d);
  if (r == CUDA_SUCCESS) r = device_of(peerDev, &d);
  if (r != CUDA_SUCCESS) return r;
  return RGPU_DRV_RT(cudaDeviceCanAccessPeer(canAccessPeer, dev, peerDev));
}

/* The server driver's answer (DEVICE_QUERY) for the format as the driver
 * names it, so no runtime channel description is in between. */
RGPU_DRV CUresult rgpu_drv_cuDeviceGetTexture1DLinearMaxWidth(size_t *maxWidthInElements,
                                                              CUarray_format format,
                                                              unsigned numChannels, CUdevice dev) {
  cudaError_t saved = rgpu_rt_last_error_get();
  rgpu_client *c;
  CUresult r = rgpu_drv_enter_device(dev, &c);
  if (r != CUDA_SUCCESS) return r;
  if (!maxWidthInElements) return CUDA_ERROR_INVALID_VALUE;
  rgpu_client *owner = rgpu_rt_route(c, dev);
  uint32_t args[2] = {(uint32_t)format, numChannels};
  rgpu_msg_device_query_req q = {.what = RGPU_DQ_TEX1D_LINEAR_WIDTH,
                                 .device = rgpu_rt_local_device(owner, dev), .args = {args, 2}};
  rgpu_buf pay;
  rgpu_buf_init(&pay);
  rgpu_client_reply rr = {.payload = &pay}; /* rep points into pay */
  rgpu_msg_device_query_rep rep;
  memset(&rep, 0, sizeof rep);
  rgpu_status rc = rgpu_call_device_query(owner, -1, 0, &q, &rep, &rr);
  if (rc == 0 && rep.values.count != 1) rc = CUDA_ERROR_UNKNOWN; /* a malformed answer */
  if (rc == 0) *maxWidthInElements = (size_t)rgpu_array_u64(&rep.values, 0);
  rgpu_buf_free(&pay);
  r = rc ? rgpu_drv_reply_ret(c, rc) : CUDA_SUCCESS;
  rgpu_rt_last_error_set(saved);
  return r;
}

/* The runtime's answers (its operation numbers are CUatomicOperation's):
 * the server driver's for a pair of its devices, none over the host link
 * (rgpu_cudart_device.c says why). */
RGPU_DRV CUresult rgpu_drv_cuDeviceGetHostAtomicCapabilities(unsigned int *capabilities,
                                                             const CUatomicOperation *operations,
                                                             unsigned int count, CUdevice dev) {
  rgpu_rt_device *d;
  CUresult r = device_of(dev, &d);
  if (r != CUDA_SUCCESS) return r;
  return RGPU_DRV_RT(cudaDeviceGetHostAtomicCapabilities(
      capabilities, (const enum cudaAtomicOperation *)operations, count, dev));
}

RGPU_DRV CUresult rgpu_drv_cuDeviceGetP2PAtomicCapabilities(unsigned int *capabilities,
                                                            const CUatomicOperation *operations,
                                                            unsigned int count, CUdevice srcDevice,
                                                            CUdevice dstDevice) {
  rgpu_rt_device *d;
  CUresult r = device_of(srcDevice, &d);
  if (r == CUDA_SUCCESS) r = device_of(dstDevice, &d);
  if (r != CUDA_SUCCESS) return r;
  return RGPU_DRV_RT(cudaDeviceGetP2PAtomicCapabilities(
      capabilities, (const enum cudaAtomicOperation *)operations, count, srcDevice, dstDevice));
}

RGPU_DRV CUresult rgpu_drv_cuDeviceGetExecAffinitySupport(int *pi, CUexecAffinityType type,
                                                          CUdevice dev) {
  rgpu_rt_device *d;
  CUresult r = device_of(dev, &d);
  if (r != CUDA_SUCCESS) return r;
  if (!pi || (int)type < 0 || (int)type >= (int)CU_EXEC_AFFINITY_TYPE_MAX)
    return CUDA_ERROR_INVALID_VALUE;
  *pi = 0; /* contexts with an SM count limit are not offered */
  return CUDA_SUCCESS;
}

/* The profiler of the server's GPU is not reachable from here: start and
 * stop are accepted and do nothing, as the runtime's do. */
RGPU_DRV CUresult rgpu_drv_cuProfilerStart(void) {
  if (!rgpu_drv_initialized()) {
    rgpu_rt_count_call();
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return RGPU_DRV_RT(cudaProfilerStart());
}

RGPU_DRV CUresult rgpu_drv_cuProfilerStop(void) {
  if (!rgpu_drv_initialized()) {
    rgpu_rt_count_call();
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return RGPU_DRV_RT(cudaProfilerStop());
}
