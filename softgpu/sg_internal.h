/* Shared internals of the softgpu driver.  Not installed. */
#ifndef SG_INTERNAL_H
#define SG_INTERNAL_H

#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "rgpu_log.h"

#ifdef SG_HAVE_PTX
#include "sg_ptx.h"
#endif

#define SG_EXPORT __attribute__((visibility("default")))

/* ---- configuration (sg_device.c) ---------------------------------------- */
typedef struct {
  int ndevices;        /* RGPU_SOFTGPU_DEVICES, default 1 */
  uint64_t mem_limit;  /* RGPU_SOFTGPU_MEM per device, default 4 GiB */
  int nworkers;        /* RGPU_SOFTGPU_THREADS, default: online CPUs */
  int ncpus;
  int cc_major, cc_minor; /* RGPU_SOFTGPU_CC (e.g. 75, 90), default 7.5 */
} sg_config;
extern sg_config sg_cfg;

/* Parses "4G", "512M", "1024" (K/M/G/T suffixes, powers of 1024).
 * Returns 0 or -1 on garbage. */
int sg_parse_size(const char *s, uint64_t *out);

/* ---- handle registry (sg_handle.c) -------------------------------------- */
/* Every handle given to the caller is registered, so a stale or forged
 * handle is answered with CUDA_ERROR_INVALID_HANDLE instead of being
 * dereferenced. */
typedef enum {
  SG_H_CTX = 1,
  SG_H_STREAM,
  SG_H_EVENT,
  SG_H_MODULE,
  SG_H_FUNCTION,
  SG_H_GRAPH,      /* sg_graph.c */
  SG_H_GRAPH_NODE,
  SG_H_GRAPH_EXEC,
  SG_H_ARRAY,      /* sg_array.c */
} sg_handle_type;
int sg_handle_add(const void *p, sg_handle_type t);
void sg_handle_del(const void *p);
int sg_handle_ok(const void *p, sg_handle_type t);

/* ---- logging helpers ---------------------------------------------------- */
/* Logs "<name> is not implemented" the first time only. */
#define SG_UNSUPPORTED(name)                                                  \
  do {                                                                        \
    static atomic_int once_;                                                  \
    if (!atomic_exchange(&once_, 1)) RGPU_WARN("%s is not implemented", name); \
    return CUDA_ERROR_NOT_SUPPORTED;                                          \
  } while (0)

/* ---- devices and contexts (sg_device.c) --------------------------------- */
typedef struct sg_device sg_device;
typedef struct CUctx_st sg_ctx;
typedef struct CUstream_st sg_stream;
typedef struct CUevent_st sg_event;
typedef struct CUmod_st sg_module;
typedef struct CUfunc_st sg_function;
typedef struct sg_op sg_op;

struct sg_device {
  int ordinal;
  pthread_mutex_t lock;   /* primary_*; held while the primary context is torn down */
  pthread_mutex_t mem_lock; /* mem_used */
  uint64_t mem_used;
  sg_ctx *primary;        /* allocated once, reused across resets, as the driver does */
  int primary_refs;
  unsigned primary_flags;
};

struct CUctx_st {
  sg_device *dev;
  int is_primary;
  int active;             /* 0 once destroyed/reset: calls get CONTEXT_IS_DESTROYED */
  unsigned flags;
  _Atomic int sticky;     /* CUresult of a kernel fault, 0 if none */
  size_t limits[8];       /* cuCtxSetLimit values by CUlimit; 0 = default */
  CUfunc_cache cache_config;
  sg_stream *legacy;      /* the NULL stream */
  /* Devices whose memory this context was given access to
   * (cuCtxEnablePeerAccess; bit = the peer's ordinal).  Memory is one
   * address space on softgpu, so this is bookkeeping for CUDA's errors. */
  _Atomic uint64_t peers;
  /* Lists below are protected by sg_sched_lock. */
  sg_stream *streams;     /* user streams and per-thread streams */
  sg_event *events;
  sg_module *modules;
  /* Bytes of the device heap (a kernel's malloc) in use. */
  _Atomic uint64_t heap_used;
};

extern int sg_initialized;
sg_device *sg_device_get(int ordinal);

/* Validates driver state and the current context for an API call:
 * NOT_INITIALIZED, INVALID_CONTEXT, CONTEXT_IS_DESTROYED, or the
 * context's sticky error. */
CUresult sg_current(sg_ctx **out);
/* Same checks for a known context. */
CUresult sg_ctx_usable(sg_ctx *c);
/* Records a kernel fault: the context answers every call with it from now
 * on. */
void sg_ctx_set_sticky(sg_ctx *c, CUresult err);

/* ---- memory (sg_mem.c) -------------------------------------------------- */
typedef enum {
  SG_MEM_DEVICE = 1,  /* cuMemAlloc */
  SG_MEM_HOST = 2,    /* cuMemAllocHost / cuMemHostAlloc: pinned, device-visible */
  SG_MEM_VMM = 3,     /* a mapped, accessible piece of a cuMemAddressReserve range */
  SG_MEM_GLOBAL = 4,  /* a module's .global/.const variable */
  SG_MEM_REGISTERED = 5, /* cuMemHostRegister: the caller's memory, never freed by us */
  SG_MEM_HEAP = 6,    /* a kernel's malloc (the device heap, CU_LIMIT_MALLOC_HEAP_SIZE) */
} sg_mem_kind;

typedef struct {
  uint64_t base;
  uint64_t size;      /* what the caller asked for */
  void *host;
  sg_mem_kind kind;
  sg_ctx *ctx;
  int readonly;       /* VMM PROT_READ mapping */
  uint64_t id;        /* unique, for CU_POINTER_ATTRIBUTE_BUFFER_ID */
  uint64_t footprint; /* bytes charged against the device's limit */
  int mmapped;        /* backing came from mmap (else aligned_alloc) */
  int device;
} sg_alloc;

/* Looks up the allocation containing addr; 0 on success, -1 if none. */
int sg_mem_find(uint64_t addr, sg_alloc *out);
/* Checks that [addr, addr+len) lies in one live allocation (writable if
 * `write`), and returns its host address.  CUDA_ERROR_INVALID_VALUE if not. */
CUresult sg_mem_check(uint64_t addr, uint64_t len, int write, void **host);
/* In-flight accesses (copies, kernels) hold the "use" lock shared; frees
 * take it exclusively, so memory never disappears under a running access. */
void sg_mem_use_begin(void);
void sg_mem_use_end(void);
/* Device allocations owned by a module (its globals). */
CUresult sg_mem_alloc_device(sg_ctx *c, uint64_t size, sg_mem_kind kind, uint64_t *dptr);
CUresult sg_mem_free_device(uint64_t dptr);
/* Frees everything a context owns (context destroy / primary reset). */
void sg_mem_release_ctx(sg_ctx *c);
/* The device heap (sg_mem.c): a kernel's malloc of size bytes in context c
 * (0 when the heap, CU_LIMIT_MALLOC_HEAP_SIZE, is full); its free, which
 * takes effect after the launch (other lanes of the kernel may still read
 * the block; freeing mid-launch would need the use lock the launch holds);
 * and the end-of-launch step that performs those frees. */
uint64_t sg_mem_heap_alloc(sg_ctx *c, uint64_t size);
void sg_mem_heap_free_later(sg_ctx *c, uint64_t addr);
void sg_mem_heap_flush(void);
/* Runs queued copies and memsets (on a stream worker); failures make the
 * context sticky. */
void sg_exec_copy(sg_ctx *c, sg_op *op);
void sg_exec_memset(sg_ctx *c, sg_op *op);
/* Device-memory accounting and the free barrier, for memory that is not in
 * the allocation table (CUDA arrays, sg_array.c). */
CUresult sg_mem_charge(sg_device *d, uint64_t bytes);
void sg_mem_uncharge(sg_device *d, uint64_t bytes);
/* Waits until no copy or kernel is in flight (they hold the use lock),
 * so memory unlinked before the call can be freed after it. */
void sg_mem_quiesce(void);
/* Interpreter callback: the allocation table as sg_ptx_env.lookup wants it. */
int sg_mem_lookup_cb(void *ctx, uint64_t addr, void *range /* sg_ptx_range* */);

/* ---- streams, events and the work queue (sg_stream.c) ------------------- */
extern pthread_mutex_t sg_sched_lock;

typedef enum {
  SG_OP_COPY = 1,
  SG_OP_MEMSET,
  SG_OP_LAUNCH,
  SG_OP_HOSTFN,
  SG_OP_CALLBACK,
  SG_OP_RECORD,
  SG_OP_NOP,     /* pure wait (cuStreamWaitEvent) */
  SG_OP_FUNC,    /* u.func.run(ctx, arg) unless the context is sticky (graph copies, memsets) */
  SG_OP_EXIT,    /* stream destroyed: the worker stops after it */
} sg_op_type;

typedef struct {
  sg_stream *stream;
  uint64_t seq;
} sg_wait;

struct sg_op {
  sg_op *next;
  sg_op_type type;
  uint64_t seq;
  int nwaits;
  sg_wait waits[4];      /* explicit (event) waits; implicit legacy waits are separate */
  sg_wait *more_waits;   /* legacy-stream waits on every blocking stream */
  int nmore;
  union {
    struct {
      uint64_t dst, src;   /* device or host addresses */
      int dst_dev, src_dev; /* 1: re-check against the table at execution */
      uint64_t len;
      void *staging;       /* owned copy of a pageable source */
    } copy;
    struct {
      uint64_t dst;
      uint32_t value;
      unsigned elsize;
      uint64_t count;
    } memset;
    struct {
      sg_function *fn;
      unsigned grid[3], block[3];
      size_t shared;
      void *params;
      size_t params_size;
    } launch;
    struct {
      CUhostFn fn;
      void *user;
    } hostfn;
    struct {
      CUstreamCallback fn;
      void *user;
      CUstream handle;     /* as the caller named the stream */
    } callback;
    struct {
      sg_event *ev;
      uint64_t gen;
    } record;
    struct {
      void (*run)(sg_ctx *c, void *arg);
      void (*free)(void *arg); /* called when the op is freed, run or not */
      void *arg;
    } func;
  } u;
};

struct CUstream_st {
  sg_ctx *ctx;
  unsigned flags;
  int priority;
  int is_legacy;
  pthread_t ptds_owner;  /* per-thread default stream of this thread, if ptds */
  int is_ptds;
  /* Stream attributes (cuStreamSetAttribute): hints that change nothing
   * on a CPU, kept so they read back as set.  sync_policy 0 is AUTO. */
  CUaccessPolicyWindow access_policy;
  int sync_policy;
  CUlaunchMemSyncDomain mem_sync_domain;
  CUlaunchMemSyncDomainMap mem_sync_domain_map;
  /* Below: protected by sg_sched_lock. */
  int refs;
  int destroyed;
  uint64_t submitted;    /* seq of the last op queued */
  uint64_t completed;    /* seq of the last op finished */
  int inline_running;    /* a synchronous op runs on its caller's thread */
  sg_op *head, *tail;    /* queued ops: an rgpu_fifo linked through next */
  pthread_cond_t work;
  pthread_t thread;
  sg_stream *next;       /* in ctx->streams */
  struct sg_capture *capture; /* stream capture it takes part in; sg_graph_lock */
  struct CUgraphNode_st **cap_deps; /* what its next captured node depends on */
  int ncap_deps;
  size_t cap_deps_cap;
};

struct CUevent_st {
  sg_ctx *ctx;
  unsigned flags;
  /* Below: protected by sg_sched_lock. */
  int refs;              /* 1 until destroyed, +1 per queued record */
  uint64_t gen;          /* bumped by every record */
  sg_stream *stream;     /* stream of the latest record (ref held), NULL if never */
  uint64_t seq;
  uint64_t time_ns;      /* CLOCK_MONOTONIC when the latest record completed */
  int has_time;
  sg_event *next, *prev; /* in ctx->events (doubly linked: destroy is O(1)) */
  /* A record in a capturing stream (sg_graph_lock): the capture and the
   * nodes a later wait on the event depends on. */
  uint64_t cap_id;       /* 0: none; stale once that capture ended */
  struct CUgraphNode_st **cap_nodes;
  int ncap_nodes;
};

/* Resolves a CUstream argument (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD
 * or a handle) in context c (NULL: the current one); checks the context. */
CUresult sg_stream_resolve(CUstream h, sg_stream **out);
/* Allocates an op (zeroed) of a type. */
sg_op *sg_op_new(sg_op_type type);
/* Queues op on s, adding the implicit legacy-stream waits.  Takes ownership
 * of op.  If `wait` is set, blocks until the op has run and returns the
 * context's sticky error, if any. */
CUresult sg_submit(sg_stream *s, sg_op *op, int wait);
/* Blocks until every stream of c is idle. */
void sg_ctx_drain(sg_ctx *c);
/* Stops and frees every stream and event of c (c is idle). */
void sg_ctx_release_streams(sg_ctx *c);
CUresult sg_stream_create_legacy(sg_ctx *c);
/* 1 if p is inside page-locked host memory (pinned), so an async copy may
 * read or write it later. */
int sg_is_pinned(uint64_t p, uint64_t len);

/* Queues a chain of ops (linked by ->next) on s as one unit: no other
 * submission lands between them.  Takes ownership of every op. */
CUresult sg_submit_chain(sg_stream *s, sg_op *first);
/* Keeps a stream's memory alive (not its worker) for a holder outside the
 * scheduler, such as a stream capture. */
void sg_stream_ref(sg_stream *s);
void sg_stream_unref(sg_stream *s);
/* Frees ops (linked by ->next) that were never queued. */
void sg_op_free_chain(sg_op *first);
/* Runs a chain of ops on the calling stream thread, in order, and frees it:
 * a conditional graph body inside its node's op (sg_graph_cond.c). */
void sg_run_chain_inline(sg_ctx *c, sg_op *first);
/* Device code's cudaGraphSetConditional (sg_graph_cond.c; any thread, no
 * lock held): 0, or -1 for a handle that is not a live conditional handle. */
int sg_cond_set(uint64_t handle, uint32_t value);

/* ---- graphs and stream capture (sg_graph.c) ----------------------------- */
/* Number of captures in progress, so sg_submit pays nothing otherwise. */
extern atomic_int sg_captures_active;
/* sg_submit's hook: if s (or, for the legacy stream, a stream it would
 * synchronise with) takes part in a capture, turns op into a graph node (or
 * refuses it with the capture error CUDA gives), sets *res and returns 1;
 * returns 0 when s is not capturing and the op must run. */
int sg_capture_submit(sg_stream *s, sg_op *op, int wait, CUresult *res);
/* Hooks for stream/event calls that behave differently under capture:
 * return 1 with *res set if they handled the call. */
int sg_capture_wait_event(sg_stream *s, sg_event *e, unsigned flags, CUresult *res);
int sg_capture_record_event(sg_stream *s, sg_event *e, unsigned flags, CUresult *res);
/* Synchronising with (or querying) a capturing stream is illegal: returns
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture. */
CUresult sg_capture_check_sync(sg_stream *s);
/* Querying or synchronising an event last recorded in a running capture is
 * CUDA_ERROR_CAPTURED_EVENT. */
CUresult sg_capture_event_check(sg_event *e);

/* ---- CUDA arrays, 2D/3D copies, texture and surface objects (sg_array.c) - */
/* One side of a 2D/3D copy, resolved to a base address and strides. */
typedef struct {
  uint64_t base;      /* address of the first byte copied */
  int dev;            /* in the allocation table: re-checked when it runs */
  int pageable;       /* host memory softgpu does not know: the copy is synchronous */
  struct CUarray_st *arr; /* an array side: re-checked (arr_id) when it runs */
  uint64_t arr_id;
  size_t pitch, slice;
  uint64_t span;      /* bytes from base to the last byte copied, plus one */
} sg_copy_side;

typedef struct {
  sg_copy_side dst, src;
  size_t width, height, depth;
  CUDA_MEMCPY3D p;    /* as given (stream capture turns it into a node) */
} sg_copy3d;

/* Validates a CUDA_MEMCPY3D (every memory type, arrays included) and
 * resolves it; CUDA_ERROR_INVALID_VALUE for anything out of bounds. */
CUresult sg_copy3d_resolve(const CUDA_MEMCPY3D *p, sg_copy3d *c);
CUresult sg_memcpy3d_check(const CUDA_MEMCPY3D *p);
/* Runs a resolved copy (an SG_OP_FUNC body; arg: sg_copy3d*). */
void sg_copy3d_run(sg_ctx *ctx, void *arg);
/* Frees the arrays and texture/surface objects of c (c is idle). */
void sg_array_release_ctx(sg_ctx *c);
/* Interpreter callback: resolves a texture/surface object handle
 * (sg_ptx_env.texobj; t is an sg_ptx_tex*). */
int sg_texobj_lookup_cb(void *ctx, uint64_t handle, void *t);

/* ---- modules (sg_module.c) ---------------------------------------------- */
struct CUmod_st {
  sg_ctx *ctx;
  atomic_int refs;       /* 1 while loaded + 1 per queued launch */
  unsigned ptx_arch;     /* compute_XX of the PTX that was loaded */
  size_t const_bytes;    /* total of its .const variables */
#ifdef SG_HAVE_PTX
  sg_ptx_module *pm;
#endif
  int nfuncs;
  sg_function *funcs;
  int nglobals;
  struct sg_global {
    char *name;
    uint64_t dptr;
    size_t size;
  } *globals;
  sg_module *next;
};

struct CUfunc_st {
  sg_module *mod;
#ifdef SG_HAVE_PTX
  const sg_ptx_kernel *k;
#endif
  const char *name;
  int max_dynamic_shared;
  int carveout;
  CUfunc_cache cache;
};

/* Runs a queued launch (on a stream worker). */
void sg_module_run_launch(sg_op *op);
/* Drops a module reference; frees the module at zero. */
void sg_module_unref(sg_module *m);
/* Unloads every module of c (c is idle). */
void sg_ctx_release_modules(sg_ctx *c);

#endif
