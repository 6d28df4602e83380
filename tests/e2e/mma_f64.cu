// rgpu-nvcc-flags: -gencode arch=compute_75,code=[sm_75,compute_75] -gencode arch=compute_80,code=compute_80 -gencode arch=compute_90,code=[sm_90,compute_90]
// The FP64 tensor-core instruction written by hand, as CUTLASS-style double
// GEMMs do: mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 on fragments
// each lane fills by the PTX ISA's layout ("Matrix Fragments for
// mma.m8n8k4 with .f64 floating point type": lane l holds A[l/4][l%4],
// B[l%4][l/4] and C/D[l/4][2(l%4)], C/D[l/4][2(l%4)+1]).
//  1. one mma per tile (8x4 by 4x8 plus an 8x8 C), several tiles, one warp
//     each: every lane's two D values checked exactly;
//  2. an 8x8 tile of a 8x12 by 12x8 product: three mma steps chained
//     through the accumulator, as a GEMM's K loop does.
// The values are multiples of 1/4 small enough that every sum is exact in
// f64, so the hardware's order of adding the four products cannot change a
// digit: the printed lines are the same natively and through rgpu.
// Needs sm_80 code (built with -gencode for compute_80 and compute_90/sm_90
// besides the default); a build without it says SKIP, natively and through
// rgpu.
#include "rgpu_check.h"
#include "rgpu_device_arch.h"
#include <cstdio>
#include <vector>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define HAVE_DMMA 1
#else
#define HAVE_DMMA 0
#endif

// d = a * b + c for one warp's fragments.
__device__ void dmma(double &d0, double &d1, double a, double b, double c0, double c1) {
#if HAVE_DMMA
  asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%4, %5};"
               : "=d"(d0), "=d"(d1) : "d"(a), "d"(b), "d"(c0), "d"(c1));
#endif
}

// Block t multiplies tile t: A row-major 8x4 (a + 32t), B row-major 4x8
// (b + 32t), C and D row-major 8x8 (c + 64t, d + 64t).  k_steps > 1: A is
// 8 x 4k_steps and B 4k_steps x 8, the K loop accumulates in registers.
__global__ void tiles(const double *a, const double *b, const double *c, double *d, int k_steps) {
  unsigned lane = threadIdx.x, t = blockIdx.x;
  unsigned group = lane >> 2, in_group = lane % 4;
  unsigned K = 4 * (unsigned)k_steps;
  const double *A = a + (size_t)t * 8 * K, *B = b + (size_t)t * K * 8, *C = c + (size_t)t * 64;
  double acc0 = C[group * 8 + in_group * 2], acc1 = C[group * 8 + in_group * 2 + 1];
  for (int s = 0; s < k_steps; s++) {
    double fa = A[group * K + 4 * s + in_group];   // A[row l/4][col l%4] of this K step
    double fb = B[(4 * s + in_group) * 8 + group]; // B[row l%4][col l/4]
    dmma(acc0, acc1, fa, fb, acc0, acc1);
  }
  d[(size_t)t * 64 + group * 8 + in_group * 2] = acc0;
  d[(size_t)t * 64 + group * 8 + in_group * 2 + 1] = acc1;
}

static int failures;

// Runs `ntiles` tiles of 8 x 4k_steps by 4k_steps x 8 and compares every
// value of D with the host's sum.
static void check(int ntiles, int k_steps, const char *what) {
  int K = 4 * k_steps;
  std::vector<double> A((size_t)ntiles * 8 * K), B((size_t)ntiles * K * 8), C((size_t)ntiles * 64), D(C.size());
  for (int t = 0; t < ntiles; t++) {
    for (int r = 0; r < 8; r++)
      for (int k = 0; k < K; k++) A[(size_t)t * 8 * K + r * K + k] = ((r * 5 + k * 3 + t * 7) % 13 - 6) * 0.25;
    for (int k = 0; k < K; k++)
      for (int n = 0; n < 8; n++) B[(size_t)t * K * 8 + k * 8 + n] = ((k * 7 + n * 2 + t) % 11 - 5) * 0.5;
    for (int r = 0; r < 8; r++)
      for (int n = 0; n < 8; n++) C[(size_t)t * 64 + r * 8 + n] = (r * 8 + n) * 0.125 - 4 + t;
  }
  double *dA, *dB, *dC, *dD;
  CHECK(cudaMalloc(&dA, A.size() * sizeof(double)));
  CHECK(cudaMalloc(&dB, B.size() * sizeof(double)));
  CHECK(cudaMalloc(&dC, C.size() * sizeof(double)));
  CHECK(cudaMalloc(&dD, D.size() * sizeof(double)));
  CHECK(cudaMemcpy(dA, A.data(), A.size() * sizeof(double), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dB, B.data(), B.size() * sizeof(double), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dC, C.data(), C.size() * sizeof(double), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dD, 0, D.size() * sizeof(double)));
  tiles<<<ntiles, 32>>>(dA, dB, dC, dD, k_steps);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(D.data(), dD, D.size() * sizeof(double), cudaMemcpyDeviceToHost));
  CHECK(cudaFree(dA));
  CHECK(cudaFree(dB));
  CHECK(cudaFree(dC));
  CHECK(cudaFree(dD));
  int bad = 0;
  double checksum = 0;
  for (int t = 0; t < ntiles; t++)
    for (int r = 0; r < 8; r++)
      for (int n = 0; n < 8; n++) {
        double want = C[(size_t)t * 64 + r * 8 + n];
        for (int k = 0; k < K; k++) want += A[(size_t)t * 8 * K + r * K + k] * B[(size_t)t * K * 8 + k * 8 + n];
        double got = D[(size_t)t * 64 + r * 8 + n];
        checksum += got;
        if (got != want) {
          if (bad < 5) std::printf("  %s: tile %d D[%d][%d] = %.17g, want %.17g\n", what, t, r, n, got, want);
          bad++;
        }
      }
  failures += bad;
  std::printf("%s: %d tiles, %d values %s, sum %.6f\n", what, ntiles, ntiles * 64, bad ? "WRONG" : "exact", checksum);
}

int main() {
  int arch = device_code_arch();
  if (arch < 800) {
    std::printf("SKIP mma_f64: built without sm_80 code\n");
    return 0;
  }
  check(4, 1, "m8n8k4 f64 single step");
  check(3, 3, "m8n8k4 f64 K=12 in three steps");
  CHECK(cudaDeviceSynchronize());
  if (failures) {
    std::printf("FAIL mma_f64: %d mismatches\n", failures);
    return 1;
  }
  pass("mma_f64");
  return 0;
}
