/* LIB_CALL for cuBLAS in-process on softgpu (rgpu_cublas_server.c and the
 * generated decoders): what a hostile or broken client gets.  Every bad
 * request is refused with a reason and leaves the session usable; a good
 * one computes the right numbers. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cublas_api.h>
#include <cuda.h>

#include "rgpu_handlers_test_harness.h"
#include "rgpu_lib_args.h"
#include "rgpu_messages.h"
#include "rgpu_worker.h"

static char softgpu_lib[480];

static harness *open_session(void) {
  harness *t = harness_open(softgpu_lib, 9, 0);
  harness_hello(t);
  return t;
}

/* One LIB_CALL of `name` with encoded arguments args (mode: pointer mode). */
static uint32_t lib_call(harness *t, const char *name, uint32_t mode, const rgpu_buf *args) {
  /* The encoder writes the fixed fields; the tail (args) follows. */
  rgpu_msg_lib_call_req q = {.lib = RGPU_LIB_CUBLAS, .fn = rgpu_lib_fn_hash(name),
                             .handle = 1, .pointer_mode = mode};
  return HARNESS_SEND(t, RGPU_OP_LIB_CALL, lib_call, &q, args->data, args->len);
}

static const char *reason(harness *t) {
  static char msg[600];
  snprintf(msg, sizeof msg, "%.*s", (int)t->h.length, (const char *)t->p);
  return msg;
}

/* cublasSdot_v2(n, x, incx, y, incy, result) in host mode. */
static void put_sdot(rgpu_buf *b, int64_t n, uint64_t x, int64_t incx, uint64_t y, int64_t incy) {
  rgpu_buf_reset(b);
  rgpu_lib_put_value(b, n);
  rgpu_buf_put_u64(b, x);
  rgpu_lib_put_value(b, incx);
  rgpu_buf_put_u64(b, y);
  rgpu_lib_put_value(b, incy);
}

static int have_softgpu(void) {
  if (access(softgpu_lib, R_OK) == 0) return 1;
  print_message("skipped: %s not built\n", softgpu_lib);
  return 0;
}

static void test_good_and_hostile_calls(void **state) {
  (void)state;
  if (!have_softgpu()) return;
  harness *t = open_session();
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  uint64_t d = harness_mem_alloc(t, sizeof x);
  harness_htod(t, d, x, sizeof x);
  rgpu_buf b;
  rgpu_buf_init(&b);

  /* A good dot: the reply is the head (status 0) and the result. */
  put_sdot(&b, 8, d, 1, d, 1);
  assert_int_equal(lib_call(t, "cublasSdot_v2", CUBLAS_POINTER_MODE_HOST, &b), 0);
  assert_int_equal(t->h.length, RGPU_LIB_REPLY_HEAD + sizeof(float));
  uint32_t st;
  float r;
  memcpy(&st, t->p, 4);
  memcpy(&r, t->p + RGPU_LIB_REPLY_HEAD, 4);
  assert_int_equal(st, CUBLAS_STATUS_SUCCESS);
  assert_true(r == 204.0f);

  /* An unknown function, another library. */
  assert_int_equal(lib_call(t, "cublasNoSuchThing", 0, &b), CUDA_ERROR_NOT_SUPPORTED);
  assert_non_null(strstr(reason(t), "unknown to this server"));
  rgpu_msg_lib_call_req q = {.lib = 77, .fn = rgpu_lib_fn_hash("cublasSdot_v2")};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_LIB_CALL, lib_call, &q, b.data, b.len),
                   CUDA_ERROR_NOT_SUPPORTED);

  /* Arguments short by one, and one too many. */
  rgpu_buf_reset(&b);
  rgpu_lib_put_value(&b, 8);
  assert_int_equal(lib_call(t, "cublasSdot_v2", 0, &b), CUDA_ERROR_INVALID_VALUE);
  assert_non_null(strstr(reason(t), "malformed"));
  put_sdot(&b, 8, d, 1, d, 1);
  rgpu_lib_put_value(&b, 1);
  assert_int_equal(lib_call(t, "cublasSdot_v2", 0, &b), CUDA_ERROR_INVALID_VALUE);

  /* Vectors outside the session's memory, or beyond an allocation. */
  put_sdot(&b, 8, (uint64_t)(uintptr_t)x, 1, d, 1);
  assert_int_equal(lib_call(t, "cublasSdot_v2", 0, &b), CUDA_ERROR_INVALID_VALUE);
  assert_non_null(strstr(reason(t), "not inside a device allocation"));
  put_sdot(&b, 100000, d, 1, d, 1);
  assert_int_equal(lib_call(t, "cublasSdot_v2", 0, &b), CUDA_ERROR_INVALID_VALUE);
  /* Extents that overflow (the _64 form: an int parameter is truncated to
   * int on both sides alike, so only a 64-bit one can be this large). */
  put_sdot(&b, 2, d, INT64_MAX, d, 1);
  assert_int_equal(lib_call(t, "cublasSdot_v2_64", 0, &b), CUDA_ERROR_INVALID_VALUE);
  assert_non_null(strstr(reason(t), "overflows"));
  put_sdot(&b, 2, d, INT64_MIN, d, 1);
  assert_int_equal(lib_call(t, "cublasSdot_v2_64", 0, &b), CUDA_ERROR_INVALID_VALUE);
  /* A bad pointer mode. */
  put_sdot(&b, 8, d, 1, d, 1);
  assert_int_equal(lib_call(t, "cublasSdot_v2", 7, &b), CUDA_ERROR_INVALID_VALUE);
  /* Device mode: a result address outside the session. */
  put_sdot(&b, 8, d, 1, d, 1);
  rgpu_buf_put_u64(&b, 0x1000);
  assert_int_equal(lib_call(t, "cublasSdot_v2", CUBLAS_POINTER_MODE_DEVICE, &b),
                   CUDA_ERROR_INVALID_VALUE);

  /* A host-mode scalar of the wrong size (saxpy's alpha is a float). */
  rgpu_buf_reset(&b);
  double big = 2;
  rgpu_lib_put_value(&b, 8);
  rgpu_lib_put_scalar(&b, 0, &big, sizeof big);
  rgpu_buf_put_u64(&b, d);
  rgpu_lib_put_value(&b, 1);
  rgpu_buf_put_u64(&b, d);
  rgpu_lib_put_value(&b, 1);
  assert_int_equal(lib_call(t, "cublasSaxpy_v2", 0, &b), CUDA_ERROR_INVALID_VALUE);
  /* A scalar longer than any scalar. */
  rgpu_buf_reset(&b);
  unsigned char huge[RGPU_LIB_SCALAR_MAX + 8] = {0};
  rgpu_lib_put_value(&b, 8);
  rgpu_lib_put_scalar(&b, 0, huge, sizeof huge);
  assert_int_equal(lib_call(t, "cublasSaxpy_v2", 0, &b), CUDA_ERROR_INVALID_VALUE);

  /* A gemm whose pointer array names memory outside the session: the
   * arrays lie in the session, the matrices they name do not; the host
   * function skips the batch (logged) instead of reading them. */
  uint64_t arrays = harness_mem_alloc(t, 3 * sizeof(uint64_t));
  uint64_t bad[3] = {0x1000, 0x1000, 0x1000};
  harness_htod(t, arrays, bad, sizeof bad);
  float one = 1;
  rgpu_buf_reset(&b);
  rgpu_lib_put_value(&b, CUBLAS_OP_N);
  rgpu_lib_put_value(&b, CUBLAS_OP_N);
  rgpu_lib_put_value(&b, 2);
  rgpu_lib_put_value(&b, 2);
  rgpu_lib_put_value(&b, 2);
  rgpu_lib_put_scalar(&b, 0, &one, sizeof one);
  rgpu_buf_put_u64(&b, arrays);
  rgpu_lib_put_value(&b, 2);
  rgpu_buf_put_u64(&b, arrays + 8);
  rgpu_lib_put_value(&b, 2);
  rgpu_lib_put_scalar(&b, 0, &one, sizeof one);
  rgpu_buf_put_u64(&b, arrays + 16);
  rgpu_lib_put_value(&b, 2);
  rgpu_lib_put_value(&b, 1);
  assert_int_equal(lib_call(t, "cublasSgemmBatched", 0, &b), 0);

  /* The session still computes. */
  float back[8];
  put_sdot(&b, 4, d, 2, d, 2);
  assert_int_equal(lib_call(t, "cublasSdot_v2", 0, &b), 0);
  memcpy(&r, t->p + RGPU_LIB_REPLY_HEAD, 4);
  assert_true(r == 1 + 9 + 25 + 49);
  harness_dtoh(t, d, back, sizeof back);
  assert_memory_equal(back, x, sizeof x);
  rgpu_buf_free(&b);
  harness_free(t);
}

int main(void) {
  char self[900];
  harness_exe_dir(self, sizeof self);
  snprintf(softgpu_lib, sizeof softgpu_lib, "%.400s/../lib/libsoftgpu.so", self);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_good_and_hostile_calls),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
