/* Tests of rgpu_fatbin against fatbins nvcc built from
 * softgpu/testdata/kernels.cu at build time (RGPU_FATBIN_TESTDATA), plus
 * hand-damaged copies of them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rgpu_fatbin.h"
#include "rgpu_fatbin_testdata.h"

/* A copy in a buffer of exactly n bytes, so that ASan catches overreads. */
static uint8_t *exact_copy(const uint8_t *p, size_t n) {
  uint8_t *c = malloc(n ? n : 1);
  assert_non_null(c);
  memcpy(c, p, n);
  return c;
}

static char *extract_ptx(const rgpu_fatbin *fb, size_t *len) {
  const rgpu_fatbin_entry *e = rgpu_fatbin_best_ptx(fb, 0);
  assert_non_null(e);
  void *text = NULL;
  assert_int_equal(rgpu_fatbin_extract(e, 0, &text, len), RGPU_FATBIN_OK);
  assert_non_null(text);
  return text;
}

static void assert_ptx_text(const char *t, size_t n) {
  assert_int_equal(strlen(t), n);
  while (*t == '\n' || *t == ' ' || *t == '\t' || *t == '\r') t++;
  assert_true(strncmp(t, "//", 2) == 0 || strncmp(t, ".version", 8) == 0);
  assert_non_null(strstr(t, ".entry _Z6vecaddPKfS0_Pfi"));
}

static void test_default_zstd(void **state) {
  blob b = load("kernels_zstd.fatbin");
  assert_int_equal(rgpu_fatbin_image_size(b.data), b.size);
  rgpu_fatbin fb;
  assert_int_equal(rgpu_fatbin_open(b.data, b.size, &fb), RGPU_FATBIN_OK);
  assert_int_equal(fb.size, b.size);
  assert_int_equal(fb.nentries, 2);
  const rgpu_fatbin_entry *elf = rgpu_fatbin_best_elf(&fb, 0);
  const rgpu_fatbin_entry *ptx = rgpu_fatbin_best_ptx(&fb, 0);
  assert_non_null(elf);
  assert_non_null(ptx);
  assert_int_equal(elf->arch, 75);
  assert_int_equal(ptx->arch, 75);
  assert_int_equal(elf->flags & (RGPU_FATBIN_FLAG_ZSTD | RGPU_FATBIN_FLAG_LZ4), 0);
  assert_true(ptx->flags & RGPU_FATBIN_FLAG_ZSTD);
  assert_true(ptx->compressed_size > 0 && ptx->compressed_size <= ptx->payload_size);
  assert_true(ptx->uncompressed_size > ptx->compressed_size);

  size_t n;
  char *t = extract_ptx(&fb, &n);
  assert_ptx_text(t, n);
  free(t);

  void *e = NULL;
  assert_int_equal(rgpu_fatbin_extract(elf, 0, &e, &n), RGPU_FATBIN_OK);
  assert_memory_equal(e, "\x7f" "ELF", 4);
  free(e);

  /* A limit below the payload size is honoured. */
  assert_int_equal(rgpu_fatbin_extract(ptx, 100, &e, &n), RGPU_FATBIN_ERR_TOO_LARGE);
  assert_null(e);
  /* Trusting the header gives the same walk. */
  rgpu_fatbin fb2;
  assert_int_equal(rgpu_fatbin_open(b.data, RGPU_FATBIN_SIZE_UNKNOWN, &fb2), RGPU_FATBIN_OK);
  assert_int_equal(fb2.nentries, 2);
  rgpu_fatbin_close(&fb2);
  rgpu_fatbin_close(&fb);
  free(b.data);
}

/* zstd, LZ4 and uncompressed builds carry the same PTX text. */
static void test_compressions_agree(void **state) {
  const char *names[] = {"kernels_zstd.fatbin", "kernels_lz4.fatbin", "kernels_none.fatbin",
                         "kernels_ptx.fatbin"};
  const uint64_t want_flag[] = {RGPU_FATBIN_FLAG_ZSTD, RGPU_FATBIN_FLAG_LZ4, 0, RGPU_FATBIN_FLAG_ZSTD};
  char *ref = NULL;
  size_t ref_len = 0;
  for (int i = 0; i < 4; i++) {
    blob b = load(names[i]);
    rgpu_fatbin fb;
    assert_int_equal(rgpu_fatbin_open(b.data, b.size, &fb), RGPU_FATBIN_OK);
    const rgpu_fatbin_entry *ptx = rgpu_fatbin_best_ptx(&fb, 0);
    assert_non_null(ptx);
    assert_int_equal(ptx->flags & (RGPU_FATBIN_FLAG_ZSTD | RGPU_FATBIN_FLAG_LZ4), want_flag[i]);
    size_t n;
    char *t = extract_ptx(&fb, &n);
    assert_ptx_text(t, n);
    if (!ref) {
      ref = t;
      ref_len = n;
    } else {
      assert_int_equal(n, ref_len);
      assert_memory_equal(t, ref, n);
      free(t);
    }
    rgpu_fatbin_close(&fb);
    free(b.data);
  }
  free(ref);
}

static void check_known_layouts(const rgpu_fatbin_param_table *t);

static void test_ptx_only_and_sass_only(void **state) {
  blob b = load("kernels_ptx.fatbin");
  rgpu_fatbin fb;
  assert_int_equal(rgpu_fatbin_open(b.data, b.size, &fb), RGPU_FATBIN_OK);
  assert_int_equal(fb.nentries, 1);
  assert_null(rgpu_fatbin_best_elf(&fb, 0));
  /* No cubin: the table comes from the PTX .entry signatures. */
  rgpu_fatbin_param_table t;
  assert_int_equal(rgpu_fatbin_params(&fb, &t), RGPU_FATBIN_OK);
  check_known_layouts(&t);
  rgpu_fatbin_param_table_free(&t);
  rgpu_fatbin_close(&fb);
  free(b.data);

  b = load("kernels_sass.fatbin");
  assert_int_equal(rgpu_fatbin_open(b.data, b.size, &fb), RGPU_FATBIN_OK);
  assert_int_equal(fb.nentries, 1);
  assert_null(rgpu_fatbin_best_ptx(&fb, 0));
  assert_non_null(rgpu_fatbin_best_elf(&fb, 0));
  rgpu_fatbin_close(&fb);
  free(b.data);
}

static void test_multi_arch_pick(void **state) {
  blob b = load("kernels_multi.fatbin");
  rgpu_fatbin fb;
  assert_int_equal(rgpu_fatbin_open(b.data, b.size, &fb), RGPU_FATBIN_OK);
  assert_int_equal(fb.nentries, 3);
  assert_int_equal(rgpu_fatbin_best_elf(&fb, 0)->arch, 90);
  assert_int_equal(rgpu_fatbin_best_elf(&fb, 89)->arch, 75);
  assert_null(rgpu_fatbin_best_elf(&fb, 70));
  assert_int_equal(rgpu_fatbin_best_ptx(&fb, 0)->arch, 90);
  assert_int_equal(rgpu_fatbin_best_ptx(&fb, 90)->arch, 90);
  assert_null(rgpu_fatbin_best_ptx(&fb, 75));
  rgpu_fatbin_close(&fb);
  free(b.data);
}

static void assert_params(const rgpu_fatbin_param_table *t, const char *name, size_t n,
                          const uint32_t (*want)[2]) {
  const rgpu_fatbin_kernel *k = rgpu_fatbin_param_table_find(t, name);
  if (!k) fail_msg("kernel %s not in the param table", name);
  assert_int_equal(k->nparams, n);
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(k->params[i].offset, want[i][0]);
    assert_int_equal(k->params[i].size, want[i][1]);
  }
}

static void check_known_layouts(const rgpu_fatbin_param_table *t) {
  static const uint32_t vecadd[][2] = {{0, 8}, {8, 8}, {16, 8}, {24, 4}};
  static const uint32_t structk[][2] = {{0, 24}, {24, 8}};
  static const uint32_t tmplf[][2] = {{0, 8}, {8, 4}, {12, 4}};
  static const uint32_t odd[][2] = {{0, 1}, {8, 16}, {24, 2}, {32, 8}, {40, 1}, {48, 8}};
  assert_params(t, "_Z4oddkc3OddsdcPd", 6, odd);
  assert_params(t, "_Z6vecaddPKfS0_Pfi", 4, vecadd);
  assert_params(t, "_Z7structk6ParamsPf", 2, structk);
  assert_params(t, "_Z4tmplIfLi3EEvPT_S0_i", 3, tmplf);
  assert_params(t, "_Z4tmplIiLi5EEvPT_S0_i", 3, tmplf);
  assert_params(t, "noparams", 0, NULL);
  assert_int_equal(rgpu_fatbin_param_table_find(t, "_Z6vecaddPKfS0_Pfi")->param_bytes, 28);
  assert_int_equal(rgpu_fatbin_param_table_find(t, "_Z7structk6ParamsPf")->param_bytes, 32);
  assert_null(rgpu_fatbin_param_table_find(t, "nonexistent"));
}

static void test_param_tables(void **state) {
  const char *names[] = {"kernels_zstd.fatbin", "kernels_multi.fatbin", "kernels_rdc.fatbin",
                         "kernels_sass.fatbin", "kernels_lz4.fatbin"};
  for (int i = 0; i < 5; i++) {
    blob b = load(names[i]);
    rgpu_fatbin fb;
    assert_int_equal(rgpu_fatbin_open(b.data, b.size, &fb), RGPU_FATBIN_OK);
    rgpu_fatbin_param_table t;
    assert_int_equal(rgpu_fatbin_params(&fb, &t), RGPU_FATBIN_OK);
    assert_int_equal(t.nkernels, 10);
    check_known_layouts(&t);
    rgpu_fatbin_param_table_free(&t);
    rgpu_fatbin_close(&fb);
    free(b.data);
  }
  blob c = load("kernels.cubin");
  rgpu_fatbin_param_table t;
  assert_int_equal(rgpu_fatbin_elf_params(c.data, c.size, &t), RGPU_FATBIN_OK);
  check_known_layouts(&t);
  rgpu_fatbin_param_table_free(&t);
  free(c.data);
}

/* The PTX route and the cubin route agree on every kernel. */
static void test_ptx_matches_elf(void **state) {
  blob b = load("kernels_zstd.fatbin");
  rgpu_fatbin fb;
  assert_int_equal(rgpu_fatbin_open(b.data, b.size, &fb), RGPU_FATBIN_OK);
  rgpu_fatbin_param_table te, tp;
  assert_int_equal(rgpu_fatbin_params(&fb, &te), RGPU_FATBIN_OK);
  size_t n;
  char *text = extract_ptx(&fb, &n);
  assert_int_equal(rgpu_fatbin_ptx_params(text, n, &tp), RGPU_FATBIN_OK);
  assert_int_equal(te.nkernels, tp.nkernels);
  for (size_t i = 0; i < tp.nkernels; i++) {
    const rgpu_fatbin_kernel *kp = &tp.kernels[i];
    const rgpu_fatbin_kernel *ke = rgpu_fatbin_param_table_find(&te, kp->name);
    if (!ke) fail_msg("%s in PTX but not in the cubin", kp->name);
    assert_int_equal(kp->nparams, ke->nparams);
    for (size_t j = 0; j < kp->nparams; j++) {
      assert_int_equal(kp->params[j].offset, ke->params[j].offset);
      assert_int_equal(kp->params[j].size, ke->params[j].size);
    }
    if (kp->nparams) assert_int_equal(kp->param_bytes, ke->param_bytes);
  }
  rgpu_fatbin_param_table_free(&te);
  rgpu_fatbin_param_table_free(&tp);
  free(text);
  rgpu_fatbin_close(&fb);
  free(b.data);

  /* nvcc -ptx output, with comments and .file strings, gives the same. */
  blob p = load("kernels.ptx");
  assert_int_equal(rgpu_fatbin_ptx_params((const char *)p.data, p.size, &tp), RGPU_FATBIN_OK);
  check_known_layouts(&tp);
  rgpu_fatbin_param_table_free(&tp);
  free(p.data);
}

static void test_ptx_params_edge_cases(void **state) {
  rgpu_fatbin_param_table t;
  const char *ok =
      "/* .entry commented_out(.param .u32 x) */ .file 1 \"/a/*b.cu\"\n"
      ".visible .entry a(.param .u64 .ptr .global .align 16 p, .param .align 16 .b8 s[40], .param .f16 h)\n"
      "{ ret; }\n.entry b { ret; }\n";
  assert_int_equal(rgpu_fatbin_ptx_params(ok, strlen(ok), &t), RGPU_FATBIN_OK);
  assert_int_equal(t.nkernels, 2);
  static const uint32_t a[][2] = {{0, 8}, {16, 40}, {56, 2}};
  assert_params(&t, "a", 3, a);
  assert_params(&t, "b", 0, NULL);
  rgpu_fatbin_param_table_free(&t);
  /* Long mangled names are kept whole. */
  char big[2100];
  int n = snprintf(big, sizeof big, ".entry _Z");
  for (int i = 0; i < 1500; i++) big[n++] = 'x';
  snprintf(big + n, sizeof big - (size_t)n, "(.param .u32 v)\n{ret;}");
  assert_int_equal(rgpu_fatbin_ptx_params(big, strlen(big), &t), RGPU_FATBIN_OK);
  assert_int_equal(strlen(t.kernels[0].name), 1502);
  rgpu_fatbin_param_table_free(&t);
  const char *bad[] = {".entry k(", ".entry k(.param .u32", ".entry k(.param .u32 )",
                       ".entry k(.param .zz x)", ".entry k(.param .align 3 .b8 x[4])",
                       ".entry k(.param .b8 x[99999999999])", ".entry k(.param .b8 x[4)", ".entry"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *c = (char *)exact_copy((const uint8_t *)bad[i], strlen(bad[i]));
    int rc = rgpu_fatbin_ptx_params(c, strlen(bad[i]), &t);
    if (rc >= 0) fail_msg("accepted bad PTX '%s'", bad[i]);
    assert_int_equal(t.nkernels, 0);
    free(c);
  }
}

static void test_wrapper(void **state) {
  blob b = load("kernels_zstd.fatbin");
  struct {
    uint32_t magic, version;
    const void *data;
    void *fatbins;
  } w = {RGPU_FATBIN_WRAPPER_MAGIC, 1, b.data, NULL};
  const void *d = NULL;
  unsigned v = 0;
  assert_int_equal(rgpu_fatbin_wrapper_data(&w, &d, &v), RGPU_FATBIN_OK);
  assert_ptr_equal(d, b.data);
  assert_int_equal(v, 1);
  assert_int_equal(rgpu_fatbin_image_size(d), b.size);
  w.version = 3;
  assert_int_equal(rgpu_fatbin_wrapper_data(&w, &d, &v), RGPU_FATBIN_ERR_UNSUPPORTED);
  w.version = 2;
  w.data = NULL;
  assert_int_equal(rgpu_fatbin_wrapper_data(&w, &d, &v), RGPU_FATBIN_ERR_CORRUPT);
  w.magic = 0;
  assert_int_equal(rgpu_fatbin_wrapper_data(&w, &d, &v), RGPU_FATBIN_ERR_MAGIC);
  free(b.data);
}

/* Every strict prefix of a fatbin is refused when its real size is given. */
static void test_truncated_fatbins(void **state) {
  const char *names[] = {"kernels_ptx.fatbin", "kernels_zstd.fatbin"};
  for (int k = 0; k < 2; k++) {
    blob b = load(names[k]);
    size_t step = b.size > 4096 ? 7 : 1;
    for (size_t n = 0; n < b.size; n += step) {
      uint8_t *c = exact_copy(b.data, n);
      rgpu_fatbin fb;
      int rc = rgpu_fatbin_open(c, n, &fb);
      assert_true(rc < 0);
      free(c);
    }
    free(b.data);
  }
}

static void test_garbage(void **state) {
  uint8_t zeros[64] = {0};
  rgpu_fatbin fb;
  assert_int_equal(rgpu_fatbin_image_size(zeros), 0);
  assert_int_equal(rgpu_fatbin_open(zeros, sizeof zeros, &fb), RGPU_FATBIN_ERR_MAGIC);
  assert_int_equal(rgpu_fatbin_open(NULL, 10, &fb), RGPU_FATBIN_ERR_ARG);
  assert_int_equal(rgpu_fatbin_image_size(NULL), 0);

  /* A header claiming more than the 1 GiB limit. */
  uint8_t hdr[16] = {0x50, 0xed, 0x55, 0xba, 1, 0, 16, 0, 0, 0, 0, 0x40, 0, 0, 0, 0};
  assert_int_equal(rgpu_fatbin_image_size(hdr), 0);
  assert_int_equal(rgpu_fatbin_open(hdr, sizeof hdr, &fb), RGPU_FATBIN_ERR_TOO_LARGE);
  assert_int_equal(rgpu_fatbin_open(hdr, RGPU_FATBIN_SIZE_UNKNOWN, &fb), RGPU_FATBIN_ERR_TOO_LARGE);
  /* An empty fatbin is valid and has no entries. */
  hdr[11] = 0;
  assert_int_equal(rgpu_fatbin_open(hdr, sizeof hdr, &fb), RGPU_FATBIN_OK);
  assert_int_equal(fb.nentries, 0);
  assert_null(rgpu_fatbin_best_ptx(&fb, 0));
  rgpu_fatbin_close(&fb);

  /* Damaged fields of a real image: entry header_size, payload size, both
   * compression flags, compressed size past the payload. */
  blob b = load("kernels_ptx.fatbin");
  const size_t e = 16;
  struct { size_t off; uint8_t val; int want; } edits[] = {
      {e + 4, 0x10, RGPU_FATBIN_ERR_TRUNCATED},  /* header_size 16 < 64 */
      {e + 7, 0x10, RGPU_FATBIN_ERR_TRUNCATED},  /* header_size huge */
      {e + 14, 0x01, RGPU_FATBIN_ERR_TRUNCATED}, /* payload size huge */
      {e + 41, 0xa0, RGPU_FATBIN_ERR_CORRUPT},   /* LZ4 | zstd */
      {e + 19, 0x01, RGPU_FATBIN_ERR_CORRUPT},   /* compressed > payload */
      {e + 63, 0x01, RGPU_FATBIN_ERR_TOO_LARGE}, /* uncompressed size huge */
      {4, 2, RGPU_FATBIN_ERR_CORRUPT},           /* version */
  };
  for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
    uint8_t *c = exact_copy(b.data, b.size);
    c[edits[i].off] = edits[i].val;
    assert_int_equal(rgpu_fatbin_open(c, b.size, &fb), edits[i].want);
    free(c);
  }

  /* Damaged compressed payload: opens, but extraction fails cleanly. */
  uint8_t *c = exact_copy(b.data, b.size);
  assert_int_equal(rgpu_fatbin_open(c, b.size, &fb), RGPU_FATBIN_OK);
  const rgpu_fatbin_entry *ptx = rgpu_fatbin_best_ptx(&fb, 0);
  for (size_t i = 8; i < ptx->compressed_size; i++) c[ptx->offset + 80 + i] ^= 0x5a;
  void *out = NULL;
  size_t n = 0;
  assert_int_equal(rgpu_fatbin_extract(ptx, 0, &out, &n), RGPU_FATBIN_ERR_DECOMPRESS);
  assert_null(out);
  rgpu_fatbin_close(&fb);
  free(c);

  /* Every byte flipped in turn: any result is fine as long as nothing
   * crashes and successful extractions stay within their limits. */
  for (size_t i = 0; i < 96 + 64; i++) {
    c = exact_copy(b.data, b.size);
    c[i] ^= 0xff;
    if (rgpu_fatbin_open(c, b.size, &fb) == RGPU_FATBIN_OK) {
      for (size_t j = 0; j < fb.nentries; j++) {
        if (rgpu_fatbin_extract(&fb.entries[j], 1 << 20, &out, &n) == RGPU_FATBIN_OK) {
          assert_true(n <= 1 << 20);
          free(out);
        }
      }
      rgpu_fatbin_close(&fb);
    }
    free(c);
  }
  free(b.data);
  for (int i = -10; i <= 0; i++) assert_non_null(rgpu_fatbin_strerror(i));
}

static void test_elf_damage(void **state) {
  blob b = load("kernels.cubin");
  rgpu_fatbin_param_table t;
  assert_int_equal(rgpu_fatbin_elf_params("nope", 4, &t), RGPU_FATBIN_ERR_TRUNCATED);
  for (size_t n = 0; n < b.size; n += 61) {
    uint8_t *c = exact_copy(b.data, n);
    int rc = rgpu_fatbin_elf_params(c, n, &t);
    if (rc == RGPU_FATBIN_OK) rgpu_fatbin_param_table_free(&t);
    else assert_int_equal(t.nkernels, 0);
    free(c);
  }
  /* Byte flips all over the section headers and the .nv.info sections. */
  for (size_t i = 0; i < b.size; i += 3) {
    uint8_t *c = exact_copy(b.data, b.size);
    c[i] ^= 0xa5;
    if (rgpu_fatbin_elf_params(c, b.size, &t) == RGPU_FATBIN_OK) rgpu_fatbin_param_table_free(&t);
    free(c);
  }
  free(b.data);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_default_zstd),     cmocka_unit_test(test_compressions_agree),
      cmocka_unit_test(test_ptx_only_and_sass_only), cmocka_unit_test(test_multi_arch_pick),
      cmocka_unit_test(test_param_tables),     cmocka_unit_test(test_truncated_fatbins),
      cmocka_unit_test(test_garbage),          cmocka_unit_test(test_elf_damage),
      cmocka_unit_test(test_ptx_matches_elf),  cmocka_unit_test(test_ptx_params_edge_cases),
      cmocka_unit_test(test_wrapper),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
