/* rgpu_fatbin_filter: the part of a fatbin one device runs (issue 15).
 *
 * A fatbin carries code for many GPUs (PyTorch's 445 hold 284 MiB, 48 MiB
 * of it for sm_90); a server's device runs one entry of each.  Before an
 * image leaves the client it is cut down to that entry, so the bytes sent,
 * and the hash the server's image cache names them by, are those of what
 * the device would load anyway.  The result is itself a fatbin (the header
 * and the chosen entry copied verbatim, still compressed as nvcc stored
 * it), which both the CUDA driver and softgpu load like the original. */
#ifndef RGPU_FATBIN_FILTER_H
#define RGPU_FATBIN_FILTER_H

#include <stddef.h>

#include "rgpu_fatbin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The entry a device of compute capability cc (major * 10 + minor: 90 for
 * sm_90) loads, chosen as the CUDA driver does:
 *  - with sass_ok, a cubin for sm_cc, else the newest cubin of the same
 *    major and a lower minor (binary compatible within a major); an
 *    arch-specific cubin (sm_90a) only for exactly its arch;
 *  - otherwise the newest PTX for an arch <= cc (JIT-compiled by the
 *    driver), arch-specific PTX again only for exactly its arch.
 * sass_ok = 0 for devices that run only PTX (softgpu).  NULL when the
 * fatbin holds nothing the device can run. */
const rgpu_fatbin_entry *rgpu_fatbin_pick(const rgpu_fatbin *fb, unsigned cc, int sass_ok);

/* A new fatbin (*out, free() it, *out_len bytes) holding only the entry
 * rgpu_fatbin_pick chooses from the fatbin image[0..len).  Errors:
 * RGPU_FATBIN_ERR_NOT_FOUND when nothing fits (send the image whole: the
 * server's driver then gives its own error), or the parser's code when the
 * image is not a valid fatbin (a cubin or PTX given to cuModuleLoadData). */
int rgpu_fatbin_filter(const void *image, size_t len, unsigned cc, int sass_ok, void **out,
                       size_t *out_len);

#ifdef __cplusplus
}
#endif
#endif
