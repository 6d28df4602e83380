/* The runtime's libraries and the runtime calls on driver objects
 * (cudaLibrary*, cudaGetFuncBySymbol, cudaKernelSetAttributeForDevice, and
 * a library's cudaKernel_t wherever the runtime takes a kernel).
 *
 * CUDA defines cudaLibrary_t as CUlibrary, cudaKernel_t as CUkernel and
 * cudaFunction_t as CUfunction, and lets programs cast between them.  So
 * rgpu's runtime does not keep libraries of its own: the calls here are
 * the driver facade's (driver/rgpu_drv_module.c, compiled into this same
 * library), their CUresult turned into the runtime's error and recorded
 * as the last error the way every runtime call records it.  The thread's
 * runtime is entered first, so the driver sees the primary context the
 * runtime made current, as a runtime-only program expects.
 *
 * The other direction, a registered kernel used through the driver
 * (cudaGetFuncBySymbol's CUfunction, cudaGetKernel's handle as a
 * CUkernel), is resolved on the driver's side: rgpu_drv_resolve_func. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_cudart.h"
#include "rgpu_cudart_op.h"
#include "rgpu_drv_module.h"
#include "rgpu_log.h"

/* A driver call's result as this runtime call's, recorded. */
static cudaError_t from_driver(CUresult r) { return rgpu_rt_ret(rgpu_cudart_from_cu((int)r)); }

/* Enters the runtime (connects, binds the thread's primary context), or
 * returns the error it recorded. */
#define ENTER_OR_RETURN()                       \
  rgpu_client *c;                               \
  do {                                          \
    cudaError_t e_ = rgpu_rt_enter(&c);         \
    if (e_ != cudaSuccess) return e_;           \
  } while (0)

/* ---- libraries ---------------------------------------------------------- */

/* cudaJitOption and cudaLibraryOption number their options as CUjit_option
 * and CUlibraryOption do (the runtime's enums mirror the driver's). */
RGPU_API cudaError_t cudaLibraryLoadData(cudaLibrary_t *library, const void *code,
                                         enum cudaJitOption *jitOptions, void **jitOptionsValues,
                                         unsigned int numJitOptions,
                                         enum cudaLibraryOption *libraryOptions,
                                         void **libraryOptionValues,
                                         unsigned int numLibraryOptions) {
  ENTER_OR_RETURN();
  (void)c;
  return from_driver(rgpu_drv_cuLibraryLoadData(
      library, code, (CUjit_option *)jitOptions, jitOptionsValues, numJitOptions,
      (CUlibraryOption *)libraryOptions, libraryOptionValues, numLibraryOptions));
}

RGPU_API cudaError_t cudaLibraryLoadFromFile(cudaLibrary_t *library, const char *fileName,
                                             enum cudaJitOption *jitOptions,
                                             void **jitOptionsValues, unsigned int numJitOptions,
                                             enum cudaLibraryOption *libraryOptions,
                                             void **libraryOptionValues,
                                             unsigned int numLibraryOptions) {
  ENTER_OR_RETURN();
  (void)c;
  return from_driver(rgpu_drv_cuLibraryLoadFromFile(
      library, fileName, (CUjit_option *)jitOptions, jitOptionsValues, numJitOptions,
      (CUlibraryOption *)libraryOptions, libraryOptionValues, numLibraryOptions));
}

RGPU_API cudaError_t cudaLibraryUnload(cudaLibrary_t library) {
  ENTER_OR_RETURN();
  (void)c;
  return from_driver(rgpu_drv_cuLibraryUnload(library));
}

RGPU_API cudaError_t cudaLibraryGetKernel(cudaKernel_t *pKernel, cudaLibrary_t library,
                                          const char *name) {
  ENTER_OR_RETURN();
  (void)c;
  return from_driver(rgpu_drv_cuLibraryGetKernel(pKernel, library, name));
}

RGPU_API cudaError_t cudaLibraryGetGlobal(void **dptr, size_t *bytes, cudaLibrary_t library,
                                          const char *name) {
  ENTER_OR_RETURN();
  (void)c;
  CUdeviceptr p = 0;
  CUresult r = rgpu_drv_cuLibraryGetGlobal(&p, bytes, library, name);
  if (r == CUDA_SUCCESS && dptr) *dptr = (void *)(uintptr_t)p;
  return from_driver(r);
}

RGPU_API cudaError_t cudaLibraryGetKernelCount(unsigned int *count, cudaLibrary_t lib) {
  ENTER_OR_RETURN();
  (void)c;
  return from_driver(rgpu_drv_cuLibraryGetKernelCount(count, lib));
}

RGPU_API cudaError_t cudaLibraryEnumerateKernels(cudaKernel_t *kernels, unsigned int numKernels,
                                                 cudaLibrary_t lib) {
  ENTER_OR_RETURN();
  (void)c;
  return from_driver(rgpu_drv_cuLibraryEnumerateKernels(kernels, numKernels, lib));
}

/* ---- registered kernels for the driver ---------------------------------- */

/* The CUfunction of a registered kernel in the current device's context:
 * its module there (loaded now if no launch loaded it yet) and the
 * function looked up by its device name once. */
RGPU_API cudaError_t cudaGetFuncBySymbol(cudaFunction_t *functionPtr, const void *symbolPtr) {
  ENTER_OR_RETURN();
  if (!functionPtr) return rgpu_rt_ret(cudaErrorInvalidValue);
  rgpu_rt_func *f = rgpu_rt_func_by_stub(symbolPtr);
  if (!f) return rgpu_rt_ret(cudaErrorInvalidDeviceFunction);
  CUfunction out = NULL;
  CUresult r = rgpu_drv_runtime_function(c, f, rgpu_rt_current_device(), &out);
  if (r == CUDA_SUCCESS) *functionPtr = out;
  return from_driver(r);
}

/* A library's kernel: the driver's per-device attribute.  A registered
 * kernel's (cudaGetKernel) attributes are the runtime's, one set for all
 * devices (its record), so the device is checked and the value set there,
 * as cudaFuncSetAttribute does. */
RGPU_API cudaError_t cudaKernelSetAttributeForDevice(cudaKernel_t kernel,
                                                     enum cudaFuncAttribute attr, int value,
                                                     int device) {
  ENTER_OR_RETURN();
  if (rgpu_rt_func_record(kernel)) {
    int n = 0;
    cudaError_t e = rgpu_rt_device_count(c, &n);
    if (e != cudaSuccess) return rgpu_rt_ret(e);
    if (device < 0 || device >= n) return rgpu_rt_ret(cudaErrorInvalidDevice);
    return cudaFuncSetAttribute(kernel, attr, value);
  }
  if (!rgpu_drv_is_function(kernel)) return rgpu_rt_ret(cudaErrorInvalidDeviceFunction);
  /* cudaFuncAttribute and CUfunction_attribute number the settable
   * attributes alike. */
  return from_driver(
      rgpu_drv_cuKernelSetAttribute((CUfunction_attribute)attr, value, (CUkernel)kernel, device));
}

/* ---- a library's kernel where the runtime takes a kernel ----------------- */

_Static_assert(sizeof(cudaLaunchAttribute) == sizeof(CUlaunchAttribute) &&
                   offsetof(cudaLaunchAttribute, val) == offsetof(CUlaunchAttribute, value),
               "cudaLaunchAttribute and CUlaunchAttribute share one layout");

int rgpu_rt_is_driver_function(const void *func) { return rgpu_drv_is_function(func); }

cudaError_t rgpu_rt_driver_launch(const void *func, dim3 grid, dim3 block, void **args,
                                  size_t shmem, cudaStream_t stream, int per_thread,
                                  int cooperative, const unsigned cluster[3]) {
  ENTER_OR_RETURN();
  (void)c;
  CUlaunchAttribute attrs[2];
  unsigned n = 0;
  if (cooperative) {
    attrs[n] = (CUlaunchAttribute){.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE};
    attrs[n++].value.cooperative = 1;
  }
  if (cluster && (cluster[0] || cluster[1] || cluster[2])) {
    attrs[n] = (CUlaunchAttribute){.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION};
    attrs[n].value.clusterDim.x = cluster[0] ? cluster[0] : 1;
    attrs[n].value.clusterDim.y = cluster[1] ? cluster[1] : 1;
    attrs[n++].value.clusterDim.z = cluster[2] ? cluster[2] : 1;
  }
  if (shmem > UINT32_MAX) return rgpu_rt_ret(cudaErrorInvalidValue);
  CUlaunchConfig cfg = {.gridDimX = grid.x, .gridDimY = grid.y, .gridDimZ = grid.z,
                        .blockDimX = block.x, .blockDimY = block.y, .blockDimZ = block.z,
                        .sharedMemBytes = (unsigned)shmem, .hStream = (CUstream)stream,
                        .attrs = n ? attrs : NULL, .numAttrs = n};
  CUresult r = per_thread ? rgpu_drv_cuLaunchKernelEx_ptsz(&cfg, (CUfunction)func, args, NULL)
                          : rgpu_drv_cuLaunchKernelEx(&cfg, (CUfunction)func, args, NULL);
  return from_driver(r);
}

/* The runtime's struct from the driver's attributes, one cached answer
 * (FUNC_GET_ATTRS once per function). */
cudaError_t rgpu_rt_driver_func_attributes(struct cudaFuncAttributes *attr, const void *func) {
  ENTER_OR_RETURN();
  (void)c;
  if (!attr) return rgpu_rt_ret(cudaErrorInvalidValue);
  static const struct {
    CUfunction_attribute cu;
    size_t at;
    int is_size;
  } map[] = {
#define RGPU_FA(cu, field, sz) {cu, offsetof(struct cudaFuncAttributes, field), sz}
      RGPU_FA(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, sharedSizeBytes, 1),
      RGPU_FA(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, constSizeBytes, 1),
      RGPU_FA(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, localSizeBytes, 1),
      RGPU_FA(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, maxThreadsPerBlock, 0),
      RGPU_FA(CU_FUNC_ATTRIBUTE_NUM_REGS, numRegs, 0),
      RGPU_FA(CU_FUNC_ATTRIBUTE_PTX_VERSION, ptxVersion, 0),
      RGPU_FA(CU_FUNC_ATTRIBUTE_BINARY_VERSION, binaryVersion, 0),
      RGPU_FA(CU_FUNC_ATTRIBUTE_CACHE_MODE_CA, cacheModeCA, 0),
      RGPU_FA(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, maxDynamicSharedSizeBytes, 0),
      RGPU_FA(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, preferredShmemCarveout, 0),
      RGPU_FA(CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET, clusterDimMustBeSet, 0),
      RGPU_FA(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, requiredClusterWidth, 0),
      RGPU_FA(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT, requiredClusterHeight, 0),
      RGPU_FA(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH, requiredClusterDepth, 0),
      RGPU_FA(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, nonPortableClusterSizeAllowed,
              0),
      RGPU_FA(CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
              clusterSchedulingPolicyPreference, 0),
#undef RGPU_FA
  };
  struct cudaFuncAttributes out;
  memset(&out, 0, sizeof out);
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
    int v = 0;
    CUresult r = rgpu_drv_cuFuncGetAttribute(&v, map[i].cu, (CUfunction)func);
    if (r != CUDA_SUCCESS) return from_driver(r);
    char *field = (char *)&out + map[i].at;
    if (map[i].is_size) {
      size_t sz = (size_t)(uint32_t)v;
      memcpy(field, &sz, sizeof sz);
    } else {
      memcpy(field, &v, sizeof v);
    }
  }
  *attr = out;
  return cudaSuccess;
}

cudaError_t rgpu_rt_driver_func_set_attribute(const void *func, enum cudaFuncAttribute attr,
                                              int value) {
  ENTER_OR_RETURN();
  (void)c;
  return from_driver(
      rgpu_drv_cuFuncSetAttribute((CUfunction)func, (CUfunction_attribute)attr, value));
}

cudaError_t rgpu_rt_driver_func_name(const char **name, const void *func) {
  return from_driver(rgpu_drv_cuFuncGetName(name, (CUfunction)func));
}

cudaError_t rgpu_rt_driver_func_param_info(const void *func, size_t index, size_t *offset,
                                           size_t *size) {
  ENTER_OR_RETURN();
  (void)c;
  return from_driver(rgpu_drv_cuFuncGetParamInfo((CUfunction)func, index, offset, size));
}

cudaError_t rgpu_rt_driver_occupancy(int *numBlocks, const void *func, int blockSize,
                                     size_t smem, unsigned flags) {
  ENTER_OR_RETURN();
  (void)c;
  return from_driver(rgpu_drv_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
      numBlocks, (CUfunction)func, blockSize, smem, flags));
}

cudaError_t rgpu_rt_driver_cluster_occupancy(int *out, const void *func,
                                             const cudaLaunchConfig_t *cfg, int active) {
  ENTER_OR_RETURN();
  (void)c;
  if (cfg->dynamicSmemBytes > UINT32_MAX) return rgpu_rt_ret(cudaErrorInvalidValue);
  /* cudaLaunchAttribute and CUlaunchAttribute are one layout (CUDA lets
   * programs cast between them). */
  CUlaunchConfig dc = {.gridDimX = cfg->gridDim.x, .gridDimY = cfg->gridDim.y,
                       .gridDimZ = cfg->gridDim.z, .blockDimX = cfg->blockDim.x,
                       .blockDimY = cfg->blockDim.y, .blockDimZ = cfg->blockDim.z,
                       .sharedMemBytes = (unsigned)cfg->dynamicSmemBytes,
                       .hStream = (CUstream)cfg->stream,
                       .attrs = (CUlaunchAttribute *)cfg->attrs, .numAttrs = cfg->numAttrs};
  CUresult r = active ? rgpu_drv_cuOccupancyMaxActiveClusters(out, (CUfunction)func, &dc)
                      : rgpu_drv_cuOccupancyMaxPotentialClusterSize(out, (CUfunction)func, &dc);
  return from_driver(r);
}

cudaError_t rgpu_rt_driver_launch_with(const void *func, dim3 grid, dim3 block, void **args,
                                       size_t shmem, rgpu_rt_launch_use use, void *ctx) {
  ENTER_OR_RETURN();
  if (shmem > UINT32_MAX) return rgpu_rt_ret(cudaErrorInvalidValue);
  rgpu_drv_launch_cfg cfg = {.grid = grid, .block = block, .shmem = (unsigned)shmem};
  uint8_t stackbuf[4096];
  uint8_t *heap = NULL;
  rgpu_rt_op op;
  CUresult r = rgpu_drv_launch_prepare(c, (CUfunction)func, &cfg, args, NULL, stackbuf,
                                       sizeof stackbuf, &heap, &op);
  cudaError_t e = r == CUDA_SUCCESS ? use(c, &op, ctx) : from_driver(r);
  free(heap);
  return e;
}
