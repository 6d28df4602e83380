// Kernels the sg_ptx corpus test runs on the interpreter and checks against
// host computations.  Compiled with nvcc -ptx at -O2 and -O0.
#include <cstdio>
#include <cassert>
#include <cuda_fp16.h>

struct SaxpyArgs {
  float a;
  int n;
  const float *x;
  float *y;
};

extern "C" __global__ void vecadd(const float *a, const float *b, float *c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

extern "C" __global__ void saxpy(SaxpyArgs s) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < s.n) s.y[i] = s.a * s.x[i] + s.y[i];
}

#define TILE 16
extern "C" __global__ void matmul(const float *A, const float *B, float *C, int n) {
  __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE];
  int row = blockIdx.y * TILE + threadIdx.y;
  int col = blockIdx.x * TILE + threadIdx.x;
  float acc = 0.0f;
  for (int t = 0; t < (n + TILE - 1) / TILE; t++) {
    int ac = t * TILE + threadIdx.x, br = t * TILE + threadIdx.y;
    As[threadIdx.y][threadIdx.x] = (row < n && ac < n) ? A[row * n + ac] : 0.0f;
    Bs[threadIdx.y][threadIdx.x] = (br < n && col < n) ? B[br * n + col] : 0.0f;
    __syncthreads();
    for (int k = 0; k < TILE; k++) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  if (row < n && col < n) C[row * n + col] = acc;
}

extern "C" __global__ void reduce_shfl(const float *in, float *out, int n) {
  float v = 0.0f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) v += in[i];
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, v);
}

extern "C" __global__ void histogram(const unsigned char *data, int n, unsigned *hist) {
  __shared__ unsigned h[256];
  for (int i = threadIdx.x; i < 256; i += blockDim.x) h[i] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    atomicAdd(&h[data[i]], 1u);
  __syncthreads();
  for (int i = threadIdx.x; i < 256; i += blockDim.x) atomicAdd(&hist[i], h[i]);
}

// Inclusive Hillis-Steele scan of one block of up to 1024 ints.
extern "C" __global__ void block_scan(const int *in, int *out, int n) {
  __shared__ int s[1024];
  int t = threadIdx.x;
  s[t] = t < n ? in[t] : 0;
  __syncthreads();
  for (int off = 1; off < blockDim.x; off <<= 1) {
    int v = t >= off ? s[t - off] : 0;
    __syncthreads();
    s[t] += v;
    __syncthreads();
  }
  if (t < n) out[t] = s[t];
}

template <typename T, int K>
__global__ void scale_tmpl(T *x, T v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * v + (T)K;
}
template __global__ void scale_tmpl<float, 3>(float *, float, int);
template __global__ void scale_tmpl<int, 5>(int *, int, int);
template __global__ void scale_tmpl<double, 7>(double *, double, int);

__device__ int g_counter;
__device__ float g_table[16];
__device__ int g_init[4] = {10, 20, 30, 40};
__constant__ float c_coef[4];

extern "C" __global__ void globals_k(float *out) {
  atomicAdd(&g_counter, 1);
  int i = threadIdx.x;
  if (i < 16) g_table[i] = c_coef[i & 3] + g_init[i & 3];
  __syncthreads();
  if (i < 16) out[i] = g_table[15 - i];
}

extern "C" __global__ void dyn_shared(const float *in, float *out) {
  extern __shared__ float buf[];
  int t = threadIdx.x;
  buf[t] = in[blockIdx.x * blockDim.x + t];
  __syncthreads();
  out[blockIdx.x * blockDim.x + t] = buf[blockDim.x - 1 - t];
}

__device__ __noinline__ float poly(float x, int k) {
  float r = 0.0f;
  for (int i = 0; i < k; i++) r = r * x + (float)(i + 1);
  return r;
}
__device__ __noinline__ void swap2(int *a, int *b) { int t = *a; *a = *b; *b = t; }

extern "C" __global__ void calls(const float *in, float *out, int *pairs, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = poly(in[i], (i % 5) + 1);
    swap2(&pairs[2 * i], &pairs[2 * i + 1]);
  }
}

extern "C" __global__ void grid3d(int *out, int nx, int ny, int nz) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  int z = blockIdx.z * blockDim.z + threadIdx.z;
  if (x < nx && y < ny && z < nz) out[(z * ny + y) * nx + x] = x + 100 * y + 10000 * z;
}

extern "C" __global__ void half_k(const float *a, const float *b, float *out, __half *hout, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    __half ha = __float2half(a[i]), hb = __float2half(b[i]);
    __half s = __hadd(ha, hb);
    __half p = __hmul(ha, hb);
    __half2 v = __halves2half2(ha, hb);
    __half2 w = __hadd2(v, v);
    out[3 * i] = __half2float(s);
    out[3 * i + 1] = __half2float(p);
    out[3 * i + 2] = __low2float(w) + __high2float(w);
    hout[i] = __hfma(ha, hb, s);
  }
}

extern "C" __global__ void printf_k(int base) {
  printf("thread %d of block %d: %5.2f %s %lld 0x%x %c|\n", (int)threadIdx.x, (int)blockIdx.x,
         (double)threadIdx.x * 0.5, "ok", (long long)base * 1000000000LL, 255 + (int)threadIdx.x, 'A' + (int)threadIdx.x);
}

extern "C" __global__ void oob(float *p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  p[i + n] = 1.0f;
}

extern "C" __global__ void warp_ops(const int *in, unsigned *out) {
  int t = threadIdx.x;
  int v = in[t];
  unsigned b = __ballot_sync(0xffffffffu, v > 0);
  int any = __any_sync(0xffffffffu, v > 100);
  int all = __all_sync(0xffffffffu, v > -1000);
  int x = __shfl_xor_sync(0xffffffffu, v, 1);
  int u = __shfl_up_sync(0xffffffffu, v, 2);
  int s = __shfl_sync(0xffffffffu, v, 7);
  unsigned m = __match_any_sync(0xffffffffu, v & 3);
  out[t * 8 + 0] = b;
  out[t * 8 + 1] = any;
  out[t * 8 + 2] = all;
  out[t * 8 + 3] = x;
  out[t * 8 + 4] = u;
  out[t * 8 + 5] = s;
  out[t * 8 + 6] = m;
  out[t * 8 + 7] = __popc(b) + __clz(v) + __brev(v) + __ffs(v);
}

extern "C" __global__ void mathf(const float *in, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float x = in[i];
    out[8 * i + 0] = sqrtf(x);
    out[8 * i + 1] = __expf(x);
    out[8 * i + 2] = __logf(x);
    out[8 * i + 3] = __sinf(x);
    out[8 * i + 4] = __cosf(x);
    out[8 * i + 5] = rsqrtf(x);
    out[8 * i + 6] = tanhf(x);
    out[8 * i + 7] = x / (x + 1.0f);
  }
}

// libdevice double and float math (long code paths, Payne-Hanek reduction
// with mad.cc/madc for large arguments).
extern "C" __global__ void mathd(const double *in, double *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    double x = in[i];
    out[6 * i] = exp(x); out[6 * i + 1] = log(x); out[6 * i + 2] = sin(x);
    out[6 * i + 3] = pow(x, 1.5); out[6 * i + 4] = sqrt(x); out[6 * i + 5] = erf(x);
  }
}
extern "C" __global__ void mathf2(const float *in, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float x = in[i];
    out[6 * i] = expf(x); out[6 * i + 1] = logf(x); out[6 * i + 2] = sinf(x);
    out[6 * i + 3] = powf(x, 1.5f); out[6 * i + 4] = atan2f(x, 2.0f); out[6 * i + 5] = fmodf(x, 0.7f);
  }
}
extern "C" __global__ void intrin(const unsigned *in, unsigned *out, long long *o64) {
  int t = threadIdx.x;
  unsigned a = in[t], b = in[t + 32];
  out[t * 8] = __funnelshift_l(a, b, t);
  out[t * 8 + 1] = __funnelshift_r(a, b, t);
  out[t * 8 + 2] = __umulhi(a, b);
  out[t * 8 + 3] = __byte_perm(a, b, 0x5140);
  out[t * 8 + 4] = __sad((int)a, (int)b, 3);
  out[t * 8 + 5] = __syncthreads_count(a & 1);
  out[t * 8 + 6] = __float2int_rn(__int_as_float(a & 0x3fffffff));
  out[t * 8 + 7] = __vadd2(a, b);
  long long x = (long long)a * b;
  o64[t] = x / (long long)(b | 1) + x % 7;
}
extern "C" __global__ void sw(const int *in, int *out) {
  int t = threadIdx.x, r;
  switch (in[t]) {
    case 0: r = 5; break; case 1: r = 9; break; case 2: r = 13; break;
    case 3: r = 2; break; case 4: r = 99; break; case 5: r = 7; break;
    default: r = -1;
  }
  out[t] = r;
}
extern "C" __global__ void misc(float4 *v, double *d, int *c, __half2 *h) {
  int t = threadIdx.x;
  float4 q = __ldg(&v[t]);
  q.x += q.w;
  v[t] = q;
  atomicAdd(d, 1.0);
  int old = c[0], assumed;
  do { assumed = old; old = atomicCAS(c, assumed, assumed + t); } while (assumed != old);
  atomicInc((unsigned *)c + 1, 100u);
  atomicAdd(h, __floats2half2_rn(1.0f, 2.0f));
  __threadfence();
  assert(t < 1024);
}
extern "C" __global__ void assert_k(int limit) {
  assert(threadIdx.x < limit);
}
__device__ __noinline__ void dev_print(int v, float f) { printf("dev %d %.1f\n", v, f); }
extern "C" __global__ void printf_dev(void) { dev_print((int)threadIdx.x * 10, 1.5f); }

struct Arr8 { int v[8]; };
__device__ __noinline__ int pick8(const Arr8 *a, int i) { return a->v[i]; }
extern "C" __global__ void param_addr(Arr8 a, int *out) { int t = threadIdx.x; out[t] = pick8(&a, t & 7) + a.v[(t + 1) & 7]; }
struct Big3 { double d[3]; char c; };
__device__ __noinline__ Big3 mk3(double x) { Big3 b; b.d[0] = x; b.d[1] = 2 * x; b.d[2] = 3 * x; b.c = 'q'; return b; }
extern "C" __global__ void ret_struct(double *out) { Big3 b = mk3(threadIdx.x); out[threadIdx.x] = b.d[0] + b.d[1] + b.d[2] + b.c; }
