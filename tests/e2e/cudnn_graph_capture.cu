// rgpu-nvcc-flags: -lcudnn
// cuDNN calls captured into a CUDA graph (issue 17; what torch.cuda.graphs
// does with a network's convolutions): on a capturing stream, a legacy
// convolution forward, bias add and ReLU, a backend (graph API)
// convolution execute and a legacy backward-data convolution of the
// backend's output become graph nodes; the graph is instantiated once
// and launched three times, each launch after new input was copied in on
// the same stream, and every output is compared with a CPU reference.
// Nothing may run at capture time: y is poisoned before the first launch
// and checked to be still poisoned after the capture.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <cudnn.h>
#include <vector>

#include "rgpu_check.h"
#include "rgpu_cudnn_check.h"

enum { N = 2, C = 3, H = 8, W = 8, K = 4, R = 3, S = 3 };
enum { P = H, Q = W }; // padding 1, stride 1

typedef cudnnBackendDescriptor_t desc;


// A finalized plan for y2 = conv(x, w) through the backend API (made
// before the capture: finalizing asks the server, outside any graph).
struct backend_conv {
  desc plan = nullptr;
  std::vector<desc> owned;
};

static backend_conv backend_plan(cudnnHandle_t h) {
  backend_conv b;
  desc tx = bd_tensor4(1, N, C, H, W), tw = bd_tensor4(2, K, C, R, S), ty = bd_tensor4(3, N, K, P, Q);
  desc conv = bd_conv2d(1, 1);
  desc op = bd_make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  float alpha = 1.0f, beta = 0.0f;
  bd_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tx);
  bd_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tw);
  bd_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ty);
  bd_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv);
  bd_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
  bd_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
  DN(cudnnBackendFinalize(op));
  desc graph = bd_make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  bd_set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  bd_set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op);
  DN(cudnnBackendFinalize(graph));
  desc heur = bd_make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  cudnnBackendHeurMode_t hm = CUDNN_HEUR_MODE_A;
  bd_set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
  bd_set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &hm);
  DN(cudnnBackendFinalize(heur));
  int64_t count = 0, got = 0;
  DN(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                              &count, nullptr));
  if (count > 8) count = 8;
  desc cfg[8];
  for (int64_t i = 0; i < count; i++) cfg[i] = bd_make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  if (count)
    DN(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                count, &got, cfg));
  for (int64_t i = 0; i < got && !b.plan; i++) {
    desc p = bd_make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    bd_set(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    bd_set(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]);
    int64_t ws = -1, n1 = 0;
    // A plan that needs no workspace keeps the captured graph simple.
    if (cudnnBackendFinalize(p) == CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                 &n1, &ws) == CUDNN_STATUS_SUCCESS &&
        ws == 0)
      b.plan = p;
    else
      DN(cudnnBackendDestroyDescriptor(p));
  }
  if (!b.plan) {
    std::fprintf(stderr, "FAIL: no engine config without workspace finalized into a plan\n");
    std::exit(1);
  }
  for (int64_t i = 0; i < count; i++) b.owned.push_back(cfg[i]);
  desc rest[] = {heur, graph, op, conv, tx, tw, ty};
  for (desc d : rest) b.owned.push_back(d);
  return b;
}

int main() {
  const size_t nx = (size_t)N * C * H * W, nw = (size_t)K * C * R * S, ny = (size_t)N * K * P * Q;
  std::vector<float> hx(nx), hw(nw), hb(K);
  for (size_t i = 0; i < nw; i++) hw[i] = (float)((int)(i * 5 % 9) - 4) * 0.25f;
  for (int k = 0; k < K; k++) hb[k] = (float)(k - 2) * 0.5f;
  float *x, *w, *b, *y, *y2, *dx;
  CHECK(cudaMalloc(&x, nx * sizeof(float)));
  CHECK(cudaMalloc(&w, nw * sizeof(float)));
  CHECK(cudaMalloc(&b, K * sizeof(float)));
  CHECK(cudaMalloc(&y, ny * sizeof(float)));
  CHECK(cudaMalloc(&y2, ny * sizeof(float)));
  CHECK(cudaMalloc(&dx, nx * sizeof(float)));
  CHECK(cudaMemcpy(w, hw.data(), nw * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b, hb.data(), K * sizeof(float), cudaMemcpyHostToDevice));
  float *pinned_x;
  CHECK(cudaMallocHost(&pinned_x, nx * sizeof(float)));

  cudnnHandle_t h;
  DN(cudnnCreate(&h));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  DN(cudnnSetStream(h, s));

  cudnnTensorDescriptor_t xd, yd, bd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  cudnnActivationDescriptor_t ad;
  DN(cudnnCreateTensorDescriptor(&xd));
  DN(cudnnCreateTensorDescriptor(&yd));
  DN(cudnnCreateTensorDescriptor(&bd));
  DN(cudnnCreateFilterDescriptor(&wd));
  DN(cudnnCreateConvolutionDescriptor(&cd));
  DN(cudnnCreateActivationDescriptor(&ad));
  DN(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, C, H, W));
  DN(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, K, P, Q));
  DN(cudnnSetTensor4dDescriptor(bd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, K, 1, 1));
  DN(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, K, C, R, S));
  DN(cudnnSetConvolution2dDescriptor(cd, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  DN(cudnnSetConvolutionMathType(cd, CUDNN_FMA_MATH));
  DN(cudnnSetActivationDescriptor(ad, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0));
  // An algorithm that needs no workspace: IMPLICIT_GEMM always qualifies.
  cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  size_t ws = 1;
  DN(cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, algo, &ws));
  if (ws) {
    std::fprintf(stderr, "FAIL: IMPLICIT_GEMM asks %zu bytes of workspace\n", ws);
    return 1;
  }
  // Backward data without workspace: ALGO_1, else ALGO_0.
  cudnnConvolutionBwdDataAlgo_t balgo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  size_t bws = 1;
  if (cudnnGetConvolutionBackwardDataWorkspaceSize(h, wd, yd, cd, xd, balgo, &bws) !=
          CUDNN_STATUS_SUCCESS || bws) {
    balgo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
    bws = 1;
    DN(cudnnGetConvolutionBackwardDataWorkspaceSize(h, wd, yd, cd, xd, balgo, &bws));
  }
  if (bws) {
    std::fprintf(stderr, "FAIL: no backward-data algorithm without workspace\n");
    return 1;
  }
  backend_conv bc = backend_plan(h);
  desc pack = bd_make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  int64_t uids[3] = {1, 2, 3};
  void *ptrs[3] = {x, w, y2}, *no_ws = nullptr;
  bd_set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
  bd_set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs);
  bd_set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &no_ws);
  DN(cudnnBackendFinalize(pack));

  CHECK(cudaMemset(y, 0xff, ny * sizeof(float)));
  CHECK(cudaMemset(y2, 0xff, ny * sizeof(float)));
  CHECK(cudaDeviceSynchronize());
  // The capture: x is copied in by the graph too, from pinned host memory.
  cudaGraph_t graph;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaMemcpyAsync(x, pinned_x, nx * sizeof(float), cudaMemcpyHostToDevice, s));
  float one = 1.0f, zero = 0.0f;
  DN(cudnnConvolutionForward(h, &one, xd, x, wd, w, cd, algo, nullptr, 0, &zero, yd, y));
  DN(cudnnAddTensor(h, &one, bd, b, &one, yd, y));
  DN(cudnnActivationForward(h, ad, &one, yd, y, &zero, yd, y));
  DN(cudnnBackendExecute(h, bc.plan, pack));
  DN(cudnnConvolutionBackwardData(h, &one, wd, w, yd, y2, cd, balgo, nullptr, 0, &zero, xd, dx));
  CHECK(cudaStreamEndCapture(s, &graph));
  size_t nodes = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  std::printf("captured: a copy and 5 cuDNN calls (%s)\n", nodes >= 6 ? "at least 6 nodes" : "too few nodes");
  std::vector<float> hy(ny);
  CHECK(cudaMemcpy(hy.data(), y, ny * sizeof(float), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < ny; i++)
    if (!std::isnan(hy[i])) {
      std::fprintf(stderr, "FAIL: y[%zu] was written during the capture\n", i);
      return 1;
    }
  std::printf("nothing ran during the capture\n");
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));

  for (int launch = 1; launch <= 3; launch++) {
    for (size_t i = 0; i < nx; i++)
      pinned_x[i] = (float)((int)((i * 7 + 3 * launch) % 13) - 6) * 0.25f;
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    std::vector<float> got(ny), got2(ny);
    CHECK(cudaMemcpy(got.data(), y, ny * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(got2.data(), y2, ny * sizeof(float), cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (int n = 0; n < N; n++)
      for (int k = 0; k < K; k++)
        for (int p = 0; p < P; p++)
          for (int q = 0; q < Q; q++) {
            double acc = 0;
            for (int c = 0; c < C; c++)
              for (int r = 0; r < R; r++)
                for (int t = 0; t < S; t++) {
                  int ih = p - 1 + r, iw = q - 1 + t;
                  if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                  acc += (double)pinned_x[(((size_t)n * C + c) * H + ih) * W + iw] *
                         hw[(((size_t)k * C + c) * R + r) * S + t];
                }
            size_t i = (((size_t)n * K + k) * P + p) * Q + q;
            double z = acc + hb[k], relu = z > 0 ? z : 0;
            if (!(std::fabs(got[i] - relu) <= 1e-4 * (1 + std::fabs(relu))) ||
                !(std::fabs(got2[i] - acc) <= 1e-4 * (1 + std::fabs(acc)))) {
              if (bad++ < 5)
                std::fprintf(stderr, "launch %d: y[%zu] %g (want %g), y2 %g (want %g)\n", launch,
                             i, got[i], relu, got2[i], acc);
            }
          }
    // dx = conv_bwd_data(y2, w), from the reference's y2.
    std::vector<double> y2ref(ny, 0.0), dxref(nx, 0.0);
    for (int n = 0; n < N; n++)
      for (int k = 0; k < K; k++)
        for (int p = 0; p < P; p++)
          for (int q = 0; q < Q; q++)
            for (int c = 0; c < C; c++)
              for (int r = 0; r < R; r++)
                for (int t = 0; t < S; t++) {
                  int ih = p - 1 + r, iw = q - 1 + t;
                  if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                  y2ref[(((size_t)n * K + k) * P + p) * Q + q] +=
                      (double)pinned_x[(((size_t)n * C + c) * H + ih) * W + iw] *
                      hw[(((size_t)k * C + c) * R + r) * S + t];
                }
    for (int n = 0; n < N; n++)
      for (int k = 0; k < K; k++)
        for (int p = 0; p < P; p++)
          for (int q = 0; q < Q; q++)
            for (int c = 0; c < C; c++)
              for (int r = 0; r < R; r++)
                for (int t = 0; t < S; t++) {
                  int ih = p - 1 + r, iw = q - 1 + t;
                  if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                  dxref[(((size_t)n * C + c) * H + ih) * W + iw] +=
                      y2ref[(((size_t)n * K + k) * P + p) * Q + q] *
                      hw[(((size_t)k * C + c) * R + r) * S + t];
                }
    std::vector<float> gotdx(nx);
    CHECK(cudaMemcpy(gotdx.data(), dx, nx * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < nx; i++)
      if (!(std::fabs(gotdx[i] - dxref[i]) <= 1e-4 * (1 + std::fabs(dxref[i]))) && bad++ < 5)
        std::fprintf(stderr, "launch %d: dx[%zu] %g (want %g)\n", launch, i, gotdx[i], dxref[i]);
    if (bad) {
      std::fprintf(stderr, "FAIL: launch %d: %zu values wrong\n", launch, bad);
      return 1;
    }
    std::printf("launch %d: %zu + %zu + %zu values ok\n", launch, ny, ny, nx);
  }
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  DN(cudnnBackendDestroyDescriptor(pack));
  DN(cudnnBackendDestroyDescriptor(bc.plan));
  for (desc d : bc.owned) DN(cudnnBackendDestroyDescriptor(d));
  DN(cudnnDestroyTensorDescriptor(xd));
  DN(cudnnDestroyTensorDescriptor(yd));
  DN(cudnnDestroyTensorDescriptor(bd));
  DN(cudnnDestroyFilterDescriptor(wd));
  DN(cudnnDestroyConvolutionDescriptor(cd));
  DN(cudnnDestroyActivationDescriptor(ad));
  DN(cudnnDestroy(h));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFreeHost(pinned_x));
  float *bufs[] = {x, w, b, y, y2, dx};
  for (float *p : bufs) CHECK(cudaFree(p));
  std::printf("PASS cudnn_graph_capture\n");
  return 0;
}
