// rgpu-nvcc-flags: -lcudnn
// cuDNN through rgpu's libcudnn.so.9 facade (issue 17): a small CNN's
// forward pass with the legacy API, NCHW float, two layers of convolution
// (padding, stride, dilation, groups), bias add (cudnnAddTensor), ReLU and
// pooling (max, then average), then a softmax over the channels; the
// algorithm and its workspace are asked of cuDNN and a workspace passed.
// Every output is compared with a CPU reference within a tolerance.
// Natively the same program runs NVIDIA's cuDNN.
//
// --work N: after the checked pass, N more forward steps (each asking for
// the algorithm and workspace size again, as a framework's loop does)
// between the same two synchronizations, then "PASS cudnn_work N"
// (tests/work_roundtrips.sh: they must cost no round trip).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <cudnn.h>
#include <vector>

#include "rgpu_check.h"
#include "rgpu_cudnn_check.h"


// A 4-d NCHW shape.
struct Shape {
  int n, c, h, w;
  size_t count() const { return (size_t)n * c * h * w; }
};

static float at(const std::vector<float> &v, const Shape &s, int n, int c, int h, int w) {
  return v[(((size_t)n * s.c + c) * s.h + h) * s.w + w];
}

// ---- the CPU reference ------------------------------------------------------

struct ConvParams {
  int pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, groups;
};

static Shape conv_out(const Shape &x, int k, int r, int s, const ConvParams &p) {
  return {x.n, k, 1 + (x.h + 2 * p.pad_h - ((r - 1) * p.dil_h + 1)) / p.stride_h,
          1 + (x.w + 2 * p.pad_w - ((s - 1) * p.dil_w + 1)) / p.stride_w};
}

// Cross-correlation (what frameworks call convolution), groups of channels.
static std::vector<float> ref_conv(const std::vector<float> &x, const Shape &xs,
                                   const std::vector<float> &w, int k, int c, int r, int s,
                                   const ConvParams &p, Shape *ys) {
  *ys = conv_out(xs, k, r, s, p);
  std::vector<float> y(ys->count());
  int kpg = k / p.groups;
  for (int n = 0; n < ys->n; n++)
    for (int kk = 0; kk < k; kk++)
      for (int oh = 0; oh < ys->h; oh++)
        for (int ow = 0; ow < ys->w; ow++) {
          double acc = 0;
          int g = kk / kpg;
          for (int cc = 0; cc < c; cc++)
            for (int i = 0; i < r; i++)
              for (int j = 0; j < s; j++) {
                int ih = oh * p.stride_h - p.pad_h + i * p.dil_h;
                int iw = ow * p.stride_w - p.pad_w + j * p.dil_w;
                if (ih < 0 || ih >= xs.h || iw < 0 || iw >= xs.w) continue;
                acc += (double)w[(((size_t)kk * c + cc) * r + i) * s + j] *
                       at(x, xs, n, g * c + cc, ih, iw);
              }
          y[(((size_t)n * k + kk) * ys->h + oh) * ys->w + ow] = (float)acc;
        }
  return y;
}

static void ref_bias_relu(std::vector<float> &y, const Shape &s, const std::vector<float> &b) {
  for (size_t i = 0; i < y.size(); i++) {
    int c = (int)(i / ((size_t)s.h * s.w) % s.c);
    float v = y[i] + b[c];
    y[i] = v > 0 ? v : 0;
  }
}

static std::vector<float> ref_pool(const std::vector<float> &x, const Shape &xs, int win,
                                   int stride, bool max, Shape *ys) {
  *ys = {xs.n, xs.c, 1 + (xs.h - win) / stride, 1 + (xs.w - win) / stride};
  std::vector<float> y(ys->count());
  for (int n = 0; n < ys->n; n++)
    for (int c = 0; c < ys->c; c++)
      for (int oh = 0; oh < ys->h; oh++)
        for (int ow = 0; ow < ys->w; ow++) {
          double acc = max ? -1e30 : 0;
          for (int i = 0; i < win; i++)
            for (int j = 0; j < win; j++) {
              double v = at(x, xs, n, c, oh * stride + i, ow * stride + j);
              acc = max ? (v > acc ? v : acc) : acc + v;
            }
          y[(((size_t)n * ys->c + c) * ys->h + oh) * ys->w + ow] =
              (float)(max ? acc : acc / (win * win));
        }
  return y;
}

static std::vector<float> ref_softmax(const std::vector<float> &x, const Shape &s) {
  std::vector<float> y(x.size());
  for (int n = 0; n < s.n; n++)
    for (int h = 0; h < s.h; h++)
      for (int w = 0; w < s.w; w++) {
        double mx = -1e30, sum = 0;
        for (int c = 0; c < s.c; c++) mx = std::fmax(mx, at(x, s, n, c, h, w));
        for (int c = 0; c < s.c; c++) sum += std::exp(at(x, s, n, c, h, w) - mx);
        for (int c = 0; c < s.c; c++)
          y[(((size_t)n * s.c + c) * s.h + h) * s.w + w] =
              (float)(std::exp(at(x, s, n, c, h, w) - mx) / sum);
      }
  return y;
}

// ---- the device side -----------------------------------------------------------

static unsigned g_seed = 12345;
static float next_value() {  // deterministic values in [-1, 1)
  g_seed = g_seed * 1103515245u + 12345u;
  return (float)((g_seed >> 9) & 0xffff) / 32768.0f - 1.0f;
}

static std::vector<float> random_vec(size_t n) {
  std::vector<float> v(n);
  for (auto &x : v) x = next_value();
  return v;
}

static cudnnTensorDescriptor_t tensor(const Shape &s) {
  cudnnTensorDescriptor_t t;
  DN(cudnnCreateTensorDescriptor(&t));
  DN(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s.n, s.c, s.h, s.w));
  return t;
}

static void compare(const char *what, const std::vector<float> &got,
                    const std::vector<float> &want, double tol) {
  EXPECT(got.size() == want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); i++) {
    double e = std::fabs((double)got[i] - want[i]) / (1.0 + std::fabs((double)want[i]));
    if (!(e <= tol)) {
      std::fprintf(stderr, "FAIL %s: element %zu is %.6f, expected %.6f\n", what, i, got[i],
                   want[i]);
      std::exit(1);
    }
    worst = e > worst ? e : worst;
  }
  std::printf("%s: %zu values ok\n", what, got.size());
}

// One convolution layer: its descriptors, the algorithm cuDNN recommends
// and the workspace that algorithm needs.
struct ConvLayer {
  cudnnTensorDescriptor_t x, y, bias;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
  Shape xs, ys;
  float *dw, *db;
};

static void make_layer(ConvLayer *L, const Shape &xs, int k, int r, int s, const ConvParams &p,
                       const std::vector<float> &w, const std::vector<float> &b) {
  L->xs = xs;
  L->x = tensor(xs);
  DN(cudnnCreateFilterDescriptor(&L->w));
  DN(cudnnSetFilter4dDescriptor(L->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, k, xs.c / p.groups, r,
                                s));
  DN(cudnnCreateConvolutionDescriptor(&L->conv));
  DN(cudnnSetConvolution2dDescriptor(L->conv, p.pad_h, p.pad_w, p.stride_h, p.stride_w, p.dil_h,
                                     p.dil_w, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  DN(cudnnSetConvolutionGroupCount(L->conv, p.groups));
  // Plain FP32 arithmetic (no TF32 tensor cores), so the tolerance holds.
  DN(cudnnSetConvolutionMathType(L->conv, CUDNN_FMA_MATH));
  int n, c, h, wd;
  DN(cudnnGetConvolution2dForwardOutputDim(L->conv, L->x, L->w, &n, &c, &h, &wd));
  L->ys = {n, c, h, wd};
  Shape want = conv_out(xs, k, r, s, p);
  EXPECT(n == want.n && c == want.c && h == want.h && wd == want.w);
  L->y = tensor(L->ys);
  L->bias = tensor({1, k, 1, 1});
  L->dw = to_device(w);
  L->db = to_device(b);
}

// The best algorithm cuDNN's heuristics rank first that succeeds, and its
// workspace size.
static cudnnConvolutionFwdAlgo_t pick_algo(cudnnHandle_t h, const ConvLayer &L, size_t *ws) {
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int got = 0;
  DN(cudnnGetConvolutionForwardAlgorithm_v7(h, L.x, L.w, L.conv, L.y,
                                            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf));
  EXPECT(got >= 1);
  for (int i = 0; i < got; i++) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    DN(cudnnGetConvolutionForwardWorkspaceSize(h, L.x, L.w, L.conv, L.y, perf[i].algo, ws));
    return perf[i].algo;
  }
  std::fprintf(stderr, "FAIL: no usable convolution algorithm\n");
  std::exit(1);
}

struct Net {
  cudnnHandle_t h;
  ConvLayer l1, l2;
  cudnnActivationDescriptor_t relu;
  cudnnPoolingDescriptor_t maxpool, avgpool;
  cudnnTensorDescriptor_t p1, p2;
  Shape p1s, p2s;
  float *dx, *dy1, *dp1, *dy2, *dp2, *dprob, *workspace;
  size_t workspace_size;
};

// One forward step: conv + bias + ReLU + max pool, conv + bias + ReLU +
// average pool, softmax.  Asks for the algorithms each time, as a
// framework's loop does (rgpu answers the repeats from its cache).
static void forward(Net &N) {
  const float one = 1.0f, zero = 0.0f;
  size_t ws1 = 0, ws2 = 0;
  cudnnConvolutionFwdAlgo_t a1 = pick_algo(N.h, N.l1, &ws1);
  cudnnConvolutionFwdAlgo_t a2 = pick_algo(N.h, N.l2, &ws2);
  EXPECT(ws1 <= N.workspace_size && ws2 <= N.workspace_size);
  DN(cudnnConvolutionForward(N.h, &one, N.l1.x, N.dx, N.l1.w, N.l1.dw, N.l1.conv, a1,
                             N.workspace, ws1, &zero, N.l1.y, N.dy1));
  DN(cudnnAddTensor(N.h, &one, N.l1.bias, N.l1.db, &one, N.l1.y, N.dy1));
  DN(cudnnActivationForward(N.h, N.relu, &one, N.l1.y, N.dy1, &zero, N.l1.y, N.dy1));
  DN(cudnnPoolingForward(N.h, N.maxpool, &one, N.l1.y, N.dy1, &zero, N.p1, N.dp1));
  DN(cudnnConvolutionForward(N.h, &one, N.l2.x, N.dp1, N.l2.w, N.l2.dw, N.l2.conv, a2,
                             N.workspace, ws2, &zero, N.l2.y, N.dy2));
  DN(cudnnAddTensor(N.h, &one, N.l2.bias, N.l2.db, &one, N.l2.y, N.dy2));
  DN(cudnnActivationForward(N.h, N.relu, &one, N.l2.y, N.dy2, &zero, N.l2.y, N.dy2));
  DN(cudnnPoolingForward(N.h, N.avgpool, &one, N.l2.y, N.dy2, &zero, N.p2, N.dp2));
  DN(cudnnSoftmaxForward(N.h, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &one, N.p2,
                         N.dp2, &zero, N.p2, N.dprob));
}

int main(int argc, char **argv) {
  int work = -1;
  if (argc == 3 && !std::strcmp(argv[1], "--work")) work = std::atoi(argv[2]);

  Net N;
  DN(cudnnCreate(&N.h));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  DN(cudnnSetStream(N.h, stream));
  cudaStream_t got_stream = nullptr;
  DN(cudnnGetStream(N.h, &got_stream));
  EXPECT(got_stream == stream);
  std::printf("cudnn %d.x\n", (int)(cudnnGetVersion() / 10000));

  // Layer 1: 2x4x12x12 -> 6 channels, 3x3, padding 1, groups 2.
  // Layer 2: 6x6x6 -> 5 channels, 3x3, dilation 2 at padding 2, stride 1.
  const Shape xs = {2, 4, 12, 12};
  const ConvParams p1 = {1, 1, 1, 1, 1, 1, 2}, p2 = {2, 2, 1, 1, 2, 2, 1};
  std::vector<float> x = random_vec(xs.count());
  std::vector<float> w1 = random_vec(6 * 2 * 3 * 3), b1 = random_vec(6);
  std::vector<float> w2 = random_vec(5 * 6 * 3 * 3), b2 = random_vec(5);
  N.dx = to_device(x);
  make_layer(&N.l1, xs, 6, 3, 3, p1, w1, b1);
  DN(cudnnCreateActivationDescriptor(&N.relu));
  DN(cudnnSetActivationDescriptor(N.relu, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
  DN(cudnnCreatePoolingDescriptor(&N.maxpool));
  DN(cudnnSetPooling2dDescriptor(N.maxpool, CUDNN_POOLING_MAX, CUDNN_NOT_PROPAGATE_NAN, 2, 2, 0,
                                 0, 2, 2));
  int n, c, h, w;
  DN(cudnnGetPooling2dForwardOutputDim(N.maxpool, N.l1.y, &n, &c, &h, &w));
  N.p1s = {n, c, h, w};
  N.p1 = tensor(N.p1s);
  make_layer(&N.l2, N.p1s, 5, 3, 3, p2, w2, b2);
  DN(cudnnCreatePoolingDescriptor(&N.avgpool));
  DN(cudnnSetPooling2dDescriptor(N.avgpool, CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
                                 CUDNN_NOT_PROPAGATE_NAN, 2, 2, 0, 0, 2, 2));
  DN(cudnnGetPooling2dForwardOutputDim(N.avgpool, N.l2.y, &n, &c, &h, &w));
  N.p2s = {n, c, h, w};
  N.p2 = tensor(N.p2s);
  std::printf("shapes: conv1 %dx%dx%dx%d pool1 %dx%dx%dx%d conv2 %dx%dx%dx%d pool2 %dx%dx%dx%d\n",
              N.l1.ys.n, N.l1.ys.c, N.l1.ys.h, N.l1.ys.w, N.p1s.n, N.p1s.c, N.p1s.h, N.p1s.w,
              N.l2.ys.n, N.l2.ys.c, N.l2.ys.h, N.l2.ys.w, N.p2s.n, N.p2s.c, N.p2s.h, N.p2s.w);

  // cuDNN's own checks: a y that is not the convolution's output is
  // refused; the status is printed (the GPU script compares it with the
  // native one).
  const float one = 1.0f, zero = 0.0f;
  cudnnStatus_t bad = cudnnConvolutionForward(N.h, &one, N.l1.x, N.dx, N.l1.w, N.l1.dw,
                                              N.l1.conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                              nullptr, 0, &zero, N.p1, N.dx);
  EXPECT(bad != CUDNN_STATUS_SUCCESS);
  std::printf("a mismatched output: %s (%d)\n", cudnnGetErrorString(bad), (int)bad);

  // The workspace: the largest either layer's algorithm needs.
  size_t ws1 = 0, ws2 = 0;
  pick_algo(N.h, N.l1, &ws1);
  pick_algo(N.h, N.l2, &ws2);
  N.workspace_size = ws1 > ws2 ? ws1 : ws2;
  N.workspace = nullptr;
  if (N.workspace_size) CHECK(cudaMalloc(&N.workspace, N.workspace_size));
  CHECK(cudaMalloc(&N.dy1, N.l1.ys.count() * sizeof(float)));
  CHECK(cudaMalloc(&N.dp1, N.p1s.count() * sizeof(float)));
  CHECK(cudaMalloc(&N.dy2, N.l2.ys.count() * sizeof(float)));
  CHECK(cudaMalloc(&N.dp2, N.p2s.count() * sizeof(float)));
  CHECK(cudaMalloc(&N.dprob, N.p2s.count() * sizeof(float)));

  forward(N);
  CHECK(cudaStreamSynchronize(stream));

  // The CPU reference, layer by layer.
  Shape ys1, ps1, ys2, ps2;
  std::vector<float> r1 = ref_conv(x, xs, w1, 6, 2, 3, 3, p1, &ys1);
  ref_bias_relu(r1, ys1, b1);
  std::vector<float> rp1 = ref_pool(r1, ys1, 2, 2, true, &ps1);
  std::vector<float> r2 = ref_conv(rp1, ps1, w2, 5, 6, 3, 3, p2, &ys2);
  ref_bias_relu(r2, ys2, b2);
  std::vector<float> rp2 = ref_pool(r2, ys2, 2, 2, false, &ps2);
  std::vector<float> prob = ref_softmax(rp2, ps2);
  compare("conv1 bias relu", from_device(N.dy1, N.l1.ys.count()), r1, 1e-4);
  compare("maxpool1", from_device(N.dp1, N.p1s.count()), rp1, 1e-4);
  compare("conv2 bias relu", from_device(N.dy2, N.l2.ys.count()), r2, 1e-4);
  compare("avgpool2", from_device(N.dp2, N.p2s.count()), rp2, 1e-4);
  std::vector<float> got = from_device(N.dprob, N.p2s.count());
  compare("softmax", got, prob, 1e-4);
  // Each sample's probabilities at each position sum to 1.
  for (int i = 0; i < N.p2s.n * N.p2s.h * N.p2s.w; i++) {
    int nn = i / (N.p2s.h * N.p2s.w), pos = i % (N.p2s.h * N.p2s.w);
    double sum = 0;
    for (int cc = 0; cc < N.p2s.c; cc++)
      sum += got[((size_t)nn * N.p2s.c + cc) * N.p2s.h * N.p2s.w + pos];
    EXPECT(std::fabs(sum - 1.0) < 1e-4);
  }
  std::printf("softmax sums to 1 at %d positions\n", N.p2s.n * N.p2s.h * N.p2s.w);

  if (work >= 0) {
    // The rounds, between the same two synchronizations.
    for (int i = 0; i < work; i++) forward(N);
    CHECK(cudaStreamSynchronize(stream));
    compare("softmax after the rounds", from_device(N.dprob, N.p2s.count()), prob, 1e-4);
    std::printf("PASS cudnn_work %d\n", work);
  }

  DN(cudnnDestroy(N.h));
  CHECK(cudaStreamDestroy(stream));
  pass("cudnn_legacy_cnn");
  return 0;
}
