// Copies round-trip bit-exact from 1 byte to 256 MiB: pageable and pinned
// host memory, H2D, D2H, D2D, cudaMemcpyDefault, async copies on a stream.
#include "rgpu_check.h"
#include <cstdint>
#include <vector>

static void fill(unsigned char *p, size_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13; x ^= x >> 17; x ^= x << 5;
    p[i] = (unsigned char)x;
  }
}

int main(int argc, char **argv) {
  size_t max = (argc > 1) ? strtoull(argv[1], nullptr, 0) : (256u << 20);
  std::vector<size_t> sizes = {1, 2, 3, 7, 64, 1000, 4096, 65537, 1u << 20, (4u << 20) + 3,
                               16u << 20, 64u << 20, 256u << 20};
  unsigned char *pin_src = nullptr, *pin_dst = nullptr;
  CHECK(cudaMallocHost((void **)&pin_src, max));
  CHECK(cudaHostAlloc((void **)&pin_dst, max, cudaHostAllocDefault));
  std::vector<unsigned char> src(max), dst(max);
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  int tested = 0;
  for (size_t n : sizes) {
    if (n > max) continue;
    void *d1 = nullptr, *d2 = nullptr;
    CHECK(cudaMalloc(&d1, n));
    CHECK(cudaMalloc(&d2, n));
    // pageable, explicit kinds
    fill(src.data(), n, (uint32_t)n);
    std::memset(dst.data(), 0, n);
    CHECK(cudaMemcpy(d1, src.data(), n, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d2, d1, n, cudaMemcpyDeviceToDevice));
    CHECK(cudaMemcpy(dst.data(), d2, n, cudaMemcpyDeviceToHost));
    if (std::memcmp(src.data(), dst.data(), n) != 0) {
      std::fprintf(stderr, "FAIL pageable round trip of %zu bytes differs\n", n);
      return 1;
    }
    // pinned, cudaMemcpyDefault, async on a stream
    fill(pin_src, n, (uint32_t)n + 77);
    std::memset(pin_dst, 0, n);
    CHECK(cudaMemcpyAsync(d1, pin_src, n, cudaMemcpyDefault, s));
    CHECK(cudaMemcpyAsync(d2, d1, n, cudaMemcpyDefault, s));
    CHECK(cudaMemcpyAsync(pin_dst, d2, n, cudaMemcpyDefault, s));
    CHECK(cudaStreamSynchronize(s));
    if (std::memcmp(pin_src, pin_dst, n) != 0) {
      std::fprintf(stderr, "FAIL pinned async round trip of %zu bytes differs\n", n);
      return 1;
    }
    // host to host through the runtime
    CHECK(cudaMemcpy(dst.data(), pin_src, n, cudaMemcpyHostToHost));
    EXPECT(std::memcmp(dst.data(), pin_src, n) == 0);
    CHECK(cudaFree(d1));
    CHECK(cudaFree(d2));
    tested++;
  }
  // a copy at an offset inside an allocation
  void *d = nullptr;
  CHECK(cudaMalloc(&d, 4096));
  fill(src.data(), 4096, 5);
  CHECK(cudaMemcpy(d, src.data(), 4096, cudaMemcpyHostToDevice));
  std::memset(dst.data(), 0, 100);
  CHECK(cudaMemcpy(dst.data(), (char *)d + 1000, 100, cudaMemcpyDeviceToHost));
  EXPECT(std::memcmp(dst.data(), src.data() + 1000, 100) == 0);
  CHECK(cudaFree(d));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFreeHost(pin_src));
  CHECK(cudaFreeHost(pin_dst));
  std::printf("%d sizes round-tripped bit-exact\n", tested);
  pass("memcpy_roundtrip");
  return 0;
}
