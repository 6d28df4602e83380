#include "rgpu_array.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int rgpu_array_reserve(void *ptr_slot, size_t *cap, size_t need, size_t elem_size,
                       size_t first_cap) {
  if (need <= *cap) return 0;
  size_t nc = rgpu_array_next_cap(*cap, need, elem_size, first_cap);
  if (nc == 0) return -1;
  /* The slot holds a T *; it is read and written through memcpy so that
   * no T ** is ever accessed as a void ** (same representation on every
   * platform rgpu targets, but a different type to the optimizer). */
  void *old;
  memcpy(&old, ptr_slot, sizeof old);
  void *nv = realloc(old, nc * elem_size);
  if (!nv) return -1;
  memcpy(ptr_slot, &nv, sizeof nv);
  *cap = nc;
  return 0;
}

int rgpu_array_queue_room(void *ptr_slot, size_t *head, size_t n, size_t *cap, size_t elem_size,
                          size_t first_cap) {
  if (*head + n < *cap) return 0;
  if (*head > 0 && *head >= *cap / 2) {
    unsigned char *v;
    memcpy(&v, ptr_slot, sizeof v);
    memmove(v, v + *head * elem_size, n * elem_size);
    *head = 0;
    return 0;
  }
  /* Growing keeps the dead prefix: [head, head+n) stays where it is. */
  if (n == SIZE_MAX || *head > SIZE_MAX - n - 1) return -1;
  return rgpu_array_reserve(ptr_slot, cap, *head + n + 1, elem_size, first_cap);
}
