/* softgpu's JIT linker (cuLinkCreate, cuLinkAddData, cuLinkAddFile,
 * cuLinkComplete, cuLinkDestroy).
 *
 * softgpu runs PTX, so "linking" is choosing the one module to run: the
 * linked image is the single PTX or fatbin input, as given (cuModuleLoadData
 * takes it).  Libraries and objects beside it (libcudadevrt, which Numba
 * and -rdc programs add) are left out: a module that calls into one fails
 * at load with the name of the function softgpu does not provide.  Two or
 * more modules, or a cubin (machine code) alone, are
 * CUDA_ERROR_NOT_SUPPORTED with the reason in the error log.  The log
 * buffers and the wall time are filled as the real linker fills them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sg_internal.h"

#define SG_LINK_MAGIC 0x53474c4bu /* "SGLK" */

struct CUlinkState_st {
  uint32_t magic;
  char *info, *err;
  size_t info_cap, err_cap;
  void **info_slot, **err_slot, **wall_slot;
  uint8_t *module; /* the one PTX or fatbin input (owned) */
  size_t module_len;
  int modules;     /* how many PTX/fatbin/cubin inputs came */
  int cubins;
};

static void put_log(char *dst, size_t cap, void **slot, const char *text) {
  if (!dst || !cap) return;
  size_t n = strlen(text);
  if (n > cap - 1) n = cap - 1;
  memcpy(dst, text, n);
  dst[n] = 0;
  if (slot) *slot = (void *)(uintptr_t)n; /* CUDA: the text's length, without its NUL */
}

SG_EXPORT CUresult CUDAAPI cuLinkCreate_v2(unsigned int numOptions, CUjit_option *options, void **optionValues,
                                           CUlinkState *stateOut) {
  if (!sg_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!stateOut || (numOptions && (!options || !optionValues))) return CUDA_ERROR_INVALID_VALUE;
  CUlinkState s = calloc(1, sizeof *s);
  if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
  s->magic = SG_LINK_MAGIC;
  for (unsigned i = 0; i < numOptions; i++) {
    void *v = optionValues[i];
    switch (options[i]) {
    case CU_JIT_INFO_LOG_BUFFER: s->info = v; break;
    case CU_JIT_ERROR_LOG_BUFFER: s->err = v; break;
    case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
      s->info_cap = (size_t)(uintptr_t)v;
      s->info_slot = &optionValues[i];
      break;
    case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
      s->err_cap = (size_t)(uintptr_t)v;
      s->err_slot = &optionValues[i];
      break;
    case CU_JIT_WALL_TIME: s->wall_slot = &optionValues[i]; break;
    default: break; /* code generation options: nothing to generate here */
    }
  }
  *stateOut = s;
  return CUDA_SUCCESS;
}

SG_EXPORT CUresult CUDAAPI cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void *data, size_t size,
                                            const char *name, unsigned int numOptions, CUjit_option *options,
                                            void **optionValues) {
  (void)name;
  (void)numOptions;
  (void)options;
  (void)optionValues;
  if (!state || state->magic != SG_LINK_MAGIC) return CUDA_ERROR_INVALID_HANDLE;
  if (!data || !size) return CUDA_ERROR_INVALID_VALUE;
  switch (type) {
  case CU_JIT_INPUT_PTX:
  case CU_JIT_INPUT_FATBINARY:
    state->modules++;
    if (state->modules == 1) {
      /* PTX is text: keep it NUL-terminated whether or not size counted one. */
      state->module = malloc(size + 1);
      if (!state->module) return CUDA_ERROR_OUT_OF_MEMORY;
      memcpy(state->module, data, size);
      state->module[size] = 0;
      state->module_len = type == CU_JIT_INPUT_PTX && ((const char *)data)[size - 1] ? size + 1 : size;
    }
    return CUDA_SUCCESS;
  case CU_JIT_INPUT_CUBIN: state->cubins++; return CUDA_SUCCESS;
  case CU_JIT_INPUT_LIBRARY:
  case CU_JIT_INPUT_OBJECT: return CUDA_SUCCESS; /* left out (see above) */
  default: return CUDA_ERROR_INVALID_VALUE;
  }
}

SG_EXPORT CUresult CUDAAPI cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char *path,
                                            unsigned int numOptions, CUjit_option *options, void **optionValues) {
  if (!state || state->magic != SG_LINK_MAGIC) return CUDA_ERROR_INVALID_HANDLE;
  if (!path) return CUDA_ERROR_INVALID_VALUE;
  FILE *f = fopen(path, "rb");
  if (!f) return CUDA_ERROR_FILE_NOT_FOUND;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  CUresult r = CUDA_ERROR_FILE_NOT_FOUND;
  char *buf = n > 0 ? malloc((size_t)n) : NULL;
  if (buf && fread(buf, 1, (size_t)n, f) == (size_t)n)
    r = cuLinkAddData_v2(state, type, buf, (size_t)n, path, numOptions, options, optionValues);
  free(buf);
  fclose(f);
  return r;
}

SG_EXPORT CUresult CUDAAPI cuLinkComplete(CUlinkState state, void **cubinOut, size_t *sizeOut) {
  if (!state || state->magic != SG_LINK_MAGIC) return CUDA_ERROR_INVALID_HANDLE;
  if (!cubinOut || !sizeOut) return CUDA_ERROR_INVALID_VALUE;
  if (state->wall_slot) {
    float ms = 0;
    memcpy(state->wall_slot, &ms, sizeof ms);
  }
  char msg[200];
  if (state->modules == 1 && !state->cubins) {
    snprintf(msg, sizeof msg, "softgpu: linked one module of %zu bytes (run as PTX)", state->module_len);
    put_log(state->info, state->info_cap, state->info_slot, msg);
    put_log(state->err, state->err_cap, state->err_slot, "");
    *cubinOut = state->module;
    *sizeOut = state->module_len;
    return CUDA_SUCCESS;
  }
  snprintf(msg, sizeof msg,
           state->cubins ? "softgpu cannot link machine code (cubin inputs): give it PTX"
           : state->modules ? "softgpu links one PTX or fatbin module; %d were given"
                            : "nothing to link: no PTX or fatbin input",
           state->modules);
  put_log(state->info, state->info_cap, state->info_slot, "");
  put_log(state->err, state->err_cap, state->err_slot, msg);
  return state->modules ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
}

SG_EXPORT CUresult CUDAAPI cuLinkDestroy(CUlinkState state) {
  if (!state || state->magic != SG_LINK_MAGIC) return CUDA_ERROR_INVALID_HANDLE;
  state->magic = 0;
  free(state->module);
  free(state);
  return CUDA_SUCCESS;
}
