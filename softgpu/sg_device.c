/* softgpu: initialization, devices, attributes, contexts and error texts.
 *
 * Behaviour follows the real 13.0 driver where it was measured on an H200
 * (softgpu/tools/probe_h200.txt): which calls work before cuInit, which
 * error a destroyed or reset context gives, the error strings. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sg_internal.h"
#include "softgpu.h"

sg_config sg_cfg;
int sg_initialized;
static sg_device *devices;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static CUresult init_result = CUDA_ERROR_NOT_INITIALIZED;

int sg_parse_size(const char *s, uint64_t *out) {
  if (!s || !*s) return -1;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s || errno) return -1;
  unsigned shift = 0;
  switch (toupper((unsigned char)*end)) {
  case 0: break;
  case 'K': shift = 10; end++; break;
  case 'M': shift = 20; end++; break;
  case 'G': shift = 30; end++; break;
  case 'T': shift = 40; end++; break;
  default: return -1;
  }
  if (*end == 'i' || *end == 'I') end++; /* accept "4GiB" and "4GB" */
  if (*end == 'b' || *end == 'B') end++;
  if (*end) return -1;
  if (shift && v > (~0ull >> shift)) return -1;
  *out = v << shift;
  return 0;
}

static int env_int(const char *name, int def, int lo, int hi) {
  const char *s = getenv(name);
  if (!s || !*s) return def;
  char *end;
  long v = strtol(s, &end, 10);
  if (*end || v < lo || v > hi) {
    RGPU_WARN("ignoring %s=%s (want an integer %d..%d)", name, s, lo, hi);
    return def;
  }
  return (int)v;
}

static void do_init(void) {
  rgpu_log_set_component("softgpu");
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  sg_cfg.ncpus = n > 0 ? (int)n : 1;
  sg_cfg.ndevices = env_int("RGPU_SOFTGPU_DEVICES", 1, 1, 64);
  sg_cfg.nworkers = env_int("RGPU_SOFTGPU_THREADS", sg_cfg.ncpus, 1, 1024);
  int cc = env_int("RGPU_SOFTGPU_CC", 75, 50, 129);
  sg_cfg.cc_major = cc / 10;
  sg_cfg.cc_minor = cc % 10;
  sg_cfg.mem_limit = 4ull << 30;
  const char *m = getenv("RGPU_SOFTGPU_MEM");
  if (m && *m) {
    uint64_t v;
    if (sg_parse_size(m, &v) == 0 && v >= (1u << 20))
      sg_cfg.mem_limit = v;
    else
      RGPU_WARN("ignoring RGPU_SOFTGPU_MEM=%s (want bytes >= 1M, e.g. 4G or 512M)", m);
  }
  devices = calloc((size_t)sg_cfg.ndevices, sizeof *devices);
  if (!devices) {
    init_result = CUDA_ERROR_OUT_OF_MEMORY;
    return;
  }
  for (int i = 0; i < sg_cfg.ndevices; i++) {
    sg_device *d = &devices[i];
    d->ordinal = i;
    pthread_mutex_init(&d->lock, NULL);
    pthread_mutex_init(&d->mem_lock, NULL);
    d->primary = calloc(1, sizeof *d->primary);
    if (!d->primary || sg_handle_add(d->primary, SG_H_CTX) != 0) {
      init_result = CUDA_ERROR_OUT_OF_MEMORY;
      return;
    }
    d->primary->dev = d;
    d->primary->is_primary = 1;
  }
  RGPU_INFO("%d device(s), %llu MiB each, compute capability %d.%d, %d worker threads",
            sg_cfg.ndevices, (unsigned long long)(sg_cfg.mem_limit >> 20), sg_cfg.cc_major,
            sg_cfg.cc_minor, sg_cfg.nworkers);
  sg_initialized = 1;
  init_result = CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuInit(unsigned int Flags) {
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  pthread_once(&init_once, do_init);
  return init_result;
}

SG_EXPORT CUresult CUDAAPI cuDriverGetVersion(int *driverVersion) {
  if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = 13000;
  return CUDA_SUCCESS;
}

SG_EXPORT int sgIsSoftgpu(void) { return 1; }

/* rgpu-server's CPU BLAS runs as a host function on softgpu's streams and
 * reads operands whose addresses only the stream's own order fixes (a
 * cublasSgemmBatched pointer array filled by a kernel just before): it
 * checks each one here, when it runs, against the live allocations. */
SG_EXPORT CUresult sgMemCheck(uint64_t addr, uint64_t len, int write) {
  void *host;
  return sg_mem_check(addr, len, write, &host);
}

sg_device *sg_device_get(int ordinal) {
  if (!sg_initialized || ordinal < 0 || ordinal >= sg_cfg.ndevices) return NULL;
  return &devices[ordinal];
}

/* ---- devices ------------------------------------------------------------ */

static CUresult check_dev(CUdevice dev, sg_device **out) {
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  sg_device *d = sg_device_get(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  if (out) *out = d;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuDeviceGetCount(int *count) {
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  *count = sg_cfg.ndevices;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = check_dev(ordinal, NULL);
  if (r) return r;
  *device = ordinal;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev) {
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = check_dev(dev, NULL);
  if (r) return r;
  snprintf(name, (size_t)len, "rgpu softgpu (CPU, sm_%d%d)", sg_cfg.cc_major, sg_cfg.cc_minor);
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) {
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = check_dev(dev, NULL);
  if (r) return r;
  /* Stable across runs so that tools keyed by UUID see the same device. */
  static const char tag[12] = {'r', 'g', 'p', 'u', '-', 's', 'o', 'f', 't', 'g', 'p', 'u'};
  memcpy(uuid->bytes, tag, 12);
  uuid->bytes[12] = 0;
  uuid->bytes[13] = 0;
  uuid->bytes[14] = (char)(dev >> 8);
  uuid->bytes[15] = (char)dev;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev) {
  if (!pciBusId || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = check_dev(dev, NULL);
  if (r) return r;
  /* domain:bus:device.function, the bus numbered like PCI_BUS_ID reports it */
  snprintf(pciBusId, (size_t)len, "0000:%02x:00.0", (unsigned)dev & 0xff);
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuDeviceTotalMem(size_t *bytes, CUdevice dev) {
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = check_dev(dev, NULL);
  if (r) return r;
  *bytes = (size_t)sg_cfg.mem_limit;
  return CUDA_SUCCESS;
}

/* Values of an sm_75-class board (texture/surface limits and feature flags
 * as the H200 reports them where sm_75 is the same), with everything that
 * softgpu does not implement (managed memory, memory pools, IPC, clusters,
 * cooperative launch, host registration) reported as absent so that
 * callers do not try it. */
static int attribute_value(CUdevice_attribute a, int dev, int *v) {
  int cc = sg_cfg.cc_major * 10 + sg_cfg.cc_minor;
  switch ((int)a) {
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: *v = 1024; break;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *v = 1024; break;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *v = 64; break;
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *v = 2147483647; break;
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: *v = 65535; break;
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *v = 65535; break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *v = 49152; break;
  case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: *v = 65536; break;
  case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
  case CU_DEVICE_ATTRIBUTE_MAX_PITCH: *v = 2147483647; break;
  case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: *v = 65536; break;
  case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *v = 1590000; break;
  case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: *v = 512; break;
  case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: *v = 1; break;
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = sg_cfg.ncpus; break;
  case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_INTEGRATED: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: *v = 1; break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: *v = CU_COMPUTEMODE_DEFAULT; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH: *v = 131072; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH: *v = 131072; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT: *v = 65536; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH: *v = 16384; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT: *v = 16384; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH: *v = 16384; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH: *v = 32768; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT: *v = 32768; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS: *v = 2048; break;
  case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT: *v = 512; break;
  case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: *v = 1; break;
  case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *v = dev; break;
  case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_TCC_DRIVER: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *v = 7001000; break;
  case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *v = 256; break;
  case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *v = 4194304; break;
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *v = cc >= 80 ? 2048 : 1024; break;
  case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: *v = 2; break;
  case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *v = 1; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH: *v = 32768; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS: *v = 2048; break;
  case 44 /* CAN_TEX2D_GATHER, deprecated */: *v = 1; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_WIDTH: *v = 32768; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_HEIGHT: *v = 32768; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE: *v = 8192; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE: *v = 8192; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE: *v = 32768; break;
  case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: *v = 32; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH: *v = 32768; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH: *v = 32768; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS: *v = 2046; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_WIDTH: *v = 32768; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_WIDTH: *v = 131072; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_HEIGHT: *v = 65536; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_WIDTH: *v = 16384; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_HEIGHT: *v = 16384; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_DEPTH: *v = 16384; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_WIDTH: *v = 32768; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_LAYERS: *v = 2048; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_WIDTH: *v = 32768; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_HEIGHT: *v = 32768; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_LAYERS: *v = 2048; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_WIDTH: *v = 32768; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH: *v = 32768; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS: *v = 2046; break;
  case 69 /* MAXIMUM_TEXTURE1D_LINEAR_WIDTH, deprecated */: *v = 268435456; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH: *v = 131072; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_HEIGHT: *v = 65000; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_PITCH: *v = 2097120; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH: *v = 32768; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT: *v = 32768; break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = sg_cfg.cc_major; break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = sg_cfg.cc_minor; break;
  case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH: *v = 32768; break;
  case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: *v = 1; break;
  case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: *v = 1; break;
  case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: *v = 1; break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *v = 233472; break;
  case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: *v = 65536; break;
  case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO: *v = 32; break;
  case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED: *v = 1; break;
  case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: *v = 1; break;
  case 92: case 93: case 94: /* v1 stream mem ops, deprecated */ *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: *v = 0; break;
  case 96 /* COOPERATIVE_MULTI_DEVICE_LAUNCH, deprecated */: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = 232448; break;
  case CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: *v = 1; break;
  case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *v = 1; break;
  case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: *v = cc >= 80 ? 32 : 16; break;
  case CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED: *v = 1; break;
  case CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS: *v = 1; break; /* sg_memop.c */
  case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR: *v = 1; break;
  case CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT: *v = 1; break;
  case CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_NUMA_CONFIG: *v = CU_DEVICE_NUMA_CONFIG_NONE; break;
  case CU_DEVICE_ATTRIBUTE_NUMA_ID: *v = -1; break;
  case CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_MPS_ENABLED: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: *v = -1; break;
  case CU_DEVICE_ATTRIBUTE_D3D12_CIG_SUPPORTED: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_MAXIMUM_LENGTH: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_VULKAN_CIG_SUPPORTED: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_HOST_ALLOC_DMA_BUF_SUPPORTED: *v = 0; break;
  /* Some of CUDA's atomic forms over the host link, not all (atomic_capability). */
  case CU_DEVICE_ATTRIBUTE_ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED: *v = 1; break;
  default: return -1;
  }
  return 0;
}

SG_EXPORT CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = check_dev(dev, NULL);
  if (r) return r;
  int v;
  if (attribute_value(attrib, dev, &v) != 0) return CUDA_ERROR_INVALID_VALUE;
  *pi = v;
  return CUDA_SUCCESS;
}

/* ---- atomic capabilities ------------------------------------------------ */

/* What the PTX interpreter's atom and red execute for each CUDA atomic
 * operation: 32- and 64-bit scalars (no 128-bit or vector forms), integer
 * operations on signed and unsigned operands, red forms of all but exch and
 * cas (PTX has none), inc and dec on u32 only (as PTX defines them), and
 * f32/f64 add, min and max.  The interpreter runs them as the CPU's own
 * atomics on the process's memory, which holds the host's memory and every
 * softgpu device's alike: the host link and every device pair support the
 * same set, natively.  Not all of CUDA's forms, hence
 * ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED. */
static int atomic_capability(unsigned op, unsigned *caps) {
  const unsigned ints = CU_ATOMIC_CAPABILITY_SIGNED | CU_ATOMIC_CAPABILITY_UNSIGNED;
  const unsigned both = CU_ATOMIC_CAPABILITY_SCALAR_32 | CU_ATOMIC_CAPABILITY_SCALAR_64;
  const unsigned red = CU_ATOMIC_CAPABILITY_REDUCTION;
  switch (op) {
  case CU_ATOMIC_OPERATION_INTEGER_ADD:
  case CU_ATOMIC_OPERATION_INTEGER_MIN:
  case CU_ATOMIC_OPERATION_INTEGER_MAX:
  case CU_ATOMIC_OPERATION_AND:
  case CU_ATOMIC_OPERATION_OR:
  case CU_ATOMIC_OPERATION_XOR: *caps = ints | both | red; return 0;
  case CU_ATOMIC_OPERATION_INTEGER_INCREMENT:
  case CU_ATOMIC_OPERATION_INTEGER_DECREMENT:
    *caps = CU_ATOMIC_CAPABILITY_UNSIGNED | CU_ATOMIC_CAPABILITY_SCALAR_32 | red;
    return 0;
  case CU_ATOMIC_OPERATION_EXCHANGE:
  case CU_ATOMIC_OPERATION_CAS: *caps = ints | both; return 0;
  case CU_ATOMIC_OPERATION_FLOAT_ADD:
  case CU_ATOMIC_OPERATION_FLOAT_MIN:
  case CU_ATOMIC_OPERATION_FLOAT_MAX: *caps = both | red; return 0;
  default: return -1;
  }
}

static CUresult atomic_capabilities(unsigned int *capabilities, const CUatomicOperation *operations,
                                    unsigned int count) {
  if (!capabilities || !operations || count == 0) return CUDA_ERROR_INVALID_VALUE;
  /* All checked before any is written, so a refused list leaves the output alone. */
  for (unsigned i = 0; i < count; i++) {
    unsigned c;
    if (atomic_capability((unsigned)operations[i], &c)) return CUDA_ERROR_INVALID_VALUE;
  }
  for (unsigned i = 0; i < count; i++) atomic_capability((unsigned)operations[i], &capabilities[i]);
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuDeviceGetHostAtomicCapabilities(unsigned int *capabilities,
                                                            const CUatomicOperation *operations,
                                                            unsigned int count, CUdevice dev) {
  CUresult r = check_dev(dev, NULL);
  if (r) return r;
  return atomic_capabilities(capabilities, operations, count);
}

SG_EXPORT CUresult CUDAAPI cuDeviceGetP2PAtomicCapabilities(unsigned int *capabilities,
                                                           const CUatomicOperation *operations,
                                                           unsigned int count, CUdevice srcDevice,
                                                           CUdevice dstDevice) {
  CUresult r = check_dev(srcDevice, NULL);
  if (!r) r = check_dev(dstDevice, NULL);
  if (r) return r;
  if (srcDevice == dstDevice) return CUDA_ERROR_INVALID_DEVICE; /* a device is not its own peer */
  return atomic_capabilities(capabilities, operations, count);
}

/* ---- contexts ----------------------------------------------------------- */

#define SG_CTX_STACK_MAX 64
static __thread sg_ctx *ctx_stack[SG_CTX_STACK_MAX];
static __thread int ctx_depth;

static sg_ctx *tls_top(void) { return ctx_depth ? ctx_stack[ctx_depth - 1] : NULL; }

CUresult sg_ctx_usable(sg_ctx *c) {
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!c || !sg_handle_ok(c, SG_H_CTX)) return CUDA_ERROR_INVALID_CONTEXT;
  if (!c->active) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  int s = atomic_load(&c->sticky);
  return s ? (CUresult)s : CUDA_SUCCESS;
}

CUresult sg_current(sg_ctx **out) {
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  sg_ctx *c = tls_top();
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  CUresult r = sg_ctx_usable(c);
  if (r) return r;
  *out = c;
  return CUDA_SUCCESS;
}

void sg_ctx_set_sticky(sg_ctx *c, CUresult err) {
  int zero = 0;
  atomic_compare_exchange_strong(&c->sticky, &zero, (int)err);
}

static CUresult ctx_activate(sg_ctx *c, unsigned flags) {
  c->flags = flags;
  atomic_store(&c->sticky, 0);
  memset(c->limits, 0, sizeof c->limits);
  c->cache_config = CU_FUNC_CACHE_PREFER_NONE;
  atomic_store(&c->peers, 0);
  atomic_store(&c->heap_used, 0);
  c->streams = NULL;
  c->events = NULL;
  c->modules = NULL;
  CUresult r = sg_stream_create_legacy(c);
  if (r) return r;
  c->active = 1;
  return CUDA_SUCCESS;
}

/* Tears down everything the context owns.  Work still queued is allowed to
 * finish first (as cuCtxDestroy does), so workers never touch freed state. */
static void ctx_deactivate(sg_ctx *c) {
  if (!c->active) return;
  sg_ctx_drain(c);
  c->active = 0;
  sg_ctx_release_modules(c);
  sg_ctx_release_streams(c);
  sg_array_release_ctx(c);
  sg_mem_release_ctx(c);
}

static int valid_ctx_flags(unsigned flags) {
  unsigned sched = flags & CU_CTX_SCHED_MASK;
  if (sched != 0 && sched != CU_CTX_SCHED_SPIN && sched != CU_CTX_SCHED_YIELD &&
      sched != CU_CTX_SCHED_BLOCKING_SYNC)
    return 0;
  unsigned known = CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX |
                   CU_CTX_COREDUMP_ENABLE | CU_CTX_USER_COREDUMP_ENABLE | CU_CTX_SYNC_MEMOPS;
  return (flags & ~known) == 0;
}

SG_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  sg_device *d;
  CUresult r = check_dev(dev, &d);
  if (r) return r;
  pthread_mutex_lock(&d->lock);
  if (d->primary_refs == 0) {
    r = ctx_activate(d->primary, d->primary_flags);
    if (r) {
      pthread_mutex_unlock(&d->lock);
      return r;
    }
  }
  d->primary_refs++;
  pthread_mutex_unlock(&d->lock);
  *pctx = d->primary;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) {
  sg_device *d;
  CUresult r = check_dev(dev, &d);
  if (r) return r;
  pthread_mutex_lock(&d->lock);
  if (d->primary_refs == 0) {
    pthread_mutex_unlock(&d->lock);
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (--d->primary_refs == 0) ctx_deactivate(d->primary);
  pthread_mutex_unlock(&d->lock);
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev) {
  sg_device *d;
  CUresult r = check_dev(dev, &d);
  if (r) return r;
  pthread_mutex_lock(&d->lock);
  ctx_deactivate(d->primary);
  d->primary_refs = 0;
  d->primary_flags = 0;
  pthread_mutex_unlock(&d->lock);
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) {
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  sg_device *d;
  CUresult r = check_dev(dev, &d);
  if (r) return r;
  pthread_mutex_lock(&d->lock);
  *flags = d->primary_flags;
  *active = d->primary_refs > 0;
  pthread_mutex_unlock(&d->lock);
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  sg_device *d;
  CUresult r = check_dev(dev, &d);
  if (r) return r;
  if (!valid_ctx_flags(flags)) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&d->lock);
  d->primary_flags = flags;
  if (d->primary_refs > 0) d->primary->flags = flags;
  pthread_mutex_unlock(&d->lock);
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
                                       CUdevice dev) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  sg_device *d;
  CUresult r = check_dev(dev, &d);
  if (r) return r;
  if (!valid_ctx_flags(flags)) return CUDA_ERROR_INVALID_VALUE;
  if (params && (params->execAffinityParams || params->numExecAffinityParams || params->cigParams)) {
    RGPU_WARN("cuCtxCreate execution affinity / CIG parameters are not supported");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (ctx_depth >= SG_CTX_STACK_MAX) return CUDA_ERROR_OUT_OF_MEMORY;
  sg_ctx *c = calloc(1, sizeof *c);
  if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
  c->dev = d;
  r = ctx_activate(c, flags);
  if (r || sg_handle_add(c, SG_H_CTX) != 0) {
    if (!r) {
      ctx_deactivate(c);
      r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    free(c);
    return r;
  }
  ctx_stack[ctx_depth++] = c;
  *pctx = c;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuCtxDestroy(CUcontext ctx) {
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  if (!sg_handle_ok(ctx, SG_H_CTX)) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx->is_primary) {
    /* The primary context belongs to cuDevicePrimaryCtx*; 13.0 refuses it here. */
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  sg_handle_del(ctx);
  ctx_deactivate(ctx);
  /* Remove it from this thread's stack; other threads find a dead handle. */
  int j = 0;
  for (int i = 0; i < ctx_depth; i++)
    if (ctx_stack[i] != ctx) ctx_stack[j++] = ctx_stack[i];
  ctx_depth = j;
  free(ctx);
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ctx) {
    if (ctx_depth) ctx_depth--;
    return CUDA_SUCCESS;
  }
  if (!sg_handle_ok(ctx, SG_H_CTX)) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx_depth)
    ctx_stack[ctx_depth - 1] = ctx;
  else
    ctx_stack[ctx_depth++] = ctx;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx) {
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  *pctx = tls_top();
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx) {
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  if (!sg_handle_ok(ctx, SG_H_CTX)) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx_depth >= SG_CTX_STACK_MAX) return CUDA_ERROR_OUT_OF_MEMORY;
  ctx_stack[ctx_depth++] = ctx;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx) {
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ctx_depth) return CUDA_ERROR_INVALID_CONTEXT;
  sg_ctx *c = ctx_stack[--ctx_depth];
  if (pctx) *pctx = c;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuCtxGetDevice(CUdevice *device) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  sg_ctx *c = tls_top();
  if (!c || !sg_handle_ok(c, SG_H_CTX)) return CUDA_ERROR_INVALID_CONTEXT;
  if (!c->active) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *device = c->dev->ordinal;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuCtxGetFlags(unsigned int *flags) {
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  sg_ctx *c;
  CUresult r = sg_current(&c);
  if (r) return r;
  *flags = c->flags;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuCtxSynchronize(void) {
  sg_ctx *c;
  CUresult r = sg_current(&c);
  if (r) return r;
  sg_ctx_drain(c);
  return (CUresult)atomic_load(&c->sticky);
}

SG_EXPORT CUresult CUDAAPI cuCtxGetApiVersion(CUcontext ctx, unsigned int *version) {
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ctx) ctx = tls_top();
  if (!ctx || !sg_handle_ok(ctx, SG_H_CTX)) return CUDA_ERROR_INVALID_CONTEXT;
  /* The value the real driver reports for every context since CUDA 3.2. */
  *version = 3020;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority) {
  sg_ctx *c;
  CUresult r = sg_current(&c);
  if (r) return r;
  if (leastPriority) *leastPriority = 0;
  if (greatestPriority) *greatestPriority = -5;
  return CUDA_SUCCESS;
}

/* Defaults of an sm_75 board.  The values are bookkeeping only: the
 * interpreter's stacks and printf buffer are not bounded by them. */
static int limit_default(CUlimit limit, size_t *v) {
  switch (limit) {
  case CU_LIMIT_STACK_SIZE: *v = 1024; return 0;
  case CU_LIMIT_PRINTF_FIFO_SIZE: *v = 1 << 20; return 0;
  case CU_LIMIT_MALLOC_HEAP_SIZE: *v = 8 << 20; return 0;
  case CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT: *v = 2048; return 0;
  case CU_LIMIT_MAX_L2_FETCH_GRANULARITY: *v = 64; return 0;
  case CU_LIMIT_PERSISTING_L2_CACHE_SIZE: *v = 0; return 0;
  case CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH: return CUDA_ERROR_UNSUPPORTED_LIMIT; /* no device-side sync on sm_75+ */
  default: return CUDA_ERROR_INVALID_VALUE;
  }
}

SG_EXPORT CUresult CUDAAPI cuCtxGetLimit(size_t *pvalue, CUlimit limit) {
  if (!pvalue) return CUDA_ERROR_INVALID_VALUE;
  sg_ctx *c;
  CUresult r = sg_current(&c);
  if (r) return r;
  size_t v;
  int e = limit_default(limit, &v);
  if (e) return (CUresult)e;
  if ((unsigned)limit < 8 && c->limits[limit]) v = c->limits[limit];
  *pvalue = v;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuCtxSetLimit(CUlimit limit, size_t value) {
  sg_ctx *c;
  CUresult r = sg_current(&c);
  if (r) return r;
  size_t v;
  int e = limit_default(limit, &v);
  if (e) return (CUresult)e;
  if (limit == CU_LIMIT_MAX_L2_FETCH_GRANULARITY && value > 128) return CUDA_ERROR_INVALID_VALUE;
  if ((unsigned)limit < 8) c->limits[limit] = value ? value : v;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuCtxGetCacheConfig(CUfunc_cache *pconfig) {
  if (!pconfig) return CUDA_ERROR_INVALID_VALUE;
  sg_ctx *c;
  CUresult r = sg_current(&c);
  if (r) return r;
  *pconfig = c->cache_config;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuCtxSetCacheConfig(CUfunc_cache config) {
  sg_ctx *c;
  CUresult r = sg_current(&c);
  if (r) return r;
  if ((unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL) return CUDA_ERROR_INVALID_VALUE;
  c->cache_config = config;
  return CUDA_SUCCESS;
}

/* softgpu keeps no persisting L2 lines (MAX_PERSISTING_L2_CACHE_SIZE is 0):
 * resetting them is done as soon as asked, in any usable context. */
SG_EXPORT CUresult CUDAAPI cuCtxResetPersistingL2Cache(void) {
  sg_ctx *c;
  return sg_current(&c);
}

/* ---- error texts -------------------------------------------------------- */

typedef struct {
  int code;
  const char *name, *text;
} sg_errtext;

#define E(c, t) {c, #c, t}
static const sg_errtext errtexts[] = {
    E(CUDA_SUCCESS, "no error"),
    E(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
    E(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
    E(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
    E(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
    E(CUDA_ERROR_PROFILER_DISABLED, "profiler disabled while using external profiling tool"),
    E(CUDA_ERROR_PROFILER_NOT_INITIALIZED, "profiler not initialized: call cudaProfilerInitialize()"),
    E(CUDA_ERROR_PROFILER_ALREADY_STARTED, "profiler already started"),
    E(CUDA_ERROR_PROFILER_ALREADY_STOPPED, "profiler already stopped"),
    E(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library"),
    E(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, "API call is not supported in the installed CUDA driver"),
    E(CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA-capable device(s) is/are busy or unavailable"),
    E(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
    E(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
    E(CUDA_ERROR_DEVICE_NOT_LICENSED, "device doesn't have valid Grid license"),
    E(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"),
    E(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
    E(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current"),
    E(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed"),
    E(CUDA_ERROR_UNMAP_FAILED, "unmapping of buffer object failed"),
    E(CUDA_ERROR_ARRAY_IS_MAPPED, "array is mapped"),
    E(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped"),
    E(CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device"),
    E(CUDA_ERROR_ALREADY_ACQUIRED, "resource already acquired"),
    E(CUDA_ERROR_NOT_MAPPED, "resource not mapped"),
    E(CUDA_ERROR_NOT_MAPPED_AS_ARRAY, "resource not mapped as array"),
    E(CUDA_ERROR_NOT_MAPPED_AS_POINTER, "resource not mapped as pointer"),
    E(CUDA_ERROR_ECC_UNCORRECTABLE, "uncorrectable ECC error encountered"),
    E(CUDA_ERROR_UNSUPPORTED_LIMIT, "limit is not supported on this architecture"),
    E(CUDA_ERROR_CONTEXT_ALREADY_IN_USE, "exclusive-thread device already in use by a different thread"),
    E(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "peer access is not supported between these two devices"),
    E(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed"),
    E(CUDA_ERROR_INVALID_GRAPHICS_CONTEXT, "invalid OpenGL or DirectX context"),
    E(CUDA_ERROR_NVLINK_UNCORRECTABLE, "uncorrectable NVLink error detected during the execution"),
    E(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, "PTX JIT compiler library not found"),
    E(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "the provided PTX was compiled with an unsupported toolchain."),
    E(CUDA_ERROR_JIT_COMPILATION_DISABLED, "PTX JIT compilation was disabled"),
    E(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, "the provided execution affinity is not supported"),
    E(CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC, "the provided PTX contains unsupported call to cudaDeviceSynchronize"),
    E(CUDA_ERROR_CONTAINED, "Invalid access of peer GPU memory over nvlink or a hardware error"),
    E(CUDA_ERROR_INVALID_SOURCE, "device kernel image is invalid"),
    E(CUDA_ERROR_FILE_NOT_FOUND, "file not found"),
    E(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, "shared object symbol not found"),
    E(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "shared object initialization failed"),
    E(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS"),
    E(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
    E(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state"),
    E(CUDA_ERROR_LOSSY_QUERY, "attempted introspection would be semantically lossy"),
    E(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
    E(CUDA_ERROR_NOT_READY, "device not ready"),
    E(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
    E(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch"),
    E(CUDA_ERROR_LAUNCH_TIMEOUT, "the launch timed out and was terminated"),
    E(CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING, "launch uses incompatible texturing mode"),
    E(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled"),
    E(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled"),
    E(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "cannot set while device is active in this process"),
    E(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed"),
    E(CUDA_ERROR_ASSERT, "device-side assert triggered"),
    E(CUDA_ERROR_TOO_MANY_PEERS, "peer mapping resources exhausted"),
    E(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "part or all of the requested memory range is already mapped"),
    E(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "pointer does not correspond to a registered memory region"),
    E(CUDA_ERROR_HARDWARE_STACK_ERROR, "hardware stack error"),
    E(CUDA_ERROR_ILLEGAL_INSTRUCTION, "an illegal instruction was encountered"),
    E(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address"),
    E(CUDA_ERROR_INVALID_ADDRESS_SPACE, "operation not supported on global/shared address space"),
    E(CUDA_ERROR_INVALID_PC, "invalid program counter"),
    E(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"),
    E(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "too many blocks in cooperative launch"),
    E(CUDA_ERROR_TENSOR_MEMORY_LEAK, "tensor memory not completely freed"),
    E(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
    E(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
    E(CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized"),
    E(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "system has unsupported display driver / cuda driver combination"),
    E(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, "forward compatibility was attempted on non supported HW"),
    E(CUDA_ERROR_MPS_CONNECTION_FAILED, "MPS client failed to connect to the MPS control daemon or the MPS server"),
    E(CUDA_ERROR_MPS_RPC_FAILURE, "the remote procedural call between the MPS server and the MPS client failed"),
    E(CUDA_ERROR_MPS_SERVER_NOT_READY, "MPS server is not ready to accept new MPS client requests"),
    E(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, "the hardware resources required to create MPS client have been exhausted"),
    E(CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED, "the hardware resources required to support device connections have been exhausted"),
    E(CUDA_ERROR_MPS_CLIENT_TERMINATED, "the MPS client has been terminated by the server"),
    E(CUDA_ERROR_CDP_NOT_SUPPORTED, "is using CUDA Dynamic Parallelism, but the current configuration, like MPS, does not support it"),
    E(CUDA_ERROR_CDP_VERSION_MISMATCH, "unsupported interaction between different versions of CUDA Dynamic Parallelism"),
    E(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing"),
    E(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during capture"),
    E(CUDA_ERROR_STREAM_CAPTURE_MERGE, "operation would result in a merge of separate capture sequences"),
    E(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "capture was not ended in the same stream as it began"),
    E(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "capturing stream has unjoined work"),
    E(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "dependency created on uncaptured work in another stream"),
    E(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "operation would make the legacy stream depend on a capturing blocking stream"),
    E(CUDA_ERROR_CAPTURED_EVENT, "operation not permitted on an event last recorded in a capturing stream"),
    E(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "attempt to terminate a thread-local capture sequence from another thread"),
    E(CUDA_ERROR_TIMEOUT, "wait operation timed out"),
    E(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"),
    E(CUDA_ERROR_EXTERNAL_DEVICE, "an async error has occured in external entity outside of CUDA"),
    E(CUDA_ERROR_INVALID_CLUSTER_SIZE, "a kernel launch error has occurred due to cluster misconfiguration"),
    E(CUDA_ERROR_FUNCTION_NOT_LOADED, "the function handle is not loaded when calling an API that requires a loaded function"),
    E(CUDA_ERROR_INVALID_RESOURCE_TYPE, "one or more resources passed in are not valid resource types for the operation"),
    E(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, "one or more resources are insufficient or non-applicable for the operation"),
    E(CUDA_ERROR_KEY_ROTATION, "an error happened during the key rotation sequence"),
    E(CUDA_ERROR_UNKNOWN, "unknown error"),
};
#undef E

static const sg_errtext *find_err(CUresult e) {
  for (size_t i = 0; i < sizeof errtexts / sizeof errtexts[0]; i++)
    if (errtexts[i].code == (int)e) return &errtexts[i];
  return NULL;
}

/* Both work before cuInit, like the driver's. */
SG_EXPORT CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr) {
  if (!pStr) return CUDA_ERROR_INVALID_VALUE;
  const sg_errtext *t = find_err(error);
  if (!t) return CUDA_ERROR_INVALID_VALUE; /* *pStr untouched, as measured */
  *pStr = t->name;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr) {
  if (!pStr) return CUDA_ERROR_INVALID_VALUE;
  const sg_errtext *t = find_err(error);
  if (!t) return CUDA_ERROR_INVALID_VALUE;
  *pStr = t->text;
  return CUDA_SUCCESS;
}
