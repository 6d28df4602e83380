// Kernels built from CUDA library headers (CUB block primitives, cooperative
// groups): long, template-heavy PTX for the sg_ptx corpus test.
#include <cub/cub.cuh>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;
extern "C" __global__ void cub_reduce(const int *in, int *out) {
  typedef cub::BlockReduce<int, 128> BR;
  __shared__ typename BR::TempStorage tmp;
  int v = in[blockIdx.x * 128 + threadIdx.x];
  int s = BR(tmp).Sum(v);
  if (threadIdx.x == 0) out[blockIdx.x] = s;
}
extern "C" __global__ void cub_scan(const int *in, int *out) {
  typedef cub::BlockScan<int, 128> BS;
  __shared__ typename BS::TempStorage tmp;
  int v = in[threadIdx.x], r;
  BS(tmp).ExclusiveSum(v, r);
  out[threadIdx.x] = r;
}
extern "C" __global__ void cub_radix(int *keys) {
  typedef cub::BlockRadixSort<int, 128, 4> BRS;
  __shared__ typename BRS::TempStorage tmp;
  int k[4];
  for (int i = 0; i < 4; i++) k[i] = keys[threadIdx.x * 4 + i];
  BRS(tmp).Sort(k);
  for (int i = 0; i < 4; i++) keys[threadIdx.x * 4 + i] = k[i];
}
extern "C" __global__ void cg_reduce(const float *in, float *out) {
  cg::thread_block b = cg::this_thread_block();
  cg::thread_block_tile<32> t = cg::tiled_partition<32>(b);
  float v = in[b.thread_rank()];
  float s = cg::reduce(t, v, cg::plus<float>());
  if (t.thread_rank() == 0) atomicAdd(out, s);
  b.sync();
}
