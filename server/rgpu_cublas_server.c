/* LIB_CALL for cuBLAS: the runtime around the generated decoders (see
 * rgpu_cublas_server.h).
 *
 * On a real GPU the worker dlopen()s NVIDIA's libcublas.so.13 at run time
 * (the server never links it: a host without it still serves everything
 * else) and calls it on the request's stream, through one real handle per
 * context (a cuBLAS handle belongs to the context current at its creation;
 * a session is one process, so every client handle of a context shares
 * it, with the client handle's modes, stream and workspace applied per
 * call).  On softgpu, whose device addresses are host addresses of this
 * process, the CPU implementations (rgpu_cublas_cpu.c) run as host
 * functions on the stream, ordered with the kernels and copies around
 * them. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_cublas_server.h"
#include "rgpu_lib_args.h"
#include "rgpu_log.h"
#include "rgpu_staging.h"
#include "rgpu_worker_internal.h"

#define D (&w->drv)
#define FAIL(status, ...) rgpu_worker_fail(w, (status), __VA_ARGS__)

/* ---- NVIDIA's library ----------------------------------------------------- */

#define RGPU_CUBLAS_SETUP_FUNCS(X)                                              \
  X(cublasCreate_v2) X(cublasSetStream_v2) X(cublasSetMathMode)                \
  X(cublasSetWorkspace_v2) X(cublasSetPointerMode_v2) X(cublasSetAtomicsMode)

/* Host-mode results on a GPU: cuBLAS writes them (in device pointer mode)
 * to a slot of this per-context ring, copied to the reply right after the
 * call on the same stream.  A slot is reused RESULT_SLOTS calls later;
 * every such call's client waits for its reply, so a reuse before the
 * copy ran would need RESULT_SLOTS client threads waiting at once. */
#define RESULT_SLOT_BYTES 64u
#define RESULT_SLOTS 1024u

static struct {
  int state; /* 0 not tried, 1 loaded, -1 failed */
  char err[512];
  void *lib;
#define RGPU_CUBLAS_FIELD(name) __typeof__(&name) name;
  RGPU_CUBLAS_SETUP_FUNCS(RGPU_CUBLAS_FIELD)
#undef RGPU_CUBLAS_FIELD
  struct {
    CUcontext ctx;
    cublasHandle_t h;
    uint64_t workspace, workspace_size;
    int math, pointer, atomics; /* what the handle is set to (-1: unknown) */
    CUstream stream;
    int stream_set;
    CUdeviceptr results;
    unsigned next_result;
  } ctxs[RGPU_MAX_DEVICES];
} g_lib;

/* NVIDIA's function of each table entry, resolved on first use. */
static void *g_real[4096];

static int lib_load(void) {
  if (g_lib.state) return g_lib.state;
  /* The loader's path first (ldconfig, LD_LIBRARY_PATH); then the
   * toolkit's own directory, where a toolkit install leaves it without
   * registering it with the loader. */
  void *lib = dlopen("libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
  if (lib && dlsym(lib, "rgpu_cublas_cublasCreate_v2")) {
    /* rgpu's own facade (found first when LD_LIBRARY_PATH names rgpu's
     * build/lib): the server would be a client of itself. */
    dlclose(lib);
    lib = NULL;
    snprintf(g_lib.err, sizeof g_lib.err,
             "libcublas.so.13 on the loader's path is rgpu's own facade, not NVIDIA's");
  } else if (!lib) {
    snprintf(g_lib.err, sizeof g_lib.err, "cannot open libcublas.so.13: %s", dlerror());
  }
  if (!lib) {
    char path[600];
    const char *home = getenv("CUDA_HOME");
    snprintf(path, sizeof path, "%s/lib64/libcublas.so.13", home && *home ? home : "/usr/local/cuda");
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib || dlsym(lib, "rgpu_cublas_cublasCreate_v2")) return g_lib.state = -1;
  }
#define RGPU_CUBLAS_RESOLVE(name)                                              \
  if (!(*(void **)&g_lib.name = dlsym(lib, #name))) {                          \
    snprintf(g_lib.err, sizeof g_lib.err, "libcublas.so.13 has no %s", #name); \
    return g_lib.state = -1;                                                   \
  }
  RGPU_CUBLAS_SETUP_FUNCS(RGPU_CUBLAS_RESOLVE)
#undef RGPU_CUBLAS_RESOLVE
  g_lib.lib = lib;
  return g_lib.state = 1;
}

typedef __typeof__(g_lib.ctxs[0]) gpu_slot;

/* The context's real handle, set up for this call: its stream, modes and
 * workspace (each set only when it changed: a setter is not free). */
static CUresult gpu_prepare(rgpu_cublas_call *call, size_t index) {
  rgpu_worker *w = call->w;
  const rgpu_msg_lib_call_req *q = call->q;
  if (lib_load() < 0) return FAIL(CUDA_ERROR_NOT_SUPPORTED, "cublas: %s", g_lib.err);
  if (index >= sizeof g_real / sizeof g_real[0])
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s: beyond rgpu's table of cuBLAS functions", call->name);
  if (!g_real[index] && !(g_real[index] = dlsym(g_lib.lib, call->name)))
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s: not in this server's libcublas.so.13", call->name);
  call->real = g_real[index];
  int dev = w->cur_dev < 0 ? 0 : w->cur_dev;
  CUcontext ctx = w->ctx[dev];
  gpu_slot *slot = &g_lib.ctxs[dev];
  if (slot->ctx != ctx || !slot->h) {
    /* A context recreated after a device reset needs a new handle; the old
     * one died with its context, and so did the result ring. */
    memset(slot, 0, sizeof *slot);
    cublasStatus_t st = g_lib.cublasCreate_v2(&slot->h);
    if (st != CUBLAS_STATUS_SUCCESS)
      return FAIL(CUDA_ERROR_NOT_INITIALIZED, "cublasCreate_v2: status %d", (int)st);
    slot->ctx = ctx;
    slot->math = slot->pointer = slot->atomics = -1;
  }
  cublasHandle_t h = slot->h;
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  if (!slot->stream_set || slot->stream != call->stream) {
    /* cublasSetStream resets the handle's workspace to the library's pool
     * (NVIDIA's documentation), and it is not free: only on a change; a
     * client workspace is then set again below (0 is the pool itself). */
    st = g_lib.cublasSetStream_v2(h, (cudaStream_t)call->stream);
    slot->stream = call->stream;
    slot->stream_set = st == CUBLAS_STATUS_SUCCESS;
    slot->workspace = slot->workspace_size = 0;
  }
  if (st == CUBLAS_STATUS_SUCCESS && slot->math != (int)q->math_mode &&
      (st = g_lib.cublasSetMathMode(h, (cublasMath_t)q->math_mode)) == CUBLAS_STATUS_SUCCESS)
    slot->math = (int)q->math_mode;
  if (st == CUBLAS_STATUS_SUCCESS && slot->pointer != (int)q->pointer_mode &&
      (st = g_lib.cublasSetPointerMode_v2(h, (cublasPointerMode_t)q->pointer_mode)) ==
          CUBLAS_STATUS_SUCCESS)
    slot->pointer = (int)q->pointer_mode;
  if (st == CUBLAS_STATUS_SUCCESS && slot->atomics != (int)q->atomics_mode &&
      (st = g_lib.cublasSetAtomicsMode(h, (cublasAtomicsMode_t)q->atomics_mode)) ==
          CUBLAS_STATUS_SUCCESS)
    slot->atomics = (int)q->atomics_mode;
  if (st == CUBLAS_STATUS_SUCCESS &&
      (slot->workspace != q->workspace || slot->workspace_size != q->workspace_size) &&
      (st = g_lib.cublasSetWorkspace_v2(h, (void *)(uintptr_t)q->workspace,
                                        q->workspace_size)) == CUBLAS_STATUS_SUCCESS) {
    slot->workspace = q->workspace;
    slot->workspace_size = q->workspace_size;
  }
  if (st != CUBLAS_STATUS_SUCCESS)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cublas: setting up the handle for %s: status %d",
                call->name, (int)st);
  call->handle = h;
  return CUDA_SUCCESS;
}

/* ---- the decoders' helpers ------------------------------------------------- */

void *rgpu_cublas_get_scalar(rgpu_reader *r, void *buf, size_t *n) {
  size_t len = 0;
  const uint8_t *p = rgpu_reader_get_bytes(r, RGPU_LIB_SCALAR_MAX, &len);
  *n = p ? len : 0;
  if (p) memcpy(buf, p, len);
  return buf;
}

CUresult rgpu_cublas_check_dev(rgpu_cublas_call *call, const char *param, uint64_t ptr,
                               uint64_t bytes) {
  rgpu_worker *w = call->w;
  if (bytes == 0) return CUDA_SUCCESS;
  if (ptr && bytes != UINT64_MAX && rgpu_alloc_table_lookup(&w->allocs, ptr, bytes))
    return CUDA_SUCCESS;
  if (bytes == UINT64_MAX)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: the extent of %s overflows", call->name, param);
  return FAIL(CUDA_ERROR_INVALID_VALUE,
              "%s: %s (%llu bytes at 0x%llx) is not inside a device allocation of this session",
              call->name, param, (unsigned long long)bytes, (unsigned long long)ptr);
}

void *rgpu_cublas_result(rgpu_cublas_call *call, size_t n) {
  rgpu_worker *w = call->w;
  /* Results follow the head back to back; the generator gives a call at
   * most RGPU_LIB_SCALAR_MAX bytes of them per parameter and cuBLAS has no
   * call with more than one. */
  if (!call->out) {
    call->out = rgpu_staging_get(w, RGPU_LIB_REPLY_HEAD + RESULT_SLOT_BYTES, &call->out_pinned);
    if (!call->out) return NULL;
    memset(call->out, 0, RGPU_LIB_REPLY_HEAD);
    call->out_len = RGPU_LIB_REPLY_HEAD;
  }
  if (call->out_len + n > RGPU_LIB_REPLY_HEAD + RESULT_SLOT_BYTES) return NULL;
  size_t off = call->out_len - RGPU_LIB_REPLY_HEAD;
  call->out_len += n;
  if (call->softgpu) return call->out + RGPU_LIB_REPLY_HEAD + off;
  /* A GPU: cuBLAS writes in device pointer mode to this call's slot. */
  int dev = w->cur_dev < 0 ? 0 : w->cur_dev;
  gpu_slot *slot = &g_lib.ctxs[dev];
  if (!call->out_dev) {
    if (!slot->results && D->cuMemAlloc(&slot->results, RESULT_SLOTS * RESULT_SLOT_BYTES) != CUDA_SUCCESS) {
      slot->results = 0;
      return NULL;
    }
    call->out_dev = slot->results + (CUdeviceptr)(slot->next_result++ % RESULT_SLOTS) * RESULT_SLOT_BYTES;
    if (slot->pointer != CUBLAS_POINTER_MODE_DEVICE &&
        g_lib.cublasSetPointerMode_v2(call->handle, CUBLAS_POINTER_MODE_DEVICE) == CUBLAS_STATUS_SUCCESS)
      slot->pointer = CUBLAS_POINTER_MODE_DEVICE;
    if (slot->pointer != CUBLAS_POINTER_MODE_DEVICE) return NULL;
  }
  return (void *)(uintptr_t)(call->out_dev + off);
}

CUresult rgpu_cublas_done(rgpu_cublas_call *call, cublasStatus_t st) {
  rgpu_worker *w = call->w;
  if (st != CUBLAS_STATUS_SUCCESS) {
    if (call->out) {
      /* The client waits: it gets cuBLAS's own status. */
      uint32_t s = (uint32_t)st;
      memcpy(call->out, &s, sizeof s);
      call->out_len = RGPU_LIB_REPLY_HEAD;
      return CUDA_SUCCESS;
    }
    return FAIL(st == CUBLAS_STATUS_INVALID_VALUE ? CUDA_ERROR_INVALID_VALUE
                                                  : CUDA_ERROR_LAUNCH_FAILED,
                "%s: cuBLAS returned status %d", call->name, (int)st);
  }
  if (call->out && call->out_dev) {
    CUresult r = D->cuMemcpyDtoHAsync(call->out + RGPU_LIB_REPLY_HEAD, call->out_dev,
                                      call->out_len - RGPU_LIB_REPLY_HEAD, call->stream);
    if (r != CUDA_SUCCESS)
      return FAIL(r, "%s: copying its result back: %s", call->name, rgpu_driver_error_name(D, r));
  }
  return CUDA_SUCCESS;
}

CUresult rgpu_cublas_malformed(rgpu_cublas_call *call) {
  rgpu_worker *w = call->w;
  return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: malformed arguments (a client of another build?)",
              call->name);
}

CUresult rgpu_cublas_oom(rgpu_cublas_call *call) {
  rgpu_worker *w = call->w;
  return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "%s: server out of memory", call->name);
}

CUresult rgpu_cublas_no_cpu(rgpu_cublas_call *call) {
  rgpu_worker *w = call->w;
  return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s is not computed by softgpu (it needs a GPU server)",
              call->name);
}

/* ---- softgpu's host functions ---------------------------------------------- */

CUresult rgpu_cublas_cpu_fail(rgpu_cublas_call *call, void *args, CUresult r, const char *why) {
  rgpu_worker *w = call->w;
  free(args);
  return FAIL(r, "%s on softgpu: %s", call->name, why);
}

CUresult rgpu_cublas_cpu_enqueue(rgpu_cublas_call *call, void (*run)(void *), void *args) {
  rgpu_worker *w = call->w;
  if (!D->cuLaunchHostFunc)
    return rgpu_cublas_cpu_fail(call, args, CUDA_ERROR_NOT_SUPPORTED, "no cuLaunchHostFunc");
  CUresult r = D->cuLaunchHostFunc(call->stream, run, args);
  if (r != CUDA_SUCCESS) {
    free(args);
    return FAIL(r, "%s: cuLaunchHostFunc: %s", call->name, rgpu_driver_error_name(D, r));
  }
  return CUDA_SUCCESS;
}

/* ---- LIB_CALL ---------------------------------------------------------------- */

static const rgpu_cublas_entry *find(uint32_t hash, size_t *index) {
  size_t lo = 0, hi = rgpu_cublas_table_len;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (rgpu_cublas_table[mid].hash < hash)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == rgpu_cublas_table_len || rgpu_cublas_table[lo].hash != hash) return NULL;
  *index = lo;
  return &rgpu_cublas_table[lo];
}

CUresult rgpu_cublas_dispatch(rgpu_req *rq, const rgpu_msg_lib_call_req *q) {
  rgpu_worker *w = rq->w;
  size_t index = 0;
  const rgpu_cublas_entry *e = find(q->fn, &index);
  if (!e)
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "cublas: function 0x%08x is unknown to this server "
                "(a client built from newer headers?)", q->fn);
  if (q->pointer_mode > CUBLAS_POINTER_MODE_DEVICE || q->atomics_mode > CUBLAS_ATOMICS_ALLOWED)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: pointer mode %u, atomics mode %u", e->name,
                q->pointer_mode, q->atomics_mode);
  rgpu_cublas_call call = {.rq = rq, .w = w, .q = q, .name = e->name,
                           .device_mode = q->pointer_mode == CUBLAS_POINTER_MODE_DEVICE,
                           .softgpu = D->is_softgpu};
  if (q->stream) {
    const rgpu_handle_entry *s = rgpu_handle_map_get(&w->streams, q->stream);
    if (!s) return FAIL(CUDA_ERROR_INVALID_HANDLE, "%s: unknown stream id %llu", e->name,
                        (unsigned long long)q->stream);
    call.stream = (CUstream)s->ptr;
  }
  if (q->workspace && !rgpu_alloc_table_lookup(&w->allocs, q->workspace, q->workspace_size))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: the workspace is not inside a device allocation "
                "of this session", e->name);
  CUresult r;
  if (!call.softgpu && (r = gpu_prepare(&call, index))) return r;
  rgpu_reader rd;
  rgpu_reader_init(&rd, q->args.data, q->args.len);
  r = e->run(&call, &rd);
  if (!call.out) return r;
  if (r != CUDA_SUCCESS) {
    rgpu_staging_release(w, call.out, call.out_pinned);
    return r;
  }
  /* The reply carries the results once the stream has reached the call. */
  return rgpu_req_reply_after_stream(rq, q->stream, call.stream, call.out, call.out_len,
                                     call.out_pinned);
}
