/* sg_ptx_printf: device printf (vprintf) formatting.
 *
 * nvcc passes the format string's generic address and a buffer of
 * arguments, each aligned to its own size (ints 4, doubles/pointers/long
 * long 8; floats are promoted to double).  We walk the format, pull each
 * argument from the buffer and format it with the host snprintf using a
 * rebuilt, sanitized conversion spec, so no user text ever reaches snprintf
 * as a format. */
#include "sg_ptx_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MAX_FMT 4096

typedef struct {
  char *out;
  size_t len, cap;
} sbuf;

static void put(sbuf *b, const char *s, size_t n) {
  if (b->len + 1 >= b->cap) { b->len += n; return; }
  size_t room = b->cap - 1 - b->len;
  size_t k = n < room ? n : room;
  memcpy(b->out + b->len, s, k);
  b->len += n;
}

int sg_ptx_format_printf(sg_ptx_read_fn read, void *ctx, uint64_t fmt_addr, uint64_t args_addr, char *out,
                         size_t outlen) {
  char fmt[MAX_FMT + 1];
  size_t flen = 0;
  /* the format string may end near the end of its allocation: read bytewise
   * until the NUL */
  while (flen < MAX_FMT) {
    char c;
    if (read(ctx, fmt_addr + flen, &c, 1)) return -1;
    if (!c) break;
    fmt[flen++] = c;
  }
  fmt[flen] = 0;
  sbuf b = {out, 0, outlen};
  uint64_t argp = args_addr;
  for (size_t i = 0; i < flen;) {
    if (fmt[i] != '%') {
      size_t j = i;
      while (j < flen && fmt[j] != '%') j++;
      put(&b, fmt + i, j - i);
      i = j;
      continue;
    }
    if (i + 1 < flen && fmt[i + 1] == '%') { put(&b, "%", 1); i += 2; continue; }
    size_t start = i++;
    char spec[32];
    size_t sl = 0;
    spec[sl++] = '%';
    while (i < flen && strchr("-+ #0", fmt[i])) { if (sl < 8) spec[sl++] = fmt[i]; i++; }
    int digits = 0;
    if (i < flen && fmt[i] == '*') { /* width from the argument list */
      int32_t wv;
      argp = (argp + 3) & ~(uint64_t)3;
      if (read(ctx, argp, &wv, 4)) return -1;
      argp += 4;
      if (wv < 0) { spec[sl++] = '-'; wv = wv == INT32_MIN ? 0 : -wv; }
      if (wv > 999) wv = 999;
      sl += (size_t)snprintf(spec + sl, sizeof spec - sl, "%d", (int)wv);
      i++;
    } else {
      while (i < flen && fmt[i] >= '0' && fmt[i] <= '9') { if (digits < 3) spec[sl++] = fmt[i]; digits++; i++; }
    }
    if (i < flen && fmt[i] == '.') {
      spec[sl++] = '.';
      i++;
      digits = 0;
      if (i < flen && fmt[i] == '*') {
        int32_t pv;
        argp = (argp + 3) & ~(uint64_t)3;
        if (read(ctx, argp, &pv, 4)) return -1;
        argp += 4;
        if (pv < 0) pv = 0;
        if (pv > 99) pv = 99;
        sl += (size_t)snprintf(spec + sl, sizeof spec - sl, "%d", (int)pv);
        i++;
      } else {
        while (i < flen && fmt[i] >= '0' && fmt[i] <= '9') { if (digits < 2) spec[sl++] = fmt[i]; digits++; i++; }
      }
    }
    int lng = 0, half = 0;
    while (i < flen && strchr("hlLqjzt", fmt[i])) {
      if (fmt[i] == 'l' || fmt[i] == 'L' || fmt[i] == 'q' || fmt[i] == 'j' || fmt[i] == 'z' || fmt[i] == 't') lng++;
      else half++;
      i++;
    }
    if (i >= flen) { put(&b, fmt + start, flen - start); break; }
    char conv = fmt[i++];
    char tmp[512];
    int n = 0;
    switch (conv) {
      case 'd': case 'i': case 'u': case 'x': case 'X': case 'o': case 'c': {
        uint64_t v = 0;
        unsigned sz = lng ? 8 : 4;
        argp = (argp + sz - 1) & ~(uint64_t)(sz - 1);
        if (read(ctx, argp, &v, sz)) return -1;
        argp += sz;
        if (conv == 'c') { spec[sl++] = 'c'; spec[sl] = 0; n = snprintf(tmp, sizeof tmp, spec, (int)(unsigned char)v); break; }
        spec[sl++] = 'l'; spec[sl++] = 'l'; spec[sl++] = conv; spec[sl] = 0;
        if (conv == 'd' || conv == 'i') {
          long long s = lng ? (long long)(int64_t)v : (long long)(int32_t)(uint32_t)v;
          if (half == 1) s = (short)s;
          if (half >= 2) s = (signed char)s;
          n = snprintf(tmp, sizeof tmp, spec, s);
        } else {
          unsigned long long u = lng ? v : (uint32_t)v;
          if (half == 1) u = (unsigned short)u;
          if (half >= 2) u = (unsigned char)u;
          n = snprintf(tmp, sizeof tmp, spec, u);
        }
        break;
      }
      case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': case 'a': case 'A': {
        double d;
        argp = (argp + 7) & ~(uint64_t)7;
        if (read(ctx, argp, &d, 8)) return -1;
        argp += 8;
        spec[sl++] = conv; spec[sl] = 0;
        n = snprintf(tmp, sizeof tmp, spec, d);
        break;
      }
      case 'p': {
        uint64_t v;
        argp = (argp + 7) & ~(uint64_t)7;
        if (read(ctx, argp, &v, 8)) return -1;
        argp += 8;
        n = snprintf(tmp, sizeof tmp, "0x%llx", (unsigned long long)v);
        break;
      }
      case 's': {
        uint64_t p;
        argp = (argp + 7) & ~(uint64_t)7;
        if (read(ctx, argp, &p, 8)) return -1;
        argp += 8;
        char str[1024];
        size_t k = 0;
        if (!p) { memcpy(str, "(null)", 7); k = 6; }
        else {
          while (k < sizeof str - 1) { char c; if (read(ctx, p + k, &c, 1)) return -1; if (!c) break; str[k++] = c; }
          str[k] = 0;
        }
        spec[sl++] = 's'; spec[sl] = 0;
        n = snprintf(tmp, sizeof tmp, spec, str);
        break;
      }
      default:
        put(&b, fmt + start, i - start);
        continue;
    }
    if (n > 0) put(&b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
  }
  if (outlen) out[b.len < outlen ? b.len : outlen - 1] = 0;
  return (int)(b.len < outlen ? b.len : outlen - 1);
}
