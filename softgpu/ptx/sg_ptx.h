/* sg_ptx: the PTX parser and interpreter inside softgpu.
 *
 * A module is parsed once (text -> compact pre-decoded form); kernels of it
 * are then launched any number of times.  The interpreter knows nothing of
 * contexts, streams or allocations: the softgpu driver passes an
 * environment whose callbacks translate device addresses into host memory
 * and receive printf output.  All results are CUresult values (cuda.h). */
#ifndef SG_PTX_H
#define SG_PTX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sg_ptx_module sg_ptx_module;
typedef struct sg_ptx_kernel sg_ptx_kernel;

/* Parses PTX text (need not be NUL-terminated).  On failure returns a
 * CUresult (CUDA_ERROR_INVALID_PTX or CUDA_ERROR_NOT_SUPPORTED) and writes
 * "line N: unsupported instruction 'foo.bar'" or similar into err. */
int sg_ptx_module_parse(const char *ptx, size_t len, sg_ptx_module **out,
                        char *err, size_t errlen);
void sg_ptx_module_free(sg_ptx_module *m);

/* Kernels (.entry) of the module. */
int sg_ptx_module_kernel_count(const sg_ptx_module *m);
const sg_ptx_kernel *sg_ptx_module_kernel(const sg_ptx_module *m, int index);
const sg_ptx_kernel *sg_ptx_module_find_kernel(const sg_ptx_module *m, const char *name);
const char *sg_ptx_kernel_name(const sg_ptx_kernel *k);
int sg_ptx_kernel_param_count(const sg_ptx_kernel *k);
/* Offset and size of parameter `index` inside the packed parameter buffer
 * (natural/declared alignment, as cuFuncGetParamInfo reports).  Returns 0,
 * or CUDA_ERROR_INVALID_VALUE past the last parameter. */
int sg_ptx_kernel_param_info(const sg_ptx_kernel *k, int index, size_t *offset, size_t *size);
size_t sg_ptx_kernel_param_bytes(const sg_ptx_kernel *k);
/* Static shared memory bytes and per-thread local bytes the kernel declares. */
size_t sg_ptx_kernel_static_shared(const sg_ptx_kernel *k);
size_t sg_ptx_kernel_local_bytes(const sg_ptx_kernel *k);
int sg_ptx_kernel_max_threads(const sg_ptx_kernel *k); /* .maxntid product or 1024 */

/* Module-scope variables in .global and .const space.  The driver allocates
 * device memory for each (copying `init` when non-NULL, zeroing otherwise)
 * and tells the module where it lives before the first launch. */
typedef enum { SG_PTX_SPACE_GLOBAL = 1, SG_PTX_SPACE_CONST = 2 } sg_ptx_space;
typedef struct {
  const char *name;
  size_t size;
  size_t align;
  sg_ptx_space space;
  const void *init; /* initializer bytes (size bytes) or NULL */
} sg_ptx_global_info;
int sg_ptx_module_global_count(const sg_ptx_module *m);
int sg_ptx_module_global(const sg_ptx_module *m, int index, sg_ptx_global_info *out);
void sg_ptx_module_set_global_addr(sg_ptx_module *m, int index, uint64_t device_addr);

/* A device allocation as the driver sees it.  The interpreter caches the
 * last range it was given, so lookups happen once per allocation touched,
 * not once per access. */
typedef struct {
  uint64_t base;   /* device address of the first byte */
  uint64_t size;
  void *host;      /* host memory backing base */
} sg_ptx_range;

/* A texture or surface object as the tex/tld4/txq/suld/sust instructions
 * see it (sg_ptx_tex.c).  The driver fills it from its own descriptors;
 * enumerations carry cuda.h's values (CUarray_format, CUaddress_mode,
 * CUfilter_mode). */
enum { SG_PTX_RES_ARRAY = 1, SG_PTX_RES_LINEAR, SG_PTX_RES_PITCH2D };
typedef struct {
  uint8_t *data;          /* host memory of element (0,0,0) of layer 0 */
  uint64_t bytes;         /* bytes addressable from data (bounds of every access) */
  int resource;           /* SG_PTX_RES_* */
  int is_surface;         /* a surface object (suld/sust); else a texture object */
  int dims;               /* 1, 2 or 3 (layered: of one layer) */
  int layered;
  unsigned format;        /* CUarray_format */
  unsigned channels;      /* 1, 2 or 4 */
  unsigned elem_size;     /* bytes of one element (all channels) */
  uint64_t width, height, depth; /* elements; 1 in unused dimensions */
  uint64_t layers;        /* layered: number of layers, else 1 */
  uint64_t pitch;         /* bytes from one row to the next */
  uint64_t slice;         /* bytes from one 2D slice (or layer) to the next */
  unsigned addr_mode[3];  /* CUaddress_mode per dimension */
  unsigned filter;        /* CUfilter_mode */
  int read_as_int;        /* CU_TRSF_READ_AS_INTEGER */
  int normalized_coords;  /* CU_TRSF_NORMALIZED_COORDINATES */
  float border[4];
} sg_ptx_tex;

typedef struct {
  /* Finds the allocation containing device address addr; returns 0 and
   * fills *r, or -1 if addr is not inside any allocation. Thread-safe. */
  int (*lookup)(void *ctx, uint64_t addr, sg_ptx_range *r);
  /* Receives the formatted text of each device printf. May be NULL (stdout). */
  void (*print)(void *ctx, const char *text, size_t len);
  void *ctx;
  int nworkers; /* threads running blocks; 0 = number of online CPUs */
  /* Wall-clock limit of one launch in milliseconds; 0 = none.  Past it the
   * launch stops with CUDA_ERROR_LAUNCH_TIMEOUT (a kernel that never ends
   * would otherwise hold its session forever). */
  unsigned timeout_ms;
  /* Resolves a texture/surface object handle (the 64-bit value a kernel
   * passes to tex/suld/sust); returns 0 and fills *t, or -1 for a handle
   * that is not a live object.  May be NULL (every object is invalid).
   * Called once per instruction and distinct handle, not per lane.  The
   * memory behind t->data must stay valid for the whole launch. */
  int (*texobj)(void *ctx, uint64_t handle, sg_ptx_tex *t);
  /* Device-side malloc and free (the `malloc`/`free` a kernel calls): the
   * address of size new bytes of device memory, or 0 when the heap is
   * full; free of such an address (0: nothing).  May be NULL (malloc
   * returns 0).  Called per calling lane. */
  uint64_t (*dev_malloc)(void *ctx, uint64_t size);
  void (*dev_free)(void *ctx, uint64_t addr);
  /* cudaGraphSetConditional(handle, value) from device code: 0, or -1 for
   * a handle that is not a live conditional handle (the launch then
   * faults).  May be NULL (every handle is unknown).  Called per lane. */
  int (*set_conditional)(void *ctx, uint64_t handle, uint32_t value);
} sg_ptx_env;

typedef struct {
  unsigned grid[3];
  unsigned block[3];
  size_t dynamic_shared;
  const void *params;   /* packed parameter buffer, laid out per param_info */
  size_t params_size;
} sg_ptx_launch_cfg;

/* Describes why a launch failed, for the error message and logs. */
typedef struct {
  int code;               /* CUresult */
  char message[256];      /* "illegal address 0x... (4-byte st.global) in _Z3fooPf block (1,0,0) thread (33,0,0), line 57" */
  uint64_t address;
  unsigned block[3], thread[3];
} sg_ptx_fault;

/* Runs the grid to completion on env->nworkers threads.  Returns
 * CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE (bad configuration),
 * CUDA_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_MISALIGNED_ADDRESS,
 * CUDA_ERROR_ILLEGAL_INSTRUCTION, CUDA_ERROR_LAUNCH_FAILED (trap),
 * CUDA_ERROR_ASSERT (device assert(), its message goes to env->print),
 * CUDA_ERROR_LAUNCH_TIMEOUT (env->timeout_ms exceeded),
 * CUDA_ERROR_NOT_SUPPORTED; fills *fault on failure (may be NULL). */
int sg_ptx_launch(const sg_ptx_kernel *k, const sg_ptx_launch_cfg *cfg,
                  const sg_ptx_env *env, sg_ptx_fault *fault);

/* Counters of one launch: thread_insns counts instructions executed by each
 * thread (what a GPU profiler calls thread instructions), warp_insns the
 * decoded instructions dispatched (each applied to up to 32 lanes). */
typedef struct {
  uint64_t thread_insns;
  uint64_t warp_insns;
} sg_ptx_stats;

/* sg_ptx_launch that also reports counters (stats may be NULL). */
int sg_ptx_launch_ex(const sg_ptx_kernel *k, const sg_ptx_launch_cfg *cfg,
                     const sg_ptx_env *env, sg_ptx_fault *fault,
                     sg_ptx_stats *stats);

#ifdef __cplusplus
}
#endif
#endif
