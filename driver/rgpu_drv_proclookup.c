/* cuGetProcAddress's lookup over the generated table: a binary search for
 * the api's rows, then the newest form the caller's CUDA version knows. */
#include <string.h>

#include "rgpu_drv_proctable.h"

const rgpu_proc_entry *rgpu_drv_proc_lookup(const rgpu_proc_entry *table, size_t n,
                                            const char *api, int version, int per_thread,
                                            int *status) {
  *status = RGPU_PROC_SYMBOL_NOT_FOUND;
  if (!api) return NULL;
  /* First row of api: rows are sorted by api, so its rows are contiguous. */
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (strcmp(table[mid].api, api) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == n || strcmp(table[lo].api, api) != 0) return NULL;
  const rgpu_proc_entry *plain = NULL, *pt = NULL;
  for (size_t i = lo; i < n && strcmp(table[i].api, api) == 0; i++) {
    if (table[i].version > version) continue;
    if (table[i].per_thread == RGPU_PROC_PLAIN) {
      if (!plain || table[i].version >= plain->version) plain = &table[i];
    } else if (!pt || table[i].version >= pt->version) {
      pt = &table[i];
    }
  }
  /* A per-thread form counts only if it is of the newest plain form's
   * generation or later (an API that later got a _vN without a per-thread
   * twin answers the _vN). */
  const rgpu_proc_entry *best = plain;
  if (per_thread && pt && (!plain || pt->version >= plain->version)) best = pt;
  if (!best && pt) best = pt; /* only per-thread forms exist (not in CUDA 13) */
  if (!best) {
    *status = RGPU_PROC_VERSION_TOO_LOW;
    return NULL;
  }
  *status = RGPU_PROC_FOUND;
  return best;
}

const char *rgpu_drv_result_name_of(int code) {
  for (size_t i = 0; i < rgpu_drv_result_names_len; i++)
    if (rgpu_drv_result_names[i].code == code) return rgpu_drv_result_names[i].name;
  return NULL;
}
