/* The driver-API module handlers (MODULE_GET_FUNCTION, MODULE_GET_GLOBAL,
 * MODULE_FUNC_NAMES; server/rgpu_handlers_module.c) in-process on softgpu:
 * frames in, frames out, as in rgpu_handlers_test.c.  A module is loaded
 * without names (as cuModuleLoadData does), its kernels and variables are
 * named afterwards, and a launch by the returned index computes the
 * expected values.  Skips when softgpu is not part of the build. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

#include "rgpu_dispatch.h"
#include "rgpu_messages.h"
#include "rgpu_handlers_test_harness.h"
#include "rgpu_worker.h"

static char softgpu_lib[400];
static char fatbins[1024];

static harness *harness_new(uint64_t quota) {
  if (access(softgpu_lib, R_OK)) {
    print_message("SKIP: %s not built\n", softgpu_lib);
    return NULL;
  }
  return harness_open(softgpu_lib, 9, quota);
}

static int reply_says(harness *t, const char *needle) {
  char m[1024];
  size_t n = t->h.length < sizeof m - 1 ? t->h.length : sizeof m - 1;
  memcpy(m, t->p, n);
  m[n] = 0;
  if (strstr(m, needle)) return 1;
  print_message("reply '%s' lacks '%s'\n", m, needle);
  return 0;
}

static void hello(harness *t) {
  rgpu_msg_hello_req q = {.proto_version = RGPU_PROTO_VERSION, .caps = RGPU_CAP_ASYNC_ERRORS,
                          .client_pid = 1, .client_name = {"test", 4}};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_HELLO, hello, &q, NULL, 0), 0);
}

/* MODULE_LOAD as the driver facade sends it: the image, no names. */
static uint32_t load(harness *t, uint64_t id, const void *image, size_t len) {
  rgpu_msg_module_load_req q = {.module_id = id};
  return HARNESS_SEND(t, RGPU_OP_MODULE_LOAD, module_load, &q, image, len);
}

static uint32_t get_function(harness *t, uint64_t id, const char *name, size_t name_len,
                             rgpu_msg_module_get_function_rep *rep) {
  rgpu_msg_module_get_function_req q = {.module_id = id, .name = {name, name_len}};
  uint32_t st = HARNESS_SEND(t, RGPU_OP_MODULE_GET_FUNCTION, module_get_function, &q, NULL, 0);
  if (st == 0) assert_int_equal(rgpu_msg_module_get_function_rep_decode(t->p, t->h.length, rep), 0);
  return st;
}

static uint32_t get_global(harness *t, uint64_t id, const char *name, rgpu_msg_module_get_global_rep *rep) {
  rgpu_msg_module_get_global_req q = {.module_id = id, .name = {name, strlen(name)}};
  uint32_t st = HARNESS_SEND(t, RGPU_OP_MODULE_GET_GLOBAL, module_get_global, &q, NULL, 0);
  if (st == 0) assert_int_equal(rgpu_msg_module_get_global_rep_decode(t->p, t->h.length, rep), 0);
  return st;
}

static uint64_t mem_alloc(harness *t, uint64_t size) {
  rgpu_msg_mem_alloc_req q = {.size = size};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_MEM_ALLOC, mem_alloc, &q, NULL, 0), 0);
  rgpu_msg_mem_alloc_rep r;
  assert_int_equal(rgpu_msg_mem_alloc_rep_decode(t->p, t->h.length, &r), 0);
  return r.dptr;
}

static uint32_t htod(harness *t, uint64_t dst, const void *data, size_t n) {
  rgpu_msg_memcpy_htod_req q = {.dst = dst};
  return HARNESS_SEND(t, RGPU_OP_MEMCPY_HTOD, memcpy_htod, &q, data, n);
}

static uint32_t dtoh(harness *t, uint64_t src, void *data, size_t n) {
  rgpu_msg_memcpy_dtoh_req q = {.src = src, .size = n};
  uint32_t st = HARNESS_SEND(t, RGPU_OP_MEMCPY_DTOH, memcpy_dtoh, &q, NULL, 0);
  if (st == 0) {
    assert_int_equal(t->h.length, n);
    memcpy(data, t->p, n);
  }
  return st;
}

static uint32_t launch(harness *t, uint64_t id, uint32_t fi, uint32_t grid, uint32_t block,
                       const void *params, size_t plen) {
  rgpu_msg_launch_req q = {.module_id = id, .func_index = fi, .grid_x = grid, .grid_y = 1,
                           .grid_z = 1, .block_x = block, .block_y = 1, .block_z = 1};
  return HARNESS_SEND(t, RGPU_OP_LAUNCH, launch, &q, params, plen);
}

/* PTX text as NVRTC or `nvcc -ptx` writes it (not NUL-terminated in the
 * frame: the server adds the NUL): a[i] *= g_scale. */
static const char k_ptx[] =
    ".version 7.0\n.target sm_75\n.address_size 64\n"
    ".visible .global .align 4 .u32 g_scale = 3;\n"
    ".visible .entry scale(.param .u64 p_a, .param .u32 p_n)\n{\n"
    "  .reg .pred %p<2>;\n  .reg .b32 %r<8>;\n  .reg .b64 %rd<5>;\n"
    "  ld.param.u64 %rd1, [p_a];\n  ld.param.u32 %r2, [p_n];\n"
    "  mov.u32 %r3, %ctaid.x;\n  mov.u32 %r4, %ntid.x;\n  mov.u32 %r5, %tid.x;\n"
    "  mad.lo.s32 %r1, %r3, %r4, %r5;\n  setp.ge.s32 %p1, %r1, %r2;\n  @%p1 bra DONE;\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n  mul.wide.s32 %rd3, %r1, 4;\n  add.s64 %rd4, %rd2, %rd3;\n"
    "  ld.global.u32 %r6, [%rd4];\n  ld.global.u32 %r7, [g_scale];\n"
    "  mul.lo.s32 %r6, %r6, %r7;\n  st.global.u32 [%rd4], %r6;\nDONE:\n  ret;\n}\n";

static void test_ptx_module_by_name(void **state) {
  harness *t = harness_new(0);
  if (!t) skip();
  hello(t);
  assert_int_equal(load(t, 5, k_ptx, sizeof k_ptx - 1), 0);

  rgpu_msg_module_get_function_rep fr;
  assert_int_equal(get_function(t, 5, "scale", 5, &fr), 0);
  assert_int_equal(fr.func_index, 0);
  assert_int_equal(fr.param_offsets.count, 2);
  assert_int_equal(fr.param_sizes.count, 2);
  assert_int_equal(rgpu_array_u32(&fr.param_offsets, 1), 8);
  assert_int_equal(rgpu_array_u32(&fr.param_sizes, 0), 8);
  assert_int_equal(rgpu_array_u32(&fr.param_sizes, 1), 4);
  /* The same function again keeps its index. */
  assert_int_equal(get_function(t, 5, "scale", 5, &fr), 0);
  assert_int_equal(fr.func_index, 0);

  /* The variable: its initial value, and it is now session memory (a
   * validated copy reads it). */
  rgpu_msg_module_get_global_rep gr;
  assert_int_equal(get_global(t, 5, "g_scale", &gr), 0);
  assert_int_equal(gr.size, 4);
  uint32_t v = 0;
  assert_int_equal(dtoh(t, gr.dptr, &v, 4), 0);
  assert_int_equal(v, 3);
  /* Named twice: still one allocation-table entry, no failure. */
  assert_int_equal(get_global(t, 5, "g_scale", &gr), 0);
  v = 5;
  assert_int_equal(htod(t, gr.dptr, &v, 4), 0);

  /* A launch by the index MODULE_GET_FUNCTION gave computes a[i] *= 5. */
  enum { N = 300 };
  int32_t a[N];
  for (int i = 0; i < N; i++) a[i] = i - 7;
  uint64_t da = mem_alloc(t, sizeof a);
  assert_int_equal(htod(t, da, a, sizeof a), 0);
  uint8_t params[12];
  int32_t n = N;
  memcpy(params, &da, 8);
  memcpy(params + 8, &n, 4);
  assert_int_equal(launch(t, 5, 0, 3, 128, params, sizeof params), 0);
  /* The layout LAUNCH checks is the one the handler recorded. */
  assert_int_equal(launch(t, 5, 0, 3, 128, params, 8), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(dtoh(t, da, a, sizeof a), 0);
  for (int i = 0; i < N; i++) assert_int_equal(a[i], (i - 7) * 5);

  /* The kernel list. */
  rgpu_msg_module_func_names_req nq = {.module_id = 5};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_MODULE_FUNC_NAMES, module_func_names, &nq, NULL, 0), 0);
  rgpu_msg_module_func_names_rep nr;
  assert_int_equal(rgpu_msg_module_func_names_rep_decode(t->p, t->h.length, &nr), 0);
  assert_int_equal(nr.names.count, 1);
  rgpu_strlist_iter it;
  rgpu_strlist_iter_init(&it, &nr.names);
  const char *s;
  size_t sl;
  assert_true(rgpu_strlist_next(&it, &s, &sl));
  assert_int_equal(sl, 5);
  assert_memory_equal(s, "scale", 5);

  /* Unloading drops the variable from the session's memory. */
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_buf_put_u64(&b, 5);
  assert_int_equal(harness_request(t, RGPU_OP_MODULE_UNLOAD, b.data, b.len), 0);
  rgpu_buf_free(&b);
  assert_int_equal(dtoh(t, gr.dptr, &v, 4), CUDA_ERROR_INVALID_VALUE);
  harness_free(t);
}

/* Every input checked: unknown module, unknown names, empty and over-long
 * names, a NUL inside a name (the decoder refuses it). */
static void test_bad_input(void **state) {
  harness *t = harness_new(0);
  if (!t) skip();
  hello(t);
  rgpu_msg_module_get_function_rep fr;
  rgpu_msg_module_get_global_rep gr;
  assert_int_equal(get_function(t, 77, "scale", 5, &fr), CUDA_ERROR_INVALID_HANDLE);
  assert_true(reply_says(t, "unknown module id 77"));
  assert_int_equal(get_global(t, 77, "g_scale", &gr), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(load(t, 5, k_ptx, sizeof k_ptx - 1), 0);
  assert_int_equal(get_function(t, 5, "no_such_kernel", 14, &fr), CUDA_ERROR_NOT_FOUND);
  assert_true(reply_says(t, "no kernel named 'no_such_kernel'"));
  assert_int_equal(get_global(t, 5, "no_such_var", &gr), CUDA_ERROR_NOT_FOUND);
  assert_true(reply_says(t, "no variable named 'no_such_var'"));
  assert_int_equal(get_function(t, 5, "", 0, &fr), CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "empty name"));
  /* A name with a NUL byte: the decoder refuses the frame. */
  assert_int_not_equal(get_function(t, 5, "sca\0le", 6, &fr), 0);
  /* Over the message's 4096-byte limit: refused by the decoder too. */
  char *longname = malloc(5000);
  memset(longname, 'x', 5000);
  assert_int_not_equal(get_function(t, 5, longname, 5000, &fr), 0);
  free(longname);
  /* The module still works after all that. */
  assert_int_equal(get_function(t, 5, "scale", 5, &fr), 0);
  assert_int_equal(fr.func_index, 0);
  harness_free(t);
}

/* A variable named after the load counts against the session's quota,
 * as MODULE_LOAD's variables do. */
static void test_global_quota(void **state) {
  harness *t = harness_new(4096);
  if (!t) skip();
  hello(t);
  assert_int_equal(load(t, 5, k_ptx, sizeof k_ptx - 1), 0);
  (void)mem_alloc(t, 4094);
  rgpu_msg_module_get_global_rep gr;
  assert_int_equal(get_global(t, 5, "g_scale", &gr), CUDA_ERROR_OUT_OF_MEMORY);
  assert_true(reply_says(t, "quota"));
  harness_free(t);
}

/* A real nvcc fatbin loaded without names: kernels by name afterwards,
 * two of them (indices 0 and 1), the layout of vecadd from the driver. */
static void test_fatbin_functions(void **state) {
  harness *t = harness_new(0);
  if (!t) skip();
  char path[1200];
  snprintf(path, sizeof path, "%s/kernels_zstd.fatbin", fatbins);
  FILE *f = fopen(path, "rb");
  if (!f) {
    print_message("SKIP: %s is missing\n", path);
    harness_free(t);
    skip();
  }
  static uint8_t image[1 << 20];
  size_t len = fread(image, 1, sizeof image, f);
  fclose(f);
  hello(t);
  assert_int_equal(load(t, 3, image, len), 0);
  rgpu_msg_module_get_function_rep fr;
  assert_int_equal(get_function(t, 3, "_Z5helloi", 9, &fr), 0);
  assert_int_equal(fr.func_index, 0);
  assert_int_equal(get_function(t, 3, "_Z6vecaddPKfS0_Pfi", 18, &fr), 0);
  assert_int_equal(fr.func_index, 1);
  /* vecadd: [#0@0:8 #1@8:8 #2@16:8 #3@24:4] (cuda-abi.md). */
  assert_int_equal(fr.param_offsets.count, 4);
  assert_int_equal(rgpu_array_u32(&fr.param_offsets, 3), 24);
  assert_int_equal(rgpu_array_u32(&fr.param_sizes, 3), 4);
  enum { N = 100 };
  float a[N], b[N], c[N];
  for (int i = 0; i < N; i++) a[i] = (float)i, b[i] = 2.0f;
  uint64_t da = mem_alloc(t, sizeof a), db = mem_alloc(t, sizeof b), dc = mem_alloc(t, sizeof c);
  assert_int_equal(htod(t, da, a, sizeof a), 0);
  assert_int_equal(htod(t, db, b, sizeof b), 0);
  uint8_t params[28];
  int n = N;
  memcpy(params, &da, 8);
  memcpy(params + 8, &db, 8);
  memcpy(params + 16, &dc, 8);
  memcpy(params + 24, &n, 4);
  assert_int_equal(launch(t, 3, 1, 1, 128, params, sizeof params), 0);
  assert_int_equal(dtoh(t, dc, c, sizeof c), 0);
  for (int i = 0; i < N; i++) assert_true(c[i] == (float)i + 2.0f);
  harness_free(t);
}

int main(void) {
  char self[360];
  harness_exe_dir(self, sizeof self);
  snprintf(softgpu_lib, sizeof softgpu_lib, "%s/../lib/libsoftgpu.so", self);
  snprintf(fatbins, sizeof fatbins, "%s/../softgpu/testdata", self);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ptx_module_by_name),
      cmocka_unit_test(test_bad_input),
      cmocka_unit_test(test_global_quota),
      cmocka_unit_test(test_fatbin_functions),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
