/* sg_ptx_bench: interpreter throughput.
 *
 *   sg_ptx_bench [corpus_O2.ptx]
 *
 * Prints thread instructions per second per core for an arithmetic loop
 * kernel and for the tiled matmul of testdata/corpus.cu, and the time of a
 * 512x512 f32 matmul (16x16 tiles) on 1 worker and on all CPUs. */
#include <math.h>
#include <time.h>
#include <unistd.h>

#include "sg_ptx_testenv.h"
#include "rgpu_clock.h"

#ifndef SG_PTX_CORPUS_DIR
#define SG_PTX_CORPUS_DIR "."
#endif

static const char *loop_ptx =
    ".version 8.0\n.target sm_75\n.address_size 64\n"
    ".visible .entry spin(.param .u64 out, .param .u32 n)\n{\n"
    ".reg .b32 %r<12>; .reg .f32 %f<6>; .reg .pred %p<2>; .reg .b64 %rd<4>;\n"
    "ld.param.u64 %rd1, [out]; ld.param.u32 %r1, [n];\n"
    "mov.u32 %r2, %tid.x; mov.u32 %r3, 0; mov.u32 %r4, 1; mov.f32 %f1, 0f3F800000; mov.f32 %f2, 0f00000000;\n"
    "L: mad.lo.s32 %r4, %r4, 1664525, %r2; xor.b32 %r5, %r4, %r3; shr.u32 %r6, %r5, 3;\n"
    "add.s32 %r3, %r3, %r6; fma.rn.f32 %f2, %f2, %f1, 0f3F000000; and.b32 %r7, %r3, 255;\n"
    "add.s32 %r8, %r7, %r2; setp.lt.s32 %p1, %r8, 0; @%p1 add.s32 %r3, %r3, 1;\n"
    "add.s32 %r1, %r1, -1; setp.ne.s32 %p1, %r1, 0; @%p1 bra L;\n"
    "mov.u32 %r9, %ctaid.x; mov.u32 %r10, %ntid.x; mad.lo.s32 %r11, %r9, %r10, %r2;\n"
    "mul.wide.u32 %rd2, %r11, 4; add.s64 %rd3, %rd1, %rd2; st.global.u32 [%rd3], %r3;\nret;\n}\n";

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) { free(b); b = NULL; }
  fclose(f);
  if (b) { b[n] = 0; *len = (size_t)n; }
  return b;
}

static int bench_loop(int workers) {
  sg_ptx_module *m;
  char err[256];
  if (sg_ptx_module_parse(loop_ptx, strlen(loop_ptx), &m, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
  const sg_ptx_kernel *k = sg_ptx_module_find_kernel(m, "spin");
  testenv te;
  te_init(&te, workers);
  unsigned blocks = 16, threads = 256, n = 2000;
  uint64_t out = te_alloc(&te, blocks * threads * 4);
  te_params p;
  te_params_init(&p, k);
  te_param(&p, k, 0, &out, 8);
  te_param(&p, k, 1, &n, 4);
  sg_ptx_launch_cfg cfg = {{blocks, 1, 1}, {threads, 1, 1}, 0, p.buf, p.size};
  sg_ptx_stats st;
  sg_ptx_fault f;
  double t0 = rgpu_clock_s();
  int rc = sg_ptx_launch_ex(k, &cfg, &te.env, &f, &st);
  double dt = rgpu_clock_s() - t0;
  if (rc) { fprintf(stderr, "launch: %s\n", f.message); return 1; }
  printf("alu loop   %2d worker(s): %10.0f thread insns in %.3f s = %7.1f M insns/s total, %7.1f M insns/s per worker\n",
         workers, (double)st.thread_insns, dt, st.thread_insns / dt / 1e6, st.thread_insns / dt / 1e6 / workers);
  te_free(&te);
  sg_ptx_module_free(m);
  return 0;
}

static int bench_matmul(sg_ptx_module *m, int workers, int n, int check) {
  const sg_ptx_kernel *k = sg_ptx_module_find_kernel(m, "matmul");
  if (!k) { fprintf(stderr, "no matmul kernel\n"); return 1; }
  testenv te;
  te_init(&te, workers);
  uint64_t A = te_alloc(&te, (size_t)n * n * 4), B = te_alloc(&te, (size_t)n * n * 4), C = te_alloc(&te, (size_t)n * n * 4);
  float *ha = te_host(&te, A), *hb = te_host(&te, B), *hc = te_host(&te, C);
  for (int i = 0; i < n * n; i++) { ha[i] = (float)((i * 7) % 13) * 0.25f; hb[i] = (float)((i * 5) % 11) * 0.5f - 2.0f; }
  te_params p;
  te_params_init(&p, k);
  te_param(&p, k, 0, &A, 8); te_param(&p, k, 1, &B, 8); te_param(&p, k, 2, &C, 8); te_param(&p, k, 3, &n, 4);
  sg_ptx_launch_cfg cfg = {{(unsigned)(n + 15) / 16, (unsigned)(n + 15) / 16, 1}, {16, 16, 1}, 0, p.buf, p.size};
  sg_ptx_stats st;
  sg_ptx_fault f;
  double t0 = rgpu_clock_s();
  int rc = sg_ptx_launch_ex(k, &cfg, &te.env, &f, &st);
  double dt = rgpu_clock_s() - t0;
  if (rc) { fprintf(stderr, "launch: %s\n", f.message); return 1; }
  printf("matmul %dx%d f32, 16x16 tiles, %2d worker(s): %.3f s, %.0f M thread insns, %.1f M insns/s per worker\n", n, n,
         workers, dt, st.thread_insns / 1e6, st.thread_insns / dt / 1e6 / workers);
  if (check) {
    int bad = 0;
    for (int r = 0; r < n && !bad; r += 37)
      for (int c = 0; c < n; c += 29) {
        double acc = 0;
        for (int q = 0; q < n; q++) acc += (double)ha[r * n + q] * hb[q * n + c];
        if (fabs(acc - hc[r * n + c]) > 1e-3 * fabs(acc) + 1e-2) { bad = 1; fprintf(stderr, "mismatch at %d,%d\n", r, c); break; }
      }
    if (bad) return 1;
  }
  te_free(&te);
  return 0;
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : SG_PTX_CORPUS_DIR "/corpus_O2.ptx";
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  if (ncpu < 1) ncpu = 1;
  if (bench_loop(1) || (ncpu > 1 && bench_loop((int)ncpu))) return 1;
  size_t len;
  char *text = read_file(path, &len);
  if (!text) { fprintf(stderr, "cannot read %s (pass the path of corpus_O2.ptx)\n", path); return 1; }
  sg_ptx_module *m;
  char err[256];
  if (sg_ptx_module_parse(text, len, &m, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
  free(text);
  int rc = bench_matmul(m, 1, 512, 1);
  if (!rc && ncpu > 1) rc = bench_matmul(m, (int)ncpu, 512, 0);
  sg_ptx_module_free(m);
  return rc;
}
