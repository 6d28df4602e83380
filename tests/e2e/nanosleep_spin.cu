// Spin-waits with __nanosleep, and cuda::barrier (whose waits compile to
// such spin loops): softgpu once treated nanosleep as a no-op, so a
// spinning warp burned its whole instruction slice before the warp it
// waited for could run (779 ms a launch for a 0.9 ms kernel).  nanosleep
// is now a yield point.  The checks are on results; the time is printed.
#include "rgpu_check.h"
#include <chrono>
#include <cuda/barrier>
#include <vector>

// The last warp of each block computes a value; the block's other warps
// spin on a shared flag (volatile load + __nanosleep) until it is published.
__global__ void spin_on_flag(const int *in, int *out, int work) {
  __shared__ int result;
  __shared__ int flag;
  if (threadIdx.x == 0) flag = 0;
  __syncthreads();
  int last_warp = (blockDim.x - 1) / 32;
  if ((int)threadIdx.x / 32 == last_warp) {
    int acc = 0;
    if (threadIdx.x % 32 == 0) {
      for (int i = 0; i < work; i++) acc += in[(blockIdx.x + i) % 1024] ^ i;
      result = acc;
      __threadfence_block();
      atomicExch(&flag, 1);
    }
  } else {
    while (*(volatile int *)&flag == 0) __nanosleep(100);
  }
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = result + (int)threadIdx.x;
}

// A counter in global memory: warp 0 of each block waits (spinning on
// atomics, not on shared memory) until every warp of its block arrived.
__global__ void spin_on_counter(unsigned *arrived, unsigned *out) {
  unsigned nw = blockDim.x / 32;
  if (threadIdx.x % 32 == 0) atomicAdd(arrived + blockIdx.x, 1u);
  if (threadIdx.x / 32 == 0) {
    if (threadIdx.x % 32 == 0)
      while (atomicAdd(arrived + blockIdx.x, 0u) < nw) __nanosleep(50);
  }
  __syncwarp();
  if (threadIdx.x % 32 == 0) out[blockIdx.x * nw + threadIdx.x / 32] = atomicAdd(arrived + blockIdx.x, 0u);
}

// cuda::barrier phases: each phase every thread adds its value to a shared
// slot, waits, then reads its neighbour's.
__global__ void barrier_phases(int *out, int phases) {
  __shared__ cuda::barrier<cuda::thread_scope_block> bar;
  __shared__ int slots[256];
  if (threadIdx.x == 0) init(&bar, blockDim.x);
  __syncthreads();
  int v = threadIdx.x;
  for (int p = 0; p < phases; p++) {
    slots[threadIdx.x] = v;
    bar.arrive_and_wait();
    v = slots[(threadIdx.x + 1) % blockDim.x] + 1;
    bar.arrive_and_wait();
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

int main() {
  const int blocks = 32, threads = 256, work = 20000;
  std::vector<int> hin(1024);
  for (int i = 0; i < 1024; i++) hin[i] = i * 2654435761u >> 7;
  int *din, *dout;
  CHECK(cudaMalloc(&din, 1024 * sizeof(int)));
  CHECK(cudaMalloc(&dout, blocks * threads * sizeof(int)));
  CHECK(cudaMemcpy(din, hin.data(), 1024 * sizeof(int), cudaMemcpyHostToDevice));
  auto t0 = std::chrono::steady_clock::now();
  spin_on_flag<<<blocks, threads>>>(din, dout, work);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  double ms_flag = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::vector<int> hout(blocks * threads);
  CHECK(cudaMemcpy(hout.data(), dout, hout.size() * sizeof(int), cudaMemcpyDeviceToHost));
  for (int b = 0; b < blocks; b++) {
    int acc = 0;
    for (int i = 0; i < work; i++) acc += hin[(b + i) % 1024] ^ i;
    for (int t = 0; t < threads; t++)
      if (hout[b * threads + t] != acc + t) {
        std::fprintf(stderr, "FAIL spin_on_flag block %d thread %d: %d, want %d\n", b, t, hout[b * threads + t], acc + t);
        return 1;
      }
  }

  unsigned *darr, *dcnt;
  const int nw = threads / 32;
  CHECK(cudaMalloc(&darr, blocks * sizeof(unsigned)));
  CHECK(cudaMalloc(&dcnt, blocks * nw * sizeof(unsigned)));
  CHECK(cudaMemset(darr, 0, blocks * sizeof(unsigned)));
  t0 = std::chrono::steady_clock::now();
  spin_on_counter<<<blocks, threads>>>(darr, dcnt);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  double ms_counter = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::vector<unsigned> hcnt(blocks * nw);
  CHECK(cudaMemcpy(hcnt.data(), dcnt, hcnt.size() * sizeof(unsigned), cudaMemcpyDeviceToHost));
  for (int b = 0; b < blocks; b++)
    if (hcnt[b * nw] != (unsigned)nw) {
      std::fprintf(stderr, "FAIL spin_on_counter block %d: warp 0 saw %u arrivals, want %d\n", b, hcnt[b * nw], nw);
      return 1;
    }

  const int phases = 50;
  t0 = std::chrono::steady_clock::now();
  barrier_phases<<<blocks, threads>>>(dout, phases);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  double ms_barrier = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  CHECK(cudaMemcpy(hout.data(), dout, hout.size() * sizeof(int), cudaMemcpyDeviceToHost));
  for (int b = 0; b < blocks; b++)
    for (int t = 0; t < threads; t++) {
      int want = (t + phases) % threads + phases;
      if (hout[b * threads + t] != want) {
        std::fprintf(stderr, "FAIL barrier_phases block %d thread %d: %d, want %d\n", b, t, hout[b * threads + t], want);
        return 1;
      }
    }
  std::printf("spin_on_flag %.1f ms, spin_on_counter %.1f ms, cuda::barrier %d phases %.1f ms\n", ms_flag, ms_counter,
              phases, ms_barrier);
  CHECK(cudaFree(din));
  CHECK(cudaFree(dout));
  CHECK(cudaFree(darr));
  CHECK(cudaFree(dcnt));
  pass("nanosleep_spin");
  return 0;
}
