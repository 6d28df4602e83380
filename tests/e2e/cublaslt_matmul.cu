// rgpu-nvcc-flags: -lcublasLt
// cublasLtMatmul through rgpu's libcublasLt.so.13 facade (issue 16): the
// epilogues DEFAULT, RELU, BIAS, RELU_BIAS, GELU and GELU_BIAS, column- and
// row-major layouts, transposes, a strided batch, float, double, half and
// bfloat16 inputs (half/bfloat16 with float computation), C apart from D,
// device-side scalars, and a heuristic query whose algorithm then runs.
// Small integer data make the products exact in every type; each result is
// compared with a host reference (GELU within a tolerance: implementations
// may approximate it differently), natively and through rgpu alike.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <vector>

#include "rgpu_check.h"

#define CB(call)                                                                  \
  do {                                                                            \
    cublasStatus_t st_ = (call);                                                  \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                           \
      std::fprintf(stderr, "FAIL %s:%d: %s -> %d\n", __FILE__, __LINE__, #call, (int)st_); \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

static size_t type_size(cudaDataType t) { return t == CUDA_R_64F ? 8 : t == CUDA_R_32F ? 4 : 2; }

// Stores v (rounded to type t) at element i of buf; returns the rounded value.
static double put(cudaDataType t, std::vector<unsigned char> &buf, size_t i, double v) {
  if (t == CUDA_R_16F) {
    __half h = __float2half((float)v);
    std::memcpy(&buf[i * 2], &h, 2);
    return __half2float(h);
  }
  if (t == CUDA_R_16BF) {
    __nv_bfloat16 b = __float2bfloat16((float)v);
    std::memcpy(&buf[i * 2], &b, 2);
    return __bfloat162float(b);
  }
  if (t == CUDA_R_32F) {
    float f = (float)v;
    std::memcpy(&buf[i * 4], &f, 4);
    return f;
  }
  std::memcpy(&buf[i * 8], &v, 8);
  return v;
}

static double get(cudaDataType t, const std::vector<unsigned char> &buf, size_t i) {
  if (t == CUDA_R_16F) {
    __half h;
    std::memcpy(&h, &buf[i * 2], 2);
    return __half2float(h);
  }
  if (t == CUDA_R_16BF) {
    __nv_bfloat16 b;
    std::memcpy(&b, &buf[i * 2], 2);
    return __bfloat162float(b);
  }
  if (t == CUDA_R_32F) {
    float f;
    std::memcpy(&f, &buf[i * 4], 4);
    return f;
  }
  double d;
  std::memcpy(&d, &buf[i * 8], 8);
  return d;
}

// Host and device copies of a batch of rows x cols matrices in one order.
struct Mat {
  cudaDataType type;
  cublasLtOrder_t order;
  int rows, cols, batch;
  int64_t ld, stride;
  std::vector<unsigned char> host;
  void *dev = nullptr;
  cublasLtMatrixLayout_t layout = nullptr;

  Mat(cudaDataType t, cublasLtOrder_t o, int r, int c, int b) : type(t), order(o), rows(r), cols(c), batch(b) {
    ld = (o == CUBLASLT_ORDER_COL ? r : c) + 3;  // padded leading dimension
    stride = ld * (o == CUBLASLT_ORDER_COL ? c : r) + 5;
    host.assign((size_t)(stride * b) * type_size(t), 0);
  }
  size_t at(int b, int r, int c) const {
    return (size_t)(b * stride + (order == CUBLASLT_ORDER_COL ? (int64_t)c * ld + r : (int64_t)r * ld + c));
  }
  void upload() {
    CHECK(cudaMalloc(&dev, host.size()));
    CHECK(cudaMemcpy(dev, host.data(), host.size(), cudaMemcpyHostToDevice));
    CB(cublasLtMatrixLayoutCreate(&layout, type, rows, cols, ld));
    int32_t ord = order;
    CB(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_ORDER, &ord, sizeof ord));
    if (batch > 1) {
      int32_t bc = batch;
      CB(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc));
      CB(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                          &stride, sizeof stride));
    }
  }
  void release() {
    CB(cublasLtMatrixLayoutDestroy(layout));
    CHECK(cudaFree(dev));
  }
};

static uint32_t g_seed = 12345;
static int small_int() {  // -2..2
  g_seed = g_seed * 1103515245u + 12345u;
  return (int)((g_seed >> 16) % 5) - 2;
}

static double gelu(double x) { return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

struct Case {
  const char *name;
  cudaDataType ab, cd;  // A/B type, C/D type
  cublasComputeType_t compute;
  cudaDataType scale;
  cublasOperation_t ta, tb;
  cublasLtOrder_t order;
  int m, n, k, batch;
  cublasLtEpilogue_t epilogue;
  double alpha, beta;
  bool device_scalars, heuristic;
};

static bool has_bias(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS;
}

static void run(cublasLtHandle_t lt, const Case &cs) {
  bool na = cs.ta == CUBLAS_OP_N, nb = cs.tb == CUBLAS_OP_N;
  Mat A(cs.ab, cs.order, na ? cs.m : cs.k, na ? cs.k : cs.m, cs.batch);
  Mat B(cs.ab, cs.order, nb ? cs.k : cs.n, nb ? cs.n : cs.k, cs.batch);
  Mat C(cs.cd, cs.order, cs.m, cs.n, cs.batch);
  Mat D(cs.cd, cs.order, cs.m, cs.n, cs.batch);
  for (size_t e = 0; e < D.host.size() / type_size(cs.cd); e++) put(cs.cd, D.host, e, 99);
  for (int b = 0; b < cs.batch; b++) {
    for (int r = 0; r < A.rows; r++)
      for (int c = 0; c < A.cols; c++) put(cs.ab, A.host, A.at(b, r, c), small_int());
    for (int r = 0; r < B.rows; r++)
      for (int c = 0; c < B.cols; c++) put(cs.ab, B.host, B.at(b, r, c), small_int());
    for (int r = 0; r < cs.m; r++)
      for (int c = 0; c < cs.n; c++) {
        put(cs.cd, C.host, C.at(b, r, c), small_int());
      }
  }
  std::vector<unsigned char> bias((size_t)cs.m * type_size(cs.cd));
  for (int i = 0; i < cs.m; i++) put(cs.cd, bias, i, small_int());
  A.upload();
  B.upload();
  C.upload();
  D.upload();
  void *dbias;
  CHECK(cudaMalloc(&dbias, bias.size()));
  CHECK(cudaMemcpy(dbias, bias.data(), bias.size(), cudaMemcpyHostToDevice));

  cublasLtMatmulDesc_t op;
  CB(cublasLtMatmulDescCreate(&op, cs.compute, cs.scale));
  int32_t ta = cs.ta, tb = cs.tb;
  uint32_t ep = cs.epilogue;
  CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
  if (has_bias(cs.epilogue))
    CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias));

  // Scalars in the scale type, on the host or on the device.
  std::vector<unsigned char> scal(2 * type_size(cs.scale));
  put(cs.scale, scal, 0, cs.alpha);
  put(cs.scale, scal, 1, cs.beta);
  const void *alpha = scal.data(), *beta = scal.data() + type_size(cs.scale);
  void *dscal = nullptr;
  if (cs.device_scalars) {
    int32_t pm = CUBLASLT_POINTER_MODE_DEVICE;
    CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof pm));
    CHECK(cudaMalloc(&dscal, scal.size()));
    CHECK(cudaMemcpy(dscal, scal.data(), scal.size(), cudaMemcpyHostToDevice));
    alpha = dscal;
    beta = (const char *)dscal + type_size(cs.scale);
  }

  cublasLtMatmulHeuristicResult_t res;
  const cublasLtMatmulAlgo_t *algo = nullptr;
  if (cs.heuristic) {
    cublasLtMatmulPreference_t pref;
    CB(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = 0;
    CB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    int got = 0;
    CB(cublasLtMatmulAlgoGetHeuristic(lt, op, A.layout, B.layout, C.layout, D.layout, pref, 1, &res, &got));
    EXPECT(got == 1);
    EXPECT(res.state == CUBLAS_STATUS_SUCCESS);
    EXPECT(res.workspaceSize == 0);
    // The same query again answers the same algorithm.
    cublasLtMatmulHeuristicResult_t again;
    CB(cublasLtMatmulAlgoGetHeuristic(lt, op, A.layout, B.layout, C.layout, D.layout, pref, 1, &again, &got));
    EXPECT(got == 1 && std::memcmp(&again.algo, &res.algo, sizeof res.algo) == 0);
    CB(cublasLtMatmulPreferenceDestroy(pref));
    algo = &res.algo;
    std::printf("%s: heuristic found an algorithm without workspace\n", cs.name);
  }

  CB(cublasLtMatmul(lt, op, alpha, A.dev, A.layout, B.dev, B.layout, beta, C.dev, C.layout, D.dev,
                    D.layout, algo, nullptr, 0, 0));
  CHECK(cudaDeviceSynchronize());
  std::vector<unsigned char> out(D.host.size());
  CHECK(cudaMemcpy(out.data(), D.dev, out.size(), cudaMemcpyDeviceToHost));

  bool gelu_ep = cs.epilogue == CUBLASLT_EPILOGUE_GELU || cs.epilogue == CUBLASLT_EPILOGUE_GELU_BIAS;
  bool relu_ep = cs.epilogue == CUBLASLT_EPILOGUE_RELU || cs.epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
  double tol = cs.cd == CUDA_R_16F || cs.cd == CUDA_R_16BF ? 1e-2 : gelu_ep ? 5e-3 : 1e-6;
  int bad = 0;
  for (int b = 0; b < cs.batch; b++)
    for (int i = 0; i < cs.m; i++)
      for (int j = 0; j < cs.n; j++) {
        double acc = 0;
        for (int p = 0; p < cs.k; p++) {
          double a = na ? get(cs.ab, A.host, A.at(b, i, p)) : get(cs.ab, A.host, A.at(b, p, i));
          double bv = nb ? get(cs.ab, B.host, B.at(b, p, j)) : get(cs.ab, B.host, B.at(b, j, p));
          acc += a * bv;
        }
        double x = cs.alpha * acc + cs.beta * get(cs.cd, C.host, C.at(b, i, j));
        if (has_bias(cs.epilogue)) x += get(cs.cd, bias, i);
        if (relu_ep) x = x > 0 ? x : 0;
        if (gelu_ep) x = gelu(x);
        double got = get(cs.cd, out, D.at(b, i, j));
        if (std::fabs(got - x) > tol * (std::fabs(x) > 1 ? std::fabs(x) : 1)) {
          if (bad++ < 3)
            std::fprintf(stderr, "FAIL %s: D[%d](%d,%d) = %g, expected %g\n", cs.name, b, i, j, got, x);
        }
      }
  // D's padding (beyond its rows and columns) is never written.
  for (size_t e = 0; e < out.size() / type_size(cs.cd); e++) {
    bool inside = false;
    for (int b = 0; b < cs.batch && !inside; b++) {
      int64_t off = (int64_t)e - b * D.stride;
      if (off < 0) break;
      int64_t outer = off / D.ld, inner = off % D.ld;
      int64_t r = cs.order == CUBLASLT_ORDER_COL ? inner : outer, c = cs.order == CUBLASLT_ORDER_COL ? outer : inner;
      inside = r < cs.m && c < cs.n;
    }
    if (!inside && get(cs.cd, out, e) != 99 && bad++ < 3)
      std::fprintf(stderr, "FAIL %s: D's padding element %zu was written\n", cs.name, e);
  }
  if (bad) {
    std::printf("%s: %d wrong\n", cs.name, bad);
    std::exit(1);
  }
  std::printf("%s ok\n", cs.name);

  CB(cublasLtMatmulDescDestroy(op));
  A.release();
  B.release();
  C.release();
  D.release();
  CHECK(cudaFree(dbias));
  if (dscal) CHECK(cudaFree(dscal));
}

int main() {
  cublasLtHandle_t lt;
  CB(cublasLtCreate(&lt));
  const cublasOperation_t N = CUBLAS_OP_N, T = CUBLAS_OP_T;
  const cublasLtOrder_t COL = CUBLASLT_ORDER_COL, ROW = CUBLASLT_ORDER_ROW;
  const Case cases[] = {
      {"32F col NN 17x13x9 default", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F, N, N, COL, 17, 13, 9, 1,
       CUBLASLT_EPILOGUE_DEFAULT, 1, 0, false, true},
      {"32F col TN 16x12x8 alpha 2 beta 1", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F, T, N, COL, 16, 12, 8,
       1, CUBLASLT_EPILOGUE_DEFAULT, 2, 1, false, false},
      {"32F col NT 16x8x8 relu", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F, N, T, COL, 16, 8, 8, 1,
       CUBLASLT_EPILOGUE_RELU, 1, 1, false, false},
      {"32F col NN 24x8x8 bias", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F, N, N, COL, 24, 8, 8, 1,
       CUBLASLT_EPILOGUE_BIAS, 1, 0, false, false},
      {"32F col TT 16x16x8 relu_bias", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F, T, T, COL, 16, 16, 8, 1,
       CUBLASLT_EPILOGUE_RELU_BIAS, 1, 1, false, false},
      {"32F col NN 16x8x4 gelu", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F, N, N, COL, 16, 8, 4, 1,
       CUBLASLT_EPILOGUE_GELU, 0.25, 0, false, false},
      {"32F col NN 16x8x4 gelu_bias", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F, N, N, COL, 16, 8, 4, 1,
       CUBLASLT_EPILOGUE_GELU_BIAS, 0.25, 0, false, false},
      {"32F row TN 13x11x7 default", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F, T, N, ROW, 13, 11, 7, 1,
       CUBLASLT_EPILOGUE_DEFAULT, 1, 1, false, false},
      {"32F col NT 9x7x5 batch 3 device scalars", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F, N, T, COL, 9,
       7, 5, 3, CUBLASLT_EPILOGUE_DEFAULT, 2, 1, true, false},
      {"64F col NN 11x9x7 default", CUDA_R_64F, CUDA_R_64F, CUBLAS_COMPUTE_64F, CUDA_R_64F, N, N, COL, 11, 9, 7, 1,
       CUBLASLT_EPILOGUE_DEFAULT, 1, 1, false, false},
      {"16F col TN 16x16x16 bias", CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F, T, N, COL, 16, 16, 16, 1,
       CUBLASLT_EPILOGUE_BIAS, 1, 0, false, true},
      {"16F col NN 16x8x8 batch 2 relu", CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F, N, N, COL, 16, 8, 8, 2,
       CUBLASLT_EPILOGUE_RELU, 1, 1, false, false},
      {"16BF/32F col NT 16x16x8 default", CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F, N, T, COL, 16, 16, 8,
       1, CUBLASLT_EPILOGUE_DEFAULT, 1, 1, false, false},
      {"16BF col NN 16x16x8 relu_bias", CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F, N, N, COL, 16, 16, 8,
       1, CUBLASLT_EPILOGUE_RELU_BIAS, 1, 0, false, false},
  };
  for (const Case &cs : cases) run(lt, cs);
  CB(cublasLtDestroy(lt));
  pass("cublaslt_matmul");
  return 0;
}
