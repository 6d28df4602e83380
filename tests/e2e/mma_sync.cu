// rgpu-nvcc-flags: -gencode arch=compute_75,code=[sm_75,compute_75] -gencode arch=compute_80,code=compute_80 -gencode arch=compute_90,code=[sm_90,compute_90]
// Tensor-core PTX written by hand, as CUTLASS-style code and libraries do:
// mma.sync.aligned (m16n8k16 f16/bf16/s8, m16n8k32 s8, m16n8k8 f16/bf16/tf32, m8n8k16
// u8/s8; f32, f16 and s32 accumulators) on fragments whose per-lane layout
// the PTX ISA defines, and
// ldmatrix (x1/x2/x4, .trans) to fill them from shared memory, stmatrix and
// movmatrix (sm_90).
//  1. ldmatrix, stmatrix, movmatrix: every lane's registers, exactly;
//  2. mma on fragments each lane loads by the ISA's formulas, small integers
//     so that every lane's D registers are checked exactly (a layout error
//     anywhere shows);
//  3. a tiled GEMM (one warp per 16x8 tile of C, K in steps of 16, tiles
//     staged in shared memory and loaded with ldmatrix) in f16 and bf16
//     with f32 accumulation, against a host reference with a tolerance.
// Needs sm_80 code (built with -gencode for compute_80 and compute_90/sm_90
// besides the default); a build without it says SKIP, natively and through
// rgpu.
#include "rgpu_check.h"
#include "rgpu_device_arch.h"
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cmath>
#include <cstdint>
#include <vector>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define HAVE_MMA 1
#else
#define HAVE_MMA 0
#endif

__device__ unsigned shared_addr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

// ------------------------------------------------------------- ldmatrix

// 4 matrices of 8x8 16-bit values (in[256], matrix q row r col c at
// q*64 + r*8 + c) through shared memory; every lane writes the registers
// of x4, x4.trans, x2, x2.trans, x1 and x1.trans (11 words).
__global__ void ldmatrix_lanes(const uint16_t *in, uint32_t *out) {
#if HAVE_MMA
  __shared__ __align__(16) uint16_t sm[256];
  unsigned lane = threadIdx.x;
  for (unsigned e = lane; e < 256; e += 32) sm[e] = in[e];
  __syncwarp();
  unsigned row = shared_addr(&sm[lane * 8]); // lane 8q + r: matrix q, row r
  uint32_t r[11];
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[4]), "=r"(r[5]), "=r"(r[6]), "=r"(r[7]) : "r"(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(r[8]), "=r"(r[9]) : "r"(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];" : "=r"(r[10]) : "r"(row));
  for (int i = 0; i < 11; i++) out[lane * 11 + i] = r[i];
#endif
}

// stmatrix (sm_90) and movmatrix: register q of lane l holds elements
// q*64 + 2l and q*64 + 2l + 1, i.e. row l/4, columns 2(l%4) and 2(l%4)+1 of
// matrix q whose element (i, j) is q*64 + 8i + j.  out[0..255]: the four
// matrices stored; out[256..511]: stored with .trans; mov[l]: lane l's
// register after movmatrix.trans of register 0.
__global__ void stmatrix_lanes(uint16_t *out, uint32_t *mov) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ __align__(16) uint16_t sm[256];
  unsigned lane = threadIdx.x;
  uint32_t r[4];
  for (unsigned q = 0; q < 4; q++) r[q] = (q * 64 + 2 * lane) | ((q * 64 + 2 * lane + 1) << 16);
  unsigned row = shared_addr(&sm[lane * 8]);
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
               :: "r"(row), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
  __syncwarp();
  for (unsigned e = lane; e < 256; e += 32) out[e] = sm[e];
  __syncwarp();
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};"
               :: "r"(row), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
  __syncwarp();
  for (unsigned e = lane; e < 256; e += 32) out[256 + e] = sm[e];
  uint32_t d;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(d) : "r"(r[0]));
  mov[lane] = d;
#endif
}

// ------------------------------------------------------- exact fragments

// The ISA's fragment coordinates (groupID = lane / 4, tig = lane % 4).
__host__ __device__ void a16_coord(unsigned lane, unsigned i, unsigned *r, unsigned *c) { // m16n8k16 A, f16/bf16
  unsigned g = lane / 4, t = lane % 4;
  *r = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
  *c = t * 2 + (i & 1) + (i >= 4 ? 8 : 0);
}
__host__ __device__ void b16_coord(unsigned lane, unsigned i, unsigned *r, unsigned *c) { // m16n8k16 B
  unsigned g = lane / 4, t = lane % 4;
  *r = t * 2 + (i & 1) + (i >= 2 ? 8 : 0);
  *c = g;
}
__host__ __device__ void a8_coord(unsigned lane, unsigned i, unsigned *r, unsigned *c) { // m16n8k8 A, f16/bf16
  unsigned g = lane / 4, t = lane % 4;
  *r = i < 2 ? g : g + 8;
  *c = t * 2 + (i & 1);
}
__host__ __device__ void b8_coord(unsigned lane, unsigned i, unsigned *r, unsigned *c) { // m16n8k8 B, f16/bf16
  *r = (lane % 4) * 2 + i;
  *c = lane / 4;
}
__host__ __device__ void a8tf_coord(unsigned lane, unsigned i, unsigned *r, unsigned *c) { // m16n8k8 A, tf32
  unsigned g = lane / 4, t = lane % 4;
  *r = (i == 0 || i == 2) ? g : g + 8;
  *c = i < 2 ? t : t + 4;
}
__host__ __device__ void b8tf_coord(unsigned lane, unsigned i, unsigned *r, unsigned *c) { // m16n8k8 B, tf32
  *r = lane % 4 + (i ? 4 : 0);
  *c = lane / 4;
}
__host__ __device__ void cd_coord(unsigned lane, unsigned i, unsigned *r, unsigned *c) { // C/D of m16n8kK
  unsigned g = lane / 4, t = lane % 4;
  *r = i < 2 ? g : g + 8;
  *c = t * 2 + (i & 1);
}

// A (16 x 16, row-major) and B (16 x 8, row-major) as 16-bit patterns,
// C as float; each lane builds its fragments from the ISA's coordinates.
// Variant: 0 m16n8k16 f16 -> f32, 1 m16n8k16 bf16 -> f32, 2 m16n8k16 f16
// -> f16 (C and D f16), 3 m16n8k8 f16 -> f32, 4 m16n8k8 bf16 -> f32,
// 5 m16n8k8 tf32 -> f32 (A, B as f32 bit patterns in a32/b32).
// Each lane writes its 4 D elements as f32 (f16 D widened) to out[lane*4+i].
__global__ void mma_lanes(int variant, const uint16_t *a16, const uint16_t *b16, const uint32_t *a32,
                          const uint32_t *b32, const float *c, float *out) {
#if HAVE_MMA
  unsigned lane = threadIdx.x, r, k;
  uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
  float cf[4], d[4];
  for (unsigned i = 0; i < 4; i++) {
    cd_coord(lane, i, &r, &k);
    cf[i] = c[r * 8 + k];
  }
  if (variant <= 2) {
    for (unsigned i = 0; i < 8; i++) { a16_coord(lane, i, &r, &k); a[i / 2] |= (uint32_t)a16[r * 16 + k] << (16 * (i % 2)); }
    for (unsigned i = 0; i < 4; i++) { b16_coord(lane, i, &r, &k); b[i / 2] |= (uint32_t)b16[r * 8 + k] << (16 * (i % 2)); }
  } else if (variant <= 4) {
    for (unsigned i = 0; i < 4; i++) { a8_coord(lane, i, &r, &k); a[i / 2] |= (uint32_t)a16[r * 16 + k] << (16 * (i % 2)); }
    for (unsigned i = 0; i < 2; i++) { b8_coord(lane, i, &r, &k); b[0] |= (uint32_t)b16[r * 8 + k] << (16 * i); }
  } else {
    for (unsigned i = 0; i < 4; i++) { a8tf_coord(lane, i, &r, &k); a[i] = a32[r * 16 + k]; }
    for (unsigned i = 0; i < 2; i++) { b8tf_coord(lane, i, &r, &k); b[i] = b32[r * 8 + k]; }
  }
  switch (variant) {
    case 0:
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                   "{%10, %11, %12, %13};"
                   : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(cf[0]), "f"(cf[1]), "f"(cf[2]),
                     "f"(cf[3]));
      break;
    case 1:
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                   "{%10, %11, %12, %13};"
                   : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(cf[0]), "f"(cf[1]), "f"(cf[2]),
                     "f"(cf[3]));
      break;
    case 2: {
      __half2 c01 = __floats2half2_rn(cf[0], cf[1]), c23 = __floats2half2_rn(cf[2], cf[3]);
      uint32_t cc0 = *reinterpret_cast<uint32_t *>(&c01), cc1 = *reinterpret_cast<uint32_t *>(&c23), d0, d1;
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0, %1}, {%2, %3, %4, %5}, {%6, %7}, {%8, %9};"
                   : "=r"(d0), "=r"(d1)
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(cc0), "r"(cc1));
      __half2 h01 = *reinterpret_cast<__half2 *>(&d0), h23 = *reinterpret_cast<__half2 *>(&d1);
      d[0] = __low2float(h01); d[1] = __high2float(h01); d[2] = __low2float(h23); d[3] = __high2float(h23);
      break;
    }
    case 3:
      asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %8, %9, %10};"
                   : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                   : "r"(a[0]), "r"(a[1]), "r"(b[0]), "f"(cf[0]), "f"(cf[1]), "f"(cf[2]), "f"(cf[3]));
      break;
    case 4:
      asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %8, %9, %10};"
                   : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                   : "r"(a[0]), "r"(a[1]), "r"(b[0]), "f"(cf[0]), "f"(cf[1]), "f"(cf[2]), "f"(cf[3]));
      break;
    default:
      asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                   "{%10, %11, %12, %13};"
                   : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(cf[0]), "f"(cf[1]), "f"(cf[2]),
                     "f"(cf[3]));
      break;
  }
  for (unsigned i = 0; i < 4; i++) out[lane * 4 + i] = d[i];
#endif
}

// Integer mma: variant 0 m16n8k16 s8 x s8 (A 16x16, B 16x8, C/D 16x8),
// variant 1 m8n8k16 u8 x s8 (A 8x16, B 16x8, C/D 8x8), variant 2
// m16n8k32 s8 x s8 (A 16x32, B 32x8, C/D 16x8); A and B row-major bytes
// (int_k columns of A), C row-major with 8 columns; each lane writes its D
// elements to out[lane*4 + i].
__host__ __device__ unsigned int_k(int variant) { return variant == 2 ? 32 : 16; }
__host__ __device__ void int_coord(int variant, int which, unsigned lane, unsigned i, unsigned *r, unsigned *c) {
  unsigned g = lane / 4, t = lane % 4;
  if (variant == 2) { // the ISA's m16n8k32 .s8/.u8 fragments
    if (which == 0) { *r = g + 8 * ((i >> 2) & 1); *c = t * 4 + (i & 3) + 16 * (i >> 3); }
    else if (which == 1) { *r = t * 4 + (i & 3) + 16 * (i >> 2); *c = g; }
    else cd_coord(lane, i, r, c);
    return;
  }
  if (which == 0) { *r = variant == 0 && i >= 4 ? g + 8 : g; *c = t * 4 + (i & 3); }
  else if (which == 1) { *r = t * 4 + i; *c = g; }
  else if (variant == 0) cd_coord(lane, i, r, c);
  else { *r = g; *c = t * 2 + i; }
}

__global__ void mma_int_lanes(int variant, const uint8_t *a, const uint8_t *b, const int *c, int *out) {
#if HAVE_MMA
  unsigned lane = threadIdx.x, r, k, K = int_k(variant);
  uint32_t ar[4] = {0, 0, 0, 0}, brr[2] = {0, 0};
  int cr[4], d[4] = {0, 0, 0, 0};
  unsigned na = variant == 1 ? 4 : variant == 0 ? 8 : 16, nb = variant == 2 ? 8 : 4,
           nc = variant == 1 ? 2 : 4;
  for (unsigned i = 0; i < na; i++) { int_coord(variant, 0, lane, i, &r, &k); ar[i / 4] |= (uint32_t)a[r * K + k] << (8 * (i % 4)); }
  for (unsigned i = 0; i < nb; i++) { int_coord(variant, 1, lane, i, &r, &k); brr[i / 4] |= (uint32_t)b[r * 8 + k] << (8 * (i % 4)); }
  for (unsigned i = 0; i < nc; i++) { int_coord(variant, 2, lane, i, &r, &k); cr[i] = c[r * 8 + k]; }
  uint32_t br = brr[0];
  if (variant == 2)
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%10, %11, %12, %13};"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(brr[0]), "r"(brr[1]),
                   "r"(cr[0]), "r"(cr[1]), "r"(cr[2]), "r"(cr[3]));
  else if (variant == 0)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %8, %9, %10};"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(ar[0]), "r"(ar[1]), "r"(br), "r"(cr[0]), "r"(cr[1]), "r"(cr[2]), "r"(cr[3]));
  else
    asm volatile("mma.sync.aligned.m8n8k16.row.col.s32.u8.s8.s32 {%0, %1}, {%2}, {%3}, {%4, %5};"
                 : "=r"(d[0]), "=r"(d[1]) : "r"(ar[0]), "r"(br), "r"(cr[0]), "r"(cr[1]));
  for (unsigned i = 0; i < nc; i++) out[lane * 4 + i] = d[i];
#endif
}

// ------------------------------------------------------------ tiled GEMM

// C (M x N, f32) = A (M x K, row-major) * B, 16-bit inputs.  B_T selects
// B's storage: false = B row-major (K x N), loaded with ldmatrix.trans;
// true = B^T row-major (N x K), loaded with plain ldmatrix.  One warp per
// 16 x 8 tile of C; blocks of 4 warps.
template <bool BF16, bool B_T>
__global__ void gemm_tiles(const uint16_t *A, const uint16_t *B, float *C, int M, int N, int K) {
#if HAVE_MMA
  __shared__ __align__(16) uint16_t sa[4][16 * 16];
  __shared__ __align__(16) uint16_t sb[4][16 * 8];
  unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  unsigned tile = blockIdx.x * 4 + warp;
  unsigned tiles_n = N / 8;
  if (tile >= (unsigned)(M / 16) * tiles_n) return; // whole warps leave together
  unsigned m0 = tile / tiles_n * 16, n0 = tile % tiles_n * 8;
  float acc[4] = {0, 0, 0, 0};
  for (int k0 = 0; k0 < K; k0 += 16) {
    for (unsigned e = lane; e < 256; e += 32) sa[warp][e] = A[(m0 + e / 16) * K + k0 + e % 16];
    for (unsigned e = lane; e < 128; e += 32) {
      if (B_T) sb[warp][e] = B[(n0 + e / 16) * K + k0 + e % 16];  // sb = B^T tile, 8 x 16
      else sb[warp][e] = B[(k0 + e / 8) * N + n0 + e % 8];      // sb = B tile, 16 x 8
    }
    __syncwarp();
    uint32_t a[4], b[2];
    // A: matrices (rows 0-7, cols 0-7), (rows 8-15, cols 0-7), (0-7, 8-15), (8-15, 8-15)
    unsigned q = lane / 8, r = lane % 8;
    unsigned arow = shared_addr(&sa[warp][((q & 1) * 8 + r) * 16 + (q >> 1) * 8]);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3]) : "r"(arow));
    if (B_T) {
      // B^T tile 8 x 16: matrix 0 = its columns 0-7 (k 0-7), matrix 1 = k 8-15
      unsigned brow = shared_addr(&sb[warp][(lane % 8) * 16 + ((lane / 8) & 1) * 8]);
      asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(b[0]), "=r"(b[1]) : "r"(brow));
    } else {
      // B tile 16 x 8: matrix 0 = rows k 0-7, matrix 1 = rows k 8-15, transposed
      unsigned brow = shared_addr(&sb[warp][(lane % 16) * 8]);
      asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];" : "=r"(b[0]), "=r"(b[1]) : "r"(brow));
    }
    if (BF16)
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                   "{%0, %1, %2, %3};"
                   : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                   "{%0, %1, %2, %3};"
                   : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    __syncwarp();
  }
  for (unsigned i = 0; i < 4; i++) {
    unsigned r, c;
    cd_coord(lane, i, &r, &c);
    C[(m0 + r) * N + n0 + c] = acc[i];
  }
#endif
}

// ------------------------------------------------------------------ host

static uint16_t f16_bits(float v) { __half h = __float2half(v); uint16_t u; memcpy(&u, &h, 2); return u; }
static uint16_t bf16_bits(float v) { __nv_bfloat16 h = __float2bfloat16(v); uint16_t u; memcpy(&u, &h, 2); return u; }
static float f16_val(uint16_t u) { __half h; memcpy(&h, &u, 2); return __half2float(h); }
static float bf16_val(uint16_t u) { __nv_bfloat16 h; memcpy(&h, &u, 2); return __bfloat162float(h); }
static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

template <typename T> static T *to_device(const std::vector<T> &h) {
  T *d;
  CHECK(cudaMalloc(&d, h.size() * sizeof(T)));
  CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

static int failures = 0;

static void check_ldmatrix() {
  std::vector<uint16_t> in(256);
  for (unsigned e = 0; e < 256; e++) in[e] = (uint16_t)(e * 3 + 1);
  uint16_t *d_in = to_device(in);
  std::vector<uint32_t> out(32 * 11, 0);
  uint32_t *d_out = to_device(out);
  ldmatrix_lanes<<<1, 32>>>(d_in, d_out);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(out.data(), d_out, out.size() * 4, cudaMemcpyDeviceToHost));
  // register k: matrix q, transposed or not
  const unsigned qs[11] = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 0};
  const bool tr[11] = {false, false, false, false, true, true, true, true, false, false, true};
  int bad = 0;
  for (unsigned l = 0; l < 32; l++)
    for (unsigned k = 0; k < 11; k++) {
      unsigned r = l / 4, c = 2 * (l % 4), q = qs[k];
      unsigned e0 = tr[k] ? q * 64 + c * 8 + r : q * 64 + r * 8 + c;
      unsigned e1 = tr[k] ? q * 64 + (c + 1) * 8 + r : e0 + 1;
      uint32_t want = in[e0] | ((uint32_t)in[e1] << 16);
      if (out[l * 11 + k] != want && bad++ < 5)
        std::printf("MISMATCH ldmatrix lane %u register %u: got 0x%08x want 0x%08x\n", l, k, out[l * 11 + k], want);
    }
  failures += bad;
  CHECK(cudaFree(d_in));
  CHECK(cudaFree(d_out));
}

static void check_stmatrix() {
  std::vector<uint16_t> out(512, 0xffff);
  std::vector<uint32_t> mov(32, 0);
  uint16_t *d_out = to_device(out);
  uint32_t *d_mov = to_device(mov);
  stmatrix_lanes<<<1, 32>>>(d_out, d_mov);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(out.data(), d_out, 512 * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(mov.data(), d_mov, 32 * 4, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (unsigned q = 0; q < 4; q++)
    for (unsigned i = 0; i < 8; i++)
      for (unsigned j = 0; j < 8; j++) {
        unsigned at = q * 64 + i * 8 + j;
        if (out[at] != at && bad++ < 5) std::printf("MISMATCH stmatrix matrix %u (%u,%u): got %u want %u\n", q, i, j, out[at], at);
        unsigned want_t = q * 64 + j * 8 + i;
        if (out[256 + at] != want_t && bad++ < 5)
          std::printf("MISMATCH stmatrix.trans matrix %u (%u,%u): got %u want %u\n", q, i, j, out[256 + at], want_t);
      }
  for (unsigned l = 0; l < 32; l++) {
    unsigned r = l / 4, c = 2 * (l % 4);
    uint32_t want = (8 * c + r) | ((8 * (c + 1) + r) << 16);
    if (mov[l] != want && bad++ < 5) std::printf("MISMATCH movmatrix lane %u: got 0x%08x want 0x%08x\n", l, mov[l], want);
  }
  failures += bad;
  CHECK(cudaFree(d_out));
  CHECK(cudaFree(d_mov));
}

static void check_lanes(int variant, const char *name) {
  // small integers: exact in f16, bf16 and tf32, products and sums exact
  std::vector<float> A(16 * 16), B(16 * 8), Cm(16 * 8);
  for (unsigned r = 0; r < 16; r++)
    for (unsigned k = 0; k < 16; k++) A[r * 16 + k] = (float)((int)((r * 7 + k * 3 + variant) % 9) - 4);
  for (unsigned k = 0; k < 16; k++)
    for (unsigned n = 0; n < 8; n++) B[k * 8 + n] = (float)((int)((k * 5 + n * 11) % 7) - 3);
  for (unsigned r = 0; r < 16; r++)
    for (unsigned n = 0; n < 8; n++) Cm[r * 8 + n] = (float)(r * 8 + n) - 50.0f;
  bool bf = variant == 1 || variant == 4;
  std::vector<uint16_t> a16(256), b16(128);
  std::vector<uint32_t> a32(256), b32(128);
  for (unsigned e = 0; e < 256; e++) { a16[e] = bf ? bf16_bits(A[e]) : f16_bits(A[e]); a32[e] = f32_bits(A[e]); }
  for (unsigned e = 0; e < 128; e++) { b16[e] = bf ? bf16_bits(B[e]) : f16_bits(B[e]); b32[e] = f32_bits(B[e]); }
  uint16_t *da16 = to_device(a16), *db16 = to_device(b16);
  uint32_t *da32 = to_device(a32), *db32 = to_device(b32);
  float *dc = to_device(Cm);
  std::vector<float> out(128, -12345.0f);
  float *dout = to_device(out);
  mma_lanes<<<1, 32>>>(variant, da16, db16, da32, db32, dc, dout);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(out.data(), dout, 128 * 4, cudaMemcpyDeviceToHost));
  unsigned K = variant <= 2 ? 16 : 8;
  int bad = 0;
  for (unsigned l = 0; l < 32; l++)
    for (unsigned i = 0; i < 4; i++) {
      unsigned r, c;
      cd_coord(l, i, &r, &c);
      float want = Cm[r * 8 + c];
      for (unsigned k = 0; k < K; k++) want += A[r * 16 + k] * B[k * 8 + c];
      if (out[l * 4 + i] != want && bad++ < 5)
        std::printf("MISMATCH %s lane %u d%u (row %u col %u): got %g want %g\n", name, l, i, r, c, out[l * 4 + i], want);
    }
  failures += bad;
  CHECK(cudaFree(da16)); CHECK(cudaFree(db16)); CHECK(cudaFree(da32)); CHECK(cudaFree(db32));
  CHECK(cudaFree(dc)); CHECK(cudaFree(dout));
}

static void check_int_lanes(int variant, const char *name) {
  unsigned M = variant == 1 ? 8 : 16, nc = variant == 1 ? 2 : 4, K = int_k(variant);
  std::vector<uint8_t> a(512, 0), b(256);
  std::vector<int> c(128), out(128, -777);
  // A: s8 in -100..100 (variants 0, 2) or u8 in 0..250 (variant 1); B: s8
  for (unsigned r = 0; r < M; r++)
    for (unsigned k = 0; k < K; k++)
      a[r * K + k] = (uint8_t)(variant != 1 ? (int)((r * 37 + k * 11) % 201) - 100 : (int)((r * 53 + k * 29) % 251));
  for (unsigned k = 0; k < K; k++)
    for (unsigned n = 0; n < 8; n++) b[k * 8 + n] = (uint8_t)((int)((k * 13 + n * 7) % 255) - 127);
  for (unsigned e = 0; e < 128; e++) c[e] = (int)e * 1000 - 60000;
  uint8_t *da = to_device(a), *db = to_device(b);
  int *dc = to_device(c), *dout = to_device(out);
  mma_int_lanes<<<1, 32>>>(variant, da, db, dc, dout);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(out.data(), dout, out.size() * sizeof(int), cudaMemcpyDeviceToHost));
  int bad = 0;
  for (unsigned l = 0; l < 32; l++)
    for (unsigned i = 0; i < nc; i++) {
      unsigned r, col;
      int_coord(variant, 2, l, i, &r, &col);
      long long want = c[r * 8 + col];
      for (unsigned k = 0; k < K; k++) {
        int x = variant != 1 ? (int)(int8_t)a[r * K + k] : (int)a[r * K + k];
        want += (long long)x * (int8_t)b[k * 8 + col];
      }
      if (out[l * 4 + i] != want && bad++ < 5)
        std::printf("MISMATCH %s lane %u d%u (row %u col %u): got %d want %lld\n", name, l, i, r, col, out[l * 4 + i], want);
    }
  failures += bad;
  CHECK(cudaFree(da)); CHECK(cudaFree(db)); CHECK(cudaFree(dc)); CHECK(cudaFree(dout));
}

template <bool BF16, bool B_T> static void check_gemm(const char *name) {
  const int M = 64, N = 48, K = 96;
  std::vector<uint16_t> A(M * K), B(K * N);
  std::vector<float> Af(M * K), Bf(K * N); // the values the inputs round to
  unsigned seed = 12345;
  auto next = [&seed]() { seed = seed * 1103515245u + 12345u; return ((seed >> 8) & 0xffff) / 32768.0f - 1.0f; };
  for (int e = 0; e < M * K; e++) {
    A[e] = BF16 ? bf16_bits(next()) : f16_bits(next());
    Af[e] = BF16 ? bf16_val(A[e]) : f16_val(A[e]);
  }
  for (int k = 0; k < K; k++)
    for (int n = 0; n < N; n++) {
      float v = next();
      uint16_t bits = BF16 ? bf16_bits(v) : f16_bits(v);
      Bf[k * N + n] = BF16 ? bf16_val(bits) : f16_val(bits);
      if (B_T) B[n * K + k] = bits; else B[k * N + n] = bits;
    }
  uint16_t *dA = to_device(A), *dB = to_device(B);
  std::vector<float> C(M * N, 0.0f);
  float *dC = to_device(C);
  int tiles = (M / 16) * (N / 8);
  gemm_tiles<BF16, B_T><<<(tiles + 3) / 4, 128>>>(dA, dB, dC, M, N, K);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(C.data(), dC, C.size() * 4, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      double ref = 0, mag = 0;
      for (int k = 0; k < K; k++) {
        ref += (double)Af[m * K + k] * Bf[k * N + n];
        mag += std::fabs((double)Af[m * K + k] * Bf[k * N + n]);
      }
      // products are exact in f32; each of the K additions in f32 is off
      // by at most 2 ulps of the running magnitude (tensor cores truncate)
      double tol = mag * K * 2.4e-7 + 1e-6, err = std::fabs(C[m * N + n] - ref);
      if (err > tol && bad++ < 5) std::printf("MISMATCH %s C[%d][%d]: got %.7g want %.7g\n", name, m, n, C[m * N + n], ref);
    }
  failures += bad;
  CHECK(cudaFree(dA)); CHECK(cudaFree(dB)); CHECK(cudaFree(dC));
}

int main() {
  int arch = device_code_arch();
  if (arch < 800) {
    std::printf("SKIP mma_sync: built without sm_80 code\n");
    return 0;
  }
  check_ldmatrix();
  if (arch >= 900) check_stmatrix(); // sm_90 code: natively on the H200, and on softgpu with RGPU_SOFTGPU_CC=90
  check_lanes(0, "m16n8k16 f16->f32");
  check_lanes(1, "m16n8k16 bf16->f32");
  check_lanes(2, "m16n8k16 f16->f16");
  check_lanes(3, "m16n8k8 f16->f32");
  check_lanes(4, "m16n8k8 bf16->f32");
  check_lanes(5, "m16n8k8 tf32->f32");
  check_int_lanes(0, "m16n8k16 s8*s8->s32");
  check_int_lanes(1, "m8n8k16 u8*s8->s32");
  check_int_lanes(2, "m16n8k32 s8*s8->s32");
  check_gemm<false, false>("gemm f16 (B row-major, ldmatrix.trans)");
  check_gemm<false, true>("gemm f16 (B column-major)");
  check_gemm<true, false>("gemm bf16 (B row-major, ldmatrix.trans)");
  check_gemm<true, true>("gemm bf16 (B column-major)");
  CHECK(cudaDeviceSynchronize());
  if (failures) {
    std::printf("FAIL mma_sync: %d mismatches\n", failures);
    return 1;
  }
  pass("mma_sync");
  return 0;
}
