/* struct cudaDeviceProp (CUDA 13.0 layout) built from device attributes.
 *
 * The wire carries attributes, not the struct, because the struct's layout
 * changes between CUDA releases (13.0 dropped clockRate and six other
 * fields) while attribute numbers stay; cudaDevAttr values equal
 * CUdevice_attribute values, so one array serves both
 * cudaDeviceGetAttribute and this builder. */
#include <string.h>

#include "rgpu_cudart.h"

/* Capabilities rgpu does not deliver.
 *
 * The server copies its device's attributes as they are, but a program that
 * reads canMapHostMemory = 1 calls cudaHostAlloc(..., Mapped) and fails on
 * cudaErrorNotSupported instead of taking the fallback it has for a device
 * without the capability.  So an attribute whose feature rgpu does not
 * provide is reported as 0, as CUDA reports a device that lacks it.
 *
 * delivered_by names the runtime function without which the capability is
 * not there: while that function is one of the generated NotSupported stubs
 * (rgpu_cudart_stubbed_names) the attribute is 0, and as soon as rgpu
 * implements it the server's value shows again.  That keeps the table in
 * step with what the runtime delivers without anyone having to remember it.
 * NULL marks a capability that is 0 whatever the stubs say: a physical
 * limit (a remote GPU cannot reach the client's memory) or one whose
 * functions are written by hand but still refuse (cudaHostGetDevicePointer
 * answers cudaErrorNotSupported for rgpu's pinned memory: no zero-copy).
 * Whoever makes such a capability work changes its row. */
typedef struct {
  int attr;
  const char *delivered_by;
  const char *why;
} rgpu_undelivered_cap;

static const rgpu_undelivered_cap k_undelivered[] = {
    {CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, NULL,
     "no zero-copy: kernels cannot read the client's pinned memory (cudaHostAllocMapped and "
     "cudaHostGetDevicePointer refuse)"},
    {CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, "cudaMallocManaged", "managed memory"},
    {CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, NULL,
     "the client's CPU and a remote GPU cannot touch one page coherently; 0 tells programs to "
     "synchronize before host access, as on a device without it"},
    {CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST, NULL,
     "the client's CPU cannot load from device memory"},
    {CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, NULL,
     "a remote GPU cannot read the client's pageable memory"},
    {CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES, NULL,
     "a remote GPU cannot use the client's page tables"},
    {CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED, NULL,
     "no coherent link between the client's CPU and the GPU"},
    {CU_DEVICE_ATTRIBUTE_ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED, NULL,
     "no coherent link between the client's CPU and the GPU"},
    {CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, NULL,
     "registered client memory never has the same address on the GPU"},
    {CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, "cudaLaunchCooperativeKernel",
     "cooperative launch"},
    {CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, "cudaMallocAsync",
     "stream-ordered allocation"},
    {CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, "cudaMemPoolExportToShareableHandle",
     "pools shared with other processes"},
    {CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED, NULL,
     "host memory pools would be the GPU machine's memory, not the client's"},
    {CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED, NULL,
     "host memory pools would be the GPU machine's memory, not the client's"},
    {CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED, NULL,
     "IPC between the client and other processes of the GPU machine"},
    {CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED, "cudaIpcGetEventHandle", "IPC events"},
    {CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, NULL,
     "shareable VMM handles name memory of one machine's processes (the export refuses)"},
    {CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED, NULL,
     "shareable VMM handles name memory of one machine's processes (the export refuses)"},
    {CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED, NULL,
     "shareable VMM handles name memory of one machine's processes (the export refuses)"},
    {CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, NULL,
     "shareable VMM handles name memory of one machine's processes (the export refuses)"},
    {CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED, "cudaImportExternalSemaphore",
     "external semaphores"},
    {CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, NULL,
     "the client's devices cannot DMA into a remote GPU"},
    {CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS, NULL,
     "the client's devices cannot DMA into a remote GPU"},
    {CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING, NULL,
     "the client's devices cannot DMA into a remote GPU"},
    {CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES, NULL,
     "the client's devices cannot DMA into a remote GPU"},
};

size_t rgpu_cudart_undelivered_count(void) {
  return sizeof k_undelivered / sizeof k_undelivered[0];
}

int rgpu_cudart_undelivered_attr(size_t i, const char **delivered_by, const char **why) {
  if (i >= rgpu_cudart_undelivered_count()) return -1;
  if (delivered_by) *delivered_by = k_undelivered[i].delivered_by;
  if (why) *why = k_undelivered[i].why;
  return k_undelivered[i].attr;
}

void rgpu_cudart_mask_undelivered(int32_t *attrs, uint32_t n,
                                  int (*is_stubbed)(const char *fn, void *ctx), void *ctx) {
  for (size_t i = 0; i < rgpu_cudart_undelivered_count(); i++) {
    const rgpu_undelivered_cap *u = &k_undelivered[i];
    if (u->attr < 0 || (uint32_t)u->attr >= n) continue;
    if (u->delivered_by && !is_stubbed(u->delivered_by, ctx)) continue;
    attrs[u->attr] = 0;
  }
  /* Managed memory is the client's (rgpu_cudart_managed.c): whatever the
   * server's driver says about its own, programs get it, in the model of a
   * device without concurrent access (that attribute stays 0 above). */
  if ((uint32_t)CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY < n && !is_stubbed("cudaMallocManaged", ctx))
    attrs[CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY] = 1;
}

static int32_t A(const int32_t *attrs, uint32_t n, int a) {
  return (a >= 0 && (uint32_t)a < n) ? attrs[a] : 0;
}

void rgpu_cudart_build_props(struct cudaDeviceProp *p, const char *name, size_t name_len,
                             const uint8_t *uuid, size_t uuid_len, uint64_t total_mem,
                             const int32_t *attrs, uint32_t n) {
  memset(p, 0, sizeof *p);
  if (name_len >= sizeof p->name) name_len = sizeof p->name - 1;
  if (name && name_len) memcpy(p->name, name, name_len);
  if (uuid && uuid_len) memcpy(p->uuid.bytes, uuid, uuid_len < 16 ? uuid_len : 16);
#define G(attr) A(attrs, n, CU_DEVICE_ATTRIBUTE_##attr)
  p->totalGlobalMem = (size_t)total_mem;
  p->sharedMemPerBlock = (size_t)(uint32_t)G(MAX_SHARED_MEMORY_PER_BLOCK);
  p->regsPerBlock = G(MAX_REGISTERS_PER_BLOCK);
  p->warpSize = G(WARP_SIZE);
  p->memPitch = (size_t)(uint32_t)G(MAX_PITCH);
  p->maxThreadsPerBlock = G(MAX_THREADS_PER_BLOCK);
  p->maxThreadsDim[0] = G(MAX_BLOCK_DIM_X);
  p->maxThreadsDim[1] = G(MAX_BLOCK_DIM_Y);
  p->maxThreadsDim[2] = G(MAX_BLOCK_DIM_Z);
  p->maxGridSize[0] = G(MAX_GRID_DIM_X);
  p->maxGridSize[1] = G(MAX_GRID_DIM_Y);
  p->maxGridSize[2] = G(MAX_GRID_DIM_Z);
  p->totalConstMem = (size_t)(uint32_t)G(TOTAL_CONSTANT_MEMORY);
  p->major = G(COMPUTE_CAPABILITY_MAJOR);
  p->minor = G(COMPUTE_CAPABILITY_MINOR);
  p->textureAlignment = (size_t)(uint32_t)G(TEXTURE_ALIGNMENT);
  p->texturePitchAlignment = (size_t)(uint32_t)G(TEXTURE_PITCH_ALIGNMENT);
  p->multiProcessorCount = G(MULTIPROCESSOR_COUNT);
  p->integrated = G(INTEGRATED);
  p->canMapHostMemory = G(CAN_MAP_HOST_MEMORY);
  p->maxTexture1D = G(MAXIMUM_TEXTURE1D_WIDTH);
  p->maxTexture1DMipmap = G(MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH);
  p->maxTexture2D[0] = G(MAXIMUM_TEXTURE2D_WIDTH);
  p->maxTexture2D[1] = G(MAXIMUM_TEXTURE2D_HEIGHT);
  p->maxTexture2DMipmap[0] = G(MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH);
  p->maxTexture2DMipmap[1] = G(MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT);
  p->maxTexture2DLinear[0] = G(MAXIMUM_TEXTURE2D_LINEAR_WIDTH);
  p->maxTexture2DLinear[1] = G(MAXIMUM_TEXTURE2D_LINEAR_HEIGHT);
  p->maxTexture2DLinear[2] = G(MAXIMUM_TEXTURE2D_LINEAR_PITCH);
  p->maxTexture2DGather[0] = G(MAXIMUM_TEXTURE2D_GATHER_WIDTH);
  p->maxTexture2DGather[1] = G(MAXIMUM_TEXTURE2D_GATHER_HEIGHT);
  p->maxTexture3D[0] = G(MAXIMUM_TEXTURE3D_WIDTH);
  p->maxTexture3D[1] = G(MAXIMUM_TEXTURE3D_HEIGHT);
  p->maxTexture3D[2] = G(MAXIMUM_TEXTURE3D_DEPTH);
  p->maxTexture3DAlt[0] = G(MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE);
  p->maxTexture3DAlt[1] = G(MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE);
  p->maxTexture3DAlt[2] = G(MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE);
  p->maxTextureCubemap = G(MAXIMUM_TEXTURECUBEMAP_WIDTH);
  p->maxTexture1DLayered[0] = G(MAXIMUM_TEXTURE1D_LAYERED_WIDTH);
  p->maxTexture1DLayered[1] = G(MAXIMUM_TEXTURE1D_LAYERED_LAYERS);
  p->maxTexture2DLayered[0] = G(MAXIMUM_TEXTURE2D_LAYERED_WIDTH);
  p->maxTexture2DLayered[1] = G(MAXIMUM_TEXTURE2D_LAYERED_HEIGHT);
  p->maxTexture2DLayered[2] = G(MAXIMUM_TEXTURE2D_LAYERED_LAYERS);
  p->maxTextureCubemapLayered[0] = G(MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH);
  p->maxTextureCubemapLayered[1] = G(MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS);
  p->maxSurface1D = G(MAXIMUM_SURFACE1D_WIDTH);
  p->maxSurface2D[0] = G(MAXIMUM_SURFACE2D_WIDTH);
  p->maxSurface2D[1] = G(MAXIMUM_SURFACE2D_HEIGHT);
  p->maxSurface3D[0] = G(MAXIMUM_SURFACE3D_WIDTH);
  p->maxSurface3D[1] = G(MAXIMUM_SURFACE3D_HEIGHT);
  p->maxSurface3D[2] = G(MAXIMUM_SURFACE3D_DEPTH);
  p->maxSurface1DLayered[0] = G(MAXIMUM_SURFACE1D_LAYERED_WIDTH);
  p->maxSurface1DLayered[1] = G(MAXIMUM_SURFACE1D_LAYERED_LAYERS);
  p->maxSurface2DLayered[0] = G(MAXIMUM_SURFACE2D_LAYERED_WIDTH);
  p->maxSurface2DLayered[1] = G(MAXIMUM_SURFACE2D_LAYERED_HEIGHT);
  p->maxSurface2DLayered[2] = G(MAXIMUM_SURFACE2D_LAYERED_LAYERS);
  p->maxSurfaceCubemap = G(MAXIMUM_SURFACECUBEMAP_WIDTH);
  p->maxSurfaceCubemapLayered[0] = G(MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH);
  p->maxSurfaceCubemapLayered[1] = G(MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS);
  p->surfaceAlignment = (size_t)(uint32_t)G(SURFACE_ALIGNMENT);
  p->concurrentKernels = G(CONCURRENT_KERNELS);
  p->ECCEnabled = G(ECC_ENABLED);
  p->pciBusID = G(PCI_BUS_ID);
  p->pciDeviceID = G(PCI_DEVICE_ID);
  p->pciDomainID = G(PCI_DOMAIN_ID);
  p->tccDriver = G(TCC_DRIVER);
  p->asyncEngineCount = G(ASYNC_ENGINE_COUNT);
  p->unifiedAddressing = G(UNIFIED_ADDRESSING);
  p->memoryBusWidth = G(GLOBAL_MEMORY_BUS_WIDTH);
  p->l2CacheSize = G(L2_CACHE_SIZE);
  p->persistingL2CacheMaxSize = G(MAX_PERSISTING_L2_CACHE_SIZE);
  p->maxThreadsPerMultiProcessor = G(MAX_THREADS_PER_MULTIPROCESSOR);
  p->streamPrioritiesSupported = G(STREAM_PRIORITIES_SUPPORTED);
  p->globalL1CacheSupported = G(GLOBAL_L1_CACHE_SUPPORTED);
  p->localL1CacheSupported = G(LOCAL_L1_CACHE_SUPPORTED);
  p->sharedMemPerMultiprocessor = (size_t)(uint32_t)G(MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
  p->regsPerMultiprocessor = G(MAX_REGISTERS_PER_MULTIPROCESSOR);
  p->managedMemory = G(MANAGED_MEMORY);
  p->isMultiGpuBoard = G(MULTI_GPU_BOARD);
  p->multiGpuBoardGroupID = G(MULTI_GPU_BOARD_GROUP_ID);
  p->hostNativeAtomicSupported = G(HOST_NATIVE_ATOMIC_SUPPORTED);
  p->pageableMemoryAccess = G(PAGEABLE_MEMORY_ACCESS);
  p->concurrentManagedAccess = G(CONCURRENT_MANAGED_ACCESS);
  p->computePreemptionSupported = G(COMPUTE_PREEMPTION_SUPPORTED);
  p->canUseHostPointerForRegisteredMem = G(CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM);
  p->cooperativeLaunch = G(COOPERATIVE_LAUNCH);
  p->sharedMemPerBlockOptin = (size_t)(uint32_t)G(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  p->pageableMemoryAccessUsesHostPageTables = G(PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES);
  p->directManagedMemAccessFromHost = G(DIRECT_MANAGED_MEM_ACCESS_FROM_HOST);
  p->maxBlocksPerMultiProcessor = G(MAX_BLOCKS_PER_MULTIPROCESSOR);
  p->accessPolicyMaxWindowSize = G(MAX_ACCESS_POLICY_WINDOW_SIZE);
  p->reservedSharedMemPerBlock = (size_t)(uint32_t)G(RESERVED_SHARED_MEMORY_PER_BLOCK);
  p->hostRegisterSupported = G(HOST_REGISTER_SUPPORTED);
  p->sparseCudaArraySupported = G(SPARSE_CUDA_ARRAY_SUPPORTED);
  p->hostRegisterReadOnlySupported = G(READ_ONLY_HOST_REGISTER_SUPPORTED);
  p->timelineSemaphoreInteropSupported = G(TIMELINE_SEMAPHORE_INTEROP_SUPPORTED);
  p->memoryPoolsSupported = G(MEMORY_POOLS_SUPPORTED);
  p->gpuDirectRDMASupported = G(GPU_DIRECT_RDMA_SUPPORTED);
  p->gpuDirectRDMAFlushWritesOptions = (unsigned)G(GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS);
  p->gpuDirectRDMAWritesOrdering = G(GPU_DIRECT_RDMA_WRITES_ORDERING);
  p->memoryPoolSupportedHandleTypes = (unsigned)G(MEMPOOL_SUPPORTED_HANDLE_TYPES);
  p->deferredMappingCudaArraySupported = G(DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED);
  p->ipcEventSupported = G(IPC_EVENT_SUPPORTED);
  p->clusterLaunch = G(CLUSTER_LAUNCH);
  p->unifiedFunctionPointers = G(UNIFIED_FUNCTION_POINTERS);
  p->deviceNumaConfig = G(NUMA_CONFIG);
  p->deviceNumaId = G(NUMA_ID);
  p->mpsEnabled = G(MPS_ENABLED);
  p->hostNumaId = G(HOST_NUMA_ID);
  p->gpuPciDeviceID = (unsigned)G(GPU_PCI_DEVICE_ID);
  p->gpuPciSubsystemID = (unsigned)G(GPU_PCI_SUBSYSTEM_ID);
  p->hostNumaMultinodeIpcSupported = G(HOST_NUMA_MULTINODE_IPC_SUPPORTED);
#undef G
  /* luid and luidDeviceNodeMask are Windows-only (zero on Linux, as NVIDIA's
   * runtime leaves them). */
}
