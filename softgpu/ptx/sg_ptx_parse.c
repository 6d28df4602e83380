/* sg_ptx_parse: PTX text -> pre-decoded module.
 *
 * The text is tokenized once; statements are then decoded into fixed-size
 * sg_insn records whose operands are register/constant indices, so the
 * interpreter never looks at a string.  Registers, .local depots and the
 * .param frames of device functions are laid out statically per function
 * (entries share base 0, device functions get disjoint ranges after them),
 * which is why recursion is rejected. */
#include "sg_ptx_internal.h"

#include <cuda.h>
#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_array.h"

/* ---------------------------------------------------------------- lexer */

enum { TK_EOF = 0, TK_ID, TK_NUM, TK_STR, TK_PUNCT };

typedef struct {
  int kind;
  uint32_t line;
  uint32_t len;
  const char *p;
} token;

typedef struct {
  const char *name;
  uint32_t len;
  int kind;      /* SYM_* */
  uint32_t a;    /* register index / offset / global index / function index */
  uint32_t b;    /* size, count of a register range */
  int type;
  int is_pred;
  int is_range;
  int scope;
} sym;

enum { SYM_REG = 1, SYM_KPARAM, SYM_FPARAM, SYM_LOCAL, SYM_SHARED,
       SYM_DYNSHARED, SYM_GLOBAL, SYM_FUNC };

typedef struct {
  const char *name;
  uint32_t len;
  uint32_t insn;
  uint32_t line;
} fixup;

typedef struct {
  struct sg_ptx_module *m;
  token *t;
  size_t nt, capt, i;
  char *err;
  size_t errlen;
  int failed;
  int code;
  /* scoped symbols of the function being parsed */
  sym *syms;
  int nsyms, capsyms;
  int scope;
  /* module symbols */
  sym *msyms;
  int nmsyms, capmsyms;
  /* labels */
  sym *labels;
  int nlabels, caplabels;
  fixup *fix;
  int nfix, capfix;
  /* per-call-site param names: resolved when the call is decoded */
  struct sg_ptx_kernel *fn;
  uint32_t cur_regs, cur_preds, cur_fp;
  /* calls to resolve after all functions are known */
  fixup *callfix;
  int ncallfix, capcallfix;
  fixup *shfix;         /* instructions addressing a .shared variable (len = var) */
  int nshfix, capshfix;
  int *mhash;           /* open-addressing index of msyms by name */
  size_t mhcap;
  unsigned char *kflag; /* constant slot is patched later: never shared */
  uint32_t nkflag, capkflag;
} parser;

/* Doubling from 16 by rgpu_array_next_cap, overflow-checked; the fields are
 * int or uint32_t, so a capacity that no longer fits its field is out of
 * memory too (instead of wrapping to a small or negative one). */
#define GROW(arr, n, cap)                                                             \
  do {                                                                                \
    if ((n) >= (cap)) {                                                               \
      size_t nc_ = rgpu_array_next_cap((size_t)(cap), (size_t)(n) + 1, sizeof(*(arr)), 16); \
      __typeof__(cap) cap_ = (__typeof__(cap))nc_;                                    \
      if (nc_ == 0 || (size_t)cap_ != nc_) abort_oom();                               \
      void *np_ = realloc((arr), nc_ * sizeof(*(arr)));                               \
      if (!np_) abort_oom();                                                          \
      (arr) = np_;                                                                    \
      (cap) = cap_;                                                                   \
    }                                                                                 \
  } while (0)

/* Allocation failure unwinds to sg_ptx_module_parse, which frees the
 * partial module (every GROW leaves it consistent) and reports
 * CUDA_ERROR_OUT_OF_MEMORY: library code must not exit. */
static __thread jmp_buf *parse_oom_jmp;
static void abort_oom(void) {
  /* every allocation site runs inside sg_ptx_module_parse, which set this */
  longjmp(*parse_oom_jmp, 1);
}

static void fail(parser *P, int code, uint32_t line, const char *fmt, ...) {
  if (P->failed) return;
  P->failed = 1;
  P->code = code;
  if (!P->err || !P->errlen) return;
  int n = snprintf(P->err, P->errlen, "line %u: ", line);
  if (n < 0 || (size_t)n >= P->errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(P->err + n, P->errlen - n, fmt, ap);
  va_end(ap);
}

static int is_id_start(int c) { return isalpha(c) || c == '_' || c == '$' || c == '%' || c == '.'; }
static int is_id_char(int c) { return isalnum(c) || c == '_' || c == '$' || c == '.'; }

static void lex(parser *P, const char *s, size_t len) {
  size_t i = 0;
  uint32_t line = 1;
  while (i < len && !P->failed) {
    char c = s[i];
    if (c == '\n') { line++; i++; continue; }
    if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v' || c == '\0') { i++; continue; }
    if (c == '/' && i + 1 < len && s[i + 1] == '/') {
      while (i < len && s[i] != '\n') i++;
      continue;
    }
    if (c == '/' && i + 1 < len && s[i + 1] == '*') {
      i += 2;
      while (i + 1 < len && !(s[i] == '*' && s[i + 1] == '/')) { if (s[i] == '\n') line++; i++; }
      i += 2;
      continue;
    }
    GROW(P->t, P->nt, P->capt);
    token *t = &P->t[P->nt];
    t->line = line;
    t->p = s + i;
    if (is_id_start((unsigned char)c)) {
      size_t j = i + 1;
      for (;;) {
        if (j < len && is_id_char((unsigned char)s[j])) j++;
        else if (j + 1 < len && s[j] == ':' && s[j + 1] == ':') j += 2;
        else break;
      }
      t->kind = TK_ID;
      t->len = (uint32_t)(j - i);
      i = j;
    } else if (isdigit((unsigned char)c)) {
      size_t j = i + 1;
      while (j < len && (isalnum((unsigned char)s[j]) || s[j] == '.')) j++;
      t->kind = TK_NUM;
      t->len = (uint32_t)(j - i);
      i = j;
    } else if (c == '"') {
      size_t j = i + 1;
      while (j < len && s[j] != '"' && s[j] != '\n') { if (s[j] == '\\') j++; j++; }
      if (j >= len || s[j] != '"') { fail(P, CUDA_ERROR_INVALID_PTX, line, "unterminated string"); return; }
      t->kind = TK_STR;
      t->len = (uint32_t)(j + 1 - i);
      i = j + 1;
    } else {
      t->kind = TK_PUNCT;
      t->len = 1;
      i++;
    }
    P->nt++;
  }
  GROW(P->t, P->nt, P->capt);
  P->t[P->nt].kind = TK_EOF;
  P->t[P->nt].line = line;
  P->t[P->nt].p = "";
  P->t[P->nt].len = 0;
}

static token *peek(parser *P) { return &P->t[P->i]; }
static token *next(parser *P) { token *t = &P->t[P->i]; if (t->kind != TK_EOF) P->i++; return t; }
static int tok_is(const token *t, const char *s) {
  size_t n = strlen(s);
  return t->len == n && memcmp(t->p, s, n) == 0;
}
static int is_punct(const token *t, char c) { return t->kind == TK_PUNCT && t->p[0] == c; }
static int accept(parser *P, char c) {
  if (is_punct(peek(P), c)) { P->i++; return 1; }
  return 0;
}
static int expect(parser *P, char c) {
  if (accept(P, c)) return 1;
  token *t = peek(P);
  fail(P, CUDA_ERROR_INVALID_PTX, t->line, "expected '%c' but found '%.*s'", c, (int)(t->len > 40 ? 40 : t->len), t->p);
  return 0;
}

/* Skips the rest of a directive that has no terminating ';' (.version,
 * .target, .file, .loc, ...): everything on the same source line. */
static void skip_line(parser *P, uint32_t line) {
  while (peek(P)->kind != TK_EOF && peek(P)->line == line) {
    if (is_punct(peek(P), ';')) { P->i++; return; }
    P->i++;
  }
}

static void skip_statement(parser *P) {
  while (peek(P)->kind != TK_EOF && !is_punct(peek(P), ';')) P->i++;
  accept(P, ';');
}

/* ---------------------------------------------------------------- numbers */

static int parse_number_tok(const token *t, int64_t *out, int *is_float) {
  char buf[64];
  if (t->len >= sizeof buf) return -1;
  memcpy(buf, t->p, t->len);
  buf[t->len] = 0;
  *is_float = 0;
  if ((buf[0] == '0') && (buf[1] == 'f' || buf[1] == 'F') && t->len == 10) {
    *out = (int64_t)strtoull(buf + 2, NULL, 16);
    *is_float = 1;
    return 0;
  }
  if ((buf[0] == '0') && (buf[1] == 'd' || buf[1] == 'D') && t->len == 18) {
    *out = (int64_t)strtoull(buf + 2, NULL, 16);
    *is_float = 2;
    return 0;
  }
  size_t n = t->len;
  if (n > 0 && (buf[n - 1] == 'U' || buf[n - 1] == 'u')) buf[--n] = 0;
  char *end;
  if (strchr(buf, '.') || ((buf[0] != '0' || buf[1] != 'x') && (strchr(buf, 'e') || strchr(buf, 'E')))) {
    double d = strtod(buf, &end);
    if (*end) return -1;
    memcpy(out, &d, 8);
    *is_float = 3;
    return 0;
  }
  int base = 10;
  const char *s = buf;
  if (buf[0] == '0' && (buf[1] == 'x' || buf[1] == 'X')) { base = 16; s = buf + 2; }
  else if (buf[0] == '0' && (buf[1] == 'b' || buf[1] == 'B')) { base = 2; s = buf + 2; }
  else if (buf[0] == '0' && buf[1]) base = 8;
  *out = (int64_t)strtoull(s, &end, base);
  if (*end) return -1;
  return 0;
}

/* ---------------------------------------------------------------- types */

static const struct { const char *name; int type; } type_names[] = {
  {".pred", SG_T_PRED}, {".b8", SG_T_B8}, {".b16", SG_T_B16}, {".b32", SG_T_B32}, {".b64", SG_T_B64},
  {".u8", SG_T_U8}, {".u16", SG_T_U16}, {".u32", SG_T_U32}, {".u64", SG_T_U64},
  {".s8", SG_T_S8}, {".s16", SG_T_S16}, {".s32", SG_T_S32}, {".s64", SG_T_S64},
  {".f16", SG_T_F16}, {".f16x2", SG_T_F16X2}, {".bf16", SG_T_BF16}, {".bf16x2", SG_T_BF16X2},
  {".f32", SG_T_F32}, {".f64", SG_T_F64}, {".u16x2", SG_T_U16X2}, {".s16x2", SG_T_S16X2},
};

static int type_from(const char *p, size_t n) {
  for (size_t i = 0; i < sizeof type_names / sizeof type_names[0]; i++)
    if (strlen(type_names[i].name) == n && memcmp(type_names[i].name, p, n) == 0) return type_names[i].type;
  return SG_T_NONE;
}

static unsigned type_size(int t) {
  switch (t) {
    case SG_T_B8: case SG_T_U8: case SG_T_S8: return 1;
    case SG_T_B16: case SG_T_U16: case SG_T_S16: case SG_T_F16: case SG_T_BF16: return 2;
    case SG_T_B32: case SG_T_U32: case SG_T_S32: case SG_T_F32: case SG_T_F16X2: case SG_T_BF16X2:
    case SG_T_U16X2: case SG_T_S16X2: return 4;
    case SG_T_B64: case SG_T_U64: case SG_T_S64: case SG_T_F64: return 8;
    case SG_T_PRED: return 1;
    default: return 0;
  }
}

static int type_is_float(int t) { return t >= SG_T_F16 && t <= SG_T_F64; }
static unsigned tsize_of(int t) { return type_size(t); }

/* ---------------------------------------------------------------- symbols */

static uint32_t kconst(parser *P, uint64_t v) {
  struct sg_ptx_module *m = P->m;
  /* Small modules have few distinct constants; a bounded backwards scan
   * finds the repeated ones (0, 1, 4, ...) without a hash table. */
  uint32_t lim = m->nk > 256 ? m->nk - 256 : 0;
  for (uint32_t i = m->nk; i-- > lim;)
    if (m->kvals[i] == v && i < P->nkflag && !P->kflag[i]) return SG_KBIT | i;
  GROW(m->kvals, m->nk, m->capk);
  m->kvals[m->nk] = v;
  GROW(P->kflag, P->nkflag, P->capkflag);
  P->kflag[P->nkflag++] = 0;
  return SG_KBIT | m->nk++;
}

static uint32_t kpatched(parser *P, int kind, int ref, int64_t off) {
  struct sg_ptx_module *m = P->m;
  GROW(m->kvals, m->nk, m->capk);
  m->kvals[m->nk] = 0;
  GROW(P->kflag, P->nkflag, P->capkflag);
  P->kflag[P->nkflag++] = 1;
  uint32_t k = m->nk++;
  GROW(m->kpatches, m->nkpatches, m->capkpatches);
  m->kpatches[m->nkpatches++] = (sg_kpatch){k, kind, ref, off};
  return SG_KBIT | k;
}

static sym *find_sym_in(sym *arr, int n, const char *p, uint32_t len) {
  for (int i = n; i-- > 0;)
    if (!arr[i].is_range && arr[i].len == len && memcmp(arr[i].name, p, len) == 0) return &arr[i];
  return NULL;
}

/* Finds a scoped register or param; "%r12" matches the range "%r<N>". */
static sym *find_local(parser *P, const char *p, uint32_t len, uint32_t *index_out) {
  sym *s = find_sym_in(P->syms, P->nsyms, p, len);
  if (s) { *index_out = s->a; return s; }
  uint32_t k = len;
  while (k > 0 && isdigit((unsigned char)p[k - 1])) k--;
  if (k == len || k == 0) return NULL;
  uint64_t idx = 0;
  for (uint32_t j = k; j < len; j++) { idx = idx * 10 + (uint64_t)(p[j] - '0'); if (idx > 0xffffffu) return NULL; }
  for (int i = P->nsyms; i-- > 0;) {
    sym *r = &P->syms[i];
    if (r->is_range && r->len == k && memcmp(r->name, p, k) == 0 && idx < r->b) {
      *index_out = r->a + (uint32_t)idx;
      return r;
    }
  }
  return NULL;
}

static sym *add_local(parser *P, const char *p, uint32_t len) {
  GROW(P->syms, P->nsyms, P->capsyms);
  sym *s = &P->syms[P->nsyms++];
  memset(s, 0, sizeof *s);
  s->name = p;
  s->len = len;
  s->scope = P->scope;
  return s;
}

/* Module symbols are looked up for every label and call operand, so big
 * library modules need a hash index rather than a scan. */
static size_t name_hash(const char *p, uint32_t len) {
  uint64_t h = 1469598103934665603ull;
  for (uint32_t i = 0; i < len; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
  return (size_t)h;
}

static sym *find_msym(parser *P, const char *p, uint32_t len) {
  if (!P->mhcap) return NULL;
  for (size_t i = name_hash(p, len) & (P->mhcap - 1);; i = (i + 1) & (P->mhcap - 1)) {
    int k = P->mhash[i];
    if (k < 0) return NULL;
    sym *s = &P->msyms[k];
    if (s->len == len && memcmp(s->name, p, len) == 0) return s;
  }
}

static void mhash_put(parser *P, int k) {
  sym *s = &P->msyms[k];
  for (size_t i = name_hash(s->name, s->len) & (P->mhcap - 1);; i = (i + 1) & (P->mhcap - 1)) {
    int o = P->mhash[i];
    if (o < 0 || (P->msyms[o].len == s->len && memcmp(P->msyms[o].name, s->name, s->len) == 0)) {
      P->mhash[i] = k; /* a redefinition shadows the earlier symbol */
      return;
    }
  }
}

static sym *add_msym(parser *P, const char *p, uint32_t len) {
  GROW(P->msyms, P->nmsyms, P->capmsyms);
  int k = P->nmsyms++;
  sym *s = &P->msyms[k];
  memset(s, 0, sizeof *s);
  s->name = p;
  s->len = len;
  if ((size_t)P->nmsyms * 2 > P->mhcap) {
    size_t nc = P->mhcap ? P->mhcap * 2 : 256;
    int *nh = malloc(nc * sizeof *nh);
    if (!nh) abort_oom();
    for (size_t i = 0; i < nc; i++) nh[i] = -1;
    free(P->mhash);
    P->mhash = nh;
    P->mhcap = nc;
    for (int j = 0; j < P->nmsyms; j++) mhash_put(P, j);
  } else {
    mhash_put(P, k);
  }
  return s;
}

static char *dupn(const char *p, size_t n) {
  char *s = malloc(n + 1);
  if (!s) abort_oom();
  memcpy(s, p, n);
  s[n] = 0;
  return s;
}

/* ---------------------------------------------------------------- module vars */

static int parse_align_and_type(parser *P, size_t *align, int *type) {
  *align = 0;
  *type = SG_T_NONE;
  for (;;) {
    token *t = peek(P);
    if (t->kind != TK_ID) break;
    if (tok_is(t, ".align")) {
      next(P);
      token *n = next(P);
      int64_t v; int f;
      if (n->kind != TK_NUM || parse_number_tok(n, &v, &f) || f || v <= 0 || v > 4096 || (v & (v - 1))) {
        fail(P, CUDA_ERROR_INVALID_PTX, n->line, "bad .align value");
        return -1;
      }
      *align = (size_t)v;
      continue;
    }
    if (tok_is(t, ".ptr") || tok_is(t, ".global") || tok_is(t, ".shared") || tok_is(t, ".const") ||
        tok_is(t, ".local") || tok_is(t, ".v2") || tok_is(t, ".v4")) {
      if (tok_is(t, ".v2") || tok_is(t, ".v4")) {
        fail(P, CUDA_ERROR_NOT_SUPPORTED, t->line, "vector-typed variable declarations are not supported");
        return -1;
      }
      next(P);
      continue;
    }
    int ty = type_from(t->p, t->len);
    if (ty != SG_T_NONE) { *type = ty; next(P); continue; }
    break;
  }
  if (*type == SG_T_NONE) {
    fail(P, CUDA_ERROR_INVALID_PTX, peek(P)->line, "missing type in declaration");
    return -1;
  }
  if (!*align) *align = type_size(*type) ? type_size(*type) : 1;
  return 0;
}

/* name [N][M]... ; returns element count (0 for unsized extern arrays). */
static int parse_decl_name(parser *P, token **name, uint64_t *count, int *unsized) {
  *name = next(P);
  *count = 1;
  *unsized = 0;
  if ((*name)->kind != TK_ID) {
    fail(P, CUDA_ERROR_INVALID_PTX, (*name)->line, "expected a name in declaration");
    return -1;
  }
  while (accept(P, '[')) {
    if (accept(P, ']')) { *unsized = 1; continue; }
    token *n = next(P);
    int64_t v; int f;
    if (n->kind != TK_NUM || parse_number_tok(n, &v, &f) || f || v < 0 || v > (1ll << 34)) {
      fail(P, CUDA_ERROR_INVALID_PTX, n->line, "bad array size");
      return -1;
    }
    *count *= (uint64_t)v;
    if (*count > (1ull << 34)) { fail(P, CUDA_ERROR_INVALID_PTX, n->line, "array too large"); return -1; }
    if (!expect(P, ']')) return -1;
  }
  return 0;
}

static void parse_initializer(parser *P, uint8_t *buf, size_t size, unsigned esize, int etype) {
  size_t pos = 0;
  int depth = 0;
  for (;;) {
    token *t = next(P);
    if (t->kind == TK_EOF) { fail(P, CUDA_ERROR_INVALID_PTX, t->line, "unterminated initializer"); return; }
    if (is_punct(t, '{')) { depth++; continue; }
    if (is_punct(t, '}')) { if (--depth <= 0) { if (depth < 0) return; if (is_punct(peek(P), ';')) return; } continue; }
    if (is_punct(t, ',')) continue;
    if (is_punct(t, ';')) { P->i--; return; }
    int neg = 0;
    if (is_punct(t, '-')) { neg = 1; t = next(P); }
    if (t->kind == TK_NUM) {
      int64_t v; int f;
      if (parse_number_tok(t, &v, &f)) { fail(P, CUDA_ERROR_INVALID_PTX, t->line, "bad number in initializer"); return; }
      if (f == 3 && etype == SG_T_F32) { double d; memcpy(&d, &v, 8); float x = (float)(neg ? -d : d); uint32_t u; memcpy(&u, &x, 4); v = u; neg = 0; }
      else if (f == 3 && etype != SG_T_F64) { double d; memcpy(&d, &v, 8); v = (int64_t)d; }
      if (neg) v = (int64_t)(0 - (uint64_t)v);
      if (pos + esize <= size) memcpy(buf + pos, &v, esize); /* little endian */
      pos += esize;
      if (depth == 0) return;
      continue;
    }
    if (t->kind == TK_ID) {
      fail(P, CUDA_ERROR_NOT_SUPPORTED, t->line, "initializers holding symbol addresses ('%.*s') are not supported", (int)t->len, t->p);
      return;
    }
    fail(P, CUDA_ERROR_INVALID_PTX, t->line, "unexpected '%.*s' in initializer", (int)t->len, t->p);
    return;
  }
}

/* .global/.const/.shared variable at module scope, or .shared/.local inside a
 * function.  `space` token already consumed. */
static void parse_var(parser *P, const char *space, int is_extern, int in_func) {
  size_t align;
  int type;
  if (parse_align_and_type(P, &align, &type)) return;
  for (;;) {
    token *name;
    uint64_t count;
    int unsized;
    if (parse_decl_name(P, &name, &count, &unsized)) return;
    unsigned esize = type_size(type);
    uint64_t size = count * esize;
    struct sg_ptx_module *m = P->m;
    if (!strcmp(space, ".shared")) {
      sym *s = in_func ? add_local(P, name->p, name->len) : add_msym(P, name->p, name->len);
      if (is_extern || unsized) {
        s->kind = SYM_DYNSHARED;
        if (align > m->dyn_shared_align) m->dyn_shared_align = align;
      } else {
        size_t off = (m->static_shared + align - 1) & ~(align - 1);
        s->kind = SYM_SHARED;
        s->a = (uint32_t)off;
        s->type = m->nshvars;
        m->static_shared = off + size;
        GROW(m->shvars, m->nshvars, m->capshvars);
        GROW(m->shalign, m->nshvars, m->capshalign);
        m->shvars[m->nshvars] = (sg_span){(uint32_t)off, (uint32_t)size};
        m->shalign[m->nshvars] = align;
        m->nshvars++;
        if (m->static_shared > (1u << 30)) { fail(P, CUDA_ERROR_INVALID_PTX, name->line, "shared memory too large"); return; }
      }
      if (is_punct(peek(P), '=')) { fail(P, CUDA_ERROR_INVALID_PTX, name->line, ".shared variables cannot have initializers"); return; }
    } else if (!strcmp(space, ".local")) {
      if (!in_func) { fail(P, CUDA_ERROR_NOT_SUPPORTED, name->line, "module-scope .local variables are not supported"); return; }
      struct sg_ptx_kernel *f = P->fn;
      uint32_t off = (f->lsize + (uint32_t)align - 1) & ~((uint32_t)align - 1);
      if (size > (1u << 24)) { fail(P, CUDA_ERROR_INVALID_PTX, name->line, ".local array too large"); return; }
      sym *s = add_local(P, name->p, name->len);
      s->kind = SYM_LOCAL;
      s->a = off;
      s->b = (uint32_t)size;
      f->lsize = off + (uint32_t)size;
    } else { /* .global / .const */
      if (in_func) { fail(P, CUDA_ERROR_NOT_SUPPORTED, name->line, "function-scope %s variables are not supported", space); return; }
      if (size == 0 && !is_extern) { fail(P, CUDA_ERROR_INVALID_PTX, name->line, "zero-sized variable"); return; }
      if (size > (1ull << 32)) { fail(P, CUDA_ERROR_INVALID_PTX, name->line, "variable too large"); return; }
      GROW(m->globals, m->nglobals, m->capglobals);
      sg_global *g = &m->globals[m->nglobals];
      memset(g, 0, sizeof *g);
      g->name = dupn(name->p, name->len);
      g->size = (size_t)size;
      g->align = align;
      g->space = !strcmp(space, ".const") ? SG_PTX_SPACE_CONST : SG_PTX_SPACE_GLOBAL;
      sym *s = add_msym(P, name->p, name->len);
      s->kind = SYM_GLOBAL;
      s->a = (uint32_t)m->nglobals;
      g->kidx = kpatched(P, SG_KP_GLOBAL, m->nglobals, 0) & ~SG_KBIT;
      m->nglobals++;
      if (accept(P, '=')) {
        g->init = calloc(1, g->size ? g->size : 1);
        if (!g->init) abort_oom();
        parse_initializer(P, g->init, g->size, esize, type);
        if (P->failed) return;
      }
    }
    if (accept(P, ',')) continue;
    break;
  }
  expect(P, ';');
}

/* ---------------------------------------------------------------- operands */

enum { PO_NONE = 0, PO_REG, PO_IMM, PO_SYM, PO_ADDR, PO_VEC, PO_NAME, PO_SREG, PO_TIMER, PO_SINK };

typedef struct {
  int kind;
  uint32_t reg;     /* PO_REG: index with SG_PBIT for predicates */
  int neg;          /* !%p */
  int64_t imm;
  int immf;         /* immediate float kind from parse_number_tok */
  sym *s;           /* PO_SYM (or base of PO_ADDR) */
  int base_kind;    /* PO_ADDR: PO_REG, PO_SYM, PO_IMM */
  int64_t off;
  int nvec;
  uint32_t vec[8];
  const token *tok;
  int sub;          /* PO_SREG/PO_TIMER index */
  int reg_type;
} opnd;

/* Special registers keep fixed slots, so they must escape relocation. */
#define SG_SBIT 0x20000000u

static const struct { const char *name; int sr; } sreg_names[] = {
  {"%tid.x", SG_SR_TID_X}, {"%tid.y", SG_SR_TID_Y}, {"%tid.z", SG_SR_TID_Z},
  {"%ntid.x", SG_SR_NTID_X}, {"%ntid.y", SG_SR_NTID_Y}, {"%ntid.z", SG_SR_NTID_Z},
  {"%ctaid.x", SG_SR_CTAID_X}, {"%ctaid.y", SG_SR_CTAID_Y}, {"%ctaid.z", SG_SR_CTAID_Z},
  {"%nctaid.x", SG_SR_NCTAID_X}, {"%nctaid.y", SG_SR_NCTAID_Y}, {"%nctaid.z", SG_SR_NCTAID_Z},
  {"%laneid", SG_SR_LANEID}, {"%warpid", SG_SR_WARPID}, {"%nwarpid", SG_SR_NWARPID},
  {"%lanemask_eq", SG_SR_LANEMASK_EQ}, {"%lanemask_lt", SG_SR_LANEMASK_LT},
  {"%lanemask_le", SG_SR_LANEMASK_LE}, {"%lanemask_gt", SG_SR_LANEMASK_GT},
  {"%lanemask_ge", SG_SR_LANEMASK_GE}, {"%smid", SG_SR_SMID}, {"%nsmid", SG_SR_NSMID},
  {"%gridid", SG_SR_GRIDID}, {"%dynamic_smem_size", SG_SR_DYN_SMEM},
  {"%total_smem_size", SG_SR_TOTAL_SMEM},
};

/* The PTX ISA's other predefined special registers.  softgpu never launches
 * thread-block clusters (CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH is 0), so every
 * block is its own cluster of one: the cluster registers are constants or
 * alias the grid's.  Registers whose values belong to a real driver or to
 * hardware counters are refused by name, with the reason. */
static int predefined_sreg(parser *P, const token *t, opnd *o) {
  static const struct { const char *name; int sr; } cluster_alias[] = {
    {"%clusterid.x", SG_SR_CTAID_X}, {"%clusterid.y", SG_SR_CTAID_Y}, {"%clusterid.z", SG_SR_CTAID_Z},
    {"%nclusterid.x", SG_SR_NCTAID_X}, {"%nclusterid.y", SG_SR_NCTAID_Y}, {"%nclusterid.z", SG_SR_NCTAID_Z},
    {"%aggr_smem_size", SG_SR_TOTAL_SMEM},
  };
  static const struct { const char *name; int64_t value; } cluster_const[] = {
    {"%cluster_ctaid.x", 0}, {"%cluster_ctaid.y", 0}, {"%cluster_ctaid.z", 0},
    {"%cluster_nctaid.x", 1}, {"%cluster_nctaid.y", 1}, {"%cluster_nctaid.z", 1},
    {"%cluster_ctarank", 0}, {"%cluster_nctarank", 1}, {"%is_explicit_cluster", 0},
  };
  for (size_t i = 0; i < sizeof cluster_alias / sizeof cluster_alias[0]; i++)
    if (tok_is(t, cluster_alias[i].name)) { o->kind = PO_SREG; o->sub = cluster_alias[i].sr; o->reg = SG_SBIT | (uint32_t)cluster_alias[i].sr; return 0; }
  for (size_t i = 0; i < sizeof cluster_const / sizeof cluster_const[0]; i++)
    if (tok_is(t, cluster_const[i].name)) { o->kind = PO_IMM; o->imm = cluster_const[i].value; o->immf = 0; return 0; }
  /* %envreg0..31 hold what the driver passes a launch; cooperative groups
   * read the grid-sync workspace pointer from %envreg1/%envreg2 in every
   * cg::this_grid().  softgpu has no cooperative launch, so they are 0: the
   * workspace is null and grid_group::is_valid() is false, as in any
   * non-cooperative launch on a GPU. */
  if (t->len > 7 && t->len <= 9 && !memcmp(t->p, "%envreg", 7)) {
    unsigned n = 0;
    int ok = 1;
    for (size_t i = 7; i < t->len; i++) {
      if (t->p[i] < '0' || t->p[i] > '9') ok = 0;
      else n = n * 10 + (unsigned)(t->p[i] - '0');
    }
    if (ok && n < 32 && !(t->len == 9 && t->p[7] == '0')) { o->kind = PO_IMM; o->imm = 0; o->immf = 0; return 0; }
  }
  static const struct { const char *name; int sr; } reserved[] = {
    {"%reserved_smem_offset_begin", SG_SR_RSV_BEGIN}, {"%reserved_smem_offset_end", SG_SR_RSV_END},
    {"%reserved_smem_offset_cap", SG_SR_RSV_CAP}, {"%reserved_smem_offset_0", SG_SR_RSV_0},
    {"%reserved_smem_offset_1", SG_SR_RSV_1},
  };
  for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
    if (tok_is(t, reserved[i].name)) {
      P->m->uses_reserved_smem = 1;
      o->kind = PO_SREG;
      o->sub = reserved[i].sr;
      o->reg = SG_SBIT | (uint32_t)reserved[i].sr;
      return 0;
    }
  const char *why = NULL;
  if (t->len > 3 && !memcmp(t->p, "%pm", 3)) why = "performance-monitor counters (%pm<N>) are not supported by softgpu";
  else if (tok_is(t, "%current_graph_exec")) why = "device-side graph launch (%current_graph_exec) is not supported by softgpu";
  if (why) {
    fail(P, CUDA_ERROR_NOT_SUPPORTED, t->line, "special register '%.*s': %s", (int)t->len, t->p, why);
    return -1;
  }
  fail(P, CUDA_ERROR_INVALID_PTX, t->line, "unknown register '%.*s'", (int)t->len, t->p);
  return -1;
}

static int resolve_name(parser *P, const token *t, opnd *o) {
  o->tok = t;
  uint32_t idx;
  sym *s = find_local(P, t->p, t->len, &idx);
  if (s && s->kind == SYM_REG) {
    o->kind = PO_REG;
    o->reg = s->is_pred ? (SG_PBIT | idx) : idx;
    o->reg_type = s->type;
    return 0;
  }
  if (s) { o->kind = PO_SYM; o->s = s; return 0; }
  if (t->p[0] == '%') {
    for (size_t i = 0; i < sizeof sreg_names / sizeof sreg_names[0]; i++)
      if (tok_is(t, sreg_names[i].name)) { o->kind = PO_SREG; o->sub = sreg_names[i].sr; o->reg = SG_SBIT | (uint32_t)sreg_names[i].sr; return 0; }
    if (tok_is(t, "%clock")) { o->kind = PO_TIMER; o->sub = SG_TIMER_CLOCK; return 0; }
    if (tok_is(t, "%clock64")) { o->kind = PO_TIMER; o->sub = SG_TIMER_CLOCK64; return 0; }
    if (tok_is(t, "%globaltimer")) { o->kind = PO_TIMER; o->sub = SG_TIMER_GLOBALTIMER; return 0; }
    if (tok_is(t, "%clock_hi")) { o->kind = PO_TIMER; o->sub = SG_TIMER_CLOCK_HI; return 0; }
    if (tok_is(t, "%globaltimer_lo")) { o->kind = PO_TIMER; o->sub = SG_TIMER_GLOBALTIMER_LO; return 0; }
    if (tok_is(t, "%globaltimer_hi")) { o->kind = PO_TIMER; o->sub = SG_TIMER_GLOBALTIMER_HI; return 0; }
    return predefined_sreg(P, t, o);
  }
  s = find_msym(P, t->p, t->len);
  if (s) { o->kind = PO_SYM; o->s = s; return 0; }
  /* WARP_SZ is the PTX ISA's predefined constant for the warp width (what
   * device code's warpSize compiles to); a module cannot redefine it. */
  if (tok_is(t, "WARP_SZ")) { o->kind = PO_IMM; o->imm = 32; o->immf = 0; return 0; }
  o->kind = PO_NAME;
  return 0;
}

static int parse_operand(parser *P, opnd *o) {
  memset(o, 0, sizeof *o);
  token *t = next(P);
  o->tok = t;
  if (is_punct(t, '!')) {
    if (parse_operand(P, o)) return -1;
    o->neg = 1;
    return 0;
  }
  if (is_punct(t, '_')) { o->kind = PO_SINK; return 0; }
  if (t->kind == TK_ID && tok_is(t, "_")) { o->kind = PO_SINK; return 0; }
  if (is_punct(t, '-') || t->kind == TK_NUM) {
    int neg = 0;
    if (is_punct(t, '-')) { neg = 1; t = next(P); }
    if (t->kind != TK_NUM || parse_number_tok(t, &o->imm, &o->immf)) {
      fail(P, CUDA_ERROR_INVALID_PTX, t->line, "bad number '%.*s'", (int)t->len, t->p);
      return -1;
    }
    if (neg) {
      if (o->immf == 1) o->imm ^= 0x80000000ll;
      else if (o->immf >= 2) o->imm ^= (int64_t)0x8000000000000000ull;
      else o->imm = (int64_t)(0 - (uint64_t)o->imm);
    }
    o->kind = PO_IMM;
    return 0;
  }
  if (is_punct(t, '[')) {
    token *b = next(P);
    o->kind = PO_ADDR;
    if (b->kind == TK_NUM) {
      int f;
      if (parse_number_tok(b, &o->off, &f) || f) { fail(P, CUDA_ERROR_INVALID_PTX, b->line, "bad address"); return -1; }
      o->base_kind = PO_IMM;
    } else if (b->kind == TK_ID) {
      opnd bo;
      if (resolve_name(P, b, &bo)) return -1;
      if (bo.kind == PO_REG && !(bo.reg & SG_PBIT)) { o->base_kind = PO_REG; o->reg = bo.reg; }
      else if (bo.kind == PO_SYM) { o->base_kind = PO_SYM; o->s = bo.s; }
      else if (bo.kind == PO_SREG) { o->base_kind = PO_REG; o->reg = bo.reg; }
      else { fail(P, CUDA_ERROR_INVALID_PTX, b->line, "bad address base '%.*s'", (int)b->len, b->p); return -1; }
    } else {
      fail(P, CUDA_ERROR_INVALID_PTX, b->line, "bad address");
      return -1;
    }
    while (is_punct(peek(P), '+') || is_punct(peek(P), '-')) {
      int neg = is_punct(next(P), '-');
      if (accept(P, '-')) neg = !neg;
      token *n = next(P);
      int64_t v; int f;
      if (n->kind != TK_NUM || parse_number_tok(n, &v, &f) || f) { fail(P, CUDA_ERROR_INVALID_PTX, n->line, "bad address offset"); return -1; }
      o->off = (int64_t)((uint64_t)o->off + (neg ? 0 - (uint64_t)v : (uint64_t)v));
    }
    return expect(P, ']') ? 0 : -1;
  }
  if (is_punct(t, '{')) {
    o->kind = PO_VEC;
    for (;;) {
      token *r = next(P);
      opnd ro;
      if (r->kind == TK_ID && tok_is(r, "_")) { ro.kind = PO_SINK; ro.reg = SG_NOREG; }
      else if (r->kind != TK_ID || resolve_name(P, r, &ro) || ro.kind != PO_REG || (ro.reg & SG_PBIT)) {
        if (!P->failed) fail(P, CUDA_ERROR_INVALID_PTX, r->line, "vector elements must be registers");
        return -1;
      }
      if (o->nvec >= 8) { fail(P, CUDA_ERROR_NOT_SUPPORTED, r->line, "vectors of more than 8 elements are not supported"); return -1; }
      o->vec[o->nvec++] = ro.kind == PO_SINK ? SG_NOREG : ro.reg;
      if (accept(P, ',')) continue;
      break;
    }
    return expect(P, '}') ? 0 : -1;
  }
  if (t->kind == TK_ID) {
    if (resolve_name(P, t, o)) return -1;
    /* symbol+offset as a plain operand (mov.u64 %rd, sym+8) */
    if (o->kind == PO_SYM && is_punct(peek(P), '+')) {
      next(P);
      token *n = next(P);
      int64_t v; int f;
      if (n->kind != TK_NUM || parse_number_tok(n, &v, &f) || f) { fail(P, CUDA_ERROR_INVALID_PTX, n->line, "bad offset"); return -1; }
      o->off = v;
    }
    return 0;
  }
  fail(P, CUDA_ERROR_INVALID_PTX, t->line, "unexpected '%.*s'", (int)t->len, t->p);
  return -1;
}

/* Records that the function being parsed uses a .shared variable, so that a
 * kernel reports only the shared memory it can reach, not the module's. */
static void note_shared(parser *P, const sym *s) {
  struct sg_ptx_kernel *f = P->fn;
  if (!f || f->mod != P->m) return;
  for (int i = 0; i < f->nshrefs; i++) if (f->shrefs[i] == s->type) return;
  GROW(f->shrefs, f->nshrefs, f->capshrefs);
  f->shrefs[f->nshrefs++] = s->type;
}

/* ---------------------------------------------------------------- operand -> index */

static uint32_t imm_for_type(parser *P, const opnd *o, int type) {
  uint64_t v = (uint64_t)o->imm;
  if (type == SG_T_F32) {
    if (o->immf == 2 || o->immf == 3) { double d; memcpy(&d, &v, 8); float f = (float)d; uint32_t u; memcpy(&u, &f, 4); v = u; }
    else if (o->immf == 0) { float f = (float)(int64_t)v; uint32_t u; memcpy(&u, &f, 4); v = u; }
  } else if (type == SG_T_F64) {
    if (o->immf == 1) { uint32_t u = (uint32_t)v; float f; memcpy(&f, &u, 4); double d = f; memcpy(&v, &d, 8); }
    else if (o->immf == 0) { double d = (double)(int64_t)v; memcpy(&v, &d, 8); }
  } else if (o->immf == 3 && !type_is_float(type)) {
    double d; memcpy(&d, &v, 8); v = (uint64_t)(int64_t)d;
  }
  return kconst(P, v);
}

/* A source operand as a register/constant index. */
static uint32_t src_index(parser *P, const opnd *o, int type) {
  switch (o->kind) {
    case PO_REG:
      if (o->reg & SG_PBIT) {
        fail(P, CUDA_ERROR_INVALID_PTX, o->tok->line, "predicate '%.*s' used where a value is expected", (int)o->tok->len, o->tok->p);
        return SG_K_ZERO;
      }
      return o->reg;
    case PO_SREG: return o->reg;
    case PO_IMM: return imm_for_type(P, o, type);
    case PO_SYM: {
      sym *s = o->s;
      switch (s->kind) {
        case SYM_GLOBAL: {
          if (o->off == 0) return SG_KBIT | P->m->globals[s->a].kidx;
          return kpatched(P, SG_KP_GLOBAL, (int)s->a, o->off);
        }
        case SYM_SHARED: note_shared(P, s); return kpatched(P, SG_KP_SHARED, s->type, o->off);
        case SYM_DYNSHARED: return kpatched(P, SG_KP_DYNSHARED, 0, o->off);
        case SYM_LOCAL: return kpatched(P, SG_KP_LOCAL, 0 /* owner set after the body */, (int64_t)s->a + o->off);
        case SYM_FUNC:
          fail(P, CUDA_ERROR_NOT_SUPPORTED, o->tok->line, "function addresses ('%.*s') are not supported", (int)o->tok->len, o->tok->p);
          return SG_K_ZERO;
        default:
          fail(P, CUDA_ERROR_NOT_SUPPORTED, o->tok->line, "taking the address of parameter '%.*s' is not supported", (int)o->tok->len, o->tok->p);
          return SG_K_ZERO;
      }
    }
    case PO_NAME:
      fail(P, CUDA_ERROR_INVALID_PTX, o->tok->line, "unknown symbol '%.*s'", (int)o->tok->len, o->tok->p);
      return SG_K_ZERO;
    default:
      fail(P, CUDA_ERROR_INVALID_PTX, o->tok ? o->tok->line : 0, "bad source operand");
      return SG_K_ZERO;
  }
}

static uint32_t dst_index(parser *P, const opnd *o) {
  if (o->kind == PO_REG && !(o->reg & SG_PBIT)) return o->reg;
  if (o->kind == PO_SINK) return SG_NOREG;
  fail(P, CUDA_ERROR_INVALID_PTX, o->tok ? o->tok->line : 0, "destination must be a register");
  return SG_NOREG;
}

static uint32_t pred_index(parser *P, const opnd *o) {
  if (o->kind == PO_REG && (o->reg & SG_PBIT)) return o->reg;
  if (o->kind == PO_IMM) {
    /* constant predicates: encoded as a constant register read as a mask */
    return SG_PBIT | SG_KBIT | (o->imm ? 1u : 0u);
  }
  fail(P, CUDA_ERROR_INVALID_PTX, o->tok ? o->tok->line : 0, "expected a predicate register");
  return SG_NOREG;
}

/* ---------------------------------------------------------------- instruction decode */

typedef struct {
  const char *p;
  uint32_t len;
} mtok;

#define MAXMODS 16

typedef struct {
  char base[32];
  mtok mods[MAXMODS];
  int nmods;
  int types[4];
  int ntypes;
  int rnd;
  int ftz, sat, approx, full, uni, nan;
  int space;
  int has_space;
  int vec;
  int mul; /* SG_MUL_* */
  int cmp, boolop;
  int words[MAXMODS];  /* indices of unclassified modifiers */
  int nwords;
} opinfo;

static int mod_is(const mtok *m, const char *s) { size_t n = strlen(s); return m->len == n && memcmp(m->p, s, n) == 0; }

static const char *ignored_mods[] = {
  ".nc", ".ca", ".cg", ".cs", ".lu", ".cv", ".wb", ".wt", ".volatile", ".relaxed", ".acquire", ".release",
  ".acq_rel", ".sc", ".gpu", ".cta", ".sys", ".cluster", ".sync", ".aligned", ".weak", ".mmio", ".uni", ".to",
  NULL};

static const struct { const char *n; int v; } cmp_names[] = {
  {".eq", SG_CMP_EQ}, {".ne", SG_CMP_NE}, {".lt", SG_CMP_LT}, {".le", SG_CMP_LE}, {".gt", SG_CMP_GT},
  {".ge", SG_CMP_GE}, {".lo", SG_CMP_LO}, {".ls", SG_CMP_LS}, {".hi", SG_CMP_HI}, {".hs", SG_CMP_HS},
  {".equ", SG_CMP_EQU}, {".neu", SG_CMP_NEU}, {".ltu", SG_CMP_LTU}, {".leu", SG_CMP_LEU},
  {".gtu", SG_CMP_GTU}, {".geu", SG_CMP_GEU}, {".num", SG_CMP_NUM}, {".nan", SG_CMP_NAN},
};

static void split_opcode(const token *t, opinfo *oi) {
  memset(oi, 0, sizeof *oi);
  oi->vec = 1;
  uint32_t i = 0;
  while (i < t->len && t->p[i] != '.') i++;
  uint32_t bl = i < sizeof oi->base - 1 ? i : (uint32_t)sizeof oi->base - 1;
  memcpy(oi->base, t->p, bl);
  oi->base[bl] = 0;
  while (i < t->len && oi->nmods < MAXMODS) {
    uint32_t j = i + 1;
    while (j < t->len && t->p[j] != '.') j++;
    oi->mods[oi->nmods].p = t->p + i;
    oi->mods[oi->nmods].len = j - i;
    oi->nmods++;
    i = j;
  }
}

/* Classifies modifiers whose meaning does not depend on the opcode; the
 * rest are left in words[] for the opcode's decoder. */
static void classify_mods(opinfo *oi, int is_setp) {
  for (int k = 0; k < oi->nmods; k++) {
    const mtok *m = &oi->mods[k];
    int ty = type_from(m->p, m->len);
    if (ty != SG_T_NONE && oi->ntypes < 4) { oi->types[oi->ntypes++] = ty; continue; }
    if (mod_is(m, ".rn")) { oi->rnd = SG_RND_RN; continue; }
    if (mod_is(m, ".rz")) { oi->rnd = SG_RND_RZ; continue; }
    if (mod_is(m, ".rm")) { oi->rnd = SG_RND_RM; continue; }
    if (mod_is(m, ".rp")) { oi->rnd = SG_RND_RP; continue; }
    if (mod_is(m, ".rni")) { oi->rnd = SG_RND_RNI; continue; }
    if (mod_is(m, ".rzi")) { oi->rnd = SG_RND_RZI; continue; }
    if (mod_is(m, ".rmi")) { oi->rnd = SG_RND_RMI; continue; }
    if (mod_is(m, ".rpi")) { oi->rnd = SG_RND_RPI; continue; }
    if (mod_is(m, ".ftz")) { oi->ftz = 1; continue; }
    if (mod_is(m, ".sat") || mod_is(m, ".satfinite")) { oi->sat = 1; continue; }
    if (mod_is(m, ".approx")) { oi->approx = 1; continue; }
    if (mod_is(m, ".full")) { oi->full = 1; continue; }
    if (mod_is(m, ".NaN")) { oi->nan = 1; continue; }
    if (mod_is(m, ".global")) { oi->space = SG_SP_GLOBAL; oi->has_space = 1; continue; }
    if (mod_is(m, ".shared") || mod_is(m, ".shared::cta")) { oi->space = SG_SP_SHARED; oi->has_space = 1; continue; }
    if (mod_is(m, ".local")) { oi->space = SG_SP_LOCAL; oi->has_space = 1; continue; }
    if (mod_is(m, ".const")) { oi->space = SG_SP_CONST; oi->has_space = 1; continue; }
    if (mod_is(m, ".param")) { oi->space = SG_SP_PARAM; oi->has_space = 1; continue; }
    if (mod_is(m, ".v2")) { oi->vec = 2; continue; }
    if (mod_is(m, ".v4")) { oi->vec = 4; continue; }
    if (!is_setp) {
      if (mod_is(m, ".lo")) { oi->mul = SG_MUL_LO; continue; }
      if (mod_is(m, ".hi")) { oi->mul = SG_MUL_HI; continue; }
    }
    if (mod_is(m, ".wide")) { oi->mul = SG_MUL_WIDE; continue; }
    if (is_setp) {
      int found = 0;
      for (size_t c = 0; c < sizeof cmp_names / sizeof cmp_names[0]; c++)
        if (mod_is(m, cmp_names[c].n)) { oi->cmp = cmp_names[c].v; found = 1; break; }
      if (found) continue;
      if (mod_is(m, ".and")) { oi->boolop = SG_BOOL_AND; continue; }
      if (mod_is(m, ".or")) { oi->boolop = SG_BOOL_OR; continue; }
      if (mod_is(m, ".xor")) { oi->boolop = SG_BOOL_XOR; continue; }
    }
    int ign = 0;
    for (int g = 0; ignored_mods[g]; g++) if (mod_is(m, ignored_mods[g])) { ign = 1; break; }
    if (ign) { if (mod_is(m, ".uni")) oi->uni = 1; continue; }
    if (m->len > 4 && (memcmp(m->p, ".L1::", 5) == 0 || memcmp(m->p, ".L2::", 5) == 0)) continue;
    oi->words[oi->nwords++] = k;
  }
}

static sg_insn *emit(parser *P, uint32_t line) {
  struct sg_ptx_module *m = P->m;
  GROW(m->code, m->ncode, m->capcode);
  sg_insn *I = &m->code[m->ncode++];
  memset(I, 0, sizeof *I);
  I->guard = SG_NOREG;
  I->line = line;
  I->vec = 1;
  for (int k = 0; k < 4; k++) I->d[k] = I->s[k] = SG_NOREG;
  I->base = SG_K_ZERO;
  I->aux = SG_NOREG;
  return I;
}

static int unsupported(parser *P, const token *t) {
  fail(P, CUDA_ERROR_NOT_SUPPORTED, t->line, "unsupported instruction '%.*s'", (int)t->len, t->p);
  return -1;
}

/* Address operand -> base/off/space of I; returns -1 on error. */
static int set_address(parser *P, sg_insn *I, const opnd *a, int *is_kparam) {
  *is_kparam = 0;
  if (a->kind != PO_ADDR) {
    fail(P, CUDA_ERROR_INVALID_PTX, a->tok ? a->tok->line : 0, "expected an address operand [..]");
    return -1;
  }
  I->off = a->off;
  if (a->base_kind == PO_REG) { I->base = a->reg; return 0; }
  if (a->base_kind == PO_IMM) { I->base = SG_K_ZERO; return 0; }
  sym *s = a->s;
  switch (s->kind) {
    case SYM_KPARAM: *is_kparam = 1; I->off = (int64_t)((uint64_t)I->off + s->a); I->base = SG_K_ZERO; return 0;
    case SYM_FPARAM: I->flags |= SG_F_FPREL; I->off = (int64_t)((uint64_t)I->off + s->a); I->base = SG_K_ZERO; return 0;
    case SYM_SHARED: /* the final offset is added once shared memory is laid out */
      note_shared(P, s);
      GROW(P->shfix, P->nshfix, P->capshfix);
      P->shfix[P->nshfix++] = (fixup){NULL, (uint32_t)s->type, (uint32_t)(I - P->m->code), 0};
      I->base = SG_K_ZERO;
      return 0;
    case SYM_DYNSHARED: I->base = kpatched(P, SG_KP_DYNSHARED, 0, 0); return 0;
    case SYM_LOCAL: I->base = kpatched(P, SG_KP_LOCAL, 0, s->a); return 0;
    case SYM_GLOBAL: I->base = SG_KBIT | P->m->globals[s->a].kidx; return 0;
    default:
      fail(P, CUDA_ERROR_INVALID_PTX, a->tok->line, "'%.*s' cannot be used as an address", (int)a->tok->len, a->tok->p);
      return -1;
  }
}

static int need_ops(parser *P, const token *t, int n, int want) {
  if (n == want) return 0;
  fail(P, CUDA_ERROR_INVALID_PTX, t->line, "'%.*s' expects %d operands, got %d", (int)t->len, t->p, want, n);
  return -1;
}

static int one_type(parser *P, const token *t, const opinfo *oi) {
  if (oi->ntypes != 1) {
    fail(P, CUDA_ERROR_INVALID_PTX, t->line, "'%.*s': expected exactly one type", (int)t->len, t->p);
    return SG_T_NONE;
  }
  return oi->types[0];
}

/* Parses a call statement: call{.uni} (ret), fname, (args); */
static int decode_call(parser *P, const token *optok, uint32_t guard, int gneg) {
  opnd ret;
  int has_ret = 0;
  memset(&ret, 0, sizeof ret);
  if (accept(P, '(')) {
    token *r = next(P);
    if (r->kind != TK_ID || resolve_name(P, r, &ret) || ret.kind != PO_SYM || ret.s->kind != SYM_FPARAM) {
      if (!P->failed) fail(P, CUDA_ERROR_INVALID_PTX, r->line, "call: return value must be a .param variable");
      return -1;
    }
    has_ret = 1;
    if (!expect(P, ')') || !expect(P, ',')) return -1;
  }
  token *fname = next(P);
  if (fname->kind != TK_ID) { fail(P, CUDA_ERROR_INVALID_PTX, fname->line, "call: expected a function name"); return -1; }
  uint32_t dummy;
  sym *loc = find_local(P, fname->p, fname->len, &dummy);
  if (loc && loc->kind == SYM_REG) {
    fail(P, CUDA_ERROR_NOT_SUPPORTED, fname->line, "indirect calls through registers are not supported");
    return -1;
  }
  sg_call_info ci;
  memset(&ci, 0, sizeof ci);
  ci.func = -1;
  ci.has_ret = has_ret;
  if (has_ret) ci.ret = (sg_span){ret.s->a, ret.s->b};
  if (accept(P, ',')) {
    if (!expect(P, '(')) return -1;
    if (!accept(P, ')')) {
      for (;;) {
        token *a = next(P);
        opnd ao;
        if (a->kind != TK_ID || resolve_name(P, a, &ao) || ao.kind != PO_SYM || ao.s->kind != SYM_FPARAM) {
          if (!P->failed) fail(P, CUDA_ERROR_NOT_SUPPORTED, a->line, "call: arguments must be .param variables");
          return -1;
        }
        if (ci.nargs >= 32) { fail(P, CUDA_ERROR_NOT_SUPPORTED, a->line, "call: more than 32 arguments"); return -1; }
        ci.args[ci.nargs++] = (sg_span){ao.s->a, ao.s->b};
        if (accept(P, ',')) continue;
        if (!expect(P, ')')) return -1;
        break;
      }
    }
  }
  if (accept(P, ',')) { /* prototype for indirect calls */
    fail(P, CUDA_ERROR_NOT_SUPPORTED, fname->line, "calls with prototypes are not supported");
    return -1;
  }
  if (!expect(P, ';')) return -1;
  sg_insn *I = emit(P, optok->line);
  I->guard = guard;
  if (gneg) I->flags |= SG_F_GNEG;
  /* Frame offsets of the caller's params are made absolute when the
   * function is relocated; the callee is looked up after all functions are
   * known (it may be defined later in the file). */
  I->op = SG_OP_CALL;
  struct sg_ptx_module *m = P->m;
  GROW(m->calls, m->ncalls, m->capcalls);
  I->aux = (uint32_t)m->ncalls;
  m->calls[m->ncalls++] = ci;
  GROW(P->callfix, P->ncallfix, P->capcallfix);
  P->callfix[P->ncallfix++] = (fixup){fname->p, fname->len, m->ncode - 1, fname->line};
  P->fn->uses_calls = 1;
  return 0;
}

/* Copies a fragment operand's registers into the module's wregs slot. */
static int wmma_frag(parser *P, const token *optok, const opnd *o, int want, uint32_t *slot) {
  if (o->kind != PO_VEC || o->nvec != want) {
    fail(P, CUDA_ERROR_INVALID_PTX, optok->line, "%.*s: expected a fragment of %d registers", (int)optok->len, optok->p, want);
    return -1;
  }
  for (int k = 0; k < want; k++) {
    if (o->vec[k] == SG_NOREG) { fail(P, CUDA_ERROR_INVALID_PTX, optok->line, "'_' in a wmma fragment"); return -1; }
    slot[k] = o->vec[k];
  }
  return 0;
}

/* Splits an opcode token at its dots into words[] (each cut to 15
 * characters); returns the number of words. */
static int opcode_words(const token *optok, char words[16][16]) {
  int nw = 0;
  for (size_t i = 0, st = 0; i <= optok->len && nw < 16; i++) {
    if (i == optok->len || optok->p[i] == '.') {
      size_t n = i - st < 15 ? i - st : 15;
      memcpy(words[nw], optok->p + st, n);
      words[nw++][n] = 0;
      st = i + 1;
    }
  }
  return nw;
}

/* wmma.load / wmma.mma / wmma.store of the m16n16k16, m32n8k16 and
 * m8n32k16 shapes with f16 inputs and f16 or f32 accumulators (what
 * nvcuda::wmma emits for half); other shapes and element types are refused
 * by name.  The fragment layout across lanes is softgpu's own (the ISA
 * leaves it unspecified): element e of an E-element matrix, row-major, is
 * half (e & 1) of register (e >> 1) % n of lane (e >> 1) / n for f16
 * fragments of n registers (repeated 512/E times in the lanes above, for
 * the 8-register a and b fragments), and register e % 8 of lane e / 8 for
 * f32 ones. */
static int decode_wmma(parser *P, const token *optok, opnd *ops, int nops, sg_insn *I) {
  char words[16][16];
  int nw = opcode_words(optok, words);
  int kind = nw > 1 ? (!strcmp(words[1], "load") ? 1 : !strcmp(words[1], "mma") ? 2 : !strcmp(words[1], "store") ? 3 : 0) : 0;
  int matrix = -1, nlayout = 0, layouts = 0, shape_ok = 0, space = SG_SP_GENERIC, ntypes = 0, types[2] = {0, 0}, bad = 0;
  for (int i = 2; i < nw; i++) {
    const char *x = words[i];
    if (!strcmp(x, "sync") || !strcmp(x, "aligned")) continue;
    if (kind == 1 && i == 2 && (!strcmp(x, "a") || !strcmp(x, "b") || !strcmp(x, "c"))) { matrix = x[0] - 'a'; continue; }
    if (kind == 3 && i == 2 && !strcmp(x, "d")) { matrix = SG_WMMA_C; continue; }
    if (!strcmp(x, "row") || !strcmp(x, "col")) { if (x[0] == 'c') layouts |= 1 << nlayout; nlayout++; continue; }
    if (!strcmp(x, "m16n16k16")) { shape_ok = 1; I->shape = SG_WMMA_M16N16K16; continue; }
    if (!strcmp(x, "m32n8k16")) { shape_ok = 1; I->shape = SG_WMMA_M32N8K16; continue; }
    if (!strcmp(x, "m8n32k16")) { shape_ok = 1; I->shape = SG_WMMA_M8N32K16; continue; }
    if (!strcmp(x, "global")) { space = SG_SP_GLOBAL; continue; }
    if (!strcmp(x, "shared")) { space = SG_SP_SHARED; continue; }
    if ((!strcmp(x, "f16") || !strcmp(x, "f32")) && ntypes < 2) { types[ntypes++] = x[1] == '1' ? SG_T_F16 : SG_T_F32; continue; }
    bad = 1;
  }
  int want_layouts = kind == 2 ? 2 : 1;
  if (!kind || bad || !shape_ok || nlayout != want_layouts || (kind != 2 && matrix < 0) ||
      ntypes != (kind == 2 ? 2 : 1) || (kind == 1 && matrix != SG_WMMA_C && types[0] != SG_T_F16)) {
    fail(P, CUDA_ERROR_NOT_SUPPORTED, optok->line,
         "tensor-core instruction '%.*s' is not supported by softgpu (only wmma m16n16k16, m32n8k16 and m8n32k16 "
         "with f16 inputs and f16/f32 accumulators)", (int)optok->len, optok->p);
    return -1;
  }
  struct sg_ptx_module *m = P->m;
  uint32_t at = m->nwregs;
  for (int k = 0; k < SG_WMMA_REGS; k++) { GROW(m->wregs, m->nwregs, m->capwregs); m->wregs[m->nwregs++] = SG_NOREG; }
  uint32_t *slot = m->wregs + at;
  I->aux = at;
  I->mod2 = (uint8_t)layouts;
  I->s[0] = kconst(P, 16);
  if (kind == 2) {
    /* wmma.mma d, a, b, c: types are d's then c's */
    if (need_ops(P, optok, nops, 4)) return -1;
    I->op = SG_OP_WMMA_MMA;
    I->type = (uint8_t)types[0];
    I->type2 = (uint8_t)types[1];
    if (wmma_frag(P, optok, &ops[0], types[0] == SG_T_F32 ? 8 : 4, slot) ||
        wmma_frag(P, optok, &ops[1], 8, slot + SG_WMMA_FRAG) ||
        wmma_frag(P, optok, &ops[2], 8, slot + 2 * SG_WMMA_FRAG) ||
        wmma_frag(P, optok, &ops[3], types[1] == SG_T_F32 ? 8 : 4, slot + 3 * SG_WMMA_FRAG))
      return -1;
    return 0;
  }
  if (nops != 2 && nops != 3) return need_ops(P, optok, nops, 3);
  I->op = kind == 1 ? SG_OP_WMMA_LOAD : SG_OP_WMMA_STORE;
  I->mod = (uint8_t)matrix;
  I->type = (uint8_t)types[0];
  I->space = (uint8_t)space;
  int nregs = matrix != SG_WMMA_C ? 8 : types[0] == SG_T_F32 ? 8 : 4;
  I->vec = (uint8_t)nregs;
  const opnd *frag = kind == 1 ? &ops[0] : &ops[1];
  const opnd *addr = kind == 1 ? &ops[1] : &ops[0];
  int kparam;
  if (set_address(P, I, addr, &kparam)) return -1;
  if (kparam || (I->flags & SG_F_FPREL)) { fail(P, CUDA_ERROR_INVALID_PTX, optok->line, "wmma on a parameter"); return -1; }
  if (nops == 3) I->s[0] = src_index(P, &ops[2], SG_T_U32);
  if (wmma_frag(P, optok, frag, nregs, slot)) return -1;
  return P->failed ? -1 : 0;
}

static int refuse_tensor(parser *P, const token *optok, const char *what) {
  fail(P, CUDA_ERROR_NOT_SUPPORTED, optok->line, "tensor-core instruction '%.*s' is not supported by softgpu (%s)",
       (int)optok->len, optok->p, what);
  return -1;
}

/* Element type named by an mma type word; tf32 is carried as f32. */
static int mma_type(const char *x) {
  if (!strcmp(x, "f16")) return SG_T_F16;
  if (!strcmp(x, "bf16")) return SG_T_BF16;
  if (!strcmp(x, "tf32") || !strcmp(x, "f32")) return SG_T_F32;
  if (!strcmp(x, "f64")) return SG_T_F64;
  if (!strcmp(x, "s8")) return SG_T_S8;
  if (!strcmp(x, "u8")) return SG_T_U8;
  if (!strcmp(x, "s32")) return SG_T_S32;
  return SG_T_NONE;
}

/* mma.sync.aligned.shape.alayout.blayout{.satfinite}.dtype.atype.btype.ctype
 * d, a, b, c for the shapes and types whose fragment layouts sg_ptx_mma.c
 * implements: m16n8k16 (f16, bf16, s8/u8), m16n8k8 (f16, bf16, tf32),
 * m16n8k4 (tf32), m8n8k16 and m16n8k32 (s8/u8), all .row.col, and m8n8k4:
 * f64 (.row.col) and f16 with f16/f32 accumulators (any of .row/.col for
 * A and B: the ISA gives both layouts of each).  The rest (f64 of the
 * other shapes, 4-bit, fp8, sparse, block-scaled) is refused by name. */
static int decode_mma(parser *P, const token *optok, opnd *ops, int nops, sg_insn *I) {
  char words[16][16];
  int nw = opcode_words(optok, words);
  int shape = 0, nlayouts = 0, layouts[2] = {0, 0}, sat = 0, ntypes = 0, types[4] = {0, 0, 0, 0}, sync = 0, aligned = 0;
  char tnames[4][16];
  for (int i = 1; i < nw; i++) {
    const char *x = words[i];
    if (!strcmp(x, "sync")) { sync = 1; continue; }
    if (!strcmp(x, "aligned")) { aligned = 1; continue; }
    if (!strcmp(x, "m16n8k16")) { shape = SG_MMA_M16N8K16; continue; }
    if (!strcmp(x, "m16n8k8")) { shape = SG_MMA_M16N8K8; continue; }
    if (!strcmp(x, "m16n8k4")) { shape = SG_MMA_M16N8K4; continue; }
    if (!strcmp(x, "m8n8k16")) { shape = SG_MMA_M8N8K16; continue; }
    if (!strcmp(x, "m16n8k32")) { shape = SG_MMA_M16N8K32; continue; }
    if (!strcmp(x, "m8n8k4")) { shape = SG_MMA_M8N8K4; continue; }
    /* the first layout word is A's, the second B's (1: column-major) */
    if ((!strcmp(x, "row") || !strcmp(x, "col")) && nlayouts < 2 && !ntypes) { layouts[nlayouts++] = x[0] == 'c'; continue; }
    if (!strcmp(x, "satfinite")) { sat = 1; continue; }
    if (ntypes < 4 && mma_type(x)) { strcpy(tnames[ntypes], x); types[ntypes++] = mma_type(x); continue; }
    return refuse_tensor(P, optok, "only m16n8k16/m16n8k8/m16n8k4/m8n8k16/m16n8k32 .row.col mma with f16, bf16, tf32, s8 or u8 inputs, "
                                   "and m8n8k4 with f16 or f64 inputs");
  }
  if (!sync || !aligned || !shape || nlayouts != 2 || ntypes != 4)
    return refuse_tensor(P, optok, "only mma.sync.aligned with a m16n8k16/m16n8k8/m16n8k4/m8n8k16/m16n8k32/m8n8k4 shape, two layouts "
                                   "and four types");
  int dt = types[0], at = types[1], bt = types[2], ct = types[3];
  int a_tf32 = !strcmp(tnames[1], "tf32"), b_tf32 = !strcmp(tnames[2], "tf32");
  int row_col = !layouts[0] && layouts[1];
  /* m8n8k4 with f16 inputs is four independent products, one per quad
   * pair (lanes 4q..4q+3 and 16+4q..16+4q+3): 8 lanes share each tile. */
  int quadpair = shape == SG_MMA_M8N8K4 && at == SG_T_F16;
  int ok;
  if (!row_col && !quadpair) {
    ok = 0;
  } else if (at == SG_T_S8 || at == SG_T_U8) {
    ok = (bt == SG_T_S8 || bt == SG_T_U8) && dt == SG_T_S32 && ct == SG_T_S32 &&
         (shape == SG_MMA_M16N8K16 || shape == SG_MMA_M8N8K16 || shape == SG_MMA_M16N8K32);
  } else if (a_tf32) {
    ok = b_tf32 && dt == SG_T_F32 && ct == SG_T_F32 && (shape == SG_MMA_M16N8K8 || shape == SG_MMA_M16N8K4) && !sat;
  } else if (at == SG_T_BF16) {
    ok = bt == SG_T_BF16 && dt == SG_T_F32 && ct == SG_T_F32 && (shape == SG_MMA_M16N8K16 || shape == SG_MMA_M16N8K8) && !sat;
  } else if (at == SG_T_F16) {
    ok = bt == SG_T_F16 && (dt == SG_T_F16 || dt == SG_T_F32) && (ct == SG_T_F16 || ct == SG_T_F32) &&
         (shape == SG_MMA_M16N8K16 || shape == SG_MMA_M16N8K8 || shape == SG_MMA_M8N8K4) && !sat;
  } else if (at == SG_T_F64) {
    ok = bt == SG_T_F64 && dt == SG_T_F64 && ct == SG_T_F64 && shape == SG_MMA_M8N8K4 && !sat;
  } else {
    ok = 0;
  }
  if (!ok) return refuse_tensor(P, optok, "this shape, layout and type combination of mma is not emulated");
  /* The ISA gives m8n8k4's accumulator layouts "when .ctype is .f16" and
   * "when .ctype is .f32" only; which one a D of the other type follows is
   * not stated, so the mixed forms are refused rather than guessed. */
  if (quadpair && dt != ct)
    return refuse_tensor(P, optok, "m8n8k4 with .f16 inputs only with .dtype equal to .ctype (the ISA does not give D's layout otherwise)");
  if (need_ops(P, optok, nops, 4)) return -1;
  unsigned M, N, K;
  sg_mma_dims(shape, &M, &N, &K);
  unsigned lanes = quadpair ? 8 : 32;
  unsigned esz[4];
  for (int k = 0; k < 4; k++) esz[k] = types[k] == SG_T_F16 || types[k] == SG_T_BF16 ? 16 : types[k] == SG_T_S8 || types[k] == SG_T_U8 ? 8 : 32;
  /* registers per lane: elements per lane * element bits / 32; an f64
   * element fills one (64-bit) register */
  unsigned per_lane[4] = {M * N / lanes, M * K / lanes, K * N / lanes, M * N / lanes};
  int nregs[4];
  for (int k = 0; k < 4; k++) nregs[k] = (int)(types[k] == SG_T_F64 ? per_lane[k] : per_lane[k] * esz[k] / 32);
  struct sg_ptx_module *m = P->m;
  uint32_t at_ = m->nwregs;
  for (int k = 0; k < SG_WMMA_REGS; k++) { GROW(m->wregs, m->nwregs, m->capwregs); m->wregs[m->nwregs++] = SG_NOREG; }
  uint32_t *slot = m->wregs + at_;
  for (int k = 0; k < 4; k++)
    if (wmma_frag(P, optok, &ops[k], nregs[k], slot + k * SG_WMMA_FRAG)) return -1;
  I->shape = (uint8_t)(layouts[0] | layouts[1] << 1);
  I->op = SG_OP_MMA;
  I->aux = at_;
  I->mod = (uint8_t)shape;
  I->type = (uint8_t)dt;
  I->type2 = (uint8_t)ct;
  I->mod2 = (uint8_t)at;
  I->space = (uint8_t)bt;
  if (sat) I->flags |= SG_F_SAT;
  return 0;
}

/* ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared{::cta}.b16 d, [a]
 * and stmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared{::cta}.b16 [a], s:
 * 8, 16 or 32 lanes each give the address of one 16-byte row. */
static int decode_ldmatrix(parser *P, const token *optok, opnd *ops, int nops, sg_insn *I) {
  char words[16][16];
  int nw = opcode_words(optok, words);
  int st = !strcmp(words[0], "stmatrix");
  const char *only = st ? "only stmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared.b16"
                        : "only ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared.b16";
  int num = 0, trans = 0, shape = 0, shared = 0, b16 = 0, sync = 0, aligned = 0;
  for (int i = 1; i < nw; i++) {
    const char *x = words[i];
    if (!strcmp(x, "sync")) sync = 1;
    else if (!strcmp(x, "aligned")) aligned = 1;
    else if (!strcmp(x, "m8n8")) shape = 1;
    else if (!strcmp(x, "x1") || !strcmp(x, "x2") || !strcmp(x, "x4")) num = x[1] - '0';
    else if (!strcmp(x, "trans")) trans = 1;
    else if (!strcmp(x, "shared") || !strcmp(x, "shared::cta")) shared = 1;
    else if (!strcmp(x, "b16")) b16 = 1;
    else return refuse_tensor(P, optok, only);
  }
  if (!sync || !aligned || !shape || !num || !shared || !b16) return refuse_tensor(P, optok, only);
  if (need_ops(P, optok, nops, 2)) return -1;
  const opnd *d = &ops[st ? 1 : 0];
  uint32_t *regs = st ? I->s : I->d;
  if (d->kind == PO_REG && num == 1 && !(d->reg & SG_PBIT)) {
    regs[0] = d->reg;
  } else if (d->kind == PO_VEC && d->nvec == num) {
    for (int k = 0; k < num; k++) {
      if (d->vec[k] == SG_NOREG) { fail(P, CUDA_ERROR_INVALID_PTX, optok->line, "'_' in %s registers", words[0]); return -1; }
      regs[k] = d->vec[k];
    }
  } else {
    fail(P, CUDA_ERROR_INVALID_PTX, optok->line, "%.*s: expected %d registers", (int)optok->len, optok->p, num);
    return -1;
  }
  int kparam;
  if (set_address(P, I, &ops[st ? 0 : 1], &kparam)) return -1;
  if (kparam || (I->flags & SG_F_FPREL)) { fail(P, CUDA_ERROR_INVALID_PTX, optok->line, "%s on a parameter", words[0]); return -1; }
  I->op = st ? SG_OP_STMATRIX : SG_OP_LDMATRIX;
  I->space = SG_SP_SHARED;
  I->vec = (uint8_t)num;
  I->mod2 = (uint8_t)trans;
  I->type = SG_T_B16;
  return 0;
}

/* cp.async.{ca,cg}.shared{::cta}.global{.L2::cache_hint}{.L2::NB}
 * [dst], [src], cp-size{, src-size | ignore-src}{, cache-policy}, and the
 * group operations commit_group / wait_group N / wait_all.  The copy is
 * done when the instruction executes: completing before the wait is one of
 * the orders the asynchronous copy allows (a program that reads the
 * destination before waiting races), so the group operations are no-ops.
 * dst is base/off (shared), src s[0] + constant s[2], src-size s[1],
 * ignore-src predicate s[3], cp-size in mod. */
static int decode_cp_async(parser *P, const token *optok, opnd *ops, int nops, sg_insn *I) {
  char words[16][16];
  int nw = opcode_words(optok, words);
  if (nw == 3 && !strcmp(words[2], "commit_group")) {
    if (need_ops(P, optok, nops, 0)) return -1;
    I->op = SG_OP_NOP;
    return 0;
  }
  if (nw == 3 && !strcmp(words[2], "wait_all")) {
    if (need_ops(P, optok, nops, 0)) return -1;
    I->op = SG_OP_NOP;
    return 0;
  }
  if (nw == 3 && !strcmp(words[2], "wait_group")) {
    if (need_ops(P, optok, nops, 1)) return -1;
    if (ops[0].kind != PO_IMM) { fail(P, CUDA_ERROR_INVALID_PTX, optok->line, "cp.async.wait_group takes an integer constant"); return -1; }
    I->op = SG_OP_NOP;
    return 0;
  }
  int cg = 0, ca = 0, shared = 0, global = 0, hint = 0;
  for (int i = 2; i < nw; i++) {
    const char *x = words[i];
    if (!strcmp(x, "ca")) ca = 1;
    else if (!strcmp(x, "cg")) cg = 1;
    else if (!strcmp(x, "shared") || !strcmp(x, "shared::cta")) shared = 1;
    else if (!strcmp(x, "global")) global = 1;
    else if (!strcmp(x, "L2::cache_hint")) hint = 1;
    else if (!strcmp(x, "L2::64B") || !strcmp(x, "L2::128B") || !strcmp(x, "L2::256B")) continue;
    else return unsupported(P, optok);
  }
  if (ca + cg != 1 || !shared || !global) return unsupported(P, optok);
  int n = nops - hint; /* the cache policy (last operand) is only a hint */
  if (n < 3 || n > 4) return need_ops(P, optok, nops, 3 + hint);
  int kparam;
  if (set_address(P, I, &ops[0], &kparam)) return -1;
  if (kparam || (I->flags & SG_F_FPREL)) { fail(P, CUDA_ERROR_INVALID_PTX, optok->line, "cp.async into a parameter"); return -1; }
  const opnd *src = &ops[1];
  if (src->kind != PO_ADDR) { fail(P, CUDA_ERROR_INVALID_PTX, optok->line, "cp.async: expected a source address [..]"); return -1; }
  if (src->base_kind == PO_REG) I->s[0] = src->reg;
  else if (src->base_kind == PO_IMM) I->s[0] = SG_K_ZERO;
  else if (src->s->kind == SYM_GLOBAL) I->s[0] = SG_KBIT | P->m->globals[src->s->a].kidx;
  else { fail(P, CUDA_ERROR_INVALID_PTX, optok->line, "cp.async: the source must be global memory"); return -1; }
  I->s[2] = kconst(P, (uint64_t)src->off);
  if (ops[2].kind != PO_IMM || (ops[2].imm != 4 && ops[2].imm != 8 && ops[2].imm != 16) || (cg && ops[2].imm != 16)) {
    fail(P, CUDA_ERROR_INVALID_PTX, optok->line, "cp.async: cp-size must be 4, 8 or 16 (16 for .cg)");
    return -1;
  }
  I->mod = (uint8_t)ops[2].imm;
  if (n == 4) {
    if (ops[3].kind == PO_REG && (ops[3].reg & SG_PBIT)) {
      I->s[3] = pred_index(P, &ops[3]);
      if (ops[3].neg) I->flags |= SG_F_CNEG;
    } else {
      I->s[1] = src_index(P, &ops[3], SG_T_U32);
    }
  }
  I->op = SG_OP_CP_ASYNC;
  I->space = SG_SP_SHARED;
  return P->failed ? -1 : 0;
}

/* Texture and surface instructions on objects (unified mode; see
 * sg_ptx_tex.c for what they do and sg_ptx_internal.h for the encoding):
 *   tex.{1d,2d,3d,a1d,a2d}.v4.{f32,s32,u32}.{f32,s32}  d, [obj, {coords}]
 *   tld4.{r,g,b,a}.2d.v4.{f32,s32,u32}.f32             d, [obj, {x, y}]
 *   txq.{width,height,depth,normalized_coords,filter_mode,addr_mode_0..2,
 *        array_size}.b32                                d, [obj]
 *   suld.b.{1d,2d,3d,a1d,a2d}{.v2,.v4}.{b8,b16,b32,b64}.{trap,clamp,zero}
 *   sust.b.(same)                                       [obj, {coords}], {values}
 * Everything else of the family (texture references and samplers,
 * mipmaps, cube maps, depth compare, offsets, the predicate output,
 * formatted sust.p, suq, other txq queries) is refused by name. */
static int tex_geometry(const char *w) {
  if (!strcmp(w, "1d")) return SG_TEXG_1D;
  if (!strcmp(w, "2d")) return SG_TEXG_2D;
  if (!strcmp(w, "3d")) return SG_TEXG_3D;
  if (!strcmp(w, "a1d")) return SG_TEXG_A1D;
  if (!strcmp(w, "a2d")) return SG_TEXG_A2D;
  return 0;
}

static int tex_coord_count(int g) {
  switch (g) {
    case SG_TEXG_1D: return 1;
    case SG_TEXG_2D: return 2;
    case SG_TEXG_A1D: return 2;
    default: return 4; /* 3d: x, y, z, ignored; a2d: layer, x, y, ignored */
  }
}

static int refuse_tex(parser *P, const token *optok, const char *why) {
  fail(P, CUDA_ERROR_NOT_SUPPORTED, optok->line, "unsupported instruction '%.*s': %s", (int)optok->len, optok->p, why);
  return -1;
}

/* [obj] or [obj, {coords}]: the object handle as a 64-bit register. */
static int parse_tex_address(parser *P, const token *optok, opnd *obj, opnd *coords) {
  if (!expect(P, '[')) return -1;
  if (parse_operand(P, obj)) return -1;
  if (obj->kind != PO_REG || (obj->reg & SG_PBIT)) {
    if (obj->kind == PO_SYM) return refuse_tex(P, optok, "texture/surface references named by symbol are not supported (use texture objects)");
    fail(P, CUDA_ERROR_INVALID_PTX, optok->line, "'%.*s': expected a texture/surface object register", (int)optok->len, optok->p);
    return -1;
  }
  memset(coords, 0, sizeof *coords);
  if (accept(P, ',')) {
    if (parse_operand(P, coords)) return -1;
    if (coords->kind != PO_VEC) {
      fail(P, CUDA_ERROR_INVALID_PTX, optok->line, "'%.*s': coordinates must be a vector {..}", (int)optok->len, optok->p);
      return -1;
    }
  }
  return expect(P, ']') ? 0 : -1;
}

static int decode_texsurf(parser *P, const token *optok, uint32_t guard, int gneg) {
  /* words of up to 31 characters ("normalized_coords" does not fit opcode_words') */
  char w[16][32];
  int nw = 0;
  for (size_t i = 0, st = 0; i <= optok->len && nw < 16; i++) {
    if (i == optok->len || optok->p[i] == '.') {
      size_t n = i - st;
      if (n > 31) return refuse_tex(P, optok, "unknown modifier");
      memcpy(w[nw], optok->p + st, n);
      w[nw++][n] = 0;
      st = i + 1;
    }
  }
  const char *b = w[0];
  int op = !strcmp(b, "tex") ? SG_OP_TEX : !strcmp(b, "tld4") ? SG_OP_TLD4 : !strcmp(b, "txq") ? SG_OP_TXQ
         : !strcmp(b, "suld") ? SG_OP_SULD : !strcmp(b, "sust") ? SG_OP_SUST : SG_OP_SUQ;
  if (op == SG_OP_SUQ) return refuse_tex(P, optok, "suq is not supported by softgpu");
  int geom = 0, vec = 1, type = 0, type2 = 0, mode = SG_SU_TRAP, comp = 0, query = 0;
  int k = 1;
  if (op == SG_OP_TLD4) {
    if (k >= nw || strlen(w[k]) != 1 || !strchr("rgba", w[k][0])) return refuse_tex(P, optok, "expected tld4.{r,g,b,a}");
    comp = (int)(strchr("rgba", w[k][0]) - "rgba");
    k++;
  }
  if (op == SG_OP_TXQ) {
    static const struct { const char *n; int q; } qs[] = {
      {"width", SG_TXQ_WIDTH}, {"height", SG_TXQ_HEIGHT}, {"depth", SG_TXQ_DEPTH},
      {"normalized_coords", SG_TXQ_NORMALIZED_COORDS}, {"filter_mode", SG_TXQ_FILTER_MODE},
      {"addr_mode_0", SG_TXQ_ADDR_MODE_0}, {"addr_mode_1", SG_TXQ_ADDR_MODE_1},
      {"addr_mode_2", SG_TXQ_ADDR_MODE_2}, {"array_size", SG_TXQ_ARRAY_SIZE},
    };
    for (size_t q = 0; k < nw && q < sizeof qs / sizeof qs[0]; q++)
      if (!strcmp(w[k], qs[q].n)) query = qs[q].q;
    if (!query || nw != 3 || strcmp(w[2], "b32"))
      return refuse_tex(P, optok, "txq supports width, height, depth, normalized_coords, filter_mode, addr_mode_0..2 and array_size (.b32) only");
  } else {
    if (op == SG_OP_SULD || op == SG_OP_SUST) {
      if (k >= nw || strcmp(w[k], "b")) return refuse_tex(P, optok, "only the unformatted surface accesses suld.b/sust.b are supported");
      k++;
    }
    geom = k < nw ? tex_geometry(w[k]) : 0;
    if (!geom) return refuse_tex(P, optok, "geometries 1d, 2d, 3d, a1d and a2d are supported (no cube maps, multisample or mipmap levels)");
    if (op == SG_OP_TLD4 && geom != SG_TEXG_2D) return refuse_tex(P, optok, "tld4 is supported for 2d only");
    k++;
    if (op == SG_OP_TEX || op == SG_OP_TLD4) {
      if (k >= nw || strcmp(w[k], "v4")) return refuse_tex(P, optok, "only .v4 results are supported (no .level/.grad/.base, no .v2.f16x2)");
      vec = 4;
      k++;
      if (k + 2 != nw) return refuse_tex(P, optok, "expected .dtype.ctype after .v4");
      type = !strcmp(w[k], "f32") ? SG_T_F32 : !strcmp(w[k], "s32") ? SG_T_S32 : !strcmp(w[k], "u32") ? SG_T_U32 : 0;
      type2 = !strcmp(w[k + 1], "f32") ? SG_T_F32 : !strcmp(w[k + 1], "s32") ? SG_T_S32 : 0;
      if (!type || !type2) return refuse_tex(P, optok, "result types f32/s32/u32 and coordinate types f32/s32 are supported");
      if (op == SG_OP_TLD4 && type2 != SG_T_F32) return refuse_tex(P, optok, "tld4 takes f32 coordinates");
    } else {
      if (k < nw && (!strcmp(w[k], "v2") || !strcmp(w[k], "v4"))) { vec = w[k][1] - '0'; k++; }
      type = k < nw ? (!strcmp(w[k], "b8") ? SG_T_B8 : !strcmp(w[k], "b16") ? SG_T_B16
                     : !strcmp(w[k], "b32") ? SG_T_B32 : !strcmp(w[k], "b64") ? SG_T_B64 : 0) : 0;
      if (!type) return refuse_tex(P, optok, "element types b8, b16, b32 and b64 are supported");
      k++;
      if (k < nw) {
        if (!strcmp(w[k], "trap")) mode = SG_SU_TRAP;
        else if (!strcmp(w[k], "clamp")) mode = SG_SU_CLAMP;
        else if (!strcmp(w[k], "zero")) mode = SG_SU_ZERO;
        else return refuse_tex(P, optok, "out-of-range modes .trap, .clamp and .zero are supported (no cache operators)");
        k++;
      }
      if (k != nw) return refuse_tex(P, optok, "unexpected modifier");
    }
  }

  opnd dst, obj, coords, src;
  memset(&dst, 0, sizeof dst);
  memset(&src, 0, sizeof src);
  if (op == SG_OP_SUST) {
    if (parse_tex_address(P, optok, &obj, &coords)) return -1;
    if (!expect(P, ',')) return -1;
    if (parse_operand(P, &src)) return -1;
  } else {
    if (parse_operand(P, &dst)) return -1;
    if (is_punct(peek(P), '|')) return refuse_tex(P, optok, "the optional predicate output is not supported");
    if (!expect(P, ',')) return -1;
    if (parse_tex_address(P, optok, &obj, &coords)) return -1;
  }
  if (!is_punct(peek(P), ';')) return refuse_tex(P, optok, "extra operands (offsets, depth compare, LOD) are not supported");
  if (!expect(P, ';')) return -1;

  sg_insn *I = emit(P, optok->line);
  I->guard = guard;
  if (gneg) I->flags |= SG_F_GNEG;
  I->op = (uint16_t)op;
  I->base = obj.reg;
  I->vec = (uint8_t)vec;
  I->type = (uint8_t)type;
  I->type2 = (uint8_t)type2;
  if (op == SG_OP_TXQ) {
    I->mod = (uint8_t)query;
    I->type = SG_T_B32;
    if (coords.kind == PO_VEC) { fail(P, CUDA_ERROR_INVALID_PTX, optok->line, "txq takes no coordinates"); return -1; }
    I->d[0] = dst_index(P, &dst);
    if (I->d[0] == SG_NOREG && !P->failed) { fail(P, CUDA_ERROR_INVALID_PTX, optok->line, "txq needs a destination register"); return -1; }
    return P->failed ? -1 : 0;
  }
  I->mod = (uint8_t)geom;
  I->mod2 = (uint8_t)(op == SG_OP_TLD4 ? comp : mode);
  int want = op == SG_OP_SULD || op == SG_OP_SUST ? (geom == SG_TEXG_1D ? 1 : geom == SG_TEXG_2D || geom == SG_TEXG_A1D ? 2 : 4)
                                                   : tex_coord_count(geom);
  if (coords.kind != PO_VEC || coords.nvec != want) {
    fail(P, CUDA_ERROR_INVALID_PTX, optok->line, "'%.*s' expects %d coordinates", (int)optok->len, optok->p, want);
    return -1;
  }
  for (int c = 0; c < want && c < 4; c++) {
    if (coords.vec[c] == SG_NOREG) { fail(P, CUDA_ERROR_INVALID_PTX, optok->line, "a coordinate cannot be '_'"); return -1; }
    I->s[c] = coords.vec[c];
  }
  const opnd *vals = op == SG_OP_SUST ? &src : &dst;
  int nvals = vals->kind == PO_VEC ? vals->nvec : 1;
  if (nvals != vec) {
    fail(P, CUDA_ERROR_INVALID_PTX, optok->line, "'%.*s' expects a vector of %d registers", (int)optok->len, optok->p, vec);
    return -1;
  }
  for (int c = 0; c < vec; c++) {
    uint32_t r = vals->kind == PO_VEC ? vals->vec[c] : op == SG_OP_SUST ? src_index(P, vals, type) : dst_index(P, vals);
    if (op == SG_OP_SUST && r == SG_NOREG) { fail(P, CUDA_ERROR_INVALID_PTX, optok->line, "sust cannot store '_'"); return -1; }
    I->d[c] = r;
  }
  return P->failed ? -1 : 0;
}

static int decode_insn(parser *P, uint32_t guard, int gneg) {
  token *optok = next(P);
  opinfo oi;
  split_opcode(optok, &oi);
  const char *b = oi.base;
  int is_setp = !strcmp(b, "setp") || !strcmp(b, "set");
  classify_mods(&oi, is_setp);

  if (!strcmp(b, "tex") || !strcmp(b, "tld4") || !strcmp(b, "txq") || !strcmp(b, "suld") || !strcmp(b, "sust") ||
      !strcmp(b, "suq"))
    return decode_texsurf(P, optok, guard, gneg);

  if (!strcmp(b, "call")) {
    if (oi.nwords) return unsupported(P, optok);
    return decode_call(P, optok, guard, gneg);
  }

  /* Tensor-core instructions work on fragments of 8 and more registers
   * whose lane layout is the hardware's; softgpu does not model them.  Say
   * so by name, before their operands would fail as over-long vectors. */
  if (!strcmp(b, "wgmma") || !strncmp(b, "tcgen05", 7))
    return refuse_tensor(P, optok, "no emulation of it");

  opnd ops[8];
  int nops = 0;
  if (!is_punct(peek(P), ';')) {
    for (;;) {
      if (nops >= 8) { fail(P, CUDA_ERROR_INVALID_PTX, optok->line, "too many operands"); return -1; }
      if (parse_operand(P, &ops[nops])) return -1;
      nops++;
      /* d|p destination pairs of shfl/match */
      if (accept(P, '|')) {
        if (nops >= 8) { fail(P, CUDA_ERROR_INVALID_PTX, optok->line, "too many operands"); return -1; }
        if (parse_operand(P, &ops[nops])) return -1;
        ops[nops].sub = 1; /* marks the second half of a pair */
        nops++;
      }
      if (accept(P, ',')) continue;
      break;
    }
  }
  if (!expect(P, ';')) return -1;

  sg_insn *I = emit(P, optok->line);
  I->guard = guard;
  if (gneg) I->flags |= SG_F_GNEG;
  if (oi.ftz) I->flags |= SG_F_FTZ;
  if (oi.sat) I->flags |= SG_F_SAT;
  if (oi.nan) I->flags |= SG_F_NAN;
  I->vec = (uint8_t)oi.vec;

  if (!strcmp(b, "wmma")) return decode_wmma(P, optok, ops, nops, I);
  if (!strcmp(b, "mma")) return decode_mma(P, optok, ops, nops, I);
  if (!strcmp(b, "ldmatrix") || !strcmp(b, "stmatrix")) return decode_ldmatrix(P, optok, ops, nops, I);
  if (!strcmp(b, "movmatrix")) {
    /* movmatrix.sync.aligned.m8n8.trans.b16 d, a: the only form there is */
    if (!tok_is(optok, "movmatrix.sync.aligned.m8n8.trans.b16"))
      return refuse_tensor(P, optok, "only movmatrix.sync.aligned.m8n8.trans.b16");
    if (need_ops(P, optok, nops, 2)) return -1;
    I->op = SG_OP_MOVMATRIX;
    I->d[0] = dst_index(P, &ops[0]);
    I->s[0] = src_index(P, &ops[1], SG_T_B32);
    return P->failed ? -1 : 0;
  }
  if (!strcmp(b, "cp") && optok->len > 9 && !memcmp(optok->p, "cp.async.", 9) &&
      memcmp(optok->p, "cp.async.bulk", 13) != 0 && memcmp(optok->p, "cp.async.mbarrier", 17) != 0)
    return decode_cp_async(P, optok, ops, nops, I);

  /* ---- simple arithmetic: op d, a, b [, c] */
  static const struct { const char *n; int op; int nsrc; } arith[] = {
    {"add", SG_OP_ADD, 2}, {"sub", SG_OP_SUB, 2}, {"mul", SG_OP_MUL, 2}, {"mad", SG_OP_MAD, 3},
    {"fma", SG_OP_FMA, 3}, {"div", SG_OP_DIV, 2}, {"rem", SG_OP_REM, 2}, {"min", SG_OP_MIN, 2},
    {"max", SG_OP_MAX, 2}, {"neg", SG_OP_NEG, 1}, {"abs", SG_OP_ABS, 1}, {"copysign", SG_OP_COPYSIGN, 2},
    {"and", SG_OP_AND, 2}, {"or", SG_OP_OR, 2}, {"xor", SG_OP_XOR, 2}, {"not", SG_OP_NOT, 1},
    {"cnot", SG_OP_CNOT, 1}, {"shl", SG_OP_SHL, 2}, {"shr", SG_OP_SHR, 2}, {"popc", SG_OP_POPC, 1},
    {"clz", SG_OP_CLZ, 1}, {"brev", SG_OP_BREV, 1}, {"bfe", SG_OP_BFE, 3}, {"bfi", SG_OP_BFI, 4},
    {"bfind", SG_OP_BFIND, 1}, {"sad", SG_OP_SAD, 3},
    {"rcp", SG_OP_RCP, 1}, {"sqrt", SG_OP_SQRT, 1}, {"rsqrt", SG_OP_RSQRT, 1}, {"ex2", SG_OP_EX2, 1},
    {"lg2", SG_OP_LG2, 1}, {"sin", SG_OP_SIN, 1}, {"cos", SG_OP_COS, 1}, {"tanh", SG_OP_TANH, 1},
  };
  for (size_t k = 0; k < sizeof arith / sizeof arith[0]; k++) {
    if (strcmp(b, arith[k].n)) continue;
    int op = arith[k].op;
    int ty = one_type(P, optok, &oi);
    if (!ty) return -1;
    if (oi.nwords) {
      /* bfind.shiftamt is the only word modifier among these */
      if (op == SG_OP_BFIND && oi.nwords == 1 && mod_is(&oi.mods[oi.words[0]], ".shiftamt")) I->mod2 = 1;
      else if ((op == SG_OP_ADD || op == SG_OP_SUB || op == SG_OP_MAD) && oi.nwords == 1 && mod_is(&oi.mods[oi.words[0]], ".cc"))
        break; /* decoded below with the carry instructions */
      else return unsupported(P, optok);
    }
    if (need_ops(P, optok, nops, 1 + arith[k].nsrc)) return -1;
    if (ty == SG_T_PRED) {
      switch (op) {
        case SG_OP_AND: op = SG_OP_PAND; break;
        case SG_OP_OR: op = SG_OP_POR; break;
        case SG_OP_XOR: op = SG_OP_PXOR; break;
        case SG_OP_NOT: op = SG_OP_PNOT; break;
        default: return unsupported(P, optok);
      }
      I->op = (uint16_t)op;
      I->type = SG_T_PRED;
      I->d[0] = pred_index(P, &ops[0]);
      I->s[0] = pred_index(P, &ops[1]);
      if (ops[1].neg) I->flags |= SG_F_ANEG;
      if (nops > 2) { I->s[1] = pred_index(P, &ops[2]); if (ops[2].neg) I->flags |= SG_F_BNEG; }
      return 0;
    }
    if ((ty == SG_T_U16X2 || ty == SG_T_S16X2) &&
        ((op != SG_OP_ADD && op != SG_OP_SUB && op != SG_OP_MIN && op != SG_OP_MAX) || oi.sat))
      return unsupported(P, optok);
    I->op = (uint16_t)op;
    I->type = (uint8_t)ty;
    I->mod = (uint8_t)oi.rnd;
    if (op == SG_OP_MUL || op == SG_OP_MAD) {
      if (type_is_float(ty)) I->mod2 = SG_MUL_F;
      else I->mod2 = (uint8_t)oi.mul;
    }
    /* sources of shl/shr/bfe positions are u32 regardless of type */
    I->d[0] = dst_index(P, &ops[0]);
    for (int s = 0; s < arith[k].nsrc; s++) {
      int st = ty;
      if ((op == SG_OP_SHL || op == SG_OP_SHR) && s == 1) st = SG_T_U32;
      if (op == SG_OP_BFE && s >= 1) st = SG_T_U32;
      if (op == SG_OP_BFI && s >= 2) st = SG_T_U32;
      if ((op == SG_OP_MUL || op == SG_OP_MAD) && oi.mul == SG_MUL_WIDE && s == 2) {
        /* mad.wide: c is the double-width type */
        st = ty == SG_T_S16 ? SG_T_S32 : ty == SG_T_U16 ? SG_T_U32 : ty == SG_T_S32 ? SG_T_S64 : SG_T_U64;
      }
      I->s[s] = src_index(P, &ops[1 + s], st);
    }
    if (oi.approx) I->mod2 = (uint8_t)(I->mod2 | 0x80);
    return P->failed ? -1 : 0;
  }

  if (!strcmp(b, "madc") || (!strcmp(b, "mad") && oi.nwords == 1 && mod_is(&oi.mods[oi.words[0]], ".cc"))) {
    int ty = one_type(P, optok, &oi);
    if (!ty) return -1;
    int cc = 0;
    for (int w = 0; w < oi.nwords; w++) {
      if (mod_is(&oi.mods[oi.words[w]], ".cc")) cc = 1;
      else return unsupported(P, optok);
    }
    if ((tsize_of(ty) != 4 && tsize_of(ty) != 8) || oi.mul == SG_MUL_WIDE || type_is_float(ty)) return unsupported(P, optok);
    if (need_ops(P, optok, nops, 4)) return -1;
    I->op = SG_OP_MADC;
    I->type = (uint8_t)ty;
    I->mod = (uint8_t)oi.mul; /* lo or hi */
    I->mod2 = (uint8_t)((b[3] == 'c' ? 1 : 0) | (cc ? 2 : 0));
    I->d[0] = dst_index(P, &ops[0]);
    for (int k = 0; k < 3; k++) I->s[k] = src_index(P, &ops[1 + k], ty);
    return P->failed ? -1 : 0;
  }
  if (!strcmp(b, "addc") || !strcmp(b, "subc") ||
      ((!strcmp(b, "add") || !strcmp(b, "sub")) && oi.nwords == 1 && mod_is(&oi.mods[oi.words[0]], ".cc"))) {
    /* multi-word integer arithmetic through the carry flag */
    int ty = one_type(P, optok, &oi);
    if (!ty) return -1;
    int cc = 0;
    for (int w = 0; w < oi.nwords; w++) {
      if (mod_is(&oi.mods[oi.words[w]], ".cc")) cc = 1;
      else return unsupported(P, optok);
    }
    if (tsize_of(ty) != 4 && tsize_of(ty) != 8) return unsupported(P, optok);
    if (need_ops(P, optok, nops, 3)) return -1;
    I->op = SG_OP_ADDC;
    I->type = (uint8_t)ty;
    I->mod = b[0] == 's';                              /* subtract */
    I->mod2 = (uint8_t)((b[3] == 'c' ? 1 : 0) | (cc ? 2 : 0)); /* 1: carry in, 2: carry out */
    I->d[0] = dst_index(P, &ops[0]);
    I->s[0] = src_index(P, &ops[1], ty);
    I->s[1] = src_index(P, &ops[2], ty);
    return P->failed ? -1 : 0;
  }
  if (!strcmp(b, "bmsk") || !strcmp(b, "szext")) {
    int clamp = -1;
    for (int w = 0; w < oi.nwords; w++) {
      const mtok *m = &oi.mods[oi.words[w]];
      if (mod_is(m, ".clamp")) clamp = 1;
      else if (mod_is(m, ".wrap")) clamp = 0;
      else return unsupported(P, optok);
    }
    int ty = one_type(P, optok, &oi);
    if (!ty) return -1;
    if (clamp < 0 || tsize_of(ty) != 4) return unsupported(P, optok);
    if (need_ops(P, optok, nops, 3)) return -1;
    I->op = b[0] == 'b' ? SG_OP_BMSK : SG_OP_SZEXT;
    I->type = (uint8_t)ty;
    I->mod2 = (uint8_t)clamp;
    I->d[0] = dst_index(P, &ops[0]);
    for (int k = 0; k < 2; k++) I->s[k] = src_index(P, &ops[1 + k], SG_T_U32);
    return P->failed ? -1 : 0;
  }
  if (!strcmp(b, "shf")) {
    int dir = 0, clamp = -1;
    for (int w = 0; w < oi.nwords; w++) {
      const mtok *m = &oi.mods[oi.words[w]];
      if (mod_is(m, ".l")) dir = 1;
      else if (mod_is(m, ".r")) dir = 2;
      else if (mod_is(m, ".clamp")) clamp = 1;
      else if (mod_is(m, ".wrap")) clamp = 0;
      else return unsupported(P, optok);
    }
    int ty = one_type(P, optok, &oi);
    if (!ty) return -1;
    if (!dir || clamp < 0 || tsize_of(ty) != 4) return unsupported(P, optok);
    if (need_ops(P, optok, nops, 4)) return -1;
    I->op = SG_OP_SHF;
    I->type = SG_T_B32;
    I->mod = (uint8_t)dir;
    I->mod2 = (uint8_t)clamp;
    I->d[0] = dst_index(P, &ops[0]);
    for (int k = 0; k < 3; k++) I->s[k] = src_index(P, &ops[1 + k], SG_T_U32);
    return P->failed ? -1 : 0;
  }
  if (!strcmp(b, "lop3")) {
    int ty = one_type(P, optok, &oi);
    if (!ty) return -1;
    if (oi.nwords || tsize_of(ty) != 4) return unsupported(P, optok);
    if (need_ops(P, optok, nops, 5)) return -1;
    if (ops[4].kind != PO_IMM) { fail(P, CUDA_ERROR_INVALID_PTX, optok->line, "lop3: the lookup table must be an immediate"); return -1; }
    I->op = SG_OP_LOP3;
    I->type = SG_T_B32;
    I->mod = (uint8_t)ops[4].imm;
    I->d[0] = dst_index(P, &ops[0]);
    for (int k = 0; k < 3; k++) I->s[k] = src_index(P, &ops[1 + k], SG_T_B32);
    return P->failed ? -1 : 0;
  }
  if (!strcmp(b, "mov")) {
    int ty = one_type(P, optok, &oi);
    if (!ty || oi.nwords) return ty ? unsupported(P, optok) : -1;
    if (need_ops(P, optok, nops, 2)) return -1;
    I->type = (uint8_t)ty;
    if (ty == SG_T_PRED) {
      I->op = SG_OP_PMOV;
      I->d[0] = pred_index(P, &ops[0]);
      I->s[0] = pred_index(P, &ops[1]);
      return P->failed ? -1 : 0;
    }
    if ((ops[0].kind == PO_VEC && ops[0].nvec > 4) || (ops[1].kind == PO_VEC && ops[1].nvec > 4)) {
      fail(P, CUDA_ERROR_NOT_SUPPORTED, optok->line, "mov with a vector of more than 4 elements is not supported");
      return -1;
    }
    if (ops[0].kind == PO_VEC) { /* mov.b32 {a,b}, r: unpack */
      I->op = SG_OP_UNPACK;
      I->vec = (uint8_t)ops[0].nvec;
      for (int k = 0; k < ops[0].nvec; k++) I->d[k] = ops[0].vec[k];
      I->s[0] = src_index(P, &ops[1], ty);
      return P->failed ? -1 : 0;
    }
    if (ops[1].kind == PO_VEC) {
      I->op = SG_OP_PACK;
      I->vec = (uint8_t)ops[1].nvec;
      I->d[0] = dst_index(P, &ops[0]);
      for (int k = 0; k < ops[1].nvec; k++) {
        if (ops[1].vec[k] == SG_NOREG) { fail(P, CUDA_ERROR_INVALID_PTX, optok->line, "'_' in a source vector"); return -1; }
        I->s[k] = ops[1].vec[k];
      }
      return P->failed ? -1 : 0;
    }
    if (ops[1].kind == PO_TIMER) {
      I->op = SG_OP_MOV_TIMER;
      I->mod = (uint8_t)ops[1].sub;
      I->d[0] = dst_index(P, &ops[0]);
      return P->failed ? -1 : 0;
    }
    I->op = SG_OP_MOV;
    I->d[0] = dst_index(P, &ops[0]);
    I->s[0] = src_index(P, &ops[1], ty);
    return P->failed ? -1 : 0;
  }

  if (!strcmp(b, "cvt")) {
    if (oi.ntypes != 2 || oi.nwords) return unsupported(P, optok);
    if ((oi.types[0] == SG_T_F16X2 || oi.types[0] == SG_T_BF16X2) && oi.types[1] == SG_T_F32 && nops == 3) {
      /* cvt.rn.f16x2.f32 d, hi, lo */
      I->op = SG_OP_CVT_PACK;
      I->type = (uint8_t)oi.types[0];
      I->type2 = SG_T_F32;
      I->mod = (uint8_t)oi.rnd;
      if (oi.rnd != SG_RND_RN && oi.rnd != SG_RND_NONE) return unsupported(P, optok);
      I->d[0] = dst_index(P, &ops[0]);
      I->s[0] = src_index(P, &ops[1], SG_T_F32);
      I->s[1] = src_index(P, &ops[2], SG_T_F32);
      return P->failed ? -1 : 0;
    }
    if (need_ops(P, optok, nops, 2)) return -1;
    I->op = SG_OP_CVT;
    I->type = (uint8_t)oi.types[0];
    I->type2 = (uint8_t)oi.types[1];
    if (I->type == SG_T_PRED || I->type2 == SG_T_PRED || I->type == SG_T_F16X2 || I->type == SG_T_BF16X2 ||
        I->type2 == SG_T_F16X2 || I->type2 == SG_T_BF16X2 || I->type >= SG_T_U16X2 || I->type2 >= SG_T_U16X2)
      return unsupported(P, optok);
    I->mod = (uint8_t)oi.rnd;
    I->d[0] = dst_index(P, &ops[0]);
    I->s[0] = src_index(P, &ops[1], I->type2);
    return P->failed ? -1 : 0;
  }

  if (!strcmp(b, "cvta")) {
    int ty = one_type(P, optok, &oi);
    if (!ty) return -1;
    if (oi.nwords || !oi.has_space || oi.space == SG_SP_PARAM) return unsupported(P, optok);
    if (need_ops(P, optok, nops, 2)) return -1;
    int to = 0;
    for (int k = 0; k < oi.nmods; k++) if (mod_is(&oi.mods[k], ".to")) to = 1;
    I->op = SG_OP_CVTA;
    I->type = (uint8_t)ty;
    I->space = (uint8_t)oi.space;
    I->mod = to ? SG_CVTA_FROM_GENERIC : SG_CVTA_TO_GENERIC;
    I->d[0] = dst_index(P, &ops[0]);
    I->s[0] = src_index(P, &ops[1], ty);
    return P->failed ? -1 : 0;
  }

  if (!strcmp(b, "selp")) {
    int ty = one_type(P, optok, &oi);
    if (!ty) return -1;
    if (oi.nwords) return unsupported(P, optok);
    if (need_ops(P, optok, nops, 4)) return -1;
    I->op = SG_OP_SELP;
    I->type = (uint8_t)ty;
    I->d[0] = dst_index(P, &ops[0]);
    I->s[0] = src_index(P, &ops[1], ty);
    I->s[1] = src_index(P, &ops[2], ty);
    I->s[2] = pred_index(P, &ops[3]);
    if (ops[3].neg) I->flags |= SG_F_CNEG;
    return P->failed ? -1 : 0;
  }

  if (is_setp) {
    int is_set = !strcmp(b, "set");
    if (oi.nwords || !oi.cmp) return unsupported(P, optok);
    int ty;
    if (is_set) {
      if (oi.ntypes != 2) return unsupported(P, optok);
      I->type2 = (uint8_t)oi.types[0]; /* destination type */
      ty = oi.types[1];
    } else {
      ty = one_type(P, optok, &oi);
      if (!ty) return -1;
    }
    if (ty == SG_T_F16X2 || ty == SG_T_BF16X2 || ty == SG_T_PRED || ty == SG_T_U16X2 || ty == SG_T_S16X2)
      return unsupported(P, optok);
    I->op = is_set ? SG_OP_SET : SG_OP_SETP;
    I->type = (uint8_t)ty;
    I->mod = (uint8_t)oi.cmp;
    I->mod2 = (uint8_t)oi.boolop;
    int k = 0;
    if (is_set) I->d[0] = dst_index(P, &ops[k++]);
    else {
      I->d[0] = ops[0].kind == PO_SINK ? SG_NOREG : pred_index(P, &ops[0]);
      k = 1;
      if (nops > 1 && ops[1].sub) { I->d[1] = ops[1].kind == PO_SINK ? SG_NOREG : pred_index(P, &ops[1]); k = 2; }
    }
    int want = k + 2 + (oi.boolop ? 1 : 0);
    if (need_ops(P, optok, nops, want)) return -1;
    I->s[0] = src_index(P, &ops[k], ty);
    I->s[1] = src_index(P, &ops[k + 1], ty);
    if (oi.boolop) {
      I->s[2] = pred_index(P, &ops[k + 2]);
      if (ops[k + 2].neg) I->flags |= SG_F_CNEG;
    }
    return P->failed ? -1 : 0;
  }

  if (!strcmp(b, "ld") || !strcmp(b, "ldu") || !strcmp(b, "st")) {
    int is_st = b[0] == 's';
    int ty = one_type(P, optok, &oi);
    if (!ty) return -1;
    if (oi.nwords || ty == SG_T_PRED) return unsupported(P, optok);
    if (need_ops(P, optok, nops, 2)) return -1;
    I->type = (uint8_t)ty;
    I->space = (uint8_t)oi.space;
    const opnd *val = is_st ? &ops[1] : &ops[0];
    const opnd *addr = is_st ? &ops[0] : &ops[1];
    int kparam;
    if (set_address(P, I, addr, &kparam)) return -1;
    if (oi.space == SG_SP_PARAM && kparam) {
      if (is_st) { fail(P, CUDA_ERROR_INVALID_PTX, optok->line, "st.param to a kernel parameter"); return -1; }
      I->op = SG_OP_LD_KPARAM;
    } else {
      I->op = is_st ? SG_OP_ST : SG_OP_LD;
      if (oi.space == SG_SP_PARAM && !(I->flags & SG_F_FPREL)) {
        fail(P, CUDA_ERROR_NOT_SUPPORTED, optok->line, "%.*s through a register address is not supported", (int)optok->len, optok->p);
        return -1;
      }
      if (oi.space != SG_SP_PARAM && (kparam || (I->flags & SG_F_FPREL))) {
        fail(P, CUDA_ERROR_INVALID_PTX, optok->line, "parameter used in a non-.param access");
        return -1;
      }
    }
    if (val->kind == PO_VEC) {
      if (val->nvec != oi.vec) { fail(P, CUDA_ERROR_INVALID_PTX, optok->line, "vector size mismatch"); return -1; }
      for (int k = 0; k < val->nvec; k++) {
        if (is_st) {
          if (val->vec[k] == SG_NOREG) { fail(P, CUDA_ERROR_INVALID_PTX, optok->line, "'_' in a stored vector"); return -1; }
          I->s[k] = val->vec[k];
        } else I->d[k] = val->vec[k];
      }
    } else {
      if (oi.vec != 1) { fail(P, CUDA_ERROR_INVALID_PTX, optok->line, "vector access needs a {..} operand"); return -1; }
      if (is_st) I->s[0] = src_index(P, val, ty);
      else I->d[0] = dst_index(P, val);
    }
    return P->failed ? -1 : 0;
  }

  if (!strcmp(b, "atom") || !strcmp(b, "red")) {
    int is_red = b[0] == 'r';
    int aop = 0;
    for (int w = 0; w < oi.nwords; w++) {
      const mtok *m = &oi.mods[oi.words[w]];
      int v = mod_is(m, ".add") ? SG_ATOM_ADD : mod_is(m, ".min") ? SG_ATOM_MIN : mod_is(m, ".max") ? SG_ATOM_MAX
            : mod_is(m, ".exch") ? SG_ATOM_EXCH : mod_is(m, ".cas") ? SG_ATOM_CAS : mod_is(m, ".and") ? SG_ATOM_AND
            : mod_is(m, ".or") ? SG_ATOM_OR : mod_is(m, ".xor") ? SG_ATOM_XOR : mod_is(m, ".inc") ? SG_ATOM_INC
            : mod_is(m, ".dec") ? SG_ATOM_DEC : mod_is(m, ".noftz") ? -1 : 0;
      if (v == -1) continue;
      if (!v || aop) return unsupported(P, optok);
      aop = v;
    }
    int ty = one_type(P, optok, &oi);
    if (!ty) return -1;
    if (!aop || oi.vec != 1 || (oi.space != SG_SP_GLOBAL && oi.space != SG_SP_SHARED && oi.space != SG_SP_GENERIC))
      return unsupported(P, optok);
    unsigned sz = type_size(ty);
    if (ty >= SG_T_U16X2) return unsupported(P, optok);
    int half = ty == SG_T_F16 || ty == SG_T_BF16 || ty == SG_T_F16X2 || ty == SG_T_BF16X2;
    if (half && aop != SG_ATOM_ADD) return unsupported(P, optok);
    if (sz != 4 && sz != 8 && !half) return unsupported(P, optok);
    if (type_is_float(ty) && aop != SG_ATOM_ADD && aop != SG_ATOM_EXCH && aop != SG_ATOM_MIN && aop != SG_ATOM_MAX)
      return unsupported(P, optok);
    int k = 0;
    I->op = SG_OP_ATOM;
    I->type = (uint8_t)ty;
    I->mod = (uint8_t)aop;
    I->space = (uint8_t)oi.space;
    int want = (is_red ? 2 : 3) + (aop == SG_ATOM_CAS ? 1 : 0);
    if (need_ops(P, optok, nops, want)) return -1;
    if (!is_red) I->d[0] = dst_index(P, &ops[k++]);
    int kparam;
    if (set_address(P, I, &ops[k++], &kparam)) return -1;
    if (kparam || (I->flags & SG_F_FPREL)) { fail(P, CUDA_ERROR_INVALID_PTX, optok->line, "atomic on a parameter"); return -1; }
    I->s[0] = src_index(P, &ops[k++], ty);
    if (aop == SG_ATOM_CAS) I->s[1] = src_index(P, &ops[k++], ty);
    return P->failed ? -1 : 0;
  }

  if (!strcmp(b, "bra")) {
    if (oi.nwords || oi.ntypes) return unsupported(P, optok);
    if (need_ops(P, optok, nops, 1)) return -1;
    if (ops[0].kind != PO_NAME) { fail(P, CUDA_ERROR_NOT_SUPPORTED, optok->line, "bra: target must be a label"); return -1; }
    I->op = SG_OP_BRA;
    GROW(P->fix, P->nfix, P->capfix);
    P->fix[P->nfix++] = (fixup){ops[0].tok->p, ops[0].tok->len, P->m->ncode - 1, optok->line};
    return 0;
  }
  if (!strcmp(b, "ret") || !strcmp(b, "exit")) {
    if (oi.nwords || nops) return unsupported(P, optok);
    I->op = b[0] == 'r' ? SG_OP_RET : SG_OP_EXIT;
    return 0;
  }
  if (!strcmp(b, "trap")) { I->op = SG_OP_TRAP; return 0; }
  if (!strcmp(b, "bar") || !strcmp(b, "barrier")) {
    int warp = 0, red = 0;
    for (int w = 0; w < oi.nwords; w++) {
      const mtok *m = &oi.mods[oi.words[w]];
      if (mod_is(m, ".warp")) warp = 1;
      else if (mod_is(m, ".arrive")) return unsupported(P, optok);
      else if (mod_is(m, ".red")) red = 1;
      else if (red && (mod_is(m, ".popc") || mod_is(m, ".and") || mod_is(m, ".or"))) {
        I->mod = mod_is(m, ".popc") ? 1 : mod_is(m, ".and") ? 2 : 3;
      } else return unsupported(P, optok);
    }
    if (warp) {
      /* bar.warp.sync membermask: the lanes of the mask converge here */
      if (red || nops != 1) return unsupported(P, optok);
      I->op = SG_OP_WARPSYNC;
      I->s[0] = src_index(P, &ops[0], SG_T_B32);
      return P->failed ? -1 : 0;
    }
    if (red) {
      /* bar.red.popc.u32 d, a, {b,} p */
      if (!I->mod || nops < 3) return unsupported(P, optok);
      I->op = SG_OP_BAR_RED;
      I->type = oi.ntypes ? (uint8_t)oi.types[0] : SG_T_PRED;
      if (I->type == SG_T_PRED) I->d[0] = pred_index(P, &ops[0]);
      else I->d[0] = dst_index(P, &ops[0]);
      I->s[0] = pred_index(P, &ops[nops - 1]);
      if (ops[nops - 1].neg) I->flags |= SG_F_CNEG;
      return P->failed ? -1 : 0;
    }
    if (nops > 2) return unsupported(P, optok);
    if (nops == 2) {
      fail(P, CUDA_ERROR_NOT_SUPPORTED, optok->line, "bar.sync with a thread count is not supported");
      return -1;
    }
    I->op = SG_OP_BAR;
    return 0;
  }
  if (!strcmp(b, "nanosleep")) {
    /* The duration is only a hint (the ISA allows any delay up to 2x, or
     * none): the warp yields to its block's other warps instead, which is
     * what a spin-wait with nanosleep is waiting for. */
    I->op = SG_OP_NANOSLEEP;
    return 0;
  }
  if (!strcmp(b, "membar") || !strcmp(b, "fence") || !strcmp(b, "prefetch") || !strcmp(b, "prefetchu") ||
      !strcmp(b, "pmevent")) {
    I->op = SG_OP_NOP;
    return 0;
  }
  if (!strcmp(b, "shfl")) {
    int mode = 0;
    for (int w = 0; w < oi.nwords; w++) {
      const mtok *m = &oi.mods[oi.words[w]];
      if (mod_is(m, ".up")) mode = SG_SHFL_UP;
      else if (mod_is(m, ".down")) mode = SG_SHFL_DOWN;
      else if (mod_is(m, ".bfly")) mode = SG_SHFL_BFLY;
      else if (mod_is(m, ".idx")) mode = SG_SHFL_IDX;
      else return unsupported(P, optok);
    }
    int ty = one_type(P, optok, &oi);
    if (!ty) return -1;
    if (!mode || type_size(ty) != 4) return unsupported(P, optok);
    int k = 0;
    I->op = SG_OP_SHFL;
    I->mod = (uint8_t)mode;
    I->type = SG_T_B32;
    I->d[0] = dst_index(P, &ops[k++]);
    if (nops > 1 && ops[1].sub) { I->d[1] = ops[1].kind == PO_SINK ? SG_NOREG : pred_index(P, &ops[1]); k++; }
    if (need_ops(P, optok, nops - k, 4)) return -1;
    for (int s = 0; s < 4; s++) I->s[s] = src_index(P, &ops[k + s], SG_T_B32);
    return P->failed ? -1 : 0;
  }
  if (!strcmp(b, "vote")) {
    int mode = 0;
    for (int w = 0; w < oi.nwords; w++) {
      const mtok *m = &oi.mods[oi.words[w]];
      if (mod_is(m, ".all")) mode = SG_VOTE_ALL;
      else if (mod_is(m, ".any")) mode = SG_VOTE_ANY;
      else if (mod_is(m, ".ballot")) mode = SG_VOTE_BALLOT;
      else return unsupported(P, optok);
    }
    if (oi.uni && !mode) mode = SG_VOTE_UNI;
    if (!mode) return unsupported(P, optok);
    if (nops != 3 && nops != 2) return need_ops(P, optok, nops, 3);
    I->op = SG_OP_VOTE;
    I->mod = (uint8_t)mode;
    if (mode == SG_VOTE_BALLOT) { I->type = SG_T_B32; I->d[0] = dst_index(P, &ops[0]); }
    else { I->type = SG_T_PRED; I->d[0] = pred_index(P, &ops[0]); }
    I->s[0] = pred_index(P, &ops[1]);
    if (ops[1].neg) I->flags |= SG_F_CNEG;
    I->s[1] = nops == 3 ? src_index(P, &ops[2], SG_T_B32) : kconst(P, 0xffffffffu);
    return P->failed ? -1 : 0;
  }
  if (!strcmp(b, "match")) {
    int mode = 0;
    for (int w = 0; w < oi.nwords; w++) {
      const mtok *m = &oi.mods[oi.words[w]];
      if (mod_is(m, ".any")) mode = SG_MATCH_ANY;
      else if (mod_is(m, ".all")) mode = SG_MATCH_ALL;
      else return unsupported(P, optok);
    }
    int ty = one_type(P, optok, &oi);
    if (!ty) return -1;
    if (!mode || (type_size(ty) != 4 && type_size(ty) != 8)) return unsupported(P, optok);
    int k = 0;
    I->op = SG_OP_MATCH;
    I->mod = (uint8_t)mode;
    I->type = (uint8_t)ty;
    I->d[0] = dst_index(P, &ops[k++]);
    if (nops > 1 && ops[1].sub) { I->d[1] = ops[1].kind == PO_SINK ? SG_NOREG : pred_index(P, &ops[1]); k++; }
    if (need_ops(P, optok, nops - k, 2)) return -1;
    I->s[0] = src_index(P, &ops[k], ty);
    I->s[1] = src_index(P, &ops[k + 1], SG_T_B32);
    return P->failed ? -1 : 0;
  }
  if (!strcmp(b, "redux")) {
    int rop = 0;
    for (int w = 0; w < oi.nwords; w++) {
      const mtok *m = &oi.mods[oi.words[w]];
      int v = mod_is(m, ".add") ? SG_ATOM_ADD : mod_is(m, ".min") ? SG_ATOM_MIN : mod_is(m, ".max") ? SG_ATOM_MAX
            : mod_is(m, ".and") ? SG_ATOM_AND : mod_is(m, ".or") ? SG_ATOM_OR : mod_is(m, ".xor") ? SG_ATOM_XOR : 0;
      if (!v || rop) return unsupported(P, optok);
      rop = v;
    }
    int ty = one_type(P, optok, &oi);
    if (!ty) return -1;
    if (!rop || tsize_of(ty) != 4 || type_is_float(ty)) return unsupported(P, optok);
    if (need_ops(P, optok, nops, 3)) return -1;
    I->op = SG_OP_REDUX;
    I->mod = (uint8_t)rop;
    I->type = (uint8_t)ty;
    I->d[0] = dst_index(P, &ops[0]);
    I->s[0] = src_index(P, &ops[1], ty);
    I->s[1] = src_index(P, &ops[2], SG_T_B32);
    return P->failed ? -1 : 0;
  }
  if (!strcmp(b, "activemask")) {
    if (need_ops(P, optok, nops, 1)) return -1;
    I->op = SG_OP_ACTIVEMASK;
    I->type = SG_T_B32;
    I->d[0] = dst_index(P, &ops[0]);
    return P->failed ? -1 : 0;
  }
  if (!strcmp(b, "prmt")) {
    int ty = one_type(P, optok, &oi);
    if (!ty) return -1;
    int mode = 0;
    static const char *pm[] = {".f4e", ".b4e", ".rc8", ".ecl", ".ecr", ".rc16"};
    for (int w = 0; w < oi.nwords; w++) {
      int found = 0;
      for (int q = 0; q < 6; q++) if (mod_is(&oi.mods[oi.words[w]], pm[q])) { mode = q + 1; found = 1; }
      if (!found) return unsupported(P, optok);
    }
    if (need_ops(P, optok, nops, 4)) return -1;
    I->op = SG_OP_PRMT;
    I->type = SG_T_B32;
    I->mod = (uint8_t)mode;
    I->d[0] = dst_index(P, &ops[0]);
    for (int s = 0; s < 3; s++) I->s[s] = src_index(P, &ops[1 + s], SG_T_B32);
    return P->failed ? -1 : 0;
  }
  if (!strcmp(b, "testp")) {
    int kind = 0;
    static const char *tn[] = {".finite", ".infinite", ".number", ".notanumber", ".normal", ".subnormal"};
    for (int w = 0; w < oi.nwords; w++) {
      int found = 0;
      for (int q = 0; q < 6; q++) if (mod_is(&oi.mods[oi.words[w]], tn[q])) { kind = q + 1; found = 1; }
      if (!found) return unsupported(P, optok);
    }
    int ty = one_type(P, optok, &oi);
    if (!ty) return -1;
    if (!kind || (ty != SG_T_F32 && ty != SG_T_F64)) return unsupported(P, optok);
    if (need_ops(P, optok, nops, 2)) return -1;
    I->op = SG_OP_TESTP;
    I->type = (uint8_t)ty;
    I->mod = (uint8_t)kind;
    I->d[0] = pred_index(P, &ops[0]);
    I->s[0] = src_index(P, &ops[1], ty);
    return P->failed ? -1 : 0;
  }
  return unsupported(P, optok);
}

/* ---------------------------------------------------------------- functions */

static void pop_scope(parser *P) {
  while (P->nsyms > 0 && P->syms[P->nsyms - 1].scope >= P->scope) P->nsyms--;
  P->scope--;
}

/* .reg .type names;  (names: %r<10>, a, b) */
static void parse_reg_decl(parser *P) {
  int type = SG_T_NONE;
  for (;;) {
    token *t = peek(P);
    if (t->kind != TK_ID || t->p[0] != '.') break;
    if (tok_is(t, ".v2") || tok_is(t, ".v4")) {
      fail(P, CUDA_ERROR_NOT_SUPPORTED, t->line, "vector registers are not supported");
      return;
    }
    int ty = type_from(t->p, t->len);
    if (!ty) { fail(P, CUDA_ERROR_INVALID_PTX, t->line, "unknown register type '%.*s'", (int)t->len, t->p); return; }
    type = ty;
    next(P);
  }
  if (!type) { fail(P, CUDA_ERROR_INVALID_PTX, peek(P)->line, ".reg without a type"); return; }
  struct sg_ptx_kernel *f = P->fn;
  for (;;) {
    token *n = next(P);
    if (n->kind != TK_ID) { fail(P, CUDA_ERROR_INVALID_PTX, n->line, "expected a register name"); return; }
    uint32_t count = 1;
    int range = 0;
    if (accept(P, '<')) {
      token *c = next(P);
      int64_t v; int fl;
      if (c->kind != TK_NUM || parse_number_tok(c, &v, &fl) || fl || v < 0 || v > 1000000) {
        fail(P, CUDA_ERROR_INVALID_PTX, c->line, "bad register count");
        return;
      }
      if (!expect(P, '>')) return;
      count = (uint32_t)v;
      range = 1;
    }
    sym *s = add_local(P, n->p, n->len);
    s->kind = SYM_REG;
    s->type = type;
    s->is_pred = type == SG_T_PRED;
    s->is_range = range;
    s->b = count;
    if (s->is_pred) { s->a = P->cur_preds; P->cur_preds += count; if (P->cur_preds > f->npreds) f->npreds = P->cur_preds; }
    else { s->a = P->cur_regs; P->cur_regs += count; if (P->cur_regs > f->nregs) f->nregs = P->cur_regs; }
    if (f->nregs > 65536 || f->npreds > 65536) { fail(P, CUDA_ERROR_INVALID_PTX, n->line, "too many registers"); return; }
    if (accept(P, ',')) continue;
    break;
  }
  expect(P, ';');
}

/* .param declaration inside a body (call-site argument/return). */
static void parse_body_param(parser *P) {
  size_t align;
  int type;
  if (parse_align_and_type(P, &align, &type)) return;
  token *name;
  uint64_t count;
  int unsized;
  if (parse_decl_name(P, &name, &count, &unsized)) return;
  uint64_t size = count * type_size(type);
  if (size > 65536) { fail(P, CUDA_ERROR_INVALID_PTX, name->line, "param too large"); return; }
  uint32_t off = (P->cur_fp + (uint32_t)align - 1) & ~((uint32_t)align - 1);
  sym *s = add_local(P, name->p, name->len);
  s->kind = SYM_FPARAM;
  s->a = off;
  s->b = (uint32_t)size;
  P->cur_fp = off + (uint32_t)size;
  if (P->cur_fp > P->fn->fpsize) P->fn->fpsize = P->cur_fp;
  expect(P, ';');
}

static int parse_body(parser *P) {
  struct sg_ptx_kernel *f = P->fn;
  f->entry_pc = P->m->ncode;
  P->nlabels = 0;
  P->nfix = 0;
  P->scope = 1;
  int depth = 1;
  uint32_t saved_regs[64], saved_preds[64], saved_fp[64];
  while (!P->failed) {
    token *t = peek(P);
    if (t->kind == TK_EOF) { fail(P, CUDA_ERROR_INVALID_PTX, t->line, "unexpected end of file in function body"); return -1; }
    if (is_punct(t, '{')) {
      next(P);
      if (depth >= 64) { fail(P, CUDA_ERROR_INVALID_PTX, t->line, "blocks nested too deeply"); return -1; }
      saved_regs[depth] = P->cur_regs;
      saved_preds[depth] = P->cur_preds;
      saved_fp[depth] = P->cur_fp;
      depth++;
      P->scope++;
      continue;
    }
    if (is_punct(t, '}')) {
      next(P);
      depth--;
      if (depth == 0) break;
      pop_scope(P);
      /* Registers and .param variables of a closed block are dead: reuse
       * their slots so that many call sites do not grow the frame. */
      P->cur_regs = saved_regs[depth];
      P->cur_preds = saved_preds[depth];
      P->cur_fp = saved_fp[depth];
      continue;
    }
    if (is_punct(t, ';')) { next(P); continue; }
    if (t->kind == TK_ID && t->p[0] == '.') {
      next(P);
      if (tok_is(t, ".reg")) { parse_reg_decl(P); continue; }
      if (tok_is(t, ".param")) { parse_body_param(P); continue; }
      if (tok_is(t, ".local")) { parse_var(P, ".local", 0, 1); continue; }
      if (tok_is(t, ".shared")) { parse_var(P, ".shared", 0, 1); continue; }
      if (tok_is(t, ".pragma")) { skip_statement(P); continue; }
      if (tok_is(t, ".loc") || tok_is(t, ".file") || tok_is(t, ".section")) { skip_line(P, t->line); continue; }
      fail(P, CUDA_ERROR_NOT_SUPPORTED, t->line, "unsupported directive '%.*s' in function body", (int)t->len, t->p);
      return -1;
    }
    if (t->kind == TK_ID && is_punct(&P->t[P->i + 1], ':')) {
      next(P);
      next(P);
      GROW(P->labels, P->nlabels, P->caplabels);
      sym *l = &P->labels[P->nlabels++];
      memset(l, 0, sizeof *l);
      l->name = t->p;
      l->len = t->len;
      l->a = P->m->ncode;
      continue;
    }
    uint32_t guard = SG_NOREG;
    int gneg = 0;
    if (is_punct(t, '@')) {
      next(P);
      if (accept(P, '!')) gneg = 1;
      token *g = next(P);
      opnd go;
      if (g->kind != TK_ID || resolve_name(P, g, &go) || go.kind != PO_REG || !(go.reg & SG_PBIT)) {
        if (!P->failed) fail(P, CUDA_ERROR_INVALID_PTX, g->line, "guard must be a predicate register");
        return -1;
      }
      guard = go.reg;
      t = peek(P);
    }
    if (t->kind != TK_ID) { fail(P, CUDA_ERROR_INVALID_PTX, t->line, "unexpected '%.*s'", (int)t->len, t->p); return -1; }
    if (decode_insn(P, guard, gneg)) return -1;
  }
  if (P->failed) return -1;
  /* A body that falls off its end returns. */
  sg_insn *I = emit(P, P->t[P->i ? P->i - 1 : 0].line);
  I->op = SG_OP_RET;
  f->end_pc = P->m->ncode;
  for (int k = 0; k < P->nfix; k++) {
    fixup *x = &P->fix[k];
    sym *l = find_sym_in(P->labels, P->nlabels, x->name, x->len);
    if (!l) { fail(P, CUDA_ERROR_INVALID_PTX, x->line, "unknown label '%.*s'", (int)x->len, x->name); return -1; }
    P->m->code[x->insn].aux = l->a;
  }
  return 0;
}

static int func_index(parser *P, const char *p, uint32_t len) {
  sym *s = find_msym(P, p, len);
  return s && s->kind == SYM_FUNC ? (int)s->a : -1;
}

/* .entry / .func header and body.  Linkage tokens already consumed. */
static void parse_function(parser *P, int is_entry, int is_extern) {
  struct sg_ptx_module *m = P->m;
  sg_span ret = {0, 0};
  int has_ret = 0;
  P->nsyms = 0;
  P->scope = 1;
  P->cur_regs = P->cur_preds = P->cur_fp = 0;
  /* temporary function record; merged with an earlier prototype below */
  struct sg_ptx_kernel tmp;
  memset(&tmp, 0, sizeof tmp);
  P->fn = &tmp;
  token *ret_name = NULL;
  if (!is_entry && accept(P, '(')) {
    if (!tok_is(peek(P), ".param")) { fail(P, CUDA_ERROR_NOT_SUPPORTED, peek(P)->line, "function return values must be .param"); return; }
    next(P);
    size_t align; int type; token *nm; uint64_t count; int unsized;
    if (parse_align_and_type(P, &align, &type) || parse_decl_name(P, &nm, &count, &unsized)) return;
    ret.off = 0;
    ret.size = (uint32_t)(count * type_size(type));
    P->cur_fp = ret.size;
    has_ret = 1;
    ret_name = nm;
    if (!expect(P, ')')) return;
  }
  token *name = next(P);
  if (name->kind != TK_ID) { fail(P, CUDA_ERROR_INVALID_PTX, name->line, "expected a function name"); return; }
  sg_span params[256];
  token *pnames[256];
  int np = 0;
  size_t kp_off = 0;
  if (accept(P, '(')) {
    while (!accept(P, ')')) {
      if (P->failed) return;
      if (!tok_is(peek(P), ".param") && !tok_is(peek(P), ".reg")) {
        fail(P, CUDA_ERROR_INVALID_PTX, peek(P)->line, "expected a .param parameter");
        return;
      }
      if (tok_is(peek(P), ".reg")) { fail(P, CUDA_ERROR_NOT_SUPPORTED, peek(P)->line, ".reg parameters are not supported"); return; }
      next(P);
      size_t align; int type; token *nm; uint64_t count; int unsized;
      if (parse_align_and_type(P, &align, &type) || parse_decl_name(P, &nm, &count, &unsized)) return;
      if (np >= 256) { fail(P, CUDA_ERROR_NOT_SUPPORTED, nm->line, "more than 256 parameters"); return; }
      uint64_t size = count * type_size(type);
      if (size > 32768) { fail(P, CUDA_ERROR_INVALID_PTX, nm->line, "parameter too large"); return; }
      if (is_entry) {
        kp_off = (kp_off + align - 1) & ~(align - 1);
        params[np] = (sg_span){(uint32_t)kp_off, (uint32_t)size};
        kp_off += size;
      } else {
        uint32_t off = (P->cur_fp + (uint32_t)align - 1) & ~((uint32_t)align - 1);
        params[np] = (sg_span){off, (uint32_t)size};
        P->cur_fp = off + (uint32_t)size;
      }
      pnames[np++] = nm;
      accept(P, ',');
    }
  }
  tmp.fpsize = P->cur_fp;
  int maxnt = 0;
  /* performance directives */
  for (;;) {
    token *t = peek(P);
    if (t->kind != TK_ID || t->p[0] != '.') break;
    if (tok_is(t, ".maxntid") || tok_is(t, ".reqntid")) {
      next(P);
      int64_t prod = 1;
      for (;;) {
        token *n = next(P);
        int64_t v; int fl;
        if (n->kind != TK_NUM || parse_number_tok(n, &v, &fl) || fl || v <= 0 || v > 1024) {
          fail(P, CUDA_ERROR_INVALID_PTX, n->line, "bad %.*s value", (int)t->len, t->p);
          return;
        }
        prod *= v;
        if (!accept(P, ',')) break;
      }
      if (prod > 1024) prod = 1024;
      maxnt = (int)prod;
      continue;
    }
    if (tok_is(t, ".minnctapersm") || tok_is(t, ".maxnreg") || tok_is(t, ".maxnctapersm") ||
        tok_is(t, ".pragma") || tok_is(t, ".noreturn") || tok_is(t, ".maxclusterrank") ||
        tok_is(t, ".reqnctapercluster") || tok_is(t, ".explicitcluster")) {
      next(P);
      if (tok_is(t, ".pragma")) { skip_statement(P); continue; }
      while (peek(P)->kind == TK_NUM || is_punct(peek(P), ',')) next(P);
      continue;
    }
    break;
  }
  int idx = func_index(P, name->p, name->len);
  struct sg_ptx_kernel *f;
  if (idx >= 0) {
    f = m->funcs[idx];
    if (f->is_entry != is_entry) { fail(P, CUDA_ERROR_INVALID_PTX, name->line, "'%s' declared as both .entry and .func", f->name); return; }
  } else {
    f = calloc(1, sizeof *f);
    if (!f) abort_oom();
    f->mod = m;
    f->name = dupn(name->p, name->len);
    f->is_entry = is_entry;
    GROW(m->funcs, m->nfuncs, m->capfuncs);
    idx = m->nfuncs;
    m->funcs[m->nfuncs++] = f;
    sym *s = add_msym(P, name->p, name->len);
    s->kind = SYM_FUNC;
    s->a = (uint32_t)idx;
  }
  if (!f->params || !f->defined) {
    free(f->params);
    f->nparams = np;
    f->params = calloc(np ? np : 1, sizeof *f->params);
    if (!f->params) abort_oom();
    memcpy(f->params, params, np * sizeof *params);
    f->has_ret = has_ret;
    f->ret = ret;
    f->param_bytes = is_entry ? kp_off : 0;
    f->max_threads = maxnt ? maxnt : 1024;
  }
  if (is_punct(peek(P), ';')) { next(P); if (is_extern) f->is_extern = 1; return; }
  if (f->defined) { fail(P, CUDA_ERROR_INVALID_PTX, name->line, "function '%s' defined twice", f->name); return; }
  if (!expect(P, '{')) return;
  f->defined = 1;
  f->fpsize = tmp.fpsize;
  P->fn = f;
  /* parameters become scoped symbols */
  for (int k = 0; k < np; k++) {
    sym *s = add_local(P, pnames[k]->p, pnames[k]->len);
    s->kind = is_entry ? SYM_KPARAM : SYM_FPARAM;
    s->a = params[k].off;
    s->b = params[k].size;
  }
  if (ret_name) {
    sym *s = add_local(P, ret_name->p, ret_name->len);
    s->kind = SYM_FPARAM;
    s->a = 0;
    s->b = ret.size;
  }
  int kp_before = m->nkpatches;
  if (parse_body(P)) return;
  for (int k = kp_before; k < m->nkpatches; k++)
    if (m->kpatches[k].kind == SG_KP_LOCAL) m->kpatches[k].ref = idx;
}

/* ---------------------------------------------------------------- layout */

static int check_recursion(parser *P, int fi, int depth, unsigned char *state) {
  struct sg_ptx_module *m = P->m;
  if (state[fi] == 1) return -1;
  if (state[fi] == 2) return 0;
  if (depth > 64) return -1;
  state[fi] = 1;
  struct sg_ptx_kernel *f = m->funcs[fi];
  for (uint32_t pc = f->entry_pc; pc < f->end_pc; pc++) {
    if (m->code[pc].op != SG_OP_CALL) continue;
    int callee = m->calls[m->code[pc].aux].func;
    if (callee >= 0 && check_recursion(P, callee, depth + 1, state)) return -1;
  }
  state[fi] = 2;
  return 0;
}

/* Depth-first postorder of the (acyclic) call graph. */
static void postorder(struct sg_ptx_module *m, int fi, unsigned char *mark, int *order, int *n) {
  if (mark[fi]) return;
  mark[fi] = 1;
  struct sg_ptx_kernel *f = m->funcs[fi];
  if (f->defined)
    for (uint32_t pc = f->entry_pc; pc < f->end_pc; pc++)
      if (m->code[pc].op == SG_OP_CALL) postorder(m, m->calls[m->code[pc].aux].func, mark, order, n);
  order[(*n)++] = fi;
}

static uint32_t reloc_reg(const struct sg_ptx_kernel *f, uint32_t r) {
  if (r == SG_NOREG) return r;
  if (r & SG_KBIT) return r & ~SG_PBIT;
  if (r & SG_PBIT) return (r & ~SG_PBIT) + f->pbase;
  if (r & SG_SBIT) return r & ~SG_SBIT;
  return r + f->rbase;
}

static int finish(parser *P) {
  struct sg_ptx_module *m = P->m;
  /* resolve calls */
  for (int k = 0; k < P->ncallfix; k++) {
    fixup *x = &P->callfix[k];
    sg_insn *I = &m->code[x->insn];
    sg_call_info *ci = &m->calls[I->aux];
    if (x->len == 7 && !memcmp(x->name, "vprintf", 7)) {
      if (ci->nargs != 2 || ci->args[0].size != 8 || ci->args[1].size != 8 || (ci->has_ret && ci->ret.size != 4)) {
        fail(P, CUDA_ERROR_INVALID_PTX, x->line, "vprintf takes two 64-bit arguments and returns a 32-bit value");
        return -1;
      }
      I->op = SG_OP_VPRINTF;
      continue;
    }
    if (x->len == 6 && !memcmp(x->name, "malloc", 6)) {
      if (ci->nargs != 1 || ci->args[0].size != 8 || !ci->has_ret || ci->ret.size != 8) {
        fail(P, CUDA_ERROR_INVALID_PTX, x->line, "malloc takes a 64-bit size and returns a 64-bit address");
        return -1;
      }
      I->op = SG_OP_MALLOC;
      continue;
    }
    if (x->len == 4 && !memcmp(x->name, "free", 4)) {
      if (ci->nargs != 1 || ci->args[0].size != 8 || ci->has_ret) {
        fail(P, CUDA_ERROR_INVALID_PTX, x->line, "free takes one 64-bit address");
        return -1;
      }
      I->op = SG_OP_FREE;
      continue;
    }
    if (x->len == 23 && !memcmp(x->name, "cudaGraphSetConditional", 23)) {
      /* The device runtime's builtin that sets a conditional graph node's
       * value (CUDA 12.3+); the driver (env->set_conditional) owns the
       * handles. */
      if (ci->nargs != 2 || ci->args[0].size != 8 || ci->args[1].size != 4 || ci->has_ret) {
        fail(P, CUDA_ERROR_INVALID_PTX, x->line, "cudaGraphSetConditional takes a 64-bit handle and a 32-bit value");
        return -1;
      }
      I->op = SG_OP_SETCOND;
      continue;
    }
    if (x->len == 12 && !memcmp(x->name, "__assertfail", 12)) {
      if (ci->nargs < 4 || ci->args[0].size != 8 || ci->args[1].size != 8 || ci->args[2].size != 4 || ci->args[3].size != 8) {
        fail(P, CUDA_ERROR_INVALID_PTX, x->line, "__assertfail called with unexpected arguments");
        return -1;
      }
      I->op = SG_OP_TRAP;
      I->mod = 1;
      continue;
    }
    int fi = func_index(P, x->name, x->len);
    if (fi < 0) { fail(P, CUDA_ERROR_INVALID_PTX, x->line, "call to unknown function '%.*s'", (int)x->len, x->name); return -1; }
    struct sg_ptx_kernel *cf = m->funcs[fi];
    if (cf->is_entry) { fail(P, CUDA_ERROR_INVALID_PTX, x->line, "call to kernel '%s'", cf->name); return -1; }
    if (!cf->defined) {
      fail(P, CUDA_ERROR_NOT_SUPPORTED, x->line, "call to external function '%s', which softgpu does not provide", cf->name);
      return -1;
    }
    if (ci->nargs != cf->nparams || ci->has_ret != cf->has_ret) {
      fail(P, CUDA_ERROR_INVALID_PTX, x->line, "call to '%s' with the wrong number of arguments", cf->name);
      return -1;
    }
    for (int a = 0; a < ci->nargs; a++)
      if (ci->args[a].size != cf->params[a].size) { fail(P, CUDA_ERROR_INVALID_PTX, x->line, "argument %d of '%s' has the wrong size", a, cf->name); return -1; }
    if (ci->has_ret && ci->ret.size != cf->ret.size) { fail(P, CUDA_ERROR_INVALID_PTX, x->line, "return value of '%s' has the wrong size", cf->name); return -1; }
    ci->func = fi;
  }
  unsigned char *state = calloc(m->nfuncs ? m->nfuncs : 1, 1);
  if (!state) abort_oom();
  for (int i = 0; i < m->nfuncs; i++)
    if (m->funcs[i]->defined && check_recursion(P, i, 0, state)) {
      free(state);
      fail(P, CUDA_ERROR_NOT_SUPPORTED, m->code[m->funcs[i]->entry_pc].line,
           "recursive device function calls (through '%s') are not supported", m->funcs[i]->name);
      return -1;
    }
  free(state);
  /* Shared memory layout.  Each kernel's variables are those its body and
   * the functions it calls name; variables that no kernel uses together may
   * overlap, so every kernel allocates (and zeroes) only what it reaches. */
  {
    int nv = m->nshvars, nf = m->nfuncs ? m->nfuncs : 1;
    size_t words = ((size_t)nf + 63) / 64;
    uint64_t *kset = calloc((size_t)(nv ? nv : 1) * words, sizeof *kset); /* kernels using each variable */
    unsigned char *used = calloc(nv ? nv : 1, 1);
    int *stack = calloc(nf, sizeof *stack);
    unsigned char *seen = calloc(nf, 1);
    size_t *off = calloc(nv ? nv : 1, sizeof *off);
    if (!kset || !used || !stack || !seen || !off) { free(kset); free(used); free(stack); free(seen); free(off); abort_oom(); }
    for (int e = 0; e < m->nfuncs; e++) {
      struct sg_ptx_kernel *k = m->funcs[e];
      if (!k->is_entry || !k->defined) continue;
      memset(seen, 0, nf);
      int sp = 0;
      stack[sp++] = e;
      seen[e] = 1;
      while (sp) {
        struct sg_ptx_kernel *f = m->funcs[stack[--sp]];
        for (int i = 0; i < f->nshrefs; i++) kset[(size_t)f->shrefs[i] * words + e / 64] |= 1ull << (e % 64);
        for (uint32_t pc = f->entry_pc; pc < f->end_pc; pc++) {
          if (m->code[pc].op != SG_OP_CALL) continue;
          int c = m->calls[m->code[pc].aux].func;
          if (c >= 0 && !seen[c]) { seen[c] = 1; stack[sp++] = c; }
        }
      }
    }
    size_t extent = 0;
    for (int v = 0; v < nv; v++) {
      size_t a = m->shalign[v], sz = m->shvars[v].size, o = 0;
      for (int again = 1; again;) {
        again = 0;
        for (int u = 0; u < v; u++) {
          int share = 0;
          for (size_t w = 0; w < words && !share; w++) share = (kset[(size_t)u * words + w] & kset[(size_t)v * words + w]) != 0;
          if (!share) continue;
          size_t ue = off[u] + m->shvars[u].size;
          if (o < ue && off[u] < o + sz) { o = (ue + a - 1) & ~(a - 1); again = 1; }
        }
      }
      off[v] = o;
      if (o + sz > extent) extent = o + sz;
    }
    for (int e = 0; e < m->nfuncs; e++) {
      struct sg_ptx_kernel *k = m->funcs[e];
      if (!k->is_entry || !k->defined) continue;
      size_t end = 0;
      for (int v = 0; v < nv; v++)
        if ((kset[(size_t)v * words + e / 64] >> (e % 64)) & 1) {
          size_t ve = off[v] + m->shvars[v].size;
          if (ve > end) end = ve;
        }
      k->static_shared = end;
    }
    m->static_shared = extent;
    for (int i = 0; i < P->nshfix; i++) {
      sg_insn *I = &m->code[P->shfix[i].insn];
      I->off = (int64_t)((uint64_t)I->off + off[P->shfix[i].len]);
    }
    for (int i = 0; i < m->nkpatches; i++)
      if (m->kpatches[i].kind == SG_KP_SHARED) {
        m->kvals[m->kpatches[i].kidx] = (uint64_t)off[m->kpatches[i].ref] + (uint64_t)m->kpatches[i].off;
        m->kpatches[i].kind = SG_KP_NONE;
      }
    for (int v = 0; v < nv; v++) m->shvars[v].off = (uint32_t)off[v];
    free(kset); free(used); free(stack); free(seen); free(off);
  }
  /* Layout: static call-stack frames.  Every function's registers, .local
   * depot and .param frame start after the largest frame of any caller on
   * any call path, so a callee never overlaps a frame that can be live below
   * it, while functions at the same depth (and all kernels) share space.
   * Registers are per-lane columns, so lanes of one warp that sit in
   * different functions do not collide either.  Needs the call graph to be
   * acyclic, which check_recursion established. */
  int *order = calloc(m->nfuncs ? m->nfuncs : 1, sizeof *order);
  unsigned char *mark = calloc(m->nfuncs ? m->nfuncs : 1, 1);
  uint32_t *depth = calloc(m->nfuncs ? m->nfuncs : 1, sizeof *depth);
  if (!order || !mark || !depth) { free(order); free(mark); free(depth); abort_oom(); }
  int norder = 0;
  for (int i = 0; i < m->nfuncs; i++) postorder(m, i, mark, order, &norder);
  for (int i = 0; i < m->nfuncs; i++) {
    struct sg_ptx_kernel *f = m->funcs[i];
    f->rbase = SG_SR_COUNT;
    f->pbase = f->lbase = f->fpbase = 0;
  }
  uint64_t r = SG_SR_COUNT, p = 0, l = 0, fp = 0;
  uint32_t maxdepth = 0;
  for (int k = norder; k-- > 0;) { /* callers before callees */
    struct sg_ptx_kernel *f = m->funcs[order[k]];
    uint64_t re = (uint64_t)f->rbase + f->nregs, pe = (uint64_t)f->pbase + f->npreds;
    uint64_t le = (uint64_t)f->lbase + ((f->lsize + 15u) & ~15u), fe = (uint64_t)f->fpbase + ((f->fpsize + 15u) & ~15u);
    if (re > r) r = re;
    if (pe > p) p = pe;
    if (le > l) l = le;
    if (fe > fp) fp = fe;
    if (depth[order[k]] > maxdepth) maxdepth = depth[order[k]];
    if (re > (1u << 22) || pe > (1u << 20) || le > (1u << 26) || fe > (1u << 24)) break;
    for (uint32_t pc = f->entry_pc; pc < f->end_pc; pc++) {
      if (m->code[pc].op != SG_OP_CALL) continue;
      int c = m->calls[m->code[pc].aux].func;
      struct sg_ptx_kernel *cf = m->funcs[c];
      if (cf->rbase < re) cf->rbase = (uint32_t)re;
      if (cf->pbase < pe) cf->pbase = (uint32_t)pe;
      if (cf->lbase < le) cf->lbase = (uint32_t)le;
      if (cf->fpbase < fe) cf->fpbase = (uint32_t)fe;
      if (depth[c] < depth[order[k]] + 1) depth[c] = depth[order[k]] + 1;
    }
  }
  free(order);
  free(mark);
  free(depth);
  m->max_call_depth = maxdepth;
  /* what each kernel reports as its local memory: the end of the deepest
   * .local depot it can reach (frames are laid out above, so this is exact) */
  {
    int nf = m->nfuncs ? m->nfuncs : 1;
    int *stack = calloc(nf, sizeof *stack);
    unsigned char *seen = calloc(nf, 1);
    if (!stack || !seen) { free(stack); free(seen); abort_oom(); }
    for (int e = 0; e < m->nfuncs; e++) {
      struct sg_ptx_kernel *k = m->funcs[e];
      if (!k->is_entry || !k->defined) continue;
      memset(seen, 0, nf);
      int sp = 0;
      size_t end = 0;
      stack[sp++] = e;
      seen[e] = 1;
      while (sp) {
        struct sg_ptx_kernel *f = m->funcs[stack[--sp]];
        if (f->lsize && (size_t)f->lbase + f->lsize > end) end = (size_t)f->lbase + f->lsize;
        for (uint32_t pc = f->entry_pc; pc < f->end_pc; pc++) {
          if (m->code[pc].op != SG_OP_CALL) continue;
          int c = m->calls[m->code[pc].aux].func;
          if (c >= 0 && !seen[c]) { seen[c] = 1; stack[sp++] = c; }
        }
      }
      k->local_reach = end;
    }
    free(stack);
    free(seen);
  }
  if (r > (1u << 22) || p > (1u << 20) || l > (1u << 26) || fp > (1u << 24)) {
    fail(P, CUDA_ERROR_NOT_SUPPORTED, 0, "module needs too many registers or too much local memory");
    return -1;
  }
  m->nregs = (uint32_t)r;
  m->npreds = (uint32_t)p;
  m->local_bytes = (uint32_t)l;
  m->fparam_bytes = (uint32_t)fp;
  for (int i = 0; i < m->nfuncs; i++) {
    struct sg_ptx_kernel *f = m->funcs[i];
    if (!f->defined) continue;
    for (uint32_t pc = f->entry_pc; pc < f->end_pc; pc++) {
      sg_insn *I = &m->code[pc];
      for (int k = 0; k < 4; k++) { I->d[k] = reloc_reg(f, I->d[k]); I->s[k] = reloc_reg(f, I->s[k]); }
      I->base = reloc_reg(f, I->base);
      if (I->guard != SG_NOREG) I->guard = reloc_reg(f, I->guard);
      if (I->op == SG_OP_WMMA_LOAD || I->op == SG_OP_WMMA_MMA || I->op == SG_OP_WMMA_STORE || I->op == SG_OP_MMA)
        for (int k = 0; k < SG_WMMA_REGS; k++) m->wregs[I->aux + k] = reloc_reg(f, m->wregs[I->aux + k]);
      if (I->flags & SG_F_FPREL) I->off = (int64_t)((uint64_t)I->off + f->fpbase);
      if (I->op == SG_OP_CALL || I->op == SG_OP_VPRINTF || I->op == SG_OP_MALLOC ||
          I->op == SG_OP_FREE || I->op == SG_OP_SETCOND || (I->op == SG_OP_TRAP && I->aux != SG_NOREG)) {
        sg_call_info *ci = &m->calls[I->aux];
        for (int a = 0; a < ci->nargs; a++) ci->args[a].off += f->fpbase;
        if (ci->has_ret) ci->ret.off += f->fpbase;
      }
    }
  }
  {
    size_t a = m->dyn_shared_align < 16 ? 16 : m->dyn_shared_align;
    m->dyn_shared_base = (m->static_shared + a - 1) & ~(a - 1);
  }
  for (uint32_t k = 0; k < (uint32_t)m->nkpatches; k++) {
    sg_kpatch *kp = &m->kpatches[k];
    if (kp->kind == SG_KP_LOCAL) {
      struct sg_ptx_kernel *f = m->funcs[kp->ref];
      m->kvals[kp->kidx] = (uint64_t)f->lbase + (uint64_t)kp->off;
      kp->kind = SG_KP_NONE;
    } else if (kp->kind == SG_KP_DYNSHARED) {
      m->kvals[kp->kidx] = (uint64_t)m->dyn_shared_base + (uint64_t)kp->off;
      kp->kind = SG_KP_NONE;
    }
  }
  m->entries = calloc(m->nfuncs ? m->nfuncs : 1, sizeof *m->entries);
  if (!m->entries) abort_oom();
  for (int i = 0; i < m->nfuncs; i++)
    if (m->funcs[i]->is_entry && m->funcs[i]->defined) m->entries[m->nentries++] = i;
  m->kpool = malloc((size_t)(m->nk ? m->nk : 1) * 32 * sizeof(uint64_t));
  if (!m->kpool) abort_oom();
  for (uint32_t k = 0; k < m->nk; k++)
    for (int l = 0; l < 32; l++) m->kpool[(size_t)k * 32 + l] = m->kvals[k];
  return 0;
}

void sg_ptx_set_kconst(struct sg_ptx_module *m, uint32_t kidx, uint64_t v) {
  m->kvals[kidx] = v;
  for (int l = 0; l < 32; l++) m->kpool[(size_t)kidx * 32 + l] = v;
}

/* ---------------------------------------------------------------- module */

static void parse_module(parser *P) {
  while (!P->failed) {
    token *t = peek(P);
    if (t->kind == TK_EOF) break;
    if (is_punct(t, ';')) { next(P); continue; }
    if (t->kind != TK_ID) { fail(P, CUDA_ERROR_INVALID_PTX, t->line, "unexpected '%.*s' at module scope", (int)t->len, t->p); return; }
    next(P);
    if (tok_is(t, ".version") || tok_is(t, ".target") || tok_is(t, ".address_size") || tok_is(t, ".file") ||
        tok_is(t, ".loc") || tok_is(t, ".section")) {
      if (tok_is(t, ".address_size")) {
        token *n = peek(P);
        if (n->kind == TK_NUM && !tok_is(n, "64")) { fail(P, CUDA_ERROR_NOT_SUPPORTED, n->line, "only .address_size 64 is supported"); return; }
      }
      if (tok_is(t, ".section")) { /* debug sections: skip the braced block */
        while (peek(P)->kind != TK_EOF && !is_punct(peek(P), '{')) next(P);
        int d = 0;
        while (peek(P)->kind != TK_EOF) { token *x = next(P); if (is_punct(x, '{')) d++; else if (is_punct(x, '}') && --d == 0) break; }
        continue;
      }
      skip_line(P, t->line);
      continue;
    }
    if (tok_is(t, ".pragma")) { skip_statement(P); continue; }
    int is_extern = 0;
    while (tok_is(t, ".visible") || tok_is(t, ".extern") || tok_is(t, ".weak") || tok_is(t, ".common")) {
      if (tok_is(t, ".extern")) is_extern = 1;
      t = next(P);
    }
    if (tok_is(t, ".entry")) { parse_function(P, 1, is_extern); continue; }
    if (tok_is(t, ".func")) { parse_function(P, 0, is_extern); continue; }
    if (tok_is(t, ".global") || tok_is(t, ".const") || tok_is(t, ".shared")) {
      char sp[16];
      snprintf(sp, sizeof sp, "%.*s", (int)t->len, t->p);
      if (is_extern && strcmp(sp, ".shared")) {
        fail(P, CUDA_ERROR_NOT_SUPPORTED, t->line, "extern %s variables (defined in another module) are not supported", sp);
        return;
      }
      parse_var(P, sp, is_extern, 0);
      continue;
    }
    fail(P, CUDA_ERROR_NOT_SUPPORTED, t->line, "unsupported directive '%.*s'", (int)t->len, t->p);
    return;
  }
}

void sg_ptx_module_free(sg_ptx_module *m) {
  if (!m) return;
  for (int i = 0; i < m->nfuncs; i++) {
    free(m->funcs[i]->name);
    free(m->funcs[i]->params);
    free(m->funcs[i]->shrefs);
    free(m->funcs[i]);
  }
  for (int i = 0; i < m->nglobals; i++) { free(m->globals[i].name); free(m->globals[i].init); }
  free(m->funcs);
  free(m->entries);
  free(m->globals);
  free(m->wregs);
  free(m->code);
  free(m->kvals);
  free(m->kpool);
  free(m->kpatches);
  free(m->calls);
  free(m->shvars);
  free(m->shalign);
  free(m);
}

int sg_ptx_module_parse(const char *ptx, size_t len, sg_ptx_module **out, char *err, size_t errlen) {
  if (err && errlen) err[0] = 0;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  *out = NULL;
  if (!ptx) return CUDA_ERROR_INVALID_VALUE;
  parser P;
  memset(&P, 0, sizeof P);
  P.err = err;
  P.errlen = errlen;
  P.m = calloc(1, sizeof *P.m);
  if (!P.m) return CUDA_ERROR_OUT_OF_MEMORY;
  /* constant slot 0 is zero (the "no base register" address base), slots
   * 1.. follow; predicate constants use slots 0 and 1 read as masks */
  P.m->kvals = malloc(16 * sizeof(uint64_t));
  if (!P.m->kvals) { free(P.m); return CUDA_ERROR_OUT_OF_MEMORY; }
  P.m->capk = 16;
  P.m->kvals[0] = 0;
  P.m->kvals[1] = 0xffffffffffffffffull;
  P.m->nk = 2;
  jmp_buf jb;
  jmp_buf *saved = parse_oom_jmp;
  if (setjmp(jb)) {
    P.failed = 1;
    P.code = CUDA_ERROR_OUT_OF_MEMORY;
    if (err && errlen) snprintf(err, errlen, "out of memory while parsing PTX");
  } else {
    parse_oom_jmp = &jb;
    P.kflag = calloc(16, 1);
    P.capkflag = 16;
    P.nkflag = 2;
    if (!P.kflag || !P.m->kvals) abort_oom();
    lex(&P, ptx, len);
    if (!P.failed) parse_module(&P);
    if (!P.failed) finish(&P);
  }
  parse_oom_jmp = saved;
  free(P.kflag);
  free(P.t);
  free(P.syms);
  free(P.msyms);
  free(P.mhash);
  free(P.shfix);
  free(P.labels);
  free(P.fix);
  free(P.callfix);
  if (P.failed) {
    sg_ptx_module_free(P.m);
    return P.code ? P.code : CUDA_ERROR_INVALID_PTX;
  }
  *out = P.m;
  return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- accessors */

int sg_ptx_module_kernel_count(const sg_ptx_module *m) { return m ? m->nentries : 0; }
const sg_ptx_kernel *sg_ptx_module_kernel(const sg_ptx_module *m, int index) {
  if (!m || index < 0 || index >= m->nentries) return NULL;
  return m->funcs[m->entries[index]];
}
const sg_ptx_kernel *sg_ptx_module_find_kernel(const sg_ptx_module *m, const char *name) {
  if (!m || !name) return NULL;
  for (int i = 0; i < m->nentries; i++)
    if (!strcmp(m->funcs[m->entries[i]]->name, name)) return m->funcs[m->entries[i]];
  return NULL;
}
const char *sg_ptx_kernel_name(const sg_ptx_kernel *k) { return k ? k->name : NULL; }
int sg_ptx_kernel_param_count(const sg_ptx_kernel *k) { return k ? k->nparams : 0; }
int sg_ptx_kernel_param_info(const sg_ptx_kernel *k, int index, size_t *offset, size_t *size) {
  if (!k || index < 0 || index >= k->nparams) return CUDA_ERROR_INVALID_VALUE;
  if (offset) *offset = k->params[index].off;
  if (size) *size = k->params[index].size;
  return CUDA_SUCCESS;
}
size_t sg_ptx_kernel_param_bytes(const sg_ptx_kernel *k) { return k ? k->param_bytes : 0; }
size_t sg_ptx_kernel_static_shared(const sg_ptx_kernel *k) { return k ? k->static_shared : 0; }
size_t sg_ptx_kernel_local_bytes(const sg_ptx_kernel *k) { return k ? k->local_reach : 0; }
int sg_ptx_kernel_max_threads(const sg_ptx_kernel *k) { return k ? k->max_threads : 0; }

int sg_ptx_module_global_count(const sg_ptx_module *m) { return m ? m->nglobals : 0; }
int sg_ptx_module_global(const sg_ptx_module *m, int index, sg_ptx_global_info *out) {
  if (!m || !out || index < 0 || index >= m->nglobals) return CUDA_ERROR_INVALID_VALUE;
  const sg_global *g = &m->globals[index];
  out->name = g->name;
  out->size = g->size;
  out->align = g->align;
  out->space = (sg_ptx_space)g->space;
  out->init = g->init;
  return CUDA_SUCCESS;
}
void sg_ptx_module_set_global_addr(sg_ptx_module *m, int index, uint64_t device_addr) {
  if (!m || index < 0 || index >= m->nglobals) return;
  m->globals[index].addr = device_addr;
  for (int k = 0; k < m->nkpatches; k++)
    if (m->kpatches[k].kind == SG_KP_GLOBAL && m->kpatches[k].ref == index)
      sg_ptx_set_kconst(m, m->kpatches[k].kidx, device_addr + (uint64_t)m->kpatches[k].off);
}
