// Kernels of sg_graph_test's conditional-node tests (cudaGraphSetConditional
// from device code).  cond_kernels.ptx is this file compiled with
//   nvcc -arch=sm_75 -ptx cond_kernels.cu -o cond_kernels.ptx
#include <cuda_runtime.h>

// One WHILE iteration: counts *n down and keeps the loop going while it is
// not 0; *iters counts the body's runs.
extern "C" __global__ void countdown(cudaGraphConditionalHandle h, unsigned *n, unsigned *iters) {
  unsigned v = *n - 1;
  *n = v;
  *iters += 1;
  cudaGraphSetConditional(h, v != 0);
}

extern "C" __global__ void setcond(cudaGraphConditionalHandle h, unsigned v) { cudaGraphSetConditional(h, v); }

extern "C" __global__ void addk(unsigned *p, unsigned k) { *p += k; }
