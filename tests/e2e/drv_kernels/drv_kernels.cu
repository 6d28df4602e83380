// Kernels the driver-API end-to-end programs (tests/e2e/drv_*.cu) load as a
// module: compiled at build time to PTX (nvcc -ptx, compute_75) and to a
// fatbin holding that PTX (nvcc -fatbin), next to the programs.  extern "C"
// keeps the names the programs ask for unmangled.

// y = a*x + y
extern "C" __global__ void saxpy(float a, const float *x, float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// A module variable the host reads and writes by name (cuModuleGetGlobal).
__device__ int g_counter = 5;

// out[i] = i + g_counter
extern "C" __global__ void add_counter(int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i + g_counter;
}

// Mixed parameter sizes and alignments, for launches with `extra` (a packed
// buffer the program lays out itself): out at 0, c at 8, d at 16, k at 24.
extern "C" __global__ void mixed(int *out, char c, double d, int k) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    out[0] = c;
    out[1] = (int)(d * 4.0);
    out[2] = k;
  }
}
