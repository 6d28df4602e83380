// Test corpus for the fatbin parser and the softgpu driver.  Each kernel
// exercises one layout case that the parameter tables must get right.
#include <cstdio>

struct Params {
  float f;
  int i;
  double d;
  char c[3];
};

__device__ int g_counter;
__device__ float g_table[16];
__constant__ float c_coef[4];
__device__ int g_init[4] = {1, 2, 3, 4};

extern "C" __global__ void noparams(void) {}

__global__ void vecadd(const float *a, const float *b, float *c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

__global__ void structk(Params p, float *out) {
  out[0] = p.f + p.i + (float)p.d + p.c[0] + p.c[1] + p.c[2];
}

template <typename T, int N>
__global__ void tmpl(T *x, T v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = v * N;
}
template __global__ void tmpl<float, 3>(float *, float, int);
template __global__ void tmpl<int, 5>(int *, int, int);

__global__ void globals_k(float *out) {
  atomicAdd(&g_counter, 1);
  int i = threadIdx.x;
  // Block 0 only: the tests run under ThreadSanitizer, which would flag
  // several blocks storing the same values.
  if (blockIdx.x == 0 && i < 16) g_table[i] = c_coef[i & 3] + g_init[i & 3];
  if (blockIdx.x == 0 && i == 0) out[0] = g_table[0];
}

__global__ void shmem_reduce(const float *in, float *out, int n) {
  __shared__ float s[256];
  int t = threadIdx.x;
  int i = blockIdx.x * blockDim.x + t;
  s[t] = i < n ? in[i] : 0.0f;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (t < k) s[t] += s[t + k];
    __syncthreads();
  }
  if (t == 0) atomicAdd(out, s[0]);
}

// Writes far past the allocation it is given: the driver must turn the
// interpreter's fault into a sticky context error.
__global__ void faulty(int *p) { p[threadIdx.x + (1 << 28)] = 1; }

// Padding between odd-sized parameters: [#0@0:1 #1@8:16 #2@24:2 #3@32:8 #4@40:1].
struct Odd {
  double x;
  char y;
};
__global__ void oddk(char a, Odd o, short s, double d, char c, double *out) {
  out[0] = a + o.x + o.y + s + d + c;
}

__global__ void hello(int v) { printf("hello %d from %d\n", v, threadIdx.x); }
