// rgpu-nvcc-flags: -gencode arch=compute_75,code=[sm_75,compute_75] -gencode arch=compute_80,code=compute_80 -gencode arch=compute_90,code=[sm_90,compute_90]
// mma.sync.aligned.m8n8k4 with .f16 inputs, the Volta-era shape that a warp
// runs as four independent 8x8x4 products, product q on the quad pair of
// lanes 4q..4q+3 (low group) and 16+4q..16+4q+3 (high group).  Each lane
// builds its fragments from whole matrices with the row/column formulas of
// the PTX ISA's "Matrix Fragments for mma.m8n8k4 with .f16 floating point
// type" (A and B row- or column-major, C/D f16 or f32 with their own
// layouts) and writes its D elements back to where the same formulas put
// them; the host checks every element of the four products.  Small integer
// values: every sum is exact, natively and through rgpu.
// Needs sm_80 code (as the other tensor-core programs); a build without it
// says SKIP, natively and through rgpu.
#include "rgpu_check.h"
#include "rgpu_device_arch.h"
#include <cuda_fp16.h>
#include <cstdio>
#include <vector>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define HAVE_MMA 1
#else
#define HAVE_MMA 0
#endif

// (row, col) of element i of `lane`'s fragment: which 0 = A, 1 = B, 2 = C/D.
__device__ void coord(int which, bool col_major, bool f32, unsigned lane, unsigned i, unsigned &row, unsigned &col) {
  bool high = lane >= 16;
  if (which == 0 && !col_major) { row = lane % 4 + (high ? 4 : 0); col = i; }
  else if (which == 0) { row = i % 4 + (high ? 4 : 0); col = lane % 4; }
  else if (which == 1 && !col_major) { row = lane % 4; col = i + (high ? 4 : 0); }
  else if (which == 1) { row = i; col = lane % 4 + (high ? 4 : 0); }
  else if (!f32) { row = lane % 4 + (high ? 4 : 0); col = i; }
  else {
    unsigned x = (lane & 1) + (i & 2);
    row = x + (high ? 4 : 0);
    col = (i & 4) + (lane & 2) + (i & 1);
  }
}

__device__ unsigned pack(__half lo, __half hi) {
  return (unsigned)__half_as_ushort(lo) | ((unsigned)__half_as_ushort(hi) << 16);
}

// A[q] 8x4, B[q] 4x8, C[q] and D[q] 8x8, all row-major, for q = 0..3; D as
// float whatever the accumulator type.
template <bool ACOL, bool BCOL, bool F32>
__global__ void quadpairs(const __half *A, const __half *B, const float *C, float *D) {
  unsigned lane = threadIdx.x, q = (lane % 16) / 4, r, c;
  const __half *a = A + q * 32, *b = B + q * 32;
  const float *cq = C + q * 64;
  (void)cq; // read only by the sm_80 branch
  __half ea[4], eb[4];
  for (unsigned i = 0; i < 4; i++) {
    coord(0, ACOL, false, lane, i, r, c);
    ea[i] = a[r * 4 + c];
    coord(1, BCOL, false, lane, i, r, c);
    eb[i] = b[r * 8 + c];
  }
  unsigned ra[2] = {pack(ea[0], ea[1]), pack(ea[2], ea[3])}, rb[2] = {pack(eb[0], eb[1]), pack(eb[2], eb[3])};
  float out[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#if HAVE_MMA
#define LAYOUT_ASM(AL, BL)                                                                                        \
  if (F32) {                                                                                                      \
    float acc[8];                                                                                                 \
    for (unsigned i = 0; i < 8; i++) { coord(2, false, true, lane, i, r, c); acc[i] = cq[r * 8 + c]; }            \
    asm volatile("mma.sync.aligned.m8n8k4." AL "." BL ".f32.f16.f16.f32 {%0, %1, %2, %3, %4, %5, %6, %7}, "     \
                 "{%8, %9}, {%10, %11}, {%0, %1, %2, %3, %4, %5, %6, %7};"                                         \
                 : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3]), "+f"(acc[4]), "+f"(acc[5]),             \
                   "+f"(acc[6]), "+f"(acc[7])                                                                      \
                 : "r"(ra[0]), "r"(ra[1]), "r"(rb[0]), "r"(rb[1]));                                                \
    for (unsigned i = 0; i < 8; i++) out[i] = acc[i];                                                             \
  } else {                                                                                                        \
    __half h[8];                                                                                                  \
    for (unsigned i = 0; i < 8; i++) { coord(2, false, false, lane, i, r, c); h[i] = __float2half(cq[r * 8 + c]); } \
    unsigned acc[4] = {pack(h[0], h[1]), pack(h[2], h[3]), pack(h[4], h[5]), pack(h[6], h[7])};                   \
    asm volatile("mma.sync.aligned.m8n8k4." AL "." BL ".f16.f16.f16.f16 {%0, %1, %2, %3}, {%4, %5}, {%6, %7}, "   \
                 "{%0, %1, %2, %3};"                                                                               \
                 : "+r"(acc[0]), "+r"(acc[1]), "+r"(acc[2]), "+r"(acc[3])                                          \
                 : "r"(ra[0]), "r"(ra[1]), "r"(rb[0]), "r"(rb[1]));                                                \
    for (unsigned i = 0; i < 8; i++)                                                                              \
      out[i] = __half2float(__ushort_as_half((unsigned short)(acc[i / 2] >> (16 * (i % 2)))));                   \
  }
  if (!ACOL && !BCOL) { LAYOUT_ASM("row", "row") }
  else if (!ACOL) { LAYOUT_ASM("row", "col") }
  else if (!BCOL) { LAYOUT_ASM("col", "row") }
  else { LAYOUT_ASM("col", "col") }
#undef LAYOUT_ASM
#endif
  for (unsigned i = 0; i < 8; i++) {
    coord(2, false, F32, lane, i, r, c);
    D[q * 64 + r * 8 + c] = out[i];
  }
}

static int failures;

template <bool ACOL, bool BCOL, bool F32>
static void check(const char *what) {
  std::vector<__half> A(128), B(128);
  std::vector<float> Af(128), Bf(128), C(256), D(256, -9999.0f);
  for (int q = 0; q < 4; q++) {
    for (int r = 0; r < 8; r++)
      for (int k = 0; k < 4; k++) Af[q * 32 + r * 4 + k] = (float)((r * 3 + k * 5 + q * 7) % 9 - 4);
    for (int k = 0; k < 4; k++)
      for (int n = 0; n < 8; n++) Bf[q * 32 + k * 8 + n] = (float)((k * 11 + n * 3 + q) % 7 - 3);
    for (int r = 0; r < 8; r++)
      for (int n = 0; n < 8; n++) C[q * 64 + r * 8 + n] = (float)(r * 8 + n - 30 + q * 100);
  }
  for (int e = 0; e < 128; e++) { A[e] = __float2half(Af[e]); B[e] = __float2half(Bf[e]); }
  __half *dA, *dB;
  float *dC, *dD;
  CHECK(cudaMalloc(&dA, 128 * sizeof(__half)));
  CHECK(cudaMalloc(&dB, 128 * sizeof(__half)));
  CHECK(cudaMalloc(&dC, 256 * sizeof(float)));
  CHECK(cudaMalloc(&dD, 256 * sizeof(float)));
  CHECK(cudaMemcpy(dA, A.data(), 128 * sizeof(__half), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dB, B.data(), 128 * sizeof(__half), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dC, C.data(), 256 * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dD, D.data(), 256 * sizeof(float), cudaMemcpyHostToDevice));
  quadpairs<ACOL, BCOL, F32><<<1, 32>>>(dA, dB, dC, dD);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(D.data(), dD, 256 * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaFree(dA));
  CHECK(cudaFree(dB));
  CHECK(cudaFree(dC));
  CHECK(cudaFree(dD));
  int bad = 0;
  for (int q = 0; q < 4; q++)
    for (int r = 0; r < 8; r++)
      for (int n = 0; n < 8; n++) {
        float want = C[q * 64 + r * 8 + n];
        for (int k = 0; k < 4; k++) want += Af[q * 32 + r * 4 + k] * Bf[q * 32 + k * 8 + n];
        float got = D[q * 64 + r * 8 + n];
        if (got != want) {
          if (bad < 5) std::printf("  %s: product %d D[%d][%d] = %g, want %g\n", what, q, r, n, got, want);
          bad++;
        }
      }
  failures += bad;
  std::printf("%s: 4 products, 256 values %s\n", what, bad ? "WRONG" : "exact");
}

int main() {
  int arch = device_code_arch();
  if (arch < 800) {
    std::printf("SKIP mma_m8n8k4_f16: built without sm_80 code\n");
    return 0;
  }
  check<false, false, false>("m8n8k4 row.row f16");
  check<false, true, false>("m8n8k4 row.col f16");
  check<true, false, false>("m8n8k4 col.row f16");
  check<true, true, false>("m8n8k4 col.col f16");
  check<false, false, true>("m8n8k4 row.row f32");
  check<false, true, true>("m8n8k4 row.col f32");
  check<true, false, true>("m8n8k4 col.row f32");
  check<true, true, true>("m8n8k4 col.col f32");
  CHECK(cudaDeviceSynchronize());
  if (failures) {
    std::printf("FAIL mma_m8n8k4_f16: %d mismatches\n", failures);
    return 1;
  }
  pass("mma_m8n8k4_f16");
  return 0;
}
