/* Test data for the fatbin unit tests (rgpu_fatbin_test.c,
 * rgpu_fatbin_filter_test.c): files nvcc built from
 * softgpu/testdata/kernels.cu at build time, in RGPU_FATBIN_TESTDATA.
 * Include after <cmocka.h>. */
#ifndef RGPU_FATBIN_TESTDATA_H
#define RGPU_FATBIN_TESTDATA_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef RGPU_FATBIN_TESTDATA
#define RGPU_FATBIN_TESTDATA ""
#endif

typedef struct {
  uint8_t *data;
  size_t size;
} blob;

/* The whole of test data file `name` (free data); fails the test when it
 * is missing. */
static blob load(const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", RGPU_FATBIN_TESTDATA, name);
  blob b = {0};
  FILE *f = fopen(path, "rb");
  if (!f) {
    fail_msg("cannot open test data %s (build target sg_testdata)", path);
    return b;
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  b.data = malloc((size_t)n);
  b.size = (size_t)n;
  assert_non_null(b.data);
  assert_int_equal(fread(b.data, 1, b.size, f), b.size);
  fclose(f);
  return b;
}

#endif
