// rgpu-nvcc-flags: -lcudnn
// One convolution layer trained with cuDNN's backend (graph) API through
// rgpu's libcudnn.so.9 facade (issue 17), the graphs a framework builds for
// a training step:
//   forward   y  = relu(conv(x, w) + b)   one graph: a convolution and its
//             pointwise epilogue (bias add, ReLU) through virtual tensors;
//             where cuDNN has no fused engine for it (float data on some
//             GPUs) the program says so and runs the convolution alone,
//             adding the bias and ReLU on the host
//   loss      L = 1/2 sum (y - t)^2, dz = (y - t) relu'(z) on the host
//   dgrad     dx = conv_bwd_data(dz, w)      one graph
//   wgrad     dw = conv_bwd_filter(x, dz)     one graph
//   SGD       w -= lr dw, b -= lr db, then a second forward: the loss drops.
// Every result is compared with a CPU reference in double, and dw with a
// finite difference of the loss.  Inputs are small multiples of 1/4 (exact
// in TF32 as in float, so a tensor-core engine gives the same sums).
//
// --work N: after the checked step, N more forward/dgrad/wgrad rounds (each
// rebuilding all three graphs) between the same two synchronizations, then
// "PASS cudnn_backend_train_work N" (tests/work_roundtrips.sh: they must
// cost no round trip).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <cudnn.h>
#include <vector>

#include "rgpu_check.h"
#include "rgpu_cudnn_check.h"

enum { N = 2, C = 3, H = 9, W = 9, K = 4, R = 3, S = 3, PAD = 1, STRIDE = 2 };
enum { P = 1 + (H + 2 * PAD - R) / STRIDE, Q = 1 + (W + 2 * PAD - S) / STRIDE };
enum { UID_X = 1, UID_W, UID_B, UID_Y, UID_Z, UID_ZB, UID_DZ, UID_DX, UID_DW };

typedef cudnnBackendDescriptor_t desc;

static desc tensor(int64_t uid, int64_t n, int64_t c, int64_t h, int64_t w, bool virt = false) {
  return bd_tensor4(uid, n, c, h, w, virt);
}
static desc conv_desc() { return bd_conv2d(PAD, STRIDE); }

// A convolution operation of type t on (a, b) -> out in the roles of
// attributes an, bn, on.
static desc conv_op(cudnnBackendDescriptorType_t t, desc conv, cudnnBackendAttributeName_t an,
                    desc a, cudnnBackendAttributeName_t bn, desc b,
                    cudnnBackendAttributeName_t on, desc out, cudnnBackendAttributeName_t convn,
                    cudnnBackendAttributeName_t alphan, cudnnBackendAttributeName_t betan) {
  desc op = bd_make(t);
  float alpha = 1.0f, beta = 0.0f;
  bd_set(op, an, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
  bd_set(op, bn, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
  bd_set(op, on, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &out);
  bd_set(op, convn, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv);
  bd_set(op, alphan, CUDNN_TYPE_FLOAT, 1, &alpha);
  bd_set(op, betan, CUDNN_TYPE_FLOAT, 1, &beta);
  DN(cudnnBackendFinalize(op));
  return op;
}

static desc pointwise_op(cudnnPointwiseMode_t mode, desc x, desc b, desc y, desc *pw_out) {
  desc pw = bd_make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  bd_set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  bd_set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
  DN(cudnnBackendFinalize(pw));
  desc op = bd_make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  bd_set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
  bd_set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
  if (b) bd_set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
  bd_set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
  DN(cudnnBackendFinalize(op));
  *pw_out = pw;
  return op;
}

// Graph of ops: heuristics, the first config that finalizes, execute with
// the variant pack.  false (nothing run) when no engine takes the graph.
static bool run_graph(cudnnHandle_t h, desc *ops, int nops, const int64_t *uids, void **ptrs,
                      int n) {
  desc graph = bd_make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  bd_set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  bd_set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, nops, ops);
  DN(cudnnBackendFinalize(graph));
  desc heur = bd_make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  cudnnBackendHeurMode_t hm = CUDNN_HEUR_MODE_A;
  bd_set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
  bd_set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &hm);
  int64_t count = 0, got = 0;
  desc cfg[8], plan = nullptr;
  // No engine for the graph: heuristics refuse it, or answer none.
  if (cudnnBackendFinalize(heur) == CUDNN_STATUS_SUCCESS) {
    DN(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                0, &count, nullptr));
    if (count > 8) count = 8;
    for (int64_t i = 0; i < count; i++) cfg[i] = bd_make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    if (count)
      DN(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfg));
  }
  for (int64_t i = 0; i < got && !plan; i++) {
    desc p = bd_make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    bd_set(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    bd_set(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]);
    if (cudnnBackendFinalize(p) == CUDNN_STATUS_SUCCESS) plan = p;
    else DN(cudnnBackendDestroyDescriptor(p));
  }
  if (plan) {
    int64_t ws_size = 0, n1 = 0;
    DN(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                1, &n1, &ws_size));
    void *ws = nullptr;
    if (ws_size > 0) CHECK(cudaMalloc(&ws, (size_t)ws_size));
    desc pack = bd_make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    bd_set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    bd_set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    bd_set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    DN(cudnnBackendFinalize(pack));
    DN(cudnnBackendExecute(h, plan, pack));
    if (ws) CHECK(cudaFree(ws)); // waits for the work using it
    DN(cudnnBackendDestroyDescriptor(pack));
    DN(cudnnBackendDestroyDescriptor(plan));
  }
  for (int64_t i = 0; i < count; i++) DN(cudnnBackendDestroyDescriptor(cfg[i]));
  DN(cudnnBackendDestroyDescriptor(heur));
  DN(cudnnBackendDestroyDescriptor(graph));
  return plan != nullptr;
}

struct dev {
  float *x, *w, *b, *y, *dz, *dx, *dw;
};

// The forward graph, fused when fused: y = relu(conv(x, w) + b); else
// y = conv(x, w).  Returns whether it ran.
static bool forward(cudnnHandle_t h, const dev &d, bool fused) {
  desc tx = tensor(UID_X, N, C, H, W), tw = tensor(UID_W, K, C, R, S), conv = conv_desc();
  desc ty = tensor(UID_Y, N, K, P, Q);
  bool ran;
  if (fused) {
    desc tz = tensor(UID_Z, N, K, P, Q, true), tzb = tensor(UID_ZB, N, K, P, Q, true);
    desc tb = tensor(UID_B, 1, K, 1, 1), pw1, pw2;
    desc ops[3];
    ops[0] = conv_op(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, conv,
                     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, tx,
                     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, tw,
                     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, tz,
                     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA);
    ops[1] = pointwise_op(CUDNN_POINTWISE_ADD, tz, tb, tzb, &pw1);
    ops[2] = pointwise_op(CUDNN_POINTWISE_RELU_FWD, tzb, nullptr, ty, &pw2);
    int64_t uids[4] = {UID_X, UID_W, UID_B, UID_Y};
    void *ptrs[4] = {d.x, d.w, d.b, d.y};
    ran = run_graph(h, ops, 3, uids, ptrs, 4);
    desc all[] = {ops[0], ops[1], ops[2], pw1, pw2, tz, tzb, tb};
    for (desc x : all) DN(cudnnBackendDestroyDescriptor(x));
  } else {
    desc op = conv_op(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, conv,
                      CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, tx,
                      CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, tw,
                      CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, ty,
                      CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                      CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                      CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA);
    int64_t uids[3] = {UID_X, UID_W, UID_Y};
    void *ptrs[3] = {d.x, d.w, d.y};
    ran = run_graph(h, &op, 1, uids, ptrs, 3);
    DN(cudnnBackendDestroyDescriptor(op));
  }
  desc all[] = {tx, tw, ty, conv};
  for (desc x : all) DN(cudnnBackendDestroyDescriptor(x));
  return ran;
}

// CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT of the forward convolution's
// graph (what cuDNN's frontend asks before making an engine by index).
static int64_t engine_count(cudnnHandle_t h) {
  desc tx = tensor(UID_X, N, C, H, W), tw = tensor(UID_W, K, C, R, S), conv = conv_desc();
  desc ty = tensor(UID_Y, N, K, P, Q);
  desc op = conv_op(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, conv,
                    CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, tx,
                    CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, tw,
                    CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, ty,
                    CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                    CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                    CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA);
  desc graph = bd_make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  bd_set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  bd_set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op);
  DN(cudnnBackendFinalize(graph));
  int64_t n = -1, got = 0;
  DN(cudnnBackendGetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT,
                              CUDNN_TYPE_INT64, 1, &got, &n));
  desc all[] = {graph, op, tx, tw, ty, conv};
  for (desc x : all) DN(cudnnBackendDestroyDescriptor(x));
  return got == 1 ? n : -1;
}

// dx = conv_bwd_data(dz, w) and dw = conv_bwd_filter(x, dz): two graphs.
static void backward(cudnnHandle_t h, const dev &d) {
  desc tw = tensor(UID_W, K, C, R, S), tdz = tensor(UID_DZ, N, K, P, Q);
  desc tdx = tensor(UID_DX, N, C, H, W), tx = tensor(UID_X, N, C, H, W);
  desc tdw = tensor(UID_DW, K, C, R, S), conv = conv_desc();
  desc dgrad = conv_op(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, conv,
                       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, tdz,
                       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, tw,
                       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, tdx,
                       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA);
  int64_t du[3] = {UID_DZ, UID_W, UID_DX};
  void *dp[3] = {d.dz, d.w, d.dx};
  if (!run_graph(h, &dgrad, 1, du, dp, 3)) {
    std::fprintf(stderr, "FAIL: no engine for the backward-data graph\n");
    std::exit(1);
  }
  desc wgrad = conv_op(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, conv,
                       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, tx,
                       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, tdz,
                       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, tdw,
                       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA);
  int64_t wu[3] = {UID_X, UID_DZ, UID_DW};
  void *wp[3] = {d.x, d.dz, d.dw};
  if (!run_graph(h, &wgrad, 1, wu, wp, 3)) {
    std::fprintf(stderr, "FAIL: no engine for the backward-filter graph\n");
    std::exit(1);
  }
  desc all[] = {dgrad, wgrad, tw, tdz, tdx, tx, tdw, conv};
  for (desc x : all) DN(cudnnBackendDestroyDescriptor(x));
}

static size_t xi(int n, int c, int h, int w) { return (((size_t)n * C + c) * H + h) * W + w; }
static size_t yi(int n, int k, int p, int q) { return (((size_t)n * K + k) * P + p) * Q + q; }
static size_t wi(int k, int c, int r, int s) { return (((size_t)k * C + c) * R + r) * S + s; }

// z = conv(x, w) + b in double.
static std::vector<double> ref_z(const std::vector<float> &x, const std::vector<float> &w,
                                 const std::vector<float> &b) {
  std::vector<double> z((size_t)N * K * P * Q);
  for (int n = 0; n < N; n++)
    for (int k = 0; k < K; k++)
      for (int p = 0; p < P; p++)
        for (int q = 0; q < Q; q++) {
          double acc = b[k];
          for (int c = 0; c < C; c++)
            for (int r = 0; r < R; r++)
              for (int s = 0; s < S; s++) {
                int ih = p * STRIDE - PAD + r, iw = q * STRIDE - PAD + s;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += (double)x[xi(n, c, ih, iw)] * w[wi(k, c, r, s)];
              }
          z[yi(n, k, p, q)] = acc;
        }
  return z;
}

static double loss_of(const std::vector<double> &z, const std::vector<float> &t) {
  double l = 0;
  for (size_t i = 0; i < z.size(); i++) {
    double y = z[i] > 0 ? z[i] : 0;
    l += 0.5 * (y - t[i]) * (y - t[i]);
  }
  return l;
}

static bool close(const std::vector<float> &got, const std::vector<double> &want, const char *what) {
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); i++)
    if (!(std::fabs(got[i] - want[i]) <= 1e-4 * (1 + std::fabs(want[i])))) {
      if (bad++ < 5) std::fprintf(stderr, "%s[%zu] = %g, expected %g\n", what, i, got[i], want[i]);
    }
  if (bad) std::fprintf(stderr, "FAIL: %s: %zu of %zu values wrong\n", what, bad, got.size());
  else std::printf("%s: %zu values ok\n", what, got.size());
  return bad == 0;
}

template <class T> static std::vector<float> down(const T *p, size_t n) {
  std::vector<float> v(n);
  CHECK(cudaMemcpy(v.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost));
  return v;
}

// Without a fused engine the graph computed conv only: the epilogue here.
static void bias_relu_on_host(std::vector<float> &y, const std::vector<float> &b) {
  for (size_t i = 0; i < y.size(); i++) {
    float v = y[i] + b[(i / (P * Q)) % K];
    y[i] = v > 0 ? v : 0;
  }
}

static void up(float *d, const std::vector<float> &v) {
  CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
}

int main(int argc, char **argv) {
  int work = -1;
  if (argc == 3 && !std::strcmp(argv[1], "--work")) work = std::atoi(argv[2]);
  const size_t nx = (size_t)N * C * H * W, nw = (size_t)K * C * R * S, ny = (size_t)N * K * P * Q;
  std::vector<float> hx(nx), hw(nw), hb(K), ht(ny);
  for (size_t i = 0; i < nx; i++) hx[i] = (float)((int)(i * 7 % 13) - 6) * 0.25f;
  for (size_t i = 0; i < nw; i++) hw[i] = (float)((int)(i * 5 % 9) - 4) * 0.25f;
  // An odd multiple of 1/32 added: no z is exactly 0, where relu has no
  // derivative and the finite difference would see half a slope.
  for (int k = 0; k < K; k++) hb[k] = (float)(k - 1) * 0.5f + 0.03125f;
  for (size_t i = 0; i < ny; i++) ht[i] = (float)((int)(i * 3 % 7) - 2) * 0.5f;
  dev d;
  float **bufs[] = {&d.x, &d.w, &d.b, &d.y, &d.dz, &d.dx, &d.dw};
  size_t sizes[] = {nx, nw, (size_t)K, ny, ny, nx, nw};
  for (int i = 0; i < 7; i++) CHECK(cudaMalloc(bufs[i], sizes[i] * sizeof(float)));
  up(d.x, hx);
  up(d.w, hw);
  up(d.b, hb);
  cudnnHandle_t h;
  DN(cudnnCreate(&h));
  std::printf("conv layer x %dx%dx%dx%d w %dx%dx%dx%d pad %d stride %d: y %dx%dx%dx%d\n", N, C, H,
              W, K, C, R, S, PAD, STRIDE, N, K, P, Q);

  int64_t engines = engine_count(h);
  if (engines < 1) {
    std::fprintf(stderr, "FAIL: the forward graph's engine count is %lld\n", (long long)engines);
    return 1;
  }
  std::printf("the forward graph has at least one engine\n");

  // Forward: NaN first, so every value must be written.
  CHECK(cudaMemset(d.y, 0xff, ny * sizeof(float)));
  bool fused = forward(h, d, true);
  if (!fused && !forward(h, d, false)) {
    std::fprintf(stderr, "FAIL: no engine for the forward convolution\n");
    return 1;
  }
  std::printf("forward: %s\n", fused ? "one graph, conv with bias and relu fused"
                                     : "no fused engine: conv graph, bias and relu on the host");
  std::vector<double> z = ref_z(hx, hw, hb);
  std::vector<float> y = down(d.y, ny);
  if (!fused) bias_relu_on_host(y, hb);
  std::vector<double> yref(ny);
  for (size_t i = 0; i < ny; i++) yref[i] = z[i] > 0 ? z[i] : 0;
  if (!close(y, yref, "y")) return 1;
  double loss0 = loss_of(z, ht);
  std::printf("loss %.4f\n", loss0);

  // dz = (y - t) relu'(z), from the reference (exact: multiples of 1/32).
  std::vector<float> hdz(ny);
  std::vector<double> db(K, 0.0);
  for (size_t i = 0; i < ny; i++) {
    hdz[i] = z[i] > 0 ? (float)(yref[i] - ht[i]) : 0.0f;
    db[(i / (P * Q)) % K] += hdz[i];
  }
  up(d.dz, hdz);
  CHECK(cudaMemset(d.dx, 0xff, nx * sizeof(float)));
  CHECK(cudaMemset(d.dw, 0xff, nw * sizeof(float)));
  backward(h, d);
  std::vector<double> dxref(nx, 0.0), dwref(nw, 0.0);
  for (int n = 0; n < N; n++)
    for (int k = 0; k < K; k++)
      for (int p = 0; p < P; p++)
        for (int q = 0; q < Q; q++)
          for (int c = 0; c < C; c++)
            for (int r = 0; r < R; r++)
              for (int s = 0; s < S; s++) {
                int ih = p * STRIDE - PAD + r, iw = q * STRIDE - PAD + s;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                double g = hdz[yi(n, k, p, q)];
                dxref[xi(n, c, ih, iw)] += g * hw[wi(k, c, r, s)];
                dwref[wi(k, c, r, s)] += g * hx[xi(n, c, ih, iw)];
              }
  std::vector<float> dx = down(d.dx, nx), dw = down(d.dw, nw);
  if (!close(dx, dxref, "dx") || !close(dw, dwref, "dw")) return 1;

  // dL/dw by central differences at a few weights (the loss is piecewise
  // quadratic: a small step stays on one piece).
  int checked = 0;
  for (size_t i = 0; i < nw; i += 17) {
    const double e = 1e-3;
    std::vector<float> wp = hw, wm = hw;
    wp[i] += (float)e;
    wm[i] -= (float)e;
    double fd = (loss_of(ref_z(hx, wp, hb), ht) - loss_of(ref_z(hx, wm, hb), ht)) /
                ((double)wp[i] - wm[i]);
    if (std::fabs(fd - dw[i]) > 1e-2 * (1 + std::fabs(fd))) {
      std::fprintf(stderr, "FAIL: dL/dw[%zu]: finite difference %g, dw %g\n", i, fd, dw[i]);
      return 1;
    }
    checked++;
  }
  std::printf("dw agrees with finite differences at %d weights\n", checked);

  // One SGD step, then the forward again: the loss drops.
  const float lr = 0.01f;
  for (size_t i = 0; i < nw; i++) hw[i] -= lr * dw[i];
  for (int k = 0; k < K; k++) hb[k] -= lr * (float)db[k];
  up(d.w, hw);
  up(d.b, hb);
  if (!forward(h, d, fused)) {
    std::fprintf(stderr, "FAIL: the second forward found no engine\n");
    return 1;
  }
  std::vector<double> z1 = ref_z(hx, hw, hb);
  std::vector<float> y1 = down(d.y, ny);
  if (!fused) bias_relu_on_host(y1, hb);
  double loss1 = 0;
  for (size_t i = 0; i < ny; i++) loss1 += 0.5 * ((double)y1[i] - ht[i]) * ((double)y1[i] - ht[i]);
  if (!(std::fabs(loss1 - loss_of(z1, ht)) <= 1e-3 * (1 + loss1)) || !(loss1 < loss0)) {
    std::fprintf(stderr, "FAIL: loss after the step %.6f (reference %.6f, before %.6f)\n", loss1,
                 loss_of(z1, ht), loss0);
    return 1;
  }
  std::printf("after one SGD step the loss dropped\n");

  if (work >= 0) {
    // One queued operation first, so that both runs' closing
    // synchronization has work to wait for.
    CHECK(cudaMemsetAsync(d.y, 0, ny * sizeof(float), 0));
    for (int i = 0; i < work; i++) {
      forward(h, d, fused);
      backward(h, d);
    }
    CHECK(cudaDeviceSynchronize());
    std::vector<float> dw2 = down(d.dw, nw);
    if (work > 0 && !close(dw2, dwref, "dw after the rounds")) return 1;
    std::printf("PASS cudnn_backend_train_work %d\n", work);
  }
  DN(cudnnDestroy(h));
  for (int i = 0; i < 7; i++) CHECK(cudaFree(*bufs[i]));
  std::printf("PASS cudnn_backend_train\n");
  return 0;
}
