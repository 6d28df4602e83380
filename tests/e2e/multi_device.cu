// Several GPUs of one server (issue 19): per-device memory, kernels on the
// current device, streams and events that belong to their device, peer
// access and its errors, peer copies (sync and async, both directions,
// checked byte for byte), cudaMemcpyDefault between devices, pointer
// attributes, and two host threads each driving its own device at once.
//
// Prints only what holds on any machine with two or more GPUs (whether the
// pair can map each other's memory is checked but not printed); with fewer
// it prints a SKIP line and exits 0.
#include "rgpu_check.h"
#include <atomic>
#include <thread>
#include <vector>

__global__ void fill(unsigned char *p, size_t n, int seed) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) p[i] = (unsigned char)(i * 7 + seed * 31 + (i >> 8));
}

// Reads another device's memory directly (needs peer access).
__global__ void add_from_peer(int *dst, const int *peer_src, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] += peer_src[i];
}

__global__ void scale(int *p, int n, int k) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = p[i] * k + k;
}

static unsigned char expected_byte(size_t i, int seed) {
  return (unsigned char)(i * 7 + seed * 31 + (i >> 8));
}

static void check_pattern(const unsigned char *h, size_t n, int seed, const char *what) {
  for (size_t i = 0; i < n; i++)
    if (h[i] != expected_byte(i, seed)) {
      std::fprintf(stderr, "FAIL %s: byte %zu is %u, expected %u\n", what, i, h[i],
                   expected_byte(i, seed));
      std::exit(1);
    }
}

int main() {
  int count = 0;
  cudaError_t ce = cudaGetDeviceCount(&count);
  if (ce != cudaSuccess || count < 2) {
    std::printf("SKIP multi_device: needs 2 devices\n");
    return 0;
  }
  std::printf("devices >= 2\n");

  // ---- per-device properties, memory and kernels --------------------------
  const size_t n = (1 << 20) + 333; // not a multiple of anything convenient
  unsigned char *buf[2];
  unsigned char *h = nullptr;
  CHECK(cudaMallocHost(&h, n));
  for (int d = 0; d < 2; d++) {
    CHECK(cudaSetDevice(d));
    int cur = -1;
    CHECK(cudaGetDevice(&cur));
    EXPECT(cur == d);
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, d));
    EXPECT(prop.totalGlobalMem > 0 && prop.multiProcessorCount > 0);
    EXPECT(prop.unifiedAddressing == 1);
    size_t fr = 0, tot = 0;
    CHECK(cudaMemGetInfo(&fr, &tot));
    EXPECT(tot > 0 && fr <= tot);
    CHECK(cudaMalloc(&buf[d], n));
    fill<<<(unsigned)((n + 255) / 256), 256>>>(buf[d], n, d + 1);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    cudaPointerAttributes a;
    CHECK(cudaPointerGetAttributes(&a, buf[d] + 100));
    EXPECT(a.type == cudaMemoryTypeDevice);
    EXPECT(a.device == d);
  }
  // Read back with the other device current: a copy finds its memory.
  for (int d = 0; d < 2; d++) {
    CHECK(cudaSetDevice(1 - d));
    CHECK(cudaMemcpy(h, buf[d], n, cudaMemcpyDeviceToHost));
    check_pattern(h, n, d + 1, "kernel result read with the other device current");
  }
  std::printf("kernels and memory on each device ok\n");

  // ---- peer access: CUDA's answers and errors -----------------------------
  int can_self = -1, can01 = -1, can10 = -1;
  CHECK(cudaDeviceCanAccessPeer(&can_self, 0, 0));
  EXPECT(can_self == 0);
  CHECK(cudaDeviceCanAccessPeer(&can01, 0, 1));
  CHECK(cudaDeviceCanAccessPeer(&can10, 1, 0));
  EXPECT(can01 == 0 || can01 == 1);
  EXPECT_ERR(cudaDeviceCanAccessPeer(&can01, 0, count), cudaErrorInvalidDevice);
  (void)cudaGetLastError();
  CHECK(cudaSetDevice(0));
  EXPECT_ERR(cudaDeviceEnablePeerAccess(0, 0), cudaErrorInvalidDevice);
  (void)cudaGetLastError();
  EXPECT_ERR(cudaDeviceEnablePeerAccess(count, 0), cudaErrorInvalidDevice);
  (void)cudaGetLastError();
  EXPECT_ERR(cudaDeviceEnablePeerAccess(1, 1), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  if (can01) {
    CHECK(cudaDeviceEnablePeerAccess(1, 0));
    EXPECT_ERR(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
    (void)cudaGetLastError();
    CHECK(cudaDeviceDisablePeerAccess(1));
    EXPECT_ERR(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);
    (void)cudaGetLastError();
  }
  if (can10) {
    // Device 1 reads device 0's memory in a kernel.
    const int m = 4096;
    int *a0, *a1;
    std::vector<int> ha(m), hb(m);
    for (int i = 0; i < m; i++) ha[i] = i * 5 - 7, hb[i] = 1000 + i;
    CHECK(cudaSetDevice(0));
    CHECK(cudaMalloc(&a0, m * sizeof(int)));
    CHECK(cudaMemcpy(a0, ha.data(), m * sizeof(int), cudaMemcpyHostToDevice));
    CHECK(cudaSetDevice(1));
    CHECK(cudaDeviceEnablePeerAccess(0, 0));
    CHECK(cudaMalloc(&a1, m * sizeof(int)));
    CHECK(cudaMemcpy(a1, hb.data(), m * sizeof(int), cudaMemcpyHostToDevice));
    add_from_peer<<<(m + 127) / 128, 128>>>(a1, a0, m);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(hb.data(), a1, m * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < m; i++) EXPECT(hb[i] == 1000 + i + i * 5 - 7);
    CHECK(cudaDeviceDisablePeerAccess(0));
    CHECK(cudaFree(a1));
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(a0));
  }
  std::printf("peer access ok\n");

  // ---- peer copies ---------------------------------------------------------
  unsigned char *dst[2];
  for (int d = 0; d < 2; d++) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaMalloc(&dst[d], n));
    CHECK(cudaMemset(dst[d], 0, n));
    CHECK(cudaDeviceSynchronize());
  }
  // Synchronous, both directions (current device neither side's on purpose
  // for the second one: the devices are named by the call).
  CHECK(cudaSetDevice(0));
  CHECK(cudaMemcpyPeer(dst[1], 1, buf[0], 0, n));
  CHECK(cudaMemcpy(h, dst[1], n, cudaMemcpyDeviceToHost));
  check_pattern(h, n, 1, "cudaMemcpyPeer 0 -> 1");
  CHECK(cudaSetDevice(1));
  CHECK(cudaMemcpyPeer(dst[0], 0, buf[1], 1, n));
  CHECK(cudaMemcpy(h, dst[0], n, cudaMemcpyDeviceToHost));
  check_pattern(h, n, 2, "cudaMemcpyPeer 1 -> 0");
  std::printf("cudaMemcpyPeer both directions ok\n");

  // Asynchronous, stream-ordered: a kernel fills the source on the stream,
  // the peer copy follows on the same stream, then the copy back to host.
  cudaStream_t s[2];
  for (int d = 0; d < 2; d++) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaStreamCreateWithFlags(&s[d], cudaStreamNonBlocking));
  }
  for (int d = 0; d < 2; d++) {
    int o = 1 - d;
    CHECK(cudaSetDevice(d));
    fill<<<(unsigned)((n + 255) / 256), 256, 0, s[d]>>>(buf[d], n, 10 + d);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpyPeerAsync(dst[o], o, buf[d], d, n, s[d]));
    CHECK(cudaMemcpyAsync(h, dst[o], n, cudaMemcpyDeviceToHost, s[d]));
    CHECK(cudaStreamSynchronize(s[d]));
    check_pattern(h, n, 10 + d, d == 0 ? "cudaMemcpyPeerAsync 0 -> 1" : "cudaMemcpyPeerAsync 1 -> 0");
  }
  // An odd offset and length inside both allocations.
  CHECK(cudaSetDevice(0));
  CHECK(cudaMemcpyPeerAsync(dst[1] + 13, 1, buf[0] + 7, 0, 1001, s[0]));
  CHECK(cudaMemcpyAsync(h, dst[1] + 13, 1001, cudaMemcpyDeviceToHost, s[0]));
  CHECK(cudaStreamSynchronize(s[0]));
  for (size_t i = 0; i < 1001; i++) EXPECT(h[i] == expected_byte(i + 7, 10));
  EXPECT_ERR(cudaMemcpyPeer(dst[1], count, buf[0], 0, n), cudaErrorInvalidDevice);
  (void)cudaGetLastError();
  std::printf("cudaMemcpyPeerAsync both directions ok\n");

  // cudaMemcpyDefault between two devices' pointers (unified addressing).
  for (int d = 0; d < 2; d++) {
    CHECK(cudaSetDevice(d));
    fill<<<(unsigned)((n + 255) / 256), 256>>>(buf[d], n, 20 + d);
    CHECK(cudaDeviceSynchronize());
  }
  CHECK(cudaSetDevice(0));
  CHECK(cudaMemcpy(dst[1], buf[0], n, cudaMemcpyDefault));
  CHECK(cudaMemcpy(dst[0], buf[1], n, cudaMemcpyDefault));
  CHECK(cudaMemcpy(h, dst[1], n, cudaMemcpyDefault));
  check_pattern(h, n, 20, "cudaMemcpyDefault 0 -> 1");
  CHECK(cudaMemcpy(h, dst[0], n, cudaMemcpyDefault));
  check_pattern(h, n, 21, "cudaMemcpyDefault 1 -> 0");
  // A pitched copy between the devices: 40 rows of 300 bytes.
  CHECK(cudaSetDevice(1));
  CHECK(cudaMemset(dst[1], 0, 512 * 40));
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaSetDevice(0));
  CHECK(cudaMemcpy2D(dst[1], 512, buf[0] + 5, 700, 300, 40, cudaMemcpyDeviceToDevice));
  CHECK(cudaMemcpy(h, dst[1], 512 * 40, cudaMemcpyDeviceToHost));
  for (size_t r = 0; r < 40; r++)
    for (size_t i = 0; i < 512; i++)
      EXPECT(h[r * 512 + i] == (i < 300 ? expected_byte(5 + r * 700 + i, 20) : 0));
  std::printf("cudaMemcpyDefault between devices ok\n");

  // ---- streams and events belong to their device ---------------------------
  cudaEvent_t ev[2];
  for (int d = 0; d < 2; d++) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaEventCreateWithFlags(&ev[d], cudaEventDisableTiming));
  }
  CHECK(cudaSetDevice(1));
  fill<<<(unsigned)((n + 255) / 256), 256, 0, s[1]>>>(buf[1], n, 30);
  CHECK(cudaEventRecord(ev[1], s[1]));
  CHECK(cudaSetDevice(0));
  // With device 0 current: waiting on, querying and synchronizing device 1's
  // event work, and a copy may go on device 1's stream.
  CHECK(cudaStreamWaitEvent(s[0], ev[1], 0));
  CHECK(cudaMemcpyAsync(dst[0], buf[1], n, cudaMemcpyDeviceToDevice, s[0]));
  CHECK(cudaEventSynchronize(ev[1]));
  CHECK(cudaEventQuery(ev[1]));
  CHECK(cudaMemcpyAsync(h, buf[1], n, cudaMemcpyDeviceToHost, s[1]));
  CHECK(cudaStreamSynchronize(s[1]));
  check_pattern(h, n, 30, "copy on device 1's stream with device 0 current");
  CHECK(cudaStreamSynchronize(s[0]));
  CHECK(cudaMemcpy(h, dst[0], n, cudaMemcpyDeviceToHost));
  check_pattern(h, n, 30, "device 0's stream waiting for device 1's event");
  // An event may only be recorded on a stream of its own device.
  EXPECT(cudaEventRecord(ev[0], s[1]) != cudaSuccess);
  (void)cudaGetLastError();
  std::printf("streams and events of each device ok\n");

  // ---- two host threads, each driving its own device ----------------------
  std::atomic<int> failed{0};
  std::thread t[2];
  for (int d = 0; d < 2; d++)
    t[d] = std::thread([d, &failed] {
      const int m = 1 << 16, rounds = 20;
      CHECK(cudaSetDevice(d));
      cudaStream_t st;
      CHECK(cudaStreamCreate(&st));
      int *p;
      std::vector<int> hv(m);
      CHECK(cudaMalloc(&p, m * sizeof(int)));
      for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < m; i++) hv[i] = i + r + d * 100000;
        CHECK(cudaMemcpyAsync(p, hv.data(), m * sizeof(int), cudaMemcpyHostToDevice, st));
        scale<<<(m + 255) / 256, 256, 0, st>>>(p, m, d + 2);
        CHECK(cudaMemcpyAsync(hv.data(), p, m * sizeof(int), cudaMemcpyDeviceToHost, st));
        CHECK(cudaStreamSynchronize(st));
        for (int i = 0; i < m; i++)
          if (hv[i] != (i + r + d * 100000) * (d + 2) + (d + 2)) {
            std::fprintf(stderr, "FAIL thread of device %d, round %d, element %d\n", d, r, i);
            failed = 1;
            return;
          }
      }
      cudaPointerAttributes a;
      CHECK(cudaPointerGetAttributes(&a, p));
      if (a.device != d) failed = 1;
      int cur = -1;
      CHECK(cudaGetDevice(&cur));
      if (cur != d) failed = 1;
      CHECK(cudaFree(p));
      CHECK(cudaStreamDestroy(st));
    });
  for (int d = 0; d < 2; d++) t[d].join();
  EXPECT(!failed);
  std::printf("two threads on two devices ok\n");

  for (int d = 0; d < 2; d++) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaStreamDestroy(s[d]));
    CHECK(cudaEventDestroy(ev[d]));
    CHECK(cudaFree(buf[d]));
    CHECK(cudaFree(dst[d]));
  }

  // Resetting one device leaves the other's memory alone, and the reset
  // device works again right away.
  unsigned char *keep, *again;
  CHECK(cudaSetDevice(0));
  CHECK(cudaMalloc(&keep, 4096));
  fill<<<16, 256>>>(keep, 4096, 40);
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaSetDevice(1));
  CHECK(cudaDeviceReset());
  CHECK(cudaMalloc(&again, 4096));
  fill<<<16, 256>>>(again, 4096, 41);
  CHECK(cudaMemcpy(h, again, 4096, cudaMemcpyDeviceToHost));
  check_pattern(h, 4096, 41, "device 1 after its reset");
  CHECK(cudaSetDevice(0));
  CHECK(cudaMemcpy(h, keep, 4096, cudaMemcpyDeviceToHost));
  check_pattern(h, 4096, 40, "device 0's memory after device 1's reset");
  CHECK(cudaFree(keep));
  CHECK(cudaSetDevice(1));
  CHECK(cudaFree(again));
  std::printf("reset of one device ok\n");

  CHECK(cudaFreeHost(h));
  pass("multi_device");
  return 0;
}
