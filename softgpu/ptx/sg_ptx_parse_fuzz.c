/* libFuzzer target: arbitrary text through the PTX parser (sg_ptx_module_parse)
 * and the module/kernel queries the driver makes after a successful parse.
 * A module comes from a client's fatbin, so the parser is network input. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sg_ptx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sg_ptx_module *m = NULL;
  char err[48]; /* small on purpose: messages must truncate, not overflow */
  int rc = sg_ptx_module_parse((const char *)data, size, &m, err, sizeof err);
  if (rc != 0) {
    if (m) abort();                         /* failure must not hand out a module */
    if (!memchr(err, 0, sizeof err)) abort(); /* and must leave a terminated message */
    return 0;
  }
  int nk = sg_ptx_module_kernel_count(m);
  for (int i = 0; i < nk; i++) {
    const sg_ptx_kernel *k = sg_ptx_module_kernel(m, i);
    if (!k) abort();
    const char *name = sg_ptx_kernel_name(k);
    if (!name || sg_ptx_module_find_kernel(m, name) == NULL) abort();
    int np = sg_ptx_kernel_param_count(k);
    size_t bytes = sg_ptx_kernel_param_bytes(k);
    for (int p = 0; p < np; p++) {
      size_t off, sz;
      if (sg_ptx_kernel_param_info(k, p, &off, &sz) != 0) abort();
      if (off + sz > bytes) abort(); /* the server sizes LAUNCH params from this */
    }
    (void)sg_ptx_kernel_static_shared(k);
    (void)sg_ptx_kernel_local_bytes(k);
    (void)sg_ptx_kernel_max_threads(k);
  }
  int ng = sg_ptx_module_global_count(m);
  for (int i = 0; i < ng; i++) {
    sg_ptx_global_info gi;
    if (sg_ptx_module_global(m, i, &gi) != 0) abort();
  }
  sg_ptx_module_free(m);
  return 0;
}
