// Resumable sessions (issue 9): copies and kernels in a loop, every result
// checked, while the test cuts the connection underneath.  Prints
// "PASS resume_loop" only if every iteration was right; any CUDA error is
// reported and fails the program (exit 1), never a hang.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>

#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      printf("FAIL resume_loop: %s at iteration %d: %s (%d)\n", #x, it,              \
             cudaGetErrorString(e_), (int)e_);                                       \
      return 1;                                                                      \
    }                                                                                \
  } while (0)

__global__ void axpb(float *y, const float *x, float a, float b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + b;
}

int main(int argc, char **argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 40;
  int pause_ms = argc > 2 ? atoi(argv[2]) : 100;
  // At least this long (the test's cuts must land inside the run).
  double min_s = argc > 3 ? atof(argv[3]) : 0.0;
  struct timespec t0, tn;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  const int n = 1 << 14;
  int it = -1;
  float *hx = (float *)malloc(n * sizeof(float)), *hy = (float *)malloc(n * sizeof(float));
  float *pinned = nullptr;
  float *dx, *dy;
  CK(cudaMalloc(&dx, n * sizeof(float)));
  CK(cudaMalloc(&dy, n * sizeof(float)));
  CK(cudaMallocHost(&pinned, n * sizeof(float)));
  // A 2 MiB page-locked upload: large enough that the client keeps it for
  // a resend by reference (the program's memory) rather than by copy.
  const int m = 1 << 19;
  float *pin_up = nullptr, *pin_down = nullptr, *dz;
  CK(cudaMallocHost(&pin_up, m * sizeof(float)));
  CK(cudaMallocHost(&pin_down, m * sizeof(float)));
  CK(cudaMalloc(&dz, m * sizeof(float)));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  for (it = 0;; it++) {
    clock_gettime(CLOCK_MONOTONIC, &tn);
    double el = (double)(tn.tv_sec - t0.tv_sec) + (double)(tn.tv_nsec - t0.tv_nsec) / 1e9;
    if (it >= iters && el >= min_s) break;
    for (int i = 0; i < n; i++) hx[i] = (float)((i * 7 + it) % 1000);
    CK(cudaMemcpy(dx, hx, n * sizeof(float), cudaMemcpyHostToDevice));
    // The buffer is reused at once: a resend must carry the old contents.
    for (int i = 0; i < n; i++) hx[i] = -1.0f;
    axpb<<<(n + 255) / 256, 256>>>(dy, dx, 2.0f, (float)it, n);
    CK(cudaGetLastError());
    CK(cudaMemcpy(hy, dy, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) {
      float want = 2.0f * (float)((i * 7 + it) % 1000) + (float)it;
      if (hy[i] != want) {
        printf("FAIL resume_loop: iteration %d element %d is %g, want %g\n", it, i, hy[i], want);
        return 1;
      }
    }
    // The same through a stream and pinned memory (async copies).
    CK(cudaMemcpyAsync(dx, dy, n * sizeof(float), cudaMemcpyDeviceToDevice, s));
    axpb<<<(n + 255) / 256, 256, 0, s>>>(dy, dx, 0.5f, -1.0f, n);
    CK(cudaMemcpyAsync(pinned, dy, n * sizeof(float), cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    for (int i = 0; i < n; i++) {
      float want = (2.0f * (float)((i * 7 + it) % 1000) + (float)it) * 0.5f - 1.0f;
      if (pinned[i] != want) {
        printf("FAIL resume_loop: async iteration %d element %d is %g, want %g\n", it, i,
               pinned[i], want);
        return 1;
      }
    }
    // Pinned upload and download on the stream; the upload's buffer is
    // rewritten only after the synchronization, as CUDA requires.
    for (int i = 0; i < m; i++) pin_up[i] = (float)((i * 3 + it) % 5003);
    CK(cudaMemcpyAsync(dz, pin_up, m * sizeof(float), cudaMemcpyHostToDevice, s));
    CK(cudaMemcpyAsync(pin_down, dz, m * sizeof(float), cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    for (int i = 0; i < m; i++) {
      if (pin_down[i] != (float)((i * 3 + it) % 5003)) {
        printf("FAIL resume_loop: pinned upload %d element %d is %g, want %g\n", it, i,
               pin_down[i], (float)((i * 3 + it) % 5003));
        return 1;
      }
    }
    if (pause_ms) usleep(pause_ms * 1000);
  }
  CK(cudaFree(dx));
  CK(cudaFree(dy));
  CK(cudaFreeHost(pinned));
  CK(cudaFreeHost(pin_up));
  CK(cudaFreeHost(pin_down));
  CK(cudaFree(dz));
  printf("PASS resume_loop (%d iterations)\n", it);
  return 0;
}
