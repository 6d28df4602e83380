/* rgpu_driver: the CUDA driver API, loaded at run time.
 *
 * rgpu-server never links libcuda: a worker dlopen()s either the real
 * libcuda.so.1 or softgpu's libsoftgpu.so, which exports the same symbols,
 * and resolves each function under the name cuda.h maps it to (cuMemAlloc ->
 * "cuMemAlloc_v2"), exactly as the real libcudart does. */
#ifndef RGPU_DRIVER_H
#define RGPU_DRIVER_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

/* The functions the handlers call, all required. */
#define RGPU_DRIVER_FUNCS(X)                                                          \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString)               \
  X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetUuid)            \
  X(cuDeviceTotalMem) X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain)             \
  X(cuDevicePrimaryCtxRelease) X(cuDevicePrimaryCtxReset) X(cuCtxSetCurrent)          \
  X(cuCtxSynchronize) X(cuMemGetInfo) X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD)      \
  X(cuMemcpyHtoDAsync) X(cuMemcpyDtoH) X(cuMemcpyDtoHAsync) X(cuMemcpyDtoD)           \
  X(cuMemcpyDtoDAsync) X(cuMemsetD8) X(cuMemsetD16) X(cuMemsetD32) X(cuMemsetD8Async) \
  X(cuMemsetD16Async) X(cuMemsetD32Async) X(cuModuleLoadData) X(cuModuleUnload)       \
  X(cuModuleGetFunction) X(cuModuleGetGlobal) X(cuFuncGetAttribute) X(cuLaunchKernel) \
  X(cuStreamCreateWithPriority) X(cuStreamDestroy) X(cuStreamSynchronize)             \
  X(cuStreamQuery) X(cuStreamWaitEvent) X(cuEventCreate) X(cuEventDestroy)            \
  X(cuEventRecord) X(cuEventSynchronize) X(cuEventQuery) X(cuEventElapsedTime)

/* Present since CUDA 12.4; older drivers lack it and modules then report
 * no parameter tables (the client falls back to its own .nv.info parse). */
/* cuLaunchHostFunc (host callbacks, HOST_FUNC) is optional only so that
 * test drivers without it still load; every real driver since CUDA 10 has it. */
/* cuMemHostRegister/Unregister page-lock the server's staging buffers so
 * that copies on a stream are truly asynchronous (into pageable memory the
 * driver would block the session thread). */
/* cuFuncSetAttribute (FUNC_SET_ATTR), cuLaunchCooperativeKernel and
 * cuLaunchKernelEx (LAUNCH_EX), cuOccupancy... (OCCUPANCY): a driver
 * without them answers NOT_SUPPORTED. */
/* CUDA arrays, texture and surface objects (ARRAY_*, TEXOBJ_*, SURFOBJ_*)
 * stream attributes (STREAM_ATTR) and context limits (CTX_LIMIT): a driver
 * without them answers
 * NOT_SUPPORTED. */
/* Peer access and peer copies (PEER_ACCESS, MEMCPY_DTOD between devices,
 * issue 19): without them PEER_ACCESS answers NOT_SUPPORTED and copies
 * between devices take cuMemcpyDtoD (unified addressing). */
/* DEVICE_QUERY's driver questions (1D linear texture width, atomic
 * capabilities, cluster occupancy) and cuCtxResetPersistingL2Cache: the
 * atomic capabilities are CUDA 13's, the rest 11.x's; a driver without one
 * answers that selector NOT_SUPPORTED, never a made-up value. */
/* Virtual memory management (VMM, rgpu_handlers_vmm.c): CUDA 10.2's; a
 * driver without it answers NOT_SUPPORTED. */
#define RGPU_DRIVER_OPTIONAL_FUNCS(X) X(cuFuncGetParamInfo) X(cuLaunchHostFunc) \
  X(cuMemHostRegister) X(cuMemHostUnregister) X(cuFuncSetAttribute)           \
  X(cuLaunchCooperativeKernel) X(cuLaunchKernelEx)                            \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags)                     \
  X(cuModuleGetFunctionCount) X(cuModuleEnumerateFunctions) X(cuFuncGetName) \
  X(cuDeviceCanAccessPeer) X(cuCtxEnablePeerAccess) X(cuCtxDisablePeerAccess)  \
  X(cuMemcpyPeer) X(cuMemcpyPeerAsync)                                        \
  X(cuArray3DCreate) X(cuArrayDestroy) X(cuMemcpy3DAsync) X(cuTexObjectCreate) \
  X(cuTexObjectDestroy) X(cuSurfObjectCreate) X(cuSurfObjectDestroy)          \
  X(cuStreamGetAttribute) X(cuStreamSetAttribute) X(cuStreamCopyAttributes)     \
  X(cuCtxGetLimit) X(cuCtxSetLimit)                                           \
  X(cuDeviceGetTexture1DLinearMaxWidth) X(cuDeviceGetHostAtomicCapabilities)  \
  X(cuDeviceGetP2PAtomicCapabilities) X(cuOccupancyMaxActiveClusters)         \
  X(cuOccupancyMaxPotentialClusterSize) X(cuCtxResetPersistingL2Cache)       \
  X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemCreate) X(cuMemRelease)    \
  X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess) X(cuMemGetAllocationGranularity) \
  X(cuLinkCreate) X(cuLinkAddData) X(cuLinkComplete) X(cuLinkDestroy) \
  X(cuTensorMapEncodeTiled) X(cuTensorMapEncodeIm2col) X(cuTensorMapEncodeIm2colWide) \
  X(cuTensorMapReplaceAddress) X(cuStreamBatchMemOp) X(cuMemRetainAllocationHandle)

typedef void (*rgpu_sg_print_fn)(void *ctx, const char *text, size_t len);

typedef struct {
  void *lib;
  char path[512];
  int is_softgpu;
#define RGPU_DRIVER_FIELD(name) __typeof__(&name) name;
  RGPU_DRIVER_FUNCS(RGPU_DRIVER_FIELD)
  RGPU_DRIVER_OPTIONAL_FUNCS(RGPU_DRIVER_FIELD)
#undef RGPU_DRIVER_FIELD
  /* softgpu extensions (softgpu/softgpu.h); NULL with the real driver. */
  CUresult (*sgSetPrintHandler)(rgpu_sg_print_fn fn, void *ctx);
  int (*sgIsSoftgpu)(void);
  CUresult (*sgMemCheck)(uint64_t addr, uint64_t len, int write);
  /* Optional: MODULE_LOAD uses it for the JIT's error log, so a refused
   * module reaches the client with the driver's reason; without it plain
   * cuModuleLoadData. */
  __typeof__(&cuModuleLoadDataEx) cuModuleLoadDataEx;
} rgpu_driver;

/* dlopen()s path and resolves every function.  Returns 0, or -1 with a
 * sentence naming the library and dlerror() in err.  Does not call cuInit. */
int rgpu_driver_load(rgpu_driver *d, const char *path, char *err, size_t errlen);
void rgpu_driver_unload(rgpu_driver *d);

/* The name of a status that a device fault leaves sticky in its context
 * (a kernel's illegal address, illegal instruction, ...), or NULL for any
 * other status.  The table is rgpu's, not the driver's: the listener uses
 * it too, and it never loads a driver. */
const char *rgpu_driver_fault_name(CUresult r);
static inline int rgpu_driver_is_fault(CUresult r) { return rgpu_driver_fault_name(r) != NULL; }

/* The driver's name for a status ("CUDA_ERROR_INVALID_VALUE"), never NULL. */
const char *rgpu_driver_error_name(const rgpu_driver *d, CUresult r);

/* Where libsoftgpu.so is: explicit path, else $RGPU_SOFTGPU_LIB, else
 * <dir of /proc/self/exe>/../lib/rgpu/libsoftgpu.so (an install), else
 * <dir>/../lib/libsoftgpu.so (the build tree).  Writes into out. */
void rgpu_driver_softgpu_path(const char *explicit_path, char *out, size_t cap);
/* A private library of rgpu's beside the running program: $env_name when
 * set, else <bindir>/../lib/rgpu/file (installed), else <bindir>/../lib/file
 * (the build tree). */
void rgpu_server_lib_path(const char *env_name, const char *file, char *out, size_t cap);

/* 1 if libcuda.so.1 loads, cuInit succeeds and it has at least one device.
 * Runs the probe in a child process so that the caller (the listener, which
 * must never touch CUDA) stays clean. */
int rgpu_driver_probe_cuda(void);
/* How many devices the driver at path has (probed in a child process), or
 * -1 when it does not load. */
int rgpu_driver_probe_count(const char *path);

#endif
