/* Driver-API modules, libraries, kernels and function attributes
 * (rgpu_drv_cuModule*, cuLibrary*, cuKernel*, cuFunc*), inside
 * libcudart.so.13 where the session lives; libcuda.so.1 forwards to them.
 *
 * Loading a module is a round trip, as real CUDA reports a bad image at
 * the call: MODULE_LOAD with the image and no names.  The program then
 * names kernels and variables one at a time (MODULE_GET_FUNCTION and
 * MODULE_GET_GLOBAL, round trips too: their answers are the index a launch
 * sends and the address the program uses).  Handles are the client-side
 * structs of rgpu_drv_module.h.  A driver call never changes cudart's
 * per-thread last error (BEGIN/RET below). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_array.h"
#include "rgpu_calls.h"
#include "rgpu_cudart.h"
#include "rgpu_drv_module.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"

/* ---- the handles this facade made ------------------------------------------ */

/* Every CUfunction and CUkernel ever handed out (they are never freed:
 * released ones stay as husks), so that the runtime can ask whether a
 * pointer a program passed as a kernel is one of them without reading
 * memory behind it: a garbage pointer given to cudaLaunchKernel is an
 * error, never a crash.  Open addressing, guarded by g_handles_lock (a
 * leaf). */
static rgpu_mutex g_handles_lock = RGPU_MUTEX_INITIALIZER;
static const void **g_handles;
static size_t g_handles_cap, g_handles_n;

static size_t handle_slot(const void *p, size_t cap) {
  uint64_t h = (uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ull;
  return (size_t)(h >> 17) & (cap - 1);
}

/* Records p; 0, or -1 when the table cannot grow (p then stays unknown to
 * the runtime, which refuses it as no kernel). */
static int handles_add(const void *p) {
  rgpu_mutex_lock(&g_handles_lock);
  int rc = 0;
  if ((g_handles_n + 1) * 2 > g_handles_cap) {
    size_t cap = g_handles_cap ? g_handles_cap * 2 : 64;
    const void **t = calloc(cap, sizeof *t);
    if (!t) {
      rc = -1;
    } else {
      for (size_t i = 0; i < g_handles_cap; i++)
        if (g_handles[i]) {
          size_t j = handle_slot(g_handles[i], cap);
          while (t[j]) j = (j + 1) & (cap - 1);
          t[j] = g_handles[i];
        }
      free(g_handles);
      g_handles = t;
      g_handles_cap = cap;
    }
  }
  if (rc == 0) {
    size_t j = handle_slot(p, g_handles_cap);
    while (g_handles[j] && g_handles[j] != p) j = (j + 1) & (g_handles_cap - 1);
    if (!g_handles[j]) g_handles_n++;
    g_handles[j] = p;
  }
  rgpu_mutex_unlock(&g_handles_lock);
  return rc;
}

int rgpu_drv_is_function(const void *p) {
  if (!rgpu_drv_handle_plausible(p)) return 0;
  rgpu_mutex_lock(&g_handles_lock);
  int found = 0;
  if (g_handles_cap) {
    size_t j = handle_slot(p, g_handles_cap);
    while (g_handles[j] && g_handles[j] != p) j = (j + 1) & (g_handles_cap - 1);
    found = g_handles[j] == p;
  }
  rgpu_mutex_unlock(&g_handles_lock);
  return found;
}

/* ---- calls ---------------------------------------------------------------- */

CUresult rgpu_drv_reply_ret(rgpu_client *c, int rc) {
  cudaError_t e = rgpu_rt_sync_ret(c, rc);
  /* The server's own code when nothing else (an async error, a sticky
   * one) took precedence: the round trip through cudaError_t would fold
   * codes the runtime does not tell apart. */
  if (rc > 0 && e == rgpu_cudart_from_cu(rc)) return (CUresult)rc;
  return rgpu_drv_from_rt(e);
}

/* The device of the calling thread's current context, which becomes the
 * runtime's current device (rgpu_drv_ctx_enter); CUDA_ERROR_INVALID_CONTEXT
 * when no context is current. */
static CUresult current_device(int *dev) {
  CUresult r = rgpu_drv_ctx_enter(dev);
  if (r == CUDA_SUCCESS && (*dev < 0 || *dev >= RGPU_MAX_DEVICES)) r = CUDA_ERROR_INVALID_CONTEXT;
  return r;
}

/* Entry points begin with RGPU_DRV_BEGIN and end with RGPU_DRV_RET
 * (rgpu_drv_internal.h): the runtime code used below records errors in the
 * runtime's last error, which no driver call may change. */

/* The current context's device into dev, or RGPU_DRV_RET's the error. */
#define CUR_DEV(dev)                                          \
  int dev;                                                    \
  do {                                                        \
    CUresult cr_ = current_device(&dev);                 \
    if (cr_ != CUDA_SUCCESS) RGPU_DRV_RET(cr_);                        \
  } while (0)

/* ---- images ------------------------------------------------------------- */

static uint16_t rd16(const uint8_t *p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}
static uint32_t rd32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}
static uint64_t rd64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

/* Images above this are refused before anything is read past the header. */
#define RGPU_DRV_MAX_IMAGE ((uint64_t)1 << 30)

/* How many bytes of the image the server needs.  The driver API passes a
 * bare pointer: a fatbin says its size in its header, a cubin in its ELF
 * headers (the section table, and every section's extent), PTX text ends
 * at its NUL.  A __fatBinC_Wrapper_t is sent as its 24 bytes: the server's
 * driver refuses it with its own reason, as CUDA 13 does locally.  Returns
 * CUDA_ERROR_INVALID_IMAGE for a header that does not add up. */
static CUresult image_size(const void *image, size_t *len) {
  const uint8_t *p = image;
  uint32_t magic = rd32(p);
  if (magic == 0xBA55ED50u) { /* fatbin */
    uint16_t hsize = rd16(p + 6);
    uint64_t body = rd64(p + 8);
    if (hsize < 16 || body > RGPU_DRV_MAX_IMAGE) return CUDA_ERROR_INVALID_IMAGE;
    *len = (size_t)(hsize + body);
    return CUDA_SUCCESS;
  }
  if (magic == 0x464c457fu) { /* "\177ELF" */
    if (p[4] != 2 /* ELFCLASS64 */) return CUDA_ERROR_INVALID_IMAGE;
    uint64_t phoff = rd64(p + 0x20), shoff = rd64(p + 0x28);
    uint16_t phentsize = rd16(p + 0x36), phnum = rd16(p + 0x38);
    uint16_t shentsize = rd16(p + 0x3a), shnum = rd16(p + 0x3c);
    if (phoff > RGPU_DRV_MAX_IMAGE || shoff > RGPU_DRV_MAX_IMAGE || (shnum && shentsize < 0x40))
      return CUDA_ERROR_INVALID_IMAGE;
    uint64_t end = 0x40;
    if (phoff + (uint64_t)phentsize * phnum > end) end = phoff + (uint64_t)phentsize * phnum;
    if (shoff + (uint64_t)shentsize * shnum > end) end = shoff + (uint64_t)shentsize * shnum;
    for (uint16_t i = 0; i < shnum; i++) {
      const uint8_t *sh = p + shoff + (uint64_t)i * shentsize;
      if (rd32(sh + 4) == 8 /* SHT_NOBITS */) continue;
      uint64_t off = rd64(sh + 0x18), sz = rd64(sh + 0x20);
      if (off > RGPU_DRV_MAX_IMAGE || sz > RGPU_DRV_MAX_IMAGE) return CUDA_ERROR_INVALID_IMAGE;
      if (off + sz > end) end = off + sz;
    }
    if (end > RGPU_DRV_MAX_IMAGE) return CUDA_ERROR_INVALID_IMAGE;
    *len = (size_t)end;
    return CUDA_SUCCESS;
  }
  if (magic == 0x466243B1u) { /* __fatBinC_Wrapper_t */
    *len = 24;
    return CUDA_SUCCESS;
  }
  /* PTX (or anything else) as text, up to its NUL, as the driver reads it. */
  *len = strlen((const char *)p) + 1;
  if (*len > RGPU_DRV_MAX_IMAGE) return CUDA_ERROR_INVALID_IMAGE;
  return CUDA_SUCCESS;
}

/* Reads a whole file for cuModuleLoad / cuLibraryLoadFromFile, with a NUL
 * after it (PTX text ends there). */
static CUresult read_image_file(const char *path, void **out, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return errno == ENOENT ? CUDA_ERROR_FILE_NOT_FOUND : CUDA_ERROR_OPERATING_SYSTEM;
  size_t cap = 1 << 16, n = 0;
  uint8_t *buf = malloc(cap);
  CUresult r = buf ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
  while (r == CUDA_SUCCESS) {
    if (n + 1 >= cap) {
      if (cap >= RGPU_DRV_MAX_IMAGE) {
        r = CUDA_ERROR_INVALID_IMAGE;
        break;
      }
      uint8_t *nb = realloc(buf, cap * 2);
      if (!nb) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        break;
      }
      buf = nb;
      cap *= 2;
    }
    size_t got = fread(buf + n, 1, cap - n - 1, f);
    n += got;
    if (got == 0) {
      if (ferror(f)) r = CUDA_ERROR_OPERATING_SYSTEM;
      break;
    }
  }
  fclose(f);
  if (r != CUDA_SUCCESS) {
    free(buf);
    return r;
  }
  buf[n] = 0;
  *out = buf;
  *len = n;
  return CUDA_SUCCESS;
}

/* ---- MODULE_LOAD -------------------------------------------------------- */

/* The one place a driver-API image is sent to the server: MODULE_LOAD of
 * len bytes as module `id` on dev, with no kernel or variable names (the
 * program names them later).  A round trip: the answer is the driver's
 * verdict on the image; why (why_cap bytes) gets the server's reason on
 * failure (its driver's JIT log).  No cudart lock held. */
static CUresult module_load_send(rgpu_client *c, int dev, uint64_t id, const void *image,
                                 size_t len, char *why, size_t why_cap) {
  /* Through the image cache (cudart/rgpu_cudart_image.c): a fatbin is cut
   * to the device's entry and an image the server has cached is named by
   * its hash, not sent (issue 15). */
  rgpu_client_reply r = {0};
  rgpu_status rc = rgpu_rt_image_load(c, dev, id, image, len, NULL, 0, NULL, 0, &r);
  if (why && why_cap) snprintf(why, why_cap, "%s", rc > 0 ? r.msg : "");
  if (rc > 0) RGPU_WARN("the server refused a module: %s", r.msg[0] ? r.msg : "no reason given");
  return rgpu_drv_reply_ret(c, rc);
}

/* Loads image as a new module on dev (a round trip) and makes its handle. */
static CUresult module_new(rgpu_client *c, int dev, const void *image, size_t len,
                           struct CUlib_st *library, char *why, size_t why_cap,
                           struct CUmod_st **out) {
  struct CUmod_st *m = calloc(1, sizeof *m);
  if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
  uint64_t id = rgpu_rt_new_handle_id();
  CUresult r = module_load_send(c, dev, id, image, len, why, why_cap);
  if (r != CUDA_SUCCESS) {
    free(m);
    return r;
  }
  m->id = id;
  m->device = dev;
  m->epoch = rgpu_rt_device_epoch(dev);
  m->library = library;
  rgpu_mutex_init(&m->lock);
  m->magic = RGPU_DRV_MODULE_MAGIC;
  *out = m;
  return CUDA_SUCCESS;
}

static int module_ok(const struct CUmod_st *m) {
  return rgpu_drv_handle_plausible(m) && m->magic == RGPU_DRV_MODULE_MAGIC;
}

/* A module loaded before its device was reset no longer exists on the
 * server. */
static CUresult module_live(const struct CUmod_st *m) {
  if (!module_ok(m)) return CUDA_ERROR_INVALID_HANDLE;
  if (m->epoch != rgpu_rt_device_epoch(m->device)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  return CUDA_SUCCESS;
}

/* Turns the module's handles into husks and unloads it on the server
 * (queued: nothing the program waits for).  Library modules go with their
 * library only. */
static void module_release(rgpu_client *c, struct CUmod_st *m) {
  rgpu_mutex_lock(&m->lock);
  m->magic = RGPU_DRV_DEAD_MAGIC;
  for (size_t i = 0; i < m->nfuncs; i++) {
    struct CUfunc_st *f = m->funcs[i];
    f->magic = RGPU_DRV_DEAD_MAGIC;
    free(f->name);
    free(f->layout.offsets);
    free(f->layout.sizes);
    f->name = NULL;
    memset(&f->layout, 0, sizeof f->layout);
  }
  free(m->funcs);
  m->funcs = NULL;
  m->nfuncs = 0;
  for (size_t i = 0; i < m->nglobals; i++) rgpu_range_remove(rgpu_rt_device_ranges(), m->globals[i], NULL);
  free(m->globals);
  m->globals = NULL;
  m->nglobals = 0;
  rgpu_mutex_unlock(&m->lock);
  if (m->epoch == rgpu_rt_device_epoch(m->device) &&
      !rgpu_client_is_dead(rgpu_rt_route(c, m->device))) {
    rgpu_msg_module_unload_req q = {.module_id = m->id};
    rgpu_call_module_unload(c, m->device, RGPU_CALL_ASYNC, &q, NULL, NULL);
  }
}

/* The JIT options of cuModuleLoadDataEx / cuLibraryLoadData: all are
 * accepted and ignored (the server's driver compiles as it sees fit),
 * except the logs: the error log gets the server's reason on failure, the
 * info log stays empty, and their sizes report what was written. */
typedef struct {
  char *err;
  size_t err_cap;
  void **err_size_slot;
  char *info;
  size_t info_cap;
  void **info_size_slot;
} jit_logs;

static CUresult read_jit_options(unsigned n, CUjit_option *opts, void **vals, jit_logs *l) {
  memset(l, 0, sizeof *l);
  if (n && (!opts || !vals)) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < n; i++) {
    switch (opts[i]) {
    case CU_JIT_ERROR_LOG_BUFFER: l->err = vals[i]; break;
    case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
      /* Scalar option values travel in the pointer itself. */
      l->err_cap = (size_t)(uintptr_t)vals[i];
      l->err_size_slot = &vals[i];
      break;
    case CU_JIT_INFO_LOG_BUFFER: l->info = vals[i]; break;
    case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
      l->info_cap = (size_t)(uintptr_t)vals[i];
      l->info_size_slot = &vals[i];
      break;
    default:
      if ((unsigned)opts[i] >= CU_JIT_NUM_OPTIONS) return CUDA_ERROR_INVALID_VALUE;
      break;
    }
  }
  return CUDA_SUCCESS;
}

static void write_jit_logs(const jit_logs *l, const char *why) {
  if (l->err && l->err_cap) {
    snprintf(l->err, l->err_cap, "%s", why ? why : "");
    if (l->err_size_slot) *l->err_size_slot = (void *)(uintptr_t)(strlen(l->err) + 1);
  }
  if (l->info && l->info_cap) {
    l->info[0] = 0;
    if (l->info_size_slot) *l->info_size_slot = (void *)(uintptr_t)0;
  }
}

/* ---- cuModule* ---------------------------------------------------------- */

static CUresult module_load_image(CUmodule *module, const void *image, jit_logs *logs) {
  RGPU_DRV_BEGIN();
  if (!module || !image) RGPU_DRV_RET(CUDA_ERROR_INVALID_VALUE);
  CUR_DEV(dev);
  size_t len = 0;
  CUresult r = image_size(image, &len);
  char why[256] = "";
  if (r == CUDA_SUCCESS)
    r = module_new(c, dev, image, len, NULL, why, sizeof why, module);
  else
    snprintf(why, sizeof why, "the image's header gives no usable size");
  if (logs) write_jit_logs(logs, r == CUDA_SUCCESS ? "" : why);
  RGPU_DRV_RET(r);
}

RGPU_DRV CUresult rgpu_drv_cuModuleLoadData(CUmodule *module, const void *image) {
  return module_load_image(module, image, NULL);
}

RGPU_DRV CUresult rgpu_drv_cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                     CUjit_option *options, void **optionValues) {
  jit_logs logs;
  CUresult r = read_jit_options(numOptions, options, optionValues, &logs);
  if (r != CUDA_SUCCESS) return r;
  return module_load_image(module, image, &logs);
}

RGPU_DRV CUresult rgpu_drv_cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin) {
  return module_load_image(module, fatCubin, NULL);
}

RGPU_DRV CUresult rgpu_drv_cuModuleLoad(CUmodule *module, const char *fname) {
  if (!module || !fname) return CUDA_ERROR_INVALID_VALUE;
  void *img = NULL;
  size_t n = 0;
  CUresult r = read_image_file(fname, &img, &n);
  if (r != CUDA_SUCCESS) return r;
  r = module_load_image(module, img, NULL);
  free(img);
  return r;
}

RGPU_DRV CUresult rgpu_drv_cuModuleUnload(CUmodule hmod) {
  RGPU_DRV_BEGIN();
  if (!module_ok(hmod) || hmod->library) RGPU_DRV_RET(CUDA_ERROR_INVALID_HANDLE);
  /* The runtime's module (cuFuncGetModule of cudaGetFuncBySymbol's
   * function) is the runtime's to unload: unloading it under the
   * runtime would break every later launch of its kernels. */
  if (hmod->runtime) RGPU_DRV_RET(CUDA_ERROR_NOT_PERMITTED);
  module_release(c, hmod);
  RGPU_DRV_RET(CUDA_SUCCESS);
}

RGPU_DRV CUresult rgpu_drv_cuModuleGetLoadingMode(CUmoduleLoadingMode *mode) {
  if (!mode) return CUDA_ERROR_INVALID_VALUE;
  /* CUDA's rule: CUDA_MODULE_LOADING=EAGER, else lazy (the default since
   * 12.2).  rgpu loads a module at the call either way; the answer is
   * what the program's own environment asked for. */
  const char *env = getenv("CUDA_MODULE_LOADING");
  *mode = env && strcmp(env, "EAGER") == 0 ? CU_MODULE_EAGER_LOADING : CU_MODULE_LAZY_LOADING;
  return CUDA_SUCCESS;
}

/* Looks name up in m's functions already handed out; m->lock held. */
static struct CUfunc_st *find_func_locked(struct CUmod_st *m, const char *name) {
  for (size_t i = 0; i < m->nfuncs; i++)
    if (strcmp(m->funcs[i]->name, name) == 0) return m->funcs[i];
  return NULL;
}

/* The function `name` of module m: the handle handed out before, or a new
 * one from MODULE_GET_FUNCTION (a round trip, no lock held). */
static CUresult module_function(rgpu_client *c, struct CUmod_st *m, const char *name,
                                struct CUfunc_st **out) {
  CUresult r = module_live(m);
  if (r != CUDA_SUCCESS) return r;
  size_t nlen = strlen(name);
  if (nlen == 0) return CUDA_ERROR_NOT_FOUND;
  if (nlen > 4096) return CUDA_ERROR_INVALID_VALUE; /* no kernel name is that long */
  rgpu_mutex_lock(&m->lock);
  struct CUfunc_st *f = find_func_locked(m, name);
  rgpu_mutex_unlock(&m->lock);
  if (f) {
    *out = f;
    return CUDA_SUCCESS;
  }
  rgpu_msg_module_get_function_req q = {.module_id = m->id, .name = {name, nlen}};
  rgpu_msg_module_get_function_rep rep;
  rgpu_buf pay;
  rgpu_buf_init(&pay);
  rgpu_client_reply rr = {.payload = &pay}; /* rep's arrays point into pay */
  rgpu_status rc = rgpu_call_module_get_function(c, m->device, 0, &q, &rep, &rr);
  if (rc) {
    rgpu_buf_free(&pay);
    return rgpu_drv_reply_ret(c, rc);
  }
  f = calloc(1, sizeof *f);
  uint32_t np = rep.param_offsets.count;
  if (f) {
    f->name = strdup(name);
    f->layout.nparams = np;
    f->layout.offsets = calloc(np ? np : 1, sizeof *f->layout.offsets);
    f->layout.sizes = calloc(np ? np : 1, sizeof *f->layout.sizes);
  }
  r = CUDA_SUCCESS;
  if (!f || !f->name || !f->layout.offsets || !f->layout.sizes) {
    r = CUDA_ERROR_OUT_OF_MEMORY;
  } else if (rep.param_sizes.count != np) {
    RGPU_ERROR("malformed MODULE_GET_FUNCTION reply: %u offsets, %u sizes", np, rep.param_sizes.count);
    r = CUDA_ERROR_UNKNOWN;
  } else {
    for (uint32_t i = 0; i < np; i++) {
      f->layout.offsets[i] = rgpu_array_u32(&rep.param_offsets, i);
      f->layout.sizes[i] = rgpu_array_u32(&rep.param_sizes, i);
    }
    if (rgpu_cudart_layout_finish(&f->layout)) r = CUDA_ERROR_INVALID_IMAGE;
  }
  rgpu_buf_free(&pay);
  if (r == CUDA_SUCCESS) {
    f->module = m;
    f->index = rep.func_index;
    f->max_dyn_shmem = -1;
    f->magic = RGPU_DRV_FUNC_MAGIC;
    rgpu_mutex_lock(&m->lock);
    struct CUfunc_st *again = find_func_locked(m, name); /* another thread's, meanwhile */
    if (!again && (m->magic != RGPU_DRV_MODULE_MAGIC ||
                   RGPU_ARRAY_RESERVE(m->funcs, m->capfuncs, m->nfuncs + 1, 8)))
      r = m->magic != RGPU_DRV_MODULE_MAGIC ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_OUT_OF_MEMORY;
    else if (!again)
      m->funcs[m->nfuncs++] = f;
    rgpu_mutex_unlock(&m->lock);
    if (!again && r == CUDA_SUCCESS) handles_add(f);
    if (again) {
      f->magic = 0;
      r = CUDA_SUCCESS;
      *out = again;
      goto drop;
    }
    if (r == CUDA_SUCCESS) {
      *out = f;
      return CUDA_SUCCESS;
    }
  }
drop:
  if (f) {
    free(f->name);
    free(f->layout.offsets);
    free(f->layout.sizes);
    free(f);
  }
  return r;
}

RGPU_DRV CUresult rgpu_drv_cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
  RGPU_DRV_BEGIN();
  if (!hfunc || !name) RGPU_DRV_RET(CUDA_ERROR_INVALID_VALUE);
  if (!module_ok(hmod)) RGPU_DRV_RET(CUDA_ERROR_INVALID_HANDLE);
  struct CUfunc_st *f = NULL;
  CUresult r = module_function(c, hmod, name, &f);
  if (r == CUDA_SUCCESS) *hfunc = f;
  RGPU_DRV_RET(r);
}

/* MODULE_GET_GLOBAL: a round trip.  The address joins the client's range
 * table, so runtime copies with cudaMemcpyDefault know it as device
 * memory, like a registered __device__ variable. */
static CUresult module_global(rgpu_client *c, struct CUmod_st *m, const char *name,
                              CUdeviceptr *dptr, size_t *bytes) {
  CUresult r = module_live(m);
  if (r != CUDA_SUCCESS) return r;
  size_t nlen = strlen(name);
  if (nlen == 0) return CUDA_ERROR_NOT_FOUND;
  if (nlen > 4096) return CUDA_ERROR_INVALID_VALUE;
  rgpu_msg_module_get_global_req q = {.module_id = m->id, .name = {name, nlen}};
  rgpu_msg_module_get_global_rep rep = {0};
  rgpu_status rc = rgpu_call_module_get_global(c, m->device, 0, &q, &rep, NULL);
  if (rc) return rgpu_drv_reply_ret(c, rc);
  if (rep.dptr && rep.size) {
    rgpu_range rg = {.base = rep.dptr, .size = rep.size, .device = m->device, .kind = RGPU_RANGE_SYMBOL};
    rgpu_mutex_lock(&m->lock);
    if (rgpu_range_add(rgpu_rt_device_ranges(), &rg) == 0 &&
        RGPU_ARRAY_RESERVE(m->globals, m->capglobals, m->nglobals + 1, 8) == 0)
      m->globals[m->nglobals++] = rep.dptr;
    rgpu_mutex_unlock(&m->lock);
  }
  if (dptr) *dptr = (CUdeviceptr)rep.dptr;
  if (bytes) *bytes = (size_t)rep.size;
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod,
                                       const char *name) {
  RGPU_DRV_BEGIN();
  if (!name) RGPU_DRV_RET(CUDA_ERROR_INVALID_VALUE);
  if (!module_ok(hmod)) RGPU_DRV_RET(CUDA_ERROR_INVALID_HANDLE);
  RGPU_DRV_RET(module_global(c, hmod, name, dptr, bytes));
}

/* MODULE_FUNC_NAMES: the module's kernel names (a round trip).  *names
 * points into pay (strings not NUL-terminated: copy with lengths). */
static CUresult module_names(rgpu_client *c, struct CUmod_st *m, rgpu_buf *pay,
                             rgpu_msg_module_func_names_rep *rep) {
  CUresult r = module_live(m);
  if (r != CUDA_SUCCESS) return r;
  rgpu_msg_module_func_names_req q = {.module_id = m->id};
  rgpu_client_reply rr = {.payload = pay};
  rgpu_status rc = rgpu_call_module_func_names(c, m->device, 0, &q, rep, &rr);
  return rc ? rgpu_drv_reply_ret(c, rc) : CUDA_SUCCESS;
}

/* The number of kernels in module m (one MODULE_FUNC_NAMES). */
static CUresult module_name_count(rgpu_client *c, struct CUmod_st *m, unsigned *count) {
  rgpu_buf pay;
  rgpu_buf_init(&pay);
  rgpu_msg_module_func_names_rep rep;
  CUresult r = module_names(c, m, &pay, &rep);
  if (r == CUDA_SUCCESS) *count = rep.names.count;
  rgpu_buf_free(&pay);
  return r;
}

/* Runs each(c, name, i, arg) on the first n kernel names of module m (one
 * MODULE_FUNC_NAMES), in the server's order, until one fails; a name
 * longer than 4096 bytes is CUDA_ERROR_INVALID_VALUE.  The enumerations of
 * a module's functions and of a library's kernels both walk it. */
typedef CUresult (*module_name_fn)(rgpu_client *c, const char *name, unsigned i, void *arg);
static CUresult module_each_name(rgpu_client *c, struct CUmod_st *m, unsigned n,
                                 module_name_fn each, void *arg) {
  rgpu_buf pay;
  rgpu_buf_init(&pay);
  rgpu_msg_module_func_names_rep rep;
  CUresult r = module_names(c, m, &pay, &rep);
  if (r == CUDA_SUCCESS) {
    rgpu_strlist_iter it;
    rgpu_strlist_iter_init(&it, &rep.names);
    const char *s;
    size_t sl;
    char name[4097];
    for (unsigned i = 0; r == CUDA_SUCCESS && i < n && rgpu_strlist_next(&it, &s, &sl); i++) {
      if (rgpu_str_copy(name, sizeof name, s, sl)) {
        r = CUDA_ERROR_INVALID_VALUE;
        break;
      }
      r = each(c, name, i, arg);
    }
  }
  rgpu_buf_free(&pay);
  return r;
}

RGPU_DRV CUresult rgpu_drv_cuModuleGetFunctionCount(unsigned int *count, CUmodule mod) {
  RGPU_DRV_BEGIN();
  if (!count) RGPU_DRV_RET(CUDA_ERROR_INVALID_VALUE);
  if (!module_ok(mod)) RGPU_DRV_RET(CUDA_ERROR_INVALID_HANDLE);
  RGPU_DRV_RET(module_name_count(c, mod, count));
}

/* cuModuleEnumerateFunctions' step: the function of one name. */
typedef struct {
  CUmodule mod;
  CUfunction *functions;
} enum_functions;
static CUresult enum_function(rgpu_client *c, const char *name, unsigned i, void *arg) {
  enum_functions *e = arg;
  struct CUfunc_st *f = NULL;
  CUresult r = module_function(c, e->mod, name, &f);
  if (r == CUDA_SUCCESS) e->functions[i] = f;
  return r;
}

RGPU_DRV CUresult rgpu_drv_cuModuleEnumerateFunctions(CUfunction *functions, unsigned int numFunctions,
                                             CUmodule mod) {
  RGPU_DRV_BEGIN();
  if (!functions && numFunctions) RGPU_DRV_RET(CUDA_ERROR_INVALID_VALUE);
  if (!module_ok(mod)) RGPU_DRV_RET(CUDA_ERROR_INVALID_HANDLE);
  enum_functions e = {mod, functions};
  RGPU_DRV_RET(module_each_name(c, mod, numFunctions, enum_function, &e));
}

/* ---- libraries and kernels ---------------------------------------------- */

static int library_ok(const struct CUlib_st *l) {
  return rgpu_drv_handle_plausible(l) && l->magic == RGPU_DRV_LIBRARY_MAGIC;
}
static int kernel_ok(const struct CUkern_st *k) {
  return rgpu_drv_handle_plausible(k) && k->magic == RGPU_DRV_KERNEL_MAGIC;
}
/* Any CUkernel: a library's, or a registered kernel's cudaKernel_t
 * (cudaGetKernel: CUDA lets the runtime's handle go wherever a CUkernel
 * goes; rgpu_drv_resolve_func resolves both). */
static int any_kernel_ok(const struct CUkern_st *k) {
  return kernel_ok(k) || rgpu_rt_func_record(k) != NULL;
}

/* The library's module on dev, loaded now if it is not yet (a round trip
 * with the lock dropped; two threads racing keep the first, the second
 * module is unloaded). */
static CUresult library_module(rgpu_client *c, struct CUlib_st *l, int dev, struct CUmod_st **out) {
  if (dev < 0 || dev >= RGPU_MAX_DEVICES) return CUDA_ERROR_INVALID_DEVICE;
  rgpu_mutex_lock(&l->lock);
  struct CUmod_st *m = l->mods[dev];
  if (m && m->epoch != rgpu_rt_device_epoch(dev)) m = NULL; /* the device was reset */
  void *image = l->image;
  size_t size = l->size;
  rgpu_mutex_unlock(&l->lock);
  if (m) {
    *out = m;
    return CUDA_SUCCESS;
  }
  if (!image) return CUDA_ERROR_INVALID_HANDLE;
  struct CUmod_st *nm = NULL;
  CUresult r = module_new(c, dev, image, size, l, NULL, 0, &nm);
  if (r != CUDA_SUCCESS) return r;
  rgpu_mutex_lock(&l->lock);
  struct CUmod_st *old = l->mods[dev];
  int keep_old = old && old->epoch == rgpu_rt_device_epoch(dev);
  if (!keep_old && l->magic == RGPU_DRV_LIBRARY_MAGIC) l->mods[dev] = nm;
  int orphan = keep_old || l->magic != RGPU_DRV_LIBRARY_MAGIC;
  rgpu_mutex_unlock(&l->lock);
  if (orphan) {
    module_release(c, nm);
    if (!keep_old) return CUDA_ERROR_INVALID_HANDLE;
    *out = old;
    return CUDA_SUCCESS;
  }
  /* A module dropped by a reset stays a husk (the program may hold it). */
  if (old) module_release(c, old);
  *out = nm;
  return CUDA_SUCCESS;
}

static CUresult library_load(CUlibrary *library, const void *code, size_t len,
                             unsigned numJitOptions, CUjit_option *jitOptions, void **jitValues,
                             unsigned numLibraryOptions, CUlibraryOption *libraryOptions,
                             void **libraryOptionValues) {
  jit_logs logs;
  CUresult r = read_jit_options(numJitOptions, jitOptions, jitValues, &logs);
  if (r != CUDA_SUCCESS) return r;
  if (numLibraryOptions && (!libraryOptions || !libraryOptionValues)) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < numLibraryOptions; i++)
    if ((unsigned)libraryOptions[i] >= CU_LIBRARY_NUM_OPTIONS) return CUDA_ERROR_INVALID_VALUE;
  /* The image is always copied, so CU_LIBRARY_BINARY_IS_PRESERVED and the
   * host tables of CU_LIBRARY_HOST_UNIVERSAL_FUNCTION_AND_DATA_TABLE change
   * nothing here. */
  RGPU_DRV_BEGIN();
  if (!library || !code) RGPU_DRV_RET(CUDA_ERROR_INVALID_VALUE);
  if (!len && (r = image_size(code, &len)) != CUDA_SUCCESS) RGPU_DRV_RET(r);
  struct CUlib_st *l = calloc(1, sizeof *l);
  void *copy = malloc(len + 1);
  if (!l || !copy) {
    free(l);
    free(copy);
    RGPU_DRV_RET(CUDA_ERROR_OUT_OF_MEMORY);
  }
  memcpy(copy, code, len);
  ((char *)copy)[len] = 0;
  l->image = copy;
  l->size = len;
  rgpu_mutex_init(&l->lock);
  l->magic = RGPU_DRV_LIBRARY_MAGIC;
  /* Loaded on the current device now: a bad image is refused at the call,
   * as CUDA does; other devices load it when they first use it. */
  CUR_DEV(dev);
  char why[256] = "";
  struct CUmod_st *m = NULL;
  r = module_new(c, dev, copy, len, l, why, sizeof why, &m);
  write_jit_logs(&logs, r == CUDA_SUCCESS ? "" : why);
  if (r != CUDA_SUCCESS) {
    l->magic = 0;
    free(copy);
    free(l);
    RGPU_DRV_RET(r);
  }
  l->mods[dev] = m;
  *library = l;
  RGPU_DRV_RET(CUDA_SUCCESS);
}

RGPU_DRV CUresult rgpu_drv_cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                                    void **jitOptionsValues, unsigned int numJitOptions,
                                    CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                    unsigned int numLibraryOptions) {
  return library_load(library, code, 0, numJitOptions, jitOptions, jitOptionsValues,
                      numLibraryOptions, libraryOptions, libraryOptionValues);
}

RGPU_DRV CUresult rgpu_drv_cuLibraryLoadFromFile(CUlibrary *library, const char *fileName,
                                        CUjit_option *jitOptions, void **jitOptionsValues,
                                        unsigned int numJitOptions, CUlibraryOption *libraryOptions,
                                        void **libraryOptionValues, unsigned int numLibraryOptions) {
  if (!library || !fileName) return CUDA_ERROR_INVALID_VALUE;
  void *img = NULL;
  size_t n = 0;
  CUresult r = read_image_file(fileName, &img, &n);
  if (r != CUDA_SUCCESS) return r;
  /* PTX text is sent up to its NUL, like an image in memory. */
  size_t len = 0;
  r = image_size(img, &len);
  if (r == CUDA_SUCCESS && len > n + 1) r = CUDA_ERROR_INVALID_IMAGE; /* header claims more than the file */
  if (r == CUDA_SUCCESS)
    r = library_load(library, img, len, numJitOptions, jitOptions, jitOptionsValues,
                     numLibraryOptions, libraryOptions, libraryOptionValues);
  free(img);
  return r;
}

RGPU_DRV CUresult rgpu_drv_cuLibraryUnload(CUlibrary library) {
  RGPU_DRV_BEGIN();
  if (!library_ok(library)) RGPU_DRV_RET(CUDA_ERROR_INVALID_HANDLE);
  struct CUmod_st *mods[RGPU_MAX_DEVICES];
  rgpu_mutex_lock(&library->lock);
  library->magic = RGPU_DRV_DEAD_MAGIC;
  memcpy(mods, library->mods, sizeof mods);
  memset(library->mods, 0, sizeof library->mods);
  for (size_t i = 0; i < library->nkernels; i++) library->kernels[i]->magic = RGPU_DRV_DEAD_MAGIC;
  free(library->image);
  library->image = NULL;
  rgpu_mutex_unlock(&library->lock);
  for (int d = 0; d < RGPU_MAX_DEVICES; d++)
    if (mods[d]) module_release(c, mods[d]);
  RGPU_DRV_RET(CUDA_SUCCESS);
}

RGPU_DRV CUresult rgpu_drv_cuLibraryGetModule(CUmodule *pMod, CUlibrary library) {
  RGPU_DRV_BEGIN();
  if (!pMod) RGPU_DRV_RET(CUDA_ERROR_INVALID_VALUE);
  if (!library_ok(library)) RGPU_DRV_RET(CUDA_ERROR_INVALID_HANDLE);
  CUR_DEV(dev);
  struct CUmod_st *m = NULL;
  CUresult r = library_module(c, library, dev, &m);
  if (r == CUDA_SUCCESS) *pMod = m;
  RGPU_DRV_RET(r);
}

RGPU_DRV CUresult rgpu_drv_cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library,
                                     const char *name) {
  RGPU_DRV_BEGIN();
  if (!name) RGPU_DRV_RET(CUDA_ERROR_INVALID_VALUE);
  if (!library_ok(library)) RGPU_DRV_RET(CUDA_ERROR_INVALID_HANDLE);
  CUR_DEV(dev);
  struct CUmod_st *m = NULL;
  CUresult r = library_module(c, library, dev, &m);
  if (r == CUDA_SUCCESS) r = module_global(c, m, name, dptr, bytes);
  RGPU_DRV_RET(r);
}

/* The kernel's function on dev (its library's module there). */
static CUresult kernel_function(rgpu_client *c, struct CUkern_st *k, int dev, struct CUfunc_st **out) {
  struct CUlib_st *l = k->library;
  struct CUmod_st *m = NULL;
  CUresult r = library_module(c, l, dev, &m);
  if (r == CUDA_SUCCESS) r = module_function(c, m, k->name, out);
  return r;
}

/* The library's kernel `name`: the handle made before, or a new one once
 * the name is found in the library's module on dev (a round trip the
 * first time). */
static CUresult library_kernel(rgpu_client *c, struct CUlib_st *library, const char *name, int dev,
                               struct CUkern_st **out) {
  rgpu_mutex_lock(&library->lock);
  struct CUkern_st *k = NULL;
  for (size_t i = 0; i < library->nkernels; i++)
    if (strcmp(library->kernels[i]->name, name) == 0) k = library->kernels[i];
  rgpu_mutex_unlock(&library->lock);
  if (k) {
    *out = k;
    return CUDA_SUCCESS;
  }
  struct CUkern_st probe = {.magic = RGPU_DRV_KERNEL_MAGIC, .library = library, .name = (char *)name};
  struct CUfunc_st *f = NULL;
  CUresult r = kernel_function(c, &probe, dev, &f);
  if (r != CUDA_SUCCESS) return r;
  k = calloc(1, sizeof *k);
  char *nm = strdup(name);
  if (!k || !nm) {
    free(k);
    free(nm);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  k->library = library;
  k->name = nm;
  k->magic = RGPU_DRV_KERNEL_MAGIC;
  rgpu_mutex_lock(&library->lock);
  struct CUkern_st *again = NULL;
  for (size_t i = 0; i < library->nkernels; i++)
    if (strcmp(library->kernels[i]->name, name) == 0) again = library->kernels[i];
  if (!again && RGPU_ARRAY_RESERVE(library->kernels, library->capkernels, library->nkernels + 1, 8))
    r = CUDA_ERROR_OUT_OF_MEMORY;
  else if (!again)
    library->kernels[library->nkernels++] = k;
  rgpu_mutex_unlock(&library->lock);
  if (!again && r == CUDA_SUCCESS) handles_add(k);
  if (again || r != CUDA_SUCCESS) {
    free(k->name);
    free(k);
    k = again;
  }
  if (k) *out = k;
  return r;
}

RGPU_DRV CUresult rgpu_drv_cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name) {
  RGPU_DRV_BEGIN();
  if (!pKernel || !name) RGPU_DRV_RET(CUDA_ERROR_INVALID_VALUE);
  if (!library_ok(library)) RGPU_DRV_RET(CUDA_ERROR_INVALID_HANDLE);
  /* The name must exist: looked up in the module on the current device. */
  CUR_DEV(dev);
  struct CUkern_st *k = NULL;
  CUresult r = library_kernel(c, library, name, dev, &k);
  if (r == CUDA_SUCCESS) *pKernel = k;
  RGPU_DRV_RET(r);
}

RGPU_DRV CUresult rgpu_drv_cuLibraryGetKernelCount(unsigned int *count, CUlibrary lib) {
  RGPU_DRV_BEGIN();
  if (!count) RGPU_DRV_RET(CUDA_ERROR_INVALID_VALUE);
  if (!library_ok(lib)) RGPU_DRV_RET(CUDA_ERROR_INVALID_HANDLE);
  CUR_DEV(dev);
  struct CUmod_st *m = NULL;
  CUresult r = library_module(c, lib, dev, &m);
  if (r == CUDA_SUCCESS) r = module_name_count(c, m, count);
  RGPU_DRV_RET(r);
}

/* cuLibraryEnumerateKernels' step: the kernel of one name. */
typedef struct {
  CUlibrary lib;
  int dev;
  CUkernel *kernels;
} enum_kernels;
static CUresult enum_kernel(rgpu_client *c, const char *name, unsigned i, void *arg) {
  enum_kernels *e = arg;
  struct CUkern_st *k = NULL;
  CUresult r = library_kernel(c, e->lib, name, e->dev, &k);
  if (r == CUDA_SUCCESS) e->kernels[i] = k;
  return r;
}

RGPU_DRV CUresult rgpu_drv_cuLibraryEnumerateKernels(CUkernel *kernels, unsigned int numKernels,
                                                     CUlibrary lib) {
  RGPU_DRV_BEGIN();
  if (!kernels && numKernels) RGPU_DRV_RET(CUDA_ERROR_INVALID_VALUE);
  if (!library_ok(lib)) RGPU_DRV_RET(CUDA_ERROR_INVALID_HANDLE);
  CUR_DEV(dev);
  struct CUmod_st *m = NULL;
  CUresult r = library_module(c, lib, dev, &m);
  enum_kernels e = {lib, dev, kernels};
  if (r == CUDA_SUCCESS) r = module_each_name(c, m, numKernels, enum_kernel, &e);
  RGPU_DRV_RET(r);
}

RGPU_DRV CUresult rgpu_drv_cuKernelGetLibrary(CUlibrary *pLib, CUkernel kernel) {
  if (!pLib) return CUDA_ERROR_INVALID_VALUE;
  if (!kernel_ok(kernel)) return CUDA_ERROR_INVALID_HANDLE;
  *pLib = kernel->library;
  return CUDA_SUCCESS;
}

/* ---- the runtime's kernels as driver handles ---------------------------- */

/* The runtime's modules as the driver sees them, one per (server module
 * id, device), made the first time one of their kernels is used through
 * the driver (cudaGetFuncBySymbol, a cudaKernel_t in cuLaunchKernel).
 * Kept for the process, like every husk: after a device reset the runtime
 * loads the fatbin again under a new id, and functions of the old one
 * answer CUDA_ERROR_CONTEXT_IS_DESTROYED through its epoch.  The driver
 * never unloads them (the runtime does). */
static rgpu_mutex g_rt_mods_lock = RGPU_MUTEX_INITIALIZER;
static struct CUmod_st **g_rt_mods;
static size_t g_rt_nmods, g_rt_capmods;

static CUresult runtime_module(uint64_t id, int dev, struct CUmod_st **out) {
  rgpu_mutex_lock(&g_rt_mods_lock);
  struct CUmod_st *m = NULL;
  for (size_t i = 0; i < g_rt_nmods && !m; i++)
    if (g_rt_mods[i]->id == id && g_rt_mods[i]->device == dev) m = g_rt_mods[i];
  if (!m && RGPU_ARRAY_RESERVE(g_rt_mods, g_rt_capmods, g_rt_nmods + 1, 8) == 0 &&
      (m = calloc(1, sizeof *m)) != NULL) {
    m->id = id;
    m->device = dev;
    m->epoch = rgpu_rt_device_epoch(dev);
    m->runtime = 1;
    rgpu_mutex_init(&m->lock);
    m->magic = RGPU_DRV_MODULE_MAGIC;
    g_rt_mods[g_rt_nmods++] = m;
  }
  rgpu_mutex_unlock(&g_rt_mods_lock);
  *out = m;
  return m ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* The limit cudaFuncSetAttribute recorded for the kernel joins the
 * function's own (cudaFuncSetAttribute before cudaGetFuncBySymbol, as
 * CUTLASS's cluster launcher does); rgpu_rt_func_server_ref has queued the
 * recorded attributes to the server. */
static void runtime_shmem_follow(struct CUfunc_st *f, rgpu_rt_func *rf) {
  int v = rgpu_rt_func_max_dyn_shmem(rf);
  if (v > __atomic_load_n(&f->max_dyn_shmem, __ATOMIC_RELAXED)) {
    __atomic_store_n(&f->max_dyn_shmem, v, __ATOMIC_RELAXED);
    f->attrs[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES] = v;
  }
}

/* A registered kernel's function on dev: its module there (loaded now if
 * the runtime has not yet), and the function looked up in it by its
 * device name once (MODULE_GET_FUNCTION: the server answers the index the
 * runtime launches it by). */
static CUresult runtime_function(rgpu_client *c, rgpu_rt_func *rf, int dev, struct CUfunc_st **out) {
  uint64_t id = 0;
  const char *name = NULL;
  cudaError_t e = rgpu_rt_func_server_ref(c, rf, dev, &id, &name);
  if (e != cudaSuccess) return rgpu_drv_from_rt(e);
  struct CUmod_st *m = NULL;
  CUresult r = runtime_module(id, dev, &m);
  if (r == CUDA_SUCCESS) r = module_function(c, m, name, out);
  if (r != CUDA_SUCCESS) return r;
  __atomic_store_n(&(*out)->rt_func, rf, __ATOMIC_RELEASE);
  runtime_shmem_follow(*out, rf);
  return CUDA_SUCCESS;
}

CUresult rgpu_drv_runtime_function(rgpu_client *c, rgpu_rt_func *rf, int dev, CUfunction *out) {
  struct CUfunc_st *f = NULL;
  CUresult r = runtime_function(c, rf, dev, &f);
  if (r == CUDA_SUCCESS) *out = f;
  return r;
}

CUresult rgpu_drv_resolve_func(rgpu_client *c, CUfunction f, int dev, struct CUfunc_st **out) {
  if (!rgpu_drv_handle_plausible(f)) return CUDA_ERROR_INVALID_HANDLE;
  uint32_t magic = f->magic;
  if (magic == RGPU_DRV_FUNC_MAGIC) {
    CUresult r = module_live(f->module);
    if (r != CUDA_SUCCESS) return r;
    rgpu_rt_func *rf = __atomic_load_n(&f->rt_func, __ATOMIC_ACQUIRE);
    if (rf) {
      /* A launch through the driver sends what the runtime recorded first. */
      uint64_t id;
      const char *name;
      cudaError_t e = rgpu_rt_func_server_ref(c, rf, f->module->device, &id, &name);
      if (e != cudaSuccess) return rgpu_drv_from_rt(e);
      runtime_shmem_follow(f, rf);
    }
    *out = f;
    return CUDA_SUCCESS;
  }
  rgpu_rt_func *rf = magic == RGPU_DRV_KERNEL_MAGIC ? NULL : rgpu_rt_func_record(f);
  if (magic != RGPU_DRV_KERNEL_MAGIC && !rf) return CUDA_ERROR_INVALID_HANDLE;
  if (dev < 0) {
    CUresult r = current_device(&dev);
    if (r != CUDA_SUCCESS) return r;
  }
  if (rf) return runtime_function(c, rf, dev, out);
  return kernel_function(c, (struct CUkern_st *)f, dev, out);
}

RGPU_DRV CUresult rgpu_drv_cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel) {
  RGPU_DRV_BEGIN();
  if (!pFunc) RGPU_DRV_RET(CUDA_ERROR_INVALID_VALUE);
  if (!any_kernel_ok(kernel)) RGPU_DRV_RET(CUDA_ERROR_INVALID_HANDLE);
  struct CUfunc_st *f = NULL;
  CUR_DEV(dev);
  CUresult r = rgpu_drv_resolve_func(c, (CUfunction)kernel, dev, &f);
  if (r == CUDA_SUCCESS) *pFunc = f;
  RGPU_DRV_RET(r);
}

RGPU_DRV CUresult rgpu_drv_cuKernelGetName(const char **name, CUkernel hfunc) {
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  rgpu_rt_func *rf = rgpu_rt_func_record(hfunc);
  if (rf) {
    *name = rgpu_rt_func_name(rf);
    return CUDA_SUCCESS;
  }
  if (!kernel_ok(hfunc)) return CUDA_ERROR_INVALID_HANDLE;
  *name = hfunc->name;
  return CUDA_SUCCESS;
}

/* ---- function attributes ------------------------------------------------ */

enum { NATTRS = CU_FUNC_ATTRIBUTE_MAX < 64 ? CU_FUNC_ATTRIBUTE_MAX : 64 };

CUresult rgpu_drv_func_attrs(rgpu_client *c, struct CUfunc_st *f, const int32_t **attrs) {
  if (!__atomic_load_n(&f->attrs_valid, __ATOMIC_ACQUIRE)) {
    rgpu_msg_func_get_attrs_req q = {.module_id = f->module->id, .func_index = f->index};
    rgpu_msg_func_get_attrs_rep rep;
    rgpu_buf pay;
    rgpu_buf_init(&pay);
    rgpu_client_reply rr = {.payload = &pay};
    rgpu_status rc = rgpu_call_func_get_attrs(c, f->module->device, 0, &q, &rep, &rr);
    if (rc) {
      rgpu_buf_free(&pay);
      return rgpu_drv_reply_ret(c, rc);
    }
    /* Two threads may both fetch: they store the same values.  Values
     * cuFuncSetAttribute sent earlier are in the answer already
     * (FUNC_SET_ATTR went ahead of this request on the wire). */
    for (uint32_t i = 0; i < NATTRS; i++)
      f->attrs[i] = i < rep.attrs.count ? rgpu_array_i32(&rep.attrs, i) : 0;
    rgpu_buf_free(&pay);
    __atomic_store_n(&f->attrs_valid, 1, __ATOMIC_RELEASE);
  }
  *attrs = f->attrs;
  return CUDA_SUCCESS;
}

/* The function an attribute call names: a CUfunction, or a CUkernel on
 * device dev. */
static CUresult attr_func(rgpu_client *c, CUfunction hfunc, int dev, struct CUfunc_st **f) {
  return rgpu_drv_resolve_func(c, hfunc, dev, f);
}

static CUresult func_get_attribute(rgpu_client *c, int *pi, CUfunction_attribute attrib,
                                   CUfunction hfunc, int dev) {
  if (!pi || (int)attrib < 0 || attrib >= CU_FUNC_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  struct CUfunc_st *f = NULL;
  CUresult r = attr_func(c, hfunc, dev, &f);
  if (r != CUDA_SUCCESS) return r;
  const int32_t *a = NULL;
  if ((r = rgpu_drv_func_attrs(c, f, &a)) != CUDA_SUCCESS) return r;
  *pi = (int)attrib < NATTRS ? a[attrib] : 0;
  return CUDA_SUCCESS;
}

static CUresult func_set_attribute(rgpu_client *c, CUfunction hfunc, CUfunction_attribute attrib,
                                   int value, int dev) {
  struct CUfunc_st *f = NULL;
  CUresult r = attr_func(c, hfunc, dev, &f);
  if (r != CUDA_SUCCESS) return r;
  int fdev = f->module->device;
  rgpu_rt_device *d;
  cudaError_t e = rgpu_rt_device_get(c, fdev, &d);
  if (e != cudaSuccess) return rgpu_drv_from_rt(e);
  switch (attrib) {
  case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: {
    const int32_t *a = NULL;
    if ((r = rgpu_drv_func_attrs(c, f, &a)) != CUDA_SUCCESS) return r;
    /* The opt-in limit less what the kernel declares statically. */
    size_t optin = d->prop.sharedMemPerBlockOptin ? d->prop.sharedMemPerBlockOptin
                                                  : d->prop.sharedMemPerBlock;
    long limit = (long)optin - a[CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES];
    if (value < 0 || value > limit) return CUDA_ERROR_INVALID_VALUE;
    __atomic_store_n(&f->max_dyn_shmem, value, __ATOMIC_RELAXED);
    f->attrs[attrib] = value;
    break;
  }
  case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
    if (value < -1 || value > 100) return CUDA_ERROR_INVALID_VALUE;
    f->attrs[attrib] = value;
    break;
  case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
  case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
  case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
  case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
  case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
    /* Cluster settings exist only where the device launches clusters. */
    if (CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH >= d->nattrs || !d->attrs[CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH])
      return CUDA_ERROR_NOT_SUPPORTED;
    break;
  default:
    /* The other attributes are the kernel's own, read-only. */
    return CUDA_ERROR_INVALID_VALUE;
  }
  /* Queued: the server's function gets it before the next launch, which
   * follows it on the wire; a refusal comes back as an async error. */
  rgpu_msg_func_set_attr_req q = {.module_id = f->module->id, .func_index = f->index,
                                  .attr = (int32_t)attrib, .value = value};
  rgpu_status rc = rgpu_call_func_set_attr(c, fdev, RGPU_CALL_ASYNC, &q, NULL, NULL);
  /* One function for both APIs: the runtime's launches of a registered
   * kernel follow what the driver set on it. */
  rgpu_rt_func *rf = __atomic_load_n(&f->rt_func, __ATOMIC_ACQUIRE);
  if (rc == 0 && rf) rgpu_rt_func_note_attr(rf, (int)attrib, value);
  return rc ? rgpu_drv_reply_ret(c, rc) : CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc) {
  RGPU_DRV_BEGIN();
  RGPU_DRV_RET(func_get_attribute(c, pi, attrib, hfunc, -1));
}

RGPU_DRV CUresult rgpu_drv_cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  RGPU_DRV_BEGIN();
  RGPU_DRV_RET(func_set_attribute(c, hfunc, attrib, value, -1));
}

/* A CUdevice from the program: an ordinal of the server's devices. */
static CUresult check_device(rgpu_client *c, CUdevice dev) {
  int n = 0;
  cudaError_t e = rgpu_rt_device_count(c, &n);
  if (e != cudaSuccess) return rgpu_drv_from_rt(e);
  return dev >= 0 && dev < n && dev < RGPU_MAX_DEVICES ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

RGPU_DRV CUresult rgpu_drv_cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel,
                                       CUdevice dev) {
  RGPU_DRV_BEGIN();
  if (!any_kernel_ok(kernel)) RGPU_DRV_RET(CUDA_ERROR_INVALID_HANDLE);
  CUresult r = check_device(c, dev);
  if (r == CUDA_SUCCESS) r = func_get_attribute(c, pi, attrib, (CUfunction)kernel, dev);
  RGPU_DRV_RET(r);
}

RGPU_DRV CUresult rgpu_drv_cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel,
                                       CUdevice dev) {
  RGPU_DRV_BEGIN();
  if (!any_kernel_ok(kernel)) RGPU_DRV_RET(CUDA_ERROR_INVALID_HANDLE);
  CUresult r = check_device(c, dev);
  if (r == CUDA_SUCCESS) r = func_set_attribute(c, (CUfunction)kernel, attrib, val, dev);
  RGPU_DRV_RET(r);
}

RGPU_DRV CUresult rgpu_drv_cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config) {
  RGPU_DRV_BEGIN();
  struct CUfunc_st *f = NULL;
  CUresult r = rgpu_drv_resolve_func(c, hfunc, -1, &f);
  /* A preference the driver may ignore (CUDA says so); the split of L1
   * and shared memory changes no result, so it is accepted and kept
   * nowhere. */
  if (r == CUDA_SUCCESS && (unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL) r = CUDA_ERROR_INVALID_VALUE;
  RGPU_DRV_RET(r);
}

RGPU_DRV CUresult rgpu_drv_cuFuncGetName(const char **name, CUfunction hfunc) {
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  if (!rgpu_drv_handle_plausible(hfunc)) return CUDA_ERROR_INVALID_HANDLE;
  rgpu_rt_func *rf = rgpu_rt_func_record(hfunc);
  if (rf) {
    *name = rgpu_rt_func_name(rf);
    return CUDA_SUCCESS;
  }
  if (hfunc->magic == RGPU_DRV_KERNEL_MAGIC) {
    *name = ((struct CUkern_st *)hfunc)->name;
    return CUDA_SUCCESS;
  }
  if (hfunc->magic != RGPU_DRV_FUNC_MAGIC) return CUDA_ERROR_INVALID_HANDLE;
  *name = hfunc->name;
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
                                     size_t *paramSize) {
  RGPU_DRV_BEGIN();
  struct CUfunc_st *f = NULL;
  CUresult r = rgpu_drv_resolve_func(c, func, -1, &f);
  if (r == CUDA_SUCCESS && rgpu_cudart_layout_param(&f->layout, paramIndex, paramOffset, paramSize))
    r = CUDA_ERROR_INVALID_VALUE;
  RGPU_DRV_RET(r);
}

RGPU_DRV CUresult rgpu_drv_cuFuncGetModule(CUmodule *hmod, CUfunction hfunc) {
  RGPU_DRV_BEGIN();
  if (!hmod) RGPU_DRV_RET(CUDA_ERROR_INVALID_VALUE);
  struct CUfunc_st *f = NULL;
  CUresult r = rgpu_drv_resolve_func(c, hfunc, -1, &f);
  if (r == CUDA_SUCCESS) *hmod = f->module;
  RGPU_DRV_RET(r);
}

RGPU_DRV CUresult rgpu_drv_cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex,
                                               size_t *paramOffset, size_t *paramSize) {
  RGPU_DRV_BEGIN();
  if (!any_kernel_ok(kernel)) RGPU_DRV_RET(CUDA_ERROR_INVALID_HANDLE);
  struct CUfunc_st *f = NULL;
  CUresult r = rgpu_drv_resolve_func(c, (CUfunction)kernel, -1, &f);
  if (r == CUDA_SUCCESS && rgpu_cudart_layout_param(&f->layout, paramIndex, paramOffset, paramSize))
    r = CUDA_ERROR_INVALID_VALUE;
  RGPU_DRV_RET(r);
}

RGPU_DRV CUresult rgpu_drv_cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev) {
  RGPU_DRV_BEGIN();
  if (!any_kernel_ok(kernel)) RGPU_DRV_RET(CUDA_ERROR_INVALID_HANDLE);
  CUresult r = check_device(c, dev);
  /* A preference, as for cuFuncSetCacheConfig: checked, changes nothing. */
  if (r == CUDA_SUCCESS && (unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL) r = CUDA_ERROR_INVALID_VALUE;
  RGPU_DRV_RET(r);
}

/* A function rgpu hands out is loaded on the server already (MODULE_LOAD
 * and MODULE_GET_FUNCTION ran before the handle existed). */
RGPU_DRV CUresult rgpu_drv_cuFuncIsLoaded(CUfunctionLoadingState *state, CUfunction function) {
  RGPU_DRV_BEGIN();
  if (!state) RGPU_DRV_RET(CUDA_ERROR_INVALID_VALUE);
  struct CUfunc_st *f = NULL;
  CUresult r = rgpu_drv_resolve_func(c, function, -1, &f);
  if (r == CUDA_SUCCESS) *state = CU_FUNCTION_LOADING_STATE_LOADED;
  RGPU_DRV_RET(r);
}

RGPU_DRV CUresult rgpu_drv_cuFuncLoad(CUfunction function) {
  RGPU_DRV_BEGIN();
  struct CUfunc_st *f = NULL;
  RGPU_DRV_RET(rgpu_drv_resolve_func(c, function, -1, &f));
}
