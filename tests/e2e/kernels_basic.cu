// A struct argument, templates, __device__ globals, __constant__ memory,
// non-inlined device functions, grid-stride loops and 2D/3D grids.
#include "rgpu_check.h"
#include <cmath>
#include <vector>

struct SaxpyArgs {
  float a;
  int n;
  double scale;
  char tag[3];
};

__global__ void saxpy_struct(SaxpyArgs args, const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < args.n) y[i] = (float)((args.a * x[i] + y[i]) * args.scale) + (args.tag[1] - 'b');
}

template <typename T, int K>
__global__ void scale_add(T *v, T add, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] = v[i] * (T)K + add;
}

__device__ int g_hits;
__device__ float g_bias[4] = {1.0f, 2.0f, 3.0f, 4.0f};
__constant__ float c_weights[8];

__device__ __noinline__ float weighted(float x, int k) { return x * c_weights[k % 8] + g_bias[k % 4]; }

__global__ void use_globals(const float *in, float *out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    out[i] = weighted(in[i], i);
    atomicAdd(&g_hits, 1);
  }
}

__global__ void grid3d(int *out, int nx, int ny, int nz) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  int z = blockIdx.z * blockDim.z + threadIdx.z;
  if (x < nx && y < ny && z < nz) out[(z * ny + y) * nx + x] = x + 100 * y + 10000 * z;
}

int main() {
  const int n = 10000;
  std::vector<float> x(n), y(n), r(n);
  for (int i = 0; i < n; i++) { x[i] = i * 0.25f; y[i] = 1.0f + (i % 7); }
  float *dx, *dy;
  CHECK(cudaMalloc(&dx, n * 4));
  CHECK(cudaMalloc(&dy, n * 4));
  CHECK(cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dy, y.data(), n * 4, cudaMemcpyHostToDevice));
  SaxpyArgs args = {2.0f, n, 0.5, {'a', 'c', 'z'}};
  saxpy_struct<<<(n + 127) / 128, 128>>>(args, dx, dy);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(r.data(), dy, n * 4, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++) {
    float want = (float)((2.0f * x[i] + y[i]) * 0.5) + 1;
    if (std::fabs(r[i] - want) > 1e-5f * std::fabs(want)) {
      std::fprintf(stderr, "FAIL saxpy_struct[%d] = %g want %g\n", i, r[i], want);
      return 1;
    }
  }
  // templates: float and int instances
  scale_add<float, 3><<<(n + 255) / 256, 256>>>(dx, 1.0f, n);
  CHECK(cudaMemcpy(r.data(), dx, n * 4, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++) EXPECT(r[i] == x[i] * 3 + 1);
  std::vector<int> vi(n), ri(n);
  for (int i = 0; i < n; i++) vi[i] = i - 50;
  int *di;
  CHECK(cudaMalloc(&di, n * 4));
  CHECK(cudaMemcpy(di, vi.data(), n * 4, cudaMemcpyHostToDevice));
  scale_add<int, 5><<<(n + 255) / 256, 256>>>(di, -7, n);
  CHECK(cudaMemcpy(ri.data(), di, n * 4, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++) EXPECT(ri[i] == vi[i] * 5 - 7);
  // globals, constants, device function, grid-stride loop with few blocks
  float w[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  CHECK(cudaMemcpyToSymbol(c_weights, w, sizeof w));
  int zero = 0;
  CHECK(cudaMemcpyToSymbol(g_hits, &zero, sizeof zero));
  CHECK(cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice));
  use_globals<<<3, 64>>>(dx, dy, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(r.data(), dy, n * 4, cudaMemcpyDeviceToHost));
  float bias[4] = {1, 2, 3, 4};
  for (int i = 0; i < n; i++) {
    float want = x[i] * w[i % 8] + bias[i % 4];
    if (r[i] != want) {
      std::fprintf(stderr, "FAIL use_globals[%d] = %g want %g\n", i, r[i], want);
      return 1;
    }
  }
  int hits = 0;
  CHECK(cudaMemcpyFromSymbol(&hits, g_hits, sizeof hits));
  EXPECT(hits == n);
  // 3D grid of 3D blocks
  const int nx = 37, ny = 19, nz = 5;
  int *d3;
  CHECK(cudaMalloc(&d3, nx * ny * nz * 4));
  dim3 block(8, 4, 2), grid((nx + 7) / 8, (ny + 3) / 4, (nz + 1) / 2);
  grid3d<<<grid, block>>>(d3, nx, ny, nz);
  std::vector<int> h3(nx * ny * nz);
  CHECK(cudaMemcpy(h3.data(), d3, h3.size() * 4, cudaMemcpyDeviceToHost));
  for (int z = 0; z < nz; z++)
    for (int y2 = 0; y2 < ny; y2++)
      for (int x2 = 0; x2 < nx; x2++) EXPECT(h3[(z * ny + y2) * nx + x2] == x2 + 100 * y2 + 10000 * z);
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dy));
  CHECK(cudaFree(di));
  CHECK(cudaFree(d3));
  pass("kernels_basic");
  return 0;
}
