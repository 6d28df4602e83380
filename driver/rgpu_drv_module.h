/* Driver-API modules, libraries, kernels and functions of rgpu's
 * libcuda.so.1 (driver/rgpu_drv_module.c, driver/rgpu_drv_launch.c).
 *
 * CUmodule, CUfunction, CUlibrary and CUkernel are client-side structs
 * behind the driver's opaque pointer types.  Each starts with a magic
 * number, checked before anything else is read, so a handle the program
 * made up or already released is CUDA_ERROR_INVALID_HANDLE, never a
 * crash: released handles stay allocated as husks with a dead magic (a few
 * dozen bytes each), because a program may still pass them.
 *
 * A module is one MODULE_LOAD on the server (one device: the one current
 * at the load); its functions are named afterwards (MODULE_GET_FUNCTION)
 * and get their server index and parameter layout then.  A library
 * (cuLibraryLoadData) is context-independent: it keeps its image and loads
 * it as a module on each device where it is first used.  A CUkernel is the
 * library's kernel by name; CUDA lets a program pass it wherever a
 * CUfunction goes, so every entry point that takes a CUfunction accepts a
 * kernel too and resolves it to its function on the current device.
 *
 * The runtime's registered kernels cross over too: cudaGetKernel's handle
 * passes as a CUkernel, and cudaGetFuncBySymbol's CUfunction lives in a
 * driver view of the runtime's module (runtime = 1), which the driver
 * never unloads. */
#ifndef RGPU_DRV_MODULE_H
#define RGPU_DRV_MODULE_H

#include <cuda.h>
#include <stdint.h>

#include "rgpu_drv_internal.h"

#define RGPU_DRV_MODULE_MAGIC 0x4c444f4du  /* "MODL" */
#define RGPU_DRV_FUNC_MAGIC 0x434e5546u    /* "FUNC" */
#define RGPU_DRV_LIBRARY_MAGIC 0x5942494cu /* "LIBY" */
#define RGPU_DRV_KERNEL_MAGIC 0x4e52454bu  /* "KERN" */
#define RGPU_DRV_DEAD_MAGIC 0x44414544u    /* "DEAD": released */

/* Whether p can be one of these handles at all, before its magic is read:
 * they come from calloc (aligned to 16, never in the first 64 KiB), so a
 * small integer or a misaligned pointer passed as a handle is refused
 * without touching memory. */
static inline int rgpu_drv_handle_plausible(const void *p) {
  return (uintptr_t)p >= 65536 && ((uintptr_t)p & 7) == 0;
}

struct CUmod_st {
  uint32_t magic;
  uint64_t id;     /* the server's module id */
  int device;      /* the device it was loaded on */
  uint32_t epoch;  /* rgpu_rt_device_epoch at the load: a reset drops it */
  struct CUlib_st *library; /* the library it was loaded for, or NULL */
  /* 1: the runtime's module of a registered fatbin, seen by the driver
   * (runtime_module in rgpu_drv_module.c); the runtime owns and unloads it. */
  int runtime;
  rgpu_mutex lock; /* guards funcs (a leaf lock: no round trip under it) */
  struct CUfunc_st **funcs; /* handed out by cuModuleGetFunction */
  size_t nfuncs, capfuncs;
  uint64_t *globals; /* addresses cuModuleGetGlobal put in the range table */
  size_t nglobals, capglobals;
};

struct CUfunc_st {
  uint32_t magic;
  struct CUmod_st *module;
  /* The registered kernel this is (cudaGetFuncBySymbol), whose recorded
   * attributes launches follow, or NULL. */
  rgpu_rt_func *rt_func;
  uint32_t index; /* MODULE_GET_FUNCTION's answer */
  char *name;
  rgpu_param_layout layout;
  /* cuFuncSetAttribute's values, for the launch check (-1: unset). */
  int max_dyn_shmem;
  /* FUNC_GET_ATTRS's answer, fetched once (attrs_valid); cuFuncSetAttribute
   * updates the values it sets. */
  int attrs_valid;
  int32_t attrs[CU_FUNC_ATTRIBUTE_MAX < 64 ? CU_FUNC_ATTRIBUTE_MAX : 64];
};

struct CUlib_st {
  uint32_t magic;
  void *image; /* a copy: libraries load lazily, per device */
  size_t size;
  rgpu_mutex lock; /* guards mods and kernels; dropped for round trips */
  struct CUmod_st *mods[RGPU_MAX_DEVICES];
  struct CUkern_st **kernels;
  size_t nkernels, capkernels;
};

struct CUkern_st {
  uint32_t magic;
  struct CUlib_st *library;
  char *name;
};

/* ---- calls (rgpu_drv_module.c) ------------------------------------------ */

/* The result of a request that waited for the server (rc: 0, a CUresult or
 * a transport failure < 0), with async errors that arrived folded in as
 * cudart does; a server's CUresult is returned as it came.  The caller
 * puts the runtime last error back (rgpu_rt_last_error_set). */
CUresult rgpu_drv_reply_ret(rgpu_client *c, int rc);

/* ---- handles ------------------------------------------------------------ */

/* The function a CUfunction names: itself, or for a CUkernel (CUDA allows
 * the cast) the library's function on device dev (dev < 0: the current
 * context's device), loaded and looked
 * up on first use (round trips, no lock held).  Errors:
 * CUDA_ERROR_INVALID_HANDLE for a bad or released handle, or a module the
 * device dropped (reset); what the load or lookup answered. */
CUresult rgpu_drv_resolve_func(rgpu_client *c, CUfunction f, int dev, struct CUfunc_st **out);
/* 1 when p is one of this facade's CUfunction or CUkernel handles (live or
 * released): the runtime then hands a call on it to the driver.  A table
 * lookup: p is never read. */
int rgpu_drv_is_function(const void *p);
/* A registered kernel of the runtime as a CUfunction on dev
 * (cudaGetFuncBySymbol): the runtime's module there, seen by the driver,
 * and the function in it, which launches by the runtime's recorded
 * attributes.  Round trips the first time; errors as CUresult. */
CUresult rgpu_drv_runtime_function(rgpu_client *c, rgpu_rt_func *rf, int dev, CUfunction *out);
/* FUNC_GET_ATTRS once per function (then cached; cuFuncSetAttribute
 * keeps it current).  Round trip on first use. */
CUresult rgpu_drv_func_attrs(rgpu_client *c, struct CUfunc_st *f, const int32_t **attrs);

/* ---- launches (rgpu_drv_launch.c) --------------------------------------- */

typedef struct {
  dim3 grid, block;
  unsigned shmem;
  CUstream stream;
  int per_thread;      /* a _ptsz entry point: NULL is the per-thread stream */
  int cooperative;
  unsigned cluster[3]; /* zeros: none */
} rgpu_drv_launch_cfg;

#include "rgpu_cudart_op.h"

/* A launch's operation value, not submitted: the function resolved (a
 * CUkernel on the current device), cudart's configuration checks, the
 * stream, and the parameters (kernelParams, or `extra`'s packed buffer)
 * packed into stackbuf or, when larger than stack_cap, a malloc'd *heap
 * the caller frees after using the op.  Launches submit it; driver graph
 * kernel nodes copy it (node_params_launch). */
CUresult rgpu_drv_launch_prepare(rgpu_client *c, CUfunction func, const rgpu_drv_launch_cfg *cfg,
                                 void **kernelParams, void **extra, uint8_t *stackbuf,
                                 size_t stack_cap, uint8_t **heap, rgpu_rt_op *op);

#endif
