// Many small host-to-device copies, then device-to-host copies that must
// see every byte.  rgpu packs small copies of one stream into one staging
// buffer on the server and releases it with one marker per batch (issue
// 14), so this checks what that must keep: every copy lands, in order (a
// later copy to the same bytes wins), on the right stream, across batch
// boundaries (sizes around the batching limit), while the source is reused
// right after each call, and behind a host function that is still running
// (the batch's release waits; nothing may wedge).
#include <unistd.h>

#include "rgpu_check.h"

static void CUDART_CB slow_callback(void *p) {
  usleep(100 * 1000);
  *(volatile int *)p = 1;
}

static unsigned char pattern(int copy, int byte) { return (unsigned char)(copy * 131 + byte * 7 + 1); }

int main() {
  const int slots = 20000, slot_bytes = 64;
  unsigned char *d = nullptr;
  CHECK(cudaMalloc(&d, (size_t)slots * slot_bytes));
  unsigned char src[slot_bytes];
  static unsigned char back[20000 * 64];

  // 1. 20,000 synchronous 64-byte copies, one source buffer reused, then
  // one read of everything.
  for (int i = 0; i < slots; i++) {
    for (int b = 0; b < slot_bytes; b++) src[b] = pattern(i, b);
    CHECK(cudaMemcpy(d + (size_t)i * slot_bytes, src, slot_bytes, cudaMemcpyHostToDevice));
  }
  CHECK(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < slots; i++)
    for (int b = 0; b < slot_bytes; b++) bad += back[(size_t)i * slot_bytes + b] != pattern(i, b);
  std::printf("bytes wrong after %d small copies: %d\n", slots, bad);
  EXPECT(bad == 0);

  // 2. Overwrites: the same 64 bytes written 1,000 times; the last wins.
  // Then 2,000 pairs of a small H2D and the small D2H that reads it back.
  for (int i = 0; i < 1000; i++) {
    std::memset(src, i & 0xff, slot_bytes);
    CHECK(cudaMemcpy(d, src, slot_bytes, cudaMemcpyHostToDevice));
  }
  CHECK(cudaMemcpy(back, d, slot_bytes, cudaMemcpyDeviceToHost));
  EXPECT(back[0] == (999 & 0xff) && back[slot_bytes - 1] == (999 & 0xff));
  bad = 0;
  for (int i = 0; i < 2000; i++) {
    for (int b = 0; b < slot_bytes; b++) src[b] = pattern(i + 7, b);
    CHECK(cudaMemcpy(d + (size_t)(i % 64) * slot_bytes, src, slot_bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(back, d + (size_t)(i % 64) * slot_bytes, slot_bytes, cudaMemcpyDeviceToHost));
    for (int b = 0; b < slot_bytes; b++) bad += back[b] != pattern(i + 7, b);
  }
  EXPECT(bad == 0);

  // 3. Sizes around the server's batching limit (4 KiB) and its staging
  // buffer (16 KiB), alternating between two streams, from pageable memory
  // changed right after each call (legal for pageable sources).
  cudaStream_t s[2];
  CHECK(cudaStreamCreate(&s[0]));
  CHECK(cudaStreamCreate(&s[1]));
  const int sizes[] = {1, 3, 17, 64, 100, 4095, 4096, 4097, 9000, 16384, 20000};
  const int nsizes = (int)(sizeof sizes / sizeof sizes[0]);
  const size_t region = 32768;
  static unsigned char big[32768];
  unsigned char *dr = nullptr;
  CHECK(cudaMalloc(&dr, region * 2 * 64));
  static unsigned char want[2 * 64][32768];
  for (int r = 0; r < 2 * 64; r++) {
    int n = sizes[r % nsizes];
    for (int b = 0; b < n; b++) big[b] = want[r][b] = pattern(r, b);
    CHECK(cudaMemcpyAsync(dr + (size_t)r * region, big, (size_t)n, cudaMemcpyHostToDevice, s[r & 1]));
    std::memset(big, 0xee, (size_t)n);
  }
  CHECK(cudaStreamSynchronize(s[0]));
  CHECK(cudaStreamSynchronize(s[1]));
  bad = 0;
  for (int r = 0; r < 2 * 64; r++) {
    int n = sizes[r % nsizes];
    CHECK(cudaMemcpy(big, dr + (size_t)r * region, (size_t)n, cudaMemcpyDeviceToHost));
    bad += std::memcmp(big, want[r], (size_t)n) != 0;
  }
  std::printf("regions wrong (mixed sizes, two streams): %d\n", bad);
  EXPECT(bad == 0);

  // 4. A host function still running, 1,000 small copies queued behind it
  // on its stream, then a read on that stream: the read sees the copies
  // and comes after the callback.
  volatile int slow_done = 0;
  CHECK(cudaLaunchHostFunc(s[0], slow_callback, (void *)&slow_done));
  for (int i = 0; i < 1000; i++) {
    for (int b = 0; b < slot_bytes; b++) src[b] = pattern(i + 3, b);
    CHECK(cudaMemcpyAsync(d + (size_t)i * slot_bytes, src, slot_bytes, cudaMemcpyHostToDevice, s[0]));
  }
  CHECK(cudaMemcpyAsync(back, d, (size_t)1000 * slot_bytes, cudaMemcpyDeviceToHost, s[0]));
  CHECK(cudaStreamSynchronize(s[0]));
  EXPECT(slow_done == 1);
  bad = 0;
  for (int i = 0; i < 1000; i++)
    for (int b = 0; b < slot_bytes; b++) bad += back[(size_t)i * slot_bytes + b] != pattern(i + 3, b);
  EXPECT(bad == 0);

  // 5. Device-wide waits right after small copies, many times.
  for (int i = 0; i < 300; i++) {
    src[0] = (unsigned char)i;
    CHECK(cudaMemcpy(d, src, 1, cudaMemcpyHostToDevice));
    CHECK(cudaDeviceSynchronize());
  }
  CHECK(cudaMemcpy(back, d, 1, cudaMemcpyDeviceToHost));
  EXPECT(back[0] == (unsigned char)299);

  CHECK(cudaStreamDestroy(s[0]));
  CHECK(cudaStreamDestroy(s[1]));
  CHECK(cudaFree(dr));
  CHECK(cudaFree(d));

  // 6. A device reset right after small copies and reads (the server's
  // reused marker events die with the context), then the same again on
  // the fresh context.
  for (int round = 0; round < 2; round++) {
    CHECK(cudaMalloc(&d, 64 * slot_bytes));
    for (int i = 0; i < 64; i++) {
      std::memset(src, round * 64 + i, slot_bytes);
      CHECK(cudaMemcpy(d + (size_t)i * slot_bytes, src, slot_bytes, cudaMemcpyHostToDevice));
    }
    bad = 0;
    for (int i = 0; i < 64; i++) {
      CHECK(cudaMemcpy(back, d + (size_t)i * slot_bytes, slot_bytes, cudaMemcpyDeviceToHost));
      bad += back[0] != (unsigned char)(round * 64 + i) || back[slot_bytes - 1] != back[0];
    }
    EXPECT(bad == 0);
    CHECK(cudaDeviceReset());
  }
  pass("small_copies");
  return 0;
}
