// rgpu-nvcc-flags: -lcublas
// cuBLAS on the devices of two servers at once (issue 19): one handle per
// device, each bound to its device's stream, an sgemm on each from its own
// host thread, and a dot product (result in host memory, so it waits for
// its server), all checked against a host reference.  Run with RGPU_SERVER
// naming two servers of one device each: device 1 is the second server's.
#include <cmath>
#include <cublas_v2.h>
#include <thread>
#include <vector>

#include "rgpu_check.h"

static void gemm_on(int dev, int *ok) {
  *ok = 0;
  const int m = 37 + dev, n = 29, k = 23;
  if (cudaSetDevice(dev) != cudaSuccess) return;
  std::vector<float> a(m * k), b(k * n), c(m * n), ref(m * n);
  for (int i = 0; i < m * k; i++) a[i] = (float)((i * 7 + dev) % 13) - 6.0f;
  for (int i = 0; i < k * n; i++) b[i] = (float)((i * 5 + 3 * dev) % 11) - 5.0f;
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      float s = 0;
      for (int p = 0; p < k; p++) s += a[i + p * m] * b[p + j * k];
      ref[i + j * m] = 2.0f * s;
    }
  float *da, *db, *dc;
  cudaStream_t st;
  cublasHandle_t h;
  if (cudaMalloc(&da, a.size() * 4) || cudaMalloc(&db, b.size() * 4) ||
      cudaMalloc(&dc, c.size() * 4) || cudaStreamCreate(&st) || cublasCreate(&h) ||
      cublasSetStream(h, st))
    return;
  if (cudaMemcpyAsync(da, a.data(), a.size() * 4, cudaMemcpyHostToDevice, st) ||
      cudaMemcpyAsync(db, b.data(), b.size() * 4, cudaMemcpyHostToDevice, st))
    return;
  const float alpha = 2.0f, beta = 0.0f;
  if (cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, da, m, db, k, &beta, dc, m))
    return;
  if (cudaMemcpyAsync(c.data(), dc, c.size() * 4, cudaMemcpyDeviceToHost, st) ||
      cudaStreamSynchronize(st))
    return;
  for (int i = 0; i < m * n; i++)
    if (std::fabs(c[i] - ref[i]) > 1e-3f) {
      std::fprintf(stderr, "FAIL sgemm on device %d: c[%d] = %g, expected %g\n", dev, i, c[i],
                   ref[i]);
      return;
    }
  float dot = 0, want = 0;
  for (int i = 0; i < k; i++) want += a[i] * a[i];
  if (cublasSdot(h, k, da, 1, da, 1, &dot) || std::fabs(dot - want) > 1e-3f) {
    std::fprintf(stderr, "FAIL sdot on device %d: %g, expected %g\n", dev, dot, want);
    return;
  }
  cublasDestroy(h);
  cudaStreamDestroy(st);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  *ok = 1;
}

int main() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 2) {
    std::printf("SKIP multi_server_cublas: needs 2 devices\n");
    return 0;
  }
  int ok[2] = {0, 0};
  std::thread t0(gemm_on, 0, &ok[0]), t1(gemm_on, 1, &ok[1]);
  t0.join();
  t1.join();
  EXPECT(ok[0] == 1 && ok[1] == 1);
  std::printf("sgemm and sdot on two devices at once ok\n");
  pass("multi_server_cublas");
  return 0;
}
