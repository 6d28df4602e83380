// Warp-shuffle reduction with atomicAdd, a histogram with shared-memory
// atomics, and a block-wide inclusive scan.
#include "rgpu_check.h"
#include <vector>

__global__ void reduce_sum(const int *in, unsigned long long *out, int n) {
  int sum = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) sum += in[i];
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, off);
  __shared__ int warp_sums[32];
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = sum;
  __syncthreads();
  if (warp == 0) {
    int v = lane < (blockDim.x + 31) / 32 ? warp_sums[lane] : 0;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    if (lane == 0) atomicAdd(out, (unsigned long long)v);
  }
}

__global__ void histogram(const unsigned char *in, unsigned *bins, int n) {
  __shared__ unsigned local[256];
  for (int i = threadIdx.x; i < 256; i += blockDim.x) local[i] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    atomicAdd(&local[in[i]], 1u);
  __syncthreads();
  for (int i = threadIdx.x; i < 256; i += blockDim.x) atomicAdd(&bins[i], local[i]);
}

// Hillis-Steele inclusive scan of one block of 512 elements.
__global__ void scan_block(const int *in, int *out) {
  __shared__ int buf[2][512];
  int t = threadIdx.x, cur = 0;
  buf[0][t] = in[blockIdx.x * 512 + t];
  __syncthreads();
  for (int off = 1; off < 512; off <<= 1) {
    int v = buf[cur][t];
    if (t >= off) v += buf[cur][t - off];
    buf[1 - cur][t] = v;
    cur = 1 - cur;
    __syncthreads();
  }
  out[blockIdx.x * 512 + t] = buf[cur][t];
}

int main() {
  const int n = 100003;
  std::vector<int> v(n);
  long long want = 0;
  for (int i = 0; i < n; i++) { v[i] = (i * 37) % 1001 - 500; want += v[i]; }
  int *dv;
  unsigned long long *dsum, sum = 0;
  CHECK(cudaMalloc(&dv, n * 4));
  CHECK(cudaMalloc(&dsum, 8));
  CHECK(cudaMemcpy(dv, v.data(), n * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dsum, 0, 8));
  reduce_sum<<<40, 256>>>(dv, dsum, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(&sum, dsum, 8, cudaMemcpyDeviceToHost));
  if ((long long)sum != want) {
    std::fprintf(stderr, "FAIL reduce: %lld want %lld\n", (long long)sum, want);
    return 1;
  }
  std::vector<unsigned char> bytes(n);
  std::vector<unsigned> hb(256, 0), got(256);
  for (int i = 0; i < n; i++) { bytes[i] = (unsigned char)((i * i + 3 * i) & 0xff); hb[bytes[i]]++; }
  unsigned char *db;
  unsigned *dbins;
  CHECK(cudaMalloc(&db, n));
  CHECK(cudaMalloc(&dbins, 256 * 4));
  CHECK(cudaMemcpy(db, bytes.data(), n, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dbins, 0, 256 * 4));
  histogram<<<16, 128>>>(db, dbins, n);
  CHECK(cudaMemcpy(got.data(), dbins, 256 * 4, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 256; i++) EXPECT(got[i] == hb[i]);
  const int blocks = 4;
  std::vector<int> sin(blocks * 512), sout(blocks * 512);
  for (int i = 0; i < blocks * 512; i++) sin[i] = (i % 9) - 3;
  int *dsin, *dsout;
  CHECK(cudaMalloc(&dsin, sin.size() * 4));
  CHECK(cudaMalloc(&dsout, sin.size() * 4));
  CHECK(cudaMemcpy(dsin, sin.data(), sin.size() * 4, cudaMemcpyHostToDevice));
  scan_block<<<blocks, 512>>>(dsin, dsout);
  CHECK(cudaMemcpy(sout.data(), dsout, sin.size() * 4, cudaMemcpyDeviceToHost));
  for (int b = 0; b < blocks; b++) {
    int acc = 0;
    for (int t = 0; t < 512; t++) {
      acc += sin[b * 512 + t];
      EXPECT(sout[b * 512 + t] == acc);
    }
  }
  CHECK(cudaFree(dv)); CHECK(cudaFree(dsum)); CHECK(cudaFree(db)); CHECK(cudaFree(dbins));
  CHECK(cudaFree(dsin)); CHECK(cudaFree(dsout));
  pass("reduce_hist_scan");
  return 0;
}
