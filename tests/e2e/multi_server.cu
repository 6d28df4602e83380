// Several servers as one device list (issue 19, phase 2): run with
// RGPU_SERVER naming two servers of two devices each (e2e_run.sh --servers
// 2, --softgpu-devices 2), so devices 0, 1 are server A's and 2, 3 server
// B's.  Checks: four devices in order with their properties; kernels and
// memory on each; peer answers (0 between servers); cudaMemcpyPeer(Async)
// and cudaMemcpy(Default) for every ordered pair, byte for byte, including
// stream order on either side of a copy between servers; an event of one
// server waited for by a stream of the other (the client waits: documented
// in docs/architecture.md); four host threads each driving its own device
// at once; then server B is killed (RGPU_TEST_SERVER_PGIDS) and only
// devices 2, 3 fail while 0, 1 keep computing.  With another layout it
// says SKIP and exits 0.
#include "rgpu_check.h"
#include <csignal>
#include <string>
#include <thread>
#include <vector>
#include <sys/types.h>
#include <signal.h>

__global__ void fill(unsigned char *p, size_t n, int seed) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) p[i] = (unsigned char)(i * 7 + seed * 31 + (i >> 8));
}

// dst[i] = dst[i] * 3 + 1 on bytes: a transform whose result tells whether
// it ran before or after a copy into dst.
__global__ void bump(unsigned char *p, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) p[i] = (unsigned char)(p[i] * 3 + 1);
}

__global__ void saxpy(float *y, const float *x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// Stores through a null pointer: an asynchronous fault on any device.
__global__ void write_at(int *p, int v) { p[4] = v; }

static void host_count(void *arg) { ++*(int *)arg; }

static unsigned char expected_byte(size_t i, int seed) {
  return (unsigned char)(i * 7 + seed * 31 + (i >> 8));
}

static void check_pattern(const unsigned char *h, size_t n, int seed, const char *what,
                          size_t src_off = 0) {
  for (size_t i = 0; i < n; i++)
    if (h[i] != expected_byte(i + src_off, seed)) {
      std::fprintf(stderr, "FAIL %s: byte %zu is %u, expected %u\n", what, i, h[i],
                   expected_byte(i + src_off, seed));
      std::exit(1);
    }
}

static unsigned blocks(size_t n) { return (unsigned)((n + 255) / 256); }

// Fills buf (on device dev) with pattern seed and waits.
static void fill_on(int dev, unsigned char *buf, size_t n, int seed) {
  CHECK(cudaSetDevice(dev));
  fill<<<blocks(n), 256>>>(buf, n, seed);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
}

static void expect_on_device(const unsigned char *dbuf, size_t n, int seed, const char *what,
                             size_t src_off = 0) {
  std::vector<unsigned char> h(n);
  CHECK(cudaMemcpy(h.data(), dbuf, n, cudaMemcpyDeviceToHost));
  check_pattern(h.data(), n, seed, what, src_off);
}

// One thread's work on its own device: saxpy rounds checked each time.
static void thread_work(int dev, int rounds, int *ok) {
  *ok = 0;
  if (cudaSetDevice(dev) != cudaSuccess) return;
  const int n = 50000 + dev * 1001;
  float *x, *y;
  if (cudaMalloc(&x, n * sizeof(float)) || cudaMalloc(&y, n * sizeof(float))) return;
  std::vector<float> hx(n), hy(n), out(n);
  cudaStream_t s;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) return;
  for (int r = 0; r < rounds; r++) {
    for (int i = 0; i < n; i++) hx[i] = (float)(i % 97), hy[i] = (float)(dev * 10 + r);
    if (cudaMemcpyAsync(x, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice, s) ||
        cudaMemcpyAsync(y, hy.data(), n * sizeof(float), cudaMemcpyHostToDevice, s))
      return;
    float a = (float)(dev + 1);
    saxpy<<<(n + 255) / 256, 256, 0, s>>>(y, x, a, n);
    if (cudaMemcpyAsync(out.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost, s) ||
        cudaStreamSynchronize(s))
      return;
    for (int i = 0; i < n; i++)
      if (out[i] != a * (float)(i % 97) + (float)(dev * 10 + r)) {
        std::fprintf(stderr, "FAIL thread on device %d round %d: y[%d] = %g\n", dev, r, i,
                     out[i]);
        return;
      }
  }
  cudaStreamDestroy(s);
  cudaFree(x);
  cudaFree(y);
  *ok = 1;
}

int main() {
  int count = 0;
  cudaError_t ce = cudaGetDeviceCount(&count);
  if (ce != cudaSuccess || count != 4) {
    std::printf("SKIP multi_server: needs two servers of two devices (got %d: %s)\n", count,
                cudaGetErrorName(ce));
    return 0;
  }
  std::printf("devices = 4\n");

  // ---- the device list: properties of each, in order ----------------------
  for (int d = 0; d < count; d++) {
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, d));
    EXPECT(prop.totalGlobalMem > 0 && prop.multiProcessorCount > 0 && prop.name[0]);
    int major = -1;
    CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d));
    EXPECT(major == prop.major);
    std::printf("device %d: %s\n", d, prop.name);
  }
  EXPECT_ERR(cudaSetDevice(4), cudaErrorInvalidDevice);
  (void)cudaGetLastError();

  // ---- kernels and memory on each device -----------------------------------
  const size_t n = (1 << 20) + 333;
  unsigned char *buf[4], *dst[4];
  for (int d = 0; d < count; d++) {
    CHECK(cudaSetDevice(d));
    int cur = -1;
    CHECK(cudaGetDevice(&cur));
    EXPECT(cur == d);
    size_t fr = 0, tot = 0;
    CHECK(cudaMemGetInfo(&fr, &tot));
    EXPECT(tot > 0 && fr <= tot);
    CHECK(cudaMalloc(&buf[d], n));
    CHECK(cudaMalloc(&dst[d], n));
    CHECK(cudaMemset(dst[d], 0, n));
    fill<<<blocks(n), 256>>>(buf[d], n, d + 1);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    cudaPointerAttributes a;
    CHECK(cudaPointerGetAttributes(&a, buf[d] + 100));
    EXPECT(a.type == cudaMemoryTypeDevice && a.device == d);
  }
  // Read back with another server's device current: the copy goes to the
  // memory's server.
  for (int d = 0; d < count; d++) {
    CHECK(cudaSetDevice(3 - d));
    expect_on_device(buf[d], n, d + 1, "kernel result read with another device current");
  }
  std::printf("kernels and memory on four devices ok\n");

  // ---- peer answers ---------------------------------------------------------
  for (int a = 0; a < count; a++)
    for (int b = 0; b < count; b++) {
      int can = -1;
      CHECK(cudaDeviceCanAccessPeer(&can, a, b));
      if (a == b || a / 2 != b / 2) EXPECT(can == 0);
      else EXPECT(can == 0 || can == 1);
    }
  CHECK(cudaSetDevice(0));
  EXPECT_ERR(cudaDeviceEnablePeerAccess(2, 0), cudaErrorPeerAccessUnsupported);
  (void)cudaGetLastError();
  EXPECT_ERR(cudaDeviceDisablePeerAccess(3), cudaErrorPeerAccessNotEnabled);
  (void)cudaGetLastError();
  std::printf("peer access answers ok\n");

  // ---- copies between every ordered pair -----------------------------------
  for (int s = 0; s < count; s++)
    for (int t = 0; t < count; t++) {
      if (s == t) continue;
      char what[96];
      // Synchronous peer copy; the current device is neither's at times.
      CHECK(cudaSetDevice((s + t + 1) % count));
      CHECK(cudaMemcpyPeer(dst[t], t, buf[s], s, n));
      std::snprintf(what, sizeof what, "cudaMemcpyPeer %d -> %d", s, t);
      expect_on_device(dst[t], n, s + 1, what);
      // cudaMemcpyDefault, odd offsets and length.
      CHECK(cudaMemcpy(dst[t] + 11, buf[s] + 5, 70001, cudaMemcpyDefault));
      std::snprintf(what, sizeof what, "cudaMemcpyDefault %d -> %d", s, t);
      expect_on_device(dst[t] + 11, 70001, s + 1, what, 5);
      CHECK(cudaMemcpy(dst[t], buf[s], 4096, cudaMemcpyDeviceToDevice));
      expect_on_device(dst[t], 4096, s + 1, what);
    }
  std::printf("cudaMemcpyPeer and cudaMemcpyDefault between all pairs ok\n");

  // ---- stream order around a copy between servers ---------------------------
  // Source side: a kernel on the source device's stream refills the source,
  // the peer copy follows on that stream: the copy must see the new bytes.
  cudaStream_t st[4];
  for (int d = 0; d < count; d++) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaStreamCreateWithFlags(&st[d], cudaStreamNonBlocking));
  }
  for (int s = 0; s < count; s++) {
    int t = (s + 2) % count; // the other server's device
    CHECK(cudaSetDevice(s));
    fill<<<blocks(n), 256, 0, st[s]>>>(buf[s], n, 40 + s);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpyPeerAsync(dst[t], t, buf[s], s, n, st[s]));
    CHECK(cudaStreamSynchronize(st[s]));
    char what[96];
    std::snprintf(what, sizeof what, "cudaMemcpyPeerAsync %d -> %d on the source's stream", s, t);
    expect_on_device(dst[t], n, 40 + s, what);
  }
  // Destination side: the copy on the destination device's stream, then a
  // kernel on that stream transforms what arrived (so it ran after it).
  for (int s = 0; s < count; s++) {
    int t = (s + 2) % count;
    fill_on(s, buf[s], n, 50 + s);
    CHECK(cudaSetDevice(t));
    CHECK(cudaMemcpyPeerAsync(dst[t], t, buf[s], s, n, st[t]));
    bump<<<blocks(n), 256, 0, st[t]>>>(dst[t], n);
    CHECK(cudaGetLastError());
    std::vector<unsigned char> h(n);
    CHECK(cudaMemcpyAsync(h.data(), dst[t], n, cudaMemcpyDeviceToHost, st[t]));
    CHECK(cudaStreamSynchronize(st[t]));
    for (size_t i = 0; i < n; i++) {
      unsigned char want = (unsigned char)(expected_byte(i, 50 + s) * 3 + 1);
      if (h[i] != want) {
        std::fprintf(stderr, "FAIL copy %d -> %d then kernel on %d's stream: byte %zu is %u, "
                     "expected %u\n", s, t, t, i, h[i], want);
        return 1;
      }
    }
  }
  // A copy larger than the client's 64 MiB staging piece.
  {
    const size_t big = (65u << 20) + 4097;
    unsigned char *bs, *bt;
    CHECK(cudaSetDevice(1));
    CHECK(cudaMalloc(&bs, big));
    fill<<<blocks(big), 256>>>(bs, big, 77);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaSetDevice(2));
    CHECK(cudaMalloc(&bt, big));
    CHECK(cudaMemcpyPeer(bt, 2, bs, 1, big));
    expect_on_device(bt, big, 77, "65 MiB cudaMemcpyPeer 1 -> 2");
    CHECK(cudaFree(bt));
    CHECK(cudaSetDevice(1));
    CHECK(cudaFree(bs));
  }
  std::printf("cudaMemcpyPeerAsync between servers in stream order ok\n");

  // ---- events across servers --------------------------------------------------
  // Server A's stream: a kernel, then an event.  Server B's stream waits for
  // that event (the client waits for it, so it is complete on return), then
  // copies A's result over.
  {
    cudaEvent_t ev, evb;
    CHECK(cudaSetDevice(0));
    CHECK(cudaEventCreate(&ev));
    fill<<<blocks(n), 256, 0, st[0]>>>(buf[0], n, 60);
    CHECK(cudaEventRecord(ev, st[0]));
    CHECK(cudaSetDevice(2));
    CHECK(cudaEventCreate(&evb));
    CHECK(cudaStreamWaitEvent(st[2], ev, 0));
    CHECK(cudaEventQuery(ev)); // documented: the wait happened in the client
    CHECK(cudaMemcpyPeerAsync(dst[2], 2, buf[0], 0, n, st[2]));
    CHECK(cudaEventRecord(evb, st[2]));
    CHECK(cudaEventSynchronize(evb));
    expect_on_device(dst[2], n, 60, "event of server A waited for on server B's stream");
    // Recording A's event on B's stream is CUDA's error; timing across two
    // servers' clocks is refused alike.
    EXPECT_ERR(cudaEventRecord(ev, st[2]), cudaErrorInvalidResourceHandle);
    (void)cudaGetLastError();
    float ms = 0;
    EXPECT_ERR(cudaEventElapsedTime(&ms, ev, evb), cudaErrorInvalidResourceHandle);
    (void)cudaGetLastError();
    CHECK(cudaEventDestroy(evb));
    CHECK(cudaSetDevice(0));
    CHECK(cudaEventDestroy(ev));
  }
  std::printf("events across servers ok\n");

  // ---- four host threads, one per device -------------------------------------
  {
    int ok[4] = {0, 0, 0, 0};
    std::vector<std::thread> th;
    for (int d = 0; d < count; d++) th.emplace_back(thread_work, d, 8, &ok[d]);
    for (auto &t : th) t.join();
    for (int d = 0; d < count; d++) EXPECT(ok[d] == 1);
  }
  std::printf("four threads on four devices ok\n");

  // ---- graphs: one on server B's device; a copy between servers is not
  // capturable (documented) ------------------------------------------------------
  {
    CHECK(cudaSetDevice(2));
    cudaGraph_t g;
    cudaGraphExec_t x;
    CHECK(cudaStreamBeginCapture(st[2], cudaStreamCaptureModeThreadLocal));
    fill<<<blocks(n), 256, 0, st[2]>>>(buf[2], n, 66);
    bump<<<blocks(n), 256, 0, st[2]>>>(buf[2], n);
    CHECK(cudaStreamEndCapture(st[2], &g));
    CHECK(cudaGraphInstantiate(&x, g, 0));
    CHECK(cudaGraphLaunch(x, st[2]));
    CHECK(cudaStreamSynchronize(st[2]));
    std::vector<unsigned char> h(n);
    CHECK(cudaMemcpy(h.data(), buf[2], n, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++)
      if (h[i] != (unsigned char)(expected_byte(i, 66) * 3 + 1)) {
        std::fprintf(stderr, "FAIL graph on device 2: byte %zu is %u\n", i, h[i]);
        return 1;
      }
    CHECK(cudaGraphExecDestroy(x));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaSetDevice(0));
    CHECK(cudaStreamBeginCapture(st[0], cudaStreamCaptureModeThreadLocal));
    EXPECT_ERR(cudaMemcpyPeerAsync(dst[2], 2, buf[0], 0, n, st[0]), cudaErrorNotSupported);
    cudaGraph_t g2 = nullptr;
    (void)cudaStreamEndCapture(st[0], &g2);
    if (g2) CHECK(cudaGraphDestroy(g2));
    (void)cudaGetLastError();
  }
  std::printf("graphs on server B's device ok\n");

  // ---- host functions on both servers' streams -------------------------------
  {
    int calls[4] = {0, 0, 0, 0};
    for (int d = 0; d < count; d++) {
      CHECK(cudaSetDevice(d));
      fill<<<blocks(n), 256, 0, st[d]>>>(buf[d], n, 80 + d);
      CHECK(cudaLaunchHostFunc(st[d], host_count, &calls[d]));
      CHECK(cudaLaunchHostFunc(st[d], host_count, &calls[d]));
    }
    for (int d = 0; d < count; d++) {
      CHECK(cudaStreamSynchronize(st[d]));
      EXPECT(calls[d] == 2);
      expect_on_device(buf[d], n, 80 + d, "kernel before a host function");
    }
  }
  std::printf("host functions on both servers ok\n");

  // ---- a fault on server B's device: server A's devices go on ------------------
  {
    CHECK(cudaSetDevice(3));
    write_at<<<1, 1, 0, st[3]>>>(nullptr, 4);
    EXPECT_ERR(cudaStreamSynchronize(st[3]), cudaErrorIllegalAddress);
    EXPECT_ERR(cudaGetLastError(), cudaErrorIllegalAddress);
    EXPECT_ERR(cudaDeviceSynchronize(), cudaErrorIllegalAddress); // sticky there
    EXPECT_ERR(cudaGetLastError(), cudaErrorIllegalAddress);       // that call's
    CHECK(cudaGetLastError());
    for (int d = 0; d < 2; d++) {
      fill_on(d, buf[d], n, 90 + d);
      expect_on_device(buf[d], n, 90 + d, "device of server A after a fault on server B");
    }
    CHECK(cudaGetLastError());
    // A reset of the faulted device clears server B's error; its memory on
    // device 3 is gone, device 2's stays.
    CHECK(cudaSetDevice(3));
    cudaError_t reset = cudaDeviceReset();
    EXPECT(reset == cudaSuccess || reset == cudaErrorIllegalAddress);
    (void)cudaGetLastError();
    CHECK(cudaStreamCreateWithFlags(&st[3], cudaStreamNonBlocking));
    CHECK(cudaMalloc(&buf[3], n));
    CHECK(cudaMalloc(&dst[3], n));
    fill_on(3, buf[3], n, 93);
    expect_on_device(buf[3], n, 93, "device 3 after its reset");
    fill_on(2, buf[2], n, 92);
    expect_on_device(buf[2], n, 92, "device 2 after device 3's reset");
  }
  std::printf("a fault on server B left server A's devices working ok\n");

  // ---- a server drops out: only its devices fail -------------------------------
  // RGPU_TEST_LOSE=0 stops server A (devices 0, 1: the session opened
  // first), else server B (devices 2, 3).
  const char *pg = std::getenv("RGPU_TEST_SERVER_PGIDS");
  if (!pg || !std::strchr(pg, ',')) {
    std::printf("PASS multi_server (no server stopped: RGPU_TEST_SERVER_PGIDS unset)\n");
    return 0;
  }
  const char *lose_env = std::getenv("RGPU_TEST_LOSE");
  int lose = lose_env && std::atoi(lose_env) == 0 ? 0 : 1;
  int gone0 = 2 * lose, gone1 = gone0 + 1, live0 = 2 - gone0, live1 = live0 + 1;
  pid_t pgid = (pid_t)std::atol(lose ? std::strchr(pg, ',') + 1 : pg);
  EXPECT(pgid > 1);
  CHECK(cudaSetDevice(gone0));
  CHECK(cudaDeviceSynchronize());
  EXPECT(kill(-pgid, SIGKILL) == 0);
  // The lost server's device fails at its next call (after the client's
  // short resume attempt: RGPU_RECONNECT_S in the test).
  std::vector<unsigned char> h(n);
  cudaError_t e2 = cudaMemcpy(h.data(), buf[gone0], n, cudaMemcpyDeviceToHost);
  EXPECT(e2 == cudaErrorDevicesUnavailable);
  (void)cudaGetLastError();
  unsigned char *lost = nullptr;
  EXPECT_ERR(cudaMalloc(&lost, 1024), cudaErrorDevicesUnavailable);
  (void)cudaGetLastError();
  CHECK(cudaSetDevice(gone1)); // switching is no device work
  EXPECT_ERR(cudaDeviceSynchronize(), cudaErrorDevicesUnavailable);
  (void)cudaGetLastError();
  // Copies that need the lost server fail; those between the live
  // server's devices work.
  CHECK(cudaSetDevice(live0));
  EXPECT_ERR(cudaMemcpyPeer(dst[live0], live0, buf[gone0], gone0, n), cudaErrorDevicesUnavailable);
  (void)cudaGetLastError();
  int still = -1;
  CHECK(cudaGetDeviceCount(&still));
  EXPECT(still == 4); // the numbering stays
  for (int d = live0; d <= live1; d++) {
    fill_on(d, buf[d], n, 70 + d);
    expect_on_device(buf[d], n, 70 + d, "device of the live server after the other was lost");
  }
  CHECK(cudaMemcpyPeer(dst[live1], live1, buf[live0], live0, n));
  expect_on_device(dst[live1], n, 70 + live0, "cudaMemcpyPeer on the live server after a loss");
  {
    int ok[2] = {0, 0};
    std::thread t0(thread_work, live0, 3, &ok[0]), t1(thread_work, live1, 3, &ok[1]);
    t0.join();
    t1.join();
    EXPECT(ok[0] == 1 && ok[1] == 1);
  }
  CHECK(cudaSetDevice(live1));
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaGetLastError());
  std::printf("server %c lost: devices %d, %d fail, devices %d, %d keep computing ok\n",
              lose ? 'B' : 'A', gone0, gone1, live0, live1);
  std::printf("PASS multi_server\n");
  return 0;
}
