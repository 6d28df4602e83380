/* The generated typed calls (rgpu_calls.h): their frames are byte for byte
 * what the generated encoders produce (the wire did not change when the
 * call sites moved to them), and rgpu_call_<op> against a scripted server
 * on a unix socket sends one frame, decodes the reply and reports errors.
 * The same server drives the client core's read path through what only a
 * busy or misbehaving server sends (events during a wait, out-of-order and
 * oversized replies, SHUTDOWN), and the lock invariants are checked. */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#include <cmocka.h>

#include "rgpu_calls.h"
#include "rgpu_client.h"
#include "rgpu_frame.h"
#include "rgpu_messages.h"
#include "rgpu_mutex.h"

/* The frame the hand-written call sites used to build: header, encoder
 * output, tail. */
static void reference_frame(uint16_t op, int need_reply, uint64_t seq, const rgpu_buf *fields,
                            const void *tail, size_t tail_len, rgpu_buf *out) {
  rgpu_frame_hdr h = {RGPU_PROTO_VERSION, RGPU_KIND_REQUEST, op,
                      (uint32_t)(fields->len + tail_len), need_reply ? RGPU_REQ_NEED_REPLY : 0,
                      seq};
  uint8_t hb[RGPU_FRAME_HDR_SIZE];
  rgpu_frame_hdr_encode(hb, &h);
  rgpu_buf_put(out, hb, sizeof hb);
  rgpu_buf_put(out, fields->data, fields->len);
  if (tail_len) rgpu_buf_put(out, tail, tail_len);
}

static void frame_bytes(const rgpu_call_frame *f, rgpu_buf *out) {
  struct iovec iov[2];
  int n = rgpu_call_frame_iov(f, iov);
  for (int i = 0; i < n; i++) rgpu_buf_put(out, iov[i].iov_base, iov[i].iov_len);
}

static void assert_same(const rgpu_buf *a, const rgpu_buf *b) {
  assert_int_equal(a->len, b->len);
  assert_memory_equal(a->data, b->data, a->len);
}

static void test_frames_match_encoders(void **state) {
  (void)state;
  rgpu_buf enc, ref, got;
  rgpu_buf_init(&enc);
  rgpu_buf_init(&ref);
  rgpu_buf_init(&got);
  rgpu_call_frame f;
  static const uint8_t data[37] = {1, 2, 3, 4, 5};

  rgpu_msg_memcpy_htod_req h = {.dst = 0x1000, .stream = 7, .data = {data, sizeof data}};
  rgpu_msg_memcpy_htod_req_encode(&enc, &h);
  reference_frame(RGPU_OP_MEMCPY_HTOD, 0, 99, &enc, data, sizeof data, &ref);
  rgpu_frame_memcpy_htod(&f, 0, 99, &h);
  frame_bytes(&f, &got);
  assert_same(&ref, &got);
  assert_ptr_equal(f.tail, data); /* by reference, not copied */

  rgpu_buf_reset(&enc), rgpu_buf_reset(&ref), rgpu_buf_reset(&got);
  rgpu_msg_memcpy_dtoh_bulk_req d = {.src = 0xabc, .size = 4 << 20, .stream = 3, .lane = 5};
  rgpu_msg_memcpy_dtoh_bulk_req_encode(&enc, &d);
  reference_frame(RGPU_OP_MEMCPY_DTOH_BULK, 1, 7, &enc, NULL, 0, &ref);
  rgpu_frame_memcpy_dtoh_bulk(&f, 1, 7, &d);
  frame_bytes(&f, &got);
  assert_same(&ref, &got);
  assert_int_equal(rgpu_call_frame_fields_len(&f), enc.len);
  assert_memory_equal(rgpu_call_frame_fields(&f), enc.data, enc.len);

  rgpu_buf_reset(&enc), rgpu_buf_reset(&ref), rgpu_buf_reset(&got);
  rgpu_msg_launch_req l = {.module_id = 9, .func_index = 2, .grid_x = 3, .grid_y = 4, .grid_z = 5,
                           .block_x = 6, .block_y = 7, .block_z = 8, .shared_bytes = 100,
                           .stream = 11, .params = {data, 16}};
  rgpu_msg_launch_req_encode(&enc, &l);
  reference_frame(RGPU_OP_LAUNCH, 0, 1234, &enc, data, 16, &ref);
  rgpu_frame_launch(&f, 0, 1234, &l);
  frame_bytes(&f, &got);
  assert_same(&ref, &got);

  rgpu_buf_reset(&enc), rgpu_buf_reset(&ref), rgpu_buf_reset(&got);
  rgpu_msg_ack_req a = {.rx_bytes = 0x123456789ull};
  rgpu_msg_ack_req_encode(&enc, &a);
  reference_frame(RGPU_OP_ACK, 0, 0, &enc, NULL, 0, &ref);
  rgpu_frame_ack(&f, 0, 0, &a);
  frame_bytes(&f, &got);
  assert_same(&ref, &got);

  /* A request with variable fields, as one contiguous frame. */
  rgpu_buf_reset(&enc), rgpu_buf_reset(&ref), rgpu_buf_reset(&got);
  uint8_t token[32] = {9, 8, 7};
  rgpu_msg_resume_req rq = {.session_token = {token, sizeof token}, .rx_bytes = 4242};
  rgpu_msg_resume_req_encode(&enc, &rq);
  reference_frame(RGPU_OP_RESUME, 0, 0, &enc, NULL, 0, &ref);
  assert_int_equal(rgpu_frame_resume_buf(&got, 0, 0, &rq), 0);
  assert_same(&ref, &got);

  rgpu_buf_free(&enc);
  rgpu_buf_free(&ref);
  rgpu_buf_free(&got);
}

/* ---- a scripted server -------------------------------------------------- */

typedef struct {
  int listen_fd;
  /* What the server saw of the request under test, and how it answers. */
  uint16_t op;
  uint32_t aux;
  uint8_t payload[256];
  uint32_t payload_len;
  uint32_t reply_status;
  int malformed; /* answer MEM_ALLOC with a truncated payload */
  int frames;    /* requests other than HELLO/GOODBYE/CTX_SET_DEVICE */
  int set_device; /* device of the last CTX_SET_DEVICE (-1: none yet) */
  /* How the next requests that want a reply are answered (client paths
   * that only a misbehaving or busy server takes). */
  enum {
    ANSWER_PLAIN,
    ANSWER_HOST_CALL_FIRST, /* a HOST_CALL event, then the reply */
    ANSWER_OWN_ERROR_FIRST, /* an ASYNC_ERROR for this very request, then success */
    ANSWER_REVERSED,        /* two requests answered second first */
    ANSWER_OVERSIZE,        /* MEMCPY_DTOH: 8 bytes more than asked */
    ANSWER_SHUTDOWN,        /* a SHUTDOWN event, then the connection closes */
  } answer;
  uint64_t held_seq; /* ANSWER_REVERSED: the first request, not answered yet */
} fake_server;

static int read_all(int fd, void *p, size_t n) {
  uint8_t *q = p;
  while (n) {
    ssize_t r = read(fd, q, n);
    if (r <= 0) return -1;
    q += r;
    n -= (size_t)r;
  }
  return 0;
}

static void reply(int fd, uint16_t op, uint64_t seq, uint32_t status, const void *p, size_t n) {
  rgpu_frame_hdr h = {RGPU_PROTO_VERSION, RGPU_KIND_REPLY, op, (uint32_t)n, status, seq};
  uint8_t hb[RGPU_FRAME_HDR_SIZE];
  rgpu_frame_hdr_encode(hb, &h);
  if (write(fd, hb, sizeof hb) != (ssize_t)sizeof hb) return;
  if (n && write(fd, p, n) != (ssize_t)n) return;
}

static void event(int fd, uint16_t op, uint64_t seq, uint32_t aux, const rgpu_buf *b) {
  rgpu_frame_hdr h = {RGPU_PROTO_VERSION, RGPU_KIND_EVENT, op, (uint32_t)b->len, aux, seq};
  uint8_t hb[RGPU_FRAME_HDR_SIZE];
  rgpu_frame_hdr_encode(hb, &h);
  if (write(fd, hb, sizeof hb) != (ssize_t)sizeof hb) return;
  if (b->len && write(fd, b->data, b->len) != (ssize_t)b->len) return;
}

/* A reply in one of the ways of fake_server.answer; 1: close the
 * connection now. */
static int answer(fake_server *s, int fd, const rgpu_frame_hdr *h, const uint8_t *pay) {
  rgpu_buf b;
  rgpu_buf_init(&b);
  int close_now = 0;
  switch (s->answer) {
  case ANSWER_HOST_CALL_FIRST: {
    rgpu_msg_host_call_evt ev = {.callback = 7, .token = 9};
    rgpu_msg_host_call_evt_encode(&b, &ev);
    event(fd, RGPU_EVT_HOST_CALL, 0, 0, &b);
    reply(fd, h->opcode, h->seq, 0, NULL, 0);
    break;
  }
  case ANSWER_OWN_ERROR_FIRST: {
    rgpu_msg_async_error_evt ev = {.message = {"it broke", 8}};
    rgpu_msg_async_error_evt_encode(&b, &ev);
    event(fd, RGPU_EVT_ASYNC_ERROR, h->seq, 700, &b);
    reply(fd, h->opcode, h->seq, 0, NULL, 0);
    break;
  }
  case ANSWER_REVERSED:
    if (!s->held_seq) {
      s->held_seq = h->seq;
    } else {
      reply(fd, h->opcode, h->seq, 0, "2nd", 3);
      reply(fd, h->opcode, s->held_seq, 0, "1st", 3);
      s->held_seq = 0;
    }
    break;
  case ANSWER_OVERSIZE: {
    rgpu_msg_memcpy_dtoh_req q;
    uint8_t junk[64] = {0};
    if (rgpu_msg_memcpy_dtoh_req_decode(pay, h->length, &q) == 0 && q.size + 8 <= sizeof junk)
      reply(fd, h->opcode, h->seq, 0, junk, q.size + 8);
    s->answer = ANSWER_PLAIN;
    break;
  }
  case ANSWER_SHUTDOWN: {
    rgpu_msg_shutdown_evt ev = {.message = {"draining", 8}};
    rgpu_msg_shutdown_evt_encode(&b, &ev);
    event(fd, RGPU_EVT_SHUTDOWN, 0, 0, &b);
    close_now = 1;
    break;
  }
  default:
    break;
  }
  rgpu_buf_free(&b);
  return close_now;
}

static void *server_main(void *arg) {
  fake_server *s = arg;
  int fd = accept(s->listen_fd, NULL, NULL);
  if (fd < 0) return NULL;
  for (;;) {
    uint8_t hb[RGPU_FRAME_HDR_SIZE];
    rgpu_frame_hdr h;
    if (read_all(fd, hb, sizeof hb) || rgpu_frame_hdr_decode(hb, 1 << 20, &h)) break;
    uint8_t pay[4096];
    if (h.length > sizeof pay || read_all(fd, pay, h.length)) break;
    rgpu_buf b;
    rgpu_buf_init(&b);
    if (h.opcode == RGPU_OP_HELLO) {
      rgpu_msg_hello_rep r = {.proto_version = RGPU_PROTO_VERSION, .caps = 0, .session_id = 1,
                              .server_name = {"fake", 4}, .device_kind = {"test", 4}};
      rgpu_msg_hello_rep_encode(&b, &r);
      reply(fd, h.opcode, h.seq, 0, b.data, b.len);
    } else if (h.opcode == RGPU_OP_GOODBYE) {
      reply(fd, h.opcode, h.seq, 0, NULL, 0);
      rgpu_buf_free(&b);
      break;
    } else if (h.opcode == RGPU_OP_CTX_SET_DEVICE) {
      rgpu_msg_ctx_set_device_req q;
      if (rgpu_msg_ctx_set_device_req_decode(pay, h.length, &q) == 0) s->set_device = (int)q.device;
    } else {
      s->frames++;
      s->op = h.opcode;
      s->aux = h.aux;
      s->payload_len = h.length < sizeof s->payload ? h.length : sizeof s->payload;
      memcpy(s->payload, pay, s->payload_len);
      if ((h.aux & RGPU_REQ_NEED_REPLY) && s->answer != ANSWER_PLAIN) {
        if (answer(s, fd, &h, pay)) {
          rgpu_buf_free(&b);
          break;
        }
      } else if (h.aux & RGPU_REQ_NEED_REPLY) {
        if (s->reply_status) {
          reply(fd, h.opcode, h.seq, s->reply_status, "no such thing", 13);
        } else if (h.opcode == RGPU_OP_MEM_ALLOC) {
          rgpu_msg_mem_alloc_rep r = {.dptr = 0xd000};
          rgpu_msg_mem_alloc_rep_encode(&b, &r);
          reply(fd, h.opcode, h.seq, 0, b.data, s->malformed ? 3 : b.len);
        } else {
          reply(fd, h.opcode, h.seq, 0, NULL, 0);
        }
      }
    }
    rgpu_buf_free(&b);
  }
  close(fd);
  return NULL;
}

typedef struct {
  fake_server s;
  pthread_t th;
  char path[108];
  rgpu_client *c;
} fixture;

static int setup(void **state) {
  static int made; /* a test may run two fake servers */
  fixture *f = calloc(1, sizeof *f);
  f->s.set_device = -1;
  snprintf(f->path, sizeof f->path, "/tmp/rgpu-calls-test-%d-%d.sock", (int)getpid(), made++);
  unlink(f->path);
  f->s.listen_fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof a.sun_path, "%s", f->path);
  if (bind(f->s.listen_fd, (struct sockaddr *)&a, sizeof a) || listen(f->s.listen_fd, 1))
    return -1;
  pthread_create(&f->th, NULL, server_main, &f->s);
  rgpu_client_config cfg;
  char err[256];
  if (rgpu_client_config_load(&cfg, NULL, NULL, err, sizeof err)) return -1;
  snprintf(cfg.server, sizeof cfg.server, "unix://%s", f->path);
  cfg.reconnect_s = 0;
  cfg.sync_every_call = 0;
  if (rgpu_client_connect(&cfg, &f->c, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return -1;
  }
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  rgpu_client_close(f->c);
  pthread_join(f->th, NULL);
  close(f->s.listen_fd);
  unlink(f->path);
  free(f);
  return 0;
}

static void test_call_decodes_reply(void **state) {
  fixture *f = *state;
  rgpu_msg_mem_alloc_req q = {.size = 4096};
  rgpu_msg_mem_alloc_rep a = {0};
  assert_int_equal(rgpu_call_mem_alloc(f->c, 0, 0, &q, &a, NULL), 0);
  assert_int_equal(a.dptr, 0xd000);
  assert_int_equal(f->s.op, RGPU_OP_MEM_ALLOC);
  assert_int_equal(f->s.aux, RGPU_REQ_NEED_REPLY);
  assert_int_equal(f->s.payload_len, 8);
  uint64_t size;
  memcpy(&size, f->s.payload, 8);
  assert_int_equal(size, 4096);
}

static void test_call_async_is_queued(void **state) {
  fixture *f = *state;
  rgpu_client_counters before, after;
  rgpu_client_get_counters(f->c, &before);
  rgpu_msg_mem_free_req q = {.dptr = 0xd000};
  assert_int_equal(rgpu_call_mem_free(f->c, 0, RGPU_CALL_ASYNC, &q, NULL, NULL), 0);
  rgpu_client_get_counters(f->c, &after);
  assert_int_equal(after.round_trips, before.round_trips); /* no wait */
  /* The next call that waits carries it, in order, without a reply. */
  rgpu_msg_mem_alloc_req q2 = {.size = 1};
  assert_int_equal(rgpu_call_mem_alloc(f->c, 0, 0, &q2, NULL, NULL), 0);
  assert_int_equal(f->s.frames, 2);
  rgpu_client_get_counters(f->c, &after);
  assert_int_equal(after.round_trips, before.round_trips + 1);
}

/* Several servers (issue 19): session A serves devices 0..1, session B
 * devices 2..3.  A request for device 3 given to A goes to B (the route),
 * as B's device 1; a device nobody owns is refused without a frame. */
static rgpu_client *g_route_a, *g_route_b;
static rgpu_client *route_by_device(int device) {
  if (device >= 0 && device < 2) return g_route_a;
  if (device >= 2 && device < 4) return g_route_b;
  return NULL;
}

static void test_device_range_routes(void **state) {
  fixture *a = *state;
  void *second = NULL;
  assert_int_equal(setup(&second), 0);
  fixture *b = second;
  g_route_a = a->c;
  g_route_b = b->c;
  rgpu_client_set_device_range(a->c, 0, 2, route_by_device);
  rgpu_client_set_device_range(b->c, 2, 2, route_by_device);
  assert_true(rgpu_client_owns_device(a->c, 1));
  assert_false(rgpu_client_owns_device(a->c, 2));
  assert_true(rgpu_client_owns_device(b->c, 3));
  assert_false(rgpu_client_owns_device(b->c, 4));
  assert_int_equal(rgpu_client_first_device(b->c), 2);

  rgpu_msg_mem_alloc_req q = {.size = 64};
  rgpu_msg_mem_alloc_rep r = {0};
  assert_int_equal(rgpu_call_mem_alloc(a->c, 1, 0, &q, &r, NULL), 0);
  assert_int_equal(a->s.set_device, 1);
  assert_int_equal(a->s.frames, 1);
  /* Device 3 through A's handle: B's session, B's own number 1. */
  assert_int_equal(rgpu_call_mem_alloc(a->c, 3, 0, &q, &r, NULL), 0);
  assert_int_equal(r.dptr, 0xd000);
  assert_int_equal(a->s.frames, 1);
  assert_int_equal(b->s.frames, 1);
  assert_int_equal(b->s.set_device, 1);
  assert_int_equal(rgpu_call_mem_alloc(b->c, 2, 0, &q, &r, NULL), 0);
  assert_int_equal(b->s.set_device, 0);
  /* Nobody's device: refused here, nothing sent. */
  assert_int_equal(rgpu_call_mem_alloc(a->c, 7, 0, &q, &r, NULL), 101);
  assert_int_equal(a->s.frames + b->s.frames, 3);
  /* A locked sequence that binds a device of another session is a routing
   * mistake: refused, not sent as a wrong number. */
  rgpu_client_lock(a->c);
  assert_int_equal(rgpu_client_bind_device_locked(a->c, 2), 101);
  rgpu_client_unlock(a->c);
  /* No route at all: only the session's own devices. */
  rgpu_client_set_device_range(b->c, 2, 2, NULL);
  assert_int_equal(rgpu_call_mem_alloc(b->c, 0, 0, &q, &r, NULL), 101);
  assert_int_equal(teardown(&second), 0);
}

static void test_call_server_error(void **state) {
  fixture *f = *state;
  f->s.reply_status = 1; /* CUDA_ERROR_INVALID_VALUE */
  rgpu_client_reply r = {0};
  rgpu_msg_mem_alloc_rep a = {.dptr = 77};
  assert_int_equal(rgpu_call_mem_alloc(f->c, 0, 0, NULL, &a, &r), 1);
  assert_int_equal(r.status, 1);
  assert_string_equal(r.msg, "no such thing");
  assert_int_equal(a.dptr, 77); /* not decoded */
  f->s.reply_status = 0;
}

static void test_call_malformed_reply(void **state) {
  fixture *f = *state;
  f->s.malformed = 1;
  rgpu_client_reply r = {0};
  rgpu_msg_mem_alloc_rep a;
  assert_int_equal(rgpu_call_mem_alloc(f->c, 0, 0, NULL, &a, &r), 999);
  assert_non_null(strstr(r.msg, "malformed MEM_ALLOC"));
  f->s.malformed = 0;
}

static void test_call_pointer_reply_needs_payload(void **state) {
  fixture *f = *state;
  int frames = f->s.frames;
  rgpu_msg_device_props_rep p;
  assert_int_equal(rgpu_call_device_props(f->c, -1, 0, NULL, &p, NULL), RGPU_CLIENT_EARG);
  assert_int_equal(f->s.frames, frames); /* nothing was sent */
  assert_string_equal(rgpu_status_name(RGPU_CLIENT_EARG), "RGPU_CLIENT_EARG");
}

static void test_status_ranges(void **state) {
  (void)state;
  assert_int_equal(rgpu_status_layer(-32), 1);
  assert_int_equal(rgpu_status_layer(-1002), 2);
  assert_int_equal(rgpu_status_layer(RGPU_CLIENT_EDEAD), 3);
  assert_int_equal(rgpu_status_layer(1), 0);
  assert_true(rgpu_status_is_cuda(1));
  assert_string_equal(rgpu_status_str(0), "success");
  assert_string_equal(rgpu_status_str(-32), "the server closed the connection");
  assert_string_equal(rgpu_status_name(-1009), "RGPU_PROTO_EINVAL");
  assert_null(rgpu_status_name(1));
}

/* ---- events and replies a busy or misbehaving server sends ------------- */

static int g_host_calls;
static uint64_t g_host_callback, g_host_token;
static int g_host_saw_lock = -1;

static void host_call_hook(void *ctx, uint64_t callback, uint64_t token) {
  g_host_calls++;
  g_host_callback = callback;
  g_host_token = token;
  g_host_saw_lock = rgpu_client_lock_held(ctx);
}

/* A HOST_CALL event read while waiting for a reply goes to the hook, with
 * the client lock held (the hook must only queue the call). */
static void test_host_call_event_reaches_hook(void **state) {
  fixture *f = *state;
  rgpu_client_set_host_call_hook(f->c, host_call_hook, f->c);
  f->s.answer = ANSWER_HOST_CALL_FIRST;
  rgpu_msg_mem_free_req q = {.dptr = 1};
  assert_int_equal(rgpu_call_mem_free(f->c, 0, 0, &q, NULL, NULL), 0);
  f->s.answer = ANSWER_PLAIN;
  assert_int_equal(g_host_calls, 1);
  assert_int_equal(g_host_callback, 7);
  assert_int_equal(g_host_token, 9);
  assert_int_equal(g_host_saw_lock, 1);
}

/* An ASYNC_ERROR for a frame of the operation being waited for is that
 * operation's result, not a latched error for a later call. */
static void test_own_async_error_is_the_result(void **state) {
  fixture *f = *state;
  f->s.answer = ANSWER_OWN_ERROR_FIRST;
  rgpu_client_reply r = {0};
  rgpu_msg_mem_free_req q = {.dptr = 1};
  assert_int_equal(rgpu_call_mem_free(f->c, 0, 0, &q, NULL, &r), 700);
  f->s.answer = ANSWER_PLAIN;
  assert_string_equal(r.msg, "it broke");
  uint32_t st = 0;
  assert_int_equal(rgpu_client_take_async_error(f->c, &st, NULL, NULL, 0), 0);
}

/* Replies to outstanding requests may come in any order: each lands in
 * its own slot, and the wait says which arrived. */
static void test_wait_any_out_of_order(void **state) {
  fixture *f = *state;
  f->s.answer = ANSWER_REVERSED;
  rgpu_buf p0, p1;
  rgpu_buf_init(&p0);
  rgpu_buf_init(&p1);
  rgpu_client_reply rs[2] = {{.payload = &p0}, {.payload = &p1}};
  uint64_t seqs[2];
  rgpu_msg_mem_free_req q = {.dptr = 1};
  rgpu_client_lock(f->c);
  uint64_t first = rgpu_client_next_seq_locked(f->c);
  assert_int_equal(rgpu_send_mem_free_locked(f->c, 1, &q, &seqs[0]), 0);
  assert_int_equal(rgpu_send_mem_free_locked(f->c, 1, &q, &seqs[1]), 0);
  size_t which = 9;
  assert_int_equal(rgpu_client_wait_any_locked(f->c, seqs, rs, 2, first, &which), 0);
  assert_int_equal(which, 1);
  assert_true(rs[1].done && !rs[0].done);
  rs[0].continued = 1;
  assert_int_equal(rgpu_client_wait_any_locked(f->c, seqs, rs, 2, first, &which), 0);
  assert_int_equal(which, 0);
  /* Nothing left to wait for: a caller bug, reported, not a hang. */
  assert_int_equal(rgpu_client_wait_any_locked(f->c, seqs, rs, 2, first, &which),
                   RGPU_PROTO_EINVAL);
  rgpu_client_unlock(f->c);
  f->s.answer = ANSWER_PLAIN;
  assert_int_equal(p0.len, 3);
  assert_memory_equal(p0.data, "1st", 3);
  assert_memory_equal(p1.data, "2nd", 3);
  rgpu_buf_free(&p0);
  rgpu_buf_free(&p1);
}

/* A copy reply larger than its destination: reported as the copy's
 * failure, nothing written past the buffer, and the stream stays in sync
 * for the next call. */
static void test_oversize_copy_reply(void **state) {
  fixture *f = *state;
  f->s.answer = ANSWER_OVERSIZE;
  uint8_t dst[8] = {0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee};
  rgpu_client_reply r = {.dst = dst, .dst_cap = 4};
  rgpu_msg_memcpy_dtoh_req q = {.src = 0xd000, .size = 4};
  assert_int_equal(rgpu_call_memcpy_dtoh(f->c, 0, 0, &q, NULL, &r), 999);
  assert_non_null(strstr(r.msg, "12 bytes for a 4-byte copy"));
  assert_int_equal(dst[0], 0xee);
  assert_int_equal(dst[4], 0xee);
  rgpu_msg_mem_alloc_rep a = {0};
  assert_int_equal(rgpu_call_mem_alloc(f->c, 0, 0, NULL, &a, NULL), 0);
  assert_int_equal(a.dptr, 0xd000);
}

/* SHUTDOWN ends the session: no resume, the call fails, later ones fail
 * fast without writing anything. */
static void test_shutdown_event_ends_session(void **state) {
  fixture *f = *state;
  f->s.answer = ANSWER_SHUTDOWN;
  rgpu_msg_mem_free_req q = {.dptr = 1};
  assert_true(rgpu_call_mem_free(f->c, 0, 0, &q, NULL, NULL) < 0);
  assert_true(rgpu_client_is_dead(f->c));
  assert_int_equal(rgpu_call_mem_free(f->c, 0, 0, &q, NULL, NULL), RGPU_CLIENT_EDEAD);
  assert_int_equal(rgpu_call_mem_free(f->c, 0, RGPU_CALL_ASYNC, &q, NULL, NULL),
                   RGPU_CLIENT_EDEAD);
}

/* ---- lock invariants (rgpu_client_internal.h) ---------------------------- */

static rgpu_client *g_hook_client;
static int g_hook_saw_lock = -1;

static void record_lock_in_hook(void) { g_hook_saw_lock = rgpu_client_lock_held(g_hook_client); }

typedef struct {
  rgpu_client *c;
  int held;
  int pump;
} other_thread;

static void *look_from_other_thread(void *arg) {
  other_thread *o = arg;
  o->held = rgpu_client_lock_held(o->c);
  o->pump = rgpu_client_try_pump(o->c);
  return NULL;
}

#ifndef NDEBUG
static rgpu_client *g_child_client;
static rgpu_mutex g_other_lock = RGPU_MUTEX_INITIALIZER;

static int in_child(void (*fn)(void)) {
  pid_t pid = fork();
  if (pid == 0) {
    alarm(5);
    fn();
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return st;
}

/* Each aborts at its first line, before any frame is written. */
static void flush_without_lock(void) { rgpu_client_flush_locked(g_child_client); }
static void bind_without_lock(void) { rgpu_client_bind_device_locked(g_child_client, 3); }
static void wait_holding_another_lock(void) {
  rgpu_mutex_lock(&g_other_lock);
  rgpu_client_lock(g_child_client);
  rgpu_client_wait_locked(g_child_client, rgpu_client_next_seq_locked(g_child_client), 0, NULL);
}
static void lock_twice(void) {
  rgpu_client_lock(g_child_client);
  rgpu_client_lock(g_child_client);
}
#endif

static void test_lock_invariants(void **state) {
  fixture *f = *state;
  /* Hooks the client calls while it waits run with its lock held. */
  g_hook_client = f->c;
  rgpu_client_set_wait_hook(f->c, record_lock_in_hook);
  rgpu_msg_mem_alloc_req q = {.size = 64};
  assert_int_equal(rgpu_call_mem_alloc(f->c, 0, 0, &q, NULL, NULL), 0);
  assert_int_equal(g_hook_saw_lock, 1);
  rgpu_client_set_wait_hook(f->c, NULL);

  rgpu_client_lock(f->c);
  assert_true(rgpu_client_lock_held(f->c));
  other_thread o = {.c = f->c, .held = -1, .pump = -1};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, look_from_other_thread, &o), 0);
  pthread_join(t, NULL);
  assert_int_equal(o.pump, 1); /* busy: the lock holder reads */
  rgpu_client_unlock(f->c);
  assert_true(rgpu_client_lock_not_held(f->c));
#ifdef NDEBUG
  assert_int_equal(o.held, 1); /* release builds cannot tell */
#else
  assert_int_equal(o.held, 0);
  assert_false(rgpu_client_lock_held(f->c));
  assert_int_equal(rgpu_client_try_pump(f->c), 0); /* free: pumped and released */
  assert_true(rgpu_client_lock_not_held(f->c));
  assert_int_equal(rgpu_mutex_held_count(), 0);

  /* Misuse aborts in debug builds instead of racing or deadlocking. */
  g_child_client = f->c;
  void (*misuse[])(void) = {flush_without_lock, bind_without_lock, wait_holding_another_lock,
                            lock_twice};
  for (size_t i = 0; i < sizeof misuse / sizeof misuse[0]; i++) {
    int st = in_child(misuse[i]);
    assert_true(WIFSIGNALED(st));
    assert_int_equal(WTERMSIG(st), SIGABRT);
  }
  /* Nothing of that reached the server: the session goes on. */
  int frames = f->s.frames;
  assert_int_equal(rgpu_call_mem_alloc(f->c, 0, 0, &q, NULL, NULL), 0);
  assert_int_equal(f->s.frames, frames + 1);
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_frames_match_encoders),
      cmocka_unit_test(test_status_ranges),
      cmocka_unit_test_setup_teardown(test_call_decodes_reply, setup, teardown),
      cmocka_unit_test_setup_teardown(test_call_async_is_queued, setup, teardown),
      cmocka_unit_test_setup_teardown(test_call_server_error, setup, teardown),
      cmocka_unit_test_setup_teardown(test_device_range_routes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_call_malformed_reply, setup, teardown),
      cmocka_unit_test_setup_teardown(test_call_pointer_reply_needs_payload, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lock_invariants, setup, teardown),
      cmocka_unit_test_setup_teardown(test_host_call_event_reaches_hook, setup, teardown),
      cmocka_unit_test_setup_teardown(test_own_async_error_is_the_result, setup, teardown),
      cmocka_unit_test_setup_teardown(test_wait_any_out_of_order, setup, teardown),
      cmocka_unit_test_setup_teardown(test_oversize_copy_reply, setup, teardown),
      cmocka_unit_test_setup_teardown(test_shutdown_event_ends_session, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
