/* Request handling in-process: frames in, frames out, no socket.
 *
 * Runs against the server's own fake driver (always built) and, for the
 * basic flow, against softgpu's libsoftgpu.so when it exists. */
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
#include <dlfcn.h>

#include "rgpu_device_query.h"
#include "rgpu_vmm_proto.h"
#include "rgpu_dispatch.h"
#include "rgpu_image_cache.h"
#include "rgpu_messages.h"
#include "rgpu_tensor_map_proto.h"
#include "rgpu_worker.h"

typedef struct {
  rgpu_frame_hdr h;
  const uint8_t *p;
} frame;

typedef struct {
  rgpu_worker *w;
  rgpu_buf out;
  frame frames[16];
  int nframes;
  uint64_t seq;
} harness;

static const char *driver_path;
static char softgpu_lib[1024]; /* beside the test binary, so the tree can move */
static char fatbins[1024];

static rgpu_device_kind next_kind = RGPU_DEVICE_SOFTGPU;
static char next_image_cache[512]; /* the next harness's --image-cache ("" = none) */

static harness *harness_new(const char *lib, const char *token, uint64_t quota) {
  harness *t = calloc(1, sizeof *t);
  rgpu_worker_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.device = next_kind;
  next_kind = RGPU_DEVICE_SOFTGPU;
  snprintf(cfg.softgpu_lib, sizeof cfg.softgpu_lib, "%s", lib);
  if (token) {
    cfg.token_required = 1;
    snprintf(cfg.token, sizeof cfg.token, "%s", token);
  }
  cfg.mem_quota = quota;
  snprintf(cfg.image_cache_dir, sizeof cfg.image_cache_dir, "%s", next_image_cache);
  next_image_cache[0] = 0;
  cfg.session_id = 7;
  snprintf(cfg.peer, sizeof cfg.peer, "test");
  t->w = rgpu_worker_new(&cfg);
  rgpu_buf_init(&t->out);
  return t;
}

static void harness_free(harness *t) {
  rgpu_worker_free(t->w);
  rgpu_buf_free(&t->out);
  free(t);
}

/* Sends one request; returns the handler's action and splits the output. */
static int send_req(harness *t, uint16_t op, int need_reply, const rgpu_buf *fields, const void *tail,
                    size_t tail_len) {
  rgpu_buf pl;
  rgpu_buf_init(&pl);
  if (fields) rgpu_buf_put(&pl, fields->data, fields->len);
  if (tail_len) rgpu_buf_put(&pl, tail, tail_len);
  rgpu_frame_hdr h = {RGPU_PROTO_VERSION, RGPU_KIND_REQUEST, op, (uint32_t)pl.len,
                      need_reply ? RGPU_REQ_NEED_REPLY : 0, ++t->seq};
  rgpu_buf_reset(&t->out);
  int action = rgpu_worker_handle(t->w, &h, pl.data, pl.len, &t->out);
  rgpu_buf_free(&pl);
  t->nframes = 0;
  size_t off = 0;
  while (off < t->out.len) {
    assert_true(t->out.len - off >= RGPU_FRAME_HDR_SIZE);
    frame *f = &t->frames[t->nframes++];
    assert_int_equal(rgpu_frame_hdr_decode(t->out.data + off, RGPU_FRAME_MAX_PAYLOAD, &f->h), 0);
    f->p = t->out.data + off + RGPU_FRAME_HDR_SIZE;
    off += RGPU_FRAME_HDR_SIZE + f->h.length;
    assert_true(off <= t->out.len);
  }
  return action;
}

/* The last frame must be the reply; returns its status. */
static uint32_t reply_status(harness *t) {
  assert_true(t->nframes >= 1);
  frame *f = &t->frames[t->nframes - 1];
  assert_int_equal(f->h.kind, RGPU_KIND_REPLY);
  assert_int_equal(f->h.seq, t->seq);
  return f->h.aux;
}
static frame *reply(harness *t) { return &t->frames[t->nframes - 1]; }
static int reply_msg_has(harness *t, const char *needle) {
  frame *f = reply(t);
  char m[2048];
  size_t n = f->h.length < sizeof m - 1 ? f->h.length : sizeof m - 1;
  memcpy(m, f->p, n);
  m[n] = 0;
  if (!strstr(m, needle)) {
    print_message("reply message: '%s' lacks '%s'\n", m, needle);
    return 0;
  }
  return 1;
}

static void hello(harness *t, const char *token, uint32_t want_status) {
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_hello_req q = {.proto_version = RGPU_PROTO_VERSION,
                          .caps = RGPU_CAP_ASYNC_ERRORS | RGPU_CAP_OUTPUT,
                          .client_pid = 1,
                          .token = {token, token ? strlen(token) : 0},
                          .client_name = {"test", 4}};
  rgpu_msg_hello_req_encode(&b, &q);
  int action = send_req(t, RGPU_OP_HELLO, 1, &b, NULL, 0);
  rgpu_buf_free(&b);
  assert_int_equal(reply_status(t), want_status);
  assert_int_equal(action, want_status ? RGPU_WORKER_CLOSE : RGPU_WORKER_CONTINUE);
  if (!want_status) {
    rgpu_msg_hello_rep r;
    assert_int_equal(rgpu_msg_hello_rep_decode(reply(t)->p, reply(t)->h.length, &r), 0);
    assert_int_equal(r.session_id, 7);
    assert_int_equal(r.session_token.len, 32);
    assert_int_equal(r.caps, RGPU_CAP_ASYNC_ERRORS | RGPU_CAP_OUTPUT);
  }
}

/* A session on softgpu with HELLO done (quota: --mem-quota, 0 none); the
 * test is skipped where softgpu is not built. */
static harness *softgpu_session(uint64_t quota) {
  if (access(softgpu_lib, R_OK)) {
    print_message("SKIP: %s not built\n", softgpu_lib);
    skip();
  }
  harness *t = harness_new(softgpu_lib, NULL, quota);
  hello(t, NULL, 0);
  return t;
}

static uint64_t mem_alloc(harness *t, uint64_t size, uint32_t want) {
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_mem_alloc_req q = {.size = size};
  rgpu_msg_mem_alloc_req_encode(&b, &q);
  send_req(t, RGPU_OP_MEM_ALLOC, 1, &b, NULL, 0);
  rgpu_buf_free(&b);
  assert_int_equal(reply_status(t), want);
  if (want) return 0;
  rgpu_msg_mem_alloc_rep r;
  assert_int_equal(rgpu_msg_mem_alloc_rep_decode(reply(t)->p, reply(t)->h.length, &r), 0);
  return r.dptr;
}

static uint32_t htod(harness *t, uint64_t dst, const void *data, size_t n, int need_reply) {
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_memcpy_htod_req q = {.dst = dst, .stream = 0};
  rgpu_msg_memcpy_htod_req_encode(&b, &q);
  send_req(t, RGPU_OP_MEMCPY_HTOD, need_reply, &b, data, n);
  rgpu_buf_free(&b);
  return need_reply ? reply_status(t) : 0;
}

static uint32_t dtoh(harness *t, uint64_t src, void *data, size_t n) {
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_memcpy_dtoh_req q = {.src = src, .size = n, .stream = 0};
  rgpu_msg_memcpy_dtoh_req_encode(&b, &q);
  send_req(t, RGPU_OP_MEMCPY_DTOH, 1, &b, NULL, 0);
  rgpu_buf_free(&b);
  uint32_t st = reply_status(t);
  if (st == 0) {
    assert_int_equal(reply(t)->h.length, n);
    memcpy(data, reply(t)->p, n);
  }
  return st;
}

static uint32_t simple_u64(harness *t, uint16_t op, uint64_t v, int need_reply) {
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_buf_put_u64(&b, v);
  send_req(t, op, need_reply, &b, NULL, 0);
  rgpu_buf_free(&b);
  return need_reply ? reply_status(t) : 0;
}

/* ---- the basic flow: runs on the fake driver and on softgpu ------------- */

static void basic_flow(const char *lib) {
  harness *t = harness_new(lib, NULL, 0);
  hello(t, NULL, 0);
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_buf_put_u32(&b, 0);
  send_req(t, RGPU_OP_DEVICE_PROPS, 1, &b, NULL, 0);
  rgpu_buf_free(&b);
  assert_int_equal(reply_status(t), 0);
  rgpu_msg_device_props_rep pr;
  assert_int_equal(rgpu_msg_device_props_rep_decode(reply(t)->p, reply(t)->h.length, &pr), 0);
  assert_true(pr.name.len > 0);
  assert_true(pr.total_mem > 0);
  assert_true(pr.attrs.count > CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  assert_int_equal(rgpu_array_i32(&pr.attrs, CU_DEVICE_ATTRIBUTE_WARP_SIZE), 32);

  uint64_t d = mem_alloc(t, 4096, 0);
  assert_true(d != 0);
  uint8_t src[4096], back[4096];
  for (int i = 0; i < 4096; i++) src[i] = (uint8_t)(i * 7 + 3);
  assert_int_equal(htod(t, d, src, sizeof src, 1), 0);
  memset(back, 0, sizeof back);
  assert_int_equal(dtoh(t, d, back, sizeof back), 0);
  assert_memory_equal(src, back, sizeof src);
  /* Past the end by one byte, and an address that was never allocated. */
  assert_int_equal(htod(t, d + 1, src, sizeof src, 1), CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_msg_has(t, "run past the end"));
  assert_int_equal(dtoh(t, d + 4096, back, 1), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(dtoh(t, 0x10, back, 16), CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_msg_has(t, "not a device pointer"));
  assert_int_equal(simple_u64(t, RGPU_OP_MEM_FREE, d + 16, 1), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(simple_u64(t, RGPU_OP_MEM_FREE, d, 1), 0);
  assert_int_equal(dtoh(t, d, back, 16), CUDA_ERROR_INVALID_VALUE); /* freed */
  harness_free(t);
}

static void test_basic_fake_driver(void **state) { basic_flow(driver_path); }

static void basic_flow_kind(rgpu_device_kind kind) {
  next_kind = kind;
  basic_flow("unused-for-cuda");
}

static void test_basic_softgpu(void **state) {
  if (access(softgpu_lib, R_OK)) {
    print_message("SKIP: %s not built yet\n", softgpu_lib);
    skip();
  }
  basic_flow(softgpu_lib);
}

/* ---- session rules ------------------------------------------------------ */

static void test_hello_first_and_auth(void **state) {
  harness *t = harness_new(driver_path, NULL, 0);
  assert_int_equal(simple_u64(t, RGPU_OP_MEM_FREE, 1, 1), CUDA_ERROR_NOT_INITIALIZED);
  assert_true(reply_msg_has(t, "must be HELLO"));
  harness_free(t);

  t = harness_new(driver_path, "s3cret", 0);
  hello(t, "wrong", CUDA_ERROR_NOT_PERMITTED);
  assert_true(reply_msg_has(t, "authentication failed: bad or missing token"));
  harness_free(t);
  t = harness_new(driver_path, "s3cret", 0);
  hello(t, NULL, CUDA_ERROR_NOT_PERMITTED);
  harness_free(t);
  t = harness_new(driver_path, "s3cret", 0);
  hello(t, "s3cret", 0);
  harness_free(t);
}

static void test_bad_driver_path(void **state) {
  harness *t = harness_new("/nonexistent/libsoftgpu.so", NULL, 0);
  hello(t, NULL, 0); /* HELLO itself succeeds: the failure comes next */
  mem_alloc(t, 64, CUDA_ERROR_NO_DEVICE);
  assert_true(reply_msg_has(t, "/nonexistent/libsoftgpu.so"));
  harness_free(t);
}

static void test_async_errors_and_malformed(void **state) {
  harness *t = harness_new(driver_path, NULL, 0);
  hello(t, NULL, 0);
  /* Unreplied failure -> one ASYNC_ERROR event naming the request's seq. */
  htod(t, 0x1234, "abcd", 4, 0);
  assert_int_equal(t->nframes, 1);
  assert_int_equal(t->frames[0].h.kind, RGPU_KIND_EVENT);
  assert_int_equal(t->frames[0].h.opcode, RGPU_EVT_ASYNC_ERROR);
  assert_int_equal(t->frames[0].h.aux, CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(t->frames[0].h.seq, t->seq);
  rgpu_msg_async_error_evt ev;
  assert_int_equal(rgpu_msg_async_error_evt_decode(t->frames[0].p, t->frames[0].h.length, &ev), 0);
  assert_true(ev.message.len > 0);
  /* Unreplied success -> nothing at all. */
  uint64_t d = mem_alloc(t, 64, 0);
  htod(t, d, "abcd", 4, 0);
  assert_int_equal(t->nframes, 0);
  /* Truncated payload. */
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_buf_put_u32(&b, 1);
  send_req(t, RGPU_OP_MEM_ALLOC, 1, &b, NULL, 0);
  assert_int_equal(reply_status(t), CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_msg_has(t, "malformed request"));
  send_req(t, RGPU_OP_MEM_ALLOC, 0, &b, NULL, 0);
  assert_int_equal(t->frames[0].h.opcode, RGPU_EVT_ASYNC_ERROR);
  /* Unknown opcode. */
  send_req(t, 0x7777, 1, NULL, NULL, 0);
  assert_int_equal(reply_status(t), CUDA_ERROR_NOT_SUPPORTED);
  rgpu_buf_free(&b);
  /* PING echoes its tail. */
  send_req(t, RGPU_OP_PING, 1, NULL, "xyz", 3);
  assert_int_equal(reply_status(t), 0);
  assert_int_equal(reply(t)->h.length, 3);
  assert_memory_equal(reply(t)->p, "xyz", 3);
  /* GOODBYE replies, then closes. */
  assert_int_equal(send_req(t, RGPU_OP_GOODBYE, 1, NULL, NULL, 0), RGPU_WORKER_CLOSE);
  assert_int_equal(reply_status(t), 0);
  harness_free(t);
}

static void test_quota(void **state) {
  harness *t = harness_new(driver_path, NULL, 1 << 20);
  hello(t, NULL, 0);
  uint64_t a = mem_alloc(t, 512 << 10, 0);
  mem_alloc(t, 600 << 10, CUDA_ERROR_OUT_OF_MEMORY);
  assert_true(reply_msg_has(t, "quota"));
  send_req(t, RGPU_OP_MEM_GET_INFO, 1, NULL, NULL, 0);
  rgpu_msg_mem_get_info_rep mi;
  assert_int_equal(rgpu_msg_mem_get_info_rep_decode(reply(t)->p, reply(t)->h.length, &mi), 0);
  assert_int_equal(mi.total_bytes, 1 << 20);
  assert_int_equal(mi.free_bytes, 512 << 10);
  assert_int_equal(simple_u64(t, RGPU_OP_MEM_FREE, a, 1), 0);
  mem_alloc(t, 1 << 20, 0);
  harness_free(t);
}

static void test_streams_events(void **state) {
  harness *t = harness_new(driver_path, NULL, 0);
  hello(t, NULL, 0);
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_stream_create_req sc = {.stream = 5};
  rgpu_msg_stream_create_req_encode(&b, &sc);
  send_req(t, RGPU_OP_STREAM_CREATE, 1, &b, NULL, 0);
  assert_int_equal(reply_status(t), 0);
  send_req(t, RGPU_OP_STREAM_CREATE, 1, &b, NULL, 0); /* reused id */
  assert_int_equal(reply_status(t), CUDA_ERROR_INVALID_VALUE);
  rgpu_buf_reset(&b);
  assert_int_equal(simple_u64(t, RGPU_OP_STREAM_SYNC, 5, 1), 0);
  assert_int_equal(simple_u64(t, RGPU_OP_STREAM_SYNC, 6, 1), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(simple_u64(t, RGPU_OP_STREAM_QUERY, 5, 1), 0);
  for (uint64_t ev = 1; ev <= 2; ev++) {
    rgpu_buf_reset(&b);
    rgpu_msg_event_create_req ec = {.event = ev};
    rgpu_msg_event_create_req_encode(&b, &ec);
    send_req(t, RGPU_OP_EVENT_CREATE, 1, &b, NULL, 0);
    assert_int_equal(reply_status(t), 0);
    rgpu_buf_reset(&b);
    rgpu_msg_event_record_req er = {.event = ev, .stream = 5};
    rgpu_msg_event_record_req_encode(&b, &er);
    send_req(t, RGPU_OP_EVENT_RECORD, 1, &b, NULL, 0);
    assert_int_equal(reply_status(t), 0);
  }
  rgpu_buf_reset(&b);
  rgpu_msg_event_elapsed_req el = {.start_event = 1, .end_event = 2};
  rgpu_msg_event_elapsed_req_encode(&b, &el);
  send_req(t, RGPU_OP_EVENT_ELAPSED, 1, &b, NULL, 0);
  assert_int_equal(reply_status(t), 0);
  rgpu_msg_event_elapsed_rep er;
  assert_int_equal(rgpu_msg_event_elapsed_rep_decode(reply(t)->p, reply(t)->h.length, &er), 0);
  assert_true(er.ms >= 0);
  rgpu_buf_reset(&b);
  rgpu_msg_stream_wait_event_req sw = {.stream = 5, .event = 9};
  rgpu_msg_stream_wait_event_req_encode(&b, &sw);
  send_req(t, RGPU_OP_STREAM_WAIT_EVENT, 1, &b, NULL, 0);
  assert_int_equal(reply_status(t), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(simple_u64(t, RGPU_OP_EVENT_SYNC, 2, 1), 0);
  assert_int_equal(simple_u64(t, RGPU_OP_EVENT_QUERY, 2, 1), 0);
  assert_int_equal(simple_u64(t, RGPU_OP_EVENT_DESTROY, 2, 1), 0);
  assert_int_equal(simple_u64(t, RGPU_OP_EVENT_DESTROY, 2, 1), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(simple_u64(t, RGPU_OP_STREAM_DESTROY, 5, 1), 0);
  assert_int_equal(simple_u64(t, RGPU_OP_STREAM_DESTROY, 5, 1), CUDA_ERROR_INVALID_HANDLE);
  rgpu_buf_free(&b);
  harness_free(t); /* event 1 is cleaned up by the worker */
}

static void load_stub_module(harness *t, uint64_t id, uint32_t want) {
  const char *funcs[] = {"vecadd", "missing", "hello"};
  const char *vars[] = {"gvar"};
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_module_load_req q = {.module_id = id,
                                .func_names = {.items = funcs, .count = 3},
                                .var_names = {.items = vars, .count = 1}};
  rgpu_msg_module_load_req_encode(&b, &q);
  send_req(t, RGPU_OP_MODULE_LOAD, 1, &b, "STUB image", 10);
  rgpu_buf_free(&b);
  assert_int_equal(reply_status(t), want);
}

static void test_modules_and_launch(void **state) {
  harness *t = harness_new(driver_path, NULL, 0);
  hello(t, NULL, 0);
  load_stub_module(t, 3, 0);
  rgpu_msg_module_load_rep r;
  assert_int_equal(rgpu_msg_module_load_rep_decode(reply(t)->p, reply(t)->h.length, &r), 0);
  assert_int_equal(r.func_status.count, 3);
  assert_int_equal(rgpu_array_i32(&r.func_status, 0), 0);
  assert_int_equal(rgpu_array_i32(&r.func_status, 1), CUDA_ERROR_NOT_FOUND);
  assert_int_equal(rgpu_array_u32(&r.func_nparams, 0), 4);
  assert_int_equal(r.param_offsets.count, 4);
  assert_int_equal(rgpu_array_u32(&r.param_offsets, 3), 24);
  assert_int_equal(rgpu_array_u32(&r.param_sizes, 3), 4);
  assert_int_equal(rgpu_array_i32(&r.var_status, 0), 0);
  assert_int_equal(rgpu_array_u64(&r.var_sizes, 0), 64);
  uint64_t gvar = rgpu_array_u64(&r.var_dptrs, 0);
  load_stub_module(t, 3, CUDA_ERROR_INVALID_VALUE); /* reused id */

  /* Symbol copies validate against the module global. */
  assert_int_equal(htod(t, gvar, "0123456789", 10, 1), 0);
  assert_int_equal(htod(t, gvar + 60, "0123456789", 10, 1), CUDA_ERROR_INVALID_VALUE);

  float a[16], bb[16], c[16];
  for (int i = 0; i < 16; i++) a[i] = (float)i, bb[i] = 100.0f * (float)i;
  uint64_t da = mem_alloc(t, sizeof a, 0), db = mem_alloc(t, sizeof bb, 0), dc = mem_alloc(t, sizeof c, 0);
  htod(t, da, a, sizeof a, 1);
  htod(t, db, bb, sizeof bb, 1);
  uint8_t params[28];
  int n = 16;
  memcpy(params, &da, 8);
  memcpy(params + 8, &db, 8);
  memcpy(params + 16, &dc, 8);
  memcpy(params + 24, &n, 4);
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_launch_req lq = {.module_id = 3, .func_index = 0, .grid_x = 1, .grid_y = 1, .grid_z = 1,
                            .block_x = 16, .block_y = 1, .block_z = 1};
  rgpu_msg_launch_req_encode(&b, &lq);
  send_req(t, RGPU_OP_LAUNCH, 1, &b, params, sizeof params);
  assert_int_equal(reply_status(t), 0);
  assert_int_equal(dtoh(t, dc, c, sizeof c), 0);
  for (int i = 0; i < 16; i++) assert_true(c[i] == 101.0f * (float)i);
  /* Wrong parameter size, missing function, unknown module. */
  send_req(t, RGPU_OP_LAUNCH, 1, &b, params, 20);
  assert_int_equal(reply_status(t), CUDA_ERROR_INVALID_VALUE);
  rgpu_buf_reset(&b);
  lq.func_index = 1;
  rgpu_msg_launch_req_encode(&b, &lq);
  send_req(t, RGPU_OP_LAUNCH, 1, &b, NULL, 0);
  assert_int_equal(reply_status(t), CUDA_ERROR_NOT_FOUND);
  rgpu_buf_reset(&b);
  lq.func_index = 2; /* hello: printf output arrives before the reply */
  rgpu_msg_launch_req_encode(&b, &lq);
  send_req(t, RGPU_OP_LAUNCH, 1, &b, NULL, 0);
  assert_int_equal(reply_status(t), 0);
  assert_int_equal(t->nframes, 2);
  assert_int_equal(t->frames[0].h.opcode, RGPU_EVT_OUTPUT);
  assert_memory_equal(t->frames[0].p, "hello from the stub\n", 20);
  rgpu_buf_reset(&b);
  lq.module_id = 99;
  rgpu_msg_launch_req_encode(&b, &lq);
  send_req(t, RGPU_OP_LAUNCH, 1, &b, NULL, 0);
  assert_int_equal(reply_status(t), CUDA_ERROR_INVALID_HANDLE);
  rgpu_buf_free(&b);

  assert_int_equal(simple_u64(t, RGPU_OP_MODULE_UNLOAD, 3, 1), 0);
  assert_int_equal(htod(t, gvar, "01", 2, 1), CUDA_ERROR_INVALID_VALUE); /* global gone */
  assert_int_equal(simple_u64(t, RGPU_OP_MODULE_UNLOAD, 3, 1), CUDA_ERROR_INVALID_HANDLE);
  /* A module the driver rejects. */
  rgpu_buf_init(&b);
  rgpu_msg_module_load_req q = {.module_id = 4};
  rgpu_msg_module_load_req_encode(&b, &q);
  send_req(t, RGPU_OP_MODULE_LOAD, 1, &b, "garbage", 7);
  assert_int_equal(reply_status(t), CUDA_ERROR_INVALID_IMAGE);
  rgpu_buf_free(&b);
  harness_free(t);
}

/* HELLO asking for the image cache; returns the caps the server granted. */
static uint32_t hello_caps(harness *t, uint32_t caps) {
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_hello_req q = {.proto_version = RGPU_PROTO_VERSION, .caps = caps, .client_pid = 1,
                          .client_name = {"test", 4}};
  rgpu_msg_hello_req_encode(&b, &q);
  send_req(t, RGPU_OP_HELLO, 1, &b, NULL, 0);
  rgpu_buf_free(&b);
  assert_int_equal(reply_status(t), 0);
  rgpu_msg_hello_rep r;
  assert_int_equal(rgpu_msg_hello_rep_decode(reply(t)->p, reply(t)->h.length, &r), 0);
  return r.caps;
}

/* MODULE_LOAD of the stub image with an image hash (hash_len bytes of
 * hash) and the image as tail or not; returns the reply status. */
static uint32_t load_by_hash(harness *t, uint64_t id, const uint8_t *hash, size_t hash_len,
                             int with_image) {
  const char *funcs[] = {"vecadd"};
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_module_load_req q = {.module_id = id,
                                .func_names = {.items = funcs, .count = 1},
                                .image_hash = {hash, hash_len}};
  rgpu_msg_module_load_req_encode(&b, &q);
  send_req(t, RGPU_OP_MODULE_LOAD, 1, &b, "STUB image", with_image ? 10 : 0);
  rgpu_buf_free(&b);
  return reply_status(t);
}

/* The image cache protocol of MODULE_LOAD (issue 15) on the fake driver:
 * a hash alone misses until an image was sent, then hits in every later
 * session; an image sent without a hash (the old form) is stored too; a
 * server without a cache does not offer it. */
static void test_module_image_cache(void **state) {
  char dir[] = "/tmp/rgpu-handlers-image-cache-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char cache[400];
  snprintf(cache, sizeof cache, "%s/c", dir);
  uint8_t h[32];
  rgpu_image_hash("STUB image", 10, h);

  snprintf(next_image_cache, sizeof next_image_cache, "%s", cache);
  harness *t = harness_new(driver_path, NULL, 0);
  uint32_t caps = hello_caps(t, RGPU_CAP_ASYNC_ERRORS | RGPU_CAP_IMAGE_CACHE);
  assert_true(caps & RGPU_CAP_IMAGE_CACHE);
  assert_int_equal(load_by_hash(t, 3, h, 32, 0), RGPU_STATUS_IMAGE_NOT_CACHED);
  assert_true(reply_msg_has(t, "not in the server's image cache"));
  assert_int_equal(load_by_hash(t, 3, h, 32, 1), 0); /* the same id: the miss loaded nothing */
  assert_int_equal(load_by_hash(t, 4, h, 16, 0), CUDA_ERROR_INVALID_VALUE); /* not a SHA-256 */
  assert_int_equal(load_by_hash(t, 4, NULL, 0, 0), CUDA_ERROR_INVALID_IMAGE); /* nothing at all */
  harness_free(t);

  /* Another session (a later process): the hash alone loads the module. */
  snprintf(next_image_cache, sizeof next_image_cache, "%s", cache);
  t = harness_new(driver_path, NULL, 0);
  hello_caps(t, RGPU_CAP_ASYNC_ERRORS | RGPU_CAP_IMAGE_CACHE);
  assert_int_equal(load_by_hash(t, 9, h, 32, 0), 0);
  rgpu_msg_module_load_rep r;
  assert_int_equal(rgpu_msg_module_load_rep_decode(reply(t)->p, reply(t)->h.length, &r), 0);
  assert_int_equal(r.func_status.count, 1);
  assert_int_equal(rgpu_array_i32(&r.func_status, 0), 0);
  assert_int_equal(rgpu_array_u32(&r.func_nparams, 0), 4);
  /* A hash nobody stored misses, and is not an error of the session. */
  uint8_t other[32];
  memset(other, 7, sizeof other);
  assert_int_equal(load_by_hash(t, 10, other, 32, 0), RGPU_STATUS_IMAGE_NOT_CACHED);
  harness_free(t);

  /* The old form (image, no hash) is stored as well, under its hash. */
  char cache2[400], entry[800], hex[65];
  snprintf(cache2, sizeof cache2, "%s/d", dir);
  snprintf(next_image_cache, sizeof next_image_cache, "%s", cache2);
  t = harness_new(driver_path, NULL, 0);
  hello_caps(t, RGPU_CAP_ASYNC_ERRORS);
  load_stub_module(t, 3, 0);
  rgpu_image_hash_hex(h, hex);
  snprintf(entry, sizeof entry, "%s/%s", cache2, hex);
  assert_int_equal(access(entry, R_OK), 0);
  /* An image the driver refuses is not stored. */
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_module_load_req q = {.module_id = 4};
  rgpu_msg_module_load_req_encode(&b, &q);
  send_req(t, RGPU_OP_MODULE_LOAD, 1, &b, "garbage", 7);
  assert_int_equal(reply_status(t), CUDA_ERROR_INVALID_IMAGE);
  rgpu_buf_free(&b);
  uint8_t hg[32];
  rgpu_image_hash("garbage", 7, hg);
  rgpu_image_hash_hex(hg, hex);
  snprintf(entry, sizeof entry, "%s/%s", cache2, hex);
  assert_int_equal(access(entry, F_OK), -1);
  harness_free(t);

  /* No cache configured: not offered, and a hash alone is answered
   * "send it" rather than failing the module. */
  t = harness_new(driver_path, NULL, 0);
  caps = hello_caps(t, RGPU_CAP_ASYNC_ERRORS | RGPU_CAP_IMAGE_CACHE);
  assert_false(caps & RGPU_CAP_IMAGE_CACHE);
  assert_int_equal(load_by_hash(t, 3, h, 32, 0), RGPU_STATUS_IMAGE_NOT_CACHED);
  assert_int_equal(load_by_hash(t, 3, h, 32, 1), 0);
  harness_free(t);

  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

/* FUNC_SET_ATTR, OCCUPANCY, LAUNCH_EX (server/rgpu_handlers_features.c):
 * ids checked first, read-only attributes refused, and a driver without the
 * functions (the fake one) answers NOT_SUPPORTED instead of crashing. */
static void test_features_fake_driver(void **state) {
  harness *t = harness_new(driver_path, NULL, 0);
  hello(t, NULL, 0);
  load_stub_module(t, 3, 0);
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_func_set_attr_req aq = {.module_id = 3, .func_index = 0,
                                   .attr = CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                   .value = 100000};
  rgpu_msg_func_set_attr_req_encode(&b, &aq);
  send_req(t, RGPU_OP_FUNC_SET_ATTR, 1, &b, NULL, 0);
  assert_int_equal(reply_status(t), CUDA_ERROR_NOT_SUPPORTED);
  rgpu_buf_reset(&b);
  aq.attr = CU_FUNC_ATTRIBUTE_NUM_REGS; /* read-only */
  rgpu_msg_func_set_attr_req_encode(&b, &aq);
  send_req(t, RGPU_OP_FUNC_SET_ATTR, 1, &b, NULL, 0);
  assert_int_equal(reply_status(t), CUDA_ERROR_INVALID_VALUE);
  rgpu_buf_reset(&b);
  aq.module_id = 99;
  rgpu_msg_func_set_attr_req_encode(&b, &aq);
  send_req(t, RGPU_OP_FUNC_SET_ATTR, 1, &b, NULL, 0);
  assert_int_equal(reply_status(t), CUDA_ERROR_INVALID_HANDLE);
  rgpu_buf_reset(&b);
  rgpu_msg_occupancy_req oq = {.module_id = 3, .func_index = 0, .block_size = 128};
  rgpu_msg_occupancy_req_encode(&b, &oq);
  send_req(t, RGPU_OP_OCCUPANCY, 1, &b, NULL, 0);
  assert_int_equal(reply_status(t), CUDA_ERROR_NOT_SUPPORTED);
  rgpu_buf_reset(&b);
  oq.func_index = 7; /* no such function */
  rgpu_msg_occupancy_req_encode(&b, &oq);
  send_req(t, RGPU_OP_OCCUPANCY, 1, &b, NULL, 0);
  assert_int_equal(reply_status(t), CUDA_ERROR_INVALID_HANDLE);
  rgpu_buf_reset(&b);
  rgpu_msg_launch_ex_req cq = {.module_id = 3, .func_index = 0, .grid_x = 1, .grid_y = 1,
                               .grid_z = 1, .block_x = 16, .block_y = 1, .block_z = 1,
                               .stream = 77, .cooperative = 1};
  rgpu_msg_launch_ex_req_encode(&b, &cq);
  send_req(t, RGPU_OP_LAUNCH_EX, 1, &b, NULL, 0);
  assert_int_equal(reply_status(t), CUDA_ERROR_INVALID_HANDLE); /* unknown stream */
  rgpu_buf_reset(&b);
  cq.stream = 0;
  rgpu_msg_launch_ex_req_encode(&b, &cq);
  send_req(t, RGPU_OP_LAUNCH_EX, 1, &b, NULL, 0);
  assert_int_equal(reply_status(t), CUDA_ERROR_NOT_SUPPORTED);
  rgpu_buf_reset(&b);
  cq.cooperative = 0;
  cq.cluster_x = 2;
  rgpu_msg_launch_ex_req_encode(&b, &cq);
  send_req(t, RGPU_OP_LAUNCH_EX, 1, &b, NULL, 0);
  assert_int_equal(reply_status(t), CUDA_ERROR_NOT_SUPPORTED);
  rgpu_buf_free(&b);
  harness_free(t);
}

static void test_memset_dtod_reset(void **state) {
  harness *t = harness_new(driver_path, NULL, 0);
  hello(t, NULL, 0);
  uint64_t a = mem_alloc(t, 64, 0), b2 = mem_alloc(t, 64, 0);
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_memset_req ms = {.dst = a, .value = 0xabcd1234, .elem_size = 4, .count = 16};
  rgpu_msg_memset_req_encode(&b, &ms);
  send_req(t, RGPU_OP_MEMSET, 1, &b, NULL, 0);
  assert_int_equal(reply_status(t), 0);
  rgpu_buf_reset(&b);
  ms.count = 17;
  rgpu_msg_memset_req_encode(&b, &ms);
  send_req(t, RGPU_OP_MEMSET, 1, &b, NULL, 0);
  assert_int_equal(reply_status(t), CUDA_ERROR_INVALID_VALUE);
  rgpu_buf_reset(&b);
  ms.count = 1;
  ms.elem_size = 3;
  rgpu_msg_memset_req_encode(&b, &ms);
  send_req(t, RGPU_OP_MEMSET, 1, &b, NULL, 0);
  assert_int_equal(reply_status(t), CUDA_ERROR_INVALID_VALUE);
  rgpu_buf_reset(&b);
  rgpu_msg_memcpy_dtod_req dd = {.dst = b2, .src = a, .size = 64};
  rgpu_msg_memcpy_dtod_req_encode(&b, &dd);
  send_req(t, RGPU_OP_MEMCPY_DTOD, 1, &b, NULL, 0);
  assert_int_equal(reply_status(t), 0);
  uint32_t back[16];
  assert_int_equal(dtoh(t, b2, back, sizeof back), 0);
  for (int i = 0; i < 16; i++) assert_int_equal(back[i], 0xabcd1234);
  rgpu_buf_reset(&b);
  dd.size = 65;
  rgpu_msg_memcpy_dtod_req_encode(&b, &dd);
  send_req(t, RGPU_OP_MEMCPY_DTOD, 1, &b, NULL, 0);
  assert_int_equal(reply_status(t), CUDA_ERROR_INVALID_VALUE);
  /* DEVICE_RESET forgets the device's allocations. */
  rgpu_buf_reset(&b);
  rgpu_buf_put_u32(&b, 0);
  send_req(t, RGPU_OP_DEVICE_RESET, 1, &b, NULL, 0);
  assert_int_equal(reply_status(t), 0);
  assert_int_equal(dtoh(t, b2, back, 4), CUDA_ERROR_INVALID_VALUE);
  /* A driver that refuses the new context for a fault (the H200 after a
   * fault and a reset) is reported as a local cudart reports it:
   * CUDA_ERROR_DEVICE_UNAVAILABLE (cudaErrorDevicesUnavailable), for every
   * request until the driver gives a context again. */
  setenv("RGPU_TEST_DRIVER_REFUSE_CTX", "700", 1);
  rgpu_buf_reset(&b);
  rgpu_buf_put_u32(&b, 0);
  send_req(t, RGPU_OP_DEVICE_RESET, 1, &b, NULL, 0);
  assert_int_equal(reply_status(t), 0);
  assert_int_equal(dtoh(t, b2, back, 4), CUDA_ERROR_DEVICE_UNAVAILABLE);
  assert_int_equal(dtoh(t, b2, back, 4), CUDA_ERROR_DEVICE_UNAVAILABLE);
  /* Any other refusal keeps the driver's code. */
  setenv("RGPU_TEST_DRIVER_REFUSE_CTX", "2", 1);
  assert_int_equal(dtoh(t, b2, back, 4), CUDA_ERROR_OUT_OF_MEMORY);
  unsetenv("RGPU_TEST_DRIVER_REFUSE_CTX");
  rgpu_buf_reset(&b);
  rgpu_buf_put_u32(&b, 3);
  send_req(t, RGPU_OP_CTX_SET_DEVICE, 1, &b, NULL, 0);
  assert_int_equal(reply_status(t), CUDA_ERROR_INVALID_DEVICE);
  send_req(t, RGPU_OP_DRIVER_INFO, 1, NULL, NULL, 0);
  assert_int_equal(reply_status(t), 0);
  send_req(t, RGPU_OP_SERVER_STATUS, 1, NULL, NULL, 0);
  assert_int_equal(reply_status(t), 0);
  rgpu_msg_server_status_rep ss;
  assert_int_equal(rgpu_msg_server_status_rep_decode(reply(t)->p, reply(t)->h.length, &ss), 0);
  rgpu_buf_free(&b);
  harness_free(t);
}

/* ---- a real nvcc fatbin through softgpu's PTX interpreter -------------- */

static void *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void *p = malloc((size_t)n);
  if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
    free(p);
    p = NULL;
  }
  fclose(f);
  *len = (size_t)n;
  return p;
}

static const char *fatbin_dir(void) {
  const char *e = getenv("RGPU_TEST_FATBIN_DIR");
  return e && *e ? e : fatbins;
}

/* Module load, parameter tables, globals, a launch and (softgpu) printf,
 * on softgpu or on the real driver. */
static void fatbin_flow(const char *lib, rgpu_device_kind kind, const char *fatbin_name,
                        int check_printf) {
  char fatbin[2200];
  snprintf(fatbin, sizeof fatbin, "%s/%s", fatbin_dir(), fatbin_name);
  size_t ilen = 0;
  void *image = read_file(fatbin, &ilen);
  if (!image) {
    print_message("SKIP: %s is missing\n", fatbin);
    skip();
  }
  next_kind = kind;
  harness *t = harness_new(lib, NULL, 0);
  hello(t, NULL, 0);
  const char *funcs[] = {"_Z6vecaddPKfS0_Pfi", "_Z5helloi", "no_such_kernel"};
  const char *vars[] = {"g_init", "c_coef"};
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_module_load_req q = {.module_id = 1,
                                .func_names = {.items = funcs, .count = 3},
                                .var_names = {.items = vars, .count = 2}};
  rgpu_msg_module_load_req_encode(&b, &q);
  send_req(t, RGPU_OP_MODULE_LOAD, 1, &b, image, ilen);
  free(image);
  assert_int_equal(reply_status(t), 0);
  rgpu_msg_module_load_rep r;
  assert_int_equal(rgpu_msg_module_load_rep_decode(reply(t)->p, reply(t)->h.length, &r), 0);
  assert_int_equal(rgpu_array_i32(&r.func_status, 0), 0);
  assert_int_equal(rgpu_array_i32(&r.func_status, 1), 0);
  assert_int_not_equal(rgpu_array_i32(&r.func_status, 2), 0);
  /* vecadd: [#0@0:8 #1@8:8 #2@16:8 #3@24:4] (cuda-abi.md). */
  assert_int_equal(rgpu_array_u32(&r.func_nparams, 0), 4);
  assert_int_equal(rgpu_array_u32(&r.param_offsets, 3), 24);
  assert_int_equal(rgpu_array_u32(&r.param_sizes, 3), 4);
  assert_int_equal(rgpu_array_i32(&r.var_status, 0), 0);
  assert_int_equal(rgpu_array_u64(&r.var_sizes, 0), 16);
  /* The initialised global reads back through a validated DTOH. */
  int32_t init[4];
  assert_int_equal(dtoh(t, rgpu_array_u64(&r.var_dptrs, 0), init, sizeof init), 0);
  assert_int_equal(init[3], 4);

  enum { N = 1000 };
  static float a[N], bb[N], c[N];
  for (int i = 0; i < N; i++) a[i] = (float)i, bb[i] = 0.5f * (float)i;
  uint64_t da = mem_alloc(t, sizeof a, 0), db = mem_alloc(t, sizeof bb, 0), dc = mem_alloc(t, sizeof c, 0);
  assert_int_equal(htod(t, da, a, sizeof a, 1), 0);
  assert_int_equal(htod(t, db, bb, sizeof bb, 1), 0);
  uint8_t params[28];
  int n = N;
  memcpy(params, &da, 8);
  memcpy(params + 8, &db, 8);
  memcpy(params + 16, &dc, 8);
  memcpy(params + 24, &n, 4);
  rgpu_buf_reset(&b);
  rgpu_msg_launch_req lq = {.module_id = 1, .func_index = 0, .grid_x = 4, .grid_y = 1, .grid_z = 1,
                            .block_x = 256, .block_y = 1, .block_z = 1};
  rgpu_msg_launch_req_encode(&b, &lq);
  send_req(t, RGPU_OP_LAUNCH, 1, &b, params, sizeof params);
  uint32_t st = reply_status(t);
  if (st == CUDA_ERROR_NOT_SUPPORTED) {
    print_message("SKIP: softgpu has no PTX interpreter yet\n");
    rgpu_buf_free(&b);
    harness_free(t);
    skip();
  }
  assert_int_equal(st, 0);
  assert_int_equal(dtoh(t, dc, c, sizeof c), 0);
  for (int i = 0; i < N; i++) assert_true(c[i] == 1.5f * (float)i);
  if (!check_printf) {
    send_req(t, RGPU_OP_CTX_SYNC, 1, NULL, NULL, 0);
    assert_int_equal(reply_status(t), 0);
    rgpu_buf_free(&b);
    harness_free(t);
    return;
  }

  /* Device printf arrives as OUTPUT before the reply of the synchronising call. */
  rgpu_buf_reset(&b);
  lq.func_index = 1;
  lq.grid_x = 1;
  lq.block_x = 2;
  rgpu_msg_launch_req_encode(&b, &lq);
  int v = 42;
  send_req(t, RGPU_OP_LAUNCH, 0, &b, &v, 4);
  assert_int_equal(t->nframes == 0 || t->frames[0].h.opcode == RGPU_EVT_OUTPUT, 1);
  size_t got = 0;
  char text[256];
  for (int i = 0; i < t->nframes; i++)
    if (t->frames[i].h.opcode == RGPU_EVT_OUTPUT && got + t->frames[i].h.length < sizeof text) {
      memcpy(text + got, t->frames[i].p, t->frames[i].h.length);
      got += t->frames[i].h.length;
    }
  send_req(t, RGPU_OP_CTX_SYNC, 1, NULL, NULL, 0);
  assert_int_equal(reply_status(t), 0);
  for (int i = 0; i < t->nframes - 1; i++) {
    assert_int_equal(t->frames[i].h.opcode, RGPU_EVT_OUTPUT);
    if (got + t->frames[i].h.length < sizeof text) {
      memcpy(text + got, t->frames[i].p, t->frames[i].h.length);
      got += t->frames[i].h.length;
    }
  }
  text[got] = 0;
  assert_non_null(strstr(text, "hello 42 from 0\n"));
  assert_non_null(strstr(text, "hello 42 from 1\n"));
  rgpu_buf_free(&b);
  harness_free(t);
}

static void test_softgpu_fatbin_launch(void **state) {
  if (access(softgpu_lib, R_OK)) {
    print_message("SKIP: %s not built\n", softgpu_lib);
    skip();
  }
  fatbin_flow(softgpu_lib, RGPU_DEVICE_SOFTGPU, "kernels_zstd.fatbin", 1);
}

/* The same on a real GPU, where there is one (libcuda.so.1 loads). */
static void test_cuda_fatbin_launch(void **state) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    print_message("SKIP: no libcuda.so.1 (%s)\n", dlerror());
    skip();
  }
  dlclose(h);
  basic_flow_kind(RGPU_DEVICE_CUDA);
  fatbin_flow("libcuda.so.1", RGPU_DEVICE_CUDA, "kernels_multi.fatbin", 0);
  fatbin_flow("libcuda.so.1", RGPU_DEVICE_CUDA, "kernels_ptx.fatbin", 0);
}

/* ---- DEVICE_QUERY (server/rgpu_handlers_features.c) -------------------- */

/* One DEVICE_QUERY; returns its status and, on success, the answers
 * (values, at most cap) and their number. */
static uint32_t device_query(harness *t, uint32_t what, uint32_t device, uint32_t peer,
                             uint64_t module_id, uint32_t func_index, const uint32_t *args,
                             uint32_t nargs, uint64_t *values, uint32_t cap, uint32_t *nvalues) {
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_device_query_req q = {.what = what, .device = device, .peer = peer,
                                 .module_id = module_id, .func_index = func_index,
                                 .args = {args, nargs}};
  rgpu_msg_device_query_req_encode(&b, &q);
  send_req(t, RGPU_OP_DEVICE_QUERY, 1, &b, NULL, 0);
  rgpu_buf_free(&b);
  uint32_t st = reply_status(t);
  if (st == 0) {
    rgpu_msg_device_query_rep r;
    assert_int_equal(rgpu_msg_device_query_rep_decode(reply(t)->p, reply(t)->h.length, &r), 0);
    assert_true(r.values.count <= cap);
    for (uint32_t i = 0; i < r.values.count; i++) values[i] = rgpu_array_u64(&r.values, i);
    if (nvalues) *nvalues = r.values.count;
  }
  return st;
}

/* A driver without the functions (the fake one) answers NOT_SUPPORTED for
 * each question, never a value; unknown questions and malformed payloads
 * are refused as such. */
static void test_device_query_fake_driver(void **state) {
  harness *t = harness_new(driver_path, NULL, 0);
  hello(t, NULL, 0);
  load_stub_module(t, 3, 0);
  uint64_t v[RGPU_DQ_MAX_ARGS];
  uint32_t tex[2] = {CU_AD_FORMAT_FLOAT, 1}, ops[2] = {0, 9}, cfg[RGPU_DQ_CFG_COUNT] = {0};
  assert_int_equal(device_query(t, RGPU_DQ_TEX1D_LINEAR_WIDTH, 0, 0, 0, 0, tex, 2, v, 64, NULL),
                   CUDA_ERROR_NOT_SUPPORTED);
  assert_true(reply_msg_has(t, "cuDeviceGetTexture1DLinearMaxWidth"));
  assert_int_equal(device_query(t, RGPU_DQ_HOST_ATOMIC_CAPS, 0, 0, 0, 0, ops, 2, v, 64, NULL),
                   CUDA_ERROR_NOT_SUPPORTED);
  assert_int_equal(device_query(t, RGPU_DQ_P2P_ATOMIC_CAPS, 0, 1, 0, 0, ops, 2, v, 64, NULL),
                   CUDA_ERROR_NOT_SUPPORTED);
  assert_int_equal(device_query(t, RGPU_DQ_MAX_ACTIVE_CLUSTERS, 0, 0, 3, 0, cfg,
                                RGPU_DQ_CFG_COUNT, v, 64, NULL),
                   CUDA_ERROR_NOT_SUPPORTED);
  assert_int_equal(device_query(t, RGPU_DQ_MAX_CLUSTER_SIZE, 0, 0, 3, 0, cfg, RGPU_DQ_CFG_COUNT,
                                v, 64, NULL),
                   CUDA_ERROR_NOT_SUPPORTED);
  assert_int_equal(device_query(t, RGPU_DQ_RESET_PERSISTING_L2, 0, 0, 0, 0, NULL, 0, v, 64, NULL),
                   CUDA_ERROR_NOT_SUPPORTED);
  assert_int_equal(device_query(t, 0, 0, 0, 0, 0, NULL, 0, v, 64, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(device_query(t, 999, 0, 0, 0, 0, NULL, 0, v, 64, NULL),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_msg_has(t, "unknown question 999"));
  /* More args than the message allows, and a truncated payload. */
  uint32_t many[RGPU_DQ_MAX_ARGS + 1] = {0};
  assert_int_equal(device_query(t, RGPU_DQ_HOST_ATOMIC_CAPS, 0, 0, 0, 0, many,
                                RGPU_DQ_MAX_ARGS + 1, v, 64, NULL),
                   CUDA_ERROR_INVALID_VALUE);
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_buf_put_u32(&b, RGPU_DQ_TEX1D_LINEAR_WIDTH);
  send_req(t, RGPU_OP_DEVICE_QUERY, 1, &b, NULL, 0);
  assert_int_equal(reply_status(t), CUDA_ERROR_INVALID_VALUE);
  rgpu_buf_free(&b);
  harness_free(t);
}

/* softgpu's answers: its texture limit, what its interpreter's atomics do,
 * clusters of one block only, a reset with nothing to reset; and the
 * handler's own checks of devices, arguments and modules. */
static void test_device_query_softgpu(void **state) {
  harness *t = softgpu_session(0);
  uint64_t v[RGPU_DQ_MAX_ARGS];
  uint32_t n = 0;
  uint32_t tex[2] = {CU_AD_FORMAT_FLOAT, 4};
  assert_int_equal(device_query(t, RGPU_DQ_TEX1D_LINEAR_WIDTH, 0, 0, 0, 0, tex, 2, v, 64, &n), 0);
  assert_int_equal(n, 1);
  assert_int_equal(v[0], 1u << 27);
  assert_int_equal(device_query(t, RGPU_DQ_TEX1D_LINEAR_WIDTH, 5, 0, 0, 0, tex, 2, v, 64, NULL),
                   CUDA_ERROR_INVALID_DEVICE);
  assert_int_equal(device_query(t, RGPU_DQ_TEX1D_LINEAR_WIDTH, 0, 0, 0, 0, tex, 1, v, 64, NULL),
                   CUDA_ERROR_INVALID_VALUE);
  tex[1] = 3; /* no three-channel textures */
  assert_int_equal(device_query(t, RGPU_DQ_TEX1D_LINEAR_WIDTH, 0, 0, 0, 0, tex, 2, v, 64, NULL),
                   CUDA_ERROR_INVALID_VALUE);

  uint32_t ops[3] = {CU_ATOMIC_OPERATION_INTEGER_ADD, CU_ATOMIC_OPERATION_FLOAT_ADD,
                     CU_ATOMIC_OPERATION_INTEGER_INCREMENT};
  assert_int_equal(device_query(t, RGPU_DQ_HOST_ATOMIC_CAPS, 0, 0, 0, 0, ops, 3, v, 64, &n), 0);
  assert_int_equal(n, 3);
  const unsigned s32_64 = CU_ATOMIC_CAPABILITY_SCALAR_32 | CU_ATOMIC_CAPABILITY_SCALAR_64;
  assert_int_equal(v[0], CU_ATOMIC_CAPABILITY_SIGNED | CU_ATOMIC_CAPABILITY_UNSIGNED |
                             CU_ATOMIC_CAPABILITY_REDUCTION | s32_64);
  assert_int_equal(v[1], CU_ATOMIC_CAPABILITY_REDUCTION | s32_64);
  assert_int_equal(v[2], CU_ATOMIC_CAPABILITY_UNSIGNED | CU_ATOMIC_CAPABILITY_REDUCTION |
                             CU_ATOMIC_CAPABILITY_SCALAR_32);
  assert_int_equal(device_query(t, RGPU_DQ_HOST_ATOMIC_CAPS, 0, 0, 0, 0, ops, 0, v, 64, NULL),
                   CUDA_ERROR_INVALID_VALUE);
  ops[1] = CU_ATOMIC_OPERATION_MAX;
  assert_int_equal(device_query(t, RGPU_DQ_HOST_ATOMIC_CAPS, 0, 0, 0, 0, ops, 2, v, 64, NULL),
                   CUDA_ERROR_INVALID_VALUE);
  /* One device: it is not its own peer, and device 1 does not exist. */
  assert_int_equal(device_query(t, RGPU_DQ_P2P_ATOMIC_CAPS, 0, 0, 0, 0, ops, 1, v, 64, NULL),
                   CUDA_ERROR_INVALID_DEVICE);
  assert_int_equal(device_query(t, RGPU_DQ_P2P_ATOMIC_CAPS, 0, 1, 0, 0, ops, 1, v, 64, NULL),
                   CUDA_ERROR_INVALID_DEVICE);

  assert_int_equal(device_query(t, RGPU_DQ_RESET_PERSISTING_L2, 0, 0, 0, 0, NULL, 0, v, 64, &n), 0);
  assert_int_equal(n, 0);

  /* Clusters need a kernel: the corpus' vecadd. */
  char fatbin[2200];
  snprintf(fatbin, sizeof fatbin, "%s/kernels_zstd.fatbin", fatbin_dir());
  size_t ilen = 0;
  void *image = read_file(fatbin, &ilen);
  if (!image) {
    print_message("SKIP (clusters): %s is missing\n", fatbin);
    harness_free(t);
    return;
  }
  const char *funcs[] = {"_Z6vecaddPKfS0_Pfi"};
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_module_load_req mq = {.module_id = 1, .func_names = {.items = funcs, .count = 1}};
  rgpu_msg_module_load_req_encode(&b, &mq);
  send_req(t, RGPU_OP_MODULE_LOAD, 1, &b, image, ilen);
  free(image);
  rgpu_buf_free(&b);
  if (reply_status(t) != 0) {
    print_message("SKIP (clusters): softgpu cannot load the corpus\n");
    harness_free(t);
    return;
  }
  uint32_t cfg[RGPU_DQ_CFG_COUNT] = {[RGPU_DQ_CFG_GRID_X] = 4, [RGPU_DQ_CFG_GRID_Y] = 1,
                                     [RGPU_DQ_CFG_GRID_Z] = 1, [RGPU_DQ_CFG_BLOCK_X] = 256,
                                     [RGPU_DQ_CFG_BLOCK_Y] = 1, [RGPU_DQ_CFG_BLOCK_Z] = 1};
  assert_int_equal(device_query(t, RGPU_DQ_MAX_CLUSTER_SIZE, 0, 0, 1, 0, cfg, RGPU_DQ_CFG_COUNT,
                                v, 64, &n), 0);
  assert_int_equal(n, 1);
  assert_int_equal(v[0], 1);
  /* No cluster dimension, and a cluster of two: softgpu has neither. */
  assert_int_equal(device_query(t, RGPU_DQ_MAX_ACTIVE_CLUSTERS, 0, 0, 1, 0, cfg,
                                RGPU_DQ_CFG_COUNT, v, 64, NULL),
                   CUDA_ERROR_INVALID_CLUSTER_SIZE);
  cfg[RGPU_DQ_CFG_CLUSTER_X] = 2;
  cfg[RGPU_DQ_CFG_CLUSTER_Y] = cfg[RGPU_DQ_CFG_CLUSTER_Z] = 1;
  assert_int_equal(device_query(t, RGPU_DQ_MAX_ACTIVE_CLUSTERS, 0, 0, 1, 0, cfg,
                                RGPU_DQ_CFG_COUNT, v, 64, NULL),
                   CUDA_ERROR_INVALID_CLUSTER_SIZE);
  cfg[RGPU_DQ_CFG_CLUSTER_X] = 1;
  assert_int_equal(device_query(t, RGPU_DQ_MAX_ACTIVE_CLUSTERS, 0, 0, 1, 0, cfg,
                                RGPU_DQ_CFG_COUNT, v, 64, &n), 0);
  assert_int_equal(n, 1);
  assert_true(v[0] >= 1);
  /* The handler's checks: the launch values, the module, the function. */
  assert_int_equal(device_query(t, RGPU_DQ_MAX_ACTIVE_CLUSTERS, 0, 0, 1, 0, cfg, 3, v, 64, NULL),
                   CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(device_query(t, RGPU_DQ_MAX_ACTIVE_CLUSTERS, 0, 0, 77, 0, cfg,
                                RGPU_DQ_CFG_COUNT, v, 64, NULL),
                   CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(device_query(t, RGPU_DQ_MAX_CLUSTER_SIZE, 0, 0, 1, 5, cfg, RGPU_DQ_CFG_COUNT,
                                v, 64, NULL),
                   CUDA_ERROR_INVALID_HANDLE);
  harness_free(t);
}

/* The generated dispatch table: every request opcode has a handler except
 * the frames the session loop keeps (RESUME, ACK), and the flags the loop
 * acts on are those the hand-written dispatch had. */
/* One VMM request (proto/rgpu_vmm_proto.h); its status, *value from the reply. */
static uint32_t vmm(harness *t, uint32_t op, int32_t device, uint64_t handle, uint64_t ptr,
                    uint64_t size, uint64_t arg, uint64_t *value) {
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_vmm_req q = {.op = op, .device = device, .handle = handle, .ptr = ptr, .size = size,
                        .arg = arg};
  rgpu_msg_vmm_req_encode(&b, &q);
  send_req(t, RGPU_OP_VMM, 1, &b, NULL, 0);
  rgpu_buf_free(&b);
  uint32_t st = reply_status(t);
  if (st == 0 && value) {
    rgpu_msg_vmm_rep r;
    assert_int_equal(rgpu_msg_vmm_rep_decode(reply(t)->p, reply(t)->h.length, &r), 0);
    *value = r.value;
  }
  return st;
}

static uint32_t memset_status(harness *t, uint64_t dst, uint64_t count) {
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_memset_req ms = {.dst = dst, .value = 7, .elem_size = 1, .count = count};
  rgpu_msg_memset_req_encode(&b, &ms);
  send_req(t, RGPU_OP_MEMSET, 1, &b, NULL, 0);
  rgpu_buf_free(&b);
  return reply_status(t);
}

/* A hostile or careless client's VMM requests on softgpu: nothing outside
 * this session's reservations is mapped, a mapping is no copy target until
 * its access is set, whole mappings only, physical memory counts against
 * the quota until it is both released and unmapped. */
/* LINK from a hostile client, on softgpu: arrays that disagree, an empty
 * input, lengths that do not add up, an option whose value would be a
 * pointer, too many options: each refused before the linker runs.  A good
 * request brings the image (softgpu's link of one PTX module is that PTX)
 * and a failed link its error log with a success reply. */
static uint32_t link_req(harness *t, const uint32_t *ids, const uint64_t *vals, uint32_t nopt,
                         const uint32_t *types, const uint32_t *lens, uint32_t nlens, const char *const *names,
                         uint32_t nin, const void *data, size_t len, rgpu_msg_link_rep *rep) {
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_link_req q = {.option_ids = {ids, nopt}, .option_values = {vals, nopt},
                         .input_types = {types, nin}, .input_lens = {lens, nlens},
                         .input_names = {.items = names, .count = nin}};
  rgpu_msg_link_req_encode(&b, &q);
  send_req(t, RGPU_OP_LINK, 1, &b, data, len);
  rgpu_buf_free(&b);
  uint32_t st = reply_status(t);
  if (st == 0 && rep) assert_int_equal(rgpu_msg_link_rep_decode(reply(t)->p, reply(t)->h.length, rep), 0);
  return st;
}

static void test_link_softgpu(void **state) {
  (void)state;
  harness *t = softgpu_session(0);
  const char ptx[] = ".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry k()\n{\n ret;\n}\n";
  const char *names[2] = {"a.ptx", "b.ptx"};
  uint32_t types[2] = {CU_JIT_INPUT_PTX, CU_JIT_INPUT_PTX}, lens[2] = {sizeof ptx, sizeof ptx};
  uint8_t two[2 * sizeof ptx];
  memcpy(two, ptx, sizeof ptx);
  memcpy(two + sizeof ptx, ptx, sizeof ptx);
  uint32_t ids[40];
  uint64_t vals[40];
  for (int i = 0; i < 40; i++) ids[i] = CU_JIT_OPTIMIZATION_LEVEL, vals[i] = 3;
  rgpu_msg_link_rep rep;
  /* Refused. */
  assert_int_equal(link_req(t, NULL, NULL, 0, types, lens, 1, names, 2, two, sizeof two, NULL),
                   CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(link_req(t, NULL, NULL, 0, types, lens, 0, names, 0, NULL, 0, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(link_req(t, NULL, NULL, 0, types, lens, 1, names, 1, two, sizeof two, NULL),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_msg_has(t, "bytes of data"));
  uint32_t zero = 0;
  assert_int_equal(link_req(t, NULL, NULL, 0, types, &zero, 1, names, 1, NULL, 0, NULL), CUDA_ERROR_INVALID_VALUE);
  uint32_t ptr_opt = CU_JIT_INFO_LOG_BUFFER;
  uint64_t ptr_val = 0x1000;
  assert_int_equal(link_req(t, &ptr_opt, &ptr_val, 1, types, lens, 1, names, 1, ptx, sizeof ptx, NULL),
                   CUDA_ERROR_NOT_SUPPORTED);
  assert_int_equal(link_req(t, ids, vals, 40, types, lens, 1, names, 1, ptx, sizeof ptx, NULL),
                   CUDA_ERROR_INVALID_VALUE);
  /* Linked: the image is the module. */
  assert_int_equal(link_req(t, ids, vals, 2, types, lens, 1, names, 1, ptx, sizeof ptx, &rep), 0);
  assert_int_equal(rep.result, CUDA_SUCCESS);
  assert_int_equal(rep.image.len, sizeof ptx);
  assert_memory_equal(rep.image.data, ptx, sizeof ptx);
  /* Two modules: softgpu refuses, with the reason in the error log. */
  assert_int_equal(link_req(t, NULL, NULL, 0, types, lens, 2, names, 2, two, sizeof two, &rep), 0);
  assert_int_equal(rep.result, CUDA_ERROR_NOT_SUPPORTED);
  assert_int_equal(rep.image.len, 0);
  char elog[256];
  snprintf(elog, sizeof elog, "%.*s", (int)(rep.error_log.len < 255 ? rep.error_log.len : 255),
           (const char *)rep.error_log.data);
  assert_non_null(strstr(elog, "one PTX"));
  harness_free(t);
}

/* TENSOR_MAP from a hostile client: a bad rank, arrays shorter or longer
 * than the rank asks, a wrong map length, an unknown kind are refused; a
 * well-formed one on softgpu (no TMA) is CUDA_ERROR_NOT_SUPPORTED, named. */
static uint32_t tmap_req(harness *t, const rgpu_msg_tensor_map_req *q) {
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_tensor_map_req_encode(&b, q);
  send_req(t, RGPU_OP_TENSOR_MAP, 1, &b, NULL, 0);
  rgpu_buf_free(&b);
  return reply_status(t);
}

static void test_tensor_map_softgpu(void **state) {
  (void)state;
  harness *t = softgpu_session(0);
  uint64_t dims[2] = {64, 64}, strides[1] = {256};
  uint32_t box[2] = {16, 16}, estr[2] = {1, 1};
  rgpu_msg_tensor_map_req q = {.kind = RGPU_TMAP_TILED, .rank = 2, .global_address = 0x1000,
                               .global_dim = {dims, 2}, .global_strides = {strides, 1},
                               .box_dim = {box, 2}, .element_strides = {estr, 2}};
  assert_int_equal(tmap_req(t, &q), CUDA_ERROR_NOT_SUPPORTED);
  assert_true(reply_msg_has(t, "cuTensorMapEncodeTiled"));
  q.rank = 0;
  assert_int_equal(tmap_req(t, &q), CUDA_ERROR_INVALID_VALUE);
  q.rank = 6;
  assert_int_equal(tmap_req(t, &q), CUDA_ERROR_INVALID_VALUE);
  q.rank = 2;
  q.global_strides.count = 0;
  assert_int_equal(tmap_req(t, &q), CUDA_ERROR_INVALID_VALUE);
  q.global_strides.count = 1;
  q.box_dim.count = 1;
  assert_int_equal(tmap_req(t, &q), CUDA_ERROR_INVALID_VALUE);
  q.box_dim.count = 2;
  q.kind = 77;
  assert_int_equal(tmap_req(t, &q), CUDA_ERROR_INVALID_VALUE);
  uint8_t short_map[64] = {0};
  rgpu_msg_tensor_map_req rq = {.kind = RGPU_TMAP_REPLACE, .map = {short_map, sizeof short_map}};
  assert_int_equal(tmap_req(t, &rq), CUDA_ERROR_INVALID_VALUE);
  harness_free(t);
}

/* STREAM_MEMOP from a hostile client, on softgpu: arrays that disagree, an
 * unknown kind, a word outside the session's memory or unaligned, a 32-bit
 * value too wide, a barrier with an address: each refused; a batch of
 * writes and a wait that holds run in stream order, and the words read
 * back. */
static uint32_t memop_req(harness *t, uint32_t n, const uint32_t *ops, const uint32_t *fl, const uint64_t *addrs,
                          const uint64_t *vals, uint32_t nvals) {
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_stream_memop_req q = {.stream = 0, .ops = {ops, n}, .op_flags = {fl, n}, .addrs = {addrs, n},
                                 .values = {vals, nvals}};
  rgpu_msg_stream_memop_req_encode(&b, &q);
  send_req(t, RGPU_OP_STREAM_MEMOP, 1, &b, NULL, 0);
  rgpu_buf_free(&b);
  return reply_status(t);
}

static void test_stream_memop_softgpu(void **state) {
  (void)state;
  harness *t = softgpu_session(0);
  uint64_t a = mem_alloc(t, 64, 0);
  uint32_t w32 = CU_STREAM_MEM_OP_WRITE_VALUE_32, w64 = CU_STREAM_MEM_OP_WRITE_VALUE_64,
           wait32 = CU_STREAM_MEM_OP_WAIT_VALUE_32, bar = CU_STREAM_MEM_OP_BARRIER, zero = 0, bad = 99;
  uint64_t va = a, big = 1ull << 40, seven = 7;
  assert_int_equal(memop_req(t, 1, &w32, &zero, &va, &seven, 0), CUDA_ERROR_INVALID_VALUE); /* counts */
  assert_int_equal(memop_req(t, 1, &bad, &zero, &va, &seven, 1), CUDA_ERROR_INVALID_VALUE);
  uint64_t outside = a + 4096, unaligned = a + 2, inside_end = a + 60;
  assert_int_equal(memop_req(t, 1, &w32, &zero, &outside, &seven, 1), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(memop_req(t, 1, &w32, &zero, &unaligned, &seven, 1), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(memop_req(t, 1, &w64, &zero, &inside_end, &seven, 1), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(memop_req(t, 1, &w32, &zero, &va, &big, 1), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(memop_req(t, 1, &bar, &zero, &va, &seven, 1), CUDA_ERROR_INVALID_VALUE);
  /* Good: two writes, a barrier, a wait that holds; then the words. */
  uint32_t ops[4] = {w32, w64, bar, wait32}, fl[4] = {0, 0, 0, CU_STREAM_WAIT_VALUE_EQ};
  uint64_t addrs[4] = {a, a + 8, 0, a}, vals[4] = {7, big, 0, 7};
  assert_int_equal(memop_req(t, 4, ops, fl, addrs, vals, 4), 0);
  uint8_t back[16];
  assert_int_equal(dtoh(t, a, back, sizeof back), 0);
  uint32_t v32;
  uint64_t v64;
  memcpy(&v32, back, 4);
  memcpy(&v64, back + 8, 8);
  assert_int_equal(v32, 7);
  assert_true(v64 == big);
  harness_free(t);
}

static void test_vmm_softgpu(void **state) {
  const uint64_t MB = 1 << 20;
  harness *t = softgpu_session(8 * MB);
  uint64_t g = 0, va = 0;
  assert_int_equal(vmm(t, RGPU_VMM_GRANULARITY, 0, 0, 0, 0, CU_MEM_ALLOC_GRANULARITY_MINIMUM, &g), 0);
  assert_int_equal(g, 2 * MB);
  assert_int_equal(vmm(t, RGPU_VMM_GRANULARITY, 9, 0, 0, 0, 0, &g), CUDA_ERROR_INVALID_DEVICE);
  assert_int_equal(vmm(t, RGPU_VMM_RESERVE, 0, 0, 0, 8 * MB, 0, &va), 0);
  assert_true(va != 0);
  assert_int_equal(vmm(t, RGPU_VMM_RESERVE, 0, 0, 0, 0, 0, NULL), CUDA_ERROR_INVALID_VALUE);

  /* Physical memory and the quota. */
  assert_int_equal(vmm(t, RGPU_VMM_CREATE, 0, 1, 0, 2 * MB, 0, NULL), 0);
  assert_int_equal(vmm(t, RGPU_VMM_CREATE, 0, 2, 0, 4 * MB, 0, NULL), 0);
  assert_int_equal(vmm(t, RGPU_VMM_CREATE, 0, 3, 0, 4 * MB, 0, NULL), CUDA_ERROR_OUT_OF_MEMORY);
  assert_true(reply_msg_has(t, "quota"));
  assert_int_equal(vmm(t, RGPU_VMM_CREATE, 0, 1, 0, 2 * MB, 0, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(vmm(t, RGPU_VMM_CREATE, 0, 0, 0, 2 * MB, 0, NULL), CUDA_ERROR_INVALID_VALUE);

  /* Mapping: inside a reservation, of a known handle. */
  assert_int_equal(vmm(t, RGPU_VMM_MAP, 0, 99, va, 2 * MB, 0, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(vmm(t, RGPU_VMM_MAP, 0, 1, va + 64 * MB, 2 * MB, 0, NULL),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_msg_has(t, "reservation"));
  assert_int_equal(vmm(t, RGPU_VMM_MAP, 0, 1, va, 4 * MB, 0, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(vmm(t, RGPU_VMM_MAP, 0, 1, va, 2 * MB, 0, NULL), 0);
  assert_int_equal(memset_status(t, va, 64), CUDA_ERROR_INVALID_VALUE); /* no access yet */
  assert_int_equal(vmm(t, RGPU_VMM_SET_ACCESS, 0, 0, va, 2 * MB, 9, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(vmm(t, RGPU_VMM_SET_ACCESS, 0, 0, va, 2 * MB,
                       CU_MEM_ACCESS_FLAGS_PROT_READWRITE, NULL), 0);
  assert_int_equal(memset_status(t, va, 64), 0);
  assert_int_equal(memset_status(t, va + MB, 2 * MB), CUDA_ERROR_INVALID_VALUE); /* past the end */
  /* The handle of a mapped address: id 1 again, one more reference. */
  uint64_t rid = 0;
  assert_int_equal(vmm(t, RGPU_VMM_RETAIN, 0, 0, va + 64, 0, 0, &rid), 0);
  assert_int_equal(rid, 1);
  assert_int_equal(vmm(t, RGPU_VMM_RELEASE, 0, 1, 0, 0, 0, NULL), 0);
  assert_int_equal(vmm(t, RGPU_VMM_RETAIN, 0, 0, va + 7 * MB, 0, 0, NULL), CUDA_ERROR_INVALID_VALUE);
  /* A second chunk beside it: a memset across the boundary is one range. */
  assert_int_equal(vmm(t, RGPU_VMM_MAP, 0, 2, va + 2 * MB, 4 * MB, 0, NULL), 0);
  assert_int_equal(vmm(t, RGPU_VMM_SET_ACCESS, 0, 0, va, 6 * MB,
                       CU_MEM_ACCESS_FLAGS_PROT_READWRITE, NULL), 0);
  assert_int_equal(memset_status(t, va + MB, 2 * MB), 0);

  /* Released while mapped: the memory stays, and so does its charge. */
  assert_int_equal(vmm(t, RGPU_VMM_RELEASE, 0, 1, 0, 0, 0, NULL), 0);
  assert_int_equal(vmm(t, RGPU_VMM_RELEASE, 0, 1, 0, 0, 0, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(vmm(t, RGPU_VMM_MAP, 0, 1, va + 6 * MB, 2 * MB, 0, NULL),
                   CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(vmm(t, RGPU_VMM_CREATE, 0, 3, 0, 4 * MB, 0, NULL), CUDA_ERROR_OUT_OF_MEMORY);
  assert_int_equal(memset_status(t, va, 64), 0);

  /* Whole mappings only; then the first goes and its memory with it. */
  assert_int_equal(vmm(t, RGPU_VMM_UNMAP, 0, 0, va + MB, 2 * MB, 0, NULL), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(vmm(t, RGPU_VMM_ADDRESS_FREE, 0, 0, va, 8 * MB, 0, NULL),
                   CUDA_ERROR_INVALID_VALUE); /* mappings left in it */
  assert_int_equal(vmm(t, RGPU_VMM_UNMAP, 0, 0, va, 2 * MB, 0, NULL), 0);
  assert_int_equal(memset_status(t, va, 64), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(memset_status(t, va + 2 * MB, 64), 0);
  assert_int_equal(vmm(t, RGPU_VMM_CREATE, 0, 3, 0, 4 * MB, 0, NULL), 0);
  assert_int_equal(vmm(t, 77, 0, 0, 0, 0, 0, NULL), CUDA_ERROR_INVALID_VALUE);
  /* The rest (a mapping, two handles, the reservation) goes with the session. */
  harness_free(t);
}

static void test_dispatch_table(void **state) {
  (void)state;
  for (uint32_t op = 0; op < 0x200; op++) {
    const rgpu_dispatch_entry *d = rgpu_dispatch_for((uint16_t)op);
    int loop = op == RGPU_OP_RESUME || op == RGPU_OP_ACK;
    if (rgpu_op_is_request((uint16_t)op) && !loop) {
      assert_non_null(d);
      assert_int_equal(d->op, op);
      assert_string_equal(d->name, rgpu_op_name((uint16_t)op));
      assert_non_null(d->run);
    } else {
      assert_null(d);
    }
  }
  static const uint16_t noctx[] = {RGPU_OP_HELLO, RGPU_OP_GOODBYE, RGPU_OP_PING,
                                   RGPU_OP_SERVER_STATUS, RGPU_OP_DRIVER_INFO,
                                   RGPU_OP_DEVICE_PROPS, RGPU_OP_CTX_SET_DEVICE,
                                   RGPU_OP_DEVICE_RESET, RGPU_OP_HOST_CALL_DONE,
                                   RGPU_OP_NVML_QUERY, RGPU_OP_PEER_ACCESS,
                                   RGPU_OP_DEVICE_QUERY};
  int n_noctx = 0, n_barrier = 0, n_query = 0, n_ends = 0;
  for (uint32_t op = 0; op < 0x200; op++) {
    const rgpu_dispatch_entry *d = rgpu_dispatch_for((uint16_t)op);
    if (!d) continue;
    n_noctx += !!(d->flags & RGPU_DISPATCH_NOCTX);
    n_barrier += !!(d->flags & RGPU_DISPATCH_BARRIER);
    n_query += !!(d->flags & RGPU_DISPATCH_QUERY);
    n_ends += !!(d->flags & RGPU_DISPATCH_ENDS);
  }
  for (size_t i = 0; i < sizeof noctx / sizeof noctx[0]; i++)
    assert_true(rgpu_dispatch_for(noctx[i])->flags & RGPU_DISPATCH_NOCTX);
  assert_int_equal(n_noctx, (int)(sizeof noctx / sizeof noctx[0]));
  assert_true(rgpu_dispatch_for(RGPU_OP_MEM_FREE)->flags & RGPU_DISPATCH_BARRIER);
  assert_true(rgpu_dispatch_for(RGPU_OP_DEVICE_RESET)->flags & RGPU_DISPATCH_BARRIER);
  assert_true(rgpu_dispatch_for(RGPU_OP_GOODBYE)->flags & RGPU_DISPATCH_BARRIER);
  assert_true(rgpu_dispatch_for(RGPU_OP_VMM)->flags & RGPU_DISPATCH_BARRIER);
  assert_int_equal(n_barrier, 4);
  assert_true(rgpu_dispatch_for(RGPU_OP_STREAM_QUERY)->flags & RGPU_DISPATCH_QUERY);
  assert_true(rgpu_dispatch_for(RGPU_OP_EVENT_QUERY)->flags & RGPU_DISPATCH_QUERY);
  assert_int_equal(n_query, 2);
  assert_true(rgpu_dispatch_for(RGPU_OP_GOODBYE)->flags & RGPU_DISPATCH_ENDS);
  assert_int_equal(n_ends, 1);
}

int main(int argc, char **argv) {
  static char path[1024];
  char self[900];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  self[n > 0 ? n : 0] = 0;
  char *slash = strrchr(self, '/');
  if (slash) *slash = 0;
  snprintf(path, sizeof path, "%s/../lib/librgpu_test_driver.so", self);
  driver_path = path;
  snprintf(softgpu_lib, sizeof softgpu_lib, "%s/../lib/libsoftgpu.so", self);
  snprintf(fatbins, sizeof fatbins, "%s/../softgpu/testdata", self);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dispatch_table),
      cmocka_unit_test(test_basic_fake_driver),
      cmocka_unit_test(test_hello_first_and_auth),
      cmocka_unit_test(test_bad_driver_path),
      cmocka_unit_test(test_async_errors_and_malformed),
      cmocka_unit_test(test_quota),
      cmocka_unit_test(test_streams_events),
      cmocka_unit_test(test_modules_and_launch),
      cmocka_unit_test(test_features_fake_driver),
      cmocka_unit_test(test_device_query_fake_driver),
      cmocka_unit_test(test_device_query_softgpu),
      cmocka_unit_test(test_vmm_softgpu),
      cmocka_unit_test(test_link_softgpu),
      cmocka_unit_test(test_tensor_map_softgpu),
      cmocka_unit_test(test_stream_memop_softgpu),
      cmocka_unit_test(test_module_image_cache),
      cmocka_unit_test(test_memset_dtod_reset),
      cmocka_unit_test(test_basic_softgpu),
      cmocka_unit_test(test_softgpu_fatbin_launch),
      cmocka_unit_test(test_cuda_fatbin_launch),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
