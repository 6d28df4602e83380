/* rgpu_session: the per-session tables of rgpu-server's worker.
 *
 * A client names every resource (streams, events, modules) with its own u64
 * ids and hands device pointers back that the server gave it.  Nothing the
 * client sends is trusted: every pointer and size is checked against the
 * allocations of *this* session before any driver call, so one session can
 * never read, write or free another session's memory even where the driver
 * shares an address space (softgpu, or two contexts on one GPU).
 *
 * These are pure data structures with no driver dependency, so they are unit
 * tested and fuzzed on their own.  Driver handles are stored as void *. */
#ifndef RGPU_SESSION_H
#define RGPU_SESSION_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  RGPU_ALLOC_MALLOC = 1,        /* MEM_ALLOC: the client may free it */
  RGPU_ALLOC_MODULE_GLOBAL = 2, /* a module's __device__/__constant__ variable */
  /* A cuMemMap'ed range made accessible (rgpu_handlers_vmm.c): copies may
   * name it; its physical memory is counted there, not here. */
  RGPU_ALLOC_VMM = 3
} rgpu_alloc_kind;

typedef struct {
  uint64_t dptr;
  uint64_t size;
  rgpu_alloc_kind kind;
  int device;
  uint64_t module_id; /* owning module for module globals, else 0 */
} rgpu_alloc;

/* Sorted by dptr, non-overlapping, so lookups are binary searches. */
typedef struct {
  rgpu_alloc *v;
  size_t n, cap;
  uint64_t malloc_bytes; /* sum of RGPU_ALLOC_MALLOC sizes */
  /* Sum of RGPU_ALLOC_MODULE_GLOBAL sizes: __device__ variables hold device
   * memory too; the quota measures malloc_bytes + module_bytes. */
  uint64_t module_bytes;
  /* Advanced by every removal (and by free): a check that ranges lie in
   * the table stays true while it has not moved (adding never breaks one),
   * so a graph launch need not check its nodes again (rgpu_graph.c). */
  uint64_t removals;
} rgpu_alloc_table;

enum {
  RGPU_SESS_OK = 0,
  RGPU_SESS_EEXIST = -1,  /* id already in use / range overlaps an allocation */
  RGPU_SESS_ENOENT = -2,  /* no such id / allocation */
  RGPU_SESS_EINVAL = -3,  /* id 0, size 0, or a range that wraps around */
  RGPU_SESS_ENOMEM = -4
};

void rgpu_alloc_table_init(rgpu_alloc_table *t);
void rgpu_alloc_table_free(rgpu_alloc_table *t);
/* Adds [dptr, dptr+size).  Fails with EEXIST if it overlaps an entry. */
int rgpu_alloc_table_add(rgpu_alloc_table *t, uint64_t dptr, uint64_t size,
                         rgpu_alloc_kind kind, int device, uint64_t module_id);
/* The allocation that starts exactly at dptr, or NULL. */
const rgpu_alloc *rgpu_alloc_table_find(const rgpu_alloc_table *t, uint64_t dptr);
/* The allocation that holds all of [ptr, ptr+len), or NULL if the range is
 * not entirely inside one allocation (len 0 asks for ptr itself). */
const rgpu_alloc *rgpu_alloc_table_lookup(const rgpu_alloc_table *t, uint64_t ptr, uint64_t len);
/* Removes the allocation starting exactly at dptr (copied to *out if given). */
int rgpu_alloc_table_remove(rgpu_alloc_table *t, uint64_t dptr, rgpu_alloc *out);
/* Removes every entry of a device (device >= 0) or of a module (module_id
 * != 0), calling fn on each removed entry first.  Pass -1 / 0 to ignore a
 * criterion; with both ignored it removes everything. */
void rgpu_alloc_table_remove_matching(rgpu_alloc_table *t, int device, uint64_t module_id,
                                      void (*fn)(void *ctx, const rgpu_alloc *a), void *ctx);

/* Client-named handles: id -> driver handle (+ the device it belongs to). */
typedef struct {
  uint64_t id;
  void *ptr;
  int device;
} rgpu_handle_entry;

typedef struct {
  rgpu_handle_entry *v; /* sorted by id */
  size_t n, cap;
  uint64_t removals; /* advanced by every removal and by free, as above */
} rgpu_handle_map;

void rgpu_handle_map_init(rgpu_handle_map *m);
void rgpu_handle_map_free(rgpu_handle_map *m);
/* id 0 -> EINVAL (0 means "default" on the wire); reused id -> EEXIST. */
int rgpu_handle_map_put(rgpu_handle_map *m, uint64_t id, void *ptr, int device);
/* Returns the entry or NULL. */
const rgpu_handle_entry *rgpu_handle_map_get(const rgpu_handle_map *m, uint64_t id);
int rgpu_handle_map_remove(rgpu_handle_map *m, uint64_t id, rgpu_handle_entry *out);
/* Removes every entry of device (or all with device < 0), calling fn first. */
void rgpu_handle_map_remove_matching(rgpu_handle_map *m, int device,
                                     void (*fn)(void *ctx, const rgpu_handle_entry *e),
                                     void *ctx);

/* A loaded module: the functions the client asked for, by index, and their
 * parameter layouts (offsets/sizes flattened; param_first[i] indexes them). */
typedef struct {
  void *module;        /* CUmodule */
  uint32_t nfuncs;
  void **funcs;        /* CUfunction, NULL where lookup failed */
  uint32_t *nparams;
  uint32_t *param_first;
  uint32_t nparams_total;
  uint32_t *param_offsets;
  uint32_t *param_sizes;
  int params_known;    /* 0: the driver could not say (no cuFuncGetParamInfo) */
} rgpu_module_rec;

/* Allocates a record for nfuncs functions and nparams_total parameters
 * (zeroed); free with rgpu_module_rec_free. */
rgpu_module_rec *rgpu_module_rec_new(uint32_t nfuncs, uint32_t nparams_total);
void rgpu_module_rec_free(rgpu_module_rec *m);
/* Bytes the packed parameter buffer of function fi must have: the end of
 * its last parameter (max offset+size), 0 for no parameters. */
uint64_t rgpu_module_rec_param_extent(const rgpu_module_rec *m, uint32_t fi);
/* Appends function f with its nparams parameters (offsets/sizes) to m's
 * table, for a driver-API module whose functions are named one at a time
 * (MODULE_GET_FUNCTION); a function already in the table keeps its index.
 * Returns 0 with *index, or -1 (out of memory, or the table is full). */
int rgpu_module_rec_add_func(rgpu_module_rec *m, void *f, uint32_t nparams,
                             const uint32_t *offsets, const uint32_t *sizes, uint32_t *index);

#ifdef __cplusplus
}
#endif
#endif
