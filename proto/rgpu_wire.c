#include "rgpu_wire.h"

#include <stdlib.h>

const char *rgpu_proto_strerror(int code) {
  switch (code) {
    case RGPU_PROTO_OK: return "ok";
    case RGPU_PROTO_ETRUNC: return "message truncated";
    case RGPU_PROTO_ETOOBIG: return "length or count over its limit";
    case RGPU_PROTO_ETRAILING: return "unexpected bytes after the last field";
    case RGPU_PROTO_EBADMAGIC: return "bad frame magic (not an rgpu peer?)";
    case RGPU_PROTO_EVERSION: return "unsupported protocol version";
    case RGPU_PROTO_EKIND: return "unknown frame kind";
    case RGPU_PROTO_EOPCODE: return "unknown opcode";
    case RGPU_PROTO_ENOMEM: return "out of memory";
    case RGPU_PROTO_EINVAL: return "inconsistent message content";
    default: return "unknown protocol error";
  }
}

void rgpu_buf_init(rgpu_buf *b) { memset(b, 0, sizeof *b); }

void rgpu_buf_free(rgpu_buf *b) {
  free(b->data);
  memset(b, 0, sizeof *b);
}

void rgpu_buf_reset(rgpu_buf *b) {
  b->len = 0;
  b->err = 0;
}

int rgpu_buf_reserve(rgpu_buf *b, size_t extra) {
  if (b->err) return b->err;
  if (extra > SIZE_MAX / 2 - b->len) return b->err = RGPU_PROTO_ENOMEM;
  size_t need = b->len + extra;
  if (need <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < need) cap *= 2;
  uint8_t *d = realloc(b->data, cap);
  if (!d) return b->err = RGPU_PROTO_ENOMEM;
  b->data = d;
  b->cap = cap;
  return 0;
}

void rgpu_buf_put(rgpu_buf *b, const void *p, size_t n) {
  if (n == 0 || rgpu_buf_reserve(b, n)) return;
  memcpy(b->data + b->len, p, n);
  b->len += n;
}

void rgpu_buf_put_bytes(rgpu_buf *b, const void *p, size_t n) {
  if (n > UINT32_MAX) {
    if (!b->err) b->err = RGPU_PROTO_ETOOBIG;
    return;
  }
  rgpu_buf_put_u32(b, (uint32_t)n);
  rgpu_buf_put(b, p, n);
}

const uint8_t *rgpu_reader_get_bytes(rgpu_reader *r, size_t max, size_t *len_out) {
  uint32_t n = rgpu_reader_get_u32(r);
  *len_out = 0;
  if (r->err) return NULL;
  if (n > max) {
    r->err = RGPU_PROTO_ETOOBIG;
    return NULL;
  }
  const uint8_t *q = rgpu_reader_take(r, n);
  if (q) *len_out = n;
  return q;
}

int rgpu_reader_finish(rgpu_reader *r) {
  if (r->err) return r->err;
  if (r->off != r->len) return r->err = RGPU_PROTO_ETRAILING;
  return 0;
}

int rgpu_strlist_next(rgpu_strlist_iter *it, const char **s, size_t *len) {
  if (it->left < 4) return 0;
  uint32_t n;
  memcpy(&n, it->p, 4);
  if (n > it->left - 4) return 0; /* cannot happen on validated lists */
  *s = (const char *)it->p + 4;
  *len = n;
  it->p += 4 + (size_t)n;
  it->left -= 4 + (size_t)n;
  return 1;
}

int rgpu_str_copy(char *dst, size_t cap, const void *s, size_t len) {
  if (cap == 0 || len >= cap) {
    if (cap) dst[0] = 0;
    return -1;
  }
  memcpy(dst, s, len);
  dst[len] = 0;
  return 0;
}
