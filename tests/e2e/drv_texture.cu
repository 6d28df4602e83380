// rgpu-nvcc-flags: -lcuda
// CUDA arrays, texture and surface objects made through the driver API
// (cuArray3DCreate, cuMemcpy2D/3D with array sides, cuTexObjectCreate,
// cuSurfObjectCreate) and read by runtime kernels, as image programs that
// mix the two APIs do.  Every value is checked.
#include <cuda.h>
#include <vector>
#include "rgpu_drv_check.h"

__global__ void fetch(cudaTextureObject_t t, float *out, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < w && y < h) out[y * w + x] = tex2D<float>(t, x + 0.5f, y + 0.5f);
}

__global__ void negate(cudaSurfaceObject_t s, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < w && y < h) {
    float v = surf2Dread<float>(s, x * 4, y);
    surf2Dwrite(-v, s, x * 4, y);
  }
}

int main() {
  const int W = 29, H = 17;
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(nullptr));
  std::vector<float> img(W * H), out(W * H);
  for (int i = 0; i < W * H; i++) img[i] = 0.25f * i - 3.0f;

  CUDA_ARRAY3D_DESCRIPTOR ad = {};
  ad.Width = W;
  ad.Height = H;
  ad.Format = CU_AD_FORMAT_FLOAT;
  ad.NumChannels = 1;
  ad.Flags = CUDA_ARRAY3D_SURFACE_LDST;
  CUarray arr = nullptr;
  CU_CHECK(cuArray3DCreate(&arr, &ad));
  CUDA_ARRAY_DESCRIPTOR back = {};
  CU_CHECK(cuArrayGetDescriptor(&back, arr));
  EXPECT(back.Width == (size_t)W && back.Height == (size_t)H && back.Format == CU_AD_FORMAT_FLOAT &&
         back.NumChannels == 1);
  std::printf("cuArray3DCreate %dx%d float: descriptor as created\n", W, H);

  CUDA_MEMCPY2D up = {};
  up.srcMemoryType = CU_MEMORYTYPE_HOST;
  up.srcHost = img.data();
  up.srcPitch = W * sizeof(float);
  up.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  up.dstArray = arr;
  up.WidthInBytes = W * sizeof(float);
  up.Height = H;
  CU_CHECK(cuMemcpy2D(&up));

  CUDA_RESOURCE_DESC rd = {};
  rd.resType = CU_RESOURCE_TYPE_ARRAY;
  rd.res.array.hArray = arr;
  CUDA_TEXTURE_DESC td = {};
  td.addressMode[0] = td.addressMode[1] = CU_TR_ADDRESS_MODE_CLAMP;
  td.filterMode = CU_TR_FILTER_MODE_POINT;
  td.flags = CU_TRSF_READ_AS_INTEGER;
  CUtexObject tex = 0;
  CU_CHECK(cuTexObjectCreate(&tex, &rd, &td, nullptr));
  CUDA_RESOURCE_DESC rback = {};
  CU_CHECK(cuTexObjectGetResourceDesc(&rback, tex));
  EXPECT(rback.resType == CU_RESOURCE_TYPE_ARRAY && rback.res.array.hArray == arr);

  float *d_out = nullptr;
  CHECK(cudaMalloc(&d_out, W * H * sizeof(float)));
  dim3 b(8, 8), g((W + 7) / 8, (H + 7) / 8);
  fetch<<<g, b>>>((cudaTextureObject_t)tex, d_out, W, H);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(out.data(), d_out, W * H * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < W * H; i++) EXPECT(out[i] == img[i]);
  std::printf("runtime kernel reads a driver texture object: %d texels exact\n", W * H);

  CUsurfObject surf = 0;
  CU_CHECK(cuSurfObjectCreate(&surf, &rd));
  negate<<<g, b>>>((cudaSurfaceObject_t)surf, W, H);
  CHECK(cudaGetLastError());
  // A sub-box of rows 3..9 back to the host with cuMemcpy3D.
  std::vector<float> box(W * 7, 0.0f);
  CUDA_MEMCPY3D down = {};
  down.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  down.srcArray = arr;
  down.srcY = 3;
  down.dstMemoryType = CU_MEMORYTYPE_HOST;
  down.dstHost = box.data();
  down.dstPitch = W * sizeof(float);
  down.dstHeight = 7;
  down.WidthInBytes = W * sizeof(float);
  down.Height = 7;
  down.Depth = 1;
  CU_CHECK(cuMemcpy3D(&down));
  for (int y = 0; y < 7; y++)
    for (int x = 0; x < W; x++) EXPECT(box[y * W + x] == -img[(y + 3) * W + x]);
  // Array to device memory at an element offset, then checked.
  CUDA_MEMCPY2D a2d = {};
  a2d.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  a2d.srcArray = arr;
  a2d.srcXInBytes = 2 * sizeof(float);
  a2d.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  a2d.dstDevice = (CUdeviceptr)d_out;
  a2d.dstPitch = 10 * sizeof(float);
  a2d.WidthInBytes = 10 * sizeof(float);
  a2d.Height = H;
  CU_CHECK(cuMemcpy2D(&a2d));
  CHECK(cudaMemcpy(out.data(), d_out, 10 * H * sizeof(float), cudaMemcpyDeviceToHost));
  for (int y = 0; y < H; y++)
    for (int x = 0; x < 10; x++) EXPECT(out[y * 10 + x] == -img[y * W + x + 2]);
  std::printf("surface writes, cuMemcpy3D and cuMemcpy2D out of the array\n");

  CU_CHECK(cuSurfObjectDestroy(surf));
  CU_CHECK(cuTexObjectDestroy(tex));
  CU_CHECK(cuArrayDestroy(arr));
  CHECK(cudaFree(d_out));
  pass("drv_texture");
  return 0;
}
