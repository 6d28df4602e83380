/* Handlers for driver-API modules (MODULE_GET_FUNCTION, MODULE_GET_GLOBAL,
 * MODULE_FUNC_NAMES; proto/rgpu_messages.def).
 *
 * A program that uses libcuda.so.1 directly loads a module first and names
 * its kernels and variables afterwards, one call at a time, where cudart
 * named them all in MODULE_LOAD.  These handlers add to the module record
 * MODULE_LOAD made: a function gets the next index of the record's table
 * (LAUNCH, FUNC_GET_ATTRS and OCCUPANCY name it by that index), a variable
 * becomes an entry of the session's allocation table.  The contract is
 * server/rgpu_req.h's: the module id, the name's length and contents are
 * checked before the driver sees them. */
#include <stdlib.h>
#include <string.h>

#include "rgpu_array.h"
#include "rgpu_dispatch.h"
#include "rgpu_log.h"
#include "rgpu_worker_internal.h"

#define D (&w->drv)
#define FAIL(status, ...) rgpu_worker_fail(w, (status), __VA_ARGS__)

/* Names up to the message's limit (4096 bytes) plus the NUL. */
enum { NAME_CAP = 4097, MAX_PARAMS = 8192 };

static CUresult lookup_module(rgpu_worker *w, uint64_t module_id, rgpu_module_rec **out) {
  const rgpu_handle_entry *e = rgpu_handle_map_get(&w->modules, module_id);
  if (!e) return FAIL(CUDA_ERROR_INVALID_HANDLE, "unknown module id %llu", (unsigned long long)module_id);
  *out = e->ptr;
  return CUDA_SUCCESS;
}

/* The request's name as a C string.  The decoder already refused NUL bytes
 * and names over the limit; an empty name is refused here (the driver
 * would only answer NOT_FOUND, but an empty name is always a client bug). */
static CUresult take_name(rgpu_worker *w, const rgpu_bytes *b, char *name, const char *what) {
  if (b->len == 0) return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: empty name", what);
  if (rgpu_str_copy(name, NAME_CAP, b->data, b->len))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: name of %zu bytes is too long", what, (size_t)b->len);
  if (memchr(b->data, 0, b->len))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: name contains a NUL byte", what);
  return CUDA_SUCCESS;
}

/* The request's module and name (take_name) for driver call `what`. */
static CUresult module_and_name(rgpu_worker *w, uint64_t module_id, const rgpu_bytes *b,
                                char *name, const char *what, rgpu_module_rec **m) {
  CUresult r = lookup_module(w, module_id, m);
  if (r) return r;
  return take_name(w, b, name, what);
}

/* Fails driver call `what` that looked up `name` in a module: NOT_FOUND
 * says the module has no `kind` of that name, other codes their name. */
static CUresult lookup_failed(rgpu_worker *w, CUresult r, const char *what, uint64_t module_id,
                              const char *kind, const char *name) {
  if (r == CUDA_ERROR_NOT_FOUND)
    return FAIL(r, "%s: module %llu has no %s named '%s'", what, (unsigned long long)module_id,
                kind, name);
  return FAIL(r, "%s(%s): %s", what, name, rgpu_driver_error_name(D, r));
}

CUresult rgpu_h_module_get_function(rgpu_req *rq, const rgpu_msg_module_get_function_req *q) {
  rgpu_worker *w = rq->w;
  rgpu_module_rec *m = NULL;
  char name[NAME_CAP];
  CUresult r = module_and_name(w, q->module_id, &q->name, name, "cuModuleGetFunction", &m);
  if (r) return r;
  CUfunction f = NULL;
  r = D->cuModuleGetFunction(&f, (CUmodule)m->module, name);
  if (r != CUDA_SUCCESS)
    return lookup_failed(w, r, "cuModuleGetFunction", q->module_id, "kernel", name);
  /* The parameter layout, as MODULE_LOAD reports it for cudart's kernels. */
  uint32_t *offs = malloc(MAX_PARAMS * sizeof *offs), *sizes = malloc(MAX_PARAMS * sizeof *sizes);
  if (!offs || !sizes) {
    free(offs);
    free(sizes);
    return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory reading a parameter table");
  }
  uint32_t np = 0;
  if (D->cuFuncGetParamInfo) {
    for (; np < MAX_PARAMS; np++) {
      size_t off = 0, sz = 0;
      if (D->cuFuncGetParamInfo(f, np, &off, &sz) != CUDA_SUCCESS) break;
      if (off > UINT32_MAX || sz > UINT32_MAX) break;
      offs[np] = (uint32_t)off;
      sizes[np] = (uint32_t)sz;
    }
  }
  uint32_t index = 0;
  if (rgpu_module_rec_add_func(m, f, np, offs, sizes, &index)) {
    free(offs);
    free(sizes);
    return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory growing module %llu's function table",
                (unsigned long long)q->module_id);
  }
  /* The table's own copy is what LAUNCH checks against: answer with it (an
   * index found again keeps the layout it was first given). */
  uint32_t first = m->param_first[index], n = m->nparams[index];
  rgpu_msg_module_get_function_rep rep = {.func_index = index,
                                          .param_offsets = {m->param_offsets + first, n},
                                          .param_sizes = {m->param_sizes + first, n}};
  rgpu_msg_module_get_function_rep_encode(rq->rep, &rep);
  free(offs);
  free(sizes);
  return CUDA_SUCCESS;
}

CUresult rgpu_h_module_get_global(rgpu_req *rq, const rgpu_msg_module_get_global_req *q) {
  rgpu_worker *w = rq->w;
  rgpu_module_rec *m = NULL;
  char name[NAME_CAP];
  CUresult r = module_and_name(w, q->module_id, &q->name, name, "cuModuleGetGlobal", &m);
  if (r) return r;
  CUdeviceptr dp = 0;
  size_t sz = 0;
  r = D->cuModuleGetGlobal(&dp, &sz, (CUmodule)m->module, name);
  if (r != CUDA_SUCCESS)
    return lookup_failed(w, r, "cuModuleGetGlobal", q->module_id, "variable", name);
  if (sz && !rgpu_alloc_table_lookup(&w->allocs, dp, sz)) {
    /* The first time the program names it: it becomes memory the session
     * holds (copies to it validate; it counts against the quota as
     * MODULE_LOAD's variables do, though the driver placed it at load). */
    uint64_t held = rgpu_worker_held_bytes(w);
    if (w->cfg.mem_quota && (sz > w->cfg.mem_quota || held > w->cfg.mem_quota - sz))
      return FAIL(CUDA_ERROR_OUT_OF_MEMORY,
                  "session memory quota exceeded: module variable '%s' (%zu bytes) does not fit "
                  "in the %llu bytes left of the quota %llu",
                  name, sz,
                  (unsigned long long)(w->cfg.mem_quota > held ? w->cfg.mem_quota - held : 0),
                  (unsigned long long)w->cfg.mem_quota);
    if (rgpu_alloc_table_add(&w->allocs, dp, sz, RGPU_ALLOC_MODULE_GLOBAL, w->cur_dev, q->module_id))
      return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory recording module variable '%s'", name);
  }
  rgpu_msg_module_get_global_rep rep = {.dptr = dp, .size = sz};
  rgpu_msg_module_get_global_rep_encode(rq->rep, &rep);
  return CUDA_SUCCESS;
}

CUresult rgpu_h_module_func_names(rgpu_req *rq, const rgpu_msg_module_func_names_req *q) {
  rgpu_worker *w = rq->w;
  rgpu_module_rec *m = NULL;
  CUresult r = lookup_module(w, q->module_id, &m);
  if (r) return r;
  if (!D->cuModuleGetFunctionCount || !D->cuModuleEnumerateFunctions || !D->cuFuncGetName)
    return FAIL(CUDA_ERROR_NOT_SUPPORTED,
                "cuModuleEnumerateFunctions: the server's driver cannot list a module's kernels");
  unsigned n = 0;
  r = D->cuModuleGetFunctionCount(&n, (CUmodule)m->module);
  if (r != CUDA_SUCCESS)
    return FAIL(r, "cuModuleGetFunctionCount: %s", rgpu_driver_error_name(D, r));
  if (n > 65536) return FAIL(CUDA_ERROR_NOT_SUPPORTED, "module has %u kernels, more than rgpu lists", n);
  CUfunction *fs = calloc(n ? n : 1, sizeof *fs);
  const char **names = calloc(n ? n : 1, sizeof *names);
  if (!fs || !names) {
    free(fs);
    free(names);
    return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory listing kernels");
  }
  r = D->cuModuleEnumerateFunctions(fs, n, (CUmodule)m->module);
  for (unsigned i = 0; r == CUDA_SUCCESS && i < n; i++) {
    r = D->cuFuncGetName(&names[i], fs[i]);
    if (r == CUDA_SUCCESS && (!names[i] || strlen(names[i]) > 4096)) r = CUDA_ERROR_INVALID_VALUE;
  }
  if (r == CUDA_SUCCESS) {
    rgpu_msg_module_func_names_rep rep = {.names = {.items = names, .count = n}};
    rgpu_msg_module_func_names_rep_encode(rq->rep, &rep);
  } else {
    r = FAIL(r, "cuModuleEnumerateFunctions: %s", rgpu_driver_error_name(D, r));
  }
  free(fs);
  free(names);
  return r;
}
