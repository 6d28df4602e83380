/* rgpu_client_resume: the client's resend buffer and reconnect backoff. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rgpu_client_resume.h"
#include "rgpu_copier.h"
#include "rgpu_frame.h"

static size_t frame(uint8_t *out, uint64_t seq, uint32_t len, uint8_t fill) {
  rgpu_frame_hdr h = {RGPU_PROTO_VERSION, RGPU_KIND_REQUEST, 0x22, len, 0, seq};
  rgpu_frame_hdr_encode(out, &h);
  memset(out + RGPU_FRAME_HDR_SIZE, fill, len);
  return RGPU_FRAME_HDR_SIZE + len;
}

/* Three frames in one batch, a fourth with its bulk data in its own iovec
 * (as send_frame writes a large H2D chunk). */
static void fill4(rgpu_resend_buf *b, uint8_t *buf, size_t *ends) {
  size_t off = 0;
  for (int i = 0; i < 3; i++) {
    off += frame(buf + off, (uint64_t)i + 1, 10u * (i + 1), (uint8_t)i);
    ends[i] = off;
  }
  struct iovec io = {buf, off};
  assert_int_equal(rgpu_resend_append(b, &io, 1), 0);
  size_t n4 = frame(buf + off, 4, 1000, 4);
  struct iovec io2[2] = {{buf + off, RGPU_FRAME_HDR_SIZE},
                         {buf + off + RGPU_FRAME_HDR_SIZE, n4 - RGPU_FRAME_HDR_SIZE}};
  assert_int_equal(rgpu_resend_append(b, io2, 2), 0);
  ends[3] = off + n4;
}

static void test_resend_after_partial_execution(void **state) {
  (void)state;
  rgpu_resend_buf b;
  rgpu_resend_init(&b);
  uint8_t buf[2048];
  size_t ends[4];
  fill4(&b, buf, ends);
  assert_int_equal(b.total, ends[3]);
  const uint8_t *p;
  size_t n, frames;
  /* The server executed the first two frames: resend from the third. */
  assert_int_equal(rgpu_resend_from(&b, ends[1], &p, &n, &frames), 0);
  assert_int_equal(n, ends[3] - ends[1]);
  assert_int_equal(frames, 2);
  assert_memory_equal(p, buf + ends[1], n);
  /* Executed everything: nothing to resend. */
  assert_int_equal(rgpu_resend_from(&b, ends[3], &p, &n, &frames), 0);
  assert_int_equal(n, 0);
  assert_int_equal(frames, 0);
  rgpu_resend_free(&b);
}

static void test_confirm_by_reply(void **state) {
  (void)state;
  rgpu_resend_buf b;
  rgpu_resend_init(&b);
  uint8_t buf[2048];
  size_t ends[4];
  fill4(&b, buf, ends);
  /* A reply to request 2: it and request 1 ran. */
  rgpu_resend_confirm(&b, 2);
  assert_int_equal(b.base, ends[1]);
  assert_int_equal(rgpu_resend_held(&b), ends[3] - ends[1]);
  /* Replies out of order (a stream sync answered late): an older one
   * confirms nothing more. */
  rgpu_resend_confirm(&b, 1);
  rgpu_resend_confirm(&b, 99);
  rgpu_resend_confirm(&b, 0);
  assert_int_equal(b.base, ends[1]);
  const uint8_t *p;
  size_t n, frames;
  /* The server cannot have executed less than it confirmed, nor more than
   * was sent: both mean the session cannot be resumed. */
  assert_int_equal(rgpu_resend_from(&b, ends[0], &p, &n, &frames), -1);
  assert_int_equal(rgpu_resend_from(&b, ends[3] + 1, &p, &n, &frames), -1);
  rgpu_resend_confirm(&b, 4);
  assert_int_equal(rgpu_resend_held(&b), 0);
  rgpu_resend_free(&b);
}

/* Wire order, not sequence order: a host-callback frame with a higher
 * sequence may be written before a queued one with a lower sequence. */
static void test_wire_order(void **state) {
  (void)state;
  rgpu_resend_buf b;
  rgpu_resend_init(&b);
  uint8_t f1[64], f2[64];
  size_t n1 = frame(f1, 11, 8, 1), n2 = frame(f2, 10, 8, 2);
  struct iovec a = {f1, n1}, c = {f2, n2};
  rgpu_resend_append(&b, &a, 1);
  rgpu_resend_append(&b, &c, 1);
  rgpu_resend_confirm(&b, 11);
  assert_int_equal(b.base, n1);
  const uint8_t *p;
  size_t n, frames;
  assert_int_equal(rgpu_resend_from(&b, n1, &p, &n, &frames), 0);
  assert_int_equal(n, n2);
  assert_memory_equal(p, f2, n2);
  rgpu_resend_free(&b);
}

/* A long stream with regular confirmations stays small. */
static void test_steady_state(void **state) {
  (void)state;
  rgpu_resend_buf b;
  rgpu_resend_init(&b);
  uint8_t f[4200];
  for (uint64_t s = 1; s <= 20000; s++) {
    size_t n = frame(f, s, 4096, (uint8_t)s);
    struct iovec io = {f, n};
    assert_int_equal(rgpu_resend_append(&b, &io, 1), 0);
    if (s % 8 == 0) rgpu_resend_confirm(&b, s);
  }
  assert_int_equal(rgpu_resend_held(&b), 0);
  assert_true(b.cap <= (1u << 20));
  assert_int_equal(b.oom, 0);
  rgpu_resend_free(&b);
}

/* Confirmations that lag behind by a window: the frame index takes from
 * its front while appends go on at the back, so it slides instead of
 * growing, and still names exactly the unconfirmed frames. */
static void test_index_window(void **state) {
  (void)state;
  rgpu_resend_buf b;
  rgpu_resend_init(&b);
  uint8_t f[64];
  enum { WINDOW = 100, FRAMES = 10000 };
  for (uint64_t s = 1; s <= FRAMES; s++) {
    size_t n = frame(f, s, 16, (uint8_t)s);
    struct iovec io = {f, n};
    assert_int_equal(rgpu_resend_append(&b, &io, 1), 0);
    if (s > WINDOW) rgpu_resend_confirm(&b, s - WINDOW);
    assert_int_equal(b.nidx, s > WINDOW ? WINDOW : s);
    assert_int_equal(b.idx[b.idx_head].seq, s > WINDOW ? s - WINDOW + 1 : 1);
  }
  assert_int_equal(b.idx_cap, 256); /* the first capacity was never outgrown */
  const uint8_t *p;
  size_t n, frames;
  assert_int_equal(rgpu_resend_from(&b, b.base, &p, &n, &frames), 0);
  assert_int_equal(frames, WINDOW);
  assert_int_equal(n, (size_t)WINDOW * (RGPU_FRAME_HDR_SIZE + 16));
  rgpu_frame_hdr h;
  assert_int_equal(rgpu_frame_hdr_decode(p, 1 << 20, &h), 0);
  assert_int_equal(h.seq, FRAMES - WINDOW + 1);
  rgpu_resend_confirm(&b, FRAMES);
  assert_int_equal(b.nidx, 0);
  assert_int_equal(rgpu_resend_held(&b), 0);
  assert_int_equal(b.oom, 0);
  rgpu_resend_free(&b);
}

static void test_backoff(void **state) {
  (void)state;
  assert_int_equal(rgpu_resume_backoff_ms(0), 100);
  assert_int_equal(rgpu_resume_backoff_ms(1), 200);
  assert_int_equal(rgpu_resume_backoff_ms(4), 1600);
  assert_int_equal(rgpu_resume_backoff_ms(5), 2000);
  assert_int_equal(rgpu_resume_backoff_ms(100), 2000);
  assert_int_equal(rgpu_resume_backoff_ms(-3), 100);
}

/* A payload copied aside (by the copier, while the frame is written):
 * the frame is indexed like any other and, once the copy lands, the
 * buffer re-sends exactly the bytes written. */
static void test_append_aside_with_copier(void **state) {
  (void)state;
  rgpu_resend_buf b;
  rgpu_resend_init(&b);
  size_t plen = 3u << 20;
  uint8_t *buf = malloc(RGPU_FRAME_HDR_SIZE + plen);
  size_t n = frame(buf, 9, (uint32_t)plen, 0x5c);
  for (size_t i = 0; i < plen; i++) buf[RGPU_FRAME_HDR_SIZE + i] = (uint8_t)(i * 13);
  struct iovec io[2] = {{buf, RGPU_FRAME_HDR_SIZE}, {buf + RGPU_FRAME_HDR_SIZE, plen}};
  uint8_t *dst = NULL;
  assert_int_equal(rgpu_resend_append_aside(&b, io, 2, 1, &dst), 0);
  assert_non_null(dst);
  rgpu_copier *cp = rgpu_copier_new();
  assert_non_null(cp);
  rgpu_copier_start(cp, dst, io[1].iov_base, plen);
  rgpu_copier_wait(cp);
  const uint8_t *p;
  size_t got, frames;
  assert_int_equal(rgpu_resend_from(&b, 0, &p, &got, &frames), 0);
  assert_int_equal(got, n);
  assert_int_equal(frames, 1);
  assert_memory_equal(p, buf, n);
  /* The copier takes the next copy, and frees cleanly. */
  rgpu_copier_start(cp, buf + RGPU_FRAME_HDR_SIZE, dst, 16);
  rgpu_copier_free(cp);
  rgpu_resend_confirm(&b, 9);
  assert_int_equal(rgpu_resend_held(&b), 0);
  free(buf);
  rgpu_resend_free(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_resend_after_partial_execution),
      cmocka_unit_test(test_confirm_by_reply),
      cmocka_unit_test(test_wire_order),
      cmocka_unit_test(test_steady_state),
      cmocka_unit_test(test_index_window),
      cmocka_unit_test(test_backoff),
      cmocka_unit_test(test_append_aside_with_copier),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
