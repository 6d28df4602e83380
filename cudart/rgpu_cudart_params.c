/* Kernel argument packing.  A launch passes void *args[] with no sizes;
 * the layout (offset and size per parameter, from the server's
 * cuFuncGetParamInfo or the cubin's .nv.info) says how many bytes to take
 * from each pointer and where they go in the one buffer that travels. */
#include <string.h>

#include "rgpu_cudart.h"

int rgpu_cudart_layout_finish(rgpu_param_layout *l) {
  uint64_t end = 0;
  for (uint32_t i = 0; i < l->nparams; i++) {
    uint64_t e = (uint64_t)l->offsets[i] + l->sizes[i];
    if (e > UINT32_MAX) return -1;
    if (e > end) end = e;
  }
  l->total = (uint32_t)end;
  return 0;
}

int rgpu_cudart_layout_param(const rgpu_param_layout *l, size_t i, size_t *offset, size_t *size) {
  if (i >= l->nparams) return -1;
  if (offset) *offset = l->offsets[i];
  if (size) *size = l->sizes[i];
  return 0;
}

long rgpu_cudart_pack_params(const rgpu_param_layout *l, void **args, void *buf, size_t cap) {
  if (l->total > cap) return -1;
  if (l->nparams && !args) return -1;
  memset(buf, 0, l->total);
  for (uint32_t i = 0; i < l->nparams; i++) {
    if (l->sizes[i] == 0) continue;
    if (!args[i]) return -1;
    memcpy((uint8_t *)buf + l->offsets[i], args[i], l->sizes[i]);
  }
  return (long)l->total;
}
