/* rgpu_fatbin: see rgpu_fatbin.h.  Field layouts are in cuda-abi.md §2-3;
 * all multi-byte fields are little endian and read byte by byte because an
 * image handed to us need not be aligned. */
#define _GNU_SOURCE /* strndup */
#include "rgpu_fatbin.h"

#include <limits.h>
#include <lz4.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "rgpu_array.h"

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32); }

const char *rgpu_fatbin_strerror(int err) {
  switch (err) {
  case RGPU_FATBIN_OK: return "success";
  case RGPU_FATBIN_ERR_ARG: return "invalid argument";
  case RGPU_FATBIN_ERR_MAGIC: return "not a fatbin (bad magic number)";
  case RGPU_FATBIN_ERR_TRUNCATED: return "image is truncated (a size field points past its end)";
  case RGPU_FATBIN_ERR_CORRUPT: return "image is corrupt (inconsistent header fields)";
  case RGPU_FATBIN_ERR_TOO_LARGE: return "image or payload exceeds the size limit";
  case RGPU_FATBIN_ERR_NOMEM: return "out of memory";
  case RGPU_FATBIN_ERR_DECOMPRESS: return "compressed payload is damaged";
  case RGPU_FATBIN_ERR_UNSUPPORTED: return "unsupported compression or ELF format";
  case RGPU_FATBIN_ERR_NOT_FOUND: return "no entry of the requested kind";
  default: return "unknown fatbin error";
  }
}

/* ---- fatbin walking ------------------------------------------------------ */

/* Size of the fixed part of an entry header that we decode; header_size may
 * be larger (PTX: 80, rdc PTX: 96, sm_100 ELF: 96/112) and is skipped. */
#define ENTRY_BASE_SIZE 64u

size_t rgpu_fatbin_image_size(const void *image) {
  if (!image) return 0;
  const uint8_t *p = image;
  if (rd32(p) != RGPU_FATBIN_MAGIC) return 0;
  uint16_t hs = rd16(p + 6);
  uint64_t fat = rd64(p + 8);
  if (hs < RGPU_FATBIN_HEADER_SIZE) return 0;
  if (fat > RGPU_FATBIN_MAX_SIZE - hs) return 0;
  return (size_t)(hs + fat);
}

int rgpu_fatbin_open(const void *image, size_t bound, rgpu_fatbin *out) {
  if (!image || !out) return RGPU_FATBIN_ERR_ARG;
  memset(out, 0, sizeof *out);
  const uint8_t *p = image;
  if (bound != RGPU_FATBIN_SIZE_UNKNOWN && bound < RGPU_FATBIN_HEADER_SIZE)
    return RGPU_FATBIN_ERR_TRUNCATED;
  if (rd32(p) != RGPU_FATBIN_MAGIC) return RGPU_FATBIN_ERR_MAGIC;
  uint16_t version = rd16(p + 4);
  uint16_t hs = rd16(p + 6);
  uint64_t fat = rd64(p + 8);
  if (version != 1 || hs < RGPU_FATBIN_HEADER_SIZE) return RGPU_FATBIN_ERR_CORRUPT;
  if (fat > RGPU_FATBIN_MAX_SIZE - hs) return RGPU_FATBIN_ERR_TOO_LARGE;
  size_t total = (size_t)hs + (size_t)fat;
  if (bound != RGPU_FATBIN_SIZE_UNKNOWN && total > bound) return RGPU_FATBIN_ERR_TRUNCATED;

  /* Two passes: count, then fill, so the array is allocated once. */
  size_t n = 0;
  for (int pass = 0; pass < 2; pass++) {
    size_t pos = hs, i = 0;
    while (pos < total) {
      size_t left = total - pos;
      if (left < ENTRY_BASE_SIZE) return RGPU_FATBIN_ERR_TRUNCATED;
      const uint8_t *e = p + pos;
      uint32_t ehs = rd32(e + 4);
      uint64_t size = rd64(e + 8);
      if (ehs < ENTRY_BASE_SIZE || ehs > left) return RGPU_FATBIN_ERR_TRUNCATED;
      if (size > left - ehs) return RGPU_FATBIN_ERR_TRUNCATED;
      uint32_t csz = rd32(e + 16);
      uint64_t flags = rd64(e + 40);
      uint64_t usz = rd64(e + 56);
      int lz4 = (flags & RGPU_FATBIN_FLAG_LZ4) != 0, zstd = (flags & RGPU_FATBIN_FLAG_ZSTD) != 0;
      if (lz4 && zstd) return RGPU_FATBIN_ERR_CORRUPT;
      if ((lz4 || zstd) && (csz == 0 || csz > size || usz == 0)) return RGPU_FATBIN_ERR_CORRUPT;
      if (!(lz4 || zstd) && csz != 0) return RGPU_FATBIN_ERR_UNSUPPORTED;
      if (usz > RGPU_FATBIN_MAX_SIZE) return RGPU_FATBIN_ERR_TOO_LARGE;
      if (pass == 1) {
        rgpu_fatbin_entry *x = &out->entries[i];
        x->kind = rd16(e);
        x->ptx_minor = rd16(e + 24);
        x->ptx_major = rd16(e + 26);
        x->arch = rd32(e + 28);
        x->flags = flags;
        x->offset = pos;
        x->payload = e + ehs;
        x->payload_size = (size_t)size;
        x->compressed_size = (lz4 || zstd) ? csz : 0;
        x->uncompressed_size = (lz4 || zstd) ? (size_t)usz : 0;
      }
      i++;
      if (i > RGPU_FATBIN_MAX_ENTRIES) return RGPU_FATBIN_ERR_CORRUPT;
      pos += ehs + (size_t)size;
    }
    if (pass == 0) {
      n = i;
      if (n > 0) {
        out->entries = calloc(n, sizeof *out->entries);
        if (!out->entries) return RGPU_FATBIN_ERR_NOMEM;
      }
    }
  }
  out->image = p;
  out->size = total;
  out->nentries = n;
  return RGPU_FATBIN_OK;
}

void rgpu_fatbin_close(rgpu_fatbin *fb) {
  if (!fb) return;
  free(fb->entries);
  memset(fb, 0, sizeof *fb);
}

static const rgpu_fatbin_entry *best_of_kind(const rgpu_fatbin *fb, unsigned kind, unsigned max_arch) {
  if (!fb) return NULL;
  const rgpu_fatbin_entry *best = NULL;
  for (size_t i = 0; i < fb->nentries; i++) {
    const rgpu_fatbin_entry *e = &fb->entries[i];
    if (e->kind != kind) continue;
    if (max_arch && e->arch > max_arch) continue;
    if (!best || e->arch > best->arch) best = e;
  }
  return best;
}

const rgpu_fatbin_entry *rgpu_fatbin_best_ptx(const rgpu_fatbin *fb, unsigned max_arch) {
  return best_of_kind(fb, RGPU_FATBIN_KIND_PTX, max_arch);
}

const rgpu_fatbin_entry *rgpu_fatbin_best_elf(const rgpu_fatbin *fb, unsigned max_arch) {
  return best_of_kind(fb, RGPU_FATBIN_KIND_ELF, max_arch);
}

int rgpu_fatbin_extract(const rgpu_fatbin_entry *e, size_t limit, void **out, size_t *out_len) {
  if (!e || !out || !out_len || (!e->payload && e->payload_size)) return RGPU_FATBIN_ERR_ARG;
  *out = NULL;
  *out_len = 0;
  if (limit == 0 || limit > RGPU_FATBIN_MAX_SIZE) limit = RGPU_FATBIN_MAX_SIZE;
  int lz4 = (e->flags & RGPU_FATBIN_FLAG_LZ4) != 0, zstd = (e->flags & RGPU_FATBIN_FLAG_ZSTD) != 0;
  size_t n;
  uint8_t *buf;
  if (!lz4 && !zstd) {
    n = e->payload_size;
    if (n > limit) return RGPU_FATBIN_ERR_TOO_LARGE;
    buf = malloc(n + 1);
    if (!buf) return RGPU_FATBIN_ERR_NOMEM;
    if (n) memcpy(buf, e->payload, n);
  } else {
    n = e->uncompressed_size;
    if (n == 0 || e->compressed_size == 0 || e->compressed_size > e->payload_size)
      return RGPU_FATBIN_ERR_CORRUPT;
    if (n > limit) return RGPU_FATBIN_ERR_TOO_LARGE;
    if (lz4) {
      /* An LZ4 block cannot expand more than 255:1; a larger claim is a
       * lie that would make us allocate for nothing. */
      if (e->compressed_size > INT_MAX || n > INT_MAX) return RGPU_FATBIN_ERR_TOO_LARGE;
      if (n / 255 > e->compressed_size + 16) return RGPU_FATBIN_ERR_CORRUPT;
    } else {
      unsigned long long fcs = ZSTD_getFrameContentSize(e->payload, e->compressed_size);
      if (fcs == ZSTD_CONTENTSIZE_ERROR) return RGPU_FATBIN_ERR_DECOMPRESS;
      if (fcs != ZSTD_CONTENTSIZE_UNKNOWN && fcs != n) return RGPU_FATBIN_ERR_CORRUPT;
    }
    buf = malloc(n + 1);
    if (!buf) return RGPU_FATBIN_ERR_NOMEM;
    if (lz4) {
      int got = LZ4_decompress_safe((const char *)e->payload, (char *)buf, (int)e->compressed_size, (int)n);
      if (got < 0 || (size_t)got != n) {
        free(buf);
        return RGPU_FATBIN_ERR_DECOMPRESS;
      }
    } else {
      size_t got = ZSTD_decompress(buf, n, e->payload, e->compressed_size);
      if (ZSTD_isError(got) || got != n) {
        free(buf);
        return RGPU_FATBIN_ERR_DECOMPRESS;
      }
    }
  }
  /* PTX is stored NUL-padded to 8 bytes; the padding is not part of the text. */
  if (e->kind == RGPU_FATBIN_KIND_PTX)
    while (n > 0 && buf[n - 1] == 0) n--;
  buf[n] = 0;
  *out = buf;
  *out_len = n;
  return RGPU_FATBIN_OK;
}

/* ---- cubin .nv.info parsing -------------------------------------------- */

#define EIATTR_KPARAM_INFO 0x17
#define EIATTR_CBANK_PARAM_SIZE 0x19
#define EIATTR_KPARAM_INFO_V2 0x45
#define EIFMT_NVAL 1
#define EIFMT_BVAL 2
#define EIFMT_HVAL 3
#define EIFMT_SVAL 4

typedef struct {
  uint32_t ordinal, offset, size;
} raw_param;

static int cmp_raw_param(const void *a, const void *b) {
  const raw_param *x = a, *y = b;
  return x->ordinal < y->ordinal ? -1 : x->ordinal > y->ordinal;
}

/* Decodes one .nv.info.<kernel> section into k (name already set). */
static int parse_nv_info(const uint8_t *s, size_t len, rgpu_fatbin_kernel *k) {
  size_t cap = len / 16 + 1, n = 0;
  raw_param *raw = calloc(cap, sizeof *raw);
  if (!raw) return RGPU_FATBIN_ERR_NOMEM;
  long cbank_size = -1;
  size_t pos = 0;
  int rc = RGPU_FATBIN_OK;
  while (pos < len) {
    if (len - pos < 4) { rc = RGPU_FATBIN_ERR_TRUNCATED; goto out; }
    uint8_t fmt = s[pos], attr = s[pos + 1];
    size_t rec = 4;
    if (fmt == EIFMT_SVAL) {
      size_t plen = rd16(s + pos + 2);
      if (plen > len - pos - 4) { rc = RGPU_FATBIN_ERR_TRUNCATED; goto out; }
      const uint8_t *v = s + pos + 4;
      if (attr == EIATTR_KPARAM_INFO || attr == EIATTR_KPARAM_INFO_V2) {
        if (plen < 12) { rc = RGPU_FATBIN_ERR_CORRUPT; goto out; }
        if (n == cap) { rc = RGPU_FATBIN_ERR_CORRUPT; goto out; }
        raw[n].ordinal = rd16(v + 4);
        raw[n].offset = rd16(v + 6);
        uint32_t packed = rd32(v + 8);
        raw[n].size = attr == EIATTR_KPARAM_INFO ? (packed >> 18) & 0x3fff : packed;
        n++;
      }
      rec = 4 + plen;
    } else if (fmt == EIFMT_HVAL) {
      if (attr == EIATTR_CBANK_PARAM_SIZE) cbank_size = rd16(s + pos + 2);
    } else if (fmt != EIFMT_NVAL && fmt != EIFMT_BVAL) {
      rc = RGPU_FATBIN_ERR_CORRUPT;
      goto out;
    }
    rec = (rec + 3) & ~(size_t)3;
    if (rec > len - pos) rec = len - pos;
    pos += rec;
  }
  qsort(raw, n, sizeof *raw, cmp_raw_param);
  size_t end = 0;
  for (size_t i = 0; i < n; i++) {
    /* Ordinals must be exactly 0..n-1 and parameters must not overlap;
     * anything else means we misread the section. */
    if (raw[i].ordinal != i) { rc = RGPU_FATBIN_ERR_CORRUPT; goto out; }
    if (raw[i].size == 0 || raw[i].offset < end) { rc = RGPU_FATBIN_ERR_CORRUPT; goto out; }
    end = (size_t)raw[i].offset + raw[i].size;
  }
  if (cbank_size >= 0 && (size_t)cbank_size < end) {
    rc = RGPU_FATBIN_ERR_CORRUPT;
    goto out;
  }
  if (n) {
    k->params = calloc(n, sizeof *k->params);
    if (!k->params) { rc = RGPU_FATBIN_ERR_NOMEM; goto out; }
    for (size_t i = 0; i < n; i++) {
      k->params[i].offset = raw[i].offset;
      k->params[i].size = raw[i].size;
    }
  }
  k->nparams = n;
  k->param_bytes = (cbank_size >= 0 && (size_t)cbank_size >= end) ? (size_t)cbank_size : end;
out:
  free(raw);
  return rc;
}

#define SHT_NOBITS_ 8u
#define NV_INFO_PREFIX ".nv.info."

int rgpu_fatbin_elf_params(const void *elf, size_t len, rgpu_fatbin_param_table *out) {
  if (!elf || !out) return RGPU_FATBIN_ERR_ARG;
  memset(out, 0, sizeof *out);
  const uint8_t *p = elf;
  if (len < 64) return RGPU_FATBIN_ERR_TRUNCATED;
  if (memcmp(p, "\x7f" "ELF", 4) != 0) return RGPU_FATBIN_ERR_MAGIC;
  if (p[4] != 2 || p[5] != 1) return RGPU_FATBIN_ERR_UNSUPPORTED; /* ELF64 little endian only */
  uint64_t shoff = rd64(p + 0x28);
  uint16_t shentsize = rd16(p + 0x3a);
  size_t shnum = rd16(p + 0x3c);
  size_t shstrndx = rd16(p + 0x3e);
  if (shoff == 0) return RGPU_FATBIN_ERR_NOT_FOUND;
  if (shentsize < 64) return RGPU_FATBIN_ERR_CORRUPT;
  if (shoff > len || len - shoff < shentsize) return RGPU_FATBIN_ERR_TRUNCATED;
  const uint8_t *sh0 = p + shoff;
  /* Extended numbering (ELF gABI): counts that do not fit in 16 bits live in section 0. */
  if (shnum == 0) {
    uint64_t big = rd64(sh0 + 32);
    if (big > 1u << 20) return RGPU_FATBIN_ERR_CORRUPT;
    shnum = (size_t)big;
  }
  if (shstrndx == 0xffff) shstrndx = rd32(sh0 + 40);
  if (shnum > (len - shoff) / shentsize) return RGPU_FATBIN_ERR_TRUNCATED;
  if (shstrndx >= shnum) return RGPU_FATBIN_ERR_CORRUPT;

  const uint8_t *strsh = sh0 + shstrndx * shentsize;
  uint64_t stroff = rd64(strsh + 24), strsize = rd64(strsh + 32);
  if (stroff > len || strsize > len - stroff) return RGPU_FATBIN_ERR_TRUNCATED;
  const char *strtab = (const char *)p + stroff;

  size_t cap = 0;
  for (size_t i = 0; i < shnum; i++) {
    const uint8_t *sh = sh0 + i * shentsize;
    uint32_t nm = rd32(sh);
    if (nm >= strsize) continue;
    size_t maxn = (size_t)(strsize - nm);
    const char *name = strtab + nm;
    size_t nlen = strnlen(name, maxn);
    if (nlen == maxn) { rgpu_fatbin_param_table_free(out); return RGPU_FATBIN_ERR_CORRUPT; }
    if (nlen <= strlen(NV_INFO_PREFIX) || memcmp(name, NV_INFO_PREFIX, strlen(NV_INFO_PREFIX)) != 0)
      continue;
    if (rd32(sh + 4) == SHT_NOBITS_) continue;
    uint64_t off = rd64(sh + 24), size = rd64(sh + 32);
    if (off > len || size > len - off) { rgpu_fatbin_param_table_free(out); return RGPU_FATBIN_ERR_TRUNCATED; }
    if (RGPU_ARRAY_RESERVE(out->kernels, cap, out->nkernels + 1, 8)) {
      rgpu_fatbin_param_table_free(out);
      return RGPU_FATBIN_ERR_NOMEM;
    }
    rgpu_fatbin_kernel *k = &out->kernels[out->nkernels];
    memset(k, 0, sizeof *k);
    const char *kname = name + strlen(NV_INFO_PREFIX);
    k->name = strdup(kname);
    if (!k->name) { rgpu_fatbin_param_table_free(out); return RGPU_FATBIN_ERR_NOMEM; }
    out->nkernels++;
    int rc = parse_nv_info(p + off, (size_t)size, k);
    if (rc) { rgpu_fatbin_param_table_free(out); return rc; }
  }
  return RGPU_FATBIN_OK;
}

void rgpu_fatbin_param_table_free(rgpu_fatbin_param_table *t) {
  if (!t) return;
  for (size_t i = 0; i < t->nkernels; i++) {
    free(t->kernels[i].name);
    free(t->kernels[i].params);
  }
  free(t->kernels);
  memset(t, 0, sizeof *t);
}

const rgpu_fatbin_kernel *rgpu_fatbin_param_table_find(const rgpu_fatbin_param_table *t,
                                                       const char *name) {
  if (!t || !name) return NULL;
  for (size_t i = 0; i < t->nkernels; i++)
    if (strcmp(t->kernels[i].name, name) == 0) return &t->kernels[i];
  return NULL;
}

/* ---- PTX .entry signatures ---------------------------------------------- */

/* Caps that no real kernel approaches (the driver limits parameters to
 * 32764 bytes); beyond them the text is treated as corrupt. */
#define PTX_MAX_PARAMS 4096u
#define PTX_MAX_PARAM_BYTES (1u << 24)

typedef struct {
  const char *p, *end;
} ptx_lexer;

typedef struct {
  const char *s;
  size_t n;
} ptx_tok;

static int tok_is(ptx_tok t, const char *lit) { return strlen(lit) == t.n && memcmp(t.s, lit, t.n) == 0; }

/* Next token: a run of identifier characters (directives and names include
 * '.', '$', '%'), or one punctuation character.  Comments and string
 * literals are skipped.  Returns 0 at the end of the text. */
static int ptx_next(ptx_lexer *lx, ptx_tok *t) {
  for (;;) {
    while (lx->p < lx->end && (*lx->p == ' ' || *lx->p == '\t' || *lx->p == '\n' || *lx->p == '\r')) lx->p++;
    if (lx->p >= lx->end || *lx->p == 0) return 0;
    if (lx->end - lx->p >= 2 && lx->p[0] == '/' && lx->p[1] == '/') {
      while (lx->p < lx->end && *lx->p != '\n') lx->p++;
      continue;
    }
    if (lx->end - lx->p >= 2 && lx->p[0] == '/' && lx->p[1] == '*') {
      lx->p += 2;
      while (lx->end - lx->p >= 2 && !(lx->p[0] == '*' && lx->p[1] == '/')) lx->p++;
      lx->p = lx->end - lx->p >= 2 ? lx->p + 2 : lx->end;
      continue;
    }
    if (*lx->p == '"') {
      for (lx->p++; lx->p < lx->end && *lx->p != '"'; lx->p++)
        if (*lx->p == '\\' && lx->p + 1 < lx->end) lx->p++;
      if (lx->p < lx->end) lx->p++;
      continue;
    }
    break;
  }
  t->s = lx->p;
  while (lx->p < lx->end) {
    char c = *lx->p;
    int ident = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                c == '.' || c == '$' || c == '%';
    if (!ident) break;
    lx->p++;
  }
  if (lx->p == t->s) lx->p++; /* punctuation */
  t->n = (size_t)(lx->p - t->s);
  return 1;
}

static unsigned ptx_type_size(ptx_tok t) {
  static const struct { const char *name; unsigned size; } types[] = {
      {".b8", 1},  {".u8", 1},  {".s8", 1},  {".b16", 2}, {".u16", 2}, {".s16", 2}, {".f16", 2},
      {".bf16", 2}, {".b32", 4}, {".u32", 4}, {".s32", 4}, {".f32", 4}, {".f16x2", 4}, {".bf16x2", 4},
      {".b64", 8}, {".u64", 8}, {".s64", 8}, {".f64", 8}, {".b128", 16},
  };
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
    if (tok_is(t, types[i].name)) return types[i].size;
  return 0;
}

/* Caps that no real kernel approaches (the driver limits parameters to
 * 32764 bytes); beyond them the text is treated as corrupt. */
#define PTX_MAX_PARAMS 4096u
#define PTX_MAX_PARAM_BYTES (1u << 24)

static int parse_u32(ptx_tok t, uint32_t *v) {
  if (!t.n) return -1;
  uint64_t x = 0;
  for (size_t i = 0; i < t.n; i++) {
    if (t.s[i] < '0' || t.s[i] > '9') return -1;
    x = x * 10 + (uint64_t)(t.s[i] - '0');
    if (x > PTX_MAX_PARAM_BYTES) return -1;
  }
  *v = (uint32_t)x;
  return 0;
}

/* Parses one ".entry name(...)" whose ".entry" was just read into k. */
static int ptx_entry(ptx_lexer *lx, rgpu_fatbin_kernel *k) {
  ptx_tok t;
  if (!ptx_next(lx, &t)) return RGPU_FATBIN_ERR_TRUNCATED;
  k->name = strndup(t.s, t.n);
  if (!k->name) return RGPU_FATBIN_ERR_NOMEM;
  const char *save = lx->p;
  if (!ptx_next(lx, &t)) return RGPU_FATBIN_ERR_TRUNCATED;
  if (!tok_is(t, "(")) {
    lx->p = save; /* ".entry k {" has no parameter list */
    return RGPU_FATBIN_OK;
  }
  size_t cap = 0, end = 0;
  for (;;) {
    if (!ptx_next(lx, &t)) return RGPU_FATBIN_ERR_TRUNCATED;
    if (tok_is(t, ")")) break;
    if (tok_is(t, ",")) continue;
    if (!tok_is(t, ".param")) return RGPU_FATBIN_ERR_CORRUPT;
    unsigned tsize = 0;
    uint32_t align = 0, count = 1;
    int after_ptr = 0, have_name = 0;
    for (;;) {
      save = lx->p;
      if (!ptx_next(lx, &t)) return RGPU_FATBIN_ERR_TRUNCATED;
      if (tok_is(t, ",") || tok_is(t, ")")) {
        lx->p = save;
        break;
      }
      if (tok_is(t, ".ptr")) {
        after_ptr = 1;
      } else if (tok_is(t, ".align")) {
        uint32_t a;
        if (!ptx_next(lx, &t) || parse_u32(t, &a) != 0 || a == 0 || (a & (a - 1))) return RGPU_FATBIN_ERR_CORRUPT;
        if (!after_ptr) align = a; /* after .ptr it is the pointee's alignment */
      } else if (t.s[0] == '.') {
        unsigned ts = ptx_type_size(t);
        if (ts) tsize = ts; /* other directives: the state space of a .ptr */
      } else if (tok_is(t, "[")) {
        if (!ptx_next(lx, &t) || parse_u32(t, &count) != 0) return RGPU_FATBIN_ERR_CORRUPT;
        if (!ptx_next(lx, &t) || !tok_is(t, "]")) return RGPU_FATBIN_ERR_CORRUPT;
      } else {
        have_name = 1;
      }
    }
    if (!tsize || !have_name || count == 0) return RGPU_FATBIN_ERR_CORRUPT;
    if (!align) align = tsize;
    uint64_t size = (uint64_t)tsize * count;
    uint64_t off = (end + align - 1) / align * align;
    if (off + size > PTX_MAX_PARAM_BYTES) return RGPU_FATBIN_ERR_TOO_LARGE;
    if (k->nparams == PTX_MAX_PARAMS) return RGPU_FATBIN_ERR_CORRUPT;
    if (RGPU_ARRAY_RESERVE(k->params, cap, k->nparams + 1, 8)) return RGPU_FATBIN_ERR_NOMEM;
    k->params[k->nparams].offset = (uint32_t)off;
    k->params[k->nparams].size = (uint32_t)size;
    k->nparams++;
    end = (size_t)(off + size);
  }
  k->param_bytes = end;
  return RGPU_FATBIN_OK;
}

int rgpu_fatbin_ptx_params(const char *ptx, size_t len, rgpu_fatbin_param_table *out) {
  if (!ptx || !out) return RGPU_FATBIN_ERR_ARG;
  memset(out, 0, sizeof *out);
  ptx_lexer lx = {ptx, ptx + len};
  ptx_tok t;
  size_t cap = 0;
  while (ptx_next(&lx, &t)) {
    if (!tok_is(t, ".entry")) continue;
    if (RGPU_ARRAY_RESERVE(out->kernels, cap, out->nkernels + 1, 8)) {
      rgpu_fatbin_param_table_free(out);
      return RGPU_FATBIN_ERR_NOMEM;
    }
    rgpu_fatbin_kernel *k = &out->kernels[out->nkernels++];
    memset(k, 0, sizeof *k);
    int rc = ptx_entry(&lx, k);
    if (rc) {
      rgpu_fatbin_param_table_free(out);
      return rc;
    }
  }
  return RGPU_FATBIN_OK;
}

int rgpu_fatbin_params(const rgpu_fatbin *fb, rgpu_fatbin_param_table *out) {
  if (!fb || !out) return RGPU_FATBIN_ERR_ARG;
  memset(out, 0, sizeof *out);
  const rgpu_fatbin_entry *e = rgpu_fatbin_best_elf(fb, 0);
  if (!e) e = rgpu_fatbin_best_ptx(fb, 0);
  if (!e) return RGPU_FATBIN_ERR_NOT_FOUND;
  void *data;
  size_t n;
  int rc = rgpu_fatbin_extract(e, 0, &data, &n);
  if (rc) return rc;
  if (e->kind == RGPU_FATBIN_KIND_ELF) rc = rgpu_fatbin_elf_params(data, n, out);
  else rc = rgpu_fatbin_ptx_params(data, n, out);
  free(data);
  return rc;
}

int rgpu_fatbin_wrapper_data(const void *wrapper, const void **data, unsigned *version) {
  if (!wrapper || !data) return RGPU_FATBIN_ERR_ARG;
  const uint8_t *w = wrapper;
  if (rd32(w) != RGPU_FATBIN_WRAPPER_MAGIC) return RGPU_FATBIN_ERR_MAGIC;
  uint32_t v = rd32(w + 4);
  if (v != 1 && v != 2) return RGPU_FATBIN_ERR_UNSUPPORTED;
  const void *d;
  memcpy(&d, w + 8, sizeof d);
  if (!d) return RGPU_FATBIN_ERR_CORRUPT;
  *data = d;
  if (version) *version = v;
  return RGPU_FATBIN_OK;
}
