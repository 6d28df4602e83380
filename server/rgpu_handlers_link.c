/* LINK: a program's JIT link (cuLinkCreate, cuLinkAddData/AddFile,
 * cuLinkComplete) done by the server's driver in one request
 * (proto/rgpu_messages.def, LINK; the client side is driver/rgpu_drv_link.c).
 *
 * The linker runs in this session's worker, so a hostile input can hurt no
 * other session.  Only options that take a plain number travel: pointers
 * in an option value (log buffers, the wall time) would be the client's
 * addresses, so the server brings its own buffers and the reply carries
 * what landed in them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_log.h"
#include "rgpu_worker_internal.h"

#define D (&w->drv)
#define FAIL(status, ...) rgpu_worker_fail(w, (status), __VA_ARGS__)

#define LINK_LOG_BYTES 65536
#define LINK_MAX_OPTIONS 32

/* Options whose value is a number (cuda.h's CUjit_option list); anything
 * else is refused by name. */
static int option_is_number(uint32_t id) {
  switch (id) {
  case CU_JIT_MAX_REGISTERS:
  case CU_JIT_THREADS_PER_BLOCK:
  case CU_JIT_OPTIMIZATION_LEVEL:
  case CU_JIT_TARGET_FROM_CUCONTEXT:
  case CU_JIT_TARGET:
  case CU_JIT_FALLBACK_STRATEGY:
  case CU_JIT_GENERATE_DEBUG_INFO:
  case CU_JIT_LOG_VERBOSE:
  case CU_JIT_GENERATE_LINE_INFO:
  case CU_JIT_CACHE_MODE:
  case CU_JIT_POSITION_INDEPENDENT_CODE:
  case CU_JIT_MIN_CTA_PER_SM:
  case CU_JIT_MAX_THREADS_PER_BLOCK:
  case CU_JIT_OVERRIDE_DIRECTIVE_VALUES: return 1;
  default: return 0;
  }
}

CUresult rgpu_h_link(rgpu_req *rq, const rgpu_msg_link_req *q) {
  rgpu_worker *w = rq->w;
  CUresult r = rgpu_worker_ensure_ctx(w);
  if (r) return r;
  if (!D->cuLinkCreate || !D->cuLinkAddData || !D->cuLinkComplete || !D->cuLinkDestroy)
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "the server's driver has no JIT linker (cuLinkCreate)");
  uint32_t nopt = q->option_ids.count, nin = q->input_types.count;
  if (q->option_values.count != nopt || nopt > LINK_MAX_OPTIONS)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "link: %u option ids and %u values", nopt, q->option_values.count);
  if (!nin || q->input_lens.count != nin || q->input_names.count != nin)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "link: %u inputs, %u lengths, %u names", nin, q->input_lens.count,
                q->input_names.count);
  uint64_t total = 0;
  for (uint32_t i = 0; i < nin; i++) {
    uint32_t len = rgpu_array_u32(&q->input_lens, i);
    if (!len) return FAIL(CUDA_ERROR_INVALID_VALUE, "link: input %u is empty", i);
    total += len;
  }
  if (total != q->data.len)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "link: inputs of %llu bytes in %zu bytes of data",
                (unsigned long long)total, q->data.len);

  CUjit_option opts[LINK_MAX_OPTIONS + 5];
  void *vals[LINK_MAX_OPTIONS + 5];
  unsigned n = 0;
  for (uint32_t i = 0; i < nopt; i++) {
    uint32_t id = rgpu_array_u32(&q->option_ids, i);
    if (!option_is_number(id))
      return FAIL(CUDA_ERROR_NOT_SUPPORTED, "link: JIT option %u is not supported remotely", id);
    opts[n] = (CUjit_option)id;
    vals[n++] = (void *)(uintptr_t)rgpu_array_u64(&q->option_values, i);
  }
  char *info = calloc(1, LINK_LOG_BYTES), *err = calloc(1, LINK_LOG_BYTES);
  float wall = 0;
  if (!info || !err) {
    free(info);
    free(err);
    return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "server out of memory for a link");
  }
  opts[n] = CU_JIT_INFO_LOG_BUFFER, vals[n++] = info;
  opts[n] = CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, vals[n++] = (void *)(uintptr_t)LINK_LOG_BYTES;
  opts[n] = CU_JIT_ERROR_LOG_BUFFER, vals[n++] = err;
  opts[n] = CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, vals[n++] = (void *)(uintptr_t)LINK_LOG_BYTES;
  opts[n] = CU_JIT_WALL_TIME, vals[n++] = &wall;

  CUlinkState ls = NULL;
  CUresult lr = D->cuLinkCreate(n, opts, vals, &ls);
  size_t off = 0;
  rgpu_strlist_iter it;
  rgpu_strlist_iter_init(&it, &q->input_names);
  for (uint32_t i = 0; lr == CUDA_SUCCESS && i < nin; i++) {
    uint32_t len = rgpu_array_u32(&q->input_lens, i);
    const char *nm = "";
    size_t nmlen = 0;
    rgpu_strlist_next(&it, &nm, &nmlen);
    char name[256];
    snprintf(name, sizeof name, "%.*s", (int)(nmlen < 255 ? nmlen : 255), nm);
    lr = D->cuLinkAddData(ls, (CUjitInputType)rgpu_array_u32(&q->input_types, i),
                          (void *)(q->data.data + off), len, name[0] ? name : NULL, 0, NULL, NULL);
    off += len;
  }
  void *image = NULL;
  size_t image_len = 0;
  if (lr == CUDA_SUCCESS) lr = D->cuLinkComplete(ls, &image, &image_len);
  if (lr == CUDA_SUCCESS && (!image || !image_len || image_len > w->cfg.max_payload - 2 * LINK_LOG_BYTES - 64)) {
    snprintf(err, LINK_LOG_BYTES, "linked image of %zu bytes does not fit a reply", image_len);
    lr = CUDA_ERROR_OUT_OF_MEMORY;
  }
  info[LINK_LOG_BYTES - 1] = err[LINK_LOG_BYTES - 1] = 0;
  rgpu_msg_link_rep rep = {.result = (int32_t)lr,
                           .wall_ms = wall,
                           .info_log = {info, strlen(info)},
                           .error_log = {err, strlen(err)},
                           .image = {lr == CUDA_SUCCESS ? image : NULL, lr == CUDA_SUCCESS ? image_len : 0}};
  rgpu_msg_link_rep_encode(rq->rep, &rep);
  if (lr != CUDA_SUCCESS)
    RGPU_DEBUG("session=%llu link of %u inputs failed: %s: %.200s", (unsigned long long)w->cfg.session_id,
               nin, rgpu_driver_error_name(D, lr), err);
  if (ls) D->cuLinkDestroy(ls);
  free(info);
  free(err);
  return CUDA_SUCCESS;
}
