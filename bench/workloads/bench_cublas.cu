// rgpu-nvcc-flags: -lcublas
// Dense N x N matrix products through cuBLAS: SGEMM and DGEMM (cublasSgemm,
// cublasDgemm), HGEMM (cublasGemmEx, A/B/C CUDA_R_16F, compute 32F) and BF16
// (cublasGemmEx, A/B/C CUDA_R_16BF, compute 32F), in two modes:
//
//   oneoff    A and B copied to the device, one gemm, C copied back, timed
//             end to end: what an application that offloads one product pays
//             (one sync point: the D2H copy);
//   resident  A, B and C stay on the device; K gemms back to back and one
//             synchronization: the steady state of a program that keeps its
//             data on the GPU (the unit is one gemm: K gemms share one sync).
//
// Every point is checked on a sample of entries of C against a double host
// product.  One RESULT line per (type, mode, N) (bench_util.h), plus a
// human-readable line.  A cuBLAS call that answers CUBLAS_STATUS_NOT_SUPPORTED
// makes the run "unsupported" (exit 3), as a missing CUDA feature does.
#include <cmath>
#include <cstdint>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <string>
#include <vector>

#include "bench_util.h"

static void cublas_fail(const char *file, int line, const char *what, cublasStatus_t st) {
  std::fprintf(stderr, "FAIL %s %s:%d: %s -> %d %s\n", bench_name, file, line, what, (int)st,
               cublasGetStatusName(st));
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) {
    std::printf("RESULT workload=%s status=unsupported call=%d\n", bench_name, line);
    std::fflush(stdout);
    std::exit(BENCH_EXIT_UNSUPPORTED);
  }
  std::exit(1);
}
#define CBK(call)                                                           \
  do {                                                                      \
    cublasStatus_t st_ = (call);                                            \
    if (st_ != CUBLAS_STATUS_SUCCESS) cublas_fail(__FILE__, __LINE__, #call, st_); \
  } while (0)

// One element type: how it is stored and how it is multiplied.
struct GemmType {
  const char *name;     // as --types names it and the variant starts
  cudaDataType data;    // A, B and C
  size_t elem;          // bytes per element
  double tol;           // |C - ref| <= tol * sum |a b| (+ a tiny absolute term)
};
static const GemmType kTypes[] = {
    {"sgemm", CUDA_R_32F, 4, 1e-5},
    {"dgemm", CUDA_R_64F, 8, 1e-12},
    // C rounded to 11 (fp16) or 8 (bf16) significant bits.
    {"hgemm", CUDA_R_16F, 2, 2e-3},
    {"bf16gemm", CUDA_R_16BF, 2, 1e-2},
};

static double load(const GemmType &t, const void *p, size_t i) {
  switch (t.data) {
    case CUDA_R_32F: return ((const float *)p)[i];
    case CUDA_R_64F: return ((const double *)p)[i];
    case CUDA_R_16F: return (double)__half2float(((const __half *)p)[i]);
    default: return (double)__bfloat162float(((const __nv_bfloat16 *)p)[i]);
  }
}
static void store(const GemmType &t, void *p, size_t i, double v) {
  switch (t.data) {
    case CUDA_R_32F: ((float *)p)[i] = (float)v; break;
    case CUDA_R_64F: ((double *)p)[i] = v; break;
    case CUDA_R_16F: ((__half *)p)[i] = __float2half((float)v); break;
    default: ((__nv_bfloat16 *)p)[i] = __float2bfloat16((float)v); break;
  }
}

// C = A B (column-major, no transposes, alpha 1, beta 0).
static void gemm(cublasHandle_t h, const GemmType &t, int n, const void *A, const void *B,
                 void *C) {
  if (t.data == CUDA_R_32F) {
    const float one = 1, zero = 0;
    CBK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, (const float *)A, n,
                    (const float *)B, n, &zero, (float *)C, n));
  } else if (t.data == CUDA_R_64F) {
    const double one = 1, zero = 0;
    CBK(cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, (const double *)A, n,
                    (const double *)B, n, &zero, (double *)C, n));
  } else {
    const float one = 1, zero = 0;  // compute 32F: float scalars
    CBK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, t.data, n, B, t.data, n, &zero,
                     C, t.data, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

// Sampled entries of C (host copy) against a double product of the host A, B.
static void verify(const GemmType &t, int n, const void *A, const void *B, const void *C,
                   int samples, const char *mode) {
  unsigned cs = 99;
  for (int s = 0; s < samples; s++) {
    int i = (int)(bench_lcg(cs) % (unsigned)n), j = (int)(bench_lcg(cs) % (unsigned)n);
    if (s == 0) i = j = 0;
    if (s == 1) i = j = n - 1;
    double ref = 0, mag = 0;
    for (int k = 0; k < n; k++) {
      double p = load(t, A, (size_t)k * n + i) * load(t, B, (size_t)j * n + k);
      ref += p;
      mag += std::fabs(p);
    }
    double got = load(t, C, (size_t)j * n + i);
    VERIFY(std::fabs(got - ref) <= t.tol * mag + 1e-6, "%s %s n=%d: C[%d][%d] = %.6f, expected %.6f",
           t.name, mode, n, i, j, got, ref);
  }
}

// Gemms per resident measurement when --iters is 0: about 5e11 flops, at
// least 2 and at most 200 gemms.
/* Gemms per resident measurement: enough for about 0.25 s of GPU work.
 * Calibrated by doubling a batch of gemms between two synchronizations
 * until the batch takes 50 ms, so that a slow link's round trip (tens of
 * ms under netem) is not taken for gemm time; a flop budget left an H200's
 * fp16 gemm at 2-3 gemms, where one synchronization's latency is a tenth
 * of the measurement. */
static int auto_iters(double per_gemm_s) {
  double k = 0.25 / (per_gemm_s > 1e-8 ? per_gemm_s : 1e-8);
  return k < 2 ? 2 : k > 20000 ? 20000 : (int)k;
}

struct Options {
  std::vector<int> ns;
  std::vector<const GemmType *> types;
  bool oneoff = true, resident = true, pinned = false;
  int reps = 3, iters = 0, samples = 32;
};

static void run_type(cublasHandle_t h, const GemmType &t, int n, const Options &o) {
  size_t elems = (size_t)n * n, bytes = elems * t.elem;
  void *ha, *hb, *hc;
  if (o.pinned) {
    CK_SYNC(cudaMallocHost(&ha, bytes));
    CK_SYNC(cudaMallocHost(&hb, bytes));
    CK_SYNC(cudaMallocHost(&hc, bytes));
  } else {
    ha = std::malloc(bytes), hb = std::malloc(bytes), hc = std::malloc(bytes);
    VERIFY(ha && hb && hc, "out of host memory for %s n=%d", t.name, n);
  }
  // Multiples of 1/8 in [-1, 1]: exact in every type, so A and B are the
  // same numbers whatever the type and only the products' rounding differs.
  unsigned seed = 42;
  for (size_t i = 0; i < elems; i++) store(t, ha, i, (double)((int)(bench_lcg(seed) % 17) - 8) / 8);
  for (size_t i = 0; i < elems; i++) store(t, hb, i, (double)((int)(bench_lcg(seed) % 17) - 8) / 8);
  void *da, *db, *dc;
  CK_SYNC(cudaMalloc(&da, bytes));
  CK_SYNC(cudaMalloc(&db, bytes));
  CK_SYNC(cudaMalloc(&dc, bytes));
  double flops = 2.0 * n * (double)n * n;

  // Warm-up: the first gemm of a shape loads cuBLAS's kernels (and, through
  // rgpu, the server's library): outside every timed region.
  CK(cudaMemcpy(da, ha, bytes, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(db, hb, bytes, cudaMemcpyHostToDevice));
  gemm(h, t, n, da, db, dc);
  CK_SYNC(cudaDeviceSynchronize());

  if (o.oneoff) {
    double best = 1e30, total = 0;
    for (int r = 0; r < o.reps; r++) {
      std::memset(hc, 0, bytes);
      CK(cudaMemset(dc, 0, bytes));
      CK_SYNC(cudaDeviceSynchronize());
      double t0 = bench_now();
      CK(cudaMemcpy(da, ha, bytes, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(db, hb, bytes, cudaMemcpyHostToDevice));
      gemm(h, t, n, da, db, dc);
      CK_SYNC(cudaMemcpy(hc, dc, bytes, cudaMemcpyDeviceToHost));
      double el = bench_now() - t0;
      total += el;
      if (el < best) best = el;
    }
    verify(t, n, ha, hb, hc, o.samples, "oneoff");
    double mean = total / o.reps;
    std::printf("%-8s oneoff   n=%-5d %10.1f GFLOP/s  %10.4f ms per copy-in, gemm, copy-out\n",
                t.name, n, flops / mean / 1e9, mean * 1e3);
    bench_result("variant=%s_oneoff_n%d type=%s timing=oneoff n=%d reps=%d time_s=%.9f best_s=%.9f "
                 "bytes=%zu bytes_h2d=%zu bytes_d2h=%zu syncs=1 gflops=%.3f best_gflops=%.3f",
                 t.name, n, t.name, n, o.reps, mean, best, 3 * bytes, 2 * bytes, bytes,
                 flops / mean / 1e9, flops / best / 1e9);
  }
  if (o.resident) {
    int k = o.iters;
    if (!k) {
      /* Calibration (also the warm-up): batches of 1, 2, 4, ... gemms. */
      double el = 0;
      int batch = 1;
      for (;; batch *= 2) {
        CK_SYNC(cudaDeviceSynchronize());
        double c0 = bench_now();
        for (int q = 0; q < batch; q++) gemm(h, t, n, da, db, dc);
        CK_SYNC(cudaDeviceSynchronize());
        el = bench_now() - c0;
        if (el >= 0.05 || batch >= 16384) break;
      }
      k = auto_iters(el / batch);
    }
    double best = 1e30, total = 0;
    for (int r = 0; r < o.reps; r++) {
      CK_SYNC(cudaDeviceSynchronize());
      double t0 = bench_now();
      for (int q = 0; q < k; q++) gemm(h, t, n, da, db, dc);
      CK_SYNC(cudaDeviceSynchronize());
      double el = (bench_now() - t0) / k;  // per gemm
      total += el;
      if (el < best) best = el;
    }
    CK_SYNC(cudaMemcpy(hc, dc, bytes, cudaMemcpyDeviceToHost));
    verify(t, n, ha, hb, hc, o.samples, "resident");
    double mean = total / o.reps;
    std::printf("%-8s resident n=%-5d %10.1f GFLOP/s  %10.4f ms per gemm (%d back to back)\n",
                t.name, n, flops / mean / 1e9, mean * 1e3, k);
    bench_result("variant=%s_resident_n%d type=%s timing=resident n=%d reps=%d iters=%d time_s=%.9f "
                 "best_s=%.9f bytes=0 bytes_h2d=0 bytes_d2h=0 syncs=%.6f gflops=%.3f "
                 "best_gflops=%.3f",
                 t.name, n, t.name, n, o.reps, k, mean, best, 1.0 / k, flops / mean / 1e9,
                 flops / best / 1e9);
  }
  CK(cudaFree(da));
  CK(cudaFree(db));
  CK(cudaFree(dc));
  if (o.pinned) {
    CK(cudaFreeHost(ha));
    CK(cudaFreeHost(hb));
    CK(cudaFreeHost(hc));
  } else {
    std::free(ha), std::free(hb), std::free(hc);
  }
}

// "a,b,c" -> items.
static std::vector<std::string> split(const char *s) {
  std::vector<std::string> out;
  std::string cur;
  for (const char *p = s;; p++) {
    if (*p == ',' || !*p) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
      if (!*p) break;
    } else {
      cur += *p;
    }
  }
  return out;
}

int main(int argc, char **argv) {
  bench_name = "cublas";
  const char *usage =
      "[--n 256,512,...] [--max-n N] [--types sgemm,dgemm,hgemm,bf16gemm] "
      "[--modes oneoff,resident] [--reps R] [--iters K] [--mem pageable|pinned] [--check SAMPLES]";
  bench_args a = bench_args_init(argc, argv);
  const char *ns = bench_arg_str(a, "--n", "256,512,1024,2048,4096,8192");
  long long max_n = bench_arg_num(a, "--max-n", 8192, 1, 65536);
  const char *types = bench_arg_str(a, "--types", "sgemm,dgemm,hgemm,bf16gemm");
  const char *modes = bench_arg_str(a, "--modes", "oneoff,resident");
  const char *mem = bench_arg_str(a, "--mem", "pageable");
  Options o;
  o.reps = (int)bench_arg_num(a, "--reps", 3, 1, 1000);
  o.iters = (int)bench_arg_num(a, "--iters", 0, 0, 100000);
  o.samples = (int)bench_arg_num(a, "--check", 32, 1, 1 << 20);
  bench_args_done(a, usage);
  for (const std::string &s : split(ns)) {
    long long v = bench_parse_size(s.c_str(), "--n");
    if (v < 1 || v > 65536) {
      std::fprintf(stderr, "cublas: --n values must be in [1, 65536], got %lld\n", v);
      return 2;
    }
    if (v <= max_n) o.ns.push_back((int)v);
  }
  for (const std::string &s : split(types)) {
    const GemmType *found = nullptr;
    for (const GemmType &t : kTypes)
      if (s == t.name) found = &t;
    if (!found) {
      std::fprintf(stderr, "cublas: unknown type '%s'\nusage: cublas %s\n", s.c_str(), usage);
      return 2;
    }
    o.types.push_back(found);
  }
  o.oneoff = o.resident = false;
  for (const std::string &s : split(modes)) {
    if (s == "oneoff") o.oneoff = true;
    else if (s == "resident") o.resident = true;
    else {
      std::fprintf(stderr, "cublas: unknown mode '%s'\nusage: cublas %s\n", s.c_str(), usage);
      return 2;
    }
  }
  if (!std::strcmp(mem, "pinned")) o.pinned = true;
  else if (std::strcmp(mem, "pageable")) {
    std::fprintf(stderr, "cublas: --mem is pageable or pinned\n");
    return 2;
  }
  if (o.ns.empty() || o.types.empty() || !(o.oneoff || o.resident)) {
    std::fprintf(stderr, "cublas: nothing to measure (--n above --max-n?)\nusage: cublas %s\n",
                 usage);
    return 2;
  }

  cublasHandle_t h;
  CBK(cublasCreate(&h));
  for (int n : o.ns)
    for (const GemmType *t : o.types) run_type(h, *t, n, o);
  CBK(cublasDestroy(h));
  return 0;
}
