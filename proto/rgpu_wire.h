/* rgpu_wire: the compact little-endian encoding every rgpu message uses.
 *
 * A writer appends to a growable buffer the caller owns; a reader walks a
 * bounded byte range and latches the first error, so a decoder can read all
 * fields and check once at the end.  No function here reads past the range
 * it was given, whatever the input: the decoders built on it are fed
 * straight from the network and are fuzzed. */
#ifndef RGPU_WIRE_H
#define RGPU_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "rgpu's wire format is little-endian and the codecs assume a little-endian host"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes of the protocol layer (negative, distinct from errno values
 * used by the transport). */
enum {
  RGPU_PROTO_OK = 0,
  RGPU_PROTO_ETRUNC = -1001,    /* input ended inside a field */
  RGPU_PROTO_ETOOBIG = -1002,   /* a length or count exceeds its limit */
  RGPU_PROTO_ETRAILING = -1003, /* bytes left over after the last field */
  RGPU_PROTO_EBADMAGIC = -1004,
  RGPU_PROTO_EVERSION = -1005,
  RGPU_PROTO_EKIND = -1006,
  RGPU_PROTO_EOPCODE = -1007,
  RGPU_PROTO_ENOMEM = -1008,
  RGPU_PROTO_EINVAL = -1009     /* inconsistent content (e.g. NUL in a string) */
};
const char *rgpu_proto_strerror(int code);

typedef struct {
  uint8_t *data;
  size_t len;
  size_t cap;
  int err; /* first error, latched */
} rgpu_buf;

void rgpu_buf_init(rgpu_buf *b);
void rgpu_buf_free(rgpu_buf *b);
void rgpu_buf_reset(rgpu_buf *b); /* len = 0, keeps memory */
int rgpu_buf_reserve(rgpu_buf *b, size_t extra);
void rgpu_buf_put(rgpu_buf *b, const void *p, size_t n);
static inline void rgpu_buf_put_u8(rgpu_buf *b, uint8_t v) { rgpu_buf_put(b, &v, 1); }
static inline void rgpu_buf_put_u16(rgpu_buf *b, uint16_t v) { rgpu_buf_put(b, &v, 2); }
static inline void rgpu_buf_put_u32(rgpu_buf *b, uint32_t v) { rgpu_buf_put(b, &v, 4); }
static inline void rgpu_buf_put_u64(rgpu_buf *b, uint64_t v) { rgpu_buf_put(b, &v, 8); }
static inline void rgpu_buf_put_f32(rgpu_buf *b, float v) { rgpu_buf_put(b, &v, 4); }
static inline void rgpu_buf_put_f64(rgpu_buf *b, double v) { rgpu_buf_put(b, &v, 8); }
/* u32 length, then the bytes. */
void rgpu_buf_put_bytes(rgpu_buf *b, const void *p, size_t n);

typedef struct {
  const uint8_t *p;
  size_t len;
  size_t off;
  int err;
} rgpu_reader;

static inline void rgpu_reader_init(rgpu_reader *r, const void *p, size_t n) {
  r->p = (const uint8_t *)p;
  r->len = n;
  r->off = 0;
  r->err = 0;
}
static inline size_t rgpu_reader_left(const rgpu_reader *r) { return r->len - r->off; }
/* Returns a pointer to the next n bytes and advances, or NULL (and latches
 * RGPU_PROTO_ETRUNC) if fewer remain. */
static inline const uint8_t *rgpu_reader_take(rgpu_reader *r, size_t n) {
  if (r->err) return NULL;
  if (n > rgpu_reader_left(r)) {
    r->err = RGPU_PROTO_ETRUNC;
    return NULL;
  }
  const uint8_t *q = r->p + r->off;
  r->off += n;
  return q;
}
#define RGPU_READER_GET(bits, type)                                       \
  static inline type rgpu_reader_get_##bits(rgpu_reader *r) {             \
    type v = 0;                                                           \
    const uint8_t *q = rgpu_reader_take(r, sizeof v);                     \
    if (q) memcpy(&v, q, sizeof v);                                       \
    return v;                                                             \
  }
RGPU_READER_GET(u8, uint8_t)
RGPU_READER_GET(u16, uint16_t)
RGPU_READER_GET(u32, uint32_t)
RGPU_READER_GET(u64, uint64_t)
RGPU_READER_GET(i32, int32_t)
RGPU_READER_GET(i64, int64_t)
RGPU_READER_GET(f32, float)
RGPU_READER_GET(f64, double)
#undef RGPU_READER_GET

/* Length-prefixed bytes with an upper bound; returns a pointer into the
 * input (no copy) and the length. */
const uint8_t *rgpu_reader_get_bytes(rgpu_reader *r, size_t max, size_t *len_out);
/* Finishes a decode: error if a field failed or bytes are left over. */
int rgpu_reader_finish(rgpu_reader *r);

/* Views used by the generated message structs. */
typedef struct {
  const void *data; /* encode: caller's bytes; decode: points into the frame */
  size_t len;
} rgpu_bytes;

/* Arrays of fixed-size little-endian elements.  On a little-endian host the
 * wire form is the native form, so encode takes the caller's array as is and
 * decode points into the frame; elements may be unaligned there, so read
 * them through the accessors. */
typedef struct {
  const void *data;
  uint32_t count;
} rgpu_array;
static inline uint32_t rgpu_array_u32(const rgpu_array *a, uint32_t i) {
  uint32_t v;
  memcpy(&v, (const uint8_t *)a->data + 4u * i, 4);
  return v;
}
static inline int32_t rgpu_array_i32(const rgpu_array *a, uint32_t i) {
  int32_t v;
  memcpy(&v, (const uint8_t *)a->data + 4u * i, 4);
  return v;
}
static inline uint64_t rgpu_array_u64(const rgpu_array *a, uint32_t i) {
  uint64_t v;
  memcpy(&v, (const uint8_t *)a->data + 8u * i, 8);
  return v;
}

/* A list of strings.  Encode: set `items` and `count`.  Decode: `raw` and
 * `raw_len` describe the validated wire form; iterate with
 * rgpu_strlist_next. Each wire item is u32 length + bytes (no NUL inside). */
typedef struct {
  const char *const *items; /* encode only */
  uint32_t count;
  const uint8_t *raw;       /* decode only */
  size_t raw_len;
} rgpu_strlist;
typedef struct {
  const uint8_t *p;
  size_t left;
} rgpu_strlist_iter;
static inline void rgpu_strlist_iter_init(rgpu_strlist_iter *it, const rgpu_strlist *l) {
  it->p = l->raw;
  it->left = l->raw_len;
}
/* Next string (not NUL-terminated) or 0 at the end. Safe only on decoded
 * (validated) lists. */
int rgpu_strlist_next(rgpu_strlist_iter *it, const char **s, size_t *len);
/* Copies a wire string into dst (size cap) with a terminating NUL; returns 0,
 * or -1 if it does not fit. */
int rgpu_str_copy(char *dst, size_t cap, const void *s, size_t len);

#ifdef __cplusplus
}
#endif
#endif
