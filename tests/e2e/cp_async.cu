// rgpu-nvcc-flags: -gencode arch=compute_75,code=[sm_75,compute_75] -gencode arch=compute_80,code=compute_80 -gencode arch=compute_90,code=sm_90
// Asynchronous global -> shared copies (cp.async on sm_80 and later, which
// this program is built for beside the default): a double-buffered
// pipeline with __pipeline_memcpy_async / __pipeline_commit /
// __pipeline_wait_prior, partial copies whose tail is zero-filled, and
// cooperative groups' memcpy_async + wait.  Every result is exact.
#include "rgpu_check.h"
#include <cooperative_groups.h>
#include <cooperative_groups/memcpy_async.h>
#include <cuda_pipeline.h>
#include <vector>

namespace cg = cooperative_groups;

constexpr int kThreads = 128;

// Each block sums its blocks of kThreads float4 (strided over the grid)
// per thread, staging them in shared memory two at a time: while one
// stage is summed, the next one's copy is in flight.
__global__ void pipelined_sum(const float4 *in, int chunks, float *out) {
  __shared__ float4 stage[2][kThreads];
  int t = threadIdx.x;
  float acc = 0;
  int first = blockIdx.x, step = gridDim.x;
  if (first < chunks) __pipeline_memcpy_async(&stage[0][t], &in[first * kThreads + t], sizeof(float4));
  __pipeline_commit();
  int buf = 0;
  for (int c = first; c < chunks; c += step) {
    int next = c + step;
    if (next < chunks) __pipeline_memcpy_async(&stage[buf ^ 1][t], &in[next * kThreads + t], sizeof(float4));
    __pipeline_commit();
    __pipeline_wait_prior(1); // the stage of chunk c has landed
    __syncthreads();
    // read a neighbour's element too, so the copy must be complete for the
    // whole block, not just this thread
    float4 v = stage[buf][(t + 1) % kThreads];
    acc += v.x + v.y + v.z + v.w;
    __syncthreads();
    buf ^= 1;
  }
  __pipeline_wait_prior(0);
  out[blockIdx.x * kThreads + t] = acc;
}

// 4-byte copies that fetch only the first 4 - zfill bytes and zero the
// rest (zfill = t % 4).
__global__ void zero_fill(const unsigned *in, unsigned *out) {
  __shared__ unsigned s[kThreads];
  int t = threadIdx.x;
  s[t] = 0xdeadbeefu;
  __syncthreads();
  __pipeline_memcpy_async(&s[t], &in[t], sizeof(unsigned), t % 4);
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();
  out[t] = s[(t + 5) % kThreads];
}

// The block copies a tile with cg::memcpy_async and waits for it.
__global__ void cg_copy(const int *in, int *out, int n) {
  extern __shared__ int tile[];
  cg::thread_block block = cg::this_thread_block();
  cg::memcpy_async(block, tile, in + blockIdx.x * n, sizeof(int) * n);
  cg::wait(block);
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[blockIdx.x * n + i] = tile[n - 1 - i] * 2;
}

int main() {
  int failures = 0;
  {
    const int chunks = 37, blocks = 5;
    std::vector<float4> in(chunks * kThreads);
    for (int i = 0; i < chunks * kThreads; i++) in[i] = make_float4(i % 7, i % 5, (i / 3) % 11, 1);
    float4 *d_in;
    float *d_out;
    CHECK(cudaMalloc(&d_in, in.size() * sizeof(float4)));
    CHECK(cudaMalloc(&d_out, blocks * kThreads * sizeof(float)));
    CHECK(cudaMemcpy(d_in, in.data(), in.size() * sizeof(float4), cudaMemcpyHostToDevice));
    pipelined_sum<<<blocks, kThreads>>>(d_in, chunks, d_out);
    CHECK(cudaGetLastError());
    std::vector<float> out(blocks * kThreads);
    CHECK(cudaMemcpy(out.data(), d_out, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
    for (int b = 0; b < blocks; b++)
      for (int t = 0; t < kThreads; t++) {
        float want = 0;
        for (int c = b; c < chunks; c += blocks) {
          const float4 &v = in[c * kThreads + (t + 1) % kThreads];
          want += v.x + v.y + v.z + v.w;
        }
        if (out[b * kThreads + t] != want && failures++ < 5)
          std::printf("MISMATCH pipelined_sum block %d thread %d: got %g want %g\n", b, t, out[b * kThreads + t], want);
      }
    CHECK(cudaFree(d_in));
    CHECK(cudaFree(d_out));
  }
  {
    std::vector<unsigned> in(kThreads);
    for (int i = 0; i < kThreads; i++) in[i] = 0x01020304u * (unsigned)(i + 1) + 0x80808080u;
    unsigned *d_in, *d_out;
    CHECK(cudaMalloc(&d_in, kThreads * sizeof(unsigned)));
    CHECK(cudaMalloc(&d_out, kThreads * sizeof(unsigned)));
    CHECK(cudaMemcpy(d_in, in.data(), kThreads * sizeof(unsigned), cudaMemcpyHostToDevice));
    zero_fill<<<1, kThreads>>>(d_in, d_out);
    CHECK(cudaGetLastError());
    std::vector<unsigned> out(kThreads);
    CHECK(cudaMemcpy(out.data(), d_out, kThreads * sizeof(unsigned), cudaMemcpyDeviceToHost));
    for (int t = 0; t < kThreads; t++) {
      int src = (t + 5) % kThreads, kept = 4 - src % 4;
      unsigned want = kept == 4 ? in[src] : in[src] & ((1u << (8 * kept)) - 1); // little-endian: the low bytes come first
      if (out[t] != want && failures++ < 5) std::printf("MISMATCH zero_fill thread %d: got 0x%08x want 0x%08x\n", t, out[t], want);
    }
    CHECK(cudaFree(d_in));
    CHECK(cudaFree(d_out));
  }
  {
    const int n = 1000, blocks = 3;
    std::vector<int> in(n * blocks);
    for (int i = 0; i < n * blocks; i++) in[i] = i * 3 - 500;
    int *d_in, *d_out;
    CHECK(cudaMalloc(&d_in, in.size() * sizeof(int)));
    CHECK(cudaMalloc(&d_out, in.size() * sizeof(int)));
    CHECK(cudaMemcpy(d_in, in.data(), in.size() * sizeof(int), cudaMemcpyHostToDevice));
    cg_copy<<<blocks, 96, n * sizeof(int)>>>(d_in, d_out, n);
    CHECK(cudaGetLastError());
    std::vector<int> out(in.size());
    CHECK(cudaMemcpy(out.data(), d_out, out.size() * sizeof(int), cudaMemcpyDeviceToHost));
    for (int b = 0; b < blocks; b++)
      for (int i = 0; i < n; i++) {
        int want = in[b * n + n - 1 - i] * 2;
        if (out[b * n + i] != want && failures++ < 5)
          std::printf("MISMATCH cg_copy block %d element %d: got %d want %d\n", b, i, out[b * n + i], want);
      }
    CHECK(cudaFree(d_in));
    CHECK(cudaFree(d_out));
  }
  if (failures) {
    std::printf("FAIL cp_async: %d mismatches\n", failures);
    return 1;
  }
  pass("cp_async");
  return 0;
}
