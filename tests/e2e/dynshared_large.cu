// Large dynamic shared memory (issue 14): more than 48 KiB per block needs
// cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize) first,
// as tensor-core GEMMs do right after choosing their kernel.  The launch
// without it fails, with it the kernel uses all of its shared memory; the
// cache and carveout hints are accepted.
#include "rgpu_check.h"
#include <vector>

// Each block stages `n` ints in shared memory, then writes them back
// reversed, so every shared byte is written and read.
__global__ void reverse_big(const int *in, int *out, int n) {
  extern __shared__ int s[];
  const int *src = in + (size_t)blockIdx.x * n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = src[i];
  __syncthreads();
  int *dst = out + (size_t)blockIdx.x * n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = s[n - 1 - i] + 1;
}

int main() {
  const size_t shmem = 160 * 1024;  // well past 48 KiB, under every Hopper's 227 KiB
  const int n = (int)(shmem / sizeof(int)), blocks = 3;
  std::vector<int> h((size_t)n * blocks), r((size_t)n * blocks);
  for (size_t i = 0; i < h.size(); i++) h[i] = (int)(i * 7 + 3);
  int *din, *dout;
  CHECK(cudaMalloc(&din, h.size() * sizeof(int)));
  CHECK(cudaMalloc(&dout, h.size() * sizeof(int)));
  CHECK(cudaMemcpy(din, h.data(), h.size() * sizeof(int), cudaMemcpyHostToDevice));

  int optin = 0;
  CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  EXPECT(optin >= (int)shmem);

  // Without the opt-in the configuration is refused at launch.
  reverse_big<<<blocks, 256, shmem>>>(din, dout, n);
  EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidValue);
  // More than the device offers is refused by the set itself.
  EXPECT_ERR(cudaFuncSetAttribute(reverse_big, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  optin + 1),
             cudaErrorInvalidValue);
  EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidValue);  // the set's error, then clear

  CHECK(cudaFuncSetAttribute(reverse_big, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shmem));
  CHECK(cudaFuncSetAttribute(reverse_big, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
  CHECK(cudaFuncSetCacheConfig(reverse_big, cudaFuncCachePreferShared));
  cudaFuncAttributes fa;
  CHECK(cudaFuncGetAttributes(&fa, reverse_big));
  EXPECT(fa.maxDynamicSharedSizeBytes == (int)shmem);

  reverse_big<<<blocks, 256, shmem>>>(din, dout, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(r.data(), dout, r.size() * sizeof(int), cudaMemcpyDeviceToHost));
  for (int b = 0; b < blocks; b++)
    for (int i = 0; i < n; i++) {
      int want = h[(size_t)b * n + n - 1 - i] + 1;
      if (r[(size_t)b * n + i] != want) {
        std::fprintf(stderr, "FAIL block %d [%d] = %d want %d\n", b, i, r[(size_t)b * n + i], want);
        return 1;
      }
    }

  // The same kernel through a captured graph (the node carries the size).
  CHECK(cudaMemset(dout, 0, r.size() * sizeof(int)));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  reverse_big<<<blocks, 256, shmem, s>>>(din, dout, n);
  CHECK(cudaStreamEndCapture(s, &g));
  CHECK(cudaGraphInstantiate(&ge, g, 0));
  CHECK(cudaGraphLaunch(ge, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemcpy(r.data(), dout, r.size() * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++) EXPECT(r[(size_t)2 * n + i] == h[(size_t)2 * n + n - 1 - i] + 1);
  CHECK(cudaGraphExecDestroy(ge));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(din));
  CHECK(cudaFree(dout));
  pass("dynshared_large");
  return 0;
}
