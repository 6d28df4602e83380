/* rgpu_array: growable arrays.
 *
 * One growth rule for every array that appends: capacity doubles (starting
 * at a caller-chosen minimum, so a table that always holds dozens does not
 * reallocate five times on the way), and every size computation is checked
 * for overflow, because several of these arrays grow from counts that came
 * off the wire.  The element pointer and the capacity stay in the caller's
 * own struct, under its own names, so adopting this changes no layout and
 * adds no indirection to the readers of the array.
 *
 *   sg_alloc *v; size_t n, cap;
 *   if (RGPU_ARRAY_RESERVE(v, cap, n + 1, 64)) return -1;   // out of memory
 *   v[n++] = a;
 *
 * For a new array RGPU_ARRAY(T) declares the usual { T *v; size_t n, cap; }
 * and rgpu_array_push appends to it. */
#ifndef RGPU_ARRAY_H
#define RGPU_ARRAY_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* Makes room for `need` elements of `elem_size` bytes in the array whose
 * pointer is stored at `ptr_slot` (a T **, passed as void * so any element
 * type fits) and whose capacity is *cap.  Grows to the larger of double the
 * capacity, `need` and `first_cap`.  Returns 0, or -1 with the array
 * unchanged when the size overflows or realloc fails. */
int rgpu_array_reserve(void *ptr_slot, size_t *cap, size_t need, size_t elem_size,
                       size_t first_cap);

/* The capacity rgpu_array_reserve would grow to, or 0 on overflow; for
 * arrays grown with something other than realloc (several parallel arrays
 * sharing one count, fields narrower than size_t).  Header-only, so
 * targets that link nothing of rgpu can use it. */
static inline size_t rgpu_array_next_cap(size_t cap, size_t need, size_t elem_size,
                                         size_t first_cap) {
  if (elem_size == 0) return 0;
  size_t nc = cap > SIZE_MAX / 2 ? SIZE_MAX : cap * 2;
  if (nc < first_cap) nc = first_cap;
  if (nc < need) nc = need;
  /* Doubling past what fits in memory is cut back to the largest count
   * that does, so a reservation that is possible still succeeds. */
  if (nc > SIZE_MAX / elem_size) nc = SIZE_MAX / elem_size;
  return nc < need ? 0 : nc;
}

/* cap must be a size_t lvalue: _Generic turns another type into a compile
 * error instead of a silent write through a wrong-sized pointer. */
#define RGPU_ARRAY_RESERVE(v, cap, need, first_cap)                                     \
  rgpu_array_reserve(&(v), _Generic(&(cap), size_t *: &(cap)), (need), sizeof *(v), \
                     (first_cap))

/* Array FIFO: live elements v[head .. head+n), taken from the front by
 * head++ and pushed at v[head + n].  Makes room for one more push: slides
 * the live part to the front when the dead prefix is at least half the
 * capacity (each element then moves at most once per doubling, so pushes
 * stay amortized O(1)), else grows like rgpu_array_reserve.  Returns 0, or
 * -1 with everything unchanged. */
int rgpu_array_queue_room(void *ptr_slot, size_t *head, size_t n, size_t *cap, size_t elem_size,
                          size_t first_cap);
#define RGPU_ARRAY_QUEUE_ROOM(v, head, n, cap, first_cap)                                     \
  rgpu_array_queue_room(&(v), _Generic(&(head), size_t *: &(head)), (n),                     \
                        _Generic(&(cap), size_t *: &(cap)), sizeof *(v), (first_cap))

#define RGPU_ARRAY(T) \
  struct {            \
    T *v;             \
    size_t n, cap;    \
  }

/* Appends one value to an RGPU_ARRAY; evaluates to 0, or -1 when out of
 * memory (the array is then unchanged). */
#define rgpu_array_push(a, value)                                               \
  (RGPU_ARRAY_RESERVE((a)->v, (a)->cap, (a)->n + 1, 16) ? -1                    \
                                                        : ((a)->v[(a)->n++] = (value), 0))

#define rgpu_array_free(a) \
  do {                     \
    free((a)->v);          \
    (a)->v = NULL;         \
    (a)->n = (a)->cap = 0; \
  } while (0)

#endif /* RGPU_ARRAY_H */
