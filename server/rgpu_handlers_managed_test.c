/* MANAGED_PULL on softgpu (rgpu_handlers_managed.c): the first pull sends
 * every chunk, a second only those the device changed since, a pull after
 * the allocation was freed and made again sends everything again; bad
 * sizes, chunks and foreign memory are refused by name. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "rgpu_handlers_test_harness.h"
#include "rgpu_managed_proto.h"
#include "rgpu_worker_internal.h"

static char softgpu_lib[480];

static int softgpu_built(void) {
  if (access(softgpu_lib, R_OK) == 0) return 1;
  print_message("skipped: %s not built\n", softgpu_lib);
  return 0;
}

/* Pulls [ptr, ptr + size) in chunks of 4 KiB; the bitmap's first byte. */
static uint32_t pull(harness *t, uint64_t ptr, uint64_t size, uint8_t *bits) {
  rgpu_msg_managed_pull_req q = {.ptr = ptr, .size = size, .chunk = 4096};
  uint32_t st = HARNESS_SEND(t, RGPU_OP_MANAGED_PULL, managed_pull, &q, NULL, 0);
  if (st == 0 && bits) *bits = t->p[0];
  return st;
}

static void test_pull_sends_changed_chunks(void **state) {
  (void)state;
  if (!softgpu_built()) return;
  harness *t = harness_open(softgpu_lib, 41, 0);
  harness_hello(t);
  enum { N = 4 * 4096 + 100 }; /* five chunks, the last short */
  uint64_t dev = harness_mem_alloc(t, N);
  static uint8_t data[N];
  for (int i = 0; i < N; i++) data[i] = (uint8_t)(i * 7);
  harness_htod(t, dev, data, N);
  uint8_t bits = 0;
  assert_int_equal(pull(t, dev, N, &bits), 0);
  assert_int_equal(bits, 0x1f); /* the first time: all five */
  assert_int_equal(t->h.length, 1 + N);
  assert_memory_equal(t->p + 1, data, N);
  /* Unchanged: nothing but the bitmap. */
  assert_int_equal(pull(t, dev, N, &bits), 0);
  assert_int_equal(bits, 0);
  assert_int_equal(t->h.length, 1);
  /* One byte in chunk 1 and the short last chunk. */
  uint8_t one = 0xee;
  harness_htod(t, dev + 4096 + 5, &one, 1);
  harness_htod(t, dev + N - 1, &one, 1);
  assert_int_equal(pull(t, dev, N, &bits), 0);
  assert_int_equal(bits, 0x12);
  assert_int_equal(t->h.length, 1 + 4096 + 100);
  assert_int_equal(t->p[1 + 5], 0xee);
  assert_int_equal(t->p[1 + 4096 + 99], 0xee);
  assert_true(t->w->managed_copy_bytes == N);
  /* Freed: the copy goes with the allocation. */
  rgpu_msg_mem_free_req fq = {.dptr = dev};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_MEM_FREE, mem_free, &fq, NULL, 0), 0);
  assert_int_equal(t->w->managed_copies.n, 0);
  assert_true(t->w->managed_copy_bytes == 0);
  harness_free(t);
}

static void test_pull_hostile(void **state) {
  (void)state;
  if (!softgpu_built()) return;
  harness *t = harness_open(softgpu_lib, 42, 0);
  harness_hello(t);
  uint64_t dev = harness_mem_alloc(t, 8192);
  assert_int_equal(pull(t, dev, 0, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(pull(t, dev, 8193, NULL), CUDA_ERROR_INVALID_VALUE); /* past the end */
  assert_int_equal(pull(t, 0x1000, 4096, NULL), CUDA_ERROR_INVALID_VALUE); /* not ours */
  assert_int_equal(pull(t, dev, RGPU_MANAGED_PULL_MAX_BYTES + 1, NULL), CUDA_ERROR_INVALID_VALUE);
  rgpu_msg_managed_pull_req q = {.ptr = dev, .size = 8192, .chunk = 5000};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_MANAGED_PULL, managed_pull, &q, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE); /* not a power of two */
  q.chunk = 1024;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_MANAGED_PULL, managed_pull, &q, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE); /* too small */
  assert_int_equal(t->w->managed_copies.n, 0);
  harness_free(t);
}

/* A quota bounds the copies: beyond it a range is sent whole every time. */
static void test_pull_copies_bounded(void **state) {
  (void)state;
  if (!softgpu_built()) return;
  harness *t = harness_open(softgpu_lib, 43, 3 * 4096);
  harness_hello(t);
  uint64_t a = harness_mem_alloc(t, 8192), b = harness_mem_alloc(t, 4096);
  uint8_t bits;
  assert_int_equal(pull(t, a, 8192, &bits), 0);
  assert_int_equal(pull(t, a + 4096, 4096, &bits), 0); /* a range of its own */
  assert_int_equal(pull(t, b, 4096, &bits), 0);
  assert_int_equal(t->w->managed_copies.n, 2); /* b's would pass the quota */
  assert_int_equal(pull(t, b, 4096, &bits), 0);
  assert_int_equal(bits, 1);
  assert_int_equal(pull(t, a, 8192, &bits), 0);
  assert_int_equal(bits, 0);
  harness_free(t);
}

int main(void) {
  char self[420];
  harness_exe_dir(self, sizeof self);
  snprintf(softgpu_lib, sizeof softgpu_lib, "%.400s/../lib/libsoftgpu.so", self);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pull_sends_changed_chunks),
      cmocka_unit_test(test_pull_hostile),
      cmocka_unit_test(test_pull_copies_bounded),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
