// rgpu-nvcc-flags: -gencode arch=compute_75,code=[sm_75,compute_75] -gencode arch=compute_80,code=compute_80
// The classic parallel-reduction ladder (interleaved, strided and sequential
// addressing, first add during load, warp-synchronous tails on
// thread_block_tile<32>, grid-stride loops templated on the block size and
// on whether n is a power of two, __shfl_down_sync with masks from
// __ballot_sync, cg::reduce, multi-warp tiles) and the single-pass
// "last block finishes" reduction (__threadfence + atomicInc on a retirement
// counter), written the way the public samples drive them: block and grid
// sizes chosen from n, partial sums reduced in place by further launches
// until one is left.  A cooperative-groups reduction of this kind was off by
// exactly n for n >= 1024 on softgpu (issue 14): these kernels, like the
// samples', shuffle from lanes that do not take part (the second stage of
// kernel 7 under a ballot mask, blocks of fewer than 32 threads in the
// launches over the partial sums), which the hardware reads as 0 and
// softgpu read as stale registers.  Every sum is checked exactly: the data
// are small integers, so float sums are exact too.
#include "rgpu_check.h"
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <vector>

namespace cg = cooperative_groups;

// Dynamic shared memory typed per element type (an extern array cannot be
// declared twice with different types in one translation unit).
template <typename T> struct DynShared {
  __device__ T *get() { extern __shared__ int dyn_shared_words[]; return reinterpret_cast<T *>(dyn_shared_words); }
};

// 0: interleaved addressing, tid % (2*stride) picks the adders.
template <typename T> __global__ void red0(const T *in, T *out, unsigned n) {
  cg::thread_block cta = cg::this_thread_block();
  T *s = DynShared<T>().get();
  unsigned tid = threadIdx.x, i = blockIdx.x * blockDim.x + threadIdx.x;
  s[tid] = i < n ? in[i] : T(0);
  cg::sync(cta);
  for (unsigned st = 1; st < blockDim.x; st *= 2) {
    if (tid % (2 * st) == 0) s[tid] += s[tid + st];
    cg::sync(cta);
  }
  if (tid == 0) out[blockIdx.x] = s[0];
}

// 1: interleaved addressing with a contiguous set of adders.
template <typename T> __global__ void red1(const T *in, T *out, unsigned n) {
  cg::thread_block cta = cg::this_thread_block();
  T *s = DynShared<T>().get();
  unsigned tid = threadIdx.x, i = blockIdx.x * blockDim.x + threadIdx.x;
  s[tid] = i < n ? in[i] : T(0);
  cg::sync(cta);
  for (unsigned st = 1; st < blockDim.x; st *= 2) {
    unsigned at = 2 * st * tid;
    if (at < blockDim.x) s[at] += s[at + st];
    cg::sync(cta);
  }
  if (tid == 0) out[blockIdx.x] = s[0];
}

// 2: sequential addressing.
template <typename T> __global__ void red2(const T *in, T *out, unsigned n) {
  cg::thread_block cta = cg::this_thread_block();
  T *s = DynShared<T>().get();
  unsigned tid = threadIdx.x, i = blockIdx.x * blockDim.x + threadIdx.x;
  s[tid] = i < n ? in[i] : T(0);
  cg::sync(cta);
  for (unsigned st = blockDim.x / 2; st > 0; st >>= 1) {
    if (tid < st) s[tid] += s[tid + st];
    cg::sync(cta);
  }
  if (tid == 0) out[blockIdx.x] = s[0];
}

// 3: each thread adds two elements while loading.
template <typename T> __global__ void red3(const T *in, T *out, unsigned n) {
  cg::thread_block cta = cg::this_thread_block();
  T *s = DynShared<T>().get();
  unsigned tid = threadIdx.x, i = blockIdx.x * (blockDim.x * 2) + threadIdx.x;
  T acc = i < n ? in[i] : T(0);
  if (i + blockDim.x < n) acc += in[i + blockDim.x];
  s[tid] = acc;
  cg::sync(cta);
  for (unsigned st = blockDim.x / 2; st > 0; st >>= 1) {
    if (tid < st) s[tid] = acc = acc + s[tid + st];
    cg::sync(cta);
  }
  if (tid == 0) out[blockIdx.x] = acc;
}

// The last warp's steps on a thread_block_tile<32>, as the samples write
// them: only the first 32 threads of the block take part.
template <typename T, unsigned BS> __device__ void tile_tail(cg::thread_block cta, T *s, T acc, T *out) {
  unsigned tid = threadIdx.x;
  cg::thread_block_tile<32> tile = cg::tiled_partition<32>(cta);
  if (cta.thread_rank() < 32) {
    if (BS >= 64) acc += s[tid + 32];
    for (int off = tile.size() / 2; off > 0; off /= 2) acc += tile.shfl_down(acc, off);
  }
  if (cta.thread_rank() == 0) out[blockIdx.x] = acc;
}

// 4: loop down to 64, then the tile's shuffles.
template <typename T, unsigned BS> __global__ void red4(const T *in, T *out, unsigned n) {
  cg::thread_block cta = cg::this_thread_block();
  T *s = DynShared<T>().get();
  unsigned tid = threadIdx.x, i = blockIdx.x * (BS * 2) + threadIdx.x;
  T acc = i < n ? in[i] : T(0);
  if (i + BS < n) acc += in[i + BS];
  s[tid] = acc;
  cg::sync(cta);
  for (unsigned st = blockDim.x / 2; st > 32; st >>= 1) {
    if (tid < st) s[tid] = acc = acc + s[tid + st];
    cg::sync(cta);
  }
  tile_tail<T, BS>(cta, s, acc, out);
}

// The tree fully unrolled on the block size (a compile-time constant).
template <typename T, unsigned BS> __device__ T unrolled_tree(cg::thread_block cta, T *s, T acc) {
  unsigned tid = threadIdx.x;
  if (BS >= 1024 && tid < 512) s[tid] = acc = acc + s[tid + 512];
  cg::sync(cta);
  if (BS >= 512 && tid < 256) s[tid] = acc = acc + s[tid + 256];
  cg::sync(cta);
  if (BS >= 256 && tid < 128) s[tid] = acc = acc + s[tid + 128];
  cg::sync(cta);
  if (BS >= 128 && tid < 64) s[tid] = acc = acc + s[tid + 64];
  cg::sync(cta);
  return acc;
}

// 5: unrolled tree, then the tile's shuffles.
template <typename T, unsigned BS> __global__ void red5(const T *in, T *out, unsigned n) {
  cg::thread_block cta = cg::this_thread_block();
  T *s = DynShared<T>().get();
  unsigned tid = threadIdx.x, i = blockIdx.x * (BS * 2) + threadIdx.x;
  T acc = i < n ? in[i] : T(0);
  if (i + BS < n) acc += in[i + BS];
  s[tid] = acc;
  cg::sync(cta);
  acc = unrolled_tree<T, BS>(cta, s, acc);
  tile_tail<T, BS>(cta, s, acc, out);
}

// The grid-stride load of kernels 6 and 7: two elements per step when n is
// a power of two (then n is a multiple of 2*BS or smaller than it).
template <typename T, unsigned BS, bool POW2> __device__ T grid_stride_sum(const T *in, unsigned n) {
  T acc = 0;
  unsigned grid = BS * gridDim.x;
  if (POW2) {
    unsigned i = blockIdx.x * BS * 2 + threadIdx.x;
    grid <<= 1;
    while (i < n) {
      acc += in[i];
      if (i + BS < n) acc += in[i + BS];
      i += grid;
    }
  } else {
    for (unsigned i = blockIdx.x * BS + threadIdx.x; i < n; i += grid) acc += in[i];
  }
  return acc;
}

// 6: grid-stride load, unrolled tree, tile shuffles.
template <typename T, unsigned BS, bool POW2> __global__ void red6(const T *in, T *out, unsigned n) {
  cg::thread_block cta = cg::this_thread_block();
  T *s = DynShared<T>().get();
  T acc = grid_stride_sum<T, BS, POW2>(in, n);
  s[threadIdx.x] = acc;
  cg::sync(cta);
  acc = unrolled_tree<T, BS>(cta, s, acc);
  tile_tail<T, BS>(cta, s, acc, out);
}

template <typename T> __device__ T warp_sum(unsigned mask, T v) {
  for (int off = warpSize / 2; off > 0; off /= 2) v += __shfl_down_sync(mask, v, off);
  return v;
}

// 7: warp shuffles with the mask of the lanes a (possibly partial) warp
// has, each warp's sum through shared memory, the first warp finishes with
// a mask from __ballot_sync.
template <typename T, unsigned BS, bool POW2> __global__ void red7(const T *in, T *out, unsigned n) {
  T *s = DynShared<T>().get();
  unsigned tid = threadIdx.x;
  unsigned short_by = BS & 31;
  short_by = short_by > 0 ? 32 - short_by : 0;
  const unsigned mask = 0xffffffffu >> short_by;
  T acc = grid_stride_sum<T, BS, POW2>(in, n);
  acc = warp_sum<T>(mask, acc);
  if (tid % warpSize == 0) s[tid / warpSize] = acc;
  __syncthreads();
  const unsigned nwarps = BS / warpSize > 0 ? BS / warpSize : 1;
  const unsigned lanes = __ballot_sync(mask, tid < nwarps);
  if (tid < nwarps) {
    acc = s[tid];
    acc = warp_sum<T>(lanes, acc);
  }
  if (tid == 0) out[blockIdx.x] = acc;
}

// cg::reduce over tiles of 32 (redux.sync for int, shuffles for float).
template <typename T> __global__ void red_cg(const T *in, T *out, unsigned n) {
  T *s = DynShared<T>().get();
  cg::thread_block cta = cg::this_thread_block();
  unsigned bs = cta.size();
  cg::thread_block_tile<32> tile = cg::tiled_partition<32>(cta);
  T acc = 0;
  for (unsigned i = cta.group_index().x * bs * 2 + threadIdx.x; i < n; i += bs * 2 * gridDim.x) {
    acc += in[i];
    if (i + bs < n) acc += in[i + bs];
  }
  acc = cg::reduce(tile, acc, cg::plus<T>());
  if (tile.thread_rank() == 0) s[tile.meta_group_rank()] = acc;
  cg::sync(cta);
  if (tile.meta_group_rank() == 0) {
    acc = tile.thread_rank() < tile.meta_group_size() ? s[tile.thread_rank()] : T(0);
    acc = cg::reduce(tile, acc, cg::plus<T>());
    if (tile.thread_rank() == 0) out[blockIdx.x] = acc;
  }
}

// cg::reduce over multi-warp tiles of G threads (scratch in shared memory).
template <typename T, unsigned BS, unsigned G> __global__ void red_cg_multi(const T *in, T *out, unsigned n) {
  T *s = DynShared<T>().get();
  __shared__ cg::block_tile_memory<BS> scratch;
  cg::thread_block cta = cg::this_thread_block(scratch);
  auto tile = cg::tiled_partition<G>(cta);
  T acc = 0;
  for (unsigned i = blockIdx.x * BS + threadIdx.x; i < n; i += BS * gridDim.x) acc += in[i];
  acc = cg::reduce(tile, acc, cg::plus<T>());
  if (tile.thread_rank() == 0) s[tile.meta_group_rank()] = acc;
  cg::sync(cta);
  if (threadIdx.x == 0) {
    T t = 0;
    for (unsigned k = 0; k < tile.meta_group_size(); k++) t += s[k];
    out[blockIdx.x] = t;
  }
}

// ------------------------------------------------------------ single pass

__device__ unsigned retired_blocks = 0;

// The block's sum of its grid-stride slice into s[0], warp-synchronously
// in shared memory as the single-pass sample does.
template <unsigned BS> __device__ void block_sum_fenced(volatile float *s, float acc, cg::thread_block cta) {
  unsigned tid = threadIdx.x;
  cg::thread_block_tile<32> tile = cg::tiled_partition<32>(cta);
  s[tid] = acc;
  cg::sync(tile);
  unsigned lane = tid & 31;
  float part = acc;
  for (unsigned k = 16; k > 0; k >>= 1) {
    if (lane < k) {
      part += s[tid + k];
      s[tid] = part;
    }
    cg::sync(tile);
  }
  cg::sync(cta);
  if (cta.thread_rank() == 0) {
    float t = 0;
    for (unsigned k = 0; k < blockDim.x; k += 32) t += s[k];
    s[0] = t;
  }
  cg::sync(cta);
}

template <unsigned BS, bool POW2> __global__ void single_pass(const float *in, float *out, unsigned n) {
  cg::thread_block cta = cg::this_thread_block();
  float *s = DynShared<float>().get();
  block_sum_fenced<BS>(s, grid_stride_sum<float, BS, POW2>(in, n), cta);
  if (threadIdx.x == 0) out[blockIdx.x] = s[0];
  if (gridDim.x > 1) {
    __shared__ bool last;
    if (threadIdx.x == 0) {
      // Make this block's partial visible before taking a ticket.
      __threadfence();
      unsigned ticket = atomicInc(&retired_blocks, gridDim.x);
      last = ticket == gridDim.x - 1;
    }
    cg::sync(cta);
    if (last) {
      float acc = 0;
      for (unsigned i = threadIdx.x; i < gridDim.x; i += BS) acc += out[i];
      block_sum_fenced<BS>(s, acc, cta);
      if (threadIdx.x == 0) {
        out[0] = s[0];
        retired_blocks = 0;
      }
    }
  }
}

// ------------------------------------------------------------ host

static unsigned next_pow2(unsigned x) {
  --x;
  x |= x >> 1; x |= x >> 2; x |= x >> 4; x |= x >> 8; x |= x >> 16;
  return ++x;
}
static bool is_pow2(unsigned x) { return (x & (x - 1)) == 0; }

// Block and grid sizes as the samples pick them for kernel `which`.
static void pick_sizes(int which, unsigned n, unsigned max_threads, unsigned max_blocks, unsigned *threads, unsigned *blocks) {
  if (which < 3) {
    *threads = n < max_threads ? next_pow2(n) : max_threads;
    *blocks = (n + *threads - 1) / *threads;
  } else {
    *threads = n < max_threads * 2 ? next_pow2((n + 1) / 2) : max_threads;
    *blocks = (n + *threads * 2 - 1) / (*threads * 2);
  }
  if (which >= 6 && *blocks > max_blocks) *blocks = max_blocks;
}

template <typename T, unsigned BS> static void launch_bs(int which, unsigned blocks, size_t smem, const T *in, T *out, unsigned n) {
  bool p2 = is_pow2(n);
  switch (which) {
    case 4: red4<T, BS><<<blocks, BS, smem>>>(in, out, n); break;
    case 5: red5<T, BS><<<blocks, BS, smem>>>(in, out, n); break;
    case 6: if (p2) red6<T, BS, true><<<blocks, BS, smem>>>(in, out, n); else red6<T, BS, false><<<blocks, BS, smem>>>(in, out, n); break;
    case 7: if (p2) red7<T, BS, true><<<blocks, BS, smem>>>(in, out, n); else red7<T, BS, false><<<blocks, BS, smem>>>(in, out, n); break;
  }
}

template <typename T> static void launch(int which, unsigned threads, unsigned blocks, const T *in, T *out, unsigned n) {
  // Kernels 4-6 read s[tid + 32] in the last warp even for blocks of 32 or
  // fewer threads: give them room for two blocks' worth.
  size_t smem = threads <= 32 ? 2 * threads * sizeof(T) : threads * sizeof(T);
  if (which == 7) smem = (threads / 32 + 1) * sizeof(T);
  if (which == 8) smem = (threads / 32 + 1) * sizeof(T);
  switch (which) {
    case 0: red0<T><<<blocks, threads, smem>>>(in, out, n); return;
    case 1: red1<T><<<blocks, threads, smem>>>(in, out, n); return;
    case 2: red2<T><<<blocks, threads, smem>>>(in, out, n); return;
    case 3: red3<T><<<blocks, threads, smem>>>(in, out, n); return;
    case 8: red_cg<T><<<blocks, threads, smem>>>(in, out, n); return;
  }
  switch (threads) {
    case 1024: launch_bs<T, 1024>(which, blocks, smem, in, out, n); break;
    case 512: launch_bs<T, 512>(which, blocks, smem, in, out, n); break;
    case 256: launch_bs<T, 256>(which, blocks, smem, in, out, n); break;
    case 128: launch_bs<T, 128>(which, blocks, smem, in, out, n); break;
    case 64: launch_bs<T, 64>(which, blocks, smem, in, out, n); break;
    case 32: launch_bs<T, 32>(which, blocks, smem, in, out, n); break;
    case 16: launch_bs<T, 16>(which, blocks, smem, in, out, n); break;
    case 8: launch_bs<T, 8>(which, blocks, smem, in, out, n); break;
    case 4: launch_bs<T, 4>(which, blocks, smem, in, out, n); break;
    case 2: launch_bs<T, 2>(which, blocks, smem, in, out, n); break;
    case 1: launch_bs<T, 1>(which, blocks, smem, in, out, n); break;
  }
}

static const char *type_name(int) { return "int"; }
static const char *type_name(float) { return "float"; }

static int failures = 0;

template <typename T> static void report(const char *what, int which, unsigned threads, unsigned n, T got, T want) {
  if (got == want) return;
  failures++;
  std::printf("MISMATCH %s kernel %d type %s threads %u n %u: got %.1f want %.1f (diff %.1f)\n", what, which,
              type_name(T()), threads, n, (double)got, (double)want, (double)got - (double)want);
}

// The samples' driver: one launch over the input, then in-place launches
// over the partial sums until one is left.
template <typename T> static void run_ladder(int which, unsigned max_threads, unsigned n, const T *d_in, T *d_out, T want) {
  unsigned threads, blocks;
  pick_sizes(which, n, max_threads, 64, &threads, &blocks);
  launch<T>(which, threads, blocks, d_in, d_out, n);
  CHECK(cudaGetLastError());
  unsigned left = blocks;
  while (left > 1) {
    pick_sizes(which, left, max_threads, 64, &threads, &blocks);
    launch<T>(which, threads, blocks, d_out, d_out, left);
    CHECK(cudaGetLastError());
    left = which < 3 ? (left + threads - 1) / threads : (left + threads * 2 - 1) / (threads * 2);
    if (which >= 6 && left > 64) left = 64;
  }
  T got;
  CHECK(cudaMemcpy(&got, d_out, sizeof got, cudaMemcpyDeviceToHost));
  report<T>("ladder", which, max_threads, n, got, want);
}

// Multi-warp tiles: one launch of blocks of BS threads, partials summed on
// the host.
template <typename T, unsigned BS, unsigned G> static void run_multi(unsigned n, const T *d_in, T *d_out, T want) {
  unsigned blocks = (n + BS - 1) / BS;
  if (blocks > 64) blocks = 64;
  red_cg_multi<T, BS, G><<<blocks, BS, (BS / G + 1) * sizeof(T)>>>(d_in, d_out, n);
  CHECK(cudaGetLastError());
  std::vector<T> part(blocks);
  CHECK(cudaMemcpy(part.data(), d_out, blocks * sizeof(T), cudaMemcpyDeviceToHost));
  T got = 0;
  for (T v : part) got += v;
  report<T>("multi-warp tile", (int)G, BS, n, got, want);
}

template <unsigned BS> static void run_single_pass(unsigned n, const float *d_in, float *d_out, float want) {
  unsigned blocks = (n + BS * 2 - 1) / (BS * 2);
  if (blocks > 64) blocks = 64;
  size_t smem = BS * sizeof(float);
  if (is_pow2(n)) single_pass<BS, true><<<blocks, BS, smem>>>(d_in, d_out, n);
  else single_pass<BS, false><<<blocks, BS, smem>>>(d_in, d_out, n);
  CHECK(cudaGetLastError());
  float got;
  CHECK(cudaMemcpy(&got, d_out, sizeof got, cudaMemcpyDeviceToHost));
  report<float>("single pass", 9, BS, n, got, want);
}

template <typename T> static void run_type(const std::vector<unsigned> &sizes, unsigned max_n) {
  std::vector<T> h(max_n);
  for (unsigned i = 0; i < max_n; i++) h[i] = T((i * 7u + 3u) & 15u);
  T *d_in, *d_out;
  CHECK(cudaMalloc(&d_in, max_n * sizeof(T)));
  CHECK(cudaMalloc(&d_out, max_n * sizeof(T)));
  CHECK(cudaMemcpy(d_in, h.data(), max_n * sizeof(T), cudaMemcpyHostToDevice));
  for (unsigned n : sizes) {
    T want = 0;
    for (unsigned i = 0; i < n; i++) want += h[i];
    const unsigned thread_counts[] = {64, 128, 256, 512, 1024};
    for (unsigned mt : thread_counts) {
      // The big inputs take the samples' default block size only (the
      // interpreter's time goes into them).
      if (n > 4096 && mt != 256) continue;
      for (int which = 0; which <= 8; which++) run_ladder<T>(which, mt, n, d_in, d_out, want);
    }
    run_multi<T, 256, 64>(n, d_in, d_out, want);
    if (n > 4096) continue;
    run_multi<T, 512, 128>(n, d_in, d_out, want);
    run_multi<T, 1024, 256>(n, d_in, d_out, want);
  }
  CHECK(cudaFree(d_in));
  CHECK(cudaFree(d_out));
}

int main() {
  const std::vector<unsigned> sizes = {1, 31, 1000, 1024, 1025, 4096, 1u << 20, (1u << 20) + 3};
  const unsigned max_n = (1u << 20) + 3;
  run_type<int>(sizes, max_n);
  run_type<float>(sizes, max_n);

  std::vector<float> h(max_n);
  for (unsigned i = 0; i < max_n; i++) h[i] = float((i * 7u + 3u) & 15u);
  float *d_in, *d_out;
  CHECK(cudaMalloc(&d_in, max_n * sizeof(float)));
  CHECK(cudaMalloc(&d_out, 64 * sizeof(float)));
  CHECK(cudaMemcpy(d_in, h.data(), max_n * sizeof(float), cudaMemcpyHostToDevice));
  for (unsigned n : sizes) {
    float want = 0;
    for (unsigned i = 0; i < n; i++) want += h[i];
    // Twice each: the retirement counter must be back at 0 after a run.
    for (int rep = 0; rep < 2; rep++) {
      run_single_pass<256>(n, d_in, d_out, want);
      if (n > 4096) continue;
      run_single_pass<64>(n, d_in, d_out, want);
      run_single_pass<128>(n, d_in, d_out, want);
      run_single_pass<512>(n, d_in, d_out, want);
      run_single_pass<1024>(n, d_in, d_out, want);
    }
  }
  CHECK(cudaFree(d_in));
  CHECK(cudaFree(d_out));
  if (failures) {
    std::printf("FAIL reduce_samples: %d mismatches\n", failures);
    return 1;
  }
  pass("reduce_samples");
  return 0;
}
