// cudaMemset / cudaMemsetAsync: whole buffers, sub-ranges, odd sizes.
#include "rgpu_check.h"
#include <vector>

int main() {
  const size_t n = (3u << 20) + 5;
  unsigned char *d = nullptr;
  CHECK(cudaMalloc((void **)&d, n));
  std::vector<unsigned char> h(n);
  CHECK(cudaMemset(d, 0x5a, n));
  CHECK(cudaMemcpy(h.data(), d, n, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++) EXPECT(h[i] == 0x5a);
  CHECK(cudaMemset(d + 100, 0, 1000));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaMemsetAsync(d + 5000, 0xff, 3, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemcpy(h.data(), d, n, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++) {
    unsigned char want = (i >= 100 && i < 1100) ? 0 : (i >= 5000 && i < 5003) ? 0xff : 0x5a;
    if (h[i] != want) {
      std::fprintf(stderr, "FAIL byte %zu is %#x, want %#x\n", i, h[i], want);
      return 1;
    }
  }
  // int-valued memset takes the low byte, as CUDA does
  CHECK(cudaMemset(d, 0x1234, 16));
  CHECK(cudaMemcpy(h.data(), d, 16, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 16; i++) EXPECT(h[i] == 0x34);
  // past the end of the allocation is an error, not a write
  EXPECT_ERR(cudaMemset(d + n - 10, 0, 20), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d));
  pass("memset");
  return 0;
}
