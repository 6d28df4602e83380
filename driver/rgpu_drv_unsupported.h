/* The hook of every generated driver stub (gen_driver.py stubs): logs name
 * once per process and returns CUDA_ERROR_NOT_SUPPORTED.  It leaves
 * cudart's per-thread last error alone (a driver call never changes what
 * cudaGetLastError answers). */
#ifndef RGPU_DRV_UNSUPPORTED_H
#define RGPU_DRV_UNSUPPORTED_H

int rgpu_drv_report_unsupported(const char *name, int *logged_once);

#endif
