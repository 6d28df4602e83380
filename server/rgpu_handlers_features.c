/* Handlers for the function attributes, occupancy and cooperative launches
 * (FUNC_SET_ATTR, OCCUPANCY, LAUNCH_EX; proto/rgpu_messages.def), and the
 * driver's answers to DEVICE_QUERY.
 *
 * Apart from rgpu_handlers.c so that the session-lifetime work there and
 * these runtime features change independently.  The contract is
 * server/rgpu_req.h's: every id is checked against the session's tables
 * before the driver sees it. */
#include <stdlib.h>
#include <string.h>

#include "rgpu_device_query.h"
#include "rgpu_dispatch.h"
#include "rgpu_log.h"
#include "rgpu_worker_internal.h"

#define D (&w->drv)
#define FAIL(status, ...) rgpu_worker_fail(w, (status), __VA_ARGS__)

/* The most parameters a launch names (the limit rgpu_h_launch has). */
enum { COOP_MAX_PARAMS = 8192 };

static CUresult lookup_func(rgpu_worker *w, uint64_t module_id, uint32_t fi,
                            rgpu_module_rec **mrec, CUfunction *f) {
  const rgpu_handle_entry *e = rgpu_handle_map_get(&w->modules, module_id);
  if (!e) return FAIL(CUDA_ERROR_INVALID_HANDLE, "unknown module id %llu", (unsigned long long)module_id);
  rgpu_module_rec *m = e->ptr;
  if (fi >= m->nfuncs || !m->funcs[fi])
    return FAIL(fi >= m->nfuncs ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_NOT_FOUND,
                "module %llu has no function index %u", (unsigned long long)module_id, fi);
  *mrec = m;
  *f = (CUfunction)m->funcs[fi];
  return CUDA_SUCCESS;
}

CUresult rgpu_h_func_set_attr(rgpu_req *rq, const rgpu_msg_func_set_attr_req *q) {
  rgpu_worker *w = rq->w;
  rgpu_module_rec *m;
  CUfunction f;
  CUresult r = lookup_func(w, q->module_id, q->func_index, &m, &f);
  if (r) return r;
  /* Only what a program may set; the rest are read-only. */
  switch (q->attr) {
  case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
  case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
  case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
  case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
  case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
  case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
  case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: break;
  default: return FAIL(CUDA_ERROR_INVALID_VALUE, "function attribute %d cannot be set", q->attr);
  }
  if (!D->cuFuncSetAttribute)
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "the driver has no cuFuncSetAttribute");
  r = D->cuFuncSetAttribute(f, (CUfunction_attribute)q->attr, q->value);
  if (r != CUDA_SUCCESS)
    return FAIL(r, "cuFuncSetAttribute(%d, %d): %s", q->attr, q->value,
                rgpu_driver_error_name(D, r));
  return CUDA_SUCCESS;
}

CUresult rgpu_h_launch_ex(rgpu_req *rq, const rgpu_msg_launch_ex_req *q) {
  rgpu_worker *w = rq->w;
  rgpu_module_rec *m;
  CUfunction f;
  CUresult r = lookup_func(w, q->module_id, q->func_index, &m, &f);
  if (r) return r;
  CUstream s = NULL;
  if (q->stream) {
    const rgpu_handle_entry *e = rgpu_handle_map_get(&w->streams, q->stream);
    if (!e) return FAIL(CUDA_ERROR_INVALID_HANDLE, "unknown stream id %llu", (unsigned long long)q->stream);
    s = (CUstream)e->ptr;
  }
  int cluster = q->cluster_x > 1 || q->cluster_y > 1 || q->cluster_z > 1;
  if (cluster ? !D->cuLaunchKernelEx : !q->cooperative || !D->cuLaunchCooperativeKernel)
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "the driver cannot launch %s",
                cluster ? "thread block clusters" : "cooperative kernels");
  /* Neither cuLaunchCooperativeKernel nor the cluster path takes the
   * packed `extra` form here, so the parameter layout must be known. */
  if (!m->params_known)
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "launch: no parameter layout for the kernel");
  size_t plen = q->params.len;
  uint64_t extent = rgpu_module_rec_param_extent(m, q->func_index);
  uint32_t np = m->nparams[q->func_index];
  if (plen != extent)
    return FAIL(CUDA_ERROR_INVALID_VALUE,
                "launch: %zu bytes of parameters sent, the kernel's %u parameters take %llu",
                plen, np, (unsigned long long)extent);
  if (np > COOP_MAX_PARAMS)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "launch: %u parameters", np);
  if ((r = rgpu_worker_copy_params(w, q->params.data, plen))) return r;
  void *kp[COOP_MAX_PARAMS];
  for (uint32_t k = 0; k < np; k++)
    kp[k] = (unsigned char *)w->param_buf + m->param_offsets[m->param_first[q->func_index] + k];
  if (!cluster) {
    r = D->cuLaunchCooperativeKernel(f, q->grid_x, q->grid_y, q->grid_z, q->block_x, q->block_y,
                                     q->block_z, q->shared_bytes, s, np ? kp : NULL);
    if (r != CUDA_SUCCESS)
      return FAIL(r, "cuLaunchCooperativeKernel: %s", rgpu_driver_error_name(D, r));
    return CUDA_SUCCESS;
  }
  CUlaunchAttribute attrs[2];
  memset(attrs, 0, sizeof attrs);
  attrs[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attrs[0].value.clusterDim.x = q->cluster_x ? q->cluster_x : 1;
  attrs[0].value.clusterDim.y = q->cluster_y ? q->cluster_y : 1;
  attrs[0].value.clusterDim.z = q->cluster_z ? q->cluster_z : 1;
  attrs[1].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  attrs[1].value.cooperative = 1;
  CUlaunchConfig cfg = {.gridDimX = q->grid_x, .gridDimY = q->grid_y, .gridDimZ = q->grid_z,
                        .blockDimX = q->block_x, .blockDimY = q->block_y, .blockDimZ = q->block_z,
                        .sharedMemBytes = q->shared_bytes, .hStream = s, .attrs = attrs,
                        .numAttrs = q->cooperative ? 2u : 1u};
  r = D->cuLaunchKernelEx(&cfg, f, np ? kp : NULL, NULL);
  if (r != CUDA_SUCCESS) return FAIL(r, "cuLaunchKernelEx: %s", rgpu_driver_error_name(D, r));
  return CUDA_SUCCESS;
}

CUresult rgpu_h_occupancy(rgpu_req *rq, const rgpu_msg_occupancy_req *q) {
  rgpu_worker *w = rq->w;
  rgpu_module_rec *m;
  CUfunction f;
  CUresult r = lookup_func(w, q->module_id, q->func_index, &m, &f);
  if (r) return r;
  if (!D->cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags)
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "the driver has no occupancy calculator");
  int n = 0;
  r = D->cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, f, q->block_size, (size_t)q->dyn_smem,
                                                              q->flags);
  if (r != CUDA_SUCCESS)
    return FAIL(r, "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags: %s", rgpu_driver_error_name(D, r));
  rgpu_msg_occupancy_rep rep = {.num_blocks = n};
  rgpu_msg_occupancy_rep_encode(rq->rep, &rep);
  return CUDA_SUCCESS;
}

/* STREAM_ATTR: the driver's own stream attributes, checks and answers. */
CUresult rgpu_h_stream_attr(rgpu_req *rq, const rgpu_msg_stream_attr_req *q) {
  rgpu_worker *w = rq->w;
  if (!D->cuStreamGetAttribute || !D->cuStreamSetAttribute || !D->cuStreamCopyAttributes)
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "the server's CUDA driver has no stream attributes");
  CUstream s = NULL;
  CUresult r = rgpu_worker_stream_get(w, q->stream, &s);
  if (r) return r;
  CUstreamAttrValue v;
  memset(&v, 0, sizeof v);
  switch (q->op) {
  case 0: break;
  case 1:
    if (q->value.len != sizeof v)
      return FAIL(CUDA_ERROR_INVALID_VALUE, "stream attribute value of %zu bytes (%zu)",
                  q->value.len, sizeof v);
    memcpy(&v, q->value.data, sizeof v);
    r = D->cuStreamSetAttribute(s, (CUstreamAttrID)q->attr, &v);
    break;
  case 2: {
    CUstream src = NULL;
    if ((r = rgpu_worker_stream_get(w, q->src, &src))) return r;
    r = D->cuStreamCopyAttributes(s, src);
    break;
  }
  default: return FAIL(CUDA_ERROR_INVALID_VALUE, "STREAM_ATTR op %u", q->op);
  }
  if (r != CUDA_SUCCESS)
    return FAIL(r, "cuStream%s: %s", q->op == 1 ? "SetAttribute" : "CopyAttributes",
                rgpu_driver_error_name(D, r));
  /* Every op answers with attribute attr as the driver now reports it. */
  memset(&v, 0, sizeof v);
  if ((r = D->cuStreamGetAttribute(s, (CUstreamAttrID)q->attr, &v)) != CUDA_SUCCESS)
    return FAIL(r, "cuStreamGetAttribute: %s", rgpu_driver_error_name(D, r));
  rgpu_msg_stream_attr_rep rep = {.value = {&v, sizeof v}};
  rgpu_msg_stream_attr_rep_encode(rq->rep, &rep);
  return CUDA_SUCCESS;
}

/* CTX_LIMIT: the driver's own context limits (heap, stack, printf FIFO...). */
CUresult rgpu_h_ctx_limit(rgpu_req *rq, const rgpu_msg_ctx_limit_req *q) {
  rgpu_worker *w = rq->w;
  if (!D->cuCtxGetLimit || !D->cuCtxSetLimit)
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "the server's CUDA driver has no context limits");
  CUresult r = CUDA_SUCCESS;
  /* The device heap and the printf FIFO are device memory the driver
   * reserves: under a quota they must fit beside what the session holds. */
  if (q->set && w->cfg.mem_quota &&
      (q->limit == CU_LIMIT_MALLOC_HEAP_SIZE || q->limit == CU_LIMIT_PRINTF_FIFO_SIZE)) {
    uint64_t held = rgpu_worker_held_bytes(w);
    if (q->value > w->cfg.mem_quota || held > w->cfg.mem_quota - q->value)
      return FAIL(CUDA_ERROR_OUT_OF_MEMORY,
                  "session memory quota exceeded: a %s of %llu bytes beside %llu in use, quota %llu",
                  q->limit == CU_LIMIT_MALLOC_HEAP_SIZE ? "device heap" : "printf FIFO",
                  (unsigned long long)q->value, (unsigned long long)held,
                  (unsigned long long)w->cfg.mem_quota);
  }
  if (q->set && (r = D->cuCtxSetLimit((CUlimit)q->limit, (size_t)q->value)) != CUDA_SUCCESS)
    return FAIL(r, "cuCtxSetLimit(%u, %llu): %s", q->limit, (unsigned long long)q->value,
                rgpu_driver_error_name(D, r));
  size_t v = 0;
  if ((r = D->cuCtxGetLimit(&v, (CUlimit)q->limit)) != CUDA_SUCCESS)
    return FAIL(r, "cuCtxGetLimit(%u): %s", q->limit, rgpu_driver_error_name(D, r));
  rgpu_msg_ctx_limit_rep rep = {.value = v};
  rgpu_msg_ctx_limit_rep_encode(rq->rep, &rep);
  return CUDA_SUCCESS;
}

/* ---- DEVICE_QUERY ----------------------------------------------------------- */

/* The driver's device of session device dev (the session's numbering,
 * --devices), or CUDA_ERROR_INVALID_DEVICE. */
static CUresult query_device(rgpu_worker *w, uint32_t dev, CUdevice *out) {
  if (dev >= (uint32_t)w->device_count)
    return FAIL(CUDA_ERROR_INVALID_DEVICE, "device query: device %u does not exist (%d device%s)",
                dev, w->device_count, w->device_count == 1 ? "" : "s");
  CUresult r = D->cuDeviceGet(out, rgpu_worker_ordinal(w, (int)dev));
  if (r != CUDA_SUCCESS) return FAIL(r, "cuDeviceGet(%u): %s", dev, rgpu_driver_error_name(D, r));
  return CUDA_SUCCESS;
}

static CUresult query_unsupported(rgpu_worker *w, const char *fn) {
  return FAIL(CUDA_ERROR_NOT_SUPPORTED, "the server's CUDA driver has no %s", fn);
}

/* cuDevice{Host,P2P}AtomicCapabilities: one capability mask per operation.
 * The operations go to the driver as they came (it refuses the invalid
 * ones); an empty list is refused here, as the driver documents. */
static CUresult atomic_caps(rgpu_worker *w, const rgpu_msg_device_query_req *q, int p2p,
                            uint64_t *values) {
  if (p2p ? !D->cuDeviceGetP2PAtomicCapabilities : !D->cuDeviceGetHostAtomicCapabilities)
    return query_unsupported(w, p2p ? "cuDeviceGetP2PAtomicCapabilities"
                                    : "cuDeviceGetHostAtomicCapabilities");
  uint32_t n = q->args.count;
  if (n == 0) return FAIL(CUDA_ERROR_INVALID_VALUE, "atomic capabilities of no operation");
  CUdevice dev, peer = 0;
  CUresult r = query_device(w, q->device, &dev);
  if (!r && p2p) r = query_device(w, q->peer, &peer);
  if (r) return r;
  CUatomicOperation ops[RGPU_DQ_MAX_ARGS];
  unsigned int caps[RGPU_DQ_MAX_ARGS];
  for (uint32_t i = 0; i < n; i++) {
    ops[i] = (CUatomicOperation)rgpu_array_u32(&q->args, i);
    caps[i] = 0;
  }
  r = p2p ? D->cuDeviceGetP2PAtomicCapabilities(caps, ops, n, dev, peer)
          : D->cuDeviceGetHostAtomicCapabilities(caps, ops, n, dev);
  if (r != CUDA_SUCCESS)
    return FAIL(r, "cuDevice%sAtomicCapabilities: %s", p2p ? "P2P" : "Host",
                rgpu_driver_error_name(D, r));
  for (uint32_t i = 0; i < n; i++) values[i] = caps[i];
  return CUDA_SUCCESS;
}

/* cuOccupancyMaxActiveClusters / cuOccupancyMaxPotentialClusterSize of a
 * function of a loaded module, in the context of the module's device (the
 * client binds it; a module of another device is refused rather than given
 * to the driver with the wrong context current). */
static CUresult cluster_query(rgpu_worker *w, const rgpu_msg_device_query_req *q, int potential,
                              uint64_t *value) {
  if (potential ? !D->cuOccupancyMaxPotentialClusterSize : !D->cuOccupancyMaxActiveClusters)
    return query_unsupported(w, potential ? "cuOccupancyMaxPotentialClusterSize"
                                          : "cuOccupancyMaxActiveClusters");
  if (q->args.count != RGPU_DQ_CFG_COUNT)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "cluster occupancy: %u launch values, expected %d",
                q->args.count, (int)RGPU_DQ_CFG_COUNT);
  rgpu_module_rec *m;
  CUfunction f;
  CUresult r = lookup_func(w, q->module_id, q->func_index, &m, &f);
  if (r) return r;
  if ((r = rgpu_worker_ensure_ctx(w))) return r;
  const rgpu_handle_entry *e = rgpu_handle_map_get(&w->modules, q->module_id);
  if (e->device != w->cur_dev)
    return FAIL(CUDA_ERROR_INVALID_HANDLE, "module %llu is device %d's, the current device is %d",
                (unsigned long long)q->module_id, e->device, w->cur_dev);
  uint32_t a[RGPU_DQ_CFG_COUNT];
  for (uint32_t i = 0; i < RGPU_DQ_CFG_COUNT; i++) a[i] = rgpu_array_u32(&q->args, i);
  CUlaunchAttribute attrs[2];
  memset(attrs, 0, sizeof attrs);
  unsigned nattrs = 0;
  if (a[RGPU_DQ_CFG_CLUSTER_X] || a[RGPU_DQ_CFG_CLUSTER_Y] || a[RGPU_DQ_CFG_CLUSTER_Z]) {
    attrs[nattrs].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attrs[nattrs].value.clusterDim.x = a[RGPU_DQ_CFG_CLUSTER_X];
    attrs[nattrs].value.clusterDim.y = a[RGPU_DQ_CFG_CLUSTER_Y];
    attrs[nattrs].value.clusterDim.z = a[RGPU_DQ_CFG_CLUSTER_Z];
    nattrs++;
  }
  if (a[RGPU_DQ_CFG_POLICY]) {
    attrs[nattrs].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
    attrs[nattrs].value.clusterSchedulingPolicyPreference =
        (CUclusterSchedulingPolicy)a[RGPU_DQ_CFG_POLICY];
    nattrs++;
  }
  CUlaunchConfig cfg = {.gridDimX = a[RGPU_DQ_CFG_GRID_X], .gridDimY = a[RGPU_DQ_CFG_GRID_Y],
                        .gridDimZ = a[RGPU_DQ_CFG_GRID_Z], .blockDimX = a[RGPU_DQ_CFG_BLOCK_X],
                        .blockDimY = a[RGPU_DQ_CFG_BLOCK_Y], .blockDimZ = a[RGPU_DQ_CFG_BLOCK_Z],
                        .sharedMemBytes = a[RGPU_DQ_CFG_SHARED_BYTES], .hStream = NULL,
                        .attrs = nattrs ? attrs : NULL, .numAttrs = nattrs};
  int n = 0;
  r = potential ? D->cuOccupancyMaxPotentialClusterSize(&n, f, &cfg)
                : D->cuOccupancyMaxActiveClusters(&n, f, &cfg);
  if (r != CUDA_SUCCESS)
    return FAIL(r, "cuOccupancy%s: %s", potential ? "MaxPotentialClusterSize" : "MaxActiveClusters",
                rgpu_driver_error_name(D, r));
  *value = (uint64_t)(n < 0 ? 0 : n);
  return CUDA_SUCCESS;
}

CUresult rgpu_h_device_query(rgpu_req *rq, const rgpu_msg_device_query_req *q) {
  rgpu_worker *w = rq->w;
  CUresult r = rgpu_worker_ensure_driver(w);
  if (r) return r;
  /* The decoder holds args to the message's limit; the arrays below too. */
  if (q->args.count > RGPU_DQ_MAX_ARGS)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "device query: %u args", q->args.count);
  uint64_t values[RGPU_DQ_MAX_ARGS];
  uint32_t nvalues = 0;
  switch (q->what) {
  case RGPU_DQ_TEX1D_LINEAR_WIDTH: {
    if (!D->cuDeviceGetTexture1DLinearMaxWidth)
      return query_unsupported(w, "cuDeviceGetTexture1DLinearMaxWidth");
    if (q->args.count != 2)
      return FAIL(CUDA_ERROR_INVALID_VALUE, "texture width: %u args, expected 2", q->args.count);
    CUdevice dev;
    if ((r = query_device(w, q->device, &dev))) return r;
    size_t width = 0;
    CUarray_format format = (CUarray_format)rgpu_array_u32(&q->args, 0);
    unsigned channels = rgpu_array_u32(&q->args, 1);
    r = D->cuDeviceGetTexture1DLinearMaxWidth(&width, format, channels, dev);
    if (r != CUDA_SUCCESS)
      return FAIL(r, "cuDeviceGetTexture1DLinearMaxWidth(0x%x, %u): %s", (unsigned)format,
                  channels, rgpu_driver_error_name(D, r));
    values[nvalues++] = width;
    break;
  }
  case RGPU_DQ_HOST_ATOMIC_CAPS:
  case RGPU_DQ_P2P_ATOMIC_CAPS:
    if ((r = atomic_caps(w, q, q->what == RGPU_DQ_P2P_ATOMIC_CAPS, values))) return r;
    nvalues = q->args.count;
    break;
  case RGPU_DQ_MAX_ACTIVE_CLUSTERS:
  case RGPU_DQ_MAX_CLUSTER_SIZE:
    if ((r = cluster_query(w, q, q->what == RGPU_DQ_MAX_CLUSTER_SIZE, &values[0]))) return r;
    nvalues = 1;
    break;
  case RGPU_DQ_RESET_PERSISTING_L2:
    /* Synchronous (the client waits for this reply): CUDA says the reset
     * "takes effect on function return", and the program checks its status
     * (CUDA_ERROR_NOT_SUPPORTED on a GPU without persisting lines), which a
     * queued request could only report later, at an unrelated call.  The
     * session runs its requests in order, so work sent before it was
     * queued to the GPU before the reset, as with a local driver. */
    if (!D->cuCtxResetPersistingL2Cache) return query_unsupported(w, "cuCtxResetPersistingL2Cache");
    if ((r = rgpu_worker_ensure_ctx(w))) return r;
    r = D->cuCtxResetPersistingL2Cache();
    if (r != CUDA_SUCCESS)
      return FAIL(r, "cuCtxResetPersistingL2Cache: %s", rgpu_driver_error_name(D, r));
    break;
  default: return FAIL(CUDA_ERROR_INVALID_VALUE, "device query: unknown question %u", q->what);
  }
  rgpu_msg_device_query_rep rep = {.values = {values, nvalues}};
  rgpu_msg_device_query_rep_encode(rq->rep, &rep);
  return CUDA_SUCCESS;
}
