/* The argument encoding of LIB_CALL (rgpu_messages.def): what the generated
 * client stubs write and the generated server dispatch reads.  One place,
 * so the two sides cannot drift; the generator (cublas/gen_cublas.py) only
 * decides which of these each parameter uses.
 *
 *   value      8 bytes: an integer or enum widened to int64_t
 *   address    8 bytes: a device address (or a device-mode scalar/result)
 *   scalar     host pointer mode: u32 length + the bytes the pointer
 *              points at; device mode: an address
 *
 * Nothing here allocates: the writer is an rgpu_buf, the reader an
 * rgpu_reader over the frame's tail, whose error latches (a short or
 * oversized argument list fails the whole decode, never reads past it). */
#ifndef RGPU_LIB_ARGS_H
#define RGPU_LIB_ARGS_H

#include <stdint.h>
#include <string.h>

#include "rgpu_wire.h"

/* LIB_CALL's `lib`. */
enum { RGPU_LIB_CUBLAS = 1 };

/* The reply: the library's status (u32), three reserved u32 (so results
 * start 16-byte aligned, as cuDoubleComplex wants), then the results. */
#define RGPU_LIB_REPLY_HEAD 16u
/* The largest host scalar or result one parameter carries (a
 * cuDoubleComplex is 16; rotm's parameter array is 5 doubles). */
#define RGPU_LIB_SCALAR_MAX 64u

/* FNV-1a of a function name: LIB_CALL's `fn`. */
static inline uint32_t rgpu_lib_fn_hash(const char *name) {
  uint32_t h = 2166136261u;
  for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 16777619u;
  return h;
}

static inline void rgpu_lib_put_value(rgpu_buf *b, int64_t v) { rgpu_buf_put_u64(b, (uint64_t)v); }
static inline void rgpu_lib_put_addr(rgpu_buf *b, const void *p) {
  rgpu_buf_put_u64(b, (uint64_t)(uintptr_t)p);
}
/* A scalar under pointer mode `device_mode`: its address, or n bytes at p. */
static inline void rgpu_lib_put_scalar(rgpu_buf *b, int device_mode, const void *p, size_t n) {
  if (device_mode)
    rgpu_lib_put_addr(b, p);
  else
    rgpu_buf_put_bytes(b, p, n);
}

static inline int64_t rgpu_lib_get_value(rgpu_reader *r) { return rgpu_reader_get_i64(r); }
static inline uint64_t rgpu_lib_get_addr(rgpu_reader *r) { return rgpu_reader_get_u64(r); }
/* A host-mode scalar of exactly n bytes, copied into out (at least n bytes);
 * a length other than n latches RGPU_PROTO_EINVAL. */
static inline void rgpu_lib_get_scalar_bytes(rgpu_reader *r, void *out, size_t n) {
  size_t len = 0;
  const uint8_t *p = rgpu_reader_get_bytes(r, RGPU_LIB_SCALAR_MAX, &len);
  if (!p) return;
  if (len != n) {
    r->err = RGPU_PROTO_EINVAL;
    return;
  }
  memcpy(out, p, n);
}

/* ---- extents (the server's checks and softgpu's CPU code) ----------------
 * Saturating: an extent that overflows is UINT64_MAX, which no allocation
 * holds, so a hostile size fails the check instead of wrapping around. */
static inline uint64_t rgpu_lib_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}
static inline uint64_t rgpu_lib_add(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}
/* Elements spanned by a column-major rows x cols matrix with leading
 * dimension ld (0 when empty). */
static inline uint64_t rgpu_lib_span_mat(int64_t rows, int64_t cols, int64_t ld) {
  if (rows <= 0 || cols <= 0) return 0;
  if (ld < rows) return UINT64_MAX;
  return rgpu_lib_add(rgpu_lib_mul((uint64_t)(cols - 1), (uint64_t)ld), (uint64_t)rows);
}
/* Elements spanned by a BLAS vector of n elements `inc` apart (a negative
 * increment walks the same span from its far end). */
static inline uint64_t rgpu_lib_span_vec(int64_t n, int64_t inc) {
  if (n <= 0) return 0;
  uint64_t step = inc < 0 ? (uint64_t)(-(inc + 1)) + 1 : (uint64_t)inc;
  return rgpu_lib_add(rgpu_lib_mul((uint64_t)(n - 1), step), 1);
}
/* Elements spanned by `count` operands of `span` elements, `stride` apart
 * (a negative stride would reach below the base: UINT64_MAX). */
static inline uint64_t rgpu_lib_span_batch(int64_t count, int64_t stride, uint64_t span) {
  if (count <= 0 || span == 0) return 0;
  if (count > 1 && stride < 0) return UINT64_MAX;
  return rgpu_lib_add(rgpu_lib_mul((uint64_t)(count - 1), (uint64_t)stride), span);
}

#endif
