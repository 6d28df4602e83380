// Device code that reads warpSize: nvcc compiles it to the PTX ISA's
// predefined constant WARP_SZ, which softgpu once refused ("unknown symbol
// 'WARP_SZ'").  A warp reduction whose shuffle distances, lane and warp
// numbers all come from warpSize, checked against a host sum, plus the
// special registers nvcc emits for lane masks and warp ids.
#include "rgpu_check.h"
#include <vector>

__global__ void warp_reduce(const int *in, long long *out, int n) {
  __shared__ long long warp_sums[32];
  int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
  long long sum = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) sum += in[i];
  for (int off = warpSize / 2; off > 0; off /= 2) sum += __shfl_down_sync(0xffffffffu, sum, off, warpSize);
  if (lane == 0) warp_sums[warp] = sum;
  __syncthreads();
  int nwarps = (blockDim.x + warpSize - 1) / warpSize;
  if (warp == 0) {
    long long v = lane < nwarps ? warp_sums[lane] : 0;
    for (int off = warpSize / 2; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off, warpSize);
    if (lane == 0) atomicAdd((unsigned long long *)out, (unsigned long long)v);
  }
}

// Per thread: warpSize, and whether %laneid / %lanemask_lt agree with the
// lane computed from threadIdx (for 1-D blocks whose size is a multiple of 32).
__global__ void warp_info(int *out) {
  unsigned laneid, lt;
  asm("mov.u32 %0, %%laneid;" : "=r"(laneid));
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(lt));
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  int lane = threadIdx.x % warpSize;
  out[t] = warpSize * 4 + (laneid == (unsigned)lane) * 2 + (lt == ((1u << lane) - 1u));
}

int main() {
  int dev_warp = 0;
  CHECK(cudaDeviceGetAttribute(&dev_warp, cudaDevAttrWarpSize, 0));
  EXPECT(dev_warp == 32);

  const int n = 50021;
  std::vector<int> h(n);
  long long want = 0;
  for (int i = 0; i < n; i++) { h[i] = (i * 37) % 1001 - 500; want += h[i]; }
  int *din;
  long long *dout;
  CHECK(cudaMalloc(&din, n * sizeof(int)));
  CHECK(cudaMalloc(&dout, sizeof(long long)));
  CHECK(cudaMemcpy(din, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  const int blocks[] = {1, 7, 64}, threads[] = {32, 96, 256};
  for (int b : blocks)
    for (int t : threads) {
      CHECK(cudaMemset(dout, 0, sizeof(long long)));
      warp_reduce<<<b, t>>>(din, dout, n);
      CHECK(cudaGetLastError());
      long long got = 0;
      CHECK(cudaMemcpy(&got, dout, sizeof got, cudaMemcpyDeviceToHost));
      if (got != want) {
        std::fprintf(stderr, "FAIL warp_reduce<<<%d,%d>>>: got %lld, want %lld\n", b, t, got, want);
        return 1;
      }
    }

  const int nt = 4 * 128;
  int *dinfo;
  CHECK(cudaMalloc(&dinfo, nt * sizeof(int)));
  warp_info<<<4, 128>>>(dinfo);
  CHECK(cudaGetLastError());
  std::vector<int> info(nt);
  CHECK(cudaMemcpy(info.data(), dinfo, nt * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < nt; i++)
    if (info[i] != 32 * 4 + 3) {
      std::fprintf(stderr, "FAIL warp_info thread %d: %d (want %d)\n", i, info[i], 32 * 4 + 3);
      return 1;
    }
  CHECK(cudaFree(din));
  CHECK(cudaFree(dout));
  CHECK(cudaFree(dinfo));
  std::printf("sum %lld over %d ints, warpSize %d\n", want, n, dev_warp);
  pass("warpsize_reduce");
  return 0;
}
