// Many threads allocating at once (issue 13): cudaMalloc's arena fetches
// its chunks with its lock dropped, and a thread that needs a chunk while
// another fetches one waits for it.  Threads start together (first kernel
// launch loads the module, first property query, first small allocation:
// each a cache some threads must wait for), then allocate, fill, check and
// free small blocks in a loop.  Live blocks never overlap, every byte reads
// back as its thread wrote it, and when all is freed cudaMemGetInfo is back
// where it started (no chunk lost to a race).
#include "rgpu_check.h"
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

__global__ void fill(unsigned char *p, size_t n, unsigned char v) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

struct block {
  uintptr_t base;
  size_t size;
};

int main() {
  const int nthreads = 8, rounds = 60;
  size_t free0 = 0, total = 0;
  CHECK(cudaMemGetInfo(&free0, &total));
  std::atomic<int> arrived{0};
  std::mutex live_mu;
  std::vector<block> live;  // every block handed out and not yet freed
  std::vector<std::thread> ts;
  for (int t = 0; t < nthreads; t++) {
    ts.emplace_back([&, t] {
      arrived++;
      while (arrived.load() < nthreads) std::this_thread::yield();
      fill<<<1, 1>>>(nullptr, 0, 0);  // n = 0: loads the module, writes nothing
      CHECK(cudaGetLastError());
      cudaDeviceProp prop;
      CHECK(cudaGetDeviceProperties(&prop, 0));
      EXPECT(prop.maxThreadsPerBlock > 0);
      std::vector<unsigned char *> mine;
      unsigned char want = (unsigned char)(t + 1);
      std::vector<unsigned char> back(70000);
      for (int r = 0; r < rounds; r++) {
        size_t n = 256 + (size_t)((t * 7919 + r * 104729) % 65536);
        unsigned char *p = nullptr;
        CHECK(cudaMalloc((void **)&p, n));
        EXPECT(((uintptr_t)p & 255) == 0);
        {
          std::lock_guard<std::mutex> g(live_mu);
          for (const block &b : live)
            EXPECT((uintptr_t)p + n <= b.base || b.base + b.size <= (uintptr_t)p);
          live.push_back({(uintptr_t)p, n});
        }
        fill<<<(unsigned)((n + 255) / 256), 256>>>(p, n, want);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpy(back.data(), p, n, cudaMemcpyDeviceToHost));
        for (size_t k = 0; k < n; k++) EXPECT(back[k] == want);
        mine.push_back(p);
        if (r % 3 == 2) {  // free one of ours, keep the rest for a while
          unsigned char *q = mine[mine.size() / 2];
          mine.erase(mine.begin() + (long)(mine.size() / 2));
          {
            std::lock_guard<std::mutex> g(live_mu);
            live.erase(std::find_if(live.begin(), live.end(),
                                    [&](const block &b) { return b.base == (uintptr_t)q; }));
          }
          CHECK(cudaFree(q));
        }
      }
      for (unsigned char *q : mine) {
        {
          std::lock_guard<std::mutex> g(live_mu);
          live.erase(std::find_if(live.begin(), live.end(),
                                  [&](const block &b) { return b.base == (uintptr_t)q; }));
        }
        CHECK(cudaFree(q));
      }
    });
  }
  for (auto &th : ts) th.join();
  EXPECT(live.empty());
  size_t free1 = 0;
  CHECK(cudaMemGetInfo(&free1, &total));
  std::printf("free before %zu after %zu\n", free0, free1);
  EXPECT(free1 == free0);
  pass("threads_malloc");
  return 0;
}
