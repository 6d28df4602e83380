/* Fatbin registration, lazy module loading and kernel launch.
 *
 * nvcc's constructors register every fatbin, kernel and device variable
 * before main; that must stay local (no server may be configured yet, and
 * the real runtime does no driver work there either).  A fatbin becomes a
 * module on a device the first time something on that device needs it:
 * MODULE_LOAD sends the image with the names of all its kernels and
 * variables and gets back per-kernel parameter layouts and per-variable
 * addresses in one round trip. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_array.h"
#include "rgpu_cudart.h"
#include "rgpu_cudart_op.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"
#if __has_include("rgpu_fatbin.h")
#include "rgpu_fatbin.h"
#define RGPU_HAVE_FATBIN 1
#endif

#define RGPU_FUNC_MAGIC 0x464e4354u /* "TCNF" */
#define RGPU_FATBIN_WRAPPER_MAGIC_V 0x466243B1u

typedef struct {
  int magic;
  int version;
  const unsigned long long *data;
  void *filename_or_fatbins;
} rgpu_fatbin_wrapper;

typedef struct {
  int state; /* 0 not loaded, 1 loaded, -1 load failed, RGPU_MODULE_LOADING */
  cudaError_t error;
  uint32_t epoch;
  uint64_t module_id;
  rgpu_param_layout *layouts; /* per function */
  int32_t *func_status;
  uint64_t *var_dptr;
  uint64_t *var_size;
} rgpu_rt_module;

typedef struct {
  const void *host;
  char *name;
  size_t size;
  int constant;
} rgpu_rt_var;

typedef struct rgpu_rt_fatbin {
  const void *image;
  size_t size;
  /* Guards everything below; first in cudart's lock order
   * (cudart/rgpu_cudart_locks.h): the range-table lock and g_dev_lock may be
   * taken under it, and it is dropped for the MODULE_LOAD round trip. */
  rgpu_mutex lock;
  /* Broadcast (under lock) when a MODULE_LOAD of this fatbin ends: threads
   * that need the module wait for the one loading it. */
  pthread_cond_t load_done;
  rgpu_rt_func **funcs;
  size_t nfuncs, capf;
  rgpu_rt_var *vars;
  size_t nvars, capv;
  rgpu_rt_module mods[RGPU_MAX_DEVICES];
  int dead;
  int fallback_state; /* 0 not tried, 1 parsed, -1 unavailable */
#ifdef RGPU_HAVE_FATBIN
  rgpu_fatbin_param_table fallback;
#endif
} rgpu_rt_fatbin;

struct rgpu_rt_func {
  uint32_t magic;
  rgpu_rt_fatbin *fb;
  uint32_t index;
  const void *host_stub;
  char *name;
  int max_dyn_shmem; /* cudaFuncAttributeMaxDynamicSharedMemorySize, -1 = unset */
  int carveout;      /* cudaFuncAttributePreferredSharedMemoryCarveout, -2 = unset */
  /* The module id whose server function has the attributes above (0: not
   * sent yet).  A launch sends them first when it differs, so a set costs
   * no round trip and a module reloaded after cudaDeviceReset gets them
   * again.  Atomic: launches of one function may race (both then send the
   * same values, which is harmless). */
  uint64_t attrs_module;
  /* The server's occupancy answers (OCCUPANCY), most recent configurations
   * first to go; guarded by fb->lock.  Programs ask for the same few
   * configurations again and again (cudaOccupancyMaxPotentialBlockSize
   * walks every block size): one round trip each, once. */
  struct {
    uint64_t module_id; /* 0: empty slot */
    int block;
    size_t smem;
    unsigned flags;
    int n;
  } occ[16];
  unsigned occ_next;
};

/* ---- pointer -> entry map (host stubs and host shadows of variables) ---- */

typedef struct {
  const void *key;
  void *val;
  uint32_t aux;
} map_slot;

typedef struct {
  map_slot *slots;
  size_t cap, n;
} ptr_map;

/* g_reg_lock guards the two maps (a leaf: held only for a lookup or an
 * insert). */
static rgpu_mutex g_reg_lock = RGPU_MUTEX_INITIALIZER;
static ptr_map g_funcs, g_vars;

static size_t ptr_hash(const void *p) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return (size_t)x;
}

static int map_put(ptr_map *m, const void *key, void *val, uint32_t aux) {
  assert(rgpu_mutex_held(&g_reg_lock));
  if ((m->n + 1) * 2 > m->cap) {
    size_t nc = m->cap ? m->cap * 2 : 256;
    map_slot *ns = calloc(nc, sizeof *ns);
    if (!ns) return -1;
    for (size_t i = 0; i < m->cap; i++) {
      if (!m->slots[i].key) continue;
      size_t j = ptr_hash(m->slots[i].key) & (nc - 1);
      while (ns[j].key) j = (j + 1) & (nc - 1);
      ns[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = ns;
    m->cap = nc;
  }
  size_t j = ptr_hash(key) & (m->cap - 1);
  while (m->slots[j].key && m->slots[j].key != key) j = (j + 1) & (m->cap - 1);
  if (!m->slots[j].key) m->n++;
  m->slots[j] = (map_slot){key, val, aux};
  return 0;
}

static map_slot *map_get(ptr_map *m, const void *key) {
  assert(rgpu_mutex_held(&g_reg_lock));
  if (!m->cap || !key) return NULL;
  size_t j = ptr_hash(key) & (m->cap - 1);
  while (m->slots[j].key) {
    if (m->slots[j].key == key) return &m->slots[j];
    j = (j + 1) & (m->cap - 1);
  }
  return NULL;
}

/* ---- registration ------------------------------------------------------- */

RGPU_API void **__cudaRegisterFatBinary(void *fatCubin) {
  rgpu_fatbin_wrapper *w = fatCubin;
  rgpu_rt_fatbin *fb = calloc(1, sizeof *fb);
  if (!fb) return NULL;
  rgpu_mutex_init(&fb->lock);
  pthread_cond_init(&fb->load_done, NULL);
  if (!w || (unsigned)w->magic != RGPU_FATBIN_WRAPPER_MAGIC_V ||
      (w->version != 1 && w->version != 2) || !w->data) {
    RGPU_WARN("ignoring a fatbinary with an unknown wrapper (magic 0x%x, version %d)",
              w ? (unsigned)w->magic : 0u, w ? w->version : -1);
    fb->dead = 1;
    return (void **)fb;
  }
  const uint8_t *d = (const uint8_t *)w->data;
  uint32_t magic;
  uint64_t fat_size;
  uint16_t hsize;
  memcpy(&magic, d, 4);
  memcpy(&hsize, d + 6, 2);
  memcpy(&fat_size, d + 8, 8);
  if (magic != 0xBA55ED50u || hsize != 16 || fat_size > ((uint64_t)1 << 30)) {
    RGPU_WARN("ignoring a fatbinary with an unknown data header (magic 0x%x)", magic);
    fb->dead = 1;
    return (void **)fb;
  }
  fb->image = d;
  fb->size = (size_t)fat_size + 16;
  return (void **)fb;
}

RGPU_API void __cudaRegisterFatBinaryEnd(void **fatCubinHandle) { (void)fatCubinHandle; }

RGPU_API void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                                     const char *deviceName, int thread_limit, uint3 *tid,
                                     uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize) {
  rgpu_rt_fatbin *fb = (rgpu_rt_fatbin *)fatCubinHandle;
  const char *name = deviceName ? deviceName : deviceFun;
  if (!fb || !name || !hostFun) return;
  rgpu_rt_func *f = calloc(1, sizeof *f);
  char *nm = strdup(name);
  if (!f || !nm) {
    free(f);
    free(nm);
    return;
  }
  rgpu_mutex_lock(&fb->lock);
  if (RGPU_ARRAY_RESERVE(fb->funcs, fb->capf, fb->nfuncs + 1, 16)) {
    rgpu_mutex_unlock(&fb->lock);
    free(f);
    free(nm);
    return;
  }
  f->magic = RGPU_FUNC_MAGIC;
  f->fb = fb;
  f->index = (uint32_t)fb->nfuncs;
  f->host_stub = hostFun;
  f->name = nm;
  f->max_dyn_shmem = -1;
  f->carveout = -2;
  fb->funcs[fb->nfuncs++] = f;
  rgpu_mutex_unlock(&fb->lock);
  rgpu_mutex_lock(&g_reg_lock);
  map_put(&g_funcs, hostFun, f, 0);
  /* The record is also the function's cudaKernel_t (cudaGetKernel): every
   * call that takes a function symbol takes that handle too, as NVIDIA's
   * runtime does. */
  map_put(&g_funcs, f, f, 0);
  rgpu_mutex_unlock(&g_reg_lock);
}

RGPU_API void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
                                const char *deviceName, int ext, size_t size, int constant,
                                int global) {
  rgpu_rt_fatbin *fb = (rgpu_rt_fatbin *)fatCubinHandle;
  const char *name = deviceName ? deviceName : deviceAddress;
  if (!fb || !name || !hostVar) return;
  char *nm = strdup(name);
  if (!nm) return;
  rgpu_mutex_lock(&fb->lock);
  if (RGPU_ARRAY_RESERVE(fb->vars, fb->capv, fb->nvars + 1, 16)) {
    rgpu_mutex_unlock(&fb->lock);
    free(nm);
    return;
  }
  uint32_t idx = (uint32_t)fb->nvars;
  fb->vars[fb->nvars++] = (rgpu_rt_var){hostVar, nm, size, constant};
  rgpu_mutex_unlock(&fb->lock);
  rgpu_mutex_lock(&g_reg_lock);
  map_put(&g_vars, hostVar, fb, idx);
  rgpu_mutex_unlock(&g_reg_lock);
}

RGPU_API void __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress,
                                       char *deviceAddress, const char *deviceName, int ext,
                                       size_t size, int constant, int global) {
  RGPU_WARN("__managed__ variable %s is not supported yet (managed memory cannot be "
            "coherent across the network); using it will fail",
            deviceName ? deviceName : "?");
}

RGPU_API char __cudaInitModule(void **fatCubinHandle) {
  (void)fatCubinHandle;
  return 1;
}

RGPU_API void __cudaUnregisterFatBinary(void **fatCubinHandle) {
  rgpu_rt_fatbin *fb = (rgpu_rt_fatbin *)fatCubinHandle;
  if (!fb) return;
  /* Runs from atexit (or dlclose): the image memory may go away after
   * this, so the fatbin is marked dead; the server drops its modules with
   * the session, and a library unloaded early gets MODULE_UNLOAD. */
  /* The modules to unload are picked under the lock and sent after it (a
   * sync-every-call session waits for each MODULE_UNLOAD). */
  uint64_t unload[RGPU_MAX_DEVICES];
  rgpu_mutex_lock(&fb->lock);
  fb->dead = 1;
  rgpu_client *c = rgpu_rt_client_peek();
  for (int d = 0; d < RGPU_MAX_DEVICES; d++) {
    rgpu_rt_module *m = &fb->mods[d];
    unload[d] = 0;
    if (!c || m->state != 1 || m->epoch != rgpu_rt_device_epoch(d) ||
        rgpu_client_is_dead(rgpu_rt_client_of_device(d)))
      continue;
    unload[d] = m->module_id;
    m->state = 0;
  }
  rgpu_mutex_unlock(&fb->lock);
  for (int d = 0; d < RGPU_MAX_DEVICES; d++) {
    if (!unload[d]) continue;
    rgpu_msg_module_unload_req req = {.module_id = unload[d]};
    rgpu_call_module_unload(c, d, RGPU_CALL_ASYNC, &req, NULL, NULL);
  }
}

/* ---- per-thread launch configuration stack ------------------------------ */

typedef struct {
  dim3 grid, block;
  size_t shmem;
  void *stream;
} launch_cfg;

#define RGPU_CFG_DEPTH 32
static __thread launch_cfg tl_cfg[RGPU_CFG_DEPTH];
static __thread int tl_cfg_n;

RGPU_API unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                              struct CUstream_st *stream) {
  if (tl_cfg_n >= RGPU_CFG_DEPTH) {
    rgpu_rt_ret(cudaErrorLaunchMaxDepthExceeded);
    return 1;
  }
  tl_cfg[tl_cfg_n++] = (launch_cfg){gridDim, blockDim, sharedMem, stream};
  return 0;
}

RGPU_API cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
                                                void *stream) {
  if (tl_cfg_n <= 0) return cudaErrorMissingConfiguration;
  launch_cfg *c = &tl_cfg[--tl_cfg_n];
  if (gridDim) *gridDim = c->grid;
  if (blockDim) *blockDim = c->block;
  if (sharedMem) *sharedMem = c->shmem;
  if (stream) *(void **)stream = c->stream;
  return cudaSuccess;
}

/* ---- lazy module load --------------------------------------------------- */

rgpu_rt_func *rgpu_rt_func_by_stub(const void *host_stub) {
  rgpu_mutex_lock(&g_reg_lock);
  map_slot *s = map_get(&g_funcs, host_stub);
  rgpu_rt_func *f = s ? s->val : NULL;
  rgpu_mutex_unlock(&g_reg_lock);
  return f;
}

static void module_clear(rgpu_rt_fatbin *fb, rgpu_rt_module *m) {
  assert(rgpu_mutex_held(&fb->lock));
  if (m->layouts) {
    for (size_t i = 0; i < fb->nfuncs; i++) {
      free(m->layouts[i].offsets);
      free(m->layouts[i].sizes);
    }
  }
  free(m->layouts);
  free(m->func_status);
  free(m->var_dptr);
  free(m->var_size);
  memset(m, 0, sizeof *m);
}

/* Parameter layouts from the cubin itself, for kernels the server could
 * not describe. */
static int fallback_layout(rgpu_rt_fatbin *fb, const char *name, rgpu_param_layout *out) {
#ifdef RGPU_HAVE_FATBIN
  assert(rgpu_mutex_held(&fb->lock)); /* fb->fallback is parsed once, under it */
  if (fb->fallback_state == 0) {
    rgpu_fatbin f;
    fb->fallback_state = -1;
    if (rgpu_fatbin_open(fb->image, fb->size, &f) == 0) {
      if (rgpu_fatbin_params(&f, &fb->fallback) == 0) fb->fallback_state = 1;
      rgpu_fatbin_close(&f);
    }
  }
  if (fb->fallback_state != 1) return -1;
  const rgpu_fatbin_kernel *k = rgpu_fatbin_param_table_find(&fb->fallback, name);
  if (!k) return -1;
  out->nparams = (uint32_t)k->nparams;
  out->offsets = calloc(k->nparams ? k->nparams : 1, sizeof *out->offsets);
  out->sizes = calloc(k->nparams ? k->nparams : 1, sizeof *out->sizes);
  if (!out->offsets || !out->sizes) return -1;
  for (size_t i = 0; i < k->nparams; i++) {
    out->offsets[i] = k->params[i].offset;
    out->sizes[i] = k->params[i].size;
  }
  return rgpu_cudart_layout_finish(out);
#else
  (void)fb;
  (void)name;
  (void)out;
  return -1;
#endif
}

/* A MODULE_LOAD of the module is in flight (fb->lock dropped). */
#define RGPU_MODULE_LOADING 2

static cudaError_t module_install(rgpu_rt_fatbin *fb, rgpu_rt_module *m, int dev, uint32_t epoch,
                                  uint64_t id, rgpu_status rc, const rgpu_client_reply *r,
                                  rgpu_buf *pay);

/* Loads fb on dev if needed; fb->lock held by the caller, on return too.
 * The MODULE_LOAD round trip is made with fb->lock dropped and the module
 * marked loading; other threads that need it wait for that load instead of
 * sending their own, so a module is still loaded once per device. */
static cudaError_t module_ensure(rgpu_client *c, rgpu_rt_fatbin *fb, int dev) {
  assert(rgpu_mutex_held(&fb->lock));
  rgpu_rt_module *m = &fb->mods[dev];
  uint32_t epoch;
  for (;;) {
    if (fb->dead) return cudaErrorInvalidKernelImage;
    epoch = rgpu_rt_device_epoch(dev);
    if (m->state == RGPU_MODULE_LOADING) {
      rgpu_mutex_cond_wait(&fb->load_done, &fb->lock);
      continue;
    }
    if (m->state != 0 && m->epoch != epoch) module_clear(fb, m);
    if (m->state == 1) return cudaSuccess;
    if (m->state == -1) return m->error;
    break;
  }

  const char **fnames = calloc(fb->nfuncs + 1, sizeof *fnames);
  const char **vnames = calloc(fb->nvars + 1, sizeof *vnames);
  if (!fnames || !vnames) {
    free(fnames);
    free(vnames);
    return cudaErrorMemoryAllocation;
  }
  for (size_t i = 0; i < fb->nfuncs; i++) fnames[i] = fb->funcs[i]->name;
  for (size_t i = 0; i < fb->nvars; i++) vnames[i] = fb->vars[i].name;
  uint64_t id = rgpu_rt_new_handle_id();
  /* The names are the registration's own strings (never freed while the
   * fatbin lives), so fnames/vnames stay valid with the lock dropped; their
   * counts are taken here, under it, with them.  The image is nvcc's, in
   * the program's memory for as long as the fatbin is registered. */
  uint32_t nfuncs = (uint32_t)fb->nfuncs, nvars = (uint32_t)fb->nvars;
  rgpu_buf pay;
  rgpu_buf_init(&pay);
  rgpu_client_reply r = {.payload = &pay};
  m->state = RGPU_MODULE_LOADING;
  rgpu_mutex_unlock(&fb->lock);
  assert(rgpu_mutex_held_count() == 0); /* a round trip: no cudart lock held */
  /* The image goes only if the server has not cached it (rgpu_cudart_image.c). */
  rgpu_status rc =
      rgpu_rt_image_load(c, dev, id, fb->image, fb->size, fnames, nfuncs, vnames, nvars, &r);
  free(fnames);
  free(vnames);
  rgpu_mutex_lock(&fb->lock);
  m->state = 0; /* module_install decides */
  cudaError_t e;
  if (rgpu_status_layer(rc) == 2 && !rgpu_client_is_dead(rgpu_rt_route(c, dev)))
    e = cudaErrorInvalidValue; /* the request did not encode (names over the limits): not sent */
  else
    e = module_install(fb, m, dev, epoch, id, rc, &r, &pay);
  rgpu_buf_free(&pay);
  pthread_cond_broadcast(&fb->load_done);
  return e;
}

/* The reply of MODULE_LOAD (rc: its status) into m, fb->lock held. */
static cudaError_t module_install(rgpu_rt_fatbin *fb, rgpu_rt_module *m, int dev, uint32_t epoch,
                                  uint64_t id, rgpu_status rc, const rgpu_client_reply *r,
                                  rgpu_buf *pay) {
  assert(rgpu_mutex_held(&fb->lock));
  if (rc < 0) {
    return rgpu_rt_from_call(rc);
  }
  if (rc > 0) {
    cudaError_t e = rgpu_cudart_from_cu(rc);
    rgpu_rt_report_module_refused(fb->nfuncs ? fb->funcs[0]->name : NULL, fb->nfuncs, rc, r->msg);
    m->state = -1;
    m->error = e;
    m->epoch = epoch;
    return e;
  }
  rgpu_msg_module_load_rep rep;
  cudaError_t e = cudaSuccess;
  if (rgpu_msg_module_load_rep_decode(pay->data, pay->len, &rep)) {
    RGPU_ERROR("malformed MODULE_LOAD reply from the server");
    return cudaErrorUnknown;
  }
  m->module_id = id;
  m->epoch = epoch;
  m->layouts = calloc(fb->nfuncs + 1, sizeof *m->layouts);
  m->func_status = calloc(fb->nfuncs + 1, sizeof *m->func_status);
  m->var_dptr = calloc(fb->nvars + 1, sizeof *m->var_dptr);
  m->var_size = calloc(fb->nvars + 1, sizeof *m->var_size);
  if (!m->layouts || !m->func_status || !m->var_dptr || !m->var_size) {
    module_clear(fb, m);
    return cudaErrorMemoryAllocation;
  }
  /* The server's layouts are usable only if the arrays agree. */
  int have_params = rep.func_status.count == fb->nfuncs && rep.func_nparams.count == fb->nfuncs;
  uint64_t total = 0;
  for (uint32_t i = 0; have_params && i < fb->nfuncs; i++) total += rgpu_array_u32(&rep.func_nparams, i);
  if (have_params && (rep.param_offsets.count != total || rep.param_sizes.count != total))
    have_params = 0;
  uint32_t pos = 0;
  for (uint32_t i = 0; i < fb->nfuncs; i++) {
    rgpu_param_layout *l = &m->layouts[i];
    int32_t st = rep.func_status.count == fb->nfuncs ? rgpu_array_i32(&rep.func_status, i)
                                                     : CUDA_ERROR_NOT_FOUND;
    uint32_t np = have_params ? rgpu_array_u32(&rep.func_nparams, i) : 0;
    if (have_params && st == 0) {
      l->nparams = np;
      l->offsets = calloc(np ? np : 1, sizeof *l->offsets);
      l->sizes = calloc(np ? np : 1, sizeof *l->sizes);
      if (!l->offsets || !l->sizes) {
        e = cudaErrorMemoryAllocation;
        break;
      }
      for (uint32_t k = 0; k < np; k++) {
        l->offsets[k] = rgpu_array_u32(&rep.param_offsets, pos + k);
        l->sizes[k] = rgpu_array_u32(&rep.param_sizes, pos + k);
      }
      if (rgpu_cudart_layout_finish(l)) st = CUDA_ERROR_INVALID_IMAGE;
      /* A driver without cuFuncGetParamInfo reports 0 parameters for every
       * kernel; the cubin knows better. */
      rgpu_param_layout fl = {0};
      if (st == 0 && np == 0 && fallback_layout(fb, fb->funcs[i]->name, &fl) == 0 &&
          fl.nparams > 0) {
        free(l->offsets);
        free(l->sizes);
        *l = fl;
      } else {
        free(fl.offsets);
        free(fl.sizes);
      }
    } else {
      free(l->offsets);
      free(l->sizes);
      memset(l, 0, sizeof *l);
      if (fallback_layout(fb, fb->funcs[i]->name, l) == 0) {
        RGPU_DEBUG("parameter layout of %s from the cubin (server status %d)",
                   fb->funcs[i]->name, st);
        st = 0;
      } else if (st == 0) {
        st = CUDA_ERROR_NOT_FOUND;
      }
    }
    pos += np;
    m->func_status[i] = st;
  }
  if (e == cudaSuccess) {
    int vars_ok = rep.var_status.count == fb->nvars && rep.var_dptrs.count == fb->nvars &&
                  rep.var_sizes.count == fb->nvars;
    for (uint32_t i = 0; i < fb->nvars; i++) {
      if (!vars_ok || rgpu_array_i32(&rep.var_status, i) != 0) continue;
      m->var_dptr[i] = rgpu_array_u64(&rep.var_dptrs, i);
      m->var_size[i] = rgpu_array_u64(&rep.var_sizes, i);
      if (m->var_dptr[i] && m->var_size[i]) {
        rgpu_range rg = {.base = m->var_dptr[i], .size = m->var_size[i], .device = dev,
                         .kind = RGPU_RANGE_SYMBOL};
        rgpu_range_add(rgpu_rt_device_ranges(), &rg);
      }
    }
  }
  if (e != cudaSuccess) {
    module_clear(fb, m);
    return e;
  }
  m->state = 1;
  return cudaSuccess;
}

void rgpu_rt_modules_forget_device(int dev) {
  /* Modules are re-created lazily: the epoch check in module_ensure sees
   * that the device was reset. */
  (void)dev;
}

cudaError_t rgpu_rt_symbol(rgpu_client *c, const void *symbol, uint64_t *dptr, size_t *size) {
  rgpu_mutex_lock(&g_reg_lock);
  map_slot *s = map_get(&g_vars, symbol);
  rgpu_rt_fatbin *fb = s ? s->val : NULL;
  uint32_t idx = s ? s->aux : 0;
  rgpu_mutex_unlock(&g_reg_lock);
  if (!fb) return cudaErrorInvalidSymbol;
  int dev = rgpu_rt_current_device();
  if (dev < 0 || dev >= RGPU_MAX_DEVICES) return cudaErrorInvalidDevice;
  rgpu_mutex_lock(&fb->lock);
  cudaError_t e = module_ensure(c, fb, dev);
  if (e == cudaSuccess) {
    if (fb->mods[dev].var_dptr[idx] == 0) {
      e = cudaErrorInvalidSymbol;
    } else {
      *dptr = fb->mods[dev].var_dptr[idx];
      *size = (size_t)fb->mods[dev].var_size[idx];
    }
  }
  rgpu_mutex_unlock(&fb->lock);
  return e;
}

/* ---- launch ------------------------------------------------------------- */

/* Loads f's module on dev and finds f in it, for the launch and occupancy
 * paths. On success it returns with f->fb->lock held (the caller unlocks)
 * and *mod set; on failure the lock is released: a kernel the module lacks
 * is cudaErrorInvalidDeviceFunction, other load errors map from the driver. */
static cudaError_t lock_func_module(rgpu_client *c, rgpu_rt_func *f, int dev, rgpu_rt_module **mod) {
  rgpu_rt_fatbin *fb = f->fb;
  rgpu_mutex_lock(&fb->lock);
  cudaError_t e = module_ensure(c, fb, dev);
  if (e != cudaSuccess) {
    rgpu_mutex_unlock(&fb->lock);
    return e;
  }
  rgpu_rt_module *m = &fb->mods[dev];
  int32_t st = m->func_status[f->index];
  if (st != 0) {
    rgpu_mutex_unlock(&fb->lock);
    return st == CUDA_ERROR_NOT_FOUND ? cudaErrorInvalidDeviceFunction : rgpu_cudart_from_cu(st);
  }
  *mod = m;
  return cudaSuccess;
}

/* The server's id of f's module on dev, loading it first: the function
 * attribute calls name the function by (module id, index). */
static cudaError_t func_module_id(rgpu_client *c, rgpu_rt_func *f, int dev, uint64_t *module_id) {
  rgpu_rt_fatbin *fb = f->fb;
  rgpu_mutex_lock(&fb->lock);
  cudaError_t e = module_ensure(c, fb, dev);
  *module_id = fb->mods[dev].module_id;
  rgpu_mutex_unlock(&fb->lock);
  return e;
}

static cudaError_t check_config(const struct cudaDeviceProp *p, const rgpu_rt_func *f, dim3 g,
                                dim3 b, size_t shmem) {
  /* CUDA 13 answers cudaErrorInvalidValue for every configuration error:
   * zero or oversized grids and blocks and too much shared memory alike
   * (measured on an H200, client/probe/h200-results.txt), where older
   * releases said cudaErrorInvalidConfiguration. */
  if (g.x == 0 || g.y == 0 || g.z == 0 || b.x == 0 || b.y == 0 || b.z == 0)
    return cudaErrorInvalidValue;
  uint64_t threads = (uint64_t)b.x * b.y * b.z;
  if (threads > (uint64_t)p->maxThreadsPerBlock || b.x > (unsigned)p->maxThreadsDim[0] ||
      b.y > (unsigned)p->maxThreadsDim[1] || b.z > (unsigned)p->maxThreadsDim[2])
    return cudaErrorInvalidValue;
  if (g.x > (unsigned)p->maxGridSize[0] || g.y > (unsigned)p->maxGridSize[1] ||
      g.z > (unsigned)p->maxGridSize[2])
    return cudaErrorInvalidValue;
  size_t limit = p->sharedMemPerBlock;
  if (f->max_dyn_shmem >= 0 && (size_t)f->max_dyn_shmem > limit) limit = (size_t)f->max_dyn_shmem;
  if (p->sharedMemPerBlockOptin && limit > p->sharedMemPerBlockOptin) limit = p->sharedMemPerBlockOptin;
  if (shmem > limit) return cudaErrorInvalidValue;
  return cudaSuccess;
}

/* The attributes cudaFuncSetAttribute recorded, queued to the server ahead
 * of the launch (or the graph node) that needs them: FUNC_SET_ATTR, no
 * reply, so neither the set nor the launch waits.  No cudart lock held. */
static cudaError_t send_func_attrs(rgpu_client *c, rgpu_rt_func *f, int dev, uint64_t module_id) {
  if (__atomic_load_n(&f->attrs_module, __ATOMIC_ACQUIRE) == module_id) return cudaSuccess;
  int shmem = __atomic_load_n(&f->max_dyn_shmem, __ATOMIC_RELAXED);
  int carveout = __atomic_load_n(&f->carveout, __ATOMIC_RELAXED);
  if (shmem < 0 && carveout < -1) return cudaSuccess; /* nothing was set */
  rgpu_status rc = 0;
  if (shmem >= 0) {
    rgpu_msg_func_set_attr_req q = {.module_id = module_id, .func_index = f->index,
                                    .attr = CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                    .value = shmem};
    rc = rgpu_call_func_set_attr(c, dev, RGPU_CALL_ASYNC, &q, NULL, NULL);
  }
  if (rc == 0 && carveout >= -1) {
    rgpu_msg_func_set_attr_req q = {.module_id = module_id, .func_index = f->index,
                                    .attr = CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                    .value = carveout};
    rc = rgpu_call_func_set_attr(c, dev, RGPU_CALL_ASYNC, &q, NULL, NULL);
  }
  if (rc) return rgpu_rt_from_call(rc);
  __atomic_store_n(&f->attrs_module, module_id, __ATOMIC_RELEASE);
  return cudaSuccess;
}

cudaError_t rgpu_rt_func_server_ref(rgpu_client *c, rgpu_rt_func *f, int dev, uint64_t *module_id,
                                    const char **name) {
  rgpu_rt_module *m;
  cudaError_t e = lock_func_module(c, f, dev, &m);
  if (e != cudaSuccess) return e;
  uint64_t id = m->module_id;
  rgpu_mutex_unlock(&f->fb->lock);
  *module_id = id;
  *name = f->name;
  return send_func_attrs(c, f, dev, id);
}

const char *rgpu_rt_func_name(const rgpu_rt_func *f) { return f->name; }

int rgpu_rt_func_max_dyn_shmem(const rgpu_rt_func *f) {
  return __atomic_load_n(&f->max_dyn_shmem, __ATOMIC_RELAXED);
}

void rgpu_rt_func_note_attr(rgpu_rt_func *f, int attr, int value) {
  if (attr == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
    __atomic_store_n(&f->max_dyn_shmem, value, __ATOMIC_RELAXED);
  else if (attr == CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT)
    __atomic_store_n(&f->carveout, value, __ATOMIC_RELAXED);
  else
    return;
  /* The driver sent it to the server already; resending is harmless. */
  __atomic_store_n(&f->attrs_module, 0, __ATOMIC_RELEASE);
}

rgpu_rt_func *rgpu_rt_func_record(const void *p) {
  rgpu_rt_func *f = rgpu_rt_func_by_stub(p);
  return f == p ? f : NULL;
}

cudaError_t rgpu_rt_launch_prepare(rgpu_client *c, rgpu_rt_func *f, dim3 grid, dim3 block,
                                   void **args, size_t shmem, cudaStream_t stream, int per_thread,
                                   uint8_t *stackbuf, size_t stack_cap, uint8_t **heap,
                                   rgpu_rt_op *op) {
  *heap = NULL;
  if (!f || f->magic != RGPU_FUNC_MAGIC) return cudaErrorInvalidDeviceFunction;
  int dev = rgpu_rt_current_device();
  rgpu_rt_device *d;
  cudaError_t e = rgpu_rt_device_get(c, dev, &d);
  if (e != cudaSuccess) return e;
  e = check_config(&d->prop, f, grid, block, shmem);
  if (e != cudaSuccess) return e;
  uint64_t wire;
  int sdev;
  e = rgpu_rt_stream_resolve(c, stream, per_thread, &wire, &sdev);
  if (e != cudaSuccess) return e;
  if (sdev != dev) return cudaErrorInvalidResourceHandle;

  rgpu_rt_fatbin *fb = f->fb;
  rgpu_rt_module *m;
  e = lock_func_module(c, f, dev, &m);
  if (e != cudaSuccess) return e;
  const rgpu_param_layout *l = &m->layouts[f->index];
  uint8_t *buf = l->total + 64 <= stack_cap ? stackbuf : malloc(l->total + 64);
  if (!buf) {
    rgpu_mutex_unlock(&fb->lock);
    return cudaErrorMemoryAllocation;
  }
  if (buf != stackbuf) *heap = buf;
  *op = (rgpu_rt_op){.kind = RGPU_RT_OP_LAUNCH, .stream = wire, .device = dev};
  op->launch.kernel = f;
  op->launch.module_id = m->module_id;
  op->launch.func_index = f->index;
  op->launch.grid = grid;
  op->launch.block = block;
  op->launch.shmem = (unsigned)shmem;
  op->launch.layout = l;
  long packed = rgpu_cudart_pack_params(l, args, buf, l->total);
  uint64_t module_id = m->module_id;
  rgpu_mutex_unlock(&fb->lock);
  if (packed < 0) return cudaErrorInvalidValue;
  op->launch.params = buf;
  op->launch.plen = (size_t)packed;
  return send_func_attrs(c, f, dev, module_id);
}

cudaError_t rgpu_rt_launch_with(rgpu_rt_func *f, dim3 grid, dim3 block, void **args, size_t shmem,
                                cudaStream_t stream, int per_thread, rgpu_rt_launch_use use,
                                void *ctx) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  uint8_t stackbuf[4096];
  uint8_t *heap;
  rgpu_rt_op op;
  e = rgpu_rt_launch_prepare(c, f, grid, block, args, shmem, stream, per_thread, stackbuf,
                             sizeof stackbuf, &heap, &op);
  if (e == cudaSuccess)
    e = use(c, &op, ctx);
  else
    e = rgpu_rt_ret(e);
  free(heap);
  return e;
}

static cudaError_t submit_launch(rgpu_client *c, const rgpu_rt_op *op, void *ctx) {
  (void)ctx;
  return rgpu_rt_submit(c, op);
}

cudaError_t rgpu_rt_launch(rgpu_rt_func *f, dim3 grid, dim3 block, void **args, size_t shmem,
                           cudaStream_t stream, int per_thread) {
  return rgpu_rt_launch_with(f, grid, block, args, shmem, stream, per_thread, submit_launch, NULL);
}

/* The host stub a function was registered with (graph nodes report it). */
const void *rgpu_rt_func_stub(const rgpu_rt_func *f) { return f ? f->host_stub : NULL; }

RGPU_API cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostStub) {
  if (!kernel) return cudaErrorInvalidValue;
  rgpu_rt_func *f = rgpu_rt_func_by_stub(hostStub);
  if (!f) return rgpu_rt_ret(cudaErrorInvalidDeviceFunction);
  *kernel = (cudaKernel_t)f;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaGetKernel(cudaKernel_t *kernelPtr, const void *entryFuncAddr) {
  rgpu_rt_count_call();
  return __cudaGetKernel(kernelPtr, entryFuncAddr);
}

/* cudaLaunchKernel's func: a registered kernel (its host stub or its
 * cudaKernel_t), a library's cudaKernel_t (through the driver facade,
 * rgpu_cudart_library.c), or neither. */
static cudaError_t launch_any(const void *func, dim3 grid, dim3 block, void **args, size_t shmem,
                              cudaStream_t stream, int per_thread) {
  rgpu_rt_func *f = rgpu_rt_func_by_stub(func);
  if (f) return rgpu_rt_launch(f, grid, block, args, shmem, stream, per_thread);
  if (rgpu_rt_is_driver_function(func))
    return rgpu_rt_driver_launch(func, grid, block, args, shmem, stream, per_thread, 0, NULL);
  /* CUDA 13 answers a pointer that is no kernel with
   * cudaErrorInvalidResourceHandle (measured on an H200), not
   * cudaErrorInvalidDeviceFunction as older releases did. */
  rgpu_rt_count_call();
  return rgpu_rt_ret(cudaErrorInvalidResourceHandle);
}

RGPU_API cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                        void **args, size_t sharedMem, cudaStream_t stream) {
  return launch_any(kernel, gridDim, blockDim, args, sharedMem, stream, 0);
}

RGPU_API cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                             void **args, size_t sharedMem, cudaStream_t stream) {
  return launch_any(kernel, gridDim, blockDim, args, sharedMem, stream, 1);
}

RGPU_API cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                      size_t sharedMem, cudaStream_t stream) {
  return launch_any(func, gridDim, blockDim, args, sharedMem, stream, 0);
}

RGPU_API_PTSZ(cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim,
                                                void **args, size_t sharedMem, cudaStream_t stream)) {
  return launch_any(func, gridDim, blockDim, args, sharedMem, stream, 1);
}

/* ---- function attributes ------------------------------------------------ */

/* The name the kernel was registered with (mangled unless extern "C"), as
 * the runtime answers it: no server involved. */
RGPU_API cudaError_t cudaFuncGetName(const char **name, const void *func) {
  rgpu_rt_count_call();
  if (!name) return rgpu_rt_ret(cudaErrorInvalidValue);
  rgpu_rt_func *f = rgpu_rt_func_by_stub(func);
  if (!f && rgpu_rt_is_driver_function(func)) return rgpu_rt_driver_func_name(name, func);
  if (!f || !f->name) return rgpu_rt_ret(cudaErrorInvalidDeviceFunction);
  *name = f->name;
  return cudaSuccess;
}

/* Where parameter paramIndex lies in the kernel's parameter buffer: the
 * layout the launch packs by, from the module loaded on the current device
 * (the load is a round trip the first time). */
RGPU_API cudaError_t cudaFuncGetParamInfo(const void *func, size_t paramIndex,
                                          size_t *paramOffset, size_t *paramSize) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  rgpu_rt_func *f = rgpu_rt_func_by_stub(func);
  if (!f && rgpu_rt_is_driver_function(func))
    return rgpu_rt_driver_func_param_info(func, paramIndex, paramOffset, paramSize);
  if (!f) return rgpu_rt_ret(cudaErrorInvalidDeviceFunction);
  rgpu_rt_module *m;
  if ((e = lock_func_module(c, f, rgpu_rt_current_device(), &m)) != cudaSuccess)
    return rgpu_rt_ret(e);
  if (rgpu_cudart_layout_param(&m->layouts[f->index], paramIndex, paramOffset, paramSize))
    e = cudaErrorInvalidValue;
  rgpu_mutex_unlock(&f->fb->lock);
  return rgpu_rt_ret(e);
}

RGPU_API cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!attr) return rgpu_rt_ret(cudaErrorInvalidValue);
  rgpu_rt_func *f = rgpu_rt_func_by_stub(func);
  if (!f && rgpu_rt_is_driver_function(func)) return rgpu_rt_driver_func_attributes(attr, func);
  if (!f) return rgpu_rt_ret(cudaErrorInvalidDeviceFunction);
  int dev = rgpu_rt_current_device();
  uint64_t module_id;
  e = func_module_id(c, f, dev, &module_id);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  rgpu_buf pay;
  rgpu_buf_init(&pay);
  rgpu_msg_func_get_attrs_req req = {.module_id = module_id, .func_index = f->index};
  rgpu_msg_func_get_attrs_rep rep;
  rgpu_client_reply r = {.payload = &pay}; /* rep.attrs points into pay */
  rgpu_status rc = rgpu_call_func_get_attrs(c, dev, 0, &req, &rep, &r);
  if (rc == 0) {
    int32_t v[16] = {0};
    for (uint32_t i = 0; i < rep.attrs.count && i < 16; i++) v[i] = rgpu_array_i32(&rep.attrs, i);
    memset(attr, 0, sizeof *attr);
    attr->maxThreadsPerBlock = v[CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK];
    attr->sharedSizeBytes = (size_t)(uint32_t)v[CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES];
    attr->constSizeBytes = (size_t)(uint32_t)v[CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES];
    attr->localSizeBytes = (size_t)(uint32_t)v[CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES];
    attr->numRegs = v[CU_FUNC_ATTRIBUTE_NUM_REGS];
    attr->ptxVersion = v[CU_FUNC_ATTRIBUTE_PTX_VERSION];
    attr->binaryVersion = v[CU_FUNC_ATTRIBUTE_BINARY_VERSION];
    attr->cacheModeCA = v[CU_FUNC_ATTRIBUTE_CACHE_MODE_CA];
    attr->maxDynamicSharedSizeBytes = f->max_dyn_shmem >= 0
                                          ? f->max_dyn_shmem
                                          : v[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES];
    attr->preferredShmemCarveout = v[CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT];
    attr->clusterDimMustBeSet = v[CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET];
    attr->requiredClusterWidth = v[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH];
    attr->requiredClusterHeight = v[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT];
    attr->requiredClusterDepth = v[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH];
    attr->nonPortableClusterSizeAllowed = v[CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED];
    attr->clusterSchedulingPolicyPreference =
        v[CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE];
  }
  rgpu_buf_free(&pay);
  return rc ? rgpu_rt_sync_ret(c, rc) : cudaSuccess;
}

RGPU_API cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr,
                                          int value) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  rgpu_rt_func *f = rgpu_rt_func_by_stub(func);
  if (!f && rgpu_rt_is_driver_function(func))
    return rgpu_rt_driver_func_set_attribute(func, attr, value);
  if (!f) return rgpu_rt_ret(cudaErrorInvalidDeviceFunction);
  rgpu_rt_device *d;
  e = rgpu_rt_device_get(c, rgpu_rt_current_device(), &d);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize ||
      attr == cudaFuncAttributePreferredSharedMemoryCarveout) {
    /* The carveout changes how many blocks fit: ask the driver again. */
    rgpu_mutex_lock(&f->fb->lock);
    memset(f->occ, 0, sizeof f->occ);
    rgpu_mutex_unlock(&f->fb->lock);
  }
  switch (attr) {
  case cudaFuncAttributeMaxDynamicSharedMemorySize:
    /* Kept on the client for the launch check; the server opts a kernel in
     * to large dynamic shared memory from the launch's shared_bytes. */
    if (value < 0 || (size_t)value > d->prop.sharedMemPerBlockOptin)
      return rgpu_rt_ret(cudaErrorInvalidValue);
    /* Recorded for the launch check; the next launch sends it to the
     * server (FUNC_SET_ATTR, queued), where the driver needs it before it
     * accepts more than 48 KiB of dynamic shared memory. */
    __atomic_store_n(&f->max_dyn_shmem, value, __ATOMIC_RELAXED);
    __atomic_store_n(&f->attrs_module, 0, __ATOMIC_RELEASE);
    return cudaSuccess;
  case cudaFuncAttributePreferredSharedMemoryCarveout:
    /* A hint (the driver may ignore it); forwarded the same way so that
     * cudaFuncGetAttributes reports it back. */
    if (value < -1 || value > 100) return rgpu_rt_ret(cudaErrorInvalidValue);
    __atomic_store_n(&f->carveout, value, __ATOMIC_RELAXED);
    __atomic_store_n(&f->attrs_module, 0, __ATOMIC_RELEASE);
    return cudaSuccess;
  case cudaFuncAttributeRequiredClusterWidth:
  case cudaFuncAttributeRequiredClusterHeight:
  case cudaFuncAttributeRequiredClusterDepth:
  case cudaFuncAttributeNonPortableClusterSizeAllowed:
  case cudaFuncAttributeClusterSchedulingPolicyPreference: {
    /* Cluster settings: only where the device launches clusters (softgpu
     * does not).  Rare, so sent at once (queued) rather than kept for the
     * launch: the module is loaded first if it is not yet, which its
     * first launch would have done anyway. */
    if (CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH >= d->nattrs ||
        !d->attrs[CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH])
      return rgpu_rt_ret(cudaErrorNotSupported);
    int dev = rgpu_rt_current_device();
    uint64_t module_id;
    e = func_module_id(c, f, dev, &module_id);
    if (e != cudaSuccess) return rgpu_rt_ret(e);
    /* cudaFuncAttribute and CUfunction_attribute number these alike. */
    rgpu_msg_func_set_attr_req q = {.module_id = module_id, .func_index = f->index,
                                    .attr = (int32_t)attr, .value = value};
    rgpu_status rc = rgpu_call_func_set_attr(c, dev, RGPU_CALL_ASYNC, &q, NULL, NULL);
    return rc ? rgpu_rt_sync_ret(c, rc) : cudaSuccess;
  }
  default: {
    static int logged;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      RGPU_WARN("cudaFuncSetAttribute(%d) is not supported", (int)attr);
    return rgpu_rt_ret(cudaErrorNotSupported);
  }
  }
}

int rgpu_rt_occupancy_estimate(const struct cudaDeviceProp *p, int blockSize,
                               size_t dynamicSMemSize) {
  if (blockSize <= 0 || blockSize > p->maxThreadsPerBlock) return 0;
  /* An estimate from threads, block slots and shared memory; registers are
   * not counted (that needs the kernel's register use from the server). */
  int warp = p->warpSize > 0 ? p->warpSize : 32;
  int warps_per_block = (blockSize + warp - 1) / warp;
  int max_warps = p->maxThreadsPerMultiProcessor / warp;
  int by_threads = warps_per_block ? max_warps / warps_per_block : 0;
  int by_slots = p->maxBlocksPerMultiProcessor > 0 ? p->maxBlocksPerMultiProcessor : by_threads;
  int n = by_threads < by_slots ? by_threads : by_slots;
  if (dynamicSMemSize) {
    size_t per_sm = p->sharedMemPerMultiprocessor;
    size_t per_block = dynamicSMemSize + p->reservedSharedMemPerBlock;
    int by_smem = per_block ? (int)(per_sm / per_block) : n;
    if (by_smem < n) n = by_smem;
  }
  return n < 0 ? 0 : n;
}

cudaError_t rgpu_rt_occupancy(rgpu_client *c, rgpu_rt_func *f, int dev, int block_size,
                              size_t smem, unsigned flags, int *out) {
  rgpu_rt_device *d;
  cudaError_t e = rgpu_rt_device_get(c, dev, &d);
  if (e != cudaSuccess) return e;
  if (block_size > d->prop.maxThreadsPerBlock) {
    *out = 0;
    return cudaSuccess;
  }
  rgpu_rt_fatbin *fb = f->fb;
  rgpu_rt_module *m;
  e = lock_func_module(c, f, dev, &m);
  if (e != cudaSuccess) return e;
  uint64_t module_id = m->module_id;
  for (size_t i = 0; i < sizeof f->occ / sizeof f->occ[0]; i++) {
    if (f->occ[i].module_id == module_id && f->occ[i].block == block_size &&
        f->occ[i].smem == smem && f->occ[i].flags == flags) {
      *out = f->occ[i].n;
      rgpu_mutex_unlock(&fb->lock);
      return cudaSuccess;
    }
  }
  rgpu_mutex_unlock(&fb->lock);
  assert(rgpu_mutex_held_count() == 0); /* a round trip: no cudart lock held */
  /* The function's attributes (dynamic shared memory opt-in) change what
   * fits: they go first. */
  if ((e = send_func_attrs(c, f, dev, module_id)) != cudaSuccess) return e;
  rgpu_msg_occupancy_req q = {.module_id = module_id, .func_index = f->index,
                              .block_size = block_size, .dyn_smem = smem, .flags = flags};
  rgpu_msg_occupancy_rep rep = {0};
  rgpu_status rc = rgpu_call_occupancy(c, dev, 0, &q, &rep, NULL);
  if (rc == CUDA_ERROR_NOT_SUPPORTED) {
    /* A driver without the calculator: the estimate (registers not counted). */
    *out = rgpu_rt_occupancy_estimate(&d->prop, block_size, smem);
    return cudaSuccess;
  }
  if (rc) return rgpu_rt_from_call(rc);
  rgpu_mutex_lock(&fb->lock);
  unsigned slot = f->occ_next++ % (unsigned)(sizeof f->occ / sizeof f->occ[0]);
  f->occ[slot].module_id = module_id;
  f->occ[slot].block = block_size;
  f->occ[slot].smem = smem;
  f->occ[slot].flags = flags;
  f->occ[slot].n = rep.num_blocks;
  rgpu_mutex_unlock(&fb->lock);
  *out = rep.num_blocks < 0 ? 0 : rep.num_blocks;
  return cudaSuccess;
}

/* The occupancy calls with and without flags, once the flags are known
 * valid: the kernel's active blocks per SM on the current device. */
static cudaError_t max_active_blocks(int *numBlocks, const void *func, int blockSize,
                                     size_t dynamicSMemSize, unsigned flags) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!numBlocks || blockSize <= 0) return rgpu_rt_ret(cudaErrorInvalidValue);
  rgpu_rt_func *f = rgpu_rt_func_by_stub(func);
  if (!f && rgpu_rt_is_driver_function(func))
    return rgpu_rt_driver_occupancy(numBlocks, func, blockSize, dynamicSMemSize, flags);
  if (!f) return rgpu_rt_ret(cudaErrorInvalidDeviceFunction);
  e = rgpu_rt_occupancy(c, f, rgpu_rt_current_device(), blockSize, dynamicSMemSize, flags,
                        numBlocks);
  return e != cudaSuccess ? rgpu_rt_ret(e) : cudaSuccess;
}

RGPU_API cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    int *numBlocks, const void *func, int blockSize, size_t dynamicSMemSize, unsigned int flags) {
  if (flags & ~(unsigned)cudaOccupancyDisableCachingOverride) {
    rgpu_rt_count_call();
    return rgpu_rt_ret(cudaErrorInvalidValue);
  }
  return max_active_blocks(numBlocks, func, blockSize, dynamicSMemSize, flags);
}

/* The most dynamic shared memory a block may ask for with numBlocks blocks
 * of blockSize threads still resident per SM: the largest size for which
 * the server's own occupancy answer (the driver's model, limits included)
 * is at least numBlocks, capped by what the function allows
 * (cudaFuncAttributeMaxDynamicSharedMemorySize, 48 KiB unless raised):
 * 49152 on the H200 for a kernel without static shared memory, as NVIDIA's
 * runtime answers.  A binary search over sizes, each answer cached per
 * configuration (rgpu_rt_occupancy): about 17 round trips the first time. */
RGPU_API cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize,
                                                               const void *func, int numBlocks,
                                                               int blockSize) {
  if (!dynamicSmemSize || numBlocks <= 0 || blockSize <= 0) {
    rgpu_rt_count_call();
    return rgpu_rt_ret(cudaErrorInvalidValue);
  }
  struct cudaFuncAttributes a;
  cudaError_t e = cudaFuncGetAttributes(&a, func);
  if (e != cudaSuccess) return e;
  int nb = 0;
  if ((e = max_active_blocks(&nb, func, blockSize, 0, 0)) != cudaSuccess) return e;
  if (nb < numBlocks) {
    *dynamicSmemSize = 0;
    return cudaSuccess;
  }
  size_t lo = 0, hi = (size_t)(a.maxDynamicSharedSizeBytes > 0 ? a.maxDynamicSharedSizeBytes : 0);
  if (hi && (e = max_active_blocks(&nb, func, blockSize, hi, 0)) != cudaSuccess) return e;
  if (hi == 0 || nb >= numBlocks) {
    *dynamicSmemSize = hi;
    return cudaSuccess;
  }
  while (hi - lo > 1) { /* occupancy(lo) >= numBlocks > occupancy(hi) */
    size_t mid = lo + (hi - lo) / 2;
    if ((e = max_active_blocks(&nb, func, blockSize, mid, 0)) != cudaSuccess) return e;
    if (nb >= numBlocks)
      lo = mid;
    else
      hi = mid;
  }
  *dynamicSmemSize = lo;
  return cudaSuccess;
}

/* Shared memory bank size: fixed at four bytes on every GPU CUDA 13 runs
 * on; NVIDIA's runtime accepts a setting and changes nothing (measured on
 * the H200), so this checks the arguments and does the same. */
RGPU_API cudaError_t cudaFuncSetSharedMemConfig(const void *func, enum cudaSharedMemConfig config) {
  rgpu_rt_count_call();
  if ((unsigned)config > (unsigned)cudaSharedMemBankSizeEightByte)
    return rgpu_rt_ret(cudaErrorInvalidValue);
  if (!rgpu_rt_func_by_stub(func)) return rgpu_rt_ret(cudaErrorInvalidDeviceFunction);
  return cudaSuccess;
}

RGPU_API cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks,
                                                                   const void *func,
                                                                   int blockSize,
                                                                   size_t dynamicSMemSize) {
  return max_active_blocks(numBlocks, func, blockSize, dynamicSMemSize, 0);
}

/* ---- cluster occupancy ---------------------------------------------------------
 * (Its include is here, with the code that needs it, so that this file's
 * launch paths above stay as they were.) */
#include "rgpu_device_query.h"

/* cudaOccupancyMaxActiveClusters and cudaOccupancyMaxPotentialClusterSize:
 * the server driver's cuOccupancyMaxActiveClusters / MaxPotentialClusterSize
 * (DEVICE_QUERY) for func's module on the configuration's device (its
 * stream's, else the current one), as rgpu_rt_occupancy names a function.
 * Of the launch attributes only the cluster dimension and the cluster
 * scheduling policy change the answer; the others are hints for a launch
 * and are not sent.  No cache: programs ask once per configuration. */
static cudaError_t cluster_occupancy(int *out, const void *func, const cudaLaunchConfig_t *cfg,
                                     uint32_t what) {
  rgpu_client *c;
  cudaError_t e = rgpu_rt_enter(&c);
  if (e != cudaSuccess) return e;
  if (!out || !cfg || (cfg->numAttrs && !cfg->attrs) || cfg->dynamicSmemBytes > UINT32_MAX)
    return rgpu_rt_ret(cudaErrorInvalidValue);
  rgpu_rt_func *f = rgpu_rt_func_by_stub(func);
  if (!f && rgpu_rt_is_driver_function(func))
    return rgpu_rt_driver_cluster_occupancy(out, func, cfg, what == RGPU_DQ_MAX_ACTIVE_CLUSTERS);
  if (!f) return rgpu_rt_ret(cudaErrorInvalidDeviceFunction);
  uint32_t args[RGPU_DQ_CFG_COUNT] = {
      [RGPU_DQ_CFG_GRID_X] = cfg->gridDim.x,   [RGPU_DQ_CFG_GRID_Y] = cfg->gridDim.y,
      [RGPU_DQ_CFG_GRID_Z] = cfg->gridDim.z,   [RGPU_DQ_CFG_BLOCK_X] = cfg->blockDim.x,
      [RGPU_DQ_CFG_BLOCK_Y] = cfg->blockDim.y, [RGPU_DQ_CFG_BLOCK_Z] = cfg->blockDim.z,
      [RGPU_DQ_CFG_SHARED_BYTES] = (uint32_t)cfg->dynamicSmemBytes};
  for (unsigned i = 0; i < cfg->numAttrs; i++) {
    const cudaLaunchAttribute *a = &cfg->attrs[i];
    if (a->id == cudaLaunchAttributeClusterDimension) {
      args[RGPU_DQ_CFG_CLUSTER_X] = a->val.clusterDim.x;
      args[RGPU_DQ_CFG_CLUSTER_Y] = a->val.clusterDim.y;
      args[RGPU_DQ_CFG_CLUSTER_Z] = a->val.clusterDim.z;
    } else if (a->id == cudaLaunchAttributeClusterSchedulingPolicyPreference) {
      args[RGPU_DQ_CFG_POLICY] = (uint32_t)a->val.clusterSchedulingPolicyPreference;
    }
  }
  int dev = rgpu_rt_current_device();
  if (cfg->stream) {
    uint64_t wire;
    if ((e = rgpu_rt_stream_resolve(c, cfg->stream, 0, &wire, &dev)) != cudaSuccess)
      return rgpu_rt_ret(e);
  }
  rgpu_rt_device *d;
  if ((e = rgpu_rt_device_get(c, dev, &d)) != cudaSuccess) return rgpu_rt_ret(e);
  rgpu_rt_module *m;
  if ((e = lock_func_module(c, f, dev, &m)) != cudaSuccess) return rgpu_rt_ret(e);
  uint64_t module_id = m->module_id;
  rgpu_mutex_unlock(&f->fb->lock);
  /* What cudaFuncSetAttribute recorded (dynamic shared memory, required or
   * non-portable cluster sizes) goes first: it changes the answer. */
  if ((e = send_func_attrs(c, f, dev, module_id)) != cudaSuccess) return rgpu_rt_ret(e);
  rgpu_msg_device_query_req q = {.what = what, .module_id = module_id, .func_index = f->index,
                                 .args = {args, RGPU_DQ_CFG_COUNT}};
  uint64_t v = 0;
  rgpu_status rc = rgpu_rt_device_query(c, dev, &q, &v, 1);
  if (rc == 0) *out = v > INT32_MAX ? INT32_MAX : (int)v;
  return rc ? rgpu_rt_ret(rgpu_rt_from_call(rc)) : cudaSuccess;
}

RGPU_API cudaError_t cudaOccupancyMaxActiveClusters(int *numClusters, const void *func,
                                                    const cudaLaunchConfig_t *launchConfig) {
  return cluster_occupancy(numClusters, func, launchConfig, RGPU_DQ_MAX_ACTIVE_CLUSTERS);
}

RGPU_API cudaError_t cudaOccupancyMaxPotentialClusterSize(int *clusterSize, const void *func,
                                                          const cudaLaunchConfig_t *launchConfig) {
  return cluster_occupancy(clusterSize, func, launchConfig, RGPU_DQ_MAX_CLUSTER_SIZE);
}
