/* cudaGetDriverEntryPoint(ByVersion): driver functions for runtime
 * programs, from the driver facade's cuGetProcAddress table
 * (driver/rgpu_drv_proctable.h): libcuda.so.1's own functions when the
 * program loaded it, else the rgpu_drv_ functions they forward to (which
 * share this library's session either way). */
#include "rgpu_cudart.h"
#include "rgpu_drv_proctable.h"

/* cudaEnable* flags are the CU_GET_PROC_ADDRESS_* values, and
 * cudaDriverEntryPointQueryResult the CUdriverProcAddressQueryResult
 * values. */
static cudaError_t entry_point(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                               unsigned long long flags,
                               enum cudaDriverEntryPointQueryResult *driverStatus,
                               int default_per_thread) {
  rgpu_rt_count_call();
  if (!symbol || !funcPtr) return rgpu_rt_ret(cudaErrorInvalidValue);
  const unsigned long long known = cudaEnableLegacyStream | cudaEnablePerThreadDefaultStream;
  if (flags & ~known) return rgpu_rt_ret(cudaErrorInvalidValue);
  int per_thread = (flags & cudaEnablePerThreadDefaultStream) ||
                   (default_per_thread && !(flags & cudaEnableLegacyStream));
  int status;
  const rgpu_proc_entry *e = rgpu_drv_proc_lookup(rgpu_drv_proc_table, rgpu_drv_proc_table_len,
                                                  symbol, (int)cudaVersion, per_thread, &status);
  if (driverStatus) *driverStatus = (enum cudaDriverEntryPointQueryResult)status;
  *funcPtr = e ? rgpu_drv_proc_fn(e) : NULL;
  /* As the driver's cuGetProcAddress_v2: with a status to read, a missing
   * name is a successful query that says so. */
  if (!e && driverStatus) return cudaSuccess;
  return e ? cudaSuccess : rgpu_rt_ret(cudaErrorSymbolNotFound);
}

RGPU_API cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr,
                                             unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult *driverStatus) {
  return entry_point(symbol, funcPtr, CUDART_VERSION, flags, driverStatus, 0);
}

RGPU_API_PTSZ(cudaError_t cudaGetDriverEntryPoint_ptsz(
    const char *symbol, void **funcPtr, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult *driverStatus)) {
  return entry_point(symbol, funcPtr, CUDART_VERSION, flags, driverStatus, 1);
}

RGPU_API cudaError_t cudaGetDriverEntryPointByVersion(
    const char *symbol, void **funcPtr, unsigned int cudaVersion, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult *driverStatus) {
  return entry_point(symbol, funcPtr, cudaVersion, flags, driverStatus, 0);
}

RGPU_API_PTSZ(cudaError_t cudaGetDriverEntryPointByVersion_ptsz(
    const char *symbol, void **funcPtr, unsigned int cudaVersion, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult *driverStatus)) {
  return entry_point(symbol, funcPtr, cudaVersion, flags, driverStatus, 1);
}
