// Texture and surface kernels for sg_array_test (tex_kernels.ptx is
// `nvcc -ptx -arch=sm_75 tex_kernels.cu`, kept in the tree so the test
// runs the PTX this toolkit emits for texture objects).
#include <cuda_runtime.h>

extern "C" __global__ void tex1d_f(cudaTextureObject_t t, float *out, const float *xs) {
  out[threadIdx.x] = tex1D<float>(t, xs[threadIdx.x]);
}
extern "C" __global__ void tex2d_f4(cudaTextureObject_t t, float4 *out, const float *xs, const float *ys) {
  out[threadIdx.x] = tex2D<float4>(t, xs[threadIdx.x], ys[threadIdx.x]);
}
extern "C" __global__ void tex2d_u4(cudaTextureObject_t t, uint4 *out, const float *xs, const float *ys) {
  out[threadIdx.x] = tex2D<uint4>(t, xs[threadIdx.x], ys[threadIdx.x]);
}
extern "C" __global__ void tex3d_f(cudaTextureObject_t t, float *out, const float *xs, const float *ys, const float *zs) {
  out[threadIdx.x] = tex3D<float>(t, xs[threadIdx.x], ys[threadIdx.x], zs[threadIdx.x]);
}
extern "C" __global__ void tex1dfetch_i(cudaTextureObject_t t, int *out, int off) {
  out[threadIdx.x] = tex1Dfetch<int>(t, (int)threadIdx.x + off);
}
extern "C" __global__ void tex1dfetch_f(cudaTextureObject_t t, float *out, int off) {
  out[threadIdx.x] = tex1Dfetch<float>(t, (int)threadIdx.x + off);
}
extern "C" __global__ void tex2dlayered_f(cudaTextureObject_t t, float *out, const float *xs, const float *ys, int layer) {
  out[threadIdx.x] = tex2DLayered<float>(t, xs[threadIdx.x], ys[threadIdx.x], layer);
}
extern "C" __global__ void tex2dgather_f4(cudaTextureObject_t t, float4 *out, const float *xs, const float *ys) {
  out[threadIdx.x] = tex2Dgather<float4>(t, xs[threadIdx.x], ys[threadIdx.x], 0);
}
extern "C" __global__ void surf_read_clamp(cudaSurfaceObject_t s, int *out, const int *xs, int y) {
  int v;
  surf2Dread(&v, s, xs[threadIdx.x], y, cudaBoundaryModeClamp);
  out[threadIdx.x] = v;
}
extern "C" __global__ void surf_read_zero(cudaSurfaceObject_t s, int *out, const int *xs, int y) {
  int v;
  surf2Dread(&v, s, xs[threadIdx.x], y, cudaBoundaryModeZero);
  out[threadIdx.x] = v;
}
extern "C" __global__ void surf_read_trap(cudaSurfaceObject_t s, int *out, const int *xs, int y) {
  int v;
  surf2Dread(&v, s, xs[threadIdx.x], y, cudaBoundaryModeTrap);
  out[threadIdx.x] = v;
}
extern "C" __global__ void surf_write_zero(cudaSurfaceObject_t s, const int *xs, int y, int v) {
  surf2Dwrite(v + (int)threadIdx.x, s, xs[threadIdx.x], y, cudaBoundaryModeZero);
}
extern "C" __global__ void surf_write_trap(cudaSurfaceObject_t s, const int *xs, int y, int v) {
  surf2Dwrite(v + (int)threadIdx.x, s, xs[threadIdx.x], y, cudaBoundaryModeTrap);
}
extern "C" __global__ void surf3d_write_f4(cudaSurfaceObject_t s, int y, int z) {
  float4 v = make_float4(threadIdx.x, threadIdx.x + 0.5f, -1.0f, 2.0f);
  surf3Dwrite(v, s, (int)threadIdx.x * 16, y, z);
}
extern "C" __global__ void surf1d_uchar4(cudaSurfaceObject_t s) {
  uchar4 v;
  surf1Dread(&v, s, (int)threadIdx.x * 4);
  v.x += 1; v.w = 7;
  surf1Dwrite(v, s, (int)threadIdx.x * 4);
}
