/* sg_ptx_mma: the warp-wide matrix instructions whose per-lane fragment
 * layouts the PTX ISA defines ("Matrix Fragments for mma.mMnNkK"), so that
 * programs that build fragments by hand (inline PTX, CUTLASS-style code)
 * see exactly the hardware's register ownership: mma.sync, the
 * distribution step of ldmatrix, the gathering step of stmatrix, and
 * movmatrix.  The interpreter (sg_ptx_exec.c) waits for the whole warp and
 * does the memory accesses; this file only moves elements between whole
 * matrices and the lane-major register file. */
#include "sg_ptx_internal.h"

#include <math.h>
#include <string.h>

static float f32_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t bits_f32(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bf16_float(uint16_t h) { return f32_bits((uint32_t)h << 16); }

/* Width in bits of one element of a fragment of type t (tf32 is carried
 * as SG_T_F32 in 32-bit registers). */
static unsigned elem_bits(int t) {
  switch (t) {
    case SG_T_F16: case SG_T_BF16: return 16;
    case SG_T_S8: case SG_T_U8: return 8;
    default: return 32;
  }
}

void sg_mma_dims(int shape, unsigned *m, unsigned *n, unsigned *k) {
  switch (shape) {
    case SG_MMA_M16N8K16: *m = 16; *n = 8; *k = 16; return;
    case SG_MMA_M16N8K8: *m = 16; *n = 8; *k = 8; return;
    case SG_MMA_M16N8K4: *m = 16; *n = 8; *k = 4; return;
    case SG_MMA_M16N8K32: *m = 16; *n = 8; *k = 32; return;
    case SG_MMA_M8N8K4: *m = 8; *n = 8; *k = 4; return;
    default: *m = 8; *n = 8; *k = 16; return; /* SG_MMA_M8N8K16 */
  }
}

/* Row and column of element i of `lane`'s fragment of operand `which`
 * (SG_WMMA_A, SG_WMMA_B, or SG_WMMA_C for C and D), transcribed from the
 * ISA's formulas with groupID = lane >> 2 and threadID_in_group = lane % 4.
 * `in` is the input element type (it changes the A/B layouts). */
static void frag_coord(int shape, int in, int which, unsigned lane, unsigned i, unsigned *row, unsigned *col) {
  unsigned g = lane >> 2, t = lane & 3;
  int is8 = in == SG_T_S8 || in == SG_T_U8, tf32 = in == SG_T_F32;
  if (which == SG_WMMA_C) {
    if (shape == SG_MMA_M8N8K16) { *row = g; *col = t * 2 + i; return; }
    /* c0, c1 in row groupID, c2, c3 in row groupID + 8 */
    *row = g + 8 * (i >> 1);
    *col = t * 2 + (i & 1);
    return;
  }
  int a = which == SG_WMMA_A;
  switch (shape) {
    case SG_MMA_M16N8K16:
      if (is8) {
        if (a) { *row = g + 8 * (i >> 2); *col = t * 4 + (i & 3); }
        else { *row = t * 4 + i; *col = g; }
      } else if (a) {
        /* a0 a1 | a2 a3 (row + 8) | a4 a5 (col + 8) | a6 a7 (both) */
        *row = g + 8 * ((i >> 1) & 1);
        *col = t * 2 + (i & 1) + 8 * (i >> 2);
      } else {
        *row = t * 2 + (i & 1) + 8 * (i >> 1);
        *col = g;
      }
      return;
    case SG_MMA_M16N8K8:
      if (tf32) {
        if (a) { *row = g + 8 * (i & 1); *col = t + 4 * (i >> 1); }
        else { *row = t + 4 * i; *col = g; }
      } else if (a) {
        *row = g + 8 * (i >> 1);
        *col = t * 2 + (i & 1);
      } else {
        *row = t * 2 + i;
        *col = g;
      }
      return;
    case SG_MMA_M16N8K32: /* s8/u8: a0-a3 row g, a4-a7 row g+8, a8-a15 the same 16 columns on */
      if (a) { *row = g + 8 * ((i >> 2) & 1); *col = t * 4 + (i & 3) + 16 * (i >> 3); }
      else { *row = t * 4 + (i & 3) + 16 * (i >> 2); *col = g; }
      return;
    case SG_MMA_M16N8K4: /* tf32 only */
      if (a) { *row = g + 8 * i; *col = t; }
      else { *row = t; *col = g; }
      return;
    default: /* SG_MMA_M8N8K16, s8/u8 */
      if (a) { *row = g; *col = t * 4 + i; }
      else { *row = t * 4 + i; *col = g; }
      return;
  }
}

/* Raw bits of element i of a lane's fragment held in registers regs[]. */
static uint32_t frag_get(const uint64_t *R, const uint32_t *regs, unsigned bits, unsigned lane, unsigned i) {
  unsigned per = 32 / bits;
  uint32_t v = (uint32_t)R[(size_t)regs[i / per] * 32 + lane];
  return bits == 32 ? v : (v >> (bits * (i % per))) & ((1u << bits) - 1);
}

static void frag_set(uint64_t *R, const uint32_t *regs, unsigned bits, unsigned lane, unsigned i, uint32_t val) {
  unsigned per = 32 / bits;
  uint64_t *p = &R[(size_t)regs[i / per] * 32 + lane];
  if (bits == 32) { *p = val; return; }
  unsigned sh = bits * (i % per);
  uint32_t mask = ((1u << bits) - 1) << sh;
  *p = (((uint32_t)*p & ~mask) | ((val << sh) & mask));
}

/* An input element as the tensor core sees it.  tf32 keeps the sign, the
 * 8 exponent bits and the top 10 mantissa bits of the f32 register: the
 * low 13 bits are ignored (programs round beforehand with
 * cvt.rna.tf32.f32 when they want rounding). */
static float in_value(int t, uint32_t raw) {
  switch (t) {
    case SG_T_F16: return sg_half_to_float((uint16_t)raw);
    case SG_T_BF16: return bf16_float((uint16_t)raw);
    default: return f32_bits(raw & 0xffffe000u);
  }
}

/* mma.m8n8k4 with .f64 ("Matrix Fragments for mma.m8n8k4 with .f64
 * floating point type"): one 8x8x4 product for the whole warp, each lane
 * holding one element of A (row lane>>2, column lane%4), one of B (row
 * lane%4, column lane>>2) and two of C/D (row lane>>2, columns
 * 2*(lane%4) and 2*(lane%4)+1), one f64 per 64-bit register.  Each D
 * element is C plus the four products, fused in k order with one rounding
 * per step; a program whose sums are exact gets the hardware's numbers
 * whatever order the hardware adds in. */
static void mma_m8n8k4_f64(const uint32_t *slot, uint64_t *R) {
  const uint32_t *rd = slot, *ra = slot + SG_WMMA_FRAG, *rb = slot + 2 * SG_WMMA_FRAG, *rc = slot + 3 * SG_WMMA_FRAG;
  double A[8][4], B[4][8], C[8][8];
  for (unsigned lane = 0; lane < 32; lane++) {
    unsigned g = lane >> 2, t = lane & 3;
    memcpy(&A[g][t], &R[(size_t)ra[0] * 32 + lane], 8);
    memcpy(&B[t][g], &R[(size_t)rb[0] * 32 + lane], 8);
    for (unsigned i = 0; i < 2; i++) memcpy(&C[g][t * 2 + i], &R[(size_t)rc[i] * 32 + lane], 8);
  }
  /* all of D before any register is written: d may name c's registers */
  double D[8][8];
  for (unsigned r = 0; r < 8; r++)
    for (unsigned c = 0; c < 8; c++) {
      double acc = C[r][c];
      for (unsigned k = 0; k < 4; k++) acc = fma(A[r][k], B[k][c], acc);
      D[r][c] = acc;
    }
  for (unsigned lane = 0; lane < 32; lane++) {
    unsigned g = lane >> 2, t = lane & 3;
    for (unsigned i = 0; i < 2; i++) memcpy(&R[(size_t)rd[i] * 32 + lane], &D[g][t * 2 + i], 8);
  }
}

/* Row and column within its quad pair's tile of element i of `lane`'s
 * fragment of mma.m8n8k4 with .f16 inputs, transcribed from the ISA
 * ("Matrix Fragments for mma.m8n8k4 with .f16 floating point type"): the
 * low group (lanes < 16) holds rows 0-3 of A and C/D and columns 0-3 of B,
 * the high group rows / columns 4-7.  col_major: that operand's .col
 * layout; f32: the C/D fragment is eight f32 registers (it has its own
 * layout) rather than four f16x2. */
static void quadpair_coord(int which, int col_major, int f32, unsigned lane, unsigned i, unsigned *row, unsigned *col) {
  unsigned t = lane & 3, hi = lane >= 16 ? 4 : 0;
  if (which == SG_WMMA_A) {
    if (col_major) { *row = i + hi; *col = t; }
    else { *row = t + hi; *col = i; }
  } else if (which == SG_WMMA_B) {
    if (col_major) { *row = i; *col = t + hi; }
    else { *row = t; *col = i + hi; }
  } else if (f32) {
    *row = (lane & 1) + (i & 2) + hi;
    *col = (i & 4) + (lane & 2) + (i & 1);
  } else {
    *row = t + hi;
    *col = i;
  }
}

/* mma.m8n8k4 with .f16 inputs: four independent D = A * B + C products of
 * 8x4 by 4x8 tiles, product q computed by lanes 4q..4q+3 and
 * 16+4q..16+4q+3 from their own fragments.  Products are exact in f32 and
 * accumulate in f32 in k order, as for the other f16 shapes. */
static void mma_m8n8k4_f16(const sg_insn *I, const uint32_t *slot, uint64_t *R) {
  int dt = I->type, ct = I->type2, a_col = I->shape & 1, b_col = (I->shape >> 1) & 1;
  unsigned cbits = elem_bits(ct), dbits = elem_bits(dt);
  const uint32_t *rd = slot, *ra = slot + SG_WMMA_FRAG, *rb = slot + 2 * SG_WMMA_FRAG, *rc = slot + 3 * SG_WMMA_FRAG;
  uint32_t A[4][8][4], B[4][4][8], C[4][8][8];
  for (unsigned lane = 0; lane < 32; lane++) {
    unsigned q = (lane >> 2) & 3, r, c;
    for (unsigned i = 0; i < 4; i++) {
      quadpair_coord(SG_WMMA_A, a_col, 0, lane, i, &r, &c);
      A[q][r][c] = frag_get(R, ra, 16, lane, i);
      quadpair_coord(SG_WMMA_B, b_col, 0, lane, i, &r, &c);
      B[q][r][c] = frag_get(R, rb, 16, lane, i);
    }
    for (unsigned i = 0; i < 8; i++) {
      quadpair_coord(SG_WMMA_C, 0, ct == SG_T_F32, lane, i, &r, &c);
      C[q][r][c] = frag_get(R, rc, cbits, lane, i);
    }
  }
  uint32_t D[4][8][8];
  for (unsigned q = 0; q < 4; q++)
    for (unsigned r = 0; r < 8; r++)
      for (unsigned c = 0; c < 8; c++) {
        float acc = ct == SG_T_F16 ? sg_half_to_float((uint16_t)C[q][r][c]) : f32_bits(C[q][r][c]);
        for (unsigned k = 0; k < 4; k++)
          acc = fmaf(sg_half_to_float((uint16_t)A[q][r][k]), sg_half_to_float((uint16_t)B[q][k][c]), acc);
        D[q][r][c] = dt == SG_T_F16 ? sg_double_to_half(acc) : bits_f32(acc);
      }
  for (unsigned lane = 0; lane < 32; lane++) {
    unsigned q = (lane >> 2) & 3, r, c;
    for (unsigned i = 0; i < 8; i++) {
      quadpair_coord(SG_WMMA_C, 0, dt == SG_T_F32, lane, i, &r, &c);
      frag_set(R, rd, dbits, lane, i, D[q][r][c]);
    }
  }
}

void sg_mma_exec(const sg_insn *I, const uint32_t *slot, uint64_t *R) {
  if (I->mod == SG_MMA_M8N8K4) {
    if (I->mod2 == SG_T_F64) mma_m8n8k4_f64(slot, R);
    else mma_m8n8k4_f16(I, slot, R);
    return;
  }
  unsigned M, N, K;
  int shape = I->mod, at = I->mod2, bt = I->space, dt = I->type, ct = I->type2;
  sg_mma_dims(shape, &M, &N, &K);
  unsigned abits = elem_bits(at), bbits = elem_bits(bt), cbits = elem_bits(ct), dbits = elem_bits(dt);
  unsigned na = M * K / 32, nb = K * N / 32, nc = M * N / 32;
  const uint32_t *rd = slot, *ra = slot + SG_WMMA_FRAG, *rb = slot + 2 * SG_WMMA_FRAG, *rc = slot + 3 * SG_WMMA_FRAG;
  uint32_t A[16][32], B[32][8], C[16][8];
  for (unsigned lane = 0; lane < 32; lane++) {
    unsigned r, c;
    for (unsigned i = 0; i < na; i++) { frag_coord(shape, at, SG_WMMA_A, lane, i, &r, &c); A[r][c] = frag_get(R, ra, abits, lane, i); }
    for (unsigned i = 0; i < nb; i++) { frag_coord(shape, bt, SG_WMMA_B, lane, i, &r, &c); B[r][c] = frag_get(R, rb, bbits, lane, i); }
    for (unsigned i = 0; i < nc; i++) { frag_coord(shape, at, SG_WMMA_C, lane, i, &r, &c); C[r][c] = frag_get(R, rc, cbits, lane, i); }
  }
  /* D is computed whole before any register is written: d may name the
   * same registers as c (and as a or b). */
  uint32_t D[16][8];
  int is_int = at == SG_T_S8 || at == SG_T_U8;
  for (unsigned i = 0; i < M; i++)
    for (unsigned j = 0; j < N; j++) {
      if (is_int) {
        int64_t acc = (int32_t)C[i][j];
        for (unsigned k = 0; k < K; k++) {
          int64_t x = at == SG_T_S8 ? (int8_t)A[i][k] : (uint8_t)A[i][k];
          int64_t y = bt == SG_T_S8 ? (int8_t)B[k][j] : (uint8_t)B[k][j];
          acc += x * y;
        }
        /* .satfinite clamps to the s32 range; without it the sum wraps */
        if (I->flags & SG_F_SAT) acc = acc > INT32_MAX ? INT32_MAX : acc < INT32_MIN ? INT32_MIN : acc;
        D[i][j] = (uint32_t)acc;
        continue;
      }
      /* f16/bf16/tf32 products are exact in f32; they accumulate in f32 in
       * k order onto C (converted from f16 when C is f16). */
      float acc = ct == SG_T_F16 ? sg_half_to_float((uint16_t)C[i][j]) : f32_bits(C[i][j]);
      for (unsigned k = 0; k < K; k++) acc = fmaf(in_value(at, A[i][k]), in_value(bt, B[k][j]), acc);
      D[i][j] = dt == SG_T_F16 ? sg_double_to_half(acc) : bits_f32(acc);
    }
  for (unsigned lane = 0; lane < 32; lane++)
    for (unsigned i = 0; i < nc; i++) {
      unsigned r, c;
      frag_coord(shape, at, SG_WMMA_C, lane, i, &r, &c);
      frag_set(R, rd, dbits, lane, i, D[r][c]);
    }
}

/* An 8x8 matrix of 16-bit elements to the warp's fragments of it in one
 * register (d: that register's 32 lanes), and back: each group of four
 * lanes holds one row (transposed: one column), two elements per lane, the
 * lower-numbered one in the low half. */
static void matrix_to_lanes(uint16_t m[8][8], int trans, uint64_t *d) {
  for (unsigned lane = 0; lane < 32; lane++) {
    unsigned r = lane >> 2, c = 2 * (lane & 3);
    uint16_t lo = trans ? m[c][r] : m[r][c];
    uint16_t hi = trans ? m[c + 1][r] : m[r][c + 1];
    d[lane] = (uint32_t)lo | ((uint32_t)hi << 16);
  }
}
static void lanes_to_matrix(const uint64_t *s, int trans, uint16_t m[8][8]) {
  for (unsigned lane = 0; lane < 32; lane++) {
    unsigned r = lane >> 2, c = 2 * (lane & 3);
    uint32_t v = (uint32_t)s[lane];
    if (trans) { m[c][r] = (uint16_t)v; m[c + 1][r] = (uint16_t)(v >> 16); }
    else { m[r][c] = (uint16_t)v; m[r][c + 1] = (uint16_t)(v >> 16); }
  }
}

void sg_ldmatrix_distribute(const sg_insn *I, uint16_t rows[4][8][8], uint64_t *R) {
  for (unsigned q = 0; q < I->vec; q++) matrix_to_lanes(rows[q], I->mod2 & 1, R + (size_t)I->d[q] * 32);
}

void sg_stmatrix_gather(const sg_insn *I, const uint64_t *K, const uint64_t *R, uint16_t rows[4][8][8]) {
  for (unsigned q = 0; q < I->vec; q++) {
    uint32_t x = I->s[q];
    const uint64_t *s = (x & SG_KBIT) ? K + (size_t)(x & ~SG_KBIT) * 32 : R + (size_t)x * 32;
    lanes_to_matrix(s, I->mod2 & 1, rows[q]);
  }
}

void sg_movmatrix(const sg_insn *I, const uint64_t *K, uint64_t *R) {
  uint16_t m[8][8];
  uint32_t x = I->s[0];
  const uint64_t *s = (x & SG_KBIT) ? K + (size_t)(x & ~SG_KBIT) * 32 : R + (size_t)x * 32;
  lanes_to_matrix(s, 0, m);
  matrix_to_lanes(m, 1, R + (size_t)I->d[0] * 32);
}
