/* JIT linking (cuLinkCreate, cuLinkAddData, cuLinkAddFile, cuLinkComplete,
 * cuLinkDestroy; the v1 names too): what PTX JIT programs and Numba do.
 *
 * The link state lives here and gathers the inputs (files are read here:
 * their paths are this machine's) and the options.  cuLinkComplete sends
 * everything as one LINK request; the server's driver links for the
 * session's device and the reply brings the image, the logs and the wall
 * time.  The image stays with the state, as CUDA keeps it, until
 * cuLinkDestroy; the program loads it with cuModuleLoadData like any other
 * (one more transfer of the image: a link is rare and the load needs it on
 * the server as a module anyway).
 *
 * Options: the ones that take a number travel (server/
 * rgpu_handlers_link.c has the list); the log buffers, their sizes and the
 * wall time are the program's own and are filled here at cuLinkComplete
 * through the optionValues array, which CUDA requires to outlive the
 * state when output options are used.  Per-input options of
 * cuLinkAddData/AddFile are not supported (CUDA_ERROR_NOT_SUPPORTED when
 * given: rare, and they would need per-input wire fields). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_array.h"
#include "rgpu_calls.h"
#include "rgpu_drv_module.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"

#define LINK_MAGIC 0x4c4e4b53u /* "LNKS" */
#define LINK_MAX_OPTIONS 32
#define LINK_MAX_INPUTS 4096
#define LINK_FILE_MAX (256u << 20)

struct CUlinkState_st {
  uint32_t magic;
  uint32_t opt_ids[LINK_MAX_OPTIONS];
  uint64_t opt_vals[LINK_MAX_OPTIONS];
  uint32_t nopts;
  /* The program's output options (slots of its optionValues array). */
  char *info_log, *error_log;
  void **info_size_slot, **error_size_slot, **wall_slot;
  size_t info_size, error_size;
  /* The inputs, in order. */
  rgpu_buf data;
  uint32_t *types, *lens;
  char **names;
  size_t ninputs, capinputs;
  /* cuLinkComplete's image. */
  uint8_t *image;
  size_t image_len;
};

static int valid_state(CUlinkState s) { return s && s->magic == LINK_MAGIC; }

static void state_free(CUlinkState s) {
  rgpu_buf_free(&s->data);
  for (size_t i = 0; i < s->ninputs; i++) free(s->names[i]);
  free(s->names);
  free(s->types);
  free(s->lens);
  free(s->image);
  s->magic = 0;
  free(s);
}

RGPU_DRV CUresult rgpu_drv_cuLinkCreate_v2(unsigned int numOptions, CUjit_option *options,
                                           void **optionValues, CUlinkState *stateOut) {
  rgpu_client *c;
  CUresult r = rgpu_drv_enter(&c);
  if (r != CUDA_SUCCESS) return r;
  if (!stateOut || (numOptions && (!options || !optionValues))) return CUDA_ERROR_INVALID_VALUE;
  CUlinkState s = calloc(1, sizeof *s);
  if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
  s->magic = LINK_MAGIC;
  rgpu_buf_init(&s->data);
  for (unsigned i = 0; i < numOptions; i++) {
    void *v = optionValues[i];
    switch (options[i]) {
    case CU_JIT_INFO_LOG_BUFFER: s->info_log = v; break;
    case CU_JIT_ERROR_LOG_BUFFER: s->error_log = v; break;
    case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
      s->info_size = (size_t)(uintptr_t)v;
      s->info_size_slot = &optionValues[i];
      break;
    case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
      s->error_size = (size_t)(uintptr_t)v;
      s->error_size_slot = &optionValues[i];
      break;
    case CU_JIT_WALL_TIME: s->wall_slot = &optionValues[i]; break;
    default:
      if (s->nopts == LINK_MAX_OPTIONS) {
        state_free(s);
        return CUDA_ERROR_INVALID_VALUE;
      }
      /* The server refuses, by name, an option whose value is not a number. */
      s->opt_ids[s->nopts] = (uint32_t)options[i];
      s->opt_vals[s->nopts++] = (uint64_t)(uintptr_t)v;
    }
  }
  *stateOut = s;
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuLinkCreate(unsigned int numOptions, CUjit_option *options,
                                        void **optionValues, CUlinkState *stateOut) {
  return rgpu_drv_cuLinkCreate_v2(numOptions, options, optionValues, stateOut);
}

static CUresult add_input(CUlinkState s, CUjitInputType type, const void *data, size_t size,
                          const char *name) {
  if (size > UINT32_MAX || s->data.len + size > LINK_FILE_MAX) return CUDA_ERROR_INVALID_VALUE;
  if (s->ninputs == LINK_MAX_INPUTS) return CUDA_ERROR_INVALID_VALUE;
  if (RGPU_ARRAY_RESERVE(s->types, s->capinputs, s->ninputs + 1, 8)) return CUDA_ERROR_OUT_OF_MEMORY;
  size_t cap = s->capinputs;
  uint32_t *lens = realloc(s->lens, cap * sizeof *lens);
  if (!lens) return CUDA_ERROR_OUT_OF_MEMORY;
  s->lens = lens;
  char **names = realloc(s->names, cap * sizeof *names);
  if (!names) return CUDA_ERROR_OUT_OF_MEMORY;
  s->names = names;
  char *nm = strdup(name ? name : "");
  if (!nm) return CUDA_ERROR_OUT_OF_MEMORY;
  rgpu_buf_put(&s->data, data, size);
  if (s->data.err) {
    free(nm);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  s->types[s->ninputs] = (uint32_t)type;
  s->lens[s->ninputs] = (uint32_t)size;
  s->names[s->ninputs++] = nm;
  return CUDA_SUCCESS;
}

/* What cuLinkAddData and cuLinkAddFile check first: initialization and the
 * connection (rgpu_drv_enter), the state, the input type, the options. */
static CUresult input_check(CUlinkState state, CUjitInputType type, unsigned int numOptions) {
  rgpu_client *c;
  CUresult r = rgpu_drv_enter(&c);
  if (r != CUDA_SUCCESS) return r;
  if (!valid_state(state) || state->image) return CUDA_ERROR_INVALID_HANDLE;
  if ((unsigned)type >= CU_JIT_NUM_INPUT_TYPES) return CUDA_ERROR_INVALID_VALUE;
  if (numOptions) {
    static int logged;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      RGPU_WARN("cuLinkAddData/cuLinkAddFile: per-input JIT options are not supported; they return "
                "CUDA_ERROR_NOT_SUPPORTED (give the options to cuLinkCreate)");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

RGPU_DRV CUresult rgpu_drv_cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void *data, size_t size,
                                            const char *name, unsigned int numOptions, CUjit_option *options,
                                            void **optionValues) {
  (void)options;
  (void)optionValues;
  CUresult r = input_check(state, type, numOptions);
  if (r != CUDA_SUCCESS) return r;
  if (!data || !size) return CUDA_ERROR_INVALID_VALUE;
  return add_input(state, type, data, size, name);
}

RGPU_DRV CUresult rgpu_drv_cuLinkAddData(CUlinkState state, CUjitInputType type, void *data, size_t size,
                                         const char *name, unsigned int numOptions, CUjit_option *options,
                                         void **optionValues) {
  return rgpu_drv_cuLinkAddData_v2(state, type, data, size, name, numOptions, options, optionValues);
}

RGPU_DRV CUresult rgpu_drv_cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char *path,
                                            unsigned int numOptions, CUjit_option *options,
                                            void **optionValues) {
  (void)options;
  (void)optionValues;
  CUresult r = input_check(state, type, numOptions);
  if (r != CUDA_SUCCESS) return r;
  if (!path) return CUDA_ERROR_INVALID_VALUE;
  FILE *f = fopen(path, "rb");
  if (!f) return CUDA_ERROR_FILE_NOT_FOUND;
  uint8_t *buf = NULL;
  size_t len = 0, cap = 0;
  r = CUDA_SUCCESS;
  for (;;) {
    if (len == cap) {
      if (cap >= LINK_FILE_MAX) {
        r = CUDA_ERROR_INVALID_VALUE;
        break;
      }
      cap = cap ? cap * 2 : 1 << 16;
      uint8_t *nb = realloc(buf, cap);
      if (!nb) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        break;
      }
      buf = nb;
    }
    size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (got == 0) break;
  }
  if (r == CUDA_SUCCESS && ferror(f)) r = CUDA_ERROR_FILE_NOT_FOUND;
  fclose(f);
  if (r == CUDA_SUCCESS && !len) r = CUDA_ERROR_INVALID_IMAGE;
  /* PTX is text the driver reads to its NUL, which a file does not end with
   * (the driver's own cuLinkAddFile adds it). */
  if (r == CUDA_SUCCESS && type == CU_JIT_INPUT_PTX && buf[len - 1]) {
    if (len == cap) {
      uint8_t *nb = realloc(buf, cap + 1);
      if (!nb) r = CUDA_ERROR_OUT_OF_MEMORY;
      else buf = nb;
    }
    if (r == CUDA_SUCCESS) buf[len++] = 0;
  }
  if (r == CUDA_SUCCESS) {
    const char *base = strrchr(path, '/');
    r = add_input(state, type, buf, len, base ? base + 1 : path);
  }
  free(buf);
  return r;
}

RGPU_DRV CUresult rgpu_drv_cuLinkAddFile(CUlinkState state, CUjitInputType type, const char *path,
                                         unsigned int numOptions, CUjit_option *options, void **optionValues) {
  return rgpu_drv_cuLinkAddFile_v2(state, type, path, numOptions, options, optionValues);
}

/* Copies a log into the program's buffer (NUL-terminated, cut to fit) and
 * writes back how much was filled: the text's length without its NUL, as
 * CUDA does (measured on the H100). */
static void give_log(char *dst, size_t cap, void **size_slot, const rgpu_bytes *src) {
  if (!dst || !cap) return;
  size_t n = src->len < cap - 1 ? src->len : cap - 1;
  memcpy(dst, src->data, n);
  dst[n] = 0;
  if (size_slot) *size_slot = (void *)(uintptr_t)n;
}

RGPU_DRV CUresult rgpu_drv_cuLinkComplete(CUlinkState state, void **cubinOut, size_t *sizeOut) {
  RGPU_DRV_BEGIN();
  if (!valid_state(state)) RGPU_DRV_RET(CUDA_ERROR_INVALID_HANDLE);
  if (!cubinOut || !sizeOut) RGPU_DRV_RET(CUDA_ERROR_INVALID_VALUE);
  if (state->image) {
    *cubinOut = state->image;
    *sizeOut = state->image_len;
    RGPU_DRV_RET(CUDA_SUCCESS);
  }
  if (!state->ninputs) RGPU_DRV_RET(CUDA_ERROR_INVALID_VALUE);
  int dev = 0;
  CUresult r = rgpu_drv_ctx_enter(&dev);
  if (r != CUDA_SUCCESS) RGPU_DRV_RET(r);
  rgpu_msg_link_req q = {
      .option_ids = {state->opt_ids, state->nopts},
      .option_values = {state->opt_vals, state->nopts},
      .input_types = {state->types, (uint32_t)state->ninputs},
      .input_lens = {state->lens, (uint32_t)state->ninputs},
      .input_names = {.items = (const char *const *)state->names, .count = (uint32_t)state->ninputs},
      .data = {state->data.data, state->data.len},
  };
  rgpu_buf payload;
  rgpu_buf_init(&payload);
  rgpu_client_reply reply;
  memset(&reply, 0, sizeof reply);
  reply.payload = &payload;
  rgpu_msg_link_rep rep;
  memset(&rep, 0, sizeof rep);
  rgpu_status rc = rgpu_call_link(c, dev, 0, &q, &rep, &reply);
  r = rc ? rgpu_drv_reply_ret(c, rc) : CUDA_SUCCESS;
  if (r == CUDA_SUCCESS) {
    give_log(state->info_log, state->info_size, state->info_size_slot, &rep.info_log);
    give_log(state->error_log, state->error_size, state->error_size_slot, &rep.error_log);
    if (state->wall_slot) {
      float ms = rep.wall_ms;
      memcpy(state->wall_slot, &ms, sizeof ms); /* CUDA: the float over the value */
    }
    r = (CUresult)rep.result;
  }
  if (r == CUDA_SUCCESS) {
    if (!rep.image.len) {
      r = CUDA_ERROR_INVALID_IMAGE;
    } else if (!(state->image = malloc(rep.image.len))) {
      r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
      memcpy(state->image, rep.image.data, rep.image.len);
      state->image_len = rep.image.len;
      *cubinOut = state->image;
      *sizeOut = state->image_len;
    }
  }
  rgpu_buf_free(&payload);
  RGPU_DRV_RET(r);
}

RGPU_DRV CUresult rgpu_drv_cuLinkDestroy(CUlinkState state) {
  if (!valid_state(state)) return CUDA_ERROR_INVALID_HANDLE;
  state_free(state);
  return CUDA_SUCCESS;
}
