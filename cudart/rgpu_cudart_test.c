/* Unit tests of the runtime facade's pure parts: CUresult mapping, sticky
 * and last-error rules, cudaDeviceProp from attributes, address ranges,
 * parameter packing, and the generated error texts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <pthread.h>

#include "rgpu_cudart.h"
#include "rgpu_cudart_errors.h"

static void test_errmap(void **state) {
  assert_int_equal(rgpu_cudart_from_cu(CUDA_SUCCESS), cudaSuccess);
  assert_int_equal(rgpu_cudart_from_cu(CUDA_ERROR_INVALID_VALUE), cudaErrorInvalidValue);
  assert_int_equal(rgpu_cudart_from_cu(CUDA_ERROR_OUT_OF_MEMORY), cudaErrorMemoryAllocation);
  assert_int_equal(rgpu_cudart_from_cu(CUDA_ERROR_ILLEGAL_ADDRESS), cudaErrorIllegalAddress);
  assert_int_equal(rgpu_cudart_from_cu(CUDA_ERROR_NOT_READY), cudaErrorNotReady);
  assert_int_equal(rgpu_cudart_from_cu(CUDA_ERROR_INVALID_HANDLE), cudaErrorInvalidResourceHandle);
  assert_int_equal(rgpu_cudart_from_cu(CUDA_ERROR_NO_DEVICE), cudaErrorNoDevice);
  assert_int_equal(rgpu_cudart_from_cu(CUDA_ERROR_NOT_FOUND), cudaErrorSymbolNotFound);
  assert_int_equal(rgpu_cudart_from_cu(CUDA_ERROR_INVALID_IMAGE), cudaErrorInvalidKernelImage);
  assert_int_equal(rgpu_cudart_from_cu(CUDA_ERROR_NO_BINARY_FOR_GPU),
                   cudaErrorNoKernelImageForDevice);
  assert_int_equal(rgpu_cudart_from_cu(CUDA_ERROR_LAUNCH_FAILED), cudaErrorLaunchFailure);
  assert_int_equal(rgpu_cudart_from_cu(CUDA_ERROR_NOT_SUPPORTED), cudaErrorNotSupported);
  assert_int_equal(rgpu_cudart_from_cu(CUDA_ERROR_INVALID_CONTEXT),
                   cudaErrorDeviceUninitialized);
  assert_int_equal(rgpu_cudart_from_cu(12345), cudaErrorUnknown);
  assert_int_equal(rgpu_cudart_from_cu(-1), cudaErrorUnknown);
  /* Every kernel fault keeps its own name (issue 14: an illegal address must
   * not come back as another fault), and mapping is idempotent for them, so
   * a code mapped twice on some path still names the same fault. */
  const int faults[] = {CUDA_ERROR_ILLEGAL_ADDRESS,  CUDA_ERROR_INVALID_ADDRESS_SPACE,
                        CUDA_ERROR_MISALIGNED_ADDRESS, CUDA_ERROR_ILLEGAL_INSTRUCTION,
                        CUDA_ERROR_INVALID_PC,       CUDA_ERROR_LAUNCH_FAILED,
                        CUDA_ERROR_ASSERT,           CUDA_ERROR_HARDWARE_STACK_ERROR};
  for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++) {
    cudaError_t e = rgpu_cudart_from_cu(faults[i]);
    assert_int_equal((int)e, faults[i]);
    assert_int_equal(rgpu_cudart_from_cu((int)e), e);
    assert_true(rgpu_cudart_is_sticky(e));
  }
  assert_int_not_equal(rgpu_cudart_from_cu(CUDA_ERROR_ILLEGAL_ADDRESS),
                       rgpu_cudart_from_cu(CUDA_ERROR_INVALID_ADDRESS_SPACE));
}

static void test_sticky_set(void **state) {
  assert_true(rgpu_cudart_is_sticky(cudaErrorIllegalAddress));
  assert_true(rgpu_cudart_is_sticky(cudaErrorLaunchFailure));
  assert_true(rgpu_cudart_is_sticky(cudaErrorAssert));
  assert_false(rgpu_cudart_is_sticky(cudaErrorInvalidValue));
  assert_false(rgpu_cudart_is_sticky(cudaErrorNotReady));
  assert_false(rgpu_cudart_is_sticky(cudaErrorLaunchOutOfResources));
  assert_false(rgpu_cudart_is_sticky(cudaSuccess));
}

static void test_errstate_pending_once(void **state) {
  rgpu_err_state s;
  rgpu_err_state_init(&s);
  assert_int_equal(rgpu_err_state_sync(&s, cudaSuccess), cudaSuccess);
  rgpu_err_state_async(&s, cudaErrorInvalidValue);
  /* Peek does not clear, get does, a later sync sees nothing. */
  assert_int_equal(rgpu_err_state_poll(&s, 0), cudaErrorInvalidValue);
  assert_int_equal(rgpu_err_state_poll(&s, 1), cudaErrorInvalidValue);
  assert_int_equal(rgpu_err_state_poll(&s, 1), cudaSuccess);
  rgpu_err_state_async(&s, cudaErrorInvalidValue);
  rgpu_err_state_async(&s, cudaErrorMemoryAllocation); /* first one wins */
  assert_int_equal(rgpu_err_state_sync(&s, cudaSuccess), cudaErrorInvalidValue);
  assert_int_equal(rgpu_err_state_sync(&s, cudaSuccess), cudaSuccess);
}

static void test_errstate_own_error_first(void **state) {
  rgpu_err_state s;
  rgpu_err_state_init(&s);
  rgpu_err_state_async(&s, cudaErrorInvalidValue);
  /* A failing sync call reports its own error; the async one stays. */
  assert_int_equal(rgpu_err_state_sync(&s, cudaErrorInvalidResourceHandle),
                   cudaErrorInvalidResourceHandle);
  assert_int_equal(rgpu_err_state_sync(&s, cudaSuccess), cudaErrorInvalidValue);
}

static void test_errstate_sticky(void **state) {
  rgpu_err_state s;
  rgpu_err_state_init(&s);
  rgpu_err_state_async(&s, cudaErrorIllegalAddress);
  /* Not reported yet: cudaGetLastError gives it once (as on an H200). */
  assert_int_equal(rgpu_err_state_poll(&s, 0), cudaErrorIllegalAddress);
  assert_int_equal(rgpu_err_state_poll(&s, 1), cudaErrorIllegalAddress);
  assert_int_equal(rgpu_err_state_poll(&s, 1), cudaSuccess);
  /* API calls keep returning it until reset. */
  for (int i = 0; i < 3; i++)
    assert_int_equal(rgpu_err_state_sync(&s, cudaSuccess), cudaErrorIllegalAddress);
  assert_int_equal(rgpu_err_state_sticky(&s), cudaErrorIllegalAddress);
  assert_int_equal(rgpu_err_state_poll(&s, 1), cudaSuccess);
  /* Reported first by a synchronizing call: the call's last error carries
   * it, the state does not report it again. */
  rgpu_err_state_reset(&s);
  rgpu_err_state_async(&s, cudaErrorLaunchFailure);
  assert_int_equal(rgpu_err_state_sync(&s, cudaSuccess), cudaErrorLaunchFailure);
  assert_int_equal(rgpu_err_state_poll(&s, 1), cudaSuccess);
  /* Also when the sticky error comes as a call's own result. */
  rgpu_err_state_reset(&s);
  assert_int_equal(rgpu_err_state_sync(&s, cudaSuccess), cudaSuccess);
  assert_int_equal(rgpu_err_state_sync(&s, cudaErrorLaunchFailure), cudaErrorLaunchFailure);
  assert_int_equal(rgpu_err_state_sync(&s, cudaSuccess), cudaErrorLaunchFailure);
  rgpu_err_state_reset(&s);
  assert_int_equal(rgpu_err_state_sticky(&s), cudaSuccess);
  assert_int_equal(rgpu_err_state_poll(&s, 1), cudaSuccess);
}

static void test_props_builder(void **state) {
  int32_t attrs[RGPU_MAX_ATTRS] = {0};
  attrs[CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK] = 1024;
  attrs[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X] = 1024;
  attrs[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y] = 1024;
  attrs[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z] = 64;
  attrs[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X] = 2147483647;
  attrs[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y] = 65535;
  attrs[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z] = 65535;
  attrs[CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK] = 49152;
  attrs[CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN] = 232448;
  attrs[CU_DEVICE_ATTRIBUTE_WARP_SIZE] = 32;
  attrs[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR] = 9;
  attrs[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR] = 0;
  attrs[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT] = 132;
  attrs[CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE] = 52428800;
  attrs[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID] = 0x19;
  attrs[CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID] = 0x233510de;
  attrs[CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED] = 1;
  uint8_t uuid[16];
  for (int i = 0; i < 16; i++) uuid[i] = (uint8_t)i;
  struct cudaDeviceProp p;
  memset(&p, 0xab, sizeof p);
  const char *name = "NVIDIA H200";
  rgpu_cudart_build_props(&p, name, strlen(name), uuid, 16, 150ull << 30, attrs, RGPU_MAX_ATTRS);
  assert_string_equal(p.name, "NVIDIA H200");
  assert_memory_equal(p.uuid.bytes, uuid, 16);
  assert_int_equal(p.totalGlobalMem, 150ull << 30);
  assert_int_equal(p.maxThreadsPerBlock, 1024);
  assert_int_equal(p.maxThreadsDim[2], 64);
  assert_int_equal(p.maxGridSize[0], 2147483647);
  assert_int_equal(p.sharedMemPerBlock, 49152);
  assert_int_equal(p.sharedMemPerBlockOptin, 232448);
  assert_int_equal(p.warpSize, 32);
  assert_int_equal(p.major, 9);
  assert_int_equal(p.minor, 0);
  assert_int_equal(p.multiProcessorCount, 132);
  assert_int_equal(p.l2CacheSize, 52428800);
  assert_int_equal(p.pciBusID, 0x19);
  assert_int_equal(p.gpuPciDeviceID, 0x233510deu);
  assert_int_equal(p.hostNumaMultinodeIpcSupported, 1);
  /* Fields without an attribute are zero, not garbage. */
  assert_int_equal(p.luidDeviceNodeMask, 0);
  assert_int_equal(p.reserved[0], 0);
  assert_int_equal(p.reserved[55], 0);

  /* A short attribute array (older server) leaves the rest zero. */
  rgpu_cudart_build_props(&p, "x", 1, NULL, 0, 1, attrs, 5);
  assert_int_equal(p.maxThreadsPerBlock, 1024);
  assert_int_equal(p.maxGridSize[0], 0);
  assert_int_equal(p.major, 0);
  /* An over-long name is cut, still terminated. */
  char longname[400];
  memset(longname, 'a', sizeof longname);
  rgpu_cudart_build_props(&p, longname, sizeof longname, NULL, 0, 1, attrs, RGPU_MAX_ATTRS);
  assert_int_equal(strlen(p.name), 255);
  assert_int_equal(sizeof(struct cudaDeviceProp), 1008);
}

/* A fake stub list: only what the test names is "stubbed". */
static int fake_stubbed(const char *fn, void *ctx) {
  for (const char *const *s = ctx; *s; s++)
    if (strcmp(*s, fn) == 0) return 1;
  return 0;
}

static void test_undelivered_mask(void **state) {
  (void)state;
  int32_t attrs[RGPU_MAX_ATTRS];
  for (int i = 0; i < RGPU_MAX_ATTRS; i++) attrs[i] = 1;
  const char *const all_stubbed[] = {"cudaMallocManaged",
                                     "cudaLaunchCooperativeKernel", "cudaMallocAsync",
                                     "cudaMemPoolExportToShareableHandle",
                                     "cudaIpcGetEventHandle", "cudaImportExternalSemaphore", NULL};
  rgpu_cudart_mask_undelivered(attrs, RGPU_MAX_ATTRS, fake_stubbed, (void *)all_stubbed);
  /* The ones issue 14 saw programs trip on. */
  assert_int_equal(attrs[cudaDevAttrCanMapHostMemory], 0);
  assert_int_equal(attrs[cudaDevAttrManagedMemory], 0);
  assert_int_equal(attrs[cudaDevAttrConcurrentManagedAccess], 0);
  assert_int_equal(attrs[cudaDevAttrPageableMemoryAccess], 0);
  assert_int_equal(attrs[cudaDevAttrPageableMemoryAccessUsesHostPageTables], 0);
  assert_int_equal(attrs[cudaDevAttrDirectManagedMemAccessFromHost], 0);
  assert_int_equal(attrs[cudaDevAttrCooperativeLaunch], 0);
  assert_int_equal(attrs[cudaDevAttrMemoryPoolsSupported], 0);
  assert_int_equal(attrs[cudaDevAttrCanUseHostPointerForRegisteredMem], 0);
  assert_int_equal(attrs[cudaDevAttrHostNativeAtomicSupported], 0);
  /* What rgpu delivers stays as the server says. */
  assert_int_equal(attrs[cudaDevAttrUnifiedAddressing], 1);
  assert_int_equal(attrs[cudaDevAttrHostRegisterSupported], 1);
  assert_int_equal(attrs[cudaDevAttrConcurrentKernels], 1);
  assert_int_equal(attrs[cudaDevAttrWarpSize], 1);
  assert_int_equal(attrs[cudaDevAttrClusterLaunch], 1);

  /* Once a function is implemented, its capability shows again; the
   * physical limits do not. */
  for (int i = 0; i < RGPU_MAX_ATTRS; i++) attrs[i] = 1;
  const char *const pools_done[] = {"cudaMallocManaged", NULL};
  rgpu_cudart_mask_undelivered(attrs, RGPU_MAX_ATTRS, fake_stubbed, (void *)pools_done);
  assert_int_equal(attrs[cudaDevAttrMemoryPoolsSupported], 1);
  assert_int_equal(attrs[cudaDevAttrCooperativeLaunch], 1);
  assert_int_equal(attrs[cudaDevAttrCanMapHostMemory], 0);
  assert_int_equal(attrs[cudaDevAttrPageableMemoryAccess], 0);

  /* Managed memory is the client's: delivered once implemented, even where
   * the server's driver has none (softgpu says 0). */
  for (int i = 0; i < RGPU_MAX_ATTRS; i++) attrs[i] = 0;
  const char *const none[] = {NULL};
  rgpu_cudart_mask_undelivered(attrs, RGPU_MAX_ATTRS, fake_stubbed, (void *)none);
  assert_int_equal(attrs[cudaDevAttrManagedMemory], 1);
  assert_int_equal(attrs[cudaDevAttrConcurrentManagedAccess], 0);
  for (int i = 0; i < RGPU_MAX_ATTRS; i++) attrs[i] = 1;
  rgpu_cudart_mask_undelivered(attrs, RGPU_MAX_ATTRS, fake_stubbed, (void *)pools_done);

  /* The struct built from masked attributes agrees with them. */
  struct cudaDeviceProp p;
  rgpu_cudart_build_props(&p, "x", 1, NULL, 0, 1, attrs, RGPU_MAX_ATTRS);
  assert_int_equal(p.canMapHostMemory, 0);
  assert_int_equal(p.managedMemory, 0);
  assert_int_equal(p.memoryPoolsSupported, 1);
  assert_int_equal(p.pageableMemoryAccess, 0);

  /* A short array (older server) is not written past its end. */
  int32_t few[20];
  for (int i = 0; i < 20; i++) few[i] = 7;
  rgpu_cudart_mask_undelivered(few, 19, fake_stubbed, (void *)all_stubbed);
  assert_int_equal(few[19], 7);

  /* Every row has a reason and a real attribute. */
  for (size_t i = 0; i < rgpu_cudart_undelivered_count(); i++) {
    const char *why = NULL;
    int a = rgpu_cudart_undelivered_attr(i, NULL, &why);
    assert_true(a > 0 && a < (int)cudaDevAttrMax);
    assert_non_null(why);
  }
  assert_int_equal(rgpu_cudart_undelivered_attr(rgpu_cudart_undelivered_count(), NULL, NULL), -1);
}

static void test_module_refused_line(void **state) {
  (void)state;
  char buf[512];
  rgpu_rt_format_module_refused(buf, sizeof buf, "_Z1kPi", 3, 218,
                                "cuModuleLoadData: CUDA_ERROR_INVALID_PTX: unknown symbol 'WARP_SZ'");
  assert_string_equal(buf, "the server refused the module of kernel _Z1kPi (and 2 more): "
                           "cuModuleLoadData: CUDA_ERROR_INVALID_PTX: unknown symbol 'WARP_SZ'");
  rgpu_rt_format_module_refused(buf, sizeof buf, "_Z1kPi", 1, 218, "");
  assert_string_equal(buf, "the server refused the module of kernel _Z1kPi: CUresult 218");
  rgpu_rt_format_module_refused(buf, sizeof buf, NULL, 0, 200, NULL);
  assert_string_equal(buf, "the server refused the module without kernels: CUresult 200");
  /* Cut, still terminated. */
  rgpu_rt_format_module_refused(buf, 20, "_Z1kPi", 1, 218, "x");
  assert_int_equal(strlen(buf), 19);
}

static void test_ranges(void **state) {
  rgpu_range_table t;
  rgpu_range_table_init(&t);
  rgpu_range a = {.base = 0x1000, .size = 0x100, .device = 0, .kind = RGPU_RANGE_DEVICE};
  rgpu_range b = {.base = 0x3000, .size = 0x1000, .device = 1, .kind = RGPU_RANGE_DEVICE};
  rgpu_range overlap = {.base = 0x10ff, .size = 0x10, .kind = RGPU_RANGE_DEVICE};
  rgpu_range zero = {.base = 0x5000, .size = 0};
  assert_int_equal(rgpu_range_add(&t, &b), 0);
  assert_int_equal(rgpu_range_add(&t, &a), 0);
  assert_int_equal(rgpu_range_add(&t, &overlap), -1);
  assert_int_equal(rgpu_range_add(&t, &zero), -1);
  rgpu_range out;
  assert_int_equal(rgpu_range_find(&t, 0x1000, 0x100, &out), 0);
  assert_int_equal(out.base, 0x1000);
  assert_int_equal(rgpu_range_find(&t, 0x1080, 0x80, &out), 0);
  assert_int_equal(rgpu_range_find(&t, 0x1080, 0x81, &out), -1); /* runs past the end */
  assert_int_equal(rgpu_range_find(&t, 0x0fff, 1, &out), -1);
  assert_int_equal(rgpu_range_find(&t, 0x2000, 0, &out), -1);
  assert_int_equal(rgpu_range_find(&t, 0x3fff, 0, &out), 0);
  assert_int_equal(out.device, 1);
  assert_int_equal(rgpu_range_find(&t, UINT64_MAX, 2, &out), -1); /* wraps */
  assert_int_equal(rgpu_range_remove(&t, 0x1080, NULL), -1);       /* not a base */
  assert_int_equal(rgpu_range_remove(&t, 0x1000, &out), 0);
  assert_int_equal(rgpu_range_find(&t, 0x1000, 1, NULL), -1);
  /* Many ranges, then drop one device's. */
  for (uint64_t i = 0; i < 500; i++) {
    rgpu_range r = {.base = 0x100000 + i * 0x100, .size = 0x80, .device = (int)(i % 2),
                    .kind = RGPU_RANGE_DEVICE};
    assert_int_equal(rgpu_range_add(&t, &r), 0);
  }
  assert_int_equal(rgpu_range_find(&t, 0x100000 + 77 * 0x100 + 5, 4, &out), 0);
  assert_int_equal(out.device, 1);
  rgpu_range_remove_device(&t, 1, 0);
  assert_int_equal(rgpu_range_find(&t, 0x100000 + 77 * 0x100, 1, NULL), -1);
  assert_int_equal(rgpu_range_find(&t, 0x100000 + 78 * 0x100, 1, NULL), 0);
  assert_int_equal(rgpu_range_find(&t, 0x3000, 1, NULL), -1); /* b was device 1 */
  /* A range that wraps the address space is refused; the kind filter of
   * remove_device drops only that kind. */
  rgpu_range wrap = {.base = UINT64_MAX - 0x10, .size = 0x20, .kind = RGPU_RANGE_DEVICE};
  assert_int_equal(rgpu_range_add(&t, &wrap), -1);
  rgpu_range sym = {.base = 0x9000, .size = 0x10, .device = 0, .kind = RGPU_RANGE_SYMBOL};
  assert_int_equal(rgpu_range_add(&t, &sym), 0);
  rgpu_range_remove_device(&t, 0, RGPU_RANGE_SYMBOL);
  assert_int_equal(rgpu_range_find(&t, 0x9000, 1, NULL), -1);
  assert_int_equal(rgpu_range_find(&t, 0x100000 + 78 * 0x100, 1, NULL), 0);
  rgpu_range_table_free(&t);
}

/* The range table and the error state under several threads: each call
 * takes and gives back its rgpu_mutex (in a debug build the held-assertions
 * inside run on every lookup, and no lock is left held). */
typedef struct {
  rgpu_range_table *t;
  rgpu_err_state *es;
  uint64_t base;
  int failures;
} range_worker;

static void *range_worker_main(void *arg) {
  range_worker *w = arg;
  for (uint64_t i = 0; i < 2000; i++) {
    rgpu_range r = {.base = w->base + i * 0x1000, .size = 0x800, .device = 0,
                    .kind = RGPU_RANGE_DEVICE};
    rgpu_range got;
    if (rgpu_range_add(w->t, &r)) w->failures++;
    if (rgpu_range_find(w->t, r.base + 0x10, 16, &got) || got.base != r.base) w->failures++;
    if (i % 2 && rgpu_range_remove(w->t, r.base, NULL)) w->failures++;
    rgpu_err_state_async(w->es, cudaErrorLaunchFailure);
    (void)rgpu_err_state_poll(w->es, 1);
    if (rgpu_mutex_held_count() != 0) w->failures++;
  }
  return NULL;
}

static void test_ranges_threads(void **state) {
  (void)state;
  rgpu_range_table t;
  rgpu_range_table_init(&t);
  rgpu_err_state es;
  rgpu_err_state_init(&es);
  range_worker w[4];
  pthread_t th[4];
  for (int k = 0; k < 4; k++) {
    w[k] = (range_worker){.t = &t, .es = &es, .base = 0x10000000ull * (uint64_t)(k + 1)};
    assert_int_equal(pthread_create(&th[k], NULL, range_worker_main, &w[k]), 0);
  }
  for (int k = 0; k < 4; k++) {
    pthread_join(th[k], NULL);
    assert_int_equal(w[k].failures, 0);
  }
  assert_int_equal(t.n, 4 * 1000);
  assert_true(rgpu_mutex_not_held(&t.lock));
  assert_int_equal(rgpu_mutex_held_count(), 0);
  rgpu_range_table_free(&t);
}

static void test_params(void **state) {
  /* _Z4oddkc3Oddsdc from cuda-abi.md: [#0@0:1 #1@8:16 #2@24:2 #3@32:8 #4@40:1] */
  uint32_t offs[] = {0, 8, 24, 32, 40};
  uint32_t sizes[] = {1, 16, 2, 8, 1};
  rgpu_param_layout l = {.nparams = 5, .offsets = offs, .sizes = sizes};
  assert_int_equal(rgpu_cudart_layout_finish(&l), 0);
  assert_int_equal(l.total, 41);
  char c0 = 'x';
  struct {
    double a;
    double b;
  } odd = {1.5, -2.5};
  short s2 = 0x1234;
  double d3 = 3.25;
  char c4 = 'z';
  void *args[] = {&c0, &odd, &s2, &d3, &c4};
  uint8_t buf[64];
  memset(buf, 0xee, sizeof buf);
  assert_int_equal(rgpu_cudart_pack_params(&l, args, buf, sizeof buf), 41);
  assert_int_equal(buf[0], 'x');
  assert_int_equal(buf[1], 0); /* padding is zeroed */
  assert_memory_equal(buf + 8, &odd, 16);
  assert_memory_equal(buf + 24, &s2, 2);
  assert_memory_equal(buf + 32, &d3, 8);
  assert_int_equal(buf[40], 'z');
  assert_int_equal(buf[41], 0xee); /* nothing written past total */
  /* Parameter 4's place, and no parameter 5. */
  size_t po = 0, ps = 0;
  assert_int_equal(rgpu_cudart_layout_param(&l, 4, &po, &ps), 0);
  assert_true(po == offs[4] && ps == sizes[4]);
  assert_int_equal(rgpu_cudart_layout_param(&l, 5, &po, &ps), -1);
  /* Too small a buffer, or a NULL argument, fails. */
  assert_int_equal(rgpu_cudart_pack_params(&l, args, buf, 40), -1);
  args[2] = NULL;
  assert_int_equal(rgpu_cudart_pack_params(&l, args, buf, sizeof buf), -1);
  /* No parameters. */
  rgpu_param_layout none = {0};
  assert_int_equal(rgpu_cudart_layout_finish(&none), 0);
  assert_int_equal(rgpu_cudart_pack_params(&none, NULL, buf, sizeof buf), 0);
  /* Overflowing layout is refused. */
  uint32_t bo[] = {0xfffffff0u};
  uint32_t bs[] = {0x100};
  rgpu_param_layout bad = {.nparams = 1, .offsets = bo, .sizes = bs};
  assert_int_equal(rgpu_cudart_layout_finish(&bad), -1);
}

static void test_error_texts(void **state) {
  assert_string_equal(rgpu_cudart_error_name(cudaSuccess), "cudaSuccess");
  assert_string_equal(rgpu_cudart_error_name(cudaErrorMemoryAllocation),
                      "cudaErrorMemoryAllocation");
  assert_string_equal(rgpu_cudart_error_text(cudaErrorMemoryAllocation), "out of memory");
  assert_string_equal(rgpu_cudart_error_text(cudaErrorInvalidValue), "invalid argument");
  assert_non_null(rgpu_cudart_error_text(424242));
}

/* Several servers (issue 19): devices numbered in server order, the owner
 * of each, a server without devices, the cap on the total. */
static void test_devlist(void **state) {
  (void)state;
  rgpu_devlist l;
  int counts[3] = {2, 2, 0};
  assert_int_equal(rgpu_devlist_build(&l, counts, 2, 64), 4);
  assert_int_equal(l.first[1], 2);
  int want[4] = {0, 0, 1, 1};
  for (int d = 0; d < 4; d++) assert_int_equal(rgpu_devlist_server_of(&l, d), want[d]);
  assert_int_equal(rgpu_devlist_server_of(&l, 4), -1);
  assert_int_equal(rgpu_devlist_server_of(&l, -1), -1);
  /* A server with no GPU owns no number; the next one's follow on. */
  int gap[3] = {1, 0, 3};
  assert_int_equal(rgpu_devlist_build(&l, gap, 3, 64), 4);
  assert_int_equal(rgpu_devlist_server_of(&l, 0), 0);
  assert_int_equal(rgpu_devlist_server_of(&l, 1), 2);
  assert_int_equal(rgpu_devlist_server_of(&l, 3), 2);
  assert_int_equal(l.count[1], 0);
  /* More devices than the runtime numbers: the last server's are cut. */
  int many[2] = {40, 40};
  assert_int_equal(rgpu_devlist_build(&l, many, 2, 64), 64);
  assert_int_equal(l.count[1], 24);
  assert_int_equal(rgpu_devlist_server_of(&l, 63), 1);
  assert_int_equal(rgpu_devlist_server_of(&l, 64), -1);
  /* A negative count (a broken reply) is none. */
  int bad[2] = {-5, 2};
  assert_int_equal(rgpu_devlist_build(&l, bad, 2, 64), 2);
  assert_int_equal(rgpu_devlist_server_of(&l, 0), 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_errmap),
      cmocka_unit_test(test_sticky_set),
      cmocka_unit_test(test_errstate_pending_once),
      cmocka_unit_test(test_errstate_own_error_first),
      cmocka_unit_test(test_errstate_sticky),
      cmocka_unit_test(test_props_builder),
      cmocka_unit_test(test_undelivered_mask),
      cmocka_unit_test(test_module_refused_line),
      cmocka_unit_test(test_ranges),
      cmocka_unit_test(test_devlist),
      cmocka_unit_test(test_ranges_threads),
      cmocka_unit_test(test_params),
      cmocka_unit_test(test_error_texts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
