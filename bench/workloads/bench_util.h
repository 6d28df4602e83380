// Shared by the benchmark workloads.
//
// Every workload times its own region of interest with a host clock placed
// around synchronizing calls (never around a call that may only have been
// queued), verifies what the GPU computed, and prints one machine-readable
// line per measurement:
//
//   RESULT workload=NAME key=value ...
//
// Keys every line carries, so that bench/rgpu_bench.py can compute floors
// without knowing the workload:
//   time_s      the measured time of one unit (one call, one copy, one run)
//   bytes       payload bytes that must cross the link in that unit
//   syncs       synchronization points in that unit: calls that cannot return
//               before the GPU side has answered (D2H copies, *Synchronize,
//               allocations, queries); may be fractional (one sync per R copies)
//   syncs_total every such call of the whole process, compared with the round
//               trips that RGPU_STATS reports
//
// Exit status: 0 measured and verified, 1 error or wrong result, 3 a CUDA
// feature the workload needs is not supported (the harness reports n/a).
#pragma once
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <cuda_runtime.h>
#include <sys/resource.h>

#define BENCH_EXIT_UNSUPPORTED 3

static const char *bench_name = "bench";
static long long bench_syncs_total = 0;

// Counts a synchronization point; wrap every call that needs the GPU's answer.
#define SYNC_CALL(call) (bench_syncs_total++, (call))

static void bench_fail(const char *file, int line, const char *what, cudaError_t err) {
  std::fprintf(stderr, "FAIL %s %s:%d: %s -> %d %s (%s)\n", bench_name, file, line, what,
               (int)err, cudaGetErrorName(err), cudaGetErrorString(err));
  if (err == cudaErrorNotSupported) {
    std::printf("RESULT workload=%s status=unsupported call=%d\n", bench_name, line);
    std::fflush(stdout);
    std::exit(BENCH_EXIT_UNSUPPORTED);
  }
  std::exit(1);
}

#define CK(call)                                              \
  do {                                                        \
    cudaError_t err_ = (call);                                \
    if (err_ != cudaSuccess) bench_fail(__FILE__, __LINE__, #call, err_); \
  } while (0)

#define CK_SYNC(call) CK(SYNC_CALL(call))

#define VERIFY(cond, ...)                                     \
  do {                                                        \
    if (!(cond)) {                                            \
      std::fprintf(stderr, "FAIL %s: wrong result: ", bench_name); \
      std::fprintf(stderr, __VA_ARGS__);                      \
      std::fputc('\n', stderr);                               \
      std::exit(1);                                           \
    }                                                         \
  } while (0)

static inline double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// User + system CPU seconds of this process, all threads: the client library's
// sender and receiver threads run inside the program, so their cost counts.
static inline double bench_cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

// --name value argument parsing: unknown arguments are an error, so a typo in
// the harness never silently measures the default configuration.
struct bench_args {
  int argc;
  char **argv;
  int *used;
};

static bench_args bench_args_init(int argc, char **argv) {
  bench_args a = {argc, argv, (int *)std::calloc((size_t)argc + 1, sizeof(int))};
  return a;
}

static const char *bench_arg_str(bench_args &a, const char *name, const char *def) {
  for (int i = 1; i < a.argc; i++) {
    if (!std::strcmp(a.argv[i], name)) {
      if (i + 1 >= a.argc) {
        std::fprintf(stderr, "%s: %s needs a value\n", bench_name, name);
        std::exit(2);
      }
      a.used[i] = a.used[i + 1] = 1;
      return a.argv[i + 1];
    }
  }
  return def;
}

static bool bench_arg_flag(bench_args &a, const char *name) {
  for (int i = 1; i < a.argc; i++)
    if (!std::strcmp(a.argv[i], name)) {
      a.used[i] = 1;
      return true;
    }
  return false;
}

// Accepts plain numbers and K/M/G suffixes (binary).
static long long bench_parse_size(const char *s, const char *what) {
  char *end;
  double v = std::strtod(s, &end);
  long long mul = 1;
  if (*end == 'K' || *end == 'k') mul = 1ll << 10, end++;
  else if (*end == 'M' || *end == 'm') mul = 1ll << 20, end++;
  else if (*end == 'G' || *end == 'g') mul = 1ll << 30, end++;
  if (end == s || *end || v < 0) {
    std::fprintf(stderr, "%s: bad number for %s: '%s'\n", bench_name, what, s);
    std::exit(2);
  }
  return (long long)(v * (double)mul);
}

static long long bench_arg_num(bench_args &a, const char *name, long long def, long long lo,
                               long long hi) {
  const char *s = bench_arg_str(a, name, nullptr);
  if (!s) return def;
  long long v = bench_parse_size(s, name);
  if (v < lo || v > hi) {
    std::fprintf(stderr, "%s: %s must be in [%lld, %lld], got %lld\n", bench_name, name, lo, hi,
                 v);
    std::exit(2);
  }
  return v;
}

static void bench_args_done(bench_args &a, const char *usage) {
  for (int i = 1; i < a.argc; i++)
    if (!a.used[i]) {
      std::fprintf(stderr, "%s: unknown argument '%s'\nusage: %s %s\n", bench_name, a.argv[i],
                   bench_name, usage);
      std::exit(2);
    }
  std::free(a.used);
}

static void bench_result(const char *fmt, ...) {
  std::printf("RESULT workload=%s ", bench_name);
  va_list ap;
  va_start(ap, fmt);
  std::vprintf(fmt, ap);
  va_end(ap);
  std::printf(" syncs_total=%lld\n", bench_syncs_total);
  std::fflush(stdout);
}

static int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

// Quantile q in [0,1] of v[0..n-1] (sorts v), nearest-rank.
static double bench_quantile(double *v, int n, double q) {
  std::qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
  int k = (int)(q * (double)n + 0.999999) - 1;
  if (k < 0) k = 0;
  if (k >= n) k = n - 1;
  return v[k];
}

// Mean of v[0..n-1] (0 for none).
static double bench_mean(const double *v, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) s += v[i];
  return n > 0 ? s / n : 0;
}

// Deterministic pseudo-random data; the same on every machine.
static inline unsigned bench_lcg(unsigned &s) {
  s = s * 1664525u + 1013904223u;
  return s >> 8;
}
