/* cuGetProcAddress: the facade's own functions by (name, CUDA version,
 * default-stream flavour), from the table gen_driver.py derives from
 * cudaTypedefs.h. */
#include <string.h>

#include "rgpu_drv_internal.h"

/* libcuda.so.1's exports, registered by its constructor (before any
 * program code can call cuGetProcAddress through it). */
static const rgpu_proc_export *g_own;
static size_t g_nown;

void rgpu_drv_register_facade(const rgpu_proc_export *own, size_t n) {
  __atomic_store_n(&g_nown, n, __ATOMIC_RELEASE);
  __atomic_store_n(&g_own, own, __ATOMIC_RELEASE);
}

void *rgpu_drv_proc_fn(const rgpu_proc_entry *e) {
  const rgpu_proc_export *own = __atomic_load_n(&g_own, __ATOMIC_ACQUIRE);
  size_t lo = 0, hi = own ? __atomic_load_n(&g_nown, __ATOMIC_ACQUIRE) : 0;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(own[mid].name, e->symbol);
    if (c == 0) return own[mid].fn;
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return e->fn;
}

static CUresult proc_address(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus) {
  rgpu_rt_count_call();
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  const cuuint64_t known = CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                           CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if (flags & ~known) return CUDA_ERROR_INVALID_VALUE;
  *pfn = NULL;
  int status;
  const rgpu_proc_entry *e =
      rgpu_drv_proc_lookup(rgpu_drv_proc_table, rgpu_drv_proc_table_len, symbol, cudaVersion,
                           (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0, &status);
  /* A name that is not there (or not at that version) is a successful
   * query whose status says so, when the caller asked for the status: the
   * H200's driver returns CUDA_SUCCESS for cuGetProcAddress_v2 of an
   * unknown name (measured; drv_basic).  Without a status to read (the v1
   * call) the code is all the caller has: CUDA_ERROR_NOT_FOUND. */
  if (symbolStatus) *symbolStatus = (CUdriverProcAddressQueryResult)status;
  if (!e) return symbolStatus ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
  *pfn = rgpu_drv_proc_fn(e);
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                               cuuint64_t flags,
                                               CUdriverProcAddressQueryResult *symbolStatus) {
  return proc_address(symbol, pfn, cudaVersion, flags, symbolStatus);
}

RGPU_DRV CUresult rgpu_drv_cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                            cuuint64_t flags) {
  return proc_address(symbol, pfn, cudaVersion, flags, NULL);
}
