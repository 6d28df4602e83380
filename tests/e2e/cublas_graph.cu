// rgpu-nvcc-flags: -lcublas
// cuBLAS calls captured into a CUDA graph: on a non-default stream set with
// cublasSetStream, cudaStreamBeginCapture records a cublasSgemm with host
// scalars (their values are taken at capture: changing the host variables
// afterwards changes nothing), a cublasSgemm with device scalars (read at
// each launch) and a cublasSaxpy; the graph is instantiated once and
// launched 3 times, new inputs copied in between launches, and every launch's
// results are checked against a host reference.
#include <cmath>
#include <vector>

#include "rgpu_cublas_check.h"

static double val(int which, long i) { return ((i * 19 + which * 5) % 37) / 18.5 - 1.0; }

static void check_close(const char *what, int launch, const std::vector<float> &got,
                        const std::vector<double> &ref) {
  double worst = 0;
  for (size_t i = 0; i < ref.size(); i++) worst = std::fmax(worst, rel_err(got[i], ref[i]));
  if (worst > 1e-4) {
    std::fprintf(stderr, "FAIL %s launch %d: relative error %g\n", what, launch, worst);
    std::exit(1);
  }
}

int main() {
  const int m = 24, n = 20, k = 16, len = 1000;
  cublasHandle_t h;
  CB(cublasCreate(&h));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CB(cublasSetStream(h, s));
  // A workspace of the program's own: what cuBLAS's documentation asks for
  // graph capture (no allocation inside the captured region).
  void *ws;
  CHECK(cudaMalloc(&ws, 4 << 20));
  CB(cublasSetWorkspace(h, ws, 4 << 20));

  float *dA, *dB, *dC1, *dC2, *dx, *dy, *dalpha;
  CHECK(cudaMalloc(&dA, sizeof(float) * m * k));
  CHECK(cudaMalloc(&dB, sizeof(float) * k * n));
  CHECK(cudaMalloc(&dC1, sizeof(float) * m * n));
  CHECK(cudaMalloc(&dC2, sizeof(float) * m * n));
  CHECK(cudaMalloc(&dx, sizeof(float) * len));
  CHECK(cudaMalloc(&dy, sizeof(float) * len));
  CHECK(cudaMalloc(&dalpha, 2 * sizeof(float)));
  std::vector<float> y(len);
  for (int i = 0; i < len; i++) y[i] = (float)val(9, i);
  CHECK(cudaMemcpy(dy, y.data(), sizeof(float) * len, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dC1, 0, sizeof(float) * m * n));
  CHECK(cudaMemset(dC2, 0, sizeof(float) * m * n));

  // Capture: C1 = 1.5 A B (host scalars), C2 = dalpha[0] A B + dalpha[1] C2
  // (device scalars), y = -0.5 x + y.
  float alpha = 1.5f, beta = 0.0f, axpy_alpha = -0.5f;
  cudaGraph_t graph;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  CB(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, dA, m, dB, k, &beta, dC1, m));
  CB(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
  CB(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, dalpha, dA, m, dB, k, dalpha + 1, dC2, m));
  CB(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
  CB(cublasSaxpy(h, len, &axpy_alpha, dx, 1, dy, 1));
  CHECK(cudaStreamEndCapture(s, &graph));
  alpha = 100.0f;  // captured already: the graph keeps 1.5, 0 and -0.5
  beta = 100.0f;
  axpy_alpha = 100.0f;
  cudaStreamCaptureStatus cs;
  CHECK(cudaStreamIsCapturing(s, &cs));
  EXPECT(cs == cudaStreamCaptureStatusNone);
  size_t nodes = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  EXPECT(nodes > 0);
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  std::printf("captured sgemm (host scalars), sgemm (device scalars), saxpy into a graph ok\n");

  std::vector<double> c2ref((size_t)m * n, 0.0);
  for (int launch = 0; launch < 3; launch++) {
    // New inputs for this launch, copied on the stream before it.
    std::vector<float> a((size_t)m * k), b((size_t)k * n), x(len);
    for (size_t i = 0; i < a.size(); i++) a[i] = (float)val(1 + launch, (long)i);
    for (size_t i = 0; i < b.size(); i++) b[i] = (float)val(4 + launch, (long)i);
    for (int i = 0; i < len; i++) x[i] = (float)val(7 + launch, i);
    float dsc[2] = {0.25f * (float)(launch + 1), launch == 0 ? 0.0f : -1.0f};
    CHECK(cudaMemcpyAsync(dA, a.data(), sizeof(float) * a.size(), cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyAsync(dB, b.data(), sizeof(float) * b.size(), cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyAsync(dx, x.data(), sizeof(float) * len, cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyAsync(dalpha, dsc, sizeof dsc, cudaMemcpyHostToDevice, s));
    CHECK(cudaGraphLaunch(exec, s));
    std::vector<float> c1((size_t)m * n), c2((size_t)m * n), ny(len);
    CHECK(cudaMemcpyAsync(c1.data(), dC1, sizeof(float) * c1.size(), cudaMemcpyDeviceToHost, s));
    CHECK(cudaMemcpyAsync(c2.data(), dC2, sizeof(float) * c2.size(), cudaMemcpyDeviceToHost, s));
    CHECK(cudaMemcpyAsync(ny.data(), dy, sizeof(float) * len, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));

    std::vector<double> c1ref((size_t)m * n), yref(len);
    for (int j = 0; j < n; j++)
      for (int i = 0; i < m; i++) {
        double acc = 0;
        for (int q = 0; q < k; q++) acc += (double)a[(size_t)q * m + i] * (double)b[(size_t)j * k + q];
        size_t at = (size_t)j * m + i;
        c1ref[at] = 1.5 * acc;
        c2ref[at] = (double)dsc[0] * acc + (double)dsc[1] * c2ref[at];
      }
    for (int i = 0; i < len; i++) yref[i] = -0.5 * (double)x[i] + (double)y[i];
    check_close("sgemm host scalars", launch, c1, c1ref);
    check_close("sgemm device scalars", launch, c2, c2ref);
    check_close("saxpy", launch, ny, yref);
    y = ny;  // the next launch accumulates onto this y
    std::printf("graph launch %d: sgemm %dx%dx%d host scalars, sgemm device scalars %.4g %.4g, "
                "saxpy n %d ok\n",
                launch, m, n, k, (double)dsc[0], (double)dsc[1], len);
  }
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  for (float *d : {dA, dB, dC1, dC2, dx, dy, dalpha}) CHECK(cudaFree(d));
  CB(cublasDestroy(h));
  CHECK(cudaFree(ws));
  CHECK(cudaStreamDestroy(s));
  pass("cublas_graph");
  return 0;
}
