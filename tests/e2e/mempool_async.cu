// Stream-ordered allocation and memory pools (issue 14): cudaMallocAsync /
// cudaFreeAsync in a pipeline on two streams, an explicit pool with its
// attributes, the default pool, and an allocation too large to succeed.
#include "rgpu_check.h"
#include <vector>

__global__ void fill(int *p, int n, int v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v + i;
}
__global__ void add_into(const int *a, int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] += a[i];
}

int main() {
  int dev = 0;
  CHECK(cudaGetDevice(&dev));
  cudaStream_t s1, s2;
  CHECK(cudaStreamCreate(&s1));
  CHECK(cudaStreamCreate(&s2));
  const int n = 1 << 16;
  int *out;
  CHECK(cudaMalloc(&out, n * sizeof(int)));
  CHECK(cudaMemset(out, 0, n * sizeof(int)));

  // Temporary buffers allocated, used and freed in stream order, many
  // times, small (arena) and large (own allocation) alike.
  long long want_sum = 0;
  for (int it = 0; it < 40; it++) {
    size_t bytes = (it % 2 ? 3 << 20 : n) * sizeof(int);  // 12 MiB or 256 KiB
    int *tmp = nullptr;
    cudaStream_t s = it % 3 ? s1 : s2;
    CHECK(cudaMallocAsync((void **)&tmp, bytes, s));
    EXPECT(tmp != nullptr);
    fill<<<(n + 255) / 256, 256, 0, s>>>(tmp, n, it);
    // out is shared by both streams: order them through s1.
    if (s != s1) {
      cudaEvent_t ev;
      CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
      CHECK(cudaEventRecord(ev, s));
      CHECK(cudaStreamWaitEvent(s1, ev, 0));
      add_into<<<(n + 255) / 256, 256, 0, s1>>>(tmp, out, n);
      CHECK(cudaEventRecord(ev, s1));
      CHECK(cudaStreamWaitEvent(s, ev, 0));
      CHECK(cudaEventDestroy(ev));
    } else {
      add_into<<<(n + 255) / 256, 256, 0, s1>>>(tmp, out, n);
    }
    CHECK(cudaFreeAsync(tmp, s));
    want_sum += it;
  }
  CHECK(cudaStreamSynchronize(s1));
  CHECK(cudaStreamSynchronize(s2));
  std::vector<int> h(n);
  CHECK(cudaMemcpy(h.data(), out, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++) {
    long long want = want_sum + 40LL * i;
    if (h[i] != (int)want) {
      std::fprintf(stderr, "FAIL out[%d] = %d want %lld\n", i, h[i], want);
      return 1;
    }
  }

  // The default pool and its attributes.
  cudaMemPool_t def, cur;
  CHECK(cudaDeviceGetDefaultMemPool(&def, dev));
  CHECK(cudaDeviceGetMemPool(&cur, dev));
  EXPECT(def == cur);
  unsigned long long thr = ~0ull;
  CHECK(cudaMemPoolSetAttribute(def, cudaMemPoolAttrReleaseThreshold, &thr));
  unsigned long long got = 0;
  CHECK(cudaMemPoolGetAttribute(def, cudaMemPoolAttrReleaseThreshold, &got));
  EXPECT(got == ~0ull);
  int reuse = -1;
  CHECK(cudaMemPoolGetAttribute(def, cudaMemPoolReuseAllowOpportunistic, &reuse));
  EXPECT(reuse == 1);
  CHECK(cudaMemPoolTrimTo(def, 0));
  EXPECT_ERR(cudaMemPoolDestroy(def), cudaErrorInvalidValue);

  // An explicit pool: used-memory counters follow its allocations.
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = dev;
  cudaMemPool_t pool;
  CHECK(cudaMemPoolCreate(&pool, &props));
  cudaMemAccessDesc acc = {};
  acc.location = props.location;
  acc.flags = cudaMemAccessFlagsProtReadWrite;
  CHECK(cudaMemPoolSetAccess(pool, &acc, 1));
  cudaMemAccessFlags af;
  CHECK(cudaMemPoolGetAccess(&af, pool, &props.location));
  EXPECT(af == cudaMemAccessFlagsProtReadWrite);
  int *a = nullptr, *b = nullptr;
  CHECK(cudaMallocFromPoolAsync((void **)&a, 1 << 20, pool, s1));
  CHECK(cudaMallocFromPoolAsync((void **)&b, 4 << 20, pool, s1));
  unsigned long long used = 0, high = 0;
  CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  EXPECT(used >= (5u << 20));
  fill<<<(n + 255) / 256, 256, 0, s1>>>(a, n, 7);
  CHECK(cudaMemcpyAsync(b, a, n * sizeof(int), cudaMemcpyDeviceToDevice, s1));
  CHECK(cudaMemcpyAsync(h.data(), b, n * sizeof(int), cudaMemcpyDeviceToHost, s1));
  CHECK(cudaFreeAsync(a, s1));
  CHECK(cudaFreeAsync(b, s1));
  CHECK(cudaStreamSynchronize(s1));
  for (int i = 0; i < n; i++) EXPECT(h[i] == 7 + i);
  CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high));
  EXPECT(used == 0);
  EXPECT(high >= (5u << 20));
  unsigned long long zero = 0;
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
  CHECK(cudaDeviceSetMemPool(dev, pool));
  CHECK(cudaDeviceGetMemPool(&cur, dev));
  EXPECT(cur == pool);
  int *c = nullptr;
  CHECK(cudaMallocAsync((void **)&c, 1000, s2));  // from `pool` now
  CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  EXPECT(used >= 1000);
  CHECK(cudaFreeAsync(c, s2));
  CHECK(cudaDeviceSetMemPool(dev, def));
  CHECK(cudaMemPoolDestroy(pool));

  // Too much memory fails at the call, exactly, as cudaMalloc would.
  size_t free_b = 0, total_b = 0;
  CHECK(cudaMemGetInfo(&free_b, &total_b));
  void *huge = nullptr;
  EXPECT_ERR(cudaMallocAsync(&huge, total_b * 2, s1), cudaErrorMemoryAllocation);
  EXPECT_ERR(cudaGetLastError(), cudaErrorMemoryAllocation);
  CHECK(cudaGetLastError());

  CHECK(cudaStreamSynchronize(s2));
  CHECK(cudaStreamDestroy(s1));
  CHECK(cudaStreamDestroy(s2));
  CHECK(cudaFree(out));
  pass("mempool_async");
  return 0;
}
