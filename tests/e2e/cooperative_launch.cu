// Cooperative launch (issue 14): where the device reports cooperativeLaunch
// the grid-wide barrier kernel runs through cudaLaunchCooperativeKernel and
// cudaLaunchKernelEx(cudaLaunchAttributeCooperative) and gives the right
// sums, and an oversized grid is refused; where it does not (softgpu), both
// calls answer cudaErrorNotSupported, so a program can take its fallback.
// The output is the same natively and through rgpu on the same device.
#include "rgpu_check.h"
#include <vector>

// Phase 1 writes per-block values, a grid-wide barrier, phase 2 reads every
// block's.  The barrier is written by hand (one atomic counter, reset before
// each launch) rather than with cooperative_groups: it is correct exactly
// when every block is resident at once, which is what a cooperative launch
// guarantees, and the module stays loadable everywhere.
__global__ void two_phase(int *partial, int *out, int nblocks, unsigned *arrived) {
  if (threadIdx.x == 0) {
    partial[blockIdx.x] = blockIdx.x + 1;
    __threadfence();
    atomicAdd(arrived, 1u);
    while (atomicAdd(arrived, 0u) < (unsigned)nblocks) {
    }
    __threadfence();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int s = 0;
    for (int b = 0; b < nblocks; b++) s += ((volatile int *)partial)[b];
    out[blockIdx.x] = s;
  }
}

// A plain kernel: the fallback a program uses without cooperative launch.
__global__ void phase1(int *partial) { if (threadIdx.x == 0) partial[blockIdx.x] = blockIdx.x + 1; }
__global__ void phase2(const int *partial, int *out, int nblocks) {
  if (threadIdx.x == 0) {
    int s = 0;
    for (int b = 0; b < nblocks; b++) s += partial[b];
    out[blockIdx.x] = s;
  }
}

int main() {
  int dev = 0, coop = 0, sms = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  int per_sm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, two_phase, 128, 0));
  EXPECT(per_sm >= 1);
  int nblocks = sms < 8 ? sms : 8;
  int *partial, *out;
  unsigned *arrived;
  CHECK(cudaMalloc(&partial, 4096 * sizeof(int)));
  CHECK(cudaMalloc(&out, 4096 * sizeof(int)));
  CHECK(cudaMalloc(&arrived, sizeof(unsigned)));
  CHECK(cudaMemset(arrived, 0, sizeof(unsigned)));
  void *args[] = {&partial, &out, &nblocks, &arrived};
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeCooperative;
  attr.val.cooperative = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(nblocks);
  cfg.blockDim = dim3(128);
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  std::vector<int> h(nblocks < 4 ? 4 : nblocks);
  const int want = nblocks * (nblocks + 1) / 2;
  if (coop) {
    CHECK(cudaLaunchCooperativeKernel((const void *)two_phase, dim3(nblocks), dim3(128), args, 0, 0));
    CHECK(cudaMemcpy(h.data(), out, nblocks * sizeof(int), cudaMemcpyDeviceToHost));
    for (int b = 0; b < nblocks; b++) EXPECT(h[b] == want);
    CHECK(cudaMemset(out, 0, nblocks * sizeof(int)));
    CHECK(cudaMemset(arrived, 0, sizeof(unsigned)));
    CHECK(cudaLaunchKernelExC(&cfg, (const void *)two_phase, args));
    CHECK(cudaMemcpy(h.data(), out, nblocks * sizeof(int), cudaMemcpyDeviceToHost));
    for (int b = 0; b < nblocks; b++) EXPECT(h[b] == want);
    // Far more blocks than can be co-resident.
    int too_many = per_sm * sms * 4 + 1;
    EXPECT_ERR(cudaLaunchCooperativeKernel((const void *)two_phase, dim3(too_many), dim3(128), args, 0, 0),
               cudaErrorCooperativeLaunchTooLarge);
    EXPECT_ERR(cudaGetLastError(), cudaErrorCooperativeLaunchTooLarge);
    std::printf("cooperative launch: supported\n");
  } else {
    EXPECT_ERR(cudaLaunchCooperativeKernel((const void *)two_phase, dim3(nblocks), dim3(128), args, 0, 0),
               cudaErrorNotSupported);
    EXPECT_ERR(cudaGetLastError(), cudaErrorNotSupported);
    EXPECT_ERR(cudaLaunchKernelExC(&cfg, (const void *)two_phase, args), cudaErrorNotSupported);
    EXPECT_ERR(cudaGetLastError(), cudaErrorNotSupported);
    phase1<<<nblocks, 128>>>(partial);
    phase2<<<nblocks, 128>>>(partial, out, nblocks);
    CHECK(cudaMemcpy(h.data(), out, nblocks * sizeof(int), cudaMemcpyDeviceToHost));
    for (int b = 0; b < nblocks; b++) EXPECT(h[b] == want);
    std::printf("cooperative launch: not supported, fallback used\n");
  }
  // cudaLaunchKernelEx without attributes is a plain launch.
  cudaLaunchConfig_t plain = {};
  plain.gridDim = dim3(nblocks);
  plain.blockDim = dim3(128);
  void *args1[] = {&partial};
  CHECK(cudaMemset(partial, 0, nblocks * sizeof(int)));
  CHECK(cudaLaunchKernelExC(&plain, (const void *)phase1, args1));
  CHECK(cudaMemcpy(h.data(), partial, nblocks * sizeof(int), cudaMemcpyDeviceToHost));
  for (int b = 0; b < nblocks; b++) EXPECT(h[b] == b + 1);
  // A thread block cluster (2 blocks) where the device launches clusters.
  int clusters = 0;
  CHECK(cudaDeviceGetAttribute(&clusters, cudaDevAttrClusterLaunch, dev));
  cudaLaunchAttribute cl;
  cl.id = cudaLaunchAttributeClusterDimension;
  cl.val.clusterDim.x = 2;
  cl.val.clusterDim.y = 1;
  cl.val.clusterDim.z = 1;
  cudaLaunchConfig_t ccfg = {};
  ccfg.gridDim = dim3(4);
  ccfg.blockDim = dim3(128);
  ccfg.attrs = &cl;
  ccfg.numAttrs = 1;
  CHECK(cudaMemset(partial, 0, 4 * sizeof(int)));
  // Clusters need code built for compute capability 9.0 or later (this
  // file is built for nvcc's default target): run only such code.
  cudaFuncAttributes fa;
  CHECK(cudaFuncGetAttributes(&fa, phase1));
  if (clusters && fa.ptxVersion >= 90) {
    CHECK(cudaLaunchKernelExC(&ccfg, (const void *)phase1, args1));
    CHECK(cudaMemcpy(h.data(), partial, 4 * sizeof(int), cudaMemcpyDeviceToHost));
    for (int b = 0; b < 4; b++) EXPECT(h[b] == b + 1);
  } else if (!clusters) {
    EXPECT_ERR(cudaLaunchKernelExC(&ccfg, (const void *)phase1, args1), cudaErrorNotSupported);
    EXPECT_ERR(cudaGetLastError(), cudaErrorNotSupported);
  }
  CHECK(cudaFree(partial));
  CHECK(cudaFree(out));
  CHECK(cudaFree(arrived));
  pass("cooperative_launch");
  return 0;
}
