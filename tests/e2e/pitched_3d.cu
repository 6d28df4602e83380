// Pitched memory the way image and volume programs use it: cudaMallocPitch
// with cudaMemcpy2D / cudaMemset2D, cudaMalloc3D with cudaMemcpy3D (whole
// volumes, a sub-box at an offset, host memory with a slice height larger
// than the box, async on a stream), cudaMemcpy3DPeer(Async) and cudaMemset3D;
// and the small runtime queries such programs make: cudaFuncGetName,
// cudaFuncGetParamInfo, cudaStreamGetId, cudaInitDevice.  Every value is checked on the host.
#include "rgpu_check.h"
#include <vector>

__global__ void scale_volume(cudaPitchedPtr v, int w, int h, int d, float k) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y, z = blockIdx.z;
  if (x >= w || y >= h || z >= d) return;
  float *row = (float *)((char *)v.ptr + ((size_t)z * v.ysize + y) * v.pitch);
  row[x] = row[x] * k + (float)z;
}

__global__ void add_rows(float *p, size_t pitch, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x < w && y < h) ((float *)((char *)p + y * pitch))[x] += (float)y;
}

int main() {
  int n0 = 0;
  CHECK(cudaGetDeviceCount(&n0));
  const int w = 37, h = 19, d = 5;  // odd sizes: rows shorter than the pitch
  const size_t row = w * sizeof(float);

  // 2D.
  std::vector<float> img(w * h), back(w * h);
  for (int i = 0; i < w * h; i++) img[i] = (float)(i % 101) * 0.5f;
  float *p2 = nullptr;
  size_t pitch = 0;
  CHECK(cudaMallocPitch((void **)&p2, &pitch, row, h));
  EXPECT(pitch >= row && pitch % 256 == 0);
  CHECK(cudaMemcpy2D(p2, pitch, img.data(), row, row, h, cudaMemcpyHostToDevice));
  add_rows<<<dim3(1, h), 64>>>(p2, pitch, w, h);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy2D(back.data(), row, p2, pitch, row, h, cudaMemcpyDeviceToHost));
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) EXPECT(back[y * w + x] == img[y * w + x] + (float)y);
  CHECK(cudaMemset2D(p2, pitch, 0, row, h));
  CHECK(cudaMemcpy2D(back.data(), row, p2, pitch, row, h, cudaMemcpyDeviceToHost));
  for (float v : back) EXPECT(v == 0.0f);
  std::printf("2d: pitch is a multiple of 256, copies and set checked\n");

  // 3D: a whole volume there and back.
  std::vector<float> vol(w * h * d), vback(w * h * d, -1.0f);
  for (int i = 0; i < w * h * d; i++) vol[i] = (float)(i % 997);
  cudaExtent ext = make_cudaExtent(row, h, d);
  cudaPitchedPtr pv;
  CHECK(cudaMalloc3D(&pv, ext));
  EXPECT(pv.pitch >= row && pv.xsize == row && pv.ysize == (size_t)h);
  cudaMemcpy3DParms up = {};
  up.srcPtr = make_cudaPitchedPtr(vol.data(), row, w, h);
  up.dstPtr = pv;
  up.extent = ext;
  up.kind = cudaMemcpyHostToDevice;
  CHECK(cudaMemcpy3D(&up));
  scale_volume<<<dim3(1, h, d), 64>>>(pv, w, h, d, 2.0f);
  CHECK(cudaGetLastError());
  cudaMemcpy3DParms down = {};
  down.srcPtr = pv;
  down.dstPtr = make_cudaPitchedPtr(vback.data(), row, w, h);
  down.extent = ext;
  down.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3D(&down));
  for (int z = 0; z < d; z++)
    for (int i = 0; i < w * h; i++)
      EXPECT(vback[z * w * h + i] == vol[z * w * h + i] * 2.0f + (float)z);
  std::printf("3d: whole volume scaled, %d slices checked\n", d);

  // A 5 x 4 x 3 box at (x 3 floats, y 2, z 1) into a host volume whose
  // slices are 2 rows taller than the box, async on a stream.
  const int bw = 5, bh = 4, bd = 3, hy = bh + 2;
  std::vector<float> box(bw * hy * bd, -7.0f);
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaMemcpy3DParms sub = {};
  sub.srcPtr = pv;
  sub.srcPos = make_cudaPos(3 * sizeof(float), 2, 1);
  sub.dstPtr = make_cudaPitchedPtr(box.data(), bw * sizeof(float), bw, hy);
  sub.extent = make_cudaExtent(bw * sizeof(float), bh, bd);
  sub.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3DAsync(&sub, s));
  CHECK(cudaStreamSynchronize(s));
  for (int z = 0; z < bd; z++)
    for (int y = 0; y < hy; y++)
      for (int x = 0; x < bw; x++) {
        float got = box[(z * hy + y) * bw + x];
        if (y >= bh) {
          EXPECT(got == -7.0f);  // rows past the box stay untouched
        } else {
          int vz = z + 1, vy = y + 2, vx = x + 3;
          EXPECT(got == vol[(vz * h + vy) * w + vx] * 2.0f + (float)vz);
        }
      }
  std::printf("3d: %dx%dx%d box at an offset, async, checked\n", bw, bh, bd);

  // cudaMemcpy3DPeer: the scaled volume into a second one on the same
  // device (any machine has device 0 twice), then back to the host.
  cudaPitchedPtr pv2;
  CHECK(cudaMalloc3D(&pv2, ext));
  cudaMemcpy3DPeerParms peer = {};
  peer.srcPtr = pv;
  peer.srcDevice = 0;
  peer.dstPtr = pv2;
  peer.dstDevice = 0;
  peer.extent = ext;
  CHECK(cudaMemcpy3DPeer(&peer));
  std::vector<float> pback(w * h * d, -1.0f);
  cudaMemcpy3DParms down2 = down;
  down2.srcPtr = pv2;
  down2.dstPtr = make_cudaPitchedPtr(pback.data(), row, w, h);
  CHECK(cudaMemcpy3DPeerAsync(&peer, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemcpy3D(&down2));
  EXPECT(pback == vback);
  EXPECT_ERR(cudaMemcpy3DPeer(nullptr), cudaErrorInvalidValue);
  peer.dstDevice = n0 + 3;
  EXPECT_ERR(cudaMemcpy3DPeer(&peer), cudaErrorInvalidDevice);
  cudaGetLastError();
  CHECK(cudaFree(pv2.ptr));
  std::printf("3d peer: volume copied between two allocations, checked; bad device refused\n");

  CHECK(cudaMemset3D(pv, 0, ext));
  CHECK(cudaMemcpy3D(&down));
  for (float v : vback) EXPECT(v == 0.0f);
  std::printf("3d: memset checked\n");

  // Bad input: a NULL parameter block, a box wider than its pitch.
  EXPECT_ERR(cudaMemcpy3D(nullptr), cudaErrorInvalidValue);
  cudaMemcpy3DParms wide = up;
  wide.extent = make_cudaExtent(pv.pitch + 4, h, d);
  // cudaErrorInvalidPitchValue natively on the H200 (CUDA 13.0).
  EXPECT_ERR(cudaMemcpy3D(&wide), cudaErrorInvalidPitchValue);
  std::printf("3d: a box wider than its pitch: refused\n");
  cudaGetLastError();

  // Queries.
  const char *name = nullptr;
  CHECK(cudaFuncGetName(&name, (const void *)scale_volume));
  std::printf("kernel name: %s\n", name);
  EXPECT_ERR(cudaFuncGetName(nullptr, (const void *)scale_volume), cudaErrorInvalidValue);
  // Where each of scale_volume's five parameters lies in its buffer.
  size_t offs[5], sizes[5];
  for (int i = 0; i < 5; i++)
    CHECK(cudaFuncGetParamInfo((const void *)scale_volume, i, &offs[i], &sizes[i]));
  std::printf("scale_volume parameters (offset/size): %zu/%zu %zu/%zu %zu/%zu %zu/%zu %zu/%zu\n",
              offs[0], sizes[0], offs[1], sizes[1], offs[2], sizes[2], offs[3], sizes[3], offs[4],
              sizes[4]);
  EXPECT(offs[0] == 0 && sizes[0] == sizeof(cudaPitchedPtr) && offs[1] == sizeof(cudaPitchedPtr) &&
         sizes[1] == 4 && offs[4] == offs[3] + 4 && sizes[4] == 4);
  EXPECT_ERR(cudaFuncGetParamInfo((const void *)scale_volume, 5, &offs[0], &sizes[0]),
             cudaErrorInvalidValue);
  cudaGetLastError();
  cudaStream_t s2;
  CHECK(cudaStreamCreate(&s2));
  unsigned long long id1 = 0, id2 = 0, id0 = 0, id0b = 0;
  CHECK(cudaStreamGetId(s, &id1));
  CHECK(cudaStreamGetId(s2, &id2));
  CHECK(cudaStreamGetId(nullptr, &id0));
  CHECK(cudaStreamGetId(cudaStreamLegacy, &id0b));
  EXPECT(id1 != id2 && id1 != id0 && id2 != id0 && id0 == id0b);
  std::printf("stream ids: distinct per stream, the NULL stream is the legacy one\n");
  int n = 0;
  CHECK(cudaGetDeviceCount(&n));
  CHECK(cudaInitDevice(0, 0, 0));
  EXPECT_ERR(cudaInitDevice(n, 0, 0), cudaErrorInvalidDevice);
  cudaGetLastError();

  CHECK(cudaStreamDestroy(s));
  CHECK(cudaStreamDestroy(s2));
  CHECK(cudaFree(pv.ptr));
  CHECK(cudaFree(p2));
  pass("pitched_3d");
  return 0;
}
