/* softgpu CUDA arrays, 2D/3D copies, texture and surface objects.  Expected
 * values are computed by hand from the CUDA programming guide's texture
 * fetching rules (see sg_ptx_tex.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cuda.h>

static CUcontext ctx;

static int setup(void **state) {
  (void)state;
  if (cuInit(0) != CUDA_SUCCESS) return -1;
  if (cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS) return -1;
  return cuCtxSetCurrent(ctx) == CUDA_SUCCESS ? 0 : -1;
}

static CUarray make_array(size_t w, size_t h, size_t d, CUarray_format f, unsigned ch, unsigned flags) {
  CUDA_ARRAY3D_DESCRIPTOR ad;
  memset(&ad, 0, sizeof ad);
  ad.Width = w;
  ad.Height = h;
  ad.Depth = d;
  ad.Format = f;
  ad.NumChannels = ch;
  ad.Flags = flags;
  CUarray a = NULL;
  assert_int_equal(cuArray3DCreate(&a, &ad), CUDA_SUCCESS);
  return a;
}

/* Copies a whole 2D array (Depth 1) of `rowbytes` x h into dense host memory. */
static void array_to_host(CUarray a, void *dst, size_t rowbytes, size_t h) {
  CUDA_MEMCPY2D c;
  memset(&c, 0, sizeof c);
  c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  c.srcArray = a;
  c.dstMemoryType = CU_MEMORYTYPE_HOST;
  c.dstHost = dst;
  c.dstPitch = rowbytes;
  c.WidthInBytes = rowbytes;
  c.Height = h;
  assert_int_equal(cuMemcpy2D(&c), CUDA_SUCCESS);
}

static void host_to_array(CUarray a, const void *src, size_t rowbytes, size_t h) {
  CUDA_MEMCPY2D c;
  memset(&c, 0, sizeof c);
  c.srcMemoryType = CU_MEMORYTYPE_HOST;
  c.srcHost = src;
  c.srcPitch = rowbytes;
  c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  c.dstArray = a;
  c.WidthInBytes = rowbytes;
  c.Height = h;
  assert_int_equal(cuMemcpy2D(&c), CUDA_SUCCESS);
}

static void test_array_create(void **state) {
  (void)state;
  CUDA_ARRAY_DESCRIPTOR d1 = {.Width = 16, .Height = 0, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 2};
  CUarray a = NULL;
  assert_int_equal(cuArrayCreate(&a, &d1), CUDA_SUCCESS);
  CUDA_ARRAY_DESCRIPTOR g;
  assert_int_equal(cuArrayGetDescriptor(&g, a), CUDA_SUCCESS);
  assert_int_equal(g.Width, 16);
  assert_int_equal(g.Height, 0);
  assert_int_equal(g.Format, CU_AD_FORMAT_FLOAT);
  assert_int_equal(g.NumChannels, 2);
  CUDA_ARRAY3D_DESCRIPTOR g3;
  assert_int_equal(cuArray3DGetDescriptor(&g3, a), CUDA_SUCCESS);
  assert_int_equal(g3.Depth, 0);
  assert_int_equal(cuArrayDestroy(a), CUDA_SUCCESS);
  /* stale, forged and NULL handles */
  assert_int_equal(cuArrayDestroy(a), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(cuArrayGetDescriptor(&g, a), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(cuArrayDestroy((CUarray)(uintptr_t)0x12345678), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(cuArrayDestroy(NULL), CUDA_ERROR_INVALID_HANDLE);

  CUDA_ARRAY3D_DESCRIPTOR bad = {.Width = 4, .Height = 4, .Depth = 0, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 3};
  assert_int_equal(cuArray3DCreate(&a, &bad), CUDA_ERROR_INVALID_VALUE); /* 3 channels */
  bad.NumChannels = 1;
  bad.Width = 0;
  assert_int_equal(cuArray3DCreate(&a, &bad), CUDA_ERROR_INVALID_VALUE);
  bad.Width = 4;
  bad.Height = 0;
  bad.Depth = 3;
  assert_int_equal(cuArray3DCreate(&a, &bad), CUDA_ERROR_INVALID_VALUE); /* 1D with a depth */
  bad.Height = 4;
  bad.Format = (CUarray_format)0x77;
  assert_int_equal(cuArray3DCreate(&a, &bad), CUDA_ERROR_INVALID_VALUE);
  bad.Format = CU_AD_FORMAT_FLOAT;
  bad.Flags = CUDA_ARRAY3D_CUBEMAP;
  assert_int_equal(cuArray3DCreate(&a, &bad), CUDA_ERROR_NOT_SUPPORTED);
  bad.Flags = CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST;
  assert_int_equal(cuArray3DCreate(&a, &bad), CUDA_SUCCESS);
  assert_int_equal(cuArrayDestroy(a), CUDA_SUCCESS);

  /* arrays count against the device memory limit (64M in this test) */
  size_t free0, free1, total;
  assert_int_equal(cuMemGetInfo(&free0, &total), CUDA_SUCCESS);
  a = make_array(1024, 1024, 0, CU_AD_FORMAT_FLOAT, 4, 0); /* 16 MiB */
  assert_int_equal(cuMemGetInfo(&free1, &total), CUDA_SUCCESS);
  assert_int_equal(free0 - free1, 16u << 20);
  CUDA_ARRAY3D_DESCRIPTOR big = {.Width = 4096, .Height = 4096, .Depth = 0, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 4};
  CUarray b = NULL;
  assert_int_equal(cuArray3DCreate(&b, &big), CUDA_ERROR_OUT_OF_MEMORY);
  assert_int_equal(cuArrayDestroy(a), CUDA_SUCCESS);
  assert_int_equal(cuMemGetInfo(&free1, &total), CUDA_SUCCESS);
  assert_int_equal(free1, free0);
}

static void test_copy_2d(void **state) {
  (void)state;
  /* 8 x 4 floats; host source with a pitch of 10 floats */
  CUarray a = make_array(8, 4, 0, CU_AD_FORMAT_FLOAT, 1, 0);
  float src[6][10], dense[4][8];
  for (int y = 0; y < 6; y++)
    for (int x = 0; x < 10; x++) src[y][x] = (float)(y * 100 + x);
  CUDA_MEMCPY2D c;
  memset(&c, 0, sizeof c);
  c.srcMemoryType = CU_MEMORYTYPE_HOST;
  c.srcHost = src;
  c.srcPitch = sizeof src[0];
  c.srcXInBytes = 1 * sizeof(float);
  c.srcY = 1;
  c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  c.dstArray = a;
  c.dstXInBytes = 2 * sizeof(float);
  c.dstY = 0;
  c.WidthInBytes = 5 * sizeof(float);
  c.Height = 3;
  assert_int_equal(cuMemcpy2D(&c), CUDA_SUCCESS);
  array_to_host(a, dense, sizeof dense[0], 4);
  for (int y = 0; y < 4; y++)
    for (int x = 0; x < 8; x++) {
      float want = (y < 3 && x >= 2 && x < 7) ? (float)((y + 1) * 100 + (x - 2 + 1)) : 0.0f;
      assert_true(dense[y][x] == want);
    }

  /* array -> device (pitched) -> second array -> host, with offsets */
  CUdeviceptr dev;
  const size_t dpitch = 64;
  assert_int_equal(cuMemAlloc(&dev, dpitch * 4), CUDA_SUCCESS);
  CUDA_MEMCPY2D c2;
  memset(&c2, 0, sizeof c2);
  c2.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  c2.srcArray = a;
  c2.srcXInBytes = 2 * sizeof(float);
  c2.srcY = 1;
  c2.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c2.dstDevice = dev;
  c2.dstPitch = dpitch;
  c2.WidthInBytes = 3 * sizeof(float);
  c2.Height = 2;
  assert_int_equal(cuMemcpy2D(&c2), CUDA_SUCCESS);
  float row[16];
  /* destination row r holds the array's row 1 + r from x = 2 */
  assert_int_equal(cuMemcpyDtoH(row, dev, 3 * sizeof(float)), CUDA_SUCCESS);
  assert_true(row[0] == 201.0f && row[1] == 202.0f && row[2] == 203.0f);
  assert_int_equal(cuMemcpyDtoH(row, dev + dpitch, 3 * sizeof(float)), CUDA_SUCCESS);
  assert_true(row[0] == 301.0f && row[1] == 302.0f && row[2] == 303.0f);

  CUarray b = make_array(4, 4, 0, CU_AD_FORMAT_FLOAT, 1, 0);
  CUDA_MEMCPY2D c3;
  memset(&c3, 0, sizeof c3);
  c3.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c3.srcDevice = dev;
  c3.srcPitch = dpitch;
  c3.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  c3.dstArray = b;
  c3.dstXInBytes = 1 * sizeof(float);
  c3.dstY = 2;
  c3.WidthInBytes = 3 * sizeof(float);
  c3.Height = 2;
  assert_int_equal(cuMemcpy2D(&c3), CUDA_SUCCESS);
  /* array -> array: b's (1..3, 2) to a's (0..2, 3) */
  CUDA_MEMCPY2D c4;
  memset(&c4, 0, sizeof c4);
  c4.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  c4.srcArray = b;
  c4.srcXInBytes = 1 * sizeof(float);
  c4.srcY = 2;
  c4.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  c4.dstArray = a;
  c4.dstY = 3;
  c4.WidthInBytes = 3 * sizeof(float);
  c4.Height = 1;
  assert_int_equal(cuMemcpy2D(&c4), CUDA_SUCCESS);
  array_to_host(a, dense, sizeof dense[0], 4);
  /* b's rows 2..3 got the device rows at x 1..3; its (1..3, 2) went to a's row 3 */
  assert_true(dense[3][0] == 201.0f && dense[3][1] == 202.0f && dense[3][2] == 203.0f && dense[3][3] == 0.0f);

  /* UNIFIED on host memory, and an async copy from pinned memory */
  float *pinned;
  assert_int_equal(cuMemAllocHost((void **)&pinned, 8 * sizeof(float)), CUDA_SUCCESS);
  for (int i = 0; i < 8; i++) pinned[i] = -1.0f - (float)i;
  CUstream s;
  assert_int_equal(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUDA_MEMCPY2D c5;
  memset(&c5, 0, sizeof c5);
  c5.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
  c5.srcDevice = (CUdeviceptr)(uintptr_t)pinned;
  c5.srcPitch = 8 * sizeof(float);
  c5.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  c5.dstArray = a;
  c5.dstY = 0;
  c5.WidthInBytes = 8 * sizeof(float);
  c5.Height = 1;
  assert_int_equal(cuMemcpy2DAsync(&c5, s), CUDA_SUCCESS);
  assert_int_equal(cuStreamSynchronize(s), CUDA_SUCCESS);
  array_to_host(a, dense, sizeof dense[0], 4);
  for (int x = 0; x < 8; x++) assert_true(dense[0][x] == -1.0f - (float)x);
  assert_int_equal(cuMemcpy2DUnaligned(&c5), CUDA_SUCCESS);

  /* out of range, misaligned, forged */
  CUDA_MEMCPY2D e = c;
  e.dstXInBytes = 4 * sizeof(float); /* 4 + 5 > 8 */
  assert_int_equal(cuMemcpy2D(&e), CUDA_ERROR_INVALID_VALUE);
  e = c;
  e.dstY = 2; /* 2 + 3 > 4 */
  assert_int_equal(cuMemcpy2D(&e), CUDA_ERROR_INVALID_VALUE);
  e = c;
  e.dstXInBytes = 2; /* not a whole element */
  assert_int_equal(cuMemcpy2D(&e), CUDA_ERROR_INVALID_VALUE);
  e = c2;
  e.Height = 5; /* past the array */
  assert_int_equal(cuMemcpy2D(&e), CUDA_ERROR_INVALID_VALUE);
  e = c2;
  e.srcY = 0;
  e.dstDevice = dev + dpitch * 3; /* two rows from the last row of the allocation */
  assert_int_equal(cuMemcpy2D(&e), CUDA_ERROR_INVALID_VALUE);
  e = c;
  e.dstArray = (CUarray)(uintptr_t)0xdeadbeef;
  assert_int_equal(cuMemcpy2D(&e), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(cuMemcpy2D(NULL), CUDA_ERROR_INVALID_VALUE);

  assert_int_equal(cuStreamDestroy(s), CUDA_SUCCESS);
  assert_int_equal(cuMemFreeHost(pinned), CUDA_SUCCESS);
  assert_int_equal(cuMemFree(dev), CUDA_SUCCESS);
  assert_int_equal(cuArrayDestroy(b), CUDA_SUCCESS);
  e = c;
  e.dstArray = b; /* destroyed */
  assert_int_equal(cuMemcpy2D(&e), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(cuArrayDestroy(a), CUDA_SUCCESS);
}

static void test_copy_3d(void **state) {
  (void)state;
  /* 4 x 3 x 2 uchar2 array */
  CUarray a = make_array(4, 3, 2, CU_AD_FORMAT_UNSIGNED_INT8, 2, 0);
  unsigned char src[2][3][8];
  for (int z = 0; z < 2; z++)
    for (int y = 0; y < 3; y++)
      for (int x = 0; x < 8; x++) src[z][y][x] = (unsigned char)(z * 64 + y * 16 + x);
  CUDA_MEMCPY3D c;
  memset(&c, 0, sizeof c);
  c.srcMemoryType = CU_MEMORYTYPE_HOST;
  c.srcHost = src;
  c.srcPitch = 8;
  c.srcHeight = 3;
  c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  c.dstArray = a;
  c.WidthInBytes = 8;
  c.Height = 3;
  c.Depth = 2;
  assert_int_equal(cuMemcpy3D(&c), CUDA_SUCCESS);
  /* read back element (1..2, 1..2, 1) into a device buffer, then host */
  CUdeviceptr dev;
  assert_int_equal(cuMemAlloc(&dev, 64), CUDA_SUCCESS);
  CUDA_MEMCPY3D r;
  memset(&r, 0, sizeof r);
  r.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  r.srcArray = a;
  r.srcXInBytes = 2;
  r.srcY = 1;
  r.srcZ = 1;
  r.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  r.dstDevice = dev;
  r.dstPitch = 4;
  r.dstHeight = 2;
  r.WidthInBytes = 4;
  r.Height = 2;
  r.Depth = 1;
  CUstream s;
  assert_int_equal(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  assert_int_equal(cuMemcpy3DAsync(&r, s), CUDA_SUCCESS);
  assert_int_equal(cuStreamSynchronize(s), CUDA_SUCCESS);
  unsigned char got[8];
  assert_int_equal(cuMemcpyDtoH(got, dev, 8), CUDA_SUCCESS);
  for (int y = 0; y < 2; y++)
    for (int x = 0; x < 4; x++) assert_int_equal(got[y * 4 + x], 64 + (1 + y) * 16 + 2 + x);
  r.srcZ = 2; /* past the depth */
  assert_int_equal(cuMemcpy3D(&r), CUDA_ERROR_INVALID_VALUE);
  r.srcZ = 1;
  r.srcLOD = 1;
  assert_int_equal(cuMemcpy3D(&r), CUDA_ERROR_INVALID_VALUE);

  /* a graph memcpy node with an array source uses the same engine */
  CUgraph g;
  CUgraphNode n;
  CUgraphExec ge;
  r.srcLOD = 0;
  r.srcZ = 0;
  assert_int_equal(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  assert_int_equal(cuGraphAddMemcpyNode(&n, g, NULL, 0, &r, ctx), CUDA_SUCCESS);
  assert_int_equal(cuGraphInstantiate(&ge, g, 0), CUDA_SUCCESS);
  assert_int_equal(cuGraphLaunch(ge, s), CUDA_SUCCESS);
  assert_int_equal(cuStreamSynchronize(s), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(got, dev, 8), CUDA_SUCCESS);
  for (int y = 0; y < 2; y++)
    for (int x = 0; x < 4; x++) assert_int_equal(got[y * 4 + x], (1 + y) * 16 + 2 + x);
  assert_int_equal(cuGraphExecDestroy(ge), CUDA_SUCCESS);
  assert_int_equal(cuGraphDestroy(g), CUDA_SUCCESS);

  /* stream capture turns cuMemcpy3DAsync into a memcpy node */
  r.srcZ = 1;
  assert_int_equal(cuMemsetD8(dev, 0, 64), CUDA_SUCCESS);
  assert_int_equal(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  assert_int_equal(cuMemcpy3DAsync(&r, s), CUDA_SUCCESS);
  assert_int_equal(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  size_t nn = 0;
  assert_int_equal(cuGraphGetNodes(g, NULL, &nn), CUDA_SUCCESS);
  assert_int_equal(nn, 1);
  assert_int_equal(cuGraphInstantiate(&ge, g, 0), CUDA_SUCCESS);
  assert_int_equal(cuGraphLaunch(ge, s), CUDA_SUCCESS);
  assert_int_equal(cuStreamSynchronize(s), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(got, dev, 8), CUDA_SUCCESS);
  assert_int_equal(got[0], 64 + 16 + 2);
  assert_int_equal(cuGraphExecDestroy(ge), CUDA_SUCCESS);
  assert_int_equal(cuGraphDestroy(g), CUDA_SUCCESS);

  assert_int_equal(cuStreamDestroy(s), CUDA_SUCCESS);
  assert_int_equal(cuMemFree(dev), CUDA_SUCCESS);
  assert_int_equal(cuArrayDestroy(a), CUDA_SUCCESS);
}

/* ---- kernels ------------------------------------------------------------ */

static CUmodule mod;

static CUfunction fn(const char *name) {
  if (!mod) {
    FILE *f = fopen(SG_TEX_PTX, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = calloc(1, (size_t)n + 1);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    assert_int_equal(cuModuleLoadData(&mod, buf), CUDA_SUCCESS);
    free(buf);
  }
  CUfunction k;
  assert_int_equal(cuModuleGetFunction(&k, mod, name), CUDA_SUCCESS);
  return k;
}

static CUdeviceptr dev_floats(const float *v, int n) {
  CUdeviceptr d;
  assert_int_equal(cuMemAlloc(&d, (size_t)n * 4 + 4), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyHtoD(d, v, (size_t)n * 4), CUDA_SUCCESS);
  return d;
}

static CUtexObject make_tex(CUarray a, CUaddress_mode am, CUfilter_mode fm, unsigned flags, float border) {
  CUDA_RESOURCE_DESC rd;
  memset(&rd, 0, sizeof rd);
  rd.resType = CU_RESOURCE_TYPE_ARRAY;
  rd.res.array.hArray = a;
  CUDA_TEXTURE_DESC td;
  memset(&td, 0, sizeof td);
  td.addressMode[0] = td.addressMode[1] = td.addressMode[2] = am;
  td.filterMode = fm;
  td.flags = flags;
  for (int i = 0; i < 4; i++) td.borderColor[i] = border;
  CUtexObject t = 0;
  assert_int_equal(cuTexObjectCreate(&t, &rd, &td, NULL), CUDA_SUCCESS);
  return t;
}

/* Runs tex1d_f over xs with texture t; out gets n results. */
static void run_tex1d(CUtexObject t, const float *xs, int n, float *out) {
  CUdeviceptr dx = dev_floats(xs, n), dout;
  assert_int_equal(cuMemAlloc(&dout, (size_t)n * 4), CUDA_SUCCESS);
  void *args[] = {&t, &dout, &dx};
  assert_int_equal(cuLaunchKernel(fn("tex1d_f"), 1, 1, 1, (unsigned)n, 1, 1, 0, NULL, args, NULL), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(out, dout, (size_t)n * 4), CUDA_SUCCESS);
  cuMemFree(dx);
  cuMemFree(dout);
}

static void expect_1d(CUarray a, CUaddress_mode am, CUfilter_mode fm, unsigned flags, float border, const float *xs,
                      const float *want, int n) {
  CUtexObject t = make_tex(a, am, fm, flags, border);
  float got[16];
  run_tex1d(t, xs, n, got);
  for (int i = 0; i < n; i++) {
    if (got[i] != want[i]) fail_msg("mode %d filter %d flags %u: x=%g got %.9g want %.9g", am, fm, flags, xs[i], got[i], want[i]);
  }
  assert_int_equal(cuTexObjectDestroy(t), CUDA_SUCCESS);
}

static void test_tex_1d_modes(void **state) {
  (void)state;
  CUarray a = make_array(4, 0, 0, CU_AD_FORMAT_FLOAT, 1, 0);
  const float T[4] = {10, 20, 30, 40};
  host_to_array(a, T, sizeof T, 1);
  const unsigned N = CU_TRSF_NORMALIZED_COORDINATES;

  const float xp[] = {-1, 0.5f, 1.99f, 3.5f, 10};
  const float wp[] = {10, 10, 20, 40, 40};
  expect_1d(a, CU_TR_ADDRESS_MODE_CLAMP, CU_TR_FILTER_MODE_POINT, 0, 0, xp, wp, 5);
  /* WRAP without normalized coordinates behaves as CLAMP */
  expect_1d(a, CU_TR_ADDRESS_MODE_WRAP, CU_TR_FILTER_MODE_POINT, 0, 0, xp, wp, 5);

  /* linear: x - 0.5, weights rounded to 1/256 */
  const float xl[] = {1.0f, 2.25f, 0.0f, 4.5f, 1.5f + 1.0f / 1024, 1.5f + 1.4f / 256};
  const float wl[] = {15, 27.5f, 10, 40, 20, 20 + 10.0f / 256};
  expect_1d(a, CU_TR_ADDRESS_MODE_CLAMP, CU_TR_FILTER_MODE_LINEAR, 0, 0, xl, wl, 6);

  const float xb[] = {-0.5f, 4.0f, 3.9f, 0.25f};
  const float wbp[] = {99, 99, 40, 10};
  expect_1d(a, CU_TR_ADDRESS_MODE_BORDER, CU_TR_FILTER_MODE_POINT, 0, 99, xb, wbp, 4);
  /* -0.5: xB -1, alpha 0: the border texel alone; 4.0: xB 3.5, T[3] and
   * border halves; 3.9: xB 3.4, alpha round(0.4*256)/256 = 102/256;
   * 0.25: xB -0.25, alpha 0.75 between border and T[0] */
  const float wbl2[] = {99, 0.5f * 40 + 0.5f * 99, (1 - 102.0f / 256) * 40 + (102.0f / 256) * 99,
                        0.25f * 99 + 0.75f * 10};
  expect_1d(a, CU_TR_ADDRESS_MODE_BORDER, CU_TR_FILTER_MODE_LINEAR, 0, 99, xb, wbl2, 4);

  const float xw[] = {1.125f, -0.125f, 0.6f};
  const float ww[] = {10, 40, 30};
  expect_1d(a, CU_TR_ADDRESS_MODE_WRAP, CU_TR_FILTER_MODE_POINT, N, 0, xw, ww, 3);
  const float xm[] = {1.125f, -0.125f, 1.6f};
  const float wm[] = {40, 10, 20};
  expect_1d(a, CU_TR_ADDRESS_MODE_MIRROR, CU_TR_FILTER_MODE_POINT, N, 0, xm, wm, 3);
  const float xwl[] = {0.0f, 0.5f};
  const float wwl[] = {25, 25}; /* 0.5 -> 2.0 -> xb 1.5: T[1], T[2] halves */
  expect_1d(a, CU_TR_ADDRESS_MODE_WRAP, CU_TR_FILTER_MODE_LINEAR, N, 0, xwl, wwl, 2);
  const float xml[] = {0.0f};
  const float wml[] = {10}; /* xb -0.5: mirror(-1) = 0 and 0 */
  expect_1d(a, CU_TR_ADDRESS_MODE_MIRROR, CU_TR_FILTER_MODE_LINEAR, N, 0, xml, wml, 1);
  const float xcn[] = {0.5f, 1.0f, -3.0f};
  const float wcn[] = {30, 40, 10};
  expect_1d(a, CU_TR_ADDRESS_MODE_CLAMP, CU_TR_FILTER_MODE_POINT, N, 0, xcn, wcn, 3);

  /* descriptors round-trip; invalid ones refused */
  CUtexObject t = make_tex(a, CU_TR_ADDRESS_MODE_BORDER, CU_TR_FILTER_MODE_LINEAR, N, 7);
  CUDA_TEXTURE_DESC td;
  CUDA_RESOURCE_DESC rd;
  assert_int_equal(cuTexObjectGetTextureDesc(&td, t), CUDA_SUCCESS);
  assert_int_equal(td.addressMode[0], CU_TR_ADDRESS_MODE_BORDER);
  assert_int_equal(td.filterMode, CU_TR_FILTER_MODE_LINEAR);
  assert_int_equal(td.flags, N);
  assert_true(td.borderColor[2] == 7.0f);
  assert_int_equal(cuTexObjectGetResourceDesc(&rd, t), CUDA_SUCCESS);
  assert_int_equal(rd.resType, CU_RESOURCE_TYPE_ARRAY);
  assert_ptr_equal(rd.res.array.hArray, a);
  CUDA_RESOURCE_VIEW_DESC vd;
  assert_int_equal(cuTexObjectGetResourceViewDesc(&vd, t), CUDA_ERROR_NOT_SUPPORTED);
  assert_int_equal(cuTexObjectDestroy(t), CUDA_SUCCESS);
  assert_int_equal(cuTexObjectDestroy(t), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuTexObjectGetTextureDesc(&td, t), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuTexObjectDestroy(0x123456789abcull), CUDA_ERROR_INVALID_VALUE);

  memset(&rd, 0, sizeof rd);
  memset(&td, 0, sizeof td);
  rd.resType = CU_RESOURCE_TYPE_ARRAY;
  rd.res.array.hArray = (CUarray)(uintptr_t)0xbad0;
  assert_int_equal(cuTexObjectCreate(&t, &rd, &td, NULL), CUDA_ERROR_INVALID_HANDLE);
  rd.res.array.hArray = a;
  td.flags = CU_TRSF_SRGB;
  assert_int_equal(cuTexObjectCreate(&t, &rd, &td, NULL), CUDA_ERROR_NOT_SUPPORTED);
  td.flags = 0;
  td.addressMode[1] = (CUaddress_mode)9;
  assert_int_equal(cuTexObjectCreate(&t, &rd, &td, NULL), CUDA_ERROR_INVALID_VALUE);
  td.addressMode[1] = CU_TR_ADDRESS_MODE_CLAMP;
  rd.resType = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
  assert_int_equal(cuTexObjectCreate(&t, &rd, &td, NULL), CUDA_ERROR_NOT_SUPPORTED);
  rd.resType = CU_RESOURCE_TYPE_ARRAY;
  assert_int_equal(cuTexObjectCreate(&t, &rd, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
  /* surfaces need CUDA_ARRAY3D_SURFACE_LDST */
  CUsurfObject so;
  assert_int_equal(cuSurfObjectCreate(&so, &rd), CUDA_ERROR_INVALID_VALUE);

  /* a texture whose array was destroyed faults in a kernel, never crashes */
  t = make_tex(a, CU_TR_ADDRESS_MODE_CLAMP, CU_TR_FILTER_MODE_POINT, 0, 0);
  assert_int_equal(cuArrayDestroy(a), CUDA_SUCCESS);
  CUdeviceptr dx = dev_floats(xp, 1), dout;
  assert_int_equal(cuMemAlloc(&dout, 4), CUDA_SUCCESS);
  void *args[] = {&t, &dout, &dx};
  assert_int_equal(cuLaunchKernel(fn("tex1d_f"), 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL), CUDA_SUCCESS);
  assert_int_equal(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  /* the context is sticky now: reset and start again */
  mod = NULL;
  assert_int_equal(cuDevicePrimaryCtxReset(0), CUDA_SUCCESS);
  CUcontext c2;
  assert_int_equal(cuDevicePrimaryCtxRetain(&c2, 0), CUDA_SUCCESS);
  assert_int_equal(cuCtxSetCurrent(c2), CUDA_SUCCESS);
  ctx = c2;
}

static void test_tex_forged_handle(void **state) {
  (void)state;
  float xs[1] = {0};
  CUdeviceptr dx = dev_floats(xs, 1), dout;
  assert_int_equal(cuMemAlloc(&dout, 4), CUDA_SUCCESS);
  CUtexObject t = 0xfeedface12345ull;
  void *args[] = {&t, &dout, &dx};
  assert_int_equal(cuLaunchKernel(fn("tex1d_f"), 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL), CUDA_SUCCESS);
  assert_int_equal(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  mod = NULL;
  assert_int_equal(cuDevicePrimaryCtxReset(0), CUDA_SUCCESS);
  assert_int_equal(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
  assert_int_equal(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
}

static void test_tex_2d_3d(void **state) {
  (void)state;
  /* uchar4 2x2, normalized float reads */
  CUarray a = make_array(2, 2, 0, CU_AD_FORMAT_UNSIGNED_INT8, 4, 0);
  const unsigned char px[2][2][4] = {{{255, 0, 51, 255}, {0, 255, 102, 0}}, {{128, 64, 0, 255}, {1, 2, 3, 4}}};
  host_to_array(a, px, 8, 2);
  CUtexObject t = make_tex(a, CU_TR_ADDRESS_MODE_CLAMP, CU_TR_FILTER_MODE_LINEAR, 0, 0);
  const float xs[] = {0.5f, 1.0f, 0.5f}, ys[] = {0.5f, 0.5f, 1.5f};
  CUdeviceptr dx = dev_floats(xs, 3), dy = dev_floats(ys, 3), dout;
  assert_int_equal(cuMemAlloc(&dout, 3 * 16), CUDA_SUCCESS);
  void *args[] = {&t, &dout, &dx, &dy};
  assert_int_equal(cuLaunchKernel(fn("tex2d_f4"), 1, 1, 1, 3, 1, 1, 0, NULL, args, NULL), CUDA_SUCCESS);
  float o[3][4];
  assert_int_equal(cuMemcpyDtoH(o, dout, sizeof o), CUDA_SUCCESS);
  assert_true(o[0][0] == 1.0f && o[0][1] == 0.0f && o[0][2] == 51 / 255.0f && o[0][3] == 1.0f);
  assert_true(o[1][0] == 0.5f * 1.0f + 0.5f * 0.0f && o[1][1] == 0.5f && o[1][3] == 0.5f);
  assert_true(o[1][2] == 0.5f * (51 / 255.0f) + 0.5f * (102 / 255.0f));
  assert_true(o[2][0] == 128 / 255.0f && o[2][1] == 64 / 255.0f);
  assert_int_equal(cuTexObjectDestroy(t), CUDA_SUCCESS);
  /* the same array read as integers (linear filtering is refused there) */
  CUDA_RESOURCE_DESC rd;
  memset(&rd, 0, sizeof rd);
  rd.resType = CU_RESOURCE_TYPE_ARRAY;
  rd.res.array.hArray = a;
  CUDA_TEXTURE_DESC td;
  memset(&td, 0, sizeof td);
  td.flags = CU_TRSF_READ_AS_INTEGER;
  td.filterMode = CU_TR_FILTER_MODE_LINEAR;
  assert_int_equal(cuTexObjectCreate(&t, &rd, &td, NULL), CUDA_ERROR_INVALID_VALUE);
  td.filterMode = CU_TR_FILTER_MODE_POINT;
  assert_int_equal(cuTexObjectCreate(&t, &rd, &td, NULL), CUDA_SUCCESS);
  assert_int_equal(cuLaunchKernel(fn("tex2d_u4"), 1, 1, 1, 3, 1, 1, 0, NULL, args, NULL), CUDA_SUCCESS);
  unsigned u[3][4];
  assert_int_equal(cuMemcpyDtoH(u, dout, sizeof u), CUDA_SUCCESS);
  assert_true(u[0][0] == 255 && u[0][1] == 0 && u[0][2] == 51 && u[0][3] == 255);
  assert_true(u[1][0] == 0 && u[1][1] == 255 && u[1][2] == 102 && u[1][3] == 0); /* x 1.0 -> texel 1 */
  assert_true(u[2][0] == 128 && u[2][1] == 64);
  assert_int_equal(cuTexObjectDestroy(t), CUDA_SUCCESS);
  assert_int_equal(cuArrayDestroy(a), CUDA_SUCCESS);

  /* float 2x2 [[0,1],[2,3]]: bilinear centre, and the gather order */
  a = make_array(2, 2, 0, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_TEXTURE_GATHER);
  const float f[4] = {0, 1, 2, 3};
  host_to_array(a, f, 8, 2);
  t = make_tex(a, CU_TR_ADDRESS_MODE_CLAMP, CU_TR_FILTER_MODE_LINEAR, 0, 0);
  const float cx[] = {1.0f, 1.25f}, cy[] = {1.0f, 0.5f};
  assert_int_equal(cuMemcpyHtoD(dx, cx, 8), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyHtoD(dy, cy, 8), CUDA_SUCCESS);
  assert_int_equal(cuLaunchKernel(fn("tex2d_f4"), 1, 1, 1, 2, 1, 1, 0, NULL, args, NULL), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(o, dout, 2 * 16), CUDA_SUCCESS);
  assert_true(o[0][0] == 1.5f && o[0][1] == 0.0f);
  assert_true(o[1][0] == 0.75f); /* xB 0.75: alpha 0.75 between 0 and 1; yB 0: row 0 only */
  assert_int_equal(cuLaunchKernel(fn("tex2dgather_f4"), 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(o, dout, 16), CUDA_SUCCESS);
  assert_true(o[0][0] == 2 && o[0][1] == 3 && o[0][2] == 1 && o[0][3] == 0);
  assert_int_equal(cuTexObjectDestroy(t), CUDA_SUCCESS);
  assert_int_equal(cuArrayDestroy(a), CUDA_SUCCESS);

  /* 3D 2x2x2, v = x + 10y + 100z */
  a = make_array(2, 2, 2, CU_AD_FORMAT_FLOAT, 1, 0);
  float v3[8];
  for (int i = 0; i < 8; i++) v3[i] = (float)((i & 1) + 10 * ((i >> 1) & 1) + 100 * (i >> 2));
  CUDA_MEMCPY3D c;
  memset(&c, 0, sizeof c);
  c.srcMemoryType = CU_MEMORYTYPE_HOST;
  c.srcHost = v3;
  c.srcPitch = 8;
  c.srcHeight = 2;
  c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  c.dstArray = a;
  c.WidthInBytes = 8;
  c.Height = 2;
  c.Depth = 2;
  assert_int_equal(cuMemcpy3D(&c), CUDA_SUCCESS);
  const float x3[] = {1.5f, 1.0f}, y3[] = {0.5f, 1.0f}, z3[] = {1.5f, 1.0f};
  CUdeviceptr dz = dev_floats(z3, 2);
  assert_int_equal(cuMemcpyHtoD(dx, x3, 8), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyHtoD(dy, y3, 8), CUDA_SUCCESS);
  CUtexObject tp = make_tex(a, CU_TR_ADDRESS_MODE_CLAMP, CU_TR_FILTER_MODE_POINT, 0, 0);
  CUtexObject tl = make_tex(a, CU_TR_ADDRESS_MODE_CLAMP, CU_TR_FILTER_MODE_LINEAR, 0, 0);
  float r3[2];
  void *a3p[] = {&tp, &dout, &dx, &dy, &dz};
  assert_int_equal(cuLaunchKernel(fn("tex3d_f"), 1, 1, 1, 2, 1, 1, 0, NULL, a3p, NULL), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(r3, dout, 8), CUDA_SUCCESS);
  assert_true(r3[0] == 101.0f && r3[1] == 111.0f);
  void *a3l[] = {&tl, &dout, &dx, &dy, &dz};
  assert_int_equal(cuLaunchKernel(fn("tex3d_f"), 1, 1, 1, 2, 1, 1, 0, NULL, a3l, NULL), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(r3, dout, 8), CUDA_SUCCESS);
  assert_true(r3[1] == 55.5f);
  assert_true(r3[0] == 101.0f); /* (1.5, 0.5, 1.5) is a texel centre */
  cuTexObjectDestroy(tp);
  cuTexObjectDestroy(tl);
  assert_int_equal(cuArrayDestroy(a), CUDA_SUCCESS);

  /* 2D layered: 2x2 x 3 layers, v = 10 layer + x + 2y */
  a = make_array(2, 2, 3, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_LAYERED);
  float vl[12];
  for (int i = 0; i < 12; i++) vl[i] = (float)(10 * (i / 4) + (i & 1) + 2 * ((i >> 1) & 1));
  c.srcHost = vl;
  c.Depth = 3;
  c.dstArray = a;
  assert_int_equal(cuMemcpy3D(&c), CUDA_SUCCESS);
  t = make_tex(a, CU_TR_ADDRESS_MODE_CLAMP, CU_TR_FILTER_MODE_POINT, 0, 0);
  int layer = 2;
  const float lx[] = {1.5f}, ly[] = {0.5f};
  assert_int_equal(cuMemcpyHtoD(dx, lx, 4), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyHtoD(dy, ly, 4), CUDA_SUCCESS);
  void *al[] = {&t, &dout, &dx, &dy, &layer};
  assert_int_equal(cuLaunchKernel(fn("tex2dlayered_f"), 1, 1, 1, 1, 1, 1, 0, NULL, al, NULL), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(r3, dout, 4), CUDA_SUCCESS);
  assert_true(r3[0] == 21.0f);
  cuTexObjectDestroy(t);
  assert_int_equal(cuArrayDestroy(a), CUDA_SUCCESS);
  cuMemFree(dx);
  cuMemFree(dy);
  cuMemFree(dz);
  cuMemFree(dout);
}

static void test_tex_linear_memory(void **state) {
  (void)state;
  int v[8];
  for (int i = 0; i < 8; i++) v[i] = 3 * i;
  CUdeviceptr buf, dout;
  assert_int_equal(cuMemAlloc(&buf, sizeof v), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyHtoD(buf, v, sizeof v), CUDA_SUCCESS);
  assert_int_equal(cuMemAlloc(&dout, 12 * 4), CUDA_SUCCESS);
  CUDA_RESOURCE_DESC rd;
  memset(&rd, 0, sizeof rd);
  rd.resType = CU_RESOURCE_TYPE_LINEAR;
  rd.res.linear.devPtr = buf;
  rd.res.linear.format = CU_AD_FORMAT_SIGNED_INT32;
  rd.res.linear.numChannels = 1;
  rd.res.linear.sizeInBytes = sizeof v;
  CUDA_TEXTURE_DESC td;
  memset(&td, 0, sizeof td);
  CUtexObject t;
  assert_int_equal(cuTexObjectCreate(&t, &rd, &td, NULL), CUDA_SUCCESS);
  int off = -2;
  void *args[] = {&t, &dout, &off};
  assert_int_equal(cuLaunchKernel(fn("tex1dfetch_i"), 1, 1, 1, 12, 1, 1, 0, NULL, args, NULL), CUDA_SUCCESS);
  int got[12];
  assert_int_equal(cuMemcpyDtoH(got, dout, sizeof got), CUDA_SUCCESS);
  for (int i = 0; i < 12; i++) {
    int idx = i - 2;
    assert_int_equal(got[i], idx >= 0 && idx < 8 ? 3 * idx : 0);
  }
  assert_int_equal(cuTexObjectDestroy(t), CUDA_SUCCESS);
  /* more bytes than the allocation: refused */
  rd.res.linear.sizeInBytes = sizeof v + 4;
  assert_int_equal(cuTexObjectCreate(&t, &rd, &td, NULL), CUDA_ERROR_INVALID_VALUE);

  /* uchar read as normalized float */
  const unsigned char b[3] = {0, 255, 51};
  assert_int_equal(cuMemcpyHtoD(buf, b, 3), CUDA_SUCCESS);
  rd.res.linear.format = CU_AD_FORMAT_UNSIGNED_INT8;
  rd.res.linear.sizeInBytes = 3;
  assert_int_equal(cuTexObjectCreate(&t, &rd, &td, NULL), CUDA_SUCCESS);
  off = 0;
  assert_int_equal(cuLaunchKernel(fn("tex1dfetch_f"), 1, 1, 1, 4, 1, 1, 0, NULL, args, NULL), CUDA_SUCCESS);
  float gf[4];
  assert_int_equal(cuMemcpyDtoH(gf, dout, sizeof gf), CUDA_SUCCESS);
  assert_true(gf[0] == 0.0f && gf[1] == 1.0f && gf[2] == 51 / 255.0f && gf[3] == 0.0f);
  assert_int_equal(cuTexObjectDestroy(t), CUDA_SUCCESS);

  /* pitch2D resource: validated against the allocation */
  memset(&rd, 0, sizeof rd);
  rd.resType = CU_RESOURCE_TYPE_PITCH2D;
  rd.res.pitch2D.devPtr = buf;
  rd.res.pitch2D.format = CU_AD_FORMAT_FLOAT;
  rd.res.pitch2D.numChannels = 1;
  rd.res.pitch2D.width = 4;
  rd.res.pitch2D.height = 1;
  rd.res.pitch2D.pitchInBytes = 32;
  assert_int_equal(cuTexObjectCreate(&t, &rd, &td, NULL), CUDA_SUCCESS);
  assert_int_equal(cuTexObjectDestroy(t), CUDA_SUCCESS);
  rd.res.pitch2D.height = 2; /* 32 + 16 > 32 bytes */
  assert_int_equal(cuTexObjectCreate(&t, &rd, &td, NULL), CUDA_ERROR_INVALID_VALUE);
  cuMemFree(buf);
  cuMemFree(dout);
}

static CUsurfObject make_surf(CUarray a) {
  CUDA_RESOURCE_DESC rd;
  memset(&rd, 0, sizeof rd);
  rd.resType = CU_RESOURCE_TYPE_ARRAY;
  rd.res.array.hArray = a;
  CUsurfObject s = 0;
  assert_int_equal(cuSurfObjectCreate(&s, &rd), CUDA_SUCCESS);
  return s;
}

static void test_surface(void **state) {
  (void)state;
  CUarray a = make_array(4, 2, 0, CU_AD_FORMAT_SIGNED_INT32, 1, CUDA_ARRAY3D_SURFACE_LDST);
  const int init[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  host_to_array(a, init, 16, 2);
  CUsurfObject s = make_surf(a);
  CUDA_RESOURCE_DESC rd;
  assert_int_equal(cuSurfObjectGetResourceDesc(&rd, s), CUDA_SUCCESS);
  assert_ptr_equal(rd.res.array.hArray, a);
  CUdeviceptr dxs, dout;
  assert_int_equal(cuMemAlloc(&dxs, 64), CUDA_SUCCESS);
  assert_int_equal(cuMemAlloc(&dout, 64), CUDA_SUCCESS);
  int got[8];

  const int xc[6] = {-4, 0, 8, 12, 16, 100};
  assert_int_equal(cuMemcpyHtoD(dxs, xc, sizeof xc), CUDA_SUCCESS);
  int y = 0;
  void *ar[] = {&s, &dout, &dxs, &y};
  assert_int_equal(cuLaunchKernel(fn("surf_read_clamp"), 1, 1, 1, 6, 1, 1, 0, NULL, ar, NULL), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(got, dout, 24), CUDA_SUCCESS);
  const int wc[6] = {1, 1, 3, 4, 4, 4};
  for (int i = 0; i < 6; i++) assert_int_equal(got[i], wc[i]);

  const int xz[3] = {-4, 4, 16};
  assert_int_equal(cuMemcpyHtoD(dxs, xz, sizeof xz), CUDA_SUCCESS);
  assert_int_equal(cuLaunchKernel(fn("surf_read_zero"), 1, 1, 1, 3, 1, 1, 0, NULL, ar, NULL), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(got, dout, 12), CUDA_SUCCESS);
  assert_true(got[0] == 0 && got[1] == 2 && got[2] == 0);
  y = 5;
  assert_int_equal(cuLaunchKernel(fn("surf_read_zero"), 1, 1, 1, 3, 1, 1, 0, NULL, ar, NULL), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(got, dout, 12), CUDA_SUCCESS);
  assert_true(got[0] == 0 && got[1] == 0 && got[2] == 0);

  /* zero-mode writes drop what is out of range */
  const int xw[3] = {0, 16, 4};
  assert_int_equal(cuMemcpyHtoD(dxs, xw, sizeof xw), CUDA_SUCCESS);
  y = 1;
  int val = 100;
  void *aw[] = {&s, &dxs, &y, &val};
  assert_int_equal(cuLaunchKernel(fn("surf_write_zero"), 1, 1, 1, 3, 1, 1, 0, NULL, aw, NULL), CUDA_SUCCESS);
  int all[8];
  assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
  array_to_host(a, all, 16, 2);
  const int wall[8] = {1, 2, 3, 4, 100, 102, 7, 8};
  for (int i = 0; i < 8; i++) assert_int_equal(all[i], wall[i]);

  /* 1D uchar4 surface: read-modify-write of each element */
  CUarray a1 = make_array(3, 0, 0, CU_AD_FORMAT_UNSIGNED_INT8, 4, CUDA_ARRAY3D_SURFACE_LDST);
  const unsigned char u4[12] = {1, 2, 3, 4, 10, 20, 30, 40, 250, 251, 252, 253};
  host_to_array(a1, u4, 12, 1);
  CUsurfObject s1 = make_surf(a1);
  void *a1a[] = {&s1};
  assert_int_equal(cuLaunchKernel(fn("surf1d_uchar4"), 1, 1, 1, 3, 1, 1, 0, NULL, a1a, NULL), CUDA_SUCCESS);
  unsigned char u4o[12];
  assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
  array_to_host(a1, u4o, 12, 1);
  const unsigned char u4w[12] = {2, 2, 3, 7, 11, 20, 30, 7, 251, 251, 252, 7};
  assert_memory_equal(u4o, u4w, 12);

  /* 3D float4 surface */
  CUarray a3 = make_array(2, 2, 3, CU_AD_FORMAT_FLOAT, 4, CUDA_ARRAY3D_SURFACE_LDST);
  CUsurfObject s3 = make_surf(a3);
  int y3 = 1, z3 = 2;
  void *a3a[] = {&s3, &y3, &z3};
  assert_int_equal(cuLaunchKernel(fn("surf3d_write_f4"), 1, 1, 1, 2, 1, 1, 0, NULL, a3a, NULL), CUDA_SUCCESS);
  float f3[2][4];
  CUDA_MEMCPY3D c;
  memset(&c, 0, sizeof c);
  c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  c.srcArray = a3;
  c.srcY = 1;
  c.srcZ = 2;
  c.dstMemoryType = CU_MEMORYTYPE_HOST;
  c.dstHost = f3;
  c.dstPitch = 32;
  c.dstHeight = 1;
  c.WidthInBytes = 32;
  c.Height = 1;
  c.Depth = 1;
  assert_int_equal(cuMemcpy3D(&c), CUDA_SUCCESS);
  assert_true(f3[0][0] == 0.0f && f3[0][1] == 0.5f && f3[0][2] == -1.0f && f3[0][3] == 2.0f);
  assert_true(f3[1][0] == 1.0f && f3[1][1] == 1.5f);

  /* objects of the wrong kind and stale handles */
  assert_int_equal(cuTexObjectDestroy(s), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuSurfObjectDestroy(s3), CUDA_SUCCESS);
  assert_int_equal(cuSurfObjectDestroy(s3), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuSurfObjectGetResourceDesc(&rd, s3), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuSurfObjectDestroy(s1), CUDA_SUCCESS);

  /* .trap out of range is a device fault */
  const int xt[2] = {0, 16};
  assert_int_equal(cuMemcpyHtoD(dxs, xt, sizeof xt), CUDA_SUCCESS);
  y = 0;
  assert_int_equal(cuLaunchKernel(fn("surf_read_trap"), 1, 1, 1, 2, 1, 1, 0, NULL, ar, NULL), CUDA_SUCCESS);
  assert_int_equal(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  mod = NULL;
  assert_int_equal(cuDevicePrimaryCtxReset(0), CUDA_SUCCESS);
  assert_int_equal(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
  assert_int_equal(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
  /* the reset freed the arrays and objects */
  assert_int_equal(cuArrayDestroy(a), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(cuSurfObjectDestroy(s), CUDA_ERROR_INVALID_VALUE);
}

/* txq on a texture object, and forms softgpu refuses by name at load time */
static void test_ptx_txq_and_refusals(void **state) {
  (void)state;
  static const char txq_ptx[] =
      ".version 8.0\n.target sm_75\n.address_size 64\n"
      ".visible .entry q(.param .u64 t, .param .u64 o) {\n"
      "  .reg .b32 %r<8>;\n  .reg .b64 %rd<4>;\n"
      "  ld.param.u64 %rd1, [t];\n  ld.param.u64 %rd2, [o];\n"
      "  txq.width.b32 %r1, [%rd1];\n  txq.height.b32 %r2, [%rd1];\n"
      "  txq.normalized_coords.b32 %r3, [%rd1];\n  txq.addr_mode_0.b32 %r4, [%rd1];\n"
      "  cvta.to.global.u64 %rd3, %rd2;\n"
      "  st.global.v4.u32 [%rd3], {%r1, %r2, %r3, %r4};\n  ret;\n}\n";
  CUmodule m;
  assert_int_equal(cuModuleLoadData(&m, txq_ptx), CUDA_SUCCESS);
  CUfunction k;
  assert_int_equal(cuModuleGetFunction(&k, m, "q"), CUDA_SUCCESS);
  CUarray a = make_array(8, 4, 0, CU_AD_FORMAT_FLOAT, 1, 0);
  CUtexObject t = make_tex(a, CU_TR_ADDRESS_MODE_BORDER, CU_TR_FILTER_MODE_POINT, CU_TRSF_NORMALIZED_COORDINATES, 0);
  CUdeviceptr out;
  assert_int_equal(cuMemAlloc(&out, 16), CUDA_SUCCESS);
  void *args[] = {&t, &out};
  assert_int_equal(cuLaunchKernel(k, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL), CUDA_SUCCESS);
  unsigned r[4];
  assert_int_equal(cuMemcpyDtoH(r, out, sizeof r), CUDA_SUCCESS);
  assert_int_equal(r[0], 8);
  assert_int_equal(r[1], 4);
  assert_int_equal(r[2], 1);
  assert_int_equal(r[3], 4); /* PTX's clamp_to_border */
  cuTexObjectDestroy(t);
  cuArrayDestroy(a);
  cuMemFree(out);
  assert_int_equal(cuModuleUnload(m), CUDA_SUCCESS);

  static const char *refused[] = {
      "suq.width.b32 %r1, [%rd1];",
      "tex.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}|%p1, [%rd1, {%f1, %f2}];",
      "tex.level.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [%rd1, {%f1, %f2}], %f3;",
      "tex.cube.v4.f32.f32 {%f1, %f2, %f3, %f4}, [%rd1, {%f1, %f2, %f3, %f4}];",
      "sust.p.2d.b32.trap [%rd1, {%r1, %r2}], {%r3};",
      "txq.channel_order.b32 %r1, [%rd1];",
  };
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    char ptx[1024];
    snprintf(ptx, sizeof ptx,
             ".version 8.0\n.target sm_75\n.address_size 64\n.visible .entry z(.param .u64 t) {\n"
             "  .reg .pred %%p<2>;\n  .reg .f32 %%f<8>;\n  .reg .b32 %%r<8>;\n  .reg .b64 %%rd<4>;\n"
             "  ld.param.u64 %%rd1, [t];\n  %s\n  ret;\n}\n",
             refused[i]);
    if (cuModuleLoadData(&m, ptx) != CUDA_ERROR_NOT_SUPPORTED) fail_msg("accepted: %s", refused[i]);
  }
}

int main(void) {
  setenv("RGPU_SOFTGPU_MEM", "64M", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_array_create),    cmocka_unit_test(test_copy_2d),
      cmocka_unit_test(test_copy_3d),         cmocka_unit_test(test_tex_1d_modes),
      cmocka_unit_test(test_tex_forged_handle), cmocka_unit_test(test_tex_2d_3d),
      cmocka_unit_test(test_tex_linear_memory), cmocka_unit_test(test_ptx_txq_and_refusals),
      cmocka_unit_test(test_surface),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
