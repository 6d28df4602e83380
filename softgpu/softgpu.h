/* softgpu: extension entry points of libsoftgpu.so beyond the CUDA driver
 * API it implements.  rgpu-server looks these up with dlsym after loading
 * a driver; the real libcuda.so.1 has none of them, which is how the server
 * tells the two apart. */
#ifndef SOFTGPU_H
#define SOFTGPU_H

#include <stddef.h>
#include <stdint.h>
#include <cuda.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Returns 1: the loaded driver is softgpu. */
int sgIsSoftgpu(void);

/* Routes the text of device-side printf to fn (called from the thread that
 * runs the kernel, once per printf, text not NUL-terminated).  fn NULL
 * restores the default, stdout.  Applies to launches that start after the
 * call. */
typedef void (*sgPrintHandler)(void *ctx, const char *text, size_t len);
CUresult sgSetPrintHandler(sgPrintHandler fn, void *ctx);

/* CUDA_SUCCESS when [addr, addr+len) lies in one live allocation (and is
 * writable when `write`), else CUDA_ERROR_INVALID_VALUE. */
CUresult sgMemCheck(uint64_t addr, uint64_t len, int write);

#ifdef __cplusplus
}
#endif
#endif
