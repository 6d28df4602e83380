// A synchronous cudaMemcpy from pageable memory, then at once a kernel on a
// non-blocking stream that reads what was copied.  CUDA's legacy stream
// does not order a non-blocking stream, but cudaMemcpy returns once the
// copy has left the host, and on a GPU it has landed before the program's
// next call reaches the device: programs rely on that.  rgpu returns
// before the server has run the copy, so the server must order the other
// streams after it (RGPU_REQ_HOST_ORDERED).  Rounds with new data each;
// the kernel checks samples across the whole buffer, the last chunk
// included; a stream made after a copy is checked too.
#include <cuda_runtime.h>
#include <vector>

#include "rgpu_check.h"

__global__ void check_samples(const int *data, size_t n, int round, int *wrong) {
  size_t i = (size_t)(blockIdx.x * blockDim.x + threadIdx.x) * (n / 4096) + (n / 4096 - 1);
  if (i < n && data[i] != (int)(i % 1000003) * 3 + round) atomicAdd(wrong, 1);
}

int main() {
  const size_t n = (size_t)6 << 20; // 24 MiB: several chunks
  int *d, *wrong;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  CHECK(cudaMalloc(&wrong, sizeof(int)));
  CHECK(cudaMemset(wrong, 0, sizeof(int)));
  std::vector<int> h(n);
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int total = 0;
  for (int round = 1; round <= 8; round++) {
    for (size_t i = 0; i < n; i++) h[i] = (int)(i % 1000003) * 3 + round;
    CHECK(cudaMemcpy(d, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    cudaStream_t use = s, fresh = nullptr;
    if (round == 8) { // a stream made after the copy
      CHECK(cudaStreamCreateWithFlags(&fresh, cudaStreamNonBlocking));
      use = fresh;
    }
    check_samples<<<16, 256, 0, use>>>(d, n, round, wrong);
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(use));
    int w = 0;
    CHECK(cudaMemcpy(&w, wrong, sizeof w, cudaMemcpyDeviceToHost));
    CHECK(cudaMemset(wrong, 0, sizeof(int)));
    total += w;
    if (fresh) CHECK(cudaStreamDestroy(fresh));
  }
  printf("samples read before the copy landed: %d of %d\n", total, 8 * 4096);
  EXPECT(total == 0);
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d));
  CHECK(cudaFree(wrong));
  printf("PASS memcpy_nonblocking_order\n");
  return 0;
}
