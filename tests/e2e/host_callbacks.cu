// Host callbacks (cudaLaunchHostFunc, cudaStreamAddCallback): they run in
// this process when the stream reaches them, in stream order, and the
// stream waits for them: work after a callback (events, copies on the
// legacy stream) completes only after the callback has returned.
#include "rgpu_check.h"
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

__global__ void fill(int *p, int n, int v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

static std::mutex g_mu;
static std::vector<int> g_log;
static void log_id(void *arg) {
  std::lock_guard<std::mutex> l(g_mu);
  g_log.push_back((int)(intptr_t)arg);
}

static std::atomic<int> g_slow_done{0};
static void slow(void *) {
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  g_slow_done = 1;
}

static std::atomic<int> g_flag{0};
static void set_flag(void *) { g_flag = 1; }

static std::atomic<int> g_lasterr{-1};
static void query_in_callback(void *) {
  // Harmless runtime queries must not deadlock inside a callback.
  g_lasterr = (int)cudaGetLastError();
}

static cudaStream_t g_seen_stream;
static cudaError_t g_seen_status = cudaErrorUnknown;
static void CUDART_CB stream_cb(cudaStream_t s, cudaError_t st, void *arg) {
  g_seen_stream = s;
  g_seen_status = st;
  log_id(arg);
}

static double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main() {
  const int n = 1 << 12;
  int *d;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  cudaStream_t s[3];
  for (auto &x : s) CHECK(cudaStreamCreate(&x));

  // 1. Order: callbacks of one stream run in the order they were queued,
  //    interleaved with kernels; cudaStreamAddCallback gets its stream.
  for (int k = 0; k < 5; k++) {
    fill<<<(n + 255) / 256, 256, 0, s[0]>>>(d, n, k);
    CHECK(cudaLaunchHostFunc(s[0], log_id, (void *)(intptr_t)(k + 1)));
  }
  CHECK(cudaStreamAddCallback(s[0], stream_cb, (void *)(intptr_t)6, 0));
  EXPECT_ERR(cudaStreamAddCallback(s[0], stream_cb, nullptr, 1), cudaErrorInvalidValue);
  CHECK(cudaStreamSynchronize(s[0]));
  {
    std::lock_guard<std::mutex> l(g_mu);
    EXPECT(g_log.size() == 6);
    for (int k = 0; k < 6; k++) EXPECT(g_log[k] == k + 1);
  }
  EXPECT(g_seen_stream == s[0]);
  EXPECT(g_seen_status == cudaSuccess);

  // 2. The stream waits: an event recorded after a slow callback is not
  //    complete while the callback sleeps, and a synchronize returns after it.
  double t0 = now_s();
  cudaEvent_t ev;
  CHECK(cudaEventCreate(&ev));
  CHECK(cudaLaunchHostFunc(s[1], slow, nullptr));
  CHECK(cudaEventRecord(ev, s[1]));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_ERR(cudaEventQuery(ev), cudaErrorNotReady);
  EXPECT(g_slow_done == 0);
  CHECK(cudaEventSynchronize(ev));
  EXPECT(g_slow_done == 1);
  EXPECT(now_s() - t0 >= 0.29);

  // 3. The legacy stream waits for blocking streams, callbacks included: a
  //    synchronous copy after a slow callback on s[2] returns after it.
  g_slow_done = 0;
  fill<<<(n + 255) / 256, 256, 0, s[2]>>>(d, n, 42);
  CHECK(cudaLaunchHostFunc(s[2], slow, nullptr));
  std::vector<int> h(n, 0);
  CHECK(cudaMemcpy(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT(g_slow_done == 1);
  for (int i = 0; i < n; i++) EXPECT(h[i] == 42);

  // 4. A callback runs even when no thread synchronizes: spin on its flag.
  CHECK(cudaLaunchHostFunc(s[0], set_flag, nullptr));
  double t1 = now_s();
  while (!g_flag && now_s() - t1 < 10) std::this_thread::yield();
  EXPECT(g_flag == 1);

  // 5. cudaGetLastError inside a callback neither deadlocks nor fails.
  CHECK(cudaLaunchHostFunc(s[1], query_in_callback, nullptr));
  CHECK(cudaStreamSynchronize(s[1]));
  EXPECT(g_lasterr == (int)cudaSuccess);

  // 6. Many callbacks across streams all run, each stream in order.
  {
    std::lock_guard<std::mutex> l(g_mu);
    g_log.clear();
  }
  for (int k = 0; k < 60; k++) CHECK(cudaLaunchHostFunc(s[k % 3], log_id, (void *)(intptr_t)k));
  CHECK(cudaDeviceSynchronize());
  {
    std::lock_guard<std::mutex> l(g_mu);
    EXPECT(g_log.size() == 60);
    int last[3] = {-1, -1, -1};
    for (int v : g_log) {
      EXPECT(v > last[v % 3]);
      last[v % 3] = v;
    }
  }

  // 7. cudaFree while a stream still waits in a slow callback: it waits
  //    for the device as on a GPU, and nothing deadlocks.
  g_slow_done = 0;
  void *big = nullptr;
  CHECK(cudaMalloc(&big, 8u << 20));
  CHECK(cudaMemsetAsync(big, 1, 8u << 20, s[2]));
  CHECK(cudaLaunchHostFunc(s[2], slow, nullptr));
  CHECK(cudaFree(big));
  CHECK(cudaDeviceSynchronize());
  EXPECT(g_slow_done == 1);

  CHECK(cudaEventDestroy(ev));
  for (auto &x : s) CHECK(cudaStreamDestroy(x));
  CHECK(cudaFree(d));
  pass("host_callbacks");
  return 0;
}
