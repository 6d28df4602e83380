/* Graph requests in-process on the server's fake driver (no driver graph
 * API there, so launches replay): instantiation checks every node, launch
 * re-checks what may have been freed since, host data travels with the
 * launch, device-to-host results with its reply, and updates are checked
 * before anything changes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rgpu_graph.h"
#include "rgpu_messages.h"
#include "rgpu_worker.h"

static char driver_path[512];

typedef struct {
  rgpu_worker *w;
  rgpu_buf out;
  uint64_t seq;
  rgpu_frame_hdr last;
  const uint8_t *last_p;
} harness;

static uint32_t req(harness *t, uint16_t op, const rgpu_buf *fields, const void *tail, size_t tail_len) {
  rgpu_buf pl;
  rgpu_buf_init(&pl);
  if (fields) rgpu_buf_put(&pl, fields->data, fields->len);
  if (tail_len) rgpu_buf_put(&pl, tail, tail_len);
  rgpu_frame_hdr h = {RGPU_PROTO_VERSION, RGPU_KIND_REQUEST, op, (uint32_t)pl.len, RGPU_REQ_NEED_REPLY,
                      ++t->seq};
  rgpu_buf_reset(&t->out);
  rgpu_worker_handle(t->w, &h, pl.data, pl.len, &t->out);
  rgpu_buf_free(&pl);
  /* The reply is the last frame. */
  size_t off = 0;
  while (off < t->out.len) {
    assert_int_equal(rgpu_frame_hdr_decode(t->out.data + off, RGPU_FRAME_MAX_PAYLOAD, &t->last), 0);
    t->last_p = t->out.data + off + RGPU_FRAME_HDR_SIZE;
    off += RGPU_FRAME_HDR_SIZE + t->last.length;
  }
  assert_int_equal(t->last.kind, RGPU_KIND_REPLY);
  assert_int_equal(t->last.seq, t->seq);
  return t->last.aux;
}

static harness *start(void) {
  harness *t = calloc(1, sizeof *t);
  rgpu_worker_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.device = RGPU_DEVICE_SOFTGPU;
  snprintf(cfg.softgpu_lib, sizeof cfg.softgpu_lib, "%s", driver_path);
  cfg.session_id = 9;
  cfg.max_payload = RGPU_FRAME_MAX_PAYLOAD;
  snprintf(cfg.peer, sizeof cfg.peer, "test");
  t->w = rgpu_worker_new(&cfg);
  rgpu_buf_init(&t->out);
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_hello_req q = {.proto_version = RGPU_PROTO_VERSION, .caps = RGPU_CAP_ASYNC_ERRORS,
                          .client_pid = 1, .client_name = {"graph-test", 10}};
  rgpu_msg_hello_req_encode(&b, &q);
  assert_int_equal(req(t, RGPU_OP_HELLO, &b, NULL, 0), 0);
  rgpu_buf_free(&b);
  return t;
}

static void stop(harness *t) {
  rgpu_worker_free(t->w);
  rgpu_buf_free(&t->out);
  free(t);
}

static uint64_t alloc(harness *t, uint64_t size) {
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_mem_alloc_req q = {.size = size};
  rgpu_msg_mem_alloc_req_encode(&b, &q);
  assert_int_equal(req(t, RGPU_OP_MEM_ALLOC, &b, NULL, 0), 0);
  rgpu_buf_free(&b);
  rgpu_msg_mem_alloc_rep r;
  assert_int_equal(rgpu_msg_mem_alloc_rep_decode(t->last_p, t->last.length, &r), 0);
  return r.dptr;
}

static uint32_t u64_req(harness *t, uint16_t op, uint64_t v) {
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_buf_put_u64(&b, v);
  uint32_t st = req(t, op, &b, NULL, 0);
  rgpu_buf_free(&b);
  return st;
}

/* A node list being built. */
typedef struct {
  uint32_t types[16];
  uint64_t words[16 * RGPU_GRAPH_WORDS];
  uint32_t plens[16];
  uint32_t n;
  uint32_t edges[32];
  uint32_t nedges;
} nodes;

static uint64_t *node(nodes *g, uint32_t type) {
  g->types[g->n] = type;
  g->plens[g->n] = 0;
  uint64_t *w = &g->words[g->n * RGPU_GRAPH_WORDS];
  memset(w, 0, RGPU_GRAPH_WORDS * 8);
  g->n++;
  return w;
}
static void edge(nodes *g, uint32_t a, uint32_t b) {
  g->edges[2 * g->nedges] = a;
  g->edges[2 * g->nedges + 1] = b;
  g->nedges++;
}
static void copy_words(uint64_t *w, uint64_t dir, uint64_t dst, uint64_t src, uint64_t n) {
  w[0] = dir, w[1] = dst, w[2] = src, w[3] = n, w[4] = 1, w[5] = 1;
  w[6] = n, w[7] = 1, w[8] = n, w[9] = 1;
}

static uint32_t create(harness *t, uint64_t id, const nodes *g) {
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_graph_exec_create_req q = {
      .exec_id = id,
      .types = {g->types, g->n},
      .words = {g->words, g->n * RGPU_GRAPH_WORDS},
      .param_lens = {g->plens, g->n},
      .params = {NULL, 0},
      .edges = {g->edges, 2 * g->nedges},
  };
  rgpu_msg_graph_exec_create_req_encode(&b, &q);
  uint32_t st = req(t, RGPU_OP_GRAPH_EXEC_CREATE, &b, NULL, 0);
  rgpu_buf_free(&b);
  return st;
}

static uint32_t launch(harness *t, uint64_t id, const void *h2d, size_t n) {
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_graph_launch_req q = {.exec_id = id, .stream = 0};
  rgpu_msg_graph_launch_req_encode(&b, &q);
  uint32_t st = req(t, RGPU_OP_GRAPH_LAUNCH, &b, h2d, n);
  rgpu_buf_free(&b);
  return st;
}

static void test_graph_flow(void **state) {
  (void)state;
  harness *t = start();
  uint64_t a = alloc(t, 256), b = alloc(t, 256);
  rgpu_buf eb;
  rgpu_buf_init(&eb);
  rgpu_msg_event_create_req ec = {.event = 77, .flags = 0};
  rgpu_msg_event_create_req_encode(&eb, &ec);
  assert_int_equal(req(t, RGPU_OP_EVENT_CREATE, &eb, NULL, 0), 0);
  rgpu_buf_free(&eb);
  /* memset a <- 0x5a, h2d into a[0..16), d2d a -> b, event record, d2h b. */
  nodes g = {0};
  uint64_t *w = node(&g, RGPU_GNODE_MEMSET);
  w[0] = a, w[1] = 256, w[2] = 0x5a, w[3] = 1, w[4] = 256, w[5] = 1;
  copy_words(node(&g, RGPU_GNODE_MEMCPY), RGPU_GCOPY_H2D, a, 0, 16);
  copy_words(node(&g, RGPU_GNODE_MEMCPY), RGPU_GCOPY_D2D, b, a, 256);
  node(&g, RGPU_GNODE_EVENT_RECORD)[0] = 77;
  copy_words(node(&g, RGPU_GNODE_MEMCPY), RGPU_GCOPY_D2H, 0, b, 256);
  node(&g, RGPU_GNODE_EMPTY);
  edge(&g, 0, 1);
  edge(&g, 1, 2);
  edge(&g, 2, 3);
  edge(&g, 3, 4);
  edge(&g, 4, 5);
  assert_int_equal(create(t, 1000, &g), 0);
  assert_int_equal(create(t, 1000, &g), CUDA_ERROR_INVALID_VALUE); /* id in use */

  uint8_t in[16];
  for (int i = 0; i < 16; i++) in[i] = (uint8_t)(i + 1);
  assert_int_equal(launch(t, 1000, in, sizeof in), 0);
  assert_int_equal(t->last.length, 256);
  for (int i = 0; i < 256; i++) assert_int_equal(t->last_p[i], i < 16 ? i + 1 : 0x5a);
  /* Host data must match the graph's host-to-device bytes. */
  assert_int_equal(launch(t, 1000, in, 8), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(launch(t, 4242, in, 16), CUDA_ERROR_INVALID_HANDLE);

  /* Update: the memset value changes; a type change is refused. */
  rgpu_buf bb;
  rgpu_buf_init(&bb);
  uint32_t idx = 0, ty = RGPU_GNODE_MEMSET, pl = 0;
  uint64_t nw[RGPU_GRAPH_WORDS] = {a, 256, 0x11, 1, 256, 1};
  rgpu_msg_graph_exec_update_req u = {.exec_id = 1000, .indices = {&idx, 1}, .types = {&ty, 1},
                                      .words = {nw, RGPU_GRAPH_WORDS}, .param_lens = {&pl, 1}};
  rgpu_msg_graph_exec_update_req_encode(&bb, &u);
  assert_int_equal(req(t, RGPU_OP_GRAPH_EXEC_UPDATE, &bb, NULL, 0), 0);
  assert_int_equal(launch(t, 1000, in, sizeof in), 0);
  assert_int_equal(t->last_p[100], 0x11);
  /* An empty node in its place disables the memset (the H2D bytes still
   * land), its own type enables it again; another type is refused. */
  rgpu_buf_reset(&bb);
  ty = RGPU_GNODE_EMPTY;
  rgpu_msg_graph_exec_update_req_encode(&bb, &u);
  assert_int_equal(req(t, RGPU_OP_GRAPH_EXEC_UPDATE, &bb, NULL, 0), 0);
  in[0] = 99;
  assert_int_equal(launch(t, 1000, in, sizeof in), 0);
  assert_int_equal(t->last_p[0], 99);
  assert_int_equal(t->last_p[100], 0x11);
  rgpu_buf_reset(&bb);
  ty = RGPU_GNODE_MEMSET;
  nw[2] = 0x22;
  rgpu_msg_graph_exec_update_req_encode(&bb, &u);
  assert_int_equal(req(t, RGPU_OP_GRAPH_EXEC_UPDATE, &bb, NULL, 0), 0);
  assert_int_equal(launch(t, 1000, in, sizeof in), 0);
  assert_int_equal(t->last_p[100], 0x22);
  nw[2] = 0x11;
  rgpu_buf_reset(&bb);
  ty = RGPU_GNODE_EVENT_RECORD;
  uint64_t ew[RGPU_GRAPH_WORDS] = {77};
  u.words.data = ew;
  rgpu_msg_graph_exec_update_req_encode(&bb, &u);
  assert_int_equal(req(t, RGPU_OP_GRAPH_EXEC_UPDATE, &bb, NULL, 0), CUDA_ERROR_INVALID_VALUE);
  u.words.data = nw;
  rgpu_buf_reset(&bb);
  ty = RGPU_GNODE_MEMSET;
  nw[0] = b + 200; /* runs past b */
  rgpu_msg_graph_exec_update_req_encode(&bb, &u);
  assert_int_equal(req(t, RGPU_OP_GRAPH_EXEC_UPDATE, &bb, NULL, 0), CUDA_ERROR_INVALID_VALUE);
  rgpu_buf_free(&bb);
  assert_int_equal(launch(t, 1000, in, sizeof in), 0); /* unchanged by the refusals */
  assert_int_equal(t->last_p[100], 0x22);

  /* Freed memory and destroyed events are noticed at launch (the launch
   * checks again only after a table lost an entry: a free elsewhere makes
   * it check, and pass). */
  uint64_t c = alloc(t, 64);
  assert_int_equal(u64_req(t, RGPU_OP_MEM_FREE, c), 0);
  assert_int_equal(launch(t, 1000, in, sizeof in), 0);
  assert_int_equal(t->last_p[100], 0x22);
  nodes ge = {0};
  node(&ge, RGPU_GNODE_EVENT_RECORD)[0] = 77;
  assert_int_equal(create(t, 1001, &ge), 0);
  assert_int_equal(launch(t, 1001, NULL, 0), 0);
  assert_int_equal(u64_req(t, RGPU_OP_EVENT_DESTROY, 77), 0);
  assert_int_equal(launch(t, 1001, NULL, 0), CUDA_ERROR_INVALID_HANDLE);
  assert_int_equal(u64_req(t, RGPU_OP_MEM_FREE, b), 0);
  assert_int_equal(launch(t, 1000, in, sizeof in), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(u64_req(t, RGPU_OP_GRAPH_EXEC_DESTROY, 1000), 0);
  assert_int_equal(u64_req(t, RGPU_OP_GRAPH_EXEC_DESTROY, 1000), CUDA_ERROR_INVALID_HANDLE);
  stop(t);
}

static void test_graph_refusals(void **state) {
  (void)state;
  harness *t = start();
  uint64_t a = alloc(t, 64);
  nodes g = {0};
  /* Outside any allocation. */
  copy_words(node(&g, RGPU_GNODE_MEMCPY), RGPU_GCOPY_D2D, a + 32, a, 64);
  assert_int_equal(create(t, 1, &g), CUDA_ERROR_INVALID_VALUE);
  /* Bad direction, bad memset element size, unknown event / module / type. */
  memset(&g, 0, sizeof g);
  copy_words(node(&g, RGPU_GNODE_MEMCPY), 9, a, a, 8);
  assert_int_equal(create(t, 2, &g), CUDA_ERROR_INVALID_VALUE);
  memset(&g, 0, sizeof g);
  uint64_t *w = node(&g, RGPU_GNODE_MEMSET);
  w[0] = a, w[1] = 64, w[3] = 3, w[4] = 4, w[5] = 1;
  assert_int_equal(create(t, 3, &g), CUDA_ERROR_INVALID_VALUE);
  memset(&g, 0, sizeof g);
  node(&g, RGPU_GNODE_EVENT_WAIT)[0] = 5;
  assert_int_equal(create(t, 4, &g), CUDA_ERROR_INVALID_HANDLE);
  memset(&g, 0, sizeof g);
  w = node(&g, RGPU_GNODE_KERNEL);
  w[0] = 99;
  assert_int_equal(create(t, 5, &g), CUDA_ERROR_INVALID_HANDLE);
  memset(&g, 0, sizeof g);
  node(&g, 42);
  assert_int_equal(create(t, 6, &g), CUDA_ERROR_INVALID_VALUE);
  /* A cycle, a self edge, an edge to a missing node. */
  memset(&g, 0, sizeof g);
  node(&g, RGPU_GNODE_EMPTY);
  node(&g, RGPU_GNODE_EMPTY);
  edge(&g, 0, 1);
  edge(&g, 1, 0);
  assert_int_equal(create(t, 7, &g), CUDA_ERROR_INVALID_VALUE);
  g.nedges = 0;
  edge(&g, 1, 1);
  assert_int_equal(create(t, 8, &g), CUDA_ERROR_INVALID_VALUE);
  g.nedges = 0;
  edge(&g, 0, 2);
  assert_int_equal(create(t, 9, &g), CUDA_ERROR_INVALID_VALUE);
  /* Word count that does not match the node count. */
  g.nedges = 0;
  rgpu_buf b;
  rgpu_buf_init(&b);
  rgpu_msg_graph_exec_create_req q = {.exec_id = 10, .types = {g.types, 2}, .words = {g.words, 3},
                                      .param_lens = {g.plens, 2}};
  rgpu_msg_graph_exec_create_req_encode(&b, &q);
  assert_int_equal(req(t, RGPU_OP_GRAPH_EXEC_CREATE, &b, NULL, 0), CUDA_ERROR_INVALID_VALUE);
  rgpu_buf_free(&b);
  /* A good empty graph still works after all that. */
  assert_int_equal(create(t, 11, &g), 0);
  assert_int_equal(launch(t, 11, NULL, 0), 0);
  stop(t);
}

/* Conditional nodes from a hostile client: every misplaced COND or BODY
 * node, span and cross-graph edge is refused at instantiation; a well-formed
 * one instantiates, and on a driver without the graph API its launch is
 * refused with the reason (replay cannot branch on the GPU's value). */
static uint64_t *cond(nodes *g, uint64_t kind, uint64_t size, uint64_t span) {
  uint64_t *w = node(g, RGPU_GNODE_COND);
  w[0] = 0xC0D1000000000001ull, w[1] = kind, w[2] = size, w[3] = 1, w[4] = 1, w[5] = span;
  return w;
}

static void test_graph_conditional_structure(void **state) {
  (void)state;
  harness *t = start();
  uint64_t a = alloc(t, 64);
  nodes g;
#define MEMSET_A(g)                                   \
  do {                                                \
    uint64_t *mw_ = node(&(g), RGPU_GNODE_MEMSET);    \
    mw_[0] = a, mw_[1] = 64, mw_[3] = 1, mw_[4] = 64, mw_[5] = 1; \
  } while (0)
  /* Good: empty -> WHILE { body: memset }. */
  memset(&g, 0, sizeof g);
  node(&g, RGPU_GNODE_EMPTY);
  cond(&g, RGPU_GCOND_WHILE, 1, 2);
  node(&g, RGPU_GNODE_BODY)[0] = 0;
  MEMSET_A(g);
  edge(&g, 0, 1);
  edge(&g, 2, 3);
  assert_int_equal(create(t, 1, &g), 0);
  assert_int_equal(launch(t, 1, NULL, 0), CUDA_ERROR_NOT_SUPPORTED);
  /* An edge from outside into the body, and one pointing backwards. */
  edge(&g, 0, 3);
  assert_int_equal(create(t, 2, &g), CUDA_ERROR_INVALID_VALUE);
  g.nedges = 1;
  edge(&g, 3, 2);
  assert_int_equal(create(t, 3, &g), CUDA_ERROR_INVALID_VALUE);
  /* The span runs past the graph. */
  memset(&g, 0, sizeof g);
  cond(&g, RGPU_GCOND_IF, 1, 5);
  node(&g, RGPU_GNODE_BODY)[0] = 0;
  assert_int_equal(create(t, 4, &g), CUDA_ERROR_INVALID_VALUE);
  /* A body's first node is not its BODY node. */
  memset(&g, 0, sizeof g);
  cond(&g, RGPU_GCOND_IF, 1, 2);
  MEMSET_A(g);
  node(&g, RGPU_GNODE_BODY)[0] = 0;
  assert_int_equal(create(t, 5, &g), CUDA_ERROR_INVALID_VALUE);
  /* Branches out of order; fewer bodies than the size. */
  memset(&g, 0, sizeof g);
  cond(&g, RGPU_GCOND_IF, 2, 2);
  node(&g, RGPU_GNODE_BODY)[0] = 1;
  node(&g, RGPU_GNODE_BODY)[0] = 0;
  assert_int_equal(create(t, 6, &g), CUDA_ERROR_INVALID_VALUE);
  memset(&g, 0, sizeof g);
  cond(&g, RGPU_GCOND_IF, 2, 2);
  node(&g, RGPU_GNODE_BODY)[0] = 0;
  MEMSET_A(g);
  assert_int_equal(create(t, 7, &g), CUDA_ERROR_INVALID_VALUE);
  /* A BODY node outside any COND; bad kind, size 0, WHILE with two. */
  memset(&g, 0, sizeof g);
  node(&g, RGPU_GNODE_BODY)[0] = 0;
  assert_int_equal(create(t, 8, &g), CUDA_ERROR_INVALID_VALUE);
  uint64_t bad[3][2] = {{3, 1}, {RGPU_GCOND_SWITCH, 0}, {RGPU_GCOND_WHILE, 2}};
  for (int k = 0; k < 3; k++) {
    memset(&g, 0, sizeof g);
    cond(&g, bad[k][0], bad[k][1], 2);
    node(&g, RGPU_GNODE_BODY)[0] = 0;
    node(&g, RGPU_GNODE_BODY)[0] = 1;
    assert_int_equal(create(t, 9 + (uint64_t)k, &g), CUDA_ERROR_INVALID_VALUE);
  }
  /* A nested COND whose span leaves its parent's. */
  memset(&g, 0, sizeof g);
  cond(&g, RGPU_GCOND_IF, 1, 3);
  node(&g, RGPU_GNODE_BODY)[0] = 0;
  cond(&g, RGPU_GCOND_WHILE, 1, 3);
  node(&g, RGPU_GNODE_BODY)[0] = 0;
  MEMSET_A(g);
  MEMSET_A(g);
  assert_int_equal(create(t, 12, &g), CUDA_ERROR_INVALID_VALUE);
  /* The same nesting, well formed, with a node after the outer COND. */
  g.words[0 * RGPU_GRAPH_WORDS + 5] = 4;
  g.words[2 * RGPU_GRAPH_WORDS + 5] = 2;
  edge(&g, 0, 5);
  assert_int_equal(create(t, 13, &g), 0);
  /* Parameters on a COND node. */
  memset(&g, 0, sizeof g);
  cond(&g, RGPU_GCOND_IF, 1, 1);
  node(&g, RGPU_GNODE_BODY)[0] = 0;
  g.plens[0] = 8;
  rgpu_buf b;
  rgpu_buf_init(&b);
  uint8_t junk[8] = {0};
  rgpu_msg_graph_exec_create_req q = {.exec_id = 14, .types = {g.types, g.n},
                                      .words = {g.words, g.n * RGPU_GRAPH_WORDS},
                                      .param_lens = {g.plens, g.n}, .params = {junk, 8}};
  rgpu_msg_graph_exec_create_req_encode(&b, &q);
  assert_int_equal(req(t, RGPU_OP_GRAPH_EXEC_CREATE, &b, NULL, 0), CUDA_ERROR_INVALID_VALUE);
  rgpu_buf_free(&b);
#undef MEMSET_A
  /* Nothing of that broke the session. */
  memset(&g, 0, sizeof g);
  node(&g, RGPU_GNODE_EMPTY);
  assert_int_equal(create(t, 15, &g), 0);
  assert_int_equal(launch(t, 15, NULL, 0), 0);
  stop(t);
}

int main(void) {
  char self[400];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  self[n > 0 ? n : 0] = 0;
  char *slash = strrchr(self, '/');
  if (slash) *slash = 0;
  snprintf(driver_path, sizeof driver_path, "%s/../lib/librgpu_test_driver.so", self);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_graph_flow),
      cmocka_unit_test(test_graph_refusals),
      cmocka_unit_test(test_graph_conditional_structure),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
