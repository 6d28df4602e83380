/* sg_ptx_corpus_test: real nvcc output (testdata/corpus.cu at -O2 and -O0)
 * parsed and run on the interpreter, results checked against the host. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>

#include "sg_ptx_testenv.h"
#include "sg_ptx_internal.h"

#ifndef SG_PTX_CORPUS_DIR
#define SG_PTX_CORPUS_DIR "."
#endif

typedef struct {
  sg_ptx_module *m;
  testenv te;
} fixture;

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

static int setup_file(void **state, const char *name) {
  fixture *fx = calloc(1, sizeof *fx);
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", SG_PTX_CORPUS_DIR, name);
  size_t len;
  char *text = read_file(path, &len);
  if (!text) { fprintf(stderr, "cannot read %s\n", path); free(fx); return -1; }
  char err[512];
  int rc = sg_ptx_module_parse(text, len, &fx->m, err, sizeof err);
  free(text);
  if (rc) { fprintf(stderr, "parse %s: %d %s\n", name, rc, err); free(fx); return -1; }
  te_init(&fx->te, 4); /* more workers than cores: exercises the pool */
  te_load_globals(&fx->te, fx->m);
  *state = fx;
  return 0;
}
static int setup_o2(void **state) { return setup_file(state, "corpus_O2.ptx"); }
static int setup_o0(void **state) { return setup_file(state, "corpus_O0.ptx"); }
static int setup_sm90(void **state) { return setup_file(state, "corpus_sm90.ptx"); }
static int setup_libs(void **state) { return setup_file(state, "libs_sm75.ptx"); }
static int setup_libs90(void **state) { return setup_file(state, "libs_sm90.ptx"); }
static int teardown(void **state) {
  fixture *fx = *state;
  te_free(&fx->te);
  sg_ptx_module_free(fx->m);
  free(fx);
  return 0;
}

static const sg_ptx_kernel *kernel(fixture *fx, const char *name) {
  const sg_ptx_kernel *k = sg_ptx_module_find_kernel(fx->m, name);
  if (!k) fail_msg("kernel %s not found", name);
  return k;
}

static const sg_ptx_kernel *kernel_prefix(fixture *fx, const char *prefix) {
  for (int i = 0; i < sg_ptx_module_kernel_count(fx->m); i++) {
    const sg_ptx_kernel *k = sg_ptx_module_kernel(fx->m, i);
    if (!strncmp(sg_ptx_kernel_name(k), prefix, strlen(prefix))) return k;
  }
  fail_msg("no kernel named %s*", prefix);
  return NULL;
}

#define LAUNCH_OK(...)                                                         \
  do {                                                                         \
    sg_ptx_fault f_;                                                           \
    int rc_ = te_launch(__VA_ARGS__, &f_);                                     \
    if (rc_) fail_msg("launch failed %d: %s", rc_, f_.message);                \
  } while (0)

static void t_vecadd(void **state) {
  fixture *fx = *state;
  testenv *t = &fx->te;
  const sg_ptx_kernel *k = kernel(fx, "vecadd");
  int n = 1000;
  uint64_t a = te_alloc(t, n * 4), b = te_alloc(t, n * 4), c = te_alloc(t, n * 4);
  float *ha = te_host(t, a), *hb = te_host(t, b), *hc = te_host(t, c);
  for (int i = 0; i < n; i++) { ha[i] = (float)i; hb[i] = 0.5f * (float)i; }
  te_params p;
  te_params_init(&p, k);
  te_param(&p, k, 0, &a, 8); te_param(&p, k, 1, &b, 8); te_param(&p, k, 2, &c, 8); te_param(&p, k, 3, &n, 4);
  LAUNCH_OK(t, k, (n + 127) / 128, 1, 1, 128, 1, 1, 0, &p);
  for (int i = 0; i < n; i++) assert_true(hc[i] == ha[i] + hb[i]);
}

static void t_saxpy(void **state) {
  fixture *fx = *state;
  testenv *t = &fx->te;
  const sg_ptx_kernel *k = kernel(fx, "saxpy");
  int n = 777;
  uint64_t x = te_alloc(t, n * 4), y = te_alloc(t, n * 4);
  float *hx = te_host(t, x), *hy = te_host(t, y);
  for (int i = 0; i < n; i++) { hx[i] = (float)i; hy[i] = 1.0f; }
  struct { float a; int n; uint64_t x, y; } s = {2.5f, n, x, y};
  assert_int_equal(sg_ptx_kernel_param_bytes(k), 24);
  te_params p;
  te_params_init(&p, k);
  te_param(&p, k, 0, &s, sizeof s);
  LAUNCH_OK(t, k, (n + 63) / 64, 1, 1, 64, 1, 1, 0, &p);
  for (int i = 0; i < n; i++) assert_true(hy[i] == 2.5f * (float)i + 1.0f);
}

static void t_matmul(void **state) {
  fixture *fx = *state;
  testenv *t = &fx->te;
  const sg_ptx_kernel *k = kernel(fx, "matmul");
  assert_int_equal(sg_ptx_kernel_static_shared(k), 2 * 16 * 16 * 4);
  assert_int_equal(sg_ptx_kernel_static_shared(kernel(fx, "vecadd")), 0);
  assert_int_equal(sg_ptx_kernel_static_shared(kernel(fx, "block_scan")), 4096);
  assert_int_equal(sg_ptx_kernel_local_bytes(kernel(fx, "vecadd")), 0);
  assert_true(sg_ptx_kernel_local_bytes(kernel(fx, "printf_k")) >= 40);
  int n = 40; /* not a multiple of the tile: exercises the edge guards */
  uint64_t A = te_alloc(t, n * n * 4), B = te_alloc(t, n * n * 4), C = te_alloc(t, n * n * 4);
  float *ha = te_host(t, A), *hb = te_host(t, B), *hc = te_host(t, C);
  for (int i = 0; i < n * n; i++) { ha[i] = (float)(i % 7) - 3.0f; hb[i] = (float)(i % 5) * 0.5f; }
  te_params p;
  te_params_init(&p, k);
  te_param(&p, k, 0, &A, 8); te_param(&p, k, 1, &B, 8); te_param(&p, k, 2, &C, 8); te_param(&p, k, 3, &n, 4);
  LAUNCH_OK(t, k, (n + 15) / 16, (n + 15) / 16, 1, 16, 16, 1, 0, &p);
  for (int r = 0; r < n; r++)
    for (int c = 0; c < n; c++) {
      float acc = 0;
      for (int q = 0; q < n; q++) acc += ha[r * n + q] * hb[q * n + c];
      assert_float_equal(hc[r * n + c], acc, 1e-3);
    }
}

static void t_reduce(void **state) {
  fixture *fx = *state;
  testenv *t = &fx->te;
  const sg_ptx_kernel *k = kernel(fx, "reduce_shfl");
  int n = 100000;
  uint64_t in = te_alloc(t, n * 4), out = te_alloc(t, 4);
  float *h = te_host(t, in);
  double ref = 0;
  for (int i = 0; i < n; i++) { h[i] = (float)(i % 10); ref += h[i]; }
  te_params p;
  te_params_init(&p, k);
  te_param(&p, k, 0, &in, 8); te_param(&p, k, 1, &out, 8); te_param(&p, k, 2, &n, 4);
  LAUNCH_OK(t, k, 8, 1, 1, 256, 1, 1, 0, &p);
  assert_float_equal(*(float *)te_host(t, out), ref, 1.0);
}

static void t_histogram(void **state) {
  fixture *fx = *state;
  testenv *t = &fx->te;
  const sg_ptx_kernel *k = kernel(fx, "histogram");
  int n = 50000;
  uint64_t d = te_alloc(t, n), h = te_alloc(t, 256 * 4);
  unsigned char *hd = te_host(t, d);
  unsigned ref[256] = {0};
  for (int i = 0; i < n; i++) { hd[i] = (unsigned char)((i * 37) ^ (i >> 3)); ref[hd[i]]++; }
  te_params p;
  te_params_init(&p, k);
  te_param(&p, k, 0, &d, 8); te_param(&p, k, 1, &n, 4); te_param(&p, k, 2, &h, 8);
  LAUNCH_OK(t, k, 6, 1, 1, 192, 1, 1, 0, &p);
  unsigned *hh = te_host(t, h);
  for (int i = 0; i < 256; i++) assert_int_equal(hh[i], ref[i]);
}

static void t_scan(void **state) {
  fixture *fx = *state;
  testenv *t = &fx->te;
  const sg_ptx_kernel *k = kernel(fx, "block_scan");
  int n = 1000;
  uint64_t in = te_alloc(t, 1024 * 4), out = te_alloc(t, 1024 * 4);
  int *hi = te_host(t, in), *ho = te_host(t, out);
  for (int i = 0; i < n; i++) hi[i] = (i % 13) - 6;
  te_params p;
  te_params_init(&p, k);
  te_param(&p, k, 0, &in, 8); te_param(&p, k, 1, &out, 8); te_param(&p, k, 2, &n, 4);
  LAUNCH_OK(t, k, 1, 1, 1, 1024, 1, 1, 0, &p);
  int acc = 0;
  for (int i = 0; i < n; i++) { acc += hi[i]; assert_int_equal(ho[i], acc); }
}

static void t_templates(void **state) {
  fixture *fx = *state;
  testenv *t = &fx->te;
  int n = 100;
  const sg_ptx_kernel *kf = kernel_prefix(fx, "_Z10scale_tmplIfLi3EE");
  const sg_ptx_kernel *ki = kernel_prefix(fx, "_Z10scale_tmplIiLi5EE");
  const sg_ptx_kernel *kd = kernel_prefix(fx, "_Z10scale_tmplIdLi7EE");
  uint64_t xf = te_alloc(t, n * 4), xi = te_alloc(t, n * 4), xd = te_alloc(t, n * 8);
  float *hf = te_host(t, xf); int *hi = te_host(t, xi); double *hd = te_host(t, xd);
  for (int i = 0; i < n; i++) { hf[i] = (float)i; hi[i] = i - 50; hd[i] = i * 0.25; }
  te_params p;
  float vf = 1.5f; int vi = -3; double vd = 2.0;
  te_params_init(&p, kf); te_param(&p, kf, 0, &xf, 8); te_param(&p, kf, 1, &vf, 4); te_param(&p, kf, 2, &n, 4);
  LAUNCH_OK(t, kf, 1, 1, 1, 128, 1, 1, 0, &p);
  te_params_init(&p, ki); te_param(&p, ki, 0, &xi, 8); te_param(&p, ki, 1, &vi, 4); te_param(&p, ki, 2, &n, 4);
  LAUNCH_OK(t, ki, 1, 1, 1, 128, 1, 1, 0, &p);
  te_params_init(&p, kd); te_param(&p, kd, 0, &xd, 8); te_param(&p, kd, 1, &vd, 8); te_param(&p, kd, 2, &n, 4);
  LAUNCH_OK(t, kd, 1, 1, 1, 128, 1, 1, 0, &p);
  for (int i = 0; i < n; i++) {
    assert_true(hf[i] == (float)i * 1.5f + 3.0f);
    assert_int_equal(hi[i], (i - 50) * -3 + 5);
    assert_true(hd[i] == i * 0.25 * 2.0 + 7.0);
  }
}

static void t_globals(void **state) {
  fixture *fx = *state;
  testenv *t = &fx->te;
  const sg_ptx_kernel *k = kernel(fx, "globals_k");
  float *coef = te_host(t, te_global_addr(t, fx->m, "c_coef"));
  int *counter = te_host(t, te_global_addr(t, fx->m, "g_counter"));
  assert_non_null(coef);
  assert_non_null(counter);
  for (int i = 0; i < 4; i++) coef[i] = 0.5f * (float)i;
  *counter = 0;
  uint64_t out = te_alloc(t, 16 * 4);
  te_params p;
  te_params_init(&p, k);
  te_param(&p, k, 0, &out, 8);
  LAUNCH_OK(t, k, 1, 1, 1, 64, 1, 1, 0, &p);
  float *ho = te_host(t, out);
  static const int init[4] = {10, 20, 30, 40};
  for (int i = 0; i < 16; i++) { int j = 15 - i; assert_true(ho[i] == 0.5f * (float)(j & 3) + (float)init[j & 3]); }
  assert_int_equal(*counter, 64);
}

static void t_dyn_shared(void **state) {
  fixture *fx = *state;
  testenv *t = &fx->te;
  const sg_ptx_kernel *k = kernel(fx, "dyn_shared");
  int bs = 96, nb = 3;
  uint64_t in = te_alloc(t, bs * nb * 4), out = te_alloc(t, bs * nb * 4);
  float *hi = te_host(t, in), *ho = te_host(t, out);
  for (int i = 0; i < bs * nb; i++) hi[i] = (float)i;
  te_params p;
  te_params_init(&p, k);
  te_param(&p, k, 0, &in, 8); te_param(&p, k, 1, &out, 8);
  LAUNCH_OK(t, k, nb, 1, 1, bs, 1, 1, bs * 4, &p);
  for (int b = 0; b < nb; b++)
    for (int i = 0; i < bs; i++) assert_true(ho[b * bs + i] == hi[b * bs + bs - 1 - i]);
  /* too little dynamic shared memory for the block: must fault, not corrupt */
  sg_ptx_fault f;
  assert_int_equal(te_launch(t, k, nb, 1, 1, bs, 1, 1, 16, &p, &f), CUDA_ERROR_ILLEGAL_ADDRESS);
}

static void t_calls(void **state) {
  fixture *fx = *state;
  testenv *t = &fx->te;
  const sg_ptx_kernel *k = kernel(fx, "calls");
  int n = 300;
  uint64_t in = te_alloc(t, n * 4), out = te_alloc(t, n * 4), pr = te_alloc(t, n * 8);
  float *hi = te_host(t, in), *ho = te_host(t, out);
  int *hp = te_host(t, pr);
  for (int i = 0; i < n; i++) { hi[i] = 0.5f + (float)(i % 3); hp[2 * i] = i; hp[2 * i + 1] = -i; }
  te_params p;
  te_params_init(&p, k);
  te_param(&p, k, 0, &in, 8); te_param(&p, k, 1, &out, 8); te_param(&p, k, 2, &pr, 8); te_param(&p, k, 3, &n, 4);
  LAUNCH_OK(t, k, (n + 127) / 128, 1, 1, 128, 1, 1, 0, &p);
  for (int i = 0; i < n; i++) {
    float r = 0, x = hi[i];
    for (int q = 0; q < (i % 5) + 1; q++) r = r * x + (float)(q + 1);
    assert_float_equal(ho[i], r, 1e-4 * fabsf(r) + 1e-6);
    assert_int_equal(hp[2 * i], -i);
    assert_int_equal(hp[2 * i + 1], i);
  }
}

static void t_grid3d(void **state) {
  fixture *fx = *state;
  testenv *t = &fx->te;
  const sg_ptx_kernel *k = kernel(fx, "grid3d");
  int nx = 19, ny = 7, nz = 5;
  uint64_t out = te_alloc(t, nx * ny * nz * 4);
  te_params p;
  te_params_init(&p, k);
  te_param(&p, k, 0, &out, 8); te_param(&p, k, 1, &nx, 4); te_param(&p, k, 2, &ny, 4); te_param(&p, k, 3, &nz, 4);
  LAUNCH_OK(t, k, 3, 2, 3, 8, 4, 2, 0, &p);
  int *ho = te_host(t, out);
  for (int z = 0; z < nz; z++)
    for (int y = 0; y < ny; y++)
      for (int x = 0; x < nx; x++) assert_int_equal(ho[(z * ny + y) * nx + x], x + 100 * y + 10000 * z);
}

static void t_half(void **state) {
  fixture *fx = *state;
  testenv *t = &fx->te;
  const sg_ptx_kernel *k = kernel(fx, "half_k");
  int n = 64;
  uint64_t a = te_alloc(t, n * 4), b = te_alloc(t, n * 4), out = te_alloc(t, n * 12), hout = te_alloc(t, n * 2);
  float *ha = te_host(t, a), *hb = te_host(t, b), *ho = te_host(t, out);
  uint16_t *hh = te_host(t, hout);
  for (int i = 0; i < n; i++) { ha[i] = 0.25f * (float)i; hb[i] = 1.5f - 0.125f * (float)i; }
  te_params p;
  te_params_init(&p, k);
  te_param(&p, k, 0, &a, 8); te_param(&p, k, 1, &b, 8); te_param(&p, k, 2, &out, 8); te_param(&p, k, 3, &hout, 8);
  te_param(&p, k, 4, &n, 4);
  LAUNCH_OK(t, k, 1, 1, 1, 64, 1, 1, 0, &p);
  for (int i = 0; i < n; i++) {
    float x = ha[i], y = hb[i]; /* exactly representable in f16 */
    assert_float_equal(ho[3 * i], x + y, 1e-2);
    assert_float_equal(ho[3 * i + 1], x * y, fabsf(x * y) * 1e-3 + 1e-3);
    assert_float_equal(ho[3 * i + 2], 2 * x + 2 * y, 1e-2);
    float fma_ref = x * y + (x + y);
    assert_float_equal(sg_half_to_float(hh[i]), fma_ref, fabsf(fma_ref) * 1e-3 + 1e-2);
  }
}

static void t_printf(void **state) {
  fixture *fx = *state;
  testenv *t = &fx->te;
  const sg_ptx_kernel *k = kernel(fx, "printf_k");
  int base = 3;
  te_params p;
  te_params_init(&p, k);
  te_param(&p, k, 0, &base, 4);
  t->nprinted = 0;
  t->printed[0] = 0;
  LAUNCH_OK(t, k, 1, 1, 1, 2, 1, 1, 0, &p);
  assert_string_equal(t->printed,
                      "thread 0 of block 0:  0.00 ok 3000000000 0xff A|\n"
                      "thread 1 of block 0:  0.50 ok 3000000000 0x100 B|\n");
}

static void t_printf_dev(void **state) {
  fixture *fx = *state;
  testenv *t = &fx->te;
  const sg_ptx_kernel *k = kernel(fx, "printf_dev");
  te_params p;
  te_params_init(&p, k);
  t->nprinted = 0;
  t->printed[0] = 0;
  LAUNCH_OK(t, k, 1, 1, 1, 3, 1, 1, 0, &p);
  assert_string_equal(t->printed, "dev 0 1.5\ndev 10 1.5\ndev 20 1.5\n");
}

static void t_oob(void **state) {
  fixture *fx = *state;
  testenv *t = &fx->te;
  const sg_ptx_kernel *k = kernel(fx, "oob");
  int n = 100;
  uint64_t buf = te_alloc(t, n * 4);
  te_params p;
  te_params_init(&p, k);
  te_param(&p, k, 0, &buf, 8); te_param(&p, k, 1, &n, 4);
  sg_ptx_fault f;
  int rc = te_launch(t, k, 1, 1, 1, 32, 1, 1, 0, &p, &f);
  assert_int_equal(rc, CUDA_ERROR_ILLEGAL_ADDRESS);
  assert_int_equal(f.code, CUDA_ERROR_ILLEGAL_ADDRESS);
  assert_true(f.address >= buf + n * 4 && f.address < buf + n * 4 + 32 * 4);
  assert_non_null(strstr(f.message, "oob"));
  assert_non_null(strstr(f.message, "illegal address"));
}

static void t_warp_ops(void **state) {
  fixture *fx = *state;
  testenv *t = &fx->te;
  const sg_ptx_kernel *k = kernel(fx, "warp_ops");
  uint64_t in = te_alloc(t, 32 * 4), out = te_alloc(t, 32 * 8 * 4);
  int *hi = te_host(t, in);
  unsigned *ho = te_host(t, out);
  for (int i = 0; i < 32; i++) hi[i] = (i % 3 == 0) ? -i - 1 : i * 5;
  te_params p;
  te_params_init(&p, k);
  te_param(&p, k, 0, &in, 8); te_param(&p, k, 1, &out, 8);
  LAUNCH_OK(t, k, 1, 1, 1, 32, 1, 1, 0, &p);
  unsigned ballot = 0;
  int any = 0, all = 1;
  for (int i = 0; i < 32; i++) { if (hi[i] > 0) ballot |= 1u << i; if (hi[i] > 100) any = 1; if (!(hi[i] > -1000)) all = 0; }
  for (int i = 0; i < 32; i++) {
    const unsigned *o = ho + i * 8;
    assert_int_equal(o[0], ballot);
    assert_int_equal(o[1], any);
    assert_int_equal(o[2], all);
    assert_int_equal((int)o[3], hi[i ^ 1]);
    assert_int_equal((int)o[4], i >= 2 ? hi[i - 2] : hi[i]);
    assert_int_equal((int)o[5], hi[7]);
    unsigned mm = 0;
    for (int j = 0; j < 32; j++) if ((hi[j] & 3) == (hi[i] & 3)) mm |= 1u << j;
    assert_int_equal(o[6], mm);
    unsigned v = (unsigned)hi[i], rev = 0;
    for (int b = 0; b < 32; b++) if (v & (1u << b)) rev |= 1u << (31 - b);
    unsigned expect = (unsigned)__builtin_popcount(ballot) + (unsigned)(v ? __builtin_clz(v) : 32) + rev + (unsigned)__builtin_ffs((int)v);
    assert_int_equal(o[7], expect);
  }
}

static void t_mathf(void **state) {
  fixture *fx = *state;
  testenv *t = &fx->te;
  const sg_ptx_kernel *k = kernel(fx, "mathf");
  int n = 50;
  uint64_t in = te_alloc(t, n * 4), out = te_alloc(t, n * 8 * 4);
  float *hi = te_host(t, in), *ho = te_host(t, out);
  for (int i = 0; i < n; i++) hi[i] = 0.1f + 0.37f * (float)i;
  te_params p;
  te_params_init(&p, k);
  te_param(&p, k, 0, &in, 8); te_param(&p, k, 1, &out, 8); te_param(&p, k, 2, &n, 4);
  LAUNCH_OK(t, k, 1, 1, 1, 64, 1, 1, 0, &p);
  for (int i = 0; i < n; i++) {
    float x = hi[i];
    const float *o = ho + 8 * i;
    assert_float_equal(o[0], sqrtf(x), 1e-6 * sqrtf(x));
    assert_float_equal(o[1], expf(x), 1e-5 * expf(x) + 1e-6);
    assert_float_equal(o[2], logf(x), 1e-5 * fabsf(logf(x)) + 1e-6);
    assert_float_equal(o[3], sinf(x), 1e-5 + 1e-6 * fabsf(x));
    assert_float_equal(o[4], cosf(x), 1e-5 + 1e-6 * fabsf(x));
    assert_float_equal(o[5], 1.0f / sqrtf(x), 1e-6 / sqrtf(x) + 1e-7);
    assert_float_equal(o[6], tanhf(x), 1e-5);
    assert_float_equal(o[7], x / (x + 1.0f), 1e-6);
  }
}


static void t_mathd(void **state) {
  fixture *fx = *state;
  testenv *t = &fx->te;
  const sg_ptx_kernel *k = kernel(fx, "mathd");
  int n = 40;
  uint64_t in = te_alloc(t, n * 8), out = te_alloc(t, n * 6 * 8);
  double *hi = te_host(t, in), *ho = te_host(t, out);
  for (int i = 0; i < n; i++) hi[i] = i < 35 ? 0.05 + 0.61 * i : 1e6 * (i - 30); /* large: slow sin reduction */
  te_params p;
  te_params_init(&p, k);
  te_param(&p, k, 0, &in, 8); te_param(&p, k, 1, &out, 8); te_param(&p, k, 2, &n, 4);
  LAUNCH_OK(t, k, 1, 1, 1, 64, 1, 1, 0, &p);
  for (int i = 0; i < n; i++) {
    double x = hi[i], *o = ho + 6 * i;
    double ref[6] = {exp(x), log(x), sin(x), pow(x, 1.5), sqrt(x), erf(x)};
    for (int j = 0; j < 6; j++) {
      if (isinf(ref[j])) { assert_true(isinf(o[j])); continue; }
      if (fabs(o[j] - ref[j]) > 1e-14 * fabs(ref[j]) + 1e-15) fail_msg("x=%g fn %d: %.17g vs %.17g", x, j, o[j], ref[j]);
    }
  }
}

static void t_mathf2(void **state) {
  fixture *fx = *state;
  testenv *t = &fx->te;
  const sg_ptx_kernel *k = kernel(fx, "mathf2");
  int n = 40;
  uint64_t in = te_alloc(t, n * 4), out = te_alloc(t, n * 6 * 4);
  float *hi = te_host(t, in), *ho = te_host(t, out);
  for (int i = 0; i < n; i++) hi[i] = i < 35 ? 0.05f + 0.61f * (float)i : 1e5f * (float)(i - 30);
  te_params p;
  te_params_init(&p, k);
  te_param(&p, k, 0, &in, 8); te_param(&p, k, 1, &out, 8); te_param(&p, k, 2, &n, 4);
  LAUNCH_OK(t, k, 1, 1, 1, 64, 1, 1, 0, &p);
  for (int i = 0; i < n; i++) {
    float x = hi[i], *o = ho + 6 * i;
    double ref[6] = {exp((double)x), log((double)x), sin((double)x), pow((double)x, 1.5), atan2((double)x, 2.0), fmod((double)x, (double)0.7f)};
    for (int j = 0; j < 6; j++) {
      if (isinf((float)ref[j])) { assert_true(isinf(o[j])); continue; }
      if (fabs(o[j] - ref[j]) > 4e-7 * fabs(ref[j]) + 1e-7) fail_msg("x=%g fn %d: %.9g vs %.9g", x, j, o[j], ref[j]);
    }
  }
}

static void t_intrin(void **state) {
  fixture *fx = *state;
  testenv *t = &fx->te;
  const sg_ptx_kernel *k = kernel(fx, "intrin");
  uint64_t in = te_alloc(t, 64 * 4), out = te_alloc(t, 32 * 8 * 4), o64 = te_alloc(t, 32 * 8);
  unsigned *hi = te_host(t, in), *ho = te_host(t, out);
  long long *h64 = te_host(t, o64);
  unsigned seed = 7;
  for (int i = 0; i < 64; i++) { seed = seed * 1103515245u + 12345u; hi[i] = (seed >> 1) & 0x7fffffff; }
  te_params p;
  te_params_init(&p, k);
  te_param(&p, k, 0, &in, 8); te_param(&p, k, 1, &out, 8); te_param(&p, k, 2, &o64, 8);
  LAUNCH_OK(t, k, 1, 1, 1, 32, 1, 1, 0, &p);
  unsigned odd = 0;
  for (int i = 0; i < 32; i++) odd += hi[i] & 1;
  for (int i = 0; i < 32; i++) {
    unsigned a = hi[i], b = hi[i + 32], *o = ho + 8 * i;
    uint64_t v = ((uint64_t)b << 32) | a;
    unsigned sh = (unsigned)i & 31;
    assert_int_equal(o[0], (uint32_t)((v << sh) >> 32));
    assert_int_equal(o[1], (uint32_t)(v >> sh));
    assert_int_equal(o[2], (uint32_t)(((uint64_t)a * b) >> 32));
    uint8_t by[8];
    for (int q = 0; q < 8; q++) by[q] = (uint8_t)(v >> (8 * q));
    assert_int_equal(o[3], (uint32_t)by[0] | ((uint32_t)by[4] << 8) | ((uint32_t)by[1] << 16) | ((uint32_t)by[5] << 24));
    assert_int_equal(o[4], (unsigned)(((int)a > (int)b) ? (int)a - (int)b : (int)b - (int)a) + 3u);
    assert_int_equal(o[5], odd);
    float f;
    unsigned fb = a & 0x3fffffff;
    memcpy(&f, &fb, 4);
    assert_int_equal((int)o[6], (int)nearbyintf(f));
    assert_int_equal(o[7], ((a + b) & 0xffff) | (((a >> 16) + (b >> 16)) << 16));
    long long x = (long long)a * b;
    assert_int_equal(h64[i], x / (long long)(b | 1) + x % 7);
  }
}

static void t_switch(void **state) {
  fixture *fx = *state;
  testenv *t = &fx->te;
  const sg_ptx_kernel *k = kernel(fx, "sw");
  uint64_t in = te_alloc(t, 64 * 4), out = te_alloc(t, 64 * 4);
  int *hi = te_host(t, in), *ho = te_host(t, out);
  for (int i = 0; i < 64; i++) hi[i] = (i * 5) % 9 - 1;
  te_params p;
  te_params_init(&p, k);
  te_param(&p, k, 0, &in, 8); te_param(&p, k, 1, &out, 8);
  LAUNCH_OK(t, k, 1, 1, 1, 64, 1, 1, 0, &p);
  static const int tab[6] = {5, 9, 13, 2, 99, 7};
  for (int i = 0; i < 64; i++) assert_int_equal(ho[i], hi[i] >= 0 && hi[i] < 6 ? tab[hi[i]] : -1);
}

static void t_misc(void **state) {
  fixture *fx = *state;
  testenv *t = &fx->te;
  const sg_ptx_kernel *k = kernel(fx, "misc");
  int nt = 128;
  uint64_t v = te_alloc(t, nt * 16), d = te_alloc(t, 8), c = te_alloc(t, 8), h = te_alloc(t, 4);
  float *hv = te_host(t, v);
  for (int i = 0; i < nt * 4; i++) hv[i] = (float)i;
  te_params p;
  te_params_init(&p, k);
  te_param(&p, k, 0, &v, 8); te_param(&p, k, 1, &d, 8); te_param(&p, k, 2, &c, 8); te_param(&p, k, 3, &h, 8);
  LAUNCH_OK(t, k, 1, 1, 1, nt, 1, 1, 0, &p);
  for (int i = 0; i < nt; i++) assert_true(hv[4 * i] == (float)(4 * i) + (float)(4 * i + 3));
  assert_true(*(double *)te_host(t, d) == nt);
  int *hc = te_host(t, c);
  assert_int_equal(hc[0], nt * (nt - 1) / 2);
  assert_int_equal(hc[1], nt % 101);
  uint16_t *hh = te_host(t, h);
  assert_true(sg_half_to_float(hh[0]) == (float)nt);
  assert_true(sg_half_to_float(hh[1]) == 2.0f * nt);
}

static void t_assert(void **state) {
  fixture *fx = *state;
  testenv *t = &fx->te;
  const sg_ptx_kernel *k = kernel(fx, "assert_k");
  int limit = 1000;
  te_params p;
  te_params_init(&p, k);
  te_param(&p, k, 0, &limit, 4);
  LAUNCH_OK(t, k, 2, 1, 1, 64, 1, 1, 0, &p);
  limit = 40;
  te_params_init(&p, k);
  te_param(&p, k, 0, &limit, 4);
  t->nprinted = 0;
  t->printed[0] = 0;
  sg_ptx_fault f;
  assert_int_equal(te_launch(t, k, 1, 1, 1, 64, 1, 1, 0, &p, &f), CUDA_ERROR_ASSERT);
  if (!strstr(t->printed, "corpus.cu")) fail_msg("printed: [%s]", t->printed);
  assert_non_null(strstr(t->printed, "Assertion `threadIdx.x < limit` failed."));
  assert_non_null(strstr(t->printed, "thread: [40,0,0]"));
}

static void t_param_struct(void **state) {
  fixture *fx = *state;
  testenv *t = &fx->te;
  const sg_ptx_kernel *k = kernel(fx, "param_addr");
  uint64_t out = te_alloc(t, 64 * 4), out2 = te_alloc(t, 64 * 8);
  int arr[8] = {3, 1, 4, 1, 5, 9, 2, 6};
  te_params p;
  te_params_init(&p, k);
  te_param(&p, k, 0, arr, sizeof arr); te_param(&p, k, 1, &out, 8);
  LAUNCH_OK(t, k, 1, 1, 1, 64, 1, 1, 0, &p);
  int *ho = te_host(t, out);
  for (int i = 0; i < 64; i++) assert_int_equal(ho[i], arr[i & 7] + arr[(i + 1) & 7]);
  k = kernel(fx, "ret_struct");
  te_params_init(&p, k);
  te_param(&p, k, 0, &out2, 8);
  LAUNCH_OK(t, k, 1, 1, 1, 64, 1, 1, 0, &p);
  double *hd = te_host(t, out2);
  for (int i = 0; i < 64; i++) assert_true(hd[i] == 6.0 * i + 'q');
}

static void t_cub(void **state) {
  fixture *fx = *state;
  testenv *t = &fx->te;
  int nb = 5;
  uint64_t in = te_alloc(t, nb * 128 * 4), out = te_alloc(t, nb * 128 * 4);
  int *hi = te_host(t, in), *ho = te_host(t, out);
  for (int i = 0; i < nb * 128; i++) hi[i] = (i * 7919) % 1000 - 500;
  const sg_ptx_kernel *k = kernel(fx, "cub_reduce");
  te_params p;
  te_params_init(&p, k);
  te_param(&p, k, 0, &in, 8); te_param(&p, k, 1, &out, 8);
  LAUNCH_OK(t, k, nb, 1, 1, 128, 1, 1, 0, &p);
  for (int b = 0; b < nb; b++) {
    int ref = 0;
    for (int i = 0; i < 128; i++) ref += hi[b * 128 + i];
    assert_int_equal(ho[b], ref);
  }
  k = kernel(fx, "cub_scan");
  te_params_init(&p, k);
  te_param(&p, k, 0, &in, 8); te_param(&p, k, 1, &out, 8);
  LAUNCH_OK(t, k, 1, 1, 1, 128, 1, 1, 0, &p);
  for (int i = 0, acc = 0; i < 128; acc += hi[i], i++) assert_int_equal(ho[i], acc);
  k = kernel(fx, "cub_radix");
  uint64_t keys = te_alloc(t, 512 * 4);
  int *hk = te_host(t, keys);
  for (int i = 0; i < 512; i++) hk[i] = (int)((i * 2654435761u) >> 7) - (1 << 24);
  te_params_init(&p, k);
  te_param(&p, k, 0, &keys, 8);
  LAUNCH_OK(t, k, 1, 1, 1, 128, 1, 1, 0, &p);
  for (int i = 1; i < 512; i++) assert_true(hk[i - 1] <= hk[i]);
}

static void t_cg(void **state) {
  fixture *fx = *state;
  testenv *t = &fx->te;
  const sg_ptx_kernel *k = kernel(fx, "cg_reduce");
  uint64_t in = te_alloc(t, 256 * 4), out = te_alloc(t, 4);
  float *hi = te_host(t, in);
  float ref = 0;
  for (int i = 0; i < 256; i++) { hi[i] = (float)(i % 17); ref += hi[i]; }
  te_params p;
  te_params_init(&p, k);
  te_param(&p, k, 0, &in, 8); te_param(&p, k, 1, &out, 8);
  LAUNCH_OK(t, k, 1, 1, 1, 256, 1, 1, 0, &p);
  assert_true(*(float *)te_host(t, out) == ref);
}

#define BOTH(fn) cmocka_unit_test(fn)

int main(void) {
  const struct CMUnitTest tests[] = {
    BOTH(t_vecadd), BOTH(t_saxpy), BOTH(t_matmul), BOTH(t_reduce), BOTH(t_histogram), BOTH(t_scan),
    BOTH(t_templates), BOTH(t_globals), BOTH(t_dyn_shared), BOTH(t_calls), BOTH(t_grid3d), BOTH(t_half),
    BOTH(t_printf), BOTH(t_printf_dev), BOTH(t_oob), BOTH(t_warp_ops), BOTH(t_mathf), BOTH(t_mathd), BOTH(t_mathf2),
    BOTH(t_intrin), BOTH(t_switch), BOTH(t_misc), BOTH(t_assert), BOTH(t_param_struct),
  };
  int fails = 0;
  fails += _cmocka_run_group_tests("corpus_O2", tests, sizeof tests / sizeof tests[0], setup_o2, teardown);
  fails += _cmocka_run_group_tests("corpus_O0", tests, sizeof tests / sizeof tests[0], setup_o0, teardown);
  const struct CMUnitTest lib_tests[] = {cmocka_unit_test(t_cub), cmocka_unit_test(t_cg)};
  fails += _cmocka_run_group_tests("corpus_sm90", tests, sizeof tests / sizeof tests[0], setup_sm90, teardown);
  fails += _cmocka_run_group_tests("libs_sm75", lib_tests, sizeof lib_tests / sizeof lib_tests[0], setup_libs, teardown);
  fails += _cmocka_run_group_tests("libs_sm90", lib_tests, sizeof lib_tests / sizeof lib_tests[0], setup_libs90, teardown);
  return fails;
}
