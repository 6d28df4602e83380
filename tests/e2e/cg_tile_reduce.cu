// A templated multi-block reduction with cooperative-groups tiles: each
// thread sums a grid-stride slice, thread_block_tile<32> reduces it (by
// tile.shfl_down or cg::reduce), tile leaders combine in shared memory and
// every block atomically adds its partial.  Checked against a host sum for
// sizes around the block and grid sizes (it was off by exactly n for
// n >= 1024 on softgpu).
#include "rgpu_check.h"
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <vector>

namespace cg = cooperative_groups;

template <typename T>
__device__ T tile_sum_shfl(cg::thread_block_tile<32> tile, T v) {
  for (int off = tile.size() / 2; off > 0; off /= 2) v += tile.shfl_down(v, off);
  return v;
}

template <typename T, bool USE_CG_REDUCE>
__global__ void reduce_kernel(const T *in, T *out, size_t n) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> tile = cg::tiled_partition<32>(block);
  __shared__ T tile_sums[32];
  T sum = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)blockDim.x * gridDim.x) sum += in[i];
  T tsum = USE_CG_REDUCE ? cg::reduce(tile, sum, cg::plus<T>()) : tile_sum_shfl(tile, sum);
  if (tile.thread_rank() == 0) tile_sums[tile.meta_group_rank()] = tsum;
  block.sync();
  if (tile.meta_group_rank() == 0) {
    T v = tile.thread_rank() < tile.meta_group_size() ? tile_sums[tile.thread_rank()] : T(0);
    v = USE_CG_REDUCE ? cg::reduce(tile, v, cg::plus<T>()) : tile_sum_shfl(tile, v);
    if (tile.thread_rank() == 0) atomicAdd(out, v);
  }
}

// The same with the grid-stride loop written on cg::this_grid(), whose
// PTX reads the grid workspace from %envreg1/%envreg2 (softgpu once refused
// the module: "unknown register '%envreg2'").
template <typename T>
__global__ void reduce_grid_kernel(const T *in, T *out, size_t n) {
  cg::grid_group grid = cg::this_grid();
  cg::thread_block_tile<32> tile = cg::tiled_partition<32>(cg::this_thread_block());
  T sum = 0;
  for (size_t i = grid.thread_rank(); i < n; i += grid.size()) sum += in[i];
  sum = cg::reduce(tile, sum, cg::plus<T>());
  if (tile.thread_rank() == 0) atomicAdd(out, sum);
}

// The tile's vote/ballot and coalesced-group reductions beside it: count the
// odd elements, each odd element's thread joining a coalesced group.
__global__ void count_odd(const int *in, unsigned *out, size_t n) {
  cg::thread_block_tile<32> tile = cg::tiled_partition<32>(cg::this_thread_block());
  unsigned cnt = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)blockDim.x * gridDim.x) {
    unsigned odd = tile.ballot(in[i] & 1);
    if (tile.thread_rank() == 0) cnt += __popc(odd);
    if (in[i] & 1) {
      cg::coalesced_group active = cg::coalesced_threads();
      unsigned total = cg::reduce(active, 1u, cg::plus<unsigned>());
      if (active.thread_rank() == 0) atomicAdd(out + 1, total);
    }
  }
  if (tile.thread_rank() == 0) atomicAdd(out, cnt);
}

template <typename T>
static int check_grid(const std::vector<T> &h, const T *din, T *dout, size_t n, int blocks, int threads) {
  T want = 0;
  for (size_t i = 0; i < n; i++) want += h[i];
  CHECK(cudaMemset(dout, 0, sizeof(T)));
  reduce_grid_kernel<T><<<blocks, threads>>>(din, dout, n);
  CHECK(cudaGetLastError());
  T got = 0;
  CHECK(cudaMemcpy(&got, dout, sizeof(T), cudaMemcpyDeviceToHost));
  if (got != want) {
    std::fprintf(stderr, "FAIL this_grid n=%zu <<<%d,%d>>>: got %.17g, want %.17g\n", n, blocks, threads, (double)got,
                 (double)want);
    return 1;
  }
  return 0;
}

template <typename T, bool USE_CG_REDUCE>
static int check(const char *what, const std::vector<T> &h, const T *din, T *dout, size_t n, int blocks, int threads) {
  T want = 0;
  for (size_t i = 0; i < n; i++) want += h[i];
  CHECK(cudaMemset(dout, 0, sizeof(T)));
  reduce_kernel<T, USE_CG_REDUCE><<<blocks, threads>>>(din, dout, n);
  CHECK(cudaGetLastError());
  T got = 0;
  CHECK(cudaMemcpy(&got, dout, sizeof(T), cudaMemcpyDeviceToHost));
  if (got != want) {
    std::fprintf(stderr, "FAIL %s n=%zu <<<%d,%d>>>: got %.17g, want %.17g (diff %.17g)\n", what, n, blocks, threads,
                 (double)got, (double)want, (double)got - (double)want);
    return 1;
  }
  return 0;
}

int main() {
  const size_t sizes[] = {1000, 1024, 1025, 4096, 1u << 20};
  const size_t maxn = 1u << 20;
  std::vector<int> hi(maxn);
  std::vector<unsigned long long> hu(maxn);
  for (size_t i = 0; i < maxn; i++) { hi[i] = 1; hu[i] = (i * 2654435761u) % 1000; }
  int *di;
  unsigned long long *du, *duo;
  int *dio;
  unsigned *dcnt;
  CHECK(cudaMalloc(&di, maxn * sizeof(int)));
  CHECK(cudaMalloc(&du, maxn * sizeof(unsigned long long)));
  CHECK(cudaMalloc(&dio, sizeof(int)));
  CHECK(cudaMalloc(&duo, sizeof(unsigned long long)));
  CHECK(cudaMalloc(&dcnt, 2 * sizeof(unsigned)));
  CHECK(cudaMemcpy(di, hi.data(), maxn * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(du, hu.data(), maxn * sizeof(unsigned long long), cudaMemcpyHostToDevice));
  std::vector<double> hd(maxn);
  std::vector<float> hf(maxn);
  for (size_t i = 0; i < maxn; i++) { hd[i] = (double)(i % 17) * 0.5; hf[i] = (float)(i % 3); }
  double *dd, *ddo;
  float *df, *dfo;
  CHECK(cudaMalloc(&dd, maxn * sizeof(double)));
  CHECK(cudaMalloc(&df, maxn * sizeof(float)));
  CHECK(cudaMalloc(&ddo, sizeof(double)));
  CHECK(cudaMalloc(&dfo, sizeof(float)));
  CHECK(cudaMemcpy(dd, hd.data(), maxn * sizeof(double), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(df, hf.data(), maxn * sizeof(float), cudaMemcpyHostToDevice));
  int bad = 0;
  for (size_t n : sizes) {
    int threads = 256;
    int blocks = (int)((n + threads - 1) / threads);
    if (blocks > 64) blocks = 64;
    bad |= check<int, false>("int shfl_down", hi, di, dio, n, blocks, threads);
    bad |= check<int, true>("int cg::reduce", hi, di, dio, n, blocks, threads);
    bad |= check<unsigned long long, false>("u64 shfl_down", hu, du, duo, n, blocks, threads);
    bad |= check<unsigned long long, true>("u64 cg::reduce", hu, du, duo, n, blocks, threads);
    bad |= check<int, true>("int cg::reduce 1 block", hi, di, dio, n, 1, 1024);
    bad |= check<int, false>("int shfl_down 96 threads", hi, di, dio, n, 3, 96);
    bad |= check_grid<int>(hi, di, dio, n, blocks, threads);
    bad |= check_grid<unsigned long long>(hu, du, duo, n, 5, 128);
    bad |= check<double, false>("double shfl_down", hd, dd, ddo, n, blocks, threads);
    bad |= check<double, true>("double cg::reduce", hd, dd, ddo, n, blocks, threads);
    if (n <= 4096) { // float sums stay exact below 2^24
      bad |= check<float, false>("float shfl_down", hf, df, dfo, n, blocks, threads);
      bad |= check<float, true>("float cg::reduce", hf, df, dfo, n, blocks, threads);
    }
  }
  // odd counts: hu's values mod 2
  std::vector<int> hodd(maxn);
  unsigned want_odd = 0;
  for (size_t i = 0; i < maxn; i++) { hodd[i] = (int)(hu[i] % 7); want_odd += hodd[i] & 1; }
  CHECK(cudaMemcpy(di, hodd.data(), maxn * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dcnt, 0, 2 * sizeof(unsigned)));
  count_odd<<<64, 256>>>(di, dcnt, maxn);
  CHECK(cudaGetLastError());
  unsigned cnt[2];
  CHECK(cudaMemcpy(cnt, dcnt, sizeof cnt, cudaMemcpyDeviceToHost));
  if (cnt[0] != want_odd || cnt[1] != want_odd) {
    std::fprintf(stderr, "FAIL count_odd: ballot %u, coalesced %u, want %u\n", cnt[0], cnt[1], want_odd);
    bad = 1;
  }
  CHECK(cudaFree(di));
  CHECK(cudaFree(du));
  CHECK(cudaFree(dio));
  CHECK(cudaFree(duo));
  CHECK(cudaFree(dcnt));
  CHECK(cudaFree(dd));
  CHECK(cudaFree(df));
  CHECK(cudaFree(ddo));
  CHECK(cudaFree(dfo));
  if (bad) return 1;
  pass("cg_tile_reduce");
  return 0;
}
