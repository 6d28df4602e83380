/* State shared by rgpu_worker.c (session loop) and rgpu_handlers.c. */
#ifndef RGPU_WORKER_INTERNAL_H
#define RGPU_WORKER_INTERNAL_H

#include <pthread.h>

#include "rgpu_driver.h"
#include "rgpu_messages.h"
#include "rgpu_session.h"
#include "rgpu_worker.h"

#define RGPU_MAX_DEVICES 64
/* Device printf text waiting to be sent beyond this is dropped (and the
 * client told so): a runaway kernel must not exhaust the worker's memory. */
#define RGPU_OUTPUT_MAX (16u << 20)

struct rgpu_worker {
  rgpu_worker_config cfg;
  int hello_done;
  uint32_t caps; /* negotiated: client's AND server's */
  uint8_t session_token[32];

  /* Driver: loaded after an authenticated HELLO. */
  int drv_state; /* 0 not tried, 1 loaded, -1 failed */
  rgpu_driver drv;
  char drv_err[768];
  int device_count;
  int cur_dev; /* -1: none current yet (device 0 is retained lazily) */
  CUcontext ctx[RGPU_MAX_DEVICES];

  /* Session tables. */
  rgpu_alloc_table allocs;
  rgpu_handle_map streams;
  rgpu_handle_map events;
  rgpu_handle_map modules; /* ptr: rgpu_module_rec * */

  /* Per-request scratch, reused. */
  rgpu_buf rep;      /* reply payload of the request being handled */
  char msg[1024];    /* error message of the request being handled */
  void *param_buf;   /* aligned copy of LAUNCH parameters */
  size_t param_cap;

  /* Device printf: softgpu may call the handler from its own threads. */
  pthread_mutex_t out_lock;
  rgpu_buf pending_output;
  uint64_t output_dropped;

  uint64_t calls;
  const char *end_reason;
};

/* Handler of one request opcode: decodes payload, appends reply fields (and
 * tail) to w->rep, returns a CUresult; on failure may write w->msg. */
typedef CUresult (*rgpu_handler_fn)(rgpu_worker *w, const void *payload, size_t len);

/* The handler for op, or NULL if the opcode is unknown. needs_driver is set
 * for requests that must have a loaded driver and a current context. */
rgpu_handler_fn rgpu_handler_for(uint16_t op, int *needs_ctx);

/* Formats w->msg (printf-style). Returns status, for `return fail(...)`. */
CUresult rgpu_worker_fail(rgpu_worker *w, CUresult status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Loads the driver and makes a context current if needed. */
CUresult rgpu_worker_ensure_driver(rgpu_worker *w);
CUresult rgpu_worker_ensure_ctx(rgpu_worker *w);
CUresult rgpu_worker_set_device(rgpu_worker *w, int dev);
/* Forgets (without driver calls) or destroys (with) everything of device
 * dev, or all devices with dev < 0. */
void rgpu_worker_drop_device_state(rgpu_worker *w, int dev, int destroy);

#endif
