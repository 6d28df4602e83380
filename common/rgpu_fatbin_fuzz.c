/* libFuzzer target: arbitrary bytes through the fatbin walker, the payload
 * decompressor, the cubin .nv.info parser and the PTX .entry parser.  The
 * first byte picks how the input is treated (fatbin, ELF, PTX text) so each
 * parser gets deep coverage from one corpus. */
#include <stdint.h>
#include <stdlib.h>

#include "rgpu_fatbin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const uint8_t *p = data + 1;
  size_t n = size - 1;
  if ((data[0] & 3) == 2) {
    rgpu_fatbin_param_table t;
    if (rgpu_fatbin_ptx_params((const char *)p, n, &t) == RGPU_FATBIN_OK) rgpu_fatbin_param_table_free(&t);
    return 0;
  }
  if (data[0] & 1) {
    rgpu_fatbin_param_table t;
    if (rgpu_fatbin_elf_params(p, n, &t) == RGPU_FATBIN_OK) {
      for (size_t i = 0; i < t.nkernels; i++) (void)rgpu_fatbin_param_table_find(&t, t.kernels[i].name);
      rgpu_fatbin_param_table_free(&t);
    }
    return 0;
  }
  if (n >= 16) (void)rgpu_fatbin_image_size(p);
  rgpu_fatbin fb;
  if (rgpu_fatbin_open(p, n, &fb) != RGPU_FATBIN_OK) return 0;
  (void)rgpu_fatbin_best_ptx(&fb, 0);
  (void)rgpu_fatbin_best_ptx(&fb, 80);
  for (size_t i = 0; i < fb.nentries; i++) {
    void *out;
    size_t len;
    /* A small cap keeps the fuzzer from spending its time in malloc. */
    if (rgpu_fatbin_extract(&fb.entries[i], 1 << 22, &out, &len) == RGPU_FATBIN_OK) {
      rgpu_fatbin_param_table t;
      int rc = fb.entries[i].kind == RGPU_FATBIN_KIND_ELF ? rgpu_fatbin_elf_params(out, len, &t)
                                                         : rgpu_fatbin_ptx_params(out, len, &t);
      if (rc == RGPU_FATBIN_OK) rgpu_fatbin_param_table_free(&t);
      free(out);
    }
  }
  rgpu_fatbin_close(&fb);
  return 0;
}
