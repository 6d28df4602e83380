/* sg_ptx_internal: the pre-decoded module form shared by the parser and the
 * interpreter.  Nothing here is visible outside softgpu/ptx. */
#ifndef SG_PTX_INTERNAL_H
#define SG_PTX_INTERNAL_H

#include <stdint.h>
#include <stddef.h>
#include "sg_ptx.h"

/* Operand encoding: a register index into the warp register file, or (with
 * SG_KBIT) an index into the module's read-only constant pool, so that every
 * source operand is a 32-lane array and lane loops need no per-lane kind
 * test.  Predicates live in their own index space as 32-bit lane masks. */
#define SG_NOREG 0xffffffffu
#define SG_KBIT 0x80000000u
#define SG_PBIT 0x40000000u /* parse time only: operand names a predicate */
#define SG_K_ZERO (SG_KBIT | 0u) /* constant 0, used as "no base register" */

/* Special registers occupy fixed slots at the start of every register file. */
enum {
  SG_SR_TID_X, SG_SR_TID_Y, SG_SR_TID_Z,
  SG_SR_NTID_X, SG_SR_NTID_Y, SG_SR_NTID_Z,
  SG_SR_CTAID_X, SG_SR_CTAID_Y, SG_SR_CTAID_Z,
  SG_SR_NCTAID_X, SG_SR_NCTAID_Y, SG_SR_NCTAID_Z,
  SG_SR_LANEID, SG_SR_WARPID, SG_SR_NWARPID,
  SG_SR_LANEMASK_EQ, SG_SR_LANEMASK_LT, SG_SR_LANEMASK_LE,
  SG_SR_LANEMASK_GT, SG_SR_LANEMASK_GE,
  SG_SR_SMID, SG_SR_NSMID, SG_SR_GRIDID, SG_SR_DYN_SMEM, SG_SR_TOTAL_SMEM,
  /* %reserved_smem_offset_begin/end/cap/0/1 (see SG_RESERVED_SMEM) */
  SG_SR_RSV_BEGIN, SG_SR_RSV_END, SG_SR_RSV_CAP, SG_SR_RSV_0, SG_SR_RSV_1,
  SG_SR_COUNT
};

typedef enum {
  SG_T_NONE = 0, SG_T_PRED,
  SG_T_B8, SG_T_B16, SG_T_B32, SG_T_B64,
  SG_T_U8, SG_T_U16, SG_T_U32, SG_T_U64,
  SG_T_S8, SG_T_S16, SG_T_S32, SG_T_S64,
  SG_T_F16, SG_T_F16X2, SG_T_BF16, SG_T_BF16X2, SG_T_F32, SG_T_F64,
  SG_T_U16X2, SG_T_S16X2, /* packed 16-bit integer SIMD (sm_90) */
  SG_T_COUNT
} sg_type;

typedef enum {
  SG_OP_NOP = 0, SG_OP_MOV, SG_OP_MOV_TIMER, SG_OP_PACK, SG_OP_UNPACK,
  SG_OP_ADD, SG_OP_SUB, SG_OP_MUL, SG_OP_MAD, SG_OP_FMA, SG_OP_DIV, SG_OP_REM,
  SG_OP_MIN, SG_OP_MAX, SG_OP_NEG, SG_OP_ABS, SG_OP_COPYSIGN,
  SG_OP_AND, SG_OP_OR, SG_OP_XOR, SG_OP_NOT, SG_OP_CNOT, SG_OP_SHL, SG_OP_SHR,
  SG_OP_POPC, SG_OP_CLZ, SG_OP_BREV, SG_OP_BFE, SG_OP_BFI, SG_OP_PRMT,
  SG_OP_BFIND, SG_OP_SAD, SG_OP_TESTP,
  SG_OP_PAND, SG_OP_POR, SG_OP_PXOR, SG_OP_PNOT, SG_OP_PMOV, SG_OP_PSET,
  SG_OP_CVT, SG_OP_CVTA, SG_OP_SELP, SG_OP_SETP, SG_OP_SET,
  SG_OP_RCP, SG_OP_SQRT, SG_OP_RSQRT, SG_OP_EX2, SG_OP_LG2, SG_OP_SIN,
  SG_OP_COS, SG_OP_TANH,
  SG_OP_LD, SG_OP_ST, SG_OP_LD_KPARAM, SG_OP_ATOM,
  SG_OP_BRA, SG_OP_CALL, SG_OP_RET, SG_OP_EXIT, SG_OP_BAR, SG_OP_BAR_RED,
  SG_OP_SHFL, SG_OP_VOTE, SG_OP_MATCH, SG_OP_ACTIVEMASK, SG_OP_VPRINTF, SG_OP_MALLOC, SG_OP_FREE, SG_OP_SETCOND,
  SG_OP_TRAP, SG_OP_ADDC, SG_OP_LOP3, SG_OP_CVT_PACK, SG_OP_SHF, SG_OP_MADC, SG_OP_BMSK, SG_OP_SZEXT, SG_OP_REDUX,
  SG_OP_NANOSLEEP, SG_OP_WARPSYNC,
  SG_OP_WMMA_LOAD, SG_OP_WMMA_MMA, SG_OP_WMMA_STORE, SG_OP_MMA, SG_OP_LDMATRIX, SG_OP_CP_ASYNC, SG_OP_STMATRIX, SG_OP_MOVMATRIX,
  SG_OP_TEX, SG_OP_TLD4, SG_OP_TXQ, SG_OP_SULD, SG_OP_SUST, SG_OP_SUQ,
  SG_OP_COUNT
} sg_opcode;

/* Reserved shared memory of a block (what sm_80+ GPUs set aside, 1 KiB,
 * cudaDevAttrReservedSharedMemoryPerBlock): cooperative groups keep the
 * barriers and exchange slots of multi-warp tiles at
 * %reserved_smem_offset_1 when compiled for sm_80+.  softgpu places it
 * after the block's own shared memory, only for modules that name a
 * %reserved_smem_offset_* register: offset_0 at its start, offset_1 half
 * way (each half is more than the 288 bytes cooperative groups count on). */
#define SG_RESERVED_SMEM 1024u

/* Memory spaces of ld/st/atom/cvta. */
enum { SG_SP_GENERIC = 0, SG_SP_GLOBAL, SG_SP_SHARED, SG_SP_LOCAL, SG_SP_CONST,
       SG_SP_PARAM /* per-thread .param of device function calls */ };

/* Rounding modes (mod of arithmetic and cvt). */
enum { SG_RND_NONE = 0, SG_RND_RN, SG_RND_RZ, SG_RND_RM, SG_RND_RP,
       SG_RND_RNI, SG_RND_RZI, SG_RND_RMI, SG_RND_RPI };

/* setp/set comparisons (mod) and combining operations (mod2). */
enum { SG_CMP_EQ = 1, SG_CMP_NE, SG_CMP_LT, SG_CMP_LE, SG_CMP_GT, SG_CMP_GE,
       SG_CMP_LO, SG_CMP_LS, SG_CMP_HI, SG_CMP_HS,
       SG_CMP_EQU, SG_CMP_NEU, SG_CMP_LTU, SG_CMP_LEU, SG_CMP_GTU, SG_CMP_GEU,
       SG_CMP_NUM, SG_CMP_NAN };
enum { SG_BOOL_NONE = 0, SG_BOOL_AND, SG_BOOL_OR, SG_BOOL_XOR };

/* mul/mad variants (mod). */
enum { SG_MUL_LO = 0, SG_MUL_HI, SG_MUL_WIDE, SG_MUL_F };

/* atom operations (mod). */
enum { SG_ATOM_ADD = 1, SG_ATOM_MIN, SG_ATOM_MAX, SG_ATOM_EXCH, SG_ATOM_CAS,
       SG_ATOM_AND, SG_ATOM_OR, SG_ATOM_XOR, SG_ATOM_INC, SG_ATOM_DEC };

/* shfl modes, vote modes, match modes (mod). */
enum { SG_SHFL_UP = 1, SG_SHFL_DOWN, SG_SHFL_BFLY, SG_SHFL_IDX };
enum { SG_VOTE_ALL = 1, SG_VOTE_ANY, SG_VOTE_UNI, SG_VOTE_BALLOT };
enum { SG_MATCH_ANY = 1, SG_MATCH_ALL };
/* cvta direction (mod). */
enum { SG_CVTA_TO_GENERIC = 1, SG_CVTA_FROM_GENERIC };
/* timer kinds (mod of MOV_TIMER). */
enum { SG_TIMER_CLOCK = 1, SG_TIMER_CLOCK64, SG_TIMER_GLOBALTIMER, SG_TIMER_CLOCK_HI,
       SG_TIMER_GLOBALTIMER_LO, SG_TIMER_GLOBALTIMER_HI };

/* wmma (m16n16k16, m32n8k16, m8n32k16; shape in the instruction's
 * shape): the fragment's registers live in the module's
 * wregs table; mod = matrix (load: 0 a, 1 b, 2 c), mod2 = layout bits
 * (1: first matrix column-major, 2: second column-major). */
#define SG_WMMA_FRAG 8
#define SG_WMMA_REGS (4 * SG_WMMA_FRAG)
enum { SG_WMMA_A = 0, SG_WMMA_B, SG_WMMA_C };
enum { SG_WMMA_M16N16K16 = 0, SG_WMMA_M32N8K16, SG_WMMA_M8N32K16 };

/* mma.sync (sg_ptx_mma.c): fragments in the wregs table like wmma's (slots
 * D, A, B, C); mod = shape, type = D's type, type2 = C's, mod2 = A's,
 * space = B's (tf32 is carried as SG_T_F32), SG_F_SAT = .satfinite,
 * shape = layouts (bit 0: A column-major, bit 1: B column-major; only
 * m8n8k4 with f16 inputs has other than .row.col).
 * ldmatrix: vec = matrices (1, 2, 4) in d[0..3], mod2 bit 0 = .trans, the
 * row addresses in base (+off) of lanes 0..8*vec-1; stmatrix the same with
 * the sources in s[0..3]; movmatrix d[0], s[0]. */
enum { SG_MMA_M16N8K16 = 1, SG_MMA_M16N8K8, SG_MMA_M16N8K4, SG_MMA_M8N8K16, SG_MMA_M16N8K32, SG_MMA_M8N8K4 };

/* Texture and surface instructions (sg_ptx_tex.c).  The object handle is
 * in base (a 64-bit register or constant).
 *   tex:  mod = geometry, type = destination type (f32/s32/u32), type2 =
 *         coordinate type (f32/s32), d[0..3] = destinations (SG_NOREG for
 *         sinks), s[0..3] = coordinates in PTX order (a1d/a2d: layer first).
 *   tld4: as tex (2d only), mod2 = component (0 r, 1 g, 2 b, 3 a).
 *   txq/suq: mod = SG_TXQ_* query, d[0] = destination.
 *   suld: mod = geometry, vec, type = element type (b8..b64), mod2 =
 *         SG_SU_* out-of-range mode, d[0..vec-1] = destinations, s[0..2] =
 *         coordinates (x in bytes).
 *   sust: as suld, but the values to store are sources in d[0..vec-1]
 *         (stores have no destination; the parser relocates d and s alike). */
enum { SG_TEXG_1D = 1, SG_TEXG_2D, SG_TEXG_3D, SG_TEXG_A1D, SG_TEXG_A2D };
enum { SG_SU_TRAP = 0, SG_SU_CLAMP, SG_SU_ZERO };
enum { SG_TXQ_WIDTH = 1, SG_TXQ_HEIGHT, SG_TXQ_DEPTH, SG_TXQ_CHANNEL_DATA_TYPE, SG_TXQ_CHANNEL_ORDER,
       SG_TXQ_NORMALIZED_COORDS, SG_TXQ_FILTER_MODE, SG_TXQ_ADDR_MODE_0, SG_TXQ_ADDR_MODE_1,
       SG_TXQ_ADDR_MODE_2, SG_TXQ_ARRAY_SIZE };

/* flags */
#define SG_F_GNEG 0x01   /* guard predicate negated */
#define SG_F_FTZ 0x02
#define SG_F_SAT 0x04
#define SG_F_CNEG 0x08   /* last predicate source negated (setp c, vote a) */
#define SG_F_FPREL 0x10  /* off is relative to the function's .param frame */
#define SG_F_NAN 0x20    /* min/max .NaN */
#define SG_F_ANEG 0x40   /* first predicate source negated (and.pred !a) */
#define SG_F_BNEG 0x80

typedef struct {
  uint16_t op;
  uint8_t type;   /* main type (destination type for cvt) */
  uint8_t type2;  /* second type: cvt source, set source, mul.wide source */
  uint8_t space;
  uint8_t vec;    /* 1, 2 or 4 elements for ld/st, element count for pack */
  uint8_t mod;
  uint8_t mod2;
  uint8_t flags;
  uint8_t shape;  /* wmma: SG_WMMA_M16N16K16 / M32N8K16 / M8N32K16 */
  uint8_t pad[2];
  uint32_t guard; /* predicate index or SG_NOREG */
  uint32_t line;
  uint32_t d[4];
  uint32_t s[4];
  uint32_t base;  /* address base register (constant-pool zero when none) */
  uint32_t aux;   /* branch target pc, call-info index */
  int64_t off;    /* address offset */
} sg_insn;

/* mma.sync and ldmatrix (sg_ptx_mma.c), shapes as above. */
void sg_mma_dims(int shape, unsigned *m, unsigned *n, unsigned *k);
/* Runs one warp's mma on the lane-major register file R (R[reg*32+lane]);
 * slot: the instruction's fragment registers in the wregs table. */
void sg_mma_exec(const sg_insn *I, const uint32_t *slot, uint64_t *R);
/* Hands ldmatrix's rows (rows[matrix][row][col], 16-bit elements) to the
 * lanes' destination registers in the ISA's fragment layout. */
void sg_ldmatrix_distribute(const sg_insn *I, uint16_t rows[4][8][8], uint64_t *R);
/* stmatrix's inverse step: the rows of its vec matrices from the lanes'
 * source registers s[0..3] (K: the constant pool). */
void sg_stmatrix_gather(const sg_insn *I, const uint64_t *K, const uint64_t *R, uint16_t rows[4][8][8]);
/* movmatrix.trans: d[0] gets the transpose of the matrix the lanes hold in s[0]. */
void sg_movmatrix(const sg_insn *I, const uint64_t *K, uint64_t *R);

/* Runs a texture/surface instruction for the lanes in m (R: the
 * lane-major register file, K: the constant pool).  Returns 0, or a
 * CUresult with *fault_lane, *fault_addr and what[] describing the fault
 * (an invalid object handle, a .trap surface access out of range). */
int sg_tex_exec(const sg_insn *I, uint32_t m, const uint64_t *K, uint64_t *R, const sg_ptx_env *env,
                int *fault_lane, uint64_t *fault_addr, char *what, size_t whatlen);

typedef struct {
  uint32_t off, size;
} sg_span;

/* One call site: which callee, and where the caller's argument and return
 * .param variables are relative to the callee's frame. */
typedef struct {
  int func;
  int nargs;
  sg_span args[32];  /* caller offsets (after relocation) */
  int has_ret;
  sg_span ret;
} sg_call_info;

struct sg_ptx_kernel {
  struct sg_ptx_module *mod;
  char *name;
  int is_entry;
  int defined;
  int is_extern;
  uint32_t entry_pc, end_pc;
  /* sizes in function-relative units */
  uint32_t nregs, npreds, lsize, fpsize;
  /* bases in the module-wide per-thread layout */
  uint32_t rbase, pbase, lbase, fpbase;
  int nparams;
  sg_span *params;   /* entry: kernel param buffer; func: relative to fpbase */
  int has_ret;
  sg_span ret;       /* func only, relative to fpbase */
  size_t param_bytes;
  int max_threads;
  int uses_calls;
  int *shrefs;          /* module .shared variables this function names */
  int nshrefs, capshrefs;
  size_t static_shared; /* entry: bytes of the .shared variables it reaches */
  size_t local_reach;   /* entry: per-thread .local bytes along its deepest calls */
};

typedef struct {
  char *name;
  size_t size, align;
  int space;        /* SG_PTX_SPACE_GLOBAL / CONST */
  uint8_t *init;
  uint64_t addr;
  uint32_t kidx;    /* constant-pool slot holding the address */
} sg_global;

enum { SG_KP_NONE = 0, SG_KP_GLOBAL, SG_KP_DYNSHARED, SG_KP_LOCAL, SG_KP_SHARED };
typedef struct {
  uint32_t kidx;
  int kind;
  int ref;        /* global index or function index */
  int64_t off;
} sg_kpatch;

struct sg_ptx_module {
  sg_insn *code;
  uint32_t ncode, capcode;
  struct sg_ptx_kernel **funcs;
  int nfuncs, capfuncs;
  int *entries;
  int nentries;
  sg_global *globals;
  int nglobals, capglobals;
  uint64_t *kvals;      /* constant values, one per slot */
  uint32_t nk, capk;
  uint64_t *kpool;      /* nk * 32 lanes, built after parsing */
  sg_kpatch *kpatches;
  int nkpatches, capkpatches;
  sg_call_info *calls;
  int ncalls, capcalls;
  /* fragment registers of wmma instructions (their aux): SG_WMMA_REGS per
   * instruction, slots D, A, B, C of SG_WMMA_FRAG each */
  uint32_t *wregs;
  uint32_t nwregs, capwregs;
  /* module-wide per-thread layout */
  uint32_t nregs, npreds, local_bytes, fparam_bytes;
  uint32_t max_call_depth; /* longest chain of device-function calls */
  size_t static_shared;  /* extent of all non-extern .shared variables */
  size_t dyn_shared_base; /* offset of extern (dynamic) .shared memory */
  sg_span *shvars;       /* offset/size of each non-extern .shared variable */
  size_t *shalign;
  int nshvars, capshvars, capshalign;
  size_t dyn_shared_align;
  int uses_reserved_smem; /* names %reserved_smem_offset_*: see SG_RESERVED_SMEM */
};

void sg_ptx_set_kconst(struct sg_ptx_module *m, uint32_t kidx, uint64_t v);

/* Directed rounding helpers (sg_ptx_round.c, compiled with -frounding-math). */
float sg_round_addf(float a, float b, int rnd);
float sg_round_mulf(float a, float b, int rnd);
float sg_round_fmaf(float a, float b, float c, int rnd);
float sg_round_divf(float a, float b, int rnd);
float sg_round_sqrtf(float a, int rnd);
double sg_round_add(double a, double b, int rnd);
double sg_round_mul(double a, double b, int rnd);
double sg_round_fma(double a, double b, double c, int rnd);
double sg_round_div(double a, double b, int rnd);
double sg_round_sqrt(double a, int rnd);
float sg_round_d2f(double a, int rnd);
float sg_round_i2f(int64_t a, int is_unsigned, int rnd);
double sg_round_i2d(int64_t a, int is_unsigned, int rnd);

/* f16 conversions (sg_ptx_exec.c), exposed for tests. */
float sg_half_to_float(uint16_t h);
uint16_t sg_double_to_half(double x);

/* printf formatting (sg_ptx_printf.c).  read() copies device memory at a
 * generic address and returns 0, or -1 for an address outside any range. */
typedef int (*sg_ptx_read_fn)(void *ctx, uint64_t addr, void *dst, size_t len);
int sg_ptx_format_printf(sg_ptx_read_fn read, void *ctx, uint64_t fmt_addr,
                         uint64_t args_addr, char *out, size_t outlen);

#endif
