// rgpu-nvcc-flags: -lcudnn
// cuDNN's backend (graph) API through rgpu's libcudnn.so.9 facade (issue
// 17), the way PyTorch runs every convolution: tensors with unique ids, a
// convolution descriptor, a forward convolution operation, an operation
// graph, engine heuristics (CUDNN_HEUR_MODE_A), an execution plan from the
// first engine config that finalizes, a variant pack, execute.  Float
// data with CUDNN_DATA_FLOAT compute; the inputs are small multiples of
// 1/4, exact in TF32 as in float, so a tensor-core engine gives the same
// sums.  y is compared with a CPU reference.  The whole graph is built
// twice from scratch, as a framework does each step (the second finds
// rgpu's cached heuristics and plan).  Natively NVIDIA's cuDNN runs it.
//
// --work N: after the checked steps, N more identical steps between the
// same two synchronizations, then "PASS cudnn_backend_work N"
// (tests/work_roundtrips.sh: they must cost no round trip).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <cudnn.h>
#include <vector>

#include "rgpu_check.h"
#include "rgpu_cudnn_check.h"


enum { N = 2, C = 4, H = 9, W = 9, K = 6, R = 3, S = 3, PAD = 1, STRIDE = 2 };
enum { P = 1 + (H + 2 * PAD - R) / STRIDE, Q = 1 + (W + 2 * PAD - S) / STRIDE };
enum { UID_X = 101, UID_W = 102, UID_Y = 103 };

static cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t t) {
  cudnnBackendDescriptor_t d;
  DN(cudnnBackendCreateDescriptor(t, &d));
  return d;
}

static cudnnBackendDescriptor_t tensor(int64_t uid, int64_t n, int64_t c, int64_t h, int64_t w) {
  cudnnBackendDescriptor_t t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  int64_t dims[4] = {n, c, h, w}, strides[4] = {c * h * w, h * w, w, 1}, align = 16;
  cudnnDataType_t f = CUDNN_DATA_FLOAT;
  DN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f));
  DN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
  DN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides));
  DN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  DN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
  DN(cudnnBackendFinalize(t));
  return t;
}

// One step as a framework makes it: every descriptor built, used and
// destroyed.  Returns the plan's workspace size.
static int64_t step(cudnnHandle_t h, float *x, float *w, float *y, bool print) {
  cudnnBackendDescriptor_t tx = tensor(UID_X, N, C, H, W), tw = tensor(UID_W, K, C, R, S),
                           ty = tensor(UID_Y, N, K, P, Q);
  cudnnBackendDescriptor_t conv = make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  int64_t sd = 2, pad[2] = {PAD, PAD}, str[2] = {STRIDE, STRIDE}, dil[2] = {1, 1};
  cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  DN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
  DN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
  DN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sd));
  DN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
  DN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
  DN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str));
  DN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil));
  DN(cudnnBackendFinalize(conv));

  cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  float alpha = 1.0f, beta = 0.0f;
  DN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tx));
  DN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tw));
  DN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ty));
  DN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv));
  DN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha));
  DN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta));
  DN(cudnnBackendFinalize(op));

  cudnnBackendDescriptor_t graph = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  DN(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
  DN(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op));
  DN(cudnnBackendFinalize(graph));

  cudnnBackendDescriptor_t heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  cudnnBackendHeurMode_t hm = CUDNN_HEUR_MODE_A;
  DN(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph));
  DN(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &hm));
  DN(cudnnBackendFinalize(heur));
  int64_t count = 0;
  DN(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
  if (count < 1) {
    std::fprintf(stderr, "FAIL: the heuristics found no engine config\n");
    std::exit(1);
  }
  if (count > 8) count = 8;
  cudnnBackendDescriptor_t cfg[8];
  for (int64_t i = 0; i < count; i++) cfg[i] = make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  int64_t got = 0;
  DN(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfg));
  if (print) std::printf("heuristics: at least one engine config\n");

  cudnnBackendDescriptor_t plan = nullptr;
  for (int64_t i = 0; i < got && i < count && !plan; i++) {
    cudnnBackendDescriptor_t p = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    DN(cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    DN(cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]));
    if (cudnnBackendFinalize(p) == CUDNN_STATUS_SUCCESS) plan = p;
    else DN(cudnnBackendDestroyDescriptor(p));
  }
  if (!plan) {
    std::fprintf(stderr, "FAIL: no engine config finalized into a plan\n");
    std::exit(1);
  }
  int64_t ws_size = -1, n1 = 0;
  DN(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n1, &ws_size));
  void *ws = nullptr;
  if (ws_size > 0) CHECK(cudaMalloc(&ws, (size_t)ws_size));

  cudnnBackendDescriptor_t pack = make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  int64_t uids[3] = {UID_X, UID_W, UID_Y};
  void *ptrs[3] = {x, w, y};
  DN(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids));
  DN(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs));
  DN(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
  DN(cudnnBackendFinalize(pack));
  DN(cudnnBackendExecute(h, plan, pack));
  if (ws) {
    // cudaFree waits for the convolution using it.
    CHECK(cudaFree(ws));
  }

  cudnnBackendDescriptor_t all[] = {pack, plan, heur, graph, op, conv, tx, tw, ty};
  for (cudnnBackendDescriptor_t d : all) DN(cudnnBackendDestroyDescriptor(d));
  for (int64_t i = 0; i < count; i++) DN(cudnnBackendDestroyDescriptor(cfg[i]));
  return ws_size;
}

int main(int argc, char **argv) {
  int work = -1;
  if (argc == 3 && !std::strcmp(argv[1], "--work")) work = std::atoi(argv[2]);
  std::vector<float> hx((size_t)N * C * H * W), hw((size_t)K * C * R * S), ref((size_t)N * K * P * Q);
  for (size_t i = 0; i < hx.size(); i++) hx[i] = (float)((int)(i * 7 % 13) - 6) * 0.25f;
  for (size_t i = 0; i < hw.size(); i++) hw[i] = (float)((int)(i * 5 % 9) - 4) * 0.25f;
  for (int n = 0; n < N; n++)
    for (int k = 0; k < K; k++)
      for (int p = 0; p < P; p++)
        for (int q = 0; q < Q; q++) {
          double acc = 0;
          for (int c = 0; c < C; c++)
            for (int r = 0; r < R; r++)
              for (int s = 0; s < S; s++) {
                int ih = p * STRIDE - PAD + r, iw = q * STRIDE - PAD + s;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += (double)hx[(((size_t)n * C + c) * H + ih) * W + iw] *
                       hw[(((size_t)k * C + c) * R + r) * S + s];
              }
          ref[(((size_t)n * K + k) * P + p) * Q + q] = (float)acc;
        }
  float *x, *w, *y;
  CHECK(cudaMalloc(&x, hx.size() * sizeof(float)));
  CHECK(cudaMalloc(&w, hw.size() * sizeof(float)));
  CHECK(cudaMalloc(&y, ref.size() * sizeof(float)));
  CHECK(cudaMemcpy(x, hx.data(), hx.size() * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(w, hw.data(), hw.size() * sizeof(float), cudaMemcpyHostToDevice));
  cudnnHandle_t h;
  DN(cudnnCreate(&h));
  std::printf("conv fprop x %dx%dx%dx%d w %dx%dx%dx%d pad %d stride %d: y %dx%dx%dx%d\n", N, C, H,
              W, K, C, R, S, PAD, STRIDE, N, K, P, Q);
  for (int round = 1; round <= 2; round++) {
    CHECK(cudaMemset(y, 0xff, ref.size() * sizeof(float))); // NaN: every value must be written
    step(h, x, w, y, round == 1);
    CHECK(cudaDeviceSynchronize());
    std::vector<float> hy(ref.size());
    CHECK(cudaMemcpy(hy.data(), y, hy.size() * sizeof(float), cudaMemcpyDeviceToHost));
    size_t ok = 0;
    for (size_t i = 0; i < hy.size(); i++)
      if (std::fabs(hy[i] - ref[i]) <= 1e-4f * (1 + std::fabs(ref[i]))) ok++;
      else if (ok + 5 > i) std::fprintf(stderr, "y[%zu] = %g, expected %g\n", i, hy[i], ref[i]);
    if (ok != hy.size()) {
      std::fprintf(stderr, "FAIL: step %d: %zu of %zu values wrong\n", round, hy.size() - ok, hy.size());
      return 1;
    }
    std::printf("step %d: %zu values ok\n", round, ok);
  }
  if (work >= 0) {
    // One queued operation first, so that both runs' closing
    // synchronization has work to wait for (the steps are then the only
    // difference between --work 0 and --work N).
    CHECK(cudaMemsetAsync(y, 0xff, ref.size() * sizeof(float), 0));
    for (int i = 0; i < work; i++) step(h, x, w, y, false);
    CHECK(cudaDeviceSynchronize());
    std::vector<float> hy(ref.size());
    CHECK(cudaMemcpy(hy.data(), y, hy.size() * sizeof(float), cudaMemcpyDeviceToHost));
    if (work > 0) {
      for (size_t i = 0; i < hy.size(); i++)
        if (std::fabs(hy[i] - ref[i]) > 1e-4f * (1 + std::fabs(ref[i]))) {
          std::fprintf(stderr, "FAIL: after the steps y[%zu] = %g, expected %g\n", i, hy[i], ref[i]);
          return 1;
        }
    }
    std::printf("PASS cudnn_backend_work %d\n", work);
  }
  DN(cudnnDestroy(h));
  CHECK(cudaFree(x));
  CHECK(cudaFree(w));
  CHECK(cudaFree(y));
  std::printf("PASS cudnn_backend_conv\n");
  return 0;
}
