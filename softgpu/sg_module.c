/* softgpu modules, functions and kernel launches.
 *
 * softgpu cannot run SASS, so a module is always its PTX: taken from a
 * fatbin (decompressed by rgpu_fatbin) or given as text, and parsed by the
 * sg_ptx interpreter.  Module-scope variables become device allocations. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_fatbin.h"
#include "sg_internal.h"
#include "softgpu.h"

/* ---- device printf ------------------------------------------------------ */

static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;
static sgPrintHandler print_fn;
static void *print_ctx;

SG_EXPORT CUresult sgSetPrintHandler(sgPrintHandler fn, void *ctx) {
  pthread_mutex_lock(&print_lock);
  print_fn = fn;
  print_ctx = ctx;
  pthread_mutex_unlock(&print_lock);
  return CUDA_SUCCESS;
}

static void print_tramp(void *unused, const char *text, size_t len) {
  (void)unused;
  pthread_mutex_lock(&print_lock);
  sgPrintHandler fn = print_fn;
  void *ctx = print_ctx;
  pthread_mutex_unlock(&print_lock);
  if (fn) {
    fn(ctx, text, len);
  } else {
    fwrite(text, 1, len, stdout);
    fflush(stdout);
  }
}

/* ---- lifetime ----------------------------------------------------------- */

static void module_free(sg_module *m) {
  for (int i = 0; i < m->nglobals; i++) {
    if (m->globals[i].dptr) sg_mem_free_device(m->globals[i].dptr);
    free(m->globals[i].name);
  }
  free(m->globals);
  free(m->funcs);
#ifdef SG_HAVE_PTX
  if (m->pm) sg_ptx_module_free(m->pm);
#endif
  free(m);
}

void sg_module_unref(sg_module *m) {
  if (atomic_fetch_sub(&m->refs, 1) == 1) module_free(m);
}

/* Withdraws the module's handles so no new use can start; queued launches
 * keep it alive through their references. */
static void module_unpublish(sg_module *m) {
  sg_handle_del(m);
  for (int i = 0; i < m->nfuncs; i++) sg_handle_del(&m->funcs[i]);
}

void sg_ctx_release_modules(sg_ctx *c) {
  pthread_mutex_lock(&sg_sched_lock);
  sg_module *m = c->modules;
  c->modules = NULL;
  pthread_mutex_unlock(&sg_sched_lock);
  while (m) {
    sg_module *n = m->next;
    module_unpublish(m);
    sg_module_unref(m);
    m = n;
  }
}

/* ---- loading ------------------------------------------------------------ */

static uint32_t rd32(const void *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

/* Compares the image's first bytes with a magic number one byte at a time,
 * so that a short PTX string is never read past its terminator (the API
 * gives no image size).  The magics contain no zero byte. */
static int has_magic(const void *image, uint32_t magic) {
  const uint8_t *p = image;
  for (int i = 0; i < 4; i++)
    if (p[i] != (uint8_t)(magic >> (8 * i))) return 0;
  return 1;
}

static unsigned device_cc(void) { return (unsigned)(sg_cfg.cc_major * 10 + sg_cfg.cc_minor); }

/* "sm_75, sm_90" for the error message of a SASS-only fatbin. */
static void list_archs(const rgpu_fatbin *fb, unsigned kind, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = 0;
  for (size_t i = 0; i < fb->nentries && used + 16 < len; i++) {
    if (fb->entries[i].kind != kind) continue;
    used += (size_t)snprintf(buf + used, len - used, "%s%s_%u", used ? ", " : "",
                             kind == RGPU_FATBIN_KIND_PTX ? "compute" : "sm", fb->entries[i].arch);
  }
}

/* The compute_XX a PTX text targets, from ".target sm_XX"; 0 if absent. */
static unsigned ptx_target(const char *text, size_t len) {
  const char *end = text + len;
  for (const char *p = text; p + 11 < end; p++) {
    if (memcmp(p, ".target", 7) != 0) continue;
    p += 7;
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    if (end - p < 5 || memcmp(p, "sm_", 3) != 0) return 0;
    unsigned v = 0;
    for (p += 3; p < end && *p >= '0' && *p <= '9'; p++) v = v * 10 + (unsigned)(*p - '0');
    return v;
  }
  return 0;
}

typedef struct {
  char *buf;
  size_t len;
} sg_jit_log;

static void jit_log(sg_jit_log *log, const char *msg) {
  if (log && log->buf && log->len) snprintf(log->buf, log->len, "%s", msg);
}

#define FAIL(code, ...)                                       \
  do {                                                        \
    snprintf(msg, sizeof msg, __VA_ARGS__);                   \
    RGPU_WARN("module load: %s", msg);               \
    jit_log(log, msg);                                        \
    rc = (code);                                              \
    goto out;                                                 \
  } while (0)

/* Finds the PTX text of an image: *text points at a malloc'ed copy
 * (*owned) or into the image. */
static CUresult image_ptx(const void *image, char **text, size_t *len, unsigned *arch, int *owned,
                          sg_jit_log *log) {
  const uint8_t *p = image;
  char msg[512];
  CUresult rc = CUDA_SUCCESS;
  rgpu_fatbin fb = {0};
  *owned = 0;
  *arch = 0;
  if (has_magic(p, RGPU_FATBIN_MAGIC)) {
    int e = rgpu_fatbin_open(p, RGPU_FATBIN_SIZE_UNKNOWN, &fb);
    if (e) FAIL(CUDA_ERROR_INVALID_IMAGE, "fatbin rejected: %s", rgpu_fatbin_strerror(e));
    const rgpu_fatbin_entry *ptx = rgpu_fatbin_best_ptx(&fb, device_cc());
    if (!ptx) {
      char archs[256];
      if (rgpu_fatbin_best_ptx(&fb, 0)) {
        list_archs(&fb, RGPU_FATBIN_KIND_PTX, archs, sizeof archs);
        FAIL(CUDA_ERROR_NO_BINARY_FOR_GPU,
             "fatbin's PTX (%s) is newer than this device (sm_%u); rebuild with "
             "-gencode arch=compute_%u,code=compute_%u or set RGPU_SOFTGPU_CC",
             archs, device_cc(), device_cc(), device_cc());
      }
      list_archs(&fb, RGPU_FATBIN_KIND_ELF, archs, sizeof archs);
      FAIL(CUDA_ERROR_NO_BINARY_FOR_GPU,
           "fatbin holds only SASS for %s; rebuild with PTX (e.g. -gencode arch=compute_75,code=compute_75)",
           archs[0] ? archs : "no architecture");
    }
    void *out;
    e = rgpu_fatbin_extract(ptx, 0, &out, len);
    if (e) FAIL(CUDA_ERROR_INVALID_IMAGE, "PTX entry for compute_%u: %s", ptx->arch, rgpu_fatbin_strerror(e));
    *text = out;
    *owned = 1;
    *arch = ptx->arch;
  } else if (has_magic(p, 0x464c457fu /* "\177ELF" */)) {
    /* ELF64, little endian, version 1 before reading deeper into the header. */
    if (p[4] != 2 || p[5] != 1 || p[6] != 1) FAIL(CUDA_ERROR_INVALID_IMAGE, "ELF image is not a 64-bit CUDA cubin");
    uint16_t machine;
    memcpy(&machine, p + 18, 2);
    if (machine != 190 /* EM_CUDA */) FAIL(CUDA_ERROR_INVALID_IMAGE, "ELF image is not a CUDA cubin");
    uint32_t eflags = rd32(p + 48);
    FAIL(CUDA_ERROR_NO_BINARY_FOR_GPU,
         "cubin holds only SASS for sm_%u; rebuild with PTX (e.g. -gencode arch=compute_75,code=compute_75)",
         (eflags >> 8) & 0xff);
  } else if (has_magic(p, RGPU_FATBIN_WRAPPER_MAGIC)) {
    FAIL(CUDA_ERROR_INVALID_IMAGE, "image is a __fatBinC_Wrapper_t; pass the fatbin it points to (its data field)");
  } else {
    const char *t = image;
    size_t n = strlen(t);
    if (!strstr(t, ".version") || !strstr(t, ".target"))
      FAIL(CUDA_ERROR_INVALID_IMAGE, "image is neither a fatbin, a cubin nor PTX text");
    unsigned target = ptx_target(t, n);
    if (target > device_cc())
      FAIL(CUDA_ERROR_INVALID_PTX, "PTX targets sm_%u, newer than this device (sm_%u)", target, device_cc());
    *text = (char *)t;
    *len = n;
    *arch = target;
  }
out:
  rgpu_fatbin_close(&fb);
  return rc;
}

static CUresult load_module(const void *image, sg_module **out, sg_jit_log *log) {
  sg_ctx *c;
  CUresult rc = sg_current(&c);
  if (rc) return rc;
  if (!out || !image) return CUDA_ERROR_INVALID_VALUE;
#ifndef SG_HAVE_PTX
  (void)log;
  RGPU_WARN("built without the PTX interpreter: cannot load modules");
  return CUDA_ERROR_NOT_SUPPORTED;
#else
  char *text = NULL;
  size_t len = 0;
  unsigned arch = 0;
  int owned = 0;
  char msg[512];
  sg_module *m = NULL;
  rc = image_ptx(image, &text, &len, &arch, &owned, log);
  if (rc) return rc;
  m = calloc(1, sizeof *m);
  if (!m) FAIL(CUDA_ERROR_OUT_OF_MEMORY, "out of host memory");
  m->ctx = c;
  atomic_init(&m->refs, 1);
  m->ptx_arch = arch;
  char err[256] = "";
  int prc = sg_ptx_module_parse(text, len, &m->pm, err, sizeof err);
  if (prc) FAIL((CUresult)prc, "PTX rejected: %s", err[0] ? err : "parse error");
  m->nfuncs = sg_ptx_module_kernel_count(m->pm);
  if (m->nfuncs > 0) {
    m->funcs = calloc((size_t)m->nfuncs, sizeof *m->funcs);
    if (!m->funcs) FAIL(CUDA_ERROR_OUT_OF_MEMORY, "out of host memory");
  }
  for (int i = 0; i < m->nfuncs; i++) {
    sg_function *f = &m->funcs[i];
    f->mod = m;
    f->k = sg_ptx_module_kernel(m->pm, i);
    f->name = sg_ptx_kernel_name(f->k);
    size_t st = sg_ptx_kernel_static_shared(f->k);
    f->max_dynamic_shared = st >= 49152 ? 0 : (int)(49152 - st);
    f->carveout = -1;
    f->cache = CU_FUNC_CACHE_PREFER_NONE;
  }
  m->nglobals = sg_ptx_module_global_count(m->pm);
  if (m->nglobals > 0) {
    m->globals = calloc((size_t)m->nglobals, sizeof *m->globals);
    if (!m->globals) FAIL(CUDA_ERROR_OUT_OF_MEMORY, "out of host memory");
  }
  for (int i = 0; i < m->nglobals; i++) {
    sg_ptx_global_info gi;
    if (sg_ptx_module_global(m->pm, i, &gi) != 0) FAIL(CUDA_ERROR_INVALID_PTX, "module variable %d unreadable", i);
    m->globals[i].name = strdup(gi.name ? gi.name : "");
    m->globals[i].size = gi.size;
    if (!m->globals[i].name) FAIL(CUDA_ERROR_OUT_OF_MEMORY, "out of host memory");
    uint64_t d;
    /* Zero-sized (extern, unsized) variables still get an address. */
    CUresult ar = sg_mem_alloc_device(c, gi.size ? gi.size : 1, SG_MEM_GLOBAL, &d);
    if (ar) FAIL(ar, "no device memory for module variable %s (%zu bytes)", gi.name, gi.size);
    m->globals[i].dptr = d;
    /* The driver reports the module's whole user constant bank for each
     * kernel (measured: 16 for every kernel of a module with a 16-byte
     * __constant__), not what the kernel itself reads. */
    if (gi.space == SG_PTX_SPACE_CONST) m->const_bytes += gi.size;
    if (gi.init && gi.size) memcpy((void *)(uintptr_t)d, gi.init, gi.size);
    sg_ptx_module_set_global_addr(m->pm, i, d);
  }
  if (sg_handle_add(m, SG_H_MODULE) != 0) FAIL(CUDA_ERROR_OUT_OF_MEMORY, "out of host memory");
  for (int i = 0; i < m->nfuncs; i++)
    if (sg_handle_add(&m->funcs[i], SG_H_FUNCTION) != 0) {
      module_unpublish(m);
      FAIL(CUDA_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
  pthread_mutex_lock(&sg_sched_lock);
  m->next = c->modules;
  c->modules = m;
  pthread_mutex_unlock(&sg_sched_lock);
  RGPU_DEBUG("loaded module: %d kernels, %d variables, PTX compute_%u", m->nfuncs, m->nglobals, arch);
  *out = m;
  m = NULL;
out:
  if (m) module_free(m);
  if (owned) free(text);
  return rc;
#endif
}

SG_EXPORT CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image) {
  return load_module(image, module, NULL);
}

SG_EXPORT CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                              CUjit_option *options, void **optionValues) {
  if (numOptions && (!options || !optionValues)) return CUDA_ERROR_INVALID_VALUE;
  sg_jit_log log = {0};
  char *info = NULL;
  size_t info_len = 0;
  for (unsigned i = 0; i < numOptions; i++) {
    /* Scalar option values travel in the pointer itself, as in the driver. */
    switch (options[i]) {
    case CU_JIT_ERROR_LOG_BUFFER: log.buf = optionValues[i]; break;
    case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: log.len = (size_t)(uintptr_t)optionValues[i]; break;
    case CU_JIT_INFO_LOG_BUFFER: info = optionValues[i]; break;
    case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES: info_len = (size_t)(uintptr_t)optionValues[i]; break;
    default: break; /* optimisation levels, targets, caching: meaningless for an interpreter */
    }
  }
  if (log.buf && log.len) log.buf[0] = 0;
  if (info && info_len) info[0] = 0;
  return load_module(image, module, &log);
}

/* Takes the fatbin data, not its __fatBinC_Wrapper_t: 13.0 refuses the
 * wrapper here too (measured), and so do we. */
SG_EXPORT CUresult CUDAAPI cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin) {
  return load_module(fatCubin, module, NULL);
}

static CUresult module_check(CUmodule m) {
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!sg_handle_ok(m, SG_H_MODULE)) return CUDA_ERROR_INVALID_HANDLE;
  return sg_ctx_usable(m->ctx);
}

static CUresult func_check(CUfunction f) {
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!sg_handle_ok(f, SG_H_FUNCTION)) return CUDA_ERROR_INVALID_HANDLE;
  return sg_ctx_usable(f->mod->ctx);
}

SG_EXPORT CUresult CUDAAPI cuModuleUnload(CUmodule hmod) {
  CUresult r = module_check(hmod);
  if (r) return r;
  module_unpublish(hmod);
  pthread_mutex_lock(&sg_sched_lock);
  sg_module **pp = &hmod->ctx->modules;
  while (*pp && *pp != hmod) pp = &(*pp)->next;
  if (*pp) *pp = hmod->next;
  pthread_mutex_unlock(&sg_sched_lock);
  sg_module_unref(hmod);
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
  CUresult r = module_check(hmod);
  if (r) return r;
  if (!hfunc || !name) return CUDA_ERROR_INVALID_VALUE;
  for (int i = 0; i < hmod->nfuncs; i++)
    if (strcmp(hmod->funcs[i].name, name) == 0) {
      *hfunc = &hmod->funcs[i];
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_NOT_FOUND;
}

SG_EXPORT CUresult CUDAAPI cuModuleGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name) {
  CUresult r = module_check(hmod);
  if (r) return r;
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  for (int i = 0; i < hmod->nglobals; i++)
    if (strcmp(hmod->globals[i].name, name) == 0) {
      if (dptr) *dptr = (CUdeviceptr)hmod->globals[i].dptr;
      if (bytes) *bytes = hmod->globals[i].size;
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_NOT_FOUND;
}

SG_EXPORT CUresult CUDAAPI cuModuleGetFunctionCount(unsigned int *count, CUmodule mod) {
  CUresult r = module_check(mod);
  if (r) return r;
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = (unsigned)mod->nfuncs;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuModuleEnumerateFunctions(CUfunction *functions, unsigned int numFunctions, CUmodule mod) {
  CUresult r = module_check(mod);
  if (r) return r;
  if (!functions && numFunctions) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < numFunctions && i < (unsigned)mod->nfuncs; i++) functions[i] = &mod->funcs[i];
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuFuncGetName(const char **name, CUfunction hfunc) {
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = func_check(hfunc);
  if (r) return r;
  *name = hfunc->name;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuFuncGetModule(CUmodule *hmod, CUfunction hfunc) {
  if (!hmod) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = func_check(hfunc);
  if (r) return r;
  *hmod = hfunc->mod;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
                                              size_t *paramSize) {
  CUresult r = func_check(func);
  if (r) return r;
#ifdef SG_HAVE_PTX
  size_t off, sz;
  if (paramIndex > (size_t)INT32_MAX || sg_ptx_kernel_param_info(func->k, (int)paramIndex, &off, &sz) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (paramOffset) *paramOffset = off;
  if (paramSize) *paramSize = sz;
  return CUDA_SUCCESS;
#else
  (void)paramIndex, (void)paramOffset, (void)paramSize;
  return CUDA_ERROR_NOT_SUPPORTED;
#endif
}

SG_EXPORT CUresult CUDAAPI cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc) {
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = func_check(hfunc);
  if (r) return r;
#ifdef SG_HAVE_PTX
  const sg_ptx_kernel *k = hfunc->k;
  switch (attrib) {
  case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: {
    int t = sg_ptx_kernel_max_threads(k);
    *pi = t > 0 && t < 1024 ? t : 1024;
    break;
  }
  case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *pi = (int)sg_ptx_kernel_static_shared(k); break;
  case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *pi = (int)hfunc->mod->const_bytes; break;
  case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *pi = (int)sg_ptx_kernel_local_bytes(k); break;
  case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = 32; break; /* an interpreter has no register allocation */
  case CU_FUNC_ATTRIBUTE_PTX_VERSION: *pi = (int)(hfunc->mod->ptx_arch ? hfunc->mod->ptx_arch : device_cc()); break;
  case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = (int)device_cc(); break;
  case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: *pi = 0; break;
  case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = hfunc->max_dynamic_shared; break;
  case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = hfunc->carveout; break;
  case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET:
  case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
  case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
  case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
  case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
  case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: *pi = 0; break;
  default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
#else
  (void)attrib;
  return CUDA_ERROR_NOT_SUPPORTED;
#endif
}

SG_EXPORT CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  CUresult r = func_check(hfunc);
  if (r) return r;
  switch (attrib) {
  case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: {
    int st = 0;
#ifdef SG_HAVE_PTX
    st = (int)sg_ptx_kernel_static_shared(hfunc->k);
#endif
    if (value < 0 || value > 232448 - st) return CUDA_ERROR_INVALID_VALUE;
    hfunc->max_dynamic_shared = value;
    return CUDA_SUCCESS;
  }
  case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
    if (value < -1 || value > 100) return CUDA_ERROR_INVALID_VALUE;
    hfunc->carveout = value;
    return CUDA_SUCCESS;
  default:
    return CUDA_ERROR_INVALID_VALUE; /* read-only, or clusters (not on this device) */
  }
}

SG_EXPORT CUresult CUDAAPI cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config) {
  CUresult r = func_check(hfunc);
  if (r) return r;
  if ((unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL) return CUDA_ERROR_INVALID_VALUE;
  hfunc->cache = config;
  return CUDA_SUCCESS;
}

/* ---- launches ----------------------------------------------------------- */

#ifdef SG_HAVE_PTX
static int lookup_tramp(void *ctx, uint64_t addr, sg_ptx_range *r) { return sg_mem_lookup_cb(ctx, addr, r); }
static int texobj_tramp(void *ctx, uint64_t h, sg_ptx_tex *t) { return sg_texobj_lookup_cb(ctx, h, t); }
/* env.ctx is the launching context: the device heap is per context. */
static uint64_t heap_alloc_tramp(void *ctx, uint64_t size) { return sg_mem_heap_alloc(ctx, size); }
static void heap_free_tramp(void *ctx, uint64_t addr) { sg_mem_heap_free_later(ctx, addr); }
static int setcond_tramp(void *ctx, uint64_t h, uint32_t v) {
  (void)ctx;
  return sg_cond_set(h, v);
}
#endif

void sg_module_run_launch(sg_op *op) {
#ifdef SG_HAVE_PTX
  sg_function *f = op->u.launch.fn;
  sg_ptx_env env = {0};
  env.lookup = lookup_tramp;
  env.print = print_tramp;
  env.nworkers = sg_cfg.nworkers;
  env.texobj = texobj_tramp;
  env.dev_malloc = heap_alloc_tramp;
  env.dev_free = heap_free_tramp;
  env.set_conditional = setcond_tramp;
  env.ctx = f->mod->ctx;
  sg_ptx_launch_cfg cfg = {0};
  memcpy(cfg.grid, op->u.launch.grid, sizeof cfg.grid);
  memcpy(cfg.block, op->u.launch.block, sizeof cfg.block);
  cfg.dynamic_shared = op->u.launch.shared;
  cfg.params = op->u.launch.params;
  cfg.params_size = op->u.launch.params_size;
  sg_ptx_fault fault;
  memset(&fault, 0, sizeof fault);
  sg_mem_use_begin();
  int rc = sg_ptx_launch(f->k, &cfg, &env, &fault);
  sg_mem_use_end();
  sg_mem_heap_flush(); /* the frees the kernel made */
  if (rc != 0) {
    const char *en = "?";
    cuGetErrorName((CUresult)rc, &en);
    RGPU_WARN("kernel %s failed (%s): %s; the context is now unusable until reset", f->name, en,
              fault.message[0] ? fault.message : "no details");
    sg_ctx_set_sticky(f->mod->ctx, (CUresult)rc);
  }
#else
  (void)op;
#endif
}

SG_EXPORT CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                          unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                          unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                          void **kernelParams, void **extra) {
  CUresult r = func_check(f);
  if (r) return r;
  sg_stream *s;
  r = sg_stream_resolve(hStream, &s);
  if (r) return r;
  if (s->ctx != f->mod->ctx) return CUDA_ERROR_INVALID_HANDLE;
#ifndef SG_HAVE_PTX
  (void)gridDimX, (void)gridDimY, (void)gridDimZ, (void)blockDimX, (void)blockDimY, (void)blockDimZ;
  (void)sharedMemBytes, (void)kernelParams, (void)extra;
  SG_UNSUPPORTED("cuLaunchKernel (softgpu built without the PTX interpreter)");
#else
  const sg_ptx_kernel *k = f->k;
  /* Limits as cuDeviceGetAttribute reports them; 13.0 answers every
   * violation with CUDA_ERROR_INVALID_VALUE (measured). */
  if (!gridDimX || !gridDimY || !gridDimZ || !blockDimX || !blockDimY || !blockDimZ) return CUDA_ERROR_INVALID_VALUE;
  if (blockDimX > 1024 || blockDimY > 1024 || blockDimZ > 64) return CUDA_ERROR_INVALID_VALUE;
  uint64_t threads = (uint64_t)blockDimX * blockDimY * blockDimZ;
  int maxt = sg_ptx_kernel_max_threads(k);
  if (threads > 1024 || (maxt > 0 && threads > (uint64_t)maxt)) return CUDA_ERROR_INVALID_VALUE;
  if (gridDimX > 2147483647u || gridDimY > 65535 || gridDimZ > 65535) return CUDA_ERROR_INVALID_VALUE;
  if (sharedMemBytes > (unsigned)f->max_dynamic_shared) return CUDA_ERROR_INVALID_VALUE;

  int np = sg_ptx_kernel_param_count(k);
  size_t need = sg_ptx_kernel_param_bytes(k);
  if (kernelParams && extra) return CUDA_ERROR_INVALID_VALUE;
  void *buf = calloc(1, need ? need : 1);
  if (!buf) return CUDA_ERROR_OUT_OF_MEMORY;
  if (extra) {
    const void *ptr = NULL;
    const size_t *psize = NULL;
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (i > 64) goto bad; /* unterminated list */
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) ptr = extra[i + 1];
      else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) psize = extra[i + 1];
      else goto bad;
    }
    if (!ptr || !psize) goto bad;
    if (*psize > need) {
      /* What 13.0 answers for a buffer larger than the parameters (measured). */
      free(buf);
      return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    }
    /* A shorter buffer is accepted by the driver; the rest reads as zero here. */
    memcpy(buf, ptr, *psize);
  } else if (np > 0) {
    if (!kernelParams) goto bad;
    for (int i = 0; i < np; i++) {
      size_t off, sz;
      if (!kernelParams[i] || sg_ptx_kernel_param_info(k, i, &off, &sz) != 0 || off + sz > need) goto bad;
      memcpy((char *)buf + off, kernelParams[i], sz);
    }
  }
  sg_op *op = sg_op_new(SG_OP_LAUNCH);
  if (!op) {
    free(buf);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  op->u.launch.fn = f;
  op->u.launch.grid[0] = gridDimX;
  op->u.launch.grid[1] = gridDimY;
  op->u.launch.grid[2] = gridDimZ;
  op->u.launch.block[0] = blockDimX;
  op->u.launch.block[1] = blockDimY;
  op->u.launch.block[2] = blockDimZ;
  op->u.launch.shared = sharedMemBytes;
  op->u.launch.params = buf;
  op->u.launch.params_size = need;
  atomic_fetch_add(&f->mod->refs, 1);
  return sg_submit(s, op, 0);
bad:
  free(buf);
  return CUDA_ERROR_INVALID_VALUE;
#endif
}

/* ---- occupancy ---------------------------------------------------------- */
/* The classic occupancy calculation with softgpu's reported resources
 * (32 registers per thread, as cuFuncGetAttribute says), so that callers
 * sizing grids from it (CUB, Thrust) get the numbers they would compute
 * from the attributes themselves. */

static int occupancy(sg_function *f, int block, size_t dyn, int *blocks) {
  if (block <= 0) return CUDA_ERROR_INVALID_VALUE;
  int cc = (int)device_cc();
  int max_threads_sm = cc >= 80 ? 2048 : 1024;
  int max_blocks_sm = cc >= 80 ? 32 : 16;
  size_t smem_sm = 233472;
  int maxt = 1024;
  size_t st = 0;
#ifdef SG_HAVE_PTX
  int kt = sg_ptx_kernel_max_threads(f->k);
  if (kt > 0 && kt < maxt) maxt = kt;
  st = sg_ptx_kernel_static_shared(f->k);
#endif
  if (block > maxt || dyn > (size_t)f->max_dynamic_shared) {
    *blocks = 0;
    return CUDA_SUCCESS;
  }
  int warps = (block + 31) / 32;
  int n = max_threads_sm / 32 / warps;
  if (n > max_blocks_sm) n = max_blocks_sm;
  int by_regs = 65536 / (32 * warps * 32);
  if (by_regs < n) n = by_regs;
  size_t smem = st + dyn;
  if (smem && (int)(smem_sm / smem) < n) n = (int)(smem_sm / smem);
  *blocks = n;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, CUfunction func,
                                                                               int blockSize, size_t dynamicSMemSize,
                                                                               unsigned int flags) {
  if (!numBlocks || (flags & ~(unsigned)CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE)) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = func_check(func);
  if (r) return r;
  return (CUresult)occupancy(func, blockSize, dynamicSMemSize, numBlocks);
}

SG_EXPORT CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func, int blockSize,
                                                                       size_t dynamicSMemSize) {
  return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize, 0);
}

SG_EXPORT CUresult CUDAAPI cuOccupancyMaxPotentialBlockSizeWithFlags(int *minGridSize, int *blockSize, CUfunction func,
                                                                     CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                                     size_t dynamicSMemSize, int blockSizeLimit,
                                                                     unsigned int flags) {
  if (!minGridSize || !blockSize || (flags & ~(unsigned)CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE))
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r = func_check(func);
  if (r) return r;
  int limit = blockSizeLimit > 0 && blockSizeLimit < 1024 ? blockSizeLimit : 1024;
  int best_threads = 0, best_block = 0, best_blocks = 0;
  /* Largest block wins ties, as the runtime's helper does. */
  for (int b = (limit + 31) / 32 * 32; b > 0; b -= 32) {
    int bs = b > limit ? limit : b;
    size_t dyn = blockSizeToDynamicSMemSize ? blockSizeToDynamicSMemSize(bs) : dynamicSMemSize;
    int n = 0;
    occupancy(func, bs, dyn, &n);
    if (n * bs > best_threads) {
      best_threads = n * bs;
      best_block = bs;
      best_blocks = n;
    }
  }
  *blockSize = best_block;
  *minGridSize = best_blocks * sg_cfg.ncpus;
  return CUDA_SUCCESS;
}

/* ---- cluster occupancy ------------------------------------------------------
 * softgpu offers no thread block clusters (CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH
 * is 0): each block runs alone, which is a cluster of one, and that is the
 * only cluster shape its launches take (rgpu launches a 1x1x1 cluster as a
 * plain launch).  So the largest cluster is 1 block, a cluster of one is as
 * many as the blocks that fit on the device, and any other shape, or none
 * given (softgpu's functions have no required cluster size), is
 * CUDA_ERROR_INVALID_CLUSTER_SIZE. */

/* The checks both calls share, and the blocks of the configuration that
 * fit on one multiprocessor. */
static CUresult cluster_config(CUfunction func, const CUlaunchConfig *config, int *per_sm,
                               unsigned cluster[3]) {
  CUresult r = func_check(func);
  if (r) return r;
  if (!config || (config->numAttrs && !config->attrs)) return CUDA_ERROR_INVALID_VALUE;
  if (!config->blockDimX || !config->blockDimY || !config->blockDimZ)
    return CUDA_ERROR_INVALID_VALUE;
  uint64_t threads = (uint64_t)config->blockDimX * config->blockDimY * config->blockDimZ;
  if (threads > 1024) return CUDA_ERROR_INVALID_VALUE;
  cluster[0] = cluster[1] = cluster[2] = 0;
  for (unsigned i = 0; i < config->numAttrs; i++)
    if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      cluster[0] = config->attrs[i].value.clusterDim.x;
      cluster[1] = config->attrs[i].value.clusterDim.y;
      cluster[2] = config->attrs[i].value.clusterDim.z;
    }
  return (CUresult)occupancy(func, (int)threads, config->sharedMemBytes, per_sm);
}

SG_EXPORT CUresult CUDAAPI cuOccupancyMaxPotentialClusterSize(int *clusterSize, CUfunction func,
                                                             const CUlaunchConfig *config) {
  if (!clusterSize) return CUDA_ERROR_INVALID_VALUE;
  int per_sm;
  unsigned cluster[3];
  CUresult r = cluster_config(func, config, &per_sm, cluster);
  if (r) return r;
  /* The configuration's own cluster dimensions do not matter (CUDA ignores them). */
  *clusterSize = per_sm > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func,
                                                       const CUlaunchConfig *config) {
  if (!numClusters) return CUDA_ERROR_INVALID_VALUE;
  int per_sm;
  unsigned cluster[3];
  CUresult r = cluster_config(func, config, &per_sm, cluster);
  if (r) return r;
  if (cluster[0] != 1 || cluster[1] != 1 || cluster[2] != 1) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  *numClusters = per_sm * sg_cfg.ncpus;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize, CUfunction func,
                                                            CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                            size_t dynamicSMemSize, int blockSizeLimit) {
  return cuOccupancyMaxPotentialBlockSizeWithFlags(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
                                                   dynamicSMemSize, blockSizeLimit, 0);
}
