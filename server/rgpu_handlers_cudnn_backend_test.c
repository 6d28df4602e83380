/* The cuDNN backend handlers (server/rgpu_handlers_cudnn_backend.c)
 * in-process on softgpu: a serialized graph of one forward convolution gets
 * one engine and a plan without workspace, and executes to what a host
 * reference computes (also with a hash the server does not know: it
 * rebuilds from the graph); hostile requests (malformed graphs, pointers
 * outside the session, unknown unique ids, unsupported graphs) get a clear
 * error and leave the worker serving.  Skips when softgpu is not built. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>
#include <cudnn.h>

#include "rgpu_cudnn_graph.h"
#include "rgpu_dispatch.h"
#include "rgpu_graph_nodes.h"
#include "rgpu_handlers_test_harness.h"
#include "rgpu_messages.h"
#include "rgpu_wire.h"
#include "rgpu_worker.h"

static char softgpu_lib[400];

static harness *harness_new(void) {
  if (access(softgpu_lib, R_OK)) {
    print_message("SKIP: %s not built\n", softgpu_lib);
    return NULL;
  }
  return harness_open(softgpu_lib, 11, 0);
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

/* ---- a graph writer: the wire form of proto/rgpu_messages.def ------------ */

typedef struct {
  rgpu_buf b;
  uint32_t nodes;
} gw;

static void node(gw *g, uint32_t type, uint32_t nattr) {
  rgpu_buf_put_u32(&g->b, type);
  rgpu_buf_put_u32(&g->b, nattr);
  g->nodes++;
}
static void attr(gw *g, int64_t name, uint32_t type, uint32_t count, const void *data, size_t es) {
  rgpu_buf_put_u64(&g->b, (uint64_t)name);
  rgpu_buf_put_u32(&g->b, type);
  rgpu_buf_put_u32(&g->b, count);
  if (data) rgpu_buf_put(&g->b, data, count * es);
}
static void a_i64(gw *g, int64_t name, uint32_t n, const int64_t *v) {
  attr(g, name, CUDNN_TYPE_INT64, n, v, 8);
}
static void a_enum(gw *g, int64_t name, uint32_t type, int v) { attr(g, name, type, 1, &v, 4); }
static void a_ref(gw *g, int64_t name, uint32_t idx) {
  attr(g, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &idx, 4);
}

/* x 1x2x5x5, w 3x2x3x3, padding 1, stride 2, cross-correlation: y 1x3x3x3. */
static void tensor(gw *g, int64_t uid, const int64_t d[4], int type) {
  int64_t s[4] = {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1}, align = 16;
  node(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, 5);
  a_enum(g, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, type);
  a_i64(g, CUDNN_ATTR_TENSOR_DIMENSIONS, 4, d);
  a_i64(g, CUDNN_ATTR_TENSOR_STRIDES, 4, s);
  a_i64(g, CUDNN_ATTR_TENSOR_UNIQUE_ID, 1, &uid);
  a_i64(g, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 1, &align);
}

/* The operation graph (nodes 0-5); root: 0 none, 1 heuristics, 2 plan of
 * engine `engine`, 3 that engine's config, 4 the engine. */
static void conv_graph(gw *g, int root, int type, int64_t engine) {
  rgpu_buf_init(&g->b);
  g->nodes = 0;
  rgpu_buf_put_u32(&g->b, root == 1 || root == 4 ? 7 : root == 3 ? 8 : 9);
  static const int64_t xd[4] = {1, 2, 5, 5}, wd[4] = {3, 2, 3, 3}, yd[4] = {1, 3, 3, 3};
  tensor(g, 1, xd, type);
  tensor(g, 2, wd, type);
  tensor(g, 3, yd, type);
  int64_t two = 2, pad[2] = {1, 1}, str[2] = {2, 2}, dil[2] = {1, 1};
  node(g, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, 7);
  a_enum(g, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, type);
  a_enum(g, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, CUDNN_CROSS_CORRELATION);
  a_i64(g, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, 1, &two);
  a_i64(g, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, 2, pad);
  a_i64(g, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, 2, pad);
  a_i64(g, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, 2, str);
  a_i64(g, CUDNN_ATTR_CONVOLUTION_DILATIONS, 2, dil);
  float alpha = 2;
  node(g, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, 5);
  a_ref(g, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, 0);
  a_ref(g, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, 1);
  a_ref(g, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, 2);
  a_ref(g, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, 3);
  attr(g, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha, 4);
  node(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, 2);
  attr(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, NULL, 0);
  a_ref(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, 4);
  if (root == 1) {
    node(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, 2);
    a_ref(g, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, 5);
    a_enum(g, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, CUDNN_HEUR_MODE_A);
  } else {
    node(g, CUDNN_BACKEND_ENGINE_DESCRIPTOR, 2);
    a_ref(g, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, 5);
    a_i64(g, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, 1, &engine);
    if (root == 4) return;
    node(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, 2);
    a_ref(g, CUDNN_ATTR_ENGINECFG_ENGINE, 6);
    attr(g, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, NULL, 0);
    if (root == 3) return;
    node(g, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, 2);
    attr(g, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, NULL, 0);
    a_ref(g, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, 7);
  }
}

enum { X_OFF = 0, W_OFF = 256, Y_OFF = 512, MEM = 1024 };

static uint32_t execute(harness *t, gw *g, uint64_t mem, uint64_t y, uint64_t uid_y, uint32_t n) {
  uint64_t uid[3] = {1, 2, uid_y}, ptr[3] = {mem + X_OFF, mem + W_OFF, y};
  rgpu_msg_cudnn_backend_execute_req q = {.plan_hash = 0, .graph = {g->b.data, g->b.len},
                                          .uid = {uid, n}, .ptr = {ptr, 3}};
  return HARNESS_SEND(t, RGPU_OP_CUDNN_BACKEND_EXECUTE, cudnn_backend_execute, &q, NULL, 0);
}

static void test_conv_graph(void **state) {
  (void)state;
  harness *t = harness_new();
  if (!t) skip();
  harness_hello(t);
  uint64_t mem = harness_mem_alloc(t, MEM);
  float x[50], w[54], y[27];
  for (int i = 0; i < 50; i++) x[i] = (float)((i * 7) % 11 - 5);
  for (int i = 0; i < 54; i++) w[i] = (float)((i * 5) % 7 - 3);
  rgpu_msg_memcpy_htod_req hx = {.dst = mem + X_OFF}, hw = {.dst = mem + W_OFF};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_MEMCPY_HTOD, memcpy_htod, &hx, x, sizeof x), 0);
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_MEMCPY_HTOD, memcpy_htod, &hw, w, sizeof w), 0);

  gw g;
  conv_graph(&g, 1, CUDNN_DATA_FLOAT, 0);
  rgpu_msg_cudnn_backend_heur_req hq = {.graph = {g.b.data, g.b.len}};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_BACKEND_HEUR, cudnn_backend_heur, &hq, NULL, 0), 0);
  rgpu_msg_cudnn_backend_heur_rep hr;
  assert_int_equal(rgpu_msg_cudnn_backend_heur_rep_decode(t->p, t->h.length, &hr), 0);
  assert_int_equal(hr.engine.count, 1);
  assert_int_equal(rgpu_array_u64(&hr.engine, 0), 0);
  assert_int_equal(rgpu_array_u32(&hr.knob_count, 0), 0);
  assert_int_equal(hr.workspace.count, 1);
  assert_int_equal(hr.shared_memory.count, 1);
  assert_int_equal(rgpu_array_u64(&hr.workspace, 0), 0);
  rgpu_buf_free(&g.b);

  /* cuDNN's answers about an engine and a config made by index. */
  for (int root = 3; root <= 4; root++) {
    conv_graph(&g, root, CUDNN_DATA_FLOAT, 0);
    rgpu_msg_cudnn_backend_info_req iq = {.graph = {g.b.data, g.b.len}};
    assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_BACKEND_INFO, cudnn_backend_info, &iq, NULL, 0), 0);
    rgpu_msg_cudnn_backend_info_rep ir;
    assert_int_equal(rgpu_msg_cudnn_backend_info_rep_decode(t->p, t->h.length, &ir), 0);
    assert_int_equal(ir.workspace, 0);
    assert_int_equal(ir.numerical.count, 0);
    assert_int_equal(ir.behavior.count, 0);
    rgpu_buf_free(&g.b);
    conv_graph(&g, root, CUDNN_DATA_FLOAT, 5);
    iq.graph = (rgpu_bytes){g.b.data, g.b.len};
    assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_BACKEND_INFO, cudnn_backend_info, &iq, NULL, 0),
                     CUDA_ERROR_NOT_SUPPORTED);
    assert_true(reply_says(t, "engine 0"));
    rgpu_buf_free(&g.b);
  }
  /* The root must be an engine or a config. */
  conv_graph(&g, 1, CUDNN_DATA_FLOAT, 0);
  rgpu_msg_cudnn_backend_info_req bad = {.graph = {g.b.data, g.b.len}};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_BACKEND_INFO, cudnn_backend_info, &bad, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "no engine or engine config"));
  rgpu_buf_free(&g.b);

  conv_graph(&g, 2, CUDNN_DATA_FLOAT, 0);
  rgpu_msg_cudnn_backend_plan_req pq = {.graph = {g.b.data, g.b.len}};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_BACKEND_PLAN, cudnn_backend_plan, &pq, NULL, 0), 0);
  rgpu_msg_cudnn_backend_plan_rep pr;
  assert_int_equal(rgpu_msg_cudnn_backend_plan_rep_decode(t->p, t->h.length, &pr), 0);
  assert_int_equal(pr.workspace_size, 0);
  assert_int_equal(execute(t, &g, mem, mem + Y_OFF, 3, 3), 0);
  rgpu_msg_memcpy_dtoh_req dq = {.src = mem + Y_OFF, .size = sizeof y};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_MEMCPY_DTOH, memcpy_dtoh, &dq, NULL, 0), 0);
  memcpy(y, t->p, sizeof y);
  for (int k = 0; k < 3; k++)
    for (int oh = 0; oh < 3; oh++)
      for (int ow = 0; ow < 3; ow++) {
        float acc = 0;
        for (int c = 0; c < 2; c++)
          for (int r = 0; r < 3; r++)
            for (int s = 0; s < 3; s++) {
              int ih = oh * 2 - 1 + r, iw = ow * 2 - 1 + s;
              if (ih < 0 || ih >= 5 || iw < 0 || iw >= 5) continue;
              acc += w[((k * 2 + c) * 3 + r) * 3 + s] * x[(c * 5 + ih) * 5 + iw];
            }
        assert_true(y[(k * 3 + oh) * 3 + ow] == 2 * acc);
      }

  /* Hostile executes: the worker answers each and serves on. */
  assert_int_equal(execute(t, &g, mem, mem + 1000, 3, 3), CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "not inside a device allocation"));
  assert_int_equal(execute(t, &g, mem, mem + Y_OFF, 99, 3), CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "names no tensor"));
  assert_int_equal(execute(t, &g, mem, mem + Y_OFF, 3, 2), CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "unique ids for"));
  /* Values for by-value tensors the plan does not have. */
  {
    uint64_t uid[3] = {1, 2, 3}, ptr[3] = {mem + X_OFF, mem + W_OFF, mem + Y_OFF};
    float v = 1;
    rgpu_msg_cudnn_backend_execute_req q = {.graph = {g.b.data, g.b.len}, .uid = {uid, 3},
                                            .ptr = {ptr, 3}, .by_value = {&v, sizeof v}};
    assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_BACKEND_EXECUTE, cudnn_backend_execute, &q, NULL, 0),
                     CUDA_ERROR_INVALID_VALUE);
    assert_true(reply_says(t, "by-value"));
  }
  rgpu_buf_free(&g.b);

  /* Malformed graphs: truncated, a forward reference, trailing bytes. */
  conv_graph(&g, 2, CUDNN_DATA_FLOAT, 0);
  pq.graph = (rgpu_bytes){g.b.data, g.b.len - 3};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_BACKEND_PLAN, cudnn_backend_plan, &pq, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "malformed"));
  rgpu_buf_put_u32(&g.b, 0);
  pq.graph = (rgpu_bytes){g.b.data, g.b.len};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_BACKEND_PLAN, cudnn_backend_plan, &pq, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  rgpu_buf_free(&g.b);
  gw f;
  rgpu_buf_init(&f.b);
  rgpu_buf_put_u32(&f.b, 1);
  node(&f, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, 1);
  a_ref(&f, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, 0); /* itself */
  pq.graph = (rgpu_bytes){f.b.data, f.b.len};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_BACKEND_PLAN, cudnn_backend_plan, &pq, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "malformed"));
  rgpu_buf_free(&f.b);

  /* Not softgpu's: double data, another engine. */
  conv_graph(&g, 1, CUDNN_DATA_DOUBLE, 0);
  hq.graph = (rgpu_bytes){g.b.data, g.b.len};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_BACKEND_HEUR, cudnn_backend_heur, &hq, NULL, 0),
                   CUDA_ERROR_NOT_SUPPORTED);
  rgpu_buf_free(&g.b);
  conv_graph(&g, 2, CUDNN_DATA_FLOAT, 5);
  pq.graph = (rgpu_bytes){g.b.data, g.b.len};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_BACKEND_PLAN, cudnn_backend_plan, &pq, NULL, 0),
                   CUDA_ERROR_NOT_SUPPORTED);
  assert_true(reply_says(t, "engine 0"));
  rgpu_buf_free(&g.b);
  harness_free(t);
}

/* Sends GRAPH_EXEC_CREATE for exec id `id`: one LIB node carrying req
 * (len bytes, its stream field at stream_at) with opcode `opcode`. */
static uint32_t create_lib_graph(harness *t, uint64_t id, uint32_t opcode, const uint8_t *req,
                                 size_t len, uint64_t stream_at) {
  rgpu_gnode n;
  memset(&n, 0, sizeof n);
  n.type = RGPU_GNODE_LIB;
  n.lib = (rgpu_gnode_lib){.opcode = opcode, .stream_at = stream_at};
  uint64_t words[RGPU_GNODE_WORDS];
  rgpu_gnode_encode(&n, words);
  uint32_t type = RGPU_GNODE_LIB, plen = (uint32_t)len;
  rgpu_msg_graph_exec_create_req q = {.exec_id = id,
                                      .types = {&type, 1},
                                      .words = {words, RGPU_GNODE_WORDS},
                                      .param_lens = {&plen, 1},
                                      .params = {req, len}};
  return HARNESS_SEND(t, RGPU_OP_GRAPH_EXEC_CREATE, graph_exec_create, &q, NULL, 0);
}

/* A library call as a graph's node (a LIB node): on softgpu the graph is
 * replayed and the node runs as the plain call it carries, at every
 * launch; what is not a library call, or a request whose stream field is
 * not inside it, is refused at instantiation with a reason. */
static void test_graph_lib_node(void **state) {
  (void)state;
  harness *t = harness_new();
  if (!t) skip();
  harness_hello(t);
  uint64_t mem = harness_mem_alloc(t, MEM);
  float x[50], w[54], y[27];
  for (int i = 0; i < 50; i++) x[i] = 1;
  for (int i = 0; i < 54; i++) w[i] = 1;
  rgpu_msg_memcpy_htod_req hx = {.dst = mem + X_OFF}, hw = {.dst = mem + W_OFF};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_MEMCPY_HTOD, memcpy_htod, &hx, x, sizeof x), 0);
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_MEMCPY_HTOD, memcpy_htod, &hw, w, sizeof w), 0);
  gw g;
  conv_graph(&g, 2, CUDNN_DATA_FLOAT, 0);
  uint64_t uid[3] = {1, 2, 3}, ptr[3] = {mem + X_OFF, mem + W_OFF, mem + Y_OFF};
  rgpu_msg_cudnn_backend_execute_req eq = {.graph = {g.b.data, g.b.len}, .uid = {uid, 3},
                                           .ptr = {ptr, 3}};
  rgpu_buf req;
  rgpu_buf_init(&req);
  assert_int_equal(rgpu_msg_cudnn_backend_execute_req_encode(&req, &eq), 0);
  /* handle (8 bytes), then the stream field. */
  assert_int_equal(create_lib_graph(t, 77, RGPU_OP_CUDNN_BACKEND_EXECUTE, req.data, req.len, 8), 0);
  for (int launch = 0; launch < 2; launch++) {
    float zero[27] = {0};
    rgpu_msg_memcpy_htod_req hy = {.dst = mem + Y_OFF};
    assert_int_equal(HARNESS_SEND(t, RGPU_OP_MEMCPY_HTOD, memcpy_htod, &hy, zero, sizeof zero), 0);
    rgpu_msg_graph_launch_req lq = {.exec_id = 77, .stream = 0};
    assert_int_equal(HARNESS_SEND(t, RGPU_OP_GRAPH_LAUNCH, graph_launch, &lq, NULL, 0), 0);
    rgpu_msg_memcpy_dtoh_req dq = {.src = mem + Y_OFF, .size = sizeof y};
    assert_int_equal(HARNESS_SEND(t, RGPU_OP_MEMCPY_DTOH, memcpy_dtoh, &dq, NULL, 0), 0);
    memcpy(y, t->p, sizeof y);
    /* Ones everywhere, alpha 2: 2 x (taps inside the padded 5x5 input) x 2 channels. */
    assert_true(y[0] == 2 * 4 * 2 && y[4] == 2 * 9 * 2);
  }
  /* Its memory freed: the next launch runs the call, which refuses it. */
  rgpu_msg_mem_free_req fq = {.dptr = mem};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_MEM_FREE, mem_free, &fq, NULL, 0), 0);
  rgpu_msg_graph_launch_req lq = {.exec_id = 77, .stream = 0};
  assert_int_not_equal(HARNESS_SEND(t, RGPU_OP_GRAPH_LAUNCH, graph_launch, &lq, NULL, 0), 0);
  /* Refused at instantiation: a stream field past the request's end, an
   * opcode that is no library call, one that is no opcode. */
  assert_int_equal(create_lib_graph(t, 78, RGPU_OP_CUDNN_BACKEND_EXECUTE, req.data, req.len, req.len - 4),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "stream field"));
  assert_int_equal(create_lib_graph(t, 79, RGPU_OP_MEM_ALLOC, req.data, req.len, 8),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "no library call of a graph"));
  assert_int_equal(create_lib_graph(t, 80, 0x12345, req.data, req.len, 8), CUDA_ERROR_INVALID_VALUE);
  rgpu_buf_free(&req);
  rgpu_buf_free(&g.b);
  harness_free(t);
}

/* A tensor's extent never wraps: (2^40)^2 bytes of span is refused (0),
 * not taken modulo 2^64, where it would pass an allocation check. */
static void test_tensor_extent_overflow(void **state) {
  (void)state;
  gw g;
  rgpu_buf_init(&g.b);
  g.nodes = 0;
  rgpu_buf_put_u32(&g.b, 2);
  static const int64_t big[4] = {1ll << 40, 1ll << 40, 1, 1}, ok[4] = {1, 2, 3, 4};
  int64_t strides[4] = {1ll << 40, 1, 1, 1}, uid = 9, align = 16;
  node(&g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, 5);
  a_enum(&g, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
  a_i64(&g, CUDNN_ATTR_TENSOR_DIMENSIONS, 4, big);
  a_i64(&g, CUDNN_ATTR_TENSOR_STRIDES, 4, strides);
  a_i64(&g, CUDNN_ATTR_TENSOR_UNIQUE_ID, 1, &uid);
  a_i64(&g, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 1, &align);
  tensor(&g, 10, ok, CUDNN_DATA_FLOAT);
  rgpu_cudnn_wgraph wg;
  assert_int_equal(rgpu_cudnn_graph_decode(g.b.data, g.b.len, &wg), 0);
  assert_int_equal(rgpu_cudnn_graph_tensor_extent(&wg.node[0]), 0);
  assert_int_equal(rgpu_cudnn_graph_tensor_extent(&wg.node[1]), 24 * 4);
  rgpu_cudnn_graph_free(&wg);
  rgpu_buf_free(&g.b);
}

/* ---- pointwise graphs: softgpu's planner ------------------------------------ */

static void tensor_v(gw *g, int64_t uid, const int64_t d[4], int virt) {
  int64_t s[4] = {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1};
  /* PW_HUGE: the virtual tensor's strides span 4 GiB for 12 elements. */
  if (virt == 2) s[1] = 1ll << 30;
  uint8_t v = (uint8_t)virt;
  node(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, 5);
  a_enum(g, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
  a_i64(g, CUDNN_ATTR_TENSOR_DIMENSIONS, 4, d);
  a_i64(g, CUDNN_ATTR_TENSOR_STRIDES, 4, s);
  a_i64(g, CUDNN_ATTR_TENSOR_UNIQUE_ID, 1, &uid);
  attr(g, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v, 1);
}

/* A pointwise operation node of pointwise descriptor pw on tensors x, b
 * (UINT32_MAX: none) -> y. */
static void pw_op(gw *g, uint32_t pw, uint32_t x, uint32_t b, uint32_t y) {
  node(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, b == UINT32_MAX ? 3 : 4);
  a_ref(g, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
  a_ref(g, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
  if (b != UINT32_MAX) a_ref(g, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
  a_ref(g, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
}

enum { PW_GOOD, PW_UNWRITTEN, PW_CYCLE, PW_TWO_WRITERS, PW_HUGE };

/* y = relu(a + b): a 1x2x2x3 (uid 1), b 1x2x1x1 broadcast (uid 2), the sum
 * virtual (uid 10), y (uid 3); the operations listed ReLU first.  The
 * variants break it.  root: 0 the operation graph, 1 heuristics, 2 plan of
 * engine 0. */
static void pw_graph(gw *g, int variant, int root) {
  rgpu_buf_init(&g->b);
  g->nodes = 0;
  rgpu_buf_put_u32(&g->b, 0); /* patched below */
  static const int64_t full[4] = {1, 2, 2, 3}, chan[4] = {1, 2, 1, 1};
  tensor_v(g, 1, full, 0);  /* 0: a */
  tensor_v(g, 2, chan, 0);  /* 1: b */
  tensor_v(g, 10, full, variant == PW_HUGE ? 2 : 1); /* 2: a + b */
  tensor_v(g, 3, full, 0);  /* 3: y */
  node(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, 1); /* 4 */
  a_enum(g, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, CUDNN_POINTWISE_ADD);
  node(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, 1); /* 5 */
  a_enum(g, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, CUDNN_POINTWISE_RELU_FWD);
  pw_op(g, 5, 2, UINT32_MAX, 3); /* 6: y = relu(v) */
  if (variant == PW_CYCLE) pw_op(g, 4, 2, 1, 2); /* 7: v = v + b */
  else pw_op(g, 4, 0, 1, 2);                     /* 7: v = a + b */
  uint32_t ops[2] = {6, 7};
  if (variant == PW_TWO_WRITERS) ops[0] = 7;
  node(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, 1); /* 8 */
  attr(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
       variant == PW_UNWRITTEN ? 1 : 2, ops, 4);
  if (root == 1) {
    node(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, 1);
    a_ref(g, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, 8);
  } else if (root == 2) {
    int64_t zero = 0;
    node(g, CUDNN_BACKEND_ENGINE_DESCRIPTOR, 2); /* 9 */
    a_ref(g, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, 8);
    a_i64(g, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, 1, &zero);
    node(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, 1); /* 10 */
    a_ref(g, CUDNN_ATTR_ENGINECFG_ENGINE, 9);
    node(g, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, 1);
    a_ref(g, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, 10);
  }
  memcpy(g->b.data, &g->nodes, 4);
}

static void test_pointwise_graph(void **state) {
  (void)state;
  harness *t = harness_new();
  if (!t) skip();
  harness_hello(t);
  uint64_t mem = harness_mem_alloc(t, MEM);
  float a[12], b[2] = {0.5f, -1.0f}, y[12];
  for (int i = 0; i < 12; i++) a[i] = (float)(i % 5) - 2.0f;
  rgpu_msg_memcpy_htod_req ha = {.dst = mem + X_OFF}, hb = {.dst = mem + W_OFF};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_MEMCPY_HTOD, memcpy_htod, &ha, a, sizeof a), 0);
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_MEMCPY_HTOD, memcpy_htod, &hb, b, sizeof b), 0);
  gw g;
  pw_graph(&g, PW_GOOD, 1);
  rgpu_msg_cudnn_backend_heur_req hq = {.graph = {g.b.data, g.b.len}};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_BACKEND_HEUR, cudnn_backend_heur, &hq, NULL, 0), 0);
  rgpu_buf_free(&g.b);
  pw_graph(&g, PW_GOOD, 2);
  rgpu_msg_cudnn_backend_plan_req pq = {.graph = {g.b.data, g.b.len}};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_BACKEND_PLAN, cudnn_backend_plan, &pq, NULL, 0), 0);
  uint64_t uid[3] = {1, 2, 3}, ptr[3] = {mem + X_OFF, mem + W_OFF, mem + Y_OFF};
  rgpu_msg_cudnn_backend_execute_req q = {.graph = {g.b.data, g.b.len}, .uid = {uid, 3},
                                          .ptr = {ptr, 3}};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_BACKEND_EXECUTE, cudnn_backend_execute, &q, NULL, 0), 0);
  rgpu_msg_memcpy_dtoh_req dq = {.src = mem + Y_OFF, .size = sizeof y};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_MEMCPY_DTOH, memcpy_dtoh, &dq, NULL, 0), 0);
  memcpy(y, t->p, sizeof y);
  for (int i = 0; i < 12; i++) {
    float v = a[i] + b[i / 6];
    assert_true(y[i] == (v > 0 ? v : 0));
  }
  /* A virtual tensor whose strides span more host memory than softgpu
   * gives one execute: planned, but its execute is refused. */
  gw hg;
  pw_graph(&hg, PW_HUGE, 2);
  rgpu_msg_cudnn_backend_execute_req hq2 = {.graph = {hg.b.data, hg.b.len}, .uid = {uid, 3},
                                            .ptr = {ptr, 3}};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_BACKEND_EXECUTE, cudnn_backend_execute, &hq2,
                                NULL, 0), CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "softgpu holds at most"));
  rgpu_buf_free(&hg.b);
  /* A variant pack without y's pointer: refused, nothing run. */
  q.uid.count = q.ptr.count = 2;
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_BACKEND_EXECUTE, cudnn_backend_execute, &q, NULL, 0),
                   CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "no pointer for tensor 3"));
  rgpu_buf_free(&g.b);

  /* The engine count: softgpu's one engine for a graph it plans, none for
   * one it cannot. */
  rgpu_msg_cudnn_backend_engine_count_rep cr;
  pw_graph(&g, PW_GOOD, 0);
  rgpu_msg_cudnn_backend_engine_count_req cq = {.graph = {g.b.data, g.b.len}};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_BACKEND_ENGINE_COUNT, cudnn_backend_engine_count,
                                &cq, NULL, 0), 0);
  assert_int_equal(rgpu_msg_cudnn_backend_engine_count_rep_decode(t->p, t->h.length, &cr), 0);
  assert_int_equal(cr.count, 1);
  rgpu_buf_free(&g.b);
  pw_graph(&g, PW_CYCLE, 0);
  cq.graph = (rgpu_bytes){g.b.data, g.b.len};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_BACKEND_ENGINE_COUNT, cudnn_backend_engine_count,
                                &cq, NULL, 0), 0);
  assert_int_equal(rgpu_msg_cudnn_backend_engine_count_rep_decode(t->p, t->h.length, &cr), 0);
  assert_int_equal(cr.count, 0);
  rgpu_buf_free(&g.b);
  pw_graph(&g, PW_GOOD, 1); /* the root is no operation graph */
  cq.graph = (rgpu_bytes){g.b.data, g.b.len};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_BACKEND_ENGINE_COUNT, cudnn_backend_engine_count,
                                &cq, NULL, 0), CUDA_ERROR_INVALID_VALUE);
  assert_true(reply_says(t, "no operation graph"));
  rgpu_buf_free(&g.b);

  /* Graphs softgpu cannot order: each refused with its reason. */
  static const struct {
    int variant;
    const char *says;
  } bad[] = {{PW_UNWRITTEN, "never written"}, {PW_CYCLE, "cycle"},
             {PW_TWO_WRITERS, "two operations write"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    pw_graph(&g, bad[i].variant, 1);
    hq.graph = (rgpu_bytes){g.b.data, g.b.len};
    assert_int_equal(HARNESS_SEND(t, RGPU_OP_CUDNN_BACKEND_HEUR, cudnn_backend_heur, &hq, NULL, 0),
                     CUDA_ERROR_NOT_SUPPORTED);
    assert_true(reply_says(t, bad[i].says));
    rgpu_buf_free(&g.b);
  }
  harness_free(t);
}

int main(void) {
  char self[360];
  harness_exe_dir(self, sizeof self);
  snprintf(softgpu_lib, sizeof softgpu_lib, "%s/../lib/libsoftgpu.so", self);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv_graph),
      cmocka_unit_test(test_pointwise_graph),
      cmocka_unit_test(test_graph_lib_node),
      cmocka_unit_test(test_tensor_extent_overflow),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
