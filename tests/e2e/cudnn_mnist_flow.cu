// rgpu-nvcc-flags: -lcudnn -lcublas
// The call sequence of cuDNN's classic LeNet-on-MNIST inference sample,
// written here with random weights and a synthetic 28x28 digit: the Nd
// descriptor forms throughout (tensor, filter, convolution, pooling), the
// output dimensions asked of cuDNN, an algorithm chosen by
// cudnnGetConvolutionForwardAlgorithm_v7 and cudnnFindConvolutionForwardAlgorithm
// with its workspace, bias by cudnnAddTensor, max pooling, the fully
// connected layers as cublasSgemv, ReLU, LRN and softmax.  Every layer is
// checked against a double-precision CPU reference; the printed class and
// probabilities are the same natively and through rgpu.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "rgpu_check.h"
#include "rgpu_cublas_check.h"
#include "rgpu_cudnn_check.h"

typedef std::vector<double> vec;

static unsigned g_seed = 12345;
static float frand() {  // a fixed LCG: the same weights natively and through rgpu
  g_seed = g_seed * 1103515245u + 12345u;
  return ((g_seed >> 8) & 0xffff) / 65536.0f - 0.5f;
}

static void compare(const char *what, const std::vector<float> &got, const vec &ref, double tol) {
  double peak = 0, err = 0;
  for (size_t i = 0; i < ref.size(); i++) peak = std::fmax(peak, std::fabs(ref[i]));
  for (size_t i = 0; i < ref.size(); i++) err = std::fmax(err, std::fabs(got[i] - ref[i]));
  if (got.size() != ref.size() || !(err <= tol * (peak + 1e-30))) {
    std::fprintf(stderr, "FAIL %s: max error %g against %g (tolerance %g)\n", what, err, peak, tol);
    std::exit(1);
  }
  std::printf("%s: %zu values ok\n", what, ref.size());
}

static cudnnTensorDescriptor_t tensor_nd(int n, int c, int h, int w) {
  cudnnTensorDescriptor_t t;
  int dims[4] = {n, c, h, w}, strides[4] = {c * h * w, h * w, w, 1};
  DN(cudnnCreateTensorDescriptor(&t));
  DN(cudnnSetTensorNdDescriptor(t, CUDNN_DATA_FLOAT, 4, dims, strides));
  return t;
}

// A convolution layer (valid, stride 1) with bias, as the sample runs it.
struct conv_layer {
  int cin, cout, k;
  std::vector<float> w, b;
};

static vec conv_ref(const conv_layer &L, const vec &x, int h, int w) {
  int oh = h - L.k + 1, ow = w - L.k + 1;
  vec y((size_t)L.cout * oh * ow);
  for (int o = 0; o < L.cout; o++)
    for (int i = 0; i < oh; i++)
      for (int j = 0; j < ow; j++) {
        double acc = L.b[o];
        for (int c = 0; c < L.cin; c++)
          for (int r = 0; r < L.k; r++)
            for (int s = 0; s < L.k; s++)
              acc += (double)L.w[((o * L.cin + c) * L.k + r) * L.k + s] * x[((size_t)c * h + i + r) * w + j + s];
        y[((size_t)o * oh + i) * ow + j] = acc;
      }
  return y;
}

static vec pool_ref(const vec &x, int c, int h, int w) {
  vec y((size_t)c * (h / 2) * (w / 2));
  for (int k = 0; k < c; k++)
    for (int i = 0; i < h / 2; i++)
      for (int j = 0; j < w / 2; j++) {
        double m = -1e300;
        for (int r = 0; r < 2; r++)
          for (int s = 0; s < 2; s++) m = std::fmax(m, x[((size_t)k * h + 2 * i + r) * w + 2 * j + s]);
        y[((size_t)k * (h / 2) + i) * (w / 2) + j] = m;
      }
  return y;
}

static float *conv_forward(cudnnHandle_t h, const conv_layer &L, const float *dx, int hgt, int wid,
                           int *oh, int *ow) {
  cudnnTensorDescriptor_t xd = tensor_nd(1, L.cin, hgt, wid), bd = tensor_nd(1, L.cout, 1, 1);
  cudnnFilterDescriptor_t fd;
  cudnnConvolutionDescriptor_t cd;
  int fdim[4] = {L.cout, L.cin, L.k, L.k}, pad[2] = {0, 0}, str[2] = {1, 1}, dil[2] = {1, 1};
  DN(cudnnCreateFilterDescriptor(&fd));
  DN(cudnnSetFilterNdDescriptor(fd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, fdim));
  DN(cudnnCreateConvolutionDescriptor(&cd));
  DN(cudnnSetConvolutionNdDescriptor(cd, 2, pad, str, dil, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  // Full float precision: cuDNN's default math may use TF32 tensor cores on
  // a GPU that has them, which the 1e-5 reference check would not accept.
  DN(cudnnSetConvolutionMathType(cd, CUDNN_FMA_MATH));
  int odim[4];
  DN(cudnnGetConvolutionNdForwardOutputDim(cd, xd, fd, 4, odim));
  *oh = odim[2], *ow = odim[3];
  cudnnTensorDescriptor_t yd = tensor_nd(odim[0], odim[1], odim[2], odim[3]);
  // The algorithm: heuristics, then a measured choice, as the sample does.
  cudnnConvolutionFwdAlgoPerf_t perf[8];
  int got = 0;
  DN(cudnnGetConvolutionForwardAlgorithm_v7(h, xd, fd, cd, yd, 8, &got, perf));
  EXPECT(got >= 1);
  DN(cudnnFindConvolutionForwardAlgorithm(h, xd, fd, cd, yd, 8, &got, perf));
  EXPECT(got >= 1 && perf[0].status == CUDNN_STATUS_SUCCESS);
  cudnnConvolutionFwdAlgo_t algo = perf[0].algo;
  size_t ws = 0;
  DN(cudnnGetConvolutionForwardWorkspaceSize(h, xd, fd, cd, yd, algo, &ws));
  void *dws = nullptr;
  if (ws) CHECK(cudaMalloc(&dws, ws));
  float *dw = to_device(L.w), *db = to_device(L.b), *dy;
  CHECK(cudaMalloc(&dy, (size_t)odim[1] * odim[2] * odim[3] * sizeof(float)));
  float one = 1, zero = 0;
  DN(cudnnConvolutionForward(h, &one, xd, dx, fd, dw, cd, algo, dws, ws, &zero, yd, dy));
  DN(cudnnAddTensor(h, &one, bd, db, &one, yd, dy));
  CHECK(cudaFree(dw));
  CHECK(cudaFree(db));
  if (dws) CHECK(cudaFree(dws));
  DN(cudnnDestroyTensorDescriptor(xd));
  DN(cudnnDestroyTensorDescriptor(bd));
  DN(cudnnDestroyTensorDescriptor(yd));
  DN(cudnnDestroyFilterDescriptor(fd));
  DN(cudnnDestroyConvolutionDescriptor(cd));
  return dy;
}

static float *max_pool(cudnnHandle_t h, const float *dx, int c, int hgt, int wid) {
  cudnnPoolingDescriptor_t pd;
  int win[2] = {2, 2}, pad[2] = {0, 0}, str[2] = {2, 2}, odim[4];
  DN(cudnnCreatePoolingDescriptor(&pd));
  DN(cudnnSetPoolingNdDescriptor(pd, CUDNN_POOLING_MAX, CUDNN_PROPAGATE_NAN, 2, win, pad, str));
  cudnnTensorDescriptor_t xd = tensor_nd(1, c, hgt, wid);
  DN(cudnnGetPoolingNdForwardOutputDim(pd, xd, 4, odim));
  EXPECT(odim[0] == 1 && odim[1] == c && odim[2] == hgt / 2 && odim[3] == wid / 2);
  cudnnTensorDescriptor_t yd = tensor_nd(odim[0], odim[1], odim[2], odim[3]);
  float *dy, one = 1, zero = 0;
  CHECK(cudaMalloc(&dy, (size_t)c * odim[2] * odim[3] * sizeof(float)));
  DN(cudnnPoolingForward(h, pd, &one, xd, dx, &zero, yd, dy));
  DN(cudnnDestroyTensorDescriptor(xd));
  DN(cudnnDestroyTensorDescriptor(yd));
  DN(cudnnDestroyPoolingDescriptor(pd));
  return dy;
}

// A fully connected layer: y = W x + b, W row-major out x in (column-major
// in x out for cuBLAS, hence the transposed gemv).
static float *fully_connected(cublasHandle_t bl, const std::vector<float> &W,
                              const std::vector<float> &b, const float *dx, int in, int out) {
  float *dW = to_device(W), *dy = to_device(b), one = 1;
  CB(cublasSgemv(bl, CUBLAS_OP_T, in, out, &one, dW, in, dx, 1, &one, dy, 1));
  CHECK(cudaFree(dW));
  return dy;
}

static vec fc_ref(const std::vector<float> &W, const std::vector<float> &b, const vec &x, int in,
                  int out) {
  vec y(out);
  for (int o = 0; o < out; o++) {
    double acc = b[o];
    for (int i = 0; i < in; i++) acc += (double)W[(size_t)o * in + i] * x[i];
    y[o] = acc;
  }
  return y;
}

int main() {
  cudnnHandle_t h;
  cublasHandle_t bl;
  DN(cudnnCreate(&h));
  CB(cublasCreate(&bl));
  // A synthetic "7": a bar and a diagonal on a dark background.
  std::vector<float> img(28 * 28, 0.0f);
  for (int j = 6; j < 22; j++) img[6 * 28 + j] = 1.0f;
  for (int i = 7; i < 24; i++) img[i * 28 + 21 - (i - 7) / 2] = 1.0f;
  vec x(img.begin(), img.end());

  conv_layer c1 = {1, 20, 5, {}, {}}, c2 = {20, 50, 5, {}, {}};
  for (conv_layer *L : {&c1, &c2}) {
    L->w.resize((size_t)L->cout * L->cin * L->k * L->k);
    L->b.resize(L->cout);
    for (float &v : L->w) v = frand() * 0.4f;
    for (float &v : L->b) v = frand() * 0.1f;
  }
  std::vector<float> w1(500 * 800), b1(500), w2(10 * 500), b2(10);
  for (float &v : w1) v = frand() * 0.1f;
  for (float &v : b1) v = frand() * 0.1f;
  for (float &v : w2) v = frand() * 0.2f;
  for (float &v : b2) v = frand() * 0.1f;

  float *dx = to_device(img);
  int oh, ow;
  float *a1 = conv_forward(h, c1, dx, 28, 28, &oh, &ow);
  EXPECT(oh == 24 && ow == 24);
  vec r1 = conv_ref(c1, x, 28, 28);
  compare("conv1 + bias", from_device(a1, r1.size()), r1, 1e-5);
  float *p1 = max_pool(h, a1, 20, 24, 24);
  vec rp1 = pool_ref(r1, 20, 24, 24);
  compare("pool1", from_device(p1, rp1.size()), rp1, 1e-5);
  float *a2 = conv_forward(h, c2, p1, 12, 12, &oh, &ow);
  EXPECT(oh == 8 && ow == 8);
  vec r2 = conv_ref(c2, rp1, 12, 12);
  compare("conv2 + bias", from_device(a2, r2.size()), r2, 1e-5);
  float *p2 = max_pool(h, a2, 50, 8, 8);
  vec rp2 = pool_ref(r2, 50, 8, 8);
  compare("pool2", from_device(p2, rp2.size()), rp2, 1e-5);

  float *f1 = fully_connected(bl, w1, b1, p2, 800, 500);
  vec rf1 = fc_ref(w1, b1, rp2, 800, 500);
  compare("fc1", from_device(f1, 500), rf1, 1e-5);
  // ReLU in place.
  cudnnActivationDescriptor_t act;
  DN(cudnnCreateActivationDescriptor(&act));
  DN(cudnnSetActivationDescriptor(act, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0));
  cudnnTensorDescriptor_t t500 = tensor_nd(1, 500, 1, 1);
  float one = 1, zero = 0;
  DN(cudnnActivationForward(h, act, &one, t500, f1, &zero, t500, f1));
  for (double &v : rf1) v = v > 0 ? v : 0;
  compare("relu", from_device(f1, 500), rf1, 1e-5);
  // LRN across the 500 "channels" (the sample normalizes here).
  cudnnLRNDescriptor_t lrn;
  const unsigned lrn_n = 5;
  const double lrn_alpha = 1e-4, lrn_beta = 0.75, lrn_k = 2.0;
  DN(cudnnCreateLRNDescriptor(&lrn));
  DN(cudnnSetLRNDescriptor(lrn, lrn_n, lrn_alpha, lrn_beta, lrn_k));
  float *n1;
  CHECK(cudaMalloc(&n1, 500 * sizeof(float)));
  DN(cudnnLRNCrossChannelForward(h, lrn, CUDNN_LRN_CROSS_CHANNEL_DIM1, &one, t500, f1, &zero, t500, n1));
  vec rn1(500);
  for (int c = 0; c < 500; c++) {
    double sq = 0;
    for (int k = c - (int)lrn_n / 2; k <= c + (int)(lrn_n - 1) / 2; k++)
      if (k >= 0 && k < 500) sq += rf1[k] * rf1[k];
    rn1[c] = rf1[c] / std::pow(lrn_k + lrn_alpha / lrn_n * sq, lrn_beta);
  }
  compare("lrn", from_device(n1, 500), rn1, 1e-5);
  float *f2 = fully_connected(bl, w2, b2, n1, 500, 10);
  vec rf2 = fc_ref(w2, b2, rn1, 500, 10);
  compare("fc2", from_device(f2, 10), rf2, 1e-5);
  cudnnTensorDescriptor_t t10 = tensor_nd(1, 10, 1, 1);
  float *prob;
  CHECK(cudaMalloc(&prob, 10 * sizeof(float)));
  DN(cudnnSoftmaxForward(h, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &one, t10, f2, &zero,
                         t10, prob));
  vec rp(10);
  double mx = -1e300, sum = 0;
  for (double v : rf2) mx = std::fmax(mx, v);
  for (int i = 0; i < 10; i++) sum += rp[i] = std::exp(rf2[i] - mx);
  for (double &v : rp) v /= sum;
  std::vector<float> p = from_device(prob, 10);
  compare("softmax", p, rp, 1e-5);
  auto argmax = [](const auto &v) {
    int best = 0;
    for (int i = 1; i < (int)v.size(); i++)
      if (v[i] > v[best]) best = i;
    return best;
  };
  int best = argmax(p);
  EXPECT(best == argmax(rp));
  std::printf("class %d, probability %.3f\n", best, p[best]);

  for (float *d : {dx, a1, p1, a2, p2, f1, n1, f2, prob}) CHECK(cudaFree(d));
  DN(cudnnDestroyTensorDescriptor(t500));
  DN(cudnnDestroyTensorDescriptor(t10));
  DN(cudnnDestroyActivationDescriptor(act));
  DN(cudnnDestroyLRNDescriptor(lrn));
  CB(cublasDestroy(bl));
  DN(cudnnDestroy(h));
  pass("cudnn_mnist_flow");
  return 0;
}
