// The batch calls of CUDA 12.8/13 as data-movement code uses them:
// cudaMemcpyBatchAsync (host to device, device to host, device to device,
// a mixed batch with several attribute ranges, a DuringApiCall copy from a
// stack buffer and from page-locked memory overwritten right after the
// call, the per-thread default stream), cudaMemcpy3DBatchAsync (pitched
// host and device memory, CUDA arrays on either or both sides),
// cudaMemPrefetchBatchAsync / cudaMemDiscardBatchAsync /
// cudaMemDiscardAndPrefetchBatchAsync on managed memory followed by
// kernels that use it, and a captured batch replayed as a graph.  Every
// value is checked on the host; every refused batch's code is checked
// where CUDA's documentation names it (the prefetch and discard batches
// name none: only that they fail).  Prints no addresses or timings, so the
// output is the same natively.
#include "rgpu_check.h"
#include <vector>

// The _ptsz forms: CUDA's headers declare them only under
// --default-stream per-thread.
extern "C" {
cudaError_t cudaMemcpyBatchAsync_ptsz(void *const *dsts, const void *const *srcs,
                                      const size_t *sizes, size_t count,
                                      cudaMemcpyAttributes *attrs, size_t *attrsIdxs,
                                      size_t numAttrs, cudaStream_t stream);
cudaError_t cudaMemcpy3DBatchAsync_ptsz(size_t numOps, cudaMemcpy3DBatchOp *opList,
                                        unsigned long long flags, cudaStream_t stream);
cudaError_t cudaMemPrefetchBatchAsync_ptsz(void **dptrs, size_t *sizes, size_t count,
                                           cudaMemLocation *prefetchLocs, size_t *prefetchLocIdxs,
                                           size_t numPrefetchLocs, unsigned long long flags,
                                           cudaStream_t stream);
cudaError_t cudaMemPrefetchAsync_ptsz(const void *devPtr, size_t count, cudaMemLocation location,
                                      unsigned int flags, cudaStream_t stream);
cudaError_t cudaStreamAttachMemAsync_ptsz(cudaStream_t stream, void *devPtr, size_t length,
                                          unsigned int flags);
}

// A call the documentation gives no code for must still fail; the last
// error it left is cleared.
#define EXPECT_FAILS(call)                                                              \
  do {                                                                                  \
    cudaError_t e_ = (call);                                                            \
    if (e_ == cudaSuccess) {                                                            \
      std::fprintf(stderr, "FAIL %s:%d: %s succeeded\n", __FILE__, __LINE__, #call);    \
      std::exit(1);                                                                     \
    }                                                                                   \
    cudaGetLastError();                                                                 \
  } while (0)

// EXPECT_ERR, then the last error cleared.
#define EXPECT_INVALID(call)                  \
  do {                                        \
    EXPECT_ERR(call, cudaErrorInvalidValue);  \
    cudaGetLastError();                       \
  } while (0)

__global__ void fill(int *p, int n, int base) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = base + i;
}

__global__ void add_one(int *p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1;
}

__global__ void sum_into(const int *a, const int *b, int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

static cudaMemcpyAttributes attr_of(cudaMemcpySrcAccessOrder order) {
  cudaMemcpyAttributes a;
  std::memset(&a, 0, sizeof a);
  a.srcAccessOrder = order;
  return a;
}

static const int N = 4096;
static const size_t NB = N * sizeof(int);

// Uploads from a buffer on this function's stack, gone when it returns
// and overwritten first: DuringApiCall says the call reads it before it
// returns.
static cudaError_t upload_from_stack(int *dst, int seed, cudaStream_t s) {
  volatile int tmp[512];
  for (int i = 0; i < 512; i++) tmp[i] = seed * 1000 + i;
  void *dsts[1] = {dst};
  const void *srcs[1] = {(const void *)tmp};
  size_t sizes[1] = {sizeof tmp};
  cudaMemcpyAttributes a = attr_of(cudaMemcpySrcAccessOrderDuringApiCall);
  size_t idx = 0;
  cudaError_t e = cudaMemcpyBatchAsync(dsts, srcs, sizes, 1, &a, &idx, 1, s);
  for (int i = 0; i < 512; i++) tmp[i] = -7;
  return e;
}

static void check_seq(const int *p, int n, int base) {
  for (int i = 0; i < n; i++) EXPECT(p[i] == base + i);
}

static void batch_1d(cudaStream_t s) {
  std::vector<int> h_a(N), out1(N), out2(N), out3(N);
  int *h_p = nullptr;  // page-locked
  CHECK(cudaMallocHost(&h_p, NB));
  for (int i = 0; i < N; i++) h_a[i] = 10 + i, h_p[i] = 50000 + i;
  int *d_a, *d_b, *d_c;
  CHECK(cudaMalloc(&d_a, NB));
  CHECK(cudaMalloc(&d_b, NB));
  CHECK(cudaMalloc(&d_c, NB));
  cudaMemcpyAttributes stream_order = attr_of(cudaMemcpySrcAccessOrderStream);
  size_t idx0 = 0;

  // Host to device, from pageable and page-locked memory.
  {
    void *dsts[2] = {d_a, d_b};
    const void *srcs[2] = {h_a.data(), h_p};
    size_t sizes[2] = {NB, NB};
    CHECK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &stream_order, &idx0, 1, s));
  }
  // Device to device: all of d_a into d_c, the first half of d_a over the
  // second half of d_b.
  {
    void *dsts[2] = {d_c, d_b + N / 2};
    const void *srcs[2] = {d_a, d_a};
    size_t sizes[2] = {NB, NB / 2};
    CHECK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &stream_order, &idx0, 1, s));
  }
  // Device to host.
  {
    void *dsts[2] = {out1.data(), out2.data()};
    const void *srcs[2] = {d_c, d_b};
    size_t sizes[2] = {NB, NB};
    CHECK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &stream_order, &idx0, 1, s));
  }
  CHECK(cudaStreamSynchronize(s));
  check_seq(out1.data(), N, 10);
  check_seq(out2.data(), N / 2, 50000);
  check_seq(out2.data() + N / 2, N / 2, 10);
  std::printf("batches host to device, device to device, device to host: bytes checked\n");

  // One mixed batch, three attribute ranges: copies 0-1 in stream order,
  // 2-3 with Any, 4 DuringApiCall (a page-locked source).
  int *h_q = nullptr;
  CHECK(cudaMallocHost(&h_q, NB));
  for (int i = 0; i < N; i++) h_a[i] = 700 + i, h_q[i] = 900 + i;
  int *d_d, *d_e;
  CHECK(cudaMalloc(&d_d, NB));
  CHECK(cudaMalloc(&d_e, NB));
  {
    // No copy writes what another one reads (a batch has no order).
    void *dsts[5] = {d_d, out1.data(), out3.data(), d_a + 100, d_e};
    const void *srcs[5] = {h_a.data(), d_b, d_c, h_a.data() + 5, h_q};
    size_t sizes[5] = {NB, NB, NB / 4, 64 * sizeof(int), NB};
    cudaMemcpyAttributes attrs[3] = {attr_of(cudaMemcpySrcAccessOrderStream),
                                     attr_of(cudaMemcpySrcAccessOrderAny),
                                     attr_of(cudaMemcpySrcAccessOrderDuringApiCall)};
    attrs[1].flags = cudaMemcpyFlagPreferOverlapWithCompute;
    size_t idxs[3] = {0, 2, 4};
    CHECK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 5, attrs, idxs, 3, s));
    // Read during the call: the program may change it at once.
    for (int i = 0; i < N; i++) h_q[i] = -1;
  }
  CHECK(cudaStreamSynchronize(s));
  check_seq(out1.data(), N / 2, 50000);  // d_b as it was
  check_seq(out1.data() + N / 2, N / 2, 10);
  check_seq(out3.data(), N / 4, 10);     // d_c before the batch
  std::vector<int> back(N);
  CHECK(cudaMemcpy(back.data(), d_d, NB, cudaMemcpyDeviceToHost));
  check_seq(back.data(), N, 700);
  CHECK(cudaMemcpy(back.data(), d_a, NB, cudaMemcpyDeviceToHost));
  check_seq(back.data(), 100, 10);
  check_seq(back.data() + 100, 64, 705);
  check_seq(back.data() + 164, N - 164, 10 + 164);
  CHECK(cudaMemcpy(back.data(), d_e, NB, cudaMemcpyDeviceToHost));
  check_seq(back.data(), N, 900);
  std::printf("mixed batch with three attribute ranges: bytes checked\n");

  // DuringApiCall from a stack buffer overwritten right after the call.
  CHECK(upload_from_stack(d_d, 3, s));
  CHECK(upload_from_stack(d_d + 512, 4, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemcpy(back.data(), d_d, 1024 * sizeof(int), cudaMemcpyDeviceToHost));
  check_seq(back.data(), 512, 3000);
  check_seq(back.data() + 512, 512, 4000);
  std::printf("DuringApiCall copies from a stack buffer: the bytes of the call\n");

  // The per-thread default stream: as a handle, and as 0 through _ptsz.
  {
    void *dsts[1] = {out2.data()};
    const void *srcs[1] = {d_d};
    size_t sizes[1] = {NB / 8};
    CHECK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 1, &stream_order, &idx0, 1,
                               cudaStreamPerThread));
    CHECK(cudaStreamSynchronize(cudaStreamPerThread));
    check_seq(out2.data(), 512, 3000);
    // NULL is refused even through _ptsz (as on the H100).
    dsts[0] = out3.data();
    EXPECT_INVALID(cudaMemcpyBatchAsync_ptsz(dsts, srcs, sizes, 1, &stream_order, &idx0, 1, 0));
    CHECK(cudaMemcpyBatchAsync_ptsz(dsts, srcs, sizes, 1, &stream_order, &idx0, 1, cudaStreamPerThread));
    CHECK(cudaStreamSynchronize(cudaStreamPerThread));
    check_seq(out3.data(), 512, 3000);
  }
  std::printf("per-thread default stream: the handle, and NULL refused through _ptsz\n");

  // Refused batches: cudaErrorInvalidValue, as the documentation says.
  {
    void *dsts[3] = {d_a, d_b, d_c};
    const void *srcs[3] = {h_a.data(), h_a.data(), h_a.data()};
    size_t sizes[3] = {64, 64, 64};
    cudaMemcpyAttributes attrs[3] = {stream_order, stream_order, stream_order};
    size_t good[3] = {0, 1, 2};
    size_t not_first[1] = {1};
    size_t not_rising[3] = {0, 2, 1};
    size_t repeated[2] = {0, 0};
    size_t past_end[2] = {0, 3};
    EXPECT_INVALID(cudaMemcpyBatchAsync(dsts, srcs, sizes, 0, attrs, good, 1, s));
    EXPECT_INVALID(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, good, 0, s));
    EXPECT_INVALID(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, attrs, good, 3, s));
    EXPECT_INVALID(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, not_first, 1, s));
    EXPECT_INVALID(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, not_rising, 3, s));
    EXPECT_INVALID(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, repeated, 2, s));
    EXPECT_INVALID(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, past_end, 2, s));
    cudaMemcpyAttributes bad[2] = {stream_order, attr_of(cudaMemcpySrcAccessOrderInvalid)};
    size_t two[2] = {0, 1};
    EXPECT_INVALID(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, bad, two, 2, s));
    bad[1] = attr_of((cudaMemcpySrcAccessOrder)9);
    EXPECT_INVALID(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, bad, two, 2, s));
    // The legacy NULL stream, by 0 and by name.
    EXPECT_INVALID(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, good, 3, 0));
    EXPECT_INVALID(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, good, 3, cudaStreamLegacy));
    CHECK(cudaGetLastError());
  }
  std::printf("refused batches: cudaErrorInvalidValue each\n");

  CHECK(cudaFree(d_a));
  CHECK(cudaFree(d_b));
  CHECK(cudaFree(d_c));
  CHECK(cudaFree(d_d));
  CHECK(cudaFree(d_e));
  CHECK(cudaFreeHost(h_p));
  CHECK(cudaFreeHost(h_q));
}

// An operand for cudaMemcpy3DBatchAsync.
static cudaMemcpy3DOperand ptr_operand(void *p, size_t row_len, size_t layer_h) {
  cudaMemcpy3DOperand o;
  std::memset(&o, 0, sizeof o);
  o.type = cudaMemcpyOperandTypePointer;
  o.op.ptr.ptr = p;
  o.op.ptr.rowLength = row_len;
  o.op.ptr.layerHeight = layer_h;
  return o;
}

static cudaMemcpy3DOperand array_operand(cudaArray_t a, size_t x, size_t y, size_t z) {
  cudaMemcpy3DOperand o;
  std::memset(&o, 0, sizeof o);
  o.type = cudaMemcpyOperandTypeArray;
  o.op.array.array = a;
  o.op.array.offset.x = x;
  o.op.array.offset.y = y;
  o.op.array.offset.z = z;
  return o;
}

static cudaMemcpy3DBatchOp op3d(cudaMemcpy3DOperand src, cudaMemcpy3DOperand dst, size_t w,
                                size_t h, size_t d) {
  cudaMemcpy3DBatchOp op;
  std::memset(&op, 0, sizeof op);
  op.src = src;
  op.dst = dst;
  op.extent = make_cudaExtent(w, h, d);
  op.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  return op;
}

static int vol_value(int x, int y, int z) { return z * 10000 + y * 100 + x; }

static void batch_3d(cudaStream_t s) {
  const int W = 13, H = 7, D = 3;
  // Host volume with padded rows (W + 3 elements) and slices (H + 2 rows).
  const int RL = W + 3, LH = H + 2;
  std::vector<int> h_pad(RL * LH * D, -5), h_tight(W * H * D), h_out(RL * LH * D, -9);
  for (int z = 0; z < D; z++)
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++) {
        h_pad[(z * LH + y) * RL + x] = vol_value(x, y, z);
        h_tight[(z * H + y) * W + x] = vol_value(x, y, z) + 7;
      }
  cudaChannelFormatDesc desc = cudaCreateChannelDesc<int>();
  cudaArray_t arr_a, arr_b, arr_c;
  CHECK(cudaMalloc3DArray(&arr_a, &desc, make_cudaExtent(W, H, D)));
  CHECK(cudaMalloc3DArray(&arr_b, &desc, make_cudaExtent(W, H, D)));
  cudaChannelFormatDesc desc8 = cudaCreateChannelDesc<unsigned char>();
  CHECK(cudaMalloc3DArray(&arr_c, &desc8, make_cudaExtent(W, H, D)));
  cudaPitchedPtr dp;
  CHECK(cudaMalloc3D(&dp, make_cudaExtent(W * sizeof(int), H, D)));
  int *d_tight;
  CHECK(cudaMalloc(&d_tight, W * H * D * sizeof(int)));

  // Uploads: the padded host volume into array A (elements of 4 bytes;
  // DuringApiCall: read before the call returns), the tight one into
  // pitched device memory (pointer to pointer: bytes).
  {
    cudaMemcpy3DBatchOp ops[2] = {
        op3d(ptr_operand(h_pad.data(), RL, LH), array_operand(arr_a, 0, 0, 0), W, H, D),
        op3d(ptr_operand(h_tight.data(), 0, 0), ptr_operand(dp.ptr, dp.pitch, H),
             W * sizeof(int), H, D)};
    ops[0].srcAccessOrder = cudaMemcpySrcAccessOrderDuringApiCall;
    CHECK(cudaMemcpy3DBatchAsync(2, ops, 0, s));
  }
  // Any lets a copy read its source out of stream order: only once no
  // earlier work can still be writing it.
  CHECK(cudaStreamSynchronize(s));
  // Array A into array B (a sub-box at an offset), array A into tight
  // device memory, pitched device memory into padded host memory.
  {
    cudaMemcpy3DBatchOp ops[3] = {
        op3d(array_operand(arr_a, 2, 1, 1), array_operand(arr_b, 0, 0, 0), W - 4, H - 2, D - 1),
        op3d(array_operand(arr_a, 0, 0, 0), ptr_operand(d_tight, 0, 0), W, H, D),
        op3d(ptr_operand(dp.ptr, dp.pitch, H), ptr_operand(h_out.data(), RL * sizeof(int), LH),
             W * sizeof(int), H, D)};
    ops[0].srcAccessOrder = cudaMemcpySrcAccessOrderAny;
    CHECK(cudaMemcpy3DBatchAsync(3, ops, 0, s));
  }
  CHECK(cudaStreamSynchronize(s));
  for (int z = 0; z < D; z++)
    for (int y = 0; y < LH; y++)
      for (int x = 0; x < RL; x++) {
        int v = h_out[(z * LH + y) * RL + x];
        EXPECT(x < W && y < H ? v == vol_value(x, y, z) + 7 : v == -9);
      }
  std::vector<int> back(W * H * D, -1);
  CHECK(cudaMemcpy(back.data(), d_tight, back.size() * sizeof(int), cudaMemcpyDeviceToHost));
  for (int z = 0; z < D; z++)
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++) EXPECT(back[(z * H + y) * W + x] == vol_value(x, y, z));
  // Array B's box back to the host through the per-thread default stream
  // (its handle: NULL is refused in the _ptsz form, as cudaMemcpyBatchAsync
  // refuses it on the H100).
  {
    std::fill(back.begin(), back.end(), -1);
    cudaMemcpy3DBatchOp op =
        op3d(array_operand(arr_b, 0, 0, 0), ptr_operand(back.data(), 0, 0), W - 4, H - 2, D - 1);
    EXPECT_INVALID(cudaMemcpy3DBatchAsync_ptsz(1, &op, 0, 0));
    CHECK(cudaMemcpy3DBatchAsync_ptsz(1, &op, 0, cudaStreamPerThread));
    CHECK(cudaStreamSynchronize(cudaStreamPerThread));
    const int BW = W - 4, BH = H - 2;
    for (int z = 0; z < D - 1; z++)
      for (int y = 0; y < BH; y++)
        for (int x = 0; x < BW; x++)
          EXPECT(back[(z * BH + y) * BW + x] == vol_value(x + 2, y + 1, z + 1));
  }
  std::printf("3D batches: pitched host and device memory, arrays on either and both sides\n");

  // Refused 3D batches: cudaErrorInvalidValue, as the documentation says.
  {
    cudaMemcpy3DBatchOp good =
        op3d(ptr_operand(h_tight.data(), 0, 0), array_operand(arr_a, 0, 0, 0), W, H, D);
    EXPECT_INVALID(cudaMemcpy3DBatchAsync(1, &good, 1, s));  // flags must be 0
    EXPECT_INVALID(cudaMemcpy3DBatchAsync(1, &good, 0, 0));  // the legacy NULL stream
    cudaMemcpy3DBatchOp ops[2] = {good, good};
    ops[1].extent.depth = 0;
    EXPECT_INVALID(cudaMemcpy3DBatchAsync(2, ops, 0, s));
    ops[1] = good;
    ops[1].src.op.ptr.rowLength = W - 1;  // shorter than a row of the copy
    EXPECT_INVALID(cudaMemcpy3DBatchAsync(2, ops, 0, s));
    ops[1] = good;
    ops[1].src.op.ptr.layerHeight = H - 1;
    EXPECT_INVALID(cudaMemcpy3DBatchAsync(2, ops, 0, s));
    ops[1] = good;
    ops[1].srcAccessOrder = cudaMemcpySrcAccessOrderInvalid;
    EXPECT_INVALID(cudaMemcpy3DBatchAsync(2, ops, 0, s));
    // Two arrays of different element sizes.
    ops[1] = op3d(array_operand(arr_a, 0, 0, 0), array_operand(arr_c, 0, 0, 0), W, H, D);
    EXPECT_INVALID(cudaMemcpy3DBatchAsync(2, ops, 0, s));
    CHECK(cudaGetLastError());
  }
  std::printf("refused 3D batches: cudaErrorInvalidValue each\n");

  CHECK(cudaFreeArray(arr_a));
  CHECK(cudaFreeArray(arr_b));
  CHECK(cudaFreeArray(arr_c));
  CHECK(cudaFree(dp.ptr));
  CHECK(cudaFree(d_tight));
}

static void managed_batches(cudaStream_t s) {
  int *m1, *m2, *m3, *d_plain;
  CHECK(cudaMallocManaged(&m1, NB));
  CHECK(cudaMallocManaged(&m2, NB));
  CHECK(cudaMallocManaged(&m3, NB));
  CHECK(cudaMalloc(&d_plain, NB));
  for (int i = 0; i < N; i++) m1[i] = i, m2[i] = 3 * i;
  cudaMemLocation on_dev = {cudaMemLocationTypeDevice, 0};
  cudaMemLocation on_host = {cudaMemLocationTypeHost, 0};
  const int blocks = (N + 255) / 256;

  // Both inputs to the device, then a kernel reads them.
  {
    void *ptrs[2] = {m1, m2};
    size_t sizes[2] = {NB, NB};
    size_t idx0 = 0;
    CHECK(cudaMemPrefetchBatchAsync(ptrs, sizes, 2, &on_dev, &idx0, 1, 0, s));
    sum_into<<<blocks, 256, 0, s>>>(m1, m2, m3, N);
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < N; i++) EXPECT(m3[i] == 4 * i);
  }
  // Two locations: m1 (half of it) to the device, m3 to the host.
  {
    void *ptrs[2] = {m1, m3};
    size_t sizes[2] = {NB / 2, NB};
    cudaMemLocation locs[2] = {on_dev, on_host};
    size_t idxs[2] = {0, 1};
    CHECK(cudaMemPrefetchBatchAsync(ptrs, sizes, 2, locs, idxs, 2, 0, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < N; i++) EXPECT(m3[i] == 4 * i);
    add_one<<<blocks, 256, 0, s>>>(m1, N);
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < N; i++) EXPECT(m1[i] == i + 1);
  }
  std::printf("prefetch batches, one and two locations, then kernels\n");

  // A discarded range holds anything until written: a kernel writes it.
  {
    void *ptrs[1] = {m3};
    size_t sizes[1] = {NB};
    CHECK(cudaMemDiscardBatchAsync(ptrs, sizes, 1, 0, s));
    fill<<<blocks, 256, 0, s>>>(m3, N, 77);
    CHECK(cudaStreamSynchronize(s));
    check_seq(m3, N, 77);
    size_t idx0 = 0;
    CHECK(cudaMemDiscardAndPrefetchBatchAsync(ptrs, sizes, 1, &on_dev, &idx0, 1, 0, s));
    fill<<<blocks, 256, 0, s>>>(m3, N, 5000);
    sum_into<<<blocks, 256, 0, s>>>(m1, m3, m2, N);
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < N; i++) EXPECT(m2[i] == (i + 1) + (5000 + i));
  }
  std::printf("discard and discard-and-prefetch batches, then kernels\n");

  // The single forms through _ptsz (0: the per-thread default stream).
  CHECK(cudaMemPrefetchAsync_ptsz(m1, NB, on_dev, 0, 0));
  CHECK(cudaStreamAttachMemAsync_ptsz(0, m1, 0, cudaMemAttachGlobal));
  {
    void *ptrs[1] = {m2};
    size_t sizes[1] = {NB};
    size_t idx0 = 0;
    // NULL is the per-thread stream here, taken (the H100 does).
    CHECK(cudaMemPrefetchBatchAsync_ptsz(ptrs, sizes, 1, &on_dev, &idx0, 1, 0, 0));
    CHECK(cudaMemPrefetchBatchAsync_ptsz(ptrs, sizes, 1, &on_dev, &idx0, 1, 0, cudaStreamPerThread));
  }
  add_one<<<blocks, 256, 0, cudaStreamPerThread>>>(m1, N);
  CHECK(cudaStreamSynchronize(cudaStreamPerThread));
  for (int i = 0; i < N; i++) EXPECT(m1[i] == i + 2);
  std::printf("prefetch and attach through _ptsz\n");

  // Refused: the documentation names no code for these, only the rules.
  {
    void *ptrs[2] = {m1, m2};
    void *plain[1] = {d_plain};
    size_t sizes[2] = {NB, NB};
    cudaMemLocation locs[1] = {on_dev};
    size_t idx0 = 0, not_first = 1;
    EXPECT_FAILS(cudaMemPrefetchBatchAsync(ptrs, sizes, 2, locs, &idx0, 1, 1, s));
    EXPECT_FAILS(cudaMemPrefetchBatchAsync(ptrs, sizes, 2, locs, &not_first, 1, 0, s));
    EXPECT_FAILS(cudaMemPrefetchBatchAsync(plain, sizes, 1, locs, &idx0, 1, 0, s));
    EXPECT_FAILS(cudaMemPrefetchBatchAsync(ptrs, sizes, 2, locs, &idx0, 1, 0, 0));
    EXPECT_FAILS(cudaMemDiscardBatchAsync(ptrs, sizes, 2, 1, s));
    EXPECT_FAILS(cudaMemDiscardBatchAsync(plain, sizes, 1, 0, s));
    EXPECT_FAILS(cudaMemDiscardBatchAsync(ptrs, sizes, 2, 0, 0));
    EXPECT_FAILS(cudaMemDiscardAndPrefetchBatchAsync(plain, sizes, 1, locs, &idx0, 1, 0, s));
    EXPECT_FAILS(cudaMemDiscardAndPrefetchBatchAsync(ptrs, sizes, 2, locs, &idx0, 1, 2, s));
    CHECK(cudaGetLastError());
  }
  std::printf("refused prefetch and discard batches fail\n");

  CHECK(cudaFree(m1));
  CHECK(cudaFree(m2));
  CHECK(cudaFree(m3));
  CHECK(cudaFree(d_plain));
}

// A copy batch on a capturing stream: CUDA refuses it
// (cudaErrorStreamCaptureUnsupported) and the capture goes on without it:
// ending it succeeds and makes a graph (measured on the H100, driver 580);
// the stream works normally afterwards.
static void captured_batch(cudaStream_t s) {
  const int N = 1024;
  const size_t NB = N * sizeof(int);
  int *h_in, *d_g;
  CHECK(cudaMallocHost(&h_in, NB));
  CHECK(cudaMalloc(&d_g, NB));
  for (int i = 0; i < N; i++) h_in[i] = i;
  cudaMemcpyAttributes stream_order = attr_of(cudaMemcpySrcAccessOrderStream);
  size_t idx0 = 0;
  void *dsts[1] = {d_g};
  const void *srcs[1] = {h_in};
  size_t sizes[1] = {NB};
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  cudaError_t e = cudaMemcpyBatchAsync(dsts, srcs, sizes, 1, &stream_order, &idx0, 1, s);
  cudaError_t end = cudaStreamEndCapture(s, &graph);
  std::printf("copy batch in a capture: %s, end of capture: %s, graph %s\n", cudaGetErrorName(e),
              cudaGetErrorName(end), graph ? "made" : "none");
  EXPECT(e == cudaErrorStreamCaptureUnsupported && end == cudaSuccess && graph);
  if (graph) {
    // Without the batch the graph holds nothing.
    size_t nodes = 99;
    CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
    std::printf("the graph's nodes: %zu\n", nodes);
    EXPECT(nodes == 0);
    CHECK(cudaGraphDestroy(graph));
  }
  (void)cudaGetLastError();
  // The same batch outside a capture.
  CHECK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 1, &stream_order, &idx0, 1, s));
  add_one<<<(N + 255) / 256, 256, 0, s>>>(d_g, N);
  std::vector<int> back(N);
  CHECK(cudaMemcpyAsync(back.data(), d_g, NB, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  check_seq(back.data(), N, 1);
  std::printf("the batch after the capture: bytes checked\n");
  CHECK(cudaFree(d_g));
  CHECK(cudaFreeHost(h_in));
}

int main() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  batch_1d(s);
  batch_3d(s);
  managed_batches(s);
  captured_batch(s);
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaGetLastError());
  pass("memcpy_batch");
  return 0;
}
