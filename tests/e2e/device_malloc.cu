// malloc and free inside kernels (the device heap): per-thread scratch
// buffers, a block kept from one kernel to the next and freed by a later
// one, a request larger than the heap answered with NULL, and the heap
// limit read back.  Every result is checked.
#include "rgpu_check.h"

__global__ void scratch(int *out, int n) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n) return;
  int k = 1 + t % 7;
  int *buf = (int *)malloc(k * sizeof(int));
  if (!buf) {
    out[t] = -1;
    return;
  }
  for (int i = 0; i < k; i++) buf[i] = t + i;
  int s = 0;
  for (int i = 0; i < k; i++) s += buf[i];
  free(buf);
  out[t] = s;
}

__device__ int *kept;

__global__ void keep(int v) {
  kept = (int *)malloc(64 * sizeof(int));
  if (kept)
    for (int i = 0; i < 64; i++) kept[i] = v * i;
}

__global__ void use_and_free(int *out) {
  int s = -1;
  if (kept) {
    s = 0;
    for (int i = 0; i < 64; i++) s += kept[i];
    free(kept);
    kept = nullptr;
  }
  *out = s;
}

__global__ void too_big(int *out) { out[0] = malloc((size_t)1 << 40) == nullptr; }

int main() {
  size_t heap = 0;
  CHECK(cudaDeviceGetLimit(&heap, cudaLimitMallocHeapSize));
  EXPECT(heap > 0);
  CHECK(cudaDeviceSetLimit(cudaLimitMallocHeapSize, 16 << 20));
  CHECK(cudaDeviceGetLimit(&heap, cudaLimitMallocHeapSize));
  EXPECT(heap >= (16u << 20));
  const int n = 2048;
  int *d = nullptr;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  scratch<<<n / 256, 256>>>(d, n);
  CHECK(cudaGetLastError());
  int h[n];
  CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
  for (int t = 0; t < n; t++) {
    int k = 1 + t % 7;
    EXPECT(h[t] == k * t + k * (k - 1) / 2);
  }
  std::printf("per-thread scratch buffers: %d threads, every sum right\n", n);
  keep<<<1, 1>>>(3);
  use_and_free<<<1, 1>>>(d);
  int s = 0;
  CHECK(cudaMemcpy(&s, d, sizeof s, cudaMemcpyDeviceToHost));
  EXPECT(s == 3 * 63 * 64 / 2);
  std::printf("a block kept across kernels: sum %d\n", s);
  too_big<<<1, 1>>>(d);
  CHECK(cudaMemcpy(&s, d, sizeof s, cudaMemcpyDeviceToHost));
  EXPECT(s == 1);
  std::printf("a request larger than the heap gets NULL\n");
  CHECK(cudaFree(d));
  pass("device_malloc");
  return 0;
}
