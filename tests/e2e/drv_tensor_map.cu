// rgpu-nvcc-flags: -lcuda -gencode arch=compute_75,code=[sm_75,compute_75] -gencode arch=compute_90,code=sm_90
// Tensor maps (TMA, Hopper and later): cuTensorMapEncodeTiled for a 64x64
// float matrix with 16x16 boxes, the same encode repeated (the same 128
// bytes), a kernel that loads one box into shared memory with
// cp.async.bulk.tensor and writes it out (checked element by element),
// cuTensorMapReplaceAddress to a second matrix and the load again, and the
// driver's refusals (rank 6, a misaligned address).  A device without TMA
// (softgpu) answers CUDA_ERROR_NOT_SUPPORTED at the first encode and the
// program stops there.
#include <cuda_runtime.h>
#include <vector>

#include "rgpu_drv_check.h"

constexpr int N = 64, BOX = 16;

__global__ void tma_load(const __grid_constant__ CUtensorMap map, int x0, int y0, float *out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ alignas(128) float tile[BOX][BOX];
  __shared__ alignas(8) unsigned long long bar;
  unsigned bar_addr = (unsigned)__cvta_generic_to_shared(&bar);
  unsigned tile_addr = (unsigned)__cvta_generic_to_shared(&tile[0][0]);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar_addr) : "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar_addr),
                 "r"((unsigned)sizeof tile)
                 : "memory");
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
            tile_addr),
        "l"(&map), "r"(x0), "r"(y0), "r"(bar_addr)
        : "memory");
  }
  asm volatile(
      "{\n .reg .pred p;\n WAIT_%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n @!p bra WAIT_%=;\n}" ::"r"(
          bar_addr)
      : "memory");
  for (int i = threadIdx.x; i < BOX * BOX; i += blockDim.x) out[i] = tile[i / BOX][i % BOX];
#else
  __trap();
#endif
}

static CUresult encode(CUtensorMap *m, void *base, cuuint32_t rank) {
  cuuint64_t dims[2] = {N, N}, strides[1] = {N * sizeof(float)};
  cuuint32_t box[2] = {BOX, BOX}, estr[2] = {1, 1};
  return cuTensorMapEncodeTiled(m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, rank, base, dims, strides, box, estr,
                                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

static void load_and_check(const CUtensorMap &m, int x0, int y0, float *d_out, float sign, const char *what) {
  tma_load<<<1, 128>>>(m, x0, y0, d_out);
  CHECK(cudaGetLastError());
  std::vector<float> out(BOX * BOX);
  CHECK(cudaMemcpy(out.data(), d_out, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  for (int r = 0; r < BOX; r++)
    for (int c = 0; c < BOX; c++) EXPECT(out[r * BOX + c] == sign * (float)((y0 + r) * N + x0 + c));
  printf("%s: box at (%d,%d) loaded, [0][0] = %.0f\n", what, x0, y0, out[0]);
}

int main() {
  CUdevice dev;
  drv_setup(&dev);
  std::vector<float> h(N * N), hneg(N * N);
  for (int i = 0; i < N * N; i++) h[i] = (float)i, hneg[i] = -(float)i;
  float *a, *b, *out;
  CHECK(cudaMalloc(&a, N * N * sizeof(float)));
  CHECK(cudaMalloc(&b, N * N * sizeof(float)));
  CHECK(cudaMalloc(&out, BOX * BOX * sizeof(float)));
  CHECK(cudaMemcpy(a, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b, hneg.data(), hneg.size() * sizeof(float), cudaMemcpyHostToDevice));

  CUtensorMap m1, m2;
  CUresult r = encode(&m1, a, 2);
  if (r == CUDA_ERROR_NOT_SUPPORTED) {
    printf("tensor maps: not supported by this device\n");
    printf("PASS drv_tensor_map\n");
    return 0;
  }
  CU_CHECK(r);
  CU_CHECK(encode(&m2, a, 2));
  EXPECT(memcmp(&m1, &m2, sizeof m1) == 0);
  printf("encode is repeatable: the same %zu bytes\n", sizeof m1);
  load_and_check(m1, 16, 32, out, 1.0f, "tiled");
  load_and_check(m1, 48, 0, out, 1.0f, "tiled");
  CU_CHECK(cuTensorMapReplaceAddress(&m1, b));
  load_and_check(m1, 16, 32, out, -1.0f, "replaced address");
  CU_EXPECT_ERR(encode(&m2, a, 6), CUDA_ERROR_INVALID_VALUE);
  CU_EXPECT_ERR(encode(&m2, (char *)a + 4, 2), CUDA_ERROR_INVALID_VALUE);
  printf("refused: rank 6, a misaligned address\n");
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  CHECK(cudaFree(out));
  printf("PASS drv_tensor_map\n");
  return 0;
}
