/* A worker driven in-process by frames, for the handler unit tests
 * (rgpu_handlers_module_test.c, rgpu_handlers_nvml_test.c): requests are
 * handed to rgpu_worker_handle and its output frames read back.  Include
 * after <cmocka.h>. */
#ifndef RGPU_HANDLERS_TEST_HARNESS_H
#define RGPU_HANDLERS_TEST_HARNESS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rgpu_messages.h"
#include "rgpu_worker.h"

typedef struct {
  rgpu_worker *w;
  rgpu_buf out;
  rgpu_frame_hdr h; /* the last frame of the output (the reply) */
  const uint8_t *p; /* its payload, t->h.length bytes */
  uint64_t seq;
} harness;

/* A session's worker on the softgpu library lib, with peer "test". */
static inline harness *harness_open(const char *lib, uint64_t session_id, uint64_t quota) {
  harness *t = calloc(1, sizeof *t);
  rgpu_worker_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.device = RGPU_DEVICE_SOFTGPU;
  snprintf(cfg.softgpu_lib, sizeof cfg.softgpu_lib, "%s", lib);
  cfg.mem_quota = quota;
  cfg.session_id = session_id;
  snprintf(cfg.peer, sizeof cfg.peer, "test");
  t->w = rgpu_worker_new(&cfg);
  rgpu_buf_init(&t->out);
  return t;
}

static inline void harness_free(harness *t) {
  rgpu_worker_free(t->w);
  rgpu_buf_free(&t->out);
  free(t);
}

/* Sends one request of payload pl that wants a reply; returns the reply's
 * status, its payload in t->p / t->h.length. */
static inline uint32_t harness_request(harness *t, uint16_t op, const void *pl, size_t len) {
  rgpu_frame_hdr h = {RGPU_PROTO_VERSION, RGPU_KIND_REQUEST, op, (uint32_t)len, RGPU_REQ_NEED_REPLY,
                      ++t->seq};
  rgpu_buf_reset(&t->out);
  rgpu_worker_handle(t->w, &h, pl, len, &t->out);
  /* Walk to the last frame: events (OUTPUT) may come before the reply. */
  size_t off = 0;
  while (off < t->out.len) {
    assert_int_equal(rgpu_frame_hdr_decode(t->out.data + off, RGPU_FRAME_MAX_PAYLOAD, &t->h), 0);
    t->p = t->out.data + off + RGPU_FRAME_HDR_SIZE;
    off += RGPU_FRAME_HDR_SIZE + t->h.length;
  }
  assert_int_equal(t->h.kind, RGPU_KIND_REPLY);
  assert_int_equal(t->h.seq, t->seq);
  return t->h.aux;
}

/* The directory of the test executable into out (empty when unknown):
 * the built libraries and test data are found from it. */
static inline void harness_exe_dir(char *out, size_t cap) {
  ssize_t n = readlink("/proc/self/exe", out, cap - 1);
  out[n > 0 ? n : 0] = 0;
  char *slash = strrchr(out, '/');
  if (slash) *slash = 0;
}

/* Sends request message `msg` (*req, a rgpu_msg_<msg>_req) followed by
 * tail_len bytes of tail; returns the reply's status (harness_request). */
#define HARNESS_SEND(t, op, msg, req, tail, tail_len)                                        \
  __extension__({                                                                            \
    rgpu_buf pl_;                                                                            \
    rgpu_buf_init(&pl_);                                                                     \
    rgpu_msg_##msg##_req_encode(&pl_, (req));                                                \
    if (tail_len) rgpu_buf_put(&pl_, (tail), (tail_len));                                    \
    uint32_t st_ = harness_request((t), (op), pl_.data, pl_.len);                            \
    rgpu_buf_free(&pl_);                                                                     \
    st_;                                                                                     \
  })

/* ---- a session's usual first steps, each checked (the handler tests of
 * the library facades share them) ------------------------------------------ */

/* HELLO with asynchronous errors on (a client's usual capabilities). */
static inline void harness_hello(harness *t) {
  rgpu_msg_hello_req q = {.proto_version = RGPU_PROTO_VERSION, .caps = RGPU_CAP_ASYNC_ERRORS,
                          .client_pid = 1, .client_name = {"test", 4}};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_HELLO, hello, &q, NULL, 0), 0);
}

/* MEM_ALLOC of size bytes; the device address. */
static inline uint64_t harness_mem_alloc(harness *t, uint64_t size) {
  rgpu_msg_mem_alloc_req q = {.size = size};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_MEM_ALLOC, mem_alloc, &q, NULL, 0), 0);
  rgpu_msg_mem_alloc_rep r;
  assert_int_equal(rgpu_msg_mem_alloc_rep_decode(t->p, t->h.length, &r), 0);
  return r.dptr;
}

/* n bytes to device address dst, and back from src (legacy stream). */
static inline void harness_htod(harness *t, uint64_t dst, const void *data, size_t n) {
  rgpu_msg_memcpy_htod_req q = {.dst = dst};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_MEMCPY_HTOD, memcpy_htod, &q, data, n), 0);
}

static inline void harness_dtoh(harness *t, uint64_t src, void *data, size_t n) {
  rgpu_msg_memcpy_dtoh_req q = {.src = src, .size = n};
  assert_int_equal(HARNESS_SEND(t, RGPU_OP_MEMCPY_DTOH, memcpy_dtoh, &q, NULL, 0), 0);
  assert_int_equal(t->h.length, n);
  memcpy(data, t->p, n);
}

#endif
