// rgpu-nvcc-flags: -lcudnn
// cuDNN's legacy API training a small CNN (issue 17): forward AND backward,
// then one SGD step, NCHW float:
//   x 2x3x8x8 -> conv1 (4 filters 3x3, padding 1) + bias -> max pool 2x2
//     -> ReLU -> conv2 (5 filters 3x3, padding 1)
//     -> batch-norm (training, per channel) -> log-softmax over the
//     channels -> the mean negative log-likelihood of a label per position.
// Algorithms and workspaces are asked of cuDNN (forward, backward data,
// backward filter; the batch-norm Ex forms' workspace and reserve space,
// as PyTorch calls them).  Every gradient (dx, dW1, db1, dW2, dgamma,
// dbeta and the intermediate ones) is compared with a CPU reference
// computed here in double, a few weights' gradients with central finite
// differences of the loss, then the SGD step (cudnnAddTensor for the
// filters and bias, cudnnOpTensor for the batch-norm parameters), the
// running statistics and an inference pass (cudnnBatchNormalization-
// ForwardInference) are checked too, the fused
// cudnnConvolutionBiasActivationForward, a cross-channel LRN,
// cudnnReduceTensor and dropout.  FMA math, so a GPU's TF32 does not
// loosen the 1e-3 tolerance.  Natively the same program runs NVIDIA's
// cuDNN.
//
// --work N: after the checks, N more training steps (each asking for its
// algorithms and workspace sizes again, as a framework's loop does)
// between the same two synchronizations, then "PASS cudnn_train_work N"
// (tests/work_roundtrips.sh: they must cost no round trip).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <cudnn.h>
#include <utility>
#include <vector>

#include "rgpu_check.h"
#include "rgpu_cudnn_check.h"

typedef std::vector<double> Vec;

// ---- sizes ------------------------------------------------------------------

enum { N = 2, C0 = 3, H0 = 8, K1 = 4, H1 = 8, HP = 4, K2 = 5, H2 = 4, R = 3 };
static const double kEps = 1e-5, kFactor = 0.1, kLr = 0.1;
static const int M = N * H2 * H2;  // positions the loss averages over

static size_t idx4(int c_, int h_, int n, int c, int y, int x) {
  return (((size_t)n * c_ + c) * h_ + y) * h_ + x;
}

// ---- the CPU reference, in double ---------------------------------------------

// y = conv(x, w), cross-correlation, stride 1, padding 1, square images.
static Vec conv_fwd(const Vec &x, int c, int h, const Vec &w, int k) {
  Vec y((size_t)N * k * h * h, 0.0);
  for (int n = 0; n < N; n++)
    for (int kk = 0; kk < k; kk++)
      for (int oy = 0; oy < h; oy++)
        for (int ox = 0; ox < h; ox++) {
          double acc = 0;
          for (int cc = 0; cc < c; cc++)
            for (int r = 0; r < R; r++)
              for (int s = 0; s < R; s++) {
                int iy = oy - 1 + r, ix = ox - 1 + s;
                if (iy < 0 || iy >= h || ix < 0 || ix >= h) continue;
                acc += w[idx4(c, R, kk, cc, r, s)] * x[idx4(c, h, n, cc, iy, ix)];
              }
          y[idx4(k, h, n, kk, oy, ox)] = acc;
        }
  return y;
}

static Vec conv_bwd_data(const Vec &dy, int k, int h, const Vec &w, int c) {
  Vec dx((size_t)N * c * h * h, 0.0);
  for (int n = 0; n < N; n++)
    for (int kk = 0; kk < k; kk++)
      for (int oy = 0; oy < h; oy++)
        for (int ox = 0; ox < h; ox++)
          for (int cc = 0; cc < c; cc++)
            for (int r = 0; r < R; r++)
              for (int s = 0; s < R; s++) {
                int iy = oy - 1 + r, ix = ox - 1 + s;
                if (iy < 0 || iy >= h || ix < 0 || ix >= h) continue;
                dx[idx4(c, h, n, cc, iy, ix)] +=
                    w[idx4(c, R, kk, cc, r, s)] * dy[idx4(k, h, n, kk, oy, ox)];
              }
  return dx;
}

static Vec conv_bwd_filter(const Vec &x, int c, int h, const Vec &dy, int k) {
  Vec dw((size_t)k * c * R * R, 0.0);
  for (int n = 0; n < N; n++)
    for (int kk = 0; kk < k; kk++)
      for (int oy = 0; oy < h; oy++)
        for (int ox = 0; ox < h; ox++)
          for (int cc = 0; cc < c; cc++)
            for (int r = 0; r < R; r++)
              for (int s = 0; s < R; s++) {
                int iy = oy - 1 + r, ix = ox - 1 + s;
                if (iy < 0 || iy >= h || ix < 0 || ix >= h) continue;
                dw[idx4(c, R, kk, cc, r, s)] +=
                    x[idx4(c, h, n, cc, iy, ix)] * dy[idx4(k, h, n, kk, oy, ox)];
              }
  return dw;
}

// Everything the forward pass keeps for the backward one.
struct Ref {
  Vec a1, r1, p1, c2, bn, logp;      // activations
  Vec mean, var;                     // batch statistics (biased variance)
  double loss;
  Vec dlogp, dbn, dc2, dw2, dp1, dr1, da1, db1, dw1, dx, dgamma, dbeta;
};

static void ref_forward(Ref &f, const Vec &x, const Vec &w1, const Vec &b1, const Vec &w2,
                        const Vec &gamma, const Vec &beta, const std::vector<int> &label) {
  f.a1 = conv_fwd(x, C0, H0, w1, K1);
  for (size_t i = 0; i < f.a1.size(); i++) f.a1[i] += b1[i / (H1 * H1) % K1];
  f.p1.assign((size_t)N * K1 * HP * HP, 0.0);
  for (int n = 0; n < N; n++)
    for (int c = 0; c < K1; c++)
      for (int y = 0; y < HP; y++)
        for (int xx = 0; xx < HP; xx++) {
          double m = -1e300;
          for (int r = 0; r < 2; r++)
            for (int s = 0; s < 2; s++) m = std::fmax(m, f.a1[idx4(K1, H1, n, c, 2 * y + r, 2 * xx + s)]);
          f.p1[idx4(K1, HP, n, c, y, xx)] = m;
        }
  // ReLU after the pooling: the pooling's inputs (the convolution's
  // outputs) have no ties, so its backward is the same on every GPU.
  f.r1 = f.p1;
  for (double &v : f.r1) v = v > 0 ? v : 0;
  f.c2 = conv_fwd(f.r1, K1, HP, w2, K2);
  f.mean.assign(K2, 0.0);
  f.var.assign(K2, 0.0);
  for (size_t i = 0; i < f.c2.size(); i++) f.mean[i / (H2 * H2) % K2] += f.c2[i] / M;
  for (size_t i = 0; i < f.c2.size(); i++) {
    double d = f.c2[i] - f.mean[i / (H2 * H2) % K2];
    f.var[i / (H2 * H2) % K2] += d * d / M;
  }
  f.bn.resize(f.c2.size());
  for (size_t i = 0; i < f.c2.size(); i++) {
    int c = (int)(i / (H2 * H2) % K2);
    f.bn[i] = (f.c2[i] - f.mean[c]) / std::sqrt(f.var[c] + kEps) * gamma[c] + beta[c];
  }
  f.logp.resize(f.bn.size());
  f.loss = 0;
  for (int n = 0; n < N; n++)
    for (int p = 0; p < H2 * H2; p++) {
      double mx = -1e300, sum = 0;
      for (int c = 0; c < K2; c++) mx = std::fmax(mx, f.bn[((size_t)n * K2 + c) * H2 * H2 + p]);
      for (int c = 0; c < K2; c++) sum += std::exp(f.bn[((size_t)n * K2 + c) * H2 * H2 + p] - mx);
      for (int c = 0; c < K2; c++) {
        size_t i = ((size_t)n * K2 + c) * H2 * H2 + p;
        f.logp[i] = f.bn[i] - mx - std::log(sum);
      }
      f.loss -= f.logp[((size_t)n * K2 + label[n * H2 * H2 + p]) * H2 * H2 + p] / M;
    }
}

static void ref_backward(Ref &f, const Vec &x, const Vec &w1, const Vec &w2, const Vec &gamma,
                         const std::vector<int> &label) {
  f.dlogp.assign(f.logp.size(), 0.0);
  for (int n = 0; n < N; n++)
    for (int p = 0; p < H2 * H2; p++)
      f.dlogp[((size_t)n * K2 + label[n * H2 * H2 + p]) * H2 * H2 + p] = -1.0 / M;
  f.dbn.resize(f.logp.size());
  for (int n = 0; n < N; n++)
    for (int p = 0; p < H2 * H2; p++) {
      double sum = 0;
      for (int c = 0; c < K2; c++) sum += f.dlogp[((size_t)n * K2 + c) * H2 * H2 + p];
      for (int c = 0; c < K2; c++) {
        size_t i = ((size_t)n * K2 + c) * H2 * H2 + p;
        f.dbn[i] = f.dlogp[i] - std::exp(f.logp[i]) * sum;
      }
    }
  f.dgamma.assign(K2, 0.0);
  f.dbeta.assign(K2, 0.0);
  for (size_t i = 0; i < f.c2.size(); i++) {
    int c = (int)(i / (H2 * H2) % K2);
    double xhat = (f.c2[i] - f.mean[c]) / std::sqrt(f.var[c] + kEps);
    f.dbeta[c] += f.dbn[i];
    f.dgamma[c] += f.dbn[i] * xhat;
  }
  f.dc2.resize(f.c2.size());
  for (size_t i = 0; i < f.c2.size(); i++) {
    int c = (int)(i / (H2 * H2) % K2);
    double inv = 1 / std::sqrt(f.var[c] + kEps), xhat = (f.c2[i] - f.mean[c]) * inv;
    f.dc2[i] = gamma[c] * inv / M * (M * f.dbn[i] - f.dbeta[c] - xhat * f.dgamma[c]);
  }
  f.dw2 = conv_bwd_filter(f.r1, K1, HP, f.dc2, K2);
  f.dr1 = conv_bwd_data(f.dc2, K2, HP, w2, K1);
  f.dp1 = f.dr1;
  for (size_t i = 0; i < f.dp1.size(); i++)
    if (!(f.p1[i] > 0)) f.dp1[i] = 0;
  // Max pooling routes each gradient to its window's maximum.
  f.da1.assign(f.a1.size(), 0.0);
  for (int n = 0; n < N; n++)
    for (int c = 0; c < K1; c++)
      for (int y = 0; y < HP; y++)
        for (int xx = 0; xx < HP; xx++) {
          int by = 0, bx = 0;
          double best = -1e300;
          for (int r = 0; r < 2; r++)
            for (int s = 0; s < 2; s++) {
              double v = f.a1[idx4(K1, H1, n, c, 2 * y + r, 2 * xx + s)];
              if (v > best) best = v, by = 2 * y + r, bx = 2 * xx + s;
            }
          f.da1[idx4(K1, H1, n, c, by, bx)] += f.dp1[idx4(K1, HP, n, c, y, xx)];
        }
  f.db1.assign(K1, 0.0);
  for (size_t i = 0; i < f.da1.size(); i++) f.db1[i / (H1 * H1) % K1] += f.da1[i];
  f.dw1 = conv_bwd_filter(x, C0, H0, f.da1, K1);
  f.dx = conv_bwd_data(f.da1, K1, H0, w1, C0);
}

// Cross-channel LRN of an NxK2xH2xH2 tensor, in double: y_c = x_c (k +
// alpha/n sum x_j^2)^-beta over the window [c - (n-1)/2, c + n-1-(n-1)/2].
static Vec ref_lrn(const Vec &x, int n, double alpha, double beta, double k) {
  Vec y(x.size());
  int lb = (n - 1) / 2, la = n - 1 - lb;
  for (int b = 0; b < N; b++)
    for (int p = 0; p < H2 * H2; p++)
      for (int c = 0; c < K2; c++) {
        double sum = 0;
        for (int j = c - lb; j <= c + la; j++)
          if (j >= 0 && j < K2) sum += x[((size_t)b * K2 + j) * H2 * H2 + p] * x[((size_t)b * K2 + j) * H2 * H2 + p];
        size_t i = ((size_t)b * K2 + c) * H2 * H2 + p;
        y[i] = x[i] * std::pow(k + alpha / n * sum, -beta);
      }
  return y;
}

// ---- the device side ---------------------------------------------------------------

static unsigned g_seed = 2024;
static float next_value() {  // deterministic values in [-1, 1)
  g_seed = g_seed * 1103515245u + 12345u;
  return (float)((g_seed >> 9) & 0xffff) / 32768.0f - 1.0f;
}

static std::vector<float> random_vec(size_t n, float scale) {
  std::vector<float> v(n);
  for (auto &x : v) x = next_value() * scale;
  return v;
}

static Vec widen(const std::vector<float> &v) { return Vec(v.begin(), v.end()); }

static float *device_buffer(size_t n) {
  float *d;
  CHECK(cudaMalloc(&d, n * sizeof(float)));
  return d;
}

static cudnnTensorDescriptor_t tensor(int n, int c, int h, int w) {
  cudnnTensorDescriptor_t t;
  DN(cudnnCreateTensorDescriptor(&t));
  DN(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w));
  return t;
}

// got against want within tol, relative to the element and to the
// tensor's scale (a gradient's small elements are sums that cancel).
static void compare(const char *what, const std::vector<float> &got, const Vec &want, double tol) {
  EXPECT(got.size() == want.size());
  double scale = 0;
  for (double v : want) scale = std::fmax(scale, std::fabs(v));
  for (size_t i = 0; i < got.size(); i++) {
    double e = std::fabs((double)got[i] - want[i]);
    if (!(e <= tol * (std::fabs(want[i]) + scale) + 1e-12)) {
      std::fprintf(stderr, "FAIL %s: element %zu is %.8f, expected %.8f\n", what, i, got[i],
                   want[i]);
      std::exit(1);
    }
  }
  std::printf("%s: %zu values ok\n", what, got.size());
}

// One convolution: its descriptors and the algorithms cuDNN ranks first
// for each direction, with their workspace sizes.
struct Conv {
  cudnnTensorDescriptor_t x, y, bias;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
};

static void make_conv(Conv *L, int c, int h, int k) {
  L->x = tensor(N, c, h, h);
  DN(cudnnCreateFilterDescriptor(&L->w));
  DN(cudnnSetFilter4dDescriptor(L->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, k, c, R, R));
  DN(cudnnCreateConvolutionDescriptor(&L->conv));
  DN(cudnnSetConvolution2dDescriptor(L->conv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                     CUDNN_DATA_FLOAT));
  // Plain FP32 arithmetic (no TF32 tensor cores), so the tolerance holds.
  DN(cudnnSetConvolutionMathType(L->conv, CUDNN_FMA_MATH));
  int n, kk, hh, ww;
  DN(cudnnGetConvolution2dForwardOutputDim(L->conv, L->x, L->w, &n, &kk, &hh, &ww));
  EXPECT(n == N && kk == k && hh == h && ww == h);
  L->y = tensor(N, k, h, h);
  L->bias = tensor(1, k, 1, 1);
}

struct Algos {
  cudnnConvolutionFwdAlgo_t fwd;
  cudnnConvolutionBwdDataAlgo_t data;
  cudnnConvolutionBwdFilterAlgo_t filter;
  size_t ws_fwd, ws_data, ws_filter;
};

// The first algorithm of each ranking that succeeds, and its workspace.
static Algos pick_algos(cudnnHandle_t h, const Conv &L) {
  Algos a;
  int got = 0;
  cudnnConvolutionFwdAlgoPerf_t pf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  DN(cudnnGetConvolutionForwardAlgorithm_v7(h, L.x, L.w, L.conv, L.y,
                                            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, pf));
  int i = 0;
  while (i < got && pf[i].status != CUDNN_STATUS_SUCCESS) i++;
  EXPECT(i < got);
  a.fwd = pf[i].algo;
  DN(cudnnGetConvolutionForwardWorkspaceSize(h, L.x, L.w, L.conv, L.y, a.fwd, &a.ws_fwd));
  cudnnConvolutionBwdDataAlgoPerf_t pd[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  DN(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, L.w, L.y, L.conv, L.x,
                                                 CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, pd));
  for (i = 0; i < got && pd[i].status != CUDNN_STATUS_SUCCESS;) i++;
  EXPECT(i < got);
  a.data = pd[i].algo;
  DN(cudnnGetConvolutionBackwardDataWorkspaceSize(h, L.w, L.y, L.conv, L.x, a.data, &a.ws_data));
  cudnnConvolutionBwdFilterAlgoPerf_t pw[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  DN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
      h, L.x, L.y, L.conv, L.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, pw));
  for (i = 0; i < got && pw[i].status != CUDNN_STATUS_SUCCESS;) i++;
  EXPECT(i < got);
  a.filter = pw[i].algo;
  DN(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, L.x, L.y, L.conv, L.w, a.filter,
                                                    &a.ws_filter));
  return a;
}

struct Net {
  cudnnHandle_t h;
  Conv l1, l2;
  cudnnActivationDescriptor_t relu;
  cudnnPoolingDescriptor_t pool;
  cudnnTensorDescriptor_t p1, bnp, w1t, w2t;
  cudnnOpTensorDescriptor_t add;
  // Parameters, activations, gradients (device).
  float *x, *w1, *b1, *w2, *gamma, *beta, *run_mean, *run_var, *save_mean, *save_inv;
  float *a1, *r1, *p1d, *c2, *bn, *logp, *dlogp;
  float *dbn, *dc2, *dw2, *dp1, *dr1, *da1, *db1, *dw1, *dx, *dgamma, *dbeta;
  float *gamma_new, *beta_new;
  void *workspace, *reserve;
  size_t workspace_size, reserve_size;
};

static const float one = 1.0f, zero = 0.0f;

// The BN Ex forms' workspace and reserve sizes (asked each step, as
// PyTorch does: rgpu answers the repeats from its cache).
static void bn_sizes(Net &T, size_t *fwd_ws, size_t *bwd_ws, size_t *reserve) {
  DN(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
      T.h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, T.l2.y, nullptr, T.l2.y, T.bnp,
      nullptr, fwd_ws));
  DN(cudnnGetBatchNormalizationBackwardExWorkspaceSize(
      T.h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, T.l2.y, T.l2.y, T.l2.y, nullptr,
      T.l2.y, T.bnp, nullptr, bwd_ws));
  DN(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
      T.h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, nullptr, T.l2.y, reserve));
}

// The forward pass.  training_ex: batch-norm with the Ex form, updating
// the running statistics (a training step); otherwise the plain form
// without them (the finite-difference evaluations of the loss).
static void forward(Net &T, bool training_ex) {
  Algos a1 = pick_algos(T.h, T.l1), a2 = pick_algos(T.h, T.l2);
  EXPECT(a1.ws_fwd <= T.workspace_size && a2.ws_fwd <= T.workspace_size);
  DN(cudnnConvolutionForward(T.h, &one, T.l1.x, T.x, T.l1.w, T.w1, T.l1.conv, a1.fwd, T.workspace,
                             a1.ws_fwd, &zero, T.l1.y, T.a1));
  DN(cudnnAddTensor(T.h, &one, T.l1.bias, T.b1, &one, T.l1.y, T.a1));
  DN(cudnnPoolingForward(T.h, T.pool, &one, T.l1.y, T.a1, &zero, T.p1, T.p1d));
  DN(cudnnActivationForward(T.h, T.relu, &one, T.p1, T.p1d, &zero, T.p1, T.r1));
  DN(cudnnConvolutionForward(T.h, &one, T.l2.x, T.r1, T.l2.w, T.w2, T.l2.conv, a2.fwd,
                             T.workspace, a2.ws_fwd, &zero, T.l2.y, T.c2));
  if (training_ex) {
    size_t fws, bws, res;
    bn_sizes(T, &fws, &bws, &res);
    EXPECT(fws <= T.workspace_size && res <= T.reserve_size);
    DN(cudnnBatchNormalizationForwardTrainingEx(
        T.h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, &one, &zero, T.l2.y, T.c2, nullptr,
        nullptr, T.l2.y, T.bn, T.bnp, T.gamma, T.beta, kFactor, T.run_mean, T.run_var, kEps,
        T.save_mean, T.save_inv, nullptr, T.workspace, fws, T.reserve, res));
  } else {
    DN(cudnnBatchNormalizationForwardTraining(T.h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, T.l2.y,
                                              T.c2, T.l2.y, T.bn, T.bnp, T.gamma, T.beta, kFactor,
                                              nullptr, nullptr, kEps, nullptr, nullptr));
  }
  DN(cudnnSoftmaxForward(T.h, CUDNN_SOFTMAX_LOG, CUDNN_SOFTMAX_MODE_CHANNEL, &one, T.l2.y, T.bn,
                         &zero, T.l2.y, T.logp));
}

// The backward pass from the constant loss gradient dlogp.
static void backward(Net &T) {
  Algos a1 = pick_algos(T.h, T.l1), a2 = pick_algos(T.h, T.l2);
  size_t fws, bws, res;
  bn_sizes(T, &fws, &bws, &res);
  EXPECT(bws <= T.workspace_size && a1.ws_data <= T.workspace_size &&
         a1.ws_filter <= T.workspace_size && a2.ws_data <= T.workspace_size &&
         a2.ws_filter <= T.workspace_size);
  DN(cudnnSoftmaxBackward(T.h, CUDNN_SOFTMAX_LOG, CUDNN_SOFTMAX_MODE_CHANNEL, &one, T.l2.y,
                          T.logp, T.l2.y, T.dlogp, &zero, T.l2.y, T.dbn));
  DN(cudnnBatchNormalizationBackwardEx(
      T.h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, &one, &zero, &one, &zero, T.l2.y,
      T.c2, T.l2.y, T.bn, T.l2.y, T.dbn, nullptr, nullptr, T.l2.y, T.dc2, T.bnp, T.gamma, T.beta,
      T.dgamma, T.dbeta, kEps, T.save_mean, T.save_inv, nullptr, T.workspace, bws, T.reserve,
      res));
  DN(cudnnConvolutionBackwardFilter(T.h, &one, T.l2.x, T.r1, T.l2.y, T.dc2, T.l2.conv, a2.filter,
                                    T.workspace, a2.ws_filter, &zero, T.l2.w, T.dw2));
  DN(cudnnConvolutionBackwardData(T.h, &one, T.l2.w, T.w2, T.l2.y, T.dc2, T.l2.conv, a2.data,
                                  T.workspace, a2.ws_data, &zero, T.l2.x, T.dr1));
  DN(cudnnActivationBackward(T.h, T.relu, &one, T.p1, T.r1, T.p1, T.dr1, T.p1, T.p1d, &zero, T.p1,
                             T.dp1));
  DN(cudnnPoolingBackward(T.h, T.pool, &one, T.p1, T.p1d, T.p1, T.dp1, T.l1.y, T.a1, &zero,
                          T.l1.y, T.da1));
  DN(cudnnConvolutionBackwardBias(T.h, &one, T.l1.y, T.da1, &zero, T.l1.bias, T.db1));
  DN(cudnnConvolutionBackwardFilter(T.h, &one, T.l1.x, T.x, T.l1.y, T.da1, T.l1.conv, a1.filter,
                                    T.workspace, a1.ws_filter, &zero, T.l1.w, T.dw1));
  DN(cudnnConvolutionBackwardData(T.h, &one, T.l1.w, T.w1, T.l1.y, T.da1, T.l1.conv, a1.data,
                                  T.workspace, a1.ws_data, &zero, T.l1.x, T.dx));
}

// One SGD step: W -= lr dW (cudnnAddTensor, the filters seen as tensors);
// the batch-norm parameters through cudnnOpTensor into new buffers, then
// swapped in.
static void sgd(Net &T) {
  const float neg_lr = (float)-kLr, lr_one = 1.0f;
  DN(cudnnAddTensor(T.h, &neg_lr, T.w1t, T.dw1, &one, T.w1t, T.w1));
  DN(cudnnAddTensor(T.h, &neg_lr, T.l1.bias, T.db1, &one, T.l1.bias, T.b1));
  DN(cudnnAddTensor(T.h, &neg_lr, T.w2t, T.dw2, &one, T.w2t, T.w2));
  DN(cudnnOpTensor(T.h, T.add, &lr_one, T.bnp, T.gamma, &neg_lr, T.bnp, T.dgamma, &zero, T.bnp,
                   T.gamma_new));
  DN(cudnnOpTensor(T.h, T.add, &lr_one, T.bnp, T.beta, &neg_lr, T.bnp, T.dbeta, &zero, T.bnp,
                   T.beta_new));
  std::swap(T.gamma, T.gamma_new);
  std::swap(T.beta, T.beta_new);
}

static double loss_of(const std::vector<float> &logp, const std::vector<int> &label) {
  double loss = 0;
  for (int n = 0; n < N; n++)
    for (int p = 0; p < H2 * H2; p++)
      loss -= logp[((size_t)n * K2 + label[n * H2 * H2 + p]) * H2 * H2 + p] / (double)M;
  return loss;
}

// The loss after a forward pass without the running statistics.
static double device_loss(Net &T, const std::vector<int> &label) {
  forward(T, false);
  CHECK(cudaDeviceSynchronize());
  return loss_of(from_device(T.logp, (size_t)N * K2 * H2 * H2), label);
}

// Central finite differences of the loss in parameter p[i] against the
// analytic gradient g.
static void finite_difference(Net &T, float *p, size_t i, double g, const char *what,
                              const std::vector<int> &label) {
  float v;
  CHECK(cudaMemcpy(&v, p + i, sizeof v, cudaMemcpyDeviceToHost));
  const float step = 1e-2f;
  float plus = v + step, minus = v - step;
  CHECK(cudaMemcpy(p + i, &plus, sizeof plus, cudaMemcpyHostToDevice));
  double lp = device_loss(T, label);
  CHECK(cudaMemcpy(p + i, &minus, sizeof minus, cudaMemcpyHostToDevice));
  double lm = device_loss(T, label);
  CHECK(cudaMemcpy(p + i, &v, sizeof v, cudaMemcpyHostToDevice));
  double fd = (lp - lm) / ((double)plus - (double)minus);
  if (!(std::fabs(fd - g) <= 2e-3 + 3e-2 * std::fabs(g))) {
    std::fprintf(stderr, "FAIL finite difference of %s[%zu]: %.6f, the gradient says %.6f\n",
                 what, i, fd, g);
    std::exit(1);
  }
  std::printf("finite difference of %s[%zu] ok\n", what, i);
}

int main(int argc, char **argv) {
  int work = -1;
  if (argc == 3 && !std::strcmp(argv[1], "--work")) work = std::atoi(argv[2]);

  Net T;
  DN(cudnnCreate(&T.h));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  DN(cudnnSetStream(T.h, stream));

  // Data, labels and parameters.
  std::vector<float> x = random_vec((size_t)N * C0 * H0 * H0, 1.0f);
  std::vector<float> w1 = random_vec((size_t)K1 * C0 * R * R, 0.5f), b1 = random_vec(K1, 0.2f);
  std::vector<float> w2 = random_vec((size_t)K2 * K1 * R * R, 0.5f);
  std::vector<float> gamma = random_vec(K2, 0.3f), beta = random_vec(K2, 0.3f);
  for (float &g : gamma) g += 1.0f;
  std::vector<int> label(M);
  for (int i = 0; i < M; i++) label[i] = (i * 7 + i / 5) % K2;

  make_conv(&T.l1, C0, H0, K1);
  make_conv(&T.l2, K1, HP, K2);
  DN(cudnnCreateActivationDescriptor(&T.relu));
  DN(cudnnSetActivationDescriptor(T.relu, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
  DN(cudnnCreatePoolingDescriptor(&T.pool));
  DN(cudnnSetPooling2dDescriptor(T.pool, CUDNN_POOLING_MAX, CUDNN_NOT_PROPAGATE_NAN, 2, 2, 0, 0,
                                 2, 2));
  T.p1 = tensor(N, K1, HP, HP);
  DN(cudnnCreateTensorDescriptor(&T.bnp));
  DN(cudnnDeriveBNTensorDescriptor(T.bnp, T.l2.y, CUDNN_BATCHNORM_SPATIAL));
  cudnnDataType_t bt;
  int bn_, bc, bh, bw, s0, s1, s2, s3;
  DN(cudnnGetTensor4dDescriptor(T.bnp, &bt, &bn_, &bc, &bh, &bw, &s0, &s1, &s2, &s3));
  EXPECT(bt == CUDNN_DATA_FLOAT && bn_ == 1 && bc == K2 && bh == 1 && bw == 1);
  std::printf("derived batch-norm shape: %dx%dx%dx%d\n", bn_, bc, bh, bw);
  T.w1t = tensor(K1, C0, R, R);
  T.w2t = tensor(K2, K1, R, R);
  DN(cudnnCreateOpTensorDescriptor(&T.add));
  DN(cudnnSetOpTensorDescriptor(T.add, CUDNN_OP_TENSOR_ADD, CUDNN_DATA_FLOAT,
                                CUDNN_NOT_PROPAGATE_NAN));
  cudnnOpTensorOp_t op;
  cudnnDataType_t ot;
  cudnnNanPropagation_t on;
  DN(cudnnGetOpTensorDescriptor(T.add, &op, &ot, &on));
  EXPECT(op == CUDNN_OP_TENSOR_ADD && ot == CUDNN_DATA_FLOAT && on == CUDNN_NOT_PROPAGATE_NAN);
  int max_data = 0, max_filter = 0;
  DN(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(T.h, &max_data));
  DN(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(T.h, &max_filter));
  EXPECT(max_data >= 1 && max_filter >= 1);

  // A mismatched gradient shape is refused by cuDNN's checks.
  cudnnStatus_t bad = cudnnConvolutionBackwardBias(T.h, &one, T.l1.y, T.x, &zero, T.l2.bias, T.x);
  EXPECT(bad != CUDNN_STATUS_SUCCESS);
  std::printf("a bias gradient of the wrong channels: refused\n");

  // Device buffers.
  const size_t n_x = x.size(), n_a1 = (size_t)N * K1 * H1 * H1, n_p1 = (size_t)N * K1 * HP * HP,
               n_c2 = (size_t)N * K2 * H2 * H2;
  T.x = to_device(x);
  T.w1 = to_device(w1);
  T.b1 = to_device(b1);
  T.w2 = to_device(w2);
  T.gamma = to_device(gamma);
  T.beta = to_device(beta);
  T.run_mean = device_buffer(K2);
  T.run_var = device_buffer(K2);
  T.save_mean = device_buffer(K2);
  T.save_inv = device_buffer(K2);
  T.gamma_new = device_buffer(K2);
  T.beta_new = device_buffer(K2);
  T.a1 = device_buffer(n_a1);
  T.r1 = device_buffer(n_p1);
  T.p1d = device_buffer(n_p1);
  T.c2 = device_buffer(n_c2);
  T.bn = device_buffer(n_c2);
  T.logp = device_buffer(n_c2);
  T.dbn = device_buffer(n_c2);
  T.dc2 = device_buffer(n_c2);
  T.dp1 = device_buffer(n_p1);
  T.dr1 = device_buffer(n_p1);
  T.da1 = device_buffer(n_a1);
  T.dx = device_buffer(n_x);
  T.dw1 = device_buffer(w1.size());
  T.db1 = device_buffer(K1);
  T.dw2 = device_buffer(w2.size());
  T.dgamma = device_buffer(K2);
  T.dbeta = device_buffer(K2);
  // Running statistics start at mean 0, variance 1 (cudnnSetTensor);
  // the loss gradient -onehot/M: -onehot copied, scaled by 1/M on the
  // device (cudnnScaleTensor).
  const float zero_v = 0.0f, one_v = 1.0f, inv_m = 1.0f / M;
  DN(cudnnSetTensor(T.h, T.bnp, T.run_mean, &zero_v));
  DN(cudnnSetTensor(T.h, T.bnp, T.run_var, &one_v));
  std::vector<float> onehot(n_c2, 0.0f);
  for (int n = 0; n < N; n++)
    for (int p = 0; p < H2 * H2; p++) onehot[((size_t)n * K2 + label[n * H2 * H2 + p]) * H2 * H2 + p] = -1.0f;
  T.dlogp = to_device(onehot);
  DN(cudnnScaleTensor(T.h, T.l2.y, T.dlogp, &inv_m));

  // The workspace: the largest any algorithm or batch-norm form needs.
  Algos a1 = pick_algos(T.h, T.l1), a2 = pick_algos(T.h, T.l2);
  size_t fws, bws, res;
  T.workspace_size = T.reserve_size = 0;
  T.reserve_size = 0;
  bn_sizes(T, &fws, &bws, &res);
  size_t sizes[] = {a1.ws_fwd, a1.ws_data, a1.ws_filter, a2.ws_fwd, a2.ws_data, a2.ws_filter,
                    fws, bws};
  for (size_t s : sizes) T.workspace_size = s > T.workspace_size ? s : T.workspace_size;
  T.reserve_size = res;
  T.workspace = nullptr;
  T.reserve = nullptr;
  if (T.workspace_size) CHECK(cudaMalloc(&T.workspace, T.workspace_size));
  if (T.reserve_size) CHECK(cudaMalloc(&T.reserve, T.reserve_size));

  // Step 1: forward and backward, checked against the reference.
  forward(T, true);
  backward(T);
  CHECK(cudaStreamSynchronize(stream));
  Ref f;
  Vec xd = widen(x), w1d = widen(w1), b1d = widen(b1), w2d = widen(w2), gd = widen(gamma),
      bd = widen(beta);
  ref_forward(f, xd, w1d, b1d, w2d, gd, bd, label);
  ref_backward(f, xd, w1d, w2d, gd, label);
  const double tol = 1e-3;
  compare("conv1 + bias", from_device(T.a1, n_a1), f.a1, tol);
  compare("max pool", from_device(T.p1d, n_p1), f.p1, tol);
  compare("relu", from_device(T.r1, n_p1), f.r1, tol);
  compare("conv2", from_device(T.c2, n_c2), f.c2, tol);
  compare("batch-norm (training)", from_device(T.bn, n_c2), f.bn, tol);
  compare("log-softmax", from_device(T.logp, n_c2), f.logp, tol);
  double loss0 = loss_of(from_device(T.logp, n_c2), label);
  EXPECT(std::fabs(loss0 - f.loss) <= tol * (1 + f.loss));
  std::printf("loss: matches the reference\n");
  compare("saved mean", from_device(T.save_mean, K2), f.mean, tol);
  Vec inv(K2), run_mean(K2), run_var(K2);
  for (int c = 0; c < K2; c++) {
    inv[c] = 1 / std::sqrt(f.var[c] + kEps);
    run_mean[c] = kFactor * f.mean[c];
    run_var[c] = (1 - kFactor) + kFactor * f.var[c] * M / (M - 1);  // unbiased
  }
  compare("saved inverse std", from_device(T.save_inv, K2), inv, tol);
  compare("running mean", from_device(T.run_mean, K2), run_mean, tol);
  compare("running variance", from_device(T.run_var, K2), run_var, tol);
  compare("d log-softmax input", from_device(T.dbn, n_c2), f.dbn, tol);
  compare("d conv2 output (batch-norm backward)", from_device(T.dc2, n_c2), f.dc2, tol);
  compare("dgamma", from_device(T.dgamma, K2), f.dgamma, tol);
  compare("dbeta", from_device(T.dbeta, K2), f.dbeta, tol);
  compare("dW2", from_device(T.dw2, w2.size()), f.dw2, tol);
  compare("d relu output", from_device(T.dr1, n_p1), f.dr1, tol);
  compare("d pool output (relu backward)", from_device(T.dp1, n_p1), f.dp1, tol);
  compare("d conv1 output (max pool backward)", from_device(T.da1, n_a1), f.da1, tol);
  compare("db1", from_device(T.db1, K1), f.db1, tol);
  compare("dW1", from_device(T.dw1, w1.size()), f.dw1, tol);
  compare("dx", from_device(T.dx, n_x), f.dx, tol);

  // The fused forward: relu(conv1(x) + 0.5 z + b1) with z = conv1(x) + b1
  // is relu(1.5 (conv1(x) + b1)); z a separate tensor, then z in y.
  {
    const cudnnConvolutionFwdAlgo_t precomp = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
    size_t ws = 0;
    DN(cudnnGetConvolutionForwardWorkspaceSize(T.h, T.l1.x, T.l1.w, T.l1.conv, T.l1.y, precomp,
                                               &ws));
    void *fws = nullptr;
    if (ws) CHECK(cudaMalloc(&fws, ws));
    float *fy = device_buffer(n_a1);
    const float half = 0.5f;
    Vec want(f.a1);
    for (double &v : want) v = v > 0 ? 1.5 * v : 0;
    DN(cudnnConvolutionBiasActivationForward(T.h, &one, T.l1.x, T.x, T.l1.w, T.w1, T.l1.conv,
                                             precomp, fws, ws, &half, T.l1.y, T.a1, T.l1.bias,
                                             T.b1, T.relu, T.l1.y, fy));
    CHECK(cudaStreamSynchronize(stream));
    compare("conv + z + bias + relu (fused)", from_device(fy, n_a1), want, tol);
    CHECK(cudaMemcpy(fy, T.a1, n_a1 * sizeof(float), cudaMemcpyDeviceToDevice));
    DN(cudnnConvolutionBiasActivationForward(T.h, &one, T.l1.x, T.x, T.l1.w, T.w1, T.l1.conv,
                                             precomp, fws, ws, &half, T.l1.y, fy, T.l1.bias,
                                             T.b1, T.relu, T.l1.y, fy));
    CHECK(cudaStreamSynchronize(stream));
    compare("conv + z + bias + relu (fused, z in y)", from_device(fy, n_a1), want, tol);
    CHECK(cudaFree(fy));
    if (fws) CHECK(cudaFree(fws));
  }

  // A few weights' gradients against finite differences of the loss.
  finite_difference(T, T.w1, 5, f.dw1[5], "W1", label);
  finite_difference(T, T.w1, 77, f.dw1[77], "W1", label);
  finite_difference(T, T.w2, 13, f.dw2[13], "W2", label);
  finite_difference(T, T.w2, 150, f.dw2[150], "W2", label);
  finite_difference(T, T.gamma, 2, f.dgamma[2], "gamma", label);

  // The SGD step, then the loss again (the plain forward: running
  // statistics untouched).
  sgd(T);
  CHECK(cudaStreamSynchronize(stream));
  Vec w1n(w1d), b1n(b1d), w2n(w2d), gn(gd), bnn(bd);
  for (size_t i = 0; i < w1n.size(); i++) w1n[i] -= kLr * f.dw1[i];
  for (size_t i = 0; i < b1n.size(); i++) b1n[i] -= kLr * f.db1[i];
  for (size_t i = 0; i < w2n.size(); i++) w2n[i] -= kLr * f.dw2[i];
  for (int c = 0; c < K2; c++) gn[c] -= kLr * f.dgamma[c], bnn[c] -= kLr * f.dbeta[c];
  compare("W1 after the step", from_device(T.w1, w1.size()), w1n, tol);
  compare("b1 after the step", from_device(T.b1, K1), b1n, tol);
  compare("W2 after the step", from_device(T.w2, w2.size()), w2n, tol);
  compare("gamma after the step (op-tensor)", from_device(T.gamma, K2), gn, tol);
  compare("beta after the step (op-tensor)", from_device(T.beta, K2), bnn, tol);
  double loss1 = device_loss(T, label);
  Ref f1;
  ref_forward(f1, xd, w1n, b1n, w2n, gn, bnn, label);
  EXPECT(std::fabs(loss1 - f1.loss) <= tol * (1 + f1.loss));
  EXPECT(loss1 < loss0);
  std::printf("loss after the step: smaller, matches the reference\n");

  // Inference with the running statistics.
  DN(cudnnBatchNormalizationForwardInference(T.h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, T.l2.y,
                                             T.c2, T.l2.y, T.bn, T.bnp, T.gamma, T.beta,
                                             T.run_mean, T.run_var, kEps));
  CHECK(cudaStreamSynchronize(stream));
  Vec inf(n_c2);
  for (size_t i = 0; i < n_c2; i++) {
    int c = (int)(i / (H2 * H2) % K2);
    inf[i] = (f1.c2[i] - run_mean[c]) / std::sqrt(run_var[c] + kEps) * gn[c] + bnn[c];
  }
  compare("batch-norm (inference)", from_device(T.bn, n_c2), inf, tol);

  // Cross-channel LRN (an even window: cuDNN's look-behind and look-ahead
  // differ) of conv2's output, forward and backward; the backward's
  // reference is central differences of the forward's.
  {
    cudnnLRNDescriptor_t lrn;
    DN(cudnnCreateLRNDescriptor(&lrn));
    DN(cudnnSetLRNDescriptor(lrn, 4, 0.8, 0.75, 1.5));
    unsigned ln;
    double la, lb, lk;
    DN(cudnnGetLRNDescriptor(lrn, &ln, &la, &lb, &lk));
    EXPECT(ln == 4 && la == 0.8 && lb == 0.75 && lk == 1.5);
    float *ly = device_buffer(n_c2), *ldx = device_buffer(n_c2);
    DN(cudnnLRNCrossChannelForward(T.h, lrn, CUDNN_LRN_CROSS_CHANNEL_DIM1, &one, T.l2.y, T.c2,
                                   &zero, T.l2.y, ly));
    DN(cudnnLRNCrossChannelBackward(T.h, lrn, CUDNN_LRN_CROSS_CHANNEL_DIM1, &one, T.l2.y, ly,
                                    T.l2.y, T.dbn, T.l2.y, T.c2, &zero, T.l2.y, ldx));
    CHECK(cudaStreamSynchronize(stream));
    Vec c2 = widen(from_device(T.c2, n_c2)), g = widen(from_device(T.dbn, n_c2));
    compare("LRN forward", from_device(ly, n_c2), ref_lrn(c2, 4, 0.8, 0.75, 1.5), tol);
    Vec want(n_c2);
    for (size_t i = 0; i < n_c2; i++) {
      Vec plus(c2), minus(c2);
      plus[i] += 1e-5;
      minus[i] -= 1e-5;
      Vec yp = ref_lrn(plus, 4, 0.8, 0.75, 1.5), ym = ref_lrn(minus, 4, 0.8, 0.75, 1.5);
      double d = 0;
      for (size_t o = 0; o < n_c2; o++) d += g[o] * (yp[o] - ym[o]) / 2e-5;
      want[i] = d;
    }
    compare("LRN backward", from_device(ldx, n_c2), want, tol);
    CHECK(cudaFree(ly));
    CHECK(cudaFree(ldx));
    DN(cudnnDestroyLRNDescriptor(lrn));
  }

  // cudnnReduceTensor of conv2's output to one value per channel: the sum,
  // the 2-norm and the maximum (its workspace asked of cuDNN).
  {
    cudnnReduceTensorDescriptor_t red;
    DN(cudnnCreateReduceTensorDescriptor(&red));
    cudnnTensorDescriptor_t per_channel = tensor(1, K2, 1, 1);
    float *dsum = device_buffer(K2);
    Vec c2 = widen(from_device(T.c2, n_c2));
    const cudnnReduceTensorOp_t ops[3] = {CUDNN_REDUCE_TENSOR_ADD, CUDNN_REDUCE_TENSOR_NORM2,
                                          CUDNN_REDUCE_TENSOR_MAX};
    const char *names[3] = {"reduce add", "reduce norm2", "reduce max"};
    for (int o = 0; o < 3; o++) {
      DN(cudnnSetReduceTensorDescriptor(red, ops[o], CUDNN_DATA_FLOAT, CUDNN_NOT_PROPAGATE_NAN,
                                        CUDNN_REDUCE_TENSOR_NO_INDICES, CUDNN_32BIT_INDICES));
      size_t ws = 0;
      DN(cudnnGetReductionWorkspaceSize(T.h, red, T.l2.y, per_channel, &ws));
      void *rws = nullptr;
      if (ws) CHECK(cudaMalloc(&rws, ws));
      DN(cudnnReduceTensor(T.h, red, nullptr, 0, rws, ws, &one, T.l2.y, T.c2, &zero, per_channel,
                           dsum));
      CHECK(cudaStreamSynchronize(stream));
      Vec want(K2, o == 2 ? -1e300 : 0.0);
      for (size_t i = 0; i < n_c2; i++) {
        int c = (int)(i / (H2 * H2) % K2);
        want[c] = o == 0 ? want[c] + c2[i] : o == 1 ? want[c] + c2[i] * c2[i]
                                                    : std::fmax(want[c], c2[i]);
      }
      if (o == 1)
        for (double &v : want) v = std::sqrt(v);
      compare(names[o], from_device(dsum, K2), want, tol);
      if (rws) CHECK(cudaFree(rws));
    }
    CHECK(cudaFree(dsum));
    DN(cudnnDestroyTensorDescriptor(per_channel));
    DN(cudnnDestroyReduceTensorDescriptor(red));
  }

  // Dropout (p = 0.25) of 4096 positive values: every output is 0 or the
  // input scaled by 1/(1-p), about a quarter are 0, and the backward drops
  // the same elements; states and reserve space sized by cuDNN.
  {
    const int n_d = 4096;
    const float p = 0.25f;
    cudnnTensorDescriptor_t dt = tensor(1, 4, 32, 32);
    cudnnDropoutDescriptor_t drop;
    DN(cudnnCreateDropoutDescriptor(&drop));
    size_t states_size = 0, reserve_size = 0;
    DN(cudnnDropoutGetStatesSize(T.h, &states_size));
    DN(cudnnDropoutGetReserveSpaceSize(dt, &reserve_size));
    void *states, *reserve;
    CHECK(cudaMalloc(&states, states_size));
    CHECK(cudaMalloc(&reserve, reserve_size));
    DN(cudnnSetDropoutDescriptor(drop, T.h, p, states, states_size, 1234));
    float got_p;
    void *got_states;
    unsigned long long got_seed;
    DN(cudnnGetDropoutDescriptor(drop, T.h, &got_p, &got_states, &got_seed));
    EXPECT(got_p == p && got_states == states && got_seed == 1234);
    std::vector<float> xv(n_d), gv(n_d);
    for (int i = 0; i < n_d; i++) {
      xv[i] = 0.5f + 0.25f * next_value();
      gv[i] = 1.0f + 0.5f * next_value();
    }
    float *dxin = to_device(xv), *dgrad = to_device(gv), *dout = device_buffer(n_d),
          *dback = device_buffer(n_d);
    DN(cudnnDropoutForward(T.h, drop, dt, dxin, dt, dout, reserve, reserve_size));
    DN(cudnnDropoutBackward(T.h, drop, dt, dgrad, dt, dback, reserve, reserve_size));
    CHECK(cudaStreamSynchronize(stream));
    std::vector<float> yv = from_device(dout, n_d), bv = from_device(dback, n_d);
    int dropped = 0;
    for (int i = 0; i < n_d; i++) {
      bool kept = yv[i] != 0;
      dropped += !kept;
      double want_y = kept ? xv[i] / (1.0 - p) : 0.0, want_b = kept ? gv[i] / (1.0 - p) : 0.0;
      if (!(std::fabs(yv[i] - want_y) <= 1e-5 * (1 + want_y) &&
            std::fabs(bv[i] - want_b) <= 1e-5 * (1 + want_b))) {
        std::fprintf(stderr, "FAIL dropout element %d: y %.6f dx %.6f for x %.6f dy %.6f\n", i,
                     yv[i], bv[i], xv[i], gv[i]);
        std::exit(1);
      }
    }
    EXPECT(dropped > n_d / 4 - 300 && dropped < n_d / 4 + 300);
    std::printf("dropout forward and backward: %d values ok, about a quarter dropped\n", n_d);
    CHECK(cudaFree(dxin));
    CHECK(cudaFree(dgrad));
    CHECK(cudaFree(dout));
    CHECK(cudaFree(dback));
    CHECK(cudaFree(states));
    CHECK(cudaFree(reserve));
    DN(cudnnDestroyDropoutDescriptor(drop));
    DN(cudnnDestroyTensorDescriptor(dt));
  }

  if (work >= 0) {
    // The rounds, between the same two synchronizations.
    for (int i = 0; i < work; i++) {
      forward(T, true);
      backward(T);
      sgd(T);
    }
    CHECK(cudaStreamSynchronize(stream));
    double lw = device_loss(T, label);
    EXPECT(std::isfinite(lw) && lw <= loss1 + 1e-6);
    std::printf("PASS cudnn_train_work %d\n", work);
  }

  DN(cudnnDestroyOpTensorDescriptor(T.add));
  DN(cudnnDestroy(T.h));
  CHECK(cudaStreamDestroy(stream));
  pass("cudnn_legacy_train");
  return 0;
}
