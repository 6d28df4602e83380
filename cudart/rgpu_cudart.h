/* Internal interfaces of the runtime facade (libcudart.so.13).
 *
 * The facade turns CUDA runtime semantics (current device per thread,
 * implicit primary context, fatbin registration, launch configuration,
 * last-error and sticky-error rules) into driver-level protocol requests
 * sent through the client core.  Only cuda* and __cuda* symbols leave the
 * library (RGPU_API plus the version script). */
#ifndef RGPU_CUDART_H
#define RGPU_CUDART_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "rgpu_calls.h" /* typed client calls, generated from the message spec */
#include "rgpu_client.h"
#include "rgpu_cudart_locks.h"

#define RGPU_API __attribute__((visibility("default")))
/* Defines a per-thread-default-stream entry point (name_ptsz): CUDA's
 * headers declare those only under --default-stream per-thread, so the
 * definition brings its own prototype.  Use: RGPU_API_PTSZ(sig) { body } */
#define RGPU_API_PTSZ(...) RGPU_API __VA_ARGS__; RGPU_API __VA_ARGS__
#define RGPU_MAX_DEVICES 64
/* Attribute values cached per device, indexed by CUdevice_attribute. */
#define RGPU_MAX_ATTRS 1024

/* ---- errors (rgpu_cudart_errmap.c, pure) ------------------------------- */

/* CUresult as the server reports it -> the runtime's code, as NVIDIA's
 * cudart maps them. Unknown codes become cudaErrorUnknown. */
cudaError_t rgpu_cudart_from_cu(int cu);
/* Errors that leave the context unusable: returned by every later call
 * until cudaDeviceReset. */
int rgpu_cudart_is_sticky(cudaError_t e);
/* The inverse, for the driver facade: the CUresult a driver call returns
 * for a runtime code (CUDA_ERROR_UNKNOWN for codes with no counterpart). */
int rgpu_cudart_to_cu(cudaError_t rt);

/* ---- error state (rgpu_cudart_state.c) --------------------------------- */

/* The state machine of last/sticky/pending errors, kept apart from the
 * globals so that it can be unit-tested. */
typedef struct {
  rgpu_mutex lock;
  cudaError_t sticky;  /* context-corrupting error, until reset */
  cudaError_t pending; /* async error reported by the server, not yet seen */
  int sticky_seen;     /* the sticky error was already reported once */
} rgpu_err_state;

void rgpu_err_state_init(rgpu_err_state *s);
/* An asynchronous error arrived (ASYNC_ERROR event). */
void rgpu_err_state_async(rgpu_err_state *s, cudaError_t e);
/* A synchronizing call finished with `result`: returns what the call must
 * return (the pending async error wins over success) and updates sticky. */
cudaError_t rgpu_err_state_sync(rgpu_err_state *s, cudaError_t result);
/* cudaGetLastError/Peek when the thread's own last error is clear: the
 * pending async error, or a sticky error no call has reported yet (CUDA 13
 * reports a sticky error through cudaGetLastError once; the API calls keep
 * returning it).  `take` clears what it returns. */
cudaError_t rgpu_err_state_poll(rgpu_err_state *s, int take);
/* The sticky error, for a call about to return (and so report) it. */
cudaError_t rgpu_err_state_sticky(rgpu_err_state *s);
void rgpu_err_state_reset(rgpu_err_state *s);

/* ---- the runtime's global state ---------------------------------------- */

/* Counts a public API call (for RGPU_STATS) and resets the per-call wait
 * flag; every public entry point calls it exactly once. */
void rgpu_rt_count_call(void);
/* Connects on first use (thread-safe, failure remembered).  Returns the
 * client or NULL with *err = cudaErrorNoDevice (after one log line). */
rgpu_client *rgpu_rt_client(cudaError_t *err);
/* The client if a session is open, without connecting. */
rgpu_client *rgpu_rt_client_peek(void);
/* Start of a call that needs the server: counts the call, connects, and
 * returns the sticky error if there is one.  On success *out is the client. */
cudaError_t rgpu_rt_enter(rgpu_client **out);
/* ---- the device list of several servers (rgpu_cudart_devlist.c, pure) -- */

/* Server i's devices are the process's first[i] .. first[i]+count[i]-1,
 * each server's after the previous one's, in RGPU_SERVER's order. */
typedef struct {
  int n;
  int first[RGPU_CLIENT_MAX_SERVERS];
  int count[RGPU_CLIENT_MAX_SERVERS];
} rgpu_devlist;
/* From each server's device count (n <= RGPU_CLIENT_MAX_SERVERS); at most
 * max devices in all (the later ones are cut).  Returns the total. */
int rgpu_devlist_build(rgpu_devlist *l, const int *counts, int n, int max);
/* The server owning dev, or -1 (no such device). */
int rgpu_devlist_server_of(const rgpu_devlist *l, int dev);

/* ---- several servers (issue 19) ----------------------------------------
 * RGPU_SERVER may name several servers; their devices form one list in
 * order, and each request goes to the session of the server owning its
 * device.  With one server none of this costs anything: the routing is
 * one load of rgpu_rt_several_servers. */
extern int rgpu_rt_several_servers;
/* Sessions opened (0 before the first call; 1 with one server). */
int rgpu_rt_server_count(void);
rgpu_client *rgpu_rt_server_client(int i);
/* Index of a session's server (0 with one server, or for a session not
 * in the list); a loop over at most RGPU_CLIENT_MAX_SERVERS sessions only
 * with several. */
int rgpu_rt_server_index(const rgpu_client *c);
/* Index of the server owning process-wide device dev. */
int rgpu_rt_server_of_device(int dev);
/* The session carrying dev's requests (with one server: the session). */
rgpu_client *rgpu_rt_client_of_device(int dev);
/* c, or the session owning dev when that is another server's. */
static inline rgpu_client *rgpu_rt_route(rgpu_client *c, int dev) {
  return rgpu_rt_several_servers && dev >= 0 ? rgpu_rt_client_of_device(dev) : c;
}
/* Server-local number of dev, for the messages that carry a device in
 * their fields (DEVICE_PROPS, DEVICE_RESET, PEER_ACCESS, NVML_QUERY). */
static inline uint32_t rgpu_rt_local_device(rgpu_client *owner, int dev) {
  return (uint32_t)(dev - rgpu_client_first_device(owner));
}
/* Every server lost (with one: c's connection failed).  A lost server of
 * several fails only its own devices. */
int rgpu_rt_all_lost(rgpu_client *c);
/* 1 when devices a and b belong to different servers. */
static inline int rgpu_rt_devices_apart(int a, int b) {
  return rgpu_rt_several_servers && rgpu_rt_server_of_device(a) != rgpu_rt_server_of_device(b);
}
/* The error state of a session's devices. */
rgpu_err_state *rgpu_rt_err_state_of(const rgpu_client *c);
/* (rgpu_cudart_device.c) With several servers the device count and driver
 * version are known once every session is open. */
void rgpu_rt_devices_preset(int count, int driver_version);

/* Records e as the thread's last error (if nonzero) and returns it. */
cudaError_t rgpu_rt_ret(cudaError_t e);
/* Turns the result of a client call (CUresult or negative transport code)
 * into a runtime error; a failing connection gives
 * cudaErrorDevicesUnavailable (sticky). */
cudaError_t rgpu_rt_from_call(int rc);
/* For a call that waited: folds in async errors that arrived meanwhile and
 * applies the sticky rules; records last error. */
cudaError_t rgpu_rt_sync_ret(rgpu_client *c, int rc);
/* Pulls latched async errors of the client into the error state. */
void rgpu_rt_collect_async(rgpu_client *c);
/* The error state of the calling thread's current device's server. */
rgpu_err_state *rgpu_rt_err_state(void);
/* The calling thread's last error, read and written without the rules of
 * cudaGetLastError: the driver facade saves it around the runtime code it
 * reuses, so that no driver call changes what cudaGetLastError answers. */
cudaError_t rgpu_rt_last_error_get(void);
void rgpu_rt_last_error_set(cudaError_t e);
/* Whether a runtime call on this thread has bound its current device's
 * primary context (what cuCtxGetCurrent answers on an empty context
 * stack); rgpu_rt_enter sets it outside driver calls, and the driver
 * clears it when a context pop empties the stack. */
int rgpu_rt_thread_bound(void);
void rgpu_rt_thread_set_bound(int bound);
/* Brackets runtime code run for a driver call: rgpu_rt_enter then neither
 * binds the thread nor marks the device used. */
void rgpu_rt_driver_call_begin(void);
void rgpu_rt_driver_call_end(void);
/* A runtime call used dev since its last cudaDeviceReset (its primary
 * context is active, cuDevicePrimaryCtxGetState). */
int rgpu_rt_device_used(int dev);
/* A runtime call (outside driver calls) works on dev: binds the thread and
 * marks dev used.  rgpu_rt_enter does it for the current device,
 * cudaSetDevice for the new one. */
void rgpu_rt_bind_device(int dev);

/* Current device of the calling thread (CUDA's is per thread, default 0). */
int rgpu_rt_current_device(void);
void rgpu_rt_set_current_device(int dev);
/* Number of devices; fetched once. */
cudaError_t rgpu_rt_device_count(rgpu_client *c, int *count);
/* rgpu_client_hello_fn: asks for DRIVER_INFO and device 0's properties in
 * HELLO's round trip (the first device query then uses their replies). */
size_t rgpu_rt_device_prefetch(rgpu_client *c, void *ctx, uint64_t **seqs, rgpu_client_reply **rs);
/* Cached properties and attributes of a device (fetched once per device). */
typedef struct {
  int valid;
  struct cudaDeviceProp prop;
  int32_t attrs[RGPU_MAX_ATTRS];
  uint32_t nattrs;
  unsigned flags; /* cudaSetDeviceFlags */
  uint32_t epoch; /* bumped by cudaDeviceReset */
} rgpu_rt_device;
cudaError_t rgpu_rt_device_get(rgpu_client *c, int dev, rgpu_rt_device **out);
uint32_t rgpu_rt_device_epoch(int dev);

/* Logs, at error level, that the server refused a module (MODULE_LOAD
 * failed with CUresult code): the module is named by its first kernel
 * (nkernels in all) and reason is the reply's text, the driver's own words
 * (issue 14: the client said only CUDA_ERROR_INVALID_PTX).  Called once per
 * module and device: a refused module is not sent again. */
void rgpu_rt_report_module_refused(const char *first_kernel, size_t nkernels, int code,
                                   const char *reason);
/* The same line, formatted into buf (for tests). */
void rgpu_rt_format_module_refused(char *buf, size_t len, const char *first_kernel,
                                   size_t nkernels, int code, const char *reason);

/* ---- kernel images (rgpu_cudart_image.c, issue 15) ---------------------- */

/* Loads image[0..len) as module module_id on device dev: MODULE_LOAD with
 * the image cut to what the device runs and named by its SHA-256, so that
 * a server that has it cached needs no image at all (one round trip), and
 * one that has not gets it in a second one.  func_names/var_names: the
 * kernels and variables whose handles the reply reports.  r (may be NULL)
 * receives the reply as from rgpu_call_module_load (r->payload: its
 * fields).  Returns what rgpu_call_module_load returns; never
 * RGPU_STATUS_IMAGE_NOT_CACHED.  No cudart lock may be held (round trips).
 * The one way images go to the server: cudart's lazy module loading and
 * the driver facade's cuModuleLoadData. */
rgpu_status rgpu_rt_image_load(rgpu_client *c, int dev, uint64_t module_id, const void *image,
                               size_t len, const char *const *func_names, uint32_t nfuncs,
                               const char *const *var_names, uint32_t nvars,
                               rgpu_client_reply *r);
/* This process's counts for RGPU_STATS. */
void rgpu_rt_image_counters(uint64_t *images_sent, uint64_t *image_bytes_sent,
                            uint64_t *image_cache_hits);

/* ---- cudaDeviceProp from attributes (rgpu_cudart_props.c, pure) -------- */

void rgpu_cudart_build_props(struct cudaDeviceProp *p, const char *name, size_t name_len,
                             const uint8_t *uuid, size_t uuid_len, uint64_t total_mem,
                             const int32_t *attrs, uint32_t nattrs);
/* Sets to 0 the attributes of capabilities rgpu does not deliver (the table
 * in rgpu_cudart_props.c says which and why).  is_stubbed(fn) says whether
 * runtime function fn is a NotSupported stub; an attribute delivered by a
 * function that is not is left as the server reported it. */
void rgpu_cudart_mask_undelivered(int32_t *attrs, uint32_t nattrs,
                                  int (*is_stubbed)(const char *fn, void *ctx), void *ctx);
size_t rgpu_cudart_undelivered_count(void);
/* Row i of the table: the attribute (-1 past the end), its function (NULL:
 * never delivered) and the reason. */
int rgpu_cudart_undelivered_attr(size_t i, const char **delivered_by, const char **why);

/* ---- address ranges (rgpu_cudart_ranges.c, pure) ----------------------- */

typedef struct {
  uint64_t base;
  uint64_t size;
  int device;
  int kind;       /* RGPU_RANGE_* */
  unsigned flags; /* cudaHostAlloc flags for host ranges */
} rgpu_range;

/* VMM: a cuMemMap'ed range made accessible (driver/rgpu_drv_vmm.c): device
 * memory for copies and pointer queries, not cudaFree's. */
enum { RGPU_RANGE_DEVICE = 1, RGPU_RANGE_SYMBOL = 2, RGPU_RANGE_HOST = 3, RGPU_RANGE_VMM = 4 };

typedef struct {
  rgpu_mutex lock;
  rgpu_range *v; /* sorted by base, non-overlapping */
  size_t n, cap;
} rgpu_range_table;

void rgpu_range_table_init(rgpu_range_table *t);
void rgpu_range_table_free(rgpu_range_table *t);
/* 0, or -1 when it overlaps an existing range or memory runs out. */
int rgpu_range_add(rgpu_range_table *t, const rgpu_range *r);
/* Removes the range starting exactly at base; 0 and *out, or -1. */
int rgpu_range_remove(rgpu_range_table *t, uint64_t base, rgpu_range *out);
/* The range containing [p, p+len) entirely (len 0 counts as 1); 0 or -1. */
int rgpu_range_find(rgpu_range_table *t, uint64_t p, uint64_t len, rgpu_range *out);
/* Removes every range of a device (and kind, 0 = all kinds). */
void rgpu_range_remove_device(rgpu_range_table *t, int device, int kind);

rgpu_range_table *rgpu_rt_device_ranges(void);
rgpu_range_table *rgpu_rt_host_ranges(void);

/* ---- kernel parameters (rgpu_cudart_params.c, pure) -------------------- */

typedef struct {
  uint32_t nparams;
  uint32_t *offsets;
  uint32_t *sizes;
  uint32_t total; /* bytes of the packed buffer */
} rgpu_param_layout;

/* Packs args[i] (sizes[i] bytes each) at offsets[i] into buf (cap bytes,
 * zero-filled gaps).  Returns the packed size, or -1 if it does not fit or
 * an arg pointer is NULL. */
long rgpu_cudart_pack_params(const rgpu_param_layout *l, void **args, void *buf, size_t cap);
/* Computes l->total from offsets and sizes; -1 when a field overflows. */
int rgpu_cudart_layout_finish(rgpu_param_layout *l);
/* Parameter i's offset and size (each out optional): 0, or -1 when the
 * kernel has no parameter i (cudaFuncGetParamInfo, cuFuncGetParamInfo). */
int rgpu_cudart_layout_param(const rgpu_param_layout *l, size_t i, size_t *offset, size_t *size);

/* ---- streams and events (rgpu_cudart_stream.c) ------------------------- */

#define RGPU_STREAM_MAGIC 0x5354524du /* "STRM" */
#define RGPU_EVENT_MAGIC 0x45564e54u  /* "EVNT" */

struct CUstream_st {
  uint32_t magic;
  uint64_t id;
  int device;
  unsigned flags;
  int priority;
};
struct CUevent_st {
  uint32_t magic;
  uint64_t id;
  int device;
  unsigned flags;
};

/* The requests that wait for the server's streams (rgpu_rt_sync_call). */
typedef enum {
  RGPU_RT_SYNC_DEVICE,       /* CTX_SYNC (handle unused) */
  RGPU_RT_SYNC_STREAM,       /* STREAM_SYNC, handle = wire stream id */
  RGPU_RT_QUERY_STREAM,      /* STREAM_QUERY, handle = wire stream id */
  RGPU_RT_SYNC_EVENT,        /* EVENT_SYNC, handle = event id */
  RGPU_RT_QUERY_EVENT,       /* EVENT_QUERY, handle = event id */
} rgpu_rt_sync_kind;

/* A request that waits (stream/event/device synchronize, query): under one
 * client lock it binds device (< 0: leave it), sends the typed request,
 * waits for its reply and then reads the background D2H replies issued
 * before it on drain_stream (0 or RGPU_CLIENT_ALL_STREAMS: all), so their
 * data is in place when the synchronization returns.  The drain happens
 * only when the request succeeded.  Returns 0, a CUresult or < 0. */
rgpu_status rgpu_rt_sync_call(rgpu_client *c, int device, rgpu_rt_sync_kind kind,
                              uint64_t handle, uint64_t drain_stream);

/* (client lock) A request that enqueues device work and whose completion
 * the caller just waited for (a synchronous device-to-host copy) began at
 * sequence number first: if nothing else had left since the device's last
 * device-wide synchronization, the device is idle again, so the next
 * cudaDeviceSynchronize costs no round trip (issue 14: 2,000 synchronous
 * 64-byte D2H copies, then cudaDeviceSynchronize took 380 us on the H200,
 * natively 8 us).  ok: the request succeeded. */
void rgpu_rt_idle_after_wait_locked(rgpu_client *c, int device, uint64_t first, int ok);
/* (client lock) A synchronous operation on stream (its wire id) completed
 * with everything queued on it before (a D2H copy into pageable memory, a
 * stream synchronization): while no frame leaves, the stream is idle and
 * cudaStreamSynchronize/Query of it answer without a round trip.  ok = 0
 * forgets (a failure may have been a fault). */
void rgpu_rt_stream_idle_locked(rgpu_client *c, uint64_t stream, int ok);
/* (client lock) The same, for an operation that ended earlier, when the
 * next frame's number was next (rgpu_client_bulk_dtoh's *idle_next). */
void rgpu_rt_stream_idle_at_locked(rgpu_client *c, uint64_t stream, uint64_t next);

/* A new client-chosen handle id (nonzero, unique in the process). */
uint64_t rgpu_rt_new_handle_id(void);
/* Resolves a cudaStream_t to the wire id and its device.  per_thread: the
 * call came through a _ptsz/_ptds entry point, so 0 is the per-thread
 * default stream.  Errors: cudaErrorInvalidResourceHandle. */
cudaError_t rgpu_rt_stream_resolve(rgpu_client *c, cudaStream_t s, int per_thread,
                                   uint64_t *wire, int *device);
/* Whether s names the legacy NULL stream: 0 from an entry point without
 * _ptsz/_ptds (per_thread 0), or cudaStreamLegacy. */
static inline int rgpu_rt_is_legacy_stream(cudaStream_t s, int per_thread) {
  return (s == NULL && !per_thread) || s == cudaStreamLegacy;
}

/* ---- host callbacks (rgpu_cudart_callbacks.c) ------------------------- */

/* 1 on the thread that runs host callbacks, while it runs one. */
int rgpu_rt_in_host_callback(void);
/* Stops the callback thread (at exit, before the client closes). */
void rgpu_rt_callbacks_stop(void);

/* ---- modules and kernels (rgpu_cudart_register.c) ---------------------- */

typedef struct rgpu_rt_func rgpu_rt_func;
/* Finds the function of a host stub (cudaLaunchKernel(func)). */
rgpu_rt_func *rgpu_rt_func_by_stub(const void *host_stub);
/* Launch through a function handle with the runtime's checks. */
cudaError_t rgpu_rt_launch(rgpu_rt_func *f, dim3 grid, dim3 block, void **args, size_t shmem,
                           cudaStream_t stream, int per_thread);
/* Device address and size of a registered variable on the current device
 * (loads the module there if needed). */
cudaError_t rgpu_rt_symbol(rgpu_client *c, const void *symbol, uint64_t *dptr, size_t *size);
/* Drops everything loaded on a device (after cudaDeviceReset). */
void rgpu_rt_modules_forget_device(int dev);
/* What the driver facade needs to use a registered kernel as a CUfunction
 * (cudaGetFuncBySymbol, a cudaKernel_t passed to cuLaunchKernel): f's
 * module loaded on dev, its server id and f's device name, with the
 * attributes cudaFuncSetAttribute recorded queued ahead (the driver
 * launch that follows needs them on the server).  No cudart lock held;
 * errors returned, not recorded. */
cudaError_t rgpu_rt_func_server_ref(rgpu_client *c, rgpu_rt_func *f, int dev, uint64_t *module_id,
                                    const char **name);
/* The device (mangled) name f was registered with. */
const char *rgpu_rt_func_name(const rgpu_rt_func *f);
/* cudaFuncAttributeMaxDynamicSharedMemorySize as recorded (-1: unset). */
int rgpu_rt_func_max_dyn_shmem(const rgpu_rt_func *f);
/* p itself when it is a function record (a cudaKernel_t from
 * cudaGetKernel), NULL for anything else, host stubs included: a lookup,
 * p is never read. */
rgpu_rt_func *rgpu_rt_func_record(const void *p);
/* The driver set an attribute of the CUfunction cudaGetFuncBySymbol gave
 * (cuFuncSetAttribute): the runtime's launches of f follow it.  attr is a
 * CUfunction_attribute; only the two the runtime records are kept. */
void rgpu_rt_func_note_attr(rgpu_rt_func *f, int attr, int value);

/* One DEVICE_QUERY (proto/rgpu_device_query.h) to the server of c (the
 * caller routes) that binds bind_dev first (-1: leaves the session's
 * device as it is) and expects exactly nvalues answers into values (a
 * malformed answer is CUDA_ERROR_UNKNOWN).  No cudart lock may be held
 * (rgpu_cudart_device.c). */
rgpu_status rgpu_rt_device_query(rgpu_client *c, int bind_dev, const rgpu_msg_device_query_req *q,
                                 uint64_t *values, uint32_t nvalues);
/* Launch attributes that only hint (an L2 access policy window, priority,
 * synchronization policy, memory-sync domains, programmatic stream
 * serialization, carveout and cluster preferences): they change no
 * result, so a launch or a kernel node accepts them and sends none
 * (rgpu_cudart_launch_ex.c). */
int rgpu_rt_launch_attr_is_hint(cudaLaunchAttributeID id);

/* Hands the CUDA error log's new messages to the program's callbacks
 * (cudaLogsRegisterCallback), when no rgpu lock is held and none is being
 * delivered on this thread; nothing otherwise (rgpu_cudart_logs.c). */
void rgpu_rt_logs_deliver(void);

/* ---- a library's kernel in runtime calls (rgpu_cudart_library.c) ------- */

/* 1 when func is no registered kernel but a driver object a runtime call
 * takes as a kernel: a cudaKernel_t of cudaLibraryGetKernel (or a
 * CUfunction cast to it).  The calls below do what the runtime call does,
 * through the driver facade, and return the error recorded. */
int rgpu_rt_is_driver_function(const void *func);
cudaError_t rgpu_rt_driver_launch(const void *func, dim3 grid, dim3 block, void **args,
                                  size_t shmem, cudaStream_t stream, int per_thread,
                                  int cooperative, const unsigned cluster[3]);
cudaError_t rgpu_rt_driver_func_attributes(struct cudaFuncAttributes *attr, const void *func);
cudaError_t rgpu_rt_driver_func_set_attribute(const void *func, enum cudaFuncAttribute attr,
                                              int value);
cudaError_t rgpu_rt_driver_func_name(const char **name, const void *func);
cudaError_t rgpu_rt_driver_func_param_info(const void *func, size_t index, size_t *offset,
                                           size_t *size);
cudaError_t rgpu_rt_driver_occupancy(int *numBlocks, const void *func, int blockSize,
                                     size_t smem, unsigned flags);
/* cudaOccupancyMaxActiveClusters (active 1) or MaxPotentialClusterSize. */
cudaError_t rgpu_rt_driver_cluster_occupancy(int *out, const void *func,
                                             const cudaLaunchConfig_t *cfg, int active);

/* ---- memory (rgpu_cudart_memory.c) ------------------------------------- */

/* The cudaMalloc arena (rgpu_cudart_arena.h): a CTX_SYNC issued at seq on
 * dev completed (freed arena blocks before it may be reused); bytes the
 * arena holds but has not handed out (cudaMemGetInfo counts them free);
 * forget dev's arena (after cudaDeviceReset). */
void rgpu_rt_arena_synced(int dev, uint64_t seq);
uint64_t rgpu_rt_arena_unused(int dev);
void rgpu_rt_arena_forget_device(int dev);

/* Several servers (issue 19): memory of mem_dev used by a copy or memset on
 * a stream of stream_dev, another server's.  That server cannot order work
 * on this one, so the client waits for the stream now (a round trip) and
 * sets *wire to 0: the work runs on mem_dev's legacy stream, which later
 * work of this kind on any stream again follows.  With one server, a
 * capturing stream, or both on one server: nothing.  Returns the error,
 * recorded. */
cudaError_t rgpu_rt_foreign_stream(int mem_dev, int stream_dev, uint64_t *wire);

/* The copy engine shared by memcpy and symbol copies. dst/src are device
 * addresses or host pointers according to kind (already resolved, never
 * cudaMemcpyDefault). */
/* Managed memory (rgpu_cudart_managed.c).  to_device: before device work
 * on stream (a wire id) is sent, the host-owned managed allocations it may
 * use are copied to their devices and waited for.  to_host: after a
 * synchronization of stream (any_stream: device-wide, or one whose stream
 * is not known), the device-owned ones it concerns are copied back once
 * nothing can still write them (device_synced: a device the caller just
 * synchronized as a whole, or -1).  Both return at once while
 * nothing is to move.  managed_free: cudaFree of a managed pointer (1 and
 * *err), or 0 when p is not managed.  managed_find: whether p lies in a
 * managed allocation (its device in *dev). */
cudaError_t rgpu_rt_managed_to_device(rgpu_client *c, uint64_t stream);
cudaError_t rgpu_rt_managed_to_host(rgpu_client *c, uint64_t stream, int any_stream,
                                    int device_synced);
int rgpu_rt_managed_free(rgpu_client *c, void *p, cudaError_t *err);
int rgpu_rt_managed_find(uint64_t p, int *dev);
/* After cudaDeviceReset of dev: its managed allocations, arrays and
 * texture/surface objects are gone on the server; their records and host
 * mappings go too (a stale pointer or cudaArray_t is then refused). */
void rgpu_rt_managed_forget_device(int dev);
void rgpu_rt_arrays_forget_device(int dev);
/* Graph memory nodes (rgpu_cudart_graph_mem.c).  is: ptr is a block a graph
 * allocated.  capture_alloc / capture_free: cudaMallocAsync / cudaFreeAsync
 * inside a capture of stream wire.  user_free: cudaFree / cudaFreeAsync of
 * a graph block outside a graph (1 when it was one).  launched: a launch
 * left block ptr allocated for the program.  ref / unref: a node's hold.
 * collect: frees blocks whose last reference went (no lock held).
 * forget_device: after a reset. */
int rgpu_rt_graphmem_is(uint64_t ptr);
cudaError_t rgpu_rt_graphmem_capture_alloc(rgpu_client *c, uint64_t wire, int dev, size_t size,
                                           void **out);
cudaError_t rgpu_rt_graphmem_capture_free(uint64_t wire, uint64_t ptr);
int rgpu_rt_graphmem_user_free(uint64_t ptr);
void rgpu_rt_graphmem_launched(uint64_t ptr);
void rgpu_rt_graphmem_ref(uint64_t ptr);
void rgpu_rt_graphmem_unref(uint64_t ptr);
void rgpu_rt_graphmem_collect(void);
void rgpu_rt_graphmem_forget_device(int dev);
/* After cudaDeviceReset of dev: its context limits are the driver's
 * defaults again (rgpu_cudart_device.c). */
void rgpu_rt_limits_forget_device(int dev);
/* cudaMemcpy3D(Async) with a CUDA array on either side (rgpu_cudart_array.c). */
cudaError_t rgpu_rt_memcpy3d_array(const struct cudaMemcpy3DParms *p, cudaStream_t stream,
                                   int per_thread, int async);
/* A graph memcpy node with a CUDA array on either side (and device memory
 * or an array on the other): checks it as cudaMemcpy3D would and, with req,
 * appends the ARRAY_COPY request the server runs for it, its stream field
 * (the first, 8 bytes) 0.  cudaErrorNotSupported for a host side.  Errors
 * returned, not recorded (rgpu_cudart_array.c). */
cudaError_t rgpu_rt_array_copy_node(const struct cudaMemcpy3DParms *p, rgpu_buf *req);
cudaError_t rgpu_rt_memcpy(rgpu_client *c, uint64_t dst, uint64_t src, size_t n,
                           enum cudaMemcpyKind kind, uint64_t stream, int device, int async);
/* cudaMemcpy(Async) in two steps, so that a batch (rgpu_cudart_batch.c)
 * checks every copy before it sends any.  copy_check: resolves *kind
 * (cudaMemcpyDefault from the pointers) and checks the pointers against
 * the known allocations; *device is the device whose memory the copy
 * touches.  Errors returned, not recorded.  copy_issue: sends (or
 * captures) a checked copy of count > 0 bytes on stream wire of device
 * sdev (rgpu_rt_stream_resolve's answers), also between devices of two
 * servers.  src_transient: the source may change as soon as the call
 * returns (cudaMemcpySrcAccessOrderDuringApiCall), so its bytes are never
 * kept by reference (rgpu_cudart_op.h).  Errors recorded. */
cudaError_t rgpu_rt_copy_check(const void *dst, const void *src, size_t n,
                               enum cudaMemcpyKind *kind, int *device);
cudaError_t rgpu_rt_copy_issue(rgpu_client *c, void *dst, const void *src, size_t count,
                               enum cudaMemcpyKind kind, int dev, uint64_t wire, int sdev,
                               int async, int src_transient);
/* cudaMemcpy3DAsync (its checks included, errors recorded), with
 * src_transient as above. */
cudaError_t rgpu_rt_memcpy3d_async(const struct cudaMemcpy3DParms *p, cudaStream_t stream,
                                   int per_thread, int src_transient);
/* cudaMemPrefetchAsync in two steps (rgpu_cudart_managed.c), for the
 * prefetch batches.  check: [p, p + count) lies in one managed allocation
 * and loc is a place a prefetch can name (cudaErrorInvalidValue, or
 * cudaErrorInvalidDevice for a device that does not exist).  prefetch:
 * records it for cudaMemRangeGetAttribute and moves the managed memory
 * there now.  managed_range_check: only the range.  Errors returned, not
 * recorded. */
cudaError_t rgpu_rt_prefetch_check(rgpu_client *c, const void *p, size_t count,
                                   struct cudaMemLocation loc);
cudaError_t rgpu_rt_prefetch(rgpu_client *c, const void *p, size_t count,
                             struct cudaMemLocation loc);
cudaError_t rgpu_rt_managed_range_check(const void *p, size_t count);

#endif
