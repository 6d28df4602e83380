/* sg_ptx_exec: the interpreter.
 *
 * A warp runs its 32 lanes in lock-step: one decoded instruction is applied
 * to every lane of the current group in a tight loop, which amortises
 * dispatch 32x and makes shfl/vote/match and bar.sync natural.  Divergence
 * uses per-lane PCs with "min-PC" scheduling: the group is the set of
 * runnable lanes at the lowest PC, so lanes reconverge as soon as the
 * lagging group reaches the leaders' PC, for any control flow.  A lane that
 * reaches bar.sync blocks; when every runnable lane of every warp of the
 * block is blocked (or exited), the barrier opens.  Blocks of a grid run on a
 * persistent worker pool. */
#include "sg_ptx_internal.h"

#include <cuda.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rgpu_clock.h"
#include "rgpu_thread_name.h"

#define FULL 0xffffffffu
#define NOPC 0xffffffffu
#define NCACHE 4

/* ---------------------------------------------------------------- types */

typedef struct launch launch;

typedef struct {
  uint64_t *R;        /* nregs x 32 lanes */
  uint32_t *Pm;       /* predicate lane masks */
  uint8_t *local;     /* 32 x local_stride */
  uint8_t *fparam;    /* 32 x fparam_stride */
  uint64_t *stack;    /* 32 x stack_depth: return pc | call index << 32 */
  uint32_t lane_pc[32];
  uint8_t sp[32];
  uint32_t pc, group, live, blocked, other_min;
  /* lanes waiting at a warp-synchronous instruction (shfl/vote/match/redux/
   * bar.warp.sync) for lanes of its member mask that are elsewhere, and
   * lanes let go without them because nothing else could run */
  uint32_t wsync, sync_forced;
  uint32_t cc;             /* carry flag of each lane (add.cc/addc) */
  const sg_insn *red_insn; /* bar.red this warp waits in */
  uint32_t red_mask;
} warp;

typedef struct {
  launch *L;
  sg_ptx_range cache[NCACHE];
  int cache_next;
  uint64_t sink[32];
  /* block scratch, reused across blocks */
  warp *warps;
  int nwarps_alloc;
  uint8_t *shared;
  size_t shared_alloc;
  size_t shared_size;
  size_t reserved_base; /* offset of the reserved shared memory (SG_RESERVED_SMEM) */
  uint64_t ctaid[3];
  uint32_t red_popc, red_and, red_or;
  uint64_t insns;
  uint64_t warp_insns;
  /* warp instructions left in the worker's time slice; kept across
   * run_warp calls so that warps that yield often (nanosleep) still reach
   * the fault and deadline checks */
  uint32_t slice_left;
  int napped;        /* a warp yielded at nanosleep in this scheduling round */
  void *scr; /* the thread's scratch (see get_scratch) */
} worker;

struct launch {
  const struct sg_ptx_kernel *k;
  const struct sg_ptx_module *m;
  const sg_ptx_env *env;
  sg_ptx_launch_cfg cfg;
  uint8_t *params;        /* copy of the parameter buffer */
  uint64_t nblocks;
  unsigned nthreads, nwarps;
  atomic_uint_fast64_t next_block;
  atomic_int failed;
  pthread_mutex_t lock;   /* fault record and printf output */
  sg_ptx_fault fault;
  int code;
  uint32_t local_stride, fparam_stride, stack_depth;
  uint64_t deadline_ns;   /* CLOCK_MONOTONIC; 0 = none */
  atomic_uint_fast64_t insns, warp_insns;
};

/* ---------------------------------------------------------------- helpers */

static inline float f32_of(uint64_t v) { float f; uint32_t u = (uint32_t)v; memcpy(&f, &u, 4); return f; }
static inline uint64_t of_f32(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline double f64_of(uint64_t v) { double d; memcpy(&d, &v, 8); return d; }
static inline uint64_t of_f64(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }

static inline float ftzf(float x) { return (fabsf(x) < 1.17549435e-38f) ? copysignf(0.0f, x) : x; }

float sg_half_to_float(uint16_t h) {
  uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, f = h & 0x3ff;
  if (e == 0x1f) { uint32_t u = s | 0x7f800000u | (f << 13); float r; memcpy(&r, &u, 4); return r; }
  if (e == 0) { float r = ldexpf((float)f, -24); return s ? -r : r; }
  uint32_t u = s | ((e + 112) << 23) | (f << 13);
  float r;
  memcpy(&r, &u, 4);
  return r;
}

/* Rounds x once to a binary format with `ebits` exponent and `mbits`
 * fraction bits (f16: 5/10, bf16: 8/7) under rounding mode rnd, handling
 * subnormals and overflow as IEEE 754 does.  f16/bf16 arithmetic is done
 * exactly in double and rounded here, so results are correctly rounded. */
static uint32_t narrow_float(double x, int ebits, int mbits, int rnd) {
  int bias = (1 << (ebits - 1)) - 1;
  uint32_t sign = signbit(x) ? 1u << (ebits + mbits) : 0;
  uint32_t expmask = ((1u << ebits) - 1) << mbits;
  uint32_t maxfin = expmask - (1u << mbits) + ((1u << mbits) - 1);
  if (isnan(x)) return sign | expmask | (1u << (mbits - 1));
  if (isinf(x)) return sign | expmask;
  double ax = fabs(x);
  if (ax == 0.0) return sign;
  int e;
  frexp(ax, &e);
  int E = e - 1; /* ax in [2^E, 2^(E+1)) */
  if (E < 1 - bias) E = 1 - bias;
  double q = ldexp(ax, mbits - E); /* exact: a power-of-two scaling */
  double r;
  int toward_inf;
  switch (rnd) {
    case SG_RND_RZ: case SG_RND_RZI: r = floor(q); break;
    case SG_RND_RM: case SG_RND_RMI: r = sign ? ceil(q) : floor(q); break;
    case SG_RND_RP: case SG_RND_RPI: r = sign ? floor(q) : ceil(q); break;
    default: r = nearbyint(q); break;
  }
  double v = ldexp(r, E - mbits);
  if (v >= ldexp(1.0, bias + 1)) {
    /* overflow: infinity unless the mode rounds toward zero for this sign */
    switch (rnd) {
      case SG_RND_RZ: case SG_RND_RZI: toward_inf = 0; break;
      case SG_RND_RM: case SG_RND_RMI: toward_inf = sign != 0; break;
      case SG_RND_RP: case SG_RND_RPI: toward_inf = sign == 0; break;
      default: toward_inf = 1; break;
    }
    return sign | (toward_inf ? expmask : maxfin);
  }
  if (v == 0.0) return sign;
  frexp(v, &e);
  int E2 = e - 1;
  if (E2 < 1 - bias) return sign | (uint32_t)ldexp(v, bias - 1 + mbits); /* subnormal */
  uint32_t frac = (uint32_t)(ldexp(v, mbits - E2) - ldexp(1.0, mbits));
  return sign | ((uint32_t)(E2 + bias) << mbits) | frac;
}

uint16_t sg_double_to_half(double x) { return (uint16_t)narrow_float(x, 5, 10, SG_RND_RN); }
static inline uint16_t double_to_half_r(double x, int rnd) { return (uint16_t)narrow_float(x, 5, 10, rnd); }
static inline uint16_t double_to_bf16_r(double x, int rnd) { return (uint16_t)narrow_float(x, 8, 7, rnd); }

static inline float bf16_to_float(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static uint16_t float_to_bf16(float f) { return double_to_bf16_r(f, SG_RND_RN); }

static inline int is_signed_t(int t) { return t >= SG_T_S8 && t <= SG_T_S64; }
static inline unsigned tsize(int t) {
  static const unsigned char sz[SG_T_COUNT] = {0, 1, 1, 2, 4, 8, 1, 2, 4, 8, 1, 2, 4, 8, 2, 4, 2, 4, 4, 8, 4, 4};
  return t < SG_T_COUNT ? sz[t] : 0;
}

/* Reads value v of integer type t as a signed or unsigned 64-bit number. */
static inline int64_t sext(uint64_t v, int t) {
  switch (t) {
    case SG_T_S8: return (int8_t)v;
    case SG_T_S16: return (int16_t)v;
    case SG_T_S32: return (int32_t)v;
    case SG_T_S64: return (int64_t)v;
    case SG_T_U8: case SG_T_B8: return (uint8_t)v;
    case SG_T_U16: case SG_T_B16: return (uint16_t)v;
    case SG_T_U32: case SG_T_B32: return (uint32_t)v;
    default: return (int64_t)v;
  }
}

static inline uint64_t trunc_t(uint64_t v, unsigned size) {
  return size >= 8 ? v : (v & ((1ull << (size * 8)) - 1));
}

/* Without -mpopcnt the builtin is a libgcc call; this is the hot counter. */
static inline unsigned popc32(uint32_t x) {
  if (x == 0xffffffffu) return 32;
  x = x - ((x >> 1) & 0x55555555u);
  x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
  x = (x + (x >> 4)) & 0x0f0f0f0fu;
  return (x * 0x01010101u) >> 24;
}

/* fma.rn.f32 over a full warp: with hardware FMA this is a few vector
 * instructions, without it a libm call per lane.  Chosen once at run time
 * so the binary still runs on CPUs without FMA. */
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("fma,avx2"))) static void fma32_full_hw(uint64_t *D, const uint64_t *A, const uint64_t *B,
                                                               const uint64_t *C) {
  for (int l = 0; l < 32; l++) {
    float a, b, c, r;
    uint32_t ua = (uint32_t)A[l], ub = (uint32_t)B[l], uc = (uint32_t)C[l], ur;
    memcpy(&a, &ua, 4); memcpy(&b, &ub, 4); memcpy(&c, &uc, 4);
    r = __builtin_fmaf(a, b, c);
    memcpy(&ur, &r, 4);
    D[l] = ur;
  }
}
/* Block workers ask concurrently; an atomic keeps the one-time probe
 * race-free (every thread computes the same answer). */
static int have_hw_fma(void) {
  static _Atomic int v = -1;
  int x = atomic_load_explicit(&v, memory_order_relaxed);
  if (x < 0) {
    __builtin_cpu_init();
    x = __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2");
    atomic_store_explicit(&v, x, memory_order_relaxed);
  }
  return x;
}
#else
static void fma32_full_hw(uint64_t *D, const uint64_t *A, const uint64_t *B, const uint64_t *C) { (void)D; (void)A; (void)B; (void)C; }
static int have_hw_fma(void) { return 0; }
#endif

/* ---------------------------------------------------------------- faults */

static const char *space_name(int sp) {
  switch (sp) {
    case SG_SP_GLOBAL: return "global";
    case SG_SP_SHARED: return "shared";
    case SG_SP_LOCAL: return "local";
    case SG_SP_CONST: return "const";
    case SG_SP_PARAM: return "param";
    default: return "generic";
  }
}

static const char *op_name(int op) {
  switch (op) {
    case SG_OP_LD: return "ld";
    case SG_OP_ST: return "st";
    case SG_OP_ATOM: return "atom";
    case SG_OP_VPRINTF: return "vprintf";
    case SG_OP_MALLOC: return "malloc";
    case SG_OP_FREE: return "free";
    default: return "access";
  }
}

static void tid_of(const launch *L, unsigned lin, unsigned t[3]) {
  const unsigned *b = L->cfg.block;
  t[0] = lin % b[0];
  t[1] = (lin / b[0]) % b[1];
  t[2] = lin / (b[0] * b[1]);
}

static void record_fault(worker *W, int widx, int lane, int code, uint64_t addr, const sg_insn *I, const char *what) {
  launch *L = W->L;
  pthread_mutex_lock(&L->lock);
  if (!L->code) {
    L->code = code;
    sg_ptx_fault *f = &L->fault;
    memset(f, 0, sizeof *f);
    f->code = code;
    f->address = addr;
    for (int i = 0; i < 3; i++) f->block[i] = (unsigned)W->ctaid[i];
    tid_of(L, (unsigned)(widx * 32 + lane), f->thread);
    snprintf(f->message, sizeof f->message, "%s in %s block (%u,%u,%u) thread (%u,%u,%u), line %u", what,
             L->k->name, f->block[0], f->block[1], f->block[2], f->thread[0], f->thread[1], f->thread[2],
             I ? I->line : 0);
  }
  pthread_mutex_unlock(&L->lock);
  atomic_store(&L->failed, 1);
}

static void mem_fault(worker *W, int widx, int lane, int code, uint64_t addr, unsigned size, const sg_insn *I) {
  char what[96];
  snprintf(what, sizeof what, "%s 0x%llx (%u-byte %s.%s)",
           code == CUDA_ERROR_MISALIGNED_ADDRESS ? "misaligned address" : "illegal address",
           (unsigned long long)addr, size, op_name(I->op), space_name(I->space));
  record_fault(W, widx, lane, code, addr, I, what);
}

/* ---------------------------------------------------------------- memory */

static uint8_t *global_slow(worker *W, uint64_t addr, unsigned size) {
  const sg_ptx_env *env = W->L->env;
  if (!env || !env->lookup) return NULL;
  sg_ptx_range r;
  if (env->lookup(env->ctx, addr, &r) != 0) return NULL;
  if (addr < r.base || addr - r.base >= r.size || r.size - (addr - r.base) < size || !r.host) return NULL;
  W->cache[W->cache_next] = r;
  W->cache_next = (W->cache_next + 1) % NCACHE;
  return (uint8_t *)r.host + (addr - r.base);
}

static inline uint8_t *global_ptr(worker *W, uint64_t addr, unsigned size) {
  for (int i = 0; i < NCACHE; i++) {
    const sg_ptx_range *c = &W->cache[i];
    uint64_t o = addr - c->base;
    if (o < c->size && c->size - o >= size) return (uint8_t *)c->host + o;
  }
  return global_slow(W, addr, size);
}

/* Translates a PTX address of `space` for one lane into host memory;
 * NULL when out of bounds. */
static inline uint8_t *xlate(worker *W, warp *w, int lane, int space, uint64_t addr, unsigned size) {
  launch *L = W->L;
  switch (space) {
    case SG_SP_GLOBAL:
    case SG_SP_CONST:
      return global_ptr(W, addr, size);
    case SG_SP_SHARED:
      if (addr < W->shared_size && W->shared_size - addr >= size) return W->shared + addr;
      return NULL;
    case SG_SP_LOCAL:
      if (addr < L->local_stride && L->local_stride - addr >= size) return w->local + (size_t)lane * L->local_stride + addr;
      return NULL;
    case SG_SP_PARAM:
      if (addr < L->fparam_stride && L->fparam_stride - addr >= size) return w->fparam + (size_t)lane * L->fparam_stride + addr;
      return NULL;
    default: {
      uint64_t so = addr - (uint64_t)(uintptr_t)W->shared;
      if (so < W->shared_size) return W->shared_size - so >= size ? W->shared + so : NULL;
      uint8_t *lb = w->local + (size_t)lane * L->local_stride;
      uint64_t lo = addr - (uint64_t)(uintptr_t)lb;
      if (lo < L->local_stride) return L->local_stride - lo >= size ? lb + lo : NULL;
      return global_ptr(W, addr, size);
    }
  }
}

static inline uint64_t load_sized(const uint8_t *p, unsigned size, int is_signed) {
  switch (size) {
    case 1: { uint8_t v = *p; return is_signed ? (uint64_t)(int64_t)(int8_t)v : v; }
    case 2: { uint16_t v; memcpy(&v, p, 2); return is_signed ? (uint64_t)(int64_t)(int16_t)v : v; }
    case 4: { uint32_t v; memcpy(&v, p, 4); return is_signed ? (uint64_t)(int64_t)(int32_t)v : v; }
    default: { uint64_t v; memcpy(&v, p, 8); return v; }
  }
}

static inline void store_sized(uint8_t *p, unsigned size, uint64_t v) {
  switch (size) {
    case 1: *p = (uint8_t)v; break;
    case 2: { uint16_t x = (uint16_t)v; memcpy(p, &x, 2); break; }
    case 4: { uint32_t x = (uint32_t)v; memcpy(p, &x, 4); break; }
    default: memcpy(p, &v, 8); break;
  }
}

/* printf reads strings and argument buffers through generic addresses */
typedef struct { worker *W; warp *w; int lane; } read_ctx;
static int printf_read(void *ctx, uint64_t addr, void *dst, size_t len) {
  read_ctx *rc = ctx;
  if (len == 0) return 0;
  if (len > 0xffffffffu) return -1;
  uint8_t *p = xlate(rc->W, rc->w, rc->lane, SG_SP_GENERIC, addr, (unsigned)len);
  if (!p) return -1;
  memcpy(dst, p, len);
  return 0;
}

/* ---------------------------------------------------------------- scheduling */

static void set_group_pc(warp *w, uint32_t mask, uint32_t pc) {
  while (mask) { int l = __builtin_ctz(mask); mask &= mask - 1; w->lane_pc[l] = pc; }
}

/* Picks the runnable lanes at the lowest PC. lane_pc must be current for
 * every live lane. */
static void resched(warp *w) {
  uint32_t waiting = w->wsync & w->live;
  uint32_t cand = w->live & ~w->blocked & ~waiting;
  if (!cand) {
    if (!waiting) { w->group = 0; w->other_min = NOPC; return; }
    /* Every lane that could run waits at a warp-synchronous instruction
     * for lanes that cannot come (they wait at a block barrier, or at
     * another such instruction in the other arm of a branch): let them all
     * go on with the members that did arrive, in min-PC order, so that
     * they still reconverge where their paths meet. */
    w->sync_forced |= waiting;
    w->wsync = 0;
    cand = waiting;
    waiting = 0;
  }
  uint32_t minpc = NOPC;
  for (uint32_t c = cand; c;) { int l = __builtin_ctz(c); c &= c - 1; if (w->lane_pc[l] < minpc) minpc = w->lane_pc[l]; }
  uint32_t grp = 0, other = NOPC;
  for (uint32_t c = cand | waiting; c;) {
    int l = __builtin_ctz(c);
    c &= c - 1;
    /* lanes waiting at this pc join the group that reached it */
    if (w->lane_pc[l] == minpc) grp |= 1u << l;
    else if (w->lane_pc[l] < other) other = w->lane_pc[l];
  }
  if (waiting) w->wsync &= ~grp;
  w->pc = minpc;
  w->group = grp;
  w->other_min = other;
}

/* A warp-synchronous instruction waits until every live lane of its member
 * mask executes it (PTX ISA: "wait until all non-exited threads
 * corresponding to membermask have executed" it).  Min-PC scheduling runs
 * the lowest-PC group first, so lanes of the mask that took a branch to
 * code placed later in the function are not here yet: the group must wait
 * for them instead of reading their stale registers.  Returns 1 when the
 * group must wait. */
static inline int warp_sync_must_wait(warp *w, uint32_t group, uint32_t member) {
  uint32_t missing = member & w->live & ~group;
  uint32_t forced = w->sync_forced & group;
  w->sync_forced &= ~group;
  return missing && !forced;
}

/* ---------------------------------------------------------------- ops */

#define LANES(...)                                                             \
  do {                                                                         \
    if (m == FULL) {                                                           \
      for (int l = 0; l < 32; l++) { __VA_ARGS__ }                             \
    } else {                                                                   \
      for (uint32_t mm_ = m; mm_;) {                                           \
        int l = __builtin_ctz(mm_);                                            \
        mm_ &= mm_ - 1;                                                        \
        __VA_ARGS__                                                            \
      }                                                                        \
    }                                                                          \
  } while (0)

#define REG(x) (((x) & SG_KBIT) ? K + (size_t)((x) & ~SG_KBIT) * 32 : R + (size_t)(x) * 32)
#define DREG(x) ((x) == SG_NOREG ? W->sink : R + (size_t)(x) * 32)
#define PRED(x) (((x) & SG_KBIT) ? (mod->kvals[(x) & ~SG_KBIT] ? FULL : 0u) : w->Pm[x])
#define PWRITE(x, val)                                                         \
  do {                                                                         \
    if ((x) != SG_NOREG && !((x) & SG_KBIT)) w->Pm[x] = (w->Pm[x] & ~m) | ((val) & m); \
  } while (0)

/* integer binary op over all integer types: EXPR uses a, b of type CT */
#define ICASE(TY, CT, UT, EXPR)                                                \
  case TY: { typedef CT CT_; typedef UT UT_; LANES({ CT_ a = (CT_)A[l]; CT_ b = (CT_)Bv[l]; (void)a; (void)b; D[l] = (UT_)(EXPR); }); } break;
#define IALL(EXPR_S, EXPR_U)                                                   \
  ICASE(SG_T_S32, int32_t, uint32_t, EXPR_S)                                   \
  ICASE(SG_T_U32, uint32_t, uint32_t, EXPR_U)                                  \
  ICASE(SG_T_B32, uint32_t, uint32_t, EXPR_U)                                  \
  ICASE(SG_T_S64, int64_t, uint64_t, EXPR_S)                                   \
  ICASE(SG_T_U64, uint64_t, uint64_t, EXPR_U)                                  \
  ICASE(SG_T_B64, uint64_t, uint64_t, EXPR_U)                                  \
  ICASE(SG_T_S16, int16_t, uint16_t, EXPR_S)                                   \
  ICASE(SG_T_U16, uint16_t, uint16_t, EXPR_U)                                  \
  ICASE(SG_T_B16, uint16_t, uint16_t, EXPR_U)                                  \
  ICASE(SG_T_S8, int8_t, uint8_t, EXPR_S)                                      \
  ICASE(SG_T_U8, uint8_t, uint8_t, EXPR_U)                                     \
  ICASE(SG_T_B8, uint8_t, uint8_t, EXPR_U)

static inline float minf_ptx(float a, float b, int nan) {
  if (isnan(a) || isnan(b)) { if (nan || (isnan(a) && isnan(b))) return f32_of(0x7fffffff); return isnan(a) ? b : a; }
  if (a == b) return signbit(a) ? a : b;
  return a < b ? a : b;
}
static inline float maxf_ptx(float a, float b, int nan) {
  if (isnan(a) || isnan(b)) { if (nan || (isnan(a) && isnan(b))) return f32_of(0x7fffffff); return isnan(a) ? b : a; }
  if (a == b) return signbit(a) ? b : a;
  return a > b ? a : b;
}
static inline double mind_ptx(double a, double b) {
  if (isnan(a) || isnan(b)) { if (isnan(a) && isnan(b)) return f64_of(0x7fffffffffffffffull); return isnan(a) ? b : a; }
  if (a == b) return signbit(a) ? a : b;
  return a < b ? a : b;
}
static inline double maxd_ptx(double a, double b) {
  if (isnan(a) || isnan(b)) { if (isnan(a) && isnan(b)) return f64_of(0x7fffffffffffffffull); return isnan(a) ? b : a; }
  if (a == b) return signbit(a) ? b : a;
  return a > b ? a : b;
}

static inline float satf(float x) { return isnan(x) ? 0.0f : x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
static inline double satd(double x) { return isnan(x) ? 0.0 : x < 0.0 ? 0.0 : x > 1.0 ? 1.0 : x; }

static inline int directed(int rnd) { return rnd == SG_RND_RZ || rnd == SG_RND_RM || rnd == SG_RND_RP; }

/* f32 arithmetic with rounding, ftz and sat. */
static void f32_arith(const sg_insn *I, uint32_t m, uint64_t *D, const uint64_t *A, const uint64_t *Bv, const uint64_t *C) {
  int ftz = I->flags & SG_F_FTZ, sat = I->flags & SG_F_SAT, rnd = I->mod, dir = directed(rnd);
  int nan = I->flags & SG_F_NAN;
  LANES({
    float a = f32_of(A[l]), b = Bv ? f32_of(Bv[l]) : 0.0f, c = C ? f32_of(C[l]) : 0.0f, r;
    if (ftz) { a = ftzf(a); b = ftzf(b); c = ftzf(c); }
    switch (I->op) {
      case SG_OP_ADD: r = dir ? sg_round_addf(a, b, rnd) : a + b; break;
      case SG_OP_SUB: r = dir ? sg_round_addf(a, -b, rnd) : a - b; break;
      case SG_OP_MUL: r = dir ? sg_round_mulf(a, b, rnd) : a * b; break;
      case SG_OP_MAD:
      case SG_OP_FMA: r = dir ? sg_round_fmaf(a, b, c, rnd) : fmaf(a, b, c); break;
      case SG_OP_DIV: r = dir ? sg_round_divf(a, b, rnd) : a / b; break;
      case SG_OP_MIN: r = minf_ptx(a, b, nan); break;
      case SG_OP_MAX: r = maxf_ptx(a, b, nan); break;
      case SG_OP_NEG: r = f32_of(A[l] ^ 0x80000000u); if (ftz) r = -a; break;
      case SG_OP_ABS: r = f32_of(A[l] & 0x7fffffffu); if (ftz) r = fabsf(a); break;
      case SG_OP_COPYSIGN: r = copysignf(b, a); break;
      case SG_OP_RCP: r = dir ? sg_round_divf(1.0f, a, rnd) : 1.0f / a; break;
      case SG_OP_SQRT: r = dir ? sg_round_sqrtf(a, rnd) : sqrtf(a); break;
      case SG_OP_RSQRT: r = 1.0f / sqrtf(a); break;
      case SG_OP_EX2: r = exp2f(a); break;
      case SG_OP_LG2: r = log2f(a); break;
      case SG_OP_SIN: r = sinf(a); break;
      case SG_OP_COS: r = cosf(a); break;
      case SG_OP_TANH: r = tanhf(a); break;
      default: r = 0; break;
    }
    if (sat) r = satf(r);
    if (ftz) r = ftzf(r);
    D[l] = of_f32(r);
  });
}

static void f64_arith(const sg_insn *I, uint32_t m, uint64_t *D, const uint64_t *A, const uint64_t *Bv, const uint64_t *C) {
  int rnd = I->mod, dir = directed(rnd), sat = I->flags & SG_F_SAT;
  LANES({
    double a = f64_of(A[l]), b = Bv ? f64_of(Bv[l]) : 0.0, c = C ? f64_of(C[l]) : 0.0, r;
    switch (I->op) {
      case SG_OP_ADD: r = dir ? sg_round_add(a, b, rnd) : a + b; break;
      case SG_OP_SUB: r = dir ? sg_round_add(a, -b, rnd) : a - b; break;
      case SG_OP_MUL: r = dir ? sg_round_mul(a, b, rnd) : a * b; break;
      case SG_OP_MAD:
      case SG_OP_FMA: r = dir ? sg_round_fma(a, b, c, rnd) : fma(a, b, c); break;
      case SG_OP_DIV: r = dir ? sg_round_div(a, b, rnd) : a / b; break;
      case SG_OP_MIN: r = mind_ptx(a, b); break;
      case SG_OP_MAX: r = maxd_ptx(a, b); break;
      case SG_OP_NEG: r = f64_of(A[l] ^ 0x8000000000000000ull); break;
      case SG_OP_ABS: r = f64_of(A[l] & 0x7fffffffffffffffull); break;
      case SG_OP_COPYSIGN: r = copysign(b, a); break;
      case SG_OP_RCP: r = dir ? sg_round_div(1.0, a, rnd) : 1.0 / a; break;
      case SG_OP_SQRT: r = dir ? sg_round_sqrt(a, rnd) : sqrt(a); break;
      case SG_OP_RSQRT: r = 1.0 / sqrt(a); break;
      case SG_OP_EX2: r = exp2(a); break;
      case SG_OP_LG2: r = log2(a); break;
      case SG_OP_SIN: r = sin(a); break;
      case SG_OP_COS: r = cos(a); break;
      case SG_OP_TANH: r = tanh(a); break;
      default: r = 0; break;
    }
    if (sat) r = satd(r);
    D[l] = of_f64(r);
  });
}

/* f16/bf16 (and x2) arithmetic: exact in double, rounded once to the
 * narrow type. */
static uint16_t half_op(int op, int bf, uint16_t ha, uint16_t hb, uint16_t hc, int flags) {
  double a = bf ? bf16_to_float(ha) : sg_half_to_float(ha);
  double b = bf ? bf16_to_float(hb) : sg_half_to_float(hb);
  double c = bf ? bf16_to_float(hc) : sg_half_to_float(hc);
  double r;
  switch (op) {
    case SG_OP_ADD: r = a + b; break;
    case SG_OP_SUB: r = a - b; break;
    case SG_OP_MUL: r = a * b; break;
    case SG_OP_MAD:
    case SG_OP_FMA: r = a * b + c; break;
    case SG_OP_MIN: r = mind_ptx(a, b); break;
    case SG_OP_MAX: r = maxd_ptx(a, b); break;
    case SG_OP_NEG: return ha ^ 0x8000;
    case SG_OP_ABS: return ha & 0x7fff;
    case SG_OP_DIV: r = a / b; break;
    case SG_OP_RCP: r = 1.0 / a; break;
    case SG_OP_SQRT: r = sqrt(a); break;
    case SG_OP_RSQRT: r = 1.0 / sqrt(a); break;
    case SG_OP_EX2: r = exp2(a); break;
    case SG_OP_LG2: r = log2(a); break;
    case SG_OP_SIN: r = sin(a); break;
    case SG_OP_COS: r = cos(a); break;
    case SG_OP_TANH: r = tanh(a); break;
    default: r = 0; break;
  }
  if (flags & SG_F_SAT) r = satd(r);
  return bf ? double_to_bf16_r(r, SG_RND_RN) : sg_double_to_half(r);
}

static void half_arith(const sg_insn *I, uint32_t m, uint64_t *D, const uint64_t *A, const uint64_t *Bv, const uint64_t *C) {
  int bf = I->type == SG_T_BF16 || I->type == SG_T_BF16X2;
  int x2 = I->type == SG_T_F16X2 || I->type == SG_T_BF16X2;
  LANES({
    uint64_t a = A[l], b = Bv ? Bv[l] : 0, c = C ? C[l] : 0;
    uint64_t r = half_op(I->op, bf, (uint16_t)a, (uint16_t)b, (uint16_t)c, I->flags);
    if (x2) r |= (uint64_t)half_op(I->op, bf, (uint16_t)(a >> 16), (uint16_t)(b >> 16), (uint16_t)(c >> 16), I->flags) << 16;
    D[l] = r;
  });
}

static inline uint32_t brev32(uint32_t x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
  x = ((x >> 8) & 0x00ff00ffu) | ((x & 0x00ff00ffu) << 8);
  return (x >> 16) | (x << 16);
}

static uint32_t prmt(uint32_t a, uint32_t b, uint32_t c, int mode) {
  uint64_t x = ((uint64_t)b << 32) | a;
  uint8_t bytes[8];
  for (int i = 0; i < 8; i++) bytes[i] = (uint8_t)(x >> (8 * i));
  uint32_t r = 0;
  int sel[4];
  switch (mode) {
    case 0:
      for (int i = 0; i < 4; i++) {
        unsigned s = (c >> (4 * i)) & 0xf;
        uint8_t v = bytes[s & 7];
        if (s & 8) v = (v & 0x80) ? 0xff : 0;
        r |= (uint32_t)v << (8 * i);
      }
      return r;
    case 1: { int n = c & 3; for (int i = 0; i < 4; i++) sel[i] = (n + i) & 7; break; }          /* f4e */
    case 2: { int n = c & 3; for (int i = 0; i < 4; i++) sel[i] = (n - i + 8) & 7; break; }      /* b4e */
    case 3: { int n = c & 3; for (int i = 0; i < 4; i++) sel[i] = n; break; }                    /* rc8 */
    case 4: { int n = c & 3; static const int t[4][4] = {{0,1,2,3},{1,1,2,3},{2,2,2,3},{3,3,3,3}}; for (int i = 0; i < 4; i++) sel[i] = t[n][i]; break; }
    case 5: { int n = c & 3; static const int t[4][4] = {{0,0,0,0},{0,1,1,1},{0,1,2,2},{0,1,2,3}}; for (int i = 0; i < 4; i++) sel[i] = t[n][i]; break; }
    default: { int n = c & 1; sel[0] = 2 * n; sel[1] = 2 * n + 1; sel[2] = 2 * n; sel[3] = 2 * n + 1; break; } /* rc16 */
  }
  for (int i = 0; i < 4; i++) r |= (uint32_t)bytes[sel[i]] << (8 * i);
  return r;
}

/* ---------------------------------------------------------------- cvt */

static int64_t clamp_int(double v, int t) {
  if (isnan(v)) return 0;
  switch (t) {
    case SG_T_S8: return v <= -128.0 ? -128 : v >= 127.0 ? 127 : (int64_t)v;
    case SG_T_S16: return v <= -32768.0 ? -32768 : v >= 32767.0 ? 32767 : (int64_t)v;
    case SG_T_S32: return v <= -2147483648.0 ? INT32_MIN : v >= 2147483647.0 ? INT32_MAX : (int64_t)v;
    case SG_T_S64: return v <= -9223372036854775808.0 ? INT64_MIN : v >= 9223372036854775807.0 ? INT64_MAX : (int64_t)v;
    case SG_T_U8: case SG_T_B8: return v <= 0 ? 0 : v >= 255.0 ? 255 : (int64_t)v;
    case SG_T_U16: case SG_T_B16: return v <= 0 ? 0 : v >= 65535.0 ? 65535 : (int64_t)v;
    case SG_T_U32: case SG_T_B32: return v <= 0 ? 0 : v >= 4294967295.0 ? 4294967295ll : (int64_t)v;
    default: return v <= 0 ? 0 : v >= 18446744073709551615.0 ? (int64_t)UINT64_MAX : (int64_t)(uint64_t)v;
  }
}

static double round_int(double v, int rnd) {
  switch (rnd) {
    case SG_RND_RNI: return nearbyint(v);
    case SG_RND_RMI: return floor(v);
    case SG_RND_RPI: return ceil(v);
    default: return trunc(v);
  }
}

static double float_val(uint64_t v, int t) {
  switch (t) {
    case SG_T_F16: return sg_half_to_float((uint16_t)v);
    case SG_T_BF16: return bf16_to_float((uint16_t)v);
    case SG_T_F32: return f32_of(v);
    default: return f64_of(v);
  }
}

static uint64_t cvt_one(const sg_insn *I, uint64_t v) {
  int dt = I->type, st = I->type2, rnd = I->mod;
  int df = dt >= SG_T_F16 && dt <= SG_T_F64, sf = st >= SG_T_F16 && st <= SG_T_F64;
  int sat = I->flags & SG_F_SAT, ftz = I->flags & SG_F_FTZ;
  if (!df && !sf) {
    int64_t x = sext(v, st);
    if (sat) {
      unsigned ds = tsize(dt);
      int dsig = is_signed_t(dt), ssig = is_signed_t(st);
      if (dsig) {
        int64_t lo = ds >= 8 ? INT64_MIN : -(1ll << (ds * 8 - 1)), hi = ds >= 8 ? INT64_MAX : (1ll << (ds * 8 - 1)) - 1;
        if (!ssig && (uint64_t)x > (uint64_t)hi) x = hi;
        else if (ssig && x < lo) x = lo;
        else if (ssig && x > hi) x = hi;
      } else {
        uint64_t hi = ds >= 8 ? UINT64_MAX : (1ull << (ds * 8)) - 1;
        if (ssig && x < 0) x = 0;
        else if ((uint64_t)x > hi) x = (int64_t)hi;
      }
    }
    return trunc_t((uint64_t)x, tsize(dt));
  }
  if (sf && !df) {
    double d = float_val(v, st);
    if (st == SG_T_F32 && ftz) d = ftzf((float)d);
    d = round_int(d, rnd);
    return trunc_t((uint64_t)clamp_int(d, dt), tsize(dt));
  }
  if (!sf && df) {
    int64_t x = sext(v, st);
    int uns = !is_signed_t(st);
    double r;
    switch (dt) {
      case SG_T_F32: {
        float f = directed(rnd) ? sg_round_i2f(x, uns, rnd) : uns ? (float)(uint64_t)x : (float)x;
        if (sat) f = satf(f);
        return of_f32(f);
      }
      case SG_T_F64:
        r = directed(rnd) ? sg_round_i2d(x, uns, rnd) : uns ? (double)(uint64_t)x : (double)x;
        if (sat) r = satd(r);
        return of_f64(r);
      case SG_T_F16: {
        double dd = uns ? (double)(uint64_t)x : (double)x; /* exact below 2^53, far past f16 range */
        if (sat) dd = satd(dd);
        return double_to_half_r(dd, rnd);
      }
      default: {
        double dd = uns ? (double)(uint64_t)x : (double)x;
        if (sat) dd = satd(dd);
        return double_to_bf16_r(dd, rnd);
      }
    }
  }
  /* float -> float */
  double d = float_val(v, st);
  if (st == SG_T_F32 && ftz) d = ftzf((float)d);
  if (rnd >= SG_RND_RNI) d = round_int(d, rnd);
  if (sat) d = satd(d);
  switch (dt) {
    case SG_T_F32: {
      float f = (st == SG_T_F64 && directed(rnd)) ? sg_round_d2f(d, rnd) : (float)d;
      if (ftz) f = ftzf(f);
      if (isnan(f)) return 0x7fffffffu;
      return of_f32(f);
    }
    case SG_T_F64: return isnan(d) ? 0x7fffffffffffffffull : of_f64(d);
    case SG_T_F16: return double_to_half_r(d, rnd);
    default: return double_to_bf16_r(d, rnd);
  }
}

/* ---------------------------------------------------------------- compare */

static inline int cmp_float(double a, double b, int op) {
  int un = isnan(a) || isnan(b);
  switch (op) {
    case SG_CMP_EQ: return !un && a == b;
    case SG_CMP_NE: return !un && a != b;
    case SG_CMP_LT: return !un && a < b;
    case SG_CMP_LE: return !un && a <= b;
    case SG_CMP_GT: return !un && a > b;
    case SG_CMP_GE: return !un && a >= b;
    case SG_CMP_EQU: return un || a == b;
    case SG_CMP_NEU: return un || a != b;
    case SG_CMP_LTU: return un || a < b;
    case SG_CMP_LEU: return un || a <= b;
    case SG_CMP_GTU: return un || a > b;
    case SG_CMP_GEU: return un || a >= b;
    case SG_CMP_NUM: return !un;
    case SG_CMP_NAN: return un;
    default: return 0;
  }
}

/* Integer comparison; signed types compare signed unless the op is an
 * explicitly unsigned one (lo/ls/hi/hs). */
static inline int cmp_int(uint64_t ua, uint64_t ub, int64_t sa, int64_t sb, int is_s, int op) {
  switch (op) {
    case SG_CMP_EQ: return ua == ub;
    case SG_CMP_NE: return ua != ub;
    case SG_CMP_LT: return is_s ? sa < sb : ua < ub;
    case SG_CMP_LE: return is_s ? sa <= sb : ua <= ub;
    case SG_CMP_GT: return is_s ? sa > sb : ua > ub;
    case SG_CMP_GE: return is_s ? sa >= sb : ua >= ub;
    case SG_CMP_LO: return ua < ub;
    case SG_CMP_LS: return ua <= ub;
    case SG_CMP_HI: return ua > ub;
    case SG_CMP_HS: return ua >= ub;
    default: return 0;
  }
}

static uint32_t compare_lanes(const sg_insn *I, uint32_t m, const uint64_t *A, const uint64_t *Bv) {
  uint32_t res = 0;
  int t = I->type, op = I->mod;
#define CMPF(CT, OPR) LANES({ res |= (uint32_t)((CT)A[l] OPR (CT)Bv[l]) << l; }); return res
  if (t == SG_T_S32) {
    switch (op) {
      case SG_CMP_LT: CMPF(int32_t, <);
      case SG_CMP_LE: CMPF(int32_t, <=);
      case SG_CMP_GT: CMPF(int32_t, >);
      case SG_CMP_GE: CMPF(int32_t, >=);
      case SG_CMP_EQ: CMPF(int32_t, ==);
      case SG_CMP_NE: CMPF(int32_t, !=);
      default: break;
    }
  }
  if (t == SG_T_U32 || t == SG_T_B32 || t == SG_T_S32) {
    switch (op) {
      case SG_CMP_LT: if (t == SG_T_S32) break; /* fallthrough */
      case SG_CMP_LO: CMPF(uint32_t, <);
      case SG_CMP_LE: if (t == SG_T_S32) break; /* fallthrough */
      case SG_CMP_LS: CMPF(uint32_t, <=);
      case SG_CMP_GT: if (t == SG_T_S32) break; /* fallthrough */
      case SG_CMP_HI: CMPF(uint32_t, >);
      case SG_CMP_GE: if (t == SG_T_S32) break; /* fallthrough */
      case SG_CMP_HS: CMPF(uint32_t, >=);
      case SG_CMP_EQ: CMPF(uint32_t, ==);
      case SG_CMP_NE: CMPF(uint32_t, !=);
      default: break;
    }
  }
  if (t == SG_T_S64) {
    switch (op) {
      case SG_CMP_LT: CMPF(int64_t, <);
      case SG_CMP_GE: CMPF(int64_t, >=);
      default: break;
    }
  }
#undef CMPF
  if (t == SG_T_F32) {
    LANES({
      float a = f32_of(A[l]), b = f32_of(Bv[l]);
      if (I->flags & SG_F_FTZ) { a = ftzf(a); b = ftzf(b); }
      res |= (uint32_t)cmp_float(a, b, op) << l;
    });
    return res;
  }
  if (t >= SG_T_F16 && t <= SG_T_F64) {
    LANES({ res |= (uint32_t)cmp_float(float_val(A[l], t), float_val(Bv[l], t), op) << l; });
    return res;
  }
  unsigned sz = tsize(t);
  int is_s = is_signed_t(t);
  LANES({
    uint64_t ua = trunc_t(A[l], sz), ub = trunc_t(Bv[l], sz);
    res |= (uint32_t)cmp_int(ua, ub, sext(A[l], t), sext(Bv[l], t), is_s, op) << l;
  });
  return res;
}

/* ---------------------------------------------------------------- atomics */

static int atomic_op(const sg_insn *I, uint8_t *p, uint64_t b, uint64_t c, uint64_t *old_out) {
  int t = I->type;
  unsigned sz = tsize(t);
  if (t == SG_T_F16 || t == SG_T_BF16) { /* atom.add.f16 / .bf16 */
    int bf = t == SG_T_BF16;
    uint16_t *q = (uint16_t *)p, old = __atomic_load_n(q, __ATOMIC_RELAXED), nv;
    do { nv = half_op(SG_OP_ADD, bf, old, (uint16_t)b, 0, 0); }
    while (!__atomic_compare_exchange_n(q, &old, nv, 1, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
    *old_out = old;
    return 0;
  }
  if (t == SG_T_F16X2 || t == SG_T_BF16X2) {
    int bf = t == SG_T_BF16X2;
    uint32_t *q = (uint32_t *)p, old = __atomic_load_n(q, __ATOMIC_RELAXED), nv;
    do {
      nv = half_op(SG_OP_ADD, bf, (uint16_t)old, (uint16_t)b, 0, 0) |
           ((uint32_t)half_op(SG_OP_ADD, bf, (uint16_t)(old >> 16), (uint16_t)(b >> 16), 0, 0) << 16);
    } while (!__atomic_compare_exchange_n(q, &old, nv, 1, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
    *old_out = old;
    return 0;
  }
  if (sz == 4) {
    uint32_t *q = (uint32_t *)p, bv = (uint32_t)b, old;
    switch (I->mod) {
      case SG_ATOM_ADD:
        if (t == SG_T_F32) {
          old = __atomic_load_n(q, __ATOMIC_RELAXED);
          uint32_t nv;
          do { nv = (uint32_t)of_f32(f32_of(old) + f32_of(bv)); } while (!__atomic_compare_exchange_n(q, &old, nv, 1, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
        } else old = __atomic_fetch_add(q, bv, __ATOMIC_SEQ_CST);
        break;
      case SG_ATOM_EXCH: old = __atomic_exchange_n(q, bv, __ATOMIC_SEQ_CST); break;
      case SG_ATOM_AND: old = __atomic_fetch_and(q, bv, __ATOMIC_SEQ_CST); break;
      case SG_ATOM_OR: old = __atomic_fetch_or(q, bv, __ATOMIC_SEQ_CST); break;
      case SG_ATOM_XOR: old = __atomic_fetch_xor(q, bv, __ATOMIC_SEQ_CST); break;
      case SG_ATOM_CAS: old = bv; __atomic_compare_exchange_n(q, &old, (uint32_t)c, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); break;
      default: {
        old = __atomic_load_n(q, __ATOMIC_RELAXED);
        uint32_t nv;
        do {
          switch (I->mod) {
            case SG_ATOM_MIN:
              nv = t == SG_T_S32 ? (uint32_t)((int32_t)old < (int32_t)bv ? old : bv)
                 : t == SG_T_F32 ? (uint32_t)of_f32(minf_ptx(f32_of(old), f32_of(bv), 0)) : (old < bv ? old : bv);
              break;
            case SG_ATOM_MAX:
              nv = t == SG_T_S32 ? (uint32_t)((int32_t)old > (int32_t)bv ? old : bv)
                 : t == SG_T_F32 ? (uint32_t)of_f32(maxf_ptx(f32_of(old), f32_of(bv), 0)) : (old > bv ? old : bv);
              break;
            case SG_ATOM_INC: nv = old >= bv ? 0 : old + 1; break;
            case SG_ATOM_DEC: nv = (old == 0 || old > bv) ? bv : old - 1; break;
            default: return -1;
          }
        } while (!__atomic_compare_exchange_n(q, &old, nv, 1, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
      }
    }
    *old_out = old;
    return 0;
  }
  uint64_t *q = (uint64_t *)p, old;
  switch (I->mod) {
    case SG_ATOM_ADD:
      if (t == SG_T_F64) {
        old = __atomic_load_n(q, __ATOMIC_RELAXED);
        uint64_t nv;
        do { nv = of_f64(f64_of(old) + f64_of(b)); } while (!__atomic_compare_exchange_n(q, &old, nv, 1, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
      } else old = __atomic_fetch_add(q, b, __ATOMIC_SEQ_CST);
      break;
    case SG_ATOM_EXCH: old = __atomic_exchange_n(q, b, __ATOMIC_SEQ_CST); break;
    case SG_ATOM_AND: old = __atomic_fetch_and(q, b, __ATOMIC_SEQ_CST); break;
    case SG_ATOM_OR: old = __atomic_fetch_or(q, b, __ATOMIC_SEQ_CST); break;
    case SG_ATOM_XOR: old = __atomic_fetch_xor(q, b, __ATOMIC_SEQ_CST); break;
    case SG_ATOM_CAS: old = b; __atomic_compare_exchange_n(q, &old, c, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); break;
    default: {
      old = __atomic_load_n(q, __ATOMIC_RELAXED);
      uint64_t nv;
      do {
        switch (I->mod) {
          case SG_ATOM_MIN:
            nv = t == SG_T_S64 ? (uint64_t)((int64_t)old < (int64_t)b ? old : b)
               : t == SG_T_F64 ? of_f64(mind_ptx(f64_of(old), f64_of(b))) : (old < b ? old : b);
            break;
          case SG_ATOM_MAX:
            nv = t == SG_T_S64 ? (uint64_t)((int64_t)old > (int64_t)b ? old : b)
               : t == SG_T_F64 ? of_f64(maxd_ptx(f64_of(old), f64_of(b))) : (old > b ? old : b);
            break;
          case SG_ATOM_INC: nv = old >= b ? 0 : old + 1; break;
          case SG_ATOM_DEC: nv = (old == 0 || old > b) ? b : old - 1; break;
          default: return -1;
        }
      } while (!__atomic_compare_exchange_n(q, &old, nv, 1, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
    }
  }
  *old_out = old;
  return 0;
}

/* ---------------------------------------------------------------- printf */

static void do_vprintf(worker *W, warp *w, int widx, const sg_insn *I, uint32_t m) {
  launch *L = W->L;
  const sg_call_info *ci = &L->m->calls[I->aux];
  for (uint32_t mm = m; mm;) {
    int l = __builtin_ctz(mm);
    mm &= mm - 1;
    uint8_t *fp = w->fparam + (size_t)l * L->fparam_stride;
    uint64_t fmt, args;
    memcpy(&fmt, fp + ci->args[0].off, 8);
    memcpy(&args, fp + ci->args[1].off, 8);
    char buf[4096];
    read_ctx rc = {W, w, l};
    int n = sg_ptx_format_printf(printf_read, &rc, fmt, args, buf, sizeof buf);
    if (n < 0) {
      record_fault(W, widx, l, CUDA_ERROR_ILLEGAL_ADDRESS, fmt, I, "printf: format or argument outside device memory");
      return;
    }
    size_t len = (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1;
    pthread_mutex_lock(&L->lock);
    if (L->env && L->env->print) L->env->print(L->env->ctx, buf, len);
    else { fwrite(buf, 1, len, stdout); fflush(stdout); }
    pthread_mutex_unlock(&L->lock);
    if (ci->has_ret && ci->ret.size >= 4) {
      int32_t r = n;
      memcpy(fp + ci->ret.off, &r, 4);
    }
  }
}

/* ------------------------------------------------------- malloc / free */

/* Device-side malloc and free, lane by lane, through the driver's heap
 * (env->dev_malloc / dev_free). */
static void do_heap(worker *W, warp *w, const sg_insn *I, uint32_t m) {
  launch *L = W->L;
  const sg_call_info *ci = &L->m->calls[I->aux];
  for (uint32_t mm = m; mm;) {
    int l = __builtin_ctz(mm);
    mm &= mm - 1;
    uint8_t *fp = w->fparam + (size_t)l * L->fparam_stride;
    uint64_t arg;
    memcpy(&arg, fp + ci->args[0].off, 8);
    if (I->op == SG_OP_MALLOC) {
      uint64_t p = L->env && L->env->dev_malloc ? L->env->dev_malloc(L->env->ctx, arg) : 0;
      memcpy(fp + ci->ret.off, &p, 8);
    } else if (arg && L->env && L->env->dev_free) {
      L->env->dev_free(L->env->ctx, arg);
    }
  }
}

/* cudaGraphSetConditional(handle, value), lane by lane in lane order (the
 * last lane's value wins, as racing calls leave one of them on a GPU).  An
 * unknown handle faults the launch: -1. */
static int do_setcond(worker *W, warp *w, int widx, const sg_insn *I, uint32_t m) {
  launch *L = W->L;
  const sg_call_info *ci = &L->m->calls[I->aux];
  for (uint32_t mm = m; mm;) {
    int l = __builtin_ctz(mm);
    mm &= mm - 1;
    uint8_t *fp = w->fparam + (size_t)l * L->fparam_stride;
    uint64_t handle;
    uint32_t value;
    memcpy(&handle, fp + ci->args[0].off, 8);
    memcpy(&value, fp + ci->args[1].off, 4);
    if (!L->env || !L->env->set_conditional || L->env->set_conditional(L->env->ctx, handle, value)) {
      record_fault(W, widx, l, CUDA_ERROR_LAUNCH_FAILED, handle, I,
                   "cudaGraphSetConditional: not a conditional handle of a graph");
      return -1;
    }
  }
  return 0;
}

/* __assertfail(message, file, line, function, charsize): prints what a GPU
 * prints for a failed assert(). */
static void assert_message(worker *W, warp *w, int widx, int l, const sg_insn *I) {
  launch *L = W->L;
  const sg_call_info *ci = &L->m->calls[I->aux];
  if (ci->nargs < 4) return;
  uint8_t *fp = w->fparam + (size_t)l * L->fparam_stride;
  uint64_t msg, file, func;
  uint32_t line;
  memcpy(&msg, fp + ci->args[0].off, 8);
  memcpy(&file, fp + ci->args[1].off, 8);
  memcpy(&line, fp + ci->args[2].off, 4);
  memcpy(&func, fp + ci->args[3].off, 8);
  char sm[256] = "?", sf[256] = "?", sfn[256] = "?";
  read_ctx rc = {W, w, l};
  uint64_t addrs[3] = {msg, file, func};
  char *dst[3] = {sm, sf, sfn};
  for (int i = 0; i < 3; i++) {
    size_t k = 0;
    char c;
    while (k < 255 && printf_read(&rc, addrs[i] + k, &c, 1) == 0 && c) dst[i][k++] = c;
    if (k) dst[i][k] = 0;
  }
  unsigned t[3];
  tid_of(L, (unsigned)(widx * 32 + l), t);
  char buf[1024];
  int n = snprintf(buf, sizeof buf, "%s:%u: %s: block: [%u,%u,%u], thread: [%u,%u,%u] Assertion `%s` failed.\n", sf, line,
                   sfn, (unsigned)W->ctaid[0], (unsigned)W->ctaid[1], (unsigned)W->ctaid[2], t[0], t[1], t[2], sm);
  if (n < 0) return;
  size_t len = (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1;
  pthread_mutex_lock(&L->lock);
  if (L->env && L->env->print) L->env->print(L->env->ctx, buf, len);
  else { fwrite(buf, 1, len, stdout); fflush(stdout); }
  pthread_mutex_unlock(&L->lock);
}

/* ---------------------------------------------------------------- warp loop */

/* ---------------------------------------------------------------- wmma */

/* Element e (row-major) of a fragment: register index k of the
 * instruction's slot and the half (f16) within it; see decode_wmma.  Every
 * fragment has room for 512 f16 or 256 f32 elements. */
static inline void wmma_place(int nregs, int is_f32, unsigned e, unsigned *lane, unsigned *k, unsigned *half) {
  if (is_f32) { *lane = e / 8; *k = e % 8; *half = 0; return; }
  unsigned slot = e >> 1;
  *lane = slot / (unsigned)nregs;
  *k = slot % (unsigned)nregs;
  *half = e & 1;
}

/* Rows and columns of a matrix of the instruction's shape (A: M x K,
 * B: K x N, C and D: M x N). */
static void wmma_dims(int shape, int matrix, unsigned *rows, unsigned *cols) {
  unsigned M = shape == SG_WMMA_M32N8K16 ? 32 : shape == SG_WMMA_M8N32K16 ? 8 : 16;
  unsigned N = shape == SG_WMMA_M32N8K16 ? 8 : shape == SG_WMMA_M8N32K16 ? 32 : 16, K = 16;
  *rows = matrix == SG_WMMA_B ? K : M;
  *cols = matrix == SG_WMMA_A ? K : N;
}

/* Reads fragment element e (as float) / writes it to every lane that holds
 * it (a fragment with room for more elements than the matrix has repeats
 * it, the copies E elements apart). */
static float wmma_get(uint64_t *R, const uint32_t *regs, int nregs, int is_f32, unsigned e) {
  unsigned lane, k, h;
  wmma_place(nregs, is_f32, e, &lane, &k, &h);
  uint64_t v = R[(size_t)regs[k] * 32 + lane];
  return is_f32 ? f32_of(v) : sg_half_to_float((uint16_t)(v >> (16 * h)));
}
static void wmma_set_bits(uint64_t *R, const uint32_t *regs, int nregs, int is_f32, unsigned nelems, unsigned e, uint32_t bits) {
  unsigned lane, k, h;
  unsigned room = is_f32 ? 32u * (unsigned)nregs : 64u * (unsigned)nregs;
  for (unsigned c = e; c < room; c += nelems) {
    wmma_place(nregs, is_f32, c, &lane, &k, &h);
    uint64_t *p = &R[(size_t)regs[k] * 32 + lane];
    if (is_f32) *p = bits;
    else *p = (*p & ~(0xffffull << (16 * h)) & 0xffffffffull) | ((uint64_t)(bits & 0xffff) << (16 * h));
  }
}

/* One warp's wmma.load / wmma.mma / wmma.store (all 32 lanes, converged).
 * The address and stride are the first lane's (the ISA requires them to be
 * the same in every lane).  Returns 0, or -1 after recording a fault. */
static int wmma_exec(worker *W, warp *w, int widx, const sg_insn *I) {
  const struct sg_ptx_module *mod = W->L->m;
  const uint64_t *K = mod->kpool;
  uint64_t *R = w->R;
  const uint32_t *slot = mod->wregs + I->aux;
  if (I->op == SG_OP_WMMA_MMA) {
    unsigned M, N, Kd, tmp;
    wmma_dims(I->shape, SG_WMMA_A, &M, &Kd);
    wmma_dims(I->shape, SG_WMMA_B, &tmp, &N);
    float a[512], b[512];
    for (unsigned e = 0; e < M * Kd; e++) a[e] = wmma_get(R, slot + SG_WMMA_FRAG, 8, 0, e);
    for (unsigned e = 0; e < Kd * N; e++) b[e] = wmma_get(R, slot + 2 * SG_WMMA_FRAG, 8, 0, e);
    int c32 = I->type2 == SG_T_F32, d32 = I->type == SG_T_F32;
    float d[256];
    for (unsigned i = 0; i < M; i++)
      for (unsigned j = 0; j < N; j++) {
        float acc = wmma_get(R, slot + 3 * SG_WMMA_FRAG, c32 ? 8 : 4, c32, i * N + j);
        for (unsigned k = 0; k < Kd; k++) acc = fmaf(a[i * Kd + k], b[k * N + j], acc);
        d[i * N + j] = acc;
      }
    /* d may share registers with c: write only after every read */
    for (unsigned e = 0; e < M * N; e++)
      wmma_set_bits(R, slot, d32 ? 8 : 4, d32, M * N, e, d32 ? (uint32_t)of_f32(d[e]) : sg_double_to_half(d[e]));
    return 0;
  }
  uint64_t base = (((I->base) & SG_KBIT) ? K + (size_t)(I->base & ~SG_KBIT) * 32 : R + (size_t)I->base * 32)[0] + (uint64_t)I->off;
  uint64_t stride = (((I->s[0]) & SG_KBIT) ? K + (size_t)(I->s[0] & ~SG_KBIT) * 32 : R + (size_t)I->s[0] * 32)[0] & 0xffffffffu;
  int is_f32 = I->type == SG_T_F32;
  unsigned esz = is_f32 ? 4 : 2;
  int col = I->mod2 & 1;
  unsigned rows, cols;
  wmma_dims(I->shape, I->op == SG_OP_WMMA_LOAD ? I->mod : SG_WMMA_C, &rows, &cols);
  for (unsigned e = 0; e < rows * cols; e++) {
    uint64_t r = e / cols, c = e % cols;
    uint64_t addr = base + (col ? c * stride + r : r * stride + c) * esz;
    uint8_t *p = xlate(W, w, 0, I->space, addr, esz);
    if (!p) { mem_fault(W, widx, 0, CUDA_ERROR_ILLEGAL_ADDRESS, addr, esz, I); return -1; }
    if (I->op == SG_OP_WMMA_LOAD) {
      uint32_t bits = 0;
      memcpy(&bits, p, esz);
      wmma_set_bits(R, slot, I->vec, is_f32, rows * cols, e, bits);
    } else {
      unsigned lane, k, h;
      wmma_place(I->vec, is_f32, e, &lane, &k, &h);
      uint64_t v = R[(size_t)slot[k] * 32 + lane] >> (16 * h);
      uint32_t bits = (uint32_t)v;
      memcpy(p, &bits, esz);
    }
  }
  return 0;
}

/* ldmatrix / stmatrix: lane 8*q + r gives the shared-memory address of row
 * r of matrix q (16 bytes, 16-byte aligned); sg_ldmatrix_distribute hands
 * the elements to the lanes, sg_stmatrix_gather collects them.  Returns 0,
 * or -1 after recording a fault (stmatrix then writes nothing). */
static int ldmatrix_exec(worker *W, warp *w, int widx, const sg_insn *I) {
  const uint64_t *K = W->L->m->kpool;
  const uint64_t *Bs = ((I->base) & SG_KBIT) ? K + (size_t)(I->base & ~SG_KBIT) * 32 : w->R + (size_t)I->base * 32;
  int st = I->op == SG_OP_STMATRIX;
  uint16_t rows[4][8][8];
  uint8_t *at[4][8];
  for (unsigned q = 0; q < I->vec; q++)
    for (unsigned r = 0; r < 8; r++) {
      int lane = (int)(q * 8 + r);
      uint64_t addr = Bs[lane] + (uint64_t)I->off;
      if (addr & 15) { mem_fault(W, widx, lane, CUDA_ERROR_MISALIGNED_ADDRESS, addr, 16, I); return -1; }
      uint8_t *p = xlate(W, w, lane, I->space, addr, 16);
      if (!p) { mem_fault(W, widx, lane, CUDA_ERROR_ILLEGAL_ADDRESS, addr, 16, I); return -1; }
      at[q][r] = p;
      if (!st) memcpy(rows[q][r], p, 16);
    }
  if (!st) {
    sg_ldmatrix_distribute(I, rows, w->R);
    return 0;
  }
  sg_stmatrix_gather(I, K, w->R, rows);
  for (unsigned q = 0; q < I->vec; q++)
    for (unsigned r = 0; r < 8; r++) memcpy(at[q][r], rows[q][r], 16);
  return 0;
}

/* Warp instructions a worker runs between looks at other workers' faults
 * and the deadline, and before the warp in hand gives way to the block's
 * others: short enough to stop within milliseconds, long enough that
 * switching warps costs nothing. */
#define SLICE_INSNS (1u << 16)

/* Runs warp w until none of its lanes can run (exited or at a barrier).
 * Returns 0, or -1 after recording a fault. */
static int run_warp(worker *W, warp *w, int widx) {
  launch *L = W->L;
  const struct sg_ptx_module *mod = L->m;
  const sg_insn *code = mod->code;
  const uint64_t *K = mod->kpool;
  uint64_t *R = w->R;
  uint64_t insns = 0, winsns = 0;
  uint32_t pc = w->pc, group = w->group;
  int rc = 0;
  const int hw_fma = have_hw_fma();
  uint32_t until_check = W->slice_left;

#define SYNC_OUT() do { w->pc = pc; w->group = group; } while (0)
#define RESCHED()                                                              \
  do {                                                                         \
    resched(w);                                                                \
    pc = w->pc;                                                                \
    group = w->group;                                                          \
    if (!group) goto out;                                                      \
  } while (0)
/* The group waits at this warp-synchronous instruction (see
 * warp_sync_must_wait); used as `WAIT_WARP_SYNC(); continue;`. */
#define WAIT_WARP_SYNC()                                                       \
  do {                                                                         \
    w->wsync |= group;                                                         \
    set_group_pc(w, group, pc);                                                \
    RESCHED();                                                                 \
  } while (0)
#define FAULT_MEM(code_, addr_, size_) do { mem_fault(W, widx, l, (code_), (addr_), (size_), I); rc = -1; goto out; } while (0)

  while (group) {
    if (__builtin_expect(--until_check == 0, 0)) {
      /* Time slice over: look at other workers' faults and the deadline,
       * then yield so that the block's other warps run too (a warp may be
       * spinning on a flag that another warp of the block sets). */
      until_check = SLICE_INSNS;
      if (atomic_load(&L->failed)) { rc = -1; goto out; }
      if (L->deadline_ns && rgpu_clock_ns() > L->deadline_ns) {
        char what[96];
        snprintf(what, sizeof what, "launch exceeded its %u ms time limit", L->env->timeout_ms);
        record_fault(W, widx, __builtin_ctz(group), CUDA_ERROR_LAUNCH_TIMEOUT, 0, &code[pc], what);
        rc = -1;
        goto out;
      }
      goto out;
    }
    const sg_insn *I = &code[pc];
    uint32_t m = group;
    if (I->guard != SG_NOREG) {
      uint32_t g = PRED(I->guard);
      m &= (I->flags & SG_F_GNEG) ? ~g : g;
    }
    insns += popc32(m);
    winsns++;
    switch (I->op) {
      case SG_OP_NOP: break;
      case SG_OP_MOV: {
        uint64_t *D = DREG(I->d[0]);
        const uint64_t *A = REG(I->s[0]);
        LANES({ D[l] = A[l]; });
        break;
      }
      case SG_OP_MOV_TIMER: {
        uint64_t *D = DREG(I->d[0]);
        int global = I->mod == SG_TIMER_GLOBALTIMER || I->mod == SG_TIMER_GLOBALTIMER_LO || I->mod == SG_TIMER_GLOBALTIMER_HI;
        uint64_t t = global ? rgpu_wall_ns() : rgpu_clock_ns();
        if (I->mod == SG_TIMER_CLOCK || I->mod == SG_TIMER_GLOBALTIMER_LO) t &= 0xffffffffu;
        else if (I->mod == SG_TIMER_CLOCK_HI || I->mod == SG_TIMER_GLOBALTIMER_HI) t >>= 32;
        LANES({ D[l] = t; });
        /* Reading a clock is a yield point too: timed spin-waits (libcu++'s
         * barrier spins 40 us on %globaltimer before its first nanosleep)
         * wait for another warp of the block, which must get to run. */
        if (!m) break;
        pc++;
        if (pc == w->other_min) { set_group_pc(w, group, pc); RESCHED(); }
        goto out;
      }
      case SG_OP_PACK: {
        uint64_t *D = DREG(I->d[0]);
        unsigned bits = (tsize(I->type) * 8) / I->vec;
        uint64_t emask = bits >= 64 ? ~0ull : ((1ull << bits) - 1);
        LANES({
          uint64_t v = 0;
          for (int k = 0; k < I->vec; k++) v |= (REG(I->s[k])[l] & emask) << (bits * k);
          D[l] = v;
        });
        break;
      }
      case SG_OP_UNPACK: {
        const uint64_t *A = REG(I->s[0]);
        unsigned bits = (tsize(I->type) * 8) / I->vec;
        uint64_t emask = bits >= 64 ? ~0ull : ((1ull << bits) - 1);
        for (int k = 0; k < I->vec; k++) {
          if (I->d[k] == SG_NOREG) continue;
          uint64_t *D = R + (size_t)I->d[k] * 32;
          LANES({ D[l] = (A[l] >> (bits * k)) & emask; });
        }
        break;
      }
      case SG_OP_ADD:
      case SG_OP_SUB:
      case SG_OP_MUL:
      case SG_OP_MAD:
      case SG_OP_FMA:
      case SG_OP_DIV:
      case SG_OP_REM:
      case SG_OP_MIN:
      case SG_OP_MAX:
      case SG_OP_NEG:
      case SG_OP_ABS:
      case SG_OP_COPYSIGN:
      case SG_OP_RCP:
      case SG_OP_SQRT:
      case SG_OP_RSQRT:
      case SG_OP_EX2:
      case SG_OP_LG2:
      case SG_OP_SIN:
      case SG_OP_COS:
      case SG_OP_TANH: {
        uint64_t *D = DREG(I->d[0]);
        const uint64_t *A = REG(I->s[0]);
        const uint64_t *Bv = I->s[1] != SG_NOREG ? REG(I->s[1]) : NULL;
        const uint64_t *C = I->s[2] != SG_NOREG ? REG(I->s[2]) : NULL;
        int t = I->type;
        /* hot integer forms first */
        if (I->op == SG_OP_ADD && !(I->flags & SG_F_SAT)) {
          if (t == SG_T_S32 || t == SG_T_U32 || t == SG_T_B32) { LANES({ D[l] = (uint32_t)(A[l] + Bv[l]); }); break; }
          if (t == SG_T_S64 || t == SG_T_U64 || t == SG_T_B64) { LANES({ D[l] = A[l] + Bv[l]; }); break; }
        }
        if (I->op == SG_OP_MAD && I->mod2 == SG_MUL_LO && (t == SG_T_S32 || t == SG_T_U32)) {
          LANES({ D[l] = (uint32_t)((uint32_t)A[l] * (uint32_t)Bv[l] + (uint32_t)C[l]); });
          break;
        }
        if (t == SG_T_F32) {
          if (!(I->flags & (SG_F_FTZ | SG_F_SAT)) && !directed(I->mod)) {
            switch (I->op) {
              case SG_OP_FMA:
              case SG_OP_MAD:
                if (m == FULL && hw_fma) { fma32_full_hw(D, A, Bv, C); goto f32_done; }
                LANES({ D[l] = of_f32(fmaf(f32_of(A[l]), f32_of(Bv[l]), f32_of(C[l]))); });
                goto f32_done;
              case SG_OP_ADD: LANES({ D[l] = of_f32(f32_of(A[l]) + f32_of(Bv[l])); }); goto f32_done;
              case SG_OP_SUB: LANES({ D[l] = of_f32(f32_of(A[l]) - f32_of(Bv[l])); }); goto f32_done;
              case SG_OP_MUL: LANES({ D[l] = of_f32(f32_of(A[l]) * f32_of(Bv[l])); }); goto f32_done;
              default: break;
            }
          }
          f32_arith(I, m, D, A, Bv, C);
        f32_done:
          break;
        }
        if (t == SG_T_F64) { f64_arith(I, m, D, A, Bv, C); break; }
        if (t == SG_T_U16X2 || t == SG_T_S16X2) {
          int sg16 = t == SG_T_S16X2, op = I->op;
          LANES({
            uint32_t r = 0;
            for (int h = 0; h < 2; h++) {
              uint32_t ua = (uint32_t)(A[l] >> (16 * h)) & 0xffff, ub = (uint32_t)(Bv[l] >> (16 * h)) & 0xffff, v;
              int32_t sa = (int16_t)ua, sb = (int16_t)ub;
              switch (op) {
                case SG_OP_ADD: v = ua + ub; break;
                case SG_OP_SUB: v = ua - ub; break;
                case SG_OP_MIN: v = sg16 ? (uint32_t)(sa < sb ? sa : sb) : (ua < ub ? ua : ub); break;
                default: v = sg16 ? (uint32_t)(sa > sb ? sa : sb) : (ua > ub ? ua : ub); break;
              }
              r |= (v & 0xffff) << (16 * h);
            }
            D[l] = r;
          });
          break;
        }
        if (t >= SG_T_F16) { half_arith(I, m, D, A, Bv, C); break; }
        if (!Bv) Bv = A;
        switch (I->op) {
          case SG_OP_ADD:
            if (I->flags & SG_F_SAT) {
              if (t == SG_T_S32) {
                LANES({ int64_t r = (int64_t)(int32_t)A[l] + (int32_t)Bv[l]; D[l] = (uint32_t)(int32_t)(r > INT32_MAX ? INT32_MAX : r < INT32_MIN ? INT32_MIN : r); });
                break;
              }
            }
            switch (t) { IALL((UT_)a + (UT_)b, a + b) default: break; }
            break;
          case SG_OP_SUB:
            if (I->flags & SG_F_SAT) {
              if (t == SG_T_S32) {
                LANES({ int64_t r = (int64_t)(int32_t)A[l] - (int32_t)Bv[l]; D[l] = (uint32_t)(int32_t)(r > INT32_MAX ? INT32_MAX : r < INT32_MIN ? INT32_MIN : r); });
                break;
              }
            }
            switch (t) { IALL((UT_)a - (UT_)b, a - b) default: break; }
            break;
          case SG_OP_MUL:
          case SG_OP_MAD: {
            int madd = I->op == SG_OP_MAD;
            unsigned sz = tsize(t);
            int is_s = is_signed_t(t);
            if (I->mod2 == SG_MUL_WIDE) {
              LANES({
                uint64_t r = is_s ? (uint64_t)(sext(A[l], t) * sext(Bv[l], t)) : (uint64_t)sext(A[l], t) * (uint64_t)sext(Bv[l], t);
                if (madd) r += C[l];
                D[l] = trunc_t(r, sz * 2);
              });
            } else if (I->mod2 == SG_MUL_HI) {
              LANES({
                uint64_t r;
                if (sz == 8) {
                  if (is_s) r = (uint64_t)(((__int128)(int64_t)A[l] * (__int128)(int64_t)Bv[l]) >> 64);
                  else r = (uint64_t)(((unsigned __int128)A[l] * (unsigned __int128)Bv[l]) >> 64);
                } else {
                  int64_t p = is_s ? sext(A[l], t) * sext(Bv[l], t) : (int64_t)((uint64_t)sext(A[l], t) * (uint64_t)sext(Bv[l], t));
                  r = (uint64_t)(p >> (sz * 8));
                }
                if (madd) r += C[l];
                D[l] = trunc_t(r, sz);
              });
            } else {
              LANES({
                uint64_t r = A[l] * Bv[l];
                if (madd) r += C[l];
                D[l] = trunc_t(r, sz);
              });
            }
            break;
          }
          case SG_OP_DIV:
            /* Division by zero is unspecified in PTX; we return all ones,
             * which is what NVIDIA GPUs produce for unsigned division. */
            switch (t) {
              IALL(b == 0 ? (CT_)-1 : (a == (CT_)((UT_)1 << (sizeof(CT_) * 8 - 1)) && b == -1) ? a : a / b, b == 0 ? (CT_)~(CT_)0 : a / b)
              default: break;
            }
            break;
          case SG_OP_REM:
            switch (t) {
              IALL(b == 0 ? a : (b == -1 ? 0 : a % b), b == 0 ? a : a % b)
              default: break;
            }
            break;
          case SG_OP_MIN: switch (t) { IALL(a < b ? a : b, a < b ? a : b) default: break; } break;
          case SG_OP_MAX: switch (t) { IALL(a > b ? a : b, a > b ? a : b) default: break; } break;
          case SG_OP_NEG: switch (t) { IALL((UT_)0 - (UT_)a, (UT_)0 - (UT_)a) default: break; } break;
          case SG_OP_ABS: switch (t) { IALL(a < 0 ? (UT_)0 - (UT_)a : (UT_)a, a) default: break; } break;
          default:
            record_fault(W, widx, 0, CUDA_ERROR_ILLEGAL_INSTRUCTION, 0, I, "integer form of a float-only instruction");
            rc = -1;
            goto out;
        }
        break;
      }
      case SG_OP_AND:
      case SG_OP_OR:
      case SG_OP_XOR:
      case SG_OP_NOT:
      case SG_OP_CNOT: {
        uint64_t *D = DREG(I->d[0]);
        const uint64_t *A = REG(I->s[0]);
        const uint64_t *Bv = I->s[1] != SG_NOREG ? REG(I->s[1]) : A;
        unsigned sz = tsize(I->type);
        switch (I->op) {
          case SG_OP_AND: LANES({ D[l] = A[l] & Bv[l]; }); break;
          case SG_OP_OR: LANES({ D[l] = A[l] | Bv[l]; }); break;
          case SG_OP_XOR: LANES({ D[l] = A[l] ^ Bv[l]; }); break;
          case SG_OP_NOT: LANES({ D[l] = trunc_t(~A[l], sz); }); break;
          default: LANES({ D[l] = trunc_t(A[l], sz) == 0; }); break;
        }
        break;
      }
      case SG_OP_SHL:
      case SG_OP_SHR: {
        uint64_t *D = DREG(I->d[0]);
        const uint64_t *A = REG(I->s[0]);
        const uint64_t *Bv = REG(I->s[1]);
        int t = I->type;
        unsigned sz = tsize(t), bits = sz * 8;
        if (I->op == SG_OP_SHL) {
          if (sz == 8) { LANES({ uint32_t s = (uint32_t)Bv[l]; D[l] = s >= 64 ? 0 : A[l] << s; }); }
          else { LANES({ uint32_t s = (uint32_t)Bv[l]; D[l] = s >= bits ? 0 : trunc_t(A[l] << s, sz); }); }
        } else if (is_signed_t(t)) {
          LANES({ uint32_t s = (uint32_t)Bv[l]; if (s > bits - 1) s = bits - 1; D[l] = trunc_t((uint64_t)(sext(A[l], t) >> s), sz); });
        } else {
          LANES({ uint32_t s = (uint32_t)Bv[l]; D[l] = s >= bits ? 0 : trunc_t(A[l], sz) >> s; });
        }
        break;
      }
      case SG_OP_POPC:
      case SG_OP_CLZ:
      case SG_OP_BREV:
      case SG_OP_BFIND: {
        uint64_t *D = DREG(I->d[0]);
        const uint64_t *A = REG(I->s[0]);
        unsigned sz = tsize(I->type);
        int t = I->type;
        switch (I->op) {
          case SG_OP_POPC: LANES({ D[l] = (uint32_t)__builtin_popcountll(trunc_t(A[l], sz)); }); break;
          case SG_OP_CLZ:
            if (sz == 8) { LANES({ D[l] = A[l] ? (uint32_t)__builtin_clzll(A[l]) : 64; }); }
            else { LANES({ uint32_t v = (uint32_t)A[l]; D[l] = v ? (uint32_t)__builtin_clz(v) : 32; }); }
            break;
          case SG_OP_BREV:
            if (sz == 8) { LANES({ D[l] = ((uint64_t)brev32((uint32_t)A[l]) << 32) | brev32((uint32_t)(A[l] >> 32)); }); }
            else { LANES({ D[l] = brev32((uint32_t)A[l]); }); }
            break;
          default: {
            int shiftamt = I->mod2;
            unsigned bits = sz * 8;
            LANES({
              uint64_t v = trunc_t(A[l], sz);
              if (is_signed_t(t) && (sext(A[l], t) < 0)) v = trunc_t(~v, sz);
              uint32_t r = 0xffffffffu;
              if (v) { r = 63u - (uint32_t)__builtin_clzll(v); if (shiftamt) r = bits - 1 - r; }
              D[l] = r;
            });
          }
        }
        break;
      }
      case SG_OP_BFE: {
        uint64_t *D = DREG(I->d[0]);
        const uint64_t *A = REG(I->s[0]), *Bv = REG(I->s[1]), *C = REG(I->s[2]);
        int t = I->type;
        unsigned sz = tsize(t), bits = sz * 8;
        int is_s = is_signed_t(t);
        LANES({
          uint32_t pos = (uint32_t)Bv[l] & 0xff, len = (uint32_t)C[l] & 0xff;
          uint64_t a = trunc_t(A[l], sz);
          uint64_t r;
          int sbit;
          if (is_s) {
            uint32_t top = (len == 0) ? 0 : (pos + len - 1 >= bits ? bits - 1 : pos + len - 1);
            sbit = len == 0 ? 0 : (int)((a >> top) & 1);
          } else sbit = 0;
          r = 0;
          for (uint32_t i = 0; i < bits; i++) {
            uint64_t bit;
            if (i < len && pos + i <= bits - 1) bit = (a >> (pos + i)) & 1;
            else bit = (uint64_t)sbit;
            r |= bit << i;
          }
          D[l] = trunc_t(r, sz);
        });
        break;
      }
      case SG_OP_BFI: {
        uint64_t *D = DREG(I->d[0]);
        const uint64_t *A = REG(I->s[0]), *Bv = REG(I->s[1]), *C = REG(I->s[2]), *E = REG(I->s[3]);
        unsigned sz = tsize(I->type), bits = sz * 8;
        LANES({
          uint32_t pos = (uint32_t)C[l] & 0xff, len = (uint32_t)E[l] & 0xff;
          uint64_t f = A[l], r = trunc_t(Bv[l], sz);
          for (uint32_t i = 0; i < len && pos + i < bits; i++) {
            uint64_t bit = (f >> i) & 1;
            r = (r & ~(1ull << (pos + i))) | (bit << (pos + i));
          }
          D[l] = r;
        });
        break;
      }
      case SG_OP_PRMT: {
        uint64_t *D = DREG(I->d[0]);
        const uint64_t *A = REG(I->s[0]), *Bv = REG(I->s[1]), *C = REG(I->s[2]);
        int mode = I->mod;
        LANES({ D[l] = prmt((uint32_t)A[l], (uint32_t)Bv[l], (uint32_t)C[l], mode); });
        break;
      }
      case SG_OP_SAD: {
        uint64_t *D = DREG(I->d[0]);
        const uint64_t *A = REG(I->s[0]), *Bv = REG(I->s[1]), *C = REG(I->s[2]);
        int t = I->type;
        unsigned sz = tsize(t);
        LANES({
          int64_t a = sext(A[l], t), b = sext(Bv[l], t);
          uint64_t d = is_signed_t(t) ? (uint64_t)(a > b ? a - b : b - a) : ((uint64_t)a > (uint64_t)b ? (uint64_t)a - (uint64_t)b : (uint64_t)b - (uint64_t)a);
          D[l] = trunc_t(d + C[l], sz);
        });
        break;
      }
      case SG_OP_TESTP: {
        const uint64_t *A = REG(I->s[0]);
        uint32_t res = 0;
        int kind = I->mod;
        LANES({
          double v = I->type == SG_T_F32 ? (double)f32_of(A[l]) : f64_of(A[l]);
          int c = fpclassify(I->type == SG_T_F32 ? (double)f32_of(A[l]) : v);
          if (I->type == SG_T_F32) c = fpclassify(f32_of(A[l]));
          int r;
          switch (kind) {
            case 1: r = isfinite(v); break;
            case 2: r = isinf(v); break;
            case 3: r = !isnan(v); break;
            case 4: r = isnan(v); break;
            case 5: r = c == FP_NORMAL; break;
            default: r = c == FP_SUBNORMAL; break;
          }
          res |= (uint32_t)r << l;
        });
        PWRITE(I->d[0], res);
        break;
      }
      case SG_OP_PAND:
      case SG_OP_POR:
      case SG_OP_PXOR:
      case SG_OP_PNOT:
      case SG_OP_PMOV: {
        uint32_t a = PRED(I->s[0]);
        if (I->flags & SG_F_ANEG) a = ~a;
        uint32_t b = I->s[1] != SG_NOREG ? PRED(I->s[1]) : 0;
        if (I->flags & SG_F_BNEG) b = ~b;
        uint32_t r;
        switch (I->op) {
          case SG_OP_PAND: r = a & b; break;
          case SG_OP_POR: r = a | b; break;
          case SG_OP_PXOR: r = a ^ b; break;
          case SG_OP_PNOT: r = ~a; break;
          default: r = a; break;
        }
        PWRITE(I->d[0], r);
        break;
      }
      case SG_OP_CVT: {
        uint64_t *D = DREG(I->d[0]);
        const uint64_t *A = REG(I->s[0]);
        int dt = I->type, st = I->type2;
        if (!(I->flags & (SG_F_SAT | SG_F_FTZ))) {
          if (dt == SG_T_S64 && st == SG_T_S32) { LANES({ D[l] = (uint64_t)(int64_t)(int32_t)A[l]; }); break; }
          if ((dt == SG_T_U64 || dt == SG_T_S64) && st == SG_T_U32) { LANES({ D[l] = (uint32_t)A[l]; }); break; }
          if (dt == SG_T_F32 && st == SG_T_S32 && I->mod == SG_RND_RN) { LANES({ D[l] = of_f32((float)(int32_t)A[l]); }); break; }
        }
        LANES({ D[l] = cvt_one(I, A[l]); });
        break;
      }
      case SG_OP_CVTA: {
        uint64_t *D = DREG(I->d[0]);
        const uint64_t *A = REG(I->s[0]);
        int to_generic = I->mod == SG_CVTA_TO_GENERIC;
        switch (I->space) {
          case SG_SP_SHARED: {
            uint64_t gb = (uint64_t)(uintptr_t)W->shared;
            if (to_generic) { LANES({ D[l] = A[l] + gb; }); }
            else { LANES({ D[l] = A[l] - gb; }); }
            if (I->type == SG_T_U32 || I->type == SG_T_B32) { LANES({ D[l] = (uint32_t)D[l]; }); }
            break;
          }
          case SG_SP_LOCAL: {
            LANES({
              uint64_t gb = (uint64_t)(uintptr_t)(w->local + (size_t)l * L->local_stride);
              D[l] = to_generic ? A[l] + gb : A[l] - gb;
            });
            if (I->type == SG_T_U32 || I->type == SG_T_B32) { LANES({ D[l] = (uint32_t)D[l]; }); }
            break;
          }
          default: LANES({ D[l] = A[l]; }); break; /* global and const: identity */
        }
        break;
      }
      case SG_OP_SELP: {
        uint64_t *D = DREG(I->d[0]);
        const uint64_t *A = REG(I->s[0]), *Bv = REG(I->s[1]);
        uint32_t p = PRED(I->s[2]);
        if (I->flags & SG_F_CNEG) p = ~p;
        LANES({ D[l] = ((p >> l) & 1) ? A[l] : Bv[l]; });
        break;
      }
      case SG_OP_SETP: {
        const uint64_t *A = REG(I->s[0]), *Bv = REG(I->s[1]);
        uint32_t r = compare_lanes(I, m, A, Bv);
        uint32_t q = ~r;
        if (I->mod2) {
          uint32_t c = PRED(I->s[2]);
          if (I->flags & SG_F_CNEG) c = ~c;
          switch (I->mod2) {
            case SG_BOOL_AND: r &= c; q &= c; break;
            case SG_BOOL_OR: r |= c; q |= c; break;
            default: r ^= c; q ^= c; break;
          }
        }
        PWRITE(I->d[0], r);
        PWRITE(I->d[1], q);
        break;
      }
      case SG_OP_SET: {
        uint64_t *D = DREG(I->d[0]);
        const uint64_t *A = REG(I->s[0]), *Bv = REG(I->s[1]);
        uint32_t r = compare_lanes(I, m, A, Bv);
        if (I->mod2) {
          uint32_t c = PRED(I->s[2]);
          if (I->flags & SG_F_CNEG) c = ~c;
          r = I->mod2 == SG_BOOL_AND ? r & c : I->mod2 == SG_BOOL_OR ? r | c : r ^ c;
        }
        int ft = I->type2 == SG_T_F32;
        LANES({ int b = (r >> l) & 1; D[l] = ft ? (b ? 0x3f800000u : 0) : (b ? 0xffffffffu : 0); });
        break;
      }
      case SG_OP_LD: {
        const uint64_t *Bs = REG(I->base);
        unsigned sz = tsize(I->type);
        int sg = is_signed_t(I->type);
        int64_t off = I->off;
        if (I->vec == 1) {
          uint64_t *D = DREG(I->d[0]);
          if (I->space == SG_SP_SHARED && sz == 4) {
            uint64_t lim = W->shared_size >= 4 ? W->shared_size - 4 : 0;
            const uint8_t *sh = W->shared;
            LANES({
              uint64_t a = Bs[l] + (uint64_t)off;
              if ((a & 3) || a > lim || W->shared_size < 4) {
                FAULT_MEM((a & 3) ? CUDA_ERROR_MISALIGNED_ADDRESS : CUDA_ERROR_ILLEGAL_ADDRESS, a, sz);
              }
              uint32_t v;
              memcpy(&v, sh + a, 4);
              D[l] = sg ? (uint64_t)(int64_t)(int32_t)v : v;
            });
          } else if (I->space == SG_SP_GLOBAL) {
            LANES({
              uint64_t a = Bs[l] + (uint64_t)off;
              if (a & (sz - 1)) FAULT_MEM(CUDA_ERROR_MISALIGNED_ADDRESS, a, sz);
              uint8_t *p = global_ptr(W, a, sz);
              if (!p) FAULT_MEM(CUDA_ERROR_ILLEGAL_ADDRESS, a, sz);
              D[l] = load_sized(p, sz, sg);
            });
          } else {
            LANES({
              uint64_t a = Bs[l] + (uint64_t)off;
              if (a & (sz - 1)) FAULT_MEM(CUDA_ERROR_MISALIGNED_ADDRESS, a, sz);
              uint8_t *p = xlate(W, w, l, I->space, a, sz);
              if (!p) FAULT_MEM(CUDA_ERROR_ILLEGAL_ADDRESS, a, sz);
              D[l] = load_sized(p, sz, sg);
            });
          }
        } else {
          unsigned total = sz * I->vec;
          LANES({
            uint64_t a = Bs[l] + (uint64_t)off;
            if (a & (total - 1)) FAULT_MEM(CUDA_ERROR_MISALIGNED_ADDRESS, a, total);
            uint8_t *p = xlate(W, w, l, I->space, a, total);
            if (!p) FAULT_MEM(CUDA_ERROR_ILLEGAL_ADDRESS, a, total);
            for (int k = 0; k < I->vec; k++)
              if (I->d[k] != SG_NOREG) R[(size_t)I->d[k] * 32 + l] = load_sized(p + k * sz, sz, sg);
          });
        }
        break;
      }
      case SG_OP_ST: {
        const uint64_t *Bs = REG(I->base);
        unsigned sz = tsize(I->type);
        int64_t off = I->off;
        if (I->vec == 1) {
          const uint64_t *A = REG(I->s[0]);
          LANES({
            uint64_t a = Bs[l] + (uint64_t)off;
            if (a & (sz - 1)) FAULT_MEM(CUDA_ERROR_MISALIGNED_ADDRESS, a, sz);
            uint8_t *p = I->space == SG_SP_GLOBAL ? global_ptr(W, a, sz) : xlate(W, w, l, I->space, a, sz);
            if (!p) FAULT_MEM(CUDA_ERROR_ILLEGAL_ADDRESS, a, sz);
            store_sized(p, sz, A[l]);
          });
        } else {
          unsigned total = sz * I->vec;
          LANES({
            uint64_t a = Bs[l] + (uint64_t)off;
            if (a & (total - 1)) FAULT_MEM(CUDA_ERROR_MISALIGNED_ADDRESS, a, total);
            uint8_t *p = xlate(W, w, l, I->space, a, total);
            if (!p) FAULT_MEM(CUDA_ERROR_ILLEGAL_ADDRESS, a, total);
            for (int k = 0; k < I->vec; k++) store_sized(p + k * sz, sz, REG(I->s[k])[l]);
          });
        }
        break;
      }
      case SG_OP_LD_KPARAM: {
        unsigned sz = tsize(I->type);
        int sg = is_signed_t(I->type);
        uint64_t off = (uint64_t)I->off;
        unsigned total = sz * I->vec;
        if (off > L->cfg.params_size || L->cfg.params_size - off < total) {
          record_fault(W, widx, 0, CUDA_ERROR_INVALID_VALUE, off, I, "kernel parameter read past the parameter buffer");
          rc = -1;
          goto out;
        }
        for (int k = 0; k < I->vec; k++) {
          if (I->d[k] == SG_NOREG) continue;
          uint64_t v = load_sized(L->params + off + k * sz, sz, sg);
          uint64_t *D = R + (size_t)I->d[k] * 32;
          LANES({ D[l] = v; });
        }
        break;
      }
      case SG_OP_ATOM: {
        const uint64_t *Bs = REG(I->base);
        const uint64_t *A = REG(I->s[0]);
        const uint64_t *C = I->s[1] != SG_NOREG ? REG(I->s[1]) : A;
        uint64_t *D = DREG(I->d[0]);
        unsigned sz = tsize(I->type);
        LANES({
          uint64_t a = Bs[l] + (uint64_t)I->off;
          if (a & (sz - 1)) FAULT_MEM(CUDA_ERROR_MISALIGNED_ADDRESS, a, sz);
          uint8_t *p = xlate(W, w, l, I->space, a, sz);
          if (!p) FAULT_MEM(CUDA_ERROR_ILLEGAL_ADDRESS, a, sz);
          uint64_t old = 0;
          atomic_op(I, p, A[l], C[l], &old);
          D[l] = old;
        });
        break;
      }
      case SG_OP_BRA: {
        if (!m) break;
        uint32_t target = I->aux;
        if (m == group) {
          pc = target;
          if (pc >= w->other_min) { set_group_pc(w, group, pc); RESCHED(); }
          continue;
        }
        set_group_pc(w, m, target);
        set_group_pc(w, group & ~m, pc + 1);
        RESCHED();
        continue;
      }
      case SG_OP_CALL: {
        if (!m) break;
        const sg_call_info *ci = &mod->calls[I->aux];
        const struct sg_ptx_kernel *cf = mod->funcs[ci->func];
        for (uint32_t mm = m; mm;) {
          int l = __builtin_ctz(mm);
          mm &= mm - 1;
          if (w->sp[l] >= L->stack_depth) {
            record_fault(W, widx, l, CUDA_ERROR_LAUNCH_FAILED, 0, I, "call stack overflow");
            rc = -1;
            goto out;
          }
          uint8_t *fp = w->fparam + (size_t)l * L->fparam_stride;
          for (int a = 0; a < ci->nargs; a++) memmove(fp + cf->fpbase + cf->params[a].off, fp + ci->args[a].off, ci->args[a].size);
          w->stack[(size_t)l * L->stack_depth + w->sp[l]++] = (uint64_t)(pc + 1) | ((uint64_t)I->aux << 32);
        }
        if (m == group) {
          pc = cf->entry_pc;
          if (pc >= w->other_min) { set_group_pc(w, group, pc); RESCHED(); }
          continue;
        }
        set_group_pc(w, m, cf->entry_pc);
        set_group_pc(w, group & ~m, pc + 1);
        RESCHED();
        continue;
      }
      case SG_OP_RET:
      case SG_OP_EXIT: {
        if (!m) break;
        uint32_t exited = 0;
        set_group_pc(w, group & ~m, pc + 1);
        for (uint32_t mm = m; mm;) {
          int l = __builtin_ctz(mm);
          mm &= mm - 1;
          if (I->op == SG_OP_EXIT || w->sp[l] == 0) { exited |= 1u << l; continue; }
          uint64_t e = w->stack[(size_t)l * L->stack_depth + --w->sp[l]];
          const sg_call_info *ci = &mod->calls[e >> 32];
          if (ci->has_ret) {
            const struct sg_ptx_kernel *cf = mod->funcs[ci->func];
            uint8_t *fp = w->fparam + (size_t)l * L->fparam_stride;
            memmove(fp + ci->ret.off, fp + cf->fpbase + cf->ret.off, ci->ret.size);
          }
          w->lane_pc[l] = (uint32_t)e;
        }
        w->live &= ~exited;
        RESCHED();
        continue;
      }
      case SG_OP_BAR:
      case SG_OP_BAR_RED: {
        if (!m) break;
        set_group_pc(w, group, pc + 1);
        if (I->op == SG_OP_BAR_RED) {
          uint32_t p = PRED(I->s[0]);
          if (I->flags & SG_F_CNEG) p = ~p;
          p &= m;
          W->red_popc += (uint32_t)__builtin_popcount(p);
          if (p != m) W->red_and = 0;
          if (p) W->red_or = 1;
          w->red_insn = I;
          w->red_mask |= m;
        }
        w->blocked |= m;
        RESCHED();
        continue;
      }
      case SG_OP_SHFL: {
        if (warp_sync_must_wait(w, group, (uint32_t)REG(I->s[3])[__builtin_ctz(group)])) { WAIT_WARP_SYNC(); continue; }
        const uint64_t *A = REG(I->s[0]), *Bv = REG(I->s[1]), *C = REG(I->s[2]);
        uint64_t tmp[32];
        uint32_t pv = 0;
        int mode = I->mod;
        LANES({
          int lane = l;
          uint32_t bval = (uint32_t)Bv[l] & 0x1f, cval = (uint32_t)C[l] & 0x1f, segmask = ((uint32_t)C[l] >> 8) & 0x1f;
          int maxlane = (int)((lane & segmask) | (cval & ~segmask));
          int minlane = (int)(lane & segmask);
          int j, ok;
          switch (mode) {
            case SG_SHFL_UP: j = lane - (int)bval; ok = j >= maxlane; break;
            case SG_SHFL_DOWN: j = lane + (int)bval; ok = j <= maxlane; break;
            case SG_SHFL_BFLY: j = lane ^ (int)bval; ok = j <= maxlane; break;
            default: j = minlane | (int)(bval & ~segmask); ok = j <= maxlane; break;
          }
          if (!ok) j = lane;
          /* A source lane that does not execute this shfl (inactive,
           * exited, guarded off, or beyond the block's last thread in a
           * partial warp) gives 0, as the hardware does, never its stale
           * register: the ISA leaves the value undefined, and reductions
           * such as the samples' reduce7 (second stage under a ballot mask,
           * blocks smaller than a warp) add it in. */
          tmp[l] = (m >> j) & 1 ? (uint32_t)A[j] : 0;
          pv |= (uint32_t)ok << l;
        });
        uint64_t *D = DREG(I->d[0]);
        LANES({ D[l] = tmp[l]; });
        PWRITE(I->d[1], pv);
        break;
      }
      case SG_OP_VOTE: {
        if (warp_sync_must_wait(w, group, (uint32_t)REG(I->s[1])[__builtin_ctz(group)])) { WAIT_WARP_SYNC(); continue; }
        uint32_t p = PRED(I->s[0]);
        if (I->flags & SG_F_CNEG) p = ~p;
        const uint64_t *Mk = REG(I->s[1]);
        uint32_t member = m;
        if (m) member &= (uint32_t)Mk[__builtin_ctz(m)];
        uint32_t b = p & member;
        switch (I->mod) {
          case SG_VOTE_BALLOT: { uint64_t *D = DREG(I->d[0]); LANES({ D[l] = b; }); break; }
          case SG_VOTE_ALL: PWRITE(I->d[0], b == member ? FULL : 0u); break;
          case SG_VOTE_ANY: PWRITE(I->d[0], b ? FULL : 0u); break;
          default: PWRITE(I->d[0], (b == member || b == 0) ? FULL : 0u); break;
        }
        break;
      }
      case SG_OP_MATCH: {
        if (warp_sync_must_wait(w, group, (uint32_t)REG(I->s[1])[__builtin_ctz(group)])) { WAIT_WARP_SYNC(); continue; }
        const uint64_t *A = REG(I->s[0]);
        unsigned sz = tsize(I->type);
        uint64_t *D = DREG(I->d[0]);
        uint32_t member = m;
        if (m) member &= (uint32_t)REG(I->s[1])[__builtin_ctz(m)];
        uint64_t res[32];
        uint32_t allp = 0;
        int all_eq = 1;
        LANES({
          uint32_t eq = 0;
          for (uint32_t mm = member; mm;) { int j = __builtin_ctz(mm); mm &= mm - 1; if (trunc_t(A[j], sz) == trunc_t(A[l], sz)) eq |= 1u << j; }
          res[l] = eq;
          if (eq != member) all_eq = 0;
        });
        if (I->mod == SG_MATCH_ANY) { LANES({ D[l] = res[l]; }); }
        else { LANES({ D[l] = all_eq ? member : 0; }); allp = all_eq ? FULL : 0; PWRITE(I->d[1], allp); }
        break;
      }
      case SG_OP_REDUX: {
        if (warp_sync_must_wait(w, group, (uint32_t)REG(I->s[1])[__builtin_ctz(group)])) { WAIT_WARP_SYNC(); continue; }
        const uint64_t *A = REG(I->s[0]);
        uint32_t member = m;
        if (m) member &= (uint32_t)REG(I->s[1])[__builtin_ctz(m)];
        int sg = I->type == SG_T_S32;
        uint32_t acc = I->mod == SG_ATOM_AND ? 0xffffffffu : I->mod == SG_ATOM_MIN ? (sg ? 0x7fffffffu : 0xffffffffu)
                     : I->mod == SG_ATOM_MAX ? (sg ? 0x80000000u : 0) : 0;
        for (uint32_t mm = member; mm;) {
          int j = __builtin_ctz(mm);
          mm &= mm - 1;
          uint32_t v = (uint32_t)A[j];
          switch (I->mod) {
            case SG_ATOM_ADD: acc += v; break;
            case SG_ATOM_AND: acc &= v; break;
            case SG_ATOM_OR: acc |= v; break;
            case SG_ATOM_XOR: acc ^= v; break;
            case SG_ATOM_MIN: acc = sg ? (uint32_t)((int32_t)v < (int32_t)acc ? v : acc) : (v < acc ? v : acc); break;
            default: acc = sg ? (uint32_t)((int32_t)v > (int32_t)acc ? v : acc) : (v > acc ? v : acc); break;
          }
        }
        uint64_t *D = DREG(I->d[0]);
        LANES({ D[l] = acc; });
        break;
      }
      case SG_OP_WMMA_LOAD:
      case SG_OP_WMMA_MMA:
      case SG_OP_WMMA_STORE:
        if (warp_sync_must_wait(w, group, FULL)) { WAIT_WARP_SYNC(); continue; }
        if (m != FULL) {
          record_fault(W, widx, __builtin_ctz(group), CUDA_ERROR_ILLEGAL_INSTRUCTION, 0, I,
                       "wmma needs all 32 lanes of the warp (full warps, converged, unpredicated)");
          rc = -1;
          goto out;
        }
        if (wmma_exec(W, w, widx, I)) { rc = -1; goto out; }
        break;
      case SG_OP_CP_ASYNC: {
        /* copied at once: see decode_cp_async */
        const uint64_t *Dst = REG(I->base), *Src = REG(I->s[0]), *Soff = REG(I->s[2]);
        const uint64_t *Ssz = I->s[1] != SG_NOREG ? REG(I->s[1]) : NULL;
        uint32_t ignore = I->s[3] != SG_NOREG ? PRED(I->s[3]) : 0;
        if (I->flags & SG_F_CNEG) ignore = ~ignore;
        unsigned sz = I->mod;
        LANES({
          uint64_t da = Dst[l] + (uint64_t)I->off, sa = Src[l] + Soff[l];
          uint64_t n = (ignore >> l) & 1 ? 0 : Ssz ? (uint32_t)Ssz[l] : sz;
          if (n > sz) n = sz; /* src-size above cp-size is undefined: copy cp-size */
          if ((da | sa) & (sz - 1)) FAULT_MEM(CUDA_ERROR_MISALIGNED_ADDRESS, (da & (sz - 1)) ? da : sa, sz);
          uint8_t *dp = xlate(W, w, l, SG_SP_SHARED, da, sz);
          if (!dp) FAULT_MEM(CUDA_ERROR_ILLEGAL_ADDRESS, da, sz);
          const uint8_t *sp = n ? xlate(W, w, l, SG_SP_GLOBAL, sa, (unsigned)n) : NULL;
          if (n && !sp) FAULT_MEM(CUDA_ERROR_ILLEGAL_ADDRESS, sa, (unsigned)n);
          if (n) memmove(dp, sp, n);
          memset(dp + n, 0, sz - n); /* the bytes past src-size are zero-filled */
        });
        break;
      }
      case SG_OP_TEX:
      case SG_OP_TLD4:
      case SG_OP_TXQ:
      case SG_OP_SULD:
      case SG_OP_SUST:
      case SG_OP_SUQ: {
        int fl = 0;
        uint64_t fa = 0;
        char what[160];
        int code_ = sg_tex_exec(I, m, K, R, L->env, &fl, &fa, what, sizeof what);
        if (code_) {
          record_fault(W, widx, fl, code_, fa, I, what);
          rc = -1;
          goto out;
        }
        break;
      }
      case SG_OP_MMA:
      case SG_OP_LDMATRIX:
      case SG_OP_STMATRIX:
      case SG_OP_MOVMATRIX:
        /* .sync.aligned: every lane of the warp executes it together, and
         * each lane's registers are part of everyone's result. */
        if (warp_sync_must_wait(w, group, FULL)) { WAIT_WARP_SYNC(); continue; }
        if (m != FULL) {
          record_fault(W, widx, __builtin_ctz(group), CUDA_ERROR_ILLEGAL_INSTRUCTION, 0, I,
                       I->op == SG_OP_MMA ? "mma.sync needs all 32 lanes of the warp (full warps, converged, unpredicated)"
                       : I->op == SG_OP_MOVMATRIX ? "movmatrix needs all 32 lanes of the warp (full warps, converged, unpredicated)"
                                                  : "ldmatrix/stmatrix need all 32 lanes of the warp (full warps, converged, unpredicated)");
          rc = -1;
          goto out;
        }
        if (I->op == SG_OP_MMA) sg_mma_exec(I, mod->wregs + I->aux, R);
        else if (I->op == SG_OP_MOVMATRIX) sg_movmatrix(I, K, R);
        else if (ldmatrix_exec(W, w, widx, I)) { rc = -1; goto out; }
        break;
      case SG_OP_WARPSYNC:
        if (warp_sync_must_wait(w, group, (uint32_t)REG(I->s[0])[__builtin_ctz(group)])) { WAIT_WARP_SYNC(); continue; }
        break;
      case SG_OP_NANOSLEEP: {
        /* A yield point: the warp gives way to its block's other warps (the
         * one a spin-wait waits for), after reconverging as any instruction
         * does. */
        if (!m) break;
        pc++;
        if (pc == w->other_min) { set_group_pc(w, group, pc); RESCHED(); }
        W->napped = 1;
        goto out;
      }
      case SG_OP_ACTIVEMASK: {
        uint64_t *D = DREG(I->d[0]);
        uint32_t g = group;
        LANES({ D[l] = g; });
        break;
      }
      case SG_OP_ADDC: {
        uint64_t *D = DREG(I->d[0]);
        const uint64_t *A = REG(I->s[0]), *Bv = REG(I->s[1]);
        unsigned sz = tsize(I->type);
        int sub = I->mod, cin = I->mod2 & 1, cout = I->mod2 & 2;
        uint32_t cc = w->cc, ncc = 0;
        LANES({
          unsigned __int128 a = trunc_t(A[l], sz), b = trunc_t(Bv[l], sz), c = cin ? ((cc >> l) & 1) : 0, r;
          uint32_t flag;
          if (sub) { r = a - b - c; flag = a < b + c; }
          else { r = a + b + c; flag = (uint32_t)(r >> (sz * 8)) & 1; }
          D[l] = trunc_t((uint64_t)r, sz);
          ncc |= flag << l;
        });
        if (cout) w->cc = (w->cc & ~m) | (ncc & m);
        break;
      }
      case SG_OP_MADC: {
        uint64_t *D = DREG(I->d[0]);
        const uint64_t *A = REG(I->s[0]), *Bv = REG(I->s[1]), *C = REG(I->s[2]);
        unsigned sz = tsize(I->type);
        int hi = I->mod == SG_MUL_HI, cin = I->mod2 & 1, cout = I->mod2 & 2, sg = is_signed_t(I->type);
        uint32_t cc = w->cc, ncc = 0;
        LANES({
          unsigned __int128 p;
          if (sg) p = (unsigned __int128)((__int128)sext(A[l], I->type) * (__int128)sext(Bv[l], I->type));
          else p = (unsigned __int128)trunc_t(A[l], sz) * trunc_t(Bv[l], sz);
          uint64_t part = hi ? (uint64_t)(p >> (sz * 8)) : (uint64_t)p;
          unsigned __int128 r = (unsigned __int128)trunc_t(part, sz) + trunc_t(C[l], sz) + (cin ? ((cc >> l) & 1) : 0);
          D[l] = trunc_t((uint64_t)r, sz);
          ncc |= (uint32_t)((r >> (sz * 8)) & 1) << l;
        });
        if (cout) w->cc = (w->cc & ~m) | (ncc & m);
        break;
      }
      case SG_OP_BMSK:
      case SG_OP_SZEXT: {
        uint64_t *D = DREG(I->d[0]);
        const uint64_t *A = REG(I->s[0]), *Bv = REG(I->s[1]);
        int clamp = I->mod2, sg = I->type == SG_T_S32;
        if (I->op == SG_OP_BMSK) {
          LANES({
            uint32_t a = (uint32_t)A[l], b = (uint32_t)Bv[l];
            if (clamp) { if (a > 32) a = 32; if (b > 32) b = 32; } else { a &= 31; b &= 31; }
            D[l] = (uint32_t)((((1ull << b) - 1) << a) & 0xffffffffull);
          });
        } else {
          LANES({
            uint32_t a = (uint32_t)A[l], b = (uint32_t)Bv[l];
            if (clamp) { if (b > 32) b = 32; } else b &= 31;
            uint32_t r;
            if (b == 0) r = 0;
            else if (b >= 32) r = a;
            else if (sg) r = (uint32_t)((int32_t)(a << (32 - b)) >> (32 - b));
            else r = a & ((1u << b) - 1);
            D[l] = r;
          });
        }
        break;
      }
      case SG_OP_SHF: {
        /* funnel shift of the 64-bit value b:a */
        uint64_t *D = DREG(I->d[0]);
        const uint64_t *A = REG(I->s[0]), *Bv = REG(I->s[1]), *C = REG(I->s[2]);
        int left = I->mod == 1, clamp = I->mod2;
        LANES({
          uint64_t v = ((uint64_t)(uint32_t)Bv[l] << 32) | (uint32_t)A[l];
          uint32_t n = (uint32_t)C[l];
          n = clamp ? (n > 32 ? 32 : n) : (n & 31);
          D[l] = left ? (uint32_t)((v << n) >> 32) : (uint32_t)(v >> n);
        });
        break;
      }
      case SG_OP_LOP3: {
        uint64_t *D = DREG(I->d[0]);
        const uint64_t *A = REG(I->s[0]), *Bv = REG(I->s[1]), *C = REG(I->s[2]);
        uint32_t lut = I->mod;
        LANES({
          uint32_t a = (uint32_t)A[l], b = (uint32_t)Bv[l], c = (uint32_t)C[l], r = 0;
          for (int t = 0; t < 8; t++)
            if ((lut >> t) & 1) r |= ((t & 4) ? a : ~a) & ((t & 2) ? b : ~b) & ((t & 1) ? c : ~c);
          D[l] = r;
        });
        break;
      }
      case SG_OP_CVT_PACK: {
        uint64_t *D = DREG(I->d[0]);
        const uint64_t *A = REG(I->s[0]), *Bv = REG(I->s[1]);
        int bf = I->type == SG_T_BF16X2;
        LANES({
          float hi = f32_of(A[l]), lo = f32_of(Bv[l]);
          uint32_t h = bf ? float_to_bf16(hi) : sg_double_to_half(hi);
          uint32_t lw = bf ? float_to_bf16(lo) : sg_double_to_half(lo);
          D[l] = (h << 16) | lw;
        });
        break;
      }
      case SG_OP_MALLOC:
      case SG_OP_FREE:
        if (m) do_heap(W, w, I, m);
        break;
      case SG_OP_SETCOND:
        if (m && do_setcond(W, w, widx, I, m)) { rc = -1; goto out; }
        break;
      case SG_OP_VPRINTF:
        if (m) {
          do_vprintf(W, w, widx, I, m);
          if (atomic_load(&L->failed)) { rc = -1; goto out; }
        }
        break;
      case SG_OP_TRAP:
        if (m) {
          int l0 = __builtin_ctz(m);
          if (I->mod) {
            assert_message(W, w, widx, l0, I);
            record_fault(W, widx, l0, CUDA_ERROR_ASSERT, 0, I, "device-side assert triggered");
          } else {
            record_fault(W, widx, l0, CUDA_ERROR_LAUNCH_FAILED, 0, I, "trap");
          }
          rc = -1;
          goto out;
        }
        break;
      default:
        record_fault(W, widx, 0, CUDA_ERROR_ILLEGAL_INSTRUCTION, 0, I, "unknown decoded instruction");
        rc = -1;
        goto out;
    }
    pc++;
    if (pc == w->other_min) { set_group_pc(w, group, pc); RESCHED(); }
  }
out:
  SYNC_OUT();
  W->slice_left = until_check;
  W->insns += insns;
  W->warp_insns += winsns;
  return rc;
#undef SYNC_OUT
#undef RESCHED
#undef FAULT_MEM
}

/* ---------------------------------------------------------------- blocks */

/* Block state is kept per OS thread across launches: allocating a warp's
 * registers, local memory and call stack on every launch dominated the cost
 * of small kernels. */
typedef struct {
  warp *warps;
  int nwarps;
  size_t cap_r, cap_p, cap_local, cap_fp, cap_stack; /* bytes per warp */
  uint8_t *shared;
  size_t cap_shared;
} scratch;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_release(scratch *sc) {
  for (int i = 0; i < sc->nwarps; i++) {
    warp *w = &sc->warps[i];
    free(w->R); free(w->Pm); free(w->local); free(w->fparam); free(w->stack);
  }
  free(sc->warps);
  free(sc->shared);
  memset(sc, 0, sizeof *sc);
}
static void scratch_destroy(void *p) { if (p) { scratch_release(p); free(p); } }
static void scratch_key_init(void) { pthread_key_create(&scratch_key, scratch_destroy); }

static scratch *get_scratch(void) {
  pthread_once(&scratch_once, scratch_key_init);
  scratch *sc = pthread_getspecific(scratch_key);
  if (!sc) {
    sc = calloc(1, sizeof *sc);
    if (!sc) return NULL;
    if (pthread_setspecific(scratch_key, sc)) { free(sc); return NULL; }
  }
  return sc;
}

static int grow(void **p, size_t *cap, size_t need) {
  if (need <= *cap && *p) return 0;
  size_t n = (need + 63) & ~(size_t)63;
  void *q = aligned_alloc(64, n ? n : 64);
  if (!q) return -1;
  free(*p);
  *p = q;
  *cap = n;
  return 0;
}

static int setup_block_memory(worker *W) {
  launch *L = W->L;
  const struct sg_ptx_module *m = L->m;
  scratch *sc = get_scratch();
  if (!sc) return -1;
  size_t need_r = (size_t)m->nregs * 32 * 8, need_p = (size_t)(m->npreds ? m->npreds : 1) * 4;
  size_t need_l = (size_t)32 * (L->local_stride ? L->local_stride : 16);
  size_t need_f = (size_t)32 * (L->fparam_stride ? L->fparam_stride : 16);
  size_t need_s = (size_t)32 * (L->stack_depth ? L->stack_depth : 1) * 8;
  if ((int)L->nwarps > sc->nwarps) {
    warp *nw = realloc(sc->warps, L->nwarps * sizeof(warp));
    if (!nw) return -1;
    memset(nw + sc->nwarps, 0, (L->nwarps - (unsigned)sc->nwarps) * sizeof(warp));
    sc->warps = nw;
    sc->nwarps = (int)L->nwarps;
  }
  /* capacities are per warp and the same for all warps of the scratch */
  size_t cr = sc->cap_r, cp = sc->cap_p, cl = sc->cap_local, cf = sc->cap_fp, cs = sc->cap_stack;
  for (int i = 0; i < sc->nwarps; i++) {
    warp *w = &sc->warps[i];
    size_t a = sc->cap_r, b = sc->cap_p, c = sc->cap_local, d = sc->cap_fp, e = sc->cap_stack;
    if (!w->R) a = 0;
    if (!w->Pm) b = 0;
    if (!w->local) c = 0;
    if (!w->fparam) d = 0;
    if (!w->stack) e = 0;
    if (grow((void **)&w->R, &a, need_r) || grow((void **)&w->Pm, &b, need_p) || grow((void **)&w->local, &c, need_l) ||
        grow((void **)&w->fparam, &d, need_f) || grow((void **)&w->stack, &e, need_s))
      return -1;
    if (a > cr) cr = a;
    if (b > cp) cp = b;
    if (c > cl) cl = c;
    if (d > cf) cf = d;
    if (e > cs) cs = e;
  }
  sc->cap_r = cr; sc->cap_p = cp; sc->cap_local = cl; sc->cap_fp = cf; sc->cap_stack = cs;
  /* this kernel's static variables lie in [0, static_shared); dynamic
   * shared memory starts at the module's dyn_shared_base */
  W->shared_size = L->cfg.dynamic_shared ? m->dyn_shared_base + L->cfg.dynamic_shared : L->k->static_shared;
  size_t user_shared = W->shared_size;
  W->reserved_base = (user_shared + 15) & ~(size_t)15;
  if (m->uses_reserved_smem) W->shared_size = W->reserved_base + SG_RESERVED_SMEM;
  if (grow((void **)&sc->shared, &sc->cap_shared, W->shared_size + 64)) return -1;
  W->warps = sc->warps;
  W->nwarps_alloc = sc->nwarps;
  W->shared = sc->shared;
  W->scr = sc;
  /* special registers that stay the same for every block of the launch */
  const unsigned *g = L->cfg.grid, *b = L->cfg.block;
  for (unsigned wi = 0; wi < L->nwarps; wi++) {
    uint64_t *R = W->warps[wi].R;
    for (int l = 0; l < 32; l++) {
      unsigned lin = wi * 32 + (unsigned)l;
      R[SG_SR_TID_X * 32 + l] = lin % b[0];
      R[SG_SR_TID_Y * 32 + l] = (lin / b[0]) % b[1];
      R[SG_SR_TID_Z * 32 + l] = lin / (b[0] * b[1]);
      R[SG_SR_NTID_X * 32 + l] = b[0];
      R[SG_SR_NTID_Y * 32 + l] = b[1];
      R[SG_SR_NTID_Z * 32 + l] = b[2];
      R[SG_SR_NCTAID_X * 32 + l] = g[0];
      R[SG_SR_NCTAID_Y * 32 + l] = g[1];
      R[SG_SR_NCTAID_Z * 32 + l] = g[2];
      R[SG_SR_LANEID * 32 + l] = (unsigned)l;
      R[SG_SR_WARPID * 32 + l] = wi;
      R[SG_SR_NWARPID * 32 + l] = L->nwarps;
      R[SG_SR_LANEMASK_EQ * 32 + l] = 1u << l;
      R[SG_SR_LANEMASK_LT * 32 + l] = (1u << l) - 1;
      R[SG_SR_LANEMASK_LE * 32 + l] = (uint32_t)((2ull << l) - 1);
      R[SG_SR_LANEMASK_GT * 32 + l] = (uint32_t)~((2ull << l) - 1);
      R[SG_SR_LANEMASK_GE * 32 + l] = ~((1u << l) - 1);
      R[SG_SR_SMID * 32 + l] = 0;
      R[SG_SR_NSMID * 32 + l] = 1;
      R[SG_SR_GRIDID * 32 + l] = 1;
      R[SG_SR_DYN_SMEM * 32 + l] = L->cfg.dynamic_shared;
      R[SG_SR_TOTAL_SMEM * 32 + l] = user_shared;
      R[SG_SR_RSV_BEGIN * 32 + l] = W->reserved_base;
      R[SG_SR_RSV_END * 32 + l] = W->reserved_base + SG_RESERVED_SMEM;
      R[SG_SR_RSV_CAP * 32 + l] = SG_RESERVED_SMEM;
      R[SG_SR_RSV_0 * 32 + l] = W->reserved_base;
      R[SG_SR_RSV_1 * 32 + l] = W->reserved_base + SG_RESERVED_SMEM / 2;
    }
  }
  return 0;
}

/* Scratch that grew past this stays allocated only until the launch ends. */
#define SCRATCH_KEEP_BYTES (64u << 20)

static void free_block_memory(worker *W) {
  scratch *sc = W->scr;
  if (!sc) return;
  size_t total = (size_t)sc->nwarps * (sc->cap_r + sc->cap_p + sc->cap_local + sc->cap_fp + sc->cap_stack) + sc->cap_shared;
  if (total > SCRATCH_KEEP_BYTES) scratch_release(sc);
  W->warps = NULL;
  W->shared = NULL;
  W->scr = NULL;
}

static int run_block(worker *W, uint64_t bid) {
  launch *L = W->L;
  const unsigned *g = L->cfg.grid;
  W->ctaid[0] = bid % g[0];
  W->ctaid[1] = (bid / g[0]) % g[1];
  W->ctaid[2] = bid / ((uint64_t)g[0] * g[1]);
  unsigned nt = L->nthreads;
  /* Shared memory starts zeroed, so results never depend on what an earlier
   * block left there (a GPU gives no guarantee either way). */
  memset(W->shared, 0, L->k->static_shared < W->shared_size ? L->k->static_shared : W->shared_size);
  if (L->cfg.dynamic_shared) memset(W->shared + L->m->dyn_shared_base, 0, L->cfg.dynamic_shared);
  if (L->m->uses_reserved_smem) memset(W->shared + W->reserved_base, 0, SG_RESERVED_SMEM);
  for (unsigned wi = 0; wi < L->nwarps; wi++) {
    warp *w = &W->warps[wi];
    uint64_t *R = w->R;
    unsigned first = wi * 32;
    unsigned n = nt - first < 32 ? nt - first : 32;
    w->live = n == 32 ? FULL : ((1u << n) - 1);
    w->blocked = 0;
    w->wsync = 0;
    w->sync_forced = 0;
    w->red_insn = NULL;
    w->red_mask = 0;
    w->cc = 0;
    w->pc = L->k->entry_pc;
    w->group = w->live;
    w->other_min = NOPC;
    memset(w->sp, 0, sizeof w->sp);
    for (int l = 0; l < 32; l++) {
      R[SG_SR_CTAID_X * 32 + l] = W->ctaid[0];
      R[SG_SR_CTAID_Y * 32 + l] = W->ctaid[1];
      R[SG_SR_CTAID_Z * 32 + l] = W->ctaid[2];
    }
  }
  W->red_popc = 0; W->red_and = 1; W->red_or = 0;
  for (;;) {
    /* round-robin over warps until none can run (time slices end with the
     * warp still runnable) */
    for (int any = 1; any;) {
      any = 0;
      int progressed = 0;
      for (unsigned wi = 0; wi < L->nwarps; wi++) {
        warp *w = &W->warps[wi];
        if (!w->group) continue;
        any = 1;
        W->napped = 0;
        if (run_warp(W, w, (int)wi)) return -1;
        if (!W->napped) progressed = 1;
      }
      /* Every warp that ran stopped at nanosleep: the block waits for
       * something outside it (another block, the host), so let the other
       * workers' threads have the CPU. */
      if (any && !progressed) sched_yield();
    }
    int waiting = 0;
    for (unsigned wi = 0; wi < L->nwarps; wi++) if (W->warps[wi].live & W->warps[wi].blocked) waiting = 1;
    if (!waiting) return 0;
    /* every runnable lane of the block is at a barrier: open it */
    for (unsigned wi = 0; wi < L->nwarps; wi++) {
      warp *w = &W->warps[wi];
      if (w->red_insn) {
        const sg_insn *I = w->red_insn;
        uint32_t v = I->mod == 1 ? W->red_popc : I->mod == 2 ? W->red_and : W->red_or;
        uint32_t m = w->red_mask;
        if (I->type == SG_T_PRED) PWRITE(I->d[0], v ? FULL : 0u);
        else if (I->d[0] != SG_NOREG) { uint64_t *D = w->R + (size_t)I->d[0] * 32; LANES({ D[l] = v; }); }
        w->red_insn = NULL;
        w->red_mask = 0;
      }
      w->blocked = 0;
      resched(w);
    }
    W->red_popc = 0; W->red_and = 1; W->red_or = 0;
  }
}

/* Grids of at most this many blocks run in block order on one thread. */
#define SG_SERIAL_GRID_BLOCKS 64

static void run_blocks(worker *W) {
  launch *L = W->L;
  W->slice_left = SLICE_INSNS;
  if (setup_block_memory(W)) {
    record_fault(W, 0, 0, CUDA_ERROR_OUT_OF_MEMORY, 0, NULL, "out of memory for block state");
    free_block_memory(W);
    return;
  }
  while (!atomic_load(&L->failed)) {
    uint64_t bid = atomic_fetch_add(&L->next_block, 1);
    if (bid >= L->nblocks) break;
    if (run_block(W, bid)) break;
  }
  free_block_memory(W);
  atomic_fetch_add(&L->insns, W->insns);
  atomic_fetch_add(&L->warp_insns, W->warp_insns);
}

/* ---------------------------------------------------------------- pool */

/* One pool for the process: launches are serialized on it, and each uses up
 * to env->nworkers of its threads plus the caller. */
static struct {
  pthread_mutex_t lock;       /* serializes launches */
  pthread_mutex_t mu;
  pthread_cond_t cv, done_cv;
  pthread_t *threads;
  int nthreads;
  uint64_t generation;
  launch *job;
  int job_workers;            /* pool threads taking part in this job */
  int running;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER,
          NULL, 0, 0, NULL, 0, 0};

static void *pool_main(void *arg) {
  rgpu_thread_name("sg-exec");
  int index = (int)(intptr_t)arg;
  uint64_t seen = 0;
  pthread_mutex_lock(&pool.mu);
  for (;;) {
    while (pool.generation == seen) pthread_cond_wait(&pool.cv, &pool.mu);
    seen = pool.generation;
    launch *L = pool.job;
    int take = index < pool.job_workers;
    pthread_mutex_unlock(&pool.mu);
    if (take && L) {
      worker W;
      memset(&W, 0, sizeof W);
      W.L = L;
      run_blocks(&W);
    }
    pthread_mutex_lock(&pool.mu);
    if (take && L && --pool.running == 0) pthread_cond_broadcast(&pool.done_cv);
  }
  return NULL;
}

/* A forked child (the server forks one worker process per session) has
 * none of the parent's pool threads: forget them so the child starts its
 * own instead of waiting forever for threads that do not exist. */
static void pool_atfork_child(void) {
  pthread_mutex_init(&pool.lock, NULL);
  pthread_mutex_init(&pool.mu, NULL);
  pthread_cond_init(&pool.cv, NULL);
  pthread_cond_init(&pool.done_cv, NULL);
  pool.threads = NULL; /* the parent's array: not ours to free */
  pool.nthreads = 0;
  pool.generation = 0;
  pool.job = NULL;
  pool.job_workers = 0;
  pool.running = 0;
}
static void pool_atfork_prepare(void) { pthread_mutex_lock(&pool.lock); }
static void pool_atfork_parent(void) { pthread_mutex_unlock(&pool.lock); }
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static void pool_register_atfork(void) { pthread_atfork(pool_atfork_prepare, pool_atfork_parent, pool_atfork_child); }

static int pool_ensure(int n) {
  if (n <= pool.nthreads) return 0;
  pthread_t *t = realloc(pool.threads, (size_t)n * sizeof *t);
  if (!t) return -1;
  pool.threads = t;
  while (pool.nthreads < n) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1 << 20);
    int rc = pthread_create(&pool.threads[pool.nthreads], &attr, pool_main, (void *)(intptr_t)pool.nthreads);
    pthread_attr_destroy(&attr);
    if (rc) return pool.nthreads > 0 ? 0 : -1;
    pthread_detach(pool.threads[pool.nthreads]);
    pool.nthreads++;
  }
  return 0;
}

/* ---------------------------------------------------------------- launch */

int sg_ptx_launch_ex(const sg_ptx_kernel *k, const sg_ptx_launch_cfg *cfg, const sg_ptx_env *env,
                     sg_ptx_fault *fault, sg_ptx_stats *stats);

int sg_ptx_launch(const sg_ptx_kernel *k, const sg_ptx_launch_cfg *cfg, const sg_ptx_env *env, sg_ptx_fault *fault) {
  return sg_ptx_launch_ex(k, cfg, env, fault, NULL);
}

static int config_error(sg_ptx_fault *fault, const char *msg, const sg_ptx_kernel *k) {
  if (fault) {
    memset(fault, 0, sizeof *fault);
    fault->code = CUDA_ERROR_INVALID_VALUE;
    snprintf(fault->message, sizeof fault->message, "%s: %s", k ? k->name : "launch", msg);
  }
  return CUDA_ERROR_INVALID_VALUE;
}

int sg_ptx_launch_ex(const sg_ptx_kernel *k, const sg_ptx_launch_cfg *cfg, const sg_ptx_env *env,
                     sg_ptx_fault *fault, sg_ptx_stats *stats) {
  if (stats) memset(stats, 0, sizeof *stats);
  if (fault) memset(fault, 0, sizeof *fault);
  if (!k || !cfg || !k->is_entry || !k->defined) return config_error(fault, "not a kernel", k);
  for (int i = 0; i < 3; i++) {
    if (cfg->grid[i] == 0 || cfg->block[i] == 0) return config_error(fault, "zero grid or block dimension", k);
  }
  if (cfg->grid[0] > 0x7fffffffu || cfg->grid[1] > 65535 || cfg->grid[2] > 65535)
    return config_error(fault, "grid dimension too large", k);
  if (cfg->block[0] > 1024 || cfg->block[1] > 1024 || cfg->block[2] > 64)
    return config_error(fault, "block dimension too large", k);
  uint64_t nt = (uint64_t)cfg->block[0] * cfg->block[1] * cfg->block[2];
  if (nt > 1024 || nt > (uint64_t)k->max_threads) return config_error(fault, "too many threads per block", k);
  if (cfg->params_size < k->param_bytes || (k->param_bytes && !cfg->params))
    return config_error(fault, "parameter buffer smaller than the kernel's parameters", k);
  if (cfg->dynamic_shared > (64u << 20)) return config_error(fault, "dynamic shared memory too large", k);

  launch *L = calloc(1, sizeof *L);
  if (!L) return CUDA_ERROR_OUT_OF_MEMORY;
  L->k = k;
  L->m = k->mod;
  L->env = env;
  L->cfg = *cfg;
  L->params = malloc(cfg->params_size ? cfg->params_size : 1);
  if (!L->params) { free(L); return CUDA_ERROR_OUT_OF_MEMORY; }
  if (cfg->params_size) memcpy(L->params, cfg->params, cfg->params_size);
  L->nblocks = (uint64_t)cfg->grid[0] * cfg->grid[1] * cfg->grid[2];
  L->nthreads = (unsigned)nt;
  L->nwarps = (unsigned)((nt + 31) / 32);
  L->local_stride = (k->mod->local_bytes + 15u) & ~15u;
  L->fparam_stride = (k->mod->fparam_bytes + 15u) & ~15u;
  L->stack_depth = k->mod->max_call_depth + 1;
  pthread_mutex_init(&L->lock, NULL);
  if (env && env->timeout_ms) L->deadline_ns = rgpu_clock_ns() + (uint64_t)env->timeout_ms * 1000000ull;

  int nworkers = env ? env->nworkers : 0;
  if (nworkers <= 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    nworkers = n > 0 ? (int)n : 1;
  }
  if (nworkers > 256) nworkers = 256;
  if ((uint64_t)nworkers > L->nblocks) nworkers = (int)L->nblocks;
  /* A small grid runs its blocks one after another, in order, on this
   * thread.  Why: programs race blocks as the CUDA samples' reduction does
   * in its in-place passes (block 0 reads the inputs at indices the other
   * blocks write their sums to).  On a GPU every block of such a grid is
   * resident at once and loads its inputs long before any block stores its
   * result; on worker threads a busy CPU could run block 1 to its end
   * before block 0's first load (a wrong sum in CI, one run in ten under
   * load).  In block order the race cannot happen, and grids this small
   * are cheap anyway. */
  if (L->nblocks <= SG_SERIAL_GRID_BLOCKS) nworkers = 1;

  pthread_once(&pool_once, pool_register_atfork);
  pthread_mutex_lock(&pool.lock);
  int helpers = nworkers - 1;
  if (helpers > 0) {
    pthread_mutex_lock(&pool.mu);
    if (pool_ensure(helpers)) helpers = pool.nthreads;
    if (helpers > pool.nthreads) helpers = pool.nthreads;
    pool.job = L;
    pool.job_workers = helpers;
    pool.running = helpers;
    pool.generation++;
    pthread_cond_broadcast(&pool.cv);
    pthread_mutex_unlock(&pool.mu);
  }
  worker W;
  memset(&W, 0, sizeof W);
  W.L = L;
  run_blocks(&W);
  if (helpers > 0) {
    pthread_mutex_lock(&pool.mu);
    while (pool.running > 0) pthread_cond_wait(&pool.done_cv, &pool.mu);
    pool.job = NULL;
    pthread_mutex_unlock(&pool.mu);
  }
  pthread_mutex_unlock(&pool.lock);

  int code = L->code;
  if (code && fault) *fault = L->fault;
  if (stats) {
    stats->thread_insns = atomic_load(&L->insns);
    stats->warp_insns = atomic_load(&L->warp_insns);
  }
  pthread_mutex_destroy(&L->lock);
  free(L->params);
  free(L);
  return code ? code : CUDA_SUCCESS;
}
