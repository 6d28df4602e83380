// CUDA arrays, texture objects and surface objects, as image-processing and
// simulation programs use them: 2D and 3D arrays filled from pitched host
// memory, textures with point and linear filtering, every address mode,
// normalized coordinates and normalized-float reads of 8-bit data,
// tex1Dfetch on linear memory, textures on pitched memory, surface reads and
// writes, array-to-array and 3D copies both ways.  Every sample is checked
// against a value computed here on the CPU (linear filtering to the
// hardware's 8-bit weight precision).
#include "rgpu_check.h"

#include <cmath>
#include <vector>

static float value_at(int x, int y, int z) {
  // Neighbours differ a lot, so a sample from the wrong texel shows.
  unsigned h = (unsigned)x * 73856093u ^ (unsigned)y * 19349663u ^ (unsigned)z * 83492791u;
  return (float)(h % 1000) / 1000.0f;
}

__global__ void sample2d(cudaTextureObject_t t, float *out, int w, int h, float dx, float dy,
                         float scale_u, float scale_v) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h) return;
  out[y * w + x] = tex2D<float>(t, (x + dx) * scale_u, (y + dy) * scale_v);
}

__global__ void sample2d_rgba(cudaTextureObject_t t, float4 *out, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h) return;
  out[y * w + x] = tex2D<float4>(t, x + 0.5f, y + 0.5f);
}

__global__ void fetch1d(cudaTextureObject_t t, int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex1Dfetch<int>(t, i) * 2 + 1;
}

__global__ void sample3d(cudaTextureObject_t t, float *out, int w, int h, int d) {
  int x = threadIdx.x, y = threadIdx.y, z = blockIdx.x;
  if (x >= w || y >= h || z >= d) return;
  out[(z * h + y) * w + x] = tex3D<float>(t, x + 0.5f, y + 0.5f, z + 0.5f);
}

__global__ void sample_layers(cudaTextureObject_t t, float *out, int w, int h) {
  int x = threadIdx.x, y = threadIdx.y, l = blockIdx.x;
  out[(l * h + y) * w + x] = tex2DLayered<float>(t, x + 0.5f, y + 0.5f, l);
}

__global__ void surface_square(cudaSurfaceObject_t s, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h) return;
  int v = surf2Dread<int>(s, x * (int)sizeof(int), y);
  surf2Dwrite(v * v + x, s, x * (int)sizeof(int), y);
}

__global__ void surface_outside(cudaSurfaceObject_t s, int *out, int w) {
  // Reads past the right edge with the zero boundary mode: 0.
  out[0] = surf2Dread<int>(s, (w + 3) * (int)sizeof(int), 0, cudaBoundaryModeZero);
  out[1] = surf2Dread<int>(s, 0, 0, cudaBoundaryModeZero);
}

// What tex2D returns for linear filtering at texel-space coordinate xb (after
// the -0.5 shift), with the weight rounded to 8 fractional bits as the
// hardware keeps it.
static void lin_coord(float xb, int *i0, float *a) {
  float f = std::floor(xb);
  *i0 = (int)f;
  *a = std::round((xb - f) * 256.0f) / 256.0f;
}

static int wrap(int i, int n) { return ((i % n) + n) % n; }

static bool close(float got, float want, float tol) { return std::fabs(got - want) <= tol; }

int main() {
  const int W = 37, H = 23;
  dim3 block(8, 8), grid((W + 7) / 8, (H + 7) / 8);

  // ---- a 2D float array from pitched host memory ----
  const size_t hpitch = (W + 5) * sizeof(float);
  std::vector<unsigned char> host(hpitch * H);
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) *(float *)&host[y * hpitch + x * sizeof(float)] = value_at(x, y, 0);
  cudaChannelFormatDesc fdesc = cudaCreateChannelDesc<float>();
  cudaArray_t arr = nullptr;
  CHECK(cudaMallocArray(&arr, &fdesc, W, H));
  CHECK(cudaMemcpy2DToArray(arr, 0, 0, host.data(), hpitch, W * sizeof(float), H,
                            cudaMemcpyHostToDevice));
  cudaChannelFormatDesc got_desc;
  cudaExtent got_ext;
  unsigned got_flags = 99;
  CHECK(cudaArrayGetInfo(&got_desc, &got_ext, &got_flags, arr));
  EXPECT(got_desc.x == 32 && got_desc.y == 0 && got_desc.f == cudaChannelFormatKindFloat);
  EXPECT(got_ext.width == (size_t)W && got_ext.height == (size_t)H && got_ext.depth == 0);
  EXPECT(got_flags == 0);
  CHECK(cudaGetChannelDesc(&got_desc, arr));
  EXPECT(got_desc.x == 32);
  std::printf("2D array %dx%d: info as created\n", W, H);

  // A copy past the array's edge is refused at the call.
  EXPECT_ERR(cudaMemcpy2DToArray(arr, 4 * sizeof(float), 0, host.data(), hpitch,
                                 W * sizeof(float), H, cudaMemcpyHostToDevice),
             cudaErrorInvalidValue);
  // ... and, as every failing call, left as the thread's last error.
  EXPECT(cudaGetLastError() == cudaErrorInvalidValue);
  EXPECT(cudaGetLastError() == cudaSuccess);

  float *d_out = nullptr;
  CHECK(cudaMalloc(&d_out, W * H * sizeof(float) * 4));
  std::vector<float> out(W * H);

  cudaResourceDesc res;
  std::memset(&res, 0, sizeof res);
  res.resType = cudaResourceTypeArray;
  res.res.array.array = arr;

  // Point sampling, unnormalized, clamp: texel centres are exact, and a
  // shift of 10 texels right clamps at the edge.
  {
    cudaTextureDesc td;
    std::memset(&td, 0, sizeof td);
    td.addressMode[0] = td.addressMode[1] = cudaAddressModeClamp;
    td.filterMode = cudaFilterModePoint;
    td.readMode = cudaReadModeElementType;
    cudaTextureObject_t tex = 0;
    CHECK(cudaCreateTextureObject(&tex, &res, &td, nullptr));
    cudaResourceDesc back;
    CHECK(cudaGetTextureObjectResourceDesc(&back, tex));
    EXPECT(back.resType == cudaResourceTypeArray && back.res.array.array == arr);
    sample2d<<<grid, block>>>(tex, d_out, W, H, 0.5f, 0.5f, 1.0f, 1.0f);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(out.data(), d_out, W * H * sizeof(float), cudaMemcpyDeviceToHost));
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++) EXPECT(out[y * W + x] == value_at(x, y, 0));
    sample2d<<<grid, block>>>(tex, d_out, W, H, 10.5f, -3.5f, 1.0f, 1.0f);
    CHECK(cudaMemcpy(out.data(), d_out, W * H * sizeof(float), cudaMemcpyDeviceToHost));
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++) {
        int sx = x + 10 > W - 1 ? W - 1 : x + 10, sy = y - 4 < 0 ? 0 : y - 4;
        EXPECT(out[y * W + x] == value_at(sx, sy, 0));
      }
    CHECK(cudaDestroyTextureObject(tex));
    std::printf("point sampling with clamp: %d texels exact\n", 2 * W * H);
  }

  // Border: outside the array the border colour.
  {
    cudaTextureDesc td;
    std::memset(&td, 0, sizeof td);
    td.addressMode[0] = td.addressMode[1] = cudaAddressModeBorder;
    td.filterMode = cudaFilterModePoint;
    td.readMode = cudaReadModeElementType;
    td.borderColor[0] = 0.25f;
    cudaTextureObject_t tex = 0;
    CHECK(cudaCreateTextureObject(&tex, &res, &td, nullptr));
    sample2d<<<grid, block>>>(tex, d_out, W, H, 20.5f, 0.5f, 1.0f, 1.0f);
    CHECK(cudaMemcpy(out.data(), d_out, W * H * sizeof(float), cudaMemcpyDeviceToHost));
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++)
        EXPECT(out[y * W + x] == (x + 20 < W ? value_at(x + 20, y, 0) : 0.25f));
    CHECK(cudaDestroyTextureObject(tex));
    std::printf("border colour outside the array\n");
  }

  // Linear filtering with normalized coordinates and wrap (x) / mirror (y).
  {
    cudaTextureDesc td;
    std::memset(&td, 0, sizeof td);
    td.addressMode[0] = cudaAddressModeWrap;
    td.addressMode[1] = cudaAddressModeMirror;
    td.filterMode = cudaFilterModeLinear;
    td.readMode = cudaReadModeElementType;
    td.normalizedCoords = 1;
    cudaTextureObject_t tex = 0;
    CHECK(cudaCreateTextureObject(&tex, &res, &td, nullptr));
    const float dx = 0.3f, dy = 0.8f;
    sample2d<<<grid, block>>>(tex, d_out, W, H, dx, dy, 1.0f / W, 1.0f / H);
    CHECK(cudaMemcpy(out.data(), d_out, W * H * sizeof(float), cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++) {
        float u = (x + dx) * (1.0f / W), v = (y + dy) * (1.0f / H);
        int i0, j0;
        float a, b;
        lin_coord(u * W - 0.5f, &i0, &a);
        lin_coord(v * H - 0.5f, &j0, &b);
        auto mir = [&](int j) { int p = wrap(j, 2 * H); return p < H ? p : 2 * H - 1 - p; };
        float t00 = value_at(wrap(i0, W), mir(j0), 0), t10 = value_at(wrap(i0 + 1, W), mir(j0), 0);
        float t01 = value_at(wrap(i0, W), mir(j0 + 1), 0);
        float t11 = value_at(wrap(i0 + 1, W), mir(j0 + 1), 0);
        float want = (1 - a) * (1 - b) * t00 + a * (1 - b) * t10 + (1 - a) * b * t01 + a * b * t11;
        if (!close(out[y * W + x], want, 4e-3f)) bad++;
      }
    EXPECT(bad == 0);
    CHECK(cudaDestroyTextureObject(tex));
    std::printf("linear filtering, wrap and mirror: %d samples within the hardware's precision\n",
                W * H);
  }

  // ---- uchar4, read as normalized floats ----
  {
    cudaChannelFormatDesc cdesc = cudaCreateChannelDesc<uchar4>();
    cudaArray_t carr = nullptr;
    CHECK(cudaMallocArray(&carr, &cdesc, W, H));
    std::vector<uchar4> px(W * H);
    for (int i = 0; i < W * H; i++)
      px[i] = make_uchar4((unsigned char)(i * 7), (unsigned char)(i * 13), (unsigned char)(255 - i),
                          (unsigned char)(i % 3 ? 255 : 0));
    CHECK(cudaMemcpy2DToArray(carr, 0, 0, px.data(), W * sizeof(uchar4), W * sizeof(uchar4), H,
                              cudaMemcpyHostToDevice));
    cudaResourceDesc cres;
    std::memset(&cres, 0, sizeof cres);
    cres.resType = cudaResourceTypeArray;
    cres.res.array.array = carr;
    cudaTextureDesc td;
    std::memset(&td, 0, sizeof td);
    td.addressMode[0] = td.addressMode[1] = cudaAddressModeClamp;
    td.filterMode = cudaFilterModePoint;
    td.readMode = cudaReadModeNormalizedFloat;
    cudaTextureObject_t tex = 0;
    CHECK(cudaCreateTextureObject(&tex, &cres, &td, nullptr));
    sample2d_rgba<<<grid, block>>>(tex, (float4 *)d_out, W, H);
    std::vector<float4> got(W * H);
    CHECK(cudaMemcpy(got.data(), d_out, W * H * sizeof(float4), cudaMemcpyDeviceToHost));
    for (int i = 0; i < W * H; i++) {
      EXPECT(close(got[i].x, px[i].x / 255.0f, 1e-6f) && close(got[i].y, px[i].y / 255.0f, 1e-6f));
      EXPECT(close(got[i].z, px[i].z / 255.0f, 1e-6f) && close(got[i].w, px[i].w / 255.0f, 1e-6f));
    }
    // Back out of the array, at an offset, into pitched host memory.
    std::vector<uchar4> back(10 * 5, make_uchar4(1, 2, 3, 4));
    CHECK(cudaMemcpy2DFromArray(back.data(), 10 * sizeof(uchar4), carr, 3 * sizeof(uchar4), 2,
                                8 * sizeof(uchar4), 5, cudaMemcpyDeviceToHost));
    for (int y = 0; y < 5; y++)
      for (int x = 0; x < 10; x++) {
        uchar4 g = back[y * 10 + x];
        uchar4 w = x < 8 ? px[(y + 2) * W + x + 3] : make_uchar4(1, 2, 3, 4);
        EXPECT(g.x == w.x && g.y == w.y && g.z == w.z && g.w == w.w);
      }
    CHECK(cudaDestroyTextureObject(tex));
    CHECK(cudaFreeArray(carr));
    std::printf("uchar4 read as normalized float; a sub-rectangle copied back\n");
  }

  // ---- tex1Dfetch on linear memory, a texture on pitched memory ----
  {
    const int N = 1000;
    int *d_in = nullptr, *d_res = nullptr;
    CHECK(cudaMalloc(&d_in, N * sizeof(int)));
    CHECK(cudaMalloc(&d_res, N * sizeof(int)));
    std::vector<int> in(N), res1(N);
    for (int i = 0; i < N; i++) in[i] = i * i - 500;
    CHECK(cudaMemcpy(d_in, in.data(), N * sizeof(int), cudaMemcpyHostToDevice));
    cudaResourceDesc lres;
    std::memset(&lres, 0, sizeof lres);
    lres.resType = cudaResourceTypeLinear;
    lres.res.linear.devPtr = d_in;
    lres.res.linear.desc = cudaCreateChannelDesc<int>();
    lres.res.linear.sizeInBytes = N * sizeof(int);
    cudaTextureDesc td;
    std::memset(&td, 0, sizeof td);
    td.readMode = cudaReadModeElementType;
    cudaTextureObject_t tex = 0;
    CHECK(cudaCreateTextureObject(&tex, &lres, &td, nullptr));
    fetch1d<<<(N + 127) / 128, 128>>>(tex, d_res, N);
    CHECK(cudaMemcpy(res1.data(), d_res, N * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++) EXPECT(res1[i] == in[i] * 2 + 1);
    CHECK(cudaDestroyTextureObject(tex));

    float *d_img = nullptr;
    size_t dpitch = 0;
    CHECK(cudaMallocPitch((void **)&d_img, &dpitch, W * sizeof(float), H));
    CHECK(cudaMemcpy2D(d_img, dpitch, host.data(), hpitch, W * sizeof(float), H,
                       cudaMemcpyHostToDevice));
    cudaResourceDesc pres;
    std::memset(&pres, 0, sizeof pres);
    pres.resType = cudaResourceTypePitch2D;
    pres.res.pitch2D.devPtr = d_img;
    pres.res.pitch2D.desc = fdesc;
    pres.res.pitch2D.width = W;
    pres.res.pitch2D.height = H;
    pres.res.pitch2D.pitchInBytes = dpitch;
    td.addressMode[0] = td.addressMode[1] = cudaAddressModeClamp;
    td.filterMode = cudaFilterModePoint;
    CHECK(cudaCreateTextureObject(&tex, &pres, &td, nullptr));
    sample2d<<<grid, block>>>(tex, d_out, W, H, 0.5f, 0.5f, 1.0f, 1.0f);
    CHECK(cudaMemcpy(out.data(), d_out, W * H * sizeof(float), cudaMemcpyDeviceToHost));
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++) EXPECT(out[y * W + x] == value_at(x, y, 0));
    CHECK(cudaDestroyTextureObject(tex));
    CHECK(cudaFree(d_img));
    CHECK(cudaFree(d_in));
    CHECK(cudaFree(d_res));
    std::printf("tex1Dfetch on linear memory, tex2D on pitched memory\n");
  }

  // ---- surfaces ----
  {
    const int SW = 19, SH = 11;
    cudaChannelFormatDesc idesc = cudaCreateChannelDesc<int>();
    cudaArray_t sarr = nullptr;
    CHECK(cudaMallocArray(&sarr, &idesc, SW, SH, cudaArraySurfaceLoadStore));
    std::vector<int> v(SW * SH), got(SW * SH);
    for (int i = 0; i < SW * SH; i++) v[i] = i - 100;
    CHECK(cudaMemcpy2DToArray(sarr, 0, 0, v.data(), SW * sizeof(int), SW * sizeof(int), SH,
                              cudaMemcpyHostToDevice));
    cudaResourceDesc sres;
    std::memset(&sres, 0, sizeof sres);
    sres.resType = cudaResourceTypeArray;
    sres.res.array.array = sarr;
    cudaSurfaceObject_t surf = 0;
    CHECK(cudaCreateSurfaceObject(&surf, &sres));
    surface_square<<<dim3((SW + 7) / 8, (SH + 7) / 8), dim3(8, 8)>>>(surf, SW, SH);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy2DFromArray(got.data(), SW * sizeof(int), sarr, 0, 0, SW * sizeof(int), SH,
                                cudaMemcpyDeviceToHost));
    for (int y = 0; y < SH; y++)
      for (int x = 0; x < SW; x++) EXPECT(got[y * SW + x] == v[y * SW + x] * v[y * SW + x] + x);
    int *d_two = nullptr, two[2] = {7, 7};
    CHECK(cudaMalloc(&d_two, sizeof two));
    surface_outside<<<1, 1>>>(surf, d_two, SW);
    CHECK(cudaMemcpy(two, d_two, sizeof two, cudaMemcpyDeviceToHost));
    EXPECT(two[0] == 0 && two[1] == got[0]);
    CHECK(cudaFree(d_two));

    // Array to array: a block of the surface array into a fresh one.
    cudaArray_t copy = nullptr;
    CHECK(cudaMallocArray(&copy, &idesc, 8, 4));
    CHECK(cudaMemcpy2DArrayToArray(copy, 0, 0, sarr, 5 * sizeof(int), 3, 8 * sizeof(int), 4,
                                   cudaMemcpyDeviceToDevice));
    std::vector<int> blk(8 * 4);
    CHECK(cudaMemcpy2DFromArray(blk.data(), 8 * sizeof(int), copy, 0, 0, 8 * sizeof(int), 4,
                                cudaMemcpyDeviceToHost));
    for (int y = 0; y < 4; y++)
      for (int x = 0; x < 8; x++) EXPECT(blk[y * 8 + x] == got[(y + 3) * SW + x + 5]);
    CHECK(cudaDestroySurfaceObject(surf));
    CHECK(cudaFreeArray(copy));
    CHECK(cudaFreeArray(sarr));
    std::printf("surface read and write, zero boundary, array to array copy\n");
  }

  // ---- 3D: cudaMemcpy3D both ways, tex3D ----
  {
    const int X = 9, Y = 7, Z = 5;
    cudaArray_t a3 = nullptr;
    CHECK(cudaMalloc3DArray(&a3, &fdesc, make_cudaExtent(X, Y, Z)));
    const size_t p3 = (X + 3) * sizeof(float);
    std::vector<unsigned char> vol(p3 * (Y + 2) * Z, 0);
    for (int z = 0; z < Z; z++)
      for (int y = 0; y < Y; y++)
        for (int x = 0; x < X; x++)
          *(float *)&vol[(z * (Y + 2) + y) * p3 + x * sizeof(float)] = value_at(x, y, z);
    cudaMemcpy3DParms up;
    std::memset(&up, 0, sizeof up);
    up.srcPtr = make_cudaPitchedPtr(vol.data(), p3, X, Y + 2);
    up.dstArray = a3;
    up.extent = make_cudaExtent(X, Y, Z);
    up.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&up));
    cudaResourceDesc r3;
    std::memset(&r3, 0, sizeof r3);
    r3.resType = cudaResourceTypeArray;
    r3.res.array.array = a3;
    cudaTextureDesc td;
    std::memset(&td, 0, sizeof td);
    td.addressMode[0] = td.addressMode[1] = td.addressMode[2] = cudaAddressModeClamp;
    td.filterMode = cudaFilterModePoint;
    td.readMode = cudaReadModeElementType;
    cudaTextureObject_t tex = 0;
    CHECK(cudaCreateTextureObject(&tex, &r3, &td, nullptr));
    sample3d<<<Z, dim3(X, Y)>>>(tex, d_out, X, Y, Z);
    std::vector<float> o3(X * Y * Z);
    CHECK(cudaMemcpy(o3.data(), d_out, o3.size() * sizeof(float), cudaMemcpyDeviceToHost));
    for (int z = 0; z < Z; z++)
      for (int y = 0; y < Y; y++)
        for (int x = 0; x < X; x++) EXPECT(o3[(z * Y + y) * X + x] == value_at(x, y, z));
    // Array -> host: the inner box (1..7, 1..5, 1..3) into a packed buffer.
    std::vector<float> box(7 * 5 * 3, -1.0f);
    cudaMemcpy3DParms down;
    std::memset(&down, 0, sizeof down);
    down.srcArray = a3;
    down.srcPos = make_cudaPos(1, 1, 1);
    down.dstPtr = make_cudaPitchedPtr(box.data(), 7 * sizeof(float), 7, 5);
    down.extent = make_cudaExtent(7, 5, 3);
    down.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&down));
    for (int z = 0; z < 3; z++)
      for (int y = 0; y < 5; y++)
        for (int x = 0; x < 7; x++) EXPECT(box[(z * 5 + y) * 7 + x] == value_at(x + 1, y + 1, z + 1));
    // Array -> device memory -> array, on a stream.
    cudaStream_t st;
    CHECK(cudaStreamCreate(&st));
    cudaPitchedPtr dev3;
    CHECK(cudaMalloc3D(&dev3, make_cudaExtent(X * sizeof(float), Y, Z)));
    cudaMemcpy3DParms a2d;
    std::memset(&a2d, 0, sizeof a2d);
    a2d.srcArray = a3;
    a2d.dstPtr = dev3;
    a2d.extent = make_cudaExtent(X, Y, Z);
    a2d.kind = cudaMemcpyDeviceToDevice;
    CHECK(cudaMemcpy3DAsync(&a2d, st));
    cudaArray_t a3b = nullptr;
    CHECK(cudaMalloc3DArray(&a3b, &fdesc, make_cudaExtent(X, Y, Z)));
    cudaMemcpy3DParms d2a;
    std::memset(&d2a, 0, sizeof d2a);
    d2a.srcPtr = dev3;
    d2a.dstArray = a3b;
    d2a.extent = make_cudaExtent(X, Y, Z);
    d2a.kind = cudaMemcpyDeviceToDevice;
    CHECK(cudaMemcpy3DAsync(&d2a, st));
    CHECK(cudaStreamSynchronize(st));
    std::vector<float> again(X * Y * Z);
    cudaMemcpy3DParms last;
    std::memset(&last, 0, sizeof last);
    last.srcArray = a3b;
    last.dstPtr = make_cudaPitchedPtr(again.data(), X * sizeof(float), X, Y);
    last.extent = make_cudaExtent(X, Y, Z);
    last.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3DAsync(&last, st));
    CHECK(cudaStreamSynchronize(st));
    for (int z = 0; z < Z; z++)
      for (int y = 0; y < Y; y++)
        for (int x = 0; x < X; x++) EXPECT(again[(z * Y + y) * X + x] == value_at(x, y, z));
    CHECK(cudaDestroyTextureObject(tex));
    CHECK(cudaStreamDestroy(st));
    CHECK(cudaFree(dev3.ptr));
    CHECK(cudaFreeArray(a3));
    CHECK(cudaFreeArray(a3b));
    std::printf("3D array: host, device and array copies, tex3D exact\n");
  }

  // A layered 2D array (simpleLayeredTexture's pattern): three layers
  // filled by one cudaMemcpy3D, each sampled by its own block.
  {
    const int LW = 8, LH = 4, L = 3;
    cudaArray_t la = nullptr;
    CHECK(cudaMalloc3DArray(&la, &fdesc, make_cudaExtent(LW, LH, L), cudaArrayLayered));
    std::vector<float> src(LW * LH * L), got(LW * LH * L);
    for (int i = 0; i < LW * LH * L; i++) src[i] = 1.5f * i - 7.0f;
    cudaMemcpy3DParms lp;
    std::memset(&lp, 0, sizeof lp);
    lp.srcPtr = make_cudaPitchedPtr(src.data(), LW * sizeof(float), LW, LH);
    lp.dstArray = la;
    lp.extent = make_cudaExtent(LW, LH, L);
    lp.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&lp));
    cudaResourceDesc lres;
    std::memset(&lres, 0, sizeof lres);
    lres.resType = cudaResourceTypeArray;
    lres.res.array.array = la;
    cudaTextureDesc ltd;
    std::memset(&ltd, 0, sizeof ltd);
    ltd.filterMode = cudaFilterModePoint;
    ltd.readMode = cudaReadModeElementType;
    cudaTextureObject_t lt = 0;
    CHECK(cudaCreateTextureObject(&lt, &lres, &ltd, nullptr));
    sample_layers<<<L, dim3(LW, LH)>>>(lt, d_out, LW, LH);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(got.data(), d_out, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < LW * LH * L; i++) EXPECT(got[i] == src[i]);
    CHECK(cudaDestroyTextureObject(lt));
    CHECK(cudaFreeArray(la));
    std::printf("layered array: %d layers sampled exactly\n", L);
  }

  // The deprecated 1D copies: 50 floats from (5, 2) on run over the end of
  // row 2 into row 3, and come back the same way.
  {
    std::vector<float> in(50), got(50, -1.0f);
    for (int i = 0; i < 50; i++) in[i] = 1000.0f + i;
    CHECK(cudaMemcpyToArray(arr, 5 * sizeof(float), 2, in.data(), 50 * sizeof(float),
                            cudaMemcpyHostToDevice));
    CHECK(cudaMemcpyFromArray(got.data(), arr, 5 * sizeof(float), 2, 50 * sizeof(float),
                              cudaMemcpyDeviceToHost));
    for (int i = 0; i < 50; i++) EXPECT(got[i] == in[i]);
    float row3[W];
    CHECK(cudaMemcpy2DFromArray(row3, sizeof row3, arr, 0, 3, sizeof row3, 1,
                                cudaMemcpyDeviceToHost));
    for (int x = 0; x < 50 - (W - 5); x++) EXPECT(row3[x] == in[W - 5 + x]);
    EXPECT(row3[50 - (W - 5)] == value_at(50 - (W - 5), 3, 0));
    std::printf("deprecated 1D copies across a row boundary\n");
  }

  CHECK(cudaFreeArray(arr));
  CHECK(cudaFree(d_out));
  pass("texture_array");
  return 0;
}
