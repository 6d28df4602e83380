/* The session's driver and contexts: loading the CUDA driver (libcuda or
 * softgpu) after an authenticated HELLO, retaining and switching the primary
 * contexts, and forgetting or destroying what the session made on a device
 * (DEVICE_RESET, the end of the session). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "rgpu_device_list.h"
#include "rgpu_graph.h"
#include "rgpu_graph_lib.h"
#include "rgpu_log.h"
#include "rgpu_metrics.h"
#include "rgpu_worker_internal.h"

const char *rgpu_device_kind_name(rgpu_device_kind k) {
  switch (k) {
    case RGPU_DEVICE_CUDA: return "cuda";
    case RGPU_DEVICE_SOFTGPU: return "softgpu";
    default: return "auto";
  }
}

/* ---- driver and contexts ------------------------------------------------ */

static void print_handler(void *ctx, const char *text, size_t len) {
  rgpu_worker *w = ctx;
  rgpu_output_append(&w->output, text, len);
}

static int try_load(rgpu_worker *w, const char *path, char *err, size_t errlen) {
  if (rgpu_driver_load(&w->drv, path, err, errlen)) return -1;
  CUresult r = w->drv.cuInit(0);
  if (r != CUDA_SUCCESS) {
    snprintf(err, errlen, "CUDA driver %s: cuInit failed: %s", path,
             rgpu_driver_error_name(&w->drv, r));
    return -1;
  }
  int n = 0;
  r = w->drv.cuDeviceGetCount(&n);
  if (r != CUDA_SUCCESS || n < 1) {
    snprintf(err, errlen, "CUDA driver %s: no device (%s)", path,
             r != CUDA_SUCCESS ? rgpu_driver_error_name(&w->drv, r) : "count 0");
    return -1;
  }
  if (n > RGPU_MAX_DEVICES) n = RGPU_MAX_DEVICES;
  if (w->cfg.ndevices > 0) {
    /* The listener checked the list against its own probe; a driver that
     * now has fewer devices is refused here with the same sentence. */
    if (rgpu_device_list_check(w->cfg.devices, w->cfg.ndevices, n, err, errlen)) return -1;
    for (int i = 0; i < w->cfg.ndevices; i++) w->ordinal[i] = w->cfg.devices[i];
    w->device_count = w->cfg.ndevices;
  } else {
    for (int i = 0; i < n; i++) w->ordinal[i] = i;
    w->device_count = n;
  }
  return 0;
}

CUresult rgpu_worker_ensure_driver(rgpu_worker *w) {
  if (w->drv_state == 1) return CUDA_SUCCESS;
  if (w->drv_state < 0)
    return rgpu_worker_fail(w, CUDA_ERROR_NO_DEVICE, "%s", w->drv_err);
  char err[512] = "";
  int ok = -1;
  if (w->cfg.device == RGPU_DEVICE_CUDA || w->cfg.device == RGPU_DEVICE_AUTO)
    ok = try_load(w, "libcuda.so.1", err, sizeof err);
  if (ok && w->cfg.device != RGPU_DEVICE_CUDA) {
    char err2[512] = "";
    ok = try_load(w, w->cfg.softgpu_lib, err2, sizeof err2);
    if (ok) {
      if (w->cfg.device == RGPU_DEVICE_AUTO)
        snprintf(w->drv_err, sizeof w->drv_err, "no usable driver: %s; %s", err, err2);
      else
        snprintf(w->drv_err, sizeof w->drv_err, "%s", err2);
    }
  } else if (ok) {
    snprintf(w->drv_err, sizeof w->drv_err, "%s", err);
  }
  if (ok) {
    w->drv_state = -1;
    RGPU_ERROR("session=%llu %s", (unsigned long long)w->cfg.session_id, w->drv_err);
    return rgpu_worker_fail(w, CUDA_ERROR_NO_DEVICE, "%s", w->drv_err);
  }
  w->drv_state = 1;
  if (w->drv.sgSetPrintHandler && (w->caps & RGPU_CAP_OUTPUT))
    w->drv.sgSetPrintHandler(print_handler, w);
  else if (!w->drv.is_softgpu && w->cfg.own_process && (w->caps & RGPU_CAP_OUTPUT) &&
           rgpu_output_capture_start(&w->output) != 0)
    RGPU_WARN("session=%llu device printf output stays on the server's stdout: %s",
              (unsigned long long)w->cfg.session_id, strerror(errno));
  RGPU_INFO("session=%llu driver=%s devices=%d%s", (unsigned long long)w->cfg.session_id,
            w->drv.path, w->device_count, w->drv.is_softgpu ? " (softgpu)" : "");
  return CUDA_SUCCESS;
}

CUresult rgpu_worker_set_device(rgpu_worker *w, int dev) {
  CUresult r = rgpu_worker_ensure_driver(w);
  if (r) return r;
  if (dev < 0 || dev >= w->device_count)
    return rgpu_worker_fail(w, CUDA_ERROR_INVALID_DEVICE, "device %d does not exist (%d device%s)",
                            dev, w->device_count, w->device_count == 1 ? "" : "s");
  int fresh = 0;
  if (!w->ctx[dev]) {
    CUdevice d;
    r = w->drv.cuDeviceGet(&d, rgpu_worker_ordinal(w, dev));
    if (r == CUDA_SUCCESS) r = w->drv.cuDevicePrimaryCtxRetain(&w->ctx[dev], d);
    if (r != CUDA_SUCCESS) {
      w->ctx[dev] = NULL;
      /* After a fault and a reset the H200 refuses the new primary context
       * with the fault's own code (CUDA_ERROR_ILLEGAL_ADDRESS, measured in a
       * worker), and a local cudart reports that refusal as
       * cudaErrorDevicesUnavailable (measured natively): the device is
       * unusable until the GPU itself is reset.  The program must see what
       * it sees locally, so a context refused for a fault is
       * CUDA_ERROR_DEVICE_UNAVAILABLE; the driver's code stays in the text. */
      CUresult seen = rgpu_driver_is_fault(r) ? CUDA_ERROR_DEVICE_UNAVAILABLE : r;
      return rgpu_worker_fail(w, seen, "cannot retain the primary context of device %d: %s", dev,
                              rgpu_driver_error_name(&w->drv, r));
    }
    fresh = 1;
    /* The session now uses it (NVML_QUERY): by the driver's ordinal, which
     * names the same GPU for every session whatever --devices says. */
    rgpu_metrics_session_device(rgpu_worker_ordinal(w, dev));
  }
  if (w->cur_dev != dev || fresh) {
    r = w->drv.cuCtxSetCurrent(w->ctx[dev]);
    if (r != CUDA_SUCCESS)
      return rgpu_worker_fail(w, r, "cannot make device %d current: %s", dev,
                              rgpu_driver_error_name(&w->drv, r));
    w->cur_dev = dev;
  }
  return CUDA_SUCCESS;
}

CUresult rgpu_worker_ensure_ctx(rgpu_worker *w) {
  /* No context after a reset whose new one the driver refused: ask again,
   * so the program sees the driver's answer (a local cudart would). */
  if (w->drv_state == 1 && w->cur_dev >= 0 && w->ctx[w->cur_dev]) return CUDA_SUCCESS;
  return rgpu_worker_set_device(w, w->cur_dev >= 0 ? w->cur_dev : 0);
}

typedef struct {
  rgpu_worker *w;
  int destroy;
} drop_ctx;

static void drop_stream(void *p, const rgpu_handle_entry *e) {
  drop_ctx *d = p;
  if (d->destroy) d->w->drv.cuStreamDestroy((CUstream)e->ptr);
}
static void drop_event(void *p, const rgpu_handle_entry *e) {
  drop_ctx *d = p;
  if (d->destroy) d->w->drv.cuEventDestroy((CUevent)e->ptr);
}
static void drop_module(void *p, const rgpu_handle_entry *e) {
  drop_ctx *d = p;
  rgpu_module_rec *m = e->ptr;
  if (d->destroy && m->module) d->w->drv.cuModuleUnload((CUmodule)m->module);
  rgpu_module_rec_free(m);
}
static void drop_alloc(void *p, const rgpu_alloc *a) {
  drop_ctx *d = p;
  if (d->destroy && a->kind == RGPU_ALLOC_MALLOC) d->w->drv.cuMemFree((CUdeviceptr)a->dptr);
}

void rgpu_worker_drop_device_state(rgpu_worker *w, int dev, int destroy) {
  drop_ctx d = {w, destroy && w->drv_state == 1};
  /* Resources must be destroyed inside their own context. */
  if (d.destroy && dev >= 0 && dev < RGPU_MAX_DEVICES && w->ctx[dev])
    w->drv.cuCtxSetCurrent(w->ctx[dev]);
  if (d.destroy && dev < 0) {
    for (int i = 0; i < w->device_count; i++)
      if (w->ctx[i]) {
        w->drv.cuCtxSetCurrent(w->ctx[i]);
        rgpu_worker_drop_device_state(w, i, destroy);
      }
    d.destroy = 0; /* anything left has no context: forget it */
  }
  rgpu_graph_drop_device(w, dev, d.destroy); /* first: graphs use the rest */
  rgpu_graph_lib_drop_device(w, dev, d.destroy);
  for (int i = 0; i < RGPU_MAX_DEVICES; i++) {
    if ((dev >= 0 && i != dev) || !w->host_fence[i]) continue;
    if (d.destroy) w->drv.cuEventDestroy(w->host_fence[i]);
    w->host_fence[i] = NULL;
  }
  rgpu_handle_map_remove_matching(&w->streams, dev, drop_stream, &d);
  rgpu_handle_map_remove_matching(&w->events, dev, drop_event, &d);
  rgpu_handle_map_remove_matching(&w->modules, dev, drop_module, &d);
  rgpu_worker_drop_arrays(w, dev, d.destroy);
  rgpu_worker_drop_managed_copies(w, dev, 0, 0);
  rgpu_worker_drop_vmm(w, dev, d.destroy);
  rgpu_alloc_table_remove_matching(&w->allocs, dev, 0, drop_alloc, &d);
  if (d.destroy && w->cur_dev >= 0 && w->cur_dev < RGPU_MAX_DEVICES && w->ctx[w->cur_dev])
    w->drv.cuCtxSetCurrent(w->ctx[w->cur_dev]);
}

