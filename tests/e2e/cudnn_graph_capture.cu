// rgpu-nvcc-flags: -lcudnn
// cuDNN calls captured into a CUDA graph (issue 17; what torch.cuda.graphs
// does with a network's convolutions): on a capturing stream, a legacy
// convolution forward, bias add and ReLU, and a backend (graph API)
// convolution execute become graph nodes; the graph is instantiated once
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

#define DN(call)                                                                  \
  do {                                                                            \
    cudnnStatus_t st_ = (call);                                                   \
    if (st_ != CUDNN_STATUS_SUCCESS) {                                            \
      std::fprintf(stderr, "FAIL %s:%d: %s -> %s\n", __FILE__, __LINE__, #call,  \
                   cudnnGetErrorString(st_));                                     \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

enum { N = 2, C = 3, H = 8, W = 8, K = 4, R = 3, S = 3 };
enum { P = H, Q = W }; // padding 1, stride 1

typedef cudnnBackendDescriptor_t desc;

static desc make(cudnnBackendDescriptorType_t t) {
  desc d;
  DN(cudnnBackendCreateDescriptor(t, &d));
  return d;
}

static void set(desc d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n,
                const void *v) {
  DN(cudnnBackendSetAttribute(d, a, t, n, v));
}

static desc btensor(int64_t uid, int64_t n, int64_t c, int64_t h, int64_t w) {
  desc t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  int64_t dims[4] = {n, c, h, w}, strides[4] = {c * h * w, h * w, w, 1}, align = 16;
  cudnnDataType_t f = CUDNN_DATA_FLOAT;
  set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f);
  set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
  set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
  set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
  DN(cudnnBackendFinalize(t));
  return t;
}

// A finalized plan for y2 = conv(x, w) through the backend API (made
// before the capture: finalizing asks the server, outside any graph).
struct backend_conv {
  desc plan = nullptr;
  std::vector<desc> owned;
};

static backend_conv backend_plan(cudnnHandle_t h) {
  backend_conv b;
  desc tx = btensor(1, N, C, H, W), tw = btensor(2, K, C, R, S), ty = btensor(3, N, K, P, Q);
  desc conv = make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  int64_t sd = 2, pad[2] = {1, 1}, str[2] = {1, 1}, dil[2] = {1, 1};
  cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
  set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sd);
  set(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
  set(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
  set(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str);
  set(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil);
  DN(cudnnBackendFinalize(conv));
  desc op = make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  float alpha = 1.0f, beta = 0.0f;
  set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tx);
  set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tw);
  set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ty);
  set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv);
  set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
  set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
  DN(cudnnBackendFinalize(op));
  desc graph = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op);
  DN(cudnnBackendFinalize(graph));
  desc heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  cudnnBackendHeurMode_t hm = CUDNN_HEUR_MODE_A;
  set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
  set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &hm);
  DN(cudnnBackendFinalize(heur));
  int64_t count = 0, got = 0;
  DN(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                              &count, nullptr));
  if (count > 8) count = 8;
  desc cfg[8];
  for (int64_t i = 0; i < count; i++) cfg[i] = make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  if (count)
    DN(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                count, &got, cfg));
  for (int64_t i = 0; i < got && !b.plan; i++) {
    desc p = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    set(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    set(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]);
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
  float *x, *w, *b, *y, *y2;
  CHECK(cudaMalloc(&x, nx * sizeof(float)));
  CHECK(cudaMalloc(&w, nw * sizeof(float)));
  CHECK(cudaMalloc(&b, K * sizeof(float)));
  CHECK(cudaMalloc(&y, ny * sizeof(float)));
  CHECK(cudaMalloc(&y2, ny * sizeof(float)));
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
  backend_conv bc = backend_plan(h);
  desc pack = make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  int64_t uids[3] = {1, 2, 3};
  void *ptrs[3] = {x, w, y2}, *no_ws = nullptr;
  set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
  set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs);
  set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &no_ws);
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
  CHECK(cudaStreamEndCapture(s, &graph));
  size_t nodes = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  std::printf("captured: a copy and 4 cuDNN calls (%s)\n", nodes >= 5 ? "at least 5 nodes" : "too few nodes");
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
    if (bad) {
      std::fprintf(stderr, "FAIL: launch %d: %zu values wrong\n", launch, bad);
      return 1;
    }
    std::printf("launch %d: %zu + %zu values ok\n", launch, ny, ny);
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
  float *bufs[] = {x, w, b, y, y2};
  for (float *p : bufs) CHECK(cudaFree(p));
  std::printf("PASS cudnn_graph_capture\n");
  return 0;
}
