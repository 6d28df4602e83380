/* rgpu_fatbin_filter against a real nvcc fatbin (softgpu/testdata/kernels.cu
 * built at build time with sm_75 SASS, compute_75 PTX and sm_90 SASS), and
 * the choice rules on hand-made entry tables. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rgpu_fatbin_filter.h"
#include "rgpu_fatbin_testdata.h"

/* Decompressed contents of an entry, for comparing the filtered image's
 * entry with the original's. */
static void *contents(const rgpu_fatbin_entry *e, size_t *len) {
  void *p;
  assert_int_equal(rgpu_fatbin_extract(e, 0, &p, len), RGPU_FATBIN_OK);
  return p;
}

/* Filters the test fatbin for (cc, sass_ok) and checks that the result is
 * a fatbin of exactly one entry, of the expected kind and arch, whose
 * contents are the original entry's. */
static void check_filter(const blob *b, const rgpu_fatbin *orig, unsigned cc, int sass_ok,
                         unsigned kind, unsigned arch) {
  void *out;
  size_t n;
  assert_int_equal(rgpu_fatbin_filter(b->data, b->size, cc, sass_ok, &out, &n), RGPU_FATBIN_OK);
  assert_true(n < b->size);
  rgpu_fatbin f;
  assert_int_equal(rgpu_fatbin_open(out, n, &f), RGPU_FATBIN_OK);
  assert_int_equal(f.size, n);
  assert_int_equal(f.nentries, 1);
  assert_int_equal(f.entries[0].kind, kind);
  assert_int_equal(f.entries[0].arch, arch);
  const rgpu_fatbin_entry *want = rgpu_fatbin_pick(orig, cc, sass_ok);
  assert_non_null(want);
  assert_int_equal(want->kind, kind);
  assert_int_equal(want->arch, arch);
  /* Copied verbatim (still compressed as stored)... */
  assert_int_equal(f.entries[0].payload_size, want->payload_size);
  assert_memory_equal(f.entries[0].payload, want->payload, want->payload_size);
  /* ...so it decodes to the same code. */
  size_t l1, l2;
  void *c1 = contents(&f.entries[0], &l1), *c2 = contents(want, &l2);
  assert_int_equal(l1, l2);
  assert_memory_equal(c1, c2, l1);
  free(c1);
  free(c2);
  /* What softgpu does with a fatbin: the best PTX for sm_75. */
  if (kind == RGPU_FATBIN_KIND_PTX) assert_non_null(rgpu_fatbin_best_ptx(&f, 75));
  rgpu_fatbin_close(&f);
  free(out);
}

static void test_real_fatbin(void **state) {
  (void)state;
  blob b = load("kernels_filter.fatbin");
  rgpu_fatbin fb;
  assert_int_equal(rgpu_fatbin_open(b.data, b.size, &fb), RGPU_FATBIN_OK);
  int elf75 = 0, ptx75 = 0, elf90 = 0;
  for (size_t i = 0; i < fb.nentries; i++) {
    const rgpu_fatbin_entry *e = &fb.entries[i];
    elf75 += e->kind == RGPU_FATBIN_KIND_ELF && e->arch == 75;
    ptx75 += e->kind == RGPU_FATBIN_KIND_PTX && e->arch == 75;
    elf90 += e->kind == RGPU_FATBIN_KIND_ELF && e->arch == 90;
  }
  assert_int_equal(fb.nentries, 3);
  assert_true(elf75 == 1 && ptx75 == 1 && elf90 == 1);

  /* Its own SASS for sm_75 and sm_90. */
  check_filter(&b, &fb, 75, 1, RGPU_FATBIN_KIND_ELF, 75);
  check_filter(&b, &fb, 90, 1, RGPU_FATBIN_KIND_ELF, 90);
  /* sm_86 and sm_120: no SASS of their major, so the PTX (JIT). */
  check_filter(&b, &fb, 86, 1, RGPU_FATBIN_KIND_PTX, 75);
  check_filter(&b, &fb, 120, 1, RGPU_FATBIN_KIND_PTX, 75);
  /* softgpu (sm_75, PTX only): the PTX, not the sm_75 SASS. */
  check_filter(&b, &fb, 75, 0, RGPU_FATBIN_KIND_PTX, 75);
  /* sm_70 runs none of it: the caller sends the image whole. */
  void *out = (void *)1;
  size_t n = 1;
  assert_null(rgpu_fatbin_pick(&fb, 70, 1));
  assert_int_equal(rgpu_fatbin_filter(b.data, b.size, 70, 1, &out, &n), RGPU_FATBIN_ERR_NOT_FOUND);
  assert_null(out);
  assert_int_equal(n, 0);
  /* A truncated image is refused, never read past its end. */
  assert_int_equal(rgpu_fatbin_filter(b.data, b.size - 1, 75, 1, &out, &n),
                   RGPU_FATBIN_ERR_TRUNCATED);
  rgpu_fatbin_close(&fb);
  free(b.data);

  /* A bare cubin is no fatbin (cuModuleLoadData's other inputs): sent as is. */
  b = load("kernels.cubin");
  assert_int_equal(rgpu_fatbin_filter(b.data, b.size, 75, 1, &out, &n), RGPU_FATBIN_ERR_MAGIC);
  free(b.data);
}

/* The rules on entry tables no toolkit here emits: arch-specific cubins,
 * a lower minor of the same major, several PTX versions. */
static void test_pick_rules(void **state) {
  (void)state;
  rgpu_fatbin_entry e[] = {
      {.kind = RGPU_FATBIN_KIND_ELF, .arch = 80},
      {.kind = RGPU_FATBIN_KIND_ELF, .arch = 90, .flags = RGPU_FATBIN_FLAG_ARCH_SPECIFIC},
      {.kind = RGPU_FATBIN_KIND_PTX, .arch = 70},
      {.kind = RGPU_FATBIN_KIND_PTX, .arch = 80},
      {.kind = RGPU_FATBIN_KIND_PTX, .arch = 90, .flags = RGPU_FATBIN_FLAG_ARCH_SPECIFIC},
      {.kind = 4 /* neither cubin nor PTX: never chosen */, .arch = 89},
  };
  rgpu_fatbin fb = {.nentries = sizeof e / sizeof e[0], .entries = e};
  assert_ptr_equal(rgpu_fatbin_pick(&fb, 80, 1), &e[0]);
  assert_ptr_equal(rgpu_fatbin_pick(&fb, 86, 1), &e[0]); /* sm_80 SASS runs on sm_86 */
  assert_ptr_equal(rgpu_fatbin_pick(&fb, 89, 1), &e[0]);
  assert_ptr_equal(rgpu_fatbin_pick(&fb, 90, 1), &e[1]); /* sm_90a on sm_90 exactly */
  assert_ptr_equal(rgpu_fatbin_pick(&fb, 100, 1), &e[3]); /* compute_80 PTX, not 90a */
  assert_ptr_equal(rgpu_fatbin_pick(&fb, 90, 0), &e[4]);
  assert_ptr_equal(rgpu_fatbin_pick(&fb, 86, 0), &e[3]);
  assert_ptr_equal(rgpu_fatbin_pick(&fb, 75, 1), &e[2]); /* no SASS of major 7 */
  assert_null(rgpu_fatbin_pick(&fb, 60, 1));
  assert_null(rgpu_fatbin_pick(&fb, 0, 1));
  assert_null(rgpu_fatbin_pick(NULL, 90, 1));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_real_fatbin),
      cmocka_unit_test(test_pick_rules),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
