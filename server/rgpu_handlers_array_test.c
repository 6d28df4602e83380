/* CUDA arrays, texture and surface objects on softgpu, driven as a hostile
 * client would (rgpu_handlers_array.c): a forged or reused array id, a copy
 * box past the array's edge or a device box past its allocation, host data
 * of the wrong length, a texture on memory that is not the session's, and
 * the memory quota; and what a well-behaved client gets: a round trip
 * host -> array -> device -> host, and texture objects destroyed with the
 * array under them. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "rgpu_array_proto.h"
#include "rgpu_handlers_test_harness.h"
#include "rgpu_worker_internal.h" /* the session's tables */

static char softgpu_lib[480];

static int softgpu_built(void) {
  if (access(softgpu_lib, R_OK) == 0) return 1;
  print_message("skipped: %s not built\n", softgpu_lib);
  return 0;
}

/* A 2D float array of w x h elements named id. */
static uint32_t make_array(harness *t, uint64_t id, uint64_t w, uint64_t h, uint32_t flags) {
  rgpu_msg_array_create_req q = {.array = id, .format = CU_AD_FORMAT_FLOAT, .channels = 1,
                                 .width = w, .height = h, .flags = flags};
  return HARNESS_SEND(t, RGPU_OP_ARRAY_CREATE, array_create, &q, NULL, 0);
}

static void test_array_round_trip(void **state) {
  (void)state;
  if (!softgpu_built()) return;
  harness *t = harness_open(softgpu_lib, 31, 0);
  harness_hello(t);
  assert_int_equal(make_array(t, 7, 16, 8, 0), 0);
  assert_int_equal(t->w->array_bytes, 16 * 8 * 4);
  float in[4 * 3], out[4 * 3];
  for (int i = 0; i < 12; i++) in[i] = (float)i * 1.5f;
  /* Host -> array at (2, 3): 4 floats x 3 rows. */
  rgpu_msg_array_copy_req q = {.width = 16, .height = 3, .depth = 1,
                               .src_kind = RGPU_COPY_SIDE_HOST,
                               .dst_kind = RGPU_COPY_SIDE_ARRAY, .dst_array = 7,
                               .dst_x = 8, .dst_y = 3};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_ARRAY_COPY, array_copy, &q, in, sizeof in), 0);
  /* Array -> device memory (pitch 64, 3 rows), then device -> host. */
  uint64_t dev = harness_mem_alloc(t, 64 * 3);
  rgpu_msg_array_copy_req a2d = {.width = 16, .height = 3, .depth = 1,
                                 .src_kind = RGPU_COPY_SIDE_ARRAY, .src_array = 7, .src_x = 8,
                                 .src_y = 3, .dst_kind = RGPU_COPY_SIDE_DEVICE, .dst_ptr = dev,
                                 .dst_pitch = 64, .dst_rows = 3};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_ARRAY_COPY, array_copy, &a2d, NULL, 0), 0);
  uint8_t back[64 * 3];
  harness_dtoh(t, dev, back, sizeof back);
  for (int r = 0; r < 3; r++) memcpy(out + r * 4, back + r * 64, 16);
  assert_memory_equal(in, out, sizeof in);
  /* Array -> host: the reply's tail. */
  rgpu_msg_array_copy_req a2h = {.width = 16, .height = 3, .depth = 1,
                                 .src_kind = RGPU_COPY_SIDE_ARRAY, .src_array = 7, .src_x = 8,
                                 .src_y = 3, .dst_kind = RGPU_COPY_SIDE_HOST};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_ARRAY_COPY, array_copy, &a2h, NULL, 0), 0);
  assert_int_equal(t->h.length, sizeof in);
  assert_memory_equal(t->p, in, sizeof in);
  rgpu_msg_array_destroy_req d = {.array = 7};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_ARRAY_DESTROY, array_destroy, &d, NULL, 0), 0);
  assert_int_equal(t->w->array_bytes, 0);
  harness_free(t);
}

static void test_array_hostile(void **state) {
  (void)state;
  if (!softgpu_built()) return;
  harness *t = harness_open(softgpu_lib, 32, 0);
  harness_hello(t);
  assert_int_equal(make_array(t, 0, 4, 4, 0), CUDA_ERROR_INVALID_VALUE);      /* id 0 */
  assert_int_equal(make_array(t, 5, 4, 4, 0), 0);
  assert_int_equal(make_array(t, 5, 4, 4, 0), CUDA_ERROR_INVALID_VALUE);      /* reused */
  assert_non_null(strstr((const char *)t->p, "already exists"));
  rgpu_msg_array_create_req bad = {.array = 6, .format = CU_AD_FORMAT_FLOAT, .channels = 3,
                                   .width = 4, .height = 4};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_ARRAY_CREATE, array_create, &bad, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);                                  /* 3 channels */
  bad.channels = 1, bad.width = 1ull << 40, bad.height = 1ull << 40;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_ARRAY_CREATE, array_create, &bad, NULL, 0),
                   CUDA_ERROR_OUT_OF_MEMORY);                                  /* 2^82 bytes */
  float data[16] = {0};
  /* A box one byte past the right edge, one row past the bottom. */
  rgpu_msg_array_copy_req q = {.width = 16, .height = 4, .depth = 1,
                               .src_kind = RGPU_COPY_SIDE_HOST, .dst_kind = RGPU_COPY_SIDE_ARRAY,
                               .dst_array = 5, .dst_x = 1};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_ARRAY_COPY, array_copy, &q, data, sizeof data),
                   CUDA_ERROR_INVALID_VALUE);
  q.dst_x = 0, q.dst_y = 1;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_ARRAY_COPY, array_copy, &q, data, sizeof data),
                   CUDA_ERROR_INVALID_VALUE);
  q.dst_y = 0;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_ARRAY_COPY, array_copy, &q, data, 60),
                   CUDA_ERROR_INVALID_VALUE);                                  /* short data */
  q.dst_array = 99;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_ARRAY_COPY, array_copy, &q, data, sizeof data),
                   CUDA_ERROR_INVALID_HANDLE);                                 /* forged id */
  /* Device side past its allocation, and a device pointer of nobody's. */
  uint64_t dev = harness_mem_alloc(t, 48);
  rgpu_msg_array_copy_req a2d = {.width = 16, .height = 4, .depth = 1,
                                 .src_kind = RGPU_COPY_SIDE_ARRAY, .src_array = 5,
                                 .dst_kind = RGPU_COPY_SIDE_DEVICE, .dst_ptr = dev,
                                 .dst_pitch = 16, .dst_rows = 4};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_ARRAY_COPY, array_copy, &a2d, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  a2d.dst_ptr = 0x1000;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_ARRAY_COPY, array_copy, &a2d, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  a2d.dst_ptr = dev, a2d.height = 3, a2d.dst_rows = 3;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_ARRAY_COPY, array_copy, &a2d, NULL, 0), 0);
  /* Host to host is no array copy. */
  rgpu_msg_array_copy_req hh = {.width = 4, .height = 1, .depth = 1};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_ARRAY_COPY, array_copy, &hh, data, 4),
                   CUDA_ERROR_INVALID_VALUE);
  /* A texture on memory that is not the session's. */
  rgpu_msg_texobj_create_req tq = {.res_type = CU_RESOURCE_TYPE_LINEAR, .ptr = dev + 4096,
                                   .format = CU_AD_FORMAT_FLOAT, .channels = 1, .width = 16};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_TEXOBJ_CREATE, texobj_create, &tq, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  /* Destroying an unknown texture, surface or array. */
  rgpu_msg_texobj_destroy_req td = {.texobj = 12345};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_TEXOBJ_DESTROY, texobj_destroy, &td, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  rgpu_msg_surfobj_destroy_req sd = {.surfobj = 12345};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_SURFOBJ_DESTROY, surfobj_destroy, &sd, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  rgpu_msg_array_destroy_req ad = {.array = 77};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_ARRAY_DESTROY, array_destroy, &ad, NULL, 0),
                   CUDA_ERROR_INVALID_HANDLE);
  harness_free(t);
}

/* Texture objects on an array and on an allocation go when the memory under
 * them does; the session's tables forget them. */
static void test_views_die_with_their_memory(void **state) {
  (void)state;
  if (!softgpu_built()) return;
  harness *t = harness_open(softgpu_lib, 33, 0);
  harness_hello(t);
  assert_int_equal(make_array(t, 3, 8, 8, CUDA_ARRAY3D_SURFACE_LDST), 0);
  rgpu_msg_texobj_create_req tq = {.res_type = CU_RESOURCE_TYPE_ARRAY, .array = 3,
                                   .filter_mode = CU_TR_FILTER_MODE_POINT};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_TEXOBJ_CREATE, texobj_create, &tq, NULL, 0), 0);
  rgpu_msg_surfobj_create_req sq = {.array = 3};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_SURFOBJ_CREATE, surfobj_create, &sq, NULL, 0), 0);
  uint64_t dev = harness_mem_alloc(t, 256);
  rgpu_msg_texobj_create_req lq = {.res_type = CU_RESOURCE_TYPE_LINEAR, .ptr = dev + 64,
                                   .format = CU_AD_FORMAT_FLOAT, .channels = 1, .width = 128};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_TEXOBJ_CREATE, texobj_create, &lq, NULL, 0), 0);
  assert_int_equal(t->w->texobjs.n, 2);
  assert_int_equal(t->w->surfobjs.n, 1);
  rgpu_msg_mem_free_req fq = {.dptr = dev};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_MEM_FREE, mem_free, &fq, NULL, 0), 0);
  assert_int_equal(t->w->texobjs.n, 1);
  rgpu_msg_array_destroy_req ad = {.array = 3};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_ARRAY_DESTROY, array_destroy, &ad, NULL, 0), 0);
  assert_int_equal(t->w->texobjs.n, 0);
  assert_int_equal(t->w->surfobjs.n, 0);
  harness_free(t);
}

/* Arrays count against --mem-quota with cuMemAlloc'ed memory, and a device
 * heap (CTX_LIMIT) must fit beside them. */
static void test_array_quota(void **state) {
  (void)state;
  if (!softgpu_built()) return;
  harness *t = harness_open(softgpu_lib, 34, 1 << 20);
  harness_hello(t);
  assert_int_equal(make_array(t, 1, 256, 512, 0), 0); /* 512 KiB */
  assert_int_equal(make_array(t, 2, 256, 512, 0), 0); /* 1 MiB in all */
  assert_int_equal(make_array(t, 3, 1, 1, 0), CUDA_ERROR_OUT_OF_MEMORY);
  assert_non_null(strstr((const char *)t->p, "quota"));
  rgpu_msg_mem_alloc_req q = {.size = 16};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_MEM_ALLOC, mem_alloc, &q, NULL, 0),
                   CUDA_ERROR_OUT_OF_MEMORY);
  /* A device heap is device memory too: it must fit beside the rest. */
  rgpu_msg_ctx_limit_req lq = {.limit = CU_LIMIT_MALLOC_HEAP_SIZE, .set = 1, .value = 1 << 20};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CTX_LIMIT, ctx_limit, &lq, NULL, 0),
                   CUDA_ERROR_OUT_OF_MEMORY);
  rgpu_msg_array_destroy_req ad = {.array = 2};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_ARRAY_DESTROY, array_destroy, &ad, NULL, 0), 0);
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_MEM_ALLOC, mem_alloc, &q, NULL, 0), 0);
  lq.value = 256 << 10; /* 512 KiB + 16 bytes held: fits */
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CTX_LIMIT, ctx_limit, &lq, NULL, 0), 0);
  rgpu_msg_ctx_limit_rep lr;
  assert_int_equal(rgpu_msg_ctx_limit_rep_decode(t->p, t->h.length, &lr), 0);
  assert_true(lr.value == 256 << 10);
  harness_free(t);
}

int main(void) {
  char self[420];
  harness_exe_dir(self, sizeof self);
  snprintf(softgpu_lib, sizeof softgpu_lib, "%.400s/../lib/libsoftgpu.so", self);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_array_round_trip),
      cmocka_unit_test(test_array_hostile),
      cmocka_unit_test(test_views_die_with_their_memory),
      cmocka_unit_test(test_array_quota),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
